/* waiters.c: waiting on the lock kinds, blocking form: a waiter killed
 * while it waits leaves nothing that blocks the next holder, and where the
 * kind is fair (and on zk://, whose mutex queues) waiters are served in
 * their order of arrival. */
#include "conformance.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define FOR_KINDS(k)                                                           \
  for (int k##_i = 0; k##_i < 5; k##_i++)                                      \
    for (dl_feature k = cf_lock_kinds[k##_i]; cf_has(k); k = DL_FEAT_COUNT)

/* Waits for n waiters to show on l: whether they did. Where waiters leave
 * no trace (they retry, redlock://) it gives up after half a second,
 * scaled (and the test shows less). */
static bool await_waiters(dlock_lock *l, int n) {
  if (!cf_has(DL_FEAT_WAIT_NOTIFY)) {
    cf_waiters_reach(l, n, 500);
    return true;
  }
  return cf_waiters_reach(l, n, 1000);
}

/* How long a killed waiter's session lasts on a backend without leases
 * (zk://: its queue node goes with its session). */
#define WAITER_SESSION_MS (1000 * cf_slowdown())
static int64_t waiter_session_ms(void) {
  return WAITER_SESSION_MS > cf_lease_floor_ms() ? WAITER_SESSION_MS
                                                 : cf_lease_floor_ms();
}

/* The waiter's process, forked before the test opens its clients (a
 * process with threads forks none: ThreadSanitizer cannot follow it): it
 * waits for a byte on fd, then waits for the lock with no limit, until
 * killed. */
static pid_t fork_waiter(dl_feature k, const char *name, const char *cname,
                         int *go) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[1]);
    char byte;
    if (read(fds[0], &byte, 1) != 1) _exit(2);
    dlock_client_options o;
    cf_options(&o, 0);
    o.zk_session_timeout_ms = (int)waiter_session_ms();
    o.client_name = cname;
    o.watchdog_timeout_ms = waiter_session_ms(); /* etcd: the session lease */
    dlock_client *c = th_client_opts(&o);
    cf_lock w;
    if (c && cf_lock_new(c, k, name, "waiter", &w) == 0)
      /* etcd: a fixed lease is the key's own lease, from the queue on. */
      dlock_lock_acquire(
          w.l, cf_waiters_by_session() ? waiter_session_ms() : 10000, NULL);
    _exit(1); /* never here: it waits */
  }
  close(fds[0]);
  *go = fds[1];
  return pid;
}

static void t_killed_waiter(void) {
  CF_NEEDS_SERVER();
  FOR_KINDS(k) {
    char name[64];
    cf_name(name, sizeof name, dl_feature_name(k));
    char cname[32];
    snprintf(cname, sizeof cname, "cf-waiter-%d-%d", (int)getpid(), k_i);
    int go = -1;
    pid_t pid = fork_waiter(k, name, cname, &go);
    CHECK(pid > 0);
    dlock_client *a = cf_client(0), *b = cf_client(0);
    CHECK(a && b);
    cf_lock h, next;
    CHECK_RC(cf_lock_new(a, cf_rival(k), name, "holder", &h), 0);
    CHECK_RC(cf_lock_new(b, k, name, "next", &next), 0);
    CHECK_RC(dlock_lock_try_acquire(h.l, 0, 10000, NULL), 0);
    CHECK(write(go, "g", 1) == 1);
    close(go);
    bool shown = await_waiters(h.l, 1);
    int st = 0;
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    CHECK(WIFSIGNALED(st)); /* it was waiting */
    CHECK(shown);
    /* The release goes once the servers have seen the waiter's end (and
     * so served every request it sent). Before, an attempt it sent just
     * before it died could be served after the release (a busy server may
     * serve data that came together on two connections in either order)
     * and take the free lock for the dead waiter's lease, as a live
     * waiter's would: a non-guarantee, docs/SAFETY.md. */
    CHECK(cf_server_forgot(cname, 3000));
    CHECK_EQ(dlock_lock_release(h.l), 1);
    /* A fair lock's dead waiter is skipped once it is stale; a waiter's
     * node on zk:// goes with its session, its key on etcd:// with its
     * lease. */
    int64_t limit = cf_waiters_by_session()
                        ? 2 * waiter_session_ms() + CF_CMD_MS
                    : k == DL_FEAT_FAIR ? CF_FAIR_STALE_MS + CF_CMD_MS
                                        : CF_CMD_MS;
    int64_t t0 = th_now_ms();
    int rc = dlock_lock_try_acquire(next.l, limit, 10000, NULL);
    int64_t took = th_now_ms() - t0;
    fprintf(stderr, "    %s: the next holder %s after %lld ms\n",
            dl_feature_name(k), dlock_err_name(rc), (long long)took);
    CHECK_RC(rc, 0);
    if (rc == 0) CHECK_EQ(dlock_lock_release(next.l), 1);
    cf_lock_free(&h);
    cf_lock_free(&next);
    dlock_client_close(a);
    dlock_client_close(b);
  }
}

