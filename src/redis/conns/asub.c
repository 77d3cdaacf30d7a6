/* asub.c: the subscriber connection for an event loop, pubsub.c's
 * counterpart: the channel table and the wake modes are subs.c's, the
 * connection (connect, handshake, backoff, reconnect) is dl_aconn's, in
 * push mode. What is left here: requests and their timers.
 *
 * Each request has one dl_timer. It first runs to the deadline; when the
 * request's result is known before (woken, confirmed), the timer is
 * restarted to fire at once, and fn hears the result from there: no fn
 * runs inside the call (or the read) that decided it, and since timers due
 * together fire in the order they were started, waiters woken by one
 * message hear it in the order they were woken, the order of `since`.
 * Restarting a started timer never allocates, so it cannot fail. */
#include "subs.h"

#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <string.h>


struct dl_asub_req {
  dl_sleeper base; /* first: a wait's place among its sub's sleepers */
  dl_asub *s;
  dl_sub *sub;
  bool confirm; /* a confirm; else a wait */
  bool asleep;  /* a wait among its sub's sleepers */
  bool done;    /* rc is known: the timer tells fn */
  int rc;
  dl_timer timer;
  dl_asub_fn fn;
  void *ud;
  dl_asub_req *prev, *next;   /* s->all: every request */
  dl_asub_req *cprev, *cnext; /* s->confirms: confirms not yet done */
};

struct dl_asub {
  dl_loop *lp;
  const dl_conn_config *cfg;
  dl_aconn *c;
  dl_subs t;
  bool started; /* connecting or up since the first ref */
  dl_asub_req *all, *confirms;
  dl_timer sweep_timer; /* while subscriptions linger */
  dl_timer ping_timer;  /* while up: the idle PING */
  bool heard;           /* something was read since the last tick */
  bool ping_sent;
  bool broken; /* a command could not be queued: reconnect */
  dl_timer moved_timer; /* Sentinel, while up: a failover moves it */
};

static void link_all(dl_asub *s, dl_asub_req *r) {
  r->prev = NULL;
  r->next = s->all;
  if (s->all) s->all->prev = r;
  s->all = r;
}

static void unlink_all(dl_asub *s, dl_asub_req *r) {
  if (r->prev) r->prev->next = r->next;
  else s->all = r->next;
  if (r->next) r->next->prev = r->prev;
}

static void link_confirm(dl_asub *s, dl_asub_req *r) {
  r->cprev = NULL;
  r->cnext = s->confirms;
  if (s->confirms) s->confirms->cprev = r;
  s->confirms = r;
}

static void unlink_confirm(dl_asub *s, dl_asub_req *r) {
  if (r->cprev) r->cprev->cnext = r->cnext;
  else s->confirms = r->cnext;
  if (r->cnext) r->cnext->cprev = r->cprev;
  r->cprev = r->cnext = NULL;
}

/* Takes r out of whatever it waits in (its sub's sleepers, the confirms). */
static void detach(dl_asub *s, dl_asub_req *r) {
  if (r->asleep) dl_subs_unlink(&s->t, r->sub, &r->base);
  r->asleep = false;
  if (r->confirm && !r->done) unlink_confirm(s, r);
}

/* Frees r and tells fn rc. Nothing of s is touched after fn. */
static void deliver(dl_asub *s, dl_asub_req *r, int rc) {
  dl_timer_stop(s->lp, &r->timer);
  unlink_all(s, r);
  dl_asub_fn fn = r->fn;
  void *ud = r->ud;
  free(r);
  fn(ud, rc);
}

/* r's result is rc: fn hears it from the timer, at once. */
static void complete(dl_asub *s, dl_asub_req *r, int rc) {
  if (r->done) return;
  detach(s, r);
  r->done = true;
  r->rc = rc;
  dl_timer_start(s->lp, &r->timer, 0); /* started already: cannot fail */
}

static void on_timer(void *ud) {
  dl_asub_req *r = ud;
  dl_asub *s = r->s;
  if (!r->done) { /* the deadline */
    detach(s, r);
    r->rc = r->confirm ? DLOCK_ETIMEDOUT : 0;
  }
  deliver(s, r, r->rc);
}

/* The table's hooks (subs.h). */
static void hook_wake(void *owner, dl_sleeper *w) {
  dl_asub_req *r = (dl_asub_req *)w;
  r->asleep = false; /* taken out by the table */
  complete(owner, r, 1);
}

/* A command lost (not queued, or not written by its deadline): its
 * confirmation would never come, so a new connection subscribes again.
 * Not at once (the table may be mid-change): from the ping timer. */
