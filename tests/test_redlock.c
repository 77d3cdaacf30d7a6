/* test_redlock.c: the Redlock backend (redlock://) against 3 and 5 real
 * redis-servers: the quorum for every subset of servers down, nothing
 * left behind by a failed attempt, validity less drift, exclusion across
 * clients, renewal by quorum and the loss when a quorum is gone, the
 * event-loop client, and bad URLs. */
#include "dlock_async.h"
#include "harness.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/resource.h>

#define NMAX 5
static th_redis srv[NMAX];
static char url[1024];

/* Starts n servers and makes url name them all. */
static bool start(int n) {
  return th_redlock_start(srv, n, url, sizeof url) == 0;
}

static dlock_client *client(int64_t watchdog_ms) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.command_timeout_ms = 500;
  o.connect_timeout_ms = 300;
  o.reconnect_min_ms = 1;
  o.reconnect_max_ms = 5;
  if (watchdog_ms > 0) o.watchdog_timeout_ms = watchdog_ms;
  return th_client_opts(&o);
}

/* How many servers hold `key` (a lock hash) now. */
static int holders(int n, const char *key) {
  int k = 0;
  for (int i = 0; i < n; i++)
    if (srv[i].pid > 0) k += th_cmd_int(&srv[i], "EXISTS %s", key) == 1;
  return k;
}

/* Waits (up to 3 s) until `key` exists on `want` of the n servers: what
 * a call leaves to the background (a late grant given back, a straggler's
 * release) lands within one command timeout. */
static bool holders_become(int n, const char *key, int want) {
  int64_t end = th_now_ms() + 3000;
  while (holders(n, key) != want) {
    if (th_now_ms() >= end) return false;
    th_sleep_ms(2);
  }
  return true;
}

/* Waits (up to 3 s) until `key` exists (want 1) or not (0) on r. */
static bool exists_becomes(th_redis *r, const char *key, long long want) {
  int64_t end = th_now_ms() + 3000;
  while (th_cmd_int(r, "EXISTS %s", key) != want) {
    if (th_now_ms() >= end) return false;
    th_sleep_ms(2);
  }
  return true;
}

/* holders_become for an event-loop client's lock: the loop runs meanwhile
 * (what a call left in flight goes out and comes back on it). */
static bool loop_holders_become(dlock_loop *lp, const char *key, int want) {
  int64_t end = th_now_ms() + 3000;
  while (holders(3, key) != want) {
    if (th_now_ms() >= end) return false;
    dlock_loop_run(lp, 2);
  }
  return true;
}

/* exists_becomes, the loop running meanwhile. */
static bool loop_exists_becomes(dlock_loop *lp, th_redis *r, const char *key,
                                long long want) {
  int64_t end = th_now_ms() + 3000;
  while (th_cmd_int(r, "EXISTS %s", key) != want) {
    if (th_now_ms() >= end) return false;
    dlock_loop_run(lp, 2);
  }
  return true;
}

/* Waits (up to 3 s) until at least `want` of 3 servers have tok as the
 * counter of rl:p. */
static bool counters_become(uint64_t tok, int want) {
  int64_t end = th_now_ms() + 3000;
  for (;;) {
    int same = 0;
    for (int i = 0; i < 3; i++)
      same += th_cmd_int(&srv[i], "GET redisson_lock_token:{rl:p}") ==
              (long long)tok;
    if (same >= want) return true;
    if (th_now_ms() >= end) return false;
    th_sleep_ms(2);
  }
}

/* Waits until every server has run at least `least` scripts more than
 * `from` (NULL: from 0) and then none has run one more for 100 ms: the
 * counts in out, and whether that came within 5 s. A Redlock call returns
 * once a quorum answered: its part to the last server, and a write-back,
 * may still run after. */
static bool scripts_settle(const long long *from, int least,
                           long long out[3]) {
  int64_t end = th_now_ms() + th_soon(5000), still = 0;
  long long last[3] = {-1, -1, -1};
  for (;;) {
    bool moved = false, short_of = false;
    for (int i = 0; i < 3; i++) {
      out[i] = th_scripts_run(&srv[i]);
      moved |= out[i] != last[i];
      short_of |= from && out[i] - from[i] < least;
      last[i] = out[i];
    }
    int64_t now = th_now_ms();
    if (moved || short_of) still = now;
    else if (now - still >= 100) return true;
    if (now >= end) return false;
    th_sleep_ms(5);
  }
}

/* redsync's table: with each subset of the n servers down, an acquire
 * succeeds exactly when a quorum is up, and a failed attempt leaves the
 * lock on none of the servers that are up. */
static void quorum_table(int n) {
  CHECK(start(n));
  dlock_client *c = client(0);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "rl:q", NULL, &l), 0);
  int quorum = n / 2 + 1;
  for (int mask = 0; mask < (1 << n); mask++) {
    int up = n;
    for (int i = 0; i < n; i++)
      if (mask & (1 << i)) {
        th_redis_kill(&srv[i], SIGKILL);
        up--;
      }
    /* With a quorum up, a short wait rides out reconnect backoff. */
    int rc = dlock_lock_try_acquire(l, up >= quorum ? 1000 : 0, 10000, NULL);
    if (up >= quorum) {
      CHECK_RC(rc, 0);
      CHECK(holders(n, "rl:q") >= quorum);
      CHECK_EQ(dlock_lock_release(l), 1);
    } else {
      CHECK(rc < 0 && rc != DLOCK_EINVAL);
      CHECK(rc == DLOCK_EBUSY || rc == DLOCK_ECONNECT ||
            rc == DLOCK_ECONNLOST || rc == DLOCK_ETIMEDOUT);
    }
    /* A grant that came after the quorum failed is given back. */
    CHECK(holders_become(n, "rl:q", 0));
    for (int i = 0; i < n; i++)
      if (mask & (1 << i)) CHECK_RC(th_redis_restart(&srv[i]), 0);
  }
  dlock_lock_free(l);
  dlock_client_close(c);
}

static void t_quorum_table_3(void) {
  quorum_table(3);
}
static void t_quorum_table_5(void) {
  quorum_table(5);
}

/* Taken on every server with one token each; valid for the lease less
 * the drift (1 % + 2 ms) from the attempt's start; released on all. */
static void t_acquire_validity_release(void) {
  CHECK(start(3));
  dlock_client *c = client(0);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "rl:v", NULL, &l), 0);
  uint64_t tok = 0;
  CHECK_RC(dlock_lock_try_acquire(l, 0, 2000, &tok), 0);
  CHECK(tok > 0);
  CHECK(holders_become(3, "rl:v", 3));
  for (int i = 0; i < 3; i++) {
    long long pttl = th_cmd_int(&srv[i], "PTTL rl:v");
    CHECK(pttl > 1500 && pttl <= 2000);
  }
  int64_t left = 0;
  CHECK_RC(dlock_lock_validity(l, &left), 0);
  CHECK(left > 1500 && left <= 2000 - 22);
  CHECK_EQ(dlock_lock_is_held(l), 1);
  CHECK_EQ(dlock_lock_hold_count(l), 1);
  /* Reentrant: a second hold, released in turn. */
  CHECK_RC(dlock_lock_try_acquire(l, 0, 2000, NULL), 0);
  CHECK_EQ(dlock_lock_hold_count(l), 2);
  CHECK_EQ(dlock_lock_release(l), 0);
  CHECK(holders_become(3, "rl:v", 3));
  CHECK_EQ(dlock_lock_release(l), 1);
  CHECK(holders_become(3, "rl:v", 0));
  CHECK_RC(dlock_lock_release(l), DLOCK_ENOTOWNER);
  dlock_lock_free(l);
  dlock_client_close(c);
}

