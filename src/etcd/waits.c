/* waits.c: the etcd mutex's waiters (the seam's waiters entry, for dlock
 * deadlocks and detect_deadlocks): no records of their own, the layout
 * tells them. A waiter is a key under the lock's prefix, on its owner's
 * lease, younger (a later create revision) than the holders; its value
 * names its owner and the holder's description (mutex.c). */
#include "etcdb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define B64(n) (4 * (((n) + 2) / 3) + 1)

/* One lock's key: its lock's name (without the key prefix), its create
 * revision, its kind and what its value names. */
typedef struct wkey {
  char *lock, *owner, *info;
  int64_t rev;
  etcd_key_kind kind;
} wkey;

typedef struct wkeys {
  wkey *v;
  size_t n, cap;
} wkeys;

static void wkeys_free(wkeys *w) {
  for (size_t i = 0; i < w->n; i++) {
    free(w->v[i].lock);
    free(w->v[i].owner);
    free(w->v[i].info);
  }
  free(w->v);
}

/* The lock a key `rest` (after the range's prefix) belongs to, as
 * dl_etcd_scan reads it: NAME/<hex> (the mutex's) or NAME/read/<n>,
 * NAME/write/<n> (the read-write lock's); the name's length, 0 none. */
static size_t lock_of(const char *rest, etcd_key_kind *kind) {
  const char *slash = strrchr(rest, '/');
  if (slash == NULL || slash == rest) return 0;
  const char *t = slash + 1;
  size_t hl = strlen(t);
  if (hl == 0 || hl > 20 || strspn(t, "0123456789abcdef") != hl) return 0;
  size_t n = (size_t)(slash - rest);
  bool digits = strspn(t, "0123456789") == hl;
  if (digits && n > 5 && strncmp(slash - 5, "/read", 5) == 0) {
    *kind = ETCD_KEY_READ;
    return n - 5;
  }
  if (digits && n > 6 && strncmp(slash - 6, "/write", 6) == 0) {
    *kind = ETCD_KEY_WRITE;
    return n - 6;
  }
  *kind = ETCD_KEY_MUTEX;
  return hl <= 16 ? n : 0;
}

/* Adds a range's kvs (every key under base) to w: 0, or -1 out of memory.
 * *from: after the last key, for the next page. */
static int add_page(wkeys *w, json_object *kvs, size_t base_len, char *from,
                    size_t *fl) {
  size_t n = kvs ? json_object_array_length(kvs) : 0;
  for (size_t i = 0; i < n; i++) {
    json_object *kv = json_object_array_get_idx(kvs, i);
    json_object *k = dl_etcd_get(kv, "key"), *v = dl_etcd_get(kv, "value");
    char key[ETCD_KEY_MAX];
    int kl = k ? dl_etcd_unb64(json_object_get_string(k), key, sizeof key) : -1;
    if (kl < 0 || (size_t)kl < base_len) continue;
    memcpy(from, key, (size_t)kl + 1); /* the next page: after this key */
    *fl = (size_t)kl + 1;
    etcd_key_kind kind = ETCD_KEY_NONE;
    size_t ln = lock_of(key + base_len, &kind);
    if (ln == 0 || dl_etcd_i64(kv, "lease") == 0) continue; /* no recipe's */
    if (w->n == w->cap) {
      size_t cap = w->cap ? 2 * w->cap : 64;
      wkey *nv = realloc(w->v, cap * sizeof *nv);
      if (nv == NULL) return -1;
      w->v = nv;
      w->cap = cap;
    }
    char owner[DLOCK_OWNER_MAX], info[DLOCK_INFO_MAX + 1];
    dl_etcd_holder_value(v ? json_object_get_string(v) : "",
                         dl_etcd_i64(kv, "lease"), owner, sizeof owner, info,
                         sizeof info);
    size_t ol = strlen(owner); /* a writer's: the reader's + ":write" */
    if (ol > 6 && strcmp(owner + ol - 6, ":write") == 0) owner[ol - 6] = '\0';
    wkey *x = &w->v[w->n++];
    x->lock = strndup(key + base_len, ln);
    x->owner = dl_strdup(owner);
    x->info = dl_strdup(info);
    x->rev = dl_etcd_i64(kv, "create_revision");
    x->kind = kind;
    if (!x->lock || !x->owner || !x->info) return -1;
  }
  return 0;
}

