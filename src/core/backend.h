/* backend.h: the seam between the lock kinds and a deployment. A backend
 * implements, per kind it supports, typed operations: acquire (waiting by
 * its own algorithm), release, renewal of a batch of holds, force release,
 * queries and snapshots. Results are typed (status, fencing token,
 * validity on the monotonic clock, the holder's remaining lease), never a
 * server's reply. An operation a backend does not have is a NULL entry:
 * the caller answers DLOCK_ENOTSUP. docs/ARCHITECTURE.md, "How to add a
 * backend", says what each entry must guarantee.
 *
 * Every call blocks the calling thread until done or its deadline; any
 * thread may call; a failure returns a negative code with the detail
 * recorded for env->err_owner (dl_seterr). */
#ifndef DLOCK_BACKEND_H
#define DLOCK_BACKEND_H

#include "core.h"

typedef struct dl_backend dl_backend;
/* A lock's holder, one owner id at a time (a read lock's every reader):
 * non-zero stops (dlock_holder_cb). */
typedef dlock_holder_cb dl_holder_cb;

/* What a backend gets from its client, borrowed for the backend's life. */
typedef struct dl_backend_env {
  const struct dlock_client *err_owner; /* where details are recorded */
  const char *client_id;                /* every owner is "<id>:<tail>" */
  const char *key_prefix;
  const atomic_int *closing;  /* set when the client closes */
  int command_timeout_ms;
  /* The event loop the client runs on (dlock_client_open_async), or NULL:
   * a blocking client. */
  dl_loop *loop;
  /* dlock_metrics.reconnects: a connection made again after it broke
   * (relaxed additions; NULL: not counted). */
  atomic_uint_fast64_t *reconnects;
  /* The client's count of its live hold of key by owner (0: none), as
   * every acquire (dl_acquire.held) and release (its count) tells it: a
   * backend that keeps no re-entry count of its own answers
   * DL_QUERY_COUNT and a snapshot's hold_count with it. Any thread; it
   * takes the client's holds lock, so never call it holding a lock that
   * the client may wait for. */
  int (*hold_count)(void *holds, const char *key, const char *owner);
  void *holds; /* hold_count's first argument */
} dl_backend_env;

/* Makes a backend for opts->url. Returns 0, or a negative code with the
 * detail recorded for dlock_client_open (err_owner NULL). */
typedef int (*dl_backend_factory)(const dlock_client_options *opts,
                                  const dl_backend_env *env, dl_backend **out);

/* ---- the lock family ---- */
typedef enum dl_lock_kind {
  DL_KIND_LOCK, /* reentrant mutex (Redisson RLock) */
  DL_KIND_FAIR, /* first come, first served (RFairLock) */
  DL_KIND_READ, /* a read-write lock's sides (RReadWriteLock) */
  DL_KIND_WRITE,
  DL_KIND_PLAIN /* one string key, value = the owner (redsync, npm redlock) */
} dl_lock_kind;

/* The bytes an owner id takes at most, its NUL included. */
#define DL_OWNER_MAX 256

/* One lock as a backend sees it: borrowed for the call. */
typedef struct dl_lock_ref {
  const char *key;   /* the client's key prefix + name */
  const char *name;  /* the name alone, for messages */
  const char *owner; /* "<client id>:<tail>", ":write" after a writer's */
  dl_lock_kind kind;
  int64_t fair_stale_ms; /* DL_KIND_FAIR: when a queued waiter is dead */
  /* A word the backend keeps hints in for this handle (whether its last
   * acquire had to wait, say); any thread, relaxed. */
  atomic_uchar *hint;
} dl_lock_ref;

