/* lock.c: the reentrant lock, wire-compatible with Redisson's RLock: a hash
 * at the lock's name (field owner id -> hold count) with a PEXPIRE lease,
 * the unlock message "0" on redisson_lock__channel:{name}, and fencing
 * tokens from redisson_lock_token:{name} (RFencedLock's counter). */
#include "lock.h"

#include <hiredis/hiredis.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
#define OWNER_CHANNEL_MAX (DERIVED_MAX + OWNER_MAX + 1)
static const char *owner_channel(char *out, const dlock_lock *l,
                                 const char *owner) {
  size_t n = strlen(CHANNEL(l, out)), m = strlen(owner);
  if (n + 1 + m >= OWNER_CHANNEL_MAX) m = OWNER_CHANNEL_MAX - n - 2;
  out[n] = ':'; /* n < DERIVED_MAX: the ':' and the NUL fit */
  memcpy(out + n + 1, owner, m);
  out[n + 1 + m] = '\0';
  return out;
}
/* Redisson RFairLock's default stale-waiter timeout (threadWaitTime). */
#define FAIR_STALE_DEFAULT_MS 300000

int dlock_lock_new(dlock_client *c, const char *name, const char *owner,
                   dlock_lock **out) {
  if (out) *out = NULL;
  if (c == NULL || out == NULL)
    return DLOCK_EINVAL;
  if (name == NULL || *name == '\0')
    return dl_seterr(c, DLOCK_EINVAL, "the lock name is empty");
  size_t nl = strlen(name);
  if (nl > DLOCK_NAME_MAX)
    return dl_seterr(c, DLOCK_ENAMETOOLONG, "the lock name has %zu bytes, "
                     "the limit is %d", nl, DLOCK_NAME_MAX);
  if (owner && (*owner == '\0' || strlen(owner) > 100))
    return dl_seterr(c, DLOCK_EINVAL, "an explicit owner must be 1..100 bytes");
  /* One allocation: the handle, its key and its owner. */
  size_t kl = c->prefix_len + nl;
  size_t ol = owner ? strlen(owner) + 1 : 0;
  dlock_lock *l = calloc(1, sizeof(dlock_lock) + kl + 1 + ol);
  if (l == NULL) return dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  l->c = c;
  l->key = (char *)(l + 1);
  memcpy(l->key, c->key_prefix, c->prefix_len);
  memcpy(l->key + c->prefix_len, name, nl + 1);
  if (owner) l->owner = memcpy(l->key + kl + 1, owner, ol);
  *out = l;
  return 0;
}

int dlock_lock_new_fair(dlock_client *c, const char *name, const char *owner,
                        int64_t stale_ms, dlock_lock **out) {
  int rc = dlock_lock_new(c, name, owner, out);
  if (rc == 0)
    (*out)->fair_ms = stale_ms > 0 ? stale_ms : FAIR_STALE_DEFAULT_MS;
  return rc;
}

int dlock_rwlock_new(dlock_client *c, const char *name, const char *owner,
                     dlock_lock **read_lock, dlock_lock **write_lock) {
  if (read_lock) *read_lock = NULL;
  if (write_lock) *write_lock = NULL;
  if (read_lock == NULL || write_lock == NULL) return DLOCK_EINVAL;
  int rc = dlock_lock_new(c, name, owner, read_lock);
  if (rc == 0 && (rc = dlock_lock_new(c, name, owner, write_lock)) != 0) {
    dlock_lock_free(*read_lock);
    *read_lock = NULL;
  }
  if (rc == 0) {
    (*read_lock)->rw = RW_READ;
    (*write_lock)->rw = RW_WRITE;
  }
  return rc;
}

void dlock_lock_free(dlock_lock *l) {
  if (l == NULL) return;
  /* Holds taken through this handle stop being renewed and expire after
   * their lease. */
  dl_holds_drop_via(l->c, l, &l->nholds);
  free(l->info);
  free(l);
}

const char *dlock_lock_name(const dlock_lock *l) { return l ? NAME(l) : ""; }

