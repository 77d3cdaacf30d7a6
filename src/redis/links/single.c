/* single.c: the single-server link: scripts by EVALSHA over pipelined command
 * connections, waiting through the subscriber connection (or by backoff). */
#include "links.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct single_link {
  dl_rlink base;
  const dl_backend_env *env;
  const dl_conn_config *cfg;
  int nconn;
  dl_conn **conns;
  atomic_uint next;
  dl_pubsub *pubsub;
  dl_waitpool waits; /* replica acknowledgement's own connections */
} single_link;

static dl_conn *pick(single_link *b) {
  if (b->nconn == 1) return b->conns[0];
  return b->conns[atomic_fetch_add(&b->next, 1) % (unsigned)b->nconn];
}

/* EVAL with the script's body, for a NOSCRIPT reply. */
static int send_body(dl_conn *conn, int script, int nkeys,
                     const char *const *keys, int nargs,
                     const char *const *args, redisReply **reply) {
  dl_evargv v;
  int argc = dl_evargv_build(script, true, nkeys, keys, nargs, args, &v);
  if (argc < 0) return DLOCK_ENOMEM;
  int rc = dl_conn_call(conn, argc, v.argv, v.lens, reply);
  dl_evargv_free(&v);
  return rc;
}

static int rb_eval_many(dl_rlink *base, int64_t deadline, int n, int script,
                        const int *nkeys,
                        const char *const *const *keys, const int *nargs,
                        const char *const *const *args, redisReply **replies,
                        int *errs) {
  single_link *b = (single_link *)base;
  bool ping_first = (script & DL_EVAL_WAKE_FIRST) != 0;
  script &= ~DL_EVAL_WAKE_FIRST;
  dl_conn *conn = pick(b);
  dl_req *one = NULL;
  dl_req **reqs = n == 1 ? &one : calloc((size_t)n, sizeof *reqs);
  if (reqs == NULL) return dl_seterr(b->env->err_owner, DLOCK_ENOMEM, "out of memory");
  int64_t limit = dl_now_ms() + b->env->command_timeout_ms;
  if (deadline <= 0 || deadline > limit) deadline = limit;
  for (int i = 0; i < n; i++) {
    dl_evargv v;
    replies[i] = NULL;
    errs[i] = 0;
    int argc = dl_evargv_build(script, false, nkeys[i], keys[i], nargs[i], args[i],
                          &v);
    if (argc < 0) {
      errs[i] = DLOCK_ENOMEM;
      continue;
    }
    reqs[i] = dl_conn_send(conn, argc, v.argv, v.lens, ping_first, &errs[i]);
    dl_evargv_free(&v);
  }
  bool readonly = false;
  for (int i = 0; i < n; i++) {
    if (reqs[i] != NULL)
      errs[i] = dl_req_wait(conn, reqs[i], deadline, &replies[i]);
    if (errs[i] == 0 && dl_reply_noscript(replies[i])) {
      /* SCRIPT FLUSH or a restart: send the body once, then EVALSHA works
       * again for everyone. */
      freeReplyObject(replies[i]);
      replies[i] = NULL;
      errs[i] = send_body(conn, script, nkeys[i], keys[i], nargs[i], args[i],
                          &replies[i]);
    }
    if (errs[i] == 0 && b->cfg->ep.master_name && dl_reply_readonly(replies[i]))
      readonly = true;
  }
  /* Sentinel: the server turned replica (a failover this client did not
   * hear of). The scripts it refused wrote nothing (a replica refuses a
   * script's first write), so they go once more, to the master the
   * sentinels name now. */
  if (readonly) {
    dl_conn_drop(conn, DLOCK_ECONNLOST, "the server is a replica now "
                 "(READONLY): reconnecting to the master");
    for (int i = 0; i < n; i++) {
      if (errs[i] != 0 || !dl_reply_readonly(replies[i])) continue;
      freeReplyObject(replies[i]);
      replies[i] = NULL;
      dl_evargv v;
      int argc = dl_evargv_build(script, false, nkeys[i], keys[i], nargs[i],
                                 args[i], &v);
      if (argc < 0) {
        errs[i] = DLOCK_ENOMEM;
        continue;
      }
      errs[i] = dl_conn_call(conn, argc, v.argv, v.lens, &replies[i]);
      dl_evargv_free(&v);
      if (errs[i] == 0 && dl_reply_noscript(replies[i])) {
        freeReplyObject(replies[i]);
        replies[i] = NULL;
        errs[i] = send_body(conn, script, nkeys[i], keys[i], nargs[i],
                            args[i], &replies[i]);
      }
    }
  }
  int first_err = 0;
  for (int i = 0; i < n; i++) {
    if (errs[i] == 0) errs[i] = dl_reply_check(b->env->err_owner, &replies[i]);
    if (errs[i] != 0 && first_err == 0) first_err = errs[i];
  }
  if (reqs != &one) free(reqs);
  return first_err;
}

