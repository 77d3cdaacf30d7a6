/* deprecated.c: the names of 0.2 that 0.3 renamed (dlock.h, "Names of 0.2,
 * deprecated in 0.3"), each its replacement under the old name, so that a
 * program built against 0.2's header still links and runs. Removed in 0.4. */
#include "dlock.h"
#include "dlock_async.h"

int dlock_semaphore_available(dlock_semaphore *s) {
  return dlock_semaphore_get_available(s);
}

int dlock_permits_available(dlock_permits *p) {
  return dlock_permits_get_available(p);
}

int dlock_permits_try_set_permits(dlock_permits *p, int permits) {
  return dlock_permits_try_set(p, permits);
}

int dlock_permits_add_permits(dlock_permits *p, int permits) {
  return dlock_permits_add(p, permits);
}

int dlock_latch_count(dlock_latch *l, int64_t *count) {
  return dlock_latch_get_count(l, count);
}

int dlock_leader_get_leader(dlock_leader *l, char *buf, size_t len) {
  return dlock_leader_get_current(l, buf, len);
}

int dlock_leader_await(dlock_leader *l, int64_t wait_ms) {
  return dlock_leader_try_await(l, wait_ms);
}

int dlock_semaphore_available_async(dlock_semaphore *s, dlock_done_cb cb,
                                    void *ud, dlock_op **op) {
  return dlock_semaphore_get_available_async(s, cb, ud, op);
}

int dlock_permits_try_set_permits_async(dlock_permits *p, int permits,
                                        dlock_done_cb cb, void *ud,
                                        dlock_op **op) {
  return dlock_permits_try_set_async(p, permits, cb, ud, op);
}

int dlock_permits_add_permits_async(dlock_permits *p, int permits,
                                    dlock_done_cb cb, void *ud, dlock_op **op) {
  return dlock_permits_add_async(p, permits, cb, ud, op);
}

int dlock_permits_available_async(dlock_permits *p, dlock_done_cb cb, void *ud,
                                  dlock_op **op) {
  return dlock_permits_get_available_async(p, cb, ud, op);
}

int dlock_latch_count_async(dlock_latch *l, dlock_done_cb cb, void *ud,
                            dlock_op **op) {
  return dlock_latch_get_count_async(l, cb, ud, op);
}
