/* inspect.c: dlock status, dlock release --force and dlock list. */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_duration(FILE *f, int64_t ms) {
  if (ms < 0) fputs("?", f);
  else if (ms < 10000) fprintf(f, "%.1fs", (double)ms / 1000);
  else if (ms < 120000) fprintf(f, "%llds", (long long)(ms / 1000));
  else if (ms < 7200000) fprintf(f, "%lldm%02llds", (long long)(ms / 60000),
                                 (long long)(ms / 1000 % 60));
  else fprintf(f, "%lldh%02lldm", (long long)(ms / 3600000),
               (long long)(ms / 60000 % 60));
}

/* "host pid 123 (command)", the holder's own description, or the owner id
 * when there is none. */
static void print_holder(FILE *f, const dlock_lock_state *st) {
  char buf[DLOCK_INFO_MAX + 64];
  fputs(cli_holder_text(st, buf, sizeof buf), f);
}

static void json_state(FILE *f, const char *name, const dlock_lock_state *st) {
  fputs("{\"name\":", f);
  cli_json_str(f, name);
  fprintf(f, ",\"held\":%s", st->held ? "true" : "false");
  if (st->held) {
    fputs(",\"owner\":", f);
    cli_json_str(f, st->owner);
    fprintf(f, ",\"hold_count\":%d", st->hold_count);
    char buf[DLOCK_INFO_MAX + 1];
    cli_holder h;
    if (cli_parse_holder(st->info, buf, sizeof buf, &h)) {
      fputs(",\"host\":", f);
      cli_json_str(f, h.host);
      fprintf(f, ",\"pid\":%ld,\"command\":", strtol(h.pid, NULL, 10));
      cli_json_str(f, h.cmd);
    } else if (st->info[0]) { /* a description set by a library user */
      fputs(",\"info\":", f);
      cli_json_str(f, st->info);
    }
    if (st->held_ms >= 0)
      fprintf(f, ",\"held_ms\":%lld", (long long)st->held_ms);
    fprintf(f, ",\"lease_ms\":%lld", (long long)st->ttl_ms);
  }
  if (st->mode[0]) {
    fputs(",\"mode\":", f);
    cli_json_str(f, st->mode);
    fprintf(f, ",\"readers\":%d", st->readers);
  }
  if (st->plain) fputs(",\"plain\":true", f);
  if (st->queued > 0) fprintf(f, ",\"queued\":%d", st->queued);
  fprintf(f, ",\"token\":%llu,\"waiters\":%d}\n",
          (unsigned long long)st->token, st->waiters);
}

/* The lines that depend on the kind at the name (all but the plain lock). */
static void text_kind(FILE *f, const dlock_lock_state *st) {
  if (st->mode[0] && strcmp(st->mode, "read") == 0)
    fprintf(f, "  mode:      read, %d reader(s)\n", st->readers);
  else if (st->mode[0])
    fprintf(f, "  mode:      write%s\n",
            st->readers ? " (the writer also reads)" : "");
  if (st->queued > 0)
    fprintf(f, "  queued:    %d (first come first served)\n",
            st->queued);
}

static void text_state(FILE *f, const char *name, const dlock_lock_state *st) {
  if (!st->held) {
    fprintf(f, "%s: free (last token %llu, %d waiting)\n", name,
            (unsigned long long)st->token, st->waiters);
    return;
  }
  fprintf(f, "%s: held by ", name);
  print_holder(f, st);
  fputc('\n', f);
  fprintf(f, "  owner:     %s (hold count %d)\n", st->owner, st->hold_count);
  if (st->held_ms >= 0) {
    fputs("  held for:  ", f);
    print_duration(f, st->held_ms);
    fputc('\n', f);
  }
  fputs("  lease:     ", f);
  if (st->ttl_ms == DLOCK_TTL_NONE)
    fputs("no expiry", f);
  else print_duration(f, st->ttl_ms);
  fprintf(f, " left\n  token:     %llu\n  waiting:   %d\n",
          (unsigned long long)st->token, st->waiters);
  text_kind(f, st);
}

/* What `status` takes NAME for: a lock (any of the lock kinds, all hashes
 * on the server), or with --permits or --latch a counter (Redisson's
 * RSemaphore, RPermitExpirableSemaphore and RCountDownLatch keep a number
 * at the name, which nothing tells apart from any other number). */
enum { AS_LOCK, AS_SEMAPHORE, AS_LATCH };

typedef struct {
  bool json;
  bool force;
  const char *permit; /* release --permit ID */
  int as;
  const char *help;
} simple_opts;

