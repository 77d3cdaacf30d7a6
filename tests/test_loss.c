/* test_loss.c: how a holder learns that its hold is gone (a force release,
 * a deletion heard through keyspace events, a fixed lease running out), and
 * what a force release may delete. */
#include "client/client.h"
#include "harness.h"

#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the lost callbacks, with the instant they were called ---- */
static atomic_int lost_calls;
static _Atomic int64_t lost_at;

static void on_lost(dlock_lock *l, const char *owner, void *ud) {
  (void)l;
  (void)owner;
  (void)ud;
  atomic_store(&lost_at, th_now_ms());
  atomic_fetch_add(&lost_calls, 1);
}

static void on_permit_lost(dlock_permits *p, const char *id, void *ud) {
  (void)p;
  (void)id;
  (void)ud;
  atomic_store(&lost_at, th_now_ms());
  atomic_fetch_add(&lost_calls, 1);
}

static bool lost_called(void *p) {
  (void)p;
  return atomic_load(&lost_calls) > 0;
}

static void reset_lost(void) {
  atomic_store(&lost_calls, 0);
  atomic_store(&lost_at, 0);
}

/* ---- force release deletes a lock of the kind asked for, nothing else ---- */

static void t_force_release_refuses_other_types(void) {
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  freeReplyObject(th_cmd(&th_srv, "SET f:string 42"));
  freeReplyObject(th_cmd(&th_srv, "RPUSH f:list a b"));
  freeReplyObject(th_cmd(&th_srv, "HSET f:apphash name alice age 30"));
  freeReplyObject(th_cmd(&th_srv, "ZADD f:zset 1 a"));
  const char *names[] = {"f:string", "f:list", "f:apphash", "f:zset"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    dlock_lock *l;
    CHECK_RC(dlock_lock_new(c, names[i], NULL, &l), 0);
    int rc = dlock_lock_force_release(l);
    dlock_lock_free(l);
    CHECK_RC(rc, DLOCK_EWRONGTYPE);
    CHECK(strstr(dlock_client_errmsg(c), "nothing deleted") != NULL);
    CHECK_EQ(th_cmd_int(&th_srv, "EXISTS %s", names[i]), 1);
  }
  CHECK_EQ(th_cmd_int(&th_srv, "HLEN f:apphash"), 2);
  /* A semaphore's count is a string too: left alone. */
  dlock_semaphore *s;
  CHECK_RC(dlock_semaphore_new(c, "f:sem", &s), 0);
  CHECK_EQ(dlock_semaphore_try_set_permits(s, 3), 1);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "f:sem", NULL, &l), 0);
  CHECK_RC(dlock_lock_force_release(l), DLOCK_EWRONGTYPE);
  CHECK_EQ(dlock_semaphore_get_available(s), 3);
  dlock_lock_free(l);
  dlock_semaphore_free(s);
  dlock_client_close(c);
}

static void t_force_release_kind_must_match(void) {
  dlock_client *a = th_client(&th_srv, 0), *b = th_client(&th_srv, 0);
  CHECK(a && b);
  /* A plain lock is not deleted through a read-write lock's handle ... */
  dlock_lock *plain, *rd, *bplain;
  dlock_rwlock *arw, *brw, *brw2;
  CHECK_RC(dlock_lock_new(a, "f:plain", NULL, &plain), 0);
  CHECK_RC(dlock_lock_try_acquire(plain, 0, 10000, NULL), 0);
  CHECK_RC(dlock_rwlock_new(b, "f:plain", NULL, &brw), 0);
  CHECK_RC(dlock_lock_force_release(dlock_rwlock_write(brw)), DLOCK_EWRONGTYPE);
  CHECK_EQ(dlock_lock_is_held(plain), 1);
  /* ... nor a read-write lock through a plain one. */
  CHECK_RC(dlock_rwlock_new(a, "f:rw", NULL, &arw), 0);
  rd = dlock_rwlock_read(arw);
  CHECK_RC(dlock_lock_try_acquire(rd, 0, 10000, NULL), 0);
  CHECK_RC(dlock_lock_new(b, "f:rw", NULL, &bplain), 0);
  CHECK_RC(dlock_lock_force_release(bplain), DLOCK_EWRONGTYPE);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS f:rw"), 1);
  /* Each through its own kind. */
  CHECK_RC(dlock_rwlock_new(b, "f:rw", NULL, &brw2), 0);
  CHECK_EQ(dlock_lock_force_release(dlock_rwlock_read(brw2)), 1);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS f:rw"), 0);
  dlock_lock *bp2;
  CHECK_RC(dlock_lock_new(b, "f:plain", NULL, &bp2), 0);
  CHECK_EQ(dlock_lock_force_release(bp2), 1);
  CHECK_EQ(dlock_lock_force_release(bp2), 0);
  dlock_lock_release(plain);
  dlock_lock_release(rd);
  dlock_lock_free(plain);
  dlock_rwlock_free(arw);
  dlock_rwlock_free(brw);
  dlock_lock_free(bplain);
  dlock_rwlock_free(brw2);
  dlock_lock_free(bp2);
  dlock_client_close(a);
  dlock_client_close(b);
}

