/* reliable.c: the etcd queue's reliable take and its ack (Redisson has no
 * such thing; dlock's Redis layout is queue_reliable.lua's), on dlock's
 * keys beside the queue Q (docs/WIRE.md):
 * - each consumer's lease is an etcd lease of its own (the consumer's
 *   lease_ms in whole seconds), holding the key CONS + <consumer id>
 *   (CONS = P + "__dlock_consumers/" + NAME escaped + "/"); the watchdog
 *   keeps it alive as it renews a permit (dl_etcd_consumer_renew), so it
 *   ends when the process dies or the handle goes;
 * - a reliable take is the queue's take whose txn also puts the value at
 *   PROC + <consumer id> + "/" + <UnixNano> (PROC = P +
 *   "__dlock_processing/" + NAME escaped + "/"), on no lease;
 * - first, the values of every consumer without a CONS key (its lease
 *   ended) go back to the head of Q (Q/0<UnixNano>, the oldest taken at
 *   the head), each in a txn compared on its mod revision;
 * - the ack deletes one of the consumer's PROC keys holding the value, at
 *   its mod revision. */
#include "queue.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ID_LEN 32
/* A range's fields: the 1000 newest (the taken values looked at, at most,
 * per call). */
#define NEWEST_FIRST                                                           \
  ",\"limit\":\"1000\",\"sort_target\":\"CREATE\",\"sort_order\":\"DESCEND\""

/* A consumer's lease, kept while the client lives. */
typedef struct etcd_consumer {
  struct etcd_consumer *next;
  char *queue; /* the queue's key (the client's prefix + NAME) */
  char id[ID_LEN + 1];
  int64_t lease;
  int64_t until; /* surely valid until then (0: gone) */
} etcd_consumer;

static etcd_consumer *find(dl_etcd *e, const char *queue, const char *id) {
  for (etcd_consumer *c = e->consumers; c; c = c->next)
    if (strcmp(c->queue, queue) == 0 && strcmp(c->id, id) == 0) return c;
  return NULL;
}

bool dl_etcd_q_consumer_valid(dl_etcd *e, const dl_sync_ref *s,
                              const dl_queue_req *q) {
  pthread_mutex_lock(&e->mu);
  etcd_consumer *c = find(e, s->key, q->consumer);
  bool valid = c && c->until > dl_now_ms();
  pthread_mutex_unlock(&e->mu);
  return valid;
}

void dl_etcd_q_consumer_put_req(const qnames *n, const dl_queue_req *q,
                                int64_t lease, etcd_json *j) {
  char key[sizeof n->cons + ID_LEN];
  snprintf(key, sizeof key, "%s%s", n->cons, q->consumer);
  dl_etcd_json_add(j, "{\"success\":[");
  dl_etcd_op_put_on(j, key, "", 0, lease);
  dl_etcd_json_add(j, "]}");
}

int dl_etcd_q_consumer_keep(dl_etcd *e, const dl_sync_ref *s,
                            const dl_queue_req *q, int64_t lease, int64_t sent,
                            int64_t *revoke) {
  pthread_mutex_lock(&e->mu);
  etcd_consumer *c = find(e, s->key, q->consumer);
  if (c == NULL && (c = calloc(1, sizeof *c)) != NULL &&
      (c->queue = dl_strdup(s->key)) == NULL) {
    free(c);
    c = NULL;
  }
  if (c && c->queue && c->lease == 0) {
    snprintf(c->id, sizeof c->id, "%s", q->consumer);
    c->next = e->consumers;
    e->consumers = c;
  }
  *revoke = lease;
  if (c) {
    *revoke = c->lease;
    c->lease = lease;
    c->until = dl_validity(sent, q->lease_ms);
  }
  pthread_mutex_unlock(&e->mu);
  return c ? 0 : dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
}

/* The consumer's lease, granted with its key when it has none that is
 * valid: 0, or a negative code. */
