/* amutex.c: the event-loop client's acquire of the mutex (DL_KIND_LOCK,
 * and DL_KIND_FAIR on the same layout) and of the read-write lock's sides
 * (DL_KIND_READ, DL_KIND_WRITE) on the loop's multi handle (acall.c), with
 * no thread: the blocking acquire's steps (the halves in mutex.c, holds.c
 * and line.c, backend.c's session; the session's step: asession.c)
 * driven by call answers instead of a thread: a re-entry's check, the
 * claim, the session or fixed lease, the claim txn that reads the owner
 * (from its answer on: amwait.c); a
 * waiter's look (its own key still there, and its predecessor), the watch
 * on the predecessor's key (a stream on the same multi handle, parsed as
 * wait.c parses it) in steps of a third of the lease, each step keeping
 * the lease alive; the deadline and a cancel a dl_timer; and when not
 * taken, the own key's delete at its revision. An acquire that must first wait
 * for another owner of this client on the same key (the session lease's: they
 * take turns locally) waits on the loop too, parked in e->aclaims until a hold
 * goes (dl_etcd_hold_unlink wakes the loop from any thread). A side of a
 * read-write lock whose owner holds the other side is taken at once (the
 * read side: a downgrade) or refused (the write side). A stale hold of
 * the owner's own (reported lost, not released) is cleared on the way, as
 * the blocking claim clears it. Deadlock detection's walk and the other
 * kinds still run the blocking acquire on a job (core/blockloop.c). */
#include "amutex.h"
#include "pbtxn.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void on_call(void *ud, int rc, json_object *o, int code);
static void on_msg(void *ud, int rc, ProtobufCMessage *m, int code);

/* Ends op with rc (its claim, and a stale hold it was clearing, dropped). */
static void end(dl_async *op, int rc) {
  etcd_hold *h = op->acq->h, *st = op->acq->stale;
  op->acq->h = op->acq->stale = NULL;
  if (h) dl_etcd_hold_drop(op->e, h);
  if (st) dl_etcd_hold_drop(op->e, st);
  dl_etcd_op_end(op, rc);
}

void dl_am_ask(dl_async *op, astep step, const etcd_ask *k) {
  struct etcd_aacq *q = op->acq;
  q->step = step;
  op->deadline = dl_now_ms() + op->e->command_timeout_ms;
  dl_etcd *e = op->e;
  dl_done_fn done = op->done;
  void *ud = op->ud;
  etcd_hold *h = q->h, *st = q->stale;
  if (dl_etcd_op_ask(op, k, on_call, on_msg) == 0)
    return;
  /* op freed (out of memory): our key goes with its lease */
  if (h) dl_etcd_hold_drop(e, h);
  if (st) dl_etcd_hold_drop(e, st);
  done(ud, DLOCK_ENOMEM);
}

void dl_am_call(dl_async *op, astep step, const char *path, const char *body) {
  dl_am_ask(op, step, &(etcd_ask){path, body, NULL});
}

void dl_am_call_pb(dl_async *op, astep step, const char *path,
                   const ProtobufCMessage *msg) {
  dl_am_ask(op, step, &(etcd_ask){path, NULL, msg});
}

static void claim_step(dl_async *op);

/* ---- a stale hold of the owner's own (reported lost, not released) ----
 * As the blocking claim clears it (holds.c): its key deleted at its
 * revision, a lease of its own revoked (whatever their answers: a key
 * left on the session's lease is the put's to find, S_UNORPHAN), the hold
 * dropped; then the claim again. */
static void stale_step(dl_async *op) {
  struct etcd_aacq *q = op->acq;
  if ((q->stale = dl_etcd_stale_take(op->e, q->a->lock)) == NULL) {
    claim_step(op); /* gone meanwhile: look again */
    return;
  }
  etcd_delete_txn t;
  dl_etcd_delete_txn(&t, q->stale->key, q->stale->rev);
  dl_am_call_pb(op, S_STALE, "/v3/kv/txn", &t.txn.base);
}

static void stale_done(dl_async *op) {
  etcd_hold *st = op->acq->stale;
  op->acq->stale = NULL;
  dl_etcd_hold_drop(op->e, st);
  op->acq->step = S_START;
  claim_step(op);
}

static void stale_deleted(dl_async *op) {
  etcd_hold *st = op->acq->stale;
  if (!st->own_lease || st->lease == 0) {
    stale_done(op);
    return;
  }
  char body[64];
  dl_etcd_lease_body(st->lease, body, sizeof body);
  dl_am_call(op, S_STALE_REVOKE, "/v3/lease/revoke", body);
}

