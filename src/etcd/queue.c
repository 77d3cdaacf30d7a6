/* queue.c: the blocking queue and deque (Redisson's RBlockingQueue and
 * RBlockingDeque) on etcd, on the layout of etcd's own contrib/recipes
 * Queue, so that Go's recipe.Queue and dlock share a queue both ways
 * (docs/WIRE.md, byte for byte). For the queue Q = P + NAME:
 * - a value is the key Q/<decimal digits>, its value the bare bytes, on
 *   no lease: Go's Enqueue writes Q/<its clock's UnixNano> if no such key
 *   is there, and so does dlock's offer; the queue's order is the keys'
 *   create revision (Go's Dequeue takes the oldest);
 * - a value offered at the head is Q/0<UnixNano> (Go's keys never start
 *   with a 0): the head is the newest of those, then the oldest of the
 *   others; the tail the newest of the others, then the oldest of those.
 *   Go's Dequeue, which has no head, takes them by create revision too;
 * - a take reads the candidate, then deletes it in a txn compared on its
 *   mod revision (Go's deleteRevKey): of two consumers racing for it one
 *   gets it, the other looks again. A waiting take watches Q/ from the
 *   revision it read until a PUT (Go's WaitPrefixEvents), no polling;
 * - nothing else may be at Q, under Q/ outside Q/0..Q/9, nor under Q/ of
 *   another shape (a lock's or an election's keys): DLOCK_EWRONGTYPE, and
 *   every write compares the first two so that it changes nothing then.
 * The delayed queue (Go has none) is dlock's: each value the key
 * P + "__dlock_delayed/" + NAME ('%' and '/' %-escaped) + "/" + its due
 * time (epoch ms by the offering client's clock, 16 digits) + "-" + 16
 * random hex digits; moving it is one txn (compared on its mod revision)
 * that deletes it and offers it at Q's tail, in due order (offer order
 * within a ms). The reliable take and its ack: reliable.c. */
#include "queue.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Delayed values one move takes at most (the rest: at once after). */
#define MOVE_MAX 100
/* An offer's tries at a free key. */
#define OFFER_TRIES 100
/* The digits of a value's key after Q/ (Go's UnixNano has 19). */
#define DIGITS_MIN 17
#define DIGITS_MAX 25

/* Writes P + what + NAME ('%' and '/' escaped) + "/" into out (size
 * len), its range's end (the last '/' + 1) into end: the dlock keys that
 * live beside Q, out of the reach of Go's Dequeue (prefix Q). */
static void beside(dl_etcd *e, const dl_sync_ref *s, const char *what,
                   char *out, char *end, size_t len) {
  size_t o = (size_t)snprintf(out, len, "%s%s", e->prefix, what);
  for (const char *k = s->key; *k && o + 4 < len; k++)
    o += (size_t)(*k == '%'   ? snprintf(out + o, 4, "%%25")
                  : *k == '/' ? snprintf(out + o, 4, "%%2F")
                              : snprintf(out + o, 2, "%c", *k));
  snprintf(out + o, len - o, "/");
  snprintf(end, len, "%.*s0", (int)o, out);
}

void dl_etcd_qnames(dl_etcd *e, const dl_sync_ref *s, qnames *n) {
  snprintf(n->q, sizeof n->q, "%s%s", e->prefix, s->key);
  snprintf(n->lo, sizeof n->lo, "%s/", n->q);
  snprintf(n->d0, sizeof n->d0, "%s/0", n->q);
  snprintf(n->d1, sizeof n->d1, "%s/1", n->q);
  snprintf(n->dc, sizeof n->dc, "%s/:", n->q);
  snprintf(n->end, sizeof n->end, "%s0", n->q);
  beside(e, s, "__dlock_delayed/", n->dl, n->dl_end, sizeof n->dl);
  beside(e, s, "__dlock_consumers/", n->cons, n->cons_end, sizeof n->cons);
  beside(e, s, "__dlock_processing/", n->proc, n->proc_end, sizeof n->proc);
}

/* The compares that nothing foreign is at Q or beside its values. */
void dl_etcd_q_cmp_clean(etcd_json *j, const qnames *n) {
  dl_etcd_cmp_absent(j, n->q, NULL);
  dl_etcd_cmp_absent(j, n->lo, n->d0);
  dl_etcd_cmp_absent(j, n->dc, n->end);
}

