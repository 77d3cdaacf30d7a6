/* rlloop.c: the loop a blocking client's Redlock runs its parts on: a
 * private event loop (the built-in driver), and the blocking calls that run
 * an operation there and wait for its answer. So a blocking call, too, asks
 * every server at once, returns as soon as the quorum has decided, and
 * leaves what is still in flight (a stalled server's reply, a late grant to
 * give back) to the loop, as the event-loop client does; the parts'
 * subscribers hear take-aways there.
 *
 * Who drives the loop (leader/follower). A blocking call that finds the
 * loop undriven drives it itself while it waits, so its replies reach it
 * with no thread in between: a hop to a loop thread and back costs two
 * wake-ups on the call's path. One thread drives at a time; a call that
 * finds another driving posts its operation to the driver (through an
 * eventfd) and sleeps until it is answered or handed the loop. The loop's
 * own thread drives when calls overlap (handing the loop from call to call
 * would leave it undriven for a wake-up each time), and when no call has
 * driven for LINGER_MS: a stream of calls from one thread keeps it asleep,
 * and between calls (subscriptions' messages, renewals' timers, late
 * replies and give-backs) the loop goes undriven a few milliseconds at
 * most. */
#include "redlock.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* How long the loop's thread leaves the loop to calls after the last one
 * drove it: longer than a gap between back-to-back calls, short beside a
 * lease's renewal margin. */
enum { LINGER_MS = 2 };
/* A call that has driven this long is a wait (a lock held elsewhere): the
 * loop's thread stops looking every LINGER_MS and sleeps until that call
 * stops driving and wakes it, so a long blocking wait costs no wake-ups. */
enum { LONG_DRIVE_MS = 10 };

enum { D_NONE, D_LOOP, D_CALL };              /* rl_thread's driver */
enum { W_WAIT, W_DONE, W_DRIVE };             /* a call's word */

typedef struct rl_call rl_call;

struct rl_thread {
  dl_loop *lp;
  int efd;
  dl_watch *w;
  pthread_t tid;
  bool started;
  void (*last)(void *); /* closing: run it once idle (the loop's thread) */
  bool (*idle)(void *);
  void *ud;
  pthread_mutex_t mu;
  rl_task *head, *tail; /* posted, not yet run */
  /* Under mu: */
  int driver;           /* D_*: who drives the loop */
  int callers;          /* calls under way */
  rl_call *waiters;     /* calls waiting that do not drive */
  int64_t last_drive;   /* when a call last stopped driving */
  int64_t drive_start;  /* when the call driving now began to */
  bool loop_asleep;     /* the loop's thread waits for that call to stop */
  bool draining;        /* closing: run until idle or drain_until */
  int64_t drain_until;
  atomic_int lword;     /* the loop's thread sleeps on it */
};

/* A call waiting on a loop, for its answer or its turn to drive. */
struct rl_call {
  rl_task k;
  rl_call *prev, *next; /* in waiters (under mu) */
  bool listed;
  atomic_int word; /* W_* */
  /* What the task does: an operation (o, B), or fn(arg). */
  rl_op *o; /* freed by the time a failed start answers */
  redlock *B;
  void (*fn)(void *);
  void *arg;
  int rc;
  char msg[512]; /* the detail of a negative rc */
};

/* The loop this thread drives, and the call it drives for (NULL: the
 * loop's own thread). */
static _Thread_local rl_thread *tl_driving;
static _Thread_local rl_call *tl_call;

