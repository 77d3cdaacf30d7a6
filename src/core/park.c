/* park.c: sleeping on a word until another thread changes it. The waker
 * changes the word first, then wakes: a waiter never sleeps through a
 * change, and wakes without taking any lock that others queue for.
 *
 * Two ways, both built on Linux so the tests run both: a futex, and (the
 * portable one, used elsewhere) condition variables chosen by the word's
 * address. */
#include "core.h"

#include <errno.h>
#include <time.h>

enum { SLOTS = 64 };
static struct slot {
  pthread_mutex_t mu;
  pthread_cond_t cv;
} slots[SLOTS];
static pthread_once_t slots_once = PTHREAD_ONCE_INIT;

static void slots_init(void) {
  for (int i = 0; i < SLOTS; i++) {
    pthread_mutex_init(&slots[i].mu, NULL);
    dl_cond_init(&slots[i].cv);
  }
}

static struct slot *slot_of(atomic_int *word) {
  pthread_once(&slots_once, slots_init);
  return &slots[((uintptr_t)word >> 4) % SLOTS];
}

int dl_park_wait_cv(atomic_int *word, int expect, int64_t deadline_ms) {
  struct slot *s = slot_of(word);
  struct timespec ts;
  int rc = 0;
  dl_abstime(deadline_ms, &ts);
  pthread_mutex_lock(&s->mu);
  while (atomic_load_explicit(word, memory_order_acquire) == expect)
    if (pthread_cond_timedwait(&s->cv, &s->mu, &ts) != 0 &&
        atomic_load_explicit(word, memory_order_acquire) == expect) {
      rc = DLOCK_ETIMEDOUT;
      break;
    }
  pthread_mutex_unlock(&s->mu);
  return rc;
}

/* The waker's change of the word happens before it takes the slot's mutex,
 * and the waiter checks the word under that mutex: no lost wake-up. */
void dl_park_wake_cv(atomic_int *word) {
  struct slot *s = slot_of(word);
  pthread_mutex_lock(&s->mu);
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

int dl_park_wait_futex(atomic_int *word, int expect, int64_t deadline_ms) {
  while (atomic_load_explicit(word, memory_order_acquire) == expect) {
    struct timespec ts;
    if (dl_now_ms() >= deadline_ms) return DLOCK_ETIMEDOUT;
    dl_abstime(deadline_ms, &ts);
    /* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC time. It returns
     * at once if the word no longer holds `expect`. */
    syscall(SYS_futex, (int *)word, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG,
            expect, &ts, NULL, FUTEX_BITSET_MATCH_ANY);
  }
  return 0;
}

void dl_park_wake_futex(atomic_int *word) {
  syscall(SYS_futex, (int *)word, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, 1, NULL,
          NULL, 0);
}

int dl_park_wait(atomic_int *word, int expect, int64_t deadline_ms) {
  return dl_park_wait_futex(word, expect, deadline_ms);
}

void dl_park_wake(atomic_int *word) { dl_park_wake_futex(word); }

#else

int dl_park_wait(atomic_int *word, int expect, int64_t deadline_ms) {
  return dl_park_wait_cv(word, expect, deadline_ms);
}

void dl_park_wake(atomic_int *word) { dl_park_wake_cv(word); }

#endif
