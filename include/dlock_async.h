/* dlock_async.h: the event loop that libdlock's asynchronous operations run
 * on: a small table of hooks into the caller's loop (libuv, libevent, ...:
 * see the header-only adapters dlock_uv.h and dlock_event.h), or a built-in
 * driver for poll/epoll users.
 *
 * Threads: a dlock_loop has no thread of its own and no lock. Every call on
 * a loop, and every call on an object that runs on it, is made from one
 * thread at a time, the loop's (the thread that runs the caller's event
 * loop); every callback the library makes runs on that thread, from inside
 * dlock_loop_on_io, dlock_loop_on_timer or dlock_loop_run, never from inside
 * the call that started the operation. */
#ifndef DLOCK_ASYNC_H
#define DLOCK_ASYNC_H

#include "dlock.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Readiness, as bits: what a watch asks for and what the loop reports. */
#define DLOCK_EV_READ 1
#define DLOCK_EV_WRITE 2

typedef struct dlock_loop dlock_loop;

/* How the library drives the caller's event loop. The hooks are called on
 * the loop's thread, from inside the library's calls (never after
 * dlock_loop_free returns). The table grows as the options do (dlock.h):
 * it begins with its size, the sizeof the caller was compiled with
 * (`dlock_loop_hooks h = {sizeof h, data, watch, timer, cleanup};`); hooks
 * added later are appended, and a NULL one means the library does without
 * it. */
typedef struct dlock_loop_hooks {
  size_t size; /* sizeof(dlock_loop_hooks), as the caller was compiled */
  void *data; /* passed to every hook */
  /* Watch fd for `events` (DLOCK_EV_* bits), replacing what it watched for
   * before; 0: stop watching (the fd may be closed right after the call).
   * *slot is the adapter's storage for this fd: NULL at the first call;
   * the library keeps what the adapter stores there and passes it back
   * until the call with events 0, after which the adapter must have
   * released it (and stored NULL). Returns 0, or -1 if it cannot: the
   * adapter then watches fd no more and has released *slot (NULL), and
   * the library fails what used the fd. While fd is watched and ready
   * for some of `events`, the adapter calls dlock_loop_on_io(lp, fd,
   * ready): level-triggered, again in each round of the caller's loop
   * while it stays ready (the library stops reading a socket at a short
   * read). */
  int (*watch)(void *data, int fd, int events, void **slot);
  /* Arms the loop's one timer to fire `ms` milliseconds from now (0: as
   * soon as possible), replacing any earlier arming; ms < 0 disarms it.
   * When it fires the adapter calls dlock_loop_on_timer(lp) (once: the
   * timer does not repeat). The library may leave an arming standing
   * that is earlier than it needs (its firing then finds nothing due and
   * arms again), rather than re-arming each time a timer stops. */
  void (*timer)(void *data, int64_t ms);
  /* The library is done with the hooks (from dlock_loop_free): release the
   * adapter's state. May be NULL. */
  void (*cleanup)(void *data);
} dlock_loop_hooks;

/* The size of the first table with a size field (0.3): up to cleanup. */
#define DLOCK_LOOP_HOOKS_SIZE_0                                                \
  (offsetof(dlock_loop_hooks, cleanup) + sizeof(void (*)(void *)))

/* Creates a loop driven by `hooks` (copied), or by the built-in driver when
 * hooks is NULL (Linux: an epoll fd and a timerfd; elsewhere
 * DLOCK_ENOTSUP). Returns 0 and *out (free with dlock_loop_free), or
 * DLOCK_ENOMEM / DLOCK_ENOTSUP / DLOCK_EINVAL (a hooks table without watch
 * or timer, a size below DLOCK_LOOP_HOOKS_SIZE_0 (never set), or a larger
 * table, from a newer dlock_async.h, with a hook this library does not
 * know); on error *out is NULL and cleanup is not called. */
