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
/* Registers r, the watchdog entry of a new hold (its first member, made
 * with it: holds.c) of key by the owner "<client id>:<tail>" (the tail:
 * dl_holds_tail(r)), valid until `valid_until` (dl_now_ms() time) unless
 * renewed: with `renew`, renewed every lease/3; without (a fixed lease),
 * reported lost the moment its validity runs out before it is removed.
 * Either way checked at once when dl_watchdog_check names its key.
 * `permit`: a permit of a permit-expirable semaphore at key
 * (dl_renew_item.permit). The key and the tail are borrowed: they must stay
 * valid until dl_watchdog_remove(r) returns. From then on r is the
 * watchdog's: the last reference to it (that call, or the round in flight
 * that still refers to it) frees it, and so its hold. */
void dl_watchdog_add(dl_watchdog *w, dl_renewal *r, const char *key,
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
 * callback already running may still be called with r). Drops the owner's
 * reference to r: r and its hold may be freed on return. Never waits; may
 * be called with the client's holds_mu held. Accepts NULL. */
void dl_watchdog_remove(dl_watchdog *w, dl_renewal *r);
/* Brackets a release: "gone" answers meanwhile are not losses. Begin
 * takes a reference on r and end drops it (r may be freed then), so that
 * the entry outlives a hold replaced while its release is under way. */
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

/* ---- holds.c: the client's own holds, per (key, owner) ----
 * Every lock kind records, looks up and forgets its holds through these
 * calls, which take the client's holds lock (holds_mu) inside: no caller
 * takes it. A hold's key is borrowed from the handle that took it, until
 * the handle's holds are dropped (dl_holder_drop). */
#define DL_HOLD_BUCKETS 4096 /* fits the uint16_t bucket */
typedef struct dl_hold dl_hold; /* holds.c's own */

/* A lost callback of the public API (dlock_lost_cb, dlock_permit_lost_cb),
 * kept as this type and cast back to its own by the handle's dl_lost_fn. */
typedef void (*dl_user_fn)(void);
typedef struct dl_holder dl_holder;
/* What a hold's dl_lost_fn is told: the hold was lost, or (only while the
 * client has an event hook, dlock_client_on_event) renewed. */
typedef struct dl_hold_note {
  bool renewed;
  uint64_t token;
  int64_t held_us; /* since its grant (dl_hold_grant.granted_us); 0: not
                      timed */
} dl_hold_note;
/* Tells the handle of `hd` that its hold by `owner` was lost, or renewed,
 * with the user's callback and ud as they were set (cb may be NULL).
 * Called from the watchdog with no lock held; the handle stays alive for
 * the call (dl_holder_drop waits for it). */
typedef void (*dl_lost_fn)(dl_holder *hd, const char *owner, dl_user_fn cb,
                           void *ud, const dl_hold_note *note);

/* What the client keeps for a handle through which holds are taken (a
 * lock, a permit-expirable semaphore, a queue's reliable consumer): part
 * of the handle, zero-initialised (no callback, no description, no holds),
 * its fields read and set only through the calls below (under holds_mu),
 * but lost_fn: set by the handle's maker before its first hold, and never
 * changed. */
struct dl_holder {
  dl_user_fn cb; /* the user's lost callback, or NULL */
  void *ud;
  char *info; /* a lock's holder description, or NULL */
  /* Tells the handle its holds' losses and renewals (NULL: a loss is only
   * marked): here, not in each hold, to keep a held lock small
   * (docs/PERFORMANCE.md, memory per held lock). */
  dl_lost_fn lost_fn;
  int nholds; /* holds recorded through this holder */
};

/* Sets the lost callback (any thread). */
void dl_holder_on_lost(dlock_client *c, dl_holder *hd, dl_user_fn cb, void *ud);
/* Sets the description to `info` (taken over; NULL: none), freeing the
 * one before. */
void dl_holder_set_info(dlock_client *c, dl_holder *hd, char *info);
/* For a handle being freed: drops every hold recorded through hd (they
 * stop being renewed and expire after their lease), first waiting out a
 * lost callback running for it, and frees its description. */
void dl_holder_drop(dlock_client *c, dl_holder *hd);

/* How dl_holds_record treats a hold of the same (key, owner) still known
 * (a hold reported lost is always replaced by a new one). */
