/* cluster.c: the Redis Cluster link. Each request goes to the master that
 * owns its key's slot (the map from CLUSTER SLOTS), following MOVED (the
 * map corrected) and ASK (ASKING just ahead, same write), and retrying
 * TRYAGAIN, CLUSTERDOWN and connects that failed before anything was sent,
 * within the call's deadline.
 *
 * Waiting goes through one subscriber connection per master, each channel
 * subscribed on the master of its slot. Where the servers have shard
 * channels (Redis 7; ?pubsub=auto probes with PUBSUB SHARDNUMSUB, as
 * Redisson's shardedSubscriptionMode AUTO does) the scripts publish with
 * SPUBLISH and the waiters SSUBSCRIBE: a message stays in its shard, where
 * classic PUBLISH is broadcast to every node over the cluster bus (a cost
 * per release that grows with the cluster). Either way the script's
 * publish counts the listeners on the slot's master, which a hand-off
 * needs. The delayed queue's channels stay classic (Redisson's delayed
 * queue publishes with PUBLISH), heard on any node. */
#include "cluster.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- nodes ---- */

static void node_free(cnode *n) {
  dl_pubsub_free(n->pubsub);
  dl_waitpool_free(&n->waits);
  for (int i = 0; i < n->nconn; i++)
    dl_conn_free(n->conns[i]);
  free(n->conns);
  free(n);
}

/* The node at host:port, made if new (its connections connect at their
 * first request). Returns its index, or -1 (out of memory, or too many). */
static int node_get(cluster_link *b, const char *host, int port) {
  pthread_mutex_lock(&b->mu);
  int n = atomic_load(&b->nnodes);
  for (int i = 0; i < n; i++)
    if (b->nodes[i]->port == port && strcmp(b->nodes[i]->host, host) == 0) {
      pthread_mutex_unlock(&b->mu);
      return i;
    }
  int idx = -1;
  cnode *c = n < MAX_NODES && strlen(host) < sizeof c->host
                 ? calloc(1, sizeof *c)
                 : NULL;
  if (c) {
    snprintf(c->host, sizeof c->host, "%s", host);
    c->port = port;
    dl_slots_node_config(&c->cfg, b->cfg, c->host, port);
    dl_waitpool_init(&c->waits, &c->cfg);
    c->conns = calloc((size_t)b->nconn, sizeof *c->conns);
    int rc = c->conns ? 0 : DLOCK_ENOMEM;
    for (; rc == 0 && c->nconn < b->nconn; c->nconn++)
      rc = dl_conn_new(&c->cfg, &c->conns[c->nconn]);
    if (rc == 0 && b->cfg->backoff_max_ms <= 0)
      rc = dl_pubsub_new(&c->cfg, &c->pubsub);
    if (rc == 0) {
      b->nodes[n] = c;
      atomic_store(&b->nnodes, n + 1);
      idx = n;
    } else {
      node_free(c);
    }
  }
  pthread_mutex_unlock(&b->mu);
  return idx;
}

static cnode *node_at(cluster_link *b, int idx) {
  return idx >= 0 && idx < atomic_load(&b->nnodes) ? b->nodes[idx] : NULL;
}

dl_conn *dl_cl_pick(cnode *n) {
  if (n->nconn == 1) return n->conns[0];
  return n->conns[atomic_fetch_add(&n->next, 1) % (unsigned)n->nconn];
}

/* ---- the slot map ---- */

/* One range of the map: its slots go to host:port's node. */
static int apply_range(void *ctx, int lo, int hi, const char *host, int port) {
  cluster_link *b = ctx;
  int idx = node_get(b, host, port);
  if (idx < 0) return DLOCK_ENOMEM;
  for (int s = lo; s <= hi; s++)
    atomic_store_explicit(&b->slots[s], (unsigned short)idx,
                          memory_order_relaxed);
  return 0;
}

/* The keyspace events the servers send (see cluster.h's keyspace), on
 * the node that just gave the map: then listening on every master costs
 * no request to each (one stopped master made every CLI command wait its
 * connect timeout). Refused (ACL, renamed): none; not answered: asked
 * again at the next map. */
