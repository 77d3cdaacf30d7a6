/* permits.c: the permit-expirable semaphore (Redisson's
 * RPermitExpirableSemaphore): permits taken with an id and a lease. A
 * permit taken without a lease is renewed by the watchdog like a lock, so
 * the permits of a crashed holder come back one lease later; a permit whose
 * renewal fails is reported lost. The layout on a deployment is the
 * backend's (src/redis/sync.c). */
#include "locks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ID_BYTES 16
#define KIND "permit-expirable semaphore" /* in errors */

struct dlock_permits {
  dl_sync_handle h; /* first */
  /* Guarded by the client's holds_mu: */
  dlock_permit_lost_cb cb;
  void *cb_ud;
};

int dlock_permits_new(dlock_client *c, const char *name, dlock_permits **out) {
  if (out) *out = NULL;
  if (c == NULL || out == NULL) return DLOCK_EINVAL;
  int rc = dl_check_name(c, name);
  if (rc != 0) return rc;
  dlock_permits *p = calloc(1, sizeof *p);
  if (p == NULL || (p->h.key = dl_key(c, "%s", name)) == NULL) {
    free(p);
    return dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  }
  p->h.c = c;
  *out = p;
  return 0;
}

void dlock_permits_free(dlock_permits *p) {
  if (p == NULL) return;
  /* Permits taken through this handle stop being renewed and come back
   * after their lease. */
  dl_holds_drop_via(p->h.c, p, NULL);
  free(p->h.key);
  free(p);
}

void dlock_permits_on_lost(dlock_permits *p, dlock_permit_lost_cb cb,
                           void *ud) {
  if (p == NULL) return;
  pthread_mutex_lock(&p->h.c->holds_mu);
  p->cb = cb;
  p->cb_ud = ud;
  pthread_mutex_unlock(&p->h.c->holds_mu);
}

/* A permit taken through p was lost (dl_lost_fn). */
static void on_lost(void *handle, const char *owner) {
  dlock_permits *p = handle;
  pthread_mutex_lock(&p->h.c->holds_mu);
  dlock_permit_lost_cb cb = p->cb;
  void *ud = p->cb_ud;
  pthread_mutex_unlock(&p->h.c->holds_mu);
  const char *id = strrchr(owner, ':');
  if (cb) cb(p, id ? id + 1 : owner, ud);
}

int dlock_permits_try_set_permits(dlock_permits *p, int permits) {
  if (p == NULL) return DLOCK_EINVAL;
  if (permits < 0)
    return dl_seterr(p->h.c, DLOCK_EINVAL, "permits must not be negative");
  long long v = 0;
  int rc = dl_sync_update(&p->h, KIND, DL_PERMITS_SET, permits, NULL, &v);
  return rc ? rc : (int)v;
}

int dlock_permits_add_permits(dlock_permits *p, int permits) {
  if (p == NULL) return DLOCK_EINVAL;
  long long v = 0;
  return dl_sync_update(&p->h, KIND, DL_PERMITS_ADD, permits, NULL, &v);
}

int dlock_permits_available(dlock_permits *p) {
  if (p == NULL) return DLOCK_EINVAL;
  long long v = 0;
  int rc = dl_sync_update(&p->h, KIND, DL_PERMITS_AVAILABLE, 0, NULL, &v);
  return rc ? rc : (v < 0 ? 0 : (int)v);
}

static int owner_of(dlock_permits *p, const char *id, char *buf) {
  int n = snprintf(buf, DL_OWNER_MAX, "%s:%s", p->h.c->id, id);
  return n < 0 || n >= DL_OWNER_MAX ? DLOCK_EINVAL : 0;
}

static bool valid_id(const char *id) {
  if (id == NULL || strlen(id) != 2 * ID_BYTES) return false;
  for (const char *s = id; *s; s++)
    if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f'))) return false;
  return true;
}