static int consumer_lease(dl_etcd *e, const dl_sync_ref *s, const qnames *n,
                          const dl_queue_req *q) {
  if (dl_etcd_q_consumer_valid(e, s, q)) return 0;
  int64_t lease, got, sent = dl_now_ms();
  int rc = dl_etcd_grant(e, dl_etcd_ttl_s(q->lease_ms),
                         sent + e->command_timeout_ms, &lease, &got);
  if (rc != 0) return rc;
  etcd_json j = {0};
  dl_etcd_q_consumer_put_req(n, q, lease, &j);
  json_object *r;
  rc = dl_etcd_txn_post(e, &j, &r);
  if (rc != 0) {
    dl_etcd_revoke(e, lease, dl_now_ms() + e->command_timeout_ms);
    return rc;
  }
  json_object_put(r);
  int64_t revoke;
  rc = dl_etcd_q_consumer_keep(e, s, q, lease, sent, &revoke);
  if (revoke) dl_etcd_revoke(e, revoke, dl_now_ms() + e->command_timeout_ms);
  return rc;
}

/* The consumer id of a PROC key (into id), or false when the key has
 * another shape. */
static bool id_of(const qnames *n, const char *key, char id[ID_LEN + 1]) {
  size_t l = strlen(n->proc);
  const char *t = key + l;
  if (strncmp(key, n->proc, l) != 0 ||
      strspn(t, "0123456789abcdef") != ID_LEN || t[ID_LEN] != '/' ||
      strspn(t + ID_LEN + 1, "0123456789") < 1 ||
      t[ID_LEN + 1 + strspn(t + ID_LEN + 1, "0123456789")] != '\0')
    return false;
  memcpy(id, t, ID_LEN);
  id[ID_LEN] = '\0';
  return true;
}

void dl_etcd_q_taken_req(const qnames *n, etcd_json *j) {
  dl_etcd_json_add(j, "{\"success\":[");
  dl_etcd_op_range(j, n->cons, n->cons_end, ",\"keys_only\":true");
  dl_etcd_op_range(j, n->proc, n->proc_end, NEWEST_FIRST);
  dl_etcd_json_add(j, "]}");
}

int dl_etcd_q_taken_answer(dl_etcd *e, const dl_sync_ref *s, const qnames *n,
                           const char *own, json_object *r, qdue *d) {
  *d = (qdue){.r = r, .head = true};
  json_object *live =
                  dl_etcd_get(dl_etcd_txn_resp(r, 0, "response_range"), "kvs"),
              *taken =
                  dl_etcd_get(dl_etcd_txn_resp(r, 1, "response_range"), "kvs");
  size_t nl = live ? json_object_array_length(live) : 0,
         nt = taken ? json_object_array_length(taken) : 0;
  if (nt && (d->all = calloc(nt, sizeof *d->all)) == NULL)
    return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  char key[sizeof n->proc + 64] = "(a key)", id[ID_LEN + 1],
                            other[sizeof n->cons + 64];
  size_t k = 0;
  for (size_t i = 0; i < nt; i++) {
    json_object *kv = json_object_array_get_idx(taken, i);
    if (dl_etcd_kv_key(kv, key, sizeof key) < 0 || !id_of(n, key, id))
      return dl_seterr(e->err, DLOCK_EWRONGTYPE,
                       "'%s': the key '%s' among its taken values is none",
                       s->name, key);
    bool alive = strcmp(id, own) == 0;
    for (size_t l = 0; !alive && l < nl; l++)
      alive = dl_etcd_kv_key(json_object_array_get_idx(live, l), other,
                             sizeof other) > 0 &&
              strncmp(other, n->cons, strlen(n->cons)) == 0 &&
              strcmp(other + strlen(n->cons), id) == 0;
    if (!alive) d->all[k++].kv = kv;
  }
  d->k = k;
  return 0;
}

