/* lock.c: the lock kinds (lock, fair, read, write, plain), blocking form,
 * on every backend that has them: exclusion under contention with a
 * fenced counter, reentrancy and hold counts, a try with a wait, a lease
 * running out, a killed holder, a release by a non-owner, a take-away
 * heard, and the release after a loss. */
#include "conformance.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define FOR_KINDS(k)                                                           \
  for (int k##_i = 0; k##_i < 5; k##_i++)                                      \
    for (dl_feature k = cf_lock_kinds[k##_i]; cf_has(k); k = DL_FEAT_COUNT)

/* ---- exclusion: processes of their own, a fenced counter ---- */
enum { WORKERS = 3, ROUNDS = 12 };
/* A turn's lease: long enough for any turn here, short enough that a
 * waiter sleeping through a release (until the lease) costs little. */
#define TURN_LEASE_MS (4000 * cf_slowdown())

/* A worker process's life: its own client, ROUNDS holds of `kind`, each
 * writing to the fenced counter with its token. Exits 0, or 1 saying
 * why. */
static void worker(dl_feature kind, const char *name, cf_fence *f) {
  dlock_client *c = cf_client(0);
  cf_lock h;
  if (c == NULL || cf_lock_new(c, kind, name, NULL, &h) != 0) _exit(1);
  for (int i = 0; i < ROUNDS; i++) {
    uint64_t token = 0;
    int64_t t0 = th_now_ms();
    int rc = dlock_lock_acquire(h.l, TURN_LEASE_MS, &token);
    cf_fence_waited(f, th_now_ms() - t0);
    if (rc != 0) {
      fprintf(stderr, "    worker: acquire: %s: %s\n", dlock_err_name(rc),
              dlock_client_errmsg(c));
      _exit(1);
    }
    cf_fence_write(f, token);
    rc = dlock_lock_release(h.l);
    if (rc != 1) {
      fprintf(stderr, "    worker: release: %d %s\n", rc,
              dlock_client_errmsg(c));
      _exit(1);
    }
  }
  cf_lock_free(&h);
  dlock_client_close(c);
  _exit(0);
}

static void t_exclusion(void) {
  CF_NEEDS_SERVER();
  FOR_KINDS(k) {
    if (k == DL_FEAT_READ) continue; /* readers share (t_readers_share) */
    char name[64];
    cf_name(name, sizeof name, dl_feature_name(k));
    cf_fence *f = cf_fence_new();
    CHECK(f != NULL);
    pid_t pids[WORKERS];
    int64_t t0 = th_now_ms();
    for (int i = 0; i < WORKERS; i++) {
      pids[i] = fork();
      CHECK(pids[i] >= 0);
      if (pids[i] == 0) worker(k, name, f);
    }
    int bad = 0;
    for (int i = 0; i < WORKERS; i++) {
      int st = 0;
      waitpid(pids[i], &st, 0);
      bad += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    int64_t took = th_now_ms() - t0;
    fprintf(stderr,
            "    %s: %ld writes in %lld ms (longest acquire %lld ms), last "
            "token %llu\n",
            dl_feature_name(k), (long)atomic_load(&f->count), (long long)took,
            (long long)atomic_load(&f->longest_wait),
            (unsigned long long)atomic_load(&f->last));
    CHECK_EQ(bad, 0);
    /* No waiter sleeps through a release: a waiter that missed a
     * release's wake-up sleeps until the holder's lease would end
     * (TURN_LEASE_MS), and that one acquire shows it. The whole run's time
     * does not: on a loaded machine slow turns and process starts took
     * it past the lease on every backend (etcd's fair kind 3.5 s under
     * ctest -j2; the Redis kinds up to 9.9 s beside two busy loops), with
     * no acquire over 2.1 s.
     * Known to fail sometimes, redis (seen on redis, unix, rediss and
     * Sentinel, fair and write kinds, a few runs in 40 on this loaded
     * machine, when it checked the run's time): a waiter missed a
     * release's wake-up. One cause is found and fixed: a new client's
     * first wait tried before its subscription was confirmed, heard
     * nothing and slept to the lease (it now polls until a try goes after
     * the confirmation; test_rwlock t_unheard_writer_polls). */
    CF_CHECK_SOMETIMES("redis",
                       atomic_load(&f->longest_wait) < TURN_LEASE_MS - 500,
                       "a waiter sleeps through a release until the lease");
    CHECK_EQ(atomic_load(&f->overlaps), 0);
    CHECK_EQ(atomic_load(&f->stale), 0);
    CHECK_EQ(atomic_load(&f->count), WORKERS * ROUNDS);
    cf_fence_free(f);
  }
}

/* Readers share; a writer is excluded while they hold; a reader asking
 * for the write side is refused (DLOCK_EDEADLK). */
static void t_readers_share(void) {
  CF_NEEDS_SERVER();
  if (!cf_has(DL_FEAT_READ)) return;
  char name[64];
  cf_name(name, sizeof name, "share");
  dlock_client *a = cf_client(0), *b = cf_client(0);
  CHECK(a && b);
  cf_lock ra, rb, wb;
  CHECK_RC(cf_lock_new(a, DL_FEAT_READ, name, "ra", &ra), 0);
  CHECK_RC(cf_lock_new(b, DL_FEAT_READ, name, "rb", &rb), 0);
  CHECK_RC(cf_lock_new(b, DL_FEAT_WRITE, name, "wb", &wb), 0);
  CHECK_RC(dlock_lock_try_acquire(ra.l, 0, 10000, NULL), 0);
  CHECK_RC(dlock_lock_try_acquire(rb.l, 0, 10000, NULL), 0);
  CHECK_RC(dlock_lock_try_acquire(wb.l, 0, 10000, NULL), DLOCK_EBUSY);
  cf_lock wa = {dlock_rwlock_write(ra.rw), NULL};
  CHECK_RC(dlock_lock_try_acquire(wa.l, 0, 10000, NULL), DLOCK_EDEADLK);
  CHECK_EQ(dlock_lock_release(ra.l), 1);
  CHECK(dlock_lock_release(rb.l) >= 0);
  CHECK_RC(dlock_lock_try_acquire(wb.l, 2000, 10000, NULL), 0);
  CHECK_EQ(dlock_lock_release(wb.l), 1);
  cf_lock_free(&ra);
  cf_lock_free(&rb);
  cf_lock_free(&wb);
  dlock_client_close(a);
  dlock_client_close(b);
}

/* The write holder takes the read side at once (the downgrade, as
 * Redisson's and Curator's); once it lets go of the write side, another
 * writer still waits for its read hold, and a reader does not. */
static void t_downgrade(void) {
  CF_NEEDS_SERVER();
  if (!cf_has(DL_FEAT_READ)) return;
  char name[64];
  cf_name(name, sizeof name, "down");
  dlock_client *a = cf_client(0), *b = cf_client(0);
  CHECK(a && b);
  cf_lock wa, wb, rb;
  CHECK_RC(cf_lock_new(a, DL_FEAT_WRITE, name, "a", &wa), 0);
  CHECK_RC(cf_lock_new(b, DL_FEAT_WRITE, name, "wb", &wb), 0);
  CHECK_RC(cf_lock_new(b, DL_FEAT_READ, name, "rb", &rb), 0);
  cf_lock ra = {dlock_rwlock_read(wa.rw), NULL};
  CHECK_RC(dlock_lock_try_acquire(wa.l, 0, 10000, NULL), 0);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_try_acquire(ra.l, 1000, 10000, NULL), 0);
  CHECK(th_now_ms() - t0 < 500); /* at once, not after a wait */
  CHECK_RC(dlock_lock_try_acquire(rb.l, 0, 10000, NULL), DLOCK_EBUSY);
  CHECK_EQ(dlock_lock_release(wa.l), 1);
  CHECK_EQ(dlock_lock_is_held(ra.l), 1);
  CHECK_RC(dlock_lock_try_acquire(wb.l, 0, 10000, NULL), DLOCK_EBUSY);
  CHECK_RC(dlock_lock_try_acquire(rb.l, 2000, 10000, NULL), 0);
  CHECK_EQ(dlock_lock_release(rb.l), 1);
  CHECK_EQ(dlock_lock_release(ra.l), 1);
  CHECK_RC(dlock_lock_try_acquire(wb.l, 2000, 10000, NULL), 0);
  CHECK_EQ(dlock_lock_release(wb.l), 1);
  cf_lock_free(&wa);
  cf_lock_free(&wb);
  cf_lock_free(&rb);
  dlock_client_close(a);
  dlock_client_close(b);
}

/* The holder's description (dlock_lock_set_info, what dlock run stores:
 * host, pid, command) is what a snapshot of the lock shows as its info
 * (etcd://: the key's value, which Go's Mutex leaves empty and never
 * reads), and goes with the hold. */
static void t_holder_info(void) {
  CF_NEEDS_SERVER();
  dlock_client *c = cf_client(0);
  CHECK(c != NULL);
  char name[64];
  cf_name(name, sizeof name, "info");
  cf_lock h, probe;
  CHECK_RC(cf_lock_new(c, DL_FEAT_LOCK, name, "holder", &h), 0);
  CHECK_RC(cf_lock_new(c, DL_FEAT_LOCK, name, "probe", &probe), 0);
  CHECK_RC(dlock_lock_set_info(h.l, "host-a pid 42 (sleep 1)"), 0);
  CHECK_RC(dlock_lock_try_acquire(h.l, 0, 10000, NULL), 0);
  dlock_lock_state st;
  CHECK_RC(dlock_lock_inspect(probe.l, &st), 0);
  CHECK_EQ(st.held, 1);
  /* redlock://'s lock is the plain string of redsync and npm redlock by
   * default: one value, the owner's, and no room for a description. */
  if (strcmp(cf_backend, "redlock") != 0)
    CHECK(strcmp(st.info, "host-a pid 42 (sleep 1)") == 0);
  CHECK_EQ(dlock_lock_release(h.l), 1);
  CHECK_RC(dlock_lock_inspect(probe.l, &st), 0);
  CHECK_EQ(st.held, 0);
  CHECK(st.info[0] == '\0');
  cf_lock_free(&h);
  cf_lock_free(&probe);
  dlock_client_close(c);
}

/* Re-entry counts holds and keeps the token; the last release frees. Two
 * handles of one name and one owner are one holder: they share the holds
 * (as two RLock objects of one name in Redisson). */
static void t_reentrancy(void) {
  CF_NEEDS_SERVER();
  dlock_client *c = cf_client(0);
  CHECK(c != NULL);
  FOR_KINDS(k) {
    char name[64];
    cf_name(name, sizeof name, dl_feature_name(k));
    cf_lock h;
    CHECK_RC(cf_lock_new(c, k, name, "me", &h), 0);
    uint64_t t1 = 0, t2 = 0;
    CHECK_RC(dlock_lock_try_acquire(h.l, 0, 10000, &t1), 0);
    CHECK_RC(dlock_lock_try_acquire(h.l, 0, 10000, &t2), 0);
    CHECK_EQ(t2, t1);
    CHECK_EQ(dlock_lock_hold_count(h.l), 2);
    CHECK_EQ(dlock_lock_is_held(h.l), 1);
    CHECK_EQ(dlock_lock_release(h.l), 0);
    CHECK_EQ(dlock_lock_hold_count(h.l), 1);
    CHECK_EQ(dlock_lock_is_locked(h.l), 1);
    CHECK_EQ(dlock_lock_release(h.l), 1);
    CHECK_EQ(dlock_lock_hold_count(h.l), 0);
    CHECK_EQ(dlock_lock_is_locked(h.l), 0);
    cf_lock twin;
    CHECK_RC(cf_lock_new(c, k, name, "me", &twin), 0);
    CHECK_RC(dlock_lock_try_acquire(h.l, 0, 10000, &t1), 0);
    CHECK_RC(dlock_lock_try_acquire(twin.l, 0, 10000, &t2), 0);
    CHECK_EQ(t2, t1);
    CHECK_EQ(dlock_lock_hold_count(h.l), 2);
    CHECK_EQ(dlock_lock_release(twin.l), 0);
    CHECK_EQ(dlock_lock_release(h.l), 1);
    CHECK_EQ(dlock_lock_is_locked(h.l), 0);
    cf_lock_free(&twin);
    cf_lock_free(&h);
  }
  dlock_client_close(c);
}

/* A try with a wait gives up within wait_ms plus one command timeout;
 * one of 0 ms at once. */
static void t_try_wait(void) {
  CF_NEEDS_SERVER();
  dlock_client *a = cf_client(0), *b = cf_client(0);
  CHECK(a && b);
  FOR_KINDS(k) {
    char name[64];
    cf_name(name, sizeof name, dl_feature_name(k));
    cf_lock h, w;
    CHECK_RC(cf_lock_new(a, cf_rival(k), name, "holder", &h), 0);
    CHECK_RC(cf_lock_new(b, k, name, "waiter", &w), 0);
    CHECK_RC(dlock_lock_try_acquire(h.l, 0, 10000, NULL), 0);
    int64_t t0 = th_now_ms();
    CHECK_RC(dlock_lock_try_acquire(w.l, 0, 10000, NULL), DLOCK_EBUSY);
    int64_t t1 = th_now_ms();
    CHECK(t1 - t0 <= CF_CMD_MS);
    CHECK_RC(dlock_lock_try_acquire(w.l, CF_WAIT_MS, 10000, NULL), DLOCK_EBUSY);
    int64_t took = th_now_ms() - t1;
    fprintf(stderr, "    %s: a wait of %d ms gave up after %lld ms\n",
            dl_feature_name(k), CF_WAIT_MS, (long long)took);
    CHECK(cf_in_time(took, CF_WAIT_MS, 10));
    const char *msg = dlock_client_errmsg(b);
    CHECK(strstr(msg, "held by another") != NULL);
    /* The holder's remaining lease where the backend read it, or that
     * none counts down (zk://: it once said "remaining lease -1 ms"). */
    CHECK_WHY(strstr(msg, "lease -") == NULL, msg);
    CHECK_WHY(!strstr(msg, "(no lease counting down)") ==
                  cf_has(DL_FEAT_LEASE),
              msg);
    CHECK_EQ(dlock_lock_hold_count(w.l), 0);
    CHECK_EQ(dlock_lock_release(h.l), 1);
    /* The waiter left nothing behind: it takes the lock at once now. */
    CHECK_RC(dlock_lock_try_acquire(w.l, 0, 10000, NULL), 0);
    CHECK_EQ(dlock_lock_release(w.l), 1);
    cf_lock_free(&h);
    cf_lock_free(&w);
  }
  dlock_client_close(a);
  dlock_client_close(b);
}

/* A fixed lease running out frees the lock for the next holder, and its
 * holder then reports it lost and its release DLOCK_ELOST. */
/* c's dlock_metrics (all ones if the call fails: no check then passes). */
static dlock_metrics metrics_of(dlock_client *c) {
  dlock_metrics m;
  if (dlock_client_metrics(c, &m) != 0) memset(&m, 0xff, sizeof m);
  return m;
}

static void t_lease_expiry(void) {
  CF_NEEDS_SERVER();
  if (!cf_has(DL_FEAT_LEASE)) return; /* zk: t_killed_holder's session */
  dlock_client *a = cf_client(0), *b = cf_client(0);
  CHECK(a && b);
  FOR_KINDS(k) {
    char name[64];
    cf_name(name, sizeof name, dl_feature_name(k));
    cf_lock h, w;
    CHECK_RC(cf_lock_new(a, k, name, "holder", &h), 0);
    CHECK_RC(cf_lock_new(b, cf_rival(k), name, "next", &w), 0);
    int64_t lease =
        CF_WAIT_MS > cf_lease_floor_ms() ? CF_WAIT_MS : cf_lease_floor_ms();
    dlock_metrics a0 = metrics_of(a), b0 = metrics_of(b);
    int64_t t0 = th_now_ms();
    CHECK_RC(dlock_lock_try_acquire(h.l, 0, lease, NULL), 0);
    CHECK_RC(dlock_lock_try_acquire(w.l, lease + 5000, 10000, NULL), 0);
    int64_t took = th_now_ms() - t0;
    /* dlock_client_metrics: one uncontended acquisition, one that waited,
     * a loss by the lease's end, which a's own timer (or the server's
     * expiry event) reports: under load, perhaps just after b's grant. */
    dlock_metrics a1 = metrics_of(a), b1 = metrics_of(b);
    for (int64_t end = th_now_ms() + CF_CMD_MS;
         a1.lost_expired + a1.lost_taken == a0.lost_expired + a0.lost_taken &&
         th_now_ms() < end;
         a1 = metrics_of(a))
      th_sleep_ms(1);
    CHECK_EQ(a1.acquisitions, a0.acquisitions + 1);
    CHECK_EQ(a1.contended_acquisitions, a0.contended_acquisitions);
    CHECK_EQ(b1.acquisitions, b0.acquisitions + 1);
    CHECK_EQ(b1.contended_acquisitions, b0.contended_acquisitions + 1);
    CHECK_EQ(a1.lost_expired, a0.lost_expired + 1);
    CHECK_EQ(a1.lost_taken, a0.lost_taken);
    /* Its histograms: both waits; b's (from its call to its grant) and a's
     * hold (from its grant to its loss) about a lease long. */
    double lease_s = (double)lease / 1000, took_s = (double)took / 1000 + 0.05;
    CHECK_EQ(a1.wait_seconds.count, a0.wait_seconds.count + 1);
    CHECK_EQ(b1.wait_seconds.count, b0.wait_seconds.count + 1);
    CHECK_EQ(b1.wait_seconds.bucket[DLOCK_METRICS_BUCKETS - 1],
             b1.wait_seconds.count);
    double b_wait = b1.wait_seconds.sum - b0.wait_seconds.sum;
    CHECK(b_wait >= lease_s / 2 && b_wait <= took_s);
    CHECK_EQ(a1.hold_seconds.count, a0.hold_seconds.count + 1);
    double a_hold = a1.hold_seconds.sum - a0.hold_seconds.sum;
    CHECK(a_hold >= lease_s / 2 && a_hold <= took_s);
    CHECK_EQ(b1.hold_seconds.count, b0.hold_seconds.count);
    fprintf(stderr, "    %s: the next holder after %lld ms\n",
            dl_feature_name(k), (long long)took);
    /* Not before the lease: the server started it after t0. */
    CHECK(cf_in_time(took, lease, 10));
    CHECK_EQ(dlock_lock_is_lost(h.l), 1);
    CHECK_RC(dlock_lock_release(h.l), DLOCK_ELOST);
    CHECK_EQ(dlock_lock_release(w.l), 1);
    /* a's hold counted once (at its loss, not again at its release); b's
     * ended at its release. */
    dlock_metrics a2 = metrics_of(a), b2 = metrics_of(b);
    CHECK_EQ(a2.hold_seconds.count, a1.hold_seconds.count);
    CHECK_EQ(b2.hold_seconds.count, b1.hold_seconds.count + 1);
    CHECK_EQ(b2.hold_seconds.bucket[DLOCK_METRICS_BUCKETS - 1],
             b2.hold_seconds.count);
    cf_lock_free(&h);
    cf_lock_free(&w);
  }
  dlock_client_close(a);
  dlock_client_close(b);
}

/* A holder SIGKILLed frees the lock after its lease (or its session, on a
 * backend without leases). */
static void t_killed_holder(void) {
  CF_NEEDS_SERVER();
  char name[64];
  cf_name(name, sizeof name, "killed");
  int fds[2];
  CHECK(pipe(fds) == 0);
  /* The lock's lease, or the ZooKeeper session's timeout (the harness's
   * server ticks 500 ms: 2 ticks at least). */
  int64_t life = (cf_has(DL_FEAT_LEASE) ? 500 : 1000) * cf_slowdown();
  if (life < cf_lease_floor_ms()) life = cf_lease_floor_ms();
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    dlock_client_options o;
    cf_options(&o, 0);
    o.zk_session_timeout_ms = (int)life;
    dlock_client *c = th_client_opts(&o);
    dlock_lock *l = NULL;
    char ok = c && dlock_lock_new(c, name, NULL, &l) == 0 &&
              dlock_lock_try_acquire(l, 0, life, NULL) == 0;
    if (write(fds[1], &ok, 1) != 1) _exit(1);
    for (;;)
      pause();
  }
  char ok = 0;
  CHECK(read(fds[0], &ok, 1) == 1 && ok);
  int64_t t0 = th_now_ms();
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  dlock_client *c = cf_client(0);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, name, NULL, &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 3 * life + 2000, 10000, NULL), 0);
  int64_t took = th_now_ms() - t0;
  fprintf(stderr, "    taken %lld ms after the kill (life %lld ms)\n",
          (long long)took, (long long)life);
  CHECK(took <= 2 * life + CF_CMD_MS);
  CHECK_EQ(dlock_lock_release(l), 1);
  dlock_lock_free(l);
  dlock_client_close(c);
  close(fds[0]);
  close(fds[1]);
}

