/* test_etcd.c: the etcd test harness (a private single-member server) and
 * the etcd backend's mutex (the layout of Go's concurrency.Mutex and
 * `etcdctl lock`) against it, looked at and raced with etcdctl. */
#include "harness.h"
#include "locks/locks.h" /* dl_lock_client: a waiter's detail */

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* The server starts, says it is healthy, and is gone (process, dir) once
 * stopped. */
static void t_etcd_server(void) {
  TH_NEED_ETCD();
  th_etcd s;
  int64_t t0 = th_now_ms();
  CHECK_RC(th_etcd_start(&s), 0);
  fprintf(stderr, "    started in %lld ms\n", (long long)(th_now_ms() - t0));
  char buf[1024], dir[256];
  CHECK(strstr(th_etcd_get(&s, "/version", buf, sizeof buf), "3.") != NULL);
  snprintf(dir, sizeof dir, "%s", s.dir);
  pid_t pid = s.pid;
  th_etcd_stop(&s);
  CHECK(kill(pid, 0) != 0);
  struct stat st;
  CHECK(stat(dir, &st) != 0);
}

#ifdef DLOCK_TEST_HAVE_ETCD

/* The create revision in `etcdctl get KEY -w json`'s answer, or 0. */
static long long create_rev_of(const th_etcd *s, const char *key) {
  char args[300], buf[4096];
  snprintf(args, sizeof args, "get %s -w json", key);
  const char *p = strstr(th_etcd_ctl(s, args, buf, sizeof buf),
                         "\"create_revision\":");
  return p ? atoll(p + strlen("\"create_revision\":")) : 0;
}

typedef struct {
  int calls, rc;
  uint64_t token;
} own_done;

static void on_own_done(int rc, uint64_t token, const char *errmsg, void *ud) {
  (void)errmsg;
  own_done *d = ud;
  d->rc = rc;
  d->token = token;
  d->calls++;
}

/* An acquire (try, no wait) or a release of l, on lp's client when lp is
 * not NULL: its result (*tok the token). */
static int own_call(dlock_loop *lp, dlock_lock *l, bool acquire,
                    uint64_t *tok) {
  if (lp == NULL)
    return acquire ? dlock_lock_try_acquire(l, 0, 0, tok)
                   : dlock_lock_release(l);
  own_done d = {0};
  int rc = acquire ? dlock_lock_acquire_async(l, 0, 0, on_own_done, &d, NULL)
                   : dlock_lock_release_async(l, on_own_done, &d, NULL);
  for (int64_t end = th_now_ms() + 5000; rc == 0 && d.calls == 0 &&
                                         th_now_ms() < end;)
    dlock_loop_run(lp, 10);
  if (tok) *tok = d.token;
  return rc != 0 ? rc : d.calls ? d.rc : DLOCK_ETIMEDOUT;
}

/* Our key already there when we acquire (a release of ours that did not
 * get through leaves it, listed to be deleted at its revision by the
 * watcher): deleted at that revision and made anew, so the hold's
 * revision is its own, and the old key's late delete (at the old
 * revision) leaves the new hold alone. Before, the acquire took the key
 * as it was (its token the old revision), and that delete took the hold.
 * Blocking and event-loop clients. */
static void t_etcd_own_key_made_anew(void) {
  TH_ETCD_SETUP(s);
  for (int async = 0; async < 2; async++) {
    dlock_loop *lp = NULL;
    dlock_client *c = NULL;
    if (async) {
      CHECK_RC(dlock_loop_new(NULL, &lp), 0);
      dlock_client_options o;
      dlock_client_options_init(&o);
      o.url = s.url;
      CHECK_RC(dlock_client_open_async(&o, lp, &c), 0);
    } else {
      c = th_etcd_client(&s, 9000);
    }
    CHECK(c != NULL);
    char pname[16], name[16];
    snprintf(pname, sizeof pname, "probe%d", async);
    snprintf(name, sizeof name, "orph%d", async);
    dlock_lock *p, *l;
    CHECK_RC(dlock_lock_new(c, pname, "me", &p), 0);
    CHECK_RC(own_call(lp, p, true, NULL), 0);
    char key[256], buf[4096], args[600], orphan[300];
    snprintf(args, sizeof args, "get --prefix %s/ --keys-only", pname);
    th_etcd_ctl(&s, args, key, sizeof key);
    key[strcspn(key, "\n")] = '\0';
    CHECK(strncmp(key, pname, strlen(pname)) == 0);
    const char *lease = key + strlen(pname) + 1; /* the session's, in hex */
    snprintf(orphan, sizeof orphan, "%s/%s", name, lease);
    snprintf(args, sizeof args, "put %s '' --lease=%s", orphan, lease);
    CHECK(strstr(th_etcd_ctl(&s, args, buf, sizeof buf), "OK") != NULL);
    CHECK_RC(own_call(lp, p, false, NULL), 1);
    dlock_lock_free(p);
    long long old = create_rev_of(&s, orphan);
    CHECK(old > 0);
    CHECK_RC(dlock_lock_new(c, name, "me", &l), 0);
    uint64_t tok = 0;
    CHECK_RC(own_call(lp, l, true, &tok), 0);
    CHECK((long long)tok > old);
    CHECK_EQ(create_rev_of(&s, orphan), (long long)tok);
    /* The old key's delete, late: nothing to delete any more. */
    char txn[400];
    snprintf(txn, sizeof txn, "%s/txn%d", th_tmpdir(), async);
    FILE *f = fopen(txn, "w");
    CHECK(f != NULL);
    fprintf(f, "create(\"%s\") = \"%lld\"\n\ndel %s\n\n\n", orphan, old,
            orphan);
    fclose(f);
    snprintf(args, sizeof args, "txn < %s", txn);
    CHECK(strstr(th_etcd_ctl(&s, args, buf, sizeof buf), "FAILURE") != NULL);
    CHECK_EQ(create_rev_of(&s, orphan), (long long)tok);
    CHECK_RC(own_call(lp, l, false, NULL), 1);
    dlock_lock_free(l);
    dlock_client_close(c);
    if (lp) dlock_loop_free(lp);
  }
}

