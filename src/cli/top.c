/* top.c: dlock top: observe.c's snapshot as a table, refreshed every
 * second on the terminal (plain ANSI sequences, keys to sort and to quit)
 * or printed round after round with -b, as top -b does. */
#include "duration.h"
#include "observe.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

static const char *usage_text =
    "usage: dlock top [-b] [-n N] [-d DURATION] [--latch NAME] [--queue "
    "NAME]\n                 [--semaphore NAME] [--election NAME] "
    "[PATTERN]\n"
    "A live view of every lock, read-write lock and semaphore whose name "
    "matches\nPATTERN (a glob, default *; on zk:// a path such as "
    "'/locks/*'), refreshed\nevery second: name, kind, how long it has been "
    "held, the lease left, the\nwaiters, the fencing token, a queue's depth, "
    "and the holder (host, pid,\ncommand). A dash: the backend cannot tell "
    "(see docs/OBSERVABILITY.md).\n"
    "  -b, --batch        plain tables on stdout, one per round, as top -b "
    "(also\n                     when stdout is not a terminal)\n"
    "  -n, --rounds N     stop after N rounds (default: until q or SIGINT)\n"
    "  -d, --delay D      between rounds (default 1s)\n"
    "  --latch NAME       also a count-down latch, --semaphore NAME a "
    "semaphore,\n                     --queue NAME a queue, --election "
    "NAME an election\n                     (each may repeat; the scan "
    "cannot find or tell them)\n"
    "Keys: n name, k kind, h held for, l lease, w waiters, t token, d "
    "depth,\nr reverse, q quit.\n"
    "Exit status: 0, 69 server trouble (batch mode), 64 usage.\n";

typedef struct top_opts {
  bool batch;
  long rounds; /* 0: no limit */
  int64_t delay_ms;
  const char *pattern;
  obs_named *named;
  size_t n;
  char sort; /* one of the keys */
  bool reverse;
  const char *backend;
  char *url; /* as shown: without a password */
} top_opts;

/* ---- the table ---- */

static char sort_key; /* for cmp: qsort has no context */

static int64_t key_of(const obs_obj *o) {
  switch (sort_key) {
  case 'h': return o->st.held ? o->st.held_ms : -1;
  case 'l': return o->st.held ? o->st.ttl_ms : -3;
  case 'w': return OBS_LOCKISH(o->kind) ? o->st.waiters : -1;
  case 't': return OBS_LOCKISH(o->kind) ? (int64_t)o->st.token : -1;
  case 'd': return o->depth;
  case 'k': return o->kind;
  }
  return 0;
}

static int cmp(const void *a, const void *b) {
  const obs_obj *x = a, *y = b;
  int64_t kx = key_of(x), ky = key_of(y);
  int r = 0;
  /* Numbers largest first (the lease: least left first), then by name. */
  if (kx != ky)
    r = sort_key == 'l' || sort_key == 'k' ? (kx < ky ? -1 : 1)
                                           : (kx < ky ? 1 : -1);
  return r ? r : strcmp(x->name, y->name);
}

static void sort_snap(obs_snap *s, const top_opts *o) {
  sort_key = o->sort;
  if (s->n > 1) qsort(s->v, s->n, sizeof *s->v, cmp);
  if (o->reverse)
    for (size_t i = 0; i < s->n / 2; i++) {
      obs_obj t = s->v[i];
      s->v[i] = s->v[s->n - 1 - i];
      s->v[s->n - 1 - i] = t;
    }
}

static const char *num(int64_t v, bool known, char *buf, size_t len) {
  if (!known || v < 0)
    snprintf(buf, len, "-");
  else
    snprintf(buf, len, "%lld", (long long)v);
  return buf;
}

