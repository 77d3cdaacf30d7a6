/* release.c: the mutex's release (the delete of the own key at its own
 * create revision, etcd issue 22082), its two drivers on one request
 * builder and reply parser: the blocking entry, and the event-loop
 * client's own entries on the loop's multi handle (acall.c), which take
 * no thread: release, force release, lock queries (query.c's halves),
 * ping and scan (the mutex's acquire: amutex.c; the watchdog's renewals:
 * arenew.c; fenced resources: fence.c; the latch: alatch.c; the
 * semaphores: asem.c, apermits.c; the queue: aqueue.c), and inspect
 * (query.c's, sem.h's halves). The event-loop client's other operations
 * are core/blockloop.c's jobs (a thread each). */
#include "aop.h"
#include "pbtxn.h"
#include "sem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dl_etcd_delete_at(dl_etcd *e, const char *key, int64_t rev,
                      int64_t deadline) {
  etcd_delete_txn t;
  dl_etcd_delete_txn(&t, key, rev);
  ProtobufCMessage *r;
  int rc = dl_etcd_call_pb(e, "/v3/kv/txn", &t.txn.base, deadline, &r, NULL);
  return rc != 0 ? rc : dl_etcd_delete_answer(r);
}

/* The delete is conditional on our revision, so a retry never deletes a
 * newer hold; a retry that finds the key gone means an earlier try did
 * it. */
bool dl_etcd_delete_again(int *rc, bool *retried, int64_t deadline) {
  if (*rc == 0 && *retried) *rc = 1;
  if (*rc >= 0 || !dl_etcd_transient(*rc) || dl_now_ms() + 20 >= deadline)
    return false;
  *retried = true;
  return true;
}

int dl_etcd_delete_own(dl_etcd *e, const char *key, int64_t rev,
                       int64_t deadline, bool *retried) {
  *retried = false;
  for (;;) {
    int rc = dl_etcd_delete_at(e, key, rev, deadline);
    if (!dl_etcd_delete_again(&rc, retried, deadline)) return rc;
    dl_sleep_ms(20);
  }
}

/* The release's second half, after its delete (rc: dl_etcd_delete_own's):
 * the result, h dropped; *revoke: a lease to revoke now (a hold's own, or
 * an idle one pushed off the list), 0 none. */
static int release_end(dl_etcd *e, const dl_lock_ref *l, etcd_hold *h, int rc,
                       bool retried, int64_t *revoke) {
  *revoke = 0;
  if (rc == 0)
    rc = dl_seterr(e->err, DLOCK_ENOTOWNER,
                   "'%s' was no longer held by %s (its etcd key %s was "
                   "deleted, or its lease ended)",
                   l->name, l->owner, h->key);
  if (rc < 0 && dl_etcd_transient(rc)) {
    /* Not known to be deleted: the watcher thread deletes it later (at
     * its revision), else it would hold the line for as long as our
     * session lives. */
    dl_etcd_orphan(e, h->key, h->rev, h->own_lease ? h->lease : 0);
  } else if (h->own_lease && rc == 1 && !retried) {
    /* Deleted by us, nothing else on it: kept for the next fixed-lease
     * hold (a keepalive then, no grant and revoke). */
    *revoke = dl_etcd_idle_put(e, h->lease, h->lease_ms, h->lease_until);
  } else if (h->own_lease) {
    *revoke = h->lease;
  }
  dl_etcd_hold_drop(e, h);
  return rc;
}

int dl_etcd_lock_release(dl_backend *b, const dl_lock_ref *l, int64_t lease_ms,
                         int count) {
  (void)lease_ms;
  dl_etcd *e = (dl_etcd *)b;
  etcd_hold *h;
  int rc = dl_etcd_release_begin(e, l, count, &h);
  if (rc != 1) return rc;
  int64_t deadline = dl_now_ms() + e->command_timeout_ms;
  bool retried;
  rc = dl_etcd_delete_own(e, h->key, h->rev, deadline, &retried);
  int64_t revoke;
  rc = release_end(e, l, h, rc, retried, &revoke);
  if (revoke) dl_etcd_revoke(e, revoke, deadline);
  return rc;
}

