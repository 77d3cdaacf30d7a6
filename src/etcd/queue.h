/* queue.h: what the etcd queue's files share (queue.c: the queue, its
 * head and its delayed values; reliable.c: the reliable take): the keys
 * of a queue (docs/WIRE.md) and the steps both take. */
#ifndef DLOCK_ETCD_QUEUE_H
#define DLOCK_ETCD_QUEUE_H

#include "etcdb.h"

/* The keys and ranges of the queue Q = P + NAME, and of what dlock keeps
 * beside it (each "P + __dlock_<what>/ + NAME escaped + /", and its
 * range's end). */
typedef struct qnames {
  char q[ETCD_KEY_MAX];       /* Q: nothing may be here */
  char lo[ETCD_KEY_MAX + 4];  /* Q/: [Q/, Q/0) holds nothing */
  char d0[ETCD_KEY_MAX + 4];  /* Q/0: [Q/0, Q/1) the values offered first */
  char d1[ETCD_KEY_MAX + 4];  /* Q/1: [Q/1, Q/:) the others */
  char dc[ETCD_KEY_MAX + 4];  /* Q/: : [Q/:, Q0) holds nothing */
  char end[ETCD_KEY_MAX + 4]; /* Q0 */
  char dl[3 * ETCD_KEY_MAX], dl_end[3 * ETCD_KEY_MAX];     /* delayed values */
  char cons[3 * ETCD_KEY_MAX], cons_end[3 * ETCD_KEY_MAX]; /* consumers */
  char proc[3 * ETCD_KEY_MAX], proc_end[3 * ETCD_KEY_MAX]; /* taken */
} qnames;

void dl_etcd_qnames(dl_etcd *e, const dl_sync_ref *s, qnames *n);
/* A txn's compares that nothing foreign is at Q or beside its values;
 * their reads (three responses), and DLOCK_EWRONGTYPE recorded if those
 * (responses 0..2 of r) found a key, else 0. */
void dl_etcd_q_cmp_clean(etcd_json *j, const qnames *n);
void dl_etcd_q_read_clean(etcd_json *j, const qnames *n);
int dl_etcd_q_check_clean(dl_etcd *e, const dl_sync_ref *s, json_object *r);
/* The next key's number: the wall clock's UnixNano, above the last one
 * this process used. */
long long dl_etcd_q_nanos(void);
/* The epoch ms (the delayed values' due times). */
long long dl_etcd_q_epoch_ms(void);
/* Moves kv, the value at the key `from` (not Q's), into the queue: to
 * its head (head) or tail, in one txn compared on from's mod revision
 * and on nothing foreign there: 1 moved, 0 moved by another (or the new
 * key was taken), or a negative code; *rev (unless NULL) raised to the
 * txn's revision. */
int dl_etcd_q_move(dl_etcd *e, const qnames *n, json_object *kv,
                   const char *from, bool head, int64_t *rev);
/* dl_etcd_q_move's halves: its txn into j (0, or DLOCK_ENOMEM recorded:
 * j then freed by the caller), and its answer r (put here). */
int dl_etcd_q_move_req(dl_etcd *e, const qnames *n, json_object *kv,
                       const char *from, bool head, etcd_json *j);
int dl_etcd_q_move_answer(json_object *r, int64_t *rev);
/* The move of the delayed values due by now to the queue's tail, in
 * steps for both drivers: the read of them into j; its answer r (kept in
 * d until dl_etcd_q_due_end): 0, or a negative code recorded
 * (DLOCK_EWRONGTYPE: nothing to move); then while d->i < d->k, the next
 * one's move into j (0, or DLOCK_ENOMEM), its answer by
 * dl_etcd_q_move_answer (d->at raised; 0: moved by another, d->again
 * set); and the end: ms until the next is due (0: more are due now, -1
 * none waits), d freed. */
/* A value to move: its kv, its due time and create revision (the order). */
typedef struct due_kv {
  json_object *kv;
  long long due;
  int64_t create;
} due_kv;
typedef struct qdue {
  json_object *r; /* the read's answer, which the values are of */
  due_kv *all;
  size_t k, i; /* the due values in due order, the next to move */
  bool again;  /* more may be due now */
  bool head;   /* the moves go to the head (reliable.c's give-back) */
  int64_t at;  /* the revision after the moves */
} qdue;
void dl_etcd_q_due_req(const qnames *n, etcd_json *j);
int dl_etcd_q_due_answer(dl_etcd *e, const dl_sync_ref *s, const qnames *n,
                         json_object *r, qdue *d);
int dl_etcd_q_due_move_req(dl_etcd *e, const qnames *n, qdue *d, etcd_json *j);
long long dl_etcd_q_due_end(const qnames *n, qdue *d);
/* A poll (q->op DL_QUEUE_POLL or _LAST; DL_QUEUE_POLL_RELIABLE takes
 * the head): takes, also putting the value at dest in the same txn when
 * dest is not NULL, waiting (a watch on Q/) until q->deadline when
 * q->wait; a delayed handle's moves what is due first, and its wait ends
 * when the next delayed value is due. 1 (q->got), 0, or a negative code. */
