/* redlock.h: what the Redlock backend's files share: redlock.c (the
 * operation, a state machine over the parts), rlvote.c (how a round's
 * answers decide it), rlops.c (the backend's entries, the URL, the
 * factory), rlloop.c (a blocking client's loop thread), rlwait.c (waiter
 * records) and rlsent.c (the acquires sent, per name and owner): the top
 * floor of the Redis backend, over the operations (ops.h) of one backend
 * per server. Only for them, and for probe.c (a redlock:// URL's servers). */
#ifndef DLOCK_REDIS_REDLOCK_H
#define DLOCK_REDIS_REDLOCK_H

#include "../ops/ops.h"

#include <stdatomic.h>

/* The Redlock backend for redlock:// URLs (redlock.c). */
#define DL_REDLOCK_MAX 15 /* servers at most */
/* A redlock:// URL's options, after '?', joined by '&'. */
typedef struct dl_redlock_url_opts {
  bool fencing; /* fencing=on|off: tokens written back to the quorum */
  bool hash;    /* layout=plain|hash: the mutex's layout on each server */
  /* restart_delay=N[ms|s|m]: a server up for less than this refuses
   * every lock (Redlock's delayed restart); 0 off */
  int64_t restart_delay_ms;
} dl_redlock_url_opts;
/* The servers of a redlock:// URL, each as a redis:// URL (out[i], the
 * caller frees): how many (1..max), or DLOCK_EURL / DLOCK_ENOMEM; and its
 * options in *opt (may be NULL; defaults fencing on, layout plain, no
 * restart delay). */
int dl_redlock_urls(const char *url, char **out, int max,
                    dl_redlock_url_opts *opt);

#define RL_MAX DL_REDLOCK_MAX
#define RL_RETRY_MIN_MS 2  /* the first retry's delay, then doubled */
#define RL_RETRY_MAX_MS 50 /* ... up to this, each drawn in [d/2, d] */

/* A function posted to the loop's thread (rlloop.c), embedded in its
 * owner's struct. */
typedef struct rl_task {
  struct rl_task *next;
  void (*fn)(struct rl_task *k);
} rl_task;
typedef struct rl_thread rl_thread;

typedef struct rl_sent rl_sent; /* rlsent.c */
#define RL_SENT_BUCKETS 256
/* A part's place, what its count of acquires sent is read with. */
typedef struct rl_part_at {
  struct redlock *B;
  int i;
} rl_part_at;

typedef struct redlock {
  dl_backend base;
  rl_thread *thread;       /* a blocking client's: the parts' loop, or NULL */
  dl_backend_env env;      /* the client's */
  dl_backend_env part_env; /* the parts': no subscriptions */
  int n, quorum;
  dl_backend *part[RL_MAX];
  char name[RL_MAX][80]; /* each server's host:port, for messages */
  /* Each part records its details under a tag of its own (its env's
   * err_owner), so that each server's error is known apart; the
   * operation's result gets the client's. */
  dl_err_tag tag[RL_MAX];
  dl_redlock_url_opts opt;     /* the URL's options */
  _Atomic uint64_t last_token; /* the largest token taken (proposals) */
  int live; /* operations started and not yet freed (the loop's thread) */
  /* The acquires sent to each server, per name and owner with an acquire
   * or a release under way (rlsent.c; the loop's thread). */
  rl_sent *sent[RL_SENT_BUCKETS];
  rl_part_at at[RL_MAX];
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
  OP_SCAN,
  OP_WAITERS
};
enum {
  ST_FAN,
  ST_FANNED,
  ST_FENCED,
  ST_RELEASED,
  ST_PAUSED,
  ST_DELIVER,
  ST_WALK,    /* detect_deadlocks: following the owners (rlwait.c) */
  ST_CLEARED, /* a wait given up: its record deleted (rlwait.c) */
  ST_DONE
};
/* What a round sends: the operation, an attempt's release, or the fence
 * (the token written back); a late grant's give-back, in no round; and a
 * waiter's record deleted (rlwait.c). */