/* Acquire and release on Go's layout: the key NAME/<lease in hex> (its
 * value dlock's owner id, which Go never reads), on the client's lease (TTL the
 * watchdog lease), its create revision the token; re-entry counted in the
 * client, one key; the release deletes it. */
static void t_etcd_layout(void) {
  TH_ETCD_SETUP(s);
  dlock_client *c = th_etcd_client(&s, 9000);
  CHECK(c != NULL);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "job", "me", &l), 0);
  uint64_t tok = 0, tok2 = 0;
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, &tok), 0);
  char buf[4096], key[256];
  th_etcd_ctl(&s, "get --prefix job/ --keys-only", key, sizeof key);
  key[strcspn(key, "\n")] = '\0';
  fprintf(stderr, "    key %s, token %llu\n", key, (unsigned long long)tok);
  CHECK(strncmp(key, "job/", 4) == 0 && strlen(key) > 4 &&
        strspn(key + 4, "0123456789abcdef") == strlen(key + 4));
  char args[512];
  snprintf(args, sizeof args, "get %s -w json", key);
  th_etcd_ctl(&s, args, buf, sizeof buf);
  char want[64];
  snprintf(want, sizeof want, "\"create_revision\":%llu",
           (unsigned long long)tok);
  CHECK(strstr(buf, want) != NULL);
  /* Its value: the owner id and a newline (no description set; Go
   * writes it empty and never reads it). */
  snprintf(args, sizeof args, "get %s --print-value-only", key);
  th_etcd_ctl(&s, args, buf, sizeof buf);
  snprintf(want, sizeof want, "%s:me\n", dlock_client_id(c));
  CHECK(strncmp(buf, want, strlen(want)) == 0);
  /* The lease is the key's hex; its TTL the watchdog lease (9 s). */
  snprintf(args, sizeof args, "lease timetolive %s", key + 4);
  CHECK(strstr(th_etcd_ctl(&s, args, buf, sizeof buf),
               "granted with TTL(9s)") != NULL);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, &tok2), 0);
  CHECK_EQ(tok2, tok);
  CHECK_EQ(dlock_lock_hold_count(l), 2);
  CHECK_EQ(dlock_lock_is_held(l), 1);
  CHECK_EQ(dlock_lock_is_locked(l), 1);
  uint64_t cur = 0;
  CHECK_RC(dlock_lock_current_token(l, &cur), 0);
  CHECK_EQ(cur, tok);
  CHECK_RC(dlock_lock_release(l), 0);
  CHECK_EQ(strlen(th_etcd_ctl(&s, "get --prefix job/ --keys-only", buf,
                              sizeof buf)) > 0,
           1);
  CHECK_RC(dlock_lock_release(l), 1);
  CHECK_EQ(
      strlen(th_etcd_ctl(&s, "get --prefix job/ --keys-only", buf, sizeof buf)),
      0);
  CHECK_EQ(dlock_lock_is_locked(l), 0);
  CHECK_RC(dlock_lock_release(l), DLOCK_ENOTOWNER);
  /* The next hold's token is larger. */
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, &tok2), 0);
  CHECK(tok2 > tok);
  CHECK_RC(dlock_lock_release(l), 1);
  dlock_lock_free(l);
  dlock_client_close(c);
  th_etcd_stop(&s);
}

/* Two clients exclude each other: a try without a wait is refused at once,
 * one with a wait when it runs out (and leaves no key behind), one that
 * waits gets it when the holder lets go; tokens grow. Two owners of one
 * client exclude each other too (they share the session's lease). */
typedef struct waiter {
  dlock_lock *l;
  int rc;
  uint64_t tok;
  atomic_llong at;
  char msg[256]; /* the detail of a failed wait */
} waiter;

static void *wait_acquire(void *arg) {
  waiter *w = arg;
  w->rc = dlock_lock_try_acquire(w->l, 10000, 0, &w->tok);
  if (w->rc < 0)
    snprintf(w->msg, sizeof w->msg, "%s",
             dlock_client_errmsg(dl_lock_client(w->l)));
  atomic_store(&w->at, th_now_ms());
  return NULL;
}

/* Two clients on one lock (their leases lease_ms, 0 the default): a
 * holds it, b waits for it on a thread of its own (wait_acquire). */
typedef struct duel {
  dlock_client *a, *b;
  dlock_lock *la, *lb;
  waiter w;
  pthread_t th;
} duel;

static void duel_start(const th_etcd *s, int64_t lease_ms, const char *name,
                       duel *d) {
  d->a = th_etcd_client(s, lease_ms);
  d->b = th_etcd_client(s, lease_ms);
  CHECK(d->a && d->b);
  CHECK_RC(dlock_lock_new(d->a, name, "a", &d->la), 0);
  CHECK_RC(dlock_lock_new(d->b, name, "b", &d->lb), 0);
  CHECK_RC(dlock_lock_try_acquire(d->la, 0, 0, NULL), 0);
  d->w.l = d->lb;
  pthread_create(&d->th, NULL, wait_acquire, &d->w);
}

/* Frees what duel_start made (the locks and clients not yet gone). */
static void duel_end(duel *d) {
  dlock_lock_free(d->la);
  dlock_lock_free(d->lb);
  dlock_client_close(d->a);
  dlock_client_close(d->b);
}

/* Refused tries (another client, another owner of the holder's client)
 * leave nothing: the holder's key alone under the prefix. (Waits, the
 * order of waiters and their tokens: the conformance suite's t_try_wait,
 * t_fair_order and t_tokens_grow; etcd's mutex is its fair lock.) */
