/* test_asub.c: the event loop's subscriber connection (redis/conns/asub.c)
 * against a real redis-server, with each driver (built-in, libuv,
 * libevent): confirmations, the wake modes, the grant, deadlines, cancel,
 * the resubscribe after a restart, the linger, the close, many waiters. */
#include "aconn_cfg.h"
#include "loop_drivers.h"

#include <string.h>

typedef struct setup {
  td_loop t;
  dl_conn_config cfg;
  dl_asub *s;
} setup;

/* Over TCP: the restart test restarts the server on the same port. */
static int setup_open(setup *s, int kind) {
  memset(s, 0, sizeof *s);
  int rc = td_open(&s->t, kind);
  if (rc == 0) rc = th_aconn_cfg(&s->cfg, "dlock-asub-test");
  if (rc == 0) rc = dl_asub_new(s->t.lp, &s->cfg, &s->s);
  return rc;
}

static void setup_close(setup *s) {
  dl_asub_free(s->s);
  td_close(&s->t);
  dl_endpoint_clear(&s->cfg.ep);
}

/* One request's outcome, and when it came among the others. */
static int order_seq;
typedef struct got {
  int calls, rc, done, order;
} got;

static void on_done(void *ud, int rc) {
  got *g = ud;
  g->calls++;
  g->rc = rc;
  g->done = 1;
  g->order = ++order_seq;
}

static long long numsub(const char *ch) {
  redisReply *r = th_cmd(&th_srv, "PUBSUB NUMSUB %s", ch);
  long long n = -1;
  if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
    n = r->element[1]->integer;
  if (r) freeReplyObject(r);
  return n;
}

/* A reference to ch, confirmed. */
static dl_sub *ref_confirmed(setup *s, const char *ch, int mode) {
  dl_sub *sub = dl_asub_ref(s->s, ch, mode);
  if (sub == NULL) return NULL;
  got g = {0};
  if (dl_asub_confirm(s->s, sub, dl_now_ms() + 3000, on_done, &g) == NULL ||
      !td_run_until(&s->t, &g.done, 4000) || g.rc != 0)
    return NULL;
  return sub;
}

static void publish(const char *ch, const char *msg) {
  th_cmd_int(&th_srv, "PUBLISH %s %s", ch, msg);
}

static int64_t far(void) { return dl_now_ms() + 60000; }

static void ref_confirm(int kind) {
  setup s;
  CHECK_RC(setup_open(&s, kind), 0);
  dl_sub *sub = dl_asub_ref(s.s, "ch", DL_WAKE_LOCK);
  CHECK(sub != NULL);
  CHECK(!dl_asub_confirmed(s.s, sub));
  got g = {0};
  CHECK(dl_asub_confirm(s.s, sub, dl_now_ms() + 3000, on_done, &g) != NULL);
  CHECK(td_run_until(&s.t, &g.done, 4000));
  CHECK_EQ(g.calls, 1);
  CHECK_RC(g.rc, 0);
  CHECK(dl_asub_confirmed(s.s, sub));
  CHECK_EQ(numsub("ch"), 1);
  /* Confirmed already: fn still comes from the loop, not from the call. */
  got g2 = {0};
  CHECK(dl_asub_confirm(s.s, sub, dl_now_ms() + 3000, on_done, &g2) != NULL);
  CHECK_EQ(g2.calls, 0);
  CHECK(td_run_until(&s.t, &g2.done, 1000));
  CHECK_RC(g2.rc, 0);
  dl_asub_unref(s.s, sub, false);
  setup_close(&s);
}
TD_DRIVERS(ref_confirm)

/* Three waiters on one channel, since 30, 10, 20 (g[0..2]). */
static bool three_waiters(setup *s, dl_sub *sub, got g[3]) {
  int64_t since[3] = {30, 10, 20};
  memset(g, 0, 3 * sizeof *g);
  for (int i = 0; i < 3; i++)
    if (dl_asub_wait(s->s, sub, far(), since[i], NULL, on_done, &g[i]) ==
        NULL)
      return false;
  return true;
}

