/* test_family.c: every lock kind under 3 processes x 3 threads, checked
 * from the server side: at most one holder of a fair lock, never a writer
 * with anyone else inside a read-write lock, at most N holders of a
 * permit-expirable semaphore. Each holder counts itself in and out with
 * INCR/DECR and records any excess. And what every kind shares: the same
 * verbs, and DLOCK_EBUSY when the wait runs out. */
#include "harness.h"

#include <pthread.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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
  long long n = th_cmd_int(&th_srv, "INCR %s", counter);
  if (n > limit) th_cmd_int(&th_srv, "INCR fam:violations");
}

static void *work(void *p) {
  job *j = p;
  dlock_lock *l = NULL, *r = NULL, *w = NULL;
  dlock_rwlock *rw = NULL;
  dlock_permits *pm = NULL;
  int e = 0;
  if (j->kind == FAIR)
    e = dlock_fairlock_new(j->c, "fam:fair", NULL, 0, &l);
  else if (j->kind == RW)
    e = dlock_rwlock_new(j->c, "fam:rw", NULL, &rw);
  else
    e = dlock_permits_new(j->c, "fam:permits", &pm);
  if (e != 0) {
    j->errors++;
    return NULL;
  }
  r = dlock_rwlock_read(rw); /* NULL unless RW */
  w = dlock_rwlock_write(rw);
  for (int i = 0; i < ROUNDS; i++) {
    if (j->kind == FAIR) {
      if (dlock_lock_try_acquire(l, 20000, 0, NULL) != 0) {
        j->errors++;
        continue;
      }
      inside("fam:fair:in", 1);
      th_sleep_ms(1);
      th_cmd_int(&th_srv, "DECR fam:fair:in");
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
        if (th_cmd_int(&th_srv, "GET fam:rw:readers") > 0)
          th_cmd_int(&th_srv, "INCR fam:violations");
      } else {
        th_cmd_int(&th_srv, "INCR fam:rw:readers");
        if (th_cmd_int(&th_srv, "GET fam:rw:writers") > 0)
          th_cmd_int(&th_srv, "INCR fam:violations");
      }
      th_sleep_ms(1);
      th_cmd_int(&th_srv,
                 writer ? "DECR fam:rw:writers" : "DECR fam:rw:readers");
      if (dlock_lock_release(x) != 1) j->errors++;
    } else {
      char id[DLOCK_PERMIT_ID_LEN];
      if (dlock_permits_try_acquire(pm, 20000, 0, id) != 0) {
        j->errors++;
        continue;
      }
      inside("fam:permits:in", PERMIT_LIMIT);
      th_sleep_ms(1);
      th_cmd_int(&th_srv, "DECR fam:permits:in");
      if (dlock_permits_release(pm, id) != 0) j->errors++;
    }
  }
  dlock_lock_free(l);
  dlock_rwlock_free(rw); /* and r, w */
  dlock_permits_free(pm);
  return NULL;
}

