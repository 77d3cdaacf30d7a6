/* support.h: what each backend supports, declared once, in one table
 * (support.c), for the API's DLOCK_ENOTSUP answers, docs/API.md's support
 * matrix (tests/conformance/support_doc.c checks one against the other)
 * and the conformance suite, which runs what a backend supports and checks
 * that the rest answers DLOCK_ENOTSUP naming the backend and the kind. */
#ifndef DLOCK_SUPPORT_H
#define DLOCK_SUPPORT_H

#include <stdbool.h>

/* The kinds and the ways of waiting a backend may offer. Append only. */
typedef enum dl_feature {
  DL_FEAT_LOCK,        /* the reentrant mutex (dlock_lock_new) */
  DL_FEAT_FAIR,        /* the fair lock */
  DL_FEAT_READ,        /* the read-write lock's read side */
  DL_FEAT_WRITE,       /* ... and its write side */
  DL_FEAT_PLAIN,       /* the plain string lock */
  DL_FEAT_SEMAPHORE,   /* Redisson's counting semaphore */
  DL_FEAT_PERMITS,     /* the permit-expirable semaphore */
  DL_FEAT_LATCH,       /* the count-down latch */
  DL_FEAT_QUEUE,       /* the queue, the deque and the delayed queue */
  DL_FEAT_ELECTION,    /* leader election */
  DL_FEAT_WAIT_NOTIFY, /* waiters are woken by the server (pub/sub,
                          watches), not by polling */
  DL_FEAT_LOOP,        /* the event-loop client (dlock_client_open_async)
                          and the *_async forms of the kinds it has */
  DL_FEAT_REPLICA_ACK, /* min_replicas_acked */
  DL_FEAT_LEASE,       /* a hold ends with its lease on the server (else
                          with its holder's session) */
  DL_FEAT_FENCE,       /* fenced resources (dlock_fence_*) */
  DL_FEAT_COUNT
} dl_feature;

/* The feature's name as docs/API.md's matrix and the suite write it
 * ("lock", "fair", ..., "lease"); NULL out of range. */
const char *dl_feature_name(dl_feature f);
/* The word a DLOCK_ENOTSUP detail for f must contain ("fair", "read",
 * "semaphore", "permit", ...); NULL out of range. */
const char *dl_feature_word(dl_feature f);
/* Whether the backend named `backend` (a dl_backend_ops.name: "redis",
 * "redlock", "zookeeper") has f. False for an unknown backend. */
bool dl_backend_supports(const char *backend, dl_feature f);
/* The i-th backend of the table (0..), or NULL past its end. */
const char *dl_backend_name(int i);

#endif /* DLOCK_SUPPORT_H */