/* ---- a force release is heard at once, not at the next renewal ---- */

/* The holder's watchdog lease is 30 s: a renewal would find the loss only
 * 10 s later, so a callback within a second can only come from the
 * revocation. */
static void t_force_release_heard_at_once(void) {
  dlock_client *a = th_client(&th_srv, 30000), *b = th_client(&th_srv, 0);
  CHECK(a && b);
  CHECK(th_wait_subscribed(&th_srv, "dlock_revoke", 2000));
  dlock_lock *la, *lb;
  CHECK_RC(dlock_lock_new(a, "f:heard", NULL, &la), 0);
  CHECK_RC(dlock_lock_new(b, "f:heard", NULL, &lb), 0);
  dlock_lock_on_lost(la, on_lost, NULL);
  reset_lost();
  CHECK_RC(dlock_lock_acquire(la, 0, NULL), 0);
  int64_t t0 = th_now_ms();
  CHECK_EQ(dlock_lock_force_release(lb), 1);
  CHECK(th_wait_for(lost_called, NULL, 2000));
  int64_t took = atomic_load(&lost_at) - t0;
  fprintf(stderr, "    force release -> lost callback: %lld ms\n",
          (long long)took);
  CHECK(took < 1000);
  CHECK_EQ(dlock_lock_is_lost(la), 1);
  CHECK_RC(dlock_lock_release(la), DLOCK_ELOST);
  CHECK_EQ(atomic_load(&lost_calls), 1);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_close(a);
  dlock_client_close(b);
}

/* A check of every hold, asked for before a hold was recorded (a
 * subscription confirmed in the same instant as an acquire's reply), takes
 * that hold too: it was ignored when no hold was recorded yet, and a
 * take-away in between waited for the next renewal. A polling client hears
 * no revocation; its watchdog's lease is 30 s (renewals 10 s apart); the
 * watchdog is held back while the hold is taken and taken away. */
static void t_check_all_takes_later_holds(void) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = th_srv.url;
  o.watchdog_timeout_ms = 30000;
  o.wait_backoff_max_ms = 10; /* no pub/sub: no revocation heard */
  dlock_client *a = th_client_opts(&o), *b = th_client(&th_srv, 0);
  CHECK(a && b);
  dlock_lock *la, *lb;
  CHECK_RC(dlock_lock_new(a, "f:later", NULL, &la), 0);
  CHECK_RC(dlock_lock_new(b, "f:later", NULL, &lb), 0);
  dlock_lock_on_lost(la, on_lost, NULL);
  reset_lost();
  dl_watchdog_stall(a->watchdog, true);
  dl_watchdog_check_all(a->watchdog); /* no hold yet */
  CHECK_RC(dlock_lock_acquire(la, 0, NULL), 0);
  CHECK_EQ(dlock_lock_force_release(lb), 1);
  int64_t t0 = th_now_ms();
  dl_watchdog_stall(a->watchdog, false);
  CHECK(th_wait_for(lost_called, NULL, 2000));
  fprintf(stderr, "    checked and lost after %lld ms\n",
          (long long)(atomic_load(&lost_at) - t0));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_close(a);
  dlock_client_close(b);
}

static uint64_t check_calls_before;
static dlock_client *check_client;

