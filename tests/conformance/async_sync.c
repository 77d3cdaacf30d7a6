/* async_sync.c: the kinds beside the locks on an event-loop client (the
 * built-in driver), on every backend that has them and the loop
 * (DL_FEAT_LOOP): a wait giving up in time, a waiter on the loop woken by
 * another client's release, count-down or offer, and a permit's take-away
 * heard on the loop. */
#include "conformance.h"

#include <string.h>

#define HAS(f) (cf_has(DL_FEAT_LOOP) && cf_has(f))

/* Starts nothing; runs the loop until g completes or `ms`: whether it did
 * (a failure says which call). */
static bool done_in(cf_fix *f, cf_got *g, int ms) {
  return cf_run_until(f->lp, &g->calls, ms);
}

/* Runs the loop for 200 ms: not a synchronisation (a waiter not yet
 * waiting when the action comes completes at once, and the test passes as
 * well, showing less). */
static void let_it_wait(cf_fix *f) {
  int zero = 0;
  cf_run_until(f->lp, &zero, 200);
}

/* An action by another client wakes the loop's waiter g within
 * cf_wake_ms() of t0. */
static bool woken(cf_fix *f, cf_got *g, int64_t t0, const char *what) {
  bool ok = done_in(f, g, 5000);
  int64_t took = th_now_ms() - t0;
  fprintf(stderr, "    %s: the waiter on the loop woken %lld ms after\n", what,
          (long long)took);
  return ok && took <= cf_wake_ms();
}

static void t_async_semaphore(void) {
  CF_NEEDS_SERVER();
  if (!HAS(DL_FEAT_SEMAPHORE)) return;
  cf_fix f;
  CHECK_RC(cf_fix_open(&f, 0), 0);
  dlock_client *b = cf_client(0);
  CHECK(b != NULL);
  char name[64];
  cf_name(name, sizeof name, "sem");
  dlock_semaphore *s, *sb;
  CHECK_RC(dlock_semaphore_new(f.c, name, &s), 0);
  CHECK_RC(dlock_semaphore_new(b, name, &sb), 0);
  cf_got g = {0};
  CHECK_RC(dlock_semaphore_try_set_permits_async(s, 1, cf_done, &g, NULL), 0);
  CHECK(done_in(&f, &g, 3000));
  CHECK_EQ(g.rc, 1);
  g = (cf_got){0};
  CHECK_RC(dlock_semaphore_acquire_async(s, 1, 0, cf_done, &g, NULL), 0);
  CHECK(done_in(&f, &g, 3000));
  CHECK_RC(g.rc, 0);
  g = (cf_got){0};
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_semaphore_acquire_async(s, 1, CF_WAIT_MS, cf_done, &g, NULL),
           0);
  CHECK(done_in(&f, &g, 3000));
  CHECK_RC(g.rc, DLOCK_EBUSY);
  int64_t took = th_now_ms() - t0;
  CHECK(cf_in_time(took, CF_WAIT_MS, 10));
  g = (cf_got){0};
  CHECK_RC(dlock_semaphore_acquire_async(s, 1, 5000, cf_done, &g, NULL), 0);
  let_it_wait(&f);
  CHECK_EQ(g.calls, 0);
  CHECK_RC(dlock_semaphore_release(sb, 1), 0);
  CHECK(woken(&f, &g, th_now_ms(), "semaphore"));
  CHECK_RC(g.rc, 0);
  dlock_semaphore_free(s);
  dlock_semaphore_free(sb);
  dlock_client_close(b);
  cf_fix_close(&f);
}

static int plost;
static int64_t plost_at;
static void on_permit_lost(dlock_permits *p, const char *id, void *ud) {
  (void)p, (void)id, (void)ud;
  if (!plost) plost_at = th_now_ms();
  plost = 1;
}

