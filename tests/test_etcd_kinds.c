/* test_etcd_kinds.c: the etcd backend's count-down latch and queue on
 * their keys (docs/WIRE.md), looked at and spoiled with etcdctl: foreign
 * keys refused and left as they are, racing consumers, reliable takes
 * (the reliable take's consumers). Their common behaviour is the
 * conformance suite's. */
#include "harness.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#ifdef DLOCK_TEST_HAVE_ETCD
/* etcdctl's output for args, its trailing newline cut. */
static const char *ctl(const th_etcd *s, const char *args, char *buf,
                       size_t len) {
  th_etcd_ctl(s, args, buf, len);
  size_t n = strlen(buf);
  while (n > 0 && buf[n - 1] == '\n')
    buf[--n] = '\0';
  return buf;
}

/* The latch is its count in decimal at NAME, gone at zero; a key there
 * that holds no number, or a key under NAME/, is refused and kept. */
static void t_etcd_latch_keys(void) {
  TH_ETCD_SETUP(s);
  dlock_client *c = th_etcd_client(&s, 0);
  CHECK(c != NULL);
  dlock_latch *l;
  CHECK_RC(dlock_latch_new(c, "l", &l), 0);
  CHECK_EQ(dlock_latch_try_set_count(l, 3), 1);
  char buf[512];
  CHECK(strcmp(ctl(&s, "get l", buf, sizeof buf), "l\n3") == 0);
  CHECK_RC(dlock_latch_count_down(l), 0);
  CHECK(strcmp(ctl(&s, "get l", buf, sizeof buf), "l\n2") == 0);
  CHECK_RC(dlock_latch_count_down(l), 0);
  CHECK_RC(dlock_latch_count_down(l), 0);
  CHECK(strcmp(ctl(&s, "get l", buf, sizeof buf), "") == 0);
  CHECK_RC(dlock_latch_count_down(l), DLOCK_ERANGE);
  dlock_latch_free(l);
  /* Foreign: a value that is no number, a key under the name. */
  const char *names[] = {"w", "m"};
  ctl(&s, "put w not-a-number", buf, sizeof buf);
  ctl(&s, "put m/x 1", buf, sizeof buf);
  for (int i = 0; i < 2; i++) {
    CHECK_RC(dlock_latch_new(c, names[i], &l), 0);
    int64_t n = 0;
    CHECK_RC(dlock_latch_try_set_count(l, 2), DLOCK_EWRONGTYPE);
    CHECK_RC(dlock_latch_count_down(l), DLOCK_EWRONGTYPE);
    CHECK_RC(dlock_latch_get_count(l, &n), DLOCK_EWRONGTYPE);
    CHECK_RC(dlock_latch_try_await(l, 100), DLOCK_EWRONGTYPE);
    fprintf(stderr, "    %s: %s\n", names[i], dlock_client_errmsg(c));
    dlock_latch_free(l);
  }
  CHECK(strcmp(ctl(&s, "get w", buf, sizeof buf), "w\nnot-a-number") == 0);
  CHECK(strcmp(ctl(&s, "get --prefix m", buf, sizeof buf), "m/x\n1") == 0);
  dlock_client_close(c);
  th_etcd_stop(&s);
}

typedef struct awaiter {
  dlock_latch *l;
  int rc;
  int64_t at;
} awaiter;

static void *await_latch(void *arg) {
  awaiter *w = arg;
  w->rc = dlock_latch_try_await(w->l, 15000);
  w->at = th_now_ms();
  return NULL;
}

/* A wait that another of the client's waits wakes (a delayed offer's kick
 * of the client's transfer) is not over: it ends at the count-down. */