static void ask_keyspace(cluster_link *b, dl_conn *conn) {
  const char *argv[] = {"CONFIG", "GET", "notify-keyspace-events"};
  size_t lens[] = {6, 3, 22};
  redisReply *r = NULL;
  if (dl_conn_call(conn, 3, argv, lens, &r) != 0) return;
  b->want_keyspace = false;
  if (r->type == REDIS_REPLY_ARRAY)
    b->keyspace = r;
  else
    freeReplyObject(r);
}

/* Asks one server for the map (and, the first time, ?pubsub=auto's probe
 * on the server that just gave the map: it answers, where a master chosen
 * by slot may be the one a failover is replacing). Returns 0, or a
 * negative code with why filled in. */
static int ask_slots(cluster_link *b, dl_conn *conn, const char *host, int port,
                     char *why, size_t len) {
  const dlock_client *o = b->env->err_owner;
  int rc = dl_slots_ask(conn, o, host, port, apply_range, b, why, len);
  if (rc == 0 && b->probe)
    rc = dl_slots_probe_sharded(conn, o, host, port, &b->sharded, why, len);
  if (rc == 0) b->probe = false;
  if (rc == 0 && b->want_keyspace) ask_keyspace(b, conn);
  return rc;
}

/* A seed node from the URL, on a connection made for the question. */
static int ask_seed(cluster_link *b, const struct dl_hostport *h, char *why,
                    size_t len) {
  dl_conn_config cfg;
  dl_slots_node_config(&cfg, b->cfg, h->host, h->port);
  dl_conn *c;
  int rc = dl_conn_new(&cfg, &c);
  if (rc != 0) return rc;
  rc = ask_slots(b, c, h->host, h->port, why, len);
  dl_conn_free(c);
  return rc;
}

/* Refreshes the map from the first node that answers: the known nodes
 * (starting after the one asked last), then the URL's seeds. A map asked
 * for within REFRESH_GAP_MS is kept (unless `force`). Returns 0 or a
 * negative code with the detail recorded (every node's answer). */
static int refresh(cluster_link *b, bool force) {
  pthread_mutex_lock(&b->refresh_mu);
  int rc = 0;
  if (force || dl_now_ms() - b->refreshed_ms >= REFRESH_GAP_MS) {
    char why[600] = "", one[300];
    size_t used = 0;
    rc = DLOCK_ECONNECT;
    int n = atomic_load(&b->nnodes);
    for (int i = 0; i < n && rc != 0; i++) {
      cnode *c = b->nodes[i];
      rc = ask_slots(b, dl_cl_pick(c), c->host, c->port, one, sizeof one);
      if (rc != 0 && used < sizeof why)
        used += (size_t)snprintf(why + used, sizeof why - used, "%s%s",
                                 used ? "; " : "", one);
    }
    for (int i = 0; i < b->cfg->ep.nhosts && rc != 0; i++) {
      rc = ask_seed(b, &b->cfg->ep.hosts[i], one, sizeof one);
      if (rc != 0 && used < sizeof why)
        used += (size_t)snprintf(why + used, sizeof why - used, "%s%s",
                                 used ? "; " : "", one);
    }
    if (rc == 0) {
      b->refreshed_ms = dl_now_ms();
      dl_clearerr(b->env->err_owner);
    } else {
      rc =
          dl_seterr(b->env->err_owner, rc == DLOCK_ENOMEM ? rc : DLOCK_ECONNECT,
                    "no cluster node gave its slot map (%s)", why);
    }
  }
  /* Nodes met since the watch began hear the losses too. */
  if (b->notice)
    for (int i = 0; i < atomic_load(&b->nnodes); i++)
      if (!b->nodes[i]->listening) dl_cl_listen_node(b, b->nodes[i]);
  pthread_mutex_unlock(&b->refresh_mu);
  return rc;
}

/* The master of slot, the map refreshed once if it has none. NULL with the
 * detail recorded when none is known. */
