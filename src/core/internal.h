/* internal.h: types and functions shared by libdlock's modules, not exported. */
#ifndef DLOCK_INTERNAL_H
#define DLOCK_INTERNAL_H

#include "dlock.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct redisReply;

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
/* FNV-1a over s, continuing from h (start with DL_HASH_SEED): for the
 * tables keyed by names (holds, subscriptions, the watchdog's filter). */
#define DL_HASH_SEED 2166136261u
uint32_t dl_hash(uint32_t h, const char *s);
/* Sleeps ms (<= 0: not at all); a signal may end it early. */
void dl_sleep_ms(int64_t ms);

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
/* Moves the calling thread's detail for c to dlock_client_open's (a failed
 * open), or leaves it as it is when there is none. */
void dl_err_to_open(const struct dlock_client *c);
/* A new client's serial: never 0, never reused in the process. */
uint64_t dl_err_serial(void);
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
} dl_endpoint;

int dl_url_parse(const char *url, dl_endpoint *ep, char *err, size_t errlen);
void dl_endpoint_clear(dl_endpoint *ep);
/* The URL with any password replaced by "***". Caller frees. */
char *dl_url_redact(const char *url);

/* ---- net/io.c: one socket, plain or TLS, deadline-bounded ---- */
typedef struct dl_io dl_io;
typedef struct dl_tls_config {
  const char *ca_file, *ca_dir, *cert_file, *key_file, *server_name;
  int verify;
} dl_tls_config;

typedef struct dl_tls_ctx dl_tls_ctx;
int dl_tls_ctx_new(const dl_tls_config *cfg, dl_tls_ctx **out, char *err,
                   size_t errlen);
void dl_tls_ctx_free(dl_tls_ctx *t);

int dl_io_connect(const dl_endpoint *ep, dl_tls_ctx *tls,
                  const char *server_name, int64_t deadline_ms, dl_io **out,
                  char *err, size_t errlen);
/* Read up to len bytes. Returns >0 bytes, or a negative code. */
int dl_io_read(dl_io *io, char *buf, size_t len, int64_t deadline_ms);
/* The same, and returns 0 when the fd `bell` becomes readable before any
 * byte came (the caller drains it). One thread reads a dl_io at a time. */
int dl_io_read_bell(dl_io *io, char *buf, size_t len, int64_t deadline_ms,
                    int bell);
/* Write all of buf. Returns 0 or a negative code. */
int dl_io_write(dl_io *io, const char *buf, size_t len, int64_t deadline_ms);
/* Makes blocked and later reads/writes fail at once; thread-safe. */
void dl_io_shutdown(dl_io *io);
void dl_io_close(dl_io *io);

/* ---- redis/conn.c: pipelined command connection ---- */
typedef struct dl_conn dl_conn;
typedef struct dl_req dl_req;

typedef struct dl_conn_config {
  dl_endpoint ep;
  dl_tls_ctx *tls;
  const char *server_name;
  const char *client_name;
  int connect_timeout_ms;
  int command_timeout_ms;
  int reconnect_min_ms, reconnect_max_ms;
  const struct dlock_client *err_owner; /* where dl_seterr records details */
} dl_conn_config;

/* Connection that reconnects on demand; `cfg` must outlive it. */
int dl_conn_new(const dl_conn_config *cfg, dl_conn **out);
/* Connects now; returns 0 or a negative code (detail recorded). */
int dl_conn_connect(dl_conn *c);
void dl_conn_free(dl_conn *c);

/* Queues a command (argv copied) and writes it, pipelined with other
 * threads' commands. `ping_first`: a PING goes just ahead of it, in the same
 * write, and its reply is dropped (DL_EVAL_WAKE_FIRST says why). Returns a
 * request to pass to dl_req_wait, or NULL with *err set (nothing queued). */
dl_req *dl_conn_send(dl_conn *c, int argc, const char **argv,
                     const size_t *argvlen, bool ping_first, int *err);
/* Waits for the reply until deadline_ms. Returns 0 and stores the reply
 * (caller frees with freeReplyObject; may be an error reply), or a negative
 * code. Frees the request in every case. */
