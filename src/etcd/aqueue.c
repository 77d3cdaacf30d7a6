/* aqueue.c: the event-loop client's queue on the loop's multi handle
 * (acall.c), with no thread: the blocking path's steps (queue.c's halves:
 * the txns and their verdicts, the same keys: docs/WIRE.md) driven by
 * call answers. An offer (at the tail, the head, or delayed): its txn,
 * again at another key when its key was taken. A size: its count. A poll
 * (either end): a delayed handle's first moves the delayed values due
 * (a read, then a txn each); then a look, and the take compared on the
 * value's mod revision (looked at again when another consumer took it);
 * none there and a wait: a watch on Q/ from the look's revision until a
 * PUT (a stream on the same multi handle) or the next delayed value's due
 * time, then again; its deadline and a cancel a dl_timer, a transient
 * error ridden out with a pause on it. A value taken as its poll is
 * cancelled, or as the client closes (its take's answer waited for
 * within the close), goes back where the poll took it from (the head for
 * a poll, the tail for a poll_last). A reliable take first has its consumer's
 * lease (granted, its key put on it) and gives back the values taken by
 * consumers whose key is gone (reliable.c's halves), then polls, its
 * take also putting the value at its own key; an ack reads the
 * consumer's taken values, then deletes the one acknowledged at its mod
 * revision. The transfer (a blocking client's mover) runs on a job. */
#include "aop.h"
#include "queue.h"

#include <stdlib.h>

typedef enum qstep {
  Q_GRANT,   /* a reliable take's consumer lease: its grant */
  Q_CONS,    /* the consumer's key put on it */
  Q_REVOKE,  /* the lease it had (or the new one, not kept) revoked */
  Q_TAKEN,   /* the read of the taken values, to give back the dead's */
  Q_DUE,     /* a delayed handle's poll: the read of the values due */
  Q_MOVE,    /* the move of one of them (or of a dead consumer's) */
  Q_ACKREAD, /* an ack's read of the consumer's taken values */
  Q_ACKDEL,  /* the delete of the one acknowledged */
  Q_OFFER,   /* an offer's txn */
  Q_COUNT,   /* a size's */
  Q_LOOK,    /* a poll's look */
  Q_TAKE,    /* its take */
  Q_BACK,    /* a value taken as its poll was cancelled, offered back */
  Q_WATCH,   /* the watch on Q/ in flight, the timer at the deadline (or
                the next due time; or a moment after its stream ended) */
  Q_PAUSE    /* a pause (an error ridden out) before the next look */
} qstep;

struct etcd_aqueue {
  const dl_sync_ref *s;
  dl_queue_req *q;
  qnames n;
  qcand c;           /* the take's candidate (c.v: NULL when none) */
  qdue due;          /* a delayed handle's moves (due.r: NULL when none) */
  long long next;    /* ms from the moves' end to the next due, or -1 */
  dl_queue_req back; /* the offer giving c back */
  long long delayed_at;
  int tries;                  /* an offer's keys found taken */
  dl_ride rides;              /* a poll's transient errors ridden out */
  char dest[ETCD_Q_DEST_MAX]; /* a reliable take's: where it puts the value */
  bool giving; /* the moves are the give-back's, not the delayed ones' */
  int64_t lease, sent; /* the consumer lease granted (its ID chosen before
                          the grant), when asked */
  int64_t revoking;    /* the lease Q_REVOKE revokes */
  char *again;         /* Q_BACK's txn, sent again at the client's close */
  int result;          /* the reliable take's, as its lease is revoked */
  bool cancelled;
  bool closing; /* its take or give-back answered within the client's
                   close (dl_etcd_queues_drain) */
  qstep step;
};

static void on_call(void *ud, int rc, json_object *o, int code);

/* The next call (step) with body j (freed), within one command timeout;
 * an error known at once comes to on_call: 0, or DLOCK_ENOMEM (op freed,
 * untold). */
