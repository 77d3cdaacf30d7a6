/* test_etcd_async.c: the etcd backend's event-loop client, each kind's
 * operations (locks, read-write locks, latches, semaphores, permits,
 * queues, fenced writes, scans, inspection) on the loop's multi handle:
 * no thread started for them, the blocking client's answers, waits woken
 * at once, cancels and closes that end them, against private etcd
 * servers the harness starts. */
#include "etcd_support.h"

#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>

#ifdef DLOCK_TEST_HAVE_ETCD

/* Whether the operations just started (n of them, `what`) started few
 * threads (fewer than n / 4: not one each) beside the `before` there
 * were; says how many. */
static bool few_threads(int before, int n, const char *what) {
  int during = et_tasks();
  fprintf(stderr, "    threads: %d before %d %s, %d with them in flight\n",
          before, n, what, during);
  return during - before < n / 4;
}

/* When an et_adone's operation ended (th_now_ms), and its token (a fenced
 * write's: the fence after it). */
typedef struct tdone {
  et_adone d;
  int64_t at;
  uint64_t token;
} tdone;
static void on_tdone(int rc, uint64_t token, const char *errmsg, void *ud) {
  tdone *t = ud;
  et_on_adone(rc, token, errmsg, &t->d);
  t->at = th_now_ms();
  t->token = token;
}

/* Runs lp until t's operation is done (10 s at most). */
static bool run_one(dlock_loop *lp, const tdone *t) {
  return et_run_all(lp, &t->d, 1);
}

/* Runs lp until each of t[0..n) is done: when the last ended, or 0 when
 * one did not end with 0 (says which). */
static int64_t last_ok(dlock_loop *lp, const tdone *t, int n) {
  int64_t last = 0;
  for (int i = 0; i < n; i++) {
    if (!run_one(lp, &t[i]) || t[i].d.rc != 0) {
      fprintf(stderr, "    operation %d: %s\n", i,
              t[i].d.calls ? dlock_err_name(t[i].d.rc) : "not done");
      return 0;
    }
    if (t[i].at > last) last = t[i].at;
  }
  return last;
}

/* Cancels op, in flight (t's): whether it ended DLOCK_ECANCELED within
 * 100 ms; says after how long (what: the operation). */
static bool cancelled_soon(dlock_loop *lp, dlock_op *op, tdone *t,
                           const char *what) {
  int64_t t0 = th_now_ms();
  dlock_op_cancel(op);
  if (!run_one(lp, t)) return false;
  fprintf(stderr, "    a cancelled %s ended after %lld ms: %s\n", what,
          (long long)(t->at - t0), dlock_err_name(t->d.rc));
  return t->d.rc == DLOCK_ECANCELED && t->at - t0 < th_soon(100);
}

/* A loop (*lp), and n event-loop clients of url on it (c): whether all
 * opened (else what did is closed). */
static bool loop_clients(const char *url, dlock_loop **lp, dlock_client **c,
                         int n) {
  if (dlock_loop_new(NULL, lp) != 0) return false;
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = (int)th_soon(o.connect_timeout_ms);
  for (int i = 0; i < n; i++)
    if (dlock_client_open_async(&o, *lp, &c[i]) != 0) {
      fprintf(stderr, "    open: %s\n", dlock_client_open_errmsg());
      while (i-- > 0)
        dlock_client_close(c[i]);
      dlock_loop_free(*lp);
      return false;
    }
  return true;
}

/* fn on a server of its own, at its URL (gRPC), then over the gateway. */
static void both_transports(void (*fn)(const th_etcd *s, const char *url)) {
  th_etcd s;
  CHECK_RC(th_etcd_start(&s), 0);
  char url[300];
  snprintf(url, sizeof url, "%s?transport=json", s.url);
  fn(&s, s.url);
  fn(&s, url);
  th_etcd_stop(&s);
}

/* async_acquire on the server s at url (its transport). */
static void async_acquire(const th_etcd *s, const char *url) {
  enum { N = 16 };
  fprintf(stderr, "    %s\n", url);
  dlock_loop *lp;
  dlock_client *cs[2];
  CHECK(loop_clients(url, &lp, cs, 2));
  dlock_client *c = cs[0], *c2 = cs[1];
  dlock_lock *l[N], *w;
  et_adone d[N];
  char name[32];
  for (int i = 0; i < N; i++) {
    snprintf(name, sizeof name, "aq%d", i);
    CHECK_RC(dlock_lock_new(c, name, NULL, &l[i]), 0);
  }
  CHECK_RC(dlock_lock_new(c2, "aq0", NULL, &w), 0);
  /* The first: the session's lease, the watcher thread (one a client). */
  memset(d, 0, sizeof d);
  CHECK_RC(dlock_lock_acquire_async(l[0], 0, 0, et_on_adone, &d[0], NULL), 0);
  CHECK(et_run_all(lp, d, 1));
  CHECK_RC(d[0].rc, 0);
  int before = et_tasks();
  memset(d, 0, sizeof d);
  for (int i = 1; i < N; i++)
    CHECK_RC(dlock_lock_acquire_async(l[i], 0, 0, et_on_adone, &d[i], NULL), 0);
  CHECK_RC(dlock_lock_acquire_async(l[0], 0, 0, et_on_adone, &d[0], NULL), 0);
  CHECK(few_threads(before, N, "acquires"));
  CHECK(et_run_all(lp, d, N));
  for (int i = 0; i < N; i++)
    CHECK_RC(d[i].rc, 0);
  /* Re-entered: counted, one key. */
  memset(d, 0, sizeof d);
  CHECK_RC(dlock_lock_hold_count_async(l[0], et_on_adone, &d[0], NULL), 0);
  CHECK(et_run_all(lp, d, 1));
  CHECK_RC(d[0].rc, 2);
  CHECK_EQ(et_keys_under(s, "aq0/"), 1);
  /* Busy: a try of another client is refused, its key gone. */
  tdone t = {{0}, 0, 0};
  before = et_tasks();
  CHECK_RC(dlock_lock_acquire_async(w, 0, 0, on_tdone, &t, NULL), 0);
  CHECK(et_tasks() - before < 1);
  CHECK(run_one(lp, &t));
  CHECK_RC(t.d.rc, DLOCK_EBUSY);
  CHECK_EQ(et_keys_under(s, "aq0/"), 1);
  /* A wait that times out: at its deadline, its key gone. */
  memset(&t, 0, sizeof t);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_acquire_async(w, 300, 0, on_tdone, &t, NULL), 0);
  CHECK(et_tasks() - before < 1);
  CHECK(run_one(lp, &t));
  CHECK_RC(t.d.rc, DLOCK_EBUSY);
  fprintf(stderr, "    a 300 ms wait ended after %lld ms\n",
          (long long)(t.at - t0));
  CHECK(t.at - t0 >= 300 && t.at - t0 < 300 + th_soon(200));
  CHECK_EQ(et_keys_under(s, "aq0/"), 1);
  /* A wait cancelled: at once, its key gone. */
  memset(&t, 0, sizeof t);
  dlock_op *op;
  CHECK_RC(dlock_lock_acquire_async(w, 10000, 0, on_tdone, &t, &op), 0);
  for (int64_t end = th_now_ms() + 200; th_now_ms() < end;)
    dlock_loop_run(lp, 10);
  CHECK_EQ(t.d.calls, 0);
  CHECK_EQ(et_keys_under(s, "aq0/"), 2); /* in line */
  t0 = th_now_ms();
  dlock_op_cancel(op);
  CHECK(run_one(lp, &t));
  CHECK_RC(t.d.rc, DLOCK_ECANCELED);
  CHECK(t.at - t0 < th_soon(100));
  CHECK_EQ(et_keys_under(s, "aq0/"), 1);
  /* A waiter woken by the release, within 100 ms of it. */
  memset(&t, 0, sizeof t);
  CHECK_RC(dlock_lock_acquire_async(w, 10000, 0, on_tdone, &t, NULL), 0);
  for (int64_t end = th_now_ms() + 200; th_now_ms() < end;)
    dlock_loop_run(lp, 10);
  CHECK_EQ(t.d.calls, 0);
  CHECK(et_tasks() - before < 1);
  tdone r[2];
  memset(r, 0, sizeof r);
  CHECK_RC(dlock_lock_release_async(l[0], on_tdone, &r[0], NULL), 0);
  CHECK(run_one(lp, &r[0]));
  CHECK_RC(r[0].d.rc, 0); /* one re-entry less */
  CHECK_EQ(t.d.calls, 0);
  CHECK_RC(dlock_lock_release_async(l[0], on_tdone, &r[1], NULL), 0);
  CHECK(run_one(lp, &r[1]));
  CHECK_RC(r[1].d.rc, 1);
  CHECK(run_one(lp, &t));
  CHECK_RC(t.d.rc, 0);
  fprintf(stderr, "    the waiter took it %lld ms after the release\n",
          (long long)(t.at - r[1].at));
  CHECK(t.at - r[1].at < th_soon(100));
  memset(d, 0, sizeof d);
  CHECK_RC(dlock_lock_release_async(w, et_on_adone, &d[0], NULL), 0);
  CHECK(et_run_all(lp, d, 1));
  CHECK_RC(d[0].rc, 1);
  CHECK_EQ(et_keys_under(s, "aq0/"), 0);
  /* A fixed lease (granted, then kept idle by the release: no thread
   * either), twice: the second takes the idle one. */
  before = et_tasks(); /* c2's watcher thread now runs too */
  for (int i = 0; i < 2; i++) {
    memset(d, 0, sizeof d);
    CHECK_RC(dlock_lock_acquire_async(w, 0, 5000, et_on_adone, &d[0], NULL), 0);
    CHECK(et_tasks() - before < 1);
    CHECK(et_run_all(lp, d, 1));
    CHECK_RC(d[0].rc, 0);
    CHECK_EQ(et_keys_under(s, "aq0/"), 1);
    CHECK_RC(dlock_lock_release_async(w, et_on_adone, &d[1], NULL), 0);
    CHECK(et_tasks() - before < 1);
    CHECK(et_run_all(lp, d + 1, 1));
    CHECK_RC(d[1].rc, 1);
    CHECK_EQ(et_keys_under(s, "aq0/"), 0);
  }
  for (int i = 0; i < N; i++)
    dlock_lock_free(l[i]);
  dlock_lock_free(w);
  dlock_client_close(c);
  dlock_client_close(c2);
  dlock_loop_free(lp);
}

/* An event-loop client's mutex acquire runs on its loop's multi handle:
 * tries, re-entries and waits in flight start no thread; a busy try is
 * refused, a waiter is woken by the release at once, times out at its
 * deadline and is cancelled, each leaving no key of its own behind; over
 * gRPC and over the gateway. */
static void t_etcd_async_acquire(void) {
  TH_NEED_ETCD();
  both_transports(async_acquire);
}

/* As et_run_sampled, until the server has started n Watch calls since it
 * had `base`, has n watches more than the `wbase` it had registered (a
 * call is counted as it starts, before its watch is), and none of them
 * is slow (at most th_soon(2000): waits that reach their watch late, as
 * under valgrind), then 50 ms more. A watch from a revision the store has
 * passed (others wrote meanwhile) is etcd's "slow" watcher, told of
 * events only at its next sync, up to 100 ms later: a bound on our
 * notice's latency is measured from synced watches. */
static int run_until_watches(dlock_loop *lp, const th_etcd *s, long long base,
                             long long wbase, int n) {
  int most = et_tasks();
  for (int64_t end = th_now_ms() + th_soon(2000);
       th_now_ms() < end &&
       (th_etcd_started(s, "Watch") - base < n ||
        th_etcd_gauge(s, "etcd_debugging_mvcc_watcher_total") - wbase < n ||
        th_etcd_gauge(s, "etcd_debugging_mvcc_slow_watcher_total") != 0);) {
    int m = et_run_sampled(lp, 20);
    if (m > most) most = m;
  }
  int m = et_run_sampled(lp, 50);
  return m > most ? m : most;
}

/* An event-loop client's fair lock is acquired on its loop's multi handle
 * too (the mutex's layout, FIFO by create revision): waiters of their own
 * leases queued behind another client's holder start no thread, and are
 * served one by one in their order of arrival, each within 100 ms of its
 * predecessor's release. */
static void t_etcd_async_fair(void) {
  TH_NEED_ETCD();
  enum { N = 4 };
  th_etcd s;
  CHECK_RC(th_etcd_start(&s), 0);
  dlock_loop *lp;
  dlock_client *cs[2];
  CHECK(loop_clients(s.url, &lp, cs, 2));
  dlock_client *c = cs[0], *c2 = cs[1];
  dlock_lock *h, *warm, *w[N];
  CHECK_RC(dlock_fairlock_new(c, "fq", NULL, 0, &h), 0);
  CHECK_RC(dlock_fairlock_new(c2, "fq-warm", NULL, 0, &warm), 0);
  for (int i = 0; i < N; i++)
    CHECK_RC(dlock_fairlock_new(c2, "fq", NULL, 0, &w[i]), 0);
  /* Each client's first: its session's lease, its watcher thread. */
  et_adone d[2];
  memset(d, 0, sizeof d);
  CHECK_RC(dlock_lock_acquire_async(h, 0, 0, et_on_adone, &d[0], NULL), 0);
  CHECK_RC(dlock_lock_acquire_async(warm, 0, 0, et_on_adone, &d[1], NULL), 0);
  CHECK(et_run_all(lp, d, 2));
  CHECK_RC(d[0].rc, 0);
  CHECK_RC(d[1].rc, 0);
  memset(d, 0, sizeof d);
  CHECK_RC(dlock_lock_release_async(warm, et_on_adone, &d[0], NULL), 0);
  CHECK(et_run_all(lp, d, 1));
  CHECK_RC(d[0].rc, 1);
  /* N waiters, each on a lease of its own (a key of its own), in line one
   * after the other. */
  int before = et_tasks();
  tdone t[N];
  memset(t, 0, sizeof t);
  for (int i = 0; i < N; i++) {
    CHECK_RC(
        dlock_lock_acquire_async(w[i], 10000, 10000, on_tdone, &t[i], NULL), 0);
    int64_t end = th_now_ms() + th_soon(3000);
    while (et_keys_under(&s, "fq/") < i + 2 && th_now_ms() < end)
      dlock_loop_run(lp, 5);
    CHECK_EQ(et_keys_under(&s, "fq/"), i + 2);
  }
  CHECK_EQ(et_run_sampled(lp, 200), before);
  for (int i = 0; i < N; i++)
    CHECK_EQ(t[i].d.calls, 0);
  /* Served in their order of arrival, one release after the other. */
  tdone r;
  memset(&r, 0, sizeof r);
  CHECK_RC(dlock_lock_release_async(h, on_tdone, &r, NULL), 0);
  CHECK(run_one(lp, &r));
  CHECK_RC(r.d.rc, 1);
  for (int i = 0; i < N; i++) {
    CHECK(run_one(lp, &t[i]));
    CHECK_RC(t[i].d.rc, 0);
    for (int j = i + 1; j < N; j++)
      CHECK_EQ(t[j].d.calls, 0);
    fprintf(stderr, "    waiter %d took it %lld ms after the release\n", i,
            (long long)(t[i].at - r.at));
    CHECK(t[i].at - r.at < th_soon(100));
    memset(&r, 0, sizeof r);
    CHECK_RC(dlock_lock_release_async(w[i], on_tdone, &r, NULL), 0);
    CHECK(run_one(lp, &r));
    CHECK_RC(r.d.rc, 1);
  }
  CHECK_EQ(et_tasks(), before);
  CHECK_EQ(et_keys_under(&s, "fq/"), 0);
  dlock_lock_free(h);
  dlock_lock_free(warm);
  for (int i = 0; i < N; i++)
    dlock_lock_free(w[i]);
  dlock_client_close(c);
  dlock_client_close(c2);
  dlock_loop_free(lp);
  th_etcd_stop(&s);
}

