/* test_interop.c: dlock and Redisson share locks. A second client runs
 * Redisson's own RLock scripts (as published in the reference documents) with
 * its own owner id; the two must exclude and wake each other, on one server
 * and on a Redis Cluster (shard channels and classic ones). */
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

/* RedissonLock.unlockInnerAsync (RedissonBaseLock's unlock path) from
 * 3.22: as above, but the publish command comes as ARGV[4], the one its
 * subscribe service chose: "spublish" with shardedSubscriptionMode AUTO on
 * a Redis 7 cluster (its waiters SSUBSCRIBE on the slot's master),
 * "publish" otherwise. (Later versions also keep the result in an unlock
 * latch, KEYS[3]; the publish is the same.) */
static const char *REDISSON_UNLOCK_CMD =
    "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then "
    "return nil;"
    "end; "
    "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); "
    "if (counter > 0) then "
    "redis.call('pexpire', KEYS[1], ARGV[2]); "
    "return 0; "
    "else "
    "redis.call('del', KEYS[1]); "
    "redis.call(ARGV[4], KEYS[2], ARGV[1]); "
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

/* The Java client takes the lock `name` on server n (a cluster: the master
 * of name's slot). */
static redisReply *java_lock(th_redis *n, const char *name, long lease) {
  return th_cmd(n, "EVAL %s 1 %s %ld %s", REDISSON_LOCK, name, lease,
                JAVA_OWNER);
}

/* ... and gives it back: with the script before 3.22 (publish NULL), or
 * with 3.22's and that publish command. */
static redisReply *java_unlock(th_redis *n, const char *name,
                               const char *publish) {
  char ch[128];
  snprintf(ch, sizeof ch, "redisson_lock__channel:{%s}", name);
  if (publish == NULL)
    return th_cmd(n, "EVAL %s 2 %s %s 0 30000 %s", REDISSON_UNLOCK, name, ch,
                  JAVA_OWNER);
  return th_cmd(n, "EVAL %s 2 %s %s 0 30000 %s %s", REDISSON_UNLOCK_CMD, name,
                ch, JAVA_OWNER, publish);
}

