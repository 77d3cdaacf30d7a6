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
  /* Sentinel (ep.master_name set): the sentinels' own credentials, and
   * the watch that hears of failovers (NULL until it runs). */
  const char *sentinel_username, *sentinel_password;
  struct dl_sentinel_watch *watch;
} dl_conn_config;

/* ---- redis/sentinel.c: where a connection connects to ----
 * The endpoint resolver, asked before each connect by both drivers'
 * connections and the subscriber: for a single server cfg->ep itself; for
 * Sentinel (cfg->ep.master_name) the master that a sentinel names (asking
 * the sentinels in turn until one names a server whose ROLE is master).
 * Every connect asks again, so a connection lost in a failover comes back
 * to the new master. Blocks up to the deadline (also on an event loop's
 * thread, as name resolution does). */
typedef struct dl_target {
  dl_endpoint ep; /* borrows cfg->ep's strings; host points into hostbuf */
  char hostbuf[256];
  unsigned gen; /* the failovers heard of before it was resolved */
  bool named;   /* on DLOCK_ECONNECT: a sentinel named a master that could
                   not be used (unreachable, not yet ROLE master): a
                   failover under way, not a wrong URL */
} dl_target;
/* Fills *t. Returns 0, or a negative code with err set (DLOCK_ECONNECT:
 * no sentinel answered, or none knows the master's name, or none named a
 * usable master (t->named); DLOCK_EAUTH: the sentinels refused us; the
 * detail says which sentinel said what). Thread-safe. */
int dl_conn_target(const dl_conn_config *cfg, int64_t deadline, dl_target *t,
                   char *err, size_t errlen);
/* Whether a failover was heard of since a connection resolved with gen
 * (then the connection is dropped before its next request: it may lead to
 * the old master, which still takes writes until Sentinel demotes it).
 * False for a single server. Thread-safe. */
bool dl_target_moved(const dl_conn_config *cfg, unsigned gen);
/* Sentinel: starts the watch of cfg (a thread subscribed to +switch-master
 * on one sentinel after the other) and sets cfg->watch. Returns 0 or
 * DLOCK_ENOMEM. */
int dl_sentinel_watch_start(dl_conn_config *cfg);
/* Stops and frees cfg->watch (NULL: nothing). */
void dl_sentinel_watch_stop(dl_conn_config *cfg);

/* Connection that reconnects on demand; `cfg` must outlive it. */
int dl_conn_new(const dl_conn_config *cfg, dl_conn **out);
/* Connects now; returns 0 or a negative code (detail recorded). */
int dl_conn_connect(dl_conn *c);
/* Whether c's last connect failed only because the master the sentinels
 * named could not be used yet (dl_target's named): a failover under way. */
bool dl_conn_failing_over(dl_conn *c);
void dl_conn_free(dl_conn *c);
/* Closes the connection now: what is in flight on it fails with err (why
 * its detail); the next request reconnects (asking the resolver again). */
void dl_conn_drop(dl_conn *c, int err, const char *why);

/* Queues a command (argv copied) and writes it, pipelined with other
 * threads' commands. `ping_first`: a PING goes just ahead of it, in the same
 * write, and its reply is dropped (DL_EVAL_WAKE_FIRST says why). Returns a
 * request to pass to dl_req_wait, or NULL with *err set (nothing queued). */
dl_req *dl_conn_send(dl_conn *c, int argc, const char **argv,
                     const size_t *argvlen, bool ping_first, int *err);
/* As dl_conn_send, with ASKING just ahead of the command in the same
 * write (no other request between them: ASKING applies to the next
 * command on the connection), its reply dropped: a cluster's ASK
 * redirection. */
dl_req *dl_conn_send_asking(dl_conn *c, int argc, const char **argv,
                            const size_t *argvlen, int *err);
/* Waits for the reply until deadline_ms. Returns 0 and stores the reply
 * (caller frees with freeReplyObject; may be an error reply), or a negative
 * code. Frees the request in every case. */
int dl_req_wait(dl_conn *c, dl_req *r, int64_t deadline_ms,
                struct redisReply **reply);
/* Send + wait with the command timeout. */
int dl_conn_call(dl_conn *c, int argc, const char **argv,
                 const size_t *argvlen, struct redisReply **reply);
/* How the server up on c acknowledges replication (dl_conn_replicate's
 * cache): 0 not known yet, else DL_ACK_WAIT or DL_ACK_WAITAOF. */
enum { DL_ACK_WAIT = 1, DL_ACK_WAITAOF = 2 };
int dl_conn_ack_kind(dl_conn *c);
void dl_conn_set_ack_kind(dl_conn *c, int kind);
/* The connection's round trips since creation (for tests and benchmarks). */
uint64_t dl_conn_batches(dl_conn *c);

/* Replica acknowledgement on conn: a marker PUBLISH on
 * DL_REPLICATE_CHANNEL, then WAIT n timeout_ms (the rlink's `replicate`
 * entry says why); or, where the server has WAITAOF (Redis 7.2) and keeps
 * an append-only file, WAITAOF 1 n timeout_ms: the write fsynced there and
 * on n replicas, as Redisson does where WAITAOF is there. Asked once per
 * connection (CONFIG GET appendonly, WAITAOF 0 0 0), again after a
 * reconnect. Returns the replicas that acknowledged (>= 0; with WAITAOF,
 * 0 when the master's own fsync did not come), or a negative code with the
 * detail recorded for owner. */
int dl_conn_replicate(dl_conn *conn, int n, int timeout_ms,
                      int command_timeout_ms, const struct dlock_client *owner);

/* Connections for dl_conn_replicate apart from the command connections
 * (single.c): WAIT blocks the connection it is sent on, so a WAIT on a
 * command connection held up every request behind it (a ping waited out
 * a stalled replica's timeout). Each replicate takes an idle one, or a
 * new one, and gives it back; a few are kept. */
typedef struct dl_waitpool {
  pthread_mutex_t mu;
  const dl_conn_config *cfg;
  dl_conn *idle[8];
  int nidle;
} dl_waitpool;
void dl_waitpool_init(dl_waitpool *p, const dl_conn_config *cfg);
void dl_waitpool_free(dl_waitpool *p);
/* dl_conn_replicate on a connection of p. */
int dl_waitpool_replicate(dl_waitpool *p, int n, int timeout_ms,
                          int command_timeout_ms,
                          const struct dlock_client *owner);

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
/* Or'ed into eval's `script` by a cluster link in sharded mode: the
 * script's variant that publishes on its lock's channels with SPUBLISH
 * (shard channels, heard by SSUBSCRIBE on the slot's shard) instead of
 * PUBLISH, as Redisson's scripts do on Redis 7 clusters. The revocation
 * channel and the delayed queue's channels stay classic (every node hears
 * them; Redisson's delayed queue publishes with PUBLISH). */
