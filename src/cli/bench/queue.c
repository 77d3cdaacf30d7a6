/* queue.c: dlock bench's queue scenario: offers and takes per second on
 * one queue (--threads producers and as many consumers, one client)
 * beside plain RPUSH/BLPOP on their own connections in the same run (the
 * ceiling), then the delivery delay of delayed values after their due
 * time (p50/p99). */
#include "../../core/core.h"
#include "bench.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DELAY_MS 50 /* the delayed values' delay */

static int64_t wall_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

typedef struct qworker {
  dlock_queue *q;    /* dlock's run */
  redisContext *raw; /* the baseline's */
  const char *name;
  int64_t end_us;        /* producers stop then */
  atomic_int *producing; /* producers still running */
  bool delayed;          /* the delivery-delay run */
  long ops, errors;
  bench_samples lat; /* offers' latency, or delivery delays */
} qworker;

static void *producer(void *p) {
  qworker *w = p;
  char buf[32];
  while (dl_now_us() < w->end_us) {
    int64_t t0 = dl_now_us();
    int rc;
    if (w->raw) {
      redisReply *r = redisCommand(w->raw, "RPUSH %s x", w->name);
      rc = r && r->type == REDIS_REPLY_INTEGER ? 0 : -1;
      if (r) freeReplyObject(r);
    } else if (w->delayed) {
      /* The due time on the server's grain (whole ms): the server's own,
       * taken a moment later, is never earlier. */
      int n = snprintf(buf, sizeof buf, "%lld",
                       (long long)((wall_us() / 1000 + DELAY_MS) * 1000));
      rc = dlock_queue_offer_delayed(w->q, DELAY_MS, buf, (size_t)n);
      dl_sleep_ms(1); /* a steady trickle, not a flood */
    } else {
      rc = dlock_queue_offer(w->q, "x", 1);
    }
    if (rc != 0) {
      w->errors++;
      continue;
    }
    w->ops++;
    if (!w->raw && !w->delayed) bench_samples_push(&w->lat, dl_now_us() - t0);
  }
  atomic_fetch_sub(w->producing, 1);
  return NULL;
}

static void *consumer(void *p) {
  qworker *w = p;
  for (;;) {
    bool last = atomic_load(w->producing) == 0;
    int rc;
    if (w->raw) {
      redisReply *r = redisCommand(w->raw, "BLPOP %s 0.2", w->name);
      rc = !r ? -1 : r->type == REDIS_REPLY_ARRAY ? 0 : DLOCK_EBUSY;
      if (r) freeReplyObject(r);
    } else {
      void *v;
      size_t len;
      rc = dlock_queue_poll(w->q, 200, &v, &len);
      if (rc == 0 && w->delayed)
        bench_samples_push(&w->lat, wall_us() - atoll(v));
      if (rc == 0) dlock_queue_value_free(v);
    }
    if (rc == 0)
      w->ops++;
    else if (rc != DLOCK_EBUSY)
      w->errors++;
    if (rc != 0 && last) break; /* empty after the producers ended */
  }
  return NULL;
}

/* One run of n producers and n consumers for secs_ms: dlock's (c), the
 * delayed one (delayed), or the baseline's (c NULL). Sums into *offers,
 * *takes (per second), lat. Returns 0 or -1. */
static int run(dlock_client *c, const bench_opts *o, const char *name,
               bool delayed, double *offers, double *takes, bench_samples *lat,
               long *errors) {
  int n = o->threads;
  qworker *w = calloc((size_t)(2 * n), sizeof *w);
  pthread_t *th = calloc((size_t)(2 * n), sizeof *th);
  if (!w || !th) {
    free(w);
    free(th);
    return -1;
  }
  atomic_int producing = n;
  int64_t start = dl_now_us(), end = start + o->secs_ms * 1000;
  int rc = 0;
  for (int i = 0; i < 2 * n && rc == 0; i++) {
    w[i].name = name;
    w[i].end_us = end;
    w[i].producing = &producing;
    w[i].delayed = delayed;
    if (c == NULL) {
      w[i].raw = bench_raw_connect(o->url, o->password, name);
      if (w[i].raw == NULL) rc = -1;
    } else if ((delayed ? dlock_queue_new_delayed(c, name, &w[i].q)
                        : dlock_queue_new(c, name, &w[i].q)) != 0) {
      rc = -1;
    }
  }
  int started = 0;
  for (int i = 0; rc == 0 && i < 2 * n; i++, started++)
    pthread_create(&th[i], NULL, i < n ? producer : consumer, &w[i]);
  long put = 0, got = 0;
  for (int i = 0; i < started; i++) {
    pthread_join(th[i], NULL);
    if (i < n)
      put += w[i].ops;
    else
      got += w[i].ops;
    *errors += w[i].errors;
    bench_samples_merge(lat, &w[i].lat);
  }
  double secs = (double)(dl_now_us() - start) / 1e6;
  *offers = put / secs;
  *takes = got / secs;
  for (int i = 0; i < 2 * n; i++) {
    if (w[i].raw) redisFree(w[i].raw);
    dlock_queue_free(w[i].q);
    free(w[i].lat.v);
  }
  free(w);
  free(th);
  return rc;
}

int bench_queue(const cli_global *g, const bench_opts *o,
                struct redisContext *raw, bench_report *r) {
  memset(r, 0, sizeof *r);
  r->scenario = "queue";
  r->threads = o->threads;
  r->processes = 1;
  r->rtt_p50 = bench_ping_p50_us(raw, 2000);
  r->ceiling = bench_ceiling_ops(raw, 300);
  dlock_client *c = bench_client(g, o, 0);
  if (c == NULL) return -1;
  char name[64], rawname[64];
  snprintf(name, sizeof name, "bench:queue:%d", (int)getpid());
  snprintf(rawname, sizeof rawname, "bench:rawqueue:%d", (int)getpid());
  bench_samples lat = {0}, delay = {0};
  double s0 = bench_server_cpu_us(raw);
  int rc = run(c, o, name, false, &r->queue_offers, &r->queue_takes, &lat,
               &r->errors);
  double s1 = bench_server_cpu_us(raw);
  if (rc == 0)
    rc = run(NULL, o, rawname, false, &r->rpush_per_sec, &r->blpop_per_sec,
             &lat, &r->errors);
  double ignore;
  if (rc == 0) rc = run(c, o, name, true, &ignore, &ignore, &delay, &r->errors);
  bench_samples_sort(&lat);
  r->ops_per_sec = r->queue_offers;
  r->p50 = bench_samples_pct(&lat, 0.5);
  r->p99 = bench_samples_pct(&lat, 0.99);
  r->max = bench_samples_pct(&lat, 1);
  r->cpu_per_op =
      r->queue_offers > 0
          ? (s1 - s0) / (r->queue_offers * (double)o->secs_ms / 1000)
          : 0;
  bench_samples_sort(&delay);
  r->delay_p50 = bench_samples_pct(&delay, 0.5);
  r->delay_p99 = bench_samples_pct(&delay, 0.99);
  free(lat.v);
  free(delay.v);
  dlock_client_close(c);
  return rc;
}
