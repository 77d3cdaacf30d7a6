/* wrongtype.c: every kind refuses a key it did not make, on every Redis
 * URL kind (redis, unix, rediss, sentinel, cluster, redlock). Each call of
 * each kind (locks, semaphores, latch, queues, multi-lock, election, force
 * release, inspect) meets each foreign type at its name (an application's
 * hash, a string, a list, a set, a zset, a stream) and must return
 * DLOCK_EWRONGTYPE with a message that names what it found and carries
 * nothing of the server's script machinery, and leave the key as it was
 * (its DUMP before and after), in the blocking and the event-loop forms.
 * zk:// and etcd:// have no typed keys: their foreign nodes and keys are
 * their files' (test_zk t_zk_foreign_nodes, test_etcd_sem
 * t_etcd_sem_foreign, test_etcd_kinds t_etcd_queue_foreign). */
#include "conformance.h"

#include <stdlib.h>
#include <string.h>

/* Where the test's keys live: the servers each foreign key is written to
 * (every server of a Redlock; one otherwise), or a cluster (the node of
 * the key's slot). */
static th_redis *homes[3];
static int nhomes;
static th_cluster *cluster;
/* Redlock has no semaphores, latch or queues: DLOCK_ENOTSUP skips them.
 * Its lock is the plain lock on the wire (redsync's layout), and says so. */
static bool redlock;

/* Points homes at the run's deployment: false (and says so) where the
 * backend has no Redis keys. */
static bool wt_setup(void) {
  if (CF_HERE("zookeeper,etcd")) {
    fprintf(stderr, "    skipped: no Redis key types on %s\n", cf_dep.kind);
    return false;
  }
  redlock = CF_HERE("redlock");
  cluster = CF_HERE("cluster") ? &cf_dep.cluster : NULL;
  nhomes = redlock ? 3 : 1;
  for (int i = 0; i < nhomes; i++)
    homes[i] = &cf_dep.redis[i];
  if (CF_HERE("sentinel")) homes[0] = &cf_dep.sentinel.master;
  return true;
}

/* The kind as the message names it on this URL. */
static const char *said(const char *s) {
  if (!redlock || s == NULL) return s;
  if (strcmp(s, "not a dlock lock") == 0) return "not a dlock plain lock";
  if (strcmp(s, "not a lock") == 0) return "not a plain lock";
  return s;
}

static th_redis *home(const char *key, int i) {
  if (cluster) return &cluster->nodes[th_cluster_node_of(cluster, key)];
  return homes[i];
}

enum { HASH, STRING, LIST, SET, ZSET, STREAM, NTYPES };
static const char *const type_names[NTYPES] = {"hash", "string", "list",
                                               "set",  "zset",   "stream"};

/* Puts a value of type t at key on every home (an application's data:
 * nothing of a lock's or a counter's shape). */
static void put(const char *key, int t) {
  for (int i = 0; i < (cluster ? 1 : nhomes); i++) {
    th_redis *r = home(key, i);
    th_cmd_int(r, "DEL %s", key);
    switch (t) {
    case HASH: th_cmd_int(r, "HSET %s name alice", key); break;
    case STRING: th_cmd_int(r, "SET %s hello", key); break;
    case LIST: th_cmd_int(r, "RPUSH %s a b", key); break;
    case SET: th_cmd_int(r, "SADD %s a b", key); break;
    case ZSET: th_cmd_int(r, "ZADD %s 1 a", key); break;
    default: {
      redisReply *x = th_cmd(r, "XADD %s * a b", key);
      if (x) freeReplyObject(x);
    }
    }
  }
}

/* The key's DUMP on its first home, malloc'ed ("" if none). */
static char *dump(const char *key, size_t *len) {
  redisReply *r = th_cmd(home(key, 0), "DUMP %s", key);
  char *out = NULL;
  *len = 0;
  if (r && r->type == REDIS_REPLY_STRING) {
    out = malloc(r->len + 1);
    memcpy(out, r->str, r->len);
    *len = r->len;
  }
  if (r) freeReplyObject(r);
  return out ? out : calloc(1, 1);
}