enum { PH_MAIN, PH_RELEASE, PH_FENCE, PH_GIVEBACK, PH_CLEAR };
/* o->rc[i] while part i's operation of this round is in flight. */
#define RC_PENDING 1000
/* o->rc[i] of a part left out of an acquire's round while it gives back
 * what it granted the attempt before: it answered that one, so it counts
 * as neither a grant nor a server that failed. */
#define RC_BUSY 1001

typedef struct rl_op rl_op;
typedef struct rl_slot {
  rl_op *o;
  int i;
} rl_slot;

struct rl_op {
  dl_async head; /* the event-loop driver's (head.R unused) */
  redlock *B;
  int kind, st;
  bool starting, cancelled;
  bool counted;   /* in B->live */
  bool decided;   /* the result is known (o->result) */
  bool delivered; /* and told: the caller's memory is no more used */
  bool fence_failed;
  int result;
  int left;         /* parts' operations outstanding, this round's or not */
  int await;        /* this round's outstanding */
  int round;        /* this round's number (fan) */
  int phase;        /* and what it sends */
  int unanswered;   /* the last attempt's servers that failed it */
  int attempt_err;  /* and the first of their errors */
  bool attempt_final; /* which no retry mends (dl_rl_acquired) */
  int64_t t0;       /* this round's first send */
  uint64_t propose; /* an acquire round's proposed token */
  dl_backoff retry;
  dl_pend pause; /* between attempts, on part 0 */
  rl_slot slot[RL_MAX];
  dl_async *sub[RL_MAX];
  int rc[RL_MAX];
  bool pending[RL_MAX];    /* an operation of part i is in flight */
  int round_of[RL_MAX];    /* ... started in this round */
  int phase_of[RL_MAX];    /* ... sending this */
  bool late_grant[RL_MAX]; /* granted after its round, kept */
  char emsg[RL_MAX][120];  /* part i's last error's detail */
  char qmsg[400];          /* why too few servers answered, once made */
  /* the lock, copied: the operation may outlive the caller's handle */
  dl_lock_ref lref;
  char *lbuf;
  atomic_uchar hint;
  /* acquire (a: the caller's, used until delivered) */
  dl_acquire *a;
  dl_acquire as[RL_MAX];
  int64_t a_lease_ms;
  int a_held;
  char *info;     /* a->info, copied */
  /* acquire and release: its name and owner's acquires sent (rlsent.c);
   * an acquire's count there when its last attempt went to server i */
  rl_sent *sent;
  unsigned sent_n[RL_MAX];
  uint64_t token; /* the token taken, once the quorum granted */
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
  dlock_lock_state *snap, *snaps; /* inspect: the caller's, each part's */
  const char *match;
  size_t prefix_len;
  dlock_scan_cb cb;
  void *cb_ud;
  int passed; /* names passed to cb */
  bool strict; /* inspect: a holder only where a quorum agrees (rlwait.c) */
  /* A waiting acquire's record (docs/WIRE.md, "Waiter records"), carried
   * by its attempts from the round it is due (rlwait.c). */
  char *rec_key, *rec_val;
  bool rec_on;
  bool rec_sent[RL_MAX];  /* part i's attempt in flight carries its value */
  bool rec_there[RL_MAX]; /* it may be on server i */
  int64_t rec_sent_at[RL_MAX];
  int64_t rec_at[RL_MAX]; /* written there then (0: not known) */
  int64_t started;        /* the operation's start */
  int held_result;        /* the result while the record is deleted */
  struct rl_walk *walk;   /* detect_deadlocks' walk, in flight */
  bool walked;            /* done, once a wait */
  /* waiters: what each server answered (rlwait.c); the agreed to wcb */
  struct rl_recs *recs;
  dlock_waiter_cb wcb;
  void *wcb_ud;
};

/* The part the operations' pauses run on. */
static inline dl_redis *part0(redlock *B) {
  return (dl_redis *)B->part[0];
}

/* A new operation of `kind` (malloc'ed; done(ud, result) ends it on an
 * event-loop client, dl_rl_call sets its own); NULL with *err. */
