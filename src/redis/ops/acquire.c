/* acquire.c: the acquire of the Redis lock family (rlock.h, release.c) and
 * its waiting algorithm: pub/sub on the unlock channel, the plain lock's
 * hand-off queue with grants on the waiter's own channel, reservations for
 * starving waiters, the fair lock's queue; one state machine for both
 * drivers. */
#include "rlock.h"

#include <hiredis/hiredis.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A starving waiter's hand-off reservation lasts this long, renewed at each
 * attempt; a starving waiter attempts at least every RESERVE_MS / 3. So a
 * waiter that dies blocks a free lock for at most this long. */
#define RESERVE_MS 600
/* A plain string lock's waiter also polls (its peers, redsync or npm
 * redlock, delete without a message): sleeps of 1, 2, 4 ... up to this many
 * ms, each drawn in [d/2, d] (dl_backoff), unless the client's own
 * wait_backoff_max_ms is set. A dlock releaser's message still wakes it at
 * once. */
#define PLAIN_POLL_MAX_MS 64
/* An acquire without a wait limit rides out failures (ride_out) for this
 * many command timeouts (30 s by default), as Redisson's retry attempts
 * end. */
#define RIDE_TIMEOUTS 10
/* ---- acquire, a state machine (see dl_pend) ---- */

/* Where an acquire is: which step it waits for. */
typedef enum acq_state {
  ACQ_FIRST,     /* the first attempt's reply */
  ACQ_SUBBED,    /* the unlock channel's subscription */
  ACQ_GRANTS,    /* the grant channel's */
  ACQ_LOOP,      /* the top of the wait */
  ACQ_ATTEMPTED, /* an attempt's reply, while waiting */
  ACQ_RIDDEN,    /* the pause after an attempt the deployment failed */
  ACQ_WAITED,    /* a wake-up, or the sleep's end */
  ACQ_CANCELLED, /* leaving the hand-off queue */
  ACQ_GIVEN,     /* giving back a grant that came as we gave up */
  ACQ_UNSUB,     /* the subscriptions go, then the fair queue */
  ACQ_FAIR_LEFT, /* leaving the fair queue */
  ACQ_UNRESERVE,
  ACQ_UNRESERVED, /* freeing the hand-off reservation */
  ACQ_NOTED,      /* the waiter's record written (waits.c) */
  ACQ_CLEARED,    /* and deleted */
  ACQ_WALK,
  ACQ_WALKED /* detect_deadlocks: following the owners */
} acq_state;

typedef struct acq_op {
  dl_redis *R;
  dl_acquire *a;
  acq_state st;
  int64_t start, end; /* end: every request answered by then (0: none) */
  int rc;
  uint64_t tok;
  /* The highest fencing-token counter a refused queued attempt of this
   * wait found: a grant at or below it is not this wait's (ACQ_WAITED). */
  uint64_t seen;
  int64_t ttl, sent;
  int64_t queued_sent; /* when the last attempt that queued us went */
  /* deaf: the last attempt went before our subscription was confirmed */
  bool reserved, grants, queued, starving, again, left, deaf;
  dl_wait_rec rec; /* the waiter's record (waits.c) */
  dl_sub *sub, *grant;
  dl_backoff poll;   /* a plain string lock's polling */
  int64_t ride;      /* the last pause riding out a failover (0: none yet) */
  int64_t ride_since; /* when the failures ridden out began */
  acq_state ride_to; /* where the attempt after it goes */
  dl_pend p;
  dl_rlock_rel rel;
  char ch[OWNER_CHANNEL_MAX], gch[OWNER_CHANNEL_MAX]; /* last: not zeroed */
  /* detect_deadlocks' walk (waits.c), not zeroed either: set up when used */
  dl_wait_walk walk;
} acq_op;

/* A queued waiter's heartbeat (rlock.h) at `now`. */
#define grant_beat(o, now) dl_grant_beat((now) - (o)->start, (o)->a->lease_ms)

