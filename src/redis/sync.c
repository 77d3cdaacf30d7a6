/* sync.c: semaphores and latches on Redis, wire-compatible with Redisson:
 * - RSemaphore: a string at the name holding the permits available;
 *   "redisson_sc:{name}" carries the permits now available after each
 *   change, which wakes that many waiters.
 * - RPermitExpirableSemaphore: the permits available at the name, the
 *   permits taken as 16-byte ids in the zset "{name}:timeout" scored with
 *   the end of their lease (by the server's clock, not each client's:
 *   docs/WIRE.md), and the same channel.
 * - RCountDownLatch: a string at the name holding the count (gone at
 *   zero); "redisson_countdownlatch__channel:{name}" gets "0" at zero
 *   (wakes every waiter) and "1" on a new count. */
#include "redis.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The handle's hint word for a semaphore's release: its last acquire had
 * to wait, or its last release was heard by some client. Others then
 * likely wait, and the release goes out behind a PING (DL_EVAL_WAKE_FIRST)
 * so that its message reaches them before its reply reaches the releaser,
 * which would otherwise often take the permits back first. */
#define HINT_WAITED 1u
#define HINT_HEARD 2u

static int wake_flags(const dl_sync_ref *s) {
  return atomic_load_explicit(s->hint, memory_order_relaxed) ? DL_EVAL_WAKE_FIRST
                                                            : 0;
}

static void hint_set(const dl_sync_ref *s, unsigned bit, bool on) {
  if (on) atomic_fetch_or_explicit(s->hint, bit, memory_order_relaxed);
  else atomic_fetch_and_explicit(s->hint, ~bit, memory_order_relaxed);
}

/* The names beside s's key, each DL_DERIVED_MAX bytes. */
static const char *sem_channel(char *out, const dl_sync_ref *s) {
  dl_derived_into(out, DL_DERIVED_MAX, "redisson_sc", s->key);
  return out;
}

static const char *latch_channel(char *out, const dl_sync_ref *s) {
  dl_derived_into(out, DL_DERIVED_MAX, "redisson_countdownlatch__channel",
                  s->key);
  return out;
}

/* GET of an integer string (nil: 0) in the int32 range. */
static int get_int(dl_redis *R, const char *key, long long *v) {
  const char *argv[] = {"GET", key};
  redisReply *r = NULL;
  int rc = R->link->ops->command(R->link, 2, argv, &r);
  if (rc != 0) return rc;
  *v = 0;
  if (r->type == REDIS_REPLY_STRING) {
    char *end;
    *v = strtoll(r->str, &end, 10);
    if (*end != '\0' || *v < INT32_MIN || *v > INT32_MAX) rc = DLOCK_EPROTO;
  } else if (r->type != REDIS_REPLY_NIL) {
    rc = DLOCK_EPROTO;
  }
  freeReplyObject(r);
  if (rc) return dl_seterr(R->env.err_owner, rc, "unexpected reply to GET");
  return 0;
}

/* ---- the counting semaphore ---- */
typedef struct sem_try {
  dl_redis *R;
  const dl_sync_ref *s;
  char num[DL_INT_BUF];
  int tries;
} sem_try;

static int sem_take(void *p, int64_t *recheck_ms) {
  sem_try *t = p;
  t->tries++;
  *recheck_ms = -1; /* permits only come back with a message */
  const char *keys[] = {t->s->key};
  const char *args[] = {t->num};
  long long v = 0;
  int rc = dl_redis_eval_int(t->R, DL_SCRIPT_SEMAPHORE_ACQUIRE, 1, keys, 1,
                             args, 0, 1, &v);
  return rc ? rc : (int)v;
}

int dl_redis_sem_acquire(dl_backend *b, const dl_sync_ref *s, int permits,
                         bool wait, int64_t deadline) {
  dl_redis *R = (dl_redis *)b;
  sem_try t = {.R = R, .s = s};
  dl_fmt_ll(t.num, permits);
  char ch[DL_DERIVED_MAX];
  int rc = dl_redis_wait_for(R, sem_channel(ch, s), DL_WAKE_COUNT, wait,
                             deadline, sem_take, &t);
  if (rc >= 0) hint_set(s, HINT_WAITED, t.tries > 1);
  return rc;
}

/* ---- the permit-expirable semaphore ---- */
/* Runs permits.lua with `op` and up to two arguments. */
static int permits_run(dl_redis *R, const dl_sync_ref *s, int flags,
                       const char *op, const char *a1, const char *a2,
                       redisReply **r) {
  char timeouts[DL_DERIVED_MAX], ch[DL_DERIVED_MAX];
  dl_derived_suffix_into(timeouts, sizeof timeouts, s->key, "timeout");
  const char *keys[] = {s->key, timeouts, sem_channel(ch, s)};
  const char *args[] = {op, a1 ? a1 : "", a2 ? a2 : ""};
  return R->link->ops->eval(R->link, DL_SCRIPT_PERMITS | flags, 3, keys, 3,
                            args, r);
}

/* The same, answered by one integer in [lo, hi]. */
static int permits_int(dl_redis *R, const dl_sync_ref *s, int flags,
                       const char *op, const char *a1, const char *a2,
                       long long lo, long long hi, long long *v) {
  redisReply *r = NULL;
  int rc = permits_run(R, s, flags, op, a1, a2, &r);
  return rc ? rc : dl_redis_int_reply(R, r, lo, hi, v);
}

