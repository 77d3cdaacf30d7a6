/* run.c: dlock bench's uncontended and contended scenarios: P forked
 * processes of T worker threads on one client each, started together,
 * their results sent back over pipes and summed into the report beside the
 * baselines. */
#include "bench.h"
#include "redisson.h"
#include "../../core/core.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs T threads of `fn` on one client in this process (--async: one
 * event-loop thread instead, async.c). */
static int run_threads(const cli_global *g, const bench_opts *o,
                       void *(*fn)(void *), const char *lock_name,
                       int64_t start_us, int64_t end_us, bench_result *out) {
  if (o->async)
    return bench_async_process(g, o, lock_name, start_us, end_us, out);
  /* etcd: the session lease is the locks' (BENCH_LEASE_MS). */
  dlock_client *c = bench_client(g, o, o->etcd ? BENCH_LEASE_MS : 0);
  if (c == NULL) return -1;
  bench_worker *ws = calloc((size_t)o->threads, sizeof *ws);
  pthread_t *th = calloc((size_t)o->threads, sizeof *th);
  if (!ws || !th) {
    free(ws);
    free(th);
    dlock_client_close(c);
    return -1;
  }
  for (int i = 0; i < o->threads; i++) {
    ws[i] = (bench_worker){c, i, o, start_us, end_us, lock_name, {0}};
    pthread_create(&th[i], NULL, fn, &ws[i]);
  }
  for (int i = 0; i < o->threads; i++) {
    pthread_join(th[i], NULL);
    out->ops += ws[i].res.ops;
    out->hold_us += ws[i].res.hold_us;
    out->errors += ws[i].res.errors;
    bench_samples_merge(&out->lat, &ws[i].res.lat);
    bench_samples_merge(&out->ping, &ws[i].res.ping);
    free(ws[i].res.lat.v);
    free(ws[i].res.ping.v);
  }
  dlock_client_stats st;
  dlock_client_stats_get(c, &st);
  out->wakeups += st.wakeups;
  free(ws);
  free(th);
  dlock_client_close(c);
  return 0;
}

/* Reads the n samples a child wrote after its bench_result into `into`
 * (nothing if they do not all come). */
static void read_samples(FILE *f, size_t n, bench_samples *into) {
  bench_samples s = {calloc(n ? n : 1, sizeof(uint32_t)), 0, n};
  if (s.v && n && fread(s.v, sizeof *s.v, n, f) == n) {
    s.n = n;
    bench_samples_merge(into, &s);
  }
  free(s.v);
}

/* Runs P processes (fork) of T threads each; results come back over pipes. */
static int run_processes(const cli_global *g, const bench_opts *o,
                         void *(*fn)(void *), const char *lock_name,
                         int64_t start_us, int64_t end_us, bench_result *out,
                         uint64_t *max_proc_wakeups) {
  pid_t *kids = calloc((size_t)o->processes, sizeof *kids);
  int *fds = calloc((size_t)o->processes, sizeof *fds);
  int started = 0;
  for (; kids && fds && started < o->processes; started++) {
    int pfd[2];
    if (pipe(pfd) != 0) break;
    pid_t kid = fork();
    if (kid < 0) {
      close(pfd[0]);
      close(pfd[1]);
      break;
    }
    if (kid == 0) {
      close(pfd[0]);
      for (int q = 0; q < started; q++) close(fds[q]); /* the others' */
      free(kids);
      free(fds);
      bench_result r = {0};
      int rc = run_threads(g, o, fn, lock_name, start_us, end_us, &r);
      FILE *f = fdopen(pfd[1], "w");
      if (f) {
        fwrite(&r, sizeof r, 1, f);
        if (r.lat.n) fwrite(r.lat.v, sizeof *r.lat.v, r.lat.n, f);
        if (r.ping.n) fwrite(r.ping.v, sizeof *r.ping.v, r.ping.n, f);
        fclose(f);
      }
      free(r.lat.v);
      free(r.ping.v);
      _exit(rc == 0 && f ? 0 : 1);
    }
    close(pfd[1]);
    kids[started] = kid;
    fds[started] = pfd[0];
  }
  if (started < o->processes) { /* out of memory, pipes or processes */
    for (int p = 0; p < started; p++) {
      kill(kids[p], SIGKILL);
      close(fds[p]);
      waitpid(kids[p], NULL, 0);
    }
    free(kids);
    free(fds);
    return -1;
  }
  int bad = 0;
  for (int p = 0; p < o->processes; p++) {
    FILE *f = fdopen(fds[p], "r");
    bench_result r;
    if (fread(&r, sizeof r, 1, f) == 1) {
      read_samples(f, r.lat.n, &out->lat);
      read_samples(f, r.ping.n, &out->ping);
      out->ops += r.ops;
      out->hold_us += r.hold_us;
      out->errors += r.errors;
      out->wakeups += r.wakeups;
      if (r.wakeups > *max_proc_wakeups) *max_proc_wakeups = r.wakeups;
    } else {
      bad = 1;
    }
    fclose(f);
    int st;
    waitpid(kids[p], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) bad = 1;
  }
  free(kids);
  free(fds);
  return bad ? -1 : 0;
}

