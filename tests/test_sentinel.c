/* test_sentinel.c: redis-sentinel:// URLs: discovery through the
 * sentinels, their errors, and following a failover (a master, its replica
 * and three sentinels started by the harness for each test). */
#include "harness.h"

#include "dlock_async.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static th_sentinel_set S;

static dlock_client *open_url(const char *url, int64_t watchdog_ms) {
  return th_client_url(url, watchdog_ms);
}

static long long exists_on(th_redis *r, const char *key) {
  return th_cmd_int(r, "EXISTS %s", key);
}

/* The URL's forms, and what it refuses (no server). */
static void url_forms(void) {
  static const char *bad[] = {
      "redis-sentinel://127.0.0.1:1",                       /* no master name */
      "redis-sentinel://127.0.0.1:1/",                      /* empty name */
      "redis-sentinel://127.0.0.1:1,/m",                    /* empty sentinel */
      "redis-sentinel://127.0.0.1:x/m",                     /* bad port */
      "redis-sentinel://127.0.0.1:1/m?sentinel_password=x", /* printed */
  };
  CHECK(th_urls_refused(bad, sizeof bad / sizeof bad[0]));
  /* No sentinel listens: a clear error naming each one asked. */
  int p1 = th_free_port(), p2 = th_free_port();
  char url[200];
  snprintf(url, sizeof url, "redis-sentinel://127.0.0.1:%d,127.0.0.1:%d/m", p1,
           p2);
  CHECK_RC(th_open_rc(url, 500), DLOCK_ECONNECT);
  const char *m = dlock_client_open_errmsg();
  CHECK(strstr(m, "no sentinel answered") != NULL);
  char p1s[32];
  snprintf(p1s, sizeof p1s, "127.0.0.1:%d", p1);
  CHECK(strstr(m, p1s) != NULL);
}

/* The client finds the master through the sentinels (the first listed
 * one down), locks there, and the lock reaches the replica. */
static void discovery(void) {
  CHECK(th_sentinel_start(&S, NULL) == 0);
  char url[700];
  /* A dead sentinel first: the next one is asked. */
  snprintf(url, sizeof url, "redis-sentinel://127.0.0.1:%d,%s", th_free_port(),
           S.url + strlen("redis-sentinel://"));
  dlock_client *c = open_url(url, 0);
  CHECK(c != NULL);
  dlock_lock *l = NULL;
  CHECK_RC(dlock_lock_new(c, "sent-disc", NULL, &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 10000, NULL), 0);
  CHECK_EQ(exists_on(&S.master, "sent-disc"), 1);
  CHECK(th_sentinel_synced(&S, 5000));
  CHECK_EQ(exists_on(&S.replica, "sent-disc"), 1);
  CHECK_RC(dlock_client_ping(c), 0);
  CHECK_RC(dlock_lock_release(l), 1);
  CHECK_EQ(exists_on(&S.master, "sent-disc"), 0);
  dlock_lock_free(l);
  dlock_client_close(c);
  /* Closing does not wait for the sentinel watch: it read in 200 ms
   * slices to see its stop, so every CLI command on Sentinel took ~200
   * ms more than on one server. The median of five closes. */
  int64_t took[5];
  for (int i = 0; i < 5; i++) {
    c = open_url(S.url, 0);
    CHECK(c != NULL);
    CHECK_RC(dlock_client_ping(c), 0);
    int64_t t0 = th_now_ms();
    dlock_client_close(c);
    int64_t t = th_now_ms() - t0;
    int k = i;
    for (; k > 0 && took[k - 1] > t; k--)
      took[k] = took[k - 1];
    took[k] = t;
  }
  printf("    close: %lld ms (median of 5)\n", (long long)took[2]);
  CHECK(took[2] < 100);
  th_sentinel_stop(&S);
}

/* A name no sentinel monitors, and every sentinel down: clear errors. */
static void wrong_name_and_down(void) {
  CHECK(th_sentinel_start(&S, NULL) == 0);
  char url[700];
  snprintf(url, sizeof url, "%.*s/nosuch", (int)(strrchr(S.url, '/') - S.url),
           S.url);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL;
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_ECONNECT);
  CHECK(strstr(dlock_client_open_errmsg(), "knows no master named 'nosuch'") !=
        NULL);
  for (int i = 0; i < 3; i++)
    th_redis_stop(&S.sentinels[i]);
  o.url = S.url;
  o.connect_timeout_ms = 500;
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_ECONNECT);
  CHECK(strstr(dlock_client_open_errmsg(), "no sentinel answered") != NULL);
  th_sentinel_stop(&S);
}

/* The sentinels' password: from the option, else DLOCK_SENTINEL_PASSWORD;
 * a wrong one is refused with DLOCK_EAUTH's detail. */
static void sentinel_password(void) {
  CHECK(th_sentinel_start(&S, NULL) == 0);
  for (int i = 0; i < 3; i++) {
    redisReply *r =
        th_cmd(&S.sentinels[i], "ACL SETUSER default resetpass >s3cret");
    CHECK(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
  }
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = S.url;
  dlock_client *c = NULL;
  /* Refused, and said so in full: each sentinel named, the server's
   * reason, where a password goes (it read "cannot connect", cut short). */
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_EAUTH);
  const char *m = dlock_client_open_errmsg();
  CHECK(strstr(m, "NOAUTH") != NULL);
  CHECK(strstr(m, "DLOCK_SENTINEL_PASSWORD") != NULL);
  char last[32];
  snprintf(last, sizeof last, "127.0.0.1:%d", S.sentinels[2].port);
  CHECK(strstr(m, last) != NULL);
  o.sentinel_password = "wrong";
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_EAUTH);
  CHECK(strstr(dlock_client_open_errmsg(), "WRONGPASS") != NULL);
  o.sentinel_password = "s3cret";
  c = th_client_opts(&o);
  CHECK(c != NULL);
  CHECK_RC(dlock_client_ping(c), 0);
  dlock_client_close(c);
  o.sentinel_password = NULL;
  setenv("DLOCK_SENTINEL_PASSWORD", "s3cret", 1);
  c = th_client_opts(&o);
  unsetenv("DLOCK_SENTINEL_PASSWORD");
  CHECK(c != NULL);
  dlock_client_close(c);
  th_sentinel_stop(&S);
}

static atomic_int lost_calls;
static void on_lost(dlock_lock *l, const char *owner, void *ud) {
  (void)l, (void)owner, (void)ud;
  atomic_fetch_add(&lost_calls, 1);
}

