/* test_fairlock.c: the fair lock against a real server: FIFO order across
 * clients, an unlock waking only the next waiter, dead waiters skipped,
 * giving up leaving the queue, and interop with Redisson's RFairLock. */
#include "harness.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static long long queued(const char *name) {
  return th_cmd_int(&th_srv, "LLEN redisson_lock_queue:{%s}", name);
}

typedef struct fw {
  const char *name;
  int id;
  int64_t stale_ms;
  dlock_client *c;
  atomic_int rc;
} fw;

static void *fair_waiter(void *p) {
  fw *w = p;
  dlock_lock *l;
  if (dlock_fairlock_new(w->c, w->name, NULL, w->stale_ms, &l) != 0) {
    atomic_store(&w->rc, -100);
    return NULL;
  }
  int rc = dlock_lock_try_acquire(l, 10000, 0, NULL);
  if (rc == 0) {
    th_cmd_int(&th_srv, "RPUSH order:%s %d", w->name, w->id);
    th_sleep_ms(20);
    dlock_lock_release(l);
  }
  atomic_store(&w->rc, rc);
  dlock_lock_free(l);
  return NULL;
}

static void t_fifo_across_clients(void) {
  dlock_client *hc = th_client(&th_srv, 0);
  CHECK(hc != NULL);
  dlock_lock *h;
  CHECK_RC(dlock_fairlock_new(hc, "f:fifo", NULL, 0, &h), 0);
  CHECK_RC(dlock_lock_acquire(h, 0, NULL), 0);
  enum { N = 6 };
  fw w[N];
  pthread_t t[N];
  for (int i = 0; i < N; i++) {
    w[i] = (fw){"f:fifo", i, 0, th_client(&th_srv, 0), 99};
    CHECK(w[i].c != NULL);
    pthread_create(&t[i], NULL, fair_waiter, &w[i]);
    /* queued in this order */
    CHECK(th_wait_llen(&th_srv, "redisson_lock_queue:{f:fifo}", i + 1, 3000));
  }
  dlock_client_stats before[N];
  for (int i = 0; i < N; i++)
    dlock_client_stats_get(w[i].c, &before[i]);
  CHECK_RC(dlock_lock_release(h), 1);
  for (int i = 0; i < N; i++) {
    pthread_join(t[i], NULL);
    CHECK_RC(atomic_load(&w[i].rc), 0);
  }
  /* Taken in the order they queued. */
  redisReply *r = th_cmd(&th_srv, "LRANGE order:f:fifo 0 -1");
  CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == N);
  for (int i = 0; i < N; i++)
    CHECK_EQ(atoi(r->element[i]->str), i);
  freeReplyObject(r);
  /* Each release woke only the next: one wake-up per waiter in all. */
  for (int i = 0; i < N; i++) {
    dlock_client_stats after;
    dlock_client_stats_get(w[i].c, &after);
    CHECK_EQ(after.wakeups - before[i].wakeups, 1);
    dlock_client_close(w[i].c);
  }
  CHECK_EQ(queued("f:fifo"), 0);
  dlock_lock_free(h);
  dlock_client_close(hc);
}

static void t_reentrant_tokens_no_queue_on_try(void) {
  dlock_client *a = th_client(&th_srv, 0), *b = th_client(&th_srv, 0);
  CHECK(a && b);
  dlock_lock *la, *lb;
  CHECK_RC(dlock_fairlock_new(a, "f:re", NULL, 0, &la), 0);
  CHECK_RC(dlock_fairlock_new(b, "f:re", NULL, 0, &lb), 0);
  uint64_t t1 = 0, t2 = 0, t3 = 0;
  CHECK_RC(dlock_lock_acquire(la, 0, &t1), 0);
  CHECK_RC(dlock_lock_acquire(la, 0, &t2), 0);
  CHECK_EQ(t1, t2);
  CHECK_EQ(dlock_lock_hold_count(la), 2);
  CHECK_RC(dlock_lock_try_acquire(lb, 0, 0, NULL), DLOCK_EBUSY);
  CHECK_EQ(queued("f:re"), 0); /* a one-shot try does not queue */
  /* A waiter that gives up leaves the queue. */
  CHECK_RC(dlock_lock_try_acquire(lb, 150, 0, NULL), DLOCK_EBUSY);
  CHECK_EQ(queued("f:re"), 0);
  CHECK_EQ(th_cmd_int(&th_srv, "ZCARD redisson_lock_timeout:{f:re}"), 0);
  CHECK_RC(dlock_lock_release(la), 0);
  CHECK_RC(dlock_lock_release(la), 1);
  CHECK_RC(dlock_lock_try_acquire(lb, 0, 0, &t3), 0);
  CHECK(t3 > t1);
  /* Only the owner releases. */
  CHECK_RC(dlock_lock_release(la), DLOCK_ENOTOWNER);
  CHECK_EQ(dlock_lock_hold_count(lb), 1);
  CHECK_RC(dlock_lock_release(lb), 1);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_close(a);
  dlock_client_close(b);
}

static bool go_set(void *p) {
  (void)p;
  return th_cmd_int(&th_srv, "EXISTS f:dead:go") == 1;
}

static int dead_waiter_child(void) {
  if (!th_wait_for(go_set, NULL, 10000)) return 4;
  dlock_client *c = th_client(&th_srv, 0);
  dlock_lock *l;
  if (c == NULL || dlock_fairlock_new(c, "f:dead", NULL, 600, &l) != 0)
    return 2;
  dlock_lock_try_acquire(l, 60000, 0, NULL); /* SIGKILLed while queued */
  return 3;
}

