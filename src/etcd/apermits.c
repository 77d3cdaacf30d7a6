/* apermits.c: the event-loop client's permit-expirable semaphore acquire
 * on the loop's multi handle (acall.c), with no thread: the blocking
 * acquire's try (permits.c's halves: the permits' read, the lease the
 * permit's key goes on, the put compared on the read) driven by call
 * answers, in asem.c's line of waiters when it waits; at the end the
 * permit held by the client (permits.c's dl_etcd_permit_end), or what
 * was put undone. The session's lease is asession.c's step; a fixed
 * lease an idle one kept alive, else a grant. Its updates: set and add
 * asem.c's count at the total; available a read; a release (or a force
 * release) the read, then the permit's key deleted (a hold of this
 * client's at its revision, sent again every 20 ms while the servers do
 * not answer), its own lease kept idle or revoked. */
#include "asem.h"
#include "pbtxn.h"

#include <stdio.h>
#include <stdlib.h>

static void put_step(dl_async *op);
static void lease_step(dl_async *op);

/* op's next call (answered to fn) in its try. */
static void next(dl_async *op, const char *path, const char *body,
                 etcd_acall_fn fn) {
  op->sem->step = M_TRY;
  dl_etcd_op_next(op, path, body, fn, 0);
}

static void on_read(void *ud, int rc, json_object *o, int code) {
  (void)code;
  dl_async *op = ud;
  etcd_asem *m = op->sem;
  op->call = NULL;
  long long max = 0, taken = 0;
  if (rc == 0)
    rc = dl_etcd_permits_read_answer(op->e, m->pt.total, o, &max, &m->mod,
                                     &taken, &m->at);
  else
    json_object_put(o);
  if (!m->take)
    dl_ap_update_read(op, rc, max, taken);
  else if (rc <= 0 || max - taken < 1 || m->cancelled)
    dl_as_tried(op, rc < 0 ? rc : 0); /* none free: not now */
  else
    lease_step(op);
}

static void read_step(dl_async *op) {
  char body[ETCD_SEM_INSPECT_BODY_MAX];
  dl_etcd_permits_read_body(op->sem->pt.total, body, sizeof body);
  next(op, "/v3/kv/txn", body, on_read);
}

void dl_ap_try(dl_async *op) {
  op->sem->tries = 0;
  read_step(op);
}

static void on_put(void *ud, int rc, json_object *o, int code) {
  (void)code;
  dl_async *op = ud;
  etcd_asem *m = op->sem;
  op->call = NULL;
  if (rc != 0) {
    json_object_put(o);
    m->pt.unsure = dl_etcd_transient(rc);
    dl_as_tried(op, rc);
  } else if (dl_etcd_permit_put_answer(&m->pt, o)) {
    dl_as_tried(op, 1);
  } else if (++m->tries >= ETCD_COUNT_TRIES) {
    dl_as_tried(op, dl_etcd_count_busy(op->e, m->pt.total));
  } else { /* the permits changed since the read: read again */
    read_step(op);
  }
}

static void put_step(dl_async *op) {
  etcd_asem *m = op->sem;
  char *body = dl_etcd_permit_put_body(&m->pt, m->mod, m->at);
  if (body == NULL) {
    dl_as_tried(op, dl_seterr(op->e->err, DLOCK_ENOMEM, "out of memory"));
    return;
  }
  next(op, "/v3/kv/txn", body, on_put);
  free(body);
}

static void on_session(dl_async *op, int rc, int64_t l, int64_t until) {
  if (rc < 0) {
    dl_as_tried(op, rc);
    return;
  }
  op->sem->pt.lease = l;
  op->sem->pt.until = until;
  put_step(op);
}

/* A fixed lease's keepalive: kept for lease_ms from when it was sent, or
 * gone (the next idle one, or a grant). */
static void on_keep(void *ud, int rc, ProtobufCMessage *m, int code) {
  (void)code;
  dl_async *op = ud;
  etcd_permit_try *t = &op->sem->pt;
  op->call = NULL;
  int64_t ttl = 0;
  rc = dl_etcd_keepalive_reply(rc, m, &ttl);
  if (rc < 0) {
    dl_as_tried(op, rc);
  } else if (dl_etcd_fixed_kept(rc, ttl, t->lease_ms)) {
    t->until = dl_validity(t->lease_at, t->lease_ms);
    put_step(op);
  } else {
    t->lease = 0;
    lease_step(op);
  }
}