/* Parses [--json] [--force] and the global options; returns the index of
 * the first operand or -1 (exit code in *rc). */
static int parse_simple(int argc, char **argv, cli_global *g, simple_opts *o,
                        int *rc) {
  static const struct option longopts[] = {
      CLI_GLOBAL_LONGOPTS, {"json", no_argument, 0, 'j'},
      {"force", no_argument, 0, 'f'}, {"permit", required_argument, 0, 'I'},
      {"permits", no_argument, 0, 'P'}, {"latch", no_argument, 0, 'L'},
      {0, 0, 0, 0}};
  int opt;
  while ((opt = getopt_long(argc, argv, CLI_GLOBAL_SHORTOPTS "f", longopts,
                            NULL)) != -1) {
    if (opt == 'h') {
      fputs(o->help, stdout);
      *rc = 0;
      return -1;
    }
    if (opt == 'j') o->json = true;
    else if (opt == 'f') o->force = true;
    else if (opt == 'I') o->permit = optarg;
    else if (opt == 'P') o->as = AS_SEMAPHORE;
    else if (opt == 'L') o->as = AS_LATCH;
    else if (opt == '?') {
      cli_err("unknown option '%s' (see dlock %s --help)", argv[optind - 1],
              argv[0]);
      *rc = EXIT_USAGE;
      return -1;
    } else if (cli_global_opt(g, opt, optarg) < 0) {
      *rc = EXIT_USAGE;
      return -1;
    }
  }
  return optind;
}

/* Opens the client and a handle for `name`; NULL with *rc on failure. */
static dlock_lock *open_named(cli_global *g, const char *name,
                              dlock_client **c, int *rc) {
  *c = cli_open(g, 0, rc);
  if (*c == NULL) return NULL;
  dlock_lock *l = NULL;
  int e = dlock_lock_new(*c, name, NULL, &l);
  if (e != 0) {
    cli_err("%s", dlock_client_errmsg(*c));
    *rc = cli_exit_for(e);
    dlock_client_close(*c);
    return NULL;
  }
  return l;
}

/* open_named, then a snapshot of the lock in *st. NULL with *rc (message
 * printed, everything closed) on failure. */
static dlock_lock *open_inspected(cli_global *g, const char *name,
                                  dlock_client **c, dlock_lock_state *st,
                                  int *rc) {
  dlock_lock *l = open_named(g, name, c, rc);
  if (l == NULL) return NULL;
  int e = dlock_lock_inspect(l, st);
  if (e != 0) {
    cli_err("%s", dlock_client_errmsg(*c));
    *rc = cli_exit_for(e);
    dlock_lock_free(l);
    dlock_client_close(*c);
    return NULL;
  }
  return l;
}

/* Whether the key at the name can be a lock: a hash with a holder (a lock
 * hash has one while it exists; an application's hash has none), nothing
 * (free), a ZooKeeper lock path (not a semaphore's: no count), an etcd
 * mutex's keys, or a plain string lock (a string with a lease that is not
 * a number). */
static bool lockish(const dlock_lock_state *st) {
  return (strcmp(st->type, "hash") == 0 && st->holders > 0) ||
         strcmp(st->type, "none") == 0 ||
         (strcmp(st->type, "znode") == 0 && st->counter < 0) ||
         strcmp(st->type, "keys") == 0 || st->plain;
}

/* The message for a name that holds something else than a lock. */
static void not_a_lock(const char *name, const dlock_lock_state *st) {
  if (strcmp(st->type, "latch") == 0) /* etcd's: nothing else looks so */
    cli_err("%s: not a dlock lock: a count-down latch (dlock status --latch "
            "%s)",
            name, name);
  else if (st->counter >= 0)
    cli_err("%s: not a dlock lock: %s (a semaphore's or a latch's count "
            "looks the same: dlock status --permits %s, or --latch)",
            name, st->type, name);
  else
    cli_err("%s: not a dlock lock: %s", name, st->type);
}

/* status --permits / --latch: the counter at the name. Returns the exit
 * status: 0 set, 1 not set, EXIT_DATAERR something else is there. */