static int txn_send(dl_async *op, qstep step, etcd_json *j) {
  op->aq->step = step;
  op->later = on_call;
  op->deadline = dl_now_ms() + op->e->command_timeout_ms;
  if (step == Q_BACK) {
    free(op->aq->again);
    if ((op->aq->again = j->p ? dl_strdup(j->p) : NULL) == NULL) j->oom = true;
  }
  int rc = j->oom ? dl_etcd_op_later(op, dl_seterr(op->e->err, DLOCK_ENOMEM,
                                                   "out of memory"))
                  : dl_etcd_op_call(op, "/v3/kv/txn", j->p, on_call);
  dl_etcd_json_free(j);
  return rc;
}

/* The revoke of `lease` (its answer to on_call), from a callback. */
static void revoke_next(dl_async *op, int64_t lease) {
  char body[64];
  dl_etcd_lease_body(lease, body, sizeof body);
  op->aq->step = Q_REVOKE;
  op->aq->revoking = lease;
  op->later = on_call;
  dl_etcd_op_next(op, "/v3/lease/revoke", body, on_call, 0);
}

/* As txn_send, from a callback: one that cannot start tells done. */
static void txn_next(dl_async *op, qstep step, etcd_json *j) {
  dl_done_fn done = op->done;
  void *ud = op->ud;
  if (txn_send(op, step, j) != 0) done(ud, DLOCK_ENOMEM);
}

/* An offer of q (or, step Q_BACK, the give-back) at a new key. */
static int offer_send(dl_async *op, qstep step, const dl_queue_req *q,
                      bool head) {
  etcd_aqueue *a = op->aq;
  etcd_json j = {0};
  int rc =
      dl_etcd_q_offer_req(op->e, &a->n, q, head, a->delayed_at,
                          step == Q_BACK && a->dest[0] ? a->dest : NULL, &j);
  if (rc == 0) return txn_send(op, step, &j);
  dl_etcd_json_free(&j);
  op->later = on_call;
  a->step = step;
  return dl_etcd_op_later(op, rc);
}

static int look(dl_async *op) {
  etcd_json j = {0};
  dl_etcd_q_look_req(&op->aq->n, op->aq->q->op == DL_QUEUE_POLL_LAST, &j);
  return txn_send(op, Q_LOOK, &j);
}

static void look_next(dl_async *op) {
  dl_done_fn done = op->done;
  void *ud = op->ud;
  if (look(op) != 0) done(ud, DLOCK_ENOMEM);
}

/* A poll's round: a delayed handle's moves, then a look. */
static void poll_again(dl_async *op) {
  if (!op->aq->q->delayed) {
    look_next(op);
    return;
  }
  etcd_json j = {0};
  dl_etcd_q_due_req(&op->aq->n, &j);
  txn_next(op, Q_DUE, &j);
}

/* A pause over: a look. */
static void on_pause(void *ud) {
  poll_again(ud);
}

/* A poll's call or watch that failed with rc: ridden out (a pause, then a
 * look) when transient and the deadline leaves room, as the blocking
 * poll's dl_etcd_ride_out; else the poll ends with it. */
static void poll_error(dl_async *op, int rc) {
  etcd_aqueue *a = op->aq;
  a->step = Q_PAUSE;
  if (!dl_etcd_op_ride(op, on_pause, a->cancelled, a->q->wait, a->q->deadline,
                       rc, &a->rides))
    dl_etcd_op_end(op, rc);
}

/* The watch's end: news, or the next due time (a look again); the
 * deadline or a cancel (not taken: 0). */
static void on_waited(dl_async *op, int rc) {
  etcd_aqueue *a = op->aq;
  if (rc < 0)
    poll_error(op, rc);
  else if (rc == 0 && (a->cancelled || dl_now_ms() >= a->q->deadline))
    dl_etcd_op_end(op, 0);
  else
    poll_again(op);
}

/* None there at revision rev: the poll ends (not taken: 0), or waits for
 * a new value (a PUT under Q/ after rev) until its deadline, or the next
 * delayed value's due time. */
