/* observe.c: the snapshot dlock top and dlock metrics show: the scan for
 * names, each name's inspection, what kind of object it is, and the
 * objects named on the command line (latches and queues, which the scan
 * cannot find or tell apart). Public library calls only. */
#include "observe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *obs_kind_name(obs_kind k) {
  switch (k) {
  case OBS_LOCK: return "lock";
  case OBS_RWLOCK: return "rwlock";
  case OBS_SEMAPHORE: return "semaphore";
  case OBS_LATCH: return "latch";
  case OBS_ELECTION: return "election";
  case OBS_QUEUE: return "queue";
  }
  return "?";
}

const char *obs_backend(const char *url) {
  static const struct {
    const char *scheme, *name;
  } map[] = {{"redis-sentinel:", "sentinel"},
             {"rediss-sentinel:", "sentinel"},
             {"redis-cluster:", "cluster"},
             {"rediss-cluster:", "cluster"},
             {"redlock:", "redlock"},
             {"zk:", "zk"},
             {"etcd:", "etcd"},
             {"etcds:", "etcd"}};
  if (url == NULL) return "redis";
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (strncmp(url, map[i].scheme, strlen(map[i].scheme)) == 0)
      return map[i].name;
  return "redis";
}

const char *obs_duration(int64_t ms, char *buf, size_t len) {
  if (ms < 0)
    snprintf(buf, len, "-");
  else if (ms < 10000)
    snprintf(buf, len, "%.1fs", (double)ms / 1000);
  else if (ms < 120000)
    snprintf(buf, len, "%llds", (long long)(ms / 1000));
  else if (ms < 7200000)
    snprintf(buf, len, "%lldm%02llds", (long long)(ms / 60000),
             (long long)(ms / 1000 % 60));
  else
    snprintf(buf, len, "%lldh%02lldm", (long long)(ms / 3600000),
             (long long)(ms / 60000 % 60));
  return buf;
}

int obs_named_opt(int opt, const char *arg, obs_named **v, size_t *n) {
  static const obs_kind kinds[] = {OBS_LATCH, OBS_QUEUE, OBS_SEMAPHORE,
                                   OBS_ELECTION};
  if (opt < 1101 || opt > 1104) return 0;
  obs_named *nv = realloc(*v, (*n + 1) * sizeof **v);
  if (nv == NULL) {
    cli_err("out of memory");
    return -1;
  }
  nv[*n].name = arg;
  nv[*n].kind = kinds[opt - 1101];
  *v = nv;
  (*n)++;
  return 1;
}

void obs_snap_clear(obs_snap *s) {
  for (size_t i = 0; i < s->n; i++)
    free(s->v[i].name);
  free(s->v);
  memset(s, 0, sizeof *s);
}

/* A new object at the end of s (zeroed, depth -1), or NULL out of memory. */
static obs_obj *add(obs_snap *s, const char *name, obs_kind k) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 16;
    obs_obj *v = realloc(s->v, cap * sizeof *v);
    if (v == NULL) return NULL;
    s->v = v;
    s->cap = cap;
  }
  obs_obj *o = &s->v[s->n];
  memset(o, 0, sizeof *o);
  o->name = strdup(name);
  if (o->name == NULL) return NULL;
  o->kind = k;
  o->depth = -1;
  o->st.counter = -1;
  o->st.held_ms = -1;
  o->st.ttl_ms = DLOCK_TTL_FREE;
  s->n++;
  return o;
}

typedef struct scan_ctx {
  dlock_client *c;
  obs_snap *s;
  int err;
} scan_ctx;

static int fail(scan_ctx *x, int err, const char *msg) {
  x->err = err;
  snprintf(x->s->errmsg, sizeof x->s->errmsg, "%s", msg);
  return 1;
}

/* Inspects `name` into *st through a handle of its own. */
static int inspect(dlock_client *c, const char *name, dlock_lock_state *st) {
  dlock_lock *l = NULL;
  int e = dlock_lock_new(c, name, NULL, &l);
  if (e == 0) e = dlock_lock_inspect(l, st);
  dlock_lock_free(l);
  return e;
}

/* What a scanned name holds, as dlock list and status tell (inspect.c's
 * lockish): a lock kind, a number (a semaphore's permits), or nothing to
 * show (-1: an application's hash or string, or gone meanwhile). */
static int kind_of(const dlock_lock_state *st) {
  if (st->mode[0]) return OBS_RWLOCK;
  if (st->held || st->plain || strcmp(st->type, "keys") == 0 ||
      (strcmp(st->type, "znode") == 0 && st->counter < 0))
    return OBS_LOCK;
  if (st->counter >= 0) return OBS_SEMAPHORE;
  return -1;
}