/* Another owner holds it on two of three servers: refused, and the one
 * server where the attempt took it is released again. Control: held on
 * one server only, a quorum is still to be had. */
static void t_minority_taken(void) {
  CHECK(start(3));
  dlock_client *c = client(0);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "rl:m", NULL, &l), 0);
  for (int i = 0; i < 2; i++)
    th_cmd_int(&srv[i], "SET rl:m other:1 PX 60000");
  CHECK_RC(dlock_lock_try_acquire(l, 0, 10000, NULL), DLOCK_EBUSY);
  CHECK(exists_becomes(&srv[2], "rl:m", 0));
  th_cmd_int(&srv[1], "DEL rl:m");
  CHECK_RC(dlock_lock_try_acquire(l, 0, 10000, NULL), 0);
  CHECK(exists_becomes(&srv[1], "rl:m", 1));
  CHECK(exists_becomes(&srv[2], "rl:m", 1));
  CHECK_EQ(dlock_lock_release(l), 1);
  redisReply *r = th_cmd(&srv[0], "GET rl:m"); /* not ours: still there */
  CHECK(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "other:1") == 0);
  freeReplyObject(r);
  /* With a server down as well, a short wait ends in its time: the
   * attempt's give-back to the dead server is not sent again through the
   * outage (as a Sentinel master's release rides out a failover), which
   * held up the next attempt for a command timeout and 6 s. */
  th_redis_kill(&srv[2], SIGKILL);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_try_acquire(l, 300, 10000, NULL), DLOCK_EBUSY);
  int64_t took = th_now_ms() - t0;
  CHECK(took < 2500);
  CHECK(exists_becomes(&srv[1], "rl:m", 0));
  CHECK_RC(th_redis_restart(&srv[2]), 0);
  dlock_lock_free(l);
  dlock_client_close(c);
}

static atomic_int lost;
static void on_lost(dlock_lock *l, const char *owner, void *ud) {
  (void)l, (void)owner, (void)ud;
  atomic_fetch_add(&lost, 1);
}

/* The watchdog renews on every server; with one server down it goes on
 * (a quorum renews); with two down the hold is reported lost. */
static void t_renew_by_quorum(void) {
  CHECK(start(3));
  dlock_client *c = client(600);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "rl:w", NULL, &l), 0);
  dlock_lock_on_lost(l, on_lost, NULL);
  CHECK_RC(dlock_lock_acquire(l, -1, NULL), 0);
  /* Renewed: still valid well past the first lease's end. */
  th_sleep_ms(1500);
  CHECK_RC(dlock_lock_validity(l, NULL), 0);
  CHECK(holders_become(3, "rl:w", 3));
  th_redis_kill(&srv[2], SIGKILL);
  int64_t end = th_now_ms() + 1200;
  while (th_now_ms() < end && atomic_load(&lost) == 0)
    th_sleep_ms(20);
  CHECK_EQ(atomic_load(&lost), 0);
  CHECK_RC(dlock_lock_validity(l, NULL), 0);
  th_redis_kill(&srv[1], SIGKILL);
  end = th_now_ms() + 3000;
  while (th_now_ms() < end && atomic_load(&lost) == 0)
    th_sleep_ms(10);
  CHECK_EQ(atomic_load(&lost), 1);
  CHECK_RC(dlock_lock_validity(l, NULL), DLOCK_ELOST);
  dlock_lock_release(l); /* forgets the lost hold */
  dlock_lock_free(l);
  dlock_client_close(c);
}

/* Fencing over quorums: one server's counter runs far ahead of the others.
 * H1 takes the lock on {0, 1} (2 is held by another), H2 later on {1, 2}
 * (0 is held by another): H2's token must be above H1's although server 0,
 * which gave H1 its token, is not in H2's quorum. It is, because H1 wrote
 * its token back to server 1 before using it; server 2's own counter (not
 * written back) shows that the per-server counters alone would not do. */
static void t_fencing_over_quorums(void) {
  CHECK(start(3));
  dlock_client *c = client(0);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "rl:f", NULL, &l), 0);
  th_cmd_int(&srv[0], "SET redisson_lock_token:{rl:f} 5000000000000000");
  th_cmd_int(&srv[2], "SET redisson_lock_token:{rl:f} 1000");
  th_cmd_int(&srv[2], "SET rl:f other:1");
  uint64_t t1 = 0, t2 = 0;
  CHECK_RC(dlock_lock_try_acquire(l, 0, 10000, &t1), 0);
  CHECK(t1 > 5000000000000000ull);
  /* Server 1 gave H1 a token from its own clock (~1.8e15); it now holds
   * t1, written back (without the write-back this check fails). */
  CHECK_EQ(th_cmd_int(&srv[1], "GET redisson_lock_token:{rl:f}"),
           (long long)t1);
  CHECK_EQ(dlock_lock_release(l), 1);
  th_cmd_int(&srv[2], "DEL rl:f");
  th_cmd_int(&srv[0], "SET rl:f other:1");
  long long own2 = th_cmd_int(&srv[2], "GET redisson_lock_token:{rl:f}");
  CHECK_EQ(own2, 1000); /* server 2's own next token: 1001 < t1 */
  CHECK_RC(dlock_lock_try_acquire(l, 0, 10000, &t2), 0);
  CHECK(t2 > t1);
  CHECK_EQ(dlock_lock_release(l), 1);
  dlock_lock_free(l);
  dlock_client_close(c);
}

/* The token folded into the acquire: the round proposes one (the wall
 * clock in µs), every server takes it, and no write-back round follows:
 * one script per server per acquire, and each server's counter is the
 * token. Tokens still go up from one hold to the next. The first acquire
 * of a name finds no counter: each server restarts its own from its clock
 * (above any proposal), they differ, and the largest is written back. */
static void t_token_proposed(void) {
  CHECK(start(3));
  dlock_client *c = client(0);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "rl:p", NULL, &l), 0);
  uint64_t prev = 0;
  for (int k = 0; k < 3; k++) {
    /* Counted once the last release's parts (and any write-back) ran. */
    long long before[3], after[3];
    CHECK(scripts_settle(NULL, 0, before));
    uint64_t tok = 0;
    CHECK_RC(dlock_lock_try_acquire(l, 0, 5000, &tok), 0);
    CHECK(tok > prev);
    /* The call returns once a quorum granted: a server that answered
     * after it restarted its counter later (above tok) on the first
     * acquire; on the next ones every server takes the proposal. */
    CHECK(counters_become(tok, k == 0 ? 2 : 3));
    CHECK(scripts_settle(before, 1, after));
    for (int i = 0; i < 3; i++) {
      long long calls = after[i] - before[i];
      CHECK(k == 0 ? calls == 1 || calls == 2 : calls == 1);
    }
    CHECK_EQ(dlock_lock_release(l), 1);
    prev = tok;
  }
  dlock_lock_free(l);
  dlock_client_close(c);
}

/* ---- the event-loop client ---- */
typedef struct got {
  int calls, rc;
  uint64_t token;
} got;

static void on_done(int rc, uint64_t token, const char *msg, void *ud) {
  (void)msg;
  got *g = ud;
  g->calls++;
  g->rc = rc;
  g->token = token;
}