#define DL_EVAL_SHARDED 0x200
/* The script of `script` (with DL_EVAL_SHARDED, its sharded variant).
 * After dl_scripts_init. */
const dl_script *dl_script_of(int script);
/* Or'ed into eval's `script`: the script may publish to a waiter whose
 * wake-up matters more than this reply (a release that hands the lock on).
 * A PING then goes ahead of it in the same write. Redis writes its pending
 * replies to the clients that got output most recently first, so with this
 * connection's PONG already pending the published message goes out before
 * the script's reply rather than after it (docs/PERFORMANCE.md, "Grant
 * before reply"). */
#define DL_EVAL_WAKE_FIRST 0x100
void dl_scripts_init(void); /* computes the SHA1s once; thread-safe */

/* ---- single.c: how the Redis operations reach a deployment ----
 * Scripts in, replies out, and subscriptions to wait on: one server today
 * (single.c); Sentinel (a resolver before each connect) and Cluster (a
 * router by slot) will be other links under the same operations. */
typedef struct dl_rlink dl_rlink;
typedef struct dl_sub dl_sub;

/* One step of an operation that waits on its link: an eval's reply, a
 * subscription's confirmation, a wake-up, a pause. The operations (release.c,
 * sem_latch.c) are state machines that start a step and go on when it is done.
 * A blocking link completes each step within the call that starts it (the
 * blocking driver: the operation runs to its end on the calling thread); an
 * event-loop link completes it later, on the loop's thread, and then calls
 * `resume` (the event-loop driver). */
typedef struct dl_pend {
  void (*resume)(struct dl_pend *p); /* set by the driver; event loop only */
  int rc;                   /* the step's result: 0 or a negative code;
                               a wake-up's 1 woken, 0 timed out */
  struct redisReply *reply; /* an eval's (rc 0), the operation frees it */
  dl_sub *sub;              /* a subscription's (rc 0) */
  void *link_data;          /* the link's, while the step is in flight */
  int step;                 /* which (DL_STEP_*), set by dl_redis_step_* */
  void *op;                 /* the operation's, for resume */
  bool pending;             /* started, not yet resumed */
  /* A command step's argument lengths (dl_redis_step_command_bin), or
   * NULL: each argument a C string. Borrowed until the step is sent. */
  const size_t *lens;
  int acked; /* a replicate step's acknowledgements (rc 0) */
} dl_pend;
enum { DL_STEP_EVAL, DL_STEP_COMMAND, DL_STEP_SUB_REF, DL_STEP_SUB_WAIT,
       DL_STEP_PAUSE, DL_STEP_REPLICATE };
/* What a step's start, or an operation's step, returns when it goes on in
 * the background: a value no operation has as its result. */
#define DL_PENDING 0x7fff

typedef struct dl_rlink_ops {
  const char *name;
  /* The keys of one script must share a slot (a cluster): a batch over
   * many locks (the watchdog's renewals) is cut by slot. */
  bool by_slot;
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
  /* Replica acknowledgement: waits up to timeout_ms until n replicas have
   * every write this client made before the call (a marker PUBLISH on
   * DL_REPLICATE_CHANNEL, then WAIT, on one connection: WAIT counts that
   * connection's writes, and the replication stream is one order). Returns
   * the replicas that acknowledged (>= 0), or a negative code. `keys`:
   * the nkeys keys the writes were to (a cluster asks the master of each
   * one's slot, once, and the fewest acknowledgements count), or nkeys 0:
   * every master. NULL in the event-loop links (their replicate_start is
   * the step). */
  int (*replicate)(dl_rlink *b, const char *const *keys, int nkeys, int n,
                   int timeout_ms);
  /* As command, with each argument's length (binary-safe: a queue's
   * values); NULL in a link that has none (DLOCK_ENOTSUP then). */
  int (*command_bin)(dl_rlink *b, int argc, const char **argv,
                     const size_t *lens, struct redisReply **reply);
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
  /* Adds the link's counters: batches written on its command
   * connections, wake-ups its subscriber gave. */
  void (*stats)(dl_rlink *b, dlock_client_stats *st);

  /* The steps of the event-loop driver. A link without them (NULL) is
   * blocking: dl_redis_step_* then run the blocking entries above and
   * complete at once. Each returns 0 when done now (p filled in), or
   * DL_PENDING: p is filled in and p->resume(p) called later, on the loop's
   * thread, exactly once unless `cancel` comes first. */
  int (*eval_start)(dl_rlink *b, dl_pend *p, int64_t until, int script,
                    int nkeys, const char *const *keys, int nargs,
                    const char *const *args);
  int (*sub_ref_start)(dl_rlink *b, dl_pend *p, const char *channel,
                       int mode, int64_t deadline);
  int (*sub_wait_start)(dl_rlink *b, dl_pend *p, dl_sub *s, int64_t until,
                        int64_t since, dl_sub *grant);
  int (*command_start)(dl_rlink *b, dl_pend *p, int argc,
                       const char **argv);
  int (*pause_start)(dl_rlink *b, dl_pend *p, int64_t until);
  /* Replica acknowledgement (as `replicate`) as a step: p->acked gets the
   * replicas that acknowledged (p->rc 0); on a cluster, the fewest of the
   * masters of the nkeys keys' slots (each asked once), or of every master
   * when nkeys is 0. */
  int (*replicate_start)(dl_rlink *b, dl_pend *p, const char *const *keys,
                         int nkeys, int n, int timeout_ms);
  /* Stops a pending step: resume is not called (a reply still on its way
   * is dropped, a subscription being confirmed is unreferenced). */
  void (*cancel)(dl_rlink *b, dl_pend *p);
} dl_rlink_ops;

struct dl_rlink {
  const dl_rlink_ops *ops;
};

/* Waiting by backoff (wait_backoff_max_ms > 0): no subscription, each
 * waiter sleeps 1, 2, 4 ... up to the maximum ms between tries, each sleep
 * drawn in [d/2, d] so that waiters do not retry in step. */
typedef struct dl_backoff {
  int64_t delay;
  uint64_t rng;
} dl_backoff;
void dl_backoff_init(dl_backoff *w);
/* The next sleep, in ms. */
int64_t dl_backoff_next(dl_backoff *w, int64_t max_ms);

/* The server's keyspace events that may take a hold away (del, expired),
 * as `config` (the reply to CONFIG GET notify-keyspace-events) enables
 * them: calls listen(ctx, channel, pattern, strip) for each channel to
 * hear, for keys under `prefix` in database db. Returns 0 (also when none
 * are enabled), or the first negative code listen returned. Shared by the
 * two links (single.c). */
