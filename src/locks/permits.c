/* permits.c: the permit-expirable semaphore (Redisson's
 * RPermitExpirableSemaphore): permits taken with an id and a lease. A
 * permit taken without a lease is renewed by the watchdog like a lock, so
 * the permits of a crashed holder come back one lease later; a permit whose
 * renewal fails is reported lost. The layout on a deployment is the
 * backend's (src/redis/ops/sem_latch.c). Each call is its checks (a dl_sync_call)
 * run blocking or on the loop (kinds.c). */
#include "locks.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ID_BYTES 16
#define KIND "permit-expirable semaphore" /* in errors */

struct dlock_permits {
  dl_sync_handle h; /* first */
  dl_holder holder; /* the client's: the lost callback, the permits */
};

static void on_lost(dl_holder *hd, const char *owner, dl_user_fn cb, void *ud,
                    const dl_hold_note *note);

static void destroy(dl_sync_handle *h) {
  /* Permits taken through this handle stop being renewed and come back
   * after their lease. */
  dl_holder_drop(h->c, &((dlock_permits *)h)->holder);
  free(h->key);
  free(h);
}

int dlock_permits_new(dlock_client *c, const char *name, dlock_permits **out) {
  if (out) *out = NULL;
  if (c == NULL) return DLOCK_EINVAL;
  if (out == NULL) return dl_seterr(c, DLOCK_EINVAL, "out is NULL");
  int rc = dl_check_name(c, name);
  if (rc != 0) return rc;
  dlock_permits *p = calloc(1, sizeof *p);
  if (p == NULL || (p->h.key = dl_key(c, "%s", name)) == NULL) {
    free(p);
    return dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  }
  p->h.c = c;
  p->h.destroy = destroy;
  p->holder.lost_fn = on_lost;
  *out = p;
  return 0;
}

void dlock_permits_free(dlock_permits *p) {
  if (p == NULL || dl_sync_free_later(&p->h)) return;
  destroy(&p->h);
}

void dlock_permits_on_lost(dlock_permits *p, dlock_permit_lost_cb cb,
                           void *ud) {
  if (p == NULL) return;
  dl_holder_on_lost(p->h.c, &p->holder, (dl_user_fn)cb, ud);
}

/* A permit taken through p was lost (dl_lost_fn; its renewals tell
 * nothing). */
