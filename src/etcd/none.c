/* none.c: the etcd:// entry point while this build has no etcd backend
 * (libcurl, json-c or protobuf-c was not found when it was configured). */
#include "etcd.h"
#include "probe.h"

int dl_etcd_backend_new(const dlock_client_options *opts,
                        const dl_backend_env *env, dl_backend **out) {
  (void)opts;
  (void)env;
  *out = NULL;
  return dl_seterr(NULL, DLOCK_ENOTSUP,
                   "etcd:// URLs need libcurl, json-c and protobuf-c, which "
                   "this build did not find (install libcurl4-openssl-dev, "
                   "libjson-c-dev, libprotobuf-c-dev and protobuf-c-compiler "
                   "and configure again)");
}

/* The benchmark's probe (probe.h): none without the backend. */
int dl_etcd_probe_open(const dlock_client_options *opts, dl_etcd_probe **out) {
  (void)opts;
  *out = NULL;
  return dl_seterr(NULL, DLOCK_ENOTSUP,
                   "etcd:// URLs need libcurl, json-c and protobuf-c, which "
                   "this build did not find");
}
double dl_etcd_probe_write_rtt_p50_us(dl_etcd_probe *p, int n, int64_t ms) {
  (void)p, (void)n, (void)ms;
  return 0;
}
double dl_etcd_probe_cycles(dl_etcd_probe *p, int threads, int64_t ms) {
  (void)p, (void)threads, (void)ms;
  return 0;
}
double dl_etcd_probe_cpu_us(dl_etcd_probe *p) {
  (void)p;
  return -1;
}
void dl_etcd_probe_close(dl_etcd_probe *p) {
  (void)p;
}
