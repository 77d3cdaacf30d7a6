/* asem.c: the event-loop client's counting semaphore on the loop's multi
 * handle (acall.c), with no thread: the blocking path's steps (sem.c's
 * halves: the count key's read, the put compared on its mod revision,
 * the verdicts; line.c's: the place in the line) driven by call answers.
 * An update (try-set, add, release, drain, available) and a try: a read,
 * then the put, read again when another writer came first. An acquire
 * that waits, as dl_etcd_sem_wait: after each try that found too few, a
 * place in the line of waiters (on the session's lease, asession.c's
 * step keeping it alive), a look at the place before ours, and a watch
 * (a stream on the same multi handle) on that place's delete, or for the
 * line's first on any change of the count, for a third of the lease at
 * most; then a try again. Its deadline and a cancel end the watch on a
 * dl_timer; the place goes at the end, whatever the result. The
 * permit-expirable semaphore's acquire waits in the same line (its try:
 * apermits.c), and its total's updates are this count's. */
#include "asem.h"
#include "pbtxn.h"

#include <stdlib.h>
#include <string.h>

static void on_call(void *ud, int rc, json_object *o, int code);
static void on_txn(void *ud, int rc, ProtobufCMessage *m, int code);
static void on_session(dl_async *op, int rc, int64_t lease, int64_t until);

/* op's next call (step), within a command timeout of its own. */
static void next(dl_async *op, mstep step, const char *path, const char *body) {
  op->sem->step = step;
  dl_etcd_op_next(op, path, body, on_call, 0);
}

static void read_count(dl_async *op) {
  char body[ETCD_SEM_INSPECT_BODY_MAX];
  dl_etcd_count_read_body(op->sem->key, body, sizeof body);
  next(op, M_READ, "/v3/kv/txn", body);
}

/* After a read (mod, the count's mod revision): the put of `to`. */
static void put_count(dl_async *op, int64_t mod, long long to) {
  char body[ETCD_COUNT_PUT_BODY_MAX];
  dl_etcd_count_put_body(op->sem->key, mod, to, body, sizeof body);
  next(op, M_PUT, "/v3/kv/txn", body);
}

/* Our place goes at its own revision only, whatever the result: the
 * next in line looks. */
void dl_as_finish(dl_async *op, int rc) {
  etcd_asem *m = op->sem;
  if (m->permit && !m->ended) {
    m->ended = true;
    dl_ap_end(op, rc);
    return;
  }
  if (m->ln.rev <= 0 && m->unsure) { /* by key: it is ours alone */
    char body[ETCD_DELETE_KEY_BODY_MAX];
    dl_etcd_delete_key_body(m->line, body, sizeof body);
    m->unsure = false;
    m->rc = rc;
    m->step = M_UNPUT;
    dl_etcd_op_next(op, "/v3/kv/deleterange", body, on_call, rc);
    return;
  }
  if (m->ln.rev <= 0) {
    dl_etcd_op_end(op, rc);
    return;
  }
  etcd_delete_txn t;
  dl_etcd_delete_txn(&t, m->line, m->ln.rev);
  m->ln.rev = 0;
  m->rc = rc;
  m->step = M_LEAVE;
  dl_etcd_op_next_pb(op, "/v3/kv/txn", &t.txn.base, on_txn, rc);
}

static bool wait_over(const dl_async *op) {
  const etcd_asem *m = op->sem;
  return !m->wait || m->cancelled || dl_now_ms() >= m->deadline;
}

/* A try: the count's read, or a permit's (apermits.c). */
static void try_step(dl_async *op) {
  if (op->sem->permit)
    dl_ap_try(op);
  else
    read_count(op);
}

/* The next try, unless cancelled (no try after a cancel). */
static void try_again(dl_async *op) {
  if (op->sem->cancelled)
    dl_as_finish(op, 0);
  else
    try_step(op);
}

/* The watch's end (news, the step's end, the deadline or a cancel): a
 * try (none after a cancel). */
static void on_waited(dl_async *op, int rc) {
  op->sem->first = false; /* the next try looks at the line again */
  if (rc < 0)
    dl_as_finish(op, rc);
  else
    try_again(op);
}

/* The look's answer (pred: a place before ours, read at revision pat):
 * a watch on that place's delete, or for the line's first on any change
 * of the count since the last read, until the step's end or the
 * deadline. */
