/* amutex.h: what the event loop's mutex acquire's two files share
 * (amutex.c: the entries, the claim, the lease and the failure path;
 * amwait.c: the put's answer and the wait in line). Private to them. */
#ifndef DLOCK_ETCD_AMUTEX_H
#define DLOCK_ETCD_AMUTEX_H

#include "aop.h"

typedef enum astep {
  S_START,
  S_REENTER,
  S_FIXED_KEEP,
  S_FIXED_GRANT,
  S_PUT,
  S_LOOK,
  S_WATCH,
  S_KEEP,  /* a waiter's fixed lease kept alive */
  S_PAUSE, /* a waiter's pause (a transient error ridden out) */
  S_CLAIM, /* waiting for another owner of this client (e->aclaims) */
  S_DELETE,
  S_UNORPHAN, /* our old key deleted at its revision, to put anew */
  S_REVOKE,
  S_STALE,       /* a stale hold's key deleted at its revision */
  S_STALE_REVOKE /* and its lease of its own revoked */
} astep;

struct etcd_aacq {
  dl_acquire *a;
  astep step;
  bool own;         /* a fixed lease (not the session's) */
  bool rw;          /* a side of a read-write lock: a key of its own */
  etcd_hold *h;     /* the claim, listed */
  etcd_hold *stale; /* a stale hold of the owner being cleared (holds.c) */
  int64_t rev;      /* the re-entry's hold's create revision */
  int64_t sent;     /* the lease call's */
  int64_t until;    /* the lease's validity */
  int rc;           /* the failure path's result */
  dl_async *cnext;  /* in e->aclaims, when parked */
  bool parked;      /* waiting for another owner of this client */
  bool downgrade;   /* the read side, its owner holding the write side */
  bool in_line;     /* our key is in line: a session step keeps it */
  bool won;         /* a keep step ends the acquire (it won) */
  bool watched;     /* a watch ended (the blocking path's `waited`) */
  bool cancelled;
  dl_ride rides;   /* transient errors ridden out */
  int fresh_tries; /* our old key found at the put, deleted */
  int clashes;     /* a read-write key found someone else's, put anew */
  char key[ETCD_KEY_MAX];
  char wait_pfx[ETCD_KEY_MAX + 8];
  char pred[ETCD_KEY_MAX];
  char why[400]; /* the failure's detail, kept through the cleanup's calls */
};

/* ---- amutex.c's ---- */
/* Starts op's next call k (step) within one command timeout, its answer
 * JSON, or with k->msg a message (pbtxn.h's: S_PUT, S_UNORPHAN and
 * S_DELETE's txns, S_FIXED_KEEP and S_KEEP's keepalives); out of memory,
 * op is told DLOCK_ENOMEM and freed. */
void dl_am_ask(dl_async *op, astep step, const etcd_ask *k);
/* dl_am_ask of path with body, or with msg (read, not kept). */
void dl_am_call(dl_async *op, astep step, const char *path, const char *body);
void dl_am_call_pb(dl_async *op, astep step, const char *path,
                   const ProtobufCMessage *msg);
/* Ends op with rc after its key (at its revision) and a fixed lease go. */
void dl_am_fail(dl_async *op, int rc);
/* The claim txn: our key put, the owner read. */
void dl_am_put_step(dl_async *op);
/* The claim txn again with the same key (a put whose answer was lost). */
void dl_am_put_again(dl_async *op);
/* The claim's lease: a fixed lease's, or the session's; then the put. */
void dl_am_lease_step(dl_async *op);
/* The session's lease for op (asession.c's step): the claim's, or a
 * waiter's kept alive. */
void dl_am_session_step(dl_async *op);

/* ---- amwait.c's ---- */
/* Whether the wait is over: none asked for, its deadline come, or the
 * operation cancelled. */
bool dl_am_wait_over(dl_async *op);
/* Runs the wait's timer at `at` (step: what op waits in). */
void dl_am_wait_until(dl_async *op, astep step, int64_t at);
/* A waiting acquire's step that failed with rc: ridden out (a pause, then
 * the step again: the lease, the put, a look) when transient and the
 * deadline leaves room, else the acquire fails. */
void dl_am_wait_error(dl_async *op, int rc);
/* A keep step's end: the acquire won, or the next look. */
void dl_am_keep_done(dl_async *op);
/* The server answered a call of the acquire: its ride (if any) is over,
 * the next outage counts afresh, and the acquires behind it are told no
 * error (etcd_hold.riding). */
void dl_am_answered(dl_async *op);
/* The look's and the claim txn's answers (rc the call's). */
void dl_am_on_look(dl_async *op, int rc, json_object *o);
void dl_am_on_put(dl_async *op, int rc, ProtobufCMessage *m);

#endif /* DLOCK_ETCD_AMUTEX_H */