static void t_etcd_latch_woken_early(void) {
  TH_ETCD_SETUP(s);
  dlock_client *a = th_etcd_client(&s, 0), *c = th_etcd_client(&s, 0);
  CHECK(a && c);
  dlock_latch *la;
  awaiter w = {.rc = 1};
  CHECK_RC(dlock_latch_new(a, "kl", &la), 0);
  CHECK_RC(dlock_latch_new(c, "kl", &w.l), 0);
  CHECK_EQ(dlock_latch_try_set_count(la, 1), 1);
  pthread_t t;
  pthread_create(&t, NULL, await_latch, &w);
  dlock_queue *q;
  CHECK_RC(dlock_queue_new_delayed(c, "kq", &q), 0);
  for (int i = 0; i < 5; i++) /* each kicks c's transfer */
    CHECK_RC(dlock_queue_offer_delayed(q, 60000, "x", 1), 0);
  th_sleep_ms(300); /* the waiter would have ended by now */
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_latch_count_down(la), 0);
  pthread_join(t, NULL);
  CHECK_RC(w.rc, 0);
  CHECK(w.at >= t0);
  dlock_queue_free(q);
  dlock_latch_free(la);
  dlock_latch_free(w.l);
  dlock_client_close(a);
  dlock_client_close(c);
  th_etcd_stop(&s);
}

/* The values are Go's Queue's keys, Q/<UnixNano> (at the head:
 * Q/0<UnixNano>), each holding the bare bytes; the delayed ones are
 * __dlock_delayed/Q/<due ms, 16 digits>-<16 hex>. */
static void t_etcd_queue_keys(void) {
  TH_ETCD_SETUP(s);
  dlock_client *c = th_etcd_client(&s, 0);
  CHECK(c != NULL);
  dlock_queue *q;
  CHECK_RC(dlock_queue_new(c, "q", &q), 0);
  CHECK_RC(dlock_queue_offer(q, "a\0b", 3), 0);
  CHECK_RC(dlock_queue_offer_first(q, "z", 1), 0);
  char buf[1024];
  ctl(&s, "get --prefix q/ --keys-only", buf, sizeof buf);
  fprintf(stderr, "    keys: %s\n", buf);
  char k1[64] = "", k2[64] = "";
  CHECK(sscanf(buf, "%63s %63s", k1, k2) == 2);
  /* Sorted by key: Q/0... first. */
  CHECK(strlen(k1) == 22 && strncmp(k1, "q/0", 3) == 0 &&
        strspn(k1 + 2, "0123456789") == 20);
  CHECK(strlen(k2) == 21 && strspn(k2 + 2, "0123456789") == 19 && k2[2] != '0');
  char args[128];
  snprintf(args, sizeof args, "get %s --print-value-only", k2);
  ctl(&s, args, buf, sizeof buf);
  CHECK(memcmp(buf, "a\0b", 3) == 0);
  CHECK_RC(dlock_queue_offer_delayed(q, 60000, "d", 1), 0);
  ctl(&s, "get --prefix __dlock_delayed/ --keys-only", buf, sizeof buf);
  fprintf(stderr, "    delayed: %s\n", buf);
  CHECK(strncmp(buf, "__dlock_delayed/q/", 18) == 0 && strlen(buf) == 18 + 33 &&
        strspn(buf + 18, "0123456789") == 16 && buf[34] == '-' &&
        strspn(buf + 35, "0123456789abcdef") == 16);
  int64_t n = 0;
  CHECK_RC(dlock_queue_delayed_size(q, &n), 0);
  CHECK_EQ(n, 1);
  dlock_queue_free(q);
  dlock_client_close(c);
  th_etcd_stop(&s);
}

/* A key at the queue's name, beside its values, or under Q/ of another
 * shape (a lock's: Q/<lease in hex>): every call refuses, changing
 * nothing. */
