/* watchdog.c: one renewal scheduler per client. Every lease/3 it extends the
 * lease of every watchdog-held lock, in one call of the backend's renewal
 * per CHUNK holds (the Redis backend pipelines scripts of 100). It never
 * re-acquires: a hold the server no longer has is reported lost and dropped.
 *
 * Ordering of renew vs release (Redisson #7272 is a renewal outliving its
 * unlock): a renewal can only extend a hash field that still exists, so a
 * renewal sent after a release finds nothing to extend. The other race, a
 * renewal that the server ran just after our own release and that therefore
 * answers "gone", must not be taken for a loss: a release in progress marks
 * the renewal (`releasing`), and such answers are ignored..
 *
 * Validity: each renewal remembers until when the last confirmed renewal
 * (or the acquire) keeps it valid, counted from when the request was sent,
 * on the monotonic clock. A round waits for replies no longer than the
 * earliest validity in it, and a hold whose validity runs out before a
 * renewal is confirmed (server paused or unreachable, replies delayed, this
 * thread starved) is reported lost: the client never goes on believing in a
 * lease that may have expired on the server.
 *
 * Fixed leases: a hold with a lease of its own is listed too, never renewed,
 * and reported lost the moment its validity runs out unreleased (a timer,
 * not the next call), as is a renewed hold whose renewals failed until its
 * validity ran out (when dlock_lock_is_lost turns 1, not at a next try).
 *
 * Checks: a revocation (a force release tells the holder's client on the
 * revocation channel) or a keyspace event (del, expired) names a key; every
 * hold on it is then checked at once, without extending anything, and one
 * the server no longer has is reported lost. So a hold taken away is
 * noticed within a round trip, not at the next renewal. A per-key counter
 * filter drops the events of keys this client holds nothing on. */
#include "client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK 1600 /* holds a round renews at a time */
#define FILTER 4096        /* counters of the keys held, by hash */
#define PENDING 32         /* keys to check, then: check every hold */

struct dl_renewal {
  dl_renewal *prev, *next;
  const char *key;  /* borrowed: valid until dl_watchdog_remove returns */
  const char *tail; /* the owner id after "<client id>:", borrowed too */
  int64_t valid_until; /* dl_now_ms() time */
  /* Small fields: a held lock's entry is a 48-byte allocation. */
  int16_t releasing; /* releases in progress */
  int16_t refs;      /* 1 for its owner (until remove), +1 per round */
  bool linked;
  bool fixed; /* a lease of its own: checked and timed, never renewed */
  bool permit; /* a permit of a permit-expirable semaphore */
  uint16_t slot; /* its key's counter in the filter */
};

struct dl_watchdog {
  dlock_client *c;
  int64_t lease_ms;
  dl_renewal_lost_fn fn;
  void *ud;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  bool stop;
  bool joined;  /* the thread was joined (dl_watchdog_stop) */
  bool stalled; /* fault injection */
  dl_renewal *head;
  size_t count;
  size_t nfixed;         /* of which fixed */
  int64_t next_expiry;   /* no hold's validity ends before this */
  uint32_t filter[FILTER];
  char *pending[PENDING]; /* keys to check */
  int npending;
  bool check_all;         /* more keys than PENDING came */
  uint64_t round_trips;
  int64_t window; /* how long a renewal keeps a hold valid (0: unknown) */
  uint64_t renewed;
  uint64_t lost;
  uint64_t lost_expired; /* of lost: validity ran out (else: the server) */
  uint64_t renew_failed; /* holds whose renewal got no answer */
  /* On an event loop (an event-loop client): no thread; a timer runs the
   * same schedule and rounds go out through the backend's renew_async. */
  dl_loop *loop;
  dl_timer timer;
  struct loop_round *round; /* in flight, or NULL */
  int64_t next;             /* the next renewal round */
};

static void tick_soon(dl_watchdog *w);
/* The time between rounds: a third of the lease, or of the window where
 * that is clearly shorter (a ZooKeeper session shorter than the lease):
 * no validity runs out between rounds (it would be reported lost). After
 * a failed round, sooner: two thirds of the lease are left, and a short
 * outage should not cost the lock. */
