/* run.c: dlock run: acquire a lock, run a command while holding it, release;
 * dlock elect: the same with the leadership of an election (zk://).
 *
 * Signals: the interesting ones are blocked in every thread from the start,
 * and the main thread takes them with sigtimedwait, so a signal is never
 * handled in a library thread or lost between checks. The lock is acquired
 * on a helper thread that raises SIGUSR2 when done; a lost lock raises
 * SIGUSR1 from the watchdog thread. */
#include "cli.h"
#include "duration.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *run_help =
    "usage: dlock run [options] NAME -- COMMAND [ARG...]\n"
    "Acquires lock NAME, runs COMMAND while holding it, releases it when "
    "COMMAND ends.\n"
    "Options may also follow NAME; everything after '--' is COMMAND's.\n"
    "\n"
    "  -w, --wait DURATION        how long to wait for the lock (default "
    "forever;\n"
    "                             0 = one attempt)\n"
    "  -l, --lease DURATION       how long the lock outlives a dead holder "
    "(default 30s);\n"
    "                             renewed while COMMAND runs\n"
    "      --no-renew             a fixed lease: COMMAND is stopped as lost "
    "when it ends\n"
    "      --fair                 the fair lock NAME: holders in the order "
    "they asked\n"
    "      --plain                the plain string lock NAME (the layout "
    "of redsync,\n"
    "                             npm redlock and redis-semaphore: they "
    "exclude each\n"
    "                             other on the same key)\n"
    "      --read, --write        the read or the write lock of the "
    "read-write lock\n"
    "                             NAME: many readers or one writer\n"
    "      --permits N            at most N holders of NAME at once (a permit "
    "of the\n"
    "                             permit-expirable semaphore NAME; a dead "
    "holder's\n"
    "                             permit comes back after the lease)\n"
    "  -E, --conflict-exit-code N exit status when not acquired in time "
    "(default 75)\n"
    "      --kill-grace DURATION  on lock loss, SIGTERM to SIGKILL delay "
    "(default 5s,\n"
    "                             at most the lease)\n"
    "  -q, --quiet / -v, --verbose\n"
    "\n"
    "COMMAND runs without a shell, in its own process group, with "
    "DLOCK_NAME,\n"
    "DLOCK_TOKEN (the fencing token; with --permits, DLOCK_PERMIT, the "
    "permit's id)\n"
    "DLOCK_URL (no password) and DLOCK_PASSWORD (the password in use, if "
    "any) in its\nenvironment.\n"
    "SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to its group.\n"
    "\n"
    "Exit status: COMMAND's (128+N if killed by signal N); 75 (-E) not "
    "acquired in\n"
    "time (75 also: granted too late to trust, given back); 76 lock lost "
    "while\nCOMMAND ran (or not confirmed held to its end, whatever it "
    "returned);\n69 server unreachable or refusing;\n"
    "77 not permitted by the server's ACL; 64 usage; 127 COMMAND not found, "
    "126 not\nexecutable.\n";