static void poll_none(dl_async *op, int64_t rev) {
  etcd_aqueue *a = op->aq;
  dl_ride_answered(&a->rides); /* answered */
  int64_t now = dl_now_ms(), until = a->q->deadline;
  if (!a->q->wait || now >= until || a->cancelled) {
    dl_etcd_op_end(op, 0);
    return;
  }
  if (a->next >= 0 && a->next < until - now)
    until = now + (a->next < 5 ? 5 : a->next);
  char body[ETCD_WATCH_PREFIX_BODY_MAX];
  dl_etcd_watch_prefix_body(a->n.lo, rev, body, sizeof body);
  a->step = Q_WATCH;
  dl_etcd_op_watch(op, body, ETCD_ON_PUT, until, on_waited);
}

/* A delayed handle's moves: the next, or (none left) the look. */
static void due_step(dl_async *op) {
  etcd_aqueue *a = op->aq;
  etcd_json j = {0};
  if (a->due.i >= a->due.k && a->giving) { /* then the take */
    dl_etcd_q_due_end(&a->n, &a->due);
    a->giving = false;
    dl_etcd_q_reliable_dest(&a->n, a->q, a->dest, sizeof a->dest);
    poll_again(op);
    return;
  }
  if (a->due.i >= a->due.k) {
    a->next = dl_etcd_q_due_end(&a->n, &a->due);
    look_next(op);
    return;
  }
  int rc = dl_etcd_q_due_move_req(op->e, &a->n, &a->due, &j);
  if (rc == 0) {
    txn_next(op, Q_MOVE, &j);
    return;
  }
  dl_etcd_json_free(&j);
  dl_etcd_q_due_end(&a->n, &a->due);
  if (a->giving)
    dl_etcd_op_end(op, rc);
  else
    poll_error(op, rc);
}

/* The read of the values due (rc, o), or a move's answer. */
static void on_due(dl_async *op, int rc, json_object *o) {
  etcd_aqueue *a = op->aq;
  if (rc != 0)
    json_object_put(o);
  else if (a->step == Q_DUE)
    rc = dl_etcd_q_due_answer(op->e, a->s, &a->n, o, &a->due);
  else if (a->step == Q_TAKEN)
    rc = dl_etcd_q_taken_answer(op->e, a->s, &a->n, a->q->consumer, o, &a->due);
  else if ((rc = dl_etcd_q_move_answer(o, &a->due.at)) == 0)
    a->due.again = true; /* moved by another: looked at again */
  if (rc < 0 && (a->giving || a->step == Q_TAKEN)) {
    dl_etcd_q_due_end(&a->n, &a->due);
    dl_etcd_op_end(op, rc); /* as the blocking give-back: no ride */
  } else if (rc < 0) {
    dl_etcd_q_due_end(&a->n, &a->due);
    poll_error(op, rc);
  } else {
    if (a->step == Q_TAKEN) a->giving = true;
    due_step(op);
  }
}

/* The poll's value is its (1), freed with op no longer. */
static void poll_got(dl_async *op) {
  etcd_aqueue *a = op->aq;
  a->q->got = a->c.v;
  a->q->got_len = a->c.len;
  a->c.v = NULL;
  dl_etcd_op_end(op, 1);
}

/* A poll's take answered (rc, o): the value is the poll's; or, cancelled
 * meanwhile, offered back; or another consumer took it: a look again. */
static void on_take(dl_async *op, int rc, json_object *o) {
  etcd_aqueue *a = op->aq;
  bool ok = rc == 0 && dl_etcd_txn_succeeded(o);
  json_object_put(o);
  if (!ok) {
    free(a->c.v);
    a->c.v = NULL;
  }
  if (a->closing && !ok) {
    return; /* nothing taken (or not known: as any failed take): the
               close ends op */
  } else if (rc < 0) {
    poll_error(op, rc);
  } else if (ok && (a->cancelled || a->closing)) {
    /* Where this poll takes from: the head for a poll, the tail for a
     * poll_last. */
    a->back = (dl_queue_req){.value = a->c.v, .len = a->c.len};
    a->delayed_at = -1;
    a->tries = 0;
    dl_done_fn done = op->done;
    void *ud = op->ud;
    if (offer_send(op, Q_BACK, &a->back, a->q->op != DL_QUEUE_POLL_LAST) != 0)
      done(ud, DLOCK_ENOMEM);
  } else if (ok) {
    poll_got(op);
  } else {
    look_next(op);
  }
}

