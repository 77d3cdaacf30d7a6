/* amwait.c: the event loop's mutex acquire (amutex.c) from its claim
 * txn's answer on: won at once, or in line: a look (our key still there,
 * and our predecessor), the watch on the predecessor's key in steps of a
 * third of the lease, each step keeping the lease alive, the deadline and
 * a cancel a dl_timer, transient errors ridden out with a pause. */
#include "amutex.h"
#include "pbtxn.h"

#include <stdio.h>
#include <string.h>

static void look_step(dl_async *op);
static void on_wait_timer(void *ud);

/* Whether the wait is over: none asked for, its deadline come, or the
 * operation cancelled. */
bool dl_am_wait_over(dl_async *op) {
  const dl_acquire *a = op->acq->a;
  return !a->wait || dl_now_ms() >= a->deadline || op->acq->cancelled;
}

/* Runs on_wait_timer at `at` (step: what op waits in). */
void dl_am_wait_until(dl_async *op, astep step, int64_t at) {
  op->acq->step = step;
  int rc = dl_etcd_op_timer(op, on_wait_timer, at);
  if (rc != 0) dl_am_fail(op, rc); /* its watch aborted first */
}

void dl_am_wait_error(dl_async *op, int rc) {
  struct etcd_aacq *q = op->acq;
  int64_t pause =
      !q->cancelled
          ? dl_etcd_ride_pause(op->e, q->a->wait, q->a->deadline, rc, &q->rides)
          : 0;
  if (pause > 0) {
    /* Told to the acquires of the name in this client parked behind us
     * (dl_am_fail tells them otherwise). */
    dl_etcd_riding(q->h, rc);
    dl_am_wait_until(op, S_PAUSE, dl_now_ms() + pause);
  } else {
    dl_am_fail(op, rc);
  }
}

/* The wait's end at its deadline or a cancel: not taken. */
static void wait_end(dl_async *op) {
  struct etcd_aacq *q = op->acq;
  /* Riding out the server's loss at the deadline (the last pause ends
   * there): its error (recorded), not "held". */
  int riding = q->cancelled ? 0 : atomic_load(&q->h->riding);
  if (riding == 0)
    q->a->ttl = DL_TTL_UNKNOWN; /* the holder's lease is not read */
  dl_am_fail(op, riding);
}

static void won(dl_async *op) {
  struct etcd_aacq *q = op->acq;
  int rc = dl_etcd_mutex_won(op->e, q->a, q->h, q->until);
  if (rc != 1) {
    dl_am_fail(op, rc);
    return;
  }
  q->h = NULL; /* held: the client's now */
  dl_etcd_op_end(op, 1);
}

/* Keeps the lease of our key alive while it waits (keep_lease's steps):
 * a fixed lease's keepalive, or the session's step. */
static void keep_step(dl_async *op) {
  struct etcd_aacq *q = op->acq;
  if (!q->own) {
    dl_am_session_step(op);
    return;
  }
  q->sent = dl_now_ms();
  etcd_keepalive ka;
  dl_am_ask(op, S_KEEP, dl_etcd_keepalive_ask(&ka, q->h->lease));
}

void dl_am_keep_done(dl_async *op) {
  if (op->acq->won)
    won(op);
  else
    look_step(op);
}

/* Our key still there, and who is before it: one txn. */
static void look_step(dl_async *op) {
  struct etcd_aacq *q = op->acq;
  if (dl_am_wait_over(op)) {
    wait_end(op);
    return;
  }
  q->a->waited = true;
  char *body = dl_etcd_look_body(q->h->key, q->wait_pfx, q->h->rev);
  if (body == NULL) {
    dl_am_fail(op, dl_seterr(op->e->err, DLOCK_ENOMEM, "out of memory"));
    return;
  }
  dl_am_call(op, S_LOOK, "/v3/kv/txn", body);
  free(body);
}

static void on_watch(void *ud, int rc, json_object *o, int code) {
  (void)o, (void)code;
  dl_async *op = ud;
  op->call = NULL;
  dl_timer_stop(op->e->env->loop, &op->timer);
  if (rc < 0) {
    dl_am_wait_error(op, rc);
    return;
  }
  op->acq->watched = true;
  if (rc == 2) /* the stream ended (a member gone): a look in a moment */
    dl_am_wait_until(op, S_PAUSE, dl_now_ms() + 50);
  else
    look_step(op);
}

/* Watches the key before ours (pred, read at revision at) until it is
 * deleted, for a third of the lease at most, or until the deadline. */
