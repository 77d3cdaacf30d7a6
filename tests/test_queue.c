/* test_queue.c: the blocking queue and deque against a real server: order
 * at both ends, raw bytes, waits woken by an offer without polling, a
 * producer that only RPUSHes (Redisson's offer), BLPOP reading dlock's
 * offers (Redisson's take), many producer processes and consumer threads
 * (each value delivered once), a key of another type. */
#include "harness.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* RedissonDelayedQueue.offerAsync: KEYS Q, timeout zset, delay list,
 * channel; ARGV dueMs, randomId, value. */
static const char *REDISSON_DELAY_OFFER =
    "local value = struct.pack('Bc0Lc0', string.len(ARGV[2]), ARGV[2], "
    "string.len(ARGV[3]), ARGV[3]);"
    "redis.call('zadd', KEYS[2], ARGV[1], value);"
    "redis.call('rpush', KEYS[3], value);"
    "local v = redis.call('zrange', KEYS[2], 0, 0);"
    "if v[1] == value then "
    "redis.call('publish', KEYS[4], ARGV[1]);"
    "end;";
/* RedissonDelayedQueue's transfer (pushTaskAsync): KEYS Q, timeout zset,
 * delay list; ARGV now ms, 100. */
static const char *REDISSON_DELAY_TRANSFER =
    "local expiredValues = redis.call('zrangebyscore', KEYS[2], 0, ARGV[1], "
    "'limit', 0, ARGV[2]);"
    "if #expiredValues > 0 then "
    "for i, v in ipairs(expiredValues) do "
    "local randomId, value = struct.unpack('Bc0Lc0', v);"
    "redis.call('rpush', KEYS[1], value);"
    "redis.call('lrem', KEYS[3], 1, v);"
    "end;"
    "redis.call('zrem', KEYS[2], unpack(expiredValues));"
    "end;"
    "local v = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES');"
    "if v[1] ~= nil then "
    "return v[2];"
    "end "
    "return nil;";

/* The server's clock, epoch ms. */
static long long server_ms(th_redis *srv) {
  redisReply *r = th_cmd(srv, "TIME");
  long long ms = -1;
  if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
    ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
  if (r) freeReplyObject(r);
  return ms;
}

/* Polls q once and checks the value is `want` (a C string). */
#define CHECK_POLL(q, last, want)                                              \
  do {                                                                         \
    void *v_ = NULL;                                                           \
    size_t n_ = 0;                                                             \
    CHECK_RC(last ? dlock_queue_poll_last(q, 0, &v_, &n_)                      \
                  : dlock_queue_poll(q, 0, &v_, &n_),                          \
             0);                                                               \
    CHECK(v_ != NULL);                                                         \
    CHECK_EQ(n_, strlen(want));                                                \
    CHECK(memcmp(v_, want, n_) == 0 && ((char *)v_)[n_] == '\0');              \
    dlock_queue_value_free(v_);                                                \
  } while (0)

static void t_queue_basics(void) {
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_queue *q;
  int64_t n = -1;
  CHECK_RC(dlock_queue_new(c, "q:basic", &q), 0);
  CHECK_RC(dlock_queue_size(q, &n), 0);
  CHECK_EQ(n, 0);
  CHECK_RC(dlock_queue_offer(q, "b", 1), 0);
  CHECK_RC(dlock_queue_offer(q, "c", 1), 0);
  CHECK_RC(dlock_queue_offer_first(q, "a", 1), 0);
  CHECK_RC(dlock_queue_offer(q, "d", 1), 0);
  CHECK_RC(dlock_queue_size(q, &n), 0);
  CHECK_EQ(n, 4);
  /* The list Redisson reads: values as their bare bytes, head first. */
  redisReply *r = th_cmd(&th_srv, "LRANGE q:basic 0 -1");
  CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 4);
  CHECK(strcmp(r->element[0]->str, "a") == 0);
  CHECK(strcmp(r->element[3]->str, "d") == 0);
  freeReplyObject(r);
  CHECK_POLL(q, false, "a");
  CHECK_POLL(q, true, "d");
  CHECK_POLL(q, false, "b");
  CHECK_POLL(q, false, "c");
  /* Empty: DLOCK_EBUSY at once, and after a wait. */
  void *v = (void *)1;
  size_t len = 7;
  CHECK_RC(dlock_queue_poll(q, 0, &v, &len), DLOCK_EBUSY);
  CHECK(v == NULL && len == 0);
  CHECK(strstr(dlock_client_errmsg(c), "q:basic") != NULL);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_queue_poll_last(q, 150, &v, NULL), DLOCK_EBUSY);
  CHECK(th_now_ms() - t0 >= 150);
  /* Raw bytes: NULs and an empty value. */
  const char bin[] = {'x', 0, 'y', 0, (char)0xff};
  CHECK_RC(dlock_queue_offer(q, bin, sizeof bin), 0);
  CHECK_RC(dlock_queue_offer(q, NULL, 0), 0);
  CHECK_RC(dlock_queue_take(q, &v, &len), 0);
  CHECK_EQ(len, sizeof bin);
  CHECK(memcmp(v, bin, sizeof bin) == 0);
  dlock_queue_value_free(v);
  CHECK_RC(dlock_queue_take_last(q, &v, &len), 0);
  CHECK_EQ(len, 0);
  dlock_queue_value_free(v);
  /* Bad input changes nothing. */
  CHECK_RC(dlock_queue_offer(q, NULL, 3), DLOCK_EINVAL);
  CHECK_RC(dlock_queue_poll(q, 0, NULL, NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_queue_size(q, NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_queue_offer(NULL, "x", 1), DLOCK_EINVAL);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS q:basic"), 0);
  dlock_queue *bad;
  CHECK_RC(dlock_queue_new(c, "", &bad), DLOCK_EINVAL);
  CHECK(bad == NULL);
  dlock_queue_free(q);
  dlock_queue_free(NULL);
  dlock_client_close(c);
}

static void t_queue_wrong_type(void) {
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_queue *q;
  CHECK_RC(dlock_queue_new(c, "q:str", &q), 0);
  redisReply *r = th_cmd(&th_srv, "SET q:str hello");
  if (r) freeReplyObject(r);
  int64_t n;
  void *v;
  CHECK_RC(dlock_queue_offer(q, "x", 1), DLOCK_EWRONGTYPE);
  CHECK(strstr(dlock_client_errmsg(c), "WRONGTYPE") != NULL);
  CHECK_RC(dlock_queue_offer_first(q, "x", 1), DLOCK_EWRONGTYPE);
  CHECK_RC(dlock_queue_poll(q, 0, &v, NULL), DLOCK_EWRONGTYPE);
  CHECK(v == NULL);
  CHECK_RC(dlock_queue_poll_last(q, 500, &v, NULL), DLOCK_EWRONGTYPE);
  CHECK_RC(dlock_queue_size(q, &n), DLOCK_EWRONGTYPE);
  r = th_cmd(&th_srv, "GET q:str");
  CHECK(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "hello") == 0);
  freeReplyObject(r);
  dlock_queue_free(q);
  dlock_client_close(c);
}

