/* plot.c: dlock bench --plot: the scenario swept over 1, 2, 4 ... threads,
 * then throughput against concurrency and the last run's latency
 * distribution drawn by gnuplot into an SVG. */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int bench_plot(const cli_global *g, bench_opts o, struct redisContext *raw,
               const char *path) {
  char dir[] = "/tmp/dlock-plot-XXXXXX";
  if (mkdtemp(dir) == NULL) return -1;
  char tp[128], lp[128], gp[128];
  snprintf(tp, sizeof tp, "%s/throughput.dat", dir);
  snprintf(lp, sizeof lp, "%s/latency.dat", dir);
  snprintf(gp, sizeof gp, "%s/plot.gp", dir);
  FILE *t = fopen(tp, "w");
  if (t == NULL) return -1;
  static const int sweep[] = {1, 2, 4, 8, 16, 32, 64};
  int top = o.threads;
  bench_samples last = {0};
  for (size_t i = 0; i < sizeof sweep / sizeof sweep[0]; i++) {
    if (sweep[i] > top && i > 0) break;
    o.threads = sweep[i];
    bench_report r;
    free(last.v);
    last = (bench_samples){0};
    if (bench_measure(g, &o, raw, &r, &last) != 0) break;
    bench_print_report(&r, o.json);
    fprintf(t, "%d %.0f %.0f\n", o.threads * o.processes, r.ops_per_sec,
            r.ceiling);
  }
  fclose(t);
  FILE *l = fopen(lp, "w");
  if (l == NULL) return -1;
  for (size_t i = 0; i < last.n; i += last.n / 2000 + 1)
    fprintf(l, "%u %.5f\n", last.v[i], (double)i / (double)last.n);
  if (last.n) fprintf(l, "%u 1\n", last.v[last.n - 1]);
  fclose(l);
  free(last.v);
  FILE *s = fopen(gp, "w");
  if (s == NULL) return -1;
  fprintf(s,
          "set terminal svg size 1100,450 dynamic background '#ffffff'\n"
          "set output '%s'\n"
          "set multiplot layout 1,2 title 'dlock bench %s'\n"
          "set title 'throughput against concurrency'\n"
          "set xlabel 'threads x processes'\nset ylabel 'cycles/s'\n"
          "set logscale x 2\nset key top left\nset grid\n"
          "plot '%s' using 1:2 with linespoints title 'dlock', "
          "'%s' using 1:3 with lines dashtype 2 title 'ceiling (pipelined)'\n"
          "unset logscale x\n"
          "set title 'latency distribution (last run)'\n"
          "set xlabel 'microseconds'\nset ylabel 'fraction of cycles'\n"
          "set logscale x 10\n"
          "plot '%s' using 1:2 with lines title '%s'\n"
          "unset multiplot\n",
          path, o.scenario, tp, tp, lp,
          strcmp(o.scenario, "contended") == 0 ? "wait" : "cycle");
  fclose(s);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "gnuplot '%s'", gp);
  int rc = system(cmd);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) cli_err("could not remove %s", dir);
  if (rc != 0) {
    cli_err("gnuplot failed (is it installed? apt-get install gnuplot)");
    return -1;
  }
  if (!o.json) printf("plot written to %s\n", path);
  return 0;
}
