/* watchdog.c: one renewal scheduler per client: the table of its renewals
 * (added, extended, removed, bracketed by releases), the keys to check,
 * and its life (made, stopped, freed, counted). The rounds that renew and
 * check the renewals, and the thread or loop timer that runs them on
 * schedule, are rounds.c's; the design is told there. */
#include "watchdog.h"

#include <stdlib.h>
#include <string.h>

/* The time between rounds: a third of the lease, or of the window where
 * that is clearly shorter (a ZooKeeper session shorter than the lease):
 * no validity runs out between rounds (it would be reported lost). After
 * a failed round, sooner: two thirds of the lease are left, and a short
 * outage should not cost the lock. */
int64_t dl_wd_period(const dl_watchdog *w, bool failed) {
  int64_t p = w->lease_ms / 3;
  if (w->window > 0 && w->window < w->lease_ms * 9 / 10) p = w->window / 3;
  if (failed) p = p / 5 < 1000 ? p / 5 : 1000;
  return p < 1 ? 1 : p;
}

/* With w->mu held: something for the watchdog to do now or sooner. */
static void wake(dl_watchdog *w) {
  if (w->loop) dl_wd_tick_soon(w);
  else pthread_cond_signal(&w->cv);
}

void dl_wd_unref(dl_renewal *r) {
  if (--r->refs == 0) free(r); /* the hold's allocation: r comes first */
}

static uint16_t slot_of(const char *key) {
  return (uint16_t)(dl_hash(DL_HASH_SEED, key) % FILTER);
}

/* With w->mu held: forgets the keys to check. */
void dl_wd_clear_pending(dl_watchdog *w) {
  for (int i = 0; i < w->npending; i++) free(w->pending[i]);
  w->npending = 0;
  w->check_all = false;
}

/* With w->mu held: the bytes dl_wd_strings writes for r. */
size_t dl_wd_strings_len(const dl_watchdog *w, const dl_renewal *r) {
  return strlen(r->key) + 1 + w->c->id_len + 1 + strlen(dl_holds_tail(r)) + 1;
}

/* With w->mu held: writes r's key and then its owner "<client id>:<tail>",
 * each NUL-terminated, at `at` (copies that outlive the borrowed strings).
 * Returns the owner's copy. */
char *dl_wd_strings(const dl_watchdog *w, const dl_renewal *r, char *at) {
  size_t kl = strlen(r->key) + 1, idl = w->c->id_len;
  const char *tail = dl_holds_tail(r);
  memcpy(at, r->key, kl);
  char *owner = at + kl;
  memcpy(owner, w->c->id, idl);
  owner[idl] = ':';
  memcpy(owner + idl + 1, tail, strlen(tail) + 1);
  return owner;
}

static void unlink_r(dl_watchdog *w, dl_renewal *r) {
  if (!dl_wd_linked(w, r)) return;
  w->filter[r->slot]--;
  if (r->fixed) w->nfixed--;
  if (r->prev) r->prev->next = r->next;
  else w->head = r->next;
  if (r->next) r->next->prev = r->prev;
  r->prev = r->next = NULL;
  w->count--;
}

void dl_watchdog_add(dl_watchdog *w, dl_renewal *r, const char *key,
                     int64_t valid_until, bool renew, bool permit) {
  r->prev = r->next = NULL;
  r->key = key;
  r->valid_until = valid_until;
  r->refs = 1;
  r->fixed = !renew;
  r->permit = permit;
  r->releasing = 0;
  r->slot = slot_of(key);
  pthread_mutex_lock(&w->mu);
  r->next = w->head;
  if (w->head) w->head->prev = r;
  w->head = r;
  w->count++;
  w->filter[r->slot]++;
  if (r->fixed) w->nfixed++;
  int64_t left = valid_until - dl_now_ms(); /* short: renewed sooner */
  if (renew && left > 0 && left < w->lease_ms * 9 / 10 &&
      (w->window == 0 || left < w->window)) {
    w->window = left;
    int64_t soon = dl_now_ms() + dl_wd_period(w, false);
    if (w->next > soon) w->next = soon;
    wake(w);
  }
  /* The thread sleeps until the earliest end it knows of. */
  if (valid_until < w->next_expiry) {
    w->next_expiry = valid_until;
    wake(w);
  }
  pthread_mutex_unlock(&w->mu);
}

void dl_watchdog_check(dl_watchdog *w, const char *key, size_t len) {
  char buf[DLOCK_KEY_PREFIX_MAX + DLOCK_NAME_MAX + 64];
  if (len >= sizeof buf) return; /* no key of ours is that long */
  memcpy(buf, key, len);
  buf[len] = '\0';
  uint16_t slot = slot_of(buf);
  pthread_mutex_lock(&w->mu);
  if (w->filter[slot] > 0 && !w->check_all) {
    bool known = false;
    for (int i = 0; i < w->npending && !known; i++)
      known = strcmp(w->pending[i], buf) == 0;
    if (!known && w->npending < PENDING &&
        (w->pending[w->npending] = dl_strdup(buf)) != NULL)
      w->npending++;
    else if (!known)
      w->check_all = true;
    wake(w);
  }
  pthread_mutex_unlock(&w->mu);
}

