/* sem.c: the counting semaphore on etcd (Redisson's RSemaphore), on
 * dlock's own layout (docs/WIRE.md): the key PREFIX/NAME/semaphore holds
 * the permits available as a decimal number, changed only by txns that
 * compare its mod revision; a waiting acquire takes a place in the line
 * PREFIX/NAME/waiters/semaphore/ and only the line's first watches the
 * count. Also the line and the count keys both semaphores use, and the
 * seam's sync_update. */
#include "sem.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define B64(n) (4 * (((n) + 2) / 3) + 1)

int dl_etcd_sem_base(dl_etcd *e, const dl_sync_ref *s, char *out) {
  int n = snprintf(out, ETCD_KEY_MAX, "%s%s/", e->prefix, s->key);
  if (n < 0 || n + ETCD_SEM_TAIL >= ETCD_KEY_MAX)
    return dl_seterr(e->err, DLOCK_ENAMETOOLONG,
                     "etcd key too long for a semaphore's keys: '%s'", s->key);
  return 0;
}

int dl_etcd_count_of(dl_etcd *e, json_object *kv, const char *key,
                     long long *v) {
  *v = 0;
  if (kv == NULL) return 0;
  json_object *val = dl_etcd_get(kv, "value");
  const char *v64 = val ? json_object_get_string(val) : "";
  char buf[32];
  int n = strlen(v64) < 40 ? dl_etcd_unb64(v64, buf, sizeof buf) : -1;
  char *end = NULL;
  errno = 0;
  if (n > 0 && n < 20 && (buf[0] == '-' || (buf[0] >= '0' && buf[0] <= '9')))
    *v = strtoll(buf, &end, 10);
  if (end == NULL || end == buf || *end != '\0' || errno != 0 || *v < INT_MIN ||
      *v > INT_MAX || dl_etcd_i64(kv, "lease") != 0) {
    *v = 0;
    return dl_seterr(e->err, DLOCK_EWRONGTYPE,
                     "not a dlock semaphore: %s holds something that is "
                     "not a count (a number in an int, on no lease; "
                     "nothing changed)",
                     key);
  }
  return 1;
}

/* The ranges under a semaphore's name where its layout puts nothing and
 * the other kinds do (a lock's PFX + hex, a queue's PFX + digits, before
 * "permits"; a read-write lock's "read/" and "write/"). */
static const char *const foreign_lo[] = {"", "read/", "write/"};
static const char *const foreign_hi[] = {"p", "read0", "write0"};
#define FOREIGN_N 3

size_t dl_etcd_sem_foreign_ops(const char *key, char *out, size_t len) {
  const char *slash = strrchr(key, '/');
  size_t bl = slash ? (size_t)(slash - key) + 1 : 0, at = 0;
  for (int i = 0; i < FOREIGN_N && at < len; i++) {
    char lo[ETCD_SEM_KEY], hi[ETCD_SEM_KEY];
    char lo64[B64(ETCD_SEM_KEY)], hi64[B64(ETCD_SEM_KEY)];
    int ln = snprintf(lo, sizeof lo, "%.*s%s", (int)bl, key, foreign_lo[i]);
    int hn = snprintf(hi, sizeof hi, "%.*s%s", (int)bl, key, foreign_hi[i]);
    dl_etcd_b64(lo, (size_t)ln, lo64);
    dl_etcd_b64(hi, (size_t)hn, hi64);
    at += (size_t)snprintf(out + at, len - at,
                           ",{\"request_range\":{\"key\":\"%s\",\"range_end\":"
                           "\"%s\",\"limit\":\"1\",\"keys_only\":true}}",
                           lo64, hi64);
  }
  return at;
}

int dl_etcd_sem_foreign_check(dl_etcd *e, const char *key, json_object *r,
                              int first) {
  for (int i = 0; i < FOREIGN_N; i++) {
    json_object *kv =
        dl_etcd_kv0(dl_etcd_txn_resp(r, first + i, "response_range"));
    char k[ETCD_SEM_KEY] = "(a key)";
    json_object *kk = dl_etcd_get(kv, "key");
    if (kv == NULL) continue;
    if (kk) dl_etcd_unb64(json_object_get_string(kk), k, sizeof k);
    return dl_seterr(e->err, DLOCK_EWRONGTYPE,
                     "not a dlock semaphore: %s is another kind's at the "
                     "name of %s (a lock's, a queue's; nothing changed)",
                     k, key);
  }
  return 0;
}

void dl_etcd_count_read_body(const char *key, char *body, size_t len) {
  char k64[B64(ETCD_SEM_KEY)];
  dl_etcd_b64(key, strlen(key), k64);
  size_t at = (size_t)snprintf(
      body, len, "{\"success\":[{\"request_range\":{\"key\":\"%s\"}}", k64);
  at += dl_etcd_sem_foreign_ops(key, body + at, len - at);
  snprintf(body + at, len - at, "]}");
}

