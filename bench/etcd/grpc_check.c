/* grpc_check.c: grpc_probe check (see grpc_probe.c): unary calls and the
 * two bidi streams, every reply checked, all on one HTTP/2 connection. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "grpc_probe.h"

static int failures;

static void check1(bool ok, const char *what) {
  printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) failures++;
}

static long connects(gw_call *c) {
  long n = 0;
  curl_easy_getinfo(c->h, CURLINFO_NUM_CONNECTS, &n);
  return n;
}

static long new_connections;

static int put(gw_conn *conn, const char *key, const char *value) {
  Etcdserverpb__PutRequest rq = ETCDSERVERPB__PUT_REQUEST__INIT;
  rq.key = BIN(key);
  rq.value = BIN(value);
  gw_call c = {0};
  int rc = unary(conn, "/etcdserverpb.KV/Put", &rq.base, &c);
  new_connections += connects(&c);
  gw_call_free(&c);
  return rc;
}

static int del(gw_conn *conn, const char *key) {
  Etcdserverpb__DeleteRangeRequest rq =
      ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
  rq.key = BIN(key);
  gw_call c = {0};
  int rc = unary(conn, "/etcdserverpb.KV/DeleteRange", &rq.base, &c);
  new_connections += connects(&c);
  gw_call_free(&c);
  return rc;
}

static void unaries(gw_conn *conn) {
  check1(put(conn, "probe/a", "v1") == 0, "Put probe/a = v1");
  Etcdserverpb__RangeRequest rq = ETCDSERVERPB__RANGE_REQUEST__INIT;
  rq.key = BIN("probe/a");
  gw_call c = {0};
  int rc = unary(conn, "/etcdserverpb.KV/Range", &rq.base, &c);
  new_connections += connects(&c);
  Etcdserverpb__RangeResponse *r = NULL;
  if (rc == 0) UNPACK(range_response, &c, r);
  check1(r && r->n_kvs == 1 && r->kvs[0]->value.len == 2 &&
             memcmp(r->kvs[0]->value.data, "v1", 2) == 0 &&
             r->header->revision >= r->kvs[0]->mod_revision,
         "Range probe/a: one kv, value v1");
  etcdserverpb__range_response__free_unpacked(r, NULL);
  /* An error: a future revision, its status in the trailers. */
  rq.revision = INT64_C(1) << 40;
  rc = unary(conn, "/etcdserverpb.KV/Range", &rq.base, &c);
  printf("     (grpc-status %d, grpc-message \"%s\")\n", c.grpc_status,
         c.grpc_message);
  check1(rc != 0 && c.grpc_status == 11 && c.http == 200,
         "Range at a future revision: grpc-status 11 (OutOfRange)");
  gw_call_free(&c);

  int64_t l1 = lease_grant(conn, 30), l2 = lease_grant(conn, 30);
  check1(l1 > 0 && l2 > 0 && l1 != l2, "LeaseGrant twice: two leases");
  char k1[64], k2[64];
  snprintf(k1, sizeof k1, "probe/m/%" PRIx64, l1);
  snprintf(k2, sizeof k2, "probe/m/%" PRIx64, l2);
  Etcdserverpb__TxnResponse *a =
      mutex_call(conn, k1, "probe/m/", "probe/m0", l1, 0);
  int64_t rev1 = a ? a->header->revision : 0;
  check1(a && a->succeeded && owner_rev(a) == rev1,
         "mutex txn 1: key created, it is the owner");
  Etcdserverpb__TxnResponse *b =
      mutex_call(conn, k2, "probe/m/", "probe/m0", l2, 0);
  check1(b && b->succeeded && owner_rev(b) == rev1 &&
             b->header->revision > rev1,
         "mutex txn 2 (another lease): key created, owner is txn 1's key");
  Etcdserverpb__TxnResponse *a2 =
      mutex_call(conn, k1, "probe/m/", "probe/m0", l1, 0);
  check1(a2 && !a2->succeeded && a2->n_responses == 2 &&
             a2->responses[0]->response_range->n_kvs == 1 &&
             a2->responses[0]->response_range->kvs[0]->create_revision ==
                 rev1 &&
             a2->responses[0]->response_range->kvs[0]->lease == l1,
         "mutex txn 1 again: not created, the failure branch reads it");
  Etcdserverpb__TxnResponse *x = mutex_call(conn, k1, "", "", 0, rev1 + 100);
  check1(x && !x->succeeded, "fenced release at a wrong revision: no");
  Etcdserverpb__TxnResponse *y = mutex_call(conn, k1, "", "", 0, rev1);
  check1(y && y->succeeded &&
             y->responses[0]->response_delete_range->deleted == 1,
         "fenced release at its revision: deleted");
  etcdserverpb__txn_response__free_unpacked(a, NULL);
  etcdserverpb__txn_response__free_unpacked(b, NULL);
  etcdserverpb__txn_response__free_unpacked(a2, NULL);
  etcdserverpb__txn_response__free_unpacked(x, NULL);
  etcdserverpb__txn_response__free_unpacked(y, NULL);
  del(conn, k2);
}

