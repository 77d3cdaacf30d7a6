/* mutex.c: the mutex on etcd, laid out as Go's concurrency.Mutex and
 * `etcdctl lock`: a key PREFIX/NAME/<lease id in hex> with an empty value
 * (or the holder's description, which Go never reads)
 * on the session's lease, created in one txn that also reads the owner
 * (the lowest create revision under PREFIX/NAME/); a waiter watches only
 * its predecessor (the highest create revision below its own) until it is
 * deleted, then looks again, and checks that its own key is still there
 * before it takes the lock (etcd issue 11456). The fencing token is the
 * key's create revision; the release deletes the key only at that
 * revision (etcd issue 22082). The read-write lock is contrib/recipes'
 * RWMutex on the same machinery: keys PREFIX/NAME/read/<ns> and
 * PREFIX/NAME/write/<ns>, a reader waiting for the writers' keys before
 * its own, a writer for every key before its own. Here: the blocking
 * acquire and its wait, and the steps the event loop's (amutex.c) shares:
 * the key, the win, the lease's step; the client's holds are holds.c's,
 * the line's requests line.c's, the release release.c's. */
#include "etcdb.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Whether the acquire of h rides out rc (ride.c), told to the acquires of
 * the same lock in this client that wait behind it (h->riding). */
static bool ride_out(dl_etcd *e, const dl_acquire *a, etcd_hold *h, int rc,
                     dl_ride *rides) {
  dl_etcd_riding(h, rc);
  return dl_etcd_ride_out(e, a->wait, a->deadline, rc, rides);
}

/* The lock's key prefix: URL prefix + lock + "/". */
static void lock_prefix(dl_etcd *e, const char *lock, char *out, size_t len) {
  snprintf(out, len, "%s%s/", e->prefix, lock);
}

/* Takes the re-entry of an existing hold: 1, or 0 it was gone (dropped:
 * take it afresh), or a negative code. */
static int reenter(dl_etcd *e, dl_acquire *a) {
  char key[ETCD_KEY_MAX] = "";
  int64_t rev = dl_etcd_reenter_begin(e, a->lock, key, sizeof key);
  if (rev == 0) return 0;
  int64_t now = dl_etcd_create_rev(e, key, dl_now_ms() + e->command_timeout_ms);
  if (now < 0) return (int)now;
  return dl_etcd_reenter_end(e, a, rev, now);
}

int64_t dl_etcd_lease_step(dl_etcd *e, etcd_hold *h, int64_t lease_ms) {
  pthread_mutex_lock(&e->mu);
  int64_t ms = h->own_lease ? lease_ms : e->lease_ttl_s * 1000;
  pthread_mutex_unlock(&e->mu);
  return ms / 3 > 200 ? ms / 3 : 200;
}

/* Keeps the lease of h's key alive while it waits: 0 (*until: the lease's
 * new validity), DLOCK_ELOST when it has ended (our key went with it), or
 * a negative code. */
static int keep_lease(dl_etcd *e, etcd_hold *h, int64_t *until) {
  int64_t sent = dl_now_ms(), deadline = sent + e->command_timeout_ms;
  int rc;
  if (h->own_lease) {
    int64_t ttl;
    rc = dl_etcd_keepalive(e, h->lease, deadline, &ttl);
    if (rc == 1) {
      *until = h->lease_until = dl_validity(sent, h->lease_ms);
      return 0;
    }
  } else {
    int64_t l;
    rc = dl_etcd_session(e, deadline, &l, until);
    if (rc == 0 && l == h->lease) return 0;
  } /* else a new session: the old one ended */
  if (rc < 0) return rc;
  return dl_seterr(e->err, DLOCK_ELOST,
                   "the lease of our etcd key %s ended while we waited",
                   h->key);
}

/* A read-write lock's key, contrib/recipes' RWMutex layout: PFX + "read/"
 * or "write/" + the wall clock in nanoseconds (unique in this process:
 * one more than the last, if the clock has not moved on). */
static void rw_key(const char *pfx, bool write, char *out, size_t len) {
  static _Atomic int64_t last;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int64_t ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec, was;
  do {
    was = atomic_load(&last);
    if (ns <= was) ns = was + 1;
  } while (!atomic_compare_exchange_weak(&last, &was, ns));
  snprintf(out, len, "%s%s/%" PRId64, pfx, write ? "write" : "read", ns);
}