static void t_etcd_exclusion(void) {
  TH_ETCD_SETUP(s);
  dlock_client *a = th_etcd_client(&s, 0), *b = th_etcd_client(&s, 0);
  CHECK(a && b);
  dlock_lock *la, *lb, *la2;
  CHECK_RC(dlock_lock_new(a, "x", "a", &la), 0);
  CHECK_RC(dlock_lock_new(b, "x", "b", &lb), 0);
  CHECK_RC(dlock_lock_new(a, "x", "a2", &la2), 0);
  CHECK_RC(dlock_lock_try_acquire(la, 0, 0, NULL), 0);
  CHECK_RC(dlock_lock_try_acquire(lb, 0, 0, NULL), DLOCK_EBUSY);
  CHECK_RC(dlock_lock_try_acquire(la2, 0, 0, NULL), DLOCK_EBUSY);
  char buf[1024];
  th_etcd_ctl(&s, "get --prefix x/ --keys-only", buf, sizeof buf);
  CHECK(strstr(buf, "x/") != NULL && strstr(strstr(buf, "x/") + 1, "x/") ==
                                         NULL); /* the holder's key alone */
  CHECK_RC(dlock_lock_release(la), 1);
  dlock_lock_free(la);
  dlock_lock_free(la2);
  dlock_lock_free(lb);
  dlock_client_close(a);
  dlock_client_close(b);
  th_etcd_stop(&s);
}

/* How many keys are under pfx now (etcdctl); its second by create
 * revision (the first waiter's) into second. */
static int keys_under(const th_etcd *s, const char *pfx, char *second,
                      size_t len) {
  char args[256], buf[2048];
  snprintf(args, sizeof args,
           "get --prefix %s --keys-only --sort-by=CREATE --order=ASCEND", pfx);
  th_etcd_ctl(s, args, buf, sizeof buf);
  int n = 0;
  for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
    if (strncmp(line, pfx, strlen(pfx)) == 0 && ++n == 2)
      snprintf(second, len, "%s", line);
  return n;
}

/* etcd issue 11456 (Jepsen, 3.4.3): a waiter whose key went while it
 * waited (its lease ended, someone deleted it) must not take the lock
 * when its predecessor goes; Go 3.4's Mutex does. Here it reports the
 * wait DLOCK_ELOST, leaves nothing, and takes the lock afresh after. */
static void t_etcd_waiter_key_gone(void) {
  TH_ETCD_SETUP(s);
  duel d = {0};
  duel_start(&s, 0, "gone", &d);
  char key[256] = "", args[300], buf[512];
  int64_t end = th_now_ms() + 5000;
  while (keys_under(&s, "gone/", key, sizeof key) < 2 && th_now_ms() < end)
    th_sleep_ms(5);
  CHECK(key[0] != '\0');
  snprintf(args, sizeof args, "del %s", key);
  CHECK(strstr(th_etcd_ctl(&s, args, buf, sizeof buf), "1") != NULL);
  CHECK_RC(dlock_lock_release(d.la), 1);
  pthread_join(d.th, NULL);
  CHECK_RC(d.w.rc, DLOCK_ELOST);
  CHECK(strstr(d.w.msg, "went while we waited") != NULL);
  CHECK_EQ(keys_under(&s, "gone/", key, sizeof key), 0);
  CHECK_RC(dlock_lock_try_acquire(d.lb, 0, 0, NULL), 0);
  CHECK_RC(dlock_lock_release(d.lb), 1);
  duel_end(&d);
  th_etcd_stop(&s);
}

/* A holder SIGKILLed: its lease runs out (TTL 3 s) and its key goes with
 * it; a waiter then gets the lock, not before. */
static void t_etcd_holder_killed(void) {
  TH_ETCD_SETUP(s);
  int p[2];
  CHECK(pipe(p) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    dlock_client *c = th_etcd_client(&s, 3000);
    dlock_lock *l;
    char ok = c && dlock_lock_new(c, "k", "child", &l) == 0 &&
                      dlock_lock_try_acquire(l, 0, 0, NULL) == 0
                  ? 'y'
                  : 'n';
    if (write(p[1], &ok, 1) != 1) _exit(1);
    for (;;)
      pause();
  }
  close(p[1]);
  char ok = 0;
  CHECK(read(p[0], &ok, 1) == 1);
  close(p[0]);
  CHECK_EQ(ok, 'y');
  dlock_client *c = th_etcd_client(&s, 0);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "k", "parent", &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, NULL), DLOCK_EBUSY);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_try_acquire(l, 15000, 0, NULL), 0);
  int64_t took = th_now_ms() - t0;
  fprintf(stderr, "    the dead holder's lease freed it after %lld ms\n",
          (long long)took);
  CHECK(took >= 1000 && took < 8000);
  CHECK_RC(dlock_lock_release(l), 1);
  dlock_lock_free(l);
  dlock_client_close(c);
  th_etcd_stop(&s);
}

/* A waiter whose wait outlasts its lease's TTL (3 s) keeps its lease,
 * and so its key and its place, alive: it gets the lock when the holder
 * lets go after 5 s, and the holder's fixed lease is its own (2 s, not
 * renewed: the key goes when it ends). */
static void t_etcd_long_wait(void) {
  TH_ETCD_SETUP(s);
  duel d = {0};
  duel_start(&s, 3000, "long", &d);
  dlock_lock *la = d.la, *lb = d.lb;
  th_sleep_ms(5000); /* the hold's length: the scenario itself */
  CHECK_EQ(atomic_load(&d.w.at), 0);
  CHECK_RC(dlock_lock_release(la), 1);
  pthread_join(d.th, NULL);
  CHECK_RC(d.w.rc, 0);
  CHECK_RC(dlock_lock_release(lb), 1);
  /* A fixed lease of 2 s: freed by its end, the waiter gets it then. */
  uint64_t t1 = 0;
  CHECK_RC(dlock_lock_try_acquire(la, 0, 2000, &t1), 0);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_try_acquire(lb, 10000, 0, NULL), 0);
  int64_t took = th_now_ms() - t0;
  fprintf(stderr, "    a fixed lease of 2 s freed it after %lld ms\n",
          (long long)took);
  CHECK(took >= 1500 && took < 5000);
  CHECK_EQ(dlock_lock_is_lost(la), 1);
  CHECK_RC(dlock_lock_release(lb), 1);
  duel_end(&d);
  th_etcd_stop(&s);
}

/* A 3-member cluster, the member the clients talk to killed: the holder
 * keeps its hold (its watch and renewals move to another member, no loss
 * reported), the waiter keeps waiting, and gets the lock at the release;
 * the tokens still grow. The member restarted rejoins. */
