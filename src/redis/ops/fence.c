/* fence.c: fenced resources on Redis (dl_backend_ops.fence): a hash at the
 * resource's key, {fence, value}, written by fence_set.lua only if the
 * token is not below the fence (and, for dlock_fence_set_held, only while
 * the lock's key still names the owner), read and deleted by fence_op.lua
 * (docs/WIRE.md). One key: on a cluster one slot, as it must be for a
 * script; a held write's lock must share it (a hash tag). One machine
 * (reqop.c) for both drivers. */
#include "ops.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fence_op {
  dl_reqop r;
  dl_fence_req *f;
  bool acking; /* a write done, its replica acknowledgement asked */
} fence_op;

static int fence_send(dl_reqop *x) {
  dl_fence_req *f = ((fence_op *)x)->f;
  if (((fence_op *)x)->acking) {
    const char *keys[] = {f->key};
    return dl_redis_replicate_start(x->R, keys, 1, &x->p);
  }
  if (f->op != DL_FENCE_SET) {
    const char *keys[] = {f->key};
    const char *args[] = {f->op == DL_FENCE_GET ? "get" : "del"};
    return dl_redis_step_eval(x->R, &x->p, 0, DL_SCRIPT_FENCE_OP, 1, keys, 1,
                              args);
  }
  /* Script arguments are C strings: the value goes as hex (as a delayed
   * offer's), the script turns it back into bytes. */
  static const char digits[] = "0123456789abcdef";
  char *hex = malloc(2 * f->len + 1), token[DL_INT_BUF];
  if (hex == NULL) {
    x->p.rc = dl_seterr(x->R->env.err_owner, DLOCK_ENOMEM, "out of memory");
    return 0;
  }
  const unsigned char *v = f->value;
  for (size_t i = 0; i < f->len; i++) {
    hex[2 * i] = digits[v[i] >> 4];
    hex[2 * i + 1] = digits[v[i] & 15];
  }
  hex[2 * f->len] = '\0';
  snprintf(token, sizeof token, "%llu", (unsigned long long)f->token);
  const char *keys[] = {f->key, f->hold ? f->hold->key : NULL};
  const char *args[] = {token, hex, f->hold ? f->hold->owner : ""};
  /* The request is formatted (copied) within the start. */
  int rc = dl_redis_step_eval(x->R, &x->p, 0, DL_SCRIPT_FENCE_SET,
                              f->hold ? 2 : 1, keys, 3, args);
  free(hex);
  return rc;
}

/* A decimal fence of the reply, or false. */
static bool fence_of(const redisReply *r, uint64_t *out) {
  if (r->type != REDIS_REPLY_STRING || r->len == 0 || r->len > 20) return false;
  char buf[24], *end;
  memcpy(buf, r->str, r->len);
  buf[r->len] = '\0';
  unsigned long long v = strtoull(buf, &end, 10);
  *out = v;
  return *end == '\0' && buf[0] != '-';
}

static int fence_result(dl_reqop *x) {
  dl_fence_req *f = ((fence_op *)x)->f;
  if (((fence_op *)x)->acking) {
    int rc = dl_redis_replicate_result(x->R, &x->p, "fence write",
                                       " (written: a failover may lose it)");
    return rc == 0 ? 1 : rc;
  }
  redisReply *r = dl_reqop_reply(x);
  if (r == NULL) return x->p.rc; /* DLOCK_EWRONGTYPE: not a resource */
  int rc = DLOCK_EPROTO;
  redisReply **e = r->element;
  size_t n = r->type == REDIS_REPLY_ARRAY ? r->elements : 0;
  if (n == 0 || e[0]->type != REDIS_REPLY_INTEGER) {
    /* not the script's answer */
  } else if (f->op == DL_FENCE_SET) {
    if (n == 2 && e[0]->integer >= -1 && e[0]->integer <= 1 &&
        fence_of(e[1], &f->fence))
      rc = e[0]->integer >= 0
               ? (int)e[0]->integer
               : dl_seterr(x->R->env.err_owner, DLOCK_ELOST,
                           "'%s' is not held by %s any more: '%s' not "
                           "written",
                           f->hold->name, f->hold->owner, f->name);
  } else if (e[0]->integer == 0 && n == 1) {
    rc = 0;
  } else if (f->op == DL_FENCE_DEL) {
    if (e[0]->integer == 1 && n == 1) rc = 1;
  } else if (e[0]->integer == 1 && n == 3 && fence_of(e[1], &f->fence) &&
             e[2]->type == REDIS_REPLY_STRING) {
    if ((f->got = malloc(e[2]->len + 1)) == NULL) {
      rc = DLOCK_ENOMEM;
    } else {
      memcpy(f->got, e[2]->str, e[2]->len);
      ((char *)f->got)[e[2]->len] = '\0';
      f->got_len = e[2]->len;
      rc = 1;
    }
  }
  freeReplyObject(r);
  if (f->op == DL_FENCE_SET && rc == 1 && x->R->min_replicas > 0) {
    /* min_replicas_acked: the write is WAITed for, as a lock's acquire. */
    ((fence_op *)x)->acking = true;
    return DL_REQOP_MORE;
  }
  if (rc == DLOCK_EPROTO || rc == DLOCK_ENOMEM)
    return dl_seterr(x->R->env.err_owner, rc,
                     rc == DLOCK_ENOMEM ? "out of memory"
                                        : "unexpected reply to a fenced "
                                          "resource's script");
  return rc;
}

static int fence_run(dl_backend *b, dl_fence_req *f, dl_done_fn done, void *ud,
                     dl_async **op) {
  dl_redis *R = (dl_redis *)b;
  if (f->hold && R->link->ops->by_slot &&
      dl_key_slot(f->key, strlen(f->key)) !=
          dl_key_slot(f->hold->key, strlen(f->hold->key)))
    return dl_seterr(R->env.err_owner, DLOCK_EINVAL,
                     "'%s' and the lock '%s' are in different cluster "
                     "slots: give them one hash tag ({tag})",
                     f->name, f->hold->name);
  int err;
  fence_op stack, *x = dl_reqop_new(R, &stack, sizeof stack, done != NULL, op,
                                    &err, fence_send, fence_result);
  if (x == NULL) return err;
  x->f = f;
  return dl_reqop_run(&x->r, done, ud, op);
}

int dl_redis_fence(dl_backend *b, dl_fence_req *f) {
  return fence_run(b, f, NULL, NULL, NULL);
}

int dl_redis_fence_async(dl_backend *b, dl_fence_req *f, dl_done_fn done,
                         void *ud, dl_async **op) {
  return fence_run(b, f, done, ud, op);
}
