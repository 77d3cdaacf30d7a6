/* bench.c: dlock bench, the project's benchmark tool: its options, its
 * client, and the run of the scenario asked for. Every run measures, in
 * the same run and against the same server, the baselines it is compared
 * with: the PING round trip and the ceiling (the lock's own acquire and
 * release scripts pipelined on one connection: the most cycles the server
 * can do), and the server's CPU time per operation (INFO cpu). bench.h
 * says which of its files does what. */
#include "bench.h"
#include "../duration.h"

#include <getopt.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void bench_client_options(const cli_global *g, const bench_opts *o,
                          int64_t lease_ms, dlock_client_options *opt) {
  cli_options(g, lease_ms, opt);
  opt->client_name = "dlock-bench";
  opt->connections = o->connections;
  opt->command_timeout_ms = 10000;
  opt->starvation_ms = o->starvation_ms;
}

dlock_client *bench_client(const cli_global *g, const bench_opts *o,
                           int64_t lease_ms) {
  dlock_client_options opt;
  bench_client_options(g, o, lease_ms, &opt);
  dlock_client *c = NULL;
  if (dlock_client_open(&opt, &c) != 0)
    cli_err("%s", dlock_client_open_errmsg());
  return c;
}

static const char *bench_help =
    "usage: dlock bench [options] SCENARIO\n"
    "Measures the lock against the server, beside the baselines measured in "
    "the same run:\nthe PING round trip and the ceiling (the lock's "
    "scripts pipelined on one\nconnection), the server's CPU per "
    "operation,\nand with one operation at a time (uncontended: one thread, or "
    "--async --inflight 1)\nthe limit: the cycle's own commands in series "
    "(Redlock: each step to every server,\nuntil a quorum answered).\n\n"
    "scenarios:\n"
    "  uncontended   T threads in one process, each its own lock; latency = "
    "one\n                acquire+release cycle\n"
    "  contended     P processes x T threads on one lock, holding it --hold "
    "each cycle;\n                latency = the wait for the lock\n"
    "  watchdog      one client holds K locks in watchdog mode for several "
    "leases\n"
    "  idle-waiters  (--async --idle-waiters N) N handles on one loop wait "
    "on held\n                locks: the process's CPU share meanwhile\n"
    "  queue         T producers and T consumers on one queue beside plain "
    "RPUSH/BLPOP;\n                then delayed values' delivery delay after "
    "their due time\n\n"
    "options:\n"
    "  -t, --threads N      threads per process (default 1)\n"
    "  -p, --processes N    processes (default 1; contended default 8)\n"
    "  -d, --duration D     measuring time (default 5s)\n"
    "      --hold D         contended: hold time per cycle (default 1ms)\n"
    "  -k, --locks N        watchdog: locks held (default 10000)\n"
    "      --lease D        watchdog: lease (default 2s)\n"
    "      --periods N      watchdog: leases to run for (default 3)\n"
    "      --kind K         contended: lock (default), fair (the fair "
    "lock), semaphore,\n"
    "                       or permits (the permit-expirable semaphore, "
    "10 s leases)\n"
    "      --permits N      contended semaphore or permits: permits "
    "(default 1)\n"
    "  -c, --connections N  command connections per client (default 1)\n"
    "      --starvation D   the clients' starvation threshold (default 20ms, "
    "0 = off)\n"
    "      --async          uncontended, contended: one event-loop thread "
    "per process\n"
    "                       (the built-in driver) instead of threads\n"
    "      --inflight N     --async: operations in flight per process "
    "(uncontended:\n"
    "                       N locks, default 64; contended: N waiters, "
    "default 1)\n"
    "      --idle-waiters N --async: the idle-waiters scenario with N "
    "waiters\n"
    "      --warmup D       idle-waiters: how long they wait before the "
    "measured -d\n"
    "                       (default 1s; their heartbeats slow down as they "
    "wait)\n"
    "      --json           one JSON object per line\n"
    "      --plot FILE.svg  sweep threads 1..T and draw throughput and "
    "latency (gnuplot)\n";