int dl_keyspace_listen(const struct redisReply *config, int db,
                       const char *prefix,
                       int (*listen)(void *ctx, const char *channel,
                                     bool pattern, size_t strip),
                       void *ctx);

/* What every event-loop link begins with (asingle.c, acluster.c): their
 * blocking entries refuse through it. */
typedef struct dl_loop_head {
  dl_rlink base;
  const dl_backend_env *env;
} dl_loop_head;
/* The blocking entries of an event-loop link (base a dl_loop_head's):
 * each refuses with DLOCK_EINVAL, "a blocking call on an event-loop
 * client" (asingle.c). */
int dl_loop_refuse_eval(dl_rlink *base, int script, int nkeys,
                        const char **keys, int nargs, const char **args,
                        struct redisReply **reply);
int dl_loop_refuse_eval_many(dl_rlink *base, int64_t deadline, int n,
                             int script, const int *nkeys,
                             const char *const *const *keys, const int *nargs,
                             const char *const *const *args,
                             struct redisReply **replies, int *errs);
int dl_loop_refuse_command(dl_rlink *base, int argc, const char **argv,
                           struct redisReply **reply);
int dl_loop_refuse_sub_wait(dl_rlink *base, dl_sub *s, int64_t deadline,
                            int64_t since, dl_sub *grant);

/* The event-loop link (asingle.c): one server, over dl_aconn, on env->loop.
 * Its blocking entries refuse (DLOCK_EINVAL): an event-loop client runs
 * the operations through their *_start steps only. */
int dl_loop_link_new(const dl_conn_config *cfg, const dl_backend_env *env,
                     dl_rlink **out);
/* The same, connected at its first request (a composite's part). */
int dl_loop_link_lazy(const dl_conn_config *cfg, const dl_backend_env *env,
                      dl_rlink **out);

/* The cluster link (cluster.c): requests routed by their key's slot to
 * the master that owns it (the map read at the open from a node of
 * cfg->ep.hosts, which must answer: else DLOCK_ECONNECT with every node's
 * answer recorded), nconn command connections and, unless env says to wait
 * by backoff, a subscriber connection per master. Blocking only. */
int dl_cluster_link_new(const dl_conn_config *cfg, const dl_backend_env *env,
                        int nconn, dl_rlink **out);
/* The event-loop cluster link (acluster.c): cluster.c's routing, retries
 * and subscriptions over a dl_aconn and a dl_asub per master (unless env
 * says to wait by backoff), on env->loop; its blocking entries refuse, as
 * the loop link's do. The map is read at the open as cluster.c reads it.
 * Replica acknowledgement is its replicate_start step (cluster.c's
 * replicate on the loop). */
int dl_acluster_link_new(const dl_conn_config *cfg, const dl_backend_env *env,
                         dl_rlink **out);

/* ---- slots.c: what the two cluster links share ---- */
#define DL_CLUSTER_SLOTS 16384
/* A key's cluster slot (0..16383): CRC16 of the key, or of its hash tag
 * (the text between its first '{' and the next '}', if not empty). */
int dl_key_slot(const char *key, size_t len);
/* Reads a CLUSTER SLOTS reply that the node `asked` gave (its host stands
 * for an empty or "?" one): range(ctx, lo, hi, host, port) for each slot
 * range, in order. Returns 0, DLOCK_EPROTO at the first malformed entry
 * (the ranges before it told), or the first nonzero code range returned. */
int dl_slots_parse(const struct redisReply *r, const char *asked,
                   int (*range)(void *ctx, int lo, int hi, const char *host,
                                int port),
                   void *ctx);
/* Whether r is the error reply "<what> ..." (MOVED, ASK, TRYAGAIN,
 * CLUSTERDOWN). */
bool dl_cluster_reply_is(const struct redisReply *r, const char *what);
/* Whether r, TRYAGAIN or CLUSTERDOWN, stands as the answer rather than
 * being retried after `pause` (both cluster links): CLUSTERDOWN once it has
 * lasted DL_CLUSTERDOWN_MS (*down_since: when it was first met, 0 not
 * yet), said for what it is (a waiting acquire rides it out within its own
 * wait), and either when the retry would reach the deadline (not a
 * timeout). */
#define DL_CLUSTERDOWN_MS 300
bool dl_cluster_reply_stands(const struct redisReply *r, int64_t *down_since,
                             int64_t pause, int64_t deadline);
/* "MOVED 3999 127.0.0.1:6381" or "ASK ...": true and the slot, host (into
 * hostlen bytes) and port, or false for a malformed one. */
bool dl_cluster_redirect(const struct redisReply *r, int *slot, char *host,
                         size_t hostlen, int *port);
/* Channels published with classic PUBLISH even in sharded mode (the
 * delayed queue's, as Redisson's). */
bool dl_cluster_classic_channel(const char *ch);
/* The slot a command goes by: its key's (argv[1]), a PUBSUB question's
 * channel's, or -1 for a keyless command. */
int dl_cluster_command_slot(int argc, const char **argv, const size_t *lens);
/* SCAN over every master behind one cursor: "0" starts at the first
 * master; "<i>:<cursor>" goes on at master i; the last master's "0" ends.
 * dl_cluster_scan_cursor splits the caller's cursor (*cursor points into
 * arg); dl_cluster_scan_next turns master i's reply r (of nmasters) into
 * the caller's (0, or DLOCK_ENOMEM: r unchanged). */
void dl_cluster_scan_cursor(const char *arg, long *master,
                            const char **cursor);
int dl_cluster_scan_next(struct redisReply *r, long master, int nmasters);

/* ---- pubsub.c: one subscriber connection per client ---- */
/* What a message wakes, by the channel's kind (Redisson's meanings). */
typedef enum dl_wake_mode {
  DL_WAKE_LOCK,  /* "1" every waiter (read unlock), else one (unlock) */
  DL_WAKE_COUNT, /* the message is a number n of permits: n waiters */
  DL_WAKE_ALL,   /* any message: every waiter (a latch reached zero) */
  DL_WAKE_GRANT, /* one waiter's own channel: "=<token>" hands it the lock */
  DL_WAKE_NOTICE /* wakes nobody: tells a dl_notice_fn the key it names */
} dl_wake_mode;
/* Or'd into a waiter's mode: its channel is a glob pattern (PSUBSCRIBE),
 * whose messages wake as the mode says. */
#define DL_WAKE_PATTERN 0x100
/* Or'd into a waiter's mode by a cluster link: the channel is a shard
 * channel (SSUBSCRIBE), published by SPUBLISH on its slot's shard. */