/* ---- the failure path: our key, then a fixed lease ---- */
static void fail_done(dl_async *op) {
  int rc = op->acq->rc;
  /* The detail the cause's (dl_am_fail kept it), not the cleanup's. */
  if (rc < 0 && op->acq->why[0])
    dl_seterr(op->e->env->err_owner, rc, "%s", op->acq->why);
  end(op, rc);
}

/* A fixed lease whose key is surely gone (gone 1) is kept for the next;
 * one that may still carry our key goes, and the key with it. */
static void fail_lease(dl_async *op, int gone) {
  struct etcd_aacq *q = op->acq;
  etcd_hold *h = q->h;
  int64_t revoke = 0;
  if (q->own && h->lease && gone == 1)
    revoke = dl_etcd_idle_put(op->e, h->lease, h->lease_ms, h->lease_until);
  else if (q->own && h->lease)
    revoke = h->lease;
  if (revoke == 0) {
    fail_done(op);
    return;
  }
  char body[64];
  dl_etcd_lease_body(revoke, body, sizeof body);
  dl_am_call(op, S_REVOKE, "/v3/lease/revoke", body);
}

/* Not taken (rc: the result): our key goes (Go's TryLock does the same),
 * at its own revision only; as the blocking acquire's failure path. */
void dl_am_fail(dl_async *op, int rc) {
  struct etcd_aacq *q = op->acq;
  etcd_hold *h = q->h;
  q->rc = rc;
  q->why[0] = '\0';
  if (rc < 0) dl_err_copy(op->e->env->err_owner, q->why, sizeof q->why);
  /* Told to the acquires parked behind us until the hold is dropped. */
  dl_etcd_riding(h, rc);
  if (h->rev > 0) {
    etcd_delete_txn t;
    dl_etcd_delete_txn(&t, h->key, h->rev);
    dl_am_call_pb(op, S_DELETE, "/v3/kv/txn", &t.txn.base);
  } else if (h->key && h->lease && !q->own &&
             (dl_etcd_transient(rc) || rc == DLOCK_EPROTO)) {
    /* a put whose answer we did not get: our key, on our lease */
    char body[ETCD_DELETE_KEY_BODY_MAX];
    dl_etcd_delete_key_body(h->key, body, sizeof body);
    h->rev = -1; /* no delete_at result to read */
    dl_am_call(op, S_DELETE, "/v3/kv/deleterange", body);
  } else {
    fail_lease(op, 0);
  }
}

/* ---- the steps ---- */
/* The claim txn, the lease known (h->lease; until: its validity). */
void dl_am_put_step(dl_async *op) {
  struct etcd_aacq *q = op->acq;
  char pfx[ETCD_KEY_MAX];
  char *value = NULL;
  int rc = dl_etcd_mutex_key(op->e, q->a, q->h, pfx, q->wait_pfx, &value);
  free(value);
  if (rc != 0) {
    dl_am_fail(op, rc);
    return;
  }
  dl_am_put_again(op);
}

void dl_am_put_again(dl_async *op) {
  struct etcd_aacq *q = op->acq;
  char *value = dl_etcd_mutex_value(op->e, q->a);
  if (value == NULL) {
    dl_am_fail(op, DLOCK_ENOMEM);
    return;
  }
  etcd_claim_txn t;
  dl_etcd_claim_txn(&t, q->h, value, q->wait_pfx);
  dl_am_call_pb(op, S_PUT, "/v3/kv/txn", &t.txn.base);
  free(value);
}

/* The session step's end (rc, the lease l valid until u): the claim's
 * lease, or for a waiter (keep_step) still its key's. */
static void session_got(dl_async *op, int rc, int64_t l, int64_t u) {
  struct etcd_aacq *q = op->acq;
  if (rc >= 0) dl_am_answered(op);
  if (rc < 0) {
    dl_am_wait_error(op, rc);
  } else if (!q->in_line) {
    q->h->lease = l;
    q->until = u;
    dl_am_put_step(op);
  } else if (l == q->h->lease) {
    q->until = u;
    dl_am_keep_done(op);
  } else { /* a new session: the old one ended */
    dl_am_fail(op,
               dl_seterr(op->e->err, DLOCK_ELOST,
                         "the lease of our etcd key %s ended while we waited",
                         q->h->key));
  }
}

void dl_am_session_step(dl_async *op) {
  op->acq->step = S_START; /* not waiting: a cancel looks later */
  dl_etcd_asess_step(op, session_got);
}

