/* nodes.c: the ZooKeeper backend's node plumbing, shared by its recipes:
 * parents made as containers, protected ephemeral-sequential creates (a
 * connection loss resolved through the protected name, never a second
 * node; optionally the listing in the same round trip), deletes retried,
 * and the orphans (nodes of ours we could not delete) deleted later. */
#include "zkb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* Creates every missing parent of `path` (and path itself) as containers,
 * as Curator's creatingParentContainersIfNeeded; path gets the client's
 * ACL, its parents the parents' (zkb.h). */
int dl_zk_make_parents(dl_zk *z, const char *path) {
  char buf[NODE_MAX];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = strchr(buf + 1, '/');; p = strchr(p + 1, '/')) {
    if (p) *p = '\0';
    atomic_fetch_add(&z->round_trips, 1);
    int zrc = zoo_create(z->zh, buf, NULL, -1, p ? z->parent_acl : z->acl,
                         ZOO_CONTAINER, NULL, 0);
    if (zrc != ZOK && zrc != ZNODEEXISTS)
      return dl_zk_err(z, zrc, "create", buf);
    if (p == NULL) return 0;
    *p = '/';
  }
}

/* Our node under `key` by its protected prefix "_c_<uuid>-" (after a
 * connection loss during the create): 1 and its full path in out, 0 none,
 * or a negative code. */
static int find_protected(dl_zk *z, const char *key, const char *prefix,
                          char *out, size_t len) {
  struct String_vector sv = {0};
  atomic_fetch_add(&z->round_trips, 1);
  int zrc = zoo_get_children(z->zh, key, 0, &sv);
  if (zrc == ZNONODE) return 0;
  if (zrc != ZOK) return dl_zk_err(z, zrc, "list", key);
  int found = 0;
  for (int i = 0; i < sv.count && !found; i++)
    if (strncmp(sv.data[i], prefix, strlen(prefix)) == 0) {
      snprintf(out, len, "%s/%s", key, sv.data[i]);
      found = 1;
    }
  deallocate_String_vector(&sv);
  return found;
}

int dl_zk_delete_node(dl_zk *z, const char *node, int64_t deadline) {
  for (;;) {
    atomic_fetch_add(&z->round_trips, 1);
    int zrc = zoo_delete(z->zh, node, -1);
    if (zrc == ZOK || zrc == ZNONODE) return 0;
    if ((zrc != ZCONNECTIONLOSS && zrc != ZOPERATIONTIMEOUT) ||
        dl_now_ms() >= deadline)
      return dl_zk_err(z, zrc, "delete", node);
    dl_sleep_ms(20);
  }
}

/* A delete sent with zoo_adelete, waited for a bounded time: whoever of
 * the caller and the completion comes last frees it. */
typedef struct bounded_delete {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int refs;
  bool done;
  int rc;
} bounded_delete;

static void bounded_unref(bounded_delete *d) {
  pthread_mutex_lock(&d->mu);
  bool last = --d->refs == 0;
  pthread_mutex_unlock(&d->mu);
  if (!last) return;
  pthread_mutex_destroy(&d->mu);
  pthread_cond_destroy(&d->cv);
  free(d);
}

static void on_deleted(int rc, const void *data) {
  bounded_delete *d = (bounded_delete *)data;
  pthread_mutex_lock(&d->mu);
  d->done = true;
  d->rc = rc;
  pthread_cond_signal(&d->cv);
  pthread_mutex_unlock(&d->mu);
  bounded_unref(d);
}

