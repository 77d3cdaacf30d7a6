/* backend.c: the Redis backend: the typed operations of core/backend.h over
 * a link, made from a redis://, rediss:// or unix:// URL. The operations of
 * each kind are in their own files (acquire.h's and release.c, sem_latch.c,
 * snapshot.c, blocking_queue.c; the renewal of holds and replica
 * acknowledgement in renew.c); here are the table, the loss notices and
 * what the files share. */
#include "ops.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dl_redis_int_reply(dl_redis *r, struct redisReply *rep, long long lo,
                       long long hi, long long *v) {
  bool ok = rep->type == REDIS_REPLY_INTEGER && rep->integer >= lo &&
            rep->integer <= hi;
  if (ok) *v = rep->integer;
  freeReplyObject(rep);
  if (!ok) return dl_seterr(r->env.err_owner, DLOCK_EPROTO, "unexpected reply");
  return 0;
}

int dl_redis_driver_check(dl_redis *r, bool async) {
  bool blocking = r->link->ops->eval_start == NULL;
  if (blocking != async) return 0;
  return dl_seterr(r->env.err_owner, DLOCK_EINVAL,
                   async ? "an event-loop call on a blocking client"
                         : "a blocking call on an event-loop client");
}

/* ---- the steps of the operations: the blocking driver's fallbacks ---- */
static int started(dl_pend *p, int rc) {
  p->pending = rc == DL_PENDING;
  return rc;
}

static int step_eval(dl_redis *r, dl_pend *p, int64_t until, int script,
                     int nkeys, const char *const *keys, int nargs,
                     const char *const *args, bool take) {
  const dl_rlink_ops *ops = r->link->ops;
  p->reply = NULL;
  p->step = DL_STEP_EVAL;
  p->pending = false;
  if (ops->eval_start) {
    p->take = take; /* read within the start */
    int rc = ops->eval_start(r->link, p, until, script, nkeys, keys, nargs,
                             args);
    p->take = false;
    return started(p, rc);
  }
  if (until != 0 && dl_now_ms() >= until) {
    p->rc = dl_seterr(r->env.err_owner, DLOCK_ETIMEDOUT,
                      "no time left for the request");
    return 0;
  }
  int err = 0;
  p->rc = ops->eval_many(r->link, until, 1, script, &nkeys, &keys, &nargs,
                         &args, &p->reply, &err);
  if (p->rc == 0) p->rc = err;
  return 0;
}

int dl_redis_step_eval(dl_redis *r, dl_pend *p, int64_t until, int script,
                       int nkeys, const char *const *keys, int nargs,
                       const char *const *args) {
  return step_eval(r, p, until, script, nkeys, keys, nargs, args, false);
}

int dl_redis_step_take_eval(dl_redis *r, dl_pend *p, int64_t until,
                            int script, int nkeys, const char *const *keys,
                            int nargs, const char *const *args) {
  return step_eval(r, p, until, script, nkeys, keys, nargs, args, true);
}

int dl_redis_step_sub_ref(dl_redis *r, dl_pend *p, const char *channel,
                          int mode, int64_t deadline) {
  const dl_rlink_ops *ops = r->link->ops;
  p->step = DL_STEP_SUB_REF;
  p->pending = false;
  p->sub = NULL;
  if (ops->sub_ref_start)
    return started(p, ops->sub_ref_start(r->link, p, channel, mode, deadline));
  p->sub = ops->sub_ref(r->link, channel, mode, deadline);
  p->rc = 0;
  return 0;
}

int dl_redis_step_sub_wait(dl_redis *r, dl_pend *p, dl_sub *s, int64_t until,
                           int64_t since, dl_sub *grant) {
  const dl_rlink_ops *ops = r->link->ops;
  p->step = DL_STEP_SUB_WAIT;
  p->pending = false;
  if (ops->sub_wait_start)
    return started(p, ops->sub_wait_start(r->link, p, s, until, since, grant));
  p->rc = ops->sub_wait(r->link, s, until, since, grant);
  return 0;
}

