/* acluster.c: the Redis Cluster link for an event loop: cluster.c's routing
 * by slot (MOVED followed with the map corrected, ASK with ASKING just
 * ahead in the same write, TRYAGAIN, CLUSTERDOWN and requests that could
 * not be sent retried after a pause on the loop's timers, within the
 * step's deadline) over a dl_aconn per master, and waiting through a
 * dl_asub per master (each channel on the master of its slot, shard
 * channels in sharded mode), or by backoff. Every call but the open runs
 * on the loop's thread.
 *
 * The slot map is read with a blocking CLUSTER SLOTS, at the open and
 * when a MOVED or a failure says it changed (at most every
 * REFRESH_GAP_MS), also on the loop's thread: name resolution at each
 * connect blocks that thread already, and a map read is as rare. */
#include "acluster.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- nodes and the slot map ---- */

static void node_free(anode *n) {
  dl_asub_free(n->sub);
  dl_awaitpool_free(n->waits);
  dl_aconn_free(n->conn);
  free(n);
}

/* The node at host:port, made if new (it connects at its first request).
 * Returns its index, or -1 (out of memory, or too many). */
static int node_get(acl_link *L, const char *host, int port) {
  for (int i = 0; i < L->nnodes; i++)
    if (L->nodes[i]->port == port && strcmp(L->nodes[i]->host, host) == 0)
      return i;
  if (L->nnodes >= MAX_NODES || strlen(host) >= sizeof L->nodes[0]->host)
    return -1;
  anode *n = calloc(1, sizeof *n);
  if (n == NULL) return -1;
  snprintf(n->host, sizeof n->host, "%s", host);
  n->port = port;
  dl_slots_node_config(&n->cfg, L->cfg, n->host, port);
  int rc = dl_aconn_new(L->h.env->loop, &n->cfg, &n->conn);
  if (rc == 0) rc = dl_awaitpool_new(L->h.env->loop, &n->cfg, &n->waits);
  if (rc == 0 && L->cfg->backoff_max_ms <= 0)
    rc = dl_asub_new(L->h.env->loop, &n->cfg, &n->sub);
  if (rc != 0) {
    node_free(n);
    return -1;
  }
  L->nodes[L->nnodes] = n;
  if (L->notice) dl_acl_listen_node(L, n);
  return L->nnodes++;
}

static int apply_range(void *ctx, int lo, int hi, const char *host, int port) {
  acl_link *L = ctx;
  int idx = node_get(L, host, port);
  if (idx < 0) return DLOCK_ENOMEM;
  for (int s = lo; s <= hi; s++)
    L->slots[s] = (unsigned short)idx;
  return 0;
}

/* Asks host:port for the map (and, the first time, ?pubsub=auto's probe,
 * as cluster.c's ask_slots), blocking, on a connection made for it. Returns
 * 0, or a negative code with why filled in. */
static int ask_slots(acl_link *L, const char *host, int port, char *why,
                     size_t len) {
  char hb[256];
  snprintf(hb, sizeof hb, "%s", host);
  dl_conn_config cfg;
  dl_slots_node_config(&cfg, L->cfg, hb, port);
  dl_conn *c;
  int rc = dl_conn_new(&cfg, &c);
  if (rc != 0) {
    snprintf(why, len, "%s:%d: out of memory", host, port);
    return rc;
  }
  const dlock_client *o = L->h.env->err_owner;
  rc = dl_slots_ask(c, o, host, port, apply_range, L, why, len);
  if (rc == 0 && L->probe)
    rc = dl_slots_probe_sharded(c, o, host, port, &L->sharded, why, len);
  if (rc == 0) L->probe = false;
  dl_conn_free(c);
  return rc;
}

/* Refreshes the map from the first node that answers: the known nodes,
 * then the URL's seeds (blocking: see the top). A map asked for within
 * REFRESH_GAP_MS is kept (unless `force`). Returns 0 or a negative code
 * with the detail recorded (every node's answer). */
