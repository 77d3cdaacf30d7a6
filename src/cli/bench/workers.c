/* workers.c: what one thread of dlock bench does: lock cycles until the
 * run's end, alone on its own lock (uncontended) or with all the others on
 * one lock, semaphore or permit semaphore (contended). */
#include "bench.h"
#include "../../core/core.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void sleep_until_us(int64_t t) {
  int64_t d = t - dl_now_us();
  if (d <= 0) return;
  struct timespec ts = {d / 1000000, (d % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

void *bench_uncontended_worker(void *p) {
  bench_worker *w = p;
  /* Alone, the worker measures the baseline itself, a PING after each
   * cycle on a plain connection: same moment, same conditions (this
   * machine's round trip drifts by a factor of three within minutes). */
  /* (Not on redlock:// nor zk://: there the round trips are measured
   * before the run, so that the cycles/s compared with a peer's pay for
   * nothing else.) */
  redisContext *raw = NULL;
  if (w->o->threads == 1 && w->o->processes == 1 && w->o->nothers == 0 &&
      !w->o->zk)
    raw = bench_raw_connect(w->o->url, w->o->password, NULL);
  char name[64];
  if (w->o->zk)
    snprintf(name, sizeof name, "/dlock-bench/u-%d/%d", (int)getpid(),
             w->index);
  else
    snprintf(name, sizeof name, "bench:u:%d:%d", (int)getpid(), w->index);
  dlock_lock *l;
  if (dlock_lock_new(w->c, name, NULL, &l) != 0) {
    w->res.errors++;
    return NULL;
  }
  sleep_until_us(w->start_us);
  while (dl_now_us() < w->end_us) {
    int64_t t0 = dl_now_us();
    int rc = dlock_lock_try_acquire(l, 0, BENCH_LEASE_MS, NULL);
    if (rc == 0 && (rc = dlock_lock_release(l)) == 1) rc = 0;
    if (rc != 0) {
      if (w->res.errors++ == 0)
        fprintf(stderr, "dlock bench: %s (%s)\n", dlock_err_name(rc),
                dlock_client_errmsg(w->c));
      continue;
    }
    bench_samples_push(&w->res.lat, dl_now_us() - t0);
    w->res.ops++;
    if (raw) bench_samples_push(&w->res.ping, bench_ping_us(raw));
  }
  if (raw) redisFree(raw);
  dlock_lock_free(l);
  return NULL;
}

void *bench_contended_worker(void *p) {
  bench_worker *w = p;
  dlock_lock *l = NULL;
  dlock_semaphore *sem = NULL;
  dlock_permits *pm = NULL;
  char id[DLOCK_PERMIT_ID_LEN];
  bool is_sem = strcmp(w->o->kind, "semaphore") == 0,
       is_pm = strcmp(w->o->kind, "permits") == 0;
  int e = is_sem  ? dlock_semaphore_new(w->c, w->lock_name, &sem)
          : is_pm ? dlock_permits_new(w->c, w->lock_name, &pm)
          : strcmp(w->o->kind, "fair") == 0
              ? dlock_fairlock_new(w->c, w->lock_name, NULL, 0, &l)
              : dlock_lock_new(w->c, w->lock_name, NULL, &l);
  if (e != 0) {
    w->res.errors++;
    return NULL;
  }
  sleep_until_us(w->start_us);
  for (;;) {
    int64_t t0 = dl_now_us();
    if (t0 >= w->end_us) break;
    int64_t wait = (w->end_us - t0) / 1000 + 1;
    int rc = is_sem  ? dlock_semaphore_try_acquire(sem, 1, wait)
             : is_pm ? dlock_permits_try_acquire(pm, wait, BENCH_LEASE_MS, id)
                     : dlock_lock_try_acquire(l, wait, BENCH_LEASE_MS, NULL);
    int64_t t1 = dl_now_us();
    if (rc == DLOCK_EBUSY) break; /* the run ended while waiting */
    if (rc != 0) {
      w->res.errors++;
      continue;
    }
    bench_samples_push(&w->res.lat, t1 - t0);
    dl_sleep_ms(w->o->hold_ms);
    int64_t t2 = dl_now_us();
    if (is_sem  ? dlock_semaphore_release(sem, 1) != 0
        : is_pm ? dlock_permits_release(pm, id) != 0
                : dlock_lock_release(l) != 1)
      w->res.errors++;
    w->res.hold_us += (double)(t2 - t1);
    w->res.ops++;
  }
  dlock_lock_free(l);
  dlock_semaphore_free(sem);
  dlock_permits_free(pm);
  return NULL;
}
