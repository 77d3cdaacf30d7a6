/* permits.c: the permit-expirable semaphore on etcd (Redisson's
 * RPermitExpirableSemaphore), on dlock's own layout (docs/WIRE.md):
 * PREFIX/NAME/permits holds the permits in all as a decimal number, and
 * each permit out is a key PREFIX/NAME/permits/<id> on a lease (the
 * session's when the watchdog keeps it, else a lease of its own of the
 * permit's lease time), so a permit whose holder dies comes back when its
 * lease ends, with no one to give it back. A permit is taken by one txn
 * that compares the total's mod revision and that no permit key was
 * written since the permits were counted; a waiting acquire waits in the
 * line PREFIX/NAME/waiters/permits/. The permit's key is watched as a
 * lock's is: a force release is heard at once. */
#include "sem.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define B64(n) (4 * (((n) + 2) / 3) + 1)
#define ID_LEN (DLOCK_PERMIT_ID_LEN - 1)

static bool valid_id(const char *id) {
  if (id == NULL || strlen(id) != ID_LEN) return false;
  return strspn(id, "0123456789abcdef") == ID_LEN;
}

void dl_etcd_permits_read_body(const char *total, char *body, size_t len) {
  char pfx[ETCD_SEM_KEY + 2], t64[B64(ETCD_SEM_KEY)], p64[B64(ETCD_SEM_KEY)];
  char end64[B64(ETCD_SEM_KEY)];
  snprintf(pfx, sizeof pfx, "%s/", total);
  dl_etcd_b64(total, strlen(total), t64);
  dl_etcd_b64(pfx, strlen(pfx), p64);
  dl_etcd_prefix_end(pfx, end64);
  size_t at = (size_t)snprintf(
      body, len,
      "{\"success\":[{\"request_range\":{\"key\":\"%s\"}},"
      "{\"request_range\":{\"key\":\"%s\",\"range_end\":\"%s\","
      "\"keys_only\":true}}",
      t64, p64, end64);
  at += dl_etcd_sem_foreign_ops(total, body + at, len - at);
  snprintf(body + at, len - at, "]}");
}

int dl_etcd_permits_read_answer(dl_etcd *e, const char *total, json_object *r,
                                long long *max, int64_t *mod, long long *taken,
                                int64_t *rev) {
  char pfx[ETCD_SEM_KEY + 2];
  snprintf(pfx, sizeof pfx, "%s/", total);
  *max = *taken = 0;
  *mod = 0;
  *rev = dl_etcd_i64(dl_etcd_get(r, "header"), "revision");
  json_object *kv = dl_etcd_kv0(dl_etcd_txn_resp(r, 0, "response_range"));
  int rc = dl_etcd_sem_foreign_check(e, total, r, 2);
  if (rc == 0) rc = dl_etcd_count_of(e, kv, total, max);
  if (rc == 1) *mod = dl_etcd_i64(kv, "mod_revision");
  json_object *kvs =
      dl_etcd_get(dl_etcd_txn_resp(r, 1, "response_range"), "kvs");
  size_t n = kvs ? json_object_array_length(kvs) : 0, pl = strlen(pfx);
  for (size_t i = 0; i < n && rc >= 0; i++) {
    json_object *k = dl_etcd_get(json_object_array_get_idx(kvs, i), "key");
    char key[ETCD_SEM_KEY];
    if (k && dl_etcd_unb64(json_object_get_string(k), key, sizeof key) >= 0 &&
        strlen(key) == pl + ID_LEN && valid_id(key + pl))
      continue;
    rc = dl_seterr(e->err, DLOCK_EWRONGTYPE,
                   "not a dlock permit-expirable semaphore: a key under %s "
                   "that is no permit's (nothing changed)",
                   pfx);
  }
  *taken = (long long)n;
  json_object_put(r);
  return rc;
}

/* The permits' state: 1 set (*max, *mod: the total's mod revision), 0 no
 * total set, or a negative code (DLOCK_EWRONGTYPE recorded: a total that
 * is not a number, or a key under PREFIX/NAME/permits/ that is not a
 * permit's); *taken the permit keys, *rev the revision read at. */