/* Sends one attempt at a side of a read-write lock. */
static int rw_send(acq_op *o, const char *lease) {
  const dl_lock_ref *l = o->a->lock;
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
  const char *args[] = {
      lease,  owner,  l->kind == DL_KIND_READ ? "read" : "write",
      writer, reader, o->a->info};
  return dl_redis_step_eval(o->R, &o->p, o->end, DL_SCRIPT_RW_ACQUIRE, 2, keys,
                            6, args);
}

/* Sends one attempt; the next state is `next`. `enqueue`: if refused, join
 * (or stay in) the fair lock's queue, or the plain lock's hand-off queue.
 * Returns 0 or DL_PENDING. */
static int attempt_send(acq_op *o, acq_state next, bool enqueue) {
  const dl_acquire *a = o->a;
  const dl_lock_ref *l = a->lock;
  char lease[DL_INT_BUF], count[DL_INT_BUF];
  dl_fmt_ll(lease, a->lease_ms);
  o->st = next;
  o->sent = dl_now_ms();
  o->deaf = !o->sub || o->R->link->ops->sub_grant(o->R->link, o->sub, 0) < 0;
  if (is_rw(l)) return rw_send(o, lease);
  /* A server of a Redlock: its restart delay, ARGV[10], the token
   * proposed, ARGV[11], and the waiter's record, ARGV[12..14] (see the
   * script). Only what is sent is formatted (the hot path: one test). */
  char young[DL_INT_BUF], propose[DL_INT_BUF];
  int extra = o->R->part ? dl_redis_part_args(o->R, a, young, propose) : 0;
  if (l->kind == DL_KIND_PLAIN) {
    char ptk[DL_DERIVED_MAX];
    const char *pkeys[] = {l->key, TOKEN_KEY(l, ptk)};
    const char *pargs[] = {lease, l->owner, a->info, count, "",     "",
                           "",    "",       "",      young, propose};
    dl_fmt_ll(count, a->held);
    if (extra == 14)
      return dl_redis_part_eval(o->R, &o->p, o->end, a, 2, pkeys, pargs);
    return dl_redis_step_eval(o->R, &o->p, o->end, DL_SCRIPT_LOCK_ACQUIRE, 2,
                              pkeys, extra ? extra : 4, pargs);
  }
  bool fair = l->kind == DL_KIND_FAIR;
  /* A plain lock's first attempt sends only what it needs: every
   * argument carried costs the server about as much as a fifth of a
   * command (tests/test_cost.sh), so the defaults at the end (no holder
   * info, no count, not starving) are left out. */
  int nkeys = fair || enqueue ? 5 : 3;
  int nargs = extra ? extra : fair ? 8 : enqueue ? 9 : 6;
  if (nargs == 6 && !o->starving)
    nargs = a->held != 0 ? 4 : a->info[0] ? 3 : 2;
  char tk[DL_DERIVED_MAX], hk[DL_DERIVED_MAX], qk[DL_DERIVED_MAX],
      tok[DL_DERIVED_MAX];
  const char *keys[] = {l->key, TOKEN_KEY(l, tk), HANDOFF_KEY(l, hk), qk, tok};
  if (nkeys == 5) {
    if (fair) {
      QUEUE_KEY(l, qk);
      TIMEOUT_KEY(l, tok);
    } else {
      GRANT_QUEUE_KEY(l, qk);
      GRANT_WAITERS_KEY(l, tok);
    }
  }
  char reserve[DL_INT_BUF], stale[DL_INT_BUF], alive[DL_INT_BUF];
  if (nargs >= 4) dl_fmt_ll(count, a->held);
  if (nargs >= 6) dl_fmt_ll(reserve, RESERVE_MS);
  if (nargs >= 7) dl_fmt_ll(stale, l->fair_stale_ms);
  if (nargs >= 9) dl_fmt_ll(alive, 3 * grant_beat(o, o->sent));
  const char *args[] = {lease,
                        l->owner,
                        a->info,
                        count,
                        o->starving ? "1" : "0",
                        reserve,
                        stale,
                        enqueue ? "1" : "0",
                        alive,
                        young,
                        propose};
  if (extra == 14)
    return dl_redis_part_eval(o->R, &o->p, o->end, a, nkeys, keys, args);
  return dl_redis_step_eval(o->R, &o->p, o->end, DL_SCRIPT_LOCK_ACQUIRE, nkeys,
                            keys, nargs, args);
}