typedef struct taker {
  dlock_queue *q;
  int64_t wait_ms;
  atomic_int rc;
  int64_t done_at;
  char got[64];
} taker;

static void *take_one(void *p) {
  taker *t = p;
  void *v = NULL;
  size_t len = 0;
  int rc = t->wait_ms < 0 ? dlock_queue_take(t->q, &v, &len)
                          : dlock_queue_poll(t->q, t->wait_ms, &v, &len);
  if (rc == 0) {
    snprintf(t->got, sizeof t->got, "%.*s", (int)len, (char *)v);
    dlock_queue_value_free(v);
  }
  t->done_at = th_now_ms();
  atomic_store(&t->rc, rc);
  return NULL;
}

/* A waiting take sleeps on the channel (no polling while dlock offers
 * wake it) and an offer wakes exactly one taker per value. */
static void t_queue_offer_wakes(void) {
  dlock_client *wc = th_client(&th_srv, 0), *pc = th_client(&th_srv, 0);
  CHECK(wc && pc);
  dlock_queue *wq, *pq;
  CHECK_RC(dlock_queue_new(wc, "q:wake", &wq), 0);
  CHECK_RC(dlock_queue_new(pc, "q:wake", &pq), 0);
  taker t[2];
  pthread_t th[2];
  for (int i = 0; i < 2; i++) {
    t[i] = (taker){.q = wq, .wait_ms = i == 0 ? -1 : 20000, .rc = 99};
    pthread_create(&th[i], NULL, take_one, &t[i]);
  }
  CHECK(th_wait_subscribed(&th_srv, "dlock_queue_channel:{q:wake}", 2000));
  th_sleep_ms(100);
  CHECK_EQ(atomic_load(&t[0].rc), 99);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_queue_offer(pq, "one", 3), 0);
  th_sleep_ms(150);
  int done = (atomic_load(&t[0].rc) == 0) + (atomic_load(&t[1].rc) == 0);
  CHECK_EQ(done, 1);
  CHECK_RC(dlock_queue_offer(pq, "two", 3), 0);
  for (int i = 0; i < 2; i++) {
    pthread_join(th[i], NULL);
    CHECK_RC(atomic_load(&t[i].rc), 0);
    CHECK(t[i].done_at - t0 < 1000);
  }
  CHECK(strcmp(t[0].got, "one") == 0 || strcmp(t[1].got, "one") == 0);
  CHECK(strcmp(t[0].got, "two") == 0 || strcmp(t[1].got, "two") == 0);
  dlock_queue_free(wq);
  dlock_queue_free(pq);
  dlock_client_close(wc);
  dlock_client_close(pc);
}

/* Redisson's side: its offer is a bare RPUSH (no message: the taker's
 * recheck finds it), its take a BLPOP that reads dlock's offers. */
