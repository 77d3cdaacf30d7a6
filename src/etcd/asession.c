/* asession.c: the session lease for the event loop's operations that put
 * a key on it (the mutex acquire's claim and wait, amutex.c and amwait.c;
 * the semaphore's place in its line, asem.c): valid already, or one grant
 * or keepalive on the loop's multi handle at a time, the others waiting
 * for it; under e->lease_mu as the blocking path's (backend.c's halves:
 * dl_etcd_session_need, _kept, _granted). */
#include "aop.h"
#include "pbtxn.h"

static void on_kept(void *ud, int rc, ProtobufCMessage *m, int code);
static void on_granted(void *ud, int rc, json_object *o, int code);

/* Ends the loop's session call, and lets those waiting for it look
 * again. */
static void session_release(dl_etcd *e) {
  pthread_mutex_unlock(&e->lease_mu);
  e->asess = NULL;
  dl_async *w = e->asess_wait;
  e->asess_wait = NULL;
  while (w) {
    dl_async *next = w->sess.next;
    w->sess.next = NULL;
    dl_etcd_asess_step(w, w->sess.fn);
    w = next;
  }
}

/* op's session call ended (rc, its lease l valid until u): the waiters
 * look again, then op is told. */
static void call_end(dl_async *op, int rc, int64_t l, int64_t u) {
  op->sess.holds = false;
  session_release(op->e);
  op->sess.fn(op, rc, l, u);
}

/* op's session call (lease_mu held): a keepalive of l, or a grant (l 0). */
static void call_start(dl_async *op, int64_t l) {
  dl_etcd *e = op->e;
  op->sess.lease = l;
  op->sess.sent = dl_now_ms();
  int64_t deadline = op->sess.sent + e->command_timeout_ms;
  int rc;
  if (l) {
    etcd_keepalive ka;
    rc = dl_etcd_acall_ask(e, dl_etcd_keepalive_ask(&ka, l), deadline, NULL,
                           on_kept, op, &op->call);
  } else {
    char body[64];
    dl_etcd_grant_body(dl_etcd_ttl_s(e->session_ttl_ms), body, sizeof body);
    rc = dl_etcd_acall(e, "/v3/lease/grant", body, deadline, on_granted, op,
                       &op->call);
  }
  if (rc != 0) call_end(op, rc, 0, 0);
}

/* The session's keepalive answered: kept, or a new session (still under
 * lease_mu) when the lease is gone. */
static void on_kept(void *ud, int rc, ProtobufCMessage *m, int code) {
  (void)code;
  dl_async *op = ud;
  dl_etcd *e = op->e;
  op->call = NULL;
  int64_t got = 0, until = 0;
  rc = dl_etcd_keepalive_reply(rc, m, &got);
  if (rc >= 0 && dl_etcd_session_kept(e, op->sess.sent, rc == 1 ? got : 0,
                                      &until) == 0)
    call_end(op, 0, op->sess.lease, until);
  else if (rc >= 0)
    call_start(op, 0);
  else
    call_end(op, rc, 0, 0);
}

/* The session's grant answered. */
static void on_granted(void *ud, int rc, json_object *o, int code) {
  (void)code;
  dl_async *op = ud;
  dl_etcd *e = op->e;
  op->call = NULL;
  int64_t got = 0, l = 0, until = 0;
  if (rc == 0 && (rc = dl_etcd_grant_answer(e, o, &l, &got)) == 0)
    dl_etcd_session_granted(e, op->sess.sent, l, got, &until);
  call_end(op, rc, rc == 0 ? l : 0, until);
}

static void on_retry(void *ud) {
  dl_async *op = ud;
  dl_etcd_asess_step(op, op->sess.fn);
}

void dl_etcd_asess_step(dl_async *op, etcd_asess_fn fn) {
  dl_etcd *e = op->e;
  int64_t l, u, now = dl_now_ms();
  op->sess.fn = fn;
  int need = dl_etcd_session_need(e, now, &l, &u);
  if (need == 0) {
    fn(op, 0, l, u);
    return;
  }
  if (e->asess) { /* listed last: served in their order */
    dl_async **pp = &e->asess_wait;
    while (*pp)
      pp = &(*pp)->sess.next;
    op->sess.next = NULL;
    *pp = op;
    return;
  }
  if (pthread_mutex_trylock(&e->lease_mu) != 0) { /* a job's: in 5 ms */
    dl_timer_stop(e->env->loop, &op->timer);
    dl_timer_init(&op->timer, on_retry, op);
    if (dl_timer_start(e->env->loop, &op->timer, now + 5) != 0)
      fn(op, dl_seterr(e->err, DLOCK_ENOMEM, "out of memory"), 0, 0);
    return;
  }
  /* Looked at again under lease_mu: a job may have just renewed it. */
  if ((need = dl_etcd_session_need(e, now, &l, &u)) == 0) {
    pthread_mutex_unlock(&e->lease_mu);
    fn(op, 0, l, u);
    return;
  }
  op->sess.holds = true;
  e->asess = op;
  call_start(op, need == 1 ? l : 0);
}

void dl_etcd_asess_close(dl_async *op) {
  dl_etcd *e = op->e;
  for (dl_async **pp = &e->asess_wait; *pp; pp = &(*pp)->sess.next)
    if (*pp == op) {
      *pp = op->sess.next;
      break;
    }
  if (op->sess.holds) {
    op->sess.holds = false;
    pthread_mutex_unlock(&e->lease_mu);
    e->asess = NULL;
  }
}
