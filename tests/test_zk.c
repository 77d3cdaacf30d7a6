/* test_zk.c: the ZooKeeper test harness (a private standalone server) and
 * the ZooKeeper backend's mutex (Curator's InterProcessMutex layout) against
 * it, with a raw libzookeeper handle to look at the nodes. */
#include "harness.h"
#include "loop_drivers.h"

#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A test that needs a server skips (passes, saying so) where none can run:
 * scripts/install-deps.sh installs one. */
#define NEED_ZK()                                                              \
  do {                                                                         \
    if (!th_zk_available()) {                                                  \
      fprintf(stderr, "    skipped: no ZooKeeper server installed\n");         \
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
  CHECK(
      strstr(th_zk_4lw(&zk, "mntr", buf, sizeof buf), "not in the whitelist"));
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

#ifdef DLOCK_TEST_HAVE_ZK
#include <sys/wait.h>
#include <zookeeper/zookeeper.h>

static void quiet(const char *m) {
  (void)m;
}

/* A raw handle on the test's server, to look at the nodes. */
static zhandle_t *raw(const th_zk *zk) {
  zhandle_t *zh =
      zookeeper_init2(zk->connect, NULL, 10000, NULL, NULL, 0, quiet);
  for (int i = 0; zh && i < 500 && zoo_state(zh) != ZOO_CONNECTED_STATE; i++)
    th_sleep_ms(10);
  return zh;
}

/* The children of path (count; the first sorted by sequence into first). */
static int children(zhandle_t *zh, const char *path, char *first, size_t n) {
  struct String_vector sv = {0};
  if (zoo_get_children(zh, path, 0, &sv) != ZOK) return -1;
  int c = sv.count;
  if (first) {
    first[0] = '\0';
    const char *best = NULL;
    for (int i = 0; i < sv.count; i++) {
      const char *s = strstr(sv.data[i], "lock-");
      if (s && (!best || strcmp(s, strstr(best, "lock-")) < 0))
        best = sv.data[i];
    }
    if (best) snprintf(first, n, "%s", best);
  }
  deallocate_String_vector(&sv);
  return c;
}

static dlock_client *zclient(const th_zk *zk, int session_ms) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = zk->url;
  o.zk_connect_timeout_ms = 5000;
  if (session_ms > 0) o.zk_session_timeout_ms = session_ms;
  dlock_client *c = NULL;
  if (dlock_client_open(&o, &c) != 0)
    fprintf(stderr, "    open: %s\n", dlock_client_open_errmsg());
  return c;
}

#define ZK_SETUP(zk, zh)                                                       \
  NEED_ZK();                                                                   \
  th_zk zk;                                                                    \
  CHECK_RC(th_zk_start(&zk, 250), 0);                                          \
  zhandle_t *zh = raw(&zk);                                                    \
  CHECK(zh != NULL)

/* Curator's layout: one protected ephemeral-sequential node under the lock
 * path (parents made), the token its czxid; re-entry makes no second node;
 * the last release deletes it. The fair lock is the same node; a kind
 * zk:// lacks makes none. */
static void t_zk_mutex_layout(void) {
  ZK_SETUP(zk, zh);
  dlock_client *c = zclient(&zk, 0);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "/locks/a/b", "me", &l), 0);
  uint64_t t1 = 0, t2 = 0;
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, &t1), 0);
  char first[256];
  CHECK_EQ(children(zh, "/locks/a/b", first, sizeof first), 1);
  CHECK(strncmp(first, "_c_", 3) == 0);
  CHECK_EQ(strlen(first), 3 + 36 + 1 + 5 + 10);
  CHECK(strcmp(first + 3 + 36, "-lock-0000000000") == 0);
  char node[300];
  snprintf(node, sizeof node, "/locks/a/b/%s", first);
  struct Stat st;
  CHECK_RC(zoo_exists(zh, node, 0, &st), ZOK);
  CHECK(st.ephemeralOwner != 0);
  CHECK_EQ(t1, (uint64_t)st.czxid);
  CHECK_RC(zoo_exists(zh, "/locks/a", 0, &st), ZOK);
  CHECK_EQ(st.ephemeralOwner, 0);
  CHECK_RC(dlock_lock_acquire(l, 0, &t2), 0); /* re-entry */
  CHECK_EQ(t2, t1);
  CHECK_EQ(children(zh, "/locks/a/b", NULL, 0), 1);
  CHECK_EQ(dlock_lock_hold_count(l), 2);
  dlock_lock_state ls; /* the snapshot shows the client's count */
  CHECK_RC(dlock_lock_inspect(l, &ls), 0);
  CHECK_EQ(ls.hold_count, 2);
  CHECK_EQ(dlock_lock_is_locked(l), 1);
  CHECK_RC(dlock_lock_release(l), 0);
  CHECK_EQ(children(zh, "/locks/a/b", NULL, 0), 1);
  CHECK_EQ(dlock_lock_hold_count(l), 1);
  CHECK_RC(dlock_lock_inspect(l, &ls), 0);
  CHECK_EQ(ls.hold_count, 1);
  CHECK_RC(dlock_lock_release(l), 1);
  CHECK_EQ(children(zh, "/locks/a/b", NULL, 0), 0);
  CHECK_EQ(dlock_lock_is_locked(l), 0);
  CHECK_RC(dlock_lock_release(l), DLOCK_ENOTOWNER);
  /* A second hold is a new node with a larger czxid. */
  uint64_t t3 = 0;
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, &t3), 0);
  CHECK(t3 > t1);
  CHECK_RC(dlock_lock_release(l), 1);
  /* Not a znode path (ZooKeeper's rules): refused when the handle is
   * made, nothing created; so are the other kinds' handles. */
  const char *bad_names[] = {"locks/x",      "/a//b",  "/a/",
                             "/a/./b",       "/a/..",  "/zookeeper",
                             "/zookeeper/q", "/a\x01b"};
  for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
    dlock_lock *bad = (dlock_lock *)1;
    CHECK_RC(dlock_lock_new(c, bad_names[i], "me", &bad), DLOCK_EINVAL);
    CHECK(bad == NULL);
    CHECK(strstr(dlock_client_errmsg(c), "znode path") != NULL);
  }
  dlock_leader *bad_leader;
  CHECK_RC(dlock_leader_new(c, "el", "me", &bad_leader), DLOCK_EINVAL);
  dlock_lock *ok;
  CHECK_RC(dlock_lock_new(c, "/zookeeperish/.x/..y", "me", &ok), 0);
  dlock_lock_free(ok);
  /* The fair lock is the mutex (its waiters already queue in order). */
  dlock_lock *f;
  CHECK_RC(dlock_fairlock_new(c, "/f/fair", "me", 0, &f), 0);
  CHECK_RC(dlock_lock_try_acquire(f, 0, 0, NULL), 0);
  CHECK_EQ(children(zh, "/f/fair", first, sizeof first), 1);
  CHECK(strcmp(first + 3 + 36, "-lock-0000000000") == 0);
  CHECK_RC(dlock_lock_release(f), 1);
  dlock_lock_free(f);
  /* What zk:// lacks (DLOCK_ENOTSUP: the conformance suite's t_kinds)
   * creates nothing: the plain lock, the queue. */
  dlock_lock *p;
  CHECK_RC(dlock_plainlock_new(c, "/k/plain", "me", &p), 0);
  CHECK_RC(dlock_lock_try_acquire(p, 0, 0, NULL), DLOCK_ENOTSUP);
  dlock_lock_free(p);
  dlock_queue *q;
  if (dlock_queue_new(c, "/k/q", &q) == 0) {
    CHECK_RC(dlock_queue_offer(q, "x", 1), DLOCK_ENOTSUP);
    dlock_queue_free(q);
  }
  CHECK_RC(zoo_exists(zh, "/k", 0, &st), ZNONODE);
  dlock_lock_free(l);
  dlock_client_close(c);
  zookeeper_close(zh);
  th_zk_stop(&zk);
}

/* How many of path's children have `mark` in their name, each checked to
 * be Curator's protected name "_c_<uuid>-<mark><10 digits>". */
static int marked(zhandle_t *zh, const char *path, const char *mark) {
  struct String_vector sv = {0};
  if (zoo_get_children(zh, path, 0, &sv) != ZOK) return -1;
  int n = 0;
  for (int i = 0; i < sv.count; i++) {
    const char *m = strstr(sv.data[i], mark);
    if (m == NULL) continue;
    if (strncmp(sv.data[i], "_c_", 3) != 0 || m != sv.data[i] + 3 + 36 + 1 ||
        strlen(m) != strlen(mark) + 10)
      n = -1000;
    n++;
  }
  deallocate_String_vector(&sv);
  return n;
}

typedef struct rw_waiter {
  dlock_lock *l;
  int rc;
  uint64_t token;
} rw_waiter;

static void *rw_wait(void *arg) {
  rw_waiter *w = arg;
  w->rc = dlock_lock_try_acquire(w->l, 10000, 0, &w->token);
  return NULL;
}

/* Curator's InterProcessReadWriteLock: __READ__ and __WRIT__ nodes side by
 * side under the path. Readers share it; a writer waits for them and a
 * reader arriving behind a waiting writer waits too (one order); the write
 * holder may read (a downgrade: a second node); a reader asking for the
 * write side is refused (DLOCK_EDEADLK, no node made); status shows the
 * mode and readers; a force release deletes every holder's node. */