int dl_etcd_count_read(dl_etcd *e, const char *key, long long *v, int64_t *mod,
                       int64_t *rev) {
  char body[ETCD_SEM_INSPECT_BODY_MAX];
  dl_etcd_count_read_body(key, body, sizeof body);
  json_object *r;
  *v = 0;
  *mod = 0;
  int rc = dl_etcd_call(e, "/v3/kv/txn", body,
                        dl_now_ms() + e->command_timeout_ms, &r, NULL);
  return rc != 0 ? rc : dl_etcd_count_read_answer(e, key, r, v, mod, rev);
}

int dl_etcd_count_read_answer(dl_etcd *e, const char *key, json_object *r,
                              long long *v, int64_t *mod, int64_t *rev) {
  *mod = 0;
  *v = 0;
  *rev = dl_etcd_i64(dl_etcd_get(r, "header"), "revision");
  json_object *kv = dl_etcd_kv0(dl_etcd_txn_resp(r, 0, "response_range"));
  int rc = dl_etcd_sem_foreign_check(e, key, r, 1);
  if (rc == 0) rc = dl_etcd_count_of(e, kv, key, v);
  if (rc == 1) *mod = dl_etcd_i64(kv, "mod_revision");
  json_object_put(r);
  return rc;
}

void dl_etcd_count_put_body(const char *key, int64_t mod, long long v,
                            char *body, size_t len) {
  char k64[B64(ETCD_SEM_KEY)], num[24], n64[B64(24)];
  dl_etcd_b64(key, strlen(key), k64);
  snprintf(num, sizeof num, "%lld", v);
  dl_etcd_b64(num, strlen(num), n64);
  snprintf(body, len,
           "{\"compare\":[{\"target\":\"%s\",\"key\":\"%s\",\"%s\":\"%" PRId64
           "\"}],\"success\":[{\"request_put\":{\"key\":\"%s\",\"value\":"
           "\"%s\"}}]}",
           mod ? "MOD" : "CREATE", k64,
           mod ? "mod_revision" : "create_revision", mod, k64, n64);
}

/* Puts v at the count key if its mod revision is still mod (0: if it is
 * not there): 0 with *ok whether it was put, or a negative code. */
static int count_put(dl_etcd *e, const char *key, int64_t mod, long long v,
                     bool *ok) {
  char body[ETCD_COUNT_PUT_BODY_MAX];
  dl_etcd_count_put_body(key, mod, v, body, sizeof body);
  json_object *r;
  int rc = dl_etcd_call(e, "/v3/kv/txn", body,
                        dl_now_ms() + e->command_timeout_ms, &r, NULL);
  if (rc != 0) return rc;
  *ok = dl_etcd_txn_succeeded(r);
  json_object_put(r);
  return 0;
}

int dl_etcd_count_next(dl_etcd *e, const char *key, dl_sync_op op, long long n,
                       bool there, long long cur, long long *next,
                       long long *out) {
  *out = 0;
  if (op == DL_SEM_SET) { /* n if none: 1 */
    *next = n;
    *out = !there;
    return !there;
  }
  if (op == DL_SEM_DRAIN) { /* to 0 if there: what it was */
    *next = 0;
    *out = cur;
    return there;
  }
  /* The API counts in an int: refused before the write. */
  if ((n > 0 && cur + n > INT_MAX) || (n < 0 && cur + n < INT_MIN))
    return dl_seterr(e->err, DLOCK_ERANGE,
                     "%s holds %lld permits: adding %lld would take the "
                     "count outside an int (nothing changed)",
                     key, cur, n);
  *next = cur + n;
  return 1;
}

int dl_etcd_count_change(dl_etcd *e, const char *key, dl_sync_op op,
                         long long n, long long *out) {
  *out = 0;
  for (int tries = 0; tries < ETCD_COUNT_TRIES; tries++) {
    long long cur, next = 0, result;
    int64_t mod, rev;
    int rc = dl_etcd_count_read(e, key, &cur, &mod, &rev);
    if (rc < 0) return rc;
    if ((rc = dl_etcd_count_next(e, key, op, n, rc == 1, cur, &next,
                                 &result)) <= 0) {
      if (rc == 0) *out = result;
      return rc;
    }
    bool ok = false;
    if ((rc = count_put(e, key, mod, next, &ok)) != 0) return rc;
    if (!ok) continue; /* another writer came first: read again */
    *out = result;
    return 0;
  }
  return dl_etcd_count_busy(e, key);
}

int dl_etcd_count_busy(dl_etcd *e, const char *key) {
  return dl_seterr(e->err, DLOCK_EBUSY, "the permits of %s kept changing", key);
}

