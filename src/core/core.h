/* core.h: the bottom layer, shared by every other: clocks, strings,
 * sleeping on a word, error details, URLs. Includes nothing of the layers
 * above (tests/check_layers.sh). */
#ifndef DLOCK_CORE_H
#define DLOCK_CORE_H

#include "dlock.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- util.c: clocks, strings, thread identity ---- */
int64_t dl_now_ms(void); /* CLOCK_MONOTONIC */
int64_t dl_now_us(void);
char *dl_strdup(const char *s); /* NULL -> NULL */
uint64_t dl_thread_id(void);    /* process-unique, never reused */
/* Writes v in decimal to buf (at least DL_INT_BUF bytes); returns buf.
 * For the hot path, where snprintf's cost shows. */
#define DL_INT_BUF 24
const char *dl_fmt_ll(char *buf, long long v);
/* Absolute CLOCK_MONOTONIC deadline for pthread_cond_timedwait. */
void dl_abstime(int64_t deadline_ms, struct timespec *ts);
/* pthread_cond_t that waits on CLOCK_MONOTONIC. */
int dl_cond_init(pthread_cond_t *cv);
int dl_random_bytes(unsigned char *buf, size_t len);
/* A random (version 4) UUID in canonical lower case into out: 0, or
 * DLOCK_ENOMEM when no random bytes could be had. */
int dl_uuid4(char out[37]);
/* FNV-1a over s, continuing from h (start with DL_HASH_SEED): for the
 * tables keyed by names (holds, subscriptions, the watchdog's filter). */
#define DL_HASH_SEED 2166136261u
uint32_t dl_hash(uint32_t h, const char *s);
/* Sleeps ms (<= 0: not at all); a signal may end it early. */
void dl_sleep_ms(int64_t ms);
/* Until when (dl_now_ms() time) a lease of lease_ms, set by a request sent
 * at `sent` and confirmed, is certainly valid: less an allowance for clocks
 * that run at different rates (Redlock's). */
int64_t dl_validity(int64_t sent, int64_t lease_ms);
/* A wait without a limit rides out a server's loss for this many command
 * timeouts at most (30 s by default): an outage that long is reported,
 * not hidden. Every backend's. */
#define DL_RIDE_TIMEOUTS 10
/* A wait riding out a server's loss (the etcd and ZooKeeper backends'):
 * the pauses so far and when the first began (dl_now_ms() time). Zeroed
 * ({0}, dl_ride_answered) at each answer. */
typedef struct dl_ride {
  int n;
  int64_t since;
} dl_ride;
/* The next pause of a wait riding out a server's loss: 20 ms, doubling to
 * 200 (counted in *r), the last one cut to the wait's deadline
 * (dl_now_ms() time; INT64_MAX: none, and then the ride ends
 * DL_RIDE_TIMEOUTS times command_timeout_ms after its first pause, as
 * the Redis backend's); 0 when the wait is to end. */
int64_t dl_ride_pause_ms(dl_ride *r, int64_t deadline,
                         int64_t command_timeout_ms);
/* The server answered: the ride (if any) is over, the next counts
 * afresh. */
static inline void dl_ride_answered(dl_ride *r) {
  r->n = 0;
  r->since = 0;
}
/* The one rule for a lease every backend keeps: 0 when lease_ms is at most
 * DLOCK_LEASE_MAX_MS, else DLOCK_EINVAL with the detail recorded for owner
 * (NULL: the open's), naming `what` ("lease_ms") and the largest accepted. */
int dl_check_lease(const struct dlock_client *owner, const char *what,
                   int64_t lease_ms);

/* ---- park.c: sleeping on a word ---- */
/* Sleeps while *word == expect, until deadline_ms (dl_now_ms() time).
 * Returns 0 once the word differs (acquire ordering), DLOCK_ETIMEDOUT at the
 * deadline. May return early only with the word changed. */
int dl_park_wait(atomic_int *word, int expect, int64_t deadline_ms);
/* Wakes the thread sleeping on word; call after changing it. The word's
 * memory must stay valid until this returns. */
void dl_park_wake(atomic_int *word);
/* The two ways behind them (tests): condition variables, and on Linux a
 * futex (the one dl_park_* use there). */