static bool run_until(dlock_loop *lp, const int *flag, int ms) {
  int64_t end = th_now_ms() + ms;
  while (!*flag && th_now_ms() < end)
    dlock_loop_run(lp, 20);
  return *flag != 0;
}

static void t_async(void) {
  CHECK(start(3));
  dlock_loop *lp;
  CHECK_RC(dlock_loop_new(NULL, &lp), 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL, *b = client(0);
  CHECK(b != NULL);
  CHECK_RC(dlock_client_open_async(&o, lp, &c), 0);
  dlock_lock *l, *bl;
  CHECK_RC(dlock_lock_new(c, "rl:a", NULL, &l), 0);
  CHECK_RC(dlock_lock_new(b, "rl:a", NULL, &bl), 0);
  got g[4] = {{0}};
  CHECK_RC(dlock_lock_acquire_async(l, 0, 10000, on_done, &g[0], NULL), 0);
  CHECK_EQ(g[0].calls, 0);
  CHECK(run_until(lp, &g[0].calls, 3000));
  CHECK_RC(g[0].rc, 0);
  CHECK(g[0].token > 0);
  CHECK(loop_holders_become(lp, "rl:a", 3));
  CHECK_RC(dlock_lock_try_acquire(bl, 0, 10000, NULL), DLOCK_EBUSY);
  /* A waiter on the loop gets it when the blocking holder lets go. */
  CHECK_RC(dlock_lock_release_async(l, on_done, &g[1], NULL), 0);
  CHECK(run_until(lp, &g[1].calls, 3000));
  CHECK_RC(g[1].rc, 1);
  CHECK_RC(dlock_lock_try_acquire(bl, 0, 10000, NULL), 0);
  CHECK_RC(dlock_lock_acquire_async(l, 5000, 10000, on_done, &g[2], NULL), 0);
  dlock_loop_run(lp, 100);
  CHECK_EQ(g[2].calls, 0);
  CHECK_EQ(dlock_lock_release(bl), 1);
  CHECK(run_until(lp, &g[2].calls, 3000));
  CHECK_RC(g[2].rc, 0);
  /* Freed while it waits: cancelled (DLOCK_ECANCELED, from the loop),
   * and once the holder lets go another client takes the lock at once. */
  dlock_lock *l3;
  CHECK_RC(dlock_lock_new(c, "rl:a", "third", &l3), 0);
  got f = {0}, r = {0}, a = {0};
  CHECK_RC(dlock_lock_acquire_async(l3, -1, 10000, on_done, &f, NULL), 0);
  dlock_loop_run(lp, 100);
  CHECK_EQ(f.calls, 0);
  dlock_lock_free(l3);
  CHECK_EQ(f.calls, 0); /* never within the free */
  CHECK(run_until(lp, &f.calls, 3000));
  CHECK_RC(f.rc, DLOCK_ECANCELED);
  CHECK_RC(dlock_lock_release_async(l, on_done, &r, NULL), 0);
  CHECK(run_until(lp, &r.calls, 3000));
  CHECK_RC(r.rc, 1);
  CHECK_RC(dlock_lock_try_acquire(bl, 0, 10000, NULL), 0);
  CHECK_EQ(dlock_lock_release(bl), 1);
  CHECK_RC(dlock_lock_acquire_async(l, 0, 10000, on_done, &a, NULL), 0);
  CHECK(run_until(lp, &a.calls, 3000));
  CHECK_RC(a.rc, 0);
  /* Pending at close: completed within it. */
  dlock_lock *l2;
  CHECK_RC(dlock_lock_new(c, "rl:a", "other", &l2), 0);
  CHECK_RC(dlock_lock_acquire_async(l2, 20000, 10000, on_done, &g[3], NULL), 0);
  dlock_loop_run(lp, 50);
  dlock_lock_free(l2);
  dlock_lock_free(l);
  dlock_client_close(c);
  CHECK_EQ(g[3].calls, 1);
  CHECK_RC(g[3].rc, DLOCK_ECLOSED);
  dlock_loop_free(lp);
  dlock_lock_free(bl);
  dlock_client_close(b);
}

/* The layouts: by default the mutex is the plain string lock on every
 * server (value = the owner id, as redsync and npm redlock write it);
 * ?layout=hash writes Redisson's hash (owner id -> count) instead, and the
 * plain lock stays a string there. */
static void layout_check(const char *opts, const char *type) {
  char base[1024];
  snprintf(base, sizeof base, "%s", url);
  snprintf(url + strlen(url), sizeof url - strlen(url), "%s", opts);
  dlock_client *c = client(0);
  snprintf(url, sizeof url, "%s", base);
  CHECK(c != NULL);
  dlock_lock *l, *p;
  CHECK_RC(dlock_lock_new(c, "rl:lay", NULL, &l), 0);
  CHECK_RC(dlock_plainlock_new(c, "rl:pl", NULL, &p), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 5000, NULL), 0);
  CHECK_RC(dlock_lock_try_acquire(p, 0, 5000, NULL), 0);
  for (int i = 0; i < 3; i++) {
    /* The acquire returned on a quorum's answer: the last server's write
     * may still be on its way. */
    CHECK(exists_becomes(&srv[i], "rl:lay", 1));
    CHECK(exists_becomes(&srv[i], "rl:pl", 1));
    redisReply *r = th_cmd(&srv[i], "TYPE rl:lay");
    CHECK(r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, type) == 0);
    freeReplyObject(r);
    r = th_cmd(&srv[i], "TYPE rl:pl");
    CHECK(r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "string") == 0);
    freeReplyObject(r);
  }
  /* Re-entered and released in turn on either layout. */
  CHECK_RC(dlock_lock_try_acquire(l, 0, 5000, NULL), 0);
  CHECK_EQ(dlock_lock_hold_count(l), 2);
  CHECK_EQ(dlock_lock_release(l), 0);
  CHECK_EQ(dlock_lock_release(l), 1);
  CHECK_EQ(dlock_lock_release(p), 1);
  CHECK(holders_become(3, "rl:lay", 0) && holders_become(3, "rl:pl", 0));
  dlock_lock_free(l);
  dlock_lock_free(p);
  dlock_client_close(c);
}

static void t_layouts(void) {
  CHECK(start(3));
  layout_check("", "string");
  layout_check("?layout=plain", "string");
  layout_check("?layout=hash&fencing=on", "hash");
}

/* Redlock's delayed restart: with ?restart_delay, a server up for less
 * than the delay refuses the lock, so a server restarted empty cannot
 * join a quorum while an earlier owner's lease may still run. The holder
 * took it on {0, 1} (2 down); then 2 is back and 0 restarts empty:
 * {0, 2} knows nothing of the hold. Control: without the delay a second
 * owner takes it there. With it (not shorter than the lease), refused
 * until the delay, and so the first owner's lease, have passed. */