static const char *elect_help =
    "usage: dlock elect [options] NAME -- COMMAND [ARG...]\n"
    "Joins the election NAME, runs COMMAND once this process is the "
    "leader, stops it\n"
    "when the leadership is lost, leaves the election when COMMAND ends. "
    "On zk://\n"
    "it is Apache Curator's LeaderLatch; elsewhere the participants take "
    "turns on the\nlock NAME.\n"
    "Options may also follow NAME; everything after '--' is COMMAND's.\n"
    "\n"
    "  -w, --wait DURATION        how long to wait for the leadership "
    "(default forever;\n"
    "                             0 = lead now or not at all)\n"
    "      --id ID                this participant's id, shown to the "
    "others as the\n"
    "                             leader's (default HOST:PID)\n"
    "      --listen               (dlock elect --listen NAME) take no part: "
    "print each\n"
    "                             new leader's value (etcd://)\n"
    "  -E, --conflict-exit-code N exit status when not elected in time "
    "(default 75)\n"
    "      --kill-grace DURATION  on leadership loss, SIGTERM to SIGKILL "
    "delay (default\n"
    "                             5s)\n"
    "  -q, --quiet / -v, --verbose\n"
    "\n"
    "The leadership is lost when the session expires, when the "
    "connection to\n"
    "ZooKeeper is lost (another participant may be elected meanwhile: "
    "Curator's\n"
    "default), or when this participant's node is deleted; on Redis as "
    "the lock is.\n"
    "COMMAND runs as with dlock run, with DLOCK_TOKEN the leadership's "
    "fencing token.\n"
    "\n"
    "Exit status: COMMAND's (128+N if killed by signal N); 75 (-E) not "
    "elected in\n"
    "time; 76 leadership lost while COMMAND ran; 69 server unreachable; "
    "64 usage;\n"
    "127 COMMAND not found, 126 not executable.\n";

/* What `run` holds: the lock NAME, or (--permits) one permit of the
 * permit-expirable semaphore NAME; what `elect` holds: the leadership of
 * the election NAME. */
typedef struct acq {
  dlock_lock *lock;
  dlock_leader *leader;
  dlock_rwlock *rw; /* --read/--write: the read-write lock `lock` is from */
  dlock_permits *permits;
  int64_t wait_ms, lease_ms;
  uint64_t token;
  char id[DLOCK_PERMIT_ID_LEN];
  int rc;
  pthread_t thread;
  dlock_client *c;
  char err[512]; /* the failed acquire's detail, copied on its thread */
} acq;

static void *acquire_thread(void *p) {
  acq *a = p;
  if (a->leader) {
    a->rc = dlock_leader_start(a->leader);
    if (a->rc == 0) a->rc = dlock_leader_try_await(a->leader, a->wait_ms);
    if (a->rc == 0) a->rc = dlock_leader_token(a->leader, &a->token);
  } else if (a->permits) {
    a->rc = dlock_permits_try_acquire(a->permits, a->wait_ms, a->lease_ms,
                                      a->id);
  } else {
    a->rc = dlock_lock_try_acquire(a->lock, a->wait_ms, a->lease_ms,
                                   &a->token);
  }
  /* The detail is this thread's: the main thread would read "". */
  if (a->rc != 0)
    snprintf(a->err, sizeof a->err, "%s", dlock_client_errmsg(a->c));
  kill(getpid(), SIGUSR2);
  return NULL;
}

static void on_lost(dlock_lock *l, const char *owner, void *ud) {
  (void)l;
  (void)owner;
  (void)ud;
  kill(getpid(), SIGUSR1);
}

static void on_permit_lost(dlock_permits *p, const char *id, void *ud) {
  (void)p;
  (void)id;
  (void)ud;
  kill(getpid(), SIGUSR1);
}

/* The leadership changed: lost, once it was won (SIGUSR1, as a lost lock). */
static void on_leader(dlock_leader *l, int leader, void *ud) {
  (void)l;
  (void)ud;
  if (!leader) kill(getpid(), SIGUSR1);
}

static int held_release(acq *a) {
  if (a->leader) { /* leaves the election */
    dlock_leader_free(a->leader);
    a->leader = NULL;
    return 0;
  }
  return a->permits ? dlock_permits_release(a->permits, a->id)
                    : dlock_lock_release(a->lock);
}

/* Whether the hold is certainly still valid: its validity has not run
 * out on the library's monotonic clock, which runs on while this process
 * is stopped (SIGSTOP, a long pause), so a stop past the lease counts. A
 * leader: still leading, as last heard. */
static bool held_valid(acq *a) {
  if (a->leader) return dlock_leader_has_leadership(a->leader) == 1;
  int64_t ms = 0;
  int e = a->permits ? dlock_permits_validity(a->permits, a->id, &ms)
                     : dlock_lock_validity(a->lock, &ms);
  return e == 0 && ms > 0;
}