/* The holder column: who, or what the object holds. */
static void what(const obs_obj *o, char *buf, size_t len) {
  const dlock_lock_state *st = &o->st;
  if (o->unsupported) {
    snprintf(buf, len, "(no %s on this backend)",
             o->kind == OBS_QUEUE       ? "queues"
             : o->kind == OBS_SEMAPHORE ? "semaphores"
                                        : "latches");
  } else if (o->kind == OBS_SEMAPHORE) {
    if (st->counter < 0)
      snprintf(buf, len, "(not set)");
    else if (st->permits_taken > 0)
      snprintf(buf, len, "%lld permit(s) free, %d taken",
               (long long)st->counter, st->permits_taken);
    else
      snprintf(buf, len, "%lld permit(s) free", (long long)st->counter);
  } else if (o->kind == OBS_LATCH) {
    snprintf(buf, len, "count %lld", (long long)st->counter);
  } else if (o->kind == OBS_QUEUE) {
    snprintf(buf, len, "%s", o->depth < 0 ? "(no queues on this backend)" : "");
  } else if (!st->held) {
    snprintf(buf, len, o->kind == OBS_ELECTION ? "(no leader)" : "(free)");
  } else {
    char h[DLOCK_INFO_MAX + 64];
    cli_holder_text(st, h, sizeof h);
    if (st->holders > 1)
      snprintf(buf, len, "%s (+%d more)", h, st->holders - 1);
    else
      snprintf(buf, len, "%s", h);
  }
}

/* One round's table in f: the header lines, then a row per object. */
static void render(FILE *f, const obs_snap *s, const top_opts *o, bool keys) {
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  int held = 0, waiting = 0;
  for (size_t i = 0; i < s->n; i++)
    if (OBS_LOCKISH(s->v[i].kind)) {
      held += s->v[i].st.held;
      waiting += s->v[i].st.waiters;
    }
  fprintf(f,
          "dlock top - %02d:%02d:%02d - %s %s - %zu object(s), %d held, "
          "%d waiting - read in %lld ms\n",
          tm.tm_hour, tm.tm_min, tm.tm_sec, o->backend, o->url ? o->url : "",
          s->n, held, waiting, (long long)s->took_ms);
  if (s->err) fprintf(f, "error: %s\n", s->errmsg);
  if (keys)
    fprintf(f,
            "sort: %c%s   keys: n name  k kind  h held  l lease  w "
            "waiters  t token  d depth  r reverse  q quit\n",
            o->sort, o->reverse ? " (reversed)" : "");
  fputc('\n', f);
  int w = 4, tw = 5; /* the name's and the token's widths */
  for (size_t i = 0; i < s->n; i++) {
    int l = (int)strlen(s->v[i].name);
    if (l > w) w = l > 40 ? 40 : l;
    l = snprintf(NULL, 0, "%llu", (unsigned long long)s->v[i].st.token);
    if (OBS_LOCKISH(s->v[i].kind) && l > tw) tw = l;
  }
  fprintf(f, "%-*s %-9s %7s %7s %5s %*s %6s  %s\n", w, "NAME", "KIND", "HELD",
          "LEASE", "WAIT", tw, "TOKEN", "DEPTH", "HOLDER");
  for (size_t i = 0; i < s->n; i++) {
    const obs_obj *x = &s->v[i];
    const dlock_lock_state *st = &x->st;
    bool lockk = OBS_LOCKISH(x->kind);
    char held_s[16], lease_s[16], wait_s[16], tok_s[24], depth_s[24];
    char who[DLOCK_INFO_MAX + 96];
    obs_duration(lockk && st->held ? st->held_ms : -1, held_s, sizeof held_s);
    obs_duration(lockk && st->held ? st->ttl_ms : -1, lease_s, sizeof lease_s);
    num(st->waiters, lockk, wait_s, sizeof wait_s);
    if (lockk && st->token > 0)
      snprintf(tok_s, sizeof tok_s, "%llu", (unsigned long long)st->token);
    else
      snprintf(tok_s, sizeof tok_s, "-");
    num(x->depth, x->kind == OBS_QUEUE, depth_s, sizeof depth_s);
    what(x, who, sizeof who);
    fprintf(f, "%-*s %-9s %7s %7s %5s %*s %6s  %s\n", w, x->name,
            obs_kind_name(x->kind), held_s, lease_s, wait_s, tw, tok_s, depth_s,
            who);
  }
}

