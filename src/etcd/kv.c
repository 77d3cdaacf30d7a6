/* kv.c: what the kinds on plain keys (latch.c, queue.c) share: a txn's
 * compares and operations written in the gateway's JSON, its answer's
 * parts, and a key's or value's bytes. */
#include "etcdb.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dl_etcd_json_add(etcd_json *j, const char *fmt, ...) {
  if (j->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n =
        vsnprintf(j->p ? j->p + j->n : NULL, j->p ? j->cap - j->n : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      j->oom = true;
      return;
    }
    if (j->p && j->n + (size_t)n < j->cap) {
      j->n += (size_t)n;
      return;
    }
    size_t cap = (j->cap ? j->cap * 2 : 512) + (size_t)n;
    char *p = realloc(j->p, cap);
    if (p == NULL) {
      j->oom = true;
      return;
    }
    j->p = p;
    j->cap = cap;
  }
}

void dl_etcd_json_free(etcd_json *j) {
  free(j->p);
  memset(j, 0, sizeof *j);
}

/* "," unless the text so far ends a '[' (the list's first item). */
static const char *sep(const etcd_json *j) {
  return j->n && j->p[j->n - 1] != '[' ? "," : "";
}

/* Appends ,"name":"<key in base64>" (bytes of n, or strlen). */
static void add_b64(etcd_json *j, const char *name, const char *s, size_t n) {
  char *b = malloc(4 * ((n + 2) / 3) + 1);
  if (b == NULL) {
    j->oom = true;
    return;
  }
  dl_etcd_b64(s, n, b);
  dl_etcd_json_add(j, ",\"%s\":\"%s\"", name, b);
  free(b);
}

/* The "key" and, unless end is NULL, the "range_end" of a request. */
static void add_range(etcd_json *j, const char *key, const char *end) {
  add_b64(j, "key", key, strlen(key));
  if (end) add_b64(j, "range_end", end, strlen(end));
}

void dl_etcd_cmp_absent(etcd_json *j, const char *key, const char *end) {
  dl_etcd_json_add(j, "%s{\"target\":\"VERSION\",\"version\":\"0\"", sep(j));
  add_range(j, key, end);
  dl_etcd_json_add(j, "}");
}

void dl_etcd_cmp_mod(etcd_json *j, const char *key, int64_t mod) {
  dl_etcd_json_add(j, "%s{\"target\":\"MOD\",\"mod_revision\":\"%" PRId64 "\"",
                   sep(j), mod);
  add_range(j, key, NULL);
  dl_etcd_json_add(j, "}");
}

void dl_etcd_op_range(etcd_json *j, const char *key, const char *end,
                      const char *more) {
  dl_etcd_json_add(j, "%s{\"request_range\":{\"serializable\":false", sep(j));
  add_range(j, key, end);
  dl_etcd_json_add(j, "%s}}", more ? more : "");
}

void dl_etcd_op_put(etcd_json *j, const char *key, const void *value,
                    size_t len) {
  dl_etcd_op_put_on(j, key, value, len, 0);
}

void dl_etcd_op_put_on(etcd_json *j, const char *key, const void *value,
                       size_t len, int64_t lease) {
  dl_etcd_json_add(j, "%s{\"request_put\":{\"lease\":\"%" PRId64 "\"", sep(j),
                   lease);
  add_range(j, key, NULL);
  add_b64(j, "value", value ? value : "", value ? len : 0);
  dl_etcd_json_add(j, "}}");
}

void dl_etcd_op_delete(etcd_json *j, const char *key) {
  dl_etcd_json_add(j, "%s{\"request_delete_range\":{\"prev_kv\":false", sep(j));
  add_range(j, key, NULL);
  dl_etcd_json_add(j, "}}");
}

int dl_etcd_txn_post(dl_etcd *e, etcd_json *j, json_object **out) {
  *out = NULL;
  int rc = j->oom
               ? dl_seterr(e->err, DLOCK_ENOMEM, "out of memory")
               : dl_etcd_call(e, "/v3/kv/txn", j->p,
                              dl_now_ms() + e->command_timeout_ms, out, NULL);
  dl_etcd_json_free(j);
  return rc;
}

bool dl_etcd_txn_succeeded(json_object *r) {
  json_object *s = dl_etcd_get(r, "succeeded");
  return s && json_object_get_boolean(s);
}

int64_t dl_etcd_txn_rev(json_object *r) {
  return dl_etcd_i64(dl_etcd_get(r, "header"), "revision");
}

json_object *dl_etcd_txn_kv(json_object *r, int i) {
  return dl_etcd_kv0(dl_etcd_txn_resp(r, i, "response_range"));
}

int64_t dl_etcd_txn_count(json_object *r, int i) {
  return dl_etcd_i64(dl_etcd_txn_resp(r, i, "response_range"), "count");
}

int dl_etcd_kv_key(json_object *kv, char *buf, size_t len) {
  json_object *k = dl_etcd_get(kv, "key");
  return k ? dl_etcd_unb64(json_object_get_string(k), buf, len) : -1;
}

char *dl_etcd_kv_value(json_object *kv, size_t *len) {
  json_object *v = dl_etcd_get(kv, "value"); /* absent: empty */
  const char *s = v ? json_object_get_string(v) : "";
  size_t cap = strlen(s) / 4 * 3 + 4;
  char *out = malloc(cap);
  int n = out ? dl_etcd_unb64(s, out, cap) : -1;
  if (n < 0) {
    free(out);
    return NULL;
  }
  *len = (size_t)n;
  return out;
}
