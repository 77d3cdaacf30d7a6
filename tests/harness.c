/* harness.c: the test runner (a process per test) and redis-server
 * management for the tests. */
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int th_failed_checks;
th_redis th_srv;

/* The run's temp dir, "" outside th_run (th_tmpdir() is then "/tmp"). */
static char tmpdir[64];

const char *th_tmpdir(void) { return tmpdir[0] ? tmpdir : "/tmp"; }

/* Servers still running, by value, with the process that started them: a
 * test that fails a CHECK returns early and its th_redis (often on its
 * stack) is gone, yet the servers it started must be stopped. A forked test
 * inherits the runner's entries and must leave those to the runner. */
static struct {
  pid_t pid;
  pid_t owner;
  char dir[256];
} live[16];

static void rm_dir(const char *dir) {
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

/* Stops the servers this process started (at exit, and on a failed test). */
static void cleanup_all(void) {
  pid_t self = getpid();
  for (int i = 0; i < 16; i++) {
    if (live[i].owner != self) continue;
    if (live[i].pid > 0) {
      kill(live[i].pid, SIGCONT);
      kill(live[i].pid, SIGKILL);
      waitpid(live[i].pid, NULL, 0);
    }
    if (live[i].dir[0]) rm_dir(live[i].dir);
    live[i].pid = 0;
    live[i].owner = 0;
    live[i].dir[0] = '\0';
  }
}

/* The test process the runner waits for, killed with its group on a signal
 * to the runner (it is not in the runner's group: no terminal's ^C). */
static volatile pid_t running_test;

static void on_signal(int sig) {
  if (running_test > 0) kill(-running_test, SIGKILL);
  pid_t self = getpid();
  for (int i = 0; i < 16; i++)
    if (live[i].pid > 0 && live[i].owner == self) kill(live[i].pid, SIGKILL);
  signal(sig, SIG_DFL);
  raise(sig);
}

void th__track(pid_t pid, const char *dir) {
  int slot = -1;
  for (int i = 0; i < 16 && slot < 0; i++)
    if (strcmp(live[i].dir, dir) == 0) slot = i;
  for (int i = 0; i < 16 && slot < 0; i++)
    if (live[i].dir[0] == '\0') slot = i;
  if (slot < 0) return;
  live[slot].pid = pid;
  live[slot].owner = getpid();
  snprintf(live[slot].dir, sizeof live[slot].dir, "%s", dir);
}

void th__untrack(const char *dir) {
  for (int i = 0; i < 16; i++)
    if (strcmp(live[i].dir, dir) == 0) {
      live[i].pid = 0;
      live[i].owner = 0;
      live[i].dir[0] = '\0';
    }
}

static void track(th_redis *r) { th__track(r->pid, r->dir); }
static void untrack(th_redis *r) { th__untrack(r->dir); }

int64_t th_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void th_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

bool th_wait_for(bool (*cond)(void *), void *arg, int timeout_ms) {
  int64_t end = th_now_ms() + timeout_ms;
  for (;;) {
    if (cond(arg)) return true;
    if (th_now_ms() >= end) return false;
    th_sleep_ms(2);
  }
}

/* ---- the runner ---- */

static const char *signal_name(int sig) {
  switch (sig) {
  case SIGABRT: return "SIGABRT";
  case SIGALRM: return "SIGALRM";
  case SIGBUS: return "SIGBUS";
  case SIGFPE: return "SIGFPE";
  case SIGHUP: return "SIGHUP";
  case SIGILL: return "SIGILL";
  case SIGINT: return "SIGINT";
  case SIGKILL: return "SIGKILL";
  case SIGPIPE: return "SIGPIPE";
  case SIGQUIT: return "SIGQUIT";
  case SIGSEGV: return "SIGSEGV";
  case SIGSYS: return "SIGSYS";
  case SIGTERM: return "SIGTERM";
  case SIGTRAP: return "SIGTRAP";
  case SIGUSR1: return "SIGUSR1";
  case SIGUSR2: return "SIGUSR2";
  default: return "?";
  }
}

static int timeout_s(void) {
  const char *e = getenv("DLOCK_TEST_TIMEOUT_S");
  int s = e ? atoi(e) : 0;
  return s > 0 ? s : 120;
}

/* How a test's process says a CHECK failed: not 1, which is what
 * LeakSanitizer exits with by default. */
#define CHECK_FAILED_EXIT 99

/* The failed CHECKs of the test's process and what the first said, told to
 * the runner in a page both share: valgrind turns the exit status of a
 * test that failed a CHECK (and so left its clients open) into its own 3
 * for the leaks, and its leak report buries the CHECK's line. */
typedef struct told {
  _Atomic int checks;
  char first[240];
} told;
static told *told_checks;

void th_check_failed(const char *fmt, ...) {
  char line[sizeof told_checks->first];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "    %s\n", line);
  if (th_failed_checks++ == 0 && told_checks)
    memcpy(told_checks->first, line, sizeof line);
}

/* The test's own process: runs it and exits CHECK_FAILED_EXIT if a CHECK
 * failed, else through exit(0), where the leak checkers look. */
static void run_child(const th_test *t, pid_t runner, const sigset_t *mask) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the runner */
  if (getppid() != runner) _exit(1);
  sigprocmask(SIG_SETMASK, mask, NULL);
  setvbuf(stdout, NULL, _IOLBF, 0); /* what it printed survives a crash */
  th_failed_checks = 0;
  t->fn();
  fflush(stdout);
  fflush(stderr);
  if (th_failed_checks) {
    if (told_checks) told_checks->checks = th_failed_checks;
    /* Threads of the failed test may still run: no exit handlers beyond
     * stopping our servers, and no leak report on top of the failure. */
    cleanup_all();
    _exit(CHECK_FAILED_EXIT);
  }
  exit(0);
}

