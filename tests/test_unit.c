/* test_unit.c: URL parsing, error codes and names; no server needed. */
#include "harness.h"
#include "cli/duration.h"
#include "client/client.h"
#include "redis/conns/conns.h"

#include <ctype.h>
#include <hiredis/hiredis.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

static void t_url_redis(void) {
  dl_endpoint ep;
  char err[200];
  CHECK_RC(dl_url_parse("redis://u:p%40ss@example.com:6380/3", &ep, err,
                        sizeof err), 0);
  CHECK(strcmp(ep.host, "example.com") == 0);
  CHECK_EQ(ep.port, 6380);
  CHECK_EQ(ep.db, 3);
  CHECK(strcmp(ep.username, "u") == 0);
  CHECK(strcmp(ep.password, "p@ss") == 0);
  CHECK(!ep.tls);
  dl_endpoint_clear(&ep);
  CHECK_RC(dl_url_parse("redis://:secret@127.0.0.1", &ep, err, sizeof err), 0);
  CHECK(ep.username == NULL);
  CHECK(strcmp(ep.password, "secret") == 0);
  CHECK_EQ(ep.port, 6379);
  dl_endpoint_clear(&ep);
  CHECK_RC(dl_url_parse("rediss://[::1]:7000", &ep, err, sizeof err), 0);
  CHECK(ep.tls);
  CHECK(strcmp(ep.host, "::1") == 0);
  CHECK_EQ(ep.port, 7000);
  dl_endpoint_clear(&ep);
  CHECK_RC(dl_url_parse("unix:///tmp/r.sock?db=2", &ep, err, sizeof err), 0);
  CHECK(strcmp(ep.unix_path, "/tmp/r.sock") == 0);
  CHECK_EQ(ep.db, 2);
  dl_endpoint_clear(&ep);
}

static void t_url_bad(void) {
  static const char *bad[] = {
      "",           "http://x",         "redis://h:0",     "redis://h:99999",
      "redis://h:x", "redis://h/abc",   "redis://[::1",    "unix://rel/path",
      "unix:///s?x=1", "redis://h /",   "redis://u:%zz@h", "unix://",
      "redis://h:6379/1/2",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    dl_endpoint ep;
    char err[200] = "";
    int rc = dl_url_parse(bad[i], &ep, err, sizeof err);
    if (rc != DLOCK_EURL) fprintf(stderr, "    accepted: '%s'\n", bad[i]);
    CHECK_RC(rc, DLOCK_EURL);
    CHECK(err[0] != '\0');
  }
  /* An option the URL does not know is named, not read as a bad port. */
  static const char *opt[] = {
      "redis://h:6379?foo=bar",
      "redis://h/0?foo=bar",
      "rediss://u:p@h?foo",
      "unix:///s?foo=1",
      "redis-sentinel://h:1/m?foo=1",
      "redis-cluster://h:1?foo=1",
      "redis-cluster://h:1/?foo&pubsub=auto",
  };
  for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++) {
    dl_endpoint ep;
    char err[200] = "";
    CHECK_RC(dl_url_parse(opt[i], &ep, err, sizeof err), DLOCK_EURL);
    if (strstr(err, "unknown option 'foo'") == NULL)
      fprintf(stderr, "    %s: %s\n", opt[i], err);
    CHECK(strstr(err, "unknown option 'foo'") != NULL);
  }
}

/* A server named twice, as written or once resolved (localhost and
 * 127.0.0.1), is refused with DLOCK_EINVAL naming it, on every URL of
 * several servers; the same host on two ports is two servers. */