typedef struct dl_acquire {
  /* in */
  const dl_lock_ref *lock;
  int64_t lease_ms;
  bool wait;        /* false: one attempt */
  int64_t deadline; /* dl_now_ms() time the wait ends; INT64_MAX: never */
  int held;         /* the hold count this client knows of (re-entry) */
  const char *info; /* the holder's description, "" for none */
  /* A token to propose (a Redlock's part: the same for every server of a
   * round), 0 none: the server gives the larger of it and its own next
   * token, unless it is too far ahead of the server's clock. */
  uint64_t propose;
  /* A Redlock's part: its owner's waiter record (docs/WIRE.md), carried
   * by the attempt: written if refused, deleted if taken. The key, NULL
   * for none; the value, "" to delete it only; its lease in ms. */
  const char *rec_key, *rec_val, *rec_px;
  /* dlock_client_options.detect_deadlocks: a wait that would close a
   * wait-for cycle fails with DLOCK_EDEADLK (backends with `waiters`) */
  bool detect;
  /* out, when acquired */
  int status;          /* 1 taken, 2 re-entered */
  uint64_t token;      /* the hold's fencing token */
  int64_t valid_until; /* dl_now_ms() time the lease is certainly valid */
  bool waited;         /* it waited for another holder first */
  /* out, when refused */
  int64_t ttl; /* the holder's remaining lease in ms, DLOCK_TTL_NONE
                  (none counting down), DLOCK_TTL_FREE (gone since) or
                  DL_TTL_UNKNOWN (not read) */
} dl_acquire;

/* dl_acquire's ttl when the backend did not read the holder's lease
 * (etcd's refusal names the holder's key, not its lease's time). */
#define DL_TTL_UNKNOWN (-3)

typedef enum dl_lock_query {
  DL_QUERY_LOCKED, /* 1 if anyone holds it */
  DL_QUERY_HELD,   /* 1 if the ref's owner holds it */
  DL_QUERY_COUNT,  /* the owner's hold count */
  DL_QUERY_TTL,    /* the remaining lease, ms, or DLOCK_TTL_NONE/_FREE */
  DL_QUERY_TOKEN   /* the last fencing token handed out */
} dl_lock_query;

/* ---- semaphores and latches ---- */
typedef struct dl_sync_ref {
  const char *key;    /* the client's key prefix + name */
  const char *name;   /* for messages */
  atomic_uchar *hint; /* as dl_lock_ref's */
} dl_sync_ref;

typedef enum dl_sync_op {
  DL_SEM_SET,     /* n permits if none were set: 1 set, 0 not */
  DL_SEM_ADD,     /* add n (may be negative): 0 */
  DL_SEM_DRAIN,   /* take all: how many were available */
  DL_SEM_RELEASE, /* give n back: how many clients heard it */
  DL_SEM_AVAILABLE,
  DL_PERMITS_SET,
  DL_PERMITS_ADD,
  DL_PERMITS_AVAILABLE,
  DL_PERMITS_RELEASE, /* id: 1 released, 2 released and heard, 0 not
                         taken, -1 its lease had ended */
  DL_PERMITS_FORCE,   /* id: 1 released, 0 not taken */
  DL_LATCH_SET,       /* n if at zero: 1 set, 0 not */
  DL_LATCH_DOWN,      /* the count left, -1 if it was at zero */
  DL_LATCH_COUNT
} dl_sync_op;

/* ---- queues (Redisson's RBlockingQueue / RBlockingDeque) ---- */
typedef enum dl_queue_op {
  DL_QUEUE_OFFER,         /* the value at the tail: 0, *n the new length */
  DL_QUEUE_OFFER_FIRST,   /* the value at the head */
  DL_QUEUE_POLL,          /* the head: 1 taken, 0 none by the deadline */
  DL_QUEUE_POLL_LAST,     /* the tail */
  DL_QUEUE_SIZE,          /* 0, *n the length */
  DL_QUEUE_OFFER_DELAYED, /* the value, due delay_ms from now: 0, *n its
                             due time (the server's epoch ms) */
  DL_QUEUE_SIZE_DELAYED,  /* 0, *n the values not yet due */
  DL_QUEUE_POLL_RELIABLE, /* the head into consumer's processing list, its
                             lease set to lease_ms (values of consumers
                             whose lease ended go back first): as a poll */
  DL_QUEUE_ACK,           /* the value out of consumer's processing list:
                             0, *n how many (0 or 1) */
  DL_QUEUE_TRANSFER       /* moves the delayed values now due; with wait,
                             then sleeps until the next is due, a message
                             on the queue's channels, a kick (queue_kick)
                             or the deadline, and moves again: 0 or 1, *n
                             ms until the next is due (-1: none waits) */
} dl_queue_op;
typedef struct dl_queue_req {
  /* in */
  dl_queue_op op;
  const void *value; /* an offer's (borrowed), len bytes */
  size_t len;
  bool wait;        /* a poll's: false one look */
  int64_t deadline; /* dl_now_ms() time a poll's wait ends */
  bool delayed;     /* a poll's: first move the delayed values now due */
  int64_t delay_ms; /* DL_QUEUE_OFFER_DELAYED's */
  /* A reliable poll's and an ack's: the consumer's id (32 hex digits; its
   * lease is renewed as a permit's: dl_renew_item.permit at the queue's
   * key, owner "<client id>:<id>") and lease. */
  const char *consumer;
  int64_t lease_ms;
  /* out */
  void *got; /* a poll's value: malloc'ed, a NUL after got_len bytes;
                the caller frees it */
  size_t got_len;
  long long n;
} dl_queue_req;

