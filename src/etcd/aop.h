/* aop.h: the event-loop client's own operations (release.c's, the mutex
 * acquire's of amutex.c, the renewals' of arenew.c, fence.c's, the
 * latch's of alatch.c, the semaphores' of asem.c and apermits.c, the
 * queue's of aqueue.c; the session lease's step of asession.c that the
 * acquires share): each one a struct dl_async listed in e->aops, driven
 * by calls on the loop's multi handle (acall.c), on the loop's thread
 * alone. */
#ifndef DLOCK_ETCD_AOP_H
#define DLOCK_ETCD_AOP_H

#include "etcdb.h"

typedef enum aop_kind {
  AOP_PING,
  AOP_RELEASE,
  AOP_FORCE,
  AOP_QUERY,
  AOP_ACQUIRE,
  AOP_RENEW,
  AOP_FENCE,
  AOP_INSPECT,
  AOP_LATCH,
  AOP_SEM,
  AOP_QUEUE,
  AOP_SCAN
} aop_kind;

struct etcd_aacq;
typedef struct etcd_fen etcd_fen;       /* a fenced resource's (fence.c) */
typedef struct etcd_alatch etcd_alatch; /* a latch's (alatch.c) */
typedef struct etcd_asem etcd_asem;     /* a semaphore's (asem.c) */
typedef struct etcd_aqueue etcd_aqueue; /* a queue's (aqueue.c) */

/* A renewal round's (arenew.c). */
typedef struct etcd_aren {
  dl_renew_item *items;
  int n;
  int64_t lease_ms;
  int *calls;
  etcd_renew_txns t; /* the txns reading the holds' keys */
  int c;             /* the next of them */
  int i;             /* the next item to look at for a consumer's keepalive */
  int first;         /* the round's first error */
  int64_t lease;     /* the keepalive's in flight, and when it was sent */
  int64_t sent;
} etcd_aren;

/* A wait's end (dl_etcd_op_watch): rc 0 its time is up (the watch
 * aborted), 1 news, or the stream ended and a moment has passed (look
 * again), or a negative code (the watch failed, or could not start). */
typedef void (*etcd_op_wait_fn)(dl_async *op, int rc);

/* The end of a session step (asession.c): rc 0 with the session's lease
 * (valid until `until`), or a negative code (its call failed). */
typedef void (*etcd_asess_fn)(dl_async *op, int rc, int64_t lease,
                              int64_t until);

/* One operation in flight, in e->aops (the loop's thread). */
struct dl_async {
  dl_blockloop_head head; /* own true */
  struct dl_async *next, **pprev;
  dl_etcd *e;
  aop_kind kind;
  dl_done_fn done;
  void *ud;
  etcd_acall *call;          /* the call in flight, if any */
  dl_timer timer;            /* the release's pause before a retry; a result
                                known at once, told from the loop's dispatch */
  int rc;                    /* that result */
  char msg[512];             /* its detail */
  etcd_acall_fn later;       /* what gets it (NULL: op ends with it) */
  etcd_acall_pb_fn later_pb; /* dl_etcd_op_ask's pbfn, through later */
  etcd_op_wait_fn waited;    /* dl_etcd_op_watch's fn */
  const dl_lock_ref *l;
  etcd_hold *h; /* the release's hold, off the list */
  int64_t deadline;
  bool retried;
  int attempt;     /* the force release's */
  dl_lock_query q; /* the query's */
  long long *v;
  int64_t rev;
  int result;             /* the release's, while its lease is revoked */
  char pfx[ETCD_KEY_MAX]; /* its lock's prefix */
  struct etcd_aacq *acq;  /* the acquire's (amutex.c) */
  etcd_aren *ren;         /* the renewal round's (arenew.c) */
  etcd_fen *fen;          /* the fenced resource's (fence.c) */
  etcd_alatch *lat;       /* the latch's (alatch.c) */
  etcd_asem *sem;         /* the semaphore's (asem.c) */
  etcd_aqueue *aq;        /* the queue's (aqueue.c) */
  etcd_scan *scan;        /* the scan's */
  const char *key;        /* the inspect's name, */
  dlock_lock_state *st;   /* its snapshot, */
  int step;               /* and its semaphore read's step */
  struct {                /* its session step's (asession.c) */
    etcd_asess_fn fn;
    struct dl_async *next; /* waiting for another op's session call */
    bool holds;            /* its call holds e->lease_mu (e->asess) */
    int64_t sent, lease;   /* the call's: when, and the lease kept (0: a
                              grant) */
  } sess;
};

