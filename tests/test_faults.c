/* test_faults.c: bad input and server trouble. Each gives a clear error code,
 * and where a call failed Redis is left as it was. */
#include "dlock_async.h"
#include "harness.h"
#include "safety/proxy.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static dlock_client *fast_client(const char *url) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = 500;
  o.command_timeout_ms = 400;
  o.reconnect_min_ms = 20;
  o.reconnect_max_ms = 100;
  return th_client_opts(&o);
}

static void t_bad_names(void) {
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_lock *l = (dlock_lock *)1;
  CHECK_RC(dlock_lock_new(c, NULL, NULL, &l), DLOCK_EINVAL);
  CHECK(l == NULL);
  CHECK_RC(dlock_lock_new(c, "", NULL, &l), DLOCK_EINVAL);
  char big[DLOCK_NAME_MAX + 2];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  CHECK_RC(dlock_lock_new(c, big, NULL, &l), DLOCK_ENAMETOOLONG);
  CHECK(strstr(dlock_client_errmsg(c), "limit") != NULL);
  big[DLOCK_NAME_MAX] = '\0'; /* exactly the limit is fine */
  CHECK_RC(dlock_lock_new(c, big, NULL, &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 1000, NULL), 0);
  CHECK_EQ(dlock_lock_release(l), 1);
  dlock_lock_free(l);
  CHECK_RC(dlock_lock_new(NULL, "x", NULL, &l), DLOCK_EINVAL);
  CHECK_RC(dlock_lock_try_acquire(NULL, 0, 0, NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_lock_release(NULL), DLOCK_EINVAL);
  dlock_client_close(c);
}

static void t_unreachable(void) {
  dlock_client *c = (dlock_client *)1;
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = "redis://127.0.0.1:1"; /* nothing listens on port 1 */
  o.connect_timeout_ms = 500;
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_ECONNECT);
  CHECK(th_now_ms() - t0 < th_soon(1000));
  CHECK(c == NULL);
  CHECK(strstr(dlock_client_open_errmsg(), "127.0.0.1:1") != NULL);
  o.url = "unix:///nonexistent/redis.sock";
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_ECONNECT);
}

static void t_wrong_password(void) {
  char url[300];
  snprintf(url, sizeof url, "redis://:wrongpass@127.0.0.1:%d", th_srv.port);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL;
  int rc = dlock_client_open(&o, &c);
  CHECK_RC(rc, DLOCK_EAUTH);
  CHECK(strstr(dlock_client_open_errmsg(), "wrongpass") == NULL);
  /* The password option and an ACL user both work. */
  snprintf(url, sizeof url, "redis://127.0.0.1:%d", th_srv.port);
  o.password = "rightpass";
  c = th_client_opts(&o);
  CHECK(c != NULL);
  CHECK_RC(dlock_client_ping(c), 0);
  dlock_client_close(c);
  redisReply *r = th_cmd(&th_srv, "AUTH rightpass");
  freeReplyObject(r);
  redisContext *rc2 = th_redis_connect(&th_srv);
  r = redisCommand(rc2, "AUTH rightpass");
  freeReplyObject(r);
  r = redisCommand(rc2, "ACL SETUSER locker on >pw2 ~* &* +@all");
  CHECK(r && r->type == REDIS_REPLY_STATUS);
  freeReplyObject(r);
  redisFree(rc2);
  snprintf(url, sizeof url, "redis://locker:pw2@127.0.0.1:%d/2", th_srv.port);
  o.password = NULL;
  o.client_name = "dlock-test";
  c = th_client_opts(&o);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "acl-lock", NULL, &l), 0);
  CHECK_RC(dlock_lock_acquire(l, 1000, NULL), 0);
  CHECK_EQ(dlock_lock_release(l), 1);
  dlock_lock_free(l);
  dlock_client_close(c);
}

static void t_acl_noperm(void) {
  /* A user the server's ACL does not allow to run scripts: its own code and
   * the server's text, not "authentication failed". */
  redisReply *r = th_cmd(&th_srv, "ACL SETUSER noeval on >pw3 ~* &* +@all "
                                  "-evalsha -eval");
  CHECK(r && r->type == REDIS_REPLY_STATUS);
  freeReplyObject(r);
  char url[300];
  snprintf(url, sizeof url, "redis://noeval:pw3@127.0.0.1:%d", th_srv.port);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = th_client_opts(&o);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "f:noperm", NULL, &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 1000, NULL), DLOCK_ENOPERM);
  const char *m = dlock_client_errmsg(c);
  CHECK(strstr(m, "ACL") != NULL);
  CHECK(strstr(m, "NOPERM") != NULL && strstr(m, "evalsha") != NULL);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS f:noperm"), 0);
  CHECK(strcmp(dlock_err_name(DLOCK_ENOPERM), "ENOPERM") == 0);
  dlock_lock_free(l);
  dlock_client_close(c);
  r = th_cmd(&th_srv, "ACL DELUSER noeval");
  freeReplyObject(r);
}

