/* handoff.c: the floor of a hand-off between two holders, measured in the
 * same run as the contended scenario: the time from a PUBLISH written on
 * one plain connection to its message read by a thread asleep on another
 * connection's subscription. Any lock whose waiters sleep pays at least
 * this between one holder's release and the next holder's start: the
 * release must reach the server and the news must reach a sleeping waiter
 * (dlock's grant is such a message). */
#include "../../core/core.h"
#include "bench.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define CHANNEL "dlock-bench-handoff"

typedef struct ho_sub {
  redisContext *c;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  long got;      /* messages read */
  int64_t delay; /* the last one's, us */
  bool failed;
} ho_sub;

/* The subscriber: reads messages until "stop" or an error. */
static void *sub_main(void *p) {
  ho_sub *s = p;
  for (;;) {
    void *rep = NULL;
    int rc = redisGetReply(s->c, &rep);
    int64_t now = dl_now_us();
    redisReply *r = rep;
    bool stop = rc != REDIS_OK || r == NULL || r->type != REDIS_REPLY_ARRAY ||
                r->elements != 3 || r->element[2]->type != REDIS_REPLY_STRING ||
                strcmp(r->element[2]->str, "stop") == 0;
    int64_t t0 = stop ? 0 : strtoll(r->element[2]->str, NULL, 10);
    if (rep) freeReplyObject(rep);
    pthread_mutex_lock(&s->mu);
    if (stop) {
      s->failed = rc != REDIS_OK;
    } else {
      s->delay = now - t0;
      s->got++;
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (stop) return NULL;
  }
}

double bench_handoff_p50_us(const bench_opts *o, redisContext *raw, int n) {
  if (o->cluster || o->nothers > 0) return 0;
  ho_sub s = {.c = bench_raw_connect(o->url, o->password, NULL)};
  if (s.c == NULL) return 0;
  redisReply *r = redisCommand(s.c, "SUBSCRIBE " CHANNEL);
  bool ok = r != NULL && r->type == REDIS_REPLY_ARRAY;
  if (r) freeReplyObject(r);
  pthread_t th;
  pthread_mutex_init(&s.mu, NULL);
  if (dl_cond_init(&s.cv) != 0) ok = false; /* CLOCK_MONOTONIC */
  if (!ok || pthread_create(&th, NULL, sub_main, &s) != 0) {
    if (ok) pthread_cond_destroy(&s.cv);
    pthread_mutex_destroy(&s.mu);
    redisFree(s.c);
    return 0;
  }
  bench_samples sm = {0};
  for (long i = 0; ok && i < n; i++) {
    char t0[32];
    snprintf(t0, sizeof t0, "%lld", (long long)dl_now_us());
    r = redisCommand(raw, "PUBLISH " CHANNEL " %s", t0);
    ok = r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    if (r) freeReplyObject(r);
    /* Its message read before the next goes out (2 s at most). */
    struct timespec until;
    dl_abstime(dl_now_ms() + 2000, &until);
    pthread_mutex_lock(&s.mu);
    while (ok && s.got <= i && !s.failed)
      if (pthread_cond_timedwait(&s.cv, &s.mu, &until) != 0) break;
    ok = ok && s.got > i;
    if (ok) bench_samples_push(&sm, s.delay);
    pthread_mutex_unlock(&s.mu);
  }
  r = redisCommand(raw, "PUBLISH " CHANNEL " stop");
  bool told = r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
  if (r) freeReplyObject(r);
  /* A subscriber not told to stop: its connection is closed under it. */
  if (!told) shutdown(s.c->fd, SHUT_RDWR);
  pthread_join(th, NULL);
  pthread_cond_destroy(&s.cv);
  pthread_mutex_destroy(&s.mu);
  redisFree(s.c);
  bench_samples_sort(&sm);
  double p = ok ? bench_samples_pct(&sm, 0.5) : 0;
  free(sm.v);
  return p;
}
