/* dlock.h: the public API of libdlock, distributed locks for C on Redis (one
 * server, Sentinel, Cluster or a Redlock quorum) and ZooKeeper. Each call
 * below means the same on every backend; where one differs, or lacks a
 * kind (DLOCK_ENOTSUP), the comment says so. */
#ifndef DLOCK_H
#define DLOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(DLOCK_BUILDING) && defined(__GNUC__)
#define DLOCK_API __attribute__((visibility("default")))
#else
#define DLOCK_API
#endif

/* Marks a name kept for one release after it was renamed: a call compiles
 * with a warning naming its replacement, and the symbol stays in the
 * library (the ABI keeps it). */
#if defined(__GNUC__) && !defined(DLOCK_NO_DEPRECATION_WARNINGS)
#define DLOCK_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define DLOCK_DEPRECATED(msg)
#endif

#define DLOCK_VERSION_MAJOR 0
#define DLOCK_VERSION_MINOR 3
#define DLOCK_VERSION_PATCH 0
#define DLOCK_VERSION_STRING "0.3.0"
#define DLOCK_VERSION_NUM                                                      \
  ((DLOCK_VERSION_MAJOR << 16) | (DLOCK_VERSION_MINOR << 8) |                  \
   DLOCK_VERSION_PATCH)

/* Longest lock name accepted, in bytes (the key prefix not counted). */
#define DLOCK_NAME_MAX 1024
/* Longest key prefix (dlock_client_options.key_prefix), in bytes. */
#define DLOCK_KEY_PREFIX_MAX 256
/* Longest holder description (dlock_lock_set_info), in bytes. */
#define DLOCK_INFO_MAX 512
/* Longest owner id, in bytes with the NUL. */
#define DLOCK_OWNER_MAX 256
/* Longest lease accepted (lease_ms of the acquires, watchdog_timeout_ms),
 * in ms: 9e12, about 285 years, on every backend alike. It is etcd's
 * largest lease TTL (9e9 s; longer is "too large lease TTL"), the smallest
 * of the servers' limits: Redis refuses a PEXPIRE whose deadline passes
 * INT64_MAX ms, and its scripts pass a lease exactly up to 2^53 ms;
 * ZooKeeper's nodes live by their session. A longer lease is refused at
 * once with DLOCK_EINVAL, before anything is sent. */
#define DLOCK_LEASE_MAX_MS 9000000000000LL

/* ------------------------------------------------------------------------
 * Errors. Every call returns 0 or a positive value on success and one of
 * these negative codes on failure. Codes are append-only.
 *
 * Waiting is the same for every kind: `dlock_<kind>_acquire` (the latch:
 * `dlock_latch_await`) waits until it succeeds, fails or the client closes;
 * `dlock_<kind>_try_acquire` (`dlock_latch_try_await`) waits at most
 * `wait_ms` (0: one attempt; negative: no limit, as the plain call) and
 * returns DLOCK_EBUSY when the wait ran out. The arguments come in one
 * order: the object, what to take (a count of permits), wait_ms, lease_ms,
 * then the outputs.
 * ---------------------------------------------------------------------- */
#define DLOCK_ERRNO_MAP(X)                                                     \
  X(EINVAL, -1, "invalid argument")                                           \
  X(ENOMEM, -2, "out of memory")                                              \
  X(EURL, -3, "malformed URL")                                                \
  X(ENAMETOOLONG, -4, "lock name too long")                                   \
  X(ECONNECT, -5, "cannot connect to the server")                             \
  X(EAUTH, -6, "authentication failed")                                       \
  X(ETLS, -7, "TLS error")                                                    \
  X(ETIMEDOUT, -8, "server did not answer in time")                           \
  X(ECONNLOST, -9, "connection to the server lost")                           \
  X(EPROTO, -10, "unexpected reply from the server")                          \
  X(ESERVER, -11, "server error")                                             \
  X(EWRONGTYPE, -12, "key holds a value of another type")                     \
  X(EREADONLY, -13, "server refuses writes (read-only replica)")              \
  X(EOOM, -14, "server out of memory (maxmemory reached)")                    \
  X(EBUSY, -15, "not acquired in time (held by others, no permits, or "     \
                "the count not at zero)")                                     \
  X(ENOTOWNER, -16, "lock is not held by this owner")                         \
  X(ELOST, -17, "lock was lost (lease expired or taken away)")                \
  X(ECLOSED, -18, "client is closing")                                        \
  X(ENOTSUP, -19, "not supported")                                            \
  X(ERANGE, -20, "count out of range (a latch already at zero, or "         \
                 "permits past an int)")                                      \
  X(EDEADLK, -21, "would deadlock (a wait-for cycle, or a reader asking "   \
                  "for the write lock)")                                      \
  X(ENOPERM, -22, "the server's ACL does not permit this command")            \
  X(ELATE, -23, "granted, but the reply came after its lease could have "    \
                "ended (given back)")                                         \
  X(ECANCELED, -24, "operation cancelled")                                    \
  X(ENOTACKED, -25, "not acknowledged by enough replicas in time (given "    \
                    "back)")                                                  \
  X(ESTALE, -26, "stale fencing token (a later token has written; nothing "  \
                 "changed)")

typedef enum {
  DLOCK_OK = 0,
#define DLOCK_X_ENUM(name, code, msg) DLOCK_##name = code,
  DLOCK_ERRNO_MAP(DLOCK_X_ENUM)
#undef DLOCK_X_ENUM
} dlock_errno_t;

/* Deprecated: the name of DLOCK_EBUSY before 0.2 (same value). */
#define DLOCK_ELOCKED DLOCK_EBUSY

/* Returns a static English description of `err` ("unknown error" for codes
 * this version does not know). Thread-safe. */
DLOCK_API const char *dlock_strerror(int err);

/* Returns the code's name without prefix ("ETIMEDOUT"), or "UNKNOWN".
 * Thread-safe. */
DLOCK_API const char *dlock_err_name(int err);

/* Returns the library's version string (the DLOCK_VERSION_STRING it was
 * built with, which may differ from the header's a program was built
 * with); DLOCK_VERSION_NUM's value at build time through `num` if
 * non-NULL. Thread-safe. */
DLOCK_API const char *dlock_version(int *num);

/* ------------------------------------------------------------------------
 * Client: one per process is typical, shared by all its threads.
 * ---------------------------------------------------------------------- */
typedef struct dlock_client dlock_client;
typedef struct dlock_lock dlock_lock;

/* Options grow from version to version without breaking the ABI: the
 * struct begins with its size, set by dlock_client_options_init to the size
 * the caller was compiled with. The library reads only the fields that fit
 * in `size` (the fields of a newer library beyond it take their defaults),
 * and refuses (DLOCK_EINVAL) a size below the first sized version's
 * (DLOCK_CLIENT_OPTIONS_SIZE_0: a struct never initialised) and a larger
 * struct whose bytes unknown to this library are not all zero (options from
 * a newer dlock.h that this library cannot honour). New fields are only
 * ever appended, and their zero means their default. */
/* min_replicas_acked: as many replicas as the master has now. */
#define DLOCK_REPLICAS_AUTO (-1)

