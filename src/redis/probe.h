/* probe.h: what `dlock bench`'s baselines take from the Redis backend, and
 * all the CLI sees of it: the servers a URL names and the lock's own
 * commands, to send on plain connections of the benchmark's own (the PING
 * round trip, the ceiling), without a client. Nothing here keeps state;
 * every call is thread-safe. */
#ifndef DL_REDIS_PROBE_H
#define DL_REDIS_PROBE_H

#include "../core/core.h"

#include <stdbool.h>
#include <stddef.h>

/* The most servers a redlock:// URL names. */
#define DL_PROBE_SERVERS_MAX 16

/* A redlock:// URL's servers, as redis:// URLs (malloc'd into out, up to
 * max, the caller frees each): how many; 0 for any other URL; a negative
 * code for a malformed redlock:// URL. */
int dl_probe_redlock_servers(const char *url, char **out, int max);

/* The master a redis-sentinel:// endpoint names now, asked of its
 * sentinels as the client asks them (within 2 s): its host into host
 * (hostlen bytes) and *port. Returns 0, or a negative code with the reason
 * in err. ep from dl_url_parse; sentinel_password NULL for none. */
int dl_probe_sentinel_master(const dl_endpoint *ep,
                             const char *sentinel_password, char *host,
                             size_t hostlen, int *port, char *err,
                             size_t errlen);

/* The cluster hash slot of key (its hash tag's, if any). */
int dl_probe_key_slot(const char *key);

/* The lock's cycle on `key`: the acquire of a fresh hold with a fixed
 * lease and the release of its only hold, with the keys and arguments
 * dlock_lock_try_acquire and dlock_lock_release send, formatted back to
 * back as one buffer of commands (RESP) into *out (malloc'd, the caller
 * frees) of *len bytes. The scripts go by SHA: send *acquire_body and
 * *release_body (static) with SCRIPT LOAD first. sharded: a cluster
 * master's variant (shard channels). The release's latch lives 1 ms, so
 * that a buffer sent again and again fills no server. Returns 0 or
 * DLOCK_ENOMEM. */
int dl_probe_lock_cycle(const char *key, bool sharded, char **out, size_t *len,
                        const char **acquire_body, const char **release_body);

/* The layouts of the lock's steps (dl_probe_lock_step). */
#define DL_PROBE_HASH 0    /* one server's lock (redis://, Sentinel) */
#define DL_PROBE_SHARDED 1 /* a cluster master's: shard channels */
#define DL_PROBE_PLAIN 2   /* a redlock:// server's (layout=plain) */

/* The steps of the lock's cycle on `key`. */
#define DL_PROBE_ACQUIRE 0 /* a fresh hold, a fixed lease of 10 s */
#define DL_PROBE_FENCE 1   /* Redlock's write-back of the token `arg` */
#define DL_PROBE_RELEASE 2 /* the release; its latch numbered `arg` */

/* One step of the lock's cycle on one server, as a blocking client sends
 * it there (the same script, keys and arguments), formatted (RESP) into
 * *cmd (malloc'd, the caller frees) of *len bytes; the script goes by SHA:
 * send *body (static) with SCRIPT LOAD first. A release's latch lives 1 ms,
 * so a probe that repeats the cycle fills no server. Returns 0,
 * DLOCK_EINVAL for an unknown layout or step, or DLOCK_ENOMEM. */
int dl_probe_lock_step(int layout, int step, const char *key, long long arg,
                       char **cmd, size_t *len, const char **body);

/* A redlock:// URL's options as the probe needs them: whether it writes
 * each token back to the quorum (*fencing) and whether its servers use the
 * hash layout (*hash). Returns 0 or DLOCK_EURL. */
int dl_probe_redlock_opts(const char *url, bool *fencing, bool *hash);

#endif