/* Waits for the test's process at most `secs`, SIGCHLD being blocked; then
 * kills whatever is left of its group (helpers the test forked, servers it
 * started) and reaps it. Returns its wait status, or -1 on the timeout. */
static int await_test(pid_t pid, int secs) {
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  int64_t end = th_now_ms() + (int64_t)secs * 1000;
  bool timed_out = false;
  for (;;) {
    siginfo_t si = {0};
    /* WNOWAIT: the pid, and so the group id, stays ours until the kill. */
    if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        si.si_pid == pid)
      break;
    int64_t left = end - th_now_ms();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    struct timespec ts = {left / 1000, (long)(left % 1000) * 1000000L};
    sigtimedwait(&chld, NULL, &ts); /* any child: look again */
  }
  kill(-pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return timed_out ? -1 : status;
}

/* Runs one test, in a process of its own if fork_each; if it failed, says
 * why in `why`. */
static void run_one(const th_test *t, bool fork_each, const sigset_t *mask,
                    char *why, size_t len) {
  if (!fork_each) {
    int before = th_failed_checks;
    t->fn();
    if (th_failed_checks != before) snprintf(why, len, ": a CHECK failed");
    return;
  }
  fflush(stdout);
  fflush(stderr);
  if (told_checks) {
    told_checks->checks = 0;
    told_checks->first[0] = '\0';
  }
  pid_t runner = getpid(), pid = fork();
  if (pid == 0) run_child(t, runner, mask);
  if (pid < 0) {
    snprintf(why, len, ": cannot fork: %s", strerror(errno));
    return;
  }
  setpgid(pid, pid); /* as the child does: no race with the kill */
  running_test = pid;
  int secs = timeout_s();
  int st = await_test(pid, secs);
  running_test = 0;
  if (st == -1)
    snprintf(why, len, ": timed out after %d s, killed", secs);
  else if (WIFSIGNALED(st))
    snprintf(why, len, ": killed by signal %d (%s)", WTERMSIG(st),
             signal_name(WTERMSIG(st)));
  else if (WEXITSTATUS(st) == CHECK_FAILED_EXIT)
    snprintf(why, len, ": a CHECK failed: %s",
             told_checks ? told_checks->first : "(above)");
  else if (told_checks && told_checks->checks > 0)
    snprintf(why, len,
             ": a CHECK failed (exit status %d: valgrind's leak report of "
             "the clients it left open above); the first: %s",
             WEXITSTATUS(st), told_checks->first);
  else if (WEXITSTATUS(st) != 0) /* valgrind's 3, LeakSanitizer's 1 */
    snprintf(why, len, ": exit status %d (a report above?)", WEXITSTATUS(st));
}

static int run(int argc, char **argv, const th_test *tests, size_t n,
               int (*before_all)(void), bool fork_each) {
  for (int a = 1; a < argc; a++) {
    bool known = false;
    for (size_t i = 0; i < n; i++)
      if (strcmp(argv[a], tests[i].name) == 0) known = true;
    if (!known) {
      fprintf(stderr, "%s: no test named %s\n", argv[0], argv[a]);
      return 2;
    }
  }
  /* Nested runs (test_harness runs the runner inside a test) keep ours. */
  char outer_tmpdir[sizeof tmpdir];
  memcpy(outer_tmpdir, tmpdir, sizeof tmpdir);
  snprintf(tmpdir, sizeof tmpdir, "/tmp/dlock-test-XXXXXX");
  if (mkdtemp(tmpdir) == NULL) {
    fprintf(stderr, "cannot make a temp dir: %s\n", strerror(errno));
    return 2;
  }
  if (fork_each && told_checks == NULL) {
    void *page = mmap(NULL, sizeof *told_checks, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (page != MAP_FAILED) told_checks = page;
  }
  atexit(cleanup_all);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  signal(SIGPIPE, SIG_IGN);
  sigset_t chld, mask; /* SIGCHLD blocked: await_test waits for it */
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, fork_each ? &chld : NULL, &mask);
  int passed = 0, failed = 0, status = 0;
  if (before_all && before_all() != 0) {
    fprintf(stderr, "%s: the suite's setup failed\n", argv[0]);
    status = 2;
  }
  for (size_t i = 0; i < n && status == 0; i++) {
    if (argc > 1) {
      bool want = false;
      for (int a = 1; a < argc; a++)
        if (strcmp(argv[a], tests[i].name) == 0) want = true;
      if (!want) continue;
    }
    char why[512] = "";
    int64_t took = 0;
    if (tests[i].redis && th_redis_start(&th_srv, tests[i].redis) != 0) {
      snprintf(why, sizeof why, ": cannot start redis-server %s",
               tests[i].redis);
    } else {
      int64_t t0 = th_now_ms();
      run_one(&tests[i], fork_each, &mask, why, sizeof why);
      took = th_now_ms() - t0;
    }
    if (th_after_each) th_after_each();
    if (tests[i].redis) th_redis_stop(&th_srv);
    printf("%s %s (%lld ms)%s\n", why[0] ? "FAIL" : "ok  ", tests[i].name,
           (long long)took, why);
    fflush(stdout);
    if (why[0]) failed++;
    else passed++;
  }
  if (status == 0) {
    printf("%d passed, %d failed\n", passed, failed);
    status = failed ? 1 : 0;
  }
  fflush(stdout);
  sigprocmask(SIG_SETMASK, &mask, NULL);
  rm_dir(tmpdir);
  memcpy(tmpdir, outer_tmpdir, sizeof tmpdir);
  return status;
}

