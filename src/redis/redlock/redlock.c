/* redlock.c: the Redlock backend (redlock://): a composite over N
 * independent Redis servers, each a Redis backend of its own (the parts).
 * Every operation goes to all N at once, one round of fan-out, and counts
 * a quorum of N/2 + 1:
 * - acquire: one attempt per server, no wait there; taken when a quorum
 *   took it and time is left: valid until the attempt's send time + lease
 *   - drift (1 % of the lease + 2 ms); its fencing token, the largest the
 *   quorum gave, is then written back to that quorum (lock_fence) before
 *   it is returned, so that any later quorum gives a larger one
 *   (?fencing=off: not, and no token); otherwise released on every server
 *   that did not refuse it (a lost reply may have taken it), and tried
 *   again after a random delay until the deadline;
 * - renewal: a hold is held when a quorum renewed it in time, gone when a
 *   quorum can no longer have it, else unknown;
 * - release, force release, queries: on all, the answers combined.
 * A round is decided as soon as its answers so far settle it (a quorum
 * granted, or a quorum has become impossible; a query's answer cannot
 * change): the call returns then, and a stalled server's operation goes
 * on in the background, on the loop: a grant that comes after the round
 * was decided is given back (released on that server) unless the same
 * owner's next acquire went there since (rlsent.c), and the operation is
 * freed when its last part has answered. A server still busy with an
 * earlier attempt of the same call counts as not answering the next.
 * The parts run their *_async operations on a loop: the client's for an
 * event-loop client; for a blocking client a private loop on a thread of
 * its own (rlloop.c), which the blocking call waits on. The lock kinds and
 * their layouts are the parts' own (the Redis lock family). */
#include "redlock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void step(rl_op *o);
static bool start_part(rl_op *o, int i, int phase);

/* Frees o once its result is told and no part's operation is left. */
static void maybe_free(rl_op *o) {
  if (!o->delivered || o->left > 0) return;
  if (o->counted) o->B->live--;
  dl_rl_sent_unref(o);
  dl_rl_rec_free(o);
  free(o->copies);
  free(o->snaps);
  free(o->lbuf);
  free(o->info);
  free(o);
}

/* Tells o's caller its result (from the loop). From then on o uses none of
 * the caller's memory. */
static void tell(rl_op *o) {
  o->st = ST_DONE;
  o->delivered = true;
  dl_done_fn done = o->head.done;
  void *ud = o->head.ud;
  int result = o->result;
  o->a = NULL;
  o->items = NULL;
  o->calls = NULL;
  o->v = NULL;
  done(ud, result);
  maybe_free(o);
}

/* Ends o with result: its caller is told from the loop (a result reached
 * within the call that started it goes out after a pause of 0); what is
 * still in flight on the parts goes on. */
static void finish(rl_op *o, int result) {
  o->result = result;
  o->decided = true;
  if (o->starting && o->st != ST_DELIVER) {
    o->st = ST_DELIVER;
    if (!o->B->closing &&
        dl_redis_step_pause(part0(o->B), &o->pause, dl_now_ms()) == DL_PENDING)
      return;
  }
  if (o->starting) { /* closing: dl_rl_run tells */
    o->st = ST_DONE;
    return;
  }
  tell(o);
}

/* Whether o's acquire has succeeded, or is writing its token back (it
 * succeeds unless that fails). */
static bool succeeding(const rl_op *o) {
  if (o->decided) return o->result == 1;
  return o->st == ST_FENCED && !o->fence_failed;
}

/* A part's answer that no round waits for. An acquire's late grant is
 * part of a hold that succeeded (its release and renewals go to every
 * server, after it on the same connection), else given back, as is an
 * unknown outcome (a lost reply may have taken it) or the fence of an
 * attempt given up, unless the same owner's next acquire went to that
 * server meanwhile (rlsent.c); anything else is dropped. */
