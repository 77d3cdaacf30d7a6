/* test_async.c: the event-loop API (include/dlock_async.h) against a real
 * redis-server, with each driver (built-in, libuv, libevent): the lock's
 * acquire and release, waiting (by backoff, and through the subscriber
 * connection with the hand-off queue), timeouts, cancel, close with
 * operations pending, the watchdog's renewals, loss notices and reconnects
 * on the loop. */
#include "loop_drivers.h"

#include <string.h>

static void acquire_release(int kind) {
  td_fix f;
  CHECK_RC(td_fix_open(&f, kind, 0), 0);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(f.c, "a:one", NULL, &l), 0);
  td_got g = {0};
  CHECK_RC(dlock_lock_acquire_async(l, 0, 5000, td_on_done, &g, NULL), 0);
  CHECK_EQ(g.calls, 0); /* never within the call */
  CHECK(td_run_until(&f.t, &g.calls, 3000));
  CHECK_RC(g.rc, 0);
  CHECK(g.token > 0);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS a:one"), 1);
  CHECK(th_cmd_int(&th_srv, "PTTL a:one") > 4000);
  /* Re-entry by the same handle: the same token, a count of 2. */
  td_got g2 = {0};
  CHECK_RC(dlock_lock_acquire_async(l, 0, 5000, td_on_done, &g2, NULL), 0);
  CHECK(td_run_until(&f.t, &g2.calls, 3000));
  CHECK_RC(g2.rc, 0);
  CHECK_EQ(g2.token, g.token);
  /* Another handle is another owner on the loop. */
  dlock_lock *other;
  CHECK_RC(dlock_lock_new(f.c, "a:one", NULL, &other), 0);
  td_got g3 = {0};
  CHECK_RC(dlock_lock_acquire_async(other, 0, 5000, td_on_done, &g3, NULL), 0);
  CHECK(td_run_until(&f.t, &g3.calls, 3000));
  CHECK_RC(g3.rc, DLOCK_EBUSY);
  CHECK(strstr(g3.msg, "a:one") != NULL);
  td_got r1 = {0}, r2 = {0};
  CHECK_RC(dlock_lock_release_async(l, td_on_done, &r1, NULL), 0);
  CHECK(td_run_until(&f.t, &r1.calls, 3000));
  CHECK_RC(r1.rc, 0); /* still held once */
  CHECK_RC(dlock_lock_release_async(l, td_on_done, &r2, NULL), 0);
  CHECK(td_run_until(&f.t, &r2.calls, 3000));
  CHECK_RC(r2.rc, 1);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS a:one"), 0);
  /* A blocking call on an event-loop client says so. */
  CHECK_RC(dlock_lock_acquire(l, 1000, NULL), DLOCK_EINVAL);
  CHECK_EQ(r1.calls + r2.calls + g.calls + g2.calls + g3.calls, 5);
  dlock_lock_free(l);
  dlock_lock_free(other);
  td_fix_close(&f);
}
TD_DRIVERS(acquire_release)

/* A holder on a blocking client; the event-loop waiter gets the lock soon
 * after its release, and times out while it is held. */
static void waits(int kind) {
  td_fix f;
  CHECK_RC(td_fix_open(&f, kind, 0), 0);
  dlock_client *bc = th_client(&th_srv, 0);
  CHECK(bc != NULL);
  dlock_lock *h, *w;
  CHECK_RC(dlock_lock_new(bc, "a:wait", NULL, &h), 0);
  CHECK_RC(dlock_lock_new(f.c, "a:wait", NULL, &w), 0);
  CHECK_RC(dlock_lock_acquire(h, 30000, NULL), 0);
  td_got t = {0};
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_acquire_async(w, 300, 5000, td_on_done, &t, NULL), 0);
  CHECK(td_run_until(&f.t, &t.calls, 3000));
  CHECK_RC(t.rc, DLOCK_EBUSY);
  CHECK(th_now_ms() - t0 >= 300);
  td_got g = {0};
  CHECK_RC(dlock_lock_acquire_async(w, 10000, 5000, td_on_done, &g, NULL), 0);
  td_run_for(&f.t, 200);
  CHECK_EQ(g.calls, 0);
  CHECK_EQ(dlock_lock_release(h), 1);
  t0 = th_now_ms();
  CHECK(td_run_until(&f.t, &g.calls, 3000));
  CHECK_RC(g.rc, 0);
  CHECK(th_now_ms() - t0 < 1000); /* heard (pubsub_wait counts the wake-up) */
  td_got r = {0};
  CHECK_RC(dlock_lock_release_async(w, td_on_done, &r, NULL), 0);
  CHECK(td_run_until(&f.t, &r.calls, 3000));
  CHECK_RC(r.rc, 1);
  dlock_lock_free(h);
  dlock_lock_free(w);
  dlock_client_close(bc);
  td_fix_close(&f);
}
TD_DRIVERS(waits)

