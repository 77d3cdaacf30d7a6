/* test_etcd_sem.c: what only etcd's semaphores have, against a private
 * etcd server the harness starts: their keys as docs/WIRE.md gives them
 * (read with etcdctl), someone else's keys where they live refused and
 * left alone, a SIGKILLed holder's permits back with its session's lease,
 * and the line of waiters: served in order, a release waking one of them
 * (no herd), the first in line at once (its watch one etcd has synced);
 * and `dlock run --permits` there. The counts, waits and
 * losses every backend keeps are the conformance suite's. */
#include "harness.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef DLOCK_TEST_HAVE_ETCD
/* etcdctl's output for args, its last newline cut. */
static const char *ctl(const th_etcd *s, const char *args, char *buf,
                       size_t len) {
  th_etcd_ctl(s, args, buf, len);
  size_t n = strlen(buf);
  if (n > 0 && buf[n - 1] == '\n') buf[n - 1] = '\0';
  return buf;
}

/* The keys: NAME/semaphore holds the permits available; NAME/permits the
 * total, NAME/permits/<id> each permit out with the client's id, on the
 * session's lease (the watchdog's TTL) or on a lease of its own (a fixed
 * lease's TTL); a release deletes it. */
static void t_etcd_sem_layout(void) {
  TH_ETCD_SETUP(s);
  dlock_client *c = th_etcd_client(&s, 9000);
  CHECK(c != NULL);
  char buf[4096], args[512];
  dlock_semaphore *sem;
  CHECK_RC(dlock_semaphore_new(c, "s1", &sem), 0);
  CHECK_EQ(dlock_semaphore_try_set_permits(sem, 3), 1);
  CHECK(strcmp(ctl(&s, "get s1/semaphore", buf, sizeof buf),
               "s1/semaphore\n3") == 0);
  CHECK_RC(dlock_semaphore_try_acquire(sem, 2, 0), 0);
  CHECK(strcmp(ctl(&s, "get s1/semaphore --print-value-only", buf, sizeof buf),
               "1") == 0);
  CHECK_RC(dlock_semaphore_add_permits(sem, -3), 0);
  CHECK(strcmp(ctl(&s, "get s1/semaphore --print-value-only", buf, sizeof buf),
               "-2") == 0);
  CHECK_EQ(dlock_semaphore_get_available(sem), 0);
  dlock_semaphore_free(sem);
  dlock_permits *p;
  CHECK_RC(dlock_permits_new(c, "p1", &p), 0);
  CHECK_EQ(dlock_permits_try_set(p, 2), 1);
  char id[DLOCK_PERMIT_ID_LEN], id2[DLOCK_PERMIT_ID_LEN];
  CHECK_RC(dlock_permits_try_acquire(p, 0, 0, id), 0);
  CHECK_RC(dlock_permits_try_acquire(p, 0, 5000, id2), 0);
  CHECK(strcmp(ctl(&s, "get p1/permits --print-value-only", buf, sizeof buf),
               "2") == 0);
  const char *ttl[2] = {"TTL(9s)", "TTL(5s)"};
  const char *ids[2] = {id, id2};
  for (int i = 0; i < 2; i++) {
    snprintf(args, sizeof args, "get p1/permits/%s -w json", ids[i]);
    ctl(&s, args, buf, sizeof buf);
    long long lease = 0;
    const char *l = strstr(buf, "\"lease\":");
    CHECK(l != NULL && sscanf(l, "\"lease\":%lld", &lease) == 1);
    snprintf(args, sizeof args, "lease timetolive %llx", lease);
    CHECK(strstr(ctl(&s, args, buf, sizeof buf), ttl[i]) != NULL);
  }
  CHECK_EQ(dlock_permits_get_available(p), 0);
  CHECK_RC(dlock_permits_release(p, id), 0);
  CHECK_RC(dlock_permits_release(p, id2), 0);
  CHECK(strcmp(ctl(&s, "get --prefix p1/ --keys-only", buf, sizeof buf),
               "p1/permits\n") == 0);
  /* dlock status --permits reads them. */
  dlock_lock *l;
  dlock_lock_state st;
  CHECK_RC(dlock_lock_new(c, "p1", NULL, &l), 0);
  CHECK_RC(dlock_lock_inspect(l, &st), 0);
  CHECK_EQ(st.counter, 2);
  CHECK_EQ(st.permits_taken, 0);
  dlock_lock_free(l);
  dlock_permits_free(p);
  dlock_client_close(c);
  th_etcd_stop(&s);
}