int dl_req_wait(dl_conn *c, dl_req *r, int64_t deadline_ms,
                struct redisReply **reply);
/* Send + wait with the command timeout. */
int dl_conn_call(dl_conn *c, int argc, const char **argv,
                 const size_t *argvlen, struct redisReply **reply);
/* The connection's round trips since creation (for tests and benchmarks). */
uint64_t dl_conn_batches(dl_conn *c);

/* Sets up a freshly connected socket: AUTH, SELECT, CLIENT SETNAME. */
int dl_conn_handshake(dl_io *io, const dl_conn_config *cfg, int64_t deadline,
                      char *err, size_t errlen);

/* ---- redis/scripts.c: the Lua scripts, embedded at build time ---- */
typedef struct dl_script {
  const char *name;
  const char *body;
  char sha[41];
} dl_script;

enum {
#define X(id, file) DL_SCRIPT_##id,
#include "../redis/lua/scripts.def"
#undef X
  DL_SCRIPT_COUNT
};
extern dl_script dl_scripts[DL_SCRIPT_COUNT];
/* Or'ed into eval's `script`: the script may publish to a waiter whose
 * wake-up matters more than this reply (a release that hands the lock on).
 * A PING then goes ahead of it in the same write. Redis writes its pending
 * replies to the clients that got output most recently first, so with this
 * connection's PONG already pending the published message goes out before
 * the script's reply rather than after it (docs/PERFORMANCE.md, "Grant
 * before reply"). */
#define DL_EVAL_WAKE_FIRST 0x100
void dl_scripts_init(void); /* computes the SHA1s once; thread-safe */

/* Told a key whose holds may have been taken away, or NULL: any key. */
typedef void (*dl_notice_fn)(void *ud, const char *key, size_t len);

/* ---- backend: what a lock kind needs from a deployment ---- */
typedef struct dl_backend dl_backend;
typedef struct dl_sub dl_sub;

typedef struct dl_backend_ops {
  const char *name;
  /* Runs a script (EVALSHA, falling back to EVAL on NOSCRIPT) and returns
   * its reply (caller frees), or a negative code with the detail recorded.
   * A script error reply becomes a code too. */
  int (*eval)(dl_backend *b, int script, int nkeys, const char **keys,
              int nargs, const char **args, struct redisReply **reply);
  /* Starts many evals at once and collects their replies in order, waiting
   * until deadline (dl_now_ms() time; 0: the command timeout); each
   * replies[i] is a reply or NULL with errs[i] set. */
  int (*eval_many)(dl_backend *b, int64_t deadline, int n, int script,
                   const int *nkeys,
                   const char *const *const *keys, const int *nargs,
                   const char *const *const *args,
                   struct redisReply **replies, int *errs);
  int (*command)(dl_backend *b, int argc, const char **argv,
                 struct redisReply **reply);
  /* Waiting without polling: a reference-counted subscription; `mode`
   * (dl_wake_mode) says what a message on the channel wakes. Waits until
   * deadline for the server to confirm it. A negative deadline takes a
   * reference only to a subscription already confirmed (one that lingers,
   * or that another waiter holds), else returns NULL at once. */
  dl_sub *(*sub_ref)(dl_backend *b, const char *channel, int mode,
                     int64_t deadline);
  /* Waits for one wake-up until deadline. Sleepers are woken in the order
   * of `since`, when each began waiting for its lock. `grant` (or NULL) is
   * the waiter's own DL_WAKE_GRANT subscription: a message there wakes this
   * sleeper alone. Returns 1 woken (or a grant is pending), 0 timed out,
   * DLOCK_ECLOSED on close. */
  int (*sub_wait)(dl_backend *b, dl_sub *s, int64_t deadline, int64_t since,
                  dl_sub *grant);
  /* A DL_WAKE_GRANT subscription: 1 and *token if a grant came (taken
   * here), 0 if not, -1 if no grant can come (not subscribed, or no
   * subscriber connection: the waiter must not join the hand-off queue). */
  int (*sub_grant)(dl_backend *b, dl_sub *s, uint64_t *token);
  /* Drops a reference. With `linger`, a subscription nobody references any
   * more stays subscribed for a while, so the next waiter on the channel
   * finds it confirmed. A waiter that may still be in a hand-off queue (it
   * could not leave it) passes false: a grant must then find it deaf. */
  void (*sub_unref)(dl_backend *b, dl_sub *s, bool linger);
  /* Wakes every thread asleep on the subscription (no permits). */
  void (*sub_kick)(dl_backend *b, dl_sub *s);
  /* Tells fn(ud, key, len) (on a backend thread, see dl_pubsub_listen)
   * whenever it hears that a key may have been taken from its holder: a
   * revocation on `revoke_channel` (published by any client's force
   * release), or the server's keyspace events for del and expired where
   * they are enabled. Returns 0, or a negative code; a backend that cannot
   * hear them returns 0 and tells nothing (holds are then checked at each
   * renewal only). */
  int (*watch_losses)(dl_backend *b, const char *revoke_channel,
                      dl_notice_fn fn, void *ud);
  void (*free)(dl_backend *b);
} dl_backend_ops;

