/* test_loop.c: the event-loop seam (core/loop.c): timers in order on one
 * hook timer, fd watches, callbacks that stop or free others during
 * dispatch, with each driver; the timer heap's cost at 10 000 timers. */
#include "loop_drivers.h"
#include "core/core.h"

#include <fcntl.h>
#include <unistd.h>

typedef struct rec {
  dl_loop *lp;
  int order[16];
  int n;
  dl_timer *stop; /* a timer the callback stops */
  int done;
} rec;

typedef struct tmr {
  dl_timer t;
  rec *r;
  int id;
} tmr;

static void tmr_fire(void *ud) {
  tmr *m = ud;
  m->r->order[m->r->n++] = m->id;
  if (m->r->stop) {
    dl_timer_stop(m->r->lp, m->r->stop);
    m->r->stop = NULL;
  }
  if (m->id == 9) m->r->done = 1;
}

/* Timers fire in order of time, ties in start order; one stopped by an
 * earlier one's callback in the same dispatch never fires. */
static void timers_in_order(int kind) {
  td_loop t;
  CHECK_RC(td_open(&t, kind), 0);
  rec r = {.lp = t.lp};
  tmr m[6];
  int64_t now = dl_now_ms();
  int64_t at[6] = {now + 30, now + 10, now + 10, now + 20, now + 20, now + 60};
  int ids[6] = {4, 1, 2, 3, 99, 9};
  for (int i = 0; i < 6; i++) {
    m[i].r = &r;
    m[i].id = ids[i];
    dl_timer_init(&m[i].t, tmr_fire, &m[i]);
    CHECK_RC(dl_timer_start(t.lp, &m[i].t, at[i]), 0);
  }
  /* 3 (due with 99) stops 99 while both are due in one dispatch. */
  th_sleep_ms(25);
  r.stop = &m[4].t;
  CHECK(td_run_until(&t, &r.done, 2000));
  CHECK_EQ(r.n, 5);
  int want[5] = {1, 2, 3, 4, 9};
  for (int i = 0; i < 5; i++) CHECK_EQ(r.order[i], want[i]);
  CHECK_EQ(dl_loop_timers(t.lp), 0);
  CHECK_EQ(dlock_loop_timeout_ms(t.lp), -1);
  td_close(&t);
}
TD_DRIVERS(timers_in_order)

/* A callback that starts itself again for "now" does not hold the loop:
 * each dispatch fires it once. */
typedef struct again {
  dl_loop *lp;
  dl_timer t;
  int fired;
} again;

static void again_fire(void *ud) {
  again *a = ud;
  a->fired++;
  if (a->fired < 5) dl_timer_start(a->lp, &a->t, 0);
}

static void timer_rearms_itself(int kind) {
  td_loop t;
  CHECK_RC(td_open(&t, kind), 0);
  again a = {.lp = t.lp};
  dl_timer_init(&a.t, again_fire, &a);
  CHECK_RC(dl_timer_start(t.lp, &a.t, 0), 0);
  dlock_loop_on_timer(t.lp); /* one dispatch by hand: one firing */
  CHECK_EQ(a.fired, 1);
  CHECK(dl_timer_active(&a.t));
  for (int i = 0; i < 100 && a.fired < 5; i++) td_once(&t, 20);
  CHECK_EQ(a.fired, 5);
  td_close(&t);
}
TD_DRIVERS(timer_rearms_itself)

typedef struct piper {
  int fds[2];
  dl_watch *w;
  int calls, events;
  struct piper *other; /* freed by this one's callback */
} piper;

static void piper_ready(void *ud, int events) {
  piper *p = ud;
  p->calls++;
  p->events |= events;
  char b[16];
  if (events & DL_EV_READ) {
    ssize_t n = read(p->fds[0], b, sizeof b);
    (void)n;
  }
  if (p->other) {
    dl_watch_free(p->other->w);
    p->other->w = NULL;
    p->other = NULL;
  }
}

/* Watches: READ on a pipe with data; a callback frees the other pipe's
 * watch, ready in the same round, whose callback then never runs; WRITE
 * on a pipe's write end. */
