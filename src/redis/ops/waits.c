/* waits.c: the waiter records (docs/WIRE.md, "Waiter records"): what an
 * owner waits for, written by an acquire that has to wait (acquire.c) and
 * read by dlock deadlocks (the backend's waiters entry). */
#include "rlock.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* "<prefix>dlock_wait:<owner>" into out (DL_DERIVED_MAX + DL_OWNER_MAX
 * bytes): the owner without a writer's ":write", so that a thread's
 * record and its holds (either side) name the same owner. */
static void record_key(char *out, const dl_lock_ref *l) {
  size_t pl = strlen(l->key) - strlen(l->name);
  size_t ol = strlen(l->owner);
  if (l->kind == DL_KIND_WRITE && ol > 6) ol -= 6; /* ":write" */
  snprintf(out, DL_WAIT_KEY_MAX, "%.*s%s%.*s", (int)pl, l->key, DL_WAIT_RECORD,
           (int)ol, l->owner);
}

static const char *kind_word(dl_lock_kind k) {
  switch (k) {
  case DL_KIND_FAIR: return "fair";
  case DL_KIND_READ: return "read";
  case DL_KIND_WRITE: return "write";
  case DL_KIND_PLAIN: return "plain";
  default: return "lock";
  }
}

void dl_wait_record_key(char *out, const dl_lock_ref *l) {
  record_key(out, l);
}

char *dl_wait_record_value(const dl_acquire *a) {
  const dl_lock_ref *l = a->lock;
  int64_t deadline = 0; /* the wait's end on the wall clock; 0: none */
  if (a->deadline != INT64_MAX) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    deadline = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 +
               (a->deadline - dl_now_ms());
  }
  const char *info = a->info ? a->info : "";
  size_t il = strlen(info), nl = strlen(l->name);
  char *v = malloc(64 + il + nl);
  if (v == NULL) return NULL;
  int n = snprintf(v, 64, "%s %lld %zu\n", kind_word(l->kind),
                   (long long)deadline, il);
  memcpy(v + n, info, il);
  memcpy(v + n + il, l->name, nl + 1);
  return v;
}

int dl_redis_wait_note(dl_redis *R, dl_pend *p, const dl_acquire *a) {
  char key[DL_WAIT_KEY_MAX], px[DL_INT_BUF];
  record_key(key, a->lock);
  char *v = dl_wait_record_value(a);
  if (v == NULL)
    return dl_seterr(R->env.err_owner, DLOCK_ENOMEM, "out of memory");
  dl_fmt_ll(px, DL_WAIT_RECORD_MS);
  const char *argv[] = {"SET", key, v, "PX", px};
  int rc = dl_redis_step_command(R, p, 5, argv);
  free(v);
  return rc;
}

int dl_redis_part_args(const dl_redis *R, const dl_acquire *a, char *young,
                       char *propose) {
  dl_fmt_ll(young, R->restart_delay_ms);
  propose[0] = '\0'; /* none: the server's own next token */
  if (a->propose) dl_fmt_ll(propose, (long long)a->propose);
  return a->rec_key ? 14 : a->propose ? 11 : R->restart_delay_ms > 0 ? 10 : 0;
}

int dl_redis_part_eval(dl_redis *R, dl_pend *p, int64_t until,
                       const dl_acquire *a, int nkeys, const char *const *keys,
                       const char *const *args) {
  const char *v[14];
  memcpy(v, args, 11 * sizeof *v);
  v[11] = a->rec_key;
  v[12] = a->rec_val;
  v[13] = a->rec_px;
  return dl_redis_step_eval(R, p, until, DL_SCRIPT_LOCK_ACQUIRE, nkeys, keys,
                            14, v);
}

bool dl_wait_rec_due(const dl_wait_rec *w, int64_t start, bool detect) {
  if (w->off) return false;
  if (!w->noted) return detect || dl_now_ms() - start >= DL_WAIT_NOTE_AFTER_MS;
  return dl_now_ms() - w->at >= DL_WAIT_RECORD_MS / 3;
}

int64_t dl_wait_rec_until(const dl_wait_rec *w, int64_t start, bool detect,
                          int64_t until) {
  if (w->off || (!w->noted && detect)) return until;
  int64_t due =
      w->noted ? w->at + DL_WAIT_RECORD_MS / 3 : start + DL_WAIT_NOTE_AFTER_MS;
  return due < until ? due : until;
}