static void on_grant(void *ud, int rc, json_object *o, int code) {
  (void)code;
  dl_async *op = ud;
  etcd_permit_try *t = &op->sem->pt;
  op->call = NULL;
  int64_t l = 0, got;
  if (rc == 0)
    rc = dl_etcd_grant_answer(op->e, o, &l, &got);
  else
    json_object_put(o);
  if (rc < 0) {
    dl_as_tried(op, rc);
    return;
  }
  t->lease = l;
  t->until = dl_validity(t->lease_at, t->lease_ms);
  put_step(op);
}

/* The lease the permit's key goes on, fresh (permits.c's fresh_lease):
 * the session's; or a fixed one, kept alive when its grant or last
 * keepalive is more than 100 ms old, an idle one of the same TTL kept
 * alive, else a new grant. */
static void lease_step(dl_async *op) {
  etcd_permit_try *t = &op->sem->pt;
  if (!t->own) {
    op->sem->step = M_TRY;
    dl_etcd_asess_step(op, on_session);
    return;
  }
  int64_t now = dl_now_ms();
  if (t->lease != 0 && now - t->lease_at <= 100) {
    put_step(op);
    return;
  }
  if (t->lease == 0) t->lease = dl_etcd_idle_take(op->e, t->lease_ms, now);
  t->lease_at = now;
  char body[64];
  if (t->lease != 0) {
    etcd_keepalive ka;
    op->sem->step = M_TRY; /* as next's */
    dl_etcd_op_ask_next(op, dl_etcd_keepalive_ask(&ka, t->lease), NULL,
                        on_keep, 0);
  } else {
    dl_etcd_grant_body(dl_etcd_ttl_s(t->lease_ms), body, sizeof body);
    next(op, "/v3/lease/grant", body, on_grant);
  }
}

static void on_undone(void *ud, int rc, json_object *o, int code) {
  (void)rc, (void)code;
  dl_async *op = ud;
  op->call = NULL;
  json_object_put(o);
  dl_as_finish(op, op->sem->rc);
}

void dl_ap_end(dl_async *op, int rc) {
  etcd_asem *m = op->sem;
  etcd_permit_try *t = &m->pt;
  m->rc = dl_etcd_permit_end(op->e, m->s, t, rc, m->valid_until);
  char body[ETCD_PERMIT_DELETE_BODY_MAX];
  m->step = M_TRY;
  if (t->left == ETCD_PERMIT_REVOKE) {
    dl_etcd_lease_body(t->lease, body, sizeof body);
    dl_etcd_op_next(op, "/v3/lease/revoke", body, on_undone, m->rc);
  } else if (t->left == ETCD_PERMIT_DELETE) {
    dl_etcd_permit_delete_body(t->key, body, sizeof body);
    dl_etcd_op_next(op, "/v3/kv/deleterange", body, on_undone, m->rc);
  } else {
    dl_as_finish(op, m->rc);
  }
}

int dl_etcd_permit_acquire_async(dl_backend *b, const dl_sync_ref *s,
                                 const char *id, int64_t lease_ms, bool wait,
                                 int64_t deadline, int64_t *valid_until,
                                 dl_done_fn done, void *ud, dl_async **out) {
  dl_etcd *e = (dl_etcd *)b;
  dl_async *op = dl_as_new(e, done, ud);
  if (op == NULL) return DLOCK_ENOMEM;
  etcd_asem *m = op->sem;
  m->take = m->permit = true;
  m->wait = wait;
  m->deadline = deadline;
  m->s = s;
  m->valid_until = valid_until;
  int rc = dl_etcd_permit_init(e, s, id, lease_ms, &m->pt);
  /* The line's first watches the total and the permits' keys under it. */
  snprintf(m->key, sizeof m->key, "%s", m->pt.total);
  snprintf(m->line, sizeof m->line, "%s", m->pt.line);
  return dl_as_begin(op, rc, out);
}

/* ---- the updates: the total's (asem.c's count), available, release ---- */
static void on_revoked(void *ud, int rc, json_object *o, int code) {
  (void)rc, (void)code;
  dl_async *op = ud;
  op->call = NULL;
  json_object_put(o);
  dl_etcd_op_end(op, op->sem->rc);
}

static void delete_try(void *ud);