static void t_url_twice(void) {
  static const struct {
    const char *url, *named;
  } twice[] = {
      {"redis-sentinel://h:26379,h/m", "h:26379 twice"},
      {"rediss-sentinel://a:1,b:2,a:1/m",
       "rediss-sentinel:// names the server a:1"},
      {"redis-cluster://h:7000,localhost:7001,127.0.0.1:7001",
       "localhost:7001 (server 2) and 127.0.0.1:7001 (server 3)"},
      {"redis-cluster://[::1]:7000,[::1]:7000", "[::1]:7000 twice"},
      {"zk://h:2181,h:2181/app", "zk:// names the server h:2181 twice"},
      {"zk://localhost:2181,127.0.0.1:2181", "the same address"},
  };
  char err[300];
  for (size_t i = 0; i < sizeof twice / sizeof twice[0]; i++) {
    dl_endpoint ep;
    dl_zk_url u;
    err[0] = '\0';
    int rc = strncmp(twice[i].url, "zk", 2) == 0
                 ? dl_url_parse_zk(twice[i].url, &u, err, sizeof err)
                 : dl_url_parse(twice[i].url, &ep, err, sizeof err);
    if (rc != DLOCK_EINVAL || strstr(err, twice[i].named) == NULL)
      fprintf(stderr, "    %s: %d %s\n", twice[i].url, rc, err);
    CHECK_RC(rc, DLOCK_EINVAL);
    CHECK(strstr(err, twice[i].named) != NULL);
  }
  static const char *once[] = {"redis-sentinel://h:1,h:2/m",
                               "redis-cluster://localhost:7000,127.0.0.1:7001",
                               "zk://h:2181,h:2182,[::1]:2183/app"};
  for (size_t i = 0; i < sizeof once / sizeof once[0]; i++) {
    dl_endpoint ep;
    dl_zk_url u;
    int rc = strncmp(once[i], "zk", 2) == 0
                 ? dl_url_parse_zk(once[i], &u, err, sizeof err)
                 : dl_url_parse(once[i], &ep, err, sizeof err);
    if (rc != 0) fprintf(stderr, "    %s: %d %s\n", once[i], rc, err);
    CHECK_RC(rc, 0);
    if (strncmp(once[i], "zk", 2) == 0)
      dl_zk_url_clear(&u);
    else
      dl_endpoint_clear(&ep);
  }
}

static void t_url_redact(void) {
  char *r = dl_url_redact("redis://user:hunter2@h:1/0");
  CHECK(r != NULL);
  CHECK(strstr(r, "hunter2") == NULL);
  CHECK(strcmp(r, "redis://user:***@h:1/0") == 0);
  free(r);
  r = dl_url_redact("redis://h:1");
  CHECK(strcmp(r, "redis://h:1") == 0);
  free(r);
}

static void t_errors(void) {
  CHECK(strcmp(dlock_err_name(DLOCK_ETIMEDOUT), "ETIMEDOUT") == 0);
  /* One "not in time" code for every kind; the old name is its alias. */
  CHECK_EQ(DLOCK_EBUSY, -15);
  CHECK_EQ(DLOCK_ELOCKED, DLOCK_EBUSY);
  CHECK(strcmp(dlock_err_name(DLOCK_EBUSY), "EBUSY") == 0);
  CHECK(strstr(dlock_strerror(DLOCK_EBUSY), "no permits") != NULL);
  CHECK_EQ(DLOCK_ELATE, -23);
  CHECK(strcmp(dlock_err_name(DLOCK_ELATE), "ELATE") == 0);
  CHECK(strcmp(dlock_strerror(DLOCK_ENOTOWNER),
               "lock is not held by this owner") == 0);
  CHECK(strcmp(dlock_strerror(12345), "unknown error") == 0);
  CHECK(strcmp(dlock_err_name(0), "OK") == 0);
  int num;
  CHECK(strcmp(dlock_version(&num), DLOCK_VERSION_STRING) == 0);
  CHECK_EQ(num, DLOCK_VERSION_NUM);
  /* One version everywhere: the header's is CMake's project version. */
  CHECK(strcmp(DLOCK_VERSION_STRING, DLOCK_PROJECT_VERSION) == 0);
  CHECK_EQ(dl_server_errcode("WRONGTYPE Operation against a key"),
           DLOCK_EWRONGTYPE);
  CHECK_EQ(dl_server_errcode("ERR Error running script: -WRONGTYPE x"),
           DLOCK_EWRONGTYPE);
  CHECK_EQ(dl_server_errcode("OOM command not allowed"), DLOCK_EOOM);
  CHECK_EQ(dl_server_errcode("READONLY You can't write"), DLOCK_EREADONLY);
  CHECK_EQ(dl_server_errcode("ERR something"), DLOCK_ESERVER);
}