static void lock_wakes_one(int kind) {
  setup s;
  CHECK_RC(setup_open(&s, kind), 0);
  dl_sub *sub = ref_confirmed(&s, "lk", DL_WAKE_LOCK);
  CHECK(sub != NULL);
  got g[3];
  CHECK(three_waiters(&s, sub, g));
  publish("lk", "0");
  CHECK(td_run_until(&s.t, &g[1].done, 3000)); /* the earliest since */
  td_run_for(&s.t, 200);
  CHECK_RC(g[1].rc, 1);
  CHECK_EQ(g[0].calls + g[2].calls, 0);
  publish("lk", "0");
  CHECK(td_run_until(&s.t, &g[2].done, 3000));
  td_run_for(&s.t, 100);
  CHECK_EQ(g[0].calls, 0);
  CHECK_EQ(dl_asub_wakeups(s.s), 2);
  publish("lk", "0");
  CHECK(td_run_until(&s.t, &g[0].done, 3000));
  dl_asub_unref(s.s, sub, false);
  setup_close(&s);
}
TD_DRIVERS(lock_wakes_one)

/* Every waiter woken, in the order of since (g[1], g[2], g[0]). */
static void check_all_woken(setup *s, got g[3]) {
  CHECK(td_run_until(&s->t, &g[0].done, 3000));
  CHECK(td_run_until(&s->t, &g[1].done, 3000));
  CHECK(td_run_until(&s->t, &g[2].done, 3000));
  for (int i = 0; i < 3; i++) CHECK_RC(g[i].rc, 1);
  CHECK(g[1].order < g[2].order && g[2].order < g[0].order);
}

/* One message on ch (mode) wakes all three waiters. */
static void wakes_all(int kind, const char *ch, int mode, const char *msg) {
  setup s;
  CHECK_RC(setup_open(&s, kind), 0);
  dl_sub *sub = ref_confirmed(&s, ch, mode);
  CHECK(sub != NULL);
  got g[3];
  CHECK(three_waiters(&s, sub, g));
  publish(ch, msg);
  check_all_woken(&s, g);
  if (th_failed_checks) return;
  dl_asub_unref(s.s, sub, false);
  setup_close(&s);
}

static void lock_one_wakes_all(int kind) {
  wakes_all(kind, "lk", DL_WAKE_LOCK, "1");
}
TD_DRIVERS(lock_one_wakes_all)

static void all_wakes_all(int kind) {
  wakes_all(kind, "latch", DL_WAKE_ALL, "x");
}
TD_DRIVERS(all_wakes_all)

static void count_wakes_n(int kind) {
  setup s;
  CHECK_RC(setup_open(&s, kind), 0);
  dl_sub *sub = ref_confirmed(&s, "sem", DL_WAKE_COUNT);
  CHECK(sub != NULL);
  got g[3];
  CHECK(three_waiters(&s, sub, g));
  publish("sem", "2");
  CHECK(td_run_until(&s.t, &g[2].done, 3000));
  td_run_for(&s.t, 200);
  CHECK(g[1].done && g[1].order < g[2].order);
  CHECK_EQ(g[0].calls, 0);
  dl_asub_kick(s.s, sub); /* the last one, without a message */
  CHECK(td_run_until(&s.t, &g[0].done, 3000));
  CHECK_RC(g[0].rc, 1);
  dl_asub_unref(s.s, sub, false);
  setup_close(&s);
}
TD_DRIVERS(count_wakes_n)