/* A new operation of kind, listed, its deadline one command timeout
 * away: NULL out of memory (nothing recorded). */
dl_async *dl_etcd_op_new(dl_etcd *e, aop_kind kind, dl_done_fn done, void *ud);
/* Frees op, unlinked, untold. */
void dl_etcd_op_drop(dl_async *op);
/* Ends op: done(ud, rc) (its detail recorded already), op freed. */
void dl_etcd_op_end(dl_async *op, int rc);
/* A result rc known before anything was sent: told from the loop's
 * dispatch (to op->later when set, else op ends with it). 0, or
 * DLOCK_ENOMEM (op freed, untold). */
int dl_etcd_op_later(dl_async *op, int rc);
/* Runs fn(op) at `at` on op->timer (a wait's deadline, a pause); out of
 * memory, op's call is given up and op ends with DLOCK_ENOMEM. */
void dl_etcd_op_wake_at(dl_async *op, dl_timer_fn fn, int64_t at);
/* A wait's call or watch that failed with rc: ridden out, fn(op) run
 * after a pause (true), when transient, not cancelled and the deadline
 * leaves room, as the blocking waits' dl_etcd_ride_out; else false (the
 * error stands). */
bool dl_etcd_op_ride(dl_async *op, dl_timer_fn fn, bool cancelled, bool wait,
                     int64_t deadline, int rc, dl_ride *rides);
/* Starts op's call k (until op->deadline), its answer to fn, or to pbfn
 * when k->msg (a message: dl_etcd_acall_ask's); one that cannot start
 * gets its error from the loop's dispatch. 0, or DLOCK_ENOMEM (op freed,
 * untold). */
int dl_etcd_op_ask(dl_async *op, const etcd_ask *k, etcd_acall_fn fn,
                   etcd_acall_pb_fn pbfn);
/* op's next call k, within a command timeout of its own (neither body nor
 * msg: a body that ran out of memory, fn told DLOCK_ENOMEM as by a call
 * that cannot start); one that cannot even be told (out of memory: op
 * freed) tells done `told`, or DLOCK_ENOMEM when told is 0. */
void dl_etcd_op_ask_next(dl_async *op, const etcd_ask *k, etcd_acall_fn fn,
                         etcd_acall_pb_fn pbfn, int told);
/* dl_etcd_op_ask and dl_etcd_op_ask_next asked with path and body (the
 * gateway's JSON; for dl_etcd_op_next NULL, a body that ran out of
 * memory), the answer JSON to fn; dl_etcd_op_next_pb with msg, a message
 * of path's method (read, not kept), the answer a message to fn. */
static inline int dl_etcd_op_call(dl_async *op, const char *path,
                                  const char *body, etcd_acall_fn fn) {
  return dl_etcd_op_ask(op, &(etcd_ask){path, body, NULL}, fn, NULL);
}
static inline void dl_etcd_op_next(dl_async *op, const char *path,
                                   const char *body, etcd_acall_fn fn,
                                   int told) {
  dl_etcd_op_ask_next(op, &(etcd_ask){path, body, NULL}, fn, NULL, told);
}
static inline void dl_etcd_op_next_pb(dl_async *op, const char *path,
                                      const ProtobufCMessage *msg,
                                      etcd_acall_pb_fn fn, int told) {
  dl_etcd_op_ask_next(op, &(etcd_ask){path, NULL, msg}, NULL, fn, told);
}

