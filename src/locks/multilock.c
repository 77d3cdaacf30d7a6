/* multilock.c: all-or-nothing over a set of locks (Redisson's
 * RedissonMultiLock, "联锁"), with a wait and a lease like one lock. The locks
 * are taken in one canonical order (by key), whatever order the caller lists
 * them in, so two multi-locks over the same locks never deadlock; on failure,
 * what was taken is released. */
#include "locks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dlock_multilock {
  size_t n;
  dlock_lock **locks; /* the caller's order */
  size_t *order;      /* indexes into locks, in key order */
  /* An event-loop client's: operations in flight, and whether the free
   * came first (the last of them then frees it). */
  unsigned ops;
  bool orphan;
};

int dlock_multilock_new(dlock_lock *const *locks, size_t n,
                        dlock_multilock **out) {
  if (out) *out = NULL;
  /* An argument error is told on the first lock's client; without a
   * lock there is no client to tell. */
  dlock_client *c = NULL;
  for (size_t i = 0; locks && i < n && c == NULL; i++)
    if (locks[i]) c = dl_lock_client(locks[i]);
  if (c == NULL) return DLOCK_EINVAL; /* no client to tell */
  if (out == NULL)
    return dl_seterr(c, DLOCK_EINVAL,
                     "no place for the multi-lock (out is NULL)");
  for (size_t i = 0; i < n; i++)
    if (locks[i] == NULL)
      return dl_seterr(c, DLOCK_EINVAL, "lock %zu of the multi-lock is NULL",
                       i);
  dlock_multilock *m = calloc(1, sizeof *m);
  if (m == NULL || (m->locks = malloc(n * sizeof *m->locks)) == NULL ||
      (m->order = malloc(n * sizeof *m->order)) == NULL) {
    dlock_multilock_free(m);
    return dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  }
  m->n = n;
  memcpy(m->locks, locks, n * sizeof *locks);
  /* Insertion sort by key: a multi-lock spans a handful of locks. */
  for (size_t i = 0; i < n; i++) {
    size_t j = i;
    for (; j > 0 && strcmp(dl_lock_key(locks[m->order[j - 1]]),
                           dl_lock_key(locks[i])) > 0;
         j--)
      m->order[j] = m->order[j - 1];
    m->order[j] = i;
  }
  for (size_t i = 1; i < n; i++)
    if (strcmp(dl_lock_key(m->locks[m->order[i - 1]]),
               dl_lock_key(m->locks[m->order[i]])) == 0) {
      const dlock_lock *twice = m->locks[m->order[i]];
      dlock_multilock_free(m);
      return dl_seterr(dl_lock_client(twice), DLOCK_EINVAL,
                       "the multi-lock names '%s' twice",
                       dl_lock_key(twice) + dl_lock_client(twice)->prefix_len);
    }
  dl_clearerr(c);
  *out = m;
  return 0;
}

void dlock_multilock_free(dlock_multilock *m) {
  if (m == NULL) return;
  if (m->ops > 0) {
    m->orphan = true;
    /* An acquire in flight ends: what it took goes back. */
    dl_op_cancel_for(dl_lock_client(m->locks[0]), m);
    return;
  }
  free(m->locks);
  free(m->order);
  free(m);
}

int dlock_multilock_try_acquire(dlock_multilock *m, int64_t wait_ms,
                                int64_t lease_ms, uint64_t *tokens) {
  if (m == NULL) return DLOCK_EINVAL;
  int64_t deadline = dl_deadline(wait_ms);
  for (size_t k = 0; k < m->n; k++) {
    size_t i = m->order[k];
    int64_t left = -1;
    if (wait_ms >= 0) {
      left = deadline - dl_now_ms();
      if (left < 0) left = 0;
    }
    uint64_t tok = 0;
    int rc = dlock_lock_try_acquire(m->locks[i], left, lease_ms, &tok);
    if (rc != 0) {
      /* All or nothing: give back what was taken, newest first; the
       * caller reads why it failed, not how the give-back went. */
      dlock_client *c = dl_lock_client(m->locks[i]);
      char why[512];
      snprintf(why, sizeof why, "%s", dlock_client_errmsg(c));
      while (k-- > 0)
        dlock_lock_release(m->locks[m->order[k]]);
      if (why[0]) dl_seterr(c, rc, "%s", why);
      return rc;
    }
    if (tokens) tokens[i] = tok;
  }
  return 0;
}

int dlock_multilock_acquire(dlock_multilock *m, int64_t lease_ms,
                            uint64_t *tokens) {
  return dlock_multilock_try_acquire(m, DL_WAIT_FOREVER, lease_ms, tokens);
}

int dlock_multilock_release(dlock_multilock *m) {
  if (m == NULL) return DLOCK_EINVAL;
  int first = 0;
  for (size_t k = m->n; k-- > 0;) {
    int rc = dlock_lock_release(m->locks[m->order[k]]);
    if (rc < 0 && first == 0) first = rc;
  }
  return first;
}

/* ---- on the event loop ----
 * The same walk as above over the locks' event-loop calls: each member's
 * acquire is started from the previous one's callback, and a failure
 * releases what was taken, newest first, before the caller hears it. The
 * members (and m) stay until the operation ends, even if freed during. */
typedef struct multi_op {
  dlock_op op; /* first; op.inner: the member's acquire */
  dlock_multilock *m;
  uint64_t *tokens;
  int64_t wait_ms, lease_ms, deadline;
  size_t k;  /* members taken; while releasing, those left to release */
  int rc;    /* the failure reported (the first one) */
  char msg[512];
} multi_op;

