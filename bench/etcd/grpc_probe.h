/* grpc_probe.h: what grpc_probe.c, grpc_check.c and grpc_bench.c share
 * (see grpc_probe.c). */
#ifndef GRPC_PROBE_H
#define GRPC_PROBE_H

#include <string.h>

#include "etcd_min.pb-c.h"
#include "grpc_wire.h"

#define BIN(s) ((ProtobufCBinaryData){strlen(s), (uint8_t *)(s)})

/* A call's one reply message unpacked as etcdserverpb's type, or NULL. */
#define UNPACK(type, c, out)                                                   \
  do {                                                                         \
    size_t n_;                                                                 \
    const uint8_t *p_ = gw_reply(c, &n_);                                      \
    out = p_ ? etcdserverpb__##type##__unpack(NULL, n_, p_) : NULL;            \
  } while (0)

/* msg packed into a new buffer (*n its size); NULL out of memory. */
uint8_t *pack(const ProtobufCMessage *msg, size_t *n);
/* A unary call of method with msg on conn, run to its end (5 s at most):
 * 0 with grpc-status 0, else -1; c (zeroed) has the reply. */
int unary(gw_conn *conn, const char *method, const ProtobufCMessage *msg,
          gw_call *c);
/* A new lease's id, or 0. */
int64_t lease_grant(gw_conn *conn, int64_t ttl);

/* dlock's mutex txns as protobuf messages (pointing into the struct and at
 * the strings given: keep them alive while m is used). */
typedef struct mutex_txn {
  Etcdserverpb__TxnRequest txn;
  Etcdserverpb__Compare cmp, *cmps[1];
  Etcdserverpb__RequestOp put_op, own_op, owner_op, del_op;
  Etcdserverpb__RequestOp *success[2], *failure[2];
  Etcdserverpb__PutRequest put;
  Etcdserverpb__RangeRequest own, owner;
  Etcdserverpb__DeleteRangeRequest del;
} mutex_txn;
/* rev 0: the acquire (if CREATE(key) == 0: put key on lease + the owner's
 * range [pfx, end) sorted by create revision, limit 1; else: key's range +
 * the owner's); rev > 0: the fenced release (if CREATE(key) == rev: delete
 * key). */
void mutex_txn_init(mutex_txn *m, const char *key, const char *pfx,
                    const char *end, int64_t lease, int64_t rev);
/* The owner's create revision in an acquire's reply: 0 none, -1 no range. */
int64_t owner_rev(const Etcdserverpb__TxnResponse *r);
/* One mutex txn run to its end: the reply (free_unpacked) or NULL. */
Etcdserverpb__TxnResponse *mutex_call(gw_conn *conn, const char *key,
                                      const char *pfx, const char *end,
                                      int64_t lease, int64_t rev);

int check(const char *url);
/* mode: "grpc", "grpcdel" (the release Go's plain delete) or "json". */
int bench(const char *mode, const char *url, int t, int n, int pid);

#endif