/* ---- the line of waiters ---- */
typedef struct sem_line {
  etcd_hold h; /* its key (h.key: buf), lease and create revision */
  char buf[ETCD_SEM_KEY];
  char pfx[ETCD_SEM_KEY + 2]; /* the line: the key's parent + '/' */
} sem_line;

int dl_etcd_sem_not_ours(dl_etcd *e, const char *key) {
  return dl_seterr(e->err, DLOCK_EWRONGTYPE,
                   "%s is there on a lease not ours: not a waiter of "
                   "ours (nothing changed)",
                   key);
}

int64_t dl_etcd_sem_step(dl_etcd *e) {
  pthread_mutex_lock(&e->mu);
  int64_t step = e->lease_ttl_s * 1000 / 3;
  pthread_mutex_unlock(&e->mu);
  return step > 200 ? step : 200;
}

/* Watches the keys under data_pfx for a change after revision at, for a
 * step (a third of the lease) at most: 1, 0 (look again), or a negative
 * code. */
static int count_wait(dl_etcd *e, const char *data_pfx, int64_t at,
                      int64_t deadline, unsigned wakes) {
  int64_t step = dl_now_ms() + dl_etcd_sem_step(e);
  return dl_etcd_wait_change(e, data_pfx, at, step < deadline ? step : deadline,
                             wakes);
}

/* Waits once for the next try (its place in the line taken first, on
 * the session's lease, which the waits keep alive): 1 or 0 (look again),
 * 2 first in line (a try, then count_wait from its read), or a negative
 * code. */
static int line_wait(dl_etcd *e, sem_line *ln, int64_t deadline,
                     unsigned wakes) {
  int64_t now = dl_now_ms(), cmd = now + e->command_timeout_ms;
  int64_t lease, until, head;
  int rc = dl_etcd_session(e, cmd, &lease, &until);
  if (rc != 0) return rc;
  if (ln->h.rev && ln->h.lease != lease) ln->h.rev = 0; /* it went with it */
  if (ln->h.rev == 0) {
    ln->h.lease = lease;
    rc = dl_etcd_put_and_read(e, &ln->h, "", ln->pfx, false, cmd, &head);
    if (rc == 1) return dl_etcd_sem_not_ours(e, ln->buf);
    /* A put whose answer we did not get may have made our place (a key
     * of its own, random): it goes, else it would stand first in line,
     * unwatched, until our session ends. */
    if (rc < 0 && (dl_etcd_transient(rc) || rc == DLOCK_EPROTO))
      dl_etcd_delete_key(e, ln->buf);
    if (rc != 0) return rc;
  }
  int64_t step = now + dl_etcd_sem_step(e);
  if (step > deadline) step = deadline;
  char pred[ETCD_SEM_KEY];
  int64_t pat = 0;
  rc = dl_etcd_predecessor(e, ln->pfx, ln->h.rev, pred, sizeof pred, &pat, cmd);
  if (rc < 0) return rc;
  if (rc == 1) return dl_etcd_wait_delete_since(e, pred, pat, step, wakes);
  /* First in line: the count is watched from a read made after our place
   * (a try's). A watch from the last try's revision, which our place's
   * put has passed, is etcd's unsynced watcher, told only at its next
   * sync, up to 100 ms later. */
  return 2;
}

int dl_etcd_sem_wait(dl_etcd *e, const char *line_key, const char *data_pfx,
                     dl_etcd_try_fn try_fn, void *ctx, bool wait,
                     int64_t deadline, bool *waited) {
  sem_line ln;
  memset(&ln.h, 0, sizeof ln.h);
  snprintf(ln.buf, sizeof ln.buf, "%s", line_key);
  snprintf(ln.pfx, sizeof ln.pfx, "%s", line_key);
  char *slash = strrchr(ln.pfx, '/');
  if (slash) slash[1] = '\0';
  ln.h.key = ln.buf;
  *waited = false;
  bool first = false; /* the last look found us first in line */
  int rc;
  for (;;) {
    unsigned wakes = atomic_load(&e->wakes);
    int64_t at = 0;
    rc = try_fn(e, ctx, &at);
    if (rc != 0 || !wait || dl_now_ms() >= deadline || dl_offload_cancelled())
      break;
    if (atomic_load(e->env->closing)) {
      rc = dl_seterr(e->err, DLOCK_ECLOSED, "the client is closing");
      break;
    }
    *waited = true;
    rc = first ? count_wait(e, data_pfx, at, deadline, wakes)
               : line_wait(e, &ln, deadline, wakes);
    first = rc == 2; /* the next try's read starts the watch */
    if (rc < 0) break;
    if (rc != 1 && dl_offload_cancelled()) { /* no try after a cancel */
      rc = 0;
      break;
    }
  }
  /* Our place goes (at its own revision only), whatever the result: the
   * next in line looks. */
  if (ln.h.rev > 0)
    dl_etcd_delete_at(e, ln.buf, ln.h.rev, dl_now_ms() + e->command_timeout_ms);
  return rc;
}

