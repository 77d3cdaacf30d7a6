/* test_rwlock.c: the read-write lock against a real server: many readers
 * or one writer, reentrancy, downgrade, the upgrade refused at once, wake-
 * ups, the watchdog for readers, and interop with Redisson's read lock. */
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

typedef struct side {
  dlock_client *c;
  dlock_rwlock *rw;
  dlock_lock *r, *w; /* borrowed from rw */
} side;

static bool open_side(side *s, const char *name, int64_t watchdog_ms) {
  /* An explicit owner: a helper thread may take what the test releases. */
  s->c = th_client(&th_srv, watchdog_ms);
  if (s->c == NULL || dlock_rwlock_new(s->c, name, "o", &s->rw) != 0)
    return false;
  s->r = dlock_rwlock_read(s->rw);
  s->w = dlock_rwlock_write(s->rw);
  return true;
}

static void close_side(side *s) {
  dlock_rwlock_free(s->rw);
  dlock_client_close(s->c);
}

static void t_readers_or_one_writer(void) {
  side a, b, c;
  CHECK(open_side(&a, "rw:basic", 0) && open_side(&b, "rw:basic", 0) &&
        open_side(&c, "rw:basic", 0));
  uint64_t tok = 99;
  CHECK_RC(dlock_lock_acquire(a.r, 0, &tok), 0);
  CHECK_EQ(tok, 0); /* readers get no token */
  CHECK_RC(dlock_lock_acquire(b.r, 0, NULL), 0);
  CHECK_RC(dlock_lock_try_acquire(c.w, 0, 0, NULL), DLOCK_EBUSY);
  CHECK_RC(dlock_lock_release(a.r), 1);
  CHECK_RC(dlock_lock_try_acquire(c.w, 0, 0, NULL), DLOCK_EBUSY);
  CHECK_RC(dlock_lock_release(b.r), 1);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS rw:basic"), 0);
  uint64_t t1 = 0, t2 = 0;
  CHECK_RC(dlock_lock_try_acquire(c.w, 0, 0, &t1), 0);
  CHECK(t1 > 0);
  CHECK_RC(dlock_lock_try_acquire(a.r, 0, 0, NULL), DLOCK_EBUSY);
  CHECK_RC(dlock_lock_try_acquire(a.w, 0, 0, NULL), DLOCK_EBUSY);
  /* Reentrant writer, then reentrant reader. */
  CHECK_RC(dlock_lock_acquire(c.w, 0, &t2), 0);
  CHECK_EQ(t1, t2);
  CHECK_EQ(dlock_lock_hold_count(c.w), 2);
  CHECK_RC(dlock_lock_release(c.w), 0);
  CHECK_RC(dlock_lock_release(c.w), 1);
  CHECK_RC(dlock_lock_acquire(a.r, 0, NULL), 0);
  CHECK_RC(dlock_lock_acquire(a.r, 0, NULL), 0);
  CHECK_EQ(dlock_lock_hold_count(a.r), 2);
  CHECK_RC(dlock_lock_release(a.r), 0);
  CHECK_RC(dlock_lock_release(a.r), 1);
  CHECK_RC(dlock_lock_release(a.r), DLOCK_ENOTOWNER); /* not held */
  CHECK_RC(dlock_lock_try_acquire(a.w, 0, 0, &t2), 0);
  CHECK(t2 > t1); /* the writer's tokens grow */
  CHECK_RC(dlock_lock_release(a.w), 1);
  close_side(&a);
  close_side(&b);
  close_side(&c);
}

static void t_downgrade_and_upgrade(void) {
  side a, b;
  CHECK(open_side(&a, "rw:grade", 0) && open_side(&b, "rw:grade", 0));
  /* Downgrade: the writer also reads, then lets the write go. */
  CHECK_RC(dlock_lock_acquire(a.w, 0, NULL), 0);
  CHECK_RC(dlock_lock_acquire(a.r, 0, NULL), 0);
  CHECK_RC(dlock_lock_try_acquire(b.r, 0, 0, NULL), DLOCK_EBUSY);
  CHECK_RC(dlock_lock_release(a.w), 1);
  redisReply *r = th_cmd(&th_srv, "HGET rw:grade mode");
  CHECK(r && r->str && strcmp(r->str, "read") == 0);
  freeReplyObject(r);
  CHECK_RC(dlock_lock_try_acquire(b.r, 0, 0, NULL), 0); /* readers now */
  CHECK_RC(dlock_lock_try_acquire(b.w, 0, 0, NULL), DLOCK_EDEADLK);
  /* Upgrade: refused at once, even with a long wait, nothing changed. */
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_try_acquire(a.w, 5000, 0, NULL), DLOCK_EDEADLK);
  CHECK(th_now_ms() - t0 < 1000);
  CHECK_EQ(dlock_lock_hold_count(a.r), 1);
  CHECK_RC(dlock_lock_release(a.r), 1);
  CHECK_RC(dlock_lock_release(b.r), 1);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS rw:grade"), 0);
  close_side(&a);
  close_side(&b);
}

