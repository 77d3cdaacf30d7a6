/* series.c: the one-thread limit of a Redis URL's lock, measured in the
 * same run as the lock: the cycle's own commands (probe.h) sent one step
 * at a time, each to every server at once and timed until a quorum has
 * answered, on plain connections with no client in between. It is what
 * the round trips the algorithm must make cost on these cores, the
 * servers' work for the scripts included: one server's two scripts, or a
 * Redlock's acquire, token write-back (fencing on) and release. */
#include "../../redis/probe.h"
#include "bench.h"

#include <hiredis/hiredis.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SERIES_KEY "bench:series"

/* Sends cmd to every server at once and reads every answer: the time until
 * `quorum` of them had answered (us), or -1 when a server failed or did not
 * answer with an integer. The largest answer goes to *max. */
static int64_t fan_step(redisContext **all, int k, int quorum, const char *cmd,
                        size_t len, long long *max) {
  int64_t t0 = dl_now_us(), tq = -1;
  for (int i = 0; i < k; i++) {
    if (redisAppendFormattedCommand(all[i], cmd, len) != REDIS_OK ||
        !bench_write_now(all[i]))
      return -1;
  }
  bool have[DL_PROBE_SERVERS_MAX] = {false};
  int got = 0;
  bool bad = false;
  while (got < k) {
    struct pollfd pf[DL_PROBE_SERVERS_MAX];
    int idx[DL_PROBE_SERVERS_MAX], np = 0;
    for (int i = 0; i < k; i++) {
      if (have[i]) continue;
      void *rep = NULL;
      if (redisGetReplyFromReader(all[i], &rep) != REDIS_OK) return -1;
      if (rep == NULL) {
        pf[np].fd = all[i]->fd;
        pf[np].events = POLLIN;
        idx[np++] = i;
        continue;
      }
      redisReply *r = rep;
      if (r->type != REDIS_REPLY_INTEGER)
        bad = true;
      else if (r->integer > *max)
        *max = r->integer;
      freeReplyObject(rep);
      have[i] = true;
      if (++got == quorum) tq = dl_now_us() - t0;
    }
    if (got == k) break;
    if (poll(pf, (nfds_t)np, 2000) <= 0) return -1;
    for (int j = 0; j < np; j++)
      if (pf[j].revents && redisBufferRead(all[idx[j]]) != REDIS_OK) return -1;
  }
  return bad ? -1 : tq;
}

/* Formats and sends one step to every server: its quorum time, or -1. */
static int64_t step(redisContext **all, int k, int layout, int which,
                    long long arg, long long *max) {
  char *cmd = NULL;
  size_t len = 0;
  const char *body;
  if (dl_probe_lock_step(layout, which, SERIES_KEY, arg, &cmd, &len, &body) !=
      0)
    return -1;
  int64_t t = fan_step(all, k, k / 2 + 1, cmd, len, max);
  free(cmd);
  return t;
}

double bench_series_p50_us(const bench_opts *o, redisContext *raw, int64_t ms) {
  if (o->cluster) return 0;
  int layout = DL_PROBE_HASH;
  bool fencing = false, hash = false;
  if (strncmp(o->url, "redlock://", 10) == 0) {
    if (dl_probe_redlock_opts(o->url, &fencing, &hash) != 0 || hash) return 0;
    layout = DL_PROBE_PLAIN;
  }
  redisContext *all[DL_PROBE_SERVERS_MAX];
  int k = bench_servers(o, raw, all);
  /* The scripts, loaded on every server first. */
  for (int s = DL_PROBE_ACQUIRE; s <= DL_PROBE_RELEASE; s++) {
    char *cmd = NULL;
    size_t len = 0;
    const char *body;
    if (s == DL_PROBE_FENCE && !fencing) continue;
    if (dl_probe_lock_step(layout, s, SERIES_KEY, 0, &cmd, &len, &body) != 0)
      return 0;
    free(cmd);
    for (int i = 0; i < k; i++) {
      redisReply *r = redisCommand(all[i], "SCRIPT LOAD %s", body);
      if (r == NULL) return 0;
      freeReplyObject(r);
    }
  }
  bench_samples sm = {0};
  int64_t end = dl_now_ms() + ms;
  bool failed = false;
  for (long n = 0; !failed && (n < 100 || dl_now_ms() < end) && n < 20000;
       n++) {
    long long token = 0, ignored = 0;
    int64_t a = step(all, k, layout, DL_PROBE_ACQUIRE, 0, &token);
    int64_t f = fencing && a >= 0
                    ? step(all, k, layout, DL_PROBE_FENCE, token, &ignored)
                    : 0;
    int64_t r = a >= 0 && f >= 0
                    ? step(all, k, layout, DL_PROBE_RELEASE, n, &ignored)
                    : -1;
    failed = r < 0;
    if (!failed) bench_samples_push(&sm, a + f + r);
  }
  bench_samples_sort(&sm);
  double p = failed ? 0 : bench_samples_pct(&sm, 0.5);
  free(sm.v);
  return p;
}
