/* fenced_rmw.c: Jepsen's lock workload against a fenced resource on the
 * lock's own servers (issue 34). Holders increment a counter kept in a
 * fenced resource with a read-modify-write under the lock; one of them
 * (the victim) stops itself with SIGSTOP between its read and its write and
 * is continued only after the others, who took the lock once its lease (or
 * ZooKeeper session) was gone, have done all theirs. Three runs:
 *   unguarded  every write with the same token (the guard cannot tell the
 *              holders apart): the positive control, which must lose the
 *              others' updates (the victim writes its stale value);
 *   guarded    each write with its holder's token (dlock_fence_set): the
 *              victim's is refused with DLOCK_ESTALE, none is lost;
 *   held       dlock_fence_set_held: refused as well (the lock is not the
 *              victim's any more: DLOCK_ELOST), none is lost.
 * On redlock:// (whose servers keep no fenced resource: DLOCK_ENOTSUP) the
 * guard is the strongest form docs/SAFETY.md gives: the Redlock's token
 * handed to a fenced resource in one store, here the first server seen as
 * redis://; no held run (the lock and the resource are not in one store).
 *
 *   test_fenced_rmw KIND   (a th_deploy kind: redis, cluster, zk, etcd...;
 *                          the deployment in th_run's temp dir) */
#include "../harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define HOLDERS 3 /* besides the victim */
#define ROUNDS 5  /* increments each */

enum { UNGUARDED, GUARDED, HELD };
static const char *const mode_names[] = {"unguarded", "guarded", "held"};

static th_deploy dep;
static char url[1100];
static bool on_redlock;
static char guard_url[400]; /* redlock: the store that keeps the resource */
static char lock_name[64], res_name[64];

/* A client on the deployment (the victim's: with its short ZooKeeper
 * session). */
static dlock_client *open_client(bool victim) {
  dlock_client_options o;
  th_deploy_options(&dep, &o);
  if (victim) o.url = url;
  dlock_client *c = NULL;
  if (dlock_client_open(&o, &c) != 0) {
    fprintf(stderr, "open %s: %s\n", o.url, dlock_client_open_errmsg());
    return NULL;
  }
  return c;
}

/* The client of the fenced resource: c itself, or on redlock:// a client
 * of the one store (*own set: the caller closes it). */
static dlock_client *guard_client(dlock_client *c, dlock_client **own) {
  *own = NULL;
  if (!on_redlock) return c;
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = guard_url;
  if (dlock_client_open(&o, own) != 0) {
    fprintf(stderr, "open %s: %s\n", o.url, dlock_client_open_errmsg());
    return NULL;
  }
  return *own;
}

/* The counter's value (0 when there is none), or -1. */
static long long read_value(dlock_client *c) {
  void *v = NULL;
  int rc = dlock_fence_get(c, res_name, &v, NULL, NULL);
  long long n = rc == 1 ? atoll(v) : rc == 0 ? 0 : -1;
  dlock_fence_value_free(v);
  return n;
}

/* What an application tries again: the connection lost or being made
 * again, a call that got no answer in time (a ZooKeeper client whose
 * session expired while it was stopped answers ECONNLOST or ETIMEDOUT
 * until its new session is up). */
static bool transient(int rc) {
  return rc == DLOCK_ECONNLOST || rc == DLOCK_ETIMEDOUT ||
         rc == DLOCK_ECONNECT;
}

/* One increment under l (held, its token `token`): 1 written, 0 refused
 * (stale or no longer held), -1 an error. The victim stops itself between
 * its read and its write. */
static int increment(dlock_client *c, dlock_lock *l, uint64_t token, int mode,
                     bool victim) {
  long long v = read_value(c);
  if (v < 0) return -1;
  if (victim) raise(SIGSTOP);
  char buf[32];
  int len = snprintf(buf, sizeof buf, "%lld", v + 1);
  /* A ZooKeeper victim comes back to an expired session: as an
   * application would, it tries again (with the same token) once its
   * client has a new one (transient). */
  int rc = DLOCK_ETIMEDOUT;
  int64_t give_up = th_now_ms() + 10000;
  do {
    if (victim && th_now_ms() > give_up) break;
    rc = mode == HELD ? dlock_fence_set_held(l, res_name, buf, (size_t)len)
                      : dlock_fence_set(c, res_name, buf, (size_t)len,
                                        mode == UNGUARDED ? 1 : token);
    if (transient(rc) && victim) th_sleep_ms(50); /* a backoff */
  } while (transient(rc) && victim);
  if (rc == DLOCK_ESTALE || rc == DLOCK_ELOST) return 0;
  if (rc != 0)
    fprintf(stderr, "    [%d] write: %s: %s\n", (int)getpid(),
            dlock_err_name(rc), dlock_client_errmsg(c));
  return rc == 0 ? 1 : -1;
}

/* A holder's process: `rounds` increments, each under the lock (the
 * victim's with a short fixed lease). Exits with how many were written
 * (100 + n when one failed). */
