/* renew.c: the Redis backend's renewal of holds (the watchdog's rounds,
 * both drivers) and replica acknowledgement (WAIT after a write). */
#include "ops.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RENEW_BATCH 100 /* holds per renewal script */

/* Renewal by lock_renew.lua: up to RENEW_BATCH holds a script, every
 * script of the round pipelined. A permit is renewed on its semaphore's
 * timeout set, where its lease is. On a cluster each script's holds share
 * a slot (the items grouped by slot, as Redisson's watchdog does). */
typedef struct renew_job {
  dl_redis *r;
  int n, nb;
  dl_renew_item *items;
  char lease[DL_INT_BUF];
  int64_t valid;
  const char **keys, **args;
  char *sets; /* the timeout sets' names of permits */
  int *order; /* the items in the scripts' order */
  int *slot;  /* by_slot links: each item's slot */
  int *start; /* where script b's items begin in order */
  int *nkeys, *nargs;
  const char *const **kp, *const **ap;
  redisReply **replies;
  int *errs;
} renew_job;

static void job_free(renew_job *j) {
  for (int b = 0; b < j->nb && j->replies; b++)
    if (j->replies[b]) freeReplyObject(j->replies[b]);
  free(j->keys);
  free(j->args);
  free(j->sets);
  free(j->order);
  free(j->slot);
  free(j->start);
  free(j->nkeys);
  free(j->nargs);
  free(j->kp);
  free(j->ap);
  free(j->replies);
  free(j->errs);
}

static _Thread_local const int *sort_slots;

static int by_slot(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  int sx = sort_slots[x], sy = sort_slots[y];
  return sx != sy ? (sx > sy) - (sx < sy) : (x > y) - (x < y);
}

/* Builds the round's scripts (n > 0). Returns 0 or DLOCK_ENOMEM. */
static int job_prepare(renew_job *j, dl_redis *r, int64_t lease_ms, int n,
                       dl_renew_item *items) {
  memset(j, 0, sizeof *j);
  j->r = r;
  j->n = n;
  j->items = items;
  bool slotted = r->link->ops->by_slot;
  dl_fmt_ll(j->lease, lease_ms);
  /* At most one script per item (each its own slot). */
  j->keys = malloc((size_t)n * sizeof *j->keys);
  j->args = malloc((size_t)(2 * n) * sizeof *j->args);
  j->order = malloc((size_t)n * sizeof *j->order);
  j->start = malloc((size_t)n * sizeof *j->start);
  j->nkeys = malloc((size_t)n * sizeof *j->nkeys);
  j->nargs = malloc((size_t)n * sizeof *j->nargs);
  j->kp = malloc((size_t)n * sizeof *j->kp);
  j->ap = malloc((size_t)n * sizeof *j->ap);
  j->replies = calloc((size_t)n, sizeof *j->replies);
  j->errs = calloc((size_t)n, sizeof *j->errs);
  if (slotted) j->slot = malloc((size_t)n * sizeof *j->slot);
  int permits = 0;
  for (int i = 0; i < n; i++) {
    items[i].result = DLOCK_EPROTO;
    permits += items[i].permit;
  }
  if (permits) j->sets = malloc((size_t)permits * DL_DERIVED_MAX);
  if (!j->keys || !j->args || !j->order || !j->start || !j->nkeys ||
      !j->nargs || !j->kp || !j->ap || !j->replies || !j->errs ||
      (slotted && !j->slot) || (permits && !j->sets))
    return dl_seterr(r->env.err_owner, DLOCK_ENOMEM, "out of memory");
  char *set = j->sets;
  for (int i = 0; i < n; i++) {
    j->order[i] = i;
    j->keys[i] = items[i].key;
    if (items[i].permit) {
      dl_derived_suffix_into(set, DL_DERIVED_MAX, items[i].key, "timeout");
      j->keys[i] = set;
      set += DL_DERIVED_MAX;
    }
    if (slotted) j->slot[i] = dl_key_slot(j->keys[i], strlen(j->keys[i]));
  }
  if (slotted) {
    sort_slots = j->slot;
    qsort(j->order, (size_t)n, sizeof *j->order, by_slot);
  }
  /* keys[] is in item order; the scripts take them in order[]'s. */
  const char **sorted = malloc((size_t)n * sizeof *sorted);
  if (sorted == NULL)
    return dl_seterr(r->env.err_owner, DLOCK_ENOMEM, "out of memory");
  for (int pos = 0; pos < n; pos++) sorted[pos] = j->keys[j->order[pos]];
  free(j->keys);
  j->keys = sorted;
  int nb = 0, a = 0;
  for (int pos = 0; pos < n; pos++) {
    int it = j->order[pos];
    bool cut = pos == 0 || j->nkeys[nb - 1] == RENEW_BATCH ||
               (slotted && j->slot[it] != j->slot[j->order[pos - 1]]);
    if (cut) {
      j->start[nb] = pos;
      j->nkeys[nb] = 0;
      j->nargs[nb] = 1;
      j->kp[nb] = j->keys + pos;
      j->ap[nb] = j->args + a;
      j->args[a++] = j->lease;
      nb++;
    }
    j->nkeys[nb - 1]++;
    j->nargs[nb - 1]++;
    j->args[a++] = items[it].owner;
  }
  j->nb = nb;
  j->valid = dl_validity(dl_now_ms(), lease_ms);
  return 0;
}

