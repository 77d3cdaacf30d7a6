/* etcd_support.c: what test_etcd_conn and test_etcd_async share
 * (etcd_support.h). */
#include "etcd_support.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <linux/tcp.h> /* tcp_info with tcpi_data_segs_out */
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>

void et_on_adone(int rc, uint64_t token, const char *errmsg, void *ud) {
  (void)token, (void)errmsg;
  et_adone *d = ud;
  d->rc = rc;
  d->calls++;
}

bool et_run_all(dlock_loop *lp, const et_adone *d, int n) {
  int64_t end = th_now_ms() + th_soon(10000);
  for (;;) {
    int left = 0;
    for (int i = 0; i < n; i++)
      left += d[i].calls == 0;
    if (left == 0) return true;
    if (th_now_ms() >= end) return false;
    dlock_loop_run(lp, 10);
  }
}

int et_tasks(void) {
  DIR *d = opendir("/proc/self/task");
  int n = 0;
  for (struct dirent *de; d && (de = readdir(d)) != NULL;)
    n += de->d_name[0] != '.';
  if (d) closedir(d);
  return n;
}

int et_run_sampled(dlock_loop *lp, int64_t ms) {
  int most = et_tasks();
  for (int64_t end = th_now_ms() + ms; th_now_ms() < end;) {
    dlock_loop_run(lp, 5);
    int n = et_tasks();
    if (n > most) most = n;
  }
  return most;
}

int et_keys_under(const th_etcd *s, const char *prefix) {
  enum { CAP = 1 << 17 }; /* a few thousand keys */
  char args[128], *buf = malloc(CAP);
  if (buf == NULL) return -1;
  snprintf(args, sizeof args, "get --prefix %s --keys-only", prefix);
  const char *out = th_etcd_ctl(s, args, buf, CAP);
  int n = 0;
  for (const char *p = out; *p; p++) /* non-empty lines */
    n += *p != '\n' && (p == out || p[-1] == '\n');
  free(buf);
  return n;
}

void et_open_holding(const th_etcd *s, int64_t watchdog_ms, const char *prefix,
                     int n, dlock_loop **lp, dlock_lock **l, dlock_client **c) {
  *c = NULL;
  CHECK_RC(dlock_loop_new(NULL, lp), 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = s->url;
  if (watchdog_ms) o.watchdog_timeout_ms = watchdog_ms;
  dlock_client *cl;
  CHECK_RC(dlock_client_open_async(&o, *lp, &cl), 0);
  et_adone *d = calloc((size_t)n, sizeof *d);
  CHECK(d != NULL);
  char name[32];
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof name, "%s%d", prefix, i);
    CHECK_RC(dlock_lock_new(cl, name, NULL, &l[i]), 0);
    CHECK_RC(dlock_lock_acquire_async(l[i], 0, 0, et_on_adone, &d[i], NULL), 0);
  }
  bool all = et_run_all(*lp, d, n);
  for (int i = 0; i < n && all; i++)
    all = d[i].rc == 0;
  free(d);
  CHECK(all);
  *c = cl;
}

int et_conns_to(int port, long long *segs) {
  int conns = 0;
  long long n = 0;
  DIR *d = opendir("/proc/self/fd");
  for (struct dirent *de; d && (de = readdir(d)) != NULL;) {
    int fd = atoi(de->d_name);
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    struct tcp_info ti;
    socklen_t tl = sizeof ti;
    if (de->d_name[0] == '.' || fd == dirfd(d) ||
        getpeername(fd, (struct sockaddr *)&a, &len) != 0 ||
        a.sin_family != AF_INET || ntohs(a.sin_port) != port ||
        getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) != 0)
      continue;
    conns += ti.tcpi_state == 1; /* TCP_ESTABLISHED (netinet/tcp.h) */
    n += ti.tcpi_data_segs_out;
  }
  if (d) closedir(d);
  if (segs) *segs = n;
  return conns;
}

static atomic_int count_port, connects;

void et_count_connects(int port) {
  atomic_store(&connects, 0);
  atomic_store(&count_port, port);
}

int et_connects(void) { return atomic_load(&connects); }

/* libc's connect, counted: this executable's definition comes first in
 * the lookup of libcurl's calls (ld exports it, libcurl referring to
 * it), and passes on to the next (libc's, or a sanitizer's). */
int connect(int fd, const struct sockaddr *a, socklen_t len) {
  typedef int connect_fn(int, const struct sockaddr *, socklen_t);
  static connect_fn *_Atomic real;
  connect_fn *f = atomic_load(&real);
  if (f == NULL) {
    *(void **)&f = dlsym(RTLD_NEXT, "connect");
    atomic_store(&real, f);
  }
  int port = atomic_load(&count_port);
  if (port && a && a->sa_family == AF_INET &&
      ntohs(((const struct sockaddr_in *)a)->sin_port) == port)
    atomic_fetch_add(&connects, 1);
  return f(fd, a, len);
}