void dl_wait_rec_noted(dl_wait_rec *w, dl_pend *p) {
  if (p->rc != 0)
    w->off = true;
  else
    w->noted = true;
  w->at = dl_now_ms();
  if (p->reply) freeReplyObject(p->reply);
  p->reply = NULL;
}

int dl_redis_wait_clear(dl_redis *R, dl_pend *p, const dl_lock_ref *l,
                        dl_wait_rec *w) {
  w->noted = false;
  char key[DL_WAIT_KEY_MAX];
  record_key(key, l);
  const char *argv[] = {"DEL", key};
  return dl_redis_step_command(R, p, 2, argv);
}

/* ---- the waiters entry: SCAN for the records, GET each ---- */
typedef struct waits_req {
  dl_reqop r;
  size_t prefix_len;
  dlock_waiter_cb cb;
  void *cb_ud;
  int found;
  bool stop;
  char match[DL_DERIVED_MAX + 16];
  char cursor[32];
  char **keys; /* the last SCAN's, GET one by one */
  size_t nkeys, next;
} waits_req;

static int waits_send(dl_reqop *x) {
  waits_req *q = (waits_req *)x;
  if (q->next < q->nkeys) {
    const char *argv[] = {"GET", q->keys[q->next]};
    return dl_redis_step_command(x->R, &x->p, 2, argv);
  }
  const char *argv[] = {"SCAN",  q->cursor, "MATCH", q->match,
                        "COUNT", "500",     "TYPE",  "string"};
  return dl_redis_step_command(x->R, &x->p, 8, argv);
}

static void keys_free(waits_req *q) {
  for (size_t i = 0; i < q->nkeys; i++)
    free(q->keys[i]);
  free(q->keys);
  q->keys = NULL;
  q->nkeys = q->next = 0;
}

/* One record's value (a GET's reply) to cb; a malformed one is skipped. */
static void record_tell(waits_req *q, const char *key, const redisReply *r) {
  if (r->type != REDIS_REPLY_STRING) return; /* gone since the SCAN */
  char kind[8];
  long long deadline;
  size_t il;
  int n = 0;
  if (sscanf(r->str, "%7s %lld %zu\n%n", kind, &deadline, &il, &n) != 3 ||
      n == 0 || (size_t)n + il > r->len)
    return;
  char *info = malloc(il + 1);
  if (info == NULL) return;
  memcpy(info, r->str + n, il);
  info[il] = '\0';
  dlock_waiter w = {.owner = key + q->prefix_len + strlen(DL_WAIT_RECORD),
                    .name = r->str + n + il,
                    .kind = kind,
                    .info = info,
                    .deadline_ms = deadline};
  q->found++;
  if (q->cb(&w, q->cb_ud) != 0) q->stop = true;
  free(info);
}

static int waits_result(dl_reqop *x) {
  waits_req *q = (waits_req *)x;
  redisReply *r = dl_reqop_reply(x);
  if (r == NULL) {
    keys_free(q);
    return x->p.rc;
  }
  if (q->next < q->nkeys) { /* a GET's */
    record_tell(q, q->keys[q->next++], r);
    freeReplyObject(r);
    if (q->stop) {
      keys_free(q);
      return q->found;
    }
    if (q->next < q->nkeys) return DL_REQOP_MORE;
    keys_free(q);
    return strcmp(q->cursor, "0") == 0 ? q->found : DL_REQOP_MORE;
  }
  redisReply *keys = dl_scan_page(x->R, r, q->cursor, sizeof q->cursor);
  if (keys == NULL) return DLOCK_EPROTO;
  q->keys = calloc(keys->elements + 1, sizeof *q->keys);
  for (size_t i = 0; q->keys && i < keys->elements; i++)
    if (keys->element[i]->type == REDIS_REPLY_STRING &&
        (q->keys[q->nkeys] = dl_strdup(keys->element[i]->str)) != NULL)
      q->nkeys++;
  freeReplyObject(r);
  if (q->keys == NULL)
    return dl_seterr(x->R->env.err_owner, DLOCK_ENOMEM, "out of memory");
  if (q->nkeys > 0) return DL_REQOP_MORE;
  keys_free(q);
  return strcmp(q->cursor, "0") == 0 ? q->found : DL_REQOP_MORE;
}

