/* input.c: bad input on every URL kind: empty and oversized names, waits
 * and leases of zero, below zero and huge, an unknown URL option, and a
 * server named twice. Each gets a clear error and changes nothing, or the
 * documented meaning (a wait of 0 is one try, below 0 no limit; a lease
 * of 0 or below is the watchdog's). */
#include "conformance.h"

#include <limits.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define FOR_KINDS(k)                                                           \
  for (int k##_i = 0; k##_i < 5; k##_i++)                                      \
    for (dl_feature k = cf_lock_kinds[k##_i]; cf_has(k); k = DL_FEAT_COUNT)

static void t_bad_names(void) {
  CF_NEEDS_SERVER();
  dlock_client *c = cf_client(0);
  CHECK(c != NULL);
  static char longest[DLOCK_NAME_MAX + 2];
  memset(longest, 'n', sizeof longest - 1);
  longest[0] = '/'; /* a znode path on zk:// */
  FOR_KINDS(k) {
    cf_lock h;
    CHECK_RC(cf_lock_new(c, k, "", NULL, &h), DLOCK_EINVAL);
    CHECK(h.l == NULL);
    CHECK_RC(cf_lock_new(c, k, NULL, NULL, &h), DLOCK_EINVAL);
    CHECK_RC(cf_lock_new(c, k, longest, NULL, &h), DLOCK_ENAMETOOLONG);
    CHECK(h.l == NULL);
  }
  dlock_client_close(c);
}

/* A wait of 0 is one try, below 0 no limit; a lease of 0 or below is the
 * watchdog's (renewed), a long one held, the longest accepted
 * (DLOCK_LEASE_MAX_MS) held, and a longer one refused up front with
 * DLOCK_EINVAL naming the bound, nothing held, alike on every backend. */
static int64_t huge_lease; /* INT64_MAX in t_huge_lease's child */
static void waits_and_leases(void) {
  dlock_client *c = cf_client(0);
  CHECK(c != NULL);
  FOR_KINDS(k) {
    char name[64];
    cf_name(name, sizeof name, dl_feature_name(k));
    cf_lock h;
    CHECK_RC(cf_lock_new(c, k, name, "me", &h), 0);
    const int64_t waits[] = {0, -1, INT64_MIN / 2, INT64_MIN, 0, 0, 0, 0, 0, 0};
    const int64_t leases[] = {10000,
                              10000,
                              10000,
                              10000,
                              0,
                              -5,
                              3600000,
                              DLOCK_LEASE_MAX_MS,
                              DLOCK_LEASE_MAX_MS + 1,
                              huge_lease};
    for (int i = 0; i < (huge_lease ? 10 : 9); i++) {
      int64_t t0 = th_now_ms();
      int rc = dlock_lock_try_acquire(h.l, waits[i], leases[i], NULL);
      if (rc != 0 && leases[i] <= DLOCK_LEASE_MAX_MS)
        fprintf(stderr, "    %s: wait %lld lease %lld: %s: %s\n",
                dl_feature_name(k), (long long)waits[i], (long long)leases[i],
                dlock_err_name(rc), dlock_client_errmsg(c));
      if (leases[i] > DLOCK_LEASE_MAX_MS) {
        CHECK_RC(rc, DLOCK_EINVAL);
        CHECK(strstr(dlock_client_errmsg(c), "DLOCK_LEASE_MAX_MS") != NULL);
        CHECK_EQ(dlock_lock_is_locked(h.l), 0);
        continue;
      }
      CHECK_RC(rc, 0);
      CHECK(th_now_ms() - t0 <= CF_CMD_MS);
      int64_t ttl = 0;
      CHECK_RC(dlock_lock_remaining_ttl(h.l, &ttl), 0);
      CHECK(ttl == -1 || ttl > 0);
      int64_t valid = 0;
      CHECK_RC(dlock_lock_validity(h.l, &valid), 0);
      CHECK(valid > 0);
      CHECK_EQ(dlock_lock_release(h.l), 1);
    }
    cf_lock_free(&h);
  }
  dlock_client_close(c);
}

/* Runs fn in a process of its own for at most limit_ms: its exit status
 * (CHILD_CHECK_FAILED if a CHECK failed there), or -1 when it had to be
 * killed. A sanitizer's report there shows as its exit status (1), and a
 * hang ends. */
#define CHILD_CHECK_FAILED 3
static int in_child(void (*fn)(void), int limit_ms) {
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) return -2;
  if (pid == 0) {
    fn();
    exit(th_failed_checks ? CHILD_CHECK_FAILED : 0); /* the checkers report */
  }
  int64_t end = th_now_ms() + (int64_t)limit_ms * cf_slowdown();
  int st = 0;
  while (waitpid(pid, &st, WNOHANG) == 0) {
    if (th_now_ms() >= end) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -1;
    }
    th_sleep_ms(5);
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void t_waits_and_leases(void) {
  CF_NEEDS_SERVER();
  waits_and_leases();
}

/* A lease of INT64_MAX ms: refused clearly with nothing held, and no
 * arithmetic on it overflows. In a process of its own, so that a
 * sanitizer's report counts. */
static void huge_lease_child(void) {
  huge_lease = INT64_MAX;
  waits_and_leases();
}

static void t_huge_lease(void) {
  CF_NEEDS_SERVER();
  int st = in_child(huge_lease_child, 10000);
  CHECK_EQ(st, 0);
}

/* An acquire without a wait limit whose lease no server keeps returns
 * DLOCK_EINVAL at once (refused before anything is sent), and so does a
 * permit's; a watchdog lease past the bound fails the open. (A server's
 * refusal that no retry can mend, met by a wait with no limit:
 * test_redlock t_unlimited_wait_refused.) */
static void unlimited_huge_lease(void) {
  dlock_client *c = cf_client(0);
  dlock_lock *l = NULL;
  char name[64];
  cf_name(name, sizeof name, "unlimited");
  if (c == NULL || dlock_lock_new(c, name, NULL, &l) != 0) exit(1);
  int rc = dlock_lock_try_acquire(l, -1, INT64_MAX, NULL);
  if (rc == 0) dlock_lock_release(l);
  CHECK_RC(rc, DLOCK_EINVAL);
  dlock_lock_free(l);
  if (cf_has(DL_FEAT_PERMITS)) {
    dlock_permits *p = NULL;
    char id[DLOCK_PERMIT_ID_LEN];
    CHECK_RC(dlock_permits_new(c, name, &p), 0);
    CHECK_RC(dlock_permits_try_set(p, 1), 1);
    CHECK_RC(dlock_permits_acquire(p, DLOCK_LEASE_MAX_MS + 1, id),
             DLOCK_EINVAL);
    CHECK(strstr(dlock_client_errmsg(c), "DLOCK_LEASE_MAX_MS") != NULL);
    CHECK_EQ(dlock_permits_get_available(p), 1);
    dlock_permits_free(p);
  }
  dlock_client_close(c);
  dlock_client_options o;
  cf_options(&o, DLOCK_LEASE_MAX_MS + 1);
  dlock_client *d = NULL;
  CHECK_RC(dlock_client_open(&o, &d), DLOCK_EINVAL);
  CHECK(d == NULL);
  CHECK(strstr(dlock_client_open_errmsg(), "watchdog_timeout_ms") != NULL);
}

static void t_unlimited_wait_error(void) {
  CF_NEEDS_SERVER();
  CHECK_EQ(in_child(unlimited_huge_lease, 3000), 0);
}

/* A huge wait (INT64_MAX ms) on a free lock: taken at once. In a process
 * of its own: a sanitizer's report there is seen as its exit status. */
static void huge_wait(void) {
  dlock_client *c = cf_client(0);
  if (c == NULL) exit(1);
  FOR_KINDS(k) {
    char name[64];
    cf_name(name, sizeof name, dl_feature_name(k));
    cf_lock h;
    if (cf_lock_new(c, k, name, "me", &h) != 0 ||
        dlock_lock_try_acquire(h.l, INT64_MAX, 10000, NULL) != 0 ||
        dlock_lock_release(h.l) != 1)
      th_failed_checks++;
    cf_lock_free(&h);
  }
  dlock_client_close(c);
}

static void t_huge_wait(void) {
  CF_NEEDS_SERVER();
  int st = in_child(huge_wait, 5000);
  CHECK_EQ(st, 0);
}

/* The run's URL with `tail` put into its query ("?x" or "&x"). */
static void with_option(char *buf, size_t len, const char *opt) {
  snprintf(buf, len, "%s%s%s", cf_dep.url, strchr(cf_dep.url, '?') ? "&" : "?",
           opt);
}

static void t_unknown_url_option(void) {
  CF_NEEDS_SERVER();
  char url[1200];
  with_option(url, sizeof url, "nosuchoption=1");
  dlock_client_options o;
  cf_options(&o, 0);
  o.url = url;
  dlock_client *c = NULL;
  int rc = dlock_client_open(&o, &c);
  const char *msg = dlock_client_open_errmsg();
  if (rc != DLOCK_EURL) fprintf(stderr, "    %s: %d %s\n", url, rc, msg);
  CHECK_RC(rc, DLOCK_EURL);
  CHECK(c == NULL);
  CHECK(strstr(msg, "nosuchoption") != NULL);
}

/* A URL of several servers naming one twice: refused with DLOCK_EINVAL,
 * naming it, on every URL kind of several servers alike (it would count
 * twice towards a quorum, or stand for a member that is not there: a
 * typo for another goes unnoticed). */
static void t_server_twice(void) {
  CF_NEEDS_SERVER();
  const char *kind = cf_dep.kind; /* (CF_HERE("redis") is the backend too) */
  if (strcmp(kind, "redis") == 0 || strcmp(kind, "unix") == 0 ||
      strcmp(kind, "rediss") == 0)
    return; /* one server by design */
  const char *hosts = strstr(cf_dep.url, "://") + 3;
  size_t first = strcspn(hosts, ",/?");
  char url[1400], twice[64];
  snprintf(twice, sizeof twice, "%.*s", (int)first, hosts);
  snprintf(url, sizeof url, "%.*s%s,%s", (int)(hosts - cf_dep.url), cf_dep.url,
           twice, hosts);
  dlock_client_options o;
  cf_options(&o, 0);
  o.url = url;
  dlock_client *c = NULL;
  int rc = dlock_client_open(&o, &c);
  const char *msg = dlock_client_open_errmsg();
  fprintf(stderr, "    %s: %s %s\n", url, dlock_err_name(rc), msg);
  dlock_client_close(c);
  CHECK_RC(rc, DLOCK_EINVAL);
  CHECK(c == NULL);
  CHECK(strstr(msg, twice) != NULL && strstr(msg, "twice") != NULL);
}

const th_test cf_input_tests[] = {
    T_BARE(t_bad_names),    T_BARE(t_waits_and_leases),
    T_BARE(t_huge_wait),    T_BARE(t_unknown_url_option),
    T_BARE(t_server_twice), T_BARE(t_unlimited_wait_error),
    T_BARE(t_huge_lease),
};
const size_t cf_input_ntests = sizeof cf_input_tests / sizeof cf_input_tests[0];