typedef struct dlock_client_options {
  size_t size; /* set by dlock_client_options_init; do not change */
  /* redis://[user[:password]@]host[:port][/db], rediss://... (TLS) or
   * unix:///path/redis.sock[?db=N]. NULL means redis://127.0.0.1:6379. */
  const char *url;
  /* Override the URL's user and password when non-NULL. */
  const char *username;
  const char *password;
  /* Sent with CLIENT SETNAME when non-NULL (no spaces allowed). */
  const char *client_name;
  /* Prepended to every key and channel name; NULL = none (as Redisson).
   * At most DLOCK_KEY_PREFIX_MAX bytes. */
  const char *key_prefix;
  /* The client id, the first half of every owner id ("<id>:<thread>").
   * NULL = a fresh random UUID, as a Redisson client does. */
  const char *client_id;

  int connect_timeout_ms; /* default 2000 */
  int command_timeout_ms; /* default 3000: bound on one round trip */
  /* Lease of locks acquired without an explicit lease; the watchdog
   * renews it every watchdog_timeout_ms / 3. Default 30000 (Redisson);
   * 3 to DLOCK_LEASE_MAX_MS. */
  int64_t watchdog_timeout_ms;
  /* Reconnect backoff after a lost connection, doubling from min to max.
   * etcd: how long calls skip an endpoint a call could not reach. */
  int reconnect_min_ms; /* default 100 */
  int reconnect_max_ms; /* default 5000 */
  /* Command connections shared by all threads (requests are pipelined
   * over them). Default 1, at most 64. */
  int connections;
  /* Waiters that cannot be handed the lock in turn (polling clients, see
   * wait_backoff_max_ms) race for it: one that has waited this long
   * reserves the next hand-off, so none starves (Go's mutex starvation
   * mode). Default 20; 0 = never reserve. */
  int starvation_ms;
  /* How waiters wait. 0 (default): they sleep until a pub/sub message (one
   * subscriber connection per client). > 0: no pub/sub at all; they try
   * again after an exponential backoff with jitter, from 1 ms up to this
   * many ms (Redisson's RSpinLock), for every lock kind. For deployments
   * where pub/sub is unavailable or too costly. */
  int wait_backoff_max_ms;

  /* TLS (rediss:// URLs). All paths are PEM files or directories. */
  const char *tls_ca_file;
  const char *tls_ca_dir;
  const char *tls_cert_file;
  const char *tls_key_file;
  const char *tls_server_name; /* default: the URL's host */
  int tls_verify;              /* default 1: verify chain and host name */

  /* Sentinel (redis-sentinel:// URLs): the sentinels' own user and
   * password (never in the URL, which is printed). NULL: the environment's
   * DLOCK_SENTINEL_PASSWORD (and DLOCK_SENTINEL_USERNAME), else none. */
  const char *sentinel_username;
  const char *sentinel_password;
  /* Replica acknowledgement: after each acquire, renewal and release,
   * WAIT for this many replicas (0, the default: no wait), or with
   * DLOCK_REPLICAS_AUTO for as many as the master has at that moment
   * (ROLE; Redisson's rule: none after a failover to a master without
   * replicas; docs/SAFETY.md says when each is right). An acquire not
   * acknowledged in time is given back and fails with DLOCK_ENOTACKED; a
   * renewal not acknowledged does not extend the hold's validity. On
   * redlock:// each server waits for its own replicas, and a server whose
   * replicas fall short does not count towards the quorum (with
   * DLOCK_REPLICAS_AUTO, as many as that server has). */
  int min_replicas_acked;
  int replicas_timeout_ms; /* the WAIT's limit; 0: 1000 */
  /* ZooKeeper (zk:// URLs; added in 0.2). The session timeout asked of the
   * server (which clamps it to 2..20 of its ticks); a session the server
   * has not heard from for that long expires and every lock it held is
   * lost (the client then opens a new session). It is also how long a
   * killed holder's lock stays taken. Default 60000 (Curator's); the URL's
   * ?session_timeout=D overrides it. On zk:// `username` and `password`
   * are the digest identity when the URL has no USER[:PASSWORD]@. */
  int zk_session_timeout_ms;
  /* How long dlock_client_open waits for the first session. Default 15000
   * (Curator's connection timeout); the URL's ?connect_timeout=D overrides
   * it. */
  int zk_connect_timeout_ms;
  /* Deadlock detection (added in issue 33). Non-zero: an acquire that has
   * to wait first follows the owners from the lock's holder (the waiter
   * records, docs/WIRE.md: the holder waits for a lock, whose holder waits
   * for ...), and if they lead back to its own owner, waiting would close
   * a wait-for cycle: it fails at once with DLOCK_EDEADLK, the cycle named
   * in dlock_client_errmsg. It costs a waiting acquire two commands per
   * owner followed (an acquire that does not wait, nothing). Two owners
   * that start waiting for each other at the same moment may both be told.
   * Redis (single, Sentinel, Cluster), zk:// and etcd:// (a waiting
   * acquire reads the waiters under the key prefix once, as
   * dlock_client_scan_waiters does, then one snapshot per owner followed);
   * redlock:// the same, each read on every server, counting the records
   * and holders a quorum of them agrees on. Default 0. */
  int detect_deadlocks;
} dlock_client_options;

/* The size of the first dlock_client_options with a size field (0.2): up
 * to its last field, tls_verify. */
#define DLOCK_CLIENT_OPTIONS_SIZE_0                                            \
  (offsetof(dlock_client_options, tls_verify) + sizeof(int))

/* Fills the `size` bytes at `opts` with the defaults documented above (bytes
 * this library does not know are zeroed) and sets opts->size = size. Use the
 * dlock_client_options_init macro, which passes the size the caller was
 * compiled with; bindings pass their own. Never fails; thread-safe. */
DLOCK_API void dlock_client_options_init_size(dlock_client_options *opts,
                                              size_t size);
/* dlock_client_options_init(&opts): the defaults, at this header's size. */
#define dlock_client_options_init(opts)                                        \
  dlock_client_options_init_size((opts), sizeof(dlock_client_options))

/* Opens a client and connects it. On success returns 0 and stores a new
 * client in *out, to be freed with dlock_client_close(). On failure returns
 * a negative code, stores NULL and frees everything; the detail is then in
 * dlock_client_open_errmsg(). `opts` NULL means every default; otherwise it
 * must come from dlock_client_options_init (DLOCK_EINVAL for a size of 0 or
 * below DLOCK_CLIENT_OPTIONS_SIZE_0, or unknown options set beyond this
 * library's struct). All strings in `opts` are copied. Thread-safe (opens
 * are independent). */
DLOCK_API int dlock_client_open(const dlock_client_options *opts,
                                dlock_client **out);

/* The detail of the calling thread's last failed dlock_client_open(), or "".
 * Valid until that thread's next open. */
DLOCK_API const char *dlock_client_open_errmsg(void);

/* Stops the watchdog (held locks then expire after their lease), wakes every
 * waiter with DLOCK_ECLOSED, closes the connections and frees the client.
 * Lock handles must be freed first. Accepts NULL. Must not be called while
 * another thread is still inside a call on this client or its locks. An
 * election participant freed from its own callback (Redis, Redlock: its
 * thread still releases its turn) is waited for, a command timeout at
 * most. On
 * zk:// it ends the session (the client's nodes go) and waits at most
 * 100 ms for the server's answer (10 ms after a request just went
 * unanswered): past that the close is sent and finishes on a library
 * thread, so a server that does not answer delays no exit. On redlock://,
 * a call returns once a quorum has answered; a blocking client's close
 * first lets what is still in flight on the other servers finish (a
 * release's tail, a late grant given back), for up to a command timeout
 * (at most 1 s), so that a process exiting right after a release leaves
 * no key on any server that answers. An event-loop client's close ends
 * that tail with the rest (DLOCK_ECLOSED): run the loop on a little (a
 * command timeout) before closing to have it too. */
DLOCK_API void dlock_client_close(dlock_client *c);

/* Ends every wait in progress on c, from any thread, as the close does,
 * while other threads are still inside calls on c: each blocking call
 * waiting there returns DLOCK_ECLOSED once it has removed its place in any
 * line (a zk:// waiter deletes its node: the next waiter is not held up
 * until the session times out), and every later call returns
 * DLOCK_ECLOSED. Holds are neither released nor renewed any more. Free the
 * client with dlock_client_close once the other threads have returned
 * (dlock run does this on SIGTERM while it waits). On zk:// the waits end
 * at once; on Redis at their next wake-up (a message, a backoff step, or
 * their deadline). Accepts NULL; thread-safe, not async-signal-safe. To
 * end the waits of one handle on an event-loop client instead, cancel
 * them (dlock_op_cancel) or free the handle: DLOCK_ECANCELED. */
DLOCK_API void dlock_client_shutdown(dlock_client *c);

/* The detail of the calling thread's last failed call on `c` (server error
 * text included; never a password), or "" (none, or it succeeded since).
 * Every call that fails with a client at hand sets it afresh, argument
 * errors included (a NULL client or handle has none to set).
 * Per client and per thread: a failure on another client, or in another
 * thread, does not change it. Valid until the thread's next call on `c`; a
 * thread keeps the details of its 8 clients that failed last (an older
 * one then reads ""). Thread-safe. */
DLOCK_API const char *dlock_client_errmsg(const dlock_client *c);

/* The client id (the owner id's first half). Owned by the client. */
DLOCK_API const char *dlock_client_id(const dlock_client *c);

/* Writes the calling thread's owner id ("<client id>:<thread id>") to buf
 * (at most len bytes with the NUL). Returns its length, or DLOCK_EINVAL
 * when it does not fit. Thread-safe. */
DLOCK_API int dlock_client_owner(const dlock_client *c, char *buf, size_t len);

/* Counters since the client was opened, for monitoring and benchmarks. */
typedef struct dlock_client_stats {
  uint64_t writes;        /* writes on the command connections (one write
                             carries every request pipelined at that moment) */
  uint64_t wakeups;       /* waiters woken by unlock messages */
  uint64_t renewal_calls; /* watchdog script calls (up to 100 locks each) */
  uint64_t renewals;      /* lock leases extended by the watchdog */
  uint64_t lost;          /* holds the watchdog found lost */
  uint64_t watched;       /* locks the watchdog renews now */
} dlock_client_stats;

/* Fills the first `size` bytes of *st (the caller's sizeof: a struct from
 * an older header gets the fields it knows; new fields are only ever added
 * at the end). Returns 0, or DLOCK_EINVAL (c or st NULL, size 0).
 * Thread-safe; no server call. Call it through the macro below. */
DLOCK_API int dlock_client_stats_get_size(dlock_client *c,
                                          dlock_client_stats *st, size_t size);
/* dlock_client_stats_get(c, &st): at this header's size. */
#define dlock_client_stats_get(c, st)                                          \
  dlock_client_stats_get_size((c), (st), sizeof(dlock_client_stats))

/* The histograms' finite upper bounds in seconds (Prometheus' `le`); one
 * bucket more, the last, is +Inf. */
#define DLOCK_METRICS_BUCKETS 10
#define DLOCK_METRICS_BOUNDS                                                   \
  { 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10 }
/* A histogram of durations, as Prometheus': bucket[i] counts the samples
 * of at most DLOCK_METRICS_BOUNDS[i] seconds, bucket[9] all of them
 * (cumulative: bucket[9], +Inf, equals count). */
typedef struct dlock_histogram {
  uint64_t bucket[DLOCK_METRICS_BUCKETS];
  uint64_t count;
  double sum; /* seconds, of every sample */
} dlock_histogram;

/* What this client's locks went through since it was opened, for a
 * service's own /metrics (`dlock metrics` shows the servers' side; see
 * docs/OBSERVABILITY.md). Relaxed atomic counters, only ever added to. */