/* Someone else's value where a count lives, or a key under NAME/permits/
 * that is no permit's: DLOCK_EWRONGTYPE, and nothing changed. */
static void t_etcd_sem_foreign(void) {
  TH_ETCD_SETUP(s);
  dlock_client *c = th_etcd_client(&s, 0);
  CHECK(c != NULL);
  char buf[4096];
  ctl(&s, "put s2/semaphore hello", buf, sizeof buf);
  dlock_semaphore *sem;
  CHECK_RC(dlock_semaphore_new(c, "s2", &sem), 0);
  CHECK_RC(dlock_semaphore_try_acquire(sem, 1, 0), DLOCK_EWRONGTYPE);
  CHECK(strstr(dlock_client_errmsg(c), "s2/semaphore") != NULL);
  CHECK_RC(dlock_semaphore_release(sem, 1), DLOCK_EWRONGTYPE);
  CHECK_RC(dlock_semaphore_try_set_permits(sem, 1), DLOCK_EWRONGTYPE);
  CHECK(strcmp(ctl(&s, "get s2/semaphore --print-value-only", buf, sizeof buf),
               "hello") == 0);
  dlock_semaphore_free(sem);
  ctl(&s, "put p2/permits 2", buf, sizeof buf);
  ctl(&s, "put p2/permits/not-an-id x", buf, sizeof buf);
  dlock_permits *p;
  char id[DLOCK_PERMIT_ID_LEN];
  CHECK_RC(dlock_permits_new(c, "p2", &p), 0);
  CHECK_RC(dlock_permits_try_acquire(p, 0, 0, id), DLOCK_EWRONGTYPE);
  CHECK_RC(dlock_permits_get_available(p), DLOCK_EWRONGTYPE);
  CHECK_RC(dlock_permits_force_release(p, "0123456789abcdef0123456789abcdef"),
           DLOCK_EWRONGTYPE);
  CHECK(strcmp(ctl(&s, "get --prefix p2/", buf, sizeof buf),
               "p2/permits\n2\np2/permits/not-an-id\nx") == 0);
  dlock_permits_free(p);
  /* A lock's key at the name (a mutex held there): neither semaphore
   * writes its count beside it. */
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "ml", NULL, &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, NULL), 0);
  CHECK_RC(dlock_semaphore_new(c, "ml", &sem), 0);
  CHECK_RC(dlock_semaphore_try_set_permits(sem, 1), DLOCK_EWRONGTYPE);
  CHECK_RC(dlock_semaphore_release(sem, 1), DLOCK_EWRONGTYPE);
  CHECK_RC(dlock_permits_new(c, "ml", &p), 0);
  CHECK_RC(dlock_permits_try_set(p, 1), DLOCK_EWRONGTYPE);
  CHECK_RC(dlock_permits_try_acquire(p, 0, 0, id), DLOCK_EWRONGTYPE);
  ctl(&s, "get --prefix ml/ --keys-only", buf, sizeof buf);
  CHECK(strncmp(buf, "ml/", 3) == 0 && strchr(buf + 3, '/') == NULL);
  CHECK_RC(dlock_lock_release(l), 1);
  dlock_lock_free(l);
  dlock_permits_free(p);
  dlock_semaphore_free(sem);
  dlock_client_close(c);
  th_etcd_stop(&s);
}

/* A holder SIGKILLed with both permits: they come back when its session's
 * lease (3 s) ends, and a waiter gets one. */
static void t_etcd_permits_holder_killed(void) {
  TH_ETCD_SETUP(s);
  int fd[2];
  CHECK(pipe(fd) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    dlock_client *c = th_etcd_client(&s, 3000);
    dlock_permits *p;
    char id[DLOCK_PERMIT_ID_LEN];
    char ok = c && dlock_permits_new(c, "pk", &p) == 0 &&
                      dlock_permits_try_set(p, 2) == 1 &&
                      dlock_permits_try_acquire(p, 0, 0, id) == 0 &&
                      dlock_permits_try_acquire(p, 0, 0, id) == 0
                  ? 'y'
                  : 'n';
    if (write(fd[1], &ok, 1) != 1) _exit(1);
    for (;;)
      pause();
  }
  close(fd[1]);
  char ok = 0;
  CHECK(read(fd[0], &ok, 1) == 1);
  close(fd[0]);
  CHECK_EQ(ok, 'y');
  dlock_client *c = th_etcd_client(&s, 0);
  dlock_permits *p;
  char id[DLOCK_PERMIT_ID_LEN];
  CHECK_RC(dlock_permits_new(c, "pk", &p), 0);
  CHECK_EQ(dlock_permits_get_available(p), 0);
  CHECK_RC(dlock_permits_try_acquire(p, 0, 0, id), DLOCK_EBUSY);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_permits_try_acquire(p, 15000, 0, id), 0);
  int64_t took = th_now_ms() - t0;
  fprintf(stderr,
          "    the dead holder's lease gave a permit back after "
          "%lld ms\n",
          (long long)took);
  CHECK(took >= 1000 && took < 8000);
  CHECK_EQ(dlock_permits_get_available(p), 1);
  CHECK_RC(dlock_permits_release(p, id), 0);
  dlock_permits_free(p);
  dlock_client_close(c);
  th_etcd_stop(&s);
}