void (*th_after_each)(void);

int th_run(int argc, char **argv, const th_test *tests, size_t n,
           int (*before_all)(void)) {
  return run(argc, argv, tests, n, before_all, true);
}

int th_run_inline(int argc, char **argv, const th_test *tests, size_t n) {
  return run(argc, argv, tests, n, NULL, false);
}

bool th_port_free(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  bool ok = bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
  close(fd);
  return ok;
}

/* Ports handed out by th_free_port are reserved across processes until
 * the process that drew them exits: an flock on /tmp/dlock-test-ports/PORT,
 * its fd kept open (and inherited by a forked test). Without it a server
 * killed by a test left its port free until its restart, and a test in
 * another process (ctest -j2) could draw it meanwhile, so the restart
 * failed. A port whose reservation cannot be made (no room left) is still
 * handed out if no other process holds it, guarded by the checks alone. */
static int reserved_fd[256];
static unsigned nreserved;

/* Takes the reservation of port: 1 taken, 0 held by another process (or by
 * this one already), -1 no reservation possible (no dir, no room). */
static int reserve(int port) {
  static const char dir[] = "/tmp/dlock-test-ports";
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) return -1;
  char path[64];
  snprintf(path, sizeof path, "%s/%d", dir, port);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return -1;
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    close(fd);
    return e == EWOULDBLOCK ? 0 : -1;
  }
  if (nreserved >= sizeof reserved_fd / sizeof reserved_fd[0]) {
    close(fd); /* not held elsewhere, but no room to keep it */
    return -1;
  }
  reserved_fd[nreserved++] = fd;
  return 1;
}

/* Gives back the reservations taken since there were `mark` (a port found
 * bound after all, or its bus port another process's). */
static void unreserve_to(unsigned mark) {
  while (nreserved > mark) close(reserved_fd[--nreserved]);
}

bool th_port_reserved(int port) {
  char path[64];
  snprintf(path, sizeof path, "/tmp/dlock-test-ports/%d", port);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  bool held = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close(fd);
  return held;
}

/* A port below the kernel's ephemeral range (32768 and up here): the
 * local port of some test's outgoing connection can never take it while
 * a server restarts on it (which made reconnect tests flaky), and a
 * cluster node's bus port (+10000) stays below it too. Drawn at random,
 * seeded by the pid, so that concurrent tests rarely try the same; the
 * port and, when it is in the range too, its bus port are reserved
 * (above). */
int th_free_port(void) {
  static _Thread_local unsigned seed;
  static _Thread_local pid_t seeded_by;
  if (seeded_by != getpid()) {
    seeded_by = getpid();
    seed = (unsigned)getpid() * 2654435761u ^ (unsigned)th_now_ms();
  }
  /* The last ports handed out here, not yet bound by their servers,
   * are not handed out again (a server's client and peer ports). */
  static _Thread_local int given[32];
  static _Thread_local unsigned ngiven;
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  for (int tries = 0; tries < 500; tries++) {
    int port = 10000 + (int)(rand_r(&seed) % 12000); /* 10000..21999 */
    bool again = false;
    for (unsigned i = 0; i < 32 && !again; i++)
      again = given[i] == port;
    if (again) continue;
    pthread_mutex_lock(&mu);
    unsigned mark = nreserved;
    int bus = port + 10000;
    bool ok = reserve(port) != 0 && (bus > 21999 || reserve(bus) != 0) &&
              th_port_free(port);
    if (!ok) unreserve_to(mark);
    pthread_mutex_unlock(&mu);
    if (!ok) continue;
    given[ngiven++ % 32] = port;
    return port;
  }
  return -1;
}

pid_t th__spawn(const char *cmd) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
  sigset_t none; /* the runner blocks SIGCHLD; a server must not */
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
  _exit(127);
}

static int spawn(th_redis *r) {
  char args[2048];
  snprintf(args, sizeof args,
           "--port %d --bind 127.0.0.1 --unixsocket %s --unixsocketperm 700 "
           "--dir %s --save '' --appendonly no --daemonize no "
           "--logfile %s/redis.log %s",
           r->port, r->sock, r->dir, r->dir, r->extra);
  char cmd[2700];
  if (r->sentinel)
    snprintf(cmd, sizeof cmd, "exec redis-server %s/sentinel.conf "
             "--sentinel %s", r->dir, args);
  else
    snprintf(cmd, sizeof cmd, "exec redis-server %s", args);
  pid_t pid = th__spawn(cmd);
  if (pid < 0) return -1;
  r->pid = pid;
  track(r);
  int64_t end = th_now_ms() + 10000;
  while (th_now_ms() < end) {
    redisContext *c = redisConnectUnix(r->sock);
    if (c && !c->err) {
      redisReply *rep = redisCommand(c, "PING");
      bool ok = rep && rep->type != REDIS_REPLY_ERROR;
      /* LOADING or NOAUTH both prove the server is up. */
      if (rep && rep->type == REDIS_REPLY_ERROR &&
          strncmp(rep->str, "NOAUTH", 6) == 0)
        ok = true;
      if (rep) freeReplyObject(rep);
      redisFree(c);
      if (ok) return 0;
    } else if (c) {
      redisFree(c);
    }
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      r->pid = 0;
      return -1;
    }
    th_sleep_ms(5);
  }
  return -1;
}

