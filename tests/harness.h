/* harness.h: a tiny test runner (one process per test) and real redis-server
 * processes for tests. */
#ifndef DLOCK_TEST_HARNESS_H
#define DLOCK_TEST_HARNESS_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

#include "dlock.h"

/* ---- assertions: a failed check ends the current test ---- */
extern int th_failed_checks;
/* Says why a check failed (printf's format: one line, no newline) on
 * stderr and counts it; the runner repeats the test's first on its FAIL
 * line, below any leak report of the clients the test left open. */
void th_check_failed(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      th_check_failed("%s:%d: CHECK(%s) failed", __FILE__, __LINE__, #cond);   \
      return;                                                                  \
    }                                                                          \
  } while (0)
/* CHECK with the reason in `why` (a string) said as well. */
#define CHECK_WHY(cond, why)                                                   \
  do {                                                                         \
    if (!(cond)) {                                                             \
      th_check_failed("%s:%d: CHECK(%s) failed: %s", __FILE__, __LINE__,       \
                      #cond, (why));                                           \
      return;                                                                  \
    }                                                                          \
  } while (0)
#define CHECK_EQ(a, b)                                                         \
  do {                                                                         \
    long long a_ = (long long)(a), b_ = (long long)(b);                        \
    if (a_ != b_) {                                                            \
      th_check_failed("%s:%d: %s == %lld, expected %s == %lld", __FILE__,      \
                      __LINE__, #a, a_, #b, b_);                               \
      return;                                                                  \
    }                                                                          \
  } while (0)
#define CHECK_RC(call, expect)                                                 \
  do {                                                                         \
    int rc_ = (call);                                                          \
    if (rc_ != (expect)) {                                                     \
      th_check_failed("%s:%d: %s returned %d (%s), expected %s", __FILE__,     \
                      __LINE__, #call, rc_, dlock_err_name(rc_), #expect);     \
      return;                                                                  \
    }                                                                          \
  } while (0)

typedef void (*th_test_fn)(void);
typedef struct th_test {
  const char *name;
  th_test_fn fn;
  const char *redis; /* the test's server: extra arguments, or NULL: none */
} th_test;

/* A test with its own fresh redis-server, th_srv. */
#define T(fn) {#fn, fn, ""}
/* ... whose server is started with `extra` arguments (a string, or a char
 * array that a before_all hook fills in). */
#define T_REDIS(fn, extra) {#fn, fn, extra}
/* A test without a server. */
#define T_BARE(fn) {#fn, fn, NULL}

/* Runs the tests (all, or those named on the command line; an unknown name
 * is an error), each in a process of its own, as libuv's runner does, so
 * that a failed CHECK, a crash or a hang cannot leak clients, threads or
 * holds into the next test. For each test the runner, in its own process:
 * starts the test's server (T, T_REDIS), forks the test into a new process
 * group, waits for it at most DLOCK_TEST_TIMEOUT_S seconds (default 120),
 * then kills what is left of the group and stops the server by pid. It
 * prints one line per test ("ok", or "FAIL" with the exit status, signal or
 * timeout) and the closing "N passed, N failed".
 *
 * A test passes if it returns without a failed CHECK and its process then
 * exits 0; exit() runs LeakSanitizer and valgrind's leak check in that
 * process, and a report there fails the test (valgrind follows the fork
 * without --trace-children). `before_all` (may be NULL) runs once in the
 * runner's process before the first test; nonzero stops the run. Returns the
 * exit status: 0, 1 if a test failed, 2 on a usage or setup error. */
int th_run(int argc, char **argv, const th_test *tests, size_t n,
           int (*before_all)(void));
/* If set, called in the runner's process after each test, whatever its
 * end (the conformance runner resumes the servers a test stopped, so a
 * test that crashed mid-stall leaves none stopped for the next). */
extern void (*th_after_each)(void);
/* The same, all in the calling process, one test after the other, for a
 * suite whose tests share state on purpose (test_safety: its fenced
 * resource is a thread of the driver). A crash ends the run. */
int th_run_inline(int argc, char **argv, const th_test *tests, size_t n);
#define TH_MAIN_WITH(before_all, ...)                                          \
  int main(int argc, char **argv) {                                            \
    static const th_test tests_[] = {__VA_ARGS__};                             \
    return th_run(argc, argv, tests_, sizeof tests_ / sizeof tests_[0],        \
                  before_all);                                                 \
  }
#define TH_MAIN(...) TH_MAIN_WITH(NULL, __VA_ARGS__)

/* A bound on how soon something happens, in ms: as given, or ten times
 * that under valgrind (DLOCK_UNDER_VALGRIND: its slowdown is not what
 * such bounds test; the normal and sanitizer runs hold the library to
 * them). */
static inline int64_t th_soon(int64_t ms) {
  return getenv("DLOCK_UNDER_VALGRIND") ? 10 * ms : ms;
}
/* The sanitizers' slowdown that scripts/test.sh announces
 * (DLOCK_TEST_SLOWDOWN: 2 under ASan, 4 under TSan; else 1), for a bound
 * on work that grows with the number of holds rather than a single
 * notice's latency. */
static inline int th_slowdown(void) {
  const char *e = getenv("DLOCK_TEST_SLOWDOWN");
  int n = e ? atoi(e) : 1;
  return n > 1 ? n : 1;
}

/* ---- redis-server processes ---- */
typedef struct th_redis {
  pid_t pid;
  int port;
  char dir[256];
  char sock[300];
  char url[400];     /* redis://127.0.0.1:port */
  char sock_url[400]; /* unix://dir/redis.sock */
  char extra[1024];  /* extra arguments, kept for restarts */
  bool sentinel;     /* started as `redis-server dir/sentinel.conf --sentinel` */
} th_redis;

/* The test's own server (tests declared with T or T_REDIS): the runner
 * starts it fresh for each test and stops it by pid once the test's process
 * is gone. A test may stop, kill or restart it; it never outlives the run. */
extern th_redis th_srv;
/* The run's temp dir (under /tmp, removed at the end of the run; "/tmp"
 * outside th_run): servers' dirs go there, and a before_all hook may keep
 * files there. */
const char *th_tmpdir(void);

/* Starts redis-server on a free loopback port and a unix socket in a fresh
 * dir (in th_tmpdir()), with `extra` arguments (space-separated, may be
 * NULL), and waits until it answers PING. Returns 0 or -1. A server a test
 * starts itself is stopped when the test's process exits or is killed. */
int th_redis_start(th_redis *r, const char *extra);
/* Starts again on the same port and dir (after a kill or stop). */
int th_redis_restart(th_redis *r);
void th_redis_kill(th_redis *r, int sig); /* signal; SIGKILL also reaps */
void th_redis_stop(th_redis *r);          /* stop, reap and remove the dir */
/* A fresh hiredis connection over the unix socket (caller frees). */
redisContext *th_redis_connect(th_redis *r);
/* One command through a fresh connection; returns the reply (caller frees). */
redisReply *th_cmd(th_redis *r, const char *fmt, ...);
long long th_cmd_int(th_redis *r, const char *fmt, ...);
/* Whether the master at m counts at least n replicas online: synced and
 * acknowledging, so that WAIT can count them. A replica's own
 * master_link_status:up comes first; after a diskless sync the master
 * puts it online only at its first REPLCONF ACK, up to a second later. */
bool th_replicas_online(th_redis *m, int n);
/* The number right after `prefix` ("blocked_clients:") in INFO `section`
 * of r, or `absent`. */
long long th_info_ll(th_redis *r, const char *section, const char *prefix,
                     long long absent);
/* Connections to r (CLIENT LIST), only those of `type` ("normal",
 * "pubsub", ...) unless NULL; the asking one included. */
int th_clients(th_redis *r, const char *type);
/* Calls of `cmd` in INFO commandstats ("cmdstat_<cmd>:calls=<n>"), 0 if
 * absent (CONFIG RESETSTAT zeroes them). */
long long th_calls(th_redis *r, const char *cmd);
/* Scripts run on r: EVALSHA and EVAL calls (a script's first use on an
 * event-loop connection goes as EVAL, with its body). */
long long th_scripts_run(th_redis *r);

/* A client on r with the given watchdog timeout (0 = default). */
dlock_client *th_client(th_redis *r, int64_t watchdog_ms);
dlock_client *th_client_opts(dlock_client_options *o);

/* Waits until `channel` has a subscriber on r (PUBSUB NUMSUB). */
bool th_wait_subscribed(th_redis *r, const char *channel, int timeout_ms);
/* Waits until `channel` has no subscriber on r. */
bool th_wait_unsubscribed(th_redis *r, const char *channel, int timeout_ms);
/* Waits until the list `key` has exactly n elements (a queue reached n
 * waiters). Returns false if it did not within timeout_ms. */
bool th_wait_llen(th_redis *r, const char *key, long long n, int timeout_ms);

/* ---- clients on a URL the test names, and the CLI (harness_url.c) ---- */
/* A client on url (any URL kind) with a connect timeout of 1 s and the
 * given watchdog timeout (0 = default), or NULL (the reason printed). */
dlock_client *th_client_url(const char *url, int64_t watchdog_ms);
/* Whether dlock_client_open refuses each of the n URLs with DLOCK_EURL and
 * sets its *out to NULL; if not, says which and what it got. */
bool th_urls_refused(const char *const *urls, size_t n);
/* dlock_client_open's code for url with the connect timeout given (a
 * client it opened is closed again); its message is
 * dlock_client_open_errmsg()'s. */
int th_open_rc(const char *url, int connect_timeout_ms);
/* Runs `cli -u 'url' args` (args from fmt, through sh -c) and returns its
 * exit status, or -1; its stdout (up to len - 1 bytes, NUL-terminated)
 * into out unless out is NULL. */
int th_cli(const char *cli, const char *url, char *out, size_t len,
           const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* ---- Sentinel: a master, its replica and 3 sentinels (about 2 s) ---- */
typedef struct th_sentinel_set {
  th_redis master, replica, sentinels[3];
  char name[32];  /* the master's name: "mymaster" */
  char url[600];  /* redis-sentinel://127.0.0.1:p0,127.0.0.1:p1,.../mymaster */
} th_sentinel_set;
/* Starts them, each in its own dir under th_tmpdir(), the master with
 * `extra` arguments (may be NULL; the replica gets them too), and waits
 * until the replica is linked and every sentinel knows the master and the
 * replica. Sentinels: down-after 1000 ms, failover-timeout 2000 ms. Returns
 * 0 or -1 (whatever started is stopped). */
int th_sentinel_start(th_sentinel_set *s, const char *extra);
/* Stops all five by pid and removes their dirs. */
void th_sentinel_stop(th_sentinel_set *s);
/* The port of the server the first sentinel that answers names as master
 * now, or -1. */
int th_sentinel_master_port(th_sentinel_set *s);
/* Forces a failover (SENTINEL FAILOVER on a sentinel) and waits until
 * every sentinel names the replica, and the replica says ROLE master.
 * Returns 0 or -1. */
int th_sentinel_failover(th_sentinel_set *s, int timeout_ms);
/* Waits (no SENTINEL FAILOVER: after the master was killed, say) until
 * every sentinel names the replica and it says ROLE master. 0 or -1. */
int th_sentinel_wait_failover(th_sentinel_set *s, int timeout_ms);
/* Waits until the replica has everything the master wrote (their
 * replication offsets agree). Returns true, or false at the timeout. */
bool th_sentinel_synced(th_sentinel_set *s, int timeout_ms);

/* ---- Cluster: 3 masters, with or without a replica each (about 2 s) --- */
typedef struct th_cluster {
  th_redis nodes[3];
  th_redis replicas[3]; /* th_cluster_start_replicas: replicas[i] of i */
  int nreplicas;
  char ids[6][48]; /* CLUSTER MYID of nodes[0..2], then replicas[0..2] */
  int tls_ports[3]; /* th_cluster_start_tls: each master's TLS port */
  char url[600]; /* redis-cluster://127.0.0.1:p0,127.0.0.1:p1,127.0.0.1:p2 */
} th_cluster;
/* Starts three cluster-enabled servers (node timeout 2 s; `extra`
 * arguments too), gives them the slots 0-5460, 5461-10922 and
 * 10923-16383 in turn (CLUSTER ADDSLOTSRANGE), joins them (CLUSTER MEET)
 * and waits until each says cluster_state:ok and knows all three. Returns
 * 0 or -1 (whatever started is stopped). */
int th_cluster_start(th_cluster *k, const char *extra);
/* As th_cluster_start, and a replica of each master (CLUSTER REPLICATE),
 * waited for until each has linked to its master and every node knows
 * all six. */
int th_cluster_start_replicas(th_cluster *k, const char *extra);
/* As th_cluster_start, each master also listening for TLS on a port of
 * its own (tls_ports; the cluster bus over TLS too), with th_tls_setup's
 * server certificate: the url is rediss-cluster:// to the TLS ports.
 * Call th_tls_setup first. */
int th_cluster_start_tls(th_cluster *k);
/* Stops every node by pid (a killed one is skipped) and removes their
 * dirs. */
void th_cluster_stop(th_cluster *k);
/* Moving `slot` from node `from` to node `to` (0..2), in the steps of a
 * resharding: begin (IMPORTING on to, MIGRATING on from), move up to n keys
 * (MIGRATE; returns how many moved, -1 on an error), end (SETSLOT NODE on
 * every master). Each returns 0 or -1 unless said. */
int th_cluster_slot_begin(th_cluster *k, int slot, int from, int to);
int th_cluster_slot_move_keys(th_cluster *k, int slot, int from, int to,
                              int n);
int th_cluster_slot_end(th_cluster *k, int slot, int to);
/* Waits until every live node says cluster_state:ok and that `master`'s
 * slots are served by the node with id `id` (a failover done). */
bool th_cluster_wait_owner(th_cluster *k, int slot, const char *id,
                           int timeout_ms);
/* Which node (0..2) owns key's slot as th_cluster_start gave them, or -1. */
int th_cluster_node_of(th_cluster *k, const char *key);

/* ---- TLS: certificates made with openssl(1), for rediss:// tests ---- */
/* Makes, once, in th_tmpdir()/tls: the CAs "ca" and "otherca", a server
 * certificate for 127.0.0.1 and localhost and a client one, both signed by
 * ca; and finds a port a TLS server could listen on a moment ago. Fills
 * th_tls_port and th_tls_args (the arguments of such a server, for
 * T_REDIS). For a before_all hook: returns 0, or -1 saying why. */
int th_tls_setup(void);
extern int th_tls_port;
extern char th_tls_args[1024];
/* Where dlock_client_options' TLS strings point (the caller's storage). */
typedef struct th_tls_paths {
  char url[200], ca[300], cert[300], key[300];
} th_tls_paths;
/* Fills o for rediss://host:th_tls_port verified against CA `ca` ("ca" or
 * "otherca"), with the client certificate if with_cert, a connect timeout
 * of 2 s; o's strings point into p. */
void th_tls_options(dlock_client_options *o, th_tls_paths *p,
                    const char *host, const char *ca, bool with_cert);

/* A loopback TCP port that was free a moment ago. */
int th_free_port(void);
/* Whether nothing listens on (or is bound to) 127.0.0.1:port now. */
bool th_port_free(int port);
/* Whether a process (this one included) holds port's reservation: port
 * was handed out by th_free_port in a process that has not exited. */
bool th_port_reserved(int port);
/* Whether a line of the file at path (up to 1 KiB read a line) holds
 * needle; false if it cannot be read. */
bool th_file_has(const char *path, const char *needle);
int64_t th_now_ms(void);
/* Polls cond every 2 ms until it holds or timeout_ms passes. */
bool th_wait_for(bool (*cond)(void *), void *arg, int timeout_ms);
void th_sleep_ms(int ms);

/* ---- ZooKeeper servers (Debian's `zookeeper` package and a JRE) ---- */
typedef struct th_zk {
  pid_t pid;
  int port;
  char dir[256];     /* zoo.cfg, data/, zk.log */
  char connect[64];  /* 127.0.0.1:port, the connect string */
  char url[80];      /* zk://127.0.0.1:port */
} th_zk;

/* True if a ZooKeeper server can be started here (the server's jar and
 * java are installed); a test without one skips, saying so. */
bool th_zk_available(void);
/* Starts a private standalone ZooKeeper on a free loopback port, in a fresh
 * dir in th_tmpdir(): tickTime `tick_ms` (0: 500; sessions may then last
 * 2..20 ticks), admin server off, the four-letter words ruok, srvr and conf only,
 * a 128 MB heap; waits until it answers `ruok` with `imok` and `srvr` with
 * its mode, i.e. it serves (about 1.2 s).
 * Returns 0, or -1 (server log kept in r->dir/zk.log and printed). A server
 * a test starts is stopped when the test's process exits or is killed. */
int th_zk_start(th_zk *r, int tick_ms);
/* Sends a four-letter word and returns the answer in buf (NUL-terminated,
 * "" if none): "ruok" answers "imok". */
const char *th_zk_4lw(const th_zk *r, const char *word, char *buf,
                      size_t len);
/* Kills the server (SIGKILL) and starts it again on the same port, dir
 * and data (its sessions are restored from its log): as th_zk_start. */
int th_zk_restart(th_zk *r);
/* Starts a server of r killed before (as a member of its ensemble, which
 * it rejoins) and waits until it serves. */
int th_zk_start_again(th_zk *r);
/* Starts a 3-server ensemble on loopback (each as th_zk_start would, plus
 * its peers), waits until all three serve, and writes the connect URL
 * "zk://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3" into url. Returns 0, or -1
 * (stop each with th_zk_stop either way). */
int th_zk_ensemble_start(th_zk zk[3], int tick_ms, char *url, size_t len);
/* The index of the ensemble's leader (srvr says "Mode: leader"), or -1. */
int th_zk_leader(th_zk zk[3]);
void th_zk_kill(th_zk *r, int sig); /* signal; SIGKILL also reaps */
void th_zk_stop(th_zk *r);          /* kill, reap and remove the dir */

/* ---- etcd servers (Debian's etcd-server) ---- */
typedef struct th_etcd {
  pid_t pid;
  int port, peer_port;
  char dir[256];      /* data/, etcd.log */
  char endpoint[64];  /* [https://]127.0.0.1:port, etcdctl --endpoints */
  char url[80];       /* etcd[s]://127.0.0.1:port */
  char name[8];       /* the member's name: n1, n2, n3 */
  char initial[256];  /* --initial-cluster */
  char tls_dir[256];  /* th_etcd_start_with's: "" plain HTTP */
  char ctl_tls[900];  /* etcdctl's TLS flags ("" plain HTTP) */
  char args[256];     /* more of etcd's flags */
} th_etcd;

/* True if an etcd server can be started here (etcd on the PATH); a test
 * without one skips, saying so. */
bool th_etcd_available(void);
/* In a test: skips it (returns, saying so) where no etcd server can run
 * (scripts/install-deps.sh installs one). */
#define TH_NEED_ETCD()                                                         \
  do {                                                                         \
    if (!th_etcd_available()) {                                                \
      fprintf(stderr, "    skipped: no etcd server installed\n");              \
      return;                                                                  \
    }                                                                          \
  } while (0)
/* In a test: TH_NEED_ETCD, then declares and starts the server `s`
 * (th_etcd_start), checked. */
#define TH_ETCD_SETUP(s)                                                       \
  TH_NEED_ETCD();                                                              \
  th_etcd s;                                                                   \
  CHECK_RC(th_etcd_start(&s), 0)
/* A client of s (lease_ms > 0: its watchdog lease), or NULL with the
 * open's message printed. */
dlock_client *th_etcd_client(const th_etcd *s, int64_t lease_ms);
/* Starts a private single-member etcd on free loopback client and peer
 * ports, its data in a fresh dir in th_tmpdir(), and waits until GET
 * /health says true (about 1 s). Returns 0, or -1 (its log printed). A
 * server a test starts is stopped when the test's process exits or is
 * killed. */
int th_etcd_start(th_etcd *r);
/* As th_etcd_start, with more flags for etcd (`args`, NULL none) and,
 * with tls, serving clients over TLS only, with client certificates
 * (etcds://; certificates made once per process in tls_dir: the CAs ca
 * and otherca, server.crt for 127.0.0.1 and client.crt signed by ca, each
 * with its .key); its endpoint https://127.0.0.1:PORT and etcdctl's flags
 * in ctl_tls. */
int th_etcd_start_with(th_etcd *r, bool tls, const char *args);
/* Kills it (SIGKILL) and starts it again on the same ports and data (a
 * cluster's member rejoins its cluster). */
int th_etcd_restart(th_etcd *r);
/* Starts a 3-member cluster on loopback (each as th_etcd_start would) and
 * waits until all three are healthy; the URL of all three into url.
 * Returns 0, or -1 (stop each with th_etcd_stop either way). */
int th_etcd_cluster_start(th_etcd r[3], char *url, size_t len);
/* The index (0-2) of the cluster's leader (its /metrics say
 * etcd_server_is_leader 1), or -1. */
int th_etcd_leader(th_etcd r[3]);
/* The answer to GET path (headers and body; "" if none) into buf. */
const char *th_etcd_get(const th_etcd *r, const char *path, char *buf,
                        size_t len);
/* Runs `cmd` with sh and returns its output (cut to fit) in buf, "" for
 * none. */
const char *th_sh(const char *cmd, char *buf, size_t len);
/* etcdctl on r (its TLS flags): ETCDCTL_API=3 etcdctl --endpoints E ARGS,
 * stderr included; its output in buf as th_sh. */
const char *th_etcd_ctl(const th_etcd *r, const char *args, char *buf,
                        size_t len);
/* How many calls of gRPC method `method` ("Txn", "Watch", "LeaseGrant")
 * a plain-HTTP server has started (its /metrics, the gateway's calls
 * included), or -1. */
long long th_etcd_started(const th_etcd *r, const char *method);
/* How many of them it has answered (every status), or -1. */
long long th_etcd_handled(const th_etcd *r, const char *method);
/* The unlabelled gauge `name` of a plain-HTTP server's /metrics
 * ("etcd_debugging_mvcc_slow_watcher_total"), or -1. */
long long th_etcd_gauge(const th_etcd *r, const char *name);
void th_etcd_kill(th_etcd *r, int sig); /* signal; SIGKILL also reaps */
void th_etcd_stop(th_etcd *r);          /* kill, reap and remove the dir */

/* ---- Redlock: n independent servers ---- */
/* Starts n servers (th_redis_start, no extra arguments) into srv[0..n-1]
 * and writes "redlock://127.0.0.1:P1,127.0.0.1:P2,..." into url. Returns
 * 0 or -1 (those started are stopped when the process exits). */
int th_redlock_start(th_redis *srv, int n, char *url, size_t len);

/* ---- a deployment of one URL kind (the conformance suite) ---- */
/* The URL kinds, by the name the suite's ctest tests carry: "redis",
 * "unix", "rediss", "sentinel", "cluster", "redlock" (3 servers), "zk",
 * "etcd". */
extern const char *const th_deploy_kinds[];
typedef struct th_deploy {
  char kind[16];
  th_redis redis[3];        /* redis, unix, rediss: [0]; redlock: all */
  th_sentinel_set sentinel; /* sentinel */
  th_cluster cluster;       /* cluster */
  th_zk zk;                 /* zk */
  th_etcd etcd;             /* etcd */
  th_tls_paths tls;         /* rediss: where the options' strings point */
  char url[1024];           /* the URL a client opens */
} th_deploy;
/* Starts a deployment of `kind` (one of th_deploy_kinds) with the
 * harness's helpers above, and fills d->url. Returns 0, 1 when it cannot
 * run here (zk or etcd without its server: the caller skips, saying so),
 * or -1 (an unknown kind, or a start that failed; what started is
 * stopped). */
int th_deploy_start(th_deploy *d, const char *kind);
/* Stops whatever d started. */
void th_deploy_stop(th_deploy *d);
/* dlock_client_options_init(o), then the URL (and for rediss the CA) of
 * d: o's strings point into d. */
void th_deploy_options(th_deploy *d, dlock_client_options *o);
/* Stalls (stop: SIGSTOP, each waited for until stopped) or resumes
 * (SIGCONT) every server of d that holds data: the Redis servers, a
 * cluster's nodes, Sentinel's master and replica (not the sentinels),
 * ZooKeeper, etcd. Returns how many it signalled. */
int th_deploy_pause(th_deploy *d, bool stop);

/* For the harness's own files: after a SIGSTOP to a server this process
 * started, waits (up to 5 s) until all its threads have stopped (/proc) (the
 * group stop is not done when kill returns: a loaded machine's server
 * answered a request sent just after it); whether it did. */
bool th__await_stop(pid_t pid);
/* For the harness's own files: a server process (pid, its dir) to stop and
 * remove when the process that started it exits or fails a test; forget it
 * again by its dir (0 as the pid: stopped, dir still to remove). */
void th__track(pid_t pid, const char *dir);
/* Runs `cmd` with /bin/sh in a child that dies with its parent and blocks
 * no signal: its pid, or -1. */
pid_t th__spawn(const char *cmd);
void th__untrack(const char *dir);

#endif
