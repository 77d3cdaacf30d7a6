/* sem.h: what the etcd backend's semaphores share (sem.c, permits.c): the
 * keys of a name, the count keys, and the acquire that waits in a line;
 * the counting semaphore's steps both its drivers share (sem.c, asem.c),
 * the permit-expirable semaphore's (permits.c, apermits.c); and the
 * latch's (latch.c, alatch.c).
 * The layout is dlock's own (etcd's clients have no semaphore): see
 * docs/WIRE.md's etcd section. */
#ifndef DLOCK_ETCD_SEM_H
#define DLOCK_ETCD_SEM_H

#include "etcdb.h"

/* The bytes a name's longest key takes past its base (PREFIX/NAME/):
 * "waiters/semaphore/" and 32 hex digits, with room to spare. */
#define ETCD_SEM_TAIL 64
/* The buffers of a semaphore's keys (each key fits ETCD_KEY_MAX bytes:
 * dl_etcd_sem_base checks it). */
#define ETCD_SEM_KEY (ETCD_KEY_MAX + ETCD_SEM_TAIL)

/* s's base, the URL's prefix + s->key + "/", into out (ETCD_KEY_MAX
 * bytes): 0, or DLOCK_ENAMETOOLONG recorded when the base and its
 * longest key's tail would not fit an etcd key of ETCD_KEY_MAX bytes. */
int dl_etcd_sem_base(dl_etcd *e, const dl_sync_ref *s, char *out);

/* A count key (a decimal number, no lease): 1 there (*v, *mod its mod
 * revision), 0 none (*v and *mod 0), or a negative code (DLOCK_EWRONGTYPE
 * recorded: a value that is not a number, nothing changed); *rev: the
 * revision of the read. */
int dl_etcd_count_read(dl_etcd *e, const char *key, long long *v, int64_t *mod,
                       int64_t *rev);
/* Its halves: the /v3/kv/txn body (ETCD_SEM_INSPECT_BODY_MAX bytes), and
 * the answer r (put here) read as dl_etcd_count_read. The txn also reads
 * where another kind's keys would be at the name
 * (dl_etcd_sem_foreign_ops): one there is DLOCK_EWRONGTYPE. */
void dl_etcd_count_read_body(const char *key, char *body, size_t len);
int dl_etcd_count_read_answer(dl_etcd *e, const char *key, json_object *r,
                              long long *v, int64_t *mod, int64_t *rev);
/* The txn ops (",{request_range...}" each, into out) reading the first
 * key, if any, of each range under the name of the count key `key` where
 * a semaphore puts nothing and a lock, a read-write lock or a queue does;
 * the bytes written. */
size_t dl_etcd_sem_foreign_ops(const char *key, char *out, size_t len);
/* Their answers, responses first.. of the txn answer r (not freed): 0
 * none there, or DLOCK_EWRONGTYPE recorded. */
int dl_etcd_sem_foreign_check(dl_etcd *e, const char *key, json_object *r,
                              int first);
/* The number of a count key's kv (kv NULL: 0 with *v 0), as
 * dl_etcd_count_read. */
int dl_etcd_count_of(dl_etcd *e, json_object *kv, const char *key,
                     long long *v);
/* The txn putting v at the count key if its mod revision is still mod
 * (0: if it is not there): its body (ETCD_COUNT_PUT_BODY_MAX bytes). Its
 * answer's succeeded: put, else another writer came first. */
#define ETCD_COUNT_PUT_BODY_MAX (2 * (4 * ((ETCD_SEM_KEY + 2) / 3) + 1) + 256)
void dl_etcd_count_put_body(const char *key, int64_t mod, long long v,
                            char *body, size_t len);
/* A change's step after the count key's read (there: it is; cur its
 * count): 0 done (*out the result), 1 the put of *next compared on the
 * read next (*out the result once it is put), or a negative code
 * (DLOCK_ERANGE recorded, nothing changed). */
int dl_etcd_count_next(dl_etcd *e, const char *key, dl_sync_op op, long long n,
                       bool there, long long cur, long long *next,
                       long long *out);
/* A change's puts beaten by other writers this many times: given up,
 * with dl_etcd_count_busy's DLOCK_EBUSY (recorded). */
