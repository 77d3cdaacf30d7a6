/* rlock.h: what the Redis lock's files share (release.c: the release, the
 * force release, the queries; acquire.h's: the acquire and its wait):
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

/* A waiter's own channel, "<channel>:<owner id>": the fair lock's wake-up
 * and the plain lock's grant. `out` has OWNER_CHANNEL_MAX bytes. */
#define OWNER_CHANNEL_MAX (DL_DERIVED_MAX + DL_OWNER_MAX + 1)
static inline const char *owner_channel(char *out, const dl_lock_ref *l,
                                        const char *owner) {
  size_t n = strlen(CHANNEL(l, out)), m = strlen(owner);
  if (n + 1 + m >= OWNER_CHANNEL_MAX) m = OWNER_CHANNEL_MAX - n - 2;
  out[n] = ':'; /* n < DL_DERIVED_MAX: the ':' and the NUL fit */
  memcpy(out + n + 1, owner, m);
  out[n + 1 + m] = '\0';
  return out;
}

/* A waiter in the plain lock's hand-off queue counts as alive for three
 * beats after each attempt, and attempts once a beat: at first every
 * GRANT_STALE_MS / 3, then less often the longer it waits, up to every
 * GRANT_BEAT_MAX_MS. */
#define GRANT_STALE_MS 6000
#define GRANT_BEAT_MAX_MS 20000
/* A queued waiter's heartbeat after `waited` ms: GRANT_STALE_MS / 3 at
 * first, then as long as it has waited, up to GRANT_BEAT_MAX_MS, so that a
 * long wait costs the server and the client little (10 000 waiters that
 * waited a minute: 500 attempts a second); never more than a third of the
 * lease it asks for (a grant's validity counts from the last attempt). The
 * price: a waiter that froze (SIGSTOP, a long pause) can still be handed
 * the lock up to three beats after its last attempt, and then holds it
 * until that lease ends; a waiter that died or gave up is skipped at once
 * (its grant channel has no subscriber). */
static inline int64_t dl_grant_beat(int64_t waited, int64_t lease_ms) {
  int64_t beat = waited;
  if (beat < GRANT_STALE_MS / 3) beat = GRANT_STALE_MS / 3;
  if (beat > GRANT_BEAT_MAX_MS) beat = GRANT_BEAT_MAX_MS;
  int64_t third = lease_ms / 3;
  if (third < beat) beat = third > 0 ? third : 1;
  return beat;
}

/* ---- waits.c: the waiter records (docs/WIRE.md) ---- */
/* A Redlock server's acquire (R->part): formats its restart delay into
 * young and the token proposed into propose ("" none; DL_INT_BUF bytes
 * each) and returns how many arguments the attempt sends: 14 with the
 * waiter's record (a->rec_key), 11 with a proposal, 10 with a restart
 * delay, else 0 (the script's defaults). */
int dl_redis_part_args(const dl_redis *R, const dl_acquire *a, char *young,
                       char *propose);
/* Sends its attempt (lock_acquire.lua) with the record: args' 11
 * arguments, then ARGV[12..14] a's rec_key, rec_val and rec_px (as
 * dl_redis_step_eval). Off the single server's hot path, which sends 11
 * at most. */
int dl_redis_part_eval(dl_redis *R, dl_pend *p, int64_t until,
                       const dl_acquire *a, int nkeys, const char *const *keys,
                       const char *const *args);
/* A waiter's record (DL_WAIT_RECORD, ops.h) lives this long unless
 * written again: every third of it while its owner waits; deleted when
 * the wait ends. Written only by an acquire that has waited
 * DL_WAIT_NOTE_AFTER_MS. */
#define DL_WAIT_RECORD_MS 10000
#define DL_WAIT_KEY_MAX (DL_DERIVED_MAX + DL_OWNER_MAX)
/* An acquire's record: when last written, whether it is there, and
 * whether it cannot be (a write failed: an ACL without SET, say; the wait
 * is then only left out of dlock deadlocks). */
typedef struct dl_wait_rec {
  int64_t at;
  bool noted, off;
  bool walked; /* detect_deadlocks: the owners were followed */
} dl_wait_rec;
/* A wait is recorded once it has lasted this long: a deadlock is a wait
 * that lasts, while a contended lock's hand-off takes milliseconds and so
 * costs no record (its write and its delete would be two more round
 * trips on the hand-off's path). With detect_deadlocks, at once. */
#define DL_WAIT_NOTE_AFTER_MS 500
/* Whether the record is to be written now (the acquire that began at
 * `start` has waited long enough, or detect; or a third of its lease
 * passed since it was). */
bool dl_wait_rec_due(const dl_wait_rec *w, int64_t start, bool detect);
/* `until`, or earlier: when the record is due (again). */
int64_t dl_wait_rec_until(const dl_wait_rec *w, int64_t start, bool detect,
                          int64_t until);
/* Takes the answer to dl_redis_wait_note on p (frees its reply). */
void dl_wait_rec_noted(dl_wait_rec *w, dl_pend *p);
/* Steps (as dl_redis_step_command) that write a's record (SET ... PX) and
 * delete l's owner's record (DEL; w is then no longer noted). */
int dl_redis_wait_note(dl_redis *R, dl_pend *p, const dl_acquire *a);
int dl_redis_wait_clear(dl_redis *R, dl_pend *p, const dl_lock_ref *l,
                        dl_wait_rec *w);
/* detect_deadlocks: core/deadlock.c's search from the lock a waiter
 * waits for, lazy: a lock's holders (HKEYS, or a plain lock's GET: every
 * reader of a read lock), then a holder's waiter record (GET) when the
 * search comes to it, then that lock's holders, ... */
typedef dl_walk dl_wait_walk;
/* Sets w up for a's walk, if it is due: a->detect, rec written, not yet
 * walked (once a wait: of two owners closing a cycle at once, the later
 * one to write its record sees the other's). Returns whether it is. */
bool dl_wait_walk_start(dl_wait_walk *w, dl_wait_rec *rec, const dl_acquire *a,
                        const dl_backend_env *env);
/* Sends the walk's next request on p (as dl_redis_step_command). */
int dl_wait_walk_send(dl_redis *R, dl_pend *p, dl_wait_walk *w);
/* Takes its answer (frees the reply): 1 more to follow, 0 no cycle (or
 * it cannot tell), DLOCK_EDEADLK with the cycle in the detail, or
 * DLOCK_ENOMEM; w is freed when it returns 1 no more. */
int dl_wait_walk_result(dl_redis *R, dl_pend *p, dl_wait_walk *w);

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
  int lost;      /* ... after this error */
  unsigned sent; /* R->acquires_sent at the start */
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
