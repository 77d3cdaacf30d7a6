/* multilock.c: all-or-nothing over a set of locks (Redisson's
 * RedissonMultiLock, "联锁"), with a wait and a lease like one lock. The locks
 * are taken in one canonical order (by key), whatever order the caller lists
 * them in, so two multi-locks over the same locks never deadlock; on failure,
 * what was taken is released. */
#include "locks.h"

#include <stdlib.h>
#include <string.h>

struct dlock_multilock {
  size_t n;
  dlock_lock **locks; /* the caller's order */
  size_t *order;      /* indexes into locks, in key order */
};

int dlock_multilock_new(dlock_lock *const *locks, size_t n,
                        dlock_multilock **out) {
  if (out) *out = NULL;
  if (out == NULL || locks == NULL || n == 0) return DLOCK_EINVAL;
  for (size_t i = 0; i < n; i++)
    if (locks[i] == NULL) return DLOCK_EINVAL;
  dlock_multilock *m = calloc(1, sizeof *m);
  if (m == NULL || (m->locks = malloc(n * sizeof *m->locks)) == NULL ||
      (m->order = malloc(n * sizeof *m->order)) == NULL) {
    dlock_multilock_free(m);
    return DLOCK_ENOMEM;
  }
  m->n = n;
  memcpy(m->locks, locks, n * sizeof *locks);
  /* Insertion sort by key: a multi-lock spans a handful of locks. */
  for (size_t i = 0; i < n; i++) {
    size_t j = i;
    for (; j > 0 && strcmp(dl_lock_key(locks[m->order[j - 1]]),
                           dl_lock_key(locks[i])) > 0;
         j--)
      m->order[j] = m->order[j - 1];
    m->order[j] = i;
  }
  for (size_t i = 1; i < n; i++)
    if (strcmp(dl_lock_key(m->locks[m->order[i - 1]]),
               dl_lock_key(m->locks[m->order[i]])) == 0) {
      dlock_multilock_free(m);
      return DLOCK_EINVAL; /* the same lock twice */
    }
  *out = m;
  return 0;
}

void dlock_multilock_free(dlock_multilock *m) {
  if (m == NULL) return;
  free(m->locks);
  free(m->order);
  free(m);
}

int dlock_multilock_try_acquire(dlock_multilock *m, int64_t wait_ms,
                                int64_t lease_ms, uint64_t *tokens) {
  if (m == NULL) return DLOCK_EINVAL;
  int64_t deadline = dl_deadline(wait_ms);
  for (size_t k = 0; k < m->n; k++) {
    size_t i = m->order[k];
    int64_t left = -1;
    if (wait_ms >= 0) {
      left = deadline - dl_now_ms();
      if (left < 0) left = 0;
    }
    uint64_t tok = 0;
    int rc = dlock_lock_try_acquire(m->locks[i], left, lease_ms, &tok);
    if (rc != 0) {
      /* All or nothing: give back what was taken, newest first. */
      while (k-- > 0)
        dlock_lock_release(m->locks[m->order[k]]);
      return rc;
    }
    if (tokens) tokens[i] = tok;
  }
  return 0;
}

int dlock_multilock_acquire(dlock_multilock *m, int64_t lease_ms,
                            uint64_t *tokens) {
  return dlock_multilock_try_acquire(m, DL_WAIT_FOREVER, lease_ms, tokens);
}

int dlock_multilock_release(dlock_multilock *m) {
  if (m == NULL) return DLOCK_EINVAL;
  int first = 0;
  for (size_t k = m->n; k-- > 0;) {
    int rc = dlock_lock_release(m->locks[m->order[k]]);
    if (rc < 0 && first == 0) first = rc;
  }
  return first;
}
