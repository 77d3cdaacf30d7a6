/* test_etcd_conn.c: how the etcd backend talks to its servers: etcds://
 * (TLS, client certificates), etcd's token authentication, what a lock
 * cycle costs the server (requests, writes, watches), the transport of
 * the calls and the watches, and how an event-loop client's holds and
 * calls fare when things go wrong (renewal rounds, a burst of acquires,
 * unanswered reads, a release in flight, a failover), against private
 * etcd servers the harness starts. The event-loop client's operations
 * are test_etcd_async.c's. */
#include "etcd_support.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#ifdef DLOCK_TEST_HAVE_ETCD

static atomic_llong lost_at;
static void on_lost(dlock_lock *l, const char *owner, void *ud) {
  (void)l, (void)owner, (void)ud;
  atomic_store(&lost_at, th_now_ms());
}

/* Loss callbacks counted. */
static atomic_int lost_n;
static void on_lost_n(dlock_lock *l, const char *owner, void *ud) {
  (void)l, (void)owner, (void)ud;
  atomic_fetch_add(&lost_n, 1);
}

/* A waiter's thread: acquires the lock arg (5 s at most), woke_at then
 * its time (-1: it failed). */
static atomic_llong woke_at;
static void *waiter(void *arg) {
  int rc = dlock_lock_try_acquire(arg, th_soon(5000), 0, NULL);
  atomic_store(&woke_at, rc == 0 ? th_now_ms() : -1);
  return NULL;
}

/* An event-loop client on o: an acquire, then on the loop's multi handle
 * a query, a ping, the release and a force release finding nothing. */
static void async_cycle(const dlock_client_options *o, const char *name) {
  dlock_loop *lp;
  CHECK_RC(dlock_loop_new(NULL, &lp), 0);
  dlock_client *c;
  CHECK_RC(dlock_client_open_async(o, lp, &c), 0);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, name, "me", &l), 0);
  et_adone d[3] = {{0}};
  CHECK_RC(dlock_lock_acquire_async(l, 0, 0, et_on_adone, &d[0], NULL), 0);
  CHECK(et_run_all(lp, d, 1));
  CHECK_RC(d[0].rc, 0);
  memset(d, 0, sizeof d);
  CHECK_RC(dlock_lock_is_held_async(l, et_on_adone, &d[0], NULL), 0);
  CHECK_RC(dlock_client_ping_async(c, et_on_adone, &d[1], NULL), 0);
  CHECK(et_run_all(lp, d, 2));
  CHECK_RC(d[0].rc, 1);
  CHECK_RC(d[1].rc, 0);
  memset(d, 0, sizeof d);
  CHECK_RC(dlock_lock_release_async(l, et_on_adone, &d[0], NULL), 0);
  CHECK(et_run_all(lp, d, 1));
  CHECK_RC(d[0].rc, 1);
  CHECK_RC(dlock_lock_force_release_async(l, et_on_adone, &d[1], NULL), 0);
  CHECK(et_run_all(lp, d + 1, 1));
  CHECK_RC(d[1].rc, 0);
  dlock_lock_free(l);
  dlock_client_close(c);
  dlock_loop_free(lp);
}

/* etcds://: a server that takes TLS clients with certificates alone
 * (--client-cert-auth); the CA, client certificate and key are the
 * rediss:// options. A CA that did not sign the server's certificate, no
 * client certificate, or etcd:// on its port: the open fails, saying so. */
/* etcd's certificate auth (gRPC only): with auth on, a client that sends
 * no token is the user its certificate's CN names. s serves TLS; o has
 * its CA, the client's certificate (CN "client", no such user) and key. */
static void t_cn_auth(th_etcd *s, dlock_client_options *o) {
  char buf[512], cert[400], key[400];
  snprintf(s->ctl_tls, sizeof s->ctl_tls,
           "--cacert %s/ca.crt --cert %s/root.crt --key %s/root.key",
           s->tls_dir, s->tls_dir, s->tls_dir);
  th_etcd_ctl(s, "user add root --new-user-password=sesame", buf, sizeof buf);
  CHECK(strstr(th_etcd_ctl(s, "auth enable", buf, sizeof buf), "Enabled") !=
        NULL);
  /* CN=client: no such user, so no permission: refused, nothing
   * written. */
  dlock_client *c = NULL;
  dlock_lock *l;
  int rc = dlock_client_open(o, &c);
  if (rc == 0) {
    CHECK_RC(dlock_lock_new(c, "cn", "me", &l), 0);
    rc = dlock_lock_try_acquire(l, 0, 0, NULL);
    fprintf(stderr, "    CN=client: %s\n", dlock_client_errmsg(c));
    dlock_lock_free(l);
    dlock_client_close(c);
  } else {
    fprintf(stderr, "    CN=client: %s\n", dlock_client_open_errmsg());
  }
  CHECK_RC(rc, DLOCK_ENOPERM);
  CHECK(strcmp(th_etcd_ctl(s, "get --prefix cn/ --keys-only", buf, sizeof buf),
               "") == 0);
  /* CN=root, no password: root. */
  snprintf(cert, sizeof cert, "%s/root.crt", s->tls_dir);
  snprintf(key, sizeof key, "%s/root.key", s->tls_dir);
  o->tls_cert_file = cert;
  o->tls_key_file = key;
  CHECK_RC(dlock_client_open(o, &c), 0);
  CHECK_RC(dlock_lock_new(c, "cn", "me", &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, NULL), 0);
  CHECK(strncmp(th_etcd_ctl(s, "get --prefix cn/ --keys-only", buf, sizeof buf),
                "cn/", 3) == 0);
  CHECK_RC(dlock_lock_release(l), 1);
  dlock_lock_free(l);
  dlock_client_close(c);
}

static void ping_at_once(dlock_client *c);

static void t_etcd_tls(void) {
  TH_NEED_ETCD();
  th_etcd s;
  int64_t t0 = th_now_ms();
  CHECK_RC(th_etcd_start_with(&s, true, NULL), 0);
  fprintf(stderr, "    certificates and etcd in %lld ms\n",
          (long long)(th_now_ms() - t0));
  const char *tls = s.tls_dir;
  int rc;
  char ca[400], other[400], cert[400], key[400], buf[512];
  snprintf(ca, sizeof ca, "%s/ca.crt", tls);
  snprintf(other, sizeof other, "%s/otherca.crt", tls);
  snprintf(cert, sizeof cert, "%s/client.crt", tls);
  snprintf(key, sizeof key, "%s/client.key", tls);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = s.url;
  o.tls_ca_file = ca;
  o.tls_cert_file = cert;
  o.tls_key_file = key;
  /* A TLS handshake with a client certificate, then HTTP/2: under
   * valgrind it takes longer than the default 2 s connect timeout. */
  o.connect_timeout_ms = (int)th_soon(2000);
  o.command_timeout_ms = (int)th_soon(3000);
  dlock_client *c = NULL;
  rc = dlock_client_open(&o, &c);
  if (rc != 0) fprintf(stderr, "    %s\n", dlock_client_open_errmsg());
  CHECK_RC(rc, 0);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "tl", "me", &l), 0);
  uint64_t tok = 0;
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, &tok), 0);
  CHECK(tok > 0);
  /* etcdctl over TLS sees it, and a waiter in another client waits. */
  CHECK(
      strncmp(th_etcd_ctl(&s, "get --prefix tl/ --keys-only", buf, sizeof buf),
              "tl/", 3) == 0);
  dlock_client *c2 = NULL;
  CHECK_RC(dlock_client_open(&o, &c2), 0);
  dlock_lock *l2;
  CHECK_RC(dlock_lock_new(c2, "tl", "other", &l2), 0);
  CHECK_RC(dlock_lock_try_acquire(l2, 0, 0, NULL), DLOCK_EBUSY);
  async_cycle(&o, "tla"); /* the event loop's calls over TLS too */
  /* Blocking calls at once, multiplexed over TLS too: one connection
   * more, the shared one. */
  int conns = et_conns_to(s.port, NULL);
  ping_at_once(c);
  CHECK_EQ(et_conns_to(s.port, NULL) - conns, 1);
  /* The watches over TLS (gRPC's Watch, HTTP/2 by ALPN): a wait that
   * runs out, the hold's watch hearing a force release, a waiter woken. */
  atomic_store(&lost_at, 0);
  dlock_lock_on_lost(l, on_lost, NULL);
  CHECK_RC(dlock_lock_try_acquire(l2, 300, 0, NULL), DLOCK_EBUSY);
  t0 = th_now_ms();
  CHECK_EQ(dlock_lock_force_release(l2), 1);
  while (atomic_load(&lost_at) == 0 && th_now_ms() - t0 < th_soon(3000))
    th_sleep_ms(1);
  fprintf(stderr, "    over TLS, a force release heard in %lld ms\n",
          (long long)(atomic_load(&lost_at) - t0));
  CHECK(atomic_load(&lost_at) != 0 &&
        atomic_load(&lost_at) - t0 < th_soon(100));
  CHECK_RC(dlock_lock_release(l), DLOCK_ELOST);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, NULL), 0);
  atomic_store(&woke_at, 0);
  pthread_t t;
  CHECK_RC(pthread_create(&t, NULL, waiter, l2), 0);
  /* Until the waiter's key is there (then it watches its predecessor). */
  for (int64_t end = th_now_ms() + th_soon(3000); th_now_ms() < end;
       th_sleep_ms(5)) {
    const char *k =
        th_etcd_ctl(&s, "get --prefix tl/ --keys-only", buf, sizeof buf);
    if ((k = strstr(k, "tl/")) != NULL && strstr(k + 3, "tl/") != NULL) break;
  }
  CHECK_RC(dlock_lock_release(l), 1);
  pthread_join(t, NULL);
  CHECK(atomic_load(&woke_at) > 0);
  CHECK_RC(dlock_lock_release(l2), 1);
  dlock_lock_free(l2);
  dlock_client_close(c2);
  dlock_lock_free(l);
  dlock_client_close(c);
  /* Not verified (tls_verify 0): no CA needed. */
  o.tls_ca_file = NULL;
  o.tls_verify = 0;
  CHECK_RC(dlock_client_open(&o, &c), 0);
  dlock_client_close(c);
  o.tls_verify = 1;
  /* Refused: a CA that did not sign the server's certificate, */
  o.tls_ca_file = other;
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_ETLS);
  CHECK(strstr(dlock_client_open_errmsg(), "TLS") != NULL);
  /* no client certificate (the server asks for one), */
  o.tls_ca_file = ca;
  o.tls_cert_file = o.tls_key_file = NULL;
  rc = dlock_client_open(&o, &c); /* TLS 1.3: a reset, or an alert */
  CHECK(rc == DLOCK_ETLS || rc == DLOCK_ECONNECT);
  CHECK(strstr(dlock_client_open_errmsg(), "certificate") != NULL);
  /* a certificate without its key, */
  o.tls_cert_file = cert;
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_EINVAL);
  /* and plain HTTP to the TLS port. */
  char url[80];
  snprintf(url, sizeof url, "etcd://127.0.0.1:%d", s.port);
  o.url = url;
  o.tls_key_file = key;
  CHECK(dlock_client_open(&o, &c) != 0);
  fprintf(stderr, "    %s\n", dlock_client_open_errmsg());
  CHECK(strstr(dlock_client_open_errmsg(), "etcds://") != NULL);
  o.url = s.url;
  t_cn_auth(&s, &o);
  th_etcd_stop(&s);
}

