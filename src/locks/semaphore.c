/* semaphore.c: the counting semaphore, wire-compatible with Redisson's
 * RSemaphore: a string at the semaphore's name holding the permits
 * available, and "redisson_sc:{name}" on which every change publishes the
 * permits now available, which wakes that many waiters. Permits are not
 * owned: a holder that dies keeps its permits (see the permit-expirable
 * semaphore for permits that come back). */
#include "../core/internal.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dlock_semaphore {
  dlock_client *c;
  char *key;     /* prefix + name */
  char *channel; /* redisson_sc:{key} */
  dl_wake_hint hint;
};

int dlock_semaphore_new(dlock_client *c, const char *name,
                        dlock_semaphore **out) {
  if (out) *out = NULL;
  if (c == NULL || out == NULL) return DLOCK_EINVAL;
  int rc = dl_check_name(c, name);
  if (rc != 0) return rc;
  dlock_semaphore *s = calloc(1, sizeof *s);
  if (s == NULL || (s->key = dl_key(c, "%s", name)) == NULL ||
      (s->channel = dl_derived("redisson_sc", s->key)) == NULL) {
    dlock_semaphore_free(s);
    return dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  }
  s->c = c;
  *out = s;
  return 0;
}

void dlock_semaphore_free(dlock_semaphore *s) {
  if (s == NULL) return;
  free(s->key);
  free(s->channel);
  free(s);
}

/* Runs semaphore_update.lua: 0 and its integer in *v, or a negative code.
 * `flags`: 0 or DL_EVAL_WAKE_FIRST. */
static int update(dlock_semaphore *s, int flags, const char *op, int n,
                  long long *v) {
  char num[16];
  snprintf(num, sizeof num, "%d", n);
  const char *keys[] = {s->key, s->channel};
  const char *args[] = {op, num};
  return dl_eval_int(s->c, DL_SCRIPT_SEMAPHORE_UPDATE | flags, 2, keys, 2,
                     args, INT32_MIN, INT32_MAX, v);
}

int dlock_semaphore_try_set_permits(dlock_semaphore *s, int permits) {
  if (s == NULL) return DLOCK_EINVAL;
  if (permits < 0)
    return dl_seterr(s->c, DLOCK_EINVAL, "permits must not be negative");
  long long v = 0;
  int rc = update(s, 0, "set", permits, &v);
  return rc ? rc : (v == 1);
}

int dlock_semaphore_add_permits(dlock_semaphore *s, int permits) {
  if (s == NULL) return DLOCK_EINVAL;
  long long v = 0;
  return update(s, 0, "add", permits, &v);
}

int dlock_semaphore_drain(dlock_semaphore *s) {
  if (s == NULL) return DLOCK_EINVAL;
  long long v = 0;
  int rc = update(s, 0, "drain", 0, &v);
  return rc ? rc : (v < 0 ? 0 : (int)v);
}

int dlock_semaphore_available(dlock_semaphore *s) {
  if (s == NULL) return DLOCK_EINVAL;
  long long v = 0;
  int rc = dl_get_int(s->c, s->key, &v);
  /* Below zero after add_permits(-n): none available. */
  return rc ? rc : (v < 0 ? 0 : (int)v);
}

typedef struct try_ctx {
  dlock_semaphore *s;
  char num[16];
  int tries;
} try_ctx;

static int try_take(void *p, int64_t *recheck_ms) {
  try_ctx *t = p;
  t->tries++;
  *recheck_ms = -1; /* permits only come back with a message */
  const char *keys[] = {t->s->key};
  const char *args[] = {t->num};
  redisReply *r = NULL;
  int rc = t->s->c->backend->ops->eval(
      t->s->c->backend, DL_SCRIPT_SEMAPHORE_ACQUIRE, 1, keys, 1, args, &r);
  if (rc != 0) return rc;
  rc = r->type == REDIS_REPLY_INTEGER && (r->integer == 0 || r->integer == 1)
           ? (int)r->integer
           : dl_seterr(t->s->c, DLOCK_EPROTO, "unexpected reply to acquire");
  freeReplyObject(r);
  return rc;
}

int dlock_semaphore_acquire(dlock_semaphore *s, int permits, int64_t wait_ms) {
  if (s == NULL) return DLOCK_EINVAL;
  if (permits <= 0)
    return dl_seterr(s->c, DLOCK_EINVAL, "permits must be positive");
  if (atomic_load(&s->c->closing))
    return dl_seterr(s->c, DLOCK_ECLOSED, "the client is closing");
  try_ctx t = {.s = s};
  snprintf(t.num, sizeof t.num, "%d", permits);
  int rc = dl_wait_for(s->c, s->channel, DL_WAKE_COUNT, wait_ms, try_take, &t);
  if (rc >= 0) dl_wake_hint_acquired(&s->hint, t.tries > 1);
  if (rc == 0)
    return dl_seterr(s->c, DLOCK_ELOCKED, "no %d permit(s) of '%s' in time",
                     permits, s->key + s->c->prefix_len);
  if (rc < 0) return rc;
  dl_clearerr(s->c);
  return 0;
}

int dlock_semaphore_release(dlock_semaphore *s, int permits) {
  if (s == NULL) return DLOCK_EINVAL;
  if (permits <= 0)
    return dl_seterr(s->c, DLOCK_EINVAL, "permits must be positive");
  long long heard = 0;
  int rc = update(s, dl_wake_hint_flags(&s->hint), "release", permits, &heard);
  if (rc == 0) dl_wake_hint_released(&s->hint, heard > 0);
  return rc;
}
