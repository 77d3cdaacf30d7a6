/* probe.h: what `dlock bench`'s baselines take from the etcd backend, and
 * all the CLI sees of it: the server's limits, measured over the
 * backend's own transport (its calls, gRPC unless the URL says
 * transport=json) on scratch keys of the probe's own, without a client's
 * lease, holds or watches. A probe is used by one thread at a time
 * (dl_etcd_probe_cycles runs threads of its own inside); the library never
 * calls these. No libcurl, json-c or protobuf-c type is declared here. */
#ifndef DL_ETCD_PROBE_H
#define DL_ETCD_PROBE_H

#include "../core/backend.h"

#include <stdint.h>

/* The most threads dl_etcd_probe_cycles runs (the backend keeps this many
 * gRPC connections between calls). */
#define DL_ETCD_PROBE_THREADS 16

typedef struct dl_etcd_probe dl_etcd_probe;

/* Opens a probe on opts->url (etcd:// or etcds://; its options as a
 * client's, from dlock_client_options_init: TLS, user and password,
 * timeouts; non-positive timeouts: DLOCK_EINVAL), its calls starting at the
 * URL's first endpoint, and grants the lease its scratch keys live on
 * (prefix + "dlock-bench-probe/<pid>/..."). Returns 0 with *out (free
 * with dl_etcd_probe_close), or a negative code with the detail as
 * dlock_client_open_errmsg's; *out NULL then. DLOCK_ENOTSUP in a build
 * without the etcd backend. */
int dl_etcd_probe_open(const dlock_client_options *opts, dl_etcd_probe **out);

/* A bare write's round trip: the median, in microseconds, of n txns each
 * putting one scratch key (on the probe's lease), one at a time, within
 * ms at most (fewer than n when time runs out). 0 when a call failed. */
double dl_etcd_probe_write_rtt_p50_us(dl_etcd_probe *p, int n, int64_t ms);

/* The recipe's writes: for ms, each of `threads` threads (1 to
 * DL_ETCD_PROBE_THREADS) on a scratch key of its own runs the mutex's two
 * txns one after the other: the acquire's (the key created if absent, on
 * the probe's lease, with the owner's range read) and the fenced
 * release's (the key deleted at its create revision). Returns the cycles
 * per second of them all; 0 when a call failed or a txn did not succeed.
 * The keys are gone when it returns. */
double dl_etcd_probe_cycles(dl_etcd_probe *p, int threads, int64_t ms);

/* The server's CPU time so far (etcd's process_cpu_seconds_total on
 * /metrics at the first endpoint, in microseconds; 10 ms resolution), or
 * -1 when it cannot be had (no metrics there, a failed call). */
double dl_etcd_probe_cpu_us(dl_etcd_probe *p);

/* Revokes the probe's lease (its scratch keys go with it) and frees p.
 * NULL is a no-op. */
void dl_etcd_probe_close(dl_etcd_probe *p);

#endif
