/* ops.h: the Redis backend's operations, the floor above the links: the
 * typed operations of core/backend.h over a link (backend.c, the table and
 * what the files share), each kind in its files: the acquire's
 * (acquire.h) and release.c (the lock family, rlock.h), sem_latch.c
 * (semaphores, permits, latch), blocking_queue.c, snapshot.c (inspect,
 * scan), renew.c (renewals, replica acknowledgement), reqop.c (the
 * request-only machine), names.c (Redisson's names). It sees the links and
 * the connections (links.h), never Redlock (tests/check_layers.sh). */
#ifndef DLOCK_REDIS_OPS_H
#define DLOCK_REDIS_OPS_H

#include "../links/links.h"
#include "../redis.h"

/* ---- names.c: Redisson's key and channel names ---- */
/* Redisson's derived name "<prefix>:{<key>}", or "<prefix>:<key>" when the
 * key has its own hash tag (same slot either way), into out (len bytes). */
void dl_derived_into(char *out, size_t len, const char *prefix,
                     const char *key);
/* Redisson's suffixed name "{<key>}:<suffix>" ("<key>:<suffix>" when the
 * key has a hash tag), into out (len bytes). */
void dl_derived_suffix_into(char *out, size_t len, const char *key,
                            const char *suffix);
#define DL_DERIVED_MAX (DLOCK_KEY_PREFIX_MAX + DLOCK_NAME_MAX + 48)

/* ---- backend.c: the typed operations over a link ---- */
typedef struct dl_redis {
  dl_backend base;
  dl_rlink *link;
  dl_backend_env env;
  dl_conn_config cfg; /* what the link connects with (it borrows it) */
  int min_replicas;    /* dlock_client_options.min_replicas_acked */
  int starvation_ms;   /* dlock_client_options.starvation_ms (>= 0) */
  /* "<key prefix>dlock_revoke" (docs/WIRE.md): where force releases
   * announce a key, and the client hears them. */
  char *revoke_channel;
  int replicas_timeout_ms;
  void *notice;       /* watch_losses' relay to the client */
  /* Request ids of releases, "<nonce>:<seq>": unique across processes even
   * with an explicit client_id (a restarted process reuses it). */
  char release_nonce[17];
  atomic_uint_fast64_t release_seq;
  /* A server of a composite: while it has been up for less than this
   * (ms), it refuses the mutexes (Redlock's delayed restart); 0 off. */
  int64_t restart_delay_ms;
  /* Ride out a failover (acquire.c's ride_out, release.c's release retries):
   * not on a server of a composite, whose quorum decides without it. */
  bool ride;
  bool part; /* a server of a composite (dl_redis_part_new) */
  /* A server of a composite: the composite's count of the acquires of l's
   * name and owner sent to it (NULL: none kept; ud acquires_ud). A release
   * is not sent again after a lost connection once that count has changed
   * since it started: the acquire went behind its first send, and the
   * resend would delete the hold that acquire took (its own call settles
   * this server). */
  unsigned (*acquires_sent)(void *ud, const dl_lock_ref *l);
  void *acquires_ud;
} dl_redis;

/* Replica acknowledgement after a write (`what`, to the nkeys keys; 0:
 * every master of a cluster) of the blocking driver: 0 when off or when
 * min_replicas acknowledged in time, else DLOCK_ENOTACKED (or the WAIT's
 * error) with the detail recorded, `then` appended. */
int dl_redis_replicate(dl_redis *R, const char *const *keys, int nkeys,
                       const char *what, const char *then);
/* The event-loop driver's: starts the link's acknowledgement step for R's
 * replicas (a marker and WAIT on the connection to the master of each of
 * the nkeys keys' slots, or to every master when nkeys is 0) into p:
 * DL_PENDING, or 0 with p->rc. Then dl_redis_replicate_result: 0
 * acknowledged, or DLOCK_ENOTACKED / a code with the detail recorded as
 * dl_redis_replicate's. */
int dl_redis_replicate_start(dl_redis *R, const char *const *keys, int nkeys,
                             dl_pend *p);