static int waiters_run(dl_backend *b, const char *prefix, dlock_waiter_cb cb,
                       void *ud, dl_done_fn done, void *dud, dl_async **op) {
  dl_redis *R = (dl_redis *)b;
  int err;
  waits_req stack, *x = dl_reqop_new(R, &stack, sizeof stack, done != NULL, op,
                                     &err, waits_send, waits_result);
  if (x == NULL) return err;
  /* The prefix as a glob: its own '*', '?', '[' and '\' escaped. */
  size_t at = 0, pl = strlen(prefix);
  for (size_t i = 0; i < pl && at + 2 < sizeof x->match - 16; i++) {
    if (strchr("*?[\\", prefix[i])) x->match[at++] = '\\';
    x->match[at++] = prefix[i];
  }
  snprintf(x->match + at, sizeof x->match - at, "%s*", DL_WAIT_RECORD);
  x->prefix_len = pl;
  x->cb = cb;
  x->cb_ud = ud;
  strcpy(x->cursor, "0");
  return dl_reqop_run(&x->r, done, dud, op);
}

int dl_redis_waiters(dl_backend *b, const char *prefix, dlock_waiter_cb cb,
                     void *ud) {
  return waiters_run(b, prefix, cb, ud, NULL, NULL, NULL);
}

int dl_redis_waiters_async(dl_backend *b, const char *prefix,
                           dlock_waiter_cb cb, void *cb_ud, dl_done_fn done,
                           void *ud, dl_async **op) {
  return waiters_run(b, prefix, cb, cb_ud, done, ud, op);
}

/* ---- a record's delete on its own (a Redlock's wait that gave up) ---- */
typedef struct del_req {
  dl_reqop r;
  char key[DL_WAIT_KEY_MAX];
} del_req;

static int del_send(dl_reqop *x) {
  const char *argv[] = {"DEL", ((del_req *)x)->key};
  return dl_redis_step_command(x->R, &x->p, 2, argv);
}

static int del_result(dl_reqop *x) {
  redisReply *r = dl_reqop_reply(x);
  if (r == NULL) return x->p.rc;
  int rc = r->type == REDIS_REPLY_INTEGER ? (int)r->integer : 0;
  freeReplyObject(r);
  return rc;
}

int dl_redis_wait_del_async(dl_backend *b, const char *key, dl_done_fn done,
                            void *ud, dl_async **op) {
  dl_redis *R = (dl_redis *)b;
  int err;
  del_req *x =
      dl_reqop_new(R, NULL, sizeof *x, true, op, &err, del_send, del_result);
  if (x == NULL) return err;
  snprintf(x->key, sizeof x->key, "%s", key);
  return dl_reqop_run(&x->r, done, ud, op);
}

/* ---- a lock's every holder (dlock_lock_holders) ---- */
typedef struct holders_req {
  dl_reqop r;
  const char *key;
  dl_holder_cb cb;
  void *ud;
} holders_req;

static int hkeys_send(dl_reqop *x) {
  const char *argv[] = {"HKEYS", ((holders_req *)x)->key};
  return dl_redis_step_command(x->R, &x->p, 2, argv);
}

static int hkeys_result(dl_reqop *x) {
  holders_req *q = (holders_req *)x;
  redisReply *r = dl_reqop_reply(x);
  if (r == NULL) return x->p.rc;
  for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
    const redisReply *f = r->element[i];
    if (f->type != REDIS_REPLY_STRING || strcmp(f->str, "mode") == 0 ||
        strncmp(f->str, "dlock:", 6) == 0)
      continue;
    if (q->cb(f->str, q->ud) != 0) break;
  }
  freeReplyObject(r);
  return 0;
}

