/* rlwait.c: waiter records on redlock:// (docs/WIRE.md, "Waiter
 * records"), the Redlock way: a waiting acquire's attempts carry its
 * record to every server in their own rounds (written where an attempt is
 * refused, deleted where one is taken: lock_acquire.lua), so a wait costs
 * no command more; a wait given up deletes it in one more round. The
 * reader (the waiters entry) counts a record only where a quorum of the
 * servers has it alike, and detect_deadlocks' walk (core/deadlock.c's
 * dl_walk) a holder only where a quorum agrees on it: a server down, or a
 * record left on a minority (a round that failed there), changes nothing.
 * Everything here runs on the parts' loop (the client's, or a blocking
 * client's own thread: rlloop.c). */
#include "../ops/rlock.h"
#include "redlock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the record, carried by the acquire's rounds ---- */
#define STR_(x) #x
#define STR(x) STR_(x)
#define DL_WAIT_RECORD_PX STR(DL_WAIT_RECORD_MS) /* "10000" */

void dl_rl_rec_attempt(rl_op *o, int i, dl_acquire *a) {
  a->rec_key = a->rec_val = a->rec_px = NULL;
  o->rec_sent[i] = false;
  if (!o->rec_on) return;
  int64_t now = dl_now_ms();
  /* Written where it is not (known to be), renewed every third of its
   * lease; else the attempt only deletes it if it takes the lock. */
  bool due = !o->rec_there[i] || o->rec_at[i] == 0 ||
             now - o->rec_at[i] >= DL_WAIT_RECORD_MS / 3;
  a->rec_key = o->rec_key;
  a->rec_val = due ? o->rec_val : "";
  a->rec_px = DL_WAIT_RECORD_PX;
  if (due) {
    o->rec_sent[i] = true;
    o->rec_sent_at[i] = now;
  }
}

void dl_rl_rec_answer(rl_op *o, int i, int phase, int rc) {
  if (phase == PH_CLEAR) {
    if (rc >= 0) {
      o->rec_there[i] = false;
      o->rec_at[i] = 0;
    }
    return;
  }
  if (phase != PH_MAIN || !o->rec_on) return;
  if (rc == 1) { /* taken: the script deleted it */
    o->rec_there[i] = false;
    o->rec_at[i] = 0;
  } else if (o->rec_sent[i]) { /* refused: written; failed: perhaps */
    o->rec_there[i] = true;
    o->rec_at[i] = rc == 0 ? o->rec_sent_at[i] : 0;
  }
  o->rec_sent[i] = false;
}

/* Whether the record is on a quorum of the servers. */
static bool noted(const rl_op *o) {
  int n = 0;
  for (int i = 0; i < o->B->n; i++)
    n += o->rec_there[i] && o->rec_at[i] > 0;
  return n >= o->B->quorum;
}

static void walk_start(rl_op *o);

int dl_rl_rec_pause(rl_op *o) {
  dl_acquire *a = o->a;
  if (!o->rec_on) {
    /* As on one server: once the wait has lasted, or at once to detect. */
    if (!a->detect && dl_now_ms() - o->started < DL_WAIT_NOTE_AFTER_MS)
      return 0;
    dl_acquire t = *a;
    t.lock = o->l;
    t.info = o->info ? o->info : "";
    char key[DL_WAIT_KEY_MAX];
    dl_wait_record_key(key, o->l);
    o->rec_key = strdup(key);
    o->rec_val = dl_wait_record_value(&t);
    if (o->rec_key == NULL || o->rec_val == NULL) {
      /* out of memory: the wait goes unrecorded, as a write refused */
      free(o->rec_key);
      free(o->rec_val);
      o->rec_key = o->rec_val = NULL;
      o->walked = true;
      return 0;
    }
    o->rec_on = true;
    return 0;
  }
  if (!a->detect || o->walked || !noted(o)) return 0;
  walk_start(o);
  return o->st == ST_WALK ? 1 : 0;
}