int dl_redis_step_pause(dl_redis *r, dl_pend *p, int64_t until) {
  const dl_rlink_ops *ops = r->link->ops;
  p->step = DL_STEP_PAUSE;
  p->pending = false;
  if (ops->pause_start) return started(p, ops->pause_start(r->link, p, until));
  dl_sleep_ms(until - dl_now_ms());
  p->rc = 0;
  return 0;
}

void dl_redis_step_cancel(dl_redis *r, dl_pend *p) {
  if (p->pending && r->link->ops->cancel) r->link->ops->cancel(r->link, p);
  p->pending = false;
}

bool dl_redis_step_interrupt(dl_redis *r, dl_pend *p) {
  if (!p->pending || p->step == DL_STEP_EVAL || p->step == DL_STEP_COMMAND ||
      p->step == DL_STEP_REPLICATE)
    return false;
  dl_redis_step_cancel(r, p);
  p->sub = NULL;
  /* Resumed from the loop, not from within the caller's cancel; if no
   * pause can be started (out of memory, the link closing), at once:
   * better than an operation that never ends. */
  if (dl_redis_step_pause(r, p, dl_now_ms()) != DL_PENDING) {
    p->rc = 0;
    p->resume(p);
  }
  return true;
}

/* ---- the event-loop driver's shell around an operation ---- */
static void deliver(dl_shell *sh) {
  if (sh->finish) sh->finish(sh, &sh->final);
  dl_done_fn done = sh->head.done;
  void *ud = sh->head.ud;
  int rc = sh->final;
  free(sh); /* the operation's state, which begins with the shell */
  done(ud, rc);
}

void dl_shell_resume(dl_pend *p) {
  dl_shell *sh = p->op;
  p->pending = false;
  if (!sh->finished) {
    int rc = sh->step(sh);
    if (rc == DL_PENDING) return;
    sh->final = rc;
  }
  deliver(sh);
}

void dl_shell_bind(dl_shell *sh, dl_pend *p) {
  p->resume = dl_shell_resume;
  p->op = sh;
  p->pending = false;
}

void dl_shell_init(dl_shell *sh, dl_redis *R, dl_done_fn done, void *ud,
                   int (*step)(dl_shell *), dl_pend *main) {
  memset(sh, 0, sizeof *sh);
  sh->head.R = R;
  sh->head.done = done;
  sh->head.ud = ud;
  sh->step = step;
  sh->main = main;
  if (main) dl_shell_bind(sh, main);
}

int dl_shell_start(dl_shell *sh, int rc, dl_async **op) {
  *op = &sh->head;
  if (rc == DL_PENDING) return 0;
  /* Done within the start: done runs from the loop all the same. */
  sh->finished = true;
  sh->final = rc;
  if (dl_redis_step_pause(sh->head.R, sh->main, dl_now_ms()) == DL_PENDING)
    return 0;
  *op = NULL;
  free(sh);
  return DLOCK_EINVAL; /* a blocking link: not reached */
}

void dl_redis_cancel(dl_backend *b, dl_async *op) {
  (void)b;
  dl_shell *sh = (dl_shell *)op;
  /* An operation without a wait (a release) is left to its end. */
  if (op->cancelled || sh->finished || sh->deadline == NULL) return;
  op->cancelled = true;
  if (sh->deadline) *sh->deadline = dl_now_ms();
  dl_redis_step_interrupt(op->R, sh->main);
}

enum { W_TRIED, W_SUBBED, W_WAITED };

int dl_redis_wait_start(dl_waiter *w) {
  w->start = dl_now_ms();
  w->recheck_ms = -1;
  w->tries = 1;
  w->sub = NULL;
  w->p.reply = NULL;
  w->p.sub = NULL;
  w->st = W_TRIED;
  w->deaf = true;
  dl_backoff_init(&w->poll);
  if (w->kind->send(w) == DL_PENDING) return DL_PENDING;
  return dl_redis_wait_step(w);
}