static void t_java_holds_dlock_excluded(void) {
  redisReply *r = java_lock(&th_srv, "shared", 30000);
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
  r = java_unlock(&th_srv, "shared", NULL);
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
  redisReply *r = java_lock(&th_srv, "shared", 30000);
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
  r = java_unlock(&th_srv, "shared", NULL);
  freeReplyObject(r);
  pthread_join(th, NULL);
  CHECK_RC(a.rc, 0);
  CHECK(a.at - t0 < 200); /* the message woke it, not the 30 s TTL */
  /* Now Redisson's lock script sees it held and gets the PTTL back. */
  r = java_lock(&th_srv, "shared", 30000);
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
  r = java_lock(&th_srv, "shared", 30000);
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
  r = java_lock(&th_srv, "shared", 30000);
  CHECK(r && r->type == REDIS_REPLY_NIL);
  freeReplyObject(r);
  r = java_unlock(&th_srv, "shared", NULL);
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

/* ---- on a Redis Cluster ---- */

/* The cluster of a T_BARE test below (each test is a process of its own). */
static th_cluster K;

/* The cluster tests' lock: slot 15740, the third master's (not the first
 * seed's: dlock's requests and subscriptions must be routed to it). */
#define JNAME "jlock"
#define JCHANNEL "redisson_lock__channel:{jlock}"
#define JQUEUE "dlock_lock_queue:{jlock}" /* dlock's hand-off queue */

/* How Redisson and dlock wait and wake on a cluster. */
typedef struct pubsub_mode {
  const char *query;     /* dlock: appended to the cluster URL */
  const char *publish;   /* Redisson's unlock: its ARGV[4] */
  const char *subscribe; /* a Redisson waiter's command */
  const char *numsub;    /* the PUBSUB subcommand that counts those */
  const char *message;   /* what a waiter receives */
} pubsub_mode;

/* Redisson 3.22+ (shardedSubscriptionMode AUTO) on Redis 7; dlock's
 * default ?pubsub=auto. */
static const pubsub_mode SHARDED = {"", "spublish", "SSUBSCRIBE", "SHARDNUMSUB",
                                    "smessage"};
/* Older Redisson, or shardedSubscriptionMode OFF; dlock ?pubsub=classic. */
static const pubsub_mode CLASSIC = {"?pubsub=classic", "publish", "SUBSCRIBE",
                                    "NUMSUB", "message"};

static dlock_client *open_cluster(const pubsub_mode *m) {
  char url[700];
  snprintf(url, sizeof url, "%s%s", K.url, m->query);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = 1000;
  return th_client_opts(&o);
}

/* The master of JNAME's slot, where the Java client runs its scripts;
 * NULL if it were the first seed's (see JNAME). */
static th_redis *jmaster(void) {
  int i = th_cluster_node_of(&K, JNAME);
  return i <= 0 ? NULL : &K.nodes[i];
}

typedef struct listen_arg {
  th_redis *n;
  const char *numsub;
} listen_arg;

/* Someone listens on JCHANNEL on x->n, in x's kind of channel. */
static bool listened(void *p) {
  const listen_arg *x = p;
  redisReply *r = th_cmd(x->n, "PUBSUB %s %s", x->numsub, JCHANNEL);
  bool ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
            r->element[1]->integer >= 1;
  if (r) freeReplyObject(r);
  return ok;
}

static void t_cluster_java_holds_dlock_excluded(void) {
  CHECK(th_cluster_start(&K, NULL) == 0);
  th_redis *n = jmaster();
  CHECK(n != NULL);
  redisReply *r = java_lock(n, JNAME, 30000);
  CHECK(r && r->type == REDIS_REPLY_NIL); /* Redisson: nil = acquired */
  freeReplyObject(r);
  dlock_client *c = open_cluster(&SHARDED);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, JNAME, NULL, &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, NULL), DLOCK_EBUSY);
  CHECK_EQ(dlock_lock_is_locked(l), 1);
  CHECK_EQ(dlock_lock_is_held(l), 0);
  CHECK_RC(dlock_lock_release(l), DLOCK_ENOTOWNER);
  CHECK_EQ(th_cmd_int(n, "HGET %s %s", JNAME, JAVA_OWNER), 1);
  r = java_unlock(n, JNAME, SHARDED.publish);
  CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
  freeReplyObject(r);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, NULL), 0);
  char owner[256];
  dlock_client_owner(c, owner, sizeof owner);
  CHECK_EQ(th_cmd_int(n, "HGET %s %s", JNAME, owner), 1);
  /* Now Redisson's lock script is refused (the PTTL back). */
  r = java_lock(n, JNAME, 30000);
  CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer > 0);
  freeReplyObject(r);
  CHECK_EQ(dlock_lock_release(l), 1);
  CHECK_EQ(th_cmd_int(n, "EXISTS %s", JNAME), 0);
  dlock_lock_free(l);
  dlock_client_close(c);
  th_cluster_stop(&K);
}

/* Java holds with a long lease; a dlock waiter, listening on the slot's
 * master in m's kind of channel, is woken by Java's unlock message. */
static void java_unlock_wakes_dlock(const pubsub_mode *m) {
  th_redis *n = jmaster();
  CHECK(n != NULL);
  redisReply *r = java_lock(n, JNAME, 60000);
  CHECK(r && r->type == REDIS_REPLY_NIL);
  freeReplyObject(r);
  dlock_client *c = open_cluster(m);
  CHECK(c != NULL);
  dlock_lock *l; /* an explicit owner: the waiter thread takes it for us */
  CHECK_RC(dlock_lock_new(c, JNAME, "main", &l), 0);
  warg a = {l, -100, 0};
  pthread_t th;
  pthread_create(&th, NULL, waiter, &a);
  listen_arg x = {n, m->numsub};
  CHECK(th_wait_for(listened, &x, 5000));
  /* In the hand-off queue: its attempt after subscribing was refused. */
  CHECK(th_wait_llen(n, JQUEUE, 1, 5000));
  dlock_client_stats st;
  CHECK_RC(dlock_client_stats_get(c, &st), 0);
  /* A new client's first wait may be woken once by its grant
   * subscription's confirmation, when that came after it went to sleep
   * (it tries again: the deaf first try; as test_threads allows), as in
   * one fresh-clone CI run. */
  CHECK(st.wakeups <= 1);
  uint64_t w0 = st.wakeups;
  int64_t t0 = th_now_ms();
  r = java_unlock(n, JNAME, m->publish);
  CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
  freeReplyObject(r);
  pthread_join(th, NULL);
  CHECK_RC(a.rc, 0);
  CHECK(a.at - t0 < 5000); /* not the 60 s lease, nor the 20 s wait */
  /* A queued waiter also tries again every 2 s or so; the message is what
   * woke it. */
  CHECK_RC(dlock_client_stats_get(c, &st), 0);
  CHECK(st.wakeups > w0);
  r = java_lock(n, JNAME, 30000);
  CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer > 0);
  freeReplyObject(r);
  CHECK_EQ(dlock_lock_release(l), 1);
  dlock_lock_free(l);
  dlock_client_close(c);
}