/* The values taken by consumers without a CONS key go back to Q's head,
 * the newest taken first (so the oldest ends at the head): 0, or a
 * negative code (DLOCK_EWRONGTYPE: a key of another shape there, nothing
 * moved). */
static int give_back(dl_etcd *e, const dl_sync_ref *s, const qnames *n,
                     const char *own) {
  etcd_json j = {0};
  dl_etcd_q_taken_req(n, &j);
  json_object *r;
  int rc = dl_etcd_txn_post(e, &j, &r);
  if (rc != 0) return rc;
  qdue d;
  rc = dl_etcd_q_taken_answer(e, s, n, own, r, &d);
  while (rc == 0 && d.i < d.k) {
    j = (etcd_json){0};
    rc = dl_etcd_q_due_move_req(e, n, &d, &j);
    if (rc == 0)
      rc = dl_etcd_txn_post(e, &j, &r);
    else
      dl_etcd_json_free(&j);
    if (rc == 0) dl_etcd_q_move_answer(r, NULL); /* or moved by another */
  }
  dl_etcd_q_due_end(n, &d);
  return rc;
}

void dl_etcd_q_ack_req(const qnames *n, const dl_queue_req *q, etcd_json *j) {
  char pfx[sizeof n->proc + ID_LEN + 2], end[sizeof pfx];
  snprintf(pfx, sizeof pfx, "%s%s/", n->proc, q->consumer);
  snprintf(end, sizeof end, "%s%s0", n->proc, q->consumer);
  dl_etcd_json_add(j, "{\"success\":[");
  dl_etcd_op_range(j, pfx, end, NEWEST_FIRST);
  dl_etcd_json_add(j, "]}");
}

int dl_etcd_q_ack_answer(dl_etcd *e, const dl_queue_req *q, json_object *r,
                         qcand *c) {
  json_object *kvs =
      dl_etcd_get(dl_etcd_txn_resp(r, 0, "response_range"), "kvs");
  size_t nk = kvs ? json_object_array_length(kvs) : 0;
  json_object *hit = NULL;
  int rc = 0;
  for (size_t i = 0; hit == NULL && rc == 0 && i < nk; i++) {
    json_object *kv = json_object_array_get_idx(kvs, i);
    size_t len = 0;
    char *v = dl_etcd_kv_value(kv, &len);
    if (v == NULL)
      rc = dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
    else if (len == q->len && (len == 0 || memcmp(v, q->value, len) == 0))
      hit = kv;
    free(v);
  }
  if (rc == 0 && hit && dl_etcd_kv_key(hit, c->key, sizeof c->key) >= 0) {
    c->mod = dl_etcd_i64(hit, "mod_revision");
    rc = 1;
  }
  json_object_put(r);
  return rc;
}

void dl_etcd_q_ack_del_req(const qcand *c, etcd_json *j) {
  dl_etcd_json_add(j, "{\"compare\":[");
  dl_etcd_cmp_mod(j, c->key, c->mod);
  dl_etcd_json_add(j, "],\"success\":[");
  dl_etcd_op_delete(j, c->key);
  dl_etcd_json_add(j, "]}");
}

/* The ack: one of the consumer's taken values equal to q's value goes:
 * 0 (q->n 1 gone, 0 none there), or a negative code. */
static int ack(dl_etcd *e, const qnames *n, dl_queue_req *q) {
  qcand c;
  for (;;) {
    etcd_json j = {0};
    dl_etcd_q_ack_req(n, q, &j);
    json_object *r;
    int rc = dl_etcd_txn_post(e, &j, &r);
    if (rc == 0) rc = dl_etcd_q_ack_answer(e, q, r, &c);
    q->n = 0;
    if (rc != 1) return rc;
    j = (etcd_json){0};
    dl_etcd_q_ack_del_req(&c, &j);
    rc = dl_etcd_txn_post(e, &j, &r);
    if (rc != 0) return rc;
    bool done = dl_etcd_txn_succeeded(r);
    json_object_put(r);
    if (done) {
      q->n = 1;
      return 0;
    }
    /* Gone meanwhile (given back: its lease ended): look again. */
  }
}