static dlock_client *auth_client(const char *url, const char *user,
                                 const char *pw, int *rc) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.username = user;
  o.password = pw;
  dlock_client *c = NULL;
  *rc = dlock_client_open(&o, &c);
  return c;
}

/* etcd's token auth: the user and password in the URL or the options; a
 * wrong password or none fails with DLOCK_EAUTH saying why, and changes
 * nothing; a token the server no longer takes (here: the password set
 * again, which drops the user's tokens) is replaced, and the holds stay. */
static void t_etcd_auth(void) {
  TH_ETCD_SETUP(s);
  char buf[512], url[160];
  th_etcd_ctl(&s, "user add root --new-user-password=sesame", buf, sizeof buf);
  CHECK(strstr(th_etcd_ctl(&s, "auth enable", buf, sizeof buf), "Enabled") !=
        NULL);
  snprintf(s.ctl_tls, sizeof s.ctl_tls, "--user root:sesame");
  int rc;
  /* A wrong password: refused at the open, nothing written. */
  snprintf(url, sizeof url, "etcd://root:nope@%s/app", s.endpoint);
  CHECK(auth_client(url, NULL, NULL, &rc) == NULL);
  CHECK_RC(rc, DLOCK_EAUTH);
  fprintf(stderr, "    %s\n", dlock_client_open_errmsg());
  CHECK(strstr(dlock_client_open_errmsg(), "root") != NULL);
  CHECK(auth_client(s.url, "root", "nope", &rc) == NULL);
  CHECK_RC(rc, DLOCK_EAUTH);
  /* A password without a user: refused. */
  CHECK(auth_client(s.url, NULL, "sesame", &rc) == NULL);
  CHECK_RC(rc, DLOCK_EINVAL);
  /* None: the first call says the server wants them. */
  dlock_client *c = auth_client(s.url, NULL, NULL, &rc);
  dlock_lock *l;
  if (c) {
    CHECK_RC(dlock_lock_new(c, "au", "me", &l), 0);
    CHECK_RC(dlock_lock_try_acquire(l, 0, 0, NULL), DLOCK_EAUTH);
    CHECK(strstr(dlock_client_errmsg(c), "USER:PASSWORD") != NULL);
    dlock_lock_free(l);
    dlock_client_close(c);
  } else {
    CHECK_RC(rc, DLOCK_EAUTH);
  }
  CHECK(strcmp(th_etcd_ctl(&s, "get --prefix '' --keys-only", buf, sizeof buf),
               "") == 0);
  /* The right one (%-escaped in the URL). */
  th_etcd_ctl(&s, "user add us --new-user-password='p@ss'", buf, sizeof buf);
  th_etcd_ctl(&s, "user grant-role us root", buf, sizeof buf);
  snprintf(url, sizeof url, "etcd://us:p%%40ss@%s", s.endpoint);
  c = auth_client(url, NULL, NULL, &rc);
  CHECK_RC(rc, 0);
  dlock_client *c2 = auth_client(s.url, "root", "sesame", &rc);
  CHECK_RC(rc, 0);
  dlock_lock *l2;
  CHECK_RC(dlock_lock_new(c, "au", "me", &l), 0);
  CHECK_RC(dlock_lock_new(c2, "au", "other", &l2), 0);
  dlock_lock_on_lost(l, on_lost, NULL);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, NULL), 0);
  CHECK_RC(dlock_lock_try_acquire(l2, 0, 0, NULL), DLOCK_EBUSY);
  /* Both users' tokens dropped: each client authenticates again. */
  char cmd[600];
  for (int i = 0; i < 2; i++) {
    snprintf(cmd, sizeof cmd,
             "printf '%s\\n' | ETCDCTL_API=3 etcdctl --endpoints %s --user "
             "root:sesame user passwd %s --interactive=false 2>&1",
             i ? "sesame" : "p@ss", s.endpoint, i ? "root" : "us");
    CHECK(strstr(th_sh(cmd, buf, sizeof buf), "updated") != NULL);
  }
  CHECK(strstr(th_etcd_ctl(&s, "get --prefix au/ --keys-only", buf, sizeof buf),
               "au/") != NULL);
  CHECK_EQ(dlock_lock_is_held(l), 1);
  CHECK_RC(dlock_lock_try_acquire(l2, 0, 0, NULL), DLOCK_EBUSY);
  CHECK_RC(dlock_lock_release(l), 1);
  CHECK_EQ(atomic_load(&lost_at), 0); /* never lost */
  /* dlock run with the password in the URL: its command's dlock has the
   * URL without it (DLOCK_URL) and the password (DLOCK_PASSWORD). */
  snprintf(cmd, sizeof cmd,
           "%s -q -u '%s' run au -- sh -c 'case $DLOCK_URL in *p%%40ss*) "
           "exit 9;; esac; %s -q status au' >/dev/null 2>&1; echo $?",
           DLOCK_CLI_PATH, url, DLOCK_CLI_PATH);
  CHECK(strcmp(th_sh(cmd, buf, sizeof buf), "0\n") == 0);
  CHECK_RC(dlock_lock_try_acquire(l2, 0, 0, NULL), 0);
  CHECK_RC(dlock_lock_release(l2), 1);
  /* The server restarted (its tokens gone, the leases kept): the hold
   * stays, and its watch comes back with a token the server takes, so a
   * force release is heard. */
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, NULL), 0);
  CHECK_RC(th_etcd_restart(&s), 0);
  int64_t end = th_now_ms() + th_soon(5000);
  while (th_etcd_started(&s, "Watch") < 1 && th_now_ms() < end)
    th_sleep_ms(10);
  CHECK_EQ(dlock_lock_is_held(l), 1);
  CHECK_EQ(atomic_load(&lost_at), 0);
  int64_t t0 = th_now_ms();
  CHECK_EQ(dlock_lock_force_release(l2), 1);
  while (atomic_load(&lost_at) == 0 && th_now_ms() < end)
    th_sleep_ms(2);
  CHECK(atomic_load(&lost_at) != 0);
  fprintf(stderr, "    after the restart, a force release heard in %lld ms\n",
          (long long)(atomic_load(&lost_at) - t0));
  dlock_lock_free(l);
  dlock_lock_free(l2);
  dlock_client_close(c);
  dlock_client_close(c2);
  /* An event-loop client: a token the server dropped is renewed on the
   * loop's multi handle, and the call goes again: a query while nothing
   * is held (no watch stream to renew it first: one Authenticate, the
   * query's; a ping would need none, etcd's Status takes no token), then
   * a release (the hold's watch may renew it first). */
  dlock_loop *lp;
  CHECK_RC(dlock_loop_new(NULL, &lp), 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = s.url;
  o.username = "root";
  o.password = "sesame";
  CHECK_RC(dlock_client_open_async(&o, lp, &c), 0);
  CHECK_RC(dlock_lock_new(c, "aau", "me", &l), 0);
  et_adone d = {0};
  for (int i = 0; i < 2; i++) {
    if (i == 1) {
      d = (et_adone){0};
      CHECK_RC(dlock_lock_acquire_async(l, 0, 0, et_on_adone, &d, NULL), 0);
      CHECK(et_run_all(lp, &d, 1));
      CHECK_RC(d.rc, 0);
    }
    snprintf(cmd, sizeof cmd,
             "printf 'sesame\\n' | ETCDCTL_API=3 etcdctl --endpoints %s "
             "--user root:sesame user passwd root --interactive=false 2>&1",
             s.endpoint);
    CHECK(strstr(th_sh(cmd, buf, sizeof buf), "updated") != NULL);
    long long auths = th_etcd_started(&s, "Authenticate");
    d = (et_adone){0};
    if (i == 0)
      CHECK_RC(dlock_lock_is_locked_async(l, et_on_adone, &d, NULL), 0);
    else
      CHECK_RC(dlock_lock_release_async(l, et_on_adone, &d, NULL), 0);
    CHECK(et_run_all(lp, &d, 1));
    CHECK_RC(d.rc, i == 0 ? 0 : 1);
    if (i == 0)
      CHECK_EQ(th_etcd_started(&s, "Authenticate"), auths + 1);
    else
      CHECK(th_etcd_started(&s, "Authenticate") >= auths + 1);
  }
  dlock_lock_free(l);
  dlock_client_close(c);
  dlock_loop_free(lp);
  th_etcd_stop(&s);
}

enum { TXN, GRANT, REVOKE, KEEPALIVE, WATCH, NMETHODS };
static const char *const methods[NMETHODS] = {
    "Txn", "LeaseGrant", "LeaseRevoke", "LeaseKeepAlive", "Watch"};
static void count(const th_etcd *s, long long *v) {
  for (int i = 0; i < NMETHODS; i++)
    v[i] = th_etcd_started(s, methods[i]);
}