int dl_redis_wait_step(dl_waiter *w) {
  dl_redis *r = w->R;
  const dl_rlink_ops *ops = r->link->ops;
  for (;;) {
    switch (w->st) {
    case W_TRIED:
      w->rc = w->kind->result(w);
      if (w->rc != 0 || !w->wait) goto out;
      if (w->tries == 1) {
        w->st = W_SUBBED;
        if (dl_redis_step_sub_ref(r, &w->p, w->channel, w->mode, w->deadline) ==
            DL_PENDING)
          return DL_PENDING;
        continue;
      }
      int64_t now = dl_now_ms();
      if (now >= w->deadline) goto out;
      int64_t until = w->deadline;
      if (w->recheck_ms >= 0 && now + w->recheck_ms < until)
        until = now + w->recheck_ms;
      if (w->deaf) {
        int64_t at = now + dl_backoff_next(&w->poll, r->cfg.backoff_max_ms > 0
                                                         ? r->cfg.backoff_max_ms
                                                         : 64);
        if (at < until) until = at;
      }
      w->st = W_WAITED;
      if (dl_redis_step_sub_wait(r, &w->p, w->sub, until, w->start, NULL) ==
          DL_PENDING)
        return DL_PENDING;
      continue;
    case W_SUBBED:
      w->sub = w->p.sub;
      w->p.sub = NULL;
      if (w->sub == NULL) {
        w->rc = dl_seterr(r->env.err_owner, DLOCK_ENOMEM, "out of memory");
        goto out;
      }
      break;
    case W_WAITED:
      if (w->p.rc < 0) {
        w->rc = dl_seterr(r->env.err_owner, w->p.rc,
                          "the client closed while waiting");
        goto out;
      }
      break;
    }
    /* Subscribed, or woken: try again. */
    w->tries++;
    w->st = W_TRIED;
    w->deaf = !w->sub || ops->sub_grant(r->link, w->sub, NULL) < 0;
    if (w->kind->send(w) == DL_PENDING) return DL_PENDING;
  }
out:
  if (w->sub) ops->sub_unref(r->link, w->sub, true);
  w->sub = NULL;
  return w->rc;
}

static int step_command(dl_redis *r, dl_pend *p, int argc, const char **argv,
                        bool take) {
  const dl_rlink_ops *ops = r->link->ops;
  p->reply = NULL;
  p->step = DL_STEP_COMMAND;
  p->pending = false;
  p->lens = NULL;
  if (ops->command_start) {
    p->take = take; /* read within the start */
    int rc = ops->command_start(r->link, p, argc, argv);
    p->take = false;
    return started(p, rc);
  }
  p->rc = ops->command(r->link, argc, argv, &p->reply);
  return 0;
}

int dl_redis_step_command(dl_redis *r, dl_pend *p, int argc,
                          const char **argv) {
  return step_command(r, p, argc, argv, false);
}

int dl_redis_step_take_command(dl_redis *r, dl_pend *p, int argc,
                               const char **argv) {
  return step_command(r, p, argc, argv, true);
}

int dl_redis_step_command_bin(dl_redis *r, dl_pend *p, int argc,
                              const char **argv, const size_t *lens) {
  const dl_rlink_ops *ops = r->link->ops;
  p->reply = NULL;
  p->step = DL_STEP_COMMAND;
  p->pending = false;
  if (ops->command_start) {
    p->lens = lens; /* the loop link writes the command within the start */
    p->take = false;
    int rc = ops->command_start(r->link, p, argc, argv);
    p->lens = NULL;
    return started(p, rc);
  }
  p->lens = NULL;
  p->rc = ops->command_bin
              ? ops->command_bin(r->link, argc, argv, lens, &p->reply)
              : dl_seterr(r->env.err_owner, DLOCK_ENOTSUP,
                          "this link has no binary commands");
  return 0;
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
  if (n == NULL)
    return dl_seterr(r->env.err_owner, DLOCK_ENOMEM, "out of memory");
  n->fn = fn;
  n->ud = ud;
  free(r->notice); /* one watcher: the client's */
  r->notice = n;
  return r->link->ops->watch_losses(r->link, r->revoke_channel, on_notice, n);
}

static void rb_stats(dl_backend *base, dlock_client_stats *st) {
  dl_rlink *l = ((dl_redis *)base)->link;
  if (l->ops->stats) l->ops->stats(l, st);
}

