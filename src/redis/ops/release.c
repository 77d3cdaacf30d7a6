/* release.c: the lock family on Redis, wire-compatible with Redisson: RLock
 * (a hash at the lock's name, field owner id -> hold count, with a PEXPIRE
 * lease; the unlock message "0" on redisson_lock__channel:{name}; fencing
 * tokens from redisson_lock_token:{name}, RFencedLock's counter), RFairLock
 * (its queue and timeouts) and RReadWriteLock (the "mode" field, the
 * readers' lease keys). Here: the release (sent behind a PING when others
 * wait, retried through a latch), the force release and the queries; the
 * acquire and its wait are in acquire.h's files. */
#include "rlock.h"

#include <hiredis/hiredis.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- release, a state machine (see dl_pend) ---- */

/* A release that fails as a failover makes requests fail is sent again
 * for up to one command timeout and this long (then the hold is left to
 * its lease): a Sentinel or Cluster failover takes a few seconds, and a
 * name left locked for a whole lease after one master's death blocks
 * everyone. */
#define RELEASE_RIDE_MS 6000
/* A release's result is kept on the server this many command timeouts and
 * RELEASE_RIDE_MS, so that a retry of it (below) finds it. */
#define LATCH_TIMEOUTS 3

bool dl_rlock_transient(const dl_redis *R, int rc) {
  if (!R->ride) return rc == DLOCK_ECONNLOST; /* a Redlock server's */
  if (rc == DLOCK_ECONNECT || rc == DLOCK_ECONNLOST || rc == DLOCK_EREADONLY)
    return true;
  if (rc != DLOCK_ESERVER || R->env.err_owner == NULL) return false;
  const char *m = dlock_client_errmsg(R->env.err_owner);
  return strstr(m, "CLUSTERDOWN") || strstr(m, "MASTERDOWN") ||
         strstr(m, "LOADING") || strstr(m, "TRYAGAIN");
}


/* Sends the release (again, with o->retry). Returns 0 or DL_PENDING. */
static int rel_send(dl_rlock_rel *o) {
  dl_redis *R = o->R;
  const dl_lock_ref *l = o->l;
  char lease[DL_INT_BUF], cnt[DL_INT_BUF], keep[DL_INT_BUF];
  /* The lease goes out only above a count of 1, or on a retry (but
   * always for a read-write lock). */
  if (o->count > 1 || o->retry || is_rw(l)) dl_fmt_ll(lease, o->lease_ms);
  dl_fmt_ll(cnt, o->count);
  dl_fmt_ll(keep, (long long)LATCH_TIMEOUTS * R->env.command_timeout_ms +
                      RELEASE_RIDE_MS);
  char ch[DL_DERIVED_MAX], qk[DL_DERIVED_MAX], latch[DL_DERIVED_MAX + 48];
  /* "<derived latch name>:<request id>" (no snprintf: the hot path). */
  size_t n = strlen(derived(latch, "redisson_unlock_latch", l));
  latch[n++] = ':';
  memcpy(latch + n, o->id, strlen(o->id) + 1);
  const char *retry = o->retry ? "1" : "0"; /* only a retry finds a latch */
  const char *keys[7], *args[5];
  int script, nkeys, nargs;
  if (is_rw(l)) {
    script = DL_SCRIPT_RW_RELEASE;
    keys[0] = l->key;
    keys[1] = RW_CHANNEL(l, ch);
    keys[2] = latch;
    nkeys = 3;
    args[0] = l->owner;
    args[1] = l->kind == DL_KIND_READ ? "read" : "write";
    args[2] = lease;
    args[3] = keep;
    args[4] = retry;
    nargs = 5;
  } else if (l->kind == DL_KIND_PLAIN) {
    /* Compare-and-delete, and the unlock message for dlock's waiters. */
    script = DL_SCRIPT_LOCK_RELEASE;
    keys[0] = l->key;
    keys[1] = CHANNEL(l, ch);
    keys[2] = latch;
    nkeys = 3;
    args[0] = l->owner;
    args[1] = cnt;
    args[2] = keep;
    args[3] = lease;
    args[4] = retry;
    nargs = o->retry ? 5 : o->count > 1 ? 4 : 3; /* see the script */
  } else {
    /* The fair lock wakes its first waiter; the plain lock hands itself to
     * the first of its hand-off queue, whose names (and its channel's) the
     * script makes from the lock's: each key sent costs the server. */
    bool fair = l->kind == DL_KIND_FAIR;
    script = DL_SCRIPT_LOCK_RELEASE;
    keys[0] = l->key;
    nkeys = 1;
    if (fair) {
      keys[1] = CHANNEL(l, ch);
      keys[2] = QUEUE_KEY(l, qk);
      nkeys = 3;
    }
    keys[nkeys++] = latch;
    args[0] = l->owner;
    args[1] = cnt;
    args[2] = keep;
    args[3] = lease;
    args[4] = retry;
    nargs = o->retry ? 5 : o->count > 1 ? 4 : 3; /* see the script */ /* a first send leaves the default out */
  }
  o->st = REL_SENT;
  return dl_redis_step_eval(R, &o->p, o->until, script | o->wake_first, nkeys,
                            keys, nargs, args);
}