typedef struct waiter {
  dlock_lock *l;
  atomic_int rc;
  int64_t at;
} waiter;

static void *take(void *p) {
  waiter *w = p;
  int rc = dlock_lock_try_acquire(w->l, 10000, 0, NULL);
  w->at = th_now_ms();
  atomic_store(&w->rc, rc);
  return NULL;
}

static void t_wakeups(void) {
  side a, b, c;
  CHECK(open_side(&a, "rw:wake", 0) && open_side(&b, "rw:wake", 0) &&
        open_side(&c, "rw:wake", 0));
  /* A writer waits for the last reader. */
  CHECK_RC(dlock_lock_acquire(a.r, 0, NULL), 0);
  waiter w = {c.w, 99, 0};
  pthread_t t;
  pthread_create(&t, NULL, take, &w);
  CHECK(th_wait_subscribed(&th_srv, "redisson_rwlock:{rw:wake}", 2000));
  th_sleep_ms(50);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_release(a.r), 1);
  pthread_join(t, NULL);
  CHECK_RC(atomic_load(&w.rc), 0);
  CHECK(w.at - t0 < 500);
  /* Two readers wait for the writer: one release wakes both. */
  waiter r1 = {a.r, 99, 0}, r2 = {b.r, 99, 0};
  pthread_t t1, t2;
  pthread_create(&t1, NULL, take, &r1);
  pthread_create(&t2, NULL, take, &r2);
  th_sleep_ms(100);
  t0 = th_now_ms();
  CHECK_RC(dlock_lock_release(c.w), 1);
  pthread_join(t1, NULL);
  pthread_join(t2, NULL);
  CHECK_RC(atomic_load(&r1.rc), 0);
  CHECK_RC(atomic_load(&r2.rc), 0);
  CHECK(r1.at - t0 < 500 && r2.at - t0 < 500);
  CHECK_RC(dlock_lock_release(a.r), 1);
  CHECK_RC(dlock_lock_release(b.r), 1);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS rw:wake"), 0);
  /* Force release frees any mode. */
  CHECK_RC(dlock_lock_acquire(a.r, 0, NULL), 0);
  CHECK_RC(dlock_lock_force_release(c.w), 1);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS rw:wake"), 0);
  CHECK_RC(dlock_lock_release(a.r), DLOCK_ELOST);
  close_side(&a);
  close_side(&b);
  close_side(&c);
}

static void t_watchdog_renews_readers(void) {
  side a;
  CHECK(open_side(&a, "rw:dog", 600));
  CHECK_RC(dlock_lock_acquire(a.r, 0, NULL), 0);
  char owner[256];
  snprintf(owner, sizeof owner, "%s:o", dlock_client_id(a.c));
  th_sleep_ms(2000); /* over three leases */
  CHECK_EQ(dlock_lock_is_held(a.r), 1);
  CHECK(th_cmd_int(&th_srv, "PTTL {rw:dog}:%s:rwlock_timeout:1", owner) > 0);
  CHECK_EQ(dlock_lock_is_lost(a.r), 0);
  CHECK_RC(dlock_lock_release(a.r), 1);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS {rw:dog}:%s:rwlock_timeout:1", owner),
           0);
  close_side(&a);
}

/* RedissonReadLock.tryLockInnerAsync: KEYS lock, timeout prefix; ARGV
 * lease, owner, owner:write. */
static const char *REDISSON_READ_LOCK =
    "local mode = redis.call('hget', KEYS[1], 'mode'); "
    "if (mode == false) then "
    "redis.call('hset', KEYS[1], 'mode', 'read'); "
    "redis.call('hset', KEYS[1], ARGV[2], 1); "
    "redis.call('set', KEYS[2] .. ':1', 1); "
    "redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]); "
    "redis.call('pexpire', KEYS[1], ARGV[1]); "
    "return nil; "
    "end; "
    "if (mode == 'read') or (mode == 'write' and redis.call('hexists', "
    "KEYS[1], ARGV[3]) == 1) then "
    "local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1); "
    "local key = KEYS[2] .. ':' .. ind;"
    "redis.call('set', key, 1); "
    "redis.call('pexpire', key, ARGV[1]); "
    "local remainTime = redis.call('pttl', KEYS[1]); "
    "redis.call('pexpire', KEYS[1], math.max(remainTime, ARGV[1])); "
    "return nil; "
    "end;"
    "return redis.call('pttl', KEYS[1]);";

#define JAVA "3f1a9c2e-7b44-4f0e-9d1a-2c5e8b7a6d10:1"