static int holder(int mode, bool victim, int64_t lease_ms) {
  dlock_client *c = open_client(victim), *own;
  dlock_lock *l = NULL;
  if (c == NULL || dlock_lock_new(c, lock_name, NULL, &l) != 0) return 100;
  dlock_client *g = guard_client(c, &own);
  if (g == NULL) return 100;
  int written = 0, rounds = victim ? 1 : ROUNDS;
  for (int i = 0; i < rounds; i++) {
    uint64_t token = 0;
    int rc = dlock_lock_try_acquire(l, 30000, victim ? lease_ms : 0, &token);
    if (rc != 0) {
      fprintf(stderr, "    [%d] acquire: %s: %s\n", (int)getpid(),
              dlock_err_name(rc), dlock_client_errmsg(c));
      return 100 + written;
    }
    int w = increment(g, l, token, mode, victim);
    if (w < 0) return 100 + written;
    written += w;
    if (!victim) dlock_lock_release(l);
  }
  /* The victim's hold is gone: no release (the process exits). */
  return written;
}

static pid_t spawn_holder(int mode, bool victim, int64_t lease_ms) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) _exit(holder(mode, victim, lease_ms));
  return pid;
}

static int exit_of(pid_t pid) {
  int st;
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return 200;
  return WEXITSTATUS(st);
}

/* One run: the updates lost (accepted writes the counter does not
 * count), or -1 when the run itself failed. */
static int run(int mode, int64_t lease_ms, int *victim_wrote) {
  snprintf(lock_name, sizeof lock_name, "/rmw/%s-lock-%d", mode_names[mode],
           (int)getpid());
  snprintf(res_name, sizeof res_name, "/rmw/%s-res-%d", mode_names[mode],
           (int)getpid());
  if (strstr(dep.kind, "cluster")) { /* one slot: a hash tag */
    snprintf(lock_name, sizeof lock_name, "{rmw-%s}.lock", mode_names[mode]);
    snprintf(res_name, sizeof res_name, "{rmw-%s}.res", mode_names[mode]);
  }
  pid_t victim = spawn_holder(mode, true, lease_ms);
  int st;
  /* Stopped between its read and its write, holding the lock. */
  if (waitpid(victim, &st, WUNTRACED) != victim || !WIFSTOPPED(st)) {
    fprintf(stderr, "    the victim did not stop\n");
    return -1;
  }
  pid_t others[HOLDERS];
  for (int i = 0; i < HOLDERS; i++)
    others[i] = spawn_holder(mode, false, 0);
  int accepted = 0, bad = 0;
  for (int i = 0; i < HOLDERS; i++) {
    int n = exit_of(others[i]);
    bad += n >= 100;
    accepted += n % 100;
  }
  kill(victim, SIGCONT);
  *victim_wrote = exit_of(victim);
  if (bad || *victim_wrote >= 100) return -1;
  accepted += *victim_wrote;
  dlock_client *c = open_client(false), *own = NULL;
  dlock_client *g = c ? guard_client(c, &own) : NULL;
  long long value = g ? read_value(g) : -1;
  if (g) dlock_fence_del(g, res_name);
  dlock_client_close(own);
  dlock_client_close(c);
  if (value < 0) return -1;
  fprintf(stderr,
          "    %-9s: %d increments accepted, counter %lld, lost %lld; the "
          "victim's stale write %s\n",
          mode_names[mode], accepted, value, accepted - value,
          *victim_wrote ? "accepted" : "refused");
  return (int)(accepted - value);
}

static const char *kind;
static bool skipped;

/* Before the test: the deployment, once (th_run's temp dir holds it). */
static int start(void) {
  int rc = th_deploy_start(&dep, kind);
  if (rc == 1) {
    skipped = true;
    printf("%s: cannot run here: skipped\n", kind);
    return 0;
  }
  /* The victim's hold must end while it is stopped: a short fixed lease
   * (etcd: its shortest TTL, 2 s), or a short ZooKeeper session. */
  on_redlock = strcmp(kind, "redlock") == 0;
  if (on_redlock) snprintf(guard_url, sizeof guard_url, "%s", dep.redis[0].url);
  snprintf(url, sizeof url, "%s%s", dep.url,
           strcmp(kind, "zk") != 0 ? ""
           : strchr(dep.url, '?')  ? "&session_timeout=1s"
                                   : "?session_timeout=1s");
  return rc;
}

static void t_rmw(void) {
  if (skipped) return;
  int64_t lease_ms = strcmp(kind, "etcd") == 0 ? 2000 : 300;
  for (int mode = UNGUARDED; mode <= (on_redlock ? GUARDED : HELD); mode++) {
    int wrote = 0, lost = run(mode, lease_ms, &wrote);
    bool ok =
        mode == UNGUARDED ? lost > 0 && wrote == 1 : lost == 0 && wrote == 0;
    fprintf(stderr, "    %s %s: %s\n", kind, mode_names[mode],
            ok ? "as expected" : "WRONG");
    CHECK(ok);
  }
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s KIND [TEST...]\n", argv[0]);
    return 2;
  }
  kind = argv[1];
  static const th_test tests[] = {T_BARE(t_rmw)};
  argv[1] = argv[0]; /* the runner sees PROGRAM [TEST...] */
  int rc = th_run(argc - 1, argv + 1, tests, 1, start);
  th_deploy_stop(&dep);
  return rc;
}
