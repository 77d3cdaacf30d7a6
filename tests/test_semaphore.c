/* test_semaphore.c: the counting semaphore against a real server:
 * semantics, admission under processes x threads, waits that wake without
 * polling, misuse, and interop with Redisson's own scripts. The permit-
 * expirable semaphore is in test_permits.c, the latch in test_latch.c. */
#include "harness.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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

static void t_semaphore_basics(void) {
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_semaphore *s;
  CHECK_RC(dlock_semaphore_new(c, "sem:basic", &s), 0);
  CHECK_EQ(dlock_semaphore_get_available(s), 0); /* never set */
  CHECK_RC(dlock_semaphore_try_acquire(s, 1, 0), DLOCK_EBUSY);
  CHECK_EQ(dlock_semaphore_try_set_permits(s, 3), 1);
  CHECK_EQ(dlock_semaphore_try_set_permits(s, 9), 0); /* already set */
  CHECK_EQ(dlock_semaphore_get_available(s), 3);
  CHECK_RC(dlock_semaphore_try_acquire(s, 2, 0), 0);
  CHECK_EQ(dlock_semaphore_get_available(s), 1);
  CHECK_RC(dlock_semaphore_try_acquire(s, 2, 0), DLOCK_EBUSY);
  CHECK_EQ(dlock_semaphore_get_available(s), 1); /* a failed take takes none */
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_semaphore_try_acquire(s, 2, 150), DLOCK_EBUSY);
  CHECK(th_now_ms() - t0 >= 150);
  CHECK_RC(dlock_semaphore_release(s, 2), 0);
  CHECK_EQ(dlock_semaphore_get_available(s), 3);
  CHECK_EQ(dlock_semaphore_drain(s), 3);
  CHECK_EQ(dlock_semaphore_get_available(s), 0);
  CHECK_RC(dlock_semaphore_add_permits(s, 2), 0);
  CHECK_EQ(dlock_semaphore_get_available(s), 2);
  CHECK_RC(dlock_semaphore_add_permits(s, -2), 0);
  CHECK_EQ(dlock_semaphore_get_available(s), 0);
  dlock_semaphore_free(s);
  dlock_client_close(c);
}

/* The API counts permits in an int: a change past INT_MAX (or INT_MIN) is
 * refused with DLOCK_ERANGE before anything changes, and a count another
 * client set past an int is reported as that, not as a bad reply. */
static void t_semaphore_int_range(void) {
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_semaphore *s;
  CHECK_RC(dlock_semaphore_new(c, "sem:range", &s), 0);
  CHECK_EQ(dlock_semaphore_try_set_permits(s, INT_MAX), 1);
  CHECK_RC(dlock_semaphore_add_permits(s, 1), DLOCK_ERANGE);
  CHECK(strstr(dlock_client_errmsg(c), "sem:range") != NULL);
  CHECK_RC(dlock_semaphore_release(s, 1), DLOCK_ERANGE);
  CHECK_EQ(dlock_semaphore_get_available(s), INT_MAX); /* nothing changed */
  CHECK_RC(dlock_semaphore_add_permits(s, -1), 0);
  CHECK_RC(dlock_semaphore_release(s, 1), 0);
  CHECK_EQ(dlock_semaphore_get_available(s), INT_MAX);
  /* Below zero, down to INT_MIN and no further. */
  CHECK_EQ(dlock_semaphore_drain(s), INT_MAX);
  CHECK_RC(dlock_semaphore_add_permits(s, INT_MIN), 0);
  CHECK_RC(dlock_semaphore_add_permits(s, -1), DLOCK_ERANGE);
  CHECK_RC(dlock_semaphore_add_permits(s, INT_MAX), 0);
  CHECK_RC(dlock_semaphore_add_permits(s, 1), 0);
  CHECK_EQ(dlock_semaphore_get_available(s), 0);
  /* A count set past an int by another client: said so, and a drain
   * refused without taking anything; a change towards an int works. */
  redisReply *r = th_cmd(&th_srv, "SET sem:range 2147483648");
  if (r) freeReplyObject(r);
  CHECK_RC(dlock_semaphore_get_available(s), DLOCK_ERANGE);
  CHECK(strstr(dlock_client_errmsg(c), "2147483648") != NULL);
  CHECK_RC(dlock_semaphore_drain(s), DLOCK_ERANGE);
  CHECK(strstr(dlock_client_errmsg(c), "2147483648") != NULL);
  CHECK_RC(dlock_semaphore_add_permits(s, 1), DLOCK_ERANGE);
  r = th_cmd(&th_srv, "GET sem:range");
  CHECK(r && r->type == REDIS_REPLY_STRING &&
        strcmp(r->str, "2147483648") == 0);
  if (r) freeReplyObject(r);
  CHECK_RC(dlock_semaphore_try_acquire(s, 1, 0), 0);
  CHECK_EQ(dlock_semaphore_get_available(s), INT_MAX);
  dlock_semaphore_free(s);
  dlock_client_close(c);
}