/* ---- fenced resources (dlock_fence_*) ---- */
typedef enum dl_fence_op {
  DL_FENCE_SET, /* value with token, if token >= the fence: 1 written, 0
                   refused (the fence, higher, in *fence), DLOCK_ELOST
                   when `hold` is not held by its owner on the server */
  DL_FENCE_GET, /* 1 (got, fence), 0 none */
  DL_FENCE_DEL  /* 1 deleted, 0 none */
} dl_fence_op;
typedef struct dl_fence_req {
  /* in */
  dl_fence_op op;
  const char *key;   /* the client's key prefix + the resource's name */
  const char *name;  /* for messages */
  const void *value; /* a set's (borrowed), len bytes */
  size_t len;
  uint64_t token; /* a set's, > 0 */
  /* A set's, or NULL: the lock whose hold by hold->owner must still be
   * the lock's, checked in the same atomic step. */
  const dl_lock_ref *hold;
  /* out */
  void *got; /* a get's value: malloc'ed, a NUL after got_len bytes */
  size_t got_len;
  uint64_t fence; /* the resource's fence after the call (a refused set's:
                     the higher one that refused it) */
} dl_fence_req;

/* ---- leader election (Curator's LeaderLatch) ---- */
typedef struct dl_elect dl_elect;
/* Told, on a backend thread, each change of a participant's leadership:
 * leader 1 (token: the leadership's fencing token) or 0; gone 1 when it
 * is out of the election for good (its session ended: leader is 0), or a
 * negative code when it was refused for good (DLOCK_EWRONGTYPE: another
 * kind's data at the name; leader 0, nothing of its own left, the detail
 * recorded on this thread just before). */
typedef void (*dl_elect_fn)(void *ud, int leader, uint64_t token, int gone);
/* An election watched (Go's Observe), and what it is told: the leader's
 * value (len bytes, NUL-terminated) and token, or value NULL: nobody. */
typedef struct dl_observer dl_observer;
typedef void (*dl_observe_fn)(void *ud, const char *value, size_t len,
                              uint64_t token);

/* ---- holds ---- */
/* One hold for a renewal round. */
typedef struct dl_renew_item {
  /* in */
  const char *key;   /* the lock's key, or the permits' key */
  const char *owner; /* its owner; for a permit "<client id>:<permit id>" */
  bool permit;       /* a permit of a permit-expirable semaphore */
  /* out */
  int result;          /* 1 held (and extended), 0 gone, < 0 unknown (error) */
  int64_t valid_until; /* result 1: the validity confirmed (extended, or
                        * for a check the lease's known one; 0: none) */
} dl_renew_item;

/* Told a key whose holds may have been taken away, or NULL: any key. */
typedef void (*dl_notice_fn)(void *ud, const char *key, size_t len);

/* ---- the event-loop driver ----
 * The *_async entries start the same operation as their blocking twin and
 * return at once: 0 and *op (the operation in flight), or a negative code
 * (then done is never called). done(ud, rc) then runs exactly once, on the
 * loop's thread, with what the blocking entry would have returned; every
 * pointer passed in (the request, its lock or sync ref and their strings,
 * the renewal items) must stay valid until then. */
typedef void (*dl_done_fn)(void *ud, int rc);
typedef struct dl_async dl_async;