struct dl_backend {
  const dl_backend_ops *ops;
};

/* Makes the backend a client talks to (one per deployment kind). */
typedef int (*dl_backend_factory)(dlock_client *c, const dl_conn_config *cfg,
                                  int nconn, dl_backend **out);
int dl_redis_backend_new(dlock_client *c, const dl_conn_config *cfg, int nconn,
                         dl_backend **out);
/* Counters for tests and the benchmark. */
uint64_t dl_redis_backend_round_trips(dl_backend *b);
uint64_t dl_redis_backend_wakeups(dl_backend *b);
uint64_t dl_redis_backend_direct_wakeups(dl_backend *b);
bool dl_redis_backend_sleeper_reads(dl_backend *b);

/* ---- pubsub.c: one subscriber connection per client ---- */
/* What a message wakes, by the channel's kind (Redisson's meanings). */
typedef enum dl_wake_mode {
  DL_WAKE_LOCK,  /* "1" every waiter (read unlock), else one (unlock) */
  DL_WAKE_COUNT, /* the message is a number n of permits: n waiters */
  DL_WAKE_ALL,   /* any message: every waiter (a latch reached zero) */
  DL_WAKE_GRANT, /* one waiter's own channel: "=<token>" hands it the lock */
  DL_WAKE_NOTICE /* wakes nobody: tells a dl_notice_fn the key it names */
} dl_wake_mode;
typedef struct dl_pubsub dl_pubsub;
int dl_pubsub_new(const dl_conn_config *cfg, dl_pubsub **out);
void dl_pubsub_free(dl_pubsub *p);
/* The first reference of a channel fixes its mode. */
dl_sub *dl_pubsub_ref(dl_pubsub *p, const char *channel, int mode,
                      int64_t deadline);
int dl_pubsub_wait(dl_pubsub *p, dl_sub *s, int64_t deadline, int64_t since,
                   dl_sub *grant);
/* Subscribes to `channel` (a pattern with `pattern`) for the pubsub's life,
 * again after every reconnect, without waiting for the confirmation. Each
 * message there names a key, which fn(ud, key, len) is told, on whichever
 * thread reads the subscriber connection, with the pubsub's lock held (fn
 * must only take leaf locks): for a channel the message itself, for a
 * pattern the channel after its first `strip` bytes when the message is
 * "del" or "expired" (keyspace events). After a reconnect fn is called with
 * key NULL: anything may have been missed. Returns 0 or DLOCK_ENOMEM. */
int dl_pubsub_listen(dl_pubsub *p, const char *channel, bool pattern,
                     size_t strip, dl_notice_fn fn, void *ud);
int dl_pubsub_grant(dl_pubsub *p, dl_sub *s, uint64_t *token);
void dl_pubsub_unref(dl_pubsub *p, dl_sub *s, bool linger);
void dl_pubsub_kick(dl_pubsub *p, dl_sub *s);
uint64_t dl_pubsub_wakeups(dl_pubsub *p);
/* Of those, the wake-ups read by the sleeper they woke (the reader role). */
uint64_t dl_pubsub_direct_wakeups(dl_pubsub *p);
/* Whether a sleeper holds the reader role now (tests). */
bool dl_pubsub_sleeper_reads(dl_pubsub *p);
/* Handles one reply as if read from the subscriber connection (the reply
 * fuzzer). Does not free r. */