static int64_t period_of(const dl_watchdog *w, bool failed) {
  int64_t p = w->lease_ms / 3;
  if (w->window > 0 && w->window < w->lease_ms * 9 / 10) p = w->window / 3;
  if (failed) p = p / 5 < 1000 ? p / 5 : 1000;
  return p < 1 ? 1 : p;
}

/* With w->mu held: something for the watchdog to do now or sooner. */
static void wake(dl_watchdog *w) {
  if (w->loop) tick_soon(w);
  else pthread_cond_signal(&w->cv);
}

static void unref(dl_renewal *r) {
  if (--r->refs == 0) free(r);
}

static uint16_t slot_of(const char *key) {
  return (uint16_t)(dl_hash(DL_HASH_SEED, key) % FILTER);
}

/* With w->mu held: forgets the keys to check. */
static void clear_pending(dl_watchdog *w) {
  for (int i = 0; i < w->npending; i++) free(w->pending[i]);
  w->npending = 0;
  w->check_all = false;
}

/* With w->mu held: the bytes hold_strings writes for r. */
static size_t hold_strings_len(const dl_watchdog *w, const dl_renewal *r) {
  return strlen(r->key) + 1 + w->c->id_len + 1 + strlen(r->tail) + 1;
}

/* With w->mu held: writes r's key and then its owner "<client id>:<tail>",
 * each NUL-terminated, at `at` (copies that outlive the borrowed strings).
 * Returns the owner's copy. */
static char *hold_strings(const dl_watchdog *w, const dl_renewal *r,
                          char *at) {
  size_t kl = strlen(r->key) + 1, idl = w->c->id_len;
  memcpy(at, r->key, kl);
  char *owner = at + kl;
  memcpy(owner, w->c->id, idl);
  owner[idl] = ':';
  memcpy(owner + idl + 1, r->tail, strlen(r->tail) + 1);
  return owner;
}

static void unlink_r(dl_watchdog *w, dl_renewal *r) {
  if (!r->linked) return;
  w->filter[r->slot]--;
  if (r->fixed) w->nfixed--;
  if (r->prev) r->prev->next = r->next;
  else w->head = r->next;
  if (r->next) r->next->prev = r->prev;
  r->prev = r->next = NULL;
  r->linked = false;
  w->count--;
}

