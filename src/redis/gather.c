/* gather.c: the link of one server of a composite (Redlock): operations
 * run on it as on an event loop (the backend's *_async entries), but the
 * calling thread completes their steps itself (dl_gather_run). So one
 * composite call starts its requests to every server before it reads any
 * answer (one round of fan-out), with no thread of its own: each request
 * is queued on the server's pipelined connection (dl_conn_send) when its
 * step starts, and waited for (dl_req_wait) when the caller gathers.
 *
 * Steps are recorded in the gathering of the thread that starts them
 * (dl_gather_begin); only the steps a composite needs exist: evals,
 * commands and pauses. No subscriptions: a composite waits by retrying. */
#include "redis.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gather_link {
  dl_rlink base;
  dl_rlink *inner; /* a lazy single link: one connection, no subscriber */
  dl_conn *conn;
  const dl_backend_env *env;
} gather_link;

/* A started step (p->link_data). */
typedef struct gstep {
  struct gstep *next;
  dl_pend *p;
  gather_link *L;
  dl_req *req;      /* an eval's or a command's; NULL: a pause */
  dl_req *mark;     /* a replica acknowledgement's marker (req: its WAIT) */
  int64_t until;    /* the reply's deadline, or the pause's end */
  int script;       /* an eval's (for the NOSCRIPT fallback), else -1 */
  int nkeys, nargs;
  char **kv; /* its keys and args, one block */
} gstep;

static _Thread_local dl_gather *current;

void dl_gather_begin(dl_gather *g, dl_gather **saved) {
  g->head = g->tail = NULL;
  *saved = current;
  current = g;
}

void dl_gather_end(dl_gather *saved) { current = saved; }

static int add(gather_link *L, dl_pend *p, gstep *s) {
  if (current == NULL) {
    free(s->kv);
    free(s);
    p->rc = dl_seterr(L->env->err_owner, DLOCK_EINVAL,
                      "a composite's step outside its call");
    return 0;
  }
  s->p = p;
  s->L = L;
  p->link_data = s;
  if (current->tail) ((gstep *)current->tail)->next = s;
  else current->head = s;
  current->tail = s;
  return DL_PENDING;
}

static gstep *step_new(gather_link *L, dl_pend *p) {
  gstep *s = calloc(1, sizeof *s);
  if (s == NULL)
    p->rc = dl_seterr(L->env->err_owner, DLOCK_ENOMEM, "out of memory");
  else s->script = -1;
  return s;
}

/* Copies keys and args into one block: the pointers, then the strings. */
static char **copy_kv(int nkeys, const char *const *keys, int nargs,
                      const char *const *args) {
  int n = nkeys + nargs;
  size_t size = (size_t)n * sizeof(char *);
  for (int i = 0; i < n; i++)
    size += strlen(i < nkeys ? keys[i] : args[i - nkeys]) + 1;
  char **kv = malloc(size ? size : 1);
  if (kv == NULL) return NULL;
  char *at = (char *)(kv + n);
  for (int i = 0; i < n; i++) {
    const char *src = i < nkeys ? keys[i] : args[i - nkeys];
    size_t len = strlen(src) + 1;
    memcpy(at, src, len);
    kv[i] = at;
    at += len;
  }
  return kv;
}

static int64_t reply_deadline(gather_link *L, int64_t until) {
  int64_t limit = dl_now_ms() + L->env->command_timeout_ms;
  return until <= 0 || until > limit ? limit : until;
}

static int g_eval_start(dl_rlink *base, dl_pend *p, int64_t until,
                        int script, int nkeys, const char *const *keys,
                        int nargs, const char *const *args) {
  gather_link *L = (gather_link *)base;
  gstep *s = step_new(L, p);
  if (s == NULL) return 0;
  bool ping_first = (script & DL_EVAL_WAKE_FIRST) != 0;
  s->script = script & ~DL_EVAL_WAKE_FIRST;
  s->nkeys = nkeys;
  s->nargs = nargs;
  s->until = reply_deadline(L, until);
  s->kv = copy_kv(nkeys, keys, nargs, args);
  dl_evargv v;
  int argc = s->kv ? dl_evargv_build(s->script, false, nkeys, keys, nargs,
                                     args, &v)
                   : -1;
  int err = DLOCK_ENOMEM;
  if (argc >= 0) {
    s->req = dl_conn_send(L->conn, argc, v.argv, v.lens, ping_first, &err);
    dl_evargv_free(&v);
  }
  if (s->req == NULL) {
    free(s->kv);
    free(s);
    p->rc = err == DLOCK_ENOMEM
                ? dl_seterr(L->env->err_owner, err, "out of memory")
                : err;
    return 0;
  }
  return add(L, p, s);
}

