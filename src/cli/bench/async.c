/* async.c: dlock bench --async: the scenarios on ONE event-loop thread
 * (the built-in driver, dlock_loop_new(NULL)) instead of blocking threads:
 * uncontended keeps --inflight operations in flight, each slot its own lock
 * cycling acquire_async then release_async; contended runs, in each of the
 * P processes, --inflight handles on the one lock, each holding it --hold
 * on a loop deadline (no sleep); idle-waiters parks N handles waiting on
 * held locks and measures what waiting costs the process (getrusage). */
#include "bench.h"
#include "../../core/core.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "dlock_async.h"

typedef struct aslot aslot;

/* One process's run on its loop. */
typedef struct arun {
  const bench_opts *o;
  dlock_client *c;
  bench_result *res;
  int64_t end_us;
  int active;    /* slots with an operation in flight */
  aslot *holder; /* contended: the slot holding the lock, or NULL */
  int64_t hold_end_us;
} arun;

struct aslot {
  arun *run;
  dlock_lock *l;
  int64_t t0, t1; /* the cycle's (or wait's) start; contended: acquired at */
};

static void count_error(arun *a, int rc, const char *msg) {
  if (a->res->errors++ == 0)
    fprintf(stderr, "dlock bench: %s (%s)\n", dlock_err_name(rc), msg);
}

static void start_cycle(aslot *s);

/* ---- uncontended: acquire, release, again ---- */

static void u_released(int rc, uint64_t token, const char *msg, void *ud) {
  aslot *s = ud;
  arun *a = s->run;
  (void)token;
  int64_t now = dl_now_us();
  if (rc != 1)
    count_error(a, rc, msg);
  else if (now <= a->end_us) { /* completed within the measured time */
    bench_samples_push(&a->res->lat, now - s->t0);
    a->res->ops++;
  }
  start_cycle(s);
}

static void u_acquired(int rc, uint64_t token, const char *msg, void *ud) {
  aslot *s = ud;
  (void)token;
  if (rc != 0) {
    count_error(s->run, rc, msg);
    start_cycle(s);
  } else if ((rc = dlock_lock_release_async(s->l, u_released, s, NULL)) != 0) {
    count_error(s->run, rc, dlock_client_errmsg(s->run->c));
    start_cycle(s);
  }
}

/* ---- contended: wait, hold until hold_end_us, release ---- */

static void c_released(int rc, uint64_t token, const char *msg, void *ud) {
  aslot *s = ud;
  (void)token;
  if (rc != 1) count_error(s->run, rc, msg);
  start_cycle(s);
}

static void c_acquired(int rc, uint64_t token, const char *msg, void *ud) {
  aslot *s = ud;
  arun *a = s->run;
  (void)token;
  if (rc == DLOCK_EBUSY) { /* the run ended while it waited */
    a->active--;
    return;
  }
  if (rc != 0 || a->holder != NULL) {
    count_error(a, rc ? rc : DLOCK_EINVAL, rc ? msg : "two holders at once");
    start_cycle(s);
    return;
  }
  s->t1 = dl_now_us();
  bench_samples_push(&a->res->lat, s->t1 - s->t0);
  a->holder = s;
  a->hold_end_us = s->t1 + a->o->hold_ms * 1000;
}

/* The holder's time is up (called from the loop's driver below). */
static void c_release_holder(arun *a) {
  aslot *s = a->holder;
  a->holder = NULL;
  int64_t t2 = dl_now_us();
  a->res->hold_us += (double)(t2 - s->t1);
  a->res->ops++;
  int rc = dlock_lock_release_async(s->l, c_released, s, NULL);
  if (rc != 0) {
    count_error(a, rc, dlock_client_errmsg(a->c));
    start_cycle(s);
  }
}

/* The slot's next cycle, or its end when the measured time is over. */
static void start_cycle(aslot *s) {
  arun *a = s->run;
  bool contended = strcmp(a->o->scenario, "contended") == 0;
  s->t0 = dl_now_us();
  int rc = DLOCK_EBUSY;
  if (s->t0 < a->end_us) {
    if (contended)
      rc = dlock_lock_acquire_async(s->l, (a->end_us - s->t0) / 1000 + 1,
                                    BENCH_LEASE_MS,
                                    c_acquired, s, NULL);
    else
      rc = dlock_lock_acquire_async(s->l, 0, BENCH_LEASE_MS, u_acquired, s,
                                    NULL);
    if (rc != 0) count_error(a, rc, dlock_client_errmsg(a->c));
  }
  if (rc != 0) a->active--;
}

/* An event-loop client on lp with the bench's options. */
static dlock_client *async_client(const cli_global *g, const bench_opts *o,
                                  dlock_loop *lp, int64_t lease_ms) {
  dlock_client_options opt;
  bench_client_options(g, o, lease_ms, &opt);
  dlock_client *c = NULL;
  if (dlock_client_open_async(&opt, lp, &c) != 0)
    cli_err("%s", dlock_client_open_errmsg());
  return c;
}