int dlock_permits_try_acquire(dlock_permits *p, int64_t wait_ms,
                              int64_t lease_ms, char id[DLOCK_PERMIT_ID_LEN]) {
  if (p == NULL || id == NULL) return DLOCK_EINVAL;
  dlock_client *c = p->h.c;
  if (atomic_load(&c->closing))
    return dl_seterr(c, DLOCK_ECLOSED, "the client is closing");
  int rc = dl_check_open(c);
  if (rc != 0) return rc;
  dl_backend *b = c->backend;
  if (b->ops->permit_acquire == NULL) return dl_unsupported(c, KIND);
  bool watchdog = lease_ms <= 0;
  if (watchdog) lease_ms = c->watchdog_timeout_ms;
  char tid[DLOCK_PERMIT_ID_LEN];
  unsigned char raw[ID_BYTES];
  if (dl_random_bytes(raw, sizeof raw) != 0)
    return dl_seterr(c, DLOCK_ENOMEM, "no random bytes for a permit id");
  for (int i = 0; i < ID_BYTES; i++)
    snprintf(tid + 2 * i, 3, "%02x", raw[i]);
  dl_sync_ref r = dl_sync_ref_of(&p->h);
  int64_t valid_until = 0;
  rc = b->ops->permit_acquire(b, &r, tid, lease_ms, wait_ms != 0,
                              dl_deadline(wait_ms), &valid_until);
  if (rc == 0)
    return dl_seterr(c, DLOCK_EBUSY, "no permit of '%s' in time", r.name);
  if (rc < 0) return rc;
  rc = 0;
  /* Taken: track it as a hold on the semaphore, owner "<client>:<id>". */
  char owner[DL_OWNER_MAX];
  if (owner_of(p, tid, owner) != 0) return DLOCK_EINVAL;
  pthread_mutex_lock(&c->holds_mu);
  dl_hold *h = dl_hold_add(c, p->h.key, owner);
  if (h) {
    h->permit = true;
    h->via = p;
    h->lost_fn = on_lost;
    h->count = 1;
    h->lease_ms = lease_ms;
    h->valid_until = valid_until;
    if ((h->renewal = dl_watchdog_add(c->watchdog, h->key, h->tail,
                                      h->valid_until, watchdog, true)) == NULL)
      rc = DLOCK_ENOMEM;
  } else {
    rc = DLOCK_ENOMEM;
  }
  pthread_mutex_unlock(&c->holds_mu);
  memcpy(id, tid, DLOCK_PERMIT_ID_LEN);
  if (rc == DLOCK_ENOMEM) { /* cannot track it: give it back */
    dlock_permits_release(p, tid);
    return dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  }
  if (dl_now_ms() >= valid_until) { /* granted too late to trust */
    dlock_permits_release(p, tid);
    return dl_seterr(c, DLOCK_ELATE,
                     "a permit was granted, but the "
                     "reply came after its lease could have ended");
  }
  dl_clearerr(c);
  return 0;
}

int dlock_permits_acquire(dlock_permits *p, int64_t lease_ms,
                          char id[DLOCK_PERMIT_ID_LEN]) {
  return dlock_permits_try_acquire(p, DL_WAIT_FOREVER, lease_ms, id);
}

int dlock_permits_release(dlock_permits *p, const char *id) {
  if (p == NULL) return DLOCK_EINVAL;
  dlock_client *c = p->h.c;
  if (!valid_id(id))
    return dl_seterr(c, DLOCK_EINVAL, "a permit id is 32 hex digits");
  char owner[DL_OWNER_MAX];
  if (owner_of(p, id, owner) != 0) return DLOCK_EINVAL;
  pthread_mutex_lock(&c->holds_mu);
  dl_hold *h = dl_hold_find(c, p->h.key, owner);
  bool had = h != NULL,
       lost = h && (h->lost || dl_now_ms() >= dl_hold_valid_until(c, h));
  dl_hold *old = h ? dl_hold_drop(c, h) : NULL;
  pthread_mutex_unlock(&c->holds_mu);
  dl_hold_bury(c, old);
  long long v = 0;
  int rc = dl_sync_update(&p->h, KIND, DL_PERMITS_RELEASE, 0, id, &v);
  if (rc != 0) return rc;
  if (v == 0 && !had)
    return dl_seterr(c, DLOCK_ENOTOWNER, "no permit %s of '%s' is taken", id,
                     p->h.key + c->prefix_len);
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
    return dl_seterr(p->h.c, DLOCK_EINVAL, "a permit id is 32 hex digits");
  long long v = 0;
  int rc = dl_sync_update(&p->h, KIND, DL_PERMITS_FORCE, 0, id, &v);
  return rc ? rc : (int)v;
}

int dlock_permits_validity(dlock_permits *p, const char *id, int64_t *ms) {
  if (ms) *ms = 0;
  if (p == NULL || !valid_id(id)) return DLOCK_EINVAL;
  char owner[DL_OWNER_MAX];
  if (owner_of(p, id, owner) != 0) return DLOCK_EINVAL;
  pthread_mutex_lock(&p->h.c->holds_mu);
  dl_hold *h = dl_hold_find(p->h.c, p->h.key, owner);
  int64_t left = h ? dl_hold_valid_until(p->h.c, h) - dl_now_ms() : 0;
  bool lost = h && h->lost;
  pthread_mutex_unlock(&p->h.c->holds_mu);
  if (h == NULL) return DLOCK_ENOTOWNER;
  if (lost || left <= 0) return DLOCK_ELOST;
  if (ms) *ms = left;
  return 0;
}