static void t_queue_redisson_peer(void) {
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_queue *q;
  CHECK_RC(dlock_queue_new(c, "q:peer", &q), 0);
  taker t = {.q = q, .wait_ms = 5000, .rc = 99};
  pthread_t th;
  pthread_create(&th, NULL, take_one, &t);
  CHECK(th_wait_subscribed(&th_srv, "dlock_queue_channel:{q:peer}", 2000));
  th_sleep_ms(1200); /* the recheck has backed off to its longest */
  int64_t t0 = th_now_ms();
  redisReply *r = th_cmd(&th_srv, "RPUSH q:peer from-java");
  if (r) freeReplyObject(r);
  pthread_join(th, NULL);
  CHECK_RC(atomic_load(&t.rc), 0);
  CHECK(strcmp(t.got, "from-java") == 0);
  CHECK(t.done_at - t0 < 800);
  const char bin[] = {'a', 0, 'b'};
  CHECK_RC(dlock_queue_offer(q, bin, sizeof bin), 0);
  r = th_cmd(&th_srv, "BLPOP q:peer 1");
  CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2);
  CHECK(r->element[1]->len == sizeof bin &&
        memcmp(r->element[1]->str, bin, sizeof bin) == 0);
  freeReplyObject(r);
  dlock_queue_free(q);
  dlock_client_close(c);
}

/* Producer processes and consumer threads (one client each): every value
 * is taken exactly once. */
#define PRODUCERS 3
#define PER_PRODUCER 200
#define CONSUMERS 4

typedef struct consumer {
  dlock_client *c;
  int got;
  unsigned char *seen; /* shared, under lock */
  pthread_mutex_t *lock;
  int dup;
} consumer;

static void *consume(void *p) {
  consumer *k = p;
  dlock_queue *q;
  if (dlock_queue_new(k->c, "q:many", &q) != 0) return NULL;
  for (;;) {
    void *v;
    size_t len;
    int rc = dlock_queue_poll(q, 1500, &v, &len);
    if (rc != 0) break;
    int id = atoi(v);
    dlock_queue_value_free(v);
    pthread_mutex_lock(k->lock);
    if (id >= 0 && id < PRODUCERS * PER_PRODUCER) {
      if (k->seen[id]) k->dup++;
      k->seen[id] = 1;
    }
    pthread_mutex_unlock(k->lock);
    k->got++;
  }
  dlock_queue_free(q);
  return NULL;
}

static void t_queue_many(void) {
  static unsigned char seen[PRODUCERS * PER_PRODUCER];
  pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  pid_t pids[PRODUCERS];
  for (int p = 0; p < PRODUCERS; p++) {
    pids[p] = fork();
    if (pids[p] == 0) {
      dlock_client *c = th_client(&th_srv, 0);
      dlock_queue *q = NULL;
      int bad = c == NULL || dlock_queue_new(c, "q:many", &q) != 0;
      for (int i = 0; !bad && i < PER_PRODUCER; i++) {
        char buf[16];
        int n = snprintf(buf, sizeof buf, "%d", p * PER_PRODUCER + i);
        bad = (i % 2 ? dlock_queue_offer(q, buf, (size_t)n)
                     : dlock_queue_offer_first(q, buf, (size_t)n)) != 0;
      }
      dlock_queue_free(q);
      dlock_client_close(c);
      _exit(bad);
    }
  }
  /* Consumers after the fork: a child gets no copy of their state. */
  consumer k[CONSUMERS];
  pthread_t th[CONSUMERS];
  for (int i = 0; i < CONSUMERS; i++) {
    k[i] = (consumer){.c = th_client(&th_srv, 0), .seen = seen, .lock = &lock};
    CHECK(k[i].c != NULL);
    pthread_create(&th[i], NULL, consume, &k[i]);
  }
  for (int p = 0; p < PRODUCERS; p++) {
    int st;
    CHECK(waitpid(pids[p], &st, 0) == pids[p]);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  int total = 0, dup = 0;
  for (int i = 0; i < CONSUMERS; i++) {
    pthread_join(th[i], NULL);
    total += k[i].got;
    dup += k[i].dup;
    dlock_client_close(k[i].c);
  }
  CHECK_EQ(dup, 0);
  CHECK_EQ(total, PRODUCERS * PER_PRODUCER);
  for (int i = 0; i < PRODUCERS * PER_PRODUCER; i++)
    CHECK(seen[i]);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS q:many"), 0);
}

/* ---- the delayed queue ---- */
static void t_delay_order(void) {
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  /* Offered through a plain handle: its client runs no transfer, so the
   * layout can be looked at before anything moves. */
  dlock_queue *p, *q;
  CHECK_RC(dlock_queue_new(c, "dq", &p), 0);
  int64_t t0 = th_now_ms(), n = -1;
  CHECK_RC(dlock_queue_offer_delayed(p, 600, "c", 1), 0);
  CHECK_RC(dlock_queue_offer_delayed(p, 200, "a", 1), 0);
  CHECK_RC(dlock_queue_offer_delayed(p, 400, "b", 1), 0);
  CHECK_RC(dlock_queue_offer_delayed(p, 0, "now", 3), 0);
  CHECK_RC(dlock_queue_delayed_size(p, &n), 0);
  CHECK_EQ(n, 4);
  CHECK_RC(dlock_queue_size(p, &n), 0);
  CHECK_EQ(n, 0);
  /* Redisson's layout: the packed element in the zset and the list. */
  redisReply *r = th_cmd(&th_srv, "ZRANGE redisson_delay_queue_timeout:{dq} "
                                  "0 0 WITHSCORES");
  CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2);
  const char *e = r->element[0]->str;
  CHECK_EQ(r->element[0]->len, 1 + 8 + 8 + 3);
  CHECK_EQ((unsigned char)e[0], 8);
  CHECK(e[9] == 3 && memcmp(e + 10, "\0\0\0\0\0\0\0", 7) == 0);
  CHECK(memcmp(e + 17, "now", 3) == 0);
  freeReplyObject(r);
  CHECK_EQ(th_cmd_int(&th_srv, "LLEN redisson_delay_queue:{dq}"), 4);
  CHECK_RC(dlock_queue_new_delayed(c, "dq", &q), 0);
  const char *want[] = {"now", "a", "b", "c"};
  const int64_t due[] = {0, 200, 400, 600};
  for (int i = 0; i < 4; i++) {
    void *v;
    size_t len;
    CHECK_RC(dlock_queue_poll(q, 3000, &v, &len), 0);
    int64_t at = th_now_ms() - t0;
    CHECK(len == strlen(want[i]) && memcmp(v, want[i], len) == 0);
    dlock_queue_value_free(v);
    CHECK(at >= due[i] - 20); /* not early (the clocks' grain aside) */
    CHECK(at < due[i] + 300); /* and not much later */
  }
  CHECK_RC(dlock_queue_delayed_size(q, &n), 0);
  CHECK_EQ(n, 0);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS redisson_delay_queue:{dq}"), 0);
  CHECK_RC(dlock_queue_offer_delayed(q, -1, "x", 1), DLOCK_EINVAL);
  CHECK_RC(dlock_queue_offer_delayed(q, 400LL * 24 * 3600 * 1000, "x", 1),
           DLOCK_EINVAL);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS redisson_delay_queue:{dq}"), 0);
  dlock_queue_free(q);
  dlock_queue_free(p);
  dlock_client_close(c);
}