static void t_handshake_timeout_text(void) {
  /* A hung server (SIGSTOP: the kernel still accepts the connection) does
   * not answer the handshake. The detail says what did not answer, without
   * repeating the code's own text. */
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = th_srv.url;
  o.client_name = "hung-test"; /* so that there is a handshake */
  o.connect_timeout_ms = 300;
  dlock_client *c = (dlock_client *)1;
  th_redis_kill(&th_srv, SIGSTOP);
  int rc = dlock_client_open(&o, &c);
  char m[512];
  snprintf(m, sizeof m, "%s", dlock_client_open_errmsg());
  th_redis_kill(&th_srv, SIGCONT);
  CHECK_RC(rc, DLOCK_ETIMEDOUT);
  CHECK(c == NULL);
  CHECK(strstr(m, "no reply to CLIENT SETNAME within 300 ms") != NULL);
  const char *first = strstr(m, "in time");
  CHECK(first != NULL && strstr(first + 1, "in time") == NULL);
}

static void t_wrongtype(void) {
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  redisReply *r = th_cmd(&th_srv, "SET f:string hello");
  freeReplyObject(r);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "f:string", NULL, &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 1000, NULL), DLOCK_EWRONGTYPE);
  CHECK(strstr(dlock_client_errmsg(c), "WRONGTYPE") != NULL);
  CHECK_RC(dlock_lock_try_acquire(l, 200, 1000, NULL), DLOCK_EWRONGTYPE);
  CHECK_RC(dlock_lock_release(l), DLOCK_EWRONGTYPE);
  CHECK_RC(dlock_lock_hold_count(l), DLOCK_EWRONGTYPE);
  r = th_cmd(&th_srv, "GET f:string");
  CHECK(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "hello") == 0);
  freeReplyObject(r);
  CHECK_EQ(th_cmd_int(&th_srv, "PTTL f:string"), -1);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS redisson_lock_token:{f:string}"), 0);
  dlock_lock_free(l);
  dlock_client_close(c);
}

static void *fail_on_thread(void *p) {
  dlock_lock *l = p;
  dlock_lock_try_acquire(l, 0, 1000, NULL); /* ELOCKED, on this thread */
  return NULL;
}

static void t_errmsg_per_client(void) {
  /* One thread, two clients: B's failure leaves A's detail alone, and
   * another thread's failure on A leaves this thread's detail alone. */
  dlock_client *a = th_client(&th_srv, 0), *b = th_client(&th_srv, 0);
  CHECK(a && b);
  redisReply *r = th_cmd(&th_srv, "SET f:errmsg-str x");
  freeReplyObject(r);
  dlock_lock *la, *lb, *held;
  CHECK_RC(dlock_lock_new(a, "f:errmsg-str", NULL, &la), 0);
  CHECK_RC(dlock_lock_new(b, "f:errmsg-held", NULL, &lb), 0);
  CHECK_RC(dlock_lock_new(a, "f:errmsg-held", "other", &held), 0);
  CHECK_RC(dlock_lock_try_acquire(held, 0, 5000, NULL), 0);
  CHECK_RC(dlock_lock_try_acquire(la, 0, 1000, NULL), DLOCK_EWRONGTYPE);
  CHECK_RC(dlock_lock_try_acquire(lb, 0, 1000, NULL), DLOCK_EBUSY);
  CHECK(strstr(dlock_client_errmsg(a), "WRONGTYPE") != NULL);
  CHECK(strstr(dlock_client_errmsg(b), "held by another owner") != NULL);
  dlock_lock *la2;
  CHECK_RC(dlock_lock_new(a, "f:errmsg-held", NULL, &la2), 0);
  pthread_t th;
  pthread_create(&th, NULL, fail_on_thread, la2);
  pthread_join(th, NULL);
  CHECK(strstr(dlock_client_errmsg(a), "WRONGTYPE") != NULL);
  /* A success on B clears B's only. */
  CHECK_RC(dlock_client_ping(b), 0);
  CHECK_RC(dlock_lock_is_locked(lb), 1);
  CHECK(strstr(dlock_client_errmsg(a), "WRONGTYPE") != NULL);
  CHECK_RC(dlock_lock_try_acquire(la2, 0, 1000, NULL), DLOCK_EBUSY);
  CHECK(strstr(dlock_client_errmsg(a), "held by another owner") != NULL);
  CHECK_EQ(dlock_lock_release(held), 1);
  CHECK_RC(dlock_lock_try_acquire(lb, 0, 1000, NULL), 0);
  CHECK_EQ(dlock_lock_release(lb), 1);
  CHECK(strcmp(dlock_client_errmsg(b), "") == 0);
  CHECK_RC(dlock_lock_try_acquire(la, 0, 1000, NULL), DLOCK_EWRONGTYPE);
  dlock_lock_free(la);
  dlock_lock_free(la2);
  dlock_lock_free(lb);
  dlock_lock_free(held);
  dlock_client_close(b);
  /* A closed client's detail is never shown for a new one. */
  dlock_client *b2 = th_client(&th_srv, 0);
  CHECK(b2 != NULL);
  CHECK(strcmp(dlock_client_errmsg(b2), "") == 0);
  CHECK(strstr(dlock_client_errmsg(a), "WRONGTYPE") != NULL);
  dlock_client_close(b2);
  dlock_client_close(a);
}