static void t_dead_waiter_skipped(void) {
  /* Fork first (no client threads yet), start the child once the lock is
   * held. */
  pid_t kid = fork();
  if (kid == 0) _exit(dead_waiter_child());
  dlock_client *hc = th_client(&th_srv, 0);
  CHECK(hc != NULL);
  dlock_lock *h;
  CHECK_RC(dlock_fairlock_new(hc, "f:dead", NULL, 600, &h), 0);
  CHECK_RC(dlock_lock_acquire(h, 0, NULL), 0);
  th_cmd_int(&th_srv, "SET f:dead:go 1");
  CHECK(th_wait_llen(&th_srv, "redisson_lock_queue:{f:dead}", 1, 5000));
  fw w = {"f:dead", 7, 600, th_client(&th_srv, 0), 99};
  pthread_t t;
  pthread_create(&t, NULL, fair_waiter, &w);
  /* behind the child */
  CHECK(th_wait_llen(&th_srv, "redisson_lock_queue:{f:dead}", 2, 5000));
  kill(kid, SIGKILL);
  waitpid(kid, NULL, 0);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_release(h), 1); /* tells the dead first waiter */
  pthread_join(t, NULL);
  int64_t took = th_now_ms() - t0;
  printf("    the waiter behind a dead one got the lock after %lld ms "
         "(stale-waiter timeout 600 ms)\n",
         (long long)took);
  CHECK_RC(atomic_load(&w.rc), 0);
  CHECK(took <= 600 + 200 + 300);
  dlock_client_close(w.c);
  dlock_lock_free(h);
  dlock_client_close(hc);
}

/* RedissonFairLock.tryLockInnerAsync (EVAL_LONG): KEYS lock, queue,
 * timeouts; ARGV lease, owner, threadWaitTime, currentTime. */
static const char *REDISSON_FAIR_LOCK =
    "while true do "
    "local firstThreadId2 = redis.call('lindex', KEYS[2], 0);"
    "if firstThreadId2 == false then break; end;"
    "local timeout = tonumber(redis.call('zscore', KEYS[3], firstThreadId2));"
    "if timeout <= tonumber(ARGV[4]) then "
    "redis.call('zrem', KEYS[3], firstThreadId2); redis.call('lpop', KEYS[2]);"
    "else break; end; end;"
    "if (redis.call('exists', KEYS[1]) == 0) and ((redis.call('exists', "
    "KEYS[2]) == 0) or (redis.call('lindex', KEYS[2], 0) == ARGV[2])) then "
    "redis.call('lpop', KEYS[2]); redis.call('zrem', KEYS[3], ARGV[2]);"
    "local keys = redis.call('zrange', KEYS[3], 0, -1);"
    "for i = 1, #keys, 1 do redis.call('zincrby', KEYS[3], "
    "-tonumber(ARGV[3]), keys[i]); end;"
    "redis.call('hset', KEYS[1], ARGV[2], 1);"
    "redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end;"
    "if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then "
    "redis.call('hincrby', KEYS[1], ARGV[2],1);"
    "redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end;"
    "local timeout = redis.call('zscore', KEYS[3], ARGV[2]);"
    "if timeout ~= false then return timeout - tonumber(ARGV[3]) - "
    "tonumber(ARGV[4]); end;"
    "local lastThreadId = redis.call('lindex', KEYS[2], -1); local ttl;"
    "if lastThreadId ~= false and lastThreadId ~= ARGV[2] then "
    "ttl = tonumber(redis.call('zscore', KEYS[3], lastThreadId)) - "
    "tonumber(ARGV[4]); else ttl = redis.call('pttl', KEYS[1]); end;"
    "local timeout = ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]);"
    "if redis.call('zadd', KEYS[3], timeout, ARGV[2]) == 1 then "
    "redis.call('rpush', KEYS[2], ARGV[2]); end; return ttl;";

#define JAVA_OWNER "3f1a9c2e-7b44-4f0e-9d1a-2c5e8b7a6d10:1"

static redisReply *java_try(void) {
  return th_cmd(&th_srv,
                "EVAL %s 3 f:java redisson_lock_queue:{f:java} "
                "redisson_lock_timeout:{f:java} 30000 %s 300000 %lld",
                REDISSON_FAIR_LOCK, JAVA_OWNER, (long long)time(NULL) * 1000);
}

static void t_interop_redisson_fair(void) {
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_fairlock_new(c, "f:java", NULL, 0, &l), 0);
  CHECK_RC(dlock_lock_acquire(l, 0, NULL), 0);
  /* Redisson queues behind us... */
  redisReply *r = java_try();
  CHECK(r && r->type == REDIS_REPLY_INTEGER); /* a ttl: not taken */
  freeReplyObject(r);
  CHECK_EQ(queued("f:java"), 1);
  /* ...and our release tells it on its own channel. */
  redisContext *sub = th_redis_connect(&th_srv);
  CHECK(sub != NULL);
  r = redisCommand(sub, "SUBSCRIBE redisson_lock__channel:{f:java}:%s",
                   JAVA_OWNER);
  if (r) freeReplyObject(r);
  CHECK_RC(dlock_lock_release(l), 1);
  r = NULL;
  CHECK(redisGetReply(sub, (void **)&r) == REDIS_OK && r &&
        r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
        strcmp(r->element[2]->str, "0") == 0);
  freeReplyObject(r);
  redisFree(sub);
  /* Redisson, first in the queue, takes it; we cannot barge in. */
  r = java_try();
  CHECK(r && r->type == REDIS_REPLY_NIL);
  freeReplyObject(r);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, NULL), DLOCK_EBUSY);
  th_cmd_int(&th_srv, "DEL f:java");
  dlock_lock_free(l);
  dlock_client_close(c);
}

TH_MAIN(T(t_fifo_across_clients), T(t_reentrant_tokens_no_queue_on_try),
        T(t_dead_waiter_skipped), T(t_interop_redisson_fair))