/* Makes r's dir and names (nothing started). */
static int prepare(th_redis *r, const char *extra) {
  memset(r, 0, sizeof *r);
  if (tmpdir[0])
    snprintf(r->dir, sizeof r->dir, "%s/redis-XXXXXX", tmpdir);
  else
    snprintf(r->dir, sizeof r->dir, "/tmp/dlock-test-XXXXXX");
  if (mkdtemp(r->dir) == NULL) return -1;
  snprintf(r->sock, sizeof r->sock, "%s/redis.sock", r->dir);
  snprintf(r->extra, sizeof r->extra, "%s", extra ? extra : "");
  r->port = th_free_port();
  snprintf(r->url, sizeof r->url, "redis://127.0.0.1:%d", r->port);
  snprintf(r->sock_url, sizeof r->sock_url, "unix://%s", r->sock);
  return 0;
}

/* Whether r's server exited because its port was taken meanwhile (the
 * free port th_free_port found was bound by someone else first). */
static bool port_was_taken(const th_redis *r) {
  char path[600];
  snprintf(path, sizeof path, "%s/redis.log", r->dir);
  return th_file_has(path, "Address already in use");
}

bool th_file_has(const char *path, const char *needle) {
  char line[1024];
  FILE *f = fopen(path, "r");
  bool has = false;
  while (f && !has && fgets(line, sizeof line, f))
    has = strstr(line, needle) != NULL;
  if (f) fclose(f);
  return has;
}

int th_redis_start(th_redis *r, const char *extra) {
  if (prepare(r, extra) != 0) return -1;
  /* Another process may bind the port between th_free_port and the
   * server's bind: a new port, up to 5 times. */
  for (int i = 0; i < 5; i++) {
    if (spawn(r) == 0) return 0;
    if (r->pid > 0 || !port_was_taken(r)) return -1;
    r->port = th_free_port();
    snprintf(r->url, sizeof r->url, "redis://127.0.0.1:%d", r->port);
  }
  return -1;
}

int th_redis_restart(th_redis *r) {
  if (r->pid > 0) th_redis_kill(r, SIGKILL);
  return spawn(r);
}

/* Whether every thread of pid is stopped (state 'T' in the stat file of
 * each thread under /proc/PID/task). */
static bool all_threads_stopped(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  if (d == NULL) return false;
  bool all = true, any = false;
  struct dirent *e;
  while (all && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char stat[400], buf[512];
    snprintf(stat, sizeof stat, "%s/%s/stat", path, e->d_name);
    FILE *f = fopen(stat, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')'); /* "pid (comm) S ..." */
    if (paren == NULL || paren[1] != ' ') continue; /* the thread left */
    any = true;
    all = paren[2] == 'T' || paren[2] == 't';
  }
  closedir(d);
  return all && any;
}

bool th__await_stop(pid_t pid) {
  int64_t end = th_now_ms() + 5000;
  while (!all_threads_stopped(pid)) {
    if (th_now_ms() >= end) return false;
    th_sleep_ms(1);
  }
  return true;
}

void th_redis_kill(th_redis *r, int sig) {
  if (r->pid <= 0) return;
  kill(r->pid, sig);
  if (sig == SIGSTOP) th__await_stop(r->pid);
  if (sig == SIGKILL || sig == SIGTERM) {
    waitpid(r->pid, NULL, 0);
    r->pid = 0;
    track(r);
  }
}

void th_redis_stop(th_redis *r) {
  if (r->pid > 0) {
    kill(r->pid, SIGCONT);
    th_redis_kill(r, SIGKILL);
  }
  if (r->dir[0]) {
    untrack(r);
    rm_dir(r->dir);
    r->dir[0] = '\0';
  }
}

redisContext *th_redis_connect(th_redis *r) {
  redisContext *c = redisConnectUnix(r->sock);
  if (c == NULL || c->err) {
    if (c) redisFree(c);
    return NULL;
  }
  return c;
}

static redisReply *vcmd(th_redis *r, const char *fmt, va_list ap) {
  redisContext *c = th_redis_connect(r);
  if (c == NULL) return NULL;
  redisReply *rep = redisvCommand(c, fmt, ap);
  redisFree(c);
  return rep;
}

redisReply *th_cmd(th_redis *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *rep = vcmd(r, fmt, ap);
  va_end(ap);
  return rep;
}

long long th_info_ll(th_redis *r, const char *section, const char *prefix,
                     long long absent) {
  redisReply *rep = th_cmd(r, "INFO %s", section);
  long long n = absent;
  const char *at = rep && rep->type == REDIS_REPLY_STRING ? rep->str : NULL;
  if (at && (at = strstr(at, prefix)) != NULL) n = atoll(at + strlen(prefix));
  if (rep) freeReplyObject(rep);
  return n;
}

int th_clients(th_redis *r, const char *type) {
  redisReply *rep = type ? th_cmd(r, "CLIENT LIST TYPE %s", type)
                         : th_cmd(r, "CLIENT LIST");
  int n = 0;
  for (size_t i = 0; rep && rep->type == REDIS_REPLY_STRING && i < rep->len;
       i++)
    n += rep->str[i] == '\n';
  if (rep) freeReplyObject(rep);
  return n;
}

