/* safety.c: the fault-injection suite. Each scenario starts its own
 * redis-server, a fenced resource (resource.c), worker processes (worker.c,
 * this same binary in another mode) and, for `dlock run`, the CLI; injects
 * one fault; then checks the resource's log. Every scenario runs with the
 * resource enforcing fencing tokens and again ignoring them: with tokens
 * there must be no accepted stale write and an exact count; without, a fault
 * that can break exclusion must show a violation (else the injection did not
 * work). docs/SAFETY.md maps each guarantee to its scenario here.
 *
 *   test_safety [--dlock PATH] [SCENARIO...]
 * PATH: the CLI its `dlock run` rows start (default: the one built beside
 * it). */
#include "../harness.h"
#include "client/client.h"
#include "proxy.h"
#include "redis/conns/conns.h"
#include "resource.h"
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

#define FAKETIME_LIB "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"
#define LEASE 600 /* the workers' watchdog lease, ms */
#define VICTIM 0  /* the victim's worker id */

static char self[PATH_MAX];
static const char *dlock_bin = DLOCK_CLI_PATH;
static char dir[64]; /* the resource socket and faketime files */
static th_redis srv;
static const char *lock_name;
static int64_t lease = LEASE;

/* ---- processes ---- */
typedef struct proc {
  pid_t pid;
  bool reaped;
  int status;
} proc;
static proc procs[64];
static int nprocs;
static bool clients_faketime;

static pid_t spawn(char *const argv[]) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (clients_faketime) {
      char file[128];
      snprintf(file, sizeof file, "%s/client.faketime", dir);
      setenv("LD_PRELOAD", FAKETIME_LIB, 1);
      setenv("FAKETIME_TIMESTAMP_FILE", file, 1);
      setenv("FAKETIME_NO_CACHE", "1", 1);
      setenv("FAKETIME_DONT_FAKE_MONOTONIC", "1", 1);
      setenv("DONT_FAKE_MONOTONIC", "1", 1);
    }
    execv(argv[0], argv);
    _exit(127);
  }
  if (nprocs < 64) procs[nprocs++] = (proc){pid, false, 0};
  return pid;
}

static proc *find_proc(pid_t pid) {
  for (int i = 0; i < nprocs; i++)
    if (procs[i].pid == pid) return &procs[i];
  return NULL;
}

/* Waits for pid until timeout; returns its status or -1. */
static int reap(pid_t pid, int timeout_ms) {
  proc *p = find_proc(pid);
  if (p && p->reaped) return p->status;
  int64_t end = th_now_ms() + timeout_ms;
  for (;;) {
    int st;
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) {
      if (p) {
        p->reaped = true;
        p->status = st;
      }
      return st;
    }
    if (r < 0 || th_now_ms() >= end) return -1;
    th_sleep_ms(2);
  }
}

static void kill_all(void) {
  for (int i = 0; i < nprocs; i++)
    if (!procs[i].reaped) {
      kill(procs[i].pid, SIGCONT);
      kill(procs[i].pid, SIGKILL);
      waitpid(procs[i].pid, NULL, 0);
    }
  nprocs = 0;
}

/* The next worker started connects here instead of to the server. */
static const char *next_url;
/* Every worker of the scenario connects here (a Redlock's), or NULL. */
static const char *scenario_url;
/* The workers' replica acknowledgement (min_replicas_acked), 0 none. */
static int replicas;
/* A Redlock scenario's servers; rl[0]'s wall clock can be stepped. */
#define RL_N 3
static th_redis rl[RL_N];
static char rl_url[512];
/* A Sentinel scenario's master, replica and sentinels. */
static th_sentinel_set sentinels;
static bool sentinels_up;
/* A Cluster scenario's three masters (and their replicas). */
static th_cluster cluster;
static bool cluster_up;
/* A ZooKeeper scenario's server, or ensemble of three (nzk of them), and
 * the workers' session timeout. */
static th_zk zks[3];
static int nzk;
static char zk_url[256];
static int zk_session_ms;
/* An etcd scenario's member, or cluster of three (netcd of them). */
static th_etcd etcds[3];
static int netcd;
static char etcd_url[256];

/* Stops whatever servers the scenario before started. */
static void stop_servers(void) {
  th_redis_stop(&srv);
  for (int i = 0; i < RL_N; i++)
    th_redis_stop(&rl[i]);
  if (sentinels_up) th_sentinel_stop(&sentinels);
  sentinels_up = false;
  if (cluster_up) th_cluster_stop(&cluster);
  cluster_up = false;
  for (int i = 0; i < nzk; i++)
    th_zk_stop(&zks[i]);
  nzk = 0;
  zk_session_ms = 0;
  for (int i = 0; i < netcd; i++)
    th_etcd_stop(&etcds[i]);
  netcd = 0;
  scenario_url = NULL;
  replicas = 0;
}
/* The lock kind every worker of the scenario takes ("lock", "fair",
 * "write": the write side of a read-write lock). */
static const char *kind = "lock";

static pid_t start_worker(int id, int threads, int hold_us,
                          const char *victim_hold_ms, const char *stall,
                          const char *fixed_lease_ms) {
  char *url = (char *)(next_url       ? next_url
                       : scenario_url ? scenario_url
                                      : srv.url);
  next_url = NULL;
  char sid[16], sth[16], shold[16], slease[24];
  snprintf(sid, sizeof sid, "%d", id);
  snprintf(sth, sizeof sth, "%d", threads);
  snprintf(shold, sizeof shold, "%d", hold_us);
  snprintf(slease, sizeof slease, "%lld", (long long)lease);
  char *argv[32] = {self,         "worker",
                    "--url",      url,
                    "--res",      (char *)res_path(),
                    "--name",     (char *)lock_name,
                    "--id",       sid,
                    "--threads",  sth,
                    "--hold-us",  shold,
                    "--lease-ms", slease};
  int n = 16;
  if (victim_hold_ms) {
    argv[n++] = "--victim-hold-ms";
    argv[n++] = (char *)victim_hold_ms;
  }
  if (stall) {
    argv[n++] = "--stall";
    argv[n++] = (char *)stall;
  }
  if (fixed_lease_ms) {
    argv[n++] = "--fixed-lease-ms";
    argv[n++] = (char *)fixed_lease_ms;
  }
  argv[n++] = "--kind";
  argv[n++] = (char *)kind;
  char sreplicas[16], ssession[16];
  if (replicas > 0) {
    snprintf(sreplicas, sizeof sreplicas, "%d", replicas);
    argv[n++] = "--replicas";
    argv[n++] = sreplicas;
  }
  if (zk_session_ms > 0) {
    snprintf(ssession, sizeof ssession, "%d", zk_session_ms);
    argv[n++] = "--zk-session-ms";
    argv[n++] = ssession;
  }
  argv[n] = NULL;
  return spawn(argv);
}

/* The victim under `dlock run`: its command reads, holds, writes, then
 * lingers for 10 s, so that only dlock can end it early. */
static pid_t start_cli_victim(const char *hold_ms) {
  char slease[24], sid[16];
  snprintf(slease, sizeof slease, "%lldms", (long long)lease);
  snprintf(sid, sizeof sid, "%d", VICTIM);
  char *argv[] = {(char *)dlock_bin,
                  "-u",
                  srv.url,
                  "-q",
                  "run",
                  "-l",
                  slease,
                  "--kill-grace",
                  "100ms",
                  (char *)lock_name,
                  "--",
                  self,
                  "cmd",
                  "--res",
                  (char *)res_path(),
                  "--id",
                  sid,
                  "--victim-hold-ms",
                  (char *)hold_ms,
                  "--after-ms",
                  "10000",
                  NULL};
  return spawn(argv);
}

static void start_others(int workers, int threads) {
  for (int i = 1; i <= workers; i++)
    start_worker(i, threads, 300, NULL, NULL, NULL);
}

static void write_file(const char *name, const char *text) {
  char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

/* Sets the offset of the server's wall clock (clockshift.c), in place: the
 * server has the file mapped. */
static void shift_server_clock(int64_t seconds) {
  char path[128];
  snprintf(path, sizeof path, "%s/server.clockshift", dir);
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0 || pwrite(fd, &seconds, sizeof seconds, 0) != sizeof seconds)
    fprintf(stderr, "cannot write %s\n", path);
  if (fd >= 0) close(fd);
}

/* A fresh server (with `extra` arguments, and a steppable wall clock if
 * asked) and a fresh resource. */
/* A new scenario: the last one's processes and servers gone. */
static void reset(const char *name, int64_t lease_ms) {
  kill_all();
  stop_servers();
  lock_name = name;
  lease = lease_ms;
  clients_faketime = false;
}

/* Starts r (with `extra` arguments) with a wall clock shift_server_clock
 * steps, set to 0. Returns th_redis_start's result. */
static int start_clocked(th_redis *r, const char *extra) {
  char file[128];
  snprintf(file, sizeof file, "%s/server.clockshift", dir);
  shift_server_clock(0);
  setenv("LD_PRELOAD", DLOCK_CLOCKSHIFT_LIB, 1);
  setenv("DLOCK_CLOCKSHIFT_FILE", file, 1);
  int rc = th_redis_start(r, extra);
  unsetenv("LD_PRELOAD");
  return rc;
}