typedef struct dl_backend_ops {
  const char *name;

  /* The lock family. Acquire: 1 acquired (a->status, token, valid_until),
   * 0 refused until a->deadline (a->ttl), or a negative code; with
   * a->wait it waits without polling where it can, and leaves no trace of
   * the wait (queue places, reservations) behind, whatever the result. */
  int (*lock_acquire)(dl_backend *b, dl_acquire *a);
  /* Releases one hold of `count` known to the client: 1 freed, 0 still
   * held (re-entered), DLOCK_ENOTOWNER when the owner does not hold it, or
   * a negative code. Bounded by one command timeout, retries included. */
  int (*lock_release)(dl_backend *b, const dl_lock_ref *l, int64_t lease_ms,
                      int count);
  /* Deletes the lock whoever holds it and tells its holder: 1 deleted, 0
   * nothing there, DLOCK_EWRONGTYPE when the key is not a lock of l's kind
   * (nothing changed). */
  int (*lock_force_release)(dl_backend *b, const dl_lock_ref *l);
  int (*lock_query)(dl_backend *b, const dl_lock_ref *l, dl_lock_query q,
                    long long *v);
  /* A snapshot of whatever lives at `key` (any kind). */
  int (*inspect)(dl_backend *b, const char *key, dlock_lock_state *st);
  /* Every holder of the lock at `key` to cb (a read lock's every reader,
   * each once), until cb returns non-zero: 0, or a negative code. NULL:
   * inspect's one holder (dlock_lock_holders). */
  int (*holders)(dl_backend *b, const char *key, dl_holder_cb cb, void *ud);
  /* Calls cb(name, ud) for each lock whose key matches the glob `match`
   * (prefix included; names are passed without the prefix) until cb
   * returns non-zero. Returns how many were passed, or a negative code. */
  int (*scan)(dl_backend *b, const char *match, size_t prefix_len,
              dlock_scan_cb cb, void *ud);
  /* Calls cb for each waiter under the key prefix `prefix` (the owners
   * waiting now: Redis' waiter records, docs/WIRE.md; zk://'s nodes and
   * etcd://'s keys in line) until cb returns non-zero. Returns how many were passed, or a
   * negative code. Blocking clients only. NULL: the backend cannot tell
   * who waits (DLOCK_ENOTSUP). */
  int (*waiters)(dl_backend *b, const char *prefix, dlock_waiter_cb cb,
                 void *ud);

  /* Semaphores, permit-expirable semaphores and latches. An acquire (or
   * the latch's await) returns 1 done, 0 not by `deadline` (waiting
   * without polling when wait), or a negative code. */
  int (*sem_acquire)(dl_backend *b, const dl_sync_ref *s, int permits,
                     bool wait, int64_t deadline);
  /* Takes a permit with the caller's id (DLOCK_PERMIT_ID_LEN - 1 hex
   * digits); *valid_until as dl_acquire's. */
  int (*permit_acquire)(dl_backend *b, const dl_sync_ref *s, const char *id,
                        int64_t lease_ms, bool wait, int64_t deadline,
                        int64_t *valid_until);
  int (*latch_await)(dl_backend *b, const dl_sync_ref *s, bool wait,
                     int64_t deadline);
  /* Everything else on them: the op's result (see dl_sync_op) in *v.
   * `n` a count, `id` a permit's id (or NULL). */
  int (*sync_update)(dl_backend *b, const dl_sync_ref *s, dl_sync_op op,
                     long long n, const char *id, long long *v);

  /* Renews (lease_ms > 0) or checks (lease_ms 0) each hold, waiting for
   * answers until `deadline` at the latest. Never re-creates a hold that is
   * gone. Returns 0 when every item got a result >= 0, else the first
   * error (items without an answer have result < 0); *calls: how many
   * requests it sent (dlock_client_stats.renewal_calls). */
  int (*renew)(dl_backend *b, int64_t deadline, int64_t lease_ms, int n,
               dl_renew_item *items, int *calls);
  /* Tells fn(ud, key, len), on a backend thread, whenever it hears that a
   * key may have been taken from its holder (a force release's notice,
   * the server's events); key NULL: anything may have been missed. Returns 0,
   * or a negative code; a backend that cannot hear them returns 0. fn must
   * only take leaf locks. */
  int (*watch_losses)(dl_backend *b, dl_notice_fn fn, void *ud);
  /* Tells fn(ud, state), on a backend thread, each change of the
   * connection's state (a dlock_conn_state); fn NULL stops it. Returns 0.
   * NULL: the backend has no session states. */
  int (*watch_state)(dl_backend *b, void (*fn)(void *ud, int state),
                     void *ud);

  int (*lock_acquire_async)(dl_backend *b, dl_acquire *a, dl_done_fn done,
                            void *ud, dl_async **op);
  int (*lock_release_async)(dl_backend *b, const dl_lock_ref *l,
                            int64_t lease_ms, int count, dl_done_fn done,
                            void *ud, dl_async **op);
  int (*sem_acquire_async)(dl_backend *b, const dl_sync_ref *s, int permits,
                           bool wait, int64_t deadline, dl_done_fn done,
                           void *ud, dl_async **op);
  int (*permit_acquire_async)(dl_backend *b, const dl_sync_ref *s,
                              const char *id, int64_t lease_ms, bool wait,
                              int64_t deadline, int64_t *valid_until,
                              dl_done_fn done, void *ud, dl_async **op);
  int (*latch_await_async)(dl_backend *b, const dl_sync_ref *s, bool wait,
                           int64_t deadline, dl_done_fn done, void *ud,
                           dl_async **op);
  /* As sync_update; *v is filled in before done runs with 0. */
  int (*sync_update_async)(dl_backend *b, const dl_sync_ref *s, dl_sync_op op,
                           long long n, const char *id, long long *v,
                           dl_done_fn done, void *ud, dl_async **op_out);
  /* As their blocking twins; a result (*v, *st) is filled in before done
   * runs with rc >= 0; scan's cb runs on the loop's thread. */
  int (*lock_force_release_async)(dl_backend *b, const dl_lock_ref *l,
                                  dl_done_fn done, void *ud, dl_async **op);
  int (*lock_query_async)(dl_backend *b, const dl_lock_ref *l, dl_lock_query q,
                          long long *v, dl_done_fn done, void *ud,
                          dl_async **op);
  int (*inspect_async)(dl_backend *b, const char *key, dlock_lock_state *st,
                       dl_done_fn done, void *ud, dl_async **op);
  int (*scan_async)(dl_backend *b, const char *match, size_t prefix_len,
                    dlock_scan_cb cb, void *cb_ud, dl_done_fn done, void *ud,
                    dl_async **op);
  int (*ping_async)(dl_backend *b, dl_done_fn done, void *ud, dl_async **op);
  /* Raises the lock's fencing-token counter to at least `token`, so that
   * its next token is above it: 1, or a negative code (a composite writes
   * back the token it took over a quorum). Event-loop form only. */
  int (*lock_fence_async)(dl_backend *b, const dl_lock_ref *l, uint64_t token,
                          int64_t lease_ms, dl_done_fn done, void *ud,
                          dl_async **op);
  /* A queue's operation (dl_queue_op): a poll returns 1 (q->got), 0 when
   * none came by q->deadline (waiting without polling where it can), or a
   * negative code; the others 0 (q->n) or a negative code. A key of
   * another type: DLOCK_EWRONGTYPE, nothing changed. */
  int (*queue)(dl_backend *b, const dl_sync_ref *s, dl_queue_req *q);
  int (*queue_async)(dl_backend *b, const dl_sync_ref *s, dl_queue_req *q,
                     dl_done_fn done, void *ud, dl_async **op);
  /* Wakes this client's waiting DL_QUEUE_TRANSFER of the queue (if one
   * sleeps now), with no server call; NULL: none can sleep. */
  void (*queue_kick)(dl_backend *b, const dl_sync_ref *s);
  /* The renewal round (as renew) of n > 0 items. */
  int (*renew_async)(dl_backend *b, int64_t deadline, int64_t lease_ms, int n,
                     dl_renew_item *items, int *calls, dl_done_fn done,
                     void *ud, dl_async **op);
  /* Makes op give up as soon as it can: its waits end at once, as if their
   * deadline had come; a request already sent is still answered (its
   * result is kept: an acquire may still end acquired). done runs later,
   * never within this call. */
  void (*cancel)(dl_backend *b, dl_async *op);
  /* Wakes every wait in progress on b, in any thread (env->closing was
   * just set: dlock_client_shutdown): each ends as the client's close
   * makes it, leaving nothing of the wait behind. NULL: the waits look at
   * the flag at their next wake-up. */
  void (*wake_all)(dl_backend *b);

  /* A fenced resource's operation (dl_fence_op), every check and the
   * write in one atomic step on the server: its result, DLOCK_EWRONGTYPE
   * when something that is not a fenced resource is at f->key (nothing
   * changed), or a negative code. */
  int (*fence)(dl_backend *b, dl_fence_req *f);
  /* Its event-loop form: f and its strings stay valid until done. */
  int (*fence_async)(dl_backend *b, dl_fence_req *f, dl_done_fn done, void *ud,
                     dl_async **op);

  /* Leader election. elect_join enters the election at s->key as the
   * participant `id` (copied) and takes part on a backend thread until
   * elect_leave: 0 and *out, or a negative code (nothing entered). fn runs
   * on that thread for each change (never within elect_join) and may call
   * elect_leave on its own participant. elect_leave leaves (its node goes)
   * and frees e; fn is not called after it returns. elect_leader: the
   * current leader's id into buf (len bytes, cut): 1, 0 no participant, or
   * a negative code. */
  int (*elect_join)(dl_backend *b, const dl_sync_ref *s, const char *id,
                    dl_elect_fn fn, void *ud, dl_elect **out);
  void (*elect_leave)(dl_backend *b, dl_elect *e);
  int (*elect_leader)(dl_backend *b, const dl_sync_ref *s, char *buf,
                      size_t len);
  /* Go's Proclaim: e's value becomes `value` (copied) while it leads: 0,
   * DLOCK_ENOTOWNER (not the leader: nothing changed), or a negative
   * code. Any thread, fn's included. NULL: not on this backend. */
  int (*elect_proclaim)(dl_backend *b, dl_elect *e, const char *value);
  /* Go's Observe: fn runs on a backend thread with the leader's value
   * and token (value NULL: nobody leads) at the start and at each change,
   * until elect_unobserve, which stops it (fn not called once it
   * returns; never from fn). 0 and *out, or a negative code. NULL: not
   * on this backend. */
  int (*elect_observe)(dl_backend *b, const dl_sync_ref *s, dl_observe_fn fn,
                       void *ud, dl_observer **out);
  void (*elect_unobserve)(dl_backend *b, dl_observer *o);

  int (*ping)(dl_backend *b);
  /* 0 if `key` (prefix included) can name a lock, semaphore or election
   * here, else DLOCK_EINVAL or DLOCK_ENAMETOOLONG recorded; checked when
   * a handle is made. NULL: every name the client takes. */
  int (*check_key)(dl_backend *b, const char *key);
  /* Adds the backend's counters (round trips, wake-ups) to st. */
  void (*stats)(dl_backend *b, dlock_client_stats *st);
  void (*free)(dl_backend *b);
} dl_backend_ops;