int cmd_bench(int argc, char **argv, cli_global *g) {
  static const struct option longopts[] = {
      CLI_GLOBAL_LONGOPTS,
      {"threads", required_argument, 0, 't'},
      {"processes", required_argument, 0, 'p'},
      {"duration", required_argument, 0, 'd'},
      {"hold", required_argument, 0, 3001},
      {"locks", required_argument, 0, 'k'},
      {"lease", required_argument, 0, 3002},
      {"periods", required_argument, 0, 3003},
      {"connections", required_argument, 0, 'c'},
      {"json", no_argument, 0, 3004},
      {"plot", required_argument, 0, 3005},
      {"starvation", required_argument, 0, 3006},
      {"kind", required_argument, 0, 3007},
      {"permits", required_argument, 0, 3008},
      {"async", no_argument, 0, 3009},
      {"inflight", required_argument, 0, 3010},
      {"idle-waiters", required_argument, 0, 3011},
      {"warmup", required_argument, 0, 3012},
      {0, 0, 0, 0}};
  bench_opts o = {.threads = 1, .processes = 0, .locks = 10000, .periods = 3,
                  .connections = 1, .starvation_ms = 20, .secs_ms = 5000,
                  .hold_ms = 1, .kind = "lock", .permits = 1,
                  .lease_ms = 2000, .warmup_ms = 1000};
  int opt;
  while ((opt = getopt_long(argc, argv, CLI_GLOBAL_SHORTOPTS "t:p:d:k:c:",
                            longopts, NULL)) != -1) {
    char *end = NULL;
    long v = optarg ? strtol(optarg, &end, 10) : 0;
    bool num_ok = optarg && *optarg && end && *end == '\0' && v > 0 &&
                  v <= 1000000;
    switch (opt) {
    case 'h': fputs(bench_help, stdout); return 0;
    case 3007:
      if (strcmp(optarg, "lock") && strcmp(optarg, "fair") &&
          strcmp(optarg, "semaphore") && strcmp(optarg, "permits")) {
        cli_err("bad --kind '%s' (lock, fair, semaphore or permits)", optarg);
        return EXIT_USAGE;
      }
      o.kind = optarg;
      break;
    case 't': case 'p': case 'k': case 'c': case 3003: case 3008: case 3010:
    case 3011:
      if (!num_ok) {
        cli_err("bad number '%s'", optarg);
        return EXIT_USAGE;
      }
      if (opt == 't') o.threads = (int)v;
      else if (opt == 'p') o.processes = (int)v;
      else if (opt == 'k') o.locks = (int)v;
      else if (opt == 'c') o.connections = (int)v;
      else if (opt == 3008) o.permits = (int)v;
      else if (opt == 3010) o.inflight = (int)v;
      else if (opt == 3011) o.idle_waiters = (int)v;
      else o.periods = (int)v;
      break;
    case 'd': case 3001: case 3002: case 3012: {
      int64_t ms;
      if (dl_parse_duration(optarg, &ms) != 0 ||
          (opt != 3001 && opt != 3012 && ms < 10)) {
        cli_err("bad duration '%s'", optarg);
        return EXIT_USAGE;
      }
      if (opt == 'd') o.secs_ms = ms;
      else if (opt == 3001) o.hold_ms = ms;
      else if (opt == 3012) o.warmup_ms = ms;
      else o.lease_ms = ms;
      break;
    }
    case 3004: o.json = true; break;
    case 3009: o.async = true; break;
    case 3006: {
      int64_t ms;
      if (dl_parse_duration(optarg, &ms) != 0 || ms > 3600000) {
        cli_err("bad duration '%s'", optarg);
        return EXIT_USAGE;
      }
      o.starvation_ms = (int)ms;
      break;
    }
    case 3005: o.plot = optarg; break;
    case '?':
      cli_err("unknown option '%s' (see dlock bench --help)", argv[optind - 1]);
      return EXIT_USAGE;
    default:
      if (cli_global_opt(g, opt, optarg) < 0) return EXIT_USAGE;
    }
  }
  /* --idle-waiters names its scenario itself. */
  if (argc - optind != 1 && !(o.idle_waiters && argc == optind)) {
    cli_err("usage: dlock bench [options] "
            "uncontended|contended|watchdog|idle-waiters|queue");
    return EXIT_USAGE;
  }
  o.scenario = argc > optind ? argv[optind] : "idle-waiters";
  bool idle = strcmp(o.scenario, "idle-waiters") == 0;
  bool queue = strcmp(o.scenario, "queue") == 0;
  bool known = queue || strcmp(o.scenario, "uncontended") == 0 ||
               strcmp(o.scenario, "contended") == 0 ||
               strcmp(o.scenario, "watchdog") == 0 || idle;
  if (!known) {
    cli_err("unknown scenario '%s'", o.scenario);
    return EXIT_USAGE;
  }
  if ((o.async || o.plot) && queue) {
    cli_err("the queue scenario runs without --async and --plot");
    return EXIT_USAGE;
  }
  if (o.async && strcmp(o.scenario, "watchdog") == 0) {
    cli_err("--async runs uncontended, contended or idle-waiters");
    return EXIT_USAGE;
  }
  if (idle && (!o.async || !o.idle_waiters)) {
    cli_err("idle-waiters needs --async and --idle-waiters N");
    return EXIT_USAGE;
  }
  if (o.async && strcmp(o.kind, "lock") && strcmp(o.kind, "fair")) {
    cli_err("--async: --kind lock or fair (the others have no async form "
            "yet)");
    return EXIT_USAGE;
  }
  if (o.async && o.plot) {
    cli_err("--plot sweeps threads: not with --async");
    return EXIT_USAGE;
  }
  if (o.inflight == 0) o.inflight = strcmp(o.scenario, "contended") ? 64 : 1;
  if (o.processes == 0)
    o.processes = strcmp(o.scenario, "contended") == 0 ? 8 : 1;
  if (o.connections > 64) o.connections = 64;
  o.url = g->url ? g->url : "redis://127.0.0.1:6379";
  o.password = g->password;
  o.etcd =
      strncmp(o.url, "etcd://", 7) == 0 || strncmp(o.url, "etcds://", 8) == 0;
  o.zk = strncmp(o.url, "zk://", 5) == 0 || o.etcd;
  o.cluster = strncmp(o.url, "redis-cluster://", 16) == 0 ||
              strncmp(o.url, "rediss-cluster://", 17) == 0;
  if (o.zk && (o.plot || (strcmp(o.scenario, "uncontended") &&
                          strcmp(o.scenario, "contended")) ||
               strcmp(o.kind, "semaphore") == 0)) {
    cli_err("on zk://: uncontended or contended, --kind lock, fair or "
            "permits, without --plot");
    return EXIT_USAGE;
  }
  /* The Redis baselines' plain connection (none on zk://). */
  redisContext *raw = NULL;
  if (!o.zk) {
    raw = bench_raw_connect(o.url, o.password, NULL);
    if (raw == NULL) return EXIT_UNAVAILABLE;
    if (bench_others_connect(&o) != 0) {
      redisFree(raw);
      return EXIT_UNAVAILABLE;
    }
  }
  int rc = 0;
  bench_report r;
  if (queue) {
    rc = bench_queue(g, &o, raw, &r);
    if (rc == 0) bench_print_report(&r, o.json);
  } else if (strcmp(o.scenario, "watchdog") == 0) {
    rc = bench_watchdog(g, &o, raw, &r);
    if (rc == 0) bench_print_report(&r, o.json);
  } else if (idle) {
    rc = bench_async_idle(g, &o, raw, &r);
    bench_print_report(&r, o.json);
  } else if (o.plot) {
    rc = bench_plot(g, o, raw, o.plot);
  } else {
    rc = bench_measure(g, &o, raw, &r, NULL);
    bench_print_report(&r, o.json);
  }
  if (raw) redisFree(raw);
  bench_others_free(&o);
  return rc == 0 ? 0 : EXIT_UNAVAILABLE;
}
