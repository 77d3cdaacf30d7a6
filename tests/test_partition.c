/* test_partition.c: faults of the network itself. The run enters a network
 * namespace of its own (its loopback, its firewall), where an iptables rule
 * drops one connection's packets as a partition would: the kernel keeps
 * what it has not delivered and sends it once the rule goes, even after the
 * socket is closed. Needs CAP_SYS_ADMIN and
 * CAP_NET_ADMIN (root) and iptables; without them the run is skipped (77). */
#include "harness.h"

#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- the namespace, the rules, the kernel's sockets ---- */

static int skip(const char *why) {
  printf("SKIP: %s\n", why);
  return 77;
}

/* Enters a network namespace with its loopback up. Returns 0 or 77. */
static int enter_netns(void) {
  if (unshare(CLONE_NEWNET) != 0)
    return skip("cannot enter a network namespace of its own (not root?)");
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  strcpy(ifr.ifr_name, "lo");
  bool up = fd >= 0 && ioctl(fd, SIOCGIFFLAGS, &ifr) == 0 &&
            (ifr.ifr_flags |= IFF_UP, ioctl(fd, SIOCSIFFLAGS, &ifr) == 0);
  if (fd >= 0) close(fd);
  if (!up) return skip("cannot bring the namespace's loopback up");
  if (system("iptables -w -L OUTPUT -n >/dev/null 2>&1") != 0)
    return skip("iptables is missing or not allowed");
  return 0;
}

/* The local ports of the established TCP connections to `port`, up to max
 * (/proc/net/tcp: the namespace's). Returns how many. */
static int conns_to(int port, int *out, int max) {
  FILE *f = fopen("/proc/net/tcp", "r");
  if (f == NULL) return 0;
  char line[512];
  int n = 0;
  unsigned lp, rp, st;
  if (fgets(line, sizeof line, f) == NULL) n = 0; /* the header */
  while (n < max && fgets(line, sizeof line, f))
    if (sscanf(line, " %*d: %*x:%x %*x:%x %x", &lp, &rp, &st) == 3 &&
        (int)rp == port && st == 1 /* TCP_ESTABLISHED */)
      out[n++] = (int)lp;
  fclose(f);
  return n;
}

/* Whether the socket at local port lport still has bytes the server has not
 * acknowledged (which the kernel retransmits), in whatever state it is. */
static bool unacked(int lport) {
  FILE *f = fopen("/proc/net/tcp", "r");
  if (f == NULL) return false;
  char line[512];
  bool any = false;
  unsigned lp, tx;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, " %*d: %*x:%x %*x:%*x %*x %x:", &lp, &tx) == 2 &&
        (int)lp == lport && tx > 0)
      any = true;
  fclose(f);
  return any;
}

static bool sh(const char *fmt, int a, int b) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, fmt, a, b);
  return system(cmd) == 0;
}

/* Drops every packet from local port lport to the server's port. */
static bool cut(int lport, int port) {
  return sh("iptables -w -A OUTPUT -p tcp --sport %d --dport %d -j DROP",
            lport, port);
}

static bool heal(void) { return system("iptables -w -F OUTPUT") == 0; }

/* A plain connection to the server's TCP port, as a hiredis-less client. */
static int raw_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    close(fd);
    fd = -1;
  }
  return fd;
}

static bool key_set(void *k) { return th_cmd_int(&th_srv, "EXISTS %s", (char *)k) == 1; }

typedef struct {
  const int *ports;
  int n;
} port_set;

static bool all_acked(void *p) {
  const port_set *s = p;
  for (int i = 0; i < s->n; i++)
    if (unacked(s->ports[i])) return false;
  return true;
}

/* ---- a release cut off by a partition never lands on a later hold ----
 * The release's connection is cut, the release times out, and the same
 * owner takes the lock again on a new connection (on the server, whose hold
 * the release never reached, the acquire writes the count the client knows:
 * 1). When the partition heals, the kernel would still deliver the old
 * connection's release, closed or not, and it would end the new hold while
 * its owner goes on as the holder. A connection given up on is reset
 * instead (dl_io_abort), so nothing of it is left to arrive.
 * The positive control: a plain connection cut at the same moment and
 * closed gracefully, as the client did before; its write does arrive once
 * the partition heals. */
static void t_cut_release_not_late(void) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = th_srv.url;
  o.command_timeout_ms = (int)th_soon(400);
  o.reconnect_min_ms = 20;
  o.reconnect_max_ms = 100;
  dlock_client *c = th_client_opts(&o);
  CHECK(c != NULL);
  dlock_lock *l = NULL;
  CHECK_RC(dlock_lock_new(c, "part", NULL, &l), 0);
  /* A cycle first: the server knows the release's script by its digest
   * (EVALSHA), so a release that arrives late runs. */
  CHECK_RC(dlock_lock_try_acquire(l, 0, 60000, NULL), 0);
  CHECK_EQ(dlock_lock_release(l), 1);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 60000, NULL), 0);
  int control = raw_connect(th_srv.port);
  CHECK(control >= 0);

  int ports[8];
  int n = conns_to(th_srv.port, ports, 8);
  CHECK(n >= 2); /* the client's and the control's */
  for (int i = 0; i < n; i++) CHECK(cut(ports[i], th_srv.port));

  static const char set_late[] = "SET late 1\r\n";
  CHECK(write(control, set_late, sizeof set_late - 1) ==
        (ssize_t)(sizeof set_late - 1));
  shutdown(control, SHUT_RDWR);
  close(control);
  int rc = dlock_lock_release(l);
  CHECK(rc < 0); /* timed out: the server never saw it */
  CHECK_RC(dlock_lock_try_acquire(l, 0, 60000, NULL), 0); /* a new connection */
  redisReply *r = th_cmd(&th_srv, "HVALS part");
  CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
        strcmp(r->element[0]->str, "1") == 0);
  freeReplyObject(r);

  CHECK(heal());
  /* The control's write arrives: the partition's retransmissions get
   * through. Then every cut socket has nothing left unacknowledged (the
   * client's is gone: it was reset). */
  CHECK(th_wait_for(key_set, "late", 15000));
  port_set s = {ports, n};
  CHECK(th_wait_for(all_acked, &s, 15000));
  CHECK_EQ(th_cmd_int(&th_srv, "EXISTS part"), 1);
  r = th_cmd(&th_srv, "HVALS part");
  CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
        strcmp(r->element[0]->str, "1") == 0);
  freeReplyObject(r);
  CHECK_EQ(dlock_lock_is_held(l), 1);
  dlock_lock_free(l);
  dlock_client_close(c);
}

int main(int argc, char **argv) {
  int rc = enter_netns();
  if (rc != 0) return rc;
  static const th_test tests[] = {T(t_cut_release_not_late)};
  return th_run(argc, argv, tests, sizeof tests / sizeof tests[0], NULL);
}