int dl_zk_delete_soon(dl_zk *z, const char *node, int wait_ms) {
  bounded_delete *d = calloc(1, sizeof *d);
  if (d == NULL) {
    dl_zk_orphan_node(z, node);
    return dl_seterr(z->env->err_owner, DLOCK_ENOMEM, "out of memory");
  }
  pthread_mutex_init(&d->mu, NULL);
  dl_cond_init(&d->cv);
  d->refs = 2;
  atomic_fetch_add(&z->round_trips, 1);
  int zrc = zoo_adelete(z->zh, node, -1, on_deleted, d);
  if (zrc != ZOK) {
    d->refs = 1; /* no completion will come */
    d->done = true;
    d->rc = zrc;
  }
  int64_t end = dl_now_ms() + wait_ms;
  pthread_mutex_lock(&d->mu);
  while (!d->done && dl_now_ms() < end) {
    struct timespec ts;
    dl_abstime(end, &ts);
    pthread_cond_timedwait(&d->cv, &d->mu, &ts);
  }
  zrc = d->done ? d->rc : ZOPERATIONTIMEOUT;
  pthread_mutex_unlock(&d->mu);
  bounded_unref(d);
  if (zrc == ZOPERATIONTIMEOUT) { /* the close need not wait for one */
    pthread_mutex_lock(&z->mu);
    z->unanswered_at = dl_now_ms();
    pthread_mutex_unlock(&z->mu);
  }
  if (zrc == ZOK || zrc == ZNONODE) return 0;
  dl_zk_orphan_node(z, node);
  return dl_zk_err(z, zrc, "delete", node);
}

/* Remembers (parent, prefix) as an orphan. */
static void add_orphan(dl_zk *z, const char *parent, const char *prefix) {
  zk_orphan *o = calloc(1, sizeof *o);
  if (o == NULL || (o->parent = dl_strdup(parent)) == NULL ||
      (o->prefix = dl_strdup(prefix)) == NULL) {
    if (o) free(o->parent);
    free(o); /* out of memory: the node lives until the session ends */
    return;
  }
  pthread_mutex_lock(&z->mu);
  o->next = z->orphans;
  z->orphans = o;
  pthread_mutex_unlock(&z->mu);
}

void dl_zk_orphans_free(zk_orphan *o) {
  while (o) {
    zk_orphan *next = o->next;
    free(o->parent);
    free(o->prefix);
    free(o);
    o = next;
  }
}

/* Remembers our node as an orphan. */
void dl_zk_orphan_node(dl_zk *z, const char *node) {
  char parent[NODE_MAX];
  snprintf(parent, sizeof parent, "%s", node);
  char *slash = strrchr(parent, '/');
  if (slash && slash != parent) {
    *slash = '\0';
    add_orphan(z, parent, slash + 1);
  }
}

int dl_zk_delete_own(dl_zk *z, const char *node) {
  int rc = dl_zk_delete_node(z, node, dl_now_ms() + z->command_timeout_ms);
  if (rc != 0) dl_zk_orphan_node(z, node);
  return rc;
}

void dl_zk_clean_orphans(dl_zk *z) {
  pthread_mutex_lock(&z->mu);
  zk_orphan *list = z->orphans;
  z->orphans = NULL;
  bool expired = z->expired;
  pthread_mutex_unlock(&z->mu);
  if (list == NULL) return;
  if (expired) { /* the session's nodes are gone with it */
    dl_zk_orphans_free(list);
    return;
  }
  zk_orphan *keep = NULL;
  while (list) {
    zk_orphan *o = list;
    list = o->next;
    char node[NODE_MAX];
    int f = find_protected(z, o->parent, o->prefix, node, sizeof node);
    bool done = f == 0;
    if (f == 1) {
      atomic_fetch_add(&z->round_trips, 1);
      int zrc = zoo_delete(z->zh, node, -1);
      done = zrc == ZOK || zrc == ZNONODE;
    }
    if (done) {
      o->next = NULL;
      dl_zk_orphans_free(o);
    } else {
      o->next = keep;
      keep = o;
    }
  }
  if (keep) {
    pthread_mutex_lock(&z->mu);
    zk_orphan *t = keep;
    while (t->next) t = t->next;
    t->next = z->orphans;
    z->orphans = keep;
    pthread_mutex_unlock(&z->mu);
  }
}