/* Two owners of one event-loop client take turns on a mutex's name
 * locally (the session's lease is theirs both: one key): waiters for
 * another owner of the client wait on the loop, with no thread, and are
 * served one by one, each within 100 ms of the holder's release; such a
 * try is refused at once, a wait ends not taken at its deadline, a cancel
 * ends it at once, and the client's close with one waiting ends it
 * DLOCK_ECLOSED. */
static void t_etcd_async_owners(void) {
  TH_ETCD_SETUP(s);
  dlock_loop *lp;
  dlock_client *c;
  CHECK(loop_clients(s.url, &lp, &c, 1));
  dlock_lock *a, *w[2];
  CHECK_RC(dlock_lock_new(c, "ow", "a", &a), 0);
  CHECK_RC(dlock_lock_new(c, "ow", "b", &w[0]), 0);
  CHECK_RC(dlock_lock_new(c, "ow", "c", &w[1]), 0);
  /* The first: the session's lease, the watcher thread. */
  tdone r;
  memset(&r, 0, sizeof r);
  CHECK_RC(dlock_lock_acquire_async(a, 0, 0, on_tdone, &r, NULL), 0);
  CHECK(run_one(lp, &r));
  CHECK_RC(r.d.rc, 0);
  int before = et_tasks();
  /* Two waiters for a: no thread, no key of theirs (a's is the lease's). */
  tdone t[2];
  memset(t, 0, sizeof t);
  for (int i = 0; i < 2; i++)
    CHECK_RC(dlock_lock_acquire_async(w[i], 10000, 0, on_tdone, &t[i], NULL),
             0);
  CHECK_EQ(et_run_sampled(lp, 200), before);
  CHECK_EQ(t[0].d.calls + t[1].d.calls, 0);
  CHECK_EQ(et_keys_under(&s, "ow/"), 1);
  /* a's release hands it to one of them, its release to the other. */
  memset(&r, 0, sizeof r);
  CHECK_RC(dlock_lock_release_async(a, on_tdone, &r, NULL), 0);
  CHECK(run_one(lp, &r));
  CHECK_RC(r.d.rc, 1);
  int64_t end = th_now_ms() + th_soon(3000);
  while (t[0].d.calls + t[1].d.calls == 0 && th_now_ms() < end)
    dlock_loop_run(lp, 5);
  int first = t[0].d.calls ? 0 : 1;
  CHECK_EQ(t[first].d.calls, 1);
  CHECK_RC(t[first].d.rc, 0);
  CHECK_EQ(t[1 - first].d.calls, 0);
  fprintf(stderr, "    owner %c took it %lld ms after the release\n",
          'b' + first, (long long)(t[first].at - r.at));
  CHECK(t[first].at - r.at < th_soon(100));
  memset(&r, 0, sizeof r);
  CHECK_RC(dlock_lock_release_async(w[first], on_tdone, &r, NULL), 0);
  CHECK(run_one(lp, &r));
  CHECK_RC(r.d.rc, 1);
  CHECK(run_one(lp, &t[1 - first]));
  CHECK_RC(t[1 - first].d.rc, 0);
  fprintf(stderr, "    owner %c took it %lld ms after the release\n",
          'b' + 1 - first, (long long)(t[1 - first].at - r.at));
  CHECK(t[1 - first].at - r.at < th_soon(100));
  CHECK_EQ(et_tasks(), before);
  /* Held by c: a try of a is refused at once, a wait at its deadline. */
  memset(t, 0, sizeof t);
  CHECK_RC(dlock_lock_acquire_async(a, 0, 0, on_tdone, &t[0], NULL), 0);
  CHECK(run_one(lp, &t[0]));
  CHECK_RC(t[0].d.rc, DLOCK_EBUSY);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_acquire_async(a, 300, 0, on_tdone, &t[1], NULL), 0);
  CHECK(run_one(lp, &t[1]));
  CHECK_RC(t[1].d.rc, DLOCK_EBUSY);
  fprintf(stderr, "    a 300 ms wait ended after %lld ms\n",
          (long long)(t[1].at - t0));
  CHECK(t[1].at - t0 >= 300 && t[1].at - t0 < 300 + th_soon(200));
  /* A wait cancelled: at once. */
  memset(t, 0, sizeof t);
  dlock_op *op;
  CHECK_RC(dlock_lock_acquire_async(a, 10000, 0, on_tdone, &t[0], &op), 0);
  for (end = th_now_ms() + 100; th_now_ms() < end;)
    dlock_loop_run(lp, 10);
  CHECK_EQ(t[0].d.calls, 0);
  CHECK(cancelled_soon(lp, op, &t[0], "wait"));
  CHECK_EQ(et_tasks(), before);
  CHECK_EQ(et_keys_under(&s, "ow/"), 1);
  /* The client closed with one waiting: told within the close. */
  CHECK_RC(dlock_lock_acquire_async(a, 10000, 0, on_tdone, &t[1], NULL), 0);
  for (end = th_now_ms() + 100; th_now_ms() < end;)
    dlock_loop_run(lp, 10);
  CHECK_EQ(t[1].d.calls, 0);
  dlock_lock_free(a);
  for (int i = 0; i < 2; i++)
    dlock_lock_free(w[i]);
  dlock_client_close(c);
  CHECK_EQ(t[1].d.calls, 1);
  CHECK_RC(t[1].d.rc, DLOCK_ECLOSED);
  dlock_loop_free(lp);
  CHECK_EQ(et_keys_under(&s, "ow/"), 0);
  th_etcd_stop(&s);
}

/* A loop (*lp), an event-loop client of url on it (*c) and a blocking
 * one (*cb), to compare their answers: whether all opened (else what did
 * is closed). */
static bool loop_and_blocking(const char *url, dlock_loop **lp,
                              dlock_client **c, dlock_client **cb) {
  if (!loop_clients(url, lp, c, 1)) return false;
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  if (dlock_client_open(&o, cb) == 0) return true;
  dlock_client_close(*c);
  dlock_loop_free(*lp);
  return false;
}

/* async_latch on the server s at url (its transport). */
static void async_latch(const th_etcd *s, const char *url) {
  enum { N = 8 };
  fprintf(stderr, "    %s\n", url);
  dlock_loop *lp;
  dlock_client *c, *cb;
  CHECK(loop_and_blocking(url, &lp, &c, &cb));
  dlock_latch *l, *w[N], *lb, *x, *xb;
  char buf[256];
  th_etcd_ctl(s, "del --prefix al", buf, sizeof buf); /* an earlier pass's */
  CHECK_RC(dlock_latch_new(c, "al", &l), 0);
  for (int i = 0; i < N; i++)
    CHECK_RC(dlock_latch_new(c, "al", &w[i]), 0);
  CHECK_RC(dlock_latch_new(cb, "al", &lb), 0);
  CHECK_RC(dlock_latch_new(c, "alx", &x), 0);
  CHECK_RC(dlock_latch_new(cb, "alx", &xb), 0);
  /* The first call opens the connection. */
  tdone r;
  memset(&r, 0, sizeof r);
  CHECK_RC(dlock_latch_try_set_count_async(l, 2, on_tdone, &r, NULL), 0);
  CHECK(run_one(lp, &r));
  CHECK_RC(r.d.rc, 1);
  int before = et_tasks();
  /* N awaits: no thread, none done. */
  tdone t[N];
  memset(t, 0, sizeof t);
  long long watches = th_etcd_started(s, "Watch"),
            watchers = th_etcd_gauge(s, "etcd_debugging_mvcc_watcher_total");
  for (int i = 0; i < N; i++)
    CHECK_RC(dlock_latch_await_async(w[i], 10000, on_tdone, &t[i], NULL), 0);
  CHECK_EQ(run_until_watches(lp, s, watches, watchers, N), before);
  for (int i = 0; i < N; i++)
    CHECK_EQ(t[i].d.calls, 0);
  CHECK_EQ(th_etcd_started(s, "Watch") - watches, N);
  /* Count-downs: no thread; the one to zero wakes them all. */
  int64_t zero = 0;
  for (int k = 1; k >= 0; k--) {
    memset(&r, 0, sizeof r);
    CHECK_RC(dlock_latch_count_down_async(l, on_tdone, &r, NULL), 0);
    CHECK(et_tasks() - before < 1);
    CHECK(run_one(lp, &r));
    CHECK_RC(r.d.rc, 0);
    zero = r.at;
    memset(&r, 0, sizeof r);
    CHECK_RC(dlock_latch_get_count_async(l, on_tdone, &r, NULL), 0);
    CHECK(et_tasks() - before < 1);
    CHECK(run_one(lp, &r));
    CHECK_RC(r.d.rc, k);
  }
  int64_t last = last_ok(lp, t, N);
  CHECK(last > 0);
  fprintf(stderr, "    %d awaits woken within %lld ms of the count-down\n", N,
          (long long)(last - zero));
  CHECK(last - zero < th_soon(100));
  /* At zero: a count-down is refused, as on the blocking client. */
  memset(&r, 0, sizeof r);
  CHECK_RC(dlock_latch_count_down_async(l, on_tdone, &r, NULL), 0);
  CHECK(run_one(lp, &r));
  CHECK_RC(r.d.rc, dlock_latch_count_down(lb));
  CHECK_RC(r.d.rc, DLOCK_ERANGE);
  /* Another kind at the name: refused, as on the blocking client. */
  th_etcd_ctl(s, "put alx/k v", buf, sizeof buf);
  memset(&r, 0, sizeof r);
  CHECK_RC(dlock_latch_await_async(x, 1000, on_tdone, &r, NULL), 0);
  CHECK(run_one(lp, &r));
  CHECK_RC(r.d.rc, dlock_latch_try_await(xb, 1000));
  CHECK_RC(r.d.rc, DLOCK_EWRONGTYPE);
  memset(&r, 0, sizeof r);
  CHECK_RC(dlock_latch_count_down_async(x, on_tdone, &r, NULL), 0);
  CHECK(run_one(lp, &r));
  CHECK_RC(r.d.rc, DLOCK_EWRONGTYPE);
  th_etcd_ctl(s, "del alx/k", buf, sizeof buf);
  /* An await with a short deadline: at it, as the blocking client's. */
  memset(&r, 0, sizeof r);
  CHECK_RC(dlock_latch_try_set_count_async(l, 1, on_tdone, &r, NULL), 0);
  CHECK(run_one(lp, &r));
  CHECK_RC(r.d.rc, 1);
  memset(t, 0, sizeof t);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_latch_await_async(w[0], 300, on_tdone, &t[0], NULL), 0);
  CHECK(run_one(lp, &t[0]));
  fprintf(stderr, "    a 300 ms await ended after %lld ms: %s\n",
          (long long)(t[0].at - t0), dlock_err_name(t[0].d.rc));
  CHECK_RC(t[0].d.rc, dlock_latch_try_await(lb, 50));
  CHECK_RC(t[0].d.rc, DLOCK_EBUSY);
  CHECK(t[0].at - t0 >= 300 && t[0].at - t0 < 300 + th_soon(200));
  /* A cancelled await: at once. */
  dlock_op *op;
  CHECK_RC(dlock_latch_await_async(w[1], 10000, on_tdone, &t[1], &op), 0);
  CHECK_EQ(et_run_sampled(lp, 100), before);
  CHECK_EQ(t[1].d.calls, 0);
  CHECK(cancelled_soon(lp, op, &t[1], "await"));
  CHECK_EQ(et_tasks(), before);
  /* The client closed with one in flight: told within the close. */
  CHECK_RC(dlock_latch_await_async(w[2], 10000, on_tdone, &t[2], NULL), 0);
  CHECK_EQ(et_run_sampled(lp, 100), before);
  CHECK_EQ(t[2].d.calls, 0);
  dlock_latch_free(l);
  dlock_latch_free(x);
  for (int i = 0; i < N; i++)
    dlock_latch_free(w[i]);
  dlock_client_close(c);
  CHECK_EQ(t[2].d.calls, 1);
  CHECK_RC(t[2].d.rc, DLOCK_ECLOSED);
  dlock_loop_free(lp);
  CHECK_RC(dlock_latch_count_down(lb), 0); /* at zero for the next */
  dlock_latch_free(lb);
  dlock_latch_free(xb);
  dlock_client_close(cb);
}

/* An event-loop client's count-down latch runs on its loop's multi handle:
 * N awaits in flight (a watch each) and the count-downs start no thread;
 * the count-down to zero wakes every await within 100 ms; an await ends
 * at its deadline, and another kind at the name is refused, as on the
 * blocking client; a cancelled await ends at once, and one in flight at
 * the client's close with DLOCK_ECLOSED; over gRPC and over the gateway. */
static void t_etcd_async_latch(void) {
  TH_NEED_ETCD();
  both_transports(async_latch);
}

/* The counting semaphore's calls t_etcd_async_sem compares. */
typedef enum sem_call {
  SC_SET,
  SC_ADD,
  SC_RELEASE,
  SC_TRY,
  SC_AVAILABLE,
  SC_DRAIN
} sem_call;

/* k(n) on the blocking client's semaphore b: its result. */
static int sem_blocking(dlock_semaphore *b, sem_call k, int n) {
  switch (k) {
  case SC_SET: return dlock_semaphore_try_set_permits(b, n);
  case SC_ADD: return dlock_semaphore_add_permits(b, n);
  case SC_RELEASE: return dlock_semaphore_release(b, n);
  case SC_TRY: return dlock_semaphore_try_acquire(b, n, 0);
  case SC_AVAILABLE: return dlock_semaphore_get_available(b);
  default: return dlock_semaphore_drain(b);
  }
}

/* k(n) started on the event-loop client's semaphore a, t told. */
static int sem_start(dlock_semaphore *a, sem_call k, int n, tdone *t) {
  memset(t, 0, sizeof *t);
  switch (k) {
  case SC_SET:
    return dlock_semaphore_try_set_permits_async(a, n, on_tdone, t, NULL);
  case SC_ADD:
    return dlock_semaphore_add_permits_async(a, n, on_tdone, t, NULL);
  case SC_RELEASE:
    return dlock_semaphore_release_async(a, n, on_tdone, t, NULL);
  case SC_TRY: return dlock_semaphore_acquire_async(a, n, 0, on_tdone, t, NULL);
  case SC_AVAILABLE:
    return dlock_semaphore_get_available_async(a, on_tdone, t, NULL);
  default: return dlock_semaphore_drain_async(a, on_tdone, t, NULL);
  }
}

/* Whether call k(n) gave want on the event-loop client (got; INT_MIN:
 * not done) and on the blocking one, the former with no thread beyond
 * the `before` there were (threads: while it was in flight); says what
 * differed. */
static bool same_answers(int k, int n, int got, int blocking, int want,
                         int threads, int before) {
  if (got == want && blocking == want && threads <= before) return true;
  fprintf(stderr,
          "    call %d(%d): event loop %d (%s), blocking %d (%s), expected "
          "%d; threads %d, %d before\n",
          k, n, got, dlock_err_name(got), blocking, dlock_err_name(blocking),
          want, threads, before);
  return false;
}

/* k(n) on the event-loop client's semaphore a, on lp, then on the
 * blocking client's b (a name of the same history): same_answers. */
static bool sem_both(dlock_loop *lp, dlock_semaphore *a, dlock_semaphore *b,
                     sem_call k, int n, int want, int before) {
  tdone t;
  int rc = sem_start(a, k, n, &t), threads = et_tasks();
  int got = rc != 0 ? rc : run_one(lp, &t) ? t.d.rc : INT_MIN;
  return same_answers((int)k, n, got, sem_blocking(b, k, n), want, threads,
                      before);
}

