/* test_interop.c: dlock and Redisson share locks. A second client runs
 * Redisson's own RLock scripts (as published in the reference documents) with
 * its own owner id; the two must exclude and wake each other. */
#include "harness.h"

#include <pthread.h>
#include <string.h>
#include <sys/time.h>

/* RedissonLock.tryLockInnerAsync */
static const char *REDISSON_LOCK =
    "if (redis.call('exists', KEYS[1]) == 0) then "
    "redis.call('hincrby', KEYS[1], ARGV[2], 1); "
    "redis.call('pexpire', KEYS[1], ARGV[1]); "
    "return nil; "
    "end; "
    "if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then "
    "redis.call('hincrby', KEYS[1], ARGV[2], 1); "
    "redis.call('pexpire', KEYS[1], ARGV[1]); "
    "return nil; "
    "end; "
    "return redis.call('pttl', KEYS[1]);";

/* RedissonLock.unlockInnerAsync */
static const char *REDISSON_UNLOCK =
    "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then "
    "return nil;"
    "end; "
    "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); "
    "if (counter > 0) then "
    "redis.call('pexpire', KEYS[1], ARGV[2]); "
    "return 0; "
    "else "
    "redis.call('del', KEYS[1]); "
    "redis.call('publish', KEYS[2], ARGV[1]); "
    "return 1; "
    "end; "
    "return nil;";

/* RedissonBaseLock.renewExpirationAsync */
static const char *REDISSON_RENEW =
    "if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then "
    "redis.call('pexpire', KEYS[1], ARGV[1]); "
    "return 1; "
    "end; "
    "return 0;";

#define JAVA_OWNER "3f1a9c2e-7b44-4f0e-9d1a-2c5e8b7a6d10:1"
#define CHANNEL "redisson_lock__channel:{shared}"

static redisReply *java_lock(long lease) {
  return th_cmd(&th_srv, "EVAL %s 1 shared %ld %s", REDISSON_LOCK, lease,
                JAVA_OWNER);
}

static redisReply *java_unlock(void) {
  return th_cmd(&th_srv, "EVAL %s 2 shared %s 0 30000 %s", REDISSON_UNLOCK,
                CHANNEL, JAVA_OWNER);
}

static void t_java_holds_dlock_excluded(void) {
  redisReply *r = java_lock(30000);
  CHECK(r && r->type == REDIS_REPLY_NIL); /* Redisson: nil = acquired */
  freeReplyObject(r);
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "shared", NULL, &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, NULL), DLOCK_EBUSY);
  CHECK_EQ(dlock_lock_is_locked(l), 1);
  CHECK_EQ(dlock_lock_is_held(l), 0);
  CHECK_RC(dlock_lock_release(l), DLOCK_ENOTOWNER);
  CHECK_EQ(th_cmd_int(&th_srv, "HGET shared %s", JAVA_OWNER), 1);
  r = java_unlock();
  CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
  freeReplyObject(r);
  dlock_lock_free(l);
  dlock_client_close(c);
}

typedef struct {
  dlock_lock *l;
  int rc;
  int64_t at;
} warg;

static void *waiter(void *p) {
  warg *a = p;
  a->rc = dlock_lock_try_acquire(a->l, 20000, 0, NULL);
  a->at = th_now_ms();
  return NULL;
}

static bool subscribed(void *p) {
  (void)p;
  redisReply *r = th_cmd(&th_srv, "PUBSUB NUMSUB %s", CHANNEL);
  bool ok = r && r->elements == 2 && r->element[1]->integer >= 1;
  if (r) freeReplyObject(r);
  return ok;
}

static void t_java_unlock_wakes_dlock_waiter(void) {
  redisReply *r = java_lock(30000);
  freeReplyObject(r);
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_lock *l; /* an explicit owner: the waiter thread takes it for us */
  CHECK_RC(dlock_lock_new(c, "shared", "main", &l), 0);
  warg a = {l, -100, 0};
  pthread_t th;
  pthread_create(&th, NULL, waiter, &a);
  CHECK(th_wait_for(subscribed, NULL, 5000));
  th_sleep_ms(30);
  int64_t t0 = th_now_ms();
  r = java_unlock();
  freeReplyObject(r);
  pthread_join(th, NULL);
  CHECK_RC(a.rc, 0);
  CHECK(a.at - t0 < 200); /* the message woke it, not the 30 s TTL */
  /* Now Redisson's lock script sees it held and gets the PTTL back. */
  r = java_lock(30000);
  CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer > 0);
  freeReplyObject(r);
  CHECK_EQ(dlock_lock_release(l), 1);
  dlock_lock_free(l);
  dlock_client_close(c);
}