static void fixed_grant(dl_async *op) {
  char body[64];
  op->acq->sent = dl_now_ms();
  dl_etcd_grant_body(dl_etcd_ttl_s(op->acq->a->lease_ms), body, sizeof body);
  dl_am_call(op, S_FIXED_GRANT, "/v3/lease/grant", body);
}

/* A fixed lease (dl_etcd_fixed_lease's steps): an idle one of the same
 * TTL kept alive, else a new grant. */
void dl_am_lease_step(dl_async *op) {
  struct etcd_aacq *q = op->acq;
  if (!q->own) {
    dl_am_session_step(op);
    return;
  }
  q->h->lease_ms = q->a->lease_ms;
  q->sent = dl_now_ms();
  int64_t l = dl_etcd_idle_take(op->e, q->a->lease_ms, q->sent);
  if (l == 0) {
    fixed_grant(op);
    return;
  }
  q->h->lease = l;
  etcd_keepalive ka;
  dl_am_ask(op, S_FIXED_KEEP, dl_etcd_keepalive_ask(&ka, l));
}

/* ---- the wait for another owner of this client ---- */
/* Lists op last among the acquires waiting for another owner
 * (e->aclaims): a hold dropped from now on wakes them
 * (dl_etcd_hold_unlink), in their order (a wake looks at them in it, and
 * each that still waits is listed last again). */
static void park(dl_async *op) {
  dl_etcd *e = op->e;
  pthread_mutex_lock(&e->mu);
  dl_async **pp = &e->aclaims;
  while (*pp)
    pp = &(*pp)->acq->cnext;
  op->acq->cnext = NULL;
  *pp = op;
  op->acq->parked = true;
  pthread_mutex_unlock(&e->mu);
}

static void unpark(dl_async *op) {
  dl_etcd *e = op->e;
  if (!op->acq->parked) return;
  pthread_mutex_lock(&e->mu);
  for (dl_async **pp = &e->aclaims; *pp; pp = &(*pp)->acq->cnext)
    if (*pp == op) {
      *pp = op->acq->cnext;
      break;
    }
  op->acq->parked = false;
  pthread_mutex_unlock(&e->mu);
}

/* Not taken, nothing sent: as the blocking claim's refusal. */
static void refuse(dl_async *op) {
  op->acq->a->ttl = DL_TTL_UNKNOWN;
  end(op, 0);
}

/* A parked op's look: a hold dropped (dl_etcd_aclaims_woken), a cancel,
 * its deadline, or the fallback's period come. */
static void on_claim_timer(void *ud) {
  dl_async *op = ud;
  unpark(op);
  op->acq->step = S_START;
  if (op->acq->cancelled)
    refuse(op);
  else
    claim_step(op);
}

/* How often a parked acquire looks again, should a wake be missed (none
 * is known to be: the wake does the hand-off). */
#define ACLAIM_LOOK_MS 500

/* The claim: listed at once, or parked until the client's other owner of
 * the name lets go (its hold dropped wakes the loop; a look every
 * ACLAIM_LOOK_MS besides), its deadline or a cancel; a stale hold of the
 * owner's own cleared first (stale_step). */
static void claim_step(dl_async *op) {
  struct etcd_aacq *q = op->acq;
  etcd_hold *h = dl_etcd_claim_new(op->e, q->a->lock, q->own);
  if (h == NULL) {
    end(op, DLOCK_ENOMEM);
    return;
  }
  park(op); /* before the look: no drop after it goes unseen */
  bool stale;
  if (dl_etcd_claim_now(op->e, q->a->lock, h, !q->rw, &stale)) {
    unpark(op);
    q->h = h;
    dl_am_lease_step(op);
    return;
  }
  dl_etcd_hold_free(h);
  if (stale || dl_am_wait_over(op)) {
    unpark(op);
    int riding = stale || q->rw || q->cancelled
                     ? 0
                     : dl_etcd_claim_riding(op->e, q->a->lock);
    if (stale)
      stale_step(op);
    else if (riding)
      end(op, riding);
    else
      refuse(op);
    return;
  }
  q->a->waited = true;
  q->step = S_CLAIM;
  int64_t at = dl_now_ms() + ACLAIM_LOOK_MS;
  dl_timer_stop(op->e->env->loop, &op->timer);
  dl_timer_init(&op->timer, on_claim_timer, op);
  if (dl_timer_start(op->e->env->loop, &op->timer,
                     at < q->a->deadline ? at : q->a->deadline) != 0) {
    unpark(op);
    end(op, dl_seterr(op->e->err, DLOCK_ENOMEM, "out of memory"));
  }
}

