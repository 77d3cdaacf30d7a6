/* mutex.c: the mutex on etcd, laid out as Go's concurrency.Mutex and
 * `etcdctl lock`: a key PREFIX/NAME/<lease id in hex> with an empty value
 * (or the holder's description, which Go never reads)
 * on the session's lease, created in one txn that also reads the owner
 * (the lowest create revision under PREFIX/NAME/); a waiter watches only
 * its predecessor (the highest create revision below its own) until it is
 * deleted, then looks again, and checks that its own key is still there
 * before it takes the lock (etcd issue 11456). The fencing token is the
 * key's create revision; the release deletes the key only at that
 * revision (etcd issue 22082). The read-write lock is contrib/recipes'
 * RWMutex on the same machinery: keys PREFIX/NAME/read/<ns> and
 * PREFIX/NAME/write/<ns>, a reader waiting for the writers' keys before
 * its own, a writer for every key before its own. */
#include "etcdb.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define B64(n) (4 * (((n) + 2) / 3) + 1)

bool dl_etcd_transient(int rc) {
  return rc == DLOCK_ECONNECT || rc == DLOCK_ECONNLOST || rc == DLOCK_ETIMEDOUT;
}

/* A wait rides out what a member lost or a leader change makes requests
 * fail with (etcd answers "leader changed", a member goes away), as the
 * Redis waits ride out a failover: true after a pause (20 ms, doubling up
 * to 200 ms) when rc is transient and the wait's deadline leaves room,
 * false when the error stands (the client closing, the operation
 * cancelled, the time spent). */
int64_t dl_etcd_ride_pause(dl_etcd *e, bool wait, int64_t deadline, int rc,
                           int *rides) {
  if (!dl_etcd_transient(rc) || !wait || atomic_load(e->env->closing) ||
      dl_offload_cancelled())
    return 0;
  int64_t pause = (int64_t)20 << (*rides < 4 ? *rides : 4);
  if (pause > 200) pause = 200;
  if (dl_now_ms() + pause >= deadline) return 0;
  (*rides)++;
  return pause;
}

bool dl_etcd_ride_out(dl_etcd *e, bool wait, int64_t deadline, int rc,
                      int *rides) {
  int64_t pause = dl_etcd_ride_pause(e, wait, deadline, rc, rides);
  if (pause == 0) return false;
  dl_etcd_pause(e, pause);
  return !atomic_load(e->env->closing) && !dl_offload_cancelled();
}

static bool ride_out(dl_etcd *e, const dl_acquire *a, int rc, int *rides) {
  return dl_etcd_ride_out(e, a->wait, a->deadline, rc, rides);
}

/* Whether an acquire's wait is over: none asked for, its deadline come,
 * or (on an event-loop client) the operation cancelled. */
static bool wait_over(const dl_acquire *a) {
  return !a->wait || dl_now_ms() >= a->deadline || dl_offload_cancelled();
}

void dl_etcd_hold_free(etcd_hold *h) {
  if (h == NULL) return;
  free(h->lock);
  free(h->owner);
  free(h->key);
  free(h);
}

void dl_etcd_prefix_end(const char *pfx, char *end_b64) {
  char end[ETCD_KEY_MAX];
  size_t n = strlen(pfx);
  memcpy(end, pfx, n);
  /* pfx ends with '/': its last byte + 1 ('0') ends the range. */
  end[n - 1] = (char)(end[n - 1] + 1);
  dl_etcd_b64(end, n, end_b64);
}

/* The lock's key prefix: URL prefix + lock + "/". */
static void lock_prefix(dl_etcd *e, const char *lock, char *out, size_t len) {
  snprintf(out, len, "%s%s/", e->prefix, lock);
}

static etcd_hold *hold_find(dl_etcd *e, const char *lock, const char *owner) {
  for (etcd_hold *h = e->holds; h; h = h->next)
    if (strcmp(h->lock, lock) == 0 &&
        (owner == NULL || strcmp(h->owner, owner) == 0))
      return h;
  return NULL;
}

/* Removes h from the list (e->mu held). */
static void hold_unlink(dl_etcd *e, etcd_hold *h) {
  for (etcd_hold **pp = &e->holds; *pp; pp = &(*pp)->next)
    if (*pp == h) {
      *pp = h->next;
      break;
    }
}