/* An attempt's answer: 1 and o->tok when acquired (2 re-entered), 0 and
 * the holder's PTTL in o->ttl when another owner holds it (o->reserved: the
 * lock is free but reserved for a starving waiter of this client), or a
 * negative code. */
static int attempt_result(acq_op *o) {
  dl_redis *R = o->R;
  const dl_lock_ref *l = o->a->lock;
  if (o->p.rc != 0) return o->p.rc;
  redisReply *r = o->p.reply;
  o->p.reply = NULL;
  o->reserved = false;
  long long status = -2, value = 0;
  if (r->type == REDIS_REPLY_INTEGER && !is_rw(l)) { /* taken: the token */
    status = 1;
    value = r->integer;
  } else if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2 &&
             r->element[0]->type == REDIS_REPLY_INTEGER &&
             r->element[1]->type == REDIS_REPLY_INTEGER) {
    status = r->element[0]->integer;
    value = r->element[1]->integer;
  }
  /* Found by the reply fuzzer: statuses our scripts never send. */
  if (status < (is_rw(l) ? -1 : 0) || status > 2 ||
      (is_rw(l) && r->elements != 2)) {
    freeReplyObject(r);
    return dl_seterr(R->env.err_owner, DLOCK_EPROTO,
                     "unexpected reply to the acquire");
  }
  if (r->elements >= 3 && r->element[2]->type == REDIS_REPLY_STRING) {
    size_t idl = strlen(R->env.client_id);
    o->reserved = strncmp(r->element[2]->str, R->env.client_id, idl) == 0 &&
                  r->element[2]->str[idl] == ':';
  }
  /* A queued waiter refused: the counter as the attempt found it. */
  if (status == 0 && r->elements >= 4 &&
      r->element[3]->type == REDIS_REPLY_INTEGER &&
      r->element[3]->integer > 0 && (uint64_t)r->element[3]->integer > o->seen)
    o->seen = (uint64_t)r->element[3]->integer;
  freeReplyObject(r);
  if (status == -1)
    return dl_seterr(R->env.err_owner, DLOCK_EDEADLK,
                     "this owner holds the read lock of '%s': release it "
                     "before asking for the write lock",
                     l->name);
  if (status == 0) {
    o->ttl = dl_redis_ttl(value);
    return 0;
  }
  o->tok = (uint64_t)value;
  return (int)status; /* 1 taken, 2 re-entered */
}

/* The channels a waiter listens on (each OWNER_CHANNEL_MAX bytes): the
 * unlock channel, or a fair lock's waiter's own (a release tells only the
 * first of the queue); and the plain lock's waiter's own grant channel,
 * where a release hands it the lock. */
static void wait_channels(const dl_lock_ref *l, const char *owner, char *ch,
                          char *gch) {
  if (is_rw(l))
    RW_CHANNEL(l, ch);
  else if (l->kind == DL_KIND_FAIR)
    owner_channel(ch, l, owner);
  else
    CHANNEL(l, ch);
  if (l->kind == DL_KIND_LOCK) owner_channel(gch, l, owner);
}

/* Sends a script of the way out (leaving a queue, freeing a reservation);
 * the next state is `next`. */
static int leave_send(acq_op *o, acq_state next, int script, int nkeys,
                      const char *const *keys, int nargs,
                      const char *const *args) {
  o->st = next;
  return dl_redis_step_eval(o->R, &o->p, o->end, script, nkeys, keys, nargs,
                            args);
}

static void drop_reply(acq_op *o) {
  if (o->p.reply) freeReplyObject(o->p.reply);
  o->p.reply = NULL;
}

