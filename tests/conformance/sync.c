/* sync.c: the kinds beside the locks, blocking form, on every backend that
 * has them: the semaphore's and the permits' counts, waits and wake-ups,
 * a permit's lease running out and its take-away heard, the latch, the
 * queue's order, waits and delayed values, and one leader at a time with
 * a prompt successor. */
#include "conformance.h"

#include <string.h>

/* Not a synchronisation: a waiter not yet waiting when the action comes
 * returns at once, and the test passes as well (it then shows less). */
#define LET_IT_WAIT() th_sleep_ms(200)

/* ---- the semaphore ---- */
static int sem_wait(void *s) {
  return dlock_semaphore_try_acquire(s, 1, 5000);
}

static void t_semaphore(void) {
  CF_NEEDS_SERVER();
  if (!cf_has(DL_FEAT_SEMAPHORE)) return;
  dlock_client *a = cf_client(0), *b = cf_client(0);
  CHECK(a && b);
  char name[64];
  cf_name(name, sizeof name, "sem");
  dlock_semaphore *sa, *sb;
  CHECK_RC(dlock_semaphore_new(a, name, &sa), 0);
  CHECK_RC(dlock_semaphore_new(b, name, &sb), 0);
  CHECK_EQ(dlock_semaphore_try_set_permits(sa, 2), 1);
  CHECK_EQ(dlock_semaphore_try_set_permits(sb, 5), 0);
  CHECK_EQ(dlock_semaphore_get_available(sb), 2);
  CHECK_RC(dlock_semaphore_try_acquire(sa, 2, 0), 0);
  CHECK_EQ(dlock_semaphore_get_available(sb), 0);
  CHECK_RC(dlock_semaphore_try_acquire(sb, 1, 0), DLOCK_EBUSY);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_semaphore_try_acquire(sb, 1, CF_WAIT_MS), DLOCK_EBUSY);
  int64_t took = th_now_ms() - t0;
  CHECK(cf_in_time(took, CF_WAIT_MS, 10));
  cf_bg w;
  CHECK(cf_bg_start(&w, sem_wait, sb) == 0);
  LET_IT_WAIT();
  CHECK_RC(dlock_semaphore_release(sa, 1), 0);
  t0 = th_now_ms();
  cf_bg_join(&w);
  CHECK_RC(w.rc, 0);
  fprintf(stderr, "    a waiter woken %lld ms after the release\n",
          (long long)(w.at - t0));
  CHECK(w.at - t0 <= cf_wake_ms());
  CHECK_RC(dlock_semaphore_add_permits(sa, 3), 0);
  CHECK_EQ(dlock_semaphore_drain(sb), 3);
  CHECK_EQ(dlock_semaphore_get_available(sa), 0);
  dlock_semaphore_free(sa);
  dlock_semaphore_free(sb);
  dlock_client_close(a);
  dlock_client_close(b);
}

/* ---- the permit-expirable semaphore ---- */
static dlock_permits *permit_waiter;
static int permit_wait(void *id) {
  return dlock_permits_try_acquire(permit_waiter, 5000, 10000, id);
}

static _Atomic int64_t permit_lost_at;
static void on_permit_lost(dlock_permits *p, const char *id, void *ud) {
  (void)p, (void)id, (void)ud;
  int64_t zero = 0;
  atomic_compare_exchange_strong(&permit_lost_at, &zero, th_now_ms());
}

