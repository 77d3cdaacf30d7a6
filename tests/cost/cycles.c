/* cycles.c: the cost gate's fixed workload (tests/test_cost.sh). N
 * uncontended lock cycles (acquire, release) of one lock on one client,
 * in the blocking or the event-loop form, and nothing else, so that what
 * the client executes and what the server runs per cycle can be counted
 * (callgrind's instructions, INFO commandstats) by the difference of two
 * runs of N and 2N cycles, which cancels the open and close.
 *
 *   cycles URL blocking|loop|redisson N [NAME]
 *
 * On etcd:// the locks ride on the client's session lease (the cycles'
 * lease is the session's), as `dlock bench`'s do.
 *
 * redisson: Redisson's cycle on a plain hiredis connection, one command
 * at a time (src/cli/bench/redisson.c), the baseline the gate measures
 * the server's side of dlock's against (URL redis://HOST:PORT only).
 *
 * Exits 0 when every cycle acquired and freed the lock, else 1 with the
 * reason on stderr. */
#include "cli/bench/redisson.h"
#include "dlock.h"
#include "dlock_async.h"

#include <hiredis/hiredis.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct loop_run {
  dlock_lock *l;
  long left;
  int rc;
  char why[256];
  int done;
} loop_run;

static void on_release(int rc, uint64_t token, const char *msg, void *ud);

static void on_acquire(int rc, uint64_t token, const char *msg, void *ud) {
  loop_run *r = ud;
  (void)token;
  if (rc != 0) {
    r->rc = rc;
    snprintf(r->why, sizeof r->why, "acquire: %s %s", dlock_strerror(rc), msg);
    r->done = 1;
    return;
  }
  rc = dlock_lock_release_async(r->l, on_release, r, NULL);
  if (rc != 0) {
    r->rc = rc;
    snprintf(r->why, sizeof r->why, "release: %s", dlock_strerror(rc));
    r->done = 1;
  }
}

static void on_release(int rc, uint64_t token, const char *msg, void *ud) {
  loop_run *r = ud;
  (void)token;
  if (rc != 1) {
    r->rc = rc < 0 ? rc : DLOCK_EPROTO;
    snprintf(r->why, sizeof r->why, "release: %d %s", rc, msg);
    r->done = 1;
    return;
  }
  if (--r->left == 0) {
    r->done = 1;
    return;
  }
  rc = dlock_lock_acquire_async(r->l, 0, 10000, on_acquire, r, NULL);
  if (rc != 0) {
    r->rc = rc;
    snprintf(r->why, sizeof r->why, "acquire: %s", dlock_strerror(rc));
    r->done = 1;
  }
}

static int run_loop(const dlock_client_options *o, const char *name, long n) {
  dlock_loop *lp = NULL;
  dlock_client *c = NULL;
  int rc = dlock_loop_new(NULL, &lp);
  if (rc != 0) {
    fprintf(stderr, "cycles: loop: %s\n", dlock_strerror(rc));
    return 1;
  }
  rc = dlock_client_open_async(o, lp, &c);
  if (rc != 0) {
    fprintf(stderr, "cycles: open: %s\n", dlock_client_open_errmsg());
    dlock_loop_free(lp);
    return 1;
  }
  loop_run r = {0};
  r.left = n;
  rc = dlock_lock_new(c, name, NULL, &r.l);
  if (rc == 0)
    rc = dlock_lock_acquire_async(r.l, 0, 10000, on_acquire, &r, NULL);
  if (rc != 0) {
    r.rc = rc;
    snprintf(r.why, sizeof r.why, "start: %s", dlock_strerror(rc));
    r.done = 1;
  }
  while (!r.done)
    if (dlock_loop_run(lp, -1) < 0) break;
  dlock_lock_free(r.l);
  dlock_client_close(c);
  dlock_loop_free(lp);
  if (!r.done || r.rc != 0) {
    fprintf(stderr, "cycles: %s\n", r.done ? r.why : "the loop failed");
    return 1;
  }
  return 0;
}

