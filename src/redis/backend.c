/* backend.c: the Redis backend: the typed operations of core/backend.h over
 * a link, made from a redis://, rediss:// or unix:// URL. The operations of
 * each kind are in their own files (lock.c, sync.c, inspect.c); here are
 * the table, the renewal of holds, the loss notices and what the files
 * share. */
#include "redis.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RENEW_BATCH 100 /* holds per renewal script */

int dl_redis_int_reply(dl_redis *r, struct redisReply *rep, long long lo,
                       long long hi, long long *v) {
  bool ok = rep->type == REDIS_REPLY_INTEGER && rep->integer >= lo &&
            rep->integer <= hi;
  if (ok) *v = rep->integer;
  freeReplyObject(rep);
  if (!ok) return dl_seterr(r->env.err_owner, DLOCK_EPROTO, "unexpected reply");
  return 0;
}

int dl_redis_eval_int(dl_redis *r, int script, int nkeys, const char **keys,
                      int nargs, const char **args, long long lo, long long hi,
                      long long *v) {
  redisReply *rep = NULL;
  int rc = r->link->ops->eval(r->link, script, nkeys, keys, nargs, args, &rep);
  return rc ? rc : dl_redis_int_reply(r, rep, lo, hi, v);
}

int dl_redis_wait_for(dl_redis *r, const char *channel, int mode, bool wait,
                      int64_t deadline, dl_try_fn fn, void *ctx) {
  int64_t start = dl_now_ms();
  int64_t recheck = -1;
  int rc = fn(ctx, &recheck);
  if (rc != 0 || !wait) return rc;
  const dl_rlink_ops *ops = r->link->ops;
  dl_sub *sub = ops->sub_ref(r->link, channel, mode, deadline);
  if (sub == NULL) return dl_seterr(r->env.err_owner, DLOCK_ENOMEM, "out of memory");
  for (;;) {
    rc = fn(ctx, &recheck);
    if (rc != 0) break;
    int64_t now = dl_now_ms();
    if (now >= deadline) break;
    int64_t until = deadline;
    if (recheck >= 0 && now + recheck < until) until = now + recheck;
    int w = ops->sub_wait(r->link, sub, until, start, NULL);
    if (w < 0) {
      rc = dl_seterr(r->env.err_owner, w, "the client closed while waiting");
      break;
    }
  }
  ops->sub_unref(r->link, sub, true);
  return rc;
}

/* Renewal by lock_renew.lua: up to RENEW_BATCH holds a script, every
 * script of the round pipelined. A permit is renewed on its semaphore's
 * timeout set, where its lease is. */