typedef struct renewed_arg {
  dlock_client *c;
  uint64_t after;
} renewed_arg;
static bool renewed(void *arg) {
  renewed_arg *a = arg;
  dlock_client_stats st;
  dlock_client_stats_get(a->c, &st);
  return st.renewals > a->after;
}

static bool is_lost(void *arg) {
  (void)arg;
  return atomic_load(&lost_calls) > 0;
}

/* A lock held with the watchdog through a failover that the replica saw
 * the lock before: the watchdog renews it on the new master, no loss. */
static void failover_held(void) {
  CHECK(th_sentinel_start(&S, NULL) == 0);
  dlock_client *c = open_url(S.url, 3000);
  CHECK(c != NULL);
  dlock_lock *l = NULL;
  CHECK_RC(dlock_lock_new(c, "sent-held", NULL, &l), 0);
  dlock_lock_on_lost(l, on_lost, NULL);
  CHECK_RC(dlock_lock_try_acquire(l, 0, -1, NULL), 0);
  CHECK(th_sentinel_synced(&S, 5000));
  CHECK(th_sentinel_failover(&S, 10000) == 0);
  /* Two renewals after the switch: the second surely on the new master. */
  dlock_client_stats st;
  dlock_client_stats_get(c, &st);
  renewed_arg a = {c, st.renewals + 1};
  int64_t t0 = th_now_ms();
  /* (1 to 2 s here; a fresh-clone run beside test_safety saw fewer than
   * two in 5 s, with no detail: the bound is 10 s, and the counts are
   * printed.) */
  bool twice = th_wait_for(renewed, &a, 10000);
  dlock_client_stats now;
  dlock_client_stats_get(c, &now);
  fprintf(stderr,
          "    after the switch: %llu renewals in %lld ms (%llu calls), "
          "%llu lost, %d lost calls\n",
          (unsigned long long)(now.renewals - st.renewals),
          (long long)(th_now_ms() - t0),
          (unsigned long long)(now.renewal_calls - st.renewal_calls),
          (unsigned long long)(now.lost - st.lost), atomic_load(&lost_calls));
  CHECK(twice);
  CHECK_EQ(atomic_load(&lost_calls), 0);
  CHECK_EQ(dlock_lock_is_held(l), 1);
  long long pttl = th_cmd_int(&S.replica, "PTTL sent-held");
  CHECK(pttl > 1000);
  CHECK_RC(dlock_lock_release(l), 1);
  CHECK_EQ(exists_on(&S.replica, "sent-held"), 0);
  dlock_lock_free(l);
  dlock_client_close(c);
  th_sentinel_stop(&S);
}

/* Detaches the replica (it stays a server Sentinel will promote): writes
 * from now on are the ones an asynchronous replica missed. */
static bool detach_replica(void) {
  redisReply *r = th_cmd(&S.replica, "REPLICAOF NO ONE");
  bool ok = r && r->type == REDIS_REPLY_STATUS;
  if (r) freeReplyObject(r);
  return ok;
}

/* The reference documents' failure: a lock written to a master whose
 * replica misses it (asynchronous replication), then a failover: the hold
 * is reported lost at the first renewal on the new master, never
 * re-acquired, and another client can take the lock there. */
static void failover_lost(void) {
  CHECK(th_sentinel_start(&S, NULL) == 0);
  dlock_client *c = open_url(S.url, 3000);
  CHECK(c != NULL);
  dlock_lock *l = NULL;
  CHECK_RC(dlock_lock_new(c, "sent-lost", NULL, &l), 0);
  dlock_lock_on_lost(l, on_lost, NULL);
  CHECK(detach_replica());
  CHECK_RC(dlock_lock_try_acquire(l, 0, -1, NULL), 0);
  CHECK_EQ(exists_on(&S.master, "sent-lost"), 1);
  CHECK_EQ(exists_on(&S.replica, "sent-lost"), 0);
  CHECK(th_sentinel_failover(&S, 10000) == 0);
  int64_t t0 = th_now_ms();
  CHECK(th_wait_for(is_lost, NULL, 5000));
  /* At the first renewal on the new master (every 1 s here). */
  CHECK(th_now_ms() - t0 < 2500);
  CHECK_EQ(dlock_lock_is_lost(l), 1);
  CHECK_EQ(exists_on(&S.replica, "sent-lost"), 0);
  /* A second client takes it on the new master. */
  dlock_client *c2 = open_url(S.url, 0);
  CHECK(c2 != NULL);
  dlock_lock *l2 = NULL;
  CHECK_RC(dlock_lock_new(c2, "sent-lost", NULL, &l2), 0);
  CHECK_RC(dlock_lock_try_acquire(l2, 0, 10000, NULL), 0);
  CHECK_RC(dlock_lock_release(l), DLOCK_ELOST);
  CHECK_RC(dlock_lock_release(l2), 1);
  dlock_lock_free(l2);
  dlock_client_close(c2);
  dlock_lock_free(l);
  dlock_client_close(c);
  th_sentinel_stop(&S);
}

/* A renewal of `key` reached the new master (the former replica) after
 * t0, when its PTTL was p0: a PTTL only goes down by itself, at the
 * clock's pace, so without a renewal PTTL + (now - t0) stays p0; a renewal
 * at least 300 ms after t0 lifts it past p0 + 300. (PTTL > p0 alone misses
 * a renewal that a p0 read just after the one before leaves a window of a
 * few ms to see: CI polled past it under load.) */
typedef struct renewal {
  const char *key;
  int64_t t0;
  long long p0;
} renewal;

static renewal renewal_from_now(const char *key) {
  renewal r = {key, th_now_ms(), 0};
  r.p0 = th_cmd_int(&S.replica, "PTTL %s", key);
  return r;
}

static bool renewed_on_replica(void *arg) {
  renewal *r = arg;
  long long p = th_cmd_int(&S.replica, "PTTL %s", r->key);
  return p > 0 && p + (th_now_ms() - r->t0) > r->p0 + 300;
}

/* The positive control: the same with replica acknowledgement. The
 * acquire the replica cannot acknowledge fails with DLOCK_ENOTACKED and
 * is given back, so after the failover nobody believes it holds the lock;
 * an acknowledged one survives the failover. */