/* Their reads, the txn's first three responses. */
void dl_etcd_q_read_clean(etcd_json *j, const qnames *n) {
  const char *one = ",\"limit\":\"1\",\"keys_only\":true";
  dl_etcd_op_range(j, n->q, NULL, one);
  dl_etcd_op_range(j, n->lo, n->d0, one);
  dl_etcd_op_range(j, n->dc, n->end, one);
}

static int wrongtype(dl_etcd *e, const dl_sync_ref *s, const char *key) {
  return dl_seterr(e->err, DLOCK_EWRONGTYPE,
                   "'%s' is not a queue: the key '%s' is no value of one "
                   "(another kind at the name)",
                   s->name, key);
}

/* DLOCK_EWRONGTYPE recorded if read_clean's reads (responses 0..2 of r)
 * found a key, else 0. */
int dl_etcd_q_check_clean(dl_etcd *e, const dl_sync_ref *s, json_object *r) {
  for (int i = 0; i < 3; i++) {
    json_object *kv = dl_etcd_txn_kv(r, i);
    char key[ETCD_KEY_MAX] = "(a key)";
    if (kv == NULL) continue;
    dl_etcd_kv_key(kv, key, sizeof key);
    return wrongtype(e, s, key);
  }
  return 0;
}

/* Whether key is a value's: Q/ + DIGITS_MIN..DIGITS_MAX digits. */
static bool is_value_key(const qnames *n, const char *key) {
  size_t l = strlen(n->lo);
  if (strncmp(key, n->lo, l) != 0) return false;
  size_t d = strspn(key + l, "0123456789");
  return key[l + d] == '\0' && d >= DIGITS_MIN && d <= DIGITS_MAX;
}

/* The next key name's number: the clock's UnixNano, above the last one
 * this process used. */
long long dl_etcd_q_nanos(void) {
  static _Atomic long long last;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  long long now = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
  long long was = atomic_load(&last), want;
  do
    want = now > was ? now : was + 1;
  while (!atomic_compare_exchange_weak(&last, &was, want));
  return want;
}

long long dl_etcd_q_epoch_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- offers ---- */
int dl_etcd_q_offer_req(dl_etcd *e, const qnames *n, const dl_queue_req *q,
                        bool head, long long delayed_at, const char *from,
                        etcd_json *j) {
  char key[3 * ETCD_KEY_MAX + 64];
  if (delayed_at >= 0) {
    unsigned char rnd[8];
    unsigned long long id = 0;
    if (dl_random_bytes(rnd, sizeof rnd) != 0)
      return dl_seterr(e->err, DLOCK_ENOMEM, "no random bytes");
    for (int i = 0; i < 8; i++)
      id = id << 8 | rnd[i];
    snprintf(key, sizeof key, "%s%016lld-%016llx", n->dl, delayed_at, id);
  } else {
    snprintf(key, sizeof key, "%s%lld", head ? n->d0 : n->lo,
             dl_etcd_q_nanos());
  }
  dl_etcd_json_add(j, "{\"compare\":[");
  dl_etcd_cmp_absent(j, key, NULL);
  dl_etcd_q_cmp_clean(j, n);
  dl_etcd_json_add(j, "],\"success\":[");
  dl_etcd_op_put(j, key, q->value, q->len);
  dl_etcd_op_range(j, n->d0, n->dc, ",\"count_only\":true");
  if (from) dl_etcd_op_delete(j, from);
  dl_etcd_json_add(j, "],\"failure\":[");
  dl_etcd_q_read_clean(j, n);
  dl_etcd_json_add(j, "]}");
  return 0;
}

int dl_etcd_q_offer_answer(dl_etcd *e, const dl_sync_ref *s, dl_queue_req *q,
                           long long delayed_at, json_object *r, int *tries) {
  int rc = 1;
  if (dl_etcd_txn_succeeded(r))
    q->n = delayed_at >= 0 ? delayed_at : dl_etcd_txn_count(r, 1);
  else /* else the key was taken: another */
    rc = dl_etcd_q_check_clean(e, s, r);
  json_object_put(r);
  if (rc == 0 && ++*tries >= OFFER_TRIES)
    rc = dl_seterr(e->err, DLOCK_EPROTO,
                   "etcd: no free key for a value of queue '%s'", s->name);
  return rc;
}