static bool begin(const char *name, bool enforce, const char *extra,
                  bool server_clock) {
  reset(name, LEASE);
  int rc =
      server_clock ? start_clocked(&srv, extra) : th_redis_start(&srv, extra);
  res_reset(enforce);
  printf("    %s run\n", enforce ? "fenced " : "control");
  fflush(stdout);
  return rc == 0;
}

/* Lets the workers make `more` accepted writes after the fault (liveness),
 * stops them and checks every worker still counted exited 0. */
static bool finish(long more) {
  long target = res_accepted() + more;
  int64_t end = th_now_ms() + 15000;
  while (res_accepted() < target && th_now_ms() < end)
    th_sleep_ms(5);
  bool progressed = res_accepted() >= target;
  res_halt();
  bool ok = true;
  for (int i = 0; i < nprocs; i++) {
    if (procs[i].reaped) continue;
    /* Every process a scenario stopped it has continued. No SIGCONT here:
     * one landing while LeakSanitizer stops the world at exit hangs the
     * process (its tracer does not expect the signal). */
    int st = reap(procs[i].pid, 30000);
    if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "    worker %d: status %d\n", (int)procs[i].pid, st);
      ok = false;
    }
    if (st < 0) { /* stuck: where? (gdb, when there is one) */
      char cmd[200];
      snprintf(cmd, sizeof cmd,
               "grep -E 'State|TracerPid|Threads' /proc/%d/status >&2; "
               "command -v gdb >/dev/null && "
               "gdb -p %d -batch -ex 'thread apply all bt' 2>&1 | "
               "grep -E '^#|^Thread' >&2",
               (int)procs[i].pid, (int)procs[i].pid);
      if (system(cmd) != 0) fprintf(stderr, "    (no stack)\n");
    }
  }
  if (!progressed) fprintf(stderr, "    no progress after the fault\n");
  kill_all();
  return ok && progressed;
}

enum { OVERLAP_NONE, OVERLAP_SOME, OVERLAP_ANY };

/* The checkers. can_break: this fault can break exclusion (so the control
 * run must show a violation and the fenced run a rejected write). */
static void judge(bool enforce, bool can_break, int exclude, int overlap) {
  res_verdict v;
  res_verdict_get(exclude, &v);
  printf("      value %lld, accepted %ld, rejected %ld, stale accepted %ld, "
         "sections %zu, overlaps %d (%d without the victim), token errors "
         "%d\n",
         v.value, v.accepted, v.rejected, v.stale_accepted, v.sections,
         v.overlaps, v.overlaps_excluding, v.token_errors);
  fflush(stdout);
  res_verdict_explain(&v);
  CHECK_EQ(v.token_errors, 0);
  CHECK(v.sections >= 10);
  if (enforce || !can_break) {
    CHECK_EQ(v.stale_accepted, 0);
    CHECK_EQ(v.value, v.accepted);
  }
  if (enforce && can_break) CHECK(v.rejected >= 1);
  if (!enforce && can_break)
    CHECK(v.stale_accepted >= 1 && v.value != v.accepted);
  if (!can_break) CHECK_EQ(v.rejected, 0);
  if (exclude >= 0) CHECK_EQ(v.overlaps_excluding, 0);
  if (overlap == OVERLAP_NONE) CHECK_EQ(v.overlaps, 0);
  if (overlap == OVERLAP_SOME) CHECK(v.overlaps >= 1);
}

static void expect_victim(int lost, int callback, int release) {
  res_victim v;
  CHECK(res_wait_victim(VICTIM, 15000, &v));
  printf("      victim: lost before write %d, callback %d, release %s, "
         "still holder after %d\n",
         v.lost, v.callback,
         v.release == 1 ? "freed" : dlock_err_name(v.release), v.held_after);
  if (lost >= 0) CHECK_EQ(v.lost, lost); /* -1: either, timing decides */
  CHECK_EQ(v.callback, callback);
  CHECK_EQ(v.release, release);
  CHECK_EQ(v.held_after, 0); /* a lost lock is never re-acquired */
}

static void victim_read(res_event *e) {
  CHECK(res_wait_event('R', VICTIM, 0, true, 0, 10000, e));
}

/* ---- 1. holder SIGKILLed inside its critical section ---- */
static void s1_run(bool enforce) {
  CHECK(begin("safety:s1", enforce, NULL, false));
  pid_t v = start_worker(VICTIM, 1, 0, "10000", NULL, NULL);
  res_event e;
  CHECK(res_wait_event('R', VICTIM, 0, true, 0, 10000, &e));
  start_others(3, 1);
  th_sleep_ms(100); /* let renewals and waiters settle (not a sync point) */
  size_t mark = res_mark();
  int64_t killed = th_now_ms();
  kill(v, SIGKILL);
  reap(v, 5000);
  long long pttl = th_cmd_int(&srv, "PTTL %s", lock_name);
  CHECK(pttl > 0 && pttl <= lease);
  CHECK(res_wait_event('R', -2, VICTIM, true, mark, 10000, &e));
  int64_t after = e.t_us / 1000 - killed;
  printf("      lock free %lld ms after the kill (PTTL then %lld ms)\n",
         (long long)after, pttl);
  CHECK(after >= pttl - 10);  /* not before the lease ran out */
  CHECK(after <= pttl + 250); /* nor much after */
  CHECK(finish(20));
  judge(enforce, false, -1, OVERLAP_NONE);
}
static void t_s1_holder_killed(void) {
  s1_run(true);
  s1_run(false);
}

/* ---- 2. holder SIGSTOPped for twice the lease, then resumed ---- */
/* The victim v, inside its section, stopped for two leases while the
 * others take turns, then resumed: told of the loss, its write judged. */
static void pause_victim(bool enforce, pid_t v) {
  kill(v, SIGSTOP);
  start_others(3, 1);
  th_sleep_ms((int)(2 * lease)); /* the fault's length */
  CHECK(res_wait_event('W', -2, VICTIM, true, 0, 10000, NULL));
  kill(v, SIGCONT);
  expect_victim(1, 1, DLOCK_ELOST);
  CHECK(finish(20));
  judge(enforce, true, VICTIM, OVERLAP_SOME);
}

static void s2_lib(bool enforce) {
  CHECK(begin("safety:s2", enforce, NULL, false));
  pid_t v = start_worker(VICTIM, 1, 0, "300", NULL, NULL);
  res_event e;
  victim_read(&e);
  pause_victim(enforce, v);
}

/* Ends a `dlock run` victim: resumed at `since`, it must exit 76 soon,
 * having killed its command. */
static void expect_cli_lost(pid_t v, pid_t cmd, int64_t since) {
  int st = reap(v, 8000);
  int64_t took = th_now_ms() - since;
  printf("      dlock run exited %d, %lld ms after it resumed\n",
         st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1, (long long)took);
  CHECK(st >= 0 && WIFEXITED(st));
  CHECK_EQ(WEXITSTATUS(st), 76);
  CHECK(took < 5000);       /* the command lingers 10 s unless killed */
  CHECK(kill(cmd, 0) != 0); /* killed and reaped by dlock */
}

static void s2_cli(bool enforce) {
  CHECK(begin("safety:s2cli", enforce, NULL, false));
  pid_t v = start_cli_victim("300");
  res_event e;
  victim_read(&e);
  pid_t cmd = e.pid;
  kill(cmd, SIGSTOP);
  kill(v, SIGSTOP);
  start_others(3, 1);
  th_sleep_ms((int)(2 * lease));
  CHECK(res_wait_event('W', -2, VICTIM, true, 0, 10000, NULL));
  size_t mark = res_mark();
  kill(cmd, SIGCONT); /* the command goes on writing first */
  CHECK(res_wait_event('W', VICTIM, 0, false, mark, 5000, NULL));
  int64_t resumed = th_now_ms();
  kill(v, SIGCONT);
  expect_cli_lost(v, cmd, resumed);
  CHECK(finish(20));
  judge(enforce, true, VICTIM, OVERLAP_SOME);
}
/* The same fault on the other kinds that hand out fencing tokens: the fair
 * lock and the write side of a read-write lock. */
static void t_s2_family_paused(void) {
  const char *kinds[] = {"fair", "write"};
  for (int i = 0; i < 2; i++) {
    printf("    kind %s\n", kinds[i]);
    kind = kinds[i];
    s2_lib(true);
    s2_lib(false);
  }
  kind = "lock";
}

static void t_s2_holder_paused(void) {
  s2_lib(true);
  s2_lib(false);
  s2_cli(true);
  s2_cli(false);
}

/* ---- 3. only the renewal machinery starved ---- */
static void s3_lib(bool enforce) {
  CHECK(begin("safety:s3", enforce, NULL, false));
  char hold[16];
  snprintf(hold, sizeof hold, "%lld", (long long)(2 * lease + 300));
  start_worker(VICTIM, 1, 0, hold, "1", NULL);
  res_event e;
  victim_read(&e);
  start_others(3, 1);
  expect_victim(1, 1, DLOCK_ELOST);
  CHECK(finish(20));
  judge(enforce, true, VICTIM, OVERLAP_SOME);
}

