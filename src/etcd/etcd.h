/* etcd.h: the etcd backend's entry point (etcd:// URLs), for the client's
 * registry. No libcurl or json-c header is included here or outside
 * src/etcd. */
#ifndef DLOCK_ETCD_H
#define DLOCK_ETCD_H

#include "../core/backend.h"

/* The backend for etcd://HOST:PORT[,HOST:PORT...][/PREFIX] URLs: etcd's v3
 * API through its JSON gateway, the mutex on the layout of Go's
 * concurrency.Mutex and `etcdctl lock` (docs/WIRE.md). Returns 0 and sets
 * *out, or a negative code with the detail recorded for dlock_client_open
 * (err_owner NULL); on error *out is NULL. It asks a server for its version
 * (every endpoint in turn, each within connect_timeout_ms), so a wrong
 * address fails the open. A build without libcurl and json-c
 * (src/etcd/none.c) gets DLOCK_ENOTSUP saying so. On an event-loop client
 * (env->loop) each operation runs on a thread of its own, its result
 * handed to the loop's thread (core/blockloop.h). */
int dl_etcd_backend_new(const dlock_client_options *opts,
                        const dl_backend_env *env, dl_backend **out);

#endif
