/* test_latch.c: the count-down latch against a real server: counting,
 * waits that all wake at zero without polling, and interop with Redisson's
 * own scripts. */
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

/* RedissonCountDownLatch.countDownAsync */
static const char *REDISSON_LATCH_DOWN =
    "local v = redis.call('decr', KEYS[1]);"
    "if v <= 0 then redis.call('del', KEYS[1]) end;"
    "if v == 0 then redis.call('publish', KEYS[2], ARGV[1]) end;";
/* RedissonCountDownLatch.trySetCountAsync */
static const char *REDISSON_LATCH_SET =
    "if redis.call('exists', KEYS[1]) == 0 then "
    "redis.call('set', KEYS[1], ARGV[2]); "
    "redis.call('publish', KEYS[2], ARGV[1]); "
    "return 1 "
    "else "
    "return 0 "
    "end";

typedef struct waiter {
  dlock_latch *l;
  atomic_int rc; /* read while the thread runs */
  int64_t done_at;
  bool forever;
} waiter;

static void t_latch_basics(void) {
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_latch *l;
  int64_t n = -1;
  CHECK_RC(dlock_latch_new(c, "latch:basic", &l), 0);
  CHECK_RC(dlock_latch_try_await(l, 0), 0); /* no count running */
  CHECK_RC(dlock_latch_await(l), 0);
  CHECK_EQ(dlock_latch_try_set_count(l, 2), 1);
  CHECK_EQ(dlock_latch_try_set_count(l, 5), 0); /* running: unchanged */
  CHECK_RC(dlock_latch_get_count(l, &n), 0);
  CHECK_EQ(n, 2);
  /* Not at zero in time: DLOCK_EBUSY, as for every kind. */
  CHECK_RC(dlock_latch_try_await(l, 0), DLOCK_EBUSY);
  CHECK(strstr(dlock_client_errmsg(c), "latch:basic") != NULL);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_latch_try_await(l, 120), DLOCK_EBUSY);
  CHECK(th_now_ms() - t0 >= 120);
  CHECK_RC(dlock_latch_count_down(l), 0);
  CHECK_RC(dlock_latch_get_count(l, &n), 0);
  CHECK_EQ(n, 1);
  CHECK_RC(dlock_latch_count_down(l), 0);
  CHECK_RC(dlock_latch_get_count(l, &n), 0);
  CHECK_EQ(n, 0);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS latch:basic"), 0);
  /* Below zero: an error, and nothing written. */
  CHECK_RC(dlock_latch_count_down(l), DLOCK_ERANGE);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS latch:basic"), 0);
  CHECK_RC(dlock_latch_try_set_count(l, 0), DLOCK_EINVAL);
  CHECK_RC(dlock_latch_try_await(l, 0), 0);
  CHECK_RC(dlock_latch_try_await(NULL, 0), DLOCK_EINVAL);
  CHECK_RC(dlock_latch_await(NULL), DLOCK_EINVAL);
  dlock_latch_free(l);
  dlock_client_close(c);
}

static void *await_zero(void *p) {
  waiter *w = p;
  /* Waiter 0 without a limit, the others with one. */
  w->rc =
      w->forever ? dlock_latch_await(w->l) : dlock_latch_try_await(w->l, 10000);
  w->done_at = th_now_ms();
  return NULL;
}

static void t_latch_wakes_all(void) {
  dlock_client *wc = th_client(&th_srv, 0), *dc = th_client(&th_srv, 0);
  CHECK(wc && dc);
  dlock_latch *wl, *dl;
  CHECK_RC(dlock_latch_new(wc, "latch:wake", &wl), 0);
  CHECK_RC(dlock_latch_new(dc, "latch:wake", &dl), 0);
  CHECK_EQ(dlock_latch_try_set_count(dl, 2), 1);
  waiter w[3];
  pthread_t t[3];
  for (int i = 0; i < 3; i++) {
    w[i] = (waiter){.l = wl, .rc = 99, .forever = i == 0};
    pthread_create(&t[i], NULL, await_zero, &w[i]);
  }
  CHECK(th_wait_subscribed(
      &th_srv, "redisson_countdownlatch__channel:{latch:wake}", 2000));
  th_sleep_ms(100);
  dlock_client_stats st0, st1;
  dlock_client_stats_get(wc, &st0);
  CHECK_RC(dlock_latch_count_down(dl), 0); /* 1 left: they sleep on */
  th_sleep_ms(200);
  dlock_client_stats_get(wc, &st1);
  /* A new count message may make each look once; no more than that. */
  CHECK(st1.writes - st0.writes <= 3);
  for (int i = 0; i < 3; i++)
    CHECK_EQ(atomic_load(&w[i].rc), 99);
  int64_t t0 = th_now_ms();
  /* Redisson's countDown reaches zero: every waiter wakes. */
  redisReply *r = th_cmd(&th_srv,
                         "EVAL %s 2 latch:wake "
                         "redisson_countdownlatch__channel:{latch:wake} 0",
                         REDISSON_LATCH_DOWN);
  if (r) freeReplyObject(r);
  for (int i = 0; i < 3; i++) {
    pthread_join(t[i], NULL);
    CHECK_RC(w[i].rc, 0);
    CHECK(w[i].done_at - t0 < 500);
  }
  /* And Redisson sees our count. */
  CHECK_EQ(dlock_latch_try_set_count(dl, 4), 1);
  CHECK_EQ(th_cmd_int(&th_srv, "GET latch:wake"), 4);
  CHECK_EQ(th_cmd_int(&th_srv,
                      "EVAL %s 2 latch:wake "
                      "redisson_countdownlatch__channel:{latch:wake} 1 "
                      "7",
                      REDISSON_LATCH_SET),
           0);
  dlock_latch_free(wl);
  dlock_latch_free(dl);
  dlock_client_close(wc);
  dlock_client_close(dc);
}
/* What a participant's callback saw, in order. */
typedef struct seen_leads {
  pthread_mutex_t mu;
  int n, v[16];
} seen_leads;

