/* lock.c: the lock family on Redis, wire-compatible with Redisson: RLock
 * (a hash at the lock's name, field owner id -> hold count, with a PEXPIRE
 * lease; the unlock message "0" on redisson_lock__channel:{name}; fencing
 * tokens from redisson_lock_token:{name}, RFencedLock's counter), RFairLock
 * (its queue and timeouts) and RReadWriteLock (the "mode" field, the
 * readers' lease keys). The waiting algorithm is Redis's own: pub/sub, the
 * plain lock's hand-off queue with grants, reservations for starving
 * waiters, and a release sent behind a PING when others wait. */
#include "redis.h"

#include <hiredis/hiredis.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The handle's hint word: its last acquire had to wait (its next acquire
 * queues at once, its release sends the wake-up first). */
#define HINT_CONTENDED 1u

static bool is_rw(const dl_lock_ref *l) {
  return l->kind == DL_KIND_READ || l->kind == DL_KIND_WRITE;
}

static bool contended(const dl_lock_ref *l) {
  return (atomic_load_explicit(l->hint, memory_order_relaxed) &
          HINT_CONTENDED) != 0;
}

/* Runs a script, answered by `end` (dl_now_ms() time) at the latest; 0:
 * within the command timeout. An acquire passes its own end, so that the
 * whole call, its cleanup included, is bounded (dlock_lock_try_acquire). */
static int eval_until(dl_redis *R, int64_t end, int script, int nkeys,
                      const char **keys, int nargs, const char **args,
                      redisReply **r) {
  if (end == 0)
    return R->link->ops->eval(R->link, script, nkeys, keys, nargs, args, r);
  if (dl_now_ms() >= end)
    return dl_seterr(R->env.err_owner, DLOCK_ETIMEDOUT,
                     "no time left for the request");
  int err = 0;
  const char *const *k = keys, *const *a = args;
  int rc = R->link->ops->eval_many(R->link, end, 1, script, &nkeys, &k, &nargs,
                                   &a, r, &err);
  return rc ? rc : err;
}

/* Redisson's derived names: "<prefix>:{<name>}", or "<prefix>:<name>" when
 * the name carries its own hash tag. Either way it shares the lock's slot.
 * `out` has DL_DERIVED_MAX bytes. */
static const char *derived(char *out, const char *prefix,
                           const dl_lock_ref *l) {
  dl_derived_into(out, DL_DERIVED_MAX, prefix, l->key);
  return out;
}
#define CHANNEL(l, buf) derived(buf, "redisson_lock__channel", l)
#define TOKEN_KEY(l, buf) derived(buf, "redisson_lock_token", l)
#define HANDOFF_KEY(l, buf) derived(buf, "dlock_handoff", l)
#define QUEUE_KEY(l, buf) derived(buf, "redisson_lock_queue", l)
#define TIMEOUT_KEY(l, buf) derived(buf, "redisson_lock_timeout", l)
#define RW_CHANNEL(l, buf) derived(buf, "redisson_rwlock", l)
#define GRANT_QUEUE_KEY(l, buf) derived(buf, "dlock_lock_queue", l)
#define GRANT_WAITERS_KEY(l, buf) derived(buf, "dlock_lock_waiters", l)

#define UNLOCK_MESSAGE "0"
/* A starving waiter's hand-off reservation lasts this long, renewed at each
 * attempt; a starving waiter attempts at least every RESERVE_MS / 3. So a
 * waiter that dies blocks a free lock for at most this long. */
#define RESERVE_MS 600
/* A waiter in the plain lock's hand-off queue counts as alive this long
 * after each attempt; it attempts at least every GRANT_STALE_MS / 3. */
#define GRANT_STALE_MS 6000
/* A waiter's own channel, "<channel>:<owner id>": the fair lock's wake-up
 * and the plain lock's grant. `out` has OWNER_CHANNEL_MAX bytes. */