static void t_etcd_queue_foreign(void) {
  TH_ETCD_SETUP(s);
  dlock_client *c = th_etcd_client(&s, 0);
  CHECK(c != NULL);
  char buf[1024];
  const char *puts[] = {"put f1 x", "put f2/lock x", "put f3/694d7 x"};
  const char *names[] = {"f1", "f2", "f3"};
  for (int i = 0; i < 3; i++) {
    ctl(&s, puts[i], buf, sizeof buf);
    dlock_queue *q;
    CHECK_RC(dlock_queue_new(c, names[i], &q), 0);
    void *v = NULL;
    int64_t n = 0;
    if (i < 2) { /* f3's lock key is only seen when it would be taken */
      CHECK_RC(dlock_queue_offer(q, "a", 1), DLOCK_EWRONGTYPE);
      CHECK_RC(dlock_queue_offer_first(q, "a", 1), DLOCK_EWRONGTYPE);
      CHECK_RC(dlock_queue_offer_delayed(q, 10, "a", 1), DLOCK_EWRONGTYPE);
      CHECK_RC(dlock_queue_size(q, &n), DLOCK_EWRONGTYPE);
    }
    CHECK_RC(dlock_queue_poll(q, 0, &v, NULL), DLOCK_EWRONGTYPE);
    CHECK_RC(dlock_queue_poll_last(q, 100, &v, NULL), DLOCK_EWRONGTYPE);
    fprintf(stderr, "    %s: %s\n", names[i], dlock_client_errmsg(c));
    char args[64];
    snprintf(args, sizeof args, "get --prefix %s", names[i]);
    ctl(&s, args, buf, sizeof buf);
    CHECK(strcmp(strchr(buf, '\n'), "\nx") == 0 &&
          strncmp(buf, puts[i] + 4, strlen(names[i])) == 0);
    CHECK(strstr(ctl(&s, "get --prefix __dlock --keys-only", buf, sizeof buf),
                 names[i]) == NULL);
    dlock_queue_free(q);
  }
  dlock_client_close(c);
  th_etcd_stop(&s);
}

static bool took(dlock_queue *q, int64_t wait_ms, const char *want) {
  void *v = NULL;
  size_t len = 0;
  int rc = dlock_queue_poll_reliable(q, wait_ms, &v, &len);
  bool ok = rc == 0 && len == strlen(want) && memcmp(v, want, len) == 0;
  if (!ok)
    fprintf(stderr, "    reliable take: %s \"%.*s\", expected \"%s\"\n",
            dlock_err_name(rc), rc == 0 ? (int)len : 0,
            rc == 0 ? (char *)v : "", want);
  dlock_queue_value_free(v);
  return ok;
}

/* The reliable take: the value also goes to the consumer's keys
 * (__dlock_processing/Q/<id>/<n>) until its ack; the consumer's lease
 * (__dlock_consumers/Q/<id>, on a lease the watchdog keeps alive) outlives
 * its TTL while the handle lives; a freed handle's values go back to the
 * head once its lease ended, a closed client's at once. */
static void t_etcd_queue_reliable(void) {
  TH_ETCD_SETUP(s);
  dlock_client *c = th_etcd_client(&s, 2000), *o = th_etcd_client(&s, 2000);
  CHECK(c && o);
  dlock_queue *q, *q2, *other;
  CHECK_RC(dlock_queue_new(c, "rq", &q), 0);
  CHECK_RC(dlock_queue_new(c, "rq", &q2), 0);
  CHECK_RC(dlock_queue_new(o, "rq", &other), 0);
  CHECK_RC(dlock_queue_offer(q, "a", 1), 0);
  CHECK_RC(dlock_queue_offer(q, "b", 1), 0);
  CHECK_RC(dlock_queue_offer(q, "c", 1), 0);
  CHECK_RC(dlock_queue_ack(q, "a", 1), DLOCK_ENOTOWNER); /* took nothing */
  CHECK(took(q, 0, "a"));
  CHECK(took(q, 0, "b"));
  char buf[1024];
  ctl(&s, "get --prefix __dlock_ --keys-only", buf, sizeof buf);
  fprintf(stderr, "    keys: %s\n", buf);
  CHECK(strncmp(buf, "__dlock_consumers/rq/", 21) == 0 &&
        strspn(buf + 21, "0123456789abcdef") == 32);
  CHECK(strstr(buf, "__dlock_processing/rq/") != NULL);
  CHECK_RC(dlock_queue_ack(q2, "a", 1), DLOCK_ENOTOWNER); /* another handle */
  CHECK_RC(dlock_queue_ack(q, "a", 1), 0);
  CHECK_RC(dlock_queue_ack(q, "a", 1), DLOCK_ENOTOWNER); /* once */
  /* Past its lease's TTL: the watchdog keeps the consumer alive, so
   * another consumer's take sends nothing of ours back. */
  th_sleep_ms(3500);
  CHECK(took(other, 0, "c"));
  void *v = NULL;
  CHECK_RC(dlock_queue_poll_reliable(other, 0, &v, NULL), DLOCK_EBUSY);
  /* A freed consumer's values go back to the head after its lease. */
  dlock_queue_free(q);
  int64_t t0 = th_now_ms();
  bool back = false;
  while (!back && th_now_ms() - t0 < 10000) {
    void *got = NULL;
    size_t len = 0;
    int rc = dlock_queue_poll_reliable(other, 200, &got, &len);
    back = rc == 0 && len == 1 && memcmp(got, "b", 1) == 0;
    CHECK(rc == 0 ? back : rc == DLOCK_EBUSY);
    dlock_queue_value_free(got);
  }
  CHECK(back);
  fprintf(stderr, "    a freed consumer's value back after %lld ms\n",
          (long long)(th_now_ms() - t0));
  CHECK_RC(dlock_queue_ack(other, "b", 1), 0);
  /* A closed client's: at once. */
  CHECK_RC(dlock_queue_offer(q2, "d", 1), 0);
  CHECK(took(q2, 0, "d"));
  dlock_queue_free(q2);
  dlock_client_close(c);
  CHECK(took(other, 0, "d"));
  CHECK_RC(dlock_queue_ack(other, "d", 1), 0);
  CHECK_RC(dlock_queue_ack(other, "c", 1), 0);
  CHECK(strstr(ctl(&s, "get --prefix __dlock_processing --keys-only", buf,
                   sizeof buf),
               "rq") == NULL);
  /* A key of another type: nothing changed. */
  ctl(&s, "put rq x", buf, sizeof buf);
  CHECK_RC(dlock_queue_poll_reliable(other, 0, &v, NULL), DLOCK_EWRONGTYPE);
  CHECK(strcmp(ctl(&s, "get rq", buf, sizeof buf), "rq\nx") == 0);
  dlock_queue_free(other);
  dlock_client_close(o);
  th_etcd_stop(&s);
}