static int rb_command_bin(dl_rlink *base, int argc, const char **argv,
                          const size_t *lens, redisReply **reply) {
  single_link *b = (single_link *)base;
  int rc = dl_conn_call(pick(b), argc, argv, lens, reply);
  if (rc == 0) rc = dl_reply_check(b->env->err_owner, reply);
  return rc;
}

static int rb_command(dl_rlink *base, int argc, const char **argv,
                      redisReply **reply) {
  single_link *b = (single_link *)base;
  size_t lens[16];
  if (argc > 16) return dl_seterr(b->env->err_owner, DLOCK_EINVAL, "too many args");
  for (int i = 0; i < argc; i++) lens[i] = strlen(argv[i]);
  return rb_command_bin(base, argc, argv, lens, reply);
}

/* Asks the server on conn how it can acknowledge (once per connection):
 * WAITAOF where it has the command and an append-only file, else WAIT. */
static int ack_kind(dl_conn *conn) {
  int kind = dl_conn_ack_kind(conn);
  if (kind != 0) return kind;
  kind = DL_ACK_WAIT;
  const char *cfg[3] = {"CONFIG", "GET", "appendonly"};
  size_t clen[3] = {6, 3, 10};
  redisReply *r = NULL;
  bool aof = dl_conn_call(conn, 3, cfg, clen, &r) == 0 &&
             r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
             r->element[1]->type == REDIS_REPLY_STRING &&
             strcmp(r->element[1]->str, "yes") == 0;
  if (r) freeReplyObject(r);
  if (aof) {
    const char *probe[4] = {"WAITAOF", "0", "0", "0"};
    size_t plen[4] = {7, 1, 1, 1};
    r = NULL;
    if (dl_conn_call(conn, 4, probe, plen, &r) == 0 &&
        r->type == REDIS_REPLY_ARRAY)
      kind = DL_ACK_WAITAOF; /* Redis 7.2 and later */
    if (r) freeReplyObject(r);
  }
  dl_conn_set_ack_kind(conn, kind);
  return kind;
}

/* DLOCK_REPLICAS_AUTO: the replicas the master on conn has now (ROLE),
 * or a negative code. */
static int replicas_now(dl_conn *conn, const struct dlock_client *owner) {
  const char *role[1] = {"ROLE"};
  size_t rlen[1] = {4};
  redisReply *r = NULL;
  int rc = dl_conn_call(conn, 1, role, rlen, &r);
  return rc != 0 ? rc : dl_role_replicas(owner, r);
}