/* ---- order ---- */
enum { NWAIT = 3 };
typedef struct in_line {
  dlock_lock *l;
  _Atomic int *served; /* the next place handed out */
  int place;           /* this waiter's */
} in_line;

static int wait_in_line(void *arg) {
  in_line *w = arg;
  int rc = dlock_lock_try_acquire(w->l, 10000, 10000, NULL);
  if (rc != 0) return rc;
  w->place = atomic_fetch_add(w->served, 1);
  return dlock_lock_release(w->l) == 1 ? 0 : -1;
}

static void t_fair_order(void) {
  CF_NEEDS_SERVER();
  /* The fair lock's promise; zk://'s mutex queues in order too. */
  dl_feature k = DL_FEAT_FAIR;
  if (!cf_has(k)) return;
  dlock_client *a = cf_client(0), *b = cf_client(0);
  CHECK(a && b);
  char name[64];
  cf_name(name, sizeof name, "order");
  cf_lock h, w[NWAIT];
  CHECK_RC(cf_lock_new(a, k, name, "holder", &h), 0);
  CHECK_RC(dlock_lock_try_acquire(h.l, 0, 10000, NULL), 0);
  _Atomic int served = 0;
  in_line line[NWAIT];
  cf_bg bg[NWAIT];
  for (int i = 0; i < NWAIT; i++) {
    char owner[16];
    snprintf(owner, sizeof owner, "w%d", i);
    CHECK_RC(cf_lock_new(b, k, name, owner, &w[i]), 0);
    line[i] = (in_line){w[i].l, &served, -1};
    CHECK(cf_bg_start(&bg[i], wait_in_line, &line[i]) == 0);
    /* The next comes once this one is in the queue. */
    CHECK(cf_waiters_reach(h.l, i + 1, 5000));
  }
  CHECK_EQ(dlock_lock_release(h.l), 1);
  for (int i = 0; i < NWAIT; i++)
    cf_bg_join(&bg[i]);
  for (int i = 0; i < NWAIT; i++) {
    fprintf(stderr, "    waiter %d (arrived %d) served %d\n", i, i,
            line[i].place);
    CHECK_RC(bg[i].rc, 0);
    CHECK_EQ(line[i].place, i);
    cf_lock_free(&w[i]);
  }
  cf_lock_free(&h);
  dlock_client_close(a);
  dlock_client_close(b);
}

/* ---- a waiter whose client shuts down ---- */
static int wait_no_limit(void *arg) {
  return dlock_lock_acquire((dlock_lock *)arg, 10000, NULL);
}
static int await_no_limit(void *arg) {
  return dlock_leader_try_await((dlock_leader *)arg, -1);
}

