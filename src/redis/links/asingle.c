/* asingle.c: the event-loop link: one server, the operations' steps (dl_pend)
 * over a dl_aconn on the client's loop, pauses on the loop's timers, and
 * waiting through the subscriber connection of the loop (dl_asub), or by
 * backoff when the client asks for it. Its blocking entries refuse: an
 * event-loop client has no blocking calls. */
#include "links.h"

#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <string.h>

typedef struct apause apause;

typedef struct loop_link {
  dl_loop_head h; /* first */
  const dl_conn_config *cfg;
  dl_aconn *conn;
  dl_awaitpool *waits; /* replica acknowledgement's own connections */
  dl_asub *sub;        /* NULL: waiting by backoff */
  /* Waiting by backoff, a subscriber for loss notices only (a composite's
   * part: watch_losses), or NULL. */
  dl_asub *losses;
  bool part;      /* a composite's part (lazy): losses heard even so */
  apause *pauses; /* pending, for the close */
  bool closing;   /* from al_free on: no call on sub, no new pause */
} loop_link;

/* A pause, or a waiter's sleep: a timer that resumes its step. */
struct apause {
  dl_timer t;
  dl_pend *p;
  loop_link *L;
  apause *prev, *next;
};

/* ---- requests ---- */
static void on_reply(void *ud, int rc, redisReply *reply) {
  dl_pend *p = ud;
  p->link_data = NULL;
  p->rc = rc;
  p->reply = reply;
  p->resume(p);
}

static int al_eval_start(dl_rlink *base, dl_pend *p, int64_t until, int script,
                         int nkeys, const char *const *keys, int nargs,
                         const char *const *args) {
  loop_link *L = (loop_link *)base;
  int err = 0;
  if (until != 0 && dl_now_ms() >= until) {
    p->rc = dl_seterr(L->h.env->err_owner, DLOCK_ETIMEDOUT,
                      "no time left for the request");
    return 0;
  }
  dl_areq *r = dl_aconn_eval(L->conn, script, nkeys, (const char **)keys,
                             nargs, (const char **)args, until, on_reply, p,
                             &err);
  if (r == NULL) {
    p->rc = err;
    return 0;
  }
  if (p->take) dl_aconn_take(r);
  p->link_data = r;
  return DL_PENDING;
}

static int al_command_start(dl_rlink *base, dl_pend *p, int argc,
                            const char **argv) {
  loop_link *L = (loop_link *)base;
  int err = 0;
  /* A command's error reply becomes its code, as the blocking link's. */
  dl_areq *r = dl_aconn_command(L->conn, argc, argv, p->lens, 0, on_reply, p,
                                &err);
  if (r == NULL) {
    p->rc = err;
    return 0;
  }
  if (p->take) dl_aconn_take(r);
  p->link_data = r;
  return DL_PENDING;
}

/* Replica acknowledgement: a marker and WAIT on a connection of their
 * own (arepl.c). */
static void on_acked(void *ud, int rc, int count) {
  dl_pend *p = ud;
  p->link_data = NULL;
  p->rc = rc;
  p->acked = count;
  p->resume(p);
}

static int al_replicate_start(dl_rlink *base, dl_pend *p,
                              const char *const *keys, int nkeys, int n,
                              int timeout_ms) {
  loop_link *L = (loop_link *)base;
  (void)keys, (void)nkeys; /* one server */
  int err = 0;
  int64_t deadline = dl_now_ms() + L->cfg->command_timeout_ms + timeout_ms;
  dl_arepl *a = dl_awaitpool_replicate(L->waits, n, timeout_ms, deadline,
                                       L->h.env->err_owner, on_acked, p, &err);
  if (a == NULL) {
    p->rc = err;
    return 0;
  }
  p->link_data = a;
  return DL_PENDING;
}

/* ---- pauses ---- */
static void pause_unlink(loop_link *L, apause *a) {
  if (a->prev) a->prev->next = a->next;
  else L->pauses = a->next;
  if (a->next) a->next->prev = a->prev;
}

static void on_pause(void *ud) {
  apause *a = ud;
  dl_pend *p = a->p;
  pause_unlink(a->L, a);
  free(a);
  p->link_data = NULL;
  p->rc = 0;
  p->resume(p);
}