static int permits_read(dl_etcd *e, const char *total, long long *max,
                        int64_t *mod, long long *taken, int64_t *rev) {
  char body[ETCD_SEM_INSPECT_BODY_MAX];
  dl_etcd_permits_read_body(total, body, sizeof body);
  json_object *r;
  *max = *taken = 0;
  *mod = 0;
  int rc = dl_etcd_call(e, "/v3/kv/txn", body,
                        dl_now_ms() + e->command_timeout_ms, &r, NULL);
  return rc != 0
             ? rc
             : dl_etcd_permits_read_answer(e, total, r, max, mod, taken, rev);
}

char *dl_etcd_permit_put_body(const etcd_permit_try *t, int64_t mod,
                              int64_t at) {
  char pfx[ETCD_SEM_KEY + 2], t64[B64(ETCD_SEM_KEY)], p64[B64(ETCD_SEM_KEY)];
  char end64[B64(ETCD_SEM_KEY)], k64[B64(ETCD_SEM_KEY)];
  size_t vl = strlen(t->value), len = 5 * B64(ETCD_SEM_KEY) + vl * 2;
  char *v64 = malloc(B64(vl)), *body = malloc(len);
  if (v64 == NULL || body == NULL) {
    free(v64);
    free(body);
    return NULL;
  }
  snprintf(pfx, sizeof pfx, "%s/", t->total);
  dl_etcd_b64(t->total, strlen(t->total), t64);
  dl_etcd_b64(pfx, strlen(pfx), p64);
  dl_etcd_prefix_end(pfx, end64);
  dl_etcd_b64(t->key, strlen(t->key), k64);
  dl_etcd_b64(t->value, vl, v64);
  /* The total as read, no permit key written since the count (a
   * deletion since only frees one more), and ours not there. */
  snprintf(
      body, len,
      "{\"compare\":[{\"target\":\"MOD\",\"key\":\"%s\","
      "\"mod_revision\":\"%" PRId64 "\"},{\"target\":\"MOD\","
      "\"key\":\"%s\",\"range_end\":\"%s\",\"result\":\"LESS\","
      "\"mod_revision\":\"%" PRId64 "\"},{\"target\":\"CREATE\","
      "\"key\":\"%s\",\"create_revision\":\"0\"}],\"success\":[{"
      "\"request_put\":{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%" PRId64
      "\"}}]}",
      t64, mod, p64, end64, at + 1, k64, k64, v64, t->lease);
  free(v64);
  return body;
}

bool dl_etcd_permit_put_answer(etcd_permit_try *t, json_object *r) {
  json_object *s = dl_etcd_get(r, "succeeded");
  bool ok = s && json_object_get_boolean(s);
  t->rev = dl_etcd_i64(dl_etcd_get(r, "header"), "revision");
  json_object_put(r);
  return ok;
}

/* The lease the permit's key goes on, fresh: 0 or a negative code. */
static int fresh_lease(dl_etcd *e, etcd_permit_try *t) {
  int64_t sent = dl_now_ms(), deadline = sent + e->command_timeout_ms;
  if (!t->own) return dl_etcd_session(e, deadline, &t->lease, &t->until);
  if (t->lease != 0 && sent - t->lease_at > 100) {
    /* A fixed lease runs from its grant: after a wait, from a
     * keepalive (a new one if it ended meanwhile). */
    int64_t ttl;
    int rc = dl_etcd_keepalive(e, t->lease, deadline, &ttl);
    if (rc < 0) return rc;
    if (dl_etcd_fixed_kept(rc, ttl, t->lease_ms)) {
      t->lease_at = sent;
      t->until = dl_validity(sent, t->lease_ms);
      return 0;
    }
    t->lease = 0;
  }
  if (t->lease != 0) return 0;
  t->lease_at = sent;
  return dl_etcd_fixed_lease(e, t->lease_ms, deadline, &t->lease, &t->until);
}

