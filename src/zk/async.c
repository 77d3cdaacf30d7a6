/* async.c: the ZooKeeper backend on an event-loop client. Each operation
 * runs its blocking form as a job of the core's offload (a thread of its
 * own, as a Curator caller's thread blocks in acquire()), and its result
 * reaches the loop's thread through the offload's eventfd; so do the
 * session's loss notices. The loop never blocks on ZooKeeper. A cancel
 * ends the operation's wait at once (the waits check dl_zk_cancelled). */
#include "zkb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum zop_kind {
  ZOP_ACQUIRE,
  ZOP_RELEASE,
  ZOP_FORCE,
  ZOP_QUERY,
  ZOP_INSPECT,
  ZOP_SCAN,
  ZOP_PING,
  ZOP_RENEW,
  ZOP_PERMIT,
  ZOP_UPDATE,
  ZOP_FENCE
} zop_kind;

/* One operation in flight: its arguments (borrowed until done runs, as
 * the seam says), its result and detail. */
struct dl_async {
  dl_job job; /* first: the offload's */
  dl_zk *z;
  zop_kind kind;
  dl_done_fn done;
  void *ud;
  int rc;
  char msg[512];
  dl_acquire *a;
  const dl_lock_ref *l;
  const dl_sync_ref *s;
  int64_t lease_ms, deadline;
  int count, n;
  dl_lock_query q;
  long long *v, nn;
  const char *key, *match, *id;
  dlock_lock_state *st;
  size_t prefix_len;
  dlock_scan_cb cb;
  void *cb_ud;
  char **names; /* a scan's, delivered to cb on the loop */
  int nnames, cap;
  dl_renew_item *items;
  int *calls;
  bool wait;
  int64_t *valid_until;
  dl_sync_op op;
  dl_fence_req *f;
};

bool dl_zk_cancelled(void) {
  return dl_offload_cancelled();
}

/* A scan's names, kept for the loop. */
static int collect(const char *name, void *ud) {
  dl_async *op = ud;
  if (op->nnames == op->cap) {
    int cap = op->cap ? 2 * op->cap : 16;
    char **nv = realloc(op->names, (size_t)cap * sizeof *nv);
    if (nv == NULL) return 1;
    op->names = nv;
    op->cap = cap;
  }
  if ((op->names[op->nnames] = dl_strdup(name)) == NULL) return 1;
  op->nnames++;
  return 0;
}

static int run(dl_async *op) {
  dl_backend *b = &op->z->base;
  switch (op->kind) {
  case ZOP_ACQUIRE:
    return dl_zk_lock_acquire(b, op->a);
  case ZOP_RELEASE:
    return dl_zk_lock_release(b, op->l, op->lease_ms, op->count);
  case ZOP_FORCE:
    return dl_zk_lock_force_release(b, op->l);
  case ZOP_QUERY:
    return dl_zk_lock_query(b, op->l, op->q, op->v);
  case ZOP_INSPECT:
    return dl_zk_inspect(b, op->key, op->st);
  case ZOP_SCAN:
    return dl_zk_scan(b, op->match, op->prefix_len, collect, op);
  case ZOP_PING:
    return dl_zk_ping(b);
  case ZOP_RENEW:
    return dl_zk_renew(b, op->deadline, op->lease_ms, op->n, op->items,
                       op->calls);
  case ZOP_PERMIT:
    return dl_zk_permit_acquire(b, op->s, op->id, op->lease_ms, op->wait,
                                op->deadline, op->valid_until);
  case ZOP_UPDATE:
    return dl_zk_sync_update(b, op->s, op->op, op->nn, op->id, op->v);
  case ZOP_FENCE: return dl_zk_fence(b, op->f);
  }
  return DLOCK_EINVAL;
}

/* The job's thread: the operation's blocking form. */
static void op_run(dl_job *j) {
  dl_async *op = (dl_async *)j;
  op->rc = run(op);
  /* The detail is this thread's: copied for the loop's. */
  if (op->rc < 0)
    snprintf(op->msg, sizeof op->msg, "%s",
             dlock_client_errmsg(op->z->env->err_owner));
}

/* Calls op's done (on the loop's thread) and frees op. */
static void op_finish(dl_job *j) {
  dl_async *op = (dl_async *)j;
  dl_zk *z = op->z;
  int rc = op->rc;
  if (op->kind == ZOP_SCAN) { /* the names, to cb here: how many passed */
    bool stop = rc < 0;
    int passed = 0;
    for (int i = 0; i < op->nnames; i++) {
      if (!stop) {
        passed++;
        stop = op->cb(op->names[i], op->cb_ud) != 0;
      }
      free(op->names[i]);
    }
    free(op->names);
    if (rc >= 0) rc = passed;
  }
  if (rc < 0) dl_seterr(z->env->err_owner, rc, "%s", op->msg);
  dl_done_fn done = op->done;
  void *ud = op->ud;
  free(op);
  done(ud, rc);
}