/* Cancel ends a wait at once; close completes what is pending. */
static void cancel_and_close(int kind) {
  td_fix f;
  CHECK_RC(td_fix_open(&f, kind, 0), 0);
  dlock_client *bc = th_client(&th_srv, 0);
  CHECK(bc != NULL);
  dlock_lock *h, *w1, *w2;
  CHECK_RC(dlock_lock_new(bc, "a:cancel", NULL, &h), 0);
  CHECK_RC(dlock_lock_new(f.c, "a:cancel", NULL, &w1), 0);
  CHECK_RC(dlock_lock_new(f.c, "a:cancel", NULL, &w2), 0);
  CHECK_RC(dlock_lock_acquire(h, 30000, NULL), 0);
  td_got g1 = {0}, g2 = {0};
  dlock_op *op = NULL;
  CHECK_RC(dlock_lock_acquire_async(w1, 20000, 5000, td_on_done, &g1, &op), 0);
  CHECK(op != NULL);
  CHECK_RC(dlock_lock_acquire_async(w2, 20000, 5000, td_on_done, &g2, NULL), 0);
  td_run_for(&f.t, 150);
  CHECK_EQ(g1.calls + g2.calls, 0);
  int64_t t0 = th_now_ms();
  dlock_op_cancel(op);
  CHECK_EQ(g1.calls, 0); /* never within the call */
  CHECK(td_run_until(&f.t, &g1.calls, 3000));
  CHECK_RC(g1.rc, DLOCK_ECANCELED);
  CHECK(th_now_ms() - t0 < 1000);
  CHECK_EQ(g2.calls, 0); /* the other still waits */
  dlock_lock_free(w1);
  dlock_lock_free(w2);
  dlock_client_close(f.c); /* g2 completes within */
  f.c = NULL;
  CHECK_EQ(g2.calls, 1);
  CHECK_RC(g2.rc, DLOCK_ECLOSED);
  CHECK_EQ(dlock_lock_release(h), 1);
  dlock_lock_free(h);
  dlock_client_close(bc);
  td_fix_close(&f);
}
TD_DRIVERS(cancel_and_close)

/* dlock_lock_free on a handle whose acquire waits cancels it: the callback
 * comes from the loop with DLOCK_ECANCELED, the fair lock's queue entry
 * (and its timeout) is gone by then, and once the holder releases, another
 * client takes the lock at once. The same for the plain lock's waiter.
 * Before, the freed handle's wait went on (no callback, its place kept). */
