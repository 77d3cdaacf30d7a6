/* rlops.c: the Redlock backend's entries (each an operation of redlock.c,
 * run on the client's loop, or for a blocking client on its own loop's
 * thread and waited for), its URL and its factory: one Redis backend per
 * server (a part), each on that loop. */
#include "redlock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the backend's entries ---- */
static int check(redlock *B, bool async) {
  if ((B->env.loop != NULL) == async) return 0;
  return dl_seterr(B->env.err_owner, DLOCK_EINVAL,
                   async ? "an event-loop call on a blocking client"
                         : "a blocking call on an event-loop client");
}

/* Runs o: started on the client's loop (0 and *op), or for a blocking
 * call on the parts' loop thread, waited for (the result). */
static int exec(rl_op *o, dl_async **op) {
  return o->B->thread ? dl_rl_call(o) : dl_rl_run(o, op);
}

static int acquire_run(dl_backend *b, dl_acquire *a, dl_done_fn done, void *ud,
                       dl_async **op) {
  redlock *B = (redlock *)b;
  int err = check(B, done != NULL);
  /* A fair queue, or a read-write lock's two modes, are not merged across
   * independent servers (yet): only the mutex. */
  if (err == 0 && a->lock->kind != DL_KIND_LOCK &&
      a->lock->kind != DL_KIND_PLAIN)
    err = dl_seterr(
        B->env.err_owner, DLOCK_ENOTSUP,
        "redlock:// offers the lock and the plain lock (not the fair or the "
        "read-write lock)");
  rl_op *o = err ? NULL : dl_rl_op_new(B, OP_ACQUIRE, done, ud, &err);
  if (o == NULL) return err;
  o->a = a;
  if ((err = dl_rl_set_lock(o, a->lock)) != 0) return err;
  return exec(o, op);
}

static int rl_acquire(dl_backend *b, dl_acquire *a) {
  return acquire_run(b, a, NULL, NULL, NULL);
}

static int rl_acquire_async(dl_backend *b, dl_acquire *a, dl_done_fn done,
                            void *ud, dl_async **op) {
  return acquire_run(b, a, done, ud, op);
}

static int lock_run(dl_backend *b, int kind, const dl_lock_ref *l,
                    int64_t lease_ms, int count, dl_lock_query q, long long *v,
                    dl_done_fn done, void *ud, dl_async **op) {
  redlock *B = (redlock *)b;
  int err = check(B, done != NULL);
  rl_op *o = err ? NULL : dl_rl_op_new(B, kind, done, ud, &err);
  if (o == NULL) return err;
  if (l && (err = dl_rl_set_lock(o, l)) != 0) return err;
  o->lease_ms = lease_ms;
  o->count = count;
  o->q = q;
  o->v = v;
  return exec(o, op);
}

static int rl_release(dl_backend *b, const dl_lock_ref *l, int64_t lease_ms,
                      int count) {
  return lock_run(b, OP_RELEASE, l, lease_ms, count, 0, NULL, NULL, NULL, NULL);
}

static int rl_release_async(dl_backend *b, const dl_lock_ref *l,
                            int64_t lease_ms, int count, dl_done_fn done,
                            void *ud, dl_async **op) {
  return lock_run(b, OP_RELEASE, l, lease_ms, count, 0, NULL, done, ud, op);
}

static int rl_force(dl_backend *b, const dl_lock_ref *l) {
  return lock_run(b, OP_FORCE, l, 0, 0, 0, NULL, NULL, NULL, NULL);
}

static int rl_force_async(dl_backend *b, const dl_lock_ref *l, dl_done_fn done,
                          void *ud, dl_async **op) {
  return lock_run(b, OP_FORCE, l, 0, 0, 0, NULL, done, ud, op);
}

static int rl_query(dl_backend *b, const dl_lock_ref *l, dl_lock_query q,
                    long long *v) {
  return lock_run(b, OP_QUERY, l, 0, 0, q, v, NULL, NULL, NULL);
}

static int rl_query_async(dl_backend *b, const dl_lock_ref *l, dl_lock_query q,
                          long long *v, dl_done_fn done, void *ud,
                          dl_async **op) {
  return lock_run(b, OP_QUERY, l, 0, 0, q, v, done, ud, op);
}

static int rl_ping(dl_backend *b) {
  return lock_run(b, OP_PING, NULL, 0, 0, 0, NULL, NULL, NULL, NULL);
}

static int rl_ping_async(dl_backend *b, dl_done_fn done, void *ud,
                         dl_async **op) {
  return lock_run(b, OP_PING, NULL, 0, 0, 0, NULL, done, ud, op);
}