typedef struct dlock_metrics {
  uint64_t acquisitions;           /* locks taken through this client's
                                      handles (first acquisitions, not
                                      re-entries; the lock kinds: mutex,
                                      fair, plain, either side of a
                                      read-write lock) */
  uint64_t contended_acquisitions; /* of those, taken after waiting for
                                      another holder */
  uint64_t lost_expired;           /* holds (locks and permits) lost
                                      because their validity ran out
                                      unconfirmed: a fixed lease that ended
                                      unreleased, renewals unanswered until
                                      it ended, a stalled process */
  uint64_t lost_taken;             /* holds the server said were no longer
                                      this owner's: released by force, the
                                      lease ended on the server, the
                                      session or lease lost (zk://,
                                      etcd://) */
  uint64_t renewals;               /* leases the watchdog extended */
  uint64_t failed_renewals;        /* hold renewals that got no answer
                                      (each is tried again next round) */
  uint64_t reconnects;             /* connections made again after they
                                      broke: Redis command connections
                                      (both drivers; not the subscriber's),
                                      zk://'s connection back (with its
                                      session or a new one); etcd:// (HTTP
                                      on pooled handles) counts none */
  /* Added later (dlock_client_metrics_size fills what the caller's size
   * holds; the struct only ever grows at the end): */
  dlock_histogram wait_seconds; /* the acquisitions counted above: from
                                   the acquire call to its grant */
  dlock_histogram hold_seconds; /* those holds that ended: from the grant to
                                   the last release, or to the loss */
} dlock_metrics;

/* Writes *m as Prometheus text exposition (format 0.0.4) into buf, as
 * snprintf does: at most len bytes with the terminating NUL (buf may be
 * NULL when len is 0). Each counter as "<prefix>_<name>_total", the losses
 * as "<prefix>_lost_total{cause=\"expired\"|\"taken\"}", each histogram
 * as "<prefix>_wait_seconds" and "<prefix>_hold_seconds" (_bucket{le=...}
 * cumulative, _sum, _count; +Inf equals _count), each family with its
 * # HELP and # TYPE lines. `prefix` (NULL: "dlock") must be a metric name
 * ([a-zA-Z_:][a-zA-Z0-9_:]*); `labels` (NULL or "": none) is added inside
 * every sample's braces as given, e.g. "service=\"api\"" (not checked).
 * Returns the length of the whole text without its NUL (output truncated
 * if >= len), or DLOCK_EINVAL (m NULL, a bad prefix, buf NULL with len >
 * 0), writing nothing then. Pure: no client, any thread. */
DLOCK_API int dlock_metrics_format(const dlock_metrics *m, const char *prefix,
                                   const char *labels, char *buf, size_t len);

/* Fills the first `size` bytes of *m (the caller's sizeof, as for
 * dlock_client_stats_get_size: new fields are only ever added at the end).
 * Returns 0, or DLOCK_EINVAL (c or m NULL, size 0). No server call;
 * thread-safe; the counters are read one by one (not one snapshot). Call
 * it through the macro below. */
DLOCK_API int dlock_client_metrics_size(dlock_client *c, dlock_metrics *m,
                                        size_t size);
/* dlock_client_metrics(c, &m): at this header's size. */
#define dlock_client_metrics(c, m)                                             \
  dlock_client_metrics_size((c), (m), sizeof(dlock_metrics))

/* What happened to a lock, for a service's tracing spans
 * (dlock_client_on_event). Only a hold's first acquisition and its end
 * are told, as dlock_metrics counts them: a re-entry and its release
 * tell nothing. The lock kinds: mutex, fair, plain, either side of a
 * read-write lock. */
typedef enum dlock_event_type {
  /* An acquire call began (before its first server request): the span's
   * start. DLOCK_EVENT_GRANTED or DLOCK_EVENT_NOT_GRANTED follows, on
   * the same thread. */
  DLOCK_EVENT_WAIT_STARTED = 1,
  /* Taken: `duration_ns` is the wait since the call began, `contended` 1
   * if it waited for another holder, `token` the fencing token. */
  DLOCK_EVENT_GRANTED = 2,
  /* The last release ended the hold (also a last release that got no
   * answer: the hold ends here, its lease frees the lock): `duration_ns`
   * the hold since the grant. */
  DLOCK_EVENT_RELEASED = 3,
  /* The hold was lost (the watchdog found it gone or its validity ran out,
   * as dlock_lock_on_lost; or the release found it no longer this
   * owner's): `duration_ns` the hold since the grant. */
  DLOCK_EVENT_LOST = 4,
  /* The watchdog extended the hold's lease on the server. */
  DLOCK_EVENT_RENEWED = 5,
  /* The acquire call ended without the lock: `error` says why
   * (DLOCK_EBUSY at its wait limit, DLOCK_ELATE, a server's code). */
  DLOCK_EVENT_NOT_GRANTED = 6
} dlock_event_type;

/* One event. The strings live for the call only. New fields are only
 * ever added at the end: `size` is the library's sizeof, read a field only
 * when size covers it. */
typedef struct dlock_event {
  size_t size;
  dlock_event_type type;
  const char *name;    /* the lock's name (without the key prefix) */
  const char *kind;    /* "lock", "fair", "read", "write" or "plain" */
  const char *owner;   /* the owner id, "<client id>:<thread or owner>" */
  const char *backend; /* the backend's name: "redis", "redlock",
                          "zookeeper", "etcd" */
  int64_t mono_ns;     /* when, on CLOCK_MONOTONIC */
  int64_t wall_ns;     /* when, on CLOCK_REALTIME (ns since the epoch) */
  int64_t duration_ns; /* GRANTED, NOT_GRANTED: the wait; RELEASED,
                          LOST: the hold; else 0 */
  uint64_t token;      /* the hold's fencing token where known, else 0 */
  int contended;       /* GRANTED: 1 if it waited for another holder */
  int error;           /* NOT_GRANTED: the call's code; else 0 */
} dlock_event;

/* Called for each event of the client's locks. Threads: a blocking
 * client calls it on the thread that acquires or releases
 * (WAIT_STARTED, GRANTED, NOT_GRANTED, RELEASED, and LOST found by a
 * release) and on its watchdog thread (RENEWED, LOST); an event-loop
 * client on the loop's thread. Calls on different threads may overlap.
 * It must be quick, must not call back into the client (no acquire,
 * release, inspect or close: it may run with the caller's operation half
 * done), and must not keep `ev` or its strings. */
typedef void (*dlock_event_cb)(dlock_client *c, const dlock_event *ev,
                               void *ud);

/* Registers cb (NULL: no more events) with its ud for every lock of the
 * client. Unset, an event costs one branch; set, a clock read or two and
 * the call. An event already being reported may still reach the previous
 * cb after this returns. Returns 0 or DLOCK_EINVAL (c NULL).
 * Thread-safe. */
DLOCK_API int dlock_client_on_event(dlock_client *c, dlock_event_cb cb,
                                    void *ud);

/* What a client tells of its connection (dlock_client_on_state), as
 * Curator's ConnectionState. */
typedef enum dlock_conn_state {
  /* The connection is lost, the session may still live (zk://): holds are
   * kept if it comes back within the session timeout, lost otherwise.
   * Meanwhile the holder cannot know: stop writing, or fence. */
  DLOCK_CONN_SUSPENDED = 1,
  /* Back with the same session: every hold is kept. */
  DLOCK_CONN_RECONNECTED = 2,
  /* The session ended: every hold of the client is lost (each is also
   * reported by its own loss callback). A new session is opened at once,
   * as Curator's client does; until it is connected, calls fail. */
  DLOCK_CONN_LOST = 3,
  /* Connected with a new session after DLOCK_CONN_LOST: the client works
   * again; holds must be taken anew (an election's standbys join again by
   * themselves). */
  DLOCK_CONN_NEW_SESSION = 4
} dlock_conn_state;
typedef void (*dlock_state_cb)(dlock_client *c, dlock_conn_state state,
                               void *ud);
/* Calls cb(c, state, ud) on a library thread at each change of the
 * client's connection state (one call at a time; cb must not close c).
 * cb NULL: no more calls. Returns 0, DLOCK_EINVAL (c NULL), or
 * DLOCK_ENOTSUP where the backend has no sessions to report (Redis: a
 * hold lives by its lease, see dlock_lock_validity). Thread-safe. */
DLOCK_API int dlock_client_on_state(dlock_client *c, dlock_state_cb cb,
                                    void *ud);

/* One round trip to the backend (every server of a Redlock quorum, the
 * ensemble's connected server on zk://), waited for. Returns 0 or a
 * negative code. */
DLOCK_API int dlock_client_ping(dlock_client *c);

/* ------------------------------------------------------------------------
 * The reentrant lock, wire-compatible with Redisson's RLock.
 * ---------------------------------------------------------------------- */

/* Creates a handle for the lock `name` (copied; 1..DLOCK_NAME_MAX bytes).
 * No server call is made. `owner` NULL makes the owner the calling thread of
 * each call, as Redisson does; a non-NULL `owner` (copied, no ':' needed)
 * fixes the owner to "<client id>:<owner>" for every call on this handle, so
 * one thread may lock and another unlock. Returns 0 and stores the handle
 * in *out, or DLOCK_EINVAL / DLOCK_ENAMETOOLONG / DLOCK_ENOMEM (then *out is
 * NULL). Free with dlock_lock_free(). A handle may be used by many threads
 * at once. With a fixed `owner` those threads are one holder, whose hold
 * count the client keeps: an acquire that overlaps another call of the
 * same owner on the same name may take the lock afresh (count 1) instead
 * of re-entering, and a later release then answers DLOCK_ENOTOWNER or
 * DLOCK_ELOST; let each call of a fixed owner end before the next starts. */
