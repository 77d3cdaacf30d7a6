/* latch.c: the count-down latch (Redisson's RCountDownLatch): a count set
 * once, counted down by anyone, awaited by everyone until it reaches zero.
 * The layout on a deployment is the backend's (src/redis/sync.c). */
#include "locks.h"

#include <stdlib.h>
#include <string.h>

struct dlock_latch {
  dlock_client *c;
  char *key;
  atomic_uchar hint;
};

int dlock_latch_new(dlock_client *c, const char *name, dlock_latch **out) {
  if (out) *out = NULL;
  if (c == NULL || out == NULL) return DLOCK_EINVAL;
  int rc = dl_check_name(c, name);
  if (rc != 0) return rc;
  dlock_latch *l = calloc(1, sizeof *l);
  if (l == NULL || (l->key = dl_key(c, "%s", name)) == NULL) {
    dlock_latch_free(l);
    return dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  }
  l->c = c;
  *out = l;
  return 0;
}

void dlock_latch_free(dlock_latch *l) {
  if (l == NULL) return;
  free(l->key);
  free(l);
}

static dl_sync_ref ref_of(dlock_latch *l) {
  dl_sync_ref r = {l->key, l->key + l->c->prefix_len, &l->hint};
  return r;
}

static int update(dlock_latch *l, dl_sync_op op, int64_t count, long long *v) {
  dl_backend *b = l->c->backend;
  if (b->ops->sync_update == NULL) return dl_unsupported(l->c, "latch");
  dl_sync_ref r = ref_of(l);
  int rc = b->ops->sync_update(b, &r, op, count, NULL, v);
  if (rc == 0) dl_clearerr(l->c);
  return rc;
}

int dlock_latch_try_set_count(dlock_latch *l, int64_t count) {
  if (l == NULL) return DLOCK_EINVAL;
  if (count <= 0 || count > INT32_MAX)
    return dl_seterr(l->c, DLOCK_EINVAL, "the count must be 1..%d", INT32_MAX);
  long long v = 0;
  int rc = update(l, DL_LATCH_SET, count, &v);
  return rc ? rc : (v == 1);
}

int dlock_latch_count_down(dlock_latch *l) {
  if (l == NULL) return DLOCK_EINVAL;
  long long v = 0;
  int rc = update(l, DL_LATCH_DOWN, 0, &v);
  if (rc != 0) return rc;
  if (v < 0)
    return dl_seterr(l->c, DLOCK_ERANGE,
                     "latch '%s' is at zero: nothing to count down",
                     l->key + l->c->prefix_len);
  return 0;
}

int dlock_latch_count(dlock_latch *l, int64_t *count) {
  if (l == NULL || count == NULL) return DLOCK_EINVAL;
  long long v = 0;
  int rc = update(l, DL_LATCH_COUNT, 0, &v);
  if (rc == 0) *count = v;
  return rc;
}

int dlock_latch_await(dlock_latch *l, int64_t wait_ms) {
  if (l == NULL) return DLOCK_EINVAL;
  int rc = dl_check_open(l->c);
  if (rc != 0) return rc;
  dl_backend *b = l->c->backend;
  if (b->ops->latch_await == NULL) return dl_unsupported(l->c, "latch");
  dl_sync_ref r = ref_of(l);
  rc = b->ops->latch_await(b, &r, wait_ms != 0, dl_deadline(wait_ms));
  if (rc >= 0) dl_clearerr(l->c);
  return rc;
}