/* ---- Watch: bidi ---- */
typedef struct watch_state {
  int created;
  int64_t ids[2];
  int events[2], deletes[2];
  bool canceled;
  bool got; /* any message since cleared */
} watch_state;

static void on_watch(gw_call *c, const uint8_t *msg, size_t n) {
  watch_state *w = c->ud;
  Etcdserverpb__WatchResponse *r =
      etcdserverpb__watch_response__unpack(NULL, n, msg);
  if (r == NULL) return;
  if (r->created && w->created < 2) w->ids[w->created++] = r->watch_id;
  if (r->canceled) w->canceled = true;
  for (int i = 0; i < w->created; i++) {
    if (w->ids[i] != r->watch_id) continue;
    for (size_t e = 0; e < r->n_events; e++) {
      w->events[i]++;
      if (r->events[e]->type == ETCDSERVERPB__EVENT__EVENT_TYPE__DELETE)
        w->deletes[i]++;
    }
  }
  w->got = true;
  etcdserverpb__watch_response__free_unpacked(r, NULL);
}

static int watch_create(gw_call *c, const char *key) {
  Etcdserverpb__WatchCreateRequest cr =
      ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
  cr.key = BIN(key);
  Etcdserverpb__WatchRequest rq = ETCDSERVERPB__WATCH_REQUEST__INIT;
  rq.request_union_case =
      ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
  rq.create_request = &cr;
  size_t n;
  uint8_t *b = pack(&rq.base, &n);
  int rc = gw_stream_send(c, b, n);
  free(b);
  return rc;
}

static bool wait_for(gw_conn *conn, watch_state *w, bool (*ok)(watch_state *)) {
  for (int i = 0; i < 250 && !ok(w); i++) {
    bool f = false;
    gw_wait(conn, &f, 20);
  }
  return ok(w);
}
static bool one_created(watch_state *w) {
  return w->created >= 1;
}
static bool two_created(watch_state *w) {
  return w->created >= 2;
}
static bool ev_a(watch_state *w) {
  return w->events[0] >= 1;
}
static bool ev_b(watch_state *w) {
  return w->events[1] >= 1;
}
static bool del_a(watch_state *w) {
  return w->deletes[0] >= 1;
}
static bool canceled(watch_state *w) {
  return w->canceled;
}

