/* queue.c: the blocking queue and deque (Redisson's RBlockingQueue and
 * RBlockingDeque): values as bytes, offered at either end, polled from
 * either end with a wait. The layout on a deployment is the backend's
 * (src/redis/queue.c). Each call is its checks and a dl_queue_req run
 * blocking or on the loop. */
#include "locks.h"

#include <stdlib.h>
#include <string.h>

#define KIND "queue" /* in errors and ENOTSUP */

struct dlock_queue {
  dl_sync_handle h; /* first */
  bool delayed;     /* its polls move the delayed values now due */
};

static void destroy(dl_sync_handle *h) {
  free(h->key);
  free(h);
}

static int queue_new(dlock_client *c, const char *name, bool delayed,
                     dlock_queue **out) {
  if (out) *out = NULL;
  if (c == NULL || out == NULL) return DLOCK_EINVAL;
  int rc = dl_check_name(c, name);
  if (rc != 0) return rc;
  dlock_queue *q = calloc(1, sizeof *q);
  if (q == NULL || (q->h.key = dl_key(c, "%s", name)) == NULL) {
    free(q);
    return dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  }
  q->h.c = c;
  q->h.destroy = destroy;
  q->delayed = delayed;
  *out = q;
  return 0;
}

int dlock_queue_new(dlock_client *c, const char *name, dlock_queue **out) {
  return queue_new(c, name, false, out);
}

int dlock_queue_new_delayed(dlock_client *c, const char *name,
                            dlock_queue **out) {
  return queue_new(c, name, true, out);
}

void dlock_queue_free(dlock_queue *q) {
  if (q == NULL || dl_sync_free_later(&q->h)) return;
  destroy(&q->h);
}

void dlock_queue_value_free(void *value) { free(value); }

/* The checks of every call: 0, or a code (nothing sent). */
static int checks(dlock_queue *q, bool async) {
  if (q == NULL) return DLOCK_EINVAL;
  int rc = dl_check_open(q->h.c);
  if (rc != 0) return rc;
  const dl_backend_ops *o = q->h.c->backend->ops;
  if (async ? o->queue_async == NULL : o->queue == NULL)
    return dl_unsupported(q->h.c, KIND);
  return 0;
}

/* The longest delay: a year (a due time far off is a unit mistake). */
#define DELAY_MAX_MS (366LL * 24 * 3600 * 1000)

/* Fills r for an offer of value (len bytes) at the head or the tail, or
 * (delay_ms >= 0) into the delayed queue. */
static int offer_req(dlock_queue *q, bool first, int64_t delay_ms,
                     const void *value, size_t len, dl_queue_req *r) {
  memset(r, 0, sizeof *r);
  if (value == NULL && len > 0)
    return dl_seterr(q->h.c, DLOCK_EINVAL, "no value");
  if (delay_ms > DELAY_MAX_MS)
    return dl_seterr(q->h.c, DLOCK_EINVAL, "the delay is over a year");
  r->delay_ms = delay_ms;
  r->op = delay_ms >= 0 ? DL_QUEUE_OFFER_DELAYED
          : first       ? DL_QUEUE_OFFER_FIRST
                        : DL_QUEUE_OFFER;
  r->value = value;
  r->len = len;
  return 0;
}

static void poll_req(const dlock_queue *q, bool last, int64_t wait_ms,
                     dl_queue_req *r) {
  memset(r, 0, sizeof *r);
  r->delayed = q && q->delayed;
  r->op = last ? DL_QUEUE_POLL_LAST : DL_QUEUE_POLL;
  r->wait = wait_ms != 0;
  r->deadline = dl_deadline(wait_ms);
}

/* The API's result from the backend's rc, with the outputs stored. */
static int ended(dlock_queue *q, dl_queue_req *r, int rc, void **value,
                 size_t *len, int64_t *n) {
  if (rc < 0) return rc;
  dlock_client *c = q->h.c;
  if (r->op == DL_QUEUE_POLL || r->op == DL_QUEUE_POLL_LAST) {
    if (rc == 0)
      return dl_seterr(c, DLOCK_EBUSY, "queue '%s' gave no value in time",
                       q->h.key + c->prefix_len);
    *value = r->got;
    if (len) *len = r->got_len;
    r->got = NULL;
  } else if (n) {
    *n = r->n;
  }
  dl_clearerr(c);
  return 0;
}

