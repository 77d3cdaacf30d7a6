/* readers.c: deadlocks through a read lock's second reader. Writer W
 * holds lock L and asks for the write side of R, read-held by A, then B;
 * B waits for L. The cycle W -> R (held by B) -> L (held by W) goes through
 * R's second reader: detect_deadlocks and dlock deadlocks follow every
 * reader, not the first only (owner ids end in ":A", ":B", ":W")
 * (core/deadlock.c, redis/ops/waits.c). */
#include "conformance.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* The owners: A and B read R; B waits for L; W holds L. */
typedef struct rd_fix {
  dlock_client *a, *b, *w;
  dlock_rwlock *ra, *rb, *rw;
  dlock_lock *lb, *lw;
  char r[64], l[64];
} rd_fix;

static dlock_client *opened(int detect) {
  dlock_client_options o;
  cf_options(&o, 0);
  o.detect_deadlocks = detect;
  dlock_client *c = NULL;
  return dlock_client_open(&o, &c) == 0 ? c : NULL;
}

/* A and B read R, W holds L. w_detect: W's client detects deadlocks. */
static void rd_setup(rd_fix *f, const char *tag, int w_detect) {
  char t[32];
  snprintf(t, sizeof t, "%sR", tag);
  cf_name(f->r, sizeof f->r, t);
  snprintf(t, sizeof t, "%sL", tag);
  cf_name(f->l, sizeof f->l, t);
  /* B detects on Redis only, where a detecting client records its wait
   * at once (on zk:// and etcd:// its place in line is there at once): a
   * walk of its own, were it to overlap W's, could tell B too. */
  f->a = opened(0);
  f->b = opened(strcmp(cf_backend, "redis") == 0);
  f->w = opened(w_detect);
  CHECK(f->a && f->b && f->w);
  CHECK_RC(dlock_rwlock_new(f->a, f->r, "A", &f->ra), 0);
  CHECK_RC(dlock_rwlock_new(f->b, f->r, "B", &f->rb), 0);
  CHECK_RC(dlock_rwlock_new(f->w, f->r, "W", &f->rw), 0);
  CHECK_RC(dlock_lock_new(f->b, f->l, "B", &f->lb), 0);
  CHECK_RC(dlock_lock_new(f->w, f->l, "W", &f->lw), 0);
  /* A reads first: the first holder, which waits for nothing. */
  CHECK_RC(dlock_lock_try_acquire(dlock_rwlock_read(f->ra), 0, 10000, NULL), 0);
  CHECK_RC(dlock_lock_try_acquire(dlock_rwlock_read(f->rb), 0, 10000, NULL), 0);
  CHECK_RC(dlock_lock_try_acquire(f->lw, 0, 10000, NULL), 0);
}

static void rd_close(rd_fix *f) {
  dlock_lock_release(dlock_rwlock_read(f->ra));
  dlock_lock_release(dlock_rwlock_read(f->rb));
  dlock_rwlock_free(f->ra);
  dlock_rwlock_free(f->rb);
  dlock_rwlock_free(f->rw);
  dlock_lock_free(f->lb);
  dlock_lock_free(f->lw);
  dlock_client_close(f->a);
  dlock_client_close(f->b);
  dlock_client_close(f->w);
}

static int count_name(const dlock_waiter *w, void *ud) {
  const char **x = ud;
  if (strcmp(w->name, x[0]) == 0) x[1]++;
  return 0;
}

/* Waits (2 s at most) until a waiter for lock `name` is seen. */
static bool waiter_seen(dlock_client *c, const char *name) {
  for (int64_t t0 = th_now_ms(); th_now_ms() - t0 < 2000; th_sleep_ms(5)) {
    const char *x[2] = {name, NULL};
    if (dlock_client_scan_waiters(c, name, count_name, x) < 0) return false;
    if (x[1] != NULL) return true;
  }
  return false;
}

static int wait_3s(void *l) {
  return dlock_lock_try_acquire(l, 3000, 10000, NULL);
}

/* `dlock deadlocks` on the suite's URL (where the URL alone reaches the
 * servers): its exit status, its output in out; -2 where it cannot run. */
static int run_cli(const char *pattern, char *out, size_t len) {
  if (strcmp(cf_dep.kind, "rediss") == 0)
    return -2; /* TLS: options the URL does not carry */
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "%s -u '%s' deadlocks '%s' 2>&1", DLOCK_CLI_PATH,
           cf_dep.url, pattern);
  FILE *p = popen(cmd, "r");
  if (p == NULL) return -1;
  size_t n = fread(out, 1, len - 1, p);
  out[n] = '\0';
  int st = pclose(p);
  fprintf(stderr, "    dlock deadlocks: exit %d\n%s",
          WIFEXITED(st) ? WEXITSTATUS(st) : -1, out);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* detect_deadlocks: W's write acquire of R would close the cycle through
 * R's second reader B: DLOCK_EDEADLK at once, naming it; once W lets L
 * go, B gets it. */