int dl_etcd_mutex_key(dl_etcd *e, const dl_acquire *a, etcd_hold *h, char *pfx,
                      char *wait_pfx, char **value) {
  const dl_lock_ref *l = a->lock;
  bool rw = l->kind == DL_KIND_READ || l->kind == DL_KIND_WRITE;
  /* The mutex's key: PFX + the lease in hex; it waits for any key before
   * it. A reader waits for the writers' keys before its own, a writer for
   * every key before it (contrib/recipes' RWMutex). */
  char key[ETCD_KEY_MAX + 24];
  lock_prefix(e, l->key, pfx, ETCD_KEY_MAX);
  snprintf(wait_pfx, ETCD_KEY_MAX + 8, "%s%s", pfx,
           l->kind == DL_KIND_READ ? "write/" : "");
  if (rw)
    rw_key(pfx, l->kind == DL_KIND_WRITE, key, sizeof key);
  else
    snprintf(key, sizeof key, "%s%" PRIx64, pfx, (uint64_t)h->lease);
  free(h->key); /* a put again: a key anew (the read-write lock's) */
  if ((h->key = dl_strdup(key)) == NULL)
    return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  /* Our key, left by a release that failed: the put deletes it at its
   * revision and makes it anew (dl_etcd_put_and_read, fresh); the
   * orphan's own delete is not sent any more. */
  pthread_mutex_lock(&e->mu);
  for (etcd_hold **pp = &e->orphans; *pp;) {
    etcd_hold *o = *pp;
    if (strcmp(o->key, key) == 0 && o->lease == 0) {
      *pp = o->next;
      dl_etcd_hold_free(o);
    } else {
      pp = &o->next;
    }
  }
  pthread_mutex_unlock(&e->mu);
  return (*value = dl_etcd_mutex_value(e, a)) != NULL ? 0 : DLOCK_ENOMEM;
}

char *dl_etcd_mutex_value(dl_etcd *e, const dl_acquire *a) {
  /* The owner id, a newline, the holder's description (Go never reads
   * it; dlock status and the waiters do). */
  const char *owner = a->lock->owner, *info = a->info ? a->info : "";
  size_t vl = strlen(owner) + strlen(info) + 2;
  char *value = malloc(vl);
  if (value == NULL)
    dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  else
    snprintf(value, vl, "%s\n%s", owner, info);
  return value;
}

int dl_etcd_mutex_won(dl_etcd *e, dl_acquire *a, etcd_hold *h, int64_t until) {
  pthread_mutex_lock(&e->mu);
  h->held = true;
  if (!h->own_lease && e->lease == h->lease) until = e->lease_until;
  pthread_mutex_unlock(&e->mu);
  int rc = dl_etcd_watch_hold(e, h);
  if (rc != 0) return rc;
  a->status = 1;
  a->token = (uint64_t)h->rev;
  a->valid_until = until;
  return 1;
}

