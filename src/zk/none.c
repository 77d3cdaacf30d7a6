/* none.c: the zk:// entry point while this build has no ZooKeeper backend
 * (libzookeeper-mt not found, or the backend not yet built on it). */
#include "zk.h"

int dl_zk_backend_new(const dlock_client_options *opts,
                      const dl_backend_env *env, dl_backend **out) {
  (void)opts;
  (void)env;
  *out = NULL;
#ifdef DLOCK_HAVE_ZK
  return dl_seterr(NULL, DLOCK_ENOTSUP,
                   "zk:// URLs are not supported yet: the ZooKeeper backend "
                   "(issue 21) is not part of this build");
#else
  return dl_seterr(NULL, DLOCK_ENOTSUP,
                   "zk:// URLs need libzookeeper-mt, which this build did "
                   "not find (install libzookeeper-mt-dev and configure "
                   "again)");
#endif
}