/* async_sem on the server s at url (its transport). */
static void async_sem(const th_etcd *s, const char *url) {
  enum { N = 8 };
  fprintf(stderr, "    %s\n", url);
  dlock_loop *lp;
  dlock_client *c, *cb;
  CHECK(loop_and_blocking(url, &lp, &c, &cb));
  dlock_semaphore *a[N], *b;
  char buf[256];
  th_etcd_ctl(s, "del --prefix as", buf, sizeof buf); /* an earlier pass's */
  for (int i = 0; i < N; i++)
    CHECK_RC(dlock_semaphore_new(c, "as", &a[i]), 0);
  CHECK_RC(dlock_semaphore_new(cb, "asb", &b), 0);
  /* The first call opens the connection (threads not counted). */
  CHECK(sem_both(lp, a[0], b, SC_SET, 5, 1, INT_MAX));
  int before = et_tasks();
  /* N releases, then N tries, then N tries for the 5 left, in flight
   * together: no thread; as many taken and refused as the blocking
   * client's, which leaves the same count. */
  for (int round = 0; round < 3; round++) {
    static const char *what[] = {"releases", "tries", "tries for 5"};
    sem_call k = round == 0 ? SC_RELEASE : SC_TRY;
    tdone t[N];
    for (int i = 0; i < N; i++)
      CHECK_RC(sem_start(a[i], k, 1, &t[i]), 0);
    int during = et_tasks(), ok = 0, busy = 0, bok = 0, bbusy = 0;
    for (int i = 0; i < N; i++) {
      CHECK(run_one(lp, &t[i]));
      ok += t[i].d.rc == 0;
      busy += t[i].d.rc == DLOCK_EBUSY;
      int rc = sem_blocking(b, k, 1);
      bok += rc == 0;
      bbusy += rc == DLOCK_EBUSY;
    }
    fprintf(stderr,
            "    threads: %d before %d %s, %d with them in flight; %d done, "
            "%d refused (blocking: %d, %d)\n",
            before, N, what[round], during, ok, busy, bok, bbusy);
    CHECK(during <= before);
    CHECK_EQ(ok, round < 2 ? N : 5);
    CHECK_EQ(busy, N - ok);
    CHECK_EQ(bok, ok);
    CHECK_EQ(bbusy, busy);
    CHECK(sem_both(lp, a[0], b, SC_AVAILABLE, 0, (int[]){5 + N, 5, 0}[round],
                   before));
  }
  CHECK(sem_both(lp, a[0], b, SC_ADD, 5, 0, before));
  /* Set already; a try of more than there are; a drain; a try on none. */
  CHECK(sem_both(lp, a[0], b, SC_SET, 7, 0, before));
  CHECK(sem_both(lp, a[0], b, SC_ADD, -3, 0, before));
  CHECK(sem_both(lp, a[0], b, SC_TRY, 3, DLOCK_EBUSY, before));
  CHECK(sem_both(lp, a[0], b, SC_DRAIN, 0, 2, before));
  CHECK(sem_both(lp, a[0], b, SC_TRY, 1, DLOCK_EBUSY, before));
  CHECK(sem_both(lp, a[0], b, SC_DRAIN, 0, 0, before));
  /* Past an int: refused, nothing changed. */
  CHECK(sem_both(lp, a[0], b, SC_ADD, INT_MAX, 0, before));
  CHECK(sem_both(lp, a[0], b, SC_RELEASE, 1, DLOCK_ERANGE, before));
  CHECK(sem_both(lp, a[0], b, SC_AVAILABLE, 0, INT_MAX, before));
  CHECK(sem_both(lp, a[0], b, SC_TRY, INT_MAX, 0, before));
  /* Not a count at the key: refused. */
  th_etcd_ctl(s, "put as/semaphore x", buf, sizeof buf);
  th_etcd_ctl(s, "put asb/semaphore x", buf, sizeof buf);
  CHECK(sem_both(lp, a[0], b, SC_AVAILABLE, 0, DLOCK_EWRONGTYPE, before));
  CHECK(sem_both(lp, a[0], b, SC_TRY, 1, DLOCK_EWRONGTYPE, before));
  CHECK(sem_both(lp, a[0], b, SC_ADD, 1, DLOCK_EWRONGTYPE, before));
  CHECK_EQ(et_tasks(), before);
  for (int i = 0; i < N; i++)
    dlock_semaphore_free(a[i]);
  dlock_semaphore_free(b);
  dlock_client_close(c);
  dlock_client_close(cb);
  dlock_loop_free(lp);
}

/* An event-loop client's counting semaphore runs on its loop's multi
 * handle but for a waiting acquire: N releases and N tries in flight
 * start no thread; each update, and a try (on an exhausted semaphore
 * too), gives what the blocking client's gives on a name of the same
 * history, errors included; over gRPC and over the gateway. */
static void t_etcd_async_sem(void) {
  TH_NEED_ETCD();
  both_transports(async_sem);
}

/* A queue poll's outputs and its end. */
typedef struct qdone {
  tdone t;
  void *v;
  size_t len;
} qdone;

/* Runs lp for ms, no longer. */
static void run_for(dlock_loop *lp, int64_t ms) {
  for (int64_t end = th_now_ms() + ms; th_now_ms() < end;)
    dlock_loop_run(lp, 1);
}

/* The queue q's size by the blocking client's handle, -1 on an error. */
static int64_t qsize(dlock_queue *q) {
  int64_t n = -1;
  return dlock_queue_size(q, &n) == 0 ? n : -1;
}

/* A loop (*lp), an event-loop client of url (*c) and a blocking one (*cb),
 * a handle of each on the queue `name` (*q: delayed if so; *qb: plain,
 * no mover of its own), the event-loop client's connection opened (a
 * size): whether all went (the test stops there if not). */
static bool queue_pair(const char *url, const char *name, bool delayed,
                       dlock_loop **lp, dlock_client **c, dlock_client **cb,
                       dlock_queue **q, dlock_queue **qb) {
  if (!loop_and_blocking(url, lp, c, cb)) return false;
  tdone r;
  memset(&r, 0, sizeof r);
  int64_t n = -1;
  return (delayed ? dlock_queue_new_delayed(*c, name, q)
                  : dlock_queue_new(*c, name, q)) == 0 &&
         dlock_queue_new(*cb, name, qb) == 0 &&
         dlock_queue_size_async(*q, &n, on_tdone, &r, NULL) == 0 &&
         run_one(*lp, &r) && r.d.rc == 0;
}

/* async_queue on the server s at url (its transport). */
static void async_queue(const th_etcd *s, const char *url) {
  enum { N = 8 };
  fprintf(stderr, "    %s\n", url);
  dlock_loop *lp;
  dlock_client *c, *cb;
  dlock_queue *q, *qb, *x, *xb;
  char buf[256];
  th_etcd_ctl(s, "del --prefix aq", buf, sizeof buf); /* an earlier pass's */
  CHECK(queue_pair(url, "aq", false, &lp, &c, &cb, &q, &qb));
  CHECK_RC(dlock_queue_new(c, "aqx", &x), 0);
  CHECK_RC(dlock_queue_new(cb, "aqx", &xb), 0);
  CHECK_EQ(qsize(qb), 0);
  tdone r;
  int64_t n = -1;
  int before = et_tasks();
  /* N waiting polls: no thread, none done, a watch each. */
  qdone p[N];
  memset(p, 0, sizeof p);
  long long watches = th_etcd_started(s, "Watch"),
            watchers = th_etcd_gauge(s, "etcd_debugging_mvcc_watcher_total");
  for (int i = 0; i < N; i++)
    CHECK_RC(dlock_queue_poll_async(q, 10000, &p[i].v, &p[i].len, on_tdone,
                                    &p[i].t, NULL),
             0);
  CHECK_EQ(run_until_watches(lp, s, watches, watchers, N), before);
  for (int i = 0; i < N; i++)
    CHECK_EQ(p[i].t.d.calls, 0);
  CHECK_EQ(th_etcd_started(s, "Watch") - watches, N);
  /* N offers: no thread; each poll woken with one of the values. */
  tdone o[N];
  memset(o, 0, sizeof o);
  for (int i = 0; i < N; i++) {
    char v[8];
    snprintf(v, sizeof v, "v%d", i);
    CHECK_RC(dlock_queue_offer_async(q, v, strlen(v), on_tdone, &o[i], NULL),
             0);
  }
  CHECK(et_tasks() - before < 1);
  int64_t offered = last_ok(lp, o, N);
  CHECK(offered > 0);
  int64_t last = 0;
  for (int i = 0; i < N; i++) {
    CHECK(run_one(lp, &p[i].t));
    CHECK_RC(p[i].t.d.rc, 0);
    if (p[i].t.at > last) last = p[i].t.at;
  }
  fprintf(stderr, "    %d polls woken within %lld ms of the last offer\n", N,
          (long long)(last - offered));
  /* Each take a write, and a poll that lost a race looks again (as Go's
   * Dequeue): 8 in series at least (work that grows with the polls: the
   * sanitizers' slowdown too; 347 ms seen under ASan, three tests at
   * once). */
  CHECK(last - offered < th_soon(300) * th_slowdown());
  unsigned seen = 0;
  for (int i = 0; i < N; i++) {
    int k = -1;
    CHECK(p[i].len == 2 && sscanf(p[i].v, "v%d", &k) == 1 && k >= 0 && k < N);
    if (k >= 0 && k < N) seen |= 1u << k;
    dlock_queue_value_free(p[i].v);
  }
  CHECK_EQ(seen, (1u << N) - 1); /* each value once */
  CHECK_EQ(qsize(qb), 0);
  /* A poll woken by another client's offer. */
  memset(p, 0, sizeof p);
  CHECK_RC(dlock_queue_poll_async(q, 10000, &p[0].v, &p[0].len, on_tdone,
                                  &p[0].t, NULL),
           0);
  run_for(lp, 50);
  CHECK_RC(dlock_queue_offer(qb, "w", 1), 0);
  offered = th_now_ms(); /* the loop runs after */
  CHECK(run_one(lp, &p[0].t));
  CHECK(p[0].t.d.rc == 0 && p[0].len == 1 && memcmp(p[0].v, "w", 1) == 0);
  dlock_queue_value_free(p[0].v);
  fprintf(stderr, "    a poll woken %lld ms after another client's offer\n",
          (long long)(p[0].t.at - offered));
  CHECK(p[0].t.at - offered < th_soon(100));
  /* Both ends, as the blocking client's: the head's, then the tail's. */
  memset(o, 0, sizeof o);
  CHECK_RC(dlock_queue_offer_async(q, "t1", 2, on_tdone, &o[0], NULL), 0);
  CHECK(run_one(lp, &o[0]));
  CHECK_RC(dlock_queue_offer_first_async(q, "h1", 2, on_tdone, &o[1], NULL), 0);
  CHECK_RC(dlock_queue_offer(qb, "t2", 2), 0);
  CHECK(last_ok(lp, o, 2) > 0);
  memset(&r, 0, sizeof r);
  CHECK_RC(dlock_queue_size_async(q, &n, on_tdone, &r, NULL), 0);
  CHECK(run_one(lp, &r));
  CHECK_RC(r.d.rc, 0);
  CHECK_EQ(n, 3);
  CHECK_EQ(qsize(qb), 3);
  memset(p, 0, sizeof p);
  CHECK_RC(
      dlock_queue_poll_async(q, 0, &p[0].v, &p[0].len, on_tdone, &p[0].t, NULL),
      0);
  CHECK_RC(dlock_queue_poll_last_async(q, 0, &p[1].v, &p[1].len, on_tdone,
                                       &p[1].t, NULL),
           0);
  CHECK(run_one(lp, &p[0].t) && run_one(lp, &p[1].t));
  CHECK(p[0].t.d.rc == 0 && p[0].len == 2 && memcmp(p[0].v, "h1", 2) == 0);
  CHECK(p[1].t.d.rc == 0 && p[1].len == 2 && memcmp(p[1].v, "t2", 2) == 0);
  dlock_queue_value_free(p[0].v);
  dlock_queue_value_free(p[1].v);
  void *v = NULL;
  size_t len = 0;
  CHECK_RC(dlock_queue_poll(qb, 0, &v, &len), 0);
  CHECK(len == 2 && memcmp(v, "t1", 2) == 0);
  dlock_queue_value_free(v);
  /* Another kind at the name: refused, as on the blocking client. */
  th_etcd_ctl(s, "put aqx v", buf, sizeof buf);
  memset(o, 0, sizeof o);
  memset(p, 0, sizeof p);
  CHECK_RC(dlock_queue_offer_async(x, "v", 1, on_tdone, &o[0], NULL), 0);
  CHECK_RC(dlock_queue_poll_async(x, 1000, &p[0].v, &p[0].len, on_tdone,
                                  &p[0].t, NULL),
           0);
  CHECK(run_one(lp, &o[0]) && run_one(lp, &p[0].t));
  CHECK_RC(o[0].d.rc, dlock_queue_offer(xb, "v", 1));
  CHECK_RC(p[0].t.d.rc, dlock_queue_poll(xb, 1000, &v, &len));
  CHECK_RC(p[0].t.d.rc, DLOCK_EWRONGTYPE);
  th_etcd_ctl(s, "del aqx", buf, sizeof buf);
  /* A poll with a short deadline: at it, as the blocking client's. */
  memset(p, 0, sizeof p);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_queue_poll_async(q, 200, &p[0].v, &p[0].len, on_tdone, &p[0].t,
                                  NULL),
           0);
  CHECK(run_one(lp, &p[0].t));
  fprintf(stderr, "    a 200 ms poll ended after %lld ms: %s\n",
          (long long)(p[0].t.at - t0), dlock_err_name(p[0].t.d.rc));
  CHECK_RC(p[0].t.d.rc, dlock_queue_poll(qb, 50, &v, &len));
  CHECK_RC(p[0].t.d.rc, DLOCK_EBUSY);
  CHECK(p[0].t.at - t0 >= 200 && p[0].t.at - t0 < 200 + th_soon(200));
  /* A cancelled poll: at once, no thread. */
  dlock_op *op;
  CHECK_RC(dlock_queue_poll_async(q, 10000, &p[1].v, &p[1].len, on_tdone,
                                  &p[1].t, &op),
           0);
  CHECK_EQ(et_run_sampled(lp, 50), before);
  CHECK_EQ(p[1].t.d.calls, 0);
  CHECK(cancelled_soon(lp, op, &p[1].t, "poll"));
  /* One cancelled as a value comes, or at any step of its take: the
   * value is the poll's (0), or still in the queue (DLOCK_ECANCELED). */
  CHECK_RC(dlock_queue_poll_async(q, 10000, &p[2].v, &p[2].len, on_tdone,
                                  &p[2].t, &op),
           0);
  run_for(lp, 50);
  CHECK_RC(dlock_queue_offer(qb, "c", 1), 0);
  dlock_op_cancel(op); /* its watch's news not yet heard */
  CHECK(run_one(lp, &p[2].t));
  CHECK_RC(p[2].t.d.rc, DLOCK_ECANCELED);
  CHECK_EQ(qsize(qb), 1);
  int kept = 0;
  for (int k = 0; k < 8; k++) {
    qdone *d = &p[3];
    memset(d, 0, sizeof *d);
    CHECK_RC(
        dlock_queue_poll_async(q, 10000, &d->v, &d->len, on_tdone, &d->t, &op),
        0);
    run_for(lp, k);
    if (d->t.d.calls == 0) dlock_op_cancel(op);
    CHECK(run_one(lp, &d->t));
    CHECK(d->t.d.rc == 0 || d->t.d.rc == DLOCK_ECANCELED);
    if (d->t.d.rc == 0) {
      CHECK(d->len == 1 && memcmp(d->v, "c", 1) == 0);
      dlock_queue_value_free(d->v);
      CHECK_RC(dlock_queue_offer(qb, "c", 1), 0);
    } else {
      kept++;
    }
    CHECK_EQ(qsize(qb), 1);
  }
  fprintf(stderr,
          "    8 polls cancelled after 0 to 7 ms: %d left the "
          "value\n",
          kept);
  CHECK_RC(dlock_queue_poll(qb, 0, &v, &len), 0);
  dlock_queue_value_free(v);
  CHECK_EQ(et_tasks(), before);
  /* The client closed with one in flight: told within the close. */
  memset(p, 0, sizeof p);
  CHECK_RC(dlock_queue_poll_async(q, 10000, &p[0].v, &p[0].len, on_tdone,
                                  &p[0].t, NULL),
           0);
  CHECK_EQ(et_run_sampled(lp, 50), before);
  CHECK_EQ(p[0].t.d.calls, 0);
  dlock_queue_free(q);
  dlock_queue_free(x);
  dlock_client_close(c);
  CHECK_EQ(p[0].t.d.calls, 1);
  CHECK_RC(p[0].t.d.rc, DLOCK_ECLOSED);
  dlock_loop_free(lp);
  CHECK_EQ(qsize(qb), 0);
  dlock_queue_free(qb);
  dlock_queue_free(xb);
  dlock_client_close(cb);
}

