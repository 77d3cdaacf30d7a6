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
 * The parts run their *_async operations: on the client's loop for an
 * event-loop client; for a blocking client on gather links (gather.c),
 * whose steps the calling thread completes, so that a blocking call, too,
 * asks every server before it waits for any. The lock kinds and their
 * layouts are the parts' own (the Redis lock family). */
#include "redlock.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static void step(rl_op *o);

/* Ends o with result: the blocking call reads it; an event-loop
 * operation tells its caller from the loop (a result reached within the
 * call that started it goes out after a pause of 0). */
static void finish(rl_op *o, int result) {
  o->result = result;
  if (o->async && o->starting && o->st != ST_DELIVER) {
    o->st = ST_DELIVER;
    if (!o->B->closing &&
        dl_redis_step_pause(part0(o->B), &o->pause, dl_now_ms()) == DL_PENDING)
      return;
  }
  o->finished = true;
  free(o->copies);
  o->copies = NULL;
  if (!o->async || o->starting) return; /* the call that runs it reads it */
  dl_done_fn done = o->head.done;
  void *ud = o->head.ud;
  free(o);
  done(ud, result);
}

static void part_done(void *ud, int rc) {
  rl_slot *s = ud;
  rl_op *o = s->o;
  o->rc[s->i] = rc;
  o->sub[s->i] = NULL;
  if (--o->left == 0) step(o);
}

/* Scan's callback: counts the names passed on. */
static int passed(const char *name, void *ud) {
  rl_op *o = ud;
  o->passed++;
  return o->cb(name, o->cb_ud);
}

/* Starts part i's operation of o's kind; false if it failed to start
 * (o->rc[i] then says why). */
static bool start_part(rl_op *o, int i, int phase) {
  redlock *B = o->B;
  if (B->closing) { /* the parts are being freed */
    o->rc[i] = DLOCK_ECLOSED;
    return false;
  }
  dl_backend *b = B->part[i];
  const dl_backend_ops *ops = b->ops;
  rl_slot *s = &o->slot[i];
  int rc;
  if (phase == PH_FENCE) {
    rc = ops->lock_fence_async(b, o->l, o->a->token, o->a->lease_ms, part_done,
                               s, &o->sub[i]);
  } else if (phase == PH_RELEASE || o->kind == OP_RELEASE) {
    int64_t lease = o->kind == OP_ACQUIRE ? o->a->lease_ms : o->lease_ms;
    int count = o->kind == OP_ACQUIRE ? o->a->held + 1 : o->count;
    rc = ops->lock_release_async(b, o->l, lease, count, part_done, s,
                                 &o->sub[i]);
  } else
    switch (o->kind) {
    case OP_ACQUIRE:
      o->as[i] = *o->a;
      o->as[i].lock = o->l;
      o->as[i].wait = false;
      o->as[i].deadline = dl_now_ms();
      o->as[i].propose = B->opt.fencing ? o->propose : 0;
      rc = ops->lock_acquire_async(b, &o->as[i], part_done, s, &o->sub[i]);
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
      memset(o->snap, 0, sizeof *o->snap);
      rc = ops->inspect_async(b, o->key, o->snap, part_done, s, &o->sub[i]);
      break;
    case OP_SCAN:
      rc = ops->scan_async(b, o->match, o->prefix_len, passed, o, part_done, s,
                           &o->sub[i]);
      break;
    default: rc = ops->ping_async(b, part_done, s, &o->sub[i]); break;
    }
  o->rc[i] = rc;
  return rc == 0;
}

/* Starts the round on every part: the operation; an attempt's release on
 * those that did not refuse it; the fence on those that granted it. Goes
 * on at once if none started. */
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

static void fan(rl_op *o, int phase) {
  o->left = 1; /* held until every start is made */
  if (phase == PH_MAIN) {
    o->t0 = dl_now_ms();
    if (o->kind == OP_ACQUIRE && o->B->opt.fencing) o->propose = proposal(o->B);
  }
  for (int i = 0; i < o->B->n; i++) {
    if (phase == PH_RELEASE && o->rc[i] == 0) continue; /* nothing there */
    /* The fence goes only where the token is not the server's already
     * (it took the proposal, or gave the largest). */
    if (phase == PH_FENCE && (o->rc[i] != 1 || o->as[i].token >= o->a->token))
      continue;
    if (o->only >= 0 && i != o->only) continue;
    o->slot[i].o = o;
    o->slot[i].i = i;
    if (start_part(o, i, phase)) o->left++;
  }
  if (--o->left == 0) step(o);
}