int dl_conn_replicate(dl_conn *conn, int n, int timeout_ms,
                      int command_timeout_ms, const struct dlock_client *owner) {
  int want = n;
  if (n == DLOCK_REPLICAS_AUTO) {
    n = replicas_now(conn, owner);
    if (n <= 0) return n; /* none to wait for, or the error */
  }
  char ns[16], ts[16];
  snprintf(ns, sizeof ns, "%d", n);
  snprintf(ts, sizeof ts, "%d", timeout_ms);
  bool aof = ack_kind(conn) == DL_ACK_WAITAOF;
  const char *mark[3] = {"PUBLISH", DL_REPLICATE_CHANNEL, ""};
  const char *wait[4] = {"WAIT", ns, ts};
  const char *waitaof[4] = {"WAITAOF", "1", ns, ts};
  size_t mlen[3] = {7, strlen(DL_REPLICATE_CHANNEL), 0};
  size_t wlen[3] = {4, strlen(ns), strlen(ts)};
  size_t alen[4] = {7, 1, strlen(ns), strlen(ts)};
  int err = 0;
  dl_req *m = dl_conn_send(conn, 3, mark, mlen, false, &err);
  if (m == NULL) return err;
  dl_req *w = aof ? dl_conn_send(conn, 4, waitaof, alen, false, &err)
                  : dl_conn_send(conn, 3, wait, wlen, false, &err);
  int64_t deadline = dl_now_ms() + command_timeout_ms + timeout_ms;
  redisReply *mr = NULL, *wr = NULL;
  int rc = dl_req_wait(conn, m, deadline, &mr);
  if (mr) freeReplyObject(mr);
  if (w == NULL) return err;
  int rc2 = dl_req_wait(conn, w, deadline, &wr);
  if (rc2 == 0) rc2 = dl_reply_check(owner, &wr);
  if (rc == 0) rc = rc2;
  long long got = -1;
  if (rc == 0 && !aof && wr->type == REDIS_REPLY_INTEGER) got = wr->integer;
  /* WAITAOF: [local fsyncs, replica fsyncs]; the master's own first. */
  if (rc == 0 && aof && wr->type == REDIS_REPLY_ARRAY && wr->elements == 2 &&
      wr->element[0]->type == REDIS_REPLY_INTEGER &&
      wr->element[1]->type == REDIS_REPLY_INTEGER)
    got = wr->element[0]->integer >= 1 ? wr->element[1]->integer : 0;
  if (rc == 0 && got < 0)
    rc = dl_seterr(owner, DLOCK_EPROTO, "unexpected reply to %s",
                   aof ? "WAITAOF" : "WAIT");
  if (rc == 0) rc = got > 1000000 ? 1000000 : (int)got;
  if (wr) freeReplyObject(wr);
  if (want == DLOCK_REPLICAS_AUTO && rc >= 0 && rc < n)
    rc = dl_auto_shortfall(owner, rc, n, timeout_ms);
  return rc;
}

void dl_waitpool_init(dl_waitpool *p, const dl_conn_config *cfg) {
  pthread_mutex_init(&p->mu, NULL);
  p->cfg = cfg;
  p->nidle = 0;
}

void dl_waitpool_free(dl_waitpool *p) {
  for (int i = 0; i < p->nidle; i++)
    dl_conn_free(p->idle[i]);
  p->nidle = 0;
  pthread_mutex_destroy(&p->mu);
}

int dl_waitpool_replicate(dl_waitpool *p, int n, int timeout_ms,
                          int command_timeout_ms,
                          const struct dlock_client *owner) {
  pthread_mutex_lock(&p->mu);
  dl_conn *c = p->nidle > 0 ? p->idle[--p->nidle] : NULL;
  pthread_mutex_unlock(&p->mu);
  if (c == NULL) {
    int rc = dl_conn_new(p->cfg, &c);
    if (rc != 0) return dl_seterr(owner, rc, "out of memory");
  }
  int rc = dl_conn_replicate(c, n, timeout_ms, command_timeout_ms, owner);
  pthread_mutex_lock(&p->mu);
  if (p->nidle < (int)(sizeof p->idle / sizeof p->idle[0])) {
    p->idle[p->nidle++] = c;
    c = NULL;
  }
  pthread_mutex_unlock(&p->mu);
  dl_conn_free(c); /* enough are kept */
  return rc;
}