int dl_redis_replicate_result(dl_redis *R, dl_pend *p, const char *what,
                              const char *then);
/* renew.c: the backend's renew and renew_async entries. */
int dl_redis_renew(dl_backend *base, int64_t deadline, int64_t lease_ms, int n,
                   dl_renew_item *items, int *calls);
int dl_redis_renew_async(dl_backend *base, int64_t deadline, int64_t lease_ms,
                         int n, dl_renew_item *items, int *calls,
                         dl_done_fn done, void *ud, dl_async **op);

/* One server of a composite (redlock.c): as dl_redis_backend_new on
 * env->loop (always set), but its link connects at its first request. */
int dl_redis_part_new(const dlock_client_options *opts,
                      const dl_backend_env *env, dl_backend **out);
/* The typed operations over a link made elsewhere (the reply fuzzer's),
 * which the backend then owns. */
int dl_redis_backend_over(dl_rlink *link, const dl_backend_env *env,
                          dl_backend **out);
/* Counters for tests and the benchmark (b: a dl_redis_backend_new one):
 * the link's (any link), and the single link's reader role (0, false for
 * another link). */
uint64_t dl_redis_backend_round_trips(dl_backend *b);
uint64_t dl_redis_backend_wakeups(dl_backend *b);
uint64_t dl_redis_backend_direct_wakeups(dl_backend *b);
bool dl_redis_backend_sleeper_reads(dl_backend *b);

/* The operations of the backend table, by file. */
int dl_redis_lock_acquire_async(dl_backend *b, dl_acquire *a, dl_done_fn done,
                                void *ud, dl_async **op);
int dl_redis_lock_release_async(dl_backend *b, const dl_lock_ref *l,
                                int64_t lease_ms, int count, dl_done_fn done,
                                void *ud, dl_async **op);
int dl_redis_sem_acquire_async(dl_backend *b, const dl_sync_ref *s,
                               int permits, bool wait, int64_t deadline,
                               dl_done_fn done, void *ud, dl_async **op);
int dl_redis_permit_acquire_async(dl_backend *b, const dl_sync_ref *s,
                                  const char *id, int64_t lease_ms, bool wait,
                                  int64_t deadline, int64_t *valid_until,
                                  dl_done_fn done, void *ud, dl_async **op);
int dl_redis_latch_await_async(dl_backend *b, const dl_sync_ref *s, bool wait,
                               int64_t deadline, dl_done_fn done, void *ud,
                               dl_async **op);
int dl_redis_lock_acquire(dl_backend *b, dl_acquire *a);
int dl_redis_lock_release(dl_backend *b, const dl_lock_ref *l,
                          int64_t lease_ms, int count);
int dl_redis_lock_force_release(dl_backend *b, const dl_lock_ref *l);
int dl_redis_lock_query(dl_backend *b, const dl_lock_ref *l, dl_lock_query q,
                        long long *v);
int dl_redis_inspect(dl_backend *b, const char *key, dlock_lock_state *st);
/* Every holder of the lock at key to cb (waits.c): a read lock's readers
 * (its hash's owner fields), else inspect's holder. */
int dl_redis_lock_holders(dl_backend *b, const char *key, dl_holder_cb cb,
                          void *ud);
/* waits.c: the waiters entry (blocking driver only). A waiter's record
 * is "<prefix>dlock_wait:<owner id>", a string with a lease (rlock.h);
 * the scan for lock names skips them. */
#define DL_WAIT_RECORD "dlock_wait:"

/* A PTTL answer (ms; -1 no expiry, -2 no key), as our scripts also return
 * it, in the seam's words: DLOCK_TTL_NONE, DLOCK_TTL_FREE, or the ms. */
static inline int64_t dl_redis_ttl(long long pttl) {
  return pttl >= 0    ? (int64_t)pttl
         : pttl == -1 ? DLOCK_TTL_NONE
                      : DLOCK_TTL_FREE;
}
int dl_redis_waiters(dl_backend *b, const char *prefix, dlock_waiter_cb cb,
                     void *ud);
/* The event-loop driver's form (a Redlock's part): cb as above, then
 * done(ud, how many were passed, or a negative code). */