static void failover_acked(void) {
  CHECK(th_sentinel_start(&S, NULL) == 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = S.url;
  /* A lease long enough for the replica's copy to outlast the failover:
   * detached, it hears of no renewal until it is the master. */
  o.watchdog_timeout_ms = 9000;
  o.min_replicas_acked = 1;
  o.replicas_timeout_ms = 1000;
  dlock_client *c = th_client_opts(&o);
  CHECK(c != NULL);
  dlock_lock *l = NULL, *k = NULL;
  CHECK_RC(dlock_lock_new(c, "sent-acked", NULL, &l), 0);
  CHECK_RC(dlock_lock_new(c, "sent-kept", NULL, &k), 0);
  dlock_lock_on_lost(l, on_lost, NULL);
  dlock_lock_on_lost(k, on_lost, NULL);
  /* Acknowledged: on the replica the moment the acquire returns. */
  CHECK_RC(dlock_lock_try_acquire(k, 0, -1, NULL), 0);
  CHECK_EQ(exists_on(&S.replica, "sent-kept"), 1);
  CHECK(detach_replica());
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_try_acquire(l, 0, -1, NULL), DLOCK_ENOTACKED);
  CHECK(th_now_ms() - t0 >= 900);
  CHECK(strstr(dlock_client_errmsg(c), "0 of 1 replicas") != NULL);
  CHECK_EQ(exists_on(&S.master, "sent-acked"), 0);
  CHECK_EQ(dlock_lock_is_held(l), 0);
  CHECK(th_sentinel_failover(&S, 10000) == 0);
  /* Renewals go on (each WAIT short: nothing replicates from the new
   * master yet), and the acknowledged hold is there. */
  renewal r = renewal_from_now("sent-kept");
  CHECK(r.p0 > 0);
  CHECK(th_wait_for(renewed_on_replica, &r, 8000));
  CHECK_EQ(atomic_load(&lost_calls), 0);
  CHECK_EQ(dlock_lock_is_held(k), 1);
  CHECK_RC(dlock_lock_release(k), 1);
  dlock_lock_free(l);
  dlock_lock_free(k);
  dlock_client_close(c);
  th_sentinel_stop(&S);
}

/* Renewals the replica no longer acknowledges (its link cut after the
 * acquire): the master renews the lease, but the hold's validity is not
 * extended, so the holder is told of the loss when it ends (a failover
 * then could promote a copy that runs out there). The control: the
 * master's copy was renewed all along. */
static void renew_unacked(void) {
  CHECK(th_sentinel_start(&S, NULL) == 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = S.url;
  o.watchdog_timeout_ms = 1500;
  o.min_replicas_acked = 1;
  o.replicas_timeout_ms = 1000; /* the acquire is acknowledged under load */
  dlock_client *c = th_client_opts(&o);
  CHECK(c != NULL);
  dlock_lock *l = NULL;
  CHECK_RC(dlock_lock_new(c, "sent-unacked", NULL, &l), 0);
  atomic_store(&lost_calls, 0);
  dlock_lock_on_lost(l, on_lost, NULL);
  CHECK_RC(dlock_lock_try_acquire(l, 0, -1, NULL), 0);
  int64_t t0 = th_now_ms();
  CHECK(detach_replica());
  CHECK(th_wait_for(is_lost, NULL, 5000));
  int64_t took = th_now_ms() - t0;
  fprintf(stderr, "    lost %lld ms after the link was cut\n", (long long)took);
  CHECK(took <= 1500 + 1000); /* its validity, not a later round */
  CHECK_EQ(dlock_lock_is_lost(l), 1);
  /* Renewed on the master meanwhile: more than a lease's half left. */
  CHECK_EQ(exists_on(&S.master, "sent-unacked"), 1);
  CHECK(th_cmd_int(&S.master, "PTTL sent-unacked") > 0);
  CHECK(th_calls(&S.master, "pexpire") + th_calls(&S.master, "evalsha") >= 1);
  dlock_lock_free(l);
  dlock_client_close(c);
  th_sentinel_stop(&S);
}

/* An event-loop operation's outcome. */
typedef struct loop_got {
  int calls, rc;
  char msg[256];
} loop_got;

static void on_loop_done(int rc, uint64_t token, const char *errmsg, void *ud) {
  (void)token;
  loop_got *g = ud;
  g->calls++;
  g->rc = rc;
  snprintf(g->msg, sizeof g->msg, "%s", errmsg);
}

/* WAIT on one server without replicas: the acquire is given back and
 * reported DLOCK_ENOTACKED; with 0 replicas asked nothing changes. */
static void wait_shortfall(void) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = th_srv.url;
  o.min_replicas_acked = 1;
  o.replicas_timeout_ms = 100;
  dlock_client *c = th_client_opts(&o);
  CHECK(c != NULL);
  dlock_lock *l = NULL;
  CHECK_RC(dlock_lock_new(c, "wait-short", NULL, &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 10000, NULL), DLOCK_ENOTACKED);
  CHECK_EQ(exists_on(&th_srv, "wait-short"), 0);
  CHECK(th_calls(&th_srv, "wait") >= 1);
  dlock_lock_free(l);
  dlock_client_close(c);
  o.min_replicas_acked = 0;
  c = th_client_opts(&o);
  CHECK(c != NULL);
  CHECK_RC(dlock_lock_new(c, "wait-short", NULL, &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 10000, NULL), 0);
  CHECK_RC(dlock_lock_release(l), 1);
  dlock_lock_free(l);
  dlock_client_close(c);
  /* The same on an event-loop client: given back, ENOTACKED. */
  o.min_replicas_acked = 1;
  dlock_loop *lp = NULL;
  CHECK_RC(dlock_loop_new(NULL, &lp), 0);
  CHECK_RC(dlock_client_open_async(&o, lp, &c), 0);
  CHECK_RC(dlock_lock_new(c, "wait-short-loop", "me", &l), 0);
  loop_got g = {0};
  CHECK_RC(dlock_lock_acquire_async(l, 0, 10000, on_loop_done, &g, NULL), 0);
  for (int i = 0; i < 500 && !g.calls; i++)
    dlock_loop_run(lp, 10);
  CHECK_EQ(g.calls, 1);
  CHECK_RC(g.rc, DLOCK_ENOTACKED);
  CHECK(strstr(g.msg, "0 of 1 replicas") != NULL);
  CHECK_EQ(exists_on(&th_srv, "wait-short-loop"), 0);
  dlock_lock_free(l);
  dlock_client_close(c);
  dlock_loop_free(lp);
}

/* A WAIT does not hold up the client's other requests: it has a
 * connection of its own. Before, sent on the command connection, it made a
 * ping or an is_held wait out the stalled replicas' timeout. */