static void t_zk_rwlock(void) {
  ZK_SETUP(zk, zh);
  dlock_client *a = zclient(&zk, 0), *b = zclient(&zk, 0);
  CHECK(a && b);
  dlock_rwlock *ra, *rb, *rc;
  CHECK_RC(dlock_rwlock_new(a, "/rw/x", "A", &ra), 0);
  CHECK_RC(dlock_rwlock_new(b, "/rw/x", "B", &rb), 0);
  CHECK_RC(dlock_rwlock_new(b, "/rw/x", "C", &rc), 0);
  dlock_lock *rA = dlock_rwlock_read(ra);
  dlock_lock *rB = dlock_rwlock_read(rb), *wB = dlock_rwlock_write(rb);
  dlock_lock *rC = dlock_rwlock_read(rc), *wC = dlock_rwlock_write(rc);
  uint64_t t1 = 0, t2 = 0;
  CHECK_RC(dlock_lock_try_acquire(rA, 0, 0, &t1), 0);
  CHECK_RC(dlock_lock_try_acquire(rB, 0, 0, &t2), 0);
  CHECK(t1 > 0 && t2 > t1);
  CHECK_EQ(marked(zh, "/rw/x", "__READ__"), 2);
  CHECK_RC(dlock_lock_try_acquire(wB, 0, 0, NULL), DLOCK_EDEADLK);
  CHECK_RC(dlock_lock_try_acquire(wC, 0, 0, NULL), DLOCK_EBUSY);
  CHECK_EQ(marked(zh, "/rw/x", "__WRIT__"), 0);
  dlock_lock_state st;
  CHECK_RC(dlock_lock_inspect(rC, &st), 0);
  CHECK(strcmp(st.mode, "read") == 0);
  CHECK_EQ(st.readers, 2);
  CHECK_EQ(st.holders, 2);
  CHECK_RC(dlock_lock_release(rB), 1);
  /* A waiting writer queues; a reader after it waits behind it. */
  rw_waiter w = {wC, 1, 0};
  pthread_t th;
  CHECK(pthread_create(&th, NULL, rw_wait, &w) == 0);
  int64_t end = th_now_ms() + 5000;
  while (marked(zh, "/rw/x", "__WRIT__") != 1 && th_now_ms() < end)
    th_sleep_ms(5);
  CHECK_EQ(marked(zh, "/rw/x", "__WRIT__"), 1);
  CHECK_RC(dlock_lock_try_acquire(rB, 0, 0, NULL), DLOCK_EBUSY);
  CHECK_EQ(w.rc, 1); /* still waiting */
  CHECK_RC(dlock_lock_release(rA), 1);
  pthread_join(th, NULL);
  CHECK_RC(w.rc, 0);
  CHECK(w.token > t2);
  CHECK_RC(dlock_lock_inspect(rA, &st), 0);
  CHECK(strcmp(st.mode, "write") == 0);
  CHECK_EQ(st.token, w.token);
  /* The writer downgrades: it reads too, others still cannot. */
  CHECK_RC(dlock_lock_try_acquire(rC, 0, 0, NULL), 0);
  CHECK_EQ(marked(zh, "/rw/x", "__READ__"), 1);
  CHECK_RC(dlock_lock_try_acquire(rA, 0, 0, NULL), DLOCK_EBUSY);
  CHECK_RC(dlock_lock_release(wC), 1);
  CHECK_RC(dlock_lock_try_acquire(rA, 0, 0, NULL), 0);
  CHECK_RC(dlock_lock_try_acquire(wB, 0, 0, NULL), DLOCK_EBUSY);
  /* Force release: both readers' nodes go; their holds are lost. */
  CHECK_EQ(dlock_lock_force_release(wB), 1);
  CHECK_EQ(children(zh, "/rw/x", NULL, 0), 0);
  CHECK_EQ(dlock_lock_is_held(rA), 0);
  CHECK_EQ(dlock_lock_is_held(rC), 0);
  /* A mutex's node at the path: a reader (whose turn waits only for
   * writers) would hold beside its holder; refused, its node gone. */
  dlock_lock *mx;
  CHECK_RC(dlock_lock_new(a, "/rw/x", "M", &mx), 0);
  CHECK_RC(dlock_lock_try_acquire(mx, 0, 0, NULL), 0);
  CHECK_RC(dlock_lock_try_acquire(rA, 0, 0, NULL), DLOCK_EWRONGTYPE);
  CHECK_RC(dlock_lock_try_acquire(rA, 200, 0, NULL), DLOCK_EWRONGTYPE);
  CHECK_EQ(marked(zh, "/rw/x", "__READ__"), 0);
  CHECK_EQ(children(zh, "/rw/x", NULL, 0), 1);
  CHECK_RC(dlock_lock_release(mx), 1);
  CHECK_RC(dlock_lock_try_acquire(rA, 0, 0, NULL), 0); /* the control */
  /* A mutex waiting behind the reader is no holder: a force release takes
   * the reader's node alone, and the mutex then holds. */
  rw_waiter mw = {mx, 1, 0};
  CHECK(pthread_create(&th, NULL, rw_wait, &mw) == 0);
  end = th_now_ms() + 5000;
  while (marked(zh, "/rw/x", "lock-") != 1 && th_now_ms() < end)
    th_sleep_ms(5);
  CHECK_EQ(marked(zh, "/rw/x", "lock-"), 1);
  CHECK_EQ(dlock_lock_force_release(wB), 1);
  pthread_join(th, NULL);
  CHECK_RC(mw.rc, 0);
  CHECK_EQ(marked(zh, "/rw/x", "lock-"), 1);
  CHECK_RC(dlock_lock_release(mx), 1);
  dlock_lock_free(mx);
  dlock_rwlock_free(ra);
  dlock_rwlock_free(rb);
  dlock_rwlock_free(rc);
  dlock_client_close(a);
  dlock_client_close(b);
  zookeeper_close(zh);
  th_zk_stop(&zk);
}

/* What a participant's callback saw: every change, in order. */
typedef struct seen_changes {
  pthread_mutex_t mu;
  int n;
  int v[16];
} seen_changes;

static void on_change(dlock_leader *l, int leader, void *ud) {
  (void)l;
  seen_changes *s = ud;
  pthread_mutex_lock(&s->mu);
  if (s->n < 16) s->v[s->n] = leader;
  s->n++;
  pthread_mutex_unlock(&s->mu);
}

static int changes(seen_changes *s) {
  pthread_mutex_lock(&s->mu);
  int n = s->n;
  pthread_mutex_unlock(&s->mu);
  return n;
}

/* The path of the first latch node under path, its data in data. */
static int first_latch(zhandle_t *zh, const char *path, char *node, size_t len,
                       char *data, int dlen) {
  struct String_vector sv = {0};
  if (zoo_get_children(zh, path, 0, &sv) != ZOK) return -1;
  const char *best = NULL;
  for (int i = 0; i < sv.count; i++) {
    const char *m = strstr(sv.data[i], "-latch-");
    if (m && (!best || strcmp(m, strstr(best, "-latch-")) < 0))
      best = sv.data[i];
  }
  int rc = -1;
  if (best) {
    snprintf(node, len, "%s/%s", path, best);
    int n = dlen - 1;
    if (zoo_get(zh, node, 0, data, &n, NULL) == ZOK) {
      data[n < 0 ? 0 : n] = '\0';
      rc = sv.count;
    }
  }
  deallocate_String_vector(&sv);
  return rc;
}

/* Curator's LeaderLatch: the first participant to join leads, with its id
 * as its node's data and its node's czxid as the token; the second waits
 * and sees the first as leader; the leader leaving (its node deleted)
 * elects the second, told by its callback, with a larger token; a
 * leader's node deleted by hand makes it step down (told) and join again
 * at the end of the line (here: alone, so it leads again, a new token). */
static void t_zk_leader(void) {
  ZK_SETUP(zk, zh);
  dlock_client *a = zclient(&zk, 0), *b = zclient(&zk, 0);
  CHECK(a && b);
  dlock_leader *la, *lb;
  CHECK_RC(dlock_leader_new(a, "/el/x", "node-A", &la), 0);
  CHECK_RC(dlock_leader_new(b, "/el/x", "node-B", &lb), 0);
  seen_changes sb = {PTHREAD_MUTEX_INITIALIZER, 0, {0}};
  CHECK_RC(dlock_leader_on_change(lb, on_change, &sb), 0);
  char id[64];
  CHECK_RC(dlock_leader_get_current(la, id, sizeof id), 0); /* nobody */
  CHECK_RC(dlock_leader_start(la), 0);
  CHECK_RC(dlock_leader_try_await(la, 5000), 0);
  CHECK_EQ(dlock_leader_has_leadership(la), 1);
  uint64_t ta = 0, tb = 0;
  CHECK_RC(dlock_leader_token(la, &ta), 0);
  char node[300], data[64];
  CHECK_EQ(first_latch(zh, "/el/x", node, sizeof node, data, sizeof data), 1);
  CHECK(strcmp(data, "node-A") == 0);
  const char *base = strrchr(node, '/') + 1;
  CHECK(strncmp(base, "_c_", 3) == 0);
  CHECK(strcmp(base + 3 + 36, "-latch-0000000000") == 0);
  struct Stat st;
  CHECK_RC(zoo_exists(zh, node, 0, &st), ZOK);
  CHECK_EQ(ta, (uint64_t)st.czxid);
  CHECK(st.ephemeralOwner != 0);
  CHECK_RC(dlock_leader_start(lb), 0);
  CHECK_RC(dlock_leader_try_await(lb, 300), DLOCK_EBUSY);
  CHECK_EQ(dlock_leader_has_leadership(lb), 0);
  CHECK_RC(dlock_leader_token(lb, &tb), DLOCK_ENOTOWNER);
  CHECK_RC(dlock_leader_get_current(lb, id, sizeof id), 1);
  CHECK(strcmp(id, "node-A") == 0);
  CHECK_EQ(changes(&sb), 0);
  dlock_leader_free(la); /* leaves: B is elected */
  CHECK_RC(dlock_leader_try_await(lb, 5000), 0);
  CHECK_RC(dlock_leader_token(lb, &tb), 0);
  CHECK(tb > ta);
  CHECK_RC(dlock_leader_get_current(lb, id, sizeof id), 1);
  CHECK(strcmp(id, "node-B") == 0);
  CHECK_EQ(changes(&sb), 1);
  CHECK_EQ(sb.v[0], 1);
  /* B's node deleted by hand: B steps down, joins again, leads again. */
  CHECK_EQ(first_latch(zh, "/el/x", node, sizeof node, data, sizeof data), 1);
  CHECK_RC(zoo_delete(zh, node, -1), ZOK);
  int64_t end = th_now_ms() + 5000;
  while (changes(&sb) < 3 && th_now_ms() < end)
    th_sleep_ms(5);
  CHECK_EQ(changes(&sb), 3);
  CHECK_EQ(sb.v[1], 0);
  CHECK_EQ(sb.v[2], 1);
  uint64_t tb2 = 0;
  CHECK_RC(dlock_leader_token(lb, &tb2), 0);
  CHECK(tb2 > tb);
  dlock_leader_free(lb);
  CHECK_EQ(children(zh, "/el/x", NULL, 0), 0);
  /* A mutex held at the path: its node is no latch's. A participant is
   * refused (its own node deleted: the mutex's alone is left), and the
   * holder is not named as the leader. */
  dlock_lock *m;
  CHECK_RC(dlock_lock_new(a, "/el/m", NULL, &m), 0);
  CHECK_RC(dlock_lock_try_acquire(m, 0, 0, NULL), 0);
  CHECK_RC(dlock_leader_new(b, "/el/m", "node-B", &lb), 0);
  CHECK_RC(dlock_leader_get_current(lb, id, sizeof id), DLOCK_EWRONGTYPE);
  CHECK_RC(dlock_leader_start(lb), 0);
  CHECK_RC(dlock_leader_try_await(lb, 5000), DLOCK_EWRONGTYPE);
  CHECK(strstr(dlock_client_errmsg(b), "/el/m") != NULL);
  dlock_leader_free(lb);
  CHECK_EQ(children(zh, "/el/m", NULL, 0), 1);
  CHECK_RC(dlock_lock_release(m), 1);
  /* And the other way: a leader at the path, a mutex is refused (its
   * node deleted) instead of queueing behind the leader's node. */
  CHECK_RC(dlock_leader_new(b, "/el/m", "node-B", &lb), 0);
  CHECK_RC(dlock_leader_start(lb), 0);
  CHECK_RC(dlock_leader_try_await(lb, 5000), 0);
  CHECK_RC(dlock_lock_try_acquire(m, 0, 0, NULL), DLOCK_EWRONGTYPE);
  CHECK(strstr(dlock_client_errmsg(a), "latch") != NULL);
  CHECK_EQ(children(zh, "/el/m", NULL, 0), 1);
  CHECK_EQ(dlock_leader_has_leadership(lb), 1);
  dlock_leader_free(lb);
  dlock_lock_free(m);
  dlock_client_close(a);
  dlock_client_close(b);
  zookeeper_close(zh);
  th_zk_stop(&zk);
}

