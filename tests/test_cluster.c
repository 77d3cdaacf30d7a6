/* test_cluster.c: redis-cluster:// URLs: the slot map, routing by slot,
 * MOVED and ASK followed, every kind's keys in its name's slot, waiting
 * through the subscriber of the slot's master, multi-locks across masters,
 * the CLI's commands (a 3-master cluster started by the harness for each
 * test). */
#include "harness.h"
#include "loop_drivers.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static th_cluster K;

static dlock_client *open_cluster(int64_t watchdog_ms) {
  return th_client_url(K.url, watchdog_ms);
}

/* A lock name whose slot master `node` owns (name_<i> for the first i). */
static void name_on(int node, const char *base, char *out, size_t len) {
  for (int i = 0;; i++) {
    snprintf(out, len, "%s%d", base, i);
    if (th_cluster_node_of(&K, out) == node) return;
  }
}

static long long slot_of(const char *key) {
  return th_cmd_int(&K.nodes[0], "CLUSTER KEYSLOT %s", key);
}

/* The URL's forms, what it refuses, and a clear error when no node gives
 * a slot map (none listens; a server without cluster support). */
static void url_forms(void) {
  static const char *bad[] = {
      "redis-cluster://",              /* no node */
      "redis-cluster://127.0.0.1:1,",  /* empty node */
      "redis-cluster://127.0.0.1:x",   /* bad port */
      "redis-cluster://127.0.0.1:1/2", /* a database */
  };
  CHECK(th_urls_refused(bad, sizeof bad / sizeof bad[0]));
  int p1 = th_free_port();
  th_redis plain;
  CHECK(th_redis_start(&plain, "") == 0);
  char url[200];
  snprintf(url, sizeof url, "redis-cluster://127.0.0.1:%d,127.0.0.1:%d", p1,
           plain.port);
  CHECK_RC(th_open_rc(url, 500), DLOCK_ECONNECT);
  const char *m = dlock_client_open_errmsg();
  CHECK(strstr(m, "no cluster node gave its slot map") != NULL);
  char p1s[32];
  snprintf(p1s, sizeof p1s, "127.0.0.1:%d", p1);
  CHECK(strstr(m, p1s) != NULL);
  CHECK(strstr(m, "cluster support disabled") != NULL);
  th_redis_stop(&plain);
}

/* Locks on each master: the hash lands on the owner of its slot, a second
 * client is refused, and the tokens grow per lock. */
static void routed(void) {
  CHECK(th_cluster_start(&K, NULL) == 0);
  /* A dead seed first: the next one is asked. */
  char url[700];
  snprintf(url, sizeof url, "redis-cluster://127.0.0.1:%d,%s", th_free_port(),
           K.url + strlen("redis-cluster://"));
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = 500;
  dlock_client *a = th_client_opts(&o), *b = open_cluster(0);
  CHECK(a && b);
  for (int node = 0; node < 3; node++) {
    char name[64];
    name_on(node, "routed", name, sizeof name);
    dlock_lock *la = NULL, *lb = NULL;
    CHECK_RC(dlock_lock_new(a, name, NULL, &la), 0);
    CHECK_RC(dlock_lock_new(b, name, NULL, &lb), 0);
    uint64_t t1 = 0, t2 = 0;
    CHECK_RC(dlock_lock_try_acquire(la, 0, 10000, &t1), 0);
    CHECK_EQ(th_cmd_int(&K.nodes[node], "EXISTS %s", name), 1);
    CHECK_RC(dlock_lock_try_acquire(lb, 0, 10000, NULL), DLOCK_ELOCKED);
    CHECK_EQ(dlock_lock_is_locked(lb), 1);
    CHECK_EQ(dlock_lock_is_held(la), 1);
    int64_t ttl = 0;
    CHECK_RC(dlock_lock_remaining_ttl(lb, &ttl), 0);
    CHECK(ttl > 0 && ttl <= 10000);
    CHECK_RC(dlock_lock_release(la), 1);
    CHECK_RC(dlock_lock_try_acquire(lb, 0, 10000, &t2), 0);
    CHECK(t2 > t1);
    CHECK_RC(dlock_lock_release(lb), 1);
    CHECK_EQ(th_cmd_int(&K.nodes[node], "EXISTS %s", name), 0);
    dlock_lock_free(la);
    dlock_lock_free(lb);
  }
  dlock_client_close(a);
  dlock_client_close(b);
  th_cluster_stop(&K);
}

typedef struct waiter_arg {
  dlock_client *c;
  const char *name;
  int rc;
  int64_t waited;
} waiter_arg;

static void *waiter(void *p) {
  waiter_arg *w = p;
  dlock_lock *l = NULL;
  w->rc = dlock_lock_new(w->c, w->name, NULL, &l);
  int64_t t0 = th_now_ms();
  if (w->rc == 0) w->rc = dlock_lock_try_acquire(l, 20000, 60000, NULL);
  w->waited = th_now_ms() - t0;
  if (w->rc == 0) w->rc = dlock_lock_release(l) == 1 ? 0 : -1;
  dlock_lock_free(l);
  return NULL;
}

static bool subscribed_on(void *arg) {
  const char *ch = arg;
  for (int i = 0; i < 3; i++) {
    redisReply *r = th_cmd(&K.nodes[i], "PUBSUB SHARDNUMSUB %s", ch);
    bool yes = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
               r->element[1]->integer > 0;
    if (r) freeReplyObject(r);
    if (yes) return th_cluster_node_of(&K, ch) == i;
  }
  return false;
}

/* A waiter subscribes on the master of its lock's slot and is woken by the
 * release, well before the lease would end. */
static void wait_woken(void) {
  CHECK(th_cluster_start(&K, NULL) == 0);
  dlock_client *a = open_cluster(0), *b = open_cluster(0);
  CHECK(a && b);
  for (int node = 0; node < 3; node++) {
    char name[64], ch[128];
    name_on(node, "woken", name, sizeof name);
    snprintf(ch, sizeof ch, "redisson_lock__channel:{%s}", name);
    dlock_lock *l = NULL;
    CHECK_RC(dlock_lock_new(a, name, NULL, &l), 0);
    CHECK_RC(dlock_lock_try_acquire(l, 0, 60000, NULL), 0);
    waiter_arg w = {b, name, -99, 0};
    pthread_t t;
    pthread_create(&t, NULL, waiter, &w);
    CHECK(th_wait_for(subscribed_on, ch, 5000));
    CHECK_RC(dlock_lock_release(l), 1);
    pthread_join(t, NULL);
    CHECK_RC(w.rc, 0);
    CHECK(w.waited < 5000);
    dlock_lock_free(l);
  }
  dlock_client_close(a);
  dlock_client_close(b);
  th_cluster_stop(&K);
}

typedef struct keys_ctx {
  long long slot;
  int found, wrong;
  char bad[200];
} keys_ctx;

