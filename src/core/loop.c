/* loop.c: the event-loop seam: fd watches and timers over a caller's loop
 * (a table of hooks) or the built-in epoll driver; many timers on the
 * hooks' one timer through a binary heap; work put off to the end of a
 * dispatch (dl_defer). */
#include "core.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef __linux__
#include <sys/epoll.h>
#include <sys/timerfd.h>
#endif

struct dl_watch {
  dl_loop *lp;
  int fd;
  int events;
  void *slot; /* the adapter's */
  dl_watch_fn fn;
  void *ud;
};

struct dlock_loop {
  dlock_loop_hooks hooks;
  bool builtin;
  int epfd, tfd; /* the built-in driver's */
  dl_watch **byfd; /* watches, by fd */
  int nfd;
  dl_timer **heap; /* a min-heap on (at, seq) */
  size_t n, cap;
  uint64_t seq;
  int dispatching; /* timer dispatch depth: the hook is re-armed after it */
  bool armed;      /* the hook timer is armed for armed_at */
  int64_t armed_at;
  int running;                       /* dispatch depth, for dl_defer */
  uint64_t watch_calls, timer_calls; /* the hooks', for tests */
  dl_defer *dhead, *dtail;           /* put off to the dispatch's end */
};

/* ---- the timer heap ---- */

static bool before(const dl_timer *a, const dl_timer *b) {
  return a->at < b->at || (a->at == b->at && a->seq < b->seq);
}

static void place(dl_loop *lp, size_t i, dl_timer *t) {
  lp->heap[i] = t;
  t->pos = i + 1;
}

static void sift_up(dl_loop *lp, size_t i) {
  dl_timer *t = lp->heap[i];
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (!before(t, lp->heap[parent])) break;
    place(lp, i, lp->heap[parent]);
    i = parent;
  }
  place(lp, i, t);
}

static void sift_down(dl_loop *lp, size_t i) {
  dl_timer *t = lp->heap[i];
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= lp->n) break;
    if (c + 1 < lp->n && before(lp->heap[c + 1], lp->heap[c])) c++;
    if (!before(lp->heap[c], t)) break;
    place(lp, i, lp->heap[c]);
    i = c;
  }
  place(lp, i, t);
}

static void heap_remove(dl_loop *lp, dl_timer *t) {
  size_t i = t->pos - 1;
  t->pos = 0;
  dl_timer *last = lp->heap[--lp->n];
  if (i == lp->n) return;
  place(lp, i, last);
  if (i > 0 && before(last, lp->heap[(i - 1) / 2])) sift_up(lp, i);
  else sift_down(lp, i);
}

static void hook_timer(dl_loop *lp, int64_t ms) {
  lp->timer_calls++;
  lp->hooks.timer(lp->hooks.data, ms);
}

/* Arms the hook timer for the earliest timer, unless a dispatch will.
 * Lazily: an arming that stands for an earlier time than the earliest
 * timer's (that timer was stopped) is kept, and when it fires the dispatch
 * finds nothing due and arms again. A request's deadline is started and
 * stopped per request; following each stop would cost the built-in driver
 * a timerfd_settime per request. The built-in driver's timer also stays
 * armed with no timer left (it fires once, for nothing); a caller's loop
 * is disarmed then, so that it can tell it has nothing left to do. */
static void rearm(dl_loop *lp) {
  if (lp->dispatching > 0) return;
  if (lp->n == 0) {
    if (lp->armed && !lp->builtin) hook_timer(lp, -1);
    if (!lp->builtin) lp->armed = false;
    return;
  }
  int64_t at = lp->heap[0]->at;
  if (lp->armed && lp->armed_at <= at) return;
  int64_t ms = at - dl_now_ms();
  hook_timer(lp, ms < 0 ? 0 : ms);
  lp->armed = true;
  lp->armed_at = at;
}