static void t_etcd_cluster_member_killed(void) {
  TH_NEED_ETCD();
  th_etcd m[3];
  char url[256];
  CHECK_RC(th_etcd_cluster_start(m, url, sizeof url), 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.watchdog_timeout_ms = 6000;
  dlock_client *a, *b;
  CHECK_RC(dlock_client_open(&o, &a), 0);
  CHECK_RC(dlock_client_open(&o, &b), 0);
  dlock_lock *la, *lb;
  CHECK_RC(dlock_lock_new(a, "cl", "a", &la), 0);
  CHECK_RC(dlock_lock_new(b, "cl", "b", &lb), 0);
  uint64_t t1 = 0;
  CHECK_RC(dlock_lock_try_acquire(la, 0, 0, &t1), 0);
  waiter w = {.l = lb};
  pthread_t th;
  pthread_create(&th, NULL, wait_acquire, &w);
  th_sleep_ms(300);             /* b's key and watch in place (the scenario) */
  th_etcd_kill(&m[0], SIGKILL); /* the first endpoint: both clients' */
  /* Two renewal rounds (lease/3 = 2 s each) on the other members. */
  th_sleep_ms(4500);
  CHECK_EQ(dlock_lock_is_lost(la), 0);
  CHECK_EQ(dlock_lock_is_held(la), 1);
  if (atomic_load(&w.at) != 0)
    fprintf(stderr, "    the waiter ended early: %s (%s)\n",
            dlock_err_name(w.rc), w.rc < 0 ? w.msg : "");
  CHECK_EQ(atomic_load(&w.at), 0);
  CHECK_RC(dlock_lock_release(la), 1);
  pthread_join(th, NULL);
  CHECK_RC(w.rc, 0);
  CHECK(w.tok > t1);
  CHECK_RC(dlock_lock_release(lb), 1);
  CHECK_RC(th_etcd_restart(&m[0]), 0);
  CHECK_RC(dlock_lock_try_acquire(la, 0, 0, NULL), 0);
  CHECK_RC(dlock_lock_release(la), 1);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_close(a);
  dlock_client_close(b);
  for (int i = 0; i < 3; i++)
    th_etcd_stop(&m[i]);
}

/* The server paused past the lease (TTL 3 s): the hold is reported lost
 * (no renewal confirmed in time); the same owner can take the lock again
 * afterwards without a release in between (its stale hold does not keep
 * it waiting on itself), and so can another owner of the client once the
 * first releases (DLOCK_ELOST). */
static void t_etcd_paused_server(void) {
  TH_ETCD_SETUP(s);
  dlock_client *a = th_etcd_client(&s, 3000);
  CHECK(a != NULL);
  dlock_lock *la, *la2;
  CHECK_RC(dlock_lock_new(a, "pz", "a", &la), 0);
  CHECK_RC(dlock_lock_new(a, "pz", "a2", &la2), 0);
  CHECK_RC(dlock_lock_try_acquire(la, 0, 0, NULL), 0);
  th_etcd_kill(&s, SIGSTOP);
  int64_t end = th_now_ms() + 8000;
  while (dlock_lock_is_lost(la) != 1 && th_now_ms() < end)
    th_sleep_ms(20);
  th_sleep_ms(500); /* past the server's TTL too */
  th_etcd_kill(&s, SIGCONT);
  CHECK_EQ(dlock_lock_is_lost(la), 1);
  CHECK_RC(dlock_lock_try_acquire(la, 5000, 0, NULL), 0);
  CHECK_EQ(dlock_lock_is_lost(la), 0);
  CHECK_RC(dlock_lock_try_acquire(la2, 0, 0, NULL), DLOCK_EBUSY);
  CHECK_RC(dlock_lock_release(la), 1);
  CHECK_RC(dlock_lock_try_acquire(la2, 0, 0, NULL), 0);
  CHECK_RC(dlock_lock_release(la2), 1);
  dlock_lock_free(la);
  dlock_lock_free(la2);
  dlock_client_close(a);
  th_etcd_stop(&s);
}

/* A release that gets no answer (the server paused past the command
 * timeout) fails, and its key is deleted later, at its revision, once the
 * server answers again: another client gets the lock then, not when the
 * releasing client's session ends. */
static void t_etcd_release_orphan(void) {
  TH_ETCD_SETUP(s);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = s.url;
  o.command_timeout_ms = 300;
  dlock_client *a, *b = th_etcd_client(&s, 0);
  CHECK_RC(dlock_client_open(&o, &a), 0);
  CHECK(b != NULL);
  dlock_lock *la, *lb;
  CHECK_RC(dlock_lock_new(a, "or", "a", &la), 0);
  CHECK_RC(dlock_lock_new(b, "or", "b", &lb), 0);
  CHECK_RC(dlock_lock_try_acquire(la, 0, 0, NULL), 0);
  th_etcd_kill(&s, SIGSTOP);
  int rc = dlock_lock_release(la);
  fprintf(stderr, "    release with the server paused: %s\n",
          dlock_err_name(rc));
  CHECK(rc < 0);
  th_sleep_ms(200); /* the paused request's connection is gone by now */
  th_etcd_kill(&s, SIGCONT);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_try_acquire(lb, 10000, 0, NULL), 0);
  fprintf(stderr, "    the other client got it %lld ms after the resume\n",
          (long long)(th_now_ms() - t0));
  CHECK(th_now_ms() - t0 < 5000);
  CHECK_RC(dlock_lock_release(lb), 1);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_close(a);
  dlock_client_close(b);
  th_etcd_stop(&s);
}

/* Leader election on Go's concurrency.Election layout: one leader at a
 * time, the next one in line takes over within 100 ms when it leaves,
 * `etcdctl elect -l` sees dlock's leader's id, and dlock and `etcdctl
 * elect` wait for each other's leader, both ways; dlock elect stops its
 * command when its key is deleted. */