/* An uncontended acquire and release is two requests, each a txn (one
 * write each: Go's Mutex.Lock and Unlock make the same two): on the
 * session's lease, nothing else; with a fixed lease, a keepalive more (no
 * write) of a lease kept from the last hold, instead of a grant and a
 * revoke (two writes). A short hold starts no watch; a longer one does. */
static void t_etcd_cycle_cost(void) {
  TH_ETCD_SETUP(s);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = s.url;
  o.watchdog_timeout_ms = 10000;
  dlock_client *c = NULL;
  CHECK_RC(dlock_client_open(&o, &c), 0);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "cc", "me", &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, NULL), 0); /* the session */
  CHECK_RC(dlock_lock_release(l), 1);
  long long a[NMETHODS], b[NMETHODS];
  count(&s, a);
  for (int i = 0; i < 10; i++) {
    CHECK_RC(dlock_lock_try_acquire(l, 0, 0, NULL), 0);
    CHECK_RC(dlock_lock_release(l), 1);
  }
  count(&s, b);
  fprintf(stderr,
          "    session lease, 10 cycles: %lld txn, %lld grant, %lld "
          "revoke, %lld keepalive, %lld watch\n",
          b[TXN] - a[TXN], b[GRANT] - a[GRANT], b[REVOKE] - a[REVOKE],
          b[KEEPALIVE] - a[KEEPALIVE], b[WATCH] - a[WATCH]);
  /* (a watchdog renewal in between: a keepalive and a txn more) */
  CHECK(b[TXN] - a[TXN] >= 20 && b[TXN] - a[TXN] <= 21);
  CHECK_EQ(b[GRANT] - a[GRANT], 0);
  CHECK_EQ(b[REVOKE] - a[REVOKE], 0);
  CHECK(b[WATCH] - a[WATCH] <= 5); /* short holds: few or none */
  /* A fixed lease (not the watchdog's): one grant, then keepalives. */
  count(&s, a);
  for (int i = 0; i < 10; i++) {
    CHECK_RC(dlock_lock_try_acquire(l, 0, 5000, NULL), 0);
    CHECK_RC(dlock_lock_release(l), 1);
  }
  count(&s, b);
  fprintf(stderr,
          "    fixed lease, 10 cycles: %lld txn, %lld grant, %lld revoke, "
          "%lld keepalive, %lld watch\n",
          b[TXN] - a[TXN], b[GRANT] - a[GRANT], b[REVOKE] - a[REVOKE],
          b[KEEPALIVE] - a[KEEPALIVE], b[WATCH] - a[WATCH]);
  CHECK(b[TXN] - a[TXN] >= 20 && b[TXN] - a[TXN] <= 21);
  CHECK_EQ(b[GRANT] - a[GRANT], 1);
  CHECK_EQ(b[REVOKE] - a[REVOKE], 0);
  CHECK(b[KEEPALIVE] - a[KEEPALIVE] >= 9 && b[KEEPALIVE] - a[KEEPALIVE] <= 10);
  /* The lease kept is renewed for the next hold: the whole 5 s again
   * (the server tells whole seconds), though 1.2 s went by. */
  th_sleep_ms(1200);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 5000, NULL), 0);
  int64_t ttl = 0;
  CHECK_RC(dlock_lock_remaining_ttl(l, &ttl), 0);
  CHECK(ttl >= 4000 && ttl <= 5000);
  CHECK_RC(dlock_lock_release(l), 1);
  /* A hold that lasts gets its watch (a loss is heard). */
  count(&s, a);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, NULL), 0);
  int64_t end = th_now_ms() + th_soon(2000);
  while (th_etcd_started(&s, "Watch") == a[WATCH] && th_now_ms() < end)
    th_sleep_ms(5);
  CHECK_EQ(th_etcd_started(&s, "Watch") - a[WATCH], 1);
  CHECK_RC(dlock_lock_release(l), 1);
  dlock_lock_free(l);
  dlock_client_close(c);
  th_etcd_stop(&s);
}

static long long segs_to(int port) {
  long long n;
  et_conns_to(port, &n);
  return n;
}

/* The voluntary context switches of this process's threads but the
 * caller's. */
static long long others_switches(void) {
  long long n = 0;
  char path[300], line[128];
  DIR *d = opendir("/proc/self/task");
  for (struct dirent *de; d && (de = readdir(d)) != NULL;) {
    if (de->d_name[0] == '.' || atoi(de->d_name) == (int)gettid()) continue;
    snprintf(path, sizeof path, "/proc/self/task/%s/status", de->d_name);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f))
      if (strncmp(line, "voluntary_ctxt_switches:", 24) == 0)
        n += atoll(line + 24);
    if (f) fclose(f);
  }
  if (d) closedir(d);
  return n;
}

/* A call goes out as few TCP segments as it can: its HTTP/2 frames
 * (HEADERS, DATA), which curl 7.88 writes one send() each, leave in one
 * segment (the socket corked until curl has written), and a PING's ACK
 * in another: 2 a call, where each frame alone made 3; on the blocking
 * client and on the event loop. And short holds do not wake the watcher
 * thread one by one: a hold's watch is due 10 ms after the acquire, and
 * while holds come the thread looks every 10 ms anyway. */
static void t_etcd_cycle_quiet(void) {
  TH_ETCD_SETUP(s);
  dlock_client *c = th_etcd_client(&s, 0);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "cq", "me", &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, NULL), 0); /* the session */
  CHECK_RC(dlock_lock_release(l), 1);
  enum { N = 50 };
  long long seg0 = segs_to(s.port), sw0 = others_switches();
  int64_t t0 = th_now_ms();
  for (int i = 0; i < N; i++) {
    CHECK_RC(dlock_lock_try_acquire(l, 0, 0, NULL), 0);
    CHECK_RC(dlock_lock_release(l), 1);
  }
  double segs = (double)(segs_to(s.port) - seg0) / (2 * N);
  long long sw = others_switches() - sw0, took = th_now_ms() - t0;
  fprintf(stderr,
          "    blocking: %.2f data segments a call; %lld wake-ups of the "
          "other threads in %d cycles (%lld ms)\n",
          segs, sw, N, took);
  CHECK(segs > 1.5 && segs < 2.5);
  /* The watcher looks every 10 ms while holds come: one wake-up a hold
   * was 56 to 59 here, now 8 or 9. (Not under valgrind, which runs one
   * thread at a time.) */
  CHECK(sw < N / 2 + took / 10 || getenv("DLOCK_UNDER_VALGRIND"));
  dlock_lock_free(l);
  dlock_client_close(c);
  /* The event loop's calls: one connection, corked the same way. */
  dlock_loop *lp = NULL;
  CHECK_RC(dlock_loop_new(NULL, &lp), 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = s.url;
  CHECK_RC(dlock_client_open_async(&o, lp, &c), 0);
  CHECK_RC(dlock_lock_new(c, "cq", "me", &l), 0);
  et_adone d[1];
  for (int i = 0; i <= N; i++) {
    if (i == 1) seg0 = segs_to(s.port);
    memset(d, 0, sizeof d);
    CHECK_RC(dlock_lock_acquire_async(l, 0, 0, et_on_adone, &d[0], NULL), 0);
    CHECK(et_run_all(lp, d, 1));
    CHECK_RC(d[0].rc, 0);
    memset(d, 0, sizeof d);
    CHECK_RC(dlock_lock_release_async(l, et_on_adone, &d[0], NULL), 0);
    CHECK(et_run_all(lp, d, 1));
    CHECK_RC(d[0].rc, 1);
  }
  segs = (double)(segs_to(s.port) - seg0) / (2 * N);
  fprintf(stderr, "    event loop: %.2f data segments a call\n", segs);
  CHECK(segs > 1.5 && segs < 2.5);
  dlock_lock_free(l);
  dlock_client_close(c);
  dlock_loop_free(lp);
  th_etcd_stop(&s);
}

/* A thread's pings: 20 once past go, or (stop not NULL) until *stop,
 * those answered counted (and the failures of the 20, the first told). */
typedef struct pinger {
  dlock_client *c;
  pthread_barrier_t *go;
  atomic_bool *stop;
  atomic_int ok;
  int fails;
} pinger;

static void *ping_some(void *ud) {
  pinger *p = ud;
  if (p->go) pthread_barrier_wait(p->go);
  for (int i = 0; p->stop ? !atomic_load(p->stop) : i < 20; i++) {
    int rc = dlock_client_ping(p->c);
    if (rc == 0)
      atomic_fetch_add(&p->ok, 1);
    else if (p->stop == NULL && p->fails++ == 0)
      fprintf(stderr, "    ping: %s: %s\n", dlock_err_name(rc),
              dlock_client_errmsg(p->c));
  }
  return NULL;
}

/* s restarted under T threads' pings, of the nc clients c in turn
 * (those while it is down fail), and each thread's answered after it. */
static void restart_under_pings(th_etcd *s, dlock_client *const *c, int nc) {
  enum { T = 16 };
  atomic_bool stop = false;
  pinger p[T];
  pthread_t th[T];
  int base[T];
  for (int i = 0; i < T; i++) {
    p[i] = (pinger){.c = c[i % nc], .stop = &stop};
    pthread_create(&th[i], NULL, ping_some, &p[i]);
  }
  int64_t end = th_now_ms() + th_soon(5000);
  for (int i = 0; i < T; i++) /* each thread's calls under way */
    while (atomic_load(&p[i].ok) == 0 && th_now_ms() < end) th_sleep_ms(1);
  CHECK_RC(th_etcd_restart(s), 0);
  for (int i = 0; i < T; i++) base[i] = atomic_load(&p[i].ok);
  end = th_now_ms() + th_soon(5000);
  bool all = false;
  while (!all && th_now_ms() < end) {
    all = true;
    for (int i = 0; i < T; i++) all = all && atomic_load(&p[i].ok) > base[i] + 2;
    if (!all) th_sleep_ms(1);
  }
  atomic_store(&stop, true);
  for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
  CHECK(all);
}

