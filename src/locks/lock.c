/* lock.c: the reentrant lock (Redisson's RLock) and its fair and
 * read-write variants: handles, owner ids, acquire and release as the
 * client sees them (the holds it keeps, validity, loss reports). How a lock
 * is taken, waited for and released on a deployment is the backend's
 * (lock_acquire, lock_release, ... in core/backend.h). */
#include "lock.h"

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Redisson RFairLock's default stale-waiter timeout (threadWaitTime). */
#define FAIR_STALE_DEFAULT_MS 300000

static void on_lost(dl_holder *hd, const char *owner, dl_user_fn cb, void *ud,
                    const dl_hold_note *note);

_Static_assert(sizeof(void *) != 8 || sizeof(dlock_lock) <= 64,
               "a handle with a 16-byte key fits a 96-byte malloc chunk");

int dlock_lock_new(dlock_client *c, const char *name, const char *owner,
                   dlock_lock **out) {
  if (out) *out = NULL;
  if (c == NULL) return DLOCK_EINVAL;
  if (out == NULL) return dl_seterr(c, DLOCK_EINVAL, "out is NULL");
  if (name == NULL || *name == '\0')
    return dl_seterr(c, DLOCK_EINVAL, "the lock name is empty");
  size_t nl = strlen(name);
  if (nl > DLOCK_NAME_MAX)
    return dl_seterr(c, DLOCK_ENAMETOOLONG, "the lock name has %zu bytes, "
                     "the limit is %d", nl, DLOCK_NAME_MAX);
  if (owner && (*owner == '\0' || strlen(owner) > 100))
    return dl_seterr(c, DLOCK_EINVAL, "an explicit owner must be 1..100 bytes");
  int rc = dl_check_key(c, name);
  if (rc != 0) return rc;
  /* One allocation: the handle, its key and its owner. */
  size_t kl = c->prefix_len + nl;
  size_t ol = owner ? strlen(owner) + 1 : 0;
  dlock_lock *l = calloc(1, sizeof(dlock_lock) + kl + 1 + ol);
  if (l == NULL) return dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  l->c = c;
  l->holder.lost_fn = on_lost;
  l->plain = c->backend->mutex_kind == DL_KIND_PLAIN;
  memcpy(KEY(l), c->key_prefix, c->prefix_len);
  memcpy(KEY(l) + c->prefix_len, name, nl + 1);
  if (owner) memcpy(KEY(l) + kl + 1, owner, ol);
  l->owned = owner != NULL;
  /* On an event loop every call comes from one thread: the owner is the
   * handle (one handle, one owner), not the thread. */
  if (owner == NULL && c->loop) {
    char tail[32];
    snprintf(tail, sizeof tail, "loop-%llu",
             (unsigned long long)atomic_fetch_add(&c->handles, 1));
    dlock_lock *m = realloc(l, sizeof(dlock_lock) + kl + 1 + strlen(tail) + 1);
    if (m == NULL) {
      free(l);
      return dl_seterr(c, DLOCK_ENOMEM, "out of memory");
    }
    l = m;
    strcpy(KEY(l) + kl + 1, tail);
    l->owned = 1;
  }
  *out = l;
  return 0;
}

int dlock_fairlock_new(dlock_client *c, const char *name, const char *owner,
                       int64_t stale_ms, dlock_lock **out) {
  int rc = dlock_lock_new(c, name, owner, out);
  if (rc == 0)
    (*out)->fair_ms = stale_ms > 0 ? stale_ms : FAIR_STALE_DEFAULT_MS;
  return rc;
}

int dlock_plainlock_new(dlock_client *c, const char *name, const char *owner,
                        dlock_lock **out) {
  int rc = dlock_lock_new(c, name, owner, out);
  if (rc == 0) (*out)->plain = 1;
  return rc;
}

/* A read-write lock: its two handles, which it owns (they are marked
 * borrowed, so that dlock_lock_free on them does nothing). */
struct dlock_rwlock {
  dlock_lock *read, *write;
};