/* Values due at the same ms leave in the order they were offered (the
 * zset orders equal scores by member, which held a random id): hundreds
 * of offer calls, many within one ms, then taken through dlock's transfer
 * and through Redisson's. */
static void t_delay_ties_in_offer_order(void) {
  enum { N = 300 };
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  const char *names[] = {"dt", "dt2"};
  dlock_queue *p[2];
  for (int k = 0; k < 2; k++) {
    CHECK_RC(dlock_queue_new(c, names[k], &p[k]), 0); /* no transfer */
    for (int i = 0; i < N; i++) {
      char buf[16];
      int n = snprintf(buf, sizeof buf, "%d", i);
      CHECK_RC(dlock_queue_offer_delayed(p[k], 100, buf, (size_t)n), 0);
    }
  }
  /* Several offers shared a ms, or this tests nothing. */
  redisReply *r = th_cmd(&th_srv, "ZRANGE redisson_delay_queue_timeout:{dt} "
                                  "0 -1 WITHSCORES");
  CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 * N);
  int distinct = 0;
  for (size_t i = 1; r && i < r->elements; i += 2)
    distinct += i == 1 || strcmp(r->element[i]->str, r->element[i - 2]->str);
  if (r) freeReplyObject(r);
  printf("    %d offers due at %d distinct ms\n", N, distinct);
  /* Under valgrind an offer takes about a ms: fewer ties, still some. */
  CHECK(distinct < (getenv("DLOCK_UNDER_VALGRIND") ? N - N / 10 : N / 2));
  /* dlock's transfer. */
  dlock_queue *q;
  CHECK_RC(dlock_queue_new_delayed(c, "dt", &q), 0);
  for (int i = 0; i < N; i++) {
    char want[16];
    snprintf(want, sizeof want, "%d", i);
    void *v = NULL;
    size_t len = 0;
    CHECK_RC(dlock_queue_poll(q, 3000, &v, &len), 0);
    if (v && (len != strlen(want) || memcmp(v, want, len) != 0)) {
      fprintf(stderr, "    value %d: got %.*s\n", i, (int)len, (char *)v);
      CHECK(0);
      dlock_queue_value_free(v);
      break;
    }
    dlock_queue_value_free(v);
  }
  dlock_queue_free(q);
  /* Redisson's transfer (a Java client's) sees the same order. */
  long long now = server_ms(&th_srv);
  while (th_cmd_int(&th_srv,
                    "ZCOUNT redisson_delay_queue_timeout:{dt2} "
                    "-inf %lld",
                    now) < N) {
    th_sleep_ms(20); /* until every value is due by the server's clock */
    now = server_ms(&th_srv);
  }
  r = th_cmd(&th_srv,
             "EVAL %s 3 dt2 redisson_delay_queue_timeout:{dt2} "
             "redisson_delay_queue:{dt2} %lld %d",
             REDISSON_DELAY_TRANSFER, now, N);
  if (r) freeReplyObject(r);
  r = th_cmd(&th_srv, "LRANGE dt2 0 -1");
  CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == N);
  for (size_t i = 0; r && i < r->elements; i++)
    CHECK_EQ(atoi(r->element[i]->str), (int)i);
  if (r) freeReplyObject(r);
  dlock_queue_free(p[0]);
  dlock_queue_free(p[1]);
  dlock_client_close(c);
}