/* ---- the counting semaphore ---- */
typedef struct sem_try {
  char key[ETCD_SEM_KEY];
  long long n;
} sem_try;

bool dl_etcd_sem_take_to(long long v, long long n, long long *to) {
  *to = v - n;
  return v >= n;
}

/* Takes n permits if that many are available: dl_etcd_try_fn. */
static int sem_take(dl_etcd *e, void *ctx, int64_t *at) {
  sem_try *t = ctx;
  for (;;) {
    long long v, to;
    int64_t mod;
    int rc = dl_etcd_count_read(e, t->key, &v, &mod, at);
    if (rc < 0) return rc;
    if (!dl_etcd_sem_take_to(v, t->n, &to)) return 0;
    bool ok = false;
    if ((rc = count_put(e, t->key, mod, to, &ok)) != 0) return rc;
    if (ok) return 1;
  }
}

int dl_etcd_sem_check(dl_etcd *e, const dl_sync_ref *s, bool acquire,
                      dl_sync_op op, long long n, char *key) {
  char base[ETCD_KEY_MAX];
  int rc = dl_etcd_sem_base(e, s, base);
  if (rc != 0) return rc;
  snprintf(key, ETCD_SEM_KEY, "%ssemaphore", base);
  if (acquire && n <= 0)
    return dl_seterr(e->err, DLOCK_EINVAL, "permits must be positive");
  if (!acquire &&
      ((op == DL_SEM_SET && n < 0) || (op == DL_SEM_RELEASE && n <= 0)))
    return dl_seterr(e->err, DLOCK_EINVAL, "bad permits: %lld", n);
  return 0;
}

int dl_etcd_sem_line_key(dl_etcd *e, const char *key, char *line) {
  unsigned char raw[16];
  if (dl_random_bytes(raw, sizeof raw) != 0)
    return dl_seterr(e->err, DLOCK_ENOMEM, "no random bytes for a waiter");
  /* The line is the count key's sibling: PREFIX/NAME/waiters/semaphore/. */
  int n = snprintf(line, ETCD_SEM_KEY, "%.*swaiters/semaphore/",
                   (int)(strlen(key) - strlen("semaphore")), key);
  for (int i = 0; i < 16; i++)
    n += snprintf(line + n, ETCD_SEM_KEY - (size_t)n, "%02x", raw[i]);
  return 0;
}

int dl_etcd_sem_acquire(dl_backend *b, const dl_sync_ref *s, int permits,
                        bool wait, int64_t deadline) {
  dl_etcd *e = (dl_etcd *)b;
  char line[ETCD_SEM_KEY];
  sem_try t = {.n = permits};
  int rc = dl_etcd_sem_check(e, s, true, DL_SEM_AVAILABLE, permits, t.key);
  if (rc == 0) rc = dl_etcd_sem_line_key(e, t.key, line);
  if (rc != 0) return rc;
  bool waited;
  return dl_etcd_sem_wait(e, line, t.key, sem_take, &t, wait, deadline,
                          &waited);
}

/* The counting semaphore's updates (key its count key, checked). */
static int semaphore_update(dl_etcd *e, const char *key, dl_sync_op op,
                            long long n, long long *v) {
  if (op == DL_SEM_AVAILABLE) {
    int64_t mod, rev;
    int rc = dl_etcd_count_read(e, key, v, &mod, &rev);
    return rc < 0 ? rc : 0;
  }
  return dl_etcd_count_change(e, key, op, n, v);
}

int dl_etcd_sem_update(dl_backend *b, const dl_sync_ref *s, dl_sync_op op,
                       long long n, const char *id, long long *v) {
  dl_etcd *e = (dl_etcd *)b;
  char key[ETCD_SEM_KEY];
  *v = 0;
  int rc = dl_etcd_sem_check(e, s, false, op, n, key);
  if (rc != 0) return rc;
  switch (op) {
  case DL_SEM_SET:
  case DL_SEM_ADD:
  case DL_SEM_DRAIN:
  case DL_SEM_RELEASE:
  case DL_SEM_AVAILABLE: return semaphore_update(e, key, op, n, v);
  case DL_PERMITS_SET:
  case DL_PERMITS_ADD:
  case DL_PERMITS_AVAILABLE:
  case DL_PERMITS_RELEASE:
  case DL_PERMITS_FORCE: return dl_etcd_permits_update(e, s, op, n, id, v);
  default:
    return dl_seterr(e->err, DLOCK_ENOTSUP,
                     "the etcd backend has no latch (it has the semaphore "
                     "and the permit-expirable semaphore)");
  }
}
