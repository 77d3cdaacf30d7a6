/* lock.h: the lock handle, shared by the files of the lock (lock.c:
 * handles, acquire and release; inspect.c: queries, snapshots and the
 * scan). Not for the other lock kinds. */
#ifndef DLOCK_LOCKS_LOCK_H
#define DLOCK_LOCKS_LOCK_H

#include "locks.h"

#include <string.h>


struct dlock_lock {
  dlock_client *c;
  int64_t fair_ms; /* a fair lock's stale-waiter timeout; 0: not fair */
  /* The client's (its lost callback, the holder description stored
   * beside the lock, the holds taken through this handle). */
  dl_holder holder;
  unsigned char rw; /* RW_NONE, or which side of a read-write lock */
  unsigned char plain; /* 1: the plain string lock (dlock_plainlock_new) */
  unsigned char borrowed; /* 1: owned by a dlock_rwlock (dlock_lock_free
                             does nothing) */
  atomic_uchar hint; /* the backend's hints for this handle (dl_lock_ref) */
  /* An event-loop client's (loop thread only): operations in flight on
   * this handle, and whether dlock_lock_free came first (the last of them
   * then frees it: dl_lock_op_end). */
  unsigned char orphan;
  unsigned char owned; /* 1: an explicit owner follows the key */
  uint16_t ops;
  /* 64 bytes on LP64: with a 16-byte name and an owner of up to 6 bytes
   * the handle and its strings fit a 96-byte malloc chunk
   * (docs/PERFORMANCE.md, memory per held lock). */
};

/* In the handle's allocation, right after the struct (not pointed to: a
 * held lock costs less; the derived names, such as the channel, are built
 * on the stack when needed): the key, prefix + name; then, with `owned`,
 * the explicit owner. */
#define KEY(l) ((char *)((l) + 1))
#define NAME(l) (KEY(l) + (l)->c->prefix_len)
/* The explicit owner (or an event-loop handle's own), or NULL for the
 * calling thread. */
#define OWNER(l) ((l)->owned ? KEY(l) + strlen(KEY(l)) + 1 : NULL)
enum { RW_NONE, RW_READ, RW_WRITE };

/* The owner id of the calling thread (or the handle's explicit owner), with
 * ":write" for a read-write lock's writer, into buf (DL_OWNER_MAX bytes).
 * Returns 0, or DLOCK_EINVAL with the detail recorded. */
int dl_lock_owner(dlock_lock *l, char *buf);
/* The backend's view of l, for `owner` (borrowed by *ref). */
void dl_lock_ref_of(dlock_lock *l, const char *owner, dl_lock_ref *ref);

/* Acquire and release as the client sees them, in halves around the
 * backend's operation, for the blocking calls and the event-loop ones
 * (async.c). */
typedef struct dl_acq_req {
  char owner[DL_OWNER_MAX];
  char *info;
  bool watchdog; /* the watchdog's lease, renewed */
  int64_t start_us; /* dl_now_us() time of the call */
  dl_lock_ref ref;
  dl_acquire a; /* for the backend */
} dl_acq_req;
/* Fills q for the backend's lock_acquire. Returns 0, or a negative code
 * (nothing to undo). */
int dl_acq_begin(dlock_lock *l, int64_t wait_ms, int64_t lease_ms,
                 dl_acq_req *q);
/* Takes the backend's result rc: records the hold. Returns 0 and *token,
 * or a negative code (the detail recorded); *give_back: a hold was taken
 * that must be released again (out of memory, or granted too late). */
int dl_acq_end(dlock_lock *l, dl_acq_req *q, int rc, uint64_t *token,
               bool *give_back);

typedef struct dl_rel_req {
  char owner[DL_OWNER_MAX];
  dl_lock_ref ref;
  int64_t lease_ms;
  int count;
  dl_renewal *ren;
  bool lost; /* reported lost already: released, then DLOCK_ELOST */
} dl_rel_req;
int dl_rel_begin(dlock_lock *l, dl_rel_req *q);
/* Takes the backend's release result rc; returns the call's result. */
int dl_rel_end(dlock_lock *l, dl_rel_req *q, int rc);

/* Ends an event-loop operation on l (or NULL: a client's): its handle's
 * count of operations (dl_lock_op_end, which may free it), then the
 * caller's callback with rc, token and the client's detail, and frees op. */
void dl_lock_op_finish(dlock_op *op, dlock_lock *l, int rc, uint64_t token);

#endif /* DLOCK_LOCKS_LOCK_H */
