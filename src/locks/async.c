/* async.c: the event-loop forms of the lock's calls (include/dlock_async.h):
 * the same halves as the blocking calls (dl_acq_begin/end, dl_rel_begin/
 * end) around the backend's *_async operations; and the operation object
 * of every kind's event-loop call, which the caller may cancel. */
#include "lock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *dl_op_new(dlock_client *c, size_t size, bool has, const char *what,
                dlock_done_cb cb, void *ud, dlock_op **out, int *rc) {
  if (out) *out = NULL;
  *rc = 0;
  if (c == NULL) *rc = DLOCK_EINVAL;
  else if (c->loop == NULL)
    *rc = dl_seterr(c, DLOCK_EINVAL, "an event-loop call on a client "
                    "opened with dlock_client_open (use "
                    "dlock_client_open_async)");
  else if (cb == NULL) *rc = dl_seterr(c, DLOCK_EINVAL, "no callback");
  else if (!has) *rc = dl_unsupported(c, what);
  dlock_op *op = *rc ? NULL : calloc(1, size);
  if (op == NULL && *rc == 0)
    *rc = dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  if (op) {
    op->c = c;
    op->cb = cb;
    op->ud = ud;
  }
  return op;
}

void dl_op_finish(dlock_op *op, int rc, uint64_t token) {
  char msg[512];
  msg[0] = '\0'; /* not = "": that zeroes 512 bytes every call */
  if (rc < 0) snprintf(msg, sizeof msg, "%s", dlock_client_errmsg(op->c));
  dl_op_unwait(op);
  op->cb(rc, token, msg, op->ud);
  free(op);
}

void dl_op_wait(dlock_op *op, const void *h) {
  dlock_client *c = op->c;
  op->h = h;
  op->wnext = c->waits;
  if (c->waits) c->waits->wprev = &op->wnext;
  op->wprev = &c->waits;
  c->waits = op;
}

void dl_op_unwait(dlock_op *op) {
  if (op->wprev == NULL) return;
  *op->wprev = op->wnext;
  if (op->wnext) op->wnext->wprev = op->wprev;
  op->wnext = NULL;
  op->wprev = NULL;
}

/* Cancels op (op->cancelled already set): its member's, or its backend
 * operation's wait. */
static void cancel(dlock_op *op) {
  if (op->inner) {
    dlock_op_cancel(op->inner);
    return;
  }
  dl_backend *b = op->c->backend;
  if (op->bop && b->ops->cancel) b->ops->cancel(b, op->bop);
}

void dlock_op_cancel(dlock_op *op) {
  if (op == NULL || op->cancelled) return;
  if (op->inner == NULL && op->bop == NULL) return;
  op->cancelled = true;
  cancel(op);
}

void dl_op_cancel_for(dlock_client *c, const void *h) {
  /* A backend's cancel never completes an operation within the call, but
   * a member's may start its next step: look again from the start after
   * each (each is cancelled once). */
  for (dlock_op *op = c->waits; op;) {
    if (op->h != h || op->cancelled) {
      op = op->wnext;
      continue;
    }
    op->cancelled = true;
    cancel(op);
    op = c->waits;
  }
}

/* ---- the lock ---- */
typedef struct lock_op {
  dlock_op op; /* first */
  dlock_lock *l;
  int rc; /* a result waiting for a give-back to end */
  union {
    dl_acq_req acq;
    dl_rel_req rel;
  } q;
} lock_op;

void dl_lock_op_finish(dlock_op *op, dlock_lock *l, int rc,
                       uint64_t token) {
  char msg[512];
  msg[0] = '\0';
  if (rc < 0) snprintf(msg, sizeof msg, "%s", dlock_client_errmsg(op->c));
  if (l) dl_lock_op_end(l); /* may free an orphaned handle */
  if (rc < 0) dl_seterr(op->c, rc, "%s", msg);
  dl_op_finish(op, rc, token);
}