static void set_broken(dl_asub *s) {
  if (s->broken) return;
  s->broken = true;
  dl_timer_start(s->lp, &s->ping_timer, 0);
}

/* A command was written (rc 0), or failed: a timeout means the connection
 * is stuck; a loss or the close need nothing (a reconnect subscribes
 * again; the close frees everything). */
static void on_sent(void *ud, int rc, redisReply *r) {
  if (r) freeReplyObject(r);
  if (rc == DLOCK_ETIMEDOUT) set_broken(ud);
}

static void hook_send(void *owner, const char *verb, const char *ch) {
  dl_asub *s = owner;
  const char *argv[2] = {verb, ch};
  size_t lens[2] = {strlen(verb), strlen(ch)};
  int err;
  if (dl_aconn_send(s->c, 2, argv, lens, 0, on_sent, s, &err) == NULL)
    set_broken(s);
}

static void hook_changed(void *owner, dl_sub *sub) {
  dl_asub *s = owner;
  if (!dl_subs_confirmed(&s->t, sub)) return; /* down: confirms wait on */
  for (dl_asub_req *r = s->confirms, *n; r; r = n) {
    n = r->cnext;
    if (r->sub == sub) complete(s, r, 0);
  }
}

static const dl_subs_hooks HOOKS = {hook_wake, hook_send, hook_changed, NULL,
                                    NULL};

/* The connection's push hooks (aconn.c). */
static void push_up(void *ud) {
  dl_asub *s = ud;
  s->heard = true;
  s->ping_sent = false;
  s->broken = false;
  dl_timer_start(s->lp, &s->ping_timer, dl_now_ms() + DL_SUBS_IDLE_PING_MS);
  if (s->cfg->watch) dl_timer_start(s->lp, &s->moved_timer, dl_now_ms() + 250);
  dl_subs_connected(&s->t);
}

static void push_reply(void *ud, redisReply *r) {
  dl_asub *s = ud;
  s->heard = true;
  dl_subs_dispatch(&s->t, r);
  freeReplyObject(r);
}

static void push_down(void *ud) {
  dl_asub *s = ud;
  dl_timer_stop(s->lp, &s->ping_timer);
  dl_timer_stop(s->lp, &s->moved_timer);
  dl_subs_disconnected(&s->t);
}

/* While up, each DL_SUBS_IDLE_PING_MS: a link nothing came on gets a PING, and one
 * whose PING went unanswered is dropped and made again (pubsub.c's
 * read_some does the same). */
static void on_ping(void *ud) {
  dl_asub *s = ud;
  if (s->broken) {
    s->broken = false;
    dl_aconn_reconnect(s->c); /* push_down, then push_up once back */
    return;
  }
  if (s->heard) {
    s->heard = false;
    s->ping_sent = false;
  } else if (s->ping_sent) {
    dl_aconn_reconnect(s->c);
    return;
  } else {
    hook_send(s, "PING", "");
    s->ping_sent = true;
  }
  dl_timer_start(s->lp, &s->ping_timer, dl_now_ms() + DL_SUBS_IDLE_PING_MS);
}

/* Sentinel: after a failover the old master may still be up, and its
 * messages would never come: the subscriber moves (looked at every
 * quarter second; push_down, then push_up on the new master). */
static void on_moved(void *ud) {
  dl_asub *s = ud;
  dl_timer_start(s->lp, &s->moved_timer, dl_now_ms() + 250);
  dl_aconn_check_moved(s->c);
}

/* Unsubscribes what lingered long enough; again while some still do. */
static void on_sweep(void *ud) {
  dl_asub *s = ud;
  int64_t now = dl_now_ms();
  dl_subs_sweep(&s->t, now);
  if (s->t.lingering > 0)
    dl_timer_start(s->lp, &s->sweep_timer, now + DL_SUBS_SWEEP_MS);
}

/* The connection is wanted from now on. */
static void start(dl_asub *s) {
  if (s->started) return;
  s->started = true;
  dl_aconn_connect(s->c); /* failed at once: it retries after the backoff */
}

int dl_asub_new(dl_loop *lp, const dl_conn_config *cfg, dl_asub **out) {
  *out = NULL;
  dl_asub *s = calloc(1, sizeof *s);
  if (s == NULL) return DLOCK_ENOMEM;
  if (dl_aconn_new(lp, cfg, &s->c) != 0) {
    free(s);
    return DLOCK_ENOMEM;
  }
  s->lp = lp;
  s->cfg = cfg;
  dl_subs_init(&s->t, &HOOKS, s);
  dl_aconn_push push = {push_up, push_reply, push_down, s};
  dl_aconn_set_push(s->c, &push);
  dl_timer_init(&s->sweep_timer, on_sweep, s);
  dl_timer_init(&s->ping_timer, on_ping, s);
  dl_timer_init(&s->moved_timer, on_moved, s);
  *out = s;
  return 0;
}