int dl_etcd_q_poll(dl_etcd *e, const dl_sync_ref *s, const qnames *n,
                   dl_queue_req *q, const char *dest);
/* The halves of queue.c's steps, for both drivers (aqueue.c: the event
 * loop's). An offer's txn into j (a new key: q's value at the head, the
 * tail or, delayed_at >= 0, among the delayed values due then; the key
 * `from` deleted in the same txn unless NULL): 0, or a negative code
 * recorded (j then freed by the caller); its answer r (put here): 1 done
 * (q->n), 0 the key was taken (*tries counts them: another key), or a
 * negative code recorded (DLOCK_EWRONGTYPE). */
int dl_etcd_q_offer_req(dl_etcd *e, const qnames *n, const dl_queue_req *q,
                        bool head, long long delayed_at, const char *from,
                        etcd_json *j);
int dl_etcd_q_offer_answer(dl_etcd *e, const dl_sync_ref *s, dl_queue_req *q,
                           long long delayed_at, json_object *r, int *tries);
/* A take's candidate: the value at the head (or the tail) when looked. */
typedef struct qcand {
  char key[ETCD_KEY_MAX];
  int64_t mod; /* its mod revision */
  char *v;     /* its value (malloc'ed, a NUL after len bytes) */
  size_t len;
  int64_t rev; /* the revision read */
} qcand;
/* A take's look (last: the tail's, else the head's) into j; its answer r
 * (put here): 1 a candidate in c (free c->v), 0 none (c->rev), or a
 * negative code recorded. Then its take: the txn deleting c's key at its
 * mod revision (and putting its value at dest, unless NULL), into j;
 * taken when the txn succeeded, else another took it: look again. */
void dl_etcd_q_look_req(const qnames *n, bool last, etcd_json *j);
int dl_etcd_q_look_answer(dl_etcd *e, const dl_sync_ref *s, const qnames *n,
                          bool last, json_object *r, qcand *c);
void dl_etcd_q_take_req(const qnames *n, const qcand *c, const char *dest,
                        etcd_json *j);
/* The count of the queue's values (or its delayed ones) into j; its
 * answer r (put here): 0 (*out), or a negative code recorded. */
void dl_etcd_q_count_req(const qnames *n, bool delayed, etcd_json *j);
int dl_etcd_q_count_answer(dl_etcd *e, const dl_sync_ref *s, bool delayed,
                           json_object *r, long long *out);
/* reliable.c: DL_QUEUE_POLL_RELIABLE and DL_QUEUE_ACK. */
int dl_etcd_q_reliable(dl_etcd *e, const dl_sync_ref *s, const qnames *n,
                       dl_queue_req *q);
/* Its halves, for both drivers. q's consumer id and lease: 0, or
 * DLOCK_EINVAL recorded. */
int dl_etcd_q_reliable_check(dl_etcd *e, const dl_queue_req *q);
/* The consumer's lease: whether it is surely valid; else, one granted,
 * the txn putting its key on it into j, then kept in the client's list
 * (sent: when the grant went): 0 and *revoke (the lease it had, to
 * revoke now; 0 none), or DLOCK_ENOMEM recorded (*revoke: the new one). */
bool dl_etcd_q_consumer_valid(dl_etcd *e, const dl_sync_ref *s,
                              const dl_queue_req *q);
void dl_etcd_q_consumer_put_req(const qnames *n, const dl_queue_req *q,
                                int64_t lease, etcd_json *j);
int dl_etcd_q_consumer_keep(dl_etcd *e, const dl_sync_ref *s,
                            const dl_queue_req *q, int64_t lease, int64_t sent,
                            int64_t *revoke);
/* The give-back of the values taken by consumers whose key is gone: the
 * read of the keys into j; its answer r (kept in d until
 * dl_etcd_q_due_end): 0 with those values in d, newest taken first, each
 * moved by dl_etcd_q_due_move_req to the head; or a negative code
 * recorded (DLOCK_EWRONGTYPE: nothing to move). own: the consumer's id. */
void dl_etcd_q_taken_req(const qnames *n, etcd_json *j);
int dl_etcd_q_taken_answer(dl_etcd *e, const dl_sync_ref *s, const qnames *n,
                           const char *own, json_object *r, qdue *d);
/* The key a reliable take puts its value at (ETCD_Q_DEST_MAX bytes). */
#define ETCD_Q_DEST_MAX (3 * ETCD_KEY_MAX + 64)
void dl_etcd_q_reliable_dest(const qnames *n, const dl_queue_req *q, char *dest,
                             size_t len);
/* The ack: the read of the consumer's taken values into j; its answer r
 * (put here): 1 one holding q's value (c->key, c->mod), 0 none, or a
 * negative code recorded; then the txn deleting it at c->mod into j
 * (gone meanwhile: the txn fails, read again). */
void dl_etcd_q_ack_req(const qnames *n, const dl_queue_req *q, etcd_json *j);
int dl_etcd_q_ack_answer(dl_etcd *e, const dl_queue_req *q, json_object *r,
                         qcand *c);
void dl_etcd_q_ack_del_req(const qcand *c, etcd_json *j);

#endif