/* ---- the event-loop client's own entries ---- */
static void on_later(void *ud);

dl_async *dl_etcd_op_new(dl_etcd *e, aop_kind kind, dl_done_fn done, void *ud) {
  dl_async *op = calloc(1, sizeof *op);
  if (op == NULL) return NULL;
  op->head.own = true;
  op->e = e;
  op->kind = kind;
  op->done = done;
  op->ud = ud;
  op->deadline = dl_now_ms() + e->command_timeout_ms;
  dl_timer_init(&op->timer, on_later, op);
  if ((op->next = e->aops) != NULL) e->aops->pprev = &op->next;
  op->pprev = &e->aops;
  e->aops = op;
  return op;
}

void dl_etcd_op_drop(dl_async *op) {
  if ((*op->pprev = op->next) != NULL) op->next->pprev = op->pprev;
  dl_timer_stop(op->e->env->loop, &op->timer);
  free(op->acq);
  dl_etcd_aren_free(op->ren);
  dl_etcd_fen_free(op->fen);
  free(op->lat);
  free(op->sem);
  dl_etcd_aqueue_free(op->aq);
  free(op->scan);
  free(op);
}

void dl_etcd_op_end(dl_async *op, int rc) {
  dl_done_fn done = op->done;
  void *ud = op->ud;
  dl_etcd_op_drop(op);
  done(ud, rc);
}

/* A result known before anything was sent: told from the loop's dispatch
 * (done never runs within the call that starts the operation). */
static void on_later(void *ud) {
  dl_async *op = ud;
  if (op->rc < 0) dl_seterr(op->e->env->err_owner, op->rc, "%s", op->msg);
  if (op->later)
    op->later(op, op->rc, NULL, 0);
  else
    dl_etcd_op_end(op, op->rc);
}

int dl_etcd_op_later(dl_async *op, int rc) {
  op->rc = rc;
  if (rc < 0)
    snprintf(op->msg, sizeof op->msg, "%s",
             dlock_client_errmsg(op->e->env->err_owner));
  dl_timer_init(&op->timer, on_later, op);
  if (dl_timer_start(op->e->env->loop, &op->timer, dl_now_ms()) != 0) {
    dl_etcd *e = op->e;
    dl_etcd_op_drop(op); /* not told: the caller is */
    return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  }
  return 0;
}

void dl_etcd_op_wake_at(dl_async *op, dl_timer_fn fn, int64_t at) {
  int rc = dl_etcd_op_timer(op, fn, at);
  if (rc != 0) dl_etcd_op_end(op, rc);
}

bool dl_etcd_op_ride(dl_async *op, dl_timer_fn fn, bool cancelled, bool wait,
                     int64_t deadline, int rc, dl_ride *rides) {
  int64_t pause =
      cancelled ? 0 : dl_etcd_ride_pause(op->e, wait, deadline, rc, rides);
  if (pause > 0) dl_etcd_op_wake_at(op, fn, dl_now_ms() + pause);
  return pause > 0;
}

/* op->later for a call made with a message: its fn told. */
static void later_pb(void *ud, int rc, json_object *o, int code) {
  dl_async *op = ud;
  json_object_put(o);
  op->later_pb(op, rc, NULL, code);
}

/* A call of op's that could not start (rc): fn, or pbfn, told from the
 * loop's dispatch (on_later). */
static int unstarted(dl_async *op, int rc, etcd_acall_fn fn,
                     etcd_acall_pb_fn pbfn) {
  op->later = pbfn ? later_pb : fn;
  op->later_pb = pbfn;
  return dl_etcd_op_later(op, rc);
}