/* The session's loss notices, passed on on the loop's thread (the
 * offload's woken): whether any key may be lost, then the keys lost. */
static void on_notices(void *ud) {
  dl_zk *z = ud;
  char *keys[sizeof z->notice_keys / sizeof z->notice_keys[0]];
  pthread_mutex_lock(&z->mu);
  bool notice = z->notice_posted;
  z->notice_posted = false;
  int nkeys = z->nkeys;
  memcpy(keys, z->notice_keys, (size_t)nkeys * sizeof *keys);
  z->nkeys = 0;
  pthread_mutex_unlock(&z->mu);
  if (notice && z->notice) z->notice(z->notice_ud, NULL, 0);
  for (int i = 0; i < nkeys; i++) {
    if (!notice && z->notice) z->notice(z->notice_ud, keys[i], strlen(keys[i]));
    free(keys[i]);
  }
}

void dl_zk_post_notice(dl_zk *z) {
  pthread_mutex_lock(&z->mu);
  z->notice_posted = true;
  pthread_mutex_unlock(&z->mu);
  dl_offload_wake(z->off);
}

void dl_zk_post_notice_key(dl_zk *z, const char *key) {
  char *k = dl_strdup(key);
  pthread_mutex_lock(&z->mu);
  if (k && z->nkeys < (int)(sizeof z->notice_keys / sizeof *z->notice_keys)) {
    z->notice_keys[z->nkeys++] = k;
  } else { /* too many at once (or out of memory): every key is checked */
    free(k);
    z->notice_posted = true;
  }
  pthread_mutex_unlock(&z->mu);
  dl_offload_wake(z->off);
}

int dl_zk_async_init(dl_zk *z) {
  return dl_offload_new(z->env->loop, on_notices, z, &z->off);
}

void dl_zk_async_close(dl_zk *z) {
  /* The client is closing (its flag is set): the operations' waits end;
   * the offload waits for their threads, then gives every result to its
   * caller. Notices not yet passed on are dropped (zk_free frees them). */
  pthread_mutex_lock(&z->mu);
  pthread_cond_broadcast(&z->cv);
  pthread_mutex_unlock(&z->mu);
  dl_offload_free(z->off);
  z->off = NULL;
}

/* Starts op on a thread of its own. */
static int start(dl_zk *z, dl_async *op, dl_done_fn done, void *ud,
                 dl_async **out) {
  op->z = z;
  op->done = done;
  op->ud = ud;
  op->job.run = op_run;
  op->job.finish = op_finish;
  if (dl_offload_start(z->off, &op->job) != 0) {
    free(op);
    return dl_seterr(z->env->err_owner, DLOCK_ENOMEM, "cannot start a "
                     "thread for the operation");
  }
  *out = op;
  return 0;
}

static dl_async *new_op(dl_zk *z, zop_kind kind) {
  dl_async *op = calloc(1, sizeof *op);
  if (op == NULL) {
    dl_seterr(z->env->err_owner, DLOCK_ENOMEM, "out of memory");
    return NULL;
  }
  op->kind = kind;
  return op;
}

#define NEW(kind)                                                              \
  dl_zk *z = (dl_zk *)b;                                                       \
  dl_async *op = new_op(z, kind);                                              \
  if (op == NULL) return DLOCK_ENOMEM

int dl_zk_lock_acquire_async(dl_backend *b, dl_acquire *a, dl_done_fn done,
                             void *ud, dl_async **out) {
  NEW(ZOP_ACQUIRE);
  op->a = a;
  return start(z, op, done, ud, out);
}

int dl_zk_lock_release_async(dl_backend *b, const dl_lock_ref *l,
                             int64_t lease_ms, int count, dl_done_fn done,
                             void *ud, dl_async **out) {
  NEW(ZOP_RELEASE);
  op->l = l;
  op->lease_ms = lease_ms;
  op->count = count;
  return start(z, op, done, ud, out);
}

int dl_zk_lock_force_release_async(dl_backend *b, const dl_lock_ref *l,
                                   dl_done_fn done, void *ud,
                                   dl_async **out) {
  NEW(ZOP_FORCE);
  op->l = l;
  return start(z, op, done, ud, out);
}

int dl_zk_lock_query_async(dl_backend *b, const dl_lock_ref *l,
                           dl_lock_query q, long long *v, dl_done_fn done,
                           void *ud, dl_async **out) {
  NEW(ZOP_QUERY);
  op->l = l;
  op->q = q;
  op->v = v;
  return start(z, op, done, ud, out);
}

int dl_zk_inspect_async(dl_backend *b, const char *key, dlock_lock_state *st,
                        dl_done_fn done, void *ud, dl_async **out) {
  NEW(ZOP_INSPECT);
  op->key = key;
  op->st = st;
  return start(z, op, done, ud, out);
}

int dl_zk_scan_async(dl_backend *b, const char *match, size_t prefix_len,
                     dlock_scan_cb cb, void *cb_ud, dl_done_fn done, void *ud,
                     dl_async **out) {
  NEW(ZOP_SCAN);
  op->match = match;
  op->prefix_len = prefix_len;
  op->cb = cb;
  op->cb_ud = cb_ud;
  return start(z, op, done, ud, out);
}

