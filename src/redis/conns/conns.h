/* conns.h: the Redis backend's connections, its lowest floor: the
 * pipelined command connection (conn.c) and its event-loop twin (aconn.c,
 * areq.c), where they connect (sentinel.c, the endpoint resolver), the
 * handshake, the Lua scripts and the replies (reply.c), the subscriber
 * connection (pubsub.c, asub.c; subs.c what both share) and replica
 * acknowledgement's own connections on the loop (arepl.c). It sees no link
 * and no operation (tests/check_layers.sh). */
#ifndef DLOCK_REDIS_CONNS_H
#define DLOCK_REDIS_CONNS_H

#include "../../core/backend.h"
#include "../../net/net.h"

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
  /* > 0: waiters poll with this backoff ceiling (ms), not by subscription
   * (dlock_client_options.wait_backoff_max_ms). */
  int backoff_max_ms;
  const struct dlock_client *err_owner; /* where dl_seterr records details */
  /* Counted up at each connect after a connection's first (dlock_metrics
   * reconnects; relaxed), or NULL. */
  atomic_uint_fast64_t *reconnects;
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

/* ---- open.c: opening a connection, for every blocking connection ---- */
/* Sets up a freshly connected socket: AUTH, SELECT, CLIENT SETNAME (those
 * cfg asks for), by deadline. Returns 0, or a negative code with err set. */
int dl_conn_handshake(dl_io *io, const dl_conn_config *cfg, int64_t deadline,
                      char *err, size_t errlen);
/* Called by dl_conn_open with the socket just connected, before its
 * handshake (pubsub.c keeps it, to shut it from another thread); a
 * negative code returned gives the open up with it. */
typedef int (*dl_conn_opened_fn)(void *ud, dl_io *io);
/* Connects to ep (TLS when cfg->tls) and runs cfg's handshake, both by
 * deadline; `opened` (may be NULL) is called in between. Returns 0, or a
 * negative code with err set. *io is the socket whenever the connect
 * succeeded, also when the handshake then failed: the caller closes it
 * (dl_io_close takes NULL). Thread-safe (cfg only read). */
int dl_conn_open(const dl_conn_config *cfg, const dl_endpoint *ep,
                 int64_t deadline, dl_conn_opened_fn opened, void *ud,
                 dl_io **io, char *err, size_t errlen);
/* Every connect of a blocking connection (conn.c, pubsub.c): asks
 * dl_conn_target where (filling *t, also on failure), then dl_conn_open
 * there. Returns and sets *io as dl_conn_open. */
int dl_conn_dial(const dl_conn_config *cfg, int64_t deadline, dl_target *t,
                 dl_conn_opened_fn opened, void *ud, dl_io **io, char *err,
                 size_t errlen);
/* The reconnect backoff of every connection (conn.c, pubsub.c, aconn.c):
 * returns the wait before the next connect after one that failed, *backoff_ms
 * (start it at cfg->reconnect_min_ms, again after each success), and
 * doubles *backoff_ms up to cfg->reconnect_max_ms. */
int dl_conn_backoff(const dl_conn_config *cfg, int *backoff_ms);

/* ---- redis/scripts.c: the Lua scripts, embedded at build time ---- */
typedef struct dl_script {
  const char *name;
  const char *body;
  char sha[41];
} dl_script;

enum {
#define X(id, file) DL_SCRIPT_##id,
#include "../lua/scripts.def"
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

/* A subscription of a subscriber connection (subs.h), which the links'
 * waiters hold. */
typedef struct dl_sub dl_sub;
/* The channel of replica acknowledgement's marker write (nobody listens):
 * the links' (single.c) and the loop's own connections' (arepl.c). */
#define DL_REPLICATE_CHANNEL "dlock:replicate"

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
 * "del" or "expired" (keyspace events). Each time the server confirms the
 * subscription (the first time, and after each reconnect) fn is called
 * with key NULL: anything before may have been missed. Returns 0 or
 * DLOCK_ENOMEM. */
int dl_pubsub_listen(dl_pubsub *p, const char *channel, bool pattern,
                     size_t strip, dl_notice_fn fn, void *ud);
int dl_pubsub_grant(dl_pubsub *p, dl_sub *s, uint64_t *token);
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

/* ---- open.c: the handshake's parts, for the event loop's connections ----
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
/* As dl_aconn_send, with an error reply given as its code (dl_reply_check,
 * the detail recorded for cfg->err_owner), as dl_aconn_eval's: a reply
 * given is never an error. */
dl_areq *dl_aconn_command(dl_aconn *c, int argc, const char **argv,
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
/* Marks r as a take: its reply may carry a value the server took off a
 * list (a queue poll's pop), which a close must not drop. Accepts NULL. */
void dl_aconn_take(dl_areq *r);
/* For a close: while a take (dl_aconn_take) written to the server, at
 * least in part, awaits its reply, drives c's socket here, without the
 * loop (poll), until the last such take's deadline and 50 ms: the replies
 * that come complete their requests as usual (callbacks run, now), and a
 * request made meanwhile fails at once with DLOCK_ECLOSED. Then returns;
 * dl_aconn_free fails what is left. Loop thread; accepts NULL. */
void dl_aconn_drain_takes(dl_aconn *c);
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
/* Read attempts on the socket since creation (tests). */
uint64_t dl_aconn_reads(const dl_aconn *c);
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
 * (fn told from the loop's dispatch; key NULL at each confirmation) and
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

#endif /* DLOCK_REDIS_CONNS_H */