/* A leader paused past its session timeout (SIGSTOP): its node expires and
 * the other participant is elected with a larger token; resumed, the
 * first is told it is no longer the leader, and joins again (a new
 * session) behind the new leader, as Curator's LeaderLatch. */
static void leader_child(const th_zk *zk, int fd) {
  dlock_client *c = zclient(zk, 1000);
  dlock_leader *l;
  seen_changes s = {PTHREAD_MUTEX_INITIALIZER, 0, {0}};
  if (c == NULL || dlock_leader_new(c, "/el/exp", "paused", &l) != 0) _exit(2);
  dlock_leader_on_change(l, on_change, &s);
  uint64_t tok = 0;
  if (dlock_leader_start(l) != 0 || dlock_leader_try_await(l, 5000) != 0 ||
      dlock_leader_token(l, &tok) != 0)
    _exit(3);
  if (write(fd, &tok, sizeof tok) != sizeof tok) _exit(4);
  int64_t end = th_now_ms() + 15000;
  while (th_now_ms() < end && changes(&s) < 2)
    th_sleep_ms(5);
  int code = 0;
  if (changes(&s) != 2 || s.v[0] != 1 || s.v[1] != 0)
    code = 10 + changes(&s);
  else if (dlock_leader_has_leadership(l) != 0)
    code = 20;
  /* The step-down may come first from the lost connection, the session's
   * expiry once reconnected: then in again, behind the new leader. */
  else if (dlock_leader_try_await(l, 1500) != DLOCK_EBUSY)
    code = 30;
  else if (dlock_client_ping(c) != 0)
    code = 40;
  dlock_leader_free(l);
  dlock_client_close(c);
  _exit(code);
}

static void t_zk_leader_expiry(void) {
  NEED_ZK();
  th_zk zk;
  CHECK_RC(th_zk_start(&zk, 250), 0);
  int p[2];
  CHECK(pipe(p) == 0);
  pid_t pid = fork(); /* before any handle: the child inherits none */
  if (pid == 0) {
    close(p[0]);
    leader_child(&zk, p[1]);
  }
  close(p[1]);
  uint64_t tok = 0;
  CHECK(read(p[0], &tok, sizeof tok) == sizeof tok);
  close(p[0]);
  CHECK(tok > 0);
  kill(pid, SIGSTOP);
  dlock_client *b = zclient(&zk, 0);
  CHECK(b != NULL);
  dlock_leader *lb;
  CHECK_RC(dlock_leader_new(b, "/el/exp", "next", &lb), 0);
  CHECK_RC(dlock_leader_start(lb), 0);
  CHECK_RC(dlock_leader_try_await(lb, 10000), 0);
  uint64_t tb = 0;
  CHECK_RC(dlock_leader_token(lb, &tb), 0);
  CHECK(tb > tok);
  kill(pid, SIGCONT);
  int st;
  CHECK(waitpid(pid, &st, 0) == pid);
  CHECK(WIFEXITED(st));
  CHECK_EQ(WEXITSTATUS(st), 0);
  CHECK_EQ(dlock_leader_has_leadership(lb), 1);
  dlock_leader_free(lb);
  dlock_client_close(b);
  th_zk_stop(&zk);
}

typedef struct permit_waiter {
  dlock_permits *p;
  int rc;
  char id[DLOCK_PERMIT_ID_LEN];
} permit_waiter;

static void *permit_wait(void *arg) {
  permit_waiter *w = arg;
  w->rc = dlock_permits_try_acquire(w->p, 10000, 0, w->id);
  return NULL;
}

/* Curator's InterProcessSemaphoreV2 as the permit-expirable semaphore: the
 * count is the path's data (set once, added to); each permit is a
 * protected lease node under leases/ named by the permit's id; a taker
 * that must wait holds the locks/ mutex meanwhile (one waiter at a time)
 * and is woken by a release; a try that gives up leaves nothing; a force
 * release deletes the holder's lease. */
static void t_zk_permits(void) {
  ZK_SETUP(zk, zh);
  dlock_client *a = zclient(&zk, 0), *b = zclient(&zk, 0);
  CHECK(a && b);
  dlock_permits *pa, *pb;
  CHECK_RC(dlock_permits_new(a, "/sem/x", &pa), 0);
  CHECK_RC(dlock_permits_new(b, "/sem/x", &pb), 0);
  CHECK_EQ(dlock_permits_get_available(pa), 0);
  CHECK_EQ(dlock_permits_try_set(pa, 2), 1);
  CHECK_EQ(dlock_permits_try_set(pb, 5), 0);
  char data[16];
  int dlen = (int)sizeof data - 1;
  struct Stat st;
  CHECK_RC(zoo_get(zh, "/sem/x", 0, data, &dlen, &st), ZOK);
  data[dlen] = '\0';
  CHECK(strcmp(data, "2") == 0);
  CHECK_EQ(st.ephemeralOwner, 0);
  char id1[DLOCK_PERMIT_ID_LEN], id2[DLOCK_PERMIT_ID_LEN];
  CHECK_RC(dlock_permits_try_acquire(pa, 0, 0, id1), 0);
  CHECK_RC(dlock_permits_try_acquire(pb, 0, 0, id2), 0);
  CHECK_EQ(marked(zh, "/sem/x/leases", "lease-"), 2);
  char uuid[37], node[300] = "";
  snprintf(uuid, sizeof uuid, "%.8s-%.4s-%.4s-%.4s-%.12s", id1, id1 + 8,
           id1 + 12, id1 + 16, id1 + 20);
  struct String_vector sv = {0};
  CHECK_RC(zoo_get_children(zh, "/sem/x/leases", 0, &sv), ZOK);
  for (int i = 0; i < sv.count; i++)
    if (strncmp(sv.data[i] + 3, uuid, 36) == 0)
      snprintf(node, sizeof node, "/sem/x/leases/%s", sv.data[i]);
  deallocate_String_vector(&sv);
  CHECK(node[0] != '\0');
  CHECK_RC(zoo_exists(zh, node, 0, &st), ZOK);
  CHECK(st.ephemeralOwner != 0);
  CHECK_EQ(dlock_permits_get_available(pa), 0);
  char id3[DLOCK_PERMIT_ID_LEN];
  CHECK_RC(dlock_permits_try_acquire(pb, 0, 0, id3), DLOCK_EBUSY);
  CHECK_EQ(marked(zh, "/sem/x/leases", "lease-"), 2);
  CHECK_EQ(marked(zh, "/sem/x/locks", "lock-"), 0);
  /* A waiter holds the mutex, its lease node made, until a release. */
  permit_waiter w = {pb, 1, ""};
  pthread_t th;
  CHECK(pthread_create(&th, NULL, permit_wait, &w) == 0);
  int64_t end = th_now_ms() + 5000;
  while ((marked(zh, "/sem/x/locks", "lock-") != 1 ||
          marked(zh, "/sem/x/leases", "lease-") != 3) &&
         th_now_ms() < end)
    th_sleep_ms(5);
  CHECK_EQ(marked(zh, "/sem/x/locks", "lock-"), 1);
  CHECK_EQ(w.rc, 1);
  CHECK_RC(dlock_permits_release(pa, id1), 0);
  pthread_join(th, NULL);
  CHECK_RC(w.rc, 0);
  CHECK_EQ(marked(zh, "/sem/x/locks", "lock-"), 0);
  CHECK_EQ(marked(zh, "/sem/x/leases", "lease-"), 2);
  CHECK_RC(dlock_permits_release(pa, id1), DLOCK_ENOTOWNER);
  /* Force release by another client: the holder's lease goes. */
  CHECK_EQ(dlock_permits_force_release(pa, id2), 1);
  CHECK_EQ(dlock_permits_force_release(pa, id2), 0);
  CHECK_EQ(dlock_permits_get_available(pa), 1);
  CHECK_RC(dlock_permits_add(pa, 2), 0);
  CHECK_EQ(dlock_permits_get_available(pb), 3);
  /* The API counts in an int: past it, refused and nothing changed; a
   * count set past it by another client is said to be that. */
  CHECK_RC(dlock_permits_add(pa, INT_MAX), DLOCK_ERANGE);
  CHECK_EQ(dlock_permits_get_available(pb), 3);
  CHECK_EQ(zoo_set(zh, "/sem/x", "2147483649", 10, -1), ZOK);
  CHECK_RC(dlock_permits_get_available(pa), DLOCK_ERANGE);
  CHECK_RC(dlock_permits_add(pa, -2147483645), 0);
  CHECK_EQ(dlock_permits_get_available(pb), 3);
  CHECK_RC(dlock_permits_release(pb, w.id), 0);
  CHECK_EQ(marked(zh, "/sem/x/leases", "lease-"), 0);
  /* Redisson's counting semaphore has no ZooKeeper recipe. */
  dlock_semaphore *sem;
  CHECK_RC(dlock_semaphore_new(a, "/sem/y", &sem), 0);
  CHECK_RC(dlock_semaphore_try_set_permits(sem, 1), DLOCK_ENOTSUP);
  dlock_semaphore_free(sem);
  dlock_permits_free(pa);
  dlock_permits_free(pb);
  dlock_client_close(a);
  dlock_client_close(b);
  zookeeper_close(zh);
  th_zk_stop(&zk);
}

/* The event-loop client on zk://: its blocking calls refused leave no
 * node (a leader's query too); a waiter on the loop queues a node, and a
 * cancel deletes it. (The rest, on every kind: the conformance suite's
 * t_async_client, t_async_cancel, t_async_permits.) */