/* Every key on every master that contains `tag`: each in slot ctx->slot. */
static void check_keys(const char *tag, keys_ctx *x) {
  for (int i = 0; i < 3; i++) {
    redisReply *r = th_cmd(&K.nodes[i], "KEYS *%s*", tag);
    CHECK(r && r->type == REDIS_REPLY_ARRAY);
    for (size_t k = 0; r && k < r->elements; k++) {
      x->found++;
      if (slot_of(r->element[k]->str) != x->slot) {
        x->wrong++;
        snprintf(x->bad, sizeof x->bad, "%s", r->element[k]->str);
      }
    }
    if (r) freeReplyObject(r);
  }
}

/* Every kind of synchronizer keeps all its keys in its name's slot (the
 * {name} rule), and works on a cluster. */
static void kinds_one_slot(void) {
  CHECK(th_cluster_start(&K, "--notify-keyspace-events Egx") == 0);
  dlock_client *c = open_cluster(0);
  CHECK(c != NULL);
  static const char *const names[] = {"k-lock",  "k-fair", "k-rw",
                                      "k-sem",   "k-perm", "k-latch",
                                      "k-queue", "k-delay"};
  /* lock with a fencing token */
  dlock_lock *l = NULL;
  CHECK_RC(dlock_lock_new(c, names[0], NULL, &l), 0);
  uint64_t tok = 0;
  CHECK_RC(dlock_lock_try_acquire(l, 0, 30000, &tok), 0);
  CHECK(tok > 0);
  /* fair lock, with a queued waiter from another client */
  dlock_lock *f = NULL;
  CHECK_RC(dlock_fairlock_new(c, names[1], NULL, 0, &f), 0);
  CHECK_RC(dlock_lock_try_acquire(f, 0, 30000, NULL), 0);
  dlock_client *c2 = open_cluster(0);
  dlock_lock *f2 = NULL;
  CHECK_RC(dlock_fairlock_new(c2, names[1], NULL, 0, &f2), 0);
  CHECK_RC(dlock_lock_try_acquire(f2, 200, 30000, NULL), DLOCK_EBUSY);
  /* read-write lock: a reader and a refused writer */
  dlock_rwlock *rw = NULL, *rw2 = NULL;
  CHECK_RC(dlock_rwlock_new(c, names[2], NULL, &rw), 0);
  CHECK_RC(dlock_rwlock_new(c2, names[2], NULL, &rw2), 0);
  CHECK_RC(dlock_lock_try_acquire(dlock_rwlock_read(rw), 0, 30000, NULL), 0);
  CHECK_RC(dlock_lock_try_acquire(dlock_rwlock_write(rw2), 0, 30000, NULL),
           DLOCK_ELOCKED);
  /* semaphore */
  dlock_semaphore *s = NULL;
  CHECK_RC(dlock_semaphore_new(c, names[3], &s), 0);
  CHECK_RC(dlock_semaphore_try_set_permits(s, 2), 1);
  CHECK_RC(dlock_semaphore_try_acquire(s, 1, 0), 0);
  CHECK_EQ(dlock_semaphore_get_available(s), 1);
  /* permit-expirable semaphore */
  dlock_permits *p = NULL;
  CHECK_RC(dlock_permits_new(c, names[4], &p), 0);
  CHECK_RC(dlock_permits_try_set(p, 1), 1);
  char id[DLOCK_PERMIT_ID_LEN];
  CHECK_RC(dlock_permits_try_acquire(p, 0, 30000, id), 0);
  CHECK_EQ(dlock_permits_get_available(p), 0);
  /* latch */
  dlock_latch *la = NULL;
  CHECK_RC(dlock_latch_new(c, names[5], &la), 0);
  CHECK_RC(dlock_latch_try_set_count(la, 2), 1);
  CHECK_RC(dlock_latch_count_down(la), 0);
  /* queue, reliable take left unacknowledged */
  dlock_queue *q = NULL;
  CHECK_RC(dlock_queue_new(c, names[6], &q), 0);
  CHECK_RC(dlock_queue_offer(q, "a", 1), 0);
  CHECK_RC(dlock_queue_offer(q, "b", 1), 0);
  void *v = NULL;
  size_t vl = 0;
  CHECK_RC(dlock_queue_poll_reliable(q, 0, &v, &vl), 0);
  dlock_queue_value_free(v);
  /* delayed queue */
  dlock_queue *dq = NULL;
  CHECK_RC(dlock_queue_new_delayed(c, names[7], &dq), 0);
  CHECK_RC(dlock_queue_offer_delayed(dq, 60000, "later", 5), 0);
  CHECK_RC(dlock_queue_offer_delayed(dq, 1, "soon", 4), 0);
  v = NULL;
  CHECK_RC(dlock_queue_poll(dq, 5000, &v, &vl), 0);
  CHECK(vl == 4 && v && memcmp(v, "soon", 4) == 0);
  dlock_queue_value_free(v);

  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    keys_ctx x = {slot_of(names[i]), 0, 0, ""};
    check_keys(names[i], &x);
    if (x.found == 0 || x.wrong != 0)
      fprintf(stderr, "    %s: %d keys, %d in another slot (%s)\n", names[i],
              x.found, x.wrong, x.bad);
    CHECK(x.found > 0);
    CHECK_EQ(x.wrong, 0);
  }

  CHECK_RC(dlock_lock_release(l), 1);
  CHECK_RC(dlock_lock_release(f), 1);
  CHECK_RC(dlock_lock_release(dlock_rwlock_read(rw)), 1);
  CHECK_RC(dlock_semaphore_release(s, 1), 0);
  CHECK_RC(dlock_permits_release(p, id), 0);
  dlock_lock_free(l);
  dlock_lock_free(f);
  dlock_lock_free(f2);
  dlock_rwlock_free(rw);
  dlock_rwlock_free(rw2);
  dlock_semaphore_free(s);
  dlock_permits_free(p);
  dlock_latch_free(la);
  dlock_queue_free(q);
  dlock_queue_free(dq);
  dlock_client_close(c2);
  dlock_client_close(c);
  th_cluster_stop(&K);
}

/* Holds on every master, renewed by the watchdog in scripts cut by slot
 * (one script over keys of different slots would be refused). */
static void renew_by_slot(void) {
  CHECK(th_cluster_start(&K, NULL) == 0);
  dlock_client *c = open_cluster(1500);
  CHECK(c != NULL);
  enum { N = 12 };
  dlock_lock *ls[N];
  for (int i = 0; i < N; i++) {
    char name[32];
    snprintf(name, sizeof name, "renew%d", i);
    CHECK_RC(dlock_lock_new(c, name, NULL, &ls[i]), 0);
    CHECK_RC(dlock_lock_acquire(ls[i], -1, NULL), 0);
  }
  th_sleep_ms(3500); /* more than two leases: renewed or lost */
  for (int i = 0; i < N; i++) {
    CHECK_EQ(dlock_lock_is_lost(ls[i]), 0);
    CHECK_EQ(dlock_lock_is_held(ls[i]), 1);
    CHECK_RC(dlock_lock_release(ls[i]), 1);
    dlock_lock_free(ls[i]);
  }
  dlock_client_close(c);
  th_cluster_stop(&K);
}