DLOCK_API int dlock_lock_new(dlock_client *c, const char *name,
                             const char *owner, dlock_lock **out);

/* Frees the handle. Holds still taken through it stop being renewed and
 * expire after their lease (they are not released). Accepts NULL. A handle
 * borrowed from a read-write lock (dlock_rwlock_read / _write) is not freed
 * here: the call does nothing, dlock_rwlock_free frees it. On an
 * event-loop client an acquire still waiting through the handle is
 * cancelled and leaves nothing on the server; its callback comes later
 * with DLOCK_ECANCELED (dlock_async.h). On a blocking client no other
 * thread may be inside a call on the handle: end such waits first with
 * dlock_client_shutdown (or a deadline). */
DLOCK_API void dlock_lock_free(dlock_lock *l);

/* ---- The fair lock (Redisson RFairLock) ----
 * As dlock_lock_new, for the fair lock `name` (Redisson RFairLock's
 * layout): waiters queue on the server and take the lock in FIFO order,
 * across processes; an unlock wakes only the first waiter. A waiter that
 * stops trying (it died) is skipped `stale_ms` after its last attempt
 * (<= 0: 300 000, Redisson's 5 minutes); live waiters attempt every
 * stale_ms/3 to keep their place. Reentrancy, leases, the watchdog, fencing
 * tokens and loss reports are the lock's. A wait of 0 tries once without
 * queueing. All the dlock_lock_* calls apply; free with dlock_lock_free. */
DLOCK_API int dlock_fairlock_new(dlock_client *c, const char *name,
                                 const char *owner, int64_t stale_ms,
                                 dlock_lock **out);

/* ---- The plain string lock (redsync, npm redlock, redis-semaphore) ----
 * As dlock_lock_new, for the lock `name` in the layout of the Redlock
 * clients and of the reference documents' basic scheme: one string key at
 * the name (the client's key prefix + name, no hash tag added), its value
 * the owner id, with a PX lease; acquired with SET NX semantics, released
 * and extended only while the value is the owner's. So dlock, redsync,
 * npm redlock and redis-semaphore's Mutex exclude each other on the same
 * name. Reentrancy is the handle's (the wire has no count: a re-entry only
 * extends the lease). Waiters poll with backoff and jitter (the peers
 * publish nothing on release) and wake at once on a dlock release's
 * message. Leases, the watchdog, fencing tokens (the lock's counter) and
 * loss reports are the lock's. All the dlock_lock_* calls and their
 * *_async forms apply (a holder description, dlock_lock_set_info, is not
 * stored: the string holds the owner's token only); free with
 * dlock_lock_free. Returns as
 * dlock_lock_new. No server call is made. */
DLOCK_API int dlock_plainlock_new(dlock_client *c, const char *name,
                                  const char *owner, dlock_lock **out);

/* ---- The read-write lock (Redisson RReadWriteLock) ----
 * Many readers or one writer at `name` (Redisson RReadWriteLock's layout;
 * on zk:// Curator's InterProcessReadWriteLock, on etcd:// contrib/recipes'
 * RWMutex); both reentrant; the writer may also take the read lock (and
 * keeps it after releasing the write lock: a downgrade). A reader that
 * asks for the write lock gets DLOCK_EDEADLK at once (Redisson waits
 * forever). Leases, the watchdog and loss reports apply to both; the
 * writer gets fencing tokens (a reader's token is 0 on Redis; on zk:// and
 * etcd:// it is its own node's or key's revision). */
typedef struct dlock_rwlock dlock_rwlock;

/* A read-write lock object for `name` (`owner` as in dlock_lock_new). No
 * server call is made. Returns 0 and stores it in *out, or a code as
 * dlock_lock_new (then *out is NULL). Free with dlock_rwlock_free. */
DLOCK_API int dlock_rwlock_new(dlock_client *c, const char *name,
                               const char *owner, dlock_rwlock **out);
/* The read lock's and the write lock's handles (Redisson's readLock() and
 * writeLock()): every dlock_lock_* call applies. Borrowed: owned by rw,
 * valid until dlock_rwlock_free(rw); dlock_lock_free on them does nothing.
 * The same handle on every call; NULL for a NULL rw. Thread-safe. */
DLOCK_API dlock_lock *dlock_rwlock_read(dlock_rwlock *rw);
DLOCK_API dlock_lock *dlock_rwlock_write(dlock_rwlock *rw);
/* Frees rw and its two handles (holds taken through them stop being renewed
 * and expire after their lease). Accepts NULL. */
DLOCK_API void dlock_rwlock_free(dlock_rwlock *rw);

/* Tries to acquire, waiting up to `wait_ms` (0 = one attempt, negative =
 * no limit). `lease_ms` > 0 is a fixed lease; <= 0 means the client's
 * watchdog_timeout_ms, renewed by the watchdog until release. On success
 * returns 0 and stores the fencing token in *token if non-NULL (a reentrant
 * acquisition returns the token of the hold it re-enters). Returns
 * DLOCK_EBUSY if another owner still held it when the wait ran out,
 * DLOCK_ELATE if it was granted but the reply came after its lease could
 * have ended (it is given back), DLOCK_EWRONGTYPE at once if the name (or a
 * key beside it) holds something this kind did not make (a string, a list,
 * an application's hash, a lock of another kind: nothing is changed;
 * docs/WIRE.md, "What dlock refuses"), DLOCK_EINVAL at once for a lease
 * over DLOCK_LEASE_MAX_MS (nothing sent), or another negative code; on failure
 * nothing is held. A waiter queues on the
 * server and is handed the lock by a release, in arrival order (unless the
 * client polls: see wait_backoff_max_ms). A wait rides out a failover, a
 * resharding or a reconnect: an attempt that fails as they make requests
 * fail (connection lost or refused, READONLY, CLUSTERDOWN, ...) is made
 * again until the wait runs out, then its error is returned (wait_ms 0:
 * at once; no limit: after 10 command timeouts of such failures). Time: returns
 * within wait_ms plus one command_timeout_ms (the last attempt's answer and
 * leaving the wait share that one timeout; a place in a queue that could not be
 * left in time lapses on the server by itself; a grant that came too late to
 * trust is given back, which may take one more). Blocks the calling thread;
 * thread-safe. */
DLOCK_API int dlock_lock_try_acquire(dlock_lock *l, int64_t wait_ms,
                                     int64_t lease_ms, uint64_t *token);

/* As dlock_lock_try_acquire with no wait limit: waits until acquired, an
 * error occurs or the client closes (DLOCK_ECLOSED). Redisson's lock(). */
DLOCK_API int dlock_lock_acquire(dlock_lock *l, int64_t lease_ms,
                                 uint64_t *token);

/* Releases one hold of the owner. Returns 1 when the lock became free (it
 * was handed to the first queued waiter, or the waiters are woken), 0 when
 * the owner still holds it (reentrant), or
 * DLOCK_ENOTOWNER when the owner did not hold it (Redis unchanged), or
 * DLOCK_ELOST when the owner's hold had been lost (the lost state is
 * cleared), or another negative code. A release that fails as a failover
 * makes requests fail is sent again (safely: docs/WIRE.md, release latch)
 * for up to command_timeout_ms + 6 s before that code is returned and the
 * hold is left to its lease. */
DLOCK_API int dlock_lock_release(dlock_lock *l);

/* Deletes the lock whoever holds it (Redisson's forceUnlock), wakes the
 * waiters and tells the holder: a dlock client holding it hears of it on
 * the revocation channel (docs/WIRE.md) and reports the hold lost within a
 * round trip (dlock_lock_on_lost). Only a lock of this handle's kind is
 * deleted: a lock hash (plain or fair) for a lock handle, a read-write lock
 * for either of its handles. Returns 1 if it was held, 0 if nothing was
 * there, DLOCK_EWRONGTYPE if something else is at the name (a string, a
 * list, a hash that is not a lock, the other kind of lock: nothing is
 * changed), or another negative code. Thread-safe. */
DLOCK_API int dlock_lock_force_release(dlock_lock *l);

/* Returns 1 if anyone holds the lock, 0 if not, or a negative code. */
DLOCK_API int dlock_lock_is_locked(dlock_lock *l);

/* Returns 1 if the owner (see dlock_lock_new) holds it, 0 if not, or a
 * negative code. 0 without asking the server once this client has
 * reported the owner's hold lost (dlock_lock_is_lost). */
DLOCK_API int dlock_lock_is_held(dlock_lock *l);

/* Returns the owner's hold count (0 if not held, as dlock_lock_is_held) or
 * a negative code. */
DLOCK_API int dlock_lock_hold_count(dlock_lock *l);

/* Stores the lock's remaining lease in *ttl_ms: DLOCK_TTL_FREE (-2) if
 * free, DLOCK_TTL_NONE (-1) if held with no lease counting down (a hold
 * that lives as long as its holder's session, on zk://, or a key someone
 * set without an expiry). Returns 0 or a negative code. */
#define DLOCK_TTL_FREE (-2)
#define DLOCK_TTL_NONE (-1)
DLOCK_API int dlock_lock_remaining_ttl(dlock_lock *l, int64_t *ttl_ms);