static void t_zk_async(void) {
  ZK_SETUP(zk, zh);
  td_loop t;
  CHECK_RC(td_open(&t, TD_BUILTIN), 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = zk.url;
  dlock_client *ac = NULL, *b = zclient(&zk, 0);
  CHECK(b != NULL);
  CHECK_RC(dlock_client_open_async(&o, t.lp, &ac), 0);
  dlock_lock *w, *h;
  CHECK_RC(dlock_lock_new(ac, "/as/x", "w", &w), 0);
  CHECK_RC(dlock_lock_new(b, "/as/x", "h", &h), 0);
  uint64_t ht = 0;
  CHECK_RC(dlock_lock_try_acquire(w, 0, 0, &ht), DLOCK_EINVAL);
  dlock_leader *lw;
  char who[64];
  CHECK_RC(dlock_leader_new(ac, "/as/el", "w", &lw), 0);
  CHECK_RC(dlock_leader_get_current(lw, who, sizeof who), DLOCK_EINVAL);
  dlock_leader_free(lw);
  CHECK_EQ(children(zh, "/as", NULL, 0), -1);
  CHECK_RC(dlock_lock_try_acquire(h, 0, 0, &ht), 0);
  td_got c = {0};
  dlock_op *op = NULL;
  CHECK_RC(dlock_lock_acquire_async(w, 10000, 0, td_on_done, &c, &op), 0);
  int64_t end = th_now_ms() + 5000;
  while (children(zh, "/as/x", NULL, 0) != 2 && th_now_ms() < end)
    td_run_for(&t, 5);
  CHECK_EQ(children(zh, "/as/x", NULL, 0), 2); /* queued */
  CHECK_EQ(c.calls, 0);
  dlock_op_cancel(op);
  CHECK(td_run_until(&t, &c.calls, 5000));
  CHECK_RC(c.rc, DLOCK_ECANCELED);
  CHECK_EQ(children(zh, "/as/x", NULL, 0), 1); /* h's only */
  dlock_lock_free(w);
  dlock_client_close(ac);
  td_close(&t);
  CHECK_RC(dlock_lock_release(h), 1);
  dlock_lock_free(h);
  dlock_client_close(b);
  zookeeper_close(zh);
  th_zk_stop(&zk);
}

/* When a loss was reported (0: not yet), and whether dlock_lock_is_lost
 * said so then. */
typedef struct lost_seen {
  atomic_llong at;
  atomic_int lost_then;
  int calls; /* the loop's: its thread alone reads it */
} lost_seen;

static void on_lost_at(dlock_lock *l, const char *owner, void *ud) {
  (void)owner;
  lost_seen *s = ud;
  atomic_store(&s->lost_then, dlock_lock_is_lost(l));
  atomic_store(&s->at, th_now_ms());
  s->calls++;
}

/* One moment for a loss: with the server stopped (SIGSTOP), the hold's
 * validity runs out, and the loss callback runs when dlock_lock_is_lost
 * turns 1 (within 50 ms), not at a later renewal attempt. Before that,
 * with the server up, the hold is never lost (renewed within its
 * validity, though the session is shorter than the watchdog's lease). */
static void t_zk_loss_one_moment(void) {
  NEED_ZK();
  th_zk zk;
  CHECK_RC(th_zk_start(&zk, 250), 0);
  dlock_client *a = zclient(&zk, 1000);
  CHECK(a != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(a, "/om/x", "a", &l), 0);
  lost_seen s = {0};
  dlock_lock_on_lost(l, on_lost_at, &s);
  uint64_t tok = 0;
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, &tok), 0);
  /* A session (1 s) shorter than the watchdog's lease (30 s): renewed at
   * a third of the session, never lost while the server answers. */
  for (int64_t until = th_now_ms() + 2500; th_now_ms() < until;) {
    CHECK_EQ(dlock_lock_is_lost(l), 0);
    th_sleep_ms(10);
  }
  CHECK_EQ(atomic_load(&s.at), 0);
  kill(zk.pid, SIGSTOP);
  int64_t t0 = th_now_ms(), lost_at = 0, end = t0 + 10000;
  while (th_now_ms() < end && (lost_at == 0 || atomic_load(&s.at) == 0)) {
    if (lost_at == 0 && dlock_lock_is_lost(l) == 1) lost_at = th_now_ms();
    th_sleep_ms(1);
  }
  kill(zk.pid, SIGCONT);
  long long cb = atomic_load(&s.at);
  fprintf(stderr, "    is_lost after %lld ms, the callback after %lld ms\n",
          (long long)(lost_at - t0), cb ? cb - t0 : -1);
  CHECK(lost_at > 0 && cb > 0);
  CHECK(cb - lost_at < 50 && lost_at - cb < 50);
  dlock_lock_free(l);
  dlock_client_close(a);
  th_zk_stop(&zk);
}

/* A waiter's acquire (its rc, its detail) in a thread of its own. */
typedef struct zwaiter {
  dlock_client *c;
  dlock_lock *l;    /* a lock's waiting acquire, */
  dlock_permits *p; /* or a permit's */
  int64_t wait_ms;
  int rc;
  int64_t took; /* ms */
  char id[DLOCK_PERMIT_ID_LEN];
  char msg[160];
} zwaiter;

static void *zwait(void *ud) {
  zwaiter *w = ud;
  int64_t t0 = th_now_ms();
  w->rc = w->p ? dlock_permits_try_acquire(w->p, w->wait_ms, 0, w->id)
               : dlock_lock_try_acquire(w->l, w->wait_ms, 0, NULL);
  w->took = th_now_ms() - t0;
  snprintf(w->msg, sizeof w->msg, "%s", dlock_client_errmsg(w->c));
  return NULL;
}

/* A waiter in line rides out the server's restart (killed, started again
 * with its data within the sessions' 5 s: the sessions and their nodes
 * survive), as Curator's retry loop does: it takes the lock once the
 * holder's node is deleted after the restart. So does a permit's waiter,
 * holding the semaphore's "locks" mutex with its lease node made, waiting
 * for a lease to go. Before, the connection's loss ended their waits
 * (DLOCK_ECONNLOST). */
static void t_zk_wait_rides_restart(void) {
  ZK_SETUP(zk, zh);
  dlock_client *a = zclient(&zk, 5000), *b = zclient(&zk, 5000);
  CHECK(a != NULL && b != NULL);
  dlock_lock *la, *lb;
  dlock_permits *pa, *pb;
  CHECK_RC(dlock_lock_new(a, "/wr/x", "a", &la), 0);
  CHECK_RC(dlock_lock_new(b, "/wr/x", "b", &lb), 0);
  CHECK_RC(dlock_lock_try_acquire(la, 0, 0, NULL), 0);
  CHECK_RC(dlock_permits_new(a, "/wr/p", &pa), 0);
  CHECK_RC(dlock_permits_new(b, "/wr/p", &pb), 0);
  CHECK_RC(dlock_permits_try_set(pa, 1), 1);
  char held[DLOCK_PERMIT_ID_LEN];
  CHECK_RC(dlock_permits_try_acquire(pa, 0, 0, held), 0);
  char holder[256], node[300];
  CHECK_EQ(children(zh, "/wr/x", holder, sizeof holder), 1);
  CHECK_EQ(children(zh, "/wr/p/leases", NULL, 0), 1);
  zwaiter w = {.c = b, .l = lb, .wait_ms = th_soon(30000)};
  zwaiter wp = {.c = b, .p = pb, .wait_ms = th_soon(30000)};
  pthread_t t, tp;
  pthread_create(&t, NULL, zwait, &w);
  pthread_create(&tp, NULL, zwait, &wp);
  /* b in the lock's line; b's lease node made: its wait for a lease. */
  int64_t end = th_now_ms() + th_soon(5000);
  while ((children(zh, "/wr/x", NULL, 0) < 2 ||
          children(zh, "/wr/p/leases", NULL, 0) < 2) &&
         th_now_ms() < end)
    th_sleep_ms(5);
  CHECK_EQ(children(zh, "/wr/x", NULL, 0), 2);
  CHECK_EQ(children(zh, "/wr/p/leases", NULL, 0), 2);
  th_zk_kill(&zk, SIGKILL);
  int64_t t0 = th_now_ms();
  int up = th_zk_start_again(&zk);
  int64_t back = th_now_ms() - t0;
  /* The lock's holder's node deleted after the restart, as its release
   * would; the permit released by its holder. */
  int zrc = ZCONNECTIONLOSS, zrcp = DLOCK_ECONNLOST;
  end = th_now_ms() + th_soon(10000);
  snprintf(node, sizeof node, "/wr/x/%s", holder);
  while ((zrc = zoo_delete(zh, node, -1)) != ZOK && zrc != ZNONODE &&
         th_now_ms() < end)
    th_sleep_ms(20);
  while ((zrcp = dlock_permits_release(pa, held)) != 0 && th_now_ms() < end)
    th_sleep_ms(20);
  pthread_join(t, NULL);
  pthread_join(tp, NULL);
  fprintf(stderr,
          "    the server back in %lld ms; the holders' nodes deleted: %d "
          "%d; the lock's waiter: %s %s; the permit's: %s %s\n",
          (long long)back, zrc, zrcp, dlock_err_name(w.rc), w.msg,
          dlock_err_name(wp.rc), wp.msg);
  CHECK_RC(up, 0);
  CHECK_EQ(zrc, ZOK);
  CHECK_RC(zrcp, 0);
  CHECK_WHY(w.rc == 0, w.msg);
  CHECK_WHY(wp.rc == 0, wp.msg);
  CHECK_RC(dlock_lock_release(lb), 1);
  CHECK_RC(dlock_permits_release(pb, wp.id), 0);
  dlock_permits_free(pa);
  dlock_permits_free(pb);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_close(a);
  dlock_client_close(b);
  zookeeper_close(zh);
  th_zk_stop(&zk);
}

/* A wait without a limit rides out the server's loss for 10 command
 * timeouts (DL_RIDE_TIMEOUTS) at most, as the Redis and etcd backends'
 * do: the outage is then reported (before, it was ridden out for ever:
 * with no server to say the session expired, the client never learns);
 * so does an acquire begun while the server is down. */