/* A multi-lock over members on the three masters: all or nothing. */
static void multilock_across(void) {
  CHECK(th_cluster_start(&K, NULL) == 0);
  dlock_client *c = open_cluster(0), *c2 = open_cluster(0);
  CHECK(c && c2);
  dlock_lock *ls[3], *other = NULL;
  char names[3][64];
  for (int node = 0; node < 3; node++) {
    name_on(node, "ml", names[node], sizeof names[node]);
    CHECK_RC(dlock_lock_new(c, names[node], NULL, &ls[node]), 0);
  }
  dlock_multilock *m = NULL;
  CHECK_RC(dlock_multilock_new(ls, 3, &m), 0);
  /* One member taken elsewhere: nothing is taken. */
  CHECK_RC(dlock_lock_new(c2, names[2], NULL, &other), 0);
  CHECK_RC(dlock_lock_try_acquire(other, 0, 30000, NULL), 0);
  CHECK_RC(dlock_multilock_try_acquire(m, 0, 30000, NULL), DLOCK_EBUSY);
  CHECK_EQ(th_cmd_int(&K.nodes[0], "EXISTS %s", names[0]), 0);
  CHECK_EQ(th_cmd_int(&K.nodes[1], "EXISTS %s", names[1]), 0);
  CHECK_RC(dlock_lock_release(other), 1);
  CHECK_RC(dlock_multilock_try_acquire(m, 0, 30000, NULL), 0);
  for (int node = 0; node < 3; node++)
    CHECK_EQ(th_cmd_int(&K.nodes[node], "EXISTS %s", names[node]), 1);
  CHECK_RC(dlock_multilock_release(m), 0);
  for (int node = 0; node < 3; node++)
    CHECK_EQ(th_cmd_int(&K.nodes[node], "EXISTS %s", names[node]), 0);
  dlock_multilock_free(m);
  for (int i = 0; i < 3; i++)
    dlock_lock_free(ls[i]);
  dlock_lock_free(other);
  dlock_client_close(c);
  dlock_client_close(c2);
  th_cluster_stop(&K);
}

typedef struct release_arg {
  dlock_lock *l;
  int rc;
} release_arg;

static void *release_thread(void *p) {
  release_arg *a = p;
  a->rc = dlock_lock_release(a->l);
  return NULL;
}

/* A slot resharded while a lock in it is held: the holder's release
 * follows MOVED to the new master. During the next migration, a question
 * about a key already moved follows ASK (ASKING there), and a release
 * whose keys are split between the two masters is retried (TRYAGAIN)
 * until the migration ends. */
static void moved_and_ask(void) {
  CHECK(th_cluster_start(&K, NULL) == 0);
  dlock_client *c = open_cluster(0), *c2 = open_cluster(0);
  CHECK(c && c2);
  char name[64];
  name_on(0, "mv", name, sizeof name);
  int slot = (int)slot_of(name);
  dlock_lock *l = NULL, *l2 = NULL;
  /* An owner of its own: another thread releases it below. */
  CHECK_RC(dlock_lock_new(c, name, "holder", &l), 0);
  CHECK_RC(dlock_lock_new(c2, name, NULL, &l2), 0);
  uint64_t t1 = 0, t2 = 0;
  CHECK_RC(dlock_lock_try_acquire(l, 0, 60000, &t1), 0);
  /* Resharded to node 1 with the lock held: every key of the slot moves. */
  CHECK_RC(th_cluster_slot_begin(&K, slot, 0, 1), 0);
  CHECK(th_cluster_slot_move_keys(&K, slot, 0, 1, 100) >= 2); /* hash, token */
  CHECK_RC(th_cluster_slot_end(&K, slot, 1), 0);
  CHECK_EQ(th_cmd_int(&K.nodes[1], "EXISTS %s", name), 1);
  CHECK_RC(dlock_lock_try_acquire(l2, 0, 60000, NULL), DLOCK_ELOCKED);
  CHECK_RC(dlock_lock_release(l), 1); /* MOVED, followed */
  CHECK_EQ(th_cmd_int(&K.nodes[1], "EXISTS %s", name), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 60000, &t2), 0);
  CHECK(t2 > t1); /* the token's counter moved with the slot */
  /* Migrating to node 2: only the lock's hash has moved so far. */
  CHECK_RC(th_cluster_slot_begin(&K, slot, 1, 2), 0);
  redisReply *r = th_cmd(&K.nodes[1], "MIGRATE 127.0.0.1 %d %s 0 5000",
                         K.nodes[2].port, name);
  CHECK(r && r->type == REDIS_REPLY_STATUS);
  if (r) freeReplyObject(r);
  CHECK_EQ(dlock_lock_is_locked(l2), 1); /* EXISTS: ASK, then node 2 */
  CHECK_EQ(dlock_lock_is_held(l), 1);    /* HEXISTS: the same */
  release_arg a = {l, -99};
  pthread_t t;
  pthread_create(&t, NULL, release_thread, &a);
  th_sleep_ms(300); /* it meets TRYAGAIN meanwhile */
  CHECK_EQ(a.rc, -99);
  CHECK(th_cluster_slot_move_keys(&K, slot, 1, 2, 100) >= 1);
  CHECK_RC(th_cluster_slot_end(&K, slot, 2), 0);
  pthread_join(t, NULL);
  CHECK_RC(a.rc, 1);
  CHECK_EQ(th_cmd_int(&K.nodes[2], "EXISTS %s", name), 0);
  CHECK_RC(dlock_lock_try_acquire(l2, 0, 60000, NULL), 0);
  CHECK_RC(dlock_lock_release(l2), 1);
  dlock_lock_free(l);
  dlock_lock_free(l2);
  dlock_client_close(c);
  dlock_client_close(c2);
  th_cluster_stop(&K);
}

/* The CLI on the cluster: its exit status, its stdout into out. */
#define run_cli(out, len, ...)                                                 \
  th_cli(DLOCK_CLI_PATH, K.url, out, len, __VA_ARGS__)

static bool lost(void *l) {
  return dlock_lock_is_lost(l) == 1;
}

/* The CLI on redis-cluster://: run, status, list over every master,
 * release --force routed by slot, bench. */