static int al_pause_start(dl_rlink *base, dl_pend *p, int64_t until) {
  loop_link *L = (loop_link *)base;
  if (L->closing) {
    p->rc = DLOCK_ECLOSED;
    return 0;
  }
  apause *a = calloc(1, sizeof *a);
  if (a == NULL) {
    p->rc = dl_seterr(L->h.env->err_owner, DLOCK_ENOMEM, "out of memory");
    return 0;
  }
  a->p = p;
  a->L = L;
  dl_timer_init(&a->t, on_pause, a);
  if (dl_timer_start(L->h.env->loop, &a->t, until) != 0) {
    free(a);
    p->rc = dl_seterr(L->h.env->err_owner, DLOCK_ENOMEM, "out of memory");
    return 0;
  }
  a->next = L->pauses;
  if (L->pauses) L->pauses->prev = a;
  L->pauses = a;
  p->link_data = a;
  return DL_PENDING;
}

static void al_cancel(dl_rlink *base, dl_pend *p) {
  loop_link *L = (loop_link *)base;
  if (p->link_data == NULL) return;
  if (p->step == DL_STEP_EVAL || p->step == DL_STEP_COMMAND) {
    dl_areq_cancel(p->link_data);
  } else if (p->step == DL_STEP_REPLICATE) {
    dl_arepl_cancel(p->link_data);
  } else if (p->step == DL_STEP_SUB_REF && L->sub) {
    dl_asub_cancel(p->link_data);
    dl_asub_unref(L->sub, p->sub, true); /* the reference being confirmed */
    p->sub = NULL;
  } else if (p->step == DL_STEP_SUB_WAIT && L->sub) {
    dl_asub_cancel(p->link_data);
  } else {
    apause *a = p->link_data;
    dl_timer_stop(L->h.env->loop, &a->t);
    pause_unlink(L, a);
    free(a);
  }
  p->link_data = NULL;
}

/* ---- waiting: through the subscriber connection, or by backoff ---- */
static void on_confirmed(void *ud, int rc) {
  dl_pend *p = ud;
  p->link_data = NULL;
  /* Not confirmed in time: the waiter keeps the reference and still wakes
   * at the holder's TTL, as with the blocking subscriber. */
  p->rc = rc == DLOCK_ECLOSED ? rc : 0;
  p->resume(p);
}

static int al_sub_ref_start(dl_rlink *base, dl_pend *p, const char *channel,
                            int mode, int64_t deadline) {
  loop_link *L = (loop_link *)base;
  p->rc = 0;
  p->sub = NULL;
  if (L->closing) {
    p->rc = DLOCK_ECLOSED;
    return 0;
  }
  if (L->sub == NULL) { /* by backoff */
    if (mode != DL_WAKE_GRANT) { /* no grants without a subscription */
      dl_backoff *w = calloc(1, sizeof *w);
      if (w) dl_backoff_init(w);
      p->sub = (dl_sub *)w; /* NULL: sleeps until the deadline */
    }
    return 0;
  }
  /* NULL (out of memory): the waiter sleeps until the holder's TTL. */
  if ((p->sub = dl_asub_ref(L->sub, channel, mode)) == NULL) return 0;
  int64_t limit = dl_now_ms() + L->cfg->command_timeout_ms;
  dl_asub_req *r =
      dl_asub_confirm(L->sub, p->sub, deadline < limit ? deadline : limit,
                      on_confirmed, p);
  if (r == NULL) return 0; /* unconfirmed: as a confirmation timed out */
  p->link_data = r;
  return DL_PENDING;
}

static void on_woken(void *ud, int rc) {
  dl_pend *p = ud;
  p->link_data = NULL;
  p->rc = rc;
  p->resume(p);
}

static int al_sub_wait_start(dl_rlink *base, dl_pend *p, dl_sub *s,
                             int64_t until, int64_t since, dl_sub *grant) {
  loop_link *L = (loop_link *)base;
  if (L->closing) {
    p->rc = DLOCK_ECLOSED;
    return 0;
  }
  if (s && L->sub) {
    dl_asub_req *r = dl_asub_wait(L->sub, s, until, since, grant, on_woken, p);
    if (r != NULL) {
      p->link_data = r;
      return DL_PENDING;
    }
    /* Out of memory: a pause until the deadline (the TTL bounds it). */
  } else if (s) {
    int64_t max = L->cfg->backoff_max_ms > 0 ? L->cfg->backoff_max_ms : 100;
    int64_t at = dl_now_ms() + dl_backoff_next((dl_backoff *)s, max);
    if (at < until) until = at;
  }
  return al_pause_start(base, p, until);
}