void dl_etcd_aclaims_woken(dl_backend *b) {
  dl_etcd *e = (dl_etcd *)b;
  int64_t now = dl_now_ms();
  pthread_mutex_lock(&e->mu);
  bool look = e->aclaim_look;
  e->aclaim_look = false;
  pthread_mutex_unlock(&e->mu);
  /* Only this thread changes the list: walked without e->mu (a timer's
   * start may call the loop's hook). Armed while parked: restarted, a
   * timer needs no memory. */
  for (dl_async *op = look ? e->aclaims : NULL; op; op = op->acq->cnext)
    dl_timer_start(e->env->loop, &op->timer, now);
}

/* A side of a read-write lock whose owner holds the other side: the write
 * side refused (it would wait for itself), the read side taken at once
 * (the downgrade); then the claim. */
static void side_step(dl_async *op) {
  struct etcd_aacq *q = op->acq;
  if (q->rw && dl_etcd_other_side_held(op->e, q->a->lock)) {
    if (q->a->lock->kind == DL_KIND_WRITE) {
      end(op, dl_etcd_side_refused(op->e, q->a->lock));
      return;
    }
    q->downgrade = true;
  }
  claim_step(op);
}

static void start(dl_async *op) {
  struct etcd_aacq *q = op->acq;
  if (q->a->held > 0 && (q->rev = dl_etcd_reenter_begin(
                             op->e, q->a->lock, q->key, sizeof q->key)) != 0) {
    char body[ETCD_CREATE_REV_BODY_MAX];
    dl_etcd_create_rev_body(q->key, body, sizeof body);
    dl_am_call(op, S_REENTER, "/v3/kv/range", body);
    return;
  }
  side_step(op);
}

static void on_call(void *ud, int rc, json_object *o, int code) {
  (void)code;
  dl_async *op = ud;
  struct etcd_aacq *q = op->acq;
  dl_etcd *e = op->e;
  op->call = NULL;
  int64_t got = 0, l = 0;
  switch (q->step) {
  case S_START: start(op); return;
  case S_REENTER:
    if (rc != 0) {
      end(op, rc);
      return;
    }
    if (dl_etcd_reenter_end(e, q->a, q->rev, dl_etcd_create_rev_answer(o)))
      dl_etcd_op_end(op, 1);
    else
      side_step(op);
    return;
  case S_FIXED_GRANT:
    if (rc == 0 && (rc = dl_etcd_grant_answer(e, o, &l, &got)) == 0) {
      dl_am_answered(op);
      q->h->lease = l;
      q->until = q->h->lease_until = dl_validity(q->sent, q->a->lease_ms);
      dl_am_put_step(op);
    } else {
      q->h->lease = 0;
      dl_am_wait_error(op, rc);
    }
    return;
  case S_PUT:
  case S_UNORPHAN:
  case S_FIXED_KEEP:
  case S_KEEP:
  case S_STALE: /* calls made with a message: on_msg's, never here */
    json_object_put(o);
    dl_am_fail(op, dl_seterr(e->err, DLOCK_EPROTO,
                             "etcd: a call of step %d answered as JSON",
                             (int)q->step));
    return;
  case S_LOOK: dl_am_on_look(op, rc, o); return;
  case S_WATCH:
  case S_PAUSE:
  case S_CLAIM: return; /* not a call's */
  case S_DELETE:        /* a put's key whose answer we did not get (h->rev -1;
                           the fenced delete's answer: on_msg) */
    json_object_put(o);
    fail_lease(op, rc);
    return;
  case S_REVOKE:
    json_object_put(o);
    fail_done(op);
    return;
  case S_STALE_REVOKE:
    json_object_put(o);
    stale_done(op);
    return;
  }
}