int dl_redis_waiters_async(dl_backend *b, const char *prefix,
                           dlock_waiter_cb cb, void *cb_ud, dl_done_fn done,
                           void *ud, dl_async **op);
/* DEL of a waiter's record `key` (event-loop driver; a Redlock's wait that
 * ended without a grant): done(ud, 1 deleted, 0 none, or a code). */
int dl_redis_wait_del_async(dl_backend *b, const char *key, dl_done_fn done,
                            void *ud, dl_async **op);
/* l's owner's record key into out (DL_WAIT_KEY_MAX, rlock.h: DL_DERIVED_MAX
 * + DL_OWNER_MAX bytes), and a's record's value (malloc'ed, the caller
 * frees; NULL out of memory): docs/WIRE.md, "Waiter records". */
void dl_wait_record_key(char *out, const dl_lock_ref *l);
char *dl_wait_record_value(const dl_acquire *a);
int dl_redis_scan(dl_backend *b, const char *match, size_t prefix_len,
                  dlock_scan_cb cb, void *ud);
int dl_redis_lock_force_release_async(dl_backend *b, const dl_lock_ref *l,
                                      dl_done_fn done, void *ud,
                                      dl_async **op);
int dl_redis_lock_query_async(dl_backend *b, const dl_lock_ref *l,
                              dl_lock_query q, long long *v, dl_done_fn done,
                              void *ud, dl_async **op);
int dl_redis_inspect_async(dl_backend *b, const char *key,
                           dlock_lock_state *st, dl_done_fn done, void *ud,
                           dl_async **op);
int dl_redis_scan_async(dl_backend *b, const char *match, size_t prefix_len,
                        dlock_scan_cb cb, void *cb_ud, dl_done_fn done,
                        void *ud, dl_async **op);
int dl_redis_lock_fence_async(dl_backend *b, const dl_lock_ref *l,
                              uint64_t token, int64_t lease_ms,
                              dl_done_fn done, void *ud, dl_async **op);
/* PING, expecting PONG (reqop.c). */
int dl_redis_ping(dl_backend *b);
int dl_redis_ping_async(dl_backend *b, dl_done_fn done, void *ud,
                        dl_async **op);
int dl_redis_sem_acquire(dl_backend *b, const dl_sync_ref *s, int permits,
                         bool wait, int64_t deadline);
int dl_redis_permit_acquire(dl_backend *b, const dl_sync_ref *s,
                            const char *id, int64_t lease_ms, bool wait,
                            int64_t deadline, int64_t *valid_until);
int dl_redis_latch_await(dl_backend *b, const dl_sync_ref *s, bool wait,
                         int64_t deadline);
int dl_redis_sync_update(dl_backend *b, const dl_sync_ref *s, dl_sync_op op,
                         long long n, const char *id, long long *v);
int dl_redis_sync_update_async(dl_backend *b, const dl_sync_ref *s,
                               dl_sync_op op, long long n, const char *id,
                               long long *v, dl_done_fn done, void *ud,
                               dl_async **op_out);

/* Shared by those files: a reply (freed here) that must be one integer
 * in [lo, hi] (0 and *v, or a negative code: DLOCK_EPROTO for any other
 * reply), and the waiting loop of the kinds on a channel. */
int dl_redis_int_reply(dl_redis *r, struct redisReply *rep, long long lo,
                       long long hi, long long *v);
/* The steps of an operation (see dl_pend), over whichever link r has.
 * eval: a script answered by `until` (dl_now_ms() time) at the latest, 0:
 * within the command timeout; the script may carry DL_EVAL_WAKE_FIRST.
 * sub_ref: a subscription confirmed by `deadline` (p->sub; NULL with
 * rc 0: none to be had, wait by timers alone). sub_wait: one wake-up
 * (p->rc 1), or none by `until` (0), or DLOCK_ECLOSED. pause: nothing until
 * `until`. Each returns 0 (done, p filled in) or DL_PENDING. */