#define DL_WAKE_SHARDED 0x200
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
/* Makes p hear what may take holds away (a link's watch_losses): the
 * revocations on revoke_channel, and the keyspace events of keys under
 * prefix in db that the server's notify-keyspace-events enables (asked
 * with CONFIG GET on conn, once, with no retries; refused or down: none).
 * Returns 0 or a negative code (single.c). */
int dl_pubsub_watch_losses(dl_pubsub *p, dl_conn *conn,
                           const char *revoke_channel, int db,
                           const char *prefix, dl_notice_fn fn, void *ud,
                           const struct dlock_client *owner);
/* The same with the server's CONFIG GET notify-keyspace-events reply
 * already in hand (NULL: none), no request sent: a cluster asks one node
 * and applies its answer to every master's subscriber, so that a master
 * that does not answer costs nothing (single.c). */
int dl_pubsub_watch_losses_with(dl_pubsub *p, const struct redisReply *cfg,
                                const char *revoke_channel, int db,
                                const char *prefix, dl_notice_fn fn,
                                void *ud);
void dl_pubsub_unref(dl_pubsub *p, dl_sub *s, bool linger);
void dl_pubsub_kick(dl_pubsub *p, dl_sub *s);
/* Whether the server unsubscribed s without being asked (a shard
 * channel whose slot moved away); s stays referenced. */
bool dl_pubsub_dropped(dl_pubsub *p, dl_sub *s);
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
  int min_replicas;    /* dlock_client_options.min_replicas_acked */
  int replicas_timeout_ms;
  void *notice;       /* watch_losses' relay to the client */
  /* Request ids of releases, "<nonce>:<seq>": unique across processes even
   * with an explicit client_id (a restarted process reuses it). */
  char release_nonce[17];
  atomic_uint_fast64_t release_seq;
  /* A server of a composite: while it has been up for less than this
   * (ms), it refuses the mutexes (Redlock's delayed restart); 0 off. */
  int64_t restart_delay_ms;
  /* Ride out a failover (acquire.c's ride_out, release.c's release retries):
   * not on a server of a composite, whose quorum decides without it. */
  bool ride;
} dl_redis;

/* The channel of replica acknowledgement's marker write (nobody listens). */
#define DL_REPLICATE_CHANNEL "dlock:replicate"
/* Replica acknowledgement after a write (`what`, to the nkeys keys; 0:
 * every master of a cluster) of the blocking driver: 0 when off or when
 * min_replicas acknowledged in time, else DLOCK_ENOTACKED (or the WAIT's
 * error) with the detail recorded, `then` appended. */
int dl_redis_replicate(dl_redis *R, const char *const *keys, int nkeys,
                       const char *what, const char *then);
/* The event-loop driver's: starts the link's acknowledgement step for R's
 * replicas (a marker and WAIT on the connection to the master of each of
 * the nkeys keys' slots, or to every master when nkeys is 0) into p:
 * DL_PENDING, or 0 with p->rc. Then dl_redis_replicate_result: 0
 * acknowledged, or DLOCK_ENOTACKED / a code with the detail recorded as
 * dl_redis_replicate's. */
int dl_redis_replicate_start(dl_redis *R, const char *const *keys, int nkeys,
                             dl_pend *p);
int dl_redis_replicate_result(dl_redis *R, dl_pend *p, const char *what,
                              const char *then);
/* renew.c: the backend's renew and renew_async entries. */
int dl_redis_renew(dl_backend *base, int64_t deadline, int64_t lease_ms, int n,
                   dl_renew_item *items, int *calls);
int dl_redis_renew_async(dl_backend *base, int64_t deadline, int64_t lease_ms,
                         int n, dl_renew_item *items, int *calls,
                         dl_done_fn done, void *ud, dl_async **op);

/* The backend for redis://, rediss:// and unix:// URLs (one server). */
int dl_redis_backend_new(const dlock_client_options *opts,
                         const dl_backend_env *env, dl_backend **out);
/* One server of a composite (redlock.c): as dl_redis_backend_new on
 * env->loop (always set), but its link connects at its first request. */
int dl_redis_part_new(const dlock_client_options *opts,
                      const dl_backend_env *env, dl_backend **out);
/* The Redlock backend for redlock:// URLs (redlock.c). */
#define DL_REDLOCK_MAX 15 /* servers at most */
/* A redlock:// URL's options, after '?', joined by '&'. */
typedef struct dl_redlock_url_opts {
  bool fencing; /* fencing=on|off: tokens written back to the quorum */
  bool hash;    /* layout=plain|hash: the mutex's layout on each server */
  /* restart_delay=N[ms|s|m]: a server up for less than this refuses
   * every lock (Redlock's delayed restart); 0 off */
  int64_t restart_delay_ms;
} dl_redlock_url_opts;
/* The servers of a redlock:// URL, each as a redis:// URL (out[i], the
 * caller frees): how many (1..max), or DLOCK_EURL / DLOCK_ENOMEM; and its
 * options in *opt (may be NULL; defaults fencing on, layout plain, no
 * restart delay). */
int dl_redlock_urls(const char *url, char **out, int max,
                    dl_redlock_url_opts *opt);
int dl_redlock_backend_new(const dlock_client_options *opts,
                           const dl_backend_env *env, dl_backend **out);
/* The typed operations over a link made elsewhere (the reply fuzzer's),
 * which the backend then owns. */
int dl_redis_backend_over(dl_rlink *link, const dl_backend_env *env,
                          dl_backend **out);
/* The single-server link: nconn command connections and, unless env says
 * to wait by backoff, a subscriber connection. */
int dl_single_link_new(const dl_conn_config *cfg, const dl_backend_env *env,
                       int nconn, dl_rlink **out);
/* One server of a composite: a single link with one connection, no
 * subscriber, that connects at its first request (a server down at the
 * open is not an error); *conn its connection. */
int dl_single_link_lazy(const dl_conn_config *cfg, const dl_backend_env *env,
                        dl_rlink **out, dl_conn **conn);

/* Counters for tests and the benchmark (b: a dl_redis_backend_new one):
 * the link's (any link), and the single link's reader role (0, false for
 * another link). */
uint64_t dl_redis_backend_round_trips(dl_backend *b);
uint64_t dl_redis_backend_wakeups(dl_backend *b);
uint64_t dl_redis_backend_direct_wakeups(dl_backend *b);
bool dl_redis_backend_sleeper_reads(dl_backend *b);

/* The operations of the backend table, by file. */
int dl_redis_lock_acquire_async(dl_backend *b, dl_acquire *a, dl_done_fn done,
                                void *ud, dl_async **op);
int dl_redis_lock_release_async(dl_backend *b, const dl_lock_ref *l,
                                int64_t lease_ms, int count, dl_done_fn done,
                                void *ud, dl_async **op);
