/* latch.c: the count-down latch, wire-compatible with Redisson's
 * RCountDownLatch: a string at the latch's name holding the count (gone at
 * zero), and "redisson_countdownlatch__channel:{name}" where reaching zero
 * publishes "0" (wakes every waiter) and a new count "1". */
#include "../core/internal.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dlock_latch {
  dlock_client *c;
  char *key;
  char *channel;
};

int dlock_latch_new(dlock_client *c, const char *name, dlock_latch **out) {
  if (out) *out = NULL;
  if (c == NULL || out == NULL) return DLOCK_EINVAL;
  int rc = dl_check_name(c, name);
  if (rc != 0) return rc;
  dlock_latch *l = calloc(1, sizeof *l);
  if (l == NULL || (l->key = dl_key(c, "%s", name)) == NULL ||
      (l->channel = dl_derived("redisson_countdownlatch__channel", l->key)) ==
          NULL) {
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
  free(l->channel);
  free(l);
}

static int update(dlock_latch *l, const char *op, int64_t count, long long *v) {
  char num[24];
  snprintf(num, sizeof num, "%lld", (long long)count);
  const char *keys[] = {l->key, l->channel};
  const char *args[] = {op, num};
  return dl_eval_int(l->c, DL_SCRIPT_LATCH_UPDATE, 2, keys, 2, args, -1,
                     INT64_MAX, v);
}

int dlock_latch_try_set_count(dlock_latch *l, int64_t count) {
  if (l == NULL) return DLOCK_EINVAL;
  if (count <= 0 || count > INT32_MAX)
    return dl_seterr(l->c, DLOCK_EINVAL, "the count must be 1..%d", INT32_MAX);
  long long v = 0;
  int rc = update(l, "set", count, &v);
  return rc ? rc : (v == 1);
}

int dlock_latch_count_down(dlock_latch *l) {
  if (l == NULL) return DLOCK_EINVAL;
  long long v = 0;
  int rc = update(l, "down", 0, &v);
  if (rc != 0) return rc;
  if (v < 0)
    return dl_seterr(l->c, DLOCK_ERANGE,
                     "latch '%s' is at zero: nothing to "
                     "count down",
                     l->key + l->c->prefix_len);
  return 0;
}

int dlock_latch_count(dlock_latch *l, int64_t *count) {
  if (l == NULL || count == NULL) return DLOCK_EINVAL;
  long long v = 0;
  int rc = dl_get_int(l->c, l->key, &v);
  if (rc == 0) *count = v < 0 ? 0 : v;
  return rc;
}

static int at_zero(void *p, int64_t *recheck_ms) {
  dlock_latch *l = p;
  *recheck_ms = -1;
  int64_t n = 0;
  int rc = dlock_latch_count(l, &n);
  return rc ? rc : n == 0;
}

int dlock_latch_await(dlock_latch *l, int64_t wait_ms) {
  if (l == NULL) return DLOCK_EINVAL;
  if (atomic_load(&l->c->closing))
    return dl_seterr(l->c, DLOCK_ECLOSED, "the client is closing");
  int rc = dl_wait_for(l->c, l->channel, DL_WAKE_ALL, wait_ms, at_zero, l);
  if (rc >= 0) dl_clearerr(l->c);
  return rc;
}