/* The answer of a call made with a message (dl_am_call_pb's steps). */
static void on_msg(void *ud, int rc, ProtobufCMessage *m, int code) {
  (void)code;
  dl_async *op = ud;
  struct etcd_aacq *q = op->acq;
  op->call = NULL;
  int64_t got = 0;
  if (q->step == S_FIXED_KEEP) {
    rc = dl_etcd_keepalive_reply(rc, m, &got);
    if (rc >= 0) dl_am_answered(op);
    if (rc < 0) {
      q->h->lease = 0; /* as the blocking path: left to its TTL */
      dl_am_wait_error(op, rc);
    } else if (dl_etcd_fixed_kept(rc, got, q->a->lease_ms)) {
      q->until = q->h->lease_until = dl_validity(q->sent, q->a->lease_ms);
      dl_am_put_step(op);
    } else { /* gone: a new one */
      q->h->lease = 0;
      fixed_grant(op);
    }
  } else if (q->step == S_KEEP) {
    if ((rc = dl_etcd_keepalive_reply(rc, m, &got)) == 0)
      rc = dl_seterr(op->e->err, DLOCK_ELOST,
                     "the lease of our etcd key %s ended while we waited",
                     q->h->key);
    if (rc < 0) {
      dl_am_wait_error(op, rc);
      return;
    }
    q->until = q->h->lease_until = dl_validity(q->sent, q->h->lease_ms);
    dl_am_keep_done(op);
  } else if (q->step == S_PUT) {
    dl_am_on_put(op, rc, m);
  } else if (q->step == S_STALE) {
    if (m) protobuf_c_message_free_unpacked(m, NULL);
    stale_deleted(op);
  } else if (q->step == S_UNORPHAN) {
    if (m) protobuf_c_message_free_unpacked(m, NULL);
    if (rc != 0) { /* h->rev: the failure path deletes it */
      dl_am_fail(op, rc);
      return;
    }
    q->h->rev = 0;
    dl_am_put_step(op);
  } else if (q->step == S_DELETE) { /* the failure path's, at our revision */
    fail_lease(op, rc == 0 ? dl_etcd_delete_answer(m) : rc);
  } else { /* no other step calls with a message */
    if (m) protobuf_c_message_free_unpacked(m, NULL);
    dl_am_fail(op, dl_seterr(op->e->err, DLOCK_EPROTO,
                             "etcd acquire: a message answer at step %d",
                             (int)q->step));
  }
}

int dl_etcd_acquire_async(dl_backend *b, dl_acquire *a, dl_done_fn done,
                          void *ud, dl_async **out) {
  dl_etcd *e = (dl_etcd *)b;
  /* The mutex (the fair lock is the mutex: its line is FIFO) and the
   * read-write lock's sides here; deadlock detection's walk and the other
   * kinds: the blocking acquire, on a job. */
  dl_lock_kind kind = a->lock->kind;
  bool rw = kind == DL_KIND_READ || kind == DL_KIND_WRITE;
  bool mutex = kind == DL_KIND_LOCK || kind == DL_KIND_FAIR;
  if ((!mutex && !rw) || (a->wait && a->detect))
    return dl_blockloop_jobs(e->form)->lock_acquire_async(b, a, done, ud, out);
  dl_async *op = dl_etcd_op_new(e, AOP_ACQUIRE, done, ud);
  if (op && (op->acq = calloc(1, sizeof *op->acq)) == NULL) {
    dl_etcd_op_drop(op);
    op = NULL;
  }
  if (op == NULL) return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  op->acq->a = a;
  op->acq->own = a->lease_ms != e->session_ttl_ms;
  op->acq->rw = rw;
  /* The first step from the loop's dispatch: done never runs within this
   * call, and every step runs where a call's answer would. */
  op->later = on_call;
  int rc = dl_etcd_op_later(op, 0);
  if (rc == 0) *out = op;
  return rc;
}

void dl_etcd_acquire_cancel(dl_async *op) {
  struct etcd_aacq *q = op->acq;
  /* A call in flight is answered (its result kept, as a release's); a
   * wait ends now, from the loop's dispatch. */
  q->cancelled = true;
  if (q->step == S_WATCH || q->step == S_PAUSE)
    dl_am_wait_until(op, q->step, dl_now_ms());
  else if (q->step == S_CLAIM) /* armed: restarted, it needs no memory */
    dl_timer_start(op->e->env->loop, &op->timer, dl_now_ms());
}

void dl_etcd_acquire_close(dl_async *op) {
  dl_etcd *e = op->e;
  struct etcd_aacq *q = op->acq;
  unpark(op);
  dl_etcd_asess_close(op);
  dl_etcd_acall_abort(op->call);
  op->call = NULL;
  /* A fixed lease goes now, and a stale hold's own (the session's, with
   * its keys, goes with the client). */
  int64_t deadline = dl_now_ms() + e->command_timeout_ms;
  if (q->h && q->own && q->h->lease) dl_etcd_revoke(e, q->h->lease, deadline);
  if (q->stale && q->stale->own_lease && q->stale->lease)
    dl_etcd_revoke(e, q->stale->lease, deadline);
  end(op, dl_seterr(e->env->err_owner, DLOCK_ECLOSED, "the client closed"));
}