static void cli_commands(void) {
  CHECK(th_cluster_start(&K, NULL) == 0);
  char out[8192];
  CHECK_EQ(run_cli(out, sizeof out, "run cli-a -- true"), 0);
  dlock_client *c = open_cluster(0);
  dlock_lock *ls[3];
  char names[3][64];
  for (int node = 0; node < 3; node++) {
    name_on(node, "cli", names[node], sizeof names[node]);
    CHECK_RC(dlock_lock_new(c, names[node], NULL, &ls[node]), 0);
    CHECK_RC(dlock_lock_try_acquire(ls[node], 0, 60000, NULL), 0);
  }
  CHECK_EQ(run_cli(out, sizeof out, "list"), 0);
  for (int node = 0; node < 3; node++)
    CHECK(strstr(out, names[node]) != NULL);
  CHECK_EQ(run_cli(out, sizeof out, "status %s", names[2]), 0);
  CHECK(strstr(out, "held") != NULL || strstr(out, "locked") != NULL);
  CHECK_EQ(run_cli(out, sizeof out, "release --force %s", names[1]), 0);
  CHECK_EQ(th_cmd_int(&K.nodes[1], "EXISTS %s", names[1]), 0);
  CHECK(th_wait_for(lost, ls[1], 5000));
  CHECK_EQ(run_cli(out, sizeof out, "run --wait 0 %s -- true", names[0]), 75);
  CHECK_EQ(run_cli(out, sizeof out, "bench -t 4 -d 1s uncontended"), 0);
  CHECK(strstr(out, "cycles") != NULL || strstr(out, "ops") != NULL);
  for (int node = 0; node < 3; node++)
    dlock_lock_free(ls[node]);
  dlock_client_close(c);
  th_cluster_stop(&K);
}

/* One master stopped (SIGSTOP: it accepts connections and never
 * answers): a client that never touches its slots does not wait for it.
 * Before, asking it for its keyspace-event settings and closing its
 * subscriber (stuck in its handshake) each cost the connect timeout, on
 * every CLI command. */
static void stopped_master(void) {
  CHECK(th_cluster_start(&K, NULL) == 0);
  for (int i = 0; i < 2; i++) /* the cluster stays up without node 2 */
    th_cmd_int(&K.nodes[i], "CONFIG SET cluster-require-full-coverage no");
  char name[64];
  name_on(0, "stopped", name, sizeof name);
  CHECK(kill(K.nodes[2].pid, SIGSTOP) == 0);
  int64_t t0 = th_now_ms();
  dlock_client *c = open_cluster(0); /* connect timeout 1000 ms */
  CHECK(c != NULL);
  dlock_lock *l = NULL;
  CHECK_RC(dlock_lock_new(c, name, NULL, &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 10000, NULL), 0);
  CHECK_RC(dlock_lock_release(l), 1);
  dlock_lock_free(l);
  dlock_client_close(c);
  int64_t took = th_now_ms() - t0;
  char out[4096];
  int64_t t1 = th_now_ms();
  CHECK_EQ(run_cli(out, sizeof out, "run -w 1s %s -- true", name), 0);
  int64_t cli = th_now_ms() - t1;
  CHECK(kill(K.nodes[2].pid, SIGCONT) == 0);
  printf("    with master 2 stopped: open..close %lld ms, dlock run %lld ms\n",
         (long long)took, (long long)cli);
  CHECK(took < th_soon(900));
  CHECK(cli < th_soon(1900)); /* the CLI's connect timeout is 2 s */
  th_cluster_stop(&K);
}

/* A cluster that is down (a master stopped, no replica to promote):
 * CLUSTERDOWN is reported for what it is, promptly; a wait rides it out
 * within its own time. Before, it read "no reply before the command
 * timeout" after the command timeout. */
static bool cluster_failed(void *p) {
  (void)p;
  redisReply *r = th_cmd(&K.nodes[0], "CLUSTER INFO");
  bool down = r && r->str && strstr(r->str, "cluster_state:fail") != NULL;
  if (r) freeReplyObject(r);
  return down;
}
static void cluster_down(void) {
  CHECK(th_cluster_start(&K, NULL) == 0);
  char name[64];
  name_on(0, "down", name, sizeof name);
  dlock_client *c = open_cluster(0); /* command timeout 3 s */
  CHECK(c != NULL);
  dlock_lock *l = NULL;
  CHECK_RC(dlock_lock_new(c, name, NULL, &l), 0);
  CHECK(kill(K.nodes[2].pid, SIGSTOP) == 0);
  CHECK(th_wait_for(cluster_failed, NULL, 15000));
  int64_t t0 = th_now_ms();
  int rc = dlock_lock_try_acquire(l, 0, 10000, NULL);
  int64_t once = th_now_ms() - t0;
  char msg[300];
  snprintf(msg, sizeof msg, "%s", dlock_client_errmsg(c));
  t0 = th_now_ms();
  int rc2 = dlock_lock_try_acquire(l, 1000, 10000, NULL);
  int64_t waited = th_now_ms() - t0;
  CHECK(kill(K.nodes[2].pid, SIGCONT) == 0);
  printf("    CLUSTERDOWN: one try %lld ms (%s), a 1 s wait %lld ms\n",
         (long long)once, msg, (long long)waited);
  CHECK_RC(rc, DLOCK_ESERVER);
  CHECK(strstr(msg, "CLUSTERDOWN") != NULL);
  CHECK(once < 1500);
  CHECK_RC(rc2, DLOCK_ESERVER);
  CHECK(waited >= 900 && waited < 2500);
  CHECK(strstr(dlock_client_errmsg(c), "CLUSTERDOWN") != NULL);
  dlock_lock_free(l);
  dlock_client_close(c);
  th_cluster_stop(&K);
}

/* ---- the event-loop client on redis-cluster:// ---- */

/* An event-loop client of the cluster on a fresh built-in loop. */
static dlock_client *open_loop_cluster(td_loop *t) {
  if (td_open(t, TD_BUILTIN) != 0) return NULL;
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = K.url;
  o.connect_timeout_ms = 1000;
  dlock_client *c = NULL;
  if (dlock_client_open_async(&o, t->lp, &c) != 0) return NULL;
  return c;
}

/* Runs t until cond(arg) holds or ms pass; whether it held. */
static bool loop_until(td_loop *t, bool (*cond)(void *), void *arg, int ms) {
  int64_t end = th_now_ms() + ms;
  while (!cond(arg)) {
    if (th_now_ms() >= end) return false;
    td_once(t, 20);
  }
  return true;
}

/* One operation on t: its outcome. */
#define LOOP_OP(t, g, call)                                                    \
  do {                                                                         \
    memset(&(g), 0, sizeof(g));                                                \
    CHECK_RC(call, 0);                                                         \
    CHECK_EQ(((td_got *)&(g))->calls, 0); /* never within the call */          \
    CHECK(td_run_until((t), &((td_got *)&(g))->calls, 8000));                  \
  } while (0)

