/* elect.c: leader election. Where the backend has an election (zk://:
 * Curator's LeaderLatch) it runs the recipe on its own thread and tells
 * each change of leadership; elsewhere the participant's thread takes
 * turns on the lock NAME (as Curator's LeaderSelector does on a mutex):
 * the holder leads, with the hold's token, until it leaves or the hold is
 * lost. This file keeps the participant's state for the callers (await,
 * has_leadership, token) and passes the changes on to the user's
 * callback. */
#include "lock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dlock_leader {
  dlock_client *c;
  char *key; /* prefix + name */
  char *id;
  atomic_uchar hint;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* broadcast on every change */
  bool started, gone, leader;
  uint64_t token;
  dlock_leader_cb cb;
  void *ud;
  dl_elect *e; /* the backend's, once started */
  /* Without a backend election: the lock taken in turns, its thread. */
  dlock_lock *lock;
  pthread_t thread;
  bool running, stop, lost;
  int refused;    /* DLOCK_EWRONGTYPE: NAME holds something else, no turns */
  char why[256];  /* its message, for the thread that awaits */
  bool self_free; /* freed from its own callback: the thread frees it */
  /* An observer (dlock_leader_observe): the backend's, and the user's
   * callback. */
  dl_observer *obs;
  dlock_leader_observe_cb ocb;
  void *oud;
};

static void destroy(dlock_leader *l) {
  dlock_lock_free(l->lock);
  pthread_cond_destroy(&l->cv);
  pthread_mutex_destroy(&l->mu);
  free(l->key);
  free(l->id);
  free(l);
}

int dlock_leader_new(dlock_client *c, const char *name, const char *id,
                     dlock_leader **out) {
  if (out) *out = NULL;
  if (c == NULL) return DLOCK_EINVAL;
  if (out == NULL) return dl_seterr(c, DLOCK_EINVAL, "out is NULL");
  int rc = dl_check_name(c, name);
  if (rc != 0) return rc;
  if (id == NULL) id = "";
  if (strlen(id) >= DLOCK_OWNER_MAX)
    return dl_seterr(c, DLOCK_ENAMETOOLONG, "a participant id has at most "
                     "%d bytes", DLOCK_OWNER_MAX - 1);
  dlock_leader *l = calloc(1, sizeof *l);
  if (l == NULL || (l->key = dl_key(c, "%s", name)) == NULL ||
      (l->id = dl_strdup(id)) == NULL) {
    if (l) free(l->key);
    free(l);
    return dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  }
  l->c = c;
  pthread_mutex_init(&l->mu, NULL);
  dl_cond_init(&l->cv);
  *out = l;
  return 0;
}

int dlock_leader_on_change(dlock_leader *l, dlock_leader_cb cb, void *ud) {
  if (l == NULL) return DLOCK_EINVAL;
  pthread_mutex_lock(&l->mu);
  bool started = l->started;
  if (!started) {
    l->cb = cb;
    l->ud = ud;
  }
  pthread_mutex_unlock(&l->mu);
  return started ? dl_seterr(l->c, DLOCK_EINVAL, "set the callback before "
                             "dlock_leader_start")
                 : 0;
}

/* ---- the lock in turns (backends without an election) ---- */
static void changed(void *ud, int leader, uint64_t token, int gone);