static void t_interop_redisson_reader(void) {
  side a;
  CHECK(open_side(&a, "rw:java", 0));
  /* A Redisson reader and a dlock reader share; a dlock writer waits. */
  redisReply *r = th_cmd(&th_srv,
                         "EVAL %s 2 rw:java {rw:java}:%s:rwlock_timeout "
                         "30000 %s %s:write",
                         REDISSON_READ_LOCK, JAVA, JAVA, JAVA);
  CHECK(r && r->type == REDIS_REPLY_NIL);
  freeReplyObject(r);
  CHECK_RC(dlock_lock_acquire(a.r, 0, NULL), 0);
  CHECK_RC(dlock_lock_release(a.r), 1);
  CHECK_RC(dlock_lock_try_acquire(a.w, 0, 0, NULL), DLOCK_EBUSY);
  /* Our writer holding, Redisson's reader is kept out. */
  th_cmd_int(&th_srv, "DEL rw:java {rw:java}:%s:rwlock_timeout:1", JAVA);
  CHECK_RC(dlock_lock_acquire(a.w, 0, NULL), 0);
  r = th_cmd(&th_srv,
             "EVAL %s 2 rw:java {rw:java}:%s:rwlock_timeout 30000 %s "
             "%s:write",
             REDISSON_READ_LOCK, JAVA, JAVA, JAVA);
  CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer > 0);
  freeReplyObject(r);
  CHECK_RC(dlock_lock_release(a.w), 1);
  close_side(&a);
}

/* Each holder's description shows in inspect, as given, and goes with its
 * hold; the value is never a bare number (Redisson loops over those). */
typedef struct acq_arg {
  dlock_lock *l;
  int64_t wait_ms;
  int rc;
} acq_arg;

static void *acq_thread(void *p) {
  acq_arg *g = p;
  g->rc = dlock_lock_try_acquire(g->l, g->wait_ms, 10000, NULL);
  return NULL;
}

static bool tried_twice(void *arg) {
  (void)arg;
  return th_calls(&th_srv, "evalsha") + th_calls(&th_srv, "eval") >= 2;
}

static void t_unheard_writer_polls(void) {
  /* A waiter whose subscription the server has not confirmed (its
   * subscriber connection still coming up; here its ACL refuses it
   * SUBSCRIBE) hears no release: it polls until it would, and
   * takes the lock soon after the release. Before, it slept until the
   * holder's lease ran out (5 s here), as the conformance suite's writers
   * did now and then on a loaded machine (the first wait of a new client). */
  th_cmd_int(&th_srv,
             "ACL SETUSER deaf on >pw ~* allchannels +@all -subscribe");
  side a;
  CHECK(open_side(&a, "rw:deaf", 0));
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = th_srv.url;
  o.username = "deaf";
  o.password = "pw";
  o.command_timeout_ms = 300; /* how long it waits for a confirmation */
  dlock_client *c = th_client_opts(&o);
  CHECK(c != NULL);
  dlock_rwlock *rw;
  CHECK_RC(dlock_rwlock_new(c, "rw:deaf", "o", &rw), 0);
  CHECK_RC(dlock_lock_acquire(a.w, 5000, NULL), 0);
  freeReplyObject(th_cmd(&th_srv, "CONFIG RESETSTAT"));
  acq_arg g = {dlock_rwlock_write(rw), 10000, -100};
  pthread_t th;
  pthread_create(&th, NULL, acq_thread, &g);
  CHECK(th_wait_for(tried_twice, NULL, 3000)); /* it waits, unheard */
  int64_t t0 = th_now_ms();
  CHECK_EQ(dlock_lock_release(a.w), 1);
  pthread_join(th, NULL);
  int64_t took = th_now_ms() - t0;
  fprintf(stderr, "    taken %lld ms after the release\n", (long long)took);
  CHECK_RC(g.rc, 0);
  CHECK(took < th_soon(1000));
  CHECK_EQ(dlock_lock_release(dlock_rwlock_write(rw)), 1);
  dlock_rwlock_free(rw);
  dlock_client_close(c);
  close_side(&a);
}