cnode *dl_cl_route(cluster_link *b, int slot) {
  if (slot < 0) { /* keyless: the masters in turn */
    unsigned k = atomic_fetch_add(&b->any, 1);
    slot = (int)((k * 5471u) % NSLOTS);
  }
  int idx = atomic_load_explicit(&b->slots[slot], memory_order_relaxed);
  if (idx == NO_NODE) {
    if (refresh(b, false) != 0) return NULL;
    idx = atomic_load_explicit(&b->slots[slot], memory_order_relaxed);
  }
  cnode *n = node_at(b, idx);
  if (n == NULL)
    dl_seterr(b->env->err_owner, DLOCK_ECONNECT,
              "no master serves slot %d (CLUSTERDOWN)", slot);
  return n;
}

/* ---- requests ---- */

/* One request in flight: a script (script >= 0) or a command, its slot
 * (-1: any master), where it went and what came back. */
typedef struct creq {
  int script; /* DL_SCRIPT_*, or -1: argv */
  bool body;  /* EVAL with the body (after NOSCRIPT) */
  bool ping;  /* DL_EVAL_WAKE_FIRST */
  int nkeys, nargs;
  const char *const *keys, *const *args;
  int argc;
  const char **argv;
  const size_t *lens;
  int slot;
  cnode *node;
  dl_conn *conn;
  dl_req *req;
  bool asking;
  bool fixed; /* for this node only (run_on's), never routed elsewhere */
  bool sent;  /* reached the connection (a failure after may have run it) */
  redisReply *reply;
  int err;
} creq;

static void creq_send(cluster_link *b, creq *q) {
  q->req = NULL;
  q->reply = NULL;
  q->err = 0;
  q->sent = false;
  if (q->node == NULL) q->node = dl_cl_route(b, q->slot);
  if (q->node == NULL) {
    q->err = DLOCK_ECONNECT;
    return;
  }
  q->conn = dl_cl_pick(q->node);
  dl_evargv v;
  int argc = q->argc;
  const char **argv = q->argv;
  const size_t *lens = q->lens;
  if (q->script >= 0) {
    argc = dl_evargv_build(q->script | (b->sharded ? DL_EVAL_SHARDED : 0),
                           q->body, q->nkeys, q->keys, q->nargs, q->args, &v);
    if (argc < 0) {
      q->err = dl_seterr(b->env->err_owner, DLOCK_ENOMEM, "out of memory");
      return;
    }
    argv = v.argv;
    lens = v.lens;
  }
  q->req = q->asking
               ? dl_conn_send_asking(q->conn, argc, argv, lens, &q->err)
               : dl_conn_send(q->conn, argc, argv, lens, q->ping, &q->err);
  q->sent = q->req != NULL;
  q->ping = false;
  q->asking = false;
  if (q->script >= 0) dl_evargv_free(&v);
}

/* "MOVED 3999 127.0.0.1:6381" or "ASK ...": the target node's index. */
static int redirect_target(cluster_link *b, const redisReply *r, int *slot) {
  char host[256];
  int port;
  if (!dl_cluster_redirect(r, slot, host, sizeof host, &port)) return -1;
  return node_get(b, host, port);
}

/* The detail of q's error names the node it was for. */
static void name_node(cluster_link *b, creq *q) {
  if (q->err == 0 || q->node == NULL) return;
  const dlock_client *o = b->env->err_owner;
  char was[400];
  snprintf(was, sizeof was, "%s",
           o ? dlock_client_errmsg(o) : dlock_client_open_errmsg());
  char where[300];
  snprintf(where, sizeof where, "cluster node %s:%d", q->node->host,
           q->node->port);
  if (strstr(was, where) == NULL) dl_seterr(o, q->err, "%s (%s)", was, where);
}

static void creq_finish_(cluster_link *b, creq *q, int64_t deadline);

/* Collects q's reply, then follows what the cluster says about it until
 * it is an answer, the deadline passes or MAX_TRIES run out. */
static void creq_finish(cluster_link *b, creq *q, int64_t deadline) {
  creq_finish_(b, q, deadline);
  name_node(b, q);
}