static void t_delayed_restart(void) {
  CHECK(start(3));
  char base[1024];
  snprintf(base, sizeof base, "%s", url);
  for (int delayed = 0; delayed < 2; delayed++) {
    snprintf(url, sizeof url, "%.1000s%s", base,
             delayed ? "?restart_delay=2s" : "");
    dlock_client *a = client(0), *b = client(0);
    CHECK(a != NULL && b != NULL);
    dlock_lock *la, *lb;
    CHECK_RC(dlock_lock_new(a, "rl:dr", "first", &la), 0);
    CHECK_RC(dlock_lock_new(b, "rl:dr", "second", &lb), 0);
    th_redis_kill(&srv[2], SIGKILL);
    /* With the delay, the fresh servers refuse at first: the wait rides
     * it out (and shows it). */
    int64_t t0 = th_now_ms();
    CHECK_RC(dlock_lock_try_acquire(la, 5000, 1500, NULL), 0);
    if (delayed) CHECK(th_now_ms() - t0 >= 500);
    CHECK(holders_become(2, "rl:dr", 2));
    CHECK_RC(th_redis_restart(&srv[2]), 0);
    th_redis_kill(&srv[0], SIGKILL);
    CHECK_RC(th_redis_restart(&srv[0]), 0);
    int rc = dlock_lock_try_acquire(lb, 200, 4000, NULL);
    /* (The first may have heard by now that only one server still holds
     * it: its subscribers' reconnects have the quorum checked.) */
    if (!delayed) {
      CHECK_RC(rc, 0); /* the control: two owners */
      CHECK_EQ(dlock_lock_release(lb), 1);
    } else {
      CHECK_RC(rc, DLOCK_EBUSY);
      /* Once the delay and the first owner's lease have run out. */
      CHECK_RC(dlock_lock_try_acquire(lb, 8000, 4000, NULL), 0);
      CHECK(dlock_lock_validity(la, NULL) != 0);
      CHECK_EQ(dlock_lock_release(lb), 1);
    }
    dlock_lock_release(la);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
  }
  snprintf(url, sizeof url, "%s", base);
}

/* A replica for each of the n servers (th_redis rep[i] of srv[i]), each
 * link up. */
static th_redis rep[3];
static bool start_replicas(int n) {
  for (int i = 0; i < n; i++) {
    char extra[64];
    snprintf(extra, sizeof extra, "--replicaof 127.0.0.1 %d", srv[i].port);
    if (th_redis_start(&rep[i], extra) != 0) return false;
  }
  int64_t end = th_now_ms() + 10000;
  for (int i = 0; i < n; i++) {
    for (;;) {
      redisReply *r = th_cmd(&rep[i], "INFO replication");
      bool up = r && r->type == REDIS_REPLY_STRING &&
                strstr(r->str, "master_link_status:up") != NULL;
      if (r) freeReplyObject(r);
      if (up && th_replicas_online(&srv[i], 1)) break;
      if (th_now_ms() >= end) return false;
      th_sleep_ms(20);
    }
  }
  return true;
}

/* Replica acknowledgement over Redlock's servers, blocking and on a loop:
 * each server's acquire waits for its replica, and one that falls short
 * gives its copy back and does not count. With one of 3 replicas stopped
 * (SIGSTOP) the quorum still takes the lock (2 servers hold it, not the
 * stopped replica's master); with two, nobody holds it. */
static void t_replica_ack(void) {
  CHECK(start(3));
  CHECK(start_replicas(3));
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.min_replicas_acked = 1;
  o.replicas_timeout_ms = 300;
  dlock_client *c = th_client_opts(&o);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "rl:ack", NULL, &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 10000, NULL), 0);
  CHECK(holders_become(3, "rl:ack", 3));
  for (int i = 0; i < 3; i++)
    CHECK(exists_becomes(&rep[i], "rl:ack", 1));
  CHECK_EQ(dlock_lock_release(l), 1);
  /* On a loop too. */
  dlock_loop *lp = NULL;
  CHECK_RC(dlock_loop_new(NULL, &lp), 0);
  dlock_client *a = NULL;
  CHECK_RC(dlock_client_open_async(&o, lp, &a), 0);
  dlock_lock *al;
  CHECK_RC(dlock_lock_new(a, "rl:aack", NULL, &al), 0);
  got g = {0};
  CHECK_RC(dlock_lock_acquire_async(al, 0, 10000, on_done, &g, NULL), 0);
  CHECK(run_until(lp, &g.calls, 5000));
  CHECK_RC(g.rc, 0);
  for (int i = 0; i < 3; i++)
    CHECK(loop_exists_becomes(lp, &rep[i], "rl:aack", 1));
  /* One replica stopped: its master's copy is given back. */
  CHECK_EQ(kill(rep[0].pid, SIGSTOP), 0);
  dlock_lock *l2;
  CHECK_RC(dlock_lock_new(c, "rl:ack2", NULL, &l2), 0);
  CHECK_RC(dlock_lock_try_acquire(l2, 0, 10000, NULL), 0);
  /* The call returned with the quorum; srv[0]'s copy goes when its WAIT
   * falls short. */
  CHECK(exists_becomes(&srv[0], "rl:ack2", 0));
  CHECK(holders_become(3, "rl:ack2", 2));
  CHECK_EQ(dlock_lock_release(l2), 1);
  /* Two: no quorum acknowledges, nobody holds it. */
  CHECK_EQ(kill(rep[1].pid, SIGSTOP), 0);
  CHECK(dlock_lock_try_acquire(l2, 0, 10000, NULL) < 0);
  CHECK(holders_become(3, "rl:ack2", 0));
  CHECK_EQ(kill(rep[0].pid, SIGCONT), 0);
  CHECK_EQ(kill(rep[1].pid, SIGCONT), 0);
  memset(&g, 0, sizeof g);
  CHECK_RC(dlock_lock_release_async(al, on_done, &g, NULL), 0);
  CHECK(run_until(lp, &g.calls, 5000));
  CHECK_RC(g.rc, 1);
  dlock_lock_free(al);
  dlock_client_close(a);
  dlock_loop_free(lp);
  dlock_lock_free(l2);
  dlock_lock_free(l);
  dlock_client_close(c);
  for (int i = 0; i < 3; i++)
    th_redis_stop(&rep[i]);
}

/* --replicas auto over Redlock's servers: each server waits for as many
 * replicas as it has (ROLE), on the parts' loop. Servers 0 and 1 have a
 * replica, server 2 none: a fixed count of 1 leaves server 2 out of every
 * quorum, auto counts it; with server 0's replica stalled (still its
 * master's), server 0 falls short and gives its copy back. Refused with
 * DLOCK_ENOTSUP at the open before. */
static void t_replica_auto(void) {
  CHECK(start(3));
  CHECK(start_replicas(2));
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.min_replicas_acked = 1;
  o.replicas_timeout_ms = 300;
  dlock_client *fixed = th_client_opts(&o);
  CHECK(fixed != NULL);
  o.min_replicas_acked = DLOCK_REPLICAS_AUTO;
  dlock_client *c = NULL;
  CHECK_RC(dlock_client_open(&o, &c), 0);
  dlock_lock *f, *l;
  CHECK_RC(dlock_lock_new(fixed, "rl:fixed", NULL, &f), 0);
  CHECK_RC(dlock_lock_new(c, "rl:auto", NULL, &l), 0);
  CHECK_RC(dlock_lock_try_acquire(f, 0, 10000, NULL), 0);
  CHECK(holders_become(3, "rl:fixed", 2)); /* server 2: no replica */
  CHECK_RC(dlock_lock_try_acquire(l, 0, 10000, NULL), 0);
  CHECK(holders_become(3, "rl:auto", 3));
  for (int i = 0; i < 2; i++)
    CHECK(exists_becomes(&rep[i], "rl:auto", 1));
  CHECK_EQ(dlock_lock_release(l), 1);
  CHECK_EQ(kill(rep[0].pid, SIGSTOP), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 10000, NULL), 0);
  CHECK(exists_becomes(&srv[0], "rl:auto", 0));
  CHECK(holders_become(3, "rl:auto", 2));
  CHECK_EQ(kill(rep[0].pid, SIGCONT), 0);
  CHECK_EQ(dlock_lock_release(l), 1);
  CHECK_EQ(dlock_lock_release(f), 1);
  dlock_lock_free(l);
  dlock_lock_free(f);
  dlock_client_close(c);
  dlock_client_close(fixed);
  for (int i = 0; i < 2; i++)
    th_redis_stop(&rep[i]);
}

