/* alink.c: the event-loop link: one server, the operations' steps (dl_pend)
 * over a dl_aconn on the client's loop, pauses on the loop's timers, and
 * waiting by backoff (no subscriber connection on the loop yet). Its
 * blocking entries refuse: an event-loop client has no blocking calls. */
#include "redis.h"

#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <string.h>

typedef struct apause apause;

typedef struct loop_link {
  dl_rlink base;
  const dl_backend_env *env;
  const dl_conn_config *cfg;
  dl_aconn *conn;
  apause *pauses; /* pending, for the close */
  bool closing;
} loop_link;

/* A pause, or a waiter's sleep: a timer that resumes its step. */
struct apause {
  dl_timer t;
  dl_pend *p;
  loop_link *L;
  apause *prev, *next;
};

static int refuse(loop_link *L) {
  return dl_seterr(L->env->err_owner, DLOCK_EINVAL,
                   "a blocking call on an event-loop client");
}

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
    p->rc = dl_seterr(L->env->err_owner, DLOCK_ETIMEDOUT,
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
  p->link_data = r;
  return DL_PENDING;
}

/* A command's error reply becomes its code, as the blocking link's. */
static void on_command(void *ud, int rc, redisReply *reply) {
  dl_pend *p = ud;
  dl_async *op = p->op; /* every step belongs to an operation's shell */
  if (rc == 0) rc = dl_reply_check(op->R->env.err_owner, &reply);
  on_reply(ud, rc, reply);
}

static int al_command_start(dl_rlink *base, dl_pend *p, int argc,
                            const char **argv) {
  loop_link *L = (loop_link *)base;
  int err = 0;
  dl_areq *r = dl_aconn_send(L->conn, argc, argv, NULL, 0, on_command, p, &err);
  if (r == NULL) {
    p->rc = err;
    return 0;
  }
  p->link_data = r;
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
    p->rc = dl_seterr(L->env->err_owner, DLOCK_ENOMEM, "out of memory");
    return 0;
  }
  a->p = p;
  a->L = L;
  dl_timer_init(&a->t, on_pause, a);
  if (dl_timer_start(L->env->loop, &a->t, until) != 0) {
    free(a);
    p->rc = dl_seterr(L->env->err_owner, DLOCK_ENOMEM, "out of memory");
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
  } else {
    apause *a = p->link_data;
    dl_timer_stop(L->env->loop, &a->t);
    pause_unlink(L, a);
    free(a);
  }
  p->link_data = NULL;
}

/* ---- waiting, by backoff ---- */
static int al_sub_ref_start(dl_rlink *base, dl_pend *p, const char *channel,
                            int mode, int64_t deadline) {
  (void)base;
  (void)channel;
  (void)deadline;
  p->rc = 0;
  p->sub = NULL;
  if (mode != DL_WAKE_GRANT) { /* no grants without a subscription */
    dl_backoff *w = calloc(1, sizeof *w);
    if (w) dl_backoff_init(w);
    p->sub = (dl_sub *)w; /* NULL: sleeps until the deadline */
  }
  return 0;
}

static int al_sub_wait_start(dl_rlink *base, dl_pend *p, dl_sub *s,
                             int64_t until, int64_t since, dl_sub *grant) {
  loop_link *L = (loop_link *)base;
  (void)since;
  (void)grant;
  if (s) {
    int64_t max = L->env->backoff_max_ms > 0 ? L->env->backoff_max_ms : 100;
    int64_t at = dl_now_ms() + dl_backoff_next((dl_backoff *)s, max);
    if (at < until) until = at;
  }
  return al_pause_start(base, p, until);
}

static dl_sub *al_sub_ref(dl_rlink *base, const char *channel, int mode,
                          int64_t deadline) {
  (void)base;
  (void)channel;
  (void)mode;
  (void)deadline;
  return NULL; /* nothing lingers: the waits are by backoff */
}

static int al_sub_grant(dl_rlink *base, dl_sub *s, uint64_t *token) {
  (void)base;
  (void)s;
  (void)token;
  return -1; /* no grant can come */
}

static void al_sub_unref(dl_rlink *base, dl_sub *s, bool linger) {
  (void)base;
  (void)linger;
  free(s);
}

static void al_sub_kick(dl_rlink *base, dl_sub *s) {
  (void)base;
  (void)s;
}

/* ---- the blocking entries refuse ---- */
static int al_eval(dl_rlink *base, int script, int nkeys, const char **keys,
                   int nargs, const char **args, redisReply **reply) {
  (void)script, (void)nkeys, (void)keys, (void)nargs, (void)args;
  *reply = NULL;
  return refuse((loop_link *)base);
}

static int al_eval_many(dl_rlink *base, int64_t deadline, int n, int script,
                        const int *nkeys, const char *const *const *keys,
                        const int *nargs, const char *const *const *args,
                        redisReply **replies, int *errs) {
  (void)deadline, (void)script, (void)nkeys, (void)keys, (void)nargs,
      (void)args;
  int rc = refuse((loop_link *)base);
  for (int i = 0; i < n; i++) {
    replies[i] = NULL;
    errs[i] = rc;
  }
  return rc;
}

static int al_command(dl_rlink *base, int argc, const char **argv,
                      redisReply **reply) {
  (void)argc, (void)argv;
  *reply = NULL;
  return refuse((loop_link *)base);
}

static int al_sub_wait(dl_rlink *base, dl_sub *s, int64_t deadline,
                       int64_t since, dl_sub *grant) {
  (void)s, (void)deadline, (void)since, (void)grant;
  return refuse((loop_link *)base);
}

/* Completes every pending pause with DLOCK_ECLOSED, then closes the
 * connection, which completes every request the same way (their
 * operations' callbacks run within). */
static void al_free(dl_rlink *base) {
  loop_link *L = (loop_link *)base;
  if (L == NULL) return;
  L->closing = true;
  while (L->pauses) {
    apause *a = L->pauses;
    dl_pend *p = a->p;
    dl_timer_stop(L->env->loop, &a->t);
    pause_unlink(L, a);
    free(a);
    p->link_data = NULL;
    p->rc = DLOCK_ECLOSED;
    p->resume(p);
  }
  dl_aconn_free(L->conn);
  free(L);
}

static const dl_rlink_ops loop_ops = {
    .name = "loop",
    .eval = al_eval,
    .eval_many = al_eval_many,
    .command = al_command,
    .sub_ref = al_sub_ref,
    .sub_wait = al_sub_wait,
    .sub_grant = al_sub_grant,
    .sub_unref = al_sub_unref,
    .sub_kick = al_sub_kick,
    .free = al_free,
    .eval_start = al_eval_start,
    .command_start = al_command_start,
    .sub_ref_start = al_sub_ref_start,
    .sub_wait_start = al_sub_wait_start,
    .pause_start = al_pause_start,
    .cancel = al_cancel,
};

int dl_loop_link_new(const dl_conn_config *cfg, const dl_backend_env *env,
                     dl_rlink **out) {
  *out = NULL;
  dl_scripts_init();
  loop_link *L = calloc(1, sizeof *L);
  if (L == NULL) return DLOCK_ENOMEM;
  L->base.ops = &loop_ops;
  L->env = env;
  L->cfg = cfg;
  int rc = dl_aconn_new(env->loop, cfg, &L->conn);
  /* Connect now, so that a wrong address fails the open at once. */
  if (rc == 0) rc = dl_aconn_connect(L->conn);
  if (rc != 0) {
    if (L->conn) dl_aconn_free(L->conn);
    free(L);
    return rc;
  }
  *out = &L->base;
  return 0;
}