static void creq_finish_(cluster_link *b, creq *q, int64_t deadline) {
  int64_t pause = 10, down_since = 0;
  for (int tries = 0;; tries++) {
    if (q->req) q->err = dl_req_wait(q->conn, q->req, deadline, &q->reply);
    q->req = NULL;
    if (tries == MAX_TRIES || dl_now_ms() >= deadline) return;
    redisReply *r = q->err == 0 ? q->reply : NULL;
    if (r && dl_reply_noscript(r) && q->script >= 0 && !q->body) {
      /* This node's script cache lacks it: the body once. */
      q->body = true;
    } else if (dl_cluster_reply_is(r, "MOVED") ||
               dl_cluster_reply_is(r, "ASK")) {
      bool ask = r->str[0] == 'A';
      int slot;
      int idx = redirect_target(b, r, &slot);
      if (idx < 0) return; /* the error reply stands */
      if (!ask) {
        atomic_store_explicit(&b->slots[slot], (unsigned short)idx,
                              memory_order_relaxed);
        (void)refresh(b, false); /* more slots may have moved with it */
      }
      q->node = b->nodes[idx];
      q->asking = ask;
    } else if (dl_cluster_reply_stands(r, &down_since, pause, deadline)) {
      return;
    } else if (dl_cluster_reply_is(r, "TRYAGAIN") ||
               dl_cluster_reply_is(r, "CLUSTERDOWN") ||
               (q->err != 0 && !q->sent)) {
      /* A slot in migration, a cluster without a quorum of masters, or a
       * master that could not be reached (nothing was sent: safe to send
       * again): the map asked again, after a pause. */
      int64_t until = dl_now_ms() + pause;
      if (until > deadline) until = deadline;
      dl_sleep_ms(until - dl_now_ms());
      pause = pause * 2 > 500 ? 500 : pause * 2;
      if (atomic_load(b->env->closing)) return;
      /* A request for one node (a scan's master) stays with it. */
      if ((refresh(b, false) == 0 || q->slot >= 0) && !q->fixed) q->node = NULL;
    } else {
      if (q->err != 0 && q->sent) (void)refresh(b, false); /* for the next */
      return;
    }
    if (q->reply) freeReplyObject(q->reply);
    q->reply = NULL;
    creq_send(b, q);
  }
}

int dl_cl_slot_of(const char *s) {
  return dl_key_slot(s, strlen(s));
}

static int cl_eval_many(dl_rlink *base, int64_t deadline, int n, int script,
                        const int *nkeys, const char *const *const *keys,
                        const int *nargs, const char *const *const *args,
                        redisReply **replies, int *errs) {
  cluster_link *b = (cluster_link *)base;
  bool ping = (script & DL_EVAL_WAKE_FIRST) != 0;
  script &= ~DL_EVAL_WAKE_FIRST;
  creq one, *qs = n == 1 ? &one : calloc((size_t)n, sizeof *qs);
  if (qs == NULL)
    return dl_seterr(b->env->err_owner, DLOCK_ENOMEM, "out of memory");
  int64_t limit = dl_now_ms() + b->env->command_timeout_ms;
  if (deadline <= 0 || deadline > limit) deadline = limit;
  for (int i = 0; i < n; i++) {
    creq *q = &qs[i];
    memset(q, 0, sizeof *q);
    q->script = script;
    q->ping = ping;
    q->nkeys = nkeys[i];
    q->keys = keys[i];
    q->nargs = nargs[i];
    q->args = args[i];
    q->slot = nkeys[i] > 0 ? dl_cl_slot_of(keys[i][0]) : -1;
    creq_send(b, q);
  }
  int first_err = 0;
  for (int i = 0; i < n; i++) {
    creq_finish(b, &qs[i], deadline);
    replies[i] = qs[i].reply;
    errs[i] = qs[i].err;
    if (errs[i] == 0) errs[i] = dl_reply_check(b->env->err_owner, &replies[i]);
    if (errs[i] != 0 && first_err == 0) first_err = errs[i];
  }
  if (qs != &one) free(qs);
  return first_err;
}

/* One command on node (NULL: routed by slot), its error reply kept. */
static int run_on(cluster_link *b, cnode *node, int slot, int argc,
                  const char **argv, const size_t *lens, redisReply **reply) {
  creq q;
  memset(&q, 0, sizeof q);
  q.script = -1;
  q.argc = argc;
  q.argv = argv;
  q.lens = lens;
  q.slot = slot;
  q.node = node;
  q.fixed = node != NULL;
  creq_send(b, &q);
  creq_finish(b, &q, dl_now_ms() + b->env->command_timeout_ms);
  *reply = q.reply;
  return q.err;
}