int dl_zk_ping_async(dl_backend *b, dl_done_fn done, void *ud,
                     dl_async **out) {
  NEW(ZOP_PING);
  return start(z, op, done, ud, out);
}

int dl_zk_renew_async(dl_backend *b, int64_t deadline, int64_t lease_ms, int n,
                      dl_renew_item *items, int *calls, dl_done_fn done,
                      void *ud, dl_async **out) {
  NEW(ZOP_RENEW);
  op->deadline = deadline;
  op->lease_ms = lease_ms;
  op->n = n;
  op->items = items;
  op->calls = calls;
  return start(z, op, done, ud, out);
}

int dl_zk_permit_acquire_async(dl_backend *b, const dl_sync_ref *s,
                               const char *id, int64_t lease_ms, bool wait,
                               int64_t deadline, int64_t *valid_until,
                               dl_done_fn done, void *ud, dl_async **out) {
  NEW(ZOP_PERMIT);
  op->s = s;
  op->id = id;
  op->lease_ms = lease_ms;
  op->wait = wait;
  op->deadline = deadline;
  op->valid_until = valid_until;
  return start(z, op, done, ud, out);
}

int dl_zk_sync_update_async(dl_backend *b, const dl_sync_ref *s,
                            dl_sync_op sop, long long n, const char *id,
                            long long *v, dl_done_fn done, void *ud,
                            dl_async **out) {
  NEW(ZOP_UPDATE);
  op->s = s;
  op->op = sop;
  op->nn = n;
  op->id = id;
  op->v = v;
  return start(z, op, done, ud, out);
}

int dl_zk_fence_async(dl_backend *b, dl_fence_req *f, dl_done_fn done, void *ud,
                      dl_async **out) {
  NEW(ZOP_FENCE);
  op->f = f;
  return start(z, op, done, ud, out);
}

void dl_zk_cancel(dl_backend *b, dl_async *op) {
  dl_zk *z = (dl_zk *)b;
  dl_offload_cancel(&op->job);
  pthread_mutex_lock(&z->mu);
  pthread_cond_broadcast(&z->cv); /* its wait looks again */
  pthread_mutex_unlock(&z->mu);
}

/* ---- the blocking entries, as the seam's table has them ----
 * On an event-loop client they refuse (as the Redis backend's): a blocking
 * call would block the loop's thread. The operations' threads above call
 * the recipes directly. */
static int refused(dl_backend *b) {
  dl_zk *z = (dl_zk *)b;
  if (z->env->loop == NULL) return 0;
  return dl_seterr(z->env->err_owner, DLOCK_EINVAL,
                   "a blocking call on an event-loop client");
}

#define BLOCKING(name, params, args)                                           \
  int dl_zk_b_##name params {                                                  \
    int rc = refused(b);                                                       \
    return rc != 0 ? rc : dl_zk_##name args;                                   \
  }
BLOCKING(lock_acquire, (dl_backend * b, dl_acquire *a), (b, a))
BLOCKING(lock_release,
         (dl_backend * b, const dl_lock_ref *l, int64_t lease_ms, int count),
         (b, l, lease_ms, count))
BLOCKING(lock_force_release, (dl_backend * b, const dl_lock_ref *l), (b, l))
BLOCKING(lock_query,
         (dl_backend * b, const dl_lock_ref *l, dl_lock_query q, long long *v),
         (b, l, q, v))
BLOCKING(inspect, (dl_backend * b, const char *key, dlock_lock_state *st),
         (b, key, st))
BLOCKING(scan,
         (dl_backend * b, const char *match, size_t prefix_len,
          dlock_scan_cb cb, void *ud),
         (b, match, prefix_len, cb, ud))
BLOCKING(waiters,
         (dl_backend * b, const char *prefix, dlock_waiter_cb cb, void *ud),
         (b, prefix, cb, ud))
BLOCKING(renew,
         (dl_backend * b, int64_t deadline, int64_t lease_ms, int n,
          dl_renew_item *items, int *calls),
         (b, deadline, lease_ms, n, items, calls))
BLOCKING(permit_acquire,
         (dl_backend * b, const dl_sync_ref *s, const char *id,
          int64_t lease_ms, bool wait, int64_t deadline, int64_t *valid_until),
         (b, s, id, lease_ms, wait, deadline, valid_until))
BLOCKING(sync_update,
         (dl_backend * b, const dl_sync_ref *s, dl_sync_op op, long long n,
          const char *id, long long *v),
         (b, s, op, n, id, v))
BLOCKING(ping, (dl_backend * b), (b))
BLOCKING(fence, (dl_backend * b, dl_fence_req *f), (b, f))
BLOCKING(elect_leader,
         (dl_backend * b, const dl_sync_ref *s, char *buf, size_t len),
         (b, s, buf, len))
