/* test_semaphore.c: the semaphore and the count-down latch against a real
 * server: semantics, admission under processes x threads, waits that wake
 * without polling, misuse, and interop with Redisson's own scripts. */
#include "harness.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static th_redis srv;

static void setup(void) {
  if (srv.pid == 0 && th_redis_start(&srv, NULL) != 0) exit(2);
}

/* RedissonSemaphore.tryAcquireAsync(permits) */
static const char *REDISSON_SEM_ACQUIRE =
    "local value = redis.call('get', KEYS[1]); "
    "if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then "
    "local val = redis.call('decrby', KEYS[1], ARGV[1]); "
    "return 1; "
    "end; "
    "return 0;";
/* RedissonSemaphore.releaseAsync(permits) */
static const char *REDISSON_SEM_RELEASE =
    "local value = redis.call('incrby', KEYS[1], ARGV[1]); "
    "redis.call('publish', KEYS[2], value); ";
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

static void t_semaphore_basics(void) {
  setup();
  dlock_client *c = th_client(&srv, 0);
  CHECK(c != NULL);
  dlock_semaphore *s;
  CHECK_RC(dlock_semaphore_new(c, "sem:basic", &s), 0);
  CHECK_EQ(dlock_semaphore_available(s), 0); /* never set */
  CHECK_RC(dlock_semaphore_acquire(s, 1, 0), DLOCK_ELOCKED);
  CHECK_EQ(dlock_semaphore_try_set_permits(s, 3), 1);
  CHECK_EQ(dlock_semaphore_try_set_permits(s, 9), 0); /* already set */
  CHECK_EQ(dlock_semaphore_available(s), 3);
  CHECK_RC(dlock_semaphore_acquire(s, 2, 0), 0);
  CHECK_EQ(dlock_semaphore_available(s), 1);
  CHECK_RC(dlock_semaphore_acquire(s, 2, 0), DLOCK_ELOCKED);
  CHECK_EQ(dlock_semaphore_available(s), 1); /* a failed take takes none */
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_semaphore_acquire(s, 2, 150), DLOCK_ELOCKED);
  CHECK(th_now_ms() - t0 >= 150);
  CHECK_RC(dlock_semaphore_release(s, 2), 0);
  CHECK_EQ(dlock_semaphore_available(s), 3);
  CHECK_EQ(dlock_semaphore_drain(s), 3);
  CHECK_EQ(dlock_semaphore_available(s), 0);
  CHECK_RC(dlock_semaphore_add_permits(s, 2), 0);
  CHECK_EQ(dlock_semaphore_available(s), 2);
  CHECK_RC(dlock_semaphore_add_permits(s, -2), 0);
  CHECK_EQ(dlock_semaphore_available(s), 0);
  dlock_semaphore_free(s);
  dlock_client_close(c);
}

static void t_semaphore_misuse(void) {
  setup();
  dlock_client *c = th_client(&srv, 0);
  CHECK(c != NULL);
  dlock_semaphore *s = NULL;
  CHECK_RC(dlock_semaphore_new(c, "", &s), DLOCK_EINVAL);
  CHECK_RC(dlock_semaphore_new(NULL, "x", &s), DLOCK_EINVAL);
  CHECK_RC(dlock_semaphore_new(c, "sem:misuse", &s), 0);
  CHECK_EQ(dlock_semaphore_try_set_permits(s, 2), 1);
  CHECK_RC(dlock_semaphore_acquire(s, 0, 0), DLOCK_EINVAL);
  CHECK_RC(dlock_semaphore_acquire(s, -1, 0), DLOCK_EINVAL);
  CHECK_RC(dlock_semaphore_release(s, 0), DLOCK_EINVAL);
  CHECK_RC(dlock_semaphore_try_set_permits(s, -1), DLOCK_EINVAL);
  CHECK_EQ(dlock_semaphore_available(s), 2); /* unchanged */
  /* A key of another type: an error, and the key untouched. */
  th_cmd_int(&srv, "HSET sem:hash a 1");
  dlock_semaphore *h;
  CHECK_RC(dlock_semaphore_new(c, "sem:hash", &h), 0);
  CHECK_RC(dlock_semaphore_acquire(h, 1, 0), DLOCK_EWRONGTYPE);
  CHECK_RC(dlock_semaphore_release(h, 1), DLOCK_EWRONGTYPE);
  CHECK_EQ(th_cmd_int(&srv, "HGET sem:hash a"), 1);
  dlock_semaphore_free(h);
  dlock_semaphore_free(s);
  dlock_client_close(c);
}