static int refresh(acl_link *L, bool force) {
  if (!force && dl_now_ms() - L->refreshed_ms < REFRESH_GAP_MS) return 0;
  char why[600] = "", one[300];
  size_t used = 0;
  int rc = DLOCK_ECONNECT;
  int n = L->nnodes;
  for (int i = 0; i < n + L->cfg->ep.nhosts && rc != 0; i++) {
    const char *host = i < n ? L->nodes[i]->host : L->cfg->ep.hosts[i - n].host;
    int port = i < n ? L->nodes[i]->port : L->cfg->ep.hosts[i - n].port;
    rc = ask_slots(L, host, port, one, sizeof one);
    if (rc != 0 && used < sizeof why)
      used += (size_t)snprintf(why + used, sizeof why - used, "%s%s",
                               used ? "; " : "", one);
  }
  if (rc == 0) {
    L->refreshed_ms = dl_now_ms();
    dl_clearerr(L->h.env->err_owner);
    return 0;
  }
  return dl_seterr(L->h.env->err_owner,
                   rc == DLOCK_ENOMEM ? rc : DLOCK_ECONNECT,
                   "no cluster node gave its slot map (%s)", why);
}

/* The master of slot (-1: the masters in turn), the map refreshed once if
 * it has none. NULL with the detail recorded when none is known. */
anode *dl_acl_route(acl_link *L, int slot) {
  if (slot < 0) slot = (int)((L->any++ * 5471u) % NSLOTS);
  if (L->slots[slot] == NO_NODE && refresh(L, false) != 0) return NULL;
  int idx = L->slots[slot];
  if (idx != NO_NODE && idx < L->nnodes) return L->nodes[idx];
  dl_seterr(L->h.env->err_owner, DLOCK_ECONNECT,
            "no master serves slot %d (CLUSTERDOWN)", slot);
  return NULL;
}

/* The masters, in the order of their first slot: how many (<= max). */
int dl_acl_masters(acl_link *L, anode **out, int max) {
  int n = 0, last = -1;
  for (int s = 0; s < NSLOTS; s++) {
    int idx = L->slots[s];
    if (idx == NO_NODE || idx == last || idx >= L->nnodes) continue;
    last = idx;
    bool seen = false;
    for (int i = 0; i < n && !seen; i++)
      seen = out[i] == L->nodes[idx];
    if (!seen && n < max) out[n++] = L->nodes[idx];
  }
  return n;
}

/* ---- pauses ---- */
typedef struct apause {
  apend h;
  dl_timer t;
} apause;

static void on_pause(void *ud) {
  apause *a = ud;
  dl_pend *p = a->h.p;
  pend_unlink(a->h.L, &a->h);
  free(a);
  p->link_data = NULL;
  p->rc = 0;
  p->resume(p);
}

int dl_acl_pause_start(dl_rlink *base, dl_pend *p, int64_t until) {
  acl_link *L = (acl_link *)base;
  if (L->closing) {
    p->rc = DLOCK_ECLOSED;
    return 0;
  }
  apause *a = calloc(1, sizeof *a);
  if (a == NULL) {
    p->rc = dl_seterr(L->h.env->err_owner, DLOCK_ENOMEM, "out of memory");
    return 0;
  }
  a->h.kind = K_PAUSE;
  a->h.p = p;
  dl_timer_init(&a->t, on_pause, a);
  if (dl_timer_start(L->h.env->loop, &a->t, until) != 0) {
    free(a);
    p->rc = dl_seterr(L->h.env->err_owner, DLOCK_ENOMEM, "out of memory");
    return 0;
  }
  pend_link(L, &a->h);
  p->link_data = a;
  return DL_PENDING;
}

/* ---- requests ---- */

/* One request and its retries: a script (script >= 0) or a command (its
 * arguments copied: a retry sends them again), its slot (-1: any master),
 * where it goes. */
typedef struct acreq {
  apend h;
  int script;   /* DL_SCRIPT_* (DL_EVAL_SHARDED or'ed in), or -1: a command */
  bool ping;    /* DL_EVAL_WAKE_FIRST, the first send only */
  int n, nkeys; /* arguments (a script's keys then args; a command's argv) */
  char **v;
  size_t *lens;
  int slot;
  bool fixed; /* node stays (a SCAN's master) */
  anode *node;
  bool asking;
  int64_t deadline, pause;
  int64_t down_since; /* CLUSTERDOWN first met (dl_cluster_reply_stands) */
  int tries;
  dl_areq *req; /* in flight, or NULL: pausing */
  bool take;    /* dl_pend.take at the start: every send is a take */
  dl_timer t;   /* the pause before the next try */
  long scan_i;  /* a SCAN's master, of scan_n (0: not a SCAN) */
  int scan_n;
} acreq;