void dl_asub_free(dl_asub *s) {
  if (s == NULL) return;
  dl_aconn_free(s->c); /* no hook runs from here on */
  dl_timer_stop(s->lp, &s->sweep_timer);
  dl_timer_stop(s->lp, &s->ping_timer);
  dl_timer_stop(s->lp, &s->moved_timer);
  while (s->all) {
    dl_asub_req *r = s->all;
    detach(s, r);
    r->done = true;
    deliver(s, r, DLOCK_ECLOSED);
  }
  dl_subs_clear(&s->t);
  free(s);
}

dl_sub *dl_asub_ref(dl_asub *s, const char *channel, int mode) {
  start(s);
  return dl_subs_ref(&s->t, channel, mode);
}

dl_sub *dl_asub_ref_heard(dl_asub *s, const char *channel, int mode) {
  dl_sub *sub = dl_subs_find(&s->t, channel, strlen(channel));
  if (sub == NULL || !dl_subs_confirmed(&s->t, sub)) return NULL;
  return dl_subs_ref(&s->t, channel, mode);
}

bool dl_asub_confirmed(dl_asub *s, dl_sub *sub) {
  return dl_subs_confirmed(&s->t, sub);
}

/* A request on sub until deadline, in s->all, or NULL. */
static dl_asub_req *req_new(dl_asub *s, dl_sub *sub, int64_t deadline,
                            dl_asub_fn fn, void *ud) {
  dl_asub_req *r = calloc(1, sizeof *r);
  if (r == NULL) return NULL;
  r->s = s;
  r->sub = sub;
  r->fn = fn;
  r->ud = ud;
  dl_timer_init(&r->timer, on_timer, r);
  if (dl_timer_start(s->lp, &r->timer, deadline) != 0) {
    free(r);
    return NULL;
  }
  link_all(s, r);
  return r;
}

dl_asub_req *dl_asub_confirm(dl_asub *s, dl_sub *sub, int64_t deadline,
                             dl_asub_fn fn, void *ud) {
  dl_asub_req *r = req_new(s, sub, deadline, fn, ud);
  if (r == NULL) return NULL;
  r->confirm = true;
  link_confirm(s, r);
  if (dl_subs_confirmed(&s->t, sub)) complete(s, r, 0);
  return r;
}

dl_asub_req *dl_asub_wait(dl_asub *s, dl_sub *sub, int64_t deadline,
                          int64_t since, dl_sub *grant, dl_asub_fn fn,
                          void *ud) {
  dl_asub_req *r = req_new(s, sub, deadline, fn, ud);
  if (r == NULL) return NULL;
  r->base.since = since;
  r->base.grant = grant;
  if (dl_subs_sleep(&s->t, sub, &r->base)) complete(s, r, 1);
  else r->asleep = true;
  return r;
}

void dl_asub_cancel(dl_asub_req *r) {
  if (r == NULL) return;
  dl_asub *s = r->s;
  detach(s, r);
  dl_timer_stop(s->lp, &r->timer);
  unlink_all(s, r);
  /* A wake-up it was given and will not use: the next sleeper's. */
  if (r->done && r->rc == 1 && !r->confirm) dl_subs_wake_one(&s->t, r->sub);
  free(r);
}

int dl_asub_grant(dl_asub *s, dl_sub *sub, uint64_t *token) {
  return dl_subs_grant(&s->t, sub, token);
}

void dl_asub_unref(dl_asub *s, dl_sub *sub, bool linger) {
  if (sub == NULL) return;
  dl_subs_unref(&s->t, sub, linger);
  if (s->t.lingering > 0 && !dl_timer_active(&s->sweep_timer))
    dl_timer_start(s->lp, &s->sweep_timer, dl_now_ms() + DL_SUBS_LINGER_MS);
}

void dl_asub_kick(dl_asub *s, dl_sub *sub) {
  if (sub) dl_subs_kick(&s->t, sub);
}

int dl_asub_listen(dl_asub *s, const char *channel, bool pattern,
                   size_t strip, dl_notice_fn fn, void *ud) {
  start(s);
  return dl_subs_listen(&s->t, channel, pattern, strip, fn, ud) ? 0
                                                               : DLOCK_ENOMEM;
}

uint64_t dl_asub_wakeups(dl_asub *s) { return s->t.wakeups; }

bool dl_asub_dropped(dl_asub *s, dl_sub *sub) {
  (void)s;
  return !sub->active;
}
