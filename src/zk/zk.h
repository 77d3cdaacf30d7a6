/* zk.h: the ZooKeeper backend's entry point (zk:// URLs), for the client's
 * registry. No ZooKeeper header is included here or outside src/zk. */
#ifndef DLOCK_ZK_H
#define DLOCK_ZK_H

#include "../core/backend.h"

/* The backend for zk://HOST:PORT[,HOST:PORT...][/CHROOT] URLs (Curator's
 * layout, docs/WIRE.md). Returns 0 and sets *out, or a negative code with the
 * detail recorded for dlock_client_open (err_owner NULL); on error *out is
 * NULL and nothing else changed. In this build it always returns
 * DLOCK_ENOTSUP: either libzookeeper-mt was not found when the library was
 * configured, or the backend's recipes are not part of this build yet
 * (issue 21); the message says which. Any thread. */
int dl_zk_backend_new(const dlock_client_options *opts,
                      const dl_backend_env *env, dl_backend **out);

#endif