/* ---- the calls: each returns what the call under test returned ---- */
#define NAME "wt:k"

static int lock_try(dlock_client *c, int kind, int64_t wait_ms) {
  dlock_lock *l = NULL;
  dlock_rwlock *rw = NULL;
  int e;
  if (kind == 0)
    e = dlock_lock_new(c, NAME, NULL, &l);
  else if (kind == 1)
    e = dlock_fairlock_new(c, NAME, NULL, 0, &l);
  else if (kind == 2)
    e = dlock_plainlock_new(c, NAME, NULL, &l);
  else
    e = dlock_rwlock_new(c, NAME, NULL, &rw);
  if (e != 0) return 1000 + e;
  dlock_lock *x =
      rw ? (kind == 3 ? dlock_rwlock_read(rw) : dlock_rwlock_write(rw)) : l;
  e = dlock_lock_try_acquire(x, wait_ms, 0, NULL);
  if (e == 0) dlock_lock_release(x);
  dlock_lock_free(l);
  dlock_rwlock_free(rw);
  return e;
}
static int c_lock(dlock_client *c) {
  return lock_try(c, 0, 0);
}
static int c_lock_wait(dlock_client *c) {
  return lock_try(c, 0, 2000);
}
static int c_fair(dlock_client *c) {
  return lock_try(c, 1, 0);
}
static int c_fair_wait(dlock_client *c) {
  return lock_try(c, 1, 2000);
}
static int c_plain(dlock_client *c) {
  return lock_try(c, 2, 0);
}
static int c_read(dlock_client *c) {
  return lock_try(c, 3, 0);
}
static int c_write(dlock_client *c) {
  return lock_try(c, 4, 0);
}
static int c_write_wait(dlock_client *c) {
  return lock_try(c, 4, 2000);
}

static int force(dlock_client *c, int kind) {
  dlock_lock *l = NULL;
  dlock_rwlock *rw = NULL;
  int e = kind == 0   ? dlock_lock_new(c, NAME, NULL, &l)
          : kind == 1 ? dlock_plainlock_new(c, NAME, NULL, &l)
                      : dlock_rwlock_new(c, NAME, NULL, &rw);
  if (e != 0) return 1000 + e;
  e = dlock_lock_force_release(rw ? dlock_rwlock_write(rw) : l);
  dlock_lock_free(l);
  dlock_rwlock_free(rw);
  return e;
}
static int c_force_lock(dlock_client *c) {
  return force(c, 0);
}
static int c_force_plain(dlock_client *c) {
  return force(c, 1);
}
static int c_force_rw(dlock_client *c) {
  return force(c, 2);
}

/* A multi-lock over a free name and the foreign one: refused, and the free
 * one given back. */
static int c_multi(dlock_client *c) {
  dlock_lock *ls[2] = {NULL, NULL};
  dlock_multilock *m = NULL;
  int e = dlock_lock_new(c, "wt:free", NULL, &ls[0]);
  if (e == 0) e = dlock_lock_new(c, NAME, NULL, &ls[1]);
  if (e == 0) e = dlock_multilock_new(ls, 2, &m);
  if (e == 0) {
    e = dlock_multilock_try_acquire(m, 0, 0, NULL);
    if (e == 0) dlock_multilock_release(m);
    if (dlock_lock_is_locked(ls[0]) != 0) e = 2000; /* not given back */
  }
  dlock_multilock_free(m);
  dlock_lock_free(ls[0]);
  dlock_lock_free(ls[1]);
  return e;
}

static int sem(dlock_client *c, int op) {
  dlock_semaphore *s;
  int e = dlock_semaphore_new(c, NAME, &s);
  if (e != 0) return 1000 + e;
  switch (op) {
  case 0: e = dlock_semaphore_try_set_permits(s, 2); break;
  case 1: e = dlock_semaphore_try_acquire(s, 1, 0); break;
  case 2: e = dlock_semaphore_add_permits(s, 1); break;
  case 3: e = dlock_semaphore_release(s, 1); break;
  case 4: e = dlock_semaphore_get_available(s); break;
  default: e = dlock_semaphore_drain(s);
  }
  dlock_semaphore_free(s);
  return e;
}
static int c_sem_set(dlock_client *c) {
  return sem(c, 0);
}
static int c_sem_try(dlock_client *c) {
  return sem(c, 1);
}
static int c_sem_add(dlock_client *c) {
  return sem(c, 2);
}
static int c_sem_release(dlock_client *c) {
  return sem(c, 3);
}
static int c_sem_available(dlock_client *c) {
  return sem(c, 4);
}
static int c_sem_drain(dlock_client *c) {
  return sem(c, 5);
}