dl_renewal *dl_watchdog_add(dl_watchdog *w, const char *key,
                            const char *tail, int64_t valid_until,
                            bool renew, bool permit) {
  dl_renewal *r = calloc(1, sizeof *r);
  if (r == NULL) return NULL;
  r->key = key;
  r->tail = tail;
  r->valid_until = valid_until;
  r->refs = 1;
  r->fixed = !renew;
  r->permit = permit;
  r->slot = slot_of(key);
  pthread_mutex_lock(&w->mu);
  r->next = w->head;
  if (w->head) w->head->prev = r;
  w->head = r;
  r->linked = true;
  w->count++;
  w->filter[r->slot]++;
  if (r->fixed) w->nfixed++;
  int64_t left = valid_until - dl_now_ms(); /* short: renewed sooner */
  if (renew && left > 0 && left < w->lease_ms * 9 / 10 &&
      (w->window == 0 || left < w->window)) {
    w->window = left;
    int64_t soon = dl_now_ms() + period_of(w, false);
    if (w->next > soon) w->next = soon;
    wake(w);
  }
  /* The thread sleeps until the earliest end it knows of. */
  if (valid_until < w->next_expiry) {
    w->next_expiry = valid_until;
    wake(w);
  }
  pthread_mutex_unlock(&w->mu);
  return r;
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
  unref(r);
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
    if (r->linked) w->nfixed--;
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
static bool take_lost(dl_watchdog *w, dl_renewal *r, bool expired) {
  if (!r->linked || r->releasing > 0) return false;
  unlink_r(w, r); /* the owner keeps its reference until remove */
  w->lost++;
  if (expired) w->lost_expired++;
  return true;
}

void dl_watchdog_release_begin(dl_watchdog *w, dl_renewal *r) {
  if (r == NULL) return;
  pthread_mutex_lock(&w->mu);
  r->releasing++;
  pthread_mutex_unlock(&w->mu);
}

void dl_watchdog_release_end(dl_watchdog *w, dl_renewal *r) {
  if (r == NULL) return;
  pthread_mutex_lock(&w->mu);
  r->releasing--;
  pthread_mutex_unlock(&w->mu);
}

/* One call's worth of a round: the holds still linked, their strings
 * copied, the items for the backend. */
typedef struct chunk {
  size_t n;
  dl_renewal **snap;
  char *arena;
  char **copies;
  dl_renew_item *items;
  int64_t earliest; /* the earliest validity among them */
  bool check;
} chunk;

static void chunk_free(chunk *k) {
  free(k->items);
  free(k->snap);
  free(k->arena);
  free(k->copies);
}

/* Prepares the holds of all[0..total) that are still linked. Returns 0
 * (k->n may be 0: all released since) or DLOCK_ENOMEM. */
static int chunk_prepare(dl_watchdog *w, dl_renewal **all, size_t total,
                         bool check, chunk *k) {
  memset(k, 0, sizeof *k);
  k->check = check;
  pthread_mutex_lock(&w->mu);
  /* The strings are borrowed from their holders, who may drop them once
   * their renewal is removed: copy them while the list is locked, for the
   * holds still in it. */
  size_t n = 0, bytes = 0;
  k->snap = malloc((total ? total : 1) * sizeof *k->snap);
  for (size_t j = 0; k->snap && j < total; j++)
    if (all[j]->linked) {
      k->snap[n++] = all[j];
      bytes += hold_strings_len(w, all[j]);
    }
  k->arena = malloc(bytes ? bytes : 1);
  k->copies = malloc(2 * (n ? n : 1) * sizeof *k->copies);
  bool oom = k->snap == NULL || k->arena == NULL || k->copies == NULL;
  if (oom || n == 0) { /* out of memory, or all released since */
    pthread_mutex_unlock(&w->mu);
    return oom ? DLOCK_ENOMEM : 0;
  }
  char *at = k->arena;
  k->earliest = INT64_MAX;
  for (size_t i = 0; i < n; i++) {
    dl_renewal *r = k->snap[i];
    if (r->valid_until < k->earliest) k->earliest = r->valid_until;
    k->copies[2 * i] = at;
    k->copies[2 * i + 1] = hold_strings(w, r, at);
    at += hold_strings_len(w, r);
  }
  pthread_mutex_unlock(&w->mu);
  k->items = malloc(n * sizeof *k->items);
  if (k->items == NULL) return DLOCK_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    k->items[i].key = k->copies[2 * i];
    k->items[i].owner = k->copies[2 * i + 1];
    k->items[i].permit = k->snap[i]->permit;
  }
  k->n = n;
  return 0;
}

/* Takes in the backend's answers (failed: its result, calls: its
 * requests). Returns how many were renewed (still held), or a negative
 * code if a call failed. */