static void held_free(acq *a) {
  dlock_leader_free(a->leader);
  dlock_permits_free(a->permits);
  dlock_lock_free(a->lock); /* nothing for a read-write lock's handle */
  dlock_rwlock_free(a->rw);
}

/* The one status line shown on a terminal while waiting. */
static void show_waiting(dlock_lock *l, dlock_leader *ld, const char *name,
                         int64_t since) {
  dlock_lock_state st;
  char line[600];
  double waited = (double)(cli_mono_ms() - since) / 1000;
  if (ld) {
    char who[200];
    if (dlock_leader_get_current(ld, who, sizeof who) == 1)
      snprintf(line, sizeof line, "waiting to lead %s (%.0fs): the leader "
               "is %s", name, waited, who[0] ? who : "(no id)");
    else
      snprintf(line, sizeof line, "waiting to lead %s (%.0fs)", name, waited);
  } else if (dlock_lock_inspect(l, &st) != 0 || !st.held) {
    snprintf(line, sizeof line, "waiting for %s (%.0fs)", name, waited);
  } else {
    char who[100], held[32] = "";
    if (st.held_ms >= 0)
      snprintf(held, sizeof held, " for %llds", (long long)st.held_ms / 1000);
    snprintf(line, sizeof line, "waiting for %s (%.0fs): held by %s%s", name,
             waited, cli_holder_text(&st, who, sizeof who), held);
  }
  fprintf(stderr, "\r\033[Kdlock: %s", line);
  fflush(stderr);
}

static void clear_line(void) {
  fputs("\r\033[K", stderr);
  fflush(stderr);
}

/* The holder description stored beside the lock: "v1\thost\tpid\tcmd". */
static void make_info(char *buf, size_t len, char **cmd) {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  int n = snprintf(buf, len, "v1\t%s\t%d\t", host, (int)getpid());
  for (int i = 0; cmd[i] && n < (int)len - 1; i++) {
    for (const char *s = cmd[i]; *s && n < (int)len - 1; s++)
      buf[n++] = (*s == '\t' || *s == '\n' || *s == '\r') ? ' ' : *s;
    if (cmd[i + 1] && n < (int)len - 1) buf[n++] = ' ';
  }
  buf[n < (int)len ? n : (int)len - 1] = '\0';
}

static int parse_count(const char *s, int *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < 0 || v > 255) return -1;
  *out = (int)v;
  return 0;
}

/* What the command line asks of run or elect. */
typedef struct run_opts {
  bool elect;
  const char *what; /* "run" or "elect" */
  const char *name, *id;
  int64_t wait_ms, lease_ms, grace_ms;
  bool renew, fair, rd, wr, plain;
  int permits, conflict;
  char **cmd; /* COMMAND and its arguments */
} run_opts;

/* Parses argv into *o. Returns -1 to go on, or the status to exit with
 * (0 after --help; EXIT_USAGE with a message printed). */
