/* test_async_kinds.c: the event-loop forms of every kind but the reentrant
 * lock's acquire and release (include/dlock_async.h: semaphore, permits,
 * latch, queue, read-write lock, multi-lock, the plain string lock; the
 * lock's queries, inspect, force release; the client's scan and ping)
 * against a real redis-server, with each driver (built-in,
 * libuv, libevent): results, the server's state after them, timeouts,
 * cancel, close with operations pending, handles freed while they run. */
#include "loop_drivers.h"

#include <ctype.h>
#include <string.h>

#define RUN(f, g) CHECK(td_run_until(&(f)->t, &(g)->calls, 3000))

/* ---- the semaphore ---- */
static void semaphore_ops(int kind) {
  td_fix f;
  CHECK_RC(td_fix_open(&f, kind, 0), 0);
  dlock_semaphore *s;
  CHECK_RC(dlock_semaphore_new(f.c, "k:sem", &s), 0);
  td_got g[10] = {{0}};
  CHECK_RC(dlock_semaphore_try_set_permits_async(s, 3, td_on_done, &g[0], NULL),
           0);
  CHECK_EQ(g[0].calls, 0); /* never within the call */
  RUN(&f, &g[0]);
  CHECK_RC(g[0].rc, 1);
  CHECK_EQ(th_cmd_int(&th_srv, "GET k:sem"), 3);
  CHECK_RC(dlock_semaphore_try_set_permits_async(s, 9, td_on_done, &g[1], NULL),
           0);
  RUN(&f, &g[1]);
  CHECK_RC(g[1].rc, 0); /* already set */
  CHECK_RC(dlock_semaphore_acquire_async(s, 2, 0, td_on_done, &g[2], NULL), 0);
  RUN(&f, &g[2]);
  CHECK_RC(g[2].rc, 0);
  CHECK_EQ(th_cmd_int(&th_srv, "GET k:sem"), 1);
  CHECK_RC(dlock_semaphore_get_available_async(s, td_on_done, &g[3], NULL), 0);
  RUN(&f, &g[3]);
  CHECK_RC(g[3].rc, 1);
  /* Not enough: the wait runs out. */
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_semaphore_acquire_async(s, 2, 200, td_on_done, &g[4], NULL),
           0);
  RUN(&f, &g[4]);
  CHECK_RC(g[4].rc, DLOCK_EBUSY);
  CHECK(th_now_ms() - t0 >= 200);
  CHECK(strstr(g[4].msg, "k:sem") != NULL);
  /* A waiter gets them once released. */
  CHECK_RC(dlock_semaphore_acquire_async(s, 2, 5000, td_on_done, &g[5], NULL),
           0);
  td_run_for(&f.t, 100);
  CHECK_EQ(g[5].calls, 0);
  CHECK_RC(dlock_semaphore_release_async(s, 2, td_on_done, &g[6], NULL), 0);
  RUN(&f, &g[6]);
  CHECK_RC(g[6].rc, 0);
  RUN(&f, &g[5]);
  CHECK_RC(g[5].rc, 0);
  CHECK_EQ(th_cmd_int(&th_srv, "GET k:sem"), 1);
  CHECK_RC(dlock_semaphore_add_permits_async(s, 4, td_on_done, &g[7], NULL), 0);
  RUN(&f, &g[7]);
  CHECK_RC(g[7].rc, 0);
  CHECK_EQ(th_cmd_int(&th_srv, "GET k:sem"), 5);
  CHECK_RC(dlock_semaphore_drain_async(s, td_on_done, &g[8], NULL), 0);
  RUN(&f, &g[8]);
  CHECK_RC(g[8].rc, 5);
  CHECK_EQ(th_cmd_int(&th_srv, "GET k:sem"), 0);
  /* Refused calls never call back. */
  CHECK_RC(dlock_semaphore_release_async(s, 0, td_on_done, &g[9], NULL),
           DLOCK_EINVAL);
  CHECK_RC(dlock_semaphore_acquire_async(s, 1, 0, NULL, NULL, NULL),
           DLOCK_EINVAL);
  CHECK_RC(dlock_semaphore_release(s, 1), DLOCK_EINVAL); /* blocking */
  td_run_for(&f.t, 50);
  CHECK_EQ(g[9].calls, 0);
  for (int i = 0; i < 9; i++)
    CHECK_EQ(g[i].calls, 1);
  dlock_semaphore_free(s);
  td_fix_close(&f);
}
TD_DRIVERS(semaphore_ops)

/* Cancel ends a wait; close completes a pending one; a handle freed with
 * a wait pending is freed after it (valgrind/ASan see the rest). */
static void semaphore_cancel_close(int kind) {
  td_fix f;
  CHECK_RC(td_fix_open(&f, kind, 0), 0);
  dlock_semaphore *s, *s2;
  CHECK_RC(dlock_semaphore_new(f.c, "k:semc", &s), 0);
  CHECK_RC(dlock_semaphore_new(f.c, "k:semc", &s2), 0);
  td_got c = {0}, w = {0};
  dlock_op *op = NULL;
  CHECK_RC(dlock_semaphore_acquire_async(s, 1, 20000, td_on_done, &c, &op), 0);
  CHECK(op != NULL);
  CHECK_RC(dlock_semaphore_acquire_async(s2, 1, 20000, td_on_done, &w, NULL),
           0);
  td_run_for(&f.t, 150);
  CHECK_EQ(c.calls + w.calls, 0);
  int64_t t0 = th_now_ms();
  dlock_op_cancel(op);
  CHECK_EQ(c.calls, 0);
  RUN(&f, &c);
  CHECK_RC(c.rc, DLOCK_ECANCELED);
  CHECK(th_now_ms() - t0 < 1000);
  CHECK_EQ(w.calls, 0);
  dlock_semaphore_free(s);
  dlock_semaphore_free(s2); /* its wait still runs */
  dlock_client_close(f.c);
  f.c = NULL;
  CHECK_EQ(w.calls, 1);
  CHECK_RC(w.rc, DLOCK_ECLOSED);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS k:semc"), 0); /* nothing taken */
  td_fix_close(&f);
}
TD_DRIVERS(semaphore_cancel_close)

/* ---- the permit-expirable semaphore ---- */
static bool hex_id(const char *id) {
  if (strlen(id) != DLOCK_PERMIT_ID_LEN - 1) return false;
  for (; *id; id++)
    if (!isxdigit((unsigned char)*id)) return false;
  return true;
}

