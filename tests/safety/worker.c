/* worker.c: the processes that take the lock in the safety suite.
 *
 * `test_safety worker OPTIONS`: a library worker. Each of its threads loops:
 * acquire (watchdog, or a fixed lease), read the counter with its token, hold,
 * write the counter + 1 with its token, release, report the section. A victim
 * (--victim-hold) makes one cycle with a long hold, optionally with its
 * watchdog stalled, and reports what the library told it.
 *
 * `test_safety cmd OPTIONS`: a command run by `dlock run`: one read-modify-
 * write with $DLOCK_TOKEN, then it lingers (--after-ms) so that dlock has to
 * stop it. */
#include "worker.h"

#include "client/client.h"
#include "dlock.h"
#include "redis/conns/conns.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

typedef struct wopts {
  const char *url, *res, *name;
  int id, threads;
  int hold_us;
  int64_t lease_ms;       /* the watchdog's */
  int64_t fixed_lease_ms; /* 0: watchdog mode */
  int victim_hold_ms;     /* > 0: one victim cycle */
  int after_ms;           /* cmd: linger after the write */
  bool stall;             /* victim: stall the watchdog while holding */
  const char *kind;       /* "lock" (default), "fair" or "write" */
  int replicas;           /* replica acknowledgement (min_replicas_acked) */
  int zk_session_ms;      /* zk://: the session timeout asked for */
} wopts;

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void sleep_us(int64_t us) {
  struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static int res_connect(const char *path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) return fd;
  fprintf(stderr, "worker: cannot reach the resource at %s\n", path);
  exit(3);
}

/* One request line, one answer line (into ans). Exits on a broken link:
 * the driver is gone. */