static int counter_status(const char *name, const dlock_lock_state *st,
                          const simple_opts *o) {
  const char *kind = o->as == AS_LATCH ? "latch" : "semaphore";
  if ((st->counter < 0 && strcmp(st->type, "none") != 0) ||
      (o->as == AS_SEMAPHORE && strcmp(st->type, "latch") == 0)) {
    cli_err("%s: not a %s: %s%s", name, kind, st->type,
            strcmp(st->type, "hash") == 0 ? " (a lock: dlock status NAME)"
                                          : "");
    return EXIT_DATAERR;
  }
  bool set = st->counter >= 0;
  if (o->json) {
    fputs("{\"name\":", stdout);
    cli_json_str(stdout, name);
    printf(",\"kind\":\"%s\",\"set\":%s", kind, set ? "true" : "false");
    if (set) printf(",\"counter\":%lld", (long long)st->counter);
    if (o->as == AS_SEMAPHORE)
      printf(",\"permits_taken\":%d", st->permits_taken);
    fputs("}\n", stdout);
  } else if (!set) {
    printf("%s: no %s (%s)\n", name, kind,
           o->as == AS_LATCH ? "its count is 0, or it was never set"
                             : "never set, or deleted");
  } else if (o->as == AS_LATCH) {
    printf("%s: count-down latch, count %lld\n", name,
           (long long)st->counter);
  } else {
    printf("%s: semaphore, %lld permit(s) free", name,
           (long long)st->counter);
    if (st->permits_taken > 0)
      printf(", %d taken (permits with leases)", st->permits_taken);
    putchar('\n');
  }
  return set ? 0 : 1;
}

int cmd_status(int argc, char **argv, cli_global *g) {
  simple_opts o = {
      .help =
          "usage: dlock status [--json] [--permits | --latch] NAME\n"
          "Shows whether lock NAME is held, by whom (owner, host, pid, "
          "command, since\nwhen, hold count), the lease left, the fencing "
          "token and the waiters; for a\nread-write lock its mode and "
          "readers, for a fair lock its queue.\n"
          "  --permits  NAME is a semaphore (dlock run --permits, Redisson's "
          "RSemaphore or\n             RPermitExpirableSemaphore): the "
          "permits free and taken\n"
          "  --latch    NAME is a count-down latch (RCountDownLatch): its "
          "count\n"
          "Exit status: 0 held (or set), 1 free (or not set), 65 NAME holds "
          "something\nelse, 69 server trouble, 64 usage.\n"};
  int rc = 0;
  int i = parse_simple(argc, argv, g, &o, &rc);
  if (i < 0) return rc;
  if (o.force || argc - i != 1) {
    cli_err("usage: dlock status [--json] [--permits | --latch] NAME");
    return EXIT_USAGE;
  }
  dlock_client *c;
  dlock_lock_state st;
  dlock_lock *l = open_inspected(g, argv[i], &c, &st, &rc);
  if (l == NULL) return rc;
  if (o.as != AS_LOCK) {
    rc = counter_status(argv[i], &st, &o);
  } else if (!lockish(&st)) {
    not_a_lock(argv[i], &st);
    rc = EXIT_DATAERR;
  } else {
    if (o.json) json_state(stdout, argv[i], &st);
    else text_state(stdout, argv[i], &st);
    rc = st.held ? 0 : 1;
  }
  dlock_lock_free(l);
  dlock_client_close(c);
  return rc;
}

/* release --force --permit ID NAME: takes one permit of the
 * permit-expirable semaphore NAME back. */
static int release_permit(cli_global *g, const char *name, const char *id) {
  int rc = 0;
  dlock_client *c = cli_open(g, 0, &rc);
  if (c == NULL) return rc;
  dlock_permits *p = NULL;
  int e = dlock_permits_new(c, name, &p);
  if (e == 0) e = dlock_permits_force_release(p, id);
  if (e < 0) {
    cli_err("%s", dlock_client_errmsg(c));
    rc = cli_exit_for(e);
  } else if (e == 1) {
    if (g->verbose >= 0) printf("released permit %s of %s\n", id, name);
  } else {
    if (g->verbose >= 0) printf("no permit %s of %s is taken\n", id, name);
    rc = 1;
  }
  dlock_permits_free(p);
  dlock_client_close(c);
  return rc;
}