/* cluster_down on an event-loop client: CLUSTERDOWN is reported for what
 * it is, promptly (acluster.c retried it until the command timeout, 3 s,
 * and its last try at the deadline made it "no reply before the
 * deadline"), and a wait rides it out within its own time. */
static void loop_cluster_down(void) {
  CHECK(th_cluster_start(&K, NULL) == 0);
  char name[64];
  name_on(0, "ldown", name, sizeof name);
  td_loop t;
  dlock_client *c = open_loop_cluster(&t); /* command timeout 3 s */
  CHECK(c != NULL);
  dlock_lock *l = NULL;
  CHECK_RC(dlock_lock_new(c, name, "me", &l), 0);
  CHECK(kill(K.nodes[2].pid, SIGSTOP) == 0);
  CHECK(th_wait_for(cluster_failed, NULL, 15000));
  td_got g;
  int64_t t0 = th_now_ms();
  LOOP_OP(&t, g, dlock_lock_acquire_async(l, 0, 10000, td_on_done, &g, NULL));
  int64_t once = th_now_ms() - t0;
  td_got w;
  t0 = th_now_ms();
  LOOP_OP(&t, w,
          dlock_lock_acquire_async(l, 1000, 10000, td_on_done, &w, NULL));
  int64_t waited = th_now_ms() - t0;
  CHECK(kill(K.nodes[2].pid, SIGCONT) == 0);
  printf("    loop, CLUSTERDOWN: one try %lld ms (%s), a 1 s wait %lld ms "
         "(%s)\n",
         (long long)once, g.msg, (long long)waited, w.msg);
  CHECK_RC(g.rc, DLOCK_ESERVER);
  CHECK(strstr(g.msg, "CLUSTERDOWN") != NULL);
  CHECK(once < 1500);
  CHECK_RC(w.rc, DLOCK_ESERVER);
  CHECK(waited >= 900 && waited < 2500);
  CHECK(strstr(w.msg, "CLUSTERDOWN") != NULL);
  dlock_lock_free(l);
  dlock_client_close(c);
  td_close(&t);
  th_cluster_stop(&K);
}

/* A scan's outcome (its callback's ud is each name's too). */
typedef struct scan_got {
  td_got g; /* first: td_on_done's */
  int names;
} scan_got;

static int count_name(const char *name, void *ud) {
  (void)name;
  ((scan_got *)ud)->names++;
  return 0;
}

/* On the loop: locks on each master (each hash on the owner of its slot),
 * refused to another handle and to a blocking client, queried, found by a
 * scan over every master, released. */
static void loop_routed(void) {
  CHECK(th_cluster_start(&K, NULL) == 0);
  td_loop t;
  dlock_client *a = open_loop_cluster(&t), *b = open_cluster(0);
  CHECK(a && b);
  dlock_lock *la[3], *la2[3];
  uint64_t tok[3];
  for (int node = 0; node < 3; node++) {
    char name[64];
    name_on(node, "aroute", name, sizeof name);
    dlock_lock *lb = NULL;
    CHECK_RC(dlock_lock_new(a, name, NULL, &la[node]), 0);
    CHECK_RC(dlock_lock_new(a, name, NULL, &la2[node]), 0);
    CHECK_RC(dlock_lock_new(b, name, NULL, &lb), 0);
    td_got g;
    LOOP_OP(&t, g,
            dlock_lock_acquire_async(la[node], 0, 30000, td_on_done, &g, NULL));
    CHECK_RC(g.rc, 0);
    CHECK(g.token > 0);
    tok[node] = g.token;
    CHECK_EQ(th_cmd_int(&K.nodes[node], "EXISTS %s", name), 1);
    LOOP_OP(
        &t, g,
        dlock_lock_acquire_async(la2[node], 0, 30000, td_on_done, &g, NULL));
    CHECK_RC(g.rc, DLOCK_EBUSY);
    CHECK_RC(dlock_lock_try_acquire(lb, 0, 30000, NULL), DLOCK_ELOCKED);
    LOOP_OP(&t, g, dlock_lock_is_locked_async(la2[node], td_on_done, &g, NULL));
    CHECK_RC(g.rc, 1);
    dlock_lock_free(lb);
  }
  scan_got sg;
  LOOP_OP(&t, sg,
          dlock_client_scan_locks_async(a, "aroute*", count_name, td_on_done,
                                        &sg, NULL));
  CHECK_RC(sg.g.rc, 3);
  CHECK_EQ(sg.names, 3);
  td_got g;
  for (int node = 0; node < 3; node++) {
    LOOP_OP(&t, g, dlock_lock_release_async(la[node], td_on_done, &g, NULL));
    CHECK_RC(g.rc, 1);
    LOOP_OP(&t, g, dlock_lock_is_locked_async(la2[node], td_on_done, &g, NULL));
    CHECK_RC(g.rc, 0);
    LOOP_OP(
        &t, g,
        dlock_lock_acquire_async(la2[node], 0, 30000, td_on_done, &g, NULL));
    CHECK_RC(g.rc, 0);
    CHECK(g.token > tok[node]);
    LOOP_OP(&t, g, dlock_lock_release_async(la2[node], td_on_done, &g, NULL));
    CHECK_RC(g.rc, 1);
    dlock_lock_free(la[node]);
    dlock_lock_free(la2[node]);
  }
  for (int node = 0; node < 3; node++) {
    char name[64];
    name_on(node, "aroute", name, sizeof name);
    CHECK_EQ(th_cmd_int(&K.nodes[node], "EXISTS %s", name), 0);
  }
  dlock_client_close(a);
  td_close(&t);
  dlock_client_close(b);
  th_cluster_stop(&K);
}

/* A waiter on the loop subscribes on the master of its lock's slot and is
 * woken by a blocking client's release, well before the holder's lease. */
static void loop_woken(void) {
  CHECK(th_cluster_start(&K, NULL) == 0);
  td_loop t;
  dlock_client *a = open_loop_cluster(&t), *b = open_cluster(0);
  CHECK(a && b);
  for (int node = 0; node < 3; node++) {
    char name[64], ch[128];
    name_on(node, "awoken", name, sizeof name);
    snprintf(ch, sizeof ch, "redisson_lock__channel:{%s}", name);
    dlock_lock *h = NULL, *w = NULL;
    CHECK_RC(dlock_lock_new(b, name, NULL, &h), 0);
    CHECK_RC(dlock_lock_new(a, name, NULL, &w), 0);
    CHECK_RC(dlock_lock_try_acquire(h, 0, 60000, NULL), 0);
    td_got g = {0};
    CHECK_RC(dlock_lock_acquire_async(w, 30000, 30000, td_on_done, &g, NULL),
             0);
    CHECK(loop_until(&t, subscribed_on, ch, 5000));
    CHECK_EQ(g.calls, 0); /* still waiting */
    int64_t t0 = th_now_ms();
    CHECK_RC(dlock_lock_release(h), 1);
    CHECK(td_run_until(&t, &g.calls, 10000));
    CHECK_RC(g.rc, 0);
    CHECK(th_now_ms() - t0 < 3000);
    CHECK_EQ(th_cmd_int(&K.nodes[node], "EXISTS %s", name), 1);
    td_got r;
    LOOP_OP(&t, r, dlock_lock_release_async(w, td_on_done, &r, NULL));
    CHECK_RC(r.rc, 1);
    dlock_lock_free(h);
    dlock_lock_free(w);
  }
  dlock_client_close(a);
  td_close(&t);
  dlock_client_close(b);
  th_cluster_stop(&K);
}