typedef struct in_thread {
  dlock_lock *l;
  bool release; /* else a try */
  int rc;
} in_thread;
static void *run_in_thread(void *p) {
  in_thread *a = p;
  a->rc = a->release ? dlock_lock_release(a->l)
                     : dlock_lock_try_acquire(a->l, 0, 10000, NULL);
  return NULL;
}

/* A release by an owner that does not hold the lock is refused, and
 * changes nothing; so is one from another thread of a handle whose owner
 * is its thread (no owner given), whose try there is refused too. */
static void t_not_owner(void) {
  CF_NEEDS_SERVER();
  dlock_client *a = cf_client(0), *b = cf_client(0);
  CHECK(a && b);
  FOR_KINDS(k) {
    char name[64];
    cf_name(name, sizeof name, dl_feature_name(k));
    cf_lock h, other, same;
    CHECK_RC(cf_lock_new(a, k, name, "holder", &h), 0);
    CHECK_RC(cf_lock_new(b, k, name, "holder", &other), 0); /* another id */
    CHECK_RC(cf_lock_new(a, k, name, "someone", &same), 0);
    CHECK_RC(dlock_lock_try_acquire(h.l, 0, 10000, NULL), 0);
    CHECK_RC(dlock_lock_release(other.l), DLOCK_ENOTOWNER);
    CHECK_RC(dlock_lock_release(same.l), DLOCK_ENOTOWNER);
    CHECK_EQ(dlock_lock_is_held(other.l), 0);
    CHECK_EQ(dlock_lock_is_held(same.l), 0);
    CHECK_EQ(dlock_lock_is_held(h.l), 1);
    CHECK_EQ(dlock_lock_hold_count(h.l), 1);
    CHECK_EQ(dlock_lock_release(h.l), 1);
    cf_lock_free(&h);
    cf_lock_free(&other);
    cf_lock_free(&same);
    cf_lock mine;
    CHECK_RC(cf_lock_new(a, k, name, NULL, &mine), 0);
    CHECK_RC(dlock_lock_try_acquire(mine.l, 0, 10000, NULL), 0);
    in_thread x = {mine.l, false, 0};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, run_in_thread, &x) == 0);
    pthread_join(th, NULL);
    CHECK_RC(x.rc, cf_rival(k) == k ? DLOCK_EBUSY : 0); /* readers share */
    if (x.rc == 0) { /* its own reader: give that hold back */
      x.release = true;
      CHECK(pthread_create(&th, NULL, run_in_thread, &x) == 0);
      pthread_join(th, NULL);
    }
    x.release = true;
    CHECK(pthread_create(&th, NULL, run_in_thread, &x) == 0);
    pthread_join(th, NULL);
    CHECK_RC(x.rc, DLOCK_ENOTOWNER);
    CHECK_EQ(dlock_lock_hold_count(mine.l), 1);
    CHECK_EQ(dlock_lock_release(mine.l), 1);
    cf_lock_free(&mine);
  }
  dlock_client_close(a);
  dlock_client_close(b);
}