static int g_command_start(dl_rlink *base, dl_pend *p, int argc,
                           const char **argv) {
  gather_link *L = (gather_link *)base;
  size_t lens[16];
  if (argc > 16) {
    p->rc = dl_seterr(L->env->err_owner, DLOCK_EINVAL, "too many args");
    return 0;
  }
  gstep *s = step_new(L, p);
  if (s == NULL) return 0;
  for (int i = 0; i < argc; i++) lens[i] = strlen(argv[i]);
  int err = 0;
  s->until = reply_deadline(L, 0);
  s->req = dl_conn_send(L->conn, argc, argv, lens, false, &err);
  if (s->req == NULL) {
    free(s);
    p->rc = err;
    return 0;
  }
  return add(L, p, s);
}

/* Replica acknowledgement: the marker write and WAIT, pipelined on the
 * server's connection (dl_conn_replicate's, without WAITAOF). */
static int g_replicate_start(dl_rlink *base, dl_pend *p,
                             const char *const *keys, int nkeys, int n,
                             int timeout_ms) {
  gather_link *L = (gather_link *)base;
  (void)keys, (void)nkeys; /* one server */
  gstep *s = step_new(L, p);
  if (s == NULL) return 0;
  char ns[16], ts[16];
  snprintf(ns, sizeof ns, "%d", n);
  snprintf(ts, sizeof ts, "%d", timeout_ms);
  const char *mark[3] = {"PUBLISH", DL_REPLICATE_CHANNEL, ""};
  const char *wait[3] = {"WAIT", ns, ts};
  size_t mlen[3] = {7, strlen(DL_REPLICATE_CHANNEL), 0};
  size_t wlen[3] = {4, strlen(ns), strlen(ts)};
  int err = 0;
  s->until = dl_now_ms() + L->env->command_timeout_ms + timeout_ms;
  s->mark = dl_conn_send(L->conn, 3, mark, mlen, false, &err);
  if (s->mark) s->req = dl_conn_send(L->conn, 3, wait, wlen, false, &err);
  if (s->req == NULL) {
    if (s->mark) { /* its answer is waited for and dropped */
      redisReply *r = NULL;
      (void)dl_req_wait(L->conn, s->mark, s->until, &r);
      if (r) freeReplyObject(r);
    }
    free(s);
    p->rc = err;
    return 0;
  }
  return add(L, p, s);
}

static int g_pause_start(dl_rlink *base, dl_pend *p, int64_t until) {
  gather_link *L = (gather_link *)base;
  gstep *s = step_new(L, p);
  if (s == NULL) return 0;
  s->until = until;
  return add(L, p, s);
}

/* Takes s off the gathering g. */
static void unlink_step(dl_gather *g, gstep *s) {
  gstep **at = (gstep **)&g->head, *prev = NULL;
  while (*at && *at != s) {
    prev = *at;
    at = &(*at)->next;
  }
  if (*at == NULL) return;
  *at = s->next;
  if (g->tail == s) g->tail = prev;
  s->next = NULL;
}

/* Completes s's step: p->rc and p->reply. */
static void complete(gstep *s) {
  dl_pend *p = s->p;
  gather_link *L = s->L;
  p->rc = 0;
  p->reply = NULL;
  if (s->req == NULL) { /* a pause */
    int64_t left = s->until - dl_now_ms();
    if (left > 0) dl_sleep_ms(left);
  } else if (s->mark) { /* the marker's answer, then the WAIT's */
    redisReply *m = NULL, *r = NULL;
    int rc = dl_req_wait(L->conn, s->mark, s->until, &m);
    if (m) freeReplyObject(m);
    int rc2 = dl_req_wait(L->conn, s->req, s->until, &r);
    if (rc2 == 0) rc2 = dl_reply_check(L->env->err_owner, &r);
    if (rc == 0) rc = rc2;
    if (rc == 0 && (r == NULL || r->type != REDIS_REPLY_INTEGER))
      rc = dl_seterr(L->env->err_owner, DLOCK_EPROTO,
                     "unexpected reply to WAIT");
    if (rc == 0)
      p->acked = r->integer > 1000000 ? 1000000 : (int)r->integer;
    if (r) freeReplyObject(r);
    p->rc = rc;
  } else {
    redisReply *r = NULL;
    int rc = dl_req_wait(L->conn, s->req, s->until, &r);
    if (rc == 0 && s->script >= 0 && dl_reply_noscript(r)) {
      /* SCRIPT FLUSH or a restart: the body once, then EVALSHA works. */
      freeReplyObject(r);
      r = NULL;
      dl_evargv v;
      const char *const *kv = (const char *const *)s->kv;
      int argc = dl_evargv_build(s->script, true, s->nkeys, kv, s->nargs,
                                 kv + s->nkeys, &v);
      if (argc < 0) rc = dl_seterr(L->env->err_owner, DLOCK_ENOMEM,
                                   "out of memory");
      else {
        rc = dl_conn_call(L->conn, argc, v.argv, v.lens, &r);
        dl_evargv_free(&v);
      }
    }
    if (rc == 0) rc = dl_reply_check(L->env->err_owner, &r);
    p->rc = rc;
    p->reply = r;
  }
  free(s->kv);
  free(s);
  p->link_data = NULL;
}

