/* mutex.c: Curator's lock recipes on ZooKeeper: InterProcessMutex and
 * InterProcessReadWriteLock. A protected ephemeral-sequential node per
 * holder or waiter under the lock's path, order by sequence, each waiter
 * watching only the node it waits for. */
#include "zkb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The names Curator's recipes give their nodes, before the sequence: the
 * mutex's, the read-write lock's two (the same length on purpose), the
 * leader latch's, the semaphore's leases. A UUID (hex) contains none. */
static const char *const marks[] = {"lock-", "__READ__", "__WRIT__", "latch-",
                                    "lease-"};
#define NMARKS (sizeof marks / sizeof marks[0])

/* Whether s is a sequential node's suffix: ZooKeeper's counter, "%010d"
 * (a '-' once it wraps). */
static bool is_sequence(const char *s) {
  if (*s == '-') s++;
  size_t n = strlen(s);
  return n >= 10 && strspn(s, "0123456789") == n;
}

/* Curator's sort key (standardFixForSorting, and the read-write lock's
 * driver): what follows the last mark in the name; NULL if it has none,
 * or no sequence follows it (an application's "block-list" is no
 * recipe's node). */
const char *dl_zk_seq_of(const char *name) {
  for (size_t m = 0; m < NMARKS; m++) {
    const char *s = NULL;
    for (const char *p = strstr(name, marks[m]); p; p = strstr(p + 1, marks[m]))
      s = p;
    if (s && is_sequence(s + strlen(marks[m]))) return s + strlen(marks[m]);
  }
  return NULL;
}

static int by_seq(const void *a, const void *b) {
  return strcmp(dl_zk_seq_of(*(char *const *)a),
                dl_zk_seq_of(*(char *const *)b));
}

/* The recipe nodes among the children, sorted (pointers into sv). */
int dl_zk_sorted_locks(struct String_vector *sv, char ***out) {
  *out = NULL;
  if (sv->count == 0) return 0;
  char **v = malloc((size_t)sv->count * sizeof *v);
  if (v == NULL) return -1;
  int n = 0;
  for (int i = 0; i < sv->count; i++)
    if (dl_zk_seq_of(sv->data[i])) v[n++] = sv->data[i];
  qsort(v, (size_t)n, sizeof *v, by_seq);
  *out = v;
  return n;
}

bool dl_zk_is_writer(const char *name) {
  return strstr(name, "__WRIT__") != NULL;
}

bool dl_zk_is_latch(const char *name) {
  const char *seq = dl_zk_seq_of(name);
  return seq && seq - name >= 6 && strncmp(seq - 6, "latch-", 6) == 0;
}

static bool is_reader(const char *name) {
  return strstr(name, "__READ__") != NULL;
}

int dl_zk_holders(char **v, int n) {
  if (n == 0 || !is_reader(v[0])) return n > 0;
  int k = 0; /* a mutex's node behind the readers waits: no holder */
  while (k < n && is_reader(v[k]))
    k++;
  return k;
}

/* The mark of a lock kind's nodes, or NULL when ZooKeeper has no such
 * recipe. The fair lock is the mutex: Curator's waiters already take it in
 * the order they came. */
static const char *mark_of(dl_lock_kind kind) {
  switch (kind) {
  case DL_KIND_LOCK:
  case DL_KIND_FAIR: return "lock-";
  case DL_KIND_READ: return "__READ__";
  case DL_KIND_WRITE: return "__WRIT__";
  default: return NULL;
  }
}

int dl_zk_check_path(dl_zk *z, const char *key) {
  size_t n = strlen(key);
  /* ZooKeeper's own rules (PathUtils.validatePath): absolute, no empty,
   * "." or ".." component, no control character; /zookeeper is the
   * server's. */
  bool bad = key[0] != '/' || n < 2 || key[n - 1] == '/' || strstr(key, "//") ||
             strstr(key, "/./") || strstr(key, "/../") ||
             (n >= 2 && strcmp(key + n - 2, "/.") == 0) ||
             (n >= 3 && strcmp(key + n - 3, "/..") == 0) ||
             (strncmp(key, "/zookeeper", 10) == 0 &&
              (key[10] == '\0' || key[10] == '/'));
  for (size_t i = 0; i < n && !bad; i++)
    bad = (unsigned char)key[i] < 0x20 || key[i] == 0x7f;
  if (bad)
    return dl_seterr(z->env->err_owner, DLOCK_EINVAL,
                     "a ZooKeeper lock name is a znode path (\"/locks/x\": "
                     "no empty, '.' or '..' part, no control character, "
                     "not under /zookeeper), not '%s'",
                     key);
  if (n + 60 > NODE_MAX)
    return dl_seterr(z->env->err_owner, DLOCK_ENAMETOOLONG,
                     "znode path too long: '%s'", key);
  return 0;
}