int dl_redis_step_eval(dl_redis *r, dl_pend *p, int64_t until, int script,
                       int nkeys, const char *const *keys, int nargs,
                       const char *const *args);
/* As dl_redis_step_eval for a script that takes a value off the server
 * (dl_pend.take: an event-loop client's close waits for its reply). */
int dl_redis_step_take_eval(dl_redis *r, dl_pend *p, int64_t until,
                            int script, int nkeys, const char *const *keys,
                            int nargs, const char *const *args);
/* An operation's state (`size` bytes, its dl_shell first) for the
 * blocking driver (`stack`, the caller's) or the event-loop one
 * (allocated), zeroed: NULL with *err when the client is of the other
 * kind, or out of memory (sem_latch.c; blocking_queue.c). */
void *dl_redis_state_new(dl_redis *R, void *stack, size_t size, bool async,
                         dl_async **op, int *err);
/* blocking_queue.c: the blocking queue and deque (dl_backend_ops.queue). */
int dl_redis_queue(dl_backend *b, const dl_sync_ref *s, dl_queue_req *q);
void dl_redis_queue_kick(dl_backend *b, const dl_sync_ref *s);
int dl_redis_queue_async(dl_backend *b, const dl_sync_ref *s, dl_queue_req *q,
                         dl_done_fn done, void *ud, dl_async **op);
/* fence.c: fenced resources (dl_backend_ops.fence, fence_async). */
int dl_redis_fence(dl_backend *b, dl_fence_req *f);
int dl_redis_fence_async(dl_backend *b, dl_fence_req *f, dl_done_fn done,
                         void *ud, dl_async **op);
/* 0 if r's link is of the driver a call needs (async: the event loop's),
 * else DLOCK_EINVAL with the detail recorded. */
int dl_redis_driver_check(dl_redis *r, bool async);
int dl_redis_step_sub_ref(dl_redis *r, dl_pend *p, const char *channel,
                          int mode, int64_t deadline);
int dl_redis_step_sub_wait(dl_redis *r, dl_pend *p, dl_sub *s, int64_t until,
                           int64_t since, dl_sub *grant);
int dl_redis_step_pause(dl_redis *r, dl_pend *p, int64_t until);
void dl_redis_step_cancel(dl_redis *r, dl_pend *p);
/* Ends a pending wait (a subscription's confirmation, a wake-up, a pause)
 * as if its deadline had come: p resumes soon, from the loop, with rc 0
 * and no subscription. A request already sent is left to its answer.
 * Returns whether p was such a wait. */
bool dl_redis_step_interrupt(dl_redis *r, dl_pend *p);

/* An operation of the event-loop driver (core/backend.h's dl_async). */
struct dl_async {
  dl_redis *R;
  dl_done_fn done;
  void *ud;
  bool cancelled;
};
/* The shell of an operation run by the event-loop driver: the first member
 * of the operation's state (malloc'ed; freed once done has been told).
 * Each step's resume is dl_shell_resume, with p->op the shell. */
typedef struct dl_shell dl_shell;
struct dl_shell {
  dl_async head;
  /* Goes on after a step: DL_PENDING or the result. */
  int (*step)(dl_shell *sh);
  /* Or NULL: adjusts the result before done hears it. */
  void (*finish)(dl_shell *sh, int *rc);
  dl_pend *main;     /* the step a cancel interrupts */
  int64_t *deadline; /* or NULL: set to now by a cancel */
  bool finished;
  int final;
};
void dl_shell_resume(dl_pend *p);
/* Sets sh up (no finish, no deadline) and binds `main` (or NULL) to it. */
void dl_shell_init(dl_shell *sh, dl_redis *R, dl_done_fn done, void *ud,
                   int (*step)(dl_shell *), dl_pend *main);
/* Makes p's completions resume sh's operation. */
void dl_shell_bind(dl_shell *sh, dl_pend *p);
/* After the operation's first step returned rc: 0 and *op (done comes from
 * the loop, even when rc is already the result). */
int dl_shell_start(dl_shell *sh, int rc, dl_async **op);
/* The backend's cancel (dl_backend_ops.cancel) for every operation. */
void dl_redis_cancel(dl_backend *b, dl_async *op);

