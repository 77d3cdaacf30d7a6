/* support.c: the table of what each backend supports (support.h). A new
 * backend adds its row here, and docs/API.md's matrix a column. */
#include "support.h"

#include <string.h>

#define F(x) (1u << DL_FEAT_##x)

static const struct {
  const char *backend; /* its dl_backend_ops.name */
  unsigned features;
} table[] = {
    /* redis://, rediss://, unix://, Sentinel and Cluster: one backend. */
    {"redis", F(LOCK) | F(FAIR) | F(READ) | F(WRITE) | F(PLAIN) | F(SEMAPHORE) |
                  F(PERMITS) | F(LATCH) | F(QUEUE) | F(ELECTION) |
                  F(WAIT_NOTIFY) | F(LOOP) | F(REPLICA_ACK) | F(LEASE) |
                  F(FENCE)},
    /* The lock merged over a quorum of independent servers (its waiters
     * retry; election takes turns on the lock). */
    {"redlock",
     F(LOCK) | F(PLAIN) | F(ELECTION) | F(LOOP) | F(REPLICA_ACK) | F(LEASE)},
    /* Curator's recipes: the mutex (also the fair lock: its waiters queue
     * in order), the read-write lock, InterProcessSemaphoreV2 and
     * LeaderLatch; holds last as long as the session. */
    {"zookeeper", F(LOCK) | F(FAIR) | F(READ) | F(WRITE) | F(PERMITS) |
                      F(ELECTION) | F(WAIT_NOTIFY) | F(LOOP) | F(FENCE)},
    /* etcd's own layouts (Go's concurrency.Mutex and Election): waiters
     * watch their predecessor (so the mutex is also the fair lock); a hold
     * lives by its session's lease. */
    {"etcd", F(LOCK) | F(FAIR) | F(READ) | F(WRITE) | F(ELECTION) |
                 F(SEMAPHORE) | F(PERMITS) | F(LATCH) | F(QUEUE) |
                 F(WAIT_NOTIFY) | F(LOOP) | F(LEASE) | F(FENCE)},
};

static const char *const names[DL_FEAT_COUNT][2] = {
    [DL_FEAT_LOCK] = {"lock", "lock"},
    [DL_FEAT_FAIR] = {"fair", "fair"},
    [DL_FEAT_READ] = {"read", "read"},
    [DL_FEAT_WRITE] = {"write", "write"},
    [DL_FEAT_PLAIN] = {"plain", "plain"},
    [DL_FEAT_SEMAPHORE] = {"semaphore", "semaphore"},
    [DL_FEAT_PERMITS] = {"permits", "permit"},
    [DL_FEAT_LATCH] = {"latch", "latch"},
    [DL_FEAT_QUEUE] = {"queue", "queue"},
    [DL_FEAT_ELECTION] = {"election", "election"},
    [DL_FEAT_WAIT_NOTIFY] = {"wait-notify", "wait"},
    [DL_FEAT_LOOP] = {"event-loop", "event-loop"},
    [DL_FEAT_REPLICA_ACK] = {"replica-ack", "replica"},
    [DL_FEAT_LEASE] = {"lease", "lease"},
    [DL_FEAT_FENCE] = {"fence", "fenc"},
};

const char *dl_feature_name(dl_feature f) {
  return (unsigned)f < DL_FEAT_COUNT ? names[f][0] : NULL;
}

const char *dl_feature_word(dl_feature f) {
  return (unsigned)f < DL_FEAT_COUNT ? names[f][1] : NULL;
}

bool dl_backend_supports(const char *backend, dl_feature f) {
  if (backend == NULL || (unsigned)f >= DL_FEAT_COUNT) return false;
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (strcmp(table[i].backend, backend) == 0)
      return (table[i].features & (1u << f)) != 0;
  return false;
}

const char *dl_backend_name(int i) {
  return i >= 0 && (size_t)i < sizeof table / sizeof table[0] ? table[i].backend
                                                              : NULL;
}