static void t_zk_wait_forever_down(void) {
  ZK_SETUP(zk, zh);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = zk.url;
  o.zk_connect_timeout_ms = 5000;
  o.zk_session_timeout_ms = 30000;
  o.command_timeout_ms = 200;
  dlock_client *a = zclient(&zk, 0), *b = NULL;
  CHECK(a != NULL);
  CHECK_RC(dlock_client_open(&o, &b), 0);
  dlock_lock *la, *lb;
  CHECK_RC(dlock_lock_new(a, "/wf/x", "a", &la), 0);
  CHECK_RC(dlock_lock_new(b, "/wf/x", "b", &lb), 0);
  CHECK_RC(dlock_lock_try_acquire(la, 0, 0, NULL), 0);
  zwaiter w = {.c = b, .l = lb, .wait_ms = -1};
  pthread_t t;
  pthread_create(&t, NULL, zwait, &w);
  int64_t end = th_now_ms() + th_soon(5000);
  while (children(zh, "/wf/x", NULL, 0) < 2 && th_now_ms() < end)
    th_sleep_ms(5);
  CHECK_EQ(children(zh, "/wf/x", NULL, 0), 2); /* b in line */
  int64_t t0 = th_now_ms();
  th_zk_kill(&zk, SIGKILL);
  pthread_join(t, NULL);
  int64_t took = th_now_ms() - t0;
  fprintf(stderr, "    the waiter: %s after %lld ms: %s\n",
          dlock_err_name(w.rc), (long long)took, w.msg);
  CHECK_WHY(w.rc == DLOCK_ECONNLOST || w.rc == DLOCK_ETIMEDOUT, w.msg);
  /* 20 + 40 + 80 + 160 ms, then 200 ms each: 10 timeouts' worth. */
  CHECK(took >= 10 * 200 && took < th_soon(8000));
  /* An acquire begun with the server down: its node's create, whose
   * outcome is unknown, is resolved for as long (before, for ever). */
  dlock_lock *ly;
  CHECK_RC(dlock_lock_new(b, "/wf/y", "b", &ly), 0);
  w = (zwaiter){.c = b, .l = ly, .wait_ms = -1};
  t0 = th_now_ms();
  pthread_create(&t, NULL, zwait, &w);
  pthread_join(t, NULL);
  took = th_now_ms() - t0;
  fprintf(stderr,
          "    an acquire begun with the server down: %s after %lld "
          "ms: %s\n",
          dlock_err_name(w.rc), (long long)took, w.msg);
  CHECK_WHY(w.rc == DLOCK_ECONNLOST || w.rc == DLOCK_ETIMEDOUT, w.msg);
  CHECK(took < th_soon(8000));
  dlock_lock_free(ly);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_close(b);
  dlock_client_close(a);
  zookeeper_close(zh);
  th_zk_stop(&zk);
}

/* The data of path as a string ("" if none or unreadable). */
static const char *data_of(zhandle_t *zh, const char *path, char *buf,
                           int len) {
  struct Stat st;
  int n = len - 1;
  if (zoo_get(zh, path, 0, buf, &n, &st) != ZOK || n < 0) n = 0;
  buf[n] = '\0';
  return buf;
}

/* Every recipe refuses a znode it did not make (data that is not its
 * count, children no recipe makes, another recipe's place) with
 * DLOCK_EWRONGTYPE and changes nothing: no data written, no child left;
 * dlock status names what is there. */
static void t_zk_foreign_nodes(void) {
  ZK_SETUP(zk, zh);
  dlock_client *c = zclient(&zk, 0);
  CHECK(c != NULL);
  CHECK_RC(
      zoo_create(zh, "/cfg2", "topdata", 7, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0),
      ZOK);
  CHECK_RC(zoo_create(zh, "/app", NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0),
           ZOK);
  CHECK_RC(
      zoo_create(zh, "/app/conf", "x", 1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0),
      ZOK);
  /* An application's node whose name holds a recipe's mark ("lock-")
   * without ZooKeeper's 10-digit sequence after it. */
  CHECK_RC(zoo_create(zh, "/ff", NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0),
           ZOK);
  CHECK_RC(zoo_create(zh, "/ff/block-list", "x", 1, &ZOO_OPEN_ACL_UNSAFE, 0,
                      NULL, 0),
           ZOK);
  dlock_permits *sem;
  CHECK_RC(dlock_permits_new(c, "/sem", &sem), 0);
  CHECK_EQ(dlock_permits_try_set(sem, 2), 1);
  dlock_lock *held;
  CHECK_RC(dlock_lock_new(c, "/lk", NULL, &held), 0);
  uint64_t tok;
  CHECK_RC(dlock_lock_try_acquire(held, 0, 0, &tok), 0);
  /* (path, its children before, what status calls it) */
  const struct {
    const char *path;
    int children;
    const char *type;
    bool semaphore, lock;
  } rows[] = {{"/cfg2", 0, "data", false, false},
              {"/app", 1, "nodes", false, false},
              {"/ff", 1, "nodes", false, false},
              {"/sem", 0, "znode", true, false},
              {"/lk", 1, "znode", false, true}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    const char *path = rows[i].path;
    char before[64], after[64];
    snprintf(before, sizeof before, "%s", data_of(zh, path, after, 64));
    dlock_lock *l;
    dlock_permits *p;
    dlock_leader *ld;
    dlock_rwlock *rw;
    CHECK_RC(dlock_lock_new(c, path, "x", &l), 0);
    CHECK_RC(dlock_permits_new(c, path, &p), 0);
    CHECK_RC(dlock_leader_new(c, path, "id", &ld), 0);
    CHECK_RC(dlock_rwlock_new(c, path, "rw", &rw), 0);
    if (!rows[i].lock) {
      CHECK_RC(dlock_lock_try_acquire(l, 0, 0, &tok), DLOCK_EWRONGTYPE);
      CHECK(strstr(dlock_client_errmsg(c), "not a lock") != NULL);
      CHECK_RC(dlock_lock_try_acquire(dlock_rwlock_read(rw), 0, 0, &tok),
               DLOCK_EWRONGTYPE);
      CHECK_RC(dlock_lock_try_acquire(dlock_rwlock_write(rw), 0, 0, &tok),
               DLOCK_EWRONGTYPE);
      CHECK_RC(dlock_leader_start(ld), DLOCK_EWRONGTYPE);
      CHECK_RC(dlock_lock_force_release(l), DLOCK_EWRONGTYPE);
    }
    if (!rows[i].semaphore) {
      CHECK_RC(dlock_permits_try_set(p, 2), DLOCK_EWRONGTYPE);
      CHECK(strstr(dlock_client_errmsg(c), "not a semaphore") != NULL);
      CHECK_RC(dlock_permits_add(p, 1), DLOCK_EWRONGTYPE);
      char id[DLOCK_PERMIT_ID_LEN];
      CHECK_RC(dlock_permits_try_acquire(p, 0, 0, id), DLOCK_EWRONGTYPE);
    }
    CHECK(strcmp(data_of(zh, path, after, 64), before) == 0);
    CHECK_EQ(children(zh, path, NULL, 0), rows[i].children);
    dlock_lock_state st;
    CHECK_RC(dlock_lock_inspect(l, &st), 0);
    CHECK(strcmp(st.type, rows[i].type) == 0);
    CHECK_EQ(st.counter >= 0, rows[i].semaphore);
    dlock_lock_free(l);
    dlock_permits_free(p);
    dlock_leader_free(ld);
    dlock_rwlock_free(rw);
  }
  /* An empty node the recipes may use: a lock, then a semaphore's count. */
  CHECK_RC(zoo_create(zh, "/empty", NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0),
           ZOK);
  dlock_lock *e;
  CHECK_RC(dlock_lock_new(c, "/empty", NULL, &e), 0);
  CHECK_RC(dlock_lock_try_acquire(e, 0, 0, &tok), 0);
  CHECK_RC(dlock_lock_release(e), 1);
  dlock_lock_free(e);
  CHECK_RC(dlock_lock_release(held), 1);
  dlock_lock_free(held);
  dlock_permits_free(sem);
  dlock_client_close(c);
  zookeeper_close(zh);
  th_zk_stop(&zk);
}

/* dlock_client_close with the server stopped (SIGSTOP) returns within
 * its bound (zookeeper_close alone waited 1.5 s for the close's answer),
 * and the close still reaches the server: once it runs again, the
 * client's node is gone at once, not at the session's timeout (5 s). */
static void t_zk_close_unanswered(void) {
  ZK_SETUP(zk, zh);
  dlock_client *a = zclient(&zk, 5000);
  CHECK(a != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(a, "/cu/x", "a", &l), 0);
  uint64_t tok;
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, &tok), 0);
  dlock_lock_free(l); /* the hold stays: the session's end takes it */
  CHECK_EQ(children(zh, "/cu/x", NULL, 0), 1);
  kill(zk.pid, SIGSTOP);
  int64_t t0 = th_now_ms();
  dlock_client_close(a);
  int64_t ms = th_now_ms() - t0;
  kill(zk.pid, SIGCONT);
  fprintf(stderr, "    closed in %lld ms with the server stopped\n",
          (long long)ms);
  CHECK(ms < 500);
  int64_t end = th_now_ms() + 2500;
  while (children(zh, "/cu/x", NULL, 0) != 0 && th_now_ms() < end)
    th_sleep_ms(10);
  CHECK_EQ(children(zh, "/cu/x", NULL, 0), 0);
  zookeeper_close(zh);
  th_zk_stop(&zk);
}

/* The multi-lock over ZooKeeper mutexes: all or nothing (one of them held
 * elsewhere: nothing taken, no node left), tokens per lock, released
 * together. */
static void t_zk_multilock(void) {
  ZK_SETUP(zk, zh);
  dlock_client *a = zclient(&zk, 0), *b = zclient(&zk, 0);
  CHECK(a && b);
  dlock_lock *l[3], *other;
  const char *names[3] = {"/ml/c", "/ml/a", "/ml/b"};
  for (int i = 0; i < 3; i++)
    CHECK_RC(dlock_lock_new(a, names[i], "me", &l[i]), 0);
  CHECK_RC(dlock_lock_new(b, "/ml/b", "other", &other), 0);
  dlock_multilock *m;
  CHECK_RC(dlock_multilock_new(l, 3, &m), 0);
  CHECK_RC(dlock_lock_try_acquire(other, 0, 0, NULL), 0);
  uint64_t tok[3] = {0};
  CHECK_RC(dlock_multilock_try_acquire(m, 200, 0, tok), DLOCK_EBUSY);
  for (int i = 0; i < 3; i++) {
    CHECK_EQ(dlock_lock_is_held(l[i]), 0);
    CHECK_EQ(children(zh, names[i], NULL, 0) > 0,
             strcmp(names[i], "/ml/b") == 0);
  }
  CHECK_RC(dlock_lock_release(other), 1);
  CHECK_RC(dlock_multilock_try_acquire(m, 2000, 0, tok), 0);
  for (int i = 0; i < 3; i++) {
    CHECK(tok[i] > 0);
    CHECK_EQ(dlock_lock_is_held(l[i]), 1);
  }
  CHECK_RC(dlock_lock_try_acquire(other, 0, 0, NULL), DLOCK_EBUSY);
  CHECK_RC(dlock_multilock_release(m), 0);
  for (int i = 0; i < 3; i++)
    CHECK(children(zh, names[i], NULL, 0) <= 0);
  dlock_multilock_free(m);
  for (int i = 0; i < 3; i++)
    dlock_lock_free(l[i]);
  dlock_lock_free(other);
  dlock_client_close(a);
  dlock_client_close(b);
  zookeeper_close(zh);
  th_zk_stop(&zk);
}

