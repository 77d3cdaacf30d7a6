/* latch.c: Curator's LeaderLatch on ZooKeeper. Each participant has a
 * protected ephemeral-sequential node "_c_<uuid>-latch-N" under the
 * election's path, its id as data; the first node in sequence order is the
 * leader, every other watches its predecessor. One thread per participant
 * runs the recipe with the synchronous API and sleeps on the client's
 * events between steps (a watch fired, the session changed). */
#include "zkb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How long a participant waits for its node's delete (ms): a server that
 * answers does so in a few ms. One put out by dlock_client_shutdown
 * promises its node gone when its await returns: the longer wait. One
 * that leaves (dlock_leader_free, dlock elect after its command) must not
 * linger behind its command when the server does not answer: the delete
 * was sent, and reaches the server before anything else of ours (the
 * session's close included), or the session's end takes the node. */
#define SHUTDOWN_WAIT_MS 500
#define LEAVE_WAIT_MS 100

struct dl_elect {
  dl_zk *z;
  char *key;
  char *id;
  dl_elect_fn fn;
  void *ud;
  pthread_t thread;
  bool stop;      /* guarded by z->mu: leave */
  bool self_free; /* left from its own callback: the thread frees it */
  char node[NODE_MAX]; /* ours, or "" */
  uint64_t czxid;
  int leader; /* as last told */
};

/* Tells fn when the leadership changes (or the participant is gone). */
static void tell(dl_elect *e, int leader, bool gone) {
  if (leader == e->leader && !gone) return;
  e->leader = leader;
  if (e->fn) e->fn(e->ud, leader, leader ? e->czxid : 0, gone);
}

/* A request of a step, sent without blocking: the participant waits for
 * its answer on z->cv, and stops waiting when it leaves or the client
 * closes (a synchronous call would keep dlock_leader_free waiting until
 * the connection is given up, two thirds of the session timeout, when the
 * server stops answering). Whoever of the two comes last frees it (under
 * z->mu: z outlives every completion, which zookeeper_close calls). */
typedef struct latch_call {
  dl_zk *z;
  int refs;
  bool done;
  int rc;
  struct String_vector sv; /* a listing's, copied */
} latch_call;

static void call_unref(latch_call *c) { /* z->mu held */
  if (--c->refs > 0) return;
  deallocate_String_vector(&c->sv);
  free(c);
}

static void call_done(latch_call *c, int rc) { /* z->mu held */
  c->done = true;
  c->rc = rc;
  pthread_cond_broadcast(&c->z->cv);
  call_unref(c);
}

static void listed(int rc, const struct String_vector *sv, const void *data) {
  latch_call *c = (latch_call *)data;
  dl_zk *z = c->z;
  pthread_mutex_lock(&z->mu);
  if (rc == ZOK && sv && sv->count > 0 &&
      allocate_String_vector(&c->sv, sv->count) == 0) {
    for (int i = 0; i < sv->count; i++)
      c->sv.data[i] = dl_strdup(sv->data[i]);
    for (int i = 0; i < sv->count; i++)
      if (c->sv.data[i] == NULL) rc = ZSYSTEMERROR;
  }
  call_done(c, rc); /* may free c */
  pthread_mutex_unlock(&z->mu);
}

static void watched(int rc, const char *value, int len, const struct Stat *st,
                    const void *data) {
  (void)value;
  (void)len;
  (void)st;
  latch_call *c = (latch_call *)data;
  dl_zk *z = c->z;
  pthread_mutex_lock(&z->mu);
  call_done(c, rc); /* may free c */
  pthread_mutex_unlock(&z->mu);
}

/* Sends the listing of e->key (watch NULL) or the watch on `watch`, and
 * waits for its answer: the ZooKeeper code, ZCLOSING when the participant
 * leaves or the client closes first; sv (the listing) then the caller's
 * to deallocate. */
static int call(dl_elect *e, const char *watch, struct String_vector *sv) {
  dl_zk *z = e->z;
  latch_call *c = calloc(1, sizeof *c);
  if (c == NULL) return ZSYSTEMERROR;
  c->z = z;
  c->refs = 2;
  atomic_fetch_add(&z->round_trips, 1);
  int zrc = watch ? zoo_awget(z->zh, watch, dl_zk_watcher, z, watched, c)
                  : zoo_aget_children(z->zh, e->key, 0, listed, c);
  pthread_mutex_lock(&z->mu);
  if (zrc != ZOK) c->refs = 1; /* no completion will come */
  while (zrc == ZOK && !c->done && !e->stop && !atomic_load(z->env->closing))
    pthread_cond_wait(&z->cv, &z->mu);
  if (zrc == ZOK) zrc = c->done ? c->rc : ZCLOSING;
  if (sv && zrc == ZOK) {
    *sv = c->sv; /* moved */
    memset(&c->sv, 0, sizeof c->sv);
  }
  call_unref(c);
  pthread_mutex_unlock(&z->mu);
  return zrc;
}

/* A step's verdict: a node of another recipe before ours (a mutex's):
 * no election at the path, DLOCK_EWRONGTYPE recorded. */
#define STEP_REFUSED (-2)

/* One step of the recipe: 1 sleep until the next event, 0 step again at
 * once, -1 an error (sleep a little, or until an event), STEP_REFUSED. */
static int step(dl_elect *e) {
  dl_zk *z = e->z;
  if (e->node[0] == '\0') {
    int64_t deadline = dl_now_ms() + z->command_timeout_ms;
    if (dl_zk_create_protected(z, e->key, "latch-", e->id, NULL, e->node,
                               sizeof e->node, &e->czxid, deadline,
                               NULL) != 0) {
      e->node[0] = '\0';
      return -1;
    }
  }
  struct String_vector sv = {0};
  int zrc = call(e, NULL, &sv);
  if (zrc != ZOK && zrc != ZNONODE) return -1;
  char **v = NULL;
  int n = zrc == ZOK ? dl_zk_sorted_locks(&sv, &v) : 0;
  if (n < 0) {
    deallocate_String_vector(&sv);
    return -1;
  }
  const char *mine = strrchr(e->node, '/') + 1;
  int idx = -1;
  bool foreign = false; /* before ours */
  for (int i = 0; i < n && idx < 0; i++) {
    if (strcmp(v[i], mine) == 0)
      idx = i;
    else if (!dl_zk_is_latch(v[i]))
      foreign = true;
  }
  char watch[NODE_MAX];
  snprintf(watch, sizeof watch, "%s/%s", e->key, idx > 0 ? v[idx - 1] : mine);
  free(v);
  if (zrc == ZOK) deallocate_String_vector(&sv);
  if (idx < 0) {
    /* Our node is gone (deleted by hand): out, and in again at the end of
     * the line, as Curator's reset. */
    e->node[0] = '\0';
    tell(e, 0, false);
    return 0;
  }
  if (foreign) {
    dl_seterr(z->env->err_owner, DLOCK_EWRONGTYPE,
              "%s: a node of another recipe (a mutex's) is before ours: no "
              "leader latch's path (ours deleted)",
              e->key);
    return STEP_REFUSED;
  }
  tell(e, idx == 0, false);
  /* The leader watches its own node (deleted by hand: it is no longer the
   * leader, and must know; Curator's does not look), the others their
   * predecessor, with getData as Curator. */
  zrc = call(e, watch, NULL);
  if (zrc == ZNONODE) return 0;
  return zrc == ZOK ? 1 : -1;
}

static void *latch_main(void *arg) {
  dl_elect *e = arg;
  dl_zk *z = e->z;
  int64_t until = 0; /* after an error: no step before this */
  int state = ZOO_CONNECTED_STATE;
  int refused = 0;
  char why[256] = "";
  for (;;) {
    pthread_mutex_lock(&z->mu);
    uint64_t seen = z->events;
    bool stop = e->stop || atomic_load(z->env->closing);
    bool gone = z->expired;
    state = z->state;
    pthread_mutex_unlock(&z->mu);
    if (stop) break;
    /* The session ended, and our node with it: out (a leader is told it
     * lost the lead), and in again at the end of the line once the next
     * session is connected, as Curator's LeaderLatch after LOST. */
    if (gone) e->node[0] = '\0';
    int r = 1;
    if (state != ZOO_CONNECTED_STATE || gone) {
      /* Suspended: the session may be alive, but another participant may
       * be leader by now. Curator's default policy drops the leadership;
       * so do we, and look again once connected. */
      tell(e, 0, false);
    } else if (dl_now_ms() >= until) {
      r = step(e);
      if (r == STEP_REFUSED) { /* out for good */
        refused = DLOCK_EWRONGTYPE;
        snprintf(why, sizeof why, "%s", dlock_client_errmsg(z->env->err_owner));
        tell(e, 0, false);
        break;
      }
      if (r == 0) continue;
      if (r < 0) until = dl_now_ms() + 200;
    } else {
      /* An event during an error's pause (the next session connected):
       * the step comes at the pause's end, not at the next event only. */
      r = -1;
    }
    pthread_mutex_lock(&z->mu);
    int64_t end = r < 0 ? until : INT64_MAX;
    while (z->events == seen && !e->stop && !atomic_load(z->env->closing) &&
           dl_now_ms() < end) {
      if (end == INT64_MAX) {
        pthread_cond_wait(&z->cv, &z->mu);
      } else {
        struct timespec ts;
        dl_abstime(end, &ts);
        pthread_cond_timedwait(&z->cv, &z->mu, &ts);
      }
    }
    pthread_mutex_unlock(&z->mu);
  }
  pthread_mutex_lock(&z->mu);
  bool shutdown = atomic_load(z->env->closing) && !e->stop && !e->self_free;
  pthread_mutex_unlock(&z->mu);
  /* Our node goes. A leader that left must not linger behind its command
   * (dlock elect), whether or not the server answers: not connected, no
   * wait at all, else a short one; a node left goes later, as an orphan,
   * or with the session (closed with the client, or expired). */
  if (e->node[0] != '\0' && state == ZOO_CONNECTED_STATE)
    dl_zk_delete_soon(z, e->node, shutdown ? SHUTDOWN_WAIT_MS : LEAVE_WAIT_MS);
  else if (e->node[0] != '\0')
    dl_zk_orphan_node(z, e->node);
  /* dlock_client_shutdown, the participant still in: out, its node gone;
   * told, so that a dlock_leader_try_await looks again (and ends). */
  if (refused && e->fn) {
    dl_seterr(z->env->err_owner, refused, "%s", why);
    e->fn(e->ud, 0, 0, refused);
  } else if (shutdown && e->fn) {
    e->leader = 0;
    e->fn(e->ud, 0, 0, 0);
  }
  pthread_mutex_lock(&z->mu);
  bool self_free = e->self_free;
  pthread_mutex_unlock(&z->mu);
  if (self_free) {
    free(e->key);
    free(e->id);
    free(e);
  }
  /* The last touch of z: zk_free waits for this count to reach 0. */
  pthread_mutex_lock(&z->mu);
  z->participants--;
  pthread_cond_broadcast(&z->cv);
  pthread_mutex_unlock(&z->mu);
  return NULL;
}

int dl_zk_elect_join(dl_backend *b, const dl_sync_ref *s, const char *id,
                     dl_elect_fn fn, void *ud, dl_elect **out) {
  dl_zk *z = (dl_zk *)b;
  *out = NULL;
  int rc = dl_zk_check_path(z, s->key);
  if (rc != 0) return rc;
  /* Someone else's node is refused (a round trip: not on an event-loop
   * client's thread, which must not block; there the election takes the
   * place as it is). Between sessions (an expiry) the read waits for the
   * next one, as the participant would. */
  zk_place p = ZK_NONE;
  if (!z->env->loop && (rc = dl_zk_read_place(z, s->key, &p)) != 0) return rc;
  if (p != ZK_NONE && p != ZK_EMPTY && p != ZK_LOCKS)
    return dl_zk_wrong_place(z, p, s->key, "leader election");
  dl_elect *e = calloc(1, sizeof *e);
  if (e == NULL || (e->key = dl_strdup(s->key)) == NULL ||
      (e->id = dl_strdup(id)) == NULL) {
    if (e) free(e->key);
    free(e);
    return dl_seterr(z->env->err_owner, DLOCK_ENOMEM, "out of memory");
  }
  e->z = z;
  e->fn = fn;
  e->ud = ud;
  pthread_mutex_lock(&z->mu);
  z->participants++;
  pthread_mutex_unlock(&z->mu);
  if (pthread_create(&e->thread, NULL, latch_main, e) != 0) {
    pthread_mutex_lock(&z->mu);
    z->participants--;
    pthread_mutex_unlock(&z->mu);
    free(e->key);
    free(e->id);
    free(e);
    return dl_seterr(z->env->err_owner, DLOCK_ENOMEM, "cannot start a "
                     "thread for the election");
  }
  *out = e;
  return 0;
}

void dl_zk_elect_leave(dl_backend *b, dl_elect *e) {
  dl_zk *z = (dl_zk *)b;
  if (e == NULL) return;
  bool self = pthread_equal(pthread_self(), e->thread);
  pthread_mutex_lock(&z->mu);
  e->stop = true;
  e->self_free = self;
  pthread_cond_broadcast(&z->cv);
  pthread_mutex_unlock(&z->mu);
  if (self) { /* from its own callback: the thread ends and frees it */
    pthread_detach(e->thread);
    e->fn = NULL;
    return;
  }
  pthread_join(e->thread, NULL);
  free(e->key);
  free(e->id);
  free(e);
}

int dl_zk_elect_leader(dl_backend *b, const dl_sync_ref *s, char *buf,
                       size_t len) {
  dl_zk *z = (dl_zk *)b;
  int rc = dl_zk_check_path(z, s->key);
  if (rc != 0) return rc;
  if (len > 0) buf[0] = '\0';
  for (int tries = 0; tries < 10; tries++) {
    struct String_vector sv = {0};
    atomic_fetch_add(&z->round_trips, 1);
    int zrc = zoo_get_children(z->zh, s->key, 0, &sv);
    if (zrc == ZNONODE) return 0;
    if (zrc != ZOK) return dl_zk_err(z, zrc, "list", s->key);
    char **v;
    int n = dl_zk_sorted_locks(&sv, &v);
    char node[NODE_MAX] = "";
    if (n > 0) snprintf(node, sizeof node, "%s/%s", s->key, v[0]);
    bool latch = n > 0 && dl_zk_is_latch(v[0]);
    free(v);
    deallocate_String_vector(&sv);
    if (n < 0)
      return dl_seterr(z->env->err_owner, DLOCK_ENOMEM, "out of memory");
    if (n == 0) return 0;
    if (!latch)
      return dl_seterr(z->env->err_owner, DLOCK_EWRONGTYPE,
                       "%s: the first node is another recipe's (a mutex's): "
                       "no leader latch's",
                       s->key);
    char data[DL_OWNER_MAX + DLOCK_INFO_MAX + 2];
    int dlen = (int)sizeof data - 1;
    atomic_fetch_add(&z->round_trips, 1);
    zrc = zoo_get(z->zh, node, 0, data, &dlen, NULL);
    if (zrc == ZNONODE) continue; /* the leader just left: look again */
    if (zrc != ZOK) return dl_zk_err(z, zrc, "read", node);
    data[dlen < 0 ? 0 : dlen] = '\0';
    if (len > 0) snprintf(buf, len, "%s", data);
    return 1;
  }
  return dl_seterr(z->env->err_owner, DLOCK_EBUSY, "the leadership of %s "
                   "kept changing", s->key);
}