/* Idempotent on retry, as Redisson's unlock: each release has a request id,
 * and the script keeps its result for LATCH_TIMEOUTS command timeouts (and
 * RELEASE_RIDE_MS) in "redisson_unlock_latch:{name}:<request id>" (the
 * lock's slot; the latch and the release reach a replica together, in the
 * script's effects). A release that failed as in a failover
 * (dl_rlock_transient: the reply may have been lost after the server ran
 * it) is sent again, with the same id, after growing pauses, for up to one
 * command timeout and RELEASE_RIDE_MS from the first send (or until `end`,
 * if sooner and not 0); a retry that finds the latch returns the first
 * result instead of "not the owner". A server of a Redlock (R->part) only
 * after a lost connection, for one command timeout, and not once the same
 * owner's acquire of the name went there (R->acquires_sent).
 * Request ids are "<nonce>:<seq>": unique across processes even with an
 * explicit client id. Returns 0 (go on with rel_step) or DL_PENDING. */
int dl_rlock_rel_start(dl_rlock_rel *o, dl_redis *R, const dl_lock_ref *l,
                     int64_t lease_ms, int count, int64_t end) {
  o->R = R;
  o->l = l;
  o->lease_ms = lease_ms;
  o->count = count;
  o->until = dl_now_ms() + R->env.command_timeout_ms +
             (R->ride ? RELEASE_RIDE_MS : 0);
  if (end != 0 && end < o->until) o->until = end;
  o->pause = 0;
  o->retry = false;
  o->sent = R->acquires_sent ? R->acquires_sent(R->acquires_ud, l) : 0;
  /* This handle's last acquire had to wait: others likely wait too, and the
   * message that wakes one of them goes out ahead of our reply. */
  o->wake_first = contended(l) ? DL_EVAL_WAKE_FIRST : 0;
  memcpy(o->id, R->release_nonce, 16);
  o->id[16] = ':';
  dl_fmt_ll(o->id + 17, (long long)atomic_fetch_add(&R->release_seq, 1));
  return rel_send(o);
}

/* Goes on after a step: DL_PENDING, or the release's result: 1 released, 0
 * still held, or a negative code. */
