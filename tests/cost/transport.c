/* transport.c: one request at a time on each of the Redis backend's two
 * connection machines, for issue 31's question whether the blocking
 * driver could run the event loop's machine: `conn` sends on the blocking
 * connection (conn.c, the thread writes and reads itself), `poll` on the
 * event loop's (aconn.c, areq.c) driven by the built-in loop on the
 * calling thread until its reply, as hiredis' blocking call drives its
 * context. The same command (EXISTS of one key) both ways.
 *   transport HOST PORT conn|poll N
 * prints the median and the 99th percentile of a request's round trip
 * (us); its instructions per request are callgrind's difference of N and
 * 2N (as tests/test_cost.sh counts a cycle). */
#include "redis/conns/conns.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *ARGV[] = {"EXISTS", "cost:transport"};
static const size_t LENS[] = {6, 14};

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

typedef struct {
  int done, rc;
} waiter;

static void on_reply(void *ud, int rc, redisReply *r) {
  waiter *w = ud;
  w->rc = rc;
  w->done = 1;
  if (r) freeReplyObject(r);
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: transport HOST PORT conn|poll N\n");
    return 2;
  }
  long n = strtol(argv[4], NULL, 10);
  int64_t *lat = calloc((size_t)n, sizeof *lat);
  dl_conn_config cfg = {0};
  cfg.ep.host = argv[1];
  cfg.ep.port = atoi(argv[2]);
  cfg.connect_timeout_ms = 2000;
  cfg.command_timeout_ms = 2000;
  cfg.reconnect_min_ms = 100;
  cfg.reconnect_max_ms = 1000;
  int rc = lat ? 0 : DLOCK_ENOMEM;
  if (rc == 0 && strcmp(argv[3], "conn") == 0) {
    dl_conn *c = NULL;
    rc = dl_conn_new(&cfg, &c);
    for (long i = 0; rc == 0 && i < n; i++) {
      int64_t t0 = now_ns();
      redisReply *r = NULL;
      rc = dl_conn_call(c, 2, ARGV, LENS, &r);
      lat[i] = now_ns() - t0;
      if (r) freeReplyObject(r);
    }
    dl_conn_free(c);
  } else if (rc == 0 && strcmp(argv[3], "poll") == 0) {
    dlock_loop *lp = NULL;
    dl_aconn *c = NULL;
    rc = dlock_loop_new(NULL, &lp);
    if (rc == 0) rc = dl_aconn_new(lp, &cfg, &c);
    for (long i = 0; rc == 0 && i < n; i++) {
      int64_t t0 = now_ns();
      waiter w = {0};
      if (dl_aconn_command(c, 2, ARGV, LENS, 0, on_reply, &w, &rc) == NULL)
        break;
      while (!w.done)
        if (dlock_loop_run(lp, -1) < 0) break;
      rc = w.done ? w.rc : DLOCK_EPROTO;
      lat[i] = now_ns() - t0;
    }
    dl_aconn_free(c);
    dlock_loop_free(lp);
  } else if (rc == 0) {
    fprintf(stderr, "transport: the mode is conn or poll\n");
    return 2;
  }
  if (rc != 0) {
    fprintf(stderr, "transport: %s\n", dlock_strerror(rc));
    return 1;
  }
  qsort(lat, (size_t)n, sizeof *lat, cmp);
  printf("%s: %ld requests, p50 %.1f us, p99 %.1f us\n", argv[3], n,
         (double)lat[n / 2] / 1000, (double)lat[n * 99 / 100] / 1000);
  free(lat);
  return 0;
}