/* A request with n arguments copied (lens NULL: C strings), or NULL. */
static acreq *acreq_new(int n, const char *const *v, const size_t *lens) {
  size_t size = sizeof(acreq) + (size_t)n * (sizeof(char *) + sizeof(size_t));
  for (int i = 0; i < n; i++)
    size += (lens ? lens[i] : strlen(v[i])) + 1;
  acreq *q = calloc(1, size);
  if (q == NULL) return NULL;
  q->n = n;
  q->v = (char **)(q + 1);
  q->lens = (size_t *)(q->v + n);
  char *s = (char *)(q->lens + n);
  for (int i = 0; i < n; i++) {
    q->lens[i] = lens ? lens[i] : strlen(v[i]);
    memcpy(s, v[i], q->lens[i]);
    s[q->lens[i]] = '\0';
    q->v[i] = s;
    s += q->lens[i] + 1;
  }
  q->h.kind = K_REQ;
  q->pause = PAUSE_MIN_MS;
  return q;
}

/* The detail of an error names the node it was for. */
void dl_acl_name_node(acl_link *L, anode *n, int rc) {
  if (rc == 0 || rc == DLOCK_ECLOSED || n == NULL) return;
  const dlock_client *o = L->h.env->err_owner;
  char was[400], where[300];
  snprintf(was, sizeof was, "%s",
           o ? dlock_client_errmsg(o) : dlock_client_open_errmsg());
  snprintf(where, sizeof where, "cluster node %s:%d", n->host, n->port);
  if (strstr(was, where) == NULL) dl_seterr(o, rc, "%s (%s)", was, where);
}

/* Ends q: its step's result (an error reply becomes its code), q freed.
 * Returns 0 (the step is done; the caller resumes it if it was pending). */
static int q_end(acreq *q, int rc, redisReply *reply) {
  acl_link *L = q->h.L;
  dl_pend *p = q->h.p;
  if (rc == 0) rc = dl_reply_check(L->h.env->err_owner, &reply);
  if (rc == 0 && q->scan_n > 0 &&
      dl_cluster_scan_next(reply, q->scan_i, q->scan_n) != 0) {
    freeReplyObject(reply);
    reply = NULL;
    rc = dl_seterr(L->h.env->err_owner, DLOCK_ENOMEM, "out of memory");
  }
  dl_acl_name_node(L, q->node, rc);
  p->rc = rc;
  p->reply = reply;
  p->link_data = NULL;
  pend_unlink(L, &q->h);
  free(q);
  return 0;
}

static void on_reply(void *ud, int rc, redisReply *reply);
static void on_retry(void *ud);

/* A pause before the next try, or the end when no time (or try) is left
 * for one: a retry at the deadline would only time out. */
static int q_pause(acreq *q, int rc, redisReply *reply) {
  acl_link *L = q->h.L;
  int64_t now = dl_now_ms();
  if (L->closing || q->tries >= MAX_TRIES || now + q->pause >= q->deadline)
    return q_end(q, rc, reply);
  if (reply) freeReplyObject(reply);
  int64_t until = now + q->pause;
  q->pause = q->pause * 2 > PAUSE_MAX_MS ? PAUSE_MAX_MS : q->pause * 2;
  if (dl_timer_start(L->h.env->loop, &q->t, until) != 0)
    return q_end(
        q, dl_seterr(L->h.env->err_owner, DLOCK_ENOMEM, "out of memory"), NULL);
  return DL_PENDING;
}

/* Sends q (to its node, else to its slot's master): DL_PENDING, or the end
 * (0). A request that could not be sent is tried again after a pause. */
