/* dlock_uv.h: runs a dlock_loop on a libuv loop (header-only: libdlock
 * itself links no event library). Include it after <uv.h>.
 *
 *   dlock_loop *lp;
 *   dlock_uv_loop_new(uv_default_loop(), &lp);
 *   ... uv_run(uv, UV_RUN_DEFAULT) ...
 *   dlock_loop_free(lp);        then run the uv loop once more (uv_run with
 *                               UV_RUN_NOWAIT or DEFAULT): libuv closes
 *                               handles asynchronously, and the adapter's
 *                               memory is freed in their close callbacks.
 *
 * Every call on the dlock_loop, and every dlock callback, happens on the
 * thread that runs the uv loop. */
#ifndef DLOCK_UV_H
#define DLOCK_UV_H

#include <stdlib.h>
#include <uv.h>

#include "dlock_async.h"

typedef struct dlock_uv__loop {
  uv_loop_t *uv;
  uv_timer_t timer;
  dlock_loop *lp;
} dlock_uv__loop;

typedef struct dlock_uv__fd {
  uv_poll_t poll;
  dlock_uv__loop *st;
  int fd;
} dlock_uv__fd;

static void dlock_uv__on_poll(uv_poll_t *h, int status, int events) {
  dlock_uv__fd *f = (dlock_uv__fd *)h->data;
  int ev = 0;
  if (status < 0) ev = DLOCK_EV_READ | DLOCK_EV_WRITE; /* the I/O says why */
  if (events & (UV_READABLE | UV_DISCONNECT)) ev |= DLOCK_EV_READ;
  if (events & UV_WRITABLE) ev |= DLOCK_EV_WRITE;
  dlock_loop_on_io(f->st->lp, f->fd, ev);
}

static void dlock_uv__free_handle(uv_handle_t *h) { free(h->data); }

static int dlock_uv__watch(void *data, int fd, int events, void **slot) {
  dlock_uv__loop *st = (dlock_uv__loop *)data;
  dlock_uv__fd *f = (dlock_uv__fd *)*slot;
  if (events == 0) {
    if (f) { /* closed asynchronously: freed by the close callback */
      uv_poll_stop(&f->poll);
      uv_close((uv_handle_t *)&f->poll, dlock_uv__free_handle);
      *slot = NULL;
    }
    return 0;
  }
  if (f == NULL) {
    f = (dlock_uv__fd *)calloc(1, sizeof *f);
    if (f == NULL) return -1;
    if (uv_poll_init(st->uv, &f->poll, fd) != 0) {
      free(f);
      return -1;
    }
    f->poll.data = f;
    f->st = st;
    f->fd = fd;
    *slot = f;
  }
  int uev = ((events & DLOCK_EV_READ) ? UV_READABLE : 0) |
            ((events & DLOCK_EV_WRITE) ? UV_WRITABLE : 0);
  if (uv_poll_start(&f->poll, uev, dlock_uv__on_poll) == 0) return 0;
  dlock_uv__watch(data, fd, 0, slot); /* the contract: nothing kept */
  return -1;
}

static void dlock_uv__on_timer(uv_timer_t *t) {
  dlock_uv__loop *st = (dlock_uv__loop *)t->data;
  dlock_loop_on_timer(st->lp);
}

static void dlock_uv__timer(void *data, int64_t ms) {
  dlock_uv__loop *st = (dlock_uv__loop *)data;
  if (ms < 0) {
    uv_timer_stop(&st->timer);
    return;
  }
  /* uv_timer counts from the loop's cached time: bring it up to date. */
  uv_update_time(st->uv);
  uv_timer_start(&st->timer, dlock_uv__on_timer, (uint64_t)ms, 0);
}

static void dlock_uv__cleanup(void *data) {
  dlock_uv__loop *st = (dlock_uv__loop *)data;
  uv_timer_stop(&st->timer);
  st->timer.data = st;
  uv_close((uv_handle_t *)&st->timer, dlock_uv__free_handle);
}

/* Creates a dlock_loop on `uv`. Returns 0 and *out (free with
 * dlock_loop_free, before uv's own end), or DLOCK_ENOMEM. */
static inline int dlock_uv_loop_new(uv_loop_t *uv, dlock_loop **out) {
  *out = NULL;
  dlock_uv__loop *st = (dlock_uv__loop *)calloc(1, sizeof *st);
  if (st == NULL) return DLOCK_ENOMEM;
  st->uv = uv;
  if (uv_timer_init(uv, &st->timer) != 0) {
    free(st);
    return DLOCK_ENOMEM;
  }
  st->timer.data = st;
  dlock_loop_hooks h = {sizeof h, st, dlock_uv__watch, dlock_uv__timer,
                        dlock_uv__cleanup};
  int rc = dlock_loop_new(&h, &st->lp);
  if (rc != 0) {
    uv_close((uv_handle_t *)&st->timer, dlock_uv__free_handle);
    return rc;
  }
  *out = st->lp;
  return 0;
}

#endif /* DLOCK_UV_H */