static void watches(int kind) {
  td_loop t;
  CHECK_RC(td_open(&t, kind), 0);
  piper a = {.calls = 0}, b = {.calls = 0};
  CHECK(pipe(a.fds) == 0 && pipe(b.fds) == 0);
  CHECK_RC(dl_watch_new(t.lp, a.fds[0], piper_ready, &a, &a.w), 0);
  CHECK_RC(dl_watch_new(t.lp, b.fds[0], piper_ready, &b, &b.w), 0);
  dl_watch *dup = NULL;
  CHECK_RC(dl_watch_new(t.lp, a.fds[0], piper_ready, &a, &dup), DLOCK_EINVAL);
  CHECK_RC(dl_watch_set(a.w, DL_EV_READ), 0);
  CHECK_RC(dl_watch_set(b.w, DL_EV_READ), 0);
  /* Positive control: nothing written, nothing called. */
  td_run_for(&t, 30);
  CHECK_EQ(a.calls + b.calls, 0);
  a.other = &b;
  b.other = &a;
  CHECK(write(a.fds[1], "x", 1) == 1 && write(b.fds[1], "y", 1) == 1);
  for (int i = 0; i < 20 && a.calls + b.calls == 0; i++) td_once(&t, 50);
  td_run_for(&t, 30);
  CHECK_EQ(a.calls + b.calls, 1); /* the first freed the second */
  piper *left = a.w ? &a : &b;
  CHECK(left->w != NULL);
  CHECK_EQ(left->events, DL_EV_READ);
  dl_watch_free(left->w);
  /* WRITE: a pipe's write end is writable at once. */
  piper c = {.calls = 0};
  CHECK(pipe(c.fds) == 0);
  CHECK_RC(dl_watch_new(t.lp, c.fds[1], piper_ready, &c, &c.w), 0);
  CHECK_RC(dl_watch_set(c.w, DL_EV_WRITE), 0);
  for (int i = 0; i < 20 && c.calls == 0; i++) td_once(&t, 50);
  CHECK(c.calls > 0);
  CHECK_EQ(c.events, DL_EV_WRITE);
  CHECK_RC(dl_watch_set(c.w, 0), 0);
  int before = c.calls;
  td_run_for(&t, 30);
  CHECK_EQ(c.calls, before);
  dl_watch_free(c.w);
  for (int i = 0; i < 2; i++) {
    close(a.fds[i]);
    close(b.fds[i]);
    close(c.fds[i]);
  }
  td_close(&t);
}
TD_DRIVERS(watches)

/* ---- the hooks' contract, seen from a recording adapter ---- */
typedef struct fake {
  int watch_calls, timer_calls, cleanups;
  int64_t last_ms;
  int slots; /* slots held */
  bool refuse;
} fake;

static int fake_watch(void *data, int fd, int events, void **slot) {
  fake *f = data;
  (void)fd;
  f->watch_calls++;
  if (events == 0) {
    if (*slot) f->slots--;
    *slot = NULL;
    return 0;
  }
  if (f->refuse) {
    if (*slot) f->slots--;
    *slot = NULL;
    return -1;
  }
  if (*slot == NULL) {
    *slot = f;
    f->slots++;
  }
  return 0;
}

static void fake_timer(void *data, int64_t ms) {
  fake *f = data;
  f->timer_calls++;
  f->last_ms = ms;
}

static void fake_cleanup(void *data) { ((fake *)data)->cleanups++; }

static void nop(void *ud) { (void)ud; }