static int q_send(acreq *q) {
  acl_link *L = q->h.L;
  int err = 0;
  q->req = NULL;
  if (q->node == NULL) q->node = dl_acl_route(L, q->slot);
  if (q->node == NULL) {
    err = DLOCK_ECONNECT; /* the detail recorded by route */
  } else if (q->script >= 0) {
    int script = q->script | (L->sharded ? DL_EVAL_SHARDED : 0) |
                 (q->ping ? DL_EVAL_WAKE_FIRST : 0);
    q->req = dl_aconn_eval_cluster(q->node->conn, q->asking, script, q->nkeys,
                                   (const char **)q->v, q->n - q->nkeys,
                                   (const char **)q->v + q->nkeys, q->deadline,
                                   on_reply, q, &err);
  } else {
    q->req = dl_aconn_send_cluster(q->node->conn, q->asking, q->n,
                                   (const char **)q->v, q->lens, q->deadline,
                                   on_reply, q, &err);
  }
  q->ping = false;
  q->asking = false;
  if (q->req && q->take) dl_aconn_take(q->req);
  if (q->req) return DL_PENDING;
  q->tries++;
  if (err == DLOCK_ECLOSED || err == DLOCK_ENOMEM) return q_end(q, err, NULL);
  return q_pause(q, err, NULL);
}

/* q's answer (rc 0 and a reply, which may be an error reply), or its
 * failure: followed until it is an answer. DL_PENDING, or the end. */
static int q_reply(acreq *q, int rc, redisReply *r) {
  acl_link *L = q->h.L;
  q->req = NULL;
  q->tries++;
  if (L->closing || q->tries >= MAX_TRIES || dl_now_ms() >= q->deadline)
    return q_end(q, rc, r);
  if (rc == 0 &&
      (dl_cluster_reply_is(r, "MOVED") || dl_cluster_reply_is(r, "ASK"))) {
    bool ask = r->str[0] == 'A';
    char host[256];
    int slot, port;
    int idx = dl_cluster_redirect(r, &slot, host, sizeof host, &port)
                  ? node_get(L, host, port)
                  : -1;
    if (idx < 0) return q_end(q, rc, r); /* the error reply stands */
    freeReplyObject(r);
    if (!ask) {
      L->slots[slot] = (unsigned short)idx;
      (void)refresh(L, false); /* more slots may have moved with it */
    }
    q->node = L->nodes[idx];
    q->asking = ask;
    return q_send(q);
  }
  /* A slot in migration, a cluster without a quorum of masters (said for
   * what it is once it lasts), or a request that never left (a connect
   * that failed: safe to send again; DLOCK_ECONNLOST says it was written
   * and may have run). A timeout is the request's own deadline, the
   * step's: nothing is left then. */
  if (rc == 0 &&
      dl_cluster_reply_stands(r, &q->down_since, q->pause, q->deadline))
    return q_end(q, rc, r);
  if ((rc == 0 && (dl_cluster_reply_is(r, "TRYAGAIN") ||
                   dl_cluster_reply_is(r, "CLUSTERDOWN"))) ||
      (rc != 0 && rc != DLOCK_ECONNLOST && rc != DLOCK_ECLOSED))
    return q_pause(q, rc, r);
  if (rc != 0) (void)refresh(L, false); /* for the next request */
  return q_end(q, rc, r);
}

static void on_reply(void *ud, int rc, redisReply *reply) {
  acreq *q = ud;
  dl_pend *p = q->h.p;
  if (q_reply(q, rc, reply) != DL_PENDING) p->resume(p);
}

static void on_retry(void *ud) {
  acreq *q = ud;
  dl_pend *p = q->h.p;
  acl_link *L = q->h.L;
  /* The map asked again (rate-limited); the request goes where it says. */
  if ((refresh(L, false) == 0 || q->slot >= 0) && !q->fixed) q->node = NULL;
  if (q_send(q) != DL_PENDING) p->resume(p);
}

/* Starts q on p: DL_PENDING, or 0 (done, p filled in). */
static int q_start(acl_link *L, dl_pend *p, acreq *q, int64_t until) {
  q->h.p = p;
  int64_t limit = dl_now_ms() + L->cfg->command_timeout_ms;
  q->deadline = until > 0 && until < limit ? until : limit;
  dl_timer_init(&q->t, on_retry, q);
  pend_link(L, &q->h);
  p->link_data = q;
  return q_send(q);
}