/* Takes the permit if one is free: dl_etcd_try_fn. */
static int permit_take(dl_etcd *e, void *ctx, int64_t *at) {
  etcd_permit_try *t = ctx;
  for (int tries = 0; tries < ETCD_COUNT_TRIES; tries++) {
    long long max, taken;
    int64_t mod;
    int rc = permits_read(e, t->total, &max, &mod, &taken, at);
    if (rc <= 0 || max - taken < 1) return rc < 0 ? rc : 0;
    if ((rc = fresh_lease(e, t)) != 0) return rc;
    char *body = dl_etcd_permit_put_body(t, mod, *at);
    if (body == NULL) return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
    json_object *r;
    rc = dl_etcd_call(e, "/v3/kv/txn", body,
                      dl_now_ms() + e->command_timeout_ms, &r, NULL);
    free(body);
    if (rc != 0) {
      t->unsure = dl_etcd_transient(rc);
      return rc;
    }
    if (dl_etcd_permit_put_answer(t, r)) return 1;
  }
  return dl_etcd_count_busy(e, t->total);
}

void dl_etcd_permit_delete_body(const char *key, char *body, size_t len) {
  char k64[B64(ETCD_SEM_KEY)];
  dl_etcd_b64(key, strlen(key), k64);
  snprintf(body, len, "{\"key\":\"%s\"}", k64);
}

int dl_etcd_permit_delete_answer(json_object *r) {
  int rc = dl_etcd_i64(r, "deleted") > 0;
  json_object_put(r);
  return rc;
}

/* Deletes key whatever its revision (a permit's: its id is never used
 * again): 1 deleted, 0 it was not there, or a negative code. */
static int delete_key(dl_etcd *e, const char *key) {
  char body[ETCD_PERMIT_DELETE_BODY_MAX];
  dl_etcd_permit_delete_body(key, body, sizeof body);
  json_object *r;
  int rc = dl_etcd_call(e, "/v3/kv/deleterange", body,
                        dl_now_ms() + e->command_timeout_ms, &r, NULL);
  return rc != 0 ? rc : dl_etcd_permit_delete_answer(r);
}

/* The permit taken by t, as a hold of the client's (renewed and checked
 * with the locks', its key watched): 0 or a negative code. */
static int hold_permit(dl_etcd *e, const dl_sync_ref *s, const char *owner,
                       etcd_permit_try *t) {
  etcd_hold *h = calloc(1, sizeof *h);
  if (h == NULL || !(h->lock = dl_strdup(s->key)) ||
      !(h->owner = dl_strdup(owner)) || !(h->key = dl_strdup(t->key))) {
    dl_etcd_hold_free(h);
    return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  }
  h->lease = t->lease;
  h->own_lease = t->own;
  h->lease_until = t->until;
  h->lease_ms = t->lease_ms;
  h->rev = t->rev;
  h->held = true;
  h->permit = true;
  pthread_mutex_lock(&e->mu);
  h->next = e->holds;
  e->holds = h;
  pthread_mutex_unlock(&e->mu);
  int rc = dl_etcd_watch_hold(e, h);
  if (rc != 0) dl_etcd_hold_drop(e, h);
  return rc;
}

int dl_etcd_permit_init(dl_etcd *e, const dl_sync_ref *s, const char *id,
                        int64_t lease_ms, etcd_permit_try *t) {
  char base[ETCD_KEY_MAX];
  int rc = dl_etcd_sem_base(e, s, base);
  if (rc != 0) return rc;
  if (!valid_id(id))
    return dl_seterr(e->err, DLOCK_EINVAL,
                     "a permit id is 32 lower-case hex digits");
  snprintf(t->total, sizeof t->total, "%spermits", base);
  snprintf(t->key, sizeof t->key, "%spermits/%s", base, id);
  snprintf(t->line, sizeof t->line, "%swaiters/permits/%s", base, id);
  snprintf(t->owner, sizeof t->owner, "%s:%s", e->env->client_id, id);
  t->value = e->env->client_id;
  t->lease_ms = lease_ms;
  /* The watchdog's lease is the session's (as a lock's); any other a
   * lease of the permit's own, never kept alive. */
  t->own = lease_ms != e->session_ttl_ms;
  return 0;
}