static void t_bad_open(void) {
  dlock_client *c = (dlock_client *)1;
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = "redis://u:topsecret@h:notaport";
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_EURL);
  CHECK(c == NULL);
  CHECK(strstr(dlock_client_open_errmsg(), "topsecret") == NULL);
  CHECK(strstr(dlock_client_open_errmsg(), "port") != NULL);
  o.url = NULL;
  o.connections = 0;
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_EINVAL);
  CHECK_RC(dlock_client_open(NULL, NULL), DLOCK_EINVAL);
  dlock_client_close(NULL);
  dlock_lock_free(NULL);
}

/* dlock_client_options grows without breaking the ABI (dlock.h). */
static void t_options_size(void) {
  dlock_client *c = (dlock_client *)1;
  dlock_client_options o;
  dlock_client_options_init(&o);
  CHECK_EQ(o.size, sizeof o);
  CHECK(DLOCK_CLIENT_OPTIONS_SIZE_0 <= sizeof o);
  /* Never initialised (size 0), or too small: refused, and said why. */
  dlock_client_options z;
  memset(&z, 0, sizeof z);
  z.url = "redis://127.0.0.1:1";
  CHECK_RC(dlock_client_open(&z, &c), DLOCK_EINVAL);
  CHECK(c == NULL);
  CHECK(strstr(dlock_client_open_errmsg(), "dlock_client_options_init") !=
        NULL);
  o.url = "redis://127.0.0.1:1"; /* nothing listens: ECONNECT once accepted */
  o.size = DLOCK_CLIENT_OPTIONS_SIZE_0 - 1;
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_EINVAL);
  CHECK(strstr(dlock_client_open_errmsg(), "at least") != NULL);
  o.size = sizeof o;
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_ECONNECT);
  /* An older caller's struct: init writes no byte past its size, and open
   * reads none (the rest take their defaults). */
  union {
    dlock_client_options o;
    unsigned char b[sizeof(dlock_client_options) + 16];
  } u;
  memset(u.b, 0xAA, sizeof u.b);
  dlock_client_options_init_size(&u.o, DLOCK_CLIENT_OPTIONS_SIZE_0);
  CHECK_EQ(u.o.size, DLOCK_CLIENT_OPTIONS_SIZE_0);
  CHECK_EQ(u.o.connect_timeout_ms, 2000);
  CHECK_EQ(u.o.tls_verify, 1);
  for (size_t i = DLOCK_CLIENT_OPTIONS_SIZE_0; i < sizeof u.b; i++)
    CHECK_EQ(u.b[i], 0xAA);
  u.o.url = "redis://127.0.0.1:1";
  CHECK_RC(dlock_client_open(&u.o, &c), DLOCK_ECONNECT);
  /* A newer caller's struct: its unknown options are zeroed by init and
   * accepted while zero (their default); one set is refused, not
   * ignored. */
  struct {
    dlock_client_options o;
    int64_t future_option_ms;
  } big;
  memset(&big, 0xAA, sizeof big);
  dlock_client_options_init_size(&big.o, sizeof big);
  CHECK_EQ(big.o.size, sizeof big);
  CHECK_EQ(big.future_option_ms, 0);
  big.o.url = "redis://127.0.0.1:1";
  CHECK_RC(dlock_client_open(&big.o, &c), DLOCK_ECONNECT);
  big.future_option_ms = 5;
  CHECK_RC(dlock_client_open(&big.o, &c), DLOCK_EINVAL);
  CHECK(strstr(dlock_client_open_errmsg(), "does not know") != NULL);
  CHECK(c == NULL);
  dlock_client_options_init_size(NULL, sizeof o); /* nothing */
}

static void t_durations(void) {
  static const struct {
    const char *in;
    long long ms;
  } good[] = {{"250ms", 250}, {"30s", 30000},   {"5m", 300000},
              {"1h", 3600000}, {"10", 10000},   {"0", 0},
              {"1.5s", 1500},  {"0.25", 250},   {"0.0001s", 1},
              {"2.5m", 150000}, {"0ms", 0},     {"8784h", 8784LL * 3600000}};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    int64_t ms = -1;
    CHECK_RC(dl_parse_duration(good[i].in, &ms), 0);
    CHECK_EQ(ms, good[i].ms);
  }
  static const char *bad[] = {"",    "s",    "-1s",  "1x",   "1 s", " 1",
                              "1e3", "inf",  "nan",  "0x10", "1.s.", "1..2",
                              "8785h", "99999999999999999999", "1sec", "ms"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int64_t ms = 0;
    if (dl_parse_duration(bad[i], &ms) == 0)
      fprintf(stderr, "    accepted '%s'\n", bad[i]);
    CHECK_EQ(dl_parse_duration(bad[i], &ms), -1);
  }
}