static void permits_ops(int kind) {
  td_fix f;
  CHECK_RC(td_fix_open(&f, kind, 0), 0);
  dlock_permits *p;
  CHECK_RC(dlock_permits_new(f.c, "k:perm", &p), 0);
  td_got g[12] = {{0}};
  CHECK_RC(dlock_permits_try_set_async(p, 2, td_on_done, &g[0], NULL), 0);
  RUN(&f, &g[0]);
  CHECK_RC(g[0].rc, 1);
  char id[DLOCK_PERMIT_ID_LEN] = "", id2[DLOCK_PERMIT_ID_LEN] = "";
  CHECK_RC(dlock_permits_acquire_async(p, 0, 5000, id, td_on_done, &g[1], NULL),
           0);
  CHECK(hex_id(id)); /* known within the call */
  CHECK_EQ(g[1].calls, 0);
  RUN(&f, &g[1]);
  CHECK_RC(g[1].rc, 0);
  CHECK_EQ(th_cmd_int(&th_srv, "ZCARD {k:perm}:timeout"), 1);
  CHECK_EQ(th_cmd_int(&th_srv, "GET k:perm"), 1);
  int64_t ms = 0;
  CHECK_RC(dlock_permits_validity(p, id, &ms), 0);
  CHECK(ms > 4000);
  CHECK_RC(dlock_permits_acquire_async(p, 0, 0, id2, td_on_done, &g[2], NULL),
           0);
  RUN(&f, &g[2]);
  CHECK_RC(g[2].rc, 0);
  CHECK(strcmp(id, id2) != 0);
  CHECK_RC(dlock_permits_get_available_async(p, td_on_done, &g[3], NULL), 0);
  RUN(&f, &g[3]);
  CHECK_RC(g[3].rc, 0);
  /* None left: the wait runs out. */
  char id3[DLOCK_PERMIT_ID_LEN];
  int64_t t0 = th_now_ms();
  CHECK_RC(
      dlock_permits_acquire_async(p, 200, 5000, id3, td_on_done, &g[4], NULL),
      0);
  RUN(&f, &g[4]);
  CHECK_RC(g[4].rc, DLOCK_EBUSY);
  CHECK(th_now_ms() - t0 >= 200);
  CHECK_RC(dlock_permits_release_async(p, id, td_on_done, &g[5], NULL), 0);
  RUN(&f, &g[5]);
  CHECK_RC(g[5].rc, 0);
  CHECK_RC(dlock_permits_validity(p, id, NULL), DLOCK_ENOTOWNER);
  CHECK_RC(dlock_permits_release_async(p, id, td_on_done, &g[6], NULL), 0);
  RUN(&f, &g[6]);
  CHECK_RC(g[6].rc, DLOCK_ENOTOWNER); /* twice */
  CHECK_RC(dlock_permits_force_release_async(p, id2, td_on_done, &g[7], NULL),
           0);
  RUN(&f, &g[7]);
  CHECK_RC(g[7].rc, 1);
  CHECK_EQ(th_cmd_int(&th_srv, "ZCARD {k:perm}:timeout"), 0);
  CHECK_RC(dlock_permits_add_async(p, 3, td_on_done, &g[8], NULL), 0);
  RUN(&f, &g[8]);
  CHECK_RC(g[8].rc, 0);
  CHECK_RC(dlock_permits_get_available_async(p, td_on_done, &g[9], NULL), 0);
  RUN(&f, &g[9]);
  CHECK_RC(g[9].rc, 5);
  CHECK_RC(dlock_permits_release_async(p, "nothex", td_on_done, &g[10], NULL),
           DLOCK_EINVAL);
  td_run_for(&f.t, 50);
  CHECK_EQ(g[10].calls, 0);
  dlock_permits_free(p);
  td_fix_close(&f);
}
TD_DRIVERS(permits_ops)

static void permits_cancel_close(int kind) {
  td_fix f;
  CHECK_RC(td_fix_open(&f, kind, 0), 0);
  dlock_permits *p;
  CHECK_RC(dlock_permits_new(f.c, "k:permc", &p), 0);
  td_got s = {0}, c = {0}, w = {0};
  CHECK_RC(dlock_permits_try_set_async(p, 0, td_on_done, &s, NULL), 0);
  RUN(&f, &s);
  CHECK_RC(s.rc, 1);
  char id1[DLOCK_PERMIT_ID_LEN], id2[DLOCK_PERMIT_ID_LEN];
  dlock_op *op = NULL;
  CHECK_RC(
      dlock_permits_acquire_async(p, 20000, 5000, id1, td_on_done, &c, &op), 0);
  CHECK_RC(
      dlock_permits_acquire_async(p, 20000, 5000, id2, td_on_done, &w, NULL),
      0);
  td_run_for(&f.t, 150);
  CHECK_EQ(c.calls + w.calls, 0);
  dlock_op_cancel(op);
  RUN(&f, &c);
  CHECK_RC(c.rc, DLOCK_ECANCELED);
  CHECK_RC(dlock_permits_validity(p, id1, NULL), DLOCK_ENOTOWNER);
  CHECK_EQ(w.calls, 0);
  dlock_permits_free(p); /* its wait still runs */
  dlock_client_close(f.c);
  f.c = NULL;
  CHECK_EQ(w.calls, 1);
  CHECK_RC(w.rc, DLOCK_ECLOSED);
  CHECK_EQ(th_cmd_int(&th_srv, "ZCARD {k:permc}:timeout"), 0);
  td_fix_close(&f);
}
TD_DRIVERS(permits_cancel_close)