/* A turn with a node of another recipe before it: a reader's with a
 * mutex's or a leader latch's, a mutex's or writer's with a latch's. */
#define TURN_FOREIGN (-2)

/* Where our node (index idx of the n sorted) stands: -1 it has the lock,
 * else the index of the node to watch. The mutex and the writer: the first
 * node has it, the others watch the one just before (of either side); a
 * leader latch's node before it is TURN_FOREIGN (it would lead beside
 * the lock's holder). A reader: it has it while no writer is before it,
 * else it watches the first writer (InterProcessReadWriteLock's
 * readLockPredicate); a node before it that is neither side's is
 * TURN_FOREIGN (the recipe would hold beside a mutex's holder there). */
static int turn_of(dl_lock_kind kind, char **v, int idx) {
  if (kind != DL_KIND_READ) {
    for (int i = 0; i < idx; i++)
      if (dl_zk_is_latch(v[i])) return TURN_FOREIGN;
    return idx == 0 ? -1 : idx - 1;
  }
  for (int i = 0; i < idx; i++) {
    if (dl_zk_is_writer(v[i])) return i;
    if (!is_reader(v[i])) return TURN_FOREIGN;
  }
  return -1;
}

/* Waits (or not) until our node has its turn: 1 acquired, 0 not by the
 * deadline, or a negative code. */
int dl_zk_await_turn(dl_zk *z, dl_acquire *a, const char *node,
                     struct String_vector *first) {
  const char *key = a->lock->key;
  const char *mine = strrchr(node, '/') + 1;
  bool walked = false; /* detect_deadlocks: once, before the first wait */
  dl_ride rides = {0};
  for (;;) {
    struct String_vector sv = {0};
    int zrc = ZOK;
    if (first && first->data) { /* listed with the create */
      sv = *first;
      first->data = NULL;
    } else {
      atomic_fetch_add(&z->round_trips, 1);
      zrc = zoo_get_children(z->zh, key, 0, &sv);
    }
    if (zrc != ZOK) {
      int r = dl_zk_ride_out(z, a->wait, a->deadline, zrc, &rides, key);
      if (r > 0) continue;
      return r < 0 ? r : dl_zk_err(z, zrc, "list", key);
    }
    dl_ride_answered(&rides); /* answered */
    char **v;
    int n = dl_zk_sorted_locks(&sv, &v);
    if (n < 0) {
      deallocate_String_vector(&sv);
      return dl_seterr(z->env->err_owner, DLOCK_ENOMEM, "out of memory");
    }
    int idx = -1;
    for (int i = 0; i < n && idx < 0; i++)
      if (strcmp(v[i], mine) == 0) idx = i;
    int w = idx < 0 ? -1 : turn_of(a->lock->kind, v, idx);
    char pred[NODE_MAX] = "";
    if (w >= 0) snprintf(pred, sizeof pred, "%s/%s", key, v[w]);
    free(v);
    deallocate_String_vector(&sv);
    if (idx < 0)
      return dl_seterr(z->env->err_owner, DLOCK_ELOST,
                       "our lock node %s "
                       "is gone (the session expired?)",
                       node);
    if (w == TURN_FOREIGN)
      return dl_seterr(z->env->err_owner, DLOCK_EWRONGTYPE,
                       a->lock->kind == DL_KIND_READ
                           ? "%s: a mutex's or a leader latch's node is "
                             "before ours: not a read-write lock (nothing "
                             "left)"
                           : "%s: a leader latch's node is before ours: "
                             "an election's path, no lock's (nothing left)",
                       key);
    if (w < 0) return 1;
    if (!a->wait || dl_now_ms() >= a->deadline || dl_offload_cancelled())
      return 0;
    a->waited = true;
    if (a->detect && !walked) {
      walked = true;
      static const dl_walk_ops walk = {dl_zk_waiters, dl_zk_lock_holders};
      int rc = dl_deadlock_walk(&z->base, &walk, z->env, a);
      if (rc < 0) return rc;
    }
    /* Watch that one node only (no herd), with getData as Curator, so
     * that no watch is left on a node that does not exist. */
    pthread_mutex_lock(&z->mu);
    uint64_t seen = z->events;
    pthread_mutex_unlock(&z->mu);
    char buf[1];
    int blen = (int)sizeof buf;
    atomic_fetch_add(&z->round_trips, 1);
    zrc = zoo_wget(z->zh, pred, dl_zk_watcher, z, buf, &blen, NULL);
    if (zrc == ZNONODE) continue;
    if (zrc != ZOK) {
      int r = dl_zk_ride_out(z, a->wait, a->deadline, zrc, &rides, key);
      if (r > 0) continue;
      return r < 0 ? r : dl_zk_err(z, zrc, "watch", pred);
    }
    int rc = dl_zk_await_event(z, seen, a->deadline, key);
    if (rc != 0) return rc;
  }
}