typedef struct waiter {
  dlock_lock *l;
  uint64_t token;
  int rc;
  atomic_int done;
  int64_t at;
} waiter;

static void *wait_thread(void *arg) {
  waiter *w = arg;
  w->rc = dlock_lock_try_acquire(w->l, 10000, 0, &w->token);
  w->at = th_now_ms();
  atomic_store(&w->done, 1);
  return NULL;
}

static bool is_done(void *arg) {
  return atomic_load(&((waiter *)arg)->done);
}

typedef struct kids {
  zhandle_t *zh;
  const char *path;
  int n;
} kids;
static bool has_kids(void *arg) {
  kids *k = arg;
  return children(k->zh, k->path, NULL, 0) == k->n;
}

static atomic_int lost_calls;
static void on_lost(dlock_lock *l, const char *owner, void *ud) {
  (void)l;
  (void)owner;
  (void)ud;
  atomic_fetch_add(&lost_calls, 1);
}

/* The holder, in a child process: acquires, says so on `fd`, then waits
 * (after the parent's SIGSTOP and SIGCONT) for the loss to be reported;
 * exits 0 if it was (callback and dlock_lock_is_lost), 1 if not in 10 s. */
/* What a client's state callback saw (a bit per dlock_conn_state). */
static atomic_int states_seen;

static void on_state(dlock_client *c, dlock_conn_state st, void *ud) {
  (void)c;
  (void)ud;
  atomic_fetch_or(&states_seen, 1 << st);
}

static void holder_child(const th_zk *zk, int fd) {
  dlock_client *c = zclient(zk, 1000);
  dlock_lock *l;
  if (c == NULL || dlock_lock_new(c, "/exp", "held", &l) != 0) _exit(2);
  if (dlock_client_on_state(c, on_state, NULL) != 0) _exit(5);
  dlock_lock_on_lost(l, on_lost, NULL);
  uint64_t tok = 0;
  if (dlock_lock_try_acquire(l, 0, 0, &tok) != 0) _exit(3);
  if (write(fd, &tok, sizeof tok) != sizeof tok) _exit(4);
  int64_t end = th_now_ms() + 15000;
  /* The loss is reported when the hold's validity runs out (at once on
   * SIGCONT), the session's states as the client learns them. */
  int both = 1 << DLOCK_CONN_SUSPENDED | 1 << DLOCK_CONN_LOST;
  /* A new session may follow at once (told or not yet). */
  int new_session = 1 << DLOCK_CONN_NEW_SESSION;
  while (th_now_ms() < end &&
         !(atomic_load(&lost_calls) > 0 && dlock_lock_is_lost(l) == 1 &&
           (atomic_load(&states_seen) & ~new_session) == both))
    th_sleep_ms(5);
  int code = 0;
  if (atomic_load(&lost_calls) != 1)
    code = 10 + atomic_load(&lost_calls);
  else if (dlock_lock_is_lost(l) != 1)
    code = 20;
  /* Never silently re-acquired: the node is gone, not re-created. */
  else if (dlock_lock_is_held(l) != 0)
    code = 30;
  /* Told: the connection lost, then the session. */
  else if ((atomic_load(&states_seen) & ~new_session) != both)
    code = 40 + atomic_load(&states_seen);
  if (code)
    fprintf(stderr, "    child: %d: %s\n", code, dlock_client_errmsg(c));
  /* Everything freed: valgrind checks this process's leaks too. */
  dlock_lock_free(l);
  dlock_client_close(c);
  _exit(code);
}

/* A holder paused past its session timeout (SIGSTOP): the server expires
 * the session and its node, another client takes the lock with a larger
 * token; resumed, the holder is told the lock was lost. */
static void t_zk_session_expiry_loss(void) {
  NEED_ZK();
  th_zk zk;
  CHECK_RC(th_zk_start(&zk, 250), 0);
  int p[2];
  CHECK(pipe(p) == 0);
  pid_t pid = fork(); /* before any handle: the child inherits none */
  if (pid == 0) {
    close(p[0]);
    holder_child(&zk, p[1]);
  }
  close(p[1]);
  zhandle_t *zh = raw(&zk);
  CHECK(zh != NULL);
  uint64_t tok = 0;
  CHECK(read(p[0], &tok, sizeof tok) == sizeof tok);
  close(p[0]);
  CHECK(tok > 0);
  kill(pid, SIGSTOP);
  dlock_client *b = zclient(&zk, 0);
  CHECK(b != NULL);
  dlock_lock *lb;
  CHECK_RC(dlock_lock_new(b, "/exp", "b", &lb), 0);
  uint64_t tb = 0;
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_try_acquire(lb, 10000, 0, &tb), 0);
  fprintf(stderr, "    taken over after %lld ms\n",
          (long long)(th_now_ms() - t0));
  CHECK(tb > tok);
  kill(pid, SIGCONT);
  int st;
  CHECK(waitpid(pid, &st, 0) == pid);
  CHECK(WIFEXITED(st));
  CHECK_EQ(WEXITSTATUS(st), 0);
  CHECK_EQ(dlock_lock_is_held(lb), 1);
  CHECK_EQ(children(zh, "/exp", NULL, 0), 1);
  CHECK_RC(dlock_lock_release(lb), 1);
  dlock_lock_free(lb);
  dlock_client_close(b);
  zookeeper_close(zh);
  th_zk_stop(&zk);
}

/* A 3-server ensemble: a lock held through the leader's death (SIGKILL):
 * the others elect a new leader, the holder's session moves to a live
 * server, and the lock is still held and still excludes; the dead server
 * restarted rejoins. */
static void t_zk_ensemble_leader_killed(void) {
  NEED_ZK();
  th_zk zk[3];
  char url[200];
  int64_t t0 = th_now_ms();
  CHECK_RC(th_zk_ensemble_start(zk, 250, url, sizeof url), 0);
  fprintf(stderr, "    ensemble up in %lld ms\n",
          (long long)(th_now_ms() - t0));
  int leader = th_zk_leader(zk);
  CHECK(leader >= 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.zk_connect_timeout_ms = 5000;
  o.zk_session_timeout_ms = 4000;
  dlock_client *a = NULL, *b = NULL;
  CHECK_RC(dlock_client_open(&o, &a), 0);
  CHECK_RC(dlock_client_open(&o, &b), 0);
  dlock_lock *la, *lb;
  CHECK_RC(dlock_lock_new(a, "/ens/x", "a", &la), 0);
  CHECK_RC(dlock_lock_new(b, "/ens/x", "b", &lb), 0);
  dlock_lock_on_lost(la, on_lost, NULL);
  atomic_store(&lost_calls, 0);
  uint64_t t1 = 0;
  CHECK_RC(dlock_lock_try_acquire(la, 0, 0, &t1), 0);
  atomic_store(&states_seen, 0);
  CHECK_RC(dlock_client_on_state(a, on_state, NULL), 0);
  t0 = th_now_ms();
  th_zk_kill(&zk[leader], SIGKILL);
  int64_t end = th_now_ms() + 20000;
  int next = -1;
  while ((next = th_zk_leader(zk)) < 0 && th_now_ms() < end)
    th_sleep_ms(20);
  CHECK(next >= 0 && next != leader);
  fprintf(stderr, "    new leader after %lld ms\n",
          (long long)(th_now_ms() - t0));
  /* Every server drops its clients while there is no leader: the holder
   * is told, then reconnects with its session. */
  int both = 1 << DLOCK_CONN_SUSPENDED | 1 << DLOCK_CONN_RECONNECTED;
  while (atomic_load(&states_seen) != both && th_now_ms() < end)
    th_sleep_ms(5);
  CHECK_EQ(atomic_load(&states_seen), both);
  CHECK_EQ(dlock_lock_is_held(la), 1);
  CHECK_RC(dlock_lock_try_acquire(lb, 0, 0, NULL), DLOCK_EBUSY);
  CHECK_RC(th_zk_start_again(&zk[leader]), 0);
  CHECK_EQ(atomic_load(&lost_calls), 0);
  CHECK_RC(dlock_lock_release(la), 1);
  uint64_t t2 = 0;
  CHECK_RC(dlock_lock_try_acquire(lb, 0, 0, &t2), 0);
  CHECK(t2 > t1);
  CHECK_RC(dlock_lock_release(lb), 1);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_close(a);
  dlock_client_close(b);
  for (int i = 0; i < 3; i++)
    th_zk_stop(&zk[i]);
}

/* The server restarted while a lock is held: the client is told its
 * connection was lost (SUSPENDED), then that it is back with the same
 * session (RECONNECTED); the hold is kept (its node was restored with the
 * session), no loss is reported, and the lock still excludes others. */
static void t_zk_server_restart(void) {
  ZK_SETUP(zk, zh);
  zookeeper_close(zh);
  dlock_client *a = zclient(&zk, 5000), *b = zclient(&zk, 0);
  CHECK(a && b);
  atomic_store(&states_seen, 0);
  CHECK_RC(dlock_client_on_state(a, on_state, NULL), 0);
  dlock_lock *la, *lb;
  CHECK_RC(dlock_lock_new(a, "/rs/x", "a", &la), 0);
  CHECK_RC(dlock_lock_new(b, "/rs/x", "b", &lb), 0);
  dlock_lock_on_lost(la, on_lost, NULL);
  atomic_store(&lost_calls, 0);
  uint64_t t1 = 0;
  CHECK_RC(dlock_lock_try_acquire(la, 0, 0, &t1), 0);
  CHECK_RC(th_zk_restart(&zk), 0);
  int64_t end = th_now_ms() + 10000;
  while (atomic_load(&states_seen) !=
             (1 << DLOCK_CONN_SUSPENDED | 1 << DLOCK_CONN_RECONNECTED) &&
         th_now_ms() < end)
    th_sleep_ms(5);
  CHECK_EQ(atomic_load(&states_seen),
           1 << DLOCK_CONN_SUSPENDED | 1 << DLOCK_CONN_RECONNECTED);
  CHECK_EQ(dlock_lock_is_held(la), 1);
  dlock_metrics m;
  CHECK_RC(dlock_client_metrics(a, &m), 0);
  CHECK_EQ(m.reconnects, 1); /* dlock_metrics counts the one reconnect */
  /* b's session reconnects on its own schedule (under valgrind, after a's
   * was back): until it answers, its requests would time out. */
  end = th_now_ms() + 10000;
  while (dlock_client_ping(b) != 0 && th_now_ms() < end)
    th_sleep_ms(20);
  CHECK_RC(dlock_client_ping(b), 0);
  CHECK_RC(dlock_lock_try_acquire(lb, 0, 0, NULL), DLOCK_EBUSY);
  CHECK_EQ(atomic_load(&lost_calls), 0);
  uint64_t tok = 0;
  CHECK_RC(dlock_lock_current_token(la, &tok), 0);
  CHECK_EQ(tok, t1);
  CHECK_RC(dlock_lock_release(la), 1);
  CHECK_RC(dlock_lock_try_acquire(lb, 0, 0, NULL), 0);
  CHECK_RC(dlock_lock_release(lb), 1);
  CHECK_RC(dlock_client_on_state(a, NULL, NULL), 0);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_close(a);
  dlock_client_close(b);
  th_zk_stop(&zk);
}

/* zk:// URLs: a malformed one is refused at once, an address where no
 * server answers fails the open after the connect timeout. */
static void t_zk_url(void) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  CHECK_EQ(o.zk_session_timeout_ms, 60000);
  CHECK_EQ(o.zk_connect_timeout_ms, 15000);
  dlock_client *c = (dlock_client *)1;
  const char *bad[] = {"zk://",
                       "zk://host",
                       "zk://h:0",
                       "zk://h:1,",
                       "zk://h:1/",
                       "zk://h:1/a/",
                       "zk://h:1//a",
                       "zk://:pw@h:1",
                       "zk://u:p@h@:1",
                       "zk://h:1?foo=1",
                       "zk://h:1?session_timeout=10",
                       "zk://h:1?session_timeout=0s",
                       "zk://h:1/a?connect_timeout=2s&",
                       "zk://h:1?connect_timeout=2h",
                       "zk://h:1?acl=all",
                       "zk://h:1?acl=creator"};
  CHECK(th_urls_refused(bad, sizeof bad / sizeof bad[0]));
  /* An unknown option is named; a password is never shown. */
  o.url = "zk://svc:hunter2@h:1/app?sessiontimeout=1s";
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_EURL);
  CHECK(strstr(dlock_client_open_errmsg(), "sessiontimeout") != NULL);
  CHECK(strstr(dlock_client_open_errmsg(), "hunter2") == NULL);
  /* A user without a password (none in the options either). */
  o.url = "zk://svc@127.0.0.1:1";
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_EAUTH);
  o.url = "zk://127.0.0.1:1,127.0.0.1:2/app";
  o.zk_session_timeout_ms = 0;
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_EINVAL);
  o.zk_session_timeout_ms = 60000;
  o.zk_connect_timeout_ms = 300;
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_ECONNECT);
  CHECK(th_now_ms() - t0 >= 290);
  CHECK(strstr(dlock_client_open_errmsg(), "ZooKeeper") != NULL);
  /* The connect timeout from the URL (the CLI's only way to set it). */
  dlock_client_options_init(&o);
  o.url = "zk://127.0.0.1:1/app?session_timeout=10s&connect_timeout=300ms";
  t0 = th_now_ms();
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_ECONNECT);
  int64_t took = th_now_ms() - t0;
  fprintf(stderr, "    ?connect_timeout=300ms: failed after %lld ms\n",
          (long long)took);
  CHECK(took >= 290 && took < 3000);
  CHECK(strstr(dlock_client_open_errmsg(), "300 ms") != NULL);
}

