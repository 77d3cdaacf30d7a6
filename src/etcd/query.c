/* query.c: the etcd mutex's force release, queries and renewals (the
 * session lease kept alive, vouching for the holds whose watch heard
 * nothing, and every held key read, in txns of ETCD_TXN_OPS). */
#include "etcdb.h"
#include "sem.h"

#include <fnmatch.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define B64(n) (4 * (((n) + 2) / 3) + 1)

void dl_etcd_range_under_body(const char *pfx, int limit, char *body,
                              size_t len) {
  char p64[B64(ETCD_KEY_MAX)], end64[B64(ETCD_KEY_MAX)];
  dl_etcd_b64(pfx, strlen(pfx), p64);
  dl_etcd_prefix_end(pfx, end64);
  snprintf(body, len,
           "{\"key\":\"%s\",\"range_end\":\"%s\",\"limit\":\"%d\","
           "\"sort_order\":\"ASCEND\",\"sort_target\":\"CREATE\"}",
           p64, end64, limit);
}

int dl_etcd_range_under(dl_etcd *e, const char *pfx, int limit,
                        json_object **out) {
  char body[ETCD_RANGE_BODY_MAX];
  dl_etcd_range_under_body(pfx, limit, body, sizeof body);
  return dl_etcd_call(e, "/v3/kv/range", body,
                      dl_now_ms() + e->command_timeout_ms, out, NULL);
}

/* The keys under the lock's prefix (into pfx), as dl_etcd_range_under. */
static int range_prefix(dl_etcd *e, const char *lock, int limit,
                        json_object **out, char *pfx, size_t len) {
  snprintf(pfx, len, "%s%s/", e->prefix, lock);
  return dl_etcd_range_under(e, pfx, limit, out);
}

/* What a key under pfx is: a mutex's (PFX + a lease id in hex), a
 * read-write lock's reader or writer (contrib/recipes' RWMutex: PFX +
 * "read/" or "write/" + a decimal number), or nothing a recipe makes.
 * Every recipe's key is on a lease: one on none of that shape is an
 * application's (`users/42`), never a holder. */
static etcd_key_kind kind_of(const char *key, int64_t lease, const char *pfx) {
  size_t n = strlen(pfx);
  if (lease == 0 || strncmp(key, pfx, n) != 0) return ETCD_KEY_NONE;
  const char *t = key + n;
  size_t m = strspn(t, "0123456789abcdef");
  if (m > 0 && m <= 16 && t[m] == '\0') return ETCD_KEY_MUTEX;
  etcd_key_kind k = strncmp(t, "read/", 5) == 0    ? ETCD_KEY_READ
                    : strncmp(t, "write/", 6) == 0 ? ETCD_KEY_WRITE
                                                   : ETCD_KEY_NONE;
  if (k == ETCD_KEY_NONE) return k;
  t += k == ETCD_KEY_READ ? 5 : 6;
  m = strspn(t, "0123456789");
  return m > 0 && m <= 20 && t[m] == '\0' ? k : ETCD_KEY_NONE;
}

/* The holders among the keys under pfx (oldest first): the oldest key,
 * and with a reader the readers after it up to the first other key.
 * Returns how many, or -1 (in *bad the key) when one is no recipe's. */
static int holders_of(json_object *kvs, const char *pfx, char *bad,
                      size_t len) {
  size_t n = kvs ? json_object_array_length(kvs) : 0;
  int holders = 0;
  bool reading = true;
  for (size_t i = 0; i < n; i++) {
    json_object *kv = json_object_array_get_idx(kvs, i);
    json_object *k = dl_etcd_get(kv, "key");
    char key[ETCD_KEY_MAX];
    etcd_key_kind kk = ETCD_KEY_NONE;
    if (k && dl_etcd_unb64(json_object_get_string(k), key, sizeof key) >= 0)
      kk = kind_of(key, dl_etcd_i64(kv, "lease"), pfx);
    if (kk == ETCD_KEY_NONE) {
      snprintf(bad, len, "%s", k ? key : "?");
      return -1;
    }
    if (i == 0 || (reading && kk == ETCD_KEY_READ)) holders++;
    reading = reading && kk == ETCD_KEY_READ;
  }
  return holders;
}

