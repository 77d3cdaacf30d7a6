/* test_harness.c: the runner's own checks (a positive control): it runs
 * hidden tests that fail, crash, hang, leak or leave servers behind through
 * th_run, inside a test, and checks what th_run reports and cleans up. */
#include "harness.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the hidden tests, run only through inner() ---- */

static int leftover; /* set by a failing test; its successor must not see it */
static char report[300]; /* where h_servers writes what it started */

static void h_check_fails(void) {
  leftover = 1;
  CHECK_EQ(leftover, 0);
}

static void h_abort(void) {
  leftover = 1;
  abort();
}

static void h_hang(void) {
  leftover = 1;
  for (;;)
    pause();
}

static void *volatile leaked;

static void h_leak(void) {
  leaked = malloc(100);
  CHECK(leaked != NULL);
  leaked = NULL; /* now definitely lost */
}

static void h_clean(void) {
  CHECK_EQ(leftover, 0);
}

/* Starts a server of its own and a helper process that would sleep for a
 * minute, says so in `report`, then crashes. */
static void h_servers(void) {
  th_redis mine;
  CHECK(th_redis_start(&mine, NULL) == 0);
  pid_t helper = fork();
  if (helper == 0) {
    th_sleep_ms(60000);
    _exit(0);
  }
  FILE *f = fopen(report, "w");
  CHECK(f != NULL);
  fprintf(f, "%d %s\n%d %s\n%d\n", (int)th_srv.pid, th_srv.dir, (int)mine.pid,
          mine.dir, (int)helper);
  fclose(f);
  abort();
}

static void h_dirty(void) {
  redisReply *r = th_cmd(&th_srv, "SET dirty 1");
  CHECK(r && r->type == REDIS_REPLY_STATUS);
  freeReplyObject(r);
  r = th_cmd(&th_srv, "CONFIG SET maxmemory 1");
  CHECK(r && r->type == REDIS_REPLY_STATUS);
  freeReplyObject(r);
}

static void h_fresh(void) {
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS dirty"), 0);
  redisReply *r = th_cmd(&th_srv, "CONFIG GET maxmemory");
  CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2);
  CHECK(strcmp(r->element[1]->str, "0") == 0);
  freeReplyObject(r);
}

static const th_test hidden[] = {
    T_BARE(h_check_fails), T_BARE(h_abort), T_BARE(h_hang), T_BARE(h_leak),
    T_BARE(h_clean),       T(h_servers),    T(h_dirty),     T(h_fresh)};

/* Runs th_run over the hidden tests `names` (NULL-terminated) in this
 * process, its report going to `out`; returns th_run's status. The report
 * is also shown on stderr. */
static int inner(const char *const *names, char *out, size_t len) {
  char *argv[16] = {"test_harness"};
  int argc = 1;
  while (*names && argc < 15)
    argv[argc++] = (char *)*names++;
  fprintf(stderr, "    inner run of %s ... (its failures are on purpose)\n",
          argv[1]);
  fflush(stdout);
  FILE *tmp = tmpfile();
  int saved = dup(STDOUT_FILENO);
  if (tmp == NULL || saved < 0) return -1;
  dup2(fileno(tmp), STDOUT_FILENO);
  int rc = th_run(argc, argv, hidden, sizeof hidden / sizeof hidden[0], NULL);
  fflush(stdout);
  dup2(saved, STDOUT_FILENO);
  close(saved);
  rewind(tmp);
  size_t n = fread(out, 1, len - 1, tmp);
  out[n] = '\0';
  fclose(tmp);
  fprintf(stderr, "    inner run's report, status %d:\n", rc);
  for (char *line = out, *nl; *line; line = nl + 1) {
    nl = strchr(line, '\n');
    if (nl == NULL) nl = line + strlen(line) - 1;
    fprintf(stderr, "    | %.*s\n", (int)(nl - line), line);
  }
  return rc;
}

static bool has(const char *out, const char *what) {
  bool yes = strstr(out, what) != NULL;
  if (!yes) fprintf(stderr, "    no \"%s\" in the report\n", what);
  return yes;
}

static void t_failed_check_contained(void) {
  char out[4096];
  const char *names[] = {"h_check_fails", "h_clean", NULL};
  CHECK_EQ(inner(names, out, sizeof out), 1);
  CHECK(has(out, "FAIL h_check_fails"));
  /* The check's own words repeated on the FAIL line. */
  CHECK(has(out, ": a CHECK failed: "));
  CHECK(has(out, "leftover == 1, expected 0 == 0\n"));
  CHECK(has(out, "ok   h_clean"));
  CHECK(has(out, "1 passed, 1 failed\n"));
}

static void t_crash_named(void) {
  char out[4096];
  const char *names[] = {"h_abort", "h_clean", NULL};
  CHECK_EQ(inner(names, out, sizeof out), 1);
  CHECK(has(out, ": killed by signal 6 (SIGABRT)\n"));
  CHECK(has(out, "ok   h_clean"));
  CHECK(has(out, "1 passed, 1 failed\n"));
}