/* T threads' pings at once, all answered. */
static void ping_at_once(dlock_client *c) {
  enum { T = 16 };
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, T);
  pinger p[T];
  pthread_t th[T];
  for (int i = 0; i < T; i++) {
    p[i] = (pinger){.c = c, .go = &go};
    pthread_create(&th[i], NULL, ping_some, &p[i]);
  }
  int fails = 0;
  for (int i = 0; i < T; i++) {
    pthread_join(th[i], NULL);
    fails += p[i].fails;
  }
  pthread_barrier_destroy(&go);
  CHECK_EQ(fails, 0);
}

/* A blocking call alone in flight goes on the client's own connection,
 * driven by the calling thread (no other thread woken); calls of 16
 * threads at once go as streams of one shared connection (gmux.c), not
 * a connection a thread: two connections in all. After a server restart
 * the shared connection is gone: the calls that find it so (refused
 * rather than sent as HTTP/1.1 on a new one, to etcd's gateway) go
 * again, one opening a new one, the others waiting for it, with calls
 * in flight through the restart too: two connections still. */
static void t_etcd_calls_shared(void) {
  TH_ETCD_SETUP(s);
  dlock_client *c = th_etcd_client(&s, 0);
  CHECK(c != NULL);
  enum { N = 50 };
  long long sw0 = others_switches();
  int64_t t0 = th_now_ms();
  for (int i = 0; i < N; i++)
    CHECK_RC(dlock_client_ping(c), 0);
  long long sw = others_switches() - sw0, took = th_now_ms() - t0;
  int alone = et_conns_to(s.port, NULL);
  fprintf(stderr,
          "    %d calls of one thread: %d connection(s), %lld wake-ups of "
          "the other threads (%lld ms)\n",
          N, alone, sw, took);
  CHECK_EQ(alone, 1);
  /* A hand-off to another thread would be a wake-up a call. */
  CHECK(sw < N / 2 + took / 100 || getenv("DLOCK_UNDER_VALGRIND"));
  ping_at_once(c);
  int conns = et_conns_to(s.port, NULL);
  fprintf(stderr, "    16 threads' calls at once: %d connection(s)\n", conns);
  /* The lone call's and the shared one (a connection a thread: 16). */
  CHECK_EQ(conns, 2);
  CHECK_RC(th_etcd_restart(&s), 0);
  ping_at_once(c);
  /* Calls in flight through a restart: one opens the shared connection
   * again, the others wait for it (each one that found it gone opening
   * its own, or clearing the one just opened: 3 to 13). */
  restart_under_pings(&s, &c, 1);
  conns = et_conns_to(s.port, NULL);
  fprintf(stderr, "    16 threads' calls through a restart: %d connection(s)\n",
          conns);
  CHECK(conns <= 2);
  dlock_client_close(c);
  th_etcd_stop(&s);
}

/* A thread's blocking calls with the server going down: pings until
 * *stop, the first to end after *down_at was set kept (its rc, and how
 * long after), then (past go, twice) one ping more, its rc and time. */
typedef struct downer {
  dlock_client *c;
  pthread_barrier_t *go;
  atomic_bool *stop;
  atomic_llong *down_at;
  int64_t flight_ms, ms;
  atomic_int flight_rc; /* 1 until that call ended */
  int rc;
} downer;

static void *ping_down(void *ud) {
  downer *d = ud;
  while (!atomic_load(d->stop)) {
    int rc = dlock_client_ping(d->c);
    long long k = atomic_load(d->down_at);
    if (k && atomic_load(&d->flight_rc) == 1) {
      d->flight_ms = th_now_ms() - k;
      atomic_store(&d->flight_rc, rc);
    }
  }
  pthread_barrier_wait(d->go); /* every thread's pings over */
  pthread_barrier_wait(d->go);
  int64_t t0 = th_now_ms();
  d->rc = dlock_client_ping(d->c);
  d->ms = th_now_ms() - t0;
  return NULL;
}

/* A waiter's acquire of l (wait_ms): its rc and when it ended. */
typedef struct waitd {
  dlock_lock *l;
  dlock_client *c;
  int64_t wait_ms, end;
  int rc;
  char msg[120]; /* the detail of a failure */
} waitd;

static void *wait_down(void *ud) {
  waitd *w = ud;
  w->rc = dlock_lock_try_acquire(w->l, w->wait_ms, 0, NULL);
  w->end = th_now_ms();
  snprintf(w->msg, sizeof w->msg, "%s", dlock_client_errmsg(w->c));
  return NULL;
}

/* The blocking calls of many threads with the server down (killed, not
 * restarting), its connection attempts counted. 16 threads' pings in
 * flight at the kill end at once (DLOCK_ECONNLOST: the connection cut,
 * mid-answer too; DLOCK_ECONNECT; or answered). 8 waiters ride out the
 * server's loss within their wait (API.md) and end together at its end,
 * DLOCK_ECONNECT, with a connection attempt about every
 * reconnect_min_ms, not one a waiter and pause. Then 16 pings at once
 * each end at once with DLOCK_ECONNECT, after one or two attempts in all
 * (the lone call's, the shared connection's; a few more when the calls
 * look before the first refusal is marked), not one a call (16 to 29
 * before calls skipped an endpoint just found unreachable). */
static void t_etcd_calls_down(void) {
  TH_ETCD_SETUP(s);
  enum { T = 16, W = 8 };
  dlock_client *c = th_etcd_client(&s, 0), *c2 = th_etcd_client(&s, 0);
  CHECK(c != NULL && c2 != NULL);
  dlock_lock *held, *wl[W];
  CHECK_RC(dlock_lock_new(c2, "dn", "other", &held), 0);
  CHECK_RC(dlock_lock_try_acquire(held, 0, 0, NULL), 0);
  ping_at_once(c); /* the shared connection open */
  atomic_bool stop = false;
  atomic_llong down_at = 0;
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, T + 1);
  downer d[T];
  pthread_t th[T], wt[W];
  waitd wd[W];
  for (int i = 0; i < W; i++) {
    CHECK_RC(dlock_lock_new(c, "dn", NULL, &wl[i]), 0);
    wd[i] = (waitd){.l = wl[i], .c = c, .wait_ms = th_soon(1000)};
    pthread_create(&wt[i], NULL, wait_down, &wd[i]);
  }
  for (int i = 0; i < T; i++) {
    d[i] = (downer){.c = c, .go = &go, .stop = &stop, .down_at = &down_at};
    atomic_init(&d[i].flight_rc, 1);
    pthread_create(&th[i], NULL, ping_down, &d[i]);
  }
  /* A waiter's key there (then it watches), the pings in flight. */
  char buf[512];
  for (int64_t end = th_now_ms() + th_soon(3000); th_now_ms() < end;
       th_sleep_ms(5)) {
    const char *k =
        th_etcd_ctl(&s, "get --prefix dn/ --keys-only", buf, sizeof buf);
    int n = 0;
    for (; (k = strstr(k, "dn/")) != NULL; k += 3) n++;
    if (n >= 2) break; /* one waiter's: the others wait for it in c */
  }
  et_count_connects(s.port);
  th_etcd_kill(&s, SIGKILL);
  atomic_store(&down_at, th_now_ms());
  int64_t end = th_now_ms() + th_soon(3000);
  for (int i = 0; i < T; i++) /* each thread's call at the kill ended */
    while (atomic_load(&d[i].flight_rc) == 1 && th_now_ms() < end)
      th_sleep_ms(1);
  atomic_store(&stop, true);
  pthread_barrier_wait(&go);
  int bad = 0;
  char why[160] = "";
  int64_t flight = 0, first = INT64_MAX, last = 0;
  for (int i = 0; i < T; i++) {
    if (d[i].flight_ms > flight) flight = d[i].flight_ms;
    if (d[i].flight_rc != 0 && d[i].flight_rc != DLOCK_ECONNLOST &&
        d[i].flight_rc != DLOCK_ECONNECT && bad++ == 0)
      snprintf(why, sizeof why, "thread %d's call in flight: %s", i,
               dlock_err_name(d[i].flight_rc));
  }
  for (int i = 0; i < W; i++) {
    pthread_join(wt[i], NULL);
    if (wd[i].end < first) first = wd[i].end;
    if (wd[i].end > last) last = wd[i].end;
    if (wd[i].rc != DLOCK_ECONNECT && bad++ == 0)
      snprintf(why, sizeof why, "waiter %d: %s after %lld ms: %s", i,
               dlock_err_name(wd[i].rc),
               (long long)(wd[i].end - atomic_load(&down_at)),
               wd[i].msg);
  }
  int64_t ride = last - atomic_load(&down_at);
  int ride_tries = et_connects();
  fprintf(stderr,
          "    server down: the calls in flight ended in %lld ms; %d "
          "waiters %lld ms later, within %lld ms, %d connection attempt(s)\n",
          (long long)flight, W, (long long)ride, (long long)(last - first),
          ride_tries);
  /* Past the time calls skip the endpoint found unreachable (the
   * default reconnect_min_ms): the next ones try it again. */
  th_sleep_ms(100 + 20);
  et_count_connects(s.port);
  pthread_barrier_wait(&go);
  int64_t most = 0;
  for (int i = 0; i < T; i++) {
    pthread_join(th[i], NULL);
    if (d[i].ms > most) most = d[i].ms;
    if (d[i].rc != DLOCK_ECONNECT && bad++ == 0)
      snprintf(why, sizeof why, "thread %d: %s", i, dlock_err_name(d[i].rc));
  }
  int tries = et_connects();
  et_count_connects(0);
  fprintf(stderr, "    %d pings at once: %lld ms, %d connection attempt(s)\n",
          T, (long long)most, tries);
  pthread_barrier_destroy(&go);
  CHECK_WHY(bad == 0, why);
  CHECK(flight < th_soon(500));
  CHECK(last - first < th_soon(100));
  /* An attempt a reconnect_min_ms or so (the lone call's path's and the
   * shared connection's, the waiters' watches'), not one a waiter's
   * pause (20 ms doubling to 200). */
  CHECK(ride_tries <= 3 * (ride / 100 + 1) + 2 * W);
  CHECK(most < th_soon(500));
  /* The lone call's and the shared connection's; under valgrind beside
   * other tests up to 4 (3 and 4 in 5 of 15 runs of three at once): calls
   * that looked before the first refusal was marked, a client's watchdog
   * (c2's hold, c's leftover keys) trying its round in the same moment. */
  CHECK(tries >= 1 && tries <= 4);
  for (int i = 0; i < W; i++)
    dlock_lock_free(wl[i]);
  dlock_lock_free(held);
  dlock_client_close(c2);
  dlock_client_close(c);
  th_etcd_stop(&s);
}