/* A reference to a subscription already confirmed, or NULL. */
static dl_sub *al_sub_ref(dl_rlink *base, const char *channel, int mode,
                          int64_t deadline) {
  loop_link *L = (loop_link *)base;
  (void)deadline; /* only called with a negative one: never waits */
  if (L->sub == NULL || L->closing) return NULL;
  return dl_asub_ref_heard(L->sub, channel, mode);
}

static int al_sub_grant(dl_rlink *base, dl_sub *s, uint64_t *token) {
  loop_link *L = (loop_link *)base;
  if (L->sub == NULL || L->closing || s == NULL) return -1;
  return dl_asub_grant(L->sub, s, token);
}

/* After the close the table frees every subscription itself. */
static void al_sub_unref(dl_rlink *base, dl_sub *s, bool linger) {
  loop_link *L = (loop_link *)base;
  if (L->sub == NULL) free(s);
  else if (!L->closing) dl_asub_unref(L->sub, s, linger);
}

static void al_sub_kick(dl_rlink *base, dl_sub *s) {
  loop_link *L = (loop_link *)base;
  if (L->sub && !L->closing) dl_asub_kick(L->sub, s);
}

/* Loss notices: the revocation channel now, the keyspace events once the
 * server's setting is read (the reply comes on the loop). */
typedef struct watch_ctx {
  loop_link *L;
  dl_notice_fn fn;
  void *ud;
} watch_ctx;

static int listen_on(void *ctx, const char *channel, bool pattern,
                     size_t strip) {
  watch_ctx *w = ctx;
  dl_asub *sub = w->L->sub ? w->L->sub : w->L->losses;
  return dl_asub_listen(sub, channel, pattern, strip, w->fn, w->ud);
}

static void on_config(void *ud, int rc, redisReply *reply) {
  watch_ctx *w = ud;
  /* Refused (ACL, renamed) or closed: no keyspace events are heard. */
  if (rc == 0 && reply && !w->L->closing)
    dl_keyspace_listen(reply, w->L->cfg->ep.db, w->L->h.env->key_prefix,
                       listen_on, w);
  if (reply) freeReplyObject(reply);
  free(w);
}

static int al_watch_losses(dl_rlink *base, const char *revoke_channel,
                           dl_notice_fn fn, void *ud) {
  loop_link *L = (loop_link *)base;
  /* Waiting by backoff: no pub/sub, as the user asked (a server or proxy
   * without it); a composite's part, which waits by retrying, has a
   * subscriber of its own for the notices. */
  if (L->sub == NULL && !L->part) return 0;
  if (L->sub == NULL && L->losses == NULL) {
    int rc = dl_asub_new(L->h.env->loop, L->cfg, &L->losses);
    if (rc != 0) return rc;
  }
  watch_ctx *w = malloc(sizeof *w);
  if (w == NULL) return DLOCK_ENOMEM;
  *w = (watch_ctx){L, fn, ud};
  int rc = listen_on(w, revoke_channel, false, 0);
  const char *argv[] = {"CONFIG", "GET", "notify-keyspace-events"};
  if (rc == 0 &&
      dl_aconn_send(L->conn, 3, argv, NULL, 0, on_config, w, &rc) != NULL)
    return 0;
  free(w);
  /* The server down (a composite's part, not connected at the open): the
   * revocations are heard once it is up, its keyspace events are not. */
  if (rc != DLOCK_ENOMEM && rc != 0 && L->losses) {
    dl_clearerr(L->h.env->err_owner);
    return 0;
  }
  return rc;
}

/* ---- the blocking entries refuse (every event-loop link's) ---- */
static int refuse_head(dl_rlink *base) {
  return dl_seterr(((dl_loop_head *)base)->env->err_owner, DLOCK_EINVAL,
                   "a blocking call on an event-loop client");
}