static void s3_cli(bool enforce) {
  CHECK(begin("safety:s3cli", enforce, NULL, false));
  char hold[16];
  snprintf(hold, sizeof hold, "%lld", (long long)(2 * lease + 500));
  pid_t v = start_cli_victim(hold);
  res_event e;
  victim_read(&e);
  kill(v, SIGSTOP); /* dlock only: its command runs on */
  start_others(3, 1);
  CHECK(res_wait_event('W', VICTIM, 0, false, 0, 10000, NULL));
  int64_t resumed = th_now_ms();
  kill(v, SIGCONT);
  expect_cli_lost(v, e.pid, resumed);
  CHECK(finish(20));
  judge(enforce, true, VICTIM, OVERLAP_SOME);
}
static void t_s3_renewal_starved(void) {
  s3_lib(true);
  s3_lib(false);
  s3_cli(true);
  s3_cli(false);
}

/* ---- 4. replies delayed past the lease, and lost ---- */
static dlock_client *proxied_client(int port, int64_t watchdog_ms,
                                    int command_timeout_ms) {
  char url[64];
  snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.watchdog_timeout_ms = watchdog_ms;
  o.command_timeout_ms = command_timeout_ms;
  return th_client_opts(&o);
}

typedef struct lost_flag {
  atomic_int fired;
} lost_flag;
static void flag_lost(dlock_lock *l, const char *owner, void *ud) {
  (void)l;
  (void)owner;
  atomic_store(&((lost_flag *)ud)->fired, 1);
}
static bool flag_fired(void *p) {
  return atomic_load(&((lost_flag *)p)->fired);
}
static bool key_gone(void *p) {
  return th_cmd_int(&srv, "EXISTS %s", (const char *)p) == 0;
}

static void t_s4_reply_faults(void) {
  CHECK(begin("safety:s4", true, NULL, false));
  int port = proxy_start(srv.port);
  CHECK(port > 0);
  dlock_client *c = proxied_client(port, 600, 3000);
  dlock_lock *l = NULL;
  CHECK(c != NULL);
  CHECK_RC(dlock_lock_new(c, lock_name, NULL, &l), 0);

  /* a) The acquire's reply comes after its 300 ms lease. */
  uint64_t before = 0, tok = 0;
  CHECK_RC(dlock_lock_current_token(l, &before), 0);
  proxy_set(PROXY_DELAY, 700);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_try_acquire(l, 0, 300, &tok), DLOCK_ELATE);
  proxy_set(PROXY_PASS, 0);
  printf("      a) late grant refused after %lld ms, %llu reply bytes "
         "delayed\n",
         (long long)(th_now_ms() - t0),
         (unsigned long long)proxy_faulted_bytes());
  CHECK(proxy_faulted_bytes() > 0);
  uint64_t after = 0;
  CHECK_RC(dlock_lock_current_token(l, &after), 0);
  CHECK(after > before); /* the server did grant it */
  CHECK_RC(dlock_lock_validity(l, NULL), DLOCK_ENOTOWNER); /* not believed */
  CHECK(th_wait_for(key_gone, (void *)lock_name, 1000));   /* no orphan */

  /* b) Watchdog renewals answered late: the server renews, but the client
   * cannot know in time, so it reports the loss rather than believe. */
  lost_flag lf = {0};
  dlock_lock_on_lost(l, flag_lost, &lf);
  CHECK_RC(dlock_lock_acquire(l, 0, NULL), 0);
  proxy_set(PROXY_DELAY, 1500);
  t0 = th_now_ms();
  CHECK(th_wait_for(flag_fired, &lf, 3000));
  printf("      b) loss reported %lld ms after renewals began to lag\n",
         (long long)(th_now_ms() - t0));
  CHECK(dlock_lock_is_lost(l) == 1);
  CHECK(th_now_ms() - t0 <= 600 + 400);
  /* No longer renewed, the server's lock expires within its lease. */
  CHECK(th_wait_for(key_gone, (void *)lock_name, 1500));
  proxy_set(PROXY_PASS, 0);
  CHECK_RC(dlock_lock_release(l), DLOCK_ELOST);
  dlock_lock_on_lost(l, NULL, NULL);

  /* c) The acquire's reply is lost (the server ran it): no belief, and the
   * orphan lives no longer than its lease. Also in watchdog mode (d). */
  int64_t leases[2] = {1500, 0}; /* fixed, and the watchdog's 2 s */
  for (int i = 0; i < 2; i++) {
    dlock_client *c2 = proxied_client(port, 2000, 800);
    dlock_lock *l2 = NULL;
    CHECK(c2 != NULL);
    CHECK_RC(dlock_lock_new(c2, lock_name, NULL, &l2), 0);
    uint64_t dropped = proxy_faulted_bytes();
    proxy_set(PROXY_DROP, 0);
    int rc = dlock_lock_try_acquire(l2, 0, leases[i], NULL);
    int64_t gave_up = th_now_ms();
    proxy_set(PROXY_PASS, 0);
    CHECK(rc == DLOCK_ETIMEDOUT || rc == DLOCK_ECONNLOST);
    CHECK(proxy_faulted_bytes() > dropped);
    long long pttl = th_cmd_int(&srv, "PTTL %s", lock_name);
    printf("      %c) reply dropped: %s, orphan PTTL %lld ms\n", "cd"[i],
           dlock_err_name(rc), pttl);
    CHECK(pttl > 0); /* the server did take it */
    CHECK_RC(dlock_lock_validity(l2, NULL), DLOCK_ENOTOWNER);
    CHECK(th_wait_for(key_gone, (void *)lock_name, (int)pttl + 100));
    CHECK(th_now_ms() - gave_up <= pttl + 100);
    /* And the client is not stuck with a ghost hold. */
    CHECK_RC(dlock_lock_try_acquire(l2, 0, 0, NULL), 0);
    CHECK_EQ(dlock_lock_hold_count(l2), 1);
    CHECK_RC(dlock_lock_release(l2), 1);
    dlock_lock_free(l2);
    dlock_client_close(c2);
  }
  dlock_lock_free(l);
  dlock_client_close(c);
  proxy_stop();
}

/* The same faults on a worker among others, judged by the resource: a
 * worker whose grants all come late, then whose replies are lost, never
 * writes while the fault lasts, and nobody else's exclusion suffers. */
static void s4_workers(bool enforce) {
  CHECK(begin("safety:s4w", enforce, NULL, false));
  int port = proxy_start(srv.port);
  CHECK(port > 0);
  char url[64];
  snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
  proxy_set(PROXY_DELAY, 700);
  size_t mark = res_mark();
  next_url = url;
  start_worker(VICTIM, 1, 300, NULL, NULL, "300"); /* 300 ms fixed leases */
  start_others(3, 1);
  th_sleep_ms(2000); /* the faults' length */
  proxy_set(PROXY_DROP, 0);
  th_sleep_ms(2500);
  bool wrote = res_wait_event('W', VICTIM, 0, false, mark, 0, NULL);
  proxy_set(PROXY_PASS, 0);
  printf("      %llu reply bytes delayed or dropped; the worker behind them "
         "%s\n",
         (unsigned long long)proxy_faulted_bytes(),
         wrote ? "WROTE" : "never wrote meanwhile");
  CHECK(proxy_faulted_bytes() > 0);
  CHECK(!wrote);
  /* Once the replies flow again, it takes its turns like everyone. */
  CHECK(res_wait_event('W', VICTIM, 0, true, mark, 10000, NULL));
  CHECK(finish(20));
  judge(enforce, false, -1, OVERLAP_NONE);
  proxy_stop();
}

static void t_s4_reply_faults_workers(void) {
  s4_workers(true);
  s4_workers(false);
}

/* ---- 5. a stale release after expiry ---- */
static void t_s5_stale_release(void) {
  CHECK(begin("safety:s5", true, NULL, false));
  dlock_client *a = th_client(&srv, 0), *b = th_client(&srv, 0);
  CHECK(a && b);
  dlock_lock *la, *lb;
  CHECK_RC(dlock_lock_new(a, lock_name, NULL, &la), 0);
  CHECK_RC(dlock_lock_new(b, lock_name, NULL, &lb), 0);
  CHECK_RC(dlock_lock_try_acquire(la, 0, 200, NULL), 0);
  CHECK(th_wait_for(key_gone, (void *)lock_name, 1000));
  CHECK_RC(dlock_lock_try_acquire(lb, 0, 5000, NULL), 0);
  CHECK_RC(dlock_lock_release(la), DLOCK_ELOST);
  CHECK_EQ(dlock_lock_hold_count(lb), 1); /* B's lock untouched */
  CHECK(th_cmd_int(&srv, "PTTL %s", lock_name) > 4000);
  CHECK_RC(dlock_lock_release(lb), 1);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_close(a);
  dlock_client_close(b);
  /* The same among workers: a victim on a 300 ms fixed lease holds 900 ms,
   * writes and releases late. No other holder may lose its lock to it. */
  for (int enforce = 1; enforce >= 0; enforce--) {
    CHECK(begin("safety:s5w", enforce, NULL, false));
    start_worker(VICTIM, 1, 0, "900", NULL, "300");
    res_event e;
    victim_read(&e);
    start_others(3, 1);
    expect_victim(1, 1, DLOCK_ELOST); /* told when its lease ran out */
    CHECK(finish(20));
    judge(enforce, true, VICTIM, OVERLAP_SOME);
  }
}