int cmd_release(int argc, char **argv, cli_global *g) {
  simple_opts o = {.help = "usage: dlock release --force [--permit ID] NAME\n"
                           "Deletes lock NAME whoever holds it and wakes its "
                           "waiters; prints who held it.\nThe holder is told "
                           "at once: its dlock run stops its command (exit "
                           "76).\nOnly a lock is deleted (a lock, fair lock, "
                           "read-write lock, or plain string\nlock: a "
                           "string with a lease that is not a number); "
                           "anything else\nat NAME is "
                           "left as it is (exit 65). With --permit, takes "
                           "back permit ID of\nthe permit-expirable semaphore "
                           "NAME (its holder has it in $DLOCK_PERMIT).\n"
                           "Exit status: 0 released, 1 it was free, 65 NAME "
                           "is not a lock, 69 server\ntrouble, 64 usage.\n"};
  int rc = 0;
  int i = parse_simple(argc, argv, g, &o, &rc);
  if (i < 0) return rc;
  if (o.json || o.as != AS_LOCK || argc - i != 1) {
    cli_err("usage: dlock release --force [--permit ID] NAME");
    return EXIT_USAGE;
  }
  if (!o.force) {
    cli_err("release takes a lock from its holder: say --force");
    return EXIT_USAGE;
  }
  if (o.permit) return release_permit(g, argv[i], o.permit);
  dlock_client *c;
  dlock_lock_state st;
  dlock_lock *l = open_inspected(g, argv[i], &c, &st, &rc);
  if (l == NULL) return rc;
  int e = 0;
  if (st.plain) { /* a plain string lock: through a handle of its kind */
    dlock_lock *p = NULL;
    e = dlock_plainlock_new(c, argv[i], NULL, &p);
    if (e == 0) e = dlock_lock_force_release(p);
    dlock_lock_free(p);
  } else if (st.mode[0]) { /* a read-write lock: through one of its handles */
    dlock_rwlock *rw = NULL;
    e = dlock_rwlock_new(c, argv[i], NULL, &rw);
    if (e == 0) e = dlock_lock_force_release(dlock_rwlock_write(rw));
    dlock_rwlock_free(rw);
  } else {
    e = dlock_lock_force_release(l);
  }
  if (e == DLOCK_EWRONGTYPE && st.permits_taken > 0) {
    cli_err("%s is a permit-expirable semaphore with %d permit(s) taken: "
            "say which with --permit ID", argv[i], st.permits_taken);
    rc = EXIT_DATAERR;
  } else if (e == DLOCK_EWRONGTYPE) { /* the script checked, atomically */
    not_a_lock(argv[i], &st);
    if (g->verbose > 0) cli_err("%s", dlock_client_errmsg(c));
    rc = EXIT_DATAERR;
  } else if (e < 0) {
    cli_err("%s", dlock_client_errmsg(c));
    rc = cli_exit_for(e);
  } else if (e == 1) {
    if (g->verbose >= 0) {
      printf("released %s, held by ", argv[i]);
      print_holder(stdout, &st);
      putchar('\n');
    }
    rc = 0;
  } else {
    if (g->verbose >= 0) printf("%s was not held\n", argv[i]);
    rc = 1;
  }
  dlock_lock_free(l);
  dlock_client_close(c);
  return rc;
}

typedef struct {
  dlock_client *c;
  bool json;
  int held;
  int err;
} list_ctx;

static int list_one(const char *name, void *ud) {
  list_ctx *x = ud;
  dlock_lock *l;
  if (dlock_lock_new(x->c, name, NULL, &l) != 0) return 0; /* too long */
  dlock_lock_state st;
  int e = dlock_lock_inspect(l, &st);
  dlock_lock_free(l);
  if (e != 0) {
    x->err = e;
    return 1;
  }
  if (!st.held) return 0; /* a hash, but not a lock */
  x->held++;
  if (x->json) {
    json_state(stdout, name, &st);
    return 0;
  }
  printf("%-30s ", name);
  print_holder(stdout, &st);
  fputs("  lease ", stdout);
  if (st.ttl_ms == DLOCK_TTL_NONE)
    fputs("none", stdout);
  else print_duration(stdout, st.ttl_ms);
  printf("  token %llu\n", (unsigned long long)st.token);
  return 0;
}

int cmd_list(int argc, char **argv, cli_global *g) {
  simple_opts o = {.help = "usage: dlock list [--json] [PATTERN]\n"
                           "Lists the held locks whose names match PATTERN "
                           "(a glob, default *), found\nwith SCAN: one line "
                           "each with the holder and the lease left; --json, "
                           "one\nobject per line.\n"};
  int rc = 0;
  int i = parse_simple(argc, argv, g, &o, &rc);
  if (i < 0) return rc;
  if (o.force || o.as != AS_LOCK || argc - i > 1) {
    cli_err("usage: dlock list [--json] [PATTERN]");
    return EXIT_USAGE;
  }
  dlock_client *c = cli_open(g, 0, &rc);
  if (c == NULL) return rc;
  list_ctx x = {c, o.json, 0, 0};
  int e = dlock_client_scan_locks(c, i < argc ? argv[i] : NULL, list_one, &x);
  if (e < 0 || x.err) {
    cli_err("%s", dlock_client_errmsg(c));
    rc = cli_exit_for(e < 0 ? e : x.err);
  }
  dlock_client_close(c);
  return rc;
}