/* dlock_client_shutdown from another thread (as dlock run on SIGTERM)
 * ends a wait with no limit, DLOCK_ECLOSED (zk://, etcd://, redlock://:
 * at once; a Redis server's waiter at its next wake-up, here the
 * holder's release: dlock.h), and so an election's standby's; what they
 * queued is gone before the calls return (zk://'s nodes, etcd://'s keys):
 * the next client takes the lock, or leads, as soon as the holder lets
 * go, not when a session or lease ends. A call on the client after it:
 * DLOCK_ECLOSED. */
static void t_shutdown_waiter(void) {
  CF_NEEDS_SERVER();
  dlock_client *a = cf_client(3000), *b = cf_client(3000), *n = cf_client(3000);
  CHECK(a && b && n);
  char name[64], ename[64];
  cf_name(name, sizeof name, "shutdown");
  cf_name(ename, sizeof ename, "shutdown-el");
  bool elect = cf_has(DL_FEAT_ELECTION);
  /* Where a shutdown wakes no waiter: it ends at the release's message. */
  bool at_wakeup = CF_HERE("redis");
  dlock_lock *h, *w, *next;
  CHECK_RC(dlock_lock_new(a, name, "holder", &h), 0);
  CHECK_RC(dlock_lock_new(b, name, "waiter", &w), 0);
  CHECK_RC(dlock_lock_new(n, name, "next", &next), 0);
  CHECK_RC(dlock_lock_acquire(h, 0, NULL), 0); /* the watchdog's */
  dlock_leader *la = NULL, *lb = NULL, *ln = NULL;
  if (elect) {
    CHECK_RC(dlock_leader_new(a, ename, "a", &la), 0);
    CHECK_RC(dlock_leader_new(b, ename, "b", &lb), 0);
    CHECK_RC(dlock_leader_new(n, ename, "n", &ln), 0);
    CHECK_RC(dlock_leader_start(la), 0);
    CHECK_RC(dlock_leader_try_await(la, 5000), 0);
    CHECK_RC(dlock_leader_start(lb), 0);
  }
  cf_bg bw, be;
  CHECK(cf_bg_start(&bw, wait_no_limit, w) == 0);
  if (elect) CHECK(cf_bg_start(&be, await_no_limit, lb) == 0);
  CHECK(await_waiters(h, 1));
  int64_t t0 = th_now_ms();
  dlock_client_shutdown(b);
  if (at_wakeup) CHECK_EQ(dlock_lock_release(h), 1);
  cf_bg_join(&bw);
  if (elect) cf_bg_join(&be);
  int64_t took = bw.at - t0, etook = elect ? be.at - t0 : 0;
  fprintf(stderr,
          "    the waits ended %lld ms (lock), %lld ms (election) after "
          "the shutdown\n",
          (long long)took, (long long)etook);
  /* (A Redis waiter woken after the shutdown took the lock once: rc 0,
   * a hold nobody renews or releases.) */
  CHECK_RC(bw.rc, DLOCK_ECLOSED);
  CHECK(took <= 200 * cf_slowdown());
  if (elect) {
    /* (A Redis or Redlock standby, which takes turns on the lock from a
     * thread of its own, counted itself out at the close and answered
     * DLOCK_ELOST at times.) */
    CHECK_RC(be.rc, DLOCK_ECLOSED);
    /* (A Redis standby's turn ends at its next wake-up: its retry.) */
    CHECK(etook <= (at_wakeup ? CF_CMD_MS : 500 * cf_slowdown()));
  }
  CHECK_RC(dlock_lock_try_acquire(w, 0, 10000, NULL), DLOCK_ECLOSED);
  if (!at_wakeup) CHECK_EQ(dlock_lock_release(h), 1);
  if (bw.rc != 0) { /* (else the waiter's hold blocks it) */
    CHECK_RC(dlock_lock_try_acquire(next, 0, 10000, NULL), 0);
    CHECK_EQ(dlock_lock_release(next), 1);
  }
  if (elect) {
    CHECK_RC(dlock_leader_start(ln), 0);
    dlock_leader_free(la); /* the next in line is n, not b's standby */
    t0 = th_now_ms();
    CHECK_RC(dlock_leader_try_await(ln, 5000), 0);
    CHECK(th_now_ms() - t0 <= cf_wake_ms());
    dlock_leader_free(lb);
    dlock_leader_free(ln);
  }
  dlock_lock_free(w);
  dlock_lock_free(h);
  dlock_lock_free(next);
  dlock_client_close(a);
  dlock_client_close(b);
  dlock_client_close(n);
}

