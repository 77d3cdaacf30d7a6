/* client.h: the client layer: a client and its backend (chosen by the
 * URL's scheme), owner ids and key names, the holds it knows of, and the
 * watchdog that renews and checks them. Sees the backend seam only, never
 * a backend's insides (but for the registry in client.c). */
#ifndef DLOCK_CLIENT_H
#define DLOCK_CLIENT_H

#include "../core/backend.h"

/* ---- watchdog.c: one renewal scheduler per client ---- */
typedef struct dl_watchdog dl_watchdog;
typedef struct dl_renewal dl_renewal;

/* Called (from the watchdog thread) for a renewal found lost: r (alive for
 * the call, possibly already removed) and copies of its key and owner. */
typedef void (*dl_renewal_lost_fn)(void *ud, dl_renewal *r, const char *key,
                                   const char *owner);

/* `fn(ud, ...)` is called for each renewal found lost: the server no longer
 * has the hold, or no renewal was confirmed before its validity ran out. */
/* With `loop` (an event-loop client) the watchdog has no thread: a timer
 * of the loop runs its schedule and its rounds go through the backend's
 * renew_async; every call is then made on the loop's thread. */
int dl_watchdog_new(dlock_client *c, int64_t lease_ms, dl_renewal_lost_fn fn,
                    void *ud, dl_loop *loop, dl_watchdog **out);
/* Stops the thread (no more rounds or reports); checks are still taken,
 * and dropped. Accepts NULL; may be called twice. */
void dl_watchdog_stop(dl_watchdog *w);
void dl_watchdog_free(dl_watchdog *w);
/* Registers the hold of key by the owner "<client id>:<tail>", valid until
 * `valid_until` (dl_now_ms() time) unless renewed: with `renew`, renewed
 * every lease/3; without (a fixed lease), reported lost the moment its
 * validity runs out before it is removed. Either way checked at once when
 * dl_watchdog_check names its key. `permit`: a permit of a
 * permit-expirable semaphore at key (dl_renew_item.permit). The strings are
 * borrowed: they must stay valid until dl_watchdog_remove(r) returns. Returns
 * NULL on ENOMEM. */
dl_renewal *dl_watchdog_add(dl_watchdog *w, const char *key, const char *tail,
                            int64_t valid_until, bool renew, bool permit);
/* A re-entry extended the lease: validity is at least `valid_until`; with
 * `renew` (the watchdog's lease) a fixed hold becomes renewed. */
void dl_watchdog_extend(dl_watchdog *w, dl_renewal *r, int64_t valid_until,
                        bool renew);
/* Someone says the key (len bytes, not NUL-terminated) may have been taken
 * away (a revocation, a keyspace event): the watchdog thread asks the
 * server about this client's holds on it at once, and reports lost the ones
 * it no longer has. Cheap for keys this client holds nothing on. Never
 * blocks on the server; any thread, also with the subscriber's lock held. */
void dl_watchdog_check(dl_watchdog *w, const char *key, size_t len);
/* The same for every hold (a revocation may have gone unheard), those
 * recorded before the check starts included. */
void dl_watchdog_check_all(dl_watchdog *w);
/* Until when (dl_now_ms() time) the last confirmed renewal keeps r valid. */
int64_t dl_watchdog_valid_until(dl_watchdog *w, dl_renewal *r);
/* Stops renewing; a renewal result arriving later is ignored (a lost
 * callback already running may still be called with r). Never waits; may
 * be called with the client's holds_mu held. Accepts NULL. */
void dl_watchdog_remove(dl_watchdog *w, dl_renewal *r);
/* Brackets a release: "gone" answers meanwhile are not losses. */
void dl_watchdog_release_begin(dl_watchdog *w, dl_renewal *r);
void dl_watchdog_release_end(dl_watchdog *w, dl_renewal *r);
/* Runs one renewal round now (tests). Returns the number of locks renewed,
 * or the first error of a round in which some renewal could not be sent or
 * answered. */
int dl_watchdog_run_once(dl_watchdog *w);
/* Fault injection (tests): a stalled watchdog runs no rounds, as if its
 * thread got no CPU, until un-stalled. */