static void multi_fail(multi_op *x, int rc, const char *msg) {
  if (x->rc != 0 || rc >= 0) return;
  x->rc = rc;
  snprintf(x->msg, sizeof x->msg, "%s", msg);
}

/* Unpins the members and m, tells the caller and frees x. */
static void multi_finish(multi_op *x) {
  dlock_multilock *m = x->m;
  dl_op_unwait(&x->op);
  for (size_t i = 0; i < m->n; i++) dl_lock_op_end(m->locks[i]);
  if (--m->ops == 0 && m->orphan) dlock_multilock_free(m);
  x->op.cb(x->rc, 0, x->rc < 0 ? x->msg : "", x->op.ud);
  free(x);
}

static void member_released(int rc, uint64_t token, const char *msg,
                            void *ud);

/* Releases the members left (x->k), newest first. Returns whether one is
 * under way (its callback goes on), else every release failed at once. */
static bool release_next(multi_op *x) {
  while (x->k > 0) {
    dlock_lock *l = x->m->locks[x->m->order[--x->k]];
    int rc = dlock_lock_release_async(l, member_released, x, NULL);
    if (rc == 0) return true;
    multi_fail(x, rc, dlock_client_errmsg(dl_lock_client(l)));
  }
  return false;
}

static void member_released(int rc, uint64_t token, const char *msg,
                            void *ud) {
  multi_op *x = ud;
  (void)token;
  multi_fail(x, rc, msg);
  if (!release_next(x)) multi_finish(x);
}

static void member_acquired(int rc, uint64_t token, const char *msg,
                            void *ud);

/* Starts the next member's acquire: 0, or the code of a start that
 * failed at once (nothing started). */
static int acquire_next(multi_op *x) {
  dlock_multilock *m = x->m;
  if (x->op.cancelled)
    return dl_seterr(dl_lock_client(m->locks[0]), DLOCK_ECANCELED,
                     "cancelled");
  int64_t left = -1;
  if (x->wait_ms >= 0) {
    left = x->deadline - dl_now_ms();
    if (left < 0) left = 0;
  }
  return dlock_lock_acquire_async(m->locks[m->order[x->k]], left, x->lease_ms,
                                  member_acquired, x, &x->op.inner);
}

/* After a failure (x->rc): what was taken goes back, then the caller
 * hears. */
static void multi_unwind(multi_op *x) {
  dl_op_unwait(&x->op);
  if (!release_next(x)) multi_finish(x);
}

static void member_acquired(int rc, uint64_t token, const char *msg,
                            void *ud) {
  multi_op *x = ud;
  x->op.inner = NULL;
  if (rc != 0) {
    multi_fail(x, rc, msg);
    multi_unwind(x);
    return;
  }
  if (x->tokens) x->tokens[x->m->order[x->k]] = token;
  if (++x->k == x->m->n) {
    multi_finish(x);
    return;
  }
  rc = acquire_next(x);
  if (rc != 0) {
    dlock_lock *l = x->m->locks[x->m->order[x->k]];
    multi_fail(x, rc, dlock_client_errmsg(dl_lock_client(l)));
    multi_unwind(x);
  }
}

/* A new operation on m, its members pinned: NULL with *rc. */
static multi_op *multi_new(dlock_multilock *m, dlock_done_cb cb, void *ud,
                           dlock_op **out, int *rc) {
  if (out) *out = NULL;
  if (m == NULL) {
    *rc = DLOCK_EINVAL;
    return NULL;
  }
  multi_op *x = dl_op_new(dl_lock_client(m->locks[0]), sizeof *x, true,
                          "multi-lock", cb, ud, out, rc);
  if (x == NULL) return NULL;
  x->m = m;
  return x;
}

static void multi_pin(multi_op *x) {
  dlock_multilock *m = x->m;
  for (size_t i = 0; i < m->n; i++) dl_lock_op_begin(m->locks[i]);
  m->ops++;
}

int dlock_multilock_acquire_async(dlock_multilock *m, int64_t wait_ms,
                                  int64_t lease_ms, uint64_t *tokens,
                                  dlock_done_cb cb, void *ud, dlock_op **out) {
  int rc;
  multi_op *x = multi_new(m, cb, ud, out, &rc);
  if (x == NULL) return rc;
  x->tokens = tokens;
  x->wait_ms = wait_ms;
  x->lease_ms = lease_ms;
  x->deadline = dl_deadline(wait_ms);
  if ((rc = acquire_next(x)) != 0) { /* nothing taken */
    free(x);
    return rc;
  }
  multi_pin(x);
  dl_op_wait(&x->op, m);
  if (out) *out = &x->op;
  return 0;
}

int dlock_multilock_release_async(dlock_multilock *m, dlock_done_cb cb,
                                  void *ud, dlock_op **out) {
  int rc;
  multi_op *x = multi_new(m, cb, ud, out, &rc);
  if (x == NULL) return rc;
  x->k = m->n;
  multi_pin(x); /* a release finished at once may unpin */
  if (!release_next(x)) {
    /* Each release failed at once (each hold ended here, as a blocking
     * release that fails ends it): the call fails with the first. */
    for (size_t i = 0; i < m->n; i++) dl_lock_op_end(m->locks[i]);
    m->ops--;
    rc = x->rc;
    dl_seterr(dl_lock_client(m->locks[0]), rc, "%s", x->msg);
    free(x);
    return rc;
  }
  if (out) *out = &x->op;
  return 0;
}
