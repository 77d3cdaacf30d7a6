/* zk.h: the ZooKeeper backend's entry point (zk:// URLs), for the client's
 * registry. No ZooKeeper header is included here or outside src/zk. */
#ifndef DLOCK_ZK_H
#define DLOCK_ZK_H

#include "../core/backend.h"

/* The backend for zk://HOST:PORT[,HOST:PORT...][/CHROOT] URLs (Curator's
 * layout, docs/WIRE.md). Returns 0 and sets *out, or a negative code with the
 * detail recorded for dlock_client_open (err_owner NULL); on error *out is
 * NULL and nothing else changed. It connects (waiting up to
 * zk_connect_timeout_ms for a session), so a wrong address fails the open.
 * A build without libzookeeper-mt (src/zk/none.c) returns DLOCK_ENOTSUP
 * saying so. On an event-loop client (env->loop) each operation runs on a
 * thread of its own, its result handed to the loop's thread
 * (core/blockloop.h). */
int dl_zk_backend_new(const dlock_client_options *opts,
                      const dl_backend_env *env, dl_backend **out);

#endif