/* ---- the line ---- */
#define WAITERS 3
typedef struct waiter {
  dlock_semaphore *sem;
  int rc;
  atomic_int order; /* 1 + how many were served before it */
} waiter;
static atomic_int served;

static void *wait_one(void *arg) {
  waiter *w = arg;
  w->rc = dlock_semaphore_try_acquire(w->sem, 1, 10000);
  atomic_store(&w->order, atomic_fetch_add(&served, 1) + 1);
  return NULL;
}

/* How many keys are in the line (etcdctl). */
static int in_line(const th_etcd *s) {
  char buf[4096];
  th_etcd_ctl(s, "get --prefix sl/waiters/semaphore/ --keys-only", buf,
              sizeof buf);
  int n = 0;
  for (const char *p = buf; (p = strstr(p, "sl/waiters/")) != NULL; p++)
    n++;
  return n;
}

static bool line_reaches(const th_etcd *s, int n) {
  int64_t end = th_now_ms() + th_soon(5000);
  while (in_line(s) != n && th_now_ms() < end)
    th_sleep_ms(10);
  return in_line(s) == n;
}

/* Three waiters, each a client of its own, line up one after the other;
 * each release of one permit serves the next in line. The first release
 * wakes the first waiter alone: the second, first in line now, starts one
 * watch on the count, and the third none (a herd would re-watch each). */
static void t_etcd_sem_line(void) {
  TH_ETCD_SETUP(s);
  dlock_client *c = th_etcd_client(&s, 0), *wc[WAITERS];
  CHECK(c != NULL);
  dlock_semaphore *sem;
  CHECK_RC(dlock_semaphore_new(c, "sl", &sem), 0);
  CHECK_EQ(dlock_semaphore_try_set_permits(sem, 0), 1);
  waiter w[WAITERS];
  pthread_t t[WAITERS];
  atomic_store(&served, 0);
  for (int i = 0; i < WAITERS; i++) {
    wc[i] = th_etcd_client(&s, 0);
    CHECK(wc[i] != NULL);
    memset(&w[i], 0, sizeof w[i]);
    CHECK_RC(dlock_semaphore_new(wc[i], "sl", &w[i].sem), 0);
    CHECK(pthread_create(&t[i], NULL, wait_one, &w[i]) == 0);
    CHECK(line_reaches(&s, i + 1));
  }
  long long w0 = th_etcd_started(&s, "Watch");
  CHECK_RC(dlock_semaphore_release(sem, 1), 0);
  int64_t end = th_now_ms() + th_soon(3000);
  while ((atomic_load(&w[0].order) == 0 ||
          th_etcd_started(&s, "Watch") < w0 + 1) &&
         th_now_ms() < end)
    th_sleep_ms(5);
  /* Not a synchronisation: a herd's watches would come within this. */
  th_sleep_ms(300);
  long long w1 = th_etcd_started(&s, "Watch");
  fprintf(stderr, "    watches started after the first release: %lld\n",
          w1 - w0);
  CHECK_EQ(w1 - w0, 1);
  CHECK_EQ(atomic_load(&w[0].order), 1);
  CHECK_EQ(atomic_load(&w[1].order), 0);
  CHECK_RC(dlock_semaphore_release(sem, 2), 0);
  for (int i = 0; i < WAITERS; i++) {
    pthread_join(t[i], NULL);
    CHECK_RC(w[i].rc, 0);
    CHECK_EQ(atomic_load(&w[i].order), i + 1);
    dlock_semaphore_free(w[i].sem);
    dlock_client_close(wc[i]);
  }
  CHECK_EQ(in_line(&s), 0);
  CHECK_EQ(dlock_semaphore_get_available(sem), 0);
  dlock_semaphore_free(sem);
  dlock_client_close(c);
  th_etcd_stop(&s);
}

