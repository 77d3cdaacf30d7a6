/* common.c: the conformance suite's shared helpers (conformance.h). */
#include "conformance.h"

#include <ctype.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

th_deploy cf_dep;
const char *cf_backend;
bool cf_skipped;

const dl_feature cf_lock_kinds[5] = {DL_FEAT_LOCK, DL_FEAT_FAIR, DL_FEAT_READ,
                                     DL_FEAT_WRITE, DL_FEAT_PLAIN};

bool cf_has(dl_feature f) {
  return dl_backend_supports(cf_backend, f);
}

int64_t cf_lease_floor_ms(void) {
  return strcmp(cf_backend, "etcd") == 0 ? 2000 : 0;
}

bool cf_waiters_by_session(void) {
  return !cf_has(DL_FEAT_LEASE) || strcmp(cf_backend, "etcd") == 0;
}

int cf_slowdown(void) {
  static int s;
  if (s == 0) {
    const char *e = getenv("DLOCK_TEST_SLOWDOWN");
    s = e && atoi(e) > 1 ? atoi(e) : 1;
  }
  return s;
}

void cf_options(dlock_client_options *o, int64_t watchdog_ms) {
  th_deploy_options(&cf_dep, o);
  o->command_timeout_ms = CF_CMD_MS;
  o->connect_timeout_ms = 2000;
  o->reconnect_min_ms = 1;
  o->reconnect_max_ms = 50;
  if (watchdog_ms > 0) o->watchdog_timeout_ms = watchdog_ms;
}

dlock_client *cf_client(int64_t watchdog_ms) {
  dlock_client_options o;
  cf_options(&o, watchdog_ms);
  return th_client_opts(&o);
}

int cf_client_async(dlock_loop *lp, int64_t watchdog_ms, dlock_client **out) {
  dlock_client_options o;
  cf_options(&o, watchdog_ms);
  return dlock_client_open_async(&o, lp, out);
}

void cf_name(char *buf, size_t len, const char *tag) {
  snprintf(buf, len, "/cf/%s-%d", tag, (int)getpid());
}

int cf_lock_new(dlock_client *c, dl_feature kind, const char *name,
                const char *owner, cf_lock *out) {
  memset(out, 0, sizeof *out);
  switch (kind) {
  case DL_FEAT_FAIR:
    return dlock_fairlock_new(c, name, owner, CF_FAIR_STALE_MS, &out->l);
  case DL_FEAT_PLAIN: return dlock_plainlock_new(c, name, owner, &out->l);
  case DL_FEAT_READ:
  case DL_FEAT_WRITE: {
    int rc = dlock_rwlock_new(c, name, owner, &out->rw);
    if (rc == 0)
      out->l = kind == DL_FEAT_READ ? dlock_rwlock_read(out->rw)
                                    : dlock_rwlock_write(out->rw);
    return rc;
  }
  default: return dlock_lock_new(c, name, owner, &out->l);
  }
}

void cf_lock_free(cf_lock *h) {
  if (h->rw)
    dlock_rwlock_free(h->rw);
  else
    dlock_lock_free(h->l);
  memset(h, 0, sizeof *h);
}

dl_feature cf_rival(dl_feature kind) {
  return kind == DL_FEAT_READ ? DL_FEAT_WRITE : kind;
}