/* A delayed handle's transfer (client c's thread) hears a delayed value
 * another client offers (a watch on the delayed values), and moves it
 * when due, so that a plain consumer that never moves gets it then, not
 * at the transfer's next idle round (1 s). */
static void t_etcd_queue_transfer(void) {
  TH_ETCD_SETUP(s);
  dlock_client *a = th_etcd_client(&s, 0), *b = th_etcd_client(&s, 0),
               *c = th_etcd_client(&s, 0);
  CHECK(a && b && c);
  dlock_queue *qa, *qb, *qc;
  CHECK_RC(dlock_queue_new(a, "tq", &qa), 0);
  CHECK_RC(dlock_queue_new(b, "tq", &qb), 0);
  long long w0 = th_etcd_started(&s, "Watch");
  CHECK_RC(dlock_queue_new_delayed(c, "tq", &qc), 0);
  /* c's transfer sleeps in its watch (nothing due, nothing delayed). */
  int64_t t1 = th_now_ms();
  while (th_etcd_started(&s, "Watch") <= w0 && th_now_ms() - t1 < 5000)
    th_sleep_ms(5);
  CHECK(th_etcd_started(&s, "Watch") > w0);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_queue_offer_delayed(qa, 100, "t", 1), 0);
  void *v = NULL;
  size_t len = 0;
  CHECK_RC(dlock_queue_poll(qb, 3000, &v, &len), 0);
  int64_t took = th_now_ms() - t0;
  fprintf(stderr,
          "    a value delayed 100 ms moved by another client's "
          "transfer after %lld ms\n",
          (long long)took);
  CHECK(len == 1 && memcmp(v, "t", 1) == 0);
  CHECK(took >= 95 && took <= 400);
  dlock_queue_value_free(v);
  dlock_queue_free(qa);
  dlock_queue_free(qb);
  dlock_queue_free(qc);
  dlock_client_close(a);
  dlock_client_close(b);
  dlock_client_close(c);
  th_etcd_stop(&s);
}

typedef struct poller {
  dlock_queue *q;
  int rc;
  char got[8];
} poller;