/* Puts len bytes at a new key (head: Q/0..., else Q/...; delayed_at >= 0:
 * the delayed value due then): 0 (q->n: the new length, or the due
 * time), DLOCK_EWRONGTYPE, or a negative code. */
static int offer(dl_etcd *e, const dl_sync_ref *s, const qnames *n,
                 dl_queue_req *q, bool head, long long delayed_at) {
  for (int tries = 0;;) {
    etcd_json j = {0};
    json_object *r;
    int rc = dl_etcd_q_offer_req(e, n, q, head, delayed_at, NULL, &j);
    if (rc == 0)
      rc = dl_etcd_txn_post(e, &j, &r);
    else
      dl_etcd_json_free(&j);
    if (rc == 0) rc = dl_etcd_q_offer_answer(e, s, q, delayed_at, r, &tries);
    if (rc != 0) return rc < 0 ? rc : 0;
  }
}

/* ---- takes ---- */
void dl_etcd_q_look_req(const qnames *n, bool last, etcd_json *j) {
  const char *newest = ",\"limit\":\"1\",\"sort_target\":\"CREATE\","
                       "\"sort_order\":\"DESCEND\"",
             *oldest = ",\"limit\":\"1\",\"sort_target\":\"CREATE\","
                       "\"sort_order\":\"ASCEND\"";
  dl_etcd_json_add(j, "{\"success\":[");
  dl_etcd_q_read_clean(j, n);
  dl_etcd_op_range(j, n->d0, n->d1, last ? oldest : newest);
  dl_etcd_op_range(j, n->d1, n->dc, last ? newest : oldest);
  dl_etcd_json_add(j, "]}");
}

int dl_etcd_q_look_answer(dl_etcd *e, const dl_sync_ref *s, const qnames *n,
                          bool last, json_object *r, qcand *c) {
  int rc = dl_etcd_q_check_clean(e, s, r);
  json_object *heads = dl_etcd_txn_kv(r, 3), *tails = dl_etcd_txn_kv(r, 4);
  json_object *kv = last ? (tails ? tails : heads) : (heads ? heads : tails);
  c->rev = dl_etcd_txn_rev(r);
  c->v = NULL;
  snprintf(c->key, sizeof c->key, "(a key)");
  if (rc == 0 && kv &&
      (dl_etcd_kv_key(kv, c->key, sizeof c->key) < 0 ||
       !is_value_key(n, c->key)))
    rc = wrongtype(e, s, c->key);
  if (rc == 0 && kv) {
    c->v = dl_etcd_kv_value(kv, &c->len);
    c->mod = dl_etcd_i64(kv, "mod_revision");
    rc = c->v ? 1 : dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  }
  json_object_put(r);
  return rc;
}

void dl_etcd_q_take_req(const qnames *n, const qcand *c, const char *dest,
                        etcd_json *j) {
  /* Go's deleteRevKey, and nothing foreign since. */
  dl_etcd_json_add(j, "{\"compare\":[");
  dl_etcd_cmp_mod(j, c->key, c->mod);
  dl_etcd_q_cmp_clean(j, n);
  dl_etcd_json_add(j, "],\"success\":[");
  dl_etcd_op_delete(j, c->key);
  if (dest) dl_etcd_op_put(j, dest, c->v, c->len);
  dl_etcd_json_add(j, "]}");
}

/* One look and take: 1 (q->got; put at the key dest too when it is not
 * NULL, in the same txn), 0 none (*rev the revision read), or a negative
 * code. */
static int take(dl_etcd *e, const dl_sync_ref *s, const qnames *n,
                dl_queue_req *q, const char *dest, int64_t *rev) {
  qcand c;
  for (;;) {
    etcd_json j = {0};
    dl_etcd_q_look_req(n, q->op == DL_QUEUE_POLL_LAST, &j);
    json_object *r;
    int rc = dl_etcd_txn_post(e, &j, &r);
    if (rc != 0) return rc;
    rc = dl_etcd_q_look_answer(e, s, n, q->op == DL_QUEUE_POLL_LAST, r, &c);
    *rev = c.rev;
    if (rc != 1) return rc;
    j = (etcd_json){0};
    dl_etcd_q_take_req(n, &c, dest, &j);
    rc = dl_etcd_txn_post(e, &j, &r);
    if (rc == 0) {
      rc = dl_etcd_txn_succeeded(r);
      json_object_put(r);
    }
    if (rc == 1) {
      q->got = c.v;
      q->got_len = c.len;
      return 1;
    }
    free(c.v);
    if (rc < 0) return rc;
    /* Another consumer took it (or something foreign came): again. */
  }
}

