/* test_plain.c: the plain string lock (dlock_plainlock_new: redsync's and
 * npm redlock's layout) against a real redis-server. */
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

/* The value at `key`, or "" (nil or not a string), into buf. */
static const char *get_str(const char *key, char *buf, size_t len) {
  redisReply *r = th_cmd(&th_srv, "GET %s", key);
  buf[0] = '\0';
  if (r && r->type == REDIS_REPLY_STRING) snprintf(buf, len, "%s", r->str);
  if (r) freeReplyObject(r);
  return buf;
}

static void cmd_ok(const char *fmt, const char *key) {
  redisReply *r = th_cmd(&th_srv, fmt, key);
  CHECK(r != NULL && r->type != REDIS_REPLY_ERROR);
  if (r) freeReplyObject(r);
}

static void t_acquire_release(void) {
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_plainlock_new(c, "p:basic", NULL, &l), 0);
  CHECK_EQ(dlock_lock_is_locked(l), 0);
  uint64_t tok = 0;
  CHECK_RC(dlock_lock_try_acquire(l, 0, 10000, &tok), 0);
  CHECK(tok > 0);
  /* The layout: a string at the bare name, value = the owner id, PX. */
  char owner[256], v[256];
  CHECK(dlock_client_owner(c, owner, sizeof owner) > 0);
  redisReply *r = th_cmd(&th_srv, "TYPE p:basic");
  CHECK(r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "string") == 0);
  if (r) freeReplyObject(r);
  CHECK(strcmp(get_str("p:basic", v, sizeof v), owner) == 0);
  long long pttl = th_cmd_int(&th_srv, "PTTL p:basic");
  CHECK(pttl > 9000 && pttl <= 10000);
  CHECK_EQ(dlock_lock_is_locked(l), 1);
  CHECK_EQ(dlock_lock_is_held(l), 1);
  CHECK_EQ(dlock_lock_release(l), 1);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS p:basic"), 0);
  CHECK_EQ(dlock_lock_is_held(l), 0);
  CHECK_RC(dlock_lock_release(l), DLOCK_ENOTOWNER);
  dlock_lock_free(l);
  dlock_client_close(c);
}

/* A peer's hold (redsync's, npm redlock's: a random value with PX) is
 * respected: a try (at once), a wait (until its end) and a release leave
 * it as it was.
 * (Exclusion between dlock's own holders and a release by a non-owner:
 * the conformance suite's t_try_wait and t_not_owner, plain kind.) */
static void t_peer_hold_and_other_types(void) {
  dlock_client *a = th_client(&th_srv, 0);
  CHECK(a != NULL);
  dlock_lock *la;
  CHECK_RC(dlock_plainlock_new(a, "p:excl", NULL, &la), 0);
  cmd_ok("SET %s peer-token-1 PX 10000", "p:excl");
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_try_acquire(la, 0, 10000, NULL), DLOCK_EBUSY);
  CHECK(th_now_ms() - t0 < 500);
  t0 = th_now_ms();
  CHECK_RC(dlock_lock_try_acquire(la, 300, 10000, NULL), DLOCK_EBUSY);
  int64_t took = th_now_ms() - t0;
  CHECK(took >= 300 && took < 1300);
  CHECK_RC(dlock_lock_release(la), DLOCK_ENOTOWNER);
  char v[64];
  CHECK(strcmp(get_str("p:excl", v, sizeof v), "peer-token-1") == 0);
  CHECK(th_cmd_int(&th_srv, "PTTL p:excl") > 5000);
  /* Another type at the name: an error, nothing written. */
  cmd_ok("DEL %s", "p:excl");
  cmd_ok("HSET %s f 1", "p:excl");
  int rc = dlock_lock_try_acquire(la, 0, 10000, NULL);
  CHECK(rc < 0 && rc != DLOCK_EBUSY);
  CHECK_EQ(th_cmd_int(&th_srv, "HGET p:excl f"), 1);
  CHECK_EQ(th_cmd_int(&th_srv, "PTTL p:excl"), -1);
  dlock_lock_free(la);
  dlock_client_close(a);
}