typedef struct wait_arg {
  dlock_lock *l;
  int rc;
} wait_arg;
static void *acquire_unacked(void *p) {
  wait_arg *a = p;
  a->rc = dlock_lock_try_acquire(a->l, 0, 10000, NULL);
  return NULL;
}
static bool wait_blocked(void *p) {
  (void)p;
  redisReply *r = th_cmd(&th_srv, "CLIENT LIST");
  bool in = r && r->str && strstr(r->str, "cmd=wait ") != NULL;
  if (r) freeReplyObject(r);
  return in;
}
static void wait_apart(void) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = th_srv.url;
  o.min_replicas_acked = 1; /* no replica: each WAIT runs to its timeout */
  o.replicas_timeout_ms = 2000;
  dlock_client *c = th_client_opts(&o);
  CHECK(c != NULL);
  dlock_lock *l = NULL, *other = NULL;
  CHECK_RC(dlock_lock_new(c, "wait-apart", NULL, &l), 0);
  CHECK_RC(dlock_lock_new(c, "wait-apart-other", NULL, &other), 0);
  CHECK_RC(dlock_client_ping(c), 0);
  wait_arg a = {.l = l};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, acquire_unacked, &a) == 0);
  CHECK(th_wait_for(wait_blocked, NULL, 5000));
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_client_ping(c), 0);
  CHECK_EQ(dlock_lock_is_held(other), 0);
  int64_t took = th_now_ms() - t0;
  bool still = wait_blocked(NULL);
  pthread_join(t, NULL);
  printf("    ping and is_held during a WAIT: %lld ms\n", (long long)took);
  CHECK(still); /* they did not wait for it */
  CHECK(took < 1000);
  CHECK_RC(a.rc, DLOCK_ENOTACKED);
  dlock_lock_free(l);
  dlock_lock_free(other);
  dlock_client_close(c);
}

/* The same on an event-loop client: its WAITs go on connections of their
 * own too. Before, on the loop's one connection, another lock's acquire
 * (its script and so its own WAIT) and a ping waited behind the first
 * WAIT for its whole timeout. */
static void loop_wait_apart(void) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = th_srv.url;
  o.min_replicas_acked = 1; /* no replica: each WAIT runs to its timeout */
  o.replicas_timeout_ms = 2000;
  dlock_loop *lp = NULL;
  CHECK_RC(dlock_loop_new(NULL, &lp), 0);
  dlock_client *c = NULL;
  CHECK_RC(dlock_client_open_async(&o, lp, &c), 0);
  dlock_lock *a = NULL, *b = NULL;
  CHECK_RC(dlock_lock_new(c, "lwait-a", "me", &a), 0);
  CHECK_RC(dlock_lock_new(c, "lwait-b", "me", &b), 0);
  loop_got ga = {0}, gb = {0}, gp = {0};
  CHECK_RC(dlock_lock_acquire_async(a, 0, 10000, on_loop_done, &ga, NULL), 0);
  int64_t end = th_now_ms() + 5000;
  while (!wait_blocked(NULL) && th_now_ms() < end)
    dlock_loop_run(lp, 10);
  CHECK(wait_blocked(NULL));
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_acquire_async(b, 0, 10000, on_loop_done, &gb, NULL), 0);
  CHECK_RC(dlock_client_ping_async(c, on_loop_done, &gp, NULL), 0);
  /* b's script runs and the ping comes back while a's WAIT still runs. */
  while ((!gp.calls || exists_on(&th_srv, "lwait-b") == 0) &&
         th_now_ms() - t0 < 1500)
    dlock_loop_run(lp, 10);
  int64_t took = th_now_ms() - t0;
  bool still = ga.calls == 0; /* a's WAIT is not over */
  while ((!ga.calls || !gb.calls) && th_now_ms() - t0 < 8000)
    dlock_loop_run(lp, 10);
  int64_t b_took = th_now_ms() - t0;
  printf("    during a WAIT: ping and another lock's script %lld ms, its "
         "acquire (with its own 2 s WAIT) %lld ms\n",
         (long long)took, (long long)b_took);
  CHECK(still);
  CHECK(took < 1000);
  CHECK_RC(gp.rc, 0);
  CHECK_RC(ga.rc, DLOCK_ENOTACKED);
  CHECK_RC(gb.rc, DLOCK_ENOTACKED);
  CHECK(b_took < 3000); /* its own WAIT, not a's before it */
  CHECK_EQ(exists_on(&th_srv, "lwait-a"), 0);
  CHECK_EQ(exists_on(&th_srv, "lwait-b"), 0);
  /* The close during a WAIT ends it (its callback runs within). */
  loop_got gc = {0};
  CHECK_RC(dlock_lock_acquire_async(a, 0, 10000, on_loop_done, &gc, NULL), 0);
  end = th_now_ms() + 5000;
  while (!wait_blocked(NULL) && th_now_ms() < end)
    dlock_loop_run(lp, 10);
  CHECK(wait_blocked(NULL));
  dlock_lock_free(a);
  dlock_lock_free(b);
  dlock_client_close(c);
  CHECK_EQ(gc.calls, 1);
  CHECK_RC(gc.rc, DLOCK_ECLOSED);
  dlock_loop_free(lp);
}

/* --replicas auto (DLOCK_REPLICAS_AUTO): WAIT for as many replicas as the
 * master has now, on blocking and event-loop clients. With its replica, an
 * acquire is on the replica when it returns, and a stalled replica (still
 * the master's) makes it fall short; once the master has none (as after a
 * failover to a master without replicas), acquires and renewals go on
 * unacknowledged, where a fixed count of 1 gives every acquire back. */
