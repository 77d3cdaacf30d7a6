/* blockloop.c: the event-loop form of a backend whose operations block
 * (blockloop.h): an operation in flight is a job of the core's offload,
 * running the backend's blocking entry on a thread of its own; its result
 * reaches the loop's thread through the offload's eventfd, and so do the
 * backend's loss notices. A cancel ends the operation's wait at once (the
 * backend's waits check dl_offload_cancelled). */
#include "blockloop.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Keys of loss notices kept for the loop at once; more: any key. */
#define NOTICE_KEYS 16

struct dl_blockloop {
  dl_backend_ops ops;        /* first: b->ops points here (form_of) */
  const dl_backend_ops *run; /* the backend's own: the blocking entries */
  dl_backend_ops jobs;       /* the *_async entries as jobs */
  void (*own_cancel)(dl_backend *, dl_async *); /* own entries' cancel */
  dl_backend *b;
  const dl_backend_env *env;
  void (*kick)(dl_backend *);
  dl_offload *off;
  /* The client's notice function (watch_losses), called on the loop's
   * thread; mu guards it and the notices to pass on. */
  pthread_mutex_t mu;
  dl_notice_fn notice;
  void *notice_ud;
  bool any;                /* any key may be lost */
  char *keys[NOTICE_KEYS]; /* these keys may be */
  int nkeys;
  bool closed; /* dl_blockloop_close: notices are dropped */
  /* dl_blockloop_set_woken's */
  void (*woken)(dl_backend *);
};

static dl_blockloop *form_of(dl_backend *b) {
  return (dl_blockloop *)b->ops;
}

typedef enum bl_kind {
  BL_ACQUIRE,
  BL_RELEASE,
  BL_FORCE,
  BL_QUERY,
  BL_INSPECT,
  BL_SCAN,
  BL_SEM,
  BL_PERMIT,
  BL_LATCH,
  BL_UPDATE,
  BL_RENEW,
  BL_QUEUE,
  BL_FENCE,
  BL_PING
} bl_kind;

/* One operation in flight: its arguments (borrowed until done runs, as
 * the seam says), its result and detail. */
struct dl_async {
  dl_blockloop_head head; /* own false */
  dl_job job;
  dl_blockloop *f;
  bl_kind kind;
  dl_done_fn done;
  void *ud;
  int rc;
  char msg[512];
  dl_acquire *a;
  const dl_lock_ref *l;
  const dl_sync_ref *s;
  int64_t lease_ms, deadline;
  int count, n;
  bool wait;
  dl_lock_query q;
  long long *v, nn;
  const char *key, *match, *id;
  dlock_lock_state *st;
  size_t prefix_len;
  dlock_scan_cb cb;
  void *cb_ud;
  char **names; /* a scan's, passed to cb on the loop's thread */
  int nnames, cap;
  dl_renew_item *items;
  int *calls;
  int64_t *valid_until;
  dl_sync_op op;
  dl_queue_req *qr;
  dl_fence_req *fr;
};

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
  const dl_backend_ops *r = op->f->run;
  dl_backend *b = op->f->b;
  switch (op->kind) {
  case BL_ACQUIRE: return r->lock_acquire(b, op->a);
  case BL_RELEASE: return r->lock_release(b, op->l, op->lease_ms, op->count);
  case BL_FORCE: return r->lock_force_release(b, op->l);
  case BL_QUERY: return r->lock_query(b, op->l, op->q, op->v);
  case BL_INSPECT: return r->inspect(b, op->key, op->st);
  case BL_SCAN: return r->scan(b, op->match, op->prefix_len, collect, op);
  case BL_SEM: return r->sem_acquire(b, op->s, op->n, op->wait, op->deadline);
  case BL_PERMIT:
    return r->permit_acquire(b, op->s, op->id, op->lease_ms, op->wait,
                             op->deadline, op->valid_until);
  case BL_LATCH: return r->latch_await(b, op->s, op->wait, op->deadline);
  case BL_UPDATE:
    return r->sync_update(b, op->s, op->op, op->nn, op->id, op->v);
  case BL_RENEW:
    return r->renew(b, op->deadline, op->lease_ms, op->n, op->items, op->calls);
  case BL_QUEUE: return r->queue(b, op->s, op->qr);
  case BL_FENCE: return r->fence(b, op->fr);
  case BL_PING: return r->ping(b);
  }
  return DLOCK_EINVAL;
}

