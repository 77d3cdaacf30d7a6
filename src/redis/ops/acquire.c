/* acquire.c: the acquire of the Redis lock family (acquire.h, rlock.h) up
 * to the end of its wait: the first attempt, then the waiting algorithm:
 * pub/sub on the unlock channel, the plain lock's hand-off queue with
 * grants on the waiter's own channel, reservations for starving waiters,
 * the fair lock's queue, failovers ridden out; one state machine for both
 * drivers. Its way out is leave.c's. */
#include "acquire.h"

#include <stddef.h>
#include <string.h>

/* A plain string lock's waiter also polls (its peers, redsync or npm
 * redlock, delete without a message): sleeps of 1, 2, 4 ... up to this many
 * ms, each drawn in [d/2, d] (dl_backoff), unless the client's own
 * wait_backoff_max_ms is set. A dlock releaser's message still wakes it at
 * once. */
#define PLAIN_POLL_MAX_MS 64
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

void dl_acq_init(acq_op *o, dl_redis *R, dl_acquire *a) {
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
  /* A wait without a limit rides out DL_RIDE_TIMEOUTS command timeouts of
   * failures at most: an outage that long is reported, not hidden. */
  if (a->deadline == INT64_MAX &&
      now - o->ride_since >= DL_RIDE_TIMEOUTS * o->R->env.command_timeout_ms)
    return false;
  if (!transient || now + o->ride >= a->deadline) return false;
  *pause_end = now + o->ride;
  return true;
}

int dl_acq_step(acq_op *o) {
  dl_redis *R = o->R;
  dl_acquire *a = o->a;
  const dl_lock_ref *l = a->lock;
  const dl_rlink_ops *ops = R->link->ops;
  bool fair = l->kind == DL_KIND_FAIR;
  int64_t deadline = a->deadline, pause_end = 0;
  for (;;) {
    switch (o->st) {
    case ACQ_FIRST:
      o->rc = dl_acq_attempt_result(o);
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
        if (dl_acq_attempt_send(o, ACQ_ATTEMPTED, fair || o->queued) ==
            DL_PENDING)
          return DL_PENDING;
        continue;
      }
      o->again = true;
      goto doze;
    case ACQ_ATTEMPTED:
      o->rc = dl_acq_attempt_result(o);
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
        if (dl_acq_give_back(o) == DL_PENDING) return DL_PENDING;
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
      if (dl_acq_attempt_send(o, o->ride_to,
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
      o->st = ACQ_OUT;
      /* fall through */
    default:
      /* ACQ_OUT and the states after it: the way out (leave.c) */
      return dl_acq_leave(o);
    }
  }
}

int dl_acq_start(acq_op *o) {
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
  if (dl_acq_attempt_send(o, ACQ_FIRST, (fair && a->wait) || o->queued) ==
      DL_PENDING)
    return DL_PENDING;
  return dl_acq_step(o);
}
