/* test_permits.c: the permit-expirable semaphore against a real server:
 * permits by id with leases (renewed or fixed), waits that wake on a
 * release or a lease's end, a crashed holder's permit coming back, a lost
 * permit reported, and interop with Redisson's own scripts. */
#include "harness.h"

#include <limits.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

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
  return th_client(&th_srv, lease);
}

static void t_permits_basics(void) {
  dlock_client *c = client_with_lease(0);
  CHECK(c != NULL);
  dlock_permits *p;
  char a[DLOCK_PERMIT_ID_LEN], b[DLOCK_PERMIT_ID_LEN], x[DLOCK_PERMIT_ID_LEN];
  CHECK_RC(dlock_permits_new(c, "perm:basic", &p), 0);
  CHECK_EQ(dlock_permits_try_set(p, 2), 1);
  CHECK_EQ(dlock_permits_try_set(p, 5), 0);
  CHECK_RC(dlock_permits_try_acquire(p, 0, 0, a), 0);
  CHECK_RC(dlock_permits_try_acquire(p, 0, 0, b), 0);
  CHECK(strcmp(a, b) != 0 && strlen(a) == 32);
  CHECK_RC(dlock_permits_try_acquire(p, 0, 0, x), DLOCK_EBUSY);
  CHECK_EQ(dlock_permits_get_available(p), 0);
  /* Redisson's layout: 16-byte members of {perm:basic}:timeout. */
  CHECK_EQ(th_cmd_int(&th_srv, "ZCARD {perm:basic}:timeout"), 2);
  redisReply *r = th_cmd(&th_srv, "ZRANGE {perm:basic}:timeout 0 0");
  CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
        r->element[0]->len == 16);
  freeReplyObject(r);
  int64_t ms = 0;
  CHECK_RC(dlock_permits_validity(p, a, &ms), 0);
  CHECK(ms > 20000); /* the 30 s watchdog lease */
  CHECK_RC(dlock_permits_release(p, a), 0);
  CHECK_EQ(dlock_permits_get_available(p), 1);
  /* Misuse: each an error, nothing changed. */
  CHECK_RC(dlock_permits_release(p, a), DLOCK_ENOTOWNER); /* twice */
  CHECK_RC(dlock_permits_release(p, "00000000000000000000000000000000"),
           DLOCK_ENOTOWNER); /* never issued */
  CHECK_RC(dlock_permits_release(p, "not-an-id"), DLOCK_EINVAL);
  CHECK_RC(dlock_permits_release(p, NULL), DLOCK_EINVAL);
  CHECK_EQ(dlock_permits_get_available(p), 1);
  CHECK_EQ(th_cmd_int(&th_srv, "ZCARD {perm:basic}:timeout"), 1);
  CHECK_RC(dlock_permits_release(p, b), 0);
  CHECK_EQ(dlock_permits_get_available(p), 2);
  dlock_permits_free(p);
  dlock_client_close(c);
}

/* The API counts in an int: an add that would take the permits (those out
 * included, they come back) past it is refused before anything changes,
 * and a count another client set past an int is said to be that. */
static void t_permits_int_range(void) {
  dlock_client *c = client_with_lease(0);
  CHECK(c != NULL);
  dlock_permits *p;
  char a[DLOCK_PERMIT_ID_LEN];
  CHECK_RC(dlock_permits_new(c, "perm:range", &p), 0);
  CHECK_EQ(dlock_permits_try_set(p, INT_MAX), 1);
  CHECK_RC(dlock_permits_try_acquire(p, 0, 0, a), 0);
  CHECK_RC(dlock_permits_add(p, 1), DLOCK_ERANGE);
  CHECK(strstr(dlock_client_errmsg(c), "perm:range") != NULL);
  CHECK_EQ(dlock_permits_get_available(p), INT_MAX - 1);
  CHECK_RC(dlock_permits_release(p, a), 0);
  CHECK_EQ(dlock_permits_get_available(p), INT_MAX);
  redisReply *r = th_cmd(&th_srv, "SET perm:range 2147483648");
  if (r) freeReplyObject(r);
  CHECK_RC(dlock_permits_get_available(p), DLOCK_ERANGE);
  CHECK(strstr(dlock_client_errmsg(c), "2147483648") != NULL);
  CHECK_RC(dlock_permits_add(p, -1), 0);
  CHECK_EQ(dlock_permits_get_available(p), INT_MAX);
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
  int rc = dlock_permits_try_acquire(w->p, 10000, 0, w->id);
  w->at = th_now_ms();
  atomic_store(&w->rc, rc);
  return NULL;
}