void dl_etcd_holder_value(const char *v64, int64_t lease, char *owner,
                          size_t olen, char *info, size_t ilen) {
  size_t cap = strlen(v64) / 4 * 3 + 4;
  char *val = malloc(cap);
  int vn = val ? dl_etcd_unb64(v64, val, cap) : -1;
  const char *nl = vn > 0 ? memchr(val, '\n', (size_t)vn) : NULL;
  snprintf(owner, olen, "%" PRIx64, (uint64_t)lease);
  info[0] = '\0';
  if (nl && nl > val) snprintf(owner, olen, "%.*s", (int)(nl - val), val);
  const char *i = nl ? nl + 1 : val;
  int il = vn > 0 ? vn - (int)(i - val) : 0;
  if (il > 0) snprintf(info, ilen, "%.*s", il, i);
  free(val);
}

int dl_etcd_force_txn(dl_etcd *e, json_object *r, const char *pfx, char **out) {
  *out = NULL;
  char bad[ETCD_KEY_MAX];
  json_object *kvs = dl_etcd_get(r, "kvs");
  int holders = holders_of(kvs, pfx, bad, sizeof bad);
  if (holders < 0) {
    json_object_put(r);
    return dl_seterr(e->err, DLOCK_EWRONGTYPE,
                     "not a lock: a key under %s that no lock makes "
                     "(%s; nothing changed)",
                     pfx, bad);
  }
  if (holders == 0) {
    json_object_put(r);
    return 0;
  }
  /* The holders' keys go (what `etcdctl del` does), each at its
   * revision, in one txn: their clients hear it through their watches. */
  size_t cap = (size_t)holders * (3 * B64(ETCD_KEY_MAX) + 160) + 64;
  char *body = malloc(cap), *ops = malloc(cap);
  if (body == NULL || ops == NULL) {
    free(body);
    free(ops);
    json_object_put(r);
    return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  }
  size_t at = (size_t)snprintf(body, cap, "{\"compare\":["), ot = 0;
  for (int i = 0; i < holders; i++) {
    json_object *kv = json_object_array_get_idx(kvs, (size_t)i);
    const char *k64 = json_object_get_string(dl_etcd_get(kv, "key"));
    at +=
        (size_t)snprintf(body + at, cap - at,
                         "%s{\"target\":\"CREATE\",\"key\":\"%s\","
                         "\"create_revision\":\"%" PRId64 "\"}",
                         i ? "," : "", k64, dl_etcd_i64(kv, "create_revision"));
    ot += (size_t)snprintf(ops + ot, cap - ot,
                           "%s{\"request_delete_range\":{\"key\":\"%s\"}}",
                           i ? "," : "", k64);
  }
  snprintf(body + at, cap - at, "],\"success\":[%s]}", ops);
  free(ops);
  json_object_put(r);
  *out = body;
  return 1;
}

int dl_etcd_force_busy(dl_etcd *e, const dl_lock_ref *l) {
  return dl_seterr(e->err, DLOCK_ETIMEDOUT,
                   "the holder of '%s' changed at every try", l->name);
}

int dl_etcd_lock_force_release(dl_backend *b, const dl_lock_ref *l) {
  dl_etcd *e = (dl_etcd *)b;
  for (int attempt = 0; attempt < ETCD_FORCE_TRIES; attempt++) {
    json_object *r;
    char pfx[ETCD_KEY_MAX], *body;
    int rc = range_prefix(e, l->key, 0, &r, pfx, sizeof pfx);
    if (rc != 0) return rc;
    if ((rc = dl_etcd_force_txn(e, r, pfx, &body)) <= 0) return rc;
    rc = dl_etcd_call(e, "/v3/kv/txn", body,
                      dl_now_ms() + e->command_timeout_ms, &r, NULL);
    free(body);
    if (rc != 0) return rc;
    bool done = dl_etcd_txn_succeeded(r);
    json_object_put(r);
    if (done) return 1;
  }
  return dl_etcd_force_busy(e, l);
}