/* ---- admission: 4 processes x 3 threads, 3 permits ---- */
#define PERMITS 3
typedef struct adm {
  dlock_semaphore *s;
  int rounds;
  int bad;
} adm;

static void *admit(void *p) {
  adm *a = p;
  for (int i = 0; i < a->rounds; i++) {
    if (dlock_semaphore_acquire(a->s, 1, 10000) != 0) {
      a->bad++;
      continue;
    }
    long long inside = th_cmd_int(&srv, "INCR sem:inside");
    if (inside > PERMITS) {
      a->bad++;
      th_cmd_int(&srv, "SET sem:violation 1");
    }
    th_sleep_ms(1);
    th_cmd_int(&srv, "DECR sem:inside");
    if (dlock_semaphore_release(a->s, 1) != 0) a->bad++;
  }
  return NULL;
}

static int admission_child(void) {
  dlock_client *c = th_client(&srv, 0);
  if (c == NULL) return 2;
  dlock_semaphore *s;
  if (dlock_semaphore_new(c, "sem:adm", &s) != 0) return 2;
  adm a[3];
  pthread_t t[3];
  for (int i = 0; i < 3; i++) {
    a[i] = (adm){s, 30, 0};
    pthread_create(&t[i], NULL, admit, &a[i]);
  }
  int bad = 0;
  for (int i = 0; i < 3; i++) {
    pthread_join(t[i], NULL);
    bad += a[i].bad;
  }
  dlock_semaphore_free(s);
  dlock_client_close(c);
  return bad ? 1 : 0;
}

static void t_semaphore_admission(void) {
  setup();
  /* The workers first (no client open here yet to fork across); they wait
   * for the permits to be set. */
  pid_t kids[4];
  for (int i = 0; i < 4; i++) {
    kids[i] = fork();
    if (kids[i] == 0) _exit(admission_child());
  }
  dlock_client *c = th_client(&srv, 0);
  CHECK(c != NULL);
  dlock_semaphore *s;
  CHECK_RC(dlock_semaphore_new(c, "sem:adm", &s), 0);
  CHECK_EQ(dlock_semaphore_try_set_permits(s, PERMITS), 1);
  for (int i = 0; i < 4; i++) {
    int st;
    CHECK(waitpid(kids[i], &st, 0) == kids[i]);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  CHECK_EQ(th_cmd_int(&srv, "EXISTS sem:violation"), 0);
  CHECK_EQ(dlock_semaphore_available(s), PERMITS); /* all given back */
  dlock_semaphore_free(s);
  dlock_client_close(c);
}

/* ---- waking without polling ---- */
typedef struct waiter {
  dlock_semaphore *s;
  dlock_latch *l;
  atomic_int rc; /* read while the thread runs */
  int64_t done_at;
} waiter;

static void *wait_permit(void *p) {
  waiter *w = p;
  w->rc = dlock_semaphore_acquire(w->s, 1, 10000);
  w->done_at = th_now_ms();
  return NULL;
}

typedef struct count_arg {
  waiter *w;
  int n, want;
} count_arg;
static bool n_done(void *p) {
  count_arg *a = p;
  int done = 0;
  for (int i = 0; i < a->n; i++)
    done += atomic_load(&a->w[i].rc) == 0;
  return done >= a->want;
}

static void t_semaphore_release_wakes(void) {
  setup();
  dlock_client *wc = th_client(&srv, 0), *rc = th_client(&srv, 0);
  CHECK(wc && rc);
  dlock_semaphore *ws, *rs;
  CHECK_RC(dlock_semaphore_new(wc, "sem:wake", &ws), 0);
  CHECK_RC(dlock_semaphore_new(rc, "sem:wake", &rs), 0);
  CHECK_EQ(dlock_semaphore_try_set_permits(rs, 0), 1);
  waiter w[3];
  pthread_t t[3];
  for (int i = 0; i < 3; i++) {
    w[i] = (waiter){.s = ws, .rc = 99};
    pthread_create(&t[i], NULL, wait_permit, &w[i]);
  }
  /* Subscribed; then give their second tries a moment to finish, and
   * watch a 300 ms window: asleep, not polling. */
  CHECK(th_wait_subscribed(&srv, "redisson_sc:{sem:wake}", 2000));
  th_sleep_ms(100);
  dlock_client_stats st0, st1;
  dlock_client_stats_get(wc, &st0);
  th_sleep_ms(300);
  dlock_client_stats_get(wc, &st1);
  CHECK_EQ(st1.writes - st0.writes, 0);
  /* One release of 2 permits lets two of them in, then one more. */
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_semaphore_release(rs, 2), 0);
  count_arg two = {w, 3, 2};
  CHECK(th_wait_for(n_done, &two, 2000));
  CHECK_EQ(dlock_semaphore_available(rs), 0);
  CHECK_RC(dlock_semaphore_release(rs, 1), 0);
  for (int i = 0; i < 3; i++) {
    pthread_join(t[i], NULL);
    CHECK_RC(w[i].rc, 0);
    CHECK(w[i].done_at - t0 < 500); /* woken, not timed out (10 s) */
  }
  CHECK_EQ(dlock_semaphore_available(rs), 0);
  dlock_semaphore_free(ws);
  dlock_semaphore_free(rs);
  dlock_client_close(wc);
  dlock_client_close(rc);
}

