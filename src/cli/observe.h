/* observe.h: one snapshot of every lock, semaphore, latch and queue on a
 * URL, for dlock top and dlock metrics (observe.c), taken through the
 * library's public inspection calls only. */
#ifndef DLOCK_CLI_OBSERVE_H
#define DLOCK_CLI_OBSERVE_H

#include "cli.h"

#include <stddef.h>
#include <stdint.h>

/* What an object is. The scan finds the lock kinds (and, on Redis, the
 * numbers at names: a semaphore's permits and a latch's count look the
 * same there, so a scanned number shows as a semaphore); a latch or a
 * queue is shown when named (--latch, --queue). An election is the lock
 * its participants take in turns, or its node on zk://: scanned, a lock;
 * named (--election), an election. */
typedef enum obs_kind {
  OBS_LOCK,      /* lock, fair lock, plain string lock, election */
  OBS_RWLOCK,    /* read-write lock */
  OBS_SEMAPHORE, /* permits available at the name (and taken, with leases) */
  OBS_LATCH,     /* a count-down latch's count */
  OBS_ELECTION,  /* named: the lock or node its participants take */
  OBS_QUEUE      /* a queue's values ready */
} obs_kind;

/* Whether objects of kind k have holders, waiters and tokens. */
#define OBS_LOCKISH(k) ((k) <= OBS_RWLOCK || (k) == OBS_ELECTION)

/* The kind's name as shown and as the `kind` label. */
const char *obs_kind_name(obs_kind k);

typedef struct obs_obj {
  char *name;
  obs_kind kind;
  dlock_lock_state st; /* the lock kinds, semaphores and latches */
  int64_t depth;       /* a queue's values ready, -1 unknown */
  bool unsupported;    /* named, of a kind the backend does not have */
} obs_obj;

/* The objects asked for by name, beside the scan's. */
typedef struct obs_named {
  const char *name;
  obs_kind kind;
} obs_named;

typedef struct obs_snap {
  obs_obj *v;
  size_t n, cap;
  int err; /* 0, or the library's error (message in errmsg) */
  char errmsg[256];
  int64_t took_ms; /* how long the snapshot took */
} obs_snap;

/* Takes a snapshot into *s (emptied first): every name the scan finds
 * matching `pattern` (NULL: all) that holds a lock or a number, then each
 * of `named` (n of them). Returns 0, or a negative code with s->errmsg set
 * (the objects read so far are kept). */
int obs_collect(dlock_client *c, const char *pattern, const obs_named *named,
                size_t n, obs_snap *s);
/* Frees what *s holds (not s). */
void obs_snap_clear(obs_snap *s);

/* The backend of a URL as a label: "redis" (redis://, rediss://, unix://),
 * "sentinel", "cluster", "redlock", "zk" or "etcd". */
const char *obs_backend(const char *url);

/* getopt_long entries for --latch, --queue, --semaphore and --election
 * NAME (each may repeat), and their handler: returns 1 if `opt` was one of
 * them (added to the list *v of *n), 0 if not, -1 out of memory (said). */
/* clang-format off */
#define OBS_NAMED_LONGOPTS                                                     \
  {"latch", required_argument, 0, 1101},                                       \
  {"queue", required_argument, 0, 1102},                                       \
  {"semaphore", required_argument, 0, 1103},                                   \
  {"election", required_argument, 0, 1104}
/* clang-format on */
int obs_named_opt(int opt, const char *arg, obs_named **v, size_t *n);

/* Durations as dlock status shows them ("4.2s", "35s", "12m05s", "3h02m"),
 * into buf. */
const char *obs_duration(int64_t ms, char *buf, size_t len);

#endif