static int run(dlock_queue *q, int rc, dl_queue_req *r, void **value,
               size_t *len, int64_t *n) {
  if (rc != 0) return rc;
  dl_backend *b = q->h.c->backend;
  dl_sync_ref ref = dl_sync_ref_of(&q->h);
  return ended(q, r, b->ops->queue(b, &ref, r), value, len, n);
}

static int offer(dlock_queue *q, bool first, int64_t delay_ms,
                 const void *value, size_t len) {
  dl_queue_req r;
  int rc = checks(q, false);
  if (rc == 0) rc = offer_req(q, first, delay_ms, value, len, &r);
  return run(q, rc, &r, NULL, NULL, NULL);
}

int dlock_queue_offer(dlock_queue *q, const void *value, size_t len) {
  return offer(q, false, -1, value, len);
}

int dlock_queue_offer_first(dlock_queue *q, const void *value, size_t len) {
  return offer(q, true, -1, value, len);
}

int dlock_queue_offer_delayed(dlock_queue *q, int64_t delay_ms,
                              const void *value, size_t len) {
  if (q && delay_ms < 0)
    return dl_seterr(q->h.c, DLOCK_EINVAL, "the delay is negative");
  return offer(q, false, delay_ms, value, len);
}

static int poll(dlock_queue *q, bool last, int64_t wait_ms, void **value,
                size_t *len) {
  if (value) *value = NULL;
  if (len) *len = 0;
  int rc = checks(q, false);
  if (rc == 0 && value == NULL) rc = DLOCK_EINVAL;
  dl_queue_req r;
  poll_req(q, last, wait_ms, &r);
  return run(q, rc, &r, value, len, NULL);
}

int dlock_queue_poll(dlock_queue *q, int64_t wait_ms, void **value,
                     size_t *len) {
  return poll(q, false, wait_ms, value, len);
}

int dlock_queue_poll_last(dlock_queue *q, int64_t wait_ms, void **value,
                          size_t *len) {
  return poll(q, true, wait_ms, value, len);
}

int dlock_queue_take(dlock_queue *q, void **value, size_t *len) {
  return poll(q, false, DL_WAIT_FOREVER, value, len);
}

int dlock_queue_take_last(dlock_queue *q, void **value, size_t *len) {
  return poll(q, true, DL_WAIT_FOREVER, value, len);
}

static int size(dlock_queue *q, bool delayed, int64_t *n) {
  int rc = checks(q, false);
  if (rc == 0 && n == NULL) rc = DLOCK_EINVAL;
  dl_queue_req r;
  memset(&r, 0, sizeof r);
  r.op = delayed ? DL_QUEUE_SIZE_DELAYED : DL_QUEUE_SIZE;
  return run(q, rc, &r, NULL, NULL, n);
}

int dlock_queue_size(dlock_queue *q, int64_t *n) {
  return size(q, false, n);
}

int dlock_queue_delayed_size(dlock_queue *q, int64_t *n) {
  return size(q, true, n);
}

/* ---- on the event loop ---- */
typedef struct queue_aop {
  dlock_op op; /* first */
  dlock_queue *q;
  dl_sync_ref ref;
  dl_queue_req r;
  void **value; /* the caller's outputs */
  size_t *len;
  int64_t *n;
  void *copy; /* an offer's value, copied */
} queue_aop;

static void async_done(void *ud, int rc) {
  queue_aop *x = ud;
  dl_sync_handle *h = &x->q->h;
  x->op.bop = NULL;
  rc = ended(x->q, &x->r, rc, x->value, x->len, x->n);
  if (x->op.cancelled && rc == DLOCK_EBUSY)
    rc = dl_seterr(h->c, DLOCK_ECANCELED, "cancelled");
  free(x->copy);
  free(x->r.got); /* NULL unless the caller did not get it */
  if (--h->ops == 0 && h->orphan) h->destroy(h);
  dl_op_finish(&x->op, rc, 0);
}