/* Every client was down while values came due: the first poll moves them
 * all at once, in due order. */
static void t_delay_restart(void) {
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_queue *q;
  CHECK_RC(dlock_queue_new(c, "dr", &q), 0);
  for (int i = 0; i < 250; i++) {
    char buf[16];
    int n = snprintf(buf, sizeof buf, "%d", i);
    /* Each due 8 ms before the one offered before it (an offer takes far
     * less): due order is the reverse of offer order. */
    CHECK_RC(dlock_queue_offer_delayed(q, 300 + 8 * (249 - i), buf, (size_t)n),
             0);
  }
  CHECK_RC(dlock_queue_offer_delayed(q, 60000, "later", 5), 0);
  dlock_queue_free(q);
  dlock_client_close(c);
  th_sleep_ms(2400);
  c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  CHECK_RC(dlock_queue_new_delayed(c, "dr", &q), 0);
  void *v;
  size_t len;
  CHECK_RC(dlock_queue_poll(q, 0, &v, &len), 0);
  CHECK(len == 3 && memcmp(v, "249", 3) == 0); /* the first due */
  dlock_queue_value_free(v);
  CHECK_EQ(th_cmd_int(&th_srv, "LLEN dr"), 249);
  CHECK_EQ(th_cmd_int(&th_srv, "ZCARD redisson_delay_queue_timeout:{dr}"), 1);
  CHECK_EQ(th_cmd_int(&th_srv, "LLEN redisson_delay_queue:{dr}"), 1);
  CHECK_RC(dlock_queue_poll(q, 0, &v, &len), 0);
  CHECK(len == 3 && memcmp(v, "248", 3) == 0);
  dlock_queue_value_free(v);
  dlock_queue_free(q);
  dlock_client_close(c);
}

/* Redisson's offer reaches a dlock consumer; Redisson's transfer moves
 * dlock's offers intact. */
static void t_delay_redisson_peer(void) {
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_queue *q;
  CHECK_RC(dlock_queue_new_delayed(c, "dp", &q), 0);
  long long now = server_ms(&th_srv);
  CHECK(now > 0);
  redisReply *r =
      th_cmd(&th_srv,
             "EVAL %s 4 dp redisson_delay_queue_timeout:{dp} "
             "redisson_delay_queue:{dp} "
             "redisson_delay_queue_channel:{dp} %lld %s %s",
             REDISSON_DELAY_OFFER, now + 300, "RRRRRRRR", "from-java");
  CHECK(r && r->type != REDIS_REPLY_ERROR);
  freeReplyObject(r);
  void *v;
  size_t len;
  CHECK_RC(dlock_queue_poll(q, 0, &v, &len), DLOCK_EBUSY);
  CHECK_RC(dlock_queue_poll(q, 3000, &v, &len), 0);
  CHECK(len == 9 && memcmp(v, "from-java", 9) == 0);
  dlock_queue_value_free(v);
  CHECK(server_ms(&th_srv) >= now + 300);
  /* dlock's offer, moved by Redisson's transfer (a Java client's clock):
   * through a plain handle, whose client runs no transfer of its own. */
  dlock_queue_free(q);
  CHECK_RC(dlock_queue_new(c, "dp", &q), 0);
  const char bin[] = {'v', 0, 'w', (char)0xfe};
  CHECK_RC(dlock_queue_offer_delayed(q, 50, bin, sizeof bin), 0);
  th_sleep_ms(80);
  r = th_cmd(&th_srv,
             "EVAL %s 3 dp redisson_delay_queue_timeout:{dp} "
             "redisson_delay_queue:{dp} %lld 100",
             REDISSON_DELAY_TRANSFER, server_ms(&th_srv));
  CHECK(r && r->type == REDIS_REPLY_NIL);
  freeReplyObject(r);
  r = th_cmd(&th_srv, "LPOP dp");
  CHECK(r && r->type == REDIS_REPLY_STRING && r->len == sizeof bin &&
        memcmp(r->str, bin, sizeof bin) == 0);
  freeReplyObject(r);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS redisson_delay_queue:{dp}"), 0);
  dlock_queue_free(q);
  dlock_client_close(c);
}

/* A client with a delayed handle moves the queue's due values in the
 * background, with no dlock poller anywhere (a Java consumer may only
 * BLPOP): its own offers at their due time, another process's (Redisson's
 * script here, which publishes the new head's due time) at theirs too;
 * and the thread stops with the last handle. */
static bool numpat(void *p) {
  (void)p;
  return th_cmd_int(&th_srv, "PUBSUB NUMPAT") >= 1;
}

static bool llen_is(void *p) {
  return th_cmd_int(&th_srv, "LLEN bt") == *(long long *)p;
}