static dl_async *op_of(dl_job *j) {
  return (dl_async *)((char *)j - offsetof(dl_async, job));
}

/* The job's thread: the operation's blocking form. */
static void op_run(dl_job *j) {
  dl_async *op = op_of(j);
  op->rc = run(op);
  /* The detail is this thread's: copied for the loop's. */
  if (op->rc < 0)
    snprintf(op->msg, sizeof op->msg, "%s",
             dlock_client_errmsg(op->f->env->err_owner));
}

/* Calls op's done (on the loop's thread) and frees op. */
static void op_finish(dl_job *j) {
  dl_async *op = op_of(j);
  int rc = op->rc;
  if (op->kind == BL_SCAN) { /* the names, to cb here: how many passed */
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
  if (rc < 0) dl_seterr(op->f->env->err_owner, rc, "%s", op->msg);
  dl_done_fn done = op->done;
  void *ud = op->ud;
  free(op);
  done(ud, rc);
}

/* Starts a new operation of `kind` whose arguments `set` fills in: 0 and
 * *out, or a negative code (done is never called). */
#define START(kind_, set)                                                      \
  do {                                                                         \
    dl_blockloop *f = form_of(b);                                              \
    dl_async *op = calloc(1, sizeof *op);                                      \
    if (op == NULL)                                                            \
      return dl_seterr(f->env->err_owner, DLOCK_ENOMEM, "out of memory");      \
    op->f = f;                                                                 \
    op->kind = kind_;                                                          \
    op->done = done;                                                           \
    op->ud = ud;                                                               \
    set;                                                                       \
    return start(f, op, out);                                                  \
  } while (0)

static int start(dl_blockloop *f, dl_async *op, dl_async **out) {
  op->job.run = op_run;
  op->job.finish = op_finish;
  if (dl_offload_start(f->off, &op->job) != 0) {
    free(op);
    return dl_seterr(f->env->err_owner, DLOCK_ENOMEM,
                     "cannot start a thread for the operation");
  }
  *out = op;
  return 0;
}

static int acquire_async(dl_backend *b, dl_acquire *a, dl_done_fn done,
                         void *ud, dl_async **out) {
  START(BL_ACQUIRE, op->a = a);
}

static int release_async(dl_backend *b, const dl_lock_ref *l, int64_t lease_ms,
                         int count, dl_done_fn done, void *ud, dl_async **out) {
  START(BL_RELEASE, (op->l = l, op->lease_ms = lease_ms, op->count = count));
}

static int force_async(dl_backend *b, const dl_lock_ref *l, dl_done_fn done,
                       void *ud, dl_async **out) {
  START(BL_FORCE, op->l = l);
}

static int query_async(dl_backend *b, const dl_lock_ref *l, dl_lock_query q,
                       long long *v, dl_done_fn done, void *ud,
                       dl_async **out) {
  START(BL_QUERY, (op->l = l, op->q = q, op->v = v));
}

static int inspect_async(dl_backend *b, const char *key, dlock_lock_state *st,
                         dl_done_fn done, void *ud, dl_async **out) {
  START(BL_INSPECT, (op->key = key, op->st = st));
}

static int scan_async(dl_backend *b, const char *match, size_t prefix_len,
                      dlock_scan_cb cb, void *cb_ud, dl_done_fn done, void *ud,
                      dl_async **out) {
  START(BL_SCAN, (op->match = match, op->prefix_len = prefix_len, op->cb = cb,
                  op->cb_ud = cb_ud));
}

static int sem_async(dl_backend *b, const dl_sync_ref *s, int permits,
                     bool wait, int64_t deadline, dl_done_fn done, void *ud,
                     dl_async **out) {
  START(BL_SEM,
        (op->s = s, op->n = permits, op->wait = wait, op->deadline = deadline));
}

static int permit_async(dl_backend *b, const dl_sync_ref *s, const char *id,
                        int64_t lease_ms, bool wait, int64_t deadline,
                        int64_t *valid_until, dl_done_fn done, void *ud,
                        dl_async **out) {
  START(BL_PERMIT,
        (op->s = s, op->id = id, op->lease_ms = lease_ms, op->wait = wait,
         op->deadline = deadline, op->valid_until = valid_until));
}

static int latch_async(dl_backend *b, const dl_sync_ref *s, bool wait,
                       int64_t deadline, dl_done_fn done, void *ud,
                       dl_async **out) {
  START(BL_LATCH, (op->s = s, op->wait = wait, op->deadline = deadline));
}

static int update_async(dl_backend *b, const dl_sync_ref *s, dl_sync_op sop,
                        long long n, const char *id, long long *v,
                        dl_done_fn done, void *ud, dl_async **out) {
  START(BL_UPDATE,
        (op->s = s, op->op = sop, op->nn = n, op->id = id, op->v = v));
}

static int renew_async(dl_backend *b, int64_t deadline, int64_t lease_ms, int n,
                       dl_renew_item *items, int *calls, dl_done_fn done,
                       void *ud, dl_async **out) {
  START(BL_RENEW, (op->deadline = deadline, op->lease_ms = lease_ms, op->n = n,
                   op->items = items, op->calls = calls));
}

static int queue_async(dl_backend *b, const dl_sync_ref *s, dl_queue_req *q,
                       dl_done_fn done, void *ud, dl_async **out) {
  START(BL_QUEUE, (op->s = s, op->qr = q));
}

static int fence_async(dl_backend *b, dl_fence_req *fr, dl_done_fn done,
                       void *ud, dl_async **out) {
  START(BL_FENCE, op->fr = fr);
}

static int ping_async(dl_backend *b, dl_done_fn done, void *ud,
                      dl_async **out) {
  START(BL_PING, (void)0);
}

static void cancel(dl_backend *b, dl_async *op) {
  if (op->head.own) { /* one of the backend's own */
    form_of(b)->own_cancel(b, op);
    return;
  }
  dl_offload_cancel(&op->job);
  form_of(b)->kick(b); /* its wait looks again, and ends */
}

/* ---- the loss notices, passed on on the loop's thread ---- */
static void on_notice(void *ud, const char *key, size_t len) {
  dl_blockloop *f = ud;
  char *k = key ? strndup(key, len) : NULL;
  pthread_mutex_lock(&f->mu);
  if (f->closed) { /* the client is closing: nobody to tell */
    pthread_mutex_unlock(&f->mu);
    free(k);
    return;
  }
  if (k && f->nkeys < NOTICE_KEYS) {
    f->keys[f->nkeys++] = k;
  } else { /* any key (too many at once, out of memory): all are checked */
    free(k);
    f->any = true;
  }
  /* Woken under mu: dl_blockloop_close sets closed before it frees the
   * offload. */
  dl_offload_wake(f->off);
  pthread_mutex_unlock(&f->mu);
}

/* The offload's woken (the loop's thread): the backend's own work
 * (dl_blockloop_wake), then whether any key may be lost, else the keys
 * that may be. */
static void on_woken(void *ud) {
  dl_blockloop *f = ud;
  if (f->woken) f->woken(f->b);
  char *keys[NOTICE_KEYS];
  pthread_mutex_lock(&f->mu);
  bool any = f->any;
  f->any = false;
  int nkeys = f->nkeys;
  memcpy(keys, f->keys, (size_t)nkeys * sizeof *keys);
  f->nkeys = 0;
  dl_notice_fn fn = f->notice;
  void *fud = f->notice_ud;
  pthread_mutex_unlock(&f->mu);
  if (any && fn) fn(fud, NULL, 0);
  for (int i = 0; i < nkeys; i++) {
    if (!any && fn) fn(fud, keys[i], strlen(keys[i]));
    free(keys[i]);
  }
}

static int watch_losses(dl_backend *b, dl_notice_fn fn, void *ud) {
  dl_blockloop *f = form_of(b);
  pthread_mutex_lock(&f->mu);
  f->notice = fn;
  f->notice_ud = ud;
  pthread_mutex_unlock(&f->mu);
  return f->run->watch_losses(b, fn ? on_notice : NULL, fn ? f : NULL);
}

/* ---- the blocking entries: refused on the loop's thread ---- */
static int refused(dl_backend *b) {
  return dl_seterr(form_of(b)->env->err_owner, DLOCK_EINVAL,
                   "a blocking call on an event-loop client");
}

#define REFUSE(name, params, args)                                             \
  static int refuse_##name params {                                            \
    (void)(args);                                                              \
    return refused(b);                                                         \
  }