/* ---- the hand-off ---- */
/* A blocking waiter (one thread) of handoff_rounds: its kind's handle. */
typedef struct handoff {
  dlock_semaphore *sem;
  dlock_permits *p;
  char id[DLOCK_PERMIT_ID_LEN];
  int rc;
  atomic_llong at; /* when its acquire returned */
} handoff;

static void *handoff_wait(void *arg) {
  handoff *h = arg;
  h->rc = h->p ? dlock_permits_try_acquire(h->p, 5000, 0, h->id)
               : dlock_semaphore_try_acquire(h->sem, 1, 5000);
  atomic_store(&h->at, th_now_ms());
  return NULL;
}

/* Waits until s has started n Watch streams and has `watchers` watches
 * registered (a stream is counted as it starts, before its watch is):
 * whether it did. */
static bool watches_reach(const th_etcd *s, long long n, long long watchers) {
  int64_t end = th_now_ms() + th_soon(3000);
  bool ok;
  while (!(ok = th_etcd_started(s, "Watch") >= n &&
                th_etcd_gauge(s, "etcd_debugging_mvcc_watcher_total") >=
                    watchers) &&
         th_now_ms() < end)
    th_sleep_ms(2);
  return ok;
}

static int cmp_ll(const void *a, const void *b) {
  long long x = *(const long long *)a, y = *(const long long *)b;
  return (x > y) - (x < y);
}

/* ROUNDS hand-offs of the one permit of `name` (permits: the
 * permit-expirable semaphore's) from the blocking client a to a waiter
 * of the blocking client b, released as soon as the waiter's watch is
 * registered: each hand-off's ms, sorted, in ms[]; in *unsynced, how
 * many times etcd had an unsynced watch (one behind its revision) at the
 * release. A
 * permit's hold has a watch of its own (the watcher thread's), counted
 * before the next. */
enum { ROUNDS = 10 };
static void handoff_rounds(const th_etcd *s, bool permits, const char *name,
                           long long ms[ROUNDS], int *unsynced) {
  *unsynced = 0;
  dlock_client *a = th_etcd_client(s, 0), *b = th_etcd_client(s, 0);
  CHECK(a != NULL && b != NULL);
  dlock_semaphore *sa = NULL;
  dlock_permits *pa = NULL;
  handoff w = {0};
  if (permits) {
    CHECK_RC(dlock_permits_new(a, name, &pa), 0);
    CHECK_RC(dlock_permits_new(b, name, &w.p), 0);
    CHECK_EQ(dlock_permits_try_set(pa, 1), 1);
  } else {
    CHECK_RC(dlock_semaphore_new(a, name, &sa), 0);
    CHECK_RC(dlock_semaphore_new(b, name, &w.sem), 0);
    CHECK_EQ(dlock_semaphore_try_set_permits(sa, 1), 1);
  }
  char id[DLOCK_PERMIT_ID_LEN];
  long long watches = th_etcd_started(s, "Watch");
  for (int i = 0; i < ROUNDS; i++) {
    CHECK_RC(permits ? dlock_permits_try_acquire(pa, 0, 0, id)
                     : dlock_semaphore_try_acquire(sa, 1, 0),
             0);
    if (permits) CHECK(watches_reach(s, ++watches, 1)); /* a's hold's */
    atomic_store(&w.at, 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, handoff_wait, &w) == 0);
    CHECK(watches_reach(s, ++watches, permits ? 2 : 1)); /* the waiter's */
    *unsynced +=
        th_etcd_gauge(s, "etcd_debugging_mvcc_slow_watcher_total") != 0;
    int64_t t0 = th_now_ms();
    CHECK_RC(permits ? dlock_permits_release(pa, id)
                     : dlock_semaphore_release(sa, 1),
             0);
    pthread_join(t, NULL);
    CHECK_RC(w.rc, 0);
    ms[i] = atomic_load(&w.at) - t0;
    if (permits) CHECK(watches_reach(s, ++watches, 1)); /* b's hold's */
    CHECK_RC(permits ? dlock_permits_release(w.p, w.id)
                     : dlock_semaphore_release(w.sem, 1),
             0);
    watches = th_etcd_started(s, "Watch");
  }
  qsort(ms, ROUNDS, sizeof ms[0], cmp_ll);
  fprintf(stderr, "    %s hand-offs (ms, sorted):", name);
  for (int i = 0; i < ROUNDS; i++)
    fprintf(stderr, " %lld", ms[i]);
  fprintf(stderr, "; %d with an unsynced watch\n", *unsynced);
  if (permits) {
    dlock_permits_free(pa);
    dlock_permits_free(w.p);
  } else {
    dlock_semaphore_free(sa);
    dlock_semaphore_free(w.sem);
  }
  dlock_client_close(a);
  dlock_client_close(b);
}