/* ---- 6. Redis killed and restarted under a held lock ---- */
/* Whether srv has at least *(int *)arg clients connected. */
static bool srv_clients(void *arg) {
  redisReply *r = th_cmd(&srv, "INFO clients");
  const char *p = r && r->type == REDIS_REPLY_STRING
                      ? strstr(r->str, "connected_clients:")
                      : NULL;
  bool ok = p && atoi(p + strlen("connected_clients:")) >= *(int *)arg;
  if (r) freeReplyObject(r);
  return ok;
}

static void s6_run(bool enforce, bool aof) {
  CHECK(begin(aof ? "safety:s6aof" : "safety:s6", enforce,
              aof ? "--appendonly yes --appendfsync always" : NULL, false));
  if (aof) lease = 2000; /* a restart well inside the lease */
  start_worker(VICTIM, 1, 0, "2500", NULL, NULL);
  res_event e;
  victim_read(&e);
  start_others(3, 1);
  /* Every worker connected (a command and a subscriber connection each,
   * and th_cmd's own) before the restart: one that connects during it
   * fails its open and exits. */
  int want = 2 * 4 + 1;
  CHECK(th_wait_for(srv_clients, &want, 10000));
  uint64_t old_token = e.token;
  CHECK(th_redis_restart(&srv) == 0);
  if (!aof) {
    /* The lock is forgotten: a waiter takes it while the victim holds. */
    res_event o;
    CHECK(res_wait_event('W', -2, VICTIM, true, 0, 10000, &o));
    CHECK(o.token > old_token); /* tokens never go backwards */
    expect_victim(-1, 1, DLOCK_ELOST);
    CHECK(finish(20));
    judge(enforce, true, VICTIM, OVERLAP_SOME);
  } else {
    expect_victim(0, 0, 1);
    CHECK(finish(20));
    judge(enforce, false, -1, OVERLAP_NONE);
  }
}
static void t_s6_server_restart(void) {
  s6_run(true, false);
  s6_run(false, false);
  s6_run(true, true);
  s6_run(false, true);
}

/* ---- 7. Redis paused (SIGSTOP) past the lease ---- */
static void s7_run(bool enforce) {
  CHECK(begin("safety:s7", enforce, NULL, false));
  char hold[16];
  snprintf(hold, sizeof hold, "%lld", (long long)(2 * lease + 1000));
  start_worker(VICTIM, 1, 0, hold, NULL, NULL);
  res_event e;
  victim_read(&e);
  start_others(3, 1);
  th_sleep_ms(100);
  th_redis_kill(&srv, SIGSTOP);
  th_sleep_ms((int)(2 * lease)); /* the fault's length */
  size_t mark = res_mark();
  th_redis_kill(&srv, SIGCONT);
  CHECK(res_wait_event('W', -2, VICTIM, true, mark, 10000, NULL));
  /* The victim's watchdog gave the lock up while the server was stopped. */
  expect_victim(1, 1, DLOCK_ELOST);
  CHECK(finish(20));
  judge(enforce, true, VICTIM, OVERLAP_SOME);
}
static void t_s7_server_paused(void) {
  s7_run(true);
  s7_run(false);
}

/* ---- 8. clocks stepped: the server's forward, the clients' both ways ---- */
static void s8_server(bool enforce) {
  CHECK(begin("safety:s8", enforce, NULL, true));
  start_worker(VICTIM, 1, 0, "1500", NULL, NULL);
  res_event e;
  victim_read(&e);
  start_others(3, 1);
  th_sleep_ms(100);
  size_t mark = res_mark();
  shift_server_clock(3600); /* an hour forward */
  CHECK(res_wait_event('W', -2, VICTIM, true, mark, 10000, NULL));
  expect_victim(-1, 1, DLOCK_ELOST);
  CHECK(finish(20));
  judge(enforce, true, VICTIM, OVERLAP_SOME);
}

static void s8_clients(bool enforce) {
  CHECK(begin("safety:s8c", enforce, NULL, false));
  write_file("client.faketime", "+0\n");
  clients_faketime = true;
  start_worker(VICTIM, 1, 0, "1500", NULL, NULL);
  res_event e;
  victim_read(&e);
  start_others(3, 1);
  th_sleep_ms(300);
  write_file("client.faketime", "+3600\n");
  th_sleep_ms(300);
  write_file("client.faketime", "-7200\n");
  /* Nothing happens: leases, waits and validity run on CLOCK_MONOTONIC. */
  expect_victim(0, 0, 1);
  CHECK(finish(20));
  judge(enforce, false, -1, OVERLAP_NONE);
}
static void t_s8_clock_steps(void) {
  s8_server(true);
  s8_server(false);
  if (SANITIZED) {
    /* libfaketime cannot be preloaded ahead of a sanitizer's runtime: the
     * client-clock half runs in the plain build. */
    printf("    client clock steps: plain build only\n");
    return;
  }
  s8_clients(true);
  s8_clients(false);
}

/* ---- 10-13. Redlock over three servers ----
 * Three fresh servers (rl; the first with a steppable wall clock) and the
 * workers on redlock://, with `opts` after '?' (or none). The single
 * server of begin() is not started. */
static bool begin_redlock(const char *name, bool enforce, const char *opts) {
  reset(name, LEASE);
  int at = snprintf(rl_url, sizeof rl_url, "redlock://");
  for (int i = 0; i < RL_N; i++) {
    if ((i == 0 ? start_clocked(&rl[i], NULL) : th_redis_start(&rl[i], NULL)) !=
        0)
      return false;
    at += snprintf(rl_url + at, sizeof rl_url - (size_t)at, "%s127.0.0.1:%d",
                   i ? "," : "", rl[i].port);
  }
  if (opts) snprintf(rl_url + at, sizeof rl_url - (size_t)at, "?%s", opts);
  scenario_url = rl_url;
  res_reset(enforce);
  printf("    %s run on %s\n", enforce ? "fenced " : "control", rl_url);
  fflush(stdout);
  return true;
}

/* How many of the servers have the lock now. */
static int rl_holders(void) {
  int k = 0;
  for (int i = 0; i < RL_N; i++)
    if (rl[i].pid > 0) k += th_cmd_int(&rl[i], "EXISTS %s", lock_name) == 1;
  return k;
}

/* 10. The holder paused past its validity: a quorum's leases run out, the
 * others take it; the victim, resumed, is told and its write refused. */
static void s10_run(bool enforce) {
  CHECK(begin_redlock("safety:s10", enforce, NULL));
  pid_t v = start_worker(VICTIM, 1, 0, "300", NULL, NULL);
  res_event e;
  victim_read(&e);
  CHECK_EQ(rl_holders(), RL_N);
  pause_victim(enforce, v);
}
static void t_s10_redlock_holder_paused(void) {
  s10_run(true);
  s10_run(false);
}

/* 11. A minority (one of three) killed during a hold: the holder keeps it
 * (renewed by the other two), nobody else gets it, the others go on with
 * two servers. Cannot break exclusion: the control must stay clean too. */
static void s11_run(bool enforce) {
  CHECK(begin_redlock("safety:s11", enforce, NULL));
  start_worker(VICTIM, 1, 0, "1500", NULL, NULL);
  res_event e;
  victim_read(&e);
  start_others(3, 1);
  th_sleep_ms(100);
  th_redis_kill(&rl[2], SIGKILL);
  expect_victim(0, 0, 1); /* held to the end, released by a quorum */
  CHECK(finish(20));
  judge(enforce, false, -1, OVERLAP_NONE);
}
static void t_s11_redlock_minority_killed(void) {
  s11_run(true);
  s11_run(false);
}

/* 12. A server restarted empty while held. The victim took the lock on
 * {0, 1} (2 was down); 2 comes back and 0 restarts without its data:
 * {0, 2} is a quorum that never saw the hold. Without the delayed restart
 * the others take it there while the victim holds (the control shows the
 * overlap, fencing refuses the victim's stale write). With
 * ?restart_delay= (at least the lease) both servers refuse the lock until
 * the victim's lease has run out: the victim writes inside its validity,
 * before anyone else can hold, and nothing overlaps; its renewals find no
 * quorum and it is told the lock is lost. */