static void t_etcd_leader(void) {
  TH_ETCD_SETUP(s);
  dlock_client *a = th_etcd_client(&s, 0), *b = th_etcd_client(&s, 0);
  CHECK(a && b);
  dlock_leader *one, *two;
  CHECK_RC(dlock_leader_new(a, "el", "one", &one), 0);
  CHECK_RC(dlock_leader_new(b, "el", "two", &two), 0);
  CHECK_RC(dlock_leader_start(one), 0);
  CHECK_RC(dlock_leader_try_await(one, 5000), 0);
  CHECK_RC(dlock_leader_start(two), 0);
  CHECK_RC(dlock_leader_try_await(two, 300), DLOCK_EBUSY);
  char buf[1024], cur[64];
  CHECK_EQ(dlock_leader_get_current(two, cur, sizeof cur), 1);
  CHECK(strcmp(cur, "one") == 0);
  uint64_t t1 = 0, t2 = 0;
  CHECK_RC(dlock_leader_token(one, &t1), 0);
  CHECK(t1 > 0);
  char cmd[512];
  snprintf(cmd, sizeof cmd,
           "ETCDCTL_API=3 timeout 1 etcdctl --endpoints %s elect -l el",
           s.endpoint);
  CHECK(strstr(th_sh(cmd, buf, sizeof buf), "\none\n") != NULL);
  int64_t t0 = th_now_ms();
  dlock_leader_free(one);
  CHECK_RC(dlock_leader_try_await(two, 5000), 0);
  fprintf(stderr, "    the next leader took over after %lld ms\n",
          (long long)(th_now_ms() - t0));
  CHECK(th_now_ms() - t0 < th_soon(100));
  CHECK_RC(dlock_leader_token(two, &t2), 0);
  CHECK(t2 > t1);
  /* etcdctl elect campaigns behind dlock's leader, and leads once it
   * leaves. */
  char led[300];
  snprintf(led, sizeof led, "%s/led", s.dir);
  snprintf(cmd, sizeof cmd,
           "ETCDCTL_API=3 exec etcdctl --endpoints %s elect el gogo > %s",
           s.endpoint, led);
  pid_t pid = th__spawn(cmd);
  th_sleep_ms(500); /* it campaigns (not a synchronisation: checked) */
  snprintf(cmd, sizeof cmd, "cat %s", led);
  CHECK(strstr(th_sh(cmd, buf, sizeof buf), "gogo") == NULL);
  dlock_leader_free(two);
  int64_t end = th_now_ms() + 5000;
  while (strstr(th_sh(cmd, buf, sizeof buf), "gogo") == NULL &&
         th_now_ms() < end)
    th_sleep_ms(10);
  CHECK(strstr(buf, "gogo") != NULL);
  /* Now dlock waits behind etcdctl's leader. */
  dlock_leader *three;
  CHECK_RC(dlock_leader_new(a, "el", "three", &three), 0);
  CHECK_RC(dlock_leader_start(three), 0);
  CHECK_RC(dlock_leader_try_await(three, 300), DLOCK_EBUSY);
  CHECK_EQ(dlock_leader_get_current(three, cur, sizeof cur), 1);
  CHECK(strcmp(cur, "gogo") == 0);
  kill(pid, SIGINT); /* etcdctl resigns (its session closes) */
  waitpid(pid, NULL, 0);
  t0 = th_now_ms();
  CHECK_RC(dlock_leader_try_await(three, 15000), 0);
  fprintf(stderr, "    dlock led %lld ms after etcdctl elect's SIGINT\n",
          (long long)(th_now_ms() - t0));
  dlock_leader_free(three);
  /* dlock elect runs its command while it leads; the leader's key deleted
   * by hand stops it as lost (exit 76). */
  snprintf(cmd, sizeof cmd,
           "%s -u %s elect el2 -- sh -c 'echo leading; sleep 30' "
           "2>/dev/null; echo rc=$?",
           DLOCK_CLI_PATH, s.url);
  FILE *f = popen(cmd, "r");
  CHECK(f != NULL);
  CHECK(fgets(buf, sizeof buf, f) != NULL && strcmp(buf, "leading\n") == 0);
  th_etcd_ctl(&s, "del --prefix el2/", cur, sizeof cur);
  CHECK(fgets(buf, sizeof buf, f) != NULL && strcmp(buf, "rc=76\n") == 0);
  pclose(f);
  dlock_client_close(a);
  dlock_client_close(b);
  th_etcd_stop(&s);
}

typedef struct lost_seen {
  atomic_llong at;
  atomic_int lost_then;
} lost_seen;

static void on_lost_at(dlock_lock *l, const char *owner, void *ud) {
  (void)owner;
  lost_seen *s = ud;
  atomic_store(&s->lost_then, dlock_lock_is_lost(l));
  atomic_store(&s->at, th_now_ms());
}

static long long heard_after(lost_seen *s, int64_t t0) {
  int64_t end = t0 + 5000;
  while (atomic_load(&s->at) == 0 && th_now_ms() < end)
    th_sleep_ms(1);
  long long at = atomic_load(&s->at);
  return at ? at - t0 : -1;
}

/* A force release (the holder's key deleted at its revision) is heard by
 * the holder within 100 ms, through the watch on its own key; so is an
 * `etcdctl del` of the key and a revoke of the lease. */