/* th_after_each runs in the runner after each test, a crashed one too. */
static int after_each_n;
static void count_after_each(void) { after_each_n++; }
static void t_after_each(void) {
  char out[4096];
  const char *names[] = {"h_abort", "h_clean", NULL};
  after_each_n = 0;
  th_after_each = count_after_each;
  int rc = inner(names, out, sizeof out);
  th_after_each = NULL;
  CHECK_EQ(rc, 1);
  CHECK_EQ(after_each_n, 2);
}

static void t_hang_killed(void) {
  char out[4096];
  const char *names[] = {"h_hang", "h_clean", NULL};
  setenv("DLOCK_TEST_TIMEOUT_S", "1", 1);
  int64_t t0 = th_now_ms();
  int rc = inner(names, out, sizeof out);
  int64_t took = th_now_ms() - t0;
  unsetenv("DLOCK_TEST_TIMEOUT_S");
  CHECK_EQ(rc, 1);
  CHECK(has(out, "FAIL h_hang"));
  CHECK(has(out, ": timed out after 1 s, killed\n"));
  CHECK(has(out, "ok   h_clean"));
  CHECK(took < 10000);
}

/* Under valgrind (as scripts/test.sh runs it: --error-exitcode and
 * --errors-for-leak-kinds=definite) or LeakSanitizer. */
static bool leak_checked(void) {
#if defined(__SANITIZE_ADDRESS__)
  bool asan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  bool asan = true;
#else
  bool asan = false;
#endif
#else
  bool asan = false;
#endif
  const char *o = getenv("ASAN_OPTIONS");
  if (asan) return o == NULL || strstr(o, "detect_leaks=0") == NULL;
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512];
  bool vg = false;
  while (f && !vg && fgets(line, sizeof line, f))
    vg = strstr(line, "vgpreload_memcheck") != NULL;
  if (f) fclose(f);
  return vg;
}

static void t_leak_fails(void) {
  char out[4096];
  const char *names[] = {"h_leak", "h_clean", NULL};
  bool checked = leak_checked();
  fprintf(stderr, "    %s (a leak report may follow)\n",
          checked ? "a leak checker runs: h_leak must fail"
                  : "no leak checker: h_leak passes");
  CHECK_EQ(inner(names, out, sizeof out), checked ? 1 : 0);
  CHECK(has(out, checked ? "FAIL h_leak" : "ok   h_leak"));
  if (checked) { /* the checker's exit status, not taken for a CHECK */
    CHECK(has(out, ": exit status "));
    CHECK(strstr(out, "a CHECK failed") == NULL);
  }
  CHECK(has(out, "ok   h_clean"));
}

static bool gone(pid_t pid) {
  char path[64], line[256] = "";
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL) return true;
  bool zombie = fgets(line, sizeof line, f) && strstr(line, ") Z ") != NULL;
  fclose(f);
  return zombie; /* dead, not yet reaped by whoever adopted it */
}

static bool all_gone(void *p) {
  const pid_t *pids = p;
  return gone(pids[0]) && gone(pids[1]) && gone(pids[2]);
}

static void t_crash_leaves_nothing(void) {
  /* The runner's server for the test, the test's own server and the
   * test's helper process are all stopped, and their dirs removed. */
  char out[4096];
  snprintf(report, sizeof report, "%s/report", th_tmpdir());
  const char *names[] = {"h_servers", NULL};
  CHECK_EQ(inner(names, out, sizeof out), 1);
  CHECK(has(out, "FAIL h_servers"));
  CHECK(has(out, "(SIGABRT)"));
  FILE *f = fopen(report, "r");
  CHECK(f != NULL);
  int a = 0, b = 0, c = 0;
  char dir_a[256] = "", dir_b[256] = "";
  int got = fscanf(f, "%d %255s %d %255s %d", &a, dir_a, &b, dir_b, &c);
  fclose(f);
  CHECK_EQ(got, 5);
  CHECK(a > 0 && b > 0 && c > 0);
  pid_t pids[3] = {a, b, c};
  CHECK(th_wait_for(all_gone, pids, 5000));
  struct stat st;
  CHECK(stat(dir_a, &st) != 0 && errno == ENOENT);
  CHECK(stat(dir_b, &st) != 0 && errno == ENOENT);
}

static void t_fresh_server_per_test(void) {
  char out[4096];
  const char *names[] = {"h_dirty", "h_fresh", NULL};
  CHECK_EQ(inner(names, out, sizeof out), 0);
  CHECK(has(out, "2 passed, 0 failed\n"));
}

static void t_by_name(void) {
  char out[4096];
  const char *one[] = {"h_clean", NULL};
  CHECK_EQ(inner(one, out, sizeof out), 0);
  CHECK(has(out, "ok   h_clean"));
  CHECK(strstr(out, "h_check_fails") == NULL);
  CHECK(has(out, "1 passed, 0 failed\n"));
  const char *unknown[] = {"h_clean", "no_such_test", NULL};
  CHECK_EQ(inner(unknown, out, sizeof out), 2);
  CHECK(strstr(out, "h_clean") == NULL);
}

