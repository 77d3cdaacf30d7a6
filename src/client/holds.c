/* holds.c: what a client knows of its own holds, per (key, owner), shared by
 * every lock handle of the client (as Redisson tracks holds per client, not
 * per RLock object). The count is sent with every acquire and release, so the
 * server's count always mirrors what the client knows. */
#include "client.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Every owner id of this client is "<client id>:<tail>"; a hold keeps only
 * the tail, and borrows its key from the handle that took it (holds taken
 * through a handle are dropped before it is freed), so that holding many
 * locks costs little memory. */
static const char *tail_of(const dlock_client *c, const char *owner) {
  return owner + c->id_len + 1;
}

static unsigned bucket(const char *key, const char *tail) {
  return dl_hash(dl_hash(DL_HASH_SEED, key), tail) % DL_HOLD_BUCKETS;
}

dl_hold *dl_hold_find(dlock_client *c, const char *key, const char *owner) {
  const char *tail = tail_of(c, owner);
  for (dl_hold *h = c->holds[bucket(key, tail)]; h; h = h->next)
    if (strcmp(h->tail, tail) == 0 && strcmp(h->key, key) == 0) return h;
  return NULL;
}

dl_hold *dl_hold_add(dlock_client *c, const char *key, const char *owner) {
  const char *tail = tail_of(c, owner);
  size_t tl = strlen(tail);
  /* The tail right after the last field, not after the struct's padding:
   * a hold with a short owner is then an 80-byte malloc chunk. */
  dl_hold *h = calloc(1, offsetof(dl_hold, tail) + tl + 1);
  if (h == NULL) return NULL;
  h->key = key;
  memcpy(h->tail, tail, tl + 1);
  unsigned b = bucket(key, tail);
  h->next = c->holds[b];
  c->holds[b] = h;
  return h;
}

dl_hold *dl_hold_drop(dlock_client *c, dl_hold *h) {
  dl_hold **pp = &c->holds[bucket(h->key, h->tail)];
  while (*pp != h) pp = &(*pp)->next;
  *pp = h->next;
  h->next = NULL;
  return h;
}

void dl_hold_bury(dlock_client *c, dl_hold *h) {
  if (h == NULL) return;
  dl_watchdog_remove(c->watchdog, h->renewal);
  free(h);
}

void dl_holds_drop_via(dlock_client *c, const void *via, int *count) {
  dl_hold *stop[64];
  int nstop;
  do {
    nstop = 0;
    pthread_mutex_lock(&c->holds_mu);
    while (c->in_lost_callback == via)
      pthread_cond_wait(&c->holds_cv, &c->holds_mu);
    for (int i = 0; i < DL_HOLD_BUCKETS && nstop < 64 && (!count || *count > 0);
         i++)
      for (dl_hold *h = c->holds[i], *n; h && nstop < 64; h = n) {
        n = h->next;
        if (h->via == via) {
          if (count) (*count)--;
          stop[nstop++] = dl_hold_drop(c, h);
        }
      }
    pthread_mutex_unlock(&c->holds_mu);
    for (int i = 0; i < nstop; i++) dl_hold_bury(c, stop[i]);
  } while (nstop > 0);
}

int64_t dl_hold_valid_until(dlock_client *c, const dl_hold *h) {
  int64_t v = h->valid_until;
  if (h->renewal) {
    int64_t r = dl_watchdog_valid_until(c->watchdog, h->renewal);
    if (r > v) v = r;
  }
  return v;
}

/* Tells the handle that took the hold of r its loss (marking it lost) or
 * its renewal. */
static void tell(dlock_client *c, dl_renewal *r, const char *key,
                 const char *owner, bool renewed) {
  pthread_mutex_lock(&c->holds_mu);
  dl_hold *h = dl_hold_find(c, key, owner);
  void *via = NULL;
  dl_lost_fn fn = NULL;
  dl_hold_note note = {.renewed = renewed};
  /* Only the hold this renewal belonged to: the owner may have released
   * and taken the lock again since the renewal went out. */
  if (h && h->renewal == r && !(renewed && h->lost)) {
    note.token = h->token;
    if (h->granted_us != 0) note.held_us = dl_now_us() - h->granted_us;
    if (!renewed) {
      h->lost = true;
      if (h->granted_us != 0) { /* the hold ends here, for dlock_metrics */
        dl_hist_add(&c->hold_hist, note.held_us);
        h->granted_us = 0;
      }
    }
    if ((via = h->via) != NULL && (fn = h->lost_fn) != NULL)
      c->in_lost_callback = via;
  }
  pthread_mutex_unlock(&c->holds_mu);
  if (fn == NULL) return;
  fn(via, owner, &note);
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