static void t_permits_release_wakes(void) {
  dlock_client *a = client_with_lease(0), *b = client_with_lease(0);
  CHECK(a && b);
  dlock_permits *pa, *pb;
  char id[DLOCK_PERMIT_ID_LEN];
  CHECK_RC(dlock_permits_new(a, "perm:wake", &pa), 0);
  CHECK_RC(dlock_permits_new(b, "perm:wake", &pb), 0);
  CHECK_EQ(dlock_permits_try_set(pa, 1), 1);
  CHECK_RC(dlock_permits_try_acquire(pa, 0, 0, id), 0); /* 30 s lease */
  pwait w = {.p = pb, .rc = 99};
  pthread_t t;
  pthread_create(&t, NULL, wait_permit_id, &w);
  CHECK(th_wait_subscribed(&th_srv, "redisson_sc:{perm:wake}", 2000));
  th_sleep_ms(50);
  int64_t t0 = th_now_ms();
  freeReplyObject(th_cmd(&th_srv, "CONFIG RESETSTAT"));
  CHECK_RC(dlock_permits_release(pa, id), 0);
  pthread_join(t, NULL);
  CHECK_RC(atomic_load(&w.rc), 0);
  CHECK(w.at - t0 < 500); /* woken by the release, not the lease's end */
  /* As the semaphore's (test_semaphore.c,
   * t_semaphore_contended_release_pings_first): a release goes out behind
   * a PING when the handle's last acquire waited or its last release was
   * heard, and only then. */
  CHECK_EQ(th_calls(&th_srv, "ping"), 0);
  freeReplyObject(th_cmd(&th_srv, "CONFIG RESETSTAT"));
  CHECK_RC(dlock_permits_release(pb, w.id), 0); /* pb had waited */
  CHECK_EQ(th_calls(&th_srv, "ping"), 1);
  CHECK_RC(dlock_permits_try_acquire(pa, 0, 0, id), 0); /* pa was heard */
  freeReplyObject(th_cmd(&th_srv, "CONFIG RESETSTAT"));
  CHECK_RC(dlock_permits_release(pa, id), 0);
  CHECK_EQ(th_calls(&th_srv, "ping"), 1);
  CHECK(th_wait_unsubscribed(&th_srv, "redisson_sc:{perm:wake}", 5000));
  CHECK_RC(dlock_permits_try_acquire(pa, 0, 0, id), 0);
  CHECK_RC(dlock_permits_release(pa, id), 0); /* heard by nobody */
  CHECK_RC(dlock_permits_try_acquire(pa, 0, 0, id), 0);
  freeReplyObject(th_cmd(&th_srv, "CONFIG RESETSTAT"));
  CHECK_RC(dlock_permits_release(pa, id), 0);
  CHECK_EQ(th_calls(&th_srv, "ping"), 0);
  CHECK_EQ(dlock_permits_get_available(pa), 1);
  dlock_permits_free(pa);
  dlock_permits_free(pb);
  dlock_client_close(a);
  dlock_client_close(b);
}

static void t_permits_fixed_lease_ends(void) {
  dlock_client *c = client_with_lease(0);
  CHECK(c != NULL);
  dlock_permits *p;
  char a[DLOCK_PERMIT_ID_LEN], b[DLOCK_PERMIT_ID_LEN];
  CHECK_RC(dlock_permits_new(c, "perm:lease", &p), 0);
  CHECK_EQ(dlock_permits_try_set(p, 1), 1);
  CHECK_RC(dlock_permits_try_acquire(p, 0, 200, a), 0);
  /* Waiting for the only permit: it comes back when its lease ends, with
   * no message, and the waiter gets it then. */
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_permits_try_acquire(p, 3000, 5000, b), 0);
  int64_t took = th_now_ms() - t0;
  CHECK(took >= 150 && took < 1000);
  CHECK_RC(dlock_permits_validity(p, a, NULL), DLOCK_ELOST);
  CHECK_RC(dlock_permits_release(p, a), DLOCK_ELOST);
  CHECK_EQ(dlock_permits_get_available(p), 0); /* b still holds the one */
  CHECK_RC(dlock_permits_release(p, b), 0);
  CHECK_EQ(dlock_permits_get_available(p), 1);
  dlock_permits_free(p);
  dlock_client_close(c);
}

static int crashed_holder_child(void) {
  dlock_client *c = client_with_lease(600);
  dlock_permits *p;
  char id[DLOCK_PERMIT_ID_LEN];
  if (c == NULL || dlock_permits_new(c, "perm:crash", &p) != 0) return 2;
  if (dlock_permits_try_acquire(p, 5000, 0, id) != 0) return 3;
  th_cmd_int(&th_srv, "SET perm:crash:held 1");
  for (;;)
    pause(); /* SIGKILLed while holding */
}

static bool child_holds(void *arg) {
  (void)arg;
  return th_cmd_int(&th_srv, "EXISTS perm:crash:held") == 1;
}