/* ---- the latch ---- */
static void latch_ops(int kind) {
  td_fix f;
  CHECK_RC(td_fix_open(&f, kind, 0), 0);
  dlock_latch *l;
  CHECK_RC(dlock_latch_new(f.c, "k:latch", &l), 0);
  td_got g[10] = {{0}};
  CHECK_RC(dlock_latch_try_set_count_async(l, 2, td_on_done, &g[0], NULL), 0);
  RUN(&f, &g[0]);
  CHECK_RC(g[0].rc, 1);
  CHECK_RC(dlock_latch_try_set_count_async(l, 5, td_on_done, &g[1], NULL), 0);
  RUN(&f, &g[1]);
  CHECK_RC(g[1].rc, 0); /* a count runs */
  CHECK_RC(dlock_latch_get_count_async(l, td_on_done, &g[2], NULL), 0);
  RUN(&f, &g[2]);
  CHECK_RC(g[2].rc, 2);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_latch_await_async(l, 200, td_on_done, &g[3], NULL), 0);
  RUN(&f, &g[3]);
  CHECK_RC(g[3].rc, DLOCK_EBUSY);
  CHECK(th_now_ms() - t0 >= 200);
  CHECK_RC(dlock_latch_await_async(l, 10000, td_on_done, &g[4], NULL), 0);
  CHECK_RC(dlock_latch_count_down_async(l, td_on_done, &g[5], NULL), 0);
  RUN(&f, &g[5]);
  CHECK_RC(g[5].rc, 0);
  CHECK_EQ(th_cmd_int(&th_srv, "GET k:latch"), 1);
  td_run_for(&f.t, 100);
  CHECK_EQ(g[4].calls, 0); /* still at 1 */
  CHECK_RC(dlock_latch_count_down_async(l, td_on_done, &g[6], NULL), 0);
  RUN(&f, &g[6]);
  CHECK_RC(g[6].rc, 0);
  RUN(&f, &g[4]);
  CHECK_RC(g[4].rc, 0);
  CHECK_RC(dlock_latch_count_down_async(l, td_on_done, &g[7], NULL), 0);
  RUN(&f, &g[7]);
  CHECK_RC(g[7].rc, DLOCK_ERANGE);
  CHECK(strstr(g[7].msg, "k:latch") != NULL);
  CHECK_RC(dlock_latch_get_count_async(l, td_on_done, &g[8], NULL), 0);
  RUN(&f, &g[8]);
  CHECK_RC(g[8].rc, 0);
  CHECK_RC(dlock_latch_try_set_count_async(l, 0, td_on_done, &g[9], NULL),
           DLOCK_EINVAL);
  dlock_latch_free(l);
  td_fix_close(&f);
}
TD_DRIVERS(latch_ops)

static void latch_cancel_close(int kind) {
  td_fix f;
  CHECK_RC(td_fix_open(&f, kind, 0), 0);
  dlock_latch *l;
  CHECK_RC(dlock_latch_new(f.c, "k:latchc", &l), 0);
  td_got s = {0}, c = {0}, w = {0};
  CHECK_RC(dlock_latch_try_set_count_async(l, 1, td_on_done, &s, NULL), 0);
  RUN(&f, &s);
  CHECK_RC(s.rc, 1);
  dlock_op *op = NULL;
  CHECK_RC(dlock_latch_await_async(l, 20000, td_on_done, &c, &op), 0);
  CHECK_RC(dlock_latch_await_async(l, -1, td_on_done, &w, NULL), 0);
  td_run_for(&f.t, 150);
  CHECK_EQ(c.calls + w.calls, 0);
  dlock_op_cancel(op);
  RUN(&f, &c);
  CHECK_RC(c.rc, DLOCK_ECANCELED);
  CHECK_EQ(w.calls, 0);
  dlock_latch_free(l);
  dlock_client_close(f.c);
  f.c = NULL;
  CHECK_EQ(w.calls, 1);
  CHECK_RC(w.rc, DLOCK_ECLOSED);
  td_fix_close(&f);
}
TD_DRIVERS(latch_cancel_close)

/* ---- the read-write lock ---- */
/* Both sides of a loop client's read-write lock made with owner NULL are
 * one owner: its writer takes the read side too; another read-write lock
 * of the same name (another owner) waits. */
static void rwlock_one_owner(int kind) {
  td_fix f;
  CHECK_RC(td_fix_open(&f, kind, 0), 0);
  dlock_rwlock *rw, *other;
  CHECK_RC(dlock_rwlock_new(f.c, "k:rw", NULL, &rw), 0);
  CHECK_RC(dlock_rwlock_new(f.c, "k:rw", NULL, &other), 0);
  td_got w = {0}, r = {0}, o = {0}, ow = {0}, rr = {0}, rw_ = {0};
  CHECK_RC(dlock_lock_acquire_async(dlock_rwlock_write(rw), 0, 5000, td_on_done,
                                    &w, NULL),
           0);
  RUN(&f, &w);
  CHECK_RC(w.rc, 0);
  CHECK(w.token > 0);
  CHECK_RC(dlock_lock_acquire_async(dlock_rwlock_read(rw), 0, 5000, td_on_done,
                                    &r, NULL),
           0);
  RUN(&f, &r);
  CHECK_RC(r.rc, 0); /* the writer reads */
  redisReply *m = th_cmd(&th_srv, "HGET k:rw mode");
  CHECK(m != NULL && m->type == REDIS_REPLY_STRING);
  CHECK(strcmp(m->str, "write") == 0);
  freeReplyObject(m);
  CHECK_RC(dlock_lock_acquire_async(dlock_rwlock_read(other), 0, 5000,
                                    td_on_done, &o, NULL),
           0);
  RUN(&f, &o);
  CHECK_RC(o.rc, DLOCK_EBUSY);
  CHECK_RC(dlock_lock_acquire_async(dlock_rwlock_write(other), 0, 5000,
                                    td_on_done, &ow, NULL),
           0);
  RUN(&f, &ow);
  CHECK_RC(ow.rc, DLOCK_EBUSY);
  CHECK_RC(
      dlock_lock_release_async(dlock_rwlock_write(rw), td_on_done, &rw_, NULL),
      0);
  RUN(&f, &rw_);
  CHECK_RC(rw_.rc, 1);
  m = th_cmd(&th_srv, "HGET k:rw mode"); /* the downgrade: still read */
  CHECK(m != NULL && m->type == REDIS_REPLY_STRING);
  CHECK(strcmp(m->str, "read") == 0);
  freeReplyObject(m);
  CHECK_RC(
      dlock_lock_release_async(dlock_rwlock_read(rw), td_on_done, &rr, NULL),
      0);
  RUN(&f, &rr);
  CHECK_RC(rr.rc, 1);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS k:rw"), 0);
  /* Freed with a wait pending on a side: the side goes after it. */
  td_got w2 = {0}, pend = {0};
  CHECK_RC(dlock_lock_acquire_async(dlock_rwlock_write(rw), 0, 5000,
                                    td_on_done, &w2, NULL), 0);
  RUN(&f, &w2);
  CHECK_RC(w2.rc, 0);
  CHECK_RC(dlock_lock_acquire_async(dlock_rwlock_read(other), -1, 5000,
                                    td_on_done, &pend, NULL), 0);
  td_run_for(&f.t, 100);
  dlock_rwlock_free(other);
  dlock_rwlock_free(rw); /* its write hold expires with its lease */
  dlock_client_close(f.c);
  f.c = NULL;
  CHECK_EQ(pend.calls, 1);
  CHECK_RC(pend.rc, DLOCK_ECLOSED);
  td_fix_close(&f);
}
TD_DRIVERS(rwlock_one_owner)

