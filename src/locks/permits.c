/* permits.c: the permit-expirable semaphore, wire-compatible with Redisson's
 * RPermitExpirableSemaphore: the permits available at the name, the permits
 * taken as 16-byte ids in the zset "{name}:timeout" scored with the end of
 * their lease, and "redisson_sc:{name}" as the semaphore's channel. A permit
 * taken without a lease is renewed by the watchdog like a lock, so the
 * permits of a crashed holder come back one lease later; a permit whose
 * renewal fails is reported lost. Differences from Redisson: lease ends are
 * computed with the server's clock, not each client's (docs/WIRE.md). */
#include "../core/internal.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ID_BYTES 16
#define OWNER_MAX 256

struct dlock_permits {
  dlock_client *c;
  char *key;     /* prefix + name: the permits available */
  char *timeout; /* {key}:timeout: the permits taken */
  char *channel; /* redisson_sc:{key} */
  /* Guarded by the client's holds_mu: */
  dlock_permit_lost_cb cb;
  void *cb_ud;
  dl_wake_hint hint;
};

int dlock_permits_new(dlock_client *c, const char *name, dlock_permits **out) {
  if (out) *out = NULL;
  if (c == NULL || out == NULL) return DLOCK_EINVAL;
  int rc = dl_check_name(c, name);
  if (rc != 0) return rc;
  dlock_permits *p = calloc(1, sizeof *p);
  if (p == NULL || (p->key = dl_key(c, "%s", name)) == NULL ||
      (p->timeout = dl_derived_suffix(p->key, "timeout")) == NULL ||
      (p->channel = dl_derived("redisson_sc", p->key)) == NULL) {
    if (p) {
      free(p->key);
      free(p->timeout);
    }
    free(p);
    return dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  }
  p->c = c;
  *out = p;
  return 0;
}

void dlock_permits_free(dlock_permits *p) {
  if (p == NULL) return;
  /* Permits taken through this handle stop being renewed and come back
   * after their lease. */
  dl_holds_drop_via(p->c, p, NULL);
  free(p->key);
  free(p->timeout);
  free(p->channel);
  free(p);
}

void dlock_permits_on_lost(dlock_permits *p, dlock_permit_lost_cb cb,
                           void *ud) {
  if (p == NULL) return;
  pthread_mutex_lock(&p->c->holds_mu);
  p->cb = cb;
  p->cb_ud = ud;
  pthread_mutex_unlock(&p->c->holds_mu);
}

void dl_permit_lost(void *handle, const char *owner) {
  dlock_permits *p = handle;
  pthread_mutex_lock(&p->c->holds_mu);
  dlock_permit_lost_cb cb = p->cb;
  void *ud = p->cb_ud;
  pthread_mutex_unlock(&p->c->holds_mu);
  const char *id = strrchr(owner, ':');
  if (cb) cb(p, id ? id + 1 : owner, ud);
}

/* Runs permits.lua with `op` and up to two arguments. */
static int run(dlock_permits *p, const char *op, const char *a1, const char *a2,
               redisReply **r) {
  const char *keys[] = {p->key, p->timeout, p->channel};
  const char *args[] = {op, a1 ? a1 : "", a2 ? a2 : ""};
  return p->c->backend->ops->eval(p->c->backend, DL_SCRIPT_PERMITS, 3, keys, 3,
                                  args, r);
}

/* An operation answered by one integer in [lo, hi]. `flags`: 0 or
 * DL_EVAL_WAKE_FIRST. */
static int run_int(dlock_permits *p, int flags, const char *op, const char *a1,
                   const char *a2, long long lo, long long hi, long long *v) {
  const char *keys[] = {p->key, p->timeout, p->channel};
  const char *args[] = {op, a1 ? a1 : "", a2 ? a2 : ""};
  return dl_eval_int(p->c, DL_SCRIPT_PERMITS | flags, 3, keys, 3, args, lo, hi,
                     v);
}

