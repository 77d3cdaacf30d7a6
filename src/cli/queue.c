/* queue.c: dlock queue offer | take | size, the blocking and delayed
 * queues for scripts and operators. */
#include "cli.h"
#include "duration.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

static const char *usage_text =
    "usage: dlock queue offer NAME [--delay DURATION] VALUE...\n"
    "       dlock queue take NAME [-w DURATION] [--last]\n"
    "       dlock queue size NAME [--json]\n"
    "The queue NAME is a Redis list (Redisson's RBlockingQueue/Deque, values "
    "as\nbytes: StringCodec, ByteArrayCodec); its delayed queue is "
    "Redisson's\nRDelayedQueue of NAME. On etcd:// it is contrib/recipes' "
    "Queue (Go's\nrecipe.NewQueue), its delayed queue dlock's keys beside "
    "it (due times by\nthe offering client's clock).\n"
    "  offer   appends each VALUE to the queue, in order; with --delay, to "
    "the\n          delayed queue, due DURATION from now by the server's "
    "clock\n"
    "  take    takes the value at the head (--last: the tail), after "
    "moving the\n          delayed values now due; waits up to -w DURATION "
    "(default: no\n          limit; 0: one look); prints the value and a "
    "newline\n"
    "  size    the values ready and the delayed ones not yet due\n"
    "Exit status: 0 done, 75 nothing to take in time, 65 NAME holds "
    "something\nelse, 69 server trouble, 64 usage.\n";

typedef struct queue_opts {
  int64_t delay_ms; /* -1: none */
  int64_t wait_ms;  /* -1: no limit */
  bool last, json;
} queue_opts;

/* Parses the options after the subcommand; returns the index of the first
 * operand or -1 (exit code in *rc). */
static int parse(int argc, char **argv, cli_global *g, queue_opts *o, int *rc) {
  static const struct option longopts[] = {CLI_GLOBAL_LONGOPTS,
                                           {"delay", required_argument, 0, 'd'},
                                           {"wait", required_argument, 0, 'w'},
                                           {"last", no_argument, 0, 'l'},
                                           {"json", no_argument, 0, 'j'},
                                           {0, 0, 0, 0}};
  int opt;
  while ((opt = getopt_long(argc, argv, CLI_GLOBAL_SHORTOPTS "w:", longopts,
                            NULL)) != -1) {
    if (opt == 'h') {
      fputs(usage_text, stdout);
      *rc = 0;
      return -1;
    }
    if (opt == 'd' || opt == 'w') {
      int64_t ms;
      if (dl_parse_duration(optarg, &ms) != 0) {
        cli_err("bad duration '%s' (250ms, 30s, 5m, 1h)", optarg);
        *rc = EXIT_USAGE;
        return -1;
      }
      if (opt == 'd')
        o->delay_ms = ms;
      else
        o->wait_ms = ms;
    } else if (opt == 'l') {
      o->last = true;
    } else if (opt == 'j') {
      o->json = true;
    } else if (opt == '?') {
      cli_err("unknown option '%s' (see dlock queue --help)", argv[optind - 1]);
      *rc = EXIT_USAGE;
      return -1;
    } else if (cli_global_opt(g, opt, optarg) < 0) {
      *rc = EXIT_USAGE;
      return -1;
    }
  }
  return optind;
}

/* A library error's message and exit status. */
static int failed(dlock_client *c, int e) {
  cli_err("%s", dlock_client_errmsg(c));
  return e == DLOCK_EWRONGTYPE ? EXIT_DATAERR : cli_exit_for(e);
}

static int offer(dlock_queue *q, dlock_client *c, const queue_opts *o, int n,
                 char **values) {
  for (int i = 0; i < n; i++) {
    size_t len = strlen(values[i]);
    int e = o->delay_ms >= 0
                ? dlock_queue_offer_delayed(q, o->delay_ms, values[i], len)
                : dlock_queue_offer(q, values[i], len);
    if (e < 0) return failed(c, e);
  }
  return 0;
}

static int take(const char *name, dlock_queue *q, dlock_client *c,
                const queue_opts *o) {
  void *v = NULL;
  size_t len = 0;
  int e = o->last ? dlock_queue_poll_last(q, o->wait_ms, &v, &len)
                  : dlock_queue_poll(q, o->wait_ms, &v, &len);
  if (e == DLOCK_EBUSY) {
    if (o->wait_ms != 0) cli_err("nothing to take from %s in time", name);
    return EXIT_CONFLICT;
  }
  if (e < 0) return failed(c, e);
  fwrite(v, 1, len, stdout);
  fputc('\n', stdout);
  dlock_queue_value_free(v);
  return fflush(stdout) == 0 ? 0 : EXIT_UNAVAILABLE;
}

static int size(const char *name, dlock_queue *q, dlock_client *c,
                const queue_opts *o) {
  int64_t ready = 0, delayed = 0;
  int e = dlock_queue_size(q, &ready);
  if (e == 0) e = dlock_queue_delayed_size(q, &delayed);
  if (e < 0) return failed(c, e);
  if (o->json) {
    fputs("{\"name\":", stdout);
    cli_json_str(stdout, name);
    printf(",\"ready\":%lld,\"delayed\":%lld}\n", (long long)ready,
           (long long)delayed);
  } else {
    printf("%s: %lld ready, %lld delayed\n", name, (long long)ready,
           (long long)delayed);
  }
  return 0;
}

int cmd_queue(int argc, char **argv, cli_global *g) {
  if (argc < 2 || strcmp(argv[1], "--help") == 0 ||
      strcmp(argv[1], "-h") == 0) {
    fputs(usage_text, argc < 2 ? stderr : stdout);
    return argc < 2 ? EXIT_USAGE : 0;
  }
  const char *sub = argv[1];
  bool is_offer = strcmp(sub, "offer") == 0, is_take = strcmp(sub, "take") == 0,
       is_size = strcmp(sub, "size") == 0;
  if (!is_offer && !is_take && !is_size) {
    cli_err("unknown queue command '%s' (offer, take, size)", sub);
    return EXIT_USAGE;
  }
  queue_opts o = {.delay_ms = -1, .wait_ms = -1};
  int rc = 0;
  int i = parse(argc - 1, argv + 1, g, &o, &rc);
  if (i < 0) return rc;
  i++; /* past the subcommand */
  int operands = argc - i;
  if (operands < 1 || (is_offer && operands < 2) ||
      (!is_offer && operands != 1) || (!is_offer && o.delay_ms >= 0) ||
      (!is_take && (o.last || o.wait_ms >= 0)) || (!is_size && o.json)) {
    cli_err("usage: dlock queue %s (see dlock queue --help)",
            is_offer  ? "offer NAME [--delay DURATION] VALUE..."
            : is_take ? "take NAME [-w DURATION] [--last]"
                      : "size NAME [--json]");
    return EXIT_USAGE;
  }
  const char *name = argv[i];
  dlock_client *c = cli_open(g, 0, &rc);
  if (c == NULL) return rc;
  dlock_queue *q = NULL;
  int e = dlock_queue_new_delayed(c, name, &q);
  if (e != 0)
    rc = failed(c, e);
  else if (is_offer)
    rc = offer(q, c, &o, operands - 1, argv + i + 1);
  else if (is_take)
    rc = take(name, q, c, &o);
  else
    rc = size(name, q, c, &o);
  dlock_queue_free(q);
  dlock_client_close(c);
  return rc;
}