static int renew_run(dl_backend *b, int64_t lease_ms, int n,
                     dl_renew_item *items, int *calls, dl_done_fn done,
                     void *ud, dl_async **op) {
  redlock *B = (redlock *)b;
  int err = check(B, done != NULL);
  rl_op *o = err ? NULL : dl_rl_op_new(B, OP_RENEW, done, ud, &err);
  if (o == NULL) return err;
  /* Each part gets its own copy of the items, without an answer yet. */
  o->copies = calloc((size_t)B->n * (size_t)n + 1, sizeof *o->copies);
  if (o->copies == NULL) {
    free(o);
    return dl_seterr(B->env.err_owner, DLOCK_ENOMEM, "out of memory");
  }
  for (int i = 0; i < B->n; i++) {
    o->is[i] = o->copies + (size_t)i * (size_t)n;
    memcpy(o->is[i], items, (size_t)n * sizeof *items);
    for (int k = 0; k < n; k++)
      o->is[i][k].result = -1;
  }
  o->lease_ms = lease_ms;
  o->nitems = n;
  o->items = items;
  o->calls = calls;
  return exec(o, op);
}

static int rl_renew(dl_backend *b, int64_t deadline, int64_t lease_ms, int n,
                    dl_renew_item *items, int *calls) {
  (void)deadline; /* each part's renewal is bounded by its command timeout */
  return renew_run(b, lease_ms, n, items, calls, NULL, NULL, NULL);
}

static int rl_renew_async(dl_backend *b, int64_t deadline, int64_t lease_ms,
                          int n, dl_renew_item *items, int *calls,
                          dl_done_fn done, void *ud, dl_async **op) {
  (void)deadline;
  return renew_run(b, lease_ms, n, items, calls, done, ud, op);
}

static void rl_cancel(dl_backend *b, dl_async *op) {
  redlock *B = (redlock *)b;
  rl_op *o = (rl_op *)op;
  if (o->cancelled || o->decided || o->kind != OP_ACQUIRE || B->closing) return;
  o->cancelled = true;
  o->a->deadline = dl_now_ms();
  if (o->st == ST_PAUSED && o->pause.pending)
    dl_redis_step_interrupt(part0(B), &o->pause);
}

/* A blocking scan's names, gathered on the loop's thread and passed to
 * the caller's callback on its own thread (which may make blocking calls,
 * as `dlock list` inspects each name). */
typedef struct names {
  char **v;
  size_t n, cap;
  bool oom;
} names;

static int gather_name(const char *name, void *ud) {
  names *ns = ud;
  if (ns->n == ns->cap) {
    size_t cap = ns->cap ? ns->cap * 2 : 64;
    char **v = realloc(ns->v, cap * sizeof *v);
    if (v == NULL) {
      ns->oom = true;
      return 1;
    }
    ns->v = v;
    ns->cap = cap;
  }
  if ((ns->v[ns->n] = strdup(name)) == NULL) {
    ns->oom = true;
    return 1;
  }
  ns->n++;
  return 0;
}

static int scan_blocking(redlock *B, rl_op *o, dlock_scan_cb cb, void *ud) {
  names ns = {0};
  o->cb = gather_name;
  o->cb_ud = &ns;
  int rc = dl_rl_call(o);
  if (rc >= 0 && ns.oom)
    rc = dl_seterr(B->env.err_owner, DLOCK_ENOMEM, "out of memory");
  bool go = rc >= 0;
  for (size_t i = 0; i < ns.n; i++) {
    if (go && cb(ns.v[i], ud) != 0) go = false;
    free(ns.v[i]);
  }
  free(ns.v);
  return rc;
}

/* Inspect asks every server and reads the first that answers (the
 * holder in the snapshot is one server's view); a scan reads one server
 * after the other until one answers (every server has the same names). */