static int parse_run(int argc, char **argv, cli_global *g, run_opts *o) {
  static const struct option longopts[] = {
      CLI_GLOBAL_LONGOPTS,
      {"wait", required_argument, 0, 'w'},
      {"lease", required_argument, 0, 'l'},
      {"no-renew", no_argument, 0, 2001},
      {"conflict-exit-code", required_argument, 0, 'E'},
      {"kill-grace", required_argument, 0, 2002},
      {"permits", required_argument, 0, 2003},
      {"fair", no_argument, 0, 2004},
      {"read", no_argument, 0, 2005},
      {"write", no_argument, 0, 2006},
      {"plain", no_argument, 0, 2007},
      {"id", required_argument, 0, 2008},
      {0, 0, 0, 0}};
  bool elect = o->elect;
  const char *what = o->what;
  o->wait_ms = -1;
  o->lease_ms = 30000;
  o->grace_ms = 5000;
  o->renew = true;
  o->conflict = EXIT_CONFLICT;
  int kinds = 0;
  const char *not_elect = NULL;
  /* Options go before or after NAME, up to the first "--": getopt only
   * sees the words before it, so nothing of COMMAND is taken for ours.
   * '-': operands come back in order as opt 1 (also under
   * POSIXLY_CORRECT), so that NAME is the only one. */
  int dashes = 1;
  while (dashes < argc && strcmp(argv[dashes], "--") != 0) dashes++;
  const char *name = NULL, *extra = NULL;
  int opt;
  while ((opt = getopt_long(dashes, argv, "-" CLI_GLOBAL_SHORTOPTS "w:l:E:",
                            longopts, NULL)) != -1) {
    switch (opt) {
    case 1:
      if (name == NULL) name = optarg;
      else if (extra == NULL) extra = optarg;
      break;
    case 'h': fputs(elect ? elect_help : run_help, stdout); return 0;
    case 'w':
      if (dl_parse_duration(optarg, &o->wait_ms) != 0) {
        cli_err("bad duration for --wait: '%s' (e.g. 250ms, 30s, 5m, 1h)",
                optarg);
        return EXIT_USAGE;
      }
      break;
    case 'l':
      if (dl_parse_duration(optarg, &o->lease_ms) != 0 || o->lease_ms < 3) {
        cli_err("bad duration for --lease: '%s' (e.g. 30s; at least 3ms)",
                optarg);
        return EXIT_USAGE;
      }
      not_elect = "--lease";
      break;
    case 2001:
      o->renew = false;
      not_elect = "--no-renew";
      break;
    case 2008: o->id = optarg; break;
    case 2003:
      if (parse_count(optarg, &o->permits) != 0 || o->permits < 1) {
        cli_err("bad --permits '%s' (1 or more)", optarg);
        return EXIT_USAGE;
      }
      kinds++;
      break;
    case 2004:
      o->fair = true;
      kinds++;
      break;
    case 2005:
      o->rd = true;
      kinds++;
      break;
    case 2006:
      o->wr = true;
      kinds++;
      break;
    case 2007:
      o->plain = true;
      kinds++;
      break;
    case 'E':
      if (parse_count(optarg, &o->conflict) != 0) {
        cli_err("bad --conflict-exit-code '%s' (0-255)", optarg);
        return EXIT_USAGE;
      }
      break;
    case 2002:
      if (dl_parse_duration(optarg, &o->grace_ms) != 0) {
        cli_err("bad duration for --kill-grace: '%s'", optarg);
        return EXIT_USAGE;
      }
      break;
    case '?':
      cli_err("unknown or incomplete option '%s' (see dlock %s --help)",
              argv[optind - 1], what);
      return EXIT_USAGE;
    default:
      if (cli_global_opt(g, opt, optarg) < 0) return EXIT_USAGE;
    }
  }
  if (elect && (kinds > 0 || not_elect)) {
    cli_err("%s is an option of dlock run, not of dlock elect",
            not_elect ? not_elect : "--fair/--plain/--read/--write/--permits");
    return EXIT_USAGE;
  }
  if (!elect && o->id) {
    cli_err("--id is an option of dlock elect");
    return EXIT_USAGE;
  }
  if (kinds > 1) {
    cli_err("--fair, --plain, --read, --write and --permits exclude each "
            "other");
    return EXIT_USAGE;
  }
  if (o->grace_ms > o->lease_ms && !elect) o->grace_ms = o->lease_ms;
  if (name == NULL) {
    cli_err("missing %s NAME (usage: dlock %s [options] NAME -- COMMAND)",
            elect ? "election" : "lock", what);
    return EXIT_USAGE;
  }
  if (dashes >= argc) {
    cli_err("missing '--' between NAME and COMMAND (usage: dlock %s "
            "[options] NAME -- COMMAND [ARG...])", what);
    return EXIT_USAGE;
  }
  if (extra != NULL) {
    cli_err("one %s NAME before '--', not '%s' and '%s' (usage: dlock %s "
            "[options] NAME -- COMMAND [ARG...])",
            elect ? "election" : "lock", name, extra, what);
    return EXIT_USAGE;
  }
  if (dashes + 1 >= argc) {
    cli_err("missing COMMAND after '--'");
    return EXIT_USAGE;
  }
  if (*name == '\0' || strlen(name) > DLOCK_NAME_MAX) {
    cli_err("the lock name must be 1 to %d bytes", DLOCK_NAME_MAX);
    return EXIT_USAGE;
  }
  o->name = name;
  o->cmd = argv + dashes + 1;
  return -1;
}

