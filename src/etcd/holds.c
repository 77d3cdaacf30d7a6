/* holds.c: the etcd client's list of the locks it holds or is taking
 * (etcd_hold, e->holds): a hold found, dropped or freed; a claim that
 * keeps the client's other owners of a name off its key until it is
 * taken (and waits for theirs), a stale hold of the owner cleared on the
 * way; a re-entry's bookkeeping; the read-write lock's other side; and
 * the release's first half. */
#include "etcdb.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void dl_etcd_hold_free(etcd_hold *h) {
  if (h == NULL) return;
  free(h->lock);
  free(h->owner);
  free(h->key);
  free(h);
}

static etcd_hold *hold_find(dl_etcd *e, const char *lock, const char *owner) {
  for (etcd_hold *h = e->holds; h; h = h->next)
    if (strcmp(h->lock, lock) == 0 &&
        (owner == NULL || strcmp(h->owner, owner) == 0))
      return h;
  return NULL;
}

void dl_etcd_hold_unlink(dl_etcd *e, etcd_hold *h) {
  for (etcd_hold **pp = &e->holds; *pp; pp = &(*pp)->next)
    if (*pp == h) {
      *pp = h->next;
      break;
    }
  pthread_cond_broadcast(&e->cv);
  /* Once until the loop looks: it looks at every waiter. */
  if (e->aclaims && !e->aclaim_look) {
    e->aclaim_look = true;
    dl_blockloop_wake(e->form);
  }
}

void dl_etcd_hold_end(dl_etcd *e, etcd_hold *h) {
  /* Unlinked first: a renewal looks at a listed hold's watch (e->mu),
   * which the watcher thread frees once stopped. */
  dl_etcd_unwatch(e, h->watch);
  dl_etcd_hold_free(h);
}

void dl_etcd_hold_drop(dl_etcd *e, etcd_hold *h) {
  pthread_mutex_lock(&e->mu);
  dl_etcd_hold_unlink(e, h);
  pthread_mutex_unlock(&e->mu);
  dl_etcd_hold_end(e, h);
}

etcd_hold *dl_etcd_claim_new(dl_etcd *e, const dl_lock_ref *l, bool own_lease) {
  etcd_hold *h = calloc(1, sizeof *h);
  if (h == NULL || !(h->lock = dl_strdup(l->key)) ||
      !(h->owner = dl_strdup(l->owner))) {
    dl_etcd_hold_free(h);
    dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
    return NULL;
  }
  h->own_lease = own_lease;
  return h;
}

/* A stale hold of l's owner (e->mu held): one the client no longer counts
 * (it was reported lost, and not released; an acquire reaches the claim
 * only when the client counts none), its key to go. */
static etcd_hold *stale_find(dl_etcd *e, const dl_lock_ref *l) {
  for (etcd_hold *x = e->holds; x; x = x->next)
    if (x->held && !x->permit && strcmp(x->lock, l->key) == 0 &&
        strcmp(x->owner, l->owner) == 0)
      return x;
  return NULL;
}

/* What keeps a claim on l (own_lease: on a lease of its own) from being
 * listed now (e->mu held): a stale hold of the owner, else another owner's
 * holding or taking l on the same lease (shared_key: the mutex's key is
 * the lease's); NULL nothing. *stale: whether it is the former. */
static etcd_hold *claim_blocker(dl_etcd *e, const dl_lock_ref *l,
                                bool own_lease, bool shared_key, bool *stale) {
  etcd_hold *o = stale_find(e, l);
  if ((*stale = o != NULL)) return o;
  for (etcd_hold *x = e->holds; x && !own_lease && shared_key; x = x->next)
    if (!x->own_lease && !x->permit && strcmp(x->lock, l->key) == 0) o = x;
  return o;
}

int dl_etcd_claim_now(dl_etcd *e, const dl_lock_ref *l, etcd_hold *h,
                      bool shared_key, bool *stale) {
  pthread_mutex_lock(&e->mu);
  bool free_now = claim_blocker(e, l, h->own_lease, shared_key, stale) == NULL;
  if (free_now) {
    h->next = e->holds;
    e->holds = h;
  }
  pthread_mutex_unlock(&e->mu);
  return free_now;
}