static void t_hooks(void) {
  fake f = {.last_ms = -2};
  dlock_loop_hooks h = {sizeof h, &f, fake_watch, fake_timer, fake_cleanup};
  dlock_loop_hooks bad = {sizeof bad, &f, NULL, fake_timer, NULL};
  dlock_loop *lp = NULL;
  CHECK_RC(dlock_loop_new(&bad, &lp), DLOCK_EINVAL);
  CHECK(lp == NULL);
  /* The size: unset (0), or a newer table's with a hook unknown here. */
  dlock_loop_hooks unsized = h;
  unsized.size = 0;
  CHECK_RC(dlock_loop_new(&unsized, &lp), DLOCK_EINVAL);
  CHECK(lp == NULL);
  struct {
    dlock_loop_hooks h;
    void (*newer)(void *);
  } big = {h, nop};
  big.h.size = sizeof big;
  CHECK_RC(dlock_loop_new(&big.h, &lp), DLOCK_EINVAL);
  CHECK(lp == NULL);
  big.newer = NULL; /* unknown but unset: taken */
  CHECK_RC(dlock_loop_new(&big.h, &lp), 0);
  dlock_loop_free(lp);
  lp = NULL;
  f.cleanups = 0;
  CHECK_RC(dlock_loop_new(&h, &lp), 0);
  CHECK_EQ(dlock_loop_fd(lp), -1);
  CHECK_RC(dlock_loop_run(lp, 0), DLOCK_EINVAL);
  dl_watch *w;
  CHECK_RC(dl_watch_new(lp, 5, NULL, NULL, &w), 0);
  CHECK_EQ(f.watch_calls, 0); /* no events yet: the adapter is not asked */
  CHECK_RC(dl_watch_set(w, DL_EV_READ), 0);
  CHECK_RC(dl_watch_set(w, DL_EV_READ), 0); /* unchanged: not asked again */
  CHECK_EQ(f.watch_calls, 1);
  CHECK_EQ(f.slots, 1);
  f.refuse = true;
  CHECK_RC(dl_watch_set(w, DL_EV_READ | DL_EV_WRITE), DLOCK_EINVAL);
  CHECK_EQ(f.slots, 0);
  f.refuse = false;
  CHECK_RC(dl_watch_set(w, DL_EV_WRITE), 0);
  CHECK_EQ(f.slots, 1);
  dl_watch_free(w);
  CHECK_EQ(f.slots, 0);
  dlock_loop_on_io(lp, 5, DL_EV_READ); /* unwatched: ignored */
  /* The one hook timer follows the earliest timer, lazily: a stop leaves
   * an earlier arming standing, whose firing finds nothing due and arms
   * for the next; with no timer left a caller's loop is disarmed. */
  dl_timer a, b;
  dl_timer_init(&a, nop, NULL);
  dl_timer_init(&b, nop, NULL);
  CHECK_RC(dl_timer_start(lp, &a, dl_now_ms() + 1000), 0);
  CHECK_EQ(f.timer_calls, 1);
  CHECK(f.last_ms > 900 && f.last_ms <= 1000);
  CHECK_RC(dl_timer_start(lp, &b, dl_now_ms() + 5000), 0);
  CHECK_EQ(f.timer_calls, 1); /* later: the arming stands */
  dl_timer_stop(lp, &a);
  CHECK_EQ(f.timer_calls, 1); /* earlier than b: it stands too */
  dlock_loop_on_timer(lp);    /* it fired: nothing due, armed for b */
  CHECK_EQ(f.timer_calls, 2);
  CHECK(f.last_ms > 4000);
  CHECK(dl_timer_active(&b));
  CHECK_RC(dl_timer_start(lp, &a, dl_now_ms() + 1000), 0);
  CHECK_EQ(f.timer_calls, 3); /* earlier than the arming */
  CHECK(f.last_ms > 900 && f.last_ms <= 1000);
  dl_timer_stop(lp, &a);
  dl_timer_stop(lp, &b);
  CHECK_EQ(f.timer_calls, 4);
  CHECK_EQ(f.last_ms, -1);
  CHECK_RC(dl_watch_new(lp, 7, NULL, NULL, &w), 0);
  CHECK_RC(dl_watch_set(w, DL_EV_READ), 0);
  dlock_loop_free(lp); /* releases the watch left behind */
  CHECK_EQ(f.slots, 0);
  CHECK_EQ(f.cleanups, 1);
}

/* ---- work put off to the end of a dispatch ---- */
typedef struct dfr {
  dlock_loop *lp;
  dl_defer d, e;
  int ran_d, ran_e, in_fn;
  bool early; /* d ran while the watch's callback was running */
} dfr;

static void dfr_e(void *ud) {
  ((dfr *)ud)->ran_e++;
}

static void dfr_d(void *ud) {
  dfr *x = ud;
  if (x->in_fn) x->early = true;
  x->ran_d++;
  CHECK(dl_defer_add(x->lp, &x->e)); /* added while running: this round */
}

static void dfr_io(void *ud, int events) {
  dfr *x = ud;
  (void)events;
  x->in_fn = 1;
  CHECK(dl_defer_add(x->lp, &x->d));
  CHECK(dl_defer_add(x->lp, &x->d)); /* once */
  x->in_fn = 0;
}

static void dfr_io_cancel(void *ud, int events) {
  dfr *x = ud;
  (void)events;
  CHECK(dl_defer_add(x->lp, &x->d));
  dl_defer_cancel(x->lp, &x->d);
}

static void t_defer(void) {
  fake f = {.last_ms = -2};
  dlock_loop_hooks h = {sizeof h, &f, fake_watch, fake_timer, NULL};
  dfr x = {0};
  CHECK_RC(dlock_loop_new(&h, &x.lp), 0);
  dl_defer_init(&x.d, dfr_d, &x);
  dl_defer_init(&x.e, dfr_e, &x);
  CHECK(!dl_defer_add(x.lp, &x.d)); /* outside a dispatch: not queued */
  dl_watch *w;
  CHECK_RC(dl_watch_new(x.lp, 5, dfr_io, &x, &w), 0);
  CHECK_RC(dl_watch_set(w, DL_EV_READ), 0);
  dlock_loop_on_io(x.lp, 5, DL_EV_READ);
  CHECK_EQ(x.ran_d, 1);
  CHECK_EQ(x.ran_e, 1);
  CHECK(!x.early);
  dl_watch_free(w);
  CHECK_RC(dl_watch_new(x.lp, 5, dfr_io_cancel, &x, &w), 0);
  CHECK_RC(dl_watch_set(w, DL_EV_READ), 0);
  dlock_loop_on_io(x.lp, 5, DL_EV_READ);
  CHECK_EQ(x.ran_d, 1); /* cancelled */
  dl_watch_free(w);
  dlock_loop_free(x.lp);
}