/* The handles of what o asks to hold, into *a. Returns 0 or a negative
 * code (the detail on c). */
static int make_handles(dlock_client *c, const run_opts *o, acq *a) {
  /* An explicit owner: the helper thread acquires, this thread releases. */
  char owner[32];
  snprintf(owner, sizeof owner, "%d", (int)getpid());
  int e;
  if (o->elect) {
    char host[200] = "?", pid_id[256];
    gethostname(host, sizeof host - 1);
    snprintf(pid_id, sizeof pid_id, "%s:%d", host, (int)getpid());
    e = dlock_leader_new(c, o->name, o->id ? o->id : pid_id, &a->leader);
    if (e == 0) e = dlock_leader_on_change(a->leader, on_leader, NULL);
    return e;
  }
  if (o->permits > 0) {
    /* At most `permits` holders: the first user sets the count. */
    e = dlock_permits_new(c, o->name, &a->permits);
    if (e == 0 && (e = dlock_permits_try_set(a->permits, o->permits)) > 0)
      e = 0;
    if (e == 0) dlock_permits_on_lost(a->permits, on_permit_lost, NULL);
    return e;
  }
  if (o->rd || o->wr) {
    e = dlock_rwlock_new(c, o->name, owner, &a->rw);
    a->lock = o->rd ? dlock_rwlock_read(a->rw) : dlock_rwlock_write(a->rw);
  } else if (o->fair) {
    e = dlock_fairlock_new(c, o->name, owner, 0, &a->lock);
  } else if (o->plain) {
    e = dlock_plainlock_new(c, o->name, owner, &a->lock);
  } else {
    e = dlock_lock_new(c, o->name, owner, &a->lock);
  }
  if (e == 0) {
    char info[DLOCK_INFO_MAX + 1];
    make_info(info, sizeof info, o->cmd);
    dlock_lock_set_info(a->lock, info);
    dlock_lock_on_lost(a->lock, on_lost, NULL);
  }
  return e;
}

/* Acquires on a helper thread while this one shows the wait and takes the
 * signals: returns once the helper is done (a->rc says how). A signal that
 * ends the wait ends the process. */
static void await_acquired(dlock_client *c, const cli_global *g,
                           const run_opts *o, acq *a, const sigset_t *set,
                           int64_t started) {
  bool tty_status = g->verbose >= 0 && isatty(STDERR_FILENO);
  pthread_create(&a->thread, NULL, acquire_thread, a);
  bool shown = false;
  for (;;) {
    int64_t next = tty_status ? cli_mono_ms() + (shown ? 500 : 300) : -1;
    int sig = cli_wait_signal(set, next);
    if (sig == SIGUSR2) break;
    if (sig == 0 && (a->lock || a->leader)) {
      show_waiting(a->lock, a->leader, o->name, started);
      shown = true;
    } else if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP ||
               sig == SIGQUIT) {
      /* Interrupted while waiting: leave, our place in the line first (a
       * zk:// waiter's node would hold up the next waiter until our
       * session times out): the wait ends at once, deletes it and says so
       * (SIGUSR2), within a second; then exit. A Redis waiter leaves no
       * such trace: at once. Had the lock just been granted, its lease
       * frees it (the watchdog dies with us); on zk:// the close does. */
      if (shown) clear_line();
      dlock_client_shutdown(c);
      int64_t until = cli_mono_ms() + 1000;
      bool zk = g->url && strncmp(g->url, "zk://", 5) == 0, ended = false;
      while (zk && !ended && cli_mono_ms() < until)
        ended = cli_wait_signal(set, until) == SIGUSR2;
      if (ended) { /* the session's end takes a node just granted too */
        pthread_join(a->thread, NULL);
        held_free(a);
        dlock_client_close(c);
      }
      _exit(128 + sig);
    }
  }
  pthread_join(a->thread, NULL);
  if (shown) clear_line();
}