static void t_bad_urls(void) {
  const char *bad[] = {"redlock://",
                       "redlock://127.0.0.1:1,,127.0.0.1:2",
                       "redlock://@/0",
                       "redlock://127.0.0.1:1?layout=tree",
                       "redlock://127.0.0.1:1?fencing=maybe",
                       "redlock://127.0.0.1:1?restart_delay=3h",
                       "redlock://127.0.0.1:1?restart_delay=",
                       "redlock://127.0.0.1:1?colour=red"};
  CHECK(th_urls_refused(bad, sizeof bad / sizeof bad[0]));
}

/* A server named twice, as written or once resolved, would make a quorum
 * of one: refused at the open with DLOCK_EINVAL naming it. */
static void t_duplicate_server(void) {
  CHECK(start(2));
  char forms[2][256];
  snprintf(forms[0], sizeof forms[0],
           "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", srv[0].port,
           srv[0].port, srv[1].port);
  snprintf(forms[1], sizeof forms[1],
           "redlock://localhost:%d,127.0.0.1:%d,127.0.0.1:%d", srv[0].port,
           srv[0].port, srv[1].port);
  char want[64];
  snprintf(want, sizeof want, "127.0.0.1:%d", srv[0].port);
  for (int i = 0; i < 2; i++) {
    dlock_client_options o;
    dlock_client_options_init(&o);
    o.url = forms[i];
    dlock_client *c = NULL;
    CHECK_RC(dlock_client_open(&o, &c), DLOCK_EINVAL);
    CHECK(c == NULL);
    CHECK(strstr(dlock_client_open_errmsg(), want) != NULL);
  }
  /* Two different servers on one host are fine. */
  dlock_client *c = client(0);
  CHECK(c != NULL);
  dlock_client_close(c);
}

/* ---- a stalled server (SIGSTOP) does not hold up the quorum ---- */

/* With one of three servers stopped, every call returns once the other
 * two have decided it, well before the command timeout (2 s here): a free
 * lock taken, a held one refused, is_held, the release, inspect; on the
 * loop too.
 * A grant the stopped server gives once it runs again, for an attempt the
 * other two refused, is given back. */
static void t_stalled_server(void) {
  CHECK(start(3));
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.command_timeout_ms = 2000;
  dlock_client *c = th_client_opts(&o);
  CHECK(c != NULL);
  dlock_loop *lp;
  CHECK_RC(dlock_loop_new(NULL, &lp), 0);
  dlock_client *ac = NULL;
  CHECK_RC(dlock_client_open_async(&o, lp, &ac), 0);
  dlock_lock *free_l, *held_l, *al;
  CHECK_RC(dlock_lock_new(c, "rl:sf", NULL, &free_l), 0);
  CHECK_RC(dlock_lock_new(c, "rl:sh", NULL, &held_l), 0);
  CHECK_RC(dlock_lock_new(ac, "rl:sa", NULL, &al), 0);
  /* Connected first, the scripts loaded, so that the stop stalls
   * requests, not connects (a request stalled behind a NOSCRIPT could be
   * overtaken by the release that follows it: its copy would then stay
   * until its lease ends). */
  CHECK_RC(dlock_lock_try_acquire(free_l, 0, 10000, NULL), 0);
  CHECK_EQ(dlock_lock_release(free_l), 1);
  got g = {0};
  CHECK_RC(dlock_lock_acquire_async(al, 0, 10000, on_done, &g, NULL), 0);
  CHECK(run_until(lp, &g.calls, 5000));
  memset(&g, 0, sizeof g);
  CHECK_RC(dlock_lock_release_async(al, on_done, &g, NULL), 0);
  CHECK(run_until(lp, &g.calls, 5000));
  CHECK_RC(g.rc, 1);
  CHECK(loop_holders_become(lp, "rl:sa", 0));
  for (int i = 1; i < 3; i++) /* another owner on two of the three */
    th_cmd_int(&srv[i], "SET rl:sh other:1 PX 30000");
  th_redis_kill(&srv[0], SIGSTOP); /* the first: inspect asked it first */
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_try_acquire(free_l, 0, 10000, NULL), 0);
  int64_t took_acquire = th_now_ms() - t0;
  t0 = th_now_ms();
  CHECK_RC(dlock_lock_try_acquire(held_l, 0, 10000, NULL), DLOCK_EBUSY);
  int64_t took_try = th_now_ms() - t0;
  t0 = th_now_ms();
  CHECK_EQ(dlock_lock_is_held(free_l), 1);
  int64_t took_held = th_now_ms() - t0;
  t0 = th_now_ms();
  CHECK_EQ(dlock_lock_release(free_l), 1);
  int64_t took_release = th_now_ms() - t0;
  dlock_lock_state st;
  t0 = th_now_ms();
  CHECK_RC(dlock_lock_inspect(held_l, &st), 0);
  int64_t took_inspect = th_now_ms() - t0;
  memset(&g, 0, sizeof g);
  t0 = th_now_ms();
  CHECK_RC(dlock_lock_acquire_async(al, 0, 10000, on_done, &g, NULL), 0);
  CHECK(run_until(lp, &g.calls, 5000));
  int64_t took_async = th_now_ms() - t0;
  CHECK_RC(g.rc, 0);
  fprintf(stderr,
          "    one of 3 stopped: acquire %lld ms, try on held %lld ms, "
          "is_held %lld ms, release %lld ms, inspect %lld ms, acquire on a "
          "loop %lld ms\n",
          (long long)took_acquire, (long long)took_try, (long long)took_held,
          (long long)took_release, (long long)took_inspect,
          (long long)took_async);
  CHECK(took_acquire < 300 && took_try < 300 && took_held < 300);
  CHECK(took_release < 300 && took_inspect < 300 && took_async < 300);
  /* Running again, the stopped server answers what it was sent: its grant
   * of rl:sh (refused by the other two) is given back. */
  th_redis_kill(&srv[0], SIGCONT);
  CHECK(exists_becomes(&srv[0], "rl:sh", 0));
  CHECK(exists_becomes(&srv[0], "rl:sf", 0));
  memset(&g, 0, sizeof g);
  CHECK_RC(dlock_lock_release_async(al, on_done, &g, NULL), 0);
  CHECK(run_until(lp, &g.calls, 5000));
  CHECK_RC(g.rc, 1);
  /* The loop's client finishes its stalled requests as its loop runs. */
  CHECK(loop_holders_become(lp, "rl:sa", 0));
  dlock_lock_free(al);
  dlock_client_close(ac);
  dlock_loop_free(lp);
  dlock_lock_free(free_l);
  dlock_lock_free(held_l);
  dlock_client_close(c);
}

/* ---- one connection keeps its order, a script's first use too ---- */

static bool pttl_above(void *p) {
  return th_cmd_int(p, "PTTL rl:ord") > 10000;
}

/* Lets the third server run once the acquire has reached the second (so
 * also the third, in the same write). */
static void *order_resume(void *p) {
  bool *sent = p;
  *sent = th_wait_for(pttl_above, &srv[1], 3000);
  th_redis_kill(&srv[2], SIGCONT);
  return NULL;
}