int dlock_rwlock_new(dlock_client *c, const char *name, const char *owner,
                     dlock_rwlock **out) {
  if (out) *out = NULL;
  if (c == NULL) return DLOCK_EINVAL;
  if (out == NULL) return dl_seterr(c, DLOCK_EINVAL, "out is NULL");
  dlock_rwlock *rw = calloc(1, sizeof *rw);
  if (rw == NULL) return dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  int rc = dlock_lock_new(c, name, owner, &rw->read);
  /* Both sides have one owner: the caller's, the thread, or on an event
   * loop the read handle's (so that a writer may also read). */
  if (rc == 0)
    rc = dlock_lock_new(c, name, c->loop && owner == NULL ? OWNER(rw->read)
                                                          : owner,
                        &rw->write);
  if (rc != 0) {
    dlock_rwlock_free(rw);
    return rc;
  }
  rw->read->rw = RW_READ;
  rw->write->rw = RW_WRITE;
  rw->read->borrowed = rw->write->borrowed = 1;
  *out = rw;
  return 0;
}

dlock_lock *dlock_rwlock_read(dlock_rwlock *rw) {
  return rw ? rw->read : NULL;
}

dlock_lock *dlock_rwlock_write(dlock_rwlock *rw) {
  return rw ? rw->write : NULL;
}

static void lock_free(dlock_lock *l) {
  if (l == NULL) return;
  /* Holds taken through this handle stop being renewed and expire after
   * their lease. */
  dl_holder_drop(l->c, &l->holder);
  free(l);
}

void dlock_rwlock_free(dlock_rwlock *rw) {
  if (rw == NULL) return;
  /* Its handles are its own again: each is freed now, or after the last
   * of its event-loop operations. */
  if (rw->read) rw->read->borrowed = 0;
  if (rw->write) rw->write->borrowed = 0;
  dlock_lock_free(rw->read);
  dlock_lock_free(rw->write);
  free(rw);
}

void dlock_lock_free(dlock_lock *l) {
  /* A read-write lock's handle is its lock's to free. */
  if (l == NULL || l->borrowed) return;
  /* Operations still in flight on an event loop: the last frees it; its
   * acquires are cancelled (a waiter's place in line goes now). */
  if (l->ops == 0) {
    lock_free(l);
    return;
  }
  l->orphan = 1;
  dl_op_cancel_for(l->c, l);
}

void dl_lock_op_begin(dlock_lock *l) { l->ops++; }

void dl_lock_op_end(dlock_lock *l) {
  if (--l->ops == 0 && l->orphan) lock_free(l);
}

const char *dlock_lock_name(const dlock_lock *l) { return l ? NAME(l) : ""; }

const char *dl_lock_key(const dlock_lock *l) { return KEY(l); }

dlock_client *dl_lock_client(const dlock_lock *l) { return l->c; }

/* Reports an event of l's hold by `owner` to the client's hook (the
 * caller checked DL_EVENTS_ON): `us` its duration, `extra` GRANTED's
 * contended or NOT_GRANTED's error. */
static void emit(dlock_lock *l, const char *owner, dlock_event_type type,
                 int64_t us, uint64_t token, int extra) {
  static const char *const kinds[] = {[DL_KIND_LOCK] = "lock",
                                      [DL_KIND_FAIR] = "fair",
                                      [DL_KIND_READ] = "read",
                                      [DL_KIND_WRITE] = "write",
                                      [DL_KIND_PLAIN] = "plain"};
  dl_lock_ref ref;
  dl_lock_ref_of(l, owner, &ref);
  dlock_event ev = {.type = type,
                    .name = NAME(l),
                    .kind = kinds[ref.kind],
                    .owner = owner,
                    .duration_ns = us * 1000,
                    .token = token,
                    .contended = type == DLOCK_EVENT_GRANTED ? extra : 0,
                    .error = type == DLOCK_EVENT_NOT_GRANTED ? extra : 0};
  dl_event_emit(l->c, &ev);
}