void dl_pubsub_feed(dl_pubsub *p, struct redisReply *r);

/* ---- watchdog.c: one renewal scheduler per client ---- */
typedef struct dl_watchdog dl_watchdog;
typedef struct dl_renewal dl_renewal;

/* Called (from the watchdog thread) for a renewal found lost: r (alive for
 * the call, possibly already removed) and copies of its key and owner. */
typedef void (*dl_renewal_lost_fn)(void *ud, dl_renewal *r, const char *key,
                                   const char *owner);

/* `fn(ud, ...)` is called for each renewal found lost: the server no longer
 * has the hold, or no renewal was confirmed before its validity ran out. */
int dl_watchdog_new(dlock_client *c, int64_t lease_ms, dl_renewal_lost_fn fn,
                    void *ud, dl_watchdog **out);
/* Stops the thread (no more rounds or reports); checks are still taken,
 * and dropped. Accepts NULL; may be called twice. */
void dl_watchdog_stop(dl_watchdog *w);
void dl_watchdog_free(dl_watchdog *w);
/* Registers the hold of key by the owner "<client id>:<tail>", valid until
 * `valid_until` (dl_now_ms() time) unless renewed: with `renew`, renewed
 * every lease/3; without (a fixed lease), reported lost the moment its
 * validity runs out before it is removed. Either way checked at once when
 * dl_watchdog_check names its key. The strings are borrowed: they must
 * stay valid until dl_watchdog_remove(r) returns. Returns NULL on ENOMEM. */
dl_renewal *dl_watchdog_add(dl_watchdog *w, const char *key, const char *tail,
                            int64_t valid_until, bool renew);
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
/* The same for every hold (a revocation may have gone unheard). */
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

/* ---- holds.c: the client's own holds, guarded by c->holds_mu ---- */
#define DL_HOLD_BUCKETS 4096 /* fits the uint16_t bucket */
typedef struct dl_hold {
  struct dl_hold *next;
  const char *key;         /* borrowed from the handle `via` */
  dl_renewal *renewal;     /* its watchdog entry: renewed, or timed */
  void *via;               /* the handle whose lost callback reports it: a
                              dlock_lock, or a dlock_permits if `permit` */
  uint64_t token;
  int64_t lease_ms;
  int64_t valid_until;     /* dl_now_ms() time; the renewal's if later */
  int count;
  uint16_t bucket;
  bool lost;
  bool permit;             /* a permit of a permit-expirable semaphore */
  char tail[];             /* the owner id after "<client id>:" */
} dl_hold;

dl_hold *dl_hold_find(dlock_client *c, const char *key, const char *owner);
/* Until when (dl_now_ms() time) the hold is certainly valid: the send time
 * of the last acquire or renewal the server confirmed, plus the lease, less
 * a clock drift allowance. */
int64_t dl_hold_valid_until(dlock_client *c, const dl_hold *h);
/* The validity a confirmed request sent at `sent` gives. */
int64_t dl_validity(int64_t sent, int64_t lease_ms);
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

/* ---- client.c ---- */
struct dlock_client {
  uint64_t err_serial; /* dl_err_serial(): tags its detail messages */
  size_t id_len;
  pthread_mutex_t holds_mu;
  pthread_cond_t holds_cv;            /* a lost callback finished */
  void *in_lost_callback;             /* whose callback runs now */
  dl_hold *holds[DL_HOLD_BUCKETS];
  char *id;
  char *key_prefix;
  size_t prefix_len;
  int64_t watchdog_timeout_ms;
  int command_timeout_ms;
  int starvation_ms;
  int backoff_max_ms; /* > 0: waiters back off instead of subscribing */
  dl_conn_config conn_cfg;
  char *url_redacted;
  char *revoke_channel; /* "<key prefix>dlock_revoke" (docs/WIRE.md) */
  dl_backend *backend;
  dl_watchdog *watchdog;
  atomic_int closing;
  /* Request ids of releases, "<nonce>:<seq>": unique across processes even
   * with an explicit client_id (a restarted process reuses it). */
  char release_nonce[17];
  atomic_uint_fast64_t release_seq;
};