/* Stores the last fencing token issued for this lock name in *token (0 if
 * none yet, or none for a day: the counter then expired, and the next token
 * restarts above every earlier one, docs/WIRE.md). On redlock:// it is the
 * largest of the servers' counters that answered, so it may be above the
 * last token a holder was given (a server that counted an attempt that
 * did not win a quorum): never below it. Anyone may call it. Returns 0
 * or a negative code. */
DLOCK_API int dlock_lock_current_token(dlock_lock *l, uint64_t *token);

/* Called from the watchdog thread (on an event-loop client: the loop's
 * thread) when `owner`'s hold of `l` is lost: a renewal or a check finds
 * it gone (expired, force-released, deleted), no renewal was confirmed in
 * time, or a fixed lease ran out before release
 * (at that instant, by the monotonic clock). A force release by any dlock
 * client, and where the server publishes keyspace events (del, expired) a
 * deletion by anyone, is heard at once and checked within a round trip;
 * otherwise a deletion is found at the next renewal (lease/3). Called at
 * most once per hold. Must not block for long and must not free `l`. */
typedef void (*dlock_lost_cb)(dlock_lock *l, const char *owner, void *ud);

/* Registers `cb` (NULL to clear) for this handle's losses. Not for use
 * while another thread acquires through the same handle. */
DLOCK_API void dlock_lock_on_lost(dlock_lock *l, dlock_lost_cb cb, void *ud);

/* Returns 1 if the calling owner's hold is lost (and not yet released):
 * the watchdog found it gone, or its validity (see dlock_lock_validity) ran
 * out; else 0. Local state only, no server call; thread-safe. */
DLOCK_API int dlock_lock_is_lost(dlock_lock *l);

/* How long the calling owner's hold is certainly still valid, from this
 * process's monotonic clock: the send time of the last acquire or renewal
 * the server confirmed, plus the lease, less a drift allowance of
 * lease/100 + 2 ms. Stores the milliseconds left in *ms (may be NULL) and
 * returns 0; returns DLOCK_ELOST (*ms = 0) when the hold is lost or its
 * validity ran out, DLOCK_ENOTOWNER when this client holds nothing under
 * this owner. A holder checks it before an action that must not outlive
 * the lease; fencing tokens cover the pause that can follow any check.
 * Local state only, no server call; thread-safe. */
DLOCK_API int dlock_lock_validity(dlock_lock *l, int64_t *ms);

/* The lock's name as given (owned by the handle). */
DLOCK_API const char *dlock_lock_name(const dlock_lock *l);

/* Sets a description of the holder (any text, for example "host pid
 * command"), copied, at most DLOCK_INFO_MAX bytes, NULL to clear. Each later
 * first acquisition through this handle stores it beside the lock (fields
 * "dlock:info" and "dlock:since" of the lock's hash; for each holder of a
 * read-write lock, its field "dlock:info:<owner id>"; Redisson ignores them
 * all), where dlock_lock_inspect shows it as given; it goes away with the
 * hold. Returns 0, DLOCK_EINVAL or DLOCK_ENOMEM.
 * Thread-safe. */
DLOCK_API int dlock_lock_set_info(dlock_lock *l, const char *info);

/* A snapshot of a lock, for tools and monitoring. */
typedef struct dlock_lock_state {
  int held;                       /* 1 if an owner holds it, else 0 */
  int holders;                    /* owner fields found (1 for this kind) */
  char owner[DLOCK_OWNER_MAX];    /* the (first) holder's owner id, or "" */
  int hold_count;                 /* that holder's count */
  char info[DLOCK_INFO_MAX + 1];  /* its dlock_lock_set_info text, or ""
                                     (for a read-write lock, the text of
                                     the holder in `owner`) */
  int64_t held_ms;                /* how long it has held it (server clock),
                                     -1 if unknown (no info was set) */
  int64_t ttl_ms;                 /* remaining lease in ms; DLOCK_TTL_FREE,
                                     DLOCK_TTL_NONE (no expiry) */
  uint64_t token;                 /* last fencing token issued, 0 if none */
  int waiters;                    /* processes waiting, as far as the
                                     backend can tell (Redis: subscribed
                                     to its channel, a lock's or a read-
                                     write lock's, or queued, whichever
                                     is more; a fair lock's waiters listen
                                     on channels of their own; zk://: the
                                     nodes in line behind the holder) */
  /* What else lives at the name (a snapshot of any lock kind): */
  char mode[8];      /* a read-write lock: "read" or "write"; else "" */
  int readers;       /* a read-write lock: owners holding the read lock */
  int queued;        /* waiters queued: a fair lock's queue, or the lock's
                        hand-off queue (waiters that can be granted it) */
  int64_t counter;   /* a semaphore's permits available or a latch's count
                        when the name holds a number, else -1 */
  int permits_taken; /* a permit-expirable semaphore: permits out */
  char type[8];      /* the server's type of the key at the name: "none",
                        "hash" (every lock kind; an application's hash
                        has holders 0), "string" (a semaphore's
                        or latch's count, or anything else), "list", "set",
                        "zset" or "stream"; on zk:// "znode" (a path,
                        the lock's nodes its children), "none" (no node,
                        or an empty one), or someone else's node, which
                        no recipe takes: "data" (data that is not a
                        semaphore's count) or "nodes" (children no
                        recipe makes); on etcd:// "keys" (a lock's
                        keys under NAME/, the mutex's or the read-write
                        lock's; owner: as its key's value names it,
                        a Go client's its lease in hex),
                        "none", or "data" (a key there that no lock
                        makes) */
  int plain;         /* 1: a plain string lock (dlock_plainlock_new, redsync,
                        npm redlock): a string with a lease that is not a
                        number; `owner` is then its value (a peer's random
                        token, or a dlock owner id), hold_count 1 */
} dlock_lock_state;

/* Fills the first `size` bytes of *st (the caller's sizeof, as for
 * dlock_client_stats_get_size) in one or two round trips (Redis: a script
 * and a count of the waiters' subscriptions; zk://: the name's node and
 * its children; a Redlock asks every server and takes the first answer).
 * Returns 0 or a negative code (DLOCK_EINVAL for l or st NULL or size 0;
 * then *st is unspecified). Read-only; thread-safe. Call it through the
 * macro below. */
DLOCK_API int dlock_lock_inspect_size(dlock_lock *l, dlock_lock_state *st,
                                      size_t size);
/* dlock_lock_inspect(l, &st): at this header's size. */
#define dlock_lock_inspect(l, st)                                              \
  dlock_lock_inspect_size((l), (st), sizeof(dlock_lock_state))

/* Called by dlock_lock_holders once for each holder's owner id (the
 * string lives for the call only). Return 0 to go on, anything else to
 * stop. */
typedef int (*dlock_holder_cb)(const char *owner, void *ud);

/* Every holder of the lock at l's name, for tools (dlock deadlocks): a
 * read-write lock's every reader (dlock_lock_state names the first only),
 * else its one holder (a writer's owner id ends in ":write"); a free lock
 * none. On Redis the lock's hash fields (a plain lock's value), on zk://
 * the nodes in front (each node's data names its owner), on etcd:// the
 * keys in front, on redlock:// the holder dlock_lock_inspect gives.
 * Returns how many were passed to cb, or a negative code (DLOCK_EINVAL for
 * l or cb NULL; a blocking call: refused on an event-loop client). cb runs
 * on the calling thread, and may not call into l's client. Read-only;
 * thread-safe. */
DLOCK_API int dlock_lock_holders(dlock_lock *l, dlock_holder_cb cb, void *ud);

/* Called by dlock_client_scan_locks for each candidate lock name (the key
 * prefix removed). Return 0 to go on, anything else to stop. */
typedef int (*dlock_scan_cb)(const char *name, void *ud);

/* An owner waiting for a lock, as its waiter record tells
 * (dlock_client_scan_waiters). The strings live for the call only. */
typedef struct dlock_waiter {
  const char *owner;   /* its owner id (a writer's without ":write") */
  const char *name;    /* the lock it waits for (no key prefix) */
  const char *kind;    /* that lock's: "lock", "fair", "read", "write",
                          "plain" */
  const char *info;    /* its dlock_lock_set_info text, or "" */
  int64_t deadline_ms; /* when its wait ends, ms since the epoch (the
                          waiter's clock); 0: no limit */
} dlock_waiter;
/* Return 0 to go on, anything else to stop. */
typedef int (*dlock_waiter_cb)(const dlock_waiter *w, void *ud);

/* Calls cb for each owner waiting now for a lock whose name matches
 * `pattern` (glob, NULL = "*"): an acquire that has to wait records what
 * it waits for beside the locks (docs/WIRE.md, "Waiter records"; a lease
 * of 10 s, renewed while it waits, so that a dead waiter's record goes),
 * and deletes the record when its wait ends; on zk:// the nodes in line
 * behind a lock's holders are its waiters (owner and info from the node's
 * data, deadline_ms 0: unknown), on etcd:// the keys in line (owner and
 * info from the key's value, a Go client's owner its lease in hex). Walks the
 * records a batch at a time (Redis: SCAN; zk://: the tree under the prefix;
 * etcd://: the keys under it, 500 a range). On redlock:// every server is
 * read and a record is passed only when a quorum of them (N/2 + 1) has it
 * (the same owner waiting for the same lock); fewer than a quorum
 * answering is an error. Returns the number of records passed to cb, or a
 * negative code: DLOCK_ENOTSUP on an event-loop client. Read-only;
 * thread-safe.
 * dlock deadlocks builds its wait-for graph from these and the locks' holders.
 */