int dl_redis_sem_acquire_async(dl_backend *b, const dl_sync_ref *s,
                               int permits, bool wait, int64_t deadline,
                               dl_done_fn done, void *ud, dl_async **op);
int dl_redis_permit_acquire_async(dl_backend *b, const dl_sync_ref *s,
                                  const char *id, int64_t lease_ms, bool wait,
                                  int64_t deadline, int64_t *valid_until,
                                  dl_done_fn done, void *ud, dl_async **op);
int dl_redis_latch_await_async(dl_backend *b, const dl_sync_ref *s, bool wait,
                               int64_t deadline, dl_done_fn done, void *ud,
                               dl_async **op);
int dl_redis_lock_acquire(dl_backend *b, dl_acquire *a);
int dl_redis_lock_release(dl_backend *b, const dl_lock_ref *l,
                          int64_t lease_ms, int count);
int dl_redis_lock_force_release(dl_backend *b, const dl_lock_ref *l);
int dl_redis_lock_query(dl_backend *b, const dl_lock_ref *l, dl_lock_query q,
                        long long *v);
int dl_redis_inspect(dl_backend *b, const char *key, dlock_lock_state *st);
int dl_redis_scan(dl_backend *b, const char *match, size_t prefix_len,
                  dlock_scan_cb cb, void *ud);
int dl_redis_lock_force_release_async(dl_backend *b, const dl_lock_ref *l,
                                      dl_done_fn done, void *ud,
                                      dl_async **op);
int dl_redis_lock_query_async(dl_backend *b, const dl_lock_ref *l,
                              dl_lock_query q, long long *v, dl_done_fn done,
                              void *ud, dl_async **op);
int dl_redis_inspect_async(dl_backend *b, const char *key,
                           dlock_lock_state *st, dl_done_fn done, void *ud,
                           dl_async **op);
int dl_redis_scan_async(dl_backend *b, const char *match, size_t prefix_len,
                        dlock_scan_cb cb, void *cb_ud, dl_done_fn done,
                        void *ud, dl_async **op);
int dl_redis_lock_fence_async(dl_backend *b, const dl_lock_ref *l,
                              uint64_t token, int64_t lease_ms,
                              dl_done_fn done, void *ud, dl_async **op);
/* PING, expecting PONG (reqop.c). */
int dl_redis_ping(dl_backend *b);
int dl_redis_ping_async(dl_backend *b, dl_done_fn done, void *ud,
                        dl_async **op);
int dl_redis_sem_acquire(dl_backend *b, const dl_sync_ref *s, int permits,
                         bool wait, int64_t deadline);
int dl_redis_permit_acquire(dl_backend *b, const dl_sync_ref *s,
                            const char *id, int64_t lease_ms, bool wait,
                            int64_t deadline, int64_t *valid_until);
int dl_redis_latch_await(dl_backend *b, const dl_sync_ref *s, bool wait,
                         int64_t deadline);
int dl_redis_sync_update(dl_backend *b, const dl_sync_ref *s, dl_sync_op op,
                         long long n, const char *id, long long *v);
int dl_redis_sync_update_async(dl_backend *b, const dl_sync_ref *s,
                               dl_sync_op op, long long n, const char *id,
                               long long *v, dl_done_fn done, void *ud,
                               dl_async **op_out);

/* Shared by those files: a reply (freed here) that must be one integer
 * in [lo, hi] (0 and *v, or a negative code: DLOCK_EPROTO for any other
 * reply), and the waiting loop of the kinds on a channel. */
int dl_redis_int_reply(dl_redis *r, struct redisReply *rep, long long lo,
                       long long hi, long long *v);
/* The steps of an operation (see dl_pend), over whichever link r has.
 * eval: a script answered by `until` (dl_now_ms() time) at the latest, 0:
 * within the command timeout; the script may carry DL_EVAL_WAKE_FIRST.
 * sub_ref: a subscription confirmed by `deadline` (p->sub; NULL with
 * rc 0: none to be had, wait by timers alone). sub_wait: one wake-up
 * (p->rc 1), or none by `until` (0), or DLOCK_ECLOSED. pause: nothing until
 * `until`. Each returns 0 (done, p filled in) or DL_PENDING. */
int dl_redis_step_eval(dl_redis *r, dl_pend *p, int64_t until, int script,
                       int nkeys, const char *const *keys, int nargs,
                       const char *const *args);
/* An operation's state (`size` bytes, its dl_shell first) for the
 * blocking driver (`stack`, the caller's) or the event-loop one
 * (allocated), zeroed: NULL with *err when the client is of the other
 * kind, or out of memory (sem_latch.c; blocking_queue.c). */
void *dl_redis_state_new(dl_redis *R, void *stack, size_t size, bool async,
                         dl_async **op, int *err);
/* blocking_queue.c: the blocking queue and deque (dl_backend_ops.queue). */
int dl_redis_queue(dl_backend *b, const dl_sync_ref *s, dl_queue_req *q);
void dl_redis_queue_kick(dl_backend *b, const dl_sync_ref *s);
int dl_redis_queue_async(dl_backend *b, const dl_sync_ref *s, dl_queue_req *q,
                         dl_done_fn done, void *ud, dl_async **op);
/* 0 if r's link is of the driver a call needs (async: the event loop's),
 * else DLOCK_EINVAL with the detail recorded. */
int dl_redis_driver_check(dl_redis *r, bool async);
int dl_redis_step_sub_ref(dl_redis *r, dl_pend *p, const char *channel,
                          int mode, int64_t deadline);
int dl_redis_step_sub_wait(dl_redis *r, dl_pend *p, dl_sub *s, int64_t until,
                           int64_t since, dl_sub *grant);
int dl_redis_step_pause(dl_redis *r, dl_pend *p, int64_t until);
void dl_redis_step_cancel(dl_redis *r, dl_pend *p);
/* Ends a pending wait (a subscription's confirmation, a wake-up, a pause)
 * as if its deadline had come: p resumes soon, from the loop, with rc 0
 * and no subscription. A request already sent is left to its answer.
 * Returns whether p was such a wait. */
bool dl_redis_step_interrupt(dl_redis *r, dl_pend *p);

/* An operation of the event-loop driver (core/backend.h's dl_async). */
struct dl_async {
  dl_redis *R;
  dl_done_fn done;
  void *ud;
  bool cancelled;
};
/* The shell of an operation run by the event-loop driver: the first member
 * of the operation's state (malloc'ed; freed once done has been told).
 * Each step's resume is dl_shell_resume, with p->op the shell. */