static bool no_replicas(void *p) {
  (void)p;
  redisReply *r = th_cmd(&S.master, "ROLE");
  bool none = r && r->type == REDIS_REPLY_ARRAY && r->elements >= 3 &&
              r->element[2]->type == REDIS_REPLY_ARRAY &&
              r->element[2]->elements == 0;
  if (r) freeReplyObject(r);
  return none;
}
static int loop_acquire(dlock_loop *lp, dlock_lock *l, loop_got *g) {
  memset(g, 0, sizeof *g);
  int rc = dlock_lock_acquire_async(l, 0, 10000, on_loop_done, g, NULL);
  if (rc != 0) return rc;
  for (int i = 0; i < 500 && !g->calls; i++)
    dlock_loop_run(lp, 10);
  return g->calls ? g->rc : DLOCK_ETIMEDOUT;
}
static int loop_release(dlock_loop *lp, dlock_lock *l) {
  loop_got g = {0};
  int rc = dlock_lock_release_async(l, on_loop_done, &g, NULL);
  if (rc != 0) return rc;
  for (int i = 0; i < 500 && !g.calls; i++)
    dlock_loop_run(lp, 10);
  return g.calls ? g.rc : DLOCK_ETIMEDOUT;
}
static void replicas_auto(void) {
  CHECK(th_sentinel_start(&S, NULL) == 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = S.url;
  o.min_replicas_acked = DLOCK_REPLICAS_AUTO;
  o.replicas_timeout_ms = 1000;
  CHECK(th_sentinel_synced(&S, 5000));
  dlock_client *c = th_client_opts(&o);
  CHECK(c != NULL);
  dlock_loop *lp = NULL;
  CHECK_RC(dlock_loop_new(NULL, &lp), 0);
  dlock_client *lc = NULL; /* refused (ENOTSUP) before */
  CHECK_RC(dlock_client_open_async(&o, lp, &lc), 0);
  o.min_replicas_acked = 1;
  dlock_client *fixed = th_client_opts(&o);
  CHECK(fixed != NULL);
  dlock_lock *l = NULL, *f = NULL, *ll = NULL;
  CHECK_RC(dlock_lock_new(c, "repl-auto", NULL, &l), 0);
  CHECK_RC(dlock_lock_new(fixed, "repl-fixed", NULL, &f), 0);
  CHECK_RC(dlock_lock_new(lc, "repl-auto-loop", "me", &ll), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 10000, NULL), 0);
  CHECK_EQ(exists_on(&S.replica, "repl-auto"), 1); /* acknowledged */
  CHECK_RC(dlock_lock_release(l), 1);
  loop_got g;
  CHECK_RC(loop_acquire(lp, ll, &g), 0);
  CHECK_EQ(exists_on(&S.replica, "repl-auto-loop"), 1);
  CHECK_RC(loop_release(lp, ll), 1);
  /* The replica stalled, still the master's: short of the one it has. */
  CHECK_EQ(kill(S.replica.pid, SIGSTOP), 0);
  CHECK_RC(loop_acquire(lp, ll, &g), DLOCK_ENOTACKED);
  printf("    loop, replica stalled: %s\n", g.msg);
  CHECK(strstr(g.msg, "acquire: 0 of the 1 replicas the master has") != NULL);
  CHECK(strstr(g.msg, "within 1000 ms") != NULL);
  CHECK_EQ(exists_on(&S.master, "repl-auto-loop"), 0); /* given back */
  CHECK_EQ(kill(S.replica.pid, SIGCONT), 0);
  CHECK(detach_replica());
  CHECK(th_wait_for(no_replicas, NULL, 5000));
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_try_acquire(l, 0, 10000, NULL), 0);
  CHECK(th_now_ms() - t0 < 250); /* no WAIT: nothing to wait for */
  t0 = th_now_ms();
  CHECK_RC(loop_acquire(lp, ll, &g), 0);
  CHECK(th_now_ms() - t0 < 250);
  CHECK_RC(dlock_lock_try_acquire(f, 0, 10000, NULL), DLOCK_ENOTACKED);
  CHECK(strstr(dlock_client_errmsg(fixed), "0 of 1 replicas") != NULL);
  CHECK_RC(dlock_lock_release(l), 1);
  CHECK_RC(loop_release(lp, ll), 1);
  dlock_lock_free(l);
  dlock_lock_free(f);
  dlock_lock_free(ll);
  dlock_client_close(c);
  dlock_client_close(lc);
  dlock_client_close(fixed);
  dlock_loop_free(lp);
  th_sentinel_stop(&S);
}

/* Replica acknowledgement on an event-loop client (Sentinel): an
 * acknowledged acquire is on the replica when its callback runs; with the
 * replica's link cut, an acquire is given back (ENOTACKED), and the held
 * lock's renewals, unacknowledged, let it go lost within its lease. */
