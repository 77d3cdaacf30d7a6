/* latch.c: the count-down latch (Redisson's RCountDownLatch): a count set
 * once, counted down by anyone, awaited by everyone until it reaches zero.
 * The layout on a deployment is the backend's (src/redis/ops/sem_latch.c). Each
 * call is its checks (a dl_sync_call) run blocking or on the loop
 * (kinds.c). */
#include "locks.h"

#include <stdlib.h>
#include <string.h>

#define KIND "latch" /* in errors */

struct dlock_latch {
  dl_sync_handle h; /* first */
};

static void destroy(dl_sync_handle *h) {
  free(h->key);
  free(h);
}

int dlock_latch_new(dlock_client *c, const char *name, dlock_latch **out) {
  if (out) *out = NULL;
  if (c == NULL) return DLOCK_EINVAL;
  if (out == NULL) return dl_seterr(c, DLOCK_EINVAL, "out is NULL");
  int rc = dl_check_name(c, name);
  if (rc != 0) return rc;
  dlock_latch *l = calloc(1, sizeof *l);
  if (l == NULL || (l->h.key = dl_key(c, "%s", name)) == NULL) {
    free(l);
    return dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  }
  l->h.c = c;
  l->h.destroy = destroy;
  *out = l;
  return 0;
}

void dlock_latch_free(dlock_latch *l) {
  if (l == NULL || dl_sync_free_later(&l->h)) return;
  destroy(&l->h);
}

/* An update of l (dl_sync_update_call). */
static int update(dlock_latch *l, dl_sync_op op, long long n,
                  int (*end)(dl_sync_handle *, dl_sync_call *, int),
                  dl_sync_call *q) {
  return dl_sync_update_call(l, KIND, op, n, end, q);
}

static int set_call(dlock_latch *l, int64_t count, dl_sync_call *q) {
  if (l && (count <= 0 || count > INT32_MAX))
    return dl_seterr(l->h.c, DLOCK_EINVAL, "the count must be 1..%d",
                     INT32_MAX);
  return update(l, DL_LATCH_SET, count, dl_sync_end_bool, q);
}

/* count_down's end: 0, or DLOCK_ERANGE at zero. */
static int counted_down(dl_sync_handle *h, dl_sync_call *q, int rc) {
  if (rc != 0) return rc;
  if (q->v < 0)
    return dl_seterr(h->c, DLOCK_ERANGE,
                     "latch '%s' is at zero: nothing to count down",
                     h->key + h->c->prefix_len);
  dl_clearerr(h->c);
  return 0;
}

static int down_call(dlock_latch *l, dl_sync_call *q) {
  return update(l, DL_LATCH_DOWN, 0, counted_down, q);
}

/* The count (never below zero) as the result. */
static int count_call(dlock_latch *l, dl_sync_call *q) {
  return update(l, DL_LATCH_COUNT, 0, dl_sync_end_count, q);
}

/* The await's end: 0 at zero, DLOCK_EBUSY, a code. */
static int awaited(dl_sync_handle *h, dl_sync_call *q, int rc) {
  (void)q;
  if (rc == 0)
    return dl_seterr(h->c, DLOCK_EBUSY, "latch '%s' not at zero in time",
                     h->key + h->c->prefix_len);
  if (rc < 0) return rc;
  dl_clearerr(h->c);
  return 0;
}

static int await_call(dlock_latch *l, int64_t wait_ms, dl_sync_call *q) {
  if (l == NULL) return DLOCK_EINVAL;
  int rc = dl_check_open(l->h.c);
  if (rc != 0) return rc;
  memset(q, 0, sizeof *q);
  q->what = DL_SYNC_LATCH;
  q->kind = KIND;
  q->wait = wait_ms != 0;
  q->deadline = dl_deadline(wait_ms);
  q->end = awaited;
  return 0;
}

int dlock_latch_try_set_count(dlock_latch *l, int64_t count) {
  dl_sync_call q;
  return dl_sync_go(set_call(l, count, &q), l, &q);
}

int dlock_latch_count_down(dlock_latch *l) {
  dl_sync_call q;
  return dl_sync_go(down_call(l, &q), l, &q);
}

int dlock_latch_get_count(dlock_latch *l, int64_t *count) {
  if (count == NULL)
    return l ? dl_seterr(l->h.c, DLOCK_EINVAL, "count is NULL") : DLOCK_EINVAL;
  dl_sync_call q;
  int rc = dl_sync_go(count_call(l, &q), l, &q);
  if (rc < 0) return rc;
  *count = rc;
  return 0;
}

int dlock_latch_try_await(dlock_latch *l, int64_t wait_ms) {
  dl_sync_call q;
  return dl_sync_go(await_call(l, wait_ms, &q), l, &q);
}

int dlock_latch_await(dlock_latch *l) {
  return dlock_latch_try_await(l, DL_WAIT_FOREVER);
}

/* ---- on the event loop ---- */
int dlock_latch_try_set_count_async(dlock_latch *l, int64_t count,
                                    dlock_done_cb cb, void *ud,
                                    dlock_op **op) {
  dl_sync_call q;
  return dl_sync_go_async(set_call(l, count, &q), l, &q, cb, ud, op);
}

int dlock_latch_count_down_async(dlock_latch *l, dlock_done_cb cb, void *ud,
                                 dlock_op **op) {
  dl_sync_call q;
  return dl_sync_go_async(down_call(l, &q), l, &q, cb, ud, op);
}

int dlock_latch_get_count_async(dlock_latch *l, dlock_done_cb cb, void *ud,
                                dlock_op **op) {
  dl_sync_call q;
  return dl_sync_go_async(count_call(l, &q), l, &q, cb, ud, op);
}

int dlock_latch_await_async(dlock_latch *l, int64_t wait_ms, dlock_done_cb cb,
                            void *ud, dlock_op **op) {
  dl_sync_call q;
  return dl_sync_go_async(await_call(l, wait_ms, &q), l, &q, cb, ud, op);
}