/* Runs fn(op) at `at` on op->timer (stopped first: armed by a cancel's
 * restart, or an earlier step's): 0, or DLOCK_ENOMEM recorded, op's call
 * in flight (a watch) then aborted: the caller ends op. */
int dl_etcd_op_timer(dl_async *op, dl_timer_fn fn, int64_t at);

/* What dl_etcd_op_watch waits for on its key or prefix. */
typedef enum etcd_watch_on {
  ETCD_ON_DELETE,
  ETCD_ON_ANY,
  ETCD_ON_PUT
} etcd_watch_on;
/* A wait's step: a watch (body: dl_etcd_awatch's, waiting for `on`) as
 * op->call, and op->timer at `until` (a cancel that restarts the timer
 * ends the wait as its time up); fn(op, rc) once at its end, within
 * this call when the watch cannot start. A stream that ends without news
 * (a member gone) is told after a pause of 50 ms, on op->timer. */
void dl_etcd_op_watch(dl_async *op, const char *body, etcd_watch_on on,
                      int64_t until, etcd_op_wait_fn fn);

/* The txn deleting key if its create revision is still rev (pbtxn.h's),
 * on the loop: as dl_etcd_op_ask. */
int dl_etcd_op_delete_at(dl_async *op, const char *key, int64_t rev,
                         etcd_acall_pb_fn fn);
/* A try's result *rc of a release's delete, after earlier tries
 * (*retried): true when it is to be sent again in 20 ms (*retried set),
 * else false with the release's result in *rc. */
bool dl_etcd_delete_again(int *rc, bool *retried, int64_t deadline);

/* ---- asession.c ---- */
/* op's step for the session lease: valid already (fn at once, within
 * this call), or a keepalive or a grant on the loop, one at a time for
 * the loop's operations (e->asess; the others wait for it, e->asess_wait),
 * under e->lease_mu as the blocking path's (a job holding it: looked at
 * again in 5 ms, on op->timer); fn then gets its end (op->call is the
 * step's meanwhile). Never from the call that starts op: fn may run
 * within. */
void dl_etcd_asess_step(dl_async *op, etcd_asess_fn fn);
/* The client closing: op's part in the session's steps given up
 * (e->lease_mu unlocked if its call holds it, op off the waiters; its
 * call is the caller's to abort), nothing told. */
void dl_etcd_asess_close(dl_async *op);

/* ---- amutex.c ---- */
/* The event loop's lock_acquire_async (dl_etcd_aops). */
int dl_etcd_acquire_async(dl_backend *b, dl_acquire *a, dl_done_fn done,
                          void *ud, dl_async **out);
/* A cancel of an acquire: its wait ends as at its deadline. */
void dl_etcd_acquire_cancel(dl_async *op);
/* The client closing: an acquire's claim and calls given up, its lease
 * left to the close (a fixed one revoked); op ended (done:
 * DLOCK_ECLOSED). */
void dl_etcd_acquire_close(dl_async *op);

/* ---- arenew.c ---- */
/* The event loop's renew_async (dl_etcd_aops). */
int dl_etcd_renew_async(dl_backend *b, int64_t deadline, int64_t lease_ms,
                        int n, dl_renew_item *items, int *calls,
                        dl_done_fn done, void *ud, dl_async **out);
/* Frees a round's state (accepts NULL). */
void dl_etcd_aren_free(etcd_aren *r);

/* ---- fence.c ---- */
/* The event loop's fence_async (dl_etcd_aops). */
int dl_etcd_fence_async(dl_backend *b, dl_fence_req *f, dl_done_fn done,
                        void *ud, dl_async **out);
/* Frees a fenced resource's operation's state (accepts NULL). */
void dl_etcd_fen_free(etcd_fen *s);

/* ---- alatch.c ---- */
/* The event loop's sync_update_async (the latch's updates here, the
 * counting semaphore's in asem.c, the permit-expirable semaphore's in
 * apermits.c) and latch_await_async (dl_etcd_aops). */