static _Atomic int64_t lost_at;
static atomic_int lost_seen; /* is_lost as the callback saw it, + 1 */
static void on_lost(dlock_lock *l, const char *owner, void *ud) {
  (void)owner, (void)ud;
  /* lost_seen first: the test reads it once lost_at is set. */
  int zero = 0;
  if (atomic_compare_exchange_strong(&lost_seen, &zero,
                                     dlock_lock_is_lost(l) + 1))
    atomic_store(&lost_at, th_now_ms());
}

/* A take-away (a force release by another client) is heard within 100 ms:
 * the loss callback, with is_lost already 1 when it runs; the holder's
 * release then reports DLOCK_ELOST, and a second one DLOCK_ENOTOWNER; a
 * force release of the lock, free now, answers 0. */
static void t_takeaway(void) {
  CF_NEEDS_SERVER();
  dlock_client *a = cf_client(3000), *b = cf_client(0);
  CHECK(a && b);
  FOR_KINDS(k) {
    char name[64];
    cf_name(name, sizeof name, dl_feature_name(k));
    cf_lock h, f;
    CHECK_RC(cf_lock_new(a, k, name, "holder", &h), 0);
    CHECK_RC(cf_lock_new(b, k, name, "forcer", &f), 0);
    atomic_store(&lost_at, 0);
    atomic_store(&lost_seen, 0);
    dlock_lock_on_lost(h.l, on_lost, NULL);
    dlock_metrics m0 = metrics_of(a);
    CHECK_RC(dlock_lock_acquire(h.l, 0, NULL), 0); /* the watchdog's */
    CHECK_EQ(dlock_lock_force_release(f.l), 1);
    int64_t t0 = th_now_ms();
    while (atomic_load(&lost_at) == 0 && th_now_ms() - t0 < 3000)
      th_sleep_ms(1);
    int64_t heard = atomic_load(&lost_at);
    fprintf(stderr, "    %s: the take-away heard %s%lld ms after\n",
            dl_feature_name(k), heard ? "" : "not in ",
            (long long)((heard ? heard : th_now_ms()) - t0));
    CHECK(heard != 0 && heard - t0 <= CF_HEARD_MS);
    CHECK_EQ(atomic_load(&lost_seen), 2);
    CHECK_EQ(dlock_lock_is_lost(h.l), 1);
    dlock_metrics m1 = metrics_of(a); /* a loss the server told */
    CHECK_EQ(m1.lost_taken, m0.lost_taken + 1);
    CHECK_EQ(m1.lost_expired, m0.lost_expired);
    CHECK_EQ(dlock_lock_is_locked(f.l), 0);
    CHECK_EQ(dlock_lock_force_release(f.l), 0);
    CHECK_RC(dlock_lock_release(h.l), DLOCK_ELOST);
    CHECK_RC(dlock_lock_release(h.l), DLOCK_ENOTOWNER);
    cf_lock_free(&h);
    cf_lock_free(&f);
  }
  dlock_client_close(a);
  dlock_client_close(b);
}