etcd_hold *dl_etcd_stale_take(dl_etcd *e, const dl_lock_ref *l) {
  pthread_mutex_lock(&e->mu);
  etcd_hold *h = stale_find(e, l);
  /* Ours from here, as a release's (dl_etcd_release_begin): no longer
   * held, still listed until its key is deleted. */
  if (h) h->held = false;
  pthread_mutex_unlock(&e->mu);
  if (h) {
    dl_etcd_unwatch(e, h->watch);
    h->watch = NULL;
  }
  return h;
}

/* What an acquire of l that waited behind o (e->mu held) ends with at its
 * deadline: behind an acquire of ours that rides out the server's loss
 * (or began a moment ago where the server was just found unreachable),
 * not "held" (0: DLOCK_EBUSY) but the server not reached, recorded, as
 * that acquire ends. */
static int behind_riding(dl_etcd *e, const dl_lock_ref *l,
                         const etcd_hold *o) {
  int riding = o ? atomic_load(&o->riding) : 0;
  if (riding == 0 && o && !o->held &&
      dl_etcd_unreached_now(e, atomic_load(&e->current)))
    riding = DLOCK_ECONNECT;
  if (riding == 0) return 0;
  return dl_seterr(e->err, riding,
                   "etcd: no answer for %s (an acquire of it in this client "
                   "rides out the server's loss)",
                   l->key);
}

int dl_etcd_claim_riding(dl_etcd *e, const dl_lock_ref *l) {
  pthread_mutex_lock(&e->mu);
  bool stale;
  int rc = behind_riding(e, l, claim_blocker(e, l, false, true, &stale));
  pthread_mutex_unlock(&e->mu);
  return rc;
}

int dl_etcd_claim(dl_etcd *e, dl_acquire *a, bool own_lease, bool shared_key,
                  etcd_hold **out) {
  const dl_lock_ref *l = a->lock;
  etcd_hold *h = dl_etcd_claim_new(e, l, own_lease);
  if (h == NULL) return DLOCK_ENOMEM;
  pthread_mutex_lock(&e->mu);
  int rc = 1;
  for (;;) {
    bool is_stale;
    etcd_hold *o = claim_blocker(e, l, own_lease, shared_key, &is_stale);
    if (o && is_stale) {
      pthread_mutex_unlock(&e->mu);
      if ((o = dl_etcd_stale_take(e, l)) != NULL) {
        int64_t deadline = dl_now_ms() + e->command_timeout_ms;
        dl_etcd_delete_at(e, o->key, o->rev, deadline);
        if (o->own_lease) dl_etcd_revoke(e, o->lease, deadline);
        dl_etcd_hold_drop(e, o);
      }
      pthread_mutex_lock(&e->mu);
      continue;
    }
    if (o == NULL) break;
    if (atomic_load(e->env->closing)) {
      rc = dl_seterr(e->err, DLOCK_ECLOSED, "the client is closing");
      break;
    }
    if (dl_etcd_wait_over(a)) {
      rc = dl_offload_cancelled() ? 0 : behind_riding(e, l, o);
      break;
    }
    a->waited = true;
    struct timespec ts;
    dl_abstime(a->deadline == INT64_MAX ? dl_now_ms() + 60000 : a->deadline,
               &ts);
    pthread_cond_timedwait(&e->cv, &e->mu, &ts);
  }
  if (rc == 1) {
    h->next = e->holds;
    e->holds = h;
  }
  pthread_mutex_unlock(&e->mu);
  if (rc != 1)
    dl_etcd_hold_free(h);
  else
    *out = h;
  return rc;
}

