/* semaphore.c: the counting semaphore (Redisson's RSemaphore): permits
 * that are not owned, so a holder that dies keeps its permits (see the
 * permit-expirable semaphore for permits that come back). The layout on a
 * deployment is the backend's (src/redis/sync.c). */
#include "locks.h"

#include <stdlib.h>
#include <string.h>

struct dlock_semaphore {
  dlock_client *c;
  char *key; /* prefix + name */
  atomic_uchar hint;
};

int dlock_semaphore_new(dlock_client *c, const char *name,
                        dlock_semaphore **out) {
  if (out) *out = NULL;
  if (c == NULL || out == NULL) return DLOCK_EINVAL;
  int rc = dl_check_name(c, name);
  if (rc != 0) return rc;
  dlock_semaphore *s = calloc(1, sizeof *s);
  if (s == NULL || (s->key = dl_key(c, "%s", name)) == NULL) {
    dlock_semaphore_free(s);
    return dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  }
  s->c = c;
  *out = s;
  return 0;
}

void dlock_semaphore_free(dlock_semaphore *s) {
  if (s == NULL) return;
  free(s->key);
  free(s);
}

static dl_sync_ref ref_of(dlock_semaphore *s) {
  dl_sync_ref r = {s->key, s->key + s->c->prefix_len, &s->hint};
  return r;
}

/* Runs `op` on the backend: 0 and its result in *v, or a negative code. */
static int update(dlock_semaphore *s, dl_sync_op op, int n, long long *v) {
  dl_backend *b = s->c->backend;
  if (b->ops->sync_update == NULL) return dl_unsupported(s->c, "semaphore");
  dl_sync_ref r = ref_of(s);
  int rc = b->ops->sync_update(b, &r, op, n, NULL, v);
  if (rc == 0) dl_clearerr(s->c);
  return rc;
}

int dlock_semaphore_try_set_permits(dlock_semaphore *s, int permits) {
  if (s == NULL) return DLOCK_EINVAL;
  if (permits < 0)
    return dl_seterr(s->c, DLOCK_EINVAL, "permits must not be negative");
  long long v = 0;
  int rc = update(s, DL_SEM_SET, permits, &v);
  return rc ? rc : (v == 1);
}

int dlock_semaphore_add_permits(dlock_semaphore *s, int permits) {
  if (s == NULL) return DLOCK_EINVAL;
  long long v = 0;
  return update(s, DL_SEM_ADD, permits, &v);
}

int dlock_semaphore_drain(dlock_semaphore *s) {
  if (s == NULL) return DLOCK_EINVAL;
  long long v = 0;
  int rc = update(s, DL_SEM_DRAIN, 0, &v);
  return rc ? rc : (v < 0 ? 0 : (int)v);
}

int dlock_semaphore_available(dlock_semaphore *s) {
  if (s == NULL) return DLOCK_EINVAL;
  long long v = 0;
  int rc = update(s, DL_SEM_AVAILABLE, 0, &v);
  /* Below zero after add_permits(-n): none available. */
  return rc ? rc : (v < 0 ? 0 : (int)v);
}

int dlock_semaphore_acquire(dlock_semaphore *s, int permits, int64_t wait_ms) {
  if (s == NULL) return DLOCK_EINVAL;
  if (permits <= 0)
    return dl_seterr(s->c, DLOCK_EINVAL, "permits must be positive");
  int rc = dl_check_open(s->c);
  if (rc != 0) return rc;
  dl_backend *b = s->c->backend;
  if (b->ops->sem_acquire == NULL) return dl_unsupported(s->c, "semaphore");
  dl_sync_ref r = ref_of(s);
  rc = b->ops->sem_acquire(b, &r, permits, wait_ms != 0,
                           dl_deadline(wait_ms));
  if (rc == 0)
    return dl_seterr(s->c, DLOCK_ELOCKED, "no %d permit(s) of '%s' in time",
                     permits, r.name);
  if (rc < 0) return rc;
  dl_clearerr(s->c);
  return 0;
}

int dlock_semaphore_release(dlock_semaphore *s, int permits) {
  if (s == NULL) return DLOCK_EINVAL;
  if (permits <= 0)
    return dl_seterr(s->c, DLOCK_EINVAL, "permits must be positive");
  long long heard = 0;
  return update(s, DL_SEM_RELEASE, permits, &heard);
}