/* Starts an acquire: o->a is the request (and gets the result). */
static void acq_init(acq_op *o, dl_redis *R, dl_acquire *a) {
  memset(o, 0, offsetof(acq_op, ch));
  o->ch[0] = o->gch[0] = '\0';
  o->R = R;
  o->a = a;
  o->start = dl_now_ms();
  /* Every request, leaving the wait included, is answered by one command
   * timeout after the deadline at the latest. */
  int64_t deadline = a->deadline;
  o->end = deadline == INT64_MAX ? 0
                                 : (deadline > o->start ? deadline : o->start) +
                                       R->env.command_timeout_ms;
  /* A plain lock's waiter joins the hand-off queue only once it can hear
   * its grant channel (not when polling, nor without a subscription). */
  o->grants = a->lock->kind == DL_KIND_LOCK;
  o->left = true;
  dl_backoff_init(&o->poll);
}

/* Whether a waiting acquire rides out its attempt's failure rc (a
 * failover, a resharding, a reconnect: the master unreachable, demoted,
 * loading, or the cluster down) by trying again after a pause, within its
 * wait, as Redisson's retry attempts do. An attempt whose reply was lost
 * may have run: the script takes the hold afresh when the client knows of
 * none (ARGV[4]), so a retry is safe. Sets the pause's end in *pause_end. */
static bool ride_out(acq_op *o, int rc, int64_t *pause_end) {
  const dl_acquire *a = o->a;
  if (!a->wait || !o->R->ride || atomic_load(o->R->env.closing))
    return false;
  bool transient = rc == DLOCK_ETIMEDOUT || dl_rlock_transient(o->R, rc);
  int64_t now = dl_now_ms();
  if (o->ride == 0) o->ride_since = now;
  o->ride = o->ride ? (o->ride * 2 > 200 ? 200 : o->ride * 2) : 10;
  /* A wait without a limit rides out RIDE_TIMEOUTS command timeouts of
   * failures at most: an outage that long is reported, not hidden. */
  if (a->deadline == INT64_MAX &&
      now - o->ride_since >= RIDE_TIMEOUTS * o->R->env.command_timeout_ms)
    return false;
  if (!transient || now + o->ride >= a->deadline) return false;
  *pause_end = now + o->ride;
  return true;
}

/* Runs the acquire from where it stands until it waits on a step
 * (DL_PENDING) or ends: 1 acquired (a->status, token, valid_until), 0
 * refused until the deadline (a->ttl), or a negative code. */