static void t_etcd_force_heard(void) {
  TH_ETCD_SETUP(s);
  dlock_client *a = th_etcd_client(&s, 0), *b = th_etcd_client(&s, 0);
  CHECK(a && b);
  dlock_lock *la, *lb;
  CHECK_RC(dlock_lock_new(a, "fr", "a", &la), 0);
  CHECK_RC(dlock_lock_new(b, "fr", "b", &lb), 0);
  lost_seen ls = {0};
  dlock_lock_on_lost(la, on_lost_at, &ls);
  long long w0 = th_etcd_started(&s, "Watch");
  CHECK_RC(dlock_lock_try_acquire(la, 0, 0, NULL), 0);
  /* Once its watch runs (it starts ETCD_WATCH_DEFER_MS after the
   * acquire, then takes a connection and a stream). */
  int64_t end = th_now_ms() + th_soon(2000);
  while (th_etcd_started(&s, "Watch") == w0 && th_now_ms() < end)
    th_sleep_ms(2);
  /* From before the force release: its holder may hear it before the
   * releasing call has returned. */
  int64_t t0 = th_now_ms();
  CHECK_EQ(dlock_lock_force_release(lb), 1);
  long long ms = heard_after(&ls, t0);
  fprintf(stderr, "    force release heard after %lld ms\n", ms);
  CHECK(ms >= 0 && ms < th_soon(100));
  CHECK_EQ(atomic_load(&ls.lost_then), 1);
  CHECK_EQ(dlock_lock_is_lost(la), 1);
  CHECK_RC(dlock_lock_release(la), DLOCK_ELOST);
  CHECK_EQ(dlock_lock_force_release(lb), 0); /* nothing there */
  /* etcdctl del of the key. */
  lost_seen l2 = {0};
  dlock_lock_on_lost(la, on_lost_at, &l2);
  CHECK_RC(dlock_lock_try_acquire(la, 0, 0, NULL), 0);
  char buf[512];
  t0 = th_now_ms();
  th_etcd_ctl(&s, "del --prefix fr/", buf, sizeof buf);
  ms = heard_after(&l2, t0);
  fprintf(stderr,
          "    etcdctl del heard after %lld ms (etcdctl's run "
          "included)\n",
          ms);
  CHECK(ms >= 0 && ms < th_soon(1000));
  CHECK_RC(dlock_lock_release(la), DLOCK_ELOST);
  /* An application's key of a mutex's shape (NAME/ + hex digits) but on
   * no lease, which no recipe writes: not a lock, refused, untouched. */
  th_etcd_ctl(&s, "put fr/42 alice", buf, sizeof buf);
  dlock_lock_state st;
  CHECK_RC(dlock_lock_inspect(lb, &st), 0);
  CHECK_EQ(st.held, 0);
  CHECK(strcmp(st.type, "data") == 0);
  CHECK_RC(dlock_lock_force_release(lb), DLOCK_EWRONGTYPE);
  CHECK(strstr(th_etcd_ctl(&s, "get fr/42 --print-value-only", buf, sizeof buf),
               "alice") != NULL);
  th_etcd_ctl(&s, "del fr/42", buf, sizeof buf);
  /* A key of no mutex under the prefix: refused, untouched. */
  th_etcd_ctl(&s, "put fr/other x", buf, sizeof buf);
  CHECK_RC(dlock_lock_force_release(lb), DLOCK_EWRONGTYPE);
  CHECK(strstr(
            th_etcd_ctl(&s, "get fr/other --print-value-only", buf, sizeof buf),
            "x") != NULL);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_close(a);
  dlock_client_close(b);
  th_etcd_stop(&s);
}

/* A reader waits only for the writers' keys (contrib's RWMutex), so a
 * mutex's (or an election's) key at the name must refuse it: else a
 * reader held beside the mutex's holder, and a mutex waiting behind the
 * readers took the lock while a later reader held. Refused, nothing left. */
static void t_etcd_reader_meets_mutex(void) {
  TH_ETCD_SETUP(s);
  dlock_client *a = th_etcd_client(&s, 0), *b = th_etcd_client(&s, 0);
  CHECK(a && b);
  dlock_lock *m;
  dlock_rwlock *rw;
  CHECK_RC(dlock_lock_new(a, "mx", "a", &m), 0);
  CHECK_RC(dlock_rwlock_new(b, "mx", "b", &rw), 0);
  CHECK_RC(dlock_lock_try_acquire(m, 0, 0, NULL), 0);
  CHECK_RC(dlock_lock_try_acquire(dlock_rwlock_read(rw), 0, 0, NULL),
           DLOCK_EWRONGTYPE);
  CHECK_RC(dlock_lock_try_acquire(dlock_rwlock_read(rw), 300, 0, NULL),
           DLOCK_EWRONGTYPE);
  char buf[512];
  th_etcd_ctl(&s, "get --prefix mx/ --keys-only", buf, sizeof buf);
  CHECK(strstr(buf, "mx/read/") == NULL);
  CHECK(strncmp(buf, "mx/", 3) == 0 && strstr(buf + 3, "mx/") == NULL);
  /* The positive control: with the mutex gone a reader holds, and a
   * mutex then waits behind it. */
  CHECK_RC(dlock_lock_release(m), 1);
  CHECK_RC(dlock_lock_try_acquire(dlock_rwlock_read(rw), 0, 0, NULL), 0);
  CHECK_RC(dlock_lock_try_acquire(m, 0, 0, NULL), DLOCK_EBUSY);
  CHECK_RC(dlock_lock_release(dlock_rwlock_read(rw)), 1);
  dlock_rwlock_free(rw);
  dlock_lock_free(m);
  dlock_client_close(a);
  dlock_client_close(b);
  th_etcd_stop(&s);
}

/* A mutex at a name where another kind keeps keys on no lease (a
 * semaphore's count, a queue's values, an application's): no lock's line,
 * so refused at once, its key gone, rather than waiting behind them for
 * ever; both the oldest key (the claim's) and one before ours (the
 * wait's look). */
static void t_etcd_mutex_meets_data(void) {
  TH_ETCD_SETUP(s);
  dlock_client *a = th_etcd_client(&s, 0), *b = th_etcd_client(&s, 0);
  CHECK(a && b);
  dlock_permits *p;
  CHECK_RC(dlock_permits_new(a, "md", &p), 0);
  CHECK_EQ(dlock_permits_try_set(p, 2), 1);
  dlock_lock *m, *ma, *mb;
  CHECK_RC(dlock_lock_new(b, "md", "b", &m), 0);
  CHECK_RC(dlock_lock_try_acquire(m, 0, 0, NULL), DLOCK_EWRONGTYPE);
  CHECK_RC(dlock_lock_try_acquire(m, 5000, 0, NULL), DLOCK_EWRONGTYPE);
  char buf[512];
  th_etcd_ctl(&s, "get --prefix md/ --keys-only", buf, sizeof buf);
  CHECK(strcmp(buf, "md/permits\n") == 0 || strcmp(buf, "md/permits\n\n") == 0);
  /* Another kind's key after the holder's, before ours. */
  CHECK_RC(dlock_lock_new(a, "mp", "a", &ma), 0);
  CHECK_RC(dlock_lock_new(b, "mp", "b", &mb), 0);
  CHECK_RC(dlock_lock_try_acquire(ma, 0, 0, NULL), 0);
  th_etcd_ctl(&s, "put mp/1795846123719938336 v", buf, sizeof buf);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_try_acquire(mb, 5000, 0, NULL), DLOCK_EWRONGTYPE);
  CHECK(th_now_ms() - t0 < th_soon(2000));
  CHECK_RC(dlock_lock_try_acquire(mb, 0, 0, NULL), DLOCK_EBUSY); /* a's */
  CHECK_RC(dlock_lock_release(ma), 1);
  dlock_lock_free(ma);
  dlock_lock_free(mb);
  dlock_lock_free(m);
  dlock_permits_free(p);
  dlock_client_close(a);
  dlock_client_close(b);
  th_etcd_stop(&s);
}

