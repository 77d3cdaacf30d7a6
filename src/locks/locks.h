/* locks.h: what the lock kinds share (one file per kind in this folder):
 * name checks, deadlines, and the lock handle's key for the multi-lock.
 * The kinds talk to a deployment through the backend seam only. */
#ifndef DLOCK_LOCKS_H
#define DLOCK_LOCKS_H

#include "../client/client.h"

/* 0, or DLOCK_EINVAL / DLOCK_ENAMETOOLONG with the detail recorded. */
int dl_check_name(dlock_client *c, const char *name);
/* 0 if the backend takes the key (prefix + name) as a name of its kind of
 * (a znode path on zk://), else the backend's code, recorded. */
int dl_check_key(dlock_client *c, const char *name);
/* The wait_ms of the calls without a wait limit (any negative wait_ms). */
#define DL_WAIT_FOREVER (-1)
/* The dl_now_ms() time a wait of wait_ms (< 0: forever) started now ends. */
int64_t dl_deadline(int64_t wait_ms);
/* DLOCK_ENOTSUP with the detail recorded: c's backend has no `what`. */
int dl_unsupported(dlock_client *c, const char *what);
/* DLOCK_ECLOSED with the detail recorded if c is closing, else 0. */
int dl_check_open(dlock_client *c);

/* ---- async.c: an event-loop operation of any kind (dlock_op) ----
 * What dlock_op_cancel ends is the backend's operation (bop) or, for a
 * call made of others (the multi-lock's), the inner one it waits on. A
 * kind's operation state begins with this struct. */
struct dlock_op {
  dlock_client *c;
  dlock_done_cb cb;
  void *ud;
  dl_async *bop;   /* the backend's, while it runs */
  dlock_op *inner; /* or a member's, while it runs */
  bool cancelled;
  /* While it waits: in its client's list `waits`, for the handle h. */
  dlock_op *wnext, **wprev;
  const void *h;
};
/* Allocates (zeroed) `size` bytes, a dlock_op first, for an event-loop
 * call on c: NULL with *rc (the detail recorded) when c is NULL or not an
 * event-loop client, cb is NULL, `has` is false (the backend has no such
 * operation: `what` names it) or out of memory. Sets *out to NULL. */
void *dl_op_new(dlock_client *c, size_t size, bool has, const char *what,
                dlock_done_cb cb, void *ud, dlock_op **out, int *rc);
/* Tells the caller rc and token (with the client's detail when rc < 0)
 * and frees op. */
void dl_op_finish(dlock_op *op, int rc, uint64_t token);
/* op (started) waits through the handle h: dl_op_cancel_for(h) cancels
 * it until dl_op_unwait (which a finish does too; safe when not
 * waiting). A wait is what a handle's free cuts short: an acquire, a
 * poll, not the release that gives a late grant back. */
void dl_op_wait(dlock_op *op, const void *h);
void dl_op_unwait(dlock_op *op);
/* A handle's free: every operation waiting through h is cancelled, as
 * dlock_op_cancel does (their callbacks run later, from the loop).
 * Nothing to do on a blocking client. */
void dl_op_cancel_for(dlock_client *c, const void *h);

/* What the handles of the semaphores and the latch begin with. */
typedef struct dl_sync_handle {
  dlock_client *c;
  char *key; /* prefix + name */
  atomic_uchar hint;
  /* An event-loop client's (loop thread only): operations in flight, and
   * whether the handle's free came first (the last of them then frees it
   * with `destroy`). */
  unsigned char orphan;
  uint16_t ops;
  void (*destroy)(struct dl_sync_handle *h);
} dl_sync_handle;
/* The backend's view of h (borrows h). */
dl_sync_ref dl_sync_ref_of(dl_sync_handle *h);
/* For a kind's free: true if operations still run on h (it is freed with
 * h->destroy after the last). */
bool dl_sync_free_later(dl_sync_handle *h);

/* One call on a semaphore, permits or latch, in the halves the blocking
 * call and its event-loop form share: the kind fills it in (its checks
 * done), dl_sync_run or dl_sync_run_async send it to the backend, and
 * `end` turns the backend's result into the API's. */
typedef enum dl_sync_what {
  DL_SYNC_UPDATE,  /* sync_update(op, n, id) */
  DL_SYNC_SEM,     /* sem_acquire(n permits) */
  DL_SYNC_PERMIT,  /* permit_acquire(id, lease_ms) */
  DL_SYNC_LATCH    /* latch_await */
} dl_sync_what;
typedef struct dl_sync_call dl_sync_call;
struct dl_sync_call {
  /* in */
  dl_sync_what what;
  const char *kind; /* names the kind in errors */
  dl_sync_op op;
  long long n;
  char id[DLOCK_PERMIT_ID_LEN]; /* a permit's, or "" */
  bool wait, watchdog;
  bool cancelled; /* on the loop: the caller cancelled it */
  int64_t deadline, lease_ms;
  int aux; /* the kind's, for end */
  /* out */
  long long v;
  int64_t valid_until;
  /* The API's result from the backend's rc (v, valid_until filled in).
   * It may set give_back: a grant (the semaphore's n permits, the permit
   * q->id) must be released again (granted too late, or as it was
   * cancelled); the result stays the call's. */
  int (*end)(dl_sync_handle *h, dl_sync_call *q, int rc);
  bool give_back;
};
/* Runs q on h's backend, blocking: the API's result. */
int dl_sync_run(dl_sync_handle *h, dl_sync_call *q);
/* Runs q (copied) on h's loop: 0 and *out, then cb(end's result, 0, ...)
 * once from the loop; or a negative code and cb never called. */
int dl_sync_run_async(dl_sync_handle *h, const dl_sync_call *q,
                      dlock_done_cb cb, void *ud, dlock_op **out);
/* A kind's call: its checks' result rc (nonzero: returned, nothing run),
 * then q run blocking or on the loop. `handle` is the kind's handle,
 * which begins with its dl_sync_handle (not used when rc is nonzero). */
int dl_sync_go(int rc, void *handle, dl_sync_call *q);
int dl_sync_go_async(int rc, void *handle, const dl_sync_call *q,
                     dlock_done_cb cb, void *ud, dlock_op **out);
/* An update call (q zeroed, then what, kind, op, n, end): 0, or
 * DLOCK_EINVAL when the kind's handle is NULL. */
int dl_sync_update_call(const void *handle, const char *kind, dl_sync_op op,
                        long long n,
                        int (*end)(dl_sync_handle *, dl_sync_call *, int),
                        dl_sync_call *q);
/* The usual ends: rc itself (0 or a code); a count (v, below zero as 0,
 * DLOCK_ERANGE past INT_MAX);
 * v == 1 as 1 or 0. Each clears the client's detail on success. */
int dl_sync_end_rc(dl_sync_handle *h, dl_sync_call *q, int rc);
int dl_sync_end_count(dl_sync_handle *h, dl_sync_call *q, int rc);
int dl_sync_end_bool(dl_sync_handle *h, dl_sync_call *q, int rc);

/* lock.c: an event-loop operation on l begins or ends: the handle stays
 * until the last ends (dlock_lock_free then frees it there). */
void dl_lock_op_begin(struct dlock_lock *l);
void dl_lock_op_end(struct dlock_lock *l);

/* lock.c: the lock's key (prefix + name), and its client. */
const char *dl_lock_key(const struct dlock_lock *l);
dlock_client *dl_lock_client(const struct dlock_lock *l);

#endif /* DLOCK_LOCKS_H */