/* An event-loop client's waiting acquires of a mutex and a read-write
 * lock's write side, started once the server is down (*go) and run on
 * their own loop until both end, then released: in a thread of its own,
 * the main thread restarting the server (a server started from a thread
 * goes with that thread: PR_SET_PDEATHSIG). */
/* An event-loop operation's outcome with its detail. */
typedef struct adone_msg {
  int rc, calls;
  char msg[200];
} adone_msg;

static void on_adone_msg(int rc, uint64_t token, const char *errmsg,
                         void *ud) {
  (void)token;
  adone_msg *d = ud;
  d->rc = rc;
  d->calls++;
  snprintf(d->msg, sizeof d->msg, "%s", errmsg ? errmsg : "");
}

typedef struct aside {
  const char *url;
  atomic_bool *go;
  atomic_int ready; /* 1 opened, -1 failed */
  adone_msg ctl;    /* the control: an acquire without a wait */
  int rc[2], released[2];
  bool ran;
  int64_t end;
} aside;

static void *async_side(void *ud) {
  aside *x = ud;
  dlock_loop *lp = NULL;
  dlock_client *ac = NULL;
  dlock_lock *al = NULL;
  dlock_rwlock *arw = NULL;
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = x->url;
  x->rc[0] = x->rc[1] = 1;
  if (dlock_loop_new(NULL, &lp) != 0 ||
      dlock_client_open_async(&o, lp, &ac) != 0 ||
      dlock_lock_new(ac, "dw3", NULL, &al) != 0 ||
      dlock_rwlock_new(ac, "dw4", NULL, &arw) != 0) {
    fprintf(stderr, "    the event loop's client: %s\n",
            ac ? dlock_client_errmsg(ac) : dlock_client_open_errmsg());
    atomic_store(&x->ready, -1);
  } else {
    /* The session's lease granted: the acquires below fail (or ride) at
     * the put. */
    et_adone d[2] = {{0}};
    if (dlock_lock_acquire_async(al, 0, 0, et_on_adone, &d[0], NULL) == 0 &&
        et_run_all(lp, d, 1) && d[0].rc == 0) {
      memset(d, 0, sizeof d);
      if (dlock_lock_release_async(al, et_on_adone, &d[0], NULL) == 0)
        et_run_all(lp, d, 1);
    }
    atomic_store(&x->ready, 1);
    while (!atomic_load(x->go)) th_sleep_ms(1);
    if (dlock_lock_acquire_async(al, 0, 0, on_adone_msg, &x->ctl, NULL) == 0)
      for (int64_t end = th_now_ms() + th_soon(5000);
           x->ctl.calls == 0 && th_now_ms() < end;)
        dlock_loop_run(lp, 10);
    memset(d, 0, sizeof d);
    dlock_lock *aw = dlock_rwlock_write(arw);
    if (dlock_lock_acquire_async(al, th_soon(15000), 0, et_on_adone, &d[0],
                                 NULL) == 0 &&
        dlock_lock_acquire_async(aw, th_soon(15000), 0, et_on_adone, &d[1],
                                 NULL) == 0)
      x->ran = et_run_all(lp, d, 2);
    x->end = th_now_ms();
    x->rc[0] = d[0].rc;
    x->rc[1] = d[1].rc;
    memset(d, 0, sizeof d);
    if (x->ran && dlock_lock_release_async(al, et_on_adone, &d[0], NULL) == 0 &&
        dlock_lock_release_async(aw, et_on_adone, &d[1], NULL) == 0 &&
        et_run_all(lp, d, 2)) {
      x->released[0] = d[0].rc;
      x->released[1] = d[1].rc;
    }
  }
  dlock_lock_free(al);
  dlock_rwlock_free(arw);
  dlock_client_close(ac);
  dlock_loop_free(lp);
  return NULL;
}

/* Waiting acquires that start with the server down (killed, its data
 * kept) ride it out from their first call, as the Redis backend's do: the
 * lease's grant and the put go again after a pause, within the wait, and
 * take their lock once the server is back (a blocking client's and an
 * event-loop client's, each a mutex and a read-write lock's write side).
 * The control: an acquire without a wait fails at once with
 * DLOCK_ECONNECT (before, the waiting ones did the same), its detail the
 * put's (not the cleanup's delete's, which failed after it). */
static void t_etcd_acquire_while_down(void) {
  TH_ETCD_SETUP(s);
  dlock_client *c = th_etcd_client(&s, 0);
  CHECK(c != NULL);
  atomic_bool go = false;
  aside x = {.url = s.url, .go = &go, .ready = 0};
  pthread_t at, wt[2];
  pthread_create(&at, NULL, async_side, &x);
  /* The control's client has its session already: its acquire fails at
   * the put, whose detail stays the error's (not the cleanup's delete's). */
  dlock_client *c2 = th_etcd_client(&s, 0);
  CHECK(c2 != NULL);
  dlock_lock *try, *l;
  dlock_rwlock *rw;
  CHECK_RC(dlock_lock_new(c2, "dw0", "me", &try), 0);
  CHECK_RC(dlock_lock_try_acquire(try, 0, 0, NULL), 0);
  CHECK_RC(dlock_lock_release(try), 1);
  CHECK_RC(dlock_lock_new(c, "dw1", "me", &l), 0);
  CHECK_RC(dlock_rwlock_new(c, "dw2", "me", &rw), 0);
  dlock_lock *w = dlock_rwlock_write(rw);
  while (atomic_load(&x.ready) == 0) th_sleep_ms(1);
  th_etcd_kill(&s, SIGKILL);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_try_acquire(try, 0, 0, NULL), DLOCK_ECONNECT);
  CHECK(th_now_ms() - t0 < th_soon(1000));
  char why[400];
  snprintf(why, sizeof why, "%s", dlock_client_errmsg(c2));
  CHECK_WHY(strstr(why, "/v3/kv/txn") != NULL, why);
  waitd wd[2] = {{.l = l, .c = c, .wait_ms = th_soon(15000)},
                 {.l = w, .c = c, .wait_ms = th_soon(15000)}};
  for (int i = 0; i < 2; i++) pthread_create(&wt[i], NULL, wait_down, &wd[i]);
  atomic_store(&go, true);
  th_sleep_ms(300);
  int restarted = th_etcd_restart(&s);
  int64_t up_at = th_now_ms();
  for (int i = 0; i < 2; i++) pthread_join(wt[i], NULL);
  pthread_join(at, NULL);
  fprintf(stderr,
          "    server back %lld ms after the kill; the blocking acquires "
          "%s, %s %lld and %lld ms after it, the event loop's %s, %s\n",
          (long long)(up_at - t0), dlock_err_name(wd[0].rc),
          dlock_err_name(wd[1].rc), (long long)(wd[0].end - up_at),
          (long long)(wd[1].end - up_at), dlock_err_name(x.rc[0]),
          dlock_err_name(x.rc[1]));
  CHECK_RC(restarted, 0);
  CHECK_WHY(wd[0].rc == 0, wd[0].msg);
  CHECK_WHY(wd[1].rc == 0, wd[1].msg);
  CHECK(x.ran);
  CHECK_RC(x.rc[0], 0);
  CHECK_RC(x.rc[1], 0);
  CHECK_RC(x.released[0], 1);
  CHECK_RC(x.released[1], 1);
  CHECK_RC(x.ctl.rc, DLOCK_ECONNECT);
  CHECK_WHY(strstr(x.ctl.msg, "/v3/kv/txn") != NULL, x.ctl.msg);
  /* Taken once the server was back: its health answered (up_at) just
   * after it began to serve. */
  CHECK(wd[0].end >= up_at - 100 && wd[1].end >= up_at - 100 &&
        x.end >= up_at - 100);
  CHECK_RC(dlock_lock_release(l), 1);
  CHECK_RC(dlock_lock_release(w), 1);
  dlock_lock_free(try);
  dlock_lock_free(l);
  dlock_rwlock_free(rw);
  dlock_client_close(c2);
  dlock_client_close(c);
  th_etcd_stop(&s);
}

/* A wait without a limit with the server down (killed, not back) ends
 * DLOCK_ECONNECT after 10 command timeouts of pauses (here 200 ms each),
 * as on Redis, rather than hiding the outage for ever: a mutex's acquire
 * on a blocking client and on an event-loop one. */
static void t_etcd_wait_forever_down(void) {
  TH_ETCD_SETUP(s);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = s.url;
  o.command_timeout_ms = 200;
  dlock_client *c = NULL, *ac = NULL;
  dlock_loop *lp = NULL;
  CHECK_RC(dlock_client_open(&o, &c), 0);
  CHECK_RC(dlock_loop_new(NULL, &lp), 0);
  CHECK_RC(dlock_client_open_async(&o, lp, &ac), 0);
  dlock_lock *l, *al;
  CHECK_RC(dlock_lock_new(c, "wf", NULL, &l), 0);
  CHECK_RC(dlock_lock_new(ac, "wf", NULL, &al), 0);
  th_etcd_kill(&s, SIGKILL);
  int64_t t0 = th_now_ms();
  int rc = dlock_lock_try_acquire(l, -1, 0, NULL);
  int64_t took = th_now_ms() - t0;
  et_adone d = {0};
  t0 = th_now_ms();
  CHECK_RC(dlock_lock_acquire_async(al, -1, 0, et_on_adone, &d, NULL), 0);
  bool ran = et_run_all(lp, &d, 1);
  int64_t atook = th_now_ms() - t0;
  fprintf(stderr,
          "    blocking: %s after %lld ms; event loop: %s after %lld ms\n",
          dlock_err_name(rc), (long long)took, dlock_err_name(d.rc),
          (long long)atook);
  CHECK_RC(rc, DLOCK_ECONNECT);
  CHECK(ran);
  CHECK_RC(d.rc, DLOCK_ECONNECT);
  /* 20 + 40 + 80 + 160 ms, then 200 ms each: 10 timeouts' worth. */
  CHECK(took >= 10 * 200 && took < th_soon(8000));
  CHECK(atook >= 10 * 200 && atook < th_soon(8000));
  dlock_lock_free(l);
  dlock_lock_free(al);
  dlock_client_close(ac);
  dlock_loop_free(lp);
  dlock_client_close(c);
  th_etcd_stop(&s);
}

