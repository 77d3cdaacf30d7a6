/* lock.c: the lock family on Redis, wire-compatible with Redisson: RLock
 * (a hash at the lock's name, field owner id -> hold count, with a PEXPIRE
 * lease; the unlock message "0" on redisson_lock__channel:{name}; fencing
 * tokens from redisson_lock_token:{name}, RFencedLock's counter), RFairLock
 * (its queue and timeouts) and RReadWriteLock (the "mode" field, the
 * readers' lease keys). Here: the release (sent behind a PING when others
 * wait, retried through a latch), the force release and the queries; the
 * acquire and its wait are in acquire.c. */
#include "rlock.h"

#include <hiredis/hiredis.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- release, a state machine (see dl_pend) ---- */

/* A release's result is kept on the server this many command timeouts, so
 * that a retry of it (below) finds it. */
#define LATCH_TIMEOUTS 3

/* Whether a release that failed with rc is sent again: the connection
 * dropped, perhaps after the server ran it (its reply lost). The connection
 * reconnects at once. Not after a timeout (no time is left), nor when the
 * server cannot be reached (the retry could not get through either). */
static bool release_retriable(int rc) { return rc == DLOCK_ECONNLOST; }


/* Sends the release (again, with o->retry). Returns 0 or DL_PENDING. */
static int rel_send(dl_rlock_rel *o) {
  dl_redis *R = o->R;
  const dl_lock_ref *l = o->l;
  char lease[DL_INT_BUF], cnt[DL_INT_BUF], keep[DL_INT_BUF];
  dl_fmt_ll(lease, o->lease_ms);
  dl_fmt_ll(cnt, o->count);
  dl_fmt_ll(keep, (long long)LATCH_TIMEOUTS * R->env.command_timeout_ms);
  char ch[DL_DERIVED_MAX], qk[DL_DERIVED_MAX], wk[DL_DERIVED_MAX],
      tk[DL_DERIVED_MAX], hk[DL_DERIVED_MAX], latch[DL_DERIVED_MAX + 48];
  /* "<derived latch name>:<request id>" (no snprintf: the hot path). */
  size_t n = strlen(derived(latch, "redisson_unlock_latch", l));
  latch[n++] = ':';
  memcpy(latch + n, o->id, strlen(o->id) + 1);
  const char *retry = o->retry ? "1" : "0"; /* only a retry finds a latch */
  const char *keys[7], *args[6];
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
    args[0] = UNLOCK_MESSAGE;
    args[1] = lease;
    args[2] = l->owner;
    args[3] = cnt;
    args[4] = keep;
    args[5] = retry;
    nargs = 6;
  } else {
    /* The fair lock wakes its first waiter; the plain lock hands itself to
     * the first of its hand-off queue. */
    bool fair = l->kind == DL_KIND_FAIR;
    script = DL_SCRIPT_LOCK_RELEASE;
    keys[0] = l->key;
    keys[1] = CHANNEL(l, ch);
    keys[2] = fair ? QUEUE_KEY(l, qk) : GRANT_QUEUE_KEY(l, qk);
    nkeys = 3;
    if (!fair) {
      keys[3] = GRANT_WAITERS_KEY(l, wk);
      keys[4] = TOKEN_KEY(l, tk);
      keys[5] = HANDOFF_KEY(l, hk);
      nkeys = 6;
    }
    keys[nkeys++] = latch;
    args[0] = UNLOCK_MESSAGE;
    args[1] = lease;
    args[2] = l->owner;
    args[3] = cnt;
    args[4] = keep;
    args[5] = retry;
    nargs = 6;
  }
  o->st = REL_SENT;
  return dl_redis_step_eval(R, &o->p, o->until, script | o->wake_first, nkeys,
                            keys, nargs, args);
}

/* Idempotent on retry, as Redisson's unlock: each release has a request id,
 * and the script keeps its result for LATCH_TIMEOUTS command timeouts in
 * "redisson_unlock_latch:{name}:<request id>" (the lock's slot). A release
 * whose connection failed (the reply may have been lost after the server ran
 * it) is sent again, with the same id, for up to one command timeout from
 * the first send (or until `end`, if sooner and not 0); a retry that finds
 * the latch returns the first result instead of "not the owner".
 * Request ids are "<nonce>:<seq>": unique across processes even with an
 * explicit client id. Returns 0 (go on with rel_step) or DL_PENDING. */