static void t_script_flush(void) {
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "f:flush", NULL, &l), 0);
  CHECK_RC(dlock_lock_acquire(l, 5000, NULL), 0);
  redisReply *r = th_cmd(&th_srv, "SCRIPT FLUSH");
  freeReplyObject(r);
  CHECK_RC(dlock_lock_acquire(l, 5000, NULL), 0);
  r = th_cmd(&th_srv, "SCRIPT FLUSH");
  freeReplyObject(r);
  CHECK_EQ(dlock_lock_release(l), 0);
  CHECK_EQ(dlock_lock_release(l), 1);
  dlock_lock_free(l);
  dlock_client_close(c);
}

static void t_oom_noeviction(void) {
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "f:oom", NULL, &l), 0);
  redisReply *r = th_cmd(&th_srv, "CONFIG SET maxmemory 1");
  freeReplyObject(r);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 1000, NULL), DLOCK_EOOM);
  r = th_cmd(&th_srv, "CONFIG SET maxmemory 0");
  freeReplyObject(r);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS f:oom"), 0);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS redisson_lock_token:{f:oom}"), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 1000, NULL), 0);
  CHECK_EQ(dlock_lock_release(l), 1);
  dlock_lock_free(l);
  dlock_client_close(c);
}

static bool replica_linked(void *p) {
  redisReply *r = th_cmd((th_redis *)p, "INFO replication");
  bool ok = r && r->type == REDIS_REPLY_STRING &&
            strstr(r->str, "master_link_status:up");
  if (r) freeReplyObject(r);
  return ok;
}

static void t_readonly_replica(void) {
  th_redis rep;
  char extra[100];
  /* Diskless sync waits 5 s by default for more replicas: not here. */
  redisReply *cr = th_cmd(&th_srv, "CONFIG SET repl-diskless-sync-delay 0");
  freeReplyObject(cr);
  snprintf(extra, sizeof extra, "--replicaof 127.0.0.1 %d", th_srv.port);
  CHECK(th_redis_start(&rep, extra) == 0);
  CHECK(th_wait_for(replica_linked, &rep, 5000));
  dlock_client *c = th_client(&rep, 0);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "f:ro", NULL, &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 1000, NULL), DLOCK_EREADONLY);
  CHECK(strstr(dlock_client_errmsg(c), "READONLY") != NULL);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS f:ro"), 0);
  dlock_lock_free(l);
  dlock_client_close(c);
  th_redis_stop(&rep);
}

typedef struct {
  dlock_lock *l;
  int rc;
} targ;

static void *acquire_thread(void *p) {
  targ *a = p;
  a->rc = dlock_lock_try_acquire(a->l, 0, 5000, NULL);
  return NULL;
}

/* Runs fn(a) on a thread while the server holds writes back, kills the
 * normal client connections meanwhile, and returns once the thread is done:
 * the call's command was sent but never ran. The short sleep lets the
 * command reach the server; nothing in Redis 7.0 shows a client paused. */
static void call_killed_mid_flight(void *(*fn)(void *), targ *a) {
  redisReply *r = th_cmd(&th_srv, "CLIENT PAUSE 3000 WRITE");
  freeReplyObject(r);
  pthread_t th;
  pthread_create(&th, NULL, fn, a);
  th_sleep_ms(150);
  r = th_cmd(&th_srv, "CLIENT KILL TYPE normal SKIPME yes");
  freeReplyObject(r);
  pthread_join(th, NULL);
  r = th_cmd(&th_srv, "CLIENT UNPAUSE");
  freeReplyObject(r);
}

static void t_client_killed_mid_call(void) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = th_srv.url;
  o.client_name = "victim";
  o.command_timeout_ms = 5000;
  dlock_client *c = th_client_opts(&o);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "f:kill", NULL, &l), 0);
  CHECK_RC(dlock_client_ping(c), 0);
  dlock_metrics m;
  CHECK_RC(dlock_client_metrics(c, &m), 0);
  CHECK_EQ(m.reconnects, 0); /* the first connect is none */
  targ a = {l, 1};
  call_killed_mid_flight(acquire_thread, &a);
  CHECK_RC(a.rc, DLOCK_ECONNLOST);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS f:kill"), 0);
  /* The next call reconnects (dlock_metrics counts it). */
  CHECK_RC(dlock_lock_try_acquire(l, 0, 5000, NULL), 0);
  CHECK_RC(dlock_client_metrics(c, &m), 0);
  CHECK(m.reconnects >= 1);
  CHECK_EQ(dlock_lock_release(l), 1);
  dlock_lock_free(l);
  dlock_client_close(c);
}

