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
/* Moves kv, the value at the key `from` (not Q's), into the queue: to
 * its head (head) or tail, in one txn compared on from's mod revision
 * and on nothing foreign there: 1 moved, 0 moved by another (or the new
 * key was taken), or a negative code; *rev (unless NULL) raised to the
 * txn's revision. */
int dl_etcd_q_move(dl_etcd *e, const qnames *n, json_object *kv,
                   const char *from, bool head, int64_t *rev);
/* A poll (q->op DL_QUEUE_POLL or _LAST; DL_QUEUE_POLL_RELIABLE takes
 * the head): takes, also putting the value at dest in the same txn when
 * dest is not NULL, waiting (a watch on Q/) until q->deadline when
 * q->wait; a delayed handle's moves what is due first, and its wait ends
 * when the next delayed value is due. 1 (q->got), 0, or a negative code. */
int dl_etcd_q_poll(dl_etcd *e, const dl_sync_ref *s, const qnames *n,
                   dl_queue_req *q, const char *dest);
/* reliable.c: DL_QUEUE_POLL_RELIABLE and DL_QUEUE_ACK. */
int dl_etcd_q_reliable(dl_etcd *e, const dl_sync_ref *s, const qnames *n,
                       dl_queue_req *q);

#endif
