/* harness_zk.c: private standalone ZooKeeper servers for the tests. */
#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define ZK_JARS "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-nop.jar"

bool th_zk_available(void) {
  return access("/usr/share/java/zookeeper.jar", R_OK) == 0 &&
         system("command -v java >/dev/null 2>&1") == 0;
}

const char *th_zk_4lw(const th_zk *r, const char *word, char *buf, size_t len) {
  buf[0] = '\0';
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return buf;
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)r->port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  struct timeval tv = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  size_t got = 0;
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
      write(fd, word, strlen(word)) == (ssize_t)strlen(word)) {
    /* The server answers and closes. */
    ssize_t n;
    while (got + 1 < len && (n = read(fd, buf + got, len - 1 - got)) > 0)
      got += (size_t)n;
  }
  buf[got] = '\0';
  close(fd);
  return buf;
}

static int write_cfg(const th_zk *r, int tick_ms) {
  char path[300];
  snprintf(path, sizeof path, "%s/zoo.cfg", r->dir);
  FILE *f = fopen(path, "w");
  if (f == NULL) return -1;
  fprintf(f,
          "tickTime=%d\n"
          "dataDir=%s/data\n"
          "clientPort=%d\n"
          "clientPortAddress=127.0.0.1\n"
          "admin.enableServer=false\n"
          "4lw.commands.whitelist=ruok,srvr,conf\n",
          tick_ms, r->dir, r->port);
  return fclose(f) == 0 ? 0 : -1;
}

static void print_log(const th_zk *r) {
  char cmd[400];
  snprintf(cmd, sizeof cmd, "tail -n 20 '%s/zk.log' >&2", r->dir);
  if (system(cmd) != 0) fprintf(stderr, "    (no log in %s)\n", r->dir);
}

static int launch(th_zk *r);

/* Whether the server of r, exited, found its port bound by another
 * process (ZooKeeper logs nothing here: slf4j-nop). */
static bool zk_port_taken(const th_zk *r) {
  return !th_port_free(r->port);
}

static int spawn_server(th_zk *r);
static int await_serving(th_zk *r, int timeout_ms);

int th_zk_start(th_zk *r, int tick_ms) {
  memset(r, 0, sizeof *r);
  snprintf(r->dir, sizeof r->dir, "%s/zk-XXXXXX", th_tmpdir());
  if (mkdtemp(r->dir) == NULL) return -1;
  char data[300];
  snprintf(data, sizeof data, "%s/data", r->dir);
  if (mkdir(data, 0700) != 0) return -1;
  /* Another process may bind the port between th_free_port and the
   * server's bind: a new port, up to 5 times, as th_redis_start does. */
  for (int i = 0; i < 5; i++) {
    r->port = th_free_port();
    if (r->port <= 0 || write_cfg(r, tick_ms > 0 ? tick_ms : 500) != 0)
      return -1;
    snprintf(r->connect, sizeof r->connect, "127.0.0.1:%d", r->port);
    snprintf(r->url, sizeof r->url, "zk://127.0.0.1:%d", r->port);
    if (launch(r) == 0) return 0;
    if (r->pid > 0 || !zk_port_taken(r)) return -1;
    fprintf(stderr, "    the port was taken: ZooKeeper again on another\n");
  }
  return -1;
}

int th_zk_restart(th_zk *r) {
  th_zk_kill(r, SIGCONT);
  th_zk_kill(r, SIGKILL);
  return launch(r);
}

int th_zk_start_again(th_zk *r) {
  if (spawn_server(r) != 0) return -1;
  return await_serving(r, 40000);
}

/* Starts the server process of r (its dir, config and port made). */
static int spawn_server(th_zk *r) {
  char cmd[1200];
  snprintf(cmd, sizeof cmd,
           "exec java -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 "
           "-cp " ZK_JARS " org.apache.zookeeper.server.quorum."
           "QuorumPeerMain '%s/zoo.cfg' >>'%s/zk.log' 2>&1",
           r->dir, r->dir);
  pid_t pid = th__spawn(cmd);
  if (pid < 0) return -1;
  r->pid = pid;
  th__track(pid, r->dir);
  return 0;
}

