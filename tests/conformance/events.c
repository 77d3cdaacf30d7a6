/* events.c: the event hook (dlock_client_on_event) on every backend:
 * each lock kind's events in order, with their name, kind, token,
 * backend, durations, and the thread each runs on. */
#include "conformance.h"

#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#define FOR_KINDS(k)                                                           \
  for (int k##_i = 0; k##_i < 5; k##_i++)                                      \
    for (dl_feature k = cf_lock_kinds[k##_i]; cf_has(k); k = DL_FEAT_COUNT)

/* What one client's hook was told. */
typedef struct ev_log {
  pthread_mutex_t mu;
  int n;
  struct {
    dlock_event_type type;
    char name[64], kind[8], backend[16];
    uint64_t token;
    int64_t duration_ns, mono_ns, wall_ns;
    int contended, error;
    bool here; /* on the thread that set the hook */
  } ev[32];
  pthread_t test_thread;
} ev_log;

static void on_event(dlock_client *c, const dlock_event *ev, void *ud) {
  (void)c;
  ev_log *g = ud;
  pthread_mutex_lock(&g->mu);
  if (g->n < 32 && ev->size >= sizeof *ev) {
    int i = g->n++;
    g->ev[i].type = ev->type;
    snprintf(g->ev[i].name, sizeof g->ev[i].name, "%s", ev->name);
    snprintf(g->ev[i].kind, sizeof g->ev[i].kind, "%s", ev->kind);
    snprintf(g->ev[i].backend, sizeof g->ev[i].backend, "%s", ev->backend);
    g->ev[i].token = ev->token;
    g->ev[i].duration_ns = ev->duration_ns;
    g->ev[i].mono_ns = ev->mono_ns;
    g->ev[i].wall_ns = ev->wall_ns;
    g->ev[i].contended = ev->contended;
    g->ev[i].error = ev->error;
    g->ev[i].here = pthread_equal(pthread_self(), g->test_thread);
  }
  pthread_mutex_unlock(&g->mu);
}

/* Waits (at most ms) until the log has n events; returns how many it has. */
static int log_wait(ev_log *g, int n, int64_t ms) {
  int64_t t0 = th_now_ms();
  for (;;) {
    pthread_mutex_lock(&g->mu);
    int have = g->n;
    pthread_mutex_unlock(&g->mu);
    if (have >= n || th_now_ms() - t0 >= ms) return have;
    th_sleep_ms(1);
  }
}

static void log_reset(ev_log *g) {
  pthread_mutex_lock(&g->mu);
  g->n = 0;
  pthread_mutex_unlock(&g->mu);
}

/* The event's kind for a handle of kind k: on redlock:// a mutex is the
 * plain string lock (its only layout there). */
static const char *kind_of(dl_feature k) {
  return k == DL_FEAT_LOCK && strcmp(cf_backend, "redlock") == 0
             ? "plain"
             : dl_feature_name(k);
}

/* The log's event i is of `type` on lock `name`, kind k, this backend. */
static bool is(ev_log *g, int i, dlock_event_type type, const char *name,
               dl_feature k) {
  bool ok = i < g->n && g->ev[i].type == type &&
            strcmp(g->ev[i].name, name) == 0 &&
            strcmp(g->ev[i].kind, kind_of(k)) == 0 &&
            strcmp(g->ev[i].backend, cf_backend) == 0 && g->ev[i].mono_ns > 0 &&
            g->ev[i].wall_ns > 0;
  if (!ok)
    fprintf(stderr,
            "    event %d: want type %d on %s (%s, %s); got %d on "
            "%s (%s, %s) of %d\n",
            i, type, name, kind_of(k), cf_backend,
            i < g->n ? (int)g->ev[i].type : 0, i < g->n ? g->ev[i].name : "",
            i < g->n ? g->ev[i].kind : "", i < g->n ? g->ev[i].backend : "",
            g->n);
  return ok;
}

/* Each kind: wait started and granted (on the acquiring thread, with its
 * token), a rival's wait that ends not granted (DLOCK_EBUSY), released
 * (the hold's time); taken again and force-released by another client:
 * lost, on the watchdog's thread; a re-entry tells nothing. */
static void t_events(void) {
  CF_NEEDS_SERVER();
  static ev_log ga = {.mu = PTHREAD_MUTEX_INITIALIZER},
                gb = {.mu = PTHREAD_MUTEX_INITIALIZER};
  ga.test_thread = gb.test_thread = pthread_self();
  dlock_client *a = cf_client(3000), *b = cf_client(0);
  CHECK(a && b);
  CHECK_RC(dlock_client_on_event(NULL, on_event, &ga), DLOCK_EINVAL);
  CHECK_RC(dlock_client_on_event(a, on_event, &ga), 0);
  CHECK_RC(dlock_client_on_event(b, on_event, &gb), 0);
  FOR_KINDS(k) {
    char name[64];
    cf_name(name, sizeof name, dl_feature_name(k));
    const char *bare = name; /* no key prefix in the harness's options */
    cf_lock h, w, f;
    CHECK_RC(cf_lock_new(a, k, name, "holder", &h), 0);
    CHECK_RC(cf_lock_new(b, cf_rival(k), name, "rival", &w), 0);
    CHECK_RC(cf_lock_new(b, k, name, "forcer", &f), 0);
    log_reset(&ga);
    log_reset(&gb);
    uint64_t tok = 0;
    CHECK_RC(dlock_lock_try_acquire(h.l, 0, 10000, &tok), 0);
    CHECK_RC(dlock_lock_try_acquire(h.l, 0, 10000, NULL), 0); /* re-entry */
    CHECK_RC(dlock_lock_try_acquire(w.l, 0, 10000, NULL), DLOCK_EBUSY);
    CHECK_EQ(dlock_lock_release(h.l), 0);
    CHECK_EQ(dlock_lock_release(h.l), 1);
    CHECK_EQ(log_wait(&ga, 3, 0), 3);
    CHECK(is(&ga, 0, DLOCK_EVENT_WAIT_STARTED, bare, k) && ga.ev[0].here);
    CHECK(is(&ga, 1, DLOCK_EVENT_GRANTED, bare, k) && ga.ev[1].here);
    CHECK_EQ(ga.ev[1].token, tok);
    CHECK_EQ(ga.ev[1].contended, 0);
    CHECK(ga.ev[1].duration_ns >= 0 && ga.ev[1].mono_ns >= ga.ev[0].mono_ns);
    CHECK(is(&ga, 2, DLOCK_EVENT_RELEASED, bare, k) && ga.ev[2].here);
    CHECK_EQ(ga.ev[2].token, tok);
    CHECK(ga.ev[2].duration_ns >= 0 && ga.ev[2].duration_ns < 10000000000);
    CHECK_EQ(log_wait(&gb, 2, 0), 2);
    CHECK(is(&gb, 0, DLOCK_EVENT_WAIT_STARTED, bare, cf_rival(k)));
    CHECK(is(&gb, 1, DLOCK_EVENT_NOT_GRANTED, bare, cf_rival(k)));
    CHECK_EQ(gb.ev[1].error, DLOCK_EBUSY);
    /* Taken away: lost, told by the watchdog's thread. */
    log_reset(&ga);
    CHECK_RC(dlock_lock_acquire(h.l, 0, &tok), 0);
    CHECK_EQ(dlock_lock_force_release(f.l), 1);
    CHECK_EQ(log_wait(&ga, 3, 3000), 3);
    CHECK(is(&ga, 2, DLOCK_EVENT_LOST, bare, k) && !ga.ev[2].here);
    CHECK_EQ(ga.ev[2].token, tok);
    CHECK_RC(dlock_lock_release(h.l), DLOCK_ELOST);
    CHECK_EQ(log_wait(&ga, 4, 0), 3); /* told once */
    cf_lock_free(&h);
    cf_lock_free(&w);
    cf_lock_free(&f);
  }
  /* No hook: nothing more is told. */
  CHECK_RC(dlock_client_on_event(a, NULL, NULL), 0);
  log_reset(&ga);
  cf_lock h;
  char name[64];
  cf_name(name, sizeof name, "unhooked");
  CHECK_RC(cf_lock_new(a, DL_FEAT_LOCK, name, NULL, &h), 0);
  CHECK_RC(dlock_lock_try_acquire(h.l, 0, 10000, NULL), 0);
  CHECK_EQ(dlock_lock_release(h.l), 1);
  CHECK_EQ(log_wait(&ga, 1, 0), 0);
  cf_lock_free(&h);
  dlock_client_close(a);
  dlock_client_close(b);
}

/* A wait for another holder: granted with contended 1 and the wait's
 * time; the watchdog's renewals are told (where holds have leases). */
static void t_events_wait_renew(void) {
  CF_NEEDS_SERVER();
  if (!cf_has(DL_FEAT_LEASE)) return; /* zk: no fixed leases to run out */
  static ev_log ga = {.mu = PTHREAD_MUTEX_INITIALIZER},
                gb = {.mu = PTHREAD_MUTEX_INITIALIZER};
  ga.test_thread = gb.test_thread = pthread_self();
  int64_t lease =
      CF_WAIT_MS > cf_lease_floor_ms() ? CF_WAIT_MS : cf_lease_floor_ms();
  /* b's watchdog lease: renewed every third of it. */
  int64_t wd = 3 * lease;
  dlock_client *a = cf_client(0), *b = cf_client(wd);
  CHECK(a && b);
  CHECK_RC(dlock_client_on_event(a, on_event, &ga), 0);
  CHECK_RC(dlock_client_on_event(b, on_event, &gb), 0);
  char name[64];
  cf_name(name, sizeof name, "evwait");
  dlock_lock *h, *w;
  CHECK_RC(dlock_lock_new(a, name, "holder", &h), 0);
  CHECK_RC(dlock_lock_new(b, name, "next", &w), 0);
  CHECK_RC(dlock_lock_try_acquire(h, 0, lease, NULL), 0);
  /* b waits for a's fixed lease to run out. */
  CHECK_RC(dlock_lock_try_acquire(w, lease + 5000, 0, NULL), 0);
  CHECK_EQ(log_wait(&gb, 2, 0), 2);
  CHECK(is(&gb, 1, DLOCK_EVENT_GRANTED, name, DL_FEAT_LOCK));
  CHECK_EQ(gb.ev[1].contended, 1);
  CHECK(gb.ev[1].duration_ns >= lease * 1000000 / 2);
  /* a: its hold ran out (lost, about a lease long). */
  CHECK_EQ(log_wait(&ga, 3, 3000), 3);
  CHECK(is(&ga, 2, DLOCK_EVENT_LOST, name, DL_FEAT_LOCK) && !ga.ev[2].here);
  CHECK(ga.ev[2].duration_ns >= lease * 1000000 / 2);
  CHECK_EQ(log_wait(&gb, 3, wd + CF_CMD_MS), 3);
  CHECK(is(&gb, 2, DLOCK_EVENT_RENEWED, name, DL_FEAT_LOCK) && !gb.ev[2].here);
  CHECK_EQ(dlock_lock_release(w), 1);
  dlock_lock_free(h);
  dlock_lock_free(w);
  dlock_client_close(a);
  dlock_client_close(b);
}

/* An event-loop call's end. */
typedef struct ended {
  int done, rc;
  uint64_t token;
} ended;

static void on_end(int rc, uint64_t token, const char *msg, void *ud) {
  (void)msg;
  ended *e = ud;
  e->rc = rc;
  e->token = token;
  e->done = 1;
}

/* An event-loop client: every event on the loop's thread (here, the
 * test's, which runs the loop), the loss told there too. */
static void t_events_async(void) {
  CF_NEEDS_SERVER();
  if (!cf_has(DL_FEAT_LOOP)) return;
  static ev_log g = {.mu = PTHREAD_MUTEX_INITIALIZER};
  g.test_thread = pthread_self();
  cf_fix f;
  CHECK_RC(cf_fix_open(&f, 3000), 0);
  dlock_client *b = cf_client(0);
  CHECK(b != NULL);
  CHECK_RC(dlock_client_on_event(f.c, on_event, &g), 0);
  char name[64];
  cf_name(name, sizeof name, "evloop");
  dlock_lock *l, *force;
  CHECK_RC(dlock_lock_new(f.c, name, NULL, &l), 0);
  CHECK_RC(dlock_lock_new(b, name, NULL, &force), 0);
  dl_feature k = DL_FEAT_LOCK; /* kind_of: plain on redlock:// */
  ended e = {0};
  CHECK_RC(dlock_lock_acquire_async(l, 0, 0, on_end, &e, NULL), 0);
  CHECK(cf_run_until(f.lp, &e.done, 5000));
  CHECK_RC(e.rc, 0);
  uint64_t tok = e.token;
  e = (ended){0};
  CHECK_RC(dlock_lock_release_async(l, on_end, &e, NULL), 0);
  CHECK(cf_run_until(f.lp, &e.done, 5000));
  CHECK_EQ(e.rc, 1);
  e = (ended){0};
  CHECK_RC(dlock_lock_acquire_async(l, 0, 0, on_end, &e, NULL), 0);
  CHECK(cf_run_until(f.lp, &e.done, 5000));
  CHECK_EQ(dlock_lock_force_release(force), 1);
  int lost = 0;
  for (int64_t t0 = th_now_ms(); !lost && th_now_ms() - t0 < 3000;) {
    int tick = 0;
    cf_run_until(f.lp, &tick, 5);
    lost = log_wait(&g, 6, 0) >= 6;
  }
  CHECK_EQ(log_wait(&g, 6, 0), 6);
  CHECK(is(&g, 0, DLOCK_EVENT_WAIT_STARTED, name, k));
  CHECK(is(&g, 1, DLOCK_EVENT_GRANTED, name, k));
  CHECK_EQ(g.ev[1].token, tok);
  CHECK(is(&g, 2, DLOCK_EVENT_RELEASED, name, k));
  CHECK(is(&g, 3, DLOCK_EVENT_WAIT_STARTED, name, k));
  CHECK(is(&g, 4, DLOCK_EVENT_GRANTED, name, k));
  CHECK(is(&g, 5, DLOCK_EVENT_LOST, name, k));
  for (int i = 0; i < 6; i++)
    CHECK(g.ev[i].here);
  dlock_lock_free(l);
  dlock_lock_free(force);
  dlock_client_close(b);
  cf_fix_close(&f);
}

static int count_waiter(const dlock_waiter *w, void *ud) {
  char *name = ud;
  if (strcmp(w->name, name) == 0) name[0] = '\0'; /* found */
  return 0;
}

/* Whether the waiter records (dlock_client_scan_waiters) show a waiter
 * on `name`; -1 if they cannot be read. */
static int waiter_shown(dlock_client *c, const char *name) {
  char buf[64];
  snprintf(buf, sizeof buf, "%s", name);
  int rc = dlock_client_scan_waiters(c, NULL, count_waiter, buf);
  return rc < 0 ? -1 : buf[0] == '\0';
}

typedef struct waiting {
  dlock_lock *l;
  int rc;
} waiting;

static void *wait_thread(void *p) {
  waiting *w = p;
  w->rc = dlock_lock_try_acquire(w->l, 5000, 10000, NULL);
  return NULL;
}

/* Waiter records (dlock deadlocks): on the Redis backend (single,
 * Sentinel, Cluster: the records a wait writes), redlock:// (the records
 * its rounds write, on a quorum of the servers), zk:// (the nodes in
 * line) and etcd:// (the keys in line) a waiting acquire shows while it
 * waits and is gone once it has the lock, and detect_deadlocks is taken. */
static void t_waiter_records(void) {
  CF_NEEDS_SERVER();
  dlock_client *a = cf_client(0), *b = cf_client(0);
  CHECK(a && b);
  char name[64];
  cf_name(name, sizeof name, "waitrec");
  dlock_lock *h, *w;
  CHECK_RC(dlock_lock_new(a, name, NULL, &h), 0);
  CHECK_RC(dlock_lock_new(b, name, "waiter", &w), 0);
  CHECK_RC(dlock_lock_try_acquire(h, 0, 10000, NULL), 0);
  CHECK_EQ(waiter_shown(a, name), 0);
  waiting wt = {w, 1};
  pthread_t th;
  CHECK(pthread_create(&th, NULL, wait_thread, &wt) == 0);
  int64_t t0 = th_now_ms();
  int shown;
  while ((shown = waiter_shown(a, name)) == 0 && th_now_ms() - t0 < 3000)
    th_sleep_ms(2);
  CHECK_EQ(dlock_lock_release(h), 1);
  pthread_join(th, NULL);
  CHECK_EQ(shown, 1);
  CHECK_RC(wt.rc, 0);
  CHECK_EQ(waiter_shown(a, name), 0);
  CHECK_EQ(dlock_lock_release(w), 1);
  dlock_lock_free(h);
  dlock_lock_free(w);
  dlock_client_close(a);
  dlock_client_close(b);
}

/* The waiters seen, for t_deadlock_seen. */
typedef struct seen {
  int n;
  char owner[2][128], name[2][64];
} seen;

static int see_waiter(const dlock_waiter *w, void *ud) {
  seen *s = ud;
  if (s->n < 2 &&
      (strstr(w->name, "/cf/deadlock") || strstr(w->name, "detect"))) {
    snprintf(s->owner[s->n], sizeof s->owner[0], "%s", w->owner);
    snprintf(s->name[s->n], sizeof s->name[0], "%s", w->name);
    s->n++;
  }
  return 0;
}

/* Two processes that really deadlock (each holds one lock and waits for
 * the other's, 2 s at most, on fixed leases): the waiters and the locks'
 * holders that dlock deadlocks reads make the cycle, on every URL kind
 * (Redis, redlock://, zk://, etcd://). */
static void t_deadlock_seen(void) {
  CF_NEEDS_SERVER();
  char names[2][64];
  cf_name(names[0], sizeof names[0], "deadlock0");
  cf_name(names[1], sizeof names[1], "deadlock1");
  int held[2], go[2];
  CHECK(pipe(held) == 0 && pipe(go) == 0);
  pid_t pid[2];
  for (int i = 0; i < 2; i++) {
    pid[i] = fork();
    CHECK(pid[i] >= 0);
    if (pid[i] > 0) continue;
    dlock_client *c = cf_client(0);
    dlock_lock *mine, *other;
    char ok = c && dlock_lock_new(c, names[i], NULL, &mine) == 0 &&
              dlock_lock_new(c, names[1 - i], NULL, &other) == 0 &&
              dlock_lock_try_acquire(mine, 0, 10000, NULL) == 0;
    char g;
    if (write(held[1], &ok, 1) != 1 || !ok || read(go[0], &g, 1) != 1) _exit(2);
    int rc = dlock_lock_try_acquire(other, 2000, 10000, NULL);
    _exit(rc == DLOCK_EBUSY ? 0 : 3);
  }
  char ok[2] = {0, 0};
  CHECK(read(held[0], &ok[0], 1) == 1 && read(held[0], &ok[1], 1) == 1);
  CHECK(ok[0] && ok[1]);
  CHECK(write(go[1], "gg", 2) == 2);
  dlock_client *c = cf_client(0);
  CHECK(c != NULL);
  seen s = {0};
  for (int64_t t0 = th_now_ms(); s.n < 2 && th_now_ms() - t0 < 2000;) {
    s.n = 0;
    CHECK(dlock_client_scan_waiters(c, "/cf/deadlock*", see_waiter, &s) >= 0);
    if (s.n < 2) th_sleep_ms(5);
  }
  CHECK_EQ(s.n, 2);
  /* Each waits for the lock the other holds. */
  for (int i = 0; i < 2; i++) {
    dlock_lock *l;
    dlock_lock_state st;
    CHECK_RC(dlock_lock_new(c, s.name[i], NULL, &l), 0);
    CHECK_RC(dlock_lock_inspect(l, &st), 0);
    dlock_lock_free(l);
    CHECK(st.held && strcmp(st.owner, s.owner[1 - i]) == 0);
  }
  for (int i = 0; i < 2; i++) {
    int st = 0;
    CHECK(waitpid(pid[i], &st, 0) == pid[i]);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  dlock_client_close(c);
}

/* Child i of t_deadlock_detect: holds lock i; after its go, waits for
 * lock 1 - i (2 s at most). Exits 10 on DLOCK_EDEADLK told within 500 ms
 * naming both locks (then lets its own go), 20 when it got the lock, 2
 * when it could not start, else 1. Child 1 detects deadlocks; child 0,
 * the first to wait, only on Redis, where only a detecting client records
 * its wait at once (on zk:// and etcd:// its place in line is there at
 * once; on redlock:// its record comes after 500 ms of waiting, as on
 * Redis without the option): were it to walk too, the two walks could
 * overlap and both be told. */
static void detect_child(char names[2][64], int i, int held_fd, int go_fd) {
  dlock_client_options o;
  cf_options(&o, 0);
  o.detect_deadlocks = i == 1 || strcmp(cf_backend, "redis") == 0;
  dlock_client *c = NULL;
  dlock_lock *mine, *other;
  char ok = dlock_client_open(&o, &c) == 0 &&
            dlock_lock_new(c, names[i], NULL, &mine) == 0 &&
            dlock_lock_new(c, names[1 - i], NULL, &other) == 0 &&
            dlock_lock_try_acquire(mine, 0, 10000, NULL) == 0;
  char g;
  if (write(held_fd, &ok, 1) != 1 || !ok || read(go_fd, &g, 1) != 1) _exit(2);
  int64_t t0 = th_now_ms();
  int rc = dlock_lock_try_acquire(other, 2000, 10000, NULL);
  int64_t took = th_now_ms() - t0;
  const char *msg = dlock_client_errmsg(c);
  fprintf(stderr, "    child %d: %s after %lld ms: %s\n", i, dlock_err_name(rc),
          (long long)took, rc ? msg : "");
  if (rc == DLOCK_EDEADLK && took < 500 && strstr(msg, names[0]) &&
      strstr(msg, names[1]) && strstr(msg, "wait-for cycle")) {
    dlock_lock_release(mine); /* the other goes on */
    _exit(10);
  }
  _exit(rc == 0 ? 20 : 1);
}

/* The fewest server writes of an uncontended acquire and release by c
 * in three (a write carries whatever is pipelined at that moment: a
 * release's messages may go in one or two), into *out. */
static void uncontended_writes(dlock_client *c, const char *name,
                               uint64_t *out) {
  dlock_lock *l;
  dlock_client_stats a, b;
  CHECK_RC(dlock_lock_new(c, name, NULL, &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 10000, NULL), 0); /* the lease made */
  CHECK_EQ(dlock_lock_release(l), 1);
  *out = UINT64_MAX;
  for (int i = 0; i < 3; i++) {
    CHECK_RC(dlock_client_stats_get(c, &a), 0);
    CHECK_RC(dlock_lock_try_acquire(l, 1000, 10000, NULL), 0);
    CHECK_EQ(dlock_lock_release(l), 1);
    CHECK_RC(dlock_client_stats_get(c, &b), 0);
    if (b.writes - a.writes < *out) *out = b.writes - a.writes;
  }
  dlock_lock_free(l);
}

/* detect_deadlocks: of two processes that would deadlock, the one whose
 * wait would close the cycle (the second to wait) fails at once with
 * DLOCK_EDEADLK naming it; once it lets its lock go, the first gets it.
 * An acquire that does not wait pays nothing for it. */
static void t_deadlock_detect(void) {
  CF_NEEDS_SERVER();
  char names[2][64];
  cf_name(names[0], sizeof names[0], "free");
  dlock_client_options o;
  cf_options(&o, 0);
  o.detect_deadlocks = 1;
  dlock_client *plain = cf_client(0), *detecting = NULL;
  CHECK_RC(dlock_client_open(&o, &detecting), 0);
  uint64_t w0 = 0, w1 = 1;
  uncontended_writes(plain, names[0], &w0);
  uncontended_writes(detecting, names[0], &w1);
  fprintf(stderr, "    uncontended: %llu writes, %llu with detect\n",
          (unsigned long long)w0, (unsigned long long)w1);
  CHECK(w1 <= w0);
  dlock_client_close(plain);
  dlock_client_close(detecting);
  cf_name(names[0], sizeof names[0], "detect0");
  cf_name(names[1], sizeof names[1], "detect1");
  int held[2], go[2][2];
  CHECK(pipe(held) == 0 && pipe(go[0]) == 0 && pipe(go[1]) == 0);
  pid_t pid[2];
  for (int i = 0; i < 2; i++) {
    pid[i] = fork();
    CHECK(pid[i] >= 0);
    if (pid[i] == 0) detect_child(names, i, held[1], go[i][0]);
  }
  char ok[2] = {0, 0};
  CHECK(read(held[0], &ok[0], 1) == 1 && read(held[0], &ok[1], 1) == 1);
  CHECK(ok[0] && ok[1]);
  dlock_client *c = cf_client(0);
  CHECK(c != NULL);
  CHECK(write(go[0][1], "g", 1) == 1); /* child 0 waits first */
  seen s = {0};
  for (int64_t t0 = th_now_ms(); s.n < 1 && th_now_ms() - t0 < 2000;) {
    s.n = 0;
    CHECK(dlock_client_scan_waiters(c, "/cf/detect*", see_waiter, &s) >= 0);
    if (s.n < 1) th_sleep_ms(5);
  }
  CHECK_EQ(s.n, 1);
  CHECK(write(go[1][1], "g", 1) == 1);
  int st[2];
  for (int i = 0; i < 2; i++)
    CHECK(waitpid(pid[i], &st[i], 0) == pid[i] && WIFEXITED(st[i]));
  CHECK_EQ(WEXITSTATUS(st[0]), 20);
  CHECK_EQ(WEXITSTATUS(st[1]), 10);
  dlock_client_close(c);
}

/* An event-loop acquire's end: its code and detail. */
typedef struct adone {
  int done, rc;
  char msg[512];
} adone;

static void on_adone(int rc, uint64_t token, const char *errmsg, void *ud) {
  (void)token;
  adone *d = ud;
  d->rc = rc;
  snprintf(d->msg, sizeof d->msg, "%s", errmsg ? errmsg : "");
  d->done = 1;
}

static int wait_second(void *arg) {
  return dlock_lock_try_acquire(arg, 3000, 10000, NULL);
}

/* detect_deadlocks on an event-loop client too: it holds lock 1 while a
 * blocking owner holds lock 0 and waits for lock 1; its acquire of lock 0
 * would close the cycle: DLOCK_EDEADLK naming it, at once; once it lets
 * lock 1 go, the blocking owner gets it. */
static void t_deadlock_detect_async(void) {
  CF_NEEDS_SERVER();
  char names[2][64];
  cf_name(names[0], sizeof names[0], "adetect0");
  cf_name(names[1], sizeof names[1], "adetect1");
  /* The blocking owner: seen waiting at once (on Redis, a detecting
   * client records its wait at once). */
  dlock_client_options o;
  cf_options(&o, 0);
  o.detect_deadlocks = strcmp(cf_backend, "redis") == 0;
  dlock_client *c = NULL;
  CHECK_RC(dlock_client_open(&o, &c), 0);
  dlock_lock *x0, *x1, *y0, *y1;
  /* One owner for both, whichever thread calls. */
  CHECK_RC(dlock_lock_new(c, names[0], "x", &x0), 0);
  CHECK_RC(dlock_lock_new(c, names[1], "x", &x1), 0);
  CHECK_RC(dlock_lock_try_acquire(x0, 0, 10000, NULL), 0);
  cf_fix f = {0};
  CHECK_RC(dlock_loop_new(NULL, &f.lp), 0);
  cf_options(&o, 0);
  o.detect_deadlocks = 1;
  CHECK_RC(dlock_client_open_async(&o, f.lp, &f.c), 0);
  CHECK_RC(dlock_lock_new(f.c, names[0], "y", &y0), 0); /* one owner too */
  CHECK_RC(dlock_lock_new(f.c, names[1], "y", &y1), 0);
  adone d = {0};
  CHECK_RC(dlock_lock_acquire_async(y1, 0, 10000, on_adone, &d, NULL), 0);
  CHECK(cf_run_until(f.lp, &d.done, 5000));
  CHECK_RC(d.rc, 0);
  cf_bg w;
  CHECK(cf_bg_start(&w, wait_second, x1) == 0);
  seen s = {0};
  for (int64_t t0 = th_now_ms(); s.n < 1 && th_now_ms() - t0 < 2000;) {
    s.n = 0;
    CHECK(dlock_client_scan_waiters(c, "/cf/adetect*", see_waiter, &s) >= 0);
    if (s.n < 1) th_sleep_ms(5);
  }
  CHECK_EQ(s.n, 1);
  memset(&d, 0, sizeof d);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_acquire_async(y0, 2000, 10000, on_adone, &d, NULL), 0);
  CHECK(cf_run_until(f.lp, &d.done, 5000));
  int64_t took = th_now_ms() - t0;
  fprintf(stderr, "    %s after %lld ms: %s\n", dlock_err_name(d.rc),
          (long long)took, d.msg);
  CHECK_RC(d.rc, DLOCK_EDEADLK);
  CHECK(took < 500 && strstr(d.msg, "wait-for cycle") &&
        strstr(d.msg, names[0]) && strstr(d.msg, names[1]));
  memset(&d, 0, sizeof d);
  CHECK_RC(dlock_lock_release_async(y1, on_adone, &d, NULL), 0);
  CHECK(cf_run_until(f.lp, &d.done, 5000));
  cf_bg_join(&w);
  CHECK_RC(w.rc, 0);
  CHECK_EQ(dlock_lock_release(x1), 1);
  CHECK_EQ(dlock_lock_release(x0), 1);
  dlock_lock_free(y0);
  dlock_lock_free(y1);
  cf_fix_close(&f);
  dlock_lock_free(x0);
  dlock_lock_free(x1);
  dlock_client_close(c);
}

const th_test cf_events_tests[] = {T_BARE(t_events),
                                   T_BARE(t_events_wait_renew),
                                   T_BARE(t_events_async),
                                   T_BARE(t_waiter_records),
                                   T_BARE(t_deadlock_seen),
                                   T_BARE(t_deadlock_detect),
                                   T_BARE(t_deadlock_detect_async)};
const size_t cf_events_ntests =
    sizeof cf_events_tests / sizeof cf_events_tests[0];
