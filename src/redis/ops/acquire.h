/* acquire.h: what the Redis lock's acquire files share: the acquire, one
 * state machine for both drivers (see dl_pend), its states and its
 * struct. attempt.c sends an attempt and reads its answer, acquire.c
 * runs the first attempt and the wait, leave.c the way out and the
 * result, acquire_entries.c the backend's two entries. Private to
 * src/redis/ops. */
#ifndef DLOCK_REDIS_ACQUIRE_H
#define DLOCK_REDIS_ACQUIRE_H

#include "rlock.h"

/* A starving waiter's hand-off reservation lasts this long, renewed at each
 * attempt; a starving waiter attempts at least every RESERVE_MS / 3. So a
 * waiter that dies blocks a free lock for at most this long. */
#define RESERVE_MS 600

/* Where an acquire is: which step it waits for. The wait's states come
 * first (acquire.c), then the way out's (leave.c), from ACQ_OUT on. */
typedef enum acq_state {
  ACQ_FIRST,     /* the first attempt's reply */
  ACQ_SUBBED,    /* the unlock channel's subscription */
  ACQ_GRANTS,    /* the grant channel's */
  ACQ_LOOP,      /* the top of the wait */
  ACQ_ATTEMPTED, /* an attempt's reply, while waiting */
  ACQ_RIDDEN,    /* the pause after an attempt the deployment failed */
  ACQ_WAITED,    /* a wake-up, or the sleep's end */
  ACQ_NOTED,     /* the waiter's record written (waits.c) */
  ACQ_WALK,
  ACQ_WALKED,    /* detect_deadlocks: following the owners */
  ACQ_OUT,       /* the wait is over (o->rc): the way out begins */
  ACQ_CANCELLED, /* leaving the hand-off queue */
  ACQ_GIVEN,     /* giving back a hold taken as we gave up, or closed */
  ACQ_UNSUB,     /* the subscriptions go, then the fair queue */
  ACQ_FAIR_LEFT, /* leaving the fair queue */
  ACQ_UNRESERVE,
  ACQ_UNRESERVED, /* freeing the hand-off reservation */
  ACQ_CLEARED     /* the waiter's record deleted */
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

/* ---- attempt.c ---- */
/* Sends one attempt; the next state is `next`. `enqueue`: if refused, join
 * (or stay in) the fair lock's queue, or the plain lock's hand-off queue.
 * Returns 0 or DL_PENDING. */
int dl_acq_attempt_send(acq_op *o, acq_state next, bool enqueue);
/* An attempt's answer: 1 and o->tok when acquired (2 re-entered), 0 and
 * the holder's PTTL in o->ttl when another owner holds it (o->reserved: the
 * lock is free but reserved for a starving waiter of this client), or a
 * negative code. */
int dl_acq_attempt_result(acq_op *o);

/* ---- acquire.c ---- */
/* Sets o up for an acquire: o->a is the request (and gets the result). */
void dl_acq_init(acq_op *o, dl_redis *R, dl_acquire *a);
/* The first step: a look for lingering subscriptions, then the first
 * attempt. Returns as dl_acq_step. */
int dl_acq_start(acq_op *o);
/* Runs the acquire from where it stands until it waits on a step
 * (DL_PENDING) or ends: 1 acquired (a->status, token, valid_until), 0
 * refused until the deadline (a->ttl), or a negative code. */
int dl_acq_step(acq_op *o);

/* ---- leave.c ---- */
/* Runs the way out from o->st (ACQ_OUT or a state after it) until it waits
 * on a step (DL_PENDING) or ends; returns as dl_acq_step. */
int dl_acq_leave(acq_op *o);
/* Starts giving back the hold an attempt took (one count: a wait's
 * attempts take the lock afresh) rather than leave it held until its
 * lease ends; the way out goes on from ACQ_GIVEN. Returns 0 or
 * DL_PENDING. */
int dl_acq_give_back(acq_op *o);

#endif /* DLOCK_REDIS_ACQUIRE_H */