static void res_call(int fd, char *ans, size_t anslen, const char *fmt, ...) {
  char line[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  line[n++] = '\n';
  if (write(fd, line, (size_t)n) != n) exit(3);
  size_t got = 0;
  while (got < anslen - 1) {
    ssize_t r = read(fd, ans + got, 1);
    if (r <= 0) exit(3);
    if (ans[got] == '\n') break;
    got++;
  }
  ans[got] = '\0';
}

static int parse(int argc, char **argv, wopts *o) {
  memset(o, 0, sizeof *o);
  o->threads = 1;
  o->hold_us = 200;
  o->lease_ms = 600;
  for (int i = 0; i + 1 < argc; i += 2) {
    const char *k = argv[i], *v = argv[i + 1];
    if (!strcmp(k, "--url"))
      o->url = v;
    else if (!strcmp(k, "--res"))
      o->res = v;
    else if (!strcmp(k, "--name"))
      o->name = v;
    else if (!strcmp(k, "--id"))
      o->id = atoi(v);
    else if (!strcmp(k, "--threads"))
      o->threads = atoi(v);
    else if (!strcmp(k, "--hold-us"))
      o->hold_us = atoi(v);
    else if (!strcmp(k, "--lease-ms"))
      o->lease_ms = atoll(v);
    else if (!strcmp(k, "--fixed-lease-ms"))
      o->fixed_lease_ms = atoll(v);
    else if (!strcmp(k, "--victim-hold-ms"))
      o->victim_hold_ms = atoi(v);
    else if (!strcmp(k, "--after-ms"))
      o->after_ms = atoi(v);
    else if (!strcmp(k, "--kind"))
      o->kind = v;
    else if (!strcmp(k, "--replicas"))
      o->replicas = atoi(v);
    else if (!strcmp(k, "--zk-session-ms"))
      o->zk_session_ms = atoi(v);
    else if (!strcmp(k, "--stall"))
      o->stall = atoi(v) != 0;
    else
      return -1;
  }
  return o->res ? 0 : -1;
}

typedef struct wthread {
  const wopts *o;
  dlock_client *c;
  pthread_t tid;
  atomic_int lost_cb;
} wthread;

static void on_lost(dlock_lock *l, const char *owner, void *ud) {
  (void)l;
  (void)owner;
  if (getenv("DLOCK_SAFETY_DEBUG"))
    fprintf(stderr, "worker: lost at %lld: %s\n", (long long)(now_us() / 1000),
            dlock_client_errmsg(((wthread *)ud)->c));
  atomic_store(&((wthread *)ud)->lost_cb, 1);
}

static void *work(void *arg) {
  wthread *t = arg;
  const wopts *o = t->o;
  int fd = res_connect(o->res);
  dlock_lock *l = NULL;
  dlock_rwlock *rw = NULL;
  const char *kind = o->kind ? o->kind : "lock";
  int e =
      strcmp(kind, "fair") == 0 ? dlock_fairlock_new(t->c, o->name, NULL, 0, &l)
      : strcmp(kind, "write") == 0 ? dlock_rwlock_new(t->c, o->name, NULL, &rw)
                                   : dlock_lock_new(t->c, o->name, NULL, &l);
  if (e != 0) exit(4);
  if (rw) l = dlock_rwlock_write(rw);
  dlock_lock_on_lost(l, on_lost, t);
  char ans[64];
  bool victim = o->victim_hold_ms > 0;
  for (;;) {
    int64_t start = now_us();
    uint64_t tok = 0;
    int rc = dlock_lock_try_acquire(l, 5000, o->fixed_lease_ms, &tok);
    if (rc != 0) { /* faults make acquisitions fail: try again */
      res_call(fd, ans, sizeof ans, "P %d", o->id);
      if (strcmp(ans, "STOP") == 0) break;
      sleep_us(10000);
      continue;
    }
    int64_t acq = now_us();
    res_call(fd, ans, sizeof ans, "R %d %llu %d", o->id,
             (unsigned long long)tok, (int)getpid());
    if (strcmp(ans, "STOP") == 0) {
      dlock_lock_release(l);
      break;
    }
    int lost_before_write = 0;
    if (strncmp(ans, "OK ", 3) == 0) {
      long long v = atoll(ans + 3);
      if (victim) {
        if (o->stall) dl_watchdog_stall(t->c->watchdog, true);
        sleep_us((int64_t)o->victim_hold_ms * 1000);
        lost_before_write = dlock_lock_is_lost(l);
      } else {
        sleep_us(o->hold_us);
      }
      /* Writes whatever the library says: the resource is the judge. */
      res_call(fd, ans, sizeof ans, "W %d %llu %lld", o->id,
               (unsigned long long)tok, v + 1);
    }
    int64_t rel = now_us();
    if (victim) {
      if (o->stall) dl_watchdog_stall(t->c->watchdog, false);
      /* Give the watchdog up to three leases to report a loss. */
      if (lost_before_write)
        for (int i = 0; i < 300 && !atomic_load(&t->lost_cb); i++)
          sleep_us(o->lease_ms * 10);
      int held_after = lost_before_write ? dlock_lock_is_held(l) : 0;
      int rrc = dlock_lock_release(l);
      res_call(fd, ans, sizeof ans, "S %d %llu %lld %lld %lld", o->id,
               (unsigned long long)tok, (long long)start, (long long)acq,
               (long long)rel);
      res_call(fd, ans, sizeof ans, "V %d %d %d %d %d", o->id,
               lost_before_write, atomic_load(&t->lost_cb), rrc, held_after);
      break;
    }
    dlock_lock_release(l);
    res_call(fd, ans, sizeof ans, "S %d %llu %lld %lld %lld", o->id,
             (unsigned long long)tok, (long long)start, (long long)acq,
             (long long)rel);
  }
  dlock_lock_free(l); /* nothing for the write lock's handle */
  dlock_rwlock_free(rw);
  close(fd);
  return NULL;
}

int worker_main(int argc, char **argv) {
  wopts o;
  if (parse(argc, argv, &o) != 0 || o.url == NULL || o.name == NULL) {
    fprintf(stderr, "worker: bad options\n");
    return 64;
  }
  dlock_client_options co;
  dlock_client_options_init(&co);
  co.url = o.url;
  co.watchdog_timeout_ms = o.lease_ms;
  co.command_timeout_ms = 2000;
  co.min_replicas_acked = o.replicas;
  co.replicas_timeout_ms = 1000;
  if (o.zk_session_ms > 0) co.zk_session_timeout_ms = o.zk_session_ms;
  /* A row's fault may be under way while the worker starts (a master
   * killed as it asks for the map): as a service would, it tries again
   * for a while. A bad URL or option stays fatal. */
  dlock_client *c = NULL;
  int64_t give_up = now_us() + 20 * 1000000;
  int orc;
  while ((orc = dlock_client_open(&co, &c)) != 0) {
    bool transient = orc == DLOCK_ECONNECT || orc == DLOCK_ETIMEDOUT ||
                     orc == DLOCK_ECONNLOST || orc == DLOCK_ESERVER;
    if (!transient || now_us() >= give_up) {
      fprintf(stderr, "worker: %s\n", dlock_client_open_errmsg());
      return 69;
    }
    sleep_us(50000);
  }
  int n = o.victim_hold_ms > 0 ? 1 : o.threads;
  wthread *t = calloc((size_t)n, sizeof *t);
  if (t == NULL) return 70;
  for (int i = 0; i < n; i++) {
    t[i].o = &o;
    t[i].c = c;
    if (pthread_create(&t[i].tid, NULL, work, &t[i]) != 0) return 70;
  }
  for (int i = 0; i < n; i++)
    pthread_join(t[i].tid, NULL);
  free(t);
  dlock_client_close(c);
  return 0;
}

int cmd_main(int argc, char **argv) {
  wopts o;
  const char *tokstr = getenv("DLOCK_TOKEN");
  if (parse(argc, argv, &o) != 0 || tokstr == NULL) {
    fprintf(stderr, "cmd: bad options or no DLOCK_TOKEN\n");
    return 64;
  }
  unsigned long long tok = strtoull(tokstr, NULL, 10);
  int fd = res_connect(o.res);
  char ans[64];
  int64_t start = now_us();
  /* dlock may stop us any time after our write: the section's report goes
   * out with it, before a SIGTERM can land. */
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  res_call(fd, ans, sizeof ans, "R %d %llu %d", o.id, tok, (int)getpid());
  if (strncmp(ans, "OK ", 3) == 0) {
    long long v = atoll(ans + 3);
    sleep_us((int64_t)o.victim_hold_ms * 1000);
    sigprocmask(SIG_BLOCK, &term, &old);
    res_call(fd, ans, sizeof ans, "W %d %llu %lld", o.id, tok, v + 1);
  }
  res_call(fd, ans, sizeof ans, "S %d %llu %lld %lld %lld", o.id, tok,
           (long long)start, (long long)start, (long long)now_us());
  sigprocmask(SIG_UNBLOCK, &term, NULL);
  sleep_us((int64_t)o.after_ms * 1000);
  close(fd);
  return 0;
}