static void t_semaphore_misuse(void) {
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_semaphore *s = NULL;
  CHECK_RC(dlock_semaphore_new(c, "", &s), DLOCK_EINVAL);
  CHECK_RC(dlock_semaphore_new(NULL, "x", &s), DLOCK_EINVAL);
  CHECK_RC(dlock_semaphore_new(c, "sem:misuse", &s), 0);
  CHECK_EQ(dlock_semaphore_try_set_permits(s, 2), 1);
  CHECK_RC(dlock_semaphore_try_acquire(s, 0, 0), DLOCK_EINVAL);
  CHECK_RC(dlock_semaphore_try_acquire(s, -1, 0), DLOCK_EINVAL);
  CHECK_RC(dlock_semaphore_release(s, 0), DLOCK_EINVAL);
  CHECK_RC(dlock_semaphore_try_set_permits(s, -1), DLOCK_EINVAL);
  CHECK_EQ(dlock_semaphore_get_available(s), 2); /* unchanged */
  /* A key of another type: an error, and the key untouched. */
  th_cmd_int(&th_srv, "HSET sem:hash a 1");
  dlock_semaphore *h;
  CHECK_RC(dlock_semaphore_new(c, "sem:hash", &h), 0);
  CHECK_RC(dlock_semaphore_try_acquire(h, 1, 0), DLOCK_EWRONGTYPE);
  CHECK_RC(dlock_semaphore_release(h, 1), DLOCK_EWRONGTYPE);
  CHECK_EQ(th_cmd_int(&th_srv, "HGET sem:hash a"), 1);
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
    if (dlock_semaphore_try_acquire(a->s, 1, 10000) != 0) {
      a->bad++;
      continue;
    }
    long long inside = th_cmd_int(&th_srv, "INCR sem:inside");
    if (inside > PERMITS) {
      a->bad++;
      th_cmd_int(&th_srv, "SET sem:violation 1");
    }
    th_sleep_ms(1);
    th_cmd_int(&th_srv, "DECR sem:inside");
    if (dlock_semaphore_release(a->s, 1) != 0) a->bad++;
  }
  return NULL;
}

