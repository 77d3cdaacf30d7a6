/* none.c: the etcd:// entry point while this build has no etcd backend
 * (libcurl or json-c was not found when it was configured). */
#include "etcd.h"

int dl_etcd_backend_new(const dlock_client_options *opts,
                        const dl_backend_env *env, dl_backend **out) {
  (void)opts;
  (void)env;
  *out = NULL;
  return dl_seterr(NULL, DLOCK_ENOTSUP,
                   "etcd:// URLs need libcurl and json-c, which this build "
                   "did not find (install libcurl4-openssl-dev and "
                   "libjson-c-dev and configure again)");
}
