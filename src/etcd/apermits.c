/* apermits.c: the event-loop client's permit-expirable semaphore acquire
 * on the loop's multi handle (acall.c), with no thread: the blocking
 * acquire's try (permits.c's halves: the permits' read, the lease the
 * permit's key goes on, the put compared on the read) driven by call
 * answers, in asem.c's line of waiters when it waits; at the end the
 * permit held by the client (permits.c's dl_etcd_permit_end), or what
 * was put undone. The session's lease is asession.c's step; a fixed
 * lease an idle one kept alive, else a grant. */
#include "asem.h"

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
  if (rc <= 0 || max - taken < 1 || m->cancelled)
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
static void on_keep(void *ud, int rc, json_object *o, int code) {
  (void)code;
  dl_async *op = ud;
  etcd_permit_try *t = &op->sem->pt;
  op->call = NULL;
  int64_t ttl = 0;
  if (rc == 0)
    rc = dl_etcd_keepalive_answer(op->e, o, &ttl);
  else
    json_object_put(o);
  if (rc < 0) {
    dl_as_tried(op, rc);
  } else if (rc == 1 && ttl * 1000 >= t->lease_ms) {
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
    dl_etcd_lease_body(t->lease, body, sizeof body);
    next(op, "/v3/lease/keepalive", body, on_keep);
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
  dl_async *op = dl_etcd_op_new(e, AOP_SEM, done, ud);
  if (op && (op->sem = calloc(1, sizeof *op->sem)) == NULL) {
    dl_etcd_op_drop(op);
    op = NULL;
  }
  if (op == NULL) return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
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