static void t_permits_crashed_holder_returns(void) {
  pid_t kid = fork();
  if (kid == 0) _exit(crashed_holder_child());
  dlock_client *c = client_with_lease(0);
  CHECK(c != NULL);
  dlock_permits *p;
  char id[DLOCK_PERMIT_ID_LEN];
  CHECK_RC(dlock_permits_new(c, "perm:crash", &p), 0);
  CHECK_EQ(dlock_permits_try_set(p, 1), 1);
  CHECK(th_wait_for(child_holds, NULL, 5000));
  /* Renewed while its holder lives: three leases later, still taken. */
  CHECK_RC(dlock_permits_try_acquire(p, 1800, 0, id), DLOCK_EBUSY);
  kill(kid, SIGKILL);
  waitpid(kid, NULL, 0);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_permits_try_acquire(p, 3000, 0, id), 0);
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
  dlock_client *c = client_with_lease(600);
  CHECK(c != NULL);
  dlock_permits *p;
  char id[DLOCK_PERMIT_ID_LEN];
  lost_rec rec = {0};
  CHECK_RC(dlock_permits_new(c, "perm:lost", &p), 0);
  dlock_permits_on_lost(p, on_permit_lost, &rec);
  CHECK_EQ(dlock_permits_try_set(p, 1), 1);
  CHECK_RC(dlock_permits_try_acquire(p, 0, 0, id), 0);
  /* Someone takes the permit away on the server. */
  CHECK_EQ(th_cmd_int(&th_srv, "DEL {perm:lost}:timeout"), 1);
  CHECK(th_wait_for(lost_seen, &rec, 2000));
  CHECK(strcmp(rec.id, id) == 0);
  CHECK_RC(dlock_permits_validity(p, id, NULL), DLOCK_ELOST);
  CHECK_RC(dlock_permits_release(p, id), DLOCK_ELOST);
  dlock_permits_free(p);
  dlock_client_close(c);
}

static void t_permits_interop(void) {
  dlock_client *c = client_with_lease(0);
  CHECK(c != NULL);
  dlock_permits *p;
  char id[DLOCK_PERMIT_ID_LEN];
  CHECK_RC(dlock_permits_new(c, "perm:java", &p), 0);
  CHECK_EQ(dlock_permits_try_set(p, 2), 1);
  /* Redisson takes one, with its own 16-byte id and a lease in 60 s. */
  struct timeval tv;
  gettimeofday(&tv, NULL);
  long long now = (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000;
  const char jid[16] = "java-permit-0001";
  redisReply *r =
      th_cmd(&th_srv,
             "EVAL %s 3 perm:java {perm:java}:timeout redisson_sc:{perm:java} "
             "1 %lld %lld 922337203685477 publish %b",
             REDISSON_PERMIT_ACQUIRE, now + 60000, now, jid, sizeof jid);
  CHECK(r && r->str && strcmp(r->str, "OK") == 0); /* a bulk "OK" */
  freeReplyObject(r);
  CHECK_EQ(dlock_permits_get_available(p), 1);
  CHECK_RC(dlock_permits_try_acquire(p, 0, 0, id), 0);
  CHECK_EQ(dlock_permits_get_available(p), 0);
  /* Now Redisson finds none, and tells the nearest lease end. */
  r = th_cmd(&th_srv,
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
  CHECK_EQ(dlock_permits_get_available(p), 1);
  CHECK_RC(dlock_permits_release(p, id), 0);
  CHECK_EQ(dlock_permits_get_available(p), 2);
  dlock_permits_free(p);
  dlock_client_close(c);
}

/* The names 0.3 renamed still link and do what their replacements do (a
 * program built against 0.2's header runs unchanged). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static void t_names_of_0_2(void) {
  dlock_client *c = client_with_lease(0);
  CHECK(c != NULL);
  dlock_permits *p;
  CHECK_RC(dlock_permits_new(c, "perm:old", &p), 0);
  CHECK_EQ(dlock_permits_try_set_permits(p, 2), 1);
  CHECK_RC(dlock_permits_add_permits(p, 1), 0);
  CHECK_EQ(dlock_permits_available(p), 3);
  dlock_permits_free(p);
  dlock_semaphore *s;
  CHECK_RC(dlock_semaphore_new(c, "sem:old", &s), 0);
  CHECK_EQ(dlock_semaphore_try_set_permits(s, 4), 1);
  CHECK_EQ(dlock_semaphore_available(s), 4);
  dlock_semaphore_free(s);
  dlock_latch *l;
  CHECK_RC(dlock_latch_new(c, "latch:old", &l), 0);
  CHECK_EQ(dlock_latch_try_set_count(l, 5), 1);
  int64_t n = 0;
  CHECK_RC(dlock_latch_count(l, &n), 0);
  CHECK_EQ(n, 5);
  dlock_latch_free(l);
  dlock_leader *ld;
  CHECK_RC(dlock_leader_new(c, "lead:old", "me", &ld), 0);
  char who[64];
  CHECK_EQ(dlock_leader_get_leader(ld, who, sizeof who), 0);
  CHECK_RC(dlock_leader_await(ld, 0), DLOCK_EINVAL); /* not started */
  dlock_leader_free(ld);
  dlock_client_close(c);
}
#pragma GCC diagnostic pop

TH_MAIN(T(t_names_of_0_2), T(t_permits_basics), T(t_permits_int_range),
        T(t_permits_release_wakes), T(t_permits_fixed_lease_ends),
        T(t_permits_crashed_holder_returns), T(t_permits_loss_reported),
        T(t_permits_interop))