static void t_dlock_unlock_wakes_java_waiter(void) {
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "shared", NULL, &l), 0);
  CHECK_RC(dlock_lock_acquire(l, 0, NULL), 0);
  /* A Redisson waiter: subscribes to the channel, tries, gets a TTL. */
  redisContext *sub = th_redis_connect(&th_srv);
  CHECK(sub != NULL);
  redisReply *r = redisCommand(sub, "SUBSCRIBE %s", CHANNEL);
  freeReplyObject(r);
  r = java_lock(30000);
  CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer > 0);
  freeReplyObject(r);
  CHECK_EQ(dlock_lock_release(l), 1);
  struct timeval tv = {2, 0};
  redisSetTimeout(sub, tv);
  void *msg = NULL;
  CHECK(redisGetReply(sub, &msg) == REDIS_OK);
  r = msg;
  CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 3);
  CHECK(strcmp(r->element[0]->str, "message") == 0);
  CHECK(strcmp(r->element[2]->str, "0") == 0); /* UNLOCK_MESSAGE */
  freeReplyObject(r);
  redisFree(sub);
  r = java_lock(30000);
  CHECK(r && r->type == REDIS_REPLY_NIL);
  freeReplyObject(r);
  r = java_unlock();
  freeReplyObject(r);
  dlock_lock_free(l);
  dlock_client_close(c);
}

static void t_java_renewal_of_dlock_hold(void) {
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "shared", NULL, &l), 0);
  CHECK_RC(dlock_lock_acquire(l, 5000, NULL), 0);
  CHECK_RC(dlock_lock_acquire(l, 5000, NULL), 0);
  char owner[256];
  dlock_client_owner(c, owner, sizeof owner);
  /* The hold count is where Redisson's getHoldCount reads it. */
  CHECK_EQ(th_cmd_int(&th_srv, "HGET shared %s", owner), 2);
  CHECK_EQ(
      th_cmd_int(&th_srv, "EVAL %s 1 shared 60000 %s", REDISSON_RENEW, owner),
      1);
  CHECK(th_cmd_int(&th_srv, "PTTL shared") > 55000);
  CHECK_EQ(th_cmd_int(&th_srv, "EVAL %s 1 shared 60000 %s", REDISSON_RENEW,
                      JAVA_OWNER),
           0);
  /* Redisson's unlock script run for dlock's owner id decrements it; dlock's
   * own count stays authoritative for its owner (two holds to give back). */
  redisReply *r = th_cmd(&th_srv, "EVAL %s 2 shared %s 0 30000 %s",
                         REDISSON_UNLOCK, CHANNEL, owner);
  CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == 0);
  freeReplyObject(r);
  CHECK_EQ(dlock_lock_release(l), 0);
  CHECK_EQ(th_cmd_int(&th_srv, "HGET shared %s", owner), 1);
  CHECK_EQ(dlock_lock_release(l), 1);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS shared"), 0);
  dlock_lock_free(l);
  dlock_client_close(c);
}

static void t_mixed_contention(void) {
  /* Threads of dlock and a "Java" loop contend; the counter stays exact. */
  redisReply *r = th_cmd(&th_srv, "SET mixed:counter 0");
  freeReplyObject(r);
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "shared", NULL, &l), 0);
  redisContext *j = th_redis_connect(&th_srv);
  int java_done = 0, dlock_done = 0;
  while (java_done < 100 || dlock_done < 100) {
    if (dlock_done < 100 && dlock_lock_try_acquire(l, 0, 5000, NULL) == 0) {
      long long v = th_cmd_int(&th_srv, "GET mixed:counter");
      r = th_cmd(&th_srv, "SET mixed:counter %lld", v + 1);
      freeReplyObject(r);
      /* While dlock holds it, Redisson's script must be refused. */
      redisReply *jr = redisCommand(j, "EVAL %s 1 shared 5000 %s",
                                    REDISSON_LOCK, JAVA_OWNER);
      CHECK(jr && jr->type == REDIS_REPLY_INTEGER);
      freeReplyObject(jr);
      CHECK_EQ(dlock_lock_release(l), 1);
      dlock_done++;
    }
    if (java_done < 100) {
      redisReply *jr = redisCommand(j, "EVAL %s 1 shared 5000 %s",
                                    REDISSON_LOCK, JAVA_OWNER);
      bool got = jr && jr->type == REDIS_REPLY_NIL;
      freeReplyObject(jr);
      if (got) {
        CHECK_RC(dlock_lock_try_acquire(l, 0, 5000, NULL), DLOCK_EBUSY);
        long long v = th_cmd_int(&th_srv, "GET mixed:counter");
        r = th_cmd(&th_srv, "SET mixed:counter %lld", v + 1);
        freeReplyObject(r);
        jr = redisCommand(j, "EVAL %s 2 shared %s 0 5000 %s", REDISSON_UNLOCK,
                          CHANNEL, JAVA_OWNER);
        freeReplyObject(jr);
        java_done++;
      }
    }
  }
  redisFree(j);
  CHECK_EQ(th_cmd_int(&th_srv, "GET mixed:counter"), 200);
  dlock_lock_free(l);
  dlock_client_close(c);
}

TH_MAIN(T(t_java_holds_dlock_excluded), T(t_java_unlock_wakes_dlock_waiter),
        T(t_dlock_unlock_wakes_java_waiter), T(t_java_renewal_of_dlock_hold),
        T(t_mixed_contention))