static int acq_step(acq_op *o) {
  dl_redis *R = o->R;
  dl_acquire *a = o->a;
  const dl_lock_ref *l = a->lock;
  const dl_rlink_ops *ops = R->link->ops;
  bool fair = l->kind == DL_KIND_FAIR;
  int64_t deadline = a->deadline, pause_end = 0;
  for (;;) {
    switch (o->st) {
    case ACQ_FIRST:
      o->rc = attempt_result(o);
      if (o->rc < 0 && ride_out(o, o->rc, &pause_end)) {
        o->ride_to = ACQ_FIRST;
        goto ride;
      }
      if (o->rc >= 0) o->ride = 0;
      if (o->rc == 0 && o->queued) o->queued_sent = o->sent;
      if (o->rc == 0 && a->wait) {
        atomic_fetch_or(l->hint, HINT_CONTENDED);
        a->waited = true;
      } else if (o->rc > 0 && contended(l))
        atomic_fetch_and(l->hint, ~HINT_CONTENDED);
      if (o->rc != 0 || !a->wait) {
        o->st = ACQ_UNSUB;
        continue;
      }
      /* Subscribe first, then try again: an unlock between our failed
       * attempt and the subscription would otherwise go unheard. Each sleep
       * is bounded by the holder's TTL, so even a lost message costs at
       * most that. */
      o->again = !o->queued; /* no need when the attempt queued us */
      if (o->sub == NULL) {
        wait_channels(l, l->owner, o->ch, o->gch);
        o->st = ACQ_SUBBED;
        if (dl_redis_step_sub_ref(R, &o->p, o->ch, DL_WAKE_LOCK, deadline) ==
            DL_PENDING)
          return DL_PENDING;
        continue;
      }
      o->p.sub = o->sub; /* still subscribed from the last wait */
      o->st = ACQ_SUBBED;
      continue;
    case ACQ_SUBBED:
      o->sub = o->p.sub;
      o->p.sub = NULL;
      o->st = ACQ_GRANTS;
      if (o->grant == NULL && o->grants && o->sub != NULL &&
          dl_redis_step_sub_ref(R, &o->p, o->gch, DL_WAKE_GRANT, deadline) ==
              DL_PENDING)
        return DL_PENDING;
      continue;
    case ACQ_GRANTS:
      if (o->grant == NULL) o->grant = o->p.sub;
      o->p.sub = NULL;
      o->st = ACQ_LOOP;
      continue;
    case ACQ_LOOP:
      if (atomic_load(R->env.closing)) goto closed; /* shut down: no attempt */
      /* Queued once the grant channel is heard; the subscriber connection
       * may come up (or back) while we wait. */
      if (!o->queued && o->grant != NULL)
        o->queued = ops->sub_grant(R->link, o->grant, NULL) == 0;
      /* A queued waiter is served in turn: no reservation needed. */
      o->starving = o->grants && !o->queued && R->starvation_ms > 0 &&
                    dl_now_ms() - o->start >= R->starvation_ms;
      if (o->again) {
        if (attempt_send(o, ACQ_ATTEMPTED, fair || o->queued) == DL_PENDING)
          return DL_PENDING;
        continue;
      }
      o->again = true;
      goto doze;
    case ACQ_ATTEMPTED:
      o->rc = attempt_result(o);
      if (o->rc < 0 && ride_out(o, o->rc, &pause_end)) {
        o->ride_to = ACQ_ATTEMPTED;
        goto ride;
      }
      if (o->rc >= 0) o->ride = 0;
      if (o->rc == 0 && o->queued) o->queued_sent = o->sent;
      if (o->rc > 0 && atomic_load(R->env.closing)) {
        /* Taken by an attempt sent before a shutdown: a hold nobody would
         * renew or release. Given back; the wait ends closed. (A wait's
         * attempts take the lock afresh: count 1.) */
        o->queued = false; /* the script took us off the queue */
        o->rc = dl_seterr(R->env.err_owner, DLOCK_ECLOSED, "the client closed");
        o->st = ACQ_GIVEN;
        if (dl_rlock_rel_start(&o->rel, R, l, a->lease_ms, 1, o->end) ==
            DL_PENDING)
          return DL_PENDING;
        continue;
      }
      if (o->rc != 0) goto out;
    doze : {
      /* Free, but reserved for a starving thread of this process that the
       * unlock message did not wake: wake it (and the others asleep). */
      if (o->reserved) ops->sub_kick(R->link, o->sub);
      int64_t now = dl_now_ms();
      if (now >= deadline) goto out;
      /* The waiter's record (waits.c), before the sleep: after the
       * attempts that queue it, not between them and its subscriptions. */
      if (dl_wait_rec_due(&o->rec, o->start, a->detect)) {
        o->st = ACQ_NOTED;
        if (dl_redis_wait_note(R, &o->p, a) == DL_PENDING) return DL_PENDING;
        continue;
      }
      /* Freed since: try again at once. */
      if (o->ttl == DLOCK_TTL_FREE && !fair) {
        o->st = ACQ_LOOP;
        continue;
      }
      int64_t until = deadline;
      if (o->ttl >= 0 && now + o->ttl + 1 < until) until = now + o->ttl + 1;
      /* A queued waiter attempts often enough to keep its place (each
       * attempt is its heartbeat), and to notice a dead first waiter. */
      if (fair && now + l->fair_stale_ms / 3 < until)
        until = now + l->fair_stale_ms / 3;
      /* Past the starvation threshold, attempt (to reserve the hand-off)
       * as soon as it is reached, then often enough to keep the
       * reservation. */
      if (o->starving && now + RESERVE_MS / 3 < until)
        until = now + RESERVE_MS / 3;
      if (!o->starving && !o->queued && o->grants && R->starvation_ms > 0 &&
          o->start + R->starvation_ms + 1 < until)
        until = o->start + R->starvation_ms + 1;
      /* A queued waiter proves it is alive often enough. */
      if (o->queued && o->sent + grant_beat(o, o->sent) < until)
        until = o->sent + grant_beat(o, o->sent);
      until = dl_wait_rec_until(&o->rec, o->start, a->detect, until);
      /* A plain string lock may be freed by a peer without a message; a
       * release after an attempt sent while deaf may have gone unheard. */
      if (l->kind == DL_KIND_PLAIN || o->deaf) {
        int64_t max = R->cfg.backoff_max_ms > 0 ? R->cfg.backoff_max_ms
                                                : PLAIN_POLL_MAX_MS;
        int64_t at = now + dl_backoff_next(&o->poll, max);
        if (at < until) until = at;
      }
      o->st = ACQ_WAITED;
      if (dl_redis_step_sub_wait(R, &o->p, o->sub, until, o->start, o->grant) ==
          DL_PENDING)
        return DL_PENDING;
      continue;
    }
    ride:
      o->st = ACQ_RIDDEN;
      if (dl_redis_step_pause(R, &o->p, pause_end) == DL_PENDING)
        return DL_PENDING;
      continue;
    case ACQ_RIDDEN:
      /* The attempt again, as the one that failed was sent. */
      if (attempt_send(o, o->ride_to,
                       o->ride_to == ACQ_FIRST
                           ? (fair && a->wait) || o->queued
                           : fair || o->queued) == DL_PENDING)
        return DL_PENDING;
      continue;
    case ACQ_NOTED:
      dl_wait_rec_noted(&o->rec, &o->p); /* takes the reply */
      /* detect_deadlocks, once the record is there (waits.c) */
      if (!dl_wait_walk_start(&o->walk, &o->rec, a, &R->env)) goto doze;
      /* fall through */
    case ACQ_WALK: /* the walk's next request */
      o->st = ACQ_WALKED;
      if (dl_wait_walk_send(R, &o->p, &o->walk) == DL_PENDING)
        return DL_PENDING;
      continue;
    case ACQ_WALKED: /* its answer: more to follow (1), none (0), EDEADLK */
      o->rc = dl_wait_walk_result(R, &o->p, &o->walk);
      if (o->rc < 0) goto out;
      o->st = ACQ_WALK;
      if (o->rc) continue;
      goto doze; /* no cycle (o->rc 0, refused) */
    case ACQ_WAITED: {
      uint64_t granted = 0;
      /* Shut down: no hand-off taken (the way out gives one back). */
      if (atomic_load(R->env.closing)) goto closed;
      /* A grant whose token is at or below the counter that a refused
       * attempt of this wait found was made before that attempt ran: not
       * to this wait (then the attempt would have found the lock its own),
       * but to an earlier wait of this owner, whose message came late on
       * the channel they share (it lingers between waits). That hold was
       * taken afresh by a later attempt, or given back, or has expired:
       * taking it now would hold a stale token, perhaps beside the holder.
       * It is dropped, and the wait tries again. A release's grant takes
       * the counter's next value, so this wait's own grant is above. */
      if (o->queued && ops->sub_grant(R->link, o->grant, &granted) == 1 &&
          granted > o->seen) {
        /* Handed over by a release: the lease began after our last
         * attempt was sent. */
        o->tok = granted;
        o->rc = 1;
        o->sent = o->queued_sent;
        o->queued = false;
        goto out;
      }
      if (o->p.rc < 0) {
        o->rc = dl_seterr(R->env.err_owner, o->p.rc,
                          "the client closed while waiting");
        goto out;
      }
      o->st = ACQ_LOOP;
      continue;
    }
    closed:
      o->rc = dl_seterr(R->env.err_owner, DLOCK_ECLOSED, "the client closed");
    out:
      /* Taken by a queued attempt: the script took us off the queue. */
      if (o->rc > 0) o->queued = false;
      if (o->queued) { /* gave up: leave the hand-off queue */
        o->left = false;
        char qk[DL_DERIVED_MAX], wk[DL_DERIVED_MAX];
        const char *k[] = {l->key, GRANT_QUEUE_KEY(l, qk),
                           GRANT_WAITERS_KEY(l, wk)};
        const char *args[] = {l->owner};
        if (leave_send(o, ACQ_CANCELLED, DL_SCRIPT_LOCK_CANCEL, 3, k, 1,
                       args) == DL_PENDING)
          return DL_PENDING;
        continue;
      }
      o->st = ACQ_UNSUB;
      continue;
    case ACQ_CANCELLED:
      o->st = ACQ_UNSUB;
      if (o->p.rc == 0) {
        /* Handed over as we gave up (the grant is in flight or was lost):
         * give it back rather than leave it held until its lease ends. */
        bool handed =
            o->p.reply->type == REDIS_REPLY_INTEGER && o->p.reply->integer == 1;
        drop_reply(o);
        o->left = true;
        if (handed) {
          o->st = ACQ_GIVEN;
          if (dl_rlock_rel_start(&o->rel, R, l, a->lease_ms, 1, o->end) ==
              DL_PENDING)
            return DL_PENDING;
        }
      }
      continue;
    case ACQ_GIVEN:
      if (dl_rlock_rel_step(&o->rel) == DL_PENDING) return DL_PENDING;
      o->st = ACQ_UNSUB;
      continue;
    case ACQ_UNSUB:
      /* Still queued (the server did not answer): unsubscribe the grant
       * channel now, so that a release finds us deaf and skips us. */
      if (o->grant) ops->sub_unref(R->link, o->grant, o->left);
      if (o->sub) ops->sub_unref(R->link, o->sub, true);
      o->grant = o->sub = NULL;
      o->st = ACQ_UNRESERVE;
      if (fair && a->wait && o->rc <= 0) { /* gave up: leave the queue */
        char ch2[DL_DERIVED_MAX], qk[DL_DERIVED_MAX], tk[DL_DERIVED_MAX];
        const char *k[] = {l->key, CHANNEL(l, ch2), QUEUE_KEY(l, qk),
                           TIMEOUT_KEY(l, tk)};
        const char *args[] = {l->owner, UNLOCK_MESSAGE};
        if (leave_send(o, ACQ_FAIR_LEFT, DL_SCRIPT_FAIR_CANCEL, 4, k, 2,
                       args) == DL_PENDING)
          return DL_PENDING;
      }
      continue;
    case ACQ_FAIR_LEFT:
      drop_reply(o);
      o->st = ACQ_UNRESERVE;
      continue;
    case ACQ_UNRESERVE:
      if (o->starving && o->rc <= 0) { /* gave up: free the hand-off */
        char hk[DL_DERIVED_MAX];
        const char *k[] = {HANDOFF_KEY(l, hk)};
        const char *args[] = {l->owner};
        if (leave_send(o, ACQ_UNRESERVED, DL_SCRIPT_LOCK_UNRESERVE, 1, k, 1,
                       args) == DL_PENDING)
          return DL_PENDING;
        continue;
      }
      /* fall through */
    case ACQ_UNRESERVED:
      drop_reply(o);
      if (o->rec.noted) { /* the wait ended: its record goes */
        o->st = ACQ_CLEARED;
        if (dl_redis_wait_clear(R, &o->p, l, &o->rec) == DL_PENDING)
          return DL_PENDING;
        continue;
      }
      /* fall through */
    case ACQ_CLEARED:
      drop_reply(o); /* a record not deleted goes with its lease */
      if (o->rc == 0) a->ttl = o->ttl;
      if (o->rc <= 0) return o->rc;
      a->status = o->rc;
      a->token = o->tok;
      /* The script set the lease when it ran, after `sent`. */
      a->valid_until = dl_validity(o->sent, a->lease_ms);
      return 1;
    }
  }
}

