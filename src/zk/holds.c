/* holds.c: the client's holds on ZooKeeper (the nodes it holds, by lock
 * key and owner) and their watches: each held node gets an exists watch,
 * sent 10 ms after the hold is taken by one thread of the client's, so
 * that its deletion by anyone else (a force release, zkCli delete) is a
 * loss heard at once, and a hold released sooner costs the server
 * nothing more. */
#include "zkb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

zk_hold *dl_zk_hold_find(dl_zk *z, const char *key, const char *owner) {
  for (zk_hold *h = z->holds; h; h = h->next)
    if (strcmp(h->key, key) == 0 && strcmp(h->owner, owner) == 0) return h;
  return NULL;
}

bool dl_zk_hold_node(dl_zk *z, const char *key, const char *owner, char *node,
                     size_t len) {
  pthread_mutex_lock(&z->mu);
  zk_hold *h = z->expired ? NULL : dl_zk_hold_find(z, key, owner);
  if (h) snprintf(node, len, "%s", h->node);
  pthread_mutex_unlock(&z->mu);
  return h != NULL;
}

void dl_zk_hold_free(zk_hold *h) {
  if (h == NULL) return;
  free(h->key);
  free(h->owner);
  free(h->node);
  free(h);
}

void dl_zk_holds_free(zk_hold *h) {
  while (h) {
    zk_hold *next = h->next;
    dl_zk_hold_free(h);
    h = next;
  }
}

/* Takes h off the queue of watches to send (z->mu held): the queue is
 * short, the holds taken in the last HOLD_WATCH_DELAY_MS. */
static void due_unlink(dl_zk *z, zk_hold *h) {
  if (h->watch_at == 0) return;
  h->watch_at = 0;
  zk_hold **pp = &z->due;
  while (*pp && *pp != h)
    pp = &(*pp)->due_next;
  if (*pp == NULL) return;
  *pp = h->due_next;
  if (z->due_tail == &h->due_next) z->due_tail = pp;
}

/* Removes and returns the hold of (key, owner), or NULL. */
zk_hold *dl_zk_hold_take(dl_zk *z, const char *key, const char *owner) {
  pthread_mutex_lock(&z->mu);
  zk_hold **pp = &z->holds;
  while (*pp &&
         !(strcmp((*pp)->key, key) == 0 && strcmp((*pp)->owner, owner) == 0))
    pp = &(*pp)->next;
  zk_hold *h = *pp;
  if (h) {
    *pp = h->next;
    due_unlink(z, h);
  }
  pthread_mutex_unlock(&z->mu);
  return h;
}

/* A watch on a held node, in flight: the node's path for the answer. */
typedef struct hold_watch {
  dl_zk *z;
  char node[];
} hold_watch;

static void watch_hold(dl_zk *z, const char *node);

/* The answer to watch_hold's exists: a node already gone is a loss. On a
 * close the pending answers come with ZCLOSING (z is not touched). */
static void hold_watched(int zrc, const struct Stat *st, const void *data) {
  (void)st;
  hold_watch *w = (hold_watch *)data;
  if (zrc == ZNONODE && dl_zk_enter(w->z)) {
    dl_zk_hold_event(w->z, ZOO_DELETED_EVENT, w->node);
    dl_zk_leave(w->z);
  }
  free(w);
}

/* Watches a held node (an exists watch, sent without waiting for its
 * answer): its deletion by anyone else (a force release, zkCli) is heard
 * at once, not at the next renewal. Out of memory: heard at the next
 * renewal. */
static void watch_hold(dl_zk *z, const char *node) {
  size_t n = strlen(node) + 1;
  hold_watch *w = malloc(sizeof *w + n);
  if (w == NULL) return;
  w->z = z;
  memcpy(w->node, node, n);
  if (zoo_awexists(z->zh, node, dl_zk_watcher, z, hold_watched, w) != ZOK)
    free(w);
}