/* The connections to port once they are at most `most` (1 s at most). */
static int conns_at_most(int port, int most) {
  int n;
  for (int64_t end = th_now_ms() + th_soon(1000);
       (n = et_conns_to(port, NULL)) > most && th_now_ms() < end;)
    th_sleep_ms(5);
  return n;
}

/* A server restart (its data kept, SAFETY.md 26) seen by the clients of
 * o[0] and o[1] (two transports), each a blocking client and an
 * event-loop one: their holds survive (never told lost, released as
 * held), the blocking calls of 16 threads in flight through it are
 * answered after it, 32 event-loop pings of each at once too, and the
 * connections are about as many as before it under the same calls (48
 * instead of 26 when the gateway's event-loop calls over TLS each opened
 * their own). */
static void restart_holding(th_etcd *s, const dlock_client_options *o) {
  enum { N = 32 };
  dlock_client *c[2], *ac[2];
  dlock_loop *lp;
  dlock_lock *l[2], *al[2];
  et_adone d[2 * N];
  CHECK_RC(dlock_loop_new(NULL, &lp), 0);
  atomic_store(&lost_n, 0);
  char name[8];
  for (int k = 0; k < 2; k++) {
    CHECK_RC(dlock_client_open(&o[k], &c[k]), 0);
    CHECK_RC(dlock_client_open_async(&o[k], lp, &ac[k]), 0);
    snprintf(name, sizeof name, "rh%d", k);
    CHECK_RC(dlock_lock_new(c[k], name, "me", &l[k]), 0);
    snprintf(name, sizeof name, "rha%d", k);
    CHECK_RC(dlock_lock_new(ac[k], name, "me", &al[k]), 0);
    dlock_lock_on_lost(l[k], on_lost_n, NULL);
    dlock_lock_on_lost(al[k], on_lost_n, NULL);
    CHECK_RC(dlock_lock_try_acquire(l[k], 0, 0, NULL), 0);
    memset(d, 0, sizeof d);
    CHECK_RC(dlock_lock_acquire_async(al[k], 0, 0, et_on_adone, &d[0], NULL),
             0);
    CHECK(et_run_all(lp, d, 1));
    CHECK_RC(d[0].rc, 0);
  }
  int conns[2];
  for (int r = 0; r < 2; r++) {
    if (r == 1) restart_under_pings(s, c, 2);
    ping_at_once(c[0]);
    ping_at_once(c[1]);
    /* After the restart, every ping answered. Under valgrind, curl 7.88
     * put one of them on the gateway's TLS connection that was gone (its
     * stream on it, not checked while a call, likely a renewal, was on
     * it with the loop not run): DLOCK_ECONNLOST, 1 of 64 in each run,
     * until a read lost with a pooled connection went again (http.c).
     * Two rounds after it. */
    for (int round = 0; round < 1 + r; round++) {
      memset(d, 0, sizeof d);
      for (int i = 0; i < 2 * N; i++)
        CHECK_RC(dlock_client_ping_async(ac[i % 2], et_on_adone, &d[i], NULL),
                 0);
      CHECK(et_run_all(lp, d, 2 * N));
      int ok = 0, lost = 0, lost_json = 0;
      for (int i = 0; i < 2 * N; i++) {
        ok += d[i].rc == 0 && d[i].calls == 1;
        lost += d[i].rc == DLOCK_ECONNLOST && d[i].calls == 1;
        lost_json += d[i].rc == DLOCK_ECONNLOST && i % 2 == 1;
      }
      if (ok < 2 * N)
        fprintf(stderr,
                "    %d of %d pings answered, %d DLOCK_ECONNLOST (%d of them "
                "through the gateway)\n",
                ok, 2 * N, lost, lost_json);
      CHECK_EQ(ok, 2 * N);
    }
    conns[r] = r == 0 || getenv("DLOCK_UNDER_VALGRIND")
                   ? et_conns_to(s->port, NULL)
                   : conns_at_most(s->port, conns[0] + 2);
  }
  fprintf(stderr, "    connections %d before the restart, %d after\n",
          conns[0], conns[1]);
  /* The gateway's blocking calls take a pooled connection each, as many
   * as were in flight at once: 2 more after than before; a connection a
   * call piling up is 20 or more. Under valgrind only, curl (7.88) puts
   * the event loop's pings of a round on the dead TLS connection it still
   * counts as multiplexing and, when their sends fail, retries each on a
   * fresh connection of its own (20 to 24 more, kept in its pool): not
   * bounded there, a limit of issue 32's note. */
  if (!getenv("DLOCK_UNDER_VALGRIND")) CHECK(conns[1] <= conns[0] + 2);
  for (int k = 0; k < 2; k++) {
    CHECK_RC(dlock_lock_is_held(l[k]), 1);
    CHECK_RC(dlock_lock_release(l[k]), 1);
    memset(d, 0, sizeof d);
    CHECK_RC(dlock_lock_release_async(al[k], et_on_adone, &d[0], NULL), 0);
    CHECK(et_run_all(lp, d, 1));
    CHECK_RC(d[0].rc, 1);
  }
  CHECK_EQ(atomic_load(&lost_n), 0);
  for (int k = 0; k < 2; k++) {
    dlock_lock_free(al[k]);
    dlock_client_close(ac[k]);
    dlock_lock_free(l[k]);
    dlock_client_close(c[k]);
  }
  dlock_loop_free(lp);
}

/* A restart over etcds:// (TLS, gRPC by ALPN's HTTP/2) and etcd's JSON
 * gateway on it (?transport=json: HTTP/1.1, a connection a call in
 * flight), both drivers (restart_holding). */
static void t_etcd_restart_transports(void) {
  TH_NEED_ETCD();
  th_etcd s;
  CHECK_RC(th_etcd_start_with(&s, true, NULL), 0);
  char url[200], ca[400], cert[400], key[400];
  dlock_client_options o[2];
  snprintf(ca, sizeof ca, "%s/ca.crt", s.tls_dir);
  snprintf(cert, sizeof cert, "%s/client.crt", s.tls_dir);
  snprintf(key, sizeof key, "%s/client.key", s.tls_dir);
  snprintf(url, sizeof url, "%s?transport=json", s.url);
  for (int k = 0; k < 2; k++) {
    dlock_client_options_init(&o[k]);
    o[k].url = k ? url : s.url;
    o[k].tls_ca_file = ca;
    o[k].tls_cert_file = cert;
    o[k].tls_key_file = key;
    o[k].connect_timeout_ms = (int)th_soon(2000); /* as t_etcd_tls */
    o[k].command_timeout_ms = (int)th_soon(3000);
  }
  restart_holding(&s, o);
  th_etcd_stop(&s);
}

/* The calls' transport: etcd's gRPC API by default, its JSON gateway with
 * ?transport=json (the two share holds); another value is a bad URL. A
 * gRPC client rides out a server restart: its idle connection is gone,
 * and the next call opens another (with prior knowledge: one that went
 * out as HTTP/1.1, to etcd's gateway, is sent again). */
static void t_etcd_transport(void) {
  TH_ETCD_SETUP(s);
  char url[200];
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *j = NULL, *g = th_etcd_client(&s, 0);
  CHECK(g != NULL);
  snprintf(url, sizeof url, "%s?transport=http", s.url);
  CHECK_RC(dlock_client_open(&o, &j), DLOCK_EURL);
  CHECK(strstr(dlock_client_open_errmsg(), "transport=json") != NULL);
  snprintf(url, sizeof url, "%s?transport=json", s.url);
  CHECK_RC(dlock_client_open(&o, &j), 0);
  dlock_lock *lj, *lg;
  CHECK_RC(dlock_lock_new(j, "tr", "j", &lj), 0);
  CHECK_RC(dlock_lock_new(g, "tr", "g", &lg), 0);
  CHECK_RC(dlock_lock_try_acquire(lj, 0, 0, NULL), 0);
  CHECK_RC(dlock_lock_try_acquire(lg, 0, 0, NULL), DLOCK_EBUSY);
  CHECK_RC(dlock_lock_release(lj), 1);
  CHECK_RC(dlock_lock_try_acquire(lg, 0, 0, NULL), 0);
  CHECK_RC(dlock_lock_try_acquire(lj, 0, 0, NULL), DLOCK_EBUSY);
  /* The gateway's client holds one too, its calls of 16 threads at
   * once a connection each (HTTP/1.1), kept. */
  dlock_lock *lj2;
  CHECK_RC(dlock_lock_new(j, "tr2", "j", &lj2), 0);
  CHECK_RC(dlock_lock_try_acquire(lj2, 0, 0, NULL), 0);
  ping_at_once(j);
  int conns = et_conns_to(s.port, NULL);
  CHECK_RC(th_etcd_restart(&s), 0);
  /* After the restart: held still, the calls answered on as many
   * connections as before, not more. */
  ping_at_once(j);
  int after = conns_at_most(s.port, conns);
  fprintf(stderr, "    ?transport=json: %d connections before the restart, "
          "%d after\n", conns, after);
  CHECK(after <= conns);
  CHECK_RC(dlock_lock_release(lj2), 1);
  dlock_lock_free(lj2);
  CHECK_RC(dlock_lock_release(lg), 1);
  CHECK_RC(dlock_lock_try_acquire(lg, 0, 0, NULL), 0);
  CHECK_RC(dlock_lock_release(lg), 1);
  async_cycle(&o, "tra"); /* the event loop's calls over the gateway */
  dlock_lock_free(lj);
  dlock_lock_free(lg);
  dlock_client_close(j);
  dlock_client_close(g);
  th_etcd_stop(&s);
}

