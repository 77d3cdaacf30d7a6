/* kinds.c: what the lock kinds share. */
#include "locks.h"

#include <string.h>

int dl_check_name(dlock_client *c, const char *name) {
  if (name == NULL || *name == '\0')
    return dl_seterr(c, DLOCK_EINVAL, "the name is empty");
  if (strlen(name) > DLOCK_NAME_MAX)
    return dl_seterr(c, DLOCK_ENAMETOOLONG, "the name is over %d bytes",
                     DLOCK_NAME_MAX);
  return 0;
}

int64_t dl_deadline(int64_t wait_ms) {
  return wait_ms < 0 ? INT64_MAX : dl_now_ms() + wait_ms;
}

int dl_unsupported(dlock_client *c, const char *what) {
  return dl_seterr(c, DLOCK_ENOTSUP, "the %s backend has no %s",
                   c->backend->ops->name, what);
}

int dl_check_open(dlock_client *c) {
  return atomic_load(&c->closing)
             ? dl_seterr(c, DLOCK_ECLOSED, "the client is closing")
             : 0;
}

dl_sync_ref dl_sync_ref_of(dl_sync_handle *h) {
  dl_sync_ref r = {h->key, h->key + h->c->prefix_len, &h->hint};
  return r;
}

int dl_sync_update(dl_sync_handle *h, const char *kind, dl_sync_op op,
                   long long n, const char *id, long long *v) {
  dl_backend *b = h->c->backend;
  if (b->ops->sync_update == NULL) return dl_unsupported(h->c, kind);
  dl_sync_ref r = dl_sync_ref_of(h);
  int rc = b->ops->sync_update(b, &r, op, n, id, v);
  if (rc == 0) dl_clearerr(h->c);
  return rc;
}