static void watch_step(dl_async *op, bool pred, int64_t pat) {
  etcd_asem *m = op->sem;
  if (wait_over(op)) { /* cancelled (or over) while the look was out */
    dl_as_finish(op, 0);
    return;
  }
  char body[ETCD_WATCH_PREFIX_BODY_MAX];
  if (pred)
    dl_etcd_watch_delete_body(m->pred, pat, body, sizeof body);
  else
    dl_etcd_watch_prefix_body(m->key, m->at, body, sizeof body);
  int64_t step = dl_now_ms() + dl_etcd_sem_step(op->e);
  m->step = M_WATCH;
  dl_etcd_op_watch(op, body, pred ? ETCD_ON_DELETE : ETCD_ON_ANY,
                   step < m->deadline ? step : m->deadline, on_waited);
}

/* Our place still there, and the one before it: one txn. */
static void look_step(dl_async *op) {
  etcd_asem *m = op->sem;
  if (wait_over(op)) {
    dl_as_finish(op, 0);
    return;
  }
  char *body = dl_etcd_look_body(m->line, m->lpfx, m->ln.rev);
  if (body == NULL) {
    dl_as_finish(op, dl_seterr(op->e->err, DLOCK_ENOMEM, "out of memory"));
    return;
  }
  next(op, M_LOOK, "/v3/kv/txn", body);
  free(body);
}

static void session_step(dl_async *op) {
  op->sem->step = M_SESSION; /* a cancel looks at its end */
  dl_etcd_asess_step(op, on_session);
}

/* The session's lease l: our place put on it (again, if it went with an
 * earlier one), then the look. */
static void on_session(dl_async *op, int rc, int64_t l, int64_t until) {
  (void)until;
  etcd_asem *m = op->sem;
  if (rc < 0 || wait_over(op)) {
    dl_as_finish(op, rc < 0 ? rc : 0);
    return;
  }
  if (m->ln.rev && m->ln.lease != l) m->ln.rev = 0; /* it went with it */
  if (m->ln.rev) {
    look_step(op);
    return;
  }
  m->ln.lease = l;
  etcd_claim_txn t;
  dl_etcd_claim_txn(&t, &m->ln, "", m->lpfx);
  m->step = M_LINE;
  dl_etcd_op_next_pb(op, "/v3/kv/txn", &t.txn.base, on_txn, 0);
}

void dl_as_tried(dl_async *op, int rc) {
  if (rc != 0 || wait_over(op))
    dl_as_finish(op, rc);
  else if (op->sem->first)
    watch_step(op, false, 0);
  else
    session_step(op);
}

/* The read's answer (rc: dl_etcd_count_read_answer's): done, the put, or
 * for an acquire that found too few, the try's end. */