/* Parking: a sleeper wakes when the word changes, whichever comes first,
 * its sleep or the change; it times out when nothing changes. */
typedef struct park_ops {
  int (*wait)(atomic_int *, int, int64_t);
  void (*wake)(atomic_int *);
} park_ops;

typedef struct park_arg {
  const park_ops *ops;
  atomic_int word, asleep;
  int rc;
} park_arg;

static void *park_sleeper(void *p) {
  park_arg *a = p;
  atomic_store(&a->asleep, 1);
  a->rc = a->ops->wait(&a->word, 0, dl_now_ms() + 10000);
  return NULL;
}

static void park_check(const park_ops *ops) {
  atomic_int w = 0;
  int64_t t0 = dl_now_ms();
  CHECK_RC(ops->wait(&w, 0, t0 + 50), DLOCK_ETIMEDOUT);
  CHECK(dl_now_ms() - t0 >= 49);
  atomic_store(&w, 1);
  CHECK_RC(ops->wait(&w, 0, t0 + 10000), 0); /* changed already */
  for (int i = 0; i < 200; i++) {
    park_arg a = {ops, 0, 0, -99};
    pthread_t th;
    pthread_create(&th, NULL, park_sleeper, &a);
    /* Half the rounds change the word at once (maybe before the sleep),
     * half once the sleeper said it was going to sleep. */
    while (i % 2 && !atomic_load(&a.asleep)) sched_yield();
    atomic_store(&a.word, 1);
    ops->wake(&a.word);
    pthread_join(th, NULL);
    CHECK_RC(a.rc, 0);
  }
}

static void t_park(void) {
  static const park_ops cv = {dl_park_wait_cv, dl_park_wake_cv};
  park_check(&cv);
#ifdef __linux__
  static const park_ops futex = {dl_park_wait_futex, dl_park_wake_futex};
  park_check(&futex);
#endif
}

/* dl_resp_format writes what hiredis's formatter writes: argument counts
 * and lengths of every size class, empty and binary arguments, and C
 * strings when no lengths are given. */
static void t_resp_format(void) {
  char big[20000];
  for (size_t i = 0; i < sizeof big; i++) big[i] = (char)(i * 7);
  const char *argv[120];
  size_t lens[120];
  for (int argc = 1; argc <= 120; argc += 7) {
    for (int i = 0; i < argc; i++) {
      argv[i] = big + i;
      lens[i] = (size_t)(i * i * i) % (sizeof big - 128) / (size_t)(1 + i % 5);
      if (i % 11 == 3) lens[i] = 0;
    }
    char *mine = NULL, *theirs = NULL;
    int a = dl_resp_format(&mine, argc, argv, lens);
    int b = redisFormatCommandArgv(&theirs, argc, argv, lens);
    CHECK(a > 0);
    CHECK_EQ(a, b);
    CHECK(memcmp(mine, theirs, (size_t)a) == 0);
    free(mine);
    redisFreeCommand(theirs);
  }
  const char *words[] = {"EVALSHA", "", "k", "0123456789"};
  char *mine = NULL, *theirs = NULL;
  int a = dl_resp_format(&mine, 4, words, NULL);
  int b = redisFormatCommandArgv(&theirs, 4, words, NULL);
  CHECK_EQ(a, b);
  CHECK(a > 0 && memcmp(mine, theirs, (size_t)a) == 0);
  free(mine);
  redisFreeCommand(theirs);
}

/* A server's error as the user reads it: nothing of the script machinery
 * (Redis 7's and Redis 6's forms), never a Lua error's text. */