int dl_park_wait_cv(atomic_int *word, int expect, int64_t deadline_ms);
void dl_park_wake_cv(atomic_int *word);
#ifdef __linux__
int dl_park_wait_futex(atomic_int *word, int expect, int64_t deadline_ms);
void dl_park_wake_futex(atomic_int *word);
#endif

/* ---- error.c: detail messages, per client and per thread ---- */
/* Records `fmt` as the calling thread's detail for client `owner` (NULL:
 * for dlock_client_open) and returns err. */
int dl_seterr(const struct dlock_client *owner, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Forgets the calling thread's detail for `owner` (NULL: the open's). */
void dl_clearerr(const struct dlock_client *owner);
/* Copies the calling thread's detail for `owner` (NULL: the open's) into
 * buf (len bytes, "" when none): a failure path's cleanup calls, which
 * record their own, then put it back (dl_seterr(owner, rc, "%s", buf)). */
void dl_err_copy(const struct dlock_client *owner, char *buf, size_t len);
/* Moves the calling thread's detail for c to dlock_client_open's (a failed
 * open), or leaves it as it is when there is none. */
void dl_err_to_open(const struct dlock_client *c);
/* A new client's serial: never 0, never reused in the process. */
uint64_t dl_err_serial(void);
/* The first member of every struct dlock_client: what tags its details. */
typedef struct dl_err_tag {
  uint64_t serial; /* dl_err_serial() */
} dl_err_tag;
/* Maps a server error reply's text to a code. */
int dl_server_errcode(const char *msg);

/* ---- url.c ---- */
typedef struct dl_endpoint {
  char *host;      /* NULL for unix sockets */
  int port;        /* 0 for unix sockets */
  char *unix_path; /* NULL for TCP */
  bool tls;
  int db;
  char *username;
  char *password;
  /* redis-sentinel:// and rediss-sentinel://: the master's name, and in
   * hosts the sentinels to ask for its address (host/port above are then
   * unset); master_name NULL for every other URL. */
  char *master_name;
  /* redis-cluster:// and rediss-cluster://: cluster set, and in hosts the
   * seed nodes to ask for the slot map (host/port unset, db 0);
   * ?pubsub=auto|sharded|classic in cluster_pubsub (DL_PUBSUB_*). */
  bool cluster;
  int cluster_pubsub;
  int nhosts;
  struct dl_hostport {
    char *host;
    int port;
  } *hosts;
} dl_endpoint;

/* How a cluster's waiters hear releases: shard channels where the
 * servers have them (auto: Redisson's shardedSubscriptionMode AUTO), or
 * always, or classic PUBLISH/SUBSCRIBE. */
enum { DL_PUBSUB_AUTO, DL_PUBSUB_SHARDED, DL_PUBSUB_CLASSIC };

/* Parses redis://, rediss://, unix://, redis-sentinel://,
 * rediss-sentinel://, redis-cluster:// and rediss-cluster:// URLs into *ep
 * (cleared first; free with dl_endpoint_clear). Returns 0, or DLOCK_EURL with
 * err set and *ep cleared; DLOCK_EINVAL when it names one sentinel or seed node
 * twice (dl_url_distinct). */
int dl_url_parse(const char *url, dl_endpoint *ep, char *err, size_t errlen);
void dl_endpoint_clear(dl_endpoint *ep);
/* One server a URL names: a TCP host (an IPv6 one without brackets) and
 * port, or a socket path (host NULL). */
typedef struct dl_server_name {
  const char *host;
  int port;
  const char *path;
} dl_server_name;
/* Whether the n servers a URL of `scheme` ("redlock://") names are n
 * different servers: the same socket path, or the same port and a TCP
 * address in common once the names are resolved (localhost:P and
 * 127.0.0.1:P are one; a name that does not resolve is compared as
 * written), is one server named twice. A server named twice counts twice
 * towards a quorum, or stands for a member that is not there (a typo).
 * Returns 0, or DLOCK_EINVAL with err naming both spellings. May block on
 * name resolution. */
int dl_url_distinct(const char *scheme, const dl_server_name *sv, int n,
                    char *err, size_t errlen);
