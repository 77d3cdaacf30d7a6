/* async_locks.h: the work both event-loop examples (async_uv.c on libuv,
 * async_event.c on libevent) run on their loop, written once: 100 locks
 * taken and given back at once on one event-loop client, every 10th also
 * wanted by a second handle that has to wait for it. Only the loop around
 * it differs between the examples.
 *
 * Each lock is a small chain of callbacks; every callback runs on the
 * loop's thread, and may start the next operation itself. */
#ifndef DLOCK_EXAMPLE_ASYNC_LOCKS_H
#define DLOCK_EXAMPLE_ASYNC_LOCKS_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dlock_async.h"

#define EX_LOCKS 100
#define EX_CONTENDED_EVERY 10 /* lock 0, 10, 20 ...: two handles */
#define EX_LEASE_MS 10000

typedef struct ex_run ex_run;

/* One lock name, and its handles: a, and for a contended one b, a second
 * owner (on an event-loop client a handle made with owner NULL is its own
 * owner). */
typedef struct ex_lock {
  ex_run *run;
  char name[48];
  dlock_lock *a, *b;
  uint64_t a_token;
  int ends_left; /* releases still to come: 1, or 2 with b */
} ex_lock;

struct ex_run {
  ex_lock locks[EX_LOCKS];
  int done;      /* locks whose every release came back */
  int acquired;  /* acquires that succeeded (a's, and b's after its wait) */
  int released;  /* releases that freed their lock */
  int contended; /* b's tries that found the lock held */
  bool ended;    /* on_end was called: later callbacks are ignored */
  char why[512]; /* the first failure, "" if none */
  void (*on_end)(void *ud); /* stops the caller's loop */
  void *ud;
  struct timespec t0;
};

static void ex_end(ex_run *r) {
  if (r->ended) return;
  r->ended = true;
  r->on_end(r->ud);
}

/* Records the first failure and stops the run. */
static void ex_fail(ex_lock *lk, const char *step, int rc, const char *msg) {
  ex_run *r = lk->run;
  if (r->why[0] == '\0')
    snprintf(r->why, sizeof r->why, "%s %s: %s%s%s", lk->name, step,
             rc <= 0 ? dlock_err_name(rc) : "unexpected result",
             msg && *msg ? ": " : "", msg ? msg : "");
  ex_end(r);
}

static void ex_one_end(ex_lock *lk) {
  if (--lk->ends_left == 0 && ++lk->run->done == EX_LOCKS) ex_end(lk->run);
}

static void ex_released(int rc, uint64_t token, const char *msg, void *ud) {
  ex_lock *lk = ud;
  (void)token;
  if (lk->run->ended) return; /* completed by the close */
  if (rc != 1) {
    ex_fail(lk, "release", rc, msg);
    return;
  }
  lk->run->released++;
  ex_one_end(lk);
}

/* b got the lock after its wait: the fencing token moved on. */
static void ex_b_acquired(int rc, uint64_t token, const char *msg, void *ud) {
  ex_lock *lk = ud;
  if (lk->run->ended) return;
  if (rc != 0) {
    ex_fail(lk, "second acquire", rc, msg);
    return;
  }
  if (token <= lk->a_token) {
    ex_fail(lk, "second token", 1, "");
    return;
  }
  lk->run->acquired++;
  if ((rc = dlock_lock_release_async(lk->b, ex_released, lk, NULL)) != 0)
    ex_fail(lk, "second release", rc, "");
}

/* b's try while a holds the lock: it must be refused. Then b waits for
 * it, and a releases it. One connection sends requests in the order they
 * are started, so b's first attempt reaches the server before a's release
 * and b has to wait. */
