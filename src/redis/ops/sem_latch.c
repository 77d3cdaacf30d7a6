/* sem_latch.c: semaphores and latches on Redis, wire-compatible with Redisson:
 * - RSemaphore: a string at the name holding the permits available;
 *   "redisson_sc:{name}" carries the permits now available after each
 *   change, which wakes that many waiters.
 * - RPermitExpirableSemaphore: the permits available at the name, the
 *   permits taken as 16-byte ids in the zset "{name}:timeout" scored with
 *   the end of their lease (by the server's clock, not each client's:
 *   docs/WIRE.md), and the same channel.
 * - RCountDownLatch: a string at the name holding the count (gone at
 *   zero); "redisson_countdownlatch__channel:{name}" gets "0" at zero
 *   (wakes every waiter) and "1" on a new count. */
#include "ops.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The handle's hint word for a semaphore's release: its last acquire had
 * to wait, or its last release was heard by some client. Others then
 * likely wait, and the release goes out behind a PING (DL_EVAL_WAKE_FIRST)
 * so that its message reaches them before its reply reaches the releaser,
 * which would otherwise often take the permits back first. */
#define HINT_WAITED 1u
#define HINT_HEARD 2u

static int wake_flags(const dl_sync_ref *s) {
  return atomic_load_explicit(s->hint, memory_order_relaxed) ? DL_EVAL_WAKE_FIRST
                                                            : 0;
}

static void hint_set(const dl_sync_ref *s, unsigned bit, bool on) {
  if (on) atomic_fetch_or_explicit(s->hint, bit, memory_order_relaxed);
  else atomic_fetch_and_explicit(s->hint, ~bit, memory_order_relaxed);
}

/* The names beside s's key, each DL_DERIVED_MAX bytes. */
static const char *sem_channel(char *out, const dl_sync_ref *s) {
  dl_derived_into(out, DL_DERIVED_MAX, "redisson_sc", s->key);
  return out;
}

static const char *latch_channel(char *out, const dl_sync_ref *s) {
  dl_derived_into(out, DL_DERIVED_MAX, "redisson_countdownlatch__channel",
                  s->key);
  return out;
}

/* A GET's integer string (nil: 0) in the int32 range, from its reply
 * (freed here). */
static int int_string(dl_redis *R, redisReply *r, long long *v) {
  int rc = 0;
  *v = 0;
  if (r->type == REDIS_REPLY_STRING) {
    char *end;
    errno = 0;
    *v = strtoll(r->str, &end, 10);
    if (*end != '\0' || end == r->str) rc = DLOCK_EWRONGTYPE; /* not ours */
    else if (errno == ERANGE) rc = DLOCK_EPROTO;
  } else if (r->type != REDIS_REPLY_NIL) {
    rc = DLOCK_EPROTO;
  }
  freeReplyObject(r);
  if (rc == DLOCK_EWRONGTYPE)
    return dl_seterr(R->env.err_owner, rc,
                     "not a dlock semaphore or latch: a string that is not a "
                     "number");
  if (rc) return dl_seterr(R->env.err_owner, rc, "unexpected reply to GET");
  return 0;
}

/* ---- the counting semaphore ---- */
typedef struct sem_try {
  const dl_sync_ref *s;
  char num[DL_INT_BUF];
} sem_try;

static int sem_send(dl_waiter *w) {
  sem_try *t = w->ctx;
  const char *keys[] = {t->s->key};
  const char *args[] = {t->num};
  return dl_redis_step_eval(w->R, &w->p, 0, DL_SCRIPT_SEMAPHORE_ACQUIRE, 1,
                            keys, 1, args);
}

static int sem_result(dl_waiter *w) {
  w->recheck_ms = -1; /* permits only come back with a message */
  long long v = 0;
  if (w->p.rc != 0) return w->p.rc;
  int rc = dl_redis_int_reply(w->R, w->p.reply, 0, 1, &v);
  w->p.reply = NULL;
  return rc ? rc : (int)v;
}

static const dl_wait_kind sem_kind = {sem_send, sem_result};