static int rb_replicate(dl_rlink *base, const char *const *keys, int nkeys,
                        int n, int timeout_ms) {
  single_link *b = (single_link *)base;
  (void)keys, (void)nkeys; /* one server */
  return dl_waitpool_replicate(&b->waits, n, timeout_ms,
                               b->env->command_timeout_ms, b->env->err_owner);
}

typedef dl_backoff backoff;

void dl_backoff_init(dl_backoff *w) {
  w->delay = 1;
  w->rng = dl_thread_id() * 0x9e3779b97f4a7c15ull ^ (uint64_t)dl_now_us();
}

int64_t dl_backoff_next(dl_backoff *w, int64_t max_ms) {
  w->rng ^= w->rng << 13;
  w->rng ^= w->rng >> 7;
  w->rng ^= w->rng << 17;
  int64_t half = w->delay / 2;
  int64_t d = w->delay - half;
  if (half > 0) d += (int64_t)(w->rng % (uint64_t)(half + 1));
  w->delay *= 2;
  if (w->delay > max_ms) w->delay = max_ms;
  return d;
}

static dl_sub *rb_sub_ref(dl_rlink *base, const char *channel, int mode,
                          int64_t deadline) {
  single_link *b = (single_link *)base;
  if (b->pubsub == NULL && (mode == DL_WAKE_GRANT || deadline < 0))
    return NULL; /* no grants; nothing subscribed */
  if (b->pubsub == NULL) {
    backoff *w = calloc(1, sizeof *w);
    if (w) dl_backoff_init(w);
    return (dl_sub *)w; /* NULL: sleeps until the TTL, see rb_sub_wait */
  }
  return dl_pubsub_ref(b->pubsub, channel, mode, deadline);
}

static int backoff_wait(single_link *b, backoff *w, int64_t deadline) {
  int64_t until = dl_now_ms() + dl_backoff_next(w, b->cfg->backoff_max_ms);
  if (until > deadline) until = deadline;
  dl_sleep_ms(until - dl_now_ms());
  return atomic_load(b->env->closing) ? DLOCK_ECLOSED : 0;
}

static int rb_sub_wait(dl_rlink *base, dl_sub *s, int64_t deadline,
                       int64_t since, dl_sub *grant) {
  single_link *b = (single_link *)base;
  if (s && b->pubsub == NULL) return backoff_wait(b, (backoff *)s, deadline);
  if (s == NULL) { /* no memory for a subscription: fall back to the TTL */
    dl_sleep_ms(deadline - dl_now_ms());
    return 0;
  }
  return dl_pubsub_wait(b->pubsub, s, deadline, since, grant);
}

static int rb_sub_grant(dl_rlink *base, dl_sub *s, uint64_t *token) {
  single_link *b = (single_link *)base;
  if (b->pubsub == NULL || s == NULL) return -1;
  return dl_pubsub_grant(b->pubsub, s, token);
}

static void rb_sub_unref(dl_rlink *base, dl_sub *s, bool linger) {
  single_link *b = (single_link *)base;
  if (b->pubsub == NULL) free(s);
  else dl_pubsub_unref(b->pubsub, s, linger);
}

static void rb_sub_kick(dl_rlink *base, dl_sub *s) {
  single_link *b = (single_link *)base;
  if (b->pubsub) dl_pubsub_kick(b->pubsub, s);
}

/* The server's keyspace events, where enabled (notify-keyspace-events):
 * keyevent channels (E) carry the key, one channel per event, so only del
 * and expired are heard; keyspace channels (K) carry the event, one channel
 * per key, so a pattern over the client's keys hears every event of every
 * key under the prefix and keeps del and expired. Read once, at open: the
 * setting changed later is not followed (docs/SAFETY.md). */