int dl_rlock_rel_step(dl_rlock_rel *o) {
  for (;;) {
    if (o->st == REL_PAUSED) {
      if (o->R->acquires_sent &&
          o->R->acquires_sent(o->R->acquires_ud, o->l) != o->sent)
        return dl_seterr(o->R->env.err_owner, o->lost,
                         "the connection was lost; the release is not sent "
                         "again: the same owner's acquire went after it");
      o->pause = o->pause ? (2 * o->pause > 200 ? 200 : 2 * o->pause) : 5;
      o->retry = true;
      if (rel_send(o) == DL_PENDING) return DL_PENDING;
      continue;
    }
    /* REL_SENT */
    int rc = o->p.rc;
    int64_t now = dl_now_ms(), left = o->until - now;
    /* A server of a Redlock is sent it again only when the connection
     * dropped (the reply may be lost), within one command timeout: the
     * composite's call must not wait out one server's outage, whose hold
     * its lease ends (it is no failover: nobody takes that server over;
     * dl_rlock_transient). */
    if (rc != 0 && dl_rlock_transient(o->R, rc) && left > 0 &&
        !atomic_load(o->R->env.closing)) {
      /* The connection reconnects at once after a failure, then backs off:
       * do not spin on its "next reconnect in" answer. */
      o->st = REL_PAUSED;
      o->lost = rc;
      if (dl_redis_step_pause(o->R, &o->p,
                              now + (o->pause < left ? o->pause : left)) ==
          DL_PENDING)
        return DL_PENDING;
      continue;
    }
    if (rc != 0) return rc;
    redisReply *r = o->p.reply;
    o->p.reply = NULL;
    if (r->type == REDIS_REPLY_NIL) rc = DLOCK_ENOTOWNER;
    else if (r->type == REDIS_REPLY_INTEGER) /* freed: 1 + subscribers told */
      rc = r->integer >= 1 ? 1 : 0;
    else
      rc = dl_seterr(o->R->env.err_owner, DLOCK_EPROTO,
                     "unexpected reply to the release");
    freeReplyObject(r);
    return rc;
  }
}

int dl_rlock_release_now(dl_redis *R, const dl_lock_ref *l, int64_t lease_ms,
                         int count) {
  dl_rlock_rel o;
  if (dl_rlock_rel_start(&o, R, l, lease_ms, count, 0) == DL_PENDING) return DLOCK_EINVAL;
  return dl_rlock_rel_step(&o);
}

int dl_redis_lock_release(dl_backend *b, const dl_lock_ref *l,
                          int64_t lease_ms, int count) {
  dl_redis *R = (dl_redis *)b;
  int rc = dl_redis_driver_check(R, false);
  if (rc != 0) return rc;
  rc = dl_rlock_release_now(R, l, lease_ms, count);
  /* The release reaches the replicas, as far as WAIT can tell; it is done
   * on the master either way, so a shortfall does not change the result. */
  if (rc >= 0) (void)dl_redis_replicate(R, &l->key, 1, "release", "");
  return rc;
}

/* ---- force release and queries: one request each (reqop.c) ---- */
typedef struct force_req {
  dl_reqop r;
  const dl_lock_ref *l;
  char ch[DL_DERIVED_MAX], qk[DL_DERIVED_MAX];
} force_req;

static int force_send(dl_reqop *x) {
  force_req *f = (force_req *)x;
  const dl_lock_ref *l = f->l;
  bool rw = is_rw(l);
  const char *keys[] = {l->key, rw ? RW_CHANNEL(l, f->ch) : CHANNEL(l, f->ch),
                        QUEUE_KEY(l, f->qk)};
  /* A write unlock's "1" wakes every waiter of a read-write lock. */
  const char *args[] = {rw ? "1" : UNLOCK_MESSAGE,
                        rw                         ? "rwlock"
                        : l->kind == DL_KIND_PLAIN ? "plain"
                                                   : "lock",
                        x->R->revoke_channel};
  return dl_redis_step_eval(x->R, &x->p, 0, DL_SCRIPT_LOCK_FORCE_RELEASE,
                            l->kind == DL_KIND_FAIR ? 3 : 2, keys, 3, args);
}

static int force_result(dl_reqop *x) {
  redisReply *r = dl_reqop_reply(x);
  if (r == NULL) return x->p.rc; /* DLOCK_EWRONGTYPE: not of this kind */
  /* 1 deleted, 0 nothing to delete; anything else is not our script's
   * answer (found by the reply fuzzer: a negative number passed through as
   * if it were an error code). */
  long long v = 0;
  int rc = dl_redis_int_reply(x->R, r, 0, 1, &v);
  if (rc != 0)
    return dl_seterr(x->R->env.err_owner, DLOCK_EPROTO,
                     "unexpected reply to the force release");
  return (int)v;
}

static int force_run(dl_backend *b, const dl_lock_ref *l, dl_done_fn done,
                     void *ud, dl_async **op) {
  dl_redis *R = (dl_redis *)b;
  int err;
  force_req stack, *x = dl_reqop_new(R, &stack, sizeof stack, done != NULL,
                               op, &err, force_send, force_result);
  if (x == NULL) return err;
  x->l = l;
  return dl_reqop_run(&x->r, done, ud, op);
}

