/* fence.c: fenced resources on etcd (the seam's fence): one key, the URL's
 * prefix + the resource, whose value is "dlock-fence <token>\n" and then
 * the value's bytes (docs/WIRE.md). A write reads the key (its
 * mod_revision, and whether keys live under it: a lock's), decides, and
 * writes with a txn that compares that mod_revision (create_revision 0
 * where there was none) and, for the held form, the hold's key's
 * create_revision, as Go's Mutex.IsOwner does; a key changed in between
 * fails the compare, and the write is decided again on a fresh read. The
 * value's form is core's (fenced.c), shared with ZooKeeper. Two drivers
 * on one set of request builders and answer parsers: the blocking entry,
 * and the event-loop client's own (fence_async), on the loop's multi
 * handle (acall.c), no thread. */
#include "aop.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define B64(n) (4 * (((n) + 2) / 3) + 1)
/* Tries of a write whose key keeps changing under it. */
#define TRIES 64

typedef struct fence_key {
  bool there;
  uint64_t fence;
  int64_t mod;
  char *data; /* the whole value (malloc'ed), len bytes and a NUL */
  size_t len;
  long off; /* where the resource's value begins in data */
} fence_key;

/* An operation's parts, made once for all its tries. */
struct etcd_fen {
  dl_fence_req *f;
  char k[ETCD_KEY_MAX], k64[B64(ETCD_KEY_MAX)];
  char h64[B64(ETCD_KEY_MAX)]; /* a held set's hold key, and its */
  int64_t hrev;                /* create revision */
  char *v64;                   /* a set's value, packed, in base64 */
  char *body;                  /* room for a try's guarded txn */
  bool again; /* its last txn failed its compare: decide again */
  int tries;  /* the event-loop driver's */
};

static int64_t deadline_of(dl_etcd *e) {
  return dl_now_ms() + e->command_timeout_ms;
}

/* The read of s->k (and of how many keys live under k + "/"). */
#define READ_BODY_MAX (4 * B64(ETCD_KEY_MAX) + 200)
static void read_body(const etcd_fen *s, char *body, size_t len) {
  char pfx[ETCD_KEY_MAX + 2], p64[B64(ETCD_KEY_MAX)], end64[B64(ETCD_KEY_MAX)];
  snprintf(pfx, sizeof pfx, "%s/", s->k);
  dl_etcd_b64(pfx, strlen(pfx), p64);
  dl_etcd_prefix_end(pfx, end64);
  snprintf(body, len,
           "{\"success\":[{\"request_range\":{\"key\":\"%s\"}},"
           "{\"request_range\":{\"key\":\"%s\",\"range_end\":\"%s\","
           "\"count_only\":true}}]}",
           s->k64, p64, end64);
}

/* The read's answer r (put here) into *n: 0, DLOCK_EWRONGTYPE (recorded)
 * when the key is not a fenced resource, or DLOCK_ENOMEM. */
static int read_answer(dl_etcd *e, const etcd_fen *s, json_object *r,
                       fence_key *n) {
  memset(n, 0, sizeof *n);
  int rc = 0;
  json_object *kv = dl_etcd_kv0(dl_etcd_txn_resp(r, 0, "response_range"));
  int64_t under =
      dl_etcd_i64(dl_etcd_txn_resp(r, 1, "response_range"), "count");
  json_object *v = kv ? dl_etcd_get(kv, "value") : NULL;
  const char *v64 = v ? json_object_get_string(v) : "";
  size_t cap = strlen(v64) / 4 * 3 + 4;
  char *data = kv ? malloc(cap) : NULL;
  int len = data ? dl_etcd_unb64(v64, data, cap) : 0;
  if (kv && data == NULL) rc = DLOCK_ENOMEM;
  uint64_t fence = 0;
  long off = len > 0 ? dl_fenced_unpack(data, (size_t)len, &fence) : -1;
  if (rc == 0 && (under > 0 || (kv && off < 0)))
    rc = dl_seterr(e->err, DLOCK_EWRONGTYPE,
                   "not a fenced resource: %s (%s; nothing changed)",
                   under > 0 ? "keys under it (a lock's)" : "another value",
                   s->k);
  else if (rc == 0 && kv)
    *n = (fence_key){true, fence,       dl_etcd_i64(kv, "mod_revision"),
                     data, (size_t)len, off};
  if (rc == DLOCK_ENOMEM) rc = dl_seterr(e->err, rc, "out of memory");
  if (!n->there) free(data);
  json_object_put(r);
  return rc;
}