/* Why a->rc (not 0) kept the hold from us, said; the status to exit with. */
static int not_acquired(const cli_global *g, const run_opts *o, acq *a) {
  if (a->rc != DLOCK_EBUSY) {
    cli_err("%s", a->err[0] ? a->err : dlock_strerror(a->rc));
    return cli_exit_for(a->rc);
  }
  char lid[200];
  if (g->verbose < 0) {
  } else if (a->leader) {
    if (dlock_leader_get_current(a->leader, lid, sizeof lid) == 1)
      cli_err("not elected to lead %s in time: the leader is %s", o->name,
              lid[0] ? lid : "(no id)");
    else
      cli_err("not elected to lead %s in time", o->name);
  } else if (a->permits) {
    cli_err("no permit of %s was free in time", o->name);
  } else {
    dlock_lock_state st;
    if (dlock_lock_inspect(a->lock, &st) == 0 && st.held) {
      char who[DLOCK_INFO_MAX + 64];
      cli_err("%s is held by %s", o->name,
              cli_holder_text(&st, who, sizeof who));
    } else {
      cli_err("%s was not acquired in time", o->name);
    }
  }
  return o->conflict;
}

/* COMMAND's environment: the name, the token (or permit), the URL without
 * its password, and the password where a nested dlock finds it. */
static void set_env(const cli_global *g, const run_opts *o, const acq *a) {
  char tok[32];
  snprintf(tok, sizeof tok, "%llu", (unsigned long long)a->token);
  char *pub = cli_url_public(g->url ? g->url : "redis://127.0.0.1:6379");
  setenv("DLOCK_NAME", o->name, 1);
  if (a->permits)
    setenv("DLOCK_PERMIT", a->id, 1);
  else setenv("DLOCK_TOKEN", tok, 1);
  setenv("DLOCK_URL", pub ? pub : "", 1);
  free(pub);
  /* The password goes in the environment, never in argv: a nested dlock
   * (or anything else) finds it there, whichever way it came to us. */
  if (g->password) setenv("DLOCK_PASSWORD", g->password, 1);
  else unsetenv("DLOCK_PASSWORD");
}

/* Did COMMAND hold it from its start to its end? The exit status says so:
 * 76 if the hold's validity ran out before COMMAND ended (looked at now
 * that it has, before the release: a stop past the lease leaves the
 * watchdog no time to report it first), or if the release cannot confirm
 * the hold (its answer lost, or late because a deadline ran on during the
 * stop), whatever COMMAND returned (rc). Releases. */
static int settle(dlock_client *c, const cli_global *g, const run_opts *o,
                  acq *a, bool ran, bool lost, int rc, int64_t acquired_at) {
  const char *cmd0 = o->cmd[0];
  bool expired = ran && !lost && !held_valid(a);
  if (lost || expired) {
    held_release(a); /* forgets the lost hold */
    if (expired)
      cli_err("%s %s ran out before %s ended (its lease was not renewed in "
              "time: was the process stopped?)",
              a->leader ? "the leadership of" : "lock", o->name, cmd0);
    return EXIT_LOST;
  }
  int e = held_release(a);
  if (e == DLOCK_ELOST) {
    cli_err("lock %s was lost before %s finished", o->name, cmd0);
    return EXIT_LOST;
  }
  if (e < 0 && ran) {
    cli_err("could not release %s, so nothing confirms %s held it to its "
            "end (it expires with its lease): %s",
            o->name, cmd0, dlock_client_errmsg(c));
    return EXIT_LOST;
  }
  if (e < 0)
    cli_err("could not release %s (it expires with its lease): %s", o->name,
            dlock_client_errmsg(c));
  else if (g->verbose > 0)
    cli_err("released %s after %lld ms", o->name,
            (long long)(cli_mono_ms() - acquired_at));
  return rc;
}

