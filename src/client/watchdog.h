/* watchdog.h: the watchdog's insides, shared by its two files (private to
 * src/client): watchdog.c keeps the table of renewals (what is held, what
 * is to be checked) and the scheduler's life; rounds.c runs the rounds
 * that renew or check them through the backend, and drives the schedule
 * from a thread or from an event loop's timer. */
#ifndef DLOCK_CLIENT_WATCHDOG_H
#define DLOCK_CLIENT_WATCHDOG_H

#include "client.h"

#define FILTER 4096 /* counters of the keys held, by hash */
#define PENDING 32  /* keys to check, then: check every hold */

/* A hold's watchdog entry: the first member of its hold (holds.c), in the
 * hold's allocation, which the entry's last reference frees (free(r)): the
 * hold goes with dl_watchdog_remove, or with the last round that still
 * refers to it. Its owner tail is the hold's (dl_holds_tail). */
struct dl_renewal {
  dl_renewal *prev, *next; /* linked: prev, or the head */
  const char *key;     /* borrowed: valid until dl_watchdog_remove returns */
  int64_t valid_until; /* dl_now_ms() time */
  /* Small fields: 40 bytes on LP64, so that a hold with an owner tail of
   * up to 2 bytes is a 96-byte malloc chunk (holds.c). */
  int16_t releasing; /* releases in progress */
  int16_t refs;      /* 1 for its owner (until remove), +1 per round */
  uint16_t slot;     /* its key's counter in the filter */
  bool fixed;        /* a lease of its own: checked and timed, never renewed */
  bool permit;       /* a permit of a permit-expirable semaphore */
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
  size_t nfixed;       /* of which fixed */
  int64_t next_expiry; /* no hold's validity ends before this */
  uint32_t filter[FILTER];
  char *pending[PENDING]; /* keys to check */
  int npending;
  bool check_all; /* more keys than PENDING came */
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

/* ---- watchdog.c, for rounds.c ---- */
/* With w->mu held: whether r is in w's list (renewed, checked, timed). */
static inline bool dl_wd_linked(const dl_watchdog *w, const dl_renewal *r) {
  return r->prev != NULL || w->head == r;
}
/* The time between rounds; sooner after a failed one. */
int64_t dl_wd_period(const dl_watchdog *w, bool failed);
/* With w->mu held: drops a reference to r (frees it, and so its hold, at
 * the last). */
void dl_wd_unref(dl_renewal *r);
/* With w->mu held: forgets the keys to check. */
void dl_wd_clear_pending(dl_watchdog *w);
/* With w->mu held: the bytes dl_wd_strings writes for r. */
size_t dl_wd_strings_len(const dl_watchdog *w, const dl_renewal *r);
/* With w->mu held: writes r's key and then its owner "<client id>:<tail>",
 * each NUL-terminated, at `at` (copies that outlive the borrowed strings).
 * Returns the owner's copy. */
char *dl_wd_strings(const dl_watchdog *w, const dl_renewal *r, char *at);
/* With w->mu held: r is no longer renewed and counts as lost, `expired`
 * (its validity ran out) or taken (the server no longer has it). False:
 * it was unlinked already, or a release of it is in progress. */
bool dl_wd_take_lost(dl_watchdog *w, dl_renewal *r, bool expired);

/* ---- rounds.c, for watchdog.c ---- */
/* The thread's body (a blocking client's watchdog). */
void *dl_wd_run(void *arg);
/* The loop timer's callback (an event-loop client's watchdog; ud: w). */
void dl_wd_tick(void *ud);
/* With w->mu held, on the loop's thread: a tick as soon as no round is in
 * flight. */
void dl_wd_tick_soon(dl_watchdog *w);

#endif /* DLOCK_CLIENT_WATCHDOG_H */
