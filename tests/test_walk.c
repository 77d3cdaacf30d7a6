/* test_walk.c: detect_deadlocks' search (core/deadlock.c,
 * dl_deadlock_walk) over a wait-for graph held in memory, no server:
 * every holder of a lock is followed (a read lock's second reader), each
 * lock is read once, 16 owners deep and 64 locks read at most. */
#include "harness.h"

#include "core/backend.h"

#include <stdio.h>
#include <string.h>

/* The graph: each lock's holders, each owner's wait. Lock names and owners
 * are "<letter><number>" strings kept in the tables below. */
#define G_MAX 256
static struct {
  char lock[16];
  char holders[4][16];
  int nh;
} g_locks[G_MAX];
static struct { char owner[16], lock[16]; } g_waits[G_MAX];
static int g_nlocks, g_nwaits, g_reads;

static void g_reset(void) {
  g_nlocks = g_nwaits = g_reads = 0;
}

/* lock held by the owners in `holders` (space separated). */
static void g_hold(const char *lock, const char *holders) {
  int i = g_nlocks++;
  snprintf(g_locks[i].lock, sizeof g_locks[i].lock, "%s", lock);
  char buf[128];
  snprintf(buf, sizeof buf, "%s", holders);
  g_locks[i].nh = 0;
  for (char *t = strtok(buf, " "); t && g_locks[i].nh < 4;
       t = strtok(NULL, " "))
    snprintf(g_locks[i].holders[g_locks[i].nh++], 16, "%s", t);
}

static void g_wait(const char *owner, const char *lock) {
  int i = g_nwaits++;
  snprintf(g_waits[i].owner, sizeof g_waits[i].owner, "%s", owner);
  snprintf(g_waits[i].lock, sizeof g_waits[i].lock, "%s", lock);
}

static int f_waiters(dl_backend *b, const char *prefix, dlock_waiter_cb cb,
                     void *ud) {
  (void)b;
  (void)prefix;
  for (int i = 0; i < g_nwaits; i++) {
    dlock_waiter w = {g_waits[i].owner, g_waits[i].lock, "lock", "", 0};
    if (cb(&w, ud) != 0) break;
  }
  return g_nwaits;
}

static int f_holders(dl_backend *b, const char *key, dl_holder_cb cb,
                     void *ud) {
  (void)b;
  g_reads++;
  const char *name = key + 2; /* "p:" */
  for (int i = 0; i < g_nlocks; i++)
    if (strcmp(g_locks[i].lock, name) == 0)
      for (int k = 0; k < g_locks[i].nh; k++)
        if (cb(g_locks[i].holders[k], ud) != 0) return 0;
  return 0;
}

/* me's walk from `lock`: its code; the detail in *msg. */
static int walk(const char *me, const char *lock, const char **msg) {
  static const dl_walk_ops ops = {f_waiters, f_holders};
  char key[64];
  snprintf(key, sizeof key, "p:%s", lock);
  dl_lock_ref l = {.key = key, .name = key + 2, .owner = me};
  dl_acquire a = {.lock = &l};
  dl_backend_env env = {0};
  int rc = dl_deadlock_walk(NULL, &ops, &env, &a);
  *msg = dlock_client_open_errmsg();
  fprintf(stderr, "    %s after %d reads: %s\n", dlock_err_name(rc), g_reads,
          rc ? *msg : "");
  return rc;
}

/* W waits for R, read by A then B; B waits for L, which W holds. */
static void t_second_reader(void) {
  const char *msg;
  g_reset();
  g_hold("R", "A B");
  g_hold("L", "W");
  g_wait("B", "L");
  CHECK_RC(walk("W", "R", &msg), DLOCK_EDEADLK);
  CHECK(strstr(msg, "'R' held by B, which waits for 'L' held by W"));
  g_reset(); /* the control: B waits for nothing */
  g_hold("R", "A B");
  g_hold("L", "W");
  CHECK_RC(walk("W", "R", &msg), 0);
  CHECK_EQ(g_reads, 1);
}

/* A lock two holders wait for is read once; a writer's ":write" is its
 * owner's. */
static void t_each_lock_once(void) {
  const char *msg;
  g_reset();
  g_hold("R", "A B");
  g_hold("M", "C");
  g_wait("A", "M");
  g_wait("B", "M");
  CHECK_RC(walk("W", "R", &msg), 0);
  CHECK_EQ(g_reads, 2);
  g_reset();
  g_hold("R", "A B:write");
  g_hold("L", "W:write");
  g_wait("B", "L");
  CHECK_RC(walk("W:write", "R", &msg), DLOCK_EDEADLK);
}

/* A chain of n owners back to me: found while 16 owners deep at most. */
static int chain(int n) {
  const char *msg;
  g_reset();
  char lock[16], next[16], owner[16];
  for (int i = 0; i < n; i++) {
    snprintf(lock, sizeof lock, "L%d", i);
    snprintf(owner, sizeof owner, "O%d", i);
    snprintf(next, sizeof next, "L%d", i + 1);
    g_hold(lock, owner);
    g_wait(owner, next);
  }
  snprintf(lock, sizeof lock, "L%d", n);
  g_hold(lock, "me");
  return walk("me", "L0", &msg);
}

static void t_depth_bound(void) {
  CHECK_RC(chain(15), DLOCK_EDEADLK);
  CHECK_RC(chain(20), 0);
  CHECK(g_reads <= DL_WALK_MAX);
}

/* 100 readers, each waiting for a lock of its own held by one who waits
 * for nothing: at most 64 locks read. */
static void t_looks_bound(void) {
  const char *msg;
  g_reset();
  char lock[16], owner[16], h[16];
  /* Lock R: 4 readers a table row holds at most; a fan of 4 levels. */
  g_hold("R", "A0 A1 A2 A3");
  for (int i = 0; i < 4; i++) {
    snprintf(owner, sizeof owner, "A%d", i);
    snprintf(lock, sizeof lock, "M%d", i);
    g_wait(owner, lock);
    char hs[64] = "";
    for (int k = 0; k < 4; k++) {
      snprintf(h, sizeof h, "B%d", i * 4 + k);
      strcat(hs, h);
      strcat(hs, " ");
      char l2[16], o3[16];
      snprintf(l2, sizeof l2, "N%d", i * 4 + k);
      g_wait(h, l2);
      char hs2[64] = "";
      for (int j = 0; j < 4; j++) {
        snprintf(o3, sizeof o3, "C%d", (i * 4 + k) * 4 + j);
        strcat(hs2, o3);
        strcat(hs2, " ");
        char l3[16];
        snprintf(l3, sizeof l3, "P%d", (i * 4 + k) * 4 + j);
        g_wait(o3, l3);
        g_hold(l3, "Z");
      }
      g_hold(l2, hs2);
    }
    g_hold(lock, hs);
  }
  /* 1 + 4 + 16 + 64 locks: the search stops at 64 reads. */
  CHECK_RC(walk("me", "R", &msg), 0);
  CHECK_EQ(g_reads, DL_WALK_LOOKS);
}

TH_MAIN(T_BARE(t_second_reader), T_BARE(t_each_lock_once),
        T_BARE(t_depth_bound), T_BARE(t_looks_bound))