static void t_semaphore_contended_release_pings_first(void) {
  /* A handle whose last acquire had to wait, or whose last release was
   * heard, releases behind a PING, so that the waiters' message goes out
   * before the release's reply; otherwise no PING. */
  setup();
  dlock_client *a = th_client(&srv, 0), *b = th_client(&srv, 0);
  CHECK(a && b);
  dlock_semaphore *sa, *sb;
  CHECK_RC(dlock_semaphore_new(a, "sem:pingfirst", &sa), 0);
  CHECK_RC(dlock_semaphore_new(b, "sem:pingfirst", &sb), 0);
  CHECK_EQ(dlock_semaphore_try_set_permits(sa, 1), 1);
  CHECK_RC(dlock_semaphore_acquire(sa, 1, 0), 0); /* at once */
  waiter w = {.s = sb, .rc = 99};
  pthread_t t;
  pthread_create(&t, NULL, wait_permit, &w);
  /* It subscribes after its first try failed. */
  CHECK(th_wait_subscribed(&srv, "redisson_sc:{sem:pingfirst}", 3000));
  freeReplyObject(th_cmd(&srv, "CONFIG RESETSTAT"));
  CHECK_RC(dlock_semaphore_release(sa, 1), 0);
  pthread_join(t, NULL);
  CHECK_RC(atomic_load(&w.rc), 0);
  CHECK_EQ(th_calls(&srv, "ping"), 0);
  freeReplyObject(th_cmd(&srv, "CONFIG RESETSTAT"));
  CHECK_RC(dlock_semaphore_release(sb, 1), 0); /* sb had waited */
  CHECK_EQ(th_calls(&srv, "ping"), 1);
  /* sa's last release was heard (b waited): its next one pings too. */
  CHECK_RC(dlock_semaphore_acquire(sa, 1, 0), 0);
  freeReplyObject(th_cmd(&srv, "CONFIG RESETSTAT"));
  CHECK_RC(dlock_semaphore_release(sa, 1), 0);
  CHECK_EQ(th_calls(&srv, "ping"), 1);
  /* Once nobody listens, one release goes unheard, and the next is sent
   * without a PING. */
  CHECK(th_wait_unsubscribed(&srv, "redisson_sc:{sem:pingfirst}", 5000));
  CHECK_RC(dlock_semaphore_acquire(sa, 1, 0), 0);
  CHECK_RC(dlock_semaphore_release(sa, 1), 0);
  CHECK_RC(dlock_semaphore_acquire(sa, 1, 0), 0);
  freeReplyObject(th_cmd(&srv, "CONFIG RESETSTAT"));
  CHECK_RC(dlock_semaphore_release(sa, 1), 0);
  CHECK_EQ(th_calls(&srv, "ping"), 0);
  CHECK_EQ(dlock_semaphore_available(sa), 1);
  dlock_semaphore_free(sa);
  dlock_semaphore_free(sb);
  dlock_client_close(a);
  dlock_client_close(b);
}