static int permits(dlock_client *c, int op) {
  dlock_permits *p;
  char id[DLOCK_PERMIT_ID_LEN];
  int e = dlock_permits_new(c, NAME, &p);
  if (e != 0) return 1000 + e;
  switch (op) {
  case 0: e = dlock_permits_try_set(p, 2); break;
  case 1: e = dlock_permits_try_acquire(p, 0, 0, id); break;
  case 2: e = dlock_permits_add(p, 1); break;
  case 3: e = dlock_permits_get_available(p); break;
  default:
    e = dlock_permits_force_release(p, "00112233445566778899aabbccddeeff");
  }
  if (op == 1 && e == 0) dlock_permits_release(p, id);
  dlock_permits_free(p);
  return e;
}
static int c_permits_set(dlock_client *c) {
  return permits(c, 0);
}
static int c_permits_try(dlock_client *c) {
  return permits(c, 1);
}
static int c_permits_add(dlock_client *c) {
  return permits(c, 2);
}
static int c_permits_available(dlock_client *c) {
  return permits(c, 3);
}
static int c_permits_force(dlock_client *c) {
  return permits(c, 4);
}

static int latch(dlock_client *c, int op) {
  dlock_latch *l;
  int64_t n;
  int e = dlock_latch_new(c, NAME, &l);
  if (e != 0) return 1000 + e;
  switch (op) {
  case 0: e = dlock_latch_try_set_count(l, 2); break;
  case 1: e = dlock_latch_count_down(l); break;
  case 2: e = dlock_latch_get_count(l, &n); break;
  default: e = dlock_latch_try_await(l, 0);
  }
  dlock_latch_free(l);
  return e;
}
static int c_latch_set(dlock_client *c) {
  return latch(c, 0);
}
static int c_latch_down(dlock_client *c) {
  return latch(c, 1);
}
static int c_latch_count(dlock_client *c) {
  return latch(c, 2);
}
static int c_latch_await(dlock_client *c) {
  return latch(c, 3);
}

static int queue(dlock_client *c, int op) {
  dlock_queue *q;
  void *v = NULL;
  int64_t n;
  int e = op >= 3 ? dlock_queue_new_delayed(c, NAME, &q)
                  : dlock_queue_new(c, NAME, &q);
  if (e != 0) return 1000 + e;
  switch (op) {
  case 0: e = dlock_queue_offer(q, "v", 1); break;
  case 1: e = dlock_queue_poll(q, 0, &v, NULL); break;
  case 2: e = dlock_queue_poll_reliable(q, 0, &v, NULL); break;
  case 3: e = dlock_queue_offer_delayed(q, 60000, "v", 1); break;
  case 4: e = dlock_queue_poll(q, 0, &v, NULL); break;
  default: e = dlock_queue_size(q, &n);
  }
  dlock_queue_value_free(v);
  dlock_queue_free(q);
  return e;
}
static int c_q_offer(dlock_client *c) {
  return queue(c, 0);
}
static int c_q_poll(dlock_client *c) {
  return queue(c, 1);
}
static int c_q_reliable(dlock_client *c) {
  return queue(c, 2);
}
static int c_q_delayed_offer(dlock_client *c) {
  return queue(c, 3);
}
static int c_q_delayed_poll(dlock_client *c) {
  return queue(c, 4);
}

/* An election on Redis takes turns on the lock NAME: out of it at once. */
static int c_elect(dlock_client *c) {
  dlock_leader *l;
  int e = dlock_leader_new(c, NAME, "me", &l);
  if (e != 0) return 1000 + e;
  e = dlock_leader_start(l);
  if (e == 0) e = dlock_leader_try_await(l, 3000);
  dlock_leader_free(l);
  return e;
}