int dl_gather_run(dl_gather *g, const bool *done) {
  while (!*done) {
    gstep *s = g->head, *pick = NULL;
    /* Answers first, in the order they were asked; then the earliest
     * pause. */
    for (; s; s = s->next) {
      if (s->req) {
        pick = s;
        break;
      }
      if (pick == NULL || s->until < pick->until) pick = s;
    }
    if (pick == NULL) return DLOCK_EINVAL; /* nothing can end it */
    unlink_step(g, pick);
    dl_pend *p = pick->p;
    complete(pick);
    p->pending = false;
    p->resume(p);
  }
  return 0;
}

static void g_cancel(dl_rlink *base, dl_pend *p) {
  (void)base;
  gstep *s = p->link_data;
  if (s == NULL || current == NULL) return;
  unlink_step(current, s);
  if (s->req) { /* its answer is waited for and dropped */
    complete(s);
    if (p->reply) freeReplyObject(p->reply);
    p->reply = NULL;
    return;
  }
  free(s);
  p->link_data = NULL;
}

/* ---- the rest: the inner link's ---- */
static int g_eval_many(dl_rlink *base, int64_t deadline, int n, int script,
                       const int *nkeys, const char *const *const *keys,
                       const int *nargs, const char *const *const *args,
                       redisReply **replies, int *errs) {
  dl_rlink *in = ((gather_link *)base)->inner;
  return in->ops->eval_many(in, deadline, n, script, nkeys, keys, nargs, args,
                            replies, errs);
}

static int g_eval(dl_rlink *base, int script, int nkeys, const char **keys,
                  int nargs, const char **args, redisReply **reply) {
  dl_rlink *in = ((gather_link *)base)->inner;
  return in->ops->eval(in, script, nkeys, keys, nargs, args, reply);
}

static int g_command(dl_rlink *base, int argc, const char **argv,
                     redisReply **reply) {
  dl_rlink *in = ((gather_link *)base)->inner;
  return in->ops->command(in, argc, argv, reply);
}

static int g_watch_losses(dl_rlink *base, const char *revoke_channel,
                          dl_notice_fn fn, void *ud) {
  (void)base, (void)revoke_channel, (void)fn, (void)ud;
  return 0; /* no subscriber: holds are checked at each renewal */
}

static void g_stats(dl_rlink *base, dlock_client_stats *st) {
  dl_rlink *in = ((gather_link *)base)->inner;
  in->ops->stats(in, st);
}

static void g_free(dl_rlink *base) {
  gather_link *L = (gather_link *)base;
  if (L == NULL) return;
  if (L->inner) L->inner->ops->free(L->inner);
  free(L);
}

static const dl_rlink_ops gather_ops = {
    .name = "gather",
    .eval = g_eval,
    .eval_many = g_eval_many,
    .command = g_command,
    .watch_losses = g_watch_losses,
    .free = g_free,
    .stats = g_stats,
    .eval_start = g_eval_start,
    .command_start = g_command_start,
    .pause_start = g_pause_start,
    .replicate_start = g_replicate_start,
    .cancel = g_cancel,
};

int dl_gather_link_new(const dl_conn_config *cfg, const dl_backend_env *env,
                       dl_rlink **out) {
  *out = NULL;
  gather_link *L = calloc(1, sizeof *L);
  if (L == NULL) return DLOCK_ENOMEM;
  L->base.ops = &gather_ops;
  L->env = env;
  int rc = dl_single_link_lazy(cfg, env, &L->inner, &L->conn);
  if (rc != 0) {
    free(L);
    return rc;
  }
  *out = &L->base;
  return 0;
}