/* Starts r (filled in; an offer's value is copied) on q's loop. */
static int run_async(dlock_queue *q, int rc, const dl_queue_req *r,
                     void **value, size_t *len, int64_t *n, dlock_done_cb cb,
                     void *ud, dlock_op **out) {
  if (out) *out = NULL;
  if (rc != 0) return rc;
  dlock_client *c = q->h.c;
  queue_aop *x = dl_op_new(c, sizeof *x, true, KIND, cb, ud, out, &rc);
  if (x == NULL) return rc;
  x->q = q;
  x->ref = dl_sync_ref_of(&q->h);
  x->r = *r;
  x->value = value;
  x->len = len;
  x->n = n;
  if (r->len > 0) {
    if ((x->copy = malloc(r->len)) == NULL) {
      free(x);
      return dl_seterr(c, DLOCK_ENOMEM, "out of memory");
    }
    memcpy(x->copy, r->value, r->len);
    x->r.value = x->copy;
  }
  dl_backend *b = c->backend;
  rc = b->ops->queue_async(b, &x->ref, &x->r, async_done, x, &x->op.bop);
  if (rc != 0) {
    free(x->copy);
    free(x);
    return rc;
  }
  q->h.ops++;
  if (out) *out = &x->op;
  return 0;
}

static int offer_async(dlock_queue *q, bool first, int64_t delay_ms,
                       const void *value, size_t len, dlock_done_cb cb,
                       void *ud, dlock_op **out) {
  dl_queue_req r;
  int rc = checks(q, true);
  if (rc == 0) rc = offer_req(q, first, delay_ms, value, len, &r);
  return run_async(q, rc, &r, NULL, NULL, NULL, cb, ud, out);
}

int dlock_queue_offer_async(dlock_queue *q, const void *value, size_t len,
                            dlock_done_cb cb, void *ud, dlock_op **op) {
  return offer_async(q, false, -1, value, len, cb, ud, op);
}

int dlock_queue_offer_first_async(dlock_queue *q, const void *value,
                                  size_t len, dlock_done_cb cb, void *ud,
                                  dlock_op **op) {
  return offer_async(q, true, -1, value, len, cb, ud, op);
}

int dlock_queue_offer_delayed_async(dlock_queue *q, int64_t delay_ms,
                                    const void *value, size_t len,
                                    dlock_done_cb cb, void *ud,
                                    dlock_op **op) {
  if (op) *op = NULL;
  if (q && delay_ms < 0)
    return dl_seterr(q->h.c, DLOCK_EINVAL, "the delay is negative");
  return offer_async(q, false, delay_ms, value, len, cb, ud, op);
}

static int poll_async(dlock_queue *q, bool last, int64_t wait_ms,
                      void **value, size_t *len, dlock_done_cb cb, void *ud,
                      dlock_op **out) {
  int rc = checks(q, true);
  if (rc == 0 && value == NULL) rc = DLOCK_EINVAL;
  if (rc == 0) *value = NULL;
  dl_queue_req r;
  poll_req(q, last, wait_ms, &r);
  return run_async(q, rc, &r, value, len, NULL, cb, ud, out);
}

int dlock_queue_poll_async(dlock_queue *q, int64_t wait_ms, void **value,
                           size_t *len, dlock_done_cb cb, void *ud,
                           dlock_op **op) {
  return poll_async(q, false, wait_ms, value, len, cb, ud, op);
}

int dlock_queue_poll_last_async(dlock_queue *q, int64_t wait_ms, void **value,
                                size_t *len, dlock_done_cb cb, void *ud,
                                dlock_op **op) {
  return poll_async(q, true, wait_ms, value, len, cb, ud, op);
}

static int size_async(dlock_queue *q, bool delayed, int64_t *n,
                      dlock_done_cb cb, void *ud, dlock_op **op) {
  int rc = checks(q, true);
  if (rc == 0 && n == NULL) rc = DLOCK_EINVAL;
  dl_queue_req r;
  memset(&r, 0, sizeof r);
  r.op = delayed ? DL_QUEUE_SIZE_DELAYED : DL_QUEUE_SIZE;
  return run_async(q, rc, &r, NULL, NULL, n, cb, ud, op);
}

int dlock_queue_size_async(dlock_queue *q, int64_t *n, dlock_done_cb cb,
                           void *ud, dlock_op **op) {
  return size_async(q, false, n, cb, ud, op);
}

int dlock_queue_delayed_size_async(dlock_queue *q, int64_t *n,
                                   dlock_done_cb cb, void *ud,
                                   dlock_op **op) {
  return size_async(q, true, n, cb, ud, op);
}