void dl_watchdog_stall(dl_watchdog *w, bool stalled);
void dl_watchdog_stats(dl_watchdog *w, dlock_client_stats *st);
/* The watchdog's share of dlock_metrics: losses by cause, renewals. */
void dl_watchdog_metrics(dl_watchdog *w, dlock_metrics *m);

/* ---- holds.c: the client's own holds, guarded by c->holds_mu ---- */
#define DL_HOLD_BUCKETS 4096 /* fits the uint16_t bucket */
/* What a hold's dl_lost_fn is told: the hold was lost, or (only while the
 * client has an event hook, dlock_client_on_event) renewed. */
typedef struct dl_hold_note {
  bool renewed;
  uint64_t token;
  int64_t held_us; /* since its grant (dl_hold.granted_us); 0: not timed */
} dl_hold_note;
/* Tells the handle `via` that its hold by `owner` was lost, or renewed.
 * Called with no lock held; `via` stays alive for the call
 * (c->in_lost_callback). */
typedef void (*dl_lost_fn)(void *via, const char *owner,
                           const dl_hold_note *note);
typedef struct dl_hold {
  struct dl_hold *next;
  const char *key;     /* borrowed from the handle `via` */
  dl_renewal *renewal; /* its watchdog entry: renewed, or timed */
  void *via;           /* the handle whose lost callback reports it */
  dl_lost_fn lost_fn;  /* tells `via` (with no lock held) */
  uint64_t token;
  int64_t lease_ms;
  int64_t valid_until; /* dl_now_ms() time; the renewal's if later */
  /* dl_now_us() time of a lock's grant, for dlock_metrics' hold_seconds
   * (0: not timed: a permit, or counted already at its loss) */
  int64_t granted_us;
  int count;
  bool lost;
  bool permit; /* a permit of a permit-expirable semaphore */
  char tail[]; /* the owner id after "<client id>:" */
} dl_hold;

dl_hold *dl_hold_find(dlock_client *c, const char *key, const char *owner);
/* Until when (dl_now_ms() time) the hold is certainly valid: the send time
 * of the last acquire or renewal the server confirmed, plus the lease, less
 * a clock drift allowance. */
int64_t dl_hold_valid_until(dlock_client *c, const dl_hold *h);
dl_hold *dl_hold_add(dlock_client *c, const char *key, const char *owner);
/* Takes the hold out of the table and returns it, still allocated: after
 * unlocking holds_mu the caller passes it to dl_hold_bury() (a lost callback
 * in progress takes holds_mu, and removing the renewal waits for it; the
 * renewal borrows the hold's strings). */
dl_hold *dl_hold_drop(dlock_client *c, dl_hold *h);
/* Stops the hold's renewal and frees it. Accepts NULL. Not under holds_mu. */
void dl_hold_bury(dlock_client *c, dl_hold *h);
/* Drops every hold reported through handle `via` (they stop being renewed
 * and expire after their lease), first waiting out a lost callback running
 * for it; for a handle being freed. `count` (may be NULL: scan them all)
 * is how many there are, decremented as they go. Not under holds_mu. */
void dl_holds_drop_via(dlock_client *c, const void *via, int *count);

/* The watchdog's lost callback for the client's holds (ud: the client):
 * marks the hold lost and tells the handle that took it. */
void dl_holds_on_lost(void *ud, dl_renewal *r, const char *key,
                      const char *owner);
/* The watchdog renewed r (key and owner as for dl_holds_on_lost): tells
 * the handle that took the hold, for its DLOCK_EVENT_RENEWED. Call it only
 * while DL_EVENTS_ON(c). */
void dl_holds_on_renewed(dlock_client *c, dl_renewal *r, const char *key,
                         const char *owner);

/* ---- metrics.c: dlock_metrics' histograms ---- */
/* Per bucket (not cumulative), relaxed atomics: adding is lock-free and
 * nothing waits on them; read one by one (not a snapshot). */