void dl_timer_init(dl_timer *t, dl_timer_fn fn, void *ud) {
  memset(t, 0, sizeof *t);
  t->fn = fn;
  t->ud = ud;
}

int dl_timer_start(dl_loop *lp, dl_timer *t, int64_t at_ms) {
  if (t->pos) heap_remove(lp, t);
  if (lp->n == lp->cap) {
    size_t cap = lp->cap ? lp->cap * 2 : 64;
    dl_timer **h = realloc(lp->heap, cap * sizeof *h);
    if (h == NULL) {
      rearm(lp);
      return DLOCK_ENOMEM;
    }
    lp->heap = h;
    lp->cap = cap;
  }
  t->at = at_ms;
  t->seq = lp->seq++;
  lp->heap[lp->n] = t;
  t->pos = ++lp->n;
  sift_up(lp, lp->n - 1);
  rearm(lp);
  return 0;
}

void dl_timer_stop(dl_loop *lp, dl_timer *t) {
  if (t->pos == 0) return;
  heap_remove(lp, t);
  rearm(lp);
}

size_t dl_loop_timers(const dl_loop *lp) { return lp->n; }

void dl_loop_hook_calls(const dl_loop *lp, uint64_t *watch, uint64_t *timer) {
  *watch = lp->watch_calls;
  *timer = lp->timer_calls;
}

/* ---- work put off to the end of a dispatch ---- */

void dl_defer_init(dl_defer *d, void (*fn)(void *ud), void *ud) {
  memset(d, 0, sizeof *d);
  d->fn = fn;
  d->ud = ud;
}

bool dl_defer_add(dl_loop *lp, dl_defer *d) {
  if (lp->running == 0) return false;
  if (d->queued) return true;
  d->queued = true;
  d->next = NULL;
  d->prev = lp->dtail;
  if (lp->dtail)
    lp->dtail->next = d;
  else
    lp->dhead = d;
  lp->dtail = d;
  return true;
}

void dl_defer_cancel(dl_loop *lp, dl_defer *d) {
  if (!d->queued) return;
  if (d->prev)
    d->prev->next = d->next;
  else
    lp->dhead = d->next;
  if (d->next)
    d->next->prev = d->prev;
  else
    lp->dtail = d->prev;
  d->prev = d->next = NULL;
  d->queued = false;
}

static void enter_dispatch(dl_loop *lp) {
  lp->running++;
}

/* Ends a dispatch; the outermost runs what was put off, in order (what
 * that adds runs too, in the same round). */
static void leave_dispatch(dl_loop *lp) {
  if (lp->running > 1) {
    lp->running--;
    return;
  }
  while (lp->dhead) {
    dl_defer *d = lp->dhead;
    dl_defer_cancel(lp, d);
    d->fn(d->ud);
  }
  lp->running--;
}

void dlock_loop_on_timer(dlock_loop *lp) {
  lp->armed = false; /* it fired */
  enter_dispatch(lp);
  lp->dispatching++;
  /* Only timers started before this dispatch: one that a callback starts
   * for "now" waits for the next, so a callback that re-arms itself cannot
   * hold the loop. */
  uint64_t limit = lp->seq;
  int64_t now = dl_now_ms();
  while (lp->n > 0 && lp->heap[0]->at <= now && lp->heap[0]->seq < limit) {
    dl_timer *t = lp->heap[0];
    heap_remove(lp, t);
    t->fn(t->ud);
  }
  lp->dispatching--;
  rearm(lp);
  leave_dispatch(lp);
}

/* ---- watches ---- */

