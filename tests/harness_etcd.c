/* harness_etcd.c: private single-member etcd servers for the tests
 * (Debian's etcd-server), on loopback ports in a fresh dir. */
#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

bool th_etcd_available(void) {
  return system("command -v etcd >/dev/null 2>&1") == 0;
}

dlock_client *th_etcd_client(const th_etcd *s, int64_t lease_ms) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = s->url;
  o.connect_timeout_ms = (int)th_soon(o.connect_timeout_ms);
  if (lease_ms > 0) o.watchdog_timeout_ms = lease_ms;
  dlock_client *c = NULL;
  if (dlock_client_open(&o, &c) != 0)
    fprintf(stderr, "    open: %s\n", dlock_client_open_errmsg());
  return c;
}

const char *th_sh(const char *cmd, char *buf, size_t len) {
  buf[0] = '\0';
  FILE *f = popen(cmd, "r");
  if (f == NULL) return buf;
  size_t n = fread(buf, 1, len - 1, f);
  buf[n] = '\0';
  pclose(f);
  return buf;
}

const char *th_etcd_ctl(const th_etcd *r, const char *args, char *buf,
                        size_t len) {
  char cmd[2000];
  snprintf(cmd, sizeof cmd, "ETCDCTL_API=3 etcdctl --endpoints %s %s %s 2>&1",
           r->endpoint, r->ctl_tls, args);
  return th_sh(cmd, buf, len);
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

/* The sum of the counter `metric`'s series for gRPC method `method`. */
static long long grpc_count(const th_etcd *r, const char *metric,
                            const char *method) {
  size_t len = 4 << 20;
  char *buf = malloc(len), pat[64], m[128];
  if (buf == NULL) return -1;
  th_etcd_get(r, "/metrics", buf, len);
  snprintf(pat, sizeof pat, "\n%s{", metric);
  snprintf(m, sizeof m, "grpc_method=\"%s\"", method);
  long long n = 0;
  for (const char *p = strstr(buf, pat); p; p = strstr(p + 1, pat)) {
    const char *end = strchr(p + 1, '}'), *at = strstr(p, m);
    const char *sp = end ? strchr(end, ' ') : NULL;
    if (sp && at && at < end) n += atoll(sp + 1);
  }
  free(buf);
  return n;
}

long long th_etcd_started(const th_etcd *r, const char *method) {
  return grpc_count(r, "grpc_server_started_total", method);
}

long long th_etcd_handled(const th_etcd *r, const char *method) {
  return grpc_count(r, "grpc_server_handled_total", method);
}

long long th_etcd_gauge(const th_etcd *r, const char *name) {
  size_t len = 4 << 20;
  char *buf = malloc(len), pat[128];
  if (buf == NULL) return -1;
  th_etcd_get(r, "/metrics", buf, len);
  snprintf(pat, sizeof pat, "\n%s ", name);
  const char *p = strstr(buf, pat);
  long long n = p ? atoll(p + strlen(pat)) : -1;
  free(buf);
  return n;
}

int th_etcd_leader(th_etcd r[3]) {
  for (int i = 0; i < 3; i++) {
    if (r[i].pid <= 0) continue;
    /* The metrics are long: the gauge is searched in what fits. */
    size_t len = 4 << 20;
    char *m = malloc(len);
    if (m == NULL) return -1;
    th_etcd_get(&r[i], "/metrics", m, len);
    bool is = strstr(m, "\netcd_server_is_leader 1") != NULL;
    free(m);
    if (is) return i;
  }
  return -1;
}

int th_etcd_start(th_etcd *r) {
  return th_etcd_start_with(r, false, NULL);
}

/* The certificates of etcds:// servers, once per process in dir: the CAs
 * ca and otherca, server (for 127.0.0.1) and client signed by ca; P-256
 * keys (RSA's take seconds to make on a loaded machine). 0 or -1. */
static int make_certs(const char *dir) {
  static int made = 0; /* 1 made, -1 failed */
  if (made) return made > 0 ? 0 : -1;
  char cmd[2500];
  const char *key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  snprintf(cmd, sizeof cmd,
           "set -e; mkdir -p '%s'; cd '%s'; for ca in ca otherca; do "
           "openssl req -x509 %s -days 2 -subj /CN=$ca -keyout $ca.key "
           "-out $ca.crt; done; "
           "for n in server client root; do "
           "openssl req %s -subj /CN=$n -keyout $n.key -out $n.csr; "
           "printf 'subjectAltName=%s\\n' > $n.ext; "
           "openssl x509 -req -in $n.csr -CA ca.crt -CAkey ca.key "
           "-CAcreateserial -days 2 -extfile $n.ext -out $n.crt; done",
           dir, dir, key, key, "IP:127.0.0.1,DNS:localhost");
  char full[2700];
  snprintf(full, sizeof full, "(%s) >/dev/null 2>&1", cmd);
  made = system(full) == 0 ? 1 : -1;
  if (made < 0) fprintf(stderr, "    cannot make certificates in %s\n", dir);
  return made > 0 ? 0 : -1;
}

/* Whether the member in dir exited because a port of its was bound by
 * another process between th_free_port and etcd's bind. */
static bool etcd_port_taken(const char *dir) {
  char path[600];
  snprintf(path, sizeof path, "%s/etcd.log", dir);
  return th_file_has(path, "address already in use");
}

/* Empties dir (a member's data and log) for a start on other ports. */
static void etcd_clear_dir(const char *dir) {
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s/data' '%s/etcd.log'", dir, dir);
  if (system(cmd) != 0) fprintf(stderr, "    cannot clear %s\n", dir);
}

/* Picks r's two ports and the names made of them. */
static int etcd_pick_ports(th_etcd *r, bool tls) {
  r->port = th_free_port();
  r->peer_port = th_free_port();
  if (r->port <= 0 || r->peer_port <= 0) return -1;
  snprintf(r->endpoint, sizeof r->endpoint, "%s127.0.0.1:%d",
           tls ? "https://" : "", r->port);
  snprintf(r->url, sizeof r->url, "%s://127.0.0.1:%d", tls ? "etcds" : "etcd",
           r->port);
  r->name[0] = '\0'; /* th_etcd_restart names it and its peer URL */
  return 0;
}

int th_etcd_start_with(th_etcd *r, bool tls, const char *args) {
  memset(r, 0, sizeof *r);
  if (tls) {
    snprintf(r->tls_dir, sizeof r->tls_dir, "%s/etcd-tls", th_tmpdir());
    if (make_certs(r->tls_dir) != 0) return -1;
  }
  snprintf(r->args, sizeof r->args, "%s", args ? args : "");
  snprintf(r->dir, sizeof r->dir, "%s/etcd-XXXXXX", th_tmpdir());
  if (mkdtemp(r->dir) == NULL) return -1;
  if (tls)
    snprintf(r->ctl_tls, sizeof r->ctl_tls,
             "--cacert %s/ca.crt --cert %s/client.crt --key %s/client.key",
             r->tls_dir, r->tls_dir, r->tls_dir);
  /* Another process (a concurrent test) may bind a port first: new
   * ports, up to 5 times, as th_redis_start does. */
  for (int i = 0; i < 5; i++) {
    if (etcd_pick_ports(r, tls) != 0) return -1;
    if (th_etcd_restart(r) == 0) return 0;
    if (r->pid > 0 || !etcd_port_taken(r->dir)) return -1;
    fprintf(stderr, "    a port was taken: etcd again on other ports\n");
    etcd_clear_dir(r->dir);
  }
  return -1;
}

/* Starts the member r (its dir, ports, name and initial cluster made). */
static int spawn_member(th_etcd *r) {
  char cmd[3000], tls[1000] = "";
  const char *scheme = r->tls_dir[0] ? "https" : "http";
  if (r->tls_dir[0])
    snprintf(tls, sizeof tls,
             "--cert-file %s/server.crt --key-file %s/server.key "
             "--trusted-ca-file %s/ca.crt --client-cert-auth ",
             r->tls_dir, r->tls_dir, r->tls_dir);
  snprintf(cmd, sizeof cmd,
           "exec etcd --name %s --data-dir '%s/data' "
           "--listen-client-urls %s://127.0.0.1:%d "
           "--advertise-client-urls %s://127.0.0.1:%d "
           "--listen-peer-urls http://127.0.0.1:%d "
           "--initial-advertise-peer-urls http://127.0.0.1:%d "
           "--initial-cluster %s --initial-cluster-token dlock-test %s%s "
           "--log-level error --logger zap >>'%s/etcd.log' 2>&1",
           r->name, r->dir, scheme, r->port, scheme, r->port, r->peer_port,
           r->peer_port, r->initial, tls, r->args, r->dir);
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

/* One try at starting the cluster r on fresh ports (dirs made). */
static int cluster_try(th_etcd r[3], char *url, size_t len) {
  char initial[sizeof r[0].initial] = "";
  size_t at = 0;
  for (int i = 0; i < 3; i++) {
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

int th_etcd_cluster_start(th_etcd r[3], char *url, size_t len) {
  for (int i = 0; i < 3; i++) {
    memset(&r[i], 0, sizeof r[i]);
    snprintf(r[i].dir, sizeof r[i].dir, "%s/etcd%d-XXXXXX", th_tmpdir(), i + 1);
    if (mkdtemp(r[i].dir) == NULL) return -1;
  }
  /* A port taken by another process first: the three again on new ports
   * (a member that bootstrapped with the old peers cannot join new). */
  for (int tries = 0; tries < 5; tries++) {
    if (cluster_try(r, url, len) == 0) return 0;
    bool taken = false;
    for (int i = 0; i < 3; i++)
      taken = taken || etcd_port_taken(r[i].dir);
    if (!taken) return -1;
    fprintf(stderr, "    a port was taken: the cluster again on other ports\n");
    for (int i = 0; i < 3; i++) {
      th_etcd_kill(&r[i], SIGKILL);
      etcd_clear_dir(r[i].dir);
    }
  }
  return -1;
}

/* Waits until r says it is healthy (it has a leader). */
static int await_healthy(th_etcd *r) {
  char cmd[1200];
  int64_t end = th_now_ms() + 20000; /* ~1 s unloaded */
  char buf[1024];
  if (r->tls_dir[0]) /* curl(1) speaks TLS */
    snprintf(cmd, sizeof cmd,
             "curl -s --max-time 1 --cacert %s/ca.crt --cert %s/client.crt "
             "--key %s/client.key https://127.0.0.1:%d/health 2>/dev/null | "
             "grep -q '\"health\":\"true\"'",
             r->tls_dir, r->tls_dir, r->tls_dir, r->port);
  while (th_now_ms() < end) {
    if (r->tls_dir[0] ? system(cmd) == 0
                      : strstr(th_etcd_get(r, "/health", buf, sizeof buf),
                               "\"health\":\"true\"") != NULL)
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
  if (sig == SIGSTOP) th__await_stop(r->pid);
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