/* Reads the round's replies into the items: 0, or the first error. */
static int job_parse(renew_job *j, int failed) {
  for (int b = 0; b < j->nb; b++) {
    redisReply *rep = j->replies[b];
    int err = j->errs[b];
    const int *its = j->order + j->start[b];
    if (err != 0 || rep == NULL || rep->type != REDIS_REPLY_ARRAY ||
        (int)rep->elements != j->nkeys[b]) {
      if (failed == 0) failed = err ? err : DLOCK_EPROTO;
      for (int k = 0; k < j->nkeys[b]; k++)
        j->items[its[k]].result = err ? err : DLOCK_EPROTO;
      continue; /* unknown: tried again soon, the lease still runs */
    }
    for (int k = 0; k < j->nkeys[b]; k++) {
      dl_renew_item *it = &j->items[its[k]];
      redisReply *e = rep->element[k];
      if (e->type != REDIS_REPLY_INTEGER) {
        if (failed == 0) failed = DLOCK_EPROTO;
        continue;
      }
      it->result = e->integer == 1;
      it->valid_until = j->valid;
    }
  }
  return failed;
}

/* DLOCK_REPLICAS_AUTO's shortfall (its detail recorded by the link): the
 * step's name before it, `then` after, the code's text once. */
static int auto_shortfall(dl_redis *R, const char *what, const char *then) {
  char was[300];
  const char *m = dlock_client_errmsg(R->env.err_owner);
  const char *text = dlock_strerror(DLOCK_ENOTACKED);
  size_t n = strlen(text);
  if (strncmp(m, text, n) == 0 && m[n] == ':' && m[n + 1] == ' ') m += n + 2;
  snprintf(was, sizeof was, "%s", m);
  return dl_seterr(R->env.err_owner, DLOCK_ENOTACKED, "%s: %s%s", what, was,
                   then);
}

int dl_redis_replicate(dl_redis *R, const char *const *keys, int nkeys,
                       const char *what, const char *then) {
  if (R->min_replicas == 0) return 0;
  const dl_rlink_ops *ops = R->link->ops;
  if (ops->replicate == NULL)
    return dl_seterr(R->env.err_owner, DLOCK_ENOTSUP,
                     "replica "
                     "acknowledgement is not supported by this link");
  int n = ops->replicate(R->link, keys, nkeys, R->min_replicas,
                         R->replicas_timeout_ms);
  if (n == DLOCK_ENOTACKED) return auto_shortfall(R, what, then);
  if (n < 0) return n;
  if (n < R->min_replicas)
    return dl_seterr(R->env.err_owner, DLOCK_ENOTACKED,
                     "%s: %d of %d "
                     "replicas acknowledged within %d ms%s",
                     what, n, R->min_replicas, R->replicas_timeout_ms, then);
  return 0;
}

