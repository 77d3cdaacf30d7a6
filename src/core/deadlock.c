/* deadlock.c: detect_deadlocks for a backend whose waiters are its own
 * layout (zk://'s nodes in line, etcd://'s keys in line): the walk over
 * its blocking waiters and inspect entries (backend.h, dl_deadlock_walk). */
#include "backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The longest walk followed: owners beyond it are not looked at. */
#define WALK_MAX 16

/* Every owner that waits now, and for what. */
typedef struct edges {
  struct edge {
    char *owner, *name;
  } * v;
  size_t n;
  bool oom;
} edges;

/* The owner id s without a writer's ":write", into out. */
static void base_owner(char *out, const char *s) {
  size_t len = strlen(s);
  if (len > 6 && strcmp(s + len - 6, ":write") == 0) len -= 6;
  if (len >= DL_OWNER_MAX) len = DL_OWNER_MAX - 1;
  memcpy(out, s, len);
  out[len] = '\0';
}

static int edge_add(const dlock_waiter *w, void *ud) {
  edges *x = ud;
  struct edge *nv = realloc(x->v, (x->n + 1) * sizeof *nv);
  if (nv == NULL) {
    x->oom = true;
    return 1;
  }
  x->v = nv;
  char o[DL_OWNER_MAX];
  base_owner(o, w->owner);
  nv[x->n].owner = dl_strdup(o);
  nv[x->n].name = dl_strdup(w->name);
  if (nv[x->n].owner == NULL || nv[x->n].name == NULL) x->oom = true;
  x->n++;
  return x->oom;
}

static void path_add(char *path, size_t len, const char *fmt, const char *a,
                     const char *b) {
  size_t n = strlen(path);
  if (n + 1 < len) snprintf(path + n, len - n, fmt, a, b);
}

int dl_deadlock_walk(dl_backend *b, const dl_walk_ops *ops,
                     const dl_backend_env *env, const dl_acquire *a) {
  const dl_lock_ref *l = a->lock;
  size_t pl = strlen(l->key) - strlen(l->name);
  char prefix[DL_OWNER_MAX + 256];
  if (pl >= sizeof prefix) return 0; /* cannot tell: wait */
  memcpy(prefix, l->key, pl);
  prefix[pl] = '\0';
  edges x = {0};
  int rc = ops->waiters(b, prefix, edge_add, &x);
  if (x.oom) rc = dl_seterr(env->err_owner, DLOCK_ENOMEM, "out of memory");
  char me[DL_OWNER_MAX], holder[DL_OWNER_MAX], path[1024] = "";
  base_owner(me, l->owner);
  const char *name = l->name;
  path_add(path, sizeof path, "%s waits for %s", me, "");
  for (int depth = 0; rc >= 0 && depth < WALK_MAX; depth++) {
    size_t nl = strlen(name);
    char *key = malloc(pl + nl + 1);
    if (key == NULL) {
      rc = dl_seterr(env->err_owner, DLOCK_ENOMEM, "out of memory");
      break;
    }
    memcpy(key, l->key, pl);
    memcpy(key + pl, name, nl + 1);
    dlock_lock_state st;
    int irc = ops->inspect(b, key, &st);
    free(key);
    if (irc != 0 || !st.held || st.owner[0] == '\0') break; /* cannot tell */
    base_owner(holder, st.owner);
    /* A lock this owner holds at the start is its own (a re-entry, the
     * read side it holds); further on, the way back to it. */
    if (strcmp(holder, me) == 0) {
      if (depth > 0) {
        path_add(path, sizeof path, "'%s' held by %s", name, me);
        rc = dl_seterr(env->err_owner, DLOCK_EDEADLK,
                       "waiting would close a wait-for cycle: %s", path);
      }
      break;
    }
    path_add(path, sizeof path, "'%s' held by %s", name, holder);
    /* The holder waits too: for the lock it queues for. */
    const char *next = NULL;
    for (size_t i = 0; i < x.n && next == NULL; i++)
      if (strcmp(x.v[i].owner, holder) == 0) next = x.v[i].name;
    if (next == NULL) break;
    path_add(path, sizeof path, ", which waits for %s", "", "");
    name = next;
  }
  for (size_t i = 0; i < x.n; i++) {
    free(x.v[i].owner);
    free(x.v[i].name);
  }
  free(x.v);
  return rc == DLOCK_EDEADLK || rc == DLOCK_ENOMEM ? rc : 0;
}