static atomic_int lost_calls;
static void on_lost(dlock_lock *l, const char *owner, void *ud) {
  (void)l, (void)owner, (void)ud;
  atomic_fetch_add(&lost_calls, 1);
}
static bool lost_called(void *p) {
  (void)p;
  return atomic_load(&lost_calls) > 0;
}

static void t_watchdog_renews_and_reports_loss(void) {
  dlock_client *c = th_client(&th_srv, 600);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_plainlock_new(c, "p:loss", NULL, &l), 0);
  dlock_lock_on_lost(l, on_lost, NULL);
  atomic_store(&lost_calls, 0);
  CHECK_RC(dlock_lock_acquire(l, 0, NULL), 0); /* the watchdog's lease */
  /* Renewed past its 600 ms lease. */
  th_sleep_ms(1000);
  CHECK_EQ(dlock_lock_is_held(l), 1);
  CHECK_EQ(atomic_load(&lost_calls), 0);
  /* A peer overwrites the value (as after an expiry and its SET NX). */
  cmd_ok("SET %s peer-token-2 PX 10000", "p:loss");
  CHECK(th_wait_for(lost_called, NULL, 2000));
  CHECK_EQ(dlock_lock_is_lost(l), 1);
  CHECK_RC(dlock_lock_release(l), DLOCK_ELOST);
  /* The peer's hold is untouched: neither renewed away nor deleted. */
  char v[64];
  CHECK(strcmp(get_str("p:loss", v, sizeof v), "peer-token-2") == 0);
  CHECK(th_cmd_int(&th_srv, "PTTL p:loss") > 5000);
  dlock_lock_free(l);
  dlock_client_close(c);
}

/* The token's counter is the hash lock's, in the name's slot (tokens
 * growing from holder to holder: the conformance suite's t_tokens_grow). */
static void t_token_counter(void) {
  dlock_client *a = th_client(&th_srv, 0), *b = th_client(&th_srv, 0);
  CHECK(a && b);
  dlock_lock *la, *lb;
  CHECK_RC(dlock_plainlock_new(a, "p:fence", NULL, &la), 0);
  CHECK_RC(dlock_plainlock_new(b, "p:fence", NULL, &lb), 0);
  uint64_t last = 0;
  for (int i = 0; i < 2; i++) {
    dlock_lock *l = i % 2 ? la : lb;
    uint64_t t = 0;
    CHECK_RC(dlock_lock_try_acquire(l, 1000, 5000, &t), 0);
    CHECK(t > last);
    last = t;
    CHECK_EQ(dlock_lock_release(l), 1);
  }
  /* The counter is the hash lock's, in the name's slot. */
  CHECK_EQ((uint64_t)th_cmd_int(&th_srv, "GET redisson_lock_token:{p:fence}"),
           last);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_close(a);
  dlock_client_close(b);
}

typedef struct {
  dlock_lock *l;
  int64_t wait_ms;
  int rc;
  int64_t t_acquired;
} thr_arg;

static void *wait_and_take(void *p) {
  thr_arg *a = p;
  a->rc = dlock_lock_try_acquire(a->l, a->wait_ms, 10000, NULL);
  a->t_acquired = th_now_ms();
  if (a->rc == 0) dlock_lock_release(a->l);
  return NULL;
}

static bool has_subscriber(void *p) {
  redisReply *r = th_cmd(&th_srv, "PUBSUB NUMSUB redisson_lock__channel:{%s}",
                         (const char *)p);
  bool ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
            r->element[1]->integer >= 1;
  if (r) freeReplyObject(r);
  return ok;
}

static uint64_t wakeups(dlock_client *c) {
  dlock_client_stats st;
  dlock_client_stats_get(c, &st);
  return st.wakeups;
}