/* "=42" on a waiter's grant channel wakes it alone, and hands it 42. */
static void grant_wakes_its_waiter(int kind) {
  setup s;
  CHECK_RC(setup_open(&s, kind), 0);
  dl_sub *sub = ref_confirmed(&s, "lk", DL_WAKE_LOCK);
  dl_sub *gr = ref_confirmed(&s, "lk:grant:a", DL_WAKE_GRANT);
  CHECK(sub != NULL && gr != NULL);
  uint64_t token = 0;
  CHECK_EQ(dl_asub_grant(s.s, gr, &token), 0); /* none yet */
  got a = {0}, b = {0};
  CHECK(dl_asub_wait(s.s, sub, far(), 10, NULL, on_done, &b) != NULL);
  CHECK(dl_asub_wait(s.s, sub, far(), 20, gr, on_done, &a) != NULL);
  publish("lk:grant:a", "=42");
  CHECK(td_run_until(&s.t, &a.done, 3000));
  td_run_for(&s.t, 200);
  CHECK_RC(a.rc, 1);
  CHECK_EQ(b.calls, 0);
  CHECK_EQ(dl_asub_grant(s.s, gr, &token), 1);
  CHECK_EQ(token, 42);
  CHECK_EQ(dl_asub_grant(s.s, gr, &token), 0); /* taken */
  /* A grant that comes while its waiter is awake is kept for it. */
  publish("lk:grant:a", "=43");
  td_run_for(&s.t, 200);
  got a2 = {0};
  CHECK(dl_asub_wait(s.s, sub, far(), 20, gr, on_done, &a2) != NULL);
  CHECK(td_run_until(&s.t, &a2.done, 3000));
  CHECK_EQ(dl_asub_grant(s.s, gr, &token), 1);
  CHECK_EQ(token, 43);
  CHECK_EQ(b.calls, 0);
  setup_close(&s); /* b hears DLOCK_ECLOSED; the subscriptions go */
  CHECK_RC(b.rc, DLOCK_ECLOSED);
}
TD_DRIVERS(grant_wakes_its_waiter)

static void deadlines(int kind) {
  setup s;
  CHECK_RC(setup_open(&s, kind), 0);
  dl_sub *sub = dl_asub_ref(s.s, "lk", DL_WAKE_LOCK);
  CHECK(sub != NULL);
  got c = {0};
  CHECK(dl_asub_confirm(s.s, sub, dl_now_ms() - 1, on_done, &c) != NULL);
  CHECK(td_run_until(&s.t, &c.done, 1000));
  CHECK_RC(c.rc, DLOCK_ETIMEDOUT);
  got w = {0};
  int64_t t0 = dl_now_ms();
  CHECK(dl_asub_wait(s.s, sub, t0 + 100, 1, NULL, on_done, &w) != NULL);
  CHECK(td_run_until(&s.t, &w.done, 2000));
  CHECK_RC(w.rc, 0);
  CHECK(dl_now_ms() - t0 >= 100);
  CHECK_EQ(w.calls, 1);
  dl_asub_unref(s.s, sub, false);
  setup_close(&s);
}
TD_DRIVERS(deadlines)

/* A cancelled wait never hears; one woken but not yet told passes its
 * wake-up on. */
static void cancel(int kind) {
  setup s;
  CHECK_RC(setup_open(&s, kind), 0);
  dl_sub *sub = ref_confirmed(&s, "lk", DL_WAKE_LOCK);
  CHECK(sub != NULL);
  got a = {0}, b = {0};
  dl_asub_req *ra = dl_asub_wait(s.s, sub, far(), 1, NULL, on_done, &a);
  CHECK(dl_asub_wait(s.s, sub, far(), 2, NULL, on_done, &b) != NULL);
  dl_asub_cancel(ra);
  publish("lk", "0");
  CHECK(td_run_until(&s.t, &b.done, 3000));
  CHECK_EQ(a.calls, 0);
  /* Woken by kick (told at the next dispatch), cancelled before. */
  got c = {0}, d = {0};
  dl_asub_req *rc = dl_asub_wait(s.s, sub, far(), 1, NULL, on_done, &c);
  dl_asub_kick(s.s, sub);
  CHECK(dl_asub_wait(s.s, sub, far(), 2, NULL, on_done, &d) != NULL);
  dl_asub_cancel(rc);
  CHECK(td_run_until(&s.t, &d.done, 3000));
  CHECK_EQ(c.calls, 0);
  dl_asub_cancel(NULL);
  dl_asub_unref(s.s, sub, false);
  setup_close(&s);
}
TD_DRIVERS(cancel)

typedef struct notes {
  int nulls, keys;
  char last[32];
} notes;

static void on_notice(void *ud, const char *key, size_t len) {
  notes *n = ud;
  if (key == NULL) {
    n->nulls++;
    return;
  }
  n->keys++;
  snprintf(n->last, sizeof n->last, "%.*s", (int)len, key);
}

/* The server restarts: waiters are woken, every channel is subscribed
 * again, the notice hears NULL, and messages are heard again. */
