/* pubsub.c: the client's one subscriber connection. Waiters share
 * reference-counted channel subscriptions; an unlock message wakes one
 * waiter of the process, the one that has slept longest, and a waiter never
 * misses a message that arrives between its failed attempt and its sleep
 * (a message that finds nobody asleep is kept as a permit). */
#include "../core/internal.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NBUCKETS 1024
#define IDLE_PING_MS 5000
/* A subscription nobody waits on any more stays subscribed this long (to
 * LINGER_MS + SWEEP_MS): a lock that was just waited for is usually waited
 * for again soon, and a waiter that finds its channels still subscribed
 * waits without a SUBSCRIBE round trip (and joins the hand-off queue at its
 * first attempt). */
#define LINGER_MS 1000
#define SWEEP_MS 250

/* A thread asleep in dl_pubsub_wait, queued by the time it began waiting
 * for its lock (not for this sleep): a waiter that woke, lost the race and
 * sleeps again keeps its place, so the longest waiter is woken first. */
typedef struct sleeper {
  struct sleeper *next;
  int64_t since;
  dl_sub *grant; /* its own grant subscription, or NULL */
  /* SLEEPING until a waker takes it out of the list and sets WOKEN (or the
   * client closes: STOPPED). The sleeper parks on this word rather than on
   * a condition variable of mu, so a woken thread returns without queueing
   * for mu behind the subscriber thread that woke it. */
  atomic_int state;
} sleeper;

enum { SLEEPING, WOKEN, STOPPED };

/* With mu held: w has been taken out of its list (or, when the client
 * closes, is left there for w to take itself out under mu). Nothing of w is
 * read after the store, so it may return (and its stack go) at once. */
static void rouse(sleeper *w, int state) {
  atomic_store_explicit(&w->state, state, memory_order_release);
  dl_park_wake(&w->state);
}

struct dl_sub {
  dl_sub *next;
  char *channel;
  int refs;        /* threads between ref and unref */
  int outstanding; /* SUBSCRIBE/UNSUBSCRIBE sent, not yet confirmed */
  bool active;     /* the last command sent was SUBSCRIBE */
  int permits;     /* wake-ups for threads not asleep, at most refs */
  sleeper *head, *tail;
  int asleep;
  int mode; /* dl_wake_mode */
  pthread_cond_t cv; /* the subscription's confirmation */
  /* DL_WAKE_GRANT: the subscription its waiters sleep on (set while they
   * wait, cleared with the last reference), and a grant not yet taken. */
  dl_sub *home;
  bool granted;
  uint64_t token;
  /* Unreferenced but still subscribed, since idle_since (dl_now_ms). */
  bool lingering;
  int64_t idle_since;
};

struct dl_pubsub {
  const dl_conn_config *cfg;
  pthread_mutex_t mu;
  pthread_cond_t stop_cv;
  pthread_t thread;
  bool started;
  dl_io *io; /* written under mu; read and closed by the thread */
  bool stop;
  dl_sub *table[NBUCKETS];
  int subs;      /* subscriptions in the table */
  int lingering; /* of which lingering */
  uint64_t wakeups;
};

static unsigned hash(const char *s) {
  unsigned h = 2166136261u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h % NBUCKETS;
}

static dl_sub *find(dl_pubsub *p, const char *ch, size_t len) {
  for (dl_sub *s = p->table[hash(ch)]; s; s = s->next)
    if (strlen(s->channel) == len && memcmp(s->channel, ch, len) == 0)
      return s;
  return NULL;
}

static void sub_free(dl_pubsub *p, dl_sub *s) {
  dl_sub **pp = &p->table[hash(s->channel)];
  while (*pp != s) pp = &(*pp)->next;
  *pp = s->next;
  if (s->lingering) p->lingering--;
  p->subs--;
  pthread_cond_destroy(&s->cv);
  free(s->channel);
  free(s);
}

/* With mu held: sends one (UN)SUBSCRIBE. A failed write shuts the socket;
 * the thread then reconnects and subscribes again. */
