/* deadlock.c: detect_deadlocks for a backend whose waiters are its own
 * layout (zk://'s nodes in line, etcd://'s keys in line): the walk over
 * its blocking waiters and inspect entries (backend.h, dl_deadlock_walk);
 * and the same walk in steps (dl_walk_*), which redlock://'s operation
 * drives with its reads in flight on either driver. */
#include "backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The owner id s without a writer's ":write", into out. */
static void base_owner(char *out, const char *s) {
  size_t len = strlen(s);
  if (len > 6 && strcmp(s + len - 6, ":write") == 0) len -= 6;
  if (len >= DL_OWNER_MAX) len = DL_OWNER_MAX - 1;
  memcpy(out, s, len);
  out[len] = '\0';
}

int dl_walk_edge(const dlock_waiter *w, void *ud) {
  dl_walk *x = ud;
  struct dl_walk_edge *nv = realloc(x->v, (x->n + 1) * sizeof *nv);
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

static void path_add(dl_walk *w, const char *fmt, const char *a,
                     const char *b) {
  size_t n = strlen(w->path);
  if (n + 1 < sizeof w->path)
    snprintf(w->path + n, sizeof w->path - n, fmt, a, b);
}

bool dl_walk_init(dl_walk *w, const dl_acquire *a) {
  memset(w, 0, sizeof *w);
  const dl_lock_ref *l = a->lock;
  size_t pl = strlen(l->key) - strlen(l->name);
  if (pl >= sizeof w->prefix) return false; /* cannot tell: wait */
  memcpy(w->prefix, l->key, pl);
  w->prefix[pl] = '\0';
  base_owner(w->me, l->owner);
  w->name = l->name;
  path_add(w, "%s waits for %s", w->me, "");
  return true;
}

const char *dl_walk_key(dl_walk *w, const dl_backend_env *env, int *rc) {
  *rc = 0;
  free(w->key);
  w->key = NULL;
  if (w->oom) {
    *rc = dl_seterr(env->err_owner, DLOCK_ENOMEM, "out of memory");
    return NULL;
  }
  if (w->name == NULL || w->depth >= DL_WALK_MAX) return NULL;
  size_t pl = strlen(w->prefix), nl = strlen(w->name);
  if ((w->key = malloc(pl + nl + 1)) == NULL) {
    *rc = dl_seterr(env->err_owner, DLOCK_ENOMEM, "out of memory");
    return NULL;
  }
  memcpy(w->key, w->prefix, pl);
  memcpy(w->key + pl, w->name, nl + 1);
  return w->key;
}

int dl_walk_holder(dl_walk *w, const dl_backend_env *env, int irc,
                   const dlock_lock_state *st) {
  const char *name = w->name;
  w->name = NULL; /* the walk ends unless it goes on below */
  if (irc != 0 || !st->held || st->owner[0] == '\0') return 0; /* cannot tell */
  char holder[DL_OWNER_MAX];
  base_owner(holder, st->owner);
  /* A lock this owner holds at the start is its own (a re-entry, the
   * read side it holds); further on, the way back to it. */
  if (strcmp(holder, w->me) == 0) {
    if (w->depth == 0) return 0;
    path_add(w, "'%s' held by %s", name, w->me);
    return dl_seterr(env->err_owner, DLOCK_EDEADLK,
                     "waiting would close a wait-for cycle: %s", w->path);
  }
  path_add(w, "'%s' held by %s", name, holder);
  /* The holder waits too: for the lock it queues for. */
  for (size_t i = 0; i < w->n && w->name == NULL; i++)
    if (strcmp(w->v[i].owner, holder) == 0) w->name = w->v[i].name;
  if (w->name == NULL) return 0;
  path_add(w, ", which waits for %s", "", "");
  w->depth++;
  return 1;
}

void dl_walk_free(dl_walk *w) {
  for (size_t i = 0; i < w->n; i++) {
    free(w->v[i].owner);
    free(w->v[i].name);
  }
  free(w->v);
  free(w->key);
  w->v = NULL;
  w->key = NULL;
  w->n = 0;
}

int dl_deadlock_walk(dl_backend *b, const dl_walk_ops *ops,
                     const dl_backend_env *env, const dl_acquire *a) {
  dl_walk w;
  if (!dl_walk_init(&w, a)) return 0;
  int rc = ops->waiters(b, w.prefix, dl_walk_edge, &w);
  if (rc >= 0 || w.oom) {
    const char *key;
    while ((key = dl_walk_key(&w, env, &rc)) != NULL) {
      dlock_lock_state st;
      int irc = ops->inspect(b, key, &st);
      if ((rc = dl_walk_holder(&w, env, irc, &st)) <= 0) break;
    }
  }
  dl_walk_free(&w);
  return rc == DLOCK_EDEADLK || rc == DLOCK_ENOMEM ? rc : 0;
}
