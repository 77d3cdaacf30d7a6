/* transfer.c: the delayed queue's transfer in the background, as every
 * Redisson client with an RDelayedQueue runs one: while a blocking client
 * has a delayed handle on a queue, a thread of its own moves the values of
 * that queue that are due (the backend's DL_QUEUE_TRANSFER, by the
 * server's clock) at the head's due time, so that consumers that do not
 * move them (a Java `RBlockingQueue.take()` without an RDelayedQueue, a
 * plain BLPOP) get them without a dlock poller. One thread per queue name
 * and client, shared by its handles, stopped with the last of them.
 *
 * Each transfer sleeps until the next due time, a message on the queue's
 * channels (Redisson's new head, from any process; dlock's offers) or
 * IDLE_MS, whichever is first: Redisson's timer and its reset. This
 * client's own delayed offers, and the stop, wake it with the backend's
 * queue_kick, without a server call. */
#include "client.h"

#include <stdlib.h>
#include <string.h>

#define IDLE_MS 1000 /* the longest sleep between moves */
#define RETRY_MS 200 /* after a failed move */

typedef struct transfer {
  struct transfer *next;
  dlock_client *c;
  char *key;   /* the queue's key (the client's prefix + its name) */
  int refs;    /* delayed handles on the queue */
  bool stop;   /* the last handle went */
  bool exited; /* its thread is past its last move */
  pthread_t thread;
  atomic_uchar hint;
} transfer;

struct dl_transfers {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* kicks and stops, for every thread */
  transfer *head;
};

static void *run(void *arg) {
  transfer *t = arg;
  dlock_client *c = t->c;
  dl_transfers *T = c->transfers;
  dl_backend *b = c->backend;
  dl_sync_ref ref = {
      .key = t->key, .name = t->key + c->prefix_len, .hint = &t->hint};
  pthread_mutex_lock(&T->mu);
  while (!t->stop) {
    pthread_mutex_unlock(&T->mu);
    dl_queue_req r;
    memset(&r, 0, sizeof r);
    r.op = DL_QUEUE_TRANSFER;
    r.wait = b->ops->queue_kick != NULL;
    r.deadline = dl_now_ms() + IDLE_MS;
    int rc = b->ops->queue(b, &ref, &r);
    pthread_mutex_lock(&T->mu);
    /* A failure, or a backend that cannot sleep on the channels: the
     * pause is here. */
    int64_t wait = rc < 0 ? RETRY_MS : r.wait ? 0 : r.n < 0 ? IDLE_MS : r.n;
    if (!r.wait && wait > IDLE_MS) wait = IDLE_MS;
    int64_t until = dl_now_ms() + wait;
    struct timespec ts;
    dl_abstime(until, &ts);
    while (!t->stop && dl_now_ms() < until)
      pthread_cond_timedwait(&T->cv, &T->mu, &ts);
  }
  t->exited = true;
  pthread_cond_broadcast(&T->cv);
  pthread_mutex_unlock(&T->mu);
  return NULL;
}

static transfer *find(dl_transfers *T, const char *key) {
  for (transfer *t = T->head; t; t = t->next)
    if (strcmp(t->key, key) == 0) return t;
  return NULL;
}

/* The client's registry, made at the first use (under holds_mu). */
static dl_transfers *registry(dlock_client *c) {
  pthread_mutex_lock(&c->holds_mu);
  if (c->transfers == NULL) {
    dl_transfers *T = calloc(1, sizeof *T);
    if (T) {
      pthread_mutex_init(&T->mu, NULL);
      pthread_cond_init(&T->cv, NULL);
      c->transfers = T;
    }
  }
  dl_transfers *T = c->transfers;
  pthread_mutex_unlock(&c->holds_mu);
  return T;
}

int dl_transfer_ref(dlock_client *c, const char *key) {
  if (c->loop || c->backend->ops->queue == NULL) return 0;
  dl_transfers *T = registry(c);
  if (T == NULL) return DLOCK_ENOMEM;
  pthread_mutex_lock(&T->mu);
  transfer *t = find(T, key);
  if (t) {
    t->refs++;
    pthread_mutex_unlock(&T->mu);
    return 0;
  }
  t = calloc(1, sizeof *t);
  if (t == NULL || (t->key = dl_strdup(key)) == NULL) {
    free(t);
    pthread_mutex_unlock(&T->mu);
    return DLOCK_ENOMEM;
  }
  t->c = c;
  t->refs = 1;
  if (pthread_create(&t->thread, NULL, run, t) != 0) {
    free(t->key);
    free(t);
    pthread_mutex_unlock(&T->mu);
    return DLOCK_ENOMEM;
  }
  t->next = T->head;
  T->head = t;
  pthread_mutex_unlock(&T->mu);
  return 0;
}

/* Stops t (unlinked, T->mu not held) and frees it: kicks its sleep until
 * its thread has left the loop (a kick can land just before it sleeps). */
static void finish(dl_transfers *T, transfer *t) {
  dlock_client *c = t->c;
  dl_sync_ref ref = {.key = t->key, .name = t->key, .hint = &t->hint};
  pthread_mutex_lock(&T->mu);
  t->stop = true;
  pthread_cond_broadcast(&T->cv);
  while (!t->exited) {
    pthread_mutex_unlock(&T->mu);
    if (c->backend->ops->queue_kick)
      c->backend->ops->queue_kick(c->backend, &ref);
    pthread_mutex_lock(&T->mu);
    struct timespec ts;
    dl_abstime(dl_now_ms() + 5, &ts);
    if (!t->exited) pthread_cond_timedwait(&T->cv, &T->mu, &ts);
  }
  pthread_mutex_unlock(&T->mu);
  pthread_join(t->thread, NULL);
  free(t->key);
  free(t);
}

void dl_transfer_unref(dlock_client *c, const char *key) {
  dl_transfers *T = c->transfers;
  if (T == NULL) return;
  pthread_mutex_lock(&T->mu);
  transfer *t = find(T, key), **pp = &T->head;
  if (t == NULL || --t->refs > 0) {
    pthread_mutex_unlock(&T->mu);
    return;
  }
  while (*pp != t)
    pp = &(*pp)->next;
  *pp = t->next;
  pthread_mutex_unlock(&T->mu);
  finish(T, t);
}

void dl_transfer_kick(dlock_client *c, const char *key) {
  dl_transfers *T = c->transfers;
  if (T == NULL || c->backend->ops->queue_kick == NULL) return;
  pthread_mutex_lock(&T->mu);
  bool ours = find(T, key) != NULL;
  pthread_mutex_unlock(&T->mu);
  dl_sync_ref ref = {.key = key, .name = key, .hint = NULL};
  if (ours) c->backend->ops->queue_kick(c->backend, &ref);
}

void dl_transfers_free(dlock_client *c) {
  dl_transfers *T = c->transfers;
  if (T == NULL) return;
  for (;;) {
    pthread_mutex_lock(&T->mu);
    transfer *t = T->head;
    if (t) T->head = t->next;
    pthread_mutex_unlock(&T->mu);
    if (t == NULL) break;
    finish(T, t);
  }
  pthread_mutex_destroy(&T->mu);
  pthread_cond_destroy(&T->cv);
  free(T);
  c->transfers = NULL;
}
