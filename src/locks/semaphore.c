/* semaphore.c: the counting semaphore (Redisson's RSemaphore): permits
 * that are not owned, so a holder that dies keeps its permits (see the
 * permit-expirable semaphore for permits that come back). The layout on a
 * deployment is the backend's (src/redis/ops/sem_latch.c). Each call is its checks
 * (a dl_sync_call) run blocking or on the loop (kinds.c). */
#include "locks.h"

#include <stdlib.h>
#include <string.h>

#define KIND "semaphore" /* in errors */

struct dlock_semaphore {
  dl_sync_handle h; /* first */
};

static void destroy(dl_sync_handle *h) {
  free(h->key);
  free(h);
}

int dlock_semaphore_new(dlock_client *c, const char *name,
                        dlock_semaphore **out) {
  if (out) *out = NULL;
  if (c == NULL) return DLOCK_EINVAL;
  if (out == NULL) return dl_seterr(c, DLOCK_EINVAL, "out is NULL");
  int rc = dl_check_name(c, name);
  if (rc != 0) return rc;
  dlock_semaphore *s = calloc(1, sizeof *s);
  if (s == NULL || (s->h.key = dl_key(c, "%s", name)) == NULL) {
    free(s);
    return dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  }
  s->h.c = c;
  s->h.destroy = destroy;
  *out = s;
  return 0;
}

void dlock_semaphore_free(dlock_semaphore *s) {
  if (s == NULL || dl_sync_free_later(&s->h)) return;
  destroy(&s->h);
}

/* An update of s (dl_sync_update_call). */
static int update(dlock_semaphore *s, dl_sync_op op, long long n,
                  int (*end)(dl_sync_handle *, dl_sync_call *, int),
                  dl_sync_call *q) {
  return dl_sync_update_call(s, KIND, op, n, end, q);
}

static int add_call(dlock_semaphore *s, int permits, dl_sync_call *q) {
  return update(s, DL_SEM_ADD, permits, dl_sync_end_rc, q);
}

static int drain_call(dlock_semaphore *s, dl_sync_call *q) {
  return update(s, DL_SEM_DRAIN, 0, dl_sync_end_count, q);
}

/* Below zero after add_permits(-n): none available. */
static int available_call(dlock_semaphore *s, dl_sync_call *q) {
  return update(s, DL_SEM_AVAILABLE, 0, dl_sync_end_count, q);
}

static int set_call(dlock_semaphore *s, int permits, dl_sync_call *q) {
  if (s && permits < 0)
    return dl_seterr(s->h.c, DLOCK_EINVAL, "permits must not be negative");
  return update(s, DL_SEM_SET, permits, dl_sync_end_bool, q);
}

static int release_call(dlock_semaphore *s, int permits, dl_sync_call *q) {
  if (s && permits <= 0)
    return dl_seterr(s->h.c, DLOCK_EINVAL, "permits must be positive");
  return update(s, DL_SEM_RELEASE, permits, dl_sync_end_rc, q);
}

/* The acquire's end: 0, DLOCK_EBUSY, a code; permits granted as the call
 * was cancelled go back. */
static int acquired(dl_sync_handle *h, dl_sync_call *q, int rc) {
  if (rc == 0)
    return dl_seterr(h->c, DLOCK_EBUSY, "no %lld permit(s) of '%s' in time",
                     q->n, h->key + h->c->prefix_len);
  if (rc < 0) return rc;
  if (q->cancelled) {
    q->give_back = true;
    return dl_seterr(h->c, DLOCK_ECANCELED, "cancelled");
  }
  dl_clearerr(h->c);
  return 0;
}

static int acquire_call(dlock_semaphore *s, int permits, int64_t wait_ms,
                        dl_sync_call *q) {
  if (s == NULL) return DLOCK_EINVAL;
  if (permits <= 0)
    return dl_seterr(s->h.c, DLOCK_EINVAL, "permits must be positive");
  int rc = dl_check_open(s->h.c);
  if (rc != 0) return rc;
  memset(q, 0, sizeof *q);
  q->what = DL_SYNC_SEM;
  q->kind = KIND;
  q->n = permits;
  q->wait = wait_ms != 0;
  q->deadline = dl_deadline(wait_ms);
  q->end = acquired;
  return 0;
}

int dlock_semaphore_try_set_permits(dlock_semaphore *s, int permits) {
  dl_sync_call q;
  return dl_sync_go(set_call(s, permits, &q), s, &q);
}

int dlock_semaphore_add_permits(dlock_semaphore *s, int permits) {
  dl_sync_call q;
  return dl_sync_go(add_call(s, permits, &q), s, &q);
}

int dlock_semaphore_drain(dlock_semaphore *s) {
  dl_sync_call q;
  return dl_sync_go(drain_call(s, &q), s, &q);
}

int dlock_semaphore_get_available(dlock_semaphore *s) {
  dl_sync_call q;
  return dl_sync_go(available_call(s, &q), s, &q);
}

int dlock_semaphore_try_acquire(dlock_semaphore *s, int permits,
                                int64_t wait_ms) {
  dl_sync_call q;
  return dl_sync_go(acquire_call(s, permits, wait_ms, &q), s, &q);
}

int dlock_semaphore_acquire(dlock_semaphore *s, int permits) {
  return dlock_semaphore_try_acquire(s, permits, DL_WAIT_FOREVER);
}

int dlock_semaphore_release(dlock_semaphore *s, int permits) {
  dl_sync_call q;
  return dl_sync_go(release_call(s, permits, &q), s, &q);
}

/* ---- on the event loop ---- */
int dlock_semaphore_try_set_permits_async(dlock_semaphore *s, int permits,
                                          dlock_done_cb cb, void *ud,
                                          dlock_op **op) {
  dl_sync_call q;
  return dl_sync_go_async(set_call(s, permits, &q), s, &q, cb, ud, op);
}

int dlock_semaphore_add_permits_async(dlock_semaphore *s, int permits,
                                      dlock_done_cb cb, void *ud,
                                      dlock_op **op) {
  dl_sync_call q;
  return dl_sync_go_async(add_call(s, permits, &q), s, &q, cb, ud, op);
}

int dlock_semaphore_drain_async(dlock_semaphore *s, dlock_done_cb cb,
                                void *ud, dlock_op **op) {
  dl_sync_call q;
  return dl_sync_go_async(drain_call(s, &q), s, &q, cb, ud, op);
}

int dlock_semaphore_get_available_async(dlock_semaphore *s, dlock_done_cb cb,
                                        void *ud, dlock_op **op) {
  dl_sync_call q;
  return dl_sync_go_async(available_call(s, &q), s, &q, cb, ud, op);
}

int dlock_semaphore_acquire_async(dlock_semaphore *s, int permits,
                                  int64_t wait_ms, dlock_done_cb cb, void *ud,
                                  dlock_op **op) {
  dl_sync_call q;
  return dl_sync_go_async(acquire_call(s, permits, wait_ms, &q), s, &q, cb,
                          ud, op);
}

int dlock_semaphore_release_async(dlock_semaphore *s, int permits,
                                  dlock_done_cb cb, void *ud, dlock_op **op) {
  dl_sync_call q;
  return dl_sync_go_async(release_call(s, permits, &q), s, &q, cb, ud, op);
}
