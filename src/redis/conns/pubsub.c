/* pubsub.c: the client's one subscriber connection. Waiters share
 * reference-counted channel subscriptions; an unlock message wakes one
 * waiter of the process, the one that has slept longest, and a waiter never
 * misses a message that arrives between its failed attempt and its sleep
 * (a message that finds nobody asleep is kept as a permit).
 *
 * Who reads the socket. The subscriber thread, unless a waiter does: a
 * thread that goes to sleep waiting for its grant (or finds nobody reading)
 * takes the reader role, reads the socket instead of sleeping on its word,
 * and dispatches what comes, for everyone. Its own grant then wakes it with
 * no thread in between: the subscriber thread's hop, a wake-up on the
 * hand-off's path, is gone. The thread hands the role over when asked (a
 * byte on the bell, a pipe it polls beside the socket) and parks; a reader
 * that leaves passes the role to another sleeper, or back to the thread if
 * a subscription's confirmation is awaited, or to nobody: the next sleeper
 * then takes it without waking anyone, and the parked thread reads again
 * at its next sweep (DL_SUBS_SWEEP_MS) at the latest. The reader's parser and
 * buffer live here; the role, under mu, says whose they are. */
#include "subs.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BUF_SIZE 16384

/* A thread asleep in dl_pubsub_wait (subs.h's dl_sleeper, first). */
typedef struct sleeper {
  dl_sleeper base;
  struct sleeper *aprev, *anext; /* every sleeper of the client */
  /* SLEEPING until a waker takes it out of the list and sets WOKEN (or the
   * client closes: STOPPED); READING while it holds the reader role. The
   * sleeper parks on this word rather than on a condition variable of mu,
   * so a woken thread returns without queueing for mu behind the thread
   * that woke it. Changed under mu only. */
  atomic_int state;
  /* Set under mu when the reader role is given to it (make_reader): a
   * sleeper woken before it took the role up gives it back. */
  bool given;
} sleeper;

enum { SLEEPING, WOKEN, STOPPED, READING };
/* What the subscriber thread is doing: reading the socket, parked while a
 * sleeper reads (or nobody needs to), or anything else. */
enum { T_BUSY, T_READING, T_PARKED };

struct dl_pubsub {
  const dl_conn_config *cfg;
  pthread_mutex_t mu;
  pthread_cond_t stop_cv;
  pthread_t thread;
  bool started;
  dl_io *io; /* written under mu; read and closed by the thread */
  dl_io *hs_io; /* the connection in its handshake (under mu): shut by free */
  bool stop;
  unsigned gen; /* dl_target's gen of the connection (the thread's) */
  dl_subs t; /* up while io is set */
  uint64_t direct; /* wake-ups read by the sleeper they woke */
  /* The reader role (the file's header comment). */
  sleeper *all;    /* every sleeper */
  sleeper *reader; /* the sleeper reading, or NULL */
  sleeper *want;   /* a grant's sleeper that asked the thread for the role */
  int tmode;       /* T_*: the subscriber thread */
  bool idle;       /* the last reader left with nobody to read for */
  bool dispatching; /* the reader dispatches: its own wake needs no bell */
  int read_err;    /* a sleeper's read failed: the thread reconnects */
  int confirming;  /* threads awaiting a subscription's confirmation */
  int bell[2];     /* a pipe: a byte wakes the reader out of its poll */
  pthread_cond_t thread_cv; /* the parked thread */
  redisReader *rd; /* the connection's parser, and the buffer it is fed */
  char *buf;
  int64_t quiet_since; /* nothing read since (or the idle PING) */
  bool ping_sent;
};

static void ring(dl_pubsub *p) {
  char b = 1;
  ssize_t n = write(p->bell[1], &b, 1); /* a full pipe is rung already */
  (void)n;
}

static void drain(dl_pubsub *p) {
  char b[64];
  while (read(p->bell[0], b, sizeof b) > 0) {
  }
}