int dl_redis_lock_force_release(dl_backend *b, const dl_lock_ref *l) {
  return force_run(b, l, NULL, NULL, NULL);
}

int dl_redis_lock_force_release_async(dl_backend *b, const dl_lock_ref *l,
                                      dl_done_fn done, void *ud,
                                      dl_async **op) {
  return force_run(b, l, done, ud, op);
}

/* Raising the fencing-token counter (lock_fence.lua). */
typedef struct fence_req {
  dl_reqop r;
  const dl_lock_ref *l;
  char tk[DL_DERIVED_MAX], token[DL_INT_BUF], lease[DL_INT_BUF];
} fence_req;

static int fence_send(dl_reqop *x) {
  fence_req *f = (fence_req *)x;
  const char *keys[] = {TOKEN_KEY(f->l, f->tk)};
  const char *args[] = {f->token, f->lease};
  return dl_redis_step_eval(x->R, &x->p, 0, DL_SCRIPT_LOCK_FENCE, 1, keys, 2,
                            args);
}

static int fence_result(dl_reqop *x) {
  redisReply *r = dl_reqop_reply(x);
  if (r == NULL) return x->p.rc;
  long long v = 0;
  return dl_redis_int_reply(x->R, r, 1, 1, &v) == 0 ? 1 : DLOCK_EPROTO;
}

int dl_redis_lock_fence_async(dl_backend *b, const dl_lock_ref *l,
                              uint64_t token, int64_t lease_ms,
                              dl_done_fn done, void *ud, dl_async **op) {
  dl_redis *R = (dl_redis *)b;
  int err;
  fence_req *x = dl_reqop_new(R, NULL, sizeof *x, true, op, &err, fence_send,
                              fence_result);
  if (x == NULL) return err;
  x->l = l;
  snprintf(x->token, sizeof x->token, "%llu", (unsigned long long)token);
  dl_fmt_ll(x->lease, lease_ms);
  return dl_reqop_run(&x->r, done, ud, op);
}

typedef struct query_req {
  dl_reqop r;
  const dl_lock_ref *l;
  dl_lock_query q;
  bool plain; /* a plain string lock's HELD or COUNT: GET, compared */
  long long *v;
  char tk[DL_DERIVED_MAX];
} query_req;

static int query_send(dl_reqop *x) {
  query_req *q = (query_req *)x;
  const dl_lock_ref *l = q->l;
  const char *argv[3] = {NULL, l->key, l->owner};
  int argc = 2;
  /* A plain string lock's owner holds it while the value is its id (the
   * wire has no count: the count query answers the same, 1 or 0). */
  q->plain = l->kind == DL_KIND_PLAIN &&
             (q->q == DL_QUERY_HELD || q->q == DL_QUERY_COUNT);
  if (q->plain) argv[0] = "GET";
  else switch (q->q) {
  case DL_QUERY_LOCKED: argv[0] = "EXISTS"; break;
  case DL_QUERY_HELD: argv[0] = "HEXISTS", argc = 3; break;
  case DL_QUERY_COUNT: argv[0] = "HGET", argc = 3; break;
  case DL_QUERY_TTL: argv[0] = "PTTL"; break;
  case DL_QUERY_TOKEN: argv[0] = "GET", argv[1] = TOKEN_KEY(l, q->tk); break;
  default:
    x->p.rc = dl_seterr(x->R->env.err_owner, DLOCK_EINVAL, "unknown query");
    return 0;
  }
  return dl_redis_step_command(x->R, &x->p, argc, argv);
}

/* The query's integer (nil: 0, or -2 for a TTL; a number as text: GET's
 * token, HGET's count). */