const char *dl_lock_key(const dlock_lock *l) { return l->key; }

/* With holds_mu held: forgets a hold (see dl_hold_drop); pass the result
 * to dl_hold_bury once holds_mu is unlocked. */
static dl_hold *forget(dlock_client *c, dl_hold *h) {
  if (h->via && !h->permit) ((dlock_lock *)h->via)->nholds--;
  return dl_hold_drop(c, h);
}

/* The watchdog found (key, owner) gone: mark the hold lost and tell the
 * handle that took it. */
void dl_lock_on_lost(void *ud, dl_renewal *r, const char *key,
                     const char *owner) {
  dlock_client *c = ud;
  pthread_mutex_lock(&c->holds_mu);
  dl_hold *h = dl_hold_find(c, key, owner);
  dlock_lock *l = NULL;
  dlock_lost_cb cb = NULL;
  void *cb_ud = NULL;
  /* Only the hold this renewal belonged to: the owner may have released
   * and taken the lock again since the renewal went out. */
  void *permits = NULL;
  if (h && h->renewal == r) {
    h->lost = true;
    if (h->permit) {
      permits = h->via;
      c->in_lost_callback = permits;
    } else if ((l = h->via) != NULL) {
      cb = l->cb;
      cb_ud = l->cb_ud;
      c->in_lost_callback = l;
    }
  }
  pthread_mutex_unlock(&c->holds_mu);
  if (cb) cb(l, owner, cb_ud);
  if (permits) dl_permit_lost(permits, owner);
  if (l || permits) {
    pthread_mutex_lock(&c->holds_mu);
    c->in_lost_callback = NULL;
    pthread_cond_broadcast(&c->holds_cv);
    pthread_mutex_unlock(&c->holds_mu);
  }
}

void dlock_lock_on_lost(dlock_lock *l, dlock_lost_cb cb, void *ud) {
  if (l == NULL) return;
  pthread_mutex_lock(&l->c->holds_mu);
  l->cb = cb;
  l->cb_ud = ud;
  pthread_mutex_unlock(&l->c->holds_mu);
}

/* The hold count the client knows for (key, owner): 0 if none or lost. */
static int believed(dlock_lock *l, const char *owner) {
  pthread_mutex_lock(&l->c->holds_mu);
  dl_hold *h = dl_hold_find(l->c, l->key, owner);
  int n = h && !h->lost ? h->count : 0;
  pthread_mutex_unlock(&l->c->holds_mu);
  return n;
}

int dlock_lock_set_info(dlock_lock *l, const char *info) {
  if (l == NULL) return DLOCK_EINVAL;
  if (info && strlen(info) > DLOCK_INFO_MAX)
    return dl_seterr(l->c, DLOCK_EINVAL, "holder info over %d bytes",
                     DLOCK_INFO_MAX);
  char *copy = NULL;
  if (info && (copy = dl_strdup(info)) == NULL)
    return dl_seterr(l->c, DLOCK_ENOMEM, "out of memory");
  pthread_mutex_lock(&l->c->holds_mu);
  free(l->info);
  l->info = copy;
  pthread_mutex_unlock(&l->c->holds_mu);
  return 0;
}

