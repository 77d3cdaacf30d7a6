/* queue.c: the blocking queue and deque (Redisson's RBlockingQueue and
 * RBlockingDeque): values as bytes, offered at either end, polled from
 * either end with a wait. The layout on a deployment is the backend's
 * (src/redis/ops/blocking_queue.c). Each call is its checks and a dl_queue_req run
 * blocking or on the loop. */
#include "locks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KIND "queue" /* in errors and ENOTSUP */

struct dlock_queue {
  dl_sync_handle h; /* first */
  bool delayed;     /* its polls move the delayed values now due */
  /* The reliable consumer's id (32 hex digits, made with the handle, so
   * that it never changes), shown from the first reliable take on. */
  atomic_bool reliable;
  char consumer[DLOCK_PERMIT_ID_LEN];
  dl_holder holder; /* the client's: the consumer's lease */
};

static void destroy(dl_sync_handle *h) {
  /* A consumer's lease stops being renewed: what it took and did not
   * acknowledge goes back to the queue after its lease. */
  dl_holder_drop(h->c, &((dlock_queue *)h)->holder);
  if (((dlock_queue *)h)->delayed) dl_transfer_unref(h->c, h->key);
  free(h->key);
  free(h);
}

static int queue_new(dlock_client *c, const char *name, bool delayed,
                     dlock_queue **out) {
  if (out) *out = NULL;
  if (c == NULL) return DLOCK_EINVAL;
  if (out == NULL) return dl_seterr(c, DLOCK_EINVAL, "out is NULL");
  int rc = dl_check_name(c, name);
  if (rc != 0) return rc;
  dlock_queue *q = calloc(1, sizeof *q);
  if (q == NULL || (q->h.key = dl_key(c, "%s", name)) == NULL) {
    free(q);
    return dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  }
  q->h.c = c;
  q->h.destroy = destroy;
  unsigned char b[(DLOCK_PERMIT_ID_LEN - 1) / 2];
  if (dl_random_bytes(b, sizeof b) != 0) {
    free(q->h.key);
    free(q);
    return dl_seterr(c, DLOCK_ENOMEM, "no random bytes for a consumer id");
  }
  for (size_t i = 0; i < sizeof b; i++)
    snprintf(q->consumer + 2 * i, 3, "%02x", b[i]);
  /* A delayed handle moves its queue's due values in the background, as
   * a Redisson client with an RDelayedQueue does (client/transfer.c). */
  if (delayed && dl_transfer_ref(c, q->h.key) != 0) {
    free(q->h.key);
    free(q);
    return dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  }
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

void dlock_queue_value_free(void *value) {
  free(value);
}

/* Gives q a reliable consumer (its id in id, unless NULL); with `track`,
 * also registers its lease for renewal by the watchdog (as a permit's, at
 * the queue's key) unless it is (a lease found lost is registered again,
 * the loss only marked: the next reliable take registers it). Tracking
 * follows a successful reliable take, whose script set the lease: a
 * renewal before it would find no lease and report it lost. Returns 0 or
 * a negative code. */
static int consumer_ensure(dlock_queue *q, bool track,
                           char id[DLOCK_PERMIT_ID_LEN]) {
  dlock_client *c = q->h.c;
  if (c->watchdog == NULL) return dl_unsupported(c, "reliable take");
  atomic_store_explicit(&q->reliable, true, memory_order_relaxed);
  if (id) memcpy(id, q->consumer, DLOCK_PERMIT_ID_LEN);
  if (!track) return 0;
  char owner[DL_OWNER_MAX];
  int n = snprintf(owner, sizeof owner, "%s:%s", c->id, q->consumer);
  if (n < 0 || n >= (int)sizeof owner)
    return dl_seterr(c, DLOCK_EINVAL, "the consumer's owner is too long");
  int64_t lease = c->watchdog_timeout_ms;
  dl_hold_grant g = {.key = q->h.key,
                     .owner = owner,
                     .holder = &q->holder,
                     .how = DL_HOLD_ENSURE,
                     .lease_ms = lease,
                     .valid_until = dl_now_ms() + lease,
                     .renew = true,
                     .permit = true};
  int rc = dl_holds_record(c, &g, NULL);
  return rc ? dl_seterr(c, rc, "cannot register the consumer") : 0;
}

/* The consumer's id, "" if q never took reliably. */
static void consumer_of(dlock_queue *q, char id[DLOCK_PERMIT_ID_LEN]) {
  if (atomic_load_explicit(&q->reliable, memory_order_relaxed))
    memcpy(id, q->consumer, DLOCK_PERMIT_ID_LEN);
  else
    id[0] = '\0';
}

/* An output argument `what` given as NULL: DLOCK_EINVAL, told. */
static int null_arg(dlock_queue *q, const char *what) {
  return dl_seterr(q->h.c, DLOCK_EINVAL, "%s is NULL", what);
}

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
  if (r->op == DL_QUEUE_ACK && r->n == 0)
    return dl_seterr(c, DLOCK_ENOTOWNER,
                     "no such value taken by this "
                     "consumer of queue '%s' (or its lease ended and it "
                     "went back)",
                     q->h.key + c->prefix_len);
  if (r->op == DL_QUEUE_POLL || r->op == DL_QUEUE_POLL_LAST ||
      r->op == DL_QUEUE_POLL_RELIABLE) {
    if (rc == 0)
      return dl_seterr(c, DLOCK_EBUSY, "queue '%s' gave no value in time",
                       q->h.key + c->prefix_len);
    *value = r->got;
    if (len) *len = r->got_len;
    r->got = NULL;
    /* Not tracked (out of memory): the value goes back after one lease,
     * a second delivery rather than a loss. */
    if (r->op == DL_QUEUE_POLL_RELIABLE) consumer_ensure(q, true, NULL);
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
  rc = run(q, rc, &r, NULL, NULL, NULL);
  /* A new head maybe: this client's transfer of the queue looks again. */
  if (rc == 0 && delay_ms >= 0) dl_transfer_kick(q->h.c, q->h.key);
  return rc;
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
  if (rc == 0 && value == NULL) rc = null_arg(q, "value");
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

/* A reliable take's or an ack's request, the consumer registered (take)
 * or known (ack). id: the request borrows it. */
static int reliable_req(dlock_queue *q, int rc, bool ack, int64_t wait_ms,
                        const void *value, size_t len,
                        char id[DLOCK_PERMIT_ID_LEN], dl_queue_req *r) {
  memset(r, 0, sizeof *r);
  if (rc != 0) return rc;
  if (ack) {
    if (value == NULL && len > 0)
      return dl_seterr(q->h.c, DLOCK_EINVAL, "no value");
    consumer_of(q, id);
    if (id[0] == '\0')
      return dl_seterr(q->h.c, DLOCK_ENOTOWNER,
                       "nothing taken reliably through this handle");
    r->op = DL_QUEUE_ACK;
    r->value = value;
    r->len = len;
  } else {
    if ((rc = consumer_ensure(q, false, id)) != 0) return rc;
    poll_req(q, false, wait_ms, r);
    r->op = DL_QUEUE_POLL_RELIABLE;
    r->lease_ms = q->h.c->watchdog_timeout_ms;
  }
  r->consumer = id;
  return 0;
}

int dlock_queue_poll_reliable(dlock_queue *q, int64_t wait_ms, void **value,
                              size_t *len) {
  if (value) *value = NULL;
  if (len) *len = 0;
  int rc = checks(q, false);
  if (rc == 0 && value == NULL) rc = null_arg(q, "value");
  char id[DLOCK_PERMIT_ID_LEN];
  dl_queue_req r;
  rc = reliable_req(q, rc, false, wait_ms, NULL, 0, id, &r);
  return run(q, rc, &r, value, len, NULL);
}

int dlock_queue_ack(dlock_queue *q, const void *value, size_t len) {
  char id[DLOCK_PERMIT_ID_LEN];
  dl_queue_req r;
  int rc = reliable_req(q, checks(q, false), true, 0, value, len, id, &r);
  return run(q, rc, &r, NULL, NULL, NULL);
}

int dlock_queue_take(dlock_queue *q, void **value, size_t *len) {
  return poll(q, false, DL_WAIT_FOREVER, value, len);
}

int dlock_queue_take_last(dlock_queue *q, void **value, size_t *len) {
  return poll(q, true, DL_WAIT_FOREVER, value, len);
}

static int size(dlock_queue *q, bool delayed, int64_t *n) {
  int rc = checks(q, false);
  if (rc == 0 && n == NULL) rc = null_arg(q, "n");
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
  void *copy;                   /* an offer's value, copied */
  char id[DLOCK_PERMIT_ID_LEN]; /* a reliable take's or an ack's consumer */
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
  if (r->consumer) {
    memcpy(x->id, r->consumer, sizeof x->id);
    x->r.consumer = x->id;
  }
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
  if (x->r.wait) dl_op_wait(&x->op, &q->h); /* ends with the handle */
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

int dlock_queue_offer_first_async(dlock_queue *q, const void *value, size_t len,
                                  dlock_done_cb cb, void *ud, dlock_op **op) {
  return offer_async(q, true, -1, value, len, cb, ud, op);
}

int dlock_queue_offer_delayed_async(dlock_queue *q, int64_t delay_ms,
                                    const void *value, size_t len,
                                    dlock_done_cb cb, void *ud, dlock_op **op) {
  if (op) *op = NULL;
  if (q && delay_ms < 0)
    return dl_seterr(q->h.c, DLOCK_EINVAL, "the delay is negative");
  return offer_async(q, false, delay_ms, value, len, cb, ud, op);
}

static int poll_async(dlock_queue *q, bool last, int64_t wait_ms, void **value,
                      size_t *len, dlock_done_cb cb, void *ud, dlock_op **out) {
  int rc = checks(q, true);
  if (rc == 0 && value == NULL) rc = null_arg(q, "value");
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
  if (rc == 0 && n == NULL) rc = null_arg(q, "n");
  dl_queue_req r;
  memset(&r, 0, sizeof r);
  r.op = delayed ? DL_QUEUE_SIZE_DELAYED : DL_QUEUE_SIZE;
  return run_async(q, rc, &r, NULL, NULL, n, cb, ud, op);
}

int dlock_queue_size_async(dlock_queue *q, int64_t *n, dlock_done_cb cb,
                           void *ud, dlock_op **op) {
  return size_async(q, false, n, cb, ud, op);
}

int dlock_queue_delayed_size_async(dlock_queue *q, int64_t *n, dlock_done_cb cb,
                                   void *ud, dlock_op **op) {
  return size_async(q, true, n, cb, ud, op);
}

int dlock_queue_poll_reliable_async(dlock_queue *q, int64_t wait_ms,
                                    void **value, size_t *len, dlock_done_cb cb,
                                    void *ud, dlock_op **op) {
  int rc = checks(q, true);
  if (rc == 0 && value == NULL) rc = null_arg(q, "value");
  if (rc == 0) *value = NULL;
  char id[DLOCK_PERMIT_ID_LEN];
  dl_queue_req r;
  rc = reliable_req(q, rc, false, wait_ms, NULL, 0, id, &r);
  return run_async(q, rc, &r, value, len, NULL, cb, ud, op);
}

int dlock_queue_ack_async(dlock_queue *q, const void *value, size_t len,
                          dlock_done_cb cb, void *ud, dlock_op **op) {
  char id[DLOCK_PERMIT_ID_LEN];
  dl_queue_req r;
  int rc = reliable_req(q, checks(q, true), true, 0, value, len, id, &r);
  return run_async(q, rc, &r, NULL, NULL, NULL, cb, ud, op);
}