int dl_zk_lock_acquire(dl_backend *b, dl_acquire *a) {
  dl_zk *z = (dl_zk *)b;
  const dl_lock_ref *l = a->lock;
  if (mark_of(l->kind) == NULL)
    return dl_seterr(z->env->err_owner, DLOCK_ENOTSUP,
                     "the ZooKeeper "
                     "backend has no plain string lock (it has Curator's "
                     "mutex and read-write lock)");
  int rc = dl_zk_check_path(z, l->key);
  if (rc != 0) return rc;
  dl_zk_clean_orphans(z);
  /* A read-write lock's sides: the writer's owner is the reader's plus
   * ":write". */
  char other[DL_OWNER_MAX + 8];
  size_t ol = strlen(l->owner);
  if (l->kind == DL_KIND_WRITE && ol > 6)
    snprintf(other, sizeof other, "%.*s", (int)(ol - 6), l->owner);
  else
    snprintf(other, sizeof other, "%s:write", l->owner);
  int64_t sent = dl_now_ms();
  pthread_mutex_lock(&z->mu);
  bool other_held = (l->kind == DL_KIND_READ || l->kind == DL_KIND_WRITE) &&
                    !z->expired && dl_zk_hold_find(z, l->key, other) != NULL;
  zk_hold *h = a->held > 0 ? dl_zk_hold_find(z, l->key, l->owner) : NULL;
  uint64_t czxid = h ? h->czxid : 0;
  char node[NODE_MAX];
  if (h) snprintf(node, sizeof node, "%s", h->node);
  pthread_mutex_unlock(&z->mu);
  if (h) { /* re-entry: no second node; the node must still be ours */
    struct Stat st;
    atomic_fetch_add(&z->round_trips, 1);
    int zrc = zoo_exists(z->zh, node, 0, &st);
    if (zrc == ZOK) { /* the client counts the re-entry */
      a->status = 2;
      a->token = czxid;
      a->valid_until = dl_zk_valid_until(z, sent);
      return 1;
    }
    if (zrc != ZNONODE) return dl_zk_err(z, zrc, "check", node);
    dl_zk_hold_free(
        dl_zk_hold_take(z, l->key, l->owner)); /* lost: take it afresh */
  }
  /* Curator's reader waits for itself here, forever; dlock refuses. */
  if (l->kind == DL_KIND_WRITE && other_held)
    return dl_seterr(z->env->err_owner, DLOCK_EDEADLK,
                     "this owner holds the read lock of '%s': release it "
                     "before asking for the write lock",
                     l->name);
  int64_t limit = dl_zk_create_limit(z, sent, a->wait, a->deadline);
  /* The node's data: the owner id, then a newline and the holder's
   * description if it set one (Curator stores the host address and never
   * reads it back; dlock status shows it). */
  char data[DL_OWNER_MAX + DLOCK_INFO_MAX + 2];
  snprintf(data, sizeof data, "%s%s%s", l->owner,
           a->info && *a->info ? "\n" : "", a->info ? a->info : "");
  struct String_vector first;
  int plen;
  rc = dl_zk_create_listed(z, l->key, mark_of(l->kind), data, NULL, node,
                           sizeof node, &czxid, limit, &first, &plen);
  if (rc != 0) return rc;
  /* Someone else's node (data, or children no recipe makes: a semaphore's,
   * an application's): ours goes at once, nothing else is touched (the
   * listing came with the create, in the same round trip). */
  zk_place p = first.data ? dl_zk_place_of(NULL, plen, &first) : ZK_LOCKS;
  if (p != ZK_LOCKS && p != ZK_EMPTY) {
    deallocate_String_vector(&first);
    dl_zk_delete_own(z, node);
    return dl_zk_wrong_place(z, p, l->key, "lock");
  }
  /* The write holder takes the read side at once: the downgrade. */
  rc = l->kind == DL_KIND_READ && other_held
           ? 1
           : dl_zk_await_turn(z, a, node, &first);
  if (first.data) deallocate_String_vector(&first);
  if (rc != 1) {
    /* Not acquired (timeout or error): our node goes, as Curator's; the
     * error's detail stays the cause's, not the delete's. */
    char why[400];
    dl_err_copy(z->env->err_owner, why, sizeof why);
    if (dl_zk_delete_own(z, node) != 0 && rc < 0 && why[0])
      dl_seterr(z->env->err_owner, rc, "%s", why);
    if (rc == 0) a->ttl = DLOCK_TTL_NONE; /* ZooKeeper locks have no lease */
    return rc;
  }
  rc = dl_zk_hold_add(z, l->key, l->owner, node, czxid);
  if (rc != 0) {
    dl_zk_delete_own(z, node);
    return rc;
  }
  a->status = 1;
  a->token = czxid;
  /* Acquired when the listing (after the create) came back: the session
   * was alive when the create was sent. */
  a->valid_until = dl_zk_valid_until(z, sent);
  return 1;
}