static void t_semaphore_interop(void) {
  setup();
  dlock_client *c = th_client(&srv, 0);
  CHECK(c != NULL);
  dlock_semaphore *s;
  CHECK_RC(dlock_semaphore_new(c, "sem:java", &s), 0);
  CHECK_EQ(dlock_semaphore_try_set_permits(s, 1), 1);
  /* Redisson takes the one permit; we cannot. */
  CHECK_EQ(th_cmd_int(&srv, "EVAL %s 1 sem:java 1", REDISSON_SEM_ACQUIRE), 1);
  CHECK_RC(dlock_semaphore_acquire(s, 1, 0), DLOCK_ELOCKED);
  /* Redisson's release wakes our waiter through redisson_sc:{sem:java}. */
  waiter w = {.s = s, .rc = 99};
  pthread_t t;
  pthread_create(&t, NULL, wait_permit, &w);
  CHECK(th_wait_subscribed(&srv, "redisson_sc:{sem:java}", 2000));
  int64_t t0 = th_now_ms();
  redisReply *r = th_cmd(&srv, "EVAL %s 2 sem:java redisson_sc:{sem:java} 1",
                         REDISSON_SEM_RELEASE);
  if (r) freeReplyObject(r);
  pthread_join(t, NULL);
  CHECK_RC(w.rc, 0);
  CHECK(w.done_at - t0 < 500);
  /* And our release is Redisson's: the permit is there for its acquire. */
  CHECK_EQ(th_cmd_int(&srv, "EVAL %s 1 sem:java 1", REDISSON_SEM_ACQUIRE), 0);
  CHECK_RC(dlock_semaphore_release(s, 1), 0);
  CHECK_EQ(th_cmd_int(&srv, "EVAL %s 1 sem:java 1", REDISSON_SEM_ACQUIRE), 1);
  dlock_semaphore_free(s);
  dlock_client_close(c);
}

/* ---- the count-down latch ---- */
static void t_latch_basics(void) {
  setup();
  dlock_client *c = th_client(&srv, 0);
  CHECK(c != NULL);
  dlock_latch *l;
  int64_t n = -1;
  CHECK_RC(dlock_latch_new(c, "latch:basic", &l), 0);
  CHECK_EQ(dlock_latch_await(l, 0), 1); /* no count running */
  CHECK_EQ(dlock_latch_try_set_count(l, 2), 1);
  CHECK_EQ(dlock_latch_try_set_count(l, 5), 0); /* running: unchanged */
  CHECK_RC(dlock_latch_count(l, &n), 0);
  CHECK_EQ(n, 2);
  CHECK_EQ(dlock_latch_await(l, 0), 0);
  int64_t t0 = th_now_ms();
  CHECK_EQ(dlock_latch_await(l, 120), 0);
  CHECK(th_now_ms() - t0 >= 120);
  CHECK_RC(dlock_latch_count_down(l), 0);
  CHECK_RC(dlock_latch_count(l, &n), 0);
  CHECK_EQ(n, 1);
  CHECK_RC(dlock_latch_count_down(l), 0);
  CHECK_RC(dlock_latch_count(l, &n), 0);
  CHECK_EQ(n, 0);
  CHECK_EQ(th_cmd_int(&srv, "EXISTS latch:basic"), 0);
  /* Below zero: an error, and nothing written. */
  CHECK_RC(dlock_latch_count_down(l), DLOCK_ERANGE);
  CHECK_EQ(th_cmd_int(&srv, "EXISTS latch:basic"), 0);
  CHECK_RC(dlock_latch_try_set_count(l, 0), DLOCK_EINVAL);
  CHECK_EQ(dlock_latch_await(l, 0), 1);
  dlock_latch_free(l);
  dlock_client_close(c);
}

static void *await_zero(void *p) {
  waiter *w = p;
  w->rc = dlock_latch_await(w->l, 10000);
  w->done_at = th_now_ms();
  return NULL;
}