/* The hold of `owner` through l was lost, or renewed (dl_lost_fn). */
static void on_lost(dl_holder *hd, const char *owner, dl_user_fn cb, void *ud,
                    const dl_hold_note *note) {
  dlock_lock *l = (dlock_lock *)((char *)hd - offsetof(dlock_lock, holder));
  if (DL_EVENTS_ON(l->c))
    emit(l, owner, note->renewed ? DLOCK_EVENT_RENEWED : DLOCK_EVENT_LOST,
         note->renewed ? 0 : note->held_us, note->token, 0);
  if (note->renewed) return;
  if (cb) ((dlock_lost_cb)cb)(l, owner, ud);
}

void dlock_lock_on_lost(dlock_lock *l, dlock_lost_cb cb, void *ud) {
  if (l == NULL) return;
  dl_holder_on_lost(l->c, &l->holder, (dl_user_fn)cb, ud);
}

int dlock_lock_set_info(dlock_lock *l, const char *info) {
  if (l == NULL) return DLOCK_EINVAL;
  if (info && strlen(info) > DLOCK_INFO_MAX)
    return dl_seterr(l->c, DLOCK_EINVAL, "holder info over %d bytes",
                     DLOCK_INFO_MAX);
  char *copy = NULL;
  if (info && (copy = dl_strdup(info)) == NULL)
    return dl_seterr(l->c, DLOCK_ENOMEM, "out of memory");
  dl_holder_set_info(l->c, &l->holder, copy);
  return 0;
}

int dl_lock_owner(dlock_lock *l, char *buf) {
  int n = dl_owner_id(l->c, OWNER(l), buf, DL_OWNER_MAX - 6);
  if (n >= 0 && l->rw == RW_WRITE) memcpy(buf + n, ":write", 7);
  return n < 0 ? dl_seterr(l->c, DLOCK_EINVAL, "owner id too long") : 0;
}

void dl_lock_ref_of(dlock_lock *l, const char *owner, dl_lock_ref *ref) {
  ref->key = KEY(l);
  ref->name = NAME(l);
  ref->owner = owner;
  ref->kind = l->rw == RW_READ    ? DL_KIND_READ
              : l->rw == RW_WRITE ? DL_KIND_WRITE
              : l->fair_ms > 0    ? DL_KIND_FAIR
              : l->plain          ? DL_KIND_PLAIN
                                  : DL_KIND_LOCK;
  ref->fair_stale_ms = l->fair_ms;
  ref->hint = &l->hint;
}

int dl_acq_begin(dlock_lock *l, int64_t wait_ms, int64_t lease_ms,
                 dl_acq_req *q) {
  dlock_client *c = l->c;
  int rc = dl_check_open(c);
  if (rc == 0) rc = dl_check_lease(c, "lease_ms", lease_ms);
  if (rc != 0) return rc;
  if (c->backend->ops->lock_acquire == NULL)
    return dl_unsupported(c, "lock");
  if ((rc = dl_lock_owner(l, q->owner)) != 0) return rc;
  q->start_us = dl_now_us(); /* dlock_metrics' wait_seconds */
  q->watchdog = lease_ms <= 0;
  if (q->watchdog) lease_ms = c->watchdog_timeout_ms;
  dl_lock_ref_of(l, q->owner, &q->ref);
  int held = dl_holds_acquire_begin(c, KEY(l), q->owner, &l->holder, &q->info);
  if (q->info == NULL) return dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  if (held == 0 && DL_EVENTS_ON(c))
    emit(l, q->owner, DLOCK_EVENT_WAIT_STARTED, 0, 0, 0);
  q->a = (dl_acquire){.lock = &q->ref,
                      .lease_ms = lease_ms,
                      .wait = wait_ms != 0,
                      .deadline = dl_deadline(wait_ms),
                      .held = held,
                      .info = q->info,
                      .detect = c->detect_deadlocks};
  return 0;
}

/* The end of an acquire that got no lock (rc: the call's code), for the
 * event hook; a hold taken (*give_back) is no longer timed, so that
 * neither its release nor dlock_metrics counts it as a hold. */
static int not_granted(dlock_lock *l, dl_acq_req *q, int rc, bool give_back) {
  dlock_client *c = l->c;
  if (give_back && q->a.status == 1) dl_holds_untime(c, KEY(l), q->owner);
  if (q->a.held == 0 && DL_EVENTS_ON(c))
    emit(l, q->owner, DLOCK_EVENT_NOT_GRANTED, dl_now_us() - q->start_us, 0,
         rc);
  return rc;
}