static void *release_thread(void *p) {
  targ *a = p;
  a->rc = dlock_lock_release(a->l);
  return NULL;
}

static bool key_gone(void *p) {
  return th_cmd_int(&th_srv, "EXISTS %s", (const char *)p) == 0;
}

/* A client whose releases retry for 1 s, on leases that outlive that. */
static dlock_client *release_retry_client(void) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = th_srv.url;
  o.watchdog_timeout_ms = 2000; /* outlives the 1 s the release tries */
  o.command_timeout_ms = 1000;
  return th_client_opts(&o);
}

static void t_failed_release_stops_renewal(void) {
  /* The last release never reaches the server (connection killed while the
   * server holds it back): the watchdog must stop renewing, so the lease
   * frees the lock instead of it being renewed for as long as we live. */
  dlock_client *c = release_retry_client();
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "f:relfail", "me", &l), 0);
  CHECK_RC(dlock_lock_acquire(l, 0, NULL), 0);
  targ a = {l, 1};
  int64_t t0 = th_now_ms();
  call_killed_mid_flight(release_thread, &a);
  /* Retried on a new connection, which the server holds back too, until
   * the first send's command timeout. */
  CHECK_RC(a.rc, DLOCK_ETIMEDOUT);
  CHECK(th_now_ms() - t0 < 1000 + 500);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS f:relfail"), 1);
  /* The hold ended with the failed release: not believed any more. */
  CHECK_RC(dlock_lock_validity(l, NULL), DLOCK_ENOTOWNER);
  CHECK(th_wait_for(key_gone, "f:relfail", 3000));
  dlock_lock_free(l);
  dlock_client_close(c);
}

static void t_acquire_after_failed_release(void) {
  /* The same owner asks again before the lease of a lock whose release
   * failed has run out: a fresh hold with a new token, not a re-entry of
   * the hold it gave up (which kept the lock for a lease, handing out the
   * old token again at every acquire). */
  dlock_client *c = release_retry_client();
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "f:relfail2", "me", &l), 0);
  uint64_t t1 = 0, t2 = 0;
  CHECK_RC(dlock_lock_acquire(l, 0, &t1), 0);
  targ a = {l, 1};
  call_killed_mid_flight(release_thread, &a);
  CHECK_RC(a.rc, DLOCK_ETIMEDOUT); /* retried, held back too */
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS f:relfail2"), 1);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, &t2), 0);
  CHECK(t2 > t1);
  CHECK_EQ(dlock_lock_hold_count(l), 1);
  CHECK_RC(dlock_lock_release(l), 1);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS f:relfail2"), 0);
  dlock_lock_free(l);
  dlock_client_close(c);
}

/* Releases through the fault proxy, whose next reply is cut (the server ran
 * the release, the connection drops before the client hears): the release
 * is retried on a new connection and returns the first result. */
static void cut_release(dlock_lock *l, int want) {
  proxy_set(PROXY_CUT, 0);
  uint64_t cut = proxy_faulted_bytes();
  CHECK_EQ(dlock_lock_release(l), want);
  CHECK(proxy_faulted_bytes() > cut); /* the reply was cut */
  proxy_set(PROXY_PASS, 0);
}

/* A client through the fault proxy (proxy_stop when done), or NULL. */
/* Starts the proxy in front of th_srv and fills o for a client through
 * it (url, whose buffer must outlive the open); false if it cannot. */
static bool proxied_options(dlock_client_options *o, char url[100],
                            int command_timeout_ms) {
  int port = proxy_start(th_srv.port);
  if (port <= 0) return false;
  snprintf(url, 100, "redis://127.0.0.1:%d", port);
  dlock_client_options_init(o);
  o->url = url;
  o->command_timeout_ms = command_timeout_ms;
  o->reconnect_min_ms = 10;
  o->wait_backoff_max_ms = 50; /* no subscriber connection: one connection */
  return true;
}

static dlock_client *proxied_client(int command_timeout_ms) {
  dlock_client_options o;
  char url[100];
  return proxied_options(&o, url, command_timeout_ms) ? th_client_opts(&o)
                                                      : NULL;
}