void dl_etcd_ttl_body(int64_t lease, char *body, size_t len) {
  snprintf(body, len, "{\"ID\":\"%" PRId64 "\"}", lease);
}

int64_t dl_etcd_ttl_answer(json_object *r) {
  int64_t ttl = dl_etcd_i64(r, "TTL");
  json_object_put(r);
  return ttl > 0 ? ttl * 1000 : DLOCK_TTL_FREE;
}

const char *dl_etcd_query_req(dl_etcd *e, const dl_lock_ref *l, dl_lock_query q,
                              char *body, size_t len, int64_t *rev) {
  *rev = 0;
  if (q != DL_QUERY_HELD && q != DL_QUERY_COUNT) {
    char pfx[ETCD_KEY_MAX];
    snprintf(pfx, sizeof pfx, "%s%s/", e->prefix, l->key);
    dl_etcd_range_under_body(pfx, 1, body, len);
    return "/v3/kv/range";
  }
  pthread_mutex_lock(&e->mu);
  etcd_hold *h = e->holds;
  while (h && !(h->held && strcmp(h->lock, l->key) == 0 &&
                strcmp(h->owner, l->owner) == 0))
    h = h->next;
  char key[ETCD_KEY_MAX] = "";
  if (h) *rev = h->rev;
  if (h) snprintf(key, sizeof key, "%s", h->key);
  pthread_mutex_unlock(&e->mu);
  if (*rev == 0) return NULL;
  char k64[B64(ETCD_KEY_MAX)];
  dl_etcd_b64(key, strlen(key), k64);
  snprintf(body, len, "{\"key\":\"%s\",\"keys_only\":true}", k64);
  return "/v3/kv/range";
}

int64_t dl_etcd_query_answer(dl_etcd *e, const dl_lock_ref *l, dl_lock_query q,
                             json_object *r, int64_t rev, long long *v) {
  json_object *kv = dl_etcd_kv0(r);
  int64_t lease = dl_etcd_i64(kv, "lease");
  if (q == DL_QUERY_HELD || q == DL_QUERY_COUNT) {
    bool held = dl_etcd_i64(kv, "create_revision") == rev;
    json_object_put(r);
    if (held) {
      int count = e->env->hold_count(e->env->holds, l->key, l->owner);
      *v = q == DL_QUERY_HELD || count < 1 ? 1 : count;
    }
    return 0;
  }
  if (q == DL_QUERY_LOCKED)
    *v = kv != NULL;
  else if (q == DL_QUERY_TOKEN)
    *v = dl_etcd_i64(kv, "create_revision");
  else if (q == DL_QUERY_TTL)
    *v = kv ? DLOCK_TTL_NONE : DLOCK_TTL_FREE;
  json_object_put(r);
  return q == DL_QUERY_TTL ? lease : 0;
}

int dl_etcd_lock_query(dl_backend *b, const dl_lock_ref *l, dl_lock_query q,
                       long long *v) {
  dl_etcd *e = (dl_etcd *)b;
  *v = 0;
  char body[ETCD_RANGE_BODY_MAX];
  int64_t rev;
  const char *path = dl_etcd_query_req(e, l, q, body, sizeof body, &rev);
  if (path == NULL) return 0;
  json_object *r;
  int rc = dl_etcd_call(e, path, body, dl_now_ms() + e->command_timeout_ms, &r,
                        NULL);
  if (rc != 0) return rc;
  int64_t lease = dl_etcd_query_answer(e, l, q, r, rev, v);
  if (lease == 0) return 0;
  dl_etcd_ttl_body(lease, body, sizeof body);
  rc = dl_etcd_call(e, "/v3/lease/timetolive", body,
                    dl_now_ms() + e->command_timeout_ms, &r, NULL);
  if (rc != 0) return rc;
  *v = dl_etcd_ttl_answer(r);
  return 0;
}