/* The client's watchdog made a call since check_calls_before. */
static bool checked(void *p) {
  (void)p;
  dlock_client_stats st;
  return dlock_client_stats_get(check_client, &st) == 0 &&
         st.renewal_calls > check_calls_before;
}

/* A revocation names a key, not a hold: a holder of another lock, or the
 * new holder of the same name, is checked and keeps its lock. */
static void t_revocation_spares_other_holds(void) {
  dlock_client *a = th_client(&th_srv, 30000), *b = th_client(&th_srv, 0);
  CHECK(a && b);
  CHECK(th_wait_subscribed(&th_srv, "dlock_revoke", 2000));
  dlock_lock *keep, *lb;
  CHECK_RC(dlock_lock_new(a, "f:keep", NULL, &keep), 0);
  dlock_lock_on_lost(keep, on_lost, NULL);
  reset_lost();
  CHECK_RC(dlock_lock_acquire(keep, 0, NULL), 0);
  /* Someone publishes a revocation of a key a holds, by hand, and another
   * client force-releases its own lock: a checks its hold (one check
   * round), finds it still held, and reports nothing. */
  dlock_client_stats st;
  CHECK_RC(dlock_client_stats_get(a, &st), 0);
  check_calls_before = st.renewal_calls;
  check_client = a;
  CHECK(th_cmd_int(&th_srv, "PUBLISH dlock_revoke f:keep") >= 1);
  CHECK(th_wait_for(checked, NULL, 2000));
  CHECK_RC(dlock_lock_new(b, "f:other", NULL, &lb), 0);
  CHECK_RC(dlock_lock_acquire(lb, 0, NULL), 0);
  CHECK_EQ(dlock_lock_force_release(lb), 1);
  CHECK_EQ(atomic_load(&lost_calls), 0);
  CHECK_EQ(dlock_lock_is_lost(keep), 0);
  CHECK_EQ(dlock_lock_is_held(keep), 1);
  CHECK_EQ(dlock_lock_release(keep), 1);
  dlock_lock_free(keep);
  dlock_lock_free(lb);
  dlock_client_close(a);
  dlock_client_close(b);
}

static void t_permit_force_release_heard(void) {
  dlock_client *a = th_client(&th_srv, 30000), *b = th_client(&th_srv, 0);
  CHECK(a && b);
  CHECK(th_wait_subscribed(&th_srv, "dlock_revoke", 2000));
  dlock_permits *pa, *pb;
  CHECK_RC(dlock_permits_new(a, "f:permits", &pa), 0);
  CHECK_RC(dlock_permits_new(b, "f:permits", &pb), 0);
  CHECK_EQ(dlock_permits_try_set(pa, 1), 1);
  dlock_permits_on_lost(pa, on_permit_lost, NULL);
  reset_lost();
  char id[DLOCK_PERMIT_ID_LEN];
  CHECK_RC(dlock_permits_try_acquire(pa, 0, 0, id), 0);
  CHECK_RC(dlock_permits_force_release(pb, "00000000000000000000000000000000"),
           0);
  CHECK_RC(dlock_permits_force_release(pb, "nothex"), DLOCK_EINVAL);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_permits_force_release(pb, id), 1);
  CHECK(th_wait_for(lost_called, NULL, 2000));
  CHECK(atomic_load(&lost_at) - t0 < 1000);
  CHECK_EQ(dlock_permits_get_available(pb), 1);
  CHECK_RC(dlock_permits_release(pa, id), DLOCK_ELOST);
  dlock_permits_free(pa);
  dlock_permits_free(pb);
  dlock_client_close(a);
  dlock_client_close(b);
}

/* ---- a fixed lease that runs out is reported at that instant ---- */