/* Runs lp until *flag reaches 0 or deadline_us passes; contended: releases
 * the holder when its time is up. */
static void drive(dlock_loop *lp, arun *a, const int *flag,
                  int64_t deadline_us) {
  for (;;) {
    int64_t now = dl_now_us();
    if (a && a->holder && now >= a->hold_end_us) {
      c_release_holder(a);
      continue;
    }
    if ((flag && *flag <= 0) || now >= deadline_us) return;
    int64_t until = deadline_us;
    if (a && a->holder && a->hold_end_us < until) until = a->hold_end_us;
    int64_t ms = (until - now + 999) / 1000; /* epoll counts whole ms */
    if (ms > 50) ms = 50;
    if (dlock_loop_run(lp, ms) < 0) return;
  }
}

int bench_async_process(const cli_global *g, const bench_opts *o,
                        const char *lock_name, int64_t start_us, int64_t end_us,
                        bench_result *out) {
  bool contended = strcmp(o->scenario, "contended") == 0;
  dlock_loop *lp = NULL;
  if (dlock_loop_new(NULL, &lp) != 0) {
    cli_err("cannot make an event loop");
    return -1;
  }
  /* etcd: the session lease is the locks' (BENCH_LEASE_MS). */
  dlock_client *c = async_client(g, o, lp, o->etcd ? BENCH_LEASE_MS : 0);
  int n = o->inflight;
  aslot *slots = c ? calloc((size_t)n, sizeof *slots) : NULL;
  int rc = slots ? 0 : -1;
  arun a = {.o = o, .c = c, .res = out, .end_us = end_us};
  char name[96];
  for (int i = 0; i < n && rc == 0; i++) {
    if (!contended && o->zk)
      snprintf(name, sizeof name, "/dlock-bench/ua-%d/%d", (int)getpid(), i);
    else if (!contended)
      snprintf(name, sizeof name, "bench:ua:%d:%d", (int)getpid(), i);
    slots[i].run = &a;
    rc = !contended ? dlock_lock_new(c, name, NULL, &slots[i].l)
         : strcmp(o->kind, "fair") == 0
             ? dlock_fairlock_new(c, lock_name, NULL, 0, &slots[i].l)
             : dlock_lock_new(c, lock_name, NULL, &slots[i].l);
  }
  if (rc == 0) {
    drive(lp, NULL, NULL, start_us); /* connected and ready by then */
    a.active = n;
    for (int i = 0; i < n; i++)
      start_cycle(&slots[i]);
    /* Then until every slot has stopped: a contended waiter's wait ends
     * at end_us, a release sent then comes back within its timeout. */
    drive(lp, &a, &a.active, end_us + 30 * 1000000LL);
    if (a.active > 0) {
      cli_err("%d operations still in flight 30 s after the end", a.active);
      rc = -1;
    }
  }
  if (c) {
    dlock_client_stats st;
    if (dlock_client_stats_get(c, &st) == 0) out->wakeups += st.wakeups;
  }
  for (int i = 0; slots && i < n; i++)
    dlock_lock_free(slots[i].l);
  free(slots);
  dlock_client_close(c);
  dlock_loop_free(lp);
  return c ? rc : -1;
}

/* ---- idle waiters ---- */

typedef struct idle_run {
  int pending; /* holders' acquires or releases not completed yet */
  int held;    /* holders' acquires that succeeded */
  int ended;   /* waiters that completed, cancelled or not */
  long errors;
} idle_run;

typedef struct idle_waiter {
  idle_run *ir;
  dlock_op *op; /* until it completes */
} idle_waiter;

static void idle_error(idle_run *ir, const char *who, int rc, const char *msg) {
  if (ir->errors++ == 0)
    fprintf(stderr, "dlock bench: %s: %s (%s)\n", who, dlock_err_name(rc), msg);
}

static void idle_held(int rc, uint64_t token, const char *msg, void *ud) {
  idle_run *ir = ud;
  (void)token;
  ir->pending--;
  if (rc == 0)
    ir->held++;
  else
    idle_error(ir, "holder", rc, msg);
}

static void idle_freed(int rc, uint64_t token, const char *msg, void *ud) {
  idle_run *ir = ud;
  (void)token;
  ir->pending--;
  if (rc != 1) idle_error(ir, "holder's release", rc, msg);
}

static void idle_waited(int rc, uint64_t token, const char *msg, void *ud) {
  idle_waiter *w = ud;
  (void)token;
  w->op = NULL;
  w->ir->ended++;
  if (rc != DLOCK_ECANCELED) idle_error(w->ir, "waiter", rc, msg);
}

