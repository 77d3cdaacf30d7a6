/* ride.c: what the etcd backend's waits do when a call fails: which
 * errors are transient (no answer: a member lost, a leader change, a slow
 * server), and a wait riding them out after a pause, as the Redis waits
 * ride out a failover. */
#include "etcdb.h"

#include <stdatomic.h>

bool dl_etcd_transient(int rc) {
  return rc == DLOCK_ECONNECT || rc == DLOCK_ECONNLOST || rc == DLOCK_ETIMEDOUT;
}

void dl_etcd_riding(etcd_hold *h, int rc) {
  atomic_store(&h->riding, dl_etcd_transient(rc) ? rc : 0);
}

void dl_etcd_answered(etcd_hold *h, dl_ride *rides) {
  if (rides->n == 0) return;
  dl_ride_answered(rides);
  atomic_store(&h->riding, 0);
}

/* A wait rides out what a member lost or a leader change makes requests
 * fail with (etcd answers "leader changed", a member goes away), as the
 * Redis waits ride out a failover: true after a pause (dl_ride_pause_ms:
 * 20 ms doubling to 200, the last one up to the deadline, and the last
 * try made there) when rc is transient and the deadline has not come,
 * false when the error stands (the client closing, the operation
 * cancelled, the time spent, or for a wait without a limit
 * DL_RIDE_TIMEOUTS command timeouts since the first failure after the
 * last answer: the caller calls dl_ride_answered at each). */
int64_t dl_etcd_ride_pause(dl_etcd *e, bool wait, int64_t deadline, int rc,
                           dl_ride *rides) {
  if (!dl_etcd_transient(rc) || !wait || atomic_load(e->env->closing) ||
      dl_offload_cancelled())
    return 0;
  return dl_ride_pause_ms(rides, deadline, e->command_timeout_ms);
}

bool dl_etcd_ride_out(dl_etcd *e, bool wait, int64_t deadline, int rc,
                      dl_ride *rides) {
  int64_t pause = dl_etcd_ride_pause(e, wait, deadline, rc, rides);
  if (pause == 0) return false;
  dl_etcd_pause(e, pause);
  return !atomic_load(e->env->closing) && !dl_offload_cancelled();
}
