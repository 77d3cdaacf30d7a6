/* arenew.c: the watchdog's renewal round on an event-loop client, on the
 * loop's multi handle (acall.c), no thread: the blocking round's calls
 * (query.c's dl_etcd_renew) one after another, on its request builders
 * and answer parsers: the session lease's keepalive, each reliable
 * consumer's lease's keepalive, then the txns reading every hold's key
 * (the keepalive's answer vouches for the quiet ones first:
 * dl_etcd_renew_carry).
 * As the blocking round, it takes no e->lease_mu: a keepalive's answer
 * is taken only while the session's lease is still the one sent (e->mu,
 * a leaf lock held for a look). */
#include "aop.h"
#include "pbtxn.h"

#include <stdlib.h>

void dl_etcd_aren_free(etcd_aren *r) {
  if (r == NULL) return;
  dl_etcd_renew_txns_free(&r->t);
  free(r);
}

static void step(dl_async *op);

/* op's next call, by the round's deadline; one that cannot start (out of
 * memory: op freed) tells done DLOCK_ENOMEM. */
static void next_call(dl_async *op, const char *path, const char *body,
                      etcd_acall_fn fn) {
  dl_done_fn done = op->done;
  void *dud = op->ud;
  if (dl_etcd_op_call(op, path, body, fn) != 0) done(dud, DLOCK_ENOMEM);
}

static void on_session(void *ud, int rc, ProtobufCMessage *m, int code) {
  (void)code;
  dl_async *op = ud;
  etcd_aren *r = op->ren;
  op->call = NULL;
  int64_t ttl;
  rc = dl_etcd_keepalive_reply(rc, m, &ttl);
  r->first = dl_etcd_renew_session_kept(op->e, r->lease, r->sent, rc, ttl);
  dl_etcd_renew_carry(op->e, r->lease, r->n, r->items, &r->t);
  step(op);
}

static void on_consumer(void *ud, int rc, ProtobufCMessage *m, int code) {
  (void)code;
  dl_async *op = ud;
  etcd_aren *r = op->ren;
  op->call = NULL;
  int64_t ttl;
  rc = dl_etcd_keepalive_reply(rc, m, &ttl);
  dl_etcd_renew_consumer_end(
      &r->items[r->i],
      dl_etcd_consumer_kept(op->e, &r->items[r->i], r->lease, r->sent, rc, ttl),
      &r->first);
  r->i++;
  step(op);
}

static void on_txn(void *ud, int rc, json_object *o, int code) {
  (void)code;
  dl_async *op = ud;
  etcd_aren *r = op->ren;
  op->call = NULL;
  if (rc != 0 && r->first == 0) r->first = rc;
  if (rc == 0 && o) dl_etcd_renew_answer(op->e, r->n, r->items, &r->t, r->c, o);
  json_object_put(o);
  r->c++;
  step(op);
}

/* The round's next call: a consumer's keepalive, the txn, or the end. */
static void step(dl_async *op) {
  etcd_aren *r = op->ren;
  for (; r->i < r->n; r->i++) {
    dl_renew_item *it = &r->items[r->i];
    if (!it->permit || r->t.revs[r->i] != 0) continue;
    int cr = dl_etcd_consumer_look(op->e, it, r->lease_ms, &r->lease);
    if (cr != 3) {
      dl_etcd_renew_consumer_end(it, cr, &r->first);
      continue;
    }
    etcd_keepalive ka;
    r->sent = dl_now_ms();
    dl_done_fn done = op->done;
    void *dud = op->ud; /* as next_call's: op freed when it cannot start */
    if (dl_etcd_op_ask(op, dl_etcd_keepalive_ask(&ka, r->lease), NULL,
                       on_consumer) != 0)
      done(dud, DLOCK_ENOMEM);
    return;
  }
  if (r->c < r->t.ntxn) {
    if (r->c == 0) op->deadline = dl_etcd_reads_deadline(op->e, op->deadline);
    char *body = dl_etcd_renew_body(&r->t, r->c);
    (*r->calls)++;
    if (body) {
      next_call(op, "/v3/kv/txn", body, on_txn);
      free(body);
      return;
    }
    if (r->first == 0)
      r->first = dl_seterr(op->e->err, DLOCK_ENOMEM, "out of memory");
  }
  dl_etcd_op_end(op, r->first);
}

/* The round's first step from the loop's dispatch (nothing to keep
 * alive first: a check, which the lease's last known validity vouches
 * for as well). */
static void on_start(void *ud, int rc, json_object *o, int code) {
  (void)rc, (void)o, (void)code;
  dl_async *op = ud;
  etcd_aren *r = op->ren;
  dl_etcd_renew_carry(op->e, r->lease, r->n, r->items, &r->t);
  step(op);
}

int dl_etcd_renew_async(dl_backend *b, int64_t deadline, int64_t lease_ms,
                        int n, dl_renew_item *items, int *calls,
                        dl_done_fn done, void *ud, dl_async **out) {
  dl_etcd *e = (dl_etcd *)b;
  *calls = 0;
  dl_async *op = dl_etcd_op_new(e, AOP_RENEW, done, ud);
  etcd_aren *r = op ? calloc(1, sizeof *r) : NULL;
  if (r == NULL) {
    if (op) dl_etcd_op_drop(op);
    return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  }
  op->ren = r;
  op->deadline = deadline;
  r->items = items;
  r->n = n;
  r->lease_ms = lease_ms;
  r->calls = calls;
  int rc = dl_etcd_renew_txns(e, n, items, &r->t);
  if (rc != 0) {
    dl_etcd_op_drop(op);
    return rc;
  }
  /* The session's lease kept alive once (as the blocking round). */
  pthread_mutex_lock(&e->mu);
  r->lease = e->lease;
  pthread_mutex_unlock(&e->mu);
  if (lease_ms > 0 && r->lease != 0) {
    etcd_keepalive ka;
    r->sent = dl_now_ms();
    (*calls)++;
    rc = dl_etcd_op_ask(op, dl_etcd_keepalive_ask(&ka, r->lease), NULL,
                        on_session);
  } else {
    op->later = on_start;
    rc = dl_etcd_op_later(op, 0);
  }
  if (rc == 0) *out = op;
  return rc;
}