static void free_waiter(int kind) {
  td_fix f;
  CHECK_RC(td_fix_open(&f, kind, 0), 0);
  dlock_client *bc = th_client(&th_srv, 0), *nc = th_client(&th_srv, 0);
  CHECK(bc && nc);
  for (int fair = 1; fair >= 0; fair--) {
    const char *name = fair ? "a:freef" : "a:freep";
    dlock_lock *h, *w, *next;
    if (fair) {
      CHECK_RC(dlock_fairlock_new(bc, name, NULL, 0, &h), 0);
      CHECK_RC(dlock_fairlock_new(f.c, name, NULL, 0, &w), 0);
      CHECK_RC(dlock_fairlock_new(nc, name, NULL, 0, &next), 0);
    } else {
      CHECK_RC(dlock_lock_new(bc, name, NULL, &h), 0);
      CHECK_RC(dlock_lock_new(f.c, name, NULL, &w), 0);
      CHECK_RC(dlock_lock_new(nc, name, NULL, &next), 0);
    }
    CHECK_RC(dlock_lock_acquire(h, 30000, NULL), 0);
    td_got g = {0};
    CHECK_RC(dlock_lock_acquire_async(w, -1, 30000, td_on_done, &g, NULL), 0);
    if (fair) {
      int64_t end = th_now_ms() + 3000;
      while (th_cmd_int(&th_srv, "LLEN redisson_lock_queue:{%s}", name) != 1 &&
             th_now_ms() < end)
        td_run_for(&f.t, 5);
      CHECK_EQ(th_cmd_int(&th_srv, "LLEN redisson_lock_queue:{%s}", name), 1);
    } else {
      td_run_for(&f.t, 200);
    }
    CHECK_EQ(g.calls, 0);
    int64_t t0 = th_now_ms();
    dlock_lock_free(w);
    CHECK_EQ(g.calls, 0); /* never within the free */
    CHECK(td_run_until(&f.t, &g.calls, 3000));
    CHECK_RC(g.rc, DLOCK_ECANCELED);
    CHECK(th_now_ms() - t0 < 1000);
    CHECK_EQ(th_cmd_int(&th_srv, "LLEN redisson_lock_queue:{%s}", name), 0);
    CHECK_EQ(th_cmd_int(&th_srv, "ZCARD redisson_lock_timeout:{%s}", name), 0);
    CHECK_EQ(dlock_lock_release(h), 1);
    CHECK_RC(dlock_lock_try_acquire(next, 0, 30000, NULL), 0);
    CHECK_EQ(dlock_lock_release(next), 1);
    CHECK_EQ(th_cmd_int(&th_srv, "EXISTS %s", name), 0);
    dlock_lock_free(h);
    dlock_lock_free(next);
  }
  dlock_client_close(bc);
  dlock_client_close(nc);
  td_fix_close(&f);
}
TD_DRIVERS(free_waiter)

/* The watchdog renews on the loop: a lock taken with the watchdog's lease
 * (600 ms) outlives it while the loop runs. Positive control: a fixed
 * lease of 600 ms is gone by then. */
static void watchdog_on_loop(int kind) {
  td_fix f;
  CHECK_RC(td_fix_open(&f, kind, 600), 0);
  dlock_lock *l, *fixed;
  CHECK_RC(dlock_lock_new(f.c, "a:wd", NULL, &l), 0);
  CHECK_RC(dlock_lock_new(f.c, "a:fixed", NULL, &fixed), 0);
  td_got g = {0}, gf = {0};
  CHECK_RC(dlock_lock_acquire_async(l, 0, 0, td_on_done, &g, NULL), 0);
  CHECK_RC(dlock_lock_acquire_async(fixed, 0, 600, td_on_done, &gf, NULL), 0);
  CHECK(td_run_until(&f.t, &g.calls, 3000));
  CHECK(td_run_until(&f.t, &gf.calls, 3000));
  CHECK_RC(g.rc, 0);
  CHECK_RC(gf.rc, 0);
  td_run_for(&f.t, 1500);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS a:wd"), 1);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS a:fixed"), 0);
  dlock_client_stats st;
  CHECK_RC(dlock_client_stats_get(f.c, &st), 0);
  CHECK(st.renewals >= 3);
  CHECK_EQ(dlock_lock_is_lost(fixed), 1); /* reported at its end */
  td_got r = {0};
  CHECK_RC(dlock_lock_release_async(l, td_on_done, &r, NULL), 0);
  CHECK(td_run_until(&f.t, &r.calls, 3000));
  CHECK_RC(r.rc, 1);
  dlock_lock_free(l);
  dlock_lock_free(fixed);
  td_fix_close(&f);
}
TD_DRIVERS(watchdog_on_loop)

/* Runs the loop until `channel` has a subscriber (or ms pass). */
static bool run_until_subscribed(td_fix *f, const char *channel, int ms) {
  int64_t end = th_now_ms() + ms;
  while (th_now_ms() < end) {
    redisReply *r = th_cmd(&th_srv, "PUBSUB NUMSUB %s", channel);
    bool ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
              r->element[1]->integer > 0;
    freeReplyObject(r);
    if (ok) return true;
    td_run_for(&f->t, 10);
  }
  return false;
}