static void s12_run(bool enforce, bool delayed) {
  char opts[64];
  snprintf(opts, sizeof opts, "restart_delay=%lldms", (long long)(2 * LEASE));
  CHECK(begin_redlock(delayed ? "safety:s12d" : "safety:s12", enforce,
                      delayed ? opts : NULL));
  th_redis_kill(&rl[2], SIGKILL);
  /* Without the delay, the victim's lease spans the restarts below even
   * where they are slow (the sanitizers): a renewal in their window, a
   * quorum short, would tell it of the loss before it writes (the
   * control then shows no stale write). */
  char vlease[16];
  snprintf(vlease, sizeof vlease, "%lld", 800LL * th_slowdown());
  start_worker(VICTIM, 1, 0, delayed ? "400" : vlease, NULL, NULL);
  res_event e;
  victim_read(&e); /* with the delay, once the fresh servers are old enough */
  CHECK_EQ(th_cmd_int(&rl[0], "EXISTS %s", lock_name), 1);
  CHECK(th_redis_restart(&rl[2]) == 0);
  th_redis_kill(&rl[0], SIGKILL);
  CHECK(th_redis_restart(&rl[0]) == 0);
  /* The injection worked: servers 0 and 2 came back without the lock.
   * (Server 1's copy may be gone too: a renewal in the restarts' window,
   * a quorum short, tells the victim of the loss, seen under ASan with
   * the delay's 400 ms lease.) */
  CHECK_EQ(th_cmd_int(&rl[0], "EXISTS %s", lock_name), 0);
  CHECK_EQ(th_cmd_int(&rl[2], "EXISTS %s", lock_name), 0);
  size_t mark = res_mark();
  start_others(3, 1);
  if (!delayed) {
    CHECK(res_wait_event('W', -2, VICTIM, true, mark, 10000, NULL));
    expect_victim(-1, 1, DLOCK_ELOST);
    CHECK(finish(20));
    judge(enforce, true, VICTIM, OVERLAP_SOME);
  } else {
    /* The victim writes inside its validity, before the delay lets anyone
     * else in; whether a renewal has told it of the loss by then (and so
     * what its release returns) is timing. */
    res_victim rv;
    CHECK(res_wait_victim(VICTIM, 15000, &rv));
    printf("      victim: lost before write %d, callback %d, release %s\n",
           rv.lost, rv.callback,
           rv.release == 1 ? "freed" : dlock_err_name(rv.release));
    CHECK(rv.release == 1 || rv.release == DLOCK_ELOST);
    CHECK_EQ(rv.held_after, 0);
    CHECK(finish(20));
    judge(enforce, false, -1, OVERLAP_NONE);
  }
}
static void t_s12_redlock_restart_empty(void) {
  s12_run(true, false);
  s12_run(false, false);
  s12_run(true, true);
  s12_run(false, true);
}

/* 13. One server's wall clock stepped an hour forward: its copy of the
 * lock expires at once, but one server is no quorum: nobody else gets it,
 * the holder keeps it. (On a single server the same step breaks
 * exclusion: scenario 8.) */
static void s13_run(bool enforce) {
  CHECK(begin_redlock("safety:s13", enforce, NULL));
  start_worker(VICTIM, 1, 0, "1500", NULL, NULL);
  res_event e;
  victim_read(&e);
  start_others(3, 1);
  th_sleep_ms(100);
  shift_server_clock(3600);
  /* The injection worked: server 0 dropped the victim's lock. */
  int64_t end = th_now_ms() + 2000;
  redisReply *r = NULL;
  bool dropped = false;
  while (!dropped && th_now_ms() < end) {
    r = th_cmd(&rl[0], "GET %s", lock_name);
    dropped = r && r->type == REDIS_REPLY_NIL;
    freeReplyObject(r);
    if (!dropped) th_sleep_ms(5);
  }
  CHECK(dropped);
  expect_victim(0, 0, 1);
  CHECK(finish(20));
  judge(enforce, false, -1, OVERLAP_NONE);
}
static void t_s13_redlock_clock_step(void) {
  s13_run(true);
  s13_run(false);
}

/* ---- 14. Sentinel: a failover while a lock is held ----
 * A master, its replica and 3 sentinels; the workers on redis-sentinel://
 * with a 3 s watchdog lease (a failover takes one to two seconds), and,
 * with `acked`, replica acknowledgement of 1 and a 9 s lease. */
static bool begin_sentinel(const char *name, bool enforce, bool acked) {
  /* With acknowledgement, 9 s: right after a failover the new master has
   * no replica yet, each renewal's WAIT runs out its second, and such a
   * renewal does not extend the hold's validity; with a 3 s lease the
   * holder is told it lost the lock (before anyone else can take it),
   * with 9 s it keeps it. S14_LEASE=3000 runs the former (the victim then
   * reports the loss, which this row's checks do not expect). */
  reset(name, acked ? (getenv("S14_LEASE") ? atoi(getenv("S14_LEASE")) : 9000) : 3000);
  if (th_sentinel_start(&sentinels, NULL) != 0) return false;
  sentinels_up = true;
  scenario_url = sentinels.url;
  replicas = acked ? 1 : 0;
  res_reset(enforce);
  printf("    %s run, %s\n", enforce ? "fenced " : "control",
         acked ? "acknowledged by the replica" : "no acknowledgement");
  fflush(stdout);
  return true;
}

/* 14a. Without acknowledgement, the replica's link cut before the victim
 * acquires (so its write is surely lost), then the replica promoted: the
 * others take the lock on the new master while the victim holds it (the
 * control shows the overlap; fencing refuses the victim's stale write),
 * and the victim is told at its first renewal there.
 * 14b. With acknowledgement and the link intact: the victim's hold is on
 * the replica before the acquire returns, survives the failover, is
 * renewed on the new master; nobody else gets it. */
static void s14_run(bool enforce, bool acked) {
  CHECK(begin_sentinel(acked ? "safety:s14b" : "safety:s14a", enforce, acked));
  if (!acked) {
    redisReply *r = th_cmd(&sentinels.replica, "REPLICAOF NO ONE");
    CHECK(r && r->type == REDIS_REPLY_STATUS);
    if (r) freeReplyObject(r);
  }
  start_worker(VICTIM, 1, 0, "5000", NULL, NULL);
  res_event e;
  victim_read(&e);
  CHECK_EQ(th_cmd_int(&sentinels.replica, "EXISTS %s", lock_name),
           acked ? 1 : 0);
  size_t mark = res_mark();
  start_others(3, 1);
  CHECK(th_sentinel_failover(&sentinels, 15000) == 0);
  if (getenv("DLOCK_SAFETY_DEBUG"))
    fprintf(stderr, "failover done at %lld\n", (long long)th_now_ms());
  if (!acked) {
    CHECK(res_wait_event('W', -2, VICTIM, true, mark, 15000, NULL));
    expect_victim(-1, 1, DLOCK_ELOST);
    CHECK(finish(20));
    judge(enforce, true, VICTIM, OVERLAP_SOME);
  } else {
    expect_victim(0, 0, 1);
    CHECK(finish(20));
    judge(enforce, false, -1, OVERLAP_NONE);
  }
}
static void t_s14_sentinel_failover(void) {
  if (SANITIZED) {
    /* Slow and timed: once, in the plain build (as test_sentinel). */
    printf("    Sentinel failovers: plain build only\n");
    return;
  }
  if (!getenv("DLOCK_SAFETY_DEBUG")) {
    s14_run(true, false);
    s14_run(false, false);
  }
  s14_run(true, true);
  s14_run(false, true);
}

/* 19. The only sentinel cut off by the fault proxy (partitioned both
 * ways) just when the client must ask it where the master is (its
 * connection to the master killed): the acquire fails within its
 * deadline, with an error that says the sentinels did not answer, and
 * nothing is taken. The control: the proxy passing, the same acquire
 * after the same kill succeeds. */
static void s19_run(bool partition) {
  reset("safety:s19", LEASE);
  CHECK(th_sentinel_start(&sentinels, NULL) == 0);
  sentinels_up = true;
  int port = proxy_start(sentinels.sentinels[0].port);
  CHECK(port > 0);
  char url[128];
  snprintf(url, sizeof url, "redis-sentinel://127.0.0.1:%d/%s", port,
           sentinels.name);
  printf("    %s run on %s\n", partition ? "partitioned" : "control",
         url);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.command_timeout_ms = 1000;
  dlock_client *c = th_client_opts(&o);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, lock_name, "me", &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, NULL), 0);
  CHECK_RC(dlock_lock_release(l), 1);
  if (partition) proxy_set(PROXY_PARTITION, 0);
  redisReply *r = th_cmd(&sentinels.master, "CLIENT KILL TYPE normal");
  CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer >= 1);
  freeReplyObject(r);
  int64_t t0 = th_now_ms();
  int rc = dlock_lock_try_acquire(l, 0, 0, NULL);
  if (rc == DLOCK_ECONNLOST) { /* sent on the killed connection: again */
    printf("      first: %s\n", dlock_client_errmsg(c));
    t0 = th_now_ms();
    rc = dlock_lock_try_acquire(l, 0, 0, NULL);
  }
  int64_t took = th_now_ms() - t0;
  printf("      acquire: %s after %lld ms: %s\n", dlock_err_name(rc),
         (long long)took, rc ? dlock_client_errmsg(c) : "");
  if (partition) {
    CHECK(rc < 0 && rc != DLOCK_EBUSY);
    CHECK(took <= 3 * o.command_timeout_ms);
    CHECK(strstr(dlock_client_errmsg(c), "sentinel") != NULL);
    CHECK_EQ(th_cmd_int(&sentinels.master, "EXISTS %s", lock_name), 0);
    CHECK(proxy_faulted_bytes() > 0);
  } else {
    CHECK_RC(rc, 0);
    CHECK_RC(dlock_lock_release(l), 1);
  }
  dlock_lock_free(l);
  dlock_client_close(c);
  proxy_stop();
}
static void t_s19_sentinel_unreachable(void) {
  if (SANITIZED) {
    printf("    Sentinel: plain build only\n");
    return;
  }
  s19_run(true);
  s19_run(false);
}