static void t_error_text(void) {
  static const struct {
    const char *in, *out;
  } cases[] = {
      {"WRONGTYPE k: not a dlock read-write lock: hash",
       "WRONGTYPE k: not a dlock read-write lock: hash"},
      {"WRONGTYPE Operation against a key holding the wrong kind of value "
       "script: 2bb6143013a1a18f813232906fb6dea9bb666934, on "
       "@user_script:200.",
       "WRONGTYPE Operation against a key holding the wrong kind of value"},
      {"ERR Error running script (call to "
       "f_2bb6143013a1a18f813232906fb6dea9bb666934): @user_script:200: "
       "WRONGTYPE Operation against a key holding the wrong kind of value",
       "WRONGTYPE Operation against a key holding the wrong kind of value"},
      {"OOM command not allowed when used memory > 'maxmemory'. script: "
       "f427749a79b67aa08903e343257c58c59c6029c4, on @user_script:46.",
       "OOM command not allowed when used memory > 'maxmemory'."},
      {"NOPERM this user has no permissions to run the 'evalsha' command",
       "NOPERM this user has no permissions to run the 'evalsha' command"},
  };
  char out[512];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    dl_reply_error_text(cases[i].in, out, sizeof out);
    if (strcmp(out, cases[i].out) != 0)
      fprintf(stderr, "    %s\n    -> %s\n", cases[i].in, out);
    CHECK(strcmp(out, cases[i].out) == 0);
  }
  static const char *const lua[] = {
      "ERR user_script:46: attempt to compare number with nil script: "
      "f427749a79b67aa08903e343257c58c59c6029c4, on @user_script:46.",
      "ERR Error running script (call to "
      "f_f427749a79b67aa08903e343257c58c59c6029c4): @user_script:46: "
      "user_script:46: attempt to compare number with nil",
  };
  for (size_t i = 0; i < 2; i++) {
    dl_reply_error_text(lua[i], out, sizeof out);
    CHECK(strstr(out, "script failed") != NULL);
    CHECK(strstr(out, "user_script") == NULL && strstr(out, "nil") == NULL);
  }
}

/* One line of Prometheus text exposition: a comment (# HELP, # TYPE) or a
 * sample NAME[{k="v",...}] VALUE. Returns the sample's value (0 for a
 * comment) and its name and labels; *ok false if it is neither. */
static double prom_line(const char *line, char *name, char *labels, bool *ok) {
  *ok = false;
  name[0] = labels[0] = '\0';
  if (strncmp(line, "# HELP ", 7) == 0 || strncmp(line, "# TYPE ", 7) == 0) {
    *ok = true;
    return 0;
  }
  const char *p = line;
  size_t n = 0;
  if (!(isalpha((unsigned char)*p) || *p == '_' || *p == ':')) return 0;
  while (isalnum((unsigned char)*p) || *p == '_' || *p == ':')
    name[n++] = *p++;
  name[n] = '\0';
  if (*p == '{') {
    const char *q = ++p;
    for (;;) { /* k="v" pairs, comma separated */
      if (!(isalpha((unsigned char)*p) || *p == '_')) return 0;
      while (isalnum((unsigned char)*p) || *p == '_')
        p++;
      if (p[0] != '=' || p[1] != '"') return 0;
      p += 2;
      while (*p && *p != '"')
        p += *p == '\\' && p[1] ? 2 : 1;
      if (*p++ != '"') return 0;
      if (*p == ',') {
        p++;
        continue;
      }
      if (*p != '}') return 0;
      break;
    }
    memcpy(labels, q, (size_t)(p - q));
    labels[p - q] = '\0';
    p++;
  }
  if (*p++ != ' ') return 0;
  char *end;
  double v = strtod(p, &end);
  *ok = end != p && *end == '\0';
  return v;
}

/* dlock_metrics_format: valid text exposition, cumulative buckets,
 * +Inf == _count, snprintf's contract. */