/* A fair lock's waiter on the loop whose handle is freed while it waits:
 * the wait is cancelled (DLOCK_ECANCELED, from the loop), its queue entry
 * on the slot's master goes, and another client takes the lock at once
 * after the holder's release (before: the freed handle went on waiting,
 * first in the queue). */
static void loop_freed_waiter(void) {
  CHECK(th_cluster_start(&K, NULL) == 0);
  td_loop t;
  dlock_client *a = open_loop_cluster(&t), *b = open_cluster(0);
  CHECK(a && b);
  char name[64];
  name_on(1, "afree", name, sizeof name);
  dlock_lock *h = NULL, *w = NULL, *next = NULL;
  CHECK_RC(dlock_fairlock_new(b, name, "h", 0, &h), 0);
  CHECK_RC(dlock_fairlock_new(b, name, "n", 0, &next), 0);
  CHECK_RC(dlock_fairlock_new(a, name, NULL, 0, &w), 0);
  CHECK_RC(dlock_lock_try_acquire(h, 0, 60000, NULL), 0);
  td_got g = {0};
  CHECK_RC(dlock_lock_acquire_async(w, -1, 30000, td_on_done, &g, NULL), 0);
  int64_t end = th_now_ms() + 5000;
  while (th_cmd_int(&K.nodes[1], "LLEN redisson_lock_queue:{%s}", name) != 1 &&
         th_now_ms() < end)
    td_run_for(&t, 5);
  CHECK_EQ(th_cmd_int(&K.nodes[1], "LLEN redisson_lock_queue:{%s}", name), 1);
  dlock_lock_free(w);
  CHECK_EQ(g.calls, 0); /* never within the free */
  CHECK(td_run_until(&t, &g.calls, 3000));
  CHECK_RC(g.rc, DLOCK_ECANCELED);
  CHECK_EQ(th_cmd_int(&K.nodes[1], "LLEN redisson_lock_queue:{%s}", name), 0);
  CHECK_RC(dlock_lock_release(h), 1);
  CHECK_RC(dlock_lock_try_acquire(next, 0, 60000, NULL), 0);
  CHECK_RC(dlock_lock_release(next), 1);
  dlock_lock_free(h);
  dlock_lock_free(next);
  dlock_client_close(a);
  td_close(&t);
  dlock_client_close(b);
  th_cluster_stop(&K);
}

static atomic_int loop_lost;
static void on_loop_lost(dlock_lock *l, const char *owner, void *ud) {
  (void)l, (void)owner, (void)ud;
  atomic_fetch_add(&loop_lost, 1);
}

/* A release that meets a master's failover rides it out (issue 29 item
 * 20), blocking and on the loop: sent again (the latch makes that safe)
 * until the promoted replica answers, within the command timeout and 6 s,
 * instead of failing at the refused connection and leaving the name locked
 * for its whole 30 s lease. */
static bool on_replica(void *name) {
  redisReply *r = th_cmd(&K.replicas[0], "KEYS %s", (const char *)name);
  bool there = r && r->type == REDIS_REPLY_ARRAY && r->elements == 1;
  if (r) freeReplyObject(r);
  return there;
}
typedef struct rel_arg {
  dlock_lock *l;
  int rc;
  int64_t took;
} rel_arg;
static void *release_blocking(void *p) {
  rel_arg *a = p;
  int64_t t0 = th_now_ms();
  a->rc = dlock_lock_release(a->l);
  a->took = th_now_ms() - t0;
  return NULL;
}
static void release_ride(void) {
  CHECK(th_cluster_start_replicas(&K, NULL) == 0);
  td_loop t;
  CHECK(td_open(&t, TD_BUILTIN) == 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = K.url;
  o.connect_timeout_ms = 500;
  o.reconnect_max_ms = 500;
  dlock_client *a = NULL, *b = th_client_opts(&o);
  CHECK_RC(dlock_client_open_async(&o, t.lp, &a), 0);
  CHECK(b != NULL);
  char na[64], nb[64];
  name_on(0, "lride", na, sizeof na);
  name_on(0, "bride", nb, sizeof nb);
  dlock_lock *la = NULL, *lb = NULL;
  CHECK_RC(dlock_lock_new(a, na, "me", &la), 0);
  CHECK_RC(dlock_lock_new(b, nb, "bme", &lb), 0); /* released on a thread */
  td_got g;
  LOOP_OP(&t, g, dlock_lock_acquire_async(la, 0, 30000, td_on_done, &g, NULL));
  CHECK_RC(g.rc, 0);
  CHECK_RC(dlock_lock_try_acquire(lb, 0, 30000, NULL), 0);
  CHECK(th_wait_for(on_replica, na, 5000));
  CHECK(th_wait_for(on_replica, nb, 5000));
  th_redis_kill(&K.nodes[0], SIGKILL);
  rel_arg ra = {.l = lb};
  pthread_t rt;
  CHECK(pthread_create(&rt, NULL, release_blocking, &ra) == 0);
  memset(&g, 0, sizeof g);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_release_async(la, td_on_done, &g, NULL), 0);
  CHECK(td_run_until(&t, &g.calls, 15000));
  int64_t took = th_now_ms() - t0;
  pthread_join(rt, NULL);
  printf("    a master killed: loop release %s after %lld ms (%s), blocking "
         "%s after %lld ms\n",
         g.rc == 1 ? "freed" : dlock_strerror(g.rc), (long long)took, g.msg,
         ra.rc == 1 ? "freed" : dlock_strerror(ra.rc), (long long)ra.took);
  CHECK_RC(g.rc, 1);
  CHECK_RC(ra.rc, 1);
  CHECK_EQ(th_cmd_int(&K.replicas[0], "EXISTS %s", na), 0);
  CHECK_EQ(th_cmd_int(&K.replicas[0], "EXISTS %s", nb), 0);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_close(a);
  dlock_client_close(b);
  td_close(&t);
  th_cluster_stop(&K);
}