static int child(int kind) {
  dlock_client *c = th_client(&th_srv, 0);
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
  th_cmd_int(&th_srv, "DEL fam:violations");
  if (kind == PERMITS) {
    dlock_client *c = th_client(&th_srv, 0);
    dlock_permits *p;
    CHECK(c != NULL);
    CHECK_RC(dlock_permits_new(c, "fam:permits", &p), 0);
    CHECK_EQ(dlock_permits_try_set(p, PERMIT_LIMIT), 1);
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
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS fam:violations"), 0);
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
/* ---- one verb, one "not in time" code, for every kind ---- */

/* Each kind, with nothing to take: DLOCK_EBUSY after one attempt and after
 * a short wait (which it waited out), with a detail naming the kind. */
static void t_ebusy_every_kind(void) {
  dlock_client *a = th_client(&th_srv, 0), *b = th_client(&th_srv, 0);
  CHECK(a && b);
  dlock_lock *la, *lb, *fa, *fb;
  dlock_rwlock *rwa, *rwb;
  dlock_semaphore *s;
  dlock_permits *p;
  dlock_latch *lt;
  dlock_multilock *m;
  char id[DLOCK_PERMIT_ID_LEN], id2[DLOCK_PERMIT_ID_LEN];
  CHECK_RC(dlock_lock_new(a, "b:lock", NULL, &la), 0);
  CHECK_RC(dlock_lock_new(b, "b:lock", NULL, &lb), 0);
  CHECK_RC(dlock_fairlock_new(a, "b:fair", NULL, 0, &fa), 0);
  CHECK_RC(dlock_fairlock_new(b, "b:fair", NULL, 0, &fb), 0);
  CHECK_RC(dlock_rwlock_new(a, "b:rw", NULL, &rwa), 0);
  CHECK_RC(dlock_rwlock_new(b, "b:rw", NULL, &rwb), 0);
  CHECK_RC(dlock_semaphore_new(b, "b:sem", &s), 0);
  CHECK_RC(dlock_permits_new(b, "b:permits", &p), 0);
  CHECK_RC(dlock_latch_new(b, "b:latch", &lt), 0);
  dlock_lock *both[] = {dlock_rwlock_write(rwb), lb};
  CHECK_RC(dlock_multilock_new(both, 2, &m), 0);
  /* Taken by a; none to take for b. */
  CHECK_RC(dlock_lock_acquire(la, 0, NULL), 0);
  CHECK_RC(dlock_lock_acquire(fa, 0, NULL), 0);
  CHECK_RC(dlock_lock_acquire(dlock_rwlock_read(rwa), 0, NULL), 0);
  CHECK_EQ(dlock_semaphore_try_set_permits(s, 1), 1);
  CHECK_RC(dlock_semaphore_acquire(s, 1), 0);
  CHECK_EQ(dlock_permits_try_set(p, 1), 1);
  CHECK_RC(dlock_permits_acquire(p, 0, id), 0);
  CHECK_EQ(dlock_latch_try_set_count(lt, 1), 1);
  static const int64_t waits[] = {0, 100};
  for (int i = 0; i < 2; i++) {
    int64_t w = waits[i], t0 = th_now_ms();
    CHECK_RC(dlock_lock_try_acquire(lb, w, 0, NULL), DLOCK_EBUSY);
    CHECK(strstr(dlock_client_errmsg(b), "b:lock") != NULL);
    CHECK_RC(dlock_lock_try_acquire(fb, w, 0, NULL), DLOCK_EBUSY);
    CHECK_RC(dlock_lock_try_acquire(dlock_rwlock_write(rwb), w, 0, NULL),
             DLOCK_EBUSY);
    CHECK_RC(dlock_semaphore_try_acquire(s, 1, w), DLOCK_EBUSY);
    CHECK(strstr(dlock_client_errmsg(b), "permit") != NULL);
    CHECK_RC(dlock_permits_try_acquire(p, w, 0, id2), DLOCK_EBUSY);
    CHECK_RC(dlock_latch_try_await(lt, w), DLOCK_EBUSY);
    CHECK(strstr(dlock_client_errmsg(b), "latch") != NULL);
    CHECK_RC(dlock_multilock_try_acquire(m, w, 0, NULL), DLOCK_EBUSY);
    CHECK(th_now_ms() - t0 >= 7 * w); /* each waited its wait out */
  }
  CHECK_EQ(dlock_lock_is_held(lb), 0); /* the multi-lock gave back lb */
  CHECK_EQ(dlock_lock_release(la), 1);
  CHECK_EQ(dlock_lock_release(fa), 1);
  CHECK_EQ(dlock_lock_release(dlock_rwlock_read(rwa)), 1);
  CHECK_RC(dlock_semaphore_release(s, 1), 0);
  CHECK_RC(dlock_permits_release(p, id), 0);
  CHECK_RC(dlock_latch_count_down(lt), 0);
  dlock_multilock_free(m);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_lock_free(fa);
  dlock_lock_free(fb);
  dlock_rwlock_free(rwa);
  dlock_rwlock_free(rwb);
  dlock_semaphore_free(s);
  dlock_permits_free(p);
  dlock_latch_free(lt);
  dlock_client_close(a);
  dlock_client_close(b);
}

/* The calls without a wait limit wait until they can: each blocks on
 * something a second client gives up 200 ms later. */
typedef struct blocked {
  int kind;
  void *h;
  int rc;
  int64_t done_at;
} blocked;

static void *wait_forever(void *arg) {
  blocked *x = arg;
  char id[DLOCK_PERMIT_ID_LEN];
  switch (x->kind) {
  case 0: x->rc = dlock_lock_acquire(x->h, 0, NULL); break;
  case 1: x->rc = dlock_semaphore_acquire(x->h, 2); break;
  case 2: x->rc = dlock_permits_acquire(x->h, 5000, id); break;
  case 3: x->rc = dlock_latch_await(x->h); break;
  default: x->rc = dlock_multilock_acquire(x->h, 5000, NULL); break;
  }
  x->done_at = th_now_ms();
  return NULL;
}

static void t_acquire_waits_every_kind(void) {
  dlock_client *a = th_client(&th_srv, 0), *b = th_client(&th_srv, 0);
  CHECK(a && b);
  dlock_lock *la, *lb, *ma, *mb;
  dlock_semaphore *sa, *sb;
  dlock_permits *pa, *pb;
  dlock_latch *ta, *tb;
  dlock_multilock *m;
  char id[DLOCK_PERMIT_ID_LEN];
  CHECK_RC(dlock_lock_new(a, "w:lock", NULL, &la), 0);
  CHECK_RC(dlock_lock_new(b, "w:lock", "o", &lb), 0); /* released here */
  CHECK_RC(dlock_lock_new(a, "w:multi", NULL, &ma), 0);
  CHECK_RC(dlock_lock_new(b, "w:multi", "o", &mb), 0);
  CHECK_RC(dlock_semaphore_new(a, "w:sem", &sa), 0);
  CHECK_RC(dlock_semaphore_new(b, "w:sem", &sb), 0);
  CHECK_RC(dlock_permits_new(a, "w:permits", &pa), 0);
  CHECK_RC(dlock_permits_new(b, "w:permits", &pb), 0);
  CHECK_RC(dlock_latch_new(a, "w:latch", &ta), 0);
  CHECK_RC(dlock_latch_new(b, "w:latch", &tb), 0);
  CHECK_RC(dlock_multilock_new(&mb, 1, &m), 0);
  CHECK_RC(dlock_lock_acquire(la, 0, NULL), 0);
  CHECK_RC(dlock_lock_acquire(ma, 0, NULL), 0);
  CHECK_EQ(dlock_semaphore_try_set_permits(sa, 1), 1);
  CHECK_EQ(dlock_permits_try_set(pa, 1), 1);
  CHECK_RC(dlock_permits_acquire(pa, 0, id), 0);
  CHECK_EQ(dlock_latch_try_set_count(ta, 1), 1);
  blocked x[5] = {{0, lb, 99, 0},
                  {1, sb, 99, 0},
                  {2, pb, 99, 0},
                  {3, tb, 99, 0},
                  {4, m, 99, 0}};
  pthread_t t[5];
  for (int i = 0; i < 5; i++)
    pthread_create(&t[i], NULL, wait_forever, &x[i]);
  th_sleep_ms(200);
  int64_t t0 = th_now_ms();
  CHECK_EQ(dlock_lock_release(la), 1);
  CHECK_RC(dlock_semaphore_release(sa, 1), 0); /* 2 now */
  CHECK_RC(dlock_permits_release(pa, id), 0);
  CHECK_RC(dlock_latch_count_down(ta), 0);
  CHECK_EQ(dlock_lock_release(ma), 1);
  for (int i = 0; i < 5; i++) {
    pthread_join(t[i], NULL);
    CHECK_RC(x[i].rc, 0);
    CHECK(x[i].done_at >= t0 && x[i].done_at - t0 < 3000);
  }
  CHECK_EQ(dlock_lock_release(lb), 1);
  CHECK_RC(dlock_multilock_release(m), 0);
  CHECK_EQ(dlock_semaphore_get_available(sb), 0);
  dlock_multilock_free(m);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_lock_free(ma);
  dlock_lock_free(mb);
  dlock_semaphore_free(sa);
  dlock_semaphore_free(sb);
  dlock_permits_free(pa);
  dlock_permits_free(pb); /* its permit stops being renewed */
  dlock_latch_free(ta);
  dlock_latch_free(tb);
  dlock_client_close(a);
  dlock_client_close(b);
}

TH_MAIN(T(t_fair_exclusion), T(t_rw_readers_xor_writer), T(t_permits_admission),
        T(t_ebusy_every_kind), T(t_acquire_waits_every_kind))