static void t_delay_background_transfer(void) {
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_queue *q, *q2;
  CHECK_RC(dlock_queue_new_delayed(c, "bt", &q), 0);
  CHECK_RC(dlock_queue_new_delayed(c, "bt", &q2), 0); /* one thread for both */
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_queue_offer_delayed(q, 150, "a", 1), 0);
  long long one = 1, two = 2;
  CHECK(th_wait_for(llen_is, &one, 2000));
  int64_t took = th_now_ms() - t0;
  printf("    own offer moved %lld ms after it was made (due at 150)\n",
         (long long)took);
  CHECK(took >= 150 && took < 450);
  CHECK(th_wait_for(numpat, NULL, 2000)); /* the transfer hears both */
  int64_t t1 = th_now_ms();
  redisReply *r =
      th_cmd(&th_srv,
             "EVAL %s 4 bt redisson_delay_queue_timeout:{bt} "
             "redisson_delay_queue:{bt} "
             "redisson_delay_queue_channel:{bt} %lld %s %s",
             REDISSON_DELAY_OFFER, server_ms(&th_srv) + 300, "RRRRRRRR", "b");
  CHECK(r && r->type != REDIS_REPLY_ERROR);
  freeReplyObject(r);
  CHECK(th_wait_for(llen_is, &two, 2500));
  took = th_now_ms() - t1;
  printf("    Redisson's offer moved %lld ms after it was made (due at 300)\n",
         (long long)took);
  CHECK(took >= 280 && took < 600);
  r = th_cmd(&th_srv, "LRANGE bt 0 -1");
  CHECK(r && r->elements == 2 && strcmp(r->element[0]->str, "a") == 0 &&
        strcmp(r->element[1]->str, "b") == 0);
  freeReplyObject(r);
  dlock_queue_free(q);
  dlock_queue_free(q2);
  /* Stopped: no script runs any more. */
  long long before = th_scripts_run(&th_srv);
  th_sleep_ms(1300);
  CHECK_EQ(th_scripts_run(&th_srv), before);
  dlock_client_close(c);
}

/* A delayed poll hears Redisson's channel too: a Java producer's offer
 * that becomes the head publishes its due time there (and nothing on
 * dlock's channel), and wakes the sleeping poller at once, not at its
 * next recheck (up to 500 ms later by then). */

static void t_delay_redisson_wakes(void) {
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_queue *q;
  CHECK_RC(dlock_queue_new_delayed(c, "dw", &q), 0);
  taker t = {.q = q, .wait_ms = 10000, .rc = 99};
  pthread_t th;
  pthread_create(&th, NULL, take_one, &t);
  CHECK(th_wait_for(numpat, NULL, 2000));
  redisReply *r = th_cmd(&th_srv, "PUBSUB NUMSUB dlock_queue_channel:{dw}");
  CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->integer == 0); /* the pattern covers it */
  freeReplyObject(r);
  /* Long enough for the poller's rechecks to back off to 500 ms. */
  th_sleep_ms(1200);
  CHECK_EQ(atomic_load(&t.rc), 99);
  int64_t t0 = th_now_ms();
  r = th_cmd(&th_srv,
             "EVAL %s 4 dw redisson_delay_queue_timeout:{dw} "
             "redisson_delay_queue:{dw} redisson_delay_queue_channel:{dw} "
             "%lld %s %s",
             REDISSON_DELAY_OFFER, server_ms(&th_srv), "RRRRRRRR", "now");
  CHECK(r && r->type != REDIS_REPLY_ERROR);
  freeReplyObject(r);
  pthread_join(th, NULL);
  CHECK_RC(atomic_load(&t.rc), 0);
  CHECK(strcmp(t.got, "now") == 0);
  printf("    delivered %lld ms after Redisson's offer\n",
         (long long)(t.done_at - t0));
  CHECK(t.done_at - t0 < 150);
  dlock_queue_free(q);
  dlock_client_close(c);
}

/* Delays of minutes, with the server's clock stepped (clockshift.c): what
 * is due is the server's business. */
static void shift_clock(const char *file, int64_t seconds) {
  int fd = open(file, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd >= 0) {
    if (pwrite(fd, &seconds, sizeof seconds, 0) != sizeof seconds)
      fprintf(stderr, "cannot write %s\n", file);
    close(fd);
  }
}