/* The hold's etcd key and create revision: true, or false (none). */
static bool hold_of(dl_etcd *e, const dl_lock_ref *l, char *key, size_t len,
                    int64_t *rev) {
  bool found = false;
  pthread_mutex_lock(&e->mu);
  for (etcd_hold *h = e->holds; h && !found; h = h->next)
    if (h->held && strcmp(h->lock, l->key) == 0 &&
        strcmp(h->owner, l->owner) == 0) {
      snprintf(key, len, "%s", h->key);
      *rev = h->rev;
      found = true;
    }
  pthread_mutex_unlock(&e->mu);
  return found;
}

/* s made for f (s cleared first): 0, or a negative code recorded
 * (DLOCK_ELOST: a held set's lock not held). */
static int fen_begin(dl_etcd *e, dl_fence_req *f, etcd_fen *s) {
  memset(s, 0, sizeof *s);
  s->f = f;
  if (snprintf(s->k, sizeof s->k, "%s%s", e->prefix, f->key) >=
      (int)sizeof s->k)
    return dl_seterr(e->err, DLOCK_ENAMETOOLONG, "the key is too long");
  dl_etcd_b64(s->k, strlen(s->k), s->k64);
  if (f->op != DL_FENCE_SET) {
    s->body = malloc(2 * B64(ETCD_KEY_MAX) + 200);
    return s->body ? 0 : dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  }
  if (f->hold) {
    char hkey[ETCD_KEY_MAX];
    if (!hold_of(e, f->hold, hkey, sizeof hkey, &s->hrev))
      return dl_seterr(e->err, DLOCK_ELOST,
                       "'%s' is not held by %s: '%s' not written",
                       f->hold->name, f->hold->owner, f->name);
    dl_etcd_b64(hkey, strlen(hkey), s->h64);
  }
  size_t dlen = 0;
  char *data = dl_fenced_pack(f->token, f->value, f->len, &dlen);
  s->v64 = data ? malloc(B64(dlen)) : NULL;
  s->body = data ? malloc(B64(dlen) + 3 * B64(ETCD_KEY_MAX) + 400) : NULL;
  if (s->v64 && s->body) dl_etcd_b64(data, dlen, s->v64);
  free(data);
  return s->v64 && s->body ? 0
                           : dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
}

/* After a read (*rc its result, *n its key when 0): true when the txn in
 * s->body is to be sent next, else false with the operation's result in
 * *rc (a get's value handed to s->f). */
static bool decide(etcd_fen *s, fence_key *n, int *rc) {
  dl_fence_req *f = s->f;
  s->again = false;
  if (*rc != 0) return false;
  if (!n->there && f->op != DL_FENCE_SET) return false; /* 0: none */
  if (f->op == DL_FENCE_GET) {
    f->got_len = n->len - (size_t)n->off;
    memmove(n->data, n->data + n->off, f->got_len + 1); /* its NUL too */
    f->got = n->data;
    f->fence = n->fence;
    *rc = 1;
    return false;
  }
  free(n->data);
  if (f->op == DL_FENCE_DEL) {
    sprintf(s->body,
            "{\"compare\":[{\"target\":\"MOD\",\"key\":\"%s\","
            "\"mod_revision\":\"%" PRId64 "\"}],\"success\":["
            "{\"request_delete_range\":{\"key\":\"%s\"}}]}",
            s->k64, n->mod, s->k64);
    return true;
  }
  if (n->there && f->token < n->fence) {
    f->fence = n->fence;
    return false; /* 0: refused */
  }
  char held[B64(ETCD_KEY_MAX) + 100] = "";
  if (f->hold)
    snprintf(held, sizeof held,
             ",{\"target\":\"CREATE\",\"key\":\"%s\","
             "\"create_revision\":\"%" PRId64 "\"}",
             s->h64, s->hrev);
  sprintf(s->body,
          "{\"compare\":[{\"target\":\"%s\",\"key\":\"%s\",\"%s\":\"%" PRId64
          "\"}%s],\"success\":[{\"request_put\":{\"key\":\"%s\","
          "\"value\":\"%s\"}}],\"failure\":[{\"request_range\":"
          "{\"key\":\"%s\"}}]}",
          n->there ? "MOD" : "CREATE", s->k64,
          n->there ? "mod_revision" : "create_revision", n->mod, held, s->k64,
          s->v64, f->hold ? s->h64 : s->k64);
  return true;
}

/* The guarded txn's answer r (put here): 1 done (a set written, a
 * delete deleted), 0 the key changed in between (s->again: decide again
 * on a fresh read), or DLOCK_ELOST (a held set's hold key gone). */