/* Tells the caller and frees x. */
static void finish(lock_op *x, int rc, uint64_t token) {
  dl_lock_op_finish(&x->op, x->l, rc, token);
}

/* A hold given back (granted too late, or cancelled): the acquire's
 * result, kept in x, is what the caller hears. */
static void given_back(void *ud, int rc) {
  lock_op *x = ud;
  x->op.bop = NULL;
  dl_rel_end(x->l, &x->q.rel, rc);
  dl_seterr(x->l->c, x->rc, "%s", x->rc == DLOCK_ECANCELED
                                      ? "cancelled"
                                      : "granted too late");
  finish(x, x->rc, 0);
}

/* Starts releasing x's lock, to end with x->rc. */
static void give_back(lock_op *x) {
  dlock_lock *l = x->l;
  dl_backend *b = l->c->backend;
  int rc = dl_rel_begin(l, &x->q.rel);
  if (rc == 0)
    rc = b->ops->lock_release_async(b, &x->q.rel.ref, x->q.rel.lease_ms,
                                    x->q.rel.count, given_back, x,
                                    &x->op.bop);
  if (rc != 0) finish(x, x->rc, 0); /* the lease frees it */
}

static void acquired(void *ud, int rc) {
  lock_op *x = ud;
  x->op.bop = NULL;
  dl_op_unwait(&x->op); /* a give-back is not cut short */
  bool back;
  uint64_t tok = 0;
  rc = dl_acq_end(x->l, &x->q.acq, rc, &tok, &back);
  if (x->op.cancelled && (rc == 0 || rc == DLOCK_EBUSY)) {
    back = rc == 0;
    rc = dl_seterr(x->l->c, DLOCK_ECANCELED, "cancelled");
  }
  if (back) {
    x->rc = rc;
    give_back(x);
    return;
  }
  finish(x, rc, tok);
}

int dlock_lock_acquire_async(dlock_lock *l, int64_t wait_ms, int64_t lease_ms,
                             dlock_done_cb cb, void *ud, dlock_op **out) {
  int rc;
  lock_op *x = dl_op_new(l ? l->c : NULL, sizeof *x,
                         l && l->c->backend->ops->lock_acquire_async, "lock",
                         cb, ud, out, &rc);
  if (x == NULL) return rc;
  x->l = l;
  dl_backend *b = l->c->backend;
  rc = dl_acq_begin(l, wait_ms, lease_ms, &x->q.acq);
  if (rc == 0)
    rc = b->ops->lock_acquire_async(b, &x->q.acq.a, acquired, x, &x->op.bop);
  if (rc != 0) {
    free(x->q.acq.info);
    free(x);
    return rc;
  }
  dl_lock_op_begin(l);
  dl_op_wait(&x->op, l);
  if (out) *out = &x->op;
  return 0;
}

static void released(void *ud, int rc) {
  lock_op *x = ud;
  x->op.bop = NULL;
  finish(x, dl_rel_end(x->l, &x->q.rel, rc), 0);
}

int dlock_lock_release_async(dlock_lock *l, dlock_done_cb cb, void *ud,
                             dlock_op **out) {
  int rc;
  lock_op *x = dl_op_new(l ? l->c : NULL, sizeof *x,
                         l && l->c->backend->ops->lock_release_async, "lock",
                         cb, ud, out, &rc);
  if (x == NULL) return rc;
  x->l = l;
  dl_backend *b = l->c->backend;
  rc = dl_rel_begin(l, &x->q.rel);
  if (rc == 0)
    rc = b->ops->lock_release_async(b, &x->q.rel.ref, x->q.rel.lease_ms,
                                    x->q.rel.count, released, x, &x->op.bop);
  if (rc != 0) {
    /* Not sent: ends as a blocking release that failed would (the hold
     * ends here; its lease frees the lock). */
    if (x->q.rel.owner[0] != '\0') dl_rel_end(l, &x->q.rel, rc);
    free(x);
    return rc;
  }
  dl_lock_op_begin(l);
  if (out) *out = &x->op;
  return 0;
}