int dl_zk_lock_release(dl_backend *b, const dl_lock_ref *l, int64_t lease_ms,
                       int count) {
  (void)lease_ms;
  dl_zk *z = (dl_zk *)b;
  /* Re-entered: one hold less (the client counts it), the node stays. */
  if (count > 1) return 0;
  zk_hold *h = dl_zk_hold_take(z, l->key, l->owner);
  if (h == NULL)
    return dl_seterr(z->env->err_owner, DLOCK_ENOTOWNER,
                     "'%s' is not held "
                     "by %s",
                     l->name, l->owner);
  /* The node's name holds our own random UUID: nobody else's node can
   * have it, so deleting it by name needs no check first (one round trip,
   * as Curator). ZNONODE: it was gone (deleted by an operator, or the
   * session expired), unless a delete sent before a connection loss did
   * it. */
  int64_t deadline = dl_now_ms() + z->command_timeout_ms;
  bool lost_reply = false;
  int rc;
  for (;;) {
    atomic_fetch_add(&z->round_trips, 1);
    int zrc = zoo_delete(z->zh, h->node, -1);
    if (zrc == ZOK || (zrc == ZNONODE && lost_reply)) {
      rc = 1;
    } else if (zrc == ZNONODE) {
      rc = dl_seterr(z->env->err_owner, DLOCK_ENOTOWNER,
                     "'%s' was no longer "
                     "held by %s (its node was deleted, or the session "
                     "expired)",
                     l->name, l->owner);
    } else if ((zrc == ZCONNECTIONLOSS || zrc == ZOPERATIONTIMEOUT) &&
               dl_now_ms() < deadline) {
      lost_reply = true;
      dl_sleep_ms(20);
      continue;
    } else {
      rc = dl_zk_err(z, zrc, "delete", h->node);
      dl_zk_orphan_node(z, h->node); /* deleted later */
    }
    break;
  }
  dl_zk_hold_free(h);
  return rc;
}

int dl_zk_list_locks(dl_zk *z, const char *key, struct String_vector *sv,
                     char ***v, bool *none) {
  *v = NULL;
  memset(sv, 0, sizeof *sv);
  if (none) *none = false;
  atomic_fetch_add(&z->round_trips, 1);
  int zrc = zoo_get_children(z->zh, key, 0, sv);
  if (zrc == ZNONODE) {
    if (none) *none = true;
    return 0;
  }
  if (zrc != ZOK) return dl_zk_err(z, zrc, "list", key);
  int n = dl_zk_sorted_locks(sv, v);
  if (n <= 0) dl_zk_locks_free(sv, v);
  if (n < 0) return dl_seterr(z->env->err_owner, DLOCK_ENOMEM, "out of memory");
  return n;
}