static void ex_b_tried(int rc, uint64_t token, const char *msg, void *ud) {
  ex_lock *lk = ud;
  (void)token;
  if (lk->run->ended) return;
  if (rc != DLOCK_EBUSY) {
    ex_fail(lk, "try while held", rc, msg);
    return;
  }
  lk->run->contended++;
  rc = dlock_lock_acquire_async(lk->b, 5000, EX_LEASE_MS, ex_b_acquired, lk,
                                NULL);
  if (rc != 0) {
    ex_fail(lk, "second acquire", rc, "");
    return;
  }
  if ((rc = dlock_lock_release_async(lk->a, ex_released, lk, NULL)) != 0)
    ex_fail(lk, "release", rc, "");
}

static void ex_a_acquired(int rc, uint64_t token, const char *msg, void *ud) {
  ex_lock *lk = ud;
  if (lk->run->ended) return;
  if (rc != 0 || token == 0) {
    ex_fail(lk, "acquire", rc, msg);
    return;
  }
  lk->run->acquired++;
  lk->a_token = token;
  if (lk->b) /* wait_ms 0: one attempt */
    rc = dlock_lock_acquire_async(lk->b, 0, EX_LEASE_MS, ex_b_tried, lk, NULL);
  else
    rc = dlock_lock_release_async(lk->a, ex_released, lk, NULL);
  if (rc != 0) ex_fail(lk, lk->b ? "try while held" : "release", rc, "");
}

/* Makes the handles on c (names "dlock-example:<tag>:<i>") and starts
 * every acquire. on_end(ud) is called once, from a callback, when the last
 * lock is done or at the first failure. Returns 0, or a code (with
 * r->why). */
static int ex_start(ex_run *r, dlock_client *c, const char *tag,
                    void (*on_end)(void *), void *ud) {
  memset(r, 0, sizeof *r);
  r->on_end = on_end;
  r->ud = ud;
  clock_gettime(CLOCK_MONOTONIC, &r->t0);
  for (int i = 0; i < EX_LOCKS; i++) {
    ex_lock *lk = &r->locks[i];
    lk->run = r;
    snprintf(lk->name, sizeof lk->name, "dlock-example:%s:%d", tag, i);
    bool two = i % EX_CONTENDED_EVERY == 0;
    lk->ends_left = two ? 2 : 1;
    int rc = dlock_lock_new(c, lk->name, NULL, &lk->a);
    if (rc == 0 && two) rc = dlock_lock_new(c, lk->name, NULL, &lk->b);
    if (rc == 0)
      rc = dlock_lock_acquire_async(lk->a, 0, EX_LEASE_MS, ex_a_acquired, lk,
                                    NULL);
    if (rc != 0) {
      snprintf(r->why, sizeof r->why, "%s: %s: %s", lk->name,
               dlock_err_name(rc), dlock_client_errmsg(c));
      return rc;
    }
  }
  return 0;
}

/* Frees the handles (before the client is closed; one with an operation
 * still running is freed when it completes, within the close). */
static void ex_free(ex_run *r) {
  r->ended = true;
  for (int i = 0; i < EX_LOCKS; i++) {
    dlock_lock_free(r->locks[i].a);
    dlock_lock_free(r->locks[i].b);
  }
}

/* Prints the summary; returns whether every lock went as expected. */
static bool ex_report(const char *prog, const ex_run *r) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  long ms = (long)(t1.tv_sec - r->t0.tv_sec) * 1000 +
            (t1.tv_nsec - r->t0.tv_nsec) / 1000000;
  int two = (EX_LOCKS + EX_CONTENDED_EVERY - 1) / EX_CONTENDED_EVERY;
  bool ok = r->why[0] == '\0' && r->done == EX_LOCKS &&
            r->acquired == EX_LOCKS + two && r->released == EX_LOCKS + two &&
            r->contended == two;
  printf("%s: %d locks, %d acquired, %d released, %d contended (the second "
         "owner waited), %ld ms: %s\n",
         prog, EX_LOCKS, r->acquired, r->released, r->contended, ms,
         ok ? "ok" : "FAILED");
  if (r->why[0]) fprintf(stderr, "%s: %s\n", prog, r->why);
  return ok;
}

#endif