static int rb_renew(dl_backend *base, int64_t deadline, int64_t lease_ms,
                    int n, dl_renew_item *items, int *calls) {
  dl_redis *r = (dl_redis *)base;
  *calls = 0;
  if (n <= 0) return 0;
  int nb = (n + RENEW_BATCH - 1) / RENEW_BATCH;
  char lease[DL_INT_BUF];
  dl_fmt_ll(lease, lease_ms);
  const char **keys = malloc((size_t)n * sizeof *keys);
  const char **args = malloc((size_t)(n + nb) * sizeof *args);
  char *sets = NULL; /* the timeout sets' names of permits */
  int *nkeys = malloc((size_t)nb * sizeof *nkeys);
  int *nargs = malloc((size_t)nb * sizeof *nargs);
  const char *const **kp = malloc((size_t)nb * sizeof *kp);
  const char *const **ap = malloc((size_t)nb * sizeof *ap);
  redisReply **replies = calloc((size_t)nb, sizeof *replies);
  int *errs = calloc((size_t)nb, sizeof *errs);
  int permits = 0, failed = 0;
  for (int i = 0; i < n; i++) {
    items[i].result = DLOCK_EPROTO;
    permits += items[i].permit;
  }
  if (permits)
    sets = malloc((size_t)permits * DL_DERIVED_MAX);
  if (!keys || !args || !nkeys || !nargs || !kp || !ap || !replies || !errs ||
      (permits && !sets)) {
    failed = dl_seterr(r->env.err_owner, DLOCK_ENOMEM, "out of memory");
    goto out;
  }
  char *set = sets;
  for (int b = 0; b < nb; b++) {
    int lo = b * RENEW_BATCH, hi = lo + RENEW_BATCH > n ? n : lo + RENEW_BATCH;
    nkeys[b] = hi - lo;
    nargs[b] = nkeys[b] + 1;
    kp[b] = keys + lo;
    ap[b] = args + lo + b;
    args[lo + b] = lease;
    for (int k = lo; k < hi; k++) {
      keys[k] = items[k].key;
      if (items[k].permit) {
        dl_derived_suffix_into(set, DL_DERIVED_MAX, items[k].key, "timeout");
        keys[k] = set;
        set += DL_DERIVED_MAX;
      }
      args[k + b + 1] = items[k].owner;
    }
  }
  int64_t sent = dl_now_ms();
  int64_t valid = dl_validity(sent, lease_ms);
  failed = r->link->ops->eval_many(r->link, deadline, nb, DL_SCRIPT_LOCK_RENEW,
                                   nkeys, kp, nargs, ap, replies, errs);
  *calls = nb;
  for (int b = 0; b < nb; b++) {
    redisReply *rep = replies[b];
    if (errs[b] != 0 || rep == NULL || rep->type != REDIS_REPLY_ARRAY ||
        (int)rep->elements != nkeys[b]) {
      if (failed == 0) failed = errs[b] ? errs[b] : DLOCK_EPROTO;
      for (int k = 0; k < nkeys[b]; k++)
        items[b * RENEW_BATCH + k].result = errs[b] ? errs[b] : DLOCK_EPROTO;
      continue; /* unknown: tried again soon, the lease still runs */
    }
    for (int k = 0; k < nkeys[b]; k++) {
      dl_renew_item *it = &items[b * RENEW_BATCH + k];
      redisReply *e = rep->element[k];
      if (e->type != REDIS_REPLY_INTEGER) {
        if (failed == 0) failed = DLOCK_EPROTO;
        continue;
      }
      it->result = e->integer == 1;
      it->valid_until = valid;
    }
  }
out:
  for (int b = 0; b < nb && replies; b++)
    if (replies[b]) freeReplyObject(replies[b]);
  free(keys);
  free(args);
  free(sets);
  free(nkeys);
  free(nargs);
  free(kp);
  free(ap);
  free(replies);
  free(errs);
  return failed;
}

/* A notice names a Redis key; a permit's hold is on its semaphore's name,
 * while its lease lives in "{name}:timeout": tell both. */
typedef struct notice_ctx {
  dl_notice_fn fn;
  void *ud;
} notice_ctx;

static void on_notice(void *ud, const char *key, size_t len) {
  notice_ctx *n = ud;
  n->fn(n->ud, key, len);
  static const char suffix[] = ":timeout";
  size_t sl = sizeof suffix - 1;
  if (key == NULL || len <= sl || memcmp(key + len - sl, suffix, sl) != 0)
    return;
  len -= sl;
  if (len > 2 && key[0] == '{' && key[len - 1] == '}')
    n->fn(n->ud, key + 1, len - 2); /* "{name}:timeout" */
  else
    n->fn(n->ud, key, len); /* "na{m}e:timeout" */
}

static int rb_watch_losses(dl_backend *base, dl_notice_fn fn, void *ud) {
  dl_redis *r = (dl_redis *)base;
  if (r->link->ops->watch_losses == NULL) return 0;
  notice_ctx *n = malloc(sizeof *n);
  if (n == NULL) return dl_seterr(r->env.err_owner, DLOCK_ENOMEM, "out of memory");
  n->fn = fn;
  n->ud = ud;
  free(r->notice); /* one watcher: the client's */
  r->notice = n;
  return r->link->ops->watch_losses(r->link, r->env.revoke_channel, on_notice,
                                    n);
}

static int rb_ping(dl_backend *base) {
  dl_redis *r = (dl_redis *)base;
  const char *argv[] = {"PING"};
  redisReply *rep = NULL;
  int rc = r->link->ops->command(r->link, 1, argv, &rep);
  if (rc == 0) {
    if (rep->type != REDIS_REPLY_STATUS || strcmp(rep->str, "PONG") != 0)
      rc = dl_seterr(r->env.err_owner, DLOCK_EPROTO,
                     "PING answered something else");
    freeReplyObject(rep);
  }
  return rc;
}

static void rb_stats(dl_backend *base, dlock_client_stats *st) {
  st->writes += dl_redis_backend_round_trips(base);
  st->wakeups += dl_redis_backend_wakeups(base);
}