int dl_etcd_lock_acquire(dl_backend *b, dl_acquire *a) {
  dl_etcd *e = (dl_etcd *)b;
  const dl_lock_ref *l = a->lock;
  if (l->kind == DL_KIND_PLAIN)
    return dl_seterr(e->err, DLOCK_ENOTSUP,
                     "the etcd backend has no plain string lock (it has "
                     "the mutex, on Go's concurrency.Mutex layout)");
  bool rw = l->kind == DL_KIND_READ || l->kind == DL_KIND_WRITE;
  int rc;
  if (a->held > 0 && (rc = reenter(e, a)) != 0) return rc;
  /* The owner's read hold asking for the write side would wait for
   * itself (contrib's RWMutex does, forever): refused; the write holder
   * takes the read side at once, the downgrade (as Curator's). */
  bool other = rw && dl_etcd_other_side_held(e, l);
  if (other && l->kind == DL_KIND_WRITE) return dl_etcd_side_refused(e, l);
  bool downgrade = other;
  /* A fixed lease (not the watchdog's) is a lease of its own, never kept
   * alive: the key goes when it ends, as a lone Go session's would. */
  bool own = a->lease_ms != e->session_ttl_ms;
  etcd_hold *h = NULL;
  if ((rc = dl_etcd_claim(e, a, own, !rw, &h)) != 1) {
    if (rc == 0) a->ttl = DL_TTL_UNKNOWN;
    return rc;
  }
  int64_t until = 0;
  dl_ride rides = {0};
  /* A waiting acquire rides out the server's loss here too (as the Redis
   * backend's first attempt): the lease asked for again, and the put sent
   * again with the same key (a put that went through is found by the
   * next, deleted at its revision and made anew: fresh). */
  do {
    int64_t deadline = dl_now_ms() + e->command_timeout_ms;
    if (own) {
      rc = dl_etcd_fixed_lease(e, a->lease_ms, deadline, &h->lease, &until);
      h->lease_until = until;
      h->lease_ms = a->lease_ms;
    } else {
      rc = dl_etcd_session(e, deadline, &h->lease, &until);
    }
  } while (rc < 0 && ride_out(e, a, h, rc, &rides));
  if (rc == 0) dl_etcd_answered(h, &rides);
  char pfx[ETCD_KEY_MAX], key[ETCD_KEY_MAX + 24], wait_pfx[ETCD_KEY_MAX + 8];
  char *value = NULL;
  if (rc == 0) rc = dl_etcd_mutex_key(e, a, h, pfx, wait_pfx, &value);
  if (h->key) snprintf(key, sizeof key, "%s", h->key);
  int64_t owner_rev = 0;
  bool waited = false, walked = false;
  for (int tries = 0; rc == 0;) {
    rc = dl_etcd_put_and_read(e, h, value, wait_pfx, true,
                              dl_now_ms() + e->command_timeout_ms, &owner_rev);
    if (rc < 0 && ride_out(e, a, h, rc, &rides)) {
      rc = 0;
      continue;
    }
    if (rc >= 0) dl_etcd_answered(h, &rides);
    if (rc != 1) break;
    /* The key is someone else's: a read-write lock's takes another time
     * (a clash of clocks); a mutex's is no key of a mutex. */
    if (!rw || tries == ETCD_RW_CLASHES) {
      rc = dl_seterr(e->err, DLOCK_EWRONGTYPE,
                     "%s is there on a lease not ours: no lock of ours "
                     "made it (nothing changed)",
                     key);
      break;
    }
    tries++;
    rw_key(pfx, l->kind == DL_KIND_WRITE, key, sizeof key);
    free(h->key);
    rc = (h->key = dl_strdup(key)) == NULL
             ? dl_seterr(e->err, DLOCK_ENOMEM, "out of memory")
             : 0;
  }
  free(value);
  if (rc != 0) goto fail;
  /* Ours if nobody is before us: the owner (the oldest key under
   * wait_pfx) is ours or younger, or there is none (a reader, no writer). */
  bool won = dl_etcd_mutex_ours(e, l, h, owner_rev, rw, downgrade);
  while (!won) {
    if (dl_etcd_wait_over(a)) {
      /* Riding out the server's loss at the deadline (the last pause
       * ends there): its error (recorded), not "held". */
      rc = dl_offload_cancelled() ? 0 : atomic_load(&h->riding);
      break;
    }
    a->waited = true;
    /* detect_deadlocks: once our key is in line, before the first wait
     * (of two owners closing a cycle at once, the later key sees the
     * other's). */
    if (a->detect && !walked) {
      walked = true;
      static const dl_walk_ops walk = {dl_etcd_waiters, dl_etcd_lock_holders};
      if ((rc = dl_deadlock_walk(&e->base, &walk, e->env, a)) < 0) break;
    }
    char pred[ETCD_KEY_MAX];
    int64_t at = 0;
    /* Our key still there, and who is before it: one txn. Nobody before
     * us: ours, our key being there (Go 3.4's Mutex does not look: etcd
     * issue 11456). */
    rc = dl_etcd_look(e, h->key, wait_pfx, h->rev, pred, sizeof pred, &at,
                      dl_now_ms() + e->command_timeout_ms);
    if (rc < 0 && rc != DLOCK_ELOST && ride_out(e, a, h, rc, &rides)) continue;
    if (rc < 0) break;
    dl_etcd_answered(h, &rides);
    if (rc == 0) {
      won = true;
      rc = 1;
      break;
    }
    /* In steps of a third of the lease at most: the lease our key is on
     * is kept alive meanwhile (nothing else does while we hold nothing). */
    int64_t step = dl_now_ms() + dl_etcd_lease_step(e, h, a->lease_ms);
    rc = dl_etcd_wait_delete(e, pred, at,
                             step < a->deadline ? step : a->deadline);
    if (rc < 0 && ride_out(e, a, h, rc, &rides)) continue;
    if (rc < 0) break;
    waited = true;
    if (rc == 0 && !dl_etcd_wait_over(a)) rc = keep_lease(e, h, &until);
    if (rc < 0 && ride_out(e, a, h, rc, &rides)) continue;
    if (rc < 0) break;
    if (rc == 0 && dl_etcd_wait_over(a)) break; /* the deadline, or a cancel */
  }
  /* A fixed lease runs from the grant: after a wait, from a keepalive. */
  if (won && own && waited && (rc = keep_lease(e, h, &until)) < 0) goto fail;
  if (won && (rc = dl_etcd_mutex_won(e, a, h, until)) == 1) return 1;
  if (won) goto fail;
  /* Refused: the holder's lease is not read. */
  if (rc == 0) a->ttl = DL_TTL_UNKNOWN;
fail:
  /* Told to the acquires waiting behind this one in this client until the
   * hold is dropped (dl_etcd_claim). */
  dl_etcd_riding(h, rc);
  /* Not taken: our key goes (Go's TryLock and a cancelled Lock do the
   * same), at its own revision only; the error's detail stays the
   * cause's, not the cleanup's. */
  char why[400] = "";
  if (rc < 0) dl_err_copy(e->err, why, sizeof why);
  int gone = 0;
  if (h->rev > 0)
    gone = dl_etcd_delete_at(e, h->key, h->rev,
                             dl_now_ms() + e->command_timeout_ms);
  else if (h->key && h->lease && !own &&
           (dl_etcd_transient(rc) || rc == DLOCK_EPROTO))
    dl_etcd_delete_key(e, h->key); /* a put whose answer we did not get (an
                              error the server answered: no put) */
  /* A fixed lease whose key is surely gone is kept for the next; one
   * that may still carry our key goes, and the key with it. */
  if (own && h->lease && gone == 1)
    dl_etcd_lease_idle(e, h->lease, h->lease_ms, h->lease_until);
  else if (own && h->lease)
    dl_etcd_revoke(e, h->lease, dl_now_ms() + e->command_timeout_ms);
  dl_etcd_hold_drop(e, h);
  if (rc < 0 && why[0]) dl_seterr(e->err, rc, "%s", why);
  return rc;
}