int dl_etcd_op_ask(dl_async *op, const etcd_ask *k, etcd_acall_fn fn,
                   etcd_acall_pb_fn pbfn) {
  if (k->msg)
    fn = NULL;
  else
    pbfn = NULL;
  int rc = dl_etcd_acall_ask(op->e, k, op->deadline, fn, pbfn, op, &op->call);
  return rc == 0 ? 0 : unstarted(op, rc, fn, pbfn);
}

void dl_etcd_op_ask_next(dl_async *op, const etcd_ask *k, etcd_acall_fn fn,
                         etcd_acall_pb_fn pbfn, int told) {
  dl_done_fn done = op->done;
  void *dud = op->ud;
  op->deadline = dl_now_ms() + op->e->command_timeout_ms;
  int rc;
  if (k->body || k->msg)
    rc = dl_etcd_op_ask(op, k, fn, pbfn);
  else /* its body ran out of memory: as a call that cannot start */
    rc = unstarted(op, dl_seterr(op->e->err, DLOCK_ENOMEM, "out of memory"),
                   fn, NULL);
  if (rc != 0) done(dud, told ? told : DLOCK_ENOMEM);
}

int dl_etcd_op_delete_at(dl_async *op, const char *key, int64_t rev,
                         etcd_acall_pb_fn fn) {
  etcd_delete_txn t;
  dl_etcd_delete_txn(&t, key, rev);
  return dl_etcd_op_ask(op, &(etcd_ask){"/v3/kv/txn", NULL, &t.txn.base},
                        NULL, fn);
}

int dl_etcd_op_timer(dl_async *op, dl_timer_fn fn, int64_t at) {
  dl_timer_stop(op->e->env->loop, &op->timer);
  dl_timer_init(&op->timer, fn, op);
  if (dl_timer_start(op->e->env->loop, &op->timer, at) == 0) return 0;
  dl_etcd_acall_abort(op->call);
  op->call = NULL;
  return dl_seterr(op->e->err, DLOCK_ENOMEM, "out of memory");
}

/* dl_etcd_op_watch's timer: the pause after a stream's end over. */
static void on_watch_pause(void *ud) {
  dl_async *op = ud;
  op->waited(op, 1);
}

/* Its timer at `until`: the watch aborted, the time up. */
static void on_watch_until(void *ud) {
  dl_async *op = ud;
  dl_etcd_acall_abort(op->call);
  op->call = NULL;
  op->waited(op, 0);
}

/* The watch's end, its timer stopped: news (1) or its error told; a
 * stream's end (2) told as news after a pause. */
static void on_watch(void *ud, int rc, json_object *o, int code) {
  (void)o, (void)code;
  dl_async *op = ud;
  op->call = NULL;
  dl_timer_stop(op->e->env->loop, &op->timer);
  if (rc == 2) /* the stream ended (a member gone): again in a moment */
    rc = dl_etcd_op_timer(op, on_watch_pause, dl_now_ms() + 50);
  if (rc != 0) op->waited(op, rc);
}

void dl_etcd_op_watch(dl_async *op, const char *body, etcd_watch_on on,
                      int64_t until, etcd_op_wait_fn fn) {
  op->waited = fn;
  int rc = on == ETCD_ON_PUT
               ? dl_etcd_awatch_put(op->e, body, on_watch, op, &op->call)
               : dl_etcd_awatch(op->e, body, on == ETCD_ON_ANY, on_watch, op,
                                &op->call);
  if (rc == 0) rc = dl_etcd_op_timer(op, on_watch_until, until);
  if (rc != 0) fn(op, rc);
}

static void on_ping(void *ud, int rc, json_object *o, int code) {
  (void)code;
  dl_async *op = ud;
  op->call = NULL;
  json_object_put(o);
  dl_etcd_op_end(op, rc);
}