/* The first step: a look for lingering subscriptions, then the first
 * attempt. */
static int acq_start(acq_op *o) {
  dl_redis *R = o->R;
  const dl_acquire *a = o->a;
  const dl_lock_ref *l = a->lock;
  const dl_rlink_ops *ops = R->link->ops;
  /* The last acquire through this handle had to wait: if both channels are
   * still subscribed (they linger), queue at the first attempt. */
  if (o->grants && a->wait && contended(l)) {
    wait_channels(l, l->owner, o->ch, o->gch);
    o->sub = ops->sub_ref(R->link, o->ch, DL_WAKE_LOCK, -1);
    if (o->sub) o->grant = ops->sub_ref(R->link, o->gch, DL_WAKE_GRANT, -1);
    if (o->grant) o->queued = ops->sub_grant(R->link, o->grant, NULL) == 0;
  }
  /* A fair lock's one-shot try does not join the queue (as Redisson's
   * tryLock() without a wait). */
  bool fair = l->kind == DL_KIND_FAIR;
  if (attempt_send(o, ACQ_FIRST, (fair && a->wait) || o->queued) == DL_PENDING)
    return DL_PENDING;
  return acq_step(o);
}

int dl_redis_lock_acquire(dl_backend *b, dl_acquire *a) {
  dl_redis *R = (dl_redis *)b;
  int rc = dl_redis_driver_check(R, false);
  if (rc != 0) return rc;
  acq_op o;
  acq_init(&o, R, a);
  rc = acq_start(&o);
  if (rc != 1 || R->min_replicas == 0) return rc;
  /* Replica acknowledgement: a hold the replicas did not get in time could
   * vanish in a failover, so it is given back (one count: a re-entry keeps
   * the holds before it) and reported apart from "locked". */
  int ack = dl_redis_replicate(R, &a->lock->key, 1, "acquire",
                               " (the lock was given back)");
  if (ack == 0) return rc;
  dl_rlock_release_now(R, a->lock, a->lease_ms, 1);
  return ack;
}

