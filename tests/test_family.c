/* test_family.c: every lock kind under 3 processes x 3 threads, checked
 * from the server side: at most one holder of a fair lock, never a writer
 * with anyone else inside a read-write lock, at most N holders of a
 * permit-expirable semaphore. Each holder counts itself in and out with
 * INCR/DECR and records any excess. */
#include "harness.h"

#include <pthread.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static th_redis srv;

static void setup(void) {
  if (srv.pid == 0 && th_redis_start(&srv, NULL) != 0) exit(2);
}

enum { FAIR, RW, PERMITS };
#define PROCS 3
#define THREADS 3
#define ROUNDS 15
#define PERMIT_LIMIT 2

typedef struct job {
  dlock_client *c;
  int kind, thread;
  int errors;
} job;

static void inside(const char *counter, long long limit) {
  long long n = th_cmd_int(&srv, "INCR %s", counter);
  if (n > limit) th_cmd_int(&srv, "INCR fam:violations");
}

static void *work(void *p) {
  job *j = p;
  dlock_lock *l = NULL, *r = NULL, *w = NULL;
  dlock_permits *pm = NULL;
  int e = 0;
  if (j->kind == FAIR)
    e = dlock_lock_new_fair(j->c, "fam:fair", NULL, 0, &l);
  else if (j->kind == RW)
    e = dlock_rwlock_new(j->c, "fam:rw", NULL, &r, &w);
  else
    e = dlock_permits_new(j->c, "fam:permits", &pm);
  if (e != 0) {
    j->errors++;
    return NULL;
  }
  for (int i = 0; i < ROUNDS; i++) {
    if (j->kind == FAIR) {
      if (dlock_lock_try_acquire(l, 20000, 0, NULL) != 0) {
        j->errors++;
        continue;
      }
      inside("fam:fair:in", 1);
      th_sleep_ms(1);
      th_cmd_int(&srv, "DECR fam:fair:in");
      if (dlock_lock_release(l) != 1) j->errors++;
    } else if (j->kind == RW) {
      bool writer = (i + j->thread) % 3 == 0;
      dlock_lock *x = writer ? w : r;
      if (dlock_lock_try_acquire(x, 20000, 0, NULL) != 0) {
        j->errors++;
        continue;
      }
      if (writer) {
        inside("fam:rw:writers", 1);
        if (th_cmd_int(&srv, "GET fam:rw:readers") > 0)
          th_cmd_int(&srv, "INCR fam:violations");
      } else {
        th_cmd_int(&srv, "INCR fam:rw:readers");
        if (th_cmd_int(&srv, "GET fam:rw:writers") > 0)
          th_cmd_int(&srv, "INCR fam:violations");
      }
      th_sleep_ms(1);
      th_cmd_int(&srv, writer ? "DECR fam:rw:writers" : "DECR fam:rw:readers");
      if (dlock_lock_release(x) != 1) j->errors++;
    } else {
      char id[DLOCK_PERMIT_ID_LEN];
      if (dlock_permits_acquire(pm, 20000, 0, id) != 0) {
        j->errors++;
        continue;
      }
      inside("fam:permits:in", PERMIT_LIMIT);
      th_sleep_ms(1);
      th_cmd_int(&srv, "DECR fam:permits:in");
      if (dlock_permits_release(pm, id) != 0) j->errors++;
    }
  }
  dlock_lock_free(l);
  dlock_lock_free(r);
  dlock_lock_free(w);
  dlock_permits_free(pm);
  return NULL;
}

static int child(int kind) {
  dlock_client *c = th_client(&srv, 0);
  if (c == NULL) return 2;
  job j[THREADS];
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) {
    j[i] = (job){c, kind, i, 0};
    pthread_create(&t[i], NULL, work, &j[i]);
  }
  int errors = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    errors += j[i].errors;
  }
  dlock_client_close(c);
  return errors ? 1 : 0;
}

static void run_kind(int kind) {
  setup();
  th_cmd_int(&srv, "DEL fam:violations");
  if (kind == PERMITS) {
    dlock_client *c = th_client(&srv, 0);
    dlock_permits *p;
    CHECK(c != NULL);
    CHECK_RC(dlock_permits_new(c, "fam:permits", &p), 0);
    CHECK_EQ(dlock_permits_try_set_permits(p, PERMIT_LIMIT), 1);
    dlock_permits_free(p);
    dlock_client_close(c);
  }
  pid_t kids[PROCS];
  for (int i = 0; i < PROCS; i++) {
    kids[i] = fork();
    if (kids[i] == 0) _exit(child(kind));
  }
  for (int i = 0; i < PROCS; i++) {
    int st;
    CHECK(waitpid(kids[i], &st, 0) == kids[i]);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  CHECK_EQ(th_cmd_int(&srv, "EXISTS fam:violations"), 0);
}

static void t_fair_exclusion(void) {
  run_kind(FAIR);
}
static void t_rw_readers_xor_writer(void) {
  run_kind(RW);
}
static void t_permits_admission(void) {
  run_kind(PERMITS);
}
static void t_teardown(void) {
  th_redis_stop(&srv);
}

TH_MAIN(T(t_fair_exclusion), T(t_rw_readers_xor_writer), T(t_permits_admission),
        T(t_teardown))