/* ---- the plain string lock ---- */
/* Its acquire, reentrancy, refusal, a waiter woken by a dlock release and
 * one that polls after a peer's DEL, its release and not-owner answer,
 * each on the loop. */
static void plainlock_ops(int kind) {
  td_fix f;
  CHECK_RC(td_fix_open(&f, kind, 0), 0);
  dlock_lock *l, *other;
  CHECK_RC(dlock_plainlock_new(f.c, "k:plain", NULL, &l), 0);
  CHECK_RC(dlock_plainlock_new(f.c, "k:plain", NULL, &other), 0);
  td_got a = {0}, re = {0}, busy = {0}, w = {0}, r1 = {0}, r2 = {0},
         no = {0}, w2 = {0}, r3 = {0};
  CHECK_RC(dlock_lock_acquire_async(l, 0, 30000, td_on_done, &a, NULL), 0);
  RUN(&f, &a);
  CHECK_RC(a.rc, 0);
  CHECK(a.token > 0);
  redisReply *m = th_cmd(&th_srv, "TYPE k:plain");
  CHECK(m != NULL && m->type == REDIS_REPLY_STATUS &&
        strcmp(m->str, "string") == 0);
  freeReplyObject(m);
  CHECK_RC(dlock_lock_acquire_async(l, 0, 30000, td_on_done, &re, NULL), 0);
  RUN(&f, &re);
  CHECK_RC(re.rc, 0);
  CHECK_EQ(re.token, a.token);
  CHECK_RC(dlock_lock_acquire_async(other, 0, 30000, td_on_done, &busy, NULL),
           0);
  RUN(&f, &busy);
  CHECK_RC(busy.rc, DLOCK_EBUSY);
  /* A waiter: not before the last of the two holds is released. */
  CHECK_RC(dlock_lock_acquire_async(other, 5000, 30000, td_on_done, &w, NULL),
           0);
  CHECK_RC(dlock_lock_release_async(l, td_on_done, &r1, NULL), 0);
  RUN(&f, &r1);
  CHECK_RC(r1.rc, 0); /* re-entered: still held */
  td_run_for(&f.t, 100);
  CHECK_EQ(w.calls, 0);
  CHECK_RC(dlock_lock_release_async(l, td_on_done, &r2, NULL), 0);
  RUN(&f, &r2);
  CHECK_RC(r2.rc, 1);
  RUN(&f, &w);
  CHECK_RC(w.rc, 0);
  CHECK(w.token > a.token);
  CHECK_RC(dlock_lock_release_async(l, td_on_done, &no, NULL), 0);
  RUN(&f, &no);
  CHECK_RC(no.rc, DLOCK_ENOTOWNER);
  /* A peer's hold, deleted without a message: found by polling. */
  freeReplyObject(th_cmd(&th_srv, "SET k:peer tok PX 30000"));
  dlock_lock *p;
  CHECK_RC(dlock_plainlock_new(f.c, "k:peer", NULL, &p), 0);
  CHECK_RC(dlock_lock_acquire_async(p, 5000, 30000, td_on_done, &w2, NULL), 0);
  td_run_for(&f.t, 100);
  CHECK_EQ(w2.calls, 0);
  freeReplyObject(th_cmd(&th_srv, "DEL k:peer"));
  RUN(&f, &w2);
  CHECK_RC(w2.rc, 0);
  CHECK_RC(dlock_lock_release_async(p, td_on_done, &r3, NULL), 0);
  RUN(&f, &r3);
  CHECK_RC(r3.rc, 1);
  dlock_lock_free(p);
  dlock_lock_free(other); /* its hold expires with its lease */
  dlock_lock_free(l);
  td_fix_close(&f);
}
TD_DRIVERS(plainlock_ops)

/* ---- the multi-lock ---- */
static void multilock_ops(int kind) {
  td_fix f;
  CHECK_RC(td_fix_open(&f, kind, 0), 0);
  dlock_client *bc = th_client(&th_srv, 0);
  CHECK(bc != NULL);
  dlock_lock *ls[3], *held;
  /* Given out of key order: taken as m:a, m:b, m:c. */
  CHECK_RC(dlock_lock_new(f.c, "m:c", NULL, &ls[0]), 0);
  CHECK_RC(dlock_lock_new(f.c, "m:a", NULL, &ls[1]), 0);
  CHECK_RC(dlock_lock_new(f.c, "m:b", NULL, &ls[2]), 0);
  CHECK_RC(dlock_lock_new(bc, "m:c", NULL, &held), 0);
  dlock_multilock *m;
  CHECK_RC(dlock_multilock_new(ls, 3, &m), 0);
  uint64_t tok[3] = {0};
  td_got a = {0}, r = {0}, busy = {0};
  CHECK_RC(dlock_multilock_acquire_async(m, 0, 5000, tok, td_on_done, &a, NULL),
           0);
  CHECK_EQ(a.calls, 0);
  RUN(&f, &a);
  CHECK_RC(a.rc, 0);
  CHECK(tok[0] > 0 && tok[1] > 0 && tok[2] > 0);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS m:a m:b m:c"), 3);
  CHECK_RC(dlock_multilock_release_async(m, td_on_done, &r, NULL), 0);
  RUN(&f, &r);
  CHECK_RC(r.rc, 0);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS m:a m:b m:c"), 0);
  /* m:c held elsewhere: m:a and m:b are taken, then given back. */
  CHECK_RC(dlock_lock_acquire(held, 30000, NULL), 0);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_multilock_acquire_async(m, 300, 5000, NULL, td_on_done, &busy,
                                         NULL),
           0);
  RUN(&f, &busy);
  CHECK_RC(busy.rc, DLOCK_EBUSY);
  CHECK(strstr(busy.msg, "m:c") != NULL);
  CHECK(th_now_ms() - t0 >= 300);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS m:a m:b"), 0);
  CHECK_RC(dlock_lock_validity(ls[1], NULL), DLOCK_ENOTOWNER); /* no hold */
  /* The release of a multi-lock not held: the first error. */
  td_got nr = {0};
  CHECK_RC(dlock_multilock_release_async(m, td_on_done, &nr, NULL), 0);
  RUN(&f, &nr);
  CHECK_RC(nr.rc, DLOCK_ENOTOWNER);
  CHECK_EQ(dlock_lock_release(held), 1);
  dlock_multilock_free(m);
  for (int i = 0; i < 3; i++)
    dlock_lock_free(ls[i]);
  dlock_lock_free(held);
  dlock_client_close(bc);
  td_fix_close(&f);
}
TD_DRIVERS(multilock_ops)