#define OWNER_CHANNEL_MAX (DL_DERIVED_MAX + DL_OWNER_MAX + 1)
static const char *owner_channel(char *out, const dl_lock_ref *l,
                                 const char *owner) {
  size_t n = strlen(CHANNEL(l, out)), m = strlen(owner);
  if (n + 1 + m >= OWNER_CHANNEL_MAX) m = OWNER_CHANNEL_MAX - n - 2;
  out[n] = ':'; /* n < DL_DERIVED_MAX: the ':' and the NUL fit */
  memcpy(out + n + 1, owner, m);
  out[n + 1 + m] = '\0';
  return out;
}

/* One attempt at a side of a read-write lock (see attempt). */
static int rw_attempt(dl_redis *R, const dl_acquire *a, int64_t end,
                      const char *lease, uint64_t *token, int64_t *ttl,
                      bool *local_reserved, int64_t *sent) {
  const dl_lock_ref *l = a->lock;
  const char *owner = l->owner;
  /* The same thread's owner ids on the other side. */
  char reader[DL_OWNER_MAX], writer[DL_OWNER_MAX];
  size_t ol = strlen(owner);
  if (l->kind == DL_KIND_WRITE) {
    memcpy(reader, owner, ol - 6);
    reader[ol - 6] = '\0';
    memcpy(writer, owner, ol + 1);
  } else {
    memcpy(reader, owner, ol + 1);
    snprintf(writer, sizeof writer, "%s:write", owner);
  }
  char tk[DL_DERIVED_MAX];
  const char *keys[] = {l->key, TOKEN_KEY(l, tk)};
  const char *args[] = {lease,  owner,  l->kind == DL_KIND_READ ? "read" : "write",
                        writer, reader, a->info};
  redisReply *r = NULL;
  *local_reserved = false;
  *sent = dl_now_ms();
  int rc = eval_until(R, end, DL_SCRIPT_RW_ACQUIRE, 2, keys, 6, args, &r);
  if (rc != 0) return rc;
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_INTEGER ||
      r->element[1]->type != REDIS_REPLY_INTEGER ||
      r->element[0]->integer < -1 || r->element[0]->integer > 2) {
    freeReplyObject(r);
    return dl_seterr(R->env.err_owner, DLOCK_EPROTO, "unexpected reply to the acquire");
  }
  long long status = r->element[0]->integer, value = r->element[1]->integer;
  freeReplyObject(r);
  if (status == -1)
    return dl_seterr(R->env.err_owner, DLOCK_EDEADLK, "this owner holds the read lock "
                     "of '%s': release it before asking for the write lock",
                     l->name);
  if (status == 0) {
    *ttl = value;
    return 0;
  }
  *token = (uint64_t)value;
  return (int)status;
}

/* One attempt. Returns 1 and the token when acquired, 0 and the holder's
 * PTTL when another owner holds it (*local_reserved: the lock is free but
 * reserved for a starving waiter of this client), or a negative code.
 * `enqueue`: if refused, join (or stay in) the fair lock's queue, or the
 * plain lock's hand-off queue. */
