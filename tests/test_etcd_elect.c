/* test_etcd_elect.c: dlock's election on etcd beside Go's
 * concurrency.Election, what etcdctl and Go's clients write: a proposal
 * (Campaign's key PREFIX/NAME/<lease in hex> on its lease, the value as
 * given) and a Proclaim (the leader's value put again on its key, its
 * create revision kept), read by dlock_leader_get_current, against a
 * private etcd server the harness starts (a few seconds). */
#include "harness.h"

#include <string.h>

#ifdef DLOCK_TEST_HAVE_ETCD
/* etcdctl on s with `args` (1 s at most: `elect -l` observes until
 * stopped): its output in buf ("" none). */
static const char *ctl(const th_etcd *s, const char *args, char *buf,
                       size_t len) {
  char cmd[2000];
  snprintf(cmd, sizeof cmd,
           "ETCDCTL_API=3 timeout 1 etcdctl --endpoints %s %s 2>&1",
           s->endpoint, args);
  return th_sh(cmd, buf, len);
}

/* A leader campaigned as Go's Campaign does (a lease, then its key on it
 * with a 300-byte value, longer than any id dlock gives): a dlock
 * participant follows, and dlock_leader_get_current reads the whole value
 * (cut to fit a short buffer). The leader proclaims a new value (Go's
 * Proclaim: a put on its key that keeps its lease and create revision):
 * dlock reads the new one, `etcdctl elect -l` agrees, and dlock still
 * follows. The leader's lease revoked: dlock leads. */
static void t_etcd_elect_proclaim(void) {
  if (!th_etcd_available()) {
    fprintf(stderr, "    skipped: no etcd server installed\n");
    return;
  }
  th_etcd s;
  CHECK_RC(th_etcd_start(&s), 0);
  char out[2000], args[1200], lease[40] = "", val[301];
  memset(val, 'v', 300);
  val[0] = 'G';
  val[300] = '\0';
  /* "lease 694d7b3a5c1e2f04 granted with TTL(30s)" */
  CHECK(sscanf(ctl(&s, "lease grant 30", out, sizeof out), "lease %39s",
               lease) == 1);
  snprintf(args, sizeof args, "put el/%s %s --lease=%s", lease, val, lease);
  CHECK(strncmp(ctl(&s, args, out, sizeof out), "OK", 2) == 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = s.url;
  dlock_client *c = NULL;
  CHECK_RC(dlock_client_open(&o, &c), 0);
  dlock_leader *me;
  CHECK_RC(dlock_leader_new(c, "el", "me", &me), 0);
  CHECK_RC(dlock_leader_start(me), 0);
  CHECK_RC(dlock_leader_try_await(me, 300), DLOCK_EBUSY);
  char cur[512], small[16];
  CHECK_EQ(dlock_leader_get_current(me, cur, sizeof cur), 1);
  CHECK(strcmp(cur, val) == 0);
  CHECK_EQ(dlock_leader_get_current(me, small, sizeof small), 1);
  CHECK(strncmp(small, val, 15) == 0 && strlen(small) == 15);
  /* Proclaim: the same key, lease and create revision, a new value. */
  snprintf(args, sizeof args, "put el/%s proclaimed --ignore-lease", lease);
  CHECK(strncmp(ctl(&s, args, out, sizeof out), "OK", 2) == 0);
  CHECK_EQ(dlock_leader_get_current(me, cur, sizeof cur), 1);
  CHECK(strcmp(cur, "proclaimed") == 0);
  CHECK(strstr(ctl(&s, "elect -l el", out, sizeof out), "\nproclaimed\n") !=
        NULL);
  CHECK_RC(dlock_leader_try_await(me, 300), DLOCK_EBUSY);
  /* The leader's session ends: dlock is next. */
  snprintf(args, sizeof args, "lease revoke %s", lease);
  ctl(&s, args, out, sizeof out);
  CHECK_RC(dlock_leader_try_await(me, 5000), 0);
  CHECK_EQ(dlock_leader_get_current(me, cur, sizeof cur), 1);
  CHECK(strcmp(cur, "me") == 0);
  dlock_leader_free(me);
  CHECK_EQ(dlock_leader_get_current(NULL, cur, sizeof cur) < 0, 1);
  dlock_client_close(c);
  th_etcd_stop(&s);
}

TH_MAIN(T_BARE(t_etcd_elect_proclaim))
#else
static void t_etcd_none(void) {
  fprintf(stderr, "    skipped: no etcd backend or server here\n");
}
TH_MAIN(T_BARE(t_etcd_none))
#endif