typedef struct dl_shell dl_shell;
struct dl_shell {
  dl_async head;
  /* Goes on after a step: DL_PENDING or the result. */
  int (*step)(dl_shell *sh);
  /* Or NULL: adjusts the result before done hears it. */
  void (*finish)(dl_shell *sh, int *rc);
  dl_pend *main;     /* the step a cancel interrupts */
  int64_t *deadline; /* or NULL: set to now by a cancel */
  bool finished;
  int final;
};
void dl_shell_resume(dl_pend *p);
/* Sets sh up (no finish, no deadline) and binds `main` (or NULL) to it. */
void dl_shell_init(dl_shell *sh, dl_redis *R, dl_done_fn done, void *ud,
                   int (*step)(dl_shell *), dl_pend *main);
/* Makes p's completions resume sh's operation. */
void dl_shell_bind(dl_shell *sh, dl_pend *p);
/* After the operation's first step returned rc: 0 and *op (done comes from
 * the loop, even when rc is already the result). */
int dl_shell_start(dl_shell *sh, int rc, dl_async **op);
/* The backend's cancel (dl_backend_ops.cancel) for every operation. */
void dl_redis_cancel(dl_backend *b, dl_async *op);

/* An operation's state, on the caller's stack (`stack`, for the blocking
 * driver) or malloc'ed (async), zeroed; NULL with *err when r's link is
 * not of the driver asked for, or out of memory. */
void *dl_redis_state_new(dl_redis *r, void *stack, size_t size, bool async,
                         dl_async **op, int *err);

/* An operation that sends requests one after another and reads each
 * answer, with no wait between them (reqop.c): the first member of its
 * state. `send` starts the next request on p (dl_redis_step_eval or
 * _command; returns what they return); `result` reads p's answer
 * (dl_reqop_reply) and returns the operation's result, a negative code, or
 * DL_REQOP_MORE: send the next. */
#define DL_REQOP_MORE 0x7ffe
typedef struct dl_reqop dl_reqop;
struct dl_reqop {
  dl_shell sh; /* the event-loop driver's */
  dl_redis *R;
  dl_pend p;
  int (*send)(dl_reqop *x);
  int (*result)(dl_reqop *x);
};
/* The state of a request operation (as dl_redis_state_new) with R, send
 * and result set. */
void *dl_reqop_new(dl_redis *R, void *stack, size_t size, bool async,
                   dl_async **op, int *err, int (*send)(dl_reqop *),
                   int (*result)(dl_reqop *));
/* Runs x (from dl_reqop_new): to its end on
 * the calling thread when done is NULL (returns the result), else on the
 * loop (0 and *op, or a negative code; done(ud, result) later). */
int dl_reqop_run(dl_reqop *x, dl_done_fn done, void *ud, dl_async **op);
/* p's reply, now the caller's to free, or NULL when the request failed
 * (p.rc the code). */
struct redisReply *dl_reqop_reply(dl_reqop *x);

/* Waiting for a semaphore's permits or a latch's zero, a state machine
 * (see dl_pend): tries, and until done or the deadline (with `wait`),
 * sleeps on `channel` (mode: dl_wake_mode) between tries, subscribed
 * before the second try so that no message is missed. */
typedef struct dl_waiter dl_waiter;
typedef struct dl_wait_kind {
  /* Sends one try: dl_redis_step_* on w->p; returns what it returns. */
  int (*send)(dl_waiter *w);
  /* The try's answer, from w->p (the reply is the callee's to free): 1
   * done, a negative code, or 0 not yet, with w->recheck_ms how soon to
   * try again even without a message (-1: only on a message). */
  int (*result)(dl_waiter *w);
} dl_wait_kind;
struct dl_waiter {
  /* in */
  dl_redis *R;
  const dl_wait_kind *kind;
  void *ctx; /* the kind's */
  const char *channel;
  int mode;
  bool wait;
  int64_t deadline;
  /* the machine's */
  int st, rc, tries;
  int64_t start, recheck_ms;
  dl_sub *sub;
  dl_pend p;
};
/* Starts w (its inputs set) and runs it until it waits on a step
 * (DL_PENDING) or ends: 1 done, 0 when the wait ran out, or a negative
 * code. dl_redis_wait_step goes on after a step completed. */
int dl_redis_wait_start(dl_waiter *w);
int dl_redis_wait_step(dl_waiter *w);
/* A command's reply as a step (GET, say): as dl_redis_step_eval. */
int dl_redis_step_command(dl_redis *r, dl_pend *p, int argc,
                          const char **argv);
/* As dl_redis_step_command with each argument's length (binary values). */
int dl_redis_step_command_bin(dl_redis *r, dl_pend *p, int argc,
                              const char **argv, const size_t *lens);

/* ---- conn.c: the handshake's parts, for the event loop's connections ----
 * dl_conn_handshake is these over blocking I/O. */
typedef struct dl_handshake {
  char *buf;  /* the commands, for one write (NULL: none to send) */
  size_t len;
  int ncmd;   /* replies to expect */
  int got;    /* replies judged */
  int rc;     /* 0, or the first error reply's code */
  char sent[40]; /* for details: "AUTH, SELECT, CLIENT SETNAME" */
} dl_handshake;
/* Formats the handshake cfg asks for (ncmd 0: none). Returns 0, or
 * DLOCK_ENOMEM with err set. Free with dl_handshake_clear. */
int dl_handshake_init(dl_handshake *hs, const dl_conn_config *cfg, char *err,
                      size_t errlen);
/* Frees the commands (the counts stay, for the replies). */
void dl_handshake_clear(dl_handshake *hs);
/* Judges one reply (freed here): an error reply sets hs->rc and err (the
 * first only; AUTH's is DLOCK_EAUTH). Returns true once every reply came. */
bool dl_handshake_reply(dl_handshake *hs, const dl_conn_config *cfg,
                        struct redisReply *r, char *err, size_t errlen);
/* The detail for I/O failure rc (DLOCK_EPROTO: a malformed reply) while
 * sending or awaiting the replies; returns rc. */
int dl_handshake_ioerr(const dl_handshake *hs, const dl_conn_config *cfg,
                       bool sending, int rc, char *err, size_t errlen);

/* ---- reply.c: commands and replies, for every connection ---- */
/* An EVALSHA/EVAL argv, on the stack for the usual few arguments. */
typedef struct dl_evargv {
  const char **argv;
  size_t *lens;
  const char *small[16];
  size_t small_lens[16];
  char nk[DL_INT_BUF];
} dl_evargv;
/* Builds EVALSHA (or with `body`, EVAL) of `script` into *v; returns argc,
 * or -1 (out of memory). The strings are borrowed; release with
 * dl_evargv_free. */