struct dl_backend {
  const dl_backend_ops *ops;
  /* The kind dlock_lock_new makes on this URL: DL_KIND_LOCK (0) unless
   * the URL's mutex has another layout (DL_KIND_PLAIN: the one redsync and
   * npm redlock write). */
  dl_lock_kind mutex_kind;
  /* An acquire that waits follows the waiter records itself
   * (dl_acquire.detect; dlock_client_options.detect_deadlocks): Redis,
   * zk:// and etcd:// (dl_deadlock_walk). */
  bool detects_deadlocks;
};

/* The blocking entries a deadlock walk reads with (the backend's own:
 * on an event-loop client b->ops is its event-loop form's, which refuses
 * them). holders: every holder of the lock at key to cb (a read lock's
 * readers, each once); 0, or a negative code (the walk takes that lock as
 * unknown). */
typedef struct dl_walk_ops {
  int (*waiters)(dl_backend *b, const char *prefix, dlock_waiter_cb cb,
                 void *ud);
  int (*holders)(dl_backend *b, const char *key, dl_holder_cb cb, void *ud);
} dl_walk_ops;

/* detect_deadlocks over the seam's entries (core/deadlock.c), for a
 * backend whose waiters are its own layout (a place in line that exists
 * while it waits: zk://, etcd://): called once by a's acquire once its
 * place is made and before it first waits, from a thread that may block.
 * Reads every waiter under a's key prefix (ops->waiters), then searches
 * from the lock a waits for: each of its holders (ops->holders: every
 * reader of a read lock), the lock that holder waits for, that lock's
 * holders, and so on, depth first, each lock read once, 16 owners deep
 * and 64 locks read at most. Returns DLOCK_EDEADLK (the cycle in the
 * detail, for env->err_owner) when a way comes back to a's owner,
 * DLOCK_ENOMEM, or 0: no cycle, or it cannot tell (a read failed): wait. */
