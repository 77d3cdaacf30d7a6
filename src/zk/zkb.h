/* zkb.h: what the ZooKeeper backend's files share (the session, its holds
 * and the wake-up of waiters). Only src/zk includes ZooKeeper's header. */
#ifndef DLOCK_ZKB_H
#define DLOCK_ZKB_H

#include <pthread.h>
#include <stdatomic.h>
#include <zookeeper/zookeeper.h>

#include "../core/blockloop.h"
#include "zk.h"

/* One node this client holds: the lock's path, the owner that holds it and
 * the node's full path. Re-entries take no second node, and are counted by
 * the client alone (dl_backend_env.hold_count). */
typedef struct zk_hold {
  struct zk_hold *next;
  char *key;
  char *owner;
  char *node; /* key + "/_c_<uuid>-lock-NNNNNNNNNN" */
  uint64_t czxid;
  /* z->mu: when its node's watch is due (it is on z->due), 0 once sent
   * or gone from the queue */
  int64_t watch_at;
  struct zk_hold *due_next;
} zk_hold;

/* A node of ours we could not delete, or a create whose outcome we could
 * not learn (connection loss to the end of the call): deleted later, by
 * its protected prefix, as Curator's guaranteed delete does. Until then
 * it would hold its place in the line for as long as our session lives. */
typedef struct zk_orphan {
  struct zk_orphan *next;
  char *parent;
  char *prefix; /* "_c_<uuid>-", or a node's whole name */
} zk_orphan;

typedef struct dl_zk {
  dl_backend base;
  const dl_backend_env *env;
  /* The session's handle: replaced by a new one when the session expires
   * (read by every thread, written by the watcher). */
  _Atomic(zhandle_t *) zh;
  zhandle_t *retired; /* the handle before, closed at the next expiry */
  char *connect;      /* the connect string (HOST:PORT,.../CHROOT) */
  char *chroot;       /* the URL's chroot, or NULL */
  char *auth;         /* "user:password" for digest authentication, or NULL */
  /* The ACLs of the nodes dlock makes: `acl` on a lock's (or election's,
   * semaphore's) own nodes, `parent_acl` on the containers above them.
   * Without authentication both are ZooKeeper's open ACL; with it, the
   * creator's identity alone may do anything with its nodes (the URL's
   * acl=read: and everyone may read them; acl=open: as without), and
   * everyone may read and create under the parents (other services put
   * their locks beside ours). */
  struct ACL_vector *acl, *parent_acl;
  struct ACL parent_acls[2], read_acls[2];
  struct ACL_vector parent_acl_v, read_acl_v;
  int session_timeout_ms; /* asked for; the server's answer: zoo_recv_timeout */
  int command_timeout_ms;
  /* mu guards everything below; cv is broadcast on every watch event and
   * session change (the waiters look again). */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t events; /* bumped by every watch event */
  int state;       /* the last session state (ZOO_*_STATE) */
  bool expired;    /* the session ended: its holds are gone (until the
                      next session is connected) */
  uint64_t sessions; /* sessions that expired: each one's holds are lost */
  zk_hold *holds;
  /* The holds whose watch is not sent yet, oldest first (holds.c: a
   * hold's watch is due HOLD_WATCH_DELAY_MS after it is taken, so that a
   * hold released sooner sends none), and the thread that sends them,
   * started with the first hold, stopped by zk_free (due_stop). */
  zk_hold *due, **due_tail;
  pthread_cond_t due_cv;
  pthread_t due_thread;
  bool due_started, due_stop;
  zk_orphan *orphans;
  int participants; /* election threads running (latch.c): the backend is
                       freed only once they have all ended */
  /* An event-loop client's: the seam's event-loop form (blockloop.h),
   * its operations each on a thread of their own. */
  dl_blockloop *form;
  dl_notice_fn notice;
  void *notice_ud;
  void (*state_fn)(void *ud, int state); /* watch_state's */
  void *state_ud;
  bool suspended; /* connected once, then lost the connection */
  /* The close (zk_free): the library's callbacks running in z now
   * (dl_zk_enter), whether zookeeper_close has returned, and whether
   * zk_free returned before it did (the closing thread then frees z;
   * the callbacks do nothing any more). */
  int callers;
  bool closed, abandoned;
  zhandle_t *closing;
  int64_t unanswered_at; /* when a bounded wait last went unanswered */
  atomic_llong round_trips;
} dl_zk;