REFUSE(lock_acquire, (dl_backend * b, dl_acquire *a), a)
REFUSE(lock_release,
       (dl_backend * b, const dl_lock_ref *l, int64_t lease_ms, int count),
       ((void)l, (void)lease_ms, count))
REFUSE(lock_force_release, (dl_backend * b, const dl_lock_ref *l), l)
REFUSE(lock_query,
       (dl_backend * b, const dl_lock_ref *l, dl_lock_query q, long long *v),
       ((void)l, (void)q, v))
REFUSE(inspect, (dl_backend * b, const char *key, dlock_lock_state *st),
       ((void)key, st))
REFUSE(holders, (dl_backend * b, const char *key, dl_holder_cb cb, void *ud),
       ((void)key, (void)cb, ud))
REFUSE(scan,
       (dl_backend * b, const char *match, size_t prefix_len, dlock_scan_cb cb,
        void *ud),
       ((void)match, (void)prefix_len, (void)cb, ud))
REFUSE(waiters,
       (dl_backend * b, const char *prefix, dlock_waiter_cb cb, void *ud),
       ((void)prefix, (void)cb, ud))
REFUSE(sem_acquire,
       (dl_backend * b, const dl_sync_ref *s, int permits, bool wait,
        int64_t deadline),
       ((void)s, (void)permits, (void)wait, deadline))