int dl_watch_new(dl_loop *lp, int fd, dl_watch_fn fn, void *ud,
                 dl_watch **out) {
  *out = NULL;
  if (fd < 0 || (fd < lp->nfd && lp->byfd[fd] != NULL)) return DLOCK_EINVAL;
  if (fd >= lp->nfd) {
    int nfd = lp->nfd ? lp->nfd : 64;
    while (nfd <= fd) nfd *= 2;
    dl_watch **t = realloc(lp->byfd, (size_t)nfd * sizeof *t);
    if (t == NULL) return DLOCK_ENOMEM;
    memset(t + lp->nfd, 0, (size_t)(nfd - lp->nfd) * sizeof *t);
    lp->byfd = t;
    lp->nfd = nfd;
  }
  dl_watch *w = calloc(1, sizeof *w);
  if (w == NULL) return DLOCK_ENOMEM;
  w->lp = lp;
  w->fd = fd;
  w->fn = fn;
  w->ud = ud;
  lp->byfd[fd] = w;
  *out = w;
  return 0;
}

int dl_watch_set(dl_watch *w, int events) {
  if (events == w->events) return 0;
  dl_loop *lp = w->lp;
  lp->watch_calls++;
  if (lp->hooks.watch(lp->hooks.data, w->fd, events, &w->slot) != 0) {
    w->events = 0; /* the adapter watches it no more (the hook's contract) */
    w->slot = NULL;
    return DLOCK_EINVAL;
  }
  w->events = events;
  return 0;
}

void dl_watch_free(dl_watch *w) {
  if (w == NULL) return;
  dl_watch_set(w, 0);
  w->lp->byfd[w->fd] = NULL;
  free(w);
}

void dlock_loop_on_io(dlock_loop *lp, int fd, int events) {
  if (fd < 0 || fd >= lp->nfd || lp->byfd[fd] == NULL) return;
  dl_watch *w = lp->byfd[fd];
  events &= w->events;
  if (events == 0) return;
  enter_dispatch(lp);
  w->fn(w->ud, events); /* may free w: not touched after */
  leave_dispatch(lp);
}

/* ---- the built-in driver ---- */

#ifdef __linux__
static int epoll_watch(void *data, int fd, int events, void **slot) {
  dl_loop *lp = data;
  struct epoll_event ev = {.events = 0, .data.fd = fd};
  if (events & DL_EV_READ) ev.events |= EPOLLIN;
  if (events & DL_EV_WRITE) ev.events |= EPOLLOUT;
  int op = events == 0 ? EPOLL_CTL_DEL : *slot ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
  if (events == 0 && *slot == NULL) return 0;
  if (epoll_ctl(lp->epfd, op, fd, &ev) != 0 && events != 0) {
    if (*slot) epoll_ctl(lp->epfd, EPOLL_CTL_DEL, fd, &ev);
    *slot = NULL;
    return -1;
  }
  *slot = events ? (void *)lp : NULL; /* non-NULL: in the epoll set */
  return 0;
}

static void timerfd_arm(void *data, int64_t ms) {
  dl_loop *lp = data;
  struct itimerspec its = {{0, 0}, {0, 0}};
  if (ms == 0) its.it_value.tv_nsec = 1; /* 0 would disarm */
  else if (ms > 0) {
    its.it_value.tv_sec = ms / 1000;
    its.it_value.tv_nsec = (ms % 1000) * 1000000;
  }
  timerfd_settime(lp->tfd, 0, &its, NULL);
}
#endif