/* ---- the heap at scale ---- */
static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

typedef struct order_check {
  int64_t last;
  int fired;
  bool bad;
} order_check;

static order_check oc;
static void check_fire(void *ud) {
  dl_timer *t = ud;
  if (t->at < oc.last) oc.bad = true;
  oc.last = t->at;
  oc.fired++;
}

/* n timers started at random times, then n/2 stopped in random order;
 * returns ns per operation. The rest must fire in order of time. */
static double heap_round(int n, bool *ok) {
  fake f = {.last_ms = 0};
  dlock_loop_hooks h = {sizeof h, &f, fake_watch, fake_timer, NULL};
  dlock_loop *lp;
  *ok = false;
  if (dlock_loop_new(&h, &lp) != 0) return 0;
  dl_timer *ts = calloc((size_t)n, sizeof *ts);
  int *perm = calloc((size_t)n, sizeof *perm);
  int64_t base = dl_now_ms() - 1000000; /* all due: dispatch fires them */
  for (int i = 0; i < n; i++) {
    dl_timer_init(&ts[i], check_fire, &ts[i]);
    perm[i] = i;
  }
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(next_rand() % (uint64_t)(i + 1));
    int x = perm[i];
    perm[i] = perm[j];
    perm[j] = x;
  }
  int64_t t0 = dl_now_us();
  for (int i = 0; i < n; i++)
    dl_timer_start(lp, &ts[i], base + (int64_t)(next_rand() % 100000));
  for (int i = 0; i < n / 2; i++) dl_timer_stop(lp, &ts[perm[i]]);
  int64_t t1 = dl_now_us();
  size_t left = dl_loop_timers(lp);
  oc = (order_check){.last = INT64_MIN};
  dlock_loop_on_timer(lp);
  *ok = left == (size_t)(n - n / 2) && oc.fired == n - n / 2 && !oc.bad &&
        dl_loop_timers(lp) == 0;
  for (int i = 0; i < n / 2; i++) *ok = *ok && !dl_timer_active(&ts[perm[i]]);
  free(ts);
  free(perm);
  dlock_loop_free(lp);
  return (double)(t1 - t0) * 1000.0 / (1.5 * n);
}

/* 10 000 timers are cheap: each start or stop costs O(log n). Checked
 * against 1 000: a per-operation cost growing with n (a list: x10) fails;
 * and absolutely: 15 000 operations well under 50 ms. */
static void t_timers_10k(void) {
  bool ok;
  heap_round(1000, &ok); /* warm-up */
  double small = 1e18, big = 1e18;
  for (int i = 0; i < 5; i++) {
    double s = heap_round(1000, &ok);
    CHECK(ok);
    if (s < small) small = s;
    double b = heap_round(10000, &ok);
    CHECK(ok);
    if (b < big) big = b;
  }
  fprintf(stderr, "    %.0f ns/op at 1000 timers, %.0f ns/op at 10000\n",
          small, big);
  CHECK(big < small * 4 + 200); /* log growth: ~1.3x, not 10x */
  CHECK(big * 15000 < 50e6);
}

static void t_builtin_fd(void) {
  dlock_loop *lp;
  CHECK_RC(dlock_loop_new(NULL, &lp), 0);
  CHECK(dlock_loop_fd(lp) >= 0);
  CHECK_EQ(dlock_loop_timeout_ms(lp), -1);
  dl_timer a;
  dl_timer_init(&a, nop, NULL);
  CHECK_RC(dl_timer_start(lp, &a, dl_now_ms() + 200), 0);
  int64_t to = dlock_loop_timeout_ms(lp);
  CHECK(to > 150 && to <= 200);
  CHECK_EQ(dlock_loop_run(lp, 0), 0); /* nothing due, no wait */
  int64_t t0 = dl_now_ms();
  int handled = 0;
  while (handled == 0 && dl_now_ms() - t0 < 2000)
    handled = dlock_loop_run(lp, -1);
  CHECK_EQ(handled, 1);
  CHECK(dl_now_ms() - t0 >= 150);
  CHECK(!dl_timer_active(&a));
  dlock_loop_free(lp);
}

TH_MAIN(TD_T_BARE(timers_in_order), TD_T_BARE(timer_rearms_itself),
        TD_T_BARE(watches), T_BARE(t_hooks), T_BARE(t_defer),
        T_BARE(t_timers_10k), T_BARE(t_builtin_fd))