static int chunk_apply(dl_watchdog *w, chunk *k, int failed, int calls) {
  int renewed = 0;
  int64_t win = 0, at = dl_now_ms(); /* the window: the shortest */
  pthread_mutex_lock(&w->mu);
  w->round_trips += (uint64_t)calls;
  pthread_mutex_unlock(&w->mu);
  for (size_t i = 0; i < k->n; i++) {
    dl_renewal *r = k->snap[i];
    if (k->items[i].result < 0) {
      if (!k->check) {
        pthread_mutex_lock(&w->mu);
        w->renew_failed++;
        pthread_mutex_unlock(&w->mu);
      }
      continue;
    }
    pthread_mutex_lock(&w->mu);
    bool lost = false, told = false; /* told: DLOCK_EVENT_RENEWED */
    if (k->items[i].result == 1) {
      told = !k->check && r->linked && DL_EVENTS_ON(w->c);
      if (!k->check && k->items[i].valid_until > r->valid_until)
        r->valid_until = k->items[i].valid_until;
      int64_t left = k->items[i].valid_until - at;
      if (!k->check && left > 0 && (win == 0 || left < win)) win = left;
      renewed++;
    } else {
      lost = take_lost(w, r, false);
    }
    pthread_mutex_unlock(&w->mu);
    if (lost) w->fn(w->ud, r, k->copies[2 * i], k->copies[2 * i + 1]);
    if (told)
      dl_holds_on_renewed(w->c, r, k->copies[2 * i], k->copies[2 * i + 1]);
  }
  /* Whatever was not confirmed in time may have expired on the server. */
  int64_t now = dl_now_ms();
  for (size_t i = 0; i < k->n; i++) {
    dl_renewal *r = k->snap[i];
    pthread_mutex_lock(&w->mu);
    bool lost = r->valid_until <= now && take_lost(w, r, true);
    pthread_mutex_unlock(&w->mu);
    if (lost) w->fn(w->ud, r, k->copies[2 * i], k->copies[2 * i + 1]);
  }
  pthread_mutex_lock(&w->mu);
  if (!k->check) w->renewed += (uint64_t)renewed;
  if (win > 0) w->window = win;
  pthread_mutex_unlock(&w->mu);
  return failed < 0 ? failed : renewed;
}

/* A chunk's renewal deadline: its earliest validity, as a reply after it
 * would be too late for that hold anyway. But a validity that already ran
 * out (this process was stopped, or the watchdog starved) is no deadline:
 * one in the past fails at once and, with it, every request on the
 * connection (a release among them, told "no reply in time" instead of
 * the loss); that chunk gets one command timeout. */
static int64_t renew_deadline(const dl_watchdog *w, const chunk *k) {
  int64_t now = dl_now_ms();
  return k->earliest > now ? k->earliest : now + w->c->env.command_timeout_ms;
}

/* Renews the holds of all[0..total) that are still linked, in one call of
 * the backend; or with `check`, asks whether the server still has them,
 * extending nothing. Returns how many were renewed (still held), or a
 * negative code if a call failed. */
static int renew_chunk(dl_watchdog *w, dl_renewal **all, size_t total,
                       bool check) {
  chunk k;
  int rc = chunk_prepare(w, all, total, check, &k);
  if (rc == 0 && k.n > 0) {
    /* Items without an answer are tried again next round: the lease
     * still runs. */
    dl_backend *b = w->c->backend;
    int calls = 0;
    int failed =
        b->ops->renew(b, renew_deadline(w, &k), check ? 0 : w->lease_ms,
                      (int)k.n, k.items, &calls);
    rc = chunk_apply(w, &k, failed, calls);
  }
  chunk_free(&k);
  return rc;
}

/* With w->mu held: whether a check round takes r (its key is pending). */
static bool wanted(dl_watchdog *w, const dl_renewal *r) {
  if (w->check_all) return true;
  for (int i = 0; i < w->npending; i++)
    if (strcmp(w->pending[i], r->key) == 0) return true;
  return false;
}

/* Takes a reference to every hold of a round: the renewed holds, or with
 * `check` the holds on the pending keys (which it clears). Returns 0 and
 * *snap (NULL when *n is 0), or DLOCK_ENOMEM. */