static void t_async_permits(void) {
  CF_NEEDS_SERVER();
  if (!HAS(DL_FEAT_PERMITS)) return;
  cf_fix f;
  CHECK_RC(cf_fix_open(&f, 3000), 0);
  dlock_client *b = cf_client(0);
  CHECK(b != NULL);
  char name[64];
  cf_name(name, sizeof name, "permits");
  dlock_permits *p, *pb;
  CHECK_RC(dlock_permits_new(f.c, name, &p), 0);
  CHECK_RC(dlock_permits_new(b, name, &pb), 0);
  CHECK_EQ(dlock_permits_try_set(pb, 1), 1);
  char id[DLOCK_PERMIT_ID_LEN], id2[DLOCK_PERMIT_ID_LEN];
  cf_got g = {0};
  CHECK_RC(dlock_permits_acquire_async(p, 0, 0, id, cf_done, &g, NULL), 0);
  CHECK(done_in(&f, &g, 3000));
  CHECK_RC(g.rc, 0);
  g = (cf_got){0};
  int64_t t0 = th_now_ms();
  CHECK_RC(
      dlock_permits_acquire_async(p, CF_WAIT_MS, 0, id2, cf_done, &g, NULL), 0);
  CHECK(done_in(&f, &g, 3000));
  CHECK_RC(g.rc, DLOCK_EBUSY);
  int64_t took = th_now_ms() - t0;
  CHECK(cf_in_time(took, CF_WAIT_MS, 10));
  /* A take-away by another client is heard on the loop within 100 ms. */
  plost = 0;
  dlock_permits_on_lost(p, on_permit_lost, NULL);
  CHECK_EQ(dlock_permits_force_release(pb, id), 1);
  t0 = th_now_ms();
  bool heard = cf_run_until(f.lp, &plost, 3000);
  fprintf(stderr, "    a permit's take-away heard %s%lld ms after\n",
          heard ? "" : "not in ",
          (long long)((heard ? plost_at : th_now_ms()) - t0));
  CHECK(heard && plost_at - t0 <= CF_HEARD_MS);
  g = (cf_got){0};
  CHECK_RC(dlock_permits_release_async(p, id, cf_done, &g, NULL), 0);
  CHECK(done_in(&f, &g, 3000));
  CHECK_RC(g.rc, DLOCK_ELOST);
  /* A waiter on the loop is woken by another client's release. */
  char idb[DLOCK_PERMIT_ID_LEN];
  CHECK_RC(dlock_permits_try_acquire(pb, 0, 10000, idb), 0);
  g = (cf_got){0};
  CHECK_RC(dlock_permits_acquire_async(p, 5000, 0, id2, cf_done, &g, NULL), 0);
  let_it_wait(&f);
  CHECK_EQ(g.calls, 0);
  CHECK_RC(dlock_permits_release(pb, idb), 0);
  CHECK(woken(&f, &g, th_now_ms(), "permits"));
  CHECK_RC(g.rc, 0);
  dlock_permits_free(p);
  dlock_permits_free(pb);
  dlock_client_close(b);
  cf_fix_close(&f);
}

static void t_async_latch(void) {
  CF_NEEDS_SERVER();
  if (!HAS(DL_FEAT_LATCH)) return;
  cf_fix f;
  CHECK_RC(cf_fix_open(&f, 0), 0);
  dlock_client *b = cf_client(0);
  CHECK(b != NULL);
  char name[64];
  cf_name(name, sizeof name, "latch");
  dlock_latch *l, *lb;
  CHECK_RC(dlock_latch_new(f.c, name, &l), 0);
  CHECK_RC(dlock_latch_new(b, name, &lb), 0);
  cf_got g = {0};
  CHECK_RC(dlock_latch_try_set_count_async(l, 1, cf_done, &g, NULL), 0);
  CHECK(done_in(&f, &g, 3000));
  CHECK_EQ(g.rc, 1);
  g = (cf_got){0};
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_latch_await_async(l, CF_WAIT_MS, cf_done, &g, NULL), 0);
  CHECK(done_in(&f, &g, 3000));
  CHECK_RC(g.rc, DLOCK_EBUSY);
  int64_t took = th_now_ms() - t0;
  CHECK(cf_in_time(took, CF_WAIT_MS, 10));
  g = (cf_got){0};
  CHECK_RC(dlock_latch_await_async(l, 5000, cf_done, &g, NULL), 0);
  let_it_wait(&f);
  CHECK_EQ(g.calls, 0);
  CHECK_RC(dlock_latch_count_down(lb), 0);
  CHECK(woken(&f, &g, th_now_ms(), "latch"));
  CHECK_RC(g.rc, 0);
  dlock_latch_free(l);
  dlock_latch_free(lb);
  dlock_client_close(b);
  cf_fix_close(&f);
}