/* With mu held: w has been taken out of its list (or, when the client
 * closes, is left there for w to take itself out under mu). Nothing of w is
 * read after the store, so it may return (and its stack go) at once. A
 * sleeper that reads is told by the bell, unless it is the one
 * dispatching. */
static void rouse(dl_pubsub *p, sleeper *w, int state) {
  if (p->want == w) p->want = NULL;
  int old = atomic_exchange_explicit(&w->state, state, memory_order_acq_rel);
  if (old == SLEEPING) dl_park_wake(&w->state);
  else if (old == READING && p->dispatching) p->direct++;
  else if (old == READING) ring(p);
}

/* With mu held: w, asleep, becomes the reader; `self` when w is the caller
 * (no wake-up). False if w no longer sleeps. */
static bool make_reader(dl_pubsub *p, sleeper *w, bool self) {
  int expect = SLEEPING;
  if (!atomic_compare_exchange_strong(&w->state, &expect, READING))
    return false;
  w->given = true;
  p->reader = w;
  p->idle = false;
  if (!self) dl_park_wake(&w->state);
  return true;
}

/* With mu held: sends one command. A failed write shuts the socket; the
 * thread then reconnects and subscribes again. */
static void send_cmd(dl_pubsub *p, const char *verb, const char *ch) {
  if (p->io == NULL) return;
  const char *argv[2] = {verb, ch};
  size_t lens[2] = {strlen(verb), strlen(ch)};
  char *cmd;
  int len = redisFormatSdsCommandArgv(&cmd, 2, argv, lens);
  if (len < 0) {
    dl_io_shutdown(p->io);
    return;
  }
  if (dl_io_write(p->io, cmd, (size_t)len,
                  dl_now_ms() + p->cfg->command_timeout_ms) != 0)
    dl_io_shutdown(p->io);
  redisFreeSdsCommand(cmd);
}

static void all_del(dl_pubsub *p, sleeper *w) {
  if (w->aprev) w->aprev->anext = w->anext;
  else p->all = w->anext;
  if (w->anext) w->anext->aprev = w->aprev;
}

/* The table's hooks (subs.h), with mu held. */
static void hook_wake(void *owner, dl_sleeper *w) {
  dl_pubsub *p = owner;
  all_del(p, (sleeper *)w);
  rouse(p, (sleeper *)w, WOKEN);
}

static void hook_send(void *owner, const char *verb, const char *ch) {
  send_cmd(owner, verb, ch);
}

static void hook_changed(void *owner, dl_sub *s) {
  (void)owner;
  pthread_cond_broadcast(&s->cv);
}

static void hook_created(void *owner, dl_sub *s) {
  (void)owner;
  dl_cond_init(&s->cv);
}

static void hook_freeing(void *owner, dl_sub *s) {
  (void)owner;
  pthread_cond_destroy(&s->cv);
}

static const dl_subs_hooks HOOKS = {hook_wake, hook_send, hook_changed,
                                    hook_created, hook_freeing};

static bool confirmed(dl_pubsub *p, dl_sub *s) {
  return dl_subs_confirmed(&p->t, s);
}

static void dispatch(dl_pubsub *p, redisReply *r) {
  dl_subs_dispatch(&p->t, r);
}

void dl_pubsub_feed(dl_pubsub *p, redisReply *r) {
  pthread_mutex_lock(&p->mu);
  dispatch(p, r);
  pthread_mutex_unlock(&p->mu);
}

/* With mu held, by the reader (the thread, or a sleeper with the role):
 * reads once, until `until` at the latest, and dispatches what came.
 * Unlocks mu while it waits. Returns 0 (read, timed out, or rung), or the
 * error that ends the connection; an idle link gets a PING, and a PING
 * unanswered for DL_SUBS_IDLE_PING_MS ends it. */
