/* snapshot.c: what can be read of whatever lives at a name without taking
 * it (a snapshot of any kind of lock or synchronizer), and the scan for
 * lock names. Read-only on the server. */
#include "ops.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An owner field of a lock hash: "<id>:<thread>" with a positive count. */
static bool owner_field(const redisReply *f, const redisReply *v) {
  if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
    return false;
  if (strncmp(f->str, "dlock:", 6) == 0 || strchr(f->str, ':') == NULL)
    return false;
  char *end;
  long n = strtol(v->str, &end, 10);
  return *end == '\0' && n > 0;
}

/* Sets st->held_ms from a holder's start, `since` (server ms, as text),
 * and the server's clock `now` (-1 unknown). */
static void held_since(dlock_lock_state *st, int64_t now, const char *since) {
  if (now < 0) return;
  st->held_ms = now - strtoll(since, NULL, 10);
  if (st->held_ms < 0) st->held_ms = 0;
}

/* ---- inspect: the snapshot script, then who listens (reqop.c) ---- */
typedef struct inspect_req {
  dl_reqop r;
  const char *key;
  dlock_lock_state *st;
  bool listeners; /* the second request: PUBSUB NUMSUB */
  char names[5][DL_DERIVED_MAX];
} inspect_req;

static int inspect_send(dl_reqop *x) {
  inspect_req *q = (inspect_req *)x;
  const char *key = q->key;
  if (q->listeners) { /* a lock's waiters, and a read-write lock's */
    dl_derived_into(q->names[0], DL_DERIVED_MAX, "redisson_lock__channel", key);
    dl_derived_into(q->names[1], DL_DERIVED_MAX, "redisson_rwlock", key);
    const char *argv[] = {"PUBSUB", "NUMSUB", q->names[0], q->names[1]};
    return dl_redis_step_command(x->R, &x->p, 4, argv);
  }
  dl_derived_into(q->names[0], DL_DERIVED_MAX, "redisson_lock_token", key);
  dl_derived_into(q->names[1], DL_DERIVED_MAX, "redisson_lock_queue", key);
  dl_derived_into(q->names[2], DL_DERIVED_MAX, "dlock_lock_queue", key);
  dl_derived_suffix_into(q->names[3], DL_DERIVED_MAX, key, "timeout");
  const char *keys[] = {key, q->names[0], q->names[1], q->names[3],
                        q->names[2]};
  return dl_redis_step_eval(x->R, &x->p, 0, DL_SCRIPT_LOCK_INSPECT, 5, keys,
                            0, NULL);
}

