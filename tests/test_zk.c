/* test_zk.c: the ZooKeeper test harness (a private standalone server) and
 * what zk:// gives in this build. The ZooKeeper backend's recipes (issue 21)
 * will be tested here against the same server. */
#include "harness.h"

#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

/* A test that needs a server skips (passes, saying so) where none can run:
 * scripts/install-deps.sh installs one. */
#define NEED_ZK()                                                              \
  do {                                                                         \
    if (!th_zk_available()) {                                                  \
      fprintf(stderr, "    skipped: no ZooKeeper server installed\n");       \
      return;                                                                  \
    }                                                                          \
  } while (0)

/* The server starts, answers imok and srvr as a standalone, and is gone
 * (process, port and dir) once stopped. */
static void t_zk_server(void) {
  NEED_ZK();
  th_zk zk;
  int64_t t0 = th_now_ms();
  CHECK_RC(th_zk_start(&zk, 500), 0);
  fprintf(stderr, "    started in %lld ms\n", (long long)(th_now_ms() - t0));
  char buf[512], dir[256];
  CHECK(strcmp(th_zk_4lw(&zk, "ruok", buf, sizeof buf), "imok") == 0);
  CHECK(strstr(th_zk_4lw(&zk, "srvr", buf, sizeof buf), "Mode: standalone"));
  /* Not whitelisted: the server refuses it (the list is ours). */
  CHECK(strstr(th_zk_4lw(&zk, "mntr", buf, sizeof buf), "not in the whitelist"));
  snprintf(dir, sizeof dir, "%s", zk.dir);
  pid_t pid = zk.pid;
  th_zk_stop(&zk);
  CHECK(kill(pid, 0) != 0);
  struct stat st;
  CHECK(stat(dir, &st) != 0);
  zk.dir[0] = '\0';
  CHECK(strcmp(th_zk_4lw(&zk, "ruok", buf, sizeof buf), "") == 0);
}

/* tickTime bounds the sessions the server grants (2..20 ticks): the
 * setting reached the server. */
static void t_zk_tick(void) {
  NEED_ZK();
  th_zk zk;
  CHECK_RC(th_zk_start(&zk, 250), 0);
  char buf[2048];
  th_zk_4lw(&zk, "conf", buf, sizeof buf);
  th_zk_stop(&zk);
  CHECK(strstr(buf, "tickTime=250\n") != NULL);
  CHECK(strstr(buf, "minSessionTimeout=500\n") != NULL);
  CHECK(strstr(buf, "maxSessionTimeout=5000\n") != NULL);
}

/* zk:// without the backend: DLOCK_ENOTSUP and a message that says why,
 * and the other schemes unaffected. */
static void t_zk_url_enotsup(void) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = "zk://127.0.0.1:2181/app";
  dlock_client *c = (dlock_client *)1;
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_ENOTSUP);
  CHECK(c == NULL);
  const char *msg = dlock_client_open_errmsg();
  CHECK(msg != NULL);
  CHECK(strstr(msg, "zk://") != NULL);
  CHECK(strstr(msg, "ZooKeeper") != NULL || strstr(msg, "libzookeeper") != NULL);
  o.url = "zkx://127.0.0.1:2181";
  CHECK(dlock_client_open(&o, &c) != DLOCK_ENOTSUP);
  CHECK(c == NULL);
}

TH_MAIN(T_BARE(t_zk_server), T_BARE(t_zk_tick), T_BARE(t_zk_url_enotsup))