static void send_cmd(dl_pubsub *p, const char *verb, const char *ch) {
  if (p->io == NULL) return;
  const char *argv[2] = {verb, ch};
  size_t lens[2] = {strlen(verb), strlen(ch)};
  char *cmd;
  int len = redisFormatCommandArgv(&cmd, 2, argv, lens);
  if (len < 0) {
    dl_io_shutdown(p->io);
    return;
  }
  if (dl_io_write(p->io, cmd, (size_t)len,
                  dl_now_ms() + p->cfg->command_timeout_ms) != 0)
    dl_io_shutdown(p->io);
  redisFreeCommand(cmd);
}

static bool confirmed(dl_pubsub *p, dl_sub *s) {
  return p->io != NULL && s->active && s->outstanding == 0;
}

/* Takes w out of s's sleepers, if it is still there. */
static void unlink_sleeper(dl_sub *s, sleeper *w) {
  sleeper *prev = NULL, **pp = &s->head;
  while (*pp && *pp != w) {
    prev = *pp;
    pp = &(*pp)->next;
  }
  if (*pp == NULL) return;
  *pp = w->next;
  if (s->tail == w) s->tail = prev;
  s->asleep--;
}

static bool pop(dl_sub *s) {
  sleeper *w = s->head;
  if (w) {
    s->head = w->next;
    if (s->head == NULL) s->tail = NULL;
    s->asleep--;
    rouse(w, WOKEN);
  }
  return w != NULL;
}

/* Returns whether anyone was woken or given a permit. */
static bool wake(dl_sub *s, bool all) {
  if (all) {
    bool any = s->head != NULL || s->permits < s->refs - s->asleep;
    while (pop(s)) {
    }
    s->permits = s->refs; /* everyone not asleep tries again once */
    return any;
  }
  if (pop(s)) return true;
  if (s->permits < s->refs) {
    s->permits++;
    return true;
  }
  return false;
}

/* With mu held: s has no references left; unsubscribes it, and frees it
 * unless a confirmation is still to come. */
static void unsubscribe(dl_pubsub *p, dl_sub *s) {
  s->active = false;
  if (p->io) {
    s->outstanding++;
    send_cmd(p, "UNSUBSCRIBE", s->channel);
  }
  if (s->outstanding == 0) sub_free(p, s);
}

/* With mu held: unsubscribes what has lingered long enough. */
static void sweep(dl_pubsub *p, int64_t now) {
  for (int b = 0; b < NBUCKETS && p->lingering > 0; b++) {
    for (dl_sub *s = p->table[b], *n; s; s = n) {
      n = s->next;
      if (!s->lingering || now - s->idle_since < LINGER_MS) continue;
      s->lingering = false;
      p->lingering--;
      unsubscribe(p, s);
    }
  }
}

/* With mu held: a new socket is up; subscribe again to every channel still
 * wanted and wake every waiter (a message may have been lost meanwhile). */
static void on_connected(dl_pubsub *p) {
  for (int b = 0; b < NBUCKETS; b++) {
    for (dl_sub *s = p->table[b], *n; s; s = n) {
      n = s->next;
      s->outstanding = 0;
      if (s->refs == 0) {
        sub_free(p, s);
        continue;
      }
      s->active = true;
      s->outstanding = 1;
      send_cmd(p, "SUBSCRIBE", s->channel);
      wake(s, true);
    }
  }
}

static void on_disconnected(dl_pubsub *p) {
  for (int b = 0; b < NBUCKETS; b++)
    for (dl_sub *s = p->table[b]; s; s = s->next) {
      wake(s, true);
      pthread_cond_broadcast(&s->cv);
    }
}

/* With mu held: wakes the sleepers of a DL_WAKE_GRANT subscription (asleep
 * on its home subscription), and only them. */
static void wake_grantee(dl_pubsub *p, dl_sub *g) {
  bool any = false;
  for (sleeper *w = g->home ? g->home->head : NULL, *n; w; w = n) {
    n = w->next;
    if (w->grant != g) continue;
    unlink_sleeper(g->home, w);
    rouse(w, WOKEN);
    any = true;
  }
  if (any) p->wakeups++;
}

