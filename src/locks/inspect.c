/* inspect.c: what can be read of a lock without taking it: who holds it,
 * its lease and token (the queries), a snapshot of whatever kind of lock or
 * synchronizer lives at a name (dlock_lock_inspect), and the scan for lock
 * names; read-only on the server. And their event-loop forms, with the
 * other calls that do not wait: the force release and the client's
 * ping. */
#include "lock.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

/* The backend's view of l for the calling thread's owner (or the
 * handle's), into owner and ref. */
static int query_ref(dlock_lock *l, char *owner, dl_lock_ref *ref) {
  int rc = dl_lock_owner(l, owner);
  if (rc == 0) dl_lock_ref_of(l, owner, ref);
  return rc;
}

/* Asks the backend query q about l (for the calling thread's owner). */
static int query(dlock_lock *l, dl_lock_query q, long long *v) {
  if (l == NULL) return DLOCK_EINVAL;
  dlock_client *c = l->c;
  if (c->backend->ops->lock_query == NULL) return dl_unsupported(c, "query");
  char owner[DL_OWNER_MAX];
  dl_lock_ref ref;
  int rc = query_ref(l, owner, &ref);
  if (rc != 0) return rc;
  return c->backend->ops->lock_query(c->backend, &ref, q, v);
}

int dlock_lock_is_locked(dlock_lock *l) {
  long long v = 0;
  int rc = query(l, DL_QUERY_LOCKED, &v);
  return rc ? rc : (v > 0);
}

/* Whether this client has already reported its hold of l lost: then it
 * does not hold it, whatever the server can say (zk://: nothing, while
 * the connection is down). */
static bool known_lost(dlock_lock *l) {
  char owner[DL_OWNER_MAX];
  if (l == NULL || dl_lock_owner(l, owner) != 0) return false;
  dl_hold_view v;
  return dl_holds_get(l->c, KEY(l), owner, &v) && v.lost;
}

int dlock_lock_is_held(dlock_lock *l) {
  if (known_lost(l)) return 0;
  long long v = 0;
  int rc = query(l, DL_QUERY_HELD, &v);
  return rc ? rc : (v > 0);
}

/* A plain string lock's count is the client's only (the wire has none):
 * the server says whether the owner holds it, the client's hold how often. */
static int plain_count(dlock_lock *l) {
  char owner[DL_OWNER_MAX];
  if (dl_lock_owner(l, owner) != 0) return 1;
  dl_hold_view v;
  bool held = dl_holds_get(l->c, KEY(l), owner, &v) && !v.lost;
  return held && v.count > 0 ? v.count : 1;
}

/* The hold count the caller sees, from the server's answer v, on both
 * drivers: 0 once this client reported the hold lost; a plain string
 * lock's from the client's hold. */
static int hold_count_of(dlock_lock *l, long long v) {
  if (known_lost(l)) return 0;
  return v > 0 && l->plain ? plain_count(l) : (int)v;
}

int dlock_lock_hold_count(dlock_lock *l) {
  if (known_lost(l)) return 0;
  long long v = 0;
  int rc = query(l, DL_QUERY_COUNT, &v);
  return rc ? rc : hold_count_of(l, v);
}

int dlock_lock_remaining_ttl(dlock_lock *l, int64_t *ttl_ms) {
  if (ttl_ms == NULL)
    return l ? dl_seterr(l->c, DLOCK_EINVAL, "ttl_ms is NULL") : DLOCK_EINVAL;
  long long v = 0;
  int rc = query(l, DL_QUERY_TTL, &v);
  if (rc == 0) *ttl_ms = v;
  return rc;
}

int dlock_lock_current_token(dlock_lock *l, uint64_t *token) {
  if (token == NULL)
    return l ? dl_seterr(l->c, DLOCK_EINVAL, "token is NULL") : DLOCK_EINVAL;
  long long v = 0;
  int rc = query(l, DL_QUERY_TOKEN, &v);
  if (rc == 0) *token = (uint64_t)v;
  return rc;
}