int dl_rlock_rel_start(dl_rlock_rel *o, dl_redis *R, const dl_lock_ref *l,
                     int64_t lease_ms, int count, int64_t end) {
  o->R = R;
  o->l = l;
  o->lease_ms = lease_ms;
  o->count = count;
  o->until = dl_now_ms() + R->env.command_timeout_ms;
  if (end != 0 && end < o->until) o->until = end;
  o->pause = 0;
  o->retry = false;
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
      o->pause = o->pause ? 2 * o->pause : 5;
      o->retry = true;
      if (rel_send(o) == DL_PENDING) return DL_PENDING;
      continue;
    }
    /* REL_SENT */
    int rc = o->p.rc;
    int64_t now = dl_now_ms(), left = o->until - now;
    if (rc != 0 && release_retriable(rc) && left > 0 &&
        !atomic_load(o->R->env.closing)) {
      /* The connection reconnects at once after a failure, then backs off:
       * do not spin on its "next reconnect in" answer. */
      o->st = REL_PAUSED;
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

int dl_redis_lock_release(dl_backend *b, const dl_lock_ref *l,
                          int64_t lease_ms, int count) {
  dl_redis *R = (dl_redis *)b;
  int rc = dl_redis_driver_check(R, false);
  if (rc != 0) return rc;
  dl_rlock_rel o;
  if (dl_rlock_rel_start(&o, R, l, lease_ms, count, 0) == DL_PENDING) return DLOCK_EINVAL;
  return dl_rlock_rel_step(&o);
}

int dl_redis_lock_force_release(dl_backend *b, const dl_lock_ref *l) {
  dl_redis *R = (dl_redis *)b;
  char ch[DL_DERIVED_MAX], qk[DL_DERIVED_MAX];
  bool rw = is_rw(l);
  const char *keys[] = {l->key, rw ? RW_CHANNEL(l, ch) : CHANNEL(l, ch),
                        QUEUE_KEY(l, qk)};
  /* A write unlock's "1" wakes every waiter of a read-write lock. */
  const char *args[] = {rw ? "1" : UNLOCK_MESSAGE,
                        rw                          ? "rwlock"
                        : l->kind == DL_KIND_PLAIN ? "plain"
                                                    : "lock",
                        R->env.revoke_channel};
  redisReply *r = NULL;
  int rc = R->link->ops->eval(R->link, DL_SCRIPT_LOCK_FORCE_RELEASE,
                                    l->kind == DL_KIND_FAIR ? 3 : 2, keys, 3, args, &r);
  if (rc != 0) return rc; /* DLOCK_EWRONGTYPE: not a lock of this kind */
  /* 1 deleted, 0 nothing to delete; anything else is not our script's
   * answer (found by the reply fuzzer: a negative number passed through as
   * if it were an error code). */
  rc = r->type == REDIS_REPLY_INTEGER && (r->integer == 0 || r->integer == 1)
           ? (int)r->integer
           : dl_seterr(R->env.err_owner, DLOCK_EPROTO, "unexpected reply to the force "
                       "release");
  freeReplyObject(r);
  return rc;
}


/* Runs a read command and returns its integer (or nil as `nil_value`). */
static int query_int(dl_redis *R, int argc, const char **argv,
                     long long nil_value, long long *out) {
  redisReply *r = NULL;
  int rc = R->link->ops->command(R->link, argc, argv, &r);
  if (rc != 0) return rc;
  if (r->type == REDIS_REPLY_INTEGER) *out = r->integer;
  else if (r->type == REDIS_REPLY_NIL) *out = nil_value;
  else if (r->type == REDIS_REPLY_STRING) {
    char *end;
    *out = strtoll(r->str, &end, 10);
    if (*end != '\0') rc = dl_seterr(R->env.err_owner, DLOCK_EPROTO, "not a number");
  } else {
    rc = dl_seterr(R->env.err_owner, DLOCK_EPROTO, "unexpected reply type %d",
                   r->type);
  }
  freeReplyObject(r);
  return rc;
}

/* A plain string lock's owner holds it while the value is its id: *v 1 or
 * 0 (the wire has no count: the count query answers the same). */
static int plain_held(dl_redis *R, const dl_lock_ref *l, long long *v) {
  const char *argv[] = {"GET", l->key};
  redisReply *r = NULL;
  int rc = R->link->ops->command(R->link, 2, argv, &r);
  if (rc != 0) return rc;
  if (r->type == REDIS_REPLY_NIL) *v = 0;
  else if (r->type == REDIS_REPLY_STRING) *v = strcmp(r->str, l->owner) == 0;
  else rc = dl_seterr(R->env.err_owner, DLOCK_EPROTO,
                      "unexpected reply type %d", r->type);
  freeReplyObject(r);
  return rc;
}

int dl_redis_lock_query(dl_backend *b, const dl_lock_ref *l, dl_lock_query q,
                        long long *v) {
  dl_redis *R = (dl_redis *)b;
  char tk[DL_DERIVED_MAX];
  if (l->kind == DL_KIND_PLAIN &&
      (q == DL_QUERY_HELD || q == DL_QUERY_COUNT))
    return plain_held(R, l, v);
  switch (q) {
  case DL_QUERY_LOCKED: {
    const char *argv[] = {"EXISTS", l->key};
    return query_int(R, 2, argv, 0, v);
  }
  case DL_QUERY_HELD: {
    const char *argv[] = {"HEXISTS", l->key, l->owner};
    return query_int(R, 3, argv, 0, v);
  }
  case DL_QUERY_COUNT: {
    const char *argv[] = {"HGET", l->key, l->owner};
    int rc = query_int(R, 3, argv, 0, v);
    if (rc == 0 && (*v < 0 || *v > INT_MAX))
      rc = dl_seterr(R->env.err_owner, DLOCK_EPROTO,
                     "hold count %lld out of range", *v);
    return rc;
  }
  case DL_QUERY_TTL: {
    const char *argv[] = {"PTTL", l->key};
    return query_int(R, 2, argv, -2, v);
  }
  case DL_QUERY_TOKEN: {
    const char *argv[] = {"GET", TOKEN_KEY(l, tk)};
    return query_int(R, 2, argv, 0, v);
  }
  }
  return dl_seterr(R->env.err_owner, DLOCK_EINVAL, "unknown query");
}

/* ---- the event-loop driver ---- */
typedef struct rel_async {
  dl_shell sh;
  dl_rlock_rel o;
} rel_async;

static int rel_async_step(dl_shell *sh) {
  return dl_rlock_rel_step(&((rel_async *)sh)->o);
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
  dl_shell_init(&x->sh, R, done, ud, rel_async_step, NULL);
  dl_shell_bind(&x->sh, &x->o.p);
  rc = dl_rlock_rel_start(&x->o, R, l, lease_ms, count, 0);
  if (rc == 0) rc = dl_rlock_rel_step(&x->o);
  x->sh.main = &x->o.p;
  return dl_shell_start(&x->sh, rc, op);
}