int dl_etcd_renew_session_kept(dl_etcd *e, int64_t lease, int64_t sent, int rc,
                               int64_t ttl) {
  pthread_mutex_lock(&e->mu);
  if (rc == 1 && e->lease == lease) {
    e->lease_ttl_s = ttl;
    e->lease_until = dl_validity(sent, ttl * 1000);
  } else if (rc == 0 && e->lease == lease) {
    e->lease = 0; /* gone: every key on it too (the checks say so) */
  }
  pthread_mutex_unlock(&e->mu);
  return rc < 0 ? rc : 0;
}

void dl_etcd_renew_consumer_end(dl_renew_item *it, int cr, int *first) {
  it->result = cr == 2 ? 0 : cr < 0 ? -1 : cr;
  if (cr < 0 && *first == 0) *first = cr;
}

void dl_etcd_renew_txns_free(etcd_renew_txns *t) {
  free(t->revs);
  free(t->heard);
  free(t->reads);
  free(t->cut);
  memset(t, 0, sizeof *t);
}

int dl_etcd_renew_txns(dl_etcd *e, int n, dl_renew_item *items,
                       etcd_renew_txns *t) {
  memset(t, 0, sizeof *t);
  size_t cap = 0, at = 0;
  int asked = 0;
  t->revs = calloc((size_t)n + 1, sizeof *t->revs);
  t->heard = calloc((size_t)n + 1, sizeof *t->heard);
  t->cut = calloc((size_t)n / ETCD_TXN_OPS + 2, sizeof *t->cut);
  if (t->revs == NULL || t->heard == NULL || t->cut == NULL) goto oom;
  for (int i = 0; i < n; i++) {
    items[i].result = -1;
    pthread_mutex_lock(&e->mu);
    etcd_hold *h = e->holds;
    while (h && !(h->held && h->permit == items[i].permit &&
                  strcmp(h->lock, items[i].key) == 0 &&
                  strcmp(h->owner, items[i].owner) == 0))
      h = h->next;
    char k64[B64(ETCD_KEY_MAX)] = "";
    if (h) {
      dl_etcd_b64(h->key, strlen(h->key), k64);
      t->revs[i] = h->rev;
      t->heard[i] = h->watch ? dl_etcd_watch_heard(h->watch) : 0;
    }
    pthread_mutex_unlock(&e->mu);
    if (k64[0] == '\0') { /* not held here: never re-created */
      if (!items[i].permit) items[i].result = 0;
      continue;
    }
    size_t need = strlen(k64) + 48;
    if (at + need > cap) {
      size_t nc = cap ? cap * 2 : 4096;
      while (nc < at + need)
        nc *= 2;
      char *r = realloc(t->reads, nc);
      if (r == NULL) goto oom;
      t->reads = r;
      cap = nc;
    }
    if (asked % ETCD_TXN_OPS == 0) t->cut[t->ntxn++] = at; /* a new txn */
    at += (size_t)snprintf(t->reads + at, cap - at,
                           "%s{\"request_range\":{\"key\":\"%s\","
                           "\"keys_only\":true}}",
                           asked % ETCD_TXN_OPS ? "," : "", k64);
    asked++;
  }
  t->cut[t->ntxn] = at;
  return 0;
oom:
  dl_etcd_renew_txns_free(t);
  return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
}

char *dl_etcd_renew_body(const etcd_renew_txns *t, int c) {
  size_t len = t->cut[c + 1] - t->cut[c];
  char *body = malloc(len + 32);
  if (body)
    snprintf(body, len + 32, "{\"success\":[%.*s]}", (int)len,
             t->reads + t->cut[c]);
  return body;
}

/* The hold items[i] was asked for at rev, if still held (e->mu held). */
static etcd_hold *item_hold(dl_etcd *e, const dl_renew_item *it, int64_t rev) {
  etcd_hold *h = e->holds;
  while (h && !(h->held && h->rev == rev && strcmp(h->lock, it->key) == 0 &&
                strcmp(h->owner, it->owner) == 0))
    h = h->next;
  return h;
}

