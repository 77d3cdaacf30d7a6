/* links.h: the Redis backend's links, the floor above the connections:
 * how the operations reach a deployment (scripts in, replies out,
 * subscriptions to wait on): one server (single.c, and asingle.c on an
 * event loop), a cluster (cluster.c, cwait.c; acluster.c, await.c,
 * acrepl.c on an event loop; slots.c what both share), and replica
 * acknowledgement over the command connections. It sees the connections
 * (conns.h), no operation (tests/check_layers.sh). */
#ifndef DLOCK_REDIS_LINKS_H
#define DLOCK_REDIS_LINKS_H

#include "../conns/conns.h"

/* ---- the link: how the Redis operations reach a deployment ----
 * Scripts in, replies out, and subscriptions to wait on: one server today
 * (single.c); Sentinel (a resolver before each connect) and Cluster (a
 * router by slot) will be other links under the same operations. */
typedef struct dl_rlink dl_rlink;
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
  /* Within a take step's start only (dl_redis_step_take_eval,
   * _take_command; false in every other step's): its reply may carry a
   * value it took off the server (a queue poll's pop), so on an event loop
   * the client's close waits for it (dl_aconn_drain_takes) instead of
   * dropping it. The link copies it within the start. */
  bool take;
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
  /* Runs scripts (EVALSHA, falling back to EVAL on NOSCRIPT; one eval is
   * n = 1): starts them at once and collects their replies in order,
   * waiting until deadline (dl_now_ms() time; 0: the command timeout);
   * each replies[i] is a reply (caller frees) or NULL with errs[i] set (a
   * script's error reply becomes a code too, the detail recorded). */
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

/* The single-server link: nconn command connections and, unless env says
 * to wait by backoff, a subscriber connection. */
int dl_single_link_new(const dl_conn_config *cfg, const dl_backend_env *env,
                       int nconn, dl_rlink **out);
/* One server of a composite: a single link with one connection, no
 * subscriber, that connects at its first request (a server down at the
 * open is not an error); *conn its connection. */
int dl_single_link_lazy(const dl_conn_config *cfg, const dl_backend_env *env,
                        dl_rlink **out, dl_conn **conn);

/* The single link's reader role (single.c): the wake-ups read by the
 * sleeper they woke, and whether a sleeper reads now (0, false for another
 * link). */
uint64_t dl_single_link_direct_wakeups(dl_rlink *l);
bool dl_single_link_sleeper_reads(dl_rlink *l);

/* ---- single.c: replica acknowledgement and the loss watch, on the
 * blocking connections ---- */
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
/* *out: base (the URL's) for the one node host:port (host borrowed: it
 * must outlive *out). */
void dl_slots_node_config(dl_conn_config *out, const dl_conn_config *base,
                          char *host, int port);
/* Asks the node host:port for the map over conn (CLUSTER SLOTS) and tells
 * its ranges to range, as dl_slots_parse. Returns 0, or a negative code
 * with why filled ("host:port: what failed"; err_owner's detail for a
 * failed call). Blocks up to the command timeout. */
int dl_slots_ask(dl_conn *conn, const struct dlock_client *err_owner,
                 const char *host, int port,
                 int (*range)(void *ctx, int lo, int hi, const char *host,
                              int port),
                 void *ctx, char *why, size_t len);
/* ?pubsub=auto: whether the node host:port knows PUBSUB SHARDNUMSUB
 * (Redis 7), as Redisson's AUTO mode decides: 0 with *sharded set, or a
 * negative code with why filled as dl_slots_ask. */
int dl_slots_probe_sharded(dl_conn *conn, const struct dlock_client *err_owner,
                           const char *host, int port, bool *sharded, char *why,
                           size_t len);
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

#endif /* DLOCK_REDIS_LINKS_H */