/* A reliable take's give-back of the dead consumers' values: their read. */
static void taken_next(dl_async *op) {
  etcd_json j = {0};
  dl_etcd_q_taken_req(&op->aq->n, &j);
  txn_next(op, Q_TAKEN, &j);
}

/* The consumer lease's steps (rc, o: a call's answer): the grant, its
 * key, a lease to revoke; then the give-back. */
static void on_lease(dl_async *op, int rc, json_object *o) {
  etcd_aqueue *a = op->aq;
  int64_t got, revoke = 0;
  if (a->step == Q_GRANT) {
    if (rc == 0)
      rc = dl_etcd_grant_answer(op->e, o, &a->lease, &got);
    else
      json_object_put(o);
    if (rc < 0) {
      dl_etcd_op_end(op, rc);
    } else {
      etcd_json j = {0};
      dl_etcd_q_consumer_put_req(&a->n, a->q, a->lease, &j);
      txn_next(op, Q_CONS, &j);
    }
    return;
  }
  json_object_put(o);
  if (a->step == Q_CONS) {
    a->result = rc;
    if (rc == 0)
      a->result = dl_etcd_q_consumer_keep(op->e, a->s, a->q, a->lease, a->sent,
                                          &revoke);
    else
      revoke = a->lease; /* not known to be put: not kept */
    if (revoke) {
      revoke_next(op, revoke);
      return;
    }
  }
  if (a->result < 0)
    dl_etcd_op_end(op, a->result);
  else
    taken_next(op);
}

/* An ack's read (its candidate in a->c), or its delete's answer. */
static void on_ack(dl_async *op, int rc, json_object *o) {
  etcd_aqueue *a = op->aq;
  etcd_json j = {0};
  if (a->step == Q_ACKREAD) {
    if (rc == 0)
      rc = dl_etcd_q_ack_answer(op->e, a->q, o, &a->c);
    else
      json_object_put(o);
    if (rc != 1) {
      dl_etcd_op_end(op, rc); /* q->n 0: none there */
      return;
    }
    dl_etcd_q_ack_del_req(&a->c, &j);
    txn_next(op, Q_ACKDEL, &j);
    return;
  }
  bool ok = rc == 0 && dl_etcd_txn_succeeded(o);
  json_object_put(o);
  if (rc < 0 || ok) {
    a->q->n = ok;
    dl_etcd_op_end(op, rc);
    return;
  }
  /* Gone meanwhile (given back: its lease ended): read again. */
  dl_etcd_q_ack_req(&a->n, a->q, &j);
  txn_next(op, Q_ACKREAD, &j);
}