static int txn_answer(dl_etcd *e, etcd_fen *s, json_object *r) {
  dl_fence_req *f = s->f;
  int rc = 0;
  json_object *hk = dl_etcd_kv0(dl_etcd_txn_resp(r, 0, "response_range"));
  if (dl_etcd_txn_succeeded(r)) {
    if (f->op == DL_FENCE_SET) f->fence = f->token;
    rc = 1;
  } else if (f->op == DL_FENCE_SET && f->hold &&
             dl_etcd_i64(hk, "create_revision") != s->hrev) {
    rc = dl_seterr(e->err, DLOCK_ELOST,
                   "'%s' is not held by %s any more (its key is gone): "
                   "'%s' not written",
                   f->hold->name, f->hold->owner, f->name);
  } else {
    s->again = true;
  }
  json_object_put(r);
  return rc;
}

static void fen_clear(etcd_fen *s) {
  free(s->v64);
  free(s->body);
  s->v64 = s->body = NULL;
}

/* The operation's result after its last try's rc (s cleared). */
static int fen_end(dl_etcd *e, etcd_fen *s, int rc) {
  fen_clear(s);
  if (rc == 0 && s->again)
    rc = dl_seterr(e->err, DLOCK_EBUSY, "%s kept changing", s->k);
  return rc;
}

void dl_etcd_fen_free(etcd_fen *s) {
  if (s == NULL) return;
  fen_clear(s);
  free(s);
}

int dl_etcd_fence(dl_backend *b, dl_fence_req *f) {
  dl_etcd *e = (dl_etcd *)b;
  etcd_fen s;
  int rc = fen_begin(e, f, &s);
  for (int i = 0; i < TRIES && rc == 0; i++) {
    char body[READ_BODY_MAX];
    read_body(&s, body, sizeof body);
    json_object *r;
    fence_key n;
    rc = dl_etcd_call(e, "/v3/kv/txn", body, deadline_of(e), &r, NULL);
    if (rc == 0) rc = read_answer(e, &s, r, &n);
    if (!decide(&s, &n, &rc)) break;
    rc = dl_etcd_call(e, "/v3/kv/txn", s.body, deadline_of(e), &r, NULL);
    if (rc == 0) rc = txn_answer(e, &s, r);
  }
  return fen_end(e, &s, rc);
}

/* ---- the event-loop client's: the same tries, on the loop ---- */
static void fen_finish(dl_async *op, int rc) {
  dl_etcd_op_end(op, fen_end(op->e, op->fen, rc));
}

static void on_read(void *ud, int rc, json_object *o, int code);

static void send_read(dl_async *op) {
  char body[READ_BODY_MAX];
  read_body(op->fen, body, sizeof body);
  dl_etcd_op_next(op, "/v3/kv/txn", body, on_read, 0);
}

static void on_txn(void *ud, int rc, json_object *o, int code) {
  (void)code;
  dl_async *op = ud;
  op->call = NULL;
  if (rc == 0) rc = txn_answer(op->e, op->fen, o);
  if (rc == 0 && ++op->fen->tries < TRIES)
    send_read(op);
  else
    fen_finish(op, rc);
}

static void on_read(void *ud, int rc, json_object *o, int code) {
  (void)code;
  dl_async *op = ud;
  op->call = NULL;
  fence_key n;
  if (rc == 0) rc = read_answer(op->e, op->fen, o, &n);
  if (decide(op->fen, &n, &rc))
    dl_etcd_op_next(op, "/v3/kv/txn", op->fen->body, on_txn, 0);
  else
    fen_finish(op, rc);
}

int dl_etcd_fence_async(dl_backend *b, dl_fence_req *f, dl_done_fn done,
                        void *ud, dl_async **out) {
  dl_etcd *e = (dl_etcd *)b;
  dl_async *op = dl_etcd_op_new(e, AOP_FENCE, done, ud);
  etcd_fen *s = op ? malloc(sizeof *s) : NULL;
  if (s == NULL) {
    if (op) dl_etcd_op_drop(op);
    return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  }
  op->fen = s;
  int rc = fen_begin(e, f, s);
  if (rc != 0) {
    rc = dl_etcd_op_later(op, rc);
  } else {
    char body[READ_BODY_MAX];
    read_body(s, body, sizeof body);
    rc = dl_etcd_op_call(op, "/v3/kv/txn", body, on_read);
  }
  if (rc == 0) *out = op;
  return rc;
}