DLOCK_API int dlock_loop_new(const dlock_loop_hooks *hooks, dlock_loop **out);
/* For adapters: fd is ready for `events` (DLOCK_EV_* bits; an error or
 * hang-up is reported as DLOCK_EV_READ). A call for an fd the library does
 * not watch (any more) is ignored; a spurious one is harmless. Runs the
 * callbacks of whatever waited on fd. */
DLOCK_API void dlock_loop_on_io(dlock_loop *lp, int fd, int events);
/* For adapters: the timer armed by the timer hook fired. Runs every
 * callback that is due, then arms the timer again for the next one. */
DLOCK_API void dlock_loop_on_timer(dlock_loop *lp);

/* ---- the built-in driver (dlock_loop_new(NULL, ...)) ----
 * To nest it in a poll/epoll/select loop: watch dlock_loop_fd for reading,
 * sleep at most dlock_loop_timeout_ms, then call dlock_loop_run(lp, 0). */
/* The fd that is readable when there is work (an epoll fd), or -1 for a
 * loop with hooks. Owned by the loop. */
DLOCK_API int dlock_loop_fd(dlock_loop *lp);
/* How long the caller may sleep before calling dlock_loop_run: ms until the
 * next timer, 0 if one is due, -1 if none is armed. */
DLOCK_API int64_t dlock_loop_timeout_ms(dlock_loop *lp);
/* Waits up to max_ms (0: not at all; < 0: until something happens) for
 * ready fds and due timers and runs their callbacks. Returns how many fd
 * events and timer firings it handled (0: none), or DLOCK_EINVAL for a loop
 * with hooks, or DLOCK_ECONNLOST if the epoll wait failed. */
DLOCK_API int dlock_loop_run(dlock_loop *lp, int64_t max_ms);

/* Frees the loop. Everything that runs on it must be freed first. Calls
 * the hooks' cleanup. Accepts NULL. */
DLOCK_API void dlock_loop_free(dlock_loop *lp);

/* ---- an event-loop client ---- */
/* Opens a client whose operations run on lp (dlock_client_open's options
 * and results; it connects at once, without waiting for the handshake, so
 * a wrong password shows at the first operation). It has no thread of its
 * own: requests, waits, the watchdog's renewals and loss reports run on
 * lp's thread. A host name in the URL is resolved with getaddrinfo on
 * lp's thread at each connect, which blocks while DNS answers: give an IP
 * address (or a name in /etc/hosts) where the loop must never block. On a
 * redis-sentinel:// URL each connect also asks the sentinels (blocking, at
 * most the connect timeout), and the client has one thread of the
 * library's own, which listens for failovers on a sentinel and only sets a
 * counter the loop's thread reads. Its blocking calls (dlock_lock_acquire, ...) return
 * DLOCK_EINVAL; use the *_async ones below. Close it with
 * dlock_client_close on lp's thread, before dlock_loop_free: every
 * operation still pending then completes with DLOCK_ECLOSED (its callback
 * runs within the close), but an etcd:// queue poll cancelled after its
 * take, whose value cannot go back: it completes with the value (rc 0)
 * rather than drop it (docs/API.md, etcd's event-loop client). */
DLOCK_API int dlock_client_open_async(const dlock_client_options *opts,
                                      dlock_loop *lp, dlock_client **out);

/* An operation in flight. */
typedef struct dlock_op dlock_op;
/* An operation's end, on the loop's thread, exactly once: rc is what the
 * blocking call returns (0 acquired, DLOCK_EBUSY, ...; a lock release's 1
 * or 0; a count; each form below says), token the fencing token of an
 * acquired lock (else 0), errmsg the detail ("" if none; valid during the
 * call), ud the caller's. */
typedef void (*dlock_done_cb)(int rc, uint64_t token, const char *errmsg,
                              void *ud);