/* Fills st from the snapshot script's reply r (freed). */
static int inspect_fill(dl_redis *R, redisReply *r, dlock_lock_state *st) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 9 ||
      r->element[0]->type != REDIS_REPLY_ARRAY ||
      r->element[1]->type != REDIS_REPLY_INTEGER) {
    freeReplyObject(r);
    return dl_seterr(R->env.err_owner, DLOCK_EPROTO,
                     "unexpected reply to inspect");
  }
  redisReply *all = r->element[0];
  int64_t now = r->element[3]->type == REDIS_REPLY_INTEGER
                    ? r->element[3]->integer
                    : -1;
  st->held_ms = -1;
  bool foreign = false; /* a field no lock has: an application's hash */
  for (size_t i = 0; i + 1 < all->elements; i += 2) {
    redisReply *f = all->element[i], *v = all->element[i + 1];
    bool strs = f->type == REDIS_REPLY_STRING && v->type == REDIS_REPLY_STRING;
    if (strs && strcmp(f->str, "dlock:info") == 0) {
      snprintf(st->info, sizeof st->info, "%s", v->str);
    } else if (strs && strcmp(f->str, "dlock:since") == 0) {
      held_since(st, now, v->str);
    } else if (strs && strcmp(f->str, "mode") == 0) {
      snprintf(st->mode, sizeof st->mode, "%s", v->str);
    } else if (owner_field(f, v)) {
      size_t fl = strlen(f->str);
      bool writer = fl > 6 && strcmp(f->str + fl - 6, ":write") == 0;
      if (!writer) st->readers++; /* zeroed below unless a rw lock */
      if (st->holders++ == 0) {
        snprintf(st->owner, sizeof st->owner, "%s", f->str);
        st->hold_count = atoi(v->str);
      }
    } else if (!strs || strncmp(f->str, "dlock:", 6) != 0) {
      foreign = true;
    }
  }
  if (foreign) { /* as lock_force_release.lua: not a lock, nobody holds it */
    st->holders = st->readers = st->hold_count = 0;
    st->owner[0] = st->mode[0] = st->info[0] = '\0';
    st->held_ms = -1;
  }
  st->held = st->holders > 0;
  if (st->mode[0] == '\0') st->readers = 0; /* not a read-write lock */
  if (st->held && st->mode[0]) /* "dlock:info:<owner>" = "<since>:<info>" */
    for (size_t i = 0; i + 1 < all->elements; i += 2) {
      redisReply *f = all->element[i], *v = all->element[i + 1];
      char *colon;
      if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING ||
          strncmp(f->str, "dlock:info:", 11) != 0 ||
          strcmp(f->str + 11, st->owner) != 0 ||
          (colon = strchr(v->str, ':')) == NULL)
        continue;
      held_since(st, now, v->str);
      snprintf(st->info, sizeof st->info, "%s", colon + 1);
    }
  if (r->element[7]->type == REDIS_REPLY_STRING ||
      r->element[7]->type == REDIS_REPLY_STATUS)
    snprintf(st->type, sizeof st->type, "%s", r->element[7]->str);
  st->ttl_ms = dl_redis_ttl(r->element[1]->integer);
  st->counter = r->element[4]->type == REDIS_REPLY_INTEGER
                    ? r->element[4]->integer
                    : -1;
  if (r->element[5]->type == REDIS_REPLY_INTEGER)
    st->queued = (int)r->element[5]->integer;
  if (r->element[6]->type == REDIS_REPLY_INTEGER)
    st->permits_taken = (int)r->element[6]->integer;
  if (r->element[2]->type == REDIS_REPLY_STRING)
    st->token = strtoull(r->element[2]->str, NULL, 10);
  /* A plain string lock: a string with a lease that is not a number (its
   * value is the holder's token; there is no count on the wire). */
  if (r->element[8]->type == REDIS_REPLY_STRING && st->ttl_ms >= 0 &&
      strcmp(st->type, "string") == 0) {
    st->plain = 1;
    st->held = 1;
    st->holders = 1;
    st->hold_count = 1;
    snprintf(st->owner, sizeof st->owner, "%s", r->element[8]->str);
  }
  freeReplyObject(r);
  return 0;
}

static int inspect_result(dl_reqop *x) {
  inspect_req *q = (inspect_req *)x;
  redisReply *r = dl_reqop_reply(x);
  if (r == NULL) return x->p.rc;
  if (!q->listeners) {
    int rc = inspect_fill(x->R, r, q->st);
    if (rc != 0) return rc;
    q->listeners = true;
    return DL_REQOP_MORE;
  }
  /* {channel, count, channel, count}: one of them is the kind's. */
  if (r->type == REDIS_REPLY_ARRAY && r->elements == 4 &&
      r->element[1]->type == REDIS_REPLY_INTEGER &&
      r->element[3]->type == REDIS_REPLY_INTEGER)
    q->st->waiters = (int)(r->element[1]->integer + r->element[3]->integer);
  /* A fair lock's waiters listen on channels of their own (and the
   * hand-off queue's on theirs): every one queued waits. */
  if (q->st->waiters < q->st->queued) q->st->waiters = q->st->queued;
  freeReplyObject(r);
  return 0;
}

static int inspect_run(dl_backend *b, const char *key, dlock_lock_state *st,
                       dl_done_fn done, void *ud, dl_async **op) {
  dl_redis *R = (dl_redis *)b;
  int err;
  inspect_req stack, *x = dl_reqop_new(R, &stack, sizeof stack, done != NULL,
                               op, &err, inspect_send, inspect_result);
  if (x == NULL) return err;
  x->key = key;
  x->st = st;
  return dl_reqop_run(&x->r, done, ud, op);
}