static void rb_free(dl_backend *base) {
  dl_redis *r = (dl_redis *)base;
  if (r == NULL) return;
  if (r->link) r->link->ops->free(r->link);
  dl_sentinel_watch_stop(&r->cfg);
  free(r->notice);
  free(r->revoke_channel);
  dl_tls_ctx_free(r->cfg.tls);
  dl_endpoint_clear(&r->cfg.ep);
  free((char *)r->cfg.server_name);
  free((char *)r->cfg.client_name);
  free((char *)r->cfg.sentinel_username);
  free((char *)r->cfg.sentinel_password);
  free(r);
}

static const dl_backend_ops redis_ops = {
    .name = "redis",
    .lock_acquire = dl_redis_lock_acquire,
    .lock_release = dl_redis_lock_release,
    .lock_force_release = dl_redis_lock_force_release,
    .lock_query = dl_redis_lock_query,
    .inspect = dl_redis_inspect,
    .holders = dl_redis_lock_holders,
    .scan = dl_redis_scan,
    .waiters = dl_redis_waiters,
    .sem_acquire = dl_redis_sem_acquire,
    .permit_acquire = dl_redis_permit_acquire,
    .latch_await = dl_redis_latch_await,
    .sync_update = dl_redis_sync_update,
    .lock_acquire_async = dl_redis_lock_acquire_async,
    .lock_release_async = dl_redis_lock_release_async,
    .sem_acquire_async = dl_redis_sem_acquire_async,
    .permit_acquire_async = dl_redis_permit_acquire_async,
    .latch_await_async = dl_redis_latch_await_async,
    .sync_update_async = dl_redis_sync_update_async,
    .lock_force_release_async = dl_redis_lock_force_release_async,
    .lock_query_async = dl_redis_lock_query_async,
    .inspect_async = dl_redis_inspect_async,
    .scan_async = dl_redis_scan_async,
    .lock_fence_async = dl_redis_lock_fence_async,
    .queue = dl_redis_queue,
    .queue_async = dl_redis_queue_async,
    .queue_kick = dl_redis_queue_kick,
    .fence = dl_redis_fence,
    .fence_async = dl_redis_fence_async,
    .cancel = dl_redis_cancel,
    .renew = dl_redis_renew,
    .renew_async = dl_redis_renew_async,
    .watch_losses = rb_watch_losses,
    .ping = dl_redis_ping,
    .ping_async = dl_redis_ping_async,
    .stats = rb_stats,
    .free = rb_free,
};

