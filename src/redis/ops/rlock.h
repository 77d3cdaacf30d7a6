/* rlock.h: what the Redis lock's two files share (release.c: the release, the
 * force release, the queries; acquire.c: the acquire and its wait):
 * Redisson's derived names, the constants of the waiting algorithm, and the
 * release machine, with which an acquire also gives back a grant that came
 * as it gave up. Private to src/redis. */
#ifndef DLOCK_REDIS_RLOCK_H
#define DLOCK_REDIS_RLOCK_H

#include "ops.h"

#include <string.h>

/* The handle's hint word: its last acquire had to wait (its next acquire
 * queues at once, its release sends the wake-up first). */
#define HINT_CONTENDED 1u

static inline bool is_rw(const dl_lock_ref *l) {
  return l->kind == DL_KIND_READ || l->kind == DL_KIND_WRITE;
}

static inline bool contended(const dl_lock_ref *l) {
  return (atomic_load_explicit(l->hint, memory_order_relaxed) &
          HINT_CONTENDED) != 0;
}

/* Redisson's derived names: "<prefix>:{<name>}", or "<prefix>:<name>" when
 * the name carries its own hash tag. Either way it shares the lock's slot.
 * `out` has DL_DERIVED_MAX bytes. */
static inline const char *derived(char *out, const char *prefix,
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

/* Whether rc, a request's failure, is what a failover, a resharding or a
 * reconnect looks like from here (the master unreachable, the connection
 * lost, a demoted master, CLUSTERDOWN, MASTERDOWN, LOADING, TRYAGAIN):
 * worth sending again after a pause (release.c). On a server of a Redlock
 * (!R->ride) only a lost connection, as before: the quorum decides. Not a timeout: its time is
 * spent (a waiting acquire, which has its own, retries that too). */
bool dl_rlock_transient(const dl_redis *R, int rc);

/* ---- the release, a state machine (see dl_pend) ---- */
enum { REL_SENT, REL_PAUSED };

typedef struct dl_rlock_rel {
  dl_redis *R;
  const dl_lock_ref *l;
  int64_t lease_ms;
  int count;
  int64_t until; /* retries end here */
  int64_t pause; /* before the next retry */
  bool retry;    /* the next send is a retry */
  int wake_first;
  char id[16 + 1 + DL_INT_BUF]; /* the request id, "<nonce>:<seq>" */
  int st;
  dl_pend p;
} dl_rlock_rel;

/* Starts releasing `count` holds of l's owner (release.c). Returns 0 (go on
 * with dl_rlock_rel_step) or DL_PENDING. */
int dl_rlock_rel_start(dl_rlock_rel *o, dl_redis *R, const dl_lock_ref *l,
                       int64_t lease_ms, int count, int64_t end);
/* Goes on after a step: DL_PENDING, or the release's result: 1 released, 0
 * still held, or a negative code. */
int dl_rlock_rel_step(dl_rlock_rel *o);
/* A blocking release of `count` holds, without replica acknowledgement
 * (what gives back an acquire the replicas did not acknowledge). Returns
 * as dl_redis_lock_release. */
int dl_rlock_release_now(dl_redis *R, const dl_lock_ref *l, int64_t lease_ms,
                         int count);

#endif /* DLOCK_REDIS_RLOCK_H */
