/* listen.c: dlock elect --listen NAME, the election's leaders as they
 * change (Go's Election.Observe, `etcdctl elect -l`): a line with each new
 * leader's value, until a signal or the count asked for. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *usage_text =
    "usage: dlock elect --listen [-n COUNT] NAME\n"
    "Prints the value of each new leader of the election NAME, a line "
    "each (with -v,\nthe leadership's fencing token before it), as Go's "
    "Election.Observe and\n`etcdctl elect -l`: the present one first, then "
    "every change (a new leader,\nits Proclaim). Nobody leading prints "
    "nothing. Runs until SIGINT or SIGTERM,\nor until COUNT values were "
    "printed (-n). On etcd:// only.\n"
    "Exit status: 0; 64 usage; 69 server trouble or not on this URL.\n";

typedef struct listening {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  long printed, count; /* count 0: no end */
  bool failed, verbose;
} listening;

static void on_value(dlock_leader *l, const char *value, size_t len,
                     uint64_t token, void *ud) {
  (void)l;
  listening *s = ud;
  if (value == NULL) return;
  pthread_mutex_lock(&s->mu);
  if (s->count == 0 || s->printed < s->count) {
    if (s->verbose) printf("%llu ", (unsigned long long)token);
    fwrite(value, 1, len, stdout);
    putchar('\n');
    if (fflush(stdout) != 0) s->failed = true;
    s->printed++;
  }
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

int cli_elect_listen(int argc, char **argv, cli_global *g) {
  static const struct option longopts[] = {CLI_GLOBAL_LONGOPTS,
                                           {"listen", no_argument, 0, 1100},
                                           {"count", required_argument, 0, 'n'},
                                           {0, 0, 0, 0}};
  listening s = {.mu = PTHREAD_MUTEX_INITIALIZER};
  int opt;
  optind = 1;
  while ((opt = getopt_long(argc, argv, CLI_GLOBAL_SHORTOPTS "n:", longopts,
                            NULL)) != -1) {
    if (opt == 'h') {
      fputs(usage_text, stdout);
      return 0;
    }
    if (opt == 1100) continue;
    if (opt == 'n') {
      char *end;
      errno = 0;
      s.count = strtol(optarg, &end, 10);
      if (*end || errno || s.count < 1) {
        cli_err("-n wants a count of 1 or more, not '%s'", optarg);
        return EXIT_USAGE;
      }
    } else if (opt == '?') {
      cli_err("unknown option '%s' (see dlock elect --listen --help)",
              argv[optind - 1]);
      return EXIT_USAGE;
    } else if (cli_global_opt(g, opt, optarg) < 0) {
      return EXIT_USAGE;
    }
  }
  if (optind + 1 != argc) {
    cli_err("usage: dlock elect --listen [-n COUNT] NAME");
    return EXIT_USAGE;
  }
  s.verbose = g->verbose > 0;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, NULL); /* before any thread exists */
  int rc = 0;
  dlock_client *c = cli_open(g, 0, &rc);
  if (c == NULL) return rc;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s.cv, &ca);
  pthread_condattr_destroy(&ca);
  dlock_leader *l = NULL;
  int e = dlock_leader_new(c, argv[optind], NULL, &l);
  if (e == 0) e = dlock_leader_observe(l, on_value, &s);
  if (e != 0) {
    cli_err("%s", dlock_client_errmsg(c));
    rc = cli_exit_for(e);
  }
  /* A signal or the count ends it; the signals are looked at 10 times a
   * second. */
  while (e == 0) {
    struct timespec zero = {0, 0};
    if (sigtimedwait(&set, NULL, &zero) > 0) break;
    pthread_mutex_lock(&s.mu);
    bool done = s.failed || (s.count > 0 && s.printed >= s.count);
    if (!done) {
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      ts.tv_nsec += 100000000;
      if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
      }
      pthread_cond_timedwait(&s.cv, &s.mu, &ts);
    }
    if (s.failed) rc = EXIT_UNAVAILABLE;
    pthread_mutex_unlock(&s.mu);
    if (done) break;
  }
  dlock_leader_free(l);
  dlock_client_close(c);
  pthread_cond_destroy(&s.cv);
  return rc;
}
