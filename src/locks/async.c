/* async.c: the event-loop forms of the lock's calls (include/dlock_async.h):
 * the same halves as the blocking calls (dl_acq_begin/end, dl_rel_begin/
 * end) around the backend's *_async operations, and the operation object
 * the caller may cancel. */
#include "lock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dlock_op {
  dlock_lock *l;
  dlock_done_cb cb;
  void *ud;
  dl_async *bop; /* the backend's, while it runs */
  bool cancelled;
  int rc;       /* a result waiting for a give-back to end */
  uint64_t token;
  union {
    dl_acq_req acq;
    dl_rel_req rel;
  } q;
};

static int check_loop(dlock_lock *l) {
  if (l == NULL) return DLOCK_EINVAL;
  if (l->c->loop == NULL)
    return dl_seterr(l->c, DLOCK_EINVAL, "an event-loop call on a client "
                     "opened with dlock_client_open (use "
                     "dlock_client_open_async)");
  return 0;
}

/* A new operation on l, or NULL with *rc: not an event-loop client, no
 * callback, the backend has no such operation (`has` false), out of
 * memory. */
static dlock_op *op_new(dlock_lock *l, bool has, dlock_done_cb cb, void *ud,
                        dlock_op **out, int *rc) {
  if (out) *out = NULL;
  if ((*rc = check_loop(l)) != 0) return NULL;
  if (cb == NULL) *rc = dl_seterr(l->c, DLOCK_EINVAL, "no callback");
  else if (!has) *rc = dl_unsupported(l->c, "lock");
  dlock_op *op = *rc ? NULL : calloc(1, sizeof *op);
  if (op == NULL && *rc == 0)
    *rc = dl_seterr(l->c, DLOCK_ENOMEM, "out of memory");
  if (op) {
    op->l = l;
    op->cb = cb;
    op->ud = ud;
  }
  return op;
}

/* Tells the caller and frees op. */
static void finish(dlock_op *op, int rc, uint64_t token) {
  char msg[512] = "";
  if (rc < 0) snprintf(msg, sizeof msg, "%s", dlock_client_errmsg(op->l->c));
  dl_lock_op_end(op->l); /* may free an orphaned handle */
  op->cb(rc, token, msg, op->ud);
  free(op);
}

/* A hold given back (granted too late, or cancelled): the acquire's
 * result, kept in op, is what the caller hears. */
static void given_back(void *ud, int rc) {
  dlock_op *op = ud;
  dl_rel_end(op->l, &op->q.rel, rc);
  dl_seterr(op->l->c, op->rc, "%s", op->rc == DLOCK_ECANCELED
                                        ? "cancelled"
                                        : "granted too late");
  finish(op, op->rc, 0);
}

/* Starts releasing op's lock, to end with op->rc. */
static void give_back(dlock_op *op) {
  dlock_lock *l = op->l;
  dl_backend *b = l->c->backend;
  int rc = dl_rel_begin(l, &op->q.rel);
  if (rc == 0)
    rc = b->ops->lock_release_async(b, &op->q.rel.ref, op->q.rel.lease_ms,
                                    op->q.rel.count, given_back, op, &op->bop);
  if (rc != 0) finish(op, op->rc, 0); /* the lease frees it */
}

static void acquired(void *ud, int rc) {
  dlock_op *op = ud;
  op->bop = NULL;
  bool back;
  uint64_t tok = 0;
  rc = dl_acq_end(op->l, &op->q.acq, rc, &tok, &back);
  if (op->cancelled && (rc == 0 || rc == DLOCK_EBUSY)) {
    back = rc == 0;
    rc = dl_seterr(op->l->c, DLOCK_ECANCELED, "cancelled");
  }
  if (back) {
    op->rc = rc;
    give_back(op);
    return;
  }
  finish(op, rc, tok);
}

int dlock_lock_acquire_async(dlock_lock *l, int64_t wait_ms, int64_t lease_ms,
                             dlock_done_cb cb, void *ud, dlock_op **out) {
  int rc;
  dlock_op *op = op_new(l, l && l->c->backend->ops->lock_acquire_async, cb,
                        ud, out, &rc);
  if (op == NULL) return rc;
  dl_backend *b = l->c->backend;
  rc = dl_acq_begin(l, wait_ms, lease_ms, &op->q.acq);
  if (rc == 0)
    rc = b->ops->lock_acquire_async(b, &op->q.acq.a, acquired, op, &op->bop);
  if (rc != 0) {
    free(op->q.acq.info);
    free(op);
    return rc;
  }
  l->ops++;
  if (out) *out = op;
  return 0;
}

static void released(void *ud, int rc) {
  dlock_op *op = ud;
  op->bop = NULL;
  finish(op, dl_rel_end(op->l, &op->q.rel, rc), 0);
}

int dlock_lock_release_async(dlock_lock *l, dlock_done_cb cb, void *ud,
                             dlock_op **out) {
  int rc;
  dlock_op *op = op_new(l, l && l->c->backend->ops->lock_release_async, cb,
                        ud, out, &rc);
  if (op == NULL) return rc;
  dl_backend *b = l->c->backend;
  rc = dl_rel_begin(l, &op->q.rel);
  if (rc == 0)
    rc = b->ops->lock_release_async(b, &op->q.rel.ref, op->q.rel.lease_ms,
                                    op->q.rel.count, released, op, &op->bop);
  if (rc != 0) {
    /* Not sent: ends as a blocking release that failed would (the hold
     * ends here; its lease frees the lock). */
    if (op->q.rel.owner[0] != '\0') dl_rel_end(l, &op->q.rel, rc);
    free(op);
    return rc;
  }
  l->ops++;
  if (out) *out = op;
  return 0;
}

void dlock_op_cancel(dlock_op *op) {
  if (op == NULL || op->cancelled || op->bop == NULL) return;
  op->cancelled = true;
  dl_backend *b = op->l->c->backend;
  if (b->ops->cancel) b->ops->cancel(b, op->bop);
}