/* ---- the event-loop driver ---- */
typedef struct acq_async {
  dl_shell sh;
  acq_op o;
  /* Replica acknowledgement (as the blocking acquire's): WAIT once taken,
   * and on a shortfall the hold given back, then DLOCK_ENOTACKED. */
  enum { AA_ACQUIRE, AA_WAIT, AA_GIVE_BACK } phase;
  dl_pend wait;
  int rc;
} acq_async;

/* After the acquire's result rc. */
static int acq_acked(acq_async *x, int rc) {
  dl_redis *R = x->o.R;
  for (;;) {
    switch (x->phase) {
    case AA_ACQUIRE:
      if (rc != 1 || R->min_replicas == 0) return rc;
      x->rc = rc;
      x->phase = AA_WAIT;
      if (dl_redis_replicate_start(R, &x->o.a->lock->key, 1, &x->wait) == DL_PENDING)
        return DL_PENDING;
      continue;
    case AA_WAIT:
      rc = dl_redis_replicate_result(R, &x->wait, "acquire",
                                     " (the lock was given back)");
      if (rc == 0) return x->rc;
      x->rc = rc;
      x->phase = AA_GIVE_BACK;
      if (dl_rlock_rel_start(&x->o.rel, R, x->o.a->lock, x->o.a->lease_ms, 1,
                             0) == DL_PENDING)
        return DL_PENDING;
      continue;
    case AA_GIVE_BACK: {
      int r = dl_rlock_rel_step(&x->o.rel);
      if (r == DL_PENDING) return DL_PENDING;
      return x->rc; /* the shortfall's code and detail */
    }
    }
  }
}

