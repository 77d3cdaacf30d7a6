/* blockloop.h: the event-loop form of a backend whose operations block
 * (ZooKeeper's recipes over libzookeeper-mt, etcd's over libcurl easy
 * handles). Each *_async entry of the seam runs its blocking twin as a
 * job of the core's offload (a thread per operation in flight, as a
 * Curator or Go caller's thread blocks in its lock call), and done runs on
 * the loop's thread; the backend's loss notices reach the loop's thread
 * the same way. The loop never blocks on the backend. */
#ifndef DLOCK_BLOCKLOOP_H
#define DLOCK_BLOCKLOOP_H

#include "backend.h"

typedef struct dl_blockloop dl_blockloop;

/* The head of every dl_async of a backend with an event-loop form: own
 * false for blockloop's jobs, true for the backend's own operations
 * (dl_blockloop_new's `own` entries), which the backend's cancel gets. */
typedef struct dl_blockloop_head {
  bool own;
} dl_blockloop_head;

/* Gives b, whose ops block, its event-loop form on env->loop: b->ops is
 * replaced by a copy of it (kept in *out) in which
 * - each *_async entry whose blocking twin b has runs that twin on a job
 *   of its own, filling in the results, then calls done on the loop's
 *   thread (a scan's cb runs there too, once the scan is done);
 * - each blocking entry (elect_leader too) refuses with DLOCK_EINVAL: it
 *   would block the loop's thread (the jobs call b's own);
 * - watch_losses registers with b's own, and passes each notice on on the
 *   loop's thread (b's may call it from any thread, taking leaf locks);
 * - cancel marks the operation's job cancelled and calls kick(b): the
 *   backend's waits then check dl_offload_cancelled() and end as at
 *   their deadline. kick runs on the loop's thread and may wake waits that
 *   were not cancelled (they look again).
 * own (NULL: none) lists the backend's own event-loop entries, which take
 * no thread: each non-NULL *_async entry of own replaces the job's, and
 * own->cancel is called for their operations (whose struct dl_async
 * starts with a dl_blockloop_head, own true). A backend with event-loop
 * entries for everything does not use this. Returns 0, or a negative
 * code recorded for dlock_client_open (b unchanged). */
int dl_blockloop_new(dl_backend *b, const dl_backend_env *env,
                     void (*kick)(dl_backend *b), const dl_backend_ops *own,
                     dl_blockloop **out);
/* Sets woken (NULL: none), which runs on the loop's thread soon after
 * each dl_blockloop_wake (and maybe at other times: it looks for its own
 * work). Before any operation starts. */
void dl_blockloop_set_woken(dl_blockloop *f, void (*woken)(dl_backend *b));
/* Asks for woken(b) on the loop's thread soon, as a loss notice is
 * passed on; nothing once f is closed. Any thread (may be called with
 * the backend's own locks held: it takes a leaf lock). */
void dl_blockloop_wake(dl_blockloop *f);
/* The entries as jobs (a thread each), for a backend's own entry that
 * hands an operation back to them. */
const dl_backend_ops *dl_blockloop_jobs(const dl_blockloop *f);
/* For the backend's free, env->closing set: kicks b's waits, waits for
 * the operations' threads (each ends as the client's close makes it) and
 * calls their done on this thread; notices from now on are dropped (the
 * backend may still send them). The loop's thread. Accepts NULL. */
void dl_blockloop_close(dl_blockloop *f);
/* Closes f if not yet closed, and frees it: once the backend sends no
 * more notices (its threads have ended). b->ops is not given back (b is
 * being freed). Any thread; accepts NULL. */
void dl_blockloop_free(dl_blockloop *f);

#endif /* DLOCK_BLOCKLOOP_H */