/* The watches go over gRPC's Watch, as the calls do: on a server without
 * its JSON gateway (--enable-grpc-gateway=false), a waiter's watch and a
 * held key's each start one Watch call, the held key's kept (not started
 * again), a force release is heard through it at once, and the waiter is
 * woken by its predecessor's delete. */
static void t_etcd_watch_grpc(void) {
  TH_NEED_ETCD();
  th_etcd s;
  CHECK_RC(th_etcd_start_with(&s, false, "--enable-grpc-gateway=false"), 0);
  dlock_client *c = th_etcd_client(&s, 0), *c2 = th_etcd_client(&s, 0);
  CHECK(c != NULL && c2 != NULL);
  dlock_lock *l, *l2;
  CHECK_RC(dlock_lock_new(c, "wg", "me", &l), 0);
  CHECK_RC(dlock_lock_new(c2, "wg", "other", &l2), 0);
  atomic_store(&lost_at, 0);
  dlock_lock_on_lost(l, on_lost, NULL);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, NULL), 0);
  int64_t end = th_now_ms() + th_soon(5000);
  while (th_etcd_started(&s, "Watch") < 1 && th_now_ms() < end)
    th_sleep_ms(5);
  CHECK_EQ(th_etcd_started(&s, "Watch"), 1);
  /* A wait of 300 ms: one Watch more, and the hold's still the one. */
  CHECK_RC(dlock_lock_try_acquire(l2, 300, 0, NULL), DLOCK_EBUSY);
  CHECK_EQ(th_etcd_started(&s, "Watch"), 2);
  int64_t t0 = th_now_ms();
  CHECK_EQ(dlock_lock_force_release(l2), 1);
  while (atomic_load(&lost_at) == 0 && th_now_ms() < end)
    th_sleep_ms(1);
  long long ms = atomic_load(&lost_at) - t0;
  fprintf(stderr, "    force release heard over gRPC's Watch in %lld ms\n", ms);
  CHECK(atomic_load(&lost_at) != 0 && ms < th_soon(100));
  CHECK_RC(dlock_lock_release(l), DLOCK_ELOST);
  /* A waiter woken by the holder's release. */
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, NULL), 0);
  long long before = th_etcd_started(&s, "Watch");
  atomic_store(&woke_at, 0);
  pthread_t t;
  CHECK_RC(pthread_create(&t, NULL, waiter, l2), 0);
  while (th_etcd_started(&s, "Watch") == before && th_now_ms() < end)
    th_sleep_ms(2);
  CHECK(th_etcd_started(&s, "Watch") > before);
  t0 = th_now_ms();
  CHECK_RC(dlock_lock_release(l), 1);
  pthread_join(t, NULL);
  fprintf(stderr, "    a waiter woken %lld ms after the release\n",
          (long long)(atomic_load(&woke_at) - t0));
  CHECK(atomic_load(&woke_at) > 0);
  CHECK_RC(dlock_lock_release(l2), 1);
  dlock_lock_free(l);
  dlock_lock_free(l2);
  dlock_client_close(c);
  dlock_client_close(c2);
  th_etcd_stop(&s);
}

/* An event-loop client's watchdog renewal rounds run on its loop's multi
 * handle: holds kept over several lease periods (1 s watchdog timeout)
 * stay held, their keys there (read in two txns a round), with no thread
 * started for the rounds;
 * the session's lease revoked from outside: every hold reported lost. */
static void t_etcd_async_renew(void) {
  TH_NEED_ETCD();
  enum { N = 160 }; /* more than etcd takes in one txn (128 reads) */
  th_etcd s;
  CHECK_RC(th_etcd_start(&s), 0);
  dlock_loop *lp;
  dlock_lock *l[N];
  dlock_client *c;
  et_open_holding(&s, th_soon(1000), "rn", N, &lp, l, &c);
  if (c == NULL) return;
  atomic_store(&lost_at, 0);
  for (int i = 0; i < N; i++)
    dlock_lock_on_lost(l[i], on_lost, NULL);
  dlock_client_stats st0, st1;
  dlock_client_stats_get(c, &st0);
  int before = et_tasks();
  int most = et_run_sampled(lp, th_soon(3200));
  dlock_client_stats_get(c, &st1);
  fprintf(stderr, "    threads: %d before, at most %d over %d renewal calls\n",
          before, most, (int)(st1.renewal_calls - st0.renewal_calls));
  CHECK(st1.renewal_calls - st0.renewal_calls >= 3);
  CHECK_EQ(most, before);
  CHECK_EQ(atomic_load(&lost_at), 0);
  CHECK_EQ(et_keys_under(&s, "rn"), N);
  for (int i = 0; i < N; i++)
    CHECK_EQ(dlock_lock_is_lost(l[i]), 0);
  /* The session's lease revoked: lost, each of them. */
  char buf[512], args[128];
  const char *out = th_etcd_ctl(&s, "lease list", buf, sizeof buf);
  const char *id = strrchr(out, '\n');
  while (id && id > out && id[-1] != '\n')
    id--;
  CHECK(strstr(out, "found 1 leases") != NULL && id != NULL);
  snprintf(args, sizeof args, "lease revoke %.*s", (int)strcspn(id, "\n"), id);
  th_etcd_ctl(&s, args, buf, sizeof buf);
  int64_t t0 = th_now_ms(), end = t0 + th_soon(3000);
  int lost = 0;
  while (lost < N && th_now_ms() < end) {
    dlock_loop_run(lp, 5);
    lost = 0;
    for (int i = 0; i < N; i++)
      lost += dlock_lock_is_lost(l[i]) == 1;
  }
  fprintf(stderr, "    the lease revoked: %d of %d lost in %lld ms\n", lost, N,
          (long long)(th_now_ms() - t0));
  CHECK_EQ(lost, N);
  /* The first notice within 100 ms; here N holds' watches hear the
   * deletes at once, which a sanitizer's slowdown stretches (131 ms once
   * under TSan beside other builds). */
  CHECK(atomic_load(&lost_at) != 0 &&
        atomic_load(&lost_at) - t0 < th_soon(100) * th_slowdown());
  for (int i = 0; i < N; i++)
    dlock_lock_free(l[i]);
  dlock_client_close(c);
  dlock_loop_free(lp);
  th_etcd_stop(&s);
}

/* A burst's acquire whose completion costs the application 2 ms of the
 * loop (its work on the new hold). */
static void on_burst(int rc, uint64_t token, const char *errmsg, void *ud) {
  et_on_adone(rc, token, errmsg, ud);
  for (int64_t end = th_now_ms() + 2; th_now_ms() < end;) {
  }
}

/* An event-loop client acquiring N locks, 64 in flight, for longer than
 * its watchdog timeout (1 s): each new hold's watch asks for a check of
 * the holds, and the checks, back to back, kept the renewals from running
 * until the first holds' validity ran out: hundreds reported lost (in
 * about a third of the runs here) with every key still there. Renewals
 * due go first now: none lost, every key there, one lease period on. */
