/* none.c: the zk:// entry point while this build has no ZooKeeper backend
 * (libzookeeper-mt was not found when it was configured). */
#include "zk.h"

int dl_zk_backend_new(const dlock_client_options *opts,
                      const dl_backend_env *env, dl_backend **out) {
  (void)opts;
  (void)env;
  *out = NULL;
  return dl_seterr(NULL, DLOCK_ENOTSUP,
                   "zk:// URLs need libzookeeper-mt, which this build did "
                   "not find (install libzookeeper-mt-dev and configure "
                   "again)");
}