/* ---- the permit-expirable semaphore ---- */
/* permits.lua's keys and arguments for `op` and up to two arguments
 * (timeouts and ch: DL_DERIVED_MAX bytes each, for the names). */
static void permits_argv(const dl_sync_ref *s, const char **keys,
                         char *timeouts, char *ch, const char **args,
                         const char *op, const char *a1, const char *a2) {
  dl_derived_suffix_into(timeouts, DL_DERIVED_MAX, s->key, "timeout");
  keys[0] = s->key;
  keys[1] = timeouts;
  keys[2] = sem_channel(ch, s);
  args[0] = op;
  args[1] = a1 ? a1 : "";
  args[2] = a2 ? a2 : "";
}

typedef struct permit_try {
  const dl_sync_ref *s;
  const char *id;
  char lease[DL_INT_BUF];
  int64_t sent;
} permit_try;

static int permit_send(dl_waiter *w) {
  permit_try *t = w->ctx;
  t->sent = dl_now_ms();
  char timeouts[DL_DERIVED_MAX], ch[DL_DERIVED_MAX];
  const char *keys[3], *args[3];
  permits_argv(t->s, keys, timeouts, ch, args, "acquire", t->lease, t->id);
  return dl_redis_step_eval(w->R, &w->p, 0, DL_SCRIPT_PERMITS, 3, keys, 3,
                            args);
}

static int permit_result(dl_waiter *w) {
  if (w->p.rc != 0) return w->p.rc;
  redisReply *r = w->p.reply;
  w->p.reply = NULL;
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_INTEGER ||
      r->element[1]->type != REDIS_REPLY_INTEGER ||
      (r->element[0]->integer != 0 && r->element[0]->integer != 1)) {
    freeReplyObject(r);
    return dl_seterr(w->R->env.err_owner, DLOCK_EPROTO,
                     "unexpected reply to acquire");
  }
  int rc = (int)r->element[0]->integer;
  /* Not available: try again when the next lease ends (its permit then
   * comes back without a message), or on a release. */
  long long next = r->element[1]->integer;
  w->recheck_ms = next < 0 ? -1 : next + 1;
  freeReplyObject(r);
  return rc;
}

static const dl_wait_kind permit_kind = {permit_send, permit_result};


/* ---- the latch ---- */
static int latch_send(dl_waiter *w) {
  const dl_sync_ref *s = w->ctx;
  const char *argv[] = {"GET", s->key};
  return dl_redis_step_command(w->R, &w->p, 2, argv);
}

static int latch_result(dl_waiter *w) {
  w->recheck_ms = -1;
  if (w->p.rc != 0) return w->p.rc;
  long long n = 0;
  int rc = int_string(w->R, w->p.reply, &n);
  w->p.reply = NULL;
  return rc ? rc : n <= 0;
}

static const dl_wait_kind latch_kind = {latch_send, latch_result};


/* ---- the waits, on either driver ---- */
/* A wait's state: the waiter, the kind's try, what the caller gets after. */
typedef struct wait_op {
  dl_shell sh; /* the event-loop driver's */
  dl_waiter w;
  const dl_sync_ref *s; /* the hint's */
  union {
    sem_try sem;
    permit_try permit;
  } t;
  int64_t lease_ms, *valid_until; /* a permit's */
  char ch[DL_DERIVED_MAX];
} wait_op;

static int wait_op_step(dl_shell *sh) {
  return dl_redis_wait_step(&((wait_op *)sh)->w);
}

/* After the wait, for either driver: the handle's hint, a permit's
 * validity. */
static void wait_op_finish(dl_shell *sh, int *rc) {
  wait_op *x = (wait_op *)sh;
  if (x->w.kind != &latch_kind && *rc >= 0)
    hint_set(x->s, HINT_WAITED, x->w.tries > 1);
  if (x->w.kind == &permit_kind && *rc == 1)
    *x->valid_until = dl_validity(x->t.permit.sent, x->lease_ms);
}