/* Cancel while a member waits: those taken go back; so does freeing the
 * multi-lock, or a member's handle, while it waits (DLOCK_ECANCELED from
 * the loop); close while one waits: DLOCK_ECLOSED. */
static void multilock_cancel_close(int kind) {
  td_fix f;
  CHECK_RC(td_fix_open(&f, kind, 0), 0);
  dlock_client *bc = th_client(&th_srv, 0);
  CHECK(bc != NULL);
  dlock_lock *ls[2], *held;
  CHECK_RC(dlock_lock_new(f.c, "n:a", NULL, &ls[0]), 0);
  CHECK_RC(dlock_lock_new(f.c, "n:b", NULL, &ls[1]), 0);
  CHECK_RC(dlock_lock_new(bc, "n:b", NULL, &held), 0);
  CHECK_RC(dlock_lock_acquire(held, 30000, NULL), 0);
  dlock_multilock *m;
  CHECK_RC(dlock_multilock_new(ls, 2, &m), 0);
  td_got c = {0}, w = {0};
  dlock_op *op = NULL;
  CHECK_RC(
      dlock_multilock_acquire_async(m, 20000, 5000, NULL, td_on_done, &c, &op),
      0);
  CHECK(op != NULL);
  td_run_for(&f.t, 200);
  CHECK_EQ(c.calls, 0);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS n:a"), 1); /* the first is taken */
  dlock_op_cancel(op);
  RUN(&f, &c);
  CHECK_RC(c.rc, DLOCK_ECANCELED);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS n:a"), 0); /* and given back */
  CHECK_RC(
      dlock_multilock_acquire_async(m, -1, 5000, NULL, td_on_done, &w, NULL),
      0);
  td_run_for(&f.t, 200);
  CHECK_EQ(w.calls, 0);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS n:a"), 1);
  /* Freed while it waits: cancelled (from the loop), n:a given back; m
   * is freed after the operation. */
  dlock_multilock_free(m);
  CHECK_EQ(w.calls, 0);
  RUN(&f, &w);
  CHECK_RC(w.rc, DLOCK_ECANCELED);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS n:a"), 0);
  /* A member's handle freed while the multi-lock waits on it: the same. */
  CHECK_RC(dlock_multilock_new(ls, 2, &m), 0);
  td_got v = {0}, z = {0};
  CHECK_RC(
      dlock_multilock_acquire_async(m, -1, 5000, NULL, td_on_done, &v, NULL),
      0);
  td_run_for(&f.t, 200);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS n:a"), 1);
  dlock_lock_free(ls[1]); /* freed after the operation */
  RUN(&f, &v);
  CHECK_RC(v.rc, DLOCK_ECANCELED);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS n:a"), 0);
  dlock_multilock_free(m);
  /* Close while one waits: DLOCK_ECLOSED within the close. */
  CHECK_RC(dlock_lock_new(f.c, "n:b", NULL, &ls[1]), 0);
  CHECK_RC(dlock_lock_acquire_async(ls[1], -1, 5000, td_on_done, &z, NULL), 0);
  td_run_for(&f.t, 100);
  CHECK_EQ(z.calls, 0);
  dlock_lock_free(ls[0]);
  dlock_lock_free(ls[1]); /* its cancel is not heard before the close */
  dlock_client_close(f.c);
  f.c = NULL;
  CHECK_EQ(z.calls, 1);
  CHECK_RC(z.rc, DLOCK_ECLOSED);
  CHECK_EQ(dlock_lock_release(held), 1);
  dlock_lock_free(held);
  dlock_client_close(bc);
  td_fix_close(&f);
}
TD_DRIVERS(multilock_cancel_close)


/* ---- reading a lock, force release, scan, ping ---- */
typedef struct names_got {
  int n, stop_after;
  char seen[8][64];
} names_got;

static int on_name(const char *name, void *ud) {
  names_got *g = ud;
  if (g->n < 8) snprintf(g->seen[g->n], sizeof g->seen[0], "%s", name);
  g->n++;
  return g->stop_after > 0 && g->n >= g->stop_after;
}

static bool saw(const names_got *g, const char *name) {
  for (int i = 0; i < g->n && i < 8; i++)
    if (strcmp(g->seen[i], name) == 0) return true;
  return false;
}