/* An event-loop client's queue runs on its loop's multi handle: N polls
 * waiting (a watch on the queue's values each) and N offers start no
 * thread; the offers wake every poll, each with a value of its own (all
 * within 300 ms), and another client's offer a poll within 100 ms; both
 * ends, the size, another kind at the name and a poll's deadline as on
 * the blocking client; a cancelled poll ends at once and
 * takes nothing (a value it took as it was cancelled goes back), and one
 * in flight at the client's close ends DLOCK_ECLOSED; over gRPC and over
 * the gateway. */
static void t_etcd_async_queue(void) {
  TH_NEED_ETCD();
  both_transports(async_queue);
}

/* A delayed queue handle's poll on an event-loop client moves the values
 * due on the loop too: a poll waiting for a value offered with a delay
 * starts no thread and gets it at its due time (within 100 ms); the
 * delayed size as the blocking client's. */
static void t_etcd_async_delayed(void) {
  TH_ETCD_SETUP(s);
  dlock_loop *lp;
  dlock_client *c, *cb;
  dlock_queue *q, *qb;
  CHECK(queue_pair(s.url, "ad", true, &lp, &c, &cb, &q, &qb));
  tdone r;
  int64_t n = -1;
  int before = et_tasks();
  memset(&r, 0, sizeof r);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_queue_offer_delayed_async(q, 300, "d", 1, on_tdone, &r, NULL),
           0);
  CHECK(run_one(lp, &r));
  CHECK_RC(r.d.rc, 0);
  int64_t dn = -1;
  memset(&r, 0, sizeof r);
  CHECK_RC(dlock_queue_delayed_size_async(q, &n, on_tdone, &r, NULL), 0);
  CHECK(run_one(lp, &r));
  CHECK_RC(r.d.rc, 0);
  CHECK_RC(dlock_queue_delayed_size(qb, &dn), 0);
  CHECK(n == 1 && dn == 1);
  qdone p;
  memset(&p, 0, sizeof p);
  CHECK_RC(dlock_queue_poll_async(q, 3000, &p.v, &p.len, on_tdone, &p.t, NULL),
           0);
  CHECK_EQ(et_run_sampled(lp, 100), before);
  CHECK_EQ(p.t.d.calls, 0);
  CHECK(run_one(lp, &p.t));
  CHECK(p.t.d.rc == 0 && p.len == 1 && memcmp(p.v, "d", 1) == 0);
  dlock_queue_value_free(p.v);
  fprintf(stderr,
          "    a value offered with a 300 ms delay polled after %lld "
          "ms\n",
          (long long)(p.t.at - t0));
  CHECK(p.t.at - t0 >= 300 && p.t.at - t0 < 300 + th_soon(100));
  CHECK_EQ(et_tasks(), before);
  CHECK_RC(dlock_queue_delayed_size(qb, &dn), 0);
  CHECK_EQ(dn, 0);
  CHECK_EQ(qsize(qb), 0);
  dlock_queue_free(q);
  dlock_client_close(c);
  dlock_loop_free(lp);
  dlock_queue_free(qb);
  dlock_client_close(cb);
  th_etcd_stop(&s);
}

/* A waiting acquire's kind t_etcd_async_sem_wait runs: the counting
 * semaphore, or the permit-expirable one. */
typedef struct wait_kind {
  bool permits;
  const char *name;            /* the name, and its waiters' prefix */
  dlock_semaphore *sa[9], *sb; /* the event loop's handles, the blocking */
  dlock_permits *pa[9], *pb;
  char held[3][DLOCK_PERMIT_ID_LEN]; /* the blocking client's permits */
  char id[9][DLOCK_PERMIT_ID_LEN];
} wait_kind;

/* Handle i's acquire of one permit, waiting up to wait_ms, t told. */
static int wait_start(wait_kind *k, int i, int64_t wait_ms, tdone *t,
                      dlock_op **op) {
  memset(t, 0, sizeof *t);
  if (k->permits)
    return dlock_permits_acquire_async(k->pa[i], wait_ms, 0, k->id[i], on_tdone,
                                       t, op);
  return dlock_semaphore_acquire_async(k->sa[i], 1, wait_ms, on_tdone, t, op);
}

/* The blocking client's try with a 50 ms wait: its result. */
static int wait_blocking_try(wait_kind *k) {
  char id[DLOCK_PERMIT_ID_LEN];
  if (k->permits) return dlock_permits_try_acquire(k->pb, 50, 0, id);
  return dlock_semaphore_try_acquire(k->sb, 1, 50);
}

/* async_wait on the server s at url (its transport) for k's kind. */
static void async_wait(const th_etcd *s, const char *url, wait_kind *k) {
  enum { N = 8, HANDED = 3 };
  fprintf(stderr, "    %s %s\n", k->permits ? "permits" : "semaphore", url);
  dlock_loop *lp;
  dlock_client *c, *cb;
  CHECK(loop_and_blocking(url, &lp, &c, &cb));
  char buf[256], waiters[64];
  snprintf(buf, sizeof buf, "del --prefix %s", k->name); /* an earlier pass's */
  th_etcd_ctl(s, buf, buf, sizeof buf);
  snprintf(waiters, sizeof waiters, "%s/waiters/", k->name);
  for (int i = 0; i <= N; i++)
    CHECK_RC(k->permits ? dlock_permits_new(c, k->name, &k->pa[i])
                        : dlock_semaphore_new(c, k->name, &k->sa[i]),
             0);
  if (k->permits) {
    CHECK_RC(dlock_permits_new(cb, k->name, &k->pb), 0);
    CHECK_RC(dlock_permits_try_set(k->pb, HANDED + 1), 1);
  } else {
    CHECK_RC(dlock_semaphore_new(cb, k->name, &k->sb), 0);
    CHECK_RC(dlock_semaphore_try_set_permits(k->sb, 0), 1);
  }
  /* The first call opens the connection, and a permit's hold starts the
   * client's watcher thread (threads not counted). */
  tdone t[N + 1];
  CHECK_RC(wait_start(k, N, 0, &t[N], NULL), 0);
  CHECK(run_one(lp, &t[N]));
  CHECK_RC(t[N].d.rc, k->permits ? 0 : DLOCK_EBUSY);
  /* None free: the blocking client holds the permits left. */
  for (int i = 0; k->permits && i < HANDED; i++)
    CHECK_RC(dlock_permits_try_acquire(k->pb, 0, 0, k->held[i]), 0);
  et_run_sampled(lp, th_soon(50)); /* the permits' keys' watches start */
  int before = et_tasks();
  /* N acquires waiting in line: no thread, none done, a watch each. */
  long long watches = th_etcd_started(s, "Watch"),
            watchers = th_etcd_gauge(s, "etcd_debugging_mvcc_watcher_total");
  dlock_op *op[N];
  for (int i = 0; i < N; i++)
    CHECK_RC(wait_start(k, i, 10000, &t[i], &op[i]), 0);
  CHECK_EQ(run_until_watches(lp, s, watches, watchers, N), before);
  for (int i = 0; i < N; i++)
    CHECK_EQ(t[i].d.calls, 0);
  CHECK_EQ(th_etcd_started(s, "Watch") - watches, N);
  /* Each permit released is taken by one waiter, within 100 ms. */
  int done = 0;
  for (int h = 0; h < HANDED; h++) {
    /* The release's own call and the wake-up after it, each bounded, so
     * that a slow one says which it was. */
    int64_t t0 = th_now_ms();
    CHECK_RC(k->permits ? dlock_permits_release(k->pb, k->held[h])
                        : dlock_semaphore_release(k->sb, 1),
             0);
    int64_t t1 = th_now_ms(), end = t1 + th_soon(2000);
    int took = -1;
    while (took < 0 && th_now_ms() < end) {
      dlock_loop_run(lp, 5);
      for (int i = 0; i < N; i++)
        if (t[i].d.calls && !(done & (1 << i))) took = i;
    }
    CHECK(took >= 0);
    done |= 1 << took;
    fprintf(stderr,
            "    waiter %d took the permit %lld ms after its release (the "
            "release's call: %lld ms)\n",
            took, (long long)(t[took].at - t1), (long long)(t1 - t0));
    CHECK_RC(t[took].d.rc, 0);
    CHECK(t1 - t0 < th_soon(100));
    CHECK(t[took].at - t1 < th_soon(100));
  }
  /* No other waiter woken: each permit taken once, none left. */
  CHECK_EQ(et_run_sampled(lp, 50), before);
  int woken = 0;
  for (int i = 0; i < N; i++)
    woken += t[i].d.calls;
  CHECK_EQ(woken, HANDED);
  CHECK_RC(k->permits ? dlock_permits_get_available(k->pb)
                      : dlock_semaphore_get_available(k->sb),
           0);
  /* A waiter cancelled: at once, its place gone. */
  int cancel = 0;
  while (done & (1 << cancel))
    cancel++;
  CHECK(cancelled_soon(lp, op[cancel], &t[cancel], "waiting acquire"));
  done |= 1 << cancel;
  /* A wait with a short deadline: at it, as the blocking client's. */
  int64_t t0 = th_now_ms();
  CHECK_RC(wait_start(k, N, 300, &t[N], NULL), 0);
  CHECK(run_one(lp, &t[N]));
  fprintf(stderr, "    a 300 ms wait ended after %lld ms: %s\n",
          (long long)(t[N].at - t0), dlock_err_name(t[N].d.rc));
  CHECK_RC(t[N].d.rc, wait_blocking_try(k));
  CHECK_RC(t[N].d.rc, DLOCK_EBUSY);
  CHECK(t[N].at - t0 >= 300 && t[N].at - t0 < 300 + th_soon(200));
  CHECK_EQ(et_tasks(), before);
  /* The others in flight at the client's close: told within it, and no
   * place left in the line. */
  CHECK(et_keys_under(s, waiters) == N - HANDED - 1);
  for (int i = 0; i <= N; i++) {
    dlock_semaphore_free(k->sa[i]);
    dlock_permits_free(k->pa[i]);
  }
  dlock_client_close(c);
  for (int i = 0; i < N; i++)
    if (!(done & (1 << i))) {
      CHECK_EQ(t[i].d.calls, 1);
      CHECK_RC(t[i].d.rc, DLOCK_ECLOSED);
    }
  dlock_loop_free(lp);
  CHECK_EQ(et_keys_under(s, waiters), 0);
  dlock_semaphore_free(k->sb);
  dlock_permits_free(k->pb);
  dlock_client_close(cb);
}

static void async_sem_wait(const th_etcd *s, const char *url) {
  wait_kind k = {.permits = false, .name = "aw"};
  async_wait(s, url, &k);
}

static void async_permits_wait(const th_etcd *s, const char *url) {
  wait_kind k = {.permits = true, .name = "ap"};
  async_wait(s, url, &k);
}

/* An event-loop client's waiting acquire of the counting semaphore and of
 * the permit-expirable one runs on its loop's multi handle too (a place
 * in the line, a watch on the place before it or on the permits): N
 * waiters start no thread; each permit released is taken by one of them
 * within 100 ms; a cancelled one ends at once, one at its deadline as the
 * blocking client's, and those in flight at the client's close with
 * DLOCK_ECLOSED, leaving no place in the line; over gRPC and over the
 * gateway. */
static void t_etcd_async_sem_wait(void) {
  TH_NEED_ETCD();
  both_transports(async_sem_wait);
}

static void t_etcd_async_permits_wait(void) {
  TH_NEED_ETCD();
  both_transports(async_permits_wait);
}

/* The permit-expirable semaphore's calls t_etcd_async_permits compares. */
typedef enum permits_call {
  PC_SET,
  PC_ADD,
  PC_AVAILABLE,
  PC_TRY,
  PC_RELEASE,
  PC_FORCE
} permits_call;

/* k(n, id) on the blocking client's permits b: its result (a try's id
 * into id). */
static int permits_blocking(dlock_permits *b, permits_call k, int n, char *id) {
  switch (k) {
  case PC_SET: return dlock_permits_try_set(b, n);
  case PC_ADD: return dlock_permits_add(b, n);
  case PC_AVAILABLE: return dlock_permits_get_available(b);
  case PC_TRY: return dlock_permits_try_acquire(b, 0, 0, id);
  case PC_RELEASE: return dlock_permits_release(b, id);
  default: return dlock_permits_force_release(b, id);
  }
}

/* k(n, id) on the event-loop client's permits a, run on lp: its result
 * (a try's id into id), or what it did not do; *threads: the process's
 * threads while it was in flight. */
static int permits_loop(dlock_loop *lp, dlock_permits *a, permits_call k, int n,
                        char *id, int *threads) {
  tdone t;
  memset(&t, 0, sizeof t);
  int rc;
  switch (k) {
  case PC_SET:
    rc = dlock_permits_try_set_async(a, n, on_tdone, &t, NULL);
    break;
  case PC_ADD: rc = dlock_permits_add_async(a, n, on_tdone, &t, NULL); break;
  case PC_AVAILABLE:
    rc = dlock_permits_get_available_async(a, on_tdone, &t, NULL);
    break;
  case PC_TRY:
    rc = dlock_permits_acquire_async(a, 0, 0, id, on_tdone, &t, NULL);
    break;
  case PC_RELEASE:
    rc = dlock_permits_release_async(a, id, on_tdone, &t, NULL);
    break;
  default: rc = dlock_permits_force_release_async(a, id, on_tdone, &t, NULL);
  }
  *threads = et_tasks();
  if (rc != 0) return rc;
  return run_one(lp, &t) ? t.d.rc : INT_MIN;
}

/* k(n) on the event-loop client's a (ida: its id) and the blocking
 * client's b (idb), names of the same history: same_answers. */
static bool permits_both(dlock_loop *lp, dlock_permits *a, dlock_permits *b,
                         permits_call k, int n, char *ida, char *idb, int want,
                         int before) {
  int threads, got = permits_loop(lp, a, k, n, ida, &threads);
  return same_answers((int)k, n, got, permits_blocking(b, k, n, idb), want,
                      threads, before);
}

/* An event-loop client's permit-expirable semaphore updates run on its
 * loop's multi handle too: set, add, available, a permit's release (its
 * own hold's delete at its revision, then its fixed lease kept idle) and
 * a force release give what the blocking client's give on a name of the
 * same history, errors included, and start no thread. */