static int run_or_elect(int argc, char **argv, cli_global *g, bool elect) {
  run_opts o = {.elect = elect, .what = elect ? "elect" : "run"};
  int rc = parse_run(argc, argv, g, &o);
  if (rc >= 0) return rc;

  /* Block the signals we take ourselves, before any thread exists. */
  sigset_t set, orig;
  sigemptyset(&set);
  int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGUSR1, SIGUSR2};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
    sigaddset(&set, sigs[i]);
  sigset_t blocked = set;
  sigaddset(&blocked, SIGTTOU);
  pthread_sigmask(SIG_BLOCK, &blocked, &orig);

  rc = 0;
  dlock_client *c = cli_open(g, o.renew ? o.lease_ms : 0, &rc);
  if (c == NULL) return rc;
  /* ZooKeeper's session states (other backends have none: ENOTSUP). */
  if (g->verbose >= 0)
    dlock_client_on_state(c, cli_on_conn_state, (void *)o.name);
  acq a = {.wait_ms = o.wait_ms, .lease_ms = o.renew ? 0 : o.lease_ms, .c = c};
  int e = make_handles(c, &o, &a);
  if (e < 0) {
    cli_err("%s", dlock_client_errmsg(c));
    held_free(&a);
    dlock_client_close(c);
    return cli_exit_for(e);
  }

  int64_t started = cli_mono_ms();
  await_acquired(c, g, &o, &a, &set, started);
  if (a.rc != 0) {
    rc = not_acquired(g, &o, &a);
    held_free(&a);
    dlock_client_close(c);
    return rc;
  }
  int64_t acquired_at = cli_mono_ms();
  if (g->verbose > 0 && a.leader)
    cli_err("leading %s (token %llu) after %lld ms", o.name,
            (unsigned long long)a.token, (long long)(acquired_at - started));
  else if (g->verbose > 0 && a.permits)
    cli_err("took permit %s of %s after %lld ms", a.id, o.name,
            (long long)(acquired_at - started));
  else if (g->verbose > 0)
    cli_err("acquired %s (token %llu) after %lld ms", o.name,
            (unsigned long long)a.token, (long long)(acquired_at - started));

  set_env(g, &o, &a);
  char held[DLOCK_NAME_MAX + DLOCK_PERMIT_ID_LEN + 32];
  if (a.permits)
    snprintf(held, sizeof held, "permit %s of %s", a.id, o.name);
  else
    snprintf(held, sizeof held, "%s %s",
             a.leader ? "the leadership of" : "lock", o.name);
  bool ran, lost;
  rc = cli_run_child(o.cmd, held, o.grace_ms, g->verbose, &set, &orig, &ran,
                     &lost);
  if (rc < 0) { /* COMMAND could not start */
    held_release(&a);
    rc = EXIT_UNAVAILABLE;
  } else {
    rc = settle(c, g, &o, &a, ran, lost, rc, acquired_at);
  }
  held_free(&a);
  dlock_client_close(c);
  return rc;
}

int cmd_run(int argc, char **argv, cli_global *g) {
  return run_or_elect(argc, argv, g, false);
}

int cmd_elect(int argc, char **argv, cli_global *g) {
  for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
    if (strcmp(argv[i], "--listen") == 0)
      return cli_elect_listen(argc, argv, g);
  return run_or_elect(argc, argv, g, true);
}