int dlock_permits_try_set_permits(dlock_permits *p, int permits) {
  if (p == NULL) return DLOCK_EINVAL;
  if (permits < 0)
    return dl_seterr(p->c, DLOCK_EINVAL, "permits must not be negative");
  char n[16];
  snprintf(n, sizeof n, "%d", permits);
  long long v = 0;
  int rc = run_int(p, 0, "set", n, NULL, 0, 1, &v);
  return rc ? rc : (int)v;
}

int dlock_permits_add_permits(dlock_permits *p, int permits) {
  if (p == NULL) return DLOCK_EINVAL;
  char n[16];
  snprintf(n, sizeof n, "%d", permits);
  long long v = 0;
  return run_int(p, 0, "add", n, NULL, 0, 0, &v);
}

int dlock_permits_available(dlock_permits *p) {
  if (p == NULL) return DLOCK_EINVAL;
  long long v = 0;
  int rc = run_int(p, 0, "available", NULL, NULL, INT32_MIN, INT32_MAX, &v);
  return rc ? rc : (v < 0 ? 0 : (int)v);
}

typedef struct take_ctx {
  dlock_permits *p;
  char lease[24];
  char id[DLOCK_PERMIT_ID_LEN];
  int64_t sent;
  int tries;
} take_ctx;

static int try_take(void *arg, int64_t *recheck_ms) {
  take_ctx *t = arg;
  redisReply *r = NULL;
  t->tries++;
  t->sent = dl_now_ms();
  int rc = run(t->p, "acquire", t->lease, t->id, &r);
  if (rc != 0) return rc;
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_INTEGER ||
      r->element[1]->type != REDIS_REPLY_INTEGER ||
      (r->element[0]->integer != 0 && r->element[0]->integer != 1)) {
    freeReplyObject(r);
    return dl_seterr(t->p->c, DLOCK_EPROTO, "unexpected reply to acquire");
  }
  rc = (int)r->element[0]->integer;
  /* Not available: try again when the next lease ends (its permit then
   * comes back without a message), or on a release. */
  long long next = r->element[1]->integer;
  *recheck_ms = next < 0 ? -1 : next + 1;
  freeReplyObject(r);
  return rc;
}

static int owner_of(dlock_permits *p, const char *id, char *buf) {
  int n = snprintf(buf, OWNER_MAX, "%s:%s", p->c->id, id);
  return n < 0 || n >= OWNER_MAX ? DLOCK_EINVAL : 0;
}

static bool valid_id(const char *id) {
  if (id == NULL || strlen(id) != 2 * ID_BYTES) return false;
  for (const char *s = id; *s; s++)
    if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f'))) return false;
  return true;
}

int dlock_permits_acquire(dlock_permits *p, int64_t wait_ms, int64_t lease_ms,
                          char id[DLOCK_PERMIT_ID_LEN]) {
  if (p == NULL || id == NULL) return DLOCK_EINVAL;
  dlock_client *c = p->c;
  if (atomic_load(&c->closing))
    return dl_seterr(c, DLOCK_ECLOSED, "the client is closing");
  bool watchdog = lease_ms <= 0;
  if (watchdog) lease_ms = c->watchdog_timeout_ms;
  take_ctx t = {.p = p};
  snprintf(t.lease, sizeof t.lease, "%lld", (long long)lease_ms);
  unsigned char raw[ID_BYTES];
  if (dl_random_bytes(raw, sizeof raw) != 0)
    return dl_seterr(c, DLOCK_ENOMEM, "no random bytes for a permit id");
  for (int i = 0; i < ID_BYTES; i++)
    snprintf(t.id + 2 * i, 3, "%02x", raw[i]);
  int rc = dl_wait_for(c, p->channel, DL_WAKE_COUNT, wait_ms, try_take, &t);
  if (rc >= 0) dl_wake_hint_acquired(&p->hint, t.tries > 1);
  if (rc == 0)
    return dl_seterr(c, DLOCK_ELOCKED, "no permit of '%s' in time",
                     p->key + c->prefix_len);
  if (rc < 0) return rc;
  /* Taken: track it as a hold on the timeout set, owner "<client>:<id>". */
  char owner[OWNER_MAX];
  if (owner_of(p, t.id, owner) != 0) return DLOCK_EINVAL;
  int64_t valid_until = dl_validity(t.sent, lease_ms);
  pthread_mutex_lock(&c->holds_mu);
  dl_hold *h = dl_hold_add(c, p->timeout, owner);
  if (h) {
    h->permit = true;
    h->via = p;
    h->count = 1;
    h->lease_ms = lease_ms;
    h->valid_until = valid_until;
    if ((h->renewal = dl_watchdog_add(c->watchdog, h->key, h->tail,
                                      h->valid_until, watchdog)) == NULL)
      rc = DLOCK_ENOMEM;
  } else {
    rc = DLOCK_ENOMEM;
  }
  pthread_mutex_unlock(&c->holds_mu);
  memcpy(id, t.id, DLOCK_PERMIT_ID_LEN);
  if (rc == DLOCK_ENOMEM) { /* cannot track it: give it back */
    dlock_permits_release(p, t.id);
    return dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  }
  if (dl_now_ms() >= valid_until) { /* granted too late to trust */
    dlock_permits_release(p, t.id);
    return dl_seterr(c, DLOCK_ETIMEDOUT,
                     "a permit was granted, but the "
                     "reply came after its lease could have ended");
  }
  dl_clearerr(c);
  return 0;
}

