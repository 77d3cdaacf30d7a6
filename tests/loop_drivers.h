/* loop_drivers.h: the tests' event loops: a dlock_loop on the built-in
 * driver, on libuv (dlock_uv.h) or on libevent (dlock_event.h), run the
 * same way, so that each test runs once per driver (TD_TESTS). */
#ifndef DLOCK_TEST_LOOP_DRIVERS_H
#define DLOCK_TEST_LOOP_DRIVERS_H

#include <stdbool.h>
#include <string.h>

#include "dlock_async.h"
#include "harness.h"
#ifdef DLOCK_TEST_UV
#include "dlock_uv.h"
#endif
#ifdef DLOCK_TEST_EVENT
#include "dlock_event.h"
#endif

enum { TD_BUILTIN, TD_UV, TD_EVENT };

typedef struct td_loop {
  int kind;
  dlock_loop *lp;
#ifdef DLOCK_TEST_UV
  uv_loop_t uv;
  uv_timer_t guard; /* bounds one uv_run(UV_RUN_ONCE) */
#endif
#ifdef DLOCK_TEST_EVENT
  struct event_base *base;
#endif
} td_loop;

#ifdef DLOCK_TEST_UV
static void td_guard_cb(uv_timer_t *t) { (void)t; }
#endif

/* Opens a loop of `kind`; returns 0 or a negative code. */
static inline int td_open(td_loop *t, int kind) {
  memset(t, 0, sizeof *t);
  t->kind = kind;
  switch (kind) {
#ifdef DLOCK_TEST_UV
  case TD_UV:
    if (uv_loop_init(&t->uv) != 0) return DLOCK_ENOMEM;
    uv_timer_init(&t->uv, &t->guard);
    return dlock_uv_loop_new(&t->uv, &t->lp);
#endif
#ifdef DLOCK_TEST_EVENT
  case TD_EVENT:
    t->base = event_base_new();
    if (t->base == NULL) return DLOCK_ENOMEM;
    return dlock_event_loop_new(t->base, &t->lp);
#endif
  case TD_BUILTIN:
    return dlock_loop_new(NULL, &t->lp);
  default:
    return DLOCK_ENOTSUP;
  }
}

/* Runs one round of the loop, waiting at most ms for something to do. */
static inline void td_once(td_loop *t, int ms) {
  switch (t->kind) {
#ifdef DLOCK_TEST_UV
  case TD_UV:
    /* The guard counts from uv's cached time, stale after a long stretch
     * of work between rounds (10 000 waits queued): bring it up to date,
     * or the round may sleep until the library's next timer instead. */
    uv_update_time(&t->uv);
    uv_timer_start(&t->guard, td_guard_cb, (uint64_t)ms, 0);
    uv_run(&t->uv, UV_RUN_ONCE);
    uv_timer_stop(&t->guard);
    break;
#endif
#ifdef DLOCK_TEST_EVENT
  case TD_EVENT: {
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_base_loopexit(t->base, &tv);
    event_base_loop(t->base, EVLOOP_ONCE);
    break;
  }
#endif
  default:
    dlock_loop_run(t->lp, ms);
  }
}

/* Runs the loop until *flag is nonzero or timeout_ms passes; returns
 * whether the flag was set. */
static inline bool td_run_until(td_loop *t, const int *flag, int timeout_ms) {
  int64_t end = th_now_ms() + timeout_ms;
  while (!*flag) {
    int64_t left = end - th_now_ms();
    if (left <= 0) return false;
    td_once(t, left > 50 ? 50 : (int)left);
  }
  return true;
}

/* Runs the loop for ms, whatever happens. */
static inline void td_run_for(td_loop *t, int ms) {
  int never = 0;
  td_run_until(t, &never, ms);
}

/* Frees the loop (everything on it must be freed first) and lets the
 * event library close what the adapter had open. */
static inline void td_close(td_loop *t) {
  dlock_loop_free(t->lp);
  t->lp = NULL;
  switch (t->kind) {
#ifdef DLOCK_TEST_UV
  case TD_UV:
    uv_close((uv_handle_t *)&t->guard, NULL);
    uv_run(&t->uv, UV_RUN_DEFAULT);
    uv_loop_close(&t->uv);
    break;
#endif
#ifdef DLOCK_TEST_EVENT
  case TD_EVENT:
    event_base_free(t->base);
    break;
#endif
  default:
    break;
  }
}

/* The drivers this build has. */
static inline bool td_have(int kind) {
  (void)kind;
#ifndef DLOCK_TEST_UV
  if (kind == TD_UV) return false;
#endif
#ifndef DLOCK_TEST_EVENT
  if (kind == TD_EVENT) return false;
#endif
  return true;
}

/* ---- what the event-loop API tests share ---- */
/* One operation's outcome. */
typedef struct td_got {
  int calls, rc;
  uint64_t token;
  char msg[256];
} td_got;

static inline void td_on_done(int rc, uint64_t token, const char *errmsg,
                              void *ud) {
  td_got *g = ud;
  g->calls++;
  g->rc = rc;
  g->token = token;
  snprintf(g->msg, sizeof g->msg, "%s", errmsg);
}

/* The clients td_fix_open makes wait through the subscriber connection
 * (0), or by backoff of at most this many ms. A test may change it. */
static int td_backoff_ms = 0;

/* An event-loop client on a fresh loop of `kind`. */
typedef struct td_fix {
  td_loop t;
  dlock_client *c;
} td_fix;

static inline int td_fix_open(td_fix *f, int kind, int64_t watchdog_ms) {
  memset(f, 0, sizeof *f);
  int rc = td_open(&f->t, kind);
  if (rc != 0) return rc;
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = th_srv.url;
  if (watchdog_ms > 0) o.watchdog_timeout_ms = watchdog_ms;
  o.wait_backoff_max_ms = td_backoff_ms;
  return dlock_client_open_async(&o, f->t.lp, &f->c);
}

static inline void td_fix_close(td_fix *f) {
  dlock_client_close(f->c);
  td_close(&f->t);
}

/* A test fn(int kind) once per driver: fn_builtin, fn_uv, fn_event (one
 * the build lacks is skipped, saying so). */
#define TD_DRIVERS(fn)                                                         \
  static void fn##_builtin(void) { fn(TD_BUILTIN); }                           \
  static void fn##_uv(void) {                                                  \
    if (!td_have(TD_UV)) fprintf(stderr, "    (no libuv: skipped)\n");         \
    else fn(TD_UV);                                                            \
  }                                                                            \
  static void fn##_event(void) {                                               \
    if (!td_have(TD_EVENT)) fprintf(stderr, "    (no libevent: skipped)\n");   \
    else fn(TD_EVENT);                                                         \
  }
#define TD_T(fn) T(fn##_builtin), T(fn##_uv), T(fn##_event)
#define TD_T_BARE(fn) T_BARE(fn##_builtin), T_BARE(fn##_uv), T_BARE(fn##_event)
#define TD_T_REDIS(fn, extra)                                                  \
  T_REDIS(fn##_builtin, extra), T_REDIS(fn##_uv, extra),                       \
      T_REDIS(fn##_event, extra)

#endif