static void t_release_retried_after_lost_reply(void) {
  dlock_client *c = proxied_client(2000);
  CHECK(c != NULL);
  dlock_lock *l, *f;
  dlock_rwlock *rw;
  CHECK_RC(dlock_lock_new(c, "f:cut", NULL, &l), 0);
  CHECK_RC(dlock_fairlock_new(c, "f:cutfair", NULL, 0, &f), 0);
  CHECK_RC(dlock_rwlock_new(c, "f:cutrw", NULL, &rw), 0);
  dlock_lock *rd = dlock_rwlock_read(rw), *wr = dlock_rwlock_write(rw);
  /* The scripts loaded first, so that the reply cut is the release's own
   * (not a NOSCRIPT that ran nothing). */
  dlock_lock *all[] = {l, f, wr, rd};
  for (int i = 0; i < 4; i++) {
    CHECK_RC(dlock_lock_acquire(all[i], 10000, NULL), 0);
    CHECK_EQ(dlock_lock_release(all[i]), 1);
  }
  long long evals = th_calls(&th_srv, "evalsha");
  /* Last hold: freed once, and the retry says 1 (freed), not ENOTOWNER. */
  CHECK_RC(dlock_lock_acquire(l, 10000, NULL), 0);
  CHECK_RC(dlock_lock_acquire(l, 10000, NULL), 0);
  cut_release(l, 0); /* a re-entered hold: still held */
  CHECK_EQ(dlock_lock_hold_count(l), 1);
  cut_release(l, 1);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS f:cut"), 0);
  CHECK_RC(dlock_lock_validity(l, NULL), DLOCK_ENOTOWNER);
  /* The result is kept a few command timeouts, then expires. */
  redisReply *r = th_cmd(&th_srv, "KEYS redisson_unlock_latch:{f:cut}:*");
  /* The warm-up's release and the cut last one. The cut reentrant release
   * kept none: it writes the count the client knows, so its retry ran it
   * again to the same result. */
  CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2);
  long long ttl = th_cmd_int(&th_srv, "PTTL %s", r->element[0]->str);
  freeReplyObject(r);
  CHECK(ttl > 0 && ttl <= 3 * 2000 + 6000); /* and the 6 s a retry may take */
  /* The fair lock and both sides of a read-write lock, the same. */
  CHECK_RC(dlock_lock_acquire(f, 10000, NULL), 0);
  cut_release(f, 1);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS f:cutfair"), 0);
  CHECK_RC(dlock_lock_acquire(wr, 10000, NULL), 0);
  cut_release(wr, 1);
  CHECK_RC(dlock_lock_acquire(rd, 10000, NULL), 0);
  cut_release(rd, 1);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS f:cutrw"), 0);
  /* 5 acquires, and 5 releases each sent twice (cut, then retried): 15
   * EVALSHA; none answered NOSCRIPT (which would have run nothing). */
  CHECK_EQ(th_calls(&th_srv, "evalsha") - evals, 15);
  /* A release that is not retried is unchanged: not the owner. */
  CHECK_RC(dlock_lock_release(l), DLOCK_ENOTOWNER);
  dlock_lock_free(l);
  dlock_lock_free(f);
  dlock_rwlock_free(rw);
  dlock_client_close(c);
  proxy_stop();
}

/* A grant whose reply comes after its lease could have ended is not
 * believed: DLOCK_ELATE (not ETIMEDOUT: the server did answer), and it is
 * given back, for a lock and for a permit. */
static void t_late_grant_is_elate(void) {
  dlock_client *c = proxied_client(3000);
  CHECK(c != NULL);
  dlock_lock *l;
  dlock_permits *p;
  CHECK_RC(dlock_lock_new(c, "f:late", NULL, &l), 0);
  CHECK_RC(dlock_permits_new(c, "f:latep", &p), 0);
  CHECK_EQ(dlock_permits_try_set(p, 1), 1);
  /* Scripts loaded first: the delayed reply is the acquire's own. */
  char id[DLOCK_PERMIT_ID_LEN];
  CHECK_RC(dlock_lock_try_acquire(l, 0, 5000, NULL), 0);
  CHECK_EQ(dlock_lock_release(l), 1);
  CHECK_RC(dlock_permits_try_acquire(p, 0, 5000, id), 0);
  CHECK_RC(dlock_permits_release(p, id), 0);
  proxy_set(PROXY_DELAY, 500);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 200, NULL), DLOCK_ELATE);
  CHECK(strstr(dlock_client_errmsg(c), "granted") != NULL);
  CHECK_RC(dlock_permits_try_acquire(p, 0, 200, id), DLOCK_ELATE);
  proxy_set(PROXY_PASS, 0);
  /* Given back, not held. */
  CHECK_RC(dlock_lock_validity(l, NULL), DLOCK_ENOTOWNER);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS f:late"), 0);
  CHECK_EQ(dlock_permits_get_available(p), 1);
  CHECK(strcmp(dlock_err_name(DLOCK_ELATE), "ELATE") == 0);
  dlock_lock_free(l);
  dlock_permits_free(p);
  dlock_client_close(c);
  proxy_stop();
}

