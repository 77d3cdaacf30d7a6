/* semaphore.c: Curator's InterProcessSemaphoreV2 on ZooKeeper, as dlock's
 * permit-expirable semaphore. Under the semaphore's path: "locks", the
 * mutex a taker holds while it takes a lease, and "leases", one protected
 * ephemeral-sequential "_c_<uuid>-lease-N" node per permit out. A permit's
 * id is its node's UUID without the dashes. Curator keeps the number of
 * permits in each client's constructor; dlock keeps it as the data of the
 * semaphore's path (a persistent node), which Curator never reads. */
#include "zkb.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "<path>/<child>" into buf. */
static void sub(char *buf, size_t len, const char *path, const char *child) {
  snprintf(buf, len, "%s/%s", path, child);
}

/* The permit id (32 hex digits) as the UUID of its node's name. */
static void uuid_of(const char *id, char out[37]) {
  snprintf(out, 37, "%.8s-%.4s-%.4s-%.4s-%.12s", id, id + 8, id + 12, id + 16,
           id + 20);
}

static bool valid_id(const char *id) {
  if (id == NULL || strlen(id) != DLOCK_PERMIT_ID_LEN - 1) return false;
  for (const char *p = id; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return false;
  return true;
}

/* The permits set at `path`: 1 and *n, 0 none set (no node or no number
 * in it; *version then the node's, -1 no node), or a negative code (the
 * call's ZooKeeper code in *zrcp, if given). */
static int read_count(dl_zk *z, const char *path, long long *n, int *version,
                      int *zrcp) {
  char buf[32];
  int len = (int)sizeof buf - 1;
  struct Stat st;
  atomic_fetch_add(&z->round_trips, 1);
  int zrc = zoo_get(z->zh, path, 0, buf, &len, &st);
  if (zrcp) *zrcp = zrc;
  *n = 0;
  *version = -1;
  if (zrc == ZNONODE) return 0;
  if (zrc != ZOK) return dl_zk_err(z, zrc, "read", path);
  *version = st.version;
  if (len <= 0) return 0;
  buf[len] = '\0';
  char *end;
  long long v = strtoll(buf, &end, 10);
  if (end == buf || *end != '\0') return 0;
  *n = v;
  return 1;
}

/* The leases out (children of <path>/leases): how many, or a negative
 * code (the call's ZooKeeper code in *zrcp, if given). With watch, a child
 * watch is left that fires at the next change. */
static int count_leases(dl_zk *z, const char *path, bool watch, int *zrcp) {
  char leases[NODE_MAX];
  sub(leases, sizeof leases, path, "leases");
  struct String_vector sv = {0};
  atomic_fetch_add(&z->round_trips, 1);
  int zrc = watch ? zoo_wget_children(z->zh, leases, dl_zk_watcher, z, &sv)
                  : zoo_get_children(z->zh, leases, 0, &sv);
  if (zrcp) *zrcp = zrc;
  if (zrc == ZNONODE) return 0;
  if (zrc != ZOK) return dl_zk_err(z, zrc, "list", leases);
  int n = 0;
  for (int i = 0; i < sv.count; i++)
    if (strstr(sv.data[i], "lease-")) n++;
  deallocate_String_vector(&sv);
  return n;
}

/* The lease node of permit `id` under path: 1 (its path in out), 0 none,
 * or a negative code. */
static int find_lease(dl_zk *z, const char *path, const char *id, char *out,
                      size_t len) {
  char leases[NODE_MAX], uuid[37], prefix[64];
  sub(leases, sizeof leases, path, "leases");
  uuid_of(id, uuid);
  snprintf(prefix, sizeof prefix, "_c_%s-", uuid);
  struct String_vector sv = {0};
  atomic_fetch_add(&z->round_trips, 1);
  int zrc = zoo_get_children(z->zh, leases, 0, &sv);
  if (zrc == ZNONODE) return 0;
  if (zrc != ZOK) return dl_zk_err(z, zrc, "list", leases);
  int found = 0;
  for (int i = 0; i < sv.count && !found; i++)
    if (strncmp(sv.data[i], prefix, strlen(prefix)) == 0) {
      int w = snprintf(out, len, "%s/%s", leases, sv.data[i]);
      found = w > 0 && (size_t)w < len;
    }
  deallocate_String_vector(&sv);
  return found;
}

/* 0 if path is a semaphore's place (or nothing, or an empty node), else
 * DLOCK_EWRONGTYPE recorded (someone else's node, a lock's), or a
 * negative code. */
static int check_place(dl_zk *z, const char *path) {
  zk_place p;
  int rc = dl_zk_read_place(z, path, &p);
  if (rc != 0) return rc;
  if (p == ZK_NONE || p == ZK_EMPTY || p == ZK_SEMAPHORE) return 0;
  return dl_zk_wrong_place(z, p, path, "semaphore");
}

/* Sets the permits at path to n if none are set (set_only), or adds n to
 * them: 1 changed, 0 a count was already set (set_only), or a negative
 * code (DLOCK_ERANGE: the sum would not fit an int). The path is a persistent
 * node, its parents containers. */
static int write_count(dl_zk *z, const char *path, long long n,
                       bool set_only) {
  int prc = check_place(z, path);
  if (prc != 0) return prc;
  for (int tries = 0; tries < 100; tries++) {
    long long cur;
    int version;
    int rc = read_count(z, path, &cur, &version, NULL);
    if (rc < 0) return rc;
    if (rc == 1 && set_only) return 0;
    /* The API counts in an int: a change that takes the permits past it
     * (or further past) is refused before the write. */
    if (!set_only &&
        ((n > 0 && cur + n > INT_MAX) || (n < 0 && cur + n < INT_MIN)))
      return dl_seterr(z->env->err_owner, DLOCK_ERANGE,
                       "%s holds %lld permits: adding %lld would take the "
                       "count outside an int (nothing changed)",
                       path, cur, n);
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", set_only ? n : cur + n);
    int zrc;
    atomic_fetch_add(&z->round_trips, 1);
    if (version < 0) {
      zrc = zoo_create(z->zh, path, buf, (int)strlen(buf), z->acl,
                       ZOO_PERSISTENT, NULL, 0);
      if (zrc == ZNONODE) { /* its parents first */
        char parent[NODE_MAX];
        snprintf(parent, sizeof parent, "%s", path);
        char *slash = strrchr(parent, '/');
        if (slash && slash != parent) {
          *slash = '\0';
          if ((rc = dl_zk_make_parents(z, parent)) != 0) return rc;
        }
        continue;
      }
      if (zrc == ZNODEEXISTS) continue;
    } else {
      zrc = zoo_set(z->zh, path, buf, (int)strlen(buf), version);
      if (zrc == ZBADVERSION || zrc == ZNONODE) continue;
    }
    if (zrc != ZOK) return dl_zk_err(z, zrc, "write", path);
    return 1;
  }
  return dl_seterr(z->env->err_owner, DLOCK_EBUSY, "the permits of %s kept "
                   "changing", path);
}

/* Waits, holding the "locks" mutex, until the leases (ours included) are
 * at most the permits: 1, 0 not by the deadline, or a negative code. A
 * wait rides out the connection's loss (dl_zk_ride_out): our nodes stay
 * while the session lives. */
static int await_lease(dl_zk *z, const char *path, const char *node,
                       bool wait, int64_t deadline) {
  dl_ride rides = {0};
  for (;;) {
    pthread_mutex_lock(&z->mu);
    uint64_t seen = z->events;
    pthread_mutex_unlock(&z->mu);
    long long max;
    int version, zrc = ZOK;
    int rc = read_count(z, path, &max, &version, &zrc);
    int n = rc < 0 ? rc : count_leases(z, path, true, &zrc);
    if (n >= 0) {
      struct Stat st;
      atomic_fetch_add(&z->round_trips, 1);
      zrc = zoo_exists(z->zh, node, 0, &st);
    }
    if (zrc != ZOK && zrc != ZNONODE) {
      int r = dl_zk_ride_out(z, wait, deadline, zrc, &rides, path);
      if (r > 0) continue;
      if (r < 0) return r;
    }
    if (rc < 0) return rc;
    if (n < 0) return n;
    if (zrc == ZNONODE)
      return dl_seterr(z->env->err_owner, DLOCK_ELOST, "our lease node %s "
                       "is gone (the session expired?)", node);
    if (zrc != ZOK) return dl_zk_err(z, zrc, "check", node);
    dl_ride_answered(&rides); /* answered */
    if (n <= max) return 1;
    if (!wait || dl_now_ms() >= deadline || dl_offload_cancelled()) return 0;
    rc = dl_zk_await_event(z, seen, deadline, path);
    if (rc != 0) return rc;
  }
}

int dl_zk_permit_acquire(dl_backend *b, const dl_sync_ref *s, const char *id,
                         int64_t lease_ms, bool wait, int64_t deadline,
                         int64_t *valid_until) {
  (void)lease_ms; /* a lease node lives as long as the session */
  dl_zk *z = (dl_zk *)b;
  int rc = dl_zk_check_path(z, s->key);
  if (rc != 0) return rc;
  if (!valid_id(id))
    return dl_seterr(z->env->err_owner, DLOCK_EINVAL, "a permit id is 32 "
                     "lower-case hex digits");
  if ((rc = check_place(z, s->key)) != 0) return rc;
  dl_zk_clean_orphans(z);
  int64_t sent = dl_now_ms();
  int64_t limit = dl_zk_create_limit(z, sent, wait, deadline);
  char owner[DL_OWNER_MAX], locks[NODE_MAX];
  snprintf(owner, sizeof owner, "%s:%s", z->env->client_id, id);
  sub(locks, sizeof locks, s->key, "locks");
  /* 1. The "locks" mutex: one taker at a time. */
  dl_lock_ref lr = {.key = locks, .name = s->name, .owner = owner,
                    .kind = DL_KIND_LOCK, .hint = s->hint};
  dl_acquire a = {.lock = &lr, .wait = wait, .deadline = deadline};
  char mnode[NODE_MAX];
  uint64_t mz;
  struct String_vector first;
  rc = dl_zk_create_protected(z, locks, "lock-", owner, NULL, mnode,
                              sizeof mnode, &mz, limit, &first);
  if (rc != 0) return rc;
  rc = dl_zk_await_turn(z, &a, mnode, &first);
  if (first.data) deallocate_String_vector(&first);
  if (rc == 1) {
    /* 2. Our lease node, named by the permit's id; 3. wait until the
     * leases fit the permits. */
    char uuid[37], leases[NODE_MAX], lnode[NODE_MAX];
    uint64_t lz = 0;
    uuid_of(id, uuid);
    sub(leases, sizeof leases, s->key, "leases");
    rc = dl_zk_create_protected(z, leases, "lease-", owner, uuid, lnode,
                                sizeof lnode, &lz, limit, NULL);
    if (rc == 0) {
      rc = await_lease(z, s->key, lnode, wait, deadline);
      if (rc == 1) {
        int h = dl_zk_hold_add(z, s->key, owner, lnode, lz);
        if (h != 0) rc = h;
      }
      /* Not taken (timeout, error): our lease goes, as Curator's. */
      if (rc != 1)
        dl_zk_delete_own(z, lnode);
    }
  }
  /* 4. The mutex goes, taken or not. */
  dl_zk_delete_own(z, mnode);
  if (rc == 1) *valid_until = dl_zk_valid_until(z, sent);
  return rc;
}

int dl_zk_sync_update(dl_backend *b, const dl_sync_ref *s, dl_sync_op op,
                      long long n, const char *id, long long *v) {
  dl_zk *z = (dl_zk *)b;
  *v = 0;
  int rc = dl_zk_check_path(z, s->key);
  if (rc != 0) return rc;
  switch (op) {
  case DL_PERMITS_SET:
    rc = write_count(z, s->key, n, true);
    if (rc >= 0) *v = rc;
    return rc < 0 ? rc : 0;
  case DL_PERMITS_ADD:
    rc = write_count(z, s->key, n, false);
    return rc < 0 ? rc : 0;
  case DL_PERMITS_AVAILABLE: {
    long long max;
    int version;
    rc = read_count(z, s->key, &max, &version, NULL);
    if (rc < 0) return rc;
    int out = count_leases(z, s->key, false, NULL);
    if (out < 0) return out;
    *v = max - out > 0 ? max - out : 0;
    return 0;
  }
  case DL_PERMITS_RELEASE:
  case DL_PERMITS_FORCE: {
    if (!valid_id(id))
      return dl_seterr(z->env->err_owner, DLOCK_EINVAL, "a permit id is 32 "
                       "lower-case hex digits");
    char node[NODE_MAX], owner[DL_OWNER_MAX];
    rc = find_lease(z, s->key, id, node, sizeof node);
    snprintf(owner, sizeof owner, "%s:%s", z->env->client_id, id);
    dl_zk_hold_drop(z, s->key, owner);
    if (rc <= 0) return rc;
    rc = dl_zk_delete_node(z, node, dl_now_ms() + z->command_timeout_ms);
    if (rc == 0) *v = 1;
    return rc;
  }
  default:
    return dl_seterr(z->env->err_owner, DLOCK_ENOTSUP, "the ZooKeeper "
                     "backend has the permit-expirable semaphore (Curator's "
                     "InterProcessSemaphoreV2), not Redisson's semaphore or "
                     "latch");
  }
}

int dl_zk_permits_state(dl_zk *z, const char *path, int64_t *counter,
                        int *taken) {
  long long max;
  int version;
  *counter = -1;
  *taken = 0;
  int rc = read_count(z, path, &max, &version, NULL);
  if (rc <= 0) return rc;
  int out = count_leases(z, path, false, NULL);
  if (out < 0) return out;
  *taken = out;
  *counter = max - out > 0 ? max - out : 0;
  return 1;
}
