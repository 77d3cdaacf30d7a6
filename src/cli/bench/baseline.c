/* baseline.c: dlock bench's baselines, measured in the same run and against
 * the same server as the lock, on a plain hiredis connection: the PING
 * round trip, the ceiling (the lock's own acquire and release scripts
 * pipelined on one connection: the most cycles the server can do) and the
 * server's CPU time (INFO cpu). */
#include "../../redis/probe.h" /* the servers, scripts and names */
#include "bench.h"
#include "redisson.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The servers of a redlock:// URL (redis:// URLs, the caller frees), or
 * 0 for another URL; -1 printed. */
static int redlock_servers(const char *url, char **urls) {
  int n = dl_probe_redlock_servers(url, urls, DL_PROBE_SERVERS_MAX);
  if (n < 0) cli_err("malformed redlock:// URL");
  return n < 0 ? -1 : n;
}

/* A plain connection to host:port, authenticated, on database db; NULL
 * printed. */
static redisContext *raw_at(const char *host, int port, const char *unix_path,
                            const dl_endpoint *ep, const char *password) {
  struct timeval tv = {2, 0};
  redisContext *c = unix_path ? redisConnectUnixWithTimeout(unix_path, tv)
                              : redisConnectWithTimeout(host, port, tv);
  if (ep->tls) {
    cli_err("the benchmark's baselines need a plain connection, not TLS");
    if (c) redisFree(c);
    return NULL;
  }
  const char *pw = password ? password : ep->password;
  redisReply *r;
  if (c && !c->err && pw) {
    r = ep->username ? redisCommand(c, "AUTH %s %s", ep->username, pw)
                     : redisCommand(c, "AUTH %s", pw);
    if (r) freeReplyObject(r);
  }
  if (c && !c->err && ep->db) {
    r = redisCommand(c, "SELECT %d", ep->db);
    if (r) freeReplyObject(r);
  }
  if (c && c->err) {
    cli_err("baseline connection: %s", c->errstr);
    redisFree(c);
    return NULL;
  }
  if (c == NULL) cli_err("baseline connection: out of memory");
  return c;
}

/* A cluster's CLUSTER SLOTS, from the first seed of ep that answers (the
 * caller frees), or NULL printed; *via the seed's connection. */
static redisReply *cluster_slots(const dl_endpoint *ep, const char *password,
                                 redisContext **via) {
  for (int i = 0; i < ep->nhosts; i++) {
    redisContext *c =
        raw_at(ep->hosts[i].host, ep->hosts[i].port, NULL, ep, password);
    redisReply *r = c ? redisCommand(c, "CLUSTER SLOTS") : NULL;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements > 0) {
      *via = c;
      return r;
    }
    if (r) freeReplyObject(r);
    if (c) redisFree(c);
  }
  cli_err("baseline connection: no cluster node gave its slot map");
  return NULL;
}

/* The master of `slot` in a CLUSTER SLOTS reply, or of every range but
 * `slot`'s (each master once) into out (up to max): how many. */
static int cluster_masters(const redisReply *r, int slot, bool others,
                           const char **host, int *port, int max) {
  int n = 0;
  for (size_t i = 0; i < r->elements; i++) {
    const redisReply *e = r->element[i];
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
        e->element[2]->type != REDIS_REPLY_ARRAY ||
        e->element[2]->elements < 2)
      continue;
    bool has = slot >= e->element[0]->integer && slot <= e->element[1]->integer;
    const char *h = e->element[2]->element[0]->str;
    int p = (int)e->element[2]->element[1]->integer;
    if (has == others) continue;
    bool seen = false;
    for (int k = 0; k < n; k++)
      seen = seen || (port[k] == p && strcmp(host[k], h) == 0);
    if (!seen && n < max) {
      host[n] = h;
      port[n++] = p;
    }
  }
  return n;
}

#define CEIL_TAG "{bench:ceil}"