void dl_rl_give_up(rl_op *o, int result) {
  bool any = false;
  for (int i = 0; i < o->B->n; i++)
    any = any || o->rec_there[i];
  if (!any || o->B->closing) {
    dl_rl_finish(o, result);
    return;
  }
  /* The result waits for the deletes (its detail is the client's now:
   * the parts record theirs under their own tags). */
  o->held_result = result;
  o->st = ST_CLEARED;
  dl_rl_fan(o, PH_CLEAR);
}

void dl_rl_clear_behind(rl_op *o) {
  for (int i = 0; i < o->B->n; i++)
    if (o->rec_there[i] && !o->pending[i]) dl_rl_start_aside(o, i, PH_CLEAR);
}

bool dl_rl_cleared(const rl_op *o) {
  if (o->await == 0) return true;
  int done = 0;
  for (int i = 0; i < o->B->n; i++)
    done += o->round_of[i] == o->round && o->phase_of[i] == PH_CLEAR &&
            o->rc[i] != RC_PENDING;
  return done >= o->B->quorum;
}

/* ---- the waiters: what a quorum of the servers has alike ---- */
typedef struct rl_rec {
  char *owner, *name, *kind, *info;
  int64_t deadline_ms;
} rl_rec;

struct rl_recs {
  rl_rec *v[RL_MAX];
  size_t n[RL_MAX];
  bool oom;
};

static void recs_free(struct rl_recs *r) {
  if (r == NULL) return;
  for (int i = 0; i < RL_MAX; i++) {
    for (size_t k = 0; k < r->n[i]; k++) {
      free(r->v[i][k].owner);
      free(r->v[i][k].name);
      free(r->v[i][k].kind);
      free(r->v[i][k].info);
    }
    free(r->v[i]);
  }
  free(r);
}

int dl_rl_rec_seen(const dlock_waiter *w, void *ud) {
  rl_slot *s = ud;
  struct rl_recs *r = s->o->recs;
  int i = s->i;
  rl_rec *nv = realloc(r->v[i], (r->n[i] + 1) * sizeof *nv);
  if (nv == NULL) {
    r->oom = true;
    return 1;
  }
  r->v[i] = nv;
  rl_rec *x = &nv[r->n[i]++];
  x->owner = strdup(w->owner);
  x->name = strdup(w->name);
  x->kind = strdup(w->kind);
  x->info = strdup(w->info);
  x->deadline_ms = w->deadline_ms;
  if (!x->owner || !x->name || !x->kind || !x->info) r->oom = true;
  return r->oom;
}

/* Whether server j's answer has x (the same owner waiting for the same
 * lock). */
static bool has(const struct rl_recs *r, int j, const rl_rec *x) {
  for (size_t k = 0; k < r->n[j]; k++)
    if (r->v[j][k].owner && r->v[j][k].name &&
        strcmp(r->v[j][k].owner, x->owner) == 0 &&
        strcmp(r->v[j][k].name, x->name) == 0)
      return true;
  return false;
}

/* How many answered servers have x. */
static int alike(const rl_op *o, const rl_rec *x) {
  int same = 0;
  for (int j = 0; j < o->B->n; j++)
    same += o->rc[j] >= 0 && o->rc[j] != RC_PENDING && has(o->recs, j, x);
  return same;
}

/* Whether the servers still to answer could change what is passed: a
 * record some answered server has, on too few for a quorum, that their
 * answers could make one. */
static bool open_record(const rl_op *o, int pending) {
  const struct rl_recs *r = o->recs;
  for (int i = 0; i < o->B->n; i++) {
    if (o->rc[i] < 0 || o->rc[i] == RC_PENDING) continue;
    for (size_t k = 0; k < r->n[i]; k++) {
      int same = alike(o, &r->v[i][k]);
      if (same < o->B->quorum && same + pending >= o->B->quorum) return true;
    }
  }
  return false;
}