/* Replica acknowledgement, on the loop and blocking: a marker and WAIT on
 * the master of the lock's slot. Each master's lock is on its replica once
 * acquired. With one replica stopped (SIGSTOP), an acquire on its master
 * falls short and gives the lock back (DLOCK_ENOTACKED), while a hold on
 * another master is acquired and renewed, acknowledged by its own master's
 * replica alone: a renewal's WAIT goes to the masters of the holds it
 * renewed (to every master, both clients' holds were reported lost). */
static void acked(void) {
  CHECK(th_cluster_start_replicas(&K, NULL) == 0);
  td_loop t;
  CHECK(td_open(&t, TD_BUILTIN) == 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = K.url;
  o.connect_timeout_ms = 1000;
  o.watchdog_timeout_ms = 1500;
  o.min_replicas_acked = 1;
  /* Room for a loaded machine (a sanitizer run beside others); a stopped
   * replica's WAIT runs to it. */
  o.replicas_timeout_ms = 1000;
  dlock_client *a = NULL, *b = th_client_opts(&o);
  CHECK_RC(dlock_client_open_async(&o, t.lp, &a), 0);
  CHECK(b != NULL);
  td_got g;
  for (int node = 0; node < 3; node++) {
    char name[64], nb[64];
    name_on(node, "aacked", name, sizeof name);
    name_on(node, "backed", nb, sizeof nb);
    dlock_lock *l = NULL, *lb = NULL;
    CHECK_RC(dlock_lock_new(a, name, NULL, &l), 0);
    CHECK_RC(dlock_lock_new(b, nb, NULL, &lb), 0);
    LOOP_OP(&t, g, dlock_lock_acquire_async(l, 0, 30000, td_on_done, &g, NULL));
    CHECK_RC(g.rc, 0);
    CHECK_RC(dlock_lock_try_acquire(lb, 0, 30000, NULL), 0);
    /* KEYS: a replica redirects a keyed read to its master. */
    const char *both[2] = {name, nb};
    for (int i = 0; i < 2; i++) {
      redisReply *r = th_cmd(&K.replicas[node], "KEYS %s", both[i]);
      CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 1);
      if (r) freeReplyObject(r);
    }
    LOOP_OP(&t, g, dlock_lock_release_async(l, td_on_done, &g, NULL));
    CHECK_RC(g.rc, 1);
    CHECK_RC(dlock_lock_release(lb), 1);
    dlock_lock_free(l);
    dlock_lock_free(lb);
  }
  char shortn[64], kept[64], bshort[64], bkept[64];
  name_on(1, "ashort", shortn, sizeof shortn);
  name_on(0, "akept", kept, sizeof kept);
  name_on(1, "bshort", bshort, sizeof bshort);
  name_on(2, "bkept", bkept, sizeof bkept);
  dlock_lock *ls = NULL, *lk = NULL, *bs = NULL, *bk = NULL;
  CHECK_RC(dlock_lock_new(a, shortn, NULL, &ls), 0);
  CHECK_RC(dlock_lock_new(a, kept, NULL, &lk), 0);
  CHECK_RC(dlock_lock_new(b, bshort, NULL, &bs), 0);
  CHECK_RC(dlock_lock_new(b, bkept, NULL, &bk), 0);
  dlock_lock_on_lost(lk, on_loop_lost, NULL);
  dlock_lock_on_lost(bk, on_loop_lost, NULL);
  atomic_store(&loop_lost, 0);
  CHECK_EQ(kill(K.replicas[1].pid, SIGSTOP), 0);
  LOOP_OP(&t, g, dlock_lock_acquire_async(ls, 0, 30000, td_on_done, &g, NULL));
  CHECK_RC(g.rc, DLOCK_ENOTACKED);
  CHECK(strstr(dlock_client_errmsg(a), "0 of 1 replicas") != NULL);
  CHECK_EQ(th_cmd_int(&K.nodes[1], "EXISTS %s", shortn), 0); /* given back */
  CHECK_RC(dlock_lock_try_acquire(bs, 0, 30000, NULL), DLOCK_ENOTACKED);
  CHECK_EQ(th_cmd_int(&K.nodes[1], "EXISTS %s", bshort), 0);
  LOOP_OP(&t, g, dlock_lock_acquire_async(lk, 0, -1, td_on_done, &g, NULL));
  CHECK_RC(g.rc, 0);
  CHECK_RC(dlock_lock_try_acquire(bk, 0, -1, NULL), 0);
  /* Three renewal rounds each (one each 500 ms), the stopped replica's
   * master asked nothing. */
  dlock_client_stats a0, b0, a1, b1;
  CHECK_RC(dlock_client_stats_get(a, &a0), 0);
  CHECK_RC(dlock_client_stats_get(b, &b0), 0);
  int64_t end = th_now_ms() + 5000;
  do {
    td_run_for(&t, 50);
    CHECK_RC(dlock_client_stats_get(a, &a1), 0);
    CHECK_RC(dlock_client_stats_get(b, &b1), 0);
  } while ((a1.renewal_calls < a0.renewal_calls + 3 ||
            b1.renewal_calls < b0.renewal_calls + 3) &&
           th_now_ms() < end);
  CHECK(a1.renewal_calls >= a0.renewal_calls + 3);
  CHECK(b1.renewal_calls >= b0.renewal_calls + 3);
  CHECK_EQ(atomic_load(&loop_lost), 0);
  CHECK_EQ(dlock_lock_is_lost(lk), 0);
  CHECK_EQ(dlock_lock_is_lost(bk), 0);
  /* --replicas auto on the loop (refused before): each master's own
   * count (ROLE there); the stalled replica, still its master's, makes an
   * acquire there fall short, the other master's acknowledges. */
  o.min_replicas_acked = DLOCK_REPLICAS_AUTO;
  dlock_client *au = NULL;
  CHECK_RC(dlock_client_open_async(&o, t.lp, &au), 0);
  char ukept[64];
  name_on(2, "ukept", ukept, sizeof ukept);
  dlock_lock *us = NULL, *uk = NULL;
  CHECK_RC(dlock_lock_new(au, shortn, "auto", &us), 0);
  CHECK_RC(dlock_lock_new(au, ukept, "auto", &uk), 0);
  LOOP_OP(&t, g, dlock_lock_acquire_async(us, 0, 30000, td_on_done, &g, NULL));
  CHECK_RC(g.rc, DLOCK_ENOTACKED);
  CHECK(strstr(g.msg, "0 of the 1 replicas the master has") != NULL);
  LOOP_OP(&t, g, dlock_lock_acquire_async(uk, 0, 30000, td_on_done, &g, NULL));
  CHECK_RC(g.rc, 0);
  LOOP_OP(&t, g, dlock_lock_release_async(uk, td_on_done, &g, NULL));
  CHECK_RC(g.rc, 1);
  dlock_lock_free(us);
  dlock_lock_free(uk);
  dlock_client_close(au);
  CHECK_EQ(kill(K.replicas[1].pid, SIGCONT), 0);
  LOOP_OP(&t, g, dlock_lock_release_async(lk, td_on_done, &g, NULL));
  CHECK_RC(g.rc, 1);
  CHECK_RC(dlock_lock_release(bk), 1);
  dlock_lock_free(ls);
  dlock_lock_free(lk);
  dlock_lock_free(bs);
  dlock_lock_free(bk);
  dlock_client_close(a);
  td_close(&t);
  dlock_client_close(b);
  th_cluster_stop(&K);
}

