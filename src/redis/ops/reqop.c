/* reqop.c: the operations that only send requests and read their answers,
 * one after the other, without a wait between them (the lock's queries,
 * its force release, inspect, the scan, ping, the synchronizers' updates):
 * one machine for both drivers, so that each operation's request is built
 * and its reply read by the same code, whether the blocking driver or the
 * event loop runs it. */
#include "ops.h"

#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <string.h>

void *dl_redis_state_new(dl_redis *R, void *stack, size_t size, bool async,
                         dl_async **op, int *err) {
  if (op) *op = NULL;
  *err = dl_redis_driver_check(R, async);
  void *x = stack;
  if (*err == 0 && async && (x = malloc(size)) == NULL)
    *err = dl_seterr(R->env.err_owner, DLOCK_ENOMEM, "out of memory");
  if (*err) return NULL;
  memset(x, 0, size);
  return x;
}

/* Reads answers and sends the next request until one is in flight
 * (DL_PENDING) or the operation has its result. */
static int reqop_go(dl_reqop *x) {
  for (;;) {
    int rc = x->result(x);
    if (rc != DL_REQOP_MORE) return rc;
    if (x->send(x) == DL_PENDING) return DL_PENDING;
  }
}

redisReply *dl_reqop_reply(dl_reqop *x) {
  redisReply *rep = x->p.reply;
  x->p.reply = NULL;
  if (x->p.rc == 0 && rep == NULL)
    x->p.rc = dl_seterr(x->R->env.err_owner, DLOCK_EPROTO, "no reply");
  if (x->p.rc == 0) return rep;
  if (rep) freeReplyObject(rep);
  return NULL;
}

static int reqop_step(dl_shell *sh) {
  return reqop_go((dl_reqop *)sh);
}

void *dl_reqop_new(dl_redis *R, void *stack, size_t size, bool async,
                   dl_async **op, int *err, int (*send)(dl_reqop *),
                   int (*result)(dl_reqop *)) {
  dl_reqop *x = dl_redis_state_new(R, stack, size, async, op, err);
  if (x) {
    x->R = R;
    x->send = send;
    x->result = result;
  }
  return x;
}

int dl_reqop_run(dl_reqop *x, dl_done_fn done, void *ud, dl_async **op) {
  if (done == NULL) { /* a blocking link answers within the send */
    x->send(x);
    return reqop_go(x);
  }
  dl_shell_init(&x->sh, x->R, done, ud, reqop_step, &x->p);
  int rc = x->send(x);
  if (rc != DL_PENDING) rc = reqop_go(x);
  return dl_shell_start(&x->sh, rc, op);
}

/* ---- ping ---- */
typedef struct ping_req {
  dl_reqop r;
} ping_req;

static int ping_send(dl_reqop *x) {
  const char *argv[] = {"PING"};
  return dl_redis_step_command(x->R, &x->p, 1, argv);
}

static int ping_result(dl_reqop *x) {
  redisReply *rep = dl_reqop_reply(x);
  if (rep == NULL) return x->p.rc;
  int rc = rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "PONG") == 0
               ? 0
               : dl_seterr(x->R->env.err_owner, DLOCK_EPROTO,
                           "PING answered something else");
  freeReplyObject(rep);
  return rc;
}

static int ping_run(dl_backend *b, dl_done_fn done, void *ud, dl_async **op) {
  dl_redis *R = (dl_redis *)b;
  int err;
  ping_req stack, *x = dl_reqop_new(R, &stack, sizeof stack, done != NULL, op,
                                    &err, ping_send, ping_result);
  if (x == NULL) return err;
  return dl_reqop_run(&x->r, done, ud, op);
}

int dl_redis_ping(dl_backend *b) {
  return ping_run(b, NULL, NULL, NULL);
}

int dl_redis_ping_async(dl_backend *b, dl_done_fn done, void *ud,
                        dl_async **op) {
  return ping_run(b, done, ud, op);
}