/* ZooKeeper's result code as dlock's, with a message naming `what`
 * recorded for the client: a negative code. */
int dl_zk_err(dl_zk *z, int zrc, const char *what, const char *path);
/* A callback of the C client (a watch, a completion) that touches more
 * than z itself (the client's loss notice, its loop, its state callback)
 * runs between dl_zk_enter, false once the client is gone (do nothing),
 * and dl_zk_leave. */
bool dl_zk_enter(dl_zk *z);
void dl_zk_leave(dl_zk *z);
/* The watcher of every watch the backend sets (ctx: the dl_zk). */
void dl_zk_watcher(zhandle_t *zh, int type, int state, const char *path,
                   void *ctx);
/* The time a hold confirmed by a request sent at `sent` stays valid: the
 * server cannot expire the session before the negotiated timeout has passed
 * since it last heard from us, which was no earlier than `sent`. */
int64_t dl_zk_valid_until(dl_zk *z, int64_t sent);

/* The mutex (mutex.c), Curator's InterProcessMutex. */
int dl_zk_lock_acquire(dl_backend *b, dl_acquire *a);
int dl_zk_lock_release(dl_backend *b, const dl_lock_ref *l, int64_t lease_ms,
                       int count);
int dl_zk_lock_force_release(dl_backend *b, const dl_lock_ref *l);
int dl_zk_lock_query(dl_backend *b, const dl_lock_ref *l, dl_lock_query q,
                     long long *v);
int dl_zk_renew(dl_backend *b, int64_t deadline, int64_t lease_ms, int n,
                dl_renew_item *items, int *calls);
/* Records a hold of (key, owner) on `node`: 0 or DLOCK_ENOMEM. */
int dl_zk_hold_add(dl_zk *z, const char *key, const char *owner,
                   const char *node, uint64_t czxid);
/* A watch event (ZOO_*_EVENT) on `path`: when it is a held node, its
 * deletion is a loss told at once to the watchdog (the loss notice with
 * the hold's key), its change re-arms the watch. Any thread, no sync call
 * (ZooKeeper's completion thread calls it). */
void dl_zk_hold_event(dl_zk *z, int type, const char *path);
/* The node of this session's hold of (key, owner) into node (len bytes):
 * true, or false when there is none. */
bool dl_zk_hold_node(dl_zk *z, const char *key, const char *owner, char *node,
                     size_t len);
/* fence.c: fenced resources (the seam's fence). */
int dl_zk_fence(dl_backend *b, dl_fence_req *f);
/* Forgets the hold of (key, owner), if any. */
void dl_zk_hold_drop(dl_zk *z, const char *key, const char *owner);
/* The semaphore (semaphore.c): Curator's InterProcessSemaphoreV2 as the
 * permit-expirable semaphore. */
int dl_zk_permit_acquire(dl_backend *b, const dl_sync_ref *s, const char *id,
                         int64_t lease_ms, bool wait, int64_t deadline,
                         int64_t *valid_until);
int dl_zk_sync_update(dl_backend *b, const dl_sync_ref *s, dl_sync_op op,
                      long long n, const char *id, long long *v);
/* A semaphore's state at path for dlock status: 1 (its permits free in
 * *counter, the leases out in *taken), 0 no count set there (*counter
 * -1), or a negative code. */
int dl_zk_permits_state(dl_zk *z, const char *path, int64_t *counter,
                        int *taken);
/* What a znode holds, as the recipes see it: nothing there (ZK_NONE),
 * an empty node (ZK_EMPTY), lock or election nodes (ZK_LOCKS: a mutex's,
 * a read-write lock's or a latch's place), a semaphore (a count as data,
 * or its locks/ and leases/), or someone else's (data that is not a
 * count, children no recipe makes). A recipe takes only its own places
 * (and none, or an empty one), and writes nothing into another. */
typedef enum zk_place {
  ZK_NONE,
  ZK_EMPTY,
  ZK_LOCKS,
  ZK_SEMAPHORE,
  ZK_DATA,
  ZK_CHILDREN
} zk_place;
/* The place of a znode with `len` bytes of data (data NULL: not read,
 * never a count) and the children sv (or NULL). */
zk_place dl_zk_place_of(const char *data, int len,
                        const struct String_vector *sv);
/* Its name in messages and dlock status ("znode with data", ...). */
const char *dl_zk_place_name(zk_place p);
/* Reads the place of `path` (its data, and its children when it has none)
 * into *p: 0, or a negative code. */
