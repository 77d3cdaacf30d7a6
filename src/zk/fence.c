/* fence.c: fenced resources on ZooKeeper (the seam's fence): a persistent
 * znode at the resource's path whose data is "dlock-fence <token>\n" and
 * then the value's bytes (docs/WIRE.md). A write reads the node (its
 * version), decides, and writes with a multi: a setData at that version (or
 * a create where there was none), behind a check that the hold's lock node
 * still exists for the held form; a node changed in between fails the
 * multi, and the write is decided again on a fresh read. The data's form
 * is core's (fenced.c), shared with etcd. */
#include "zkb.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tries of a write whose node keeps changing under it. */
#define TRIES 64

/* What is at a path: none, a fenced resource, or something else. */
typedef struct fence_node {
  bool there;
  uint64_t fence;
  int version;
  char *data; /* its data (malloc'ed), len bytes and a NUL */
  int len;
  long off; /* where the value begins in data */
} fence_node;

/* Reads path into *n: 0, DLOCK_EWRONGTYPE (recorded) when it is not a
 * fenced resource, or a negative code. */
static int read_node(dl_zk *z, const char *path, fence_node *n) {
  memset(n, 0, sizeof *n);
  for (int i = 0; i < TRIES; i++) {
    struct Stat st;
    atomic_fetch_add(&z->round_trips, 1);
    int zrc = zoo_exists(z->zh, path, 0, &st);
    if (zrc == ZNONODE) return 0;
    if (zrc != ZOK) return dl_zk_err(z, zrc, "read", path);
    int cap = st.dataLength + 1, len = st.dataLength;
    char *buf = malloc(cap);
    if (buf == NULL)
      return dl_seterr(z->env->err_owner, DLOCK_ENOMEM, "out of memory");
    atomic_fetch_add(&z->round_trips, 1);
    zrc = zoo_get(z->zh, path, 0, buf, &len, &st);
    if (zrc == ZNONODE || (zrc == ZOK && st.dataLength > cap - 1)) {
      free(buf); /* gone, or grew: again */
      continue;
    }
    if (zrc != ZOK) {
      free(buf);
      return dl_zk_err(z, zrc, "read", path);
    }
    if (len < 0) len = 0;
    buf[len] = '\0';
    uint64_t v = 0;
    long off = dl_fenced_unpack(buf, (size_t)len, &v);
    if (st.numChildren > 0 || off < 0) {
      free(buf);
      zk_place p = st.numChildren > 0 ? ZK_CHILDREN
                   : len > 0          ? ZK_DATA
                                      : ZK_EMPTY;
      return dl_zk_wrong_place(z, p, path, "fenced resource");
    }
    *n = (fence_node){true, v, st.version, buf, len, off};
    return 0;
  }
  return dl_seterr(z->env->err_owner, DLOCK_EBUSY, "%s kept changing", path);
}

/* A set: 1 written, 0 refused (f->fence the higher fence), DLOCK_ELOST,
 * or a negative code. */
static int fence_set(dl_zk *z, dl_fence_req *f) {
  char hold[NODE_MAX];
  if (f->hold &&
      !dl_zk_hold_node(z, f->hold->key, f->hold->owner, hold, sizeof hold))
    return dl_seterr(z->env->err_owner, DLOCK_ELOST,
                     "'%s' is not held by %s in this session: '%s' not "
                     "written",
                     f->hold->name, f->hold->owner, f->name);
  size_t size = 0;
  char *data = dl_fenced_pack(f->token, f->value, f->len, &size);
  if (data == NULL || size > INT32_MAX) {
    free(data);
    return dl_seterr(z->env->err_owner, data ? DLOCK_EINVAL : DLOCK_ENOMEM,
                     data ? "the value is too long" : "out of memory");
  }
  int dlen = (int)size, rc = 0;
  for (int i = 0; i < TRIES && rc == 0; i++) {
    fence_node n;
    if ((rc = read_node(z, f->key, &n)) != 0) break;
    free(n.data);
    if (n.there && f->token < n.fence) {
      f->fence = n.fence;
      break; /* rc 0: refused */
    }
    zoo_op_t ops[2];
    zoo_op_result_t res[2];
    int k = 0;
    struct Stat st;
    char made[NODE_MAX];
    if (f->hold) zoo_check_op_init(&ops[k++], hold, -1);
    if (n.there)
      zoo_set_op_init(&ops[k++], f->key, data, dlen, n.version, &st);
    else
      zoo_create_op_init(&ops[k++], f->key, data, dlen, z->acl, ZOO_PERSISTENT,
                         made, sizeof made);
    atomic_fetch_add(&z->round_trips, 1);
    int zrc = zoo_multi(z->zh, k, ops, res);
    int write = res[k - 1].err;
    if (zrc == ZOK) {
      f->fence = f->token;
      rc = 1;
    } else if (f->hold && res[0].err == ZNONODE) {
      rc = dl_seterr(z->env->err_owner, DLOCK_ELOST,
                     "'%s' is not held by %s any more (its node is gone): "
                     "'%s' not written",
                     f->hold->name, f->hold->owner, f->name);
    } else if (!n.there && write == ZNONODE) { /* its parents first */
      char parent[NODE_MAX];
      snprintf(parent, sizeof parent, "%s", f->key);
      char *slash = strrchr(parent, '/');
      if (slash && slash != parent) {
        *slash = '\0';
        rc = dl_zk_make_parents(z, parent);
      }
    } else if (write != ZNODEEXISTS && write != ZBADVERSION &&
               write != ZNONODE) {
      rc = dl_zk_err(z, zrc, "write", f->key);
    } /* else changed in between: decide again */
  }
  free(data);
  if (rc == 0 && f->fence == 0)
    rc = dl_seterr(z->env->err_owner, DLOCK_EBUSY, "%s kept changing", f->key);
  return rc;
}

int dl_zk_fence(dl_backend *b, dl_fence_req *f) {
  dl_zk *z = (dl_zk *)b;
  if (f->op == DL_FENCE_SET) return fence_set(z, f);
  for (int i = 0; i < TRIES; i++) {
    fence_node n;
    int rc = read_node(z, f->key, &n);
    if (rc != 0 || !n.there) return rc;
    if (f->op == DL_FENCE_GET) {
      f->got_len = (size_t)(n.len - n.off);
      memmove(n.data, n.data + n.off, f->got_len + 1); /* its NUL too */
      f->got = n.data;
      f->fence = n.fence;
      return 1;
    }
    free(n.data);
    atomic_fetch_add(&z->round_trips, 1);
    int zrc = zoo_delete(z->zh, f->key, n.version);
    if (zrc == ZOK) return 1;
    if (zrc != ZBADVERSION && zrc != ZNONODE && zrc != ZNOTEMPTY)
      return dl_zk_err(z, zrc, "delete", f->key);
  }
  return dl_seterr(z->env->err_owner, DLOCK_EBUSY, "%s kept changing", f->key);
}
