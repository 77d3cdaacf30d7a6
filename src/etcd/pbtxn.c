/* pbtxn.c: the claim, the keepalive and the fenced delete as protobuf
 * messages, and their answers (pbtxn.h). */
#include "pbtxn.h"

#include <string.h>

/* The bytes of s, for a message that only reads them. */
static ProtobufCBinaryData bytes(const char *s, size_t n) {
  return (ProtobufCBinaryData){n, (uint8_t *)(uintptr_t)s};
}

/* A compare of key's create revision with rev. */
static void cmp_create(Etcdserverpb__Compare *c, const char *key, int64_t rev) {
  *c = (Etcdserverpb__Compare)ETCDSERVERPB__COMPARE__INIT;
  c->target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__CREATE;
  c->key = bytes(key, strlen(key));
  c->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION;
  c->create_revision = rev;
}

/* op: the range request r. */
static void range_op(Etcdserverpb__RequestOp *op,
                     Etcdserverpb__RangeRequest *r) {
  *op = (Etcdserverpb__RequestOp)ETCDSERVERPB__REQUEST_OP__INIT;
  op->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
  op->request_range = r;
}

/* txn: the one compare c, then the ops succ (n_succ) or fail (n_fail). */
static void txn_init(Etcdserverpb__TxnRequest *txn,
                     Etcdserverpb__Compare **cmps, Etcdserverpb__Compare *c,
                     Etcdserverpb__RequestOp **succ, size_t n_succ,
                     Etcdserverpb__RequestOp **fail, size_t n_fail) {
  cmps[0] = c;
  *txn = (Etcdserverpb__TxnRequest)ETCDSERVERPB__TXN_REQUEST__INIT;
  txn->n_compare = 1;
  txn->compare = cmps;
  txn->n_success = n_succ;
  txn->success = succ;
  txn->n_failure = n_fail;
  txn->failure = fail;
}

void dl_etcd_claim_txn(etcd_claim_txn *t, const etcd_hold *h, const char *value,
                       const char *pfx) {
  size_t n = dl_etcd_range_end(pfx, t->end);
  cmp_create(&t->cmp, h->key, 0);
  t->put = (Etcdserverpb__PutRequest)ETCDSERVERPB__PUT_REQUEST__INIT;
  t->put.key = bytes(h->key, strlen(h->key));
  t->put.value = bytes(value, strlen(value));
  t->put.lease = h->lease;
  t->put_op = (Etcdserverpb__RequestOp)ETCDSERVERPB__REQUEST_OP__INIT;
  t->put_op.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
  t->put_op.request_put = &t->put;
  t->owner = (Etcdserverpb__RangeRequest)ETCDSERVERPB__RANGE_REQUEST__INIT;
  t->owner.key = bytes(pfx, n);
  t->owner.range_end = bytes(t->end, n);
  t->owner.limit = 1;
  t->owner.sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__ASCEND;
  t->owner.sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__CREATE;
  t->owner.keys_only = 1;
  range_op(&t->owner_op, &t->owner);
  t->get = (Etcdserverpb__RangeRequest)ETCDSERVERPB__RANGE_REQUEST__INIT;
  t->get.key = t->put.key;
  range_op(&t->get_op, &t->get);
  t->succ[0] = &t->put_op;
  t->succ[1] = &t->owner_op;
  t->fail[0] = &t->get_op;
  t->fail[1] = &t->owner_op;
  size_t ops = 2;
  /* A reader: its line is PFX + "write/", its key PFX + "read/<n>". */
  size_t key_n = strlen(h->key), base = n >= 6 ? n - 6 : 0;
  if (base > 0 && strncmp(pfx + base, "write/", 6) == 0 && key_n > base + 5 &&
      strncmp(h->key, pfx, base) == 0 &&
      strncmp(h->key + base, "read/", 5) == 0) {
    /* The keys of a mutex's shape, PFX + hex, all sort in [PFX0, PFXg). */
    memcpy(t->mlo, pfx, base);
    memcpy(t->mhi, pfx, base);
    t->mlo[base] = '0';
    t->mhi[base] = 'g';
    t->mutex = (Etcdserverpb__RangeRequest)ETCDSERVERPB__RANGE_REQUEST__INIT;
    t->mutex.key = bytes(t->mlo, base + 1);
    t->mutex.range_end = bytes(t->mhi, base + 1);
    t->mutex.limit = 1;
    t->mutex.sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__ASCEND;
    t->mutex.sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__CREATE;
    t->mutex.keys_only = 1;
    range_op(&t->mutex_op, &t->mutex);
    t->succ[2] = t->fail[2] = &t->mutex_op;
    ops = 3;
  }
  txn_init(&t->txn, t->cmps, &t->cmp, t->succ, ops, t->fail, ops);
}

