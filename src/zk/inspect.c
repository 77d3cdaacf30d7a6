/* inspect.c: what lives at a ZooKeeper lock path (dlock status) and the
 * lock paths under a path (dlock list). */
#include "zkb.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The holder's node: owner (the data's first line) and info (the rest);
 * a Curator node's data (its host address) shows as the owner. */
static void fill_holder(dl_zk *z, const char *node, dlock_lock_state *st) {
  char buf[DLOCK_OWNER_MAX + DLOCK_INFO_MAX + 2];
  int len = (int)sizeof buf - 1;
  struct Stat s;
  atomic_fetch_add(&z->round_trips, 1);
  if (zoo_get(z->zh, node, 0, buf, &len, &s) != ZOK) return;
  buf[len < 0 ? 0 : len] = '\0';
  char *nl = strchr(buf, '\n');
  if (nl) {
    *nl = '\0';
    snprintf(st->info, sizeof st->info, "%.*s", (int)sizeof st->info - 1,
             nl + 1);
    st->held_ms = wall_ms() - s.ctime; /* the server's create time */
    if (st->held_ms < 0) st->held_ms = 0;
  }
  snprintf(st->owner, sizeof st->owner, "%.*s", (int)sizeof st->owner - 1,
           buf);
  st->token = (uint64_t)s.czxid;
  /* One, or this client's count if the node is one of its holds. */
  char key[NODE_MAX] = "", owner[DL_OWNER_MAX] = "";
  pthread_mutex_lock(&z->mu);
  for (zk_hold *h = z->holds; h && key[0] == '\0'; h = h->next)
    if (strcmp(h->node, node) == 0) {
      snprintf(key, sizeof key, "%s", h->key);
      snprintf(owner, sizeof owner, "%s", h->owner);
    }
  pthread_mutex_unlock(&z->mu);
  int count = key[0] ? z->env->hold_count(z->env->holds, key, owner) : 0;
  st->hold_count = count > 1 ? count : 1;
}

int dl_zk_inspect(dl_backend *b, const char *key, dlock_lock_state *st) {
  dl_zk *z = (dl_zk *)b;
  memset(st, 0, sizeof *st);
  st->held_ms = -1;
  st->ttl_ms = DLOCK_TTL_FREE;
  st->counter = -1;
  int rc = dl_zk_check_path(z, key);
  if (rc != 0) return rc;
  struct String_vector sv;
  char **v;
  bool none;
  int n = dl_zk_list_locks(z, key, &sv, &v, &none);
  if (n < 0) return n;
  snprintf(st->type, sizeof st->type, "%s", none ? "none" : "znode");
  if (none) return 0;
  if (n > 0) {
    char node[NODE_MAX];
    snprintf(node, sizeof node, "%s/%s", key, v[0]);
    int k = dl_zk_holders(v, n);
    st->held = 1;
    st->holders = k;
    /* No lease: held until released or its session ends. */
    st->ttl_ms = DLOCK_TTL_NONE;
    st->waiters = n - k;
    st->queued = n - k;
    fill_holder(z, node, st);
    if (dl_zk_is_writer(v[0])) {
      snprintf(st->mode, sizeof st->mode, "write");
    } else if (strstr(v[0], "__READ__")) {
      snprintf(st->mode, sizeof st->mode, "read");
      st->readers = k;
    }
  }
  dl_zk_locks_free(&sv, &v);
  /* A semaphore (Curator's InterProcessSemaphoreV2 with dlock's count):
   * its permits free and taken. */
  rc = dl_zk_permits_state(z, key, &st->counter, &st->permits_taken);
  if (rc < 0) return rc;
  /* Someone else's node is named for what it holds (no recipe takes it);
   * an empty one holds nothing; a semaphore without dlock's count
   * (Curator's alone) has no permit free. */
  zk_place p;
  if ((rc = dl_zk_read_place(z, key, &p)) != 0) return rc;
  if (p == ZK_DATA || p == ZK_CHILDREN)
    snprintf(st->type, sizeof st->type, "%s", p == ZK_DATA ? "data" : "nodes");
  else if (p == ZK_EMPTY || p == ZK_NONE)
    snprintf(st->type, sizeof st->type, "none");
  else if (p == ZK_SEMAPHORE && st->counter < 0)
    st->counter = 0;
  return 0;
}

