/* async.c: the lock kinds on an event-loop client (the built-in driver),
 * on every backend that has them (DL_FEAT_LOOP): exclusion among handles
 * with a fenced counter, a try with a wait, a lease running out, a
 * take-away heard, and the release after a loss. */
#include "conformance.h"

#include <string.h>

/* How long a waiter may take to show in a snapshot (scaled). */
#define CF_SEEN_MS (3000 * cf_slowdown())

#define FOR_KINDS(k)                                                           \
  for (int k##_i = 0; k##_i < 5; k##_i++)                                      \
    for (dl_feature k = cf_lock_kinds[k##_i];                                  \
         cf_has(DL_FEAT_LOOP) && cf_has(k); k = DL_FEAT_COUNT)

/* ---- exclusion: handles of their own taking turns ---- */
enum { HANDLES = 3, ROUNDS = 10 };
typedef struct turn {
  cf_lock h;
  cf_fence *f;
  int left, failed, done;
} turn;

static void turn_acquired(int rc, uint64_t token, const char *msg, void *ud);

static void turn_released(int rc, uint64_t token, const char *msg, void *ud) {
  (void)token;
  turn *t = ud;
  if (rc != 1) {
    fprintf(stderr, "    release: %d %s\n", rc, msg);
    t->failed = t->done = 1;
  } else if (--t->left == 0) {
    t->done = 1;
  } else if (dlock_lock_acquire_async(t->h.l, 10000, 0, turn_acquired, t,
                                      NULL) != 0) {
    t->failed = t->done = 1;
  }
}

static void turn_acquired(int rc, uint64_t token, const char *msg, void *ud) {
  turn *t = ud;
  if (rc != 0) {
    fprintf(stderr, "    acquire: %s %s\n", dlock_err_name(rc), msg);
    t->failed = t->done = 1;
    return;
  }
  cf_fence_write(t->f, token);
  if (dlock_lock_release_async(t->h.l, turn_released, t, NULL) != 0)
    t->failed = t->done = 1;
}

static void t_async_exclusion(void) {
  CF_NEEDS_SERVER();
  FOR_KINDS(k) {
    if (k == DL_FEAT_READ) continue; /* readers share */
    cf_fix f;
    CHECK_RC(cf_fix_open(&f, 0), 0);
    char name[64];
    cf_name(name, sizeof name, dl_feature_name(k));
    cf_fence *fence = cf_fence_new();
    CHECK(fence != NULL);
    turn t[HANDLES];
    for (int i = 0; i < HANDLES; i++) {
      char owner[16];
      snprintf(owner, sizeof owner, "h%d", i);
      t[i] = (turn){.f = fence, .left = ROUNDS};
      CHECK_RC(cf_lock_new(f.c, k, name, owner, &t[i].h), 0);
      CHECK_RC(dlock_lock_acquire_async(t[i].h.l, 10000, 0, turn_acquired,
                                        &t[i], NULL),
               0);
    }
    for (int i = 0; i < HANDLES; i++)
      CHECK(cf_run_until(f.lp, &t[i].done, 30000));
    for (int i = 0; i < HANDLES; i++) {
      CHECK_EQ(t[i].failed, 0);
      cf_lock_free(&t[i].h);
    }
    CHECK_EQ(atomic_load(&fence->overlaps), 0);
    CHECK_EQ(atomic_load(&fence->stale), 0);
    CHECK_EQ(atomic_load(&fence->count), HANDLES * ROUNDS);
    cf_fence_free(fence);
    cf_fix_close(&f);
  }
}

/* A try with a wait gives up within wait_ms plus one command timeout. */
static void t_async_try_wait(void) {
  CF_NEEDS_SERVER();
  if (!cf_has(DL_FEAT_LOOP)) return; /* t_async_kinds checks ENOTSUP */
  cf_fix f;
  CHECK_RC(cf_fix_open(&f, 0), 0);
  FOR_KINDS(k) {
    char name[64];
    cf_name(name, sizeof name, dl_feature_name(k));
    cf_lock h, w;
    CHECK_RC(cf_lock_new(f.c, cf_rival(k), name, "holder", &h), 0);
    CHECK_RC(cf_lock_new(f.c, k, name, "waiter", &w), 0);
    cf_got g = {0};
    CHECK_RC(dlock_lock_acquire_async(h.l, 0, 10000, cf_done, &g, NULL), 0);
    CHECK(cf_run_until(f.lp, &g.calls, 3000));
    CHECK_RC(g.rc, 0);
    g = (cf_got){0};
    int64_t t0 = th_now_ms();
    CHECK_RC(
        dlock_lock_acquire_async(w.l, CF_WAIT_MS, 10000, cf_done, &g, NULL), 0);
    CHECK(cf_run_until(f.lp, &g.calls, CF_WAIT_MS + 2 * CF_CMD_MS));
    int64_t took = th_now_ms() - t0;
    fprintf(stderr, "    %s: a wait of %d ms gave up after %lld ms\n",
            dl_feature_name(k), CF_WAIT_MS, (long long)took);
    CHECK_RC(g.rc, DLOCK_EBUSY);
    CHECK(cf_in_time(took, CF_WAIT_MS, 10));
    g = (cf_got){0};
    CHECK_RC(dlock_lock_release_async(h.l, cf_done, &g, NULL), 0);
    CHECK(cf_run_until(f.lp, &g.calls, 3000));
    CHECK_RC(g.rc, 1);
    cf_lock_free(&h);
    cf_lock_free(&w);
  }
  cf_fix_close(&f);
}

/* A fixed lease running out frees the lock; the holder's release then
 * reports DLOCK_ELOST. The kinds side by side on the loop: etcd's lease
 * is whole seconds, 2 at least (cf_lease_floor_ms). */
static void t_async_lease_expiry(void) {
  CF_NEEDS_SERVER();
  if (!cf_has(DL_FEAT_LEASE) || !cf_has(DL_FEAT_LOOP)) return;
  cf_fix f;
  CHECK_RC(cf_fix_open(&f, 0), 0);
  int64_t lease =
      CF_WAIT_MS > cf_lease_floor_ms() ? CF_WAIT_MS : cf_lease_floor_ms();
  cf_lock h[5], w[5];
  cf_got g[5] = {{0}}, n[5] = {{0}};
  dl_feature ks[5];
  int nk = 0;
  FOR_KINDS(k) {
    char name[64];
    cf_name(name, sizeof name, dl_feature_name(k));
    CHECK_RC(cf_lock_new(f.c, k, name, "holder", &h[nk]), 0);
    CHECK_RC(cf_lock_new(f.c, cf_rival(k), name, "next", &w[nk]), 0);
    ks[nk++] = k;
  }
  int64_t t0 = th_now_ms();
  for (int i = 0; i < nk; i++)
    CHECK_RC(dlock_lock_acquire_async(h[i].l, 0, lease, cf_done, &g[i], NULL),
             0);
  for (int i = 0; i < nk; i++) {
    CHECK(cf_run_until(f.lp, &g[i].calls, 3000));
    CHECK_RC(g[i].rc, 0);
  }
  for (int i = 0; i < nk; i++)
    CHECK_RC(dlock_lock_acquire_async(w[i].l, lease + 5000, 10000, cf_done,
                                      &n[i], NULL),
             0);
  for (int i = 0; i < nk; i++) {
    CHECK(cf_run_until(f.lp, &n[i].calls, (int)lease + 6000));
    int64_t took = n[i].at - t0;
    fprintf(stderr, "    %s: the next holder after %lld ms\n",
            dl_feature_name(ks[i]), (long long)took);
    CHECK_RC(n[i].rc, 0);
    CHECK(cf_in_time(took, lease, 50));
  }
  for (int i = 0; i < nk; i++) {
    g[i] = (cf_got){0};
    CHECK_RC(dlock_lock_release_async(h[i].l, cf_done, &g[i], NULL), 0);
    CHECK(cf_run_until(f.lp, &g[i].calls, 3000));
    CHECK_RC(g[i].rc, DLOCK_ELOST);
    g[i] = (cf_got){0};
    CHECK_RC(dlock_lock_release_async(w[i].l, cf_done, &g[i], NULL), 0);
    CHECK(cf_run_until(f.lp, &g[i].calls, 3000));
    CHECK_RC(g[i].rc, 1);
    cf_lock_free(&h[i]);
    cf_lock_free(&w[i]);
  }
  cf_fix_close(&f);
}

/* Runs op(h, ...) to its end on the loop: its rc. */
#define RUN_ASYNC(f, g, call)                                                  \
  (g = (cf_got){0}, (call) == 0 && cf_run_until((f).lp, &g.calls, 3000)        \
                        ? g.rc                                                 \
                        : DLOCK_ETIMEDOUT)

/* Re-entry counts holds and keeps the token; a release by an owner that
 * does not hold it is refused and changes nothing. */
static void t_async_reentrancy(void) {
  CF_NEEDS_SERVER();
  if (!cf_has(DL_FEAT_LOOP)) return; /* t_async_kinds checks ENOTSUP */
  cf_fix f;
  CHECK_RC(cf_fix_open(&f, 0), 0);
  FOR_KINDS(k) {
    char name[64];
    cf_name(name, sizeof name, dl_feature_name(k));
    cf_lock h, other;
    CHECK_RC(cf_lock_new(f.c, k, name, "me", &h), 0);
    CHECK_RC(cf_lock_new(f.c, k, name, "someone", &other), 0);
    cf_got g;
    CHECK_RC(
        RUN_ASYNC(f, g,
                  dlock_lock_acquire_async(h.l, 0, 10000, cf_done, &g, NULL)),
        0);
    uint64_t t1 = g.token;
    CHECK_RC(
        RUN_ASYNC(f, g,
                  dlock_lock_acquire_async(h.l, 0, 10000, cf_done, &g, NULL)),
        0);
    CHECK_EQ(g.token, t1);
    int count =
        RUN_ASYNC(f, g, dlock_lock_hold_count_async(h.l, cf_done, &g, NULL));
    /* Also on the plain string lock (redlock://'s mutex), whose wire has
     * no count: the handle's, as the blocking call answers. */
    CHECK_EQ(count, 2);
    CHECK_RC(
        RUN_ASYNC(f, g, dlock_lock_release_async(other.l, cf_done, &g, NULL)),
        DLOCK_ENOTOWNER);
    CHECK_EQ(RUN_ASYNC(f, g, dlock_lock_release_async(h.l, cf_done, &g, NULL)),
             0);
    CHECK_EQ(
        RUN_ASYNC(f, g, dlock_lock_hold_count_async(h.l, cf_done, &g, NULL)),
        1);
    CHECK_EQ(RUN_ASYNC(f, g, dlock_lock_release_async(h.l, cf_done, &g, NULL)),
             1);
    CHECK_EQ(
        RUN_ASYNC(f, g, dlock_lock_is_locked_async(h.l, cf_done, &g, NULL)), 0);
    cf_lock_free(&h);
    cf_lock_free(&other);
  }
  cf_fix_close(&f);
}

static int lost;
static int64_t lost_at;
static void on_lost(dlock_lock *l, const char *owner, void *ud) {
  (void)l, (void)owner, (void)ud;
  if (!lost) lost_at = th_now_ms();
  lost = 1;
}

/* A take-away by another client is heard on the loop within 100 ms. */
static void t_async_takeaway(void) {
  CF_NEEDS_SERVER();
  if (!cf_has(DL_FEAT_LOOP)) return; /* t_async_kinds checks ENOTSUP */
  cf_fix f;
  CHECK_RC(cf_fix_open(&f, 3000), 0);
  dlock_client *b = cf_client(0);
  CHECK(b != NULL);
  FOR_KINDS(k) {
    char name[64];
    cf_name(name, sizeof name, dl_feature_name(k));
    cf_lock h, x;
    CHECK_RC(cf_lock_new(f.c, k, name, "holder", &h), 0);
    CHECK_RC(cf_lock_new(b, k, name, "forcer", &x), 0);
    lost = 0;
    dlock_lock_on_lost(h.l, on_lost, NULL);
    cf_got g = {0};
    CHECK_RC(dlock_lock_acquire_async(h.l, 0, 0, cf_done, &g, NULL), 0);
    CHECK(cf_run_until(f.lp, &g.calls, 3000));
    CHECK_RC(g.rc, 0);
    CHECK_EQ(dlock_lock_force_release(x.l), 1);
    int64_t t0 = th_now_ms();
    bool heard = cf_run_until(f.lp, &lost, 3000);
    fprintf(stderr, "    %s: the take-away heard %s%lld ms after\n",
            dl_feature_name(k), heard ? "" : "not in ",
            (long long)((heard ? lost_at : th_now_ms()) - t0));
    /* Also right after the client's first acquire, which may end before
     * the revocation channel's subscription is confirmed: the holds are
     * checked once it is (test_asub notice_after_confirm). */
    CHECK(heard && lost_at - t0 <= CF_HEARD_MS);
    if (!heard) CHECK(cf_run_until(f.lp, &lost, 3000));
    CHECK_EQ(dlock_lock_is_lost(h.l), 1);
    g = (cf_got){0};
    CHECK_RC(dlock_lock_release_async(h.l, cf_done, &g, NULL), 0);
    CHECK(cf_run_until(f.lp, &g.calls, 3000));
    CHECK_RC(g.rc, DLOCK_ELOST);
    cf_lock_free(&h);
    cf_lock_free(&x);
  }
  dlock_client_close(b);
  cf_fix_close(&f);
}

/* A wait cancelled ends at once with DLOCK_ECANCELED and leaves nothing
 * behind: once the holder releases, another owner's one try takes the
 * lock (a zk:// node or an etcd:// key of the waiter's would be ahead of
 * it). */
static void t_async_cancel(void) {
  CF_NEEDS_SERVER();
  if (!cf_has(DL_FEAT_LOOP)) return; /* t_async_kinds checks ENOTSUP */
  cf_fix f;
  CHECK_RC(cf_fix_open(&f, 0), 0);
  dlock_client *b = cf_client(0);
  CHECK(b != NULL);
  FOR_KINDS(k) {
    char name[64];
    cf_name(name, sizeof name, dl_feature_name(k));
    cf_lock h, w, n, probe;
    CHECK_RC(cf_lock_new(f.c, cf_rival(k), name, "holder", &h), 0);
    CHECK_RC(cf_lock_new(f.c, k, name, "waiter", &w), 0);
    CHECK_RC(cf_lock_new(f.c, k, name, "next", &n), 0);
    CHECK_RC(cf_lock_new(b, k, name, "probe", &probe), 0);
    cf_got g;
    CHECK_RC(
        RUN_ASYNC(f, g,
                  dlock_lock_acquire_async(h.l, 0, 10000, cf_done, &g, NULL)),
        0);
    cf_got c = {0};
    dlock_op *op = NULL;
    CHECK_RC(dlock_lock_acquire_async(w.l, 10000, 10000, cf_done, &c, &op), 0);
    /* Its wait begun: seen in the lock's snapshot where waiters leave a
     * trace; elsewhere (Redis: they wait for a message) a moment later. */
    int never = 0;
    bool seen = !cf_waiters_by_session();
    for (int64_t end = th_now_ms() + CF_SEEN_MS; !seen && th_now_ms() < end;) {
      cf_run_until(f.lp, &never, 5);
      seen = cf_waiters_reach(probe.l, 1, 0);
    }
    if (!cf_waiters_by_session()) cf_run_until(f.lp, &never, 50);
    CHECK(seen);
    CHECK_EQ(c.calls, 0);
    int64_t t0 = th_now_ms();
    dlock_op_cancel(op);
    CHECK(cf_run_until(f.lp, &c.calls, 3000));
    int64_t took = c.at - t0;
    fprintf(stderr, "    %s: the cancelled wait ended %lld ms after\n",
            dl_feature_name(k), (long long)took);
    CHECK_RC(c.rc, DLOCK_ECANCELED);
    CHECK(took <= CF_HEARD_MS);
    CHECK_RC(RUN_ASYNC(f, g, dlock_lock_release_async(h.l, cf_done, &g, NULL)),
             1);
    CHECK_RC(
        RUN_ASYNC(f, g,
                  dlock_lock_acquire_async(n.l, 0, 10000, cf_done, &g, NULL)),
        0);
    CHECK_RC(RUN_ASYNC(f, g, dlock_lock_release_async(n.l, cf_done, &g, NULL)),
             1);
    cf_lock_free(&h);
    cf_lock_free(&w);
    cf_lock_free(&n);
    cf_lock_free(&probe);
  }
  dlock_client_close(b);
  cf_fix_close(&f);
}

/* A wait ended by freeing its handle (dlock_lock_free, or a permits
 * handle's free): its callback comes later from the loop, not within the
 * free, with DLOCK_ECANCELED, and it leaves nothing on the server: once
 * the holder lets go, another client takes the lock (or the permit) at
 * once. */
static void t_async_free_waiter(void) {
  CF_NEEDS_SERVER();
  if (!cf_has(DL_FEAT_LOOP)) return;
  cf_fix f;
  CHECK_RC(cf_fix_open(&f, 0), 0);
  dlock_client *b = cf_client(0), *n = cf_client(0);
  CHECK(b && n);
  int never = 0;
  FOR_KINDS(k) {
    char name[64];
    cf_name(name, sizeof name, dl_feature_name(k));
    cf_lock h, w, next;
    CHECK_RC(cf_lock_new(b, cf_rival(k), name, "holder", &h), 0);
    CHECK_RC(cf_lock_new(f.c, k, name, "waiter", &w), 0);
    CHECK_RC(cf_lock_new(n, k, name, "next", &next), 0);
    CHECK_RC(dlock_lock_try_acquire(h.l, 0, 10000, NULL), 0);
    cf_got g = {0};
    CHECK_RC(dlock_lock_acquire_async(w.l, -1, 10000, cf_done, &g, NULL), 0);
    bool seen = !cf_waiters_by_session();
    for (int64_t end = th_now_ms() + CF_SEEN_MS; !seen && th_now_ms() < end;) {
      cf_run_until(f.lp, &never, 5);
      seen = cf_waiters_reach(next.l, 1, 0);
    }
    if (!cf_waiters_by_session()) cf_run_until(f.lp, &never, 50);
    CHECK(seen);
    CHECK_EQ(g.calls, 0);
    cf_lock_free(&w);
    CHECK_EQ(g.calls, 0); /* never within the free */
    CHECK(cf_run_until(f.lp, &g.calls, 3000));
    CHECK_RC(g.rc, DLOCK_ECANCELED);
    CHECK_EQ(dlock_lock_release(h.l), 1);
    int64_t t0 = th_now_ms();
    CHECK_RC(dlock_lock_try_acquire(next.l, 0, 10000, NULL), 0);
    CHECK(th_now_ms() - t0 <= CF_CMD_MS);
    CHECK_EQ(dlock_lock_release(next.l), 1);
    cf_lock_free(&h);
    cf_lock_free(&next);
  }
  if (cf_has(DL_FEAT_PERMITS)) {
    char name[64];
    cf_name(name, sizeof name, "free-permits");
    dlock_permits *hp, *wp;
    CHECK_RC(dlock_permits_new(b, name, &hp), 0);
    CHECK_RC(dlock_permits_new(f.c, name, &wp), 0);
    CHECK_RC(dlock_permits_try_set(hp, 1), 1);
    char hid[DLOCK_PERMIT_ID_LEN], wid[DLOCK_PERMIT_ID_LEN];
    CHECK_RC(dlock_permits_try_acquire(hp, 0, 10000, hid), 0);
    cf_got s = {0};
    CHECK_RC(dlock_permits_acquire_async(wp, -1, 10000, wid, cf_done, &s, NULL),
             0);
    cf_run_until(f.lp, &never, 200); /* not a synchronisation: see above */
    CHECK_EQ(s.calls, 0);
    dlock_permits_free(wp);
    CHECK_EQ(s.calls, 0);
    CHECK(cf_run_until(f.lp, &s.calls, 3000));
    CHECK_RC(s.rc, DLOCK_ECANCELED);
    CHECK_RC(dlock_permits_release(hp, hid), 0);
    CHECK_RC(dlock_permits_get_available(hp), 1);
    dlock_permits_free(hp);
  }
  dlock_client_close(b);
  dlock_client_close(n);
  cf_fix_close(&f);
}

/* An event-loop client's blocking calls are refused (DLOCK_EINVAL, the
 * message naming the event loop) and send nothing; the queries run on the
 * loop (is_held, inspect: the holder's token); a waiter on the loop is
 * woken by another client's release, with a larger token; one still waiting
 * when the client closes has completed when the close returns. */
static void t_async_client(void) {
  CF_NEEDS_SERVER();
  if (!cf_has(DL_FEAT_LOOP)) return;
  cf_fix f;
  CHECK_RC(cf_fix_open(&f, 0), 0);
  dlock_client *b = cf_client(0);
  CHECK(b != NULL);
  char name[64];
  cf_name(name, sizeof name, "refused");
  dlock_lock *w, *h;
  CHECK_RC(dlock_lock_new(f.c, name, "w", &w), 0);
  CHECK_RC(dlock_lock_new(b, name, "h", &h), 0);
  uint64_t t = 0;
  CHECK_RC(dlock_lock_try_acquire(w, 0, 10000, &t), DLOCK_EINVAL);
  CHECK(strstr(dlock_client_errmsg(f.c), "event-loop") != NULL);
  CHECK_RC(dlock_lock_is_locked(w), DLOCK_EINVAL);
  CHECK_RC(dlock_client_ping(f.c), DLOCK_EINVAL);
  CHECK_EQ(dlock_lock_is_locked(h), 0); /* nothing was sent */
  cf_got g;
  CHECK_RC(
      RUN_ASYNC(f, g, dlock_lock_acquire_async(w, 0, 10000, cf_done, &g, NULL)),
      0);
  uint64_t token = g.token;
  CHECK_RC(RUN_ASYNC(f, g, dlock_lock_is_held_async(w, cf_done, &g, NULL)), 1);
  dlock_lock_state st;
  CHECK_RC(RUN_ASYNC(f, g, dlock_lock_inspect_async(w, &st, cf_done, &g, NULL)),
           0);
  CHECK_EQ(st.held, 1);
  if (!CF_HERE("redlock")) CHECK_EQ(st.token, token); /* (the largest) */
  CHECK_RC(RUN_ASYNC(f, g, dlock_lock_release_async(w, cf_done, &g, NULL)), 1);
  /* Woken by another client's release, with a larger token. */
  uint64_t ht = 0;
  CHECK_RC(dlock_lock_try_acquire(h, 0, 10000, &ht), 0);
  CHECK(ht > token);
  cf_got x = {0};
  CHECK_RC(dlock_lock_acquire_async(w, 10000, 10000, cf_done, &x, NULL), 0);
  int never = 0;
  cf_run_until(f.lp, &never, 200); /* not a synchronisation: it may wait
                                      less, and the test shows less */
  CHECK_EQ(x.calls, 0);
  int64_t t0 = th_now_ms();
  CHECK_EQ(dlock_lock_release(h), 1);
  CHECK(cf_run_until(f.lp, &x.calls, 5000));
  fprintf(stderr, "    the waiter on the loop woken %lld ms after\n",
          (long long)(x.at - t0));
  CHECK_RC(x.rc, 0);
  CHECK(x.at - t0 <= cf_wake_ms());
  CHECK(x.token > ht);
  CHECK_RC(RUN_ASYNC(f, g, dlock_lock_release_async(w, cf_done, &g, NULL)), 1);
  /* Waiting at the close: completed within it. */
  CHECK_RC(dlock_lock_try_acquire(h, 0, 10000, NULL), 0);
  cf_got z = {0};
  CHECK_RC(dlock_lock_acquire_async(w, 20000, 10000, cf_done, &z, NULL), 0);
  cf_run_until(f.lp, &never, 100);
  CHECK_EQ(z.calls, 0);
  /* (Its handle freed first, as the close asks: that cancels it, and its
   * callback may wait for the loop, which the close runs.) */
  dlock_lock_free(w);
  dlock_client_close(f.c);
  f.c = NULL;
  CHECK_EQ(z.calls, 1);
  CHECK(z.rc == DLOCK_ECLOSED || z.rc == DLOCK_ECANCELED);
  CHECK_EQ(dlock_lock_release(h), 1);
  dlock_lock_free(h);
  dlock_client_close(b);
  cf_fix_close(&f);
}

const th_test cf_async_tests[] = {
    T_BARE(t_async_exclusion),   T_BARE(t_async_reentrancy),
    T_BARE(t_async_try_wait),    T_BARE(t_async_lease_expiry),
    T_BARE(t_async_takeaway),    T_BARE(t_async_cancel),
    T_BARE(t_async_free_waiter), T_BARE(t_async_client),
};
const size_t cf_async_ntests = sizeof cf_async_tests / sizeof cf_async_tests[0];
