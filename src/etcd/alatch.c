/* alatch.c: the event-loop client's count-down latch on the loop's multi
 * handle (acall.c), with no thread: the blocking path's steps (latch.c's
 * halves: the look txn, the write compared on it, the verdicts) driven by
 * call answers. Try-set, count-down and get-count: a look, then the
 * write, looked at again when the latch changed meanwhile. The await: a
 * look, then a watch on the latch's key from the look's revision (a
 * stream on the same multi handle, parsed as wait.c parses it) until the
 * key is deleted, then a look again; its deadline and a cancel a
 * dl_timer, a transient error ridden out with a pause on it. The
 * counting semaphore's updates go to asem.c, the permit-expirable
 * semaphore's to apermits.c. */
#include "aop.h"
#include "sem.h"

#include <stdlib.h>

typedef enum lstep {
  L_START, /* the first step, from the loop's dispatch */
  L_LOOK,
  L_WRITE,
  L_WATCH, /* the watch in flight, the timer at the deadline (or a moment
              after its stream ended) */
  L_PAUSE  /* a pause (an error ridden out) before the next look */
} lstep;

struct etcd_alatch {
  const dl_sync_ref *s;
  etcd_latch_names n;
  etcd_latch_look lk; /* the last look */
  bool await;         /* an await, else an update (op) */
  dl_sync_op op;
  long long n_arg, *v;
  long long result; /* the update's, once its write succeeds */
  bool wait;        /* the await's */
  int64_t deadline;
  int64_t first; /* the create revision of the count waited for */
  dl_ride rides; /* transient errors ridden out */
  bool cancelled;
  lstep step;
};

static void on_call(void *ud, int rc, json_object *o, int code);

/* The next call (step) with body j (freed), within one command timeout
 * of its own. */
static void txn_next(dl_async *op, lstep step, etcd_json *j) {
  op->lat->step = step;
  dl_etcd_op_next(op, "/v3/kv/txn", j->oom ? NULL : j->p, on_call, 0);
  dl_etcd_json_free(j);
}

static void look_next(dl_async *op) {
  etcd_json j = {0};
  dl_etcd_latch_look_req(&op->lat->n, &j);
  txn_next(op, L_LOOK, &j);
}

/* A pause over: a look. */
static void on_pause(void *ud) {
  look_next(ud);
}

/* An await's call or watch that failed with rc: ridden out (a pause,
 * then a look) when transient and the deadline leaves room, as the
 * blocking await's dl_etcd_ride_out; else the await ends with it. */
static void await_error(dl_async *op, int rc) {
  etcd_alatch *l = op->lat;
  l->step = L_PAUSE;
  if (!dl_etcd_op_ride(op, on_pause, l->cancelled, l->wait, l->deadline, rc,
                       &l->rides))
    dl_etcd_op_end(op, rc);
}

/* The watch's end: news (a look), or the deadline or a cancel (not
 * taken: 0). */
static void on_waited(dl_async *op, int rc) {
  if (rc < 0)
    await_error(op, rc);
  else if (rc == 0)
    dl_etcd_op_end(op, 0);
  else
    look_next(op);
}

/* The await's look lk: zero reached, or its key watched for its delete
 * until the deadline. */
static void await_look(dl_async *op) {
  etcd_alatch *l = op->lat;
  dl_ride_answered(&l->rides); /* answered */
  if (!dl_etcd_latch_open(&l->lk, &l->first)) {
    dl_etcd_op_end(op, 1);
    return;
  }
  if (!l->wait || dl_now_ms() >= l->deadline || l->cancelled) {
    dl_etcd_op_end(op, 0);
    return;
  }
  char body[ETCD_WATCH_BODY_MAX];
  dl_etcd_watch_delete_body(l->n.key, l->lk.rev, body, sizeof body);
  l->step = L_WATCH;
  dl_etcd_op_watch(op, body, ETCD_ON_DELETE, l->deadline, on_waited);
}

/* An update's look lk: done, or its write. */
static void update_look(dl_async *op) {
  etcd_alatch *l = op->lat;
  long long to;
  if (dl_etcd_latch_next(l->op, l->n_arg, &l->lk, &l->result, &to) == 0) {
    *l->v = l->result;
    dl_etcd_op_end(op, 0);
    return;
  }
  etcd_json j = {0};
  dl_etcd_latch_write_req(&l->n, &l->lk, to, &j);
  txn_next(op, L_WRITE, &j);
}

