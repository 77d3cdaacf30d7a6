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
  _exit(rc == DLOCK_EBUSY ? 0 : 3);
}

/* Two processes on url, each holding one lock (<base>0, <base>1) and
 * waiting for the other's: dlock deadlocks prints the cycle (both owners'
 * hosts, pids, commands and locks) and exits 1; not among names that
 * leave the cycle out; once the waits ran out, 0. */
static void two_processes(const char *url, const char *base) {
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
  char out[4096], want[128];
  CHECK_EQ(run_cli_on(url, "", out, sizeof out), 1);
  CHECK(strstr(out, "deadlock: 2 owners wait for each other") != NULL);
  for (int i = 0; i < 2; i++) {
    snprintf(want, sizeof want, "pid %d: worker-%d", (int)pid[i], i);
    CHECK(strstr(out, want) != NULL);
    snprintf(want, sizeof want, "holds lock '%s%d', waits for lock '%s%d'",
             base, i, base, 1 - i);
    CHECK(strstr(out, want) != NULL);
  }
  CHECK(strstr(out, "host testhost") != NULL);
  snprintf(want, sizeof want, "'%s1'", base);
  CHECK_EQ(run_cli_on(url, want, out, sizeof out), 0);
  for (int i = 0; i < 2; i++) {
    int st = 0;
    CHECK(waitpid(pid[i], &st, 0) == pid[i]);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  CHECK_EQ(run_cli_on(url, "", out, sizeof out), 0);
  dlock_client_close(c);
}

static void t_two_processes(void) {
  two_processes(th_srv.url, "dl:cycle");
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
  two_processes(s.url, "dl:cycle");
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
  two_processes(z.url, "/dl/cycle");
  th_zk_stop(&z);
#else
  fprintf(stderr, "    skipped: built without ZooKeeper\n");
#endif
}

/* detect_deadlocks itself is the conformance suite's t_deadlock_detect,
 * on every URL kind; here what redlock:// says: a backend without waiter
 * records refuses the option, and dlock deadlocks says so. */
static void t_redlock_refuses(void) {
  /* redlock:// records no waiters: the option is refused. */
  dlock_client_options o;
  dlock_client_options_init(&o);
  char url[600];
  snprintf(url, sizeof url, "redlock://127.0.0.1:%d", th_srv.port);
  o.url = url;
  o.detect_deadlocks = 1;
  dlock_client *r = NULL;
  CHECK_RC(dlock_client_open(&o, &r), DLOCK_ENOTSUP);
  CHECK(strstr(dlock_client_open_errmsg(), "no deadlock detection") != NULL);
  /* ... and dlock deadlocks says so, exit 69. */
  char out[1024];
  CHECK_EQ(run_cli_on(url, "", out, sizeof out), 69);
  CHECK(strstr(out, "the redlock backend has no waiter records") != NULL);
}

TH_MAIN(T(t_records), T(t_two_processes), T(t_redlock_refuses),
        T_BARE(t_two_processes_etcd), T_BARE(t_two_processes_zk))
