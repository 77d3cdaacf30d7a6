/* latch.c: the count-down latch (Redisson's RCountDownLatch): a count set
 * once, counted down by anyone, awaited by everyone until it reaches zero.
 * The layout on a deployment is the backend's (src/redis/sync.c). */
#include "locks.h"

#include <stdlib.h>
#include <string.h>

struct dlock_latch {
  dl_sync_handle h; /* first */
};

int dlock_latch_new(dlock_client *c, const char *name, dlock_latch **out) {
  if (out) *out = NULL;
  if (c == NULL || out == NULL) return DLOCK_EINVAL;
  int rc = dl_check_name(c, name);
  if (rc != 0) return rc;
  dlock_latch *l = calloc(1, sizeof *l);
  if (l == NULL || (l->h.key = dl_key(c, "%s", name)) == NULL) {
    dlock_latch_free(l);
    return dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  }
  l->h.c = c;
  *out = l;
  return 0;
}

void dlock_latch_free(dlock_latch *l) {
  if (l == NULL) return;
  free(l->h.key);
  free(l);
}

int dlock_latch_try_set_count(dlock_latch *l, int64_t count) {
  if (l == NULL) return DLOCK_EINVAL;
  if (count <= 0 || count > INT32_MAX)
    return dl_seterr(l->h.c, DLOCK_EINVAL, "the count must be 1..%d",
                     INT32_MAX);
  long long v = 0;
  int rc = dl_sync_update(&l->h, "latch", DL_LATCH_SET, count, NULL, &v);
  return rc ? rc : (v == 1);
}

int dlock_latch_count_down(dlock_latch *l) {
  if (l == NULL) return DLOCK_EINVAL;
  long long v = 0;
  int rc = dl_sync_update(&l->h, "latch", DL_LATCH_DOWN, 0, NULL, &v);
  if (rc != 0) return rc;
  if (v < 0)
    return dl_seterr(l->h.c, DLOCK_ERANGE,
                     "latch '%s' is at zero: nothing to count down",
                     l->h.key + l->h.c->prefix_len);
  return 0;
}

int dlock_latch_count(dlock_latch *l, int64_t *count) {
  if (l == NULL || count == NULL) return DLOCK_EINVAL;
  long long v = 0;
  int rc = dl_sync_update(&l->h, "latch", DL_LATCH_COUNT, 0, NULL, &v);
  if (rc == 0) *count = v;
  return rc;
}

int dlock_latch_try_await(dlock_latch *l, int64_t wait_ms) {
  if (l == NULL) return DLOCK_EINVAL;
  int rc = dl_check_open(l->h.c);
  if (rc != 0) return rc;
  dl_backend *b = l->h.c->backend;
  if (b->ops->latch_await == NULL) return dl_unsupported(l->h.c, "latch");
  dl_sync_ref r = dl_sync_ref_of(&l->h);
  rc = b->ops->latch_await(b, &r, wait_ms != 0, dl_deadline(wait_ms));
  if (rc == 0)
    return dl_seterr(l->h.c, DLOCK_EBUSY, "latch '%s' not at zero in time",
                     r.name);
  if (rc < 0) return rc;
  dl_clearerr(l->h.c);
  return 0;
}

int dlock_latch_await(dlock_latch *l) {
  return dlock_latch_try_await(l, DL_WAIT_FOREVER);
}
