/* semaphore.c: the counting semaphore (Redisson's RSemaphore): permits
 * that are not owned, so a holder that dies keeps its permits (see the
 * permit-expirable semaphore for permits that come back). The layout on a
 * deployment is the backend's (src/redis/sync.c). */
#include "locks.h"

#include <stdlib.h>
#include <string.h>

struct dlock_semaphore {
  dl_sync_handle h; /* first */
};

int dlock_semaphore_new(dlock_client *c, const char *name,
                        dlock_semaphore **out) {
  if (out) *out = NULL;
  if (c == NULL || out == NULL) return DLOCK_EINVAL;
  int rc = dl_check_name(c, name);
  if (rc != 0) return rc;
  dlock_semaphore *s = calloc(1, sizeof *s);
  if (s == NULL || (s->h.key = dl_key(c, "%s", name)) == NULL) {
    dlock_semaphore_free(s);
    return dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  }
  s->h.c = c;
  *out = s;
  return 0;
}

void dlock_semaphore_free(dlock_semaphore *s) {
  if (s == NULL) return;
  free(s->h.key);
  free(s);
}

int dlock_semaphore_try_set_permits(dlock_semaphore *s, int permits) {
  if (s == NULL) return DLOCK_EINVAL;
  if (permits < 0)
    return dl_seterr(s->h.c, DLOCK_EINVAL, "permits must not be negative");
  long long v = 0;
  int rc = dl_sync_update(&s->h, "semaphore", DL_SEM_SET, permits, NULL, &v);
  return rc ? rc : (v == 1);
}

int dlock_semaphore_add_permits(dlock_semaphore *s, int permits) {
  if (s == NULL) return DLOCK_EINVAL;
  long long v = 0;
  return dl_sync_update(&s->h, "semaphore", DL_SEM_ADD, permits, NULL, &v);
}

int dlock_semaphore_drain(dlock_semaphore *s) {
  if (s == NULL) return DLOCK_EINVAL;
  long long v = 0;
  int rc = dl_sync_update(&s->h, "semaphore", DL_SEM_DRAIN, 0, NULL, &v);
  return rc ? rc : (v < 0 ? 0 : (int)v);
}

int dlock_semaphore_available(dlock_semaphore *s) {
  if (s == NULL) return DLOCK_EINVAL;
  long long v = 0;
  int rc = dl_sync_update(&s->h, "semaphore", DL_SEM_AVAILABLE, 0, NULL, &v);
  /* Below zero after add_permits(-n): none available. */
  return rc ? rc : (v < 0 ? 0 : (int)v);
}

int dlock_semaphore_try_acquire(dlock_semaphore *s, int permits,
                                int64_t wait_ms) {
  if (s == NULL) return DLOCK_EINVAL;
  if (permits <= 0)
    return dl_seterr(s->h.c, DLOCK_EINVAL, "permits must be positive");
  int rc = dl_check_open(s->h.c);
  if (rc != 0) return rc;
  dl_backend *b = s->h.c->backend;
  if (b->ops->sem_acquire == NULL) return dl_unsupported(s->h.c, "semaphore");
  dl_sync_ref r = dl_sync_ref_of(&s->h);
  rc = b->ops->sem_acquire(b, &r, permits, wait_ms != 0, dl_deadline(wait_ms));
  if (rc == 0)
    return dl_seterr(s->h.c, DLOCK_EBUSY, "no %d permit(s) of '%s' in time",
                     permits, r.name);
  if (rc < 0) return rc;
  dl_clearerr(s->h.c);
  return 0;
}

int dlock_semaphore_acquire(dlock_semaphore *s, int permits) {
  return dlock_semaphore_try_acquire(s, permits, DL_WAIT_FOREVER);
}

int dlock_semaphore_release(dlock_semaphore *s, int permits) {
  if (s == NULL) return DLOCK_EINVAL;
  if (permits <= 0)
    return dl_seterr(s->h.c, DLOCK_EINVAL, "permits must be positive");
  long long heard = 0;
  return dl_sync_update(&s->h, "semaphore", DL_SEM_RELEASE, permits, NULL,
                        &heard);
}