void dl_etcd_renew_carry(dl_etcd *e, int64_t lease, int n, dl_renew_item *items,
                         const etcd_renew_txns *t) {
  int64_t now = dl_now_ms();
  pthread_mutex_lock(&e->mu);
  int64_t until = lease != 0 && e->lease == lease ? e->lease_until : 0;
  for (int i = 0; until > now && i < n; i++) {
    if (t->revs[i] == 0 || items[i].permit) continue;
    etcd_hold *h = item_hold(e, &items[i], t->revs[i]);
    /* A watch that heard nothing since the key was last found: a deletion
     * would have been heard (its stream starts from the key's creation,
     * and a start that failed or an end counts as heard). */
    if (h && !h->own_lease && h->lease == lease && h->watch &&
        dl_etcd_watch_heard(h->watch) == h->heard_seen) {
      items[i].result = 1;
      items[i].valid_until = until;
    }
  }
  pthread_mutex_unlock(&e->mu);
}

int64_t dl_etcd_reads_deadline(const dl_etcd *e, int64_t deadline) {
  int64_t cap =
      dl_now_ms() + (e->session_ttl_ms > 3 ? e->session_ttl_ms / 3 : 1);
  return deadline < cap ? deadline : cap;
}

void dl_etcd_renew_answer(dl_etcd *e, int n, dl_renew_item *items,
                          const etcd_renew_txns *t, int c, json_object *r) {
  int a = 0;
  for (int i = 0; i < n; i++) {
    if (t->revs[i] == 0) continue; /* not asked */
    int j = a++ - c * ETCD_TXN_OPS;
    if (j < 0 || j >= ETCD_TXN_OPS) continue; /* another txn's */
    const int64_t rev = t->revs[i];
    json_object *x = dl_etcd_txn_resp(r, j, "response_range");
    int64_t now = dl_etcd_i64(dl_etcd_kv0(x), "create_revision");
    pthread_mutex_lock(&e->mu);
    etcd_hold *h = item_hold(e, &items[i], rev);
    int64_t until = h && h->own_lease ? h->lease_until : e->lease_until;
    bool gone = h == NULL || now != rev;
    /* Deleted (a force release), or its lease ended: lost, and forgotten
     * (never re-created). */
    if (h && gone) {
      dl_etcd_hold_unlink(e, h);
    } else if (h && (int)(t->heard[i] - h->heard_seen) > 0) {
      h->heard_seen = t->heard[i]; /* found after what its watch heard */
    }
    pthread_mutex_unlock(&e->mu);
    if (gone) {
      items[i].result = 0;
      if (h) dl_etcd_hold_end(e, h);
    } else if (until > dl_now_ms()) {
      items[i].result = 1;
      items[i].valid_until = until;
    } /* else: there, but its lease not confirmed in time: unknown (or
       * what the keepalive carried: dl_etcd_renew_carry) */
  }
}

int dl_etcd_renew(dl_backend *b, int64_t deadline, int64_t lease_ms, int n,
                  dl_renew_item *items, int *calls) {
  dl_etcd *e = (dl_etcd *)b;
  *calls = 0;
  int first = 0;
  etcd_renew_txns t;
  int rc = dl_etcd_renew_txns(e, n, items, &t);
  if (rc != 0) return rc;
  /* Renewal: the session's lease, kept alive once (Go's keepalive
   * stream, as one request a renewal: the gateway takes one message). */
  pthread_mutex_lock(&e->mu);
  int64_t lease = e->lease;
  pthread_mutex_unlock(&e->mu);
  if (lease_ms > 0 && lease != 0) {
    int64_t sent = dl_now_ms(), ttl;
    (*calls)++;
    rc = dl_etcd_keepalive(e, lease, deadline, &ttl);
    first = dl_etcd_renew_session_kept(e, lease, sent, rc, ttl);
  }
  dl_etcd_renew_carry(e, lease, n, items, &t);
  for (int i = 0; i < n; i++)
    if (items[i].permit && t.revs[i] == 0)
      dl_etcd_renew_consumer_end(
          &items[i], dl_etcd_consumer_renew(e, &items[i], lease_ms, deadline),
          &first);
  /* Every hold's key, read in txns of ETCD_TXN_OPS reads. */
  int64_t reads = dl_etcd_reads_deadline(e, deadline);
  for (int c = 0; c < t.ntxn; c++) {
    char *body = dl_etcd_renew_body(&t, c);
    json_object *r = NULL;
    (*calls)++;
    rc = body ? dl_etcd_call(e, "/v3/kv/txn", body, reads, &r, NULL)
              : dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
    free(body);
    if (rc != 0 && first == 0) first = rc;
    if (rc == 0) dl_etcd_renew_answer(e, n, items, &t, c, r);
    if (r) json_object_put(r);
  }
  dl_etcd_renew_txns_free(&t);
  return first;
}