static void resubscribe(int kind) {
  setup s;
  CHECK_RC(setup_open(&s, kind), 0);
  notes n = {0};
  CHECK_RC(dl_asub_listen(s.s, "revoke", false, 0, on_notice, &n), 0);
  dl_sub *sub = ref_confirmed(&s, "lk", DL_WAKE_LOCK);
  CHECK(sub != NULL);
  CHECK(th_wait_subscribed(&th_srv, "revoke", 3000));
  publish("revoke", "k1");
  int64_t end = th_now_ms() + 3000;
  while (n.keys < 1 && th_now_ms() < end) td_once(&s.t, 20);
  CHECK_EQ(n.keys, 1);
  CHECK(strcmp(n.last, "k1") == 0);
  int nulls = n.nulls; /* one per connect */
  got w = {0};
  CHECK(dl_asub_wait(s.s, sub, far(), 1, NULL, on_done, &w) != NULL);
  CHECK_EQ(th_redis_restart(&th_srv), 0);
  CHECK(td_run_until(&s.t, &w.done, 5000)); /* woken by the loss */
  CHECK_RC(w.rc, 1);
  end = th_now_ms() + 5000;
  while ((n.nulls == nulls || !dl_asub_confirmed(s.s, sub)) &&
         th_now_ms() < end)
    td_once(&s.t, 20);
  CHECK(n.nulls > nulls);
  CHECK(dl_asub_confirmed(s.s, sub));
  CHECK_EQ(numsub("lk"), 1);
  got w2 = {0};
  CHECK(dl_asub_wait(s.s, sub, far(), 1, NULL, on_done, &w2) != NULL);
  publish("lk", "0");
  CHECK(td_run_until(&s.t, &w2.done, 3000));
  CHECK_RC(w2.rc, 1);
  publish("revoke", "k2");
  end = th_now_ms() + 3000;
  while (n.keys < 2 && th_now_ms() < end) td_once(&s.t, 20);
  CHECK(strcmp(n.last, "k2") == 0);
  dl_asub_unref(s.s, sub, false);
  setup_close(&s);
}
TD_DRIVERS(resubscribe)

/* What the server counts of "revoke" when the notice hears NULL. */
typedef struct at_null {
  int nulls;
  long long subscribed; /* PUBSUB NUMSUB "revoke" then */
} at_null;

static void on_null(void *ud, const char *key, size_t len) {
  (void)len;
  at_null *a = ud;
  if (key != NULL) return;
  a->nulls++;
  a->subscribed = numsub("revoke");
}

/* The notice hears NULL ("check every hold") once the server has the
 * subscription, at the first connect and after a restart: a take-away
 * published before that is heard by nobody, and the check must come
 * after it (it came at the connect, before the SUBSCRIBE was written: an
 * event-loop client's first acquire, done first, then had a force release
 * heard only at the watchdog's next renewal). */
static void notice_after_confirm(int kind) {
  setup s;
  CHECK_RC(setup_open(&s, kind), 0);
  at_null a = {0, -1};
  CHECK_RC(dl_asub_listen(s.s, "revoke", false, 0, on_null, &a), 0);
  int64_t end = th_now_ms() + 3000;
  while (a.nulls == 0 && th_now_ms() < end)
    td_once(&s.t, 20);
  CHECK_EQ(a.nulls, 1);
  CHECK_EQ(a.subscribed, 1);
  a.subscribed = -1;
  CHECK_EQ(th_redis_restart(&th_srv), 0);
  end = th_now_ms() + 5000;
  while (a.nulls == 1 && th_now_ms() < end)
    td_once(&s.t, 20);
  CHECK_EQ(a.nulls, 2);
  CHECK_EQ(a.subscribed, 1);
  setup_close(&s);
}
TD_DRIVERS(notice_after_confirm)

/* The last unref with linger: still subscribed for about a second (a new
 * ref finds it confirmed), then unsubscribed. */
