/* asem.c: the event-loop client's counting semaphore on the loop's multi
 * handle (acall.c), with no thread: the blocking path's steps (sem.c's
 * halves: the count key's read, the put compared on its mod revision,
 * the verdicts) driven by call answers. An update (try-set, add, release,
 * drain, available) and an acquire with no wait (a try): a read, then the
 * put, read again when another writer came first. An acquire that waits
 * (a place in the line) and the permit-expirable semaphore still run on
 * a job (core/blockloop.c). */
#include "aop.h"
#include "sem.h"

#include <stdlib.h>

struct etcd_asem {
  char key[ETCD_SEM_KEY]; /* the count key */
  bool take;              /* an acquire's try, else an update (op) */
  dl_sync_op op;
  long long n, *v;
  long long result; /* the update's, once its put succeeds */
  int tries;        /* the update's puts beaten by another writer */
  bool put;         /* the call in flight is the put, else the read */
};

static void on_call(void *ud, int rc, json_object *o, int code);

/* The count key's read, within a command timeout of its own: 0, or
 * DLOCK_ENOMEM (op freed, untold). */
static int read_count(dl_async *op) {
  char body[ETCD_SEM_INSPECT_BODY_MAX];
  dl_etcd_count_read_body(op->sem->key, body, sizeof body);
  op->sem->put = false;
  op->deadline = dl_now_ms() + op->e->command_timeout_ms;
  return dl_etcd_op_call(op, "/v3/kv/range", body, on_call);
}

/* After a read (mod, the count's mod revision): the put of `to`. */
static void put_count(dl_async *op, int64_t mod, long long to) {
  char body[ETCD_COUNT_PUT_BODY_MAX];
  dl_etcd_count_put_body(op->sem->key, mod, to, body, sizeof body);
  op->sem->put = true;
  dl_etcd_op_next(op, "/v3/kv/txn", body, on_call, 0);
}

/* The read's answer (rc: dl_etcd_count_read_answer's): done, or the put. */
static void on_read(dl_async *op, int rc, long long cur, int64_t mod) {
  etcd_asem *m = op->sem;
  long long to;
  if (rc < 0) {
    dl_etcd_op_end(op, rc);
  } else if (m->take) {
    if (dl_etcd_sem_take_to(cur, m->n, &to))
      put_count(op, mod, to);
    else
      dl_etcd_op_end(op, 0); /* not taken */
  } else if (m->op == DL_SEM_AVAILABLE) {
    *m->v = cur;
    dl_etcd_op_end(op, 0);
  } else if ((rc = dl_etcd_count_next(op->e, m->key, m->op, m->n, rc == 1, cur,
                                      &to, &m->result)) == 1) {
    put_count(op, mod, to);
  } else {
    if (rc == 0) *m->v = m->result;
    dl_etcd_op_end(op, rc);
  }
}

static void on_call(void *ud, int rc, json_object *o, int code) {
  (void)code;
  dl_async *op = ud;
  etcd_asem *m = op->sem;
  op->call = NULL;
  if (!m->put) {
    long long cur = 0;
    int64_t mod = 0, rev;
    if (rc == 0)
      rc = dl_etcd_count_read_answer(op->e, m->key, o, &cur, &mod, &rev);
    else
      json_object_put(o);
    on_read(op, rc, cur, mod);
    return;
  }
  bool ok = rc == 0 && dl_etcd_txn_succeeded(o);
  json_object_put(o);
  if (rc != 0) {
    dl_etcd_op_end(op, rc);
  } else if (ok) {
    if (!m->take) *m->v = m->result;
    dl_etcd_op_end(op, m->take ? 1 : 0);
  } else if (!m->take && ++m->tries >= ETCD_COUNT_TRIES) {
    dl_etcd_op_end(op, dl_etcd_count_busy(op->e, m->key));
  } else { /* another writer came first: read again */
    dl_done_fn done = op->done;
    void *dud = op->ud;
    if (read_count(op) != 0) done(dud, DLOCK_ENOMEM);
  }
}

/* A new operation on s's count (acquire: a try of n permits, else the
 * update op), started: 0 (*out), or a negative code recorded. */
static int sem_start(dl_etcd *e, const dl_sync_ref *s, bool acquire,
                     dl_sync_op op_, long long n, long long *v, dl_done_fn done,
                     void *ud, dl_async **out) {
  dl_async *op = dl_etcd_op_new(e, AOP_SEM, done, ud);
  if (op && (op->sem = calloc(1, sizeof *op->sem)) == NULL) {
    dl_etcd_op_drop(op);
    op = NULL;
  }
  if (op == NULL) return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  etcd_asem *m = op->sem;
  m->take = acquire;
  m->op = op_;
  m->n = n;
  m->v = v;
  if (v) *v = 0;
  int rc = dl_etcd_sem_check(e, s, acquire, op_, n, m->key);
  rc = rc != 0 ? dl_etcd_op_later(op, rc) : read_count(op);
  if (rc == 0) *out = op;
  return rc;
}

int dl_etcd_sem_update_async(dl_backend *b, const dl_sync_ref *s, dl_sync_op op,
                             long long n, long long *v, dl_done_fn done,
                             void *ud, dl_async **out) {
  return sem_start((dl_etcd *)b, s, false, op, n, v, done, ud, out);
}

int dl_etcd_sem_acquire_async(dl_backend *b, const dl_sync_ref *s, int permits,
                              bool wait, int64_t deadline, dl_done_fn done,
                              void *ud, dl_async **out) {
  dl_etcd *e = (dl_etcd *)b;
  if (wait) /* a place in the line: on a job */
    return dl_blockloop_jobs(e->form)->sem_acquire_async(
        b, s, permits, wait, deadline, done, ud, out);
  return sem_start(e, s, true, DL_SEM_AVAILABLE, permits, NULL, done, ud, out);
}