/* A release answered by a quorum leaves its part to the third server in
 * flight; the same owner's next acquire goes behind it on that server's
 * connection and must run after it. Here the release is the release
 * script's first use: sent as EVALSHA, its NOSCRIPT and its EVAL again
 * would come after the acquire, deleting the new hold on that server (the
 * CI's t_stalled_server failure: is_held 0 after a granted acquire). So a
 * script's first use on a connection goes with its body. */
static void t_first_use_in_order(void) {
  CHECK(start(3));
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.command_timeout_ms = 5000; /* the acquire waits for the third */
  dlock_client *c = th_client_opts(&o);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "rl:ord", NULL, &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 5000, NULL), 0);
  th_redis_kill(&srv[2], SIGSTOP);
  CHECK_EQ(dlock_lock_release(l), 1); /* the first two: the quorum */
  CHECK(exists_becomes(&srv[0], "rl:ord", 0));
  /* The next acquire needs the third server, behind the release. */
  th_redis_kill(&srv[0], SIGSTOP);
  bool sent = false;
  pthread_t tid;
  CHECK(pthread_create(&tid, NULL, order_resume, &sent) == 0);
  int rc = dlock_lock_try_acquire(l, 0, 60000, NULL);
  pthread_join(tid, NULL);
  th_redis_kill(&srv[0], SIGCONT);
  CHECK(sent);
  CHECK_RC(rc, 0);
  /* Granted by the second and the third: both hold it, for good. */
  CHECK_EQ(th_cmd_int(&srv[1], "EXISTS rl:ord"), 1);
  CHECK_EQ(th_cmd_int(&srv[2], "EXISTS rl:ord"), 1);
  CHECK_EQ(dlock_lock_is_held(l), 1);
  CHECK_EQ(dlock_lock_release(l), 1);
  dlock_lock_free(l);
  dlock_client_close(c);
}

/* ---- a call's late answer is settled by the same owner's next call ---- */

typedef struct scripts_at {
  th_redis *r;
  long long want;
} scripts_at;

static bool scripts_reach(void *p) {
  scripts_at *x = p;
  return th_scripts_run(x->r) >= x->want;
}

/* A try refused by a quorum leaves its attempt queued on a stopped server;
 * the same owner's next try, taken by the other two, goes behind it there.
 * Running again, that server grants both: the first grant is a failed
 * call's, and a give-back of it, sent behind the second, would delete the
 * new hold there. It is not sent: the later acquire's call settles that
 * server (it kept its grant). */
static void t_giveback_after_next(void) {
  CHECK(start(3));
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.command_timeout_ms = 5000; /* the stopped server's attempts wait */
  dlock_client *c = th_client_opts(&o);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "rl:gb", NULL, &l), 0);
  for (int i = 1; i < 3; i++) /* another owner holds it there */
    freeReplyObject(th_cmd(&srv[i], "SET rl:gb other:1 PX 30000"));
  freeReplyObject(th_cmd(&srv[0], "CONFIG RESETSTAT"));
  th_redis_kill(&srv[0], SIGSTOP);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 10000, NULL), DLOCK_EBUSY);
  for (int i = 1; i < 3; i++)
    th_cmd_int(&srv[i], "DEL rl:gb");
  CHECK_RC(dlock_lock_try_acquire(l, 0, 10000, NULL), 0); /* by 1 and 2 */
  th_redis_kill(&srv[0], SIGCONT);
  /* Both attempts ran there; then the client's close lets what is still
   * in flight finish (a give-back would be). */
  scripts_at ran = {&srv[0], 2};
  CHECK(th_wait_for(scripts_reach, &ran, 3000));
  dlock_lock_free(l);
  dlock_client_close(c);
  for (int i = 0; i < 3; i++)
    CHECK_EQ(th_cmd_int(&srv[i], "EXISTS rl:gb"), 1);
}

static bool release_blocked(void *p) {
  return th_info_ll(p, "clients", "blocked_clients:", -1) >= 1;
}

typedef struct pinged {
  dlock_client *c;
  th_redis *r;
} pinged;

/* The client pings until it has a command connection to r again (besides
 * the harness's own; its subscriber's is another type): a ping sent on
 * the killed one reads its end, and only then does the next reconnect. */
static bool reconnected(void *p) {
  pinged *x = p;
  (void)dlock_client_ping(x->c);
  return th_clients(x->r, "normal") >= 2;
}

/* A release that a quorum answered leaves its part to the first server in
 * flight, where it waits (CLIENT PAUSE). Its connection is killed: the
 * release never ran there, and is sent again after a pause (growing with
 * each kill, to 160 ms after the sixth). Meanwhile the same owner's next
 * acquire goes to that server on the new connection: the release sent
 * again after it would delete the new hold there. It is not sent. */
static void t_release_resent_after_next(void) {
  CHECK(start(3));
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.command_timeout_ms = 5000; /* the release's part is sent again */
  dlock_client *c = th_client_opts(&o);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "rl:rr", NULL, &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 30000, NULL), 0);
  CHECK(exists_becomes(&srv[0], "rl:rr", 1));
  freeReplyObject(th_cmd(&srv[0], "CLIENT PAUSE 10000 WRITE"));
  CHECK_EQ(dlock_lock_release(l), 1); /* the second and the third */
  for (int kill = 0; kill < 6; kill++) {
    CHECK(th_wait_for(release_blocked, &srv[0], 3000));
    CHECK_EQ(th_cmd_int(&srv[0], "CLIENT KILL TYPE normal"), 1);
  }
  freeReplyObject(th_cmd(&srv[0], "CLIENT UNPAUSE"));
  pinged x = {c, &srv[0]};
  CHECK(th_wait_for(reconnected, &x, 3000));
  CHECK_RC(dlock_lock_try_acquire(l, 0, 30000, NULL), 0);
  /* The close lets the release's part end (sent again or not). */
  dlock_lock_free(l);
  dlock_client_close(c);
  for (int i = 0; i < 3; i++)
    CHECK_EQ(th_cmd_int(&srv[i], "EXISTS rl:rr"), 1);
}

/* ---- a take-away is heard at once ---- */
static atomic_int lost_calls;
static _Atomic int64_t lost_at;

static void on_lost_at(dlock_lock *l, const char *owner, void *ud) {
  (void)l, (void)owner, (void)ud;
  atomic_store(&lost_at, th_now_ms());
  atomic_fetch_add(&lost_calls, 1);
}

static bool lost_called(void *p) {
  (void)p;
  return atomic_load(&lost_calls) > 0;
}

/* Every server's subscriber listens to the revocation channel. */
static bool subscribed(int n) {
  for (int i = 0; i < n; i++)
    if (!th_wait_subscribed(&srv[i], "dlock_revoke", 3000)) return false;
  return true;
}

/* With keyspace events on, a deletion is heard and the quorum checked: on
 * one server of three the hold lives on (two still hold it); on a second
 * it is lost within 100 ms. */