/* A waiter on the loop subscribes, joins the hand-off queue and is handed
 * the lock by the release (one wake-up, soon). With waits by backoff (the
 * control) no subscription is made and nobody is queued. */
static void pubsub_wait(int kind) {
  for (int mode = 0; mode < 2; mode++) {
    td_backoff_ms = mode == 0 ? 0 : 50;
    td_fix f;
    CHECK_RC(td_fix_open(&f, kind, 0), 0);
    dlock_client *bc = th_client(&th_srv, 0);
    CHECK(bc != NULL);
    dlock_lock *h, *w;
    CHECK_RC(dlock_lock_new(bc, "a:ps", NULL, &h), 0);
    CHECK_RC(dlock_lock_new(f.c, "a:ps", NULL, &w), 0);
    uint64_t ht = 0;
    CHECK_RC(dlock_lock_acquire(h, 30000, &ht), 0);
    td_got g = {0};
    CHECK_RC(dlock_lock_acquire_async(w, 10000, 5000, td_on_done, &g, NULL), 0);
    bool subbed = run_until_subscribed(&f, "redisson_lock__channel:{a:ps}",
                                       mode == 0 ? 3000 : 300);
    CHECK_EQ(subbed, mode == 0);
    if (mode == 0) { /* queued once the grant channel is heard */
      int64_t end = th_now_ms() + 3000;
      while (th_cmd_int(&th_srv, "LLEN dlock_lock_queue:{a:ps}") != 1 &&
             th_now_ms() < end)
        td_run_for(&f.t, 10);
      CHECK_EQ(th_cmd_int(&th_srv, "LLEN dlock_lock_queue:{a:ps}"), 1);
      /* The script's reply to the waiter left the server before LLEN's
       * did, but the loop may not have read it yet: a round reads it, so
       * the waiter is asleep before the release. Otherwise the grant can
       * be read first and kept for it, and it takes the lock without a
       * wake-up (right, but not what this counts; CI saw it under
       * valgrind). */
      td_run_for(&f.t, 20);
    }
    dlock_client_stats s0, s1;
    CHECK_RC(dlock_client_stats_get(f.c, &s0), 0);
    CHECK_EQ(g.calls, 0);
    int64_t t0 = th_now_ms();
    CHECK_EQ(dlock_lock_release(h), 1);
    CHECK(td_run_until(&f.t, &g.calls, 3000));
    CHECK_RC(g.rc, 0);
    CHECK(g.token > ht);
    int64_t took = th_now_ms() - t0;
    CHECK(took < 1000);
    CHECK_RC(dlock_client_stats_get(f.c, &s1), 0);
    CHECK_EQ(s1.wakeups - s0.wakeups, mode == 0 ? 1u : 0u);
    td_got r = {0};
    CHECK_RC(dlock_lock_release_async(w, td_on_done, &r, NULL), 0);
    CHECK(td_run_until(&f.t, &r.calls, 3000));
    CHECK_RC(r.rc, 1);
    dlock_lock_free(h);
    dlock_lock_free(w);
    dlock_client_close(bc);
    td_fix_close(&f);
  }
  td_backoff_ms = 0;
}
TD_DRIVERS(pubsub_wait)

/* As t_late_grant_of_earlier_wait_ignored (test_lock.c), on the loop: a
 * grant message read late, with a token the waiter's refused attempt
 * already found in the counter (an earlier wait's), is not taken; the
 * waiter attempts again and is handed the lock by the real release. */