/* ---- combining the answers ---- */
static int first_error(const rl_op *o) {
  for (int i = 0; i < o->B->n; i++)
    if (o->rc[i] < 0) return o->rc[i];
  return DLOCK_EPROTO;
}

/* An acquire's round: 1 taken (the request filled in), or 0 not. */
static int acquired(rl_op *o) {
  redlock *B = o->B;
  dl_acquire *a = o->a;
  int ok = 0, again = 0;
  uint64_t token = 0;
  int64_t ttl = -2;
  for (int i = 0; i < B->n; i++) {
    if (o->rc[i] == 1) {
      ok++;
      if (o->as[i].status == 2) again++;
      if (o->as[i].token > token) token = o->as[i].token;
    } else if (o->rc[i] == 0 && o->as[i].ttl > ttl) {
      ttl = o->as[i].ttl;
    }
  }
  int64_t valid = o->t0 + a->lease_ms - drift_ms(a->lease_ms);
  a->ttl = ttl;
  o->unanswered = 0;
  o->attempt_err = 0;
  for (int i = 0; i < B->n; i++)
    if (o->rc[i] < 0) {
      o->unanswered++;
      if (o->attempt_err == 0) o->attempt_err = o->rc[i];
    }
  if (ok < B->quorum || valid <= dl_now_ms()) return 0;
  a->status = again >= B->quorum ? 2 : 1;
  a->token = token;
  uint64_t last = atomic_load_explicit(&B->last_token, memory_order_relaxed);
  while (token > last && !atomic_compare_exchange_weak_explicit(
                             &B->last_token, &last, token, memory_order_relaxed,
                             memory_order_relaxed)) {
  }
  a->valid_until = valid;
  return 1;
}

static int released(const rl_op *o) {
  int freed = 0, held = 0, notowner = 0;
  for (int i = 0; i < o->B->n; i++) {
    freed += o->rc[i] == 1;
    held += o->rc[i] == 0;
    notowner += o->rc[i] == DLOCK_ENOTOWNER;
  }
  if (freed > 0) return 1;
  if (held > 0) return 0;
  return notowner > 0 ? DLOCK_ENOTOWNER : first_error(o);
}

static int renewed(rl_op *o) {
  redlock *B = o->B;
  int64_t valid = o->t0 + o->lease_ms - drift_ms(o->lease_ms);
  bool late = o->lease_ms > 0 && valid <= dl_now_ms();
  int rc = 0;
  *o->calls = 0;
  for (int i = 0; i < B->n; i++)
    *o->calls += o->ncalls[i];
  for (int k = 0; k < o->nitems; k++) {
    int held = 0, gone = 0;
    for (int i = 0; i < B->n; i++) {
      int r = o->is[i][k].result;
      held += r == 1;
      gone += r == 0;
    }
    dl_renew_item *it = &o->items[k];
    if (held >= B->quorum && !late) {
      it->result = 1;
      if (o->lease_ms > 0) it->valid_until = valid;
    } else if (B->n - gone < B->quorum) {
      it->result = 0;
    } else {
      it->result = -1;
      if (rc == 0)
        rc = late ? dl_seterr(B->env.err_owner, DLOCK_ETIMEDOUT,
                              "renewal answered too late")
                  : first_error(o);
    }
  }
  return rc;
}

static int forced(const rl_op *o) {
  int deleted = 0, none = 0, wrong = 0;
  for (int i = 0; i < o->B->n; i++) {
    deleted += o->rc[i] == 1;
    none += o->rc[i] == 0;
    wrong += o->rc[i] == DLOCK_EWRONGTYPE;
  }
  if (deleted > 0) return 1;
  if (wrong > 0) return DLOCK_EWRONGTYPE;
  return none > 0 ? 0 : first_error(o);
}

static int cmp_ll(const void *x, const void *y) {
  long long a = *(const long long *)x, b = *(const long long *)y;
  return a < b ? 1 : a > b ? -1 : 0; /* descending */
}

/* A query's answer: what a quorum agrees on at least (the quorum-th
 * largest answer), the token the largest. */
static int queried(rl_op *o) {
  redlock *B = o->B;
  long long got[RL_MAX];
  int n = 0;
  for (int i = 0; i < B->n; i++)
    if (o->rc[i] == 0) got[n++] = o->vs[i];
  if (n < B->quorum) return first_error(o);
  qsort(got, (size_t)n, sizeof got[0], cmp_ll);
  *o->v = o->q == DL_QUERY_TOKEN ? got[0] : got[B->quorum - 1];
  return 0;
}