static int acq_async_step(dl_shell *sh) {
  acq_async *x = (acq_async *)sh;
  if (x->phase != AA_ACQUIRE) return acq_acked(x, 0);
  int rc = acq_step(&x->o);
  return rc == DL_PENDING ? rc : acq_acked(x, rc);
}

int dl_redis_lock_acquire_async(dl_backend *b, dl_acquire *a, dl_done_fn done,
                                void *ud, dl_async **op) {
  dl_redis *R = (dl_redis *)b;
  *op = NULL;
  int rc = dl_redis_driver_check(R, true);
  if (rc != 0) return rc;
  acq_async *x = malloc(sizeof *x);
  if (x == NULL)
    return dl_seterr(R->env.err_owner, DLOCK_ENOMEM, "out of memory");
  acq_init(&x->o, R, a);
  x->phase = AA_ACQUIRE;
  dl_shell_init(&x->sh, R, done, ud, acq_async_step, &x->o.p);
  dl_shell_bind(&x->sh, &x->o.rel.p);
  dl_shell_bind(&x->sh, &x->wait);
  x->sh.deadline = &a->deadline;
  int rc0 = acq_start(&x->o);
  return dl_shell_start(&x->sh, rc0 == DL_PENDING ? rc0 : acq_acked(x, rc0),
                        op);
}