int dlock_lock_inspect_size(dlock_lock *l, dlock_lock_state *st,
                            size_t size) {
  if (l == NULL) return DLOCK_EINVAL;
  if (st == NULL || size == 0)
    return dl_seterr(l->c, DLOCK_EINVAL,
                     "no state to fill (st NULL or size 0)");
  dl_backend *b = l->c->backend;
  if (b->ops->inspect == NULL) return dl_unsupported(l->c, "inspect");
  dlock_lock_state *all = calloc(1, sizeof *all);
  if (all == NULL) return dl_seterr(l->c, DLOCK_ENOMEM, "out of memory");
  int rc = b->ops->inspect(b, KEY(l), all);
  memcpy(st, all, size < sizeof *all ? size : sizeof *all);
  free(all);
  return rc;
}

/* dlock_lock_holders' count, between the backend and the caller's cb. */
typedef struct holders_ctx {
  dlock_holder_cb cb;
  void *ud;
  int passed;
} holders_ctx;

static int holder_one(const char *owner, void *ud) {
  holders_ctx *x = ud;
  x->passed++;
  return x->cb(owner, x->ud);
}

int dlock_lock_holders(dlock_lock *l, dlock_holder_cb cb, void *ud) {
  if (l == NULL) return DLOCK_EINVAL;
  if (cb == NULL) return dl_seterr(l->c, DLOCK_EINVAL, "cb is NULL");
  dl_backend *b = l->c->backend;
  holders_ctx x = {cb, ud, 0};
  int rc;
  if (b->ops->holders) {
    rc = b->ops->holders(b, KEY(l), holder_one, &x);
  } else {
    if (b->ops->inspect == NULL) return dl_unsupported(l->c, "inspect");
    dlock_lock_state *st = calloc(1, sizeof *st);
    if (st == NULL) return dl_seterr(l->c, DLOCK_ENOMEM, "out of memory");
    rc = b->ops->inspect(b, KEY(l), st);
    if (rc == 0 && st->held && st->owner[0]) holder_one(st->owner, &x);
    free(st);
  }
  return rc < 0 ? rc : x.passed;
}

int dlock_client_scan_locks(dlock_client *c, const char *pattern,
                            dlock_scan_cb cb, void *ud) {
  if (c == NULL) return DLOCK_EINVAL;
  if (cb == NULL) return dl_seterr(c, DLOCK_EINVAL, "cb is NULL");
  if (c->backend->ops->scan == NULL) return dl_unsupported(c, "scan");
  char *match = dl_key(c, "%s", pattern ? pattern : "*");
  if (match == NULL) return dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  int rc = c->backend->ops->scan(c->backend, match, c->prefix_len, cb, ud);
  free(match);
  return rc;
}

/* dlock_client_scan_waiters' filter: the records of names that match. */
typedef struct waiters_ctx {
  const char *pattern;
  dlock_waiter_cb cb;
  void *ud;
  int passed;
} waiters_ctx;

static int waiter_one(const dlock_waiter *w, void *ud) {
  waiters_ctx *x = ud;
  if (fnmatch(x->pattern, w->name, 0) != 0) return 0;
  x->passed++;
  return x->cb(w, x->ud);
}

int dlock_client_scan_waiters(dlock_client *c, const char *pattern,
                              dlock_waiter_cb cb, void *ud) {
  if (c == NULL) return DLOCK_EINVAL;
  if (cb == NULL) return dl_seterr(c, DLOCK_EINVAL, "cb is NULL");
  if (c->backend->ops->waiters == NULL)
    return dl_unsupported(c, "waiter records (it cannot tell who waits "
                             "for what)");
  if (c->loop)
    return dl_seterr(c, DLOCK_ENOTSUP,
                     "waiter records are read by a blocking client only");
  waiters_ctx x = {pattern ? pattern : "*", cb, ud, 0};
  int rc = c->backend->ops->waiters(c->backend, c->key_prefix, waiter_one, &x);
  if (rc < 0) return rc;
  dl_clearerr(c);
  return x.passed;
}