int dl_rl_waiters_done(rl_op *o) {
  redlock *B = o->B;
  struct rl_recs *r = o->recs;
  int answered = 0, pending = 0;
  for (int i = 0; i < B->n; i++) {
    pending += o->rc[i] == RC_PENDING;
    answered += o->rc[i] >= 0 && o->rc[i] != RC_PENDING;
  }
  /* Decided once a quorum answered and a stalled server's answer could
   * add no record (every record seen is on a quorum, or could not reach
   * one), as the other rounds decide; else when all have answered. */
  if (answered + pending < B->quorum) return dl_rl_quorum_error(o, 0);
  if (pending > 0 &&
      (answered < B->quorum || r->oom || open_record(o, pending)))
    return -2;
  if (r->oom) return dl_seterr(B->env.err_owner, DLOCK_ENOMEM, "out of memory");
  int passed = 0;
  for (int i = 0; i < B->n; i++) {
    if (o->rc[i] < 0 || o->rc[i] == RC_PENDING) continue;
    for (size_t k = 0; k < r->n[i]; k++) {
      const rl_rec *x = &r->v[i][k];
      bool before = false; /* told at an earlier server */
      for (int j = 0; j < i && !before; j++)
        before = o->rc[j] >= 0 && o->rc[j] != RC_PENDING && has(r, j, x);
      if (before) continue;
      if (alike(o, x) < B->quorum) continue; /* a minority's: not a wait */
      dlock_waiter w = {.owner = x->owner,
                        .name = x->name,
                        .kind = x->kind,
                        .info = x->info,
                        .deadline_ms = x->deadline_ms};
      passed++;
      if (o->wcb(&w, o->wcb_ud) != 0) return passed;
    }
  }
  return passed;
}

/* A waiters operation: every server's records under prefix, those a
 * quorum has to wcb(wud) on the loop; NULL with *err. */
static rl_op *waiters_op(redlock *B, const char *prefix, dlock_waiter_cb wcb,
                         void *wud, dl_done_fn done, void *ud, int *err) {
  rl_op *o = dl_rl_op_new(B, OP_WAITERS, done, ud, err);
  if (o == NULL) return NULL;
  o->recs = calloc(1, sizeof *o->recs);
  o->lbuf = strdup(prefix);
  if (o->recs == NULL || o->lbuf == NULL) {
    free(o->recs);
    free(o->lbuf);
    free(o);
    *err = dl_seterr(B->env.err_owner, DLOCK_ENOMEM, "out of memory");
    return NULL;
  }
  o->key = o->lbuf;
  o->wcb = wcb;
  o->wcb_ud = wud;
  return o;
}

/* A blocking call's records, gathered on the loop, told on the caller's
 * thread (which may make blocking calls from its callback). */
typedef struct gathered {
  rl_rec *v;
  size_t n;
  bool oom;
} gathered;

static int gather(const dlock_waiter *w, void *ud) {
  gathered *g = ud;
  rl_rec *nv = realloc(g->v, (g->n + 1) * sizeof *nv);
  if (nv == NULL) {
    g->oom = true;
    return 1;
  }
  g->v = nv;
  rl_rec *x = &nv[g->n++];
  x->owner = strdup(w->owner);
  x->name = strdup(w->name);
  x->kind = strdup(w->kind);
  x->info = strdup(w->info);
  x->deadline_ms = w->deadline_ms;
  if (!x->owner || !x->name || !x->kind || !x->info) g->oom = true;
  return g->oom;
}

int dl_rl_waiters(dl_backend *b, const char *prefix, dlock_waiter_cb cb,
                  void *ud) {
  redlock *B = (redlock *)b;
  if (B->thread == NULL)
    return dl_seterr(B->env.err_owner, DLOCK_EINVAL,
                     "a blocking call on an event-loop client");
  gathered g = {0};
  int err;
  rl_op *o = waiters_op(B, prefix, gather, &g, NULL, NULL, &err);
  if (o == NULL) return err;
  int rc = dl_rl_call(o);
  if (rc >= 0 && g.oom)
    rc = dl_seterr(B->env.err_owner, DLOCK_ENOMEM, "out of memory");
  int told = 0;
  bool go = rc >= 0;
  for (size_t k = 0; k < g.n; k++) {
    rl_rec *x = &g.v[k];
    if (go) {
      dlock_waiter w = {x->owner, x->name, x->kind, x->info, x->deadline_ms};
      told++;
      go = cb(&w, ud) == 0;
    }
    free(x->owner);
    free(x->name);
    free(x->kind);
    free(x->info);
  }
  free(g.v);
  return rc < 0 ? rc : told;
}