/* The asynchronous forms. Each returns 0 and (if op is not NULL) the
 * operation, valid until its callback returns; or a negative code, and
 * the callback is never called. A callback never runs within the call
 * that started its operation. A handle freed while its operations run is
 * freed after the last of them completes. The free cancels those that
 * wait through it (an acquire, a multi-lock's, a semaphore's, a permit's,
 * a latch's await, a queue's poll), as dlock_op_cancel does: the wait
 * ends, what it placed on the server goes (a zk:// waiter's node, a fair
 * lock's place in its queue), a grant that comes anyway is given back,
 * and its callback still runs once, later, from the loop, with
 * DLOCK_ECANCELED (DLOCK_ECLOSED if the client is closed before the loop
 * hears it), as libuv's uv_close and hiredis' redisAsyncFree call the
 * callbacks of requests still pending: keep `ud` alive until then. The
 * other operations (releases, counts, queries) complete as usual. The
 * owner of a lock handle made with owner NULL is the handle itself on an
 * event-loop client (one handle: one owner), not the calling thread. */
DLOCK_API int dlock_lock_acquire_async(dlock_lock *l, int64_t wait_ms,
                                       int64_t lease_ms, dlock_done_cb cb,
                                       void *ud, dlock_op **op);
DLOCK_API int dlock_lock_release_async(dlock_lock *l, dlock_done_cb cb,
                                       void *ud, dlock_op **op);
/* Makes op give up: its wait ends now, as if wait_ms had run out; it then
 * completes with DLOCK_ECANCELED (or its error, if a request already sent
 * fails: what it acquired as it is cancelled, a lock, permits, a permit,
 * is released again and reported DLOCK_ECANCELED). An operation that does
 * not wait (a release, a count, a set) is not cancelled: it completes as
 * usual. Accepts NULL; not from inside op's own callback. */
DLOCK_API void dlock_op_cancel(dlock_op *op);

/* ---- the other kinds, on the loop ----
 * Every call below has the contract above: 0 and *op, then cb once from
 * the loop with rc what the blocking call of the same name returns; or a
 * negative code and cb never called. The handles (and the multi-lock's
 * locks) may be freed while their operations run: they are freed after
 * the last one completes, and their waits are cancelled (as above: the
 * callback comes with DLOCK_ECANCELED). token is 0. Calls that wait take
 * wait_ms as their blocking *_try_* twin (0: one try, < 0: no limit) and
 * complete with DLOCK_EBUSY when it runs out; dlock_op_cancel ends their
 * wait. */

/* Read-write locks: dlock_rwlock_read / dlock_rwlock_write lend lock
 * handles, so the lock calls above apply. On an event-loop client a
 * read-write lock made with owner NULL has one owner for both sides (the
 * lock: a writer may take the read side too, as in Redisson). */

/* Multi-lock: every lock, in the canonical order, each acquire started
 * once the previous one is done; wait_ms bounds the whole. tokens (may be
 * NULL; n entries, tokens[i] for locks[i]) must stay valid until cb runs,
 * which fills it in first. rc 0, or the first failure (DLOCK_EBUSY,
 * DLOCK_ECANCELED, ...) after the locks already taken are released,
 * newest first. The locks must be on event-loop clients. */
DLOCK_API int dlock_multilock_acquire_async(dlock_multilock *m,
                                            int64_t wait_ms, int64_t lease_ms,
                                            uint64_t *tokens,
                                            dlock_done_cb cb, void *ud,
                                            dlock_op **op);
/* Releases every lock, newest first, one after the other: rc 0 or the
 * first error met (the others are still released). */
DLOCK_API int dlock_multilock_release_async(dlock_multilock *m,
                                            dlock_done_cb cb, void *ud,
                                            dlock_op **op);

/* Semaphore: acquire (rc 0, DLOCK_EBUSY, DLOCK_ECANCELED; permits taken as
 * it is cancelled go back), release (rc 0), try_set_permits (rc 1 set, 0
 * already set), add_permits (rc 0), available and drain (rc the count). */