static void t_permits(void) {
  CF_NEEDS_SERVER();
  if (!cf_has(DL_FEAT_PERMITS)) return;
  dlock_client *a = cf_client(3000), *b = cf_client(0);
  CHECK(a && b);
  char name[64];
  cf_name(name, sizeof name, "permits");
  dlock_permits *pa, *pb;
  CHECK_RC(dlock_permits_new(a, name, &pa), 0);
  CHECK_RC(dlock_permits_new(b, name, &pb), 0);
  CHECK_EQ(dlock_permits_try_set(pa, 2), 1);
  CHECK_EQ(dlock_permits_try_set(pb, 7), 0);
  char id1[DLOCK_PERMIT_ID_LEN], id2[DLOCK_PERMIT_ID_LEN];
  char id3[DLOCK_PERMIT_ID_LEN];
  CHECK_RC(dlock_permits_try_acquire(pa, 0, 0, id1), 0);
  CHECK_RC(dlock_permits_try_acquire(pa, 0, 0, id2), 0);
  CHECK(strcmp(id1, id2) != 0);
  CHECK_EQ(dlock_permits_get_available(pb), 0);
  CHECK_RC(dlock_permits_try_acquire(pb, 0, 10000, id3), DLOCK_EBUSY);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_permits_try_acquire(pb, CF_WAIT_MS, 10000, id3), DLOCK_EBUSY);
  int64_t took = th_now_ms() - t0;
  CHECK(cf_in_time(took, CF_WAIT_MS, 10));
  /* A release wakes a waiter. */
  permit_waiter = pb;
  cf_bg w;
  CHECK(cf_bg_start(&w, permit_wait, id3) == 0);
  LET_IT_WAIT();
  CHECK_RC(dlock_permits_release(pa, id1), 0);
  t0 = th_now_ms();
  cf_bg_join(&w);
  CHECK_RC(w.rc, 0);
  fprintf(stderr, "    a waiter woken %lld ms after the release\n",
          (long long)(w.at - t0));
  CHECK(w.at - t0 <= cf_wake_ms());
  CHECK_RC(dlock_permits_release(pa, id1), DLOCK_ENOTOWNER);
  CHECK_RC(dlock_permits_release(pa, "zz"), DLOCK_EINVAL);
  /* A take-away is heard within 100 ms; the release then DLOCK_ELOST. */
  atomic_store(&permit_lost_at, 0);
  dlock_permits_on_lost(pa, on_permit_lost, NULL);
  CHECK_EQ(dlock_permits_force_release(pb, id2), 1);
  t0 = th_now_ms();
  while (atomic_load(&permit_lost_at) == 0 && th_now_ms() - t0 < 3000)
    th_sleep_ms(1);
  int64_t heard = atomic_load(&permit_lost_at);
  fprintf(stderr, "    a permit's take-away heard %s%lld ms after\n",
          heard ? "" : "not in ",
          (long long)((heard ? heard : th_now_ms()) - t0));
  CHECK(heard != 0 && heard - t0 <= CF_HEARD_MS);
  CHECK_RC(dlock_permits_release(pa, id2), DLOCK_ELOST);
  CHECK_RC(dlock_permits_release(pb, id3), 0);
  /* A fixed lease running out gives the permit back (etcd's leases are
   * whole seconds, 2 at least: cf_lease_floor_ms). */
  if (cf_has(DL_FEAT_LEASE)) {
    int64_t lease =
        CF_WAIT_MS > cf_lease_floor_ms() ? CF_WAIT_MS : cf_lease_floor_ms();
    CHECK_RC(dlock_permits_add(pa, -1), 0);
    CHECK_EQ(dlock_permits_get_available(pa), 1);
    CHECK_RC(dlock_permits_try_acquire(pa, 0, lease, id1), 0);
    t0 = th_now_ms();
    CHECK_RC(dlock_permits_try_acquire(pb, 5000, 10000, id3), 0);
    took = th_now_ms() - t0;
    fprintf(stderr, "    the next permit after %lld ms\n", (long long)took);
    CHECK(cf_in_time(took, lease, 50));
    CHECK_RC(dlock_permits_release(pa, id1), DLOCK_ELOST);
    CHECK_RC(dlock_permits_release(pb, id3), 0);
  }
  dlock_permits_free(pa);
  dlock_permits_free(pb);
  dlock_client_close(a);
  dlock_client_close(b);
}

/* ---- the latch ---- */
static int latch_wait(void *l) {
  return dlock_latch_try_await(l, 5000);
}