REFUSE(permit_acquire,
       (dl_backend * b, const dl_sync_ref *s, const char *id, int64_t lease_ms,
        bool wait, int64_t deadline, int64_t *valid_until),
       ((void)s, (void)id, (void)lease_ms, (void)wait, (void)deadline,
        valid_until))
REFUSE(latch_await,
       (dl_backend * b, const dl_sync_ref *s, bool wait, int64_t deadline),
       ((void)s, (void)wait, deadline))
REFUSE(sync_update,
       (dl_backend * b, const dl_sync_ref *s, dl_sync_op op, long long n,
        const char *id, long long *v),
       ((void)s, (void)op, (void)n, (void)id, v))
REFUSE(renew,
       (dl_backend * b, int64_t deadline, int64_t lease_ms, int n,
        dl_renew_item *items, int *calls),
       ((void)deadline, (void)lease_ms, (void)n, (void)items, calls))
REFUSE(queue, (dl_backend * b, const dl_sync_ref *s, dl_queue_req *q),
       ((void)s, q))
REFUSE(fence, (dl_backend * b, dl_fence_req *fr), fr)
REFUSE(elect_leader,
       (dl_backend * b, const dl_sync_ref *s, char *buf, size_t len),
       ((void)s, (void)buf, len))
REFUSE(ping, (dl_backend * b), 0)

