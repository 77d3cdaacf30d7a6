/* line.c: the requests on a line of keys under one prefix, oldest first
 * (Go's Mutex and Election, contrib/recipes' RWMutex, the semaphore's
 * waiters): a key created in one txn that also reads the line's owner,
 * the predecessor of a key, a waiter's look (its own key still there, and
 * the key before it), a key's create revision, a key deleted: the bodies
 * and answers both drivers share, and the blocking calls. */
#include "pbtxn.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define B64(n) (4 * (((n) + 2) / 3) + 1)

size_t dl_etcd_range_end(const char *pfx, char *end) {
  size_t n = strlen(pfx);
  memcpy(end, pfx, n);
  /* pfx ends with '/': its last byte + 1 ('0') ends the range. */
  end[n - 1] = (char)(end[n - 1] + 1);
  return n;
}

void dl_etcd_prefix_end(const char *pfx, char *end_b64) {
  char end[ETCD_KEY_MAX];
  dl_etcd_b64(end, dl_etcd_range_end(pfx, end), end_b64);
}

/* A txn's body: a compare of the create revision of key (b64) with rev,
 * then the success and failure ops (JSON arrays' insides). */
static char *txn_body(const char *k64, int64_t rev, const char *success,
                      const char *failure) {
  size_t n = strlen(success) + strlen(failure) + strlen(k64) + 200;
  char *body = malloc(n);
  if (body)
    snprintf(body, n,
             "{\"compare\":[{\"target\":\"CREATE\",\"key\":\"%s\","
             "\"create_revision\":\"%" PRId64 "\"}],\"success\":[%s],"
             "\"failure\":[%s]}",
             k64, rev, success, failure);
  return body;
}

/* Posts a txn's body (NULL: out of memory), and frees it. */
static int txn_post(dl_etcd *e, char *body, int64_t deadline,
                    json_object **out) {
  if (body == NULL) return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  int rc = dl_etcd_call(e, "/v3/kv/txn", body, deadline, out, NULL);
  free(body);
  return rc;
}

void dl_etcd_delete_key_body(const char *key, char *body, size_t len) {
  char k64[B64(ETCD_KEY_MAX)];
  dl_etcd_b64(key, strlen(key), k64);
  snprintf(body, len, "{\"key\":\"%s\"}", k64);
}

void dl_etcd_delete_key(dl_etcd *e, const char *key) {
  char body[ETCD_DELETE_KEY_BODY_MAX];
  dl_etcd_delete_key_body(key, body, sizeof body);
  json_object *r;
  if (dl_etcd_call(e, "/v3/kv/deleterange", body,
                   dl_now_ms() + e->command_timeout_ms, &r, NULL) == 0)
    json_object_put(r);
}

int dl_etcd_foreign_in_line(dl_etcd *e, const char *key) {
  return dl_seterr(e->err, DLOCK_EWRONGTYPE,
                   "a key on no lease is in the line of %s: another kind "
                   "at the name, no lock's or election's (nothing of ours "
                   "left)",
                   key);
}

/* The line's key kv (NULL: none) into pred: 1, 0 none, or
 * DLOCK_EWRONGTYPE recorded when it is on no lease (mine: whose line). */
static int pred_of(dl_etcd *e, json_object *kv, const char *mine, char *pred,
                   size_t len) {
  json_object *k = dl_etcd_get(kv, "key");
  if (k == NULL || dl_etcd_unb64(json_object_get_string(k), pred, len) < 0)
    return 0;
  return dl_etcd_i64(kv, "lease") == 0 ? dl_etcd_foreign_in_line(e, mine) : 1;
}

int dl_etcd_predecessor(dl_etcd *e, const char *pfx, int64_t rev, char *pred,
                        size_t len, int64_t *at, int64_t deadline) {
  char p64[B64(ETCD_KEY_MAX)], end64[B64(ETCD_KEY_MAX)];
  char body[3 * B64(ETCD_KEY_MAX)];
  dl_etcd_b64(pfx, strlen(pfx), p64);
  dl_etcd_prefix_end(pfx, end64);
  snprintf(body, sizeof body,
           "{\"key\":\"%s\",\"range_end\":\"%s\",\"limit\":\"1\","
           "\"sort_order\":\"DESCEND\",\"sort_target\":\"CREATE\","
           "\"max_create_revision\":\"%" PRId64 "\",\"keys_only\":true}",
           p64, end64, rev - 1);
  json_object *r;
  int rc = dl_etcd_call(e, "/v3/kv/range", body, deadline, &r, NULL);
  if (rc != 0) return rc;
  *at = dl_etcd_i64(dl_etcd_get(r, "header"), "revision");
  rc = pred_of(e, dl_etcd_kv0(r), pfx, pred, len);
  json_object_put(r);
  return rc;
}

