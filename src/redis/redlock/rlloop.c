/* rlloop.c: the loop a blocking client's Redlock runs its parts on: a
 * private event loop (the built-in driver) on a thread of its own, and the
 * blocking calls that run an operation there and wait for its answer. So a
 * blocking call, too, asks every server at once, returns as soon as the
 * quorum has decided, and leaves what is still in flight (a stalled
 * server's reply, a late grant to give back) to the loop, as the
 * event-loop client does; the parts' subscribers hear take-aways there. */
#include "redlock.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct rl_thread {
  dl_loop *lp;
  int efd;
  dl_watch *w;
  pthread_t tid;
  bool started;
  bool stop; /* the loop's thread only */
  /* Closing (the loop's thread only): run until idle(ud) or drain_until,
   * then last(ud) and stop. */
  bool draining;
  int64_t drain_until;
  bool (*idle)(void *);
  void (*last)(void *);
  void *ud;
  pthread_mutex_t mu;
  rl_task *head, *tail; /* posted, not yet run */
};

/* Runs what was posted (the loop's thread). */
static void on_wake(void *ud, int events) {
  rl_thread *t = ud;
  (void)events;
  uint64_t v;
  ssize_t r = read(t->efd, &v, sizeof v);
  (void)r;
  pthread_mutex_lock(&t->mu);
  rl_task *k = t->head;
  t->head = t->tail = NULL;
  pthread_mutex_unlock(&t->mu);
  while (k) {
    rl_task *next = k->next;
    k->fn(k);
    k = next;
  }
}

static void *loop_main(void *arg) {
  rl_thread *t = arg;
  while (!t->stop) {
    int64_t max = -1;
    if (t->draining) {
      int64_t now = dl_now_ms();
      if ((t->idle && t->idle(t->ud)) || now >= t->drain_until) {
        if (t->last) t->last(t->ud);
        break;
      }
      max = t->drain_until - now;
    }
    (void)dlock_loop_run(t->lp, max);
  }
  return NULL;
}

int dl_rl_thread_new(rl_thread **out) {
  *out = NULL;
  rl_thread *t = calloc(1, sizeof *t);
  if (t == NULL) return DLOCK_ENOMEM;
  pthread_mutex_init(&t->mu, NULL);
  t->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  int rc = t->efd < 0 ? DLOCK_ENOMEM : dlock_loop_new(NULL, &t->lp);
  if (rc == 0) rc = dl_watch_new(t->lp, t->efd, on_wake, t, &t->w);
  if (rc == 0) rc = dl_watch_set(t->w, DL_EV_READ);
  if (rc != 0) {
    dl_rl_thread_free(t, NULL, 0, NULL, NULL);
    return rc;
  }
  *out = t;
  return 0;
}

dl_loop *dl_rl_thread_loop(rl_thread *t) {
  return t->lp;
}

int dl_rl_thread_start(rl_thread *t) {
  if (pthread_create(&t->tid, NULL, loop_main, t) != 0) return DLOCK_ENOMEM;
  t->started = true;
  return 0;
}

void dl_rl_thread_post(rl_thread *t, rl_task *k) {
  k->next = NULL;
  pthread_mutex_lock(&t->mu);
  if (t->tail)
    t->tail->next = k;
  else
    t->head = k;
  t->tail = k;
  pthread_mutex_unlock(&t->mu);
  uint64_t one = 1;
  ssize_t r;
  do
    r = write(t->efd, &one, sizeof one);
  while (r < 0 && errno == EINTR);
}

/* The last task: the loop drains, then runs `last` and stops. */
typedef struct stop_task {
  rl_task k;
  rl_thread *t;
  int64_t drain_ms;
} stop_task;

static void on_stop(rl_task *k) {
  stop_task *s = (stop_task *)k;
  s->t->drain_until = dl_now_ms() + s->drain_ms;
  s->t->draining = true;
}

void dl_rl_thread_free(rl_thread *t, bool (*idle)(void *), int64_t drain_ms,
                       void (*last)(void *), void *ud) {
  if (t == NULL) return;
  if (t->started) {
    t->idle = idle;
    t->last = last;
    t->ud = ud;
    stop_task s = {.t = t, .drain_ms = drain_ms};
    s.k.fn = on_stop;
    dl_rl_thread_post(t, &s.k);
    pthread_join(t->tid, NULL);
  } else if (last) {
    last(ud);
  }
  dl_watch_free(t->w);
  dlock_loop_free(t->lp);
  if (t->efd >= 0) close(t->efd);
  pthread_mutex_destroy(&t->mu);
  free(t);
}

/* ---- a function run on the loop, waited for ---- */
typedef struct sync_task {
  rl_task k;
  void (*fn)(void *);
  void *arg;
  atomic_int word; /* 0 running, 1 done */
} sync_task;

static void on_sync(rl_task *k) {
  sync_task *t = (sync_task *)k;
  t->fn(t->arg);
  atomic_store_explicit(&t->word, 1, memory_order_release);
  dl_park_wake(&t->word);
}

void dl_rl_thread_sync(rl_thread *t, void (*fn)(void *), void *arg) {
  if (pthread_equal(pthread_self(), t->tid)) { /* from the loop itself */
    fn(arg);
    return;
  }
  sync_task k = {.fn = fn, .arg = arg};
  atomic_init(&k.word, 0);
  k.k.fn = on_sync;
  dl_rl_thread_post(t, &k.k);
  while (atomic_load_explicit(&k.word, memory_order_acquire) == 0)
    (void)dl_park_wait(&k.word, 0, INT64_MAX);
}

/* ---- a blocking call: an operation run on the loop, waited for ---- */
typedef struct rl_call {
  rl_task k;
  rl_op *o; /* freed by the time a failed start answers */
  redlock *B;
  int rc;
  atomic_int word; /* 0 running, 1 answered */
  char msg[512];   /* the detail of a negative rc */
} rl_call;

static void answer(rl_call *c, int rc) {
  c->rc = rc;
  if (rc < 0)
    snprintf(c->msg, sizeof c->msg, "%s",
             dlock_client_errmsg(c->B->env.err_owner));
  atomic_store_explicit(&c->word, 1, memory_order_release);
  dl_park_wake(&c->word);
}

static void call_done(void *ud, int rc) {
  answer(ud, rc);
}

static void call_start(rl_task *k) {
  rl_call *c = (rl_call *)k;
  dl_async *op = NULL;
  int rc = dl_rl_run(c->o, &op);
  if (rc != 0) answer(c, rc); /* nothing started: o is freed */
}

int dl_rl_call(rl_op *o) {
  redlock *B = o->B;
  if (pthread_equal(pthread_self(), B->thread->tid)) {
    /* From a callback on the servers' loop: it would wait for itself. */
    dl_rl_rec_free(o);
    free(o->lbuf);
    free(o->copies);
    free(o->snaps);
    free(o);
    return dl_seterr(B->env.err_owner, DLOCK_EINVAL,
                     "a blocking call from a callback on the servers' loop");
  }
  rl_call c = {.o = o, .B = B};
  atomic_init(&c.word, 0);
  c.k.fn = call_start;
  o->head.done = call_done;
  o->head.ud = &c;
  dl_rl_thread_post(B->thread, &c.k);
  while (atomic_load_explicit(&c.word, memory_order_acquire) == 0)
    (void)dl_park_wait(&c.word, 0, INT64_MAX);
  if (c.rc < 0) {
    if (c.msg[0])
      dl_seterr(B->env.err_owner, c.rc, "%s", c.msg);
    else
      dl_seterr(B->env.err_owner, c.rc, "%s", dlock_strerror(c.rc));
  }
  return c.rc;
}