int dl_acq_end(dlock_lock *l, dl_acq_req *q, int rc, uint64_t *token,
               bool *give_back) {
  dlock_client *c = l->c;
  *give_back = false;
  free(q->info);
  q->info = NULL;
  if (rc == 0) {
    /* The holder's lease when one counts down (not on zk://, nor a
     * Redis key without an expiry). */
    char lease[64] = "";
    if (q->a.ttl >= 0)
      snprintf(lease, sizeof lease, " (remaining lease %lld ms)",
               (long long)q->a.ttl);
    else if (q->a.ttl == DLOCK_TTL_NONE)
      snprintf(lease, sizeof lease, " (no lease counting down)");
    return not_granted(
        l, q,
        dl_seterr(c, DLOCK_EBUSY, "'%s' is held by another owner%s",
                  NAME(l), lease),
        false);
  }
  if (rc < 0) return not_granted(l, q, rc, false);
  int64_t now_us = dl_now_us();
  uint64_t tok;
  dl_hold_grant g = {.key = KEY(l),
                     .owner = q->owner,
                     .holder = &l->holder,
                     .how = q->a.status == 1 ? DL_HOLD_NEW : DL_HOLD_REENTER,
                     .token = q->a.token,
                     .lease_ms = q->a.lease_ms,
                     .valid_until = q->a.valid_until,
                     .granted_us = q->a.status == 1 ? now_us : 0,
                     .renew = q->watchdog};
  int err = dl_holds_record(c, &g, &tok);
  *give_back = true;
  /* Cannot track it: give it back rather than hold it unseen. */
  if (err != 0)
    return not_granted(l, q, dl_seterr(c, err, "out of memory"), true);
  /* The reply came so late that the lease may already have run out on the
   * server: never report a lock that may have expired as taken. */
  if (dl_now_ms() >= q->a.valid_until)
    return not_granted(l, q,
                       dl_seterr(c, DLOCK_ELATE,
                                 "'%s' was granted, but the reply came "
                                 "after its %lld ms lease could have run "
                                 "out",
                                 NAME(l), (long long)q->a.lease_ms),
                       true);
  *give_back = false;
  *token = tok;
  if (q->a.status == 1) { /* dlock_metrics: relaxed, nothing waits on it */
    atomic_fetch_add_explicit(&c->acquired, 1, memory_order_relaxed);
    if (q->a.waited)
      atomic_fetch_add_explicit(&c->contended, 1, memory_order_relaxed);
    dl_hist_add(&c->wait_hist, now_us - q->start_us);
    if (DL_EVENTS_ON(c))
      emit(l, q->owner, DLOCK_EVENT_GRANTED, now_us - q->start_us, tok,
           q->a.waited);
  }
  return 0;
}

int dlock_lock_try_acquire(dlock_lock *l, int64_t wait_ms, int64_t lease_ms,
                           uint64_t *token) {
  if (l == NULL) return DLOCK_EINVAL;
  dl_acq_req q;
  int rc = dl_acq_begin(l, wait_ms, lease_ms, &q);
  if (rc != 0) return rc;
  rc = l->c->backend->ops->lock_acquire(l->c->backend, &q.a);
  bool give_back;
  uint64_t tok = 0;
  rc = dl_acq_end(l, &q, rc, &tok, &give_back);
  if (give_back) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", dlock_client_errmsg(l->c));
    dlock_lock_release(l);
    return dl_seterr(l->c, rc, "%s", msg);
  }
  if (rc != 0) return rc;
  if (token) *token = tok;
  dl_clearerr(l->c);
  return 0;
}

int dlock_lock_acquire(dlock_lock *l, int64_t lease_ms, uint64_t *token) {
  return dlock_lock_try_acquire(l, DL_WAIT_FOREVER, lease_ms, token);
}

