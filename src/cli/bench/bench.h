/* bench.h: what the files of dlock bench share, a section per file (the
 * command itself: bench.c). */
#ifndef DLOCK_CLI_BENCH_H
#define DLOCK_CLI_BENCH_H

#include "../cli.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct redisContext; /* hiredis: the baselines' plain connection */

/* The lease of the scenarios' locks (workers.c, async.c). On etcd it is
 * the client's session lease too (run.c, async.c), as etcdpeer's Go
 * session (WithTTL(10)): the holds ride on it, where a lease that differs
 * from the session's would be a lease of each hold's own (a keepalive or
 * a grant a cycle). */
#define BENCH_LEASE_MS 10000

/* The command line, as bench.c parsed it. */
typedef struct bench_opts {
  const char *scenario;
  int threads, processes, locks, periods, connections, starvation_ms;
  const char *kind; /* contended: "lock", "fair", "semaphore", "permits" */
  int permits;      /* contended semaphore or permits (default 1) */
  int64_t secs_ms, hold_ms, lease_ms;
  bool json;
  bool async;       /* --async: one event-loop thread per process */
  int inflight;     /* --async: operations in flight (per process) */
  int idle_waiters; /* --idle-waiters N: the idle-waiters scenario */
  int64_t warmup_ms; /* --warmup: idle waiters wait this long unmeasured */
  const char *plot;
  const char *url, *password; /* for the interleaved baseline */
  /* zk:// and etcd[s]://: no Redis baselines; the round trip is the
   * client's ping (an exists on "/"; etcd's status), lock names are znode
   * paths (etcd: keys alike). */
  bool zk;
  bool etcd; /* etcd[s]:// (zk is set too) */
  /* redlock://: the baselines' connections to the servers after the
   * first (which is `raw`): the round trip is the slowest server's, the
   * server CPU all of theirs. redis-cluster:// (cluster): the masters
   * other than raw's, for the same two. */
  bool cluster;
  struct redisContext *others[16];
  int nothers;
} bench_opts;

/* A client for the benchmark (watchdog lease `lease_ms`, 0 = default), or
 * NULL with the reason printed (bench.c); and its options. */
dlock_client *bench_client(const cli_global *g, const bench_opts *o,
                           int64_t lease_ms);
void bench_client_options(const cli_global *g, const bench_opts *o,
                          int64_t lease_ms, dlock_client_options *opt);

/* ---- samples.c: latencies in microseconds ---- */

typedef struct bench_samples {
  uint32_t *v;
  size_t n, cap;
} bench_samples;

/* Appends us (clamped to 0..UINT32_MAX); out of memory drops the sample
 * rather than fail the run. */
void bench_samples_push(bench_samples *s, int64_t us);
void bench_samples_merge(bench_samples *into, const bench_samples *from);
void bench_samples_sort(bench_samples *s);
/* The p-quantile (0..1) of sorted samples; 0 when there are none. */
double bench_samples_pct(const bench_samples *s, double p);

/* ---- baseline.c: the baselines, on a plain hiredis connection ---- */

/* The PING p50 of the slowest server (raw and o->others), n each. */
double bench_rtt_p50_us(const bench_opts *o, struct redisContext *raw, int n);
/* The servers of o's URL for the baselines, raw first, then o->others,
 * into all (DL_PROBE_SERVERS_MAX entries): how many. */
int bench_servers(const bench_opts *o, struct redisContext *raw,
                  struct redisContext **all);
/* Writes c's pending commands now rather than at its first read: false
 * on a write error. */
bool bench_write_now(struct redisContext *c);
/* redlock://: the p50 of one PING sent to every server at once, all the
 * answers read (the round trip of a fan-out on this machine; n rounds);
 * 0 for a single server. */
double bench_fanout_rtt_p50_us(const bench_opts *o, struct redisContext *raw,
                               int n);
/* series.c: the p50 of the lock's cycle as its own commands, one step at a
 * time, each sent to every server (raw and o->others) at once and timed
 * until a quorum answered (one server: its answer), for about ms; the
 * one-thread limit of the URL's algorithm on these cores. 0 on a cluster,
 * a redlock:// URL with layout=hash, or a failure. */
double bench_series_p50_us(const bench_opts *o, struct redisContext *raw,
                           int64_t ms);