static int ping_async(dl_backend *b, dl_done_fn done, void *ud,
                      dl_async **out) {
  dl_etcd *e = (dl_etcd *)b;
  dl_async *op = dl_etcd_op_new(e, AOP_PING, done, ud);
  if (op == NULL) return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  int rc = dl_etcd_acall(e, "/v3/maintenance/status", "{}", op->deadline,
                         on_ping, op, &op->call);
  if (rc != 0) {
    dl_etcd_op_drop(op);
    return rc;
  }
  *out = op;
  return 0;
}

static void release_try(void *ud);

/* A fixed lease's revoke after the release: the release's result. */
static void on_revoked(void *ud, int rc, json_object *o, int code) {
  (void)rc, (void)code;
  dl_async *op = ud;
  op->call = NULL;
  json_object_put(o);
  dl_etcd_op_end(op, op->result);
}

static void on_deleted(void *ud, int rc, ProtobufCMessage *m, int code) {
  (void)code;
  dl_async *op = ud;
  op->call = NULL;
  if (rc == 0) rc = dl_etcd_delete_answer(m);
  if (dl_etcd_delete_again(&rc, &op->retried, op->deadline)) {
    op->later = NULL;
    dl_timer_init(&op->timer, release_try, op);
    if (dl_timer_start(op->e->env->loop, &op->timer, dl_now_ms() + 20) == 0)
      return;
  }
  etcd_hold *h = op->h;
  op->h = NULL;
  int64_t revoke;
  rc = release_end(op->e, op->l, h, rc, op->retried, &revoke);
  if (revoke == 0) {
    dl_etcd_op_end(op, rc);
    return;
  }
  char body[64];
  dl_etcd_lease_body(revoke, body, sizeof body);
  op->result = rc; /* told even if the revoke cannot start: the lease
                      ends with its TTL */
  dl_etcd_op_next(op, "/v3/lease/revoke", body, on_revoked, rc);
}

/* A try of the release's delete: 0, or DLOCK_ENOMEM (op freed, untold:
 * the hold handed back). */
static int release_send(dl_async *op) {
  dl_etcd *e = op->e;
  etcd_hold *h = op->h;
  int rc = dl_etcd_op_delete_at(op, h->key, h->rev, on_deleted);
  if (rc != 0) { /* not known to be deleted: the lease's revoke takes it */
    dl_etcd_orphan(e, h->key, h->rev, h->own_lease ? h->lease : 0);
    dl_etcd_hold_drop(e, h);
  }
  return rc;
}

static void release_try(void *ud) {
  dl_async *op = ud;
  dl_done_fn done = op->done;
  void *dud = op->ud;
  if (release_send(op) != 0) done(dud, DLOCK_ENOMEM);
}

static int release_async(dl_backend *b, const dl_lock_ref *l, int64_t lease_ms,
                         int count, dl_done_fn done, void *ud, dl_async **out) {
  (void)lease_ms;
  dl_etcd *e = (dl_etcd *)b;
  dl_async *op = dl_etcd_op_new(e, AOP_RELEASE, done, ud);
  if (op == NULL) return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  etcd_hold *h;
  int rc = dl_etcd_release_begin(e, l, count, &h);
  if (rc != 1) {
    if ((rc = dl_etcd_op_later(op, rc)) != 0) return rc;
    *out = op;
    return 0;
  }
  op->l = l;
  op->h = h;
  if ((rc = release_send(op)) != 0) return rc;
  *out = op;
  return 0;
}

/* ---- force release: a range, then a txn deleting the holders' keys ---- */
static int force_send(dl_async *op);

static void on_forced(void *ud, int rc, json_object *o, int code) {
  (void)code;
  dl_async *op = ud;
  op->call = NULL;
  if (rc == 0) {
    rc = dl_etcd_txn_succeeded(o);
    json_object_put(o);
    if (rc == 0 && ++op->attempt < ETCD_FORCE_TRIES) { /* a holder changed */
      dl_done_fn done = op->done;
      void *dud = op->ud;
      if ((rc = force_send(op)) != 0) done(dud, rc);
      return;
    }
    if (rc == 0) rc = dl_etcd_force_busy(op->e, op->l);
  }
  dl_etcd_op_end(op, rc);
}