static void on_hold_lost(dlock_lock *lk, const char *owner, void *ud) {
  (void)lk;
  (void)owner;
  dlock_leader *l = ud;
  pthread_mutex_lock(&l->mu);
  l->lost = true;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

/* The participant whose turns this thread takes (NULL on other threads):
 * how dlock_leader_free knows it runs in that participant's callback
 * without reading l->thread, which pthread_create may not have stored yet
 * when the thread's first callback runs. */
static _Thread_local dlock_leader *turns_of;

static void *take_turns(void *arg) {
  dlock_leader *l = arg;
  turns_of = l;
  for (;;) {
    pthread_mutex_lock(&l->mu);
    bool stop = l->stop;
    l->lost = false;
    pthread_mutex_unlock(&l->mu);
    if (stop || atomic_load(&l->c->closing)) break;
    uint64_t token = 0;
    /* Short waits, so that a leave is seen soon. */
    int rc = dlock_lock_try_acquire(l->lock, 200, 0, &token);
    if (rc == DLOCK_ECLOSED) break;
    if (rc == DLOCK_EBUSY) continue;
    if (rc == DLOCK_EWRONGTYPE) { /* nothing to take turns on: out */
      pthread_mutex_lock(&l->mu);
      l->refused = rc;
      snprintf(l->why, sizeof l->why, "%s", dlock_client_errmsg(l->c));
      pthread_mutex_unlock(&l->mu);
      changed(l, 0, 0, 1);
      break;
    }
    if (rc != 0) { /* the server's trouble: a little later */
      dl_sleep_ms(100);
      continue;
    }
    changed(l, 1, token, 0);
    pthread_mutex_lock(&l->mu);
    while (!l->stop && !l->lost && !atomic_load(&l->c->closing))
      pthread_cond_wait(&l->cv, &l->mu);
    bool lost = l->lost;
    pthread_mutex_unlock(&l->mu);
    dlock_lock_release(l->lock); /* frees it, or forgets a lost hold */
    if (!lost) break; /* leaving: no "not leader" (Curator's close()) */
    changed(l, 0, 0, 0);
  }
  if (atomic_load(&l->c->closing)) changed(l, 0, 0, 1);
  pthread_mutex_lock(&l->mu);
  bool self_free = l->self_free;
  pthread_mutex_unlock(&l->mu);
  if (self_free) {
    dlock_client *c = l->c;
    destroy(l);
    atomic_fetch_sub(&c->leaving, 1); /* the close may go on */
  }
  return NULL;
}

static int start_turns(dlock_leader *l) {
  if (l->c->loop)
    return dl_seterr(l->c, DLOCK_ENOTSUP, "leader election on an "
                     "event-loop client needs zk:// (elsewhere it takes "
                     "turns on a lock from a thread of its own)");
  const char *name = l->key + l->c->prefix_len;
  int rc = dlock_lock_new(l->c, name, NULL, &l->lock);
  if (rc != 0) return rc;
  /* The reentrant lock's layout even where the URL's mutex is the plain
   * string (redlock://'s default): it keeps the participant's id beside the
   * hold, which dlock_leader_get_current reads (no plain-lock client takes
   * part in a dlock election). */
  l->lock->plain = 0;
  dlock_lock_set_info(l->lock, l->id);
  dlock_lock_on_lost(l->lock, on_hold_lost, l);
  /* Running before the thread starts: its first callback may free l. */
  pthread_mutex_lock(&l->mu);
  l->running = true;
  pthread_mutex_unlock(&l->mu);
  if (pthread_create(&l->thread, NULL, take_turns, l) != 0) {
    pthread_mutex_lock(&l->mu);
    l->running = false;
    pthread_mutex_unlock(&l->mu);
    dlock_lock_free(l->lock);
    l->lock = NULL;
    return dl_seterr(l->c, DLOCK_ENOMEM, "cannot start the participant's "
                     "thread");
  }
  return 0;
}

/* The backend's news, on its thread (a refusal's detail recorded on it). */
static void changed(void *ud, int leader, uint64_t token, int gone) {
  dlock_leader *l = ud;
  pthread_mutex_lock(&l->mu);
  bool was = l->leader;
  l->leader = leader != 0;
  l->token = leader ? token : 0;
  if (gone) l->gone = true;
  if (gone < 0) {
    l->refused = gone;
    snprintf(l->why, sizeof l->why, "%s", dlock_client_errmsg(l->c));
  }
  dlock_leader_cb cb = l->cb;
  void *cb_ud = l->ud;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
  if (cb && was != (leader != 0)) cb(l, leader != 0, cb_ud);
}

int dlock_leader_start(dlock_leader *l) {
  if (l == NULL) return DLOCK_EINVAL;
  dl_backend *b = l->c->backend;
  int rc = dl_check_open(l->c);
  if (rc != 0) return rc;
  pthread_mutex_lock(&l->mu);
  bool started = l->started;
  l->started = true;
  pthread_mutex_unlock(&l->mu);
  if (started)
    return dl_seterr(l->c, DLOCK_EINVAL, "the participant already joined");
  if (b->ops->elect_join == NULL) {
    rc = start_turns(l);
    if (rc != 0) {
      pthread_mutex_lock(&l->mu);
      l->started = false;
      pthread_mutex_unlock(&l->mu);
    }
    return rc;
  }
  dl_sync_ref s = {.key = l->key,
                   .name = l->key + l->c->prefix_len,
                   .hint = &l->hint};
  dl_elect *e = NULL;
  rc = b->ops->elect_join(b, &s, l->id, changed, l, &e);
  pthread_mutex_lock(&l->mu);
  if (rc == 0) l->e = e;
  else l->started = false;
  pthread_mutex_unlock(&l->mu);
  return rc;
}

int dlock_leader_try_await(dlock_leader *l, int64_t wait_ms) {
  if (l == NULL) return DLOCK_EINVAL;
  int64_t deadline = dl_deadline(wait_ms);
  pthread_mutex_lock(&l->mu);
  while (l->started && !l->leader && !l->gone &&
         !atomic_load(&l->c->closing) && dl_now_ms() < deadline) {
    if (deadline == INT64_MAX) {
      pthread_cond_wait(&l->cv, &l->mu);
    } else {
      struct timespec ts;
      dl_abstime(deadline, &ts);
      pthread_cond_timedwait(&l->cv, &l->mu, &ts);
    }
  }
  /* A shut-down client's participant is out (gone, on Redis: its turns
   * end) because of the shutdown: DLOCK_ECLOSED, as every backend says. */
  bool closing = atomic_load(&l->c->closing);
  int rc = !l->started  ? DLOCK_EINVAL
           : l->leader  ? 0
           : l->refused ? l->refused
           : closing    ? DLOCK_ECLOSED
           : l->gone    ? DLOCK_ELOST
                        : DLOCK_EBUSY;
  char why[sizeof l->why];
  memcpy(why, l->why, sizeof why);
  pthread_mutex_unlock(&l->mu);
  if (rc == DLOCK_EWRONGTYPE) return dl_seterr(l->c, rc, "%s", why);
  if (rc == DLOCK_EINVAL)
    return dl_seterr(l->c, rc, "the participant has not joined "
                     "(dlock_leader_start)");
  if (rc == DLOCK_ELOST)
    return dl_seterr(l->c, rc, "out of the election of '%s': the session "
                     "ended", l->key + l->c->prefix_len);
  if (rc == DLOCK_ECLOSED)
    return dl_seterr(l->c, DLOCK_ECLOSED, "client closing");
  return rc;
}

int dlock_leader_has_leadership(dlock_leader *l) {
  if (l == NULL) return 0;
  pthread_mutex_lock(&l->mu);
  int v = l->leader;
  pthread_mutex_unlock(&l->mu);
  return v;
}

int dlock_leader_token(dlock_leader *l, uint64_t *token) {
  if (l == NULL) return DLOCK_EINVAL;
  if (token == NULL) return dl_seterr(l->c, DLOCK_EINVAL, "token is NULL");
  pthread_mutex_lock(&l->mu);
  bool leader = l->leader;
  *token = l->token;
  pthread_mutex_unlock(&l->mu);
  return leader ? 0 : DLOCK_ENOTOWNER;
}

int dlock_leader_get_current(dlock_leader *l, char *buf, size_t len) {
  if (l == NULL) return DLOCK_EINVAL;
  if (buf == NULL && len > 0)
    return dl_seterr(l->c, DLOCK_EINVAL, "buf is NULL (len %zu)", len);
  dl_backend *b = l->c->backend;
  if (b->ops->elect_leader == NULL) { /* the lock's holder: its info */
    if (l->c->loop)
      return dl_unsupported(l->c, "leader election on an event-loop client");
    dlock_lock *probe = NULL;
    int rc = dlock_lock_new(l->c, l->key + l->c->prefix_len, NULL, &probe);
    if (rc != 0) return rc;
    dlock_lock_state st;
    rc = dlock_lock_inspect(probe, &st);
    dlock_lock_free(probe);
    if (rc != 0) return rc;
    if (!st.held) return 0;
    if (len > 0) snprintf(buf, len, "%s", st.info);
    return 1;
  }
  dl_sync_ref s = {.key = l->key,
                   .name = l->key + l->c->prefix_len,
                   .hint = &l->hint};
  return b->ops->elect_leader(b, &s, buf, len);
}

int dlock_leader_proclaim(dlock_leader *l, const char *value) {
  if (l == NULL) return DLOCK_EINVAL;
  if (value == NULL) return dl_seterr(l->c, DLOCK_EINVAL, "value is NULL");
  if (strlen(value) > DLOCK_LEADER_VALUE_MAX)
    return dl_seterr(l->c, DLOCK_EINVAL,
                     "a leader's value has at most %d bytes",
                     DLOCK_LEADER_VALUE_MAX);
  dl_backend *b = l->c->backend;
  if (b->ops->elect_proclaim == NULL)
    return dl_unsupported(l->c, "a leader's proclaimed value");
  pthread_mutex_lock(&l->mu);
  dl_elect *e = l->e;
  pthread_mutex_unlock(&l->mu);
  if (e == NULL)
    return dl_seterr(l->c, DLOCK_EINVAL,
                     "the participant has not joined (dlock_leader_start)");
  return b->ops->elect_proclaim(b, e, value);
}

/* The backend's news of the observed election, on its thread. */
static void observed(void *ud, const char *value, size_t len, uint64_t token) {
  dlock_leader *l = ud;
  l->ocb(l, value, len, token, l->oud);
}

int dlock_leader_observe(dlock_leader *l, dlock_leader_observe_cb cb,
                         void *ud) {
  if (l == NULL) return DLOCK_EINVAL;
  if (cb == NULL) return dl_seterr(l->c, DLOCK_EINVAL, "cb is NULL");
  dl_backend *b = l->c->backend;
  int rc = dl_check_open(l->c);
  if (rc != 0) return rc;
  if (b->ops->elect_observe == NULL)
    return dl_unsupported(l->c, "observing an election");
  pthread_mutex_lock(&l->mu);
  bool busy = l->ocb != NULL;
  if (!busy) {
    l->ocb = cb;
    l->oud = ud;
  }
  pthread_mutex_unlock(&l->mu);
  if (busy) return dl_seterr(l->c, DLOCK_EINVAL, "already observing");
  dl_sync_ref s = {
      .key = l->key, .name = l->key + l->c->prefix_len, .hint = &l->hint};
  dl_observer *o = NULL;
  rc = b->ops->elect_observe(b, &s, observed, l, &o);
  pthread_mutex_lock(&l->mu);
  if (rc == 0)
    l->obs = o;
  else
    l->ocb = NULL;
  pthread_mutex_unlock(&l->mu);
  return rc;
}

void dlock_leader_free(dlock_leader *l) {
  if (l == NULL) return;
  pthread_mutex_lock(&l->mu);
  dl_elect *e = l->e;
  l->e = NULL;
  dl_observer *o = l->obs;
  l->obs = NULL;
  pthread_mutex_unlock(&l->mu);
  if (o) l->c->backend->ops->elect_unobserve(l->c->backend, o);
  /* From another thread this waits for a callback running now; from the
   * callback itself it returns at once, and changed() touches nothing of
   * l after the callback returns. */
  if (e) l->c->backend->ops->elect_leave(l->c->backend, e);
  pthread_mutex_lock(&l->mu);
  bool running = l->running;
  pthread_mutex_unlock(&l->mu);
  if (running) { /* the lock in turns: its thread leaves */
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    if (turns_of == l) {
      /* From its own callback: the thread leaves, then frees l. */
      atomic_fetch_add(&l->c->leaving, 1);
      pthread_mutex_lock(&l->mu);
      l->self_free = true;
      pthread_mutex_unlock(&l->mu);
      pthread_detach(pthread_self());
      return;
    }
    pthread_join(l->thread, NULL);
  }
  destroy(l);
}