/* ---- batch mode ---- */

static volatile sig_atomic_t stop_sig;
static volatile sig_atomic_t repaint; /* SIGWINCH, or a key: draw again */
static void on_stop(int sig) {
  stop_sig = sig;
}
static void on_winch(int sig) {
  (void)sig;
  repaint = 1;
}

/* Sleeps until `deadline` (cli_mono_ms) or a signal. */
static void pause_until(int64_t deadline) {
  int64_t left;
  while (!stop_sig && (left = deadline - cli_mono_ms()) > 0) {
    struct timespec ts = {left / 1000, (left % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
}

static int batch(dlock_client *c, const top_opts *o) {
  obs_snap s = {0};
  int rc = 0;
  for (long r = 0; !stop_sig && (o->rounds == 0 || r < o->rounds); r++) {
    int64_t t0 = cli_mono_ms();
    if (r > 0) putchar('\n');
    int e = obs_collect(c, o->pattern, o->named, o->n, &s);
    if (e != 0) {
      cli_err("%s", s.errmsg);
      rc = cli_exit_for(e);
      break;
    }
    sort_snap(&s, o);
    render(stdout, &s, o, false);
    fflush(stdout);
    if (o->rounds == 0 || r + 1 < o->rounds) pause_until(t0 + o->delay_ms);
  }
  obs_snap_clear(&s);
  return rc;
}

/* ---- the terminal ---- */

/* Writes `text` from the top left, each line cut to the screen's width
 * and the screen's height, the rest of the screen cleared. */
static void paint(const char *text) {
  struct winsize ws = {0};
  int rows = 24, cols = 80;
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0) {
    rows = ws.ws_row;
    cols = ws.ws_col;
  }
  fputs("\033[H", stdout);
  const char *p = text;
  for (int row = 0; row < rows && *p; row++) {
    size_t n = strcspn(p, "\n");
    fwrite(p, 1, n < (size_t)cols ? n : (size_t)cols, stdout);
    fputs("\033[K", stdout);
    p += n + (p[n] == '\n');
    if (row + 1 < rows && *p) fputs("\r\n", stdout);
  }
  fputs("\033[J", stdout);
  fflush(stdout);
}

static int interactive(dlock_client *c, top_opts *o) {
  struct termios orig, raw;
  bool tty_in = tcgetattr(STDIN_FILENO, &orig) == 0;
  if (tty_in) {
    raw = orig;
    raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    raw.c_cc[VMIN] = 1;
    raw.c_cc[VTIME] = 0;
    tcsetattr(STDIN_FILENO, TCSANOW, &raw);
  }
  fputs("\033[?1049h\033[?25l", stdout); /* the other screen, no cursor */
  obs_snap s = {0};
  char *text = NULL;
  size_t len = 0;
  int64_t next = 0;
  long r = 0;
  bool quit = false;
  while (!quit && !stop_sig) {
    bool redraw = false;
    if (cli_mono_ms() >= next) {
      if (o->rounds > 0 && r++ >= o->rounds) break;
      next = cli_mono_ms() + o->delay_ms;
      obs_collect(c, o->pattern, o->named, o->n, &s);
      redraw = true;
    }
    if (redraw || repaint) {
      repaint = 0;
      sort_snap(&s, o);
      FILE *f = open_memstream(&text, &len);
      if (f == NULL) break;
      render(f, &s, o, true);
      fclose(f);
      paint(text);
      free(text);
      text = NULL;
    }
    int64_t left = next - cli_mono_ms();
    /* Keys from a terminal only (stdin at /dev/null would end at once). */
    struct pollfd p = {tty_in ? STDIN_FILENO : -1, POLLIN, 0};
    int n = poll(&p, 1, left < 0 ? 0 : (int)left);
    if (n < 0 && errno != EINTR) break;
    if (n <= 0 || !(p.revents & (POLLIN | POLLHUP))) continue;
    char ch;
    if (read(STDIN_FILENO, &ch, 1) != 1) {
      quit = true; /* end of input */
    } else if (ch == 'q' || ch == 'Q' || ch == 3) {
      quit = true;
    } else if (ch == 'r') {
      o->reverse = !o->reverse;
      repaint = 1;
    } else if (strchr("nkhlwtd", ch) && ch) {
      o->sort = ch;
      repaint = 1;
    }
  }
  obs_snap_clear(&s);
  fputs("\033[?25h\033[?1049l", stdout);
  fflush(stdout);
  if (tty_in) tcsetattr(STDIN_FILENO, TCSANOW, &orig);
  return 0;
}

int cmd_top(int argc, char **argv, cli_global *g) {
  static const struct option longopts[] = {
      CLI_GLOBAL_LONGOPTS,
      {"batch", no_argument, 0, 'b'},
      {"rounds", required_argument, 0, 'n'},
      {"delay", required_argument, 0, 'd'},
      OBS_NAMED_LONGOPTS,
      {0, 0, 0, 0}};
  top_opts o = {.delay_ms = 1000, .sort = 'n'};
  int opt, rc = 0;
  while ((opt = getopt_long(argc, argv, CLI_GLOBAL_SHORTOPTS "bn:d:", longopts,
                            NULL)) != -1) {
    int r = obs_named_opt(opt, optarg, &o.named, &o.n);
    if (r < 0) {
      rc = EXIT_UNAVAILABLE;
      goto out;
    }
    if (r > 0) continue;
    char *end;
    if (opt == 'h') {
      fputs(usage_text, stdout);
      goto out;
    } else if (opt == 'b') {
      o.batch = true;
    } else if (opt == 'n') {
      o.rounds = strtol(optarg, &end, 10);
      if (*end || end == optarg || o.rounds < 1) {
        cli_err("-n %s: say a number of rounds, 1 or more", optarg);
        rc = EXIT_USAGE;
        goto out;
      }
    } else if (opt == 'd') {
      if (dl_parse_duration(optarg, &o.delay_ms) != 0 || o.delay_ms < 10) {
        cli_err("-d %s: say a duration of 10ms or more (250ms, 1s)", optarg);
        rc = EXIT_USAGE;
        goto out;
      }
    } else if (opt == '?') {
      cli_err("unknown option '%s' (see dlock top --help)", argv[optind - 1]);
      rc = EXIT_USAGE;
      goto out;
    } else if (cli_global_opt(g, opt, optarg) < 0) {
      rc = EXIT_USAGE;
      goto out;
    }
  }
  if (argc - optind > 1) {
    cli_err("usage: dlock top [-b] [-n N] [-d DURATION] [PATTERN]");
    rc = EXIT_USAGE;
    goto out;
  }
  o.pattern = optind < argc ? argv[optind] : NULL;
  o.backend = obs_backend(g->url);
  o.url = cli_url_public(g->url ? g->url : "redis://127.0.0.1:6379");
  dlock_client *c = cli_open(g, 0, &rc);
  if (c != NULL) {
    struct sigaction sa = {.sa_handler = on_stop}; /* no SA_RESTART */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sa.sa_handler = on_winch;
    sigaction(SIGWINCH, &sa, NULL);
    if (o.batch || !isatty(STDOUT_FILENO))
      rc = batch(c, &o);
    else
      rc = interactive(c, &o);
    dlock_client_close(c);
  }
  free(o.url);
out:
  free(o.named);
  return rc;
}