/* ---- 20-22. Redis Cluster ----
 * Three masters (each with a replica for 20), the workers on
 * redis-cluster://, the lock's slot on master 0. */
static char cluster_name[64];

/* A name like `base` whose slot master 0 serves. */
static const char *name_on_master0(const char *base) {
  for (int i = 0;; i++) {
    snprintf(cluster_name, sizeof cluster_name, "%s%d", base, i);
    if (th_cluster_node_of(&cluster, cluster_name) == 0) return cluster_name;
  }
}

static bool begin_cluster(const char *base, bool enforce, bool with_replicas,
                          int64_t lease_ms, const char *what) {
  reset(base, lease_ms);
  int rc = with_replicas ? th_cluster_start_replicas(&cluster, NULL)
                         : th_cluster_start(&cluster, NULL);
  if (rc != 0) return false;
  cluster_up = true;
  lock_name = name_on_master0(base);
  scenario_url = cluster.url;
  res_reset(enforce);
  printf("    %s run, %s\n", enforce ? "fenced " : "control", what);
  fflush(stdout);
  return true;
}

/* 20. Master 0 killed while the victim holds the lock, its replica
 * promoted (the cluster's own failover, about 4 s).
 * 20a. Without acknowledgement, the replica stopped (SIGSTOP) before the
 * victim acquires, so the write never reaches it, and resumed after the
 * kill: the others take the lock on the promoted replica while the victim
 * holds it (the control shows the overlap; fencing refuses the victim's
 * stale write), and the victim is told at its first renewal there.
 * 20b. With acknowledgement (min_replicas_acked 1, lease 9 s): the hold is
 * on the replica before the acquire returns, survives the failover, is
 * renewed on the new master; nobody else gets it. */
static void s20_run(bool enforce, bool acked) {
  CHECK(begin_cluster(acked ? "safety:s20b:" : "safety:s20a:", enforce, true,
                      acked ? 9000 : 3000,
                      acked ? "acknowledged by the replica"
                            : "no acknowledgement"));
  replicas = acked ? 1 : 0;
  th_redis *replica = &cluster.replicas[0];
  if (!acked) CHECK(kill(replica->pid, SIGSTOP) == 0);
  start_worker(VICTIM, 1, 0, "7000", NULL, NULL);
  res_event e;
  victim_read(&e);
  size_t mark = res_mark();
  start_others(3, 1);
  int64_t t0 = th_now_ms();
  th_redis_kill(&cluster.nodes[0], SIGKILL);
  if (!acked) CHECK(kill(replica->pid, SIGCONT) == 0);
  CHECK(th_cluster_wait_owner(&cluster, (int)th_cmd_int(replica, "CLUSTER KEYSLOT %s", lock_name),
                              cluster.ids[3], 20000));
  printf("      replica promoted %lld ms after the kill\n",
         (long long)(th_now_ms() - t0));
  fflush(stdout);
  if (!acked) {
    /* The victim's hold is not on the promoted replica, but the others'
     * acquires, riding the failover out, may already hold the name there:
     * an EXISTS here raced them. The loss shows in the victim's report
     * (ELOST) and the judged overlap below. */
    CHECK(res_wait_event('W', -2, VICTIM, true, mark, 15000, NULL));
    expect_victim(-1, 1, DLOCK_ELOST);
    CHECK(finish(20));
    judge(enforce, true, VICTIM, OVERLAP_SOME);
  } else {
    /* The old master comes back as the new one's replica: acknowledged
     * acquires can succeed again (until then each is given back). */
    CHECK(th_redis_restart(&cluster.nodes[0]) == 0);
    expect_victim(0, 0, 1);
    CHECK(finish(20));
    judge(enforce, false, -1, OVERLAP_NONE);
  }
}
static void t_s20_cluster_failover(void) {
  if (SANITIZED) {
    /* Slow and timed: once, in the plain build (as row 14). */
    printf("    Cluster failovers: plain build only\n");
    return;
  }
  s20_run(true, false);
  s20_run(false, false);
  s20_run(true, true);
  s20_run(false, true);
}

/* 21. The lock's slot resharded from master 0 to master 1 while workers
 * hold and wait for it: the keys moved a few at a time (each step a
 * moment apart, so that scripts meet TRYAGAIN and ASK meanwhile), then
 * the slot given to master 1. The waiters' shard channels are unsubscribed
 * by master 0 when the slot leaves it; they subscribe again on master 1.
 * No overlap in either run, the count exact, every worker goes on after
 * (no waiter left asleep on a channel nobody publishes to). */
static void s21_run(bool enforce) {
  CHECK(begin_cluster("safety:s21:", enforce, false, LEASE,
                      "slot migrated under load"));
  start_others(4, 1);
  int64_t until = th_now_ms() + 15000;
  while (res_accepted() < 200 && th_now_ms() < until) th_sleep_ms(5);
  CHECK(res_accepted() >= 200);
  long before = res_accepted();
  int slot = (int)th_cmd_int(&cluster.nodes[0], "CLUSTER KEYSLOT %s",
                             lock_name);
  CHECK_RC(th_cluster_slot_begin(&cluster, slot, 0, 1), 0);
  int moved = 0;
  for (int round = 0; round < 200; round++) {
    int n = th_cluster_slot_move_keys(&cluster, slot, 0, 1, 3);
    CHECK(n >= 0);
    if (n <= 0) break;
    moved += n;
    th_sleep_ms(20);
  }
  CHECK_RC(th_cluster_slot_end(&cluster, slot, 1), 0);
  printf("      %d keys moved; %ld writes during the migration\n", moved,
         res_accepted() - before);
  CHECK_EQ(th_cmd_int(&cluster.nodes[1], "CLUSTER COUNTKEYSINSLOT %d", slot) >= 1, 1);
  CHECK_EQ(th_cmd_int(&cluster.nodes[0], "CLUSTER COUNTKEYSINSLOT %d", slot), 0);
  /* Every worker acquires again after the move, and hand-offs go at the
   * pace of wake-ups: a waiter left on a channel nobody publishes to
   * would sleep until the holder's lease (0.6 s) ran out. */
  size_t mark = res_mark();
  long after = res_accepted();
  th_sleep_ms(1000);
  long second = res_accepted() - after;
  printf("      %ld writes in the second after it\n", second);
  fflush(stdout);
  CHECK(second >= 20); /* lost wake-ups: about 2 a second */
  for (int id = 1; id <= 4; id++)
    CHECK(res_wait_event('W', id, -1, true, mark, 15000, NULL));
  CHECK(finish(20));
  judge(enforce, false, -1, OVERLAP_NONE);
}
static void t_s21_cluster_slot_migration(void) {
  s21_run(true);
  s21_run(false);
}

/* 22. A cluster master cut off by the fault proxy (both ways): master 0
 * announces the proxy's port (cluster-announce-port), so the client's
 * connection to it passes the proxy. Partitioned, an acquire of a lock in
 * its slot fails within its deadline with a clear error, and nothing is
 * written; locks on the other masters are unaffected. The control: the
 * proxy passing, the same acquire succeeds. */
