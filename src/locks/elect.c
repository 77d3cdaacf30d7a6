/* elect.c: leader election (Curator's LeaderLatch). The backend runs the
 * recipe on its own thread and tells each change of leadership; this file
 * keeps the participant's state for the callers (await, has_leadership,
 * token) and passes the changes on to the user's callback. */
#include "locks.h"

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
};

int dlock_leader_new(dlock_client *c, const char *name, const char *id,
                     dlock_leader **out) {
  if (out) *out = NULL;
  if (c == NULL || out == NULL) return DLOCK_EINVAL;
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

/* The backend's news, on its thread. */
static void changed(void *ud, int leader, uint64_t token, bool gone) {
  dlock_leader *l = ud;
  pthread_mutex_lock(&l->mu);
  bool was = l->leader;
  l->leader = leader != 0;
  l->token = leader ? token : 0;
  if (gone) l->gone = true;
  dlock_leader_cb cb = l->cb;
  void *cb_ud = l->ud;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
  if (cb && was != (leader != 0)) cb(l, leader != 0, cb_ud);
}

int dlock_leader_start(dlock_leader *l) {
  if (l == NULL) return DLOCK_EINVAL;
  dl_backend *b = l->c->backend;
  if (b->ops->elect_join == NULL)
    return dl_unsupported(l->c, "leader election (zk:// has it)");
  int rc = dl_check_open(l->c);
  if (rc != 0) return rc;
  pthread_mutex_lock(&l->mu);
  bool started = l->started;
  l->started = true;
  pthread_mutex_unlock(&l->mu);
  if (started)
    return dl_seterr(l->c, DLOCK_EINVAL, "the participant already joined");
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

int dlock_leader_await(dlock_leader *l, int64_t wait_ms) {
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
  int rc = !l->started  ? DLOCK_EINVAL
           : l->leader  ? 0
           : l->gone    ? DLOCK_ELOST
                        : DLOCK_EBUSY;
  pthread_mutex_unlock(&l->mu);
  if (rc == DLOCK_EINVAL)
    return dl_seterr(l->c, rc, "the participant has not joined "
                     "(dlock_leader_start)");
  if (rc == DLOCK_ELOST)
    return dl_seterr(l->c, rc, "out of the election of '%s': the session "
                     "ended", l->key + l->c->prefix_len);
  if (rc == DLOCK_EBUSY && atomic_load(&l->c->closing))
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
  if (l == NULL || token == NULL) return DLOCK_EINVAL;
  pthread_mutex_lock(&l->mu);
  bool leader = l->leader;
  *token = l->token;
  pthread_mutex_unlock(&l->mu);
  return leader ? 0 : DLOCK_ENOTOWNER;
}

int dlock_leader_get_leader(dlock_leader *l, char *buf, size_t len) {
  if (l == NULL || (buf == NULL && len > 0)) return DLOCK_EINVAL;
  dl_backend *b = l->c->backend;
  if (b->ops->elect_leader == NULL)
    return dl_unsupported(l->c, "leader election (zk:// has it)");
  dl_sync_ref s = {.key = l->key,
                   .name = l->key + l->c->prefix_len,
                   .hint = &l->hint};
  return b->ops->elect_leader(b, &s, buf, len);
}

void dlock_leader_free(dlock_leader *l) {
  if (l == NULL) return;
  pthread_mutex_lock(&l->mu);
  dl_elect *e = l->e;
  l->e = NULL;
  pthread_mutex_unlock(&l->mu);
  /* From another thread this waits for a callback running now; from the
   * callback itself it returns at once, and changed() touches nothing of
   * l after the callback returns. */
  if (e) l->c->backend->ops->elect_leave(l->c->backend, e);
  pthread_cond_destroy(&l->cv);
  pthread_mutex_destroy(&l->mu);
  free(l->key);
  free(l->id);
  free(l);
}