redisContext *bench_raw_connect(const char *url, const char *password,
                                const char *key) {
  /* redlock://: its first server (bench_others_connect the rest). */
  char *urls[DL_PROBE_SERVERS_MAX];
  int n = redlock_servers(url, urls);
  if (n < 0) return NULL;
  if (n > 0) {
    redisContext *c = bench_raw_connect(urls[0], password, key);
    for (int i = 0; i < n; i++)
      free(urls[i]);
    return c;
  }
  dl_endpoint ep;
  char err[256];
  if (dl_url_parse(url, &ep, err, sizeof err) != 0) {
    cli_err("%s", err);
    return NULL;
  }
  redisContext *c = NULL;
  if (ep.cluster) {
    /* Cluster: the master of the key's slot. */
    redisContext *via = NULL;
    redisReply *r = cluster_slots(&ep, password, &via);
    if (r) {
      const char *k = key ? key : CEIL_TAG;
      const char *host[1];
      int port[1];
      if (cluster_masters(r, dl_probe_key_slot(k), false, host, port, 1) == 1)
        c = raw_at(host[0], port[0], NULL, &ep, password);
      else
        cli_err("baseline connection: no master serves the slot of %s", k);
      freeReplyObject(r);
      redisFree(via);
    }
    dl_endpoint_clear(&ep);
    return c;
  }
  /* Sentinel: the master the library would connect to (its resolver). */
  char host[256] = "";
  int port = ep.port;
  const char *spw = getenv("DLOCK_SENTINEL_PASSWORD");
  if (ep.master_name &&
      dl_probe_sentinel_master(&ep, spw && *spw ? spw : NULL, host, sizeof host,
                               &port, err, sizeof err) != 0) {
    cli_err("baseline connection: %s", err);
    dl_endpoint_clear(&ep);
    return NULL;
  }
  c = raw_at(ep.master_name ? host : ep.host, port, ep.unix_path, &ep,
             password);
  dl_endpoint_clear(&ep);
  return c;
}

/* redis-cluster://: the masters but the ceiling's into o->others. */
static int cluster_others(bench_opts *o) {
  dl_endpoint ep;
  char err[256];
  if (dl_url_parse(o->url, &ep, err, sizeof err) != 0) {
    cli_err("%s", err);
    return -1;
  }
  redisContext *via = NULL;
  redisReply *r = cluster_slots(&ep, o->password, &via);
  int rc = r ? 0 : -1;
  if (r) {
    const char *host[16];
    int port[16];
    int n =
        cluster_masters(r, dl_probe_key_slot(CEIL_TAG), true, host, port, 16);
    for (int i = 0; i < n && rc == 0; i++) {
      redisContext *c = raw_at(host[i], port[i], NULL, &ep, o->password);
      if (c) o->others[o->nothers++] = c;
      else rc = -1;
    }
    freeReplyObject(r);
    redisFree(via);
  }
  dl_endpoint_clear(&ep);
  if (rc != 0) bench_others_free(o);
  return rc;
}

int bench_others_connect(bench_opts *o) {
  if (o->cluster) return cluster_others(o);
  char *urls[DL_PROBE_SERVERS_MAX];
  int n = redlock_servers(o->url, urls), rc = n < 0 ? -1 : 0;
  for (int i = 1; i < n; i++) {
    redisContext *c =
        rc == 0 ? bench_raw_connect(urls[i], o->password, NULL) : NULL;
    if (c)
      o->others[o->nothers++] = c;
    else
      rc = -1;
  }
  for (int i = 0; i < n; i++)
    free(urls[i]);
  if (rc != 0) bench_others_free(o);
  return rc;
}

void bench_others_free(bench_opts *o) {
  for (int i = 0; i < o->nothers; i++)
    redisFree(o->others[i]);
  o->nothers = 0;
}

double bench_rtt_p50_us(const bench_opts *o, redisContext *raw, int n) {
  double p = bench_ping_p50_us(raw, n);
  for (int i = 0; i < o->nothers; i++) {
    double q = bench_ping_p50_us(o->others[i], n);
    if (q > p) p = q;
  }
  return p;
}

int bench_servers(const bench_opts *o, redisContext *raw, redisContext **all) {
  int k = 0;
  all[k++] = raw;
  for (int i = 0; i < o->nothers && k < DL_PROBE_SERVERS_MAX; i++)
    all[k++] = o->others[i];
  return k;
}

bool bench_write_now(redisContext *c) {
  int done = 0;
  while (!done)
    if (redisBufferWrite(c, &done) != REDIS_OK) return false;
  return true;
}

double bench_fanout_rtt_p50_us(const bench_opts *o, redisContext *raw, int n) {
  if (o->nothers == 0) return 0;
  redisContext *all[DL_PROBE_SERVERS_MAX];
  int k = bench_servers(o, raw, all);
  bench_samples s = {0};
  for (int round = 0; round < n; round++) {
    int64_t t0 = dl_now_us();
    for (int i = 0; i < k; i++) {
      redisAppendCommand(all[i], "PING");
      (void)bench_write_now(all[i]); /* a failure shows at the read */
    }
    for (int i = 0; i < k; i++) {
      void *r = NULL;
      if (redisGetReply(all[i], &r) == REDIS_OK && r) freeReplyObject(r);
    }
    bench_samples_push(&s, dl_now_us() - t0);
  }
  bench_samples_sort(&s);
  double p = bench_samples_pct(&s, 0.5);
  free(s.v);
  return p;
}

double bench_servers_cpu_us(const bench_opts *o, redisContext *raw) {
  double v = bench_server_cpu_us(raw);
  for (int i = 0; i < o->nothers; i++)
    v += bench_server_cpu_us(o->others[i]);
  return v;
}