static void on_call(void *ud, int rc, json_object *o, int code) {
  (void)code;
  dl_async *op = ud;
  etcd_alatch *l = op->lat;
  op->call = NULL;
  if (l->step == L_START) {
    if (rc < 0)
      dl_etcd_op_end(op, rc);
    else
      look_next(op);
    return;
  }
  if (l->step == L_WRITE) {
    if (rc == 0) rc = dl_etcd_txn_succeeded(o);
    json_object_put(o);
    if (rc == 0) { /* changed meanwhile: look again */
      look_next(op);
      return;
    }
    if (rc == 1) *l->v = l->result;
    dl_etcd_op_end(op, rc == 1 ? 0 : rc);
    return;
  }
  if (rc == 0)
    rc = dl_etcd_latch_look_answer(op->e, l->s, o, &l->lk);
  else
    json_object_put(o);
  if (rc < 0 && l->await)
    await_error(op, rc);
  else if (rc < 0)
    dl_etcd_op_end(op, rc);
  else if (l->await)
    await_look(op);
  else
    update_look(op);
}

/* Starts op (rc: an error known at once) from the loop's dispatch: 0
 * (*out), or DLOCK_ENOMEM (op freed, untold). */
static int start(dl_async *op, int rc, dl_async **out) {
  op->lat->step = L_START;
  op->later = on_call;
  rc = dl_etcd_op_later(op, rc);
  if (rc == 0) *out = op;
  return rc;
}

/* A new latch operation on s: NULL out of memory (recorded). */
static dl_async *op_new(dl_etcd *e, const dl_sync_ref *s, dl_done_fn done,
                        void *ud) {
  dl_async *op = dl_etcd_op_new(e, AOP_LATCH, done, ud);
  if (op && (op->lat = calloc(1, sizeof *op->lat)) == NULL) {
    dl_etcd_op_drop(op);
    op = NULL;
  }
  if (op == NULL) {
    dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
    return NULL;
  }
  op->lat->s = s;
  dl_etcd_latch_names(e, s, &op->lat->n);
  return op;
}

int dl_etcd_sync_update_async(dl_backend *b, const dl_sync_ref *s,
                              dl_sync_op op_, long long n, const char *id,
                              long long *v, dl_done_fn done, void *ud,
                              dl_async **out) {
  dl_etcd *e = (dl_etcd *)b;
  switch (op_) {
  case DL_SEM_SET:
  case DL_SEM_ADD:
  case DL_SEM_DRAIN:
  case DL_SEM_RELEASE:
  case DL_SEM_AVAILABLE:
    return dl_etcd_sem_update_async(b, s, op_, n, v, done, ud, out);
  case DL_LATCH_SET:
  case DL_LATCH_DOWN:
  case DL_LATCH_COUNT: break;
  default: /* the permit-expirable semaphore's */
    return dl_etcd_permits_update_async(b, s, op_, n, id, v, done, ud, out);
  }
  dl_async *op = op_new(e, s, done, ud);
  if (op == NULL) return DLOCK_ENOMEM;
  op->lat->op = op_;
  op->lat->n_arg = n;
  op->lat->v = v;
  return start(op, dl_etcd_latch_check(e, op_, n), out);
}

int dl_etcd_latch_await_async(dl_backend *b, const dl_sync_ref *s, bool wait,
                              int64_t deadline, dl_done_fn done, void *ud,
                              dl_async **out) {
  dl_etcd *e = (dl_etcd *)b;
  dl_async *op = op_new(e, s, done, ud);
  if (op == NULL) return DLOCK_ENOMEM;
  op->lat->await = true;
  op->lat->wait = wait;
  op->lat->deadline = deadline;
  return start(op, 0, out);
}

void dl_etcd_latch_cancel(dl_async *op) {
  etcd_alatch *l = op->lat;
  l->cancelled = true;
  /* A watch or a pause ends now, from the loop's dispatch (armed:
   * restarted, it needs no memory); a look in flight is answered first. */
  if (l->await && (l->step == L_WATCH || l->step == L_PAUSE))
    dl_timer_start(op->e->env->loop, &op->timer, dl_now_ms());
}
