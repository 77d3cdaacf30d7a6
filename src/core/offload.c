/* offload.c: blocking work beside an event loop (core.h): a thread per job,
 * the jobs done queued for the loop's thread, an eventfd to wake it. */
#include "core.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct dl_offload {
  dl_loop *lp;
  int evfd;
  dl_watch *watch;
  void (*woken)(void *);
  void *ud;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  dl_job *head, *tail; /* done, not yet finished */
  int threads;         /* jobs' threads still running */
};

/* The job this thread runs, if any. */
static _Thread_local dl_job *current;

bool dl_offload_cancelled(void) {
  return current != NULL && atomic_load(&current->cancelled);
}

void dl_offload_cancel(dl_job *j) {
  atomic_store(&j->cancelled, true);
}

static void ring(dl_offload *o) {
  uint64_t one = 1;
  while (write(o->evfd, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

void dl_offload_wake(dl_offload *o) {
  ring(o);
}

static void *job_main(void *arg) {
  dl_job *j = arg;
  dl_offload *o = j->o;
  current = j;
  j->run(j);
  current = NULL;
  pthread_mutex_lock(&o->mu);
  j->next = NULL;
  if (o->tail)
    o->tail->next = j;
  else
    o->head = j;
  o->tail = j;
  pthread_mutex_unlock(&o->mu);
  ring(o);
  /* The last touch of o: dl_offload_free waits for the count to reach 0. */
  pthread_mutex_lock(&o->mu);
  o->threads--;
  pthread_cond_broadcast(&o->cv);
  pthread_mutex_unlock(&o->mu);
  return NULL;
}

/* Finishes the jobs done so far (the loop's thread). */
static void finish_done(dl_offload *o) {
  pthread_mutex_lock(&o->mu);
  dl_job *j = o->head;
  o->head = o->tail = NULL;
  pthread_mutex_unlock(&o->mu);
  while (j) {
    dl_job *next = j->next;
    j->finish(j);
    j = next;
  }
}

static void on_ready(void *ud, int events) {
  (void)events;
  dl_offload *o = ud;
  uint64_t n;
  if (read(o->evfd, &n, sizeof n) < 0 && errno != EAGAIN) return;
  if (o->woken) o->woken(o->ud);
  finish_done(o);
}

int dl_offload_new(dl_loop *lp, void (*woken)(void *), void *ud,
                   dl_offload **out) {
  *out = NULL;
  dl_offload *o = calloc(1, sizeof *o);
  if (o == NULL) return dl_seterr(NULL, DLOCK_ENOMEM, "out of memory");
  o->lp = lp;
  o->woken = woken;
  o->ud = ud;
  pthread_mutex_init(&o->mu, NULL);
  dl_cond_init(&o->cv);
  o->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (o->evfd < 0) {
    int rc = dl_seterr(NULL, DLOCK_ENOMEM, "eventfd: %s", strerror(errno));
    dl_offload_free(o);
    return rc;
  }
  int rc = dl_watch_new(lp, o->evfd, on_ready, o, &o->watch);
  if (rc == 0) rc = dl_watch_set(o->watch, DL_EV_READ);
  if (rc != 0) {
    dl_offload_free(o);
    return dl_seterr(NULL, rc, "cannot watch an eventfd on the loop");
  }
  *out = o;
  return 0;
}

int dl_offload_start(dl_offload *o, dl_job *j) {
  j->o = o;
  j->next = NULL;
  atomic_init(&j->cancelled, false);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_mutex_lock(&o->mu);
  o->threads++;
  pthread_mutex_unlock(&o->mu);
  pthread_t t;
  int e = pthread_create(&t, &attr, job_main, j);
  pthread_attr_destroy(&attr);
  if (e == 0) return 0;
  pthread_mutex_lock(&o->mu);
  o->threads--;
  pthread_mutex_unlock(&o->mu);
  return DLOCK_ENOMEM;
}

void dl_offload_free(dl_offload *o) {
  if (o == NULL) return;
  pthread_mutex_lock(&o->mu);
  while (o->threads > 0)
    pthread_cond_wait(&o->cv, &o->mu);
  pthread_mutex_unlock(&o->mu);
  finish_done(o);
  dl_watch_free(o->watch);
  if (o->evfd >= 0) close(o->evfd);
  pthread_cond_destroy(&o->cv);
  pthread_mutex_destroy(&o->mu);
  free(o);
}