/* The masters, in the order of their first slot: how many (<= max). */
static int masters(cluster_link *b, cnode **out, int max) {
  int n = 0, last = -1;
  for (int s = 0; s < NSLOTS; s++) {
    int idx = atomic_load_explicit(&b->slots[s], memory_order_relaxed);
    if (idx == NO_NODE || idx == last) continue;
    last = idx;
    cnode *c = node_at(b, idx);
    bool seen = false;
    for (int i = 0; i < n && !seen; i++)
      seen = out[i] == c;
    if (c && !seen && n < max) out[n++] = c;
  }
  return n;
}

/* SCAN over every master, one after the other, behind one cursor: "0"
 * starts at the first master; "<i>:<cursor>" goes on at master i; the
 * last master's "0" ends. */
static int scan_all(cluster_link *b, int argc, const char **argv,
                    const size_t *lens, redisReply **reply) {
  cnode *ms[MAX_NODES];
  int n = masters(b, ms, MAX_NODES);
  if (n == 0 && refresh(b, false) == 0) n = masters(b, ms, MAX_NODES);
  if (n == 0)
    return dl_seterr(b->env->err_owner, DLOCK_ECONNECT,
                     "no cluster master is known");
  long i;
  const char *cur;
  dl_cluster_scan_cursor(argv[1], &i, &cur);
  if (i < 0 || i >= n)
    return dl_seterr(b->env->err_owner, DLOCK_EINVAL,
                     "the cluster's masters changed during the scan");
  const char *v[16];
  size_t l[16];
  if (argc > 16)
    return dl_seterr(b->env->err_owner, DLOCK_EINVAL, "too many args");
  for (int k = 0; k < argc; k++)
    v[k] = argv[k], l[k] = lens[k];
  v[1] = cur;
  l[1] = strlen(cur);
  int rc = run_on(b, ms[i], -1, argc, v, l, reply);
  if (rc != 0) return rc;
  rc = dl_reply_check(b->env->err_owner, reply);
  if (rc != 0) return rc;
  if (dl_cluster_scan_next(*reply, i, n) != 0) {
    freeReplyObject(*reply);
    *reply = NULL;
    return dl_seterr(b->env->err_owner, DLOCK_ENOMEM, "out of memory");
  }
  return 0;
}

static int cl_command_bin(dl_rlink *base, int argc, const char **argv,
                          const size_t *lens, redisReply **reply) {
  cluster_link *b = (cluster_link *)base;
  *reply = NULL;
  if (argc >= 2 && strcasecmp(argv[0], "SCAN") == 0)
    return scan_all(b, argc, argv, lens, reply);
  const char *v[4];
  size_t l[4];
  if (b->sharded && (argc == 3 || argc == 4) &&
      strcasecmp(argv[0], "PUBSUB") == 0 &&
      strcasecmp(argv[1], "NUMSUB") == 0 &&
      !dl_cluster_classic_channel(argv[2]) &&
      (argc == 3 || !dl_cluster_classic_channel(argv[3]))) {
    /* Who listens on a lock's channels (one slot): their shard channels'
     * subscribers. */
    for (int i = 0; i < argc; i++)
      v[i] = argv[i], l[i] = lens[i];
    v[1] = "SHARDNUMSUB", l[1] = 11;
    argv = v;
    lens = l;
  }
  int rc = run_on(b, NULL, dl_cluster_command_slot(argc, argv, lens), argc,
                  argv, lens, reply);
  if (rc == 0) rc = dl_reply_check(b->env->err_owner, reply);
  return rc;
}

static int cl_command(dl_rlink *base, int argc, const char **argv,
                      redisReply **reply) {
  cluster_link *b = (cluster_link *)base;
  size_t lens[16];
  if (argc > 16)
    return dl_seterr(b->env->err_owner, DLOCK_EINVAL, "too many args");
  for (int i = 0; i < argc; i++)
    lens[i] = strlen(argv[i]);
  return cl_command_bin(base, argc, argv, lens, reply);
}