#define ETCD_COUNT_TRIES 100
int dl_etcd_count_busy(dl_etcd *e, const char *key);
/* Changes the count key `key` by op, in a txn on its mod revision (read
 * again and retried when another writer came first; never after an
 * answer that did not come): DL_SEM_SET (n if none: *out 1, else 0),
 * DL_SEM_ADD and DL_SEM_RELEASE (n added, the sum an int or DLOCK_ERANGE:
 * *out 0), DL_SEM_DRAIN (to 0 if there: *out what it was). 0, or a
 * negative code (nothing changed). */
int dl_etcd_count_change(dl_etcd *e, const char *key, dl_sync_op op,
                         long long n, long long *out);

/* One try of an acquire: 1 taken, 0 not now (*at: the revision it read
 * at, after which every change is heard), or a negative code. */
typedef int (*dl_etcd_try_fn)(dl_etcd *e, void *ctx, int64_t *at);
/* Tries, and with `wait` waits until `deadline` for the next try: in a
 * line of waiters (line_key, on the session's lease, ordered by create
 * revision), each watching the place before its own until it goes, the
 * first watching the keys under data_pfx for any change after the
 * revision of a try made once it is first (a watch etcd has synced at
 * once): a change wakes one waiter, not a herd. 1 taken, 0 not by the
 * deadline (or cancelled), or a negative code; the place in the line
 * goes, whatever the result. *waited: it waited. */
int dl_etcd_sem_wait(dl_etcd *e, const char *line_key, const char *data_pfx,
                     dl_etcd_try_fn try_fn, void *ctx, bool wait,
                     int64_t deadline, bool *waited);

/* The line's halves both drivers share: the place taken found on a lease
 * not ours (DLOCK_EWRONGTYPE recorded, key: the place's); and how long a
 * waiter watches before it looks again, its place's lease (the
 * session's) kept alive then: a third of the session's TTL, 200 ms at
 * least. */
int dl_etcd_sem_not_ours(dl_etcd *e, const char *key);
int64_t dl_etcd_sem_step(dl_etcd *e);

/* The counting semaphore's checks before anything is sent, for an
 * acquire (n permits) or an update op: its count key into key
 * (ETCD_SEM_KEY bytes); 0, or DLOCK_ENAMETOOLONG or DLOCK_EINVAL
 * recorded. */
int dl_etcd_sem_check(dl_etcd *e, const dl_sync_ref *s, bool acquire,
                      dl_sync_op op, long long n, char *key);
/* A waiting acquire's place in the line of the count key `key`: a key of
 * its own, PREFIX/NAME/waiters/semaphore/ and 32 random hex digits, into
 * line (ETCD_SEM_KEY bytes); 0, or DLOCK_ENOMEM recorded. */
int dl_etcd_sem_line_key(dl_etcd *e, const char *key, char *line);
/* An acquire's try after the count v was read: true with *to the count
 * to put (compared on the read) when n permits are there, else false
 * (not taken). */
bool dl_etcd_sem_take_to(long long v, long long n, long long *to);

/* sem.c: the seam's entries: the counting semaphore's acquire, and every
 * update of either semaphore (sync_update's DL_SEM_* and DL_PERMITS_*;
 * DLOCK_ENOTSUP for the others: a sync_update that has the latch's too
 * passes these ops on to it). */
int dl_etcd_sem_acquire(dl_backend *b, const dl_sync_ref *s, int permits,
                        bool wait, int64_t deadline);
int dl_etcd_sem_update(dl_backend *b, const dl_sync_ref *s, dl_sync_op op,
                       long long n, const char *id, long long *v);

/* permits.c: the permit-expirable semaphore's acquire, its steps for both
 * drivers (the event loop's: apermits.c). Its state. */