char *dl_etcd_look_body(const char *key, const char *pfx, int64_t rev) {
  char k64[B64(ETCD_KEY_MAX)], p64[B64(ETCD_KEY_MAX)], end64[B64(ETCD_KEY_MAX)];
  char range[3 * B64(ETCD_KEY_MAX)];
  dl_etcd_b64(key, strlen(key), k64);
  dl_etcd_b64(pfx, strlen(pfx), p64);
  dl_etcd_prefix_end(pfx, end64);
  snprintf(range, sizeof range,
           "{\"request_range\":{\"key\":\"%s\",\"range_end\":\"%s\","
           "\"limit\":\"1\",\"sort_order\":\"DESCEND\","
           "\"sort_target\":\"CREATE\",\"max_create_revision\":\"%" PRId64
           "\",\"keys_only\":true}}",
           p64, end64, rev - 1);
  return txn_body(k64, rev, range, "");
}

int dl_etcd_look_answer(dl_etcd *e, const char *key, json_object *r, char *pred,
                        size_t len, int64_t *at) {
  json_object *s = dl_etcd_get(r, "succeeded");
  if (s == NULL || !json_object_get_boolean(s)) {
    json_object_put(r);
    return dl_seterr(e->err, DLOCK_ELOST,
                     "our etcd key %s went while we waited (the lease "
                     "ended, or it was deleted)",
                     key);
  }
  *at = dl_etcd_i64(dl_etcd_get(r, "header"), "revision");
  int rc = pred_of(e, dl_etcd_kv0(dl_etcd_txn_resp(r, 0, "response_range")),
                   key, pred, len);
  json_object_put(r);
  return rc;
}

int dl_etcd_look(dl_etcd *e, const char *key, const char *pfx, int64_t rev,
                 char *pred, size_t len, int64_t *at, int64_t deadline) {
  json_object *r;
  int rc = txn_post(e, dl_etcd_look_body(key, pfx, rev), deadline, &r);
  return rc != 0 ? rc : dl_etcd_look_answer(e, key, r, pred, len, at);
}

void dl_etcd_create_rev_body(const char *key, char *body, size_t len) {
  char k64[B64(ETCD_KEY_MAX)];
  dl_etcd_b64(key, strlen(key), k64);
  snprintf(body, len, "{\"key\":\"%s\",\"keys_only\":true}", k64);
}

int64_t dl_etcd_create_rev_answer(json_object *r) {
  int64_t rev = dl_etcd_i64(dl_etcd_kv0(r), "create_revision");
  json_object_put(r);
  return rev;
}

int64_t dl_etcd_create_rev(dl_etcd *e, const char *key, int64_t deadline) {
  char body[ETCD_CREATE_REV_BODY_MAX];
  dl_etcd_create_rev_body(key, body, sizeof body);
  json_object *r;
  int rc = dl_etcd_call(e, "/v3/kv/range", body, deadline, &r, NULL);
  return rc != 0 ? rc : dl_etcd_create_rev_answer(r);
}

int dl_etcd_put_and_read(dl_etcd *e, etcd_hold *h, const char *value,
                         const char *pfx, bool fresh, int64_t deadline,
                         int64_t *owner_rev) {
  for (int tries = 0;; tries++) {
    etcd_claim_txn t;
    dl_etcd_claim_txn(&t, h, value, pfx);
    ProtobufCMessage *r;
    int rc = dl_etcd_call_pb(e, "/v3/kv/txn", &t.txn.base, deadline, &r, NULL);
    if (rc == 0) rc = dl_etcd_claim_answer(e, h, r, fresh, owner_rev);
    if (rc != 2) return rc;
    if (tries == ETCD_FRESH_TRIES)
      return dl_seterr(e->err, DLOCK_EPROTO,
                       "etcd: %s of ours comes back at each put", h->key);
    rc = dl_etcd_delete_at(e, h->key, h->rev, deadline);
    if (rc < 0) return rc; /* h->rev: the acquire's failure path deletes it */
    h->rev = 0;
  }
}