static int acl_eval_start(dl_rlink *base, dl_pend *p, int64_t until, int script,
                          int nkeys, const char *const *keys, int nargs,
                          const char *const *args) {
  acl_link *L = (acl_link *)base;
  if (L->closing) {
    p->rc = DLOCK_ECLOSED;
    return 0;
  }
  if (until != 0 && dl_now_ms() >= until) {
    p->rc = dl_seterr(L->h.env->err_owner, DLOCK_ETIMEDOUT,
                      "no time left for the request");
    return 0;
  }
  const char *small[16] = {NULL}, **v = small;
  int n = nkeys + nargs;
  if (n > 16 && (v = malloc(sizeof *v * (size_t)n)) == NULL) {
    p->rc = dl_seterr(L->h.env->err_owner, DLOCK_ENOMEM, "out of memory");
    return 0;
  }
  for (int i = 0; i < n; i++)
    v[i] = i < nkeys ? keys[i] : args[i - nkeys];
  acreq *q = acreq_new(n, v, NULL);
  if (v != small) free(v);
  if (q == NULL) {
    p->rc = dl_seterr(L->h.env->err_owner, DLOCK_ENOMEM, "out of memory");
    return 0;
  }
  q->script = script & ~DL_EVAL_WAKE_FIRST;
  q->ping = (script & DL_EVAL_WAKE_FIRST) != 0;
  q->take = p->take;
  q->nkeys = nkeys;
  q->slot = nkeys > 0 ? dl_key_slot(keys[0], strlen(keys[0])) : -1;
  return q_start(L, p, q, until);
}

/* A SCAN goes to one master behind the cluster's cursor (cluster.c's
 * scan_all): its argv[1] becomes that master's own cursor. */
static int scan_route(acl_link *L, acreq *q) {
  anode *ms[MAX_NODES];
  int n = dl_acl_masters(L, ms, MAX_NODES);
  if (n == 0 && refresh(L, false) == 0) n = dl_acl_masters(L, ms, MAX_NODES);
  if (n == 0)
    return dl_seterr(L->h.env->err_owner, DLOCK_ECONNECT,
                     "no cluster master is known");
  long i;
  const char *cur;
  dl_cluster_scan_cursor(q->v[1], &i, &cur);
  if (i < 0 || i >= n)
    return dl_seterr(L->h.env->err_owner, DLOCK_EINVAL,
                     "the cluster's masters changed during the scan");
  /* The master's cursor is the tail of the copy: shift it to the front. */
  size_t len = strlen(cur);
  memmove(q->v[1], cur, len + 1);
  q->lens[1] = len;
  q->node = ms[i];
  q->fixed = true;
  q->scan_i = i;
  q->scan_n = n;
  return 0;
}

static int acl_command_start(dl_rlink *base, dl_pend *p, int argc,
                             const char **argv) {
  acl_link *L = (acl_link *)base;
  if (L->closing) {
    p->rc = DLOCK_ECLOSED;
    return 0;
  }
  const char *v[4];
  size_t l[4];
  const size_t *lens = p->lens;
  if (L->sharded && (argc == 3 || argc == 4) &&
      strcasecmp(argv[0], "PUBSUB") == 0 &&
      strcasecmp(argv[1], "NUMSUB") == 0 &&
      !dl_cluster_classic_channel(argv[2]) &&
      (argc == 3 || !dl_cluster_classic_channel(argv[3]))) {
    /* Who listens on a lock's channels (one slot): their shard channels'
     * subscribers. */
    for (int i = 0; i < argc; i++) {
      v[i] = argv[i];
      l[i] = lens ? lens[i] : strlen(v[i]);
    }
    v[1] = "SHARDNUMSUB", l[1] = 11;
    argv = v;
    lens = l;
  }
  acreq *q = acreq_new(argc, argv, lens);
  if (q == NULL) {
    p->rc = dl_seterr(L->h.env->err_owner, DLOCK_ENOMEM, "out of memory");
    return 0;
  }
  q->script = -1;
  q->take = p->take;
  q->slot = dl_cluster_command_slot(q->n, (const char **)q->v, q->lens);
  if (argc >= 2 && strcasecmp(argv[0], "SCAN") == 0) {
    int rc = scan_route(L, q);
    if (rc != 0) {
      free(q);
      p->rc = rc;
      return 0;
    }
  }
  return q_start(L, p, q, 0);
}

static void acl_cancel(dl_rlink *base, dl_pend *p) {
  acl_link *L = (acl_link *)base;
  apend *h = p->link_data;
  if (h == NULL) return;
  if (h->kind == K_REQ) {
    acreq *q = (acreq *)h;
    dl_areq_cancel(q->req);
    dl_timer_stop(L->h.env->loop, &q->t);
    pend_unlink(L, h);
    free(q);
  } else if (h->kind == K_REPL) {
    dl_acl_replicate_cancel(L, h);
  } else if (h->kind == K_PAUSE) {
    apause *a = (apause *)h;
    dl_timer_stop(L->h.env->loop, &a->t);
    pend_unlink(L, h);
    free(a);
  } else {
    dl_acl_sub_cancel(base, p, h);
  }
  p->link_data = NULL;
}

