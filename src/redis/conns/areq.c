/* areq.c: the requests of the event-loop connection (aconn.c): each
 * formatted once (an eval keeps its keys and args for the NOSCRIPT
 * fallback), queued on outq, batch and infl in turn, ended by its reply,
 * its deadline, a lost connection or the close; a request that times out
 * or is cancelled stays queued without a callback until its reply comes
 * and is dropped, so that the others' replies still match. */
#include "aconn.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dl_aq_push(rq *q, dl_areq *r, int where) {
  r->next = NULL;
  r->prev = q->tail;
  if (q->tail) q->tail->next = r;
  else q->head = r;
  q->tail = r;
  r->where = where;
}

void dl_aq_del(rq *q, dl_areq *r) {
  if (r->prev) r->prev->next = r->next;
  else q->head = r->next;
  if (r->next) r->next->prev = r->prev;
  else q->tail = r->prev;
  r->prev = r->next = NULL;
  r->where = Q_NONE;
}

void dl_aq_free(dl_areq *r) {
  free(r->cmd);
  free(r);
}

/* Takes r's callback away (its reply, if one comes, is dropped) and frees
 * r if it is on no queue or was never written. Returns the callback. */
static dl_reply_fn detach(dl_aconn *c, dl_areq *r, void **ud) {
  dl_reply_fn fn = r->fn;
  *ud = r->ud;
  r->fn = NULL;
  dl_timer_stop(c->lp, &r->deadline);
  if (r->where == Q_OUT) dl_aq_del(&c->outq, r);
  if (r->where == Q_NONE) dl_aq_free(r);
  return fn;
}

/* Ends r with rc (and reply, owned by the callback); a failure's detail
 * the connection's last message, unless `told` (set already). */
static void end_req(dl_aconn *c, dl_areq *r, int rc, redisReply *reply,
                    bool told) {
  void *ud;
  dl_reply_fn fn = detach(c, r, &ud);
  if (fn == NULL) {
    if (reply) freeReplyObject(reply);
    return;
  }
  if (rc < 0 && rc != DLOCK_ECLOSED && !told)
    dl_seterr(c->cfg->err_owner, rc, "%s", c->last_msg);
  fn(ud, rc, reply);
}

void dl_aq_finish(dl_aconn *c, dl_areq *r, int rc, redisReply *reply) {
  end_req(c, r, rc, reply, false);
}

void dl_aq_answer(dl_aconn *c, dl_areq *r, int rc, redisReply *reply) {
  end_req(c, r, rc, reply, true);
}

/* Fails every request of q with rc. */
void dl_aq_fail(dl_aconn *c, rq *q, int rc) {
  while (q->head) {
    dl_areq *r = q->head;
    dl_aq_del(q, r);
    dl_aq_finish(c, r, rc, NULL);
  }
}

static void on_deadline(void *ud) {
  dl_areq *r = ud;
  dl_aconn *c = r->c;
  enter(c);
  set_msg(c, DLOCK_ETIMEDOUT, "no reply before the deadline");
  dl_aq_finish(c, r, DLOCK_ETIMEDOUT, NULL);
  leave(c);
}

/* Queues r (formatted) and sees that it goes out. Returns 0, or a code with
 * r freed (its callback never runs). */
static int enqueue(dl_aconn *c, dl_areq *r, int64_t deadline) {
  int rc = 0;
  dl_aconn_check_moved(c);
  if (c->closed || c->draining) rc = DLOCK_ECLOSED;
  else if (c->state == A_DOWN && dl_now_ms() < c->next_connect_ms)
    rc = dl_seterr(c->cfg->err_owner, c->last_err ? c->last_err
                                                  : DLOCK_ECONNLOST,
                   "%s (next reconnect in %lld ms)", c->last_msg,
                   (long long)(c->next_connect_ms - dl_now_ms()));
  if (rc == 0 && deadline <= 0)
    deadline = dl_now_ms() + c->cfg->command_timeout_ms;
  if (rc == 0) {
    dl_timer_init(&r->deadline, on_deadline, r);
    rc = dl_timer_start(c->lp, &r->deadline, deadline);
  }
  /* Down, outq is empty: a connect that fails at once fails nobody else,
   * and the caller hears it here. */
  if (rc == 0 && c->state == A_DOWN) {
    enter(c);
    rc = dl_aconn_start_connect(c);
    if (rc != 0)
      dl_seterr(c->cfg->err_owner, rc, "%s", c->last_msg);
    leave(c);
  }
  if (rc != 0) {
    dl_timer_stop(c->lp, &r->deadline);
    dl_aq_free(r);
    return rc;
  }
  dl_aq_push(&c->outq, r, Q_OUT);
  dl_aconn_flush_soon(c);
  return 0;
}

