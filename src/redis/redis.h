/* redis.h: the Redis layer: the pipelined connection and its handshake,
 * the Lua scripts, the link to a deployment (commands and subscriptions),
 * the subscriber connection, Redisson's key and channel names, and the
 * backend that implements the typed operations of core/backend.h over a
 * link. Nothing above this layer sees a Redis reply. */
#ifndef DLOCK_REDIS_H
#define DLOCK_REDIS_H

#include "../core/backend.h"
#include "../net/net.h"

struct redisReply;

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
#include "lua/scripts.def"
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

/* ---- link.c: how the Redis operations reach a deployment ----
 * Scripts in, replies out, and subscriptions to wait on: one server today
 * (link.c); Sentinel (a resolver before each connect) and Cluster (a
 * router by slot) will be other links under the same operations. */
typedef struct dl_rlink dl_rlink;
typedef struct dl_sub dl_sub;

typedef struct dl_rlink_ops {
  const char *name;
  /* Runs a script (EVALSHA, falling back to EVAL on NOSCRIPT) and returns
   * its reply (caller frees), or a negative code with the detail recorded.
   * A script error reply becomes a code too. */
  int (*eval)(dl_rlink *b, int script, int nkeys, const char **keys,
              int nargs, const char **args, struct redisReply **reply);
  /* Starts many evals at once and collects their replies in order, waiting
   * until deadline (dl_now_ms() time; 0: the command timeout); each
   * replies[i] is a reply or NULL with errs[i] set. */
  int (*eval_many)(dl_rlink *b, int64_t deadline, int n, int script,
                   const int *nkeys,
                   const char *const *const *keys, const int *nargs,
                   const char *const *const *args,
                   struct redisReply **replies, int *errs);
  int (*command)(dl_rlink *b, int argc, const char **argv,
                 struct redisReply **reply);
  /* Waiting without polling: a reference-counted subscription; `mode`
   * (dl_wake_mode) says what a message on the channel wakes. Waits until
   * deadline for the server to confirm it. A negative deadline takes a
   * reference only to a subscription already confirmed (one that lingers,
   * or that another waiter holds), else returns NULL at once. */
  dl_sub *(*sub_ref)(dl_rlink *b, const char *channel, int mode,
                     int64_t deadline);
  /* Waits for one wake-up until deadline. Sleepers are woken in the order
   * of `since`, when each began waiting for its lock. `grant` (or NULL) is
   * the waiter's own DL_WAKE_GRANT subscription: a message there wakes this
   * sleeper alone. Returns 1 woken (or a grant is pending), 0 timed out,
   * DLOCK_ECLOSED on close. */
  int (*sub_wait)(dl_rlink *b, dl_sub *s, int64_t deadline, int64_t since,
                  dl_sub *grant);
  /* A DL_WAKE_GRANT subscription: 1 and *token if a grant came (taken
   * here), 0 if not, -1 if no grant can come (not subscribed, or no
   * subscriber connection: the waiter must not join the hand-off queue). */
  int (*sub_grant)(dl_rlink *b, dl_sub *s, uint64_t *token);
  /* Drops a reference. With `linger`, a subscription nobody references any
   * more stays subscribed for a while, so the next waiter on the channel
   * finds it confirmed. A waiter that may still be in a hand-off queue (it
   * could not leave it) passes false: a grant must then find it deaf. */
  void (*sub_unref)(dl_rlink *b, dl_sub *s, bool linger);
  /* Wakes every thread asleep on the subscription (no permits). */
  void (*sub_kick)(dl_rlink *b, dl_sub *s);
  /* Tells fn(ud, key, len) (on a backend thread, see dl_pubsub_listen)
   * whenever it hears that a key may have been taken from its holder: a
   * revocation on `revoke_channel` (published by any client's force
   * release), or the server's keyspace events for del and expired where
   * they are enabled. Returns 0, or a negative code; a backend that cannot
   * hear them returns 0 and tells nothing (holds are then checked at each
   * renewal only). */
  int (*watch_losses)(dl_rlink *b, const char *revoke_channel,
                      dl_notice_fn fn, void *ud);
  void (*free)(dl_rlink *b);
} dl_rlink_ops;

struct dl_rlink {
  const dl_rlink_ops *ops;
};

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

/* ---- names.c: Redisson's key and channel names ---- */
/* Redisson's derived name "<prefix>:{<key>}", or "<prefix>:<key>" when the
 * key has its own hash tag (same slot either way), into out (len bytes). */