static void t_etcd_async_burst(void) {
  TH_NEED_ETCD();
  if (getenv("DLOCK_UNDER_VALGRIND")) {
    /* The burst's pace against the watchdog is what it tests, and
     * valgrind's slowdown changes it (the renewal path's memory is
     * checked by t_etcd_async_renew). */
    fprintf(stderr, "    skipped under valgrind\n");
    return;
  }
  enum { N = 700, FLIGHT = 64 };
  th_etcd s;
  CHECK_RC(th_etcd_start(&s), 0);
  dlock_loop *lp;
  CHECK_RC(dlock_loop_new(NULL, &lp), 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = s.url;
  o.watchdog_timeout_ms = th_soon(1000);
  dlock_client *c;
  CHECK_RC(dlock_client_open_async(&o, lp, &c), 0);
  static dlock_lock *l[N];
  static et_adone d[N];
  memset(d, 0, sizeof d);
  atomic_store(&lost_n, 0);
  char name[32];
  int64_t t0 = th_now_ms();
  for (int i = 0; i < N; i++) {
    snprintf(name, sizeof name, "bu%d", i);
    CHECK_RC(dlock_lock_new(c, name, NULL, &l[i]), 0);
    dlock_lock_on_lost(l[i], on_lost_n, NULL);
    CHECK_RC(dlock_lock_acquire_async(l[i], 0, 0, on_burst, &d[i], NULL), 0);
    for (int busy = FLIGHT; busy >= FLIGHT;) {
      busy = 0;
      for (int j = 0; j <= i; j++)
        busy += d[j].calls == 0;
      if (busy >= FLIGHT) dlock_loop_run(lp, 10);
    }
  }
  CHECK(et_run_all(lp, d, N));
  int ok = 0;
  for (int i = 0; i < N; i++)
    ok += d[i].rc == 0;
  int64_t burst = th_now_ms() - t0;
  et_run_sampled(lp, th_soon(1000));
  fprintf(stderr, "    %d acquired in %lld ms; lost %d\n", ok,
          (long long)burst, atomic_load(&lost_n));
  CHECK_EQ(ok, N);
  CHECK_EQ(atomic_load(&lost_n), 0);
  CHECK_EQ(et_keys_under(&s, "bu"), N);
  for (int i = 0; i < N; i++)
    dlock_lock_free(l[i]);
  dlock_client_close(c);
  dlock_loop_free(lp);
  th_etcd_stop(&s);
}

/* The watchdog's key reads unanswered while the session's keepalives are
 * (the server refuses a txn of more than 2 operations: the reads of 6
 * holds, not an acquire's): a hold's key lives as long as the session's
 * lease unless deleted, so the keepalive keeps every hold, on the
 * blocking client and on the event loop, for longer than the lease (all
 * of them were reported lost when their validity ran out, keys there).
 * A key deleted from outside is still lost at once: its watch hears it,
 * and the check reads that key alone. */
static void t_etcd_reads_unanswered(void) {
  TH_NEED_ETCD();
  if (getenv("DLOCK_UNDER_VALGRIND")) {
    /* Three leases stretched tenfold (30 s); the same renewal path's
     * memory is checked by t_etcd_async_renew. */
    fprintf(stderr, "    skipped under valgrind\n");
    return;
  }
  enum { N = 6 };
  th_etcd s;
  CHECK_RC(th_etcd_start_with(&s, false, "--max-txn-ops 2"), 0);
  dlock_loop *lp;
  dlock_lock *la[N], *lb[N];
  dlock_client *a, *b = th_etcd_client(&s, th_soon(1000));
  CHECK(b != NULL);
  et_open_holding(&s, th_soon(1000), "ra", N, &lp, la, &a);
  if (a == NULL || b == NULL) return;
  char name[32];
  for (int i = 0; i < N; i++) {
    snprintf(name, sizeof name, "rb%d", i);
    CHECK_RC(dlock_lock_new(b, name, NULL, &lb[i]), 0);
    CHECK_RC(dlock_lock_try_acquire(lb[i], 0, 0, NULL), 0);
  }
  atomic_store(&lost_n, 0);
  for (int i = 0; i < N; i++) {
    dlock_lock_on_lost(la[i], on_lost_n, NULL);
    dlock_lock_on_lost(lb[i], on_lost_n, NULL);
  }
  /* Past the lease (etcd's least: 2 s) with no read answered. */
  et_run_sampled(lp, th_soon(3000));
  fprintf(stderr, "    lost with the reads refused: %d\n",
          atomic_load(&lost_n));
  CHECK_EQ(atomic_load(&lost_n), 0);
  CHECK_EQ(et_keys_under(&s, "ra"), N);
  CHECK_EQ(et_keys_under(&s, "rb"), N);
  char buf[512];
  th_etcd_ctl(&s, "del --prefix ra0/", buf, sizeof buf);
  th_etcd_ctl(&s, "del --prefix rb0/", buf, sizeof buf);
  int64_t t0 = th_now_ms();
  while (atomic_load(&lost_n) < 2 && th_now_ms() - t0 < th_soon(2000))
    dlock_loop_run(lp, 5);
  fprintf(stderr, "    a deleted key lost %lld ms after etcdctl\n",
          (long long)(th_now_ms() - t0));
  CHECK_EQ(dlock_lock_is_lost(la[0]), 1);
  CHECK_EQ(dlock_lock_is_lost(lb[0]), 1);
  CHECK(th_now_ms() - t0 < th_soon(500) * th_slowdown());
  for (int i = 1; i < N; i++) {
    CHECK_EQ(dlock_lock_is_lost(la[i]), 0);
    CHECK_EQ(dlock_lock_is_lost(lb[i]), 0);
  }
  for (int i = 0; i < N; i++) {
    dlock_lock_free(la[i]);
    dlock_lock_free(lb[i]);
  }
  dlock_client_close(a);
  dlock_client_close(b);
  dlock_loop_free(lp);
  th_etcd_stop(&s);
}

/* A release in flight still holds the lock for the client's other owners
 * of the name (they share its key): one trying meanwhile is refused at
 * once, without a request; before, it found no claim, put the key, took
 * ours as its own, and our delete then took it away (conformance etcd
 * t_async_exclusion under ASan, 1 run in 4). The server is paused so
 * that the release stays in flight. */
static void t_etcd_release_in_flight(void) {
  TH_ETCD_SETUP(s);
  dlock_loop *lp;
  CHECK_RC(dlock_loop_new(NULL, &lp), 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = s.url;
  o.command_timeout_ms = 2000;
  dlock_client *c;
  CHECK_RC(dlock_client_open_async(&o, lp, &c), 0);
  dlock_lock *a, *b;
  CHECK_RC(dlock_lock_new(c, "rf", "a", &a), 0);
  CHECK_RC(dlock_lock_new(c, "rf", "b", &b), 0);
  et_adone d[2] = {{0}};
  CHECK_RC(dlock_lock_acquire_async(a, 0, 0, et_on_adone, &d[0], NULL), 0);
  CHECK(et_run_all(lp, d, 1));
  CHECK_RC(d[0].rc, 0);
  memset(d, 0, sizeof d);
  th_etcd_kill(&s, SIGSTOP);
  CHECK_RC(dlock_lock_release_async(a, et_on_adone, &d[0], NULL), 0);
  CHECK_RC(dlock_lock_acquire_async(b, 0, 0, et_on_adone, &d[1], NULL), 0);
  int64_t end = th_now_ms() + th_soon(500);
  while (d[1].calls == 0 && th_now_ms() < end)
    dlock_loop_run(lp, 10);
  CHECK_EQ(d[1].calls, 1);
  CHECK_RC(d[1].rc, DLOCK_EBUSY);
  th_etcd_kill(&s, SIGCONT);
  CHECK(et_run_all(lp, d, 2));
  CHECK_RC(d[0].rc, 1);
  memset(d, 0, sizeof d);
  CHECK_RC(dlock_lock_acquire_async(b, 0, 0, et_on_adone, &d[0], NULL), 0);
  CHECK(et_run_all(lp, d, 1));
  CHECK_RC(d[0].rc, 0);
  CHECK_RC(dlock_lock_release_async(b, et_on_adone, &d[1], NULL), 0);
  CHECK(et_run_all(lp, d + 1, 1));
  CHECK_RC(d[1].rc, 1);
  dlock_lock_free(a);
  dlock_lock_free(b);
  dlock_client_close(c);
  dlock_loop_free(lp);
  th_etcd_stop(&s);
}

/* Waits until the cluster has a leader (10 s at most). */
static bool has_leader(th_etcd m[3]) {
  /* The same leader in looks 100 ms apart: a member resumed after a pause
   * still calls itself the leader until it hears the new term. */
  int64_t end = th_now_ms() + th_soon(10000);
  for (int last = -1;; th_sleep_ms(100)) {
    int now = th_etcd_leader(m);
    if (now >= 0 && now == last) return true;
    if (th_now_ms() >= end) return false;
    last = now;
  }
}

/* The event-loop client's calls follow the endpoints as the blocking
 * ones: with the member they talk to killed, each goes to the next
 * (nothing reached the dead one); with the next one paused (a request
 * that may have reached it), none is sent elsewhere: it ends at its
 * deadline. Pings (etcd's Status needs no leader) while the members
 * elect one. */
static void t_etcd_async_failover(void) {
  TH_NEED_ETCD();
  enum { N = 8 };
  th_etcd m[3];
  char url[256];
  CHECK_RC(th_etcd_cluster_start(m, url, sizeof url), 0);
  CHECK(has_leader(m));
  dlock_loop *lp;
  CHECK_RC(dlock_loop_new(NULL, &lp), 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.command_timeout_ms = 1000;
  dlock_client *c;
  CHECK_RC(dlock_client_open_async(&o, lp, &c), 0);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "fo", "me", &l), 0);
  et_adone d[N];
  memset(d, 0, sizeof d);
  CHECK_RC(dlock_lock_acquire_async(l, 0, 0, et_on_adone, &d[0], NULL), 0);
  for (int i = 1; i < N; i++) /* the first member's connection opened */
    CHECK_RC(dlock_client_ping_async(c, et_on_adone, &d[i], NULL), 0);
  CHECK(et_run_all(lp, d, N));
  for (int i = 0; i < N; i++)
    CHECK_RC(d[i].rc, 0);
  th_etcd_kill(&m[0], SIGKILL);
  memset(d, 0, sizeof d);
  for (int i = 0; i < N; i++)
    CHECK_RC(dlock_client_ping_async(c, et_on_adone, &d[i], NULL), 0);
  CHECK(et_run_all(lp, d, N));
  for (int i = 0; i < N; i++)
    CHECK_RC(d[i].rc, 0);
  /* The member answering now (its Status calls counted), paused: the
   * ping is not sent to the other one. */
  long long st[3] = {0, 0, 0};
  for (int i = 1; i < 3; i++)
    st[i] = th_etcd_started(&m[i], "Status");
  memset(d, 0, sizeof d);
  CHECK_RC(dlock_client_ping_async(c, et_on_adone, &d[0], NULL), 0);
  CHECK(et_run_all(lp, d, 1));
  CHECK_RC(d[0].rc, 0);
  int cur = th_etcd_started(&m[1], "Status") > st[1] ? 1 : 2;
  int other = 3 - cur;
  th_etcd_kill(&m[cur], SIGSTOP);
  st[other] = th_etcd_started(&m[other], "Status");
  memset(d, 0, sizeof d);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_client_ping_async(c, et_on_adone, &d[0], NULL), 0);
  CHECK(et_run_all(lp, d, 1));
  int64_t took = th_now_ms() - t0;
  fprintf(stderr, "    a call to a paused member: %s after %lld ms\n",
          dlock_err_name(d[0].rc), (long long)took);
  CHECK_RC(d[0].rc, DLOCK_ETIMEDOUT);
  CHECK(took >= 950 && took < th_soon(2000));
  CHECK_EQ(th_etcd_started(&m[other], "Status"), st[other]);
  th_etcd_kill(&m[cur], SIGCONT);
  CHECK(has_leader(m));
  memset(d, 0, sizeof d);
  CHECK_RC(dlock_lock_release_async(l, et_on_adone, &d[0], NULL), 0);
  CHECK(et_run_all(lp, d, 1));
  CHECK_RC(d[0].rc, 1);
  dlock_lock_free(l);
  dlock_client_close(c);
  dlock_loop_free(lp);
  for (int i = 0; i < 3; i++)
    th_etcd_stop(&m[i]);
}

TH_MAIN(T_BARE(t_etcd_tls), T_BARE(t_etcd_auth), T_BARE(t_etcd_cycle_cost),
        T_BARE(t_etcd_cycle_quiet), T_BARE(t_etcd_transport),
        T_BARE(t_etcd_watch_grpc), T_BARE(t_etcd_async_failover),
        T_BARE(t_etcd_release_in_flight), T_BARE(t_etcd_async_renew),
        T_BARE(t_etcd_async_burst), T_BARE(t_etcd_reads_unanswered),
        T_BARE(t_etcd_calls_shared), T_BARE(t_etcd_calls_down),
        T_BARE(t_etcd_acquire_while_down), T_BARE(t_etcd_wait_forever_down),
        T_BARE(t_etcd_restart_transports))
#else
static void t_etcd_none(void) {
  fprintf(stderr, "    skipped: no etcd backend or server here\n");
}
TH_MAIN(T_BARE(t_etcd_none))
#endif