int bench_measure(const cli_global *g, const bench_opts *o,
                  struct redisContext *raw, bench_report *r,
                  bench_samples *keep) {
  memset(r, 0, sizeof *r);
  r->scenario = o->scenario;
  r->threads = o->async ? 1 : o->threads;
  r->processes = o->processes;
  r->async = o->async;
  r->inflight = o->async ? o->inflight : 0;
  r->kind = o->kind;
  r->starvation_ms = o->starvation_ms;
  r->zk = o->zk;
  r->etcd = o->etcd;
  r->masters = o->cluster ? 1 + o->nothers : 0;
  struct dl_etcd_probe *probe = NULL;
  if (o->zk) {
    r->rtt_p50 = bench_client_ping_p50_us(g, o, 2000);
    /* etcd: the server's limits beside the lock's cycle. */
    if (o->etcd && strcmp(o->scenario, "uncontended") == 0 &&
        (probe = bench_etcd_probe(g, o)) != NULL)
      bench_etcd_limits(probe, r);
  } else {
    r->rtt_p50 = bench_rtt_p50_us(o, raw, 2000);
    r->fanout_rtt_p50 = o->cluster ? 0 : bench_fanout_rtt_p50_us(o, raw, 2000);
    /* One operation at a time: a thread, or a loop with one in flight */
    if (strcmp(o->scenario, "uncontended") == 0 && o->processes == 1 &&
        (o->async ? o->inflight == 1 : o->threads == 1))
      r->series_p50 = bench_series_p50_us(o, raw, 500);
    double cpu0 = bench_server_cpu_us(raw);
    int64_t t0 = dl_now_ms();
    r->ceiling = bench_ceiling_ops(raw, 1000);
    double secs = (double)(dl_now_ms() - t0) / 1000.0;
    if (r->ceiling > 0)
      r->ceiling_cpu =
          (bench_server_cpu_us(raw) - cpu0) / (r->ceiling * secs);
    /* The event loop's limit at its own depth: its requests in flight a
     * batch, where the ceiling writes 512. */
    if (o->async && strcmp(o->scenario, "uncontended") == 0 && !o->cluster)
      r->ceiling_depth = bench_ceiling_depth_ops(raw, 1000, o->inflight);
    if (strcmp(o->scenario, "contended") == 0)
      r->handoff_p50 = bench_handoff_p50_us(o, raw, 1000);
    r->cluster_ceiling = bench_cluster_ceiling_ops(o, raw, 1000);
    if (!o->cluster)
      r->redisson_ceiling =
          bench_redisson_ceiling_ops(raw, 1000, &r->redisson_cpu);
  }
  char lock_name[64];
  if (o->zk)
    snprintf(lock_name, sizeof lock_name, "/dlock-bench/c-%d-%lld",
             (int)getpid(), (long long)dl_now_us());
  else
    snprintf(lock_name, sizeof lock_name, "bench:c:%d:%lld", (int)getpid(),
             (long long)dl_now_us());
  bench_result res = {0};
  uint64_t max_proc_wakeups = 0;
  bool contended = strcmp(o->scenario, "contended") == 0;
  bool sem = strcmp(o->kind, "semaphore") == 0,
       pm = strcmp(o->kind, "permits") == 0;
  if (contended && (sem || pm)) {
    /* Its permits, set before any worker starts. */
    int e = -1;
    dlock_client *c = bench_client(g, o, 0);
    dlock_semaphore *s = NULL;
    dlock_permits *p = NULL;
    if (c && sem && dlock_semaphore_new(c, lock_name, &s) == 0)
      e = dlock_semaphore_try_set_permits(s, o->permits);
    if (c && pm && dlock_permits_new(c, lock_name, &p) == 0)
      e = dlock_permits_try_set(p, o->permits);
    dlock_semaphore_free(s);
    dlock_permits_free(p);
    dlock_client_close(c);
    if (e != 1) {
      cli_err("cannot set the semaphore's permits");
      return -1;
    }
  }
  double cpu0 = raw     ? bench_servers_cpu_us(o, raw)
                : probe ? bench_etcd_cpu_us(probe)
                        : 0;
  int64_t start = dl_now_us() + 300000; /* everyone connected by then */
  int64_t end = start + o->secs_ms * 1000;
  int rc = run_processes(
      g, o, contended ? bench_contended_worker : bench_uncontended_worker,
      lock_name, start, end, &res, &max_proc_wakeups);
  double cpu1 = raw     ? bench_servers_cpu_us(o, raw)
                : probe ? bench_etcd_cpu_us(probe)
                        : 0;
  if (probe && (cpu0 < 0 || cpu1 < 0)) cpu0 = cpu1 = 0; /* unknown */
  bench_etcd_probe_close(probe);
  if (rc != 0) cli_err("a benchmark process failed");
  double secs = (double)o->secs_ms / 1000;
  bench_samples_sort(&res.lat);
  r->ops_per_sec = (double)res.ops / secs;
  r->p50 = bench_samples_pct(&res.lat, 0.5);
  r->p99 = bench_samples_pct(&res.lat, 0.99);
  r->max = bench_samples_pct(&res.lat, 1.0);
  r->cpu_per_op = res.ops ? (cpu1 - cpu0) / (double)res.ops : 0;
  r->errors = res.errors;
  if (res.ping.n > 0) { /* interleaved: the fairer baseline */
    bench_samples_sort(&res.ping);
    r->rtt_p50 = bench_samples_pct(&res.ping, 0.5);
    /* (server_cpu_us_per_op then includes those PINGs too) */
  }
  free(res.ping.v);
  if (contended) {
    r->utilisation = res.hold_us / (secs * 1e6);
    double hold = res.ops ? res.hold_us / (double)res.ops : 0;
    if (r->handoff_p50 > 0 && hold > 0)
      r->util_limit = hold / (hold + r->handoff_p50);
    r->wait_p50 = r->p50;
    r->wait_p99 = r->p99;
    r->wait_max = r->max;
    r->wakeups_per_acquire = res.ops ? (double)res.wakeups / res.ops : 0;
    r->max_wakeups_per_unlock_per_process =
        res.ops ? (double)max_proc_wakeups / res.ops : 0;
  }
  if (keep) *keep = res.lat;
  else free(res.lat.v);
  return rc;
}