void dl_derived_into(char *out, size_t len, const char *prefix,
                     const char *key);
/* Redisson's suffixed name "{<key>}:<suffix>" ("<key>:<suffix>" when the
 * key has a hash tag), into out (len bytes). */
void dl_derived_suffix_into(char *out, size_t len, const char *key,
                            const char *suffix);
#define DL_DERIVED_MAX (DLOCK_KEY_PREFIX_MAX + DLOCK_NAME_MAX + 48)

/* ---- backend.c: the typed operations over a link ---- */
typedef struct dl_redis {
  dl_backend base;
  dl_rlink *link;
  dl_backend_env env;
  dl_conn_config cfg; /* what the link connects with (it borrows it) */
  void *notice;       /* watch_losses' relay to the client */
  /* Request ids of releases, "<nonce>:<seq>": unique across processes even
   * with an explicit client_id (a restarted process reuses it). */
  char release_nonce[17];
  atomic_uint_fast64_t release_seq;
} dl_redis;

/* The backend for redis://, rediss:// and unix:// URLs (one server). */
int dl_redis_backend_new(const dlock_client_options *opts,
                         const dl_backend_env *env, dl_backend **out);
/* The typed operations over a link made elsewhere (the reply fuzzer's),
 * which the backend then owns. */
int dl_redis_backend_over(dl_rlink *link, const dl_backend_env *env,
                          dl_backend **out);
/* The single-server link: nconn command connections and, unless env says
 * to wait by backoff, a subscriber connection. */
int dl_single_link_new(const dl_conn_config *cfg, const dl_backend_env *env,
                       int nconn, dl_rlink **out);
/* Counters for tests and the benchmark (b: a dl_redis_backend_new one). */
uint64_t dl_redis_backend_round_trips(dl_backend *b);
uint64_t dl_redis_backend_wakeups(dl_backend *b);
uint64_t dl_redis_backend_direct_wakeups(dl_backend *b);
bool dl_redis_backend_sleeper_reads(dl_backend *b);

/* The operations of the backend table, by file. */
int dl_redis_lock_acquire(dl_backend *b, dl_acquire *a);
int dl_redis_lock_release(dl_backend *b, const dl_lock_ref *l,
                          int64_t lease_ms, int count);
int dl_redis_lock_force_release(dl_backend *b, const dl_lock_ref *l);
int dl_redis_lock_query(dl_backend *b, const dl_lock_ref *l, dl_lock_query q,
                        long long *v);
int dl_redis_inspect(dl_backend *b, const char *key, dlock_lock_state *st);
int dl_redis_scan(dl_backend *b, const char *match, size_t prefix_len,
                  dlock_scan_cb cb, void *ud);
int dl_redis_sem_acquire(dl_backend *b, const dl_sync_ref *s, int permits,
                         bool wait, int64_t deadline);
int dl_redis_permit_acquire(dl_backend *b, const dl_sync_ref *s,
                            const char *id, int64_t lease_ms, bool wait,
                            int64_t deadline, int64_t *valid_until);
int dl_redis_latch_await(dl_backend *b, const dl_sync_ref *s, bool wait,
                         int64_t deadline);
int dl_redis_sync_update(dl_backend *b, const dl_sync_ref *s, dl_sync_op op,
                         long long n, const char *id, long long *v);

/* Shared by those files: a script answered by one integer in [lo, hi] (0
 * and *v, or a negative code: DLOCK_EPROTO for any other reply), and the
 * waiting loop of the kinds on a channel. */
/* The same check of a reply in hand (freed here). */
int dl_redis_int_reply(dl_redis *r, struct redisReply *rep, long long lo,
                       long long hi, long long *v);
int dl_redis_eval_int(dl_redis *r, int script, int nkeys, const char **keys,
                      int nargs, const char **args, long long lo, long long hi,
                      long long *v);
/* One try of what a waiter wants: returns 1 done, a negative code, or 0 not
 * yet, with *recheck_ms how soon to try again even without a message (-1:
 * only on a message). */
typedef int (*dl_try_fn)(void *ctx, int64_t *recheck_ms);
/* Tries, and until it is done or the deadline (with `wait`), sleeps on
 * `channel` (mode: dl_wake_mode) between tries, subscribed before the
 * second try so that no message is missed. Returns 1, 0 when the wait ran
 * out, or a negative code. */
int dl_redis_wait_for(dl_redis *r, const char *channel, int mode, bool wait,
                      int64_t deadline, dl_try_fn fn, void *ctx);

#endif /* DLOCK_REDIS_H */
