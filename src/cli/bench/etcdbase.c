/* etcdbase.c: dlock bench's baselines on etcd[s]://, measured in the same
 * run against the URL's first endpoint over the backend's own transport
 * (etcd/probe.h): a bare write's round trip, the lock's two writes in
 * series, the same from many threads at once (the server's ceiling) and
 * the server's CPU (its /metrics). */
#include "../../etcd/probe.h"
#include "bench.h"

struct dl_etcd_probe *bench_etcd_probe(const cli_global *g,
                                       const bench_opts *o) {
  dlock_client_options opt;
  bench_client_options(g, o, 0, &opt);
  dl_etcd_probe *p = NULL;
  if (dl_etcd_probe_open(&opt, &p) != 0)
    cli_err("etcd baselines: %s", dlock_client_open_errmsg());
  return p;
}

void bench_etcd_limits(struct dl_etcd_probe *p, bench_report *r) {
  if (p == NULL) return;
  r->write_rtt_p50 = dl_etcd_probe_write_rtt_p50_us(p, 1000, 400);
  r->series = dl_etcd_probe_cycles(p, 1, 1000);
  double cpu0 = dl_etcd_probe_cpu_us(p);
  int64_t t0 = dl_now_ms();
  r->etcd_ceiling = dl_etcd_probe_cycles(p, ETCD_CEIL_THREADS, 1000);
  double secs = (double)(dl_now_ms() - t0) / 1000.0;
  double cpu1 = cpu0 >= 0 ? dl_etcd_probe_cpu_us(p) : -1;
  if (cpu0 >= 0 && cpu1 >= 0 && r->etcd_ceiling > 0)
    r->etcd_ceiling_cpu = (cpu1 - cpu0) / (r->etcd_ceiling * secs);
}

double bench_etcd_cpu_us(struct dl_etcd_probe *p) {
  return p ? dl_etcd_probe_cpu_us(p) : -1;
}

void bench_etcd_probe_close(struct dl_etcd_probe *p) {
  dl_etcd_probe_close(p);
}