static void loop_acked(void) {
  CHECK(th_sentinel_start(&S, NULL) == 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = S.url;
  o.watchdog_timeout_ms = 1500;
  o.min_replicas_acked = 1;
  o.replicas_timeout_ms = 1000;
  dlock_loop *lp = NULL;
  CHECK_RC(dlock_loop_new(NULL, &lp), 0);
  dlock_client *c = NULL;
  CHECK_RC(dlock_client_open_async(&o, lp, &c), 0);
  dlock_lock *k, *l;
  CHECK_RC(dlock_lock_new(c, "loop-kept", "me", &k), 0);
  CHECK_RC(dlock_lock_new(c, "loop-short", "me", &l), 0);
  atomic_store(&lost_calls, 0);
  dlock_lock_on_lost(k, on_lost, NULL);
  loop_got g = {0};
  CHECK_RC(dlock_lock_acquire_async(k, 0, -1, on_loop_done, &g, NULL), 0);
  for (int i = 0; i < 500 && !g.calls; i++)
    dlock_loop_run(lp, 10);
  CHECK_RC(g.rc, 0);
  CHECK_EQ(exists_on(&S.replica, "loop-kept"), 1);
  CHECK(detach_replica());
  /* The control: renewals go on from now on (sent, run, unacknowledged). */
  dlock_client_stats st0, st1;
  CHECK_RC(dlock_client_stats_get(c, &st0), 0);
  loop_got s = {0};
  CHECK_RC(dlock_lock_acquire_async(l, 0, -1, on_loop_done, &s, NULL), 0);
  for (int i = 0; i < 500 && !s.calls; i++)
    dlock_loop_run(lp, 10);
  CHECK_RC(s.rc, DLOCK_ENOTACKED);
  CHECK_EQ(exists_on(&S.master, "loop-short"), 0);
  int64_t end = th_now_ms() + 5000;
  while (atomic_load(&lost_calls) == 0 && th_now_ms() < end)
    dlock_loop_run(lp, 10);
  CHECK_EQ(atomic_load(&lost_calls), 1);
  CHECK_RC(dlock_client_stats_get(c, &st1), 0);
  CHECK(st1.renewal_calls > st0.renewal_calls);
  dlock_lock_free(k);
  dlock_lock_free(l);
  dlock_client_close(c);
  dlock_loop_free(lp);
  th_sentinel_stop(&S);
}

/* Runs `dlock -u <the set's URL> <args>` (sh -c), returns its exit status;
 * its stdout into out (len bytes) when out is not NULL. */
#define dlock_cli(out, len, ...)                                               \
  th_cli(DLOCK_CLI_PATH, S.url, out, len, __VA_ARGS__)

/* Every command of the CLI on redis-sentinel://, and --replicas. */
static void cli_commands(void) {
  CHECK(th_sentinel_start(&S, NULL) == 0);
  char out[4096];
  CHECK_EQ(dlock_cli(NULL, 0, "run -q cli-a -- true"), 0);
  /* With --replicas 1 the replica has the lock while the command runs. */
  CHECK_EQ(dlock_cli(out, sizeof out,
                     "run -q --replicas 1 cli-a -- "
                     "redis-cli -s %s exists cli-a",
                     S.replica.sock),
           0);
  CHECK(strncmp(out, "1", 1) == 0);
  dlock_client *c = open_url(S.url, 0);
  CHECK(c != NULL);
  dlock_lock *l = NULL;
  CHECK_RC(dlock_lock_new(c, "cli-held", NULL, &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 30000, NULL), 0);
  CHECK_EQ(dlock_cli(NULL, 0, "status cli-held"), 0);
  CHECK_EQ(dlock_cli(out, sizeof out, "list"), 0);
  CHECK(strstr(out, "cli-held") != NULL);
  CHECK_EQ(dlock_cli(NULL, 0, "-q release --force cli-held"), 0);
  CHECK_EQ(dlock_cli(NULL, 0, "status cli-held"), 1);
  CHECK_EQ(dlock_cli(NULL, 0, "bench -d 200ms -t 1 uncontended"), 0);
  /* No replica acknowledges: given back, exit 75 (as not acquired). */
  CHECK(detach_replica());
  CHECK_EQ(dlock_cli(NULL, 0,
                     "run -q --replicas 1 --replicas-timeout "
                     "100ms cli-b -- true"),
           75);
  CHECK_EQ(exists_on(&S.master, "cli-b"), 0);
  dlock_lock_free(l);
  dlock_client_close(c);
  th_sentinel_stop(&S);
}

/* ---- failover with waiters, and on an event loop ---- */
typedef struct op_res {
  atomic_int done;
  atomic_int rc;
} op_res;
static void op_done(int rc, uint64_t token, const char *errmsg, void *ud) {
  (void)token, (void)errmsg;
  op_res *r = ud;
  atomic_store(&r->rc, rc);
  atomic_store(&r->done, 1);
}

static void run_until(dlock_loop *lp, atomic_int *flag, int timeout_ms) {
  int64_t end = th_now_ms() + timeout_ms;
  while (!atomic_load(flag) && th_now_ms() < end)
    dlock_loop_run(lp, 20);
}

static atomic_int failover_done, failover_rc;
static void *failover_thread(void *arg) {
  (void)arg;
  atomic_store(&failover_rc, th_sentinel_failover(&S, 10000));
  atomic_store(&failover_done, 1);
  return NULL;
}

typedef struct waiter_arg {
  dlock_lock *l;
  int rc;
} waiter_arg;
static void *blocking_waiter(void *arg) {
  waiter_arg *w = arg;
  w->rc = dlock_lock_try_acquire(w->l, 15000, 10000, NULL);
  return NULL;
}

/* A failover while an event-loop client holds a lock with the watchdog
 * and waits for another, and a blocking client waits too: the hold is
 * renewed on the new master, and each waiter gets its lock once the
 * holder releases it there. */
static void failover_waiters(void) {
  CHECK(th_sentinel_start(&S, NULL) == 0);
  dlock_loop *lp = NULL;
  CHECK_RC(dlock_loop_new(NULL, &lp), 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = S.url;
  o.watchdog_timeout_ms = 3000;
  dlock_client *ac = NULL;
  CHECK_RC(dlock_client_open_async(&o, lp, &ac), 0);
  dlock_client *bc = open_url(S.url, 3000);
  CHECK(bc != NULL);
  dlock_lock *held = NULL, *awant = NULL, *bhold = NULL, *bwant = NULL;
  CHECK_RC(dlock_lock_new(ac, "fw-held", NULL, &held), 0);
  CHECK_RC(dlock_lock_new(ac, "fw-a", NULL, &awant), 0);
  CHECK_RC(dlock_lock_new(bc, "fw-a", "holder", &bhold), 0);
  CHECK_RC(dlock_lock_new(bc, "fw-held", "waiter", &bwant), 0);
  dlock_lock_on_lost(held, on_lost, NULL);
  op_res r1 = {0}, r2 = {0};
  CHECK_RC(dlock_lock_acquire_async(held, 0, -1, op_done, &r1, NULL), 0);
  run_until(lp, &r1.done, 5000);
  CHECK_EQ(atomic_load(&r1.rc), 0);
  CHECK_RC(dlock_lock_try_acquire(bhold, 0, 30000, NULL), 0);
  CHECK_RC(dlock_lock_acquire_async(awant, 15000, 10000, op_done, &r2, NULL),
           0);
  waiter_arg wa = {bwant, 1};
  pthread_t wt;
  pthread_create(&wt, NULL, blocking_waiter, &wa);
  CHECK(th_sentinel_synced(&S, 5000));
  pthread_t ft;
  pthread_create(&ft, NULL, failover_thread, NULL);
  run_until(lp, &failover_done, 12000);
  pthread_join(ft, NULL);
  CHECK_EQ(atomic_load(&failover_rc), 0);
  /* Renewals on the new master: its lease stays up past the 3 s lease. */
  int64_t until = th_now_ms() + 3500;
  while (th_now_ms() < until)
    dlock_loop_run(lp, 50);
  CHECK_EQ(atomic_load(&lost_calls), 0);
  CHECK(th_cmd_int(&S.replica, "PTTL fw-held") > 1000);
  CHECK_EQ(atomic_load(&r2.done), 0);
  /* The blocking holder releases on the new master: the loop's waiter
   * gets it; then the loop releases its hold: the blocking waiter. */
  CHECK_RC(dlock_lock_release(bhold), 1);
  run_until(lp, &r2.done, 8000);
  CHECK_EQ(atomic_load(&r2.rc), 0);
  op_res r3 = {0};
  CHECK_RC(dlock_lock_release_async(held, op_done, &r3, NULL), 0);
  run_until(lp, &r3.done, 5000);
  CHECK_EQ(atomic_load(&r3.rc), 1);
  pthread_join(wt, NULL);
  CHECK_EQ(wa.rc, 0);
  CHECK_RC(dlock_lock_release(bwant), 1);
  op_res r4 = {0};
  CHECK_RC(dlock_lock_release_async(awant, op_done, &r4, NULL), 0);
  run_until(lp, &r4.done, 5000);
  CHECK_EQ(atomic_load(&r4.rc), 1);
  dlock_lock_free(held);
  dlock_lock_free(awant);
  dlock_lock_free(bhold);
  dlock_lock_free(bwant);
  dlock_client_close(ac);
  dlock_loop_free(lp);
  dlock_client_close(bc);
  th_sentinel_stop(&S);
}

static bool ok_reply(redisReply *rep) {
  bool ok = rep && rep->type != REDIS_REPLY_ERROR;
  if (rep) freeReplyObject(rep);
  return ok;
}

static bool old_master_linked(void *arg) {
  (void)arg;
  redisReply *r = th_cmd(&S.master, "INFO replication");
  bool ok = r && r->type == REDIS_REPLY_STRING &&
            strstr(r->str, "role:slave") &&
            strstr(r->str, "master_link_status:up");
  if (r) freeReplyObject(r);
  return ok;
}

/* The master turns replica under the clients' feet, without a
 * +switch-master they could hear (the sentinels are told to monitor the
 * new master afresh): the next script gets READONLY, and the client asks
 * the sentinels again and runs it on the new master; nothing fails. */
static void readonly_rediscover(void) {
  CHECK(th_sentinel_start(&S, NULL) == 0);
  dlock_client *c = open_url(S.url, 0);
  CHECK(c != NULL);
  dlock_loop *lp = NULL;
  CHECK_RC(dlock_loop_new(NULL, &lp), 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = S.url;
  dlock_client *ac = NULL;
  CHECK_RC(dlock_client_open_async(&o, lp, &ac), 0);
  dlock_lock *l1 = NULL, *l2 = NULL, *l3 = NULL;
  CHECK_RC(dlock_lock_new(c, "ro-1", NULL, &l1), 0);
  CHECK_RC(dlock_lock_new(c, "ro-2", NULL, &l2), 0);
  CHECK_RC(dlock_lock_new(ac, "ro-3", NULL, &l3), 0);
  CHECK_RC(dlock_lock_try_acquire(l1, 0, 30000, NULL), 0);
  op_res r0 = {0};
  CHECK_RC(dlock_lock_acquire_async(l3, 0, 30000, op_done, &r0, NULL), 0);
  run_until(lp, &r0.done, 5000);
  CHECK_EQ(atomic_load(&r0.rc), 0);
  op_res r1 = {0};
  CHECK_RC(dlock_lock_release_async(l3, op_done, &r1, NULL), 0);
  run_until(lp, &r1.done, 5000);
  CHECK_EQ(atomic_load(&r1.rc), 1);
  CHECK(th_sentinel_synced(&S, 5000));
  CHECK(ok_reply(th_cmd(&S.replica, "REPLICAOF NO ONE")));
  for (int i = 0; i < 3; i++) {
    CHECK(ok_reply(th_cmd(&S.sentinels[i], "SENTINEL REMOVE %s", S.name)));
    redisReply *rep =
        th_cmd(&S.sentinels[i], "SENTINEL MONITOR %s 127.0.0.1 %d 2", S.name,
               S.replica.port);
    CHECK(rep && rep->type == REDIS_REPLY_STATUS);
    freeReplyObject(rep);
  }
  redisReply *rep = th_cmd(&S.master, "REPLICAOF 127.0.0.1 %d", S.replica.port);
  CHECK(rep && rep->type == REDIS_REPLY_STATUS);
  freeReplyObject(rep);
  CHECK(th_wait_for(old_master_linked, NULL, 10000));
  /* Blocking: READONLY, then the new master. */
  CHECK_RC(dlock_lock_try_acquire(l2, 0, 30000, NULL), 0);
  CHECK_EQ(exists_on(&S.replica, "ro-2"), 1);
  CHECK_RC(dlock_lock_release(l1), 1);
  CHECK_EQ(exists_on(&S.replica, "ro-1"), 0);
  CHECK_RC(dlock_lock_release(l2), 1);
  /* Event loop: the same. */
  op_res r2 = {0};
  CHECK_RC(dlock_lock_acquire_async(l3, 0, 30000, op_done, &r2, NULL), 0);
  run_until(lp, &r2.done, 5000);
  CHECK_EQ(atomic_load(&r2.rc), 0);
  CHECK_EQ(exists_on(&S.replica, "ro-3"), 1);
  /* Both went through a READONLY refusal on the old master. */
  redisReply *es = th_cmd(&S.master, "INFO errorstats");
  CHECK(es && es->type == REDIS_REPLY_STRING);
  const char *ro = strstr(es->str, "errorstat_READONLY:count=");
  long long nro = ro ? atoll(ro + strlen("errorstat_READONLY:count=")) : 0;
  freeReplyObject(es);
  CHECK(nro >= 2);
  op_res r3 = {0};
  CHECK_RC(dlock_lock_release_async(l3, op_done, &r3, NULL), 0);
  run_until(lp, &r3.done, 5000);
  CHECK_EQ(atomic_load(&r3.rc), 1);
  dlock_lock_free(l1);
  dlock_lock_free(l2);
  dlock_lock_free(l3);
  dlock_client_close(ac);
  dlock_loop_free(lp);
  dlock_client_close(c);
  th_sentinel_stop(&S);
}

/* The master killed (kill -9) while a lock is held: the sentinels promote
 * the replica (about 2 s here), the client's connections fail and come
 * back to it, and the watchdog renews the hold there. */
static void failover_killed(void) {
  CHECK(th_sentinel_start(&S, NULL) == 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = S.url;
  o.watchdog_timeout_ms = 9000;
  o.connect_timeout_ms = 500;
  o.reconnect_max_ms = 500;
  dlock_client *c = th_client_opts(&o);
  CHECK(c != NULL);
  dlock_lock *l = NULL;
  CHECK_RC(dlock_lock_new(c, "sent-killed", NULL, &l), 0);
  dlock_lock_on_lost(l, on_lost, NULL);
  CHECK_RC(dlock_lock_try_acquire(l, 0, -1, NULL), 0);
  CHECK(th_sentinel_synced(&S, 5000));
  th_redis_kill(&S.master, SIGKILL);
  CHECK(th_sentinel_wait_failover(&S, 15000) == 0);
  renewal r = renewal_from_now("sent-killed");
  CHECK(r.p0 > 0);
  CHECK(th_wait_for(renewed_on_replica, &r, 8000));
  CHECK_EQ(atomic_load(&lost_calls), 0);
  CHECK_EQ(dlock_lock_is_held(l), 1);
  CHECK_RC(dlock_lock_release(l), 1);
  CHECK_EQ(exists_on(&S.replica, "sent-killed"), 0);
  dlock_lock_free(l);
  dlock_client_close(c);
  th_sentinel_stop(&S);
}

/* A wait rides out a failover within its own budget, and a release that
 * meets one is retried until the new master answers (the latch makes the
 * retry safe), instead of failing at the first refused connection ("no
 * sentinel named a reachable master") and leaving the name locked for its
 * whole lease. */
typedef struct ride_arg {
  dlock_lock *l;
  int rc, rel;
  int64_t took;
} ride_arg;
/* The acquire on another client (and thread: the owner is the thread). */
static void *ride_acquire(void *arg) {
  ride_arg *r = arg;
  int64_t t0 = th_now_ms();
  r->rc = dlock_lock_try_acquire(r->l, 10000, 10000, NULL);
  r->took = th_now_ms() - t0;
  r->rel = r->rc == 0 ? dlock_lock_release(r->l) : r->rc;
  return NULL;
}
static void failover_ride(void) {
  CHECK(th_sentinel_start(&S, NULL) == 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = S.url;
  o.connect_timeout_ms = 500;
  o.reconnect_max_ms = 500;
  dlock_client *c = th_client_opts(&o), *c2 = th_client_opts(&o);
  CHECK(c != NULL && c2 != NULL);
  dlock_lock *l = NULL, *l2 = NULL;
  CHECK_RC(dlock_lock_new(c, "sent-ride-held", NULL, &l), 0);
  CHECK_RC(dlock_lock_new(c2, "sent-ride-free", NULL, &l2), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 30000, NULL), 0);
  CHECK_RC(dlock_client_ping(c2), 0);
  CHECK(th_sentinel_synced(&S, 5000));
  th_redis_kill(&S.master, SIGKILL);
  /* A client opened now (the sentinels name the dead master): the open
   * succeeds, and its first request rides the failover out. */
  dlock_client *c3 = open_url(S.url, 0);
  CHECK(c3 != NULL);
  ride_arg ra = {.l = l2};
  pthread_t rt;
  CHECK(pthread_create(&rt, NULL, ride_acquire, &ra) == 0);
  int64_t t0 = th_now_ms();
  int rc = dlock_lock_release(l);
  int64_t took = th_now_ms() - t0;
  pthread_join(rt, NULL);
  printf("    during the failover: release %s after %lld ms; acquire %s "
         "after %lld ms\n",
         rc == 1 ? "freed" : dlock_strerror(rc), (long long)took,
         dlock_strerror(ra.rc), (long long)ra.took);
  CHECK_RC(rc, 1);
  CHECK_RC(ra.rc, 0);
  CHECK_RC(ra.rel, 1);
  CHECK(th_sentinel_wait_failover(&S, 15000) == 0);
  CHECK_EQ(exists_on(&S.replica, "sent-ride-held"), 0);
  CHECK_RC(dlock_client_ping(c3), 0);
  dlock_client_close(c3);
  dlock_lock_free(l);
  dlock_lock_free(l2);
  dlock_client_close(c);
  dlock_client_close(c2);
  th_sentinel_stop(&S);
}

/* The same on an event-loop client: its wait rides the failover out
 * within its own budget, and its release is retried until the new master
 * answers, on the loop. */
static void loop_failover_ride(void) {
  CHECK(th_sentinel_start(&S, NULL) == 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = S.url;
  o.connect_timeout_ms = 500;
  o.reconnect_max_ms = 500;
  dlock_loop *lp = NULL;
  CHECK_RC(dlock_loop_new(NULL, &lp), 0);
  dlock_client *c = NULL;
  CHECK_RC(dlock_client_open_async(&o, lp, &c), 0);
  dlock_lock *l = NULL, *l2 = NULL;
  CHECK_RC(dlock_lock_new(c, "sent-lride-held", "me", &l), 0);
  CHECK_RC(dlock_lock_new(c, "sent-lride-free", "other", &l2), 0);
  loop_got g;
  CHECK_RC(loop_acquire(lp, l, &g), 0);
  CHECK(th_sentinel_synced(&S, 5000));
  th_redis_kill(&S.master, SIGKILL);
  loop_got gr = {0}, ga = {0};
  int64_t t0 = th_now_ms(), rel_took = -1, acq_took = -1;
  CHECK_RC(dlock_lock_release_async(l, on_loop_done, &gr, NULL), 0);
  CHECK_RC(dlock_lock_acquire_async(l2, 10000, 10000, on_loop_done, &ga, NULL),
           0);
  while ((!gr.calls || !ga.calls) && th_now_ms() - t0 < 15000) {
    dlock_loop_run(lp, 10);
    if (gr.calls && rel_took < 0) rel_took = th_now_ms() - t0;
    if (ga.calls && acq_took < 0) acq_took = th_now_ms() - t0;
  }
  printf("    loop, during the failover: release %s after %lld ms (%s); "
         "acquire %s after %lld ms (%s)\n",
         gr.rc == 1 ? "freed" : dlock_strerror(gr.rc), (long long)rel_took,
         gr.msg, dlock_strerror(ga.rc), (long long)acq_took, ga.msg);
  CHECK_RC(gr.rc, 1);
  CHECK_RC(ga.rc, 0);
  CHECK_RC(loop_release(lp, l2), 1);
  CHECK(th_sentinel_wait_failover(&S, 15000) == 0);
  CHECK_EQ(exists_on(&S.replica, "sent-lride-held"), 0);
  dlock_lock_free(l);
  dlock_lock_free(l2);
  dlock_client_close(c);
  dlock_loop_free(lp);
  th_sentinel_stop(&S);
}

/* A server that keeps an append-only file is asked whether it has
 * WAITAOF (Redis 7.2), once per connection; this 7.0 has not, so the
 * acknowledgement falls back to WAIT (and, with no replica, is short). */
static void waitaof_probe(void) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = th_srv.url;
  o.min_replicas_acked = 1;
  o.replicas_timeout_ms = 50;
  dlock_client *c = th_client_opts(&o);
  CHECK(c != NULL);
  dlock_lock *l = NULL;
  CHECK_RC(dlock_lock_new(c, "waitaof", NULL, &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 10000, NULL), DLOCK_ENOTACKED);
  long long asked = th_calls(&th_srv, "config|get");
  CHECK(asked >= 1);
  CHECK(th_calls(&th_srv, "wait") >= 1);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 10000, NULL), DLOCK_ENOTACKED);
  CHECK_EQ(th_calls(&th_srv, "config|get"), asked); /* asked once */
  CHECK(th_calls(&th_srv, "wait") >= 2);
  CHECK_EQ(exists_on(&th_srv, "waitaof"), 0);
  dlock_lock_free(l);
  dlock_client_close(c);
}

TH_MAIN(T_BARE(url_forms), T_BARE(discovery), T_BARE(wrong_name_and_down),
        T_BARE(sentinel_password), T_BARE(failover_held), T_BARE(failover_lost),
        T_BARE(failover_acked), T_BARE(renew_unacked), T_BARE(loop_acked),
        T_BARE(failover_waiters), T_BARE(failover_killed),
        T_BARE(failover_ride), T_BARE(loop_failover_ride),
        T_BARE(readonly_rediscover), T(wait_shortfall),
        T(wait_apart), T(loop_wait_apart), T_BARE(replicas_auto),
        T_REDIS(waitaof_probe, "--appendonly yes"), T_BARE(cli_commands))