DLOCK_API int dlock_semaphore_acquire_async(dlock_semaphore *s, int permits,
                                            int64_t wait_ms,
                                            dlock_done_cb cb, void *ud,
                                            dlock_op **op);
DLOCK_API int dlock_semaphore_release_async(dlock_semaphore *s, int permits,
                                            dlock_done_cb cb, void *ud,
                                            dlock_op **op);
DLOCK_API int dlock_semaphore_try_set_permits_async(dlock_semaphore *s,
                                                    int permits,
                                                    dlock_done_cb cb,
                                                    void *ud, dlock_op **op);
DLOCK_API int dlock_semaphore_add_permits_async(dlock_semaphore *s,
                                                int permits, dlock_done_cb cb,
                                                void *ud, dlock_op **op);
DLOCK_API int dlock_semaphore_get_available_async(dlock_semaphore *s,
                                                  dlock_done_cb cb, void *ud,
                                                  dlock_op **op);
DLOCK_API int dlock_semaphore_drain_async(dlock_semaphore *s,
                                          dlock_done_cb cb, void *ud,
                                          dlock_op **op);

/* Permit-expirable semaphore. acquire writes the id the permit will have
 * to `id` within the call (the id is chosen before the request goes out;
 * the buffer is not used after the call returns 0); rc 0 then means that
 * permit is taken (lease_ms as dlock_permits_try_acquire's), else
 * DLOCK_EBUSY, DLOCK_ELATE, DLOCK_ECANCELED (a permit granted then goes
 * back), ... release (rc 0, DLOCK_ELOST, DLOCK_ENOTOWNER), force_release
 * (rc 1 taken back, 0 none), try_set_permits (rc 1 or 0), add_permits (rc
 * 0), available (rc the count). */
DLOCK_API int dlock_permits_acquire_async(dlock_permits *p, int64_t wait_ms,
                                          int64_t lease_ms,
                                          char id[DLOCK_PERMIT_ID_LEN],
                                          dlock_done_cb cb, void *ud,
                                          dlock_op **op);
DLOCK_API int dlock_permits_release_async(dlock_permits *p, const char *id,
                                          dlock_done_cb cb, void *ud,
                                          dlock_op **op);
DLOCK_API int dlock_permits_force_release_async(dlock_permits *p,
                                                const char *id,
                                                dlock_done_cb cb, void *ud,
                                                dlock_op **op);
DLOCK_API int dlock_permits_try_set_async(dlock_permits *p, int permits,
                                          dlock_done_cb cb, void *ud,
                                          dlock_op **op);
DLOCK_API int dlock_permits_add_async(dlock_permits *p, int permits,
                                      dlock_done_cb cb, void *ud,
                                      dlock_op **op);
DLOCK_API int dlock_permits_get_available_async(dlock_permits *p,
                                                dlock_done_cb cb, void *ud,
                                                dlock_op **op);

/* Count-down latch: await (rc 0 at zero, DLOCK_EBUSY, DLOCK_ECANCELED),
 * count_down (rc 0, DLOCK_ERANGE at zero), try_set_count (rc 1 set, 0 a
 * count runs), count (rc the count left, >= 0). */
DLOCK_API int dlock_latch_await_async(dlock_latch *l, int64_t wait_ms,
                                      dlock_done_cb cb, void *ud,
                                      dlock_op **op);
DLOCK_API int dlock_latch_count_down_async(dlock_latch *l, dlock_done_cb cb,
                                           void *ud, dlock_op **op);
DLOCK_API int dlock_latch_try_set_count_async(dlock_latch *l, int64_t count,
                                              dlock_done_cb cb, void *ud,
                                              dlock_op **op);
DLOCK_API int dlock_latch_get_count_async(dlock_latch *l, dlock_done_cb cb,
                                          void *ud, dlock_op **op);