static void *poll_queue(void *arg) {
  poller *p = arg;
  void *v = NULL;
  size_t len = 0;
  p->rc = dlock_queue_poll(p->q, 15000, &v, &len);
  if (p->rc == 0) snprintf(p->got, sizeof p->got, "%.*s", (int)len, (char *)v);
  dlock_queue_value_free(v);
  return NULL;
}

/* The server down (600 ms) and restarted under a waiting take and a
 * waiting latch: both ride it out (their calls fail while it is down) and
 * end as they would have: the value offered after, the count-down after. */
static void t_etcd_waits_ride_out(void) {
  TH_ETCD_SETUP(s);
  dlock_client *a = th_etcd_client(&s, 0), *b = th_etcd_client(&s, 0);
  CHECK(a && b);
  dlock_latch *la;
  awaiter w = {.rc = 1};
  CHECK_RC(dlock_latch_new(a, "rl", &la), 0);
  CHECK_RC(dlock_latch_new(b, "rl", &w.l), 0);
  CHECK_EQ(dlock_latch_try_set_count(la, 1), 1);
  poller p = {.rc = 1};
  dlock_queue *qa;
  CHECK_RC(dlock_queue_new(a, "rw", &qa), 0);
  CHECK_RC(dlock_queue_new(b, "rw", &p.q), 0);
  long long w0 = th_etcd_started(&s, "Watch");
  pthread_t t1, t2;
  pthread_create(&t1, NULL, await_latch, &w);
  pthread_create(&t2, NULL, poll_queue, &p);
  int64_t t0 = th_now_ms();
  while (th_etcd_started(&s, "Watch") < w0 + 2 && th_now_ms() - t0 < 5000)
    th_sleep_ms(5);
  CHECK(th_etcd_started(&s, "Watch") >= w0 + 2); /* both wait */
  th_etcd_kill(&s, SIGKILL); /* down for 600 ms: their calls fail */
  th_sleep_ms(600);
  CHECK_RC(th_etcd_restart(&s), 0);
  CHECK_RC(dlock_queue_offer(qa, "r", 1), 0);
  CHECK_RC(dlock_latch_count_down(la), 0);
  pthread_join(t1, NULL);
  pthread_join(t2, NULL);
  CHECK_RC(w.rc, 0);
  CHECK_RC(p.rc, 0);
  CHECK(strcmp(p.got, "r") == 0);
  dlock_queue_free(qa);
  dlock_queue_free(p.q);
  dlock_latch_free(la);
  dlock_latch_free(w.l);
  dlock_client_close(a);
  dlock_client_close(b);
  th_etcd_stop(&s);
}

/* Consumers racing: each value to exactly one of them. */
#define RACE_N 60
typedef struct racer {
  dlock_queue *q;
  int got[RACE_N];
  int n;
} racer;

static void *race(void *arg) {
  racer *r = arg;
  void *v;
  size_t len;
  while (dlock_queue_poll(r->q, 0, &v, &len) == 0) {
    int i = atoi(v);
    if (i >= 0 && i < RACE_N) r->got[r->n++] = i;
    dlock_queue_value_free(v);
  }
  return NULL;
}

static void t_etcd_queue_race(void) {
  TH_ETCD_SETUP(s);
  dlock_client *c[3] = {th_etcd_client(&s, 0), th_etcd_client(&s, 0),
                        th_etcd_client(&s, 0)};
  CHECK(c[0] && c[1] && c[2]);
  racer r[3] = {{0}};
  for (int i = 0; i < 3; i++)
    CHECK_RC(dlock_queue_new(c[i], "race", &r[i].q), 0);
  for (int i = 0; i < RACE_N; i++) {
    char v[16];
    snprintf(v, sizeof v, "%d", i);
    CHECK_RC(dlock_queue_offer(r[0].q, v, strlen(v)), 0);
  }
  pthread_t t[3];
  for (int i = 0; i < 3; i++)
    pthread_create(&t[i], NULL, race, &r[i]);
  for (int i = 0; i < 3; i++)
    pthread_join(t[i], NULL);
  int seen[RACE_N] = {0}, total = 0;
  for (int i = 0; i < 3; i++) {
    for (int k = 0; k < r[i].n; k++)
      seen[r[i].got[k]]++;
    total += r[i].n;
    fprintf(stderr, "    consumer %d took %d\n", i, r[i].n);
  }
  CHECK_EQ(total, RACE_N);
  for (int i = 0; i < RACE_N; i++)
    CHECK_EQ(seen[i], 1);
  for (int i = 0; i < 3; i++) {
    dlock_queue_free(r[i].q);
    dlock_client_close(c[i]);
  }
  th_etcd_stop(&s);
}