static int round_snapshot(dl_watchdog *w, bool check, dl_renewal ***snap,
                          size_t *n) {
  *snap = NULL;
  pthread_mutex_lock(&w->mu);
  size_t m = check ? w->count : w->count - w->nfixed;
  *n = 0;
  if (m == 0) {
    clear_pending(w);
    pthread_mutex_unlock(&w->mu);
    return 0;
  }
  /* A round holds a reference to every entry (8 bytes per hold) and works
   * through them CHUNK at a time, so that the copies, commands and replies
   * it needs at once stay a bounded size however many locks are held. */
  dl_renewal **s = malloc(m * sizeof *s);
  if (s == NULL) {
    pthread_mutex_unlock(&w->mu);
    return DLOCK_ENOMEM;
  }
  size_t i = 0;
  for (dl_renewal *r = w->head; r && i < m; r = r->next) {
    if (check ? !wanted(w, r) : r->fixed) continue;
    r->refs++;
    s[i++] = r;
  }
  if (check) clear_pending(w);
  pthread_mutex_unlock(&w->mu);
  if (i == 0) { /* a check whose keys name no hold any more */
    free(s);
    return 0;
  }
  *snap = s;
  *n = i;
  return 0;
}

static void round_release(dl_watchdog *w, dl_renewal **snap, size_t n) {
  pthread_mutex_lock(&w->mu);
  for (size_t i = 0; i < n; i++) unref(snap[i]);
  pthread_mutex_unlock(&w->mu);
  free(snap);
}

/* A renewal round over the renewed holds, or with `check` a check of the
 * holds on the pending keys (which it clears). */
static int round_of(dl_watchdog *w, bool check) {
  dl_renewal **snap;
  size_t n;
  int rc = round_snapshot(w, check, &snap, &n);
  if (rc != 0 || n == 0) return rc;
  int renewed = 0, failed = 0;
  for (size_t lo = 0; lo < n; lo += CHUNK) {
    rc = renew_chunk(w, snap + lo, n - lo < CHUNK ? n - lo : CHUNK, check);
    if (rc < 0 && failed == 0) failed = rc;
    if (rc > 0) renewed += rc;
  }
  round_release(w, snap, n);
  return failed < 0 ? failed : renewed;
}

int dl_watchdog_run_once(dl_watchdog *w) { return round_of(w, false); }

/* With w->mu held, which it unlocks while it reports: reports lost every
 * hold (fixed or renewed) whose validity ran out by `now`; the next end. */
static void expire_due(dl_watchdog *w, int64_t now) {
  w->next_expiry = INT64_MAX;
  for (;;) {
    dl_renewal *due = NULL;
    for (dl_renewal *r = w->head; r; r = r->next) {
      if (r->releasing > 0) continue;
      if (r->valid_until <= now && due == NULL) due = r;
      else if (r->valid_until < w->next_expiry) w->next_expiry = r->valid_until;
    }
    if (due == NULL || !take_lost(w, due, true)) return;
    /* Its strings are borrowed: copy them before the owner may drop them. */
    char *copy = malloc(hold_strings_len(w, due)), *owner = NULL;
    if (copy) owner = hold_strings(w, due, copy);
    due->refs++;
    pthread_mutex_unlock(&w->mu);
    if (copy) w->fn(w->ud, due, copy, owner);
    free(copy);
    pthread_mutex_lock(&w->mu);
    unref(due);
  }
}