/* Reading a lock, and the calls that do not wait. Each has the contract
 * above; rc and outputs are those of the blocking call of the same name:
 * is_locked and is_held (rc 1 or 0), hold_count (rc the count),
 * current_token (rc 0, the token in the callback's token),
 * remaining_ttl (rc 0, *ttl_ms set before the callback runs: -1 no lease,
 * -2 no lock; ttl_ms must stay valid until then), force_release (rc 1
 * deleted, 0 nothing there, DLOCK_EWRONGTYPE), inspect (rc 0, *st filled
 * in before the callback runs, at the caller's sizeof as
 * dlock_lock_inspect). dlock_op_cancel does not stop them. */
DLOCK_API int dlock_lock_is_locked_async(dlock_lock *l, dlock_done_cb cb,
                                         void *ud, dlock_op **op);
DLOCK_API int dlock_lock_is_held_async(dlock_lock *l, dlock_done_cb cb,
                                       void *ud, dlock_op **op);
DLOCK_API int dlock_lock_hold_count_async(dlock_lock *l, dlock_done_cb cb,
                                          void *ud, dlock_op **op);
DLOCK_API int dlock_lock_current_token_async(dlock_lock *l, dlock_done_cb cb,
                                             void *ud, dlock_op **op);
DLOCK_API int dlock_lock_remaining_ttl_async(dlock_lock *l, int64_t *ttl_ms,
                                             dlock_done_cb cb, void *ud,
                                             dlock_op **op);
DLOCK_API int dlock_lock_force_release_async(dlock_lock *l, dlock_done_cb cb,
                                             void *ud, dlock_op **op);
DLOCK_API int dlock_lock_inspect_async_size(dlock_lock *l,
                                            dlock_lock_state *st, size_t size,
                                            dlock_done_cb cb, void *ud,
                                            dlock_op **op);
#define dlock_lock_inspect_async(l, st, cb, ud, op)                            \
  dlock_lock_inspect_async_size((l), (st), sizeof(dlock_lock_state), (cb),     \
                                (ud), (op))
/* As dlock_client_scan_locks: each(name, ud) runs on the loop's thread for
 * each candidate until it returns non-zero; then cb with rc the number of
 * names passed (or an error: the names passed before it stand). */
DLOCK_API int dlock_client_scan_locks_async(dlock_client *c,
                                            const char *pattern,
                                            dlock_scan_cb each,
                                            dlock_done_cb cb, void *ud,
                                            dlock_op **op);
/* A round trip to the server: rc 0, or why not. */
DLOCK_API int dlock_client_ping_async(dlock_client *c, dlock_done_cb cb,
                                      void *ud, dlock_op **op);
/* Fenced resources (dlock.h): set and set_held (the value copied; rc 0,
 * DLOCK_ESTALE, DLOCK_ELOST, DLOCK_EWRONGTYPE...; the callback's token: the
 * fence after the call, the higher one on DLOCK_ESTALE), get (rc 1 with
 * *value, *len and *fence set before cb runs: free the value with
 * dlock_fence_value_free; 0 none there; the outputs must stay valid until
 * cb), del (rc 1, 0). Redis, ZooKeeper and etcd (Redlock has no fenced
 * resources: DLOCK_ENOTSUP). */
DLOCK_API int dlock_fence_set_async(dlock_client *c, const char *resource,
                                    const void *value, size_t len,
                                    uint64_t token, dlock_done_cb cb, void *ud,
                                    dlock_op **op);
DLOCK_API int dlock_fence_set_held_async(dlock_lock *l, const char *resource,
                                         const void *value, size_t len,
                                         dlock_done_cb cb, void *ud,
                                         dlock_op **op);
DLOCK_API int dlock_fence_get_async(dlock_client *c, const char *resource,
                                    void **value, size_t *len, uint64_t *fence,
                                    dlock_done_cb cb, void *ud, dlock_op **op);
DLOCK_API int dlock_fence_del_async(dlock_client *c, const char *resource,
                                    dlock_done_cb cb, void *ud, dlock_op **op);