/* ---- the event-loop forms ---- */
enum { CALL_QUERY, CALL_FORCE, CALL_INSPECT, CALL_SCAN, CALL_PING };

typedef struct call_op {
  dlock_op op;   /* first */
  dlock_lock *l; /* NULL: a client's call */
  int what;      /* CALL_* */
  dl_lock_query q;
  long long v;
  int64_t *ttl; /* remaining_ttl's */
  dlock_lock_state *st, all; /* inspect's: the caller's, and the whole */
  size_t st_size;
  char *match; /* scan's */
  char owner[DL_OWNER_MAX];
  dl_lock_ref ref;
} call_op;

static void call_done(void *ud, int rc) {
  call_op *x = ud;
  uint64_t token = 0;
  if (rc >= 0) switch (x->what) {
    case CALL_QUERY:
      if (x->q == DL_QUERY_TTL) *x->ttl = x->v, rc = 0;
      else if (x->q == DL_QUERY_TOKEN) token = (uint64_t)x->v, rc = 0;
      else if (x->q == DL_QUERY_COUNT)
        rc = hold_count_of(x->l, x->v);
      else if (x->q == DL_QUERY_HELD)
        rc = x->v > 0 && !known_lost(x->l);
      else rc = x->v > 0;
      break;
    case CALL_INSPECT:
      memcpy(x->st, &x->all,
             x->st_size < sizeof x->all ? x->st_size : sizeof x->all);
      break;
    default: break;
  }
  if (rc >= 0) dl_clearerr(x->op.c);
  free(x->match);
  dl_lock_op_finish(&x->op, x->l, rc, token);
}

/* Starts x (its inputs set) on the backend. */
static int call_start(call_op *x, dlock_scan_cb each, void *ud) {
  dl_backend *b = x->op.c->backend;
  switch (x->what) {
  case CALL_QUERY:
    return b->ops->lock_query_async(b, &x->ref, x->q, &x->v, call_done, x,
                                    &x->op.bop);
  case CALL_FORCE:
    return b->ops->lock_force_release_async(b, &x->ref, call_done, x,
                                            &x->op.bop);
  case CALL_INSPECT:
    return b->ops->inspect_async(b, KEY(x->l), &x->all, call_done, x,
                                 &x->op.bop);
  case CALL_SCAN:
    return b->ops->scan_async(b, x->match, x->op.c->prefix_len, each, ud,
                              call_done, x, &x->op.bop);
  default:
    return b->ops->ping_async(b, call_done, x, &x->op.bop);
  }
}

/* A call on the lock l (what, and q for a query). */
static int lock_call(dlock_lock *l, int what, dl_lock_query q, bool has,
                     const char *name, dlock_done_cb cb, void *ud,
                     dlock_op **out, call_op **xp) {
  int rc;
  call_op *x = dl_op_new(l ? l->c : NULL, sizeof *x, has, name, cb, ud, out,
                         &rc);
  if (x == NULL) return rc;
  x->l = l;
  x->what = what;
  x->q = q;
  if (what == CALL_FORCE) dl_lock_ref_of(l, "", &x->ref);
  else if (what == CALL_QUERY) rc = query_ref(l, x->owner, &x->ref);
  if (rc == 0 && xp) *xp = x; /* the caller sets its outputs first */
  if (rc == 0) rc = call_start(x, NULL, NULL);
  if (rc != 0) {
    free(x);
    return rc;
  }
  dl_lock_op_begin(l);
  if (out) *out = &x->op;
  return 0;
}

#define HAS(l, entry) ((l) && (l)->c->backend->ops->entry)

static int query_async(dlock_lock *l, dl_lock_query q, dlock_done_cb cb,
                       void *ud, dlock_op **op) {
  return lock_call(l, CALL_QUERY, q, HAS(l, lock_query_async), "query", cb,
                   ud, op, NULL);
}

