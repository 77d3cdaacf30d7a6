/* support.c: what the run's backend supports, by the library's table
 * (src/core/support.h): each kind it lacks answers DLOCK_ENOTSUP naming the
 * backend and the kind, each kind it has does not; replica
 * acknowledgement; waking a waiter without polling. */
#include "client/client.h"
#include "conformance.h"

#include <pthread.h>
#include <string.h>

/* The client's backend is the one the suite asks the table about. */
static void t_backend_named(void) {
  CF_NEEDS_SERVER();
  dlock_client *c = cf_client(0);
  CHECK(c != NULL);
  CHECK(strcmp(c->backend->ops->name, cf_backend) == 0);
  dlock_client_close(c);
}

/* The kind's first operation on a fresh handle: its result (a handle that
 * could not be made: the _new's code). */
static int first_op(dlock_client *c, dl_feature f, const char *name) {
  int rc;
  switch (f) {
  case DL_FEAT_SEMAPHORE: {
    dlock_semaphore *s = NULL;
    if ((rc = dlock_semaphore_new(c, name, &s)) == 0)
      rc = dlock_semaphore_try_set_permits(s, 1);
    dlock_semaphore_free(s);
    return rc;
  }
  case DL_FEAT_PERMITS: {
    dlock_permits *p = NULL;
    if ((rc = dlock_permits_new(c, name, &p)) == 0)
      rc = dlock_permits_try_set(p, 1);
    dlock_permits_free(p);
    return rc;
  }
  case DL_FEAT_LATCH: {
    dlock_latch *l = NULL;
    if ((rc = dlock_latch_new(c, name, &l)) == 0)
      rc = dlock_latch_try_set_count(l, 1);
    dlock_latch_free(l);
    return rc;
  }
  case DL_FEAT_QUEUE: {
    dlock_queue *q = NULL;
    if ((rc = dlock_queue_new(c, name, &q)) == 0)
      rc = dlock_queue_offer(q, "x", 1);
    dlock_queue_free(q);
    return rc;
  }
  case DL_FEAT_ELECTION: {
    dlock_leader *l = NULL;
    if ((rc = dlock_leader_new(c, name, "me", &l)) == 0 &&
        (rc = dlock_leader_start(l)) == 0)
      rc = dlock_leader_try_await(l, 5000);
    dlock_leader_free(l);
    return rc;
  }
  default: {
    cf_lock h;
    if ((rc = cf_lock_new(c, f, name, NULL, &h)) == 0) {
      rc = dlock_lock_try_acquire(h.l, 0, 10000, NULL);
      if (rc == 0) dlock_lock_release(h.l);
    }
    cf_lock_free(&h);
    return rc;
  }
  }
}

static void t_kinds(void) {
  CF_NEEDS_SERVER();
  dlock_client *c = cf_client(0);
  CHECK(c != NULL);
  int wrong = 0;
  for (dl_feature f = DL_FEAT_LOCK; f <= DL_FEAT_ELECTION; f++) {
    char name[64];
    cf_name(name, sizeof name, dl_feature_name(f));
    int rc = first_op(c, f, name);
    if (!cf_has(f)) {
      wrong += !cf_notsup(rc, dlock_client_errmsg(c), f);
    } else if (rc < 0) {
      fprintf(stderr, "    %s on %s: %s: %s\n", dl_feature_name(f), cf_dep.kind,
              dlock_err_name(rc), dlock_client_errmsg(c));
      wrong++;
    }
  }
  CHECK_EQ(wrong, 0);
  dlock_client_close(c);
}

/* Replica acknowledgement: where the backend has none, asking for it is
 * DLOCK_ENOTSUP at the open; where it has, an acquire is acknowledged by
 * the deployment's replica (Sentinel's) or refused with DLOCK_ENOTACKED
 * (no replica), leaving nothing held. */
static void t_replica_ack(void) {
  CF_NEEDS_SERVER();
  dlock_client_options o;
  cf_options(&o, 0);
  o.min_replicas_acked = 1;
  /* Sentinel's replica acknowledges (a loaded machine may take a while);
   * elsewhere none can, and the wait only costs time. */
  bool replica = strcmp(cf_dep.kind, "sentinel") == 0;
  o.replicas_timeout_ms = replica ? 3000 : 200;
  dlock_client *c = NULL;
  int rc = dlock_client_open(&o, &c);
  if (!cf_has(DL_FEAT_REPLICA_ACK)) {
    dlock_client_close(c);
    /* The open refuses it (it was taken and ignored on zk://). */
    CHECK(cf_notsup(rc, dlock_client_open_errmsg(), DL_FEAT_REPLICA_ACK));
    return;
  }
  CHECK_RC(rc, 0);
  char name[64];
  cf_name(name, sizeof name, "acked");
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, name, NULL, &l), 0);
  rc = dlock_lock_try_acquire(l, 0, 10000, NULL);
  if (rc != (replica ? 0 : DLOCK_ENOTACKED))
    fprintf(stderr, "    %s: %s\n", dlock_err_name(rc), dlock_client_errmsg(c));
  CHECK_RC(rc, replica ? 0 : DLOCK_ENOTACKED);
  CHECK_EQ(dlock_lock_is_locked(l), replica ? 1 : 0);
  if (replica) CHECK_EQ(dlock_lock_release(l), 1);
  dlock_lock_free(l);
  dlock_client_close(c);
}

typedef struct waiter {
  dlock_lock *l;
  _Atomic int64_t at;
  int rc;
} waiter;

static void *wait_for_it(void *arg) {
  waiter *w = arg;
  w->rc = dlock_lock_try_acquire(w->l, 5000, 10000, NULL);
  atomic_store(&w->at, th_now_ms());
  return NULL;
}

/* A waiter is handed the lock within 100 ms of the release where the
 * server wakes it (wait-notify), within a second where it retries. */
static void t_handoff(void) {
  CF_NEEDS_SERVER();
  dlock_client *a = cf_client(0), *b = cf_client(0);
  CHECK(a && b);
  char name[64];
  cf_name(name, sizeof name, "handoff");
  dlock_lock *h;
  waiter w = {0};
  CHECK_RC(dlock_lock_new(a, name, NULL, &h), 0);
  CHECK_RC(dlock_lock_new(b, name, "w", &w.l), 0);
  CHECK_RC(dlock_lock_try_acquire(h, 0, 10000, NULL), 0);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, wait_for_it, &w) == 0);
  /* Until the waiter shows in the lock's snapshot; where waiters leave no
   * trace (they retry, redlock://) at most 200 ms: a waiter not yet
   * waiting at the release takes the lock at once, and the test passes as
   * well (it then shows less). */
  cf_waiters_reach(h, 1, cf_has(DL_FEAT_WAIT_NOTIFY) ? 3000 : 200);
  CHECK_EQ(dlock_lock_release(h), 1);
  int64_t t0 = th_now_ms();
  pthread_join(t, NULL);
  CHECK_RC(w.rc, 0);
  int64_t took = atomic_load(&w.at) - t0;
  fprintf(stderr, "    handed over in %lld ms\n", (long long)took);
  CHECK(took <= cf_wake_ms());
  CHECK_EQ(dlock_lock_release(w.l), 1);
  dlock_lock_free(h);
  dlock_lock_free(w.l);
  dlock_client_close(a);
  dlock_client_close(b);
}

const th_test cf_support_tests[] = {
    T_BARE(t_backend_named),
    T_BARE(t_kinds),
    T_BARE(t_replica_ack),
    T_BARE(t_handoff),
};
const size_t cf_support_ntests =
    sizeof cf_support_tests / sizeof cf_support_tests[0];