static int read_some(dl_pubsub *p, dl_io *io, int64_t until) {
  if (p->quiet_since + DL_SUBS_IDLE_PING_MS < until)
    until = p->quiet_since + DL_SUBS_IDLE_PING_MS;
  /* Sentinel: after a failover the old master may still be up; its
   * messages would never come, so the subscriber moves (looked at every
   * quarter second). */
  if (dl_target_moved(p->cfg, p->gen)) return DLOCK_ECONNLOST;
  if (p->cfg->watch && until > dl_now_ms() + 250) until = dl_now_ms() + 250;
  pthread_mutex_unlock(&p->mu);
  int n = dl_io_read_bell(io, p->buf, BUF_SIZE, until, p->bell[0]);
  pthread_mutex_lock(&p->mu);
  int64_t now = dl_now_ms();
  if (n == 0) { /* rung: the caller looks at why */
    drain(p);
    return 0;
  }
  if (n == DLOCK_ETIMEDOUT) {
    if (now - p->quiet_since < DL_SUBS_IDLE_PING_MS) return 0;
    if (p->ping_sent) return n; /* the PING went unanswered */
    /* An idle link: a PING proves the server is still there. */
    send_cmd(p, "PING", "");
    p->ping_sent = true;
    p->quiet_since = now;
    return 0;
  }
  if (n < 0) return n;
  if (redisReaderFeed(p->rd, p->buf, (size_t)n) != REDIS_OK)
    return DLOCK_EPROTO;
  p->ping_sent = false;
  p->quiet_since = now;
  int rc = 0;
  p->dispatching = true;
  for (;;) {
    void *rep = NULL;
    if (redisReaderGetReply(p->rd, &rep) != REDIS_OK) rc = DLOCK_EPROTO;
    if (rep == NULL) break;
    dispatch(p, rep);
    freeReplyObject(rep);
  }
  p->dispatching = false;
  return rc;
}

/* With mu held: w, the reader, gives the role up (and is a plain sleeper
 * again unless it was woken). To another sleeper if one sleeps; else to
 * the thread if somebody awaits a confirmation or the read failed (`err`);
 * else to nobody. */
static void leave_reader(dl_pubsub *p, sleeper *w, int err) {
  int expect = READING;
  atomic_compare_exchange_strong(&w->state, &expect, SLEEPING);
  p->reader = NULL;
  if (err == 0 && !p->stop) {
    /* The one that has waited longest: likely the next to be granted. */
    sleeper *next = NULL;
    for (sleeper *n = p->all; n; n = n->anext)
      if (n != w && atomic_load(&n->state) == SLEEPING &&
          (next == NULL || n->base.since < next->base.since))
        next = n;
    if (next && make_reader(p, next, false)) return;
  }
  if (err != 0 && p->read_err == 0) p->read_err = err;
  p->idle = err == 0 && !p->stop && p->confirming == 0;
  if (!p->idle) pthread_cond_broadcast(&p->thread_cv);
}

/* With mu held: w holds the reader role. Reads until w is woken (by its
 * own message, a kick or the close), its deadline passes, or the socket
 * fails, then leaves the role. */
static void read_as_sleeper(dl_pubsub *p, sleeper *w, int64_t deadline) {
  int err = 0;
  while (err == 0 && !p->stop && dl_now_ms() < deadline &&
         atomic_load(&w->state) == READING)
    err = read_some(p, p->io, deadline);
  leave_reader(p, w, err);
}

/* With mu held, before a reference changes: while nobody reads, what came
 * meanwhile is read now, so that a message sent before this reference was
 * taken (an unlock from an earlier wait) is not counted for it. */
static void catch_up(dl_pubsub *p) {
  if (p->reader != NULL || !p->idle || p->io == NULL || p->stop) return;
  sleeper me = {.anext = NULL}; /* holds the role; in no list */
  atomic_init(&me.state, READING);
  p->reader = &me;
  int err = read_some(p, p->io, 0); /* what is there, without waiting */
  leave_reader(p, &me, err); /* to whoever went to sleep meanwhile */
}

/* With mu held: serves a connection, reading it or letting a sleeper read
 * it, until it fails or the client closes. Returns with nobody reading. */