DLOCK_API int dlock_client_scan_waiters(dlock_client *c, const char *pattern,
                                        dlock_waiter_cb cb, void *ud);

/* Walks the backend's names a batch at a time, never all at once (Redis:
 * SCAN, never KEYS, for hashes, then strings: plain string locks), whose
 * names match `pattern` (glob, NULL = "*", the key prefix added), calling
 * cb for each. A name is only a candidate:
 * dlock_lock_inspect tells whether it is held.
 * Returns the number of names passed to cb, or a negative code. */
DLOCK_API int dlock_client_scan_locks(dlock_client *c, const char *pattern,
                                      dlock_scan_cb cb, void *ud);

/* ---- Multi-lock (Redisson RedissonMultiLock) ----
 * All or nothing over a set of locks, with a wait and a lease like one
 * lock. The locks are taken in one canonical order (by key), whatever the
 * order given, so multi-locks over the same locks in different orders do
 * not deadlock. The lock handles are borrowed: they must outlive the
 * multi-lock; their owners (threads or explicit) are theirs. */
typedef struct dlock_multilock dlock_multilock;

/* Over `n` (>= 1) distinct locks (the array is copied, the handles
 * borrowed). Returns 0 and stores the multi-lock in *out, or DLOCK_EINVAL
 * (NULL, none, or the same lock twice) or DLOCK_ENOMEM (then *out is NULL).
 * Free with dlock_multilock_free. No server call. */
DLOCK_API int dlock_multilock_new(dlock_lock *const *locks, size_t n,
                                  dlock_multilock **out);
/* Frees the multi-lock, not its locks (nor their holds). Accepts NULL. */
DLOCK_API void dlock_multilock_free(dlock_multilock *m);
/* Takes every lock, waiting up to wait_ms in all (0: one try each, < 0:
 * no limit), each with lease_ms as in dlock_lock_try_acquire. Fills
 * tokens[i] (may be NULL) with the token of locks[i]. Returns 0; on any
 * failure it releases what it took and returns that failure (DLOCK_EBUSY
 * when the wait ran out). Blocks the calling thread; thread-safe as the
 * locks' calls are. */
DLOCK_API int dlock_multilock_try_acquire(dlock_multilock *m, int64_t wait_ms,
                                          int64_t lease_ms, uint64_t *tokens);
/* As dlock_multilock_try_acquire with no wait limit (Redisson's lock()). */
DLOCK_API int dlock_multilock_acquire(dlock_multilock *m, int64_t lease_ms,
                                      uint64_t *tokens);
/* Releases every lock (in reverse order). Returns 0, or the first error
 * met (the others are still released). */
DLOCK_API int dlock_multilock_release(dlock_multilock *m);

/* ---- Semaphore (Redisson RSemaphore) ----
 * A count of permits at NAME, shared by every process. Permits are not
 * owned: anyone may release, and a holder that dies keeps its permits (use
 * the permit-expirable semaphore for permits that come back). Handles are
 * thread-safe; free them before closing their client. */
typedef struct dlock_semaphore dlock_semaphore;

/* A handle for the semaphore NAME (copied; nothing is sent). Returns 0 and
 * stores it in *out, or DLOCK_EINVAL, DLOCK_ENAMETOOLONG or DLOCK_ENOMEM
 * (then *out is NULL). Free with dlock_semaphore_free. */
DLOCK_API int dlock_semaphore_new(dlock_client *c, const char *name,
                                  dlock_semaphore **out);
/* Frees the handle (permits taken stay taken). Accepts NULL. */
DLOCK_API void dlock_semaphore_free(dlock_semaphore *s);
/* Sets the permits if the semaphore was never set (Redisson's
 * trySetPermits). Returns 1 set, 0 already set (nothing changed), or a
 * negative code; wakes waiters. */
DLOCK_API int dlock_semaphore_try_set_permits(dlock_semaphore *s,
                                              int permits);
/* Adds permits (negative: takes them away, down to below zero if the
 * holders have them). Returns 0 or a negative code; wakes waiters.
 * DLOCK_ERANGE (nothing changed) when the count would leave the range of
 * an int (as release's, and the permit-expirable semaphore's add with
 * the permits out counted). */
DLOCK_API int dlock_semaphore_add_permits(dlock_semaphore *s, int permits);
/* Takes `permits` (> 0), waiting up to wait_ms (0: one try, < 0: no
 * limit) without polling: each release wakes as many waiters as it makes
 * permits available. Returns 0, DLOCK_EBUSY when not enough came in time,
 * or another negative code (then nothing is taken). Blocks the calling
 * thread; thread-safe. */
DLOCK_API int dlock_semaphore_try_acquire(dlock_semaphore *s, int permits,
                                          int64_t wait_ms);
/* As dlock_semaphore_try_acquire with no wait limit (Redisson's
 * acquire(n)): waits until taken, an error, or the client closes. */
DLOCK_API int dlock_semaphore_acquire(dlock_semaphore *s, int permits);
/* Gives back `permits` (> 0). Returns 0 or a negative code
 * (DLOCK_ERANGE past INT_MAX: nothing changed). */
DLOCK_API int dlock_semaphore_release(dlock_semaphore *s, int permits);
/* The permits available now (0 if never set), or a negative code
 * (DLOCK_ERANGE: another client set more than INT_MAX). */
DLOCK_API int dlock_semaphore_get_available(dlock_semaphore *s);
/* Takes every available permit; returns how many, or a negative code
 * (DLOCK_ERANGE: the count is outside an int, and nothing is taken). */
DLOCK_API int dlock_semaphore_drain(dlock_semaphore *s);

/* ---- Count-down latch (Redisson RCountDownLatch) ----
 * Waiters wait for a count set once to reach zero. Handles are
 * thread-safe; free them before closing their client. */
typedef struct dlock_latch dlock_latch;

/* A handle for the latch NAME (copied; nothing is sent). Returns 0 and
 * stores it in *out, or DLOCK_EINVAL, DLOCK_ENAMETOOLONG or DLOCK_ENOMEM
 * (then *out is NULL). Free with dlock_latch_free. */
DLOCK_API int dlock_latch_new(dlock_client *c, const char *name,
                              dlock_latch **out);
/* Frees the handle. Accepts NULL. */
DLOCK_API void dlock_latch_free(dlock_latch *l);
/* Starts a count (1..INT32_MAX) if none is running. Returns 1 set, 0 a
 * count is running (nothing changed), or a negative code. */
DLOCK_API int dlock_latch_try_set_count(dlock_latch *l, int64_t count);
/* Counts down by one; reaching zero wakes every waiter. Returns 0,
 * DLOCK_ERANGE when no count is running (at zero: nothing changed), or
 * another negative code. */
DLOCK_API int dlock_latch_count_down(dlock_latch *l);
/* The count left (0 when none is running) in *count. Returns 0 or a
 * negative code. */
DLOCK_API int dlock_latch_get_count(dlock_latch *l, int64_t *count);
/* Waits up to wait_ms (0: one look, < 0: no limit) for the count to reach
 * zero, without polling. Returns 0 at zero (at once when no count is
 * running), DLOCK_EBUSY when the wait ran out, or another negative code.
 * Blocks the calling thread; thread-safe. */
DLOCK_API int dlock_latch_try_await(dlock_latch *l, int64_t wait_ms);
/* As dlock_latch_try_await with no wait limit (Redisson's await()). */
DLOCK_API int dlock_latch_await(dlock_latch *l);

/* ---- Leader election (Apache Curator's LeaderLatch) ----
 * Participants join an election at NAME; one of them at a time is the
 * leader. On zk:// it is Curator's LeaderLatch (LeaderLatch processes in
 * Java take part in the same election): the leader is the one that joined
 * first among those present; a participant that loses its connection
 * stops being the leader at once (Curator's default policy: another may
 * be elected while it cannot know), and is again if it still is first
 * once reconnected; one whose session expired joins again, at the end of
 * the line, once the client's new session is connected. On Redis
 * the participants take turns on the lock NAME (each from a thread of its
 * own, as Curator's LeaderSelector does on a mutex): the holder leads with
 * the hold's token and its id as the lock's description, until it leaves
 * or the hold is lost (then it joins again); not on an event-loop client
 * there (DLOCK_ENOTSUP). Free every participant before closing its
 * client. */
typedef struct dlock_leader dlock_leader;

/* Called on a library thread when this participant becomes the leader
 * (leader 1) or stops being it (0). Calls for one participant never
 * overlap. It may call any function on this participant, dlock_leader_free
 * included (the call then returns at once; the participant is gone when
 * the callback returns). */
typedef void (*dlock_leader_cb)(dlock_leader *l, int leader, void *ud);

/* A participant of the election NAME (copied) with the id `id` (copied;
 * NULL or "" for none, Curator's default; at most DLOCK_OWNER_MAX - 1
 * bytes), not yet in it. Returns 0 and *out, or DLOCK_EINVAL,
 * DLOCK_ENAMETOOLONG or DLOCK_ENOMEM (then *out is NULL). No server call. */
DLOCK_API int dlock_leader_new(dlock_client *c, const char *name,
                               const char *id, dlock_leader **out);
/* Sets the callback (before dlock_leader_start; NULL for none). Returns 0,
 * or DLOCK_EINVAL (l NULL, or already started). */
DLOCK_API int dlock_leader_on_change(dlock_leader *l, dlock_leader_cb cb,
                                     void *ud);