double bench_server_cpu_us(redisContext *c) {
  redisReply *r = redisCommand(c, "INFO cpu");
  double v = 0;
  if (r && r->type == REDIS_REPLY_STRING) {
    const char *u = strstr(r->str, "used_cpu_user:");
    const char *s = strstr(r->str, "used_cpu_sys:");
    if (u) v += atof(u + 14);
    if (s) v += atof(s + 13);
  }
  if (r) freeReplyObject(r);
  return v * 1e6;
}

int64_t bench_ping_us(redisContext *c) {
  int64_t t0 = dl_now_us();
  redisReply *r = redisCommand(c, "PING");
  if (r) freeReplyObject(r);
  return dl_now_us() - t0;
}

double bench_ping_p50_us(redisContext *c, int n) {
  bench_samples s = {0};
  for (int i = 0; i < n; i++)
    bench_samples_push(&s, bench_ping_us(c));
  bench_samples_sort(&s);
  double p = bench_samples_pct(&s, 0.5);
  free(s.v);
  return p;
}

/* Acquire + release pairs pipelined on one connection for `ms`: the most
 * lock cycles per second the server can execute. The commands are the ones
 * dlock_lock_try_acquire and dlock_lock_release send for a fresh hold with
 * a fixed lease (the same keys and arguments); an error reply makes the
 * ceiling 0 rather than a figure for scripts that stopped half-way. */
static double ceiling_batch(redisContext *c, int64_t ms, const char *tag,
                            int batch);
static double ceiling_tagged(redisContext *c, int64_t ms, const char *tag) {
  return ceiling_batch(c, ms, tag, 256);
}

double bench_ceiling_ops(redisContext *c, int64_t ms) {
  return ceiling_tagged(c, ms, CEIL_TAG);
}

double bench_ceiling_depth_ops(redisContext *c, int64_t ms, int depth) {
  return ceiling_batch(c, ms, CEIL_TAG, depth / 2 > 1 ? depth / 2 : 1);
}

/* One master's share of the cluster-wide ceiling, on its own thread. */
typedef struct ceil_part {
  redisContext *c;
  int64_t ms;
  char tag[48];
  double ops;
} ceil_part;

static void *ceil_thread(void *p) {
  ceil_part *x = p;
  x->ops = ceiling_tagged(x->c, x->ms, x->tag);
  return NULL;
}

double bench_cluster_ceiling_ops(const bench_opts *o, redisContext *raw,
                                 int64_t ms) {
  if (!o->cluster) return 0;
  int n = 1 + o->nothers;
  ceil_part parts[17];
  pthread_t th[17];
  for (int i = 0; i < n; i++) {
    ceil_part *x = &parts[i];
    x->c = i == 0 ? raw : o->others[i - 1];
    x->ms = ms;
    x->ops = 0;
    /* A hash tag this master serves: the first that is not MOVED. */
    x->tag[0] = '\0';
    for (int t = 0; t < 1000 && x->tag[0] == '\0'; t++) {
      char tag[48];
      snprintf(tag, sizeof tag, "{bench:ceil:%d}", t);
      redisReply *r = redisCommand(x->c, "EXISTS %s", tag);
      if (r && r->type == REDIS_REPLY_INTEGER) snprintf(x->tag, sizeof x->tag, "%s", tag);
      if (r) freeReplyObject(r);
      if (r == NULL) return 0;
    }
    if (x->tag[0] == '\0') return 0;
  }
  int started = 0;
  for (; started < n; started++)
    if (pthread_create(&th[started], NULL, ceil_thread, &parts[started]) != 0)
      break;
  double sum = 0;
  for (int i = 0; i < started; i++) {
    pthread_join(th[i], NULL);
    sum += parts[i].ops;
  }
  return started == n ? sum : 0;
}