static void dispatch(dl_pubsub *p, redisReply *r) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
      r->element[0]->type != REDIS_REPLY_STRING)
    return;
  const char *kind = r->element[0]->str;
  redisReply *ch = r->element[1];
  if (strcmp(kind, "pong") == 0) return; /* the idle PING's: data enough */
  if (ch->type != REDIS_REPLY_STRING) return;
  dl_sub *s = find(p, ch->str, ch->len);
  if (s == NULL) return;
  if (strcmp(kind, "message") == 0 && r->elements >= 3) {
    redisReply *msg = r->element[2];
    bool text = msg->type == REDIS_REPLY_STRING;
    if (s->mode == DL_WAKE_GRANT) {
      /* "=<token>": the lock is this waiter's. Any other message: it tries
       * again. Either way only the sleepers of this grant wake. */
      if (s->refs > 0 && text && msg->len > 1 && msg->str[0] == '=') {
        char *end;
        unsigned long long t = strtoull(msg->str + 1, &end, 10);
        if (*end == '\0' && t > 0) {
          s->granted = true;
          s->token = (uint64_t)t;
        }
      }
      wake_grantee(p, s);
      return;
    }
    if (s->mode == DL_WAKE_COUNT) {
      /* Permits now available: wake that many (at most everyone). */
      long long n = text ? strtoll(msg->str, NULL, 10) : 0;
      for (long long i = 0; i < n && i <= s->refs; i++)
        if (wake(s, false)) p->wakeups++;
      return;
    }
    bool all = s->mode == DL_WAKE_ALL ||
               (text && msg->len == 1 && msg->str[0] == '1');
    if (wake(s, all)) p->wakeups++;
  } else if (strcmp(kind, "subscribe") == 0 ||
             strcmp(kind, "unsubscribe") == 0) {
    if (s->outstanding > 0) s->outstanding--;
    if (s->outstanding == 0 && s->refs == 0) {
      sub_free(p, s);
    } else if (confirmed(p, s)) {
      pthread_cond_broadcast(&s->cv);
      /* A waiter that could not join the hand-off queue without this
       * subscription tries again now. */
      if (s->mode == DL_WAKE_GRANT) wake_grantee(p, s);
    }
  }
}

void dl_pubsub_feed(dl_pubsub *p, redisReply *r) {
  pthread_mutex_lock(&p->mu);
  dispatch(p, r);
  pthread_mutex_unlock(&p->mu);
}

