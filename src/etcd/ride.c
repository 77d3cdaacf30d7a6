/* ride.c: what the etcd backend's waits do when a call fails: which
 * errors are transient (no answer: a member lost, a leader change, a slow
 * server), and a wait riding them out after a pause, as the Redis waits
 * ride out a failover. */
#include "etcdb.h"

#include <stdatomic.h>

bool dl_etcd_transient(int rc) {
  return rc == DLOCK_ECONNECT || rc == DLOCK_ECONNLOST || rc == DLOCK_ETIMEDOUT;
}

/* A wait rides out what a member lost or a leader change makes requests
 * fail with (etcd answers "leader changed", a member goes away), as the
 * Redis waits ride out a failover: true after a pause (20 ms, doubling up
 * to 200 ms) when rc is transient and the wait's deadline leaves room,
 * false when the error stands (the client closing, the operation
 * cancelled, the time spent). */
int64_t dl_etcd_ride_pause(dl_etcd *e, bool wait, int64_t deadline, int rc,
                           int *rides) {
  if (!dl_etcd_transient(rc) || !wait || atomic_load(e->env->closing) ||
      dl_offload_cancelled())
    return 0;
  int64_t pause = (int64_t)20 << (*rides < 4 ? *rides : 4);
  if (pause > 200) pause = 200;
  if (dl_now_ms() + pause >= deadline) return 0;
  (*rides)++;
  return pause;
}

bool dl_etcd_ride_out(dl_etcd *e, bool wait, int64_t deadline, int rc,
                      int *rides) {
  int64_t pause = dl_etcd_ride_pause(e, wait, deadline, rc, rides);
  if (pause == 0) return false;
  dl_etcd_pause(e, pause);
  return !atomic_load(e->env->closing) && !dl_offload_cancelled();
}