static void *run(void *arg) {
  dl_watchdog *w = arg;
  pthread_mutex_lock(&w->mu);
  w->next = dl_now_ms() + period_of(w, false);
  while (!w->stop) {
    struct timespec ts;
    int64_t until = w->next < w->next_expiry ? w->next : w->next_expiry;
    dl_abstime(until, &ts);
    bool idle = w->npending == 0 && !w->check_all;
    if (w->stalled) pthread_cond_wait(&w->cv, &w->mu);
    else if (idle) pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    if (w->stop) break;
    if (w->stalled) continue;
    if (w->npending > 0 || w->check_all) {
      pthread_mutex_unlock(&w->mu);
      round_of(w, true);
      pthread_mutex_lock(&w->mu);
    }
    int64_t now = dl_now_ms();
    if (now >= w->next_expiry) expire_due(w, now);
    if (now < w->next) continue;
    pthread_mutex_unlock(&w->mu);
    int64_t started = dl_now_ms();
    int rc = dl_watchdog_run_once(w);
    pthread_mutex_lock(&w->mu);
    w->next = started + period_of(w, rc < 0);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

/* ---- on an event loop: the same schedule, rounds through renew_async ---- */

typedef struct loop_round {
  dl_watchdog *w;
  bool check;
  dl_renewal **snap;
  size_t n, lo;
  chunk k;
  int calls, failed;
  int64_t started;
  dl_async *op;
} loop_round;

static void tick(void *ud);
static void round_next(loop_round *lr);

static void round_done(void *ud, int failed) {
  loop_round *lr = ud;
  lr->op = NULL;
  int rc = lr->w->stop ? 0 : chunk_apply(lr->w, &lr->k, failed, lr->calls);
  chunk_free(&lr->k);
  if (rc < 0 && lr->failed == 0) lr->failed = rc;
  lr->lo += CHUNK;
  round_next(lr);
}

/* Sends the round's next chunk, or ends the round and schedules. */
static void round_next(loop_round *lr) {
  dl_watchdog *w = lr->w;
  while (lr->lo < lr->n && !w->stop) {
    size_t m = lr->n - lr->lo < CHUNK ? lr->n - lr->lo : CHUNK;
    int rc = chunk_prepare(w, lr->snap + lr->lo, m, lr->check, &lr->k);
    if (rc == 0 && lr->k.n > 0) {
      dl_backend *b = w->c->backend;
      rc = b->ops->renew_async(
          b, renew_deadline(w, &lr->k), lr->check ? 0 : w->lease_ms,
          (int)lr->k.n, lr->k.items, &lr->calls, round_done, lr, &lr->op);
      if (rc == 0) return; /* goes on in round_done */
    }
    chunk_free(&lr->k);
    if (rc < 0 && lr->failed == 0) lr->failed = rc;
    lr->lo += CHUNK;
  }
  round_release(w, lr->snap, lr->n);
  w->round = NULL;
  if (!lr->check) w->next = lr->started + period_of(w, lr->failed < 0);
  free(lr);
  if (!w->stop) tick(w);
}

/* Starts a round; false when there is nothing to send. */
static bool round_start(dl_watchdog *w, bool check) {
  loop_round *lr = calloc(1, sizeof *lr);
  if (lr == NULL) return false;
  lr->w = w;
  lr->check = check;
  lr->started = dl_now_ms();
  if (round_snapshot(w, check, &lr->snap, &lr->n) != 0 || lr->n == 0) {
    free(lr);
    return false;
  }
  w->round = lr;
  round_next(lr);
  return true;
}

/* The thread's loop (run), one pass at a time, from the loop's timer. */
static void tick(void *ud) {
  dl_watchdog *w = ud;
  if (w->round || w->stop || w->stalled) return; /* the round ticks at its end */
  pthread_mutex_lock(&w->mu);
  bool checks = w->npending > 0 || w->check_all;
  pthread_mutex_unlock(&w->mu);
  if (checks && round_start(w, true)) return;
  int64_t now = dl_now_ms();
  pthread_mutex_lock(&w->mu);
  if (now >= w->next_expiry) expire_due(w, now);
  pthread_mutex_unlock(&w->mu);
  if (now >= w->next) {
    if (round_start(w, false)) return;
    w->next = now + period_of(w, false);
  }
  pthread_mutex_lock(&w->mu);
  int64_t until = w->next < w->next_expiry ? w->next : w->next_expiry;
  pthread_mutex_unlock(&w->mu);
  dl_timer_start(w->loop, &w->timer, until);
}

static void tick_soon(dl_watchdog *w) {
  if (w->round == NULL && !w->stop)
    dl_timer_start(w->loop, &w->timer, dl_now_ms());
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
    dl_timer_init(&w->timer, tick, w);
    w->next = dl_now_ms() + period_of(w, false);
    w->joined = true; /* no thread */
    if (dl_timer_start(loop, &w->timer, w->next) == 0) {
      *out = w;
      return 0;
    }
  } else if (pthread_create(&w->thread, NULL, run, w) == 0) {
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
  clear_pending(w);
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