static void t_server_paused(void) {
  dlock_client *c = fast_client(th_srv.url);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "f:pause", NULL, &l), 0);
  /* A first acquire loads the script, so that the one sent to the paused
   * server is an EVALSHA it can run once resumed (not NOSCRIPT). */
  CHECK_RC(dlock_lock_try_acquire(l, 0, 1000, NULL), 0);
  CHECK_EQ(dlock_lock_release(l), 1);
  th_redis_kill(&th_srv, SIGSTOP);
  int64_t t0 = th_now_ms();
  int rc = dlock_lock_try_acquire(l, 0, 5000, NULL);
  int64_t took = th_now_ms() - t0;
  th_redis_kill(&th_srv, SIGCONT);
  CHECK_RC(rc, DLOCK_ETIMEDOUT);
  CHECK(took >= 380 && took < 1500);
  /* The paused server ran the timed-out acquire after all, for this same
   * owner. The client knows of no hold, so the next acquire takes the lock
   * afresh instead of re-entering the orphan, and one release frees it.
   * (In about one run in ten the orphan never runs: the request goes with
   * the timed-out connection. The checks after this hold either way.) */
  int64_t end = th_now_ms() + 1000;
  while (th_cmd_int(&th_srv, "EXISTS f:pause") != 1 && th_now_ms() < end)
    th_sleep_ms(2);
  bool orphan = th_cmd_int(&th_srv, "EXISTS f:pause") == 1;
  fprintf(stderr, "    the timed-out acquire %s on the server\n",
          orphan ? "ran" : "never ran");
  CHECK_EQ(dlock_lock_hold_count(l), orphan ? 1 : 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 1000, NULL), 0);
  CHECK_EQ(dlock_lock_hold_count(l), 1);
  CHECK_EQ(dlock_lock_release(l), 1);
  CHECK_EQ(dlock_lock_is_locked(l), 0);
  dlock_lock_free(l);
  dlock_client_close(c);
}

/* Stops the server `ms` after it starts (a thread). */
typedef struct pauser {
  int ms;
} pauser;

static void *pause_later(void *p) {
  th_sleep_ms(((pauser *)p)->ms);
  th_redis_kill(&th_srv, SIGSTOP);
  return NULL;
}

/* wait_ms bounds the whole call, leaving the wait included: at most one
 * command timeout after the wait ends. The server stops while a queued
 * waiter (lease 300 ms: an attempt every 100 ms) waits 600 ms; its next
 * attempt goes unanswered, and so would its leaving the hand-off queue.
 * Before the bound, each took a command timeout of its own (about
 * 500 + 400 + 400 ms). */
static void t_wait_bounds_call(void) {
  dlock_client *holder = fast_client(th_srv.url);
  dlock_client *waiter = fast_client(th_srv.url);
  CHECK(holder != NULL && waiter != NULL);
  dlock_lock *h, *w;
  CHECK_RC(dlock_lock_new(holder, "f:bound", NULL, &h), 0);
  CHECK_RC(dlock_lock_new(waiter, "f:bound", NULL, &w), 0);
  CHECK_RC(dlock_lock_try_acquire(h, 0, 10000, NULL), 0);
  pauser ps = {450};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, pause_later, &ps) == 0);
  int64_t t0 = th_now_ms();
  int rc = dlock_lock_try_acquire(w, 600, 300, NULL);
  int64_t took = th_now_ms() - t0;
  pthread_join(t, NULL);
  th_redis_kill(&th_srv, SIGCONT);
  CHECK(rc == DLOCK_ETIMEDOUT || rc == DLOCK_EBUSY);
  CHECK(took >= 600);
  CHECK(took <= 600 + 400 + 120);
  CHECK_EQ(dlock_lock_release(h), 1);
  dlock_lock_free(h);
  dlock_lock_free(w);
  dlock_client_close(holder);
  dlock_client_close(waiter);
}

static void t_server_restart_while_held(void) {
  dlock_client *c = fast_client(th_srv.url);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "f:restart", NULL, &l), 0);
  uint64_t t1, t2;
  CHECK_RC(dlock_lock_acquire(l, 10000, &t1), 0);
  th_redis_kill(&th_srv, SIGKILL);
  /* While it is down, calls fail within their timeout. */
  int64_t t0 = th_now_ms();
  int rc = dlock_lock_is_locked(l);
  CHECK(rc == DLOCK_ECONNLOST || rc == DLOCK_ECONNECT ||
        rc == DLOCK_ETIMEDOUT);
  CHECK(th_now_ms() - t0 < 1500);
  CHECK(th_redis_restart(&th_srv) == 0); /* no persistence: the lock is gone */
  int64_t end = th_now_ms() + 3000;
  while ((rc = dlock_lock_is_locked(l)) < 0 && th_now_ms() < end)
    th_sleep_ms(20);
  CHECK_EQ(rc, 0);
  /* The holder learns it lost the lock; the fencing token went on up. */
  CHECK_RC(dlock_lock_release(l), DLOCK_ELOST);
  CHECK_RC(dlock_lock_acquire(l, 10000, &t2), 0);
  CHECK(t2 > t1);
  CHECK_EQ(dlock_lock_release(l), 1);
  dlock_lock_free(l);
  dlock_client_close(c);
}