int dlock_loop_new(const dlock_loop_hooks *hooks, dlock_loop **out) {
  *out = NULL;
  dlock_loop_hooks h = {0};
  if (hooks) {
    /* A table never sized, or a newer one that sets a hook unknown here. */
    if (hooks->size < DLOCK_LOOP_HOOKS_SIZE_0) return DLOCK_EINVAL;
    for (size_t i = sizeof h; i < hooks->size; i++)
      if (((const unsigned char *)hooks)[i] != 0) return DLOCK_EINVAL;
    memcpy(&h, hooks, hooks->size < sizeof h ? hooks->size : sizeof h);
    h.size = sizeof h;
    hooks = &h;
  }
  if (hooks && (hooks->watch == NULL || hooks->timer == NULL))
    return DLOCK_EINVAL;
#ifndef __linux__
  if (hooks == NULL) return DLOCK_ENOTSUP;
#endif
  dl_loop *lp = calloc(1, sizeof *lp);
  if (lp == NULL) return DLOCK_ENOMEM;
  lp->epfd = lp->tfd = -1;
  if (hooks) {
    lp->hooks = *hooks;
    *out = lp;
    return 0;
  }
#ifdef __linux__
  lp->builtin = true;
  lp->hooks.data = lp;
  lp->hooks.watch = epoll_watch;
  lp->hooks.timer = timerfd_arm;
  lp->epfd = epoll_create1(EPOLL_CLOEXEC);
  lp->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = lp->tfd};
  if (lp->epfd < 0 || lp->tfd < 0 ||
      epoll_ctl(lp->epfd, EPOLL_CTL_ADD, lp->tfd, &ev) != 0) {
    int e = errno == ENOMEM ? DLOCK_ENOMEM : DLOCK_ENOTSUP;
    if (lp->epfd >= 0) close(lp->epfd);
    if (lp->tfd >= 0) close(lp->tfd);
    free(lp);
    return e;
  }
#endif
  *out = lp;
  return 0;
}

int dlock_loop_fd(dlock_loop *lp) { return lp->builtin ? lp->epfd : -1; }

int64_t dlock_loop_timeout_ms(dlock_loop *lp) {
  if (lp->n == 0) return -1;
  int64_t ms = lp->heap[0]->at - dl_now_ms();
  return ms < 0 ? 0 : ms;
}

int dlock_loop_run(dlock_loop *lp, int64_t max_ms) {
#ifdef __linux__
  if (!lp->builtin) return DLOCK_EINVAL;
  int64_t wait = dlock_loop_timeout_ms(lp);
  if (max_ms >= 0 && (wait < 0 || wait > max_ms)) wait = max_ms;
  if (wait > 1000000) wait = 1000000;
  struct epoll_event evs[64];
  int n = epoll_wait(lp->epfd, evs, 64, (int)wait);
  if (n < 0) return errno == EINTR ? 0 : DLOCK_ECONNLOST;
  int handled = 0;
  bool timer = false;
  enter_dispatch(lp); /* what the round puts off runs at its end */
  for (int i = 0; i < n; i++) {
    int fd = evs[i].data.fd;
    if (fd == lp->tfd) {
      uint64_t ticks;
      ssize_t r = read(lp->tfd, &ticks, sizeof ticks);
      (void)r;
      timer = true;
      continue;
    }
    int events = 0;
    if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) events |= DL_EV_READ;
    if (evs[i].events & (EPOLLOUT | EPOLLERR)) events |= DL_EV_WRITE;
    dlock_loop_on_io(lp, fd, events);
    handled++;
  }
  /* Due timers run even if the timerfd's tick is still to come. */
  if (timer || (lp->n > 0 && lp->heap[0]->at <= dl_now_ms())) {
    dlock_loop_on_timer(lp);
    handled++;
  }
  leave_dispatch(lp);
  return handled;
#else
  (void)lp;
  (void)max_ms;
  return DLOCK_EINVAL;
#endif
}

void dlock_loop_free(dlock_loop *lp) {
  if (lp == NULL) return;
  /* What its users left: the adapter's per-fd state is released. */
  for (int fd = 0; fd < lp->nfd; fd++) dl_watch_free(lp->byfd[fd]);
  for (size_t i = 0; i < lp->n; i++) lp->heap[i]->pos = 0;
  if (lp->armed) hook_timer(lp, -1);
  if (lp->hooks.cleanup) lp->hooks.cleanup(lp->hooks.data);
  if (lp->epfd >= 0) close(lp->epfd);
  if (lp->tfd >= 0) close(lp->tfd);
  free(lp->byfd);
  free(lp->heap);
  free(lp);
}