/* handoff.c: the p50 of a hand-off's floor: a PUBLISH written on raw until
 * its message is read by a thread asleep on a subscription of another
 * connection (n rounds, one at a time); 0 on a cluster, a redlock:// URL
 * or a failure. */
double bench_handoff_p50_us(const bench_opts *o, struct redisContext *raw,
                            int n);
/* The servers' CPU time (raw and o->others), in us. */
double bench_servers_cpu_us(const bench_opts *o, struct redisContext *raw);
/* Connects o->others for a redlock:// URL (nothing for another URL): 0,
 * or -1 with the reason printed. bench_others_free closes them. */
int bench_others_connect(bench_opts *o);
void bench_others_free(bench_opts *o);

/* A blocking hiredis connection to url (password: instead of the URL's),
 * or NULL with the reason printed. The caller frees it with redisFree. */
/* On redis-cluster://, the master that serves `key`'s slot (NULL: the
 * ceiling's keys, "{bench:ceil}:N"). */
struct redisContext *bench_raw_connect(const char *url, const char *password,
                                       const char *key);
/* The server's CPU time so far (INFO cpu, user + sys), in microseconds. */
double bench_server_cpu_us(struct redisContext *c);
/* The round trip of one PING, in microseconds. */
int64_t bench_ping_us(struct redisContext *c);
/* The median of n PINGs, in microseconds. */
double bench_ping_p50_us(struct redisContext *c, int n);
/* The median of n dlock_client_ping on a client of its own (zk://: an
 * exists on "/"), in microseconds; 0 if no client could be made. */
double bench_client_ping_p50_us(const cli_global *g, const bench_opts *o,
                                int n);
/* The ceiling: lock cycles per second the server executes for `ms` when
 * they are pipelined on one connection; 0 on any error. */
double bench_ceiling_ops(struct redisContext *c, int64_t ms);
/* The ceiling with `depth` commands a batch (depth / 2 cycles, at least
 * one): what the server can execute when a client keeps `depth` requests
 * in flight, as an event loop does with --inflight depth. */
double bench_ceiling_depth_ops(struct redisContext *c, int64_t ms, int depth);
/* redis-cluster://: the ceiling of every master at once (raw and
 * o->others, a thread each, each on keys of its own slots), summed: what
 * the cluster's servers can execute together on this machine. 0 for
 * another URL, or when a master could not be measured. */
double bench_cluster_ceiling_ops(const bench_opts *o, struct redisContext *raw,
                                 int64_t ms);

/* ---- workers.c: one thread's lock cycles ---- */

/* What workers measured, summed over threads and then processes. It goes
 * over a pipe from each process as is, then its samples (run.c). */
typedef struct bench_result {
  long ops;           /* acquire+release cycles */
  double hold_us;     /* summed time held (contended) */
  uint64_t wakeups;   /* waiters woken by unlock messages */
  long errors;
  bench_samples lat;  /* cycle (uncontended) or wait (contended), in us */
  bench_samples ping; /* PINGs interleaved with the cycles (one thread) */
} bench_result;

typedef struct bench_worker {
  dlock_client *c;
  int index;
  const bench_opts *o;
  int64_t start_us, end_us; /* dl_now_us() time */
  const char *lock_name;    /* contended: the one lock */
  bench_result res;
} bench_worker;

/* Thread functions, given a bench_worker: cycles from start_us to end_us.
 * uncontended: each worker its own lock; contended: all on lock_name, of
 * o->kind, held o->hold_ms each time. */
void *bench_uncontended_worker(void *p);
void *bench_contended_worker(void *p);

/* ---- report.c: one run's figures and their output ---- */