typedef struct etcd_permit_try {
  char total[ETCD_SEM_KEY]; /* PREFIX/NAME/permits */
  char key[ETCD_SEM_KEY];   /* the permit's */
  char line[ETCD_SEM_KEY];  /* its place in the line of waiters */
  char owner[DL_OWNER_MAX]; /* the hold's: the client's id and the id */
  const char *value;        /* the key's: the client's id */
  int64_t lease_ms;
  bool own;         /* a lease of its own (a fixed lease) */
  int64_t lease;    /* the lease the key goes on (0: none yet) */
  int64_t lease_at; /* when it was last granted or kept alive */
  int64_t until;    /* surely valid until then */
  int64_t rev;      /* taken: the key's create revision */
  bool unsure;      /* a put whose answer did not come */
  enum {
    ETCD_PERMIT_KEPT,   /* nothing to undo */
    ETCD_PERMIT_REVOKE, /* its own lease to revoke (the key with it) */
    ETCD_PERMIT_DELETE  /* its key to delete */
  } left;               /* dl_etcd_permit_end's verdict */
} etcd_permit_try;
/* t for the acquire of permit id of s (lease_ms: the permit's): 0, or
 * DLOCK_ENAMETOOLONG or DLOCK_EINVAL recorded. */
int dl_etcd_permit_init(dl_etcd *e, const dl_sync_ref *s, const char *id,
                        int64_t lease_ms, etcd_permit_try *t);
/* The permits' read (the total and the keys under it): its txn's body
 * (ETCD_SEM_INSPECT_BODY_MAX bytes), and its answer r (put here): 1 set
 * (*max, *mod: the total's mod revision), 0 no total set, or a negative
 * code (DLOCK_EWRONGTYPE recorded); *taken the permit keys, *rev the
 * revision read at. */
void dl_etcd_permits_read_body(const char *total, char *body, size_t len);
int dl_etcd_permits_read_answer(dl_etcd *e, const char *total, json_object *r,
                                long long *max, int64_t *mod, long long *taken,
                                int64_t *rev);
/* The txn putting t's key on t->lease if the total's mod revision is still
 * mod and no permit key was written after revision at (malloc'ed, NULL
 * out of memory); its answer r (put here): whether it was put (t->rev). */
char *dl_etcd_permit_put_body(const etcd_permit_try *t, int64_t mod,
                              int64_t at);
bool dl_etcd_permit_put_answer(etcd_permit_try *t, json_object *r);
/* The acquire's end (rc: the wait's, 1 taken): 1 with the permit held by
 * the client (its key watched; *valid_until), or rc (0, a negative code),
 * t->left what is left to undo on the server; a fixed lease with nothing
 * on it kept idle. */
int dl_etcd_permit_end(dl_etcd *e, const dl_sync_ref *s, etcd_permit_try *t,
                       int rc, int64_t *valid_until);
/* A permit key's delete whatever its revision: the /v3/kv/deleterange
 * body (ETCD_PERMIT_DELETE_BODY_MAX bytes), and its answer r (put
 * here): 1 deleted, 0 it was not there. */
#define ETCD_PERMIT_DELETE_BODY_MAX (4 * ((ETCD_SEM_KEY + 2) / 3) + 40)
void dl_etcd_permit_delete_body(const char *key, char *body, size_t len);
int dl_etcd_permit_delete_answer(json_object *r);

/* An update's (DL_PERMITS_*) checks before anything is sent, and its
 * keys into t (total; a release's key and owner): 0, or a negative code
 * recorded (DLOCK_EINVAL, DLOCK_ENAMETOOLONG). */
int dl_etcd_permits_check(dl_etcd *e, const dl_sync_ref *s, dl_sync_op op,
                          long long n, const char *id, etcd_permit_try *t);
/* A release's halves: the client's hold of the permit (owner: its
 * owner), off the client's list (NULL: none), and after the delete (rc:
 * its result, retried: sent again) its end: a lease of its own kept idle
 * or to revoke (returned, 0 none), h dropped. */
etcd_hold *dl_etcd_permit_unhold(dl_etcd *e, const dl_sync_ref *s,
                                 const char *owner);
int64_t dl_etcd_permit_released(dl_etcd *e, etcd_hold *h, int rc, bool retried,
                                bool force);

/* permits.c: the permit-expirable semaphore's entries. */
int dl_etcd_permit_acquire(dl_backend *b, const dl_sync_ref *s, const char *id,
                           int64_t lease_ms, bool wait, int64_t deadline,
                           int64_t *valid_until);
/* The permit-expirable semaphore's updates (sync_update's DL_PERMITS_*). */
int dl_etcd_permits_update(dl_etcd *e, const dl_sync_ref *s, dl_sync_op op,
                           long long n, const char *id, long long *v);