static void serve(dl_pubsub *p) {
  int64_t next_sweep = dl_now_ms() + DL_SUBS_SWEEP_MS;
  for (;;) {
    if (p->stop || p->read_err) break;
    if (p->want && p->reader == NULL) {
      sleeper *w = p->want;
      p->want = NULL;
      make_reader(p, w, false);
    }
    int64_t now = dl_now_ms();
    if (now >= next_sweep) {
      dl_subs_sweep(&p->t, now);
      next_sweep = now + DL_SUBS_SWEEP_MS;
      p->idle = false; /* read again, unless a sleeper does */
    }
    if (p->reader || p->idle) {
      struct timespec ts;
      dl_abstime(next_sweep, &ts);
      p->tmode = T_PARKED;
      pthread_cond_timedwait(&p->thread_cv, &p->mu, &ts);
      p->tmode = T_BUSY;
      continue;
    }
    /* While there are subscriptions, some may begin to linger during the
     * read: wake often enough to sweep them in time. */
    p->tmode = T_READING;
    int rc = read_some(p, p->io, p->t.subs > 0 ? next_sweep : INT64_MAX);
    p->tmode = T_BUSY;
    if (rc != 0) break;
  }
  while (p->reader) pthread_cond_wait(&p->thread_cv, &p->mu);
}

/* dl_conn_dial's `opened`: the handshake can wait on a server that
 * accepts but does not answer (stopped): dl_pubsub_free shuts its socket,
 * not to wait it out. */
static int opened(void *ud, dl_io *io) {
  dl_pubsub *p = ud;
  pthread_mutex_lock(&p->mu);
  int rc = p->stop ? DLOCK_ECLOSED : 0;
  if (rc == 0) p->hs_io = io;
  pthread_mutex_unlock(&p->mu);
  return rc;
}

static void *run(void *arg) {
  dl_pubsub *p = arg;
  int backoff = p->cfg->reconnect_min_ms;
  pthread_mutex_lock(&p->mu);
  while (!p->stop) {
    pthread_mutex_unlock(&p->mu);
    char msg[256];
    dl_io *io = NULL;
    dl_target t;
    int rc = dl_conn_dial(p->cfg, dl_now_ms() + p->cfg->connect_timeout_ms, &t,
                          opened, p, &io, msg, sizeof msg);
    redisReader *rd = rc == 0 ? redisReaderCreate() : NULL;
    if (rc == 0 && rd == NULL) rc = DLOCK_ENOMEM;
    pthread_mutex_lock(&p->mu);
    p->hs_io = NULL;
    if (rc != 0 && p->stop) { /* closed while we connected */
      dl_io_close(io);
      break;
    }
    if (rc == 0 && p->stop) { /* closed while we connected */
      redisReaderFree(rd);
      dl_io_close(io);
      break;
    }
    if (rc != 0) {
      dl_io_close(io);
      struct timespec ts;
      dl_abstime(dl_now_ms() + dl_conn_backoff(p->cfg, &backoff), &ts);
      if (!p->stop) pthread_cond_timedwait(&p->stop_cv, &p->mu, &ts);
      continue;
    }
    backoff = p->cfg->reconnect_min_ms;
    p->io = io;
    p->rd = rd;
    p->gen = t.gen;
    p->quiet_since = dl_now_ms();
    p->ping_sent = false;
    dl_subs_connected(&p->t);
    serve(p);
    p->want = NULL;
    p->read_err = 0;
    p->idle = false;
    redisReaderFree(p->rd);
    p->rd = NULL;
    dl_io_shutdown(p->io);
    dl_io_close(p->io);
    p->io = NULL;
    dl_subs_disconnected(&p->t);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

int dl_pubsub_new(const dl_conn_config *cfg, dl_pubsub **out) {
  dl_pubsub *p = calloc(1, sizeof *p);
  if (p == NULL) return DLOCK_ENOMEM;
  p->cfg = cfg;
  p->buf = malloc(BUF_SIZE);
  /* Non-blocking: a full bell is rung already, and drain() stops. */
  if (p->buf == NULL || pipe2(p->bell, O_NONBLOCK | O_CLOEXEC) != 0) {
    free(p->buf);
    free(p);
    return DLOCK_ENOMEM;
  }
  dl_subs_init(&p->t, &HOOKS, p);
  pthread_mutex_init(&p->mu, NULL);
  dl_cond_init(&p->stop_cv);
  dl_cond_init(&p->thread_cv);
  if (pthread_create(&p->thread, NULL, run, p) != 0) {
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->stop_cv);
    pthread_cond_destroy(&p->thread_cv);
    close(p->bell[0]);
    close(p->bell[1]);
    free(p->buf);
    free(p);
    return DLOCK_ENOMEM;
  }
  p->started = true;
  *out = p;
  return 0;
}

void dl_pubsub_free(dl_pubsub *p) {
  if (p == NULL) return;
  pthread_mutex_lock(&p->mu);
  p->stop = true;
  if (p->io) dl_io_shutdown(p->io);
  if (p->hs_io) dl_io_shutdown(p->hs_io);
  pthread_cond_broadcast(&p->stop_cv);
  pthread_cond_broadcast(&p->thread_cv);
  for (int b = 0; b < DL_SUBS_BUCKETS; b++)
    for (dl_sub *s = p->t.table[b]; s; s = s->next) {
      pthread_cond_broadcast(&s->cv);
      /* Left in the list: each takes itself out when it wakes. */
      for (dl_sleeper *w = s->head, *n; w; w = n) {
        n = w->next;
        rouse(p, (sleeper *)w, STOPPED);
      }
    }
  pthread_mutex_unlock(&p->mu);
  if (p->started) pthread_join(p->thread, NULL);
  dl_subs_clear(&p->t);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->stop_cv);
  pthread_cond_destroy(&p->thread_cv);
  close(p->bell[0]);
  close(p->bell[1]);
  free(p->buf);
  free(p);
}

