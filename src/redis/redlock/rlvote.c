/* rlvote.c: how a Redlock round's answers decide it (redlock.c's
 * operation asks after each answer): the quorum for each kind, whether
 * the answers still to come could change the result, and the errors,
 * named by server. */
#include "redlock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Keeps part i's detail of its error o->rc[i] (recorded under its tag),
 * without the code's text. */
void dl_rl_keep_error(rl_op *o, int i) {
  const char *why = dlock_client_errmsg(
      (const struct dlock_client *)(const void *)&o->B->tag[i]);
  const char *text = dlock_strerror(o->rc[i] < 0 ? o->rc[i] : DLOCK_EPROTO);
  size_t tl = strlen(text);
  if (strncmp(why, text, tl) == 0 && why[tl] == ':' && why[tl + 1] == ' ')
    why += tl + 2;
  snprintf(o->emsg[i], sizeof o->emsg[i], "%s", *why ? why : text);
}

/* Part i's detail, named by its server unless it names it already. */
static const char *named(const rl_op *o, int i, char *buf, size_t size) {
  const char *name = o->B->name[i], *why = o->emsg[i];
  size_t nl = strlen(name);
  if (strncmp(why, name, nl) == 0 && why[nl] == ':') return why;
  snprintf(buf, size, "%s: %s", name, why);
  return buf;
}

/* Part i's error o->rc[i] as the result, its detail the client's. */
int dl_rl_part_error(rl_op *o, int i) {
  char buf[256];
  return dl_seterr(o->B->env.err_owner, o->rc[i], "%s",
                   named(o, i, buf, sizeof buf));
}

/* The first part whose answer is rc, or -1. */
static int part_with(const rl_op *o, int rc) {
  for (int i = 0; i < o->B->n; i++)
    if (o->rc[i] == rc) return i;
  return -1;
}

/* Makes B's largest token taken at least token. */
void dl_rl_raise_last(redlock *B, uint64_t token) {
  uint64_t last = atomic_load_explicit(&B->last_token, memory_order_relaxed);
  while (token > last && !atomic_compare_exchange_weak_explicit(
                             &B->last_token, &last, token, memory_order_relaxed,
                             memory_order_relaxed)) {
  }
}

static int first_error(const rl_op *o) {
  for (int i = 0; i < o->B->n; i++)
    if (o->rc[i] < 0) return o->rc[i];
  return DLOCK_EPROTO;
}

/* Whether rc is a server's refusal: an answer, which asking again would
 * not change (not a lost connection, a timeout, a busy server). */
static bool refusal(int rc) {
  return rc == DLOCK_EWRONGTYPE || rc == DLOCK_ENOPERM || rc == DLOCK_EAUTH ||
         rc == DLOCK_EOOM || rc == DLOCK_ERANGE || rc == DLOCK_EDEADLK ||
         rc == DLOCK_ENOTOWNER;
}

/* Whether part i's error may pass when the acquire tries again: a lost or
 * refused connection, no answer in time, a demoted master (READONLY), or
 * a server error that says it passes (LOADING, BUSY, MASTERDOWN,
 * TRYAGAIN, CLUSTERDOWN), as redis:// rides them out. Anything else (a
 * refusal, a wrong password, "ERR value is not an integer or out of
 * range", NOREPLICAS) is the same answer next time: the wait ends. */
static bool mendable(const rl_op *o, int i) {
  int rc = o->rc[i];
  if (rc == DLOCK_ECONNECT || rc == DLOCK_ECONNLOST || rc == DLOCK_ETIMEDOUT ||
      rc == DLOCK_EREADONLY)
    return true;
  if (rc != DLOCK_ESERVER) return false;
  const char *m = o->emsg[i];
  return strstr(m, "LOADING") || strstr(m, "BUSY") || strstr(m, "MASTERDOWN") ||
         strstr(m, "TRYAGAIN") || strstr(m, "CLUSTERDOWN");
}

/* The refusal a quorum of servers answered alike (*count of them, the
 * first part *first), or 0. */
static int quorum_refusal(const rl_op *o, int *first, int *count) {
  for (int i = 0; i < o->B->n; i++) {
    if (!refusal(o->rc[i])) continue;
    int same = 0;
    for (int j = i; j < o->B->n; j++)
      same += o->rc[j] == o->rc[i];
    if (same >= o->B->quorum) {
      *first = i;
      *count = same;
      return o->rc[i];
    }
  }
  return 0;
}

int dl_rl_refused(const rl_op *o) {
  int first, count;
  return quorum_refusal(o, &first, &count);
}

/* Too few servers answered: names every server that did not and what it
 * said, into o->qmsg ("1 of 3 servers answered (a quorum is 2); ..."); a
 * refusal that a quorum answered alike, by what they said ("WRONGTYPE h:
 * not a dlock lock: hash (2 of 3 servers)"). */