static void on_range(void *ud, int rc, json_object *o, int code) {
  (void)code;
  dl_async *op = ud;
  op->call = NULL;
  char *body = NULL;
  if (rc == 0) rc = dl_etcd_force_txn(op->e, o, op->pfx, &body);
  if (rc <= 0) {
    dl_etcd_op_end(op, rc);
    return;
  }
  dl_etcd_op_next(op, "/v3/kv/txn", body, on_forced, 0);
  free(body);
}

/* The range of a try: 0, or DLOCK_ENOMEM (op freed, untold). */
static int force_send(dl_async *op) {
  char body[ETCD_RANGE_BODY_MAX];
  dl_etcd_range_under_body(op->pfx, 0, body, sizeof body);
  op->deadline = dl_now_ms() + op->e->command_timeout_ms;
  return dl_etcd_op_call(op, "/v3/kv/range", body, on_range);
}

static int force_async(dl_backend *b, const dl_lock_ref *l, dl_done_fn done,
                       void *ud, dl_async **out) {
  dl_etcd *e = (dl_etcd *)b;
  dl_async *op = dl_etcd_op_new(e, AOP_FORCE, done, ud);
  if (op == NULL) return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  op->l = l;
  snprintf(op->pfx, sizeof op->pfx, "%s%s/", e->prefix, l->key);
  int rc = force_send(op);
  if (rc == 0) *out = op;
  return rc;
}

/* ---- a lock query: a range, and for a TTL the lease's timetolive ---- */
static void on_ttl(void *ud, int rc, json_object *o, int code) {
  (void)code;
  dl_async *op = ud;
  op->call = NULL;
  if (rc == 0) *op->v = dl_etcd_ttl_answer(o);
  dl_etcd_op_end(op, rc);
}

static void on_query(void *ud, int rc, json_object *o, int code) {
  (void)code;
  dl_async *op = ud;
  op->call = NULL;
  int64_t lease =
      rc == 0 ? dl_etcd_query_answer(op->e, op->l, op->q, o, op->rev, op->v)
              : 0;
  if (lease == 0) {
    dl_etcd_op_end(op, rc);
    return;
  }
  char body[64];
  dl_etcd_ttl_body(lease, body, sizeof body);
  dl_etcd_op_next(op, "/v3/lease/timetolive", body, on_ttl, 0);
}

static int query_async(dl_backend *b, const dl_lock_ref *l, dl_lock_query q,
                       long long *v, dl_done_fn done, void *ud,
                       dl_async **out) {
  dl_etcd *e = (dl_etcd *)b;
  dl_async *op = dl_etcd_op_new(e, AOP_QUERY, done, ud);
  if (op == NULL) return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  op->l = l;
  op->q = q;
  op->v = v;
  *v = 0;
  char body[ETCD_RANGE_BODY_MAX];
  const char *path = dl_etcd_query_req(e, l, q, body, sizeof body, &op->rev);
  int rc = path ? dl_etcd_op_call(op, path, body, on_query)
                : dl_etcd_op_later(op, 0);
  if (rc == 0) *out = op;
  return rc;
}

/* ---- inspect: the range of the name's keys, then a semaphore's counts,
 * the latch's key, or the holder's lease's timetolive ---- */
static void on_latch(void *ud, int rc, json_object *o, int code) {
  (void)code;
  dl_async *op = ud;
  op->call = NULL;
  if (rc == 0) rc = dl_etcd_latch_inspect_answer(op->e, o, op->st);
  dl_etcd_op_end(op, rc);
}

