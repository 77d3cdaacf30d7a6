/* holds.c: what a client knows of its own holds, per (key, owner), shared by
 * every lock handle of the client (as Redisson tracks holds per client, not
 * per RLock object): recorded, counted, looked up and forgotten here alone,
 * under the client's holds_mu, and each listed with the watchdog. The count
 * is sent with every acquire and release, so the server's count always
 * mirrors what the client knows; a backend that keeps none (ZooKeeper, a
 * plain string lock) answers with this one. */
#include "client.h"
#include "watchdog.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* One allocation: the hold and its watchdog entry (renewed, or timed),
 * made together, freed together by the entry's last reference
 * (dl_watchdog_remove, or the round in flight that still refers to it).
 * The hold's key (borrowed from the handle of `holder`) and its validity
 * are the entry's, kept once, and its lost_fn the holder's. 85 bytes on
 * LP64 before the tail: a hold with an owner tail of up to 2 bytes (a
 * thread's number, a short explicit owner) is a 96-byte malloc chunk, up
 * to 18 bytes a 112-byte one (docs/PERFORMANCE.md, memory per held lock). */
struct dl_hold {
  dl_renewal renewal; /* first: its free(r) frees the hold */
  struct dl_hold *next;
  dl_holder *holder; /* the handle's, whose lost_fn reports it */
  uint64_t token;
  int64_t lease_ms;
  /* dl_now_us() time of a lock's grant, for dlock_metrics' hold_seconds
   * (0: not timed: a permit, or counted already at its loss) */
  int64_t granted_us;
  int count;
  bool lost;
  char tail[]; /* the owner id after "<client id>:" */
};
_Static_assert(offsetof(dl_hold, renewal) == 0, "the entry starts the hold");
_Static_assert(sizeof(void *) != 8 || offsetof(dl_hold, tail) <= 85,
               "a hold with a 2-byte tail fits a 96-byte malloc chunk");

/* Every owner id of this client is "<client id>:<tail>"; a hold keeps only
 * the tail, and borrows its key from the handle that took it (holds taken
 * through a handle are dropped before it is freed), so that holding many
 * locks costs little memory. */
static const char *tail_of(const dlock_client *c, const char *owner) {
  return owner + c->id_len + 1;
}

/* The hold's key: its renewal's (set at the start, read without a lock). */
static const char *key_of(const dl_hold *h) {
  return h->renewal.key;
}

const char *dl_holds_tail(const dl_renewal *r) {
  return ((const dl_hold *)r)->tail;
}

static unsigned bucket(const char *key, const char *tail) {
  return dl_hash(dl_hash(DL_HASH_SEED, key), tail) % DL_HOLD_BUCKETS;
}

/* With holds_mu held, as every static function below that takes c. */
static dl_hold *find(dlock_client *c, const char *key, const char *owner) {
  const char *tail = tail_of(c, owner);
  for (dl_hold *h = c->holds[bucket(key, tail)]; h; h = h->next)
    if (strcmp(h->tail, tail) == 0 && strcmp(key_of(h), key) == 0) return h;
  return NULL;
}

/* A new hold of g (count 0) and its watchdog entry, in the table; NULL
 * out of memory (nothing made). */
static dl_hold *add(dlock_client *c, const dl_hold_grant *g) {
  const char *tail = tail_of(c, g->owner);
  size_t tl = strlen(tail);
  /* The tail right after the last field, not after the struct's padding. */
  dl_hold *h = calloc(1, offsetof(dl_hold, tail) + tl + 1);
  if (h == NULL) return NULL;
  memcpy(h->tail, tail, tl + 1);
  dl_watchdog_add(c->watchdog, &h->renewal, g->key, g->valid_until, g->renew,
                  g->permit);
  unsigned b = bucket(g->key, tail);
  h->next = c->holds[b];
  c->holds[b] = h;
  return h;
}

/* Takes h out of the table and returns it, still allocated: after
 * unlocking holds_mu the caller passes it to bury() (a lost callback in
 * progress takes holds_mu; the renewal borrows the hold's tail). */
static dl_hold *unlink_hold(dlock_client *c, dl_hold *h) {
  dl_hold **pp = &c->holds[bucket(key_of(h), h->tail)];
  while (*pp != h) pp = &(*pp)->next;
  *pp = h->next;
  h->next = NULL;
  return h;
}

/* The hold ends: its holder counts it no more, dlock_metrics' hold_seconds
 * counts it if it was timed (*held_us, unless NULL: how long it was held,
 * -1 if not timed: a loss counted it already); then as unlink_hold. */
static dl_hold *forget_timed(dlock_client *c, dl_hold *h, int64_t *held_us) {
  if (h->holder) h->holder->nholds--;
  int64_t us = h->granted_us != 0 ? dl_now_us() - h->granted_us : -1;
  if (us >= 0) dl_hist_add(&c->hold_hist, us);
  if (held_us) *held_us = us;
  return unlink_hold(c, h);
}

static dl_hold *forget(dlock_client *c, dl_hold *h) {
  return forget_timed(c, h, NULL);
}

/* Stops the hold's renewal, which frees the hold (now, or at the end of
 * the round in flight that still refers to it: h is not to be used
 * again). Accepts NULL. Not under holds_mu. */
static void bury(dlock_client *c, dl_hold *h) {
  if (h == NULL) return;
  dl_watchdog_remove(c->watchdog, &h->renewal);
}

static int64_t valid_until(dlock_client *c, dl_hold *h) {
  return dl_watchdog_valid_until(c->watchdog, &h->renewal);
}

void dl_holder_on_lost(dlock_client *c, dl_holder *hd, dl_user_fn cb,
                       void *ud) {
  pthread_mutex_lock(&c->holds_mu);
  hd->cb = cb;
  hd->ud = ud;
  pthread_mutex_unlock(&c->holds_mu);
}

void dl_holder_set_info(dlock_client *c, dl_holder *hd, char *info) {
  pthread_mutex_lock(&c->holds_mu);
  char *old = hd->info;
  hd->info = info;
  pthread_mutex_unlock(&c->holds_mu);
  free(old);
}

void dl_holder_drop(dlock_client *c, dl_holder *hd) {
  dl_hold *stop[64];
  int nstop;
  do {
    nstop = 0;
    pthread_mutex_lock(&c->holds_mu);
    while (c->in_lost_callback == hd)
      pthread_cond_wait(&c->holds_cv, &c->holds_mu);
    for (int i = 0; i < DL_HOLD_BUCKETS && nstop < 64 && hd->nholds > 0; i++)
      for (dl_hold *h = c->holds[i], *n; h && nstop < 64; h = n) {
        n = h->next;
        if (h->holder == hd) stop[nstop++] = forget(c, h);
      }
    pthread_mutex_unlock(&c->holds_mu);
    for (int i = 0; i < nstop; i++) bury(c, stop[i]);
  } while (nstop > 0);
  free(hd->info);
  hd->info = NULL;
}

int dl_holds_record(dlock_client *c, const dl_hold_grant *g, uint64_t *token) {
  dl_hold *old = NULL;
  int rc = 0;
  pthread_mutex_lock(&c->holds_mu);
  dl_hold *h = find(c, g->key, g->owner);
  if (h && (g->how == DL_HOLD_NEW || h->lost)) { /* a fresh hold */
    old = forget(c, h);
    h = NULL;
  }
  if (h && g->how == DL_HOLD_ENSURE) goto done;
  /* Every hold is listed with the watchdog: renewed (the watchdog's lease),
   * or timed (a fixed lease: lost the moment it runs out unreleased). A
   * re-entry's validity only ever extends the entry's (a shorter fixed
   * lease leaves the longer one standing). */
  if (h) {
    dl_watchdog_extend(c->watchdog, &h->renewal, g->valid_until, g->renew);
  } else if ((h = add(c, g)) == NULL) {
    rc = DLOCK_ENOMEM;
    goto done;
  } else {
    h->token = g->token;
    h->holder = g->holder;
    h->granted_us = g->granted_us;
    if (g->holder) g->holder->nholds++;
  }
  h->count++;
  h->lease_ms = g->lease_ms;
done:
  if (token) *token = h ? h->token : 0;
  pthread_mutex_unlock(&c->holds_mu);
  bury(c, old);
  return rc;
}

static void view_of(const dl_hold *h, dl_hold_view *v) {
  v->token = h->token;
  v->lease_ms = h->lease_ms;
  v->count = h->count;
  v->lost = h->lost;
}

bool dl_holds_get(dlock_client *c, const char *key, const char *owner,
                  dl_hold_view *v) {
  pthread_mutex_lock(&c->holds_mu);
  dl_hold *h = find(c, key, owner);
  if (h && v) view_of(h, v);
  pthread_mutex_unlock(&c->holds_mu);
  return h != NULL;
}

int dl_holds_count(void *client, const char *key, const char *owner) {
  dlock_client *c = client;
  pthread_mutex_lock(&c->holds_mu);
  dl_hold *h = find(c, key, owner);
  int n = h && !h->lost ? h->count : 0;
  pthread_mutex_unlock(&c->holds_mu);
  return n;
}

int dl_holds_validity(dlock_client *c, const char *key, const char *owner,
                      int64_t *left) {
  pthread_mutex_lock(&c->holds_mu);
  dl_hold *h = find(c, key, owner);
  *left = h ? valid_until(c, h) - dl_now_ms() : 0;
  bool lost = h && h->lost;
  pthread_mutex_unlock(&c->holds_mu);
  if (h == NULL) return DLOCK_ENOTOWNER;
  return lost || *left <= 0 ? DLOCK_ELOST : 0;
}

bool dl_holds_forget(dlock_client *c, const char *key, const char *owner,
                     bool *lost) {
  pthread_mutex_lock(&c->holds_mu);
  dl_hold *h = find(c, key, owner);
  if (lost) *lost = h && (h->lost || dl_now_ms() >= valid_until(c, h));
  dl_hold *old = h ? forget(c, h) : NULL;
  pthread_mutex_unlock(&c->holds_mu);
  bury(c, old);
  return old != NULL;
}

int dl_holds_acquire_begin(dlock_client *c, const char *key, const char *owner,
                           const dl_holder *hd, char **info) {
  pthread_mutex_lock(&c->holds_mu);
  *info = dl_strdup(hd->info ? hd->info : "");
  dl_hold *h = find(c, key, owner);
  int held = h && !h->lost ? h->count : 0;
  pthread_mutex_unlock(&c->holds_mu);
  return held;
}

dl_rel_state dl_holds_release_begin(dlock_client *c, const char *key,
                                    const char *owner, dl_hold_view *v,
                                    dl_renewal **ren) {
  *ren = NULL;
  pthread_mutex_lock(&c->holds_mu);
  dl_hold *h = find(c, key, owner);
  if (h && h->lost) {
    dl_hold *old = forget(c, h);
    pthread_mutex_unlock(&c->holds_mu);
    bury(c, old);
    return DL_REL_LOST;
  }
  if (h) {
    view_of(h, v);
    *ren = &h->renewal;
    dl_watchdog_release_begin(c->watchdog, &h->renewal);
  }
  pthread_mutex_unlock(&c->holds_mu);
  return h ? DL_REL_HELD : DL_REL_NONE;
}

bool dl_holds_release_end(dlock_client *c, const char *key, const char *owner,
                          dl_renewal *ren, dl_rel_outcome how,
                          dl_rel_ended *ended) {
  dl_hold *old = NULL;
  int64_t held_us = -1;
  pthread_mutex_lock(&c->holds_mu);
  /* The hold the release began with, if it is still known: another thread
   * of the same owner may have taken the lock afresh since the server ran
   * the release, and that newer hold is not this release's to end. */
  dl_hold *h = find(c, key, owner);
  if (ren == NULL || (h && &h->renewal != ren)) h = NULL;
  dl_watchdog_release_end(c->watchdog, ren); /* ren may be freed now */
  uint64_t token = h ? h->token : 0;
  if (h && how == DL_REL_GONE)
    old = forget_timed(c, h, &held_us);
  else if (h && how == DL_REL_ONE && h->count > 1) h->count--;
  else if (h && how == DL_REL_FAILED && h->count <= 1)
    old = forget_timed(c, h, &held_us);
  pthread_mutex_unlock(&c->holds_mu);
  bury(c, old);
  if (ended) *ended = (dl_rel_ended){.token = token, .held_us = held_us};
  return h != NULL;
}

void dl_holds_untime(dlock_client *c, const char *key, const char *owner) {
  pthread_mutex_lock(&c->holds_mu);
  dl_hold *h = find(c, key, owner);
  if (h) h->granted_us = 0;
  pthread_mutex_unlock(&c->holds_mu);
}

void dl_holds_free_all(dlock_client *c) {
  for (int i = 0; i < DL_HOLD_BUCKETS; i++)
    while (c->holds[i]) bury(c, unlink_hold(c, c->holds[i]));
}

/* Tells the handle that took the hold of r its loss (marking it lost) or
 * its renewal. */
static void tell(dlock_client *c, dl_renewal *r, const char *key,
                 const char *owner, bool renewed) {
  pthread_mutex_lock(&c->holds_mu);
  dl_hold *h = find(c, key, owner);
  dl_holder *hd = NULL;
  dl_lost_fn fn = NULL;
  dl_user_fn cb = NULL;
  void *cb_ud = NULL;
  dl_hold_note note = {.renewed = renewed};
  /* Only the hold this renewal belonged to: the owner may have released
   * and taken the lock again since the renewal went out. */
  if (h && &h->renewal == r && !(renewed && h->lost)) {
    note.token = h->token;
    if (h->granted_us != 0) note.held_us = dl_now_us() - h->granted_us;
    if (!renewed) {
      h->lost = true;
      if (h->granted_us != 0) { /* the hold ends here, for dlock_metrics */
        dl_hist_add(&c->hold_hist, note.held_us);
        h->granted_us = 0;
      }
    }
    if ((hd = h->holder) != NULL && (fn = hd->lost_fn) != NULL) {
      c->in_lost_callback = hd;
      cb = hd->cb;
      cb_ud = hd->ud;
    }
  }
  pthread_mutex_unlock(&c->holds_mu);
  if (fn == NULL) return;
  fn(hd, owner, cb, cb_ud, &note);
  pthread_mutex_lock(&c->holds_mu);
  c->in_lost_callback = NULL;
  pthread_cond_broadcast(&c->holds_cv);
  pthread_mutex_unlock(&c->holds_mu);
}

void dl_holds_on_lost(void *ud, dl_renewal *r, const char *key,
                      const char *owner) {
  tell(ud, r, key, owner, false);
}

void dl_holds_on_renewed(dlock_client *c, dl_renewal *r, const char *key,
                         const char *owner) {
  tell(c, r, key, owner, true);
}
