/* rounds.c: the watchdog's rounds and its schedule, on a thread or on an
 * event loop's timer (the table of renewals: watchdog.c). Every lease/3 it
 * extends the lease of every watchdog-held lock, in one call of the
 * backend's renewal per CHUNK holds (the Redis backend pipelines scripts
 * of 100). It never re-acquires: a hold the server no longer has is
 * reported lost and dropped.
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
#include "watchdog.h"

#include <stdlib.h>
#include <string.h>

#define CHUNK 1600 /* holds a round renews at a time */

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
    if (dl_wd_linked(w, all[j])) {
      k->snap[n++] = all[j];
      bytes += dl_wd_strings_len(w, all[j]);
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
    k->copies[2 * i + 1] = dl_wd_strings(w, r, at);
    at += dl_wd_strings_len(w, r);
  }
  pthread_mutex_unlock(&w->mu);
  k->items = calloc(n, sizeof *k->items); /* valid_until 0: none told */
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
      told = !k->check && dl_wd_linked(w, r) && DL_EVENTS_ON(w->c);
      /* A check extends nothing on the server, but the validity it
       * confirms (etcd: the session lease's, ZooKeeper: the session's) is
       * as good as a renewal's: a hold just confirmed is not reported
       * lost for the validity it had before. */
      if (k->items[i].valid_until > r->valid_until)
        r->valid_until = k->items[i].valid_until;
      int64_t left = k->items[i].valid_until - at;
      if (!k->check && left > 0 && (win == 0 || left < win)) win = left;
      renewed++;
    } else {
      /* Gone from the server after its validity here ran out: its lease
       * ended (the server's expiry event can come before our timer). */
      lost = dl_wd_take_lost(w, r, r->valid_until <= at);
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
    bool lost = r->valid_until <= now && dl_wd_take_lost(w, r, true);
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
    dl_wd_clear_pending(w);
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
  if (check) dl_wd_clear_pending(w);
  pthread_mutex_unlock(&w->mu);
  /* The oldest first (the list's head is the newest): a round slower than
   * its deadline (calls queued behind a burst of acquires) confirms the
   * holds nearest the end of their validity before it runs out. The
   * order they were added is the order of their validities, and a round
   * keeps it (its chunks go in turn); no sort, and nothing read under the
   * lock for it (100 000 holds: a reversal, not 1.7 million compares). */
  for (size_t a = 0, b = i; a + 1 < b; a++, b--) {
    dl_renewal *t = s[a];
    s[a] = s[b - 1];
    s[b - 1] = t;
  }
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
  for (size_t i = 0; i < n; i++) dl_wd_unref(snap[i]);
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
    if (due == NULL || !dl_wd_take_lost(w, due, true)) return;
    /* Its strings are borrowed: copy them before the owner may drop them. */
    char *copy = malloc(dl_wd_strings_len(w, due)), *owner = NULL;
    if (copy) owner = dl_wd_strings(w, due, copy);
    due->refs++;
    pthread_mutex_unlock(&w->mu);
    if (copy) w->fn(w->ud, due, copy, owner);
    free(copy);
    pthread_mutex_lock(&w->mu);
    dl_wd_unref(due);
  }
}

void *dl_wd_run(void *arg) {
  dl_watchdog *w = arg;
  pthread_mutex_lock(&w->mu);
  w->next = dl_now_ms() + dl_wd_period(w, false);
  while (!w->stop) {
    struct timespec ts;
    int64_t until = w->next < w->next_expiry ? w->next : w->next_expiry;
    dl_abstime(until, &ts);
    bool idle = w->npending == 0 && !w->check_all;
    if (w->stalled) pthread_cond_wait(&w->cv, &w->mu);
    else if (idle) pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    if (w->stop) break;
    if (w->stalled) continue;
    int64_t now = dl_now_ms();
    if (now >= w->next_expiry) expire_due(w, now);
    /* A renewal due goes before the checks (as dl_wd_tick). */
    if (now >= w->next) {
      pthread_mutex_unlock(&w->mu);
      int64_t started = dl_now_ms();
      int rc = dl_watchdog_run_once(w);
      pthread_mutex_lock(&w->mu);
      w->next = started + dl_wd_period(w, rc < 0);
    }
    if (w->stop) break;
    if (w->npending > 0 || w->check_all) {
      pthread_mutex_unlock(&w->mu);
      round_of(w, true);
      pthread_mutex_lock(&w->mu);
    }
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
  if (!lr->check) w->next = lr->started + dl_wd_period(w, lr->failed < 0);
  free(lr);
  if (!w->stop) dl_wd_tick(w);
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
void dl_wd_tick(void *ud) {
  dl_watchdog *w = ud;
  if (w->round || w->stop || w->stalled) return; /* the round ticks at its end */
  int64_t now = dl_now_ms();
  /* A renewal due goes before the checks: checks come with every hold's
   * watch (one a new hold in a burst of acquires), and back to back they
   * would keep the renewals from running until validities ran out. */
  if (now >= w->next) {
    if (round_start(w, false)) return;
    w->next = now + dl_wd_period(w, false);
  }
  pthread_mutex_lock(&w->mu);
  bool checks = w->npending > 0 || w->check_all;
  pthread_mutex_unlock(&w->mu);
  if (checks && round_start(w, true)) return;
  now = dl_now_ms();
  pthread_mutex_lock(&w->mu);
  if (now >= w->next_expiry) expire_due(w, now);
  pthread_mutex_unlock(&w->mu);
  pthread_mutex_lock(&w->mu);
  int64_t until = w->next < w->next_expiry ? w->next : w->next_expiry;
  pthread_mutex_unlock(&w->mu);
  dl_timer_start(w->loop, &w->timer, until);
}

void dl_wd_tick_soon(dl_watchdog *w) {
  if (w->round == NULL && !w->stop)
    dl_timer_start(w->loop, &w->timer, dl_now_ms());
}