static void *wait_thread(void *p) {
  targ *a = p;
  a->rc = dlock_lock_try_acquire(a->l, 8000, 5000, NULL);
  if (a->rc == 0) dlock_lock_release(a->l);
  return NULL;
}

static void t_waiter_survives_restart(void) {
  dlock_client *holder = fast_client(th_srv.url);
  dlock_client *waiter = fast_client(th_srv.url);
  CHECK(holder && waiter);
  dlock_lock *lh, *lw;
  CHECK_RC(dlock_lock_new(holder, "f:wrestart", NULL, &lh), 0);
  CHECK_RC(dlock_lock_new(waiter, "f:wrestart", NULL, &lw), 0);
  CHECK_RC(dlock_lock_acquire(lh, 60000, NULL), 0);
  targ a = {lw, 1};
  pthread_t th;
  pthread_create(&th, NULL, wait_thread, &a);
  th_sleep_ms(200);
  int64_t t0 = th_now_ms();
  CHECK(th_redis_restart(&th_srv) == 0); /* the 60 s lock is gone */
  pthread_join(th, NULL);
  /* Either the waiter got the lock soon after the restart, or its retry
   * hit the outage and it says so; it never sleeps out the 60 s TTL. */
  CHECK(a.rc == 0 || a.rc == DLOCK_ECONNLOST || a.rc == DLOCK_ECONNECT ||
        a.rc == DLOCK_ETIMEDOUT);
  CHECK(th_now_ms() - t0 < 5000);
  dlock_lock_free(lh);
  dlock_lock_free(lw);
  dlock_client_close(holder);
  dlock_client_close(waiter);
}


/* ---- the same races on an event loop ---- */
typedef struct got1 {
  int calls, rc;
  char msg[256];
} got1;

static void on_got(int rc, uint64_t token, const char *errmsg, void *ud) {
  (void)token;
  got1 *g = ud;
  g->calls++;
  g->rc = rc;
  snprintf(g->msg, sizeof g->msg, "%s", errmsg);
}

static bool run_until(dlock_loop *lp, const int *flag, int ms) {
  int64_t end = th_now_ms() + ms;
  while (!*flag && th_now_ms() < end) dlock_loop_run(lp, 20);
  return *flag != 0;
}

/* An event-loop client through the fault proxy (one connection). */
static dlock_client *proxied_loop_client(dlock_loop *lp) {
  dlock_client_options o;
  char url[100];
  dlock_client *c = NULL;
  if (!proxied_options(&o, url, 3000)) return NULL;
  return dlock_client_open_async(&o, lp, &c) == 0 ? c : NULL;
}

/* A loop, a client through the proxy, a lock and a permit semaphore of one
 * permit, their scripts loaded (so that a delayed reply is an acquire's
 * own, not a script load's). */
typedef struct afix {
  dlock_loop *lp;
  dlock_client *c;
  dlock_lock *l;
  dlock_permits *p;
} afix;

/* Runs the loop until g's callback came (within 5 s). */
#define AWAIT(f, g) CHECK(run_until((f)->lp, &(g)->calls, 5000))

static void afix_open(afix *f, const char *lock, const char *sem) {
  CHECK_RC(dlock_loop_new(NULL, &f->lp), 0);
  f->c = proxied_loop_client(f->lp);
  CHECK(f->c != NULL);
  CHECK_RC(dlock_lock_new(f->c, lock, NULL, &f->l), 0);
  CHECK_RC(dlock_permits_new(f->c, sem, &f->p), 0);
  got1 g[5] = {{0}};
  char id[DLOCK_PERMIT_ID_LEN];
  CHECK_RC(dlock_permits_try_set_async(f->p, 1, on_got, &g[0], NULL), 0);
  CHECK_RC(dlock_lock_acquire_async(f->l, 0, 5000, on_got, &g[1], NULL), 0);
  AWAIT(f, &g[1]);
  CHECK_RC(g[1].rc, 0);
  CHECK_RC(dlock_lock_release_async(f->l, on_got, &g[2], NULL), 0);
  CHECK_RC(dlock_permits_acquire_async(f->p, 0, 5000, id, on_got, &g[3], NULL),
           0);
  AWAIT(f, &g[3]);
  CHECK_RC(g[3].rc, 0);
  CHECK_RC(dlock_permits_release_async(f->p, id, on_got, &g[4], NULL), 0);
  AWAIT(f, &g[4]);
  CHECK_RC(g[4].rc, 0);
}

/* The permits available, by the event-loop call. */
static int afix_available(afix *f) {
  got1 a = {0};
  int rc = dlock_permits_get_available_async(f->p, on_got, &a, NULL);
  if (rc != 0) return rc;
  return run_until(f->lp, &a.calls, 5000) ? a.rc : DLOCK_ETIMEDOUT;
}

