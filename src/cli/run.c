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

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for one of `set` until deadline_ms (-1 = forever). Returns the
 * signal, or 0 on timeout. */
static int wait_signal(const sigset_t *set, int64_t deadline_ms) {
  for (;;) {
    int sig;
    if (deadline_ms < 0) {
      sig = sigwaitinfo(set, NULL);
    } else {
      int64_t left = deadline_ms - mono_ms();
      if (left <= 0) return 0;
      struct timespec ts = {left / 1000, (left % 1000) * 1000000L};
      sig = sigtimedwait(set, NULL, &ts);
      if (sig < 0 && errno == EAGAIN) return 0;
    }
    if (sig > 0) return sig;
  }
}

/* The one status line shown on a terminal while waiting. */
static void show_waiting(dlock_lock *l, dlock_leader *ld, const char *name,
                         int64_t since) {
  dlock_lock_state st;
  char line[600];
  double waited = (double)(mono_ms() - since) / 1000;
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

/* Child side: own process group (foreground on the terminal if we were),
 * environment, exec. Reports exec's errno on `errfd` and exits 127. */
static void child(char **cmd, int errfd, const sigset_t *orig,
                  bool take_tty) {
  setpgid(0, 0);
  if (take_tty) tcsetpgrp(STDIN_FILENO, getpid()); /* SIGTTOU is blocked */
  for (int s = 1; s < NSIG; s++)
    if (s != SIGKILL && s != SIGSTOP) signal(s, SIG_DFL);
  sigprocmask(SIG_SETMASK, orig, NULL);
  execvp(cmd[0], cmd);
  int e = errno;
  if (write(errfd, &e, sizeof e) != sizeof e) _exit(EXIT_NOTFOUND);
  _exit(EXIT_NOTFOUND);
}

static int parse_count(const char *s, int *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < 0 || v > 255) return -1;
  *out = (int)v;
  return 0;
}

static int run_or_elect(int argc, char **argv, cli_global *g, bool elect);

int cmd_run(int argc, char **argv, cli_global *g) {
  return run_or_elect(argc, argv, g, false);
}

int cmd_elect(int argc, char **argv, cli_global *g) {
  return run_or_elect(argc, argv, g, true);
}