static void on_holder_ttl(void *ud, int rc, json_object *o, int code) {
  (void)code;
  dl_async *op = ud;
  op->call = NULL;
  if (rc == 0) dl_etcd_inspect_ttl(o, op->st);
  dl_etcd_op_end(op, rc);
}

static void sem_step(dl_async *op);

static void on_sem(void *ud, int rc, json_object *o, int code) {
  (void)code;
  dl_async *op = ud;
  op->call = NULL;
  char total[ETCD_SEM_KEY], body[ETCD_SEM_INSPECT_BODY_MAX];
  if (rc == 0 && dl_etcd_sem_inspect_req(op->e, op->key, op->step, total, body,
                                         sizeof body))
    rc = dl_etcd_sem_inspect_answer(op->e, total, op->step, o, op->st);
  else
    json_object_put(o);
  if (rc == 1 && ++op->step < 2) {
    sem_step(op);
    return;
  }
  dl_etcd_op_end(op, rc < 0 ? rc : 0);
}

static void sem_step(dl_async *op) {
  char total[ETCD_SEM_KEY], body[ETCD_SEM_INSPECT_BODY_MAX];
  const char *path = dl_etcd_sem_inspect_req(op->e, op->key, op->step, total,
                                             body, sizeof body);
  if (path == NULL)
    dl_etcd_op_end(op, 0);
  else
    dl_etcd_op_next(op, path, body, on_sem, 0);
}

static void on_keys(void *ud, int rc, json_object *o, int code) {
  (void)code;
  dl_async *op = ud;
  op->call = NULL;
  int64_t lease = 0;
  etcd_inspect_next next =
      rc == 0 ? dl_etcd_inspect_answer(o, op->pfx, op->st, &lease)
              : ETCD_INSPECT_DONE;
  etcd_json j = {0};
  char body[64];
  switch (next) {
  case ETCD_INSPECT_SEM: sem_step(op); return;
  case ETCD_INSPECT_LATCH:
    if (!dl_etcd_latch_inspect_req(op->e, op->key, &j)) break;
    if (j.oom) {
      rc = dl_seterr(op->e->err, DLOCK_ENOMEM, "out of memory");
      dl_etcd_json_free(&j);
      break;
    }
    dl_etcd_op_next(op, "/v3/kv/txn", j.p, on_latch, 0);
    dl_etcd_json_free(&j);
    return;
  case ETCD_INSPECT_TTL:
    dl_etcd_ttl_body(lease, body, sizeof body);
    dl_etcd_op_next(op, "/v3/lease/timetolive", body, on_holder_ttl, 0);
    return;
  case ETCD_INSPECT_DONE: break;
  }
  dl_etcd_op_end(op, rc);
}

static int inspect_async(dl_backend *b, const char *key, dlock_lock_state *st,
                         dl_done_fn done, void *ud, dl_async **out) {
  dl_etcd *e = (dl_etcd *)b;
  dl_async *op = dl_etcd_op_new(e, AOP_INSPECT, done, ud);
  if (op == NULL) return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  op->key = key;
  op->st = st;
  char body[ETCD_RANGE_BODY_MAX];
  dl_etcd_inspect_req(e, key, st, op->pfx, body, sizeof body);
  int rc = dl_etcd_op_call(op, "/v3/kv/range", body, on_keys);
  if (rc == 0) *out = op;
  return rc;
}

/* ---- scan: the pages of keys under the prefix, one call each ---- */
static void on_page(void *ud, int rc, json_object *o, int code) {
  (void)code;
  dl_async *op = ud;
  op->call = NULL;
  if (rc != 0) {
    json_object_put(o);
  } else if (dl_etcd_scan_page(op->scan, o)) {
    char body[ETCD_SCAN_BODY_MAX];
    dl_etcd_scan_body(op->scan, body, sizeof body);
    dl_etcd_op_next(op, "/v3/kv/range", body, on_page, 0);
    return;
  }
  dl_etcd_op_end(op, rc != 0 ? rc : op->scan->passed);
}