static void watch_step(dl_async *op, int64_t at) {
  struct etcd_aacq *q = op->acq;
  if (dl_am_wait_over(op)) { /* cancelled while it looked */
    wait_end(op);
    return;
  }
  char body[ETCD_WATCH_BODY_MAX];
  dl_etcd_watch_delete_body(q->pred, at, body, sizeof body);
  int rc = dl_etcd_awatch(op->e, body, false, on_watch, op, &op->call);
  if (rc != 0) {
    dl_am_wait_error(op, rc);
    return;
  }
  int64_t step = dl_now_ms() + dl_etcd_lease_step(op->e, q->h, q->a->lease_ms);
  dl_am_wait_until(op, S_WATCH, step < q->a->deadline ? step : q->a->deadline);
}

/* The watch's step or the deadline come, a cancel, or a pause over. */
static void on_wait_timer(void *ud) {
  dl_async *op = ud;
  struct etcd_aacq *q = op->acq;
  if (q->step == S_WATCH) {
    dl_etcd_acall_abort(op->call);
    op->call = NULL;
    q->watched = true;
    if (!dl_am_wait_over(op)) {
      keep_step(op); /* a third of the lease: kept alive */
      return;
    }
  }
  if (q->step == S_PAUSE && !q->in_line) { /* before our key was in line */
    if (dl_am_wait_over(op))
      wait_end(op); /* cancelled: the pause left room before the deadline */
    else if (q->h->lease == 0)
      dl_am_lease_step(op);
    else
      dl_am_put_again(op);
    return;
  }
  look_step(op); /* ends it when the wait is over */
}

void dl_am_answered(dl_async *op) {
  struct etcd_aacq *q = op->acq;
  dl_etcd_answered(q->h, &q->rides);
}

void dl_am_on_look(dl_async *op, int rc, json_object *o) {
  struct etcd_aacq *q = op->acq;
  int64_t at = 0;
  if (rc == 0)
    rc = dl_etcd_look_answer(op->e, q->h->key, o, q->pred, sizeof q->pred, &at);
  if (rc >= 0) dl_am_answered(op);
  if (rc < 0 && rc != DLOCK_ELOST) {
    dl_am_wait_error(op, rc);
  } else if (rc < 0) {
    dl_am_fail(op, rc);
  } else if (rc == 0) {
    /* Nobody before us: ours, our key being there (Go 3.4's Mutex does not
     * look: etcd issue 11456). A fixed lease runs from the grant: after a
     * wait, from a keepalive. */
    q->won = true;
    if (q->own && q->watched)
      keep_step(op);
    else
      won(op);
  } else {
    watch_step(op, at);
  }
}

/* The claim txn's answer. */
void dl_am_on_put(dl_async *op, int rc, ProtobufCMessage *m) {
  struct etcd_aacq *q = op->acq;
  etcd_hold *h = q->h;
  int64_t owner_rev = 0;
  if (rc == 0) rc = dl_etcd_claim_answer(op->e, h, m, true, &owner_rev);
  if (rc >= 0) dl_am_answered(op);
  /* The key is someone else's: a read-write lock's takes another time (a
   * clash of clocks: a new key at the next put); a mutex's is no key of a
   * mutex. */
  if (rc == 1 && q->rw && q->clashes++ < ETCD_RW_CLASHES) {
    dl_am_put_step(op);
    return;
  }
  if (rc == 1)
    rc = dl_seterr(op->e->err, DLOCK_EWRONGTYPE,
                   "%s is there on a lease not ours: no lock of ours "
                   "made it (nothing changed)",
                   h->key);
  if (rc == 2 && q->fresh_tries++ == ETCD_FRESH_TRIES)
    rc = dl_seterr(op->e->err, DLOCK_EPROTO,
                   "etcd: %s of ours comes back at each put", h->key);
  if (rc == 2) { /* ours, left over: deleted at its revision, then put */
    etcd_delete_txn t;
    dl_etcd_delete_txn(&t, h->key, h->rev);
    dl_am_call_pb(op, S_UNORPHAN, "/v3/kv/txn", &t.txn.base);
    return;
  }
  if (rc < 0) {
    dl_am_wait_error(op, rc); /* a put that may have been done: again */
    return;
  }
  /* Ours if nobody is before us: the owner (the oldest key under wait_pfx)
   * is ours or younger, or there is none (a reader, no writer); or ours at
   * once, the downgrade, while the owner is our owner's write hold. */
  if (dl_etcd_mutex_ours(op->e, q->a->lock, h, owner_rev, q->rw,
                         q->downgrade)) {
    won(op);
    return;
  }
  q->in_line = true;
  look_step(op); /* refused at once when there is no wait */
}