static void t_fixed_lease_lost_on_time(void) {
  dlock_client *c = th_client(&th_srv, 30000);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "f:fixed", NULL, &l), 0);
  dlock_lock_on_lost(l, on_lost, NULL);
  reset_lost();
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_try_acquire(l, 0, 400, NULL), 0);
  CHECK(th_wait_for(lost_called, NULL, 3000));
  int64_t at = atomic_load(&lost_at) - t0;
  fprintf(stderr, "    400 ms fixed lease reported lost after %lld ms\n",
          (long long)at);
  /* Its validity: the lease less lease/100 + 2 ms of drift. */
  CHECK(at >= 390);
  CHECK(at < 400 + 150);
  CHECK_EQ(dlock_lock_is_lost(l), 1);
  CHECK_EQ(atomic_load(&lost_calls), 1);
  CHECK_RC(dlock_lock_release(l), DLOCK_ELOST);
  /* Released in time: no report. */
  reset_lost();
  CHECK_RC(dlock_lock_try_acquire(l, 0, 300, NULL), 0);
  CHECK_EQ(dlock_lock_release(l), 1);
  th_sleep_ms(400); /* the absence of a callback past the lease */
  CHECK_EQ(atomic_load(&lost_calls), 0);
  dlock_lock_free(l);
  dlock_client_close(c);
}

static void t_fixed_lease_permit_lost_on_time(void) {
  dlock_client *c = th_client(&th_srv, 30000);
  CHECK(c != NULL);
  dlock_permits *p;
  CHECK_RC(dlock_permits_new(c, "f:fixedp", &p), 0);
  CHECK_EQ(dlock_permits_try_set(p, 1), 1);
  dlock_permits_on_lost(p, on_permit_lost, NULL);
  reset_lost();
  char id[DLOCK_PERMIT_ID_LEN];
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_permits_try_acquire(p, 0, 300, id), 0);
  CHECK(th_wait_for(lost_called, NULL, 3000));
  int64_t at = atomic_load(&lost_at) - t0;
  CHECK(at >= 290 && at < 300 + 150);
  CHECK_RC(dlock_permits_release(p, id), DLOCK_ELOST);
  dlock_permits_free(p);
  dlock_client_close(c);
}

/* A fixed hold re-entered with the watchdog's lease becomes renewed: it is
 * not reported lost when the first lease would have run out. */
static void t_reentered_fixed_becomes_renewed(void) {
  dlock_client *c = th_client(&th_srv, 600);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "f:upgrade", NULL, &l), 0);
  dlock_lock_on_lost(l, on_lost, NULL);
  reset_lost();
  CHECK_RC(dlock_lock_try_acquire(l, 0, 300, NULL), 0);
  CHECK_RC(dlock_lock_acquire(l, 0, NULL), 0);
  th_sleep_ms(900); /* past the fixed lease, across renewal rounds */
  CHECK_EQ(atomic_load(&lost_calls), 0);
  CHECK_EQ(dlock_lock_is_held(l), 1);
  CHECK_EQ(dlock_lock_release(l), 0);
  CHECK_EQ(dlock_lock_release(l), 1);
  dlock_lock_free(l);
  dlock_client_close(c);
}

/* ---- keyspace events: a DEL by anyone is heard where they are on ---- */

/* On a server started with --notify-keyspace-events `flags`. */
static void keyspace_case(const char *flags, const char *name) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = th_srv.url;
  o.watchdog_timeout_ms = 30000;
  o.key_prefix = "app:";
  dlock_client *c = th_client_opts(&o);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, name, NULL, &l), 0);
  dlock_lock_on_lost(l, on_lost, NULL);
  reset_lost();
  CHECK_RC(dlock_lock_acquire(l, 0, NULL), 0);
  /* The subscriptions are made at open without waiting: wait for them. */
  redisReply *r = NULL;
  for (int i = 0; i < 500; i++) {
    r = th_cmd(&th_srv, "PUBSUB NUMPAT");
    long long pats = r && r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
    freeReplyObject(r);
    r = th_cmd(&th_srv, "PUBSUB NUMSUB __keyevent@0__:del");
    long long subs = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2
                         ? r->element[1]->integer
                         : 0;
    freeReplyObject(r);
    if (pats + subs > 0) break;
    th_sleep_ms(5);
  }
  int64_t t0 = th_now_ms();
  CHECK_EQ(th_cmd_int(&th_srv, "DEL app:%s", name), 1);
  bool heard = th_wait_for(lost_called, NULL, 2000);
  int64_t took = atomic_load(&lost_at) - t0;
  dlock_lock_free(l);
  dlock_client_close(c);
  CHECK(heard);
  fprintf(stderr, "    DEL heard (%s) after %lld ms\n", flags,
          (long long)took);
  CHECK(took < 1000);
}

