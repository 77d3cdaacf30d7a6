/* waits.c: the etcd mutex's waiters (the seam's waiters entry, for dlock
 * deadlocks and detect_deadlocks): no records of their own, the layout
 * tells them. A waiter is a key under the lock's prefix, on its owner's
 * lease, younger (a later create revision) than the holders; its value
 * names its owner and the holder's description (mutex.c). */
#include "etcdb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct waits {
  dl_etcd *e;
  const char *prefix; /* the client's key prefix */
  dlock_waiter_cb cb;
  void *ud;
  int found;
} waits;

/* Tells cb of the keys in line behind the holders of the lock `name`. */
static int waiters_of(const char *name, void *ud) {
  waits *x = ud;
  char pfx[ETCD_KEY_MAX], bad[ETCD_KEY_MAX];
  snprintf(pfx, sizeof pfx, "%s%s%s/", x->e->prefix, x->prefix, name);
  json_object *r;
  if (dl_etcd_range_under(x->e, pfx, 0, &r) != 0) return 0; /* gone */
  json_object *kvs = dl_etcd_get(r, "kvs");
  int holders = dl_etcd_holders(kvs, pfx, bad, sizeof bad);
  int n = kvs ? (int)json_object_array_length(kvs) : 0, stop = 0;
  for (int i = holders < 0 ? n : holders; i < n && !stop; i++) {
    json_object *kv = json_object_array_get_idx(kvs, (size_t)i);
    char key[ETCD_KEY_MAX], owner[DLOCK_OWNER_MAX], info[DLOCK_INFO_MAX + 1];
    json_object *k = dl_etcd_get(kv, "key"), *v = dl_etcd_get(kv, "value");
    if (k == NULL ||
        dl_etcd_unb64(json_object_get_string(k), key, sizeof key) < 0)
      continue;
    etcd_key_kind kk = dl_etcd_key_kind(key, pfx);
    dl_etcd_holder_value(v ? json_object_get_string(v) : "",
                         dl_etcd_i64(kv, "lease"), owner, sizeof owner, info,
                         sizeof info);
    size_t ol = strlen(owner); /* a writer's: the reader's + ":write" */
    if (ol > 6 && strcmp(owner + ol - 6, ":write") == 0) owner[ol - 6] = '\0';
    dlock_waiter w = {.owner = owner,
                      .name = name,
                      .kind = kk == ETCD_KEY_READ    ? "read"
                              : kk == ETCD_KEY_WRITE ? "write"
                                                     : "lock",
                      .info = info,
                      .deadline_ms = 0};
    x->found++;
    stop = x->cb(&w, x->ud);
  }
  json_object_put(r);
  return stop;
}

int dl_etcd_waiters(dl_backend *b, const char *prefix, dlock_waiter_cb cb,
                    void *ud) {
  dl_etcd *e = (dl_etcd *)b;
  /* The prefix as a glob: its own '*', '?', '[' and '\' escaped. */
  size_t pl = strlen(prefix), at = 0;
  char *match = malloc(2 * pl + 2);
  if (match == NULL) return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  for (size_t i = 0; i < pl; i++) {
    if (strchr("*?[\\", prefix[i])) match[at++] = '\\';
    match[at++] = prefix[i];
  }
  memcpy(match + at, "*", 2);
  waits x = {e, prefix, cb, ud, 0};
  int rc = dl_etcd_scan(b, match, pl, waiters_of, &x);
  free(match);
  return rc < 0 ? rc : x.found;
}