static void t_delay_stepped_clock(void) {
  char file[512];
  snprintf(file, sizeof file, "%s/queue.clockshift", th_tmpdir());
  shift_clock(file, 0);
  th_redis srv;
  setenv("LD_PRELOAD", DLOCK_CLOCKSHIFT_LIB, 1);
  setenv("DLOCK_CLOCKSHIFT_FILE", file, 1);
  int started = th_redis_start(&srv, NULL);
  unsetenv("LD_PRELOAD");
  CHECK(started == 0);
  dlock_client *c = th_client(&srv, 0);
  CHECK(c != NULL);
  dlock_queue *q;
  CHECK_RC(dlock_queue_new_delayed(c, "ds", &q), 0);
  CHECK_RC(dlock_queue_offer_delayed(q, 5 * 60 * 1000, "five", 4), 0);
  CHECK_RC(dlock_queue_offer_delayed(q, 2 * 60 * 1000, "two", 3), 0);
  CHECK_RC(dlock_queue_offer_delayed(q, 0, "zero", 4), 0);
  void *v;
  size_t len;
  CHECK_RC(dlock_queue_poll(q, 0, &v, &len), 0);
  CHECK(len == 4 && memcmp(v, "zero", 4) == 0);
  dlock_queue_value_free(v);
  CHECK_RC(dlock_queue_poll(q, 300, &v, &len), DLOCK_EBUSY);
  shift_clock(file, 150); /* two minutes and a half later */
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_queue_poll(q, 3000, &v, &len), 0);
  CHECK(len == 3 && memcmp(v, "two", 3) == 0);
  dlock_queue_value_free(v);
  CHECK(th_now_ms() - t0 < 1000);
  CHECK_RC(dlock_queue_poll(q, 0, &v, &len), DLOCK_EBUSY);
  shift_clock(file, 301);
  CHECK_RC(dlock_queue_poll(q, 3000, &v, &len), 0);
  CHECK(len == 4 && memcmp(v, "five", 4) == 0);
  dlock_queue_value_free(v);
  dlock_queue_free(q);
  dlock_client_close(c);
  th_redis_stop(&srv);
}

static void t_delay_wrong_type(void) {
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_queue *q;
  CHECK_RC(dlock_queue_new_delayed(c, "dw", &q), 0);
  redisReply *r = th_cmd(&th_srv, "SET redisson_delay_queue:{dw} x");
  if (r) freeReplyObject(r);
  CHECK_RC(dlock_queue_offer_delayed(q, 0, "v", 1), DLOCK_EWRONGTYPE);
  CHECK(strstr(dlock_client_errmsg(c), "redisson_delay_queue:{dw}") != NULL);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS redisson_delay_queue_timeout:{dw}"), 0);
  void *v;
  CHECK_RC(dlock_queue_poll(q, 200, &v, NULL), DLOCK_EWRONGTYPE);
  r = th_cmd(&th_srv, "DEL redisson_delay_queue:{dw}");
  if (r) freeReplyObject(r);
  r = th_cmd(&th_srv, "SET dw x");
  if (r) freeReplyObject(r);
  CHECK_RC(dlock_queue_offer_delayed(q, 0, "v", 1), DLOCK_EWRONGTYPE);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS redisson_delay_queue_timeout:{dw}"), 0);
  dlock_queue_free(q);
  dlock_client_close(c);
}

/* ---- the reliable take ---- */
static long long count_keys(th_redis *srv, const char *pattern) {
  redisReply *r = th_cmd(srv, "KEYS %s", pattern);
  long long n = r && r->type == REDIS_REPLY_ARRAY ? (long long)r->elements : -1;
  if (r) freeReplyObject(r);
  return n;
}

static void t_reliable_basics(void) {
  dlock_client *c = th_client(&th_srv, 900), *o = th_client(&th_srv, 900);
  CHECK(c && o);
  dlock_queue *q, *q2, *other;
  CHECK_RC(dlock_queue_new(c, "rq", &q), 0);
  CHECK_RC(dlock_queue_new(c, "rq", &q2), 0);
  CHECK_RC(dlock_queue_new(o, "rq", &other), 0);
  const char bin[] = {'b', 0, 'b'};
  CHECK_RC(dlock_queue_offer(q, "a", 1), 0);
  CHECK_RC(dlock_queue_offer(q, bin, sizeof bin), 0);
  CHECK_RC(dlock_queue_offer(q, "c", 1), 0);
  CHECK_RC(dlock_queue_ack(q, "a", 1), DLOCK_ENOTOWNER); /* took nothing */
  void *v;
  size_t len;
  CHECK_RC(dlock_queue_poll_reliable(q, 0, &v, &len), 0);
  CHECK(len == 1 && memcmp(v, "a", 1) == 0);
  dlock_queue_value_free(v);
  CHECK_RC(dlock_queue_poll_reliable(q, 0, &v, &len), 0);
  CHECK(len == sizeof bin && memcmp(v, bin, len) == 0);
  dlock_queue_value_free(v);
  CHECK_EQ(th_cmd_int(&th_srv, "LLEN rq"), 1);
  CHECK_EQ(th_cmd_int(&th_srv, "ZCARD {rq}:timeout"), 1);
  CHECK_EQ(count_keys(&th_srv, "{rq}:processing:*"), 1);
  CHECK_RC(dlock_queue_ack(q2, "a", 1), DLOCK_ENOTOWNER); /* another handle */
  CHECK_RC(dlock_queue_ack(q, "a", 1), 0);
  CHECK_RC(dlock_queue_ack(q, "a", 1), DLOCK_ENOTOWNER); /* once */
  /* Past several leases: the watchdog keeps the consumer alive, so
   * another consumer's take sends nothing of ours back. */
  th_sleep_ms(2500);
  CHECK_RC(dlock_queue_poll_reliable(other, 0, &v, &len), 0);
  CHECK(len == 1 && memcmp(v, "c", 1) == 0);
  dlock_queue_value_free(v);
  CHECK_RC(dlock_queue_poll_reliable(other, 0, &v, &len), DLOCK_EBUSY);
  CHECK_RC(dlock_queue_ack(q, bin, sizeof bin), 0);
  CHECK_EQ(th_cmd_int(&th_srv, "ZCARD {rq}:timeout"), 2);
  /* A freed consumer's values go back after its lease. */
  CHECK_RC(dlock_queue_offer(q, "d", 1), 0);
  CHECK_RC(dlock_queue_poll_reliable(q, 0, &v, &len), 0);
  dlock_queue_value_free(v);
  dlock_queue_free(q);
  th_sleep_ms(1100);
  CHECK_RC(dlock_queue_poll_reliable(other, 0, &v, &len), 0);
  CHECK(len == 1 && memcmp(v, "d", 1) == 0);
  dlock_queue_value_free(v);
  CHECK_RC(dlock_queue_ack(other, "d", 1), 0);
  CHECK_RC(dlock_queue_ack(other, "c", 1), 0);
  CHECK_EQ(count_keys(&th_srv, "{rq}:processing:*"), 0);
  CHECK_EQ(th_cmd_int(&th_srv, "ZCARD {rq}:timeout"), 1); /* other's */
  /* A key of another type: nothing changed. */
  redisReply *r = th_cmd(&th_srv, "SET rq x");
  if (r) freeReplyObject(r);
  CHECK_RC(dlock_queue_poll_reliable(other, 0, &v, &len), DLOCK_EWRONGTYPE);
  CHECK_EQ(th_cmd_int(&th_srv, "ZCARD {rq}:timeout"), 1);
  dlock_queue_free(q2);
  dlock_queue_free(other);
  dlock_client_close(c);
  dlock_client_close(o);
}