int dl_deadlock_walk(dl_backend *b, const dl_walk_ops *ops,
                     const dl_backend_env *env, const dl_acquire *a);

/* The same walk in steps, for a backend that reads without blocking
 * (redlock://'s operation, on either driver): dl_walk_init, then every
 * waiter under w->prefix to dl_walk_edge (a dlock_waiter_cb, ud w), then
 * while dl_walk_key gives a key: that lock's holders to dl_walk_holder (a
 * dl_holder_cb, ud w), then dl_walk_step with the read's code; dl_walk_free
 * at the end, always. */
#define DL_WALK_MAX 16   /* owners deep at most */
#define DL_WALK_LOOKS 64 /* locks read at most */
typedef struct dl_walk {
  char prefix[DL_OWNER_MAX + 256]; /* the key prefix of a's lock */
  char me[DL_OWNER_MAX];           /* a's owner */
  char *key;                       /* the key to read (dl_walk_key's) */
  int depth;                       /* the search's way: f[0..depth]; -1 over */
  bool fresh;                      /* f[depth]'s holders are still to be read */
  int looks;                       /* locks read or to read */
  struct dl_walk_frame {
    const char *name; /* a lock on the way */
    char kind[8];     /* its kind word, as its waiter's record has it */
    char **holders;   /* its holders (base owner ids) */
    size_t nh, at;    /* how many; the next to follow (at - 1: on the way) */
  } f[DL_WALK_MAX];
  const char *seen[DL_WALK_LOOKS]; /* the locks read (each once) */
  char path[1024];                 /* the cycle, for the detail */
  struct dl_walk_edge {
    char *owner, *name; /* name NULL: it waits for nothing */
    char kind[8];
  } * v; /* every owner that waits now, and for what */
  size_t n;
  bool oom;
  /* Set after dl_walk_init by a backend that reads an owner's wait when
   * the walk comes to it (Redis: its record) instead of every waiter
   * first: dl_walk_step then returns 2, ask naming the owner, and the
   * answer goes to dl_walk_waits before the next step. */
  bool lazy;
  const char *ask;
} dl_walk;
/* Sets w up for a's walk: false when it cannot tell (no walk). */
bool dl_walk_init(dl_walk *w, const dl_acquire *a);
int dl_walk_edge(const dlock_waiter *wt, void *w);
/* The next lock's key to read (w's, valid until the next call), or NULL:
 * the walk is over (*rc DLOCK_ENOMEM, or 0). */
const char *dl_walk_key(dl_walk *w, const dl_backend_env *env, int *rc);
/* One holder of that lock (a dl_holder_cb; 1 out of memory). */
int dl_walk_holder(const char *owner, void *w);
/* That lock's holders are in (irc: the read's code; not 0: unknown, no
 * holder followed), or a lazy walk's answer: 1 go on (dl_walk_key), 2
 * (lazy only) read what w->ask waits for, 0 no cycle (or it cannot
 * tell), DLOCK_EDEADLK with the cycle in env's detail, DLOCK_ENOMEM. */
int dl_walk_step(dl_walk *w, const dl_backend_env *env, int irc);
/* A lazy walk's answer: w->ask waits for the lock `name` of kind `kind`
 * (name NULL: for nothing, or it cannot tell). */
void dl_walk_waits(dl_walk *w, const char *name, const char *kind);
void dl_walk_free(dl_walk *w);

#endif /* DLOCK_BACKEND_H */
