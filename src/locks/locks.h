/* locks.h: what the lock kinds share (one file per kind in this folder):
 * name checks, deadlines, and the lock handle's key for the multi-lock.
 * The kinds talk to a deployment through the backend seam only. */
#ifndef DLOCK_LOCKS_H
#define DLOCK_LOCKS_H

#include "../client/client.h"

/* 0, or DLOCK_EINVAL / DLOCK_ENAMETOOLONG with the detail recorded. */
int dl_check_name(dlock_client *c, const char *name);
/* The dl_now_ms() time a wait of wait_ms (< 0: forever) started now ends. */
int64_t dl_deadline(int64_t wait_ms);
/* DLOCK_ENOTSUP with the detail recorded: c's backend has no `what`. */
int dl_unsupported(dlock_client *c, const char *what);
/* DLOCK_ECLOSED with the detail recorded if c is closing, else 0. */
int dl_check_open(dlock_client *c);

/* lock.c: the lock's key (prefix + name). */
const char *dl_lock_key(const struct dlock_lock *l);

#endif /* DLOCK_LOCKS_H */
