/* locks.h: what the lock kinds share (one file per kind in this folder):
 * name checks, deadlines, and the lock handle's key for the multi-lock.
 * The kinds talk to a deployment through the backend seam only. */
#ifndef DLOCK_LOCKS_H
#define DLOCK_LOCKS_H

#include "../client/client.h"

/* 0, or DLOCK_EINVAL / DLOCK_ENAMETOOLONG with the detail recorded. */
int dl_check_name(dlock_client *c, const char *name);
/* The wait_ms of the calls without a wait limit (any negative wait_ms). */
#define DL_WAIT_FOREVER (-1)
/* The dl_now_ms() time a wait of wait_ms (< 0: forever) started now ends. */
int64_t dl_deadline(int64_t wait_ms);
/* DLOCK_ENOTSUP with the detail recorded: c's backend has no `what`. */
int dl_unsupported(dlock_client *c, const char *what);
/* DLOCK_ECLOSED with the detail recorded if c is closing, else 0. */
int dl_check_open(dlock_client *c);

/* What the handles of the semaphores and the latch begin with. */
typedef struct dl_sync_handle {
  dlock_client *c;
  char *key; /* prefix + name */
  atomic_uchar hint;
} dl_sync_handle;
/* The backend's view of h (borrows h). */
dl_sync_ref dl_sync_ref_of(dl_sync_handle *h);
/* Runs op on h's backend (`kind` names it in the error when the backend has
 * none): 0 and the op's result in *v, or a negative code. */
int dl_sync_update(dl_sync_handle *h, const char *kind, dl_sync_op op,
                   long long n, const char *id, long long *v);

/* lock.c: the lock's key (prefix + name). */
const char *dl_lock_key(const struct dlock_lock *l);

#endif /* DLOCK_LOCKS_H */
