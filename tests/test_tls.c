/* test_tls.c: rediss:// against redis-server --tls-port, with a CA, server
 * and client certificates the test generates with openssl(1). */
#include "harness.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256]; /* the certificates, in th_tmpdir() */
static int tls_port;
/* The servers' TLS arguments, filled in by make_certs before the first test
 * (the tests' server is started with them: T_REDIS). */
static char tls_args[1024];

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
            dir, name, name, name);
}

static int make_cert(const char *name, const char *ca, const char *san) {
  return sh("cd %s && openssl req -newkey rsa:2048 -nodes -subj '/CN=%s' "
            "-keyout %s.key -out %s.csr >/dev/null 2>&1 && "
            "printf 'subjectAltName=%s\\n' > %s.ext && "
            "openssl x509 -req -in %s.csr -CA %s.crt -CAkey %s.key "
            "-CAcreateserial -days 2 -extfile %s.ext -out %s.crt "
            ">/dev/null 2>&1",
            dir, name, name, name, san, name, name, ca, ca, name, name);
}

/* Before the first test, once, in the runner: the certificates, and a TLS
 * port that a server could listen on a moment ago. */
static int make_certs(void) {
  snprintf(dir, sizeof dir, "%s/tls", th_tmpdir());
  if (mkdir(dir, 0700) != 0 || make_ca("ca") || make_ca("otherca") ||
      make_cert("server", "ca", "IP:127.0.0.1,DNS:localhost") ||
      make_cert("client", "ca", "DNS:client")) {
    fprintf(stderr, "cannot make certificates\n");
    return -1;
  }
  for (int attempt = 0; attempt < 5; attempt++) {
    tls_port = th_free_port();
    snprintf(tls_args, sizeof tls_args,
             "--tls-port %d --tls-cert-file %s/server.crt "
             "--tls-key-file %s/server.key --tls-ca-cert-file %s/ca.crt "
             "--tls-auth-clients optional",
             tls_port, dir, dir, dir);
    th_redis probe;
    int rc = th_redis_start(&probe, tls_args);
    th_redis_stop(&probe);
    if (rc == 0) return 0;
  }
  fprintf(stderr, "cannot start redis-server with TLS\n");
  return -1;
}

static dlock_client *tls_client(const char *host, const char *ca,
                                const char *server_name, bool with_cert,
                                int *rc) {
  char url[200], caf[300], cert[300], key[300];
  snprintf(url, sizeof url, "rediss://%s:%d", host, tls_port);
  snprintf(caf, sizeof caf, "%s/%s.crt", dir, ca);
  snprintf(cert, sizeof cert, "%s/client.crt", dir);
  snprintf(key, sizeof key, "%s/client.key", dir);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.tls_ca_file = caf;
  o.tls_server_name = server_name;
  o.connect_timeout_ms = 2000;
  if (with_cert) {
    o.tls_cert_file = cert;
    o.tls_key_file = key;
  }
  dlock_client *c = NULL;
  *rc = dlock_client_open(&o, &c);
  return c;
}

static void t_tls_lock(void) {
  int rc;
  dlock_client *c = tls_client("127.0.0.1", "ca", NULL, false, &rc);
  if (rc) fprintf(stderr, "    %s\n", dlock_client_open_errmsg());
  CHECK_RC(rc, 0);
  CHECK_RC(dlock_client_ping(c), 0);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "tls:lock", NULL, &l), 0);
  CHECK_RC(dlock_lock_acquire(l, 5000, NULL), 0);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS tls:lock"), 1);
  CHECK_EQ(dlock_lock_release(l), 1);
  dlock_lock_free(l);
  dlock_client_close(c);
  /* By host name, and with a client certificate. */
  c = tls_client("localhost", "ca", NULL, true, &rc);
  CHECK_RC(rc, 0);
  CHECK_RC(dlock_client_ping(c), 0);
  dlock_client_close(c);
}

static void t_tls_wrong_ca(void) {
  int rc;
  dlock_client *c = tls_client("127.0.0.1", "otherca", NULL, false, &rc);
  CHECK(c == NULL);
  CHECK_RC(rc, DLOCK_ETLS);
  CHECK(strstr(dlock_client_open_errmsg(), "verify") != NULL);
}

static void t_tls_wrong_name(void) {
  int rc;
  dlock_client *c =
      tls_client("127.0.0.1", "ca", "wrong.example.com", false, &rc);
  CHECK(c == NULL);
  CHECK_RC(rc, DLOCK_ETLS);
}

static void t_tls_to_plain_port(void) {
  char url[200];
  snprintf(url, sizeof url, "rediss://127.0.0.1:%d", th_srv.port);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = 1000;
  dlock_client *c = NULL;
  int rc = dlock_client_open(&o, &c);
  CHECK(c == NULL);
  CHECK(rc == DLOCK_ETLS || rc == DLOCK_ETIMEDOUT);
}

TH_MAIN_WITH(make_certs, T_REDIS(t_tls_lock, tls_args),
             T_REDIS(t_tls_wrong_ca, tls_args),
             T_REDIS(t_tls_wrong_name, tls_args),
             T_REDIS(t_tls_to_plain_port, tls_args))