void dl_etcd_inspect_req(dl_etcd *e, const char *key, dlock_lock_state *st,
                         char *pfx, char *body, size_t len) {
  memset(st, 0, sizeof *st);
  st->held_ms = -1;
  st->ttl_ms = DLOCK_TTL_FREE;
  st->counter = -1;
  snprintf(pfx, ETCD_KEY_MAX, "%s%s/", e->prefix, key);
  dl_etcd_range_under_body(pfx, 0, body, len);
}

/* inspect's keys: r's (the range under pfx) into st, the holder's lease
 * into *lease; with cb (detect_deadlocks' walk), every holder's owner to
 * cb too (a read lock's readers). How many keys r has. */
static size_t inspect_keys(json_object *r, const char *pfx,
                           dlock_lock_state *st, dl_holder_cb cb, void *ud,
                           int64_t *lease) {
  json_object *kvs = dl_etcd_get(r, "kvs");
  size_t n = kvs ? json_object_array_length(kvs) : 0;
  /* "keys": a lock's keys under the name's prefix (the mutex's or the
   * read-write lock's); "data": a key there that no lock makes (no recipe
   * takes it); "none": nothing. */
  snprintf(st->type, sizeof st->type, "%s", n ? "keys" : "none");
  *lease = 0;
  int keys = 0;
  bool reading = false;
  for (size_t i = 0; i < n; i++) {
    json_object *kv = json_object_array_get_idx(kvs, i);
    json_object *k = dl_etcd_get(kv, "key");
    char name[ETCD_KEY_MAX];
    etcd_key_kind kk = ETCD_KEY_NONE;
    if (k && dl_etcd_unb64(json_object_get_string(k), name, sizeof name) >= 0)
      kk = kind_of(name, dl_etcd_i64(kv, "lease"), pfx);
    if (kk == ETCD_KEY_NONE) {
      snprintf(st->type, sizeof st->type, "data");
      continue;
    }
    keys++;
    if (st->held) {
      /* Readers after a reading holder hold it too. */
      if (reading && kk == ETCD_KEY_READ) {
        st->holders = ++st->readers;
        if (cb) {
          char o[DLOCK_OWNER_MAX], info[DLOCK_INFO_MAX + 1];
          json_object *v = dl_etcd_get(kv, "value");
          dl_etcd_holder_value(v ? json_object_get_string(v) : "",
                               dl_etcd_i64(kv, "lease"), o, sizeof o, info,
                               sizeof info);
          if (o[0] && cb(o, ud) != 0) cb = NULL;
        }
      }
      reading = reading && kk == ETCD_KEY_READ;
      continue;
    }
    /* The holder: the oldest key. Its value: dlock's owner id and the
     * holder's description (dlock_lock_set_info); Go's recipes leave it
     * empty, and the owner is then the key's lease (in hex), as etcdctl
     * names it. */
    st->held = 1;
    st->holders = 1;
    st->hold_count = 1;
    *lease = dl_etcd_i64(kv, "lease");
    json_object *v = dl_etcd_get(kv, "value");
    dl_etcd_holder_value(v ? json_object_get_string(v) : "", *lease, st->owner,
                         sizeof st->owner, st->info, sizeof st->info);
    st->token = (uint64_t)dl_etcd_i64(kv, "create_revision");
    st->ttl_ms = DLOCK_TTL_NONE;
    if (kk != ETCD_KEY_MUTEX)
      snprintf(st->mode, sizeof st->mode, "%s",
               kk == ETCD_KEY_READ ? "read" : "write");
    reading = kk == ETCD_KEY_READ;
    st->readers = reading;
    if (cb && st->owner[0] && cb(st->owner, ud) != 0) cb = NULL;
  }
  if (st->held) st->waiters = st->queued = keys - st->holders;
  return n;
}