static bool contains_ci(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  for (; *hay; hay++) {
    size_t i = 0;
    while (i < n && hay[i] &&
           tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
      i++;
    if (i == n) return true;
  }
  return false;
}

bool cf_notsup(int rc, const char *msg, dl_feature f) {
  msg = msg ? msg : "";
  bool ok = rc == DLOCK_ENOTSUP && contains_ci(msg, cf_backend) &&
            contains_ci(msg, dl_feature_word(f));
  if (!ok)
    fprintf(stderr,
            "    %s on %s: %d (%s) \"%s\", expected DLOCK_ENOTSUP naming "
            "\"%s\" and \"%s\"\n",
            dl_feature_name(f), cf_dep.kind, rc, dlock_err_name(rc), msg,
            cf_backend, dl_feature_word(f));
  return ok;
}

cf_fence *cf_fence_new(void) {
  void *p = mmap(NULL, sizeof(cf_fence), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  memset(p, 0, sizeof(cf_fence));
  return p;
}

void cf_fence_free(cf_fence *f) {
  if (f) munmap(f, sizeof *f);
}

void cf_fence_write(cf_fence *f, uint64_t token) {
  if (atomic_fetch_add(&f->inside, 1) != 0) atomic_fetch_add(&f->overlaps, 1);
  unsigned long long last = atomic_load(&f->last);
  /* The resource takes only a token above the last one it saw. */
  if (token <= last)
    atomic_fetch_add(&f->stale, 1);
  else
    atomic_store(&f->last, token);
  long n = atomic_load(&f->count);
  for (int i = 0; i < 50; i++)
    sched_yield();                /* widen the window */
  atomic_store(&f->count, n + 1); /* a read-modify-write */
  atomic_fetch_sub(&f->inside, 1);
}

void cf_fence_waited(cf_fence *f, int64_t ms) {
  long long was = atomic_load(&f->longest_wait);
  while (ms > was &&
         !atomic_compare_exchange_weak(&f->longest_wait, &was, ms)) {
  }
}

void cf_done(int rc, uint64_t token, const char *errmsg, void *ud) {
  (void)errmsg;
  cf_got *g = ud;
  g->rc = rc;
  g->token = token;
  g->at = th_now_ms();
  g->calls++;
}

bool cf_run_until(dlock_loop *lp, const int *flag, int timeout_ms) {
  /* Scaled like the suite's other times (valgrind: 20 x). */
  int64_t end = th_now_ms() + (int64_t)timeout_ms * cf_slowdown();
  while (!*flag) {
    int64_t left = end - th_now_ms();
    if (left <= 0) return false;
    dlock_loop_run(lp, left < 10 ? left : 10);
  }
  return true;
}

static void *bg_main(void *arg) {
  cf_bg *b = arg;
  b->rc = b->fn(b->arg);
  b->at = th_now_ms();
  return NULL;
}

int cf_bg_start(cf_bg *b, int (*fn)(void *), void *arg) {
  b->fn = fn;
  b->arg = arg;
  b->at = 0;
  return pthread_create(&b->t, NULL, bg_main, b);
}

void cf_bg_join(cf_bg *b) {
  pthread_join(b->t, NULL);
}

int64_t cf_wake_ms(void) {
  return (cf_has(DL_FEAT_WAIT_NOTIFY) ? 100 : 1000) * cf_slowdown();
}

int cf_fix_open(cf_fix *f, int64_t watchdog_ms) {
  memset(f, 0, sizeof *f);
  int rc = dlock_loop_new(NULL, &f->lp);
  if (rc == 0) rc = cf_client_async(f->lp, watchdog_ms, &f->c);
  return rc;
}

void cf_fix_close(cf_fix *f) {
  dlock_client_close(f->c);
  dlock_loop_free(f->lp);
}

bool cf_in_time(int64_t took, int64_t wait_ms, int64_t slack) {
  bool ok = took >= wait_ms - slack && took <= wait_ms + CF_CMD_MS;
  if (!ok)
    fprintf(stderr, "    took %lld ms for %lld ms (allowed %lld..%lld)\n",
            (long long)took, (long long)wait_ms, (long long)(wait_ms - slack),
            (long long)(wait_ms + CF_CMD_MS));
  return ok;
}

bool cf_here(const char *where) {
  while (*where) {
    size_t n = strcspn(where, ",");
    if ((strlen(cf_backend) == n && strncmp(cf_backend, where, n) == 0) ||
        (strlen(cf_dep.kind) == n && strncmp(cf_dep.kind, where, n) == 0))
      return true;
    where += n + (where[n] == ',');
  }
  return false;
}

bool cf_waiters_reach(dlock_lock *l, int n, int timeout_ms) {
  /* Scaled: under valgrind a forked waiter takes seconds to show. */
  int64_t end = th_now_ms() + (int64_t)timeout_ms * cf_slowdown();
  for (;;) {
    dlock_lock_state st;
    if (dlock_lock_inspect(l, &st) == 0 && (st.waiters >= n || st.queued >= n))
      return true;
    if (th_now_ms() >= end) return false;
    th_sleep_ms(2);
  }
}

/* The deployment's Redis servers a client talks to (none for zk, etcd). */
static int redis_servers(th_redis **out) {
  const char *k = cf_dep.kind;
  if (strcmp(k, "redis") == 0 || strcmp(k, "unix") == 0 ||
      strcmp(k, "rediss") == 0) {
    out[0] = &cf_dep.redis[0];
    return 1;
  }
  if (strcmp(k, "sentinel") == 0) {
    out[0] = &cf_dep.sentinel.master;
    return 1;
  }
  th_redis *three = strcmp(k, "redlock") == 0   ? cf_dep.redis
                    : strcmp(k, "cluster") == 0 ? cf_dep.cluster.nodes
                                                : NULL;
  for (int i = 0; three && i < 3; i++)
    out[i] = &three[i];
  return three ? 3 : 0;
}

bool cf_server_forgot(const char *client_name, int timeout_ms) {
  char needle[80];
  snprintf(needle, sizeof needle, "name=%s ", client_name);
  th_redis *srv[3];
  int n = redis_servers(srv);
  int64_t end = th_now_ms() + (int64_t)timeout_ms * cf_slowdown();
  for (;;) {
    bool listed = false;
    for (int i = 0; i < n && !listed; i++) {
      redisReply *r = th_cmd(srv[i], "CLIENT LIST");
      listed = r == NULL || r->type != REDIS_REPLY_STRING ||
               strstr(r->str, needle) != NULL;
      if (r) freeReplyObject(r);
    }
    if (!listed) return true;
    if (th_now_ms() >= end) return false;
    th_sleep_ms(2);
  }
}