static void quorum_msg(rl_op *o) {
  redlock *B = o->B;
  int first, same;
  if (quorum_refusal(o, &first, &same)) {
    snprintf(o->qmsg, sizeof o->qmsg, "%s (%d of %d servers)", o->emsg[first],
             same, B->n);
    return;
  }
  /* A refusal is an answer too (listed below with what it said). */
  int answered = 0;
  for (int i = 0; i < B->n; i++)
    answered += (o->rc[i] >= 0 && o->rc[i] != RC_PENDING) || refusal(o->rc[i]);
  char *msg = o->qmsg;
  size_t size = sizeof o->qmsg;
  int at = snprintf(msg, size, "%d of %d servers answered (a quorum is %d)",
                    answered, B->n, B->quorum);
  for (int i = 0; i < B->n && at < (int)size; i++) {
    if (o->rc[i] >= 0 && o->rc[i] != RC_PENDING) continue;
    char buf[256];
    if (o->rc[i] == RC_PENDING)
      snprintf(buf, sizeof buf, "%s: no answer yet", B->name[i]);
    at += snprintf(msg + at, size - (size_t)at, "; %s",
                   o->rc[i] == RC_PENDING ? buf : named(o, i, buf, sizeof buf));
  }
}

/* The error of too few answers: err (or the first error), its detail
 * o->qmsg, made now if not made yet. */
int dl_rl_quorum_error(rl_op *o, int err) {
  if (o->qmsg[0] == '\0') { /* else an acquire's attempt's, err its own */
    int refused = dl_rl_refused(o);
    if (refused) err = refused;
    quorum_msg(o);
  }
  if (err >= 0) err = first_error(o);
  return dl_seterr(o->B->env.err_owner, err, "%s", o->qmsg);
}

/* An acquire's round: 1 taken (the request filled in), 0 not, or -1 not
 * decided yet. */
int dl_rl_acquired(rl_op *o) {
  redlock *B = o->B;
  dl_acquire *a = o->a;
  int ok = 0, again = 0;
  uint64_t token = 0;
  int64_t ttl = DLOCK_TTL_FREE; /* the longest a refusing server saw */
  for (int i = 0; i < B->n; i++) {
    if (o->rc[i] == 1) {
      ok++;
      if (o->as[i].status == 2) again++;
      if (o->as[i].token > token) token = o->as[i].token;
    } else if (o->rc[i] == 0 && o->as[i].ttl > ttl) {
      ttl = o->as[i].ttl;
    }
  }
  if (ok < B->quorum && ok + o->await >= B->quorum) return -1;
  int64_t keep = a->lease_ms - drift_ms(a->lease_ms);
  int64_t valid = keep > INT64_MAX - o->t0 ? INT64_MAX : o->t0 + keep;
  a->ttl = ttl;
  o->unanswered = 0;
  o->attempt_err = 0;
  /* The servers that failed it (not those still to answer a round the
   * answers so far decided: a quorum may still be reachable). */
  o->attempt_final = false;
  for (int i = 0; i < B->n; i++)
    if (o->rc[i] < 0) {
      o->unanswered++;
      if (o->attempt_err != 0) continue;
      o->attempt_err = o->rc[i];
      o->attempt_final = !mendable(o, i);
    }
  int refused = dl_rl_refused(o);
  if (refused) { /* final: the wait ends */
    o->attempt_err = refused;
    o->attempt_final = true;
  }
  o->qmsg[0] = '\0';
  if (B->n - o->unanswered < B->quorum) quorum_msg(o); /* this attempt's */
  if (ok < B->quorum || valid <= dl_now_ms()) return 0;
  a->status = again >= B->quorum ? 2 : 1;
  a->token = o->token = token;
  dl_rl_raise_last(B, token);
  a->valid_until = valid;
  return 1;
}

/* A release: decided once a quorum answered (the rest
 * go on in the background), or all did. */
bool dl_rl_settled(const rl_op *o) {
  int answered = 0;
  for (int i = 0; i < o->B->n; i++)
    answered += o->rc[i] >= 0 && o->rc[i] != RC_PENDING;
  return o->await == 0 || answered >= o->B->quorum;
}

int dl_rl_released(rl_op *o) {
  int freed = 0, held = 0, notowner = 0;
  for (int i = 0; i < o->B->n; i++) {
    freed += o->rc[i] == 1;
    held += o->rc[i] == 0;
    notowner += o->rc[i] == DLOCK_ENOTOWNER;
  }
  if (freed > 0) return 1;
  if (held > 0) return 0;
  if (notowner > 0) return dl_rl_part_error(o, part_with(o, DLOCK_ENOTOWNER));
  return dl_rl_quorum_error(o, 0);
}

/* A renewal: decided when every hold is (held by a quorum, or gone from
 * enough that no quorum can have it), or all answered; -2 not yet. */