/* Whether a scanned name is one of the keys a Redis lock keeps beside its
 * name, after Redisson's naming ("redisson_lock_token:{NAME}",
 * "dlock_lock_queue:{NAME}", "{NAME}:<reader>:rwlock_timeout:1", ...):
 * numbers, but no semaphores. */
static bool derived(const char *name) {
  return ((strncmp(name, "redisson_", 9) == 0 ||
           strncmp(name, "dlock_", 6) == 0) &&
          strstr(name, ":{") != NULL) ||
         (name[0] == '{' && strstr(name, "}:") != NULL);
}

static int scan_one(const char *name, void *ud) {
  scan_ctx *x = ud;
  if (derived(name)) return 0;
  dlock_lock_state st;
  int e = inspect(x->c, name, &st);
  if (e == DLOCK_EINVAL) return 0; /* a name too long for a handle */
  if (e != 0) return fail(x, e, dlock_client_errmsg(x->c));
  int k = kind_of(&st);
  if (k < 0) return 0;
  obs_obj *o = add(x->s, name, (obs_kind)k);
  if (o == NULL) return fail(x, DLOCK_ENOMEM, "out of memory");
  o->st = st;
  return 0;
}

/* A named latch's count through its own call (0 when none is running). */
static int fill_latch(scan_ctx *x, obs_obj *o) {
  dlock_latch *l = NULL;
  int64_t n = -1;
  int e = dlock_latch_new(x->c, o->name, &l);
  if (e == 0) e = dlock_latch_get_count(l, &n);
  dlock_latch_free(l);
  if (e == DLOCK_ENOTSUP) { /* no latches on this backend: "-" */
    o->unsupported = true;
    return 0;
  }
  if (e != 0) return fail(x, e, dlock_client_errmsg(x->c));
  o->st.counter = n;
  return 0;
}

/* A named queue's values ready. */
static int fill_queue(scan_ctx *x, obs_obj *o) {
  dlock_queue *q = NULL;
  int64_t n = -1;
  int e = dlock_queue_new(x->c, o->name, &q);
  if (e == 0) e = dlock_queue_size(q, &n);
  dlock_queue_free(q);
  if (e == DLOCK_ENOTSUP) { /* no queues on this backend: "-" */
    o->unsupported = true;
    return 0;
  }
  if (e != 0) return fail(x, e, dlock_client_errmsg(x->c));
  o->depth = n;
  return 0;
}

/* Fills o, a named object, from the server. */
static int fill_named(scan_ctx *x, obs_obj *o) {
  if (o->kind == OBS_LATCH) return fill_latch(x, o);
  if (o->kind == OBS_QUEUE) return fill_queue(x, o);
  int e = inspect(x->c, o->name, &o->st);
  if (e != 0) return fail(x, e, dlock_client_errmsg(x->c));
  if (o->kind == OBS_SEMAPHORE && o->st.counter < 0) {
    /* Not set, or no semaphores here: the semaphores' own calls tell
     * (zk:// has the permit-expirable kind only). */
    dlock_semaphore *sem = NULL;
    dlock_permits *p = NULL;
    e = dlock_semaphore_new(x->c, o->name, &sem);
    if (e == 0) e = dlock_semaphore_get_available(sem);
    dlock_semaphore_free(sem);
    if (e == DLOCK_ENOTSUP) {
      e = dlock_permits_new(x->c, o->name, &p);
      if (e == 0) e = dlock_permits_get_available(p);
      dlock_permits_free(p);
    }
    o->unsupported = e == DLOCK_ENOTSUP;
  }
  return 0;
}

static int by_name(const void *a, const void *b) {
  return strcmp(((const obs_obj *)a)->name, ((const obs_obj *)b)->name);
}

int obs_collect(dlock_client *c, const char *pattern, const obs_named *named,
                size_t n, obs_snap *s) {
  obs_snap_clear(s);
  int64_t t0 = cli_mono_ms();
  scan_ctx x = {c, s, 0};
  int e = dlock_client_scan_locks(c, pattern, scan_one, &x);
  if (e < 0 && x.err == 0) fail(&x, e, dlock_client_errmsg(c));
  for (size_t i = 0; i < n && x.err == 0; i++) {
    obs_obj *o = NULL;
    for (size_t j = 0; j < s->n && o == NULL; j++)
      if (strcmp(s->v[j].name, named[i].name) == 0) o = &s->v[j];
    if (o == NULL) o = add(s, named[i].name, named[i].kind);
    if (o == NULL) {
      fail(&x, DLOCK_ENOMEM, "out of memory");
      break;
    }
    o->kind = named[i].kind;
    fill_named(&x, o);
  }
  if (s->n > 1) qsort(s->v, s->n, sizeof *s->v, by_name);
  s->err = x.err;
  s->took_ms = cli_mono_ms() - t0;
  return x.err;
}
