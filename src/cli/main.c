/* main.c: the dlock command: its global options and the dispatch to each
 * command (the helpers they share are common.c's). */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *usage_text =
    "usage: dlock [-u URL] COMMAND [options] ...\n"
    "\n"
    "Distributed locks on Redis (one server, Sentinel, Cluster, Redlock)\n"
    "and ZooKeeper, shared with Redisson, the Redlock clients and Curator.\n"
    "\n"
    "commands:\n"
    "  run [options] NAME -- COMMAND [ARG...]   run COMMAND holding lock NAME\n"
    "  elect [options] NAME -- COMMAND [ARG...] run COMMAND while leading the\n"
    "                                           election NAME\n"
    "  elect --listen [-n COUNT] NAME           print each new leader of NAME\n"
    "  status [--json] NAME                     who holds lock NAME (exit 0 "
    "held, 1 free)\n"
    "  status --permits|--latch NAME            a semaphore's or latch's "
    "count\n"
    "  release --force NAME                     delete NAME whoever holds it\n"
    "  list [--json] [PATTERN]                  the held locks\n"
    "  top [-b] [-n N] [PATTERN]                a live view of the locks, "
    "semaphores\n"
    "                                           and queues (see dlock top "
    "--help)\n"
    "  metrics [--listen ADDR:PORT] [PATTERN]   their state for Prometheus\n"
    "  deadlocks [PATTERN]                      owners waiting for each other "
    "in a\n"
    "                                           cycle (exit 1 if any)\n"
    "  bench [options] SCENARIO                 benchmark (see dlock bench "
    "--help)\n"
    "  queue offer|take|size NAME ...           a queue's values (see dlock "
    "queue --help)\n"
    "  fence set|get|del RESOURCE ...           a fenced resource: writes a "
    "stale\n"
    "                                           token cannot make (see dlock "
    "fence --help)\n"
    "  version                                  the version (as --version)\n"
    "\n"
    "global options (any command):\n"
    "  -u, --url URL          redis://[user[:pass]@]host[:port][/db], "
    "rediss://...,\n"
    "                         unix:///path.sock,\n"
    "                         zk://[user[:pass]@]host:port[,...][/chroot]\n"
    "                         [?session_timeout=D&connect_timeout=D&acl=A],\n"
    "                         etcd[s]://[user[:pass]@]host:port[,...]"
    "[/prefix]\n"
    "                         "
    "redis-sentinel://host:port[,host:port...]/MASTER\n"
    "                         (sentinels' password: $DLOCK_SENTINEL_PASSWORD)\n"
    "                         redis-cluster://host:port[,host:port...]\n"
    "                         [?pubsub=auto|sharded|classic], "
    "rediss-cluster://...\n"
    "                         redlock://host:port,host:port,host:port"
    "[?options]\n"
    "                         (default $DLOCK_URL, else "
    "redis://127.0.0.1:6379)\n"
    "  --replicas N|auto      after each acquire, renewal and release, WAIT\n"
    "                         for N replicas (auto: as many as the master\n"
    "                         has then); an acquire they do not\n"
    "                         acknowledge is given back (exit 75)\n"
    "  --replicas-timeout D   how long that WAIT may take (default 1s)\n"
    "  --password-file FILE   read the password from FILE (or "
    "$DLOCK_PASSWORD)\n"
    "  --cacert FILE          CA for rediss:// and etcds:// (--cert FILE "
    "--key FILE:\n"
    "                         client cert)\n"
    "  --insecure             do not verify the server's certificate\n"
    "  -q, --quiet            no messages but errors\n"
    "  -v, --verbose          say what happens\n"
    "  -h, --help             this help; 'dlock COMMAND --help' for a "
    "command\n"
    "  -V, --version          the version (also 'dlock version')\n"
    "\n"
    "Durations: 250ms, 30s, 5m, 1h, or a number of seconds.\n"
    "See dlock(1).\n";

int main(int argc, char **argv) {
  cli_global g = {0};
  g.url = getenv("DLOCK_URL");
  if (g.url && *g.url == '\0') g.url = NULL;

  /* Global options before the command. */
  int i = 1;
  static const struct option longopts[] = {
      CLI_GLOBAL_LONGOPTS, {"version", no_argument, 0, 'V'}, {0, 0, 0, 0}};
  opterr = 0;
  int opt;
  /* '+': stop at the first non-option (the command). */
  while ((opt = getopt_long(argc, argv, "+" CLI_GLOBAL_SHORTOPTS "V", longopts,
                            NULL)) != -1) {
    if (opt == 'h') {
      fputs(usage_text, stdout);
      return 0;
    }
    if (opt == 'V') {
      printf("dlock %s\n", dlock_version(NULL));
      return 0;
    }
    if (opt == '?') {
      cli_err("unknown option '%s' (see dlock --help)", argv[optind - 1]);
      return EXIT_USAGE;
    }
    int r = cli_global_opt(&g, opt, optarg);
    if (r < 0) return EXIT_USAGE;
  }
  i = optind;
  /* A password: --password-file, else the URL's own, else $DLOCK_PASSWORD
   * (again whenever a command's own -u or --password-file changes them). */
  if (cli_password_resolve(&g) != 0) {
    cli_err("out of memory");
    return EXIT_UNAVAILABLE;
  }
  if (i >= argc) {
    fputs(usage_text, stderr);
    return EXIT_USAGE;
  }
  const char *cmd = argv[i];
  int sub_argc = argc - i;
  char **sub_argv = argv + i;
  optind = 0; /* each command parses its own options (0: glibc starts afresh) */
  int rc;
  if (strcmp(cmd, "run") == 0) rc = cmd_run(sub_argc, sub_argv, &g);
  else if (strcmp(cmd, "elect") == 0) rc = cmd_elect(sub_argc, sub_argv, &g);
  else if (strcmp(cmd, "status") == 0) rc = cmd_status(sub_argc, sub_argv, &g);
  else if (strcmp(cmd, "release") == 0)
    rc = cmd_release(sub_argc, sub_argv, &g);
  else if (strcmp(cmd, "list") == 0) rc = cmd_list(sub_argc, sub_argv, &g);
  else if (strcmp(cmd, "top") == 0)
    rc = cmd_top(sub_argc, sub_argv, &g);
  else if (strcmp(cmd, "metrics") == 0)
    rc = cmd_metrics(sub_argc, sub_argv, &g);
  else if (strcmp(cmd, "deadlocks") == 0)
    rc = cmd_deadlocks(sub_argc, sub_argv, &g);
  else if (strcmp(cmd, "bench") == 0) rc = cmd_bench(sub_argc, sub_argv, &g);
  else if (strcmp(cmd, "queue") == 0) rc = cmd_queue(sub_argc, sub_argv, &g);
  else if (strcmp(cmd, "fence") == 0)
    rc = cmd_fence(sub_argc, sub_argv, &g);
  else if (strcmp(cmd, "help") == 0) {
    fputs(usage_text, stdout);
    rc = 0;
  } else if (strcmp(cmd, "version") == 0) {
    printf("dlock %s\n", dlock_version(NULL));
    rc = 0;
  } else {
    cli_err("unknown command '%s' (see dlock --help)", cmd);
    rc = EXIT_USAGE;
  }
  free(g.password);
  free(g.password_file);
  return rc;
}