static dl_areq *req_new(dl_aconn *c, int argc, const char **argv,
                        const size_t *argvlen, dl_reply_fn fn, void *ud,
                        int *err) {
  dl_areq *r = calloc(1, sizeof *r);
  int len = r ? dl_resp_format(&r->cmd, argc, argv, argvlen) : -1;
  if (len < 0) {
    free(r);
    *err = dl_seterr(c->cfg->err_owner, DLOCK_ENOMEM, "out of memory");
    return NULL;
  }
  r->len = (size_t)len;
  r->c = c;
  r->fn = fn;
  r->ud = ud;
  r->script = -1;
  return r;
}

dl_areq *dl_aconn_send(dl_aconn *c, int argc, const char **argv,
                       const size_t *argvlen, int64_t deadline,
                       dl_reply_fn fn, void *ud, int *err) {
  dl_areq *r = req_new(c, argc, argv, argvlen, fn, ud, err);
  if (r == NULL) return NULL;
  *err = enqueue(c, r, deadline);
  return *err ? NULL : r;
}

dl_areq *dl_aconn_eval(dl_aconn *c, int script, int nkeys, const char **keys,
                       int nargs, const char **args, int64_t deadline,
                       dl_reply_fn fn, void *ud, int *err) {
  bool ping = (script & DL_EVAL_WAKE_FIRST) != 0;
  script &= ~DL_EVAL_WAKE_FIRST;
  dl_evargv v;
  int argc = dl_evargv_build(script, false, nkeys, keys, nargs, args, &v);
  if (argc < 0) {
    *err = dl_seterr(c->cfg->err_owner, DLOCK_ENOMEM, "out of memory");
    return NULL;
  }
  dl_areq *r = req_new(c, argc, v.argv, v.lens, fn, ud, err);
  dl_evargv_free(&v);
  if (r == NULL) return NULL;
  r->ping = ping;
  r->script = script;
  r->sha = true;
  *err = enqueue(c, r, deadline);
  return *err ? NULL : r;
}

/* cmd (an EVALSHA as dl_resp_format made it) as an EVAL of body: the
 * same array with its first two strings (EVALSHA, the hash) replaced,
 * into *out (malloc'd). Returns its length, or -1 (out of memory). */
static int eval_of(const char *cmd, size_t len, const char *body, char **out) {
  const char *p = strchr(cmd, '\n') + 1; /* after "*<argc>\r\n" */
  size_t head = (size_t)(p - cmd);
  for (int i = 0; i < 2; i++) { /* "$<n>\r\n<n bytes>\r\n" */
    size_t n = (size_t)strtoull(p + 1, NULL, 10);
    p = strchr(p, '\n') + 1 + n + 2;
  }
  size_t rest = len - (size_t)(p - cmd), blen = strlen(body);
  char num[24];
  int nl = snprintf(num, sizeof num, "%zu", blen);
  size_t total = head + 10 + 1 + (size_t)nl + 2 + blen + 2 + rest;
  char *e = total > INT_MAX ? NULL : malloc(total + 1);
  if (e == NULL) return -1;
  char *q = e;
  memcpy(q, cmd, head);
  q += head;
  memcpy(q, "$4\r\nEVAL\r\n$", 11);
  q += 11;
  memcpy(q, num, (size_t)nl);
  q += nl;
  memcpy(q, "\r\n", 2);
  memcpy(q + 2, body, blen);
  q += 2 + blen;
  memcpy(q, "\r\n", 2);
  memcpy(q + 2, p, rest);
  q[2 + rest] = '\0';
  *out = e;
  return (int)total;
}

/* The script's body once, for a request that got NOSCRIPT: r goes out
 * again as EVAL, the same request (its handle and deadline stand). */
void dl_aq_resend_eval(dl_aconn *c, dl_areq *r) {
  char *cmd = NULL;
  int len = eval_of(r->cmd, r->len, dl_script_of(r->script)->body, &cmd);
  r->sha = false; /* a second NOSCRIPT is an error like any other */
  if (len < 0) {
    set_msg(c, DLOCK_ENOMEM, "out of memory");
    dl_aq_finish(c, r, DLOCK_ENOMEM, NULL);
    return;
  }
  free(r->cmd);
  r->cmd = cmd;
  r->len = (size_t)len;
  r->ping = false;
  dl_aq_push(&c->outq, r, Q_OUT);
}

void dl_areq_cancel(dl_areq *r) {
  if (r == NULL) return;
  void *ud;
  detach(r->c, r, &ud);
}