/* Runs the wait x (x->ch filled in) of `kind`: to its end on the calling
 * thread when done is NULL (the blocking driver; returns the result), else
 * on the loop (returns 0 and *op, or a negative code). */
static int wait_op_run(dl_redis *R, wait_op *x, const dl_wait_kind *kind,
                       void *ctx, int mode, bool wait, int64_t deadline,
                       dl_done_fn done, void *ud, dl_async **op) {
  dl_waiter *w = &x->w;
  w->R = R;
  w->kind = kind;
  w->ctx = ctx;
  w->channel = x->ch;
  w->mode = mode;
  w->wait = wait;
  w->deadline = deadline;
  if (done == NULL) {
    int rc = dl_redis_wait_start(w);
    wait_op_finish(&x->sh, &rc);
    return rc;
  }
  dl_shell_init(&x->sh, R, done, ud, wait_op_step, &w->p);
  x->sh.finish = wait_op_finish;
  x->sh.deadline = &w->deadline;
  return dl_shell_start(&x->sh, dl_redis_wait_start(w), op);
}

static wait_op *wait_op_new(dl_redis *R, const dl_sync_ref *s, wait_op *x,
                            bool async, dl_async **op, int *err) {
  x = dl_redis_state_new(R, x, sizeof *x, async, op, err);
  if (x) x->s = s;
  return x;
}

static int sem_run(dl_backend *b, const dl_sync_ref *s, int permits,
                   bool wait, int64_t deadline, dl_done_fn done, void *ud,
                   dl_async **op) {
  dl_redis *R = (dl_redis *)b;
  int err;
  wait_op stack, *x = wait_op_new(R, s, &stack, done != NULL, op, &err);
  if (x == NULL) return err;
  x->t.sem.s = s;
  dl_fmt_ll(x->t.sem.num, permits);
  sem_channel(x->ch, s);
  return wait_op_run(R, x, &sem_kind, &x->t.sem, DL_WAKE_COUNT, wait,
                     deadline, done, ud, op);
}

static int permit_run(dl_backend *b, const dl_sync_ref *s, const char *id,
                      int64_t lease_ms, bool wait, int64_t deadline,
                      int64_t *valid_until, dl_done_fn done, void *ud,
                      dl_async **op) {
  dl_redis *R = (dl_redis *)b;
  int err;
  wait_op stack, *x = wait_op_new(R, s, &stack, done != NULL, op, &err);
  if (x == NULL) return err;
  x->t.permit.s = s;
  x->t.permit.id = id;
  dl_fmt_ll(x->t.permit.lease, lease_ms);
  x->lease_ms = lease_ms;
  x->valid_until = valid_until;
  sem_channel(x->ch, s);
  return wait_op_run(R, x, &permit_kind, &x->t.permit, DL_WAKE_COUNT, wait,
                     deadline, done, ud, op);
}

static int latch_run(dl_backend *b, const dl_sync_ref *s, bool wait,
                     int64_t deadline, dl_done_fn done, void *ud,
                     dl_async **op) {
  dl_redis *R = (dl_redis *)b;
  int err;
  wait_op stack, *x = wait_op_new(R, s, &stack, done != NULL, op, &err);
  if (x == NULL) return err;
  latch_channel(x->ch, s);
  return wait_op_run(R, x, &latch_kind, (void *)s, DL_WAKE_ALL, wait,
                     deadline, done, ud, op);
}

int dl_redis_sem_acquire(dl_backend *b, const dl_sync_ref *s, int permits,
                         bool wait, int64_t deadline) {
  return sem_run(b, s, permits, wait, deadline, NULL, NULL, NULL);
}

int dl_redis_sem_acquire_async(dl_backend *b, const dl_sync_ref *s,
                               int permits, bool wait, int64_t deadline,
                               dl_done_fn done, void *ud, dl_async **op) {
  return sem_run(b, s, permits, wait, deadline, done, ud, op);
}

int dl_redis_permit_acquire(dl_backend *b, const dl_sync_ref *s,
                            const char *id, int64_t lease_ms, bool wait,
                            int64_t deadline, int64_t *valid_until) {
  return permit_run(b, s, id, lease_ms, wait, deadline, valid_until, NULL,
                    NULL, NULL);
}

