/* fence.c: fenced resources on etcd (the seam's fence): one key, the URL's
 * prefix + the resource, whose value is "dlock-fence <token>\n" and then
 * the value's bytes (docs/WIRE.md). A write reads the key (its
 * mod_revision, and whether keys live under it: a lock's), decides, and
 * writes with a txn that compares that mod_revision (create_revision 0
 * where there was none) and, for the held form, the hold's key's
 * create_revision, as Go's Mutex.IsOwner does; a key changed in between
 * fails the compare, and the write is decided again on a fresh read. The
 * value's form is core's (fenced.c), shared with ZooKeeper. */
#include "etcdb.h"

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

static int64_t deadline_of(dl_etcd *e) {
  return dl_now_ms() + e->command_timeout_ms;
}

/* Reads the key k (and how many keys live under k + "/") into *n: 0,
 * DLOCK_EWRONGTYPE (recorded) when it is not a fenced resource, or a
 * negative code. */
static int read_key(dl_etcd *e, const char *k, fence_key *n) {
  memset(n, 0, sizeof *n);
  char pfx[ETCD_KEY_MAX + 2], k64[B64(ETCD_KEY_MAX)], p64[B64(ETCD_KEY_MAX)],
      end64[B64(ETCD_KEY_MAX)], body[4 * B64(ETCD_KEY_MAX) + 200];
  snprintf(pfx, sizeof pfx, "%s/", k);
  dl_etcd_b64(k, strlen(k), k64);
  dl_etcd_b64(pfx, strlen(pfx), p64);
  dl_etcd_prefix_end(pfx, end64);
  snprintf(body, sizeof body,
           "{\"success\":[{\"request_range\":{\"key\":\"%s\"}},"
           "{\"request_range\":{\"key\":\"%s\",\"range_end\":\"%s\","
           "\"count_only\":true}}]}",
           k64, p64, end64);
  json_object *r;
  int rc = dl_etcd_call(e, "/v3/kv/txn", body, deadline_of(e), &r, NULL);
  if (rc != 0) return rc;
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
                   under > 0 ? "keys under it (a lock's)" : "another value", k);
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

/* A set: 1 written, 0 refused (f->fence the higher fence), DLOCK_ELOST,
 * or a negative code. */
static int fence_set(dl_etcd *e, const char *k, dl_fence_req *f) {
  char hkey[ETCD_KEY_MAX], h64[B64(ETCD_KEY_MAX)], k64[B64(ETCD_KEY_MAX)];
  int64_t hrev = 0;
  if (f->hold) {
    if (!hold_of(e, f->hold, hkey, sizeof hkey, &hrev))
      return dl_seterr(e->err, DLOCK_ELOST,
                       "'%s' is not held by %s: '%s' not written",
                       f->hold->name, f->hold->owner, f->name);
    dl_etcd_b64(hkey, strlen(hkey), h64);
  }
  dl_etcd_b64(k, strlen(k), k64);
  size_t dlen = 0;
  char *data = dl_fenced_pack(f->token, f->value, f->len, &dlen);
  char *v64 = data ? malloc(B64(dlen)) : NULL;
  char *body = data ? malloc(B64(dlen) + 3 * B64(ETCD_KEY_MAX) + 400) : NULL;
  int rc = 0;
  if (data == NULL || v64 == NULL || body == NULL)
    rc = dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  else
    dl_etcd_b64(data, dlen, v64);
  for (int i = 0; i < TRIES && rc == 0; i++) {
    fence_key n;
    if ((rc = read_key(e, k, &n)) != 0) break;
    free(n.data);
    if (n.there && f->token < n.fence) {
      f->fence = n.fence;
      break; /* rc 0: refused */
    }
    char held[B64(ETCD_KEY_MAX) + 100] = "";
    if (f->hold)
      snprintf(held, sizeof held,
               ",{\"target\":\"CREATE\",\"key\":\"%s\","
               "\"create_revision\":\"%" PRId64 "\"}",
               h64, hrev);
    sprintf(body,
            "{\"compare\":[{\"target\":\"%s\",\"key\":\"%s\",\"%s\":\"%" PRId64
            "\"}%s],\"success\":[{\"request_put\":{\"key\":\"%s\","
            "\"value\":\"%s\"}}],\"failure\":[{\"request_range\":"
            "{\"key\":\"%s\"}}]}",
            n.there ? "MOD" : "CREATE", k64,
            n.there ? "mod_revision" : "create_revision", n.mod, held, k64, v64,
            f->hold ? h64 : k64);
    json_object *r;
    if ((rc = dl_etcd_call(e, "/v3/kv/txn", body, deadline_of(e), &r, NULL)) !=
        0)
      break;
    json_object *ok = dl_etcd_get(r, "succeeded");
    json_object *hk = dl_etcd_kv0(dl_etcd_txn_resp(r, 0, "response_range"));
    if (ok && json_object_get_boolean(ok)) {
      f->fence = f->token;
      rc = 1;
    } else if (f->hold && dl_etcd_i64(hk, "create_revision") != hrev) {
      rc = dl_seterr(e->err, DLOCK_ELOST,
                     "'%s' is not held by %s any more (its key is gone): "
                     "'%s' not written",
                     f->hold->name, f->hold->owner, f->name);
    } /* else changed in between: decide again */
    json_object_put(r);
  }
  free(data);
  free(v64);
  free(body);
  if (rc == 0 && f->fence == 0)
    rc = dl_seterr(e->err, DLOCK_EBUSY, "%s kept changing", k);
  return rc;
}

int dl_etcd_fence(dl_backend *b, dl_fence_req *f) {
  dl_etcd *e = (dl_etcd *)b;
  char k[ETCD_KEY_MAX], k64[B64(ETCD_KEY_MAX)];
  if (snprintf(k, sizeof k, "%s%s", e->prefix, f->key) >= (int)sizeof k)
    return dl_seterr(e->err, DLOCK_ENAMETOOLONG, "the key is too long");
  if (f->op == DL_FENCE_SET) return fence_set(e, k, f);
  dl_etcd_b64(k, strlen(k), k64);
  for (int i = 0; i < TRIES; i++) {
    fence_key n;
    int rc = read_key(e, k, &n);
    if (rc != 0 || !n.there) return rc;
    if (f->op == DL_FENCE_GET) {
      f->got_len = n.len - (size_t)n.off;
      memmove(n.data, n.data + n.off, f->got_len + 1); /* its NUL too */
      f->got = n.data;
      f->fence = n.fence;
      return 1;
    }
    free(n.data);
    char body[2 * B64(ETCD_KEY_MAX) + 200];
    snprintf(body, sizeof body,
             "{\"compare\":[{\"target\":\"MOD\",\"key\":\"%s\","
             "\"mod_revision\":\"%" PRId64 "\"}],\"success\":["
             "{\"request_delete_range\":{\"key\":\"%s\"}}]}",
             k64, n.mod, k64);
    json_object *r;
    if ((rc = dl_etcd_call(e, "/v3/kv/txn", body, deadline_of(e), &r, NULL)) !=
        0)
      return rc;
    json_object *ok = dl_etcd_get(r, "succeeded");
    bool done = ok && json_object_get_boolean(ok);
    json_object_put(r);
    if (done) return 1;
  }
  return dl_seterr(e->err, DLOCK_EBUSY, "%s kept changing", k);
}
