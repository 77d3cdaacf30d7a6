/* conformance.h: the conformance suite's shared part. Every test is
 * written once against the deployment the harness started for the URL
 * kind named on the command line (th_deploy), and asks the library's
 * support table (src/core/support.h) what to run: a kind the backend has
 * is held to the contract of include/dlock.h, a kind it lacks must answer
 * DLOCK_ENOTSUP naming the backend and the kind. */
#ifndef DLOCK_CONFORMANCE_H
#define DLOCK_CONFORMANCE_H

#include "core/support.h"
#include "dlock_async.h"
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

/* The run's deployment and its backend's name in the support table. */
extern th_deploy cf_dep;
extern const char *cf_backend;
/* True where the deployment cannot run here (zk without a server): every
 * test then passes, saying it skipped. */
extern bool cf_skipped;
#define CF_NEEDS_SERVER()                                                      \
  do {                                                                         \
    if (cf_skipped) {                                                          \
      fprintf(stderr, "    skipped: no %s server here\n", cf_dep.kind);        \
      return;                                                                  \
    }                                                                          \
  } while (0)

/* Whether `where` ("redis,zk") names the run: its backend (a table
 * name) or its URL kind. */
#define CF_HERE(where) cf_here(where)
/* Whether the comma-separated list `where` names the run's backend or its
 * URL kind. */
bool cf_here(const char *where);
/* An expected failure: where `where` names the run (CF_HERE), cond is
 * known to be false, a bug of the library that `reason` names; there it is
 * reported ("XFAIL") and the test goes on, and if it holds there the test
 * fails ("XPASS": the mark must go). Elsewhere it is a CHECK. */
#define CF_CHECK_XFAIL(where, cond, reason)                                    \
  CF_CHECK_KNOWN(where, cond, reason, true)
/* The same for a bug that shows in some runs only (a race): there a pass
 * is no XPASS. */
#define CF_CHECK_SOMETIMES(where, cond, reason)                                \
  CF_CHECK_KNOWN(where, cond, reason, false)