int64_t dl_etcd_reenter_begin(dl_etcd *e, const dl_lock_ref *l, char *key,
                              size_t len) {
  pthread_mutex_lock(&e->mu);
  etcd_hold *h = hold_find(e, l->key, l->owner);
  int64_t rev = h && h->held ? h->rev : 0;
  if (rev) snprintf(key, len, "%s", h->key);
  pthread_mutex_unlock(&e->mu);
  return rev;
}

int dl_etcd_reenter_end(dl_etcd *e, dl_acquire *a, int64_t rev, int64_t now) {
  const dl_lock_ref *l = a->lock;
  pthread_mutex_lock(&e->mu);
  etcd_hold *h = hold_find(e, l->key, l->owner);
  bool same = h && h->held && now == rev; /* the client counts it */
  bool held = h && h->held;
  int64_t until = h && h->own_lease ? h->lease_until : e->lease_until;
  pthread_mutex_unlock(&e->mu);
  if (!same) {
    if (held) dl_etcd_hold_drop(e, h); /* not one being released */
    return 0;
  }
  a->status = 2;
  a->token = (uint64_t)rev;
  a->valid_until = until;
  return 1;
}

bool dl_etcd_other_side_held(dl_etcd *e, const dl_lock_ref *l) {
  char other[DL_OWNER_MAX + 8];
  size_t n = strlen(l->owner);
  if (l->kind == DL_KIND_READ)
    snprintf(other, sizeof other, "%s:write", l->owner);
  else if (n > 6 && strcmp(l->owner + n - 6, ":write") == 0)
    snprintf(other, sizeof other, "%.*s", (int)(n - 6), l->owner);
  else
    return false;
  pthread_mutex_lock(&e->mu);
  etcd_hold *h = hold_find(e, l->key, other);
  bool held = h && h->held;
  pthread_mutex_unlock(&e->mu);
  return held;
}

bool dl_etcd_mutex_ours(dl_etcd *e, const dl_lock_ref *l, const etcd_hold *h,
                        int64_t owner_rev, bool rw, bool downgrade) {
  if (owner_rev == 0 ? rw : owner_rev >= h->rev) return true;
  if (!downgrade) return false;
  /* The downgrade: the owner is this owner's write hold, still held. Gone
   * meanwhile, the reader waits as any (another client's writer may hold
   * the lock by now). */
  char w[DL_OWNER_MAX + 8];
  snprintf(w, sizeof w, "%s:write", l->owner);
  pthread_mutex_lock(&e->mu);
  etcd_hold *o = hold_find(e, l->key, w);
  bool ours = o && o->held && o->rev == owner_rev;
  pthread_mutex_unlock(&e->mu);
  return ours;
}

int dl_etcd_side_refused(dl_etcd *e, const dl_lock_ref *l) {
  return dl_seterr(e->err, DLOCK_EDEADLK,
                   "this owner holds the read lock of '%s': release it "
                   "before asking for the write lock",
                   l->name);
}

int dl_etcd_release_begin(dl_etcd *e, const dl_lock_ref *l, int count,
                          etcd_hold **hp) {
  *hp = NULL;
  pthread_mutex_lock(&e->mu);
  etcd_hold *h = hold_find(e, l->key, l->owner);
  if (h && !h->held) h = NULL;
  int rc = 1;
  if (h == NULL)
    rc = DLOCK_ENOTOWNER;
  else if (count > 1) /* one re-entry less (the client counts it) */
    rc = 0;
  /* Ours from here: no longer held, so that a renewal or a check finding
   * the key gone (a force release) leaves it alone; but still listed
   * until its key is deleted (dl_etcd_hold_drop), so that the client's
   * other owners of the name keep waiting (claim): one claiming now would
   * find our key still there and take it as its own (put_and_read), and
   * our delete would then take it from under it. */
  if (rc == 1) h->held = false;
  pthread_mutex_unlock(&e->mu);
  if (h == NULL)
    return dl_seterr(e->err, DLOCK_ENOTOWNER, "'%s' is not held by %s", l->name,
                     l->owner);
  if (rc != 1) return rc;
  dl_etcd_unwatch(e, h->watch);
  h->watch = NULL;
  *hp = h;
  return 1;
}