static double cpu_us(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ((double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec) * 1e6 +
         (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec;
}

int bench_async_idle(const cli_global *g, const bench_opts *o,
                     struct redisContext *raw, bench_report *r) {
  memset(r, 0, sizeof *r);
  r->scenario = "idle-waiters";
  r->threads = 1;
  r->processes = 1;
  r->async = true;
  r->inflight = o->idle_waiters;
  r->rtt_p50 = bench_rtt_p50_us(o, raw, 2000);
  r->fanout_rtt_p50 = o->cluster ? 0 : bench_fanout_rtt_p50_us(o, raw, 2000);
  r->ceiling = bench_ceiling_ops(raw, 1000);
  int n = o->idle_waiters;
  dlock_loop *lp = NULL;
  if (dlock_loop_new(NULL, &lp) != 0) return -1;
  dlock_client *c = async_client(g, o, lp, 0);
  dlock_lock **hold = c ? calloc((size_t)n, sizeof *hold) : NULL;
  dlock_lock **wait = c ? calloc((size_t)n, sizeof *wait) : NULL;
  idle_waiter *ws = c ? calloc((size_t)n, sizeof *ws) : NULL;
  idle_run ir = {0};
  int rc = hold && wait && ws ? 0 : -1;
  int64_t lease = o->warmup_ms + o->secs_ms + 60000; /* outlives the run */
  char name[64];
  /* Each waiter waits on a lock of its own, held by another handle of the
   * same client (on an event-loop client each handle is its own owner). */
  for (int i = 0; i < n && rc == 0; i++) {
    snprintf(name, sizeof name, "bench:idle:%d:%d", (int)getpid(), i);
    rc = dlock_lock_new(c, name, NULL, &hold[i]);
    if (rc == 0) rc = dlock_lock_new(c, name, NULL, &wait[i]);
    if (rc == 0)
      rc = dlock_lock_acquire_async(hold[i], 0, lease, idle_held, &ir, NULL);
    if (rc == 0) ir.pending++;
  }
  drive(lp, NULL, &ir.pending, dl_now_us() + 60 * 1000000LL);
  if (rc != 0 || ir.held != n) {
    cli_err("could not take the %d locks to wait on", n);
    rc = -1;
  }
  for (int i = 0; i < n && rc == 0; i++) {
    ws[i].ir = &ir;
    rc = dlock_lock_acquire_async(wait[i], lease, lease,
                                  idle_waited, &ws[i], &ws[i].op);
  }
  if (rc == 0) {
    /* The first attempts, and the heartbeats' slowing down (docs/
     * PERFORMANCE.md), unmeasured; then the measured time. */
    drive(lp, NULL, NULL, dl_now_us() + o->warmup_ms * 1000);
    long long evals0 = 0, evals1 = 0;
    redisReply *x = redisCommand(raw, "INFO commandstats");
    if (x && x->type == REDIS_REPLY_STRING && strstr(x->str, "evalsha:calls="))
      evals0 = atoll(strstr(x->str, "evalsha:calls=") + 14);
    if (x) freeReplyObject(x);
    double scpu0 = bench_servers_cpu_us(o, raw), cpu0 = cpu_us();
    int64_t t0 = dl_now_us();
    drive(lp, NULL, NULL, t0 + o->secs_ms * 1000);
    double cpu1 = cpu_us(), scpu1 = bench_servers_cpu_us(o, raw);
    double wall = (double)(dl_now_us() - t0);
    x = redisCommand(raw, "INFO commandstats");
    if (x && x->type == REDIS_REPLY_STRING && strstr(x->str, "evalsha:calls="))
      evals1 = atoll(strstr(x->str, "evalsha:calls=") + 14);
    if (x) freeReplyObject(x);
    r->client_cpu_share = (cpu1 - cpu0) / wall;
    r->server_cpu_share = (scpu1 - scpu0) / wall;
    r->ops_per_sec = (double)(evals1 - evals0) * 1e6 / wall; /* the polls */
    r->cpu_per_op =
        evals1 > evals0 ? (scpu1 - scpu0) / (double)(evals1 - evals0) : 0;
    if (ir.ended != 0) {
      cli_err("%d waiters ended early", ir.ended);
      rc = -1;
    }
    for (int i = 0; i < n; i++)
      dlock_op_cancel(ws[i].op);
    int64_t until = dl_now_us() + 30 * 1000000LL;
    while (ir.ended < n && dl_now_us() < until)
      dlock_loop_run(lp, 50);
    for (int i = 0; i < n; i++)
      if (dlock_lock_release_async(hold[i], idle_freed, &ir, NULL) == 0)
        ir.pending++;
    drive(lp, NULL, &ir.pending, dl_now_us() + 30 * 1000000LL);
  }
  r->errors = ir.errors + (rc != 0);
  for (int i = 0; c && i < n; i++) {
    if (hold) dlock_lock_free(hold[i]);
    if (wait) dlock_lock_free(wait[i]);
  }
  free(hold);
  free(wait);
  free(ws);
  dlock_client_close(c);
  dlock_loop_free(lp);
  return c ? rc : -1;
}