static void straggler(rl_op *o, int i, int phase, int rc) {
  bool give_back = false;
  int start = PH_GIVEBACK;
  if (o->kind == OP_ACQUIRE && phase == PH_MAIN && rc == 0 && o->rec_there[i] &&
      (o->decided || o->st == ST_CLEARED)) {
    give_back = true; /* its record, written as the wait was over */
    start = PH_CLEAR;
  } else if (o->kind == OP_ACQUIRE && phase == PH_MAIN && rc == 1 &&
             succeeding(o)) {
    o->late_grant[i] = true; /* released if the fence fails after all */
    dl_rl_raise_last(o->B, o->as[i].token); /* the next proposal goes above */
    /* Its token written back too, as the quorum's was. */
    if (o->B->opt.fencing && o->as[i].token < o->token) {
      give_back = true;
      start = PH_FENCE;
    }
  } else if (o->kind == OP_ACQUIRE && phase == PH_MAIN)
    give_back = rc != 0;
  else if (o->kind == OP_ACQUIRE && phase == PH_FENCE)
    give_back = o->fence_failed;
  if (give_back && start == PH_GIVEBACK && dl_rl_sent_since(o, i))
    give_back = false; /* it would go behind that acquire */
  if (give_back && start_part(o, i, start)) {
    o->pending[i] = true;
    o->phase_of[i] = start;
    o->round_of[i] = -1;
    o->left++;
  }
}

static void part_done(void *ud, int rc) {
  rl_slot *s = ud;
  rl_op *o = s->o;
  int i = s->i;
  o->sub[i] = NULL;
  o->pending[i] = false;
  bool member = o->round_of[i] == o->round && !o->decided &&
                o->phase_of[i] == o->phase && o->rc[i] == RC_PENDING;
  if (rc < 0 && member) {
    o->rc[i] = rc;
    dl_rl_keep_error(o, i);
  }
  if (o->kind == OP_ACQUIRE) dl_rl_rec_answer(o, i, o->phase_of[i], rc);
  o->left--;
  if (member) {
    o->rc[i] = rc;
    o->await--;
    o->left++; /* held while the round steps on */
    step(o);
    o->left--;
  } else {
    o->left++;
    straggler(o, i, o->phase_of[i], rc);
    o->left--;
  }
  maybe_free(o);
}

/* Scan's callback: counts the names passed on. */
static int passed(const char *name, void *ud) {
  rl_op *o = ud;
  o->passed++;
  return o->cb(name, o->cb_ud);
}

/* Starts part i's operation of o's kind (or of `phase`); false if it
 * failed to start (o->rc[i] then says why). */
static bool start_part(rl_op *o, int i, int phase) {
  redlock *B = o->B;
  if (B->closing) { /* the parts are being freed */
    o->rc[i] = DLOCK_ECLOSED;
    return false;
  }
  dl_backend *b = B->part[i];
  const dl_backend_ops *ops = b->ops;
  rl_slot *s = &o->slot[i];
  s->o = o;
  s->i = i;
  int rc;
  if (phase == PH_CLEAR) {
    rc = dl_redis_wait_del_async(b, o->rec_key, part_done, s, &o->sub[i]);
  } else if (phase == PH_FENCE) {
    rc = ops->lock_fence_async(b, o->l, o->token, o->a_lease_ms, part_done, s,
                               &o->sub[i]);
  } else if (phase == PH_RELEASE || phase == PH_GIVEBACK ||
             o->kind == OP_RELEASE) {
    int64_t lease = o->kind == OP_ACQUIRE ? o->a_lease_ms : o->lease_ms;
    int count = o->kind == OP_ACQUIRE ? o->a_held + 1 : o->count;
    rc = ops->lock_release_async(b, o->l, lease, count, part_done, s,
                                 &o->sub[i]);
  } else
    switch (o->kind) {
    case OP_ACQUIRE:
      o->as[i] = *o->a;
      o->as[i].lock = o->l;
      o->as[i].info = o->info ? o->info : "";
      o->as[i].wait = false;
      o->as[i].deadline = dl_now_ms();
      o->as[i].propose = B->opt.fencing ? o->propose : 0;
      o->as[i].detect = false; /* the parts do not wait */
      dl_rl_rec_attempt(o, i, &o->as[i]);
      unsigned was = dl_rl_sent_mark(o, i);
      rc = ops->lock_acquire_async(b, &o->as[i], part_done, s, &o->sub[i]);
      if (rc < 0) dl_rl_sent_unmark(o, i, was);
      break;
    case OP_RENEW:
      rc = ops->renew_async(b, INT64_MAX, o->lease_ms, o->nitems, o->is[i],
                            &o->ncalls[i], part_done, s, &o->sub[i]);
      break;
    case OP_FORCE:
      rc = ops->lock_force_release_async(b, o->l, part_done, s, &o->sub[i]);
      break;
    case OP_QUERY:
      rc = ops->lock_query_async(b, o->l, o->q, &o->vs[i], part_done, s,
                                 &o->sub[i]);
      break;
    case OP_INSPECT:
      memset(&o->snaps[i], 0, sizeof o->snaps[i]);
      rc =
          ops->inspect_async(b, o->key, &o->snaps[i], part_done, s, &o->sub[i]);
      break;
    case OP_WAITERS:
      rc = dl_redis_waiters_async(b, o->key, dl_rl_rec_seen, s, part_done, s,
                                  &o->sub[i]);
      break;
    case OP_SCAN:
      rc = ops->scan_async(b, o->match, o->prefix_len, passed, o, part_done, s,
                           &o->sub[i]);
      break;
    default: rc = ops->ping_async(b, part_done, s, &o->sub[i]); break;
    }
  o->rc[i] = rc;
  if (rc < 0) dl_rl_keep_error(o, i);
  return rc == 0;
}

