/* report.c: dlock bench's output: a run's figures as one JSON object on a
 * line (--json) or as text. */
#include "bench.h"

#include <stdio.h>
#include <string.h>

void bench_print_report(const bench_report *r, bool json) {
  if (json) {
    printf("{\"scenario\":\"%s\",\"threads\":%d,\"processes\":%d,"
           "\"ops_per_sec\":%.0f,\"p50_us\":%.1f,\"p99_us\":%.1f,"
           "\"max_us\":%.1f,\"baseline_rtt_p50_us\":%.1f,"
           "\"ceiling_ops_per_sec\":%.0f,\"server_cpu_us_per_op\":%.2f,"
           "\"errors\":%ld",
           r->scenario, r->threads, r->processes, r->ops_per_sec, r->p50,
           r->p99, r->max, r->rtt_p50, r->ceiling, r->cpu_per_op, r->errors);
    if (r->fanout_rtt_p50 > 0)
      printf(",\"baseline_fanout_rtt_p50_us\":%.1f", r->fanout_rtt_p50);
    if (r->series_p50 > 0)
      printf(",\"series_p50_us\":%.1f,\"p50_over_series\":%.3f", r->series_p50,
             r->p50 / r->series_p50);
    if (r->ceiling_depth > 0)
      printf(",\"ceiling_at_inflight_ops_per_sec\":%.0f,"
             "\"ops_over_ceiling_at_inflight\":%.3f",
             r->ceiling_depth, r->ops_per_sec / r->ceiling_depth);
    if (r->ceiling_cpu > 0)
      printf(",\"ceiling_server_cpu_us_per_cycle\":%.2f", r->ceiling_cpu);
    if (r->redisson_ceiling > 0)
      printf(",\"redisson_ceiling_ops_per_sec\":%.0f,"
             "\"redisson_server_cpu_us_per_cycle\":%.2f,"
             "\"ceiling_over_redisson\":%.3f",
             r->redisson_ceiling, r->redisson_cpu,
             r->ceiling / r->redisson_ceiling);
    if (r->etcd && r->series > 0)
      printf(",\"write_rtt_p50_us\":%.1f,\"series_cycles_per_sec\":%.0f,"
             "\"ceiling_cycles_per_sec\":%.0f,\"ceiling_threads\":%d,"
             "\"server_cpu_us_per_cycle\":%.2f,"
             "\"p50_over_2_write_rtt\":%.3f,\"ops_over_series\":%.3f,"
             "\"ops_over_ceiling\":%.3f",
             r->write_rtt_p50, r->series, r->etcd_ceiling, ETCD_CEIL_THREADS,
             r->etcd_ceiling_cpu,
             r->write_rtt_p50 > 0 ? r->p50 / (2 * r->write_rtt_p50) : 0,
             r->ops_per_sec / r->series,
             r->etcd_ceiling > 0 ? r->ops_per_sec / r->etcd_ceiling : 0);
    if (r->async) printf(",\"async\":true,\"inflight\":%d", r->inflight);
    if (r->zk) printf(",\"backend\":\"%s\"", r->etcd ? "etcd" : "zookeeper");
    if (r->masters > 0)
      printf(",\"masters\":%d,\"cluster_ceiling_ops_per_sec\":%.0f",
             r->masters, r->cluster_ceiling);
    if (strcmp(r->scenario, "idle-waiters") == 0)
      printf(",\"waiters\":%d,\"client_cpu_share\":%.4f,"
             "\"server_cpu_share\":%.4f",
             r->inflight, r->client_cpu_share, r->server_cpu_share);
    if (strcmp(r->scenario, "contended") == 0) {
      printf(",\"kind\":\"%s\",\"starvation_ms\":%d", r->kind,
             r->starvation_ms);
      printf(",\"utilisation\":%.3f,\"wait_p50_us\":%.1f,\"wait_p99_us\":%.1f,"
             "\"wait_max_us\":%.1f,\"wakeups_per_acquire\":%.2f,"
             "\"max_wakeups_per_unlock_per_process\":%.2f",
             r->utilisation, r->wait_p50, r->wait_p99, r->wait_max,
             r->wakeups_per_acquire, r->max_wakeups_per_unlock_per_process);
      if (r->util_limit > 0)
        printf(",\"handoff_floor_p50_us\":%.1f,\"utilisation_limit\":%.3f,"
               "\"utilisation_over_limit\":%.3f",
               r->handoff_p50, r->util_limit, r->utilisation / r->util_limit);
    }
    if (strcmp(r->scenario, "watchdog") == 0)
      printf(",\"locks\":%ld,\"lost\":%ld,"
             "\"renewal_round_trips_per_period\":%.1f,"
             "\"client_cpu_share\":%.4f,\"bytes_per_lock\":%.0f",
             r->locks, r->lost, r->renewal_rt_per_period, r->client_cpu_share,
             r->bytes_per_lock);
    if (strcmp(r->scenario, "queue") == 0)
      printf(",\"queue_offers_per_sec\":%.0f,\"queue_takes_per_sec\":%.0f,"
             "\"rpush_per_sec\":%.0f,\"blpop_per_sec\":%.0f,"
             "\"delivery_delay_p50_us\":%.0f,\"delivery_delay_p99_us\":%.0f",
             r->queue_offers, r->queue_takes, r->rpush_per_sec,
             r->blpop_per_sec, r->delay_p50, r->delay_p99);
    printf("}\n");
    fflush(stdout);
    return;
  }
  bool cont = strcmp(r->scenario, "contended") == 0;
  if (r->async)
    printf("%-11s 1 loop x %2d proc, %d in flight each  %9.0f ops/s  p50 "
           "%7.1f us  p99 %8.1f us  max %9.1f us%s%s\n",
           r->scenario, r->processes, r->inflight, r->ops_per_sec, r->p50,
           r->p99, r->max, cont ? "  kind " : "", cont ? r->kind : "");
  else
    printf("%-11s %3d thr x %2d proc  %9.0f ops/s  p50 %7.1f us  p99 %8.1f "
           "us  max %9.1f us%s%s\n",
           r->scenario, r->threads, r->processes, r->ops_per_sec, r->p50,
           r->p99, r->max, cont ? "  kind " : "", cont ? r->kind : "");
  if (r->etcd && r->series > 0)
    printf("  baselines: etcd round trip (/v3/maintenance/status) p50 %.1f "
           "us; a write txn p50 %.1f us (2 x = %.1f us); the lock's two txns "
           "in series %.0f cycles/s, from %d threads %.0f cycles/s (server "
           "CPU %.2f us/cycle); server CPU %.2f us/op; errors %ld\n",
           r->rtt_p50, r->write_rtt_p50, 2 * r->write_rtt_p50, r->series,
           ETCD_CEIL_THREADS, r->etcd_ceiling, r->etcd_ceiling_cpu,
           r->cpu_per_op, r->errors);
  else if (r->etcd)
    printf("  baseline: etcd round trip (/v3/maintenance/status) p50 %.1f us "
           "(2 x = %.1f us); errors %ld\n",
           r->rtt_p50, 2 * r->rtt_p50, r->errors);
  else if (r->zk)
    printf("  baseline: ZooKeeper round trip (exists /) p50 %.1f us (2 x = "
           "%.1f us); no ceiling or server CPU on zk://; errors %ld\n",
           r->rtt_p50, 2 * r->rtt_p50, r->errors);
  else
    printf("  baselines: PING p50 %.1f us (2 x = %.1f us), ceiling %.0f "
           "cycles/s; server CPU %.2f us/op; errors %ld\n",
           r->rtt_p50, 2 * r->rtt_p50, r->ceiling, r->cpu_per_op, r->errors);
  if (r->redisson_ceiling > 0)
    printf("  Redisson's cycle (fenced lock, unlock with latch, DEL latch), "
           "pipelined on the same server: %.0f cycles/s, %.2f us server CPU "
           "each (dlock's ceiling: %.2f us); ceiling / Redisson's = %.2f\n",
           r->redisson_ceiling, r->redisson_cpu, r->ceiling_cpu,
           r->ceiling / r->redisson_ceiling);
  if (r->fanout_rtt_p50 > 0)
    printf("  redlock: PING to every server at once p50 %.1f us (2 x = %.1f "
           "us)\n",
           r->fanout_rtt_p50, 2 * r->fanout_rtt_p50);
  if (r->etcd && r->series > 0)
    printf("  ratios: p50 / (2 x write) = %.2f, ops / series = %.2f, ops / "
           "%d-thread ceiling = %.2f\n",
           r->write_rtt_p50 > 0 ? r->p50 / (2 * r->write_rtt_p50) : 0,
           r->ops_per_sec / r->series, ETCD_CEIL_THREADS,
           r->etcd_ceiling > 0 ? r->ops_per_sec / r->etcd_ceiling : 0);
  else if (strcmp(r->scenario, "uncontended") == 0 && r->zk)
    printf("  ratio: p50 / (2 x round trip) = %.2f\n",
           r->p50 / (2 * r->rtt_p50));
  else if (strcmp(r->scenario, "uncontended") == 0)
    printf("  ratios: p50 / (2 x PING) = %.2f, ops / ceiling = %.2f%s\n",
           r->p50 / (2 * r->rtt_p50), r->ops_per_sec / r->ceiling,
           r->fanout_rtt_p50 > 0 ? " (one server's)"
           : r->masters > 0      ? " (one master's)"
                                 : "");
  if (r->masters > 0)
    printf("  cluster: %d masters; PING p50 of the slowest, server CPU of "
           "all; every master's ceiling at once %.0f cycles/s (ops / that "
           "= %.2f)\n",
           r->masters, r->cluster_ceiling,
           r->cluster_ceiling > 0 ? r->ops_per_sec / r->cluster_ceiling : 0);
  if (r->fanout_rtt_p50 > 0)
    printf("  ratio: p50 / (2 x PING to every server) = %.2f\n",
           r->p50 / (2 * r->fanout_rtt_p50));
  if (r->ceiling_depth > 0)
    printf("  the ceiling at %d requests a batch (this loop's depth): %.0f "
           "cycles/s; ops / that = %.2f\n",
           r->inflight, r->ceiling_depth, r->ops_per_sec / r->ceiling_depth);
  if (r->series_p50 > 0)
    printf("  limit: the cycle's own commands in series, each sent to every "
           "server at once until a quorum answered, p50 %.1f us; p50 / that "
           "= %.2f\n",
           r->series_p50, r->p50 / r->series_p50);
  if (strcmp(r->scenario, "contended") == 0)
    printf("  utilisation %.3f, wait p50 %.0f us, p99 %.0f us, max %.0f us, "
           "wakeups/acquire %.2f, max wakeups/unlock/process %.2f\n",
           r->utilisation, r->wait_p50, r->wait_p99, r->wait_max,
           r->wakeups_per_acquire, r->max_wakeups_per_unlock_per_process);
  if (r->util_limit > 0)
    printf("  hand-off floor (a PUBLISH until a sleeping subscriber reads it) "
           "p50 %.1f us: utilisation limit %.3f (mean hold / (hold + "
           "floor)); utilisation / that = %.2f\n",
           r->handoff_p50, r->util_limit, r->utilisation / r->util_limit);
  if (strcmp(r->scenario, "idle-waiters") == 0)
    printf("  %d waiters: client CPU %.2f%% of a core, server CPU %.2f%%, "
           "%.0f scripts/s\n",
           r->inflight, 100 * r->client_cpu_share, 100 * r->server_cpu_share,
           r->ops_per_sec);
  if (strcmp(r->scenario, "queue") == 0)
    printf("  offers %.0f/s, takes %.0f/s (offer p50 %.1f us); plain RPUSH "
           "%.0f/s, BLPOP %.0f/s; delayed values delivered p50 %.0f us, "
           "p99 %.0f us after due\n",
           r->queue_offers, r->queue_takes, r->p50, r->rpush_per_sec,
           r->blpop_per_sec, r->delay_p50, r->delay_p99);
  if (strcmp(r->scenario, "watchdog") == 0)
    printf("  %ld locks, lost %ld, renewal round trips/period %.1f "
           "(%.0f locks each), client CPU %.2f%%, %.0f bytes/lock\n",
           r->locks, r->lost, r->renewal_rt_per_period,
           r->renewal_rt_per_period > 0
               ? (double)r->locks / r->renewal_rt_per_period
               : 0,
           100 * r->client_cpu_share, r->bytes_per_lock);
  fflush(stdout);
}