static int read_run(dl_backend *b, int kind, const char *key,
                    dlock_lock_state *st, const char *match, size_t prefix_len,
                    dlock_scan_cb cb, void *cb_ud, dl_done_fn done, void *ud,
                    dl_async **op) {
  redlock *B = (redlock *)b;
  int err = check(B, done != NULL);
  rl_op *o = err ? NULL : dl_rl_op_new(B, kind, done, ud, &err);
  if (o == NULL) return err;
  o->only = kind == OP_SCAN ? 0 : -1;
  if (kind == OP_INSPECT &&
      (o->snaps = calloc((size_t)B->n, sizeof *o->snaps)) == NULL) {
    free(o);
    return dl_seterr(B->env.err_owner, DLOCK_ENOMEM, "out of memory");
  }
  /* The name or pattern is the op's own: servers that answer after the
   * call has returned (their answers are dropped) still send it, when the
   * caller may have freed its handle. */
  const char *src = kind == OP_SCAN ? match : key;
  if (src && (o->lbuf = strdup(src)) == NULL) {
    free(o->snaps);
    free(o);
    return dl_seterr(B->env.err_owner, DLOCK_ENOMEM, "out of memory");
  }
  if (kind == OP_SCAN)
    match = o->lbuf;
  else
    key = o->lbuf;
  o->key = key;
  o->snap = st;
  o->match = match;
  o->prefix_len = prefix_len;
  o->cb = cb;
  o->cb_ud = cb_ud;
  if (kind == OP_SCAN && B->thread) return scan_blocking(B, o, cb, cb_ud);
  return exec(o, op);
}

static int rl_inspect(dl_backend *b, const char *key, dlock_lock_state *st) {
  return read_run(b, OP_INSPECT, key, st, NULL, 0, NULL, NULL, NULL, NULL,
                  NULL);
}

static int rl_inspect_async(dl_backend *b, const char *key,
                            dlock_lock_state *st, dl_done_fn done, void *ud,
                            dl_async **op) {
  return read_run(b, OP_INSPECT, key, st, NULL, 0, NULL, NULL, done, ud, op);
}

static int rl_scan(dl_backend *b, const char *match, size_t prefix_len,
                   dlock_scan_cb cb, void *ud) {
  return read_run(b, OP_SCAN, NULL, NULL, match, prefix_len, cb, ud, NULL, NULL,
                  NULL);
}

static int rl_scan_async(dl_backend *b, const char *match, size_t prefix_len,
                         dlock_scan_cb cb, void *cb_ud, dl_done_fn done,
                         void *ud, dl_async **op) {
  return read_run(b, OP_SCAN, NULL, NULL, match, prefix_len, cb, cb_ud, done,
                  ud, op);
}

/* Every server's take-aways (a force release's revocation message, its
 * keyspace events where enabled) flag the key; the client's check then
 * asks the quorum (renew with no lease), so a hold is lost once fewer
 * than a quorum of servers still hold it. */
typedef struct watch_args {
  redlock *B;
  dl_notice_fn fn;
  void *ud;
  int rc;
} watch_args;

static void watch_parts(void *arg) {
  watch_args *w = arg;
  redlock *B = w->B;
  for (int i = 0; i < B->n && w->rc == 0; i++) {
    dl_backend *p = B->part[i];
    if (p->ops->watch_losses) w->rc = p->ops->watch_losses(p, w->fn, w->ud);
  }
}

/* Runs fn(arg) where the parts live: the client's loop (this thread), or
 * a blocking client's loop thread, waited for. */
static void on_parts(redlock *B, void (*fn)(void *), void *arg) {
  if (B->thread)
    dl_rl_thread_sync(B->thread, fn, arg);
  else
    fn(arg);
}

static int rl_watch_losses(dl_backend *b, dl_notice_fn fn, void *ud) {
  redlock *B = (redlock *)b;
  watch_args w = {.B = B, .fn = fn, .ud = ud};
  on_parts(B, watch_parts, &w);
  return w.rc;
}

typedef struct stats_args {
  redlock *B;
  dlock_client_stats *st;
} stats_args;

static void stats_parts(void *arg) {
  stats_args *x = arg;
  for (int i = 0; i < x->B->n; i++)
    x->B->part[i]->ops->stats(x->B->part[i], x->st);
}

static void rl_stats(dl_backend *b, dlock_client_stats *st) {
  stats_args x = {(redlock *)b, st};
  on_parts(x.B, stats_parts, &x);
}

/* Frees the parts (on their loop's thread for a blocking client): what is
 * in flight on them ends with DLOCK_ECLOSED. */
static void free_parts(void *ud) {
  redlock *B = ud;
  B->closing = true; /* operations still running start nothing new */
  for (int i = 0; i < B->n; i++) {
    dl_backend *part = B->part[i];
    B->part[i] = NULL;
    if (part) part->ops->free(part);
  }
}

static bool idle(void *ud) {
  return ((redlock *)ud)->live == 0;
}

/* A blocking client's free waits for what its calls left in flight (a
 * release answered by a quorum, still on its way to the rest; a late grant
 * given back), for up to a command timeout (at most 1 s): a process that
 * exits right after a release leaves no key behind on any server that
 * answers, as redsync's and npm redlock's releases, which wait for every
 * server, leave none. */