static int admission_child(void) {
  dlock_client *c = th_client(&th_srv, 0);
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
  /* The workers first (no client open here yet to fork across); they wait
   * for the permits to be set. */
  pid_t kids[4];
  for (int i = 0; i < 4; i++) {
    kids[i] = fork();
    if (kids[i] == 0) _exit(admission_child());
  }
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_semaphore *s;
  CHECK_RC(dlock_semaphore_new(c, "sem:adm", &s), 0);
  CHECK_EQ(dlock_semaphore_try_set_permits(s, PERMITS), 1);
  for (int i = 0; i < 4; i++) {
    int st;
    CHECK(waitpid(kids[i], &st, 0) == kids[i]);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS sem:violation"), 0);
  CHECK_EQ(dlock_semaphore_get_available(s), PERMITS); /* all given back */
  dlock_semaphore_free(s);
  dlock_client_close(c);
}

/* ---- waking without polling ---- */
typedef struct waiter {
  dlock_semaphore *s;
  atomic_int rc; /* read while the thread runs */
  int64_t done_at;
} waiter;

static void *wait_permit(void *p) {
  waiter *w = p;
  w->rc = dlock_semaphore_try_acquire(w->s, 1, 10000);
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
  dlock_client *wc = th_client(&th_srv, 0), *rc = th_client(&th_srv, 0);
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
  CHECK(th_wait_subscribed(&th_srv, "redisson_sc:{sem:wake}", 2000));
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
  CHECK_EQ(dlock_semaphore_get_available(rs), 0);
  CHECK_RC(dlock_semaphore_release(rs, 1), 0);
  for (int i = 0; i < 3; i++) {
    pthread_join(t[i], NULL);
    CHECK_RC(w[i].rc, 0);
    CHECK(w[i].done_at - t0 < 500); /* woken, not timed out (10 s) */
  }
  CHECK_EQ(dlock_semaphore_get_available(rs), 0);
  dlock_semaphore_free(ws);
  dlock_semaphore_free(rs);
  dlock_client_close(wc);
  dlock_client_close(rc);
}

static void t_semaphore_contended_release_pings_first(void) {
  /* A handle whose last acquire had to wait, or whose last release was
   * heard, releases behind a PING, so that the waiters' message goes out
   * before the release's reply; otherwise no PING. */
  dlock_client *a = th_client(&th_srv, 0), *b = th_client(&th_srv, 0);
  CHECK(a && b);
  dlock_semaphore *sa, *sb;
  CHECK_RC(dlock_semaphore_new(a, "sem:pingfirst", &sa), 0);
  CHECK_RC(dlock_semaphore_new(b, "sem:pingfirst", &sb), 0);
  CHECK_EQ(dlock_semaphore_try_set_permits(sa, 1), 1);
  CHECK_RC(dlock_semaphore_try_acquire(sa, 1, 0), 0); /* at once */
  waiter w = {.s = sb, .rc = 99};
  pthread_t t;
  pthread_create(&t, NULL, wait_permit, &w);
  /* It subscribes after its first try failed. */
  CHECK(th_wait_subscribed(&th_srv, "redisson_sc:{sem:pingfirst}", 3000));
  freeReplyObject(th_cmd(&th_srv, "CONFIG RESETSTAT"));
  CHECK_RC(dlock_semaphore_release(sa, 1), 0);
  pthread_join(t, NULL);
  CHECK_RC(atomic_load(&w.rc), 0);
  CHECK_EQ(th_calls(&th_srv, "ping"), 0);
  freeReplyObject(th_cmd(&th_srv, "CONFIG RESETSTAT"));
  CHECK_RC(dlock_semaphore_release(sb, 1), 0); /* sb had waited */
  CHECK_EQ(th_calls(&th_srv, "ping"), 1);
  /* sa's last release was heard (b waited): its next one pings too. */
  CHECK_RC(dlock_semaphore_try_acquire(sa, 1, 0), 0);
  freeReplyObject(th_cmd(&th_srv, "CONFIG RESETSTAT"));
  CHECK_RC(dlock_semaphore_release(sa, 1), 0);
  CHECK_EQ(th_calls(&th_srv, "ping"), 1);
  /* Once nobody listens, one release goes unheard, and the next is sent
   * without a PING. */
  CHECK(th_wait_unsubscribed(&th_srv, "redisson_sc:{sem:pingfirst}", 5000));
  CHECK_RC(dlock_semaphore_try_acquire(sa, 1, 0), 0);
  CHECK_RC(dlock_semaphore_release(sa, 1), 0);
  CHECK_RC(dlock_semaphore_try_acquire(sa, 1, 0), 0);
  freeReplyObject(th_cmd(&th_srv, "CONFIG RESETSTAT"));
  CHECK_RC(dlock_semaphore_release(sa, 1), 0);
  CHECK_EQ(th_calls(&th_srv, "ping"), 0);
  CHECK_EQ(dlock_semaphore_get_available(sa), 1);
  dlock_semaphore_free(sa);
  dlock_semaphore_free(sb);
  dlock_client_close(a);
  dlock_client_close(b);
}

static void t_semaphore_interop(void) {
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_semaphore *s;
  CHECK_RC(dlock_semaphore_new(c, "sem:java", &s), 0);
  CHECK_EQ(dlock_semaphore_try_set_permits(s, 1), 1);
  /* Redisson takes the one permit; we cannot. */
  CHECK_EQ(th_cmd_int(&th_srv, "EVAL %s 1 sem:java 1", REDISSON_SEM_ACQUIRE),
           1);
  CHECK_RC(dlock_semaphore_try_acquire(s, 1, 0), DLOCK_EBUSY);
  /* Redisson's release wakes our waiter through redisson_sc:{sem:java}. */
  waiter w = {.s = s, .rc = 99};
  pthread_t t;
  pthread_create(&t, NULL, wait_permit, &w);
  CHECK(th_wait_subscribed(&th_srv, "redisson_sc:{sem:java}", 2000));
  int64_t t0 = th_now_ms();
  redisReply *r = th_cmd(&th_srv, "EVAL %s 2 sem:java redisson_sc:{sem:java} 1",
                         REDISSON_SEM_RELEASE);
  if (r) freeReplyObject(r);
  pthread_join(t, NULL);
  CHECK_RC(w.rc, 0);
  CHECK(w.done_at - t0 < 500);
  /* And our release is Redisson's: the permit is there for its acquire. */
  CHECK_EQ(th_cmd_int(&th_srv, "EVAL %s 1 sem:java 1", REDISSON_SEM_ACQUIRE),
           0);
  CHECK_RC(dlock_semaphore_release(s, 1), 0);
  CHECK_EQ(th_cmd_int(&th_srv, "EVAL %s 1 sem:java 1", REDISSON_SEM_ACQUIRE),
           1);
  dlock_semaphore_free(s);
  dlock_client_close(c);
}

typedef struct take_arg {
  dlock_semaphore *s;
  int rc;
} take_arg;

static void *take_one(void *p) {
  take_arg *g = p;
  g->rc = dlock_semaphore_try_acquire(g->s, 1, 10000);
  return NULL;
}

static bool tried_twice(void *arg) {
  (void)arg;
  return th_calls(&th_srv, "evalsha") + th_calls(&th_srv, "eval") >= 2;
}

static void t_semaphore_unheard_waiter_polls(void) {
  /* A waiter whose subscription the server has not confirmed (its
   * subscriber connection still coming up; here its ACL refuses it
   * SUBSCRIBE) hears no release: it polls until it would, and takes the
   * permit soon after the release. Before, it slept until its wait ran
   * out (10 s). */
  th_cmd_int(&th_srv,
             "ACL SETUSER deaf on >pw ~* allchannels +@all -subscribe");
  dlock_client *a = th_client(&th_srv, 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = th_srv.url;
  o.username = "deaf";
  o.password = "pw";
  o.command_timeout_ms = 300; /* how long it waits for a confirmation */
  dlock_client *c = th_client_opts(&o);
  CHECK(a && c);
  dlock_semaphore *sa, *sc;
  CHECK_RC(dlock_semaphore_new(a, "s:deaf", &sa), 0);
  CHECK_RC(dlock_semaphore_new(c, "s:deaf", &sc), 0);
  CHECK_EQ(dlock_semaphore_try_set_permits(sa, 1), 1);
  CHECK_RC(dlock_semaphore_try_acquire(sa, 1, 0), 0);
  freeReplyObject(th_cmd(&th_srv, "CONFIG RESETSTAT"));
  take_arg g = {sc, -100};
  pthread_t th;
  pthread_create(&th, NULL, take_one, &g);
  CHECK(th_wait_for(tried_twice, NULL, 3000)); /* it waits, unheard */
  int64_t t0 = th_now_ms();
  CHECK(dlock_semaphore_release(sa, 1) >= 0);
  pthread_join(th, NULL);
  int64_t took = th_now_ms() - t0;
  fprintf(stderr, "    taken %lld ms after the release\n", (long long)took);
  CHECK_RC(g.rc, 0);
  CHECK(took < th_soon(1000));
  dlock_semaphore_free(sa);
  dlock_semaphore_free(sc);
  dlock_client_close(a);
  dlock_client_close(c);
}

TH_MAIN(T(t_semaphore_unheard_waiter_polls), T(t_semaphore_basics),
        T(t_semaphore_misuse), T(t_semaphore_int_range),
        T(t_semaphore_admission), T(t_semaphore_release_wakes),
        T(t_semaphore_contended_release_pings_first), T(t_semaphore_interop))