int dl_redis_replicate_start(dl_redis *R, const char *const *keys, int nkeys,
                             dl_pend *p) {
  const dl_rlink_ops *ops = R->link->ops;
  p->reply = NULL;
  p->acked = 0;
  p->step = DL_STEP_REPLICATE;
  p->pending = false;
  if (ops->replicate_start == NULL) { /* a blocking link: at once */
    p->rc = ops->replicate
                ? ops->replicate(R->link, keys, nkeys, R->min_replicas,
                                 R->replicas_timeout_ms)
                : dl_seterr(R->env.err_owner, DLOCK_ENOTSUP,
                            "replica acknowledgement is not supported by "
                            "this link");
    if (p->rc >= 0) p->acked = p->rc, p->rc = 0;
    return 0;
  }
  int rc = ops->replicate_start(R->link, p, keys, nkeys, R->min_replicas,
                                R->replicas_timeout_ms);
  p->pending = rc == DL_PENDING;
  return rc;
}

int dl_redis_replicate_result(dl_redis *R, dl_pend *p, const char *what,
                              const char *then) {
  if (p->rc == DLOCK_ENOTACKED) return auto_shortfall(R, what, then);
  if (p->rc != 0) return p->rc;
  if (p->acked < R->min_replicas)
    return dl_seterr(R->env.err_owner, DLOCK_ENOTACKED,
                     "%s: %d of %d replicas acknowledged within %d ms%s", what,
                     p->acked, R->min_replicas, R->replicas_timeout_ms, then);
  return 0;
}

int dl_redis_renew(dl_backend *base, int64_t deadline, int64_t lease_ms, int n,
                   dl_renew_item *items, int *calls) {
  dl_redis *r = (dl_redis *)base;
  *calls = 0;
  if (n <= 0) return 0;
  renew_job j;
  int failed = job_prepare(&j, r, lease_ms, n, items);
  if (failed == 0) {
    failed = r->link->ops->eval_many(r->link, deadline, j.nb,
                                     DL_SCRIPT_LOCK_RENEW, j.nkeys, j.kp,
                                     j.nargs, j.ap, j.replies, j.errs);
    *calls = j.nb;
    failed = job_parse(&j, failed);
  }
  job_free(&j);
  /* The renewed leases reach the replicas, as far as WAIT can tell. On a
   * shortfall the holds are renewed on this master only: a failover now
   * would promote a replica whose copies run out at the last acknowledged
   * renewal's lease. So their validity is not extended (the items are
   * unknown, tried again soon): a holder whose renewals stay unacknowledged
   * is told of the loss when that validity ends, before those copies can
   * expire, rather than believing it holds a lock the new master gave
   * away (issue 19: a failover with a 3 s lease showed it). */
  if (failed == 0 && lease_ms > 0) {
    /* The masters of the renewed holds' keys (on a cluster). */
    const char *small[16],
        **keys = n <= 16 ? small : malloc(sizeof *keys * (size_t)n);
    int nkeys = 0;
    if (keys)
      for (int i = 0; i < n; i++)
        keys[nkeys++] = items[i].key;
    int ack = dl_redis_replicate(r, keys, nkeys, "renewal",
                                 ": the holds' validity is not extended");
    if (keys != small) free(keys);
    if (ack != 0) {
      for (int i = 0; i < n; i++)
        if (items[i].result == 1) items[i].result = ack;
      failed = ack;
    }
  }
  return failed;
}

/* The event-loop driver's renewal: the round's scripts sent at once (the
 * link pipelines them), the items filled in when the last is answered. */
typedef struct renew_async {
  dl_shell sh;
  renew_job j;
  int left; /* scripts not answered yet */
  dl_pend *p;
  /* Replica acknowledgement: the WAIT after the scripts (as the blocking
   * renewal's), then its verdict on the items. */
  dl_pend wait;
  bool waiting;
  int64_t lease_ms;
  int n;
  dl_renew_item *items;
} renew_async;