/* The cluster the Cluster tests will run on: three masters that agree
 * (cluster_state:ok), each slot on the node it was given; Redisson's
 * "{name}" keys share their name's slot; a key sent to a node that does
 * not own it gets MOVED there; and everything is gone once stopped. */
static void t_cluster(void) {
  th_cluster k;
  int64_t t0 = th_now_ms();
  CHECK_RC(th_cluster_start(&k, NULL), 0);
  fprintf(stderr, "    cluster up in %lld ms\n", (long long)(th_now_ms() - t0));
  CHECK(strncmp(k.url, "redis-cluster://127.0.0.1:", 26) == 0);
  CHECK_EQ(th_cluster_node_of(&k, "mylock"), 0);
  CHECK_EQ(th_cmd_int(&k.nodes[0], "CLUSTER KEYSLOT {mylock}"),
           th_cmd_int(&k.nodes[0], "CLUSTER KEYSLOT mylock"));
  CHECK_EQ(th_cmd_int(&k.nodes[0], "CLUSTER KEYSLOT mylock"), 1711);
  int owner = th_cluster_node_of(&k, "x");
  CHECK(owner >= 0);
  redisReply *r = th_cmd(&k.nodes[(owner + 1) % 3], "SET x 1");
  CHECK(r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "MOVED ", 6) == 0);
  if (r) freeReplyObject(r);
  r = th_cmd(&k.nodes[owner], "SET x 1");
  CHECK(r && r->type == REDIS_REPLY_STATUS);
  if (r) freeReplyObject(r);
  pid_t pids[3];
  char dirs[3][256];
  for (int i = 0; i < 3; i++) {
    pids[i] = k.nodes[i].pid;
    snprintf(dirs[i], sizeof dirs[i], "%s", k.nodes[i].dir);
  }
  th_cluster_stop(&k);
  for (int i = 0; i < 3; i++) {
    CHECK(kill(pids[i], 0) != 0);
    CHECK(access(dirs[i], F_OK) != 0);
  }
}

/* A killed server's port stays its test's until the test exits: another
 * process (ctest -j2) does not draw it while it is free, so the server
 * can restart on it; the reservation ends with the process. */
static void t_killed_port_kept(void) {
  th_redis r;
  CHECK_RC(th_redis_start(&r, NULL), 0);
  int port = r.port;
  th_redis_kill(&r, SIGKILL);
  CHECK(th_port_free(port)); /* the window: nothing listens on it */
  pid_t pid = fork();
  if (pid == 0) { /* another test's process, inheriting nothing of use */
    bool reserved = th_port_reserved(port);
    int drawn = 0;
    for (int i = 0; i < 3000; i++)
      if (th_free_port() == port) drawn++;
    _exit(reserved && drawn == 0 ? 0 : 1);
  }
  int st = -1;
  CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  CHECK_RC(th_redis_restart(&r), 0);
  CHECK_EQ(r.port, port);
  th_redis_stop(&r);
  /* Positive control: a port drawn by a process that has exited is free
   * to draw again. */
  int fds[2];
  CHECK(pipe(fds) == 0);
  pid = fork();
  if (pid == 0) {
    int p = th_free_port();
    _exit(write(fds[1], &p, sizeof p) == sizeof p && th_port_reserved(p)
              ? 0 : 1);
  }
  int theirs = 0;
  CHECK(read(fds[0], &theirs, sizeof theirs) == sizeof theirs);
  close(fds[0]);
  close(fds[1]);
  CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  CHECK(theirs > 0 && !th_port_reserved(theirs));
}

/* A server sent SIGSTOP through the harness has stopped, every thread of
 * it, when th_redis_kill returns: a request sent then gets no answer. */
static void t_stop_done(void) {
  th_redis r;
  CHECK_RC(th_redis_start(&r, NULL), 0);
  redisContext *c = th_redis_connect(&r);
  CHECK(c != NULL);
  th_redis_kill(&r, SIGSTOP);
  CHECK(th__await_stop(r.pid)); /* at once: already stopped */
  struct timeval tv = {0, 200000};
  redisSetTimeout(c, tv);
  redisReply *rep = redisCommand(c, "PING");
  CHECK(rep == NULL); /* timed out */
  if (rep) freeReplyObject(rep);
  redisFree(c);
  th_redis_kill(&r, SIGCONT);
  CHECK_EQ(th_cmd_int(&r, "DBSIZE"), 0);
  th_redis_stop(&r);
}

TH_MAIN(T_BARE(t_failed_check_contained), T_BARE(t_crash_named),
        T_BARE(t_after_each), T_BARE(t_hang_killed), T_BARE(t_leak_fails),
        T_BARE(t_crash_leaves_nothing), T_BARE(t_fresh_server_per_test),
        T_BARE(t_by_name), T_BARE(t_cluster), T_BARE(t_killed_port_kept),
        T_BARE(t_stop_done))