static void rl_free(dl_backend *b) {
  redlock *B = (redlock *)b;
  if (B == NULL) return;
  if (B->thread) {
    int64_t ms = B->env.command_timeout_ms;
    dl_rl_thread_free(B->thread, idle, ms > 0 && ms < 1000 ? ms : 1000,
                      free_parts, B);
  } else {
    free_parts(B);
  }
  dl_rl_sent_free(B);
  free(B);
}

static const dl_backend_ops redlock_ops = {
    .name = "redlock",
    .lock_acquire = rl_acquire,
    .lock_release = rl_release,
    .lock_force_release = rl_force,
    .lock_query = rl_query,
    .inspect = rl_inspect,
    .scan = rl_scan,
    .waiters = dl_rl_waiters, /* rlwait.c */
    .renew = rl_renew,
    .watch_losses = rl_watch_losses,
    .lock_acquire_async = rl_acquire_async,
    .lock_release_async = rl_release_async,
    .lock_force_release_async = rl_force_async,
    .lock_query_async = rl_query_async,
    .renew_async = rl_renew_async,
    .inspect_async = rl_inspect_async,
    .scan_async = rl_scan_async,
    .ping_async = rl_ping_async,
    .cancel = rl_cancel,
    .ping = rl_ping,
    .stats = rl_stats,
    .free = rl_free,
};

/* ---- the URL: redlock://[user:password@]HOST:PORT,HOST:PORT...[/DB][?OPTS] */
/* A duration: digits, then ms (the default), s or m. */
static bool duration_ms(const char *s, size_t len, int64_t *ms) {
  int64_t v = 0;
  size_t i = 0;
  for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
    if (v > INT64_MAX / 10 / 60000) return false;
    v = v * 10 + (s[i] - '0');
  }
  if (i == 0) return false;
  const char *u = s + i;
  size_t ul = len - i;
  int64_t scale = ul == 0 || (ul == 2 && memcmp(u, "ms", 2) == 0) ? 1
                  : ul == 1 && *u == 's'                          ? 1000
                  : ul == 1 && *u == 'm'                          ? 60000
                                                                  : 0;
  *ms = v * scale;
  return scale != 0;
}

static bool word(const char *s, size_t len, const char *lit) {
  return strlen(lit) == len && memcmp(s, lit, len) == 0;
}

/* The options after '?': NAME=VALUE joined by '&'. */
static bool url_opts(const char *q, dl_redlock_url_opts *o) {
  *o = (dl_redlock_url_opts){.fencing = true};
  while (q && *q) {
    size_t len = strcspn(q, "&");
    const char *eq = memchr(q, '=', len);
    if (eq == NULL) return false;
    size_t nl = (size_t)(eq - q), vl = len - nl - 1;
    const char *v = eq + 1;
    if (word(q, nl, "fencing") && (word(v, vl, "on") || word(v, vl, "off")))
      o->fencing = word(v, vl, "on");
    else if (word(q, nl, "layout") &&
             (word(v, vl, "plain") || word(v, vl, "hash")))
      o->hash = word(v, vl, "hash");
    else if (!word(q, nl, "restart_delay") ||
             !duration_ms(v, vl, &o->restart_delay_ms))
      return false;
    q += len;
    if (*q == '&') q++;
  }
  return true;
}

int dl_redlock_urls(const char *url, char **out, int max,
                    dl_redlock_url_opts *opt) {
  const char *p = strstr(url, "://");
  p = p ? p + 3 : url;
  const char *q = strchr(p, '?');
  dl_redlock_url_opts o;
  if (!url_opts(q ? q + 1 : NULL, &o)) return DLOCK_EURL;
  if (opt) *opt = o;
  size_t keep = q ? (size_t)(q - p) : strlen(p); /* the rest without it */
  /* "user:password@", then the hosts up to '/', '?' or the end. */
  const char *tail = p + strcspn(p, "/?");
  int taillen = (int)(p + keep - tail);
  const char *at = memchr(p, '@', (size_t)(tail - p));
  const char *hosts = at ? at + 1 : p;
  size_t userinfo = at ? (size_t)(at + 1 - p) : 0;
  int n = 0;
  for (const char *h = hosts; h < tail;) {
    size_t len = strcspn(h, ",/?");
    if (len == 0 || n == max) {
      for (int i = 0; i < n; i++)
        free(out[i]);
      return DLOCK_EURL;
    }
    /* One server's URL: redis://[user:password@]HOST:PORT[/DB...]. */
    out[n] = malloc(8 + userinfo + len + (size_t)taillen + 1);
    if (out[n] == NULL) {
      for (int i = 0; i < n; i++)
        free(out[i]);
      return DLOCK_ENOMEM;
    }
    sprintf(out[n++], "redis://%.*s%.*s%.*s", (int)userinfo, p, (int)len, h,
            taillen, tail);
    h += len;
    if (*h == ',') h++;
  }
  return n > 0 ? n : DLOCK_EURL;
}