static int run_or_elect(int argc, char **argv, cli_global *g, bool elect) {
  const char *what = elect ? "elect" : "run";
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
  int64_t wait_ms = -1, lease_ms = 30000, grace_ms = 5000;
  bool renew = true, grace_set = false;
  int permits = 0, kinds = 0;
  bool fair = false, rd = false, wr = false, plain = false;
  const char *id = NULL, *not_elect = NULL;
  int conflict = EXIT_CONFLICT;
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
      if (dl_parse_duration(optarg, &wait_ms) != 0) {
        cli_err("bad duration for --wait: '%s' (e.g. 250ms, 30s, 5m, 1h)",
                optarg);
        return EXIT_USAGE;
      }
      break;
    case 'l':
      if (dl_parse_duration(optarg, &lease_ms) != 0 || lease_ms < 3) {
        cli_err("bad duration for --lease: '%s' (e.g. 30s; at least 3ms)",
                optarg);
        return EXIT_USAGE;
      }
      not_elect = "--lease";
      break;
    case 2001: renew = false; not_elect = "--no-renew"; break;
    case 2008: id = optarg; break;
    case 2003:
      if (parse_count(optarg, &permits) != 0 || permits < 1) {
        cli_err("bad --permits '%s' (1 or more)", optarg);
        return EXIT_USAGE;
      }
      kinds++;
      break;
    case 2004: fair = true; kinds++; break;
    case 2005: rd = true; kinds++; break;
    case 2006: wr = true; kinds++; break;
    case 2007: plain = true; kinds++; break;
    case 'E':
      if (parse_count(optarg, &conflict) != 0) {
        cli_err("bad --conflict-exit-code '%s' (0-255)", optarg);
        return EXIT_USAGE;
      }
      break;
    case 2002:
      if (dl_parse_duration(optarg, &grace_ms) != 0) {
        cli_err("bad duration for --kill-grace: '%s'", optarg);
        return EXIT_USAGE;
      }
      grace_set = true;
      break;
    case '?':
      cli_err("unknown or incomplete option '%s' (see dlock %s --help)",
              argv[optind - 1], what);
      return EXIT_USAGE;
    default:
      if (cli_global_opt(g, opt, optarg) < 0) return EXIT_USAGE;
    }
  }
  (void)grace_set;
  if (elect && (kinds > 0 || not_elect)) {
    cli_err("%s is an option of dlock run, not of dlock elect",
            not_elect ? not_elect : "--fair/--plain/--read/--write/--permits");
    return EXIT_USAGE;
  }
  if (!elect && id) {
    cli_err("--id is an option of dlock elect");
    return EXIT_USAGE;
  }
  if (kinds > 1) {
    cli_err("--fair, --plain, --read, --write and --permits exclude each "
            "other");
    return EXIT_USAGE;
  }
  if (grace_ms > lease_ms && !elect) grace_ms = lease_ms;
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
  char **cmd = argv + dashes + 1;
  if (*name == '\0' || strlen(name) > DLOCK_NAME_MAX) {
    cli_err("the lock name must be 1 to %d bytes", DLOCK_NAME_MAX);
    return EXIT_USAGE;
  }

  /* Block the signals we take ourselves, before any thread exists. */
  sigset_t set, orig;
  sigemptyset(&set);
  int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGUSR1, SIGUSR2};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
    sigaddset(&set, sigs[i]);
  sigset_t blocked = set;
  sigaddset(&blocked, SIGTTOU);
  pthread_sigmask(SIG_BLOCK, &blocked, &orig);

  int rc = 0;
  dlock_client *c = cli_open(g, renew ? lease_ms : 0, &rc);
  if (c == NULL) return rc;
  /* ZooKeeper's session states (other backends have none: ENOTSUP). */
  if (g->verbose >= 0)
    dlock_client_on_state(c, cli_on_conn_state, (void *)name);
  /* An explicit owner: the helper thread acquires, this thread releases. */
  char owner[32];
  snprintf(owner, sizeof owner, "%d", (int)getpid());
  acq a = {.wait_ms = wait_ms, .lease_ms = renew ? 0 : lease_ms, .c = c};
  int e;
  if (elect) {
    char host[200] = "?", pid_id[256];
    gethostname(host, sizeof host - 1);
    snprintf(pid_id, sizeof pid_id, "%s:%d", host, (int)getpid());
    e = dlock_leader_new(c, name, id ? id : pid_id, &a.leader);
    if (e == 0) e = dlock_leader_on_change(a.leader, on_leader, NULL);
  } else if (permits > 0) {
    /* At most `permits` holders: the first user sets the count. */
    e = dlock_permits_new(c, name, &a.permits);
    if (e == 0 && (e = dlock_permits_try_set(a.permits, permits)) > 0) e = 0;
    if (e == 0) dlock_permits_on_lost(a.permits, on_permit_lost, NULL);
  } else {
    if (rd || wr) {
      e = dlock_rwlock_new(c, name, owner, &a.rw);
      a.lock = rd ? dlock_rwlock_read(a.rw) : dlock_rwlock_write(a.rw);
    } else if (fair) {
      e = dlock_fairlock_new(c, name, owner, 0, &a.lock);
    } else if (plain) {
      e = dlock_plainlock_new(c, name, owner, &a.lock);
    } else {
      e = dlock_lock_new(c, name, owner, &a.lock);
    }
    if (e == 0) {
      char info[DLOCK_INFO_MAX + 1];
      make_info(info, sizeof info, cmd);
      dlock_lock_set_info(a.lock, info);
      dlock_lock_on_lost(a.lock, on_lost, NULL);
    }
  }
  if (e < 0) {
    cli_err("%s", dlock_client_errmsg(c));
    held_free(&a);
    dlock_client_close(c);
    return cli_exit_for(e);
  }
  dlock_lock *l = a.lock;

  /* ---- acquire, on a helper thread; signals and the status line here ---- */
  int64_t started = mono_ms();
  bool tty_status = g->verbose >= 0 && isatty(STDERR_FILENO);
  pthread_create(&a.thread, NULL, acquire_thread, &a);
  bool shown = false;
  for (;;) {
    int64_t next = tty_status ? mono_ms() + (shown ? 500 : 300) : -1;
    int sig = wait_signal(&set, next);
    if (sig == SIGUSR2) break;
    if (sig == 0 && (l || a.leader)) {
      show_waiting(l, a.leader, name, started);
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
      int64_t until = mono_ms() + 1000;
      bool zk = g->url && strncmp(g->url, "zk://", 5) == 0, ended = false;
      while (zk && !ended && mono_ms() < until)
        ended = wait_signal(&set, until) == SIGUSR2;
      if (ended) { /* the session's end takes a node just granted too */
        pthread_join(a.thread, NULL);
        held_free(&a);
        dlock_client_close(c);
      }
      _exit(128 + sig);
    }
  }
  pthread_join(a.thread, NULL);
  if (shown) clear_line();
  if (a.rc != 0) {
    if (a.rc == DLOCK_EBUSY) {
      char lid[200];
      if (g->verbose >= 0 && a.leader) {
        if (dlock_leader_get_current(a.leader, lid, sizeof lid) == 1)
          cli_err("not elected to lead %s in time: the leader is %s", name,
                  lid[0] ? lid : "(no id)");
        else
          cli_err("not elected to lead %s in time", name);
      } else if (g->verbose >= 0 && a.permits) {
        cli_err("no permit of %s was free in time", name);
      } else if (g->verbose >= 0) {
        dlock_lock_state st;
        if (dlock_lock_inspect(l, &st) == 0 && st.held) {
          char who[DLOCK_INFO_MAX + 64];
          cli_err("%s is held by %s", name,
                  cli_holder_text(&st, who, sizeof who));
        } else {
          cli_err("%s was not acquired in time", name);
        }
      }
      rc = conflict;
    } else {
      cli_err("%s", a.err[0] ? a.err : dlock_strerror(a.rc));
      rc = cli_exit_for(a.rc);
    }
    held_free(&a);
    dlock_client_close(c);
    return rc;
  }
  int64_t acquired_at = mono_ms();
  if (g->verbose > 0 && a.leader)
    cli_err("leading %s (token %llu) after %lld ms", name,
            (unsigned long long)a.token, (long long)(acquired_at - started));
  else if (g->verbose > 0 && a.permits)
    cli_err("took permit %s of %s after %lld ms", a.id, name,
            (long long)(acquired_at - started));
  else if (g->verbose > 0)
    cli_err("acquired %s (token %llu) after %lld ms", name,
            (unsigned long long)a.token, (long long)(acquired_at - started));

  /* ---- run COMMAND ---- */
  char tok[32];
  snprintf(tok, sizeof tok, "%llu", (unsigned long long)a.token);
  char *pub = cli_url_public(g->url ? g->url : "redis://127.0.0.1:6379");
  setenv("DLOCK_NAME", name, 1);
  if (a.permits) setenv("DLOCK_PERMIT", a.id, 1);
  else setenv("DLOCK_TOKEN", tok, 1);
  setenv("DLOCK_URL", pub ? pub : "", 1);
  free(pub);
  /* The password goes in the environment, never in argv: a nested dlock
   * (or anything else) finds it there, whichever way it came to us. */
  if (g->password) setenv("DLOCK_PASSWORD", g->password, 1);
  else unsetenv("DLOCK_PASSWORD");
  bool take_tty = isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp();
  int errpipe[2];
  if (pipe2(errpipe, O_CLOEXEC) != 0) {
    cli_err("pipe: %s", strerror(errno));
    held_release(&a);
    held_free(&a);
    dlock_client_close(c);
    return EXIT_UNAVAILABLE;
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(errpipe[0]);
    child(cmd, errpipe[1], &orig, take_tty);
  }
  close(errpipe[1]);
  if (pid < 0) {
    cli_err("fork: %s", strerror(errno));
    close(errpipe[0]);
    held_release(&a);
    held_free(&a);
    dlock_client_close(c);
    return EXIT_UNAVAILABLE;
  }
  setpgid(pid, pid); /* also here: no race with signals we forward */
  int exec_errno = 0;
  ssize_t got = read(errpipe[0], &exec_errno, sizeof exec_errno);
  close(errpipe[0]);
  int status = 0;
  bool lost = false;
  if (got == (ssize_t)sizeof exec_errno) { /* exec failed */
    waitpid(pid, &status, 0);
    cli_err("%s: %s", cmd[0], exec_errno == ENOENT ? "command not found"
                                                   : strerror(exec_errno));
    rc = exec_errno == ENOENT ? EXIT_NOTFOUND : EXIT_NOEXEC;
  } else {
    /* The library reports a loss of any kind (a fixed lease that ends
     * included, at its validity's end) through on_lost: SIGUSR1. */
    int64_t kill_at = -1;
    for (;;) {
      int sig = wait_signal(&set, kill_at);
      if (sig == SIGCHLD) {
        if (waitpid(pid, &status, WNOHANG) == pid) break;
        continue;
      }
      if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT) {
        if (g->verbose > 0) cli_err("forwarding signal %d", sig);
        kill(-pid, sig);
        continue;
      }
      if (sig == 0 && kill_at >= 0) {
        kill(-pid, SIGKILL);
        kill_at = -1;
        continue;
      }
      if (sig == SIGUSR1 && !lost) {
        /* Lost: the lease could not be renewed, it was taken or
         * force-released, or a fixed lease ran out. */
        lost = true;
        if (g->verbose >= 0)
          cli_err("lost %s %s; stopping %s (SIGTERM, SIGKILL in %lld ms)",
                  a.leader ? "the leadership of" : "lock", name, cmd[0],
                  (long long)grace_ms);
        kill(-pid, SIGTERM);
        kill_at = mono_ms() + grace_ms;
      }
    }
    if (WIFEXITED(status)) rc = WEXITSTATUS(status);
    else if (WIFSIGNALED(status)) rc = 128 + WTERMSIG(status);
  }
  if (take_tty) tcsetpgrp(STDIN_FILENO, getpgrp());

  /* ---- did COMMAND hold it from its start to its end? ----
   * The exit status says so: 76 if the hold's validity ran out before
   * COMMAND ended (looked at now that it has, before the release: a stop
   * past the lease leaves the watchdog no time to report it first), or if
   * the release cannot confirm the hold (its answer lost, or late because
   * a deadline ran on during the stop), whatever COMMAND returned. */
  bool ran = got != (ssize_t)sizeof exec_errno;
  bool expired = ran && !lost && !held_valid(&a);
  if (lost || expired) {
    held_release(&a); /* forgets the lost hold */
    if (expired)
      cli_err("%s %s ran out before %s ended (its lease was not renewed in "
              "time: was the process stopped?)",
              a.leader ? "the leadership of" : "lock", name, cmd[0]);
    rc = EXIT_LOST;
  } else {
    e = held_release(&a);
    if (e == DLOCK_ELOST) {
      cli_err("lock %s was lost before %s finished", name, cmd[0]);
      rc = EXIT_LOST;
    } else if (e < 0 && ran) {
      cli_err("could not release %s, so nothing confirms %s held it to its "
              "end (it expires with its lease): %s",
              name, cmd[0], dlock_client_errmsg(c));
      rc = EXIT_LOST;
    } else if (e < 0) {
      cli_err("could not release %s (it expires with its lease): %s", name,
              dlock_client_errmsg(c));
    } else if (g->verbose > 0) {
      cli_err("released %s after %lld ms", name,
              (long long)(mono_ms() - acquired_at));
    }
  }
  held_free(&a);
  dlock_client_close(c);
  return rc;
}