static void rb_free(dl_backend *base) {
  dl_redis *r = (dl_redis *)base;
  if (r == NULL) return;
  if (r->link) r->link->ops->free(r->link);
  free(r->notice);
  dl_tls_ctx_free(r->cfg.tls);
  dl_endpoint_clear(&r->cfg.ep);
  free((char *)r->cfg.server_name);
  free((char *)r->cfg.client_name);
  free(r);
}

static const dl_backend_ops redis_ops = {
    .name = "redis",
    .lock_acquire = dl_redis_lock_acquire,
    .lock_release = dl_redis_lock_release,
    .lock_force_release = dl_redis_lock_force_release,
    .lock_query = dl_redis_lock_query,
    .inspect = dl_redis_inspect,
    .scan = dl_redis_scan,
    .sem_acquire = dl_redis_sem_acquire,
    .permit_acquire = dl_redis_permit_acquire,
    .latch_await = dl_redis_latch_await,
    .sync_update = dl_redis_sync_update,
    .renew = rb_renew,
    .watch_losses = rb_watch_losses,
    .ping = rb_ping,
    .stats = rb_stats,
    .free = rb_free,
};

static dl_redis *redis_new(const dl_backend_env *env) {
  dl_redis *r = calloc(1, sizeof *r);
  if (r == NULL) return NULL;
  r->base.ops = &redis_ops;
  r->env = *env;
  unsigned char nonce[8];
  if (dl_random_bytes(nonce, sizeof nonce) != 0) {
    free(r);
    return NULL;
  }
  for (size_t i = 0; i < sizeof nonce; i++)
    snprintf(r->release_nonce + 2 * i, 3, "%02x", nonce[i]);
  return r;
}

int dl_redis_backend_over(dl_rlink *link, const dl_backend_env *env,
                          dl_backend **out) {
  *out = NULL;
  dl_scripts_init();
  dl_redis *r = redis_new(env);
  if (r == NULL) {
    link->ops->free(link);
    return DLOCK_ENOMEM;
  }
  r->link = link;
  *out = &r->base;
  return 0;
}

static char *copy_opt(const char *s, bool *oom) {
  char *c = dl_strdup(s);
  if (s && !c) *oom = true;
  return c;
}

int dl_redis_backend_new(const dlock_client_options *opts,
                         const dl_backend_env *env, dl_backend **out) {
  *out = NULL;
  dl_redis *r = redis_new(env);
  if (r == NULL) return dl_seterr(NULL, DLOCK_ENOMEM, "out of memory");
  dl_conn_config *cfg = &r->cfg;
  const char *url = opts->url ? opts->url : "redis://127.0.0.1:6379";
  char msg[256];
  int rc = dl_url_parse(url, &cfg->ep, msg, sizeof msg);
  if (rc != 0) {
    char *shown = dl_url_redact(url);
    dl_seterr(NULL, rc, "%s (url %s)", msg, shown ? shown : "");
    free(shown);
    rb_free(&r->base);
    return rc;
  }
  bool oom = false;
  if (opts->username) {
    free(cfg->ep.username);
    cfg->ep.username = copy_opt(opts->username, &oom);
  }
  if (opts->password) {
    free(cfg->ep.password);
    cfg->ep.password = copy_opt(opts->password, &oom);
  }
  cfg->client_name = copy_opt(opts->client_name, &oom);
  cfg->server_name = copy_opt(opts->tls_server_name, &oom);
  if (oom) {
    rb_free(&r->base);
    return dl_seterr(NULL, DLOCK_ENOMEM, "out of memory");
  }
  cfg->connect_timeout_ms = opts->connect_timeout_ms;
  cfg->command_timeout_ms = opts->command_timeout_ms;
  cfg->reconnect_min_ms = opts->reconnect_min_ms;
  cfg->reconnect_max_ms = opts->reconnect_max_ms;
  cfg->err_owner = env->err_owner;
  if (cfg->ep.tls) {
    dl_tls_config tc = {opts->tls_ca_file,  opts->tls_ca_dir,
                        opts->tls_cert_file, opts->tls_key_file,
                        opts->tls_server_name, opts->tls_verify};
    rc = dl_tls_ctx_new(&tc, &cfg->tls, msg, sizeof msg);
    if (rc != 0) {
      dl_seterr(NULL, rc, "%s", msg);
      rb_free(&r->base);
      return rc;
    }
  }
  rc = dl_single_link_new(cfg, &r->env, opts->connections, &r->link);
  if (rc != 0) {
    rb_free(&r->base);
    return rc;
  }
  *out = &r->base;
  return 0;
}