static void t_deadlock_second_reader(void) {
  CF_NEEDS_SERVER();
  if (!cf_has(DL_FEAT_READ)) {
    fprintf(stderr, "    skipped: no read-write lock on %s\n", cf_dep.kind);
    return;
  }
  rd_fix f;
  rd_setup(&f, "rdet", 1);
  cf_bg b;
  CHECK(cf_bg_start(&b, wait_3s, f.lb) == 0); /* B waits for L */
  CHECK(waiter_seen(f.a, f.l));
  int64_t t0 = th_now_ms();
  int rc = dlock_lock_try_acquire(dlock_rwlock_write(f.rw), 1000, 10000, NULL);
  int64_t took = th_now_ms() - t0;
  const char *msg = dlock_client_errmsg(f.w);
  fprintf(stderr, "    W: %s after %lld ms: %s\n", dlock_err_name(rc),
          (long long)took, rc ? msg : "");
  CHECK_RC(rc, DLOCK_EDEADLK);
  CHECK(took < 500 && strstr(msg, "wait-for cycle") && strstr(msg, f.r) &&
        strstr(msg, f.l) && strstr(msg, ":B, which waits for"));
  CHECK_EQ(dlock_lock_release(f.lw), 1);
  cf_bg_join(&b);
  CHECK_RC(b.rc, 0);
  CHECK_EQ(dlock_lock_release(f.lb), 1);
  rd_close(&f);
}

/* dlock deadlocks: the same cycle, W waiting (without the option): exit
 * 1, the cycle named with reader B. Then A and B let R go: W gets it, then
 * lets L go to B. */
static void t_deadlocks_cli_second_reader(void) {
  CF_NEEDS_SERVER();
  if (!cf_has(DL_FEAT_READ)) {
    fprintf(stderr, "    skipped: no read-write lock on %s\n", cf_dep.kind);
    return;
  }
  rd_fix f;
  rd_setup(&f, "rcli", 0);
  cf_bg b, w;
  CHECK(cf_bg_start(&b, wait_3s, f.lb) == 0);
  CHECK(waiter_seen(f.a, f.l));
  CHECK(cf_bg_start(&w, wait_3s, dlock_rwlock_write(f.rw)) == 0);
  CHECK(waiter_seen(f.a, f.r));
  char pattern[80], out[4096];
  snprintf(pattern, sizeof pattern, "/cf/rcli*-%d", (int)getpid());
  int ex = run_cli(pattern, out, sizeof out);
  CHECK_EQ(dlock_lock_release(dlock_rwlock_read(f.ra)), 1);
  CHECK_EQ(dlock_lock_release(dlock_rwlock_read(f.rb)), 1);
  cf_bg_join(&w);
  CHECK_RC(w.rc, 0);
  CHECK_EQ(dlock_lock_release(dlock_rwlock_write(f.rw)), 1);
  CHECK_EQ(dlock_lock_release(f.lw), 1);
  cf_bg_join(&b);
  CHECK_RC(b.rc, 0);
  CHECK_EQ(dlock_lock_release(f.lb), 1);
  rd_close(&f);
  if (ex != -2) {
    CHECK_EQ(ex, 1);
    CHECK(strstr(out, "deadlock: 2 owners") && strstr(out, f.r) &&
          strstr(out, f.l) && strstr(out, ":B)"));
  }
}

/* The control: the second reader waits for nothing. W's wait is no
 * cycle (dlock deadlocks exits 0) and goes on: W gets R once A and B let
 * it go. */
static void t_deadlock_second_reader_idle(void) {
  CF_NEEDS_SERVER();
  if (!cf_has(DL_FEAT_READ)) {
    fprintf(stderr, "    skipped: no read-write lock on %s\n", cf_dep.kind);
    return;
  }
  rd_fix f;
  rd_setup(&f, "ridle", 1);
  cf_bg w;
  CHECK(cf_bg_start(&w, wait_3s, dlock_rwlock_write(f.rw)) == 0);
  CHECK(waiter_seen(f.a, f.r));
  char pattern[80], out[4096];
  snprintf(pattern, sizeof pattern, "/cf/ridle*-%d", (int)getpid());
  int ex = run_cli(pattern, out, sizeof out);
  CHECK(ex == 0 || ex == -2);
  CHECK_EQ(dlock_lock_release(dlock_rwlock_read(f.ra)), 1);
  CHECK_EQ(dlock_lock_release(dlock_rwlock_read(f.rb)), 1);
  cf_bg_join(&w);
  CHECK_RC(w.rc, 0);
  CHECK_EQ(dlock_lock_release(dlock_rwlock_write(f.rw)), 1);
  CHECK_EQ(dlock_lock_release(f.lw), 1);
  rd_close(&f);
}

const th_test cf_readers_tests[] = {T_BARE(t_deadlock_second_reader),
                                    T_BARE(t_deadlocks_cli_second_reader),
                                    T_BARE(t_deadlock_second_reader_idle)};
const size_t cf_readers_ntests =
    sizeof cf_readers_tests / sizeof cf_readers_tests[0];
