/* demo.c: several processes take turns on one dlock lock to update a shared
 * counter with a non-atomic read-modify-write; one holder is SIGKILLed and
 * its lease frees the lock. Starts and stops its own redis-server. */
#include "dlock.h"

#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WORKERS 4
#define ROUNDS 5
#define LEASE_MS 1500

static char dir[64], sock[128], url[160];
static pid_t server_pid;
static struct timespec t0;

static long ms_since_start(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
}

static void msleep(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int start_server(void) {
  snprintf(dir, sizeof dir, "/tmp/dlock-demo-XXXXXX");
  if (mkdtemp(dir) == NULL) return -1;
  snprintf(sock, sizeof sock, "%s/redis.sock", dir);
  snprintf(url, sizeof url, "unix://%s", sock);
  server_pid = fork();
  if (server_pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    execlp("redis-server", "redis-server", "--port", "0", "--unixsocket", sock,
           "--dir", dir, "--save", "", "--appendonly", "no", "--logfile",
           "redis.log", (char *)NULL);
    _exit(127);
  }
  for (int i = 0; i < 500; i++) {
    redisContext *c = redisConnectUnix(sock);
    if (c && !c->err) {
      redisFree(c);
      return 0;
    }
    if (c) redisFree(c);
    msleep(10);
  }
  return -1;
}

static void stop_server(void) {
  if (server_pid > 0) {
    kill(server_pid, SIGTERM);
    waitpid(server_pid, NULL, 0);
  }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* Each event is one line written atomically to the pipe. */
static void report(int fd, const char *fmt, ...) {
  char line[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  line[n++] = '\n';
  if (write(fd, line, (size_t)n) != n) _exit(9);
}

static dlock_lock *open_lock(dlock_client **cp) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.watchdog_timeout_ms = LEASE_MS; /* renewed every 500 ms while alive */
  dlock_lock *l = NULL;
  if (dlock_client_open(&o, cp) != 0 ||
      dlock_lock_new(*cp, "demo:counter-lock", NULL, &l) != 0)
    _exit(2);
  return l;
}

static void worker(int id, int fd) {
  dlock_client *c;
  dlock_lock *l = open_lock(&c);
  redisContext *r = redisConnectUnix(sock);
  for (int i = 0; i < ROUNDS; i++) {
    uint64_t token;
    if (dlock_lock_acquire(l, 0, &token) != 0) _exit(3);
    redisReply *rep = redisCommand(r, "GET demo:counter");
    long v = rep->type == REDIS_REPLY_STRING ? atol(rep->str) : 0;
    freeReplyObject(rep);
    msleep(15); /* a slow critical section makes a race visible */
    rep = redisCommand(r, "SET demo:counter %ld", v + 1);
    freeReplyObject(rep);
    report(fd, "T %d %d %llu %ld", id, (int)getpid(),
           (unsigned long long)token, v + 1);
    if (dlock_lock_release(l) != 1) _exit(4);
  }
  redisFree(r);
  dlock_lock_free(l);
  dlock_client_close(c);
  _exit(0);
}

static void victim(int fd) {
  dlock_client *c;
  dlock_lock *l = open_lock(&c);
  uint64_t token;
  if (dlock_lock_acquire(l, 0, &token) != 0) _exit(3);
  report(fd, "V %d %llu", (int)getpid(), (unsigned long long)token);
  for (;;) pause(); /* holds the lock until killed */
}

int main(void) {
  clock_gettime(CLOCK_MONOTONIC, &t0);
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("dlock %s demo: %d processes, %d turns each, one lock, "
         "lease %d ms\n", dlock_version(NULL), WORKERS, ROUNDS, LEASE_MS);
  if (start_server() != 0) {
    fprintf(stderr, "cannot start redis-server (is it installed?)\n");
    stop_server();
    return 1;
  }
  printf("  started a private redis-server on %s\n", sock);
  int p[2];
  if (pipe(p) != 0) return 1;
  FILE *events = fdopen(p[0], "r");

  pid_t v = fork();
  if (v == 0) {
    fclose(events);
    victim(p[1]);
  }
  char line[256];
  int vpid = 0;
  unsigned long long vtok = 0, last_token = 0;
  if (fgets(line, sizeof line, events) == NULL ||
      sscanf(line, "V %d %llu", &vpid, &vtok) != 2) {
    fprintf(stderr, "the first holder did not start\n");
    stop_server();
    return 1;
  }
  last_token = vtok;
  printf("  %5ld ms  process %d holds the lock (token %llu)\n",
         ms_since_start(), vpid, vtok);
  pid_t kids[WORKERS];
  for (int i = 0; i < WORKERS; i++) {
    kids[i] = fork();
    if (kids[i] == 0) {
      fclose(events);
      worker(i + 1, p[1]);
    }
  }
  close(p[1]);
  msleep(300);
  kill(v, SIGKILL);
  waitpid(v, NULL, 0);
  long killed_at = ms_since_start();
  printf("  %5ld ms  process %d killed with SIGKILL while holding it; the "
         "others wait for its lease\n", killed_at, vpid);

  int ok = 1, turns = 0;
  long last_value = 0;
  while (fgets(line, sizeof line, events)) {
    int id, pid;
    unsigned long long tok;
    long value;
    if (sscanf(line, "T %d %d %llu %ld", &id, &pid, &tok, &value) != 4)
      continue;
    long now = ms_since_start();
    if (turns == 0)
      printf("  %5ld ms  lock free again %ld ms after the kill (lease %d ms)\n",
             now, now - killed_at, LEASE_MS);
    printf("  %5ld ms  worker %d (pid %d) token %llu: counter %ld -> %ld%s\n",
           now, id, pid, tok, value - 1, value,
           tok > last_token ? "" : "  <- TOKEN DID NOT INCREASE");
    if (tok <= last_token || value != last_value + 1) ok = 0;
    last_token = tok;
    last_value = value;
    turns++;
  }
  for (int i = 0; i < WORKERS; i++) {
    int st;
    waitpid(kids[i], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ok = 0;
  }
  fclose(events);
  redisContext *r = redisConnectUnix(sock);
  redisReply *rep = redisCommand(r, "GET demo:counter");
  long final = rep && rep->type == REDIS_REPLY_STRING ? atol(rep->str) : -1;
  freeReplyObject(rep);
  redisFree(r);
  stop_server();
  printf("final counter = %ld, expected %d: %s\n", final, WORKERS * ROUNDS,
         ok && final == WORKERS * ROUNDS ? "correct, no update was lost"
                                         : "WRONG");
  printf("fencing tokens strictly increased in grant order: %s\n",
         ok ? "yes" : "no");
  return ok && final == WORKERS * ROUNDS ? 0 : 1;
}