static void t_latch(void) {
  CF_NEEDS_SERVER();
  if (!cf_has(DL_FEAT_LATCH)) return;
  dlock_client *a = cf_client(0), *b = cf_client(0);
  CHECK(a && b);
  char name[64];
  cf_name(name, sizeof name, "latch");
  dlock_latch *la, *lb;
  CHECK_RC(dlock_latch_new(a, name, &la), 0);
  CHECK_RC(dlock_latch_new(b, name, &lb), 0);
  CHECK_RC(dlock_latch_try_await(lb, 0), 0); /* no count: at once */
  CHECK_EQ(dlock_latch_try_set_count(la, 2), 1);
  CHECK_EQ(dlock_latch_try_set_count(lb, 5), 0);
  int64_t n = 0;
  CHECK_RC(dlock_latch_get_count(lb, &n), 0);
  CHECK_EQ(n, 2);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_latch_try_await(lb, CF_WAIT_MS), DLOCK_EBUSY);
  int64_t took = th_now_ms() - t0;
  CHECK(cf_in_time(took, CF_WAIT_MS, 10));
  cf_bg w;
  CHECK(cf_bg_start(&w, latch_wait, lb) == 0);
  CHECK_RC(dlock_latch_count_down(la), 0);
  LET_IT_WAIT();
  CHECK_EQ(w.at, 0); /* not at zero yet */
  CHECK_RC(dlock_latch_count_down(la), 0);
  t0 = th_now_ms();
  cf_bg_join(&w);
  CHECK_RC(w.rc, 0);
  fprintf(stderr, "    a waiter woken %lld ms after the last count-down\n",
          (long long)(w.at - t0));
  CHECK(w.at - t0 <= cf_wake_ms());
  CHECK_RC(dlock_latch_count_down(la), DLOCK_ERANGE);
  dlock_latch_free(la);
  dlock_latch_free(lb);
  dlock_client_close(a);
  dlock_client_close(b);
}

/* ---- the queue ---- */
static bool polled(dlock_queue *q, bool last, int64_t wait_ms,
                   const char *want) {
  void *v = NULL;
  size_t len = 0;
  int rc = last ? dlock_queue_poll_last(q, wait_ms, &v, &len)
                : dlock_queue_poll(q, wait_ms, &v, &len);
  bool ok = rc == 0 && len == strlen(want) && memcmp(v, want, len) == 0;
  if (!ok)
    fprintf(stderr, "    poll: %s \"%.*s\", expected \"%s\"\n",
            dlock_err_name(rc), rc == 0 ? (int)len : 0,
            rc == 0 ? (char *)v : "", want);
  dlock_queue_value_free(v);
  return ok;
}

static int queue_wait(void *q) {
  return polled(q, false, 5000, "w") ? 0 : -1;
}

static void t_queue(void) {
  CF_NEEDS_SERVER();
  if (!cf_has(DL_FEAT_QUEUE)) return;
  dlock_client *a = cf_client(0), *b = cf_client(0);
  CHECK(a && b);
  char name[64];
  cf_name(name, sizeof name, "queue");
  dlock_queue *qa, *qb, *qd;
  CHECK_RC(dlock_queue_new(a, name, &qa), 0);
  CHECK_RC(dlock_queue_new(b, name, &qb), 0);
  CHECK_RC(dlock_queue_offer(qa, "a", 1), 0);
  CHECK_RC(dlock_queue_offer(qa, "b", 1), 0);
  CHECK_RC(dlock_queue_offer_first(qa, "z", 1), 0);
  int64_t n = 0;
  CHECK_RC(dlock_queue_size(qb, &n), 0);
  CHECK_EQ(n, 3);
  CHECK(polled(qb, false, 0, "z"));
  CHECK(polled(qb, true, 0, "b"));
  CHECK(polled(qb, false, 0, "a"));
  void *v = NULL;
  CHECK_RC(dlock_queue_poll(qb, 0, &v, NULL), DLOCK_EBUSY);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_queue_poll(qb, CF_WAIT_MS, &v, NULL), DLOCK_EBUSY);
  int64_t took = th_now_ms() - t0;
  CHECK(cf_in_time(took, CF_WAIT_MS, 10));
  cf_bg w;
  CHECK(cf_bg_start(&w, queue_wait, qb) == 0);
  LET_IT_WAIT();
  CHECK_RC(dlock_queue_offer(qa, "w", 1), 0);
  t0 = th_now_ms();
  cf_bg_join(&w);
  CHECK_RC(w.rc, 0);
  fprintf(stderr, "    a poll woken %lld ms after the offer\n",
          (long long)(w.at - t0));
  CHECK(w.at - t0 <= cf_wake_ms());
  /* A delayed value comes when due, not before. */
  CHECK_RC(dlock_queue_new_delayed(b, name, &qd), 0);
  t0 = th_now_ms();
  CHECK_RC(dlock_queue_offer_delayed(qa, CF_WAIT_MS, "d", 1), 0);
  CHECK_RC(dlock_queue_delayed_size(qa, &n), 0);
  CHECK_EQ(n, 1);
  CHECK(polled(qd, false, CF_WAIT_MS + 3000, "d"));
  took = th_now_ms() - t0;
  fprintf(stderr, "    a value delayed %d ms came after %lld ms\n", CF_WAIT_MS,
          (long long)took);
  CHECK(cf_in_time(took, CF_WAIT_MS, 20));
  dlock_queue_free(qa);
  dlock_queue_free(qb);
  dlock_queue_free(qd);
  dlock_client_close(a);
  dlock_client_close(b);
}