static void t_etcd_async_permits(void) {
  TH_ETCD_SETUP(s);
  dlock_loop *lp;
  dlock_client *c, *cb;
  CHECK(loop_and_blocking(s.url, &lp, &c, &cb));
  dlock_permits *a, *b;
  CHECK_RC(dlock_permits_new(c, "au", &a), 0);
  CHECK_RC(dlock_permits_new(cb, "aub", &b), 0);
  char ida[DLOCK_PERMIT_ID_LEN], idb[DLOCK_PERMIT_ID_LEN];
  char ida2[DLOCK_PERMIT_ID_LEN], idb2[DLOCK_PERMIT_ID_LEN], buf[256];
  /* The first calls open the connection, and a permit's hold starts the
   * client's watcher thread (threads not counted). */
  CHECK(permits_both(lp, a, b, PC_SET, 3, ida, idb, 1, INT_MAX));
  CHECK(permits_both(lp, a, b, PC_TRY, 0, ida, idb, 0, INT_MAX));
  int before = et_tasks();
  CHECK(permits_both(lp, a, b, PC_SET, 5, ida, idb, 0, before));
  CHECK(permits_both(lp, a, b, PC_ADD, 1, ida, idb, 0, before));
  CHECK(permits_both(lp, a, b, PC_AVAILABLE, 0, ida, idb, 3, before));
  CHECK(permits_both(lp, a, b, PC_TRY, 0, ida2, idb2, 0, before));
  CHECK(permits_both(lp, a, b, PC_AVAILABLE, 0, ida, idb, 2, before));
  /* Released, then released again; taken back by force, then again. */
  CHECK(permits_both(lp, a, b, PC_RELEASE, 0, ida, idb, 0, before));
  CHECK(
      permits_both(lp, a, b, PC_RELEASE, 0, ida, idb, DLOCK_ENOTOWNER, before));
  CHECK(permits_both(lp, a, b, PC_FORCE, 0, ida2, idb2, 1, before));
  CHECK(permits_both(lp, a, b, PC_FORCE, 0, ida2, idb2, 0, before));
  CHECK(permits_both(lp, a, b, PC_AVAILABLE, 0, ida, idb, 4, before));
  /* Refused before anything is sent. */
  CHECK(permits_both(lp, a, b, PC_SET, -1, ida, idb, DLOCK_EINVAL, before));
  snprintf(ida, sizeof ida, "not an id");
  snprintf(idb, sizeof idb, "not an id");
  CHECK(permits_both(lp, a, b, PC_RELEASE, 0, ida, idb, DLOCK_EINVAL, before));
  /* Not a count at the total: refused. */
  th_etcd_ctl(&s, "put au/permits x", buf, sizeof buf);
  th_etcd_ctl(&s, "put aub/permits x", buf, sizeof buf);
  CHECK(permits_both(lp, a, b, PC_AVAILABLE, 0, ida, idb, DLOCK_EWRONGTYPE,
                     before));
  CHECK(permits_both(lp, a, b, PC_ADD, 1, ida, idb, DLOCK_EWRONGTYPE, before));
  CHECK_EQ(et_tasks(), before);
  dlock_permits_free(a);
  dlock_permits_free(b);
  dlock_client_close(c);
  dlock_client_close(cb);
  dlock_loop_free(lp);
  th_etcd_stop(&s);
}

/* An event-loop client's acquire of a read-write lock's sides runs on its
 * loop's multi handle too: readers waiting for another client's writer
 * start no thread, each takes the read side within 100 ms of the writer's
 * release, and N of them hold it together; a writer waits for them all;
 * a writer's owner is given the read side at once, then refused the write
 * side. */
static void t_etcd_async_rw(void) {
  TH_NEED_ETCD();
  enum { N = 8 };
  th_etcd s;
  CHECK_RC(th_etcd_start(&s), 0);
  dlock_loop *lp;
  dlock_client *cs[2];
  CHECK(loop_clients(s.url, &lp, cs, 2));
  dlock_client *c = cs[0], *c2 = cs[1];
  dlock_rwlock *rw[N], *rw2;
  for (int i = 0; i < N; i++)
    CHECK_RC(dlock_rwlock_new(c, "rwq", NULL, &rw[i]), 0);
  CHECK_RC(dlock_rwlock_new(c2, "rwq", NULL, &rw2), 0);
  dlock_lock *w = dlock_rwlock_write(rw2);
  /* The first of each client: its session's lease, its watcher thread. */
  et_adone d[N];
  memset(d, 0, sizeof d);
  CHECK_RC(dlock_lock_acquire_async(dlock_rwlock_read(rw[0]), 0, 0, et_on_adone,
                                    &d[0], NULL),
           0);
  CHECK(et_run_all(lp, d, 1));
  CHECK_RC(d[0].rc, 0);
  CHECK_RC(dlock_lock_release_async(dlock_rwlock_read(rw[0]), et_on_adone,
                                    &d[1], NULL),
           0);
  CHECK(et_run_all(lp, d + 1, 1));
  CHECK_RC(d[1].rc, 1);
  memset(d, 0, sizeof d);
  CHECK_RC(dlock_lock_acquire_async(w, 0, 0, et_on_adone, &d[0], NULL), 0);
  CHECK(et_run_all(lp, d, 1));
  CHECK_RC(d[0].rc, 0);
  /* N readers wait for the writer, on the loop. */
  int before = et_tasks();
  tdone t[N];
  memset(t, 0, sizeof t);
  for (int i = 0; i < N; i++)
    CHECK_RC(dlock_lock_acquire_async(dlock_rwlock_read(rw[i]), 10000, 0,
                                      on_tdone, &t[i], NULL),
             0);
  CHECK_EQ(et_run_sampled(lp, 200), before);
  for (int i = 0; i < N; i++)
    CHECK_EQ(t[i].d.calls, 0);
  CHECK_EQ(et_keys_under(&s, "rwq/"), N + 1);
  /* The writer's release: every reader takes the read side, together. */
  tdone r;
  memset(&r, 0, sizeof r);
  CHECK_RC(dlock_lock_release_async(w, on_tdone, &r, NULL), 0);
  CHECK(run_one(lp, &r));
  CHECK_RC(r.d.rc, 1);
  int64_t last = last_ok(lp, t, N);
  CHECK(last > 0);
  fprintf(stderr, "    %d readers took it at most %lld ms after the release\n",
          N, (long long)(last - r.at));
  CHECK(last - r.at < th_soon(100));
  CHECK_EQ(et_tasks(), before);
  CHECK_EQ(et_keys_under(&s, "rwq/"), N);
  /* A writer: refused at once, then waits for every reader, on the loop. */
  tdone wt;
  memset(&wt, 0, sizeof wt);
  CHECK_RC(dlock_lock_acquire_async(w, 0, 0, on_tdone, &wt, NULL), 0);
  CHECK(run_one(lp, &wt));
  CHECK_RC(wt.d.rc, DLOCK_EBUSY);
  memset(&wt, 0, sizeof wt);
  CHECK_RC(dlock_lock_acquire_async(w, 10000, 0, on_tdone, &wt, NULL), 0);
  CHECK_EQ(et_run_sampled(lp, 100), before);
  et_adone rd[N];
  memset(rd, 0, sizeof rd);
  for (int i = 0; i < N; i++) {
    CHECK_EQ(wt.d.calls, 0);
    CHECK_RC(dlock_lock_release_async(dlock_rwlock_read(rw[i]), et_on_adone,
                                      &rd[i], NULL),
             0);
    CHECK(et_run_all(lp, rd + i, 1));
    CHECK_RC(rd[i].rc, 1);
  }
  CHECK(run_one(lp, &wt));
  CHECK_RC(wt.d.rc, 0);
  CHECK_EQ(et_tasks(), before);
  CHECK_EQ(et_keys_under(&s, "rwq/"), 1);
  /* The writer's owner takes the read side at once (the downgrade), and
   * holding it is refused the write side: on the loop too. */
  memset(&wt, 0, sizeof wt);
  CHECK_RC(dlock_lock_acquire_async(dlock_rwlock_read(rw2), 0, 0, on_tdone, &wt,
                                    NULL),
           0);
  CHECK_EQ(et_tasks(), before);
  CHECK(run_one(lp, &wt));
  CHECK_RC(wt.d.rc, 0);
  CHECK_EQ(et_keys_under(&s, "rwq/"), 2);
  memset(&r, 0, sizeof r);
  CHECK_RC(dlock_lock_release_async(w, on_tdone, &r, NULL), 0);
  CHECK(run_one(lp, &r));
  CHECK_RC(r.d.rc, 1);
  memset(&wt, 0, sizeof wt);
  CHECK_RC(dlock_lock_acquire_async(w, 0, 0, on_tdone, &wt, NULL), 0);
  CHECK_EQ(et_tasks(), before);
  CHECK(run_one(lp, &wt));
  CHECK_RC(wt.d.rc, DLOCK_EDEADLK);
  memset(&r, 0, sizeof r);
  CHECK_RC(dlock_lock_release_async(dlock_rwlock_read(rw2), on_tdone, &r, NULL),
           0);
  CHECK(run_one(lp, &r));
  CHECK_RC(r.d.rc, 1);
  CHECK_EQ(et_keys_under(&s, "rwq/"), 0);
  for (int i = 0; i < N; i++)
    dlock_rwlock_free(rw[i]);
  dlock_rwlock_free(rw2);
  dlock_client_close(c);
  dlock_client_close(c2);
  dlock_loop_free(lp);
  th_etcd_stop(&s);
}

/* An event-loop client's release, force release, queries and ping are calls on
 * a multi handle its loop drives: N of them in flight start no thread
 * (each was a thread of its own), and end as the blocking ones do; the
 * client's close ends those still in flight, each told once. */
static void t_etcd_async_nothread(void) {
  TH_NEED_ETCD();
  enum { N = 16 };
  th_etcd s;
  CHECK_RC(th_etcd_start(&s), 0);
  dlock_loop *lp;
  dlock_lock *l[N];
  et_adone d[N];
  dlock_client *c;
  et_open_holding(&s, 0, "nt", N, &lp, l, &c);
  if (c == NULL) return;
  /* The releases, then pings, in flight together. */
  int before = et_tasks();
  memset(d, 0, sizeof d);
  for (int i = 0; i < N; i++)
    CHECK_RC(dlock_lock_release_async(l[i], et_on_adone, &d[i], NULL), 0);
  CHECK(few_threads(before, N, "releases"));
  CHECK(et_run_all(lp, d, N));
  for (int i = 0; i < N; i++) {
    CHECK_RC(d[i].rc, 1);
    CHECK_EQ(d[i].calls, 1);
  }
  char buf[512];
  CHECK(strcmp(th_etcd_ctl(&s, "get --prefix nt --keys-only", buf, sizeof buf),
               "") == 0);
  memset(d, 0, sizeof d);
  before = et_tasks();
  for (int i = 0; i < N; i++)
    CHECK_RC(dlock_client_ping_async(c, et_on_adone, &d[i], NULL), 0);
  CHECK(few_threads(before, N, "pings"));
  CHECK(et_run_all(lp, d, N));
  for (int i = 0; i < N; i++)
    CHECK_RC(d[i].rc, 0);
  /* Force releases: a range and a txn each. */
  memset(d, 0, sizeof d);
  for (int i = 0; i < N; i++)
    CHECK_RC(dlock_lock_acquire_async(l[i], 0, 0, et_on_adone, &d[i], NULL), 0);
  CHECK(et_run_all(lp, d, N));
  /* Queries: is it held (a range), its time left (and a timetolive). */
  et_adone q[N];
  int64_t ttl[N];
  memset(d, 0, sizeof d);
  memset(q, 0, sizeof q);
  before = et_tasks();
  for (int i = 0; i < N; i++) {
    CHECK_RC(dlock_lock_is_held_async(l[i], et_on_adone, &d[i], NULL), 0);
    CHECK_RC(
        dlock_lock_remaining_ttl_async(l[i], &ttl[i], et_on_adone, &q[i], NULL),
        0);
  }
  CHECK(few_threads(before, N, "locks' two queries"));
  CHECK(et_run_all(lp, d, N) && et_run_all(lp, q, N));
  for (int i = 0; i < N; i++) {
    CHECK_RC(d[i].rc, 1);
    CHECK_RC(q[i].rc, 0);
    CHECK(ttl[i] > 0 && ttl[i] <= 30000);
  }
  memset(d, 0, sizeof d);
  before = et_tasks();
  for (int i = 0; i < N; i++)
    CHECK_RC(dlock_lock_force_release_async(l[i], et_on_adone, &d[i], NULL), 0);
  CHECK(few_threads(before, N, "force releases"));
  CHECK(et_run_all(lp, d, N));
  for (int i = 0; i < N; i++)
    CHECK_RC(d[i].rc, 1);
  CHECK(strcmp(th_etcd_ctl(&s, "get --prefix nt --keys-only", buf, sizeof buf),
               "") == 0);
  /* Closed with pings in flight: each told once. */
  memset(d, 0, sizeof d);
  for (int i = 0; i < N; i++)
    CHECK_RC(dlock_client_ping_async(c, et_on_adone, &d[i], NULL), 0);
  for (int i = 0; i < N; i++)
    dlock_lock_free(l[i]);
  dlock_client_close(c);
  CHECK(et_run_all(lp, d, N));
  for (int i = 0; i < N; i++) {
    CHECK(d[i].rc == 0 || d[i].rc == DLOCK_ECLOSED);
    CHECK_EQ(d[i].calls, 1);
  }
  dlock_loop_free(lp);
  th_etcd_stop(&s);
}

/* Whether the n operations d all ended once with want; else says how
 * many did not, and the first (what: their kind). */
static bool all_ended(const et_adone *d, int n, int want, const char *what) {
  int bad = 0, first = -1;
  for (int i = 0; i < n; i++)
    if ((d[i].calls != 1 || d[i].rc != want) && bad++ == 0) first = i;
  if (bad)
    fprintf(stderr, "    %d %s(s) of %d not as they should, %s %d: %s\n", bad,
            what, n, what, first,
            d[first].calls ? dlock_err_name(d[first].rc) : "not done");
  return bad == 0;
}

enum { AR_N = 32 };

/* AR_N releases of l's locks in flight at once on lp, ended into d. */
static void releases(dlock_loop *lp, dlock_lock **l, et_adone *d) {
  memset(d, 0, AR_N * sizeof *d);
  for (int i = 0; i < AR_N; i++)
    CHECK_RC(dlock_lock_release_async(l[i], et_on_adone, &d[i], NULL), 0);
  et_run_all(lp, d, AR_N);
}

/* The connections to port, once they are at most `most` (the loop run
 * meanwhile; 1 s at most). */
static int conns_down_to(dlock_loop *lp, int port, int most) {
  int64_t end = th_now_ms() + th_soon(1000);
  int n;
  while ((n = et_conns_to(port, NULL)) > most && th_now_ms() < end)
    dlock_loop_run(lp, 10);
  return n;
}

/* A round on lp: AR_N acquires (of l's locks) and AR_N pings in flight
 * at once, then AR_N releases: whether each ended as it should (*ok), and
 * how long the round took (*ms). */
static void cycles_at_once(dlock_loop *lp, dlock_client *c, dlock_lock **l,
                           bool *ok, int64_t *ms) {
  *ok = false;
  et_adone acq[AR_N], ping[AR_N], rel[AR_N];
  memset(acq, 0, sizeof acq);
  memset(ping, 0, sizeof ping);
  memset(rel, 0, sizeof rel);
  int64_t t0 = th_now_ms();
  for (int i = 0; i < AR_N; i++) {
    CHECK_RC(dlock_lock_acquire_async(l[i], 0, 0, et_on_adone, &acq[i], NULL),
             0);
    CHECK_RC(dlock_client_ping_async(c, et_on_adone, &ping[i], NULL), 0);
  }
  et_run_all(lp, acq, AR_N);
  et_run_all(lp, ping, AR_N);
  releases(lp, l, rel);
  *ms = th_now_ms() - t0;
  bool acquired = all_ended(acq, AR_N, 0, "acquire"),
       pinged = all_ended(ping, AR_N, 0, "ping");
  *ok = all_ended(rel, AR_N, 1, "release") && acquired && pinged;
}


