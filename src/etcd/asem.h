/* asem.h: what the event loop's semaphores share (asem.c: the counting
 * semaphore and the line of waiters both acquires wait in; apermits.c: the
 * permit-expirable semaphore's try and end). Private to them. */
#ifndef DLOCK_ETCD_ASEM_H
#define DLOCK_ETCD_ASEM_H

#include "aop.h"
#include "sem.h"

typedef enum mstep {
  M_START,   /* the first step, from the loop's dispatch */
  M_READ,    /* the count key's read */
  M_PUT,     /* the put compared on it */
  M_SESSION, /* the session lease's step (asession.c) */
  M_LINE,    /* our place in the line put */
  M_LOOK,    /* our place still there, and the one before it */
  M_WATCH,   /* the watch in flight, the timer at the step's end (or a
                moment after its stream ended) */
  M_LEAVE,   /* our place deleted, the result kept */
  M_UNPUT,   /* our place deleted by key (its put's answer lost) */
  M_TRY      /* a permit's try, or its undoing (apermits.c's calls) */
} mstep;

struct etcd_asem {
  char key[ETCD_SEM_KEY]; /* the count key */
  bool take;              /* an acquire, else an update (op) */
  dl_sync_op op;
  long long n, *v;
  long long result; /* the update's, once its put succeeds */
  int tries;        /* the update's puts beaten by another writer */
  mstep step;
  /* A waiting acquire's: */
  bool wait, cancelled;
  int64_t deadline;
  int64_t at;   /* the last read's revision: changes after it are heard */
  bool first;   /* the line's first: its read is the one the watch follows */
  int rc;       /* the result, while our place is deleted */
  etcd_hold ln; /* our place (ln.key: line), its lease and revision */
  bool unsure;  /* its put's answer lost: maybe there (deleted by key) */
  char line[ETCD_SEM_KEY];
  char lpfx[ETCD_SEM_KEY + 2]; /* the line: line's parent and '/' */
  char pred[ETCD_SEM_KEY];     /* the place before ours */
  /* A permit's acquire (apermits.c): */
  bool permit, ended; /* ended: dl_ap_end ran */
  const dl_sync_ref *s;
  int64_t *valid_until;
  int64_t mod; /* the total's mod revision read */
  etcd_permit_try pt;
  /* An update of the permits' (apermits.c, not take): */
  dl_sync_op pop;
  bool retried; /* its release's delete sent again */
};

/* ---- asem.c's ---- */
/* A new operation of either semaphore: NULL out of memory (recorded). */
dl_async *dl_as_new(dl_etcd *e, dl_done_fn done, void *ud);
/* Starts op (rc: an error known at once) from the loop's dispatch: its
 * first try. 0 (*out), or DLOCK_ENOMEM (op freed, untold). */
int dl_as_begin(dl_async *op, int rc, dl_async **out);
/* A try's end: rc 1 taken, 0 not now (op->sem->at: the revision it read,
 * after which every change is heard), or a negative code: the end, or the
 * wait in line for the next try. */
void dl_as_tried(dl_async *op, int rc);
/* The end, rc told (a permit's first through dl_ap_end), once op's place
 * in the line is gone. */
void dl_as_finish(dl_async *op, int rc);

/* ---- apermits.c's ---- */
/* A permit's try (its read, lease and put): ends in dl_as_tried. */
void dl_ap_try(dl_async *op);
/* A permit's acquire ending with rc: the permit held, or what was put
 * undone; then dl_as_finish. */
void dl_ap_end(dl_async *op, int rc);
/* The permits' update read (not take): available, or the release. */
void dl_ap_update_read(dl_async *op, int rc, long long max, long long taken);

#endif /* DLOCK_ETCD_ASEM_H */