/* The subscribers first (their waits and confirms end with DLOCK_ECLOSED),
 * then the pauses (a request's too), then the connections, which end
 * every request in flight the same way: each operation's callback runs
 * within, and whatever it starts next is refused. */
static void acl_free(dl_rlink *base) {
  acl_link *L = (acl_link *)base;
  if (L == NULL) return;
  L->closing = true;
  for (int i = 0; i < L->nnodes; i++) {
    dl_asub_free(L->nodes[i]->sub);
    L->nodes[i]->sub = NULL;
  }
  /* A poll's pop in flight may have taken a value: its reply is read. */
  for (int i = 0; i < L->nnodes; i++) dl_aconn_drain_takes(L->nodes[i]->conn);
  for (;;) {
    apend *h = L->pend;
    /* In flight: ended by the connections' close below. */
    while (h && ((h->kind == K_REQ && ((acreq *)h)->req != NULL) ||
                 h->kind == K_REPL))
      h = h->next;
    if (h == NULL) break;
    dl_pend *p = h->p;
    if (h->kind == K_REQ) {
      dl_timer_stop(L->h.env->loop, &((acreq *)h)->t);
      q_end((acreq *)h, DLOCK_ECLOSED, NULL);
    } else {
      dl_timer_stop(L->h.env->loop, &((apause *)h)->t);
      pend_unlink(L, h);
      free(h);
      p->link_data = NULL;
      p->rc = DLOCK_ECLOSED;
    }
    p->resume(p);
  }
  for (int i = 0; i < L->nnodes; i++)
    node_free(L->nodes[i]);
  free(L->revoke);
  free(L);
}

static void acl_stats(dl_rlink *base, dlock_client_stats *st) {
  acl_link *L = (acl_link *)base;
  for (int i = 0; i < L->nnodes; i++) {
    st->writes += dl_aconn_batches(L->nodes[i]->conn);
    if (L->nodes[i]->sub) st->wakeups += dl_asub_wakeups(L->nodes[i]->sub);
  }
}

static const dl_rlink_ops acluster_ops = {
    .name = "loop-cluster",
    .by_slot = true,
    .eval_many = dl_loop_refuse_eval_many,
    .command = dl_loop_refuse_command,
    .sub_ref = dl_acl_sub_ref,
    .sub_wait = dl_loop_refuse_sub_wait,
    .sub_grant = dl_acl_sub_grant,
    .sub_unref = dl_acl_sub_unref,
    .sub_kick = dl_acl_sub_kick,
    .watch_losses = dl_acl_watch_losses,
    .free = acl_free,
    .stats = acl_stats,
    .eval_start = acl_eval_start,
    .command_start = acl_command_start,
    .sub_ref_start = dl_acl_sub_ref_start,
    .sub_wait_start = dl_acl_sub_wait_start,
    .pause_start = dl_acl_pause_start,
    .replicate_start = dl_acl_replicate_start,
    .cancel = acl_cancel,
};

int dl_acluster_link_new(const dl_conn_config *cfg, const dl_backend_env *env,
                         dl_rlink **out) {
  *out = NULL;
  dl_scripts_init();
  acl_link *L = calloc(1, sizeof *L);
  if (L == NULL) return dl_seterr(NULL, DLOCK_ENOMEM, "out of memory");
  L->h.base.ops = &acluster_ops;
  L->h.env = env;
  L->cfg = cfg;
  for (int s = 0; s < NSLOTS; s++)
    L->slots[s] = NO_NODE;
  /* ?pubsub= decides sharded; auto asks the first node to give the map. */
  L->sharded = cfg->ep.cluster_pubsub == DL_PUBSUB_SHARDED;
  L->probe =
      cfg->ep.cluster_pubsub == DL_PUBSUB_AUTO && cfg->backoff_max_ms <= 0;
  int rc = refresh(L, true);
  if (rc != 0) {
    acl_free(&L->h.base);
    return rc;
  }
  *out = &L->h.base;
  return 0;
}
