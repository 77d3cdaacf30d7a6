/* test_deadlock.c: waiter records (docs/WIRE.md) and dlock deadlocks
 * against a real redis-server: processes that really deadlock. The CLI's
 * path is built in (DLOCK_CLI_PATH), so that the test also runs bare, as
 * scripts/test.sh runs it under valgrind. */
#include "harness.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs `dlock -u URL deadlocks [args]` (URL: th_srv's, or `url`): its
 * exit status, its output in out. */
static int run_cli_on(const char *url, const char *args, char *out,
                      size_t len) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s -u %s deadlocks %s 2>&1", DLOCK_CLI_PATH, url,
           args);
  FILE *f = popen(cmd, "r");
  if (f == NULL) return -1;
  size_t n = fread(out, 1, len - 1, f);
  out[n] = '\0';
  int st = pclose(f);
  fprintf(stderr, "    dlock deadlocks %s: exit %d\n%s", args,
          WIFEXITED(st) ? WEXITSTATUS(st) : -1, out);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int run_cli(const char *args, char *out, size_t len) {
  return run_cli_on(th_srv.url, args, out, len);
}

typedef struct recs {
  int n;
  char owner[128], name[128], kind[8], info[128];
  int64_t deadline_ms;
} recs;

static int rec_one(const dlock_waiter *w, void *ud) {
  recs *r = ud;
  if (r->n++ == 0) {
    snprintf(r->owner, sizeof r->owner, "%s", w->owner);
    snprintf(r->name, sizeof r->name, "%s", w->name);
    snprintf(r->kind, sizeof r->kind, "%s", w->kind);
    snprintf(r->info, sizeof r->info, "%s", w->info);
    r->deadline_ms = w->deadline_ms;
  }
  return 0;
}

/* Polls the records (at most ms) until there are n. */
static recs recs_wait(dlock_client *c, int n, int64_t ms) {
  int64_t t0 = th_now_ms();
  for (;;) {
    recs r = {0};
    int rc = dlock_client_scan_waiters(c, NULL, rec_one, &r);
    if (rc < 0 || r.n >= n || th_now_ms() - t0 >= ms) return r;
    th_sleep_ms(5);
  }
}

typedef struct waiting {
  dlock_lock *l;
  int rc;
} waiting;

static void *wait_thread(void *p) {
  waiting *w = p;
  w->rc = dlock_lock_try_acquire(w->l, 5000, 10000, NULL);
  return NULL;
}

static int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int count_record(const char *name, void *ud) {
  if (strncmp(name, "dlock_wait:", 11) == 0) ++*(int *)ud;
  return 0;
}

/* A waiter's record: written only once it waits (what, its kind, its
 * info, its deadline, a lease), deleted when it gets the lock; the scan
 * for locks does not list it; no cycle: dlock deadlocks exits 0. */