/* A consumer taking (a wait each) until its client shuts down. */
typedef struct taker {
  dlock_queue *q;
  int got[RACE_N];
  int n, rc;
  atomic_int *taken; /* the consumers' count so far */
} taker;

static void *take_all(void *arg) {
  taker *t = arg;
  void *v;
  size_t len;
  while ((t->rc = dlock_queue_poll(t->q, 10000, &v, &len)) == 0) {
    int i = atoi(v);
    if (i >= 0 && i < RACE_N && t->n < RACE_N) t->got[t->n++] = i;
    dlock_queue_value_free(v);
    atomic_fetch_add(t->taken, 1);
  }
  return NULL;
}

/* A blocking client shut down from another thread while its consumers'
 * takes are in flight: each take is answered before its poll returns,
 * so every value is a consumer's or still in the queue, once, and the
 * consumers then get DLOCK_ECLOSED. */
static void t_etcd_queue_shutdown(void) {
  TH_ETCD_SETUP(s);
  dlock_client *c = th_etcd_client(&s, 0), *cb = th_etcd_client(&s, 0);
  CHECK(c && cb);
  dlock_queue *qb;
  CHECK_RC(dlock_queue_new(cb, "shut", &qb), 0);
  for (int i = 0; i < RACE_N; i++) {
    char v[16];
    snprintf(v, sizeof v, "%d", i);
    CHECK_RC(dlock_queue_offer(qb, v, strlen(v)), 0);
  }
  taker t[2] = {{0}};
  pthread_t th[2];
  atomic_int taken_so_far = 0;
  for (int i = 0; i < 2; i++) {
    t[i].taken = &taken_so_far;
    CHECK_RC(dlock_queue_new(c, "shut", &t[i].q), 0);
    pthread_create(&th[i], NULL, take_all, &t[i]);
  }
  /* A few values taken: the takes go on as it shuts down. */
  for (int64_t end = th_now_ms() + th_soon(5000) * th_slowdown();
       atomic_load(&taken_so_far) < 4 && th_now_ms() < end;)
    th_sleep_ms(1);
  dlock_client_shutdown(c);
  int seen[RACE_N] = {0}, taken = 0, left = 0;
  for (int i = 0; i < 2; i++) {
    pthread_join(th[i], NULL);
    CHECK_RC(t[i].rc, DLOCK_ECLOSED);
    for (int k = 0; k < t[i].n; k++)
      seen[t[i].got[k]]++;
    taken += t[i].n;
    dlock_queue_free(t[i].q);
  }
  dlock_client_close(c);
  void *v;
  size_t len;
  while (dlock_queue_poll(qb, 0, &v, &len) == 0) {
    int i = atoi(v);
    if (i >= 0 && i < RACE_N) seen[i]++;
    left++;
    dlock_queue_value_free(v);
  }
  fprintf(stderr, "    %d taken before the shutdown, %d left\n", taken, left);
  CHECK(taken > 0 && left > 0);
  for (int i = 0; i < RACE_N; i++)
    CHECK_EQ(seen[i], 1);
  dlock_queue_free(qb);
  dlock_client_close(cb);
  th_etcd_stop(&s);
}

TH_MAIN(T_BARE(t_etcd_latch_keys), T_BARE(t_etcd_latch_woken_early),
        T_BARE(t_etcd_queue_keys), T_BARE(t_etcd_queue_foreign),
        T_BARE(t_etcd_queue_reliable), T_BARE(t_etcd_queue_transfer),
        T_BARE(t_etcd_waits_ride_out), T_BARE(t_etcd_queue_race),
        T_BARE(t_etcd_queue_shutdown))
#else
static void t_skipped(void) {
  fprintf(stderr, "    skipped: built without libcurl and json-c\n");
}
TH_MAIN(T_BARE(t_skipped))
#endif
