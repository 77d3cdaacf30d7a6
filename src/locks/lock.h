/* lock.h: the lock handle, shared by the files of the lock (lock.c:
 * handles, acquire and release; inspect.c: queries, snapshots and the
 * scan). Not for the other lock kinds. */
#ifndef DLOCK_LOCKS_LOCK_H
#define DLOCK_LOCKS_LOCK_H

#include "locks.h"

#include <string.h>


struct dlock_lock {
  dlock_client *c;
  /* In this allocation, after the struct (the derived names, such as the
   * channel, are built on the stack when needed: a held lock costs less). */
  char *key;   /* prefix + name (the name: NAME(l)) */
  char *owner; /* explicit owner, or NULL for the calling thread */
  int64_t fair_ms; /* a fair lock's stale-waiter timeout; 0: not fair */
  /* Guarded by the client's holds_mu: */
  char *info; /* holder description stored beside the lock, or NULL */
  dlock_lost_cb cb;
  void *cb_ud;
  int nholds; /* holds whose lost callback goes through this handle */
  unsigned char rw; /* RW_NONE, or which side of a read-write lock */
  atomic_uchar hint; /* the backend's hints for this handle (dl_lock_ref) */
  /* 64 bytes on LP64, so that with a short name and owner the handle fits
   * a 96-byte malloc chunk (docs/PERFORMANCE.md, memory per held lock). */
};

#define NAME(l) ((l)->key + (l)->c->prefix_len)
enum { RW_NONE, RW_READ, RW_WRITE };

/* The owner id of the calling thread (or the handle's explicit owner), with
 * ":write" for a read-write lock's writer, into buf (DL_OWNER_MAX bytes).
 * Returns 0, or DLOCK_EINVAL with the detail recorded. */
int dl_lock_owner(dlock_lock *l, char *buf);
/* The backend's view of l, for `owner` (borrowed by *ref). */
void dl_lock_ref_of(dlock_lock *l, const char *owner, dl_lock_ref *ref);

#endif /* DLOCK_LOCKS_LOCK_H */
