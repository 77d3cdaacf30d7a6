/* harness_etcd.c: private single-member etcd servers for the tests
 * (Debian's etcd-server), on loopback ports in a fresh dir. */
#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

bool th_etcd_available(void) {
  return system("command -v etcd >/dev/null 2>&1") == 0;
}

/* The server's answer to GET path (headers and body), "" if none. */
const char *th_etcd_get(const th_etcd *r, const char *path, char *buf,
                        size_t len) {
  buf[0] = '\0';
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return buf;
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)r->port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  struct timeval tv = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  char req[300];
  int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\n\r\n", path);
  size_t got = 0;
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
      write(fd, req, (size_t)n) == n) {
    ssize_t k;
    while (got + 1 < len && (k = read(fd, buf + got, len - 1 - got)) > 0)
      got += (size_t)k;
  }
  buf[got] = '\0';
  close(fd);
  return buf;
}

int th_etcd_start(th_etcd *r) {
  memset(r, 0, sizeof *r);
  snprintf(r->dir, sizeof r->dir, "%s/etcd-XXXXXX", th_tmpdir());
  if (mkdtemp(r->dir) == NULL) return -1;
  r->port = th_free_port();
  r->peer_port = th_free_port();
  if (r->port <= 0 || r->peer_port <= 0) return -1;
  snprintf(r->endpoint, sizeof r->endpoint, "127.0.0.1:%d", r->port);
  snprintf(r->url, sizeof r->url, "etcd://127.0.0.1:%d", r->port);
  return th_etcd_restart(r);
}

/* Starts the member r (its dir, ports, name and initial cluster made). */
static int spawn_member(th_etcd *r) {
  char cmd[2000];
  snprintf(cmd, sizeof cmd,
           "exec etcd --name %s --data-dir '%s/data' "
           "--listen-client-urls http://127.0.0.1:%d "
           "--advertise-client-urls http://127.0.0.1:%d "
           "--listen-peer-urls http://127.0.0.1:%d "
           "--initial-advertise-peer-urls http://127.0.0.1:%d "
           "--initial-cluster %s --initial-cluster-token dlock-test "
           "--log-level error --logger zap >>'%s/etcd.log' 2>&1",
           r->name, r->dir, r->port, r->port, r->peer_port, r->peer_port,
           r->initial, r->dir);
  pid_t pid = th__spawn(cmd);
  if (pid < 0) return -1;
  r->pid = pid;
  th__track(pid, r->dir);
  return 0;
}

static int await_healthy(th_etcd *r);

int th_etcd_restart(th_etcd *r) {
  th_etcd_kill(r, SIGKILL);
  if (r->name[0] == '\0') {
    snprintf(r->name, sizeof r->name, "n1");
    snprintf(r->initial, sizeof r->initial, "n1=http://127.0.0.1:%d",
             r->peer_port);
  }
  if (spawn_member(r) != 0) return -1;
  return await_healthy(r);
}

int th_etcd_cluster_start(th_etcd r[3], char *url, size_t len) {
  char initial[sizeof r[0].initial] = "";
  size_t at = 0;
  for (int i = 0; i < 3; i++) {
    memset(&r[i], 0, sizeof r[i]);
    snprintf(r[i].dir, sizeof r[i].dir, "%s/etcd%d-XXXXXX", th_tmpdir(), i + 1);
    if (mkdtemp(r[i].dir) == NULL) return -1;
    r[i].port = th_free_port();
    r[i].peer_port = th_free_port();
    if (r[i].port <= 0 || r[i].peer_port <= 0) return -1;
    snprintf(r[i].name, sizeof r[i].name, "n%d", i + 1);
    snprintf(r[i].endpoint, sizeof r[i].endpoint, "127.0.0.1:%d", r[i].port);
    snprintf(r[i].url, sizeof r[i].url, "etcd://127.0.0.1:%d", r[i].port);
    at += (size_t)snprintf(initial + at, sizeof initial - at,
                           "%sn%d=http://127.0.0.1:%d", i ? "," : "", i + 1,
                           r[i].peer_port);
  }
  int n = snprintf(url, len, "etcd://%s,%s,%s", r[0].endpoint, r[1].endpoint,
                   r[2].endpoint);
  if (n < 0 || (size_t)n >= len) return -1;
  for (int i = 0; i < 3; i++) {
    snprintf(r[i].initial, sizeof r[i].initial, "%s", initial);
    if (spawn_member(&r[i]) != 0) return -1;
  }
  for (int i = 0; i < 3; i++)
    if (await_healthy(&r[i]) != 0) return -1;
  return 0;
}

/* Waits until r says it is healthy (it has a leader). */
static int await_healthy(th_etcd *r) {
  char cmd[400];
  int64_t end = th_now_ms() + 20000; /* ~1 s unloaded */
  char buf[1024];
  while (th_now_ms() < end) {
    if (strstr(th_etcd_get(r, "/health", buf, sizeof buf),
               "\"health\":\"true\""))
      return 0;
    int st;
    if (waitpid(r->pid, &st, WNOHANG) == r->pid) {
      r->pid = 0;
      th__track(0, r->dir);
      break;
    }
    th_sleep_ms(20);
  }
  fprintf(stderr, "    etcd did not serve:\n");
  snprintf(cmd, sizeof cmd, "tail -n 20 '%s/etcd.log' >&2", r->dir);
  if (system(cmd) != 0) fprintf(stderr, "    (no log in %s)\n", r->dir);
  return -1;
}

void th_etcd_kill(th_etcd *r, int sig) {
  if (r->pid <= 0) return;
  kill(r->pid, sig);
  if (sig == SIGKILL) {
    while (waitpid(r->pid, NULL, 0) < 0 && errno == EINTR) {
    }
    r->pid = 0;
    th__track(0, r->dir);
  }
}

void th_etcd_stop(th_etcd *r) {
  if (r->pid > 0) {
    kill(r->pid, SIGCONT);
    th_etcd_kill(r, SIGKILL);
  }
  if (r->dir[0]) {
    th__untrack(r->dir);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", r->dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", r->dir);
    r->dir[0] = '\0';
  }
}