static void t_latch_wakes_all(void) {
  setup();
  dlock_client *wc = th_client(&srv, 0), *dc = th_client(&srv, 0);
  CHECK(wc && dc);
  dlock_latch *wl, *dl;
  CHECK_RC(dlock_latch_new(wc, "latch:wake", &wl), 0);
  CHECK_RC(dlock_latch_new(dc, "latch:wake", &dl), 0);
  CHECK_EQ(dlock_latch_try_set_count(dl, 2), 1);
  waiter w[3];
  pthread_t t[3];
  for (int i = 0; i < 3; i++) {
    w[i] = (waiter){.l = wl, .rc = 99};
    pthread_create(&t[i], NULL, await_zero, &w[i]);
  }
  CHECK(th_wait_subscribed(
      &srv, "redisson_countdownlatch__channel:{latch:wake}", 2000));
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
  redisReply *r = th_cmd(&srv,
                         "EVAL %s 2 latch:wake "
                         "redisson_countdownlatch__channel:{latch:wake} 0",
                         REDISSON_LATCH_DOWN);
  if (r) freeReplyObject(r);
  for (int i = 0; i < 3; i++) {
    pthread_join(t[i], NULL);
    CHECK_EQ(w[i].rc, 1);
    CHECK(w[i].done_at - t0 < 500);
  }
  /* And Redisson sees our count. */
  CHECK_EQ(dlock_latch_try_set_count(dl, 4), 1);
  CHECK_EQ(th_cmd_int(&srv, "GET latch:wake"), 4);
  CHECK_EQ(th_cmd_int(&srv,
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

/* ---- the permit-expirable semaphore ---- */
/* RedissonPermitExpirableSemaphore.tryAcquireAsync(ids, timeoutDate):
 * ARGV = permits, timeoutDate, now, nonExpirableTimeout, publish, ids... */
static const char *REDISSON_PERMIT_ACQUIRE =
    "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], "
    "'limit', 0, ARGV[1]); "
    "if #expiredIds > 0 then "
    "redis.call('zrem', KEYS[2], unpack(expiredIds)); "
    "local value = redis.call('incrby', KEYS[1], #expiredIds); "
    "if tonumber(value) > 0 then "
    "redis.call(ARGV[5], KEYS[3], value); "
    "end;"
    "end; "
    "local value = redis.call('get', KEYS[1]); "
    "if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then "
    "redis.call('decrby', KEYS[1], ARGV[1]); "
    "for i = 6, #ARGV, 1 do "
    "redis.call('zadd', KEYS[2], ARGV[2], ARGV[i]); "
    "end; "
    "local ttl = redis.call('pttl', KEYS[1]); "
    "if ttl > 0 then "
    "redis.call('pexpire', KEYS[2], ttl); "
    "end; "
    "return 'OK'; "
    "end; "
    "local v = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES'); "
    "if v[1] ~= nil and v[2] ~= ARGV[4] then "
    "return ':' .. tostring(v[2]); "
    "end "
    "return nil;";

static dlock_client *client_with_lease(int64_t lease) {
  return th_client(&srv, lease);
}

static void t_permits_basics(void) {
  setup();
  dlock_client *c = client_with_lease(0);
  CHECK(c != NULL);
  dlock_permits *p;
  char a[DLOCK_PERMIT_ID_LEN], b[DLOCK_PERMIT_ID_LEN], x[DLOCK_PERMIT_ID_LEN];
  CHECK_RC(dlock_permits_new(c, "perm:basic", &p), 0);
  CHECK_EQ(dlock_permits_try_set_permits(p, 2), 1);
  CHECK_EQ(dlock_permits_try_set_permits(p, 5), 0);
  CHECK_RC(dlock_permits_acquire(p, 0, 0, a), 0);
  CHECK_RC(dlock_permits_acquire(p, 0, 0, b), 0);
  CHECK(strcmp(a, b) != 0 && strlen(a) == 32);
  CHECK_RC(dlock_permits_acquire(p, 0, 0, x), DLOCK_ELOCKED);
  CHECK_EQ(dlock_permits_available(p), 0);
  /* Redisson's layout: 16-byte members of {perm:basic}:timeout. */
  CHECK_EQ(th_cmd_int(&srv, "ZCARD {perm:basic}:timeout"), 2);
  redisReply *r = th_cmd(&srv, "ZRANGE {perm:basic}:timeout 0 0");
  CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
        r->element[0]->len == 16);
  freeReplyObject(r);
  int64_t ms = 0;
  CHECK_RC(dlock_permits_validity(p, a, &ms), 0);
  CHECK(ms > 20000); /* the 30 s watchdog lease */
  CHECK_RC(dlock_permits_release(p, a), 0);
  CHECK_EQ(dlock_permits_available(p), 1);
  /* Misuse: each an error, nothing changed. */
  CHECK_RC(dlock_permits_release(p, a), DLOCK_ENOTOWNER); /* twice */
  CHECK_RC(dlock_permits_release(p, "00000000000000000000000000000000"),
           DLOCK_ENOTOWNER); /* never issued */
  CHECK_RC(dlock_permits_release(p, "not-an-id"), DLOCK_EINVAL);
  CHECK_RC(dlock_permits_release(p, NULL), DLOCK_EINVAL);
  CHECK_EQ(dlock_permits_available(p), 1);
  CHECK_EQ(th_cmd_int(&srv, "ZCARD {perm:basic}:timeout"), 1);
  CHECK_RC(dlock_permits_release(p, b), 0);
  CHECK_EQ(dlock_permits_available(p), 2);
  dlock_permits_free(p);
  dlock_client_close(c);
}

typedef struct pwait {
  dlock_permits *p;
  atomic_int rc;
  int64_t at;
  char id[DLOCK_PERMIT_ID_LEN];
} pwait;
static void *wait_permit_id(void *arg) {
  pwait *w = arg;
  int rc = dlock_permits_acquire(w->p, 10000, 0, w->id);
  w->at = th_now_ms();
  atomic_store(&w->rc, rc);
  return NULL;
}

static void t_permits_release_wakes(void) {
  setup();
  dlock_client *a = client_with_lease(0), *b = client_with_lease(0);
  CHECK(a && b);
  dlock_permits *pa, *pb;
  char id[DLOCK_PERMIT_ID_LEN];
  CHECK_RC(dlock_permits_new(a, "perm:wake", &pa), 0);
  CHECK_RC(dlock_permits_new(b, "perm:wake", &pb), 0);
  CHECK_EQ(dlock_permits_try_set_permits(pa, 1), 1);
  CHECK_RC(dlock_permits_acquire(pa, 0, 0, id), 0); /* 30 s lease */
  pwait w = {.p = pb, .rc = 99};
  pthread_t t;
  pthread_create(&t, NULL, wait_permit_id, &w);
  CHECK(th_wait_subscribed(&srv, "redisson_sc:{perm:wake}", 2000));
  th_sleep_ms(50);
  int64_t t0 = th_now_ms();
  freeReplyObject(th_cmd(&srv, "CONFIG RESETSTAT"));
  CHECK_RC(dlock_permits_release(pa, id), 0);
  pthread_join(t, NULL);
  CHECK_RC(atomic_load(&w.rc), 0);
  CHECK(w.at - t0 < 500); /* woken by the release, not the lease's end */
  /* As the semaphore's (t_semaphore_contended_release_pings_first): a
   * release goes out behind a PING when the handle's last acquire waited
   * or its last release was heard, and only then. */
  CHECK_EQ(th_calls(&srv, "ping"), 0);
  freeReplyObject(th_cmd(&srv, "CONFIG RESETSTAT"));
  CHECK_RC(dlock_permits_release(pb, w.id), 0); /* pb had waited */
  CHECK_EQ(th_calls(&srv, "ping"), 1);
  CHECK_RC(dlock_permits_acquire(pa, 0, 0, id), 0); /* pa was heard */
  freeReplyObject(th_cmd(&srv, "CONFIG RESETSTAT"));
  CHECK_RC(dlock_permits_release(pa, id), 0);
  CHECK_EQ(th_calls(&srv, "ping"), 1);
  CHECK(th_wait_unsubscribed(&srv, "redisson_sc:{perm:wake}", 5000));
  CHECK_RC(dlock_permits_acquire(pa, 0, 0, id), 0);
  CHECK_RC(dlock_permits_release(pa, id), 0); /* heard by nobody */
  CHECK_RC(dlock_permits_acquire(pa, 0, 0, id), 0);
  freeReplyObject(th_cmd(&srv, "CONFIG RESETSTAT"));
  CHECK_RC(dlock_permits_release(pa, id), 0);
  CHECK_EQ(th_calls(&srv, "ping"), 0);
  CHECK_EQ(dlock_permits_available(pa), 1);
  dlock_permits_free(pa);
  dlock_permits_free(pb);
  dlock_client_close(a);
  dlock_client_close(b);
}

static void t_permits_fixed_lease_ends(void) {
  setup();
  dlock_client *c = client_with_lease(0);
  CHECK(c != NULL);
  dlock_permits *p;
  char a[DLOCK_PERMIT_ID_LEN], b[DLOCK_PERMIT_ID_LEN];
  CHECK_RC(dlock_permits_new(c, "perm:lease", &p), 0);
  CHECK_EQ(dlock_permits_try_set_permits(p, 1), 1);
  CHECK_RC(dlock_permits_acquire(p, 0, 200, a), 0);
  /* Waiting for the only permit: it comes back when its lease ends, with
   * no message, and the waiter gets it then. */
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_permits_acquire(p, 3000, 5000, b), 0);
  int64_t took = th_now_ms() - t0;
  CHECK(took >= 150 && took < 1000);
  CHECK_RC(dlock_permits_validity(p, a, NULL), DLOCK_ELOST);
  CHECK_RC(dlock_permits_release(p, a), DLOCK_ELOST);
  CHECK_EQ(dlock_permits_available(p), 0); /* b still holds the one */
  CHECK_RC(dlock_permits_release(p, b), 0);
  CHECK_EQ(dlock_permits_available(p), 1);
  dlock_permits_free(p);
  dlock_client_close(c);
}

static int crashed_holder_child(void) {
  dlock_client *c = client_with_lease(600);
  dlock_permits *p;
  char id[DLOCK_PERMIT_ID_LEN];
  if (c == NULL || dlock_permits_new(c, "perm:crash", &p) != 0) return 2;
  if (dlock_permits_acquire(p, 5000, 0, id) != 0) return 3;
  th_cmd_int(&srv, "SET perm:crash:held 1");
  for (;;)
    pause(); /* SIGKILLed while holding */
}

static bool child_holds(void *arg) {
  (void)arg;
  return th_cmd_int(&srv, "EXISTS perm:crash:held") == 1;
}

static void t_permits_crashed_holder_returns(void) {
  setup();
  pid_t kid = fork();
  if (kid == 0) _exit(crashed_holder_child());
  dlock_client *c = client_with_lease(0);
  CHECK(c != NULL);
  dlock_permits *p;
  char id[DLOCK_PERMIT_ID_LEN];
  CHECK_RC(dlock_permits_new(c, "perm:crash", &p), 0);
  CHECK_EQ(dlock_permits_try_set_permits(p, 1), 1);
  CHECK(th_wait_for(child_holds, NULL, 5000));
  /* Renewed while its holder lives: three leases later, still taken. */
  CHECK_RC(dlock_permits_acquire(p, 1800, 0, id), DLOCK_ELOCKED);
  kill(kid, SIGKILL);
  waitpid(kid, NULL, 0);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_permits_acquire(p, 3000, 0, id), 0);
  int64_t took = th_now_ms() - t0;
  printf("    the dead holder's permit came back after %lld ms\n",
         (long long)took);
  CHECK(took <= 600 + 300);
  CHECK_RC(dlock_permits_release(p, id), 0);
  dlock_permits_free(p);
  dlock_client_close(c);
}

