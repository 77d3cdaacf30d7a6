/* fence.c: dlock fence set | get | del, fenced resources for scripts: a
 * write inside `dlock run` that a later holder's write makes stale. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *usage_text =
    "usage: dlock fence set RESOURCE VALUE [--token T]\n"
    "       dlock fence get RESOURCE\n"
    "       dlock fence del RESOURCE\n"
    "A fenced resource is a value kept beside the highest fencing token "
    "that\nwrote it, on the lock's own servers (not on redlock://).\n"
    "  set   writes VALUE with token T (default $DLOCK_TOKEN, which dlock "
    "run\n        sets) only if no higher token has written: inside dlock "
    "run, a\n        holder paused past its lease cannot overwrite a later "
    "holder\n"
    "  get   prints the value and a newline, then the fence and a newline\n"
    "  del   deletes it (value and fence: a reset)\n"
    "Exit status: 0 done, 1 none there (get, del), 76 stale token (nothing "
    "written),\n64 usage or no token, 65 RESOURCE is not a fenced resource, "
    "69 server\ntrouble.\n";

/* The token: --token's, else $DLOCK_TOKEN's; 0 none or not a number. */
static uint64_t token_of(const char *arg) {
  const char *s = arg ? arg : getenv("DLOCK_TOKEN");
  if (s == NULL || *s < '1' || *s > '9') return 0;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  return *end == '\0' && errno == 0 ? (uint64_t)v : 0;
}

static int failed(dlock_client *c, int e) {
  cli_err("%s", dlock_client_errmsg(c));
  return e == DLOCK_EWRONGTYPE ? EXIT_DATAERR
         : e == DLOCK_ESTALE   ? EXIT_LOST
                               : cli_exit_for(e);
}

static int get(dlock_client *c, const char *name, const cli_global *g) {
  void *v = NULL;
  size_t len = 0;
  uint64_t fence = 0;
  int e = dlock_fence_get(c, name, &v, &len, &fence);
  if (e < 0) return failed(c, e);
  if (e == 0) {
    if (g->verbose >= 0) cli_err("no fenced resource %s", name);
    return 1;
  }
  fwrite(v, 1, len, stdout);
  printf("\n%llu\n", (unsigned long long)fence);
  dlock_fence_value_free(v);
  return fflush(stdout) == 0 ? 0 : EXIT_UNAVAILABLE;
}

int cmd_fence(int argc, char **argv, cli_global *g) {
  if (argc < 2 || strcmp(argv[1], "--help") == 0 ||
      strcmp(argv[1], "-h") == 0) {
    fputs(usage_text, argc < 2 ? stderr : stdout);
    return argc < 2 ? EXIT_USAGE : 0;
  }
  const char *sub = argv[1];
  bool is_set = strcmp(sub, "set") == 0, is_get = strcmp(sub, "get") == 0,
       is_del = strcmp(sub, "del") == 0;
  if (!is_set && !is_get && !is_del) {
    cli_err("unknown fence command '%s' (set, get, del)", sub);
    return EXIT_USAGE;
  }
  static const struct option longopts[] = {
      CLI_GLOBAL_LONGOPTS, {"token", required_argument, 0, 't'}, {0, 0, 0, 0}};
  const char *targ = NULL;
  int opt;
  argc--;
  argv++;
  while ((opt = getopt_long(argc, argv, CLI_GLOBAL_SHORTOPTS, longopts,
                            NULL)) != -1) {
    if (opt == 'h') {
      fputs(usage_text, stdout);
      return 0;
    }
    if (opt == 't') {
      targ = optarg;
    } else if (opt == '?') {
      cli_err("unknown option '%s' (see dlock fence --help)", argv[optind - 1]);
      return EXIT_USAGE;
    } else if (cli_global_opt(g, opt, optarg) < 0) {
      return EXIT_USAGE;
    }
  }
  int i = optind, operands = argc - i;
  if (operands != (is_set ? 2 : 1) || (!is_set && targ)) {
    cli_err("usage: dlock fence %s (see dlock fence --help)",
            is_set   ? "set RESOURCE VALUE [--token T]"
            : is_get ? "get RESOURCE"
                     : "del RESOURCE");
    return EXIT_USAGE;
  }
  const char *name = argv[i];
  uint64_t token = is_set ? token_of(targ) : 0;
  if (is_set && token == 0) {
    cli_err(targ || getenv("DLOCK_TOKEN")
                ? "the token is not a number above 0"
                : "no token: --token T, or $DLOCK_TOKEN (dlock run sets it)");
    return EXIT_USAGE;
  }
  int rc = 0;
  dlock_client *c = cli_open(g, 0, &rc);
  if (c == NULL) return rc;
  if (is_get) {
    rc = get(c, name, g);
  } else if (is_set) {
    const char *v = argv[i + 1];
    int e = dlock_fence_set(c, name, v, strlen(v), token);
    rc = e < 0 ? failed(c, e) : 0;
  } else {
    int e = dlock_fence_del(c, name);
    rc = e < 0 ? failed(c, e) : e == 1 ? 0 : 1;
    if (e == 0 && g->verbose >= 0) cli_err("no fenced resource %s", name);
  }
  dlock_client_close(c);
  return rc;
}