/* For a snapshot of the name at key (dlock status): st->counter, the
 * permits available (the permit-expirable semaphore's, else the counting
 * semaphore's; left -1 when neither is set, or is someone else's), and
 * st->permits_taken. 0, or a negative code (an answer that did not come). */
int dl_etcd_sem_inspect(dl_etcd *e, const char *key, dlock_lock_state *st);
/* Its halves, step 0 (the permits' total and keys) and 1 (the counting
 * semaphore's count): the step's key into total (ETCD_SEM_KEY bytes), its
 * request's body (ETCD_SEM_INSPECT_BODY_MAX bytes) and path, NULL when
 * key is no semaphore's name (nothing to ask); then the answer r (put
 * here) into st: 1 step 1 to ask next, 0 done, or a negative code. */
#define ETCD_SEM_INSPECT_BODY_MAX (9 * (4 * ((ETCD_SEM_KEY + 2) / 3) + 1) + 600)
const char *dl_etcd_sem_inspect_req(dl_etcd *e, const char *key, int step,
                                    char *total, char *body, size_t len);
int dl_etcd_sem_inspect_answer(dl_etcd *e, const char *total, int step,
                               json_object *r, dlock_lock_state *st);
/* latch.c: the latch's steps, for both drivers (the event loop's:
 * alatch.c). The latch's key and the range of the keys under it. */
typedef struct etcd_latch_names {
  char key[ETCD_KEY_MAX], sub[ETCD_KEY_MAX + 2], end[ETCD_KEY_MAX + 2];
} etcd_latch_names;
void dl_etcd_latch_names(dl_etcd *e, const dl_sync_ref *s, etcd_latch_names *n);
/* What a look found. */
typedef struct etcd_latch_look {
  bool there;      /* a count runs */
  long long count; /* its value */
  int64_t mod, create;
  int64_t rev; /* the answer's revision */
} etcd_latch_look;
/* The look: one txn reading the key and whether anything is under it,
 * into j; its answer r (put here): 0 with *lk, DLOCK_EWRONGTYPE recorded
 * (something else is there), or a negative code. */
void dl_etcd_latch_look_req(const etcd_latch_names *n, etcd_json *j);
int dl_etcd_latch_look_answer(dl_etcd *e, const dl_sync_ref *s, json_object *r,
                              etcd_latch_look *lk);
/* The write compared on what lk saw (the key absent, or at its mod
 * revision) and on nothing under the key, into j: a put of count (> 0),
 * or the key's delete (count 0). Its answer's succeeded: done, else the
 * latch changed meanwhile (look again). */
void dl_etcd_latch_write_req(const etcd_latch_names *n,
                             const etcd_latch_look *lk, long long count,
                             etcd_json *j);
/* An update's (DL_LATCH_*) check before anything is sent: 0, or
 * DLOCK_EINVAL recorded. */
int dl_etcd_latch_check(dl_etcd *e, dl_sync_op op, long long n);
/* An update's step after the look lk: 0 done (*v its result), or 1 the
 * write of *to compared on lk next (*v the result if it succeeds). */
int dl_etcd_latch_next(dl_sync_op op, long long n, const etcd_latch_look *lk,
                       long long *v, long long *to);
/* An await's verdict on the look lk: false zero reached (or the count
 * waited for, *first's create revision, ended and another began), true a
 * count runs (*first: it). */
bool dl_etcd_latch_open(const etcd_latch_look *lk, int64_t *first);

/* latch.c: nothing under the name: the key at the name itself, a latch's
 * count (st->counter, type "latch") or another value (type "data"); st
 * unchanged when there is no key. 0 or a negative code recorded. */
int dl_etcd_latch_inspect(dl_etcd *e, const char *key, dlock_lock_state *st);
/* Its halves: the txn reading the key at the name into j (false: no such
 * key can be there, nothing to ask), and its answer r (put here) into
 * st. */
bool dl_etcd_latch_inspect_req(dl_etcd *e, const char *key, etcd_json *j);
int dl_etcd_latch_inspect_answer(dl_etcd *e, json_object *r,
                                 dlock_lock_state *st);

#endif