rl_op *dl_rl_op_new(redlock *B, int kind, dl_done_fn done, void *ud, int *err);
/* Copies the lock ref l into o (o->l then points to the copy): 0, or
 * DLOCK_ENOMEM with o freed. */
int dl_rl_set_lock(rl_op *o, const dl_lock_ref *l);
/* Starts o (its inputs set) on the loop: 0 and *op, or a negative code
 * when nothing could start (o is then freed). The loop's thread only. */
int dl_rl_run(rl_op *o, dl_async **op);

/* For rlwait.c: steps o on; ends it with result (finish); starts a round
 * of `phase` on every part (fan); lets go of a hold on o (o->left) and
 * frees it if that was the last; starts part i's `phase` outside any
 * round, as a straggler's (false if it did not start). */
void dl_rl_step(rl_op *o);
void dl_rl_finish(rl_op *o, int result);
void dl_rl_fan(rl_op *o, int phase);
void dl_rl_unhold(rl_op *o);
bool dl_rl_start_aside(rl_op *o, int i, int phase);

/* ---- rlvote.c: how a round's answers decide it ---- */
/* Keeps part i's detail of its error o->rc[i] (recorded under its tag). */
void dl_rl_keep_error(rl_op *o, int i);
/* Part i's error o->rc[i] as the result, its detail the client's. */
int dl_rl_part_error(rl_op *o, int i);
/* Makes B's largest token taken at least token. */
void dl_rl_raise_last(redlock *B, uint64_t token);
/* Too few servers answered: err (or the first error), its detail naming
 * every server that did not answer and why; but a refusal that a quorum
 * of servers answered alike (EWRONGTYPE, ENOPERM, ...: an answer) is that
 * code, with what they said. */
int dl_rl_quorum_error(rl_op *o, int err);
/* The refusal a quorum of servers answered alike, or 0. */
int dl_rl_refused(const rl_op *o);
/* An acquire round: 1 taken (o->a filled in), 0 not, -1 not decided. */
int dl_rl_acquired(rl_op *o);
/* A release: whether decided (a quorum answered), then its result. */
bool dl_rl_settled(const rl_op *o);
int dl_rl_released(rl_op *o);
/* A force release: 1 the lock was held (a quorum deleted it, or answers
 * that failed may hide one), 0 not (a minority's keys deleted too), an
 * error, or -2 while the answers still to come could make a quorum. */
int dl_rl_forced(rl_op *o);
/* Renew, query, ping: the result, or -2 while the answers still to come
 * could change it. */
int dl_rl_renewed(rl_op *o);
int dl_rl_queried(rl_op *o);
int dl_rl_pinged(rl_op *o);
/* An inspect: the part whose snapshot is the answer, -1 when none
 * answered (the error), or -2 while the answers to come could change it.
 * A holder is shown when a quorum of servers has the lock held by that
 * owner (the others may hold a rival's attempt that failed, or nothing);
 * else, once no owner can reach a quorum, the first server's that found it
 * free, or the first answer. */
int dl_rl_inspected(const rl_op *o);

/* Whether part i's snapshot shows the lock held by an owner a quorum of
 * the servers answered alike. */
bool dl_rl_held_by_quorum(const rl_op *o, int i);

/* ---- rlwait.c: waiter records, the waiters entry, detect_deadlocks ---- */
/* Part i's attempt of o's round: carries the record, if on (sets a's
 * rec_key and rec_val). */
void dl_rl_rec_attempt(rl_op *o, int i, dl_acquire *a);
/* Part i answered its attempt (rc), or its delete (phase PH_CLEAR). */
void dl_rl_rec_answer(rl_op *o, int i, int phase, int rc);
/* Before the pause between attempts: turns the record on when due; 1 if
 * the walk started (o waits in ST_WALK), 0 to pause, or a negative code. */
int dl_rl_rec_pause(rl_op *o);
/* Ends an acquire with result: the record deleted first (a round, o in
 * ST_CLEARED) where it may be, else finish at once. */