/* ---- a wait through its servers' stall ---- */
/* The waiters' command timeout, and the stall: longer than it (their
 * calls fail), shorter than what the deployment's own failure detection
 * acts on (a cluster's node timeout, 2 s; Sentinel's down-after, 1 s: the
 * sentinel kind runs in the normal build only, where the stall is 0.6 s)
 * and than a ZooKeeper session, so that no failover or session's end
 * comes into it (test_sentinel, test_cluster and test_zk have those). */
static int64_t stall_cmd_ms(void) {
  return 100 * cf_slowdown() < 400 ? 100 * cf_slowdown() : 400;
}
static int64_t stall_ms(void) {
  return 4 * stall_cmd_ms() > 600 ? 4 * stall_cmd_ms() : 600;
}

typedef struct try_arg {
  dlock_lock *l;
  int64_t wait_ms;
  char msg[160];
  dlock_client *c;
} try_arg;
static int try_for(void *arg) {
  try_arg *t = arg;
  int rc = dlock_lock_try_acquire(t->l, t->wait_ms, 10000, NULL);
  snprintf(t->msg, sizeof t->msg, "%s", rc ? dlock_client_errmsg(t->c) : "");
  return rc;
}

/* A waiting acquire rides out a stall of every server it uses (each
 * stopped longer than the waiter's command timeout: its calls fail, or on
 * zk:// wait), made as the wait starts: it ends with the lock once the
 * holder lets go after the stall, blocking and on the event loop, as
 * Redisson's retry attempts, Curator's retry loop and etcd's client do.
 * The control: an acquire without a wait, made in the same stall, fails
 * (on zk://, whose calls wait out a stall within the session, it ends
 * after it, refused by the holder). It asks for a lock of its own, held
 * by the holder too: its request, given up on, may still run when the
 * server resumes (docs/SAFETY.md, row 4c) and, on the waiter's lock, took
 * it once for its lease after the holder's release (rediss://, a
 * fresh-clone run). */