/* The URL with any password replaced by "***". Caller frees. */
char *dl_url_redact(const char *url);
/* The USER[:PASSWORD]@ of SCHEME://USER[:PASSWORD]@HOSTS... (before its
 * last '@' ahead of any '/', '?' or '#'), %-decoded: 0 with *user and
 * *password (each NULL when absent; caller frees) and *rest pointing past
 * the '@' (past "://" without one), or DLOCK_EURL (a bad %-escape; both
 * NULL). For the etcd backend and the CLI. */
int dl_url_userinfo(const char *url, const char **rest, char **user,
                    char **password);
/* A zk:// URL's parts. */
typedef struct dl_zk_url {
  char *connect;  /* HOST:PORT[,...][/CHROOT], as zookeeper_init takes it */
  char *chroot;   /* "/a/b", or NULL */
  char *user;     /* the digest identity's user, or NULL */
  char *password; /* its password from the URL, or NULL */
  int session_timeout_ms, connect_timeout_ms; /* ?session_timeout= etc.; 0
                                                 when not given */
  int acl; /* ?acl=: a DL_ZK_ACL_*, DL_ZK_ACL_DEFAULT when not given */
} dl_zk_url;
/* The ACL of the nodes made for a lock: creator-only when authenticated,
 * else open (default); creator-only; the creator's plus reading for all;
 * open to all. */
enum { DL_ZK_ACL_DEFAULT, DL_ZK_ACL_CREATOR, DL_ZK_ACL_READ, DL_ZK_ACL_OPEN };
/* Checks a zk://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT...][/CHROOT]
 * [?session_timeout=D&connect_timeout=D&acl=creator|read|open] URL (D:
 * 500ms, 10s, 1m) into *u
 * (free with dl_zk_url_clear): 0, or DLOCK_EURL with err filled in (then
 * *u is cleared), DLOCK_EINVAL when it names one server twice
 * (dl_url_distinct), DLOCK_ENOMEM. */
int dl_url_parse_zk(const char *url, dl_zk_url *u, char *err, size_t errlen);
void dl_zk_url_clear(dl_zk_url *u);

/* ---- loop.c: the event-loop seam (include/dlock_async.h) ----
 * One thread: everything here is called on the loop's thread, and every
 * callback runs there, from the loop's dispatch (dlock_loop_on_io,
 * dlock_loop_on_timer, dlock_loop_run), never from the call that set it up.
 * Many users share a loop: each watches its own fds and keeps its own
 * timers, all multiplexed onto the hooks' one timer by a binary heap. */
#include "dlock_async.h"

typedef struct dlock_loop dl_loop;
#define DL_EV_READ DLOCK_EV_READ
#define DL_EV_WRITE DLOCK_EV_WRITE

/* A watched fd: fn(ud, ready) runs when it is ready for some of the events
 * it watches (spurious calls are possible: an fd number reused within one
 * dispatch round; a non-blocking read or write then finds nothing). */
typedef void (*dl_watch_fn)(void *ud, int events);
typedef struct dl_watch dl_watch;
/* Starts a watch on fd, for no events yet. Returns 0 and *out (free with
 * dl_watch_free), DLOCK_EINVAL if fd is watched already, or DLOCK_ENOMEM. */
int dl_watch_new(dl_loop *lp, int fd, dl_watch_fn fn, void *ud,
                 dl_watch **out);
/* Watches for `events` (DL_EV_* bits; 0: none) from now on. Returns 0, or
 * DLOCK_EINVAL if the loop's hook refused (the watch then watches
 * nothing). */
int dl_watch_set(dl_watch *w, int events);
/* Stops watching and frees w (accepts NULL); fn is never called again,
 * even if w's fd was reported ready in the round being dispatched. The fd
 * may be closed right after. Safe from any callback. */
void dl_watch_free(dl_watch *w);

/* A timer, embedded in its user's struct (no allocation per wait): fn(ud)
 * runs once, at or after `at`. Timers due at the same ms fire in the order
 * they were started. */
typedef void (*dl_timer_fn)(void *ud);
typedef struct dl_timer {
  int64_t at;   /* dl_now_ms() time */
  uint64_t seq; /* start order: ties, and what one dispatch may fire */
  size_t pos;   /* 1 + index in the loop's heap; 0: not started */
  dl_timer_fn fn;
  void *ud;
} dl_timer;
void dl_timer_init(dl_timer *t, dl_timer_fn fn, void *ud);
/* (Re)starts t to fire at `at_ms` (dl_now_ms() time; the past: at the next
 * dispatch). O(log n). Returns 0, or DLOCK_ENOMEM (t is then stopped). */