static void s22_run(bool partition) {
  reset("safety:s22:", LEASE);
  CHECK(th_cluster_start(&cluster, NULL) == 0);
  cluster_up = true;
  lock_name = name_on_master0("safety:s22:");
  int port = proxy_start(cluster.nodes[0].port);
  CHECK(port > 0);
  redisReply *r = th_cmd(&cluster.nodes[0],
                         "CONFIG SET cluster-announce-bus-port %d "
                         "cluster-announce-port %d",
                         cluster.nodes[0].port + 10000, port);
  CHECK(r && r->type == REDIS_REPLY_STATUS);
  if (r) freeReplyObject(r);
  char url[128];
  snprintf(url, sizeof url, "redis-cluster://127.0.0.1:%d",
           cluster.nodes[1].port);
  printf("    %s run, master 0 announced at the proxy (%d)\n",
         partition ? "partitioned" : "control", port);
  /* The other masters learn the announced port by gossip. */
  char want[32];
  snprintf(want, sizeof want, ":%d@", port);
  int64_t until = th_now_ms() + 10000;
  bool seen = false;
  while (!seen && th_now_ms() < until) {
    r = th_cmd(&cluster.nodes[1], "CLUSTER NODES");
    seen = r && r->type == REDIS_REPLY_STRING && strstr(r->str, want);
    if (r) freeReplyObject(r);
    if (!seen) th_sleep_ms(50);
  }
  CHECK(seen);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.command_timeout_ms = 1000;
  dlock_client *c = th_client_opts(&o);
  CHECK(c != NULL);
  dlock_lock *l, *other;
  CHECK_RC(dlock_lock_new(c, lock_name, "me", &l), 0);
  char oname[64];
  for (int i = 0;; i++) {
    snprintf(oname, sizeof oname, "safety:s22:other%d", i);
    if (th_cluster_node_of(&cluster, oname) == 1) break;
  }
  CHECK_RC(dlock_lock_new(c, oname, "me", &other), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, NULL), 0);
  CHECK_RC(dlock_lock_release(l), 1);
  if (partition) proxy_set(PROXY_PARTITION, 0);
  int64_t t0 = th_now_ms();
  int rc = dlock_lock_try_acquire(l, 0, 0, NULL);
  int64_t took = th_now_ms() - t0;
  printf("      acquire: %s after %lld ms: %s\n", dlock_err_name(rc),
         (long long)took, rc ? dlock_client_errmsg(c) : "");
  fflush(stdout);
  if (partition) {
    CHECK(rc < 0 && rc != DLOCK_EBUSY);
    CHECK(took <= 3 * o.command_timeout_ms);
    CHECK(strlen(dlock_client_errmsg(c)) > 0);
    CHECK_EQ(th_cmd_int(&cluster.nodes[0], "EXISTS %s", lock_name), 0);
    CHECK(proxy_faulted_bytes() > 0);
  } else {
    CHECK_RC(rc, 0);
    CHECK_RC(dlock_lock_release(l), 1);
  }
  /* The other masters' locks are not held up by it. */
  t0 = th_now_ms();
  CHECK_RC(dlock_lock_try_acquire(other, 0, 0, NULL), 0);
  CHECK(th_now_ms() - t0 < 500);
  CHECK_RC(dlock_lock_release(other), 1);
  dlock_lock_free(l);
  dlock_lock_free(other);
  dlock_client_close(c);
  proxy_stop();
}
static void t_s22_cluster_unreachable(void) {
  s22_run(true);
  s22_run(false);
}

/* ---- 15-18 and 23-27: the consensus stores, ZooKeeper and etcd ----
 * The same faults on each: ZooKeeper (Curator's mutex: a session instead
 * of a lease; a private server, tickTime 250 ms, or an ensemble of three;
 * tokens the lock nodes' czxid) and etcd (Go's concurrency.Mutex: a
 * session lease per client, whole seconds and at least etcd's minimum of
 * 2 s, kept alive at a third of it; a private member or a cluster of
 * three; tokens the keys' create revisions). `ms` is the session timeout
 * (zk) or the lease (etcd); the watchdog checks each hold every third of
 * the 600 ms lease on zk://. The etcd rows run in the plain build only:
 * etcd's own timing (elections, lease expiry) is under test there, not
 * the sanitizers'. */
typedef enum store { ZK, ETCD } store;

static bool begin_store(store st, const char *name, bool enforce, bool three,
                        int ms) {
  int rc;
  if (st == ZK) {
    reset(name, LEASE);
    nzk = three ? 3 : 1;
    rc = three ? th_zk_ensemble_start(zks, 250, zk_url, sizeof zk_url)
               : th_zk_start(&zks[0], 250);
    if (!three) snprintf(zk_url, sizeof zk_url, "%s", zks[0].url);
    zk_session_ms = ms;
    scenario_url = zk_url;
  } else {
    reset(name, ms);
    netcd = three ? 3 : 1;
    rc = three ? th_etcd_cluster_start(etcds, etcd_url, sizeof etcd_url)
               : th_etcd_start(&etcds[0]);
    if (!three) snprintf(etcd_url, sizeof etcd_url, "%s", etcds[0].url);
    scenario_url = etcd_url;
  }
  if (rc != 0) return false;
  res_reset(enforce);
  printf("    %s run on %s\n", enforce ? "fenced " : "control", scenario_url);
  fflush(stdout);
  return true;
}

/* True (saying why) where the etcd rows do not run. */
static bool etcd_skipped(void) {
  if (SANITIZED || !th_etcd_available()) {
    printf("    etcd: %s\n",
           SANITIZED ? "plain build only" : "no etcd here: skipped");
    return true;
  }
  return false;
}

/* 15, 23. The holder paused (SIGSTOP) past its session or lease: the
 * server ends it and deletes the holder's node or key, another takes the
 * lock with a larger token; resumed, the victim is told and its write
 * refused. */
static void paused_run(store st, const char *name, int ms, bool enforce) {
  CHECK(begin_store(st, name, enforce, false, ms));
  pid_t v = start_worker(VICTIM, 1, 0, "300", NULL, NULL);
  res_event e;
  victim_read(&e);
  pause_victim(enforce, v);
}
static void t_s15_zk_holder_paused(void) {
  paused_run(ZK, "/safety/s15", 1000, true);
  paused_run(ZK, "/safety/s15", 1000, false);
}
static void t_s23_etcd_holder_paused(void) {
  if (etcd_skipped()) return;
  paused_run(ETCD, "safety/s23", 2000, true);
  paused_run(ETCD, "safety/s23", 2000, false);
}

/* 16, 24. The leader of three servers killed while a lock is held and
 * waited for (sessions or leases 4 s): a new leader in about a second
 * (etcd's extends every lease), the holder's connection moves to a server
 * that lives, it keeps the lock and releases it; nobody else gets it
 * meanwhile. */
static void leader_killed_run(store st, const char *name, bool enforce) {
  CHECK(begin_store(st, name, enforce, true, 4000));
  start_worker(VICTIM, 1, 0, "2500", NULL, NULL);
  res_event e;
  victim_read(&e);
  start_others(3, 1);
  th_sleep_ms(100);
  int leader = st == ZK ? th_zk_leader(zks) : th_etcd_leader(etcds);
  printf("      killing the leader, server %d\n", leader + 1);
  CHECK(leader >= 0);
  if (leader >= 0 && st == ZK) th_zk_kill(&zks[leader], SIGKILL);
  if (leader >= 0 && st == ETCD) th_etcd_kill(&etcds[leader], SIGKILL);
  expect_victim(0, 0, 1);
  CHECK(finish(20));
  judge(enforce, false, -1, OVERLAP_NONE);
}
static void t_s16_zk_leader_killed(void) {
  if (SANITIZED) {
    printf("    ZooKeeper ensemble: plain build only\n");
    return;
  }
  leader_killed_run(ZK, "/safety/s16", true);
  leader_killed_run(ZK, "/safety/s16", false);
}
static void t_s24_etcd_leader_killed(void) {
  if (etcd_skipped()) return;
  leader_killed_run(ETCD, "safety/s24", true);
  leader_killed_run(ETCD, "safety/s24", false);
}

/* 17, 25. The holder cut off from the server by the fault proxy (both
 * ways) past its session or lease while it keeps running: the server ends
 * it, another takes the lock; the victim's validity runs out before it
 * writes (after `hold` ms), and back it hears the loss (callback,
 * DLOCK_ELOST). */
static void partition_run(store st, const char *name, int ms, const char *hold,
                          bool enforce) {
  CHECK(begin_store(st, name, enforce, false, ms));
  int port = proxy_start(st == ZK ? zks[0].port : etcds[0].port);
  CHECK(port > 0);
  char url[64];
  snprintf(url, sizeof url, "%s://127.0.0.1:%d", st == ZK ? "zk" : "etcd",
           port);
  next_url = url;
  start_worker(VICTIM, 1, 0, hold, NULL, NULL);
  res_event e;
  victim_read(&e);
  size_t mark = res_mark();
  proxy_set(PROXY_PARTITION, 0);
  start_others(3, 1);
  CHECK(res_wait_event('W', -2, VICTIM, true, mark, 10000, NULL));
  proxy_set(PROXY_PASS, 0);
  printf("      %llu bytes dropped by the partition\n",
         (unsigned long long)proxy_faulted_bytes());
  CHECK(proxy_faulted_bytes() > 0);
  expect_victim(1, 1, DLOCK_ELOST);
  CHECK(finish(20));
  proxy_stop();
  judge(enforce, true, VICTIM, OVERLAP_SOME);
}
static void t_s17_zk_partition(void) {
  partition_run(ZK, "/safety/s17", 1000, "2500", true);
  partition_run(ZK, "/safety/s17", 1000, "2500", false);
}
static void t_s25_etcd_partition(void) {
  if (etcd_skipped()) return;
  partition_run(ETCD, "safety/s25", 2000, "4500", true);
  partition_run(ETCD, "safety/s25", 2000, "4500", false);
}

/* 18, 26. The server killed and restarted under a held lock (session or
 * lease 4 s): it restores the sessions or leases and their nodes or keys
 * from its log (etcd extends its leases), the holder reconnects in time
 * and keeps the lock; nobody else gets it. */