/* Consumer processes take reliably and acknowledge; one dies after taking
 * values it never acknowledged: every value is acknowledged exactly once. */
#define RELIABLE_N 300
#define RELIABLE_CONSUMERS 3

static void reliable_consumer(const char *log, bool crash) {
  dlock_client *c = th_client(&th_srv, 600);
  dlock_queue *q;
  if (c == NULL || dlock_queue_new(c, "rm", &q) != 0) _exit(2);
  FILE *f = fopen(log, "a");
  if (f == NULL) _exit(2);
  setvbuf(f, NULL, _IOLBF, 0);
  for (int taken = 0;; taken++) {
    void *v;
    size_t len;
    int rc = dlock_queue_poll_reliable(q, 2500, &v, &len);
    if (rc == DLOCK_EBUSY) break;
    if (rc != 0) _exit(3);
    if (crash && taken == 5) _exit(0); /* dies holding five */
    if (crash) {
      dlock_queue_value_free(v);
      continue;
    }
    if (dlock_queue_ack(q, v, len) == 0)
      fprintf(f, "%.*s\n", (int)len, (char *)v);
    dlock_queue_value_free(v);
  }
  fclose(f);
  dlock_queue_free(q);
  dlock_client_close(c);
  _exit(0);
}

static void t_reliable_many(void) {
  char log[512];
  snprintf(log, sizeof log, "%s/reliable.log", th_tmpdir());
  unlink(log);
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_queue *q;
  CHECK_RC(dlock_queue_new(c, "rm", &q), 0);
  for (int i = 0; i < RELIABLE_N; i++) {
    char buf[16];
    int n = snprintf(buf, sizeof buf, "%d", i);
    CHECK_RC(dlock_queue_offer(q, buf, (size_t)n), 0);
  }
  /* The client's threads end before the fork: a child gets no copy of
   * them (and TSan refuses to start threads after a multi-threaded fork). */
  dlock_queue_free(q);
  dlock_client_close(c);
  pid_t pids[RELIABLE_CONSUMERS];
  for (int k = 0; k < RELIABLE_CONSUMERS; k++)
    if ((pids[k] = fork()) == 0) reliable_consumer(log, k == 0);
  for (int k = 0; k < RELIABLE_CONSUMERS; k++) {
    int st;
    CHECK(waitpid(pids[k], &st, 0) == pids[k]);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  static int seen[RELIABLE_N];
  FILE *f = fopen(log, "r");
  CHECK(f != NULL);
  int id, total = 0;
  while (fscanf(f, "%d", &id) == 1) {
    if (id >= 0 && id < RELIABLE_N) seen[id]++;
    total++;
  }
  fclose(f);
  CHECK_EQ(total, RELIABLE_N);
  for (int i = 0; i < RELIABLE_N; i++)
    CHECK_EQ(seen[i], 1);
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS rm"), 0);
  CHECK_EQ(count_keys(&th_srv, "{rm}:processing:*"), 0);
}

TH_MAIN(T(t_reliable_basics), T(t_reliable_many), T(t_delay_order),
        T(t_delay_ties_in_offer_order), T(t_delay_restart),
        T(t_delay_redisson_peer), T(t_delay_redisson_wakes),
        T(t_delay_background_transfer), T(t_delay_stepped_clock),
        T(t_delay_wrong_type), T(t_queue_basics), T(t_queue_wrong_type),
        T(t_queue_offer_wakes), T(t_queue_redisson_peer), T(t_queue_many))