dl_sub *dl_pubsub_ref(dl_pubsub *p, const char *channel, int mode,
                      int64_t deadline) {
  pthread_mutex_lock(&p->mu);
  catch_up(p);
  dl_sub *s = dl_subs_find(&p->t, channel, strlen(channel));
  if (deadline < 0 && (s == NULL || !confirmed(p, s))) {
    pthread_mutex_unlock(&p->mu); /* only a subscription already heard */
    return NULL;
  }
  if ((s = dl_subs_ref(&p->t, channel, mode)) == NULL) {
    pthread_mutex_unlock(&p->mu);
    return NULL;
  }
  /* Wait for the confirmation: only then can no unlock message be missed.
   * Without it (server down) the waiter still wakes at the holder's TTL. */
  int64_t limit = dl_now_ms() + p->cfg->command_timeout_ms;
  if (deadline > limit) deadline = limit;
  p->confirming++;
  if (!confirmed(p, s) && p->reader == NULL && p->idle) {
    p->idle = false; /* somebody must read the confirmation */
    pthread_cond_broadcast(&p->thread_cv);
  }
  while (!confirmed(p, s) && !p->stop && p->io != NULL) {
    struct timespec ts;
    dl_abstime(deadline, &ts);
    if (pthread_cond_timedwait(&s->cv, &p->mu, &ts) != 0 &&
        dl_now_ms() >= deadline)
      break;
  }
  p->confirming--;
  pthread_mutex_unlock(&p->mu);
  return s;
}

int dl_pubsub_listen(dl_pubsub *p, const char *channel, bool pattern,
                     size_t strip, dl_notice_fn fn, void *ud) {
  pthread_mutex_lock(&p->mu);
  dl_sub *s = dl_subs_listen(&p->t, channel, pattern, strip, fn, ud);
  if (s == NULL) {
    pthread_mutex_unlock(&p->mu);
    return DLOCK_ENOMEM;
  }
  pthread_mutex_unlock(&p->mu);
  return 0;
}