/* A dlock release publishes: the waiter is woken by the message. */
static void t_waiter_woken_by_dlock_release(void) {
  dlock_client *a = th_client(&th_srv, 0), *b = th_client(&th_srv, 0);
  CHECK(a && b);
  dlock_lock *la, *lb;
  CHECK_RC(dlock_plainlock_new(a, "p:wake", NULL, &la), 0);
  CHECK_RC(dlock_plainlock_new(b, "p:wake", NULL, &lb), 0);
  /* Its polls back off to one every 32 to 64 ms: a poll is then unlikely
   * to come between the release and its message (a poll that does takes
   * the lock before the message is read, and no wake-up is counted, as
   * in one fresh-clone CI run under load): up to three rounds. */
  for (int round = 0; round < 3 && wakeups(b) == 0; round++) {
    CHECK_RC(dlock_lock_acquire(la, 30000, NULL), 0);
    thr_arg w = {lb, 20000, -100, 0};
    pthread_t th;
    pthread_create(&th, NULL, wait_and_take, &w);
    CHECK(th_wait_for(has_subscriber, "p:wake", 5000));
    th_sleep_ms(300);
    int64_t released = th_now_ms();
    CHECK_EQ(dlock_lock_release(la), 1);
    pthread_join(th, NULL);
    CHECK_RC(w.rc, 0);
    CHECK(w.t_acquired - released < 200);
  }
  /* The message, not a poll. Under valgrind the subscriber's thread can
   * read the message long after the release, when the waiter's next poll
   * already took the lock: timing only there. */
  if (getenv("DLOCK_UNDER_VALGRIND") == NULL) CHECK(wakeups(b) >= 1);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_close(a);
  dlock_client_close(b);
}

/* A peer deletes without a message: the waiter's polling finds it, long
 * before the peer's 30 s lease would have ended. */
static void t_waiter_polls_after_peer_del(void) {
  dlock_client *b = th_client(&th_srv, 0);
  CHECK(b != NULL);
  dlock_lock *lb;
  CHECK_RC(dlock_plainlock_new(b, "p:poll", NULL, &lb), 0);
  cmd_ok("SET %s peer-token-3 PX 30000", "p:poll");
  thr_arg w = {lb, 20000, -100, 0};
  pthread_t th;
  pthread_create(&th, NULL, wait_and_take, &w);
  CHECK(th_wait_for(has_subscriber, "p:poll", 5000));
  th_sleep_ms(300); /* let the backoff reach its cap */
  int64_t deleted = th_now_ms();
  cmd_ok("DEL %s", "p:poll");
  pthread_join(th, NULL);
  CHECK_RC(w.rc, 0);
  CHECK(w.t_acquired - deleted < 1000);
  CHECK_EQ(wakeups(b), 0); /* nobody published */
  dlock_lock_free(lb);
  dlock_client_close(b);
}

static void t_force_release(void) {
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_lock *l, *h;
  CHECK_RC(dlock_plainlock_new(c, "p:force", NULL, &l), 0);
  CHECK_RC(dlock_lock_new(c, "p:hash", NULL, &h), 0);
  CHECK_EQ(dlock_lock_force_release(l), 0);
  cmd_ok("SET %s peer-token-5 PX 30000", "p:force");
  CHECK_EQ(dlock_lock_force_release(l), 1);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS p:force"), 0);
  /* A string without a lease is no lock (a cache value, a counter). */
  cmd_ok("SET %s some-value", "p:force");
  CHECK_RC(dlock_lock_force_release(l), DLOCK_EWRONGTYPE);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS p:force"), 1);
  /* A hash lock at the name is not a plain lock, nor the other way. */
  CHECK_RC(dlock_lock_acquire(h, 30000, NULL), 0);
  dlock_lock *hp;
  CHECK_RC(dlock_plainlock_new(c, "p:hash", NULL, &hp), 0);
  CHECK_RC(dlock_lock_force_release(hp), DLOCK_EWRONGTYPE);
  CHECK_EQ(dlock_lock_is_held(h), 1);
  cmd_ok("SET %s peer-token-6 PX 30000", "p:force");
  dlock_lock *fh;
  CHECK_RC(dlock_lock_new(c, "p:force", NULL, &fh), 0);
  CHECK_RC(dlock_lock_force_release(fh), DLOCK_EWRONGTYPE);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS p:force"), 1);
  CHECK_EQ(dlock_lock_release(h), 1);
  dlock_lock_free(fh);
  dlock_lock_free(hp);
  dlock_lock_free(h);
  dlock_lock_free(l);
  dlock_client_close(c);
}

TH_MAIN(T(t_acquire_release), T(t_peer_hold_and_other_types),
        T(t_watchdog_renews_and_reports_loss), T(t_token_counter),
        T(t_waiter_woken_by_dlock_release), T(t_waiter_polls_after_peer_del),
        T(t_force_release))