static void t_records(void) {
  dlock_client *a = th_client(&th_srv, 0), *b = th_client(&th_srv, 0);
  CHECK(a && b);
  dlock_lock *h, *w;
  CHECK_RC(dlock_lock_new(a, "dl:x", NULL, &h), 0);
  CHECK_RC(dlock_lock_new(b, "dl:x", "waiter", &w), 0);
  CHECK_RC(dlock_lock_set_info(w, "the waiter's info"), 0);
  CHECK_RC(dlock_lock_try_acquire(h, 0, 10000, NULL), 0);
  CHECK_EQ(recs_wait(a, 0, 0).n, 0); /* an acquire that did not wait */
  waiting wt = {w, 1};
  pthread_t th;
  int64_t t0 = wall_ms();
  CHECK(pthread_create(&th, NULL, wait_thread, &wt) == 0);
  recs r = recs_wait(a, 1, 3000);
  CHECK_EQ(r.n, 1);
  char owner[128];
  snprintf(owner, sizeof owner, "%s:waiter", dlock_client_id(b));
  CHECK(strcmp(r.owner, owner) == 0);
  CHECK(strcmp(r.name, "dl:x") == 0 && strcmp(r.kind, "lock") == 0);
  CHECK(strcmp(r.info, "the waiter's info") == 0);
  CHECK(r.deadline_ms >= t0 + 4000 && r.deadline_ms <= wall_ms() + 5000);
  char key[256];
  snprintf(key, sizeof key, "PTTL dlock_wait:%s", owner);
  long long pttl = th_cmd_int(&th_srv, key);
  CHECK(pttl > 5000 && pttl <= 10000);
  /* dlock list's scan does not take the record for a plain lock. */
  int records = 0;
  CHECK(dlock_client_scan_locks(a, "*", count_record, &records) >= 1);
  CHECK_EQ(records, 0);
  char out[4096];
  CHECK_EQ(run_cli("", out, sizeof out), 0);
  CHECK(strstr(out, "no deadlock among 1 waiting owner") != NULL);
  CHECK_EQ(dlock_lock_release(h), 1);
  pthread_join(th, NULL);
  CHECK_RC(wt.rc, 0);
  CHECK_EQ(recs_wait(a, 0, 0).n, 0); /* gone with the wait */
  snprintf(key, sizeof key, "EXISTS dlock_wait:%s", owner);
  CHECK_EQ(th_cmd_int(&th_srv, key), 0);
  CHECK_EQ(dlock_lock_release(w), 1);
  dlock_lock_free(h);
  dlock_lock_free(w);
  dlock_client_close(a);
  dlock_client_close(b);
}

/* Child i: on url, holds lock <base>i (described as dlock run describes
 * its holder), says so, waits for the go, then waits 3 s for lock
 * <base>(1 - i). Exits 0 if that wait ran out (DLOCK_EBUSY). */
static void child(const char *url, const char *base, int i, int held_fd,
                  int go_fd) {
  dlock_client *c = th_client_url(url, 0);
  char mine[32], other[32], info[128];
  snprintf(mine, sizeof mine, "%s%d", base, i);
  snprintf(other, sizeof other, "%s%d", base, 1 - i);
  snprintf(info, sizeof info, "v1\ttesthost\t%d\tworker-%d", (int)getpid(), i);
  dlock_lock *l, *m;
  char ok = c && dlock_lock_new(c, mine, NULL, &l) == 0 &&
            dlock_lock_new(c, other, NULL, &m) == 0 &&
            dlock_lock_set_info(l, info) == 0 &&
            dlock_lock_set_info(m, info) == 0 &&
            dlock_lock_acquire(l, 0, NULL) == 0;
  if (write(held_fd, &ok, 1) != 1 || !ok) _exit(2);
  char go;
  if (read(go_fd, &go, 1) != 1) _exit(2);
  int rc = dlock_lock_try_acquire(m, 3000, 0, NULL);
  if (rc != DLOCK_EBUSY)
    fprintf(stderr, "    worker-%d's wait: %s (%s)\n", i, dlock_err_name(rc),
            dlock_client_errmsg(c));
  _exit(rc == DLOCK_EBUSY ? 0 : 3);
}

/* Two processes on url, each holding one lock (<base>0, <base>1) and
 * waiting for the other's: dlock deadlocks prints the cycle (both owners'
 * hosts, pids, commands and locks) and exits 1; not among names that
 * leave the cycle out; once the waits ran out, 0. */