static void on_lead(dlock_leader *l, int leader, void *ud) {
  (void)l;
  seen_leads *s = ud;
  pthread_mutex_lock(&s->mu);
  if (s->n < 16) s->v[s->n] = leader;
  s->n++;
  pthread_mutex_unlock(&s->mu);
}

static int leads(seen_leads *s) {
  pthread_mutex_lock(&s->mu);
  int n = s->n;
  pthread_mutex_unlock(&s->mu);
  return n;
}

/* Leader election on Redis: the participants take turns on the lock NAME
 * (Curator's LeaderSelector on a mutex). The first leads with the hold's
 * token and its id as the lock's description (get_leader); the second
 * waits, and leads once the first leaves, with a larger token; a force
 * release deposes the leader (told at once), which joins again and leads
 * again (alone), with a larger token. Session states are ZooKeeper's:
 * DLOCK_ENOTSUP here. */
static void t_leader_on_redis(void) {
  dlock_client *a = th_client(&th_srv, 0), *b = th_client(&th_srv, 0);
  CHECK(a && b);
  dlock_leader *la, *lb;
  CHECK_RC(dlock_leader_new(a, "el:x", "node-A", &la), 0);
  CHECK_RC(dlock_leader_new(b, "el:x", "node-B", &lb), 0);
  seen_leads sb = {PTHREAD_MUTEX_INITIALIZER, 0, {0}};
  CHECK_RC(dlock_leader_on_change(lb, on_lead, &sb), 0);
  char id[32];
  CHECK_RC(dlock_leader_get_current(la, id, sizeof id), 0); /* nobody */
  CHECK_RC(dlock_leader_start(la), 0);
  CHECK_RC(dlock_leader_try_await(la, 5000), 0);
  uint64_t ta = 0, tb = 0, tb2 = 0;
  CHECK_RC(dlock_leader_token(la, &ta), 0);
  CHECK(ta > 0);
  CHECK_RC(dlock_leader_get_current(lb, id, sizeof id), 1);
  CHECK(strcmp(id, "node-A") == 0);
  CHECK_RC(dlock_leader_start(lb), 0);
  CHECK_RC(dlock_leader_try_await(lb, 300), DLOCK_EBUSY);
  CHECK_EQ(leads(&sb), 0);
  dlock_leader_free(la); /* leaves: B leads */
  CHECK_RC(dlock_leader_try_await(lb, 5000), 0);
  CHECK_RC(dlock_leader_token(lb, &tb), 0);
  CHECK(tb > ta);
  CHECK_RC(dlock_leader_get_current(lb, id, sizeof id), 1);
  CHECK(strcmp(id, "node-B") == 0);
  /* Deposed by a force release: told, joins again, leads again. */
  dlock_lock *f;
  CHECK_RC(dlock_lock_new(a, "el:x", NULL, &f), 0);
  CHECK_EQ(dlock_lock_force_release(f), 1);
  int64_t end = th_now_ms() + 5000;
  while (leads(&sb) < 3 && th_now_ms() < end)
    th_sleep_ms(5);
  CHECK_EQ(leads(&sb), 3);
  CHECK_EQ(sb.v[0], 1);
  CHECK_EQ(sb.v[1], 0);
  CHECK_EQ(sb.v[2], 1);
  CHECK_RC(dlock_leader_token(lb, &tb2), 0);
  CHECK(tb2 > tb);
  dlock_leader_free(lb); /* leaves: the lock is free */
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS el:x"), 0);
  CHECK_RC(dlock_client_on_state(a, NULL, NULL), DLOCK_ENOTSUP);
  CHECK_RC(dlock_client_on_state(NULL, NULL, NULL), DLOCK_EINVAL);
  dlock_lock_free(f);
  dlock_client_close(a);
  dlock_client_close(b);
}

TH_MAIN(T(t_latch_basics), T(t_latch_wakes_all), T(t_leader_on_redis))