int dl_redis_permit_acquire_async(dl_backend *b, const dl_sync_ref *s,
                                  const char *id, int64_t lease_ms, bool wait,
                                  int64_t deadline, int64_t *valid_until,
                                  dl_done_fn done, void *ud, dl_async **op) {
  return permit_run(b, s, id, lease_ms, wait, deadline, valid_until, done, ud,
                    op);
}

int dl_redis_latch_await(dl_backend *b, const dl_sync_ref *s, bool wait,
                         int64_t deadline) {
  return latch_run(b, s, wait, deadline, NULL, NULL, NULL);
}

int dl_redis_latch_await_async(dl_backend *b, const dl_sync_ref *s, bool wait,
                               int64_t deadline, dl_done_fn done, void *ud,
                               dl_async **op) {
  return latch_run(b, s, wait, deadline, done, ud, op);
}

/* ---- everything else: one request and its answer, on either driver ---- */
typedef struct upd_op {
  dl_reqop r; /* first */
  const dl_sync_ref *s;
  dl_sync_op op;
  const char *id; /* a permit's (borrowed) */
  long long *v;
  char num[DL_INT_BUF], ch[DL_DERIVED_MAX], timeouts[DL_DERIVED_MAX];
} upd_op;

/* Sends x's request: dl_redis_step_* on r->p; returns what it returns. */
static int upd_send(dl_reqop *r) {
  upd_op *x = (upd_op *)r;
  dl_redis *R = r->R;
  const dl_sync_ref *s = x->s;
  const char *keys[3] = {s->key, x->ch, NULL};
  const char *args[3] = {NULL, x->num, NULL};
  switch (x->op) {
  case DL_SEM_SET:
  case DL_SEM_ADD:
  case DL_SEM_DRAIN:
  case DL_SEM_RELEASE: {
    static const char *const names[] = {"set", "add", "drain", "release"};
    args[0] = names[x->op - DL_SEM_SET];
    sem_channel(x->ch, s);
    int flags = x->op == DL_SEM_RELEASE ? wake_flags(s) : 0;
    return dl_redis_step_eval(R, &r->p, 0,
                              DL_SCRIPT_SEMAPHORE_UPDATE | flags, 2, keys, 2,
                              args);
  }
  case DL_SEM_AVAILABLE:
  case DL_LATCH_COUNT: {
    const char *argv[] = {"GET", s->key};
    return dl_redis_step_command(R, &r->p, 2, argv);
  }
  case DL_PERMITS_SET:
  case DL_PERMITS_ADD:
  case DL_PERMITS_AVAILABLE:
  case DL_PERMITS_RELEASE:
  case DL_PERMITS_FORCE: {
    static const char *const names[] = {"set", "add", "available", "release",
                                        "force"};
    const char *a1 = x->num, *a2 = NULL;
    if (x->op == DL_PERMITS_AVAILABLE) a1 = NULL;
    if (x->op == DL_PERMITS_RELEASE || x->op == DL_PERMITS_FORCE) a1 = x->id;
    if (x->op == DL_PERMITS_FORCE) a2 = R->revoke_channel;
    permits_argv(s, keys, x->timeouts, x->ch, args,
                 names[x->op - DL_PERMITS_SET], a1, a2);
    int flags = x->op == DL_PERMITS_RELEASE ? wake_flags(s) : 0;
    return dl_redis_step_eval(R, &r->p, 0, DL_SCRIPT_PERMITS | flags, 3, keys,
                              3, args);
  }
  case DL_LATCH_SET:
  case DL_LATCH_DOWN:
    args[0] = x->op == DL_LATCH_SET ? "set" : "down";
    latch_channel(x->ch, s);
    return dl_redis_step_eval(R, &r->p, 0, DL_SCRIPT_LATCH_UPDATE, 2, keys, 2,
                              args);
  }
  r->p.rc = dl_seterr(R->env.err_owner, DLOCK_EINVAL, "unknown operation");
  return 0;
}