int dl_keyspace_listen(const redisReply *config, int db, const char *prefix,
                       int (*listen)(void *ctx, const char *channel,
                                     bool pattern, size_t strip),
                       void *ctx) {
  char flags[32] = "";
  if (config->type == REDIS_REPLY_ARRAY && config->elements == 2 &&
      config->element[1]->type == REDIS_REPLY_STRING)
    snprintf(flags, sizeof flags, "%s", config->element[1]->str);
  bool all = strchr(flags, 'A') != NULL;
  bool del = all || strchr(flags, 'g'), exp = all || strchr(flags, 'x');
  int rc = 0;
  char ch[DLOCK_KEY_PREFIX_MAX + 64];
  if (strchr(flags, 'E')) {
    if (del && rc == 0) {
      snprintf(ch, sizeof ch, "__keyevent@%d__:del", db);
      rc = listen(ctx, ch, false, 0);
    }
    if (exp && rc == 0) {
      snprintf(ch, sizeof ch, "__keyevent@%d__:expired", db);
      rc = listen(ctx, ch, false, 0);
    }
  } else if (strchr(flags, 'K') && (del || exp)) {
    int n = snprintf(ch, sizeof ch, "__keyspace@%d__:", db);
    /* Glob metacharacters in the prefix would widen the pattern: escape. */
    for (const char *k = prefix; *k && n < (int)sizeof ch - 3; k++) {
      if (strchr("*?[]\\", *k)) ch[n++] = '\\';
      ch[n++] = *k;
    }
    ch[n++] = '*';
    ch[n] = '\0';
    size_t strip = (size_t)snprintf(NULL, 0, "__keyspace@%d__:", db);
    rc = listen(ctx, ch, true, strip);
  }
  return rc;
}

typedef struct listen_ctx {
  dl_pubsub *p;
  dl_notice_fn fn;
  void *ud;
} listen_ctx;

static int listen_on(void *ctx, const char *channel, bool pattern,
                     size_t strip) {
  listen_ctx *x = ctx;
  return dl_pubsub_listen(x->p, channel, pattern, strip, x->fn, x->ud);
}

int dl_pubsub_watch_losses(dl_pubsub *p, dl_conn *conn,
                           const char *revoke_channel, int db,
                           const char *prefix, dl_notice_fn fn, void *ud,
                           const struct dlock_client *owner) {
  listen_ctx x = {p, fn, ud};
  int rc = listen_on(&x, revoke_channel, false, 0);
  if (rc != 0) return rc;
  const char *argv[] = {"CONFIG", "GET", "notify-keyspace-events"};
  size_t lens[] = {6, 3, 22};
  redisReply *r = NULL;
  rc = dl_conn_call(conn, 3, argv, lens, &r);
  if (rc == 0) rc = dl_reply_check(owner, &r);
  if (rc != 0) {
    dl_clearerr(owner); /* CONFIG refused (ACL, renamed), or down: none */
    return 0;
  }
  rc = dl_keyspace_listen(r, db, prefix, listen_on, &x);
  freeReplyObject(r);
  return rc;
}

int dl_pubsub_watch_losses_with(dl_pubsub *p, const struct redisReply *cfg,
                                const char *revoke_channel, int db,
                                const char *prefix, dl_notice_fn fn,
                                void *ud) {
  listen_ctx x = {p, fn, ud};
  int rc = listen_on(&x, revoke_channel, false, 0);
  if (rc != 0 || cfg == NULL) return rc;
  return dl_keyspace_listen(cfg, db, prefix, listen_on, &x);
}

static int rb_watch_losses(dl_rlink *base, const char *revoke_channel,
                           dl_notice_fn fn, void *ud) {
  single_link *b = (single_link *)base;
  if (b->pubsub == NULL) return 0; /* waiting by backoff: no pub/sub */
  return dl_pubsub_watch_losses(b->pubsub, pick(b), revoke_channel,
                                b->cfg->ep.db, b->env->key_prefix, fn, ud,
                                b->env->err_owner);
}

static void rb_free(dl_rlink *base) {
  single_link *b = (single_link *)base;
  if (b == NULL) return;
  dl_pubsub_free(b->pubsub);
  for (int i = 0; i < b->nconn; i++) dl_conn_free(b->conns[i]);
  dl_waitpool_free(&b->waits);
  free(b->conns);
  free(b);
}