/* ---- the delayed values ---- */
/* Due order (the keys' due time), then offer order. */
static int by_due(const void *a, const void *b) {
  const due_kv *x = a, *y = b;
  if (x->due != y->due) return x->due < y->due ? -1 : 1;
  return x->create < y->create ? -1 : x->create > y->create;
}

/* The due time of a delayed value's key, or -1 when it is no delayed
 * value's key. */
static long long due_of(const qnames *n, const char *key) {
  size_t l = strlen(n->dl);
  if (strncmp(key, n->dl, l) != 0) return -1;
  const char *t = key + l;
  if (strspn(t, "0123456789") != 16 || t[16] != '-' ||
      strspn(t + 17, "0123456789abcdef") != 16 || t[33] != '\0')
    return -1;
  return strtoll(t, NULL, 10);
}

int dl_etcd_q_move_req(dl_etcd *e, const qnames *n, json_object *kv,
                       const char *from, bool head, etcd_json *j) {
  size_t len = 0;
  char *v = dl_etcd_kv_value(kv, &len);
  if (v == NULL) return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  char key[ETCD_KEY_MAX + 32];
  snprintf(key, sizeof key, "%s%lld", head ? n->d0 : n->lo, dl_etcd_q_nanos());
  dl_etcd_json_add(j, "{\"compare\":[");
  dl_etcd_cmp_mod(j, from, dl_etcd_i64(kv, "mod_revision"));
  dl_etcd_cmp_absent(j, key, NULL);
  dl_etcd_q_cmp_clean(j, n);
  dl_etcd_json_add(j, "],\"success\":[");
  dl_etcd_op_delete(j, from);
  dl_etcd_op_put(j, key, v, len);
  dl_etcd_json_add(j, "]}");
  free(v);
  return 0;
}

int dl_etcd_q_move_answer(json_object *r, int64_t *rev) {
  int rc = dl_etcd_txn_succeeded(r);
  if (rev && dl_etcd_txn_rev(r) > *rev) *rev = dl_etcd_txn_rev(r);
  json_object_put(r);
  return rc;
}

int dl_etcd_q_move(dl_etcd *e, const qnames *n, json_object *kv,
                   const char *from, bool head, int64_t *rev) {
  etcd_json j = {0};
  json_object *r;
  int rc = dl_etcd_q_move_req(e, n, kv, from, head, &j);
  if (rc == 0)
    rc = dl_etcd_txn_post(e, &j, &r);
  else
    dl_etcd_json_free(&j);
  return rc != 0 ? rc : dl_etcd_q_move_answer(r, rev);
}

void dl_etcd_q_due_req(const qnames *n, etcd_json *j) {
  char due[3 * ETCD_KEY_MAX + 32];
  snprintf(due, sizeof due, "%s%016lld", n->dl, dl_etcd_q_epoch_ms() + 1);
  char more[64];
  snprintf(more, sizeof more, ",\"limit\":\"%d\"", MOVE_MAX);
  dl_etcd_json_add(j, "{\"success\":[");
  dl_etcd_q_read_clean(j, n);
  dl_etcd_op_range(j, n->dl, due, more);
  dl_etcd_op_range(j, due, n->dl_end, ",\"limit\":\"1\",\"keys_only\":true");
  dl_etcd_json_add(j, "]}");
}

int dl_etcd_q_due_answer(dl_etcd *e, const dl_sync_ref *s, const qnames *n,
                         json_object *r, qdue *d) {
  *d = (qdue){.r = r, .at = dl_etcd_txn_rev(r)};
  int rc = dl_etcd_q_check_clean(e, s, r);
  json_object *kvs =
      dl_etcd_get(dl_etcd_txn_resp(r, 3, "response_range"), "kvs");
  size_t k = kvs && json_object_is_type(kvs, json_type_array)
                 ? json_object_array_length(kvs)
                 : 0;
  d->again = k == MOVE_MAX;
  due_kv *all = k ? calloc(k, sizeof *all) : NULL;
  if (rc == 0 && k && all == NULL)
    rc = dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  char key[3 * ETCD_KEY_MAX + 64] = "(a key)";
  for (size_t i = 0; rc == 0 && i < k; i++) {
    json_object *kv = json_object_array_get_idx(kvs, i);
    long long t = dl_etcd_kv_key(kv, key, sizeof key) < 0 ? -1 : due_of(n, key);
    if (t < 0)
      rc = dl_seterr(e->err, DLOCK_EWRONGTYPE,
                     "'%s': the key '%s' among its delayed values is none",
                     s->name, key);
    else
      all[i] = (due_kv){kv, t, dl_etcd_i64(kv, "create_revision")};
  }
  if (rc == 0 && k > 1) qsort(all, k, sizeof *all, by_due);
  d->all = all;
  d->k = rc == 0 ? k : 0; /* nothing moved then */
  return rc;
}