int dl_zk_read_place(dl_zk *z, const char *path, zk_place *p);
/* Records DLOCK_EWRONGTYPE, "not a <want>: <place> (path; nothing
 * changed)", and returns it. */
int dl_zk_wrong_place(dl_zk *z, zk_place p, const char *path, const char *want);
/* Lock nodes' full paths fit in this many bytes. */
#define NODE_MAX 1024
/* 0 if key is a znode path a lock may have, else DLOCK_EINVAL or
 * DLOCK_ENAMETOOLONG recorded. */
int dl_zk_check_path(dl_zk *z, const char *key);
/* The recipe nodes among sv's children (mutex, read-write lock, latch or
 * lease nodes), sorted by their sequence as Curator sorts them (pointers
 * into sv, *out freed by the caller): how many, or -1 out of memory. */
int dl_zk_sorted_locks(struct String_vector *sv, char ***out);
/* Lists key's children (one round trip) and sorts its recipe nodes
 * (dl_zk_sorted_locks) into *v, pointers into *sv: how many, 0 also when
 * key does not exist (*none set true, if none is not NULL), or a DLOCK_E*
 * code recorded. When it returns more than 0 the caller frees both with
 * dl_zk_locks_free; else nothing is left to free. */
int dl_zk_list_locks(dl_zk *z, const char *key, struct String_vector *sv,
                     char ***v, bool *none);
/* Frees what dl_zk_list_locks left (safe on what it already freed). */
void dl_zk_locks_free(struct String_vector *sv, char ***v);
/* A recipe node's sequence (what Curator sorts by), or NULL if `name` is
 * no recipe's node. */
const char *dl_zk_seq_of(const char *name);
/* Whether `name` is a read-write lock's writer node. */
bool dl_zk_is_writer(const char *name);
/* Whether `name` is a leader latch's node ("latch-" and a sequence). */
bool dl_zk_is_latch(const char *name);
/* How many of the n sorted nodes hold the lock now: the first alone, or
 * the readers before the first node of another kind. */
int dl_zk_holders(char **v, int n);
/* Creates key + "/_c_<uuid>-" + mark (with_uuid, or a fresh UUID) as a
 * protected ephemeral-sequential node with `data` (the missing parents as
 * containers). With `listed` non-NULL, key's children are listed in the
 * same round trip (the request right behind the create): when created,
 * listed->data is NULL (no listing) or the caller's to deallocate. Resolving a
 * connection loss through the protected name until the deadline: 0 with
 * the node's path in node (len bytes) and its czxid, or a negative code (no
 * node left behind that we know of). */
int dl_zk_create_protected(dl_zk *z, const char *key, const char *mark,
                           const char *data, const char *with_uuid, char *node,
                           size_t len, uint64_t *czxid, int64_t deadline,
                           struct String_vector *listed);
/* As dl_zk_create_protected with a listing (listed non-NULL), and the
 * listed key's data length in *parent_len when listed (else -1). */
int dl_zk_create_listed(dl_zk *z, const char *key, const char *mark,
                        const char *data, const char *with_uuid, char *node,
                        size_t len, uint64_t *czxid, int64_t deadline,
                        struct String_vector *listed, int *parent_len);
/* Creates path and every missing parent as containers, as Curator's
 * creatingParentContainersIfNeeded: 0 or a negative code. */
int dl_zk_make_parents(dl_zk *z, const char *path);
/* Waits (or not: a->wait) until `node`, a lock node of a->lock->kind under
 * a->lock->key, has its turn: 1 it has, 0 not by a->deadline, or a
 * negative code. The node stays either way. `first`: a listing of the
 * children already made (taken and deallocated), or NULL. */
int dl_zk_await_turn(dl_zk *z, dl_acquire *a, const char *node,
                     struct String_vector *first);
/* Deletes a node, retrying a connection loss until the deadline: 0 deleted
 * (or already gone), or a negative code. */
int dl_zk_delete_node(dl_zk *z, const char *node, int64_t deadline);
/* Deletes a node of ours (within one command timeout); if that fails it is
 * kept as an orphan, deleted by a later dl_zk_clean_orphans. Returns as
 * dl_zk_delete_node. */
int dl_zk_delete_own(dl_zk *z, const char *node);
/* Deletes a node of ours, waiting at most wait_ms for the answer: 0
 * deleted (or gone), else a negative code and the node is kept as an
 * orphan (deleted later, or gone with the session). For a participant
 * leaving while the server may be unreachable: the connection loss would
 * be known only after two thirds of the session timeout. */