long long th_calls(th_redis *r, const char *cmd) {
  char pat[64];
  snprintf(pat, sizeof pat, "cmdstat_%s:calls=", cmd);
  return th_info_ll(r, "commandstats", pat, 0);
}

long long th_scripts_run(th_redis *r) {
  return th_calls(r, "evalsha") + th_calls(r, "eval");
}

long long th_cmd_int(th_redis *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *rep = vcmd(r, fmt, ap);
  va_end(ap);
  long long v = -999;
  if (rep && rep->type == REDIS_REPLY_INTEGER) v = rep->integer;
  else if (rep && rep->type == REDIS_REPLY_STRING) v = atoll(rep->str);
  else if (rep && rep->type == REDIS_REPLY_NIL) v = -1;
  if (rep) freeReplyObject(rep);
  return v;
}

dlock_client *th_client_opts(dlock_client_options *o) {
  dlock_client *c = NULL;
  int rc = dlock_client_open(o, &c);
  if (rc != 0)
    fprintf(stderr, "    open failed: %s\n", dlock_client_open_errmsg());
  return c;
}

dlock_client *th_client(th_redis *r, int64_t watchdog_ms) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = r->url;
  o.connect_timeout_ms = (int)th_soon(o.connect_timeout_ms);
  if (watchdog_ms > 0) o.watchdog_timeout_ms = watchdog_ms;
  return th_client_opts(&o);
}

bool th_wait_llen(th_redis *r, const char *key, long long n, int timeout_ms) {
  int64_t end = th_now_ms() + timeout_ms;
  for (;;) {
    if (th_cmd_int(r, "LLEN %s", key) == n) return true;
    if (th_now_ms() >= end) return false;
    th_sleep_ms(2);
  }
}

static bool wait_numsub(th_redis *r, const char *channel, bool some,
                        int timeout_ms) {
  int64_t end = th_now_ms() + timeout_ms;
  for (;;) {
    redisReply *rep = th_cmd(r, "PUBSUB NUMSUB %s", channel);
    bool yes = rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
               (rep->element[1]->integer >= 1) == some;
    if (rep) freeReplyObject(rep);
    if (yes) return true;
    if (th_now_ms() >= end) return false;
    th_sleep_ms(2);
  }
}

bool th_wait_subscribed(th_redis *r, const char *channel, int timeout_ms) {
  return wait_numsub(r, channel, true, timeout_ms);
}

bool th_wait_unsubscribed(th_redis *r, const char *channel, int timeout_ms) {
  return wait_numsub(r, channel, false, timeout_ms);
}

/* ---- TLS ---- */

int th_tls_port;
char th_tls_args[1024];
static char tls_dir[256]; /* the certificates, in th_tmpdir() */

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
  char cmd[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  return system(cmd);
}

static int make_ca(const char *name) {
  return sh("cd %s && openssl req -x509 -newkey rsa:2048 -nodes -days 2 "
            "-subj '/CN=%s' -keyout %s.key -out %s.crt >/dev/null 2>&1",
            tls_dir, name, name, name);
}

static int make_cert(const char *name, const char *ca, const char *san) {
  return sh("cd %s && openssl req -newkey rsa:2048 -nodes -subj '/CN=%s' "
            "-keyout %s.key -out %s.csr >/dev/null 2>&1 && "
            "printf 'subjectAltName=%s\\n' > %s.ext && "
            "openssl x509 -req -in %s.csr -CA %s.crt -CAkey %s.key "
            "-CAcreateserial -days 2 -extfile %s.ext -out %s.crt "
            ">/dev/null 2>&1",
            tls_dir, name, name, name, san, name, name, ca, ca, name, name);
}

int th_tls_setup(void) {
  snprintf(tls_dir, sizeof tls_dir, "%s/tls", th_tmpdir());
  if (mkdir(tls_dir, 0700) != 0 || make_ca("ca") || make_ca("otherca") ||
      make_cert("server", "ca", "IP:127.0.0.1,DNS:localhost") ||
      make_cert("client", "ca", "DNS:client")) {
    fprintf(stderr, "cannot make certificates\n");
    return -1;
  }
  for (int attempt = 0; attempt < 5; attempt++) {
    th_tls_port = th_free_port();
    snprintf(th_tls_args, sizeof th_tls_args,
             "--tls-port %d --tls-cert-file %s/server.crt "
             "--tls-key-file %s/server.key --tls-ca-cert-file %s/ca.crt "
             "--tls-auth-clients optional",
             th_tls_port, tls_dir, tls_dir, tls_dir);
    th_redis probe;
    int rc = th_redis_start(&probe, th_tls_args);
    th_redis_stop(&probe);
    if (rc == 0) return 0;
  }
  fprintf(stderr, "cannot start redis-server with TLS\n");
  return -1;
}

void th_tls_options(dlock_client_options *o, th_tls_paths *p,
                    const char *host, const char *ca, bool with_cert) {
  snprintf(p->url, sizeof p->url, "rediss://%s:%d", host, th_tls_port);
  snprintf(p->ca, sizeof p->ca, "%s/%s.crt", tls_dir, ca);
  snprintf(p->cert, sizeof p->cert, "%s/client.crt", tls_dir);
  snprintf(p->key, sizeof p->key, "%s/client.key", tls_dir);
  dlock_client_options_init(o);
  o->url = p->url;
  o->tls_ca_file = p->ca;
  o->connect_timeout_ms = 2000;
  if (with_cert) {
    o->tls_cert_file = p->cert;
    o->tls_key_file = p->key;
  }
}