void dl_zk_locks_free(struct String_vector *sv, char ***v) {
  free(*v);
  *v = NULL;
  if (sv->data) deallocate_String_vector(sv);
  memset(sv, 0, sizeof *sv);
}

int dl_zk_lock_force_release(dl_backend *b, const dl_lock_ref *l) {
  dl_zk *z = (dl_zk *)b;
  int rc = dl_zk_check_path(z, l->key);
  if (rc != 0) return rc;
  zk_place p;
  if ((rc = dl_zk_read_place(z, l->key, &p)) != 0) return rc;
  if (p != ZK_NONE && p != ZK_EMPTY && p != ZK_LOCKS)
    return dl_zk_wrong_place(z, p, l->key, "lock");
  struct String_vector sv;
  char **v;
  int n = dl_zk_list_locks(z, l->key, &sv, &v, NULL);
  if (n <= 0) return n;
  /* The holders' nodes go (what an operator does with zkCli): the first,
   * or every reader that holds a read-write lock; their sessions see the
   * nodes missing at their next renewal. */
  int k = dl_zk_holders(v, n);
  for (int i = 0; i < k && rc == 0; i++) {
    char node[NODE_MAX];
    snprintf(node, sizeof node, "%s/%s", l->key, v[i]);
    rc = dl_zk_delete_node(z, node, dl_now_ms() + z->command_timeout_ms);
  }
  dl_zk_locks_free(&sv, &v);
  return rc == 0 ? 1 : rc;
}

int dl_zk_lock_query(dl_backend *b, const dl_lock_ref *l, dl_lock_query q,
                     long long *v) {
  dl_zk *z = (dl_zk *)b;
  int rc = dl_zk_check_path(z, l->key);
  if (rc != 0) return rc;
  *v = 0;
  if (q == DL_QUERY_HELD || q == DL_QUERY_COUNT) {
    pthread_mutex_lock(&z->mu);
    zk_hold *h = z->expired ? NULL : dl_zk_hold_find(z, l->key, l->owner);
    char node[NODE_MAX] = "";
    uint64_t czxid = h ? h->czxid : 0;
    if (h) snprintf(node, sizeof node, "%s", h->node);
    pthread_mutex_unlock(&z->mu);
    if (node[0] == '\0') return 0;
    struct Stat st;
    atomic_fetch_add(&z->round_trips, 1);
    int zrc = zoo_exists(z->zh, node, 0, &st);
    if (zrc != ZOK && zrc != ZNONODE) return dl_zk_err(z, zrc, "check", node);
    if (zrc == ZOK && (uint64_t)st.czxid == czxid) {
      int count = z->env->hold_count(z->env->holds, l->key, l->owner);
      *v = q == DL_QUERY_HELD || count < 1 ? 1 : count;
    }
    return 0;
  }
  struct String_vector sv;
  char **names;
  int n = dl_zk_list_locks(z, l->key, &sv, &names, NULL);
  if (n < 0) return n;
  if (q == DL_QUERY_LOCKED)
    *v = n > 0;
  else if (q == DL_QUERY_TTL)
    *v = n > 0 ? DLOCK_TTL_NONE : DLOCK_TTL_FREE;
  else if (q == DL_QUERY_TOKEN && n > 0) {
    char node[NODE_MAX];
    snprintf(node, sizeof node, "%s/%s", l->key, names[0]);
    struct Stat st;
    atomic_fetch_add(&z->round_trips, 1);
    if (zoo_exists(z->zh, node, 0, &st) == ZOK) *v = (long long)st.czxid;
  }
  dl_zk_locks_free(&sv, &names);
  return 0;
}

/* A renewal round's checks in flight: one exists per hold, answered on
 * ZooKeeper's completion thread. The round waits for them no longer than
 * its deadline (the earliest validity in it: a later answer is too late
 * for that hold), so it may return first; the last of the round and the
 * answers frees it (refs, under z->mu). */
typedef struct renew_check {
  struct renew_round *rr;
  int zrc; /* ZooKeeper's answer, once done */
  struct Stat st;
  bool done;
  uint64_t czxid; /* the hold's node's */
} renew_check;

typedef struct renew_round {
  dl_zk *z;
  int refs, pending;
  renew_check c[];
} renew_round;

static void renew_unref(renew_round *rr) {
  if (--rr->refs == 0) free(rr);
}