/* The WAIT's verdict: a shortfall leaves the renewed holds unknown (their
 * validity not extended), as in dl_redis_renew. */
static int renew_acked(renew_async *x) {
  int ack = dl_redis_replicate_result(x->sh.head.R, &x->wait, "renewal",
                                      ": the holds' validity is not extended");
  if (ack == 0) return 0;
  for (int i = 0; i < x->n; i++)
    if (x->items[i].result == 1) x->items[i].result = ack;
  return ack;
}

static int renew_async_step(dl_shell *sh) {
  renew_async *x = (renew_async *)sh;
  if (x->waiting) return renew_acked(x);
  if (--x->left > 0) return DL_PENDING;
  for (int b = 0; b < x->j.nb; b++) {
    x->j.errs[b] = x->p[b].rc;
    x->j.replies[b] = x->p[b].reply;
    x->p[b].reply = NULL;
  }
  int rc = job_parse(&x->j, 0);
  job_free(&x->j);
  dl_redis *R = sh->head.R;
  if (rc != 0 || x->lease_ms <= 0 || R->min_replicas == 0) return rc;
  x->waiting = true;
  /* The masters of the renewed holds' keys (on a cluster). */
  const char *small[16],
      **keys = x->n <= 16 ? small : malloc(sizeof *keys * (size_t)x->n);
  int nkeys = 0;
  if (keys)
    for (int i = 0; i < x->n; i++)
      keys[nkeys++] = x->items[i].key;
  rc = dl_redis_replicate_start(R, keys, nkeys, &x->wait);
  if (keys != small) free(keys);
  if (rc == DL_PENDING) return DL_PENDING;
  return renew_acked(x);
}

/* The steps go last: the shell may still use one to deliver the result. */
static void renew_async_finish(dl_shell *sh, int *rc) {
  (void)rc;
  free(((renew_async *)sh)->p);
}

int dl_redis_renew_async(dl_backend *base, int64_t deadline, int64_t lease_ms,
                         int n, dl_renew_item *items, int *calls,
                         dl_done_fn done, void *ud, dl_async **op) {
  dl_redis *r = (dl_redis *)base;
  *op = NULL;
  *calls = 0;
  int rc = dl_redis_driver_check(r, true);
  if (rc != 0) return rc;
  renew_async *x = calloc(1, sizeof *x);
  if (x == NULL)
    return dl_seterr(r->env.err_owner, DLOCK_ENOMEM, "out of memory");
  rc = n > 0 ? job_prepare(&x->j, r, lease_ms, n, items) : 0;
  if (rc == 0 && n > 0 &&
      (x->p = calloc((size_t)x->j.nb, sizeof *x->p)) == NULL)
    rc = dl_seterr(r->env.err_owner, DLOCK_ENOMEM, "out of memory");
  if (rc != 0 || n <= 0) {
    job_free(&x->j);
    free(x);
    return rc ? rc : DLOCK_EINVAL;
  }
  dl_shell_init(&x->sh, r, done, ud, renew_async_step, &x->p[0]);
  x->sh.finish = renew_async_finish;
  dl_shell_bind(&x->sh, &x->wait);
  x->lease_ms = lease_ms;
  x->n = n;
  x->items = items;
  /* One for the starts, one per script answered later: a script refused
   * at once (the link down, in its reconnect backoff) is answered now. */
  x->left = 1;
  for (int b = 0; b < x->j.nb; b++) {
    if (b > 0) dl_shell_bind(&x->sh, &x->p[b]);
    if (dl_redis_step_eval(r, &x->p[b], deadline, DL_SCRIPT_LOCK_RENEW,
                           x->j.nkeys[b], x->j.kp[b], x->j.nargs[b],
                           x->j.ap[b]) == DL_PENDING)
      x->left++;
  }
  *calls = x->j.nb;
  return dl_shell_start(&x->sh, renew_async_step(&x->sh), op);
}