static void on_lost(dl_holder *hd, const char *owner, dl_user_fn cb, void *ud,
                    const dl_hold_note *note) {
  if (note->renewed) return;
  dlock_permits *p =
      (dlock_permits *)((char *)hd - offsetof(dlock_permits, holder));
  const char *id = strrchr(owner, ':');
  if (cb) ((dlock_permit_lost_cb)cb)(p, id ? id + 1 : owner, ud);
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

/* An update of p (dl_sync_update_call). */
static int update(dlock_permits *p, dl_sync_op op, long long n,
                  int (*end)(dl_sync_handle *, dl_sync_call *, int),
                  dl_sync_call *q) {
  return dl_sync_update_call(p, KIND, op, n, end, q);
}

static int set_call(dlock_permits *p, int permits, dl_sync_call *q) {
  if (p && permits < 0)
    return dl_seterr(p->h.c, DLOCK_EINVAL, "permits must not be negative");
  return update(p, DL_PERMITS_SET, permits, dl_sync_end_bool, q);
}

static int add_call(dlock_permits *p, int permits, dl_sync_call *q) {
  return update(p, DL_PERMITS_ADD, permits, dl_sync_end_rc, q);
}

static int available_call(dlock_permits *p, dl_sync_call *q) {
  return update(p, DL_PERMITS_AVAILABLE, 0, dl_sync_end_count, q);
}

/* An update naming permit `id`. */
static int id_call(dlock_permits *p, dl_sync_op op, const char *id,
                   int (*end)(dl_sync_handle *, dl_sync_call *, int),
                   dl_sync_call *q) {
  if (p && !valid_id(id))
    return dl_seterr(p->h.c, DLOCK_EINVAL, "a permit id is 32 hex digits");
  int rc = update(p, op, 0, end, q);
  if (rc == 0) memcpy(q->id, id, DLOCK_PERMIT_ID_LEN);
  return rc;
}

static int force_call(dlock_permits *p, const char *id, dl_sync_call *q) {
  return id_call(p, DL_PERMITS_FORCE, id, dl_sync_end_bool, q);
}

/* Forgets this client's hold of permit `owner` (if any): whether it had
 * one, and whether that was lost (its lease ended here). */
static bool forget(dlock_permits *p, const char *owner, bool *lost) {
  return dl_holds_forget(p->h.c, p->h.key, owner, lost);
}

enum { AUX_HAD = 1, AUX_LOST = 2 }; /* a release's q->aux */

/* The release's end: 0, DLOCK_ENOTOWNER, DLOCK_ELOST, a code. */
static int released(dl_sync_handle *h, dl_sync_call *q, int rc) {
  dlock_client *c = h->c;
  if (rc != 0) return rc;
  if (q->v == 0 && !(q->aux & AUX_HAD))
    return dl_seterr(c, DLOCK_ENOTOWNER, "no permit %s of '%s' is taken",
                     q->id, h->key + c->prefix_len);
  if (q->v <= 0 || (q->aux & AUX_LOST))
    return dl_seterr(c, DLOCK_ELOST,
                     "permit %s's lease ended before this release", q->id);
  dl_clearerr(c);
  return 0;
}

/* The release's checks; the hold ends here, whatever the server says. */
static int release_call(dlock_permits *p, const char *id, dl_sync_call *q) {
  int rc = id_call(p, DL_PERMITS_RELEASE, id, released, q);
  char owner[DL_OWNER_MAX];
  if (rc == 0 && owner_of(p, id, owner) != 0) rc = DLOCK_EINVAL;
  if (rc != 0) return rc;
  bool lost;
  if (forget(p, owner, &lost)) q->aux |= AUX_HAD;
  if (lost) q->aux |= AUX_LOST;
  return 0;
}

/* Tracks permit q->id as a hold on the semaphore, owner "<client>:<id>",
 * renewed or timed by the watchdog. Returns 0 or DLOCK_ENOMEM. */
static int track(dlock_permits *p, const dl_sync_call *q) {
  dlock_client *c = p->h.c;
  char owner[DL_OWNER_MAX];
  if (owner_of(p, q->id, owner) != 0)
    return dl_seterr(c, DLOCK_EINVAL, "the owner is too long");
  dl_hold_grant g = {.key = p->h.key,
                     .owner = owner,
                     .holder = &p->holder,
                     .how = DL_HOLD_NEW,
                     .lease_ms = q->lease_ms,
                     .valid_until = q->valid_until,
                     .renew = q->watchdog,
                     .permit = true};
  return dl_holds_record(c, &g, NULL);
}

/* The acquire's end: 0 (tracked), DLOCK_EBUSY, a code. A permit granted
 * that cannot be tracked, came too late or as the call was cancelled is
 * given back. */
static int acquired(dl_sync_handle *h, dl_sync_call *q, int rc) {
  dlock_permits *p = (dlock_permits *)h;
  dlock_client *c = h->c;
  if (rc == 0)
    return dl_seterr(c, DLOCK_EBUSY, "no permit of '%s' in time",
                     h->key + c->prefix_len);
  if (rc < 0) return rc;
  q->give_back = true;
  if (q->cancelled) return dl_seterr(c, DLOCK_ECANCELED, "cancelled");
  rc = track(p, q);
  char owner[DL_OWNER_MAX];
  if (rc != 0 && owner_of(p, q->id, owner) == 0) forget(p, owner, NULL);
  if (rc != 0) return dl_seterr(c, rc, "out of memory");
  if (dl_now_ms() >= q->valid_until) { /* granted too late to trust */
    if (owner_of(p, q->id, owner) == 0) forget(p, owner, NULL);
    return dl_seterr(c, DLOCK_ELATE,
                     "a permit was granted, but the "
                     "reply came after its lease could have ended");
  }
  q->give_back = false;
  dl_clearerr(c);
  return 0;
}

/* The acquire's checks, and the new permit's id in q->id. */
static int acquire_call(dlock_permits *p, int64_t wait_ms, int64_t lease_ms,
                        dl_sync_call *q) {
  memset(q, 0, sizeof *q); /* read by the caller even on a refusal */
  if (p == NULL) return DLOCK_EINVAL;
  dlock_client *c = p->h.c;
  int rc = dl_check_open(c);
  if (rc == 0) rc = dl_check_lease(c, "lease_ms", lease_ms);
  if (rc != 0) return rc;
  q->what = DL_SYNC_PERMIT;
  q->kind = KIND;
  q->watchdog = lease_ms <= 0;
  q->lease_ms = q->watchdog ? c->watchdog_timeout_ms : lease_ms;
  q->wait = wait_ms != 0;
  q->deadline = dl_deadline(wait_ms);
  q->end = acquired;
  unsigned char raw[ID_BYTES];
  if (dl_random_bytes(raw, sizeof raw) != 0)
    return dl_seterr(c, DLOCK_ENOMEM, "no random bytes for a permit id");
  for (int i = 0; i < ID_BYTES; i++)
    snprintf(q->id + 2 * i, 3, "%02x", raw[i]);
  return 0;
}

int dlock_permits_try_set(dlock_permits *p, int permits) {
  dl_sync_call q;
  return dl_sync_go(set_call(p, permits, &q), p, &q);
}

int dlock_permits_add(dlock_permits *p, int permits) {
  dl_sync_call q;
  return dl_sync_go(add_call(p, permits, &q), p, &q);
}

int dlock_permits_get_available(dlock_permits *p) {
  dl_sync_call q;
  return dl_sync_go(available_call(p, &q), p, &q);
}

int dlock_permits_try_acquire(dlock_permits *p, int64_t wait_ms,
                              int64_t lease_ms, char id[DLOCK_PERMIT_ID_LEN]) {
  if (id == NULL)
    return p ? dl_seterr(p->h.c, DLOCK_EINVAL, "id is NULL") : DLOCK_EINVAL;
  dl_sync_call q;
  int rc = dl_sync_go(acquire_call(p, wait_ms, lease_ms, &q), p, &q);
  /* The id of a permit granted, even one given back. */
  if (rc == 0 || q.give_back) memcpy(id, q.id, DLOCK_PERMIT_ID_LEN);
  return rc;
}

int dlock_permits_acquire(dlock_permits *p, int64_t lease_ms,
                          char id[DLOCK_PERMIT_ID_LEN]) {
  return dlock_permits_try_acquire(p, DL_WAIT_FOREVER, lease_ms, id);
}

int dlock_permits_release(dlock_permits *p, const char *id) {
  dl_sync_call q;
  return dl_sync_go(release_call(p, id, &q), p, &q);
}

int dlock_permits_force_release(dlock_permits *p, const char *id) {
  dl_sync_call q;
  return dl_sync_go(force_call(p, id, &q), p, &q);
}

/* ---- on the event loop ---- */
int dlock_permits_try_set_async(dlock_permits *p, int permits, dlock_done_cb cb,
                                void *ud, dlock_op **op) {
  dl_sync_call q;
  return dl_sync_go_async(set_call(p, permits, &q), p, &q, cb, ud, op);
}

int dlock_permits_add_async(dlock_permits *p, int permits, dlock_done_cb cb,
                            void *ud, dlock_op **op) {
  dl_sync_call q;
  return dl_sync_go_async(add_call(p, permits, &q), p, &q, cb, ud, op);
}

int dlock_permits_get_available_async(dlock_permits *p, dlock_done_cb cb,
                                      void *ud, dlock_op **op) {
  dl_sync_call q;
  return dl_sync_go_async(available_call(p, &q), p, &q, cb, ud, op);
}

int dlock_permits_acquire_async(dlock_permits *p, int64_t wait_ms,
                                int64_t lease_ms,
                                char id[DLOCK_PERMIT_ID_LEN],
                                dlock_done_cb cb, void *ud, dlock_op **op) {
  if (id == NULL) {
    if (op) *op = NULL;
    return p ? dl_seterr(p->h.c, DLOCK_EINVAL, "id is NULL") : DLOCK_EINVAL;
  }
  dl_sync_call q;
  int rc = dl_sync_go_async(acquire_call(p, wait_ms, lease_ms, &q), p, &q,
                            cb, ud, op);
  if (rc == 0) memcpy(id, q.id, DLOCK_PERMIT_ID_LEN);
  return rc;
}

int dlock_permits_release_async(dlock_permits *p, const char *id,
                                dlock_done_cb cb, void *ud, dlock_op **op) {
  dl_sync_call q;
  return dl_sync_go_async(release_call(p, id, &q), p, &q, cb, ud, op);
}

int dlock_permits_force_release_async(dlock_permits *p, const char *id,
                                      dlock_done_cb cb, void *ud,
                                      dlock_op **op) {
  dl_sync_call q;
  return dl_sync_go_async(force_call(p, id, &q), p, &q, cb, ud, op);
}

int dlock_permits_validity(dlock_permits *p, const char *id, int64_t *ms) {
  if (ms) *ms = 0;
  if (p == NULL) return DLOCK_EINVAL;
  char owner[DL_OWNER_MAX];
  if (!valid_id(id) || owner_of(p, id, owner) != 0)
    return dl_seterr(p->h.c, DLOCK_EINVAL, "a permit id is 32 hex digits");
  int64_t left;
  int rc = dl_holds_validity(p->h.c, p->h.key, owner, &left);
  if (rc == DLOCK_ENOTOWNER)
    return dl_seterr(p->h.c, DLOCK_ENOTOWNER,
                     "permit %s of '%s' is not held here", id,
                     p->h.key + p->h.c->prefix_len);
  if (rc == DLOCK_ELOST)
    return dl_seterr(p->h.c, DLOCK_ELOST, "permit %s of '%s' was lost", id,
                     p->h.key + p->h.c->prefix_len);
  dl_clearerr(p->h.c);
  if (ms) *ms = left;
  return 0;
}