/* The first key of the txn answer's i-th response when it is a range's,
 * or NULL. */
static const Etcdserverpb__KeyValue *kv0(const Etcdserverpb__TxnResponse *r,
                                         size_t i) {
  if (i >= r->n_responses ||
      r->responses[i]->response_case !=
          ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE)
    return NULL;
  const Etcdserverpb__RangeResponse *rr = r->responses[i]->response_range;
  return rr && rr->n_kvs > 0 ? rr->kvs[0] : NULL;
}

int dl_etcd_claim_answer(dl_etcd *e, etcd_hold *h, ProtobufCMessage *m,
                         bool fresh, int64_t *owner_rev) {
  const Etcdserverpb__TxnResponse *r = (const Etcdserverpb__TxnResponse *)m;
  int rc = 0;
  if (r->succeeded) {
    h->rev = r->header ? r->header->revision : 0;
  } else {
    /* Our key was there already (a release of ours that did not get
     * through): unless it is on another lease (nothing of ours: not
     * touched), it is ours; as Go's Mutex takes it, or (fresh) to be
     * deleted at its revision and made anew. */
    const Etcdserverpb__KeyValue *mine = kv0(r, 0);
    h->rev = mine ? mine->create_revision : 0;
    if (mine && mine->lease != h->lease) {
      h->rev = 0;
      rc = 1;
    } else if (fresh && h->rev > 0) {
      rc = 2;
    }
  }
  const Etcdserverpb__KeyValue *owner = kv0(r, 1);
  *owner_rev = owner ? owner->create_revision : 0;
  /* Every key of a line is on its holder's or waiter's lease. */
  bool foreign = rc != 1 && owner && owner->lease == 0;
  /* A reader's: a mutex's key before ours (on a lease: an application's
   * key on none is no holder). */
  const Etcdserverpb__KeyValue *mx = kv0(r, 2);
  bool mutex = rc != 1 && mx && mx->lease != 0 && h->rev > 0 &&
               mx->create_revision < h->rev;
  protobuf_c_message_free_unpacked(m, NULL);
  if (rc == 0 && h->rev <= 0)
    return dl_seterr(e->err, DLOCK_EPROTO,
                     "etcd txn on %s: no create revision in the answer",
                     h->key);
  if (foreign) return dl_etcd_foreign_in_line(e, h->key);
  if (mutex)
    return dl_seterr(e->err, DLOCK_EWRONGTYPE,
                     "%s: a mutex's or an election's key is at the name: not "
                     "a read-write lock (nothing left)",
                     h->key);
  return rc;
}

const etcd_ask *dl_etcd_keepalive_ask(etcd_keepalive *t, int64_t id) {
  t->req = (Etcdserverpb__LeaseKeepAliveRequest)
      ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
  t->req.id = id;
  t->k = (etcd_ask){"/v3/lease/keepalive", NULL, &t->req.base};
  return &t->k;
}

int dl_etcd_keepalive_reply(int rc, ProtobufCMessage *m, int64_t *ttl_s) {
  *ttl_s = 0;
  if (rc != 0) return rc;
  *ttl_s = ((const Etcdserverpb__LeaseKeepAliveResponse *)m)->ttl;
  protobuf_c_message_free_unpacked(m, NULL);
  return *ttl_s > 0;
}

void dl_etcd_delete_txn(etcd_delete_txn *t, const char *key, int64_t rev) {
  cmp_create(&t->cmp, key, rev);
  t->del = (Etcdserverpb__DeleteRangeRequest)
      ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
  t->del.key = t->cmp.key;
  t->op = (Etcdserverpb__RequestOp)ETCDSERVERPB__REQUEST_OP__INIT;
  t->op.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE;
  t->op.request_delete_range = &t->del;
  t->succ[0] = &t->op;
  txn_init(&t->txn, t->cmps, &t->cmp, t->succ, 1, NULL, 0);
}

int dl_etcd_delete_answer(ProtobufCMessage *m) {
  int rc = ((const Etcdserverpb__TxnResponse *)m)->succeeded ? 1 : 0;
  protobuf_c_message_free_unpacked(m, NULL);
  return rc;
}
