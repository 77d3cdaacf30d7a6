/* kinds.c: what the lock kinds share. */
#include "locks.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dl_check_name(dlock_client *c, const char *name) {
  if (name == NULL || *name == '\0')
    return dl_seterr(c, DLOCK_EINVAL, "the name is empty");
  if (strlen(name) > DLOCK_NAME_MAX)
    return dl_seterr(c, DLOCK_ENAMETOOLONG, "the name is over %d bytes",
                     DLOCK_NAME_MAX);
  return dl_check_key(c, name);
}

int dl_check_key(dlock_client *c, const char *name) {
  if (c->backend->ops->check_key == NULL) return 0;
  char key[DLOCK_KEY_PREFIX_MAX + DLOCK_NAME_MAX + 1];
  snprintf(key, sizeof key, "%s%s", c->key_prefix, name);
  return c->backend->ops->check_key(c->backend, key);
}

int64_t dl_deadline(int64_t wait_ms) {
  int64_t now = dl_now_ms();
  /* No limit, or one past the clock's range: none (it overflowed). */
  return wait_ms < 0 || wait_ms > INT64_MAX - now ? INT64_MAX : now + wait_ms;
}

int dl_unsupported(dlock_client *c, const char *what) {
  return dl_seterr(c, DLOCK_ENOTSUP, "the %s backend has no %s",
                   c->backend->ops->name, what);
}

int dl_check_open(dlock_client *c) {
  return atomic_load(&c->closing)
             ? dl_seterr(c, DLOCK_ECLOSED, "the client is closing")
             : 0;
}

dl_sync_ref dl_sync_ref_of(dl_sync_handle *h) {
  dl_sync_ref r = {h->key, h->key + h->c->prefix_len, &h->hint};
  return r;
}

bool dl_sync_free_later(dl_sync_handle *h) {
  if (h->ops == 0) return false;
  h->orphan = 1;
  dl_op_cancel_for(h->c, h); /* its waits end (their places go) */
  return true;
}

/* Whether h's backend has q's entry, blocking or on the loop. */
static bool sync_has(const dl_backend_ops *o, dl_sync_what w, bool async) {
  switch (w) {
  case DL_SYNC_UPDATE:
    return async ? o->sync_update_async != NULL : o->sync_update != NULL;
  case DL_SYNC_SEM:
    return async ? o->sem_acquire_async != NULL : o->sem_acquire != NULL;
  case DL_SYNC_PERMIT:
    return async ? o->permit_acquire_async != NULL
                 : o->permit_acquire != NULL;
  case DL_SYNC_LATCH:
    return async ? o->latch_await_async != NULL : o->latch_await != NULL;
  }
  return false;
}

static const char *id_of(const dl_sync_call *q) {
  return q->id[0] ? q->id : NULL;
}

/* What gives back the grant of q (a semaphore's permits, a permit): an
 * update whose result is not the caller's. */
static void give_back_update(dl_sync_call *g, const dl_sync_call *q) {
  memset(g, 0, sizeof *g);
  g->what = DL_SYNC_UPDATE;
  g->kind = q->kind;
  g->op = q->what == DL_SYNC_SEM ? DL_SEM_RELEASE : DL_PERMITS_RELEASE;
  g->n = q->n;
  memcpy(g->id, q->id, sizeof g->id);
}

int dl_sync_run(dl_sync_handle *h, dl_sync_call *q) {
  dlock_client *c = h->c;
  dl_backend *b = c->backend;
  if (!sync_has(b->ops, q->what, false)) return dl_unsupported(c, q->kind);
  dl_sync_ref r = dl_sync_ref_of(h);
  int rc = DLOCK_EINVAL;
  switch (q->what) {
  case DL_SYNC_UPDATE:
    rc = b->ops->sync_update(b, &r, q->op, q->n, id_of(q), &q->v);
    break;
  case DL_SYNC_SEM:
    rc = b->ops->sem_acquire(b, &r, (int)q->n, q->wait, q->deadline);
    break;
  case DL_SYNC_PERMIT:
    rc = b->ops->permit_acquire(b, &r, q->id, q->lease_ms, q->wait,
                                q->deadline, &q->valid_until);
    break;
  case DL_SYNC_LATCH:
    rc = b->ops->latch_await(b, &r, q->wait, q->deadline);
    break;
  }
  q->give_back = false;
  rc = q->end(h, q, rc);
  if (q->give_back) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", dlock_client_errmsg(c));
    dl_sync_call g;
    give_back_update(&g, q);
    b->ops->sync_update(b, &r, g.op, g.n, id_of(&g), &g.v);
    dl_seterr(c, rc, "%s", msg);
  }
  return rc;
}

/* ---- on the loop ---- */
typedef struct sync_op {
  dlock_op op;
  dl_sync_handle *h;
  dl_sync_ref ref;
  dl_sync_call q;
  int rc; /* the result, while a permit is given back */
} sync_op;

static void sync_finish(sync_op *x, int rc) {
  dl_sync_handle *h = x->h;
  char msg[512] = "";
  if (rc < 0) snprintf(msg, sizeof msg, "%s", dlock_client_errmsg(h->c));
  dl_op_unwait(&x->op);
  if (--h->ops == 0 && h->orphan) h->destroy(h);
  x->op.cb(rc, 0, msg, x->op.ud);
  free(x);
}