/* The release's delete answered (an own hold's at its revision, sent
 * again while the servers do not answer; else the key whatever its
 * revision): the hold's end, a lease of its own revoked. */
static void deleted(dl_async *op, int rc, bool own) {
  etcd_asem *m = op->sem;
  if (own && dl_etcd_delete_again(&rc, &m->retried, m->deadline)) {
    int trc = dl_etcd_op_timer(op, delete_try, dl_now_ms() + 20);
    if (trc == 0) return;
    rc = trc;
  }
  etcd_hold *h = op->h;
  op->h = NULL;
  int64_t revoke = h ? dl_etcd_permit_released(op->e, h, rc, m->retried,
                                               m->pop == DL_PERMITS_FORCE)
                     : 0;
  if (rc >= 0) *m->v = rc;
  m->rc = rc < 0 ? rc : 0;
  char body[64];
  if (revoke == 0) {
    dl_etcd_op_end(op, m->rc);
    return;
  }
  dl_etcd_lease_body(revoke, body, sizeof body);
  next(op, "/v3/lease/revoke", body, on_revoked);
}

/* An own hold's delete at its revision answered. */
static void on_deleted_at(void *ud, int rc, ProtobufCMessage *msg, int code) {
  (void)code;
  dl_async *op = ud;
  op->call = NULL;
  deleted(op, rc == 0 ? dl_etcd_delete_answer(msg) : rc, true);
}

/* A force release's delete of the key, whatever its revision, answered. */
static void on_deleted(void *ud, int rc, json_object *o, int code) {
  (void)code;
  dl_async *op = ud;
  op->call = NULL;
  if (rc == 0)
    rc = dl_etcd_permit_delete_answer(o);
  else
    json_object_put(o);
  deleted(op, rc, false);
}

static void delete_try(void *ud) {
  dl_async *op = ud;
  etcd_delete_txn t;
  dl_etcd_delete_txn(&t, op->h->key, op->h->rev);
  op->sem->step = M_TRY;
  dl_etcd_op_next_pb(op, "/v3/kv/txn", &t.txn.base, on_deleted_at, 0);
}

void dl_ap_update_read(dl_async *op, int rc, long long max, long long taken) {
  etcd_asem *m = op->sem;
  if (rc < 0) { /* a key of another kind where the permits live */
    dl_etcd_op_end(op, rc);
    return;
  }
  if (m->pop == DL_PERMITS_AVAILABLE) {
    *m->v = max - taken;
    dl_etcd_op_end(op, 0);
    return;
  }
  /* Ours from here (op->h: the close's to drop): off the list, so that a
   * renewal or a check finding the key gone cannot free it under us. */
  op->h = dl_etcd_permit_unhold(op->e, m->s, m->pt.owner);
  m->deadline = dl_now_ms() + op->e->command_timeout_ms;
  if (op->h && m->pop != DL_PERMITS_FORCE) {
    delete_try(op);
    return;
  }
  /* Its key alone: a permit's id is never taken again, so a release sent
   * twice frees one permit. */
  char body[ETCD_PERMIT_DELETE_BODY_MAX];
  dl_etcd_permit_delete_body(m->pt.key, body, sizeof body);
  next(op, "/v3/kv/deleterange", body, on_deleted);
}

int dl_etcd_permits_update_async(dl_backend *b, const dl_sync_ref *s,
                                 dl_sync_op op_, long long n, const char *id,
                                 long long *v, dl_done_fn done, void *ud,
                                 dl_async **out) {
  dl_etcd *e = (dl_etcd *)b;
  dl_async *op = dl_as_new(e, done, ud);
  if (op == NULL) return DLOCK_ENOMEM;
  etcd_asem *m = op->sem;
  m->s = s;
  m->v = v;
  *v = 0;
  int rc = dl_etcd_permits_check(e, s, op_, n, id, &m->pt);
  if (op_ == DL_PERMITS_SET || op_ == DL_PERMITS_ADD) {
    /* The total: a count, as the counting semaphore's (its permits out
     * all come back one day). */
    m->op = op_ == DL_PERMITS_SET ? DL_SEM_SET : DL_SEM_ADD;
    m->n = n;
    snprintf(m->key, sizeof m->key, "%s", m->pt.total);
  } else {
    m->permit = true;
    m->pop = op_;
  }
  return dl_as_begin(op, rc, out);
}