int dl_zk_delete_soon(dl_zk *z, const char *node, int wait_ms);
/* Until when (dl_now_ms() time) a create made for a wait (or not: wait)
 * that began at `sent` may go on resolving a connection's loss: one
 * command timeout, or the wait's deadline if later; for a wait without a
 * limit, DL_RIDE_TIMEOUTS command timeouts (an outage that long is
 * reported, as the waits' rides report it). */
int64_t dl_zk_create_limit(const dl_zk *z, int64_t sent, bool wait,
                           int64_t deadline);
/* Sleeps until a watch event or session change after `seen` (z->events
 * read before the watch was set), the deadline, or the operation's cancel:
 * 0 (look again), or DLOCK_ECONNLOST (the session expired while waiting
 * for `what`) / DLOCK_ECLOSED, recorded. */
int dl_zk_await_event(dl_zk *z, uint64_t seen, int64_t deadline,
                      const char *what);
/* Whether a wait (wait: one asked for, until deadline) rides out zrc, a
 * connection's loss (the server restarting, a blip within the session's
 * timeout: our nodes stay), as Curator's retry loop does: 1 after a pause
 * (20 ms, doubling up to 200, the last to the deadline; an event of the
 * session, its reconnection, ends it early): go again; 0 when zrc stands
 * (not a connection's loss, no wait, the deadline come, the operation
 * cancelled; for a wait without a limit, DL_RIDE_TIMEOUTS command
 * timeouts since the first failure after the last answer); or a negative
 * code recorded in its stead, which the wait returns (DLOCK_ECONNLOST:
 * the session expired in the pause; DLOCK_ECLOSED: the client closing).
 * *rides: the ride so far ({0} at the wait's start, dl_ride_answered at
 * each answer). */
int dl_zk_ride_out(dl_zk *z, bool wait, int64_t deadline, int zrc,
                   dl_ride *rides, const char *what);
/* Remembers a node of ours as an orphan (deleted later). */
void dl_zk_orphan_node(dl_zk *z, const char *node);
/* Tries once to delete every orphan; those it cannot are kept. */
void dl_zk_clean_orphans(dl_zk *z);
/* Frees the orphan list (the client closing: its session ends). */
void dl_zk_orphans_free(zk_orphan *o);
/* latch.c: Curator's LeaderLatch (the seam's elect_* entries). */
int dl_zk_elect_join(dl_backend *b, const dl_sync_ref *s, const char *id,
                     dl_elect_fn fn, void *ud, dl_elect **out);
void dl_zk_elect_leave(dl_backend *b, dl_elect *e);
int dl_zk_elect_leader(dl_backend *b, const dl_sync_ref *s, char *buf,
                       size_t len);
/* inspect.c: dlock status and dlock list. */
int dl_zk_inspect(dl_backend *b, const char *key, dlock_lock_state *st);
/* Every holder of the lock at key to cb (a read lock's readers), for
 * detect_deadlocks' walk: 0 or a negative code. */
int dl_zk_lock_holders(dl_backend *b, const char *key, dl_holder_cb cb,
                       void *ud);
/* The nodes in line behind each lock's holders (inspect.c), as the
 * backend's waiters entry: owner and info from the node's data, kind
 * from its mark, no deadline. */
int dl_zk_waiters(dl_backend *b, const char *prefix, dlock_waiter_cb cb,
                  void *ud);
int dl_zk_scan(dl_backend *b, const char *match, size_t prefix_len,
               dlock_scan_cb cb, void *ud);
/* Frees the list of holds. */
void dl_zk_holds_free(zk_hold *h);
/* holds.c: the hold of (key, owner) in z->holds (z->mu held), or NULL. */
zk_hold *dl_zk_hold_find(dl_zk *z, const char *key, const char *owner);
/* Removes the hold of (key, owner) from z->holds (and from the queue of
 * watches to send) and returns it, or NULL; z->mu not held. */
zk_hold *dl_zk_hold_take(dl_zk *z, const char *key, const char *owner);
/* Frees one hold taken off the lists (NULL: nothing). */
void dl_zk_hold_free(zk_hold *h);
/* Stops the thread that sends the holds' watches (zk_free, before the
 * handle is closed; z->mu not held). */
void dl_zk_due_stop(dl_zk *z);

#endif
