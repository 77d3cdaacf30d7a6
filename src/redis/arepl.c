/* arepl.c: replica acknowledgement on an event loop (link.c's
 * dl_conn_replicate and dl_waitpool, on the loop): a marker PUBLISH and
 * WAIT queued together on a connection of a pool of their own. WAIT
 * blocks the connection it is sent on, so on the link's one connection it
 * held up every request behind it (another lock's acquire, a ping) for as
 * long as a stalled replica made it wait. */
#include "redis.h"

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

/* One of a's requests ended: once none is left, its connection is free
 * for another and a goes. */
static void req_ended(dl_arepl *a) {
  if (--a->reqs > 0) return;
  a->pool->busy[a->k]--;
  free(a);
}

static void on_mark(void *ud, int rc, redisReply *reply) {
  dl_arepl *a = ud;
  a->mark = NULL;
  a->mark_rc = rc;
  if (reply) freeReplyObject(reply);
  req_ended(a);
}

static void on_wait(void *ud, int rc, redisReply *reply) {
  dl_arepl *a = ud;
  dl_count_fn fn = a->fn;
  void *fud = a->ud;
  long long got = -1;
  if (fn) {
    /* Replies come in order on one connection: the marker's came first. */
    if (rc == 0) rc = a->mark_rc;
    if (rc == 0) rc = dl_reply_check(a->owner, &reply);
    if (rc == 0 && reply->type == REDIS_REPLY_INTEGER) got = reply->integer;
    if (rc == 0 && got < 0)
      rc = dl_seterr(a->owner, DLOCK_EPROTO, "unexpected reply to WAIT");
  }
  if (reply) freeReplyObject(reply);
  a->fn = NULL;
  req_ended(a);
  if (fn) fn(fud, rc, rc == 0 ? (got > 1000000 ? 1000000 : (int)got) : 0);
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
  char ns[16], ts[16]; /* copied by the sends */
  snprintf(ns, sizeof ns, "%d", n);
  snprintf(ts, sizeof ts, "%d", timeout_ms);
  const char *mark[3] = {"PUBLISH", DL_REPLICATE_CHANNEL, ""};
  const char *wait[3] = {"WAIT", ns, ts};
  a->mark = dl_aconn_send(p->c[k], 3, mark, NULL, deadline, on_mark, a, err);
  if (a->mark == NULL) {
    free(a);
    return NULL;
  }
  if (dl_aconn_send(p->c[k], 3, wait, NULL, deadline, on_wait, a, err) ==
      NULL) {
    dl_areq_cancel(a->mark);
    free(a);
    return NULL;
  }
  a->reqs = 2;
  p->busy[k]++;
  return a;
}

/* The WAIT stays on its connection until it ends (a connection blocked by
 * it is not given to another meanwhile); fn just never runs. */
void dl_arepl_cancel(dl_arepl *a) {
  if (a) a->fn = NULL;
}