bool th_replicas_online(th_redis *m, int n) {
  redisReply *r = th_cmd(m, "INFO replication");
  int online = 0;
  if (r && r->type == REDIS_REPLY_STRING)
    for (const char *at = r->str; (at = strstr(at, "state=online")); at++)
      online++;
  if (r) freeReplyObject(r);
  return online >= n;
}

/* ---- Sentinel ---- */

static bool sentinel_ready(void *arg) {
  th_sentinel_set *s = arg;
  redisReply *r = th_cmd(&s->replica, "INFO replication");
  bool ok = r && r->type == REDIS_REPLY_STRING;
  ok = ok && strstr(r->str, "master_link_status:up") != NULL;
  if (r) freeReplyObject(r);
  ok = ok && th_replicas_online(&s->master, 1);
  for (int i = 0; ok && i < 3; i++) {
    r = th_cmd(&s->sentinels[i], "SENTINEL REPLICAS %s", s->name);
    ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 1;
    /* The replica's flags must say it is up (not s_down, not
     * disconnected). */
    if (ok) {
      redisReply *e = r->element[0];
      ok = false;
      for (size_t j = 0; j + 1 < e->elements; j += 2)
        if (strcmp(e->element[j]->str, "flags") == 0)
          ok = strcmp(e->element[j + 1]->str, "slave") == 0;
    }
    if (r) freeReplyObject(r);
  }
  return ok;
}

int th_sentinel_start(th_sentinel_set *s, const char *extra) {
  memset(s, 0, sizeof *s);
  snprintf(s->name, sizeof s->name, "mymaster");
  char args[1200];
  snprintf(args, sizeof args, "--repl-diskless-sync-delay 0 %s",
           extra ? extra : "");
  if (th_redis_start(&s->master, args) != 0) return -1;
  char rargs[1300];
  snprintf(rargs, sizeof rargs, "%s --replicaof 127.0.0.1 %d", args,
           s->master.port);
  if (th_redis_start(&s->replica, rargs) != 0) goto fail;
  size_t used = (size_t)snprintf(s->url, sizeof s->url, "redis-sentinel://");
  for (int i = 0; i < 3; i++) {
    th_redis *t = &s->sentinels[i];
    if (prepare(t, NULL) != 0) goto fail;
    t->sentinel = true;
    char path[400];
    snprintf(path, sizeof path, "%s/sentinel.conf", t->dir);
    FILE *f = fopen(path, "w");
    if (f == NULL) goto fail;
    fprintf(f, "sentinel resolve-hostnames no\n"
               "sentinel monitor %s 127.0.0.1 %d 2\n"
               "sentinel down-after-milliseconds %s 1000\n"
               "sentinel failover-timeout %s 2000\n"
               "sentinel parallel-syncs %s 1\n",
            s->name, s->master.port, s->name, s->name, s->name);
    fclose(f);
    if (spawn(t) != 0) goto fail;
    used += (size_t)snprintf(s->url + used, sizeof s->url - used,
                             "%s127.0.0.1:%d", i ? "," : "", t->port);
  }
  snprintf(s->url + used, sizeof s->url - used, "/%s", s->name);
  if (!th_wait_for(sentinel_ready, s, 15000)) goto fail;
  return 0;
fail:
  th_sentinel_stop(s);
  return -1;
}

void th_sentinel_stop(th_sentinel_set *s) {
  for (int i = 0; i < 3; i++) th_redis_stop(&s->sentinels[i]);
  th_redis_stop(&s->replica);
  th_redis_stop(&s->master);
}

int th_sentinel_master_port(th_sentinel_set *s) {
  for (int i = 0; i < 3; i++) {
    if (s->sentinels[i].pid <= 0) continue;
    redisReply *r = th_cmd(&s->sentinels[i],
                           "SENTINEL get-master-addr-by-name %s", s->name);
    int port = -1;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
      port = atoi(r->element[1]->str);
    if (r) freeReplyObject(r);
    if (port > 0) return port;
  }
  return -1;
}

static bool failed_over(void *arg) {
  th_sentinel_set *s = arg;
  for (int i = 0; i < 3; i++) {
    redisReply *r = th_cmd(&s->sentinels[i],
                           "SENTINEL get-master-addr-by-name %s", s->name);
    bool ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
              atoi(r->element[1]->str) == s->replica.port;
    if (r) freeReplyObject(r);
    if (!ok) return false;
  }
  redisReply *r = th_cmd(&s->replica, "ROLE");
  bool ok = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
            strcmp(r->element[0]->str, "master") == 0;
  if (r) freeReplyObject(r);
  return ok;
}

int th_sentinel_failover(th_sentinel_set *s, int timeout_ms) {
  int64_t end = th_now_ms() + timeout_ms;
  /* A sentinel may refuse while it still counts a previous failover
   * (INPROG): ask again until one takes it. */
  while (th_now_ms() < end) {
    bool asked = false;
    for (int i = 0; i < 3 && !asked; i++) {
      redisReply *r = th_cmd(&s->sentinels[i], "SENTINEL FAILOVER %s",
                             s->name);
      asked = r && r->type == REDIS_REPLY_STATUS;
      if (r) freeReplyObject(r);
    }
    if (asked) break;
    th_sleep_ms(20);
  }
  int left = (int)(end - th_now_ms());
  return left > 0 && th_wait_for(failed_over, s, left) ? 0 : -1;
}

