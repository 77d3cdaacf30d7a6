/* acquire_entries.c: the Redis lock family's acquire entries of the
 * backend table: the acquire's machine (acquire.h) run by the blocking
 * driver and by the event-loop driver, each followed by replica
 * acknowledgement (a hold the replicas did not get in time given back). */
#include "acquire.h"

#include <stdlib.h>

int dl_redis_lock_acquire(dl_backend *b, dl_acquire *a) {
  dl_redis *R = (dl_redis *)b;
  int rc = dl_redis_driver_check(R, false);
  if (rc != 0) return rc;
  acq_op o;
  dl_acq_init(&o, R, a);
  rc = dl_acq_start(&o);
  if (rc != 1 || R->min_replicas == 0) return rc;
  /* Replica acknowledgement: a hold the replicas did not get in time could
   * vanish in a failover, so it is given back (one count: a re-entry keeps
   * the holds before it) and reported apart from "locked". */
  int ack = dl_redis_replicate(R, &a->lock->key, 1, "acquire",
                               " (the lock was given back)");
  if (ack == 0) return rc;
  dl_rlock_release_now(R, a->lock, a->lease_ms, 1);
  return ack;
}

/* ---- the event-loop driver ---- */
typedef struct acq_async {
  dl_shell sh;
  acq_op o;
  /* Replica acknowledgement (as the blocking acquire's): WAIT once taken,
   * and on a shortfall the hold given back, then DLOCK_ENOTACKED. */
  enum { AA_ACQUIRE, AA_WAIT, AA_GIVE_BACK } phase;
  dl_pend wait;
  int rc;
} acq_async;

/* After the acquire's result rc. */
static int acq_acked(acq_async *x, int rc) {
  dl_redis *R = x->o.R;
  for (;;) {
    switch (x->phase) {
    case AA_ACQUIRE:
      if (rc != 1 || R->min_replicas == 0) return rc;
      x->rc = rc;
      x->phase = AA_WAIT;
      if (dl_redis_replicate_start(R, &x->o.a->lock->key, 1, &x->wait) == DL_PENDING)
        return DL_PENDING;
      continue;
    case AA_WAIT:
      rc = dl_redis_replicate_result(R, &x->wait, "acquire",
                                     " (the lock was given back)");
      if (rc == 0) return x->rc;
      x->rc = rc;
      x->phase = AA_GIVE_BACK;
      if (dl_rlock_rel_start(&x->o.rel, R, x->o.a->lock, x->o.a->lease_ms, 1,
                             0) == DL_PENDING)
        return DL_PENDING;
      continue;
    case AA_GIVE_BACK: {
      int r = dl_rlock_rel_step(&x->o.rel);
      if (r == DL_PENDING) return DL_PENDING;
      return x->rc; /* the shortfall's code and detail */
    }
    }
  }
}

static int acq_async_step(dl_shell *sh) {
  acq_async *x = (acq_async *)sh;
  if (x->phase != AA_ACQUIRE) return acq_acked(x, 0);
  int rc = dl_acq_step(&x->o);
  return rc == DL_PENDING ? rc : acq_acked(x, rc);
}

int dl_redis_lock_acquire_async(dl_backend *b, dl_acquire *a, dl_done_fn done,
                                void *ud, dl_async **op) {
  dl_redis *R = (dl_redis *)b;
  *op = NULL;
  int rc = dl_redis_driver_check(R, true);
  if (rc != 0) return rc;
  acq_async *x = malloc(sizeof *x);
  if (x == NULL)
    return dl_seterr(R->env.err_owner, DLOCK_ENOMEM, "out of memory");
  dl_acq_init(&x->o, R, a);
  x->phase = AA_ACQUIRE;
  dl_shell_init(&x->sh, R, done, ud, acq_async_step, &x->o.p);
  dl_shell_bind(&x->sh, &x->o.rel.p);
  dl_shell_bind(&x->sh, &x->wait);
  x->sh.deadline = &a->deadline;
  int rc0 = dl_acq_start(&x->o);
  return dl_shell_start(&x->sh, rc0 == DL_PENDING ? rc0 : acq_acked(x, rc0),
                        op);
}