/* An event-loop acquire that rode out a stall of the server (its
 * session's grant unanswered for three command timeouts, then answered)
 * and won from its put ends its ride there: an acquire of the same lock
 * in the same client, another owner waiting behind it, ends at its
 * deadline with DLOCK_EBUSY (held), not with the ride's stale error
 * (DLOCK_ETIMEDOUT, "an acquire of it in this client rides out the
 * server's loss"), which it got when only a look ended a ride. */
static void t_etcd_async_ride_answered(void) {
  TH_NEED_ETCD();
  th_etcd s;
  CHECK_RC(th_etcd_start(&s), 0);
  dlock_loop *lp;
  CHECK_RC(dlock_loop_new(NULL, &lp), 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = s.url;
  o.command_timeout_ms = (int)th_soon(200);
  dlock_client *c;
  CHECK_RC(dlock_client_open_async(&o, lp, &c), 0);
  dlock_lock *a, *b;
  CHECK_RC(dlock_lock_new(c, "ra", "a", &a), 0);
  CHECK_RC(dlock_lock_new(c, "ra", "b", &b), 0);
  et_adone d[2];
  memset(d, 0, sizeof d);
  th_etcd_kill(&s, SIGSTOP);
  CHECK_RC(dlock_lock_acquire_async(a, 10000, 0, et_on_adone, &d[0], NULL), 0);
  for (int64_t end = th_now_ms() + 3 * o.command_timeout_ms;
       th_now_ms() < end;)
    dlock_loop_run(lp, 10);
  CHECK_EQ(d[0].calls, 0); /* riding it out */
  th_etcd_kill(&s, SIGCONT);
  CHECK(et_run_all(lp, d, 1));
  CHECK_RC(d[0].rc, 0);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_acquire_async(b, 300, 0, et_on_adone, &d[1], NULL), 0);
  CHECK(et_run_all(lp, d + 1, 1));
  fprintf(stderr, "    the acquire behind it: %s after %lld ms\n",
          dlock_err_name(d[1].rc), (long long)(th_now_ms() - t0));
  CHECK_RC(d[1].rc, DLOCK_EBUSY);
  memset(d, 0, sizeof d);
  CHECK_RC(dlock_lock_release_async(a, et_on_adone, &d[0], NULL), 0);
  CHECK(et_run_all(lp, d, 1));
  CHECK_RC(d[0].rc, 1);
  dlock_lock_free(a);
  dlock_lock_free(b);
  dlock_client_close(c);
  dlock_loop_free(lp);
  th_etcd_stop(&s);
}

/* An event-loop client's calls after a server restart, many in flight:
 * the shared HTTP/2 connection is gone, and the calls that find it so
 * each end once, answered, on one new connection (they opened one each,
 * HTTP/1.1 to etcd's gateway, 97 to 113 in all, and some were left to
 * their deadline). With the server down they each end at once, not
 * reached, after one connection attempt in all. */
static void t_etcd_async_restart(void) {
  TH_NEED_ETCD();
  th_etcd s;
  CHECK_RC(th_etcd_start(&s), 0);
  dlock_loop *lp;
  dlock_lock *l[AR_N];
  dlock_client *c;
  et_open_holding(&s, 0, "ar", AR_N, &lp, l, &c);
  if (c == NULL) return;
  et_adone d[AR_N];
  releases(lp, l, d);
  CHECK(all_ended(d, AR_N, 1, "release"));
  int64_t ms[3];
  bool ok;
  cycles_at_once(lp, c, l, &ok, &ms[0]);
  CHECK(ok);
  int conns[3];
  /* The calls' and the watcher thread's, its holds' watches ended. */
  conns[0] = conns_down_to(lp, s.port, 2);
  fprintf(stderr, "    before the restart: %lld ms, %d connection(s)\n",
          (long long)ms[0], conns[0]);
  CHECK_RC(th_etcd_restart(&s), 0);
  for (int r = 1; r < 3; r++) {
    cycles_at_once(lp, c, l, &ok, &ms[r]);
    conns[r] = conns_down_to(lp, s.port, 2);
    fprintf(stderr, "    round %d: %s in %lld ms, %d connection(s)\n", r,
            ok ? "all answered" : "NOT all answered", (long long)ms[r],
            conns[r]);
    CHECK(ok);
    CHECK(conns[r] <= 2);
  }
  th_etcd_kill(&s, SIGKILL);
  memset(d, 0, sizeof d);
  et_count_connects(s.port);
  int64_t t0 = th_now_ms();
  for (int i = 0; i < AR_N; i++)
    CHECK_RC(dlock_client_ping_async(c, et_on_adone, &d[i], NULL), 0);
  et_run_all(lp, d, AR_N);
  int tries = et_connects();
  et_count_connects(0);
  fprintf(stderr,
          "    server down: %d pings ended in %lld ms, %d connection "
          "attempt(s)\n",
          AR_N, (long long)(th_now_ms() - t0), tries);
  CHECK(all_ended(d, AR_N, DLOCK_ECONNECT, "ping"));
  CHECK_EQ(tries, 1); /* the one the others waited for */
  for (int i = 0; i < AR_N; i++)
    dlock_lock_free(l[i]);
  dlock_client_close(c);
  dlock_loop_free(lp);
  th_etcd_stop(&s);
}

/* A scan's names passed, and whether each came on the loop's thread. */
typedef struct scan_seen {
  et_adone d;
  int names;
  int stop_after; /* 0: never stops */
  bool elsewhere; /* a name came on another thread */
  pthread_t loop;
} scan_seen;
static int on_scanned(const char *name, void *ud) {
  (void)name;
  scan_seen *s = ud;
  s->names++;
  if (!pthread_equal(pthread_self(), s->loop)) s->elsewhere = true;
  return s->stop_after && s->names >= s->stop_after;
}
static void on_scan_end(int rc, uint64_t token, const char *errmsg, void *ud) {
  et_on_adone(rc, token, errmsg, &((scan_seen *)ud)->d);
}

/* An event-loop client's reliable take and ack run on its loop's multi
 * handle too: a reliable poll waiting starts no thread and gets another
 * client's offer within 100 ms, its value kept at the consumer's key
 * until the ack deletes it (an ack of a value not taken:
 * DLOCK_ENOTOWNER, as on the blocking client); a value a consumer took
 * and did not acknowledge before its lease ended goes back to the head,
 * and the next reliable take gets it; a cancelled one ends at once. */
static void t_etcd_async_reliable(void) {
  TH_ETCD_SETUP(s);
  dlock_loop *lp;
  dlock_client *c, *cb;
  dlock_queue *q, *qb;
  CHECK(queue_pair(s.url, "ar", false, &lp, &c, &cb, &q, &qb));
  const char *proc = "__dlock_processing/ar/";
  tdone r;
  int before = et_tasks();
  qdone p;
  memset(&p, 0, sizeof p);
  CHECK_RC(dlock_queue_poll_reliable_async(q, 3000, &p.v, &p.len, on_tdone,
                                           &p.t, NULL),
           0);
  CHECK_EQ(et_run_sampled(lp, 100), before);
  CHECK_EQ(p.t.d.calls, 0);
  CHECK_RC(dlock_queue_offer(qb, "r1", 2), 0);
  int64_t offered = th_now_ms();
  CHECK(run_one(lp, &p.t));
  CHECK(p.t.d.rc == 0 && p.len == 2 && memcmp(p.v, "r1", 2) == 0);
  dlock_queue_value_free(p.v);
  fprintf(stderr, "    a reliable poll woken %lld ms after the offer\n",
          (long long)(p.t.at - offered));
  CHECK(p.t.at - offered < th_soon(100));
  CHECK_EQ(et_keys_under(&s, proc), 1);
  CHECK_EQ(qsize(qb), 0);
  memset(&r, 0, sizeof r);
  CHECK_RC(dlock_queue_ack_async(q, "r1", 2, on_tdone, &r, NULL), 0);
  CHECK(run_one(lp, &r));
  CHECK_RC(r.d.rc, 0);
  CHECK_EQ(et_keys_under(&s, proc), 0);
  memset(&r, 0, sizeof r);
  CHECK_RC(dlock_queue_ack_async(q, "r1", 2, on_tdone, &r, NULL), 0);
  CHECK(run_one(lp, &r));
  CHECK_RC(r.d.rc, dlock_queue_ack(qb, "r1", 2));
  CHECK_RC(r.d.rc, DLOCK_ENOTOWNER);
  CHECK_EQ(et_run_sampled(lp, 20), before);
  /* The blocking client takes r2 and closes (its consumer's lease goes)
   * without an ack: our next reliable take gives it back and gets it. */
  CHECK_RC(dlock_queue_offer(qb, "r2", 2), 0);
  void *v = NULL;
  size_t len = 0;
  CHECK_RC(dlock_queue_poll_reliable(qb, 0, &v, &len), 0);
  CHECK(len == 2 && memcmp(v, "r2", 2) == 0);
  dlock_queue_value_free(v);
  dlock_queue_free(qb);
  dlock_client_close(cb);
  before = et_tasks(); /* without the blocking client's */
  CHECK_EQ(et_keys_under(&s, proc), 1);
  memset(&p, 0, sizeof p);
  CHECK_RC(
      dlock_queue_poll_reliable_async(q, 0, &p.v, &p.len, on_tdone, &p.t, NULL),
      0);
  CHECK(run_one(lp, &p.t));
  CHECK(p.t.d.rc == 0 && p.len == 2 && memcmp(p.v, "r2", 2) == 0);
  dlock_queue_value_free(p.v);
  CHECK_EQ(et_keys_under(&s, proc), 1); /* ours now */
  memset(&r, 0, sizeof r);
  CHECK_RC(dlock_queue_ack_async(q, "r2", 2, on_tdone, &r, NULL), 0);
  CHECK(run_one(lp, &r));
  CHECK_RC(r.d.rc, 0);
  CHECK_EQ(et_keys_under(&s, proc), 0);
  /* A cancelled reliable poll: at once. */
  dlock_op *op;
  memset(&p, 0, sizeof p);
  CHECK_RC(dlock_queue_poll_reliable_async(q, 10000, &p.v, &p.len, on_tdone,
                                           &p.t, &op),
           0);
  CHECK_EQ(et_run_sampled(lp, 50), before);
  CHECK(cancelled_soon(lp, op, &p.t, "reliable poll"));
  CHECK_EQ(et_tasks(), before);
  dlock_queue_free(q);
  dlock_client_close(c);
  dlock_loop_free(lp);
  th_etcd_stop(&s);
}

/* The leases the server s has (etcdctl's "found N leases"), -1 unknown. */
static int leases(const th_etcd *s) {
  char buf[4096];
  const char *f =
      strstr(th_etcd_ctl(s, "lease list", buf, sizeof buf), "found ");
  int n = -1;
  return f && sscanf(f, "found %d leases", &n) == 1 ? n : -1;
}

/* Runs lp a round at a time (no wait) until the server s has started
 * `more` calls of `method` beyond `from` (2 s at most): whether it did.
 * The loop is not run meanwhile, so their answers wait for the next. */
static bool run_until_started(dlock_loop *lp, const th_etcd *s,
                              const char *method, long long from, int more) {
  for (int64_t end = th_now_ms() + th_soon(2000); th_now_ms() < end;) {
    dlock_loop_run(lp, 0);
    if (th_etcd_started(s, method) >= from + more) return true;
  }
  return false;
}

/* An event-loop client closed while a reliable take's consumer lease is
 * being granted (its grant started on the server, its answer not yet
 * read): the lease is revoked within the close, as the blocking client's
 * consumer lease is at its close, not left to its TTL. */
static void t_etcd_async_reliable_close(void) {
  TH_ETCD_SETUP(s);
  dlock_loop *lp;
  dlock_client *c;
  CHECK(loop_clients(s.url, &lp, &c, 1));
  dlock_queue *q;
  CHECK_RC(dlock_queue_new(c, "arc", &q), 0);
  int64_t n = -1;
  tdone r;
  memset(&r, 0, sizeof r);
  CHECK_RC(dlock_queue_size_async(q, &n, on_tdone, &r, NULL), 0);
  CHECK(run_one(lp, &r)); /* the connection opened */
  int before = leases(&s);
  CHECK(before >= 0);
  qdone p;
  memset(&p, 0, sizeof p);
  long long grants = th_etcd_started(&s, "LeaseGrant");
  CHECK_RC(dlock_queue_poll_reliable_async(q, 10000, &p.v, &p.len, on_tdone,
                                           &p.t, NULL),
           0);
  CHECK(run_until_started(lp, &s, "LeaseGrant", grants, 1));
  dlock_queue_free(q);
  dlock_client_close(c);
  CHECK_EQ(p.t.d.calls, 1);
  CHECK_RC(p.t.d.rc, DLOCK_ECLOSED);
  CHECK_EQ(leases(&s), before);
  CHECK_EQ(et_keys_under(&s, "__dlock_consumers/arc/"), 0);
  dlock_loop_free(lp);
  th_etcd_stop(&s);
}

static void *cont_later(void *ud) {
  th_etcd *s = ud;
  /* within the close's give-back (a command timeout: 400 ms or more) */
  th_sleep_ms(150);
  th_etcd_kill(s, SIGCONT);
  return NULL;
}

/* How back_at_close's server comes back: during the close, after it, or
 * after the give-back timed out (no close then). */
typedef enum back_end { RESUMES, PAUSED, NO_CLOSE } back_end;

/* One try at back_at_close's window: q's poll of the one value in the
 * queue, cancelled while its take's answer waits unread, the server then
 * paused and the answer read, the value's give-back sent to the paused
 * server. The window is found from outside (the server's counts), so the
 * loop may read the take's answer before the cancel: then the poll has
 * the value (checked), it goes back to the queue for another try, and
 * *got is 0. 1: caught; -1: a check failed (the server not left paused). */
static void take_caught(dlock_loop *lp, const th_etcd *s, dlock_queue *q,
                        dlock_queue *qb, qdone *p, int *got) {
  *got = -1;
  memset(p, 0, sizeof *p);
  dlock_op *op;
  long long txns = th_etcd_started(s, "Txn"), done = th_etcd_handled(s, "Txn");
  CHECK_RC(
      dlock_queue_poll_async(q, 10000, &p->v, &p->len, on_tdone, &p->t, &op),
      0);
  /* Its look and its take started; the take's answer not yet read. */
  CHECK(run_until_started(lp, s, "Txn", txns, 2));
  if (p->t.d.calls != 0) { /* read before the cancel: a plain poll's */
    fprintf(stderr, "    the take's answer was read before the cancel\n");
    CHECK_RC(p->t.d.rc, 0);
    CHECK(p->len == 1 && memcmp(p->v, "c", 1) == 0);
    dlock_queue_value_free(p->v);
    CHECK_EQ(qsize(qb), 0);
    CHECK_RC(dlock_queue_offer(qb, "c", 1), 0);
    *got = 0;
    return;
  }
  dlock_op_cancel(op);
  /* The take answered, and its answer here, before the server pauses. */
  for (int64_t end = th_now_ms() + th_soon(1000);
       th_etcd_handled(s, "Txn") < done + 2 && th_now_ms() < end;)
    ;
  CHECK(th_etcd_handled(s, "Txn") >= done + 2);
  struct pollfd pf = {.fd = dlock_loop_fd(lp), .events = POLLIN};
  CHECK_EQ(poll(&pf, 1, th_soon(1000)), 1);
  th_etcd_kill((th_etcd *)s, SIGSTOP);
  /* The answer read: the value goes back, its txn to the paused server. */
  run_for(lp, 20);
  if (p->t.d.calls != 0) {
    th_etcd_kill((th_etcd *)s, SIGCONT);
    fprintf(stderr, "    the cancelled poll ended (%s) before its give-back\n",
            dlock_err_name(p->t.d.rc));
    CHECK_EQ(p->t.d.calls, 0);
  }
  *got = 1;
}