int dl_etcd_permit_end(dl_etcd *e, const dl_sync_ref *s, etcd_permit_try *t,
                       int rc, int64_t *valid_until) {
  bool taken = rc == 1;
  t->left = ETCD_PERMIT_KEPT;
  if (taken && (rc = hold_permit(e, s, t->owner, t)) == 0) {
    rc = 1;
    *valid_until = t->until;
    if (!t->own) {
      pthread_mutex_lock(&e->mu);
      if (e->lease == t->lease) *valid_until = e->lease_until;
      pthread_mutex_unlock(&e->mu);
    }
  } else if (taken || t->unsure) {
    /* Not handed over (or not known whether it was put): the permit
     * goes, and a lease of its own with it. */
    t->left = t->own && t->lease ? ETCD_PERMIT_REVOKE : ETCD_PERMIT_DELETE;
  } else if (t->own && t->lease) {
    /* Nothing was put on it: kept for the next fixed-lease hold. */
    dl_etcd_lease_idle(e, t->lease, t->lease_ms, t->until);
  }
  return rc;
}

int dl_etcd_permit_acquire(dl_backend *b, const dl_sync_ref *s, const char *id,
                           int64_t lease_ms, bool wait, int64_t deadline,
                           int64_t *valid_until) {
  dl_etcd *e = (dl_etcd *)b;
  etcd_permit_try *t = calloc(1, sizeof *t);
  if (t == NULL) return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  int rc = dl_etcd_permit_init(e, s, id, lease_ms, t);
  if (rc == 0) {
    bool waited;
    rc = dl_etcd_sem_wait(e, t->line, t->total, permit_take, t, wait, deadline,
                          &waited);
    rc = dl_etcd_permit_end(e, s, t, rc, valid_until);
  }
  if (t->left == ETCD_PERMIT_REVOKE)
    dl_etcd_revoke(e, t->lease, dl_now_ms() + e->command_timeout_ms);
  else if (t->left == ETCD_PERMIT_DELETE)
    delete_key(e, t->key);
  free(t);
  return rc;
}

etcd_hold *dl_etcd_permit_unhold(dl_etcd *e, const dl_sync_ref *s,
                                 const char *owner) {
  pthread_mutex_lock(&e->mu);
  etcd_hold *h = NULL;
  for (etcd_hold **pp = &e->holds; *pp; pp = &(*pp)->next)
    if ((*pp)->permit && strcmp((*pp)->lock, s->key) == 0 &&
        strcmp((*pp)->owner, owner) == 0) {
      h = *pp;
      *pp = h->next;
      break;
    }
  pthread_mutex_unlock(&e->mu);
  return h;
}

int64_t dl_etcd_permit_released(dl_etcd *e, etcd_hold *h, int rc, bool retried,
                                bool force) {
  int64_t revoke = 0;
  if (h->own_lease && rc == 1 && !retried && !force)
    dl_etcd_lease_idle(e, h->lease, h->lease_ms, h->lease_until);
  else if (h->own_lease)
    revoke = h->lease;
  dl_etcd_hold_drop(e, h);
  return revoke;
}

/* Gives back the permit at key (owner: its hold's; force: whoever holds
 * it): 1 released, 0 it was not out, or a negative code. A hold of this
 * client's ends whatever the server says. */
static int release(dl_etcd *e, const dl_sync_ref *s, const char *key,
                   const char *owner, bool force) {
  /* Ours from here: off the list, so that a renewal or a check finding
   * the key gone cannot free it under us. */
  etcd_hold *h = dl_etcd_permit_unhold(e, s, owner);
  int64_t deadline = dl_now_ms() + e->command_timeout_ms;
  int rc;
  bool retried = false;
  if (h == NULL || force) {
    /* Its key alone: a permit's id is never taken again, so a release
     * sent twice frees one permit. */
    rc = delete_key(e, key);
  } else {
    /* Ours: at its own create revision, as a lock's release. */
    rc = dl_etcd_delete_own(e, h->key, h->rev, deadline, &retried);
  }
  int64_t revoke = h ? dl_etcd_permit_released(e, h, rc, retried, force) : 0;
  if (revoke) dl_etcd_revoke(e, revoke, deadline);
  return rc;
}