static void lock_reads(int kind) {
  td_fix f;
  CHECK_RC(td_fix_open(&f, kind, 0), 0);
  dlock_lock *l, *other;
  CHECK_RC(dlock_lock_new(f.c, "k:rd", NULL, &l), 0);
  CHECK_RC(dlock_lock_new(f.c, "k:rd", "someone-else", &other), 0);
  td_got a = {0}, g[8] = {{0}};
  CHECK_RC(dlock_lock_acquire_async(l, 0, 30000, td_on_done, &a, NULL), 0);
  RUN(&f, &a);
  CHECK_RC(a.rc, 0);
  CHECK(a.token > 0);
  CHECK_RC(dlock_lock_is_locked_async(l, td_on_done, &g[0], NULL), 0);
  CHECK_RC(dlock_lock_is_held_async(l, td_on_done, &g[1], NULL), 0);
  CHECK_RC(dlock_lock_is_held_async(other, td_on_done, &g[2], NULL), 0);
  CHECK_RC(dlock_lock_hold_count_async(l, td_on_done, &g[3], NULL), 0);
  CHECK_RC(dlock_lock_current_token_async(l, td_on_done, &g[4], NULL), 0);
  int64_t ttl = -5;
  CHECK_RC(dlock_lock_remaining_ttl_async(l, &ttl, td_on_done, &g[5], NULL),
           0);
  dlock_lock_state st;
  memset(&st, 0, sizeof st);
  CHECK_RC(dlock_lock_inspect_async(l, &st, td_on_done, &g[6], NULL), 0);
  CHECK_EQ(g[0].calls + g[5].calls + g[6].calls, 0); /* never within */
  CHECK_EQ(ttl, -5);
  RUN(&f, &g[6]);
  for (int i = 0; i < 7; i++) {
    RUN(&f, &g[i]);
    CHECK_EQ(g[i].calls, 1);
  }
  CHECK_RC(g[0].rc, 1);
  CHECK_RC(g[1].rc, 1);
  CHECK_RC(g[2].rc, 0);
  CHECK_RC(g[3].rc, 1);
  CHECK_RC(g[4].rc, 0);
  CHECK_EQ(g[4].token, a.token);
  CHECK_RC(g[5].rc, 0);
  CHECK(ttl > 25000 && ttl <= 30000);
  CHECK_RC(g[6].rc, 0);
  CHECK_EQ(st.held, 1);
  CHECK_EQ(st.holders, 1);
  CHECK_EQ(st.hold_count, 1);
  CHECK_EQ(st.token, a.token);
  CHECK(strcmp(st.type, "hash") == 0);
  /* The same snapshot as the blocking call's, from another client. */
  dlock_client *bc = th_client(&th_srv, 0);
  CHECK(bc != NULL);
  dlock_lock *bl;
  CHECK_RC(dlock_lock_new(bc, "k:rd", NULL, &bl), 0);
  dlock_lock_state bst;
  CHECK_RC(dlock_lock_inspect(bl, &bst), 0);
  CHECK(strcmp(bst.owner, st.owner) == 0);
  CHECK_EQ(bst.token, st.token);
  dlock_lock_free(bl);
  /* Force release: deleted, then nothing there; the holder hears it. */
  td_got fr[3] = {{0}};
  CHECK_RC(dlock_lock_force_release_async(other, td_on_done, &fr[0], NULL),
           0);
  RUN(&f, &fr[0]);
  CHECK_RC(fr[0].rc, 1);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS k:rd"), 0);
  CHECK_RC(dlock_lock_force_release_async(other, td_on_done, &fr[1], NULL),
           0);
  RUN(&f, &fr[1]);
  CHECK_RC(fr[1].rc, 0);
  /* Not a lock: refused, nothing changed. */
  th_cmd_int(&th_srv, "SET k:str 7");
  dlock_lock *sl;
  CHECK_RC(dlock_lock_new(f.c, "k:str", NULL, &sl), 0);
  CHECK_RC(dlock_lock_force_release_async(sl, td_on_done, &fr[2], NULL), 0);
  RUN(&f, &fr[2]);
  CHECK_RC(fr[2].rc, DLOCK_EWRONGTYPE);
  CHECK(fr[2].msg[0] != '\0');
  CHECK_EQ(th_cmd_int(&th_srv, "GET k:str"), 7);
  /* After the force release: free, no lease. */
  td_got q[2] = {{0}};
  ttl = 0;
  CHECK_RC(dlock_lock_is_locked_async(l, td_on_done, &q[0], NULL), 0);
  CHECK_RC(dlock_lock_remaining_ttl_async(l, &ttl, td_on_done, &q[1], NULL),
           0);
  RUN(&f, &q[1]);
  CHECK_RC(q[0].rc, 0);
  CHECK_EQ(ttl, -2);
  /* Refused calls never call back. */
  td_got no = {0};
  CHECK_RC(dlock_lock_remaining_ttl_async(l, NULL, td_on_done, &no, NULL),
           DLOCK_EINVAL);
  CHECK_RC(dlock_lock_is_locked_async(l, NULL, NULL, NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_lock_inspect_async(NULL, &st, td_on_done, &no, NULL),
           DLOCK_EINVAL);
  CHECK_RC(dlock_client_ping_async(bc, td_on_done, &no, NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_client_scan_locks_async(f.c, "*", NULL, td_on_done, &no,
                                         NULL),
           DLOCK_EINVAL);
  td_run_for(&f.t, 30);
  CHECK_EQ(no.calls, 0);
  dlock_client_close(bc);
  dlock_lock_free(sl);
  dlock_lock_free(other);
  dlock_lock_free(l);
  td_fix_close(&f);
}
TD_DRIVERS(lock_reads)

/* The scan's names and its end share one ud. */
typedef struct scan_got {
  names_got names; /* first: on_name's */
  td_got done;
} scan_got;

static void on_scan_done(int rc, uint64_t token, const char *msg, void *ud) {
  td_on_done(rc, token, msg, &((scan_got *)ud)->done);
}

static void scan_and_ping(int kind) {
  td_fix f;
  CHECK_RC(td_fix_open(&f, kind, 0), 0);
  for (int i = 0; i < 3; i++)
    th_cmd_int(&th_srv, "HSET k:scan:%d owner:1 1", i);
  th_cmd_int(&th_srv, "RPUSH k:scan:list 1"); /* neither hash nor string */
  scan_got all = {0}, first = {.names.stop_after = 1};
  CHECK_RC(dlock_client_scan_locks_async(f.c, "k:scan:*", on_name,
                                         on_scan_done, &all, NULL),
           0);
  CHECK_EQ(all.names.n + all.done.calls, 0); /* never within the call */
  RUN(&f, &all.done);
  CHECK_RC(all.done.rc, 3);
  CHECK_EQ(all.names.n, 3);
  CHECK(saw(&all.names, "k:scan:0") && saw(&all.names, "k:scan:2"));
  CHECK(!saw(&all.names, "k:scan:list"));
  CHECK_RC(dlock_client_scan_locks_async(f.c, "k:scan:*", on_name,
                                         on_scan_done, &first, NULL),
           0);
  RUN(&f, &first.done);
  CHECK_RC(first.done.rc, 1); /* stopped by the callback */
  td_got p = {0};
  CHECK_RC(dlock_client_ping_async(f.c, td_on_done, &p, NULL), 0);
  RUN(&f, &p);
  CHECK_RC(p.rc, 0);
  /* Pending at close: completed within it. */
  td_got late = {0};
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(f.c, "k:late", NULL, &l), 0);
  CHECK_RC(dlock_lock_is_locked_async(l, td_on_done, &late, NULL), 0);
  dlock_lock_free(l); /* freed after its call completes */
  dlock_client_close(f.c);
  f.c = NULL;
  CHECK_EQ(late.calls, 1);
  CHECK_RC(late.rc, DLOCK_ECLOSED);
  td_fix_close(&f);
}
TD_DRIVERS(scan_and_ping)
/* ---- the queue ---- */
static void queue_ops(int kind) {
  td_fix f;
  CHECK_RC(td_fix_open(&f, kind, 0), 0);
  dlock_queue *q, *d;
  CHECK_RC(dlock_queue_new(f.c, "k:q", &q), 0);
  CHECK_RC(dlock_queue_new_delayed(f.c, "k:q", &d), 0);
  td_got g[12] = {{0}};
  char buf[2] = {'x', 0};
  CHECK_RC(dlock_queue_offer_async(q, buf, 2, td_on_done, &g[0], NULL), 0);
  buf[0] = 'y'; /* copied within the call */
  CHECK_EQ(g[0].calls, 0);
  RUN(&f, &g[0]);
  CHECK_RC(g[0].rc, 0);
  CHECK_RC(dlock_queue_offer_first_async(q, "w", 1, td_on_done, &g[1], NULL),
           0);
  RUN(&f, &g[1]);
  int64_t n = -1;
  CHECK_RC(dlock_queue_size_async(q, &n, td_on_done, &g[2], NULL), 0);
  RUN(&f, &g[2]);
  CHECK_RC(g[2].rc, 0);
  CHECK_EQ(n, 2);
  void *v = NULL;
  size_t len = 0;
  CHECK_RC(dlock_queue_poll_async(q, 0, &v, &len, td_on_done, &g[3], NULL), 0);
  RUN(&f, &g[3]);
  CHECK_RC(g[3].rc, 0);
  CHECK(len == 1 && memcmp(v, "w", 1) == 0);
  dlock_queue_value_free(v);
  CHECK_RC(dlock_queue_poll_last_async(q, 0, &v, &len, td_on_done, &g[4],
                                       NULL),
           0);
  RUN(&f, &g[4]);
  CHECK_RC(g[4].rc, 0);
  CHECK(len == 2 && memcmp(v, "x", 2) == 0);
  dlock_queue_value_free(v);
  /* Empty: the wait runs out. */
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_queue_poll_async(q, 200, &v, &len, td_on_done, &g[5], NULL),
           0);
  RUN(&f, &g[5]);
  CHECK_RC(g[5].rc, DLOCK_EBUSY);
  CHECK(v == NULL && th_now_ms() - t0 >= 200);
  /* A delayed value reaches a waiting delayed poll when due. */
  CHECK_RC(dlock_queue_poll_async(d, 5000, &v, &len, td_on_done, &g[6], NULL),
           0);
  t0 = th_now_ms();
  CHECK_RC(dlock_queue_offer_delayed_async(q, 300, "later", 5, td_on_done,
                                           &g[7], NULL),
           0);
  RUN(&f, &g[7]);
  CHECK_RC(g[7].rc, 0);
  CHECK_RC(dlock_queue_delayed_size_async(q, &n, td_on_done, &g[8], NULL), 0);
  RUN(&f, &g[8]);
  CHECK_EQ(n, 1);
  RUN(&f, &g[6]);
  CHECK_RC(g[6].rc, 0);
  CHECK(len == 5 && memcmp(v, "later", 5) == 0);
  CHECK(th_now_ms() - t0 >= 280);
  dlock_queue_value_free(v);
  /* A waiting poll wakes on an offer (the channel, not the recheck). */
  CHECK_RC(dlock_queue_poll_async(q, 5000, &v, &len, td_on_done, &g[9], NULL),
           0);
  td_run_for(&f.t, 1200);
  CHECK_EQ(g[9].calls, 0);
  t0 = th_now_ms();
  CHECK_RC(dlock_queue_offer_async(q, "z", 1, td_on_done, &g[10], NULL), 0);
  RUN(&f, &g[9]);
  CHECK_RC(g[9].rc, 0);
  CHECK(th_now_ms() - t0 < 300);
  dlock_queue_value_free(v);
  /* A reliable take and its ack. */
  td_got rt = {0}, ra = {0}, rb = {0};
  CHECK_RC(dlock_queue_offer(q, "r", 1), DLOCK_EINVAL); /* blocking */
  CHECK_RC(dlock_queue_offer_async(q, "r", 1, td_on_done, &rb, NULL), 0);
  RUN(&f, &rb);
  CHECK_RC(dlock_queue_poll_reliable_async(q, 1000, &v, &len, td_on_done, &rt,
                                           NULL),
           0);
  RUN(&f, &rt);
  CHECK_RC(rt.rc, 0);
  CHECK(len == 1 && memcmp(v, "r", 1) == 0);
  CHECK_EQ(th_cmd_int(&th_srv, "ZCARD {k:q}:timeout"), 1);
  CHECK_RC(dlock_queue_ack_async(q, v, len, td_on_done, &ra, NULL), 0);
  dlock_queue_value_free(v); /* the ack copied it */
  RUN(&f, &ra);
  CHECK_RC(ra.rc, 0);
  memset(&ra, 0, sizeof ra);
  CHECK_RC(dlock_queue_ack_async(q, "r", 1, td_on_done, &ra, NULL), 0);
  RUN(&f, &ra);
  CHECK_RC(ra.rc, DLOCK_ENOTOWNER);
  /* Refused calls never call back; blocking calls are refused. */
  CHECK_RC(dlock_queue_poll_async(q, 0, NULL, NULL, td_on_done, &g[11], NULL),
           DLOCK_EINVAL);
  CHECK_RC(dlock_queue_offer_async(q, "z", 1, NULL, NULL, NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_queue_offer(q, "z", 1), DLOCK_EINVAL);
  td_run_for(&f.t, 50);
  CHECK_EQ(g[11].calls, 0);
  /* A command's error reply (LPOP on a string) is its code, the server's
   * text the detail, as on a blocking client; the key unchanged. */
  th_cmd_int(&th_srv, "SET k:qstr 7");
  dlock_queue *sq;
  CHECK_RC(dlock_queue_new(f.c, "k:qstr", &sq), 0);
  td_got wt = {0};
  v = NULL;
  CHECK_RC(dlock_queue_poll_async(sq, 0, &v, &len, td_on_done, &wt, NULL), 0);
  RUN(&f, &wt);
  CHECK_RC(wt.rc, DLOCK_EWRONGTYPE);
  CHECK(strstr(wt.msg, "WRONGTYPE") != NULL);
  CHECK(v == NULL);
  CHECK_EQ(th_cmd_int(&th_srv, "GET k:qstr"), 7);
  dlock_queue_free(sq);
  dlock_queue_free(q);
  dlock_queue_free(d);
  td_fix_close(&f);
}
TD_DRIVERS(queue_ops)

/* Cancel ends a wait (nothing taken); close completes a pending one; a
 * handle freed with a poll pending is freed after it. */
static void queue_cancel_close(int kind) {
  td_fix f;
  CHECK_RC(td_fix_open(&f, kind, 0), 0);
  dlock_queue *q, *q2;
  CHECK_RC(dlock_queue_new(f.c, "k:qc", &q), 0);
  CHECK_RC(dlock_queue_new_delayed(f.c, "k:qc", &q2), 0);
  td_got c = {0}, w = {0};
  dlock_op *op = NULL;
  void *v1 = NULL, *v2 = NULL;
  CHECK_RC(dlock_queue_poll_async(q, 20000, &v1, NULL, td_on_done, &c, &op),
           0);
  CHECK(op != NULL);
  CHECK_RC(dlock_queue_poll_async(q2, 20000, &v2, NULL, td_on_done, &w, NULL),
           0);
  td_run_for(&f.t, 150);
  CHECK_EQ(c.calls + w.calls, 0);
  int64_t t0 = th_now_ms();
  dlock_op_cancel(op);
  CHECK_EQ(c.calls, 0);
  RUN(&f, &c);
  CHECK_RC(c.rc, DLOCK_ECANCELED);
  CHECK(v1 == NULL && th_now_ms() - t0 < 1000);
  dlock_queue_free(q);
  dlock_queue_free(q2); /* its poll still runs */
  dlock_client_close(f.c);
  f.c = NULL;
  CHECK_EQ(w.calls, 1);
  /* Closed first; or cancelled by the free, its delayed poll's script in
   * flight then read within the close (dl_aconn_drain_takes). */
  CHECK(w.rc == DLOCK_ECLOSED || w.rc == DLOCK_ECANCELED);
  CHECK(v2 == NULL);
  td_fix_close(&f);
}
TD_DRIVERS(queue_cancel_close)

/* One try of t_queue_close_takes: 24 values, 16 polls (half from each
 * end) whose pops the server has run, their replies unread (the loop not
 * run since), then the close. Every value must be a poll's (rc 0) or still
 * in the queue, once. *within: the polls that completed within the close
 * (0: every reply was read before it, the window missed). */
static void takes_at_close(int *within) {
  enum { N = 16, V = 24 };
  *within = -1;
  dlock_loop *lp = NULL;
  CHECK_RC(dlock_loop_new(NULL, &lp), 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = th_srv.url;
  dlock_client *c = NULL;
  CHECK_RC(dlock_client_open_async(&o, lp, &c), 0);
  dlock_queue *q;
  CHECK_RC(dlock_queue_new(c, "k:qt", &q), 0);
  freeReplyObject(th_cmd(&th_srv, "DEL k:qt"));
  for (int i = 0; i < V; i++)
    freeReplyObject(th_cmd(&th_srv, "RPUSH k:qt v%02d", i));
  td_got g[N];
  void *v[N];
  size_t len[N];
  memset(g, 0, sizeof g);
  memset(v, 0, sizeof v);
  long long pops = th_calls(&th_srv, "lpop") + th_calls(&th_srv, "rpop");
  for (int i = 0; i < N; i++)
    CHECK_RC((i % 2 ? dlock_queue_poll_last_async : dlock_queue_poll_async)(
                 q, 10000, &v[i], &len[i], td_on_done, &g[i], NULL),
             0);
  /* Run the loop a step at a time until the server has run all 16 pops,
   * then no more: their replies wait in the socket. */
  bool ran = false;
  for (int64_t end = th_now_ms() + th_soon(5000); !ran && th_now_ms() < end;) {
    CHECK(dlock_loop_run(lp, 0) >= 0);
    for (int64_t t = th_now_ms() + 20; th_now_ms() < t;) {
      if (th_calls(&th_srv, "lpop") + th_calls(&th_srv, "rpop") >= pops + N) {
        ran = true;
        break;
      }
      th_sleep_ms(1);
    }
  }
  CHECK(ran);
  int before = 0;
  for (int i = 0; i < N; i++)
    before += g[i].calls;
  dlock_queue_free(q);
  dlock_client_close(c);
  *within = N - before;
  int seen[V] = {0}, polled = 0;
  for (int i = 0; i < N; i++) {
    CHECK_EQ(g[i].calls, 1);
    if (g[i].rc != 0) {
      CHECK_RC(g[i].rc, DLOCK_ECLOSED);
      continue;
    }
    int k = -1;
    CHECK(len[i] == 3 && sscanf(v[i], "v%d", &k) == 1 && k >= 0 && k < V);
    if (k >= 0 && k < V) seen[k]++;
    polled++;
    dlock_queue_value_free(v[i]);
  }
  redisReply *r = th_cmd(&th_srv, "LRANGE k:qt 0 -1");
  CHECK(r && r->type == REDIS_REPLY_ARRAY);
  for (size_t i = 0; r && i < r->elements; i++) {
    int k = -1;
    CHECK(sscanf(r->element[i]->str, "v%d", &k) == 1 && k >= 0 && k < V);
    if (k >= 0 && k < V) seen[k]++;
  }
  fprintf(stderr, "    %d polls ended before the close, %d with a value, %zu "
          "values left of %d\n", before, polled, r ? r->elements : 0, V);
  freeReplyObject(r);
  for (int k = 0; k < V; k++) {
    if (seen[k] != 1) fprintf(stderr, "    v%02d seen %d times\n", k, seen[k]);
    CHECK_EQ(seen[k], 1);
  }
  dlock_loop_free(lp);
}

/* An event-loop client closed while its polls' pops have run on the server
 * but their replies are not yet read: the close reads them (its command
 * timeout at most) and each such poll completes with its value, so none
 * is lost. A try whose replies were all read before the close is made
 * again, up to 3 times. */
static void t_queue_close_takes(void) {
  int within = 0;
  for (int tries = 0; tries < 3 && within == 0; tries++)
    takes_at_close(&within);
  CHECK(within > 0);
}

TH_MAIN(T(t_queue_close_takes), TD_T(semaphore_ops), TD_T(semaphore_cancel_close), TD_T(permits_ops),
        TD_T(permits_cancel_close), TD_T(latch_ops), TD_T(latch_cancel_close),
        TD_T(rwlock_one_owner), TD_T(multilock_ops),
        TD_T(multilock_cancel_close), TD_T(lock_reads),
        TD_T(scan_and_ping), TD_T(queue_ops), TD_T(queue_cancel_close),
        TD_T(plainlock_ops))