static void linger(int kind) {
  setup s;
  CHECK_RC(setup_open(&s, kind), 0);
  dl_sub *sub = ref_confirmed(&s, "lk", DL_WAKE_LOCK);
  CHECK(sub != NULL);
  dl_asub_unref(s.s, sub, true);
  td_run_for(&s.t, 300);
  CHECK_EQ(numsub("lk"), 1);
  sub = dl_asub_ref(s.s, "lk", DL_WAKE_LOCK);
  CHECK(dl_asub_confirmed(s.s, sub)); /* no round trip */
  dl_asub_unref(s.s, sub, true);
  int64_t t0 = th_now_ms();
  while (numsub("lk") != 0 && th_now_ms() - t0 < 4000) td_run_for(&s.t, 50);
  CHECK_EQ(numsub("lk"), 0);
  CHECK(th_now_ms() - t0 >= 900);
  /* Without linger: at once. */
  sub = ref_confirmed(&s, "lk2", DL_WAKE_LOCK);
  CHECK(sub != NULL);
  dl_asub_unref(s.s, sub, false);
  t0 = th_now_ms();
  while (numsub("lk2") != 0 && th_now_ms() - t0 < 2000) td_run_for(&s.t, 20);
  CHECK(th_now_ms() - t0 < 900);
  setup_close(&s);
}
TD_DRIVERS(linger)

/* Free with requests pending: each fn once, DLOCK_ECLOSED. */
static void free_pending(int kind) {
  setup s;
  CHECK_RC(setup_open(&s, kind), 0);
  dl_sub *sub = ref_confirmed(&s, "lk", DL_WAKE_LOCK);
  dl_sub *fresh = dl_asub_ref(s.s, "new", DL_WAKE_LOCK);
  CHECK(sub != NULL && fresh != NULL);
  got g[3], c = {0};
  CHECK(three_waiters(&s, sub, g));
  CHECK(dl_asub_confirm(s.s, fresh, far(), on_done, &c) != NULL);
  dl_asub_free(s.s);
  s.s = NULL;
  for (int i = 0; i < 3; i++) {
    CHECK_EQ(g[i].calls, 1);
    CHECK_RC(g[i].rc, DLOCK_ECLOSED);
  }
  CHECK_EQ(c.calls, 1);
  CHECK_RC(c.rc, DLOCK_ECLOSED);
  setup_close(&s);
}
TD_DRIVERS(free_pending)

/* 10 000 idle waiters on one loop: a timer each, no fd or thread; "1"
 * wakes them all, in the order of since. */
#define MANY 10000
static int many_woken, many_last_since, many_bad;
typedef struct many_w {
  int since;
} many_w;
static void on_many(void *ud, int rc) {
  many_w *w = ud;
  if (rc != 1 || w->since < many_last_since) many_bad++;
  many_last_since = w->since;
  many_woken++;
}

static void many_waiters(int kind) {
  setup s;
  CHECK_RC(setup_open(&s, kind), 0);
  dl_sub *sub = ref_confirmed(&s, "lk", DL_WAKE_LOCK);
  CHECK(sub != NULL);
  many_w *w = calloc(MANY, sizeof *w);
  CHECK(w != NULL);
  many_woken = many_last_since = many_bad = 0;
  for (int i = 0; i < MANY; i++) {
    w[i].since = (i * 7919) % MANY; /* out of order */
    CHECK(dl_asub_wait(s.s, sub, far(), w[i].since, NULL, on_many, &w[i]) !=
          NULL);
  }
  CHECK(dl_loop_timers(s.t.lp) >= MANY);
  td_run_for(&s.t, 100);
  CHECK_EQ(many_woken, 0);
  publish("lk", "1");
  int64_t end = th_now_ms() + 10000;
  while (many_woken < MANY && th_now_ms() < end) td_once(&s.t, 20);
  CHECK_EQ(many_woken, MANY);
  CHECK_EQ(many_bad, 0);
  free(w);
  dl_asub_unref(s.s, sub, false);
  setup_close(&s);
}
TD_DRIVERS(many_waiters)

TH_MAIN(TD_T(ref_confirm), TD_T(lock_wakes_one), TD_T(lock_one_wakes_all),
        TD_T(count_wakes_n), TD_T(all_wakes_all), TD_T(grant_wakes_its_waiter),
        TD_T(deadlines), TD_T(cancel), TD_T(resubscribe),
        TD_T(notice_after_confirm), TD_T(linger), TD_T(free_pending),
        TD_T(many_waiters))