int dl_zk_lock_holders(dl_backend *b, const char *key, dl_holder_cb cb,
                       void *ud) {
  dl_zk *z = (dl_zk *)b;
  int rc = dl_zk_check_path(z, key);
  if (rc != 0) return rc;
  struct String_vector sv;
  char **v;
  int n = dl_zk_list_locks(z, key, &sv, &v, NULL);
  if (n < 0) return n;
  /* The holders: the first node, or the readers in front (each node's
   * data's first line names its owner). */
  int k = n > 0 ? dl_zk_holders(v, n) : 0;
  for (int i = 0; i < k; i++) {
    char node[NODE_MAX];
    snprintf(node, sizeof node, "%s/%s", key, v[i]);
    dlock_lock_state st;
    memset(&st, 0, sizeof st);
    fill_holder(z, node, &st);
    if (st.owner[0] && cb(st.owner, ud) != 0) break;
  }
  dl_zk_locks_free(&sv, &v);
  return 0;
}

typedef struct walk {
  dl_zk *z;
  const char *match;
  size_t prefix_len;
  dlock_scan_cb cb;
  void *ud;
  int found;
  int rc;
  bool stop;
} walk;

/* Whether path is ".../locks" beside a ".../leases": the mutex of a
 * semaphore (Curator's InterProcessSemaphoreV2), not a lock of its own. */
static bool is_semaphore_mutex(dl_zk *z, const char *path) {
  size_t n = strlen(path);
  if (n < 7 || strcmp(path + n - 6, "/locks") != 0) return false;
  char leases[NODE_MAX];
  snprintf(leases, sizeof leases, "%.*s/leases", (int)(n - 6), path);
  struct Stat st;
  atomic_fetch_add(&z->round_trips, 1);
  return zoo_exists(z->zh, leases, 0, &st) == ZOK;
}

/* Visits path and its children, depth first (at most 64 levels). */
static void visit(walk *w, const char *path, int depth) {
  struct String_vector sv = {0};
  atomic_fetch_add(&w->z->round_trips, 1);
  int zrc = zoo_get_children(w->z->zh, path, 0, &sv);
  if (zrc == ZNONODE) return;
  if (zrc != ZOK) {
    w->rc = dl_zk_err(w->z, zrc, "list", path);
    w->stop = true;
    return;
  }
  /* A path with lock (or election) nodes; a semaphore's insides are not
   * locks: its leases/, nor its locks/ mutex (beside a leases/). */
  bool locks = false, semaphore = false;
  for (int i = 0; i < sv.count; i++) {
    const char *n = sv.data[i];
    if (strcmp(n, "leases") == 0) semaphore = true;
    if (!strstr(n, "lease-") && dl_zk_seq_of(n)) locks = true;
  }
  if (locks && is_semaphore_mutex(w->z, path)) locks = false;
  if (locks && strlen(path) > w->prefix_len &&
      fnmatch(w->match, path, 0) == 0) {
    w->found++;
    if (w->cb(path + w->prefix_len, w->ud) != 0) w->stop = true;
  }
  for (int i = 0; i < sv.count && !w->stop && depth < 64; i++) {
    /* Lock nodes themselves have no children: not descended into; nor a
     * semaphore's leases. */
    if (dl_zk_seq_of(sv.data[i]) || strcmp(sv.data[i], "zookeeper") == 0 ||
        (semaphore && strcmp(sv.data[i], "leases") == 0))
      continue;
    char child[NODE_MAX];
    int len = snprintf(child, sizeof child, "%s/%s",
                       strcmp(path, "/") == 0 ? "" : path, sv.data[i]);
    if (len > 0 && (size_t)len < sizeof child) visit(w, child, depth + 1);
  }
  deallocate_String_vector(&sv);
}