static void t_metrics_format(void) {
  dlock_metrics m = {.acquisitions = 7,
                     .contended_acquisitions = 3,
                     .lost_expired = 1,
                     .lost_taken = 2,
                     .renewals = 11,
                     .failed_renewals = 4,
                     .reconnects = 5};
  for (int i = 0; i < DLOCK_METRICS_BUCKETS; i++) {
    m.wait_seconds.bucket[i] = i < 3 ? 2 : 7;
    m.hold_seconds.bucket[i] = (uint64_t)i / 2;
  }
  m.wait_seconds.count = 7;
  m.wait_seconds.sum = 1.25;
  m.hold_seconds.count = 4;
  m.hold_seconds.sum = 30.5;
  const char *labels = "service=\"api\"";
  int n = dlock_metrics_format(&m, "svc_dlock", labels, NULL, 0);
  CHECK(n > 0);
  char *text = malloc((size_t)n + 1);
  CHECK(text != NULL);
  CHECK_EQ(dlock_metrics_format(&m, "svc_dlock", labels, text, (size_t)n + 1),
           n);
  CHECK_EQ(strlen(text), (size_t)n);
  /* Truncated as snprintf does. */
  char small[16];
  CHECK_EQ(dlock_metrics_format(&m, "svc_dlock", labels, small, sizeof small),
           n);
  CHECK(strncmp(small, text, sizeof small - 1) == 0 && small[15] == '\0');
  CHECK_RC(dlock_metrics_format(&m, "9bad", NULL, NULL, 0), DLOCK_EINVAL);
  CHECK_RC(dlock_metrics_format(&m, "a-b", NULL, NULL, 0), DLOCK_EINVAL);
  CHECK_RC(dlock_metrics_format(NULL, NULL, NULL, NULL, 0), DLOCK_EINVAL);
  CHECK_RC(dlock_metrics_format(&m, NULL, NULL, NULL, 5), DLOCK_EINVAL);
  int samples = 0, buckets[2] = {0, 0};
  double last[2] = {-1, -1}, inf[2] = {-1, -1}, count[2] = {-2, -2};
  double sum[2] = {-1, -1}, acq = -1, lost_taken = -1;
  char name[128], lab[256];
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    bool ok;
    double v = prom_line(line, name, lab, &ok);
    if (!ok) fprintf(stderr, "    not a sample: %s\n", line);
    CHECK(ok);
    if (line[0] == '#') continue;
    samples++;
    CHECK(strncmp(name, "svc_dlock_", 10) == 0);
    CHECK(strncmp(lab, labels, strlen(labels)) == 0);
    int h = strstr(name, "_wait_seconds")   ? 0
            : strstr(name, "_hold_seconds") ? 1
                                            : -1;
    if (strcmp(name, "svc_dlock_acquisitions_total") == 0) acq = v;
    if (strstr(lab, "cause=\"taken\"")) lost_taken = v;
    if (h < 0) {
      /* a counter: _total */
      CHECK(strcmp(name + strlen(name) - 6, "_total") == 0);
    } else if (strstr(name, "_bucket")) {
      CHECK(strstr(lab, ",le=\"") != NULL);
      CHECK(v >= last[h]); /* cumulative */
      last[h] = v;
      buckets[h]++;
      if (strstr(lab, "le=\"+Inf\"")) inf[h] = v;
    } else if (strstr(name, "_sum")) {
      sum[h] = v;
    } else {
      CHECK(strstr(name, "_count") != NULL);
      count[h] = v;
    }
  }
  CHECK_EQ(samples, 7 + 2 * (DLOCK_METRICS_BUCKETS + 2));
  CHECK_EQ(buckets[0], DLOCK_METRICS_BUCKETS);
  CHECK_EQ(buckets[1], DLOCK_METRICS_BUCKETS);
  CHECK(inf[0] == count[0] && count[0] == 7);
  CHECK(inf[1] == count[1] && count[1] == 4);
  CHECK(sum[0] == 1.25 && sum[1] == 30.5);
  CHECK(acq == 7 && lost_taken == 2);
  free(text);
  /* No labels: bare names, and "le" alone in the buckets' braces. */
  char bare[8192];
  n = dlock_metrics_format(&m, NULL, NULL, bare, sizeof bare);
  CHECK(n > 0 && (size_t)n < sizeof bare);
  CHECK(strstr(bare, "\ndlock_acquisitions_total 7\n") != NULL);
  CHECK(strstr(bare, "\ndlock_wait_seconds_bucket{le=\"0.001\"} 2\n") != NULL);
  CHECK(strstr(bare, "\ndlock_hold_seconds_bucket{le=\"+Inf\"} 4\n") != NULL);
  CHECK(strstr(bare, "\ndlock_lost_total{cause=\"expired\"} 1\n") != NULL);
}

#ifdef DLOCK_TEST_HAVE_ETCD
#include "etcd/pbjson.h"
#include "etcd_min.pb-c.h"

/* The gateway's answer a as a TxnResponse: 0 read (*out), or -1. */
static int txn_of(const char *a, Etcdserverpb__TxnResponse **out) {
  json_object *o = json_tokener_parse(a);
  ProtobufCMessage *m = NULL;
  int rc =
      o ? dl_pb_from_json_answer(&etcdserverpb__txn_response__descriptor, o, &m)
        : -2;
  json_object_put(o);
  *out = (Etcdserverpb__TxnResponse *)m;
  return rc;
}