/* One attempt at a side of a read-write lock (see attempt). */
static int rw_attempt(dlock_lock *l, const char *owner, const char *lease,
                      const char *info, uint64_t *token, int64_t *ttl,
                      bool *local_reserved, int64_t *sent) {
  /* The same thread's owner ids on the other side. */
  char reader[OWNER_MAX], writer[OWNER_MAX];
  size_t ol = strlen(owner);
  if (l->rw == RW_WRITE) {
    memcpy(reader, owner, ol - 6);
    reader[ol - 6] = '\0';
    memcpy(writer, owner, ol + 1);
  } else {
    memcpy(reader, owner, ol + 1);
    snprintf(writer, sizeof writer, "%s:write", owner);
  }
  char tk[DERIVED_MAX];
  const char *keys[] = {l->key, TOKEN_KEY(l, tk)};
  const char *args[] = {lease, owner, l->rw == RW_READ ? "read" : "write",
                        writer, reader, info};
  redisReply *r = NULL;
  *local_reserved = false;
  *sent = dl_now_ms();
  int rc = l->c->backend->ops->eval(l->c->backend, DL_SCRIPT_RW_ACQUIRE, 2,
                                    keys, 6, args, &r);
  if (rc != 0) return rc;
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_INTEGER ||
      r->element[1]->type != REDIS_REPLY_INTEGER ||
      r->element[0]->integer < -1 || r->element[0]->integer > 2) {
    freeReplyObject(r);
    return dl_seterr(l->c, DLOCK_EPROTO, "unexpected reply to the acquire");
  }
  long long status = r->element[0]->integer, value = r->element[1]->integer;
  freeReplyObject(r);
  if (status == -1)
    return dl_seterr(l->c, DLOCK_EDEADLK, "this owner holds the read lock "
                     "of '%s': release it before asking for the write lock",
                     NAME(l));
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
static int attempt(dlock_lock *l, const char *owner, int64_t lease_ms,
                   bool starving, bool enqueue, uint64_t *token, int64_t *ttl,
                   bool *local_reserved, int64_t *sent) {
  char lease[DL_INT_BUF], count[DL_INT_BUF];
  dl_fmt_ll(lease, lease_ms);
  dl_fmt_ll(count, believed(l, owner));
  pthread_mutex_lock(&l->c->holds_mu);
  char *info = dl_strdup(l->info ? l->info : "");
  pthread_mutex_unlock(&l->c->holds_mu);
  if (info == NULL) return dl_seterr(l->c, DLOCK_ENOMEM, "out of memory");
  if (l->rw != RW_NONE) {
    int rc = rw_attempt(l, owner, lease, info, token, ttl, local_reserved,
                        sent);
    free(info);
    return rc;
  }
  bool fair = l->fair_ms > 0;
  char tk[DERIVED_MAX], hk[DERIVED_MAX], qk[DERIVED_MAX], tok[DERIVED_MAX];
  const char *keys[] = {l->key, TOKEN_KEY(l, tk), HANDOFF_KEY(l, hk),
                        fair ? QUEUE_KEY(l, qk) : GRANT_QUEUE_KEY(l, qk),
                        fair ? TIMEOUT_KEY(l, tok) : GRANT_WAITERS_KEY(l, tok)};
  char reserve[DL_INT_BUF], stale[DL_INT_BUF], alive[DL_INT_BUF];
  dl_fmt_ll(reserve, RESERVE_MS);
  dl_fmt_ll(stale, l->fair_ms);
  dl_fmt_ll(alive, GRANT_STALE_MS);
  const char *args[] = {lease, owner, info, count, starving ? "1" : "0",
                        reserve, stale, enqueue ? "1" : "0", alive};
  /* A plain lock's first attempt sends only what it needs. */
  int nkeys = fair || enqueue ? 5 : 3;
  int nargs = fair ? 8 : enqueue ? 9 : 6;
  redisReply *r = NULL;
  *sent = dl_now_ms();
  int rc = l->c->backend->ops->eval(l->c->backend, DL_SCRIPT_LOCK_ACQUIRE,
                                    nkeys, keys, nargs, args, &r);
  free(info);
  if (rc != 0) return rc;
  *local_reserved = false;
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
      r->element[0]->type != REDIS_REPLY_INTEGER ||
      r->element[1]->type != REDIS_REPLY_INTEGER) {
    freeReplyObject(r);
    return dl_seterr(l->c, DLOCK_EPROTO, "unexpected reply to the acquire");
  }
  long long status = r->element[0]->integer, value = r->element[1]->integer;
  if (status < 0 || status > 2) { /* found by the reply fuzzer */
    freeReplyObject(r);
    return dl_seterr(l->c, DLOCK_EPROTO, "unexpected status %lld in the "
                     "reply to the acquire", status);
  }
  if (r->elements == 3 && r->element[2]->type == REDIS_REPLY_STRING) {
    size_t idl = strlen(l->c->id);
    *local_reserved = strncmp(r->element[2]->str, l->c->id, idl) == 0 &&
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

/* Records a successful acquisition in the client's holds. Returns the
 * hold's token, or 0 with *err set. */
static uint64_t record(dlock_lock *l, const char *owner, int status,
                       uint64_t token, int64_t lease_ms, int64_t sent,
                       bool watchdog, int *err) {
  dlock_client *c = l->c;
  dl_hold *old = NULL;
  *err = 0;
  pthread_mutex_lock(&c->holds_mu);
  dl_hold *h = dl_hold_find(c, l->key, owner);
  if (h && (status == 1 || h->lost)) { /* a fresh hold */
    old = forget(c, h);
    h = NULL;
  }
  if (h == NULL && (h = dl_hold_add(c, l->key, owner)) == NULL) {
    *err = DLOCK_ENOMEM;
    pthread_mutex_unlock(&c->holds_mu);
    dl_hold_bury(c, old);
    return 0;
  }
  if (h->count == 0) {
    h->token = token;
    h->via = l;
    l->nholds++;
  }
  h->count++;
  h->lease_ms = lease_ms;
  /* The script set the lease when it ran, after `sent`. */
  h->valid_until = dl_validity(sent, lease_ms);
  /* Every hold is listed with the watchdog: renewed (the watchdog's lease),
   * or timed (a fixed lease: lost the moment it runs out unreleased). */
  if (h->renewal == NULL) {
    h->renewal = dl_watchdog_add(c->watchdog, h->key, h->tail, h->valid_until,
                                 watchdog);
    if (h->renewal == NULL) *err = DLOCK_ENOMEM;
  } else {
    dl_watchdog_extend(c->watchdog, h->renewal, h->valid_until, watchdog);
  }
  uint64_t tok = h->token;
  pthread_mutex_unlock(&c->holds_mu);
  dl_hold_bury(c, old);
  return tok;
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
static int release_script(dlock_lock *l, const char *owner, int64_t lease_ms,
                          int count) {
  dlock_client *c = l->c;
  char lease[DL_INT_BUF], cnt[DL_INT_BUF], keep[DL_INT_BUF];
  dl_fmt_ll(lease, lease_ms);
  dl_fmt_ll(cnt, count);
  dl_fmt_ll(keep, (long long)LATCH_TIMEOUTS * c->command_timeout_ms);
  char ch[DERIVED_MAX], qk[DERIVED_MAX], wk[DERIVED_MAX], tk[DERIVED_MAX],
      hk[DERIVED_MAX], latch[DERIVED_MAX + 48];
  /* "<derived latch name>:<nonce>:<seq>" (no snprintf: the hot path). */
  size_t n = strlen(derived(latch, "redisson_unlock_latch", l));
  latch[n++] = ':';
  memcpy(latch + n, c->release_nonce, 16);
  n += 16;
  latch[n++] = ':';
  dl_fmt_ll(latch + n, (long long)atomic_fetch_add(&c->release_seq, 1));
  redisReply *r = NULL;
  int rc;
  /* This handle's last acquire had to wait: others likely wait too, and the
   * message that wakes one of them goes out ahead of our reply. */
  int wake_first = atomic_load(&l->contended) ? DL_EVAL_WAKE_FIRST : 0;
  int script, nkeys, nargs;
  const char *keys[7], *args[6];
  int retry_arg; /* the argument that says a send is a retry */
  if (l->rw != RW_NONE) {
    script = DL_SCRIPT_RW_RELEASE;
    keys[0] = l->key;
    keys[1] = RW_CHANNEL(l, ch);
    keys[2] = latch;
    nkeys = 3;
    args[0] = owner;
    args[1] = l->rw == RW_READ ? "read" : "write";
    args[2] = lease;
    args[3] = keep;
    args[4] = "0";
    retry_arg = 4;
    nargs = 5;
  } else {
    /* The fair lock wakes its first waiter; the plain lock hands itself to
     * the first of its hand-off queue. */
    bool fair = l->fair_ms > 0;
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
  int64_t until = dl_now_ms() + c->command_timeout_ms;
  const char *const *k = keys, *const *a = args;
  for (int64_t pause = 0;; pause = pause ? 2 * pause : 5) {
    int err = 0;
    rc = c->backend->ops->eval_many(c->backend, until, 1, script | wake_first,
                                    &nkeys, &k, &nargs, &a, &r, &err);
    if (rc == 0) rc = err;
    int64_t left = until - dl_now_ms();
    if (rc == 0 || !release_retriable(rc) || left <= 0 ||
        atomic_load(&c->closing))
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
    rc = dl_seterr(c, DLOCK_EPROTO, "unexpected reply to the release");
  freeReplyObject(r);
  return rc;
}

int dl_lock_owner(dlock_lock *l, char *buf) {
  int n = dl_owner_id(l->c, l->owner, buf, OWNER_MAX - 6);
  if (n >= 0 && l->rw == RW_WRITE) memcpy(buf + n, ":write", 7);
  return n < 0 ? dl_seterr(l->c, DLOCK_EINVAL, "owner id too long") : 0;
}

/* The channels a waiter listens on (each OWNER_CHANNEL_MAX bytes): the
 * unlock channel, or a fair lock's waiter's own (a release tells only the
 * first of the queue); and the plain lock's waiter's own grant channel,
 * where a release hands it the lock. */
static void wait_channels(const dlock_lock *l, const char *owner, char *ch,
                          char *gch) {
  if (l->rw != RW_NONE) RW_CHANNEL(l, ch);
  else if (l->fair_ms > 0) owner_channel(ch, l, owner);
  else CHANNEL(l, ch);
  if (l->fair_ms <= 0 && l->rw == RW_NONE) owner_channel(gch, l, owner);
}

int dlock_lock_try_acquire(dlock_lock *l, int64_t wait_ms, int64_t lease_ms,
                           uint64_t *token) {
  if (l == NULL) return DLOCK_EINVAL;
  dlock_client *c = l->c;
  if (atomic_load(&c->closing))
    return dl_seterr(c, DLOCK_ECLOSED, "the client is closing");
  char owner[OWNER_MAX];
  int rc = dl_lock_owner(l, owner);
  if (rc != 0) return rc;
  bool watchdog = lease_ms <= 0;
  if (watchdog) lease_ms = c->watchdog_timeout_ms;
  int64_t start = dl_now_ms();
  int64_t deadline = wait_ms < 0 ? INT64_MAX : start + wait_ms;
  uint64_t tok = 0;
  int64_t ttl = 0, sent = 0;

  bool reserved = false, fair = l->fair_ms > 0;
  const dl_backend_ops *ops = c->backend->ops;
  /* A plain lock's waiter joins the hand-off queue only once it can hear
   * its grant channel (not when polling, nor without a subscription). */
  char ch[OWNER_CHANNEL_MAX], gch[OWNER_CHANNEL_MAX];
  bool grants = !fair && l->rw == RW_NONE;
  dl_sub *sub = NULL, *grant = NULL;
  bool queued = false;
  int64_t queued_sent = 0; /* when the last attempt that queued us went */
  /* The last acquire through this handle had to wait: if both channels are
   * still subscribed (they linger), queue at the first attempt. */
  if (grants && wait_ms != 0 && atomic_load(&l->contended)) {
    wait_channels(l, owner, ch, gch);
    sub = ops->sub_ref(c->backend, ch, DL_WAKE_LOCK, -1);
    if (sub) grant = ops->sub_ref(c->backend, gch, DL_WAKE_GRANT, -1);
    if (grant) queued = ops->sub_grant(c->backend, grant, NULL) == 0;
  }
  /* A fair lock's one-shot try does not join the queue (as Redisson's
   * tryLock() without a wait). */
  rc = attempt(l, owner, lease_ms, false, (fair && wait_ms != 0) || queued,
               &tok, &ttl, &reserved, &sent);
  if (rc == 0 && queued) queued_sent = sent;
  if (rc == 0 && wait_ms != 0) atomic_store(&l->contended, true);
  else if (rc > 0 && atomic_load(&l->contended))
    atomic_store(&l->contended, false);
  bool starving = false;
  if (rc == 0 && wait_ms != 0) {
    /* Subscribe first, then try again: an unlock between our failed attempt
     * and the subscription would otherwise go unheard. Each sleep is bounded
     * by the holder's TTL, so even a lost message costs at most that. */
    bool again = !queued; /* no need when the attempt queued us */
    if (sub == NULL) {
      wait_channels(l, owner, ch, gch);
      sub = ops->sub_ref(c->backend, ch, DL_WAKE_LOCK, deadline);
    }
    if (grant == NULL && grants && sub != NULL)
      grant = ops->sub_ref(c->backend, gch, DL_WAKE_GRANT, deadline);
    for (;;) {
      /* Queued once the grant channel is heard; the subscriber connection
       * may come up (or back) while we wait. */
      if (!queued && grant != NULL)
        queued = ops->sub_grant(c->backend, grant, NULL) == 0;
      /* A queued waiter is served in turn: no reservation needed. */
      starving = grants && !queued && c->starvation_ms > 0 &&
                 dl_now_ms() - start >= c->starvation_ms;
      if (again) {
        rc = attempt(l, owner, lease_ms, starving, fair || queued, &tok, &ttl,
                     &reserved, &sent);
        if (rc == 0 && queued) queued_sent = sent;
        if (rc != 0) break;
      }
      again = true;
      /* Free, but reserved for a starving thread of this process that the
       * unlock message did not wake: wake it (and the others asleep). */
      if (reserved) ops->sub_kick(c->backend, sub);
      int64_t now = dl_now_ms();
      if (now >= deadline) break;
      if (ttl == -2 && !fair) continue; /* freed since: try again at once */
      int64_t until = deadline;
      if (ttl >= 0 && now + ttl + 1 < until) until = now + ttl + 1;
      /* A queued waiter attempts often enough to keep its place (each
       * attempt is its heartbeat), and to notice a dead first waiter. */
      if (fair && now + l->fair_ms / 3 < until) until = now + l->fair_ms / 3;
      /* Past the starvation threshold, attempt (to reserve the hand-off)
       * as soon as it is reached, then often enough to keep the
       * reservation. */
      if (starving && now + RESERVE_MS / 3 < until) until = now + RESERVE_MS / 3;
      if (!starving && !queued && grants && c->starvation_ms > 0 &&
          start + c->starvation_ms + 1 < until)
        until = start + c->starvation_ms + 1;
      /* A queued waiter proves it is alive, and renews the lease it will
       * be granted with, often enough (see record() below). */
      if (queued) {
        int64_t beat = GRANT_STALE_MS / 3;
        if (lease_ms / 3 < beat) beat = lease_ms / 3 > 0 ? lease_ms / 3 : 1;
        if (now + beat < until) until = now + beat;
      }
      int w = ops->sub_wait(c->backend, sub, until, start, grant);
      if (queued && ops->sub_grant(c->backend, grant, &tok) == 1) {
        /* Handed over by a release: the lease began after our last
         * attempt was sent. */
        rc = 1;
        sent = queued_sent;
        queued = false;
        break;
      }
      if (w < 0) {
        rc = dl_seterr(c, w, "the client closed while waiting");
        break;
      }
    }
  }
  /* Taken by a queued attempt: the script took us off the queue. */
  if (rc > 0) queued = false;
  bool left = true; /* not (or no longer) in the hand-off queue */
  if (queued) { /* gave up: leave the hand-off queue */
    left = false;
    char qk[DERIVED_MAX], wk[DERIVED_MAX];
    const char *k[] = {l->key, GRANT_QUEUE_KEY(l, qk), GRANT_WAITERS_KEY(l, wk)};
    const char *a[] = {owner};
    redisReply *r = NULL;
    if (ops->eval(c->backend, DL_SCRIPT_LOCK_CANCEL, 3, k, 1, a, &r) == 0) {
      /* Handed over as we gave up (the grant is in flight or was lost):
       * give it back rather than leave it held until its lease ends. */
      bool handed = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
      freeReplyObject(r);
      if (handed) release_script(l, owner, lease_ms, 1);
      left = true;
    }
  }
  /* Still queued (the server did not answer): unsubscribe the grant channel
   * now, so that a release finds us deaf and skips us. */
  if (grant) ops->sub_unref(c->backend, grant, left);
  if (sub) ops->sub_unref(c->backend, sub, true);
  if (fair && wait_ms != 0 && rc <= 0) { /* gave up: leave the queue */
    char ch2[DERIVED_MAX], qk[DERIVED_MAX], tk[DERIVED_MAX];
    const char *k[] = {l->key, CHANNEL(l, ch2), QUEUE_KEY(l, qk),
                       TIMEOUT_KEY(l, tk)};
    const char *a[] = {owner, UNLOCK_MESSAGE};
    redisReply *r = NULL;
    if (ops->eval(c->backend, DL_SCRIPT_FAIR_CANCEL, 4, k, 2, a, &r) == 0)
      freeReplyObject(r);
  }
  if (starving && rc <= 0) { /* gave up: free the hand-off for others */
    char hk[DERIVED_MAX];
    const char *k[] = {HANDOFF_KEY(l, hk)};
    const char *a[] = {owner};
    redisReply *r = NULL;
    if (ops->eval(c->backend, DL_SCRIPT_LOCK_UNRESERVE, 1, k, 1, a, &r) == 0)
      freeReplyObject(r);
  }
  if (rc == 0)
    return dl_seterr(c, DLOCK_ELOCKED, "'%s' is held by another owner "
                     "(remaining lease %lld ms)", NAME(l), (long long)ttl);
  if (rc < 0) return rc;
  int err;
  tok = record(l, owner, rc, tok, lease_ms, sent, watchdog, &err);
  if (err != 0) {
    /* Cannot track it: give it back rather than hold it unseen. */
    dlock_lock_release(l);
    return dl_seterr(c, err, "out of memory");
  }
  if (dl_now_ms() >= dl_validity(sent, lease_ms)) {
    /* The reply came so late that the lease may already have run out on
     * the server: never report a lock that may have expired as taken. */
    dlock_lock_release(l);
    return dl_seterr(c, DLOCK_ETIMEDOUT, "'%s' was granted, but the reply "
                     "came after its %lld ms lease could have run out",
                     NAME(l), (long long)lease_ms);
  }
  if (token) *token = tok;
  dl_clearerr(c);
  return 0;
}

int dlock_lock_acquire(dlock_lock *l, int64_t lease_ms, uint64_t *token) {
  return dlock_lock_try_acquire(l, -1, lease_ms, token);
}

int dlock_lock_release(dlock_lock *l) {
  if (l == NULL) return DLOCK_EINVAL;
  dlock_client *c = l->c;
  char owner[OWNER_MAX];
  int rc = dl_lock_owner(l, owner);
  if (rc != 0) return rc;
  dl_watchdog *w = c->watchdog;
  pthread_mutex_lock(&c->holds_mu);
  dl_hold *h = dl_hold_find(c, l->key, owner);
  if (h && h->lost) {
    /* Reported lost, perhaps only because its validity ran out here: if the
     * server still has it, free it now (the script checks the owner). */
    dl_hold *old = forget(c, h);
    pthread_mutex_unlock(&c->holds_mu);
    dl_hold_bury(c, old);
    release_script(l, owner, c->watchdog_timeout_ms, 1);
    return dl_seterr(c, DLOCK_ELOST, "'%s' was lost before this release",
                     NAME(l));
  }
  int64_t lease = h ? h->lease_ms : c->watchdog_timeout_ms;
  int count = h ? h->count : 0;
  dl_renewal *ren = h ? h->renewal : NULL;
  dl_watchdog_release_begin(w, ren);
  pthread_mutex_unlock(&c->holds_mu);

  rc = release_script(l, owner, lease, count);

  pthread_mutex_lock(&c->holds_mu);
  dl_watchdog_release_end(w, ren);
  h = dl_hold_find(c, l->key, owner);
  dl_hold *old = NULL;
  if (rc == 1 || rc == DLOCK_ENOTOWNER) {
    bool had = h != NULL;
    if (h) old = forget(c, h);
    if (rc == DLOCK_ENOTOWNER)
      rc = had ? dl_seterr(c, DLOCK_ELOST, "'%s' expired or was taken "
                           "before this release", NAME(l))
               : dl_seterr(c, DLOCK_ENOTOWNER, "'%s' is not held by %s",
                           NAME(l), owner);
  } else if (rc == 0 && h && h->count > 1) {
    h->count--;
  } else if (rc < 0 && h && h->count <= 1) {
    /* The last release failed (server unreachable, timeout): the caller
     * meant to let go, so the hold ends here and is no longer renewed.
     * Unless a retry reaches the server first, the lease frees the lock; a
     * new acquire takes it afresh, with a new token, rather than re-enter a
     * hold the caller gave up (found by the safety suite's soak). */
    old = forget(c, h);
  }
  pthread_mutex_unlock(&c->holds_mu);
  dl_hold_bury(c, old);
  if (rc >= 0) dl_clearerr(c);
  return rc;
}

int dlock_lock_force_release(dlock_lock *l) {
  if (l == NULL) return DLOCK_EINVAL;
  char ch[DERIVED_MAX], qk[DERIVED_MAX];
  bool rw = l->rw != RW_NONE;
  const char *keys[] = {l->key, rw ? RW_CHANNEL(l, ch) : CHANNEL(l, ch),
                        QUEUE_KEY(l, qk)};
  /* A write unlock's "1" wakes every waiter of a read-write lock. */
  const char *args[] = {rw ? "1" : UNLOCK_MESSAGE, rw ? "rwlock" : "lock",
                        l->c->revoke_channel};
  redisReply *r = NULL;
  int rc = l->c->backend->ops->eval(l->c->backend, DL_SCRIPT_LOCK_FORCE_RELEASE,
                                    l->fair_ms > 0 ? 3 : 2, keys, 3, args, &r);
  if (rc != 0) return rc; /* DLOCK_EWRONGTYPE: not a lock of this kind */
  /* 1 deleted, 0 nothing to delete; anything else is not our script's
   * answer (found by the reply fuzzer: a negative number passed through as
   * if it were an error code). */
  rc = r->type == REDIS_REPLY_INTEGER && (r->integer == 0 || r->integer == 1)
           ? (int)r->integer
           : dl_seterr(l->c, DLOCK_EPROTO, "unexpected reply to the force "
                       "release");
  freeReplyObject(r);
  if (rc >= 0) dl_clearerr(l->c);
  return rc;
}

int dlock_lock_validity(dlock_lock *l, int64_t *ms) {
  if (ms) *ms = 0;
  if (l == NULL) return DLOCK_EINVAL;
  char owner[OWNER_MAX];
  int rc = dl_lock_owner(l, owner);
  if (rc != 0) return rc;
  pthread_mutex_lock(&l->c->holds_mu);
  dl_hold *h = dl_hold_find(l->c, l->key, owner);
  int64_t left = h ? dl_hold_valid_until(l->c, h) - dl_now_ms() : 0;
  bool lost = h && h->lost;
  pthread_mutex_unlock(&l->c->holds_mu);
  if (h == NULL) return DLOCK_ENOTOWNER;
  if (lost || left <= 0) return DLOCK_ELOST;
  if (ms) *ms = left;
  return 0;
}

int dlock_lock_is_lost(dlock_lock *l) {
  return dlock_lock_validity(l, NULL) == DLOCK_ELOST;
}
