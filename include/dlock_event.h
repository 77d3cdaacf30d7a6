/* dlock_event.h: runs a dlock_loop on a libevent 2 event_base (header-only:
 * libdlock itself links no event library). Include it after
 * <event2/event.h>.
 *
 *   dlock_loop *lp;
 *   dlock_event_loop_new(base, &lp);
 *   ... event_base_dispatch(base) ...
 *   dlock_loop_free(lp);        before event_base_free(base)
 *
 * Every call on the dlock_loop, and every dlock callback, happens on the
 * thread that runs the event_base. */
#ifndef DLOCK_EVENT_H
#define DLOCK_EVENT_H

#include <event2/event.h>
#include <stdlib.h>

#include "dlock_async.h"

typedef struct dlock_event__loop {
  struct event_base *base;
  struct event *timer;
  dlock_loop *lp;
} dlock_event__loop;

typedef struct dlock_event__fd {
  struct event *ev;
  dlock_event__loop *st;
} dlock_event__fd;

static void dlock_event__on_io(evutil_socket_t fd, short what, void *arg) {
  dlock_event__fd *f = (dlock_event__fd *)arg;
  int ev = ((what & EV_READ) ? DLOCK_EV_READ : 0) |
           ((what & EV_WRITE) ? DLOCK_EV_WRITE : 0);
  dlock_loop_on_io(f->st->lp, (int)fd, ev);
}

static int dlock_event__watch(void *data, int fd, int events, void **slot) {
  dlock_event__loop *st = (dlock_event__loop *)data;
  dlock_event__fd *f = (dlock_event__fd *)*slot;
  if (events == 0) {
    if (f) {
      event_free(f->ev);
      free(f);
      *slot = NULL;
    }
    return 0;
  }
  short what = EV_PERSIST | ((events & DLOCK_EV_READ) ? EV_READ : 0) |
               ((events & DLOCK_EV_WRITE) ? EV_WRITE : 0);
  int rc;
  if (f == NULL) {
    f = (dlock_event__fd *)calloc(1, sizeof *f);
    if (f == NULL) return -1;
    f->st = st;
    f->ev = event_new(st->base, fd, what, dlock_event__on_io, f);
    rc = f->ev ? event_add(f->ev, NULL) : -1;
  } else { /* an event's mask is fixed while it is added: re-assign it */
    event_del(f->ev);
    rc = event_assign(f->ev, st->base, fd, what, dlock_event__on_io, f);
    if (rc == 0) rc = event_add(f->ev, NULL);
  }
  if (rc != 0) { /* the contract: nothing watched, nothing kept */
    if (f->ev) event_free(f->ev);
    free(f);
    *slot = NULL;
    return -1;
  }
  *slot = f;
  return 0;
}

static void dlock_event__on_timer(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  dlock_loop_on_timer(((dlock_event__loop *)arg)->lp);
}

static void dlock_event__timer(void *data, int64_t ms) {
  dlock_event__loop *st = (dlock_event__loop *)data;
  if (ms < 0) {
    evtimer_del(st->timer);
    return;
  }
  struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
  evtimer_add(st->timer, &tv);
}

static void dlock_event__cleanup(void *data) {
  dlock_event__loop *st = (dlock_event__loop *)data;
  event_free(st->timer);
  free(st);
}

/* Creates a dlock_loop on `base`. Returns 0 and *out (free with
 * dlock_loop_free, before event_base_free), or DLOCK_ENOMEM. */
static inline int dlock_event_loop_new(struct event_base *base,
                                       dlock_loop **out) {
  *out = NULL;
  dlock_event__loop *st = (dlock_event__loop *)calloc(1, sizeof *st);
  if (st == NULL) return DLOCK_ENOMEM;
  st->base = base;
  st->timer = evtimer_new(base, dlock_event__on_timer, st);
  if (st->timer == NULL) {
    free(st);
    return DLOCK_ENOMEM;
  }
  dlock_loop_hooks h = {sizeof h, st, dlock_event__watch, dlock_event__timer,
                        dlock_event__cleanup};
  int rc = dlock_loop_new(&h, &st->lp);
  if (rc != 0) {
    event_free(st->timer);
    free(st);
    return rc;
  }
  *out = st->lp;
  return 0;
}

#endif /* DLOCK_EVENT_H */