static void t_async_queue(void) {
  CF_NEEDS_SERVER();
  if (!HAS(DL_FEAT_QUEUE)) return;
  cf_fix f;
  CHECK_RC(cf_fix_open(&f, 0), 0);
  dlock_client *b = cf_client(0);
  CHECK(b != NULL);
  char name[64];
  cf_name(name, sizeof name, "queue");
  dlock_queue *q, *qb;
  CHECK_RC(dlock_queue_new(f.c, name, &q), 0);
  CHECK_RC(dlock_queue_new(b, name, &qb), 0);
  cf_got g = {0};
  CHECK_RC(dlock_queue_offer_async(q, "a", 1, cf_done, &g, NULL), 0);
  CHECK(done_in(&f, &g, 3000));
  CHECK_RC(g.rc, 0);
  g = (cf_got){0};
  CHECK_RC(dlock_queue_offer_first_async(q, "z", 1, cf_done, &g, NULL), 0);
  CHECK(done_in(&f, &g, 3000));
  void *v = NULL;
  size_t len = 0;
  g = (cf_got){0};
  CHECK_RC(dlock_queue_poll_async(q, 0, &v, &len, cf_done, &g, NULL), 0);
  CHECK(done_in(&f, &g, 3000));
  CHECK_RC(g.rc, 0);
  CHECK(len == 1 && memcmp(v, "z", 1) == 0);
  dlock_queue_value_free(v);
  g = (cf_got){0};
  CHECK_RC(dlock_queue_poll_last_async(q, 0, &v, &len, cf_done, &g, NULL), 0);
  CHECK(done_in(&f, &g, 3000));
  CHECK_RC(g.rc, 0);
  CHECK(len == 1 && memcmp(v, "a", 1) == 0);
  dlock_queue_value_free(v);
  g = (cf_got){0};
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_queue_poll_async(q, CF_WAIT_MS, &v, &len, cf_done, &g, NULL),
           0);
  CHECK(done_in(&f, &g, 3000));
  CHECK_RC(g.rc, DLOCK_EBUSY);
  int64_t took = th_now_ms() - t0;
  CHECK(cf_in_time(took, CF_WAIT_MS, 10));
  g = (cf_got){0};
  CHECK_RC(dlock_queue_poll_async(q, 5000, &v, &len, cf_done, &g, NULL), 0);
  let_it_wait(&f);
  CHECK_EQ(g.calls, 0);
  CHECK_RC(dlock_queue_offer(qb, "w", 1), 0);
  CHECK(woken(&f, &g, th_now_ms(), "queue"));
  CHECK_RC(g.rc, 0);
  CHECK(len == 1 && memcmp(v, "w", 1) == 0);
  dlock_queue_value_free(v);
  dlock_queue_free(q);
  dlock_queue_free(qb);
  dlock_client_close(b);
  cf_fix_close(&f);
}

/* The kind's first event-loop operation on a fresh handle, run to its
 * end: its code (the start's, or the callback's). */