static void t_wait_rides_stall(void) {
  CF_NEEDS_SERVER();
  dlock_client_options o;
  cf_options(&o, 0);
  o.command_timeout_ms = (int)stall_cmd_ms();
  dlock_client *a = cf_client(0), *b = th_client_opts(&o),
               *ctl = th_client_opts(&o);
  dlock_loop *lp = NULL;
  dlock_client *ac = NULL;
  CHECK(a && b && ctl);
  CHECK_RC(dlock_loop_new(NULL, &lp), 0);
  CHECK_RC(dlock_client_open_async(&o, lp, &ac), 0);
  char name[64], aname[64], cname[64];
  cf_name(name, sizeof name, "stall");
  cf_name(aname, sizeof aname, "stall-async");
  cf_name(cname, sizeof cname, "stall-control");
  dlock_lock *h, *ha, *hc, *w, *c, *aw;
  CHECK_RC(dlock_lock_new(a, name, "holder", &h), 0);
  CHECK_RC(dlock_lock_new(a, aname, "holder", &ha), 0);
  CHECK_RC(dlock_lock_new(a, cname, "holder", &hc), 0);
  CHECK_RC(dlock_lock_new(b, name, "waiter", &w), 0);
  CHECK_RC(dlock_lock_new(ctl, cname, "control", &c), 0);
  CHECK_RC(dlock_lock_new(ac, aname, "waiter", &aw), 0);
  CHECK_RC(dlock_lock_try_acquire(h, 0, 10000, NULL), 0);
  CHECK_RC(dlock_lock_try_acquire(ha, 0, 10000, NULL), 0);
  CHECK_RC(dlock_lock_try_acquire(hc, 0, 10000, NULL), 0);
  /* From here to the resume, no CHECK (a CHECK returns). */
  int64_t wait_ms = 10000 * cf_slowdown();
  try_arg tw = {w, wait_ms, "", b}, tc = {c, 0, "", ctl};
  cf_bg bw, bc;
  cf_got got = {0};
  int stopped = th_deploy_pause(&cf_dep, true);
  int64_t t0 = th_now_ms();
  int sw = cf_bg_start(&bw, try_for, &tw);
  int sc = cf_bg_start(&bc, try_for, &tc);
  int sa = dlock_lock_acquire_async(aw, wait_ms, 10000, cf_done, &got, NULL);
  /* The event loop's acquire meets the stall too. */
  while (th_now_ms() - t0 < stall_ms())
    dlock_loop_run(lp, 10);
  int resumed = th_deploy_pause(&cf_dep, false);
  int64_t stall = th_now_ms() - t0;
  /* The holder lets go; the threads are joined before the first CHECK
   * (which returns: they write into this frame). */
  if (sc == 0) cf_bg_join(&bc);
  int early = got.calls; /* 0: the event loop's waiter still waits */
  int64_t r = th_now_ms();
  int rel = dlock_lock_release(h), rela = dlock_lock_release(ha);
  /* (The loop runs while the thread waits: the event loop's time is its
   * own.) */
  bool ran = sa == 0 && cf_run_until(lp, &got.calls, 5000);
  if (sw == 0) cf_bg_join(&bw);
  int relc = dlock_lock_release(hc);
  CHECK_EQ(resumed, stopped);
  CHECK(stopped > 0);
  CHECK(sw == 0 && sc == 0);
  CHECK_RC(sa, 0);
  fprintf(stderr,
          "    %d server(s) stopped for %lld ms (command timeout %lld ms); "
          "the control without a wait: %s after %lld ms (%s)\n",
          stopped, (long long)stall, (long long)stall_cmd_ms(),
          dlock_err_name(bc.rc), (long long)(bc.at - t0), tc.msg);
  CHECK(bc.rc != 0);
  CHECK(bc.rc != DLOCK_EBUSY || bc.at - t0 >= stall_ms());
  CHECK_EQ(early, 0);
  CHECK_EQ(rel, 1);
  CHECK_EQ(rela, 1);
  CHECK_EQ(relc, 1);
  fprintf(stderr,
          "    the waiters after the holder's release: blocking %s after "
          "%lld ms (%s), event loop %s after %lld ms\n",
          dlock_err_name(bw.rc), (long long)(bw.at - r), tw.msg,
          dlock_err_name(got.rc), (long long)(got.at - r));
  CHECK_WHY(bw.rc == 0, tw.msg);
  CHECK(bw.at >= r);
  CHECK(ran);
  CHECK_RC(got.rc, 0);
  CHECK(got.at >= r);
  CHECK_EQ(dlock_lock_release(w), 1);
  dlock_lock_free(h);
  dlock_lock_free(ha);
  dlock_lock_free(hc);
  dlock_lock_free(w);
  dlock_lock_free(c);
  dlock_lock_free(aw);
  dlock_client_close(ac);
  dlock_loop_free(lp);
  dlock_client_close(a);
  dlock_client_close(b);
  dlock_client_close(ctl);
}

const th_test cf_waiters_tests[] = {
    T_BARE(t_killed_waiter),
    T_BARE(t_fair_order),
    T_BARE(t_shutdown_waiter),
    T_BARE(t_wait_rides_stall),
};
const size_t cf_waiters_ntests =
    sizeof cf_waiters_tests / sizeof cf_waiters_tests[0];