static dl_redis *redis_new(const dl_backend_env *env) {
  dl_redis *r = calloc(1, sizeof *r);
  if (r == NULL) return NULL;
  r->base.ops = &redis_ops;
  r->base.detects_deadlocks = true;
  r->env = *env;
  size_t pl = strlen(env->key_prefix);
  unsigned char nonce[8];
  if ((r->revoke_channel = malloc(pl + sizeof "dlock_revoke")) == NULL ||
      dl_random_bytes(nonce, sizeof nonce) != 0) {
    free(r->revoke_channel);
    free(r);
    return NULL;
  }
  memcpy(r->revoke_channel, env->key_prefix, pl);
  memcpy(r->revoke_channel + pl, "dlock_revoke", sizeof "dlock_revoke");
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

/* The backend for opts->url: its link the single one (blocking), or the
 * event loop's (env->loop; for a part of a composite, `part`, connected at
 * its first request). */
static int backend_new(const dlock_client_options *opts,
                       const dl_backend_env *env, bool part, dl_backend **out) {
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
  if (!oom && cfg->ep.username && cfg->ep.password == NULL) {
    /* "pw@host" is a user without a password, which no server accepts:
     * say so rather than send no AUTH at all. */
    rb_free(&r->base);
    return dl_seterr(NULL, DLOCK_EURL,
                     "the URL names a user but no password (write "
                     ":PASSWORD@ for a password alone, USER:PASSWORD@ for "
                     "an ACL user; or give the password as an option)");
  }
  cfg->client_name = copy_opt(opts->client_name, &oom);
  cfg->server_name = copy_opt(opts->tls_server_name, &oom);
  if (cfg->ep.master_name) {
    /* The sentinels' credentials: the options, else the environment
     * (never the URL, which is printed). */
    const char *su = opts->sentinel_username, *sp = opts->sentinel_password;
    if (sp == NULL) {
      sp = getenv("DLOCK_SENTINEL_PASSWORD");
      if (su == NULL) su = getenv("DLOCK_SENTINEL_USERNAME");
    }
    if (sp && *sp == '\0') sp = NULL;
    cfg->sentinel_username = sp ? copy_opt(su, &oom) : NULL;
    cfg->sentinel_password = copy_opt(sp, &oom);
  }
  if (oom) {
    rb_free(&r->base);
    return dl_seterr(NULL, DLOCK_ENOMEM, "out of memory");
  }
  r->min_replicas = opts->min_replicas_acked;
  r->starvation_ms = opts->starvation_ms < 0 ? 0 : opts->starvation_ms;
  r->ride = !part;
  r->part = part;
  r->replicas_timeout_ms =
      opts->replicas_timeout_ms > 0 ? opts->replicas_timeout_ms : 1000;
  cfg->connect_timeout_ms = opts->connect_timeout_ms;
  cfg->command_timeout_ms = opts->command_timeout_ms;
  cfg->reconnect_min_ms = opts->reconnect_min_ms;
  cfg->reconnect_max_ms = opts->reconnect_max_ms;
  cfg->backoff_max_ms =
      opts->wait_backoff_max_ms < 0 ? 0 : opts->wait_backoff_max_ms;
  cfg->err_owner = env->err_owner;
  cfg->reconnects = env->reconnects;
  if (cfg->ep.tls) {
    dl_tls_config tc = {opts->tls_ca_file,     opts->tls_ca_dir,
                        opts->tls_cert_file,   opts->tls_key_file,
                        opts->tls_server_name, opts->tls_verify};
    rc = dl_tls_ctx_new(&tc, &cfg->tls, msg, sizeof msg);
    if (rc != 0) {
      dl_seterr(NULL, rc, "%s", msg);
      rb_free(&r->base);
      return rc;
    }
  }
  if (cfg->ep.master_name && dl_sentinel_watch_start(cfg) != 0) {
    rb_free(&r->base);
    return dl_seterr(NULL, DLOCK_ENOMEM, "out of memory");
  }
  if (cfg->ep.cluster && part) {
    rb_free(&r->base);
    return dl_seterr(NULL, DLOCK_ENOTSUP,
                     "redis-cluster:// is not yet supported as a server of "
                     "redlock://");
  }
  if (cfg->ep.cluster && r->env.loop)
    rc = dl_acluster_link_new(cfg, &r->env, &r->link);
  else if (cfg->ep.cluster)
    rc = dl_cluster_link_new(cfg, &r->env, opts->connections, &r->link);
  else if (r->env.loop && part)
    rc = dl_loop_link_lazy(cfg, &r->env, &r->link);
  else if (r->env.loop)
    rc = dl_loop_link_new(cfg, &r->env, &r->link);
  else
    rc = dl_single_link_new(cfg, &r->env, opts->connections, &r->link);
  if (rc != 0) {
    rb_free(&r->base);
    return rc;
  }
  *out = &r->base;
  return 0;
}

int dl_redis_backend_new(const dlock_client_options *opts,
                         const dl_backend_env *env, dl_backend **out) {
  return backend_new(opts, env, false, out);
}

int dl_redis_part_new(const dlock_client_options *opts,
                      const dl_backend_env *env, dl_backend **out) {
  return backend_new(opts, env, true, out);
}

uint64_t dl_redis_backend_round_trips(dl_backend *base) {
  dlock_client_stats st = {0};
  base->ops->stats(base, &st);
  return st.writes;
}

uint64_t dl_redis_backend_wakeups(dl_backend *base) {
  dlock_client_stats st = {0};
  base->ops->stats(base, &st);
  return st.wakeups;
}

uint64_t dl_redis_backend_direct_wakeups(dl_backend *base) {
  return dl_single_link_direct_wakeups(((dl_redis *)base)->link);
}

bool dl_redis_backend_sleeper_reads(dl_backend *base) {
  return dl_single_link_sleeper_reads(((dl_redis *)base)->link);
}