/* dlock_lock_inspect on zk://: the first node's owner, info and czxid, the
 * nodes queued behind it; a path with nothing is "none". */
static void t_zk_inspect(void) {
  ZK_SETUP(zk, zh);
  dlock_client *a = zclient(&zk, 0), *b = zclient(&zk, 0);
  CHECK(a && b);
  dlock_lock *la, *lb;
  CHECK_RC(dlock_lock_new(a, "/i/x", "a", &la), 0);
  CHECK_RC(dlock_lock_new(b, "/i/x", "b", &lb), 0);
  dlock_lock_state st;
  CHECK_RC(dlock_lock_inspect(la, &st), 0);
  CHECK(strcmp(st.type, "none") == 0);
  CHECK_EQ(st.held, 0);
  CHECK_RC(dlock_lock_set_info(la, "pid 42 on host h"), 0);
  uint64_t tok = 0;
  CHECK_RC(dlock_lock_try_acquire(la, 0, 0, &tok), 0);
  waiter wb = {.l = lb};
  pthread_t tb;
  pthread_create(&tb, NULL, wait_thread, &wb);
  kids k = {zh, "/i/x", 2};
  CHECK(th_wait_for(has_kids, &k, 5000));
  CHECK_RC(dlock_lock_inspect(lb, &st), 0);
  CHECK(strcmp(st.type, "znode") == 0);
  CHECK_EQ(st.held, 1);
  char want[300];
  snprintf(want, sizeof want, "%s:a", dlock_client_id(a));
  CHECK(strcmp(st.owner, want) == 0);
  CHECK(strcmp(st.info, "pid 42 on host h") == 0);
  CHECK_EQ(st.token, tok);
  CHECK_EQ(st.queued, 1);
  CHECK_EQ(st.ttl_ms, -1);
  CHECK(st.held_ms >= 0 && st.held_ms < 60000);
  CHECK_RC(dlock_lock_release(la), 1);
  CHECK(th_wait_for(is_done, &wb, 5000));
  CHECK_RC(wb.rc, 0);
  pthread_join(tb, NULL);
  CHECK_RC(dlock_lock_inspect(la, &st), 0);
  snprintf(want, sizeof want, "%s:b", dlock_client_id(b));
  CHECK(strcmp(st.owner, want) == 0);
  CHECK_EQ(st.queued, 0);
  CHECK_RC(dlock_lock_release(lb), 1);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_close(a);
  dlock_client_close(b);
  zookeeper_close(zh);
  th_zk_stop(&zk);
}

/* A chroot: lock names are relative to it. */
static void t_zk_chroot(void) {
  ZK_SETUP(zk, zh);
  CHECK_RC(zoo_create(zh, "/app", NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0),
           ZOK);
  dlock_client_options o;
  dlock_client_options_init(&o);
  char url[128];
  snprintf(url, sizeof url, "%s/app", zk.url);
  o.url = url;
  dlock_client *c;
  CHECK_RC(dlock_client_open(&o, &c), 0);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "/locks/x", "me", &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, NULL), 0);
  CHECK_EQ(children(zh, "/app/locks/x", NULL, 0), 1);
  CHECK_RC(dlock_lock_release(l), 1);
  dlock_lock_free(l);
  dlock_client_close(c);
  /* A chroot that does not exist: the open fails at once, naming it (no
   * command hangs or fails later with "no node"); nothing is created. */
  snprintf(url, sizeof url, "%s/no/such/chroot", zk.url);
  int64_t t0 = th_now_ms();
  c = (dlock_client *)1;
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_EURL);
  CHECK(c == NULL);
  CHECK(th_now_ms() - t0 < 3000);
  CHECK(strstr(dlock_client_open_errmsg(), "/no/such/chroot") != NULL);
  CHECK(strstr(dlock_client_open_errmsg(), "does not exist") != NULL);
  struct Stat st;
  CHECK_RC(zoo_exists(zh, "/no", 0, &st), ZNONODE);
  zookeeper_close(zh);
  th_zk_stop(&zk);
}

static dlock_client *zclient_url(const char *url, const char *password) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.password = password;
  o.zk_connect_timeout_ms = 5000;
  dlock_client *c = NULL;
  if (dlock_client_open(&o, &c) != 0)
    fprintf(stderr, "    open: %s\n", dlock_client_open_errmsg());
  return c;
}

/* Digest authentication (zk://USER:PASSWORD@...): a lock's nodes are its
 * identity's alone (creator-only ACL). A client without the credentials,
 * or with another identity, can neither take nor delete a lock held by
 * an authenticated one: DLOCK_ENOPERM; a client of the same identity (its
 * password from the options) works with it. The containers above the
 * lock stay readable and open to creating for everyone. */