static int attempt(dl_redis *R, const dl_acquire *a, int64_t end,
                   bool starving, bool enqueue, uint64_t *token, int64_t *ttl,
                   bool *local_reserved, int64_t *sent) {
  const dl_lock_ref *l = a->lock;
  const char *owner = l->owner;
  char lease[DL_INT_BUF], count[DL_INT_BUF];
  dl_fmt_ll(lease, a->lease_ms);
  dl_fmt_ll(count, a->held);
  if (is_rw(l))
    return rw_attempt(R, a, end, lease, token, ttl, local_reserved, sent);
  bool fair = l->kind == DL_KIND_FAIR;
  char tk[DL_DERIVED_MAX], hk[DL_DERIVED_MAX], qk[DL_DERIVED_MAX], tok[DL_DERIVED_MAX];
  const char *keys[] = {l->key, TOKEN_KEY(l, tk), HANDOFF_KEY(l, hk),
                        fair ? QUEUE_KEY(l, qk) : GRANT_QUEUE_KEY(l, qk),
                        fair ? TIMEOUT_KEY(l, tok) : GRANT_WAITERS_KEY(l, tok)};
  char reserve[DL_INT_BUF], stale[DL_INT_BUF], alive[DL_INT_BUF];
  dl_fmt_ll(reserve, RESERVE_MS);
  dl_fmt_ll(stale, l->fair_stale_ms);
  dl_fmt_ll(alive, GRANT_STALE_MS);
  const char *args[] = {lease, owner, a->info, count, starving ? "1" : "0",
                        reserve, stale, enqueue ? "1" : "0", alive};
  /* A plain lock's first attempt sends only what it needs. */
  int nkeys = fair || enqueue ? 5 : 3;
  int nargs = fair ? 8 : enqueue ? 9 : 6;
  redisReply *r = NULL;
  *sent = dl_now_ms();
  int rc = eval_until(R, end, DL_SCRIPT_LOCK_ACQUIRE, nkeys, keys, nargs,
                      args, &r);
  if (rc != 0) return rc;
  *local_reserved = false;
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
      r->element[0]->type != REDIS_REPLY_INTEGER ||
      r->element[1]->type != REDIS_REPLY_INTEGER) {
    freeReplyObject(r);
    return dl_seterr(R->env.err_owner, DLOCK_EPROTO, "unexpected reply to the acquire");
  }
  long long status = r->element[0]->integer, value = r->element[1]->integer;
  if (status < 0 || status > 2) { /* found by the reply fuzzer */
    freeReplyObject(r);
    return dl_seterr(R->env.err_owner, DLOCK_EPROTO, "unexpected status %lld in the "
                     "reply to the acquire", status);
  }
  if (r->elements == 3 && r->element[2]->type == REDIS_REPLY_STRING) {
    size_t idl = strlen(R->env.client_id);
    *local_reserved = strncmp(r->element[2]->str, R->env.client_id, idl) == 0 &&
                      r->element[2]->str[idl] == ':';
  }
  freeReplyObject(r);
  if (status == 0) {
    *ttl = value;
    return 0;
  }
  *token = (uint64_t)value;
  return (int)status; /* 1 taken, 2 re-entered */
}


/* A release's result is kept on the server this many command timeouts, so
 * that a retry of it (below) finds it. */
#define LATCH_TIMEOUTS 3

/* Whether a release that failed with rc is sent again: the connection
 * dropped, perhaps after the server ran it (its reply lost). The connection
 * reconnects at once. Not after a timeout (no time is left), nor when the
 * server cannot be reached (the retry could not get through either). */
static bool release_retriable(int rc) { return rc == DLOCK_ECONNLOST; }

/* Returns 1 released, 0 still held, or a negative code.
 *
 * Idempotent on retry, as Redisson's unlock: each release has a request id,
 * and the script keeps its result for LATCH_TIMEOUTS command timeouts in
 * "redisson_unlock_latch:{name}:<request id>" (the lock's slot). A release
 * whose connection failed (the reply may have been lost after the server ran
 * it) is sent again, with the same id, for up to one command timeout from
 * the first send; a retry that finds the latch returns the first result
 * instead of "not the owner". */