int dlock_permits_release(dlock_permits *p, const char *id) {
  if (p == NULL) return DLOCK_EINVAL;
  dlock_client *c = p->c;
  if (!valid_id(id))
    return dl_seterr(c, DLOCK_EINVAL, "a permit id is 32 hex digits");
  char owner[OWNER_MAX];
  if (owner_of(p, id, owner) != 0) return DLOCK_EINVAL;
  pthread_mutex_lock(&c->holds_mu);
  dl_hold *h = dl_hold_find(c, p->timeout, owner);
  bool had = h != NULL,
       lost = h && (h->lost || dl_now_ms() >= dl_hold_valid_until(c, h));
  dl_hold *old = h ? dl_hold_drop(c, h) : NULL;
  pthread_mutex_unlock(&c->holds_mu);
  dl_hold_bury(c, old);
  long long v = 0;
  int rc = run_int(p, dl_wake_hint_flags(&p->hint), "release", id, NULL, -1,
                   2, &v);
  if (rc != 0) return rc;
  if (v > 0) dl_wake_hint_released(&p->hint, v == 2);
  if (v == 0 && !had)
    return dl_seterr(c, DLOCK_ENOTOWNER, "no permit %s of '%s' is taken", id,
                     p->key + c->prefix_len);
  if (v <= 0 || lost)
    return dl_seterr(c, DLOCK_ELOST,
                     "permit %s's lease ended before this "
                     "release",
                     id);
  return 0;
}

int dlock_permits_force_release(dlock_permits *p, const char *id) {
  if (p == NULL) return DLOCK_EINVAL;
  if (!valid_id(id))
    return dl_seterr(p->c, DLOCK_EINVAL, "a permit id is 32 hex digits");
  long long v = 0;
  int rc = run_int(p, 0, "force", id, p->c->revoke_channel, 0, 1, &v);
  if (rc != 0) return rc;
  dl_clearerr(p->c);
  return (int)v;
}

int dlock_permits_validity(dlock_permits *p, const char *id, int64_t *ms) {
  if (ms) *ms = 0;
  if (p == NULL || !valid_id(id)) return DLOCK_EINVAL;
  char owner[OWNER_MAX];
  if (owner_of(p, id, owner) != 0) return DLOCK_EINVAL;
  pthread_mutex_lock(&p->c->holds_mu);
  dl_hold *h = dl_hold_find(p->c, p->timeout, owner);
  int64_t left = h ? dl_hold_valid_until(p->c, h) - dl_now_ms() : 0;
  bool lost = h && h->lost;
  pthread_mutex_unlock(&p->c->holds_mu);
  if (h == NULL) return DLOCK_ENOTOWNER;
  if (lost || left <= 0) return DLOCK_ELOST;
  if (ms) *ms = left;
  return 0;
}