static void renew_answered(int zrc, const struct Stat *st, const void *data) {
  renew_check *c = (renew_check *)data;
  renew_round *rr = c->rr;
  dl_zk *z = rr->z;
  pthread_mutex_lock(&z->mu);
  c->zrc = zrc;
  if (st) c->st = *st;
  c->done = true;
  rr->pending--;
  pthread_cond_broadcast(&z->cv);
  renew_unref(rr);
  pthread_mutex_unlock(&z->mu);
}

int dl_zk_renew(dl_backend *b, int64_t deadline, int64_t lease_ms, int n,
                dl_renew_item *items, int *calls) {
  (void)lease_ms;
  dl_zk *z = (dl_zk *)b;
  int first = 0;
  *calls = 0;
  dl_zk_clean_orphans(z);
  renew_round *rr = calloc(1, sizeof *rr + (size_t)n * sizeof rr->c[0]);
  if (rr == NULL)
    return dl_seterr(z->env->err_owner, DLOCK_ENOMEM, "out of memory");
  rr->z = z;
  rr->refs = 1;
  /* The holds' nodes; each checked with one exists, all sent at once.
   * Renewal is the session's liveness: the server answering for our own
   * node proves the session (and so the node) alive now. */
  int64_t sent = dl_now_ms();
  for (int i = 0; i < n; i++) {
    dl_renew_item *it = &items[i];
    renew_check *c = &rr->c[i];
    it->result = -1;
    pthread_mutex_lock(&z->mu);
    /* A permit's hold is its lease node (semaphore.c), under its own
     * owner: found the same way. */
    zk_hold *h = dl_zk_hold_find(z, it->key, it->owner);
    char node[NODE_MAX] = "";
    c->czxid = h ? h->czxid : 0;
    if (h) snprintf(node, sizeof node, "%s", h->node);
    bool expired = z->expired;
    pthread_mutex_unlock(&z->mu);
    if (node[0] == '\0' || expired) {
      it->result = 0; /* the session ended: never re-created */
      dl_zk_hold_free(dl_zk_hold_take(z, it->key, it->owner));
      continue;
    }
    c->rr = rr;
    pthread_mutex_lock(&z->mu);
    rr->refs++;
    rr->pending++;
    pthread_mutex_unlock(&z->mu);
    (*calls)++;
    atomic_fetch_add(&z->round_trips, 1);
    int zrc = zoo_aexists(z->zh, node, 0, renew_answered, c);
    if (zrc != ZOK) { /* not sent: answered here */
      pthread_mutex_lock(&z->mu);
      c->zrc = zrc;
      c->done = true;
      rr->pending--;
      rr->refs--;
      pthread_mutex_unlock(&z->mu);
    }
  }
  /* The answers, until the deadline (or the client closing). */
  pthread_mutex_lock(&z->mu);
  while (rr->pending > 0 && !atomic_load(z->env->closing) &&
         dl_now_ms() < deadline) {
    struct timespec ts;
    dl_abstime(deadline, &ts);
    pthread_cond_timedwait(&z->cv, &z->mu, &ts);
  }
  pthread_mutex_unlock(&z->mu);
  for (int i = 0; i < n; i++) {
    dl_renew_item *it = &items[i];
    renew_check *c = &rr->c[i];
    if (c->rr == NULL) continue; /* answered above */
    pthread_mutex_lock(&z->mu);
    bool done = c->done;
    int zrc = c->zrc;
    struct Stat st = c->st;
    pthread_mutex_unlock(&z->mu);
    if (!done) {
      if (first == 0)
        first = dl_seterr(z->env->err_owner, DLOCK_ETIMEDOUT,
                          "ZooKeeper "
                          "renew %s: no answer before its validity ended",
                          it->key);
    } else if (zrc == ZOK && (uint64_t)st.czxid == c->czxid) {
      it->result = 1;
      it->valid_until = dl_zk_valid_until(z, sent);
    } else if (zrc == ZOK || zrc == ZNONODE) {
      it->result = 0; /* deleted (force release): lost, not re-created */
      dl_zk_hold_free(dl_zk_hold_take(z, it->key, it->owner));
    } else if (first == 0) {
      first = dl_zk_err(z, zrc, "renew", it->key);
    }
  }
  pthread_mutex_lock(&z->mu);
  renew_unref(rr);
  pthread_mutex_unlock(&z->mu);
  return first;
}