int th_sentinel_wait_failover(th_sentinel_set *s, int timeout_ms) {
  return th_wait_for(failed_over, s, timeout_ms) ? 0 : -1;
}

static long long repl_offset(th_redis *r, const char *field) {
  redisReply *rep = th_cmd(r, "INFO replication");
  long long v = -1;
  if (rep && (rep->type == REDIS_REPLY_STRING ||
              rep->type == REDIS_REPLY_STRING)) {
    const char *p = strstr(rep->str, field);
    if (p) v = atoll(p + strlen(field));
  }
  if (rep) freeReplyObject(rep);
  return v;
}

static bool synced(void *arg) {
  th_sentinel_set *s = arg;
  long long m = repl_offset(&s->master, "master_repl_offset:");
  long long r = repl_offset(&s->replica, "slave_repl_offset:");
  return m >= 0 && m == r;
}

bool th_sentinel_synced(th_sentinel_set *s, int timeout_ms) {
  return th_wait_for(synced, s, timeout_ms);
}

/* ---- Cluster: 3 masters on loopback ---- */
static bool cluster_ok(void *arg) {
  th_cluster *k = arg;
  char want[64];
  snprintf(want, sizeof want, "cluster_known_nodes:%d", 3 + k->nreplicas);
  for (int i = 0; i < 3 + k->nreplicas; i++) {
    th_redis *n = i < 3 ? &k->nodes[i] : &k->replicas[i - 3];
    redisReply *r = th_cmd(n, "CLUSTER INFO");
    bool ok = r && r->type == REDIS_REPLY_STRING &&
              strstr(r->str, "cluster_state:ok") != NULL &&
              strstr(r->str, want) != NULL;
    if (r) freeReplyObject(r);
    if (ok && i >= 3) {
      r = th_cmd(n, "INFO replication");
      ok = r && r->type == REDIS_REPLY_STRING &&
           strstr(r->str, "master_link_status:up") != NULL;
      if (r) freeReplyObject(r);
      ok = ok && th_replicas_online(&k->nodes[i - 3], 1);
    }
    if (!ok) return false;
  }
  return true;
}

static int node_id(th_redis *n, char *out, size_t len) {
  redisReply *r = th_cmd(n, "CLUSTER MYID");
  bool ok = r && r->type == REDIS_REPLY_STRING;
  if (ok) snprintf(out, len, "%s", r->str);
  if (r) freeReplyObject(r);
  return ok ? 0 : -1;
}

static int cluster_node_start(th_redis *n, const char *args) {
  /* The cluster bus listens on the port + 10000: a free port above
   * 55535 makes the server exit at once. Another port, then. */
  for (int tries = 0; tries < 20; tries++)
    if (th_redis_start(n, args) == 0) return 0;
  return -1;
}

static bool status_ok(redisReply *r, const char *what) {
  bool ok = r && r->type == REDIS_REPLY_STATUS;
  if (!ok)
    fprintf(stderr, "    cluster: %s: %s\n", what,
            r && r->str ? r->str : "no reply");
  if (r) freeReplyObject(r);
  return ok;
}

static int cluster_start(th_cluster *k, const char *extra, int nreplicas,
                         bool tls) {
  memset(k, 0, sizeof *k);
  char args[1200];
  snprintf(args, sizeof args,
           "--cluster-enabled yes --cluster-config-file nodes.conf "
           "--cluster-node-timeout 2000 --repl-diskless-sync-delay 0 %s",
           extra ? extra : "");
  static const int ranges[3][2] = {{0, 5460}, {5461, 10922}, {10923, 16383}};
  size_t used = (size_t)snprintf(k->url, sizeof k->url, "%s",
                                 tls ? "rediss-cluster://" : "redis-cluster://");
  for (int i = 0; i < 3; i++) {
    char nargs[2400];
    snprintf(nargs, sizeof nargs, "%s", args);
    if (tls) { /* each its own TLS port; the bus over TLS too */
      /* The bus listens on the TLS port + 10000 then. */
      do k->tls_ports[i] = th_free_port();
      while (k->tls_ports[i] > 55535);
      snprintf(nargs, sizeof nargs,
               "%s --tls-port %d --tls-cert-file %s/server.crt "
               "--tls-key-file %s/server.key --tls-ca-cert-file %s/ca.crt "
               "--tls-auth-clients optional --tls-cluster yes",
               args, k->tls_ports[i], tls_dir, tls_dir, tls_dir);
    }
    if (cluster_node_start(&k->nodes[i], nargs) != 0) goto fail;
    if (!status_ok(th_cmd(&k->nodes[i], "CLUSTER ADDSLOTSRANGE %d %d",
                          ranges[i][0], ranges[i][1]),
                   "ADDSLOTSRANGE"))
      goto fail;
    if (node_id(&k->nodes[i], k->ids[i], sizeof k->ids[i]) != 0) goto fail;
    used += (size_t)snprintf(k->url + used, sizeof k->url - used,
                             "%s127.0.0.1:%d", i ? "," : "",
                             tls ? k->tls_ports[i] : k->nodes[i].port);
  }
  for (int i = 0; i < nreplicas; i++) {
    if (cluster_node_start(&k->replicas[i], args) != 0) goto fail;
    k->nreplicas++;
    if (node_id(&k->replicas[i], k->ids[3 + i], sizeof k->ids[3 + i]) != 0)
      goto fail;
  }
  for (int i = 1; i < 3 + nreplicas; i++) {
    th_redis *n = i < 3 ? &k->nodes[i] : &k->replicas[i - 3];
    int port = i < 3 && tls ? k->tls_ports[i] : n->port;
    if (!status_ok(th_cmd(&k->nodes[0], "CLUSTER MEET 127.0.0.1 %d", port),
                   "MEET"))
      goto fail;
  }
  /* A replica can follow its master once it knows it. */
  for (int i = 0; i < nreplicas; i++) {
    int64_t until = th_now_ms() + 10000;
    bool ok = false;
    while (!ok && th_now_ms() < until) {
      redisReply *r = th_cmd(&k->replicas[i], "CLUSTER REPLICATE %s", k->ids[i]);
      ok = r && r->type == REDIS_REPLY_STATUS;
      if (r) freeReplyObject(r);
      if (!ok) th_sleep_ms(50);
    }
    if (!ok) {
      fprintf(stderr, "    cluster: replica %d could not follow its master\n",
              i);
      goto fail;
    }
  }
  if (!th_wait_for(cluster_ok, k, 20000)) {
    fprintf(stderr, "    cluster: not cluster_state:ok in 20 s\n");
    goto fail;
  }
  return 0;
fail:
  th_cluster_stop(k);
  return -1;
}