int dl_evargv_build(int script, bool body, int nkeys, const char *const *keys,
                    int nargs, const char *const *args, dl_evargv *v);
void dl_evargv_free(dl_evargv *v);
/* Formats a command (RESP: an array of argc bulk strings; lens NULL: each
 * argv[i] a C string) into *out, a malloc'd buffer the caller frees with
 * free(). Returns its length, or -1 out of memory (*out NULL). */
int dl_resp_format(char **out, int argc, const char *const *argv,
                   const size_t *lens);
/* An error reply becomes its code (the server's text, as
 * dl_reply_error_text gives it, recorded for owner, the reply freed,
 * *reply NULL); any other reply is kept and 0 returned. */
int dl_reply_check(const struct dlock_client *owner, struct redisReply **reply);
/* An error reply's text `in` as a user may read it, in out (len bytes):
 * without what Redis adds to an error inside a script (Redis 7's " script:
 * <sha>, on @user_script:N." after it, Redis 6's "ERR Error running script
 * (call to f_<sha>): @user_script:N: " before it), and without a Lua
 * error's text (a failed script is dlock's bug, never the user's to read:
 * a fixed text instead). */
void dl_reply_error_text(const char *in, char *out, size_t len);
/* Whether r is the NOSCRIPT error (the script cache lost the script). */
bool dl_reply_noscript(const struct redisReply *r);
/* Whether r is a READONLY error (the server is a replica now). */
bool dl_reply_readonly(const struct redisReply *r);
/* DLOCK_REPLICAS_AUTO, both drivers: the replicas a master has now, from
 * its reply to ROLE (r, freed; an error reply's code stands): >= 0, or a
 * negative code (DLOCK_EREADONLY: not a master) recorded for owner. */
int dl_role_replicas(const struct dlock_client *owner, struct redisReply *r);
/* DLOCK_REPLICAS_AUTO's shortfall: `got` of the master's `n` replicas
 * acknowledged within timeout_ms. Returns DLOCK_ENOTACKED, recorded for
 * owner. */
int dl_auto_shortfall(const struct dlock_client *owner, int got, int n,
                      int timeout_ms);

/* ---- aconn.c: the pipelined connection for an event loop ----
 * conn.c's connection without blocking: every call and callback on the
 * loop's thread; requests pipelined, each ending in its callback exactly
 * once (unless cancelled). */
typedef struct dl_aconn dl_aconn;
typedef struct dl_areq dl_areq;
/* A request's end: rc 0 and the reply (the callback owns it: free with
 * freeReplyObject; for dl_aconn_send it may be an error reply), or a
 * negative code and NULL: DLOCK_ETIMEDOUT at its deadline,
 * DLOCK_ECONNLOST if the connection broke after it was written (it may
 * have run; never sent again), DLOCK_ECLOSED from dl_aconn_free, or the
 * code of a failed connect. The detail is recorded for cfg->err_owner
 * (dl_seterr) on the loop's thread first. The request is gone after. */
typedef void (*dl_reply_fn)(void *ud, int rc, struct redisReply *reply);
/* A connection on lp (cfg must outlive it); it connects at the first
 * request (or dl_aconn_connect). Returns 0 or DLOCK_ENOMEM. */
int dl_aconn_new(dl_loop *lp, const dl_conn_config *cfg, dl_aconn **out);
/* Starts connecting now if down, without waiting out the backoff. Returns
 * 0 (connecting or up), or the code of a connect that failed at once. */
int dl_aconn_connect(dl_aconn *c);
/* Queues a command (argv copied): written at once if up, when connected
 * if connecting; a connection that broke reconnects now unless its backoff
 * still runs (reconnect_min_ms, doubling to reconnect_max_ms after each
 * failed connect). deadline: dl_now_ms() time (<= 0: the command
 * timeout). Returns the request (valid until its callback runs or
 * dl_areq_cancel), or NULL with *err set and fn never called: the
 * backoff's error, a connect that failed at once, DLOCK_ECLOSED,
 * DLOCK_ENOMEM. */
dl_areq *dl_aconn_send(dl_aconn *c, int argc, const char **argv,
                       const size_t *argvlen, int64_t deadline,
                       dl_reply_fn fn, void *ud, int *err);
/* EVALSHA of a script (DL_EVAL_WAKE_FIRST or'ed in: a PING ahead of it),
 * and EVAL, once, on NOSCRIPT, as the same request; an error reply comes
 * as its code (dl_reply_check), so a reply given is never an error. */
dl_areq *dl_aconn_eval(dl_aconn *c, int script, int nkeys, const char **keys,
                       int nargs, const char **args, int64_t deadline,
                       dl_reply_fn fn, void *ud, int *err);
/* For a cluster link: as dl_aconn_send and dl_aconn_eval, with ASKING just
 * ahead of the command in the same write when `asking` (its reply
 * dropped: a cluster's ASK redirection), and an eval's error replies
 * given as replies (MOVED, ASK, TRYAGAIN, CLUSTERDOWN: the caller follows
 * them; NOSCRIPT is still followed here). */
dl_areq *dl_aconn_send_cluster(dl_aconn *c, bool asking, int argc,
                               const char **argv, const size_t *argvlen,
                               int64_t deadline, dl_reply_fn fn, void *ud,
                               int *err);
dl_areq *dl_aconn_eval_cluster(dl_aconn *c, bool asking, int script,
                               int nkeys, const char **keys, int nargs,
                               const char **args, int64_t deadline,
                               dl_reply_fn fn, void *ud, int *err);
/* The callback will not run; a reply in flight is dropped when it comes.
 * Not from inside r's own callback (r is gone then). Accepts NULL. */
void dl_areq_cancel(dl_areq *r);
/* Fails every pending request with DLOCK_ECLOSED (callbacks run, now),
 * closes the socket and frees c (once the dispatch under way, if it is
 * called from a callback, returns). Later calls on c are not allowed.
 * Accepts NULL. */
void dl_aconn_free(dl_aconn *c);
/* Writes since creation (tests), and whether the connection is up. */
uint64_t dl_aconn_batches(const dl_aconn *c);
bool dl_aconn_up(const dl_aconn *c);

/* ---- arepl.c: replica acknowledgement on the loop ----
 * dl_conn_replicate and dl_waitpool's, on the loop: a pool of connections
 * of their own, so that a WAIT (which blocks the connection it is sent
 * on) holds up no other request. dl_awaitpool_new: 0 or DLOCK_ENOMEM (cfg
 * must outlive the pool); dl_awaitpool_free ends every acknowledgement
 * under way with DLOCK_ECLOSED (their callbacks run, now), accepts NULL. */
typedef struct dl_awaitpool dl_awaitpool;
int dl_awaitpool_new(dl_loop *lp, const dl_conn_config *cfg,
                     dl_awaitpool **out);