/* Joins the election (once per participant): 0, DLOCK_EINVAL when already
 * started, DLOCK_ENOTSUP (a Redis event-loop client), or another negative
 * code (not joined). Returns once the join has started: the
 * leadership comes later (dlock_leader_try_await, the callback). */
DLOCK_API int dlock_leader_start(dlock_leader *l);
/* Waits up to wait_ms (0: one look, < 0: no limit) until this participant
 * is the leader, without polling. Returns 0 leader, DLOCK_EBUSY not in
 * time, DLOCK_ECLOSED the client was shut down or is closing, DLOCK_ELOST
 * out of the election for good (its session ended), DLOCK_EWRONGTYPE out of it
 * because NAME holds another kind's data (Redis: something else than a
 * lock; etcd://: a key on no lease, a queue's value or an application's;
 * zk://: a node of another recipe, a mutex's, before its own), nothing of
 * its own left, DLOCK_EINVAL not started. Blocks the calling thread;
 * thread-safe. */
DLOCK_API int dlock_leader_try_await(dlock_leader *l, int64_t wait_ms);
/* 1 if this participant is the leader now (as last heard), else 0. */
DLOCK_API int dlock_leader_has_leadership(dlock_leader *l);
/* The fencing token of the present leadership in *token: 0 while leader,
 * DLOCK_ENOTOWNER if not. Tokens grow with each leadership of the
 * election (zk://: the leader node's czxid; Redis: the lock's token). */
DLOCK_API int dlock_leader_token(dlock_leader *l, uint64_t *token);
/* The present leader's id (Curator's getLeader; etcd://: its key's value,
 * as Go's Election.Leader, a Proclaim's included) into buf (len bytes, cut
 * to fit): 1, 0 when nobody takes part, DLOCK_EWRONGTYPE when the first
 * in line is no participant (etcd://: a key on no lease; zk://: another
 * recipe's node), or a negative code. One server call; needs no start. */
DLOCK_API int dlock_leader_get_current(dlock_leader *l, char *buf, size_t len);
/* Sets the value this participant leads with (Go's Election.Proclaim):
 * the present leader's value that dlock_leader_get_current, observers and
 * `etcdctl elect -l` read becomes `value` (copied; at most
 * DLOCK_LEADER_VALUE_MAX bytes), and stays the participant's value if it
 * campaigns again. Returns 0; DLOCK_ENOTOWNER when it does not lead now
 * (nothing changed: a Proclaim is a write conditional on the leader's own
 * key); DLOCK_EINVAL (not started, value NULL or too long); DLOCK_ENOTSUP
 * where the backend has no value to proclaim (Redis, Redlock: the id is
 * the lock's description; zk://: Curator's LeaderLatch has none), naming
 * it; or another negative code. Blocks the calling thread (one server
 * call, made by the participant's thread); thread-safe; may be called
 * from the change callback. */
DLOCK_API int dlock_leader_proclaim(dlock_leader *l, const char *value);
#define DLOCK_LEADER_VALUE_MAX 4096

/* Called on a library thread of the observer with the present leader's
 * value (len bytes, NUL-terminated, cut at DLOCK_LEADER_VALUE_MAX) and its
 * leadership's fencing token, or value NULL (token 0) when nobody leads
 * (also while the first in line is no participant: a key on no lease,
 * where dlock_leader_get_current answers DLOCK_EWRONGTYPE); once at the
 * start and then at every change: a new leader, a Proclaim.
 * Calls for one observer never overlap; it must not free l. */
typedef void (*dlock_leader_observe_cb)(dlock_leader *l, const char *value,
                                        size_t len, uint64_t token, void *ud);

/* Watches the election NAME (Go's Election.Observe, `etcdctl elect -l`),
 * whether or not l takes part (it need not be started): cb runs as
 * dlock_leader_observe_cb says until dlock_leader_free. Successive
 * changes closer together than a round trip may be told as the last of
 * them. Returns 0; DLOCK_EINVAL (cb NULL, already observing);
 * DLOCK_ENOTSUP where the backend cannot (Redis, Redlock, zk://), naming
 * it; or another negative code (not observing). One thread per observer;
 * thread-safe. */
DLOCK_API int dlock_leader_observe(dlock_leader *l, dlock_leader_observe_cb cb,
                                   void *ud);

/* Leaves the election (its node is deleted: the next participant is
 * elected) and frees l. The callback is not called once this returns
 * (except from within the callback itself, see dlock_leader_cb). On
 * zk:// it waits at most 100 ms for the server to confirm the delete: one
 * that does not answer in time gets it when it answers again (the request
 * was sent), or the session's end takes the node. An observer stops
 * (its callback is not called once this returns). Accepts NULL. */
DLOCK_API void dlock_leader_free(dlock_leader *l);

/* ---- Permit-expirable semaphore (Redisson RPermitExpirableSemaphore) ----
 * A semaphore whose permits have ids and leases: a permit taken without a
 * lease is renewed by the client's watchdog while the client lives, so the
 * permits of a holder that crashed come back one lease later. Handles are
 * thread-safe; free them before closing their client (their permits then
 * stop being renewed). */
typedef struct dlock_permits dlock_permits;
#define DLOCK_PERMIT_ID_LEN 33 /* 32 hex digits and a NUL */
/* Called on the watchdog thread (an event-loop client: the loop's thread)
 * when a permit is lost: its renewal or a
 * check finds it gone (its lease ended, it was force-released, the server
 * restarted...), or its fixed lease ran out before release. */
typedef void (*dlock_permit_lost_cb)(dlock_permits *p, const char *id,
                                     void *ud);

/* A handle for the permit-expirable semaphore NAME (copied; nothing is
 * sent). Returns 0 and stores it in *out, or DLOCK_EINVAL,
 * DLOCK_ENAMETOOLONG or DLOCK_ENOMEM (then *out is NULL). Free with
 * dlock_permits_free. */
DLOCK_API int dlock_permits_new(dlock_client *c, const char *name,
                                dlock_permits **out);
/* Frees the handle; the permits taken through it stop being renewed and
 * come back after their lease. Accepts NULL. */
DLOCK_API void dlock_permits_free(dlock_permits *p);
/* As dlock_semaphore_try_set_permits / _add_permits. */
DLOCK_API int dlock_permits_try_set(dlock_permits *p, int permits);
DLOCK_API int dlock_permits_add(dlock_permits *p, int permits);
/* The permits available now, after taking back those whose lease ended;
 * or a negative code. */
DLOCK_API int dlock_permits_get_available(dlock_permits *p);
/* Takes one permit, waiting up to wait_ms (0: one try, < 0: no limit)
 * without polling (a release wakes a waiter; a lease that ends is waited
 * for). lease_ms > 0: a fixed lease; <= 0: the watchdog lease, renewed
 * until released. Writes the permit's id to `id`. Returns 0,
 * DLOCK_EBUSY when none came in time, DLOCK_ELATE when the grant came
 * after its lease could have ended (given back), DLOCK_EINVAL for a lease
 * over DLOCK_LEASE_MAX_MS, or another code (then nothing is taken). Blocks
 * the calling thread; thread-safe. */
DLOCK_API int dlock_permits_try_acquire(dlock_permits *p, int64_t wait_ms,
                                        int64_t lease_ms,
                                        char id[DLOCK_PERMIT_ID_LEN]);
/* As dlock_permits_try_acquire with no wait limit (Redisson's acquire()
 * and acquire(lease)). */
DLOCK_API int dlock_permits_acquire(dlock_permits *p, int64_t lease_ms,
                                    char id[DLOCK_PERMIT_ID_LEN]);
/* Gives permit `id` back. Returns 0; DLOCK_ELOST if its lease had ended (it
 * was taken back, or is now); DLOCK_ENOTOWNER if no such permit is taken
 * (never issued, or already released); DLOCK_EINVAL for a malformed id.
 * Nothing changes on the server unless the permit was there. */
DLOCK_API int dlock_permits_release(dlock_permits *p, const char *id);
/* Takes permit `id` back whoever holds it (an operator's tool: dlock
 * release --force --permit) and wakes a waiter; a dlock client holding it
 * hears of it at once and reports it lost (dlock_permits_on_lost). Returns
 * 1 taken back, 0 no such permit is out (nothing changed), DLOCK_EINVAL for
 * a malformed id, DLOCK_EWRONGTYPE if the name holds something else, or
 * another negative code. Thread-safe. */
DLOCK_API int dlock_permits_force_release(dlock_permits *p, const char *id);
/* As dlock_lock_validity, for a permit this client took. */
DLOCK_API int dlock_permits_validity(dlock_permits *p, const char *id,
                                     int64_t *ms);
/* Registers `cb` (NULL to clear) for this handle's lost permits. */
DLOCK_API void dlock_permits_on_lost(dlock_permits *p, dlock_permit_lost_cb cb,
                                     void *ud);

/* ---- Blocking queue / deque (Redisson RBlockingQueue, RBlockingDeque) ----
 * A list on the server holding each value as its bytes (what Redisson's
 * StringCodec and ByteArrayCodec store), so Java services and C services
 * share it. On etcd:// it is etcd's contrib/recipes Queue (a key per value,
 * shared with Go's recipe.Queue), its head, delayed values and reliable
 * takes on dlock's keys beside it, delays counted by the offering client's
 * clock (docs/WIRE.md). Unbounded: an offer never waits (Redisson's put is
 * the same call). Handles are thread-safe; free them before closing their
 * client. */
typedef struct dlock_queue dlock_queue;