void dl_watchdog_remove(dl_watchdog *w, dl_renewal *r) {
  if (r == NULL) return;
  pthread_mutex_lock(&w->mu);
  unlink_r(w, r);
  /* A lost callback may still be running for r: it is handed r itself (kept
   * alive by its round's reference) and string copies, never r's borrowed
   * strings, so nothing here waits for it. */
  dl_wd_unref(r);
  pthread_mutex_unlock(&w->mu);
}

void dl_watchdog_check_all(dl_watchdog *w) {
  pthread_mutex_lock(&w->mu);
  /* Also with no hold yet: one recorded before the round starts (an
   * acquire answered with the confirmation of a subscription) is taken. */
  w->check_all = true;
  wake(w);
  pthread_mutex_unlock(&w->mu);
}

void dl_watchdog_extend(dl_watchdog *w, dl_renewal *r, int64_t valid_until,
                        bool renew) {
  if (r == NULL) return;
  pthread_mutex_lock(&w->mu);
  if (valid_until > r->valid_until) r->valid_until = valid_until;
  if (renew && r->fixed) { /* re-entered with the watchdog's lease */
    r->fixed = false;
    if (dl_wd_linked(w, r)) w->nfixed--;
  }
  pthread_mutex_unlock(&w->mu);
}

int64_t dl_watchdog_valid_until(dl_watchdog *w, dl_renewal *r) {
  pthread_mutex_lock(&w->mu);
  int64_t v = r->valid_until;
  pthread_mutex_unlock(&w->mu);
  return v;
}

void dl_watchdog_stall(dl_watchdog *w, bool stalled) {
  pthread_mutex_lock(&w->mu);
  w->stalled = stalled;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

/* With w->mu held: r is no longer renewed and counts as lost, `expired`
 * (its validity ran out) or taken (the server no longer has it). */
bool dl_wd_take_lost(dl_watchdog *w, dl_renewal *r, bool expired) {
  if (!dl_wd_linked(w, r) || r->releasing > 0) return false;
  unlink_r(w, r); /* the owner keeps its reference until remove */
  w->lost++;
  if (expired) w->lost_expired++;
  return true;
}

void dl_watchdog_release_begin(dl_watchdog *w, dl_renewal *r) {
  if (r == NULL) return;
  pthread_mutex_lock(&w->mu);
  r->releasing++;
  r->refs++; /* the release's: its hold may be replaced meanwhile */
  pthread_mutex_unlock(&w->mu);
}

void dl_watchdog_release_end(dl_watchdog *w, dl_renewal *r) {
  if (r == NULL) return;
  pthread_mutex_lock(&w->mu);
  r->releasing--;
  dl_wd_unref(r);
  pthread_mutex_unlock(&w->mu);
}

int dl_watchdog_new(dlock_client *c, int64_t lease_ms, dl_renewal_lost_fn fn,
                    void *ud, dl_loop *loop, dl_watchdog **out) {
  dl_watchdog *w = calloc(1, sizeof *w);
  if (w == NULL) return DLOCK_ENOMEM;
  w->c = c;
  w->lease_ms = lease_ms;
  w->fn = fn;
  w->ud = ud;
  w->next_expiry = INT64_MAX;
  w->loop = loop;
  pthread_mutex_init(&w->mu, NULL);
  dl_cond_init(&w->cv);
  if (loop) {
    dl_timer_init(&w->timer, dl_wd_tick, w);
    w->next = dl_now_ms() + dl_wd_period(w, false);
    w->joined = true; /* no thread */
    if (dl_timer_start(loop, &w->timer, w->next) == 0) {
      *out = w;
      return 0;
    }
  } else if (pthread_create(&w->thread, NULL, dl_wd_run, w) == 0) {
    *out = w;
    return 0;
  }
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  free(w);
  return DLOCK_ENOMEM;
}

void dl_watchdog_stop(dl_watchdog *w) {
  if (w == NULL) return;
  pthread_mutex_lock(&w->mu);
  bool joined = w->joined;
  w->stop = true;
  w->joined = true;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  if (w->loop) dl_timer_stop(w->loop, &w->timer);
  if (!joined) pthread_join(w->thread, NULL);
}

void dl_watchdog_free(dl_watchdog *w) {
  if (w == NULL) return;
  dl_watchdog_stop(w);
  /* Renewals still listed belong to lock handles not yet freed (a contract
   * breach): unlink them, their handles free them. */
  while (w->head) unlink_r(w, w->head);
  dl_wd_clear_pending(w);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  free(w);
}

void dl_watchdog_metrics(dl_watchdog *w, dlock_metrics *m) {
  pthread_mutex_lock(&w->mu);
  m->lost_expired = w->lost_expired;
  m->lost_taken = w->lost - w->lost_expired;
  m->renewals = w->renewed;
  m->failed_renewals = w->renew_failed;
  pthread_mutex_unlock(&w->mu);
}

void dl_watchdog_stats(dl_watchdog *w, dlock_client_stats *st) {
  pthread_mutex_lock(&w->mu);
  st->renewal_calls = w->round_trips;
  st->renewals = w->renewed;
  st->lost = w->lost;
  st->watched = w->count - w->nfixed;
  pthread_mutex_unlock(&w->mu);
}