static void on_read(dl_async *op, int rc, long long cur, int64_t mod) {
  etcd_asem *m = op->sem;
  long long to;
  if (rc < 0) {
    dl_as_finish(op, rc);
  } else if (m->take) {
    if (!m->cancelled && dl_etcd_sem_take_to(cur, m->n, &to))
      put_count(op, mod, to);
    else
      dl_as_tried(op, 0);
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

/* The put's answer. */
static void on_put(dl_async *op, int rc, json_object *o) {
  etcd_asem *m = op->sem;
  bool ok = rc == 0 && dl_etcd_txn_succeeded(o);
  json_object_put(o);
  if (rc != 0) {
    dl_as_finish(op, rc);
  } else if (ok && m->take) {
    dl_as_tried(op, 1);
  } else if (ok) {
    *m->v = m->result;
    dl_etcd_op_end(op, 0);
  } else if (!m->take && ++m->tries >= ETCD_COUNT_TRIES) {
    dl_as_finish(op, dl_etcd_count_busy(op->e, m->key));
  } else { /* another writer came first: read again */
    read_count(op);
  }
}

static void on_call(void *ud, int rc, json_object *o, int code) {
  (void)code;
  dl_async *op = ud;
  etcd_asem *m = op->sem;
  op->call = NULL;
  long long cur = 0;
  int64_t mod = 0;
  switch (m->step) {
  case M_START:
    if (rc < 0)
      dl_etcd_op_end(op, rc);
    else
      try_step(op);
    return;
  case M_READ:
    if (rc == 0)
      rc = dl_etcd_count_read_answer(op->e, m->key, o, &cur, &mod, &m->at);
    else
      json_object_put(o);
    on_read(op, rc, cur, mod);
    return;
  case M_PUT: on_put(op, rc, o); return;
  case M_UNPUT:
    json_object_put(o);
    dl_etcd_op_end(op, m->rc);
    return;
  case M_LINE:
  case M_LEAVE: /* txns made with a message: on_txn's, never here */
    json_object_put(o);
    dl_etcd_op_end(op, dl_seterr(op->e->err, DLOCK_EPROTO,
                                 "etcd: a semaphore's txn answered as JSON"));
    return;
  case M_LOOK:
    if (rc == 0)
      rc =
          dl_etcd_look_answer(op->e, m->line, o, m->pred, sizeof m->pred, &mod);
    else
      json_object_put(o);
    if (rc == DLOCK_ELOST) { /* our place went (its lease ended): anew */
      m->ln.rev = 0;
      session_step(op);
    } else if (rc < 0) {
      dl_as_finish(op, rc);
    } else if (rc == 1) {
      watch_step(op, true, mod);
    } else {
      /* First in line: the count read again, its watch from that read
       * on. A watch from a revision already past (our place's put came
       * after the try's read) is etcd's unsynced watcher, told only at
       * its next sync, up to 100 ms later. */
      m->first = true;
      try_again(op);
    }
    return;
  case M_SESSION:
  case M_WATCH:
  case M_TRY: return; /* not a call's */
  }
}

/* A new operation on s's count (acquire: of n permits, waiting until
 * deadline with wait; else the update op), started from the loop's
 * dispatch: 0 (*out), or a negative code recorded. */
static int sem_start(dl_etcd *e, const dl_sync_ref *s, bool acquire,
                     dl_sync_op op_, long long n, long long *v, bool wait,
                     int64_t deadline, dl_done_fn done, void *ud,
                     dl_async **out) {
  dl_async *op = dl_as_new(e, done, ud);
  if (op == NULL) return DLOCK_ENOMEM;
  etcd_asem *m = op->sem;
  m->take = acquire;
  m->op = op_;
  m->n = n;
  m->v = v;
  if (v) *v = 0;
  m->wait = wait;
  m->deadline = deadline;
  int rc = dl_etcd_sem_check(e, s, acquire, op_, n, m->key);
  if (rc == 0 && wait) rc = dl_etcd_sem_line_key(e, m->key, m->line);
  return dl_as_begin(op, rc, out);
}

dl_async *dl_as_new(dl_etcd *e, dl_done_fn done, void *ud) {
  dl_async *op = dl_etcd_op_new(e, AOP_SEM, done, ud);
  if (op && (op->sem = calloc(1, sizeof *op->sem)) == NULL) {
    dl_etcd_op_drop(op);
    op = NULL;
  }
  if (op == NULL) dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  return op;
}

/* The answer of a txn made with a message: our place put in the line
 * (M_LINE), or gone (M_LEAVE). */
static void on_txn(void *ud, int rc, ProtobufCMessage *msg, int code) {
  (void)code;
  dl_async *op = ud;
  etcd_asem *m = op->sem;
  op->call = NULL;
  if (m->step == M_LEAVE) {
    if (msg) protobuf_c_message_free_unpacked(msg, NULL);
    dl_etcd_op_end(op, m->rc);
    return;
  }
  int64_t mod = 0;
  if (rc == 0) rc = dl_etcd_claim_answer(op->e, &m->ln, msg, false, &mod);
  if (rc == 1) rc = dl_etcd_sem_not_ours(op->e, m->line);
  /* A put whose answer we did not get may have made our place. */
  m->unsure = rc < 0 && (dl_etcd_transient(rc) || rc == DLOCK_EPROTO);
  if (rc < 0)
    dl_as_finish(op, rc);
  else
    look_step(op);
}

int dl_as_begin(dl_async *op, int rc, dl_async **out) {
  etcd_asem *m = op->sem;
  if (rc == 0 && m->wait) {
    m->ln.key = m->line;
    memcpy(m->lpfx, m->line, (size_t)(strrchr(m->line, '/') + 1 - m->line));
  }
  m->step = M_START;
  op->later = on_call;
  rc = dl_etcd_op_later(op, rc);
  if (rc == 0) *out = op;
  return rc;
}

int dl_etcd_sem_update_async(dl_backend *b, const dl_sync_ref *s, dl_sync_op op,
                             long long n, long long *v, dl_done_fn done,
                             void *ud, dl_async **out) {
  return sem_start((dl_etcd *)b, s, false, op, n, v, false, 0, done, ud, out);
}

int dl_etcd_sem_acquire_async(dl_backend *b, const dl_sync_ref *s, int permits,
                              bool wait, int64_t deadline, dl_done_fn done,
                              void *ud, dl_async **out) {
  return sem_start((dl_etcd *)b, s, true, DL_SEM_AVAILABLE, permits, NULL, wait,
                   deadline, done, ud, out);
}

void dl_etcd_sem_cancel(dl_async *op) {
  etcd_asem *m = op->sem;
  m->cancelled = true;
  /* A watch (or the pause after its stream's end) ends now, from the
   * loop's dispatch (armed: restarted, it needs no memory); a call in
   * flight is answered first. */
  if (m->step == M_WATCH)
    dl_timer_start(op->e->env->loop, &op->timer, dl_now_ms());
}