static void t_deleted_by_quorum(void) {
  CHECK(start(3));
  for (int i = 0; i < 3; i++)
    th_cmd_int(&srv[i], "CONFIG SET notify-keyspace-events Egx");
  dlock_client *a = client(30000);
  CHECK(a != NULL);
  CHECK(subscribed(3));
  for (int i = 0; i < 3; i++)
    CHECK(th_wait_subscribed(&srv[i], "__keyevent@0__:del", 3000));
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(a, "rl:dq", NULL, &l), 0);
  dlock_lock_on_lost(l, on_lost_at, NULL);
  atomic_store(&lost_calls, 0);
  CHECK_RC(dlock_lock_acquire(l, 0, NULL), 0);
  CHECK(holders_become(3, "rl:dq", 3));
  /* A minority: the check (one script on each server) finds two holders. */
  long long calls = th_scripts_run(&srv[1]);
  th_cmd_int(&srv[0], "DEL rl:dq");
  int64_t end = th_now_ms() + 2000;
  while (th_scripts_run(&srv[1]) == calls && th_now_ms() < end)
    th_sleep_ms(2);
  CHECK(th_scripts_run(&srv[1]) > calls);
  CHECK(!th_wait_for(lost_called, NULL, 200));
  CHECK_EQ(dlock_lock_is_lost(l), 0);
  CHECK_EQ(dlock_lock_is_held(l), 1);
  /* A majority: lost. */
  int64_t t0 = th_now_ms();
  th_cmd_int(&srv[1], "DEL rl:dq");
  CHECK(th_wait_for(lost_called, NULL, 2000));
  int64_t took = atomic_load(&lost_at) - t0;
  fprintf(stderr, "    deleted on 2 of 3 -> lost callback %lld ms\n",
          (long long)took);
  CHECK(took < 100);
  CHECK_EQ(dlock_lock_is_lost(l), 1);
  dlock_lock_free(l);
  dlock_client_close(a);
}

/* A blocking client closed right after a release answered by a quorum
 * waits for the rest: a server that needs a second round trip (its script
 * cache flushed: NOSCRIPT, then the script) is released too, before the
 * close returns, so a process that exits right after leaves nothing. */
static void t_close_waits_for_release(void) {
  CHECK(start(3));
  for (int round = 0; round < 20; round++) {
    dlock_client *c = client(0);
    CHECK(c != NULL);
    dlock_lock *l;
    CHECK_RC(dlock_lock_new(c, "rl:close", NULL, &l), 0);
    CHECK_RC(dlock_lock_acquire(l, 10000, NULL), 0);
    CHECK(holders_become(3, "rl:close", 3));
    th_cmd_int(&srv[round % 3], "SCRIPT FLUSH");
    CHECK_EQ(dlock_lock_release(l), 1);
    dlock_lock_free(l);
    dlock_client_close(c);
    CHECK_EQ(holders(3, "rl:close"), 0); /* now, not eventually */
  }
}

/* A refusal is an answer: one server holding a hash at the name (it
 * refuses, WRONGTYPE), one down and one that grants: the attempt fails
 * (no quorum), and its message counts the refusal among the answers and
 * says what it was (it said "0 of 3 servers answered"). */
static void t_refusal_counted(void) {
  CHECK(start(3));
  th_cmd_int(&srv[0], "HSET rl:ref user alice");
  th_redis_kill(&srv[1], SIGKILL);
  dlock_client *c = client(0);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "rl:ref", NULL, &l), 0);
  int rc = dlock_lock_try_acquire(l, 0, 10000, NULL);
  const char *msg = dlock_client_errmsg(c);
  fprintf(stderr, "    %s: %s\n", dlock_err_name(rc), msg);
  CHECK(rc < 0);
  /* The refusal, and the grant if it came before the round was decided. */
  CHECK(strstr(msg, "1 of 3 servers answered") != NULL ||
        strstr(msg, "2 of 3 servers answered") != NULL);
  CHECK(strstr(msg, "not a dlock") != NULL); /* what the refusal said */
  /* The grant undone (perhaps after the round was decided), and the hash
   * untouched. */
  CHECK(holders_become(3, "rl:ref", 1));
  redisReply *r = th_cmd(&srv[0], "HGETALL rl:ref");
  CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        strcmp(r->element[0]->str, "user") == 0 &&
        strcmp(r->element[1]->str, "alice") == 0);
  if (r) freeReplyObject(r);
  dlock_lock_free(l);
  dlock_client_close(c);
}

/* With every server down, the error names each of them and why. */
static void t_all_down_named(void) {
  int port[3];
  int at = snprintf(url, sizeof url, "redlock://");
  for (int i = 0; i < 3; i++) {
    port[i] = th_free_port();
    at += snprintf(url + at, sizeof url - (size_t)at, "%s127.0.0.1:%d",
                   i ? "," : "", port[i]);
  }
  dlock_client *c = client(0);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "rl:down", NULL, &l), 0);
  int rc = dlock_lock_try_acquire(l, 0, 10000, NULL);
  CHECK(rc == DLOCK_ECONNECT || rc == DLOCK_ECONNLOST);
  const char *msg = dlock_client_errmsg(c);
  fprintf(stderr, "    %s\n", msg);
  CHECK(strstr(msg, "0 of 3 servers answered") != NULL);
  for (int i = 0; i < 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "127.0.0.1:%d", port[i]);
    CHECK(strstr(msg, name) != NULL);
  }
  CHECK(dlock_client_ping(c) < 0);
  CHECK(strstr(dlock_client_errmsg(c), "0 of 3 servers answered") != NULL);
  dlock_lock_free(l);
  dlock_client_close(c);
}

/* An acquire with no wait limit whose servers all answer an error that
 * is no passing state (NOREPLICAS: min-replicas-to-write with no replica)
 * returns it after its first attempt, as redis:// does; it retried the
 * servers' refusal for ever. The acquire runs on a thread; a shutdown ends
 * it if it is still trying after 10 command timeouts. */
typedef struct {
  dlock_client *c;
  dlock_lock *l;
  atomic_int rc, done;
  char msg[600]; /* the client's error text on the acquiring thread */
} unlimited;

static void *acquire_unlimited(void *p) {
  unlimited *u = p;
  atomic_store(&u->rc, dlock_lock_acquire(u->l, 10000, NULL));
  snprintf(u->msg, sizeof u->msg, "%s", dlock_client_errmsg(u->c));
  atomic_store(&u->done, 1);
  return NULL;
}

static bool unlimited_done(void *p) {
  return atomic_load(&((unlimited *)p)->done) != 0;
}

static void t_unlimited_wait_refused(void) {
  CHECK(start(3));
  for (int i = 0; i < 3; i++)
    th_cmd_int(&srv[i], "CONFIG SET min-replicas-to-write 1");
  dlock_client *c = client(0);
  CHECK(c != NULL);
  unlimited u = {.c = c};
  CHECK_RC(dlock_lock_new(c, "rl:unlimited", NULL, &u.l), 0);
  int64_t t0 = th_now_ms();
  pthread_t th;
  CHECK(pthread_create(&th, NULL, acquire_unlimited, &u) == 0);
  bool done = th_wait_for(unlimited_done, &u, (int)th_soon(5000));
  if (!done) dlock_client_shutdown(c);
  pthread_join(th, NULL);
  int rc = atomic_load(&u.rc);
  fprintf(stderr, "    %s after %lld ms: %s\n", dlock_err_name(rc),
          (long long)(th_now_ms() - t0), u.msg);
  CHECK(done);
  CHECK_RC(rc, DLOCK_ESERVER);
  CHECK(strstr(u.msg, "NOREPLICAS") != NULL);
  CHECK(th_now_ms() - t0 < th_soon(1000)); /* the first attempt's answer */
  CHECK_EQ(holders(3, "rl:unlimited"), 0);
  dlock_lock_free(u.l);
  dlock_client_close(c);
}

