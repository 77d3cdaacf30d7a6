/* none.c: the etcd:// entry point while this build has no etcd backend
 * (libcurl, json-c or protobuf-c was not found when it was configured). */
#include "etcd.h"

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