int dl_redis_inspect(dl_backend *b, const char *key, dlock_lock_state *st) {
  return inspect_run(b, key, st, NULL, NULL, NULL);
}

int dl_redis_inspect_async(dl_backend *b, const char *key,
                           dlock_lock_state *st, dl_done_fn done, void *ud,
                           dl_async **op) {
  return inspect_run(b, key, st, done, ud, op);
}

/* ---- the scan: SCAN ... TYPE hash until the cursor comes back to 0 or
 * the callback says stop ---- */
typedef struct scan_req {
  dl_reqop r;
  const char *match;
  size_t prefix_len;
  dlock_scan_cb cb;
  void *cb_ud;
  int found;
  int type; /* 0 hashes (the hash locks), 1 strings (plain string locks;
               most strings are not, dlock_lock_inspect tells) */
  char cursor[32];
} scan_req;

static int scan_send(dl_reqop *x) {
  scan_req *q = (scan_req *)x;
  const char *argv[] = {"SCAN", q->cursor, "MATCH", q->match, "COUNT", "500",
                        "TYPE", q->type ? "string" : "hash"};
  return dl_redis_step_command(x->R, &x->p, 8, argv);
}

redisReply *dl_scan_page(dl_redis *R, redisReply *r, char *cursor, size_t len) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_STRING ||
      r->element[1]->type != REDIS_REPLY_ARRAY) {
    freeReplyObject(r);
    dl_seterr(R->env.err_owner, DLOCK_EPROTO, "unexpected reply to SCAN");
    return NULL;
  }
  snprintf(cursor, len, "%s", r->element[0]->str);
  return r->element[1];
}

static int scan_result(dl_reqop *x) {
  scan_req *q = (scan_req *)x;
  redisReply *r = dl_reqop_reply(x);
  if (r == NULL) return x->p.rc;
  redisReply *keys = dl_scan_page(x->R, r, q->cursor, sizeof q->cursor);
  if (keys == NULL) return DLOCK_EPROTO;
  bool stop = false;
  for (size_t i = 0; i < keys->elements && !stop; i++) {
    redisReply *k = keys->element[i];
    if (k->type != REDIS_REPLY_STRING || k->len < q->prefix_len) continue;
    if (q->type == 1 && strncmp(k->str + q->prefix_len, DL_WAIT_RECORD,
                                strlen(DL_WAIT_RECORD)) == 0)
      continue; /* a waiter's record (waits.c), no lock */
    q->found++;
    if (q->cb(k->str + q->prefix_len, q->cb_ud) != 0) stop = true;
  }
  freeReplyObject(r);
  if (stop) return q->found;
  if (strcmp(q->cursor, "0") == 0) {
    if (q->type == 1) return q->found;
    q->type = 1; /* then the strings */
  }
  return DL_REQOP_MORE;
}

static int scan_run(dl_backend *b, const char *match, size_t prefix_len,
                    dlock_scan_cb cb, void *cb_ud, dl_done_fn done, void *ud,
                    dl_async **op) {
  dl_redis *R = (dl_redis *)b;
  int err;
  scan_req stack, *x = dl_reqop_new(R, &stack, sizeof stack, done != NULL,
                               op, &err, scan_send, scan_result);
  if (x == NULL) return err;
  x->match = match;
  x->prefix_len = prefix_len;
  x->cb = cb;
  x->cb_ud = cb_ud;
  strcpy(x->cursor, "0");
  return dl_reqop_run(&x->r, done, ud, op);
}

int dl_redis_scan(dl_backend *b, const char *match, size_t prefix_len,
                  dlock_scan_cb cb, void *ud) {
  return scan_run(b, match, prefix_len, cb, ud, NULL, NULL, NULL);
}

int dl_redis_scan_async(dl_backend *b, const char *match, size_t prefix_len,
                        dlock_scan_cb cb, void *cb_ud, dl_done_fn done,
                        void *ud, dl_async **op) {
  return scan_run(b, match, prefix_len, cb, cb_ud, done, ud, op);
}