/* A cancelled poll whose take got a value, its give-back sent to a server
 * that is paused, then closed (or not: how). */
static void back_at_close(const th_etcd *s, back_end how) {
  bool resumes = how == RESUMES;
  dlock_loop *lp;
  CHECK_RC(dlock_loop_new(NULL, &lp), 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = s->url;
  /* The take's own deadline too: valgrind's and the sanitizers' slowdown
   * between its send and the pause must not time it out. */
  o.command_timeout_ms = (int)th_soon(400) * th_slowdown();
  dlock_client *c, *cb;
  CHECK_RC(dlock_client_open_async(&o, lp, &c), 0);
  CHECK_RC(dlock_client_open(&o, &cb), 0);
  dlock_queue *q, *qb;
  CHECK_RC(dlock_queue_new(c, "aqc", &q), 0);
  CHECK_RC(dlock_queue_new(cb, "aqc", &qb), 0);
  int64_t n = -1;
  tdone r;
  memset(&r, 0, sizeof r);
  CHECK_RC(dlock_queue_size_async(q, &n, on_tdone, &r, NULL), 0);
  CHECK(run_one(lp, &r));
  CHECK_EQ(n, 0);
  CHECK_RC(dlock_queue_offer(qb, "c", 1), 0);
  qdone p;
  int caught = 0;
  for (int tries = 0; tries < 5 && caught == 0; tries++)
    take_caught(lp, s, q, qb, &p, &caught);
  CHECK_EQ(caught, 1);
  pthread_t t;
  if (resumes) CHECK_RC(pthread_create(&t, NULL, cont_later, (void *)s), 0);
  int64_t t0 = th_now_ms();
  if (how == NO_CLOSE) CHECK(run_one(lp, &p.t)); /* the give-back's timeout */
  dlock_queue_free(q);                           /* freed with its poll */
  dlock_client_close(c);
  int64_t took = th_now_ms() - t0;
  if (resumes)
    pthread_join(t, NULL);
  else
    th_etcd_kill((th_etcd *)s, SIGCONT);
  CHECK_EQ(p.t.d.calls, 1);
  int64_t left = qsize(qb);
  fprintf(stderr, "    %s in %lld ms (server %s): %s, %lld left\n",
          how == NO_CLOSE ? "ended" : "closed", (long long)took,
          resumes ? "resumed meanwhile" : "paused", dlock_err_name(p.t.d.rc),
          (long long)left);
  if (p.t.d.rc == 0) {
    /* Not known to be back: the caller's (the aborted txn may still
     * have put it back: twice rather than lost). */
    CHECK(p.len == 1 && memcmp(p.v, "c", 1) == 0);
    dlock_queue_value_free(p.v);
    CHECK(left == 0 || left == 1);
  } else {
    CHECK_RC(p.t.d.rc, DLOCK_ECLOSED);
    CHECK_EQ(left, 1);
  }
  if (how == NO_CLOSE) CHECK_RC(p.t.d.rc, 0);
  if (resumes) { /* back, and once */
    CHECK_RC(p.t.d.rc, DLOCK_ECLOSED);
    CHECK_EQ(left, 1);
  }
  void *v = NULL;
  size_t len = 0;
  while (dlock_queue_poll(qb, 0, &v, &len) == 0)
    dlock_queue_value_free(v);
  dlock_queue_free(qb);
  dlock_client_close(cb);
  dlock_loop_free(lp);
}

/* An event-loop client closed while a cancelled poll's value goes back
 * to the queue: the value is never lost. The server resumes during the
 * close: the give-back is sent again and the value is in the queue, once,
 * the poll DLOCK_ECLOSED. It does not (the give-back fails): the value is
 * the poll's (rc 0 and the value), not dropped. So it is when the
 * give-back fails with no close (its command timeout). */
static void t_etcd_async_queue_close(void) {
  TH_ETCD_SETUP(s);
  back_at_close(&s, RESUMES);
  back_at_close(&s, PAUSED);
  back_at_close(&s, NO_CLOSE);
  th_etcd_stop(&s);
}

/* One try of t_etcd_async_queue_close_takes on s: the checks, and in
 * *backs the txns sent within the close (its give-backs: the window
 * caught; 0 when every take that got a value was read before it). */
static void takes_at_close(const th_etcd *s, long long *backs) {
  enum { N = 16, V = 24 };
  *backs = -1;
  dlock_loop *lp;
  dlock_client *c, *cb;
  dlock_queue *q, *qb;
  CHECK(queue_pair(s->url, "aqt", false, &lp, &c, &cb, &q, &qb));
  char v[8];
  for (int i = 0; i < V; i++) {
    snprintf(v, sizeof v, "v%02d", i);
    CHECK_RC(dlock_queue_offer(qb, v, 3), 0);
  }
  qdone p[N];
  memset(p, 0, sizeof p);
  long long txns = th_etcd_started(s, "Txn");
  for (int i = 0; i < N; i++)
    CHECK_RC((i % 2 ? dlock_queue_poll_last_async : dlock_queue_poll_async)(
                 q, 10000, &p[i].v, &p[i].len, on_tdone, &p[i].t, NULL),
             0);
  /* Their looks and half of them their takes sent; then every call the
   * server started answered there, the answers left unread. */
  CHECK(run_until_started(lp, s, "Txn", txns, N + N / 2));
  long long sent = th_etcd_started(s, "Txn");
  for (int64_t end = th_now_ms() + th_soon(2000) * th_slowdown();
       th_etcd_handled(s, "Txn") < sent && th_now_ms() < end;)
    th_sleep_ms(1);
  CHECK(th_etcd_handled(s, "Txn") >= sent);
  int before = 0;
  for (int i = 0; i < N; i++)
    before += p[i].t.d.calls;
  int64_t t0 = th_now_ms();
  dlock_queue_free(q);
  dlock_client_close(c);
  int64_t took = th_now_ms() - t0;
  *backs = th_etcd_started(s, "Txn") - sent;
  int seen[V] = {0}, polled = 0, left = 0;
  for (int i = 0; i < N; i++) {
    CHECK_EQ(p[i].t.d.calls, 1);
    if (p[i].t.d.rc != 0) {
      CHECK_RC(p[i].t.d.rc, DLOCK_ECLOSED);
      continue;
    }
    int k = -1;
    CHECK(p[i].len == 3 && sscanf(p[i].v, "v%d", &k) == 1 && k >= 0 && k < V);
    if (k >= 0 && k < V) seen[k]++;
    polled++;
    dlock_queue_value_free(p[i].v);
  }
  void *got = NULL;
  size_t len = 0;
  while (dlock_queue_poll(qb, 0, &got, &len) == 0) {
    int k = -1;
    CHECK(len == 3 && sscanf(got, "v%d", &k) == 1 && k >= 0 && k < V);
    if (k >= 0 && k < V) seen[k]++;
    left++;
    dlock_queue_value_free(got);
  }
  fprintf(stderr,
          "    closed in %lld ms (%lld txns within): %d polls ended before, "
          "%d with a value, %d values left of %d\n",
          (long long)took, *backs, before, polled, left, V);
  for (int k = 0; k < V; k++) {
    if (seen[k] != 1) fprintf(stderr, "    v%02d seen %d times\n", k, seen[k]);
    CHECK_EQ(seen[k], 1);
  }
  dlock_queue_free(qb);
  dlock_client_close(cb);
  dlock_loop_free(lp);
}

/* An event-loop client closed while its polls' takes are answered by the
 * server but not yet read (the loop not run since they went): the close
 * waits for each take's answer and puts a value taken back where it was
 * taken from, so every value offered is a poll's (rc 0) or still in the
 * queue, once: none lost, none twice. Half the polls take from each end,
 * so that a take of the head and one of the tail are in flight. The
 * window is found from outside (the server's counts): a try whose takes
 * were all read before the close (no give-back within it) is made again,
 * up to 3 times. */
static void t_etcd_async_queue_close_takes(void) {
  TH_ETCD_SETUP(s);
  long long backs = 0;
  for (int tries = 0; tries < 3 && backs == 0; tries++)
    takes_at_close(&s, &backs);
  CHECK(backs > 0);
  th_etcd_stop(&s);
}

/* An event-loop client's scan (list, status) is a range a page on its
 * loop's multi handle: N scans in flight start no thread (each was a
 * thread of its own), each passes the names the blocking client's does,
 * on the loop's thread, and stops when its callback says so; the
 * client's close ends those still in flight, each told once. */
static void t_etcd_async_scan(void) {
  TH_NEED_ETCD();
  enum { N = 16, M = 4 };
  th_etcd s;
  CHECK_RC(th_etcd_start(&s), 0);
  dlock_loop *lp;
  dlock_lock *l[M];
  dlock_client *c, *cb;
  et_open_holding(&s, 0, "sc", M, &lp, l, &c);
  if (c == NULL) return;
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = s.url;
  CHECK_RC(dlock_client_open(&o, &cb), 0);
  scan_seen b = {.loop = pthread_self()};
  CHECK_RC(dlock_client_scan_locks(cb, "sc*", on_scanned, &b), M);
  CHECK_EQ(b.names, M);
  scan_seen sn[N];
  memset(sn, 0, sizeof sn);
  int before = et_tasks();
  for (int i = 0; i < N; i++) {
    sn[i].loop = pthread_self();
    CHECK_RC(dlock_client_scan_locks_async(c, "sc*", on_scanned, on_scan_end,
                                           &sn[i], NULL),
             0);
  }
  CHECK(few_threads(before, N, "scans"));
  for (int i = 0; i < N; i++)
    CHECK(et_run_all(lp, &sn[i].d, 1));
  for (int i = 0; i < N; i++) {
    CHECK_RC(sn[i].d.rc, M);
    CHECK_EQ(sn[i].names, M);
    CHECK(!sn[i].elsewhere);
  }
  /* Stopped by its callback after the first name. */
  memset(&sn[0], 0, sizeof sn[0]);
  sn[0].loop = pthread_self();
  sn[0].stop_after = 1;
  CHECK_RC(dlock_client_scan_locks_async(c, "sc*", on_scanned, on_scan_end,
                                         &sn[0], NULL),
           0);
  CHECK(et_run_all(lp, &sn[0].d, 1));
  CHECK_RC(sn[0].d.rc, 1);
  CHECK_EQ(sn[0].names, 1);
  /* A pattern matching none. */
  memset(&sn[1], 0, sizeof sn[1]);
  sn[1].loop = pthread_self();
  CHECK_RC(dlock_client_scan_locks_async(c, "none*", on_scanned, on_scan_end,
                                         &sn[1], NULL),
           0);
  CHECK(et_run_all(lp, &sn[1].d, 1));
  CHECK_RC(sn[1].d.rc, 0);
  CHECK_EQ(et_tasks(), before);
  /* Closed with scans in flight: each told once. */
  memset(sn, 0, sizeof sn);
  for (int i = 0; i < N; i++) {
    sn[i].loop = pthread_self();
    CHECK_RC(dlock_client_scan_locks_async(c, "sc*", on_scanned, on_scan_end,
                                           &sn[i], NULL),
             0);
  }
  for (int i = 0; i < M; i++)
    dlock_lock_free(l[i]);
  dlock_client_close(c);
  for (int i = 0; i < N; i++)
    CHECK(et_run_all(lp, &sn[i].d, 1));
  for (int i = 0; i < N; i++) {
    CHECK(sn[i].d.rc == M || sn[i].d.rc == DLOCK_ECLOSED);
    CHECK_EQ(sn[i].d.calls, 1);
  }
  dlock_loop_free(lp);
  dlock_client_close(cb);
  th_etcd_stop(&s);
}

/* et_open_holding's (no watchdog timeout of its own), and a blocking client
 * of s (*bc) whose answers the event-loop client's are held to; *c NULL
 * if something failed (CHECKed). */
static void open_twins(const th_etcd *s, const char *prefix, int n,
                       dlock_loop **lp, dlock_lock **l, dlock_client **c,
                       dlock_client **bc) {
  et_open_holding(s, 0, prefix, n, lp, l, c);
  if (*c == NULL) return;
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = s->url;
  int rc = dlock_client_open(&o, bc);
  CHECK_RC(rc, 0);
  if (rc != 0) *c = NULL;
}

/* Frees the n locks l and closes what open_twins opened, and s. */
static void close_twins(th_etcd *s, dlock_loop *lp, dlock_lock **l, int n,
                        dlock_client *c, dlock_client *bc) {
  for (int i = 0; i < n; i++)
    dlock_lock_free(l[i]);
  dlock_client_close(bc);
  dlock_client_close(c);
  dlock_loop_free(lp);
  th_etcd_stop(s);
}

/* Runs lp until the n operations in f are done (10 s at most). */
static bool run_tdones(dlock_loop *lp, const tdone *f, int n) {
  bool all = true;
  for (int i = 0; i < n && all; i++)
    all = et_run_all(lp, &f[i].d, 1);
  return all;
}

/* An event-loop client's fenced writes, reads and deletes run on its
 * loop's multi handle: N in flight start no thread (each was a thread of
 * its own), and end as the blocking client's: a write with the hold's
 * token accepted, one with an older token refused (the fence the
 * higher), a held write after the hold's key is gone refused, a lock's
 * key not a fenced resource. */
static void t_etcd_async_fence(void) {
  TH_NEED_ETCD();
  enum { N = 16 };
  th_etcd s;
  CHECK_RC(th_etcd_start(&s), 0);
  dlock_loop *lp;
  dlock_lock *l[N];
  dlock_client *c, *bc;
  open_twins(&s, "fn", N, &lp, l, &c, &bc);
  if (c == NULL) return;
  tdone f[N];
  char res[N][16], val[N][16];
  void *v;
  size_t len;
  uint64_t fence;
  /* Held writes, all in flight: each fence the hold's token. */
  memset(f, 0, sizeof f);
  int before = et_tasks();
  for (int i = 0; i < N; i++) {
    snprintf(res[i], sizeof res[i], "fr%d", i);
    snprintf(val[i], sizeof val[i], "held%d", i);
    CHECK_RC(dlock_fence_set_held_async(l[i], res[i], val[i], strlen(val[i]),
                                        on_tdone, &f[i], NULL),
             0);
  }
  CHECK(few_threads(before, N, "held fenced writes"));
  CHECK(run_tdones(lp, f, N));
  uint64_t tok[N];
  for (int i = 0; i < N; i++) {
    CHECK_RC(f[i].d.rc, 0);
    tok[i] = f[i].token;
    CHECK(tok[i] > 0);
    CHECK_RC(dlock_fence_get(bc, res[i], &v, &len, &fence), 1);
    CHECK(len == strlen(val[i]) && memcmp(v, val[i], len) == 0);
    CHECK_EQ(fence, tok[i]);
    dlock_fence_value_free(v);
  }
  /* An older token: refused, as the blocking client's. */
  memset(f, 0, sizeof f);
  before = et_tasks();
  for (int i = 0; i < N; i++)
    CHECK_RC(dlock_fence_set_async(c, res[i], "old", 3, tok[i] - 1, on_tdone,
                                   &f[i], NULL),
             0);
  CHECK(few_threads(before, N, "stale fenced writes"));
  CHECK(run_tdones(lp, f, N));
  for (int i = 0; i < N; i++) {
    CHECK_RC(f[i].d.rc, DLOCK_ESTALE);
    CHECK_EQ(f[i].token, tok[i]);
    CHECK_RC(dlock_fence_set(bc, res[i], "old", 3, tok[i] - 1), DLOCK_ESTALE);
  }
  /* The current token: written; read back on the loop as blocking. */
  memset(f, 0, sizeof f);
  for (int i = 0; i < N; i++)
    CHECK_RC(dlock_fence_set_async(c, res[i], "cur", 3, tok[i], on_tdone, &f[i],
                                   NULL),
             0);
  CHECK(run_tdones(lp, f, N));
  void *av[N];
  size_t alen[N];
  uint64_t afence[N];
  for (int i = 0; i < N; i++)
    CHECK_RC(f[i].d.rc, 0);
  memset(f, 0, sizeof f);
  before = et_tasks();
  for (int i = 0; i < N; i++)
    CHECK_RC(dlock_fence_get_async(c, res[i], &av[i], &alen[i], &afence[i],
                                   on_tdone, &f[i], NULL),
             0);
  CHECK(few_threads(before, N, "fenced reads"));
  CHECK(run_tdones(lp, f, N));
  for (int i = 0; i < N; i++) {
    CHECK_RC(f[i].d.rc, 1);
    CHECK_RC(dlock_fence_get(bc, res[i], &v, &len, &fence), 1);
    CHECK(alen[i] == 3 && len == 3 && memcmp(av[i], "cur", 3) == 0 &&
          memcmp(v, "cur", 3) == 0);
    CHECK_EQ(afence[i], tok[i]);
    CHECK_EQ(fence, tok[i]);
    dlock_fence_value_free(av[i]);
    dlock_fence_value_free(v);
  }
  /* A lock's name is not a fenced resource: refused by both. */
  memset(f, 0, sizeof f);
  CHECK_RC(dlock_fence_set_async(c, "fn1", "x", 1, 1, on_tdone, &f[0], NULL),
           0);
  CHECK(run_tdones(lp, f, 1));
  CHECK_RC(f[0].d.rc, DLOCK_EWRONGTYPE);
  CHECK_RC(dlock_fence_set(bc, "fn1", "x", 1, 1), DLOCK_EWRONGTYPE);
  /* The hold's key deleted from outside: the held write refused. */
  char buf[512];
  th_etcd_ctl(&s, "del --prefix fn0/", buf, sizeof buf);
  memset(f, 0, sizeof f);
  CHECK_RC(dlock_fence_set_held_async(l[0], res[0], "late", 4, on_tdone, &f[0],
                                      NULL),
           0);
  CHECK(run_tdones(lp, f, 1));
  CHECK_RC(f[0].d.rc, DLOCK_ELOST);
  CHECK_RC(dlock_fence_get(bc, res[0], &v, &len, &fence), 1);
  CHECK(len == 3 && memcmp(v, "cur", 3) == 0);
  dlock_fence_value_free(v);
  /* Deletes: 1, then none there for either client. */
  memset(f, 0, sizeof f);
  before = et_tasks();
  for (int i = 0; i < N; i++)
    CHECK_RC(dlock_fence_del_async(c, res[i], on_tdone, &f[i], NULL), 0);
  CHECK(few_threads(before, N, "fenced deletes"));
  CHECK(run_tdones(lp, f, N));
  for (int i = 0; i < N; i++) {
    CHECK_RC(f[i].d.rc, 1);
    CHECK_RC(dlock_fence_get(bc, res[i], NULL, NULL, NULL), 0);
    CHECK_RC(dlock_fence_del(bc, res[i]), 0);
  }
  close_twins(&s, lp, l, N, c, bc);
}

/* Whether the snapshots a (the event-loop client's) and b (the blocking
 * client's) of one name agree (the lease's time left within 2 s). */
static bool same_state(const dlock_lock_state *a, const dlock_lock_state *b) {
  bool same = a->held == b->held && a->holders == b->holders &&
              strcmp(a->owner, b->owner) == 0 &&
              a->hold_count == b->hold_count && strcmp(a->info, b->info) == 0 &&
              a->token == b->token && a->waiters == b->waiters &&
              strcmp(a->mode, b->mode) == 0 && a->readers == b->readers &&
              a->queued == b->queued && a->counter == b->counter &&
              a->permits_taken == b->permits_taken &&
              strcmp(a->type, b->type) == 0 &&
              (a->ttl_ms == b->ttl_ms ||
               (a->ttl_ms > 0 && b->ttl_ms > 0 &&
                llabs((long long)(a->ttl_ms - b->ttl_ms)) < 2000));
  if (!same)
    fprintf(stderr,
            "    differ: held %d/%d owner %s/%s token %llu/%llu ttl %lld/%lld "
            "counter %lld/%lld taken %d/%d type %s/%s\n",
            a->held, b->held, a->owner, b->owner, (unsigned long long)a->token,
            (unsigned long long)b->token, (long long)a->ttl_ms,
            (long long)b->ttl_ms, (long long)a->counter, (long long)b->counter,
            a->permits_taken, b->permits_taken, a->type, b->type);
  return same;
}

/* An event-loop client's inspect runs on its loop's multi handle: N in
 * flight start no thread (each was a thread of its own), and each
 * snapshot is the blocking client's: a held lock's (its holder, token
 * and lease), a free one's, a counting semaphore's, a permit-expirable
 * semaphore's and a latch's. */
static void t_etcd_async_inspect(void) {
  TH_NEED_ETCD();
  enum { N = 16, M = N + 4 };
  th_etcd s;
  CHECK_RC(th_etcd_start(&s), 0);
  dlock_loop *lp;
  dlock_lock *l[M];
  dlock_client *c, *bc;
  open_twins(&s, "in", N, &lp, l, &c, &bc);
  if (c == NULL) return;
  dlock_semaphore *sem;
  CHECK_RC(dlock_semaphore_new(bc, "isem", &sem), 0);
  CHECK_EQ(dlock_semaphore_try_set_permits(sem, 3), 1);
  CHECK_RC(dlock_semaphore_try_acquire(sem, 1, 0), 0);
  dlock_permits *pm;
  char id[DLOCK_PERMIT_ID_LEN];
  CHECK_RC(dlock_permits_new(bc, "iperm", &pm), 0);
  CHECK_EQ(dlock_permits_try_set(pm, 2), 1);
  CHECK_RC(dlock_permits_try_acquire(pm, 0, 0, id), 0);
  dlock_latch *la;
  CHECK_RC(dlock_latch_new(bc, "ilatch", &la), 0);
  CHECK_EQ(dlock_latch_try_set_count(la, 5), 1);
  const char *other[] = {"ifree", "isem", "iperm", "ilatch"};
  for (int i = N; i < M; i++)
    CHECK_RC(dlock_lock_new(c, other[i - N], NULL, &l[i]), 0);
  dlock_lock_state st[M], bst;
  et_adone d[M];
  memset(d, 0, sizeof d);
  int before = et_tasks();
  for (int i = 0; i < M; i++)
    CHECK_RC(dlock_lock_inspect_async(l[i], &st[i], et_on_adone, &d[i], NULL),
             0);
  CHECK(few_threads(before, M, "inspects"));
  CHECK(et_run_all(lp, d, M));
  char name[32];
  for (int i = 0; i < M; i++) {
    CHECK_RC(d[i].rc, 0);
    snprintf(name, sizeof name, "in%d", i);
    dlock_lock *bl;
    CHECK_RC(dlock_lock_new(bc, i < N ? name : other[i - N], NULL, &bl), 0);
    CHECK_RC(dlock_lock_inspect(bl, &bst), 0);
    CHECK(same_state(&st[i], &bst));
    dlock_lock_free(bl);
  }
  for (int i = 0; i < N; i++)
    CHECK(st[i].held == 1 && st[i].token > 0 && st[i].ttl_ms > 0 &&
          st[i].ttl_ms <= 30000 && strcmp(st[i].type, "keys") == 0);
  CHECK(st[N].held == 0 && strcmp(st[N].type, "none") == 0 &&
        st[N].counter == -1);
  CHECK_EQ(st[N + 1].counter, 2);
  CHECK(st[N + 2].counter == 1 && st[N + 2].permits_taken == 1);
  CHECK(st[N + 3].counter == 5 && strcmp(st[N + 3].type, "latch") == 0);
  dlock_semaphore_free(sem);
  dlock_permits_free(pm);
  dlock_latch_free(la);
  close_twins(&s, lp, l, M, c, bc);
}

/* A waiting semaphore acquire cancelled while its look at the line is
 * out (another waiter before it) ends at once: the look's answer does
 * not start its watch (it did, and the cancel waited for the place
 * before it, a third of the lease or the deadline: 4.8 s here). */
static void t_etcd_async_sem_cancel_look(void) {
  TH_ETCD_SETUP(s);
  dlock_loop *lp;
  dlock_client *c, *cb;
  CHECK(loop_and_blocking(s.url, &lp, &c, &cb));
  dlock_semaphore *sa, *sb;
  CHECK_RC(dlock_semaphore_new(c, "scl", &sa), 0);
  CHECK_RC(dlock_semaphore_new(cb, "scl", &sb), 0);
  CHECK_RC(dlock_semaphore_try_set_permits(sb, 0), 1);
  tdone t[2];
  memset(t, 0, sizeof t);
  dlock_op *op[2];
  long long txns = th_etcd_started(&s, "Txn");
  CHECK_RC(dlock_semaphore_acquire_async(sa, 1, 5000, on_tdone, &t[0], &op[0]),
           0);
  CHECK(run_until_started(lp, &s, "Txn", txns, 2)); /* A's place, its look */
  run_for(lp, 100);                                 /* A watching */
  txns = th_etcd_started(&s, "Txn");
  CHECK_RC(dlock_semaphore_acquire_async(sa, 1, 5000, on_tdone, &t[1], &op[1]),
           0);
  CHECK(run_until_started(lp, &s, "Txn", txns, 2)); /* B's place, its look */
  int64_t t0 = th_now_ms();
  dlock_op_cancel(op[1]);
  CHECK(run_one(lp, &t[1]));
  fprintf(stderr, "    cancelled during its look: %s after %lld ms\n",
          dlock_err_name(t[1].d.rc), (long long)(t[1].at - t0));
  CHECK_RC(t[1].d.rc, DLOCK_ECANCELED);
  CHECK(t[1].at - t0 < th_soon(200));
  dlock_op_cancel(op[0]);
  CHECK(run_one(lp, &t[0]));
  CHECK_RC(t[0].d.rc, DLOCK_ECANCELED);
  dlock_semaphore_free(sa);
  dlock_semaphore_free(sb);
  dlock_client_close(c);
  dlock_client_close(cb);
  dlock_loop_free(lp);
  th_etcd_stop(&s);
}

/* Runs lp until each of the n locks in l is reported lost (th_soon(8000)
 * at most). */
static bool run_until_lost(dlock_loop *lp, dlock_lock **l, int n) {
  for (int64_t end = th_now_ms() + th_soon(8000); th_now_ms() < end;) {
    int lost = 0;
    for (int i = 0; i < n; i++)
      lost += dlock_lock_is_lost(l[i]) == 1;
    if (lost == n) return true;
    dlock_loop_run(lp, 10);
  }
  return false;
}

/* An event-loop acquire whose owner has a stale hold of the name (the
 * server paused past the watchdog's timeout: reported lost, not released)
 * clears it on the loop as the blocking claim does, with no thread: the
 * old key deleted at its revision, a fixed lease of its own revoked; then
 * it takes the lock afresh, one key each. */
static void t_etcd_async_stale(void) {
  TH_NEED_ETCD();
  enum { N = 8 };
  th_etcd s;
  CHECK_RC(th_etcd_start(&s), 0);
  dlock_loop *lp;
  dlock_lock *l[N + 1];
  et_adone d[N + 1];
  dlock_client *c;
  et_open_holding(&s, 2000, "st", N, &lp, l, &c);
  if (c == NULL) return;
  /* One more on a fixed lease of its own. */
  CHECK_RC(dlock_lock_new(c, "stf", NULL, &l[N]), 0);
  memset(d, 0, sizeof d);
  CHECK_RC(dlock_lock_acquire_async(l[N], 0, 2500, et_on_adone, &d[N], NULL),
           0);
  CHECK(et_run_all(lp, d + N, 1));
  CHECK_RC(d[N].rc, 0);
  th_etcd_kill(&s, SIGSTOP);
  bool lost = run_until_lost(lp, l, N + 1);
  th_etcd_kill(&s, SIGCONT);
  CHECK(lost);
  int before = et_tasks();
  long long revokes = th_etcd_started(&s, "LeaseRevoke");
  memset(d, 0, sizeof d);
  for (int i = 0; i <= N; i++)
    CHECK_RC(dlock_lock_acquire_async(l[i], 5000, i == N ? 2500 : 0,
                                      et_on_adone, &d[i], NULL),
             0);
  int most = before, left = N + 1;
  for (int64_t end = th_now_ms() + th_soon(10000); left && th_now_ms() < end;) {
    int m = et_run_sampled(lp, 5);
    if (m > most) most = m;
    left = 0;
    for (int i = 0; i <= N; i++)
      left += d[i].calls == 0;
  }
  CHECK_EQ(left, 0);
  fprintf(stderr,
          "    threads: %d before %d acquires past a stale hold, at "
          "most %d as they ran\n",
          before, N + 1, most);
  CHECK_EQ(most, before);
  for (int i = 0; i <= N; i++) {
    CHECK_RC(d[i].rc, 0);
    CHECK_EQ(dlock_lock_is_lost(l[i]), 0);
  }
  CHECK_EQ(th_etcd_started(&s, "LeaseRevoke") - revokes, 1); /* stf's */
  CHECK_EQ(et_keys_under(&s, "st"), N + 1);
  memset(d, 0, sizeof d);
  for (int i = 0; i <= N; i++)
    CHECK_RC(dlock_lock_release_async(l[i], et_on_adone, &d[i], NULL), 0);
  CHECK(et_run_all(lp, d, N + 1));
  for (int i = 0; i <= N; i++) {
    CHECK_RC(d[i].rc, 1);
    dlock_lock_free(l[i]);
  }
  CHECK_EQ(et_keys_under(&s, "st"), 0);
  dlock_client_close(c);
  dlock_loop_free(lp);
  th_etcd_stop(&s);
}

TH_MAIN(T_BARE(t_etcd_async_nothread), T_BARE(t_etcd_async_acquire),
        T_BARE(t_etcd_async_rw), T_BARE(t_etcd_async_fair),
        T_BARE(t_etcd_async_owners), T_BARE(t_etcd_async_latch),
        T_BARE(t_etcd_async_sem), T_BARE(t_etcd_async_sem_wait),
        T_BARE(t_etcd_async_permits_wait), T_BARE(t_etcd_async_permits),
        T_BARE(t_etcd_async_queue), T_BARE(t_etcd_async_delayed),
        T_BARE(t_etcd_async_reliable), T_BARE(t_etcd_async_reliable_close),
        T_BARE(t_etcd_async_queue_close),
        T_BARE(t_etcd_async_queue_close_takes),
        T_BARE(t_etcd_async_sem_cancel_look), T_BARE(t_etcd_async_fence),
        T_BARE(t_etcd_async_inspect), T_BARE(t_etcd_async_scan),
        T_BARE(t_etcd_async_stale), T_BARE(t_etcd_async_restart),
        T_BARE(t_etcd_async_ride_answered))
#else
static void t_etcd_none(void) {
  fprintf(stderr, "    skipped: no etcd backend or server here\n");
}
TH_MAIN(T_BARE(t_etcd_none))
#endif