/* A slot resharded while a loop client holds a lock in it: the release
 * follows MOVED to the new master. During the next migration, with only
 * the hash moved, a query follows ASK and a release whose keys are split
 * is retried (TRYAGAIN, paused on the loop's timers) until it ends. */
static void loop_moved(void) {
  CHECK(th_cluster_start(&K, NULL) == 0);
  td_loop t;
  dlock_client *a = open_loop_cluster(&t), *b = open_cluster(0);
  CHECK(a && b);
  char name[64];
  name_on(0, "amv", name, sizeof name);
  int slot = (int)slot_of(name);
  dlock_lock *l = NULL, *lb = NULL;
  CHECK_RC(dlock_lock_new(a, name, NULL, &l), 0);
  CHECK_RC(dlock_lock_new(b, name, NULL, &lb), 0);
  td_got g;
  LOOP_OP(&t, g, dlock_lock_acquire_async(l, 0, 60000, td_on_done, &g, NULL));
  CHECK_RC(g.rc, 0);
  uint64_t t1 = g.token;
  CHECK_RC(th_cluster_slot_begin(&K, slot, 0, 1), 0);
  CHECK(th_cluster_slot_move_keys(&K, slot, 0, 1, 100) >= 2);
  CHECK_RC(th_cluster_slot_end(&K, slot, 1), 0);
  CHECK_EQ(th_cmd_int(&K.nodes[1], "EXISTS %s", name), 1);
  CHECK_RC(dlock_lock_try_acquire(lb, 0, 60000, NULL), DLOCK_ELOCKED);
  LOOP_OP(&t, g, dlock_lock_release_async(l, td_on_done, &g, NULL));
  CHECK_RC(g.rc, 1); /* MOVED, followed */
  CHECK_EQ(th_cmd_int(&K.nodes[1], "EXISTS %s", name), 0);
  LOOP_OP(&t, g, dlock_lock_acquire_async(l, 0, 60000, td_on_done, &g, NULL));
  CHECK_RC(g.rc, 0);
  CHECK(g.token > t1); /* the token's counter moved with the slot */
  CHECK_EQ(th_cmd_int(&K.nodes[1], "EXISTS %s", name), 1);
  /* Migrating to node 2: only the lock's hash has moved so far. */
  CHECK_RC(th_cluster_slot_begin(&K, slot, 1, 2), 0);
  redisReply *r = th_cmd(&K.nodes[1], "MIGRATE 127.0.0.1 %d %s 0 5000",
                         K.nodes[2].port, name);
  CHECK(r && r->type == REDIS_REPLY_STATUS);
  if (r) freeReplyObject(r);
  LOOP_OP(&t, g, dlock_lock_is_held_async(l, td_on_done, &g, NULL));
  CHECK_RC(g.rc, 1); /* ASK, then node 2 */
  td_got rel = {0};
  CHECK_RC(dlock_lock_release_async(l, td_on_done, &rel, NULL), 0);
  td_run_for(&t, 300); /* it meets TRYAGAIN meanwhile */
  CHECK_EQ(rel.calls, 0);
  CHECK(th_cluster_slot_move_keys(&K, slot, 1, 2, 100) >= 1);
  CHECK_RC(th_cluster_slot_end(&K, slot, 2), 0);
  CHECK(td_run_until(&t, &rel.calls, 8000));
  CHECK_RC(rel.rc, 1);
  CHECK_EQ(th_cmd_int(&K.nodes[2], "EXISTS %s", name), 0);
  CHECK_RC(dlock_lock_try_acquire(lb, 0, 60000, NULL), 0);
  CHECK_RC(dlock_lock_release(lb), 1);
  dlock_lock_free(l);
  dlock_lock_free(lb);
  dlock_client_close(a);
  td_close(&t);
  dlock_client_close(b);
  th_cluster_stop(&K);
}

static bool client_on_port(th_redis *n, int port) {
  redisReply *r = th_cmd(n, "CLIENT LIST");
  char want[48];
  snprintf(want, sizeof want, "laddr=127.0.0.1:%d ", port);
  bool yes = r && r->type == REDIS_REPLY_STRING && strstr(r->str, want);
  if (r) freeReplyObject(r);
  return yes;
}

/* rediss-cluster://: the seeds' TLS ports; the slot map, asked over TLS,
 * names each master's TLS port, and every master is then reached over
 * TLS (its connection's local port is its TLS port), verified against
 * the CA. */
static void tls_cluster(void) {
  CHECK_RC(th_tls_setup(), 0);
  CHECK(th_cluster_start_tls(&K) == 0);
  dlock_client_options o;
  th_tls_paths paths;
  th_tls_options(&o, &paths, "127.0.0.1", "ca", false);
  o.url = K.url;
  dlock_client *c = th_client_opts(&o);
  CHECK(c != NULL);
  for (int node = 0; node < 3; node++) {
    char name[64];
    name_on(node, "tls", name, sizeof name);
    dlock_lock *l = NULL;
    CHECK_RC(dlock_lock_new(c, name, NULL, &l), 0);
    CHECK_RC(dlock_lock_try_acquire(l, 0, 30000, NULL), 0);
    CHECK_EQ(th_cmd_int(&K.nodes[node], "EXISTS %s", name), 1);
    CHECK(client_on_port(&K.nodes[node], K.tls_ports[node]));
    CHECK_RC(dlock_lock_release(l), 1);
    dlock_lock_free(l);
  }
  dlock_client_close(c);
  /* The wrong CA: no node is trusted, the open fails. */
  th_tls_options(&o, &paths, "127.0.0.1", "otherca", false);
  o.url = K.url;
  dlock_client *bad = NULL;
  CHECK_RC(dlock_client_open(&o, &bad), DLOCK_ECONNECT);
  CHECK(bad == NULL);
  th_cluster_stop(&K);
}

TH_MAIN(T_BARE(url_forms), T_BARE(routed), T_BARE(wait_woken),
        T_BARE(kinds_one_slot), T_BARE(renew_by_slot), T_BARE(multilock_across),
        T_BARE(moved_and_ask), T_BARE(cli_commands), T_BARE(loop_routed),
        T_BARE(loop_woken), T_BARE(loop_freed_waiter), T_BARE(loop_moved),
        T_BARE(acked), T_BARE(tls_cluster), T_BARE(stopped_master),
        T_BARE(cluster_down), T_BARE(loop_cluster_down),
        T_BARE(release_ride))