static void on_call(void *ud, int rc, json_object *o, int code) {
  (void)code;
  dl_async *op = ud;
  etcd_aqueue *a = op->aq;
  dl_etcd *e = op->e;
  long long v = 0;
  op->call = NULL;
  switch (a->step) {
  case Q_GRANT:
  case Q_CONS:
  case Q_REVOKE: on_lease(op, rc, o); return;
  case Q_TAKEN:
  case Q_DUE:
  case Q_MOVE: on_due(op, rc, o); return;
  case Q_ACKREAD:
  case Q_ACKDEL: on_ack(op, rc, o); return;
  case Q_OFFER:
  case Q_BACK:
    if (rc == 0)
      rc = dl_etcd_q_offer_answer(e, a->s, a->step == Q_BACK ? &a->back : a->q,
                                  a->delayed_at, o, &a->tries);
    else
      json_object_put(o);
    if (rc == 0) { /* its key was taken: another */
      dl_done_fn done = op->done;
      void *dud = op->ud;
      bool back = a->step == Q_BACK;
      if (offer_send(op, a->step, back ? &a->back : a->q,
                     back ? a->q->op != DL_QUEUE_POLL_LAST
                          : a->q->op == DL_QUEUE_OFFER_FIRST) != 0)
        done(dud, DLOCK_ENOMEM);
    } else if (a->step == Q_BACK && rc < 0) {
      poll_got(op); /* not given back: the caller's rather than lost */
    } else if (a->step == Q_BACK && a->closing) {
      free(a->c.v); /* back: the close ends op */
      a->c.v = NULL;
    } else {
      dl_etcd_op_end(op, rc < 0 ? rc : 0);
    }
    return;
  case Q_COUNT:
    if (rc == 0)
      rc = dl_etcd_q_count_answer(e, a->s, a->q->op == DL_QUEUE_SIZE_DELAYED, o,
                                  &v);
    else
      json_object_put(o);
    a->q->n = v;
    dl_etcd_op_end(op, rc);
    return;
  case Q_TAKE: on_take(op, rc, o); return;
  default: break; /* Q_LOOK */
  }
  if (rc == 0)
    rc = dl_etcd_q_look_answer(e, a->s, &a->n, a->q->op == DL_QUEUE_POLL_LAST,
                               o, &a->c);
  else
    json_object_put(o);
  if (rc < 0) {
    poll_error(op, rc);
  } else if (rc == 0) {
    poll_none(op, a->c.rev);
  } else if (a->cancelled) { /* not taken */
    free(a->c.v);
    a->c.v = NULL;
    dl_etcd_op_end(op, 0);
  } else {
    etcd_json j = {0};
    dl_etcd_q_take_req(&a->n, &a->c, a->dest[0] ? a->dest : NULL, &j);
    txn_next(op, Q_TAKE, &j);
  }
}

/* A reliable take's first step (its consumer lease, or the give-back) or
 * an ack's: 0, or DLOCK_ENOMEM (op freed, untold). */
static int reliable_start(dl_async *op) {
  etcd_aqueue *a = op->aq;
  etcd_json j = {0};
  char body[64];
  if (a->q->op == DL_QUEUE_ACK) {
    dl_etcd_q_ack_req(&a->n, a->q, &j);
    return txn_send(op, Q_ACKREAD, &j);
  }
  if (dl_etcd_q_consumer_valid(op->e, a->s, a->q)) {
    dl_etcd_q_taken_req(&a->n, &j);
    return txn_send(op, Q_TAKEN, &j);
  }
  a->step = Q_GRANT;
  a->sent = dl_now_ms();
  op->later = on_call;
  a->lease =
      dl_etcd_grant_id_body(dl_etcd_ttl_s(a->q->lease_ms), body, sizeof body);
  return dl_etcd_op_call(op, "/v3/lease/grant", body, on_call);
}

int dl_etcd_queue_async(dl_backend *b, const dl_sync_ref *s, dl_queue_req *q,
                        dl_done_fn done, void *ud, dl_async **out) {
  dl_etcd *e = (dl_etcd *)b;
  bool poll = q->op == DL_QUEUE_POLL || q->op == DL_QUEUE_POLL_LAST;
  if (q->op == DL_QUEUE_TRANSFER) /* a blocking client's mover's: a job */
    return dl_blockloop_jobs(e->form)->queue_async(b, s, q, done, ud, out);
  dl_async *op = dl_etcd_op_new(e, AOP_QUEUE, done, ud);
  if (op && (op->aq = calloc(1, sizeof *op->aq)) == NULL) {
    dl_etcd_op_drop(op);
    op = NULL;
  }
  if (op == NULL) return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  etcd_aqueue *a = op->aq;
  a->s = s;
  a->q = q;
  a->delayed_at = -1;
  a->next = -1;
  dl_etcd_qnames(e, s, &a->n);
  q->got = NULL;
  q->got_len = 0;
  q->n = 0;
  int rc;
  etcd_json j = {0};
  if (q->op == DL_QUEUE_POLL_RELIABLE || q->op == DL_QUEUE_ACK) {
    rc = dl_etcd_q_reliable_check(e, q);
    rc = rc != 0 ? dl_etcd_op_later(op, rc) : reliable_start(op);
  } else if (poll && q->delayed) {
    dl_etcd_q_due_req(&a->n, &j);
    rc = txn_send(op, Q_DUE, &j);
  } else if (poll) {
    rc = look(op);
  } else if (q->op == DL_QUEUE_SIZE || q->op == DL_QUEUE_SIZE_DELAYED) {
    dl_etcd_q_count_req(&a->n, q->op == DL_QUEUE_SIZE_DELAYED, &j);
    rc = txn_send(op, Q_COUNT, &j);
  } else {
    if (q->op == DL_QUEUE_OFFER_DELAYED)
      a->delayed_at = dl_etcd_q_epoch_ms() + q->delay_ms;
    rc = offer_send(op, Q_OFFER, q, q->op == DL_QUEUE_OFFER_FIRST);
  }
  if (rc == 0) *out = op;
  return rc;
}