etcd_inspect_next dl_etcd_inspect_answer(json_object *r, const char *pfx,
                                         dlock_lock_state *st, int64_t *lease) {
  size_t n = inspect_keys(r, pfx, st, NULL, NULL, lease);
  json_object_put(r);
  /* Keys no lock makes: a semaphore's, perhaps (they live under PFX). */
  if (!st->held && strcmp(st->type, "data") == 0) return ETCD_INSPECT_SEM;
  /* Nothing under the name: a latch's count, perhaps, at the name. */
  if (n == 0) return ETCD_INSPECT_LATCH;
  return *lease != 0 ? ETCD_INSPECT_TTL : ETCD_INSPECT_DONE;
}

void dl_etcd_inspect_ttl(json_object *r, dlock_lock_state *st) {
  int64_t ttl = dl_etcd_ttl_answer(r);
  if (ttl != DLOCK_TTL_FREE) st->ttl_ms = ttl;
}

/* inspect's snapshot; with cb (detect_deadlocks' walk), no more than the
 * keys. */
static int inspect(dl_backend *b, const char *key, dlock_lock_state *st,
                   dl_holder_cb cb, void *ud) {
  dl_etcd *e = (dl_etcd *)b;
  char pfx[ETCD_KEY_MAX], body[ETCD_RANGE_BODY_MAX];
  dl_etcd_inspect_req(e, key, st, pfx, body, sizeof body);
  json_object *r;
  int rc = dl_etcd_call(e, "/v3/kv/range", body,
                        dl_now_ms() + e->command_timeout_ms, &r, NULL);
  if (rc != 0) return rc;
  int64_t lease;
  if (cb) { /* the walk's: the holders are all it needs */
    inspect_keys(r, pfx, st, cb, ud, &lease);
    json_object_put(r);
    return 0;
  }
  switch (dl_etcd_inspect_answer(r, pfx, st, &lease)) {
  case ETCD_INSPECT_SEM: return dl_etcd_sem_inspect(e, key, st);
  case ETCD_INSPECT_LATCH: return dl_etcd_latch_inspect(e, key, st);
  case ETCD_INSPECT_TTL:
    dl_etcd_ttl_body(lease, body, sizeof body);
    rc = dl_etcd_call(e, "/v3/lease/timetolive", body,
                      dl_now_ms() + e->command_timeout_ms, &r, NULL);
    if (rc == 0) dl_etcd_inspect_ttl(r, st);
    return rc;
  case ETCD_INSPECT_DONE: break;
  }
  return 0;
}

int dl_etcd_inspect(dl_backend *b, const char *key, dlock_lock_state *st) {
  return inspect(b, key, st, NULL, NULL);
}

int dl_etcd_lock_holders(dl_backend *b, const char *key, dl_holder_cb cb,
                         void *ud) {
  dlock_lock_state st;
  return inspect(b, key, &st, cb, ud);
}

void dl_etcd_scan_begin(dl_etcd *e, const char *match, size_t prefix_len,
                        dlock_scan_cb cb, void *ud, etcd_scan *sc) {
  /* Every key under the URL's prefix (the whole keyspace without one: key
   * and range_end "\0"), a page at a time, keys only. */
  *sc =
      (etcd_scan){.match = match, .prefix_len = prefix_len, .cb = cb, .ud = ud};
  sc->pl = strlen(e->prefix);
  if (sc->pl)
    dl_etcd_prefix_end(e->prefix, sc->end64);
  else
    snprintf(sc->end64, sizeof sc->end64, "AA==");
  memcpy(sc->from, e->prefix, sc->pl);
  sc->fl = sc->pl;
}