int dl_etcd_permits_check(dl_etcd *e, const dl_sync_ref *s, dl_sync_op op,
                          long long n, const char *id, etcd_permit_try *t) {
  char base[ETCD_KEY_MAX];
  int rc = dl_etcd_sem_base(e, s, base);
  if (rc != 0) return rc;
  snprintf(t->total, sizeof t->total, "%spermits", base);
  switch (op) {
  case DL_PERMITS_SET:
  case DL_PERMITS_ADD:
    if (op == DL_PERMITS_SET && n < 0)
      return dl_seterr(e->err, DLOCK_EINVAL, "permits must not be negative");
    return 0;
  case DL_PERMITS_AVAILABLE: return 0;
  case DL_PERMITS_RELEASE:
  case DL_PERMITS_FORCE:
    if (!valid_id(id))
      return dl_seterr(e->err, DLOCK_EINVAL,
                       "a permit id is 32 lower-case hex digits");
    snprintf(t->key, sizeof t->key, "%spermits/%s", base, id);
    snprintf(t->owner, sizeof t->owner, "%s:%s", e->env->client_id, id);
    return 0;
  default: return dl_seterr(e->err, DLOCK_EINVAL, "not a permits operation");
  }
}

int dl_etcd_permits_update(dl_etcd *e, const dl_sync_ref *s, dl_sync_op op,
                           long long n, const char *id, long long *v) {
  etcd_permit_try *t = calloc(1, sizeof *t);
  if (t == NULL) return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  int rc = dl_etcd_permits_check(e, s, op, n, id, t);
  long long max, taken;
  int64_t mod, rev;
  if (rc != 0) {
    /* refused before anything is sent */
  } else if (op == DL_PERMITS_SET || op == DL_PERMITS_ADD) {
    /* The total: its permits out all come back one day. */
    rc = dl_etcd_count_change(
        e, t->total, op == DL_PERMITS_SET ? DL_SEM_SET : DL_SEM_ADD, n, v);
  } else if ((rc = permits_read(e, t->total, &max, &mod, &taken, &rev)) < 0) {
    /* a key of another kind where the permits live: refused */
  } else if (op == DL_PERMITS_AVAILABLE) {
    *v = max - taken;
    rc = 0;
  } else {
    rc = release(e, s, t->key, t->owner, op == DL_PERMITS_FORCE);
    if (rc >= 0) *v = rc;
    rc = rc < 0 ? rc : 0;
  }
  free(t);
  return rc;
}

const char *dl_etcd_sem_inspect_req(dl_etcd *e, const char *key, int step,
                                    char *total, char *body, size_t len) {
  char base[ETCD_KEY_MAX];
  dl_sync_ref s = {.key = key, .name = key, .hint = NULL};
  if (dl_etcd_sem_base(e, &s, base) != 0) return NULL; /* no semaphore's */
  snprintf(total, ETCD_SEM_KEY, "%s%s", base, step ? "semaphore" : "permits");
  if (step) {
    dl_etcd_count_read_body(total, body, len);
    return "/v3/kv/txn";
  }
  dl_etcd_permits_read_body(total, body, len);
  return "/v3/kv/txn";
}

int dl_etcd_sem_inspect_answer(dl_etcd *e, const char *total, int step,
                               json_object *r, dlock_lock_state *st) {
  long long max, taken, v;
  int64_t mod, rev;
  if (step) {
    int rc = dl_etcd_count_read_answer(e, total, r, &v, &mod, &rev);
    if (rc == 1) st->counter = v;
    return rc < 0 && rc != DLOCK_EWRONGTYPE ? rc : 0;
  }
  int rc = dl_etcd_permits_read_answer(e, total, r, &max, &mod, &taken, &rev);
  if (rc == 1) {
    st->counter = max - taken > 0 ? max - taken : 0;
    st->permits_taken = (int)taken;
    return 0;
  }
  return rc < 0 && rc != DLOCK_EWRONGTYPE ? rc : 1;
}

int dl_etcd_sem_inspect(dl_etcd *e, const char *key, dlock_lock_state *st) {
  int rc = 1;
  for (int step = 0; step < 2 && rc == 1; step++) {
    char total[ETCD_SEM_KEY], body[ETCD_SEM_INSPECT_BODY_MAX];
    const char *path =
        dl_etcd_sem_inspect_req(e, key, step, total, body, sizeof body);
    if (path == NULL) return 0;
    json_object *r;
    rc = dl_etcd_call(e, path, body, dl_now_ms() + e->command_timeout_ms, &r,
                      NULL);
    if (rc == 0) rc = dl_etcd_sem_inspect_answer(e, total, step, r, st);
  }
  return rc;
}