/* etcdctl lock and dlock exclude each other on the same name, both ways,
 * and each wakes the other. */
static void t_etcd_etcdctl_interop(void) {
  TH_ETCD_SETUP(s);
  char cmd[1024], buf[512];
  /* etcdctl holds until told (the file `go`, 30 s at most): a hold
   * that ended on its own while a slow client opened (valgrind) would let
   * dlock in rightly. */
  snprintf(cmd, sizeof cmd,
           "ETCDCTL_API=3 exec etcdctl --endpoints %s lock shared -- "
           "sh -c 'echo held > %s/held; i=0; while [ ! -e %s/go ] && "
           "[ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done' >/dev/null 2>&1",
           s.endpoint, s.dir, s.dir);
  char held[300];
  snprintf(held, sizeof held, "%s/held", s.dir);
  pid_t pid = th__spawn(cmd);
  CHECK(pid > 0);
  int64_t end = th_now_ms() + 10000;
  while (access(held, F_OK) != 0 && th_now_ms() < end)
    th_sleep_ms(5);
  CHECK(access(held, F_OK) == 0);
  dlock_client *c = th_etcd_client(&s, 0);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "shared", "me", &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, NULL), DLOCK_EBUSY);
  /* Told to let go 200 ms into dlock's wait. */
  snprintf(cmd, sizeof cmd, "sleep 0.2; touch %s/go", s.dir);
  pid_t let_go = th__spawn(cmd);
  CHECK(let_go > 0);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_try_acquire(l, 10000, 0, NULL), 0);
  waitpid(let_go, NULL, 0);
  int st = 0;
  waitpid(pid, &st, 0);
  fprintf(stderr, "    dlock got it from etcdctl after %lld ms\n",
          (long long)(th_now_ms() - t0));
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  /* dlock holds: etcdctl lock waits (killed by timeout), then gets it
   * once dlock lets go. */
  snprintf(cmd, sizeof cmd,
           "ETCDCTL_API=3 timeout 1 etcdctl --endpoints %s lock shared "
           "echo GOT; echo rc=$?",
           s.endpoint);
  CHECK(strstr(th_sh(cmd, buf, sizeof buf), "rc=124") != NULL);
  CHECK(strstr(buf, "GOT") == NULL);
  snprintf(cmd, sizeof cmd,
           "ETCDCTL_API=3 exec etcdctl --endpoints %s lock shared -- "
           "sh -c 'echo got > %s/got' >/dev/null 2>&1",
           s.endpoint, s.dir);
  char got[300];
  snprintf(got, sizeof got, "%s/got", s.dir);
  pid = th__spawn(cmd);
  th_sleep_ms(300); /* it waits (not a synchronisation: checked below) */
  CHECK(access(got, F_OK) != 0);
  CHECK_RC(dlock_lock_release(l), 1);
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  CHECK(access(got, F_OK) == 0);
  dlock_lock_free(l);
  dlock_client_close(c);
  th_etcd_stop(&s);
}

/* dlock -u etcd://... run NAME -- cmd: runs it under the lock with its
 * token; a second run with -w 0 meanwhile exits 75; status shows the
 * holder, and a force release or an etcdctl del stops the holder's
 * command as lost (exit 76). */
static void t_etcd_cli_run(void) {
  TH_ETCD_SETUP(s);
  char cmd[1024], buf[512];
  snprintf(cmd, sizeof cmd,
           "%s -u %s run job -- sh -c 'echo token=$DLOCK_TOKEN; "
           "%s -u %s run -w 0 job -- true; echo inner=$?' 2>/dev/null; "
           "echo rc=$?",
           DLOCK_CLI_PATH, s.url, DLOCK_CLI_PATH, s.url);
  th_sh(cmd, buf, sizeof buf);
  fprintf(stderr, "    %s", buf);
  CHECK(strstr(buf, "token=") != NULL && strstr(buf, "token=\n") == NULL);
  CHECK(strstr(buf, "inner=75") != NULL);
  CHECK(strstr(buf, "rc=0") != NULL);
  CHECK_EQ(
      strlen(th_etcd_ctl(&s, "get --prefix job/ --keys-only", buf, sizeof buf)),
      0);
  /* status shows the holder; release --force stops the holder's COMMAND
   * as lost (exit 76), within a second; so does an etcdctl del. */
  for (int way = 0; way < 2; way++) {
    char done[300];
    snprintf(done, sizeof done, "%s/done%d", s.dir, way);
    snprintf(cmd, sizeof cmd, "%s -u %s run job -- sleep 30; echo $? > %s",
             DLOCK_CLI_PATH, s.url, done);
    pid_t pid = th__spawn(cmd);
    CHECK(pid > 0);
    snprintf(cmd, sizeof cmd, "%s -u %s status job; echo rc=$?", DLOCK_CLI_PATH,
             s.url);
    int64_t end = th_now_ms() + 10000;
    while (strstr(th_sh(cmd, buf, sizeof buf), "rc=0") == NULL &&
           th_now_ms() < end)
      th_sleep_ms(20);
    CHECK(strstr(buf, "held by") != NULL && strstr(buf, "token:") != NULL);
    int64_t t0 = th_now_ms();
    if (way == 0) {
      snprintf(cmd, sizeof cmd, "%s -u %s release --force job; echo rc=$?",
               DLOCK_CLI_PATH, s.url);
      CHECK(strstr(th_sh(cmd, buf, sizeof buf), "rc=0") != NULL);
    } else {
      th_etcd_ctl(&s, "del --prefix job/", buf, sizeof buf);
    }
    int st;
    waitpid(pid, &st, 0);
    fprintf(stderr, "    %s: run ended after %lld ms\n",
            way ? "etcdctl del" : "release --force",
            (long long)(th_now_ms() - t0));
    CHECK(th_now_ms() - t0 < th_soon(1500));
    snprintf(cmd, sizeof cmd, "cat %s", done);
    CHECK(strcmp(th_sh(cmd, buf, sizeof buf), "76\n") == 0);
  }
  th_etcd_stop(&s);
}

