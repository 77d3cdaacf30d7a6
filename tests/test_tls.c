/* test_tls.c: rediss:// against redis-server --tls-port, with a CA, server
 * and client certificates the harness generates with openssl(1)
 * (th_tls_setup). */
#include "harness.h"

#include <string.h>

static dlock_client *tls_client(const char *host, const char *ca,
                                const char *server_name, bool with_cert,
                                int *rc) {
  dlock_client_options o;
  th_tls_paths p;
  th_tls_options(&o, &p, host, ca, with_cert);
  o.tls_server_name = server_name;
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

TH_MAIN_WITH(th_tls_setup, T_REDIS(t_tls_lock, th_tls_args),
             T_REDIS(t_tls_wrong_ca, th_tls_args),
             T_REDIS(t_tls_wrong_name, th_tls_args),
             T_REDIS(t_tls_to_plain_port, th_tls_args))
