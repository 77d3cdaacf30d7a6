/* arepl.c: replica acknowledgement on an event loop (single.c's
 * dl_conn_replicate and dl_waitpool, on the loop): a marker PUBLISH and
 * WAIT queued together on a connection of a pool of their own, after ROLE
 * there for DLOCK_REPLICAS_AUTO. WAIT
 * blocks the connection it is sent on, so on the link's one connection it
 * held up every request behind it (another lock's acquire, a ping) for as
 * long as a stalled replica made it wait. */
#include "conns.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>

/* Connections in a pool at most: more acknowledgements at once queue
 * behind the others, on the connection with the fewest. */
#define POOL_MAX 16

struct dl_awaitpool {
  dl_loop *lp;
  const dl_conn_config *cfg;
  bool closing;
  int n;
  dl_aconn *c[POOL_MAX];
  int busy[POOL_MAX]; /* acknowledgements with a request on c[i] */
};

struct dl_arepl {
  dl_awaitpool *pool;
  int k;         /* on pool->c[k] */
  int reqs;      /* its requests not ended yet */
  dl_areq *mark; /* until its reply */
  int mark_rc;
  bool auto_n; /* DLOCK_REPLICAS_AUTO: n from ROLE */
  int n, timeout_ms;
  int64_t deadline;
  const struct dlock_client *owner;
  dl_count_fn fn; /* NULL: cancelled (its replies still come) */
  void *ud;
};

int dl_awaitpool_new(dl_loop *lp, const dl_conn_config *cfg,
                     dl_awaitpool **out) {
  *out = calloc(1, sizeof **out);
  if (*out == NULL) return DLOCK_ENOMEM;
  (*out)->lp = lp;
  (*out)->cfg = cfg;
  return 0;
}

void dl_awaitpool_free(dl_awaitpool *p) {
  if (p == NULL) return;
  p->closing = true;
  /* Each ends its requests now (their callbacks run; p is still here). */
  for (int i = 0; i < p->n; i++)
    dl_aconn_free(p->c[i]);
  free(p);
}

/* Once a has its result and none of its requests is left, its
 * connection is free for another and a goes. */
static void maybe_free(dl_arepl *a) {
  if (a->reqs > 0 || a->fn != NULL) return;
  a->pool->busy[a->k]--;
  free(a);
}

/* a's result: fn runs (unless cancelled), a goes when it may. */
static void deliver(dl_arepl *a, int rc, int count) {
  dl_count_fn fn = a->fn;
  void *ud = a->ud;
  a->fn = NULL;
  maybe_free(a);
  if (fn) fn(ud, rc, count);
}

static void on_mark(void *ud, int rc, redisReply *reply) {
  dl_arepl *a = ud;
  a->mark = NULL;
  a->mark_rc = rc;
  if (reply) freeReplyObject(reply);
  a->reqs--;
  maybe_free(a);
}

static void on_wait(void *ud, int rc, redisReply *reply) {
  dl_arepl *a = ud;
  a->reqs--;
  long long got = -1;
  if (a->fn) {
    /* Replies come in order on one connection: the marker's came first. */
    if (rc == 0) rc = a->mark_rc;
    if (rc == 0) rc = dl_reply_check(a->owner, &reply);
    if (rc == 0 && reply->type == REDIS_REPLY_INTEGER) got = reply->integer;
    if (rc == 0 && got < 0)
      rc = dl_seterr(a->owner, DLOCK_EPROTO, "unexpected reply to WAIT");
  }
  if (reply) freeReplyObject(reply);
  int count = rc == 0 ? (got > 1000000 ? 1000000 : (int)got) : 0;
  if (rc == 0 && a->fn && a->auto_n && count < a->n) /* short of them all */
    rc = dl_auto_shortfall(a->owner, count, a->n, a->timeout_ms);
  deliver(a, rc, rc == 0 ? count : 0);
}

/* The marker and WAIT a->n: 0, or a code (nothing queued). */
static int send_wait(dl_arepl *a) {
  dl_aconn *c = a->pool->c[a->k];
  char ns[16], ts[16]; /* copied by the sends */
  snprintf(ns, sizeof ns, "%d", a->n);
  snprintf(ts, sizeof ts, "%d", a->timeout_ms);
  const char *mark[3] = {"PUBLISH", DL_REPLICATE_CHANNEL, ""};
  const char *wait[3] = {"WAIT", ns, ts};
  int err = 0;
  a->mark = dl_aconn_send(c, 3, mark, NULL, a->deadline, on_mark, a, &err);
  if (a->mark == NULL) return err;
  if (dl_aconn_send(c, 3, wait, NULL, a->deadline, on_wait, a, &err) == NULL) {
    dl_areq_cancel(a->mark);
    a->mark = NULL;
    return err;
  }
  a->reqs += 2;
  return 0;
}

/* DLOCK_REPLICAS_AUTO: as many as the master has now; none, no WAIT. */
static void on_role(void *ud, int rc, redisReply *reply) {
  dl_arepl *a = ud;
  a->reqs--;
  if (a->fn == NULL) {
    if (reply) freeReplyObject(reply);
    maybe_free(a);
    return;
  }
  int m = rc == 0 ? dl_role_replicas(a->owner, reply) : rc;
  if (m > 0) {
    a->n = m;
    m = send_wait(a);
    if (m == 0) return;
  }
  deliver(a, m, 0);
}

/* The connection for the next acknowledgement: an idle one, a new one,
 * or (POOL_MAX busy) the one with the fewest. -1 out of memory. */
static int pick(dl_awaitpool *p) {
  int best = -1;
  for (int i = 0; i < p->n; i++) {
    if (p->busy[i] == 0) return i;
    if (best < 0 || p->busy[i] < p->busy[best]) best = i;
  }
  if (p->n < POOL_MAX && dl_aconn_new(p->lp, p->cfg, &p->c[p->n]) == 0) {
    p->busy[p->n] = 0;
    return p->n++;
  }
  return best;
}

dl_arepl *dl_awaitpool_replicate(dl_awaitpool *p, int n, int timeout_ms,
                                 int64_t deadline,
                                 const struct dlock_client *owner,
                                 dl_count_fn fn, void *ud, int *err) {
  if (p->closing) {
    *err = DLOCK_ECLOSED;
    return NULL;
  }
  dl_arepl *a = calloc(1, sizeof *a);
  int k = a ? pick(p) : -1;
  if (k < 0) {
    free(a);
    *err = dl_seterr(owner, DLOCK_ENOMEM, "out of memory");
    return NULL;
  }
  a->pool = p;
  a->k = k;
  a->owner = owner;
  a->fn = fn;
  a->ud = ud;
  a->auto_n = n == DLOCK_REPLICAS_AUTO;
  a->n = n;
  a->timeout_ms = timeout_ms;
  a->deadline = deadline;
  if (a->auto_n) {
    const char *role[1] = {"ROLE"};
    if (dl_aconn_send(p->c[k], 1, role, NULL, deadline, on_role, a, err))
      a->reqs = 1;
  } else {
    *err = send_wait(a);
  }
  if (a->reqs == 0) {
    free(a);
    return NULL;
  }
  p->busy[k]++;
  return a;
}

/* The WAIT stays on its connection until it ends (a connection blocked by
 * it is not given to another meanwhile); fn just never runs. */
void dl_arepl_cancel(dl_arepl *a) {
  if (a) a->fn = NULL;
}