static int first_async_op(cf_fix *f, dl_feature k, const char *name) {
  cf_got g = {0};
  char id[DLOCK_PERMIT_ID_LEN];
  void *v = NULL;
  int rc;
  cf_lock h = {0};
  dlock_semaphore *s = NULL;
  dlock_permits *p = NULL;
  dlock_latch *l = NULL;
  dlock_queue *q = NULL;
  switch (k) {
  case DL_FEAT_SEMAPHORE:
    if ((rc = dlock_semaphore_new(f->c, name, &s)) == 0)
      rc = dlock_semaphore_acquire_async(s, 1, 0, cf_done, &g, NULL);
    break;
  case DL_FEAT_PERMITS:
    if ((rc = dlock_permits_new(f->c, name, &p)) == 0)
      rc = dlock_permits_acquire_async(p, 0, 0, id, cf_done, &g, NULL);
    break;
  case DL_FEAT_LATCH:
    if ((rc = dlock_latch_new(f->c, name, &l)) == 0)
      rc = dlock_latch_await_async(l, 0, cf_done, &g, NULL);
    break;
  case DL_FEAT_QUEUE:
    if ((rc = dlock_queue_new(f->c, name, &q)) == 0)
      rc = dlock_queue_poll_async(q, 0, &v, NULL, cf_done, &g, NULL);
    break;
  default:
    if ((rc = cf_lock_new(f->c, k, name, "x", &h)) == 0)
      rc = dlock_lock_acquire_async(h.l, 0, 10000, cf_done, &g, NULL);
  }
  if (rc == 0)
    rc = cf_run_until(f->lp, &g.calls, 3000) ? g.rc : DLOCK_ETIMEDOUT;
  if (k <= DL_FEAT_PLAIN && rc == 0) {
    g = (cf_got){0};
    if (dlock_lock_release_async(h.l, cf_done, &g, NULL) == 0)
      cf_run_until(f->lp, &g.calls, 3000);
  }
  if (h.l) cf_lock_free(&h);
  dlock_semaphore_free(s);
  dlock_permits_free(p);
  dlock_latch_free(l);
  dlock_queue_free(q);
  dlock_queue_value_free(v);
  return rc;
}

/* On the loop too, each kind the backend lacks answers DLOCK_ENOTSUP
 * naming the backend and the kind (the callback never runs), and each it
 * has runs. */
static void t_async_kinds(void) {
  CF_NEEDS_SERVER();
  if (!cf_has(DL_FEAT_LOOP)) { /* the open on a loop is refused, named */
    dlock_loop *lp;
    CHECK_RC(dlock_loop_new(NULL, &lp), 0);
    dlock_client *c = NULL;
    int rc = cf_client_async(lp, 0, &c);
    CHECK(cf_notsup(rc, dlock_client_open_errmsg(), DL_FEAT_LOOP));
    dlock_client_close(c);
    dlock_loop_free(lp);
    return;
  }
  cf_fix f;
  CHECK_RC(cf_fix_open(&f, 0), 0);
  int wrong = 0;
  for (dl_feature k = DL_FEAT_LOCK; k <= DL_FEAT_QUEUE; k++) {
    char name[64];
    cf_name(name, sizeof name, dl_feature_name(k));
    int rc = first_async_op(&f, k, name);
    if (!cf_has(k)) {
      wrong += !cf_notsup(rc, dlock_client_errmsg(f.c), k);
    } else if (rc < 0 && rc != DLOCK_EBUSY) {
      fprintf(stderr, "    %s on the loop: %s: %s\n", dl_feature_name(k),
              dlock_err_name(rc), dlock_client_errmsg(f.c));
      wrong++;
    }
  }
  CHECK_EQ(wrong, 0);
  cf_fix_close(&f);
}

const th_test cf_async_sync_tests[] = {
    T_BARE(t_async_kinds), T_BARE(t_async_semaphore), T_BARE(t_async_permits),
    T_BARE(t_async_latch), T_BARE(t_async_queue),
};
const size_t cf_async_sync_ntests =
    sizeof cf_async_sync_tests / sizeof cf_async_sync_tests[0];