/* The script's refusal "ERANGE <count>" (rep, freed) as DLOCK_ERANGE and
 * its message: nothing was changed. */
static int out_of_range(dl_redis *R, const upd_op *x, redisReply *rep) {
  char count[32];
  snprintf(count, sizeof count, "%s", rep->str[6] ? rep->str + 7 : "?");
  freeReplyObject(rep);
  if (x->op == DL_SEM_DRAIN)
    return dl_seterr(R->env.err_owner, DLOCK_ERANGE,
                     "'%s' holds %s permits, outside an int: not drained "
                     "(nothing changed)",
                     x->s->name, count);
  return dl_seterr(R->env.err_owner, DLOCK_ERANGE,
                   "'%s' holds %s permits: adding %s would take the count "
                   "outside an int (nothing changed)",
                   x->s->name, count, x->num);
}

/* Reads the answer in r->p (freeing it): 0 and the op's result in *x->v,
 * or a negative code. */
static int upd_result(dl_reqop *r) {
  upd_op *x = (upd_op *)r;
  dl_redis *R = r->R;
  redisReply *rep = dl_reqop_reply(r);
  if (rep == NULL) return r->p.rc;
  if (rep->type == REDIS_REPLY_STATUS && strncmp(rep->str, "ERANGE", 6) == 0)
    return out_of_range(R, x, rep);
  long long lo = INT32_MIN, hi = INT32_MAX, *v = x->v;
  switch (x->op) {
  case DL_SEM_DRAIN:
  case DL_PERMITS_AVAILABLE: lo = LLONG_MIN, hi = LLONG_MAX; break;
  case DL_SEM_AVAILABLE:
    return int_string(R, rep, v);
  case DL_LATCH_COUNT: {
    int rc = int_string(R, rep, v);
    if (rc == 0 && *v < 0) *v = 0;
    return rc;
  }
  case DL_PERMITS_SET: lo = 0, hi = 1; break;
  case DL_PERMITS_ADD: lo = 0, hi = 0; break;
  case DL_PERMITS_RELEASE: lo = -1, hi = 2; break;
  case DL_PERMITS_FORCE: lo = 0, hi = 1; break;
  case DL_LATCH_SET:
  case DL_LATCH_DOWN: lo = -1, hi = INT64_MAX; break;
  default: break;
  }
  int rc = dl_redis_int_reply(R, rep, lo, hi, v);
  if (rc == 0 && x->op == DL_SEM_RELEASE) hint_set(x->s, HINT_HEARD, *v > 0);
  if (rc == 0 && x->op == DL_PERMITS_RELEASE && *v > 0)
    hint_set(x->s, HINT_HEARD, *v == 2);
  return rc;
}

/* Runs the update: to its end on the calling thread when done is NULL (the
 * blocking driver; returns 0 or a code), else on the loop (0 and *op, or
 * a negative code). */
static int upd_run(dl_backend *b, const dl_sync_ref *s, dl_sync_op op,
                   long long n, const char *id, long long *v, dl_done_fn done,
                   void *ud, dl_async **aop) {
  dl_redis *R = (dl_redis *)b;
  int err;
  upd_op stack, *x = dl_reqop_new(R, &stack, sizeof stack, done != NULL,
                               aop, &err, upd_send, upd_result);
  if (x == NULL) return err;
  x->s = s;
  x->op = op;
  x->id = id;
  x->v = v;
  *v = 0;
  dl_fmt_ll(x->num, n);
  return dl_reqop_run(&x->r, done, ud, aop);
}

int dl_redis_sync_update(dl_backend *b, const dl_sync_ref *s, dl_sync_op op,
                         long long n, const char *id, long long *v) {
  return upd_run(b, s, op, n, id, v, NULL, NULL, NULL);
}

int dl_redis_sync_update_async(dl_backend *b, const dl_sync_ref *s,
                               dl_sync_op op, long long n, const char *id,
                               long long *v, dl_done_fn done, void *ud,
                               dl_async **aop) {
  return upd_run(b, s, op, n, id, v, done, ud, aop);
}