static void rb_stats(dl_rlink *base, dlock_client_stats *st) {
  single_link *b = (single_link *)base;
  for (int i = 0; i < b->nconn; i++) st->writes += dl_conn_batches(b->conns[i]);
  if (b->pubsub) st->wakeups += dl_pubsub_wakeups(b->pubsub);
}

static const dl_rlink_ops single_ops = {
    .name = "single",
    .eval_many = rb_eval_many,
    .command = rb_command,
    .replicate = rb_replicate,
    .command_bin = rb_command_bin,
    .sub_ref = rb_sub_ref,
    .sub_wait = rb_sub_wait,
    .sub_grant = rb_sub_grant,
    .sub_unref = rb_sub_unref,
    .sub_kick = rb_sub_kick,
    .watch_losses = rb_watch_losses,
    .free = rb_free,
    .stats = rb_stats,
};

/* The single link, connected now (so that a wrong URL or password fails
 * the open) or at its first request (lazy), with a subscriber unless env
 * says to wait by backoff (or lazy: none). */
static int single_new(const dl_conn_config *cfg, const dl_backend_env *env,
                      int nconn, bool lazy, single_link **out) {
  *out = NULL;
  dl_scripts_init();
  single_link *b = calloc(1, sizeof *b);
  if (b == NULL) return DLOCK_ENOMEM;
  b->base.ops = &single_ops;
  b->env = env;
  b->cfg = cfg;
  dl_waitpool_init(&b->waits, cfg);
  b->conns = calloc((size_t)nconn, sizeof *b->conns);
  if (b->conns == NULL) {
    free(b);
    return DLOCK_ENOMEM;
  }
  int rc = 0;
  for (; b->nconn < nconn; b->nconn++) {
    rc = dl_conn_new(cfg, &b->conns[b->nconn]);
    if (rc != 0) break;
  }
  if (rc == 0 && !lazy) rc = dl_conn_connect(b->conns[0]);
  /* The sentinels answer and name a master that cannot be used yet: a
   * failover under way. The open succeeds (its first request connects, and
   * a wait rides the failover out), as it would have a moment before. */
  if (rc == DLOCK_ECONNECT && cfg->ep.master_name &&
      dl_conn_failing_over(b->conns[0])) {
    dl_clearerr(env->err_owner);
    rc = 0;
  }
  if (rc == 0 && !lazy && cfg->backoff_max_ms <= 0)
    rc = dl_pubsub_new(cfg, &b->pubsub);
  if (rc != 0) {
    rb_free(&b->base);
    return rc;
  }
  *out = b;
  return 0;
}

int dl_single_link_new(const dl_conn_config *cfg, const dl_backend_env *env,
                       int nconn, dl_rlink **out) {
  single_link *b;
  int rc = single_new(cfg, env, nconn, false, &b);
  *out = rc == 0 ? &b->base : NULL;
  return rc;
}

int dl_single_link_lazy(const dl_conn_config *cfg, const dl_backend_env *env,
                        dl_rlink **out, dl_conn **conn) {
  single_link *b;
  int rc = single_new(cfg, env, 1, true, &b);
  *out = rc == 0 ? &b->base : NULL;
  *conn = rc == 0 ? b->conns[0] : NULL;
  return rc;
}

/* l as the single link, or NULL. */
static single_link *single_of(dl_rlink *l) {
  return l->ops == &single_ops ? (single_link *)l : NULL;
}

uint64_t dl_single_link_direct_wakeups(dl_rlink *l) {
  single_link *b = single_of(l);
  return b && b->pubsub ? dl_pubsub_direct_wakeups(b->pubsub) : 0;
}

bool dl_single_link_sleeper_reads(dl_rlink *l) {
  single_link *b = single_of(l);
  return b && b->pubsub ? dl_pubsub_sleeper_reads(b->pubsub) : false;
}