typedef struct call {
  const char *what;
  int (*fn)(dlock_client *);
  int own;          /* the type that is the kind's own (skipped), or -1 */
  const char *said; /* the kind as the message names it, or NULL: a command
                       the server refuses by itself (no type to name) */
  bool counter;     /* a string is foreign only when not a number */
} call;

static const call calls[] = {
    {"lock", c_lock, -1, "not a dlock lock", false},
    {"lock (waiting)", c_lock_wait, -1, "not a dlock lock", false},
    {"fair lock", c_fair, -1, "not a dlock fair lock", false},
    {"fair lock (waiting)", c_fair_wait, -1, "not a dlock fair lock", false},
    {"plain lock", c_plain, -1, "not a dlock plain lock", false},
    {"read lock", c_read, -1, "not a dlock read-write lock", false},
    {"write lock", c_write, -1, "not a dlock read-write lock", false},
    {"write lock (waiting)", c_write_wait, -1, "not a dlock read-write lock",
     false},
    {"multi-lock", c_multi, -1, "not a dlock lock", false},
    {"election", c_elect, -1, "not a dlock", false},
    {"force release (lock)", c_force_lock, -1, "not a lock", false},
    {"force release (plain)", c_force_plain, -1, "not a plain lock", false},
    {"force release (rwlock)", c_force_rw, -1, "not a read-write lock", false},
    {"semaphore set", c_sem_set, -1, "not a dlock semaphore", true},
    {"semaphore try_acquire", c_sem_try, -1, "not a dlock semaphore", true},
    {"semaphore add", c_sem_add, -1, "not a dlock semaphore", true},
    {"semaphore release", c_sem_release, -1, "not a dlock semaphore", true},
    {"semaphore available", c_sem_available, -1, NULL, true},
    {"semaphore drain", c_sem_drain, -1, "not a dlock semaphore", true},
    {"permits set", c_permits_set, -1, "not a dlock semaphore", true},
    {"permits try_acquire", c_permits_try, -1, "not a dlock semaphore", true},
    {"permits add", c_permits_add, -1, "not a dlock semaphore", true},
    {"permits available", c_permits_available, -1, "not a dlock semaphore",
     true},
    {"permits force release", c_permits_force, -1, "not a dlock semaphore",
     true},
    {"latch set", c_latch_set, -1, "not a dlock count-down latch", true},
    {"latch count_down", c_latch_down, -1, "not a dlock count-down latch",
     true},
    {"latch count", c_latch_count, -1, NULL, true},
    {"latch await", c_latch_await, -1, NULL, true},
    {"queue offer", c_q_offer, LIST, NULL, false},
    {"queue poll", c_q_poll, LIST, NULL, false},
    {"queue poll_reliable", c_q_reliable, LIST, NULL, false},
    {"delayed queue offer", c_q_delayed_offer, LIST, NULL, false},
    {"delayed queue poll", c_q_delayed_poll, LIST, NULL, false},
};

/* Every call against every foreign type on the client's URL; prints each
 * miss and returns how many. */