/* ---- leader election ---- */
/* Every change a participant's callback saw, in order. */
typedef struct changes {
  pthread_mutex_t mu;
  int n;
  int v[8];
} changes;
static void on_change(dlock_leader *l, int leader, void *ud) {
  (void)l;
  changes *c = ud;
  pthread_mutex_lock(&c->mu);
  if (c->n < 8) c->v[c->n] = leader;
  c->n++;
  pthread_mutex_unlock(&c->mu);
}
static int changes_n(changes *c) {
  pthread_mutex_lock(&c->mu);
  int n = c->n;
  pthread_mutex_unlock(&c->mu);
  return n;
}

/* Two participants: the first to start leads, the other waits (told
 * nothing) until it leaves, then leads (told so) with a larger token; a
 * wait before the start and a second start are refused. */
static void t_election(void) {
  CF_NEEDS_SERVER();
  if (!cf_has(DL_FEAT_ELECTION)) return;
  dlock_client *a = cf_client(3000), *b = cf_client(3000);
  CHECK(a && b);
  char name[64], who[64];
  cf_name(name, sizeof name, "election");
  dlock_leader *la, *lb;
  CHECK_RC(dlock_leader_new(a, name, "first", &la), 0);
  CHECK_RC(dlock_leader_new(b, name, "second", &lb), 0);
  changes sb = {PTHREAD_MUTEX_INITIALIZER, 0, {0}};
  CHECK_RC(dlock_leader_on_change(lb, on_change, &sb), 0);
  CHECK_EQ(dlock_leader_get_current(lb, who, sizeof who), 0);
  CHECK_RC(dlock_leader_try_await(la, 0), DLOCK_EINVAL); /* not started */
  CHECK_RC(dlock_leader_start(la), 0);
  CHECK_RC(dlock_leader_start(la), DLOCK_EINVAL);
  CHECK_RC(dlock_leader_try_await(la, 5000), 0);
  CHECK_RC(dlock_leader_start(lb), 0);
  CHECK_RC(dlock_leader_on_change(lb, on_change, &sb), DLOCK_EINVAL);
  CHECK_RC(dlock_leader_try_await(lb, CF_WAIT_MS), DLOCK_EBUSY);
  CHECK_EQ(dlock_leader_has_leadership(la), 1);
  CHECK_EQ(dlock_leader_has_leadership(lb), 0);
  who[0] = '\0';
  /* The leader, by name, while a rival tries its turns (on redlock:// a
   * quorum's holder, not a server's that the rival's attempt holds). */
  CHECK_EQ(dlock_leader_get_current(lb, who, sizeof who), 1);
  CHECK(strcmp(who, "first") == 0);
  uint64_t t1 = 0, t2 = 0;
  CHECK_RC(dlock_leader_token(la, &t1), 0);
  CHECK_RC(dlock_leader_token(lb, &t2), DLOCK_ENOTOWNER);
  /* Proclaim (Go's) where the backend has it, else DLOCK_ENOTSUP naming
   * the backend; only the leader may. */
  bool proclaims = strcmp(cf_backend, "etcd") == 0;
  int rc = dlock_leader_proclaim(la, "first-proclaimed");
  CHECK_RC(rc, proclaims ? 0 : DLOCK_ENOTSUP);
  if (rc == DLOCK_ENOTSUP)
    CHECK(strstr(dlock_client_errmsg(a), cf_backend) != NULL);
  CHECK_RC(dlock_leader_proclaim(lb, "second-proclaimed"),
           proclaims ? DLOCK_ENOTOWNER : DLOCK_ENOTSUP);
  CHECK_EQ(dlock_leader_get_current(lb, who, sizeof who), 1);
  CHECK(strcmp(who, proclaims ? "first-proclaimed" : "first") == 0);
  CHECK_EQ(changes_n(&sb), 0);
  dlock_leader_free(la); /* leaves: the next one leads */
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_leader_try_await(lb, 5000), 0);
  int64_t took = th_now_ms() - t0;
  fprintf(stderr, "    the successor leads %lld ms after\n", (long long)took);
  CHECK(took <= cf_wake_ms());
  CHECK_RC(dlock_leader_token(lb, &t2), 0);
  CHECK(t2 > t1);
  who[0] = '\0';
  CHECK_EQ(dlock_leader_get_current(lb, who, sizeof who), 1);
  CHECK(strcmp(who, "second") == 0);
  /* Told once, by the time the wait returns or just after. */
  for (int64_t end = th_now_ms() + CF_CMD_MS;
       changes_n(&sb) < 1 && th_now_ms() < end;)
    th_sleep_ms(1);
  CHECK_EQ(changes_n(&sb), 1);
  CHECK_EQ(sb.v[0], 1);
  dlock_leader_free(lb);
  dlock_client_close(a);
  dlock_client_close(b);
}

