/* latch.c: the count-down latch (Redisson's RCountDownLatch) on etcd, on
 * dlock's own layout (etcd's recipes have none; docs/WIRE.md): the key
 * P + NAME holds the count in decimal ASCII while one runs and goes when
 * it reaches zero, as Redisson's string key does. Every update is a txn
 * compared on what it read (the key's absence, or its mod revision); a
 * waiter watches the key until it is deleted. Anything else at the key (a
 * value that is no number), or any key under P + NAME + "/" (another kind
 * at the name: a lock, a queue), is refused with DLOCK_EWRONGTYPE and left
 * as it is. The steps' halves (requests, answers, verdicts) serve both
 * drivers: the blocking entries here, the event loop's in alatch.c. */
#include "etcdb.h"
#include "sem.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dl_etcd_latch_names(dl_etcd *e, const dl_sync_ref *s,
                         etcd_latch_names *n) {
  snprintf(n->key, sizeof n->key, "%s%s", e->prefix, s->key);
  snprintf(n->sub, sizeof n->sub, "%s/", n->key);
  snprintf(n->end, sizeof n->end, "%s0", n->key); /* '/' + 1 */
}

/* A count as Redis' latch_update.lua takes it, -?[0-9]+ (v: len bytes and
 * a NUL): true with *count. */
static bool count_of(const char *v, size_t len, long long *count) {
  char *end = NULL;
  if (len == 0 || len >= 20 ||
      strspn(v + (v[0] == '-'), "0123456789") != len - (v[0] == '-'))
    return false;
  *count = strtoll(v, &end, 10);
  return end != v && *end == '\0';
}

bool dl_etcd_latch_inspect_req(dl_etcd *e, const char *key, etcd_json *j) {
  char k[ETCD_KEY_MAX];
  if ((size_t)snprintf(k, sizeof k, "%s%s", e->prefix, key) >= sizeof k)
    return false;
  dl_etcd_json_add(j, "{\"success\":[");
  dl_etcd_op_range(j, k, NULL, NULL);
  dl_etcd_json_add(j, "]}");
  return true;
}

int dl_etcd_latch_inspect(dl_etcd *e, const char *key, dlock_lock_state *st) {
  etcd_json j = {0};
  if (!dl_etcd_latch_inspect_req(e, key, &j)) return 0;
  json_object *r;
  int rc = dl_etcd_txn_post(e, &j, &r);
  return rc != 0 ? rc : dl_etcd_latch_inspect_answer(e, r, st);
}

int dl_etcd_latch_inspect_answer(dl_etcd *e, json_object *r,
                                 dlock_lock_state *st) {
  int rc = 0;
  json_object *kv = dl_etcd_txn_kv(r, 0);
  if (kv) {
    size_t len = 0;
    char *v = dl_etcd_kv_value(kv, &len);
    if (v == NULL) rc = dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
    long long count;
    bool number = v && count_of(v, len, &count);
    if (number) st->counter = count;
    if (v) snprintf(st->type, sizeof st->type, number ? "latch" : "data");
    free(v);
  }
  json_object_put(r);
  return rc;
}

void dl_etcd_latch_look_req(const etcd_latch_names *n, etcd_json *j) {
  dl_etcd_json_add(j, "{\"success\":[");
  dl_etcd_op_range(j, n->key, NULL, NULL);
  dl_etcd_op_range(j, n->sub, n->end, ",\"limit\":\"1\",\"keys_only\":true");
  dl_etcd_json_add(j, "]}");
}

int dl_etcd_latch_look_answer(dl_etcd *e, const dl_sync_ref *s, json_object *r,
                              etcd_latch_look *lk) {
  int rc = 0;
  memset(lk, 0, sizeof *lk);
  lk->rev = dl_etcd_txn_rev(r);
  json_object *kv = dl_etcd_txn_kv(r, 0), *under = dl_etcd_txn_kv(r, 1);
  char found[ETCD_KEY_MAX] = "";
  if (under && dl_etcd_kv_key(under, found, sizeof found) < 0)
    snprintf(found, sizeof found, "(a key)");
  if (under) {
    rc = dl_seterr(e->err, DLOCK_EWRONGTYPE,
                   "'%s' is not a dlock count-down latch: the key '%s' is "
                   "under it (another kind at the name)",
                   s->name, found);
  } else if (kv) {
    size_t len = 0;
    char *v = dl_etcd_kv_value(kv, &len);
    if (v == NULL)
      rc = dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
    else if (!count_of(v, len, &lk->count))
      rc = dl_seterr(e->err, DLOCK_EWRONGTYPE,
                     "'%s' is not a dlock count-down latch: its key holds "
                     "a value that is not a number",
                     s->name);
    lk->there = true;
    lk->mod = dl_etcd_i64(kv, "mod_revision");
    lk->create = dl_etcd_i64(kv, "create_revision");
    free(v);
  }
  json_object_put(r);
  return rc;
}

/* Reads the latch: 0 with *lk, DLOCK_EWRONGTYPE recorded (something else
 * is there), or a negative code. */
static int look(dl_etcd *e, const dl_sync_ref *s, const etcd_latch_names *n,
                etcd_latch_look *lk) {
  etcd_json j = {0};
  dl_etcd_latch_look_req(n, &j);
  json_object *r;
  int rc = dl_etcd_txn_post(e, &j, &r);
  return rc != 0 ? rc : dl_etcd_latch_look_answer(e, s, r, lk);
}