/* The token a round of acquires proposes: the wall clock in µs, or one
 * above the largest token this client took, if larger. When every server
 * of the quorum takes it, each holds the token the client returns and the
 * write-back round is not needed; a server whose counter is ahead (another
 * client's clock is, say) gives its own larger one, which is written back
 * as before, and the next proposal starts above it. */
static uint64_t proposal(redlock *B) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t p = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
  uint64_t last = atomic_load_explicit(&B->last_token, memory_order_relaxed);
  return p > last ? p : last + 1;
}

/* Starts a round on every part: the operation; an attempt's release on
 * those that did not refuse it; the fence on those that granted it. A
 * part still busy with an earlier round's operation is left out: of the
 * operation, as not answering (its earlier answer is a straggler's); of a
 * release, since its straggler gives back what it took. Steps on at once
 * if the answers so far decide the round (none started, say). */
static void fan(rl_op *o, int phase) {
  redlock *B = o->B;
  o->round++;
  o->phase = phase;
  o->await = 0;
  o->left++; /* held until every start is made */
  if (phase == PH_MAIN) {
    o->t0 = dl_now_ms();
    if (o->kind == OP_ACQUIRE && B->opt.fencing) o->propose = proposal(B);
  }
  for (int i = 0; i < B->n; i++)
    if (o->pending[i] && o->phase_of[i] == PH_GIVEBACK)
      o->rc[i] = RC_BUSY; /* it answered the last attempt */
    else if (o->pending[i] && o->rc[i] == RC_PENDING) { /* an earlier round's */
      o->rc[i] = DLOCK_ETIMEDOUT;
      snprintf(o->emsg[i], sizeof o->emsg[i], "no answer yet");
    }
  for (int i = 0; i < B->n; i++) {
    if (phase == PH_RELEASE && (o->rc[i] == 0 || o->pending[i]))
      continue; /* nothing there, or its straggler sees to it */
    if (phase == PH_RELEASE && dl_rl_sent_since(o, i))
      continue; /* a later acquire's call settles it (rlsent.c) */
    /* The fence goes only where the token is not the server's already
     * (it took the proposal, or gave the largest). */
    if (phase == PH_FENCE && (o->rc[i] != 1 || o->as[i].token >= o->token))
      continue;
    if (phase == PH_CLEAR && !o->rec_there[i]) continue;
    if (o->only >= 0 && i != o->only) continue;
    if (o->pending[i]) continue; /* as not answering */
    if (start_part(o, i, phase)) {
      o->rc[i] = RC_PENDING;
      o->pending[i] = true;
      o->round_of[i] = o->round;
      o->phase_of[i] = phase;
      o->left++;
      o->await++;
    }
  }
  o->left--;
  step(o);
}

