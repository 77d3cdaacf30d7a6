/* deadlock.c: detect_deadlocks for a backend whose waiters are its own
 * layout (zk://'s nodes in line, etcd://'s keys in line): the search over
 * its blocking waiters and holders entries (backend.h, dl_deadlock_walk),
 * every holder of a lock followed (a read lock's every reader); and the
 * same search in steps (dl_walk_*), which redlock://'s operation drives
 * with its reads in flight on either driver, and Redis' acquire lazily
 * (a holder's record read when the search comes to it: waits.c). */
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
  snprintf(nv[x->n].kind, sizeof nv[x->n].kind, "%s", w->kind ? w->kind : "");
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
  w->f[0].name = w->seen[0] = l->name;
  w->looks = 1;
  w->fresh = true;
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
  if (w->depth < 0 || !w->fresh) return NULL;
  const char *name = w->f[w->depth].name;
  size_t pl = strlen(w->prefix), nl = strlen(name);
  if ((w->key = malloc(pl + nl + 1)) == NULL) {
    *rc = dl_seterr(env->err_owner, DLOCK_ENOMEM, "out of memory");
    return NULL;
  }
  memcpy(w->key, w->prefix, pl);
  memcpy(w->key + pl, name, nl + 1);
  return w->key;
}

int dl_walk_holder(const char *owner, void *ud) {
  dl_walk *w = ud;
  if (w->depth < 0 || w->oom) return 1;
  struct dl_walk_frame *f = &w->f[w->depth];
  char o[DL_OWNER_MAX];
  base_owner(o, owner);
  if (o[0] == '\0') return 0;
  for (size_t i = 0; i < f->nh; i++) /* a writer's and its read side */
    if (strcmp(f->holders[i], o) == 0) return 0;
  char **nv = realloc(f->holders, (f->nh + 1) * sizeof *nv);
  if (nv == NULL || (nv[f->nh] = dl_strdup(o)) == NULL) {
    if (nv) f->holders = nv;
    w->oom = true;
    return 1;
  }
  f->holders = nv;
  f->nh++;
  return 0;
}

static void frame_clear(struct dl_walk_frame *f) {
  for (size_t i = 0; i < f->nh; i++)
    free(f->holders[i]);
  free(f->holders);
  f->holders = NULL;
  f->nh = f->at = 0;
}

/* The way f[0..depth] came back to w->me: the detail. */
static int cycle(dl_walk *w, const dl_backend_env *env) {
  w->path[0] = '\0';
  path_add(w, "%s waits for %s", w->me, "");
  for (int i = 0; i <= w->depth; i++) {
    if (i > 0) path_add(w, ", which waits for %s", "", "");
    path_add(w, "'%s' held by %s", w->f[i].name,
             w->f[i].holders[w->f[i].at - 1]);
  }
  return dl_seterr(env->err_owner, DLOCK_EDEADLK,
                   "waiting would close a wait-for cycle: %s", w->path);
}

void dl_walk_waits(dl_walk *w, const char *name, const char *kind) {
  struct dl_walk_edge *nv = realloc(w->v, (w->n + 1) * sizeof *nv);
  if (nv == NULL || w->ask == NULL) {
    w->oom = w->oom || nv == NULL;
    if (nv) w->v = nv;
    return;
  }
  w->v = nv;
  nv[w->n].owner = dl_strdup(w->ask);
  nv[w->n].name = name ? dl_strdup(name) : NULL;
  snprintf(nv[w->n].kind, sizeof nv[w->n].kind, "%s", kind ? kind : "");
  if (nv[w->n].owner == NULL || (name && nv[w->n].name == NULL)) w->oom = true;
  w->n++;
}

int dl_walk_step(dl_walk *w, const dl_backend_env *env, int irc) {
  if (w->oom) return dl_seterr(env->err_owner, DLOCK_ENOMEM, "out of memory");
  if (w->depth < 0) return 0;
  if (w->fresh && irc != 0) frame_clear(&w->f[w->depth]); /* unknown: none */
  w->fresh = false;
  w->ask = NULL;
  while (w->depth >= 0) {
    struct dl_walk_frame *f = &w->f[w->depth];
    if (f->at >= f->nh) { /* every holder followed: back one lock */
      frame_clear(f);
      w->depth--;
      continue;
    }
    const char *h = f->holders[f->at++];
    /* A lock this owner holds at the start is its own (a re-entry, the
     * read side it holds); further on, the way back to it. */
    if (strcmp(h, w->me) == 0) {
      if (w->depth == 0) continue;
      return cycle(w, env);
    }
    /* The holder waits too: for the lock it queues for, unless that one
     * was read already (its holders searched) or the way is long enough. */
    const struct dl_walk_edge *e = NULL;
    for (size_t i = 0; i < w->n && e == NULL; i++)
      if (strcmp(w->v[i].owner, h) == 0) e = &w->v[i];
    if (e == NULL && w->lazy && w->depth + 1 < DL_WALK_MAX) {
      w->ask = h; /* what it waits for, then this holder again */
      f->at--;
      return 2;
    }
    const char *next = e ? e->name : NULL;
    if (next == NULL || w->depth + 1 >= DL_WALK_MAX) continue;
    bool seen = false;
    for (int i = 0; i < w->looks && !seen; i++)
      seen = strcmp(w->seen[i], next) == 0;
    if (seen) continue;
    if (w->looks >= DL_WALK_LOOKS) break; /* bounded: no cycle found */
    w->seen[w->looks++] = next;
    w->depth++;
    w->f[w->depth].name = next;
    memcpy(w->f[w->depth].kind, e->kind, sizeof e->kind);
    w->fresh = true;
    return 1;
  }
  return 0;
}

void dl_walk_free(dl_walk *w) {
  for (size_t i = 0; i < w->n; i++) {
    free(w->v[i].owner);
    free(w->v[i].name);
  }
  for (int i = 0; i < DL_WALK_MAX; i++)
    frame_clear(&w->f[i]);
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
      int irc = ops->holders(b, key, dl_walk_holder, &w);
      if ((rc = dl_walk_step(&w, env, irc)) <= 0) break;
    }
  }
  dl_walk_free(&w);
  return rc == DLOCK_EDEADLK || rc == DLOCK_ENOMEM ? rc : 0;
}
