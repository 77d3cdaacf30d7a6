/* inspect.c: what can be read of a lock without taking it: who holds it,
 * its lease and token (the queries), a snapshot of whatever kind of lock or
 * synchronizer lives at a name (dlock_lock_inspect), and the scan for lock
 * names. Read-only on the server. */
#include "lock.h"

#include <stdlib.h>
#include <string.h>

/* Asks the backend query q about l (for the calling thread's owner). */
static int query(dlock_lock *l, dl_lock_query q, long long *v) {
  if (l == NULL) return DLOCK_EINVAL;
  dlock_client *c = l->c;
  if (c->backend->ops->lock_query == NULL) return dl_unsupported(c, "query");
  char owner[DL_OWNER_MAX];
  int rc = dl_lock_owner(l, owner);
  if (rc != 0) return rc;
  dl_lock_ref ref;
  dl_lock_ref_of(l, owner, &ref);
  return c->backend->ops->lock_query(c->backend, &ref, q, v);
}

int dlock_lock_is_locked(dlock_lock *l) {
  long long v = 0;
  int rc = query(l, DL_QUERY_LOCKED, &v);
  return rc ? rc : (v > 0);
}

int dlock_lock_is_held(dlock_lock *l) {
  long long v = 0;
  int rc = query(l, DL_QUERY_HELD, &v);
  return rc ? rc : (v > 0);
}

/* A plain string lock's count is the client's only (the wire has none):
 * the server says whether the owner holds it, the client's hold how often. */
static int plain_count(dlock_lock *l) {
  char owner[DL_OWNER_MAX];
  if (dl_lock_owner(l, owner) != 0) return 1;
  pthread_mutex_lock(&l->c->holds_mu);
  dl_hold *h = dl_hold_find(l->c, l->key, owner);
  int n = h && !h->lost && h->count > 0 ? h->count : 1;
  pthread_mutex_unlock(&l->c->holds_mu);
  return n;
}

int dlock_lock_hold_count(dlock_lock *l) {
  long long v = 0;
  int rc = query(l, DL_QUERY_COUNT, &v);
  if (rc == 0 && v > 0 && l->plain) v = plain_count(l);
  return rc ? rc : (int)v;
}

int dlock_lock_remaining_ttl(dlock_lock *l, int64_t *ttl_ms) {
  if (ttl_ms == NULL) return DLOCK_EINVAL;
  long long v = 0;
  int rc = query(l, DL_QUERY_TTL, &v);
  if (rc == 0) *ttl_ms = v;
  return rc;
}

int dlock_lock_current_token(dlock_lock *l, uint64_t *token) {
  if (token == NULL) return DLOCK_EINVAL;
  long long v = 0;
  int rc = query(l, DL_QUERY_TOKEN, &v);
  if (rc == 0) *token = (uint64_t)v;
  return rc;
}

int dlock_lock_inspect_size(dlock_lock *l, dlock_lock_state *st,
                            size_t size) {
  if (l == NULL || st == NULL || size == 0) return DLOCK_EINVAL;
  dl_backend *b = l->c->backend;
  if (b->ops->inspect == NULL) return dl_unsupported(l->c, "inspect");
  dlock_lock_state *all = calloc(1, sizeof *all);
  if (all == NULL) return dl_seterr(l->c, DLOCK_ENOMEM, "out of memory");
  int rc = b->ops->inspect(b, l->key, all);
  memcpy(st, all, size < sizeof *all ? size : sizeof *all);
  free(all);
  return rc;
}

int dlock_client_scan_locks(dlock_client *c, const char *pattern,
                            dlock_scan_cb cb, void *ud) {
  if (c == NULL || cb == NULL) return DLOCK_EINVAL;
  if (c->backend->ops->scan == NULL) return dl_unsupported(c, "scan");
  char *match = dl_key(c, "%s", pattern ? pattern : "*");
  if (match == NULL) return dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  int rc = c->backend->ops->scan(c->backend, match, c->prefix_len, cb, ud);
  free(match);
  return rc;
}