static void step(rl_op *o) {
  for (;;)
    switch (o->st) {
    case ST_FAN:
      o->st = ST_FANNED;
      fan(o, PH_MAIN);
      return;
    case ST_FANNED: {
      int r;
      switch (o->kind) {
      case OP_ACQUIRE: {
        int got = dl_rl_acquired(o);
        if (got < 0) return; /* not decided yet */
        if (got) {
          if (!o->B->opt.fencing) {
            o->a->token = 0; /* none: the servers' own are not ordered */
            dl_rl_clear_behind(o);
            finish(o, 1);
            return;
          }
          /* The token goes back to the quorum that granted it before
           * anyone may use it. */
          o->st = ST_FENCED;
          fan(o, PH_FENCE);
          return;
        }
        o->st = ST_RELEASED;
        fan(o, PH_RELEASE);
        return;
      }
      case OP_RELEASE:
        if (!dl_rl_settled(o)) return;
        r = dl_rl_released(o);
        break;
      case OP_RENEW:
        if ((r = dl_rl_renewed(o)) == -2) return;
        break;
      case OP_FORCE:
        if ((r = dl_rl_forced(o)) == -2) return;
        break;
      case OP_QUERY:
        if ((r = dl_rl_queried(o)) == -2) return;
        break;
      case OP_PING:
        if ((r = dl_rl_pinged(o)) == -2) return;
        break;
      case OP_INSPECT: /* the holder a quorum agrees on */
        if ((r = dl_rl_inspected(o)) == -2) return;
        if (r >= 0) {
          memcpy(o->snap, &o->snaps[r], sizeof *o->snap);
          /* the walk's: a holder a minority shows is none */
          if (o->strict && o->snap->held && !dl_rl_held_by_quorum(o, r))
            o->snap->held = false;
          r = o->rc[r];
        } else {
          r = dl_rl_quorum_error(o, 0);
        }
        break;
      case OP_WAITERS:
        if ((r = dl_rl_waiters_done(o)) == -2) return;
        break;
      default: /* scan: the next server if this one failed */
        if (o->await > 0) return;
        r = o->rc[o->only];
        if (r < 0 && o->only + 1 < o->B->n && o->passed == 0 &&
            !o->B->closing) {
          o->only++;
          o->st = ST_FAN;
          continue;
        }
        if (r < 0) r = dl_rl_part_error(o, o->only);
        break;
      }
      finish(o, r);
      return;
    }
    case ST_FENCED: {
      int fenced = 0, granted = 0;
      for (int i = 0; i < o->B->n; i++) {
        fenced += o->rc[i] == 1;
        granted += o->rc[i] == 1 || o->rc[i] == RC_PENDING;
      }
      bool in_time = o->a->valid_until > dl_now_ms();
      if (fenced >= o->B->quorum && in_time) {
        dl_rl_clear_behind(o);
        finish(o, 1);
        return;
      }
      if (granted >= o->B->quorum && in_time) return; /* not decided yet */
      o->fence_failed = true;
      for (int i = 0; i < o->B->n; i++)
        if (o->rc[i] < 0 || o->late_grant[i])
          o->rc[i] = 1; /* granted there: released below */
      o->st = ST_RELEASED;
      fan(o, PH_RELEASE);
      return;
    }
    case ST_RELEASED: {
      dl_acquire *a = o->a;
      int64_t now = dl_now_ms();
      /* A refusal that waiting cannot mend (a wrong password, ACL, TLS,
       * a server error that is no passing state) ends the wait at once,
       * also one with no limit. */
      int e = o->attempt_err;
      bool final = e != 0 && o->attempt_final;
      bool unreachable = o->B->n - o->unanswered < o->B->quorum;
      /* The release of what this attempt took, on the servers that
       * answered it, first (a stalled server's straggler gives back). */
      if (o->await > 0) return;
      /* dlock_client_shutdown: the wait ends here, the pause between
       * attempts (RL_RETRY_MAX_MS at most) being its next wake-up. */
      if (a->wait && o->B->env.closing && atomic_load(o->B->env.closing) &&
          !o->cancelled) {
        dl_rl_give_up(o, dl_seterr(o->B->env.err_owner, DLOCK_ECLOSED,
                                   "the client is closing"));
        return;
      }
      if (final && unreachable) {
        dl_rl_give_up(o, dl_rl_quorum_error(o, e));
        return;
      }
      if (!a->wait || now >= a->deadline || o->cancelled || o->B->closing) {
        /* Refused by the holders, or too few servers answered: why. */
        dl_rl_give_up(o, unreachable && !o->cancelled ? dl_rl_quorum_error(o, e)
                                                      : 0);
        return;
      }
      /* The waiter's record, and detect_deadlocks' walk once it is on a
       * quorum (rlwait.c), before the pause. */
      int w = dl_rl_rec_pause(o);
      if (w < 0) {
        dl_rl_give_up(o, w);
        return;
      }
      if (w > 0) return; /* ST_WALK: the walk steps o on */
      int64_t until = now + dl_backoff_next(&o->retry, RL_RETRY_MAX_MS);
      if (until > a->deadline) until = a->deadline;
      a->waited = true;
      o->st = ST_PAUSED;
      if (dl_redis_step_pause(part0(o->B), &o->pause, until) == DL_PENDING)
        return;
      continue;
    }
    case ST_PAUSED:
      if (o->pause.rc < 0) {
        dl_rl_give_up(o, dl_seterr(o->B->env.err_owner, o->pause.rc,
                                   "while waiting to try again"));
        return;
      }
      o->st = ST_FAN;
      continue;
    case ST_DELIVER: finish(o, o->result); return;
    case ST_CLEARED:
      if (dl_rl_cleared(o)) finish(o, o->held_result);
      return;
    default: return; /* ST_DONE */
    }
}