static int query_result(dl_reqop *x) {
  query_req *q = (query_req *)x;
  redisReply *r = dl_reqop_reply(x);
  if (r == NULL) return x->p.rc;
  dl_redis *R = x->R;
  long long *out = q->v;
  int rc = 0;
  if (q->plain && (r->type == REDIS_REPLY_NIL || r->type == REDIS_REPLY_STRING))
    *out = r->type == REDIS_REPLY_STRING && strcmp(r->str, q->l->owner) == 0;
  else if (r->type == REDIS_REPLY_INTEGER)
    *out = q->q == DL_QUERY_TTL ? dl_redis_ttl(r->integer) : r->integer;
  else if (r->type == REDIS_REPLY_NIL)
    *out = q->q == DL_QUERY_TTL ? DLOCK_TTL_FREE : 0;
  else if (r->type == REDIS_REPLY_STRING) {
    char *end;
    *out = strtoll(r->str, &end, 10);
    if (*end != '\0') rc = dl_seterr(R->env.err_owner, DLOCK_EPROTO, "not a number");
  } else {
    rc = dl_seterr(R->env.err_owner, DLOCK_EPROTO, "unexpected reply type %d",
                   r->type);
  }
  freeReplyObject(r);
  if (rc == 0 && q->q == DL_QUERY_COUNT && (*out < 0 || *out > INT_MAX))
    rc = dl_seterr(R->env.err_owner, DLOCK_EPROTO,
                   "hold count %lld out of range", *out);
  return rc;
}

static int query_run(dl_backend *b, const dl_lock_ref *l, dl_lock_query q,
                     long long *v, dl_done_fn done, void *ud,
                     dl_async **op) {
  dl_redis *R = (dl_redis *)b;
  int err;
  query_req stack, *x = dl_reqop_new(R, &stack, sizeof stack, done != NULL,
                               op, &err, query_send, query_result);
  if (x == NULL) return err;
  x->l = l;
  x->q = q;
  x->v = v;
  *v = 0;
  return dl_reqop_run(&x->r, done, ud, op);
}

int dl_redis_lock_query(dl_backend *b, const dl_lock_ref *l, dl_lock_query q,
                        long long *v) {
  return query_run(b, l, q, v, NULL, NULL, NULL);
}

int dl_redis_lock_query_async(dl_backend *b, const dl_lock_ref *l,
                              dl_lock_query q, long long *v, dl_done_fn done,
                              void *ud, dl_async **op) {
  return query_run(b, l, q, v, done, ud, op);
}

/* ---- the event-loop driver ---- */
typedef struct rel_async {
  dl_shell sh;
  dl_rlock_rel o;
  /* Replica acknowledgement: WAIT after the release (its shortfall
   * changes nothing, as the blocking release's). */
  dl_pend wait;
  bool waiting;
  int rc;
} rel_async;

static int rel_async_step(dl_shell *sh) {
  rel_async *x = (rel_async *)sh;
  if (x->waiting) {
    (void)dl_redis_replicate_result(sh->head.R, &x->wait, "release", "");
    return x->rc;
  }
  int rc = dl_rlock_rel_step(&x->o);
  if (rc == DL_PENDING || rc < 0 || sh->head.R->min_replicas == 0) return rc;
  x->rc = rc;
  x->waiting = true;
  if (dl_redis_replicate_start(sh->head.R, &x->o.l->key, 1, &x->wait) == DL_PENDING)
    return DL_PENDING;
  (void)dl_redis_replicate_result(sh->head.R, &x->wait, "release", "");
  return rc;
}

int dl_redis_lock_release_async(dl_backend *b, const dl_lock_ref *l,
                                int64_t lease_ms, int count, dl_done_fn done,
                                void *ud, dl_async **op) {
  dl_redis *R = (dl_redis *)b;
  *op = NULL;
  int rc = dl_redis_driver_check(R, true);
  if (rc != 0) return rc;
  rel_async *x = malloc(sizeof *x);
  if (x == NULL) return dl_seterr(R->env.err_owner, DLOCK_ENOMEM, "out of memory");
  /* A release is not given up: a cancel leaves it to its end. */
  x->waiting = false;
  dl_shell_init(&x->sh, R, done, ud, rel_async_step, NULL);
  dl_shell_bind(&x->sh, &x->o.p);
  dl_shell_bind(&x->sh, &x->wait);
  rc = dl_rlock_rel_start(&x->o, R, l, lease_ms, count, 0);
  if (rc == 0) rc = rel_async_step(&x->sh);
  x->sh.main = &x->o.p;
  return dl_shell_start(&x->sh, rc, op);
}