void dl_awaitpool_free(dl_awaitpool *p);
/* A marker PUBLISH on DL_REPLICATE_CHANNEL and WAIT n timeout_ms, queued
 * together on a connection of p (an idle one, or a new one), so that the
 * WAIT counts the marker, which the server replicates after every write
 * this client made to it, on whatever connection. fn(ud, rc, count) runs
 * once on the loop's thread: rc 0 and the replicas that acknowledged, or a
 * negative code (recorded for owner). deadline: as dl_aconn_send's (give
 * it the WAIT's timeout beside the command's). Returns a handle for
 * dl_arepl_cancel (valid until fn runs), or NULL with *err set and fn
 * never called. */
typedef void (*dl_count_fn)(void *ud, int rc, int count);
typedef struct dl_arepl dl_arepl;
dl_arepl *dl_awaitpool_replicate(dl_awaitpool *p, int n, int timeout_ms,
                                 int64_t deadline,
                                 const struct dlock_client *owner,
                                 dl_count_fn fn, void *ud, int *err);
/* fn will not run. Not from inside fn. Accepts NULL. */
void dl_arepl_cancel(dl_arepl *a);

/* ---- asub.c: the subscriber connection for an event loop ----
 * pubsub.c's subscriber without threads (the wake modes, the linger, the
 * resubscribe after a reconnect are theirs: subs.c), over dl_aconn's push
 * mode. Every call and callback on the loop's thread. Each wait or confirm
 * is a request that ends in its fn exactly once, from the loop (never
 * inside the call that made it), unless cancelled first; waiters woken by
 * one message hear it in the order of `since`. */
typedef struct dl_asub dl_asub;
typedef struct dl_asub_req dl_asub_req; /* a pending confirm or wait */
typedef void (*dl_asub_fn)(void *ud, int rc);
/* A subscriber connection on lp (cfg must outlive it), connecting at the
 * first ref (or listen) and staying up (reconnecting with the backoff)
 * from then on. Returns 0 and *out, or DLOCK_ENOMEM. */
int dl_asub_new(dl_loop *lp, const dl_conn_config *cfg, dl_asub **out);
/* Every pending request's fn runs with DLOCK_ECLOSED, inside this call
 * (fn must make no call on s), then s is freed, its subscriptions with it.
 * Accepts NULL. */
void dl_asub_free(dl_asub *s);
/* A reference to channel's subscription (subscribing if new, or taking
 * back a lingering one; the first ref fixes its mode), or NULL (out of
 * memory, nothing changed). Never waits: dl_asub_confirm does. */
dl_sub *dl_asub_ref(dl_asub *s, const char *channel, int mode);
/* A reference to channel's subscription only if the server confirmed it
 * already (one that lingers, or that a waiter holds), else NULL. */
dl_sub *dl_asub_ref_heard(dl_asub *s, const char *channel, int mode);
/* Whether the server confirmed sub, on the connection up now. */
bool dl_asub_confirmed(dl_asub *s, dl_sub *sub);
/* fn(ud, 0) once sub is confirmed (at the next dispatch if it is
 * already), DLOCK_ETIMEDOUT at deadline (dl_now_ms() time), DLOCK_ECLOSED
 * from dl_asub_free. Returns the request (valid until fn runs or it is
 * cancelled), or NULL (out of memory; fn never called). */
dl_asub_req *dl_asub_confirm(dl_asub *s, dl_sub *sub, int64_t deadline,
                             dl_asub_fn fn, void *ud);
/* One wake-up (dl_pubsub_wait's): fn(ud, 1) woken (or a permit or a grant
 * on `grant` was there already), fn(ud, 0) at deadline, DLOCK_ECLOSED.
 * Sleepers are woken in the order of `since`; grant (or NULL) is the
 * waiter's own DL_WAKE_GRANT subscription: a message there wakes this
 * waiter alone. A message that finds a referencing waiter awake is kept
 * for it as a permit, as in pubsub.c. NULL: out of memory (fn never
 * called). */
dl_asub_req *dl_asub_wait(dl_asub *s, dl_sub *sub, int64_t deadline,
                          int64_t since, dl_sub *grant, dl_asub_fn fn,
                          void *ud);
/* fn will not run. A wait that was woken but not yet told passes its
 * wake-up on to the next sleeper. Accepts NULL. Not from inside the
 * request's own fn (it is gone then). */
void dl_asub_cancel(dl_asub_req *r);
/* As dl_pubsub_grant, dl_pubsub_unref, dl_pubsub_kick, dl_pubsub_listen
 * (fn told from the loop's dispatch; key NULL after each reconnect) and
 * dl_pubsub_wakeups. dl_asub_listen returns 0 or DLOCK_ENOMEM. */
int dl_asub_grant(dl_asub *s, dl_sub *sub, uint64_t *token);
void dl_asub_unref(dl_asub *s, dl_sub *sub, bool linger);
void dl_asub_kick(dl_asub *s, dl_sub *sub);
int dl_asub_listen(dl_asub *s, const char *channel, bool pattern,
                   size_t strip, dl_notice_fn fn, void *ud);
uint64_t dl_asub_wakeups(dl_asub *s);
/* Whether the server unsubscribed sub without being asked (a shard
 * channel whose slot moved away), as dl_pubsub_dropped. */
bool dl_asub_dropped(dl_asub *s, dl_sub *sub);

/* aconn.c's push mode, for a subscriber: from dl_aconn_set_push on, every
 * reply after the handshake goes to reply(ud, r) (which frees it), a
 * request is done (fn(ud, 0, NULL)) once written, up(ud) runs each time
 * the connection is up (handshake done), down(ud) each time an up
 * connection is lost, and the connection reconnects by itself: at once
 * after a loss, after the backoff after a failed connect. The hooks run
 * from the loop's dispatch (up: also from dl_aconn_connect). */
typedef struct dl_aconn_push {
  void (*up)(void *ud);
  void (*reply)(void *ud, struct redisReply *r);
  void (*down)(void *ud);
  void *ud;
} dl_aconn_push;
/* Sets c's push hooks (copied), before its first request or connect. */
void dl_aconn_set_push(dl_aconn *c, const dl_aconn_push *push);
/* Drops an up (or connecting) connection as lost and reconnects: a
 * subscriber whose idle PING went unanswered. */
void dl_aconn_reconnect(dl_aconn *c);
/* Drops the connection when a failover was heard of since it was made
 * (dl_target_moved): what is in flight fails with DLOCK_ECONNLOST, what
 * is queued goes to the new master. */
void dl_aconn_check_moved(dl_aconn *c);

#endif /* DLOCK_REDIS_H */