static int pinged(const rl_op *o) {
  int up = 0;
  for (int i = 0; i < o->B->n; i++)
    up += o->rc[i] == 0;
  return up >= o->B->quorum ? 0 : first_error(o);
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
      case OP_ACQUIRE:
        if (acquired(o)) {
          if (!o->B->opt.fencing) {
            o->a->token = 0; /* none: the servers' own are not ordered */
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
      case OP_RELEASE: r = released(o); break;
      case OP_RENEW: r = renewed(o); break;
      case OP_FORCE: r = forced(o); break;
      case OP_QUERY: r = queried(o); break;
      case OP_PING: r = pinged(o); break;
      default: /* inspect, scan: the next server if this one failed */
        r = o->rc[o->only];
        if (r < 0 && o->only + 1 < o->B->n && o->passed == 0 &&
            !o->B->closing) {
          o->only++;
          o->st = ST_FAN;
          continue;
        }
        break;
      }
      finish(o, r);
      return;
    }
    case ST_FENCED: {
      int fenced = 0;
      for (int i = 0; i < o->B->n; i++) {
        fenced += o->rc[i] == 1;
        if (o->rc[i] < 0) o->rc[i] = 1; /* granted there: released below */
      }
      if (fenced >= o->B->quorum && o->a->valid_until > dl_now_ms()) {
        finish(o, 1);
        return;
      }
      o->st = ST_RELEASED;
      fan(o, PH_RELEASE);
      return;
    }
    case ST_RELEASED: {
      dl_acquire *a = o->a;
      int64_t now = dl_now_ms();
      /* A refusal that waiting cannot mend (a wrong password, ACL, TLS)
       * ends the wait at once. */
      int e = o->attempt_err;
      bool final = e != 0 && e != DLOCK_ECONNECT && e != DLOCK_ECONNLOST &&
                   e != DLOCK_ETIMEDOUT && e != DLOCK_EREADONLY &&
                   e != DLOCK_ESERVER;
      if (final && o->B->n - o->unanswered < o->B->quorum) {
        finish(o, e);
        return;
      }
      if (!a->wait || now >= a->deadline || o->cancelled || o->B->closing) {
        /* Refused by the holders, or too few servers answered: why. */
        bool unreachable = o->B->n - o->unanswered < o->B->quorum;
        finish(o, unreachable && !o->cancelled ? o->attempt_err : 0);
        return;
      }
      int64_t until = now + dl_backoff_next(&o->retry, RL_RETRY_MAX_MS);
      if (until > a->deadline) until = a->deadline;
      o->st = ST_PAUSED;
      if (dl_redis_step_pause(part0(o->B), &o->pause, until) == DL_PENDING)
        return;
      continue;
    }
    case ST_PAUSED:
      if (o->pause.rc < 0) {
        finish(o, o->pause.rc);
        return;
      }
      o->st = ST_FAN;
      continue;
    default: /* ST_DELIVER */ finish(o, o->result); return;
    }
}

static void on_pause(dl_pend *p) {
  rl_op *o = p->op;
  p->pending = false;
  step(o);
}

rl_op *dl_rl_op_new(redlock *B, rl_op *stack, int kind, dl_done_fn done,
                    void *ud, int *err) {
  *err = 0;
  rl_op *o = stack;
  if (done && (o = malloc(sizeof *o)) == NULL) {
    *err = dl_seterr(B->env.err_owner, DLOCK_ENOMEM, "out of memory");
    return NULL;
  }
  memset(o, 0, sizeof *o);
  o->B = B;
  o->kind = kind;
  o->async = done != NULL;
  o->head.done = done;
  o->head.ud = ud;
  o->pause.resume = on_pause;
  o->pause.op = o;
  o->only = -1;
  o->retry.delay = RL_RETRY_MIN_MS;
  o->retry.rng = dl_thread_id() * 0x9e3779b97f4a7c15ull ^ (uint64_t)dl_now_us();
  return o;
}

/* Runs o: to its end on the calling thread (the blocking driver, whose
 * parts are gather links: returns the result), or started on the loop (0
 * and *op, or a negative code when nothing could start). */
int dl_rl_run(rl_op *o, dl_async **op) {
  if (!o->async) {
    dl_gather g, *saved;
    dl_gather_begin(&g, &saved);
    step(o);
    int rc = dl_gather_run(&g, &o->finished);
    dl_gather_end(saved);
    return rc != 0 ? rc : o->result;
  }
  o->starting = true;
  step(o);
  o->starting = false;
  if (o->finished) { /* closing: nothing could take it to the loop */
    int rc = o->result < 0 ? o->result : DLOCK_ECLOSED;
    free(o);
    return rc;
  }
  *op = &o->head;
  return 0;
}
