/* pbtxn.h: the hot path's calls as etcd's protobuf messages, for both
 * drivers (dl_etcd_call_pb, dl_etcd_acall_ask): the claim (our key put and
 * the line's owner read, dl_etcd_put_and_read's), the fenced delete
 * (dl_etcd_delete_at's) and a lease's keepalive (a fixed lease's at each
 * acquire, the session's and consumers' renewals). Over gRPC they go without
 * JSON either way; the gateway gets their JSON (grpc.c converts). A message's
 * parts point into its struct and into the strings it was built from: all must
 * live until dl_etcd_call_pb or dl_etcd_acall_ask returns (the blocking call
 * packs it again for a try after a new token). Private to src/etcd. */
#ifndef DLOCK_ETCD_PBTXN_H
#define DLOCK_ETCD_PBTXN_H

#include "etcd_min.pb-c.h"
#include "etcdb.h"

/* The claim: h->key put with value on h->lease unless it is there (create
 * revision 0), then the owner of the line under pfx (the lowest create
 * revision: one key, keys only); if it is there, it and the owner read.
 * A read-write lock's reader (its line: the writers' keys) also reads the
 * oldest key of a mutex's shape at the name (PFX + hex: a mutex's or an
 * election's, which its line does not see). */
typedef struct etcd_claim_txn {
  Etcdserverpb__TxnRequest txn;
  Etcdserverpb__Compare cmp, *cmps[1];
  Etcdserverpb__RequestOp put_op, owner_op, get_op, mutex_op, *succ[3],
      *fail[3];
  Etcdserverpb__PutRequest put;
  Etcdserverpb__RangeRequest owner, get, mutex;
  char end[ETCD_KEY_MAX];                    /* pfx's range end */
  char mlo[ETCD_KEY_MAX], mhi[ETCD_KEY_MAX]; /* a reader's: [PFX0, PFXg) */
} etcd_claim_txn;
/* t for h, value and pfx (which ends with '/'); t->txn.base is the
 * request. */
void dl_etcd_claim_txn(etcd_claim_txn *t, const etcd_hold *h, const char *value,
                       const char *pfx);
/* The claim's answer r (freed here): 0 (h->rev our key's create revision,
 * *owner_rev the owner's, 0 none), 1 the key is there on a lease not ours
 * (h->rev 0: nothing of ours), 2 (fresh) our key was there, at create
 * revision h->rev, for the caller to delete and put again; or a negative
 * code recorded. Without fresh, our key found there is taken as made. The
 * line's oldest key on no lease: DLOCK_EWRONGTYPE (dl_etcd_foreign_in_line),
 * h->rev its key's (the caller's failure path deletes it). A
 * reader's claim with a mutex's key older than its own at the name:
 * DLOCK_EWRONGTYPE recorded, h->rev its key's (the caller's failure path
 * deletes it). */
int dl_etcd_claim_answer(dl_etcd *e, etcd_hold *h, ProtobufCMessage *r,
                         bool fresh, int64_t *owner_rev);

/* A keepalive of lease id (LeaseKeepAlive, one message on its stream) as
 * a call: t's (the caller's, to live as the message must) k, for the
 * blocking call or any of the loop's that take an etcd_ask. */
typedef struct etcd_keepalive {
  Etcdserverpb__LeaseKeepAliveRequest req;
  etcd_ask k;
} etcd_keepalive;
const etcd_ask *dl_etcd_keepalive_ask(etcd_keepalive *t, int64_t id);
/* Its end: rc, the call's, when it failed (negative, *ttl_s 0); else its
 * answer m (freed here): 1 kept alive (*ttl_s its TTL), 0 the lease is
 * gone (a dead lease's answer has no TTL). */
int dl_etcd_keepalive_reply(int rc, ProtobufCMessage *m, int64_t *ttl_s);

/* The fenced delete: key deleted only while its create revision is rev,
 * so that a retried release never deletes a newer hold (etcd issue
 * 22082). */
typedef struct etcd_delete_txn {
  Etcdserverpb__TxnRequest txn;
  Etcdserverpb__Compare cmp, *cmps[1];
  Etcdserverpb__RequestOp op, *succ[1];
  Etcdserverpb__DeleteRangeRequest del;
} etcd_delete_txn;
/* t for key at rev; t->txn.base is the request. */
void dl_etcd_delete_txn(etcd_delete_txn *t, const char *key, int64_t rev);
/* Its answer r (freed here): 1 deleted, 0 not there at rev. */
int dl_etcd_delete_answer(ProtobufCMessage *r);

#endif /* DLOCK_ETCD_PBTXN_H */