/* An operation that sends requests one after another and reads each
 * answer, with no wait between them (reqop.c): the first member of its
 * state. `send` starts the next request on p (dl_redis_step_eval or
 * _command; returns what they return); `result` reads p's answer
 * (dl_reqop_reply) and returns the operation's result, a negative code, or
 * DL_REQOP_MORE: send the next. */
#define DL_REQOP_MORE 0x7ffe
typedef struct dl_reqop dl_reqop;
struct dl_reqop {
  dl_shell sh; /* the event-loop driver's */
  dl_redis *R;
  dl_pend p;
  int (*send)(dl_reqop *x);
  int (*result)(dl_reqop *x);
};
/* The state of a request operation (as dl_redis_state_new) with R, send
 * and result set. */
void *dl_reqop_new(dl_redis *R, void *stack, size_t size, bool async,
                   dl_async **op, int *err, int (*send)(dl_reqop *),
                   int (*result)(dl_reqop *));
/* Runs x (from dl_reqop_new): to its end on
 * the calling thread when done is NULL (returns the result), else on the
 * loop (0 and *op, or a negative code; done(ud, result) later). */
int dl_reqop_run(dl_reqop *x, dl_done_fn done, void *ud, dl_async **op);
/* p's reply, now the caller's to free, or NULL when the request failed
 * (p.rc the code). */
struct redisReply *dl_reqop_reply(dl_reqop *x);
/* A SCAN reply r (snapshot.c): its cursor into cursor (len bytes) and its
 * page of keys (an array owned by r), or NULL when r is no SCAN reply (r
 * freed, DLOCK_EPROTO recorded). */
struct redisReply *dl_scan_page(dl_redis *R, struct redisReply *r, char *cursor,
                                size_t len);

/* Waiting for a semaphore's permits or a latch's zero, a state machine
 * (see dl_pend): tries, and until done or the deadline (with `wait`),
 * sleeps on `channel` (mode: dl_wake_mode) between tries, subscribed
 * before the second try so that no message is missed. */
typedef struct dl_waiter dl_waiter;
typedef struct dl_wait_kind {
  /* Sends one try: dl_redis_step_* on w->p; returns what it returns. */
  int (*send)(dl_waiter *w);
  /* The try's answer, from w->p (the reply is the callee's to free): 1
   * done, a negative code, or 0 not yet, with w->recheck_ms how soon to
   * try again even without a message (-1: only on a message). */
  int (*result)(dl_waiter *w);
} dl_wait_kind;
struct dl_waiter {
  /* in */
  dl_redis *R;
  const dl_wait_kind *kind;
  void *ctx; /* the kind's */
  const char *channel;
  int mode;
  bool wait;
  int64_t deadline;
  /* the machine's */
  int st, rc, tries;
  int64_t start, recheck_ms;
  dl_sub *sub;
  /* The last try went before the server confirmed the subscription (its
   * connection still coming up, or back): a message since may have gone
   * unheard, so the wait polls (`poll`) until a try goes after it. */
  bool deaf;
  dl_backoff poll;
  dl_pend p;
};
/* Starts w (its inputs set) and runs it until it waits on a step
 * (DL_PENDING) or ends: 1 done, 0 when the wait ran out, or a negative
 * code. dl_redis_wait_step goes on after a step completed. */
int dl_redis_wait_start(dl_waiter *w);
int dl_redis_wait_step(dl_waiter *w);
/* A command's reply as a step (GET, say): as dl_redis_step_eval. */
int dl_redis_step_command(dl_redis *r, dl_pend *p, int argc,
                          const char **argv);
/* As dl_redis_step_command for a command that takes a value off the
 * server (a pop: dl_pend.take). */
int dl_redis_step_take_command(dl_redis *r, dl_pend *p, int argc,
                               const char **argv);
/* As dl_redis_step_command with each argument's length (binary values). */
int dl_redis_step_command_bin(dl_redis *r, dl_pend *p, int argc,
                              const char **argv, const size_t *lens);

#endif /* DLOCK_REDIS_OPS_H */