/* The create loop of dl_zk_create_protected, for the node `path` (under
 * key, protected by `prefix`). `tried`: the result of a create already
 * sent for it (ZOK never), or 0 for none. */
static int create_loop(dl_zk *z, const char *key, const char *prefix,
                       const char *path, const char *data, char *node,
                       size_t len, uint64_t *czxid, int64_t deadline,
                       int tried) {
  bool parents = false;
  for (;;) {
    int zrc = tried;
    tried = 0;
    if (zrc == 0) {
      struct Stat st;
      atomic_fetch_add(&z->round_trips, 1);
      zrc = zoo_create2(z->zh, path, data, (int)strlen(data), z->acl,
                        ZOO_EPHEMERAL_SEQUENTIAL, node, (int)len, &st);
      if (zrc == ZOK) {
        *czxid = (uint64_t)st.czxid;
        return 0;
      }
    }
    if (zrc == ZNONODE && !parents) {
      parents = true;
      int rc = dl_zk_make_parents(z, key);
      if (rc != 0) return rc;
      continue;
    }
    if (zrc == ZNONODE) { /* a container reaped between: once more */
      parents = false;
      continue;
    }
    if (zrc != ZCONNECTIONLOSS && zrc != ZOPERATIONTIMEOUT)
      return dl_zk_err(z, zrc, "create", path);
    /* The create may have happened: never create again before the
     * protected name says it did not (a second node of ours would hold a
     * place in the line that nobody releases). */
    for (;;) {
      bool closing = atomic_load(z->env->closing);
      if (dl_now_ms() >= deadline || closing || dl_offload_cancelled()) {
        add_orphan(z, key, prefix); /* whatever happened: deleted later */
        if (closing)
          return dl_seterr(z->env->err_owner, DLOCK_ECLOSED,
                           "client closing");
        return dl_zk_err(z, zrc, "create", path);
      }
      int f = find_protected(z, key, prefix, node, len);
      if (f == 0) break; /* it did not happen: create it */
      if (f == 1) {
        struct Stat s2;
        atomic_fetch_add(&z->round_trips, 1);
        int erc = zoo_exists(z->zh, node, 0, &s2);
        if (erc == ZOK) {
          *czxid = (uint64_t)s2.czxid;
          return 0;
        }
        if (erc == ZNONODE) break; /* made, then gone: make it again */
      }
      dl_sleep_ms(20);
    }
  }
}

/* A create and a listing sent back to back (one round trip: ZooKeeper
 * answers a session's requests in order, so the listing sees the node). */
typedef struct pipelined {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int pending;
  int create_rc, list_rc;
  char *node;
  size_t len;
  uint64_t czxid;
  struct String_vector sv;
  int parent_len; /* the listed node's data length */
} pipelined;