static void *run(void *arg) {
  dl_pubsub *p = arg;
  int backoff = p->cfg->reconnect_min_ms;
  char buf[16384];
  pthread_mutex_lock(&p->mu);
  while (!p->stop) {
    if (p->io == NULL) {
      pthread_mutex_unlock(&p->mu);
      char msg[256];
      dl_io *io = NULL;
      int64_t dl = dl_now_ms() + p->cfg->connect_timeout_ms;
      int rc = dl_io_connect(&p->cfg->ep, p->cfg->tls, p->cfg->server_name,
                             dl, &io, msg, sizeof msg);
      if (rc == 0) rc = dl_conn_handshake(io, p->cfg, dl, msg, sizeof msg);
      pthread_mutex_lock(&p->mu);
      if (rc == 0 && p->stop) { /* closed while we connected */
        dl_io_close(io);
        break;
      }
      if (rc != 0) {
        dl_io_close(io);
        struct timespec ts;
        dl_abstime(dl_now_ms() + backoff, &ts);
        if (!p->stop) pthread_cond_timedwait(&p->stop_cv, &p->mu, &ts);
        backoff = backoff * 2 > p->cfg->reconnect_max_ms
                      ? p->cfg->reconnect_max_ms
                      : backoff * 2;
        continue;
      }
      backoff = p->cfg->reconnect_min_ms;
      p->io = io;
      on_connected(p);
    }
    dl_io *io = p->io;
    pthread_mutex_unlock(&p->mu);

    redisReader *rd = redisReaderCreate();
    bool ping_sent = false;
    int64_t quiet_since = dl_now_ms(); /* nothing read since (or the PING) */
    int64_t next_sweep = quiet_since + SWEEP_MS;
    int rc = rd ? 0 : DLOCK_ENOMEM;
    while (rc == 0) {
      /* While there are subscriptions, some may begin to linger during the
       * read: wake often enough to sweep them in time. */
      pthread_mutex_lock(&p->mu);
      bool sweeping = p->subs > 0;
      pthread_mutex_unlock(&p->mu);
      int64_t until = quiet_since + IDLE_PING_MS;
      if (sweeping && next_sweep < until) until = next_sweep;
      int n = dl_io_read(io, buf, sizeof buf, until);
      int64_t now = dl_now_ms();
      if (sweeping && now >= next_sweep) {
        pthread_mutex_lock(&p->mu);
        sweep(p, now);
        pthread_mutex_unlock(&p->mu);
        next_sweep = now + SWEEP_MS;
      }
      if (n == DLOCK_ETIMEDOUT) {
        if (now - quiet_since < IDLE_PING_MS) continue; /* a sweep was due */
        if (ping_sent) {
          rc = n; /* the PING went unanswered */
          break;
        }
        /* An idle link: a PING proves the server is still there. */
        pthread_mutex_lock(&p->mu);
        send_cmd(p, "PING", "");
        pthread_mutex_unlock(&p->mu);
        ping_sent = true;
        quiet_since = now;
        continue;
      }
      if (n < 0) {
        rc = n;
        break;
      }
      if (redisReaderFeed(rd, buf, (size_t)n) != REDIS_OK) {
        rc = DLOCK_EPROTO;
        break;
      }
      if (n > 0) {
        ping_sent = false;
        quiet_since = now;
      }
      pthread_mutex_lock(&p->mu);
      void *rep;
      while (rc == 0) {
        rep = NULL;
        if (redisReaderGetReply(rd, &rep) != REDIS_OK) rc = DLOCK_EPROTO;
        if (rep == NULL) break;
        dispatch(p, rep);
        freeReplyObject(rep);
      }
      pthread_mutex_unlock(&p->mu);
    }
    if (rd) redisReaderFree(rd);
    pthread_mutex_lock(&p->mu);
    dl_io_shutdown(io);
    dl_io_close(io);
    p->io = NULL;
    on_disconnected(p);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

int dl_pubsub_new(const dl_conn_config *cfg, dl_pubsub **out) {
  dl_pubsub *p = calloc(1, sizeof *p);
  if (p == NULL) return DLOCK_ENOMEM;
  p->cfg = cfg;
  pthread_mutex_init(&p->mu, NULL);
  dl_cond_init(&p->stop_cv);
  if (pthread_create(&p->thread, NULL, run, p) != 0) {
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->stop_cv);
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
  pthread_cond_broadcast(&p->stop_cv);
  for (int b = 0; b < NBUCKETS; b++)
    for (dl_sub *s = p->table[b]; s; s = s->next) {
      pthread_cond_broadcast(&s->cv);
      /* Left in the list: each takes itself out when it wakes. */
      for (sleeper *w = s->head, *n; w; w = n) {
        n = w->next;
        rouse(w, STOPPED);
      }
    }
  pthread_mutex_unlock(&p->mu);
  if (p->started) pthread_join(p->thread, NULL);
  for (int b = 0; b < NBUCKETS; b++)
    while (p->table[b]) sub_free(p, p->table[b]);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->stop_cv);
  free(p);
}

dl_sub *dl_pubsub_ref(dl_pubsub *p, const char *channel, int mode,
                      int64_t deadline) {
  pthread_mutex_lock(&p->mu);
  dl_sub *s = find(p, channel, strlen(channel));
  if (deadline < 0 && (s == NULL || !confirmed(p, s))) {
    pthread_mutex_unlock(&p->mu); /* only a subscription already heard */
    return NULL;
  }
  if (s == NULL) {
    s = calloc(1, sizeof *s);
    if (s == NULL || (s->channel = dl_strdup(channel)) == NULL) {
      free(s);
      pthread_mutex_unlock(&p->mu);
      return NULL;
    }
    dl_cond_init(&s->cv);
    s->mode = mode;
    unsigned h = hash(channel);
    s->next = p->table[h];
    p->table[h] = s;
    p->subs++;
  } else if (s->lingering) { /* still subscribed: nothing to wait for */
    s->lingering = false;
    p->lingering--;
    s->mode = mode;
  }
  s->refs++;
  if (!s->active) {
    s->active = true;
    if (p->io) {
      s->outstanding++;
      send_cmd(p, "SUBSCRIBE", channel);
    }
  }
  /* Wait for the confirmation: only then can no unlock message be missed.
   * Without it (server down) the waiter still wakes at the holder's TTL. */
  int64_t limit = dl_now_ms() + p->cfg->command_timeout_ms;
  if (deadline > limit) deadline = limit;
  while (!confirmed(p, s) && !p->stop && p->io != NULL) {
    struct timespec ts;
    dl_abstime(deadline, &ts);
    if (pthread_cond_timedwait(&s->cv, &p->mu, &ts) != 0 &&
        dl_now_ms() >= deadline)
      break;
  }
  pthread_mutex_unlock(&p->mu);
  return s;
}

int dl_pubsub_wait(dl_pubsub *p, dl_sub *s, int64_t deadline, int64_t since,
                   dl_sub *grant) {
  pthread_mutex_lock(&p->mu);
  if (s->permits > 0 || p->stop || (grant && grant->granted)) {
    int rc = p->stop ? DLOCK_ECLOSED : 1;
    if (!p->stop && !(grant && grant->granted)) s->permits--;
    pthread_mutex_unlock(&p->mu);
    return rc;
  }
  if (grant) grant->home = s;
  sleeper w = {.next = NULL, .since = since, .grant = grant};
  atomic_init(&w.state, SLEEPING);
  sleeper **pp = &s->head;
  while (*pp && (*pp)->since <= since) pp = &(*pp)->next;
  w.next = *pp;
  *pp = &w;
  if (w.next == NULL) s->tail = &w;
  s->asleep++;
  pthread_mutex_unlock(&p->mu);
  dl_park_wait(&w.state, SLEEPING, deadline);
  if (atomic_load_explicit(&w.state, memory_order_acquire) == WOKEN) return 1;
  /* Timed out or closing; a waker may still take it under mu. */
  pthread_mutex_lock(&p->mu);
  int state = atomic_load_explicit(&w.state, memory_order_acquire);
  if (state != WOKEN) unlink_sleeper(s, &w);
  int rc = state == WOKEN ? 1 : p->stop ? DLOCK_ECLOSED : 0;
  pthread_mutex_unlock(&p->mu);
  return rc;
}

void dl_pubsub_unref(dl_pubsub *p, dl_sub *s, bool linger) {
  if (s == NULL) return;
  pthread_mutex_lock(&p->mu);
  if (--s->refs == 0) {
    s->permits = 0;
    s->home = NULL;
    s->granted = false;
    if (linger && confirmed(p, s)) {
      s->lingering = true;
      s->idle_since = dl_now_ms();
      p->lingering++;
    } else {
      unsubscribe(p, s);
    }
  } else if (s->permits > s->refs) {
    s->permits = s->refs;
  }
  pthread_mutex_unlock(&p->mu);
}

int dl_pubsub_grant(dl_pubsub *p, dl_sub *s, uint64_t *token) {
  pthread_mutex_lock(&p->mu);
  int rc = s->granted ? 1 : confirmed(p, s) ? 0 : -1;
  if (s->granted) {
    if (token) *token = s->token;
    s->granted = false;
  }
  pthread_mutex_unlock(&p->mu);
  return rc;
}

void dl_pubsub_kick(dl_pubsub *p, dl_sub *s) {
  if (s == NULL) return;
  pthread_mutex_lock(&p->mu);
  while (pop(s)) {
  }
  pthread_mutex_unlock(&p->mu);
}

uint64_t dl_pubsub_wakeups(dl_pubsub *p) {
  pthread_mutex_lock(&p->mu);
  uint64_t n = p->wakeups;
  pthread_mutex_unlock(&p->mu);
  return n;
}
