/* test_async_tls.c: rediss:// through the event-loop connection, with each
 * driver (built-in, libuv, libevent): a lock taken and given back over TLS,
 * and the control, a server certificate the client cannot verify, which
 * fails the operation with a clear error instead of hanging. Certificates
 * and server arguments from the harness (th_tls_setup). */
#include "loop_drivers.h"

#include <string.h>

/* One operation's outcome. */
typedef struct got {
  int calls, rc;
  uint64_t token;
  char msg[256];
} got;

static void on_done(int rc, uint64_t token, const char *errmsg, void *ud) {
  got *g = ud;
  g->calls++;
  g->rc = rc;
  g->token = token;
  snprintf(g->msg, sizeof g->msg, "%s", errmsg);
}

/* Over TLS (by address without a client certificate, then by host name
 * with one), acquire and release on the loop. */
static void tls_lock(int kind) {
  static const struct {
    const char *host;
    bool cert;
  } ways[] = {{"127.0.0.1", false}, {"localhost", true}};
  for (size_t i = 0; i < sizeof ways / sizeof ways[0]; i++) {
    td_loop t;
    CHECK_RC(td_open(&t, kind), 0);
    dlock_client_options o;
    th_tls_paths p;
    th_tls_options(&o, &p, ways[i].host, "ca", ways[i].cert);
    dlock_client *c = NULL;
    CHECK_RC(dlock_client_open_async(&o, t.lp, &c), 0);
    dlock_lock *l;
    CHECK_RC(dlock_lock_new(c, "atls:lock", NULL, &l), 0);
    got a = {0}, r = {0};
    CHECK_RC(dlock_lock_acquire_async(l, 0, 5000, on_done, &a, NULL), 0);
    CHECK(td_run_until(&t, &a.calls, 5000));
    if (a.rc) fprintf(stderr, "    %s\n", a.msg);
    CHECK_RC(a.rc, 0);
    CHECK(a.token > 0);
    CHECK_EQ(th_cmd_int(&th_srv, "EXISTS atls:lock"), 1);
    CHECK_RC(dlock_lock_release_async(l, on_done, &r, NULL), 0);
    CHECK(td_run_until(&t, &r.calls, 5000));
    CHECK_RC(r.rc, 1);
    CHECK_EQ(th_cmd_int(&th_srv, "EXISTS atls:lock"), 0);
    dlock_lock_free(l);
    dlock_client_close(c);
    td_close(&t);
  }
}
TD_DRIVERS(tls_lock)

/* The control: the server's certificate is signed by another CA. The
 * open may fail at once or the first operation does (the handshake runs on
 * the loop); either way with DLOCK_ETLS saying why, well before the test's
 * bound, and the lock is never taken. */
static void tls_wrong_ca(int kind) {
  td_loop t;
  CHECK_RC(td_open(&t, kind), 0);
  dlock_client_options o;
  th_tls_paths p;
  th_tls_options(&o, &p, "127.0.0.1", "otherca", false);
  dlock_client *c = NULL;
  int64_t t0 = th_now_ms();
  int rc = dlock_client_open_async(&o, t.lp, &c);
  got a = {0};
  dlock_lock *l = NULL;
  if (rc == 0) {
    CHECK_RC(dlock_lock_new(c, "atls:lock", NULL, &l), 0);
    CHECK_RC(dlock_lock_acquire_async(l, 0, 5000, on_done, &a, NULL), 0);
    CHECK(td_run_until(&t, &a.calls, 15000));
    rc = a.rc;
  } else {
    snprintf(a.msg, sizeof a.msg, "%s", dlock_client_open_errmsg());
  }
  int64_t took = th_now_ms() - t0;
  fprintf(stderr, "    %s (%s) after %lld ms: %s\n", dlock_err_name(rc),
          c ? "the operation" : "the open", (long long)took, a.msg);
  CHECK_RC(rc, DLOCK_ETLS);
  CHECK(strstr(a.msg, "verify") != NULL);
  CHECK(took < 5000);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS atls:lock"), 0);
  dlock_lock_free(l);
  dlock_client_close(c);
  td_close(&t);
}
TD_DRIVERS(tls_wrong_ca)

TH_MAIN_WITH(th_tls_setup, TD_T_REDIS(tls_lock, th_tls_args),
             TD_T_REDIS(tls_wrong_ca, th_tls_args))