static void two_processes(const char *url, const char *base, const char *kind,
                          void (*between)(const char *url)) {
  int held[2], go[2];
  CHECK(pipe(held) == 0 && pipe(go) == 0);
  pid_t pid[2];
  for (int i = 0; i < 2; i++) {
    pid[i] = fork();
    CHECK(pid[i] >= 0);
    if (pid[i] == 0) child(url, base, i, held[1], go[0]);
  }
  char ok[2] = {0, 0};
  CHECK(read(held[0], &ok[0], 1) == 1 && read(held[0], &ok[1], 1) == 1);
  CHECK(ok[0] && ok[1]);
  CHECK(write(go[1], "gg", 2) == 2);
  dlock_client *c = th_client_url(url, 0);
  CHECK(c != NULL);
  CHECK_EQ(recs_wait(c, 2, 2000).n, 2);
  if (between) between(url);
  char out[4096], want[128];
  CHECK_EQ(run_cli_on(url, "", out, sizeof out), 1);
  CHECK(strstr(out, "deadlock: 2 owners wait for each other") != NULL);
  for (int i = 0; i < 2; i++) {
    snprintf(want, sizeof want, "pid %d: worker-%d", (int)pid[i], i);
    CHECK(strstr(out, want) != NULL);
    snprintf(want, sizeof want, "holds %s '%s%d', waits for %s '%s%d'", kind,
             base, i, kind, base, 1 - i);
    CHECK(strstr(out, want) != NULL);
  }
  CHECK(strstr(out, "host testhost") != NULL);
  snprintf(want, sizeof want, "'%s1'", base);
  CHECK_EQ(run_cli_on(url, want, out, sizeof out), 0);
  for (int i = 0; i < 2; i++) {
    int st = 0;
    CHECK(waitpid(pid[i], &st, 0) == pid[i]);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
      fprintf(stderr, "    worker-%d: %s %d\n", i,
              WIFEXITED(st) ? "exit status" : "signal",
              WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  CHECK_EQ(run_cli_on(url, "", out, sizeof out), 0);
  dlock_client_close(c);
}

static void t_two_processes(void) {
  two_processes(th_srv.url, "dl:cycle", "lock", NULL);
}

/* The same on etcd:// (the keys in line are the waiters; the holders'
 * and waiters' owners from the keys' values) and zk:// (the nodes in
 * line). */
static void t_two_processes_etcd(void) {
#ifdef DLOCK_TEST_HAVE_ETCD
  if (!th_etcd_available()) {
    fprintf(stderr, "    skipped: no etcd server installed\n");
    return;
  }
  th_etcd s;
  CHECK_RC(th_etcd_start(&s), 0);
  two_processes(s.url, "dl:cycle", "lock", NULL);
  th_etcd_stop(&s);
#else
  fprintf(stderr, "    skipped: built without etcd\n");
#endif
}

static void t_two_processes_zk(void) {
#ifdef DLOCK_TEST_HAVE_ZK
  if (!th_zk_available()) {
    fprintf(stderr, "    skipped: no ZooKeeper server installed\n");
    return;
  }
  th_zk z;
  CHECK_RC(th_zk_start(&z, 0), 0);
  two_processes(z.url, "/dl/cycle", "lock", NULL);
  th_zk_stop(&z);
#else
  fprintf(stderr, "    skipped: built without ZooKeeper\n");
#endif
}

/* ---- redlock:// over 3 servers: the records a quorum has ---- */
static th_redis rl[3];
static char rl_url[512];

/* The 3 servers, started once, emptied for each test. */
static bool rl_start(void) {
  static bool up;
  if (!up && th_redlock_start(rl, 3, rl_url, sizeof rl_url) != 0) return false;
  up = true;
  for (int i = 0; i < 3; i++)
    th_cmd_int(&rl[i], "FLUSHALL");
  return true;
}

/* On redlock://, while the two wait: the cycle found with the 3 servers
 * up, then one of them killed by pid (two_processes then finds it on the
 * 2 left). */
static void one_down(const char *url) {
  char out[4096];
  CHECK_EQ(run_cli_on(url, "", out, sizeof out), 1);
  CHECK(strstr(out, "deadlock: 2 owners wait for each other") != NULL);
  th_redis_kill(&rl[2], SIGKILL);
}

/* The same two processes on redlock:// (its mutex the plain lock): their
 * records are on every server, the cycle is found (exit 1), also with one
 * of the 3 servers down: the quorum left tells. */
static void t_two_processes_redlock(void) {
  CHECK(rl_start());
  two_processes(rl_url, "dl:rcycle", "plain", one_down);
  CHECK_RC(th_redis_restart(&rl[2]), 0);
}

/* A waiter's record written on `on` of the 3 servers (the others have
 * none): owner `owner` waits for plain lock `name`. */
static void rl_record(int on, const char *owner, const char *name) {
  char val[128];
  snprintf(val, sizeof val, "plain 0 0\n%s", name);
  for (int i = 0; i < 3; i++) {
    redisReply *r =
        i < on ? th_cmd(&rl[i], "SET dlock_wait:%s %s PX 10000", owner, val)
               : th_cmd(&rl[i], "DEL dlock_wait:%s", owner);
    CHECK(r != NULL);
    freeReplyObject(r);
  }
}

/* A record a quorum has is a waiter; one on a single server (a round that
 * failed elsewhere, a server that kept one) is not: not by
 * dlock_client_scan_waiters, and no cycle through it for dlock
 * deadlocks, while the same record on 2 of 3 closes one. */
static void t_redlock_minority_record(void) {
  CHECK(rl_start());
  dlock_client *a = th_client_url(rl_url, 0), *b = th_client_url(rl_url, 0);
  CHECK(a && b);
  dlock_lock *a0, *b1;
  CHECK_RC(dlock_lock_new(a, "dl:m0", "x", &a0), 0);
  CHECK_RC(dlock_lock_new(b, "dl:m1", "y", &b1), 0);
  CHECK_RC(dlock_lock_try_acquire(a0, 0, 10000, NULL), 0);
  CHECK_RC(dlock_lock_try_acquire(b1, 0, 10000, NULL), 0);
  char x[160], y[160];
  snprintf(x, sizeof x, "%s:x", dlock_client_id(a));
  snprintf(y, sizeof y, "%s:y", dlock_client_id(b));
  rl_record(3, y, "dl:m0"); /* y waits for a0 (x's) on every server */
  rl_record(1, x, "dl:m1"); /* x for b1 (y's): one server only */
  CHECK_EQ(recs_wait(a, 1, 0).n, 1);
  recs r = recs_wait(a, 1, 0);
  CHECK(strcmp(r.owner, y) == 0 && strcmp(r.name, "dl:m0") == 0);
  char out[4096];
  CHECK_EQ(run_cli_on(rl_url, "", out, sizeof out), 0);
  CHECK(strstr(out, "no deadlock among 1 waiting owner") != NULL);
  rl_record(2, x, "dl:m1"); /* a quorum: the cycle */
  CHECK_EQ(recs_wait(a, 2, 0).n, 2);
  CHECK_EQ(run_cli_on(rl_url, "", out, sizeof out), 1);
  CHECK(strstr(out, "deadlock: 2 owners wait for each other") != NULL);
  rl_record(0, x, "dl:m1");
  rl_record(0, y, "dl:m0");
  CHECK_EQ(dlock_lock_release(a0), 1);
  CHECK_EQ(dlock_lock_release(b1), 1);
  dlock_lock_free(a0);
  dlock_lock_free(b1);
  dlock_client_close(a);
  dlock_client_close(b);
}

/* detect_deadlocks on redlock:// with one of its 3 servers down (signal
 * sig by pid: killed, or stopped, when it answers nothing): an owner holds
 * lock 0 and waits for lock 1; the owner holding lock 1 asks for lock 0
 * and is told DLOCK_EDEADLK at once, naming the cycle; once it lets lock 1
 * go, the first gets it. Both waits' records are gone from the servers
 * up afterwards. On the URL's servers with `opts` after it ("" or
 * "?layout=hash": the attempts' other script path). */
static void detect_one_down(int sig, const char *opts) {
  CHECK(rl_start());
  th_redis_kill(&rl[1], sig);
  char url[600];
  snprintf(url, sizeof url, "%s%s", rl_url, opts);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.command_timeout_ms = 300; /* a close waits that long for a stalled one */
  dlock_client *a = NULL, *b = NULL;
  CHECK_RC(dlock_client_open(&o, &a), 0);
  o.detect_deadlocks = 1;
  CHECK_RC(dlock_client_open(&o, &b), 0);
  CHECK(a != NULL);
  dlock_lock *a0, *a1, *b0, *b1;
  CHECK_RC(dlock_lock_new(a, "dl:d0", "x", &a0), 0);
  CHECK_RC(dlock_lock_new(a, "dl:d1", "x", &a1), 0);
  CHECK_RC(dlock_lock_new(b, "dl:d0", "y", &b0), 0);
  CHECK_RC(dlock_lock_new(b, "dl:d1", "y", &b1), 0);
  CHECK_RC(dlock_lock_try_acquire(a0, 1000, 10000, NULL), 0);
  CHECK_RC(dlock_lock_try_acquire(b1, 1000, 10000, NULL), 0);
  waiting wt = {a1, 1};
  pthread_t th;
  CHECK(pthread_create(&th, NULL, wait_thread, &wt) == 0);
  CHECK_EQ(recs_wait(b, 1, 3000).n, 1); /* a's wait, on the 2 servers up */
  for (int i = 0; i < 3; i += 2) {      /* with a lease: a dead waiter's goes */
    long long ms =
        th_cmd_int(&rl[i], "PTTL dlock_wait:%s:x", dlock_client_id(a));
    CHECK(ms > 0 && ms <= 10000);
  }
  int64_t t0 = th_now_ms();
  int rc = dlock_lock_try_acquire(b0, 2000, 10000, NULL);
  int64_t took = th_now_ms() - t0;
  const char *msg = dlock_client_errmsg(b);
  fprintf(stderr, "    %s after %lld ms: %s\n", dlock_err_name(rc),
          (long long)took, msg);
  CHECK_RC(rc, DLOCK_EDEADLK);
  CHECK(took < 500 && strstr(msg, "wait-for cycle") && strstr(msg, "dl:d0") &&
        strstr(msg, "dl:d1"));
  CHECK_EQ(dlock_lock_release(b1), 1);
  pthread_join(th, NULL);
  CHECK_RC(wt.rc, 0);
  CHECK_EQ(recs_wait(b, 0, 0).n, 0);
  for (int i = 0; i < 3; i += 2) { /* the servers up: no record left */
    redisReply *k = th_cmd(&rl[i], "KEYS dlock_wait:*");
    CHECK(k != NULL && k->type == REDIS_REPLY_ARRAY);
    size_t left = k->elements;
    freeReplyObject(k);
    CHECK_EQ(left, 0);
  }
  CHECK_EQ(dlock_lock_release(a1), 1);
  CHECK_EQ(dlock_lock_release(a0), 1);
  dlock_lock_free(a0);
  dlock_lock_free(a1);
  dlock_lock_free(b0);
  dlock_lock_free(b1);
  dlock_client_close(a);
  dlock_client_close(b);
  if (sig == SIGSTOP)
    th_redis_kill(&rl[1], SIGCONT);
  else
    CHECK_RC(th_redis_restart(&rl[1]), 0);
}

static void t_redlock_detect_one_down(void) {
  detect_one_down(SIGKILL, "");
}

static void t_redlock_detect_one_stopped(void) {
  detect_one_down(SIGSTOP, "?layout=hash");
}

TH_MAIN(T(t_records), T(t_two_processes), T_BARE(t_two_processes_redlock),
        T_BARE(t_redlock_minority_record), T_BARE(t_redlock_detect_one_down),
        T_BARE(t_redlock_detect_one_stopped), T_BARE(t_two_processes_etcd),
        T_BARE(t_two_processes_zk))