int th_cluster_start(th_cluster *k, const char *extra) {
  return cluster_start(k, extra, 0, false);
}

int th_cluster_start_replicas(th_cluster *k, const char *extra) {
  return cluster_start(k, extra, 3, false);
}

int th_cluster_start_tls(th_cluster *k) {
  return cluster_start(k, NULL, 0, true);
}

void th_cluster_stop(th_cluster *k) {
  for (int i = 0; i < 3; i++) th_redis_stop(&k->nodes[i]);
  for (int i = 0; i < k->nreplicas; i++) th_redis_stop(&k->replicas[i]);
}

int th_cluster_slot_begin(th_cluster *k, int slot, int from, int to) {
  if (!status_ok(th_cmd(&k->nodes[to], "CLUSTER SETSLOT %d IMPORTING %s", slot,
                        k->ids[from]),
                 "SETSLOT IMPORTING"))
    return -1;
  return status_ok(th_cmd(&k->nodes[from], "CLUSTER SETSLOT %d MIGRATING %s",
                          slot, k->ids[to]),
                   "SETSLOT MIGRATING")
             ? 0
             : -1;
}

int th_cluster_slot_move_keys(th_cluster *k, int slot, int from, int to,
                              int n) {
  redisReply *r =
      th_cmd(&k->nodes[from], "CLUSTER GETKEYSINSLOT %d %d", slot, n);
  if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
    if (r) freeReplyObject(r);
    return -1;
  }
  int moved = 0;
  for (size_t i = 0; i < r->elements; i++) {
    redisReply *m = th_cmd(&k->nodes[from], "MIGRATE 127.0.0.1 %d %s 0 5000",
                           k->nodes[to].port, r->element[i]->str);
    bool ok = status_ok(m, "MIGRATE");
    if (!ok) {
      moved = -1;
      break;
    }
    moved++;
  }
  freeReplyObject(r);
  return moved;
}

int th_cluster_slot_end(th_cluster *k, int slot, int to) {
  /* The new owner first, then the old one (redis-cli's order). */
  int order[3] = {to, (to + 1) % 3, (to + 2) % 3};
  for (int j = 0; j < 3; j++)
    if (!status_ok(th_cmd(&k->nodes[order[j]], "CLUSTER SETSLOT %d NODE %s",
                          slot, k->ids[to]),
                   "SETSLOT NODE"))
      return -1;
  return 0;
}

typedef struct owner_arg {
  th_cluster *k;
  int slot;
  const char *id;
} owner_arg;

static bool owner_is(void *arg) {
  owner_arg *a = arg;
  for (int i = 0; i < 3 + a->k->nreplicas; i++) {
    th_redis *n = i < 3 ? &a->k->nodes[i] : &a->k->replicas[i - 3];
    if (n->pid <= 0) continue;
    redisReply *r = th_cmd(n, "CLUSTER INFO");
    bool ok = r && r->type == REDIS_REPLY_STRING &&
              strstr(r->str, "cluster_state:ok") != NULL;
    if (r) freeReplyObject(r);
    if (!ok) return false;
    r = th_cmd(n, "CLUSTER SLOTS");
    ok = false;
    for (size_t e = 0; r && r->type == REDIS_REPLY_ARRAY && e < r->elements;
         e++) {
      redisReply *x = r->element[e];
      if (x->elements >= 3 && a->slot >= x->element[0]->integer &&
          a->slot <= x->element[1]->integer && x->element[2]->elements >= 3)
        ok = strcmp(x->element[2]->element[2]->str, a->id) == 0;
    }
    if (r) freeReplyObject(r);
    if (!ok) return false;
  }
  return true;
}

bool th_cluster_wait_owner(th_cluster *k, int slot, const char *id,
                           int timeout_ms) {
  owner_arg a = {k, slot, id};
  return th_wait_for(owner_is, &a, timeout_ms);
}

int th_cluster_node_of(th_cluster *k, const char *key) {
  redisReply *r = th_cmd(&k->nodes[0], "CLUSTER KEYSLOT %s", key);
  long long slot = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
  if (r) freeReplyObject(r);
  if (slot < 0) return -1;
  return slot <= 5460 ? 0 : slot <= 10922 ? 1 : 2;
}