static void on_created(int rc, const char *value, const struct Stat *st,
                       const void *data) {
  pipelined *p = (pipelined *)data;
  pthread_mutex_lock(&p->mu);
  p->create_rc = rc;
  if (rc == ZOK && value && st) {
    snprintf(p->node, p->len, "%s", value);
    p->czxid = (uint64_t)st->czxid;
  }
  if (--p->pending == 0) /* the caller's one wake-up */
    pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

static void on_listed(int rc, const struct String_vector *sv,
                      const struct Stat *st, const void *data) {
  pipelined *p = (pipelined *)data;
  pthread_mutex_lock(&p->mu);
  p->list_rc = rc;
  if (rc == ZOK && st) p->parent_len = st->dataLength;
  /* The library frees sv after this returns: a copy. */
  if (rc == ZOK && sv && allocate_String_vector(&p->sv, sv->count) == 0) {
    for (int i = 0; i < sv->count; i++)
      if ((p->sv.data[i] = strdup(sv->data[i])) == NULL)
        p->list_rc = ZSYSTEMERROR;
  } else if (rc == ZOK) {
    p->list_rc = ZSYSTEMERROR;
  }
  if (--p->pending == 0) /* the caller's one wake-up */
    pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

int dl_zk_create_protected(dl_zk *z, const char *key, const char *mark,
                           const char *data, const char *with_uuid, char *node,
                           size_t len, uint64_t *czxid, int64_t deadline,
                           struct String_vector *listed) {
  return dl_zk_create_listed(z, key, mark, data, with_uuid, node, len, czxid,
                             deadline, listed, NULL);
}

int dl_zk_create_listed(dl_zk *z, const char *key, const char *mark,
                        const char *data, const char *with_uuid, char *node,
                        size_t len, uint64_t *czxid, int64_t deadline,
                        struct String_vector *listed, int *parent_len) {
  if (parent_len) *parent_len = -1;
  char uuid[37], prefix[64], path[NODE_MAX];
  if (with_uuid)
    snprintf(uuid, sizeof uuid, "%s", with_uuid);
  else if (dl_uuid4(uuid) != 0)
    return dl_seterr(z->env->err_owner, DLOCK_ENOMEM, "no random bytes");
  snprintf(prefix, sizeof prefix, "_c_%s-", uuid);
  snprintf(path, sizeof path, "%s/%s%s", key, prefix, mark);
  if (listed) memset(listed, 0, sizeof *listed);
  if (listed == NULL)
    return create_loop(z, key, prefix, path, data, node, len, czxid, deadline,
                       0);
  pipelined p = {.pending = 2, .node = node, .len = len};
  pthread_mutex_init(&p.mu, NULL);
  pthread_cond_init(&p.cv, NULL);
  atomic_fetch_add(&z->round_trips, 1);
  int arc = zoo_acreate2(z->zh, path, data, (int)strlen(data), z->acl,
                         ZOO_EPHEMERAL_SEQUENTIAL, on_created, &p);
  if (arc != ZOK) {
    p.pending = 0;
    p.create_rc = arc;
  } else if (zoo_aget_children2(z->zh, key, 0, on_listed, &p) != ZOK) {
    p.pending--; /* the create's completion still comes */
    p.list_rc = ZSYSTEMERROR;
  }
  /* Every completion is called, whatever happens (ZCLOSING at worst): p
   * must outlive them. */
  pthread_mutex_lock(&p.mu);
  while (p.pending > 0)
    pthread_cond_wait(&p.cv, &p.mu);
  pthread_mutex_unlock(&p.mu);
  pthread_mutex_destroy(&p.mu);
  pthread_cond_destroy(&p.cv);
  if (p.create_rc == ZOK) {
    *czxid = p.czxid;
    if (p.list_rc == ZOK && parent_len) *parent_len = p.parent_len;
    if (p.list_rc == ZOK)
      *listed = p.sv; /* the caller's now */
    else if (p.sv.data)
      deallocate_String_vector(&p.sv);
    return 0;
  }
  if (p.sv.data) deallocate_String_vector(&p.sv);
  /* Not created, or not known: the loop resolves it (parents made, a lost
   * reply looked up by the protected name). */
  return create_loop(z, key, prefix, path, data, node, len, czxid, deadline,
                     p.create_rc);
}

int64_t dl_zk_create_limit(const dl_zk *z, int64_t sent, bool wait,
                           int64_t deadline) {
  int64_t limit = sent + z->command_timeout_ms;
  if (wait && deadline == INT64_MAX)
    return sent + (int64_t)DL_RIDE_TIMEOUTS * z->command_timeout_ms;
  return wait && deadline > limit ? deadline : limit;
}

int dl_zk_await_event(dl_zk *z, uint64_t seen, int64_t deadline,
                      const char *what) {
  pthread_mutex_lock(&z->mu);
  while (z->events == seen && !z->expired && !atomic_load(z->env->closing) &&
         !dl_offload_cancelled() && dl_now_ms() < deadline) {
    struct timespec ts;
    dl_abstime(deadline, &ts);
    pthread_cond_timedwait(&z->cv, &z->mu, &ts);
  }
  bool expired = z->expired;
  pthread_mutex_unlock(&z->mu);
  if (expired)
    return dl_seterr(z->env->err_owner, DLOCK_ECONNLOST, "the ZooKeeper "
                     "session expired while waiting for %s", what);
  if (atomic_load(z->env->closing))
    return dl_seterr(z->env->err_owner, DLOCK_ECLOSED, "client closing");
  return 0;
}

int dl_zk_ride_out(dl_zk *z, bool wait, int64_t deadline, int zrc,
                   dl_ride *rides, const char *what) {
  if ((zrc != ZCONNECTIONLOSS && zrc != ZOPERATIONTIMEOUT) || !wait)
    return 0;
  int64_t pause = dl_ride_pause_ms(rides, deadline, z->command_timeout_ms);
  if (pause == 0) return 0;
  pthread_mutex_lock(&z->mu);
  uint64_t seen = z->events;
  pthread_mutex_unlock(&z->mu);
  int rc = dl_zk_await_event(z, seen, dl_now_ms() + pause, what);
  if (rc < 0) return rc;
  return !dl_offload_cancelled();
}

/* ---- what a znode holds, for the recipes ---- */
static bool is_count(const char *data, int len) {
  if (data == NULL || len <= 0 || len > 20) return false;
  int i = data[0] == '-' ? 1 : 0;
  if (i == len) return false;
  for (; i < len; i++)
    if (data[i] < '0' || data[i] > '9') return false;
  return true;
}

zk_place dl_zk_place_of(const char *data, int len,
                        const struct String_vector *sv) {
  if (len > 0) return is_count(data, len) ? ZK_SEMAPHORE : ZK_DATA;
  zk_place p = ZK_EMPTY;
  for (int i = 0; sv && i < sv->count; i++) {
    const char *n = sv->data[i];
    if (strcmp(n, "locks") == 0 || strcmp(n, "leases") == 0)
      p = ZK_SEMAPHORE;
    else if (dl_zk_seq_of(n) == NULL)
      return ZK_CHILDREN;
    else if (p == ZK_EMPTY)
      p = ZK_LOCKS;
  }
  return p;
}

const char *dl_zk_place_name(zk_place p) {
  switch (p) {
  case ZK_DATA: return "znode with data";
  case ZK_CHILDREN: return "znode with children";
  case ZK_SEMAPHORE: return "semaphore";
  default: return "znode";
  }
}

int dl_zk_wrong_place(dl_zk *z, zk_place p, const char *path,
                      const char *want) {
  return dl_seterr(z->env->err_owner, DLOCK_EWRONGTYPE,
                   "not a %s: %s (%s; nothing changed)", want,
                   dl_zk_place_name(p), path);
}

int dl_zk_read_place(dl_zk *z, const char *path, zk_place *p) {
  char buf[32];
  int len = (int)sizeof buf;
  struct Stat st;
  *p = ZK_NONE;
  atomic_fetch_add(&z->round_trips, 1);
  int zrc = zoo_get(z->zh, path, 0, buf, &len, &st);
  if (zrc == ZNONODE) return 0;
  if (zrc != ZOK) return dl_zk_err(z, zrc, "read", path);
  if (st.dataLength > (int)sizeof buf) len = st.dataLength; /* not a count */
  struct String_vector sv = {0};
  if (len <= 0) { /* the children tell */
    atomic_fetch_add(&z->round_trips, 1);
    zrc = zoo_get_children(z->zh, path, 0, &sv);
    if (zrc == ZNONODE) return 0;
    if (zrc != ZOK) return dl_zk_err(z, zrc, "list", path);
  }
  *p = dl_zk_place_of(st.dataLength > (int)sizeof buf ? NULL : buf, len, &sv);
  deallocate_String_vector(&sv);
  return 0;
}