int dlock_lock_is_locked_async(dlock_lock *l, dlock_done_cb cb, void *ud,
                               dlock_op **op) {
  return query_async(l, DL_QUERY_LOCKED, cb, ud, op);
}

int dlock_lock_is_held_async(dlock_lock *l, dlock_done_cb cb, void *ud,
                             dlock_op **op) {
  return query_async(l, DL_QUERY_HELD, cb, ud, op);
}

int dlock_lock_hold_count_async(dlock_lock *l, dlock_done_cb cb, void *ud,
                                dlock_op **op) {
  return query_async(l, DL_QUERY_COUNT, cb, ud, op);
}

int dlock_lock_current_token_async(dlock_lock *l, dlock_done_cb cb, void *ud,
                                   dlock_op **op) {
  return query_async(l, DL_QUERY_TOKEN, cb, ud, op);
}

int dlock_lock_remaining_ttl_async(dlock_lock *l, int64_t *ttl_ms,
                                   dlock_done_cb cb, void *ud,
                                   dlock_op **op) {
  if (ttl_ms == NULL) {
    if (op) *op = NULL;
    return l ? dl_seterr(l->c, DLOCK_EINVAL, "ttl_ms is NULL") : DLOCK_EINVAL;
  }
  call_op *x = NULL;
  /* ttl is set before the request can complete (never within the call). */
  int rc = lock_call(l, CALL_QUERY, DL_QUERY_TTL, HAS(l, lock_query_async),
                     "query", cb, ud, op, &x);
  if (rc == 0) x->ttl = ttl_ms;
  return rc;
}

int dlock_lock_force_release_async(dlock_lock *l, dlock_done_cb cb, void *ud,
                                   dlock_op **op) {
  return lock_call(l, CALL_FORCE, 0, HAS(l, lock_force_release_async),
                   "force release", cb, ud, op, NULL);
}

int dlock_lock_inspect_async_size(dlock_lock *l, dlock_lock_state *st,
                                  size_t size, dlock_done_cb cb, void *ud,
                                  dlock_op **op) {
  if (st == NULL || size == 0) {
    if (op) *op = NULL;
    return l ? dl_seterr(l->c, DLOCK_EINVAL,
                         "no state to fill (st NULL or size 0)")
             : DLOCK_EINVAL;
  }
  call_op *x = NULL;
  int rc = lock_call(l, CALL_INSPECT, 0, HAS(l, inspect_async), "inspect",
                     cb, ud, op, &x);
  if (rc == 0) {
    x->st = st;
    x->st_size = size;
  }
  return rc;
}

int dlock_client_scan_locks_async(dlock_client *c, const char *pattern,
                                  dlock_scan_cb each, dlock_done_cb cb,
                                  void *ud, dlock_op **out) {
  if (each == NULL) {
    if (out) *out = NULL;
    return c ? dl_seterr(c, DLOCK_EINVAL, "each is NULL") : DLOCK_EINVAL;
  }
  int rc;
  call_op *x = dl_op_new(c, sizeof *x, c && c->backend->ops->scan_async,
                         "scan", cb, ud, out, &rc);
  if (x == NULL) return rc;
  x->what = CALL_SCAN;
  x->match = dl_key(c, "%s", pattern ? pattern : "*");
  rc = x->match ? call_start(x, each, ud)
                : dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  if (rc != 0) {
    free(x->match);
    free(x);
    return rc;
  }
  if (out) *out = &x->op;
  return 0;
}

int dlock_client_ping_async(dlock_client *c, dlock_done_cb cb, void *ud,
                            dlock_op **out) {
  int rc;
  call_op *x = dl_op_new(c, sizeof *x, c && c->backend->ops->ping_async,
                         "ping", cb, ud, out, &rc);
  if (x == NULL) return rc;
  x->what = CALL_PING;
  rc = call_start(x, NULL, NULL);
  if (rc != 0) {
    free(x);
    return rc;
  }
  if (out) *out = &x->op;
  return 0;
}
