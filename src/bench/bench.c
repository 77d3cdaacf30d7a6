/* bench.c: dlock bench, the project's benchmark tool. Every run measures, in
 * the same run and against the same server, the baselines it is compared
 * with: the PING round trip and the ceiling (the lock's own acquire and
 * release scripts pipelined on one connection: the most cycles the server
 * can do), and the server's CPU time per operation (INFO cpu). */
#include "../cli/cli.h"
#include "../cli/duration.h"
#include "../redis/redis.h" /* dl_scripts, dl_derived_into */
#include "../client/client.h"

#include <errno.h>
#include <getopt.h>
#include <hiredis/hiredis.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct bench_opts {
  const char *scenario;
  int threads, processes, locks, periods, connections, starvation_ms;
  const char *kind; /* contended: "lock", "fair" or "semaphore" */
  int permits;      /* contended semaphore: its permits (default 1) */
  int64_t secs_ms, hold_ms, lease_ms;
  bool json;
  const char *plot;
  const char *url, *password; /* for the interleaved baseline */
} bench_opts;

/* ---- samples ---- */

typedef struct samples {
  uint32_t *v;
  size_t n, cap;
} samples;

static void push(samples *s, int64_t us) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 4096;
    uint32_t *v = realloc(s->v, cap * sizeof *v);
    if (v == NULL) return; /* drop the sample rather than fail the run */
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = us < 0 ? 0 : us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static void merge(samples *into, const samples *from) {
  for (size_t i = 0; i < from->n; i++) push(into, from->v[i]);
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

static double pct(samples *s, double p) {
  if (s->n == 0) return 0;
  size_t i = (size_t)(p * (double)s->n);
  if (i >= s->n) i = s->n - 1;
  return s->v[i];
}

/* ---- the raw baseline connection (hiredis, blocking) ---- */

static redisContext *raw_connect(const char *url, const char *password) {
  dl_endpoint ep;
  char err[256];
  if (dl_url_parse(url, &ep, err, sizeof err) != 0) {
    cli_err("%s", err);
    return NULL;
  }
  struct timeval tv = {2, 0};
  redisContext *c = ep.unix_path
                        ? redisConnectUnixWithTimeout(ep.unix_path, tv)
                        : redisConnectWithTimeout(ep.host, ep.port, tv);
  if (ep.tls) {
    cli_err("the benchmark's baselines need a plain connection, not TLS");
    if (c) redisFree(c);
    c = NULL;
  }
  const char *pw = password ? password : ep.password;
  redisReply *r;
  if (c && !c->err && pw) {
    r = ep.username ? redisCommand(c, "AUTH %s %s", ep.username, pw)
                    : redisCommand(c, "AUTH %s", pw);
    if (r) freeReplyObject(r);
  }
  if (c && !c->err && ep.db) {
    r = redisCommand(c, "SELECT %d", ep.db);
    if (r) freeReplyObject(r);
  }
  dl_endpoint_clear(&ep);
  if (c && c->err) {
    cli_err("baseline connection: %s", c->errstr);
    redisFree(c);
    return NULL;
  }
  return c;
}

static double server_cpu_us(redisContext *c) {
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

static double ping_p50_us(redisContext *c, int n) {
  samples s = {0};
  for (int i = 0; i < n; i++) {
    int64_t t0 = dl_now_us();
    redisReply *r = redisCommand(c, "PING");
    if (r) freeReplyObject(r);
    push(&s, dl_now_us() - t0);
  }
  qsort(s.v, s.n, sizeof *s.v, cmp_u32);
  double p = pct(&s, 0.5);
  free(s.v);
  return p;
}

/* Acquire + release pairs pipelined on one connection for `ms`: the most
 * lock cycles per second the server can execute. The commands are the ones
 * dlock_lock_try_acquire and dlock_lock_release send for a fresh hold with
 * a fixed lease (the same keys and arguments); an error reply makes the
 * ceiling 0 rather than a figure for scripts that stopped half-way. */
static double ceiling_ops(redisContext *c, int64_t ms) {
  dl_scripts_init();
  const dl_script *acq = &dl_scripts[DL_SCRIPT_LOCK_ACQUIRE];
  const dl_script *rel = &dl_scripts[DL_SCRIPT_LOCK_RELEASE];
  redisReply *r = redisCommand(c, "SCRIPT LOAD %s", acq->body);
  if (r) freeReplyObject(r);
  r = redisCommand(c, "SCRIPT LOAD %s", rel->body);
  if (r) freeReplyObject(r);
  /* One batch of 256 pairs (on 256 keys), formatted once: the client's
   * own cost stays out of the figure. */
  const int batch = 256;
  char *cmds = NULL;
  size_t len = 0;
  char key[64], tok[96], hand[96], chan[96], q[96], w[96], latch[128];
  for (int i = 0; i < batch; i++) {
    snprintf(key, sizeof key, "bench:ceil:%d", i);
    dl_derived_into(tok, sizeof tok, "redisson_lock_token", key);
    dl_derived_into(hand, sizeof hand, "dlock_handoff", key);
    dl_derived_into(chan, sizeof chan, "redisson_lock__channel", key);
    dl_derived_into(q, sizeof q, "dlock_lock_queue", key);
    dl_derived_into(w, sizeof w, "dlock_lock_waiters", key);
    char *a = NULL, *r2 = NULL;
    int la = redisFormatCommand(&a, "EVALSHA %s 3 %s %s %s 10000 bench:ceil:1 "
                                "%s 0 0 600", acq->sha, key, tok, hand, "");
    /* The release's latch (docs/WIRE.md) is written as by the library; it
     * lives 1 ms here, not 3 command timeouts, so that the batches sent
     * again with the same request ids do not fill the server. A first send
     * (the last argument 0) never reads it. */
    dl_derived_into(latch, sizeof latch, "redisson_unlock_latch", key);
    strcat(latch, ":0123456789abcdef:1");
    int lr = redisFormatCommand(&r2, "EVALSHA %s 7 %s %s %s %s %s %s %s 0 "
                                "10000 bench:ceil:1 1 1 0", rel->sha, key, chan,
                                q, w, tok, hand, latch);
    char *grown = la > 0 && lr > 0 ? realloc(cmds, len + (size_t)la + (size_t)lr)
                                   : NULL;
    if (grown) {
      memcpy(grown + len, a, (size_t)la);
      memcpy(grown + len + la, r2, (size_t)lr);
      len += (size_t)la + (size_t)lr;
      cmds = grown;
    }
    redisFreeCommand(a);
    redisFreeCommand(r2);
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
      /* acquire: {1, token}; release: 1 + subscribers */
      if (i % 2 == 0 ? x->type != REDIS_REPLY_ARRAY
                     : x->type != REDIS_REPLY_INTEGER)
        bad = true;
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

/* ---- shared run state ---- */

typedef struct run_result {
  long ops;          /* acquire+release cycles */
  double hold_us;    /* summed time held (contended) */
  uint64_t wakeups;  /* waiters woken by unlock messages */
  long errors;
  samples lat;       /* cycle (uncontended) or wait (contended), in us */
  samples ping;      /* PINGs interleaved with the cycles (one thread) */
} run_result;

typedef struct worker {
  dlock_client *c;
  int index;
  const bench_opts *o;
  int64_t start_us, end_us;
  const char *lock_name; /* contended: the one lock */
  run_result res;
} worker;

static dlock_client *bench_client(const cli_global *g, const bench_opts *o,
                                  int64_t lease_ms) {
  dlock_client_options opt;
  cli_options(g, lease_ms, &opt);
  opt.client_name = "dlock-bench";
  opt.connections = o->connections;
  opt.command_timeout_ms = 10000;
  opt.starvation_ms = o->starvation_ms;
  dlock_client *c = NULL;
  if (dlock_client_open(&opt, &c) != 0)
    cli_err("%s", dlock_client_open_errmsg());
  return c;
}

static void sleep_until_us(int64_t t) {
  int64_t d = t - dl_now_us();
  if (d <= 0) return;
  struct timespec ts = {d / 1000000, (d % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static redisContext *raw_connect(const char *url, const char *password);

static void *uncontended_worker(void *p) {
  worker *w = p;
  /* Alone, the worker measures the baseline itself, a PING after each
   * cycle on a plain connection: same moment, same conditions (this
   * machine's round trip drifts by a factor of three within minutes). */
  redisContext *raw = NULL;
  if (w->o->threads == 1 && w->o->processes == 1)
    raw = raw_connect(w->o->url, w->o->password);
  char name[64];
  snprintf(name, sizeof name, "bench:u:%d:%d", (int)getpid(), w->index);
  dlock_lock *l;
  if (dlock_lock_new(w->c, name, NULL, &l) != 0) {
    w->res.errors++;
    return NULL;
  }
  sleep_until_us(w->start_us);
  while (dl_now_us() < w->end_us) {
    int64_t t0 = dl_now_us();
    int rc = dlock_lock_try_acquire(l, 0, 10000, NULL);
    if (rc == 0 && (rc = dlock_lock_release(l)) == 1) rc = 0;
    if (rc != 0) {
      if (w->res.errors++ == 0)
        fprintf(stderr, "dlock bench: %s (%s)\n", dlock_err_name(rc),
                dlock_client_errmsg(w->c));
      continue;
    }
    push(&w->res.lat, dl_now_us() - t0);
    w->res.ops++;
    if (raw) {
      int64_t p0 = dl_now_us();
      redisReply *r = redisCommand(raw, "PING");
      if (r) freeReplyObject(r);
      push(&w->res.ping, dl_now_us() - p0);
    }
  }
  if (raw) redisFree(raw);
  dlock_lock_free(l);
  return NULL;
}

static void *contended_worker(void *p) {
  worker *w = p;
  dlock_lock *l = NULL;
  dlock_semaphore *sem = NULL;
  dlock_permits *pm = NULL;
  char id[DLOCK_PERMIT_ID_LEN];
  bool is_sem = strcmp(w->o->kind, "semaphore") == 0,
       is_pm = strcmp(w->o->kind, "permits") == 0;
  int e = is_sem  ? dlock_semaphore_new(w->c, w->lock_name, &sem)
          : is_pm ? dlock_permits_new(w->c, w->lock_name, &pm)
          : strcmp(w->o->kind, "fair") == 0
              ? dlock_lock_new_fair(w->c, w->lock_name, NULL, 0, &l)
              : dlock_lock_new(w->c, w->lock_name, NULL, &l);
  if (e != 0) {
    w->res.errors++;
    return NULL;
  }
  sleep_until_us(w->start_us);
  for (;;) {
    int64_t t0 = dl_now_us();
    if (t0 >= w->end_us) break;
    int64_t wait = (w->end_us - t0) / 1000 + 1;
    int rc = is_sem  ? dlock_semaphore_acquire(sem, 1, wait)
             : is_pm ? dlock_permits_acquire(pm, wait, 10000, id)
                     : dlock_lock_try_acquire(l, wait, 10000, NULL);
    int64_t t1 = dl_now_us();
    if (rc == DLOCK_ELOCKED) break; /* the run ended while waiting */
    if (rc != 0) {
      w->res.errors++;
      continue;
    }
    push(&w->res.lat, t1 - t0);
    if (w->o->hold_ms > 0) {
      struct timespec ts = {w->o->hold_ms / 1000,
                            (w->o->hold_ms % 1000) * 1000000};
      nanosleep(&ts, NULL);
    }
    int64_t t2 = dl_now_us();
    if (is_sem  ? dlock_semaphore_release(sem, 1) != 0
        : is_pm ? dlock_permits_release(pm, id) != 0
                : dlock_lock_release(l) != 1)
      w->res.errors++;
    w->res.hold_us += (double)(t2 - t1);
    w->res.ops++;
  }
  dlock_lock_free(l);
  dlock_semaphore_free(sem);
  dlock_permits_free(pm);
  return NULL;
}

/* Runs T threads of `fn` on one client in this process. */
static int run_threads(const cli_global *g, const bench_opts *o,
                       void *(*fn)(void *), const char *lock_name,
                       int64_t start_us, int64_t end_us, run_result *out) {
  dlock_client *c = bench_client(g, o, 0);
  if (c == NULL) return -1;
  worker *ws = calloc((size_t)o->threads, sizeof *ws);
  pthread_t *th = calloc((size_t)o->threads, sizeof *th);
  if (!ws || !th) {
    free(ws);
    free(th);
    dlock_client_close(c);
    return -1;
  }
  for (int i = 0; i < o->threads; i++) {
    ws[i] = (worker){c, i, o, start_us, end_us, lock_name, {0}};
    pthread_create(&th[i], NULL, fn, &ws[i]);
  }
  for (int i = 0; i < o->threads; i++) {
    pthread_join(th[i], NULL);
    out->ops += ws[i].res.ops;
    out->hold_us += ws[i].res.hold_us;
    out->errors += ws[i].res.errors;
    merge(&out->lat, &ws[i].res.lat);
    merge(&out->ping, &ws[i].res.ping);
    free(ws[i].res.lat.v);
    free(ws[i].res.ping.v);
  }
  dlock_client_stats st;
  dlock_client_stats_get(c, &st);
  out->wakeups += st.wakeups;
  free(ws);
  free(th);
  dlock_client_close(c);
  return 0;
}

/* Runs P processes (fork) of T threads each; results come back over pipes. */
static int run_processes(const cli_global *g, const bench_opts *o,
                         void *(*fn)(void *), const char *lock_name,
                         int64_t start_us, int64_t end_us, run_result *out,
                         uint64_t *max_proc_wakeups) {
  pid_t *kids = calloc((size_t)o->processes, sizeof *kids);
  int *fds = calloc((size_t)o->processes, sizeof *fds);
  if (!kids || !fds) return -1;
  for (int p = 0; p < o->processes; p++) {
    int pfd[2];
    if (pipe(pfd) != 0) return -1;
    kids[p] = fork();
    if (kids[p] == 0) {
      close(pfd[0]);
      run_result r = {0};
      int rc = run_threads(g, o, fn, lock_name, start_us, end_us, &r);
      FILE *f = fdopen(pfd[1], "w");
      fwrite(&r, sizeof r, 1, f);
      if (r.lat.n) fwrite(r.lat.v, sizeof *r.lat.v, r.lat.n, f);
      if (r.ping.n) fwrite(r.ping.v, sizeof *r.ping.v, r.ping.n, f);
      fclose(f);
      _exit(rc == 0 ? 0 : 1);
    }
    close(pfd[1]);
    fds[p] = pfd[0];
  }
  int bad = 0;
  for (int p = 0; p < o->processes; p++) {
    FILE *f = fdopen(fds[p], "r");
    run_result r;
    if (fread(&r, sizeof r, 1, f) == 1) {
      samples s = {calloc(r.lat.n ? r.lat.n : 1, sizeof(uint32_t)), 0,
                   r.lat.n};
      if (s.v && r.lat.n && fread(s.v, sizeof *s.v, r.lat.n, f) == r.lat.n) {
        s.n = r.lat.n;
        merge(&out->lat, &s);
      }
      free(s.v);
      samples q = {calloc(r.ping.n ? r.ping.n : 1, sizeof(uint32_t)), 0,
                   r.ping.n};
      if (q.v && r.ping.n &&
          fread(q.v, sizeof *q.v, r.ping.n, f) == r.ping.n) {
        q.n = r.ping.n;
        merge(&out->ping, &q);
      }
      free(q.v);
      out->ops += r.ops;
      out->hold_us += r.hold_us;
      out->errors += r.errors;
      out->wakeups += r.wakeups;
      if (r.wakeups > *max_proc_wakeups) *max_proc_wakeups = r.wakeups;
    } else {
      bad = 1;
    }
    fclose(f);
    int st;
    waitpid(kids[p], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) bad = 1;
  }
  free(kids);
  free(fds);
  return bad ? -1 : 0;
}

/* ---- output ---- */

typedef struct report {
  const char *scenario;
  const char *kind;
  int starvation_ms; /* contended */
  int threads, processes;
  double ops_per_sec, p50, p99, max;
  double rtt_p50, ceiling, cpu_per_op;
  long errors;
  /* contended */
  double utilisation, wait_p50, wait_p99, wait_max, wakeups_per_acquire;
  double max_wakeups_per_unlock_per_process;
  /* watchdog */
  long locks, lost;
  double renewal_rt_per_period, client_cpu_share, bytes_per_lock;
} report;

static void print_report(const report *r, bool json) {
  if (json) {
    printf("{\"scenario\":\"%s\",\"threads\":%d,\"processes\":%d,"
           "\"ops_per_sec\":%.0f,\"p50_us\":%.1f,\"p99_us\":%.1f,"
           "\"max_us\":%.1f,\"baseline_rtt_p50_us\":%.1f,"
           "\"ceiling_ops_per_sec\":%.0f,\"server_cpu_us_per_op\":%.2f,"
           "\"errors\":%ld",
           r->scenario, r->threads, r->processes, r->ops_per_sec, r->p50,
           r->p99, r->max, r->rtt_p50, r->ceiling, r->cpu_per_op, r->errors);
    if (strcmp(r->scenario, "contended") == 0)
      printf(",\"kind\":\"%s\",\"starvation_ms\":%d", r->kind,
             r->starvation_ms);
    if (strcmp(r->scenario, "contended") == 0)
      printf(",\"utilisation\":%.3f,\"wait_p50_us\":%.1f,\"wait_p99_us\":%.1f,"
             "\"wait_max_us\":%.1f,\"wakeups_per_acquire\":%.2f,"
             "\"max_wakeups_per_unlock_per_process\":%.2f",
             r->utilisation, r->wait_p50, r->wait_p99, r->wait_max,
             r->wakeups_per_acquire, r->max_wakeups_per_unlock_per_process);
    if (strcmp(r->scenario, "watchdog") == 0)
      printf(",\"locks\":%ld,\"lost\":%ld,"
             "\"renewal_round_trips_per_period\":%.1f,"
             "\"client_cpu_share\":%.4f,\"bytes_per_lock\":%.0f",
             r->locks, r->lost, r->renewal_rt_per_period, r->client_cpu_share,
             r->bytes_per_lock);
    printf("}\n");
    fflush(stdout);
    return;
  }
  bool cont = strcmp(r->scenario, "contended") == 0;
  printf("%-11s %3d thr x %2d proc  %9.0f ops/s  p50 %7.1f us  p99 %8.1f us"
         "  max %9.1f us%s%s\n",
         r->scenario, r->threads, r->processes, r->ops_per_sec, r->p50, r->p99,
         r->max, cont ? "  kind " : "", cont ? r->kind : "");
  printf("  baselines: PING p50 %.1f us (2 x = %.1f us), ceiling %.0f "
         "cycles/s; server CPU %.2f us/op; errors %ld\n",
         r->rtt_p50, 2 * r->rtt_p50, r->ceiling, r->cpu_per_op, r->errors);
  if (strcmp(r->scenario, "uncontended") == 0)
    printf("  ratios: p50 / (2 x PING) = %.2f, ops / ceiling = %.2f\n",
           r->p50 / (2 * r->rtt_p50), r->ops_per_sec / r->ceiling);
  if (strcmp(r->scenario, "contended") == 0)
    printf("  utilisation %.3f, wait p50 %.0f us, p99 %.0f us, max %.0f us, "
           "wakeups/acquire %.2f, max wakeups/unlock/process %.2f\n",
           r->utilisation, r->wait_p50, r->wait_p99, r->wait_max,
           r->wakeups_per_acquire, r->max_wakeups_per_unlock_per_process);
  if (strcmp(r->scenario, "watchdog") == 0)
    printf("  %ld locks, lost %ld, renewal round trips/period %.1f "
           "(%.0f locks each), client CPU %.2f%%, %.0f bytes/lock\n",
           r->locks, r->lost, r->renewal_rt_per_period,
           r->renewal_rt_per_period > 0
               ? (double)r->locks / r->renewal_rt_per_period
               : 0,
           100 * r->client_cpu_share, r->bytes_per_lock);
  fflush(stdout);
}

/* ---- scenarios ---- */

static int measure(const cli_global *g, const bench_opts *o, redisContext *raw,
                   report *r, samples *keep) {
  memset(r, 0, sizeof *r);
  r->scenario = o->scenario;
  r->threads = o->threads;
  r->processes = o->processes;
  r->kind = o->kind;
  r->starvation_ms = o->starvation_ms;
  r->rtt_p50 = ping_p50_us(raw, 2000);
  r->ceiling = ceiling_ops(raw, 1000);
  char lock_name[64];
  snprintf(lock_name, sizeof lock_name, "bench:c:%d:%lld", (int)getpid(),
           (long long)dl_now_us());
  run_result res = {0};
  uint64_t max_proc_wakeups = 0;
  bool contended = strcmp(o->scenario, "contended") == 0;
  bool sem = strcmp(o->kind, "semaphore") == 0,
       pm = strcmp(o->kind, "permits") == 0;
  if (contended && (sem || pm)) {
    /* Its permits, set before any worker starts. */
    int e = -1;
    dlock_client *c = bench_client(g, o, 0);
    dlock_semaphore *s = NULL;
    dlock_permits *p = NULL;
    if (c && sem && dlock_semaphore_new(c, lock_name, &s) == 0)
      e = dlock_semaphore_try_set_permits(s, o->permits);
    if (c && pm && dlock_permits_new(c, lock_name, &p) == 0)
      e = dlock_permits_try_set_permits(p, o->permits);
    dlock_semaphore_free(s);
    dlock_permits_free(p);
    dlock_client_close(c);
    if (e != 1) {
      cli_err("cannot set the semaphore's permits");
      return -1;
    }
  }
  double cpu0 = server_cpu_us(raw);
  int64_t start = dl_now_us() + 300000; /* everyone connected by then */
  int64_t end = start + o->secs_ms * 1000;
  int rc = run_processes(g, o, contended ? contended_worker : uncontended_worker,
                         lock_name, start, end, &res, &max_proc_wakeups);
  double cpu1 = server_cpu_us(raw);
  if (rc != 0) cli_err("a benchmark process failed");
  double secs = (double)o->secs_ms / 1000;
  if (res.lat.n) qsort(res.lat.v, res.lat.n, sizeof *res.lat.v, cmp_u32);
  r->ops_per_sec = (double)res.ops / secs;
  r->p50 = pct(&res.lat, 0.5);
  r->p99 = pct(&res.lat, 0.99);
  r->max = pct(&res.lat, 1.0);
  r->cpu_per_op = res.ops ? (cpu1 - cpu0) / (double)res.ops : 0;
  r->errors = res.errors;
  if (res.ping.n > 0) { /* interleaved: the fairer baseline */
    qsort(res.ping.v, res.ping.n, sizeof *res.ping.v, cmp_u32);
    r->rtt_p50 = pct(&res.ping, 0.5);
    /* (server_cpu_us_per_op then includes those PINGs too) */
  }
  free(res.ping.v);
  if (contended) {
    r->utilisation = res.hold_us / (secs * 1e6);
    r->wait_p50 = r->p50;
    r->wait_p99 = r->p99;
    r->wait_max = r->max;
    r->wakeups_per_acquire = res.ops ? (double)res.wakeups / res.ops : 0;
    r->max_wakeups_per_unlock_per_process =
        res.ops ? (double)max_proc_wakeups / res.ops : 0;
  }
  if (keep) *keep = res.lat;
  else free(res.lat.v);
  return rc;
}

static void on_lost_count(dlock_lock *l, const char *owner, void *ud) {
  (void)l;
  (void)owner;
  __atomic_add_fetch((long *)ud, 1, __ATOMIC_RELAXED);
}

typedef struct wd_acq {
  dlock_lock **locks;
  int from, to;
  long errors;
} wd_acq;

static void *wd_acquire(void *p) {
  wd_acq *a = p;
  for (int i = a->from; i < a->to; i++)
    if (dlock_lock_try_acquire(a->locks[i], 0, 0, NULL) != 0) a->errors++;
  return NULL;
}

static double cpu_secs(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static int watchdog_scenario(const cli_global *g, const bench_opts *o,
                             redisContext *raw, report *r) {
  memset(r, 0, sizeof *r);
  r->scenario = "watchdog";
  r->threads = 1;
  r->processes = 1;
  r->rtt_p50 = ping_p50_us(raw, 2000);
  r->ceiling = ceiling_ops(raw, 1000);
  int k = o->locks;
  r->locks = k;
  dlock_client *c = bench_client(g, o, o->lease_ms);
  if (c == NULL) return -1;
  long lost = 0;
  dlock_lock **locks = calloc((size_t)k, sizeof *locks);
  if (locks == NULL) return -1;
  struct mallinfo2 m0 = mallinfo2();
  char name[64];
  for (int i = 0; i < k; i++) {
    /* 16-byte names whatever the pid and the count: the memory per lock
     * depends on the name's length (docs/PERFORMANCE.md). */
    snprintf(name, sizeof name, "wd:%06x:%06d", (unsigned)getpid() & 0xffffff,
             i % 1000000);
    if (dlock_lock_new(c, name, "w", &locks[i]) != 0) return -1;
    dlock_lock_on_lost(locks[i], on_lost_count, &lost);
  }
  /* Acquire from several threads: requests pipeline over the connection. */
  enum { NT = 16 };
  pthread_t th[NT];
  wd_acq a[NT];
  for (int t = 0; t < NT; t++) {
    a[t] = (wd_acq){locks, k * t / NT, k * (t + 1) / NT, 0};
    pthread_create(&th[t], NULL, wd_acquire, &a[t]);
  }
  for (int t = 0; t < NT; t++) {
    pthread_join(th[t], NULL);
    r->errors += a[t].errors;
  }
  struct mallinfo2 m1 = mallinfo2();
  r->bytes_per_lock = (double)(m1.uordblks - m0.uordblks) / k;
  dlock_client_stats s0, s1;
  dlock_client_stats_get(c, &s0);
  double cpu0 = cpu_secs(), scpu0 = server_cpu_us(raw);
  int64_t t0 = dl_now_ms();
  int64_t end = t0 + o->lease_ms * o->periods;
  while (dl_now_ms() < end) {
    struct timespec ts = {0, 50000000};
    nanosleep(&ts, NULL);
  }
  double wall = (double)(dl_now_ms() - t0) / 1000;
  double cpu = cpu_secs() - cpu0, scpu = server_cpu_us(raw) - scpu0;
  dlock_client_stats_get(c, &s1);
  /* Every lock still held? */
  long missing = 0;
  for (int i = 0; i < k; i++)
    if (dlock_lock_is_lost(locks[i])) missing++;
  r->lost = lost > missing ? lost : missing;
  r->client_cpu_share = cpu / wall;
  long renewed = (long)(s1.renewals - s0.renewals);
  /* Round trips per renewal of all k locks, from the counters rather than
   * the wall time: a round cut by the window's end would read short. */
  r->renewal_rt_per_period =
      renewed > 0
          ? (double)(s1.renewal_calls - s0.renewal_calls) * k / (double)renewed
          : 0;
  r->ops_per_sec = renewed / wall;
  r->cpu_per_op = renewed ? scpu / (double)renewed : 0;
  for (int i = 0; i < k; i++) {
    dlock_lock_release(locks[i]);
    dlock_lock_free(locks[i]);
  }
  free(locks);
  dlock_client_close(c);
  return 0;
}

/* ---- plot ---- */

static int plot(const cli_global *g, bench_opts o, redisContext *raw,
                const char *path) {
  char dir[] = "/tmp/dlock-plot-XXXXXX";
  if (mkdtemp(dir) == NULL) return -1;
  char tp[128], lp[128], gp[128];
  snprintf(tp, sizeof tp, "%s/throughput.dat", dir);
  snprintf(lp, sizeof lp, "%s/latency.dat", dir);
  snprintf(gp, sizeof gp, "%s/plot.gp", dir);
  FILE *t = fopen(tp, "w");
  if (t == NULL) return -1;
  static const int sweep[] = {1, 2, 4, 8, 16, 32, 64};
  int top = o.threads;
  samples last = {0};
  for (size_t i = 0; i < sizeof sweep / sizeof sweep[0]; i++) {
    if (sweep[i] > top && i > 0) break;
    o.threads = sweep[i];
    report r;
    free(last.v);
    last = (samples){0};
    if (measure(g, &o, raw, &r, &last) != 0) break;
    print_report(&r, o.json);
    fprintf(t, "%d %.0f %.0f\n", o.threads * o.processes, r.ops_per_sec,
            r.ceiling);
  }
  fclose(t);
  FILE *l = fopen(lp, "w");
  if (l == NULL) return -1;
  for (size_t i = 0; i < last.n; i += last.n / 2000 + 1)
    fprintf(l, "%u %.5f\n", last.v[i], (double)i / (double)last.n);
  if (last.n) fprintf(l, "%u 1\n", last.v[last.n - 1]);
  fclose(l);
  free(last.v);
  FILE *s = fopen(gp, "w");
  if (s == NULL) return -1;
  fprintf(s,
          "set terminal svg size 1100,450 dynamic background '#ffffff'\n"
          "set output '%s'\n"
          "set multiplot layout 1,2 title 'dlock bench %s'\n"
          "set title 'throughput against concurrency'\n"
          "set xlabel 'threads x processes'\nset ylabel 'cycles/s'\n"
          "set logscale x 2\nset key top left\nset grid\n"
          "plot '%s' using 1:2 with linespoints title 'dlock', "
          "'%s' using 1:3 with lines dashtype 2 title 'ceiling (pipelined)'\n"
          "unset logscale x\n"
          "set title 'latency distribution (last run)'\n"
          "set xlabel 'microseconds'\nset ylabel 'fraction of cycles'\n"
          "set logscale x 10\n"
          "plot '%s' using 1:2 with lines title '%s'\n"
          "unset multiplot\n",
          path, o.scenario, tp, tp, lp,
          strcmp(o.scenario, "contended") == 0 ? "wait" : "cycle");
  fclose(s);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "gnuplot '%s'", gp);
  int rc = system(cmd);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) cli_err("could not remove %s", dir);
  if (rc != 0) {
    cli_err("gnuplot failed (is it installed? apt-get install gnuplot)");
    return -1;
  }
  if (!o.json) printf("plot written to %s\n", path);
  return 0;
}

static const char *bench_help =
    "usage: dlock bench [options] SCENARIO\n"
    "Measures the lock against the server, beside the baselines measured in "
    "the same run:\nthe PING round trip and the ceiling (the lock's "
    "scripts pipelined on one\nconnection), and the server's CPU per "
    "operation.\n\n"
    "scenarios:\n"
    "  uncontended   T threads in one process, each its own lock; latency = "
    "one\n                acquire+release cycle\n"
    "  contended     P processes x T threads on one lock, holding it --hold "
    "each cycle;\n                latency = the wait for the lock\n"
    "  watchdog      one client holds K locks in watchdog mode for several "
    "leases\n\n"
    "options:\n"
    "  -t, --threads N      threads per process (default 1)\n"
    "  -p, --processes N    processes (default 1; contended default 8)\n"
    "  -d, --duration D     measuring time (default 5s)\n"
    "      --hold D         contended: hold time per cycle (default 1ms)\n"
    "  -k, --locks N        watchdog: locks held (default 10000)\n"
    "      --lease D        watchdog: lease (default 2s)\n"
    "      --periods N      watchdog: leases to run for (default 3)\n"
    "      --kind K         contended: lock (default), fair (the fair "
    "lock), semaphore,\n"
    "                       or permits (the permit-expirable semaphore, "
    "10 s leases)\n"
    "      --permits N      contended semaphore or permits: permits "
    "(default 1)\n"
    "  -c, --connections N  command connections per client (default 1)\n"
    "      --starvation D   the clients' starvation threshold (default 20ms, "
    "0 = off)\n"
    "      --json           one JSON object per line\n"
    "      --plot FILE.svg  sweep threads 1..T and draw throughput and "
    "latency (gnuplot)\n";

int cmd_bench(int argc, char **argv, cli_global *g) {
  static const struct option longopts[] = {
      CLI_GLOBAL_LONGOPTS,
      {"threads", required_argument, 0, 't'},
      {"processes", required_argument, 0, 'p'},
      {"duration", required_argument, 0, 'd'},
      {"hold", required_argument, 0, 3001},
      {"locks", required_argument, 0, 'k'},
      {"lease", required_argument, 0, 3002},
      {"periods", required_argument, 0, 3003},
      {"connections", required_argument, 0, 'c'},
      {"json", no_argument, 0, 3004},
      {"plot", required_argument, 0, 3005},
      {"starvation", required_argument, 0, 3006},
      {"kind", required_argument, 0, 3007},
      {"permits", required_argument, 0, 3008},
      {0, 0, 0, 0}};
  bench_opts o = {.threads = 1, .processes = 0, .locks = 10000, .periods = 3,
                  .connections = 1, .starvation_ms = 20, .secs_ms = 5000,
                  .hold_ms = 1, .kind = "lock", .permits = 1,
                  .lease_ms = 2000};
  int opt;
  while ((opt = getopt_long(argc, argv, CLI_GLOBAL_SHORTOPTS "t:p:d:k:c:",
                            longopts, NULL)) != -1) {
    char *end = NULL;
    long v = optarg ? strtol(optarg, &end, 10) : 0;
    bool num_ok = optarg && *optarg && end && *end == '\0' && v > 0 &&
                  v <= 1000000;
    switch (opt) {
    case 'h': fputs(bench_help, stdout); return 0;
    case 3007:
      if (strcmp(optarg, "lock") && strcmp(optarg, "fair") &&
          strcmp(optarg, "semaphore") && strcmp(optarg, "permits")) {
        cli_err("bad --kind '%s' (lock, fair, semaphore or permits)", optarg);
        return EXIT_USAGE;
      }
      o.kind = optarg;
      break;
    case 't': case 'p': case 'k': case 'c': case 3003: case 3008:
      if (!num_ok) {
        cli_err("bad number '%s'", optarg);
        return EXIT_USAGE;
      }
      if (opt == 't') o.threads = (int)v;
      else if (opt == 'p') o.processes = (int)v;
      else if (opt == 'k') o.locks = (int)v;
      else if (opt == 'c') o.connections = (int)v;
      else if (opt == 3008) o.permits = (int)v;
      else o.periods = (int)v;
      break;
    case 'd': case 3001: case 3002: {
      int64_t ms;
      if (dl_parse_duration(optarg, &ms) != 0 || (opt != 3001 && ms < 10)) {
        cli_err("bad duration '%s'", optarg);
        return EXIT_USAGE;
      }
      if (opt == 'd') o.secs_ms = ms;
      else if (opt == 3001) o.hold_ms = ms;
      else o.lease_ms = ms;
      break;
    }
    case 3004: o.json = true; break;
    case 3006: {
      int64_t ms;
      if (dl_parse_duration(optarg, &ms) != 0 || ms > 3600000) {
        cli_err("bad duration '%s'", optarg);
        return EXIT_USAGE;
      }
      o.starvation_ms = (int)ms;
      break;
    }
    case 3005: o.plot = optarg; break;
    case '?':
      cli_err("unknown option '%s' (see dlock bench --help)", argv[optind - 1]);
      return EXIT_USAGE;
    default:
      if (cli_global_opt(g, opt, optarg) < 0) return EXIT_USAGE;
    }
  }
  if (argc - optind != 1) {
    cli_err("usage: dlock bench [options] uncontended|contended|watchdog");
    return EXIT_USAGE;
  }
  o.scenario = argv[optind];
  bool known = strcmp(o.scenario, "uncontended") == 0 ||
               strcmp(o.scenario, "contended") == 0 ||
               strcmp(o.scenario, "watchdog") == 0;
  if (!known) {
    cli_err("unknown scenario '%s'", o.scenario);
    return EXIT_USAGE;
  }
  if (o.processes == 0)
    o.processes = strcmp(o.scenario, "contended") == 0 ? 8 : 1;
  if (o.connections > 64) o.connections = 64;
  o.url = g->url ? g->url : "redis://127.0.0.1:6379";
  o.password = g->password;
  redisContext *raw = raw_connect(o.url, o.password);
  if (raw == NULL) return EXIT_UNAVAILABLE;
  int rc = 0;
  report r;
  if (strcmp(o.scenario, "watchdog") == 0) {
    rc = watchdog_scenario(g, &o, raw, &r);
    if (rc == 0) print_report(&r, o.json);
  } else if (o.plot) {
    rc = plot(g, o, raw, o.plot);
  } else {
    rc = measure(g, &o, raw, &r, NULL);
    print_report(&r, o.json);
  }
  redisFree(raw);
  return rc == 0 ? 0 : EXIT_UNAVAILABLE;
}