/* A handle for the queue NAME (copied; nothing is sent). Returns 0 and
 * stores it in *out, or DLOCK_EINVAL, DLOCK_ENAMETOOLONG or DLOCK_ENOMEM
 * (then *out is NULL). Free with dlock_queue_free. */
DLOCK_API int dlock_queue_new(dlock_client *c, const char *name,
                              dlock_queue **out);
/* As dlock_queue_new, for the queue NAME bound to Redisson's delayed queue
 * (RDelayedQueue of NAME): this handle's polls first move to NAME every
 * delayed value that is due by the server's clock (all of them at the
 * first poll after a restart), and their waits also end when the next
 * delayed value comes due. */
DLOCK_API int dlock_queue_new_delayed(dlock_client *c, const char *name,
                                      dlock_queue **out);
/* Frees the handle. Accepts NULL. */
DLOCK_API void dlock_queue_free(dlock_queue *q);
/* Appends `len` bytes at `value` (copied; may be empty) at the tail
 * (offer_first: at the head) and wakes one waiting poll. Returns 0,
 * DLOCK_EWRONGTYPE if the name holds something else (nothing changed), or
 * another negative code (then the value may or may not be in). Blocks the
 * calling thread; thread-safe. */
DLOCK_API int dlock_queue_offer(dlock_queue *q, const void *value,
                                size_t len);
DLOCK_API int dlock_queue_offer_first(dlock_queue *q, const void *value,
                                      size_t len);
/* Takes the value at the head (poll_last: the tail), waiting up to wait_ms
 * (0: one look, < 0: no limit) for one, without holding a connection.
 * Returns 0 with the value in *value (malloc'ed, a NUL after its *len
 * bytes; free with dlock_queue_value_free) and its length in *len (len may
 * be NULL); DLOCK_EBUSY when none came in time; DLOCK_EWRONGTYPE if the
 * name holds something else (nothing changed); or another negative code
 * (then *value is NULL). Blocks the calling thread; thread-safe. */
DLOCK_API int dlock_queue_poll(dlock_queue *q, int64_t wait_ms, void **value,
                               size_t *len);
DLOCK_API int dlock_queue_poll_last(dlock_queue *q, int64_t wait_ms,
                                    void **value, size_t *len);
/* As dlock_queue_poll / _poll_last with no wait limit (Redisson's take()
 * and takeLast()). */
DLOCK_API int dlock_queue_take(dlock_queue *q, void **value, size_t *len);
DLOCK_API int dlock_queue_take_last(dlock_queue *q, void **value,
                                    size_t *len);
/* Offers `len` bytes at `value` (copied) to the delayed queue, due
 * delay_ms (0 .. a year) from now by the server's clock: Redisson's layout
 * (docs/WIRE.md), so Redisson's transfer or a delayed handle's poll moves
 * it to the queue once due. Returns 0, DLOCK_EINVAL for a delay out of
 * range, DLOCK_EWRONGTYPE if one of the keys holds something else (nothing
 * changed), or another negative code. */
DLOCK_API int dlock_queue_offer_delayed(dlock_queue *q, int64_t delay_ms,
                                        const void *value, size_t len);
/* The values in the queue now (delayed_size: the delayed values not yet
 * moved) in *n. Returns 0 or a negative code. */
DLOCK_API int dlock_queue_size(dlock_queue *q, int64_t *n);
DLOCK_API int dlock_queue_delayed_size(dlock_queue *q, int64_t *n);
/* A reliable take: as dlock_queue_poll, but the value also moves to this
 * handle's processing list on the server, where it stays until
 * dlock_queue_ack. The handle is a consumer with a lease (the client's
 * watchdog lease, renewed by its watchdog while the handle lives): if the
 * process dies, or the handle is freed, before the ack, the value goes back
 * to the head of the queue once the lease has ended (at the next reliable
 * take by anyone), so a crash between take and processing loses nothing;
 * a value may then be taken twice, but acknowledged once. Thread-safe. */
DLOCK_API int dlock_queue_poll_reliable(dlock_queue *q, int64_t wait_ms,
                                        void **value, size_t *len);
/* Acknowledges one value (len bytes) this handle took reliably: it leaves
 * the processing list for good. Returns 0, DLOCK_ENOTOWNER if no such value
 * is there (never taken through this handle, acknowledged already, or its
 * consumer's lease ended and it went back), or another negative code. */
DLOCK_API int dlock_queue_ack(dlock_queue *q, const void *value, size_t len);
/* Frees a value a poll returned. Accepts NULL. */
DLOCK_API void dlock_queue_value_free(void *value);

/* ---- Fenced resources: writes that a stale holder cannot make ----
 * A fenced resource is a value on the lock's own servers with, beside it,
 * the highest fencing token that wrote it (docs/SAFETY.md, "Fenced
 * resources"; the layout per backend: docs/WIRE.md). A write carries a
 * token (the one a dlock_lock_*acquire returned, or $DLOCK_TOKEN inside
 * `dlock run`) and happens only if that token is at least the highest the
 * resource has seen, in one atomic step on the server: a holder paused
 * past its lease, whose lock went to a later holder that wrote, is
 * refused. RESOURCE is a name as a lock's (the client's key prefix comes
 * first); keep it apart from the lock names. Redis Cluster: one key (a
 * lock and a resource checked together by dlock_fence_set_held must share
 * a hash tag). Redlock has none (DLOCK_ENOTSUP): docs/SAFETY.md says why.
 * Blocking calls, any thread; an event-loop client uses their _async
 * forms (dlock_async.h) and gets DLOCK_EINVAL here. */

/* Writes `len` bytes at `value` (copied; may be empty) to RESOURCE, with
 * `token` (> 0) as its fence, if token >= the resource's fence (a missing
 * resource has fence 0; an equal token rewrites). Returns 0 written;
 * DLOCK_ESTALE when the resource has a higher fence (nothing changed);
 * DLOCK_EWRONGTYPE when something that is not a fenced resource is at the
 * name (nothing changed); DLOCK_EINVAL (NULL, token 0); DLOCK_ENOTSUP
 * (Redlock); DLOCK_ENOTACKED (min_replicas_acked on Redis: written, but
 * too few replicas acknowledged it in time, so a failover may lose it); or
 * another negative code (then the write may or may not have happened:
 * retry with the same token). */
DLOCK_API int dlock_fence_set(dlock_client *c, const char *resource,
                              const void *value, size_t len, uint64_t token);
/* As dlock_fence_set with the token of the calling thread's hold of `l`
 * (its explicit owner's), written only if that hold is still the lock's on
 * the server, checked in the same atomic step (Redis: the owner's field or
 * value at the lock's key; ZooKeeper: the hold's node; etcd: the hold's
 * key with its create revision). Returns as dlock_fence_set, and
 * DLOCK_ENOTOWNER when this client has no such hold (a reader's hold has
 * no token: DLOCK_EINVAL), DLOCK_ELOST when the server says the lock is no
 * longer this hold's (expired, force-released, taken by another): nothing
 * changed. */
DLOCK_API int dlock_fence_set_held(dlock_lock *l, const char *resource,
                                   const void *value, size_t len);
/* Reads RESOURCE: 1 with its value in *value (malloc'ed, a NUL after its
 * *len bytes; free with dlock_fence_value_free; value may be NULL: only
 * the fence) and its fence in *fence (may be NULL); 0 when there is none
 * (*value NULL, *len and *fence 0); DLOCK_EWRONGTYPE; or another negative
 * code. */
DLOCK_API int dlock_fence_get(dlock_client *c, const char *resource,
                              void **value, size_t *len, uint64_t *fence);
/* Deletes RESOURCE, value and fence, whatever its fence (an operator's
 * reset: a stale token could write after it). Returns 1 deleted, 0 none
 * there, DLOCK_EWRONGTYPE (nothing changed), or a negative code. */
DLOCK_API int dlock_fence_del(dlock_client *c, const char *resource);
/* Frees a value dlock_fence_get returned. Accepts NULL. */
DLOCK_API void dlock_fence_value_free(void *value);

/* ---- Names of 0.2, deprecated in 0.3 (removed in 0.4) ----
 * Each is its replacement under its old name: the getters say get_, a
 * call with a wait limit says try_, and the permit-expirable semaphore's
 * calls no longer repeat "permits". */
DLOCK_API DLOCK_DEPRECATED(
    "use "
    "dlock_semaphore_get_"
    "available") int dlock_semaphore_available(dlock_semaphore *s);
DLOCK_API DLOCK_DEPRECATED(
    "use dlock_permits_get_available") int dlock_permits_available(dlock_permits
                                                                       *p);
DLOCK_API DLOCK_DEPRECATED(
    "use dlock_permits_try_set") int dlock_permits_try_set_permits(dlock_permits
                                                                       *p,
                                                                   int permits);
DLOCK_API DLOCK_DEPRECATED(
    "use dlock_permits_add") int dlock_permits_add_permits(dlock_permits *p,
                                                           int permits);
DLOCK_API DLOCK_DEPRECATED("use dlock_latch_get_count") int dlock_latch_count(
    dlock_latch *l, int64_t *count);
DLOCK_API DLOCK_DEPRECATED(
    "use dlock_leader_get_current") int dlock_leader_get_leader(dlock_leader *l,
                                                                char *buf,
                                                                size_t len);
DLOCK_API DLOCK_DEPRECATED("use dlock_leader_try_await") int dlock_leader_await(
    dlock_leader *l, int64_t wait_ms);

#ifdef __cplusplus
}
#endif
#endif /* DLOCK_H */