int dl_rel_begin(dlock_lock *l, dl_rel_req *q) {
  dlock_client *c = l->c;
  if (c->backend->ops->lock_release == NULL)
    return dl_unsupported(c, "lock");
  int rc = dl_lock_owner(l, q->owner);
  if (rc != 0) return rc;
  dl_lock_ref_of(l, q->owner, &q->ref);
  dl_hold_view v;
  dl_rel_state st = dl_holds_release_begin(c, KEY(l), q->owner, &v, &q->ren);
  /* Reported lost, perhaps only because its validity ran out here: if the
   * server still has it, free it now (the script checks the owner). */
  q->lost = st == DL_REL_LOST;
  q->lease_ms = st == DL_REL_HELD ? v.lease_ms : c->watchdog_timeout_ms;
  q->count = st == DL_REL_HELD ? v.count : q->lost ? 1 : 0;
  return 0;
}

int dl_rel_end(dlock_lock *l, dl_rel_req *q, int rc) {
  dlock_client *c = l->c;
  if (q->lost)
    return dl_seterr(c, DLOCK_ELOST, "'%s' was lost before this release",
                     NAME(l));
  /* A last release that failed (server unreachable, timeout): the caller
   * meant to let go, so the hold ends here and is no longer renewed.
   * Unless a retry reaches the server first, the lease frees the lock; a
   * new acquire takes it afresh, with a new token, rather than re-enter a
   * hold the caller gave up. */
  dl_rel_outcome how = rc == 1 || rc == DLOCK_ENOTOWNER ? DL_REL_GONE
                       : rc == 0                        ? DL_REL_ONE
                                                        : DL_REL_FAILED;
  dl_rel_ended ended;
  bool had = dl_holds_release_end(c, KEY(l), q->owner, q->ren, how, &ended);
  if (rc == DLOCK_ENOTOWNER)
    rc = had ? dl_seterr(c, DLOCK_ELOST, "'%s' expired or was taken "
                         "before this release", NAME(l))
             : dl_seterr(c, DLOCK_ENOTOWNER, "'%s' is not held by %s",
                         NAME(l), q->owner);
  if (ended.held_us >= 0 && DL_EVENTS_ON(c))
    emit(l, q->owner,
         rc == DLOCK_ELOST ? DLOCK_EVENT_LOST : DLOCK_EVENT_RELEASED,
         ended.held_us, ended.token, 0);
  if (rc >= 0) dl_clearerr(c);
  return rc;
}

int dlock_lock_release(dlock_lock *l) {
  if (l == NULL) return DLOCK_EINVAL;
  dl_rel_req q;
  int rc = dl_rel_begin(l, &q);
  if (rc != 0) return rc;
  rc = l->c->backend->ops->lock_release(l->c->backend, &q.ref, q.lease_ms,
                                        q.count);
  return dl_rel_end(l, &q, rc);
}

int dlock_lock_force_release(dlock_lock *l) {
  if (l == NULL) return DLOCK_EINVAL;
  dlock_client *c = l->c;
  if (c->backend->ops->lock_force_release == NULL)
    return dl_unsupported(c, "force release");
  dl_lock_ref ref;
  dl_lock_ref_of(l, "", &ref);
  int rc = c->backend->ops->lock_force_release(c->backend, &ref);
  if (rc >= 0) dl_clearerr(c);
  return rc; /* DLOCK_EWRONGTYPE: not a lock of this kind */
}

int dlock_lock_validity(dlock_lock *l, int64_t *ms) {
  if (ms) *ms = 0;
  if (l == NULL) return DLOCK_EINVAL;
  char owner[DL_OWNER_MAX];
  int rc = dl_lock_owner(l, owner);
  if (rc != 0) return rc;
  int64_t left;
  rc = dl_holds_validity(l->c, KEY(l), owner, &left);
  if (rc == DLOCK_ENOTOWNER)
    return dl_seterr(l->c, DLOCK_ENOTOWNER, "'%s' is not held by this owner",
                     NAME(l));
  if (rc == DLOCK_ELOST)
    return dl_seterr(l->c, DLOCK_ELOST, "'%s' was lost", NAME(l));
  dl_clearerr(l->c);
  if (ms) *ms = left;
  return 0;
}

int dlock_lock_is_lost(dlock_lock *l) {
  return dlock_lock_validity(l, NULL) == DLOCK_ELOST;
}