typedef enum dl_hold_how {
  DL_HOLD_NEW,     /* replaced by a new hold (the server's first grant) */
  DL_HOLD_REENTER, /* counted once more, its lease and validity updated */
  DL_HOLD_ENSURE   /* left as it is */
} dl_hold_how;
typedef struct dl_hold_grant {
  const char *key;   /* borrowed (see above) */
  const char *owner; /* "<client id>:<tail>" */
  dl_holder *holder; /* NULL: none (a loss is only marked) */
  dl_hold_how how;
  uint64_t token; /* a new hold's fencing token (0: none) */
  int64_t lease_ms;
  int64_t valid_until; /* dl_now_ms() time */
  /* A new hold's grant, dl_now_us() time, for dlock_metrics' hold_seconds
   * (0: not timed). */
  int64_t granted_us;
  bool renew;  /* the watchdog's lease: renewed (else timed) */
  bool permit; /* dl_renew_item.permit */
} dl_hold_grant;
/* Records a grant, and lists the hold with the watchdog (renewed or timed)
 * or extends its listing. Returns 0 and the hold's token in *token (may be
 * NULL), or DLOCK_ENOMEM: nothing recorded, or a hold recorded that the
 * watchdog does not list: the caller gives the grant back and forgets it. */
int dl_holds_record(dlock_client *c, const dl_hold_grant *g, uint64_t *token);

/* A copy of what the client knows of a hold. */
typedef struct dl_hold_view {
  uint64_t token;
  int64_t lease_ms;
  int count;
  bool lost; /* reported lost */
} dl_hold_view;
/* Whether c has a hold of key by owner; with v (may be NULL), a copy. */
bool dl_holds_get(dlock_client *c, const char *key, const char *owner,
                  dl_hold_view *v);
/* The count of the live hold of key by owner: 0 if none or reported lost
 * (dl_backend_env.hold_count; c: the client). */
int dl_holds_count(void *c, const char *key, const char *owner);
/* The hold's validity: 0 and the ms left in *left, DLOCK_ENOTOWNER (no
 * such hold) or DLOCK_ELOST (reported lost, or its validity ran out). The
 * validity is the send time of the last acquire or renewal the server
 * confirmed, plus the lease, less a clock drift allowance. */
int dl_holds_validity(dlock_client *c, const char *key, const char *owner,
                      int64_t *left);
/* Forgets the hold, if any (its renewal stops): whether there was one;
 * *lost (may be NULL): it was reported lost or its validity had run out. */
bool dl_holds_forget(dlock_client *c, const char *key, const char *owner,
                     bool *lost);

/* A lock's acquire begins: the count of the live hold of key by owner (0:
 * none, or reported lost), and in *info a copy of hd's description ("" for
 * none; the caller frees it), or NULL (out of memory). One lookup. */
int dl_holds_acquire_begin(dlock_client *c, const char *key, const char *owner,
                           const dl_holder *hd, char **info);
/* A release of a lock, in halves around the backend's call. */
typedef enum dl_rel_state {
  DL_REL_NONE, /* no hold known */
  DL_REL_HELD, /* *v filled, *ren marked as releasing (losses ignored) */
  DL_REL_LOST  /* reported lost before: forgotten now */
} dl_rel_state;
dl_rel_state dl_holds_release_begin(dlock_client *c, const char *key,
                                    const char *owner, dl_hold_view *v,
                                    dl_renewal **ren);
typedef enum dl_rel_outcome {
  DL_REL_GONE,  /* the server has no hold left: forgotten */
  DL_REL_ONE,   /* one re-entry less: counted down (to at least 1) */
  DL_REL_FAILED /* not answered: a last hold is forgotten (no renewal) */
} dl_rel_outcome;
/* What ended with a release, for the event hook: the hold's token and, if
 * the hold ended here timed, how long it was held (else held_us -1). */
typedef struct dl_rel_ended {
  uint64_t token;
  int64_t held_us;
} dl_rel_ended;
/* Ends the release that dl_holds_release_begin started (ren: its *ren, or
 * NULL), in one step, so that no loss is reported in between. Only the
 * hold the release began with is ended: one of the same key and owner
 * recorded since (another thread of an explicit owner that took the lock
 * afresh) is left as it is. Returns whether the client still had the
 * release's hold; fills *ended (may be NULL). */
bool dl_holds_release_end(dlock_client *c, const char *key, const char *owner,
                          dl_renewal *ren, dl_rel_outcome how,
                          dl_rel_ended *ended);
/* A new hold the caller gives back at once (an acquire that reports no
 * lock): no longer timed, so that neither its release nor dlock_metrics
 * counts it as a hold. */
void dl_holds_untime(dlock_client *c, const char *key, const char *owner);

/* Every hold, for a client being freed (handles not freed: a contract
 * breach): they stop being renewed. */
void dl_holds_free_all(dlock_client *c);
/* The owner tail of the hold whose watchdog entry is r, NUL-terminated
 * (valid as long as r's key: until dl_watchdog_remove(r) returns). */
const char *dl_holds_tail(const dl_renewal *r);
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
  dl_hold *holds[DL_HOLD_BUCKETS]; /* holds.c's, under holds_mu */
  char *id;
  char *key_prefix;
  size_t prefix_len;
  int64_t watchdog_timeout_ms;
  char *url_redacted;
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
  /* Election participants freed from their own callback whose thread
   * still leaves (releases its turn, then frees them): the close waits
   * for them (src/locks/elect.c). */
  atomic_int leaving;
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