static int run_blocking(const dlock_client_options *o, const char *name,
                        long n) {
  dlock_client *c = NULL;
  if (dlock_client_open(o, &c) != 0) {
    fprintf(stderr, "cycles: open: %s\n", dlock_client_open_errmsg());
    return 1;
  }
  dlock_lock *l = NULL;
  int rc = dlock_lock_new(c, name, NULL, &l);
  for (long i = 0; rc == 0 && i < n; i++) {
    rc = dlock_lock_try_acquire(l, 0, 10000, NULL);
    if (rc == 0) rc = dlock_lock_release(l) == 1 ? 0 : DLOCK_EPROTO;
  }
  if (rc != 0)
    fprintf(stderr, "cycles: %s: %s\n", dlock_strerror(rc),
            dlock_client_errmsg(c));
  dlock_lock_free(l);
  dlock_client_close(c);
  return rc == 0 ? 0 : 1;
}

static int run_redisson(const char *url, const char *name, long n) {
  char host[256];
  int port = 0;
  if (sscanf(url, "redis://%255[^:]:%d", host, &port) != 2) {
    fprintf(stderr, "cycles: redisson needs redis://HOST:PORT\n");
    return 2;
  }
  redisContext *c = redisConnect(host, port);
  if (c == NULL || c->err) {
    fprintf(stderr, "cycles: connect: %s\n", c ? c->errstr : "no memory");
    if (c) redisFree(c);
    return 1;
  }
  char lsha[41], usha[41], *cmds = NULL;
  int len = bench_redisson_load(c, lsha, usha) == 0
                ? bench_redisson_format(&cmds, lsha, usha, name)
                : -1;
  /* One command at a time, as the blocking dlock cycle goes: the three
   * formatted commands are sent in turn. */
  int ok = len > 0;
  for (long i = 0; ok && i < n; i++) {
    const char *p = cmds;
    for (int k = 0; ok && k < 3; k++) {
      /* Each formatted command is a RESP array: find its end by parsing
       * its element count and bulk lengths. */
      const char *q = p;
      long elems = strtol(q + 1, (char **)&q, 10);
      q += 2;
      for (long e = 0; e < elems; e++) {
        long bl = strtol(q + 1, (char **)&q, 10);
        q += 2 + bl + 2;
      }
      redisReply *r = NULL;
      ok = redisAppendFormattedCommand(c, p, (size_t)(q - p)) == REDIS_OK &&
           redisGetReply(c, (void **)&r) == REDIS_OK && r &&
           r->type != REDIS_REPLY_ERROR;
      if (ok && k == 1) ok = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
      if (r) freeReplyObject(r);
      p = q;
    }
  }
  if (!ok) fprintf(stderr, "cycles: redisson: a cycle failed\n");
  free(cmds);
  redisFree(c);
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: cycles URL blocking|loop|redisson N [NAME]\n");
    return 2;
  }
  long n = strtol(argv[3], NULL, 10);
  const char *name = argc > 4 ? argv[4] : "cost:cycle";
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = argv[1];
  o.password = getenv("DLOCK_PASSWORD");
  /* etcd: the client's session lease is the cycles' 10 s, so that the
   * holds ride on it (two txns a cycle, as `dlock bench`'s), where a
   * lease of each hold's own adds a keepalive a cycle. */
  if (strncmp(o.url, "etcd", 4) == 0) o.watchdog_timeout_ms = 10000;
  if (n <= 0) return 2;
  if (strcmp(argv[2], "blocking") == 0) return run_blocking(&o, name, n);
  if (strcmp(argv[2], "loop") == 0) return run_loop(&o, name, n);
  if (strcmp(argv[2], "redisson") == 0) return run_redisson(argv[1], name, n);
  fprintf(stderr, "cycles: the mode is blocking, loop or redisson\n");
  return 2;
}