int dl_etcd_sync_update_async(dl_backend *b, const dl_sync_ref *s,
                              dl_sync_op op, long long n, const char *id,
                              long long *v, dl_done_fn done, void *ud,
                              dl_async **out);
int dl_etcd_latch_await_async(dl_backend *b, const dl_sync_ref *s, bool wait,
                              int64_t deadline, dl_done_fn done, void *ud,
                              dl_async **out);
/* A cancel of a latch's operation: an await's wait ends as at its
 * deadline (a call in flight is answered first). */
void dl_etcd_latch_cancel(dl_async *op);

/* ---- asem.c ---- */
/* The counting semaphore's updates (sync_update's DL_SEM_*), and the
 * event loop's sem_acquire_async (dl_etcd_aops): a try, and a wait in
 * the line. */
int dl_etcd_sem_update_async(dl_backend *b, const dl_sync_ref *s, dl_sync_op op,
                             long long n, long long *v, dl_done_fn done,
                             void *ud, dl_async **out);
int dl_etcd_sem_acquire_async(dl_backend *b, const dl_sync_ref *s, int permits,
                              bool wait, int64_t deadline, dl_done_fn done,
                              void *ud, dl_async **out);
/* ---- apermits.c ---- */
/* The event loop's permit_acquire_async (dl_etcd_aops): a try, and a
 * wait in asem.c's line. */
int dl_etcd_permit_acquire_async(dl_backend *b, const dl_sync_ref *s,
                                 const char *id, int64_t lease_ms, bool wait,
                                 int64_t deadline, int64_t *valid_until,
                                 dl_done_fn done, void *ud, dl_async **out);
/* The event loop's updates of the permit-expirable semaphore
 * (sync_update's DL_PERMITS_*). */
int dl_etcd_permits_update_async(dl_backend *b, const dl_sync_ref *s,
                                 dl_sync_op op, long long n, const char *id,
                                 long long *v, dl_done_fn done, void *ud,
                                 dl_async **out);
/* A cancel of either semaphore's operation (asem.c): an acquire's wait
 * ends now (not taken; a call in flight is answered first). */
void dl_etcd_sem_cancel(dl_async *op);

/* ---- aqueue.c ---- */
/* The event loop's queue_async (dl_etcd_aops): offers, sizes and a plain
 * handle's polls here, the others on a job. */
int dl_etcd_queue_async(dl_backend *b, const dl_sync_ref *s, dl_queue_req *q,
                        dl_done_fn done, void *ud, dl_async **out);
/* A cancel of a queue's operation: a poll's wait ends as at its deadline
 * (a call in flight is answered first; a value its take got goes back). */
void dl_etcd_queue_cancel(dl_async *op);
/* Whether op is a plain poll's take or give-back in flight: its answer
 * says where a value is, so the close waits for it. */
bool dl_etcd_queue_taking(const dl_async *op);
/* The client closing, every other operation ended: the takes and
 * give-backs in flight (dl_etcd_queue_taking) answered, each within its
 * deadline, on the calling thread; a value a take got goes back where it
 * was taken from (the head for a poll, the tail for a poll_last), as a
 * cancelled poll's does. The ops are then dl_etcd_queue_close's. */
void dl_etcd_queues_drain(dl_etcd *e);
/* The client closing, op's call aborted: a reliable take's consumer
 * lease not yet in the client's list (its grant in flight: its ID is
 * chosen; or granted; or one being revoked) is revoked now, blocking; a
 * cancelled poll's give-back in flight is sent again, blocking (compared
 * so that it puts the value once), and when that fails (or cannot be
 * sent) the value is the poll's: done(ud, 1), op ended, 1 returned. Else
 * 0: op is the caller's to end (DLOCK_ECLOSED). */
int dl_etcd_queue_close(dl_async *op);
/* Frees a queue operation's state (accepts NULL). */
void dl_etcd_aqueue_free(etcd_aqueue *a);

#endif /* DLOCK_ETCD_AOP_H */