static void late_grant(int kind) {
  td_fix f;
  CHECK_RC(td_fix_open(&f, kind, 0), 0);
  dlock_client *bc = th_client(&th_srv, 0);
  CHECK(bc != NULL);
  dlock_lock *h, *w;
  CHECK_RC(dlock_lock_new(bc, "a:late", NULL, &h), 0);
  CHECK_RC(dlock_lock_new(f.c, "a:late", NULL, &w), 0);
  uint64_t ht = 0;
  CHECK_RC(dlock_lock_acquire(h, 30000, &ht), 0);
  td_got g = {0};
  CHECK_RC(dlock_lock_acquire_async(w, 10000, 5000, td_on_done, &g, NULL), 0);
  int64_t end = th_now_ms() + 3000;
  while (th_cmd_int(&th_srv, "LLEN dlock_lock_queue:{a:late}") != 1 &&
         th_now_ms() < end)
    td_run_for(&f.t, 10);
  CHECK_EQ(th_cmd_int(&th_srv, "LLEN dlock_lock_queue:{a:late}"), 1);
  td_run_for(&f.t, 20); /* the refused attempt's reply read */
  redisReply *q = th_cmd(&th_srv, "LINDEX dlock_lock_queue:{a:late} 0");
  CHECK(q != NULL && q->type == REDIS_REPLY_STRING);
  freeReplyObject(th_cmd(&th_srv, "CONFIG RESETSTAT"));
  CHECK_EQ(th_cmd_int(&th_srv,
                      "PUBLISH redisson_lock__channel:{a:late}:%s =%llu",
                      q->str, (unsigned long long)ht),
           1);
  freeReplyObject(q);
  end = th_now_ms() + 3000;
  while (g.calls == 0 && th_scripts_run(&th_srv) == 0 && th_now_ms() < end)
    td_run_for(&f.t, 10);
  CHECK_EQ(g.calls, 0); /* before: done at once, with h's token */
  CHECK(th_scripts_run(&th_srv) > 0);
  CHECK_EQ(dlock_lock_release(h), 1);
  CHECK(td_run_until(&f.t, &g.calls, 3000));
  CHECK_RC(g.rc, 0);
  CHECK(g.token > ht);
  td_got r = {0};
  CHECK_RC(dlock_lock_release_async(w, td_on_done, &r, NULL), 0);
  CHECK(td_run_until(&f.t, &r.calls, 3000));
  CHECK_RC(r.rc, 1);
  dlock_lock_free(h);
  dlock_lock_free(w);
  dlock_client_close(bc);
  td_fix_close(&f);
}
TD_DRIVERS(late_grant)

static int lost_calls;

static void on_lost(dlock_lock *l, const char *owner, void *ud) {
  (void)l;
  (void)owner;
  (void)ud;
  lost_calls++;
}

/* A force release by another client is heard on the loop's subscriber
 * connection and the hold reported lost at once (the watchdog's renewal
 * is 10 s away); so is a plain DEL where the server publishes keyspace
 * events (mode 2). Control: a client waiting by backoff has no subscriber
 * and does not hear the force release within the second. */
static void loss_on_loop(int kind) {
  for (int mode = 0; mode < 3; mode++) {
    td_backoff_ms = mode == 1 ? 50 : 0;
    dlock_client *bc = th_client(&th_srv, 0); /* hears no keyspace events */
    CHECK(bc != NULL);
    if (mode == 2)
      freeReplyObject(th_cmd(&th_srv, "CONFIG SET notify-keyspace-events Eg"));
    td_fix f;
    CHECK_RC(td_fix_open(&f, kind, 30000), 0);
    if (mode == 0) CHECK(run_until_subscribed(&f, "dlock_revoke", 3000));
    if (mode == 2)
      CHECK(run_until_subscribed(&f, "__keyevent@0__:del", 3000));
    dlock_lock *l, *other;
    CHECK_RC(dlock_lock_new(f.c, "a:lost", NULL, &l), 0);
    CHECK_RC(dlock_lock_new(bc, "a:lost", NULL, &other), 0);
    dlock_lock_on_lost(l, on_lost, NULL);
    lost_calls = 0;
    td_got g = {0};
    CHECK_RC(dlock_lock_acquire_async(l, 0, 0, td_on_done, &g, NULL), 0);
    CHECK(td_run_until(&f.t, &g.calls, 3000));
    CHECK_RC(g.rc, 0);
    int64_t t0 = th_now_ms();
    if (mode == 2) CHECK_EQ(th_cmd_int(&th_srv, "DEL a:lost"), 1);
    else CHECK_EQ(dlock_lock_force_release(other), 1);
    bool heard = td_run_until(&f.t, &lost_calls, 1000);
    CHECK_EQ(heard, mode != 1);
    if (mode != 1) {
      CHECK(th_now_ms() - t0 < 1000);
      CHECK_EQ(dlock_lock_is_lost(l), 1);
      td_got r = {0};
      CHECK_RC(dlock_lock_release_async(l, td_on_done, &r, NULL), 0);
      CHECK(td_run_until(&f.t, &r.calls, 3000));
      CHECK_RC(r.rc, DLOCK_ELOST);
    }
    CHECK_EQ(lost_calls, mode != 1 ? 1 : 0);
    dlock_lock_free(l);
    dlock_lock_free(other);
    dlock_client_close(bc);
    td_fix_close(&f);
  }
  td_backoff_ms = 0;
}
TD_DRIVERS(loss_on_loop)