static void afix_close(afix *f) {
  dlock_lock_free(f->l);
  dlock_permits_free(f->p);
  dlock_client_close(f->c);
  dlock_loop_free(f->lp);
  proxy_stop();
}

/* As t_late_grant_is_elate, on the loop: the callback hears DLOCK_ELATE,
 * after the grant was given back. */
static void t_late_grant_is_elate_async(void) {
  afix f;
  afix_open(&f, "f:latea", "f:lateap");
  got1 g[2] = {{0}};
  char id[DLOCK_PERMIT_ID_LEN];
  proxy_set(PROXY_DELAY, 500);
  CHECK_RC(dlock_lock_acquire_async(f.l, 0, 200, on_got, &g[0], NULL), 0);
  CHECK_RC(dlock_permits_acquire_async(f.p, 0, 200, id, on_got, &g[1], NULL),
           0);
  AWAIT(&f, &g[0]);
  AWAIT(&f, &g[1]);
  proxy_set(PROXY_PASS, 0);
  CHECK(proxy_faulted_bytes() > 0);
  CHECK_RC(g[0].rc, DLOCK_ELATE);
  CHECK(strstr(g[0].msg, "granted") != NULL);
  CHECK_RC(g[1].rc, DLOCK_ELATE);
  /* Given back before the callbacks ran. */
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS f:latea"), 0);
  CHECK_EQ(afix_available(&f), 1);
  afix_close(&f);
}

/* Cancelled while its request is in flight: the server grants the lock
 * and the permit all the same; both go back, and the callbacks hear
 * DLOCK_ECANCELED. The control: the same acquires not cancelled hold. */
static void t_cancel_as_granted_async(void) {
  afix f;
  afix_open(&f, "f:cancel", "f:cancelp");
  got1 g[2] = {{0}};
  char id[DLOCK_PERMIT_ID_LEN];
  long long tok0 = th_cmd_int(&th_srv, "GET redisson_lock_token:{f:cancel}");
  proxy_set(PROXY_DELAY, 300);
  dlock_op *ol = NULL, *op = NULL;
  CHECK_RC(dlock_lock_acquire_async(f.l, 5000, 30000, on_got, &g[0], &ol), 0);
  CHECK_RC(dlock_permits_acquire_async(f.p, 5000, 30000, id, on_got, &g[1],
                                       &op),
           0);
  /* Both requests out, their replies held back by the proxy. */
  dlock_loop_run(f.lp, 50);
  CHECK_EQ(g[0].calls + g[1].calls, 0);
  dlock_op_cancel(ol);
  dlock_op_cancel(op);
  AWAIT(&f, &g[0]);
  AWAIT(&f, &g[1]);
  proxy_set(PROXY_PASS, 0);
  CHECK(proxy_faulted_bytes() > 0);
  /* Granted on the server (a token was issued), then given back. */
  CHECK_EQ(th_cmd_int(&th_srv, "GET redisson_lock_token:{f:cancel}"),
           tok0 + 1);
  CHECK_RC(g[0].rc, DLOCK_ECANCELED);
  CHECK_RC(g[1].rc, DLOCK_ECANCELED);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS f:cancel"), 0);
  CHECK_EQ(afix_available(&f), 1);
  /* Control: not cancelled, the same acquires hold. */
  got1 k[2] = {{0}};
  CHECK_RC(dlock_lock_acquire_async(f.l, 5000, 30000, on_got, &k[0], NULL), 0);
  CHECK_RC(dlock_permits_acquire_async(f.p, 5000, 30000, id, on_got, &k[1],
                                       NULL),
           0);
  AWAIT(&f, &k[0]);
  AWAIT(&f, &k[1]);
  CHECK_RC(k[0].rc, 0);
  CHECK_RC(k[1].rc, 0);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS f:cancel"), 1);
  CHECK_EQ(afix_available(&f), 0);
  afix_close(&f);
}

TH_MAIN(T(t_bad_names), T_BARE(t_unreachable),
        T_REDIS(t_wrong_password, "--requirepass rightpass"), T(t_acl_noperm),
        T(t_handshake_timeout_text), T(t_wrongtype), T(t_errmsg_per_client),
        T(t_script_flush),
        T_REDIS(t_oom_noeviction, "--maxmemory-policy noeviction"),
        T(t_readonly_replica), T(t_client_killed_mid_call),
        T(t_failed_release_stops_renewal), T(t_acquire_after_failed_release),
        T(t_release_retried_after_lost_reply), T(t_server_paused),
        T(t_wait_bounds_call), T(t_server_restart_while_held),
        T(t_waiter_survives_restart), T(t_late_grant_is_elate),
        T(t_late_grant_is_elate_async), T(t_cancel_as_granted_async))