/* Waits until the server of r serves, up to timeout_ms. */
static int await_serving(th_zk *r, int timeout_ms) {
  int64_t end = th_now_ms() + timeout_ms;
  char buf[512];
  while (th_now_ms() < end) {
    /* imok says the process runs; a few ms later srvr says it serves
     * (before that it answers "not currently serving requests"). */
    if (strcmp(th_zk_4lw(r, "ruok", buf, sizeof buf), "imok") == 0 &&
        strstr(th_zk_4lw(r, "srvr", buf, sizeof buf), "Mode: ") != NULL)
      return 0;
    int st;
    if (waitpid(r->pid, &st, WNOHANG) == r->pid) {
      r->pid = 0;
      th__track(0, r->dir);
      fprintf(stderr, "    ZooKeeper exited at start-up:\n");
      print_log(r);
      return -1;
    }
    th_sleep_ms(20);
  }
  fprintf(stderr, "    ZooKeeper did not serve in %d ms:\n", timeout_ms);
  print_log(r);
  return -1;
}

/* Starts the server of r (its dir, config and port made) and waits until
 * it serves. */
static int launch(th_zk *r) {
  if (spawn_server(r) != 0) return -1;
  return await_serving(r, 20000); /* ~1.2 s unloaded; 2 shared cores */
}

int th_zk_ensemble_start(th_zk zk[3], int tick_ms, char *url, size_t len) {
  int peer[3], elect[3];
  for (int i = 0; i < 3; i++) {
    memset(&zk[i], 0, sizeof zk[i]);
    snprintf(zk[i].dir, sizeof zk[i].dir, "%s/zk%d-XXXXXX", th_tmpdir(), i + 1);
    if (mkdtemp(zk[i].dir) == NULL) return -1;
    zk[i].port = th_free_port();
    peer[i] = th_free_port();
    elect[i] = th_free_port();
    if (zk[i].port <= 0 || peer[i] <= 0 || elect[i] <= 0) return -1;
    snprintf(zk[i].connect, sizeof zk[i].connect, "127.0.0.1:%d", zk[i].port);
    snprintf(zk[i].url, sizeof zk[i].url, "zk://127.0.0.1:%d", zk[i].port);
  }
  int at = snprintf(url, len, "zk://");
  for (int i = 0; i < 3; i++) {
    char data[300], path[320];
    snprintf(data, sizeof data, "%s/data", zk[i].dir);
    if (mkdir(data, 0700) != 0 ||
        write_cfg(&zk[i], tick_ms > 0 ? tick_ms : 500) != 0)
      return -1;
    snprintf(path, sizeof path, "%s/zoo.cfg", zk[i].dir);
    FILE *f = fopen(path, "a");
    if (f == NULL) return -1;
    fprintf(f, "initLimit=10\nsyncLimit=5\n");
    for (int j = 0; j < 3; j++)
      fprintf(f, "server.%d=127.0.0.1:%d:%d\n", j + 1, peer[j], elect[j]);
    fclose(f);
    snprintf(path, sizeof path, "%s/myid", data);
    f = fopen(path, "w");
    if (f == NULL) return -1;
    fprintf(f, "%d\n", i + 1);
    fclose(f);
    at += snprintf(url + at, len - (size_t)at, "%s%s", i ? "," : "",
                   zk[i].connect);
  }
  for (int i = 0; i < 3; i++)
    if (spawn_server(&zk[i]) != 0) return -1;
  for (int i = 0; i < 3; i++)
    if (await_serving(&zk[i], 40000) != 0) return -1;
  return 0;
}

int th_zk_leader(th_zk zk[3]) {
  char buf[512];
  for (int i = 0; i < 3; i++)
    if (zk[i].pid > 0 &&
        strstr(th_zk_4lw(&zk[i], "srvr", buf, sizeof buf), "Mode: leader"))
      return i;
  return -1;
}

void th_zk_kill(th_zk *r, int sig) {
  if (r->pid <= 0) return;
  kill(r->pid, sig);
  if (sig == SIGSTOP) th__await_stop(r->pid);
  if (sig == SIGKILL) {
    while (waitpid(r->pid, NULL, 0) < 0 && errno == EINTR) {
    }
    r->pid = 0;
    th__track(0, r->dir);
  }
}

void th_zk_stop(th_zk *r) {
  if (r->pid > 0) {
    kill(r->pid, SIGCONT);
    th_zk_kill(r, SIGKILL);
  }
  if (r->dir[0]) {
    th__untrack(r->dir);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", r->dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", r->dir);
    r->dir[0] = '\0';
  }
}