/* Marker and WAIT on a connection of node's own (links.h's dl_waitpool). */
static int replicate_on(cluster_link *b, cnode *node, int n, int timeout_ms) {
  return dl_waitpool_replicate(&node->waits, n, timeout_ms,
                               b->env->command_timeout_ms, b->env->err_owner);
}

static int cl_replicate(dl_rlink *base, const char *const *keys, int nkeys,
                        int n, int timeout_ms) {
  cluster_link *b = (cluster_link *)base;
  cnode *ms[MAX_NODES];
  int k = 0, least = 1000000;
  if (nkeys > 0) { /* each key's master, once */
    for (int i = 0; i < nkeys; i++) {
      cnode *m = dl_cl_route(b, dl_cl_slot_of(keys[i]));
      if (m == NULL) return DLOCK_ECONNECT; /* the detail recorded */
      int j = 0;
      while (j < k && ms[j] != m)
        j++;
      if (j == k && k < MAX_NODES) ms[k++] = m;
    }
  } else {
    k = masters(b, ms, MAX_NODES);
  }
  for (int i = 0; i < k; i++) {
    int got = replicate_on(b, ms[i], n, timeout_ms);
    if (got < 0) return got;
    if (got < least) least = got;
  }
  return least;
}

static void cl_free(dl_rlink *base) {
  cluster_link *b = (cluster_link *)base;
  if (b == NULL) return;
  for (int i = 0; i < atomic_load(&b->nnodes); i++)
    node_free(b->nodes[i]);
  pthread_mutex_destroy(&b->mu);
  pthread_mutex_destroy(&b->refresh_mu);
  if (b->keyspace) freeReplyObject(b->keyspace);
  free(b->revoke);
  free(b);
}

static void cl_stats(dl_rlink *base, dlock_client_stats *st) {
  cluster_link *b = (cluster_link *)base;
  for (int i = 0; i < atomic_load(&b->nnodes); i++) {
    cnode *n = b->nodes[i];
    for (int k = 0; k < n->nconn; k++)
      st->writes += dl_conn_batches(n->conns[k]);
    if (n->pubsub) st->wakeups += dl_pubsub_wakeups(n->pubsub);
  }
}

static const dl_rlink_ops cluster_ops = {
    .name = "cluster",
    .by_slot = true,
    .eval_many = cl_eval_many,
    .command = cl_command,
    .replicate = cl_replicate,
    .command_bin = cl_command_bin,
    .sub_ref = dl_cl_sub_ref,
    .sub_wait = dl_cl_sub_wait,
    .sub_grant = dl_cl_sub_grant,
    .sub_unref = dl_cl_sub_unref,
    .sub_kick = dl_cl_sub_kick,
    .watch_losses = dl_cl_watch_losses,
    .free = cl_free,
    .stats = cl_stats,
};

int dl_cluster_link_new(const dl_conn_config *cfg, const dl_backend_env *env,
                        int nconn, dl_rlink **out) {
  *out = NULL;
  dl_scripts_init();
  cluster_link *b = calloc(1, sizeof *b);
  if (b == NULL) return dl_seterr(NULL, DLOCK_ENOMEM, "out of memory");
  b->base.ops = &cluster_ops;
  b->env = env;
  b->cfg = cfg;
  b->nconn = nconn > 0 ? nconn : 1;
  pthread_mutex_init(&b->mu, NULL);
  pthread_mutex_init(&b->refresh_mu, NULL);
  for (int s = 0; s < NSLOTS; s++)
    atomic_init(&b->slots[s], NO_NODE);
  /* ?pubsub= decides sharded; auto asks the first node to give the map. */
  b->sharded = cfg->ep.cluster_pubsub == DL_PUBSUB_SHARDED;
  b->probe =
      cfg->ep.cluster_pubsub == DL_PUBSUB_AUTO && cfg->backoff_max_ms <= 0;
  b->want_keyspace = cfg->backoff_max_ms <= 0;
  int rc = refresh(b, true);
  if (rc != 0) {
    cl_free(&b->base);
    return rc;
  }
  *out = &b->base;
  return 0;
}