static void t_keyevent_del_heard(void) { keyspace_case("Eg", "k:event"); }
static void t_keyspace_del_heard(void) { keyspace_case("Kgx", "k:space"); }

/* Without keyspace events a DEL is found by the next renewal (lease/3). */
static void t_del_without_events_found_by_renewal(void) {
  dlock_client *c = th_client(&th_srv, 900);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "f:del", NULL, &l), 0);
  dlock_lock_on_lost(l, on_lost, NULL);
  reset_lost();
  CHECK_RC(dlock_lock_acquire(l, 0, NULL), 0);
  CHECK_EQ(th_cmd_int(&th_srv, "DEL f:del"), 1);
  CHECK(th_wait_for(lost_called, NULL, 2000));
  dlock_lock_free(l);
  dlock_client_close(c);
}

/* A holder stopped (SIGSTOP) past its validity while another client takes
 * and releases its lock: once resumed, its release says DLOCK_ELOST. Its
 * watchdog's renewal, sent on resuming with the validity (already past) as
 * its deadline, used to fail at once and take the connection's other
 * requests with it: the release then said "no reply before the command
 * timeout", which dlock run took for a lock left to expire (issue 29).
 * Ten rounds, the release sent as the process resumes. */
static void t_stopped_holder_release_says_lost(void) {
  int timeouts = 0;
  for (int round = 0; round < 10; round++) {
    int go[2], res[2];
    CHECK(pipe(go) == 0 && pipe(res) == 0);
    pid_t pid = fork();
    if (pid == 0) {
      close(go[1]);
      close(res[0]);
      dlock_client *c = th_client(&th_srv, 600);
      dlock_lock *l = NULL;
      int rc = c ? dlock_lock_new(c, "f:stopped", NULL, &l) : DLOCK_ECONNECT;
      if (rc == 0) rc = dlock_lock_acquire(l, 0, NULL);
      char b;
      if (write(res[1], &rc, sizeof rc) != sizeof rc || read(go[0], &b, 1) != 1)
        _exit(1);
      rc = dlock_lock_release(l);
      _exit(write(res[1], &rc, sizeof rc) == sizeof rc ? 0 : 1);
    }
    close(go[0]);
    close(res[1]);
    int rc = 99;
    CHECK(read(res[0], &rc, sizeof rc) == sizeof rc);
    CHECK_RC(rc, 0);
    kill(pid, SIGSTOP);
    dlock_client *o = th_client(&th_srv, 0);
    CHECK(o != NULL);
    dlock_lock *l;
    CHECK_RC(dlock_lock_new(o, "f:stopped", NULL, &l), 0);
    CHECK_RC(dlock_lock_try_acquire(l, 5000, 0, NULL), 0);
    CHECK(dlock_lock_release(l) >= 0);
    dlock_lock_free(l);
    dlock_client_close(o);
    CHECK(write(go[1], "g", 1) == 1);
    kill(pid, SIGCONT);
    rc = 99;
    CHECK(read(res[0], &rc, sizeof rc) == sizeof rc);
    timeouts += rc == DLOCK_ETIMEDOUT;
    CHECK_RC(rc, DLOCK_ELOST);
    int status;
    waitpid(pid, &status, 0);
    close(go[1]);
    close(res[0]);
  }
  fprintf(stderr, "    %d of 10 releases timed out\n", timeouts);
}

TH_MAIN(T(t_force_release_refuses_other_types),
        T(t_force_release_kind_must_match), T(t_force_release_heard_at_once),
        T(t_revocation_spares_other_holds), T(t_check_all_takes_later_holds),
        T(t_permit_force_release_heard), T(t_fixed_lease_lost_on_time),
        T(t_fixed_lease_permit_lost_on_time),
        T(t_reentered_fixed_becomes_renewed),
        T_REDIS(t_keyevent_del_heard, "--notify-keyspace-events Eg"),
        T_REDIS(t_keyspace_del_heard, "--notify-keyspace-events Kgx"),
        T(t_del_without_events_found_by_renewal),
        T(t_stopped_holder_release_says_lost))