/* What is not built yet says so: DLOCK_ENOTSUP naming etcd and the kind;
 * bad URLs are refused at the open. */
static void t_etcd_enotsup(void) {
  TH_ETCD_SETUP(s);
  dlock_client *c = th_etcd_client(&s, 0);
  CHECK(c != NULL);
  dlock_lock *p;
  CHECK_RC(dlock_plainlock_new(c, "p", "me", &p), 0);
  CHECK_RC(dlock_lock_try_acquire(p, 0, 0, NULL), DLOCK_ENOTSUP);
  CHECK(strstr(dlock_client_errmsg(c), "plain") != NULL);
  dlock_lock_free(p);
  dlock_client_close(c);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = "etcd://127.0.0.1:2379?x=1";
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_EURL);
  o.url = "etcd://us%zzer:pw@127.0.0.1:2379";
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_EURL);
  o.url = "etcd:///app";
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_EURL);
  /* A port out of range, not a number, or no host: the URL's fault (exit
   * 64), not an unreachable server's. */
  static const char *const bad[] = {
      "etcd://127.0.0.1:0",    "etcd://127.0.0.1:65536",
      "etcd://127.0.0.1:2x79", "etcd://:2379",
      "etcd://127.0.0.1:",     "etcd://127.0.0.1:2379,h:-1/app"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    o.url = bad[i];
    CHECK_RC(dlock_client_open(&o, &c), DLOCK_EURL);
  }
  /* Nobody there: the open fails, naming it. */
  char url[64];
  snprintf(url, sizeof url, "etcd://127.0.0.1:%d", th_free_port());
  o.url = url;
  o.connect_timeout_ms = 500;
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_ECONNECT);
  CHECK(strstr(dlock_client_open_errmsg(), "127.0.0.1") != NULL);
  th_etcd_stop(&s);
}

static int collect(const char *name, void *ud) {
  char *buf = ud;
  strcat(buf, name);
  strcat(buf, ";");
  return 0;
}

/* A URL prefix: etcd://HOST/app puts lock NAME at app/NAME/<lease>, as
 * `etcdctl lock app/NAME` does; a second endpoint that is down is skipped;
 * the scan (dlock list) lists the held names under the prefix. */
static void t_etcd_prefix(void) {
  TH_ETCD_SETUP(s);
  dlock_client_options o;
  dlock_client_options_init(&o);
  char url[160];
  snprintf(url, sizeof url, "etcd://127.0.0.1:%d,%s/app", th_free_port(),
           s.endpoint);
  o.url = url;
  dlock_client *c;
  CHECK_RC(dlock_client_open(&o, &c), 0);
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, "n", "me", &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 0, NULL), 0);
  char buf[512];
  CHECK(strncmp(
            th_etcd_ctl(&s, "get --prefix app/n/ --keys-only", buf, sizeof buf),
            "app/n/", 6) == 0);
  /* The scan (dlock list) finds the held names under the prefix alone,
   * once each, by glob. */
  dlock_lock *l2;
  CHECK_RC(dlock_lock_new(c, "m", "me", &l2), 0);
  CHECK_RC(dlock_lock_try_acquire(l2, 0, 0, NULL), 0);
  th_etcd_ctl(&s, "put n2 x", buf, sizeof buf);    /* outside the prefix */
  th_etcd_ctl(&s, "put app/x y", buf, sizeof buf); /* no mutex's key */
  th_etcd_ctl(&s, "put app/k/42 y", buf, sizeof buf); /* on no lease */
  char names[256] = "";
  CHECK_EQ(dlock_client_scan_locks(c, NULL, collect, names), 2);
  CHECK(strcmp(names, "m;n;") == 0);
  names[0] = '\0';
  CHECK_EQ(dlock_client_scan_locks(c, "n*", collect, names), 1);
  CHECK(strcmp(names, "n;") == 0);
  CHECK_RC(dlock_lock_release(l2), 1);
  dlock_lock_free(l2);
  CHECK_RC(dlock_lock_release(l), 1);
  dlock_lock_free(l);
  dlock_client_close(c);
  th_etcd_stop(&s);
}

TH_MAIN(T_BARE(t_etcd_server), T_BARE(t_etcd_layout),
        T_BARE(t_etcd_own_key_made_anew), T_BARE(t_etcd_exclusion),
        T_BARE(t_etcd_waiter_key_gone), T_BARE(t_etcd_holder_killed),
        T_BARE(t_etcd_long_wait), T_BARE(t_etcd_cluster_member_killed),
        T_BARE(t_etcd_paused_server), T_BARE(t_etcd_release_orphan),
        T_BARE(t_etcd_leader), T_BARE(t_etcd_force_heard),
        T_BARE(t_etcd_reader_meets_mutex), T_BARE(t_etcd_mutex_meets_data),
        T_BARE(t_etcd_etcdctl_interop), T_BARE(t_etcd_cli_run),
        T_BARE(t_etcd_enotsup), T_BARE(t_etcd_prefix))
#else
/* etcd:// without libcurl, json-c or protobuf-c: DLOCK_ENOTSUP saying why. */
static void t_etcd_url_enotsup(void) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = "etcd://127.0.0.1:2379/app";
  dlock_client *c = (dlock_client *)1;
  CHECK_RC(dlock_client_open(&o, &c), DLOCK_ENOTSUP);
  CHECK(c == NULL);
  CHECK(strstr(dlock_client_open_errmsg(), "libcurl") != NULL);
}

TH_MAIN(T_BARE(t_etcd_server), T_BARE(t_etcd_url_enotsup))
#endif