static int matrix(void) {
  dlock_client *c = cf_client(0);
  if (c == NULL) return 1;
  int bad = 0;
  for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
    for (int t = 0; t < NTYPES; t++) {
      if (t == calls[i].own) continue;
      put(NAME, t);
      size_t l0, l1;
      char *before = dump(NAME, &l0);
      int64_t t0 = th_now_ms();
      int rc = calls[i].fn(c);
      int64_t took = th_now_ms() - t0;
      if (rc == DLOCK_ENOTSUP && redlock) {
        free(before);
        break;
      }
      char *after = dump(NAME, &l1);
      const char *msg = dlock_client_errmsg(c);
      const char *why = NULL;
      if (rc != DLOCK_EWRONGTYPE)
        why = "not DLOCK_EWRONGTYPE";
      else if (l0 == 0 || l0 != l1 || memcmp(before, after, l0) != 0)
        why = "the key changed";
      else if (strstr(msg, "script") || strstr(msg, "@user") ||
               strstr(msg, "user_script") || strstr(msg, "Lua"))
        why = "the message shows the script";
      else if (calls[i].said && !strstr(msg, said(calls[i].said)))
        why = "the message does not name the kind";
      else if (calls[i].said && t != STRING && !strstr(msg, type_names[t]))
        why = "the message does not name what it found";
      else if (redlock && strstr(msg, "servers answered"))
        why = "the servers' refusal is told as no answer";
      else if (took > 1500)
        why = "it waited";
      if (why) {
        fprintf(stderr, "    %s on a %s: %s (rc %d %s, %lld ms): %s\n",
                calls[i].what, type_names[t], why, rc, dlock_err_name(rc),
                (long long)took, msg);
        bad++;
      }
      free(before);
      free(after);
    }
  }
  /* inspect (dlock status): an application's hash is no lock, and has no
   * holder; a lock's hash is one. */
  dlock_lock *l;
  dlock_lock_state st;
  put(NAME, HASH);
  if (dlock_lock_new(c, NAME, NULL, &l) != 0 || dlock_lock_inspect(l, &st) ||
      strcmp(st.type, "hash") != 0 || st.held || st.holders != 0) {
    fprintf(stderr,
            "    inspect of an application's hash: held %d, "
            "holders %d\n",
            st.held, st.holders);
    bad++;
  }
  dlock_lock_free(l);
  for (int i = 0; i < (cluster ? 1 : nhomes); i++)
    th_cmd_int(home(NAME, i), "DEL %s", NAME);
  dlock_client_close(c);
  return bad;
}

/* A lock of one kind meets a lock of another: refused both ways, both
 * left as they were. */
static int kinds_apart(void) {
  dlock_client *c = cf_client(0);
  if (c == NULL) return 1;
  int bad = 0;
  dlock_lock *l = NULL, *p = NULL;
  dlock_rwlock *rw = NULL;
  dlock_lock_new(c, "wt:apart", NULL, &l);
  dlock_plainlock_new(c, "wt:apart", NULL, &p);
  dlock_rwlock_new(c, "wt:apart", "other", &rw);
  if (dlock_lock_acquire(l, 0, NULL) != 0) bad++;
  int e = dlock_lock_try_acquire(dlock_rwlock_write(rw), 0, 0, NULL);
  if (e != DLOCK_EWRONGTYPE) {
    fprintf(stderr, "    write lock on a lock: %s\n", dlock_err_name(e));
    bad++;
  }
  e = dlock_lock_try_acquire(p, 0, 0, NULL);
  if (e != DLOCK_EWRONGTYPE) {
    fprintf(stderr, "    plain lock on a lock: %s\n", dlock_err_name(e));
    bad++;
  }
  if (dlock_lock_release(l) != 1) bad++;
  if (dlock_lock_acquire(dlock_rwlock_read(rw), 0, NULL) != 0) bad++;
  e = dlock_lock_try_acquire(l, 0, 0, NULL);
  if (e != DLOCK_EWRONGTYPE) {
    fprintf(stderr, "    lock on a read-write lock: %s\n", dlock_err_name(e));
    bad++;
  }
  if (dlock_lock_release(dlock_rwlock_read(rw)) != 1) bad++;
  dlock_lock_free(l);
  dlock_lock_free(p);
  dlock_rwlock_free(rw);
  dlock_client_close(c);
  return bad;
}

/* A key of another type beside the name (the token counter, the fair
 * queue and its timeouts, the hand-off reservation, the permits' leases):
 * refused too, that key left as it was and nothing made at the name. */
