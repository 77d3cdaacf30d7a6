/* leave.c: the way out of the Redis lock family's acquire (acquire.h),
 * once its wait is over, whatever ended it: the hand-off queue or the
 * fair lock's queue left, a hold taken as it gave up (or after the client
 * shut down) given back, the subscriptions dropped, a starving waiter's
 * reservation freed, the waiter's record deleted; then the result. */
#include "acquire.h"

#include <hiredis/hiredis.h>

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

int dl_acq_give_back(acq_op *o) {
  o->st = ACQ_GIVEN;
  return dl_rlock_rel_start(&o->rel, o->R, o->a->lock, o->a->lease_ms, 1,
                            o->end);
}

int dl_acq_leave(acq_op *o) {
  dl_redis *R = o->R;
  dl_acquire *a = o->a;
  const dl_lock_ref *l = a->lock;
  const dl_rlink_ops *ops = R->link->ops;
  bool fair = l->kind == DL_KIND_FAIR;
  for (;;) {
    switch (o->st) {
    case ACQ_OUT:
    default: /* dl_acq_step hands over no state before ACQ_OUT */
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
        if (handed && dl_acq_give_back(o) == DL_PENDING) return DL_PENDING;
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