int dl_timer_start(dl_loop *lp, dl_timer *t, int64_t at_ms);
/* Stops t if started (O(log n)); its fn will not run. Safe from any
 * callback, including t's own and another timer's in the same dispatch. */
void dl_timer_stop(dl_loop *lp, dl_timer *t);
static inline bool dl_timer_active(const dl_timer *t) { return t->pos != 0; }
/* Timers started on lp (tests). */
size_t dl_loop_timers(const dl_loop *lp);
/* The calls made so far to the hooks' watch and timer (the built-in
 * driver's epoll_ctl and timerfd_settime; tests). */
void dl_loop_hook_calls(const dl_loop *lp, uint64_t *watch, uint64_t *timer);

/* Work put off to the end of the loop's dispatch under way (of the round
 * of dlock_loop_run, or of one dlock_loop_on_io / dlock_loop_on_timer
 * call), embedded in its user's struct: a connection's write of the
 * requests its callbacks queued, in one system call, without asking the
 * loop for writability. */
typedef struct dl_defer {
  struct dl_defer *prev, *next;
  void (*fn)(void *ud);
  void *ud;
  bool queued;
} dl_defer;
void dl_defer_init(dl_defer *d, void (*fn)(void *ud), void *ud);
/* Puts d's fn off to the end of the dispatch under way (once, however
 * often it is added). Returns false, and queues nothing, outside a
 * dispatch: the caller does the work some other way. */
bool dl_defer_add(dl_loop *lp, dl_defer *d);
/* Takes d off the queue (its fn will not run); safe if not queued. */
void dl_defer_cancel(dl_loop *lp, dl_defer *d);

/* ---- offload.c: blocking work beside an event loop ----
 * For a backend whose client library blocks or keeps threads of its own
 * (libzookeeper-mt): each job runs on a thread of its own, and is finished
 * on the loop's thread, which an eventfd the loop watches wakes; the
 * backend may wake the loop for work of its own too (loss notices). */
typedef struct dl_offload dl_offload;
typedef struct dl_job dl_job;
struct dl_job {
  void (*run)(dl_job *);    /* on the job's thread */
  void (*finish)(dl_job *); /* then on the loop's thread (or in
                               dl_offload_free): tells its caller, frees */
  atomic_bool cancelled;    /* set by dl_offload_cancel */
  dl_job *next;             /* the offload's */
  dl_offload *o;
};
/* An offload on lp: 0 and *out, or a negative code (detail recorded for
 * dlock_client_open). woken(ud), if not NULL, runs on the loop's thread
 * after each dl_offload_wake, before the jobs done are finished. */
int dl_offload_new(dl_loop *lp, void (*woken)(void *), void *ud,
                   dl_offload **out);
/* Runs j->run on a new thread, then j->finish on the loop's: 0, or
 * DLOCK_ENOMEM (no thread: j did not start and is still the caller's). */
int dl_offload_start(dl_offload *o, dl_job *j);
/* Asks for woken() on the loop's thread soon. Any thread. */
void dl_offload_wake(dl_offload *o);
/* Marks j cancelled (dl_offload_cancelled says so on its thread: its wait
 * ends; waking the wait is the caller's). Any thread. */
void dl_offload_cancel(dl_job *j);
/* On a job's thread: whether its job is cancelled; false elsewhere. */
bool dl_offload_cancelled(void);
/* Waits for the jobs' threads (their waits must be ending: the caller has
 * woken them), finishes every job done, stops watching and frees o.
 * Accepts NULL. On the loop's thread. */
void dl_offload_free(dl_offload *o);

/* ---- fenced.c: a fenced resource as one value (ZooKeeper, etcd) ---- */
/* "dlock-fence <fence>\n" and the value's vlen bytes, malloc'ed (a NUL
 * after it): its length in *len, or NULL out of memory. */
char *dl_fenced_pack(uint64_t fence, const void *value, size_t vlen,
                     size_t *len);
/* Reads that form from data (len bytes): the value's offset, with *fence;
 * or -1 when data is not one. */
long dl_fenced_unpack(const char *data, size_t len, uint64_t *fence);

#endif /* DLOCK_CORE_H */