/* dlock_client_open with the backend made by `make` (the seam where other
 * deployments plug in; the reply fuzzer plugs in one fed from its input). */
int dl_client_open_with(const dlock_client_options *opts,
                        dl_backend_factory make, dlock_client **out);

/* ---- locks/kinds.c: what the lock kinds on a channel share ---- */
/* One try of what a waiter wants: returns 1 done, a negative code, or 0 not
 * yet, with *recheck_ms how soon to try again even without a message (-1:
 * only on a message). */
typedef int (*dl_try_fn)(void *ctx, int64_t *recheck_ms);
/* Tries, and until it is done or wait_ms (< 0: forever) runs out, sleeps on
 * `channel` (mode: dl_wake_mode) between tries, subscribed before the
 * second try so that no message is missed. Returns 1, 0 when the wait ran
 * out, or a negative code. */
int dl_wait_for(dlock_client *c, const char *channel, int mode,
                int64_t wait_ms, dl_try_fn fn, void *ctx);
/* Whether a semaphore's release goes out behind a PING (DL_EVAL_WAKE_FIRST),
 * so that its message reaches the waiters before its reply reaches the
 * releaser, which would otherwise often take the permits back before any
 * waiter could (as the lock's release, lock.c): yes when the handle's last
 * acquire had to wait, or its last release was heard by some client, as
 * others then likely wait. Any thread; a handle's hint is its own. */
typedef struct dl_wake_hint {
  atomic_bool waited, heard;
} dl_wake_hint;
/* DL_EVAL_WAKE_FIRST or 0, for a release through the handle. */
int dl_wake_hint_flags(dl_wake_hint *h);
/* After an acquire that succeeded or ran out of time; `waited`: it had to
 * wait for a message. */
void dl_wake_hint_acquired(dl_wake_hint *h, bool waited);
/* After a release; `heard`: some client heard its message. */
void dl_wake_hint_released(dl_wake_hint *h, bool heard);
/* Redisson's derived name "<prefix>:{<key>}", or "<prefix>:<key>" when the
 * key has its own hash tag (same slot either way), into out (len bytes). */
void dl_derived_into(char *out, size_t len, const char *prefix,
                     const char *key);
/* The same, allocated. Caller frees. */
char *dl_derived(const char *prefix, const char *key);
/* Redisson's suffixed name "{<key>}:<suffix>" ("<key>:<suffix>" when the
 * key has a hash tag). Caller frees. */
char *dl_derived_suffix(const char *key, const char *suffix);
/* 0, or DLOCK_EINVAL / DLOCK_ENAMETOOLONG with the detail recorded. */
int dl_check_name(dlock_client *c, const char *name);
/* Runs a script answered by one integer in [lo, hi]: 0 and *v, or a
 * negative code (DLOCK_EPROTO for any other reply). */
int dl_eval_int(dlock_client *c, int script, int nkeys, const char **keys,
                int nargs, const char **args, long long lo, long long hi,
                long long *v);
/* GET of an integer string (nil: 0) in the int32 range: 0 and *v, or a
 * negative code. */
int dl_get_int(dlock_client *c, const char *key, long long *v);

/* lock.c: the lock's key (prefix + name). */
const char *dl_lock_key(const struct dlock_lock *l);

/* lock.c: the watchdog's lost callback for the client's holds. */
void dl_lock_on_lost(void *ud, dl_renewal *r, const char *key,
                     const char *owner);
/* permits.c: tells a permit's handle that the permit was lost. Called
 * with no lock held; `p` stays alive (c->in_lost_callback). */
void dl_permit_lost(void *p, const char *owner);

/* "<prefix><fmt...>" with the client's key prefix. Caller frees. */
char *dl_key(const dlock_client *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Owner id for thread `tid`, or for the explicit owner string. */
int dl_owner_id(const dlock_client *c, const char *explicit_owner, char *buf,
                size_t len);

#endif /* DLOCK_INTERNAL_H */