static int release_script(dl_redis *R, const dl_lock_ref *l,
                          int64_t lease_ms, int count, int64_t end) {
  const char *owner = l->owner;
  char lease[DL_INT_BUF], cnt[DL_INT_BUF], keep[DL_INT_BUF];
  dl_fmt_ll(lease, lease_ms);
  dl_fmt_ll(cnt, count);
  dl_fmt_ll(keep, (long long)LATCH_TIMEOUTS * R->env.command_timeout_ms);
  char ch[DL_DERIVED_MAX], qk[DL_DERIVED_MAX], wk[DL_DERIVED_MAX], tk[DL_DERIVED_MAX],
      hk[DL_DERIVED_MAX], latch[DL_DERIVED_MAX + 48];
  /* "<derived latch name>:<nonce>:<seq>" (no snprintf: the hot path). */
  size_t n = strlen(derived(latch, "redisson_unlock_latch", l));
  latch[n++] = ':';
  memcpy(latch + n, R->release_nonce, 16);
  n += 16;
  latch[n++] = ':';
  dl_fmt_ll(latch + n, (long long)atomic_fetch_add(&R->release_seq, 1));
  redisReply *r = NULL;
  int rc;
  /* This handle's last acquire had to wait: others likely wait too, and the
   * message that wakes one of them goes out ahead of our reply. */
  int wake_first = contended(l) ? DL_EVAL_WAKE_FIRST : 0;
  int script, nkeys, nargs;
  const char *keys[7], *args[6];
  int retry_arg; /* the argument that says a send is a retry */
  if (is_rw(l)) {
    script = DL_SCRIPT_RW_RELEASE;
    keys[0] = l->key;
    keys[1] = RW_CHANNEL(l, ch);
    keys[2] = latch;
    nkeys = 3;
    args[0] = owner;
    args[1] = l->kind == DL_KIND_READ ? "read" : "write";
    args[2] = lease;
    args[3] = keep;
    args[4] = "0";
    retry_arg = 4;
    nargs = 5;
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
    args[2] = owner;
    args[3] = cnt;
    args[4] = keep;
    args[5] = "0";
    retry_arg = 5;
    nargs = 6;
  }
  /* Retries end with the first send's command timeout: a release never
   * takes longer than one. */
  int64_t until = dl_now_ms() + R->env.command_timeout_ms;
  if (end != 0 && end < until) until = end;
  const char *const *k = keys, *const *a = args;
  for (int64_t pause = 0;; pause = pause ? 2 * pause : 5) {
    int err = 0;
    rc = R->link->ops->eval_many(R->link, until, 1, script | wake_first,
                                    &nkeys, &k, &nargs, &a, &r, &err);
    if (rc == 0) rc = err;
    int64_t left = until - dl_now_ms();
    if (rc == 0 || !release_retriable(rc) || left <= 0 ||
        atomic_load(R->env.closing))
      break;
    /* The connection reconnects at once after a failure, then backs off:
     * do not spin on its "next reconnect in" answer. */
    dl_sleep_ms(pause < left ? pause : left);
    args[retry_arg] = "1"; /* only a retry can find a latch */
  }
  if (rc != 0) return rc;
  if (r->type == REDIS_REPLY_NIL) rc = DLOCK_ENOTOWNER;
  else if (r->type == REDIS_REPLY_INTEGER) /* freed: 1 + subscribers told */
    rc = r->integer >= 1 ? 1 : 0;
  else
    rc = dl_seterr(R->env.err_owner, DLOCK_EPROTO, "unexpected reply to the release");
  freeReplyObject(r);
  return rc;
}


/* The channels a waiter listens on (each OWNER_CHANNEL_MAX bytes): the
 * unlock channel, or a fair lock's waiter's own (a release tells only the
 * first of the queue); and the plain lock's waiter's own grant channel,
 * where a release hands it the lock. */
static void wait_channels(const dl_lock_ref *l, const char *owner, char *ch,
                          char *gch) {
  if (is_rw(l)) RW_CHANNEL(l, ch);
  else if (l->kind == DL_KIND_FAIR) owner_channel(ch, l, owner);
  else CHANNEL(l, ch);
  if (l->kind == DL_KIND_LOCK) owner_channel(gch, l, owner);
}