/* Queue: offer, offer_first and offer_delayed (the value copied; rc 0),
 * ack (the value copied; rc 0, DLOCK_ENOTOWNER), poll, poll_reliable and
 * poll_last (rc 0 with *value and *len set before cb runs: free the value
 * with dlock_queue_value_free; DLOCK_EBUSY, DLOCK_ECANCELED; value and len
 * must stay valid until cb; a poll cancelled, or ended by the client's
 * close, after its value was taken gets rc 0 and the value when it cannot
 * put it back), size (rc 0, *n set before cb runs). */
DLOCK_API int dlock_queue_offer_async(dlock_queue *q, const void *value,
                                      size_t len, dlock_done_cb cb, void *ud,
                                      dlock_op **op);
DLOCK_API int dlock_queue_offer_first_async(dlock_queue *q, const void *value,
                                            size_t len, dlock_done_cb cb,
                                            void *ud, dlock_op **op);
DLOCK_API int dlock_queue_poll_async(dlock_queue *q, int64_t wait_ms,
                                     void **value, size_t *len,
                                     dlock_done_cb cb, void *ud,
                                     dlock_op **op);
DLOCK_API int dlock_queue_poll_last_async(dlock_queue *q, int64_t wait_ms,
                                          void **value, size_t *len,
                                          dlock_done_cb cb, void *ud,
                                          dlock_op **op);
DLOCK_API int dlock_queue_size_async(dlock_queue *q, int64_t *n,
                                     dlock_done_cb cb, void *ud,
                                     dlock_op **op);
DLOCK_API int dlock_queue_offer_delayed_async(dlock_queue *q,
                                              int64_t delay_ms,
                                              const void *value, size_t len,
                                              dlock_done_cb cb, void *ud,
                                              dlock_op **op);
DLOCK_API int dlock_queue_poll_reliable_async(dlock_queue *q, int64_t wait_ms,
                                              void **value, size_t *len,
                                              dlock_done_cb cb, void *ud,
                                              dlock_op **op);
DLOCK_API int dlock_queue_ack_async(dlock_queue *q, const void *value,
                                    size_t len, dlock_done_cb cb, void *ud,
                                    dlock_op **op);
DLOCK_API int dlock_queue_delayed_size_async(dlock_queue *q, int64_t *n,
                                             dlock_done_cb cb, void *ud,
                                             dlock_op **op);

/* ---- Names of 0.2, deprecated in 0.3 (removed in 0.4): see dlock.h ---- */
DLOCK_API DLOCK_DEPRECATED(
    "use "
    "dlock_semaphore_get_available_"
    "async") int dlock_semaphore_available_async(dlock_semaphore *s,
                                                 dlock_done_cb cb, void *ud,
                                                 dlock_op **op);
DLOCK_API DLOCK_DEPRECATED(
    "use "
    "dlock_permits_try_set_"
    "async") int dlock_permits_try_set_permits_async(dlock_permits *p,
                                                     int permits,
                                                     dlock_done_cb cb, void *ud,
                                                     dlock_op **op);
DLOCK_API DLOCK_DEPRECATED(
    "use "
    "dlock_permits_add_"
    "async") int dlock_permits_add_permits_async(dlock_permits *p, int permits,
                                                 dlock_done_cb cb, void *ud,
                                                 dlock_op **op);
DLOCK_API DLOCK_DEPRECATED(
    "use "
    "dlock_permits_get_available_"
    "async") int dlock_permits_available_async(dlock_permits *p,
                                               dlock_done_cb cb, void *ud,
                                               dlock_op **op);
DLOCK_API DLOCK_DEPRECATED(
    "use dlock_latch_get_count_async") int dlock_latch_count_async(dlock_latch
                                                                       *l,
                                                                   dlock_done_cb
                                                                       cb,
                                                                   void *ud,
                                                                   dlock_op *
                                                                       *op);

#ifdef __cplusplus
}
#endif

#endif /* DLOCK_ASYNC_H */