static void t_inspect_describes_holders(void) {
  side a, b;
  CHECK(open_side(&a, "rw:info", 0) && open_side(&b, "rw:info", 0));
  CHECK_RC(dlock_lock_set_info(a.r, "reader A: nightly export"), 0);
  CHECK_RC(dlock_lock_set_info(b.r, "reader B"), 0);
  CHECK_RC(dlock_lock_set_info(a.w, "the writer, pid 7"), 0);
  CHECK_RC(dlock_lock_acquire(a.r, 0, NULL), 0);
  CHECK_RC(dlock_lock_acquire(b.r, 0, NULL), 0);
  dlock_lock_state st;
  CHECK_RC(dlock_lock_inspect(a.r, &st), 0);
  CHECK(st.held && st.readers == 2 && strcmp(st.mode, "read") == 0);
  CHECK(strcmp(st.type, "hash") == 0);
  /* Owner ids are "<client id>:o" here (the explicit owner "o"). */
  char oa[256];
  CHECK(dlock_client_owner(a.c, oa, sizeof oa) > 0);
  size_t idl = (size_t)(strrchr(oa, ':') - oa);
  bool is_a = strncmp(st.owner, oa, idl) == 0;
  CHECK(strcmp(st.info, is_a ? "reader A: nightly export" : "reader B") == 0);
  CHECK(st.held_ms >= 0 && st.held_ms < 5000);
  CHECK_RC(dlock_lock_release(a.r), 1);
  CHECK_RC(dlock_lock_inspect(b.r, &st), 0);
  CHECK(st.readers == 1 && strcmp(st.info, "reader B") == 0);
  CHECK_EQ(th_cmd_int(&th_srv, "HLEN rw:info"), 3); /* mode, B, B's info */
  CHECK_RC(dlock_lock_release(b.r), 1);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS rw:info"), 0);
  CHECK_RC(dlock_lock_acquire(a.w, 0, NULL), 0);
  CHECK_RC(dlock_lock_inspect(a.w, &st), 0);
  CHECK(st.held && strcmp(st.mode, "write") == 0);
  CHECK(strcmp(st.info, "the writer, pid 7") == 0);
  redisReply *r = th_cmd(&th_srv, "HGET rw:info dlock:info:%s", st.owner);
  CHECK(r && r->type == REDIS_REPLY_STRING);
  char *end = NULL;
  if (r && r->type == REDIS_REPLY_STRING) strtod(r->str, &end);
  CHECK(end && *end != '\0'); /* not a number */
  freeReplyObject(r);
  CHECK_RC(dlock_lock_release(a.w), 1);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS rw:info"), 0);
  CHECK_RC(dlock_lock_inspect(a.w, &st), 0);
  CHECK(!st.held && strcmp(st.type, "none") == 0);
  close_side(&a);
  close_side(&b);
}

static void t_rwlock_object_borrowed_handles(void) {
  /* One object, two handles it owns: the same on every call, their kinds
   * right, and dlock_lock_free on them a no-op (ASan and valgrind would see
   * a double free at dlock_rwlock_free otherwise). */
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_rwlock *rw = NULL;
  CHECK_RC(dlock_rwlock_new(c, "rw:obj", NULL, &rw), 0);
  dlock_lock *r = dlock_rwlock_read(rw), *w = dlock_rwlock_write(rw);
  CHECK(r != NULL && w != NULL && r != w);
  CHECK(dlock_rwlock_read(rw) == r && dlock_rwlock_write(rw) == w);
  CHECK(strcmp(dlock_lock_name(r), "rw:obj") == 0);
  uint64_t tok = 0;
  CHECK_RC(dlock_lock_acquire(w, 0, &tok), 0);
  CHECK(tok > 0);
  CHECK_RC(dlock_lock_acquire(r, 0, NULL), 0); /* the writer reads too */
  dlock_lock_free(r);                          /* borrowed: nothing */
  dlock_lock_free(w);
  CHECK_EQ(dlock_lock_is_held(w), 1); /* still usable */
  CHECK_RC(dlock_lock_release(w), 1);
  CHECK_RC(dlock_lock_release(r), 1);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS rw:obj"), 0);
  /* Held through its handles when freed: not released, no longer renewed
   * (the lock waits for its lease, as with dlock_lock_free). */
  CHECK_RC(dlock_lock_acquire(dlock_rwlock_read(rw), 0, NULL), 0);
  dlock_rwlock_free(rw);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS rw:obj"), 1);
  /* Bad arguments, and NULL everywhere. */
  rw = (dlock_rwlock *)1;
  CHECK_RC(dlock_rwlock_new(c, "", NULL, &rw), DLOCK_EINVAL);
  CHECK(rw == NULL);
  CHECK_RC(dlock_rwlock_new(NULL, "x", NULL, &rw), DLOCK_EINVAL);
  CHECK_RC(dlock_rwlock_new(c, "x", NULL, NULL), DLOCK_EINVAL);
  CHECK(dlock_rwlock_read(NULL) == NULL && dlock_rwlock_write(NULL) == NULL);
  dlock_rwlock_free(NULL);
  dlock_client_close(c);
}

TH_MAIN(T(t_readers_or_one_writer), T(t_downgrade_and_upgrade), T(t_wakeups),
        T(t_watchdog_renews_readers), T(t_interop_redisson_reader),
        T(t_unheard_writer_polls), T(t_inspect_describes_holders),
        T(t_rwlock_object_borrowed_handles))