int dl_redis_lock_holders(dl_backend *b, const char *key, dl_holder_cb cb,
                          void *ud) {
  dl_redis *R = (dl_redis *)b;
  dlock_lock_state *st = calloc(1, sizeof *st);
  if (st == NULL)
    return dl_seterr(R->env.err_owner, DLOCK_ENOMEM, "out of memory");
  int rc = dl_redis_inspect(b, key, st);
  bool readers = rc == 0 && st->readers > 1;
  if (rc == 0 && !readers && st->held && st->owner[0]) cb(st->owner, ud);
  free(st);
  if (!readers) return rc;
  /* A read lock's readers: its hash's owner fields. */
  int err;
  holders_req stack, *x = dl_reqop_new(R, &stack, sizeof stack, false, NULL,
                                       &err, hkeys_send, hkeys_result);
  if (x == NULL) return err;
  x->key = key;
  x->cb = cb;
  x->ud = ud;
  return dl_reqop_run(&x->r, NULL, NULL, NULL);
}

/* ---- detect_deadlocks: following the owners ---- */

bool dl_wait_walk_start(dl_wait_walk *w, dl_wait_rec *rec, const dl_acquire *a,
                        const dl_backend_env *env) {
  if (!a->detect || rec->walked || !rec->noted) return false;
  rec->walked = true;
  if (!dl_walk_init(w, a)) return false;
  w->lazy = true;
  snprintf(w->f[0].kind, sizeof w->f[0].kind, "%s", kind_word(a->lock->kind));
  int rc;
  if (dl_walk_key(w, env, &rc) == NULL) { /* out of memory: wait */
    dl_walk_free(w);
    return false;
  }
  return true;
}

int dl_wait_walk_send(dl_redis *R, dl_pend *p, dl_wait_walk *w) {
  if (w->ask) {
    char key[DL_WAIT_KEY_MAX];
    snprintf(key, sizeof key, "%s%s%s", w->prefix, DL_WAIT_RECORD, w->ask);
    const char *argv[] = {"GET", key};
    return dl_redis_step_command(R, p, 2, argv);
  }
  const char *argv[] = {
      strcmp(w->f[w->depth].kind, "plain") == 0 ? "GET" : "HKEYS", w->key};
  return dl_redis_step_command(R, p, 2, argv);
}

/* The holders' answer (HKEYS' fields, a plain lock's value) to the walk:
 * every owner field (a read lock's every reader). */
static void holders_of(dl_wait_walk *w, const redisReply *r) {
  const redisReply *one[1] = {r};
  const redisReply *const *v = r->type == REDIS_REPLY_ARRAY
                                   ? (const redisReply *const *)r->element
                                   : one;
  size_t n = r->type == REDIS_REPLY_ARRAY ? r->elements : 1;
  for (size_t i = 0; i < n; i++) {
    if (v[i]->type != REDIS_REPLY_STRING || strcmp(v[i]->str, "mode") == 0 ||
        strncmp(v[i]->str, "dlock:", 6) == 0 || v[i]->len >= DL_OWNER_MAX)
      continue;
    if (dl_walk_holder(v[i]->str, w) != 0) break;
  }
}

/* A holder's record (what it waits for) to the walk; none if it has none
 * or it does not parse. */
static void record_of(dl_wait_walk *w, const redisReply *r) {
  char kind[8];
  long long deadline;
  size_t il;
  int n = 0;
  if (r->type == REDIS_REPLY_STRING &&
      sscanf(r->str, "%7s %lld %zu\n%n", kind, &deadline, &il, &n) == 3 &&
      n > 0 && (size_t)n + il < r->len &&
      strlen(w->prefix) + (r->len - n - il) < DL_WAIT_KEY_MAX)
    dl_walk_waits(w, r->str + n + il, kind);
  else
    dl_walk_waits(w, NULL, NULL);
}

int dl_wait_walk_result(dl_redis *R, dl_pend *p, dl_wait_walk *w) {
  redisReply *r = p->reply;
  p->reply = NULL;
  int rc = 0;
  if (p->rc == 0 && r != NULL) {
    if (w->ask)
      record_of(w, r);
    else
      holders_of(w, r);
    rc = dl_walk_step(w, &R->env, 0);
    /* Next: a lock's holders (its key), or an owner's record (w->ask). */
    int kr;
    if (rc == 1 && dl_walk_key(w, &R->env, &kr) == NULL)
      rc = kr;
    else if (rc == 2)
      rc = 1;
  } /* else cannot tell: wait */
  if (r) freeReplyObject(r);
  if (rc != 1) dl_walk_free(w);
  return rc;
}