void dl_etcd_scan_body(const etcd_scan *sc, char *body, size_t len) {
  char p64[B64(ETCD_KEY_MAX)];
  if (sc->fl == 0)
    snprintf(p64, sizeof p64, "AA==");
  else
    dl_etcd_b64(sc->from, sc->fl, p64);
  snprintf(body, len,
           "{\"key\":\"%s\",\"range_end\":\"%s\",\"limit\":\"500\","
           "\"keys_only\":true}",
           p64, sc->end64);
}

bool dl_etcd_scan_page(etcd_scan *sc, json_object *r) {
  json_object *kvs = dl_etcd_get(r, "kvs");
  size_t n = kvs ? json_object_array_length(kvs) : 0;
  json_object *more = dl_etcd_get(r, "more");
  bool again = more && json_object_get_boolean(more);
  bool stop = false;
  size_t pl = sc->pl;
  for (size_t i = 0; i < n && !stop; i++) {
    json_object *kv = json_object_array_get_idx(kvs, i);
    json_object *k = dl_etcd_get(kv, "key");
    char key[ETCD_KEY_MAX];
    int kl = k ? dl_etcd_unb64(json_object_get_string(k), key, sizeof key) : -1;
    if (kl < 0) continue;
    memcpy(sc->from, key, (size_t)kl); /* the next page: after this key */
    sc->from[kl] = '\0';
    sc->fl = (size_t)kl + 1;
    /* PREFIX + lock + "/" + hex: a mutex's key; PREFIX + lock +
     * "/read/" or "/write/" + a number: a read-write lock's; on a lease
     * (kind_of's rule). */
    if (dl_etcd_i64(kv, "lease") == 0) continue;
    char *slash = strrchr(key, '/');
    if (slash == NULL || (size_t)(slash - key) <= pl) continue;
    size_t hl = strlen(slash + 1);
    if (hl == 0 || hl > 20 || strspn(slash + 1, "0123456789abcdef") != hl)
      continue;
    *slash = '\0';
    char *side = strrchr(key, '/');
    bool rw = side &&
              (strcmp(side, "/read") == 0 || strcmp(side, "/write") == 0) &&
              strspn(slash + 1, "0123456789") == hl;
    if (rw && (size_t)(side - key) > pl)
      *side = '\0';
    else if (hl > 16)
      continue;
    const char *lock = key + pl;
    if (strcmp(lock, sc->last) == 0) continue; /* its next waiter */
    snprintf(sc->last, sizeof sc->last, "%s", lock);
    if (strlen(lock) < sc->prefix_len || fnmatch(sc->match, lock, 0) != 0)
      continue;
    sc->passed++;
    stop = sc->cb(lock + sc->prefix_len, sc->ud) != 0;
  }
  json_object_put(r);
  return !stop && again && n > 0;
}

int dl_etcd_scan(dl_backend *b, const char *match, size_t prefix_len,
                 dlock_scan_cb cb, void *ud) {
  dl_etcd *e = (dl_etcd *)b;
  etcd_scan *sc = malloc(sizeof *sc);
  if (sc == NULL) return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  dl_etcd_scan_begin(e, match, prefix_len, cb, ud, sc);
  int rc;
  for (;;) {
    char body[ETCD_SCAN_BODY_MAX];
    dl_etcd_scan_body(sc, body, sizeof body);
    json_object *r;
    rc = dl_etcd_call(e, "/v3/kv/range", body,
                      dl_now_ms() + e->command_timeout_ms, &r, NULL);
    if (rc != 0 || !dl_etcd_scan_page(sc, r)) break;
  }
  if (rc == 0) rc = sc->passed;
  free(sc);
  return rc;
}