int dl_loop_refuse_eval_many(dl_rlink *base, int64_t deadline, int n,
                             int script, const int *nkeys,
                             const char *const *const *keys, const int *nargs,
                             const char *const *const *args,
                             redisReply **replies, int *errs) {
  (void)deadline, (void)script, (void)nkeys, (void)keys, (void)nargs,
      (void)args;
  int rc = refuse_head(base);
  for (int i = 0; i < n; i++) {
    replies[i] = NULL;
    errs[i] = rc;
  }
  return rc;
}

int dl_loop_refuse_command(dl_rlink *base, int argc, const char **argv,
                           redisReply **reply) {
  (void)argc, (void)argv;
  *reply = NULL;
  return refuse_head(base);
}

int dl_loop_refuse_sub_wait(dl_rlink *base, dl_sub *s, int64_t deadline,
                            int64_t since, dl_sub *grant) {
  (void)s, (void)deadline, (void)since, (void)grant;
  return refuse_head(base);
}

/* Completes every pending pause with DLOCK_ECLOSED, then closes the
 * connection, which completes every request the same way (their
 * operations' callbacks run within). */
static void al_free(dl_rlink *base) {
  loop_link *L = (loop_link *)base;
  if (L == NULL) return;
  L->closing = true;
  /* Waits and confirmations first: what their operations do next (a
   * request, a pause) is then failed below. */
  dl_asub_free(L->sub);
  dl_asub_free(L->losses);
  while (L->pauses) {
    apause *a = L->pauses;
    dl_pend *p = a->p;
    dl_timer_stop(L->h.env->loop, &a->t);
    pause_unlink(L, a);
    free(a);
    p->link_data = NULL;
    p->rc = DLOCK_ECLOSED;
    p->resume(p);
  }
  /* A poll's pop in flight may have taken a value: its reply is read, and
   * the poll completes with it (dl_aconn_drain_takes). */
  dl_aconn_drain_takes(L->conn);
  dl_awaitpool_free(L->waits);
  dl_aconn_free(L->conn);
  free(L);
}

static void al_stats(dl_rlink *base, dlock_client_stats *st) {
  loop_link *L = (loop_link *)base;
  st->writes += dl_aconn_batches(L->conn);
  if (L->sub) st->wakeups += dl_asub_wakeups(L->sub);
}

static const dl_rlink_ops loop_ops = {
    .name = "loop",
    .eval_many = dl_loop_refuse_eval_many,
    .command = dl_loop_refuse_command,
    .sub_ref = al_sub_ref,
    .sub_wait = dl_loop_refuse_sub_wait,
    .sub_grant = al_sub_grant,
    .sub_unref = al_sub_unref,
    .sub_kick = al_sub_kick,
    .watch_losses = al_watch_losses,
    .free = al_free,
    .stats = al_stats,
    .eval_start = al_eval_start,
    .command_start = al_command_start,
    .sub_ref_start = al_sub_ref_start,
    .sub_wait_start = al_sub_wait_start,
    .pause_start = al_pause_start,
    .replicate_start = al_replicate_start,
    .cancel = al_cancel,
};

static int link_new(const dl_conn_config *cfg, const dl_backend_env *env,
                    bool lazy, dl_rlink **out) {
  *out = NULL;
  dl_scripts_init();
  loop_link *L = calloc(1, sizeof *L);
  if (L == NULL) return DLOCK_ENOMEM;
  L->h.base.ops = &loop_ops;
  L->h.env = env;
  L->cfg = cfg;
  L->part = lazy;
  int rc = dl_aconn_new(env->loop, cfg, &L->conn);
  if (rc == 0) rc = dl_awaitpool_new(env->loop, cfg, &L->waits);
  /* Connect now, so that a wrong address fails the open at once. */
  if (rc == 0 && !lazy) rc = dl_aconn_connect(L->conn);
  if (rc == 0 && cfg->backoff_max_ms <= 0)
    rc = dl_asub_new(env->loop, cfg, &L->sub);
  if (rc != 0) {
    dl_awaitpool_free(L->waits);
    if (L->conn) dl_aconn_free(L->conn);
    free(L);
    return rc;
  }
  *out = &L->h.base;
  return 0;
}

int dl_loop_link_new(const dl_conn_config *cfg, const dl_backend_env *env,
                     dl_rlink **out) {
  return link_new(cfg, env, false, out);
}

int dl_loop_link_lazy(const dl_conn_config *cfg, const dl_backend_env *env,
                      dl_rlink **out) {
  return link_new(cfg, env, true, out);
}