void dl_rl_give_up(rl_op *o, int result);
/* A held lock: the record deleted (in the background) where the attempt
 * left it (a server that refused it). */
void dl_rl_clear_behind(rl_op *o);
/* ST_CLEARED: whether the deletes are decided. */
bool dl_rl_cleared(const rl_op *o);
/* A waiters round: the result (how many passed to wcb), or -2 while
 * answers are to come. */
int dl_rl_waiters_done(rl_op *o);
/* The waiters callback of part i (ud: its rl_slot). */
int dl_rl_rec_seen(const dlock_waiter *w, void *ud);
/* Frees o's record, walk and waiters' state. */
void dl_rl_rec_free(rl_op *o);
/* The backend's waiters entry (blocking clients). */
int dl_rl_waiters(dl_backend *b, const char *prefix, dlock_waiter_cb cb,
                  void *ud);

/* ---- rlsent.c: the acquires sent to each server, per name and owner ----
 * One connection runs its requests in the order sent, so an attempt still
 * in flight on a server runs before the same owner's next acquire sent
 * there. What the older call sends there after that acquire went (its
 * give-back, a release sent again after a lost connection) would run
 * behind it and delete the hold it took or re-took: it is not sent. The
 * later acquire's call settles that server (kept as part of its hold, or
 * given back in turn): the count the client believes is what each script
 * writes, so the server ends as that call left it. */
/* Takes a hold on the entry of o's name and owner (made if none): 0, or
 * DLOCK_ENOMEM. dl_rl_sent_unref lets go of it, freed with the last. */
int dl_rl_sent_ref(rl_op *o);
void dl_rl_sent_unref(rl_op *o);
/* o's attempt goes to server i: counted (returns what o had counted
 * there before); dl_rl_sent_unmark(o, i, that) if it failed to start. */
unsigned dl_rl_sent_mark(rl_op *o, int i);
void dl_rl_sent_unmark(rl_op *o, int i, unsigned was);
/* Whether another acquire of o's name and owner went to server i since
 * o's last attempt there. */
bool dl_rl_sent_since(const rl_op *o, int i);
/* A part's hook (ops.h, dl_redis.acquires_sent; ud its rl_part_at): the
 * acquires of l's name and owner sent to that server, 0 when none is
 * under way. */
unsigned dl_rl_sent_count(void *ud, const dl_lock_ref *l);
/* Frees what is left of B's table (B closing). */
void dl_rl_sent_free(redlock *B);

/* ---- rlloop.c: a blocking client's loop, driven by its calls or its
 * thread ---- */
/* A loop (the built-in driver) and its thread, not yet started: 0, or a
 * negative code. */
int dl_rl_thread_new(rl_thread **out);
dl_loop *dl_rl_thread_loop(rl_thread *t);
/* Starts the loop's thread: 0, or DLOCK_ENOMEM. */
int dl_rl_thread_start(rl_thread *t);
/* Runs fn(arg) where the loop is driven and waits for it, driving the
 * loop meanwhile if nobody does (any thread; from a thread that drives the
 * loop, a callback, it runs at once). */
void dl_rl_thread_sync(rl_thread *t, void (*fn)(void *), void *arg);
/* Lets the loop run on until idle(ud) says nothing is left in flight, or
 * drain_ms pass (what a call returned from before the rest of its servers
 * answered: a release's tail, a late grant given back), then runs last(ud)
 * on the loop's thread (NULL: nothing), stops and joins it, and frees the
 * loop (accepts NULL). No call may be under way. */
void dl_rl_thread_free(rl_thread *t, bool (*idle)(void *), int64_t drain_ms,
                       void (*last)(void *), void *ud);
/* A blocking call: runs o on B's loop and returns its result once decided
 * (what is still in flight goes on there), with the detail of a negative
 * one recorded for the calling thread. The calling thread drives the loop
 * while it waits unless another thread does; from a callback on the loop,
 * DLOCK_EINVAL. */
int dl_rl_call(rl_op *o);

#endif /* DLOCK_REDIS_REDLOCK_H */