#define CF_CHECK_KNOWN(where, cond, reason, always)                            \
  do {                                                                         \
    bool ok_ = (cond);                                                         \
    if (!CF_HERE(where)) {                                                     \
      CHECK(ok_);                                                              \
    } else if (ok_ && (always)) {                                              \
      fprintf(stderr, "    %s:%d: XPASS on %s: %s: remove the mark\n",         \
              __FILE__, __LINE__, where, #cond);                               \
      th_failed_checks++;                                                      \
      return;                                                                  \
    } else if (!ok_) {                                                         \
      fprintf(stderr, "    XFAIL on %s: %s (%s)\n", where, reason, #cond);     \
    }                                                                          \
  } while (0)

/* Whether the run's backend has f (the library's table). */
bool cf_has(dl_feature f);
/* The shortest lease the backend's server keeps as asked, or 0: etcd
 * rounds a lease up to whole seconds and to its minimum TTL (2 s with
 * etcd's default election timeout). Tests of a lease running out use at
 * least this. */
int64_t cf_lease_floor_ms(void);
/* Whether a waiter's place in line lives as long as its session or lease
 * (zk://, etcd://), so that a killed waiter holds up the next holder until
 * then; on Redis it blocks nothing. */
bool cf_waiters_by_session(void);

/* The waits and fixed leases the suite times: short, so that the suite
 * stays quick; their bounds are in_time's. */
#define CF_WAIT_MS (200 * cf_slowdown())
/* How soon a take-away must be heard. */
#define CF_HEARD_MS (100 * cf_slowdown())
/* How many times slower than a plain run this one may be: 1, or the
 * environment's DLOCK_TEST_SLOWDOWN (scripts/test.sh valgrind sets it);
 * every time and bound of the suite is scaled by it. */
int cf_slowdown(void);
/* Whether a wait of wait_ms (or a lease of it running out) that took
 * `took` ms kept its contract: not early (`slack` ms of it allowed:
 * clocks, a lease counted from before its acquire), and at most one
 * command timeout late. Says so if not. */
bool cf_in_time(int64_t took, int64_t wait_ms, int64_t slack);

/* The suite's client options on the deployment: a command timeout of
 * CF_CMD_MS, quick reconnects, the watchdog's lease `watchdog_ms` (0: the
 * default). */
#define CF_CMD_MS (1000 * cf_slowdown())
void cf_options(dlock_client_options *o, int64_t watchdog_ms);
dlock_client *cf_client(int64_t watchdog_ms);
/* An event-loop client on lp: 0 and *out, or the open's code. */
int cf_client_async(dlock_loop *lp, int64_t watchdog_ms, dlock_client **out);

/* A name no other test of the run uses: "/cf/<tag>-<pid>" (a znode path on
 * zk://, a key elsewhere). */
void cf_name(char *buf, size_t len, const char *tag);

/* The lock kinds, one handle each: `l` the lock (for DL_FEAT_READ and
 * DL_FEAT_WRITE one side of rw). */
typedef struct cf_lock {
  dlock_lock *l;
  dlock_rwlock *rw;
} cf_lock;
extern const dl_feature cf_lock_kinds[5]; /* lock, fair, read, write, plain */
/* A handle of `kind` on `name` for `owner` (NULL: the thread): 0 or the
 * code of the kind's _new. */
int cf_lock_new(dlock_client *c, dl_feature kind, const char *name,
                const char *owner, cf_lock *out);
void cf_lock_free(cf_lock *h);
/* A fair lock's waiter that stopped trying is skipped this long after
 * its last attempt (dlock_fairlock_new's stale_ms). */
#define CF_FAIR_STALE_MS (1000 * cf_slowdown())
/* Polls the lock's snapshot until n waiters wait (or are queued): true,
 * or false at timeout_ms times cf_slowdown() (where waiters leave no
 * trace: they retry). */
bool cf_waiters_reach(dlock_lock *l, int n, int timeout_ms);
/* Polls the deployment's Redis servers until none lists a connection
 * named client_name (dlock_client_options.client_name): true, or false at
 * timeout_ms. Then every request that client sent has run (a server reads
 * a connection's requests before its end). True at once on zk, etcd. */
bool cf_server_forgot(const char *client_name, int timeout_ms);
/* The kind that excludes `kind` on the same name: itself, but a writer for
 * a reader. */
dl_feature cf_rival(dl_feature kind);

/* Whether rc is DLOCK_ENOTSUP and msg names the backend and f's word
 * (case-insensitively); says what is wrong if not. */
bool cf_notsup(int rc, const char *msg, dl_feature f);

/* A fenced shared resource in memory shared by the processes a test
 * forks: each holder enters with its fencing token and leaves; it counts
 * writes, holders inside at once (overlaps) and writes with a token not
 * above the last one (stale). */
typedef struct cf_fence {
  atomic_long count;
  atomic_int inside, overlaps, stale;
  atomic_ullong last;
  atomic_llong longest_wait; /* ms: the longest acquire, cf_fence_waited */
} cf_fence;
cf_fence *cf_fence_new(void);
void cf_fence_free(cf_fence *f);
void cf_fence_write(cf_fence *f, uint64_t token);
/* An acquire of f's writers took ms: kept if the longest so far. */
void cf_fence_waited(cf_fence *f, int64_t ms);

/* An event-loop call's result, filled in by cf_done. */
typedef struct cf_got {
  int calls;
  int rc;
  uint64_t token;
  int64_t at; /* th_now_ms() when it came */
} cf_got;
void cf_done(int rc, uint64_t token, const char *errmsg, void *ud);
/* Runs lp until *flag is non-zero or timeout_ms passes: whether it is. */
bool cf_run_until(dlock_loop *lp, const int *flag, int timeout_ms);

/* An event-loop client on a loop of its own (the built-in driver). */
typedef struct cf_fix {
  dlock_loop *lp;
  dlock_client *c;
} cf_fix;
int cf_fix_open(cf_fix *f, int64_t watchdog_ms);
void cf_fix_close(cf_fix *f);

/* A call made on a thread of its own (a waiter): cf_bg_start runs
 * fn(arg), storing its result and when it returned; cf_bg_join waits for
 * it. The caller then times the action that should have woken it. */
typedef struct cf_bg {
  int (*fn)(void *arg);
  void *arg;
  int rc;
  int64_t at;
  pthread_t t;
} cf_bg;
int cf_bg_start(cf_bg *b, int (*fn)(void *), void *arg);
void cf_bg_join(cf_bg *b);
/* How long a waiter may take to be woken by the action that frees it:
 * 100 ms where the server wakes waiters (DL_FEAT_WAIT_NOTIFY), else a
 * second. */
int64_t cf_wake_ms(void);

#endif