static void restart_run(store st, const char *name, bool enforce) {
  CHECK(begin_store(st, name, enforce, false, 4000));
  start_worker(VICTIM, 1, 0, "2500", NULL, NULL);
  res_event e;
  victim_read(&e);
  start_others(3, 1);
  th_sleep_ms(100);
  CHECK((st == ZK ? th_zk_restart(&zks[0]) : th_etcd_restart(&etcds[0])) == 0);
  expect_victim(0, 0, 1);
  CHECK(finish(20));
  judge(enforce, false, -1, OVERLAP_NONE);
}
static void t_s18_zk_server_restart(void) {
  restart_run(ZK, "/safety/s18", true);
  restart_run(ZK, "/safety/s18", false);
}
static void t_s26_etcd_server_restart(void) {
  if (etcd_skipped()) return;
  restart_run(ETCD, "safety/s26", true);
  restart_run(ETCD, "safety/s26", false);
}

/* 27. The holder's lease revoked by an operator (`etcdctl lease revoke`)
 * while it holds the lock and others wait: its key goes with the lease,
 * the next waiter takes the lock; the holder hears it through the watch on
 * its own key within a moment, before it writes, and its write is judged
 * (refused with tokens, accepted without: the control). */
static void s27_run(bool enforce) {
  CHECK(begin_store(ETCD, "safety/s27", enforce, false, 4000));
  start_worker(VICTIM, 1, 0, "1500", NULL, NULL);
  res_event e;
  victim_read(&e);
  start_others(3, 1);
  th_sleep_ms(100);
  /* The holder's key: the lowest create revision under the name. */
  char out[512], args[160];
  snprintf(args, sizeof args,
           "get --prefix %s/ --sort-by=CREATE --order=ASCEND --limit 1 "
           "--keys-only",
           lock_name);
  th_etcd_ctl(&etcds[0], args, out, sizeof out);
  const char *slash = strrchr(out, '/');
  char lease_hex[32] = "";
  if (slash) sscanf(slash + 1, "%31[0-9a-f]", lease_hex);
  printf("      revoking lease %s (key %.*s)\n", lease_hex,
         (int)strcspn(out, "\n"), out);
  CHECK(lease_hex[0] != '\0');
  snprintf(args, sizeof args, "lease revoke %s", lease_hex);
  CHECK(strstr(th_etcd_ctl(&etcds[0], args, out, sizeof out), "revoked") !=
        NULL);
  expect_victim(1, 1, DLOCK_ELOST);
  CHECK(finish(20));
  judge(enforce, true, VICTIM, OVERLAP_SOME);
}
static void t_s27_etcd_lease_revoked(void) {
  if (etcd_skipped()) return;
  s27_run(true);
  s27_run(false);
}

/* ---- 9. soak: 8 processes x 4 threads, random faults ---- */
static unsigned rnd_state;
static unsigned rnd(unsigned n) {
  rnd_state = rnd_state * 1103515245u + 12345u;
  return (rnd_state >> 16) % n;
}

static void t_s9_soak(void) {
  CHECK(begin("safety:s9", true, NULL, false));
  const char *env = getenv("DLOCK_SOAK_SECONDS");
  int seconds = env ? atoi(env) : (SANITIZED ? 15 : 10);
  /* DLOCK_SOAK_SEED replays a printed seed's fault schedule (the timing
   * of the workers is not replayed). */
  const char *seed = getenv("DLOCK_SOAK_SEED");
  rnd_state = seed ? (unsigned)strtoul(seed, NULL, 10) : (unsigned)th_now_ms();
  printf("    seed %u, %d s\n", rnd_state, seconds);
  pid_t pids[9];
  for (int i = 1; i <= 8; i++)
    pids[i] = start_worker(i, 4, 1000, 0, 0, 0);
  int64_t end = th_now_ms() + seconds * 1000;
  int counts[5] = {0};
  while (th_now_ms() < end) {
    th_sleep_ms(300 + (int)rnd(500));
    unsigned f = rnd(5);
    counts[f]++;
    int w = 1 + (int)rnd(8);
    switch (f) {
    case 0: { /* the holder (the latest reader) paused past its lease */
      pid_t h = res_last_reader();
      if (h <= 0) h = pids[w];
      kill(h, SIGSTOP);
      th_sleep_ms((int)(2 * lease));
      kill(h, SIGCONT);
      break;
    }
    case 1: /* a process killed, and started again */
      kill(pids[w], SIGKILL);
      reap(pids[w], 5000);
      pids[w] = start_worker(w, 4, 1000, 0, 0, 0);
      break;
    case 2: /* the server paused past the lease */
      th_redis_kill(&srv, SIGSTOP);
      th_sleep_ms((int)(2 * lease));
      th_redis_kill(&srv, SIGCONT);
      break;
    case 3: { /* every connection dropped */
      redisReply *r = th_cmd(&srv, "CLIENT KILL TYPE normal");
      if (r) freeReplyObject(r);
      r = th_cmd(&srv, "CLIENT KILL TYPE pubsub");
      if (r) freeReplyObject(r);
      break;
    }
    case 4: /* the server restarted without persistence */
      th_redis_restart(&srv);
      break;
    }
  }
  printf("      faults: %d paused workers, %d killed, %d server pauses, %d "
         "connection kills, %d restarts\n",
         counts[0], counts[1], counts[2], counts[3], counts[4]);
  /* Killed workers exit by signal: take them out of the exit check. */
  for (int i = 0; i < nprocs; i++)
    if (!procs[i].reaped &&
        waitpid(procs[i].pid, &procs[i].status, WNOHANG) == procs[i].pid)
      procs[i].reaped = true;
  CHECK(finish(50));
  res_verdict v;
  res_verdict_get(-1, &v);
  printf("      %zu critical sections, %ld accepted, %ld stale rejected, "
         "value %lld, overlaps %d, token errors %d\n",
         v.sections, v.accepted, v.rejected, v.value, v.overlaps,
         v.token_errors);
  fflush(stdout);
  res_verdict_explain(&v);
  CHECK(v.sections >= (SANITIZED ? 300u : 1000u));
  CHECK_EQ(v.stale_accepted, 0);
  CHECK_EQ(v.value, v.accepted);
  CHECK_EQ(v.token_errors, 0);
}

static void t_teardown(void) {
  static bool done;
  if (done) return;
  done = true;
  kill_all();
  stop_servers();
  res_stop();
  char cmd[96];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "worker") == 0)
    return worker_main(argc - 2, argv + 2);
  if (argc > 1 && strcmp(argv[1], "cmd") == 0)
    return cmd_main(argc - 2, argv + 2);
  if (argc > 2 && strcmp(argv[1], "--dlock") == 0) {
    dlock_bin = argv[2];
    argv[2] = argv[0];
    argc -= 2;
    argv += 2;
  }
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return 1;
  self[n] = '\0';
  snprintf(dir, sizeof dir, "/tmp/dlock-safety-XXXXXX");
  if (mkdtemp(dir) == NULL || res_start(dir) != 0) {
    fprintf(stderr, "cannot start the resource\n");
    return 1;
  }
  static const th_test tests[] = {T_BARE(t_s1_holder_killed),
                                  T_BARE(t_s2_holder_paused),
                                  T_BARE(t_s2_family_paused),
                                  T_BARE(t_s3_renewal_starved),
                                  T_BARE(t_s4_reply_faults),
                                  T_BARE(t_s4_reply_faults_workers),
                                  T_BARE(t_s5_stale_release),
                                  T_BARE(t_s6_server_restart),
                                  T_BARE(t_s7_server_paused),
                                  T_BARE(t_s8_clock_steps),
                                  T_BARE(t_s10_redlock_holder_paused),
                                  T_BARE(t_s11_redlock_minority_killed),
                                  T_BARE(t_s12_redlock_restart_empty),
                                  T_BARE(t_s13_redlock_clock_step),
                                  T_BARE(t_s14_sentinel_failover),
                                  T_BARE(t_s19_sentinel_unreachable),
                                  T_BARE(t_s20_cluster_failover),
                                  T_BARE(t_s21_cluster_slot_migration),
                                  T_BARE(t_s22_cluster_unreachable),
                                  T_BARE(t_s15_zk_holder_paused),
                                  T_BARE(t_s16_zk_leader_killed),
                                  T_BARE(t_s17_zk_partition),
                                  T_BARE(t_s18_zk_server_restart),
                                  T_BARE(t_s23_etcd_holder_paused),
                                  T_BARE(t_s24_etcd_leader_killed),
                                  T_BARE(t_s25_etcd_partition),
                                  T_BARE(t_s26_etcd_server_restart),
                                  T_BARE(t_s27_etcd_lease_revoked),
                                  T_BARE(t_s9_soak),
                                  T_BARE(t_teardown)};
  /* In one process: the fenced resource is a thread of this driver, and
   * each test begins by replacing the server the one before used. */
  int rc = th_run_inline(argc, argv, tests, sizeof tests / sizeof tests[0]);
  if (argc > 1) t_teardown(); /* a chosen few: t_teardown may not have run */
  return rc;
}