/* A Java waiter listens on the slot's master in m's kind of channel and
 * is refused; dlock's release tells it, in that kind of message. */
static void dlock_unlock_wakes_java(const pubsub_mode *m) {
  th_redis *n = jmaster();
  CHECK(n != NULL);
  dlock_client *c = open_cluster(m);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, JNAME, NULL, &l), 0);
  CHECK_RC(dlock_lock_acquire(l, 0, NULL), 0);
  redisContext *sub = th_redis_connect(n);
  CHECK(sub != NULL);
  redisReply *r = redisCommand(sub, "%s %s", m->subscribe, JCHANNEL);
  CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
        r->element[2]->integer == 1); /* subscribed */
  freeReplyObject(r);
  r = java_lock(n, JNAME, 30000);
  CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer > 0);
  freeReplyObject(r);
  CHECK_EQ(dlock_lock_release(l), 1);
  struct timeval tv = {2, 0};
  redisSetTimeout(sub, tv);
  void *msg = NULL;
  CHECK(redisGetReply(sub, &msg) == REDIS_OK); /* not a timeout */
  r = msg;
  CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 3);
  CHECK(strcmp(r->element[0]->str, m->message) == 0);
  CHECK(strcmp(r->element[1]->str, JCHANNEL) == 0);
  CHECK(strcmp(r->element[2]->str, "0") == 0); /* UNLOCK_MESSAGE */
  freeReplyObject(r);
  redisFree(sub);
  r = java_lock(n, JNAME, 30000);
  CHECK(r && r->type == REDIS_REPLY_NIL);
  freeReplyObject(r);
  r = java_unlock(n, JNAME, m->publish);
  CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
  freeReplyObject(r);
  dlock_lock_free(l);
  dlock_client_close(c);
}

static void t_cluster_java_unlock_wakes_dlock_waiter(void) {
  CHECK(th_cluster_start(&K, NULL) == 0);
  java_unlock_wakes_dlock(&SHARDED);
  if (th_failed_checks) return;
  th_cluster_stop(&K);
}

static void t_cluster_dlock_unlock_wakes_java_waiter(void) {
  CHECK(th_cluster_start(&K, NULL) == 0);
  dlock_unlock_wakes_java(&SHARDED);
  if (th_failed_checks) return;
  th_cluster_stop(&K);
}

/* Redisson in classic mode (older, or shardedSubscriptionMode OFF) beside
 * dlock's ?pubsub=classic: PUBLISH and SUBSCRIBE both ways. */
static void t_cluster_classic_mode(void) {
  CHECK(th_cluster_start(&K, NULL) == 0);
  java_unlock_wakes_dlock(&CLASSIC);
  if (th_failed_checks) return;
  dlock_unlock_wakes_java(&CLASSIC);
  if (th_failed_checks) return;
  th_cluster_stop(&K);
}

TH_MAIN(T(t_java_holds_dlock_excluded), T(t_java_unlock_wakes_dlock_waiter),
        T(t_dlock_unlock_wakes_java_waiter), T(t_java_renewal_of_dlock_hold),
        T(t_mixed_contention), T_BARE(t_cluster_java_holds_dlock_excluded),
        T_BARE(t_cluster_java_unlock_wakes_dlock_waiter),
        T_BARE(t_cluster_dlock_unlock_wakes_java_waiter),
        T_BARE(t_cluster_classic_mode))
