/* redlock.h: what the Redlock backend's two files share: redlock.c (the
 * operation, a state machine over the parts) and rlops.c (the backend's
 * entries, the URL, the factory). Only for them. */
#ifndef DLOCK_REDIS_REDLOCK_H
#define DLOCK_REDIS_REDLOCK_H

#include "redis.h"

#include <stdatomic.h>

#define RL_MAX DL_REDLOCK_MAX
#define RL_RETRY_MIN_MS 2  /* the first retry's delay, then doubled */
#define RL_RETRY_MAX_MS 50 /* ... up to this, each drawn in [d/2, d] */

typedef struct redlock {
  dl_backend base;
  dl_backend_env env;      /* the client's */
  dl_backend_env part_env; /* the parts': no subscriptions */
  int n, quorum;
  dl_backend *part[RL_MAX];
  dl_redlock_url_opts opt;     /* the URL's options */
  _Atomic uint64_t last_token; /* the largest token taken (proposals) */
  bool closing;
} redlock;

/* The drift allowed for: 1 % of the lease plus 2 ms (the stricter of the
 * peers' rules: redsync's factor, npm redlock's constant). */
static inline int64_t drift_ms(int64_t lease_ms) {
  return lease_ms / 100 + 2;
}

/* ---- the operation: a state machine stepped by the parts' completions */
enum {
  OP_ACQUIRE,
  OP_RELEASE,
  OP_RENEW,
  OP_FORCE,
  OP_QUERY,
  OP_PING,
  OP_INSPECT,
  OP_SCAN
};
enum { ST_FAN, ST_FANNED, ST_FENCED, ST_RELEASED, ST_PAUSED, ST_DELIVER };
/* What a round sends: the operation, an attempt's release, or the fence
 * (the token written back). */
enum { PH_MAIN, PH_RELEASE, PH_FENCE };

typedef struct rl_op rl_op;
typedef struct rl_slot {
  rl_op *o;
  int i;
} rl_slot;

struct rl_op {
  dl_async head; /* the event-loop driver's (head.R unused) */
  redlock *B;
  int kind, st;
  bool async, starting, finished, cancelled;
  int result;
  int left;         /* parts' operations outstanding */
  int unanswered;   /* the last attempt's servers that did not answer */
  int attempt_err;  /* and the first of their errors */
  int64_t t0;       /* this round's first send */
  uint64_t propose; /* an acquire round's proposed token */
  dl_backoff retry;
  dl_pend pause; /* between attempts, on part 0 */
  rl_slot slot[RL_MAX];
  dl_async *sub[RL_MAX];
  int rc[RL_MAX];
  /* acquire */
  dl_acquire *a;
  dl_acquire as[RL_MAX];
  /* acquire, release, force, query */
  const dl_lock_ref *l;
  int64_t lease_ms;
  int count;
  dl_lock_query q;
  long long *v, vs[RL_MAX];
  /* renew */
  int nitems, *calls, ncalls[RL_MAX];
  dl_renew_item *items, *is[RL_MAX];
  dl_renew_item *copies; /* the parts' items, one block */
  /* inspect and scan: one part at a time, the next if it fails */
  int only;
  const char *key;
  dlock_lock_state *snap;
  const char *match;
  size_t prefix_len;
  dlock_scan_cb cb;
  void *cb_ud;
  int passed; /* names passed to cb */
};

/* The part the operations' pauses run on. */
static inline dl_redis *part0(redlock *B) {
  return (dl_redis *)B->part[0];
}

/* A new operation of `kind` (on `stack` for the blocking driver, else
 * malloc'ed, to end with done(ud, result)); NULL with *err. */
rl_op *dl_rl_op_new(redlock *B, rl_op *stack, int kind, dl_done_fn done,
                    void *ud, int *err);
/* Runs o (its inputs set): to its end on the calling thread (returns the
 * result), or started on the loop (0 and *op, or a negative code). */
int dl_rl_run(rl_op *o, dl_async **op);

#endif /* DLOCK_REDIS_REDLOCK_H */