/* A blocking waiter first in line whose watch has just started takes a
 * permit released by another client within 50 ms (the median of ten
 * hand-offs), for both semaphores: its watch on the count starts from a
 * read made after its place in the line, so etcd has it synced, never
 * unsynced (a watch from an earlier revision, told at etcd's next sync
 * of those: up to 100 ms late). */
static void t_etcd_sem_handoff(void) {
  TH_ETCD_SETUP(s);
  long long ms[ROUNDS];
  int unsynced;
  handoff_rounds(&s, false, "hs", ms, &unsynced);
  CHECK_EQ(unsynced, 0);
  CHECK(ms[ROUNDS / 2] < th_soon(50));
  handoff_rounds(&s, true, "hp", ms, &unsynced);
  CHECK_EQ(unsynced, 0);
  CHECK(ms[ROUNDS / 2] < th_soon(50));
  th_etcd_stop(&s);
}

/* dlock run --permits 1 on etcd://: a second run with -w 0 meanwhile
 * exits 75; status --permits counts the permit out; release --force
 * --permit ID stops the holder's command as lost (exit 76). */
static void t_etcd_sem_cli(void) {
  TH_ETCD_SETUP(s);
  char cmd[1024], buf[512], done[300];
  snprintf(cmd, sizeof cmd,
           "%s -u %s run --permits 1 pc -- sh -c '%s -u %s run --permits 1 "
           "-w 0 pc -- true; echo inner=$?' 2>/dev/null; echo rc=$?",
           DLOCK_CLI_PATH, s.url, DLOCK_CLI_PATH, s.url);
  th_sh(cmd, buf, sizeof buf);
  fprintf(stderr, "    %s", buf);
  CHECK(strstr(buf, "inner=75") != NULL && strstr(buf, "rc=0") != NULL);
  snprintf(done, sizeof done, "%s/done", s.dir);
  snprintf(cmd, sizeof cmd,
           "%s -u %s run --permits 1 pc -- sleep 30; echo $? > %s",
           DLOCK_CLI_PATH, s.url, done);
  pid_t pid = th__spawn(cmd);
  CHECK(pid > 0);
  snprintf(cmd, sizeof cmd, "%s -u %s status --permits pc", DLOCK_CLI_PATH,
           s.url);
  int64_t end = th_now_ms() + th_soon(10000);
  while (strstr(th_sh(cmd, buf, sizeof buf), "1 taken") == NULL &&
         th_now_ms() < end)
    th_sleep_ms(20);
  fprintf(stderr, "    %s", buf);
  CHECK(strstr(buf, "0 permit(s) free, 1 taken") != NULL);
  char id[64] = "";
  th_etcd_ctl(&s, "get --prefix pc/permits/ --keys-only", buf, sizeof buf);
  CHECK(sscanf(buf, "pc/permits/%32s", id) == 1);
  int64_t t0 = th_now_ms();
  snprintf(cmd, sizeof cmd,
           "%s -u %s release --force --permit %s pc; echo rc=$?",
           DLOCK_CLI_PATH, s.url, id);
  CHECK(strstr(th_sh(cmd, buf, sizeof buf), "rc=0") != NULL);
  int st;
  waitpid(pid, &st, 0);
  fprintf(stderr, "    release --force --permit: run ended after %lld ms\n",
          (long long)(th_now_ms() - t0));
  CHECK(th_now_ms() - t0 < th_soon(1500));
  snprintf(cmd, sizeof cmd, "cat %s", done);
  CHECK(strcmp(th_sh(cmd, buf, sizeof buf), "76\n") == 0);
  th_etcd_stop(&s);
}

TH_MAIN(T_BARE(t_etcd_sem_layout), T_BARE(t_etcd_sem_foreign),
        T_BARE(t_etcd_permits_holder_killed), T_BARE(t_etcd_sem_line),
        T_BARE(t_etcd_sem_handoff), T_BARE(t_etcd_sem_cli))
#else
static void t_etcd_sem_skipped(void) {
  fprintf(stderr, "    skipped: built without the etcd backend\n");
}
TH_MAIN(T_BARE(t_etcd_sem_skipped))
#endif