int dl_pubsub_wait(dl_pubsub *p, dl_sub *s, int64_t deadline, int64_t since,
                   dl_sub *grant) {
  pthread_mutex_lock(&p->mu);
  sleeper w = {.base = {.since = since, .grant = grant}};
  atomic_init(&w.state, SLEEPING);
  if (p->stop || dl_subs_sleep(&p->t, s, &w.base)) {
    pthread_mutex_unlock(&p->mu);
    return p->stop ? DLOCK_ECLOSED : 1;
  }
  w.anext = p->all;
  if (p->all) p->all->aprev = &w;
  p->all = &w;
  /* Read the socket while we sleep, if nobody does; a waiter for its grant
   * asks the thread for the role: the grant then needs no hop. */
  if (p->reader == NULL && p->io != NULL && !p->stop && p->read_err == 0) {
    if (p->tmode == T_PARKED) {
      make_reader(p, &w, true);
    } else if (grant && p->want == NULL) {
      p->want = &w;
      ring(p);
    }
  }
  for (;;) {
    int state = atomic_load(&w.state);
    if (state == READING) {
      read_as_sleeper(p, &w, deadline);
      continue;
    }
    if (state != SLEEPING || dl_now_ms() >= deadline) break;
    pthread_mutex_unlock(&p->mu);
    dl_park_wait(&w.state, SLEEPING, deadline);
    if (atomic_load_explicit(&w.state, memory_order_acquire) == WOKEN) {
      /* Woken after the reader role was given to it (a waker's store
       * follows make_reader's under mu, so `given` is seen): the role
       * goes back, else nobody would read and the thread would wait on
       * it at the close. */
      if (w.given) {
        pthread_mutex_lock(&p->mu);
        if (p->reader == &w) leave_reader(p, &w, 0);
        pthread_mutex_unlock(&p->mu);
      }
      return 1;
    }
    pthread_mutex_lock(&p->mu);
  }
  /* Timed out or closing; a waker may still have taken it, perhaps after
   * the role was given to it and before it took it up. */
  if (p->reader == &w) leave_reader(p, &w, 0);
  int state = atomic_load_explicit(&w.state, memory_order_acquire);
  if (state != WOKEN && dl_subs_unlink(&p->t, s, &w.base)) all_del(p, &w);
  if (p->want == &w) p->want = NULL;
  int rc = state == WOKEN ? 1 : p->stop ? DLOCK_ECLOSED : 0;
  pthread_mutex_unlock(&p->mu);
  return rc;
}

void dl_pubsub_unref(dl_pubsub *p, dl_sub *s, bool linger) {
  if (s == NULL) return;
  pthread_mutex_lock(&p->mu);
  dl_subs_unref(&p->t, s, linger);
  pthread_mutex_unlock(&p->mu);
}

int dl_pubsub_grant(dl_pubsub *p, dl_sub *s, uint64_t *token) {
  pthread_mutex_lock(&p->mu);
  int rc = dl_subs_grant(&p->t, s, token);
  pthread_mutex_unlock(&p->mu);
  return rc;
}

void dl_pubsub_kick(dl_pubsub *p, dl_sub *s) {
  if (s == NULL) return;
  pthread_mutex_lock(&p->mu);
  dl_subs_kick(&p->t, s);
  pthread_mutex_unlock(&p->mu);
}

bool dl_pubsub_dropped(dl_pubsub *p, dl_sub *s) {
  pthread_mutex_lock(&p->mu);
  bool dropped = !s->active;
  pthread_mutex_unlock(&p->mu);
  return dropped;
}

uint64_t dl_pubsub_wakeups(dl_pubsub *p) {
  pthread_mutex_lock(&p->mu);
  uint64_t n = p->t.wakeups;
  pthread_mutex_unlock(&p->mu);
  return n;
}

bool dl_pubsub_sleeper_reads(dl_pubsub *p) {
  pthread_mutex_lock(&p->mu);
  bool r = p->reader != NULL && atomic_load(&p->reader->state) == READING;
  pthread_mutex_unlock(&p->mu);
  return r;
}

uint64_t dl_pubsub_direct_wakeups(dl_pubsub *p) {
  pthread_mutex_lock(&p->mu);
  uint64_t n = p->direct;
  pthread_mutex_unlock(&p->mu);
  return n;
}
