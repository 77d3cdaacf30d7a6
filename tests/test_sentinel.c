/* test_sentinel.c: redis-sentinel:// URLs: discovery through the
 * sentinels, their errors, and following a failover (a master, its replica
 * and three sentinels started by the harness for each test). */
#include "harness.h"

#include <hiredis/hiredis.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static th_sentinel_set S;

static dlock_client *open_url(const char *url, int64_t watchdog_ms) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = 1000;
  if (watchdog_ms > 0) o.watchdog_timeout_ms = watchdog_ms;
  return th_client_opts(&o);
}

static long long exists_on(th_redis *r, const char *key) {
  return th_cmd_int(r, "EXISTS %s", key);
}

/* The URL's forms, and what it refuses (no server). */
static void url_forms(void) {
  static const char *bad[] = {
      "redis-sentinel://127.0.0.1:1",            /* no master name */
      "redis-sentinel://127.0.0.1:1/",           /* empty name */
      "redis-sentinel://127.0.0.1:1,/m",         /* empty sentinel */
      "redis-sentinel://127.0.0.1:x/m",          /* bad port */
      "redis-sentinel://127.0.0.1:1/m?sentinel_password=x", /* printed */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    dlock_client_options o;
    dlock_client_options_init(&o);
    o.url = bad[i];
    dlock_client *c = NULL;
    CHECK_RC(dlock_client_open(&o, &c), DLOCK_EURL);
    CHECK(c == NULL);
  }
  /* No sentinel listens: a clear error naming each one asked. */
  int p1 = th_free_port(), p2 = th_free_port();
  char url[200];
  snprintf(url, sizeof url, "redis-sentinel://127.0.0.1:%d,127.0.0.1:%d/m",
           p1, p2);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = 500;
  dlock_client *c = NULL;
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_ECONNECT);
  const char *m = dlock_client_open_errmsg();
  CHECK(strstr(m, "no sentinel answered") != NULL);
  char p1s[32];
  snprintf(p1s, sizeof p1s, "127.0.0.1:%d", p1);
  CHECK(strstr(m, p1s) != NULL);
}

/* The client finds the master through the sentinels (the first listed
 * one down), locks there, and the lock reaches the replica. */
static void discovery(void) {
  CHECK(th_sentinel_start(&S, NULL) == 0);
  char url[700];
  /* A dead sentinel first: the next one is asked. */
  snprintf(url, sizeof url, "redis-sentinel://127.0.0.1:%d,%s",
           th_free_port(), S.url + strlen("redis-sentinel://"));
  dlock_client *c = open_url(url, 0);
  CHECK(c != NULL);
  dlock_lock *l = NULL;
  CHECK_RC(dlock_lock_new(c, "sent-disc", NULL, &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 10000, NULL), 0);
  CHECK_EQ(exists_on(&S.master, "sent-disc"), 1);
  CHECK(th_sentinel_synced(&S, 5000));
  CHECK_EQ(exists_on(&S.replica, "sent-disc"), 1);
  CHECK_RC(dlock_client_ping(c), 0);
  CHECK_RC(dlock_lock_release(l), 1);
  CHECK_EQ(exists_on(&S.master, "sent-disc"), 0);
  dlock_lock_free(l);
  dlock_client_close(c);
  th_sentinel_stop(&S);
}

/* A name no sentinel monitors, and every sentinel down: clear errors. */
static void wrong_name_and_down(void) {
  CHECK(th_sentinel_start(&S, NULL) == 0);
  char url[700];
  snprintf(url, sizeof url, "%.*s/nosuch",
           (int)(strrchr(S.url, '/') - S.url), S.url);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL;
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_ECONNECT);
  CHECK(strstr(dlock_client_open_errmsg(), "knows no master named 'nosuch'")
        != NULL);
  for (int i = 0; i < 3; i++) th_redis_stop(&S.sentinels[i]);
  o.url = S.url;
  o.connect_timeout_ms = 500;
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_ECONNECT);
  CHECK(strstr(dlock_client_open_errmsg(), "no sentinel answered") != NULL);
  th_sentinel_stop(&S);
}

/* The sentinels' password: from the option, else DLOCK_SENTINEL_PASSWORD;
 * a wrong one is refused with DLOCK_EAUTH's detail. */
static void sentinel_password(void) {
  CHECK(th_sentinel_start(&S, NULL) == 0);
  for (int i = 0; i < 3; i++) {
    redisReply *r = th_cmd(&S.sentinels[i], "ACL SETUSER default resetpass >s3cret");
    CHECK(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
  }
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = S.url;
  dlock_client *c = NULL;
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_ECONNECT);
  o.sentinel_password = "s3cret";
  c = th_client_opts(&o);
  CHECK(c != NULL);
  CHECK_RC(dlock_client_ping(c), 0);
  dlock_client_close(c);
  o.sentinel_password = NULL;
  setenv("DLOCK_SENTINEL_PASSWORD", "s3cret", 1);
  c = th_client_opts(&o);
  unsetenv("DLOCK_SENTINEL_PASSWORD");
  CHECK(c != NULL);
  dlock_client_close(c);
  th_sentinel_stop(&S);
}

TH_MAIN(T_BARE(url_forms), T_BARE(discovery), T_BARE(wrong_name_and_down),
        T_BARE(sentinel_password))