static int scan_async(dl_backend *b, const char *match, size_t prefix_len,
                      dlock_scan_cb cb, void *cb_ud, dl_done_fn done, void *ud,
                      dl_async **out) {
  dl_etcd *e = (dl_etcd *)b;
  dl_async *op = dl_etcd_op_new(e, AOP_SCAN, done, ud);
  if (op && (op->scan = malloc(sizeof *op->scan)) == NULL) {
    dl_etcd_op_drop(op);
    op = NULL;
  }
  if (op == NULL) return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  dl_etcd_scan_begin(e, match, prefix_len, cb, cb_ud, op->scan);
  char body[ETCD_SCAN_BODY_MAX];
  dl_etcd_scan_body(op->scan, body, sizeof body);
  int rc = dl_etcd_op_call(op, "/v3/kv/range", body, on_page);
  if (rc == 0) *out = op;
  return rc;
}

/* A request in flight is answered (its result kept), and a release's
 * retries end at its deadline; an acquire's, a latch await's, a
 * semaphore acquire's or a queue poll's wait ends now. */
static void own_cancel(dl_backend *b, dl_async *op) {
  (void)b;
  if (op->kind == AOP_ACQUIRE) dl_etcd_acquire_cancel(op);
  if (op->kind == AOP_LATCH) dl_etcd_latch_cancel(op);
  if (op->kind == AOP_SEM) dl_etcd_sem_cancel(op);
  if (op->kind == AOP_QUEUE) dl_etcd_queue_cancel(op);
}

/* Ends e's operations, but for a plain poll's take or give-back in
 * flight unless `takes`. */
static void aops_end(dl_etcd *e, bool takes) {
  for (dl_async *op = e->aops, *next; op; op = next) {
    next = op->next;
    if (!takes && dl_etcd_queue_taking(op)) continue;
    if (op->kind == AOP_ACQUIRE) {
      dl_etcd_acquire_close(op); /* ended: the list changed */
      next = e->aops;
      continue;
    }
    dl_etcd_asess_close(op);
    dl_etcd_acall_abort(op->call);
    op->call = NULL;
    if (op->kind == AOP_QUEUE && dl_etcd_queue_close(op)) {
      next = e->aops;
      continue;
    }
    if (op->h) { /* not known to be deleted: the lease's revoke takes it */
      dl_etcd_orphan(e, op->h->key, op->h->rev,
                     op->h->own_lease ? op->h->lease : 0);
      dl_etcd_hold_drop(e, op->h);
    }
    dl_etcd_op_end(
        op, dl_seterr(e->env->err_owner, DLOCK_ECLOSED, "the client closed"));
    next = e->aops;
  }
}

void dl_etcd_aops_close(dl_etcd *e) {
  /* A take's answer says whether its value left the queue: waited for
   * (and the value put back) with nothing else on the multi handle, so
   * that no other operation's step runs within the close. */
  aops_end(e, false);
  dl_etcd_queues_drain(e);
  aops_end(e, true);
}

const dl_backend_ops dl_etcd_aops = {
    .name = "etcd",
    .lock_acquire_async = dl_etcd_acquire_async,
    .lock_release_async = release_async,
    .lock_force_release_async = force_async,
    .lock_query_async = query_async,
    .ping_async = ping_async,
    .renew_async = dl_etcd_renew_async,
    .fence_async = dl_etcd_fence_async,
    .inspect_async = inspect_async,
    .sem_acquire_async = dl_etcd_sem_acquire_async,
    .permit_acquire_async = dl_etcd_permit_acquire_async,
    .sync_update_async = dl_etcd_sync_update_async,
    .latch_await_async = dl_etcd_latch_await_async,
    .queue_async = dl_etcd_queue_async,
    .scan_async = scan_async,
    .cancel = own_cancel,
};