typedef struct lost_rec {
  atomic_int n;
  char id[DLOCK_PERMIT_ID_LEN];
} lost_rec;
static void on_permit_lost(dlock_permits *p, const char *id, void *ud) {
  (void)p;
  lost_rec *r = ud;
  snprintf(r->id, sizeof r->id, "%s", id);
  atomic_fetch_add(&r->n, 1);
}
static bool lost_seen(void *p) {
  return atomic_load(&((lost_rec *)p)->n) > 0;
}

static void t_permits_loss_reported(void) {
  setup();
  dlock_client *c = client_with_lease(600);
  CHECK(c != NULL);
  dlock_permits *p;
  char id[DLOCK_PERMIT_ID_LEN];
  lost_rec rec = {0};
  CHECK_RC(dlock_permits_new(c, "perm:lost", &p), 0);
  dlock_permits_on_lost(p, on_permit_lost, &rec);
  CHECK_EQ(dlock_permits_try_set_permits(p, 1), 1);
  CHECK_RC(dlock_permits_acquire(p, 0, 0, id), 0);
  /* Someone takes the permit away on the server. */
  CHECK_EQ(th_cmd_int(&srv, "DEL {perm:lost}:timeout"), 1);
  CHECK(th_wait_for(lost_seen, &rec, 2000));
  CHECK(strcmp(rec.id, id) == 0);
  CHECK_RC(dlock_permits_validity(p, id, NULL), DLOCK_ELOST);
  CHECK_RC(dlock_permits_release(p, id), DLOCK_ELOST);
  dlock_permits_free(p);
  dlock_client_close(c);
}