typedef struct dl_hist {
  atomic_uint_fast64_t n[DLOCK_METRICS_BUCKETS];
  atomic_uint_fast64_t sum_us;
} dl_hist;
/* Counts one duration of `us` microseconds (negative: 0). Any thread. */
void dl_hist_add(dl_hist *h, int64_t us);
/* Whether c has an event hook: the one branch an unset hook costs. */
#define DL_EVENTS_ON(c) atomic_load_explicit(&(c)->events, memory_order_relaxed)
/* Reports ev to c's event hook, if any: fills its size, backend and
 * clocks, and calls the hook with no lock held. Any thread. */
void dl_event_emit(dlock_client *c, dlock_event *ev);

/* ---- transfer.c: the delayed queues' transfer in the background ---- */
typedef struct dl_transfers dl_transfers;
/* A delayed handle on the queue at `key` came (ref) or went (unref): the
 * first starts a thread that moves the queue's due values (a blocking
 * client only; an event-loop client's polls move them), the last stops
 * it (unref waits for it: at most the move in flight). ref returns 0 or
 * DLOCK_ENOMEM. Any thread. */
int dl_transfer_ref(dlock_client *c, const char *key);
void dl_transfer_unref(dlock_client *c, const char *key);
/* A delayed offer to `key` through this client: its transfer looks again. */
void dl_transfer_kick(dlock_client *c, const char *key);
/* Stops every transfer (the client closes; before its backend goes). */
void dl_transfers_free(dlock_client *c);

/* ---- client.c ---- */
struct dlock_client {
  dl_err_tag err; /* first: tags its detail messages (core/error.c) */
  size_t id_len;
  pthread_mutex_t holds_mu;
  pthread_cond_t holds_cv; /* a lost callback finished */
  void *in_lost_callback;  /* whose callback runs now */
  dl_hold *holds[DL_HOLD_BUCKETS];
  char *id;
  char *key_prefix;
  size_t prefix_len;
  int64_t watchdog_timeout_ms;
  char *url_redacted;
  char *revoke_channel; /* "<key prefix>dlock_revoke" (docs/WIRE.md) */
  dl_backend_env env;   /* what the backend borrows of the client */
  dl_backend *backend;
  dl_watchdog *watchdog;
  bool detect_deadlocks; /* dlock_client_options' (dl_acquire.detect) */
  dl_loop *loop; /* an event-loop client's (dlock_client_open_async) */
  atomic_uint_fast64_t handles; /* lock handles made on the loop */
  /* dlock_metrics' acquisitions (src/locks/lock.c dl_acq_end); relaxed */
  atomic_uint_fast64_t acquired, contended;
  atomic_uint_fast64_t reconnects; /* env.reconnects' counter */
  /* dlock_metrics' histograms: wait (dl_acq_end), hold (its grant,
   * dl_hold.granted_us, to the release or the loss) */
  dl_hist wait_hist, hold_hist;
  /* The event-loop operations that wait (acquires, polls), with the
   * handle each waits through: a handle's free cancels its own (the
   * loop's thread alone; src/locks/async.c). */
  struct dlock_op *waits;
  atomic_int closing;
  dl_transfers *transfers; /* made at the first delayed handle */
  /* dlock_client_on_event's, guarded by holds_mu; `events` (relaxed)
   * says whether one is set (DL_EVENTS_ON). */
  atomic_bool events;
  dlock_event_cb event_cb;
  void *event_ud;
  /* dlock_client_on_state's, guarded by holds_mu. */
  dlock_state_cb state_cb;
  void *state_ud;
};

/* dlock_client_open with the backend made by `make`, NULL: the one the
 * URL's scheme names (the reply fuzzer plugs in one fed from its input). */
int dl_client_open_with(const dlock_client_options *opts,
                        dl_backend_factory make, dl_loop *loop,
                        dlock_client **out);

/* "<prefix><fmt...>" with the client's key prefix. Caller frees. */
char *dl_key(const dlock_client *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Owner id for thread `tid`, or for the explicit owner string. */
int dl_owner_id(const dlock_client *c, const char *explicit_owner, char *buf,
                size_t len);

#endif /* DLOCK_CLIENT_H */