/* pbjson.c reads the gateway's answers strictly where a misread would
 * change what an answer says: an integer that is not one whole number in
 * range (a garbled revision read as 0 would mean "none"), two members of
 * one oneof (the second overwrote the first, which leaked); a field it
 * does not know is skipped (a newer etcd's). */
static void t_pbjson_answers(void) {
  Etcdserverpb__TxnResponse *t;
  CHECK_RC(txn_of("{\"header\":{\"revision\":\"12\"},\"succeeded\":true,"
                  "\"responses\":[{\"response_range\":{\"kvs\":[{"
                  "\"create_revision\":\"9223372036854775807\"}],"
                  "\"count\":1}}],\"new_field\":{\"x\":1}}",
                  &t),
           0);
  CHECK(t != NULL && t->header && t->header->revision == 12 && t->succeeded);
  CHECK(t->n_responses == 1 &&
        t->responses[0]->response_case ==
            ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE);
  CHECK(t->responses[0]->response_range->n_kvs == 1 &&
        t->responses[0]->response_range->kvs[0]->create_revision == INT64_MAX);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  CHECK_RC(txn_of("{\"header\":{\"revision\":7}}", &t), 0); /* a number */
  CHECK(t->header->revision == 7);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  const char *bad[] = {
      "{\"header\":{\"revision\":\"12x\"}}",
      "{\"header\":{\"revision\":\"\"}}",
      "{\"header\":{\"revision\":\"junk\"}}",
      "{\"header\":{\"revision\":\"99999999999999999999\"}}",
      "{\"header\":{\"revision\":1.5}}",
      "{\"header\":{\"revision\":true}}",
      "{\"header\":{\"member_id\":\"-1\"}}", /* a uint64 */
      "{\"responses\":[{\"response_range\":{\"count\":\"1\"},"
      "\"response_put\":{}}]}",
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    CHECK_RC(txn_of(bad[i], &t), -1);
    CHECK(t == NULL);
  }
}
#define ETCD_UNIT_TESTS , T_BARE(t_pbjson_answers)
#else
#define ETCD_UNIT_TESTS
#endif

/* A wait riding out a server's loss: pauses of 20 ms doubling to 200, the
 * last cut to the deadline; without a deadline, over once
 * DL_RIDE_TIMEOUTS command timeouts have passed since the first. */
static void t_ride_pauses(void) {
  dl_ride r = {0};
  int64_t want[] = {20, 40, 80, 160, 200, 200, 200};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    CHECK_EQ(dl_ride_pause_ms(&r, INT64_MAX, 5000), want[i]);
  CHECK(r.since > 0 && r.since <= dl_now_ms());
  /* Time, not the count of pauses: 10 command timeouts of 50 ms on. */
  r.since = dl_now_ms() - DL_RIDE_TIMEOUTS * 50 + 1000;
  CHECK_EQ(dl_ride_pause_ms(&r, INT64_MAX, 50), 200);
  r.since = dl_now_ms() - DL_RIDE_TIMEOUTS * 50;
  CHECK_EQ(dl_ride_pause_ms(&r, INT64_MAX, 50), 0);
  /* An answer: the next ride starts afresh, from its own first pause. */
  dl_ride_answered(&r);
  CHECK_EQ(r.n, 0);
  CHECK_EQ(dl_ride_pause_ms(&r, INT64_MAX, 5000), 20);
  /* A deadline: the last pause cut to it, then none. */
  dl_ride_answered(&r);
  int64_t p = dl_ride_pause_ms(&r, dl_now_ms() + 5, 50);
  CHECK(p > 0 && p <= 5);
  CHECK_EQ(dl_ride_pause_ms(&r, dl_now_ms() - 1, 50), 0);
}

TH_MAIN(T_BARE(t_metrics_format), T_BARE(t_ride_pauses), T_BARE(t_resp_format),
        T_BARE(t_park), T_BARE(t_error_text), T_BARE(t_durations),
        T_BARE(t_url_redis), T_BARE(t_url_bad), T_BARE(t_url_twice),
        T_BARE(t_url_redact), T_BARE(t_errors), T_BARE(t_bad_open),
        T_BARE(t_options_size) ETCD_UNIT_TESTS)