static void t_permits_interop(void) {
  setup();
  dlock_client *c = client_with_lease(0);
  CHECK(c != NULL);
  dlock_permits *p;
  char id[DLOCK_PERMIT_ID_LEN];
  CHECK_RC(dlock_permits_new(c, "perm:java", &p), 0);
  CHECK_EQ(dlock_permits_try_set_permits(p, 2), 1);
  /* Redisson takes one, with its own 16-byte id and a lease in 60 s. */
  struct timeval tv;
  gettimeofday(&tv, NULL);
  long long now = (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000;
  const char jid[16] = "java-permit-0001";
  redisReply *r =
      th_cmd(&srv,
             "EVAL %s 3 perm:java {perm:java}:timeout redisson_sc:{perm:java} "
             "1 %lld %lld 922337203685477 publish %b",
             REDISSON_PERMIT_ACQUIRE, now + 60000, now, jid, sizeof jid);
  CHECK(r && r->str && strcmp(r->str, "OK") == 0); /* a bulk "OK" */
  freeReplyObject(r);
  CHECK_EQ(dlock_permits_available(p), 1);
  CHECK_RC(dlock_permits_acquire(p, 0, 0, id), 0);
  CHECK_EQ(dlock_permits_available(p), 0);
  /* Now Redisson finds none, and tells the nearest lease end. */
  r = th_cmd(&srv,
             "EVAL %s 3 perm:java {perm:java}:timeout "
             "redisson_sc:{perm:java} 1 %lld %lld 922337203685477 "
             "publish %b",
             REDISSON_PERMIT_ACQUIRE, now + 60000, now, "another-16-byte!",
             (size_t)16);
  CHECK(r && (r->type == REDIS_REPLY_NIL || r->type == REDIS_REPLY_STRING));
  if (r) freeReplyObject(r);
  /* Redisson's permit, released by id from dlock (as any Redisson client
   * may): the hex of its 16 bytes. */
  char hex[33];
  for (int i = 0; i < 16; i++)
    snprintf(hex + 2 * i, 3, "%02x", (unsigned char)jid[i]);
  CHECK_RC(dlock_permits_release(p, hex), 0);
  CHECK_EQ(dlock_permits_available(p), 1);
  CHECK_RC(dlock_permits_release(p, id), 0);
  CHECK_EQ(dlock_permits_available(p), 2);
  dlock_permits_free(p);
  dlock_client_close(c);
}

static void t_teardown(void) {
  th_redis_stop(&srv);
}

TH_MAIN(T(t_semaphore_basics), T(t_semaphore_misuse), T(t_semaphore_admission),
        T(t_semaphore_release_wakes),
        T(t_semaphore_contended_release_pings_first), T(t_semaphore_interop), T(t_latch_basics),
        T(t_latch_wakes_all), T(t_permits_basics), T(t_permits_release_wakes),
        T(t_permits_fixed_lease_ends), T(t_permits_crashed_holder_returns),
        T(t_permits_loss_reported), T(t_permits_interop), T(t_teardown))