static void watch(gw_conn *conn) {
  watch_state w = {0};
  gw_call c = {0};
  c.on_msg = on_watch;
  c.ud = &w;
  check1(gw_stream_start(&c, conn, "/etcdserverpb.Watch/Watch") == 0,
         "Watch stream started (request body from a read callback)");
  watch_create(&c, "probe/w/a");
  check1(wait_for(conn, &w, one_created), "Watch: created reply for key a");
  put(conn, "probe/w/a", "1");
  check1(wait_for(conn, &w, ev_a), "Watch: PUT event on a (Put multiplexed)");
  watch_create(&c, "probe/w/b");
  check1(wait_for(conn, &w, two_created) && w.ids[0] != w.ids[1],
         "Watch: second create on the same stream, its own watch id");
  put(conn, "probe/w/b", "1");
  check1(wait_for(conn, &w, ev_b), "Watch: PUT event on b's watch id");
  del(conn, "probe/w/a");
  check1(wait_for(conn, &w, del_a), "Watch: DELETE event on a");
  Etcdserverpb__WatchCancelRequest cr =
      ETCDSERVERPB__WATCH_CANCEL_REQUEST__INIT;
  cr.watch_id = w.ids[0];
  Etcdserverpb__WatchRequest rq = ETCDSERVERPB__WATCH_REQUEST__INIT;
  rq.request_union_case =
      ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CANCEL_REQUEST;
  rq.cancel_request = &cr;
  size_t n;
  uint8_t *b = pack(&rq.base, &n);
  gw_stream_send(&c, b, n);
  free(b);
  check1(wait_for(conn, &w, canceled), "Watch: cancel a, canceled reply");
  check1(c.running, "Watch: stream still open");
  new_connections += connects(&c);
  gw_call_free(&c);
  del(conn, "probe/w/b");
}

/* ---- LeaseKeepAlive: bidi ---- */
typedef struct ka_state {
  int replies;
  int64_t ttl;
} ka_state;

static void on_ka(gw_call *c, const uint8_t *msg, size_t n) {
  ka_state *k = c->ud;
  Etcdserverpb__LeaseKeepAliveResponse *r =
      etcdserverpb__lease_keep_alive_response__unpack(NULL, n, msg);
  if (r == NULL) return;
  k->replies++;
  k->ttl = r->ttl;
  etcdserverpb__lease_keep_alive_response__free_unpacked(r, NULL);
}

static bool ka_wait(gw_conn *conn, ka_state *k, int replies) {
  for (int i = 0; i < 250 && k->replies < replies; i++) {
    bool f = false;
    gw_wait(conn, &f, 20);
  }
  return k->replies >= replies;
}

static void keepalive(gw_conn *conn) {
  int64_t id = lease_grant(conn, 30);
  ka_state k = {0};
  gw_call c = {0};
  c.on_msg = on_ka;
  c.ud = &k;
  gw_stream_start(&c, conn, "/etcdserverpb.Lease/LeaseKeepAlive");
  Etcdserverpb__LeaseKeepAliveRequest rq =
      ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
  rq.id = id;
  size_t n;
  uint8_t *b = pack(&rq.base, &n);
  gw_stream_send(&c, b, n);
  check1(ka_wait(conn, &k, 1) && k.ttl == 30, "LeaseKeepAlive: TTL 30");
  gw_stream_send(&c, b, n);
  check1(ka_wait(conn, &k, 2) && k.ttl == 30,
         "LeaseKeepAlive: a second renewal on the same stream");
  Etcdserverpb__LeaseRevokeRequest rv =
      ETCDSERVERPB__LEASE_REVOKE_REQUEST__INIT;
  rv.id = id;
  gw_call r = {0};
  check1(unary(conn, "/etcdserverpb.Lease/LeaseRevoke", &rv.base, &r) == 0,
         "LeaseRevoke");
  new_connections += connects(&r);
  gw_call_free(&r);
  gw_stream_send(&c, b, n);
  check1(ka_wait(conn, &k, 3) && k.ttl == 0,
         "LeaseKeepAlive after the revoke: TTL 0 (lease gone)");
  free(b);
  new_connections += connects(&c);
  gw_call_free(&c);
}

int check(const char *url) {
  gw_conn conn;
  if (gw_conn_init(&conn, url, true) != 0) return 1;
  unaries(&conn);
  watch(&conn);
  keepalive(&conn);
  printf("%s connections opened for all the calls and streams: %ld\n",
         new_connections == 1 ? "ok  " : "FAIL", new_connections);
  if (new_connections != 1) failures++;
  gw_conn_free(&conn);
  printf("%d failed\n", failures);
  return failures ? 1 : 0;
}