void dl_etcd_hold_drop(dl_etcd *e, etcd_hold *h) {
  dl_etcd_unwatch(e, h->watch);
  pthread_mutex_lock(&e->mu);
  hold_unlink(e, h);
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
  dl_etcd_hold_free(h);
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

/* Deletes key whatever its revision (one of ours, on our lease, while we
 * hold the claim on it: nobody else's). */
static void delete_key(dl_etcd *e, const char *key) {
  char k64[B64(ETCD_KEY_MAX)], body[B64(ETCD_KEY_MAX) + 32];
  dl_etcd_b64(key, strlen(key), k64);
  snprintf(body, sizeof body, "{\"key\":\"%s\"}", k64);
  json_object *r;
  if (dl_etcd_call(e, "/v3/kv/deleterange", body,
                   dl_now_ms() + e->command_timeout_ms, &r, NULL) == 0)
    json_object_put(r);
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
  json_object *kv = dl_etcd_kv0(r);
  json_object *k = dl_etcd_get(kv, "key");
  rc = 0;
  if (k && dl_etcd_unb64(json_object_get_string(k), pred, len) >= 0) rc = 1;
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
  json_object *kv = dl_etcd_kv0(dl_etcd_txn_resp(r, 0, "response_range"));
  json_object *k = dl_etcd_get(kv, "key");
  int rc = 0;
  if (k && dl_etcd_unb64(json_object_get_string(k), pred, len) >= 0) rc = 1;
  json_object_put(r);
  return rc;
}

/* A waiter's look, in one round trip (dl_etcd_look_body's). */
static int look(dl_etcd *e, const char *key, const char *pfx, int64_t rev,
                char *pred, size_t len, int64_t *at, int64_t deadline) {
  json_object *r;
  int rc = txn_post(e, dl_etcd_look_body(key, pfx, rev), deadline, &r);
  return rc != 0 ? rc : dl_etcd_look_answer(e, key, r, pred, len, at);
}

/* The create revision of key now: > 0, 0 gone, or a negative code. */
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

static int64_t create_rev(dl_etcd *e, const char *key, int64_t deadline) {
  char body[ETCD_CREATE_REV_BODY_MAX];
  dl_etcd_create_rev_body(key, body, sizeof body);
  json_object *r;
  int rc = dl_etcd_call(e, "/v3/kv/range", body, deadline, &r, NULL);
  return rc != 0 ? rc : dl_etcd_create_rev_answer(r);
}

etcd_hold *dl_etcd_claim_new(dl_etcd *e, const dl_lock_ref *l, bool own_lease) {
  etcd_hold *h = calloc(1, sizeof *h);
  if (h == NULL || !(h->lock = dl_strdup(l->key)) ||
      !(h->owner = dl_strdup(l->owner))) {
    dl_etcd_hold_free(h);
    dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
    return NULL;
  }
  h->own_lease = own_lease;
  return h;
}

/* What keeps h (a claim on l) from being listed now (e->mu held): a hold
 * of this very owner that the client no longer counts (it was reported
 * lost, and not released: stale, its key goes), else another owner's
 * holding or taking l on the same lease (shared_key: the mutex's key is
 * the lease's); NULL nothing. *stale: whether it is the former. */
static etcd_hold *claim_blocker(dl_etcd *e, const dl_lock_ref *l,
                                const etcd_hold *h, bool shared_key,
                                bool *stale) {
  *stale = true;
  for (etcd_hold *x = e->holds; x; x = x->next)
    if (x->held && !x->permit && strcmp(x->lock, l->key) == 0 &&
        strcmp(x->owner, l->owner) == 0)
      return x;
  *stale = false;
  etcd_hold *o = NULL;
  for (etcd_hold *x = e->holds; x && !h->own_lease && shared_key; x = x->next)
    if (!x->own_lease && !x->permit && strcmp(x->lock, l->key) == 0) o = x;
  return o;
}

int dl_etcd_claim_now(dl_etcd *e, const dl_lock_ref *l, etcd_hold *h) {
  bool stale;
  pthread_mutex_lock(&e->mu);
  bool free_now = claim_blocker(e, l, h, true, &stale) == NULL;
  if (free_now) {
    h->next = e->holds;
    e->holds = h;
  }
  pthread_mutex_unlock(&e->mu);
  return free_now;
}

/* Waits for the client's other owner holding (or taking) lock on the same
 * lease (shared_key: the mutex's key is the lease's) to let go, then
 * claims it: 1 claimed (*out), 0 not by the deadline,
 * or a negative code. */
static int claim(dl_etcd *e, dl_acquire *a, bool own_lease, bool shared_key,
                 etcd_hold **out) {
  const dl_lock_ref *l = a->lock;
  etcd_hold *h = dl_etcd_claim_new(e, l, own_lease);
  if (h == NULL) return DLOCK_ENOMEM;
  pthread_mutex_lock(&e->mu);
  int rc = 1;
  for (;;) {
    bool is_stale;
    etcd_hold *o = claim_blocker(e, l, h, shared_key, &is_stale);
    if (o && is_stale) {
      pthread_mutex_unlock(&e->mu);
      int64_t deadline = dl_now_ms() + e->command_timeout_ms;
      dl_etcd_delete_at(e, o->key, o->rev, deadline);
      if (o->own_lease) dl_etcd_revoke(e, o->lease, deadline);
      dl_etcd_hold_drop(e, o);
      pthread_mutex_lock(&e->mu);
      continue;
    }
    if (o == NULL) break;
    if (atomic_load(e->env->closing)) {
      rc = dl_seterr(e->err, DLOCK_ECLOSED, "the client is closing");
      break;
    }
    if (wait_over(a)) {
      rc = 0;
      break;
    }
    a->waited = true;
    struct timespec ts;
    dl_abstime(a->deadline == INT64_MAX ? dl_now_ms() + 60000 : a->deadline,
               &ts);
    pthread_cond_timedwait(&e->cv, &e->mu, &ts);
  }
  if (rc == 1) {
    h->next = e->holds;
    e->holds = h;
  }
  pthread_mutex_unlock(&e->mu);
  if (rc != 1)
    dl_etcd_hold_free(h);
  else
    *out = h;
  return rc;
}

char *dl_etcd_put_read_body(const etcd_hold *h, const char *value,
                            const char *pfx) {
  char k64[B64(ETCD_KEY_MAX)], p64[B64(ETCD_KEY_MAX)], end64[B64(ETCD_KEY_MAX)];
  dl_etcd_b64(h->key, strlen(h->key), k64);
  dl_etcd_b64(pfx, strlen(pfx), p64);
  dl_etcd_prefix_end(pfx, end64);
  /* The value: any length (an election's proclaimed value, a holder's
   * description). */
  size_t vl = strlen(value), put_len = B64(ETCD_KEY_MAX) + B64(vl) + 128;
  char owner[3 * B64(ETCD_KEY_MAX)], get[B64(ETCD_KEY_MAX) + 64];
  char *v64 = malloc(B64(vl)), *put = malloc(put_len),
       *success = malloc(sizeof owner + put_len + 8), *body = NULL;
  char failure[sizeof owner + sizeof get + 8];
  if (v64 && put && success) {
    dl_etcd_b64(value, vl, v64);
    snprintf(owner, sizeof owner,
             "{\"request_range\":{\"key\":\"%s\",\"range_end\":\"%s\","
             "\"limit\":\"1\",\"sort_order\":\"ASCEND\","
             "\"sort_target\":\"CREATE\",\"keys_only\":true}}",
             p64, end64);
    snprintf(put, put_len,
             "{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\","
             "\"lease\":\"%" PRId64 "\"}}",
             k64, v64, h->lease);
    snprintf(get, sizeof get, "{\"request_range\":{\"key\":\"%s\"}}", k64);
    snprintf(success, sizeof owner + put_len + 8, "%s,%s", put, owner);
    snprintf(failure, sizeof failure, "%s,%s", get, owner);
    body = txn_body(k64, 0, success, failure);
  }
  free(v64);
  free(put);
  free(success);
  return body;
}

int dl_etcd_put_read_answer(dl_etcd *e, etcd_hold *h, json_object *r,
                            int64_t *owner_rev) {
  json_object *s = dl_etcd_get(r, "succeeded");
  if (s && json_object_get_boolean(s)) {
    h->rev = dl_etcd_i64(dl_etcd_get(r, "header"), "revision");
  } else {
    /* Our key was there already (a release of ours that did not get
     * through): it is ours, as Go's Mutex takes it; unless it is on
     * another lease (nothing of ours: not touched). */
    json_object *mine = dl_etcd_kv0(dl_etcd_txn_resp(r, 0, "response_range"));
    if (mine && dl_etcd_i64(mine, "lease") != h->lease) {
      json_object_put(r);
      h->rev = 0;
      return 1;
    }
    h->rev = dl_etcd_i64(mine, "create_revision");
  }
  json_object *o = dl_etcd_txn_resp(r, 1, "response_range");
  *owner_rev = dl_etcd_i64(dl_etcd_kv0(o), "create_revision");
  json_object_put(r);
  if (h->rev <= 0)
    return dl_seterr(e->err, DLOCK_EPROTO,
                     "etcd txn on %s: no create revision in the answer",
                     h->key);
  return 0;
}

int dl_etcd_put_and_read(dl_etcd *e, etcd_hold *h, const char *value,
                         const char *pfx, int64_t deadline,
                         int64_t *owner_rev) {
  json_object *r;
  int rc = txn_post(e, dl_etcd_put_read_body(h, value, pfx), deadline, &r);
  return rc != 0 ? rc : dl_etcd_put_read_answer(e, h, r, owner_rev);
}

int64_t dl_etcd_reenter_begin(dl_etcd *e, const dl_lock_ref *l, char *key,
                              size_t len) {
  pthread_mutex_lock(&e->mu);
  etcd_hold *h = hold_find(e, l->key, l->owner);
  int64_t rev = h && h->held ? h->rev : 0;
  if (rev) snprintf(key, len, "%s", h->key);
  pthread_mutex_unlock(&e->mu);
  return rev;
}

int dl_etcd_reenter_end(dl_etcd *e, dl_acquire *a, int64_t rev, int64_t now) {
  const dl_lock_ref *l = a->lock;
  pthread_mutex_lock(&e->mu);
  etcd_hold *h = hold_find(e, l->key, l->owner);
  bool same = h && h->held && now == rev; /* the client counts it */
  bool held = h && h->held;
  int64_t until = h && h->own_lease ? h->lease_until : e->lease_until;
  pthread_mutex_unlock(&e->mu);
  if (!same) {
    if (held) dl_etcd_hold_drop(e, h); /* not one being released */
    return 0;
  }
  a->status = 2;
  a->token = (uint64_t)rev;
  a->valid_until = until;
  return 1;
}

/* Takes the re-entry of an existing hold: 1, or 0 it was gone (dropped:
 * take it afresh), or a negative code. */
static int reenter(dl_etcd *e, dl_acquire *a) {
  char key[ETCD_KEY_MAX] = "";
  int64_t rev = dl_etcd_reenter_begin(e, a->lock, key, sizeof key);
  if (rev == 0) return 0;
  int64_t now = create_rev(e, key, dl_now_ms() + e->command_timeout_ms);
  if (now < 0) return (int)now;
  return dl_etcd_reenter_end(e, a, rev, now);
}

int64_t dl_etcd_lease_step(dl_etcd *e, etcd_hold *h, int64_t lease_ms) {
  pthread_mutex_lock(&e->mu);
  int64_t ms = h->own_lease ? lease_ms : e->lease_ttl_s * 1000;
  pthread_mutex_unlock(&e->mu);
  return ms / 3 > 200 ? ms / 3 : 200;
}

/* Keeps the lease of h's key alive while it waits: 0 (*until: the lease's
 * new validity), DLOCK_ELOST when it has ended (our key went with it), or
 * a negative code. */
static int keep_lease(dl_etcd *e, etcd_hold *h, int64_t *until) {
  int64_t sent = dl_now_ms(), deadline = sent + e->command_timeout_ms;
  int rc;
  if (h->own_lease) {
    int64_t ttl;
    rc = dl_etcd_keepalive(e, h->lease, deadline, &ttl);
    if (rc == 1) {
      *until = h->lease_until = dl_validity(sent, h->lease_ms);
      return 0;
    }
  } else {
    int64_t l;
    rc = dl_etcd_session(e, deadline, &l, until);
    if (rc == 0 && l == h->lease) return 0;
  } /* else a new session: the old one ended */
  if (rc < 0) return rc;
  return dl_seterr(e->err, DLOCK_ELOST,
                   "the lease of our etcd key %s ended while we waited",
                   h->key);
}

/* The read-write lock's other side held by this owner: for a reader, the
 * owner's write hold (":write" after its owner id); for a writer, the
 * owner's read hold. */
static bool other_side_held(dl_etcd *e, const dl_lock_ref *l) {
  char other[DL_OWNER_MAX + 8];
  size_t n = strlen(l->owner);
  if (l->kind == DL_KIND_READ)
    snprintf(other, sizeof other, "%s:write", l->owner);
  else if (n > 6 && strcmp(l->owner + n - 6, ":write") == 0)
    snprintf(other, sizeof other, "%.*s", (int)(n - 6), l->owner);
  else
    return false;
  pthread_mutex_lock(&e->mu);
  etcd_hold *h = hold_find(e, l->key, other);
  bool held = h && h->held;
  pthread_mutex_unlock(&e->mu);
  return held;
}

/* A read-write lock's key, contrib/recipes' RWMutex layout: PFX + "read/"
 * or "write/" + the wall clock in nanoseconds (unique in this process:
 * one more than the last, if the clock has not moved on). */
static void rw_key(const char *pfx, bool write, char *out, size_t len) {
  static _Atomic int64_t last;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int64_t ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec, was;
  do {
    was = atomic_load(&last);
    if (ns <= was) ns = was + 1;
  } while (!atomic_compare_exchange_weak(&last, &was, ns));
  snprintf(out, len, "%s%s/%" PRId64, pfx, write ? "write" : "read", ns);
}

int dl_etcd_mutex_key(dl_etcd *e, const dl_acquire *a, etcd_hold *h, char *pfx,
                      char *wait_pfx, char **value) {
  const dl_lock_ref *l = a->lock;
  bool rw = l->kind == DL_KIND_READ || l->kind == DL_KIND_WRITE;
  /* The mutex's key: PFX + the lease in hex; it waits for any key before
   * it. A reader waits for the writers' keys before its own, a writer for
   * every key before it (contrib/recipes' RWMutex). */
  char key[ETCD_KEY_MAX + 24];
  lock_prefix(e, l->key, pfx, ETCD_KEY_MAX);
  snprintf(wait_pfx, ETCD_KEY_MAX + 8, "%s%s", pfx,
           l->kind == DL_KIND_READ ? "write/" : "");
  if (rw)
    rw_key(pfx, l->kind == DL_KIND_WRITE, key, sizeof key);
  else
    snprintf(key, sizeof key, "%s%" PRIx64, pfx, (uint64_t)h->lease);
  if ((h->key = dl_strdup(key)) == NULL)
    return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  /* Our key, left by a release that failed: ours again (as Go takes it),
   * not to be deleted behind us. */
  pthread_mutex_lock(&e->mu);
  for (etcd_hold **pp = &e->orphans; *pp;) {
    etcd_hold *o = *pp;
    if (strcmp(o->key, key) == 0 && o->lease == 0) {
      *pp = o->next;
      dl_etcd_hold_free(o);
    } else {
      pp = &o->next;
    }
  }
  pthread_mutex_unlock(&e->mu);
  /* The key's value: the owner id, a newline, the holder's description
   * (Go never reads it; dlock status and the waiters do). */
  size_t vl = strlen(l->owner) + (a->info ? strlen(a->info) : 0) + 2;
  if ((*value = malloc(vl)) == NULL)
    return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  snprintf(*value, vl, "%s\n%s", l->owner, a->info ? a->info : "");
  return 0;
}

int dl_etcd_mutex_won(dl_etcd *e, dl_acquire *a, etcd_hold *h, int64_t until) {
  pthread_mutex_lock(&e->mu);
  h->held = true;
  if (!h->own_lease && e->lease == h->lease) until = e->lease_until;
  pthread_mutex_unlock(&e->mu);
  int rc = dl_etcd_watch_hold(e, h);
  if (rc != 0) return rc;
  a->status = 1;
  a->token = (uint64_t)h->rev;
  a->valid_until = until;
  return 1;
}

int dl_etcd_lock_acquire(dl_backend *b, dl_acquire *a) {
  dl_etcd *e = (dl_etcd *)b;
  const dl_lock_ref *l = a->lock;
  if (l->kind == DL_KIND_PLAIN)
    return dl_seterr(e->err, DLOCK_ENOTSUP,
                     "the etcd backend has no plain string lock (it has "
                     "the mutex, on Go's concurrency.Mutex layout)");
  bool rw = l->kind == DL_KIND_READ || l->kind == DL_KIND_WRITE;
  int rc;
  if (a->held > 0 && (rc = reenter(e, a)) != 0) return rc;
  /* The owner's read hold asking for the write side would wait for
   * itself (contrib's RWMutex does, forever): refused; the write holder
   * takes the read side at once, the downgrade (as Curator's). */
  bool other = rw && other_side_held(e, l);
  if (other && l->kind == DL_KIND_WRITE)
    return dl_seterr(e->err, DLOCK_EDEADLK,
                     "this owner holds the read lock of '%s': release it "
                     "before asking for the write lock",
                     l->name);
  bool downgrade = other;
  /* A fixed lease (not the watchdog's) is a lease of its own, never kept
   * alive: the key goes when it ends, as a lone Go session's would. */
  bool own = a->lease_ms != e->session_ttl_ms;
  etcd_hold *h = NULL;
  if ((rc = claim(e, a, own, !rw, &h)) != 1) {
    if (rc == 0) a->ttl = DLOCK_TTL_NONE;
    return rc;
  }
  int64_t sent = dl_now_ms(), until = 0;
  int64_t deadline = sent + e->command_timeout_ms;
  if (own) {
    rc = dl_etcd_fixed_lease(e, a->lease_ms, deadline, &h->lease, &until);
    h->lease_until = until;
    h->lease_ms = a->lease_ms;
  } else {
    rc = dl_etcd_session(e, deadline, &h->lease, &until);
  }
  char pfx[ETCD_KEY_MAX], key[ETCD_KEY_MAX + 24], wait_pfx[ETCD_KEY_MAX + 8];
  char *value = NULL;
  if (rc == 0) rc = dl_etcd_mutex_key(e, a, h, pfx, wait_pfx, &value);
  if (h->key) snprintf(key, sizeof key, "%s", h->key);
  int64_t owner_rev = 0;
  bool waited = false, walked = false;
  int rides = 0;
  for (int tries = 0; rc == 0; tries++) {
    rc = dl_etcd_put_and_read(e, h, value, wait_pfx, deadline, &owner_rev);
    if (rc != 1) break;
    /* The key is someone else's: a read-write lock's takes another time
     * (a clash of clocks); a mutex's is no key of a mutex. */
    if (!rw || tries == 3) {
      rc = dl_seterr(e->err, DLOCK_EWRONGTYPE,
                     "%s is there on a lease not ours: no lock of ours "
                     "made it (nothing changed)",
                     key);
      break;
    }
    rw_key(pfx, l->kind == DL_KIND_WRITE, key, sizeof key);
    free(h->key);
    rc = (h->key = dl_strdup(key)) == NULL
             ? dl_seterr(e->err, DLOCK_ENOMEM, "out of memory")
             : 0;
  }
  free(value);
  if (rc != 0) goto fail;
  /* Ours if nobody is before us: the owner (the oldest key under
   * wait_pfx) is ours or younger, or there is none (a reader, no writer). */
  bool won = downgrade || (owner_rev == 0 ? rw : owner_rev >= h->rev);
  while (!won) {
    if (wait_over(a)) {
      rc = 0;
      break;
    }
    a->waited = true;
    /* detect_deadlocks: once our key is in line, before the first wait
     * (of two owners closing a cycle at once, the later key sees the
     * other's). */
    if (a->detect && !walked) {
      walked = true;
      static const dl_walk_ops walk = {dl_etcd_waiters, dl_etcd_lock_holders};
      if ((rc = dl_deadlock_walk(&e->base, &walk, e->env, a)) < 0) break;
    }
    char pred[ETCD_KEY_MAX];
    int64_t at = 0;
    /* Our key still there, and who is before it: one txn. Nobody before
     * us: ours, our key being there (Go 3.4's Mutex does not look: etcd
     * issue 11456). */
    rc = look(e, h->key, wait_pfx, h->rev, pred, sizeof pred, &at,
              dl_now_ms() + e->command_timeout_ms);
    if (rc < 0 && rc != DLOCK_ELOST && ride_out(e, a, rc, &rides)) continue;
    if (rc < 0) break;
    if (rc == 0) {
      won = true;
      rc = 1;
      break;
    }
    /* In steps of a third of the lease at most: the lease our key is on
     * is kept alive meanwhile (nothing else does while we hold nothing). */
    int64_t step = dl_now_ms() + dl_etcd_lease_step(e, h, a->lease_ms);
    rc = dl_etcd_wait_delete(e, pred, at,
                             step < a->deadline ? step : a->deadline);
    if (rc < 0 && ride_out(e, a, rc, &rides)) continue;
    if (rc < 0) break;
    waited = true;
    if (rc == 0 && !wait_over(a)) rc = keep_lease(e, h, &until);
    if (rc < 0 && ride_out(e, a, rc, &rides)) continue;
    if (rc < 0) break;
    if (rc == 0 && wait_over(a)) break; /* the deadline, or a cancel */
  }
  /* A fixed lease runs from the grant: after a wait, from a keepalive. */
  if (won && own && waited && (rc = keep_lease(e, h, &until)) < 0) goto fail;
  if (won && (rc = dl_etcd_mutex_won(e, a, h, until)) == 1) return 1;
  if (won) goto fail;
  /* Refused: the holder's lease is not read. */
  if (rc == 0) a->ttl = DLOCK_TTL_NONE;
fail:;
  /* Not taken: our key goes (Go's TryLock and a cancelled Lock do the
   * same), at its own revision only. */
  int gone = 0;
  if (h->rev > 0)
    gone = dl_etcd_delete_at(e, h->key, h->rev,
                             dl_now_ms() + e->command_timeout_ms);
  else if (h->key && h->lease && !own &&
           (dl_etcd_transient(rc) || rc == DLOCK_EPROTO))
    delete_key(e, h->key); /* a put whose answer we did not get (an
                              error the server answered: no put) */
  /* A fixed lease whose key is surely gone is kept for the next; one
   * that may still carry our key goes, and the key with it. */
  if (own && h->lease && gone == 1)
    dl_etcd_lease_idle(e, h->lease, h->lease_ms, h->lease_until);
  else if (own && h->lease)
    dl_etcd_revoke(e, h->lease, dl_now_ms() + e->command_timeout_ms);
  dl_etcd_hold_drop(e, h);
  return rc;
}

int dl_etcd_release_begin(dl_etcd *e, const dl_lock_ref *l, int count,
                          etcd_hold **hp) {
  *hp = NULL;
  pthread_mutex_lock(&e->mu);
  etcd_hold *h = hold_find(e, l->key, l->owner);
  if (h && !h->held) h = NULL;
  int rc = 1;
  if (h == NULL)
    rc = DLOCK_ENOTOWNER;
  else if (count > 1) /* one re-entry less (the client counts it) */
    rc = 0;
  /* Ours from here: no longer held, so that a renewal or a check finding
   * the key gone (a force release) leaves it alone; but still listed
   * until its key is deleted (dl_etcd_hold_drop), so that the client's
   * other owners of the name keep waiting (claim): one claiming now would
   * find our key still there and take it as its own (put_and_read), and
   * our delete would then take it from under it. */
  if (rc == 1) h->held = false;
  pthread_mutex_unlock(&e->mu);
  if (h == NULL)
    return dl_seterr(e->err, DLOCK_ENOTOWNER, "'%s' is not held by %s", l->name,
                     l->owner);
  if (rc != 1) return rc;
  dl_etcd_unwatch(e, h->watch);
  h->watch = NULL;
  *hp = h;
  return 1;
}