typedef struct permit_try {
  dl_redis *R;
  const dl_sync_ref *s;
  const char *id;
  char lease[DL_INT_BUF];
  int64_t sent;
  int tries;
} permit_try;

static int permit_take(void *arg, int64_t *recheck_ms) {
  permit_try *t = arg;
  redisReply *r = NULL;
  t->tries++;
  t->sent = dl_now_ms();
  int rc = permits_run(t->R, t->s, 0, "acquire", t->lease, t->id, &r);
  if (rc != 0) return rc;
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_INTEGER ||
      r->element[1]->type != REDIS_REPLY_INTEGER ||
      (r->element[0]->integer != 0 && r->element[0]->integer != 1)) {
    freeReplyObject(r);
    return dl_seterr(t->R->env.err_owner, DLOCK_EPROTO,
                     "unexpected reply to acquire");
  }
  rc = (int)r->element[0]->integer;
  /* Not available: try again when the next lease ends (its permit then
   * comes back without a message), or on a release. */
  long long next = r->element[1]->integer;
  *recheck_ms = next < 0 ? -1 : next + 1;
  freeReplyObject(r);
  return rc;
}

int dl_redis_permit_acquire(dl_backend *b, const dl_sync_ref *s,
                            const char *id, int64_t lease_ms, bool wait,
                            int64_t deadline, int64_t *valid_until) {
  dl_redis *R = (dl_redis *)b;
  permit_try t = {.R = R, .s = s, .id = id};
  dl_fmt_ll(t.lease, lease_ms);
  char ch[DL_DERIVED_MAX];
  int rc = dl_redis_wait_for(R, sem_channel(ch, s), DL_WAKE_COUNT, wait,
                             deadline, permit_take, &t);
  if (rc >= 0) hint_set(s, HINT_WAITED, t.tries > 1);
  if (rc == 1) *valid_until = dl_validity(t.sent, lease_ms);
  return rc;
}

/* ---- the latch ---- */
static int latch_count(dl_redis *R, const dl_sync_ref *s, long long *v) {
  int rc = get_int(R, s->key, v);
  if (rc == 0 && *v < 0) *v = 0;
  return rc;
}

typedef struct latch_try {
  dl_redis *R;
  const dl_sync_ref *s;
} latch_try;

static int at_zero(void *p, int64_t *recheck_ms) {
  latch_try *t = p;
  *recheck_ms = -1;
  long long n = 0;
  int rc = latch_count(t->R, t->s, &n);
  return rc ? rc : n == 0;
}

int dl_redis_latch_await(dl_backend *b, const dl_sync_ref *s, bool wait,
                         int64_t deadline) {
  dl_redis *R = (dl_redis *)b;
  latch_try t = {R, s};
  char ch[DL_DERIVED_MAX];
  return dl_redis_wait_for(R, latch_channel(ch, s), DL_WAKE_ALL, wait,
                           deadline, at_zero, &t);
}

/* ---- everything else ---- */
int dl_redis_sync_update(dl_backend *b, const dl_sync_ref *s, dl_sync_op op,
                         long long n, const char *id, long long *v) {
  dl_redis *R = (dl_redis *)b;
  char num[DL_INT_BUF], ch[DL_DERIVED_MAX];
  dl_fmt_ll(num, n);
  const char *keys[] = {s->key, ch};
  const char *args[] = {NULL, num};
  int rc;
  switch (op) {
  case DL_SEM_SET:
  case DL_SEM_ADD:
  case DL_SEM_DRAIN:
  case DL_SEM_RELEASE: {
    static const char *const names[] = {"set", "add", "drain", "release"};
    args[0] = names[op - DL_SEM_SET];
    sem_channel(ch, s);
    int flags = op == DL_SEM_RELEASE ? wake_flags(s) : 0;
    rc = dl_redis_eval_int(R, DL_SCRIPT_SEMAPHORE_UPDATE | flags, 2, keys, 2,
                           args, INT32_MIN, INT32_MAX, v);
    if (rc == 0 && op == DL_SEM_RELEASE) hint_set(s, HINT_HEARD, *v > 0);
    return rc;
  }
  case DL_SEM_AVAILABLE:
    return get_int(R, s->key, v);
  case DL_PERMITS_SET:
    return permits_int(R, s, 0, "set", num, NULL, 0, 1, v);
  case DL_PERMITS_ADD:
    return permits_int(R, s, 0, "add", num, NULL, 0, 0, v);
  case DL_PERMITS_AVAILABLE:
    return permits_int(R, s, 0, "available", NULL, NULL, INT32_MIN,
                       INT32_MAX, v);
  case DL_PERMITS_RELEASE:
    rc = permits_int(R, s, wake_flags(s), "release", id, NULL, -1, 2, v);
    if (rc == 0 && *v > 0) hint_set(s, HINT_HEARD, *v == 2);
    return rc;
  case DL_PERMITS_FORCE:
    return permits_int(R, s, 0, "force", id, R->env.revoke_channel, 0, 1, v);
  case DL_LATCH_SET:
  case DL_LATCH_DOWN:
    args[0] = op == DL_LATCH_SET ? "set" : "down";
    latch_channel(ch, s);
    return dl_redis_eval_int(R, DL_SCRIPT_LATCH_UPDATE, 2, keys, 2, args, -1,
                             INT64_MAX, v);
  case DL_LATCH_COUNT:
    return latch_count(R, s, v);
  }
  return dl_seterr(R->env.err_owner, DLOCK_EINVAL, "unknown operation");
}