int dl_etcd_q_due_move_req(dl_etcd *e, const qnames *n, qdue *d, etcd_json *j) {
  char key[3 * ETCD_KEY_MAX + 64] = "";
  json_object *kv = d->all[d->i++].kv;
  dl_etcd_kv_key(kv, key, sizeof key);
  return dl_etcd_q_move_req(e, n, kv, key, d->head, j);
}

long long dl_etcd_q_due_end(const qnames *n, qdue *d) {
  long long next = -1;
  char key[3 * ETCD_KEY_MAX + 64];
  json_object *nx = d->r ? dl_etcd_txn_kv(d->r, 4) : NULL;
  if (nx && dl_etcd_kv_key(nx, key, sizeof key) >= 0 && due_of(n, key) >= 0) {
    long long t = due_of(n, key) - dl_etcd_q_epoch_ms();
    next = t > 0 ? t : 0;
  }
  if (d->again) next = 0;
  free(d->all);
  json_object_put(d->r);
  *d = (qdue){0};
  return next;
}

/* Moves the delayed values due by now to the queue's tail: 0 with *next
 * (ms until the next is due; 0: more are due now; -1: none waits) and,
 * unless rev is NULL, *rev (the revision after them), or a negative
 * code (DLOCK_EWRONGTYPE: a key of another shape there, nothing moved). */
static int move_due(dl_etcd *e, const dl_sync_ref *s, const qnames *n,
                    long long *next, int64_t *rev) {
  etcd_json j = {0};
  dl_etcd_q_due_req(n, &j);
  json_object *r;
  int rc = dl_etcd_txn_post(e, &j, &r);
  if (rc != 0) return rc;
  qdue d;
  rc = dl_etcd_q_due_answer(e, s, n, r, &d);
  while (rc == 0 && d.i < d.k) {
    j = (etcd_json){0};
    int m = dl_etcd_q_due_move_req(e, n, &d, &j);
    if (m == 0)
      m = dl_etcd_txn_post(e, &j, &r);
    else
      dl_etcd_json_free(&j);
    if (m == 0) m = dl_etcd_q_move_answer(r, &d.at);
    if (m < 0) rc = m;
    if (m == 0) d.again = true; /* looked at again */
  }
  if (rev) *rev = d.at; /* after our own moves */
  *next = dl_etcd_q_due_end(n, &d);
  return rc;
}

int dl_etcd_q_poll(dl_etcd *e, const dl_sync_ref *s, const qnames *n,
                   dl_queue_req *q, const char *dest) {
  dl_ride rides = {0};
  for (;;) {
    unsigned wakes = atomic_load(&e->wakes);
    long long next = -1;
    int rc = q->delayed ? move_due(e, s, n, &next, NULL) : 0;
    int64_t rev = 0;
    if (rc == 0) rc = take(e, s, n, q, dest, &rev);
    if (rc < 0 && dl_etcd_ride_out(e, q->wait, q->deadline, rc, &rides))
      continue;
    if (rc != 0 || !q->wait) return rc;
    dl_ride_answered(&rides); /* answered */
    int64_t now = dl_now_ms(), until = q->deadline;
    if (now >= until || dl_offload_cancelled()) return 0;
    if (next >= 0 && next < until - now) until = now + (next < 5 ? 5 : next);
    rc = dl_etcd_wait_prefix(e, n->lo, rev, true, until, wakes);
    if (rc < 0 && dl_etcd_ride_out(e, true, q->deadline, rc, &rides)) continue;
    if (rc < 0) return rc;
    /* The deadline, or a cancel; else (news, the next due time, another
     * wait's wake) look again. */
    if (rc == 0 && (dl_now_ms() >= q->deadline || dl_offload_cancelled()))
      return 0;
  }
}