void dl_zk_hold_event(dl_zk *z, int type, const char *path) {
  char key[NODE_MAX] = "";
  pthread_mutex_lock(&z->mu);
  for (zk_hold *h = z->holds; h && key[0] == '\0'; h = h->next)
    if (strcmp(h->node, path) == 0) snprintf(key, sizeof key, "%s", h->key);
  dl_notice_fn fn = z->notice;
  void *ud = z->notice_ud;
  pthread_mutex_unlock(&z->mu);
  if (key[0] == '\0') return;      /* released by us, or not a hold's node */
  if (type != ZOO_DELETED_EVENT) { /* its data changed: watch on */
    watch_hold(z, path);
    return;
  }
  /* The watchdog checks the holds on key at once and reports the loss
   * (on an event-loop client fn passes it to the loop's thread). */
  if (fn) fn(ud, key, strlen(key));
}

/* A hold's watch is sent this long after the hold is taken: a hold
 * released sooner sends none (a watch costs the server a request and, at
 * the release, an event: 0.71 to 0.78 x the cycles/s at 16 threads). A
 * deletion before the watch is sent is heard when its answer says the
 * node is gone (hold_watched). */
#define HOLD_WATCH_DELAY_MS 10

/* The thread that sends the holds' watches when they fall due. */
static void *due_main(void *arg) {
  dl_zk *z = arg;
  char node[NODE_MAX];
  pthread_mutex_lock(&z->mu);
  while (!z->due_stop) {
    zk_hold *h = z->due;
    int64_t now = dl_now_ms();
    if (h == NULL) {
      pthread_cond_wait(&z->due_cv, &z->mu);
      continue;
    }
    if (h->watch_at > now) {
      struct timespec ts;
      dl_abstime(h->watch_at, &ts);
      pthread_cond_timedwait(&z->due_cv, &z->mu, &ts);
      continue;
    }
    due_unlink(z, h);
    snprintf(node, sizeof node, "%s", h->node);
    pthread_mutex_unlock(&z->mu);
    watch_hold(z, node);
    pthread_mutex_lock(&z->mu);
  }
  pthread_mutex_unlock(&z->mu);
  return NULL;
}

void dl_zk_due_stop(dl_zk *z) {
  pthread_mutex_lock(&z->mu);
  bool started = z->due_started;
  z->due_stop = true;
  pthread_cond_signal(&z->due_cv);
  pthread_mutex_unlock(&z->mu);
  if (started) pthread_join(z->due_thread, NULL);
}

int dl_zk_hold_add(dl_zk *z, const char *key, const char *owner,
                   const char *node, uint64_t czxid) {
  zk_hold *nh = calloc(1, sizeof *nh);
  if (nh) {
    nh->key = dl_strdup(key);
    nh->owner = dl_strdup(owner);
    nh->node = dl_strdup(node);
    nh->czxid = czxid;
  }
  if (!nh || !nh->key || !nh->owner || !nh->node) {
    dl_zk_hold_free(nh);
    return dl_seterr(z->env->err_owner, DLOCK_ENOMEM, "out of memory");
  }
  pthread_mutex_lock(&z->mu);
  nh->next = z->holds;
  z->holds = nh;
  bool now = z->due_stop;
  if (!now && !z->due_started) {
    z->due_started = pthread_create(&z->due_thread, NULL, due_main, z) == 0;
    now = !z->due_started; /* no thread: the watch at once */
  }
  if (!now) {
    nh->watch_at = dl_now_ms() + HOLD_WATCH_DELAY_MS;
    *z->due_tail = nh;
    z->due_tail = &nh->due_next;
    if (z->due == nh) pthread_cond_signal(&z->due_cv);
  }
  pthread_mutex_unlock(&z->mu);
  if (now) watch_hold(z, node);
  return 0;
}

void dl_zk_hold_drop(dl_zk *z, const char *key, const char *owner) {
  dl_zk_hold_free(dl_zk_hold_take(z, key, owner));
}