/* A server's name as the URL gave it, for messages. */
static void server_name(const dl_endpoint *ep, char *out, size_t size) {
  if (ep->unix_path)
    snprintf(out, size, "%s", ep->unix_path);
  else
    snprintf(out, size, "%s:%d", ep->host, ep->port);
}

/* A server named twice would count twice towards the quorum (a quorum of
 * one): DLOCK_EINVAL naming both spellings (dl_url_distinct), or 0. */
static int distinct(redlock *B) {
  dl_server_name sv[RL_MAX];
  for (int i = 0; i < B->n; i++) {
    const dl_endpoint *ep = &((dl_redis *)B->part[i])->cfg.ep;
    sv[i] = (dl_server_name){ep->host, ep->port, ep->unix_path};
  }
  char err[700];
  int rc = dl_url_distinct("redlock://", sv, B->n, err, sizeof err);
  return rc ? dl_seterr(NULL, rc, "%s", err) : 0;
}

int dl_redlock_backend_new(const dlock_client_options *opts,
                           const dl_backend_env *env, dl_backend **out) {
  *out = NULL;
  redlock *B = calloc(1, sizeof *B);
  if (B == NULL) return dl_seterr(NULL, DLOCK_ENOMEM, "out of memory");
  B->base.ops = &redlock_ops;
  B->env = *env;
  B->part_env = *env;
  /* A blocking client's parts run on a loop of their own, on a thread. */
  if (env->loop == NULL) {
    int trc = dl_rl_thread_new(&B->thread);
    if (trc != 0) {
      free(B);
      return dl_seterr(NULL, trc, "cannot make the servers' event loop");
    }
    B->part_env.loop = dl_rl_thread_loop(B->thread);
  }
  char *urls[RL_MAX];
  int rc = dl_redlock_urls(opts->url, urls, RL_MAX, &B->opt);
  int n = rc;
  for (int i = 0; i < n; i++) {
    dlock_client_options o = *opts;
    o.url = urls[i];
    o.connections = 1;
    /* The parts never subscribe: a composite waits by retrying. */
    if (o.wait_backoff_max_ms <= 0) o.wait_backoff_max_ms = 50;
    dl_backend *part = NULL;
    dl_backend_env pe = B->part_env;
    B->tag[B->n].serial = dl_err_serial();
    pe.err_owner = (const struct dlock_client *)(const void *)&B->tag[B->n];
    if (rc >= 0) rc = dl_redis_part_new(&o, &pe, &part);
    if (rc >= 0) {
      ((dl_redis *)part)->restart_delay_ms = B->opt.restart_delay_ms;
      B->at[B->n] = (rl_part_at){B, B->n};
      ((dl_redis *)part)->acquires_sent = dl_rl_sent_count;
      ((dl_redis *)part)->acquires_ud = &B->at[B->n];
      server_name(&((dl_redis *)part)->cfg.ep, B->name[B->n],
                  sizeof B->name[B->n]);
      B->part[B->n++] = part;
    }
    free(urls[i]);
  }
  if (rc < 0) {
    if (rc == DLOCK_EURL) {
      char *shown = dl_url_redact(opts->url);
      dl_seterr(NULL, rc,
                "redlock:// needs HOST:PORT[,HOST:PORT...] (at "
                "most %d servers), then optionally /DB and ?OPTIONS: "
                "fencing=on|off, layout=plain|hash, restart_delay=N[ms|s|m] "
                "(url %s)",
                RL_MAX, shown ? shown : "");
      free(shown);
    } else if (rc == DLOCK_ENOMEM) {
      dl_seterr(NULL, rc, "out of memory");
    }
    rl_free(&B->base);
    return rc;
  }
  if ((rc = distinct(B)) != 0) {
    rl_free(&B->base);
    return rc;
  }
  B->quorum = B->n / 2 + 1;
  B->base.mutex_kind = B->opt.hash ? DL_KIND_LOCK : DL_KIND_PLAIN;
  B->base.detects_deadlocks = true; /* rlwait.c */
  if (B->thread && (rc = dl_rl_thread_start(B->thread)) != 0) {
    rl_free(&B->base);
    return dl_seterr(NULL, rc, "cannot start the servers' event loop");
  }
  *out = &B->base;
  return 0;
}