static void on_pause(dl_pend *p) {
  rl_op *o = p->op;
  p->pending = false;
  step(o);
}

rl_op *dl_rl_op_new(redlock *B, int kind, dl_done_fn done, void *ud, int *err) {
  *err = 0;
  rl_op *o = malloc(sizeof *o);
  if (o == NULL) {
    *err = dl_seterr(B->env.err_owner, DLOCK_ENOMEM, "out of memory");
    return NULL;
  }
  memset(o, 0, sizeof *o);
  o->B = B;
  o->kind = kind;
  o->head.done = done;
  o->head.ud = ud;
  o->pause.resume = on_pause;
  o->pause.op = o;
  o->only = -1;
  o->retry.delay = RL_RETRY_MIN_MS;
  o->retry.rng = dl_thread_id() * 0x9e3779b97f4a7c15ull ^ (uint64_t)dl_now_us();
  atomic_init(&o->hint, 0);
  return o;
}

int dl_rl_set_lock(rl_op *o, const dl_lock_ref *l) {
  size_t kl = strlen(l->key) + 1, nl = strlen(l->name) + 1,
         ol = strlen(l->owner) + 1;
  if ((o->lbuf = malloc(kl + nl + ol)) == NULL) {
    int rc = dl_seterr(o->B->env.err_owner, DLOCK_ENOMEM, "out of memory");
    free(o);
    return rc;
  }
  memcpy(o->lbuf, l->key, kl);
  memcpy(o->lbuf + kl, l->name, nl);
  memcpy(o->lbuf + kl + nl, l->owner, ol);
  o->lref = *l;
  o->lref.key = o->lbuf;
  o->lref.name = o->lbuf + kl;
  o->lref.owner = o->lbuf + kl + nl;
  o->lref.hint = &o->hint;
  o->l = &o->lref;
  return 0;
}

int dl_rl_run(rl_op *o, dl_async **op) {
  o->started = dl_now_ms();
  if (o->kind == OP_ACQUIRE) {
    o->a_lease_ms = o->a->lease_ms;
    o->a_held = o->a->held;
    /* The holder's description, which a late part may still send. */
    if (o->a->info && o->a->info[0] && (o->info = strdup(o->a->info)) == NULL) {
      int rc = dl_seterr(o->B->env.err_owner, DLOCK_ENOMEM, "out of memory");
      free(o->lbuf);
      free(o);
      return rc;
    }
  }
  int rc = o->kind == OP_ACQUIRE || o->kind == OP_RELEASE ? dl_rl_sent_ref(o)
                                                           : 0;
  if (rc != 0) {
    free(o->info);
    free(o->lbuf);
    free(o);
    return rc;
  }
  o->starting = true;
  o->counted = true;
  o->B->live++;
  o->left++; /* held until the start is over */
  step(o);
  o->starting = false;
  o->left--;
  if (o->st == ST_DONE && !o->delivered) {
    /* Closing: nothing could take it to the loop. */
    rc = o->result < 0 ? o->result : DLOCK_ECLOSED;
    o->delivered = true;
    maybe_free(o);
    return rc;
  }
  *op = &o->head;
  return 0;
}

/* ---- for rlwait.c ---- */
void dl_rl_step(rl_op *o) {
  step(o);
}

void dl_rl_finish(rl_op *o, int result) {
  finish(o, result);
}

void dl_rl_fan(rl_op *o, int phase) {
  fan(o, phase);
}

void dl_rl_unhold(rl_op *o) {
  o->left--;
  maybe_free(o);
}

bool dl_rl_start_aside(rl_op *o, int i, int phase) {
  if (!start_part(o, i, phase)) return false;
  o->pending[i] = true;
  o->phase_of[i] = phase;
  o->round_of[i] = -1;
  o->left++;
  return true;
}