void dl_etcd_latch_write_req(const etcd_latch_names *n,
                             const etcd_latch_look *lk, long long count,
                             etcd_json *j) {
  char v[32];
  int vl = snprintf(v, sizeof v, "%lld", count);
  dl_etcd_json_add(j, "{\"compare\":[");
  if (lk->there)
    dl_etcd_cmp_mod(j, n->key, lk->mod);
  else
    dl_etcd_cmp_absent(j, n->key, NULL);
  dl_etcd_cmp_absent(j, n->sub, n->end);
  dl_etcd_json_add(j, "],\"success\":[");
  if (count > 0)
    dl_etcd_op_put(j, n->key, v, (size_t)vl);
  else
    dl_etcd_op_delete(j, n->key);
  dl_etcd_json_add(j, "]}");
}

/* The write: 1 done, 0 the latch changed meanwhile, or a negative code. */
static int write_if(dl_etcd *e, const etcd_latch_names *n,
                    const etcd_latch_look *lk, long long count) {
  etcd_json j = {0};
  dl_etcd_latch_write_req(n, lk, count, &j);
  json_object *r;
  int rc = dl_etcd_txn_post(e, &j, &r);
  if (rc != 0) return rc;
  rc = dl_etcd_txn_succeeded(r);
  json_object_put(r);
  return rc;
}

int dl_etcd_latch_check(dl_etcd *e, dl_sync_op op, long long n) {
  if (op == DL_LATCH_SET && (n < 1 || n > INT32_MAX))
    return dl_seterr(e->err, DLOCK_EINVAL, "a latch's count is 1..%d",
                     INT32_MAX);
  return 0;
}

int dl_etcd_latch_next(dl_sync_op op, long long n, const etcd_latch_look *lk,
                       long long *v, long long *to) {
  switch (op) {
  case DL_LATCH_COUNT:
    *v = lk->there && lk->count > 0 ? lk->count : 0;
    return 0;
  case DL_LATCH_SET:
    *v = lk->there ? 0 : 1; /* a count runs (or a stale value sits there) */
    *to = n;
    return !lk->there;
  default: /* DL_LATCH_DOWN */
    if (!lk->there || lk->count <= 0) {
      *v = -1;
      return 0;
    }
    *v = *to = lk->count - 1;
    return 1;
  }
}

bool dl_etcd_latch_open(const etcd_latch_look *lk, int64_t *first) {
  /* At zero; or the count waited for ended and another began since. */
  if (!lk->there || lk->count <= 0 || (*first && lk->create != *first))
    return false;
  *first = lk->create;
  return true;
}

static int latch_update(dl_etcd *e, const dl_sync_ref *s, dl_sync_op op,
                        long long n, long long *v) {
  etcd_latch_names nm;
  dl_etcd_latch_names(e, s, &nm);
  int rc = dl_etcd_latch_check(e, op, n);
  while (rc == 0) {
    etcd_latch_look lk;
    long long to, result;
    if ((rc = look(e, s, &nm, &lk)) != 0) return rc;
    if (dl_etcd_latch_next(op, n, &lk, &result, &to) == 0) {
      *v = result;
      return 0;
    }
    rc = write_if(e, &nm, &lk, to);
    if (rc == 1) {
      *v = result;
      return 0;
    }
    /* 0: changed meanwhile, look again */
  }
  return rc;
}

int dl_etcd_latch_await(dl_backend *b, const dl_sync_ref *s, bool wait,
                        int64_t deadline) {
  dl_etcd *e = (dl_etcd *)b;
  etcd_latch_names nm;
  dl_etcd_latch_names(e, s, &nm);
  int64_t first = 0; /* the create revision of the count waited for */
  dl_ride rides = {0};
  for (;;) {
    unsigned wakes = atomic_load(&e->wakes);
    etcd_latch_look lk;
    int rc = look(e, s, &nm, &lk);
    if (rc < 0 && dl_etcd_ride_out(e, wait, deadline, rc, &rides)) continue;
    if (rc != 0) return rc;
    dl_ride_answered(&rides); /* answered */
    if (!dl_etcd_latch_open(&lk, &first)) return 1;
    if (!wait || dl_now_ms() >= deadline) return 0;
    /* Its deletion after the read: zero reached. A stream that ended
     * (1 too) is looked at again. */
    rc = dl_etcd_wait_delete_since(e, nm.key, lk.rev, deadline, wakes);
    if (rc < 0 && dl_etcd_ride_out(e, wait, deadline, rc, &rides)) continue;
    if (rc < 0) return rc;
    /* Woken early (another wait's wake: spurious): look again. */
    if (rc == 0 && (dl_now_ms() >= deadline || dl_offload_cancelled()))
      return 0;
  }
}

int dl_etcd_sync_update(dl_backend *b, const dl_sync_ref *s, dl_sync_op op,
                        long long n, const char *id, long long *v) {
  dl_etcd *e = (dl_etcd *)b;
  switch (op) {
  case DL_LATCH_SET:
  case DL_LATCH_DOWN:
  case DL_LATCH_COUNT: return latch_update(e, s, op, n, v);
  default: /* the semaphores' and permits' (sem.c) */
    return dl_etcd_sem_update(b, s, op, n, id, v);
  }
}