/* Runs what was posted (the driver). */
static void run_posted(rl_thread *t) {
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

static void on_wake(void *ud, int events) {
  rl_thread *t = ud;
  (void)events;
  uint64_t v;
  ssize_t r = read(t->efd, &v, sizeof v);
  (void)r;
  run_posted(t);
}

static void kick(rl_thread *t) {
  uint64_t one = 1;
  ssize_t r;
  do
    r = write(t->efd, &one, sizeof one);
  while (r < 0 && errno == EINTR);
}

/* With mu held, by the one that stops driving: who drives next. The only
 * call under way, waiting, drives for itself; two or more are driven for
 * by the loop's thread (handing the loop from call to call would leave
 * it undriven for a wake-up each time). */
static void hand_off(rl_thread *t, bool from_loop) {
  rl_call *first = NULL;
  int n = 0;
  for (rl_call *c = t->waiters; c; c = c->next)
    if (atomic_load_explicit(&c->word, memory_order_relaxed) == W_WAIT) {
      if (first == NULL) first = c;
      n++;
    }
  if (n == 0) {
    t->driver = D_NONE;
  } else if (n == 1 && from_loop && t->callers == 1) {
    /* Only the driver answers calls, and nobody drives now. */
    atomic_store_explicit(&first->word, W_DRIVE, memory_order_release);
    t->driver = D_CALL;
    t->drive_start = dl_now_ms();
    dl_park_wake(&first->word);
  } else {
    t->driver = D_LOOP;
    if (!from_loop) {
      atomic_fetch_add(&t->lword, 1);
      dl_park_wake(&t->lword);
    }
  }
}

static void unlist(rl_thread *t, rl_call *c) {
  if (!c->listed) return;
  if (c->prev)
    c->prev->next = c->next;
  else
    t->waiters = c->next;
  if (c->next) c->next->prev = c->prev;
  c->prev = c->next = NULL;
  c->listed = false;
}

static void *loop_main(void *arg) {
  rl_thread *t = arg;
  pthread_mutex_lock(&t->mu);
  for (;;) {
    int64_t now = dl_now_ms();
    if (t->driver == D_LOOP || /* handed to it */
        (t->driver == D_NONE && t->callers == 0 &&
         (t->draining || now - t->last_drive >= LINGER_MS))) {
      int64_t max = -1;
      if (t->draining && t->driver == D_NONE) {
        if (t->idle(t->ud) || now >= t->drain_until) break;
        max = t->drain_until - now;
      }
      t->driver = D_LOOP;
      pthread_mutex_unlock(&t->mu);
      tl_driving = t;
      (void)dlock_loop_run(t->lp, max);
      tl_driving = NULL;
      pthread_mutex_lock(&t->mu);
      hand_off(t, true); /* calls that came meanwhile kicked it */
      continue;
    }
    /* A call drives, or did a moment ago. */
    int64_t until = now + LINGER_MS;
    if (t->driver == D_CALL && now - t->drive_start >= LONG_DRIVE_MS) {
      t->loop_asleep = true; /* drive() wakes it */
      until = INT64_MAX;
    }
    int v = atomic_load(&t->lword);
    pthread_mutex_unlock(&t->mu);
    (void)dl_park_wait(&t->lword, v, until);
    pthread_mutex_lock(&t->mu);
    t->loop_asleep = false;
  }
  t->driver = D_LOOP; /* for good */
  pthread_mutex_unlock(&t->mu);
  tl_driving = t;
  if (t->last) t->last(t->ud);
  tl_driving = NULL;
  return NULL;
}

int dl_rl_thread_new(rl_thread **out) {
  *out = NULL;
  rl_thread *t = calloc(1, sizeof *t);
  if (t == NULL) return DLOCK_ENOMEM;
  pthread_mutex_init(&t->mu, NULL);
  atomic_init(&t->lword, 0);
  t->last_drive = INT64_MIN / 2;
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

static bool never_idle(void *ud) {
  (void)ud;
  return false;
}

void dl_rl_thread_free(rl_thread *t, bool (*idle)(void *), int64_t drain_ms,
                       void (*last)(void *), void *ud) {
  if (t == NULL) return;
  if (t->started) {
    /* No call is under way: the loop's thread drains at once. */
    pthread_mutex_lock(&t->mu);
    t->idle = idle ? idle : never_idle;
    t->last = last;
    t->ud = ud;
    t->drain_until = dl_now_ms() + drain_ms;
    t->draining = true;
    atomic_fetch_add(&t->lword, 1);
    pthread_mutex_unlock(&t->mu);
    dl_park_wake(&t->lword);
    kick(t); /* out of a round that waits for a timer */
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

/* ---- a call: a task run on the loop, waited for ---- */

static void answer(rl_call *c) {
  atomic_store_explicit(&c->word, W_DONE, memory_order_release);
  if (tl_call != c) dl_park_wake(&c->word); /* not the driver itself */
}

/* Drives the loop for c until it is answered, then hands it on. A
 * callback on another client's loop may call here: its thread's marks are
 * put back. */
static void drive(rl_thread *t, rl_call *c) {
  rl_thread *outer = tl_driving;
  rl_call *outer_call = tl_call;
  tl_driving = t;
  tl_call = c;
  run_posted(t); /* c's task among them */
  while (atomic_load_explicit(&c->word, memory_order_acquire) == W_WAIT)
    (void)dlock_loop_run(t->lp, -1);
  tl_driving = outer;
  tl_call = outer_call;
  pthread_mutex_lock(&t->mu);
  t->callers--;
  t->last_drive = dl_now_ms();
  bool wake = t->loop_asleep;
  if (wake) atomic_fetch_add(&t->lword, 1);
  hand_off(t, false);
  pthread_mutex_unlock(&t->mu);
  if (wake) dl_park_wake(&t->lword);
}

/* Posts c's task and waits for its answer, driving the loop meanwhile
 * when nobody else does. */
static void run_call(rl_thread *t, rl_call *c) {
  atomic_init(&c->word, W_WAIT);
  c->k.next = NULL;
  c->listed = false;
  c->prev = c->next = NULL;
  pthread_mutex_lock(&t->mu);
  if (t->tail)
    t->tail->next = &c->k;
  else
    t->head = &c->k;
  t->tail = &c->k;
  t->callers++;
  bool driving = t->driver == D_NONE;
  if (driving) {
    t->driver = D_CALL;
    t->drive_start = dl_now_ms();
  } else {
    c->next = t->waiters;
    if (c->next) c->next->prev = c;
    t->waiters = c;
    c->listed = true;
  }
  pthread_mutex_unlock(&t->mu);
  if (driving) {
    drive(t, c);
    return;
  }
  kick(t); /* the driver runs the task; the loop's thread steps aside */
  for (;;) {
    int w;
    while ((w = atomic_load_explicit(&c->word, memory_order_acquire)) ==
           W_WAIT)
      (void)dl_park_wait(&c->word, W_WAIT, INT64_MAX);
    if (w == W_DONE) break;
    /* Handed the loop: nobody drives but this thread from here. */
    pthread_mutex_lock(&t->mu);
    unlist(t, c);
    pthread_mutex_unlock(&t->mu);
    atomic_store_explicit(&c->word, W_WAIT, memory_order_relaxed);
    drive(t, c);
    return;
  }
  pthread_mutex_lock(&t->mu);
  unlist(t, c);
  t->callers--;
  pthread_mutex_unlock(&t->mu);
}

static void on_sync(rl_task *k) {
  rl_call *c = (rl_call *)k;
  c->fn(c->arg);
  answer(c);
}

void dl_rl_thread_sync(rl_thread *t, void (*fn)(void *), void *arg) {
  if (tl_driving == t) { /* from the loop itself */
    fn(arg);
    return;
  }
  rl_call c = {.fn = fn, .arg = arg};
  c.k.fn = on_sync;
  run_call(t, &c);
}

/* ---- a blocking call: an operation run on the loop, waited for ---- */

static void op_answer(rl_call *c, int rc) {
  c->rc = rc;
  if (rc < 0) {
    snprintf(c->msg, sizeof c->msg, "%s",
             dlock_client_errmsg(c->B->env.err_owner));
    /* Another call's failure is not the driving caller's to read. */
    if (tl_call != NULL && tl_call != c) dl_clearerr(c->B->env.err_owner);
  }
  answer(c);
}

static void call_done(void *ud, int rc) {
  op_answer(ud, rc);
}

static void call_start(rl_task *k) {
  rl_call *c = (rl_call *)k;
  dl_async *op = NULL;
  int rc = dl_rl_run(c->o, &op);
  if (rc != 0) op_answer(c, rc); /* nothing started: o is freed */
}

int dl_rl_call(rl_op *o) {
  redlock *B = o->B;
  if (tl_driving == B->thread) {
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
  c.k.fn = call_start;
  o->head.done = call_done;
  o->head.ud = &c;
  run_call(B->thread, &c);
  if (c.rc < 0) {
    if (c.msg[0])
      dl_seterr(B->env.err_owner, c.rc, "%s", c.msg);
    else
      dl_seterr(B->env.err_owner, c.rc, "%s", dlock_strerror(c.rc));
  }
  return c.rc;
}