int dl_zk_scan(dl_backend *b, const char *match, size_t prefix_len,
               dlock_scan_cb cb, void *ud) {
  dl_zk *z = (dl_zk *)b;
  /* Start below the pattern's glob-free directory ("/locks/a*" walks
   * /locks), not at the root. */
  char start[NODE_MAX];
  size_t n = strcspn(match, "*?[\\");
  if (n >= sizeof start) n = sizeof start - 1;
  memcpy(start, match, n);
  start[n] = '\0';
  if (match[n] == '\0' && n > 1) { /* no glob: the path itself */
  } else {
    char *slash = strrchr(start, '/');
    if (slash == NULL || slash == start) snprintf(start, sizeof start, "/");
    else *slash = '\0';
  }
  if (start[0] != '/')
    return dl_seterr(z->env->err_owner, DLOCK_EINVAL, "a ZooKeeper pattern "
                     "is a znode path, maybe with globs (\"/locks/*\")");
  walk w = {z, match, prefix_len, cb, ud, 0, 0, false};
  visit(&w, start, 0);
  return w.rc < 0 ? w.rc : w.found;
}

/* ---- the waiters: the nodes in line behind a lock's holders ---- */
typedef struct waits {
  dl_zk *z;
  size_t prefix_len;
  dlock_waiter_cb cb;
  void *ud;
  int found, rc;
} waits;

/* Tells cb of the waiting node `name` under the lock path `key`. */
static int tell_waiter(waits *x, const char *key, const char *name) {
  char node[2 * NODE_MAX], buf[DLOCK_OWNER_MAX + DLOCK_INFO_MAX + 2];
  snprintf(node, sizeof node, "%s/%s", key, name);
  int len = (int)sizeof buf - 1;
  struct Stat s;
  atomic_fetch_add(&x->z->round_trips, 1);
  if (zoo_get(x->z->zh, node, 0, buf, &len, &s) != ZOK) return 0; /* gone */
  buf[len < 0 ? 0 : len] = '\0';
  char *nl = strchr(buf, '\n');
  if (nl) *nl = '\0';
  size_t ol = strlen(buf); /* a writer's owner: the reader's + ":write" */
  if (ol > 6 && strcmp(buf + ol - 6, ":write") == 0) buf[ol - 6] = '\0';
  dlock_waiter w = {.owner = buf,
                    .name = key + x->prefix_len,
                    .kind = dl_zk_is_writer(name)      ? "write"
                            : strstr(name, "__READ__") ? "read"
                                                       : "lock",
                    .info = nl ? nl + 1 : "",
                    .deadline_ms = 0};
  x->found++;
  return x->cb(&w, x->ud);
}

static int waiters_of(const char *name, void *ud) {
  waits *x = ud;
  char key[NODE_MAX];
  snprintf(key, sizeof key, "%.*s%s", (int)x->prefix_len, x->z->env->key_prefix,
           name);
  struct String_vector sv;
  char **v;
  /* A lock that cannot be read has no waiter to tell; out of memory
   * ends the walk. */
  int n = dl_zk_list_locks(x->z, key, &sv, &v, NULL), stop = 0;
  if (n == DLOCK_ENOMEM) x->rc = n;
  for (int i = n > 0 ? dl_zk_holders(v, n) : 0; i < n && !stop; i++)
    if (!strstr(v[i], "lease-") && !strstr(v[i], "latch-"))
      stop = tell_waiter(x, key, v[i]);
  dl_zk_locks_free(&sv, &v);
  return stop || x->rc < 0;
}

int dl_zk_waiters(dl_backend *b, const char *prefix, dlock_waiter_cb cb,
                  void *ud) {
  dl_zk *z = (dl_zk *)b;
  char match[NODE_MAX];
  snprintf(match, sizeof match, "%s%s*", prefix, prefix[0] ? "" : "/");
  waits x = {z, strlen(prefix), cb, ud, 0, 0};
  int rc = dl_zk_scan(b, match, x.prefix_len, waiters_of, &x);
  return rc < 0 ? rc : x.rc < 0 ? x.rc : x.found;
}