int dl_rl_renewed(rl_op *o) {
  redlock *B = o->B;
  int64_t valid = o->t0 + o->lease_ms - drift_ms(o->lease_ms);
  bool late = o->lease_ms > 0 && valid <= dl_now_ms();
  if (o->await > 0 && !late)
    for (int k = 0; k < o->nitems; k++) {
      int held = 0, gone = 0;
      for (int i = 0; i < B->n; i++) {
        int r = o->is[i][k].result;
        held += r == 1 && o->rc[i] != RC_PENDING;
        gone += r == 0 && o->rc[i] != RC_PENDING;
      }
      if (held < B->quorum && B->n - gone >= B->quorum) return -2;
    }
  int rc = 0;
  *o->calls = 0;
  for (int i = 0; i < B->n; i++)
    if (o->rc[i] != RC_PENDING) *o->calls += o->ncalls[i];
  for (int k = 0; k < o->nitems; k++) {
    int held = 0, gone = 0;
    for (int i = 0; i < B->n; i++) {
      if (o->rc[i] == RC_PENDING) continue;
      int r = o->is[i][k].result;
      held += r == 1;
      gone += r == 0;
    }
    dl_renew_item *it = &o->items[k];
    if (held >= B->quorum && !late) {
      it->result = 1;
      if (o->lease_ms > 0) it->valid_until = valid;
    } else if (B->n - gone < B->quorum) {
      it->result = 0;
    } else {
      it->result = -1;
      if (rc == 0)
        rc = late ? dl_seterr(B->env.err_owner, DLOCK_ETIMEDOUT,
                              "renewal answered too late")
                  : dl_rl_quorum_error(o, 0);
    }
  }
  return rc;
}

int dl_rl_forced(rl_op *o) {
  int deleted = 0, none = 0, wrong = 0, q = o->B->quorum;
  for (int i = 0; i < o->B->n; i++) {
    deleted += o->rc[i] == 1;
    none += o->rc[i] == 0;
    wrong += o->rc[i] == DLOCK_EWRONGTYPE;
  }
  /* The servers that had the key, may have had it, or are still to say. */
  int maybe = o->B->n - none - wrong;
  if (deleted >= q) return 1;
  if (o->await > 0 && maybe >= q) return -2;
  if (deleted > 0 && maybe >= q) return 1; /* failures may hide a quorum */
  if (wrong > 0 && deleted == 0)
    return dl_rl_part_error(o, part_with(o, DLOCK_EWRONGTYPE));
  /* Held by a minority at most: not held (a grant given back late, a
   * key left by an acquire that failed), though those keys are deleted. */
  if (maybe < q) return 0;
  return none > 0 ? 0 : dl_rl_quorum_error(o, 0);
}

static int cmp_ll(const void *x, const void *y) {
  long long a = *(const long long *)x, b = *(const long long *)y;
  return a < b ? 1 : a > b ? -1 : 0; /* descending */
}

/* A query's answer: what a quorum agrees on at least (the quorum-th
 * largest answer), the token the largest; -2 while the answers still to
 * come could change it. The token and the remaining lease are answered
 * once a quorum has: the largest token of any quorum is at least the last
 * one fenced, and the quorum-th largest lease is one a quorum has. */
int dl_rl_queried(rl_op *o) {
  redlock *B = o->B;
  long long got[RL_MAX];
  int n = 0;
  for (int i = 0; i < B->n; i++)
    if (o->rc[i] == 0) got[n++] = o->vs[i];
  int q = B->quorum, r = o->await;
  if (n + r < q) return dl_rl_quorum_error(o, 0);
  if (n < q) return -2;
  qsort(got, (size_t)n, sizeof got[0], cmp_ll);
  /* Answers still to come, all larger, would raise the quorum-th largest
   * to got[q - 1 - r]: decided when that is the same. */
  bool exact = o->q != DL_QUERY_TOKEN && o->q != DL_QUERY_TTL;
  if (r > 0 && exact && (q - 1 - r < 0 || got[q - 1 - r] != got[q - 1]))
    return -2;
  *o->v = o->q == DL_QUERY_TOKEN ? got[0] : got[q - 1];
  return 0;
}

int dl_rl_pinged(rl_op *o) {
  int up = 0;
  for (int i = 0; i < o->B->n; i++)
    up += o->rc[i] == 0;
  if (up >= o->B->quorum) return 0;
  return up + o->await < o->B->quorum ? dl_rl_quorum_error(o, 0) : -2;
}

/* How many answered parts show the lock held by part i's owner. */
static int held_alike(const rl_op *o, int i) {
  int same = 0;
  for (int j = 0; j < o->B->n; j++)
    same += o->rc[j] >= 0 && o->rc[j] != RC_PENDING && o->snaps[j].held &&
            strcmp(o->snaps[j].owner, o->snaps[i].owner) == 0;
  return same;
}

int dl_rl_inspected(const rl_op *o) {
  redlock *B = o->B;
  int first = -1, free_at = -1, most = 0;
  for (int i = 0; i < B->n; i++) {
    if (o->rc[i] < 0 || o->rc[i] == RC_PENDING) continue;
    if (first < 0) first = i;
    if (!o->snaps[i].held) {
      if (free_at < 0) free_at = i;
      continue;
    }
    int same = held_alike(o, i);
    if (same >= B->quorum) return i;
    if (same > most) most = same;
  }
  if (o->await > 0 && (first < 0 || most + o->await >= B->quorum)) return -2;
  return free_at >= 0 ? free_at : first;
}

bool dl_rl_held_by_quorum(const rl_op *o, int i) {
  return o->snaps[i].held && held_alike(o, i) >= o->B->quorum;
}