/* The server drops both of the loop client's connections while a waiter
 * waits: the subscriber connects again and subscribes again, the waiter
 * still hears the release and acquires. */
static void reconnect_during_wait(int kind) {
  td_backoff_ms = 0;
  td_fix f;
  CHECK_RC(td_fix_open(&f, kind, 0), 0);
  dlock_client *bc = th_client(&th_srv, 0);
  CHECK(bc != NULL);
  dlock_lock *h, *w;
  CHECK_RC(dlock_lock_new(bc, "a:rc", NULL, &h), 0);
  CHECK_RC(dlock_lock_new(f.c, "a:rc", NULL, &w), 0);
  CHECK_RC(dlock_lock_acquire(h, 60000, NULL), 0);
  td_got g = {0};
  int64_t called = th_now_ms();
  CHECK_RC(dlock_lock_acquire_async(w, 20000, 5000, td_on_done, &g, NULL), 0);
  CHECK(run_until_subscribed(&f, "redisson_lock__channel:{a:rc}", 3000));
  CHECK(th_cmd_int(&th_srv, "CLIENT KILL TYPE pubsub") >= 1);
  CHECK(th_cmd_int(&th_srv, "CLIENT KILL TYPE normal") >= 1);
  CHECK(run_until_subscribed(&f, "redisson_lock__channel:{a:rc}", 5000));
  CHECK_EQ(g.calls, 0);
  int64_t t0 = th_now_ms();
  CHECK_EQ(dlock_lock_release(h), 1);
  CHECK(td_run_until(&f.t, &g.calls, 5000));
  CHECK_RC(g.rc, 0);
  /* Heard, not found at the holder's TTL (60 s) or a recheck. */
  CHECK(th_now_ms() - t0 < 2000);
  dlock_metrics m; /* the command connection came back, and is counted */
  CHECK_RC(dlock_client_metrics(f.c, &m), 0);
  CHECK(m.reconnects >= 1);
  /* Its wait, from the call to the grant, at least until the release. */
  CHECK_EQ(m.wait_seconds.count, 1);
  CHECK(m.wait_seconds.sum >= (double)(t0 - called) / 1000);
  CHECK_EQ(m.hold_seconds.count, 0);
  td_got r = {0};
  CHECK_RC(dlock_lock_release_async(w, td_on_done, &r, NULL), 0);
  CHECK(td_run_until(&f.t, &r.calls, 3000));
  CHECK_RC(r.rc, 1);
  CHECK_RC(dlock_client_metrics(f.c, &m), 0); /* its hold, ended */
  CHECK_EQ(m.hold_seconds.count, 1);
  CHECK_EQ(m.hold_seconds.bucket[DLOCK_METRICS_BUCKETS - 1], 1);
  dlock_lock_free(h);
  dlock_lock_free(w);
  dlock_client_close(bc);
  td_fix_close(&f);
  td_backoff_ms = 0;
}
TD_DRIVERS(reconnect_during_wait)

TH_MAIN(TD_T(acquire_release), TD_T(waits), TD_T(cancel_and_close),
        TD_T(free_waiter), TD_T(watchdog_on_loop), TD_T(pubsub_wait),
        TD_T(loss_on_loop), TD_T(reconnect_during_wait), TD_T(late_grant))