static void t_zk_auth(void) {
  ZK_SETUP(zk, zh);
  char url[200], url_user[200], url_other[200];
  snprintf(url, sizeof url, "zk://svc:s3cret@%s", zk.connect);
  snprintf(url_user, sizeof url_user, "zk://svc@%s", zk.connect);
  snprintf(url_other, sizeof url_other, "zk://other:pw@%s", zk.connect);
  dlock_client *a = zclient_url(url, NULL);
  dlock_client *same = zclient_url(url_user, "s3cret");
  dlock_client *other = zclient_url(url_other, NULL);
  dlock_client *anon = zclient(&zk, 0);
  CHECK(a && same && other && anon);
  dlock_lock *la, *ls, *lo, *ln;
  CHECK_RC(dlock_lock_new(a, "/sec/x", "a", &la), 0);
  CHECK_RC(dlock_lock_new(same, "/sec/x", "s", &ls), 0);
  CHECK_RC(dlock_lock_new(other, "/sec/x", "o", &lo), 0);
  CHECK_RC(dlock_lock_new(anon, "/sec/x", "n", &ln), 0);
  uint64_t tok = 0;
  CHECK_RC(dlock_lock_try_acquire(la, 0, 0, &tok), 0);
  /* A raw handle of the same identity sees the nodes. */
  zhandle_t *zs = raw(&zk);
  CHECK(zs != NULL);
  CHECK_RC(zoo_add_auth(zs, "digest", "svc:s3cret", 10, NULL, NULL), ZOK);
  char node[256], path[300];
  CHECK_EQ(children(zs, "/sec/x", node, sizeof node), 1);
  snprintf(path, sizeof path, "/sec/x/%s", node);
  /* The lock's nodes: the creator's identity only. */
  struct ACL_vector acl;
  struct Stat st;
  CHECK_RC(zoo_get_acl(zs, path, &acl, &st), ZOK);
  CHECK_EQ(acl.count, 1);
  CHECK(strcmp(acl.data[0].id.scheme, "digest") == 0);
  CHECK(strncmp(acl.data[0].id.id, "svc:", 4) == 0);
  CHECK_EQ(acl.data[0].perms, ZOO_PERM_ALL);
  deallocate_ACL_vector(&acl);
  CHECK_RC(zoo_get_acl(zs, "/sec/x", &acl, &st), ZOK);
  CHECK_EQ(acl.count, 1);
  deallocate_ACL_vector(&acl);
  zookeeper_close(zs);
  /* Without the credentials: no delete (raw), no take, no force release. */
  CHECK_RC(zoo_delete(zh, path, -1), ZNOAUTH);
  CHECK_RC(dlock_lock_try_acquire(ln, 0, 0, NULL), DLOCK_ENOPERM);
  CHECK_RC(dlock_lock_force_release(ln), DLOCK_ENOPERM);
  CHECK_RC(dlock_lock_try_acquire(lo, 0, 0, NULL), DLOCK_ENOPERM);
  CHECK_RC(dlock_lock_force_release(lo), DLOCK_ENOPERM);
  CHECK(strstr(dlock_client_errmsg(other), "/sec/x") != NULL);
  CHECK_EQ(dlock_lock_is_held(la), 1);
  CHECK_EQ(children(zh, "/sec/x", NULL, 0), -1); /* not even listed */
  /* The same identity: it waits its turn like any contender. */
  CHECK_RC(dlock_lock_try_acquire(ls, 0, 0, NULL), DLOCK_EBUSY);
  CHECK_RC(dlock_lock_release(la), 1);
  CHECK_RC(dlock_lock_try_acquire(ls, 0, 0, NULL), 0);
  CHECK_RC(dlock_lock_release(ls), 1);
  /* The parent: readable and open to creating; another identity's lock
   * beside ours, its own. */
  CHECK_RC(zoo_get_acl(zh, "/sec", &acl, &st), ZOK);
  CHECK_EQ(acl.count, 2);
  deallocate_ACL_vector(&acl);
  /* acl=read: the others may look, not take; acl=open: as without
   * authentication. */
  char url_read[250], url_open[250];
  snprintf(url_read, sizeof url_read, "%s?acl=read", url);
  snprintf(url_open, sizeof url_open, "%s?acl=open", url);
  dlock_client *r = zclient_url(url_read, NULL);
  dlock_client *op = zclient_url(url_open, NULL);
  CHECK(r && op);
  dlock_lock *lr, *lop, *lnr, *lnop;
  CHECK_RC(dlock_lock_new(r, "/sec/r", "r", &lr), 0);
  CHECK_RC(dlock_lock_new(op, "/sec/o", "p", &lop), 0);
  CHECK_RC(dlock_lock_new(anon, "/sec/r", "n", &lnr), 0);
  CHECK_RC(dlock_lock_new(anon, "/sec/o", "n", &lnop), 0);
  CHECK_RC(dlock_lock_try_acquire(lr, 0, 0, NULL), 0);
  CHECK_RC(dlock_lock_try_acquire(lop, 0, 0, NULL), 0);
  dlock_lock_state ist;
  CHECK_RC(dlock_lock_inspect(lnr, &ist), 0);
  CHECK_EQ(ist.held, 1);
  CHECK_RC(dlock_lock_try_acquire(lnr, 0, 0, NULL), DLOCK_ENOPERM);
  CHECK_RC(dlock_lock_force_release(lnr), DLOCK_ENOPERM);
  CHECK_RC(dlock_lock_try_acquire(lnop, 0, 0, NULL), DLOCK_EBUSY);
  CHECK_RC(dlock_lock_release(lr), 1);
  CHECK_RC(dlock_lock_release(lop), 1);
  dlock_lock_free(lr);
  dlock_lock_free(lop);
  dlock_lock_free(lnr);
  dlock_lock_free(lnop);
  dlock_client_close(r);
  dlock_client_close(op);
  dlock_lock *lo2;
  CHECK_RC(dlock_lock_new(other, "/sec/y", "o", &lo2), 0);
  CHECK_RC(dlock_lock_try_acquire(lo2, 0, 0, NULL), 0);
  CHECK_RC(dlock_lock_release(lo2), 1);
  dlock_lock_free(lo2);
  dlock_lock_free(la);
  dlock_lock_free(ls);
  dlock_lock_free(lo);
  dlock_lock_free(ln);
  dlock_client_close(a);
  dlock_client_close(same);
  dlock_client_close(other);
  dlock_client_close(anon);
  zookeeper_close(zh);
  th_zk_stop(&zk);
}

static atomic_int conn_states[5];
static void count_state(dlock_client *c, dlock_conn_state st, void *ud) {
  (void)c;
  (void)ud;
  if ((int)st >= 0 && (int)st < 5) atomic_fetch_add(&conn_states[st], 1);
}

static bool any_loss_seen(void *ud) {
  (void)ud;
  return atomic_load(&lost_calls) > 0;
}

static bool new_session_seen(void *ud) {
  (void)ud;
  return atomic_load(&conn_states[DLOCK_CONN_NEW_SESSION]) > 0;
}

/* The child of t_zk_session_renewed: holds /sess/x and stands by in the
 * election /sess/el (the parent leads), is paused past its session, then
 * checks that it was told, works again and is still in the election.
 * Pipes: `out` to the parent, `in` from it. */
static void renewed_child(const th_zk *zk, int out, int in) {
  char byte = 0;
  dlock_client *a = zclient(zk, 1000);
  dlock_lock *la;
  if (a == NULL || dlock_lock_new(a, "/sess/x", "a", &la) != 0) _exit(2);
  if (dlock_client_on_state(a, count_state, NULL) != 0) _exit(3);
  dlock_lock_on_lost(la, on_lost, NULL);
  uint64_t t1 = 0, t2 = 0;
  if (dlock_lock_try_acquire(la, 0, 0, &t1) != 0) _exit(4);
  if (write(out, &t1, sizeof t1) != sizeof t1) _exit(5);
  if (read(in, &byte, 1) != 1) _exit(6); /* the parent leads */
  dlock_leader *standby;
  if (dlock_leader_new(a, "/sess/el", "a", &standby) != 0 ||
      dlock_leader_start(standby) != 0 ||
      dlock_leader_try_await(standby, 300) != DLOCK_EBUSY)
    _exit(7);
  if (write(out, &byte, 1) != 1) _exit(8); /* pause me */
  int code = 0;
  if (!th_wait_for(any_loss_seen, NULL, 15000))
    code = 10;
  else if (!th_wait_for(new_session_seen, NULL, 15000))
    code = 11;
  else if (atomic_load(&conn_states[DLOCK_CONN_LOST]) != 1)
    code = 12;
  else if (dlock_lock_is_held(la) != 0)
    code = 13;
  /* The same client takes the lock again, with a larger token. */
  else if (dlock_lock_try_acquire(la, 0, 0, &t2) != 0)
    code = 14;
  else if (t2 <= t1)
    code = 15;
  else if (dlock_lock_release(la) != 1)
    code = 16;
  /* The standby is still in the election (not "gone"), behind the
   * parent, and leads once the parent leaves. */
  else if (dlock_leader_try_await(standby, 300) != DLOCK_EBUSY)
    code = 17;
  byte = (char)code;
  if (write(out, &byte, 1) != 1) _exit(9);
  if (code == 0 && read(in, &byte, 1) != 1) _exit(18); /* parent left */
  if (code == 0 && dlock_leader_try_await(standby, 10000) != 0) code = 19;
  if (code)
    fprintf(stderr, "    child: %d: %s\n", code, dlock_client_errmsg(a));
  dlock_leader_free(standby);
  dlock_lock_free(la);
  dlock_client_close(a);
  _exit(code);
}

/* A client whose session expires (its process paused past the session
 * timeout, the server running) is told its hold was lost
 * (DLOCK_CONN_LOST, the loss callback), opens a new session by itself
 * (DLOCK_CONN_NEW_SESSION) and works again: the same client takes the lock
 * again; its standby in an election joins again and leads once the
 * leader leaves (it is not out for good). */
static void t_zk_session_renewed(void) {
  NEED_ZK();
  th_zk zk;
  CHECK_RC(th_zk_start(&zk, 250), 0);
  int up[2], down[2];
  CHECK(pipe(up) == 0 && pipe(down) == 0);
  pid_t pid = fork(); /* before any handle: the child inherits none */
  if (pid == 0) {
    close(up[0]);
    close(down[1]);
    renewed_child(&zk, up[1], down[0]);
  }
  close(up[1]);
  close(down[0]);
  uint64_t tok = 0;
  char byte = 1;
  CHECK(read(up[0], &tok, sizeof tok) == sizeof tok);
  dlock_client *b = zclient(&zk, 0);
  CHECK(b != NULL);
  dlock_leader *lead;
  CHECK_RC(dlock_leader_new(b, "/sess/el", "b", &lead), 0);
  CHECK_RC(dlock_leader_start(lead), 0);
  CHECK_RC(dlock_leader_try_await(lead, 5000), 0);
  CHECK(write(down[1], &byte, 1) == 1);
  CHECK(read(up[0], &byte, 1) == 1); /* the child stands by */
  kill(pid, SIGSTOP);
  th_sleep_ms(3000); /* the fault: three session timeouts */
  kill(pid, SIGCONT);
  CHECK(read(up[0], &byte, 1) == 1);
  CHECK_EQ(byte, 0);
  CHECK_EQ(dlock_leader_has_leadership(lead), 1);
  dlock_leader_free(lead);
  CHECK(write(down[1], &byte, 1) == 1);
  int st;
  CHECK(waitpid(pid, &st, 0) == pid);
  CHECK(WIFEXITED(st));
  CHECK_EQ(WEXITSTATUS(st), 0);
  close(up[0]);
  close(down[1]);
  dlock_client_close(b);
  th_zk_stop(&zk);
}

TH_MAIN(T_BARE(t_zk_server), T_BARE(t_zk_tick), T_BARE(t_zk_url),
        T_BARE(t_zk_mutex_layout), T_BARE(t_zk_rwlock), T_BARE(t_zk_leader),
        T_BARE(t_zk_leader_expiry), T_BARE(t_zk_permits),
        T_BARE(t_zk_multilock), T_BARE(t_zk_async), T_BARE(t_zk_server_restart),
        T_BARE(t_zk_ensemble_leader_killed), T_BARE(t_zk_session_expiry_loss),
        T_BARE(t_zk_chroot), T_BARE(t_zk_inspect), T_BARE(t_zk_loss_one_moment),
        T_BARE(t_zk_wait_rides_restart), T_BARE(t_zk_wait_forever_down),
        T_BARE(t_zk_foreign_nodes), T_BARE(t_zk_close_unanswered),
        T_BARE(t_zk_auth), T_BARE(t_zk_session_renewed))
#else
/* zk:// without libzookeeper-mt: DLOCK_ENOTSUP and a message that says
 * why. */
static void t_zk_url_enotsup(void) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = "zk://127.0.0.1:2181/app";
  dlock_client *c = (dlock_client *)1;
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_ENOTSUP);
  CHECK(c == NULL);
  CHECK(strstr(dlock_client_open_errmsg(), "libzookeeper") != NULL);
}

TH_MAIN(T_BARE(t_zk_server), T_BARE(t_zk_tick), T_BARE(t_zk_url_enotsup))
#endif