/* Blocking calls from many threads at once on one client: whoever drives
 * the servers' loop (a call alone, or the loop's thread for overlapping
 * calls), every call is answered, and one lock stays exclusive. */
enum { SHARE_THREADS = 6, SHARE_CYCLES = 30 };
typedef struct share {
  dlock_client *c;
  atomic_int inside, overlaps, failed;
} share;

static void *share_run(void *p) {
  share *s = p;
  dlock_lock *l;
  if (dlock_lock_new(s->c, "rl:share", NULL, &l) != 0) {
    atomic_fetch_add(&s->failed, 1);
    return NULL;
  }
  for (int i = 0; i < SHARE_CYCLES; i++) {
    if (dlock_lock_acquire(l, 5000, NULL) != 0) {
      atomic_fetch_add(&s->failed, 1);
      continue;
    }
    if (atomic_fetch_add(&s->inside, 1) != 0) atomic_fetch_add(&s->overlaps, 1);
    atomic_fetch_sub(&s->inside, 1);
    if (dlock_lock_release(l) != 1) atomic_fetch_add(&s->failed, 1);
  }
  dlock_lock_free(l);
  return NULL;
}

static void t_threads_share_loop(void) {
  CHECK(start(3));
  dlock_client *c = client(0);
  CHECK(c != NULL);
  share s = {.c = c};
  pthread_t th[SHARE_THREADS];
  for (int i = 0; i < SHARE_THREADS; i++)
    CHECK(pthread_create(&th[i], NULL, share_run, &s) == 0);
  for (int i = 0; i < SHARE_THREADS; i++) pthread_join(th[i], NULL);
  CHECK_EQ(atomic_load(&s.failed), 0);
  CHECK_EQ(atomic_load(&s.overlaps), 0);
  CHECK(holders_become(3, "rl:share", 0));
  dlock_client_close(c);
}

/* A long blocking wait costs no wake-ups: the call that waits drives the
 * servers' loop itself, and the loop's thread sleeps until it stops (it
 * looked every 2 ms: about 500 voluntary context switches a second). */
static void t_long_wait_quiet(void) {
  CHECK(start(3));
  dlock_client *a = client(0), *b = client(0);
  CHECK(a && b);
  dlock_lock *la, *lb;
  CHECK_RC(dlock_lock_new(a, "rl:quiet", "a", &la), 0);
  CHECK_RC(dlock_lock_new(b, "rl:quiet", "b", &lb), 0);
  CHECK_RC(dlock_lock_try_acquire(la, 0, 30000, NULL), 0);
  struct rusage r0, r1;
  getrusage(RUSAGE_SELF, &r0);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_try_acquire(lb, 1000, 30000, NULL), DLOCK_EBUSY);
  int64_t took = th_now_ms() - t0;
  getrusage(RUSAGE_SELF, &r1);
  long sw = r1.ru_nvcsw - r0.ru_nvcsw;
  fprintf(stderr, "    a %lld ms wait: %ld voluntary context switches\n",
          (long long)took, sw);
  CHECK(took >= 1000);
  CHECK(sw < 250);
  CHECK_EQ(dlock_lock_release(la), 1);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_close(a);
  dlock_client_close(b);
}

/* Inspect shows the holder a quorum agrees on: with the hold gone from
 * one of three servers (a rival's failed attempt there comes and goes)
 * and that server answering first, it showed the lock free (so
 * dlock_leader_get_current answered "nobody" while a leader led). */
static void t_inspect_quorum(void) {
  CHECK(start(3));
  dlock_client *c = client(0);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "rl:insp", "me", &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 10000, NULL), 0);
  CHECK_EQ(th_cmd_int(&srv[0], "DEL rl:insp"), 1);
  /* The two that hold it answer 200 ms later. */
  th_cmd_int(&srv[1], "CLIENT PAUSE 200");
  th_cmd_int(&srv[2], "CLIENT PAUSE 200");
  dlock_lock_state st;
  CHECK_RC(dlock_lock_inspect(l, &st), 0);
  fprintf(stderr, "    held %d by '%s'\n", st.held, st.owner);
  CHECK_EQ(st.held, 1);
  const char *colon = strrchr(st.owner, ':'); /* "<client id>:me" */
  CHECK(colon != NULL && strcmp(colon, ":me") == 0);
  CHECK_EQ(dlock_lock_release(l), 1);
  CHECK_RC(dlock_lock_inspect(l, &st), 0);
  CHECK_EQ(st.held, 0);
  dlock_lock_free(l);
  dlock_client_close(c);
}

/* A force release answers whether a quorum held the lock: a key left on
 * a minority (a grant given back late, an acquire that failed) is deleted
 * but answers 0, as the lock was free; even when that minority's answer
 * comes first (the conformance suite's t_takeaway once saw 1 from the
 * holder's late grant on the third server). */
static void t_force_by_quorum(void) {
  CHECK(start(3));
  dlock_client *a = client(0), *b = client(0);
  CHECK(a && b);
  dlock_lock *h, *f;
  CHECK_RC(dlock_lock_new(a, "rl:f", "holder", &h), 0);
  CHECK_RC(dlock_lock_new(b, "rl:f", NULL, &f), 0);
  CHECK_RC(dlock_lock_try_acquire(h, 0, 10000, NULL), 0);
  CHECK(holders_become(3, "rl:f", 3));
  th_cmd_int(&srv[0], "DEL rl:f");
  th_cmd_int(&srv[1], "DEL rl:f");
  /* srv[2] (1) and srv[0] (0) answer at once, srv[1] 200 ms later. */
  th_cmd_int(&srv[1], "CLIENT PAUSE 200");
  CHECK_EQ(dlock_lock_force_release(f), 0);
  CHECK(holders_become(3, "rl:f", 0));
  /* Held by a quorum: 1, whichever answers first. */
  CHECK_RC(dlock_lock_try_acquire(h, 0, 10000, NULL), 0);
  CHECK(holders_become(3, "rl:f", 3));
  th_cmd_int(&srv[0], "DEL rl:f");
  CHECK_EQ(dlock_lock_force_release(f), 1);
  CHECK(holders_become(3, "rl:f", 0));
  CHECK_EQ(dlock_lock_force_release(f), 0);
  dlock_lock_free(h);
  dlock_lock_free(f);
  dlock_client_close(a);
  dlock_client_close(b);
}

TH_MAIN(T_BARE(t_quorum_table_3), T_BARE(t_quorum_table_5),
        T_BARE(t_acquire_validity_release), T_BARE(t_minority_taken),
        T_BARE(t_fencing_over_quorums), T_BARE(t_renew_by_quorum),
        T_BARE(t_async), T_BARE(t_layouts), T_BARE(t_token_proposed),
        T_BARE(t_delayed_restart), T_BARE(t_replica_ack),
        T_BARE(t_replica_auto), T_BARE(t_bad_urls), T_BARE(t_duplicate_server),
        T_BARE(t_stalled_server), T_BARE(t_first_use_in_order),
        T_BARE(t_giveback_after_next), T_BARE(t_release_resent_after_next),
        T_BARE(t_deleted_by_quorum), T_BARE(t_all_down_named),
        T_BARE(t_close_waits_for_release), T_BARE(t_refusal_counted),
        T_BARE(t_unlimited_wait_refused), T_BARE(t_inspect_quorum),
        T_BARE(t_threads_share_loop), T_BARE(t_long_wait_quiet),
        T_BARE(t_force_by_quorum))