typedef struct bench_report {
  const char *scenario;
  const char *kind;
  int starvation_ms; /* contended */
  int threads, processes;
  bool async;   /* one event-loop thread per process (--async) */
  int inflight; /* async: operations in flight per process; idle: waiters */
  double ops_per_sec, p50, p99, max;
  double rtt_p50, ceiling, cpu_per_op;
  double fanout_rtt_p50; /* redlock:// only, else 0 */
  double series_p50;     /* bench_series_p50_us: uncontended, 1 thread */
  double ceiling_depth;  /* --async uncontended: bench_ceiling_depth_ops */
  /* contended: bench_handoff_p50_us, and the utilisation it leaves: the
   * mean hold / (the mean hold + that floor) */
  double handoff_p50, util_limit;
  bool zk;               /* zk://: rtt_p50 is ZooKeeper's, no ceiling */
  bool etcd;             /* etcd[s]:// (zk too): rtt_p50 is etcd's */
  int masters;           /* redis-cluster://: how many; the ceiling is
                            one master's */
  double cluster_ceiling; /* redis-cluster://: every master's at once */
  /* The ceiling's server CPU per cycle, and Redisson's cycle pipelined the
   * same way on the same server (redisson.c; 0 on a cluster and zk://) */
  double ceiling_cpu, redisson_ceiling, redisson_cpu;
  /* etcd[s]:// uncontended: the server's limits (etcdbase.c; 0 unknown):
   * a bare write txn's round trip (us), the lock's two txns in series
   * (cycles/s), the same from ETCD_CEIL_THREADS threads at once, and the
   * server's CPU per cycle then (us) */
  double write_rtt_p50, series, etcd_ceiling, etcd_ceiling_cpu;
  long errors;
  /* contended */
  double utilisation, wait_p50, wait_p99, wait_max, wakeups_per_acquire;
  double max_wakeups_per_unlock_per_process;
  /* watchdog */
  long locks, lost;
  double renewal_rt_per_period, client_cpu_share, bytes_per_lock;
  /* idle-waiters (and client_cpu_share) */
  double server_cpu_share;
  /* queue: dlock's offers and takes per second, plain RPUSH and BLPOP in
   * the same run, the delayed values' delivery delay after their due time
   * (us) */
  double queue_offers, queue_takes, rpush_per_sec, blpop_per_sec;
  double delay_p50, delay_p99;
} bench_report;

/* Prints r on stdout: one JSON object on a line, or text. */
void bench_print_report(const bench_report *r, bool json);

/* ---- etcdbase.c: etcd[s]://'s baselines, over etcd/probe.h ---- */

/* The threads of the etcd ceiling (as -t 16's workers). */
#define ETCD_CEIL_THREADS 16
struct dl_etcd_probe;
/* A probe on o's URL (NULL with the reason printed). */
struct dl_etcd_probe *bench_etcd_probe(const cli_global *g,
                                       const bench_opts *o);
/* The server's limits into r (write_rtt_p50, series, etcd_ceiling,
 * etcd_ceiling_cpu): about 2.5 s. */
void bench_etcd_limits(struct dl_etcd_probe *p, bench_report *r);
/* The server's CPU time so far (us), or -1 unknown. */
double bench_etcd_cpu_us(struct dl_etcd_probe *p);
void bench_etcd_probe_close(struct dl_etcd_probe *p);

/* ---- the scenarios: each returns 0 or -1 and fills r ---- */

/* run.c: uncontended or contended, o->processes x o->threads workers, with
 * the baselines measured on raw. keep: if not NULL, gets the sorted
 * latencies (the caller frees keep->v). */
int bench_measure(const cli_global *g, const bench_opts *o,
                  struct redisContext *raw, bench_report *r,
                  bench_samples *keep);
/* watchdog.c: one client holding o->locks locks in watchdog mode. */
int bench_watchdog(const cli_global *g, const bench_opts *o,
                   struct redisContext *raw, bench_report *r);
/* async.c (--async): one process's share of bench_measure's uncontended
 * or contended run, on one event-loop thread with o->inflight operations
 * in flight, from start_us to end_us; adds to out. Returns 0 or -1. */
int bench_async_process(const cli_global *g, const bench_opts *o,
                        const char *lock_name, int64_t start_us, int64_t end_us,
                        bench_result *out);
/* async.c: o->idle_waiters handles waiting on held locks on one loop for
 * o->secs_ms: the process's and the server's CPU meanwhile. */
int bench_async_idle(const cli_global *g, const bench_opts *o,
                     struct redisContext *raw, bench_report *r);
/* queue.c: o->threads producers and consumers on one queue, beside plain
 * RPUSH/BLPOP, then delayed values' delivery delay. */
int bench_queue(const cli_global *g, const bench_opts *o,
                struct redisContext *raw, bench_report *r);
/* plot.c: bench_measure for 1, 2, 4 ... o.threads threads, each report
 * printed, then the SVG drawn by gnuplot at path. */
int bench_plot(const cli_global *g, bench_opts o, struct redisContext *raw,
               const char *path);

#endif