void dl_etcd_queue_cancel(dl_async *op) {
  etcd_aqueue *a = op->aq;
  a->cancelled = true;
  /* A watch or a pause ends now, from the loop's dispatch (armed:
   * restarted, it needs no memory); a call in flight is answered first. */
  if (a->step == Q_WATCH || a->step == Q_PAUSE)
    dl_timer_start(op->e->env->loop, &op->timer, dl_now_ms());
}

/* The client closing with a give-back in flight (its call aborted): the
 * same txn again, blocking: 0 the value is back, or a negative code. It
 * is compared on its new key being absent, so that the two put it once:
 * that key is this process's own (a UnixNano above any it used), and
 * found taken it is the aborted txn's put, unless a foreign key failed
 * the txn. (Found absent it may also be the aborted txn's put, taken by
 * another consumer meanwhile: then the value is in the queue twice, a
 * duplicate rather than a loss; docs/API.md says so.) */
static int back_again(dl_async *op) {
  etcd_aqueue *a = op->aq;
  dl_etcd *e = op->e;
  json_object *r;
  int rc = dl_etcd_call(e, "/v3/kv/txn", a->again,
                        dl_now_ms() + e->command_timeout_ms, &r, NULL);
  if (rc != 0) return rc;
  rc = dl_etcd_txn_succeeded(r) ? 0 : dl_etcd_q_check_clean(e, a->s, r);
  json_object_put(r);
  return rc;
}

bool dl_etcd_queue_taking(const dl_async *op) {
  const etcd_aqueue *a = op->aq;
  return op->kind == AOP_QUEUE && op->call && !a->dest[0] &&
         (a->step == Q_TAKE || a->step == Q_BACK);
}

/* dl_etcd_aloop_drain's: whether a closing op's call is in flight, the
 * latest of their deadlines in *until (and a moment for curl's timeout
 * to be heard). */
static bool closing_calls(void *ud, int64_t *until) {
  bool any = false;
  *until = 0;
  for (dl_async *op = ((dl_etcd *)ud)->aops; op; op = op->next)
    if (op->kind == AOP_QUEUE && op->aq->closing && op->call) {
      any = true;
      if (op->deadline + 50 > *until) *until = op->deadline + 50;
    }
  return any;
}

void dl_etcd_queues_drain(dl_etcd *e) {
  bool any = false;
  for (dl_async *op = e->aops; op; op = op->next)
    if (dl_etcd_queue_taking(op)) any = op->aq->closing = true;
  if (any) dl_etcd_aloop_drain(e, closing_calls, e);
}

int dl_etcd_queue_close(dl_async *op) {
  etcd_aqueue *a = op->aq;
  dl_etcd *e = op->e;
  int64_t l = a->step == Q_REVOKE                       ? a->revoking
              : a->step == Q_GRANT || a->step == Q_CONS ? a->lease
                                                        : 0;
  if (l) dl_etcd_revoke(e, l, dl_now_ms() + e->command_timeout_ms);
  if (a->step != Q_BACK || a->c.v == NULL || (a->again && back_again(op) == 0))
    return 0;
  poll_got(op); /* not known to be back: the poll's rather than lost */
  return 1;
}

void dl_etcd_aqueue_free(etcd_aqueue *a) {
  if (a == NULL) return;
  free(a->again);
  free(a->c.v);
  free(a->due.all);
  json_object_put(a->due.r);
  free(a);
}
