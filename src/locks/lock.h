/* lock.h: the lock handle and the names of its keys, shared by the files of
 * the lock (lock.c: handles, acquire and release; inspect.c: queries,
 * snapshots and the scan). Not for the other lock kinds. */
#ifndef DLOCK_LOCKS_LOCK_H
#define DLOCK_LOCKS_LOCK_H

#include "../core/internal.h"

#include <string.h>

#define OWNER_MAX 256

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
  /* The last acquire through this handle had to wait (a hint only: its
   * next acquire queues at once, its release sends the wake-up first). */
  atomic_bool contended;
  /* 64 bytes on LP64, so that with a short name and owner the handle fits
   * a 96-byte malloc chunk (docs/PERFORMANCE.md, memory per held lock). */
};

#define NAME(l) ((l)->key + (l)->c->prefix_len)

/* Redisson's derived names: "<prefix>:{<name>}", or "<prefix>:<name>" when
 * the name carries its own hash tag. Either way it shares the lock's slot.
 * `out` has DERIVED_MAX bytes. */
#define DERIVED_MAX (DLOCK_KEY_PREFIX_MAX + DLOCK_NAME_MAX + 32)
static inline const char *derived(char *out, const char *prefix, const dlock_lock *l) {
  dl_derived_into(out, DERIVED_MAX, prefix, l->key);
  return out;
}
#define CHANNEL(l, buf) derived(buf, "redisson_lock__channel", l)
#define TOKEN_KEY(l, buf) derived(buf, "redisson_lock_token", l)
#define HANDOFF_KEY(l, buf) derived(buf, "dlock_handoff", l)
#define QUEUE_KEY(l, buf) derived(buf, "redisson_lock_queue", l)
#define TIMEOUT_KEY(l, buf) derived(buf, "redisson_lock_timeout", l)
#define RW_CHANNEL(l, buf) derived(buf, "redisson_rwlock", l)
#define GRANT_QUEUE_KEY(l, buf) derived(buf, "dlock_lock_queue", l)
#define GRANT_WAITERS_KEY(l, buf) derived(buf, "dlock_lock_waiters", l)
enum { RW_NONE, RW_READ, RW_WRITE };

/* The owner id of the calling thread (or the handle's explicit owner), with
 * ":write" for a read-write lock's writer, into buf (OWNER_MAX bytes).
 * Returns 0, or DLOCK_EINVAL with the detail recorded. */
int dl_lock_owner(dlock_lock *l, char *buf);

#endif /* DLOCK_LOCKS_LOCK_H */