/* DL_QUEUE_TRANSFER: moves what is due; with q->wait, then sleeps until
 * the next due time, a change among the delayed values (a new one from
 * any client: a watch on them), a kick (dl_etcd_queue_kick) or
 * q->deadline, and moves again. 0 (q->n: ms until the next is due, -1
 * none), or a negative code. */
static int transfer(dl_etcd *e, const dl_sync_ref *s, const qnames *n,
                    dl_queue_req *q) {
  unsigned wakes = atomic_load(&e->wakes);
  long long next = -1;
  int64_t rev = 0;
  int rc = move_due(e, s, n, &next, &rev);
  if (rc == 0 && q->wait) {
    int64_t now = dl_now_ms(), until = q->deadline;
    if (next >= 0 && next < until - now) until = now + next;
    rc = until > now ? dl_etcd_wait_change(e, n->dl, rev, until, wakes) : 0;
    if (rc >= 0) rc = move_due(e, s, n, &next, NULL);
  }
  q->n = next;
  return rc;
}

void dl_etcd_queue_kick(dl_backend *b, const dl_sync_ref *s) {
  dl_etcd *e = (dl_etcd *)b;
  (void)s;
  /* Every wait of the client ends; the others look again (a spurious
   * wake, as an election's stop makes). */
  atomic_fetch_add(&e->wakes, 1);
  dl_etcd_wake_waits(e);
}

void dl_etcd_q_count_req(const qnames *n, bool delayed, etcd_json *j) {
  dl_etcd_json_add(j, "{\"success\":[");
  if (!delayed) dl_etcd_q_read_clean(j, n);
  dl_etcd_op_range(j, delayed ? n->dl : n->d0, delayed ? n->dl_end : n->dc,
                   ",\"count_only\":true");
  dl_etcd_json_add(j, "]}");
}

int dl_etcd_q_count_answer(dl_etcd *e, const dl_sync_ref *s, bool delayed,
                           json_object *r, long long *out) {
  int rc = delayed ? 0 : dl_etcd_q_check_clean(e, s, r);
  *out = dl_etcd_txn_count(r, delayed ? 0 : 3);
  json_object_put(r);
  return rc;
}

/* The count of the queue's values, or of its delayed ones. */
static int count(dl_etcd *e, const dl_sync_ref *s, const qnames *n,
                 bool delayed, long long *out) {
  etcd_json j = {0};
  dl_etcd_q_count_req(n, delayed, &j);
  json_object *r;
  int rc = dl_etcd_txn_post(e, &j, &r);
  return rc != 0 ? rc : dl_etcd_q_count_answer(e, s, delayed, r, out);
}

int dl_etcd_queue(dl_backend *b, const dl_sync_ref *s, dl_queue_req *q) {
  dl_etcd *e = (dl_etcd *)b;
  qnames *n = malloc(sizeof *n);
  if (n == NULL) return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  dl_etcd_qnames(e, s, n);
  q->got = NULL;
  q->got_len = 0;
  q->n = 0;
  long long v = 0;
  int rc;
  switch (q->op) {
  case DL_QUEUE_OFFER:
  case DL_QUEUE_OFFER_FIRST:
    rc = offer(e, s, n, q, q->op == DL_QUEUE_OFFER_FIRST, -1);
    break;
  case DL_QUEUE_OFFER_DELAYED:
    rc = offer(e, s, n, q, false, dl_etcd_q_epoch_ms() + q->delay_ms);
    break;
  case DL_QUEUE_POLL:
  case DL_QUEUE_POLL_LAST: rc = dl_etcd_q_poll(e, s, n, q, NULL); break;
  case DL_QUEUE_SIZE:
    rc = count(e, s, n, false, &v);
    q->n = v;
    break;
  case DL_QUEUE_SIZE_DELAYED:
    rc = count(e, s, n, true, &v);
    q->n = v;
    break;
  case DL_QUEUE_TRANSFER: rc = transfer(e, s, n, q); break;
  default: /* DL_QUEUE_POLL_RELIABLE, DL_QUEUE_ACK */
    rc = dl_etcd_q_reliable(e, s, n, q);
    break;
  }
  free(n);
  return rc;
}