/* A leader that frees itself from its callback (dlock_leader_cb allows
 * it): the call returns, and it leaves the election: the next one leads
 * promptly. */
static void free_on_change(dlock_leader *l, int leader, void *ud) {
  if (leader) {
    dlock_leader_free(l);
    atomic_store((atomic_int *)ud, 1);
  }
}

static void t_election_free_in_callback(void) {
  CF_NEEDS_SERVER();
  if (!cf_has(DL_FEAT_ELECTION)) return;
  dlock_client *a = cf_client(3000), *b = cf_client(3000);
  CHECK(a && b);
  char name[64];
  cf_name(name, sizeof name, "elect-free");
  dlock_leader *la, *lb;
  atomic_int done = 0;
  CHECK_RC(dlock_leader_new(a, name, "first", &la), 0);
  CHECK_RC(dlock_leader_on_change(la, free_on_change, &done), 0);
  CHECK_RC(dlock_leader_start(la), 0);
  for (int64_t end = th_now_ms() + 5000;
       !atomic_load(&done) && th_now_ms() < end;)
    th_sleep_ms(1);
  CHECK_EQ(atomic_load(&done), 1);
  CHECK_RC(dlock_leader_new(b, name, "second", &lb), 0);
  CHECK_RC(dlock_leader_start(lb), 0);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_leader_try_await(lb, 5000), 0);
  fprintf(stderr, "    the next one leads after %lld ms\n",
          (long long)(th_now_ms() - t0));
  CHECK(th_now_ms() - t0 <= cf_wake_ms());
  dlock_leader_free(lb);
  dlock_client_close(a);
  dlock_client_close(b);
}

const th_test cf_sync_tests[] = {
    T_BARE(t_semaphore), T_BARE(t_permits),
    T_BARE(t_latch),     T_BARE(t_queue),
    T_BARE(t_election),  T_BARE(t_election_free_in_callback),
};
const size_t cf_sync_ntests = sizeof cf_sync_tests / sizeof cf_sync_tests[0];