static void t_beside(void) {
  static const struct {
    const char *what, *key;
    int type;
    int (*fn)(dlock_client *);
  } rows[] = {
      {"lock", "redisson_lock_token:{wt:k}", HASH, c_lock},
      {"lock", "dlock_handoff:{wt:k}", LIST, c_lock},
      {"plain lock", "redisson_lock_token:{wt:k}", SET, c_plain},
      {"write lock", "redisson_lock_token:{wt:k}", ZSET, c_write},
      {"fair lock", "redisson_lock_queue:{wt:k}", STRING, c_fair},
      {"fair lock", "redisson_lock_timeout:{wt:k}", HASH, c_fair},
      {"permits", "{wt:k}:timeout", HASH, c_permits_try},
  };
  CF_NEEDS_SERVER();
  if (!wt_setup()) return;
  if (redlock) return; /* its lock is the plain one: no keys beside */
  dlock_client *c = cf_client(0);
  CHECK(c != NULL);
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    th_cmd_int(home(NAME, 0), "DEL %s", NAME);
    put(rows[i].key, rows[i].type);
    size_t l0, l1;
    char *before = dump(rows[i].key, &l0);
    int rc = rows[i].fn(c);
    char *after = dump(rows[i].key, &l1);
    bool same = l0 == l1 && memcmp(before, after, l0) == 0;
    free(before);
    free(after);
    long long made = th_cmd_int(home(NAME, 0), "EXISTS %s", NAME);
    th_cmd_int(home(rows[i].key, 0), "DEL %s", rows[i].key);
    if (rc != DLOCK_EWRONGTYPE || !same || made != 0 ||
        !strstr(dlock_client_errmsg(c), type_names[rows[i].type]))
      fprintf(stderr, "    %s with a %s at %s: %s, %s, name %s: %s\n",
              rows[i].what, type_names[rows[i].type], rows[i].key,
              dlock_err_name(rc), same ? "same" : "changed",
              made ? "made" : "absent", dlock_client_errmsg(c));
    CHECK_RC(rc, DLOCK_EWRONGTYPE);
    CHECK(same);
    CHECK_EQ(made, 0);
    CHECK(strstr(dlock_client_errmsg(c), type_names[rows[i].type]) != NULL);
  }
  dlock_client_close(c);
}

/* Every call on every foreign type, and (but on Redlock, whose one kind
 * of lock has none apart) a lock of one kind on a lock of another. */
static void t_wrongtype(void) {
  CF_NEEDS_SERVER();
  if (!wt_setup()) return;
  CHECK_EQ(matrix(), 0);
  if (!redlock) CHECK_EQ(kinds_apart(), 0);
}

typedef struct got {
  int calls, rc;
  char msg[512];
} got;

static void on_done(int rc, uint64_t token, const char *msg, void *ud) {
  (void)token;
  got *g = ud;
  g->calls++;
  g->rc = rc;
  snprintf(g->msg, sizeof g->msg, "%s", msg);
}

/* An event-loop client: the message is the server's own too (its
 * connection's last message replaced it: "key holds a value of another
 * type: "). */
static void t_wrongtype_async(void) {
  CF_NEEDS_SERVER();
  if (!wt_setup() || !cf_has(DL_FEAT_LOOP)) return;
  char want[64];
  snprintf(want, sizeof want, "%s: hash", said("not a dlock lock"));
  dlock_loop *lp;
  CHECK_RC(dlock_loop_new(NULL, &lp), 0);
  dlock_client *c = NULL;
  CHECK_RC(cf_client_async(lp, 0, &c), 0);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, NAME, NULL, &l), 0);
  put(NAME, HASH);
  got g = {0};
  CHECK_RC(dlock_lock_acquire_async(l, 0, 10000, on_done, &g, NULL), 0);
  int64_t end = th_now_ms() + 5000;
  while (!g.calls && th_now_ms() < end)
    dlock_loop_run(lp, 20);
  CHECK_RC(g.rc, DLOCK_EWRONGTYPE);
  CHECK(strstr(g.msg, want) != NULL);
  CHECK(strstr(dlock_client_errmsg(c), want) != NULL);
  for (int i = 0; i < (cluster ? 1 : nhomes); i++)
    th_cmd_int(home(NAME, i), "DEL %s", NAME);
  dlock_lock_free(l);
  dlock_client_close(c);
  dlock_loop_free(lp);
}

const th_test cf_wrongtype_tests[] = {
    T_BARE(t_wrongtype),
    T_BARE(t_beside),
    T_BARE(t_wrongtype_async),
};
const size_t cf_wrongtype_ntests =
    sizeof cf_wrongtype_tests / sizeof cf_wrongtype_tests[0];