/* Tokens grow from holder to holder. */
static void t_tokens_grow(void) {
  CF_NEEDS_SERVER();
  dlock_client *a = cf_client(0), *b = cf_client(0);
  CHECK(a && b);
  FOR_KINDS(k) {
    if (k == DL_FEAT_READ) continue; /* a reader's token is 0 on Redis */
    char name[64];
    cf_name(name, sizeof name, dl_feature_name(k));
    cf_lock x, y;
    CHECK_RC(cf_lock_new(a, k, name, "x", &x), 0);
    CHECK_RC(cf_lock_new(b, k, name, "y", &y), 0);
    uint64_t last = 0;
    for (int i = 0; i < 4; i++) {
      cf_lock *h = i % 2 ? &y : &x;
      uint64_t t = 0;
      CHECK_RC(dlock_lock_try_acquire(h->l, 0, 10000, &t), 0);
      CHECK(t > last);
      /* The last token issued, as either handle sees it. redlock://: at
       * least it (the largest of a quorum's counters, which differ after
       * a name's first acquire: each server restarts its own from its
       * clock, and one answering after the quorum may be above it). */
      uint64_t cur = 0;
      CHECK_RC(dlock_lock_current_token(x.l, &cur), 0);
      if (CF_HERE("redlock"))
        CHECK(cur >= t);
      else
        CHECK_EQ(cur, t);
      last = t;
      CHECK_EQ(dlock_lock_release(h->l), 1);
    }
    cf_lock_free(&x);
    cf_lock_free(&y);
  }
  dlock_client_close(a);
  dlock_client_close(b);
}

const th_test cf_lock_tests[] = {
    T_BARE(t_exclusion),     T_BARE(t_readers_share), T_BARE(t_downgrade),
    T_BARE(t_reentrancy),    T_BARE(t_try_wait),      T_BARE(t_lease_expiry),
    T_BARE(t_killed_holder), T_BARE(t_not_owner),     T_BARE(t_takeaway),
    T_BARE(t_tokens_grow),   T_BARE(t_holder_info),
};
const size_t cf_lock_ntests = sizeof cf_lock_tests / sizeof cf_lock_tests[0];