/* Each blocking entry the backend has: refused, and its event-loop twin
 * run on a job. */
#define PAIR(name, async)                                                      \
  if (r->name) {                                                               \
    o->name = refuse_##name;                                                   \
    o->name##_async = async;                                                   \
  }

/* The backend's own event-loop entry, where it has one. */
#define OWN(name)                                                              \
  if (own && own->name##_async) o->name##_async = own->name##_async;

int dl_blockloop_new(dl_backend *b, const dl_backend_env *env,
                     void (*kick)(dl_backend *b), const dl_backend_ops *own,
                     dl_blockloop **out) {
  *out = NULL;
  dl_blockloop *f = calloc(1, sizeof *f);
  if (f == NULL) return dl_seterr(NULL, DLOCK_ENOMEM, "out of memory");
  pthread_mutex_init(&f->mu, NULL);
  int rc = dl_offload_new(env->loop, on_woken, f, &f->off);
  if (rc != 0) {
    pthread_mutex_destroy(&f->mu);
    free(f);
    return rc;
  }
  const dl_backend_ops *r = b->ops;
  dl_backend_ops *o = &f->ops;
  *o = *r;
  f->run = r;
  f->b = b;
  f->env = env;
  f->kick = kick;
  PAIR(lock_acquire, acquire_async)
  PAIR(lock_release, release_async)
  PAIR(lock_force_release, force_async)
  PAIR(lock_query, query_async)
  PAIR(inspect, inspect_async)
  PAIR(scan, scan_async)
  PAIR(sem_acquire, sem_async)
  PAIR(permit_acquire, permit_async)
  PAIR(latch_await, latch_async)
  PAIR(sync_update, update_async)
  PAIR(renew, renew_async)
  PAIR(queue, queue_async)
  PAIR(fence, fence_async)
  PAIR(ping, ping_async)
  if (r->elect_leader) o->elect_leader = refuse_elect_leader;
  if (r->waiters) o->waiters = refuse_waiters; /* no event-loop twin yet */
  if (r->holders) o->holders = refuse_holders; /* nor here */
  if (r->watch_losses) o->watch_losses = watch_losses;
  o->cancel = cancel;
  f->jobs = *o;
  OWN(lock_acquire)
  OWN(lock_release)
  OWN(lock_force_release)
  OWN(lock_query)
  OWN(inspect)
  OWN(scan)
  OWN(sem_acquire)
  OWN(permit_acquire)
  OWN(latch_await)
  OWN(sync_update)
  OWN(renew)
  OWN(queue)
  OWN(fence)
  OWN(ping)
  f->own_cancel = own ? own->cancel : NULL;
  b->ops = o;
  *out = f;
  return 0;
}

void dl_blockloop_set_woken(dl_blockloop *f, void (*woken)(dl_backend *b)) {
  f->woken = woken;
}

void dl_blockloop_wake(dl_blockloop *f) {
  pthread_mutex_lock(&f->mu);
  if (!f->closed) dl_offload_wake(f->off); /* as a notice's */
  pthread_mutex_unlock(&f->mu);
}

const dl_backend_ops *dl_blockloop_jobs(const dl_blockloop *f) {
  return &f->jobs;
}

void dl_blockloop_close(dl_blockloop *f) {
  if (f == NULL) return;
  pthread_mutex_lock(&f->mu);
  dl_offload *off = f->off;
  f->closed = true;
  f->off = NULL;
  pthread_mutex_unlock(&f->mu);
  if (off == NULL) return;
  f->kick(f->b);
  dl_offload_free(off); /* the operations end, their done is called */
}

void dl_blockloop_free(dl_blockloop *f) {
  if (f == NULL) return;
  dl_blockloop_close(f);
  for (int i = 0; i < f->nkeys; i++)
    free(f->keys[i]);
  pthread_mutex_destroy(&f->mu);
  free(f);
}