int dl_etcd_q_reliable_check(dl_etcd *e, const dl_queue_req *q) {
  if (q->consumer == NULL || strlen(q->consumer) != ID_LEN ||
      strspn(q->consumer, "0123456789abcdef") != ID_LEN ||
      (q->op == DL_QUEUE_POLL_RELIABLE && q->lease_ms <= 0))
    return dl_seterr(e->err, DLOCK_EINVAL,
                     "etcd: queue: bad consumer id or lease: nothing changed");
  return 0;
}

void dl_etcd_q_reliable_dest(const qnames *n, const dl_queue_req *q, char *dest,
                             size_t len) {
  snprintf(dest, len, "%s%s/%lld", n->proc, q->consumer, dl_etcd_q_nanos());
}

int dl_etcd_q_reliable(dl_etcd *e, const dl_sync_ref *s, const qnames *n,
                       dl_queue_req *q) {
  int rc = dl_etcd_q_reliable_check(e, q);
  if (rc != 0) return rc;
  if (q->op == DL_QUEUE_ACK) return ack(e, n, q);
  rc = consumer_lease(e, s, n, q);
  if (rc == 0) rc = give_back(e, s, n, q->consumer);
  if (rc != 0) return rc;
  char dest[ETCD_Q_DEST_MAX];
  dl_etcd_q_reliable_dest(n, q, dest, sizeof dest);
  return dl_etcd_q_poll(e, s, n, q, dest);
}

int dl_etcd_consumer_look(dl_etcd *e, dl_renew_item *it, int64_t lease_ms,
                          int64_t *lease) {
  const char *id = strrchr(it->owner, ':');
  id = id ? id + 1 : it->owner;
  pthread_mutex_lock(&e->mu);
  etcd_consumer *c = find(e, it->key, id);
  int64_t until = c ? c->until : 0;
  *lease = c ? c->lease : 0;
  pthread_mutex_unlock(&e->mu);
  if (c == NULL) return 2;
  if (lease_ms == 0 || until == 0) {
    if (until <= dl_now_ms()) return 0;
    it->valid_until = until;
    return 1;
  }
  return 3;
}

int dl_etcd_consumer_kept(dl_etcd *e, dl_renew_item *it, int64_t lease,
                          int64_t sent, int rc, int64_t ttl) {
  if (rc < 0) return rc;
  const char *id = strrchr(it->owner, ':');
  id = id ? id + 1 : it->owner;
  pthread_mutex_lock(&e->mu);
  etcd_consumer *c = find(e, it->key, id);
  if (c != NULL && c->lease == lease)
    c->until = rc == 1 ? dl_validity(sent, ttl * 1000) : 0;
  int64_t until = c ? c->until : 0;
  pthread_mutex_unlock(&e->mu);
  if (rc == 0 || until == 0) return 0;
  it->valid_until = until;
  return 1;
}

int dl_etcd_consumer_renew(dl_etcd *e, dl_renew_item *it, int64_t lease_ms,
                           int64_t deadline) {
  int64_t lease;
  int rc = dl_etcd_consumer_look(e, it, lease_ms, &lease);
  if (rc != 3) return rc;
  int64_t sent = dl_now_ms(), ttl = 0;
  rc = dl_etcd_keepalive(e, lease, deadline, &ttl);
  return dl_etcd_consumer_kept(e, it, lease, sent, rc, ttl);
}

void dl_etcd_consumers_free(dl_etcd *e, int64_t deadline) {
  while (e->consumers) {
    etcd_consumer *c = e->consumers;
    e->consumers = c->next;
    if (c->until > dl_now_ms()) dl_etcd_revoke(e, c->lease, deadline);
    free(c->queue);
    free(c);
  }
}
