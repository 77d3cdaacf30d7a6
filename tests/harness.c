/* harness.c: the test runner and redis-server management for the tests. */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int th_failed_checks;

/* Servers still running, by value: a test that fails a CHECK returns early
 * and its th_redis (often on its stack) is gone; exit still cleans up. */
static struct {
  pid_t pid;
  char dir[256];
} live[16];

static void rm_dir(const char *dir) {
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

static void cleanup_all(void) {
  for (int i = 0; i < 16; i++) {
    if (live[i].pid > 0) {
      kill(live[i].pid, SIGCONT);
      kill(live[i].pid, SIGKILL);
      waitpid(live[i].pid, NULL, 0);
    }
    if (live[i].dir[0]) rm_dir(live[i].dir);
    live[i].pid = 0;
    live[i].dir[0] = '\0';
  }
}

static void on_signal(int sig) {
  for (int i = 0; i < 16; i++)
    if (live[i].pid > 0) kill(live[i].pid, SIGKILL);
  signal(sig, SIG_DFL);
  raise(sig);
}

static void track(th_redis *r) {
  int slot = -1;
  for (int i = 0; i < 16 && slot < 0; i++)
    if (strcmp(live[i].dir, r->dir) == 0) slot = i;
  for (int i = 0; i < 16 && slot < 0; i++)
    if (live[i].dir[0] == '\0') slot = i;
  if (slot < 0) return;
  live[slot].pid = r->pid;
  snprintf(live[slot].dir, sizeof live[slot].dir, "%s", r->dir);
}

static void untrack(th_redis *r) {
  for (int i = 0; i < 16; i++)
    if (strcmp(live[i].dir, r->dir) == 0) {
      live[i].pid = 0;
      live[i].dir[0] = '\0';
    }
}

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

int th_run(int argc, char **argv, const th_test *tests, size_t n) {
  atexit(cleanup_all);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  signal(SIGPIPE, SIG_IGN);
  int passed = 0, failed = 0;
  for (size_t i = 0; i < n; i++) {
    if (argc > 1) {
      bool want = false;
      for (int a = 1; a < argc; a++)
        if (strcmp(argv[a], tests[i].name) == 0) want = true;
      if (!want) continue;
    }
    int before = th_failed_checks;
    int64_t t0 = th_now_ms();
    tests[i].fn();
    bool ok = th_failed_checks == before;
    printf("%s %s (%lld ms)\n", ok ? "ok  " : "FAIL", tests[i].name,
           (long long)(th_now_ms() - t0));
    fflush(stdout);
    if (ok) passed++;
    else failed++;
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

int th_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof sa;
  if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
      getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  close(fd);
  return ntohs(sa.sin_port);
}

static int spawn(th_redis *r) {
  char args[2048];
  snprintf(args, sizeof args,
           "--port %d --bind 127.0.0.1 --unixsocket %s --unixsocketperm 700 "
           "--dir %s --save '' --appendonly no --daemonize no "
           "--logfile %s/redis.log %s",
           r->port, r->sock, r->dir, r->dir, r->extra);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
    char cmd[2300];
    snprintf(cmd, sizeof cmd, "exec redis-server %s", args);
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
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

int th_redis_start(th_redis *r, const char *extra) {
  memset(r, 0, sizeof *r);
  snprintf(r->dir, sizeof r->dir, "/tmp/dlock-test-XXXXXX");
  if (mkdtemp(r->dir) == NULL) return -1;
  snprintf(r->sock, sizeof r->sock, "%s/redis.sock", r->dir);
  snprintf(r->extra, sizeof r->extra, "%s", extra ? extra : "");
  r->port = th_free_port();
  snprintf(r->url, sizeof r->url, "redis://127.0.0.1:%d", r->port);
  snprintf(r->sock_url, sizeof r->sock_url, "unix://%s", r->sock);
  return spawn(r);
}

int th_redis_restart(th_redis *r) {
  if (r->pid > 0) th_redis_kill(r, SIGKILL);
  return spawn(r);
}

void th_redis_kill(th_redis *r, int sig) {
  if (r->pid <= 0) return;
  kill(r->pid, sig);
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

long long th_calls(th_redis *r, const char *cmd) {
  redisReply *rep = th_cmd(r, "INFO commandstats");
  long long n = 0;
  char pat[64];
  snprintf(pat, sizeof pat, "cmdstat_%s:calls=", cmd);
  const char *at = rep && rep->type == REDIS_REPLY_STRING ? rep->str : NULL;
  if (at && (at = strstr(at, pat)) != NULL) n = atoll(at + strlen(pat));
  if (rep) freeReplyObject(rep);
  return n;
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