/* ---- detect_deadlocks: core/deadlock.c's walk, its reads in flight ---- */
typedef struct rl_walk {
  dl_walk w;
  rl_op *o; /* the acquire, held (o->left) while the walk runs */
  dlock_lock_state st;
} rl_walk;

/* The walk is over (rc: DLOCK_EDEADLK, DLOCK_ENOMEM, else go on waiting). */
static void walk_end(rl_walk *k, int rc) {
  rl_op *o = k->o;
  dl_walk_free(&k->w);
  free(k);
  o->walk = NULL;
  o->walked = true;
  if (rc == DLOCK_EDEADLK || rc == DLOCK_ENOMEM) {
    dl_rl_give_up(o, rc);
  } else {
    o->st = ST_RELEASED; /* on to the pause */
    dl_rl_step(o);
  }
  dl_rl_unhold(o);
}

static void walk_next(rl_walk *k);

static void walk_inspected(void *ud, int rc) {
  rl_walk *k = ud;
  /* The lock's holder (a Redlock is a mutex: one). */
  if (rc == 0 && k->st.held && k->st.owner[0])
    dl_walk_holder(k->st.owner, &k->w);
  int r = dl_walk_step(&k->w, &k->o->B->env, rc);
  if (r == 1)
    walk_next(k);
  else
    walk_end(k, r);
}

/* The next lock's holder: the quorum's (a strict inspect). */
static void walk_next(rl_walk *k) {
  redlock *B = k->o->B;
  int err;
  const char *key = dl_walk_key(&k->w, &B->env, &err);
  if (key == NULL) {
    walk_end(k, err);
    return;
  }
  rl_op *x = dl_rl_op_new(B, OP_INSPECT, walk_inspected, k, &err);
  if (x == NULL) {
    walk_end(k, 0); /* cannot tell: wait */
    return;
  }
  x->only = -1;
  x->strict = true;
  x->snaps = calloc((size_t)B->n, sizeof *x->snaps);
  x->lbuf = strdup(key);
  if (x->snaps == NULL || x->lbuf == NULL) {
    free(x->snaps);
    free(x->lbuf);
    free(x);
    walk_end(k, 0);
    return;
  }
  x->key = x->lbuf;
  memset(&k->st, 0, sizeof k->st);
  x->snap = &k->st;
  dl_async *op;
  if (dl_rl_run(x, &op) != 0) walk_end(k, 0);
}

static void walk_waited(void *ud, int rc) {
  rl_walk *k = ud;
  if (rc < 0 && !k->w.oom) {
    walk_end(k, 0); /* cannot tell: wait */
    return;
  }
  walk_next(k);
}

/* Starts o's walk (o in ST_WALK), or marks it walked (cannot tell). */
static void walk_start(rl_op *o) {
  o->walked = true;
  rl_walk *k = calloc(1, sizeof *k);
  if (k == NULL) return;
  dl_acquire t = *o->a;
  t.lock = o->l;
  if (!dl_walk_init(&k->w, &t)) {
    free(k);
    return;
  }
  k->o = o;
  int err;
  rl_op *x =
      waiters_op(o->B, k->w.prefix, dl_walk_edge, &k->w, walk_waited, k, &err);
  dl_async *op;
  if (x == NULL || dl_rl_run(x, &op) != 0) {
    dl_walk_free(&k->w);
    free(k);
    return;
  }
  o->walk = k;
  o->st = ST_WALK;
  o->left++; /* until walk_end */
}

void dl_rl_rec_free(rl_op *o) {
  free(o->rec_key);
  free(o->rec_val);
  recs_free(o->recs);
  o->rec_key = o->rec_val = NULL;
  o->recs = NULL;
}