static double ceiling_batch(redisContext *c, int64_t ms, const char *tag,
                            int batch) {
  /* A cluster's master with shard channels: the scripts the library sends
   * there (SPUBLISH). */
  bool sharded = false;
  redisReply *r = redisCommand(c, "CLUSTER INFO");
  bool cluster = r && r->type == REDIS_REPLY_STRING;
  if (r) freeReplyObject(r);
  if (cluster) {
    r = redisCommand(c, "PUBSUB SHARDNUMSUB");
    sharded = r && r->type == REDIS_REPLY_ARRAY;
    if (r) freeReplyObject(r);
  }
  /* One batch of `batch` cycles (on as many keys), formatted once: the
   * client's own cost stays out of the figure. */
  char *cmds = NULL;
  size_t len = 0;
  for (int i = 0; i < batch; i++) {
    char key[64], *one = NULL;
    size_t n = 0;
    const char *acq, *rel;
    snprintf(key, sizeof key, "%s:%d", tag, i);
    char *grown = NULL;
    if (dl_probe_lock_cycle(key, sharded, &one, &n, &acq, &rel) == 0) {
      if (i == 0) {
        r = redisCommand(c, "SCRIPT LOAD %s", acq);
        if (r) freeReplyObject(r);
        r = redisCommand(c, "SCRIPT LOAD %s", rel);
        if (r) freeReplyObject(r);
      }
      grown = realloc(cmds, len + n);
    }
    if (grown) {
      memcpy(grown + len, one, n);
      len += n;
      cmds = grown;
    }
    free(one);
    if (grown == NULL) {
      free(cmds);
      return 0;
    }
  }
  long pairs = 0;
  int64_t t0 = dl_now_ms(), end = t0 + ms;
  while (dl_now_ms() < end) {
    if (redisAppendFormattedCommand(c, cmds, len) != REDIS_OK) break;
    bool bad = false;
    for (int i = 0; i < 2 * batch; i++) {
      void *rep = NULL;
      if (redisGetReply(c, &rep) != REDIS_OK) {
        free(cmds);
        return 0;
      }
      redisReply *x = rep;
      /* acquire: the token (taken); release: 1 + subscribers */
      if (x->type != REDIS_REPLY_INTEGER) bad = true;
      freeReplyObject(rep);
    }
    if (bad) {
      pairs = -1;
      break;
    }
    pairs += batch;
  }
  free(cmds);
  if (pairs < 0) return 0;
  return (double)pairs * 1000.0 / (double)(dl_now_ms() - t0);
}

double bench_client_ping_p50_us(const cli_global *g, const bench_opts *o,
                                int n) {
  dlock_client *c = bench_client(g, o, 0);
  if (c == NULL) return 0;
  bench_samples s = {0};
  for (int i = 0; i < n; i++) {
    int64_t t0 = dl_now_us();
    if (dlock_client_ping(c) == 0) bench_samples_push(&s, dl_now_us() - t0);
  }
  dlock_client_close(c);
  bench_samples_sort(&s);
  double p = bench_samples_pct(&s, 0.5);
  free(s.v);
  return p;
}

/* Redisson's ceiling (redisson.h). The three replies of one cycle: taken ({-1, token}), freed (1), the
 * latch deleted (an integer). */
static bool cycle_ok(redisReply *r[3]) {
  return r[0]->type == REDIS_REPLY_ARRAY && r[0]->elements == 2 &&
         r[0]->element[0]->type == REDIS_REPLY_INTEGER &&
         r[0]->element[0]->integer == -1 && r[1]->type == REDIS_REPLY_INTEGER &&
         r[1]->integer == 1 && r[2]->type == REDIS_REPLY_INTEGER;
}

double bench_redisson_ceiling_ops(struct redisContext *c, int64_t ms,
                                  double *cpu_us_per_cycle) {
  if (cpu_us_per_cycle) *cpu_us_per_cycle = 0;
  char lsha[41], usha[41];
  if (bench_redisson_load(c, lsha, usha) != 0) return 0;
  /* 256 cycles a batch on 256 keys, formatted once, as dlock's ceiling. */
  const int batch = 256;
  char *cmds = NULL;
  size_t len = 0;
  for (int i = 0; i < batch; i++) {
    char key[64], *one = NULL;
    snprintf(key, sizeof key, "bench:redisson:%d", i);
    int n = bench_redisson_format(&one, lsha, usha, key);
    char *grown = n > 0 ? realloc(cmds, len + (size_t)n) : NULL;
    if (grown) {
      memcpy(grown + len, one, (size_t)n);
      len += (size_t)n;
      cmds = grown;
    }
    free(one);
    if (grown == NULL) {
      free(cmds);
      return 0;
    }
  }
  long cycles = 0;
  double cpu0 = bench_server_cpu_us(c);
  int64_t t0 = dl_now_ms(), end = t0 + ms;
  while (dl_now_ms() < end && cycles >= 0) {
    if (redisAppendFormattedCommand(c, cmds, len) != REDIS_OK) break;
    for (int i = 0; i < batch && cycles >= 0; i++) {
      redisReply *r[3] = {NULL, NULL, NULL};
      bool got = true;
      for (int k = 0; k < 3; k++)
        got = got && redisGetReply(c, (void **)&r[k]) == REDIS_OK;
      if (!got || !cycle_ok(r)) cycles = -1;
      for (int k = 0; k < 3; k++)
        if (r[k]) freeReplyObject(r[k]);
    }
    if (cycles >= 0) cycles += batch;
  }
  int64_t t1 = dl_now_ms();
  double cpu1 = bench_server_cpu_us(c);
  free(cmds);
  if (cycles <= 0 || t1 <= t0) return 0;
  if (cpu_us_per_cycle) *cpu_us_per_cycle = (cpu1 - cpu0) / (double)cycles;
  return (double)cycles * 1000.0 / (double)(t1 - t0);
}