static void given_back(void *ud, int rc) {
  sync_op *x = ud;
  (void)rc; /* the lease frees it if the release failed */
  x->op.bop = NULL;
  dl_seterr(x->h->c, x->rc, "%s", x->rc == DLOCK_ECANCELED
                                      ? "cancelled"
                                      : "granted too late");
  sync_finish(x, x->rc);
}

static void sync_done(void *ud, int rc) {
  sync_op *x = ud;
  x->op.bop = NULL;
  dl_op_unwait(&x->op); /* a give-back is not cut short */
  x->q.give_back = false;
  x->q.cancelled = x->op.cancelled;
  rc = x->q.end(x->h, &x->q, rc);
  /* A wait cut short by a cancel (its deadline came): cancelled. An end
   * that got a grant as it was cancelled gives it back and says so. */
  if (x->op.cancelled && x->q.what != DL_SYNC_UPDATE &&
      (rc == 0 || rc == DLOCK_EBUSY))
    rc = dl_seterr(x->h->c, DLOCK_ECANCELED, "cancelled");
  if (x->q.give_back) {
    dl_backend *b = x->h->c->backend;
    x->rc = rc;
    dl_sync_call g;
    give_back_update(&g, &x->q);
    x->q = g;
    if (b->ops->sync_update_async(b, &x->ref, g.op, g.n, id_of(&x->q),
                                  &x->q.v, given_back, x, &x->op.bop) == 0)
      return;
  }
  sync_finish(x, rc);
}

int dl_sync_run_async(dl_sync_handle *h, const dl_sync_call *q,
                      dlock_done_cb cb, void *ud, dlock_op **out) {
  int rc;
  dlock_client *c = h->c;
  sync_op *x = dl_op_new(c, sizeof *x,
                         c && sync_has(c->backend->ops, q->what, true),
                         q->kind, cb, ud, out, &rc);
  if (x == NULL) return rc;
  dl_backend *b = c->backend;
  x->h = h;
  x->ref = dl_sync_ref_of(h);
  x->q = *q;
  dl_sync_call *y = &x->q;
  dl_done_fn done = sync_done;
  dl_async **bop = &x->op.bop;
  switch (y->what) {
  case DL_SYNC_UPDATE:
    rc = b->ops->sync_update_async(b, &x->ref, y->op, y->n, id_of(y), &y->v,
                                   done, x, bop);
    break;
  case DL_SYNC_SEM:
    rc = b->ops->sem_acquire_async(b, &x->ref, (int)y->n, y->wait,
                                   y->deadline, done, x, bop);
    break;
  case DL_SYNC_PERMIT:
    rc = b->ops->permit_acquire_async(b, &x->ref, y->id, y->lease_ms, y->wait,
                                      y->deadline, &y->valid_until, done, x,
                                      bop);
    break;
  case DL_SYNC_LATCH:
    rc = b->ops->latch_await_async(b, &x->ref, y->wait, y->deadline, done, x,
                                   bop);
    break;
  }
  if (rc != 0) {
    free(x);
    return rc;
  }
  h->ops++;
  if (y->what != DL_SYNC_UPDATE) dl_op_wait(&x->op, h);
  if (out) *out = &x->op;
  return 0;
}

int dl_sync_go(int rc, void *handle, dl_sync_call *q) {
  return rc ? rc : dl_sync_run(handle, q);
}

int dl_sync_go_async(int rc, void *handle, const dl_sync_call *q,
                     dlock_done_cb cb, void *ud, dlock_op **out) {
  if (rc != 0) {
    if (out) *out = NULL;
    return rc;
  }
  return dl_sync_run_async(handle, q, cb, ud, out);
}

/* ---- the usual ends ---- */
int dl_sync_update_call(const void *handle, const char *kind, dl_sync_op op,
                        long long n,
                        int (*end)(dl_sync_handle *, dl_sync_call *, int),
                        dl_sync_call *q) {
  if (handle == NULL) return DLOCK_EINVAL;
  memset(q, 0, sizeof *q);
  q->what = DL_SYNC_UPDATE;
  q->kind = kind;
  q->op = op;
  q->n = n;
  q->end = end;
  return 0;
}

int dl_sync_end_rc(dl_sync_handle *h, dl_sync_call *q, int rc) {
  (void)q;
  if (rc == 0) dl_clearerr(h->c);
  return rc;
}

int dl_sync_end_count(dl_sync_handle *h, dl_sync_call *q, int rc) {
  if (rc != 0) return rc;
  if (q->v > INT_MAX) /* set past an int by another client: say so */
    return dl_seterr(h->c, DLOCK_ERANGE,
                     "%s '%s' counts %lld, more than an int holds", q->kind,
                     h->key + h->c->prefix_len, q->v);
  dl_clearerr(h->c);
  return q->v < 0 ? 0 : (int)q->v;
}

int dl_sync_end_bool(dl_sync_handle *h, dl_sync_call *q, int rc) {
  if (rc != 0) return rc;
  dl_clearerr(h->c);
  return q->v == 1;
}
