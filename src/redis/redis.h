/* redis.h: the Redis backend's entry points (redis://, rediss://, unix://,
 * redis-sentinel://, redis-cluster:// and redlock:// URLs), for the
 * client's registry. The backend's floors are its folders, each with one
 * header: conns/ (connections), links/ (how the operations reach a
 * deployment), ops/ (the typed operations over a link), redlock/ (the
 * composite over N servers); probe.h is the benchmark's view. No hiredis
 * header is included here. */
#ifndef DLOCK_REDIS_H
#define DLOCK_REDIS_H

#include "../core/backend.h"

/* The backend for redis://, rediss:// and unix:// URLs (one server), and
 * for the Sentinel and Cluster URLs (ops/backend.c picks their link).
 * Returns 0 and sets *out, or a negative code. */
int dl_redis_backend_new(const dlock_client_options *opts,
                         const dl_backend_env *env, dl_backend **out);
/* The Redlock backend for redlock:// URLs (redlock/rlops.c): a composite
 * over one backend per server. As dl_redis_backend_new. */
int dl_redlock_backend_new(const dlock_client_options *opts,
                           const dl_backend_env *env, dl_backend **out);

#endif /* DLOCK_REDIS_H */