/* By lock, then oldest first. */
static int by_lock(const void *a, const void *b) {
  const wkey *x = a, *y = b;
  int c = strcmp(x->lock, y->lock);
  return c ? c : (x->rev > y->rev) - (x->rev < y->rev);
}

int dl_etcd_waiters(dl_backend *b, const char *prefix, dlock_waiter_cb cb,
                    void *ud) {
  dl_etcd *e = (dl_etcd *)b;
  /* Every key under the URL's and the client's prefix (the whole keyspace
   * without either: key and range_end "\0"), values included, a page at
   * a time: a page of 500 where a lock's own reads would take a call
   * each. */
  char base[ETCD_KEY_MAX], from[ETCD_KEY_MAX + 1];
  char p64[B64(ETCD_KEY_MAX + 1)], end64[B64(ETCD_KEY_MAX + 1)];
  size_t bl = (size_t)snprintf(base, sizeof base, "%s%s", e->prefix, prefix);
  if (bl >= sizeof base)
    return dl_seterr(e->err, DLOCK_ENAMETOOLONG, "key prefix too long");
  if (bl)
    dl_etcd_prefix_end(base, end64);
  else
    snprintf(end64, sizeof end64, "AA==");
  memcpy(from, base, bl + 1);
  size_t fl = bl;
  wkeys w = {0};
  int rc = 0;
  for (;;) {
    if (fl == 0)
      snprintf(p64, sizeof p64, "AA==");
    else
      dl_etcd_b64(from, fl, p64);
    char body[3 * B64(ETCD_KEY_MAX + 1)];
    snprintf(body, sizeof body,
             "{\"key\":\"%s\",\"range_end\":\"%s\",\"limit\":\"500\"}", p64,
             end64);
    json_object *r;
    if ((rc = dl_etcd_call(e, "/v3/kv/range", body,
                           dl_now_ms() + e->command_timeout_ms, &r, NULL)) != 0)
      break;
    json_object *kvs = dl_etcd_get(r, "kvs"), *more = dl_etcd_get(r, "more");
    bool again = more && json_object_get_boolean(more) && kvs &&
                 json_object_array_length(kvs) > 0;
    if (add_page(&w, kvs, bl, from, &fl) != 0)
      rc = dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
    json_object_put(r);
    if (rc != 0 || !again) break;
  }
  if (rc != 0) {
    wkeys_free(&w);
    return rc;
  }
  if (w.n > 1) qsort(w.v, w.n, sizeof *w.v, by_lock);
  /* Each lock's holders (its oldest key, and with a reader the readers
   * after it up to the first other key, as dl_etcd_holders), then its
   * waiters. */
  int found = 0;
  bool stop = false, reading = false;
  for (size_t i = 0; i < w.n && !stop; i++) {
    wkey *x = &w.v[i];
    bool first = i == 0 || strcmp(x->lock, w.v[i - 1].lock) != 0;
    if (first || (reading && x->kind == ETCD_KEY_READ)) {
      reading = (first || reading) && x->kind == ETCD_KEY_READ;
      continue;
    }
    reading = false;
    dlock_waiter dw = {.owner = x->owner,
                       .name = x->lock,
                       .kind = x->kind == ETCD_KEY_READ    ? "read"
                               : x->kind == ETCD_KEY_WRITE ? "write"
                                                           : "lock",
                       .info = x->info,
                       .deadline_ms = 0};
    found++;
    stop = cb(&dw, ud) != 0;
  }
  wkeys_free(&w);
  return found;
}
