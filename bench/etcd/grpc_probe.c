/* grpc_probe: a spike, not part of libdlock: etcd's gRPC API over libcurl
 * (HTTP/2 cleartext with prior knowledge, every call multiplexed on one
 * connection) with messages encoded by protobuf-c from
 * src/etcd/etcd_min.proto (the library's), beside the JSON gateway over
 * HTTP/1.1 as src/etcd uses it with the URL's transport=json.
 *
 *   grpc_probe check URL
 *     Range, Put, the dlock mutex's txn (create-if-absent + read the owner)
 *     and its fenced release, a gRPC error from the trailers, a bidi Watch
 *     stream (two creates on one stream, events, a cancel) and a bidi
 *     LeaseKeepAlive stream (two renewals, then a revoked lease's TTL 0),
 *     all on one connection; every reply checked. Exit 0 when all pass.
 *   grpc_probe bench grpc|grpcdel|json URL T N [ETCD_PID]
 *     T lock cycles in flight (each its own key on its own lease), N
 *     cycles each; a cycle is dlock's two txns (acquire, fenced release).
 *     grpc: all T on one HTTP/2 connection; json: T HTTP/1.1 connections,
 *     the bodies dlock sends, the replies parsed with json-c. Prints the
 *     txns per second, the client's CPU per txn and, given the etcd
 *     server's pid, the server's CPU per txn (/proc/PID/stat). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc_probe.h"

/* msg packed into a new buffer (*n its size). */
uint8_t *pack(const ProtobufCMessage *msg, size_t *n) {
  *n = protobuf_c_message_get_packed_size(msg);
  uint8_t *b = malloc(*n ? *n : 1);
  if (b) protobuf_c_message_pack(msg, b);
  return b;
}

int unary(gw_conn *conn, const char *method, const ProtobufCMessage *msg,
          gw_call *c) {
  size_t n;
  uint8_t *b = pack(msg, &n);
  int rc = gw_unary(conn, c, method, b, n, 5000);
  free(b);
  return rc;
}

int64_t lease_grant(gw_conn *conn, int64_t ttl) {
  Etcdserverpb__LeaseGrantRequest rq = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
  rq.ttl = ttl;
  gw_call c = {0};
  int64_t id = 0;
  if (unary(conn, "/etcdserverpb.Lease/LeaseGrant", &rq.base, &c) == 0) {
    Etcdserverpb__LeaseGrantResponse *r;
    UNPACK(lease_grant_response, &c, r);
    if (r) id = r->id;
    etcdserverpb__lease_grant_response__free_unpacked(r, NULL);
  }
  gw_call_free(&c);
  return id;
}

/* ---- the mutex's two txns, as protobuf ---- */

/* Acquire: if CREATE(key) == 0 put key (on lease) and read the owner (the
 * lowest create revision in [pfx, end)); else read key and the owner.
 * Release (rev > 0): if CREATE(key) == rev delete key. */
void mutex_txn_init(mutex_txn *m, const char *key, const char *pfx,
                    const char *end, int64_t lease, int64_t rev) {
  memset(m, 0, sizeof *m);
  m->txn = (Etcdserverpb__TxnRequest)ETCDSERVERPB__TXN_REQUEST__INIT;
  m->cmp = (Etcdserverpb__Compare)ETCDSERVERPB__COMPARE__INIT;
  m->cmp.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__CREATE;
  m->cmp.key = BIN(key);
  m->cmp.target_union_case =
      ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION;
  m->cmp.create_revision = rev;
  m->cmps[0] = &m->cmp;
  m->txn.n_compare = 1;
  m->txn.compare = m->cmps;
  Etcdserverpb__RequestOp op0 = ETCDSERVERPB__REQUEST_OP__INIT;
  m->put_op = m->own_op = m->owner_op = m->del_op = op0;
  if (rev > 0) {
    m->del = (Etcdserverpb__DeleteRangeRequest)
        ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    m->del.key = BIN(key);
    m->del_op.request_case =
        ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE;
    m->del_op.request_delete_range = &m->del;
    m->success[0] = &m->del_op;
    m->txn.n_success = 1;
    m->txn.success = m->success;
    return;
  }
  m->put = (Etcdserverpb__PutRequest)ETCDSERVERPB__PUT_REQUEST__INIT;
  m->put.key = BIN(key);
  m->put.lease = lease;
  m->own = (Etcdserverpb__RangeRequest)ETCDSERVERPB__RANGE_REQUEST__INIT;
  m->own.key = BIN(key);
  m->owner = m->own;
  m->owner.key = BIN(pfx);
  m->owner.range_end = BIN(end);
  m->owner.limit = 1;
  m->owner.sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__ASCEND;
  m->owner.sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__CREATE;
  m->owner.keys_only = 1;
  m->put_op.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
  m->put_op.request_put = &m->put;
  m->own_op.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
  m->own_op.request_range = &m->own;
  m->owner_op.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
  m->owner_op.request_range = &m->owner;
  m->success[0] = &m->put_op;
  m->success[1] = &m->owner_op;
  m->failure[0] = &m->own_op;
  m->failure[1] = &m->owner_op;
  m->txn.n_success = m->txn.n_failure = 2;
  m->txn.success = m->success;
  m->txn.failure = m->failure;
}

/* The owner's create revision in an acquire's reply (0: none). */
int64_t owner_rev(const Etcdserverpb__TxnResponse *r) {
  if (r->n_responses < 2 ||
      r->responses[1]->response_case !=
          ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE)
    return -1;
  const Etcdserverpb__RangeResponse *rr = r->responses[1]->response_range;
  return rr->n_kvs ? rr->kvs[0]->create_revision : 0;
}

Etcdserverpb__TxnResponse *mutex_call(gw_conn *conn, const char *key,
                                      const char *pfx, const char *end,
                                      int64_t lease, int64_t rev) {
  mutex_txn m;
  mutex_txn_init(&m, key, pfx, end, lease, rev);
  gw_call c = {0};
  Etcdserverpb__TxnResponse *r = NULL;
  if (unary(conn, "/etcdserverpb.KV/Txn", &m.txn.base, &c) == 0)
    UNPACK(txn_response, &c, r);
  gw_call_free(&c);
  return r;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: grpc_probe check URL | "
                    "grpc_probe bench grpc|grpcdel|json URL T N [ETCD_PID]\n");
    return 2;
  }
  curl_global_init(CURL_GLOBAL_DEFAULT);
  int rc;
  if (strcmp(argv[1], "check") == 0) {
    rc = check(argv[2]);
  } else if (strcmp(argv[1], "bench") == 0 && argc >= 6) {
    rc = bench(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]),
               argc > 6 ? atoi(argv[6]) : 0);
  } else {
    fprintf(stderr, "grpc_probe: bad arguments\n");
    rc = 2;
  }
  curl_global_cleanup();
  return rc;
}
