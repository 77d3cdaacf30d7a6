/* watchdog.c: dlock bench's watchdog scenario: one client holds K locks in
 * watchdog mode for several leases; what their renewal costs the client
 * (CPU, memory per lock, round trips per period) and the server. */
#include "bench.h"
#include "../../core/core.h"

#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static void on_lost_count(dlock_lock *l, const char *owner, void *ud) {
  (void)l;
  (void)owner;
  __atomic_add_fetch((long *)ud, 1, __ATOMIC_RELAXED);
}

typedef struct wd_acq {
  dlock_lock **locks;
  int from, to;
  long errors;
} wd_acq;

static void *wd_acquire(void *p) {
  wd_acq *a = p;
  for (int i = a->from; i < a->to; i++)
    if (dlock_lock_try_acquire(a->locks[i], 0, 0, NULL) != 0) a->errors++;
  return NULL;
}

static double cpu_secs(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

int bench_watchdog(const cli_global *g, const bench_opts *o,
                   struct redisContext *raw, bench_report *r) {
  memset(r, 0, sizeof *r);
  r->scenario = "watchdog";
  r->threads = 1;
  r->processes = 1;
  r->rtt_p50 = bench_rtt_p50_us(o, raw, 2000);
  r->ceiling = bench_ceiling_ops(raw, 1000);
  int k = o->locks;
  r->locks = k;
  dlock_client *c = bench_client(g, o, o->lease_ms);
  if (c == NULL) return -1;
  long lost = 0;
  dlock_lock **locks = calloc((size_t)k, sizeof *locks);
  if (locks == NULL) return -1;
  struct mallinfo2 m0 = mallinfo2();
  char name[64];
  for (int i = 0; i < k; i++) {
    /* 16-byte names whatever the pid and the count: the memory per lock
     * depends on the name's length (docs/PERFORMANCE.md). */
    snprintf(name, sizeof name, "wd:%06x:%06d", (unsigned)getpid() & 0xffffff,
             i % 1000000);
    if (dlock_lock_new(c, name, "w", &locks[i]) != 0) return -1;
    dlock_lock_on_lost(locks[i], on_lost_count, &lost);
  }
  /* Acquire from several threads: requests pipeline over the connection. */
  enum { NT = 16 };
  pthread_t th[NT];
  wd_acq a[NT];
  for (int t = 0; t < NT; t++) {
    a[t] = (wd_acq){locks, k * t / NT, k * (t + 1) / NT, 0};
    pthread_create(&th[t], NULL, wd_acquire, &a[t]);
  }
  for (int t = 0; t < NT; t++) {
    pthread_join(th[t], NULL);
    r->errors += a[t].errors;
  }
  struct mallinfo2 m1 = mallinfo2();
  r->bytes_per_lock = (double)(m1.uordblks - m0.uordblks) / k;
  dlock_client_stats s0, s1;
  dlock_client_stats_get(c, &s0);
  double cpu0 = cpu_secs(), scpu0 = bench_servers_cpu_us(o, raw);
  int64_t t0 = dl_now_ms();
  int64_t end = t0 + o->lease_ms * o->periods;
  while (dl_now_ms() < end) dl_sleep_ms(50);
  double wall = (double)(dl_now_ms() - t0) / 1000;
  double cpu = cpu_secs() - cpu0, scpu = bench_servers_cpu_us(o, raw) - scpu0;
  dlock_client_stats_get(c, &s1);
  /* Every lock still held? */
  long missing = 0;
  for (int i = 0; i < k; i++)
    if (dlock_lock_is_lost(locks[i])) missing++;
  r->lost = lost > missing ? lost : missing;
  r->client_cpu_share = cpu / wall;
  long renewed = (long)(s1.renewals - s0.renewals);
  /* Round trips per renewal of all k locks, from the counters rather than
   * the wall time: a round cut by the window's end would read short. */
  r->renewal_rt_per_period =
      renewed > 0
          ? (double)(s1.renewal_calls - s0.renewal_calls) * k / (double)renewed
          : 0;
  r->ops_per_sec = renewed / wall;
  r->cpu_per_op = renewed ? scpu / (double)renewed : 0;
  for (int i = 0; i < k; i++) {
    dlock_lock_release(locks[i]);
    dlock_lock_free(locks[i]);
  }
  free(locks);
  dlock_client_close(c);
  return 0;
}