int dl_redis_lock_acquire(dl_backend *b, dl_acquire *acq) {
  dl_redis *R = (dl_redis *)b;
  const dl_lock_ref *l = acq->lock;
  const char *owner = l->owner;
  bool wait = acq->wait;
  int64_t lease_ms = acq->lease_ms;
  int64_t start = dl_now_ms();
  int64_t deadline = acq->deadline;
  /* Every request, leaving the wait included, is answered by one command
   * timeout after the deadline at the latest. */
  int64_t end = deadline == INT64_MAX
                    ? 0
                    : (deadline > start ? deadline : start) +
                          R->env.command_timeout_ms;
  uint64_t tok = 0;
  int64_t ttl = 0, sent = 0;
  int rc;

  bool reserved = false, fair = l->kind == DL_KIND_FAIR;
  const dl_rlink_ops *ops = R->link->ops;
  /* A plain lock's waiter joins the hand-off queue only once it can hear
   * its grant channel (not when polling, nor without a subscription). */
  char ch[OWNER_CHANNEL_MAX], gch[OWNER_CHANNEL_MAX];
  bool grants = !fair && !is_rw(l);
  dl_sub *sub = NULL, *grant = NULL;
  bool queued = false;
  int64_t queued_sent = 0; /* when the last attempt that queued us went */
  /* The last acquire through this handle had to wait: if both channels are
   * still subscribed (they linger), queue at the first attempt. */
  if (grants && wait && contended(l)) {
    wait_channels(l, owner, ch, gch);
    sub = ops->sub_ref(R->link, ch, DL_WAKE_LOCK, -1);
    if (sub) grant = ops->sub_ref(R->link, gch, DL_WAKE_GRANT, -1);
    if (grant) queued = ops->sub_grant(R->link, grant, NULL) == 0;
  }
  /* A fair lock's one-shot try does not join the queue (as Redisson's
   * tryLock() without a wait). */
  rc = attempt(R, acq, end, false, (fair && wait) || queued, &tok, &ttl,
               &reserved, &sent);
  if (rc == 0 && queued) queued_sent = sent;
  if (rc == 0 && wait) atomic_fetch_or(l->hint, HINT_CONTENDED);
  else if (rc > 0 && contended(l))
    atomic_fetch_and(l->hint, ~HINT_CONTENDED);
  bool starving = false;
  if (rc == 0 && wait) {
    /* Subscribe first, then try again: an unlock between our failed attempt
     * and the subscription would otherwise go unheard. Each sleep is bounded
     * by the holder's TTL, so even a lost message costs at most that. */
    bool again = !queued; /* no need when the attempt queued us */
    if (sub == NULL) {
      wait_channels(l, owner, ch, gch);
      sub = ops->sub_ref(R->link, ch, DL_WAKE_LOCK, deadline);
    }
    if (grant == NULL && grants && sub != NULL)
      grant = ops->sub_ref(R->link, gch, DL_WAKE_GRANT, deadline);
    for (;;) {
      /* Queued once the grant channel is heard; the subscriber connection
       * may come up (or back) while we wait. */
      if (!queued && grant != NULL)
        queued = ops->sub_grant(R->link, grant, NULL) == 0;
      /* A queued waiter is served in turn: no reservation needed. */
      starving = grants && !queued && R->env.starvation_ms > 0 &&
                 dl_now_ms() - start >= R->env.starvation_ms;
      if (again) {
        rc = attempt(R, acq, end, starving, fair || queued, &tok, &ttl,
                     &reserved, &sent);
        if (rc == 0 && queued) queued_sent = sent;
        if (rc != 0) break;
      }
      again = true;
      /* Free, but reserved for a starving thread of this process that the
       * unlock message did not wake: wake it (and the others asleep). */
      if (reserved) ops->sub_kick(R->link, sub);
      int64_t now = dl_now_ms();
      if (now >= deadline) break;
      if (ttl == -2 && !fair) continue; /* freed since: try again at once */
      int64_t until = deadline;
      if (ttl >= 0 && now + ttl + 1 < until) until = now + ttl + 1;
      /* A queued waiter attempts often enough to keep its place (each
       * attempt is its heartbeat), and to notice a dead first waiter. */
      if (fair && now + l->fair_stale_ms / 3 < until) until = now + l->fair_stale_ms / 3;
      /* Past the starvation threshold, attempt (to reserve the hand-off)
       * as soon as it is reached, then often enough to keep the
       * reservation. */
      if (starving && now + RESERVE_MS / 3 < until) until = now + RESERVE_MS / 3;
      if (!starving && !queued && grants && R->env.starvation_ms > 0 &&
          start + R->env.starvation_ms + 1 < until)
        until = start + R->env.starvation_ms + 1;
      /* A queued waiter proves it is alive, and renews the lease it will
       * be granted with, often enough (the hold's validity counts from its last attempt). */
      if (queued) {
        int64_t beat = GRANT_STALE_MS / 3;
        if (lease_ms / 3 < beat) beat = lease_ms / 3 > 0 ? lease_ms / 3 : 1;
        if (now + beat < until) until = now + beat;
      }
      int w = ops->sub_wait(R->link, sub, until, start, grant);
      if (queued && ops->sub_grant(R->link, grant, &tok) == 1) {
        /* Handed over by a release: the lease began after our last
         * attempt was sent. */
        rc = 1;
        sent = queued_sent;
        queued = false;
        break;
      }
      if (w < 0) {
        rc = dl_seterr(R->env.err_owner, w, "the client closed while waiting");
        break;
      }
    }
  }
  /* Taken by a queued attempt: the script took us off the queue. */
  if (rc > 0) queued = false;
  bool left = true; /* not (or no longer) in the hand-off queue */
  if (queued) { /* gave up: leave the hand-off queue */
    left = false;
    char qk[DL_DERIVED_MAX], wk[DL_DERIVED_MAX];
    const char *k[] = {l->key, GRANT_QUEUE_KEY(l, qk), GRANT_WAITERS_KEY(l, wk)};
    const char *a[] = {owner};
    redisReply *r = NULL;
    if (eval_until(R, end, DL_SCRIPT_LOCK_CANCEL, 3, k, 1, a, &r) == 0) {
      /* Handed over as we gave up (the grant is in flight or was lost):
       * give it back rather than leave it held until its lease ends. */
      bool handed = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
      freeReplyObject(r);
      if (handed) release_script(R, l, lease_ms, 1, end);
      left = true;
    }
  }
  /* Still queued (the server did not answer): unsubscribe the grant channel
   * now, so that a release finds us deaf and skips us. */
  if (grant) ops->sub_unref(R->link, grant, left);
  if (sub) ops->sub_unref(R->link, sub, true);
  if (fair && wait && rc <= 0) { /* gave up: leave the queue */
    char ch2[DL_DERIVED_MAX], qk[DL_DERIVED_MAX], tk[DL_DERIVED_MAX];
    const char *k[] = {l->key, CHANNEL(l, ch2), QUEUE_KEY(l, qk),
                       TIMEOUT_KEY(l, tk)};
    const char *a[] = {owner, UNLOCK_MESSAGE};
    redisReply *r = NULL;
    if (eval_until(R, end, DL_SCRIPT_FAIR_CANCEL, 4, k, 2, a, &r) == 0)
      freeReplyObject(r);
  }
  if (starving && rc <= 0) { /* gave up: free the hand-off for others */
    char hk[DL_DERIVED_MAX];
    const char *k[] = {HANDOFF_KEY(l, hk)};
    const char *a[] = {owner};
    redisReply *r = NULL;
    if (eval_until(R, end, DL_SCRIPT_LOCK_UNRESERVE, 1, k, 1, a, &r) == 0)
      freeReplyObject(r);
  }
  if (rc == 0) acq->ttl = ttl;
  if (rc <= 0) return rc;
  acq->status = rc;
  acq->token = tok;
  /* The script set the lease when it ran, after `sent`. */
  acq->valid_until = dl_validity(sent, lease_ms);
  return 1;
}

int dl_redis_lock_release(dl_backend *b, const dl_lock_ref *l,
                          int64_t lease_ms, int count) {
  return release_script((dl_redis *)b, l, lease_ms, count, 0);
}

int dl_redis_lock_force_release(dl_backend *b, const dl_lock_ref *l) {
  dl_redis *R = (dl_redis *)b;
  char ch[DL_DERIVED_MAX], qk[DL_DERIVED_MAX];
  bool rw = is_rw(l);
  const char *keys[] = {l->key, rw ? RW_CHANNEL(l, ch) : CHANNEL(l, ch),
                        QUEUE_KEY(l, qk)};
  /* A write unlock's "1" wakes every waiter of a read-write lock. */
  const char *args[] = {rw ? "1" : UNLOCK_MESSAGE, rw ? "rwlock" : "lock",
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

int dl_redis_lock_query(dl_backend *b, const dl_lock_ref *l, dl_lock_query q,
                        long long *v) {
  dl_redis *R = (dl_redis *)b;
  char tk[DL_DERIVED_MAX];
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
