/* main.c: the conformance suite's runner: `conformance KIND [TEST...]`
 * starts a deployment of the URL kind KIND (th_deploy_kinds: redis, unix,
 * rediss, sentinel, cluster, redlock, zk, etcd) once, before the first
 * test, and runs every test (or those named), each in a process of its
 * own, against it (th_run). The tests use names of their own, so they
 * share it. */
#include "conformance.h"

#include <string.h>

/* The suite's parts, in the order they run. */
extern const th_test cf_support_tests[], cf_lock_tests[], cf_sync_tests[],
    cf_waiters_tests[], cf_async_tests[], cf_async_sync_tests[],
    cf_input_tests[], cf_fence_tests[], cf_events_tests[], cf_readers_tests[],
    cf_wrongtype_tests[];
extern const size_t cf_support_ntests, cf_lock_ntests, cf_sync_ntests,
    cf_waiters_ntests, cf_async_ntests, cf_async_sync_ntests, cf_input_ntests,
    cf_fence_ntests, cf_events_ntests, cf_readers_ntests, cf_wrongtype_ntests;

static const char *kind;

static const char *backend_of(const char *k) {
  return strcmp(k, "redlock") == 0 ? "redlock"
         : strcmp(k, "zk") == 0    ? "zookeeper"
         : strcmp(k, "etcd") == 0  ? "etcd"
                                   : "redis";
}

static int start(void) {
  int64_t t0 = th_now_ms();
  int rc = th_deploy_start(&cf_dep, kind);
  if (rc == 1) {
    cf_skipped = true;
    printf("%s: cannot run here: every test skips\n", kind);
    return 0;
  }
  if (rc == 0)
    printf("%s: %s started in %lld ms\n", kind, cf_dep.url,
           (long long)(th_now_ms() - t0));
  return rc;
}

/* After each test: a test that stopped the servers (th_deploy_pause) and
 * crashed before it resumed them leaves none stopped for the next. */
static void resume_servers(void) {
  if (!cf_skipped) th_deploy_pause(&cf_dep, false);
}

int main(int argc, char **argv) {
  bool known = false;
  for (int i = 0; argc > 1 && th_deploy_kinds[i]; i++)
    known = known || strcmp(argv[1], th_deploy_kinds[i]) == 0;
  if (!known) {
    fprintf(stderr,
            "usage: %s KIND [TEST...] (KIND: redis, unix, rediss, "
            "sentinel, cluster, redlock, zk, etcd)\n",
            argv[0]);
    return 2;
  }
  kind = argv[1];
  cf_backend = backend_of(kind);
  const th_test *parts[] = {
      cf_support_tests, cf_lock_tests,       cf_waiters_tests,  cf_sync_tests,
      cf_async_tests,   cf_async_sync_tests, cf_input_tests,    cf_fence_tests,
      cf_events_tests,  cf_readers_tests,    cf_wrongtype_tests};
  const size_t counts[] = {
      cf_support_ntests, cf_lock_ntests,     cf_waiters_ntests,
      cf_sync_ntests,    cf_async_ntests,    cf_async_sync_ntests,
      cf_input_ntests,   cf_fence_ntests,    cf_events_ntests,
      cf_readers_ntests, cf_wrongtype_ntests};
  const size_t nparts = sizeof counts / sizeof counts[0];
  size_t n = 0;
  for (size_t i = 0; i < nparts; i++)
    n += counts[i];
  th_test *all = calloc(n, sizeof *all);
  if (all == NULL) return 2;
  for (size_t i = 0, at = 0; i < nparts; at += counts[i++])
    memcpy(all + at, parts[i], counts[i] * sizeof *all);
  argv[1] = argv[0]; /* the runner sees PROGRAM [TEST...] */
  th_after_each = resume_servers;
  int rc = th_run(argc - 1, argv + 1, all, n, start);
  th_deploy_stop(&cf_dep);
  free(all);
  return rc;
}
