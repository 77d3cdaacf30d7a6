/* etcd_support.h: what test_etcd_conn and test_etcd_async share: a test's
 * skip where no etcd server can run, an event-loop operation's outcome
 * and the loop run until operations end, the threads counted, a server's
 * keys counted, an event-loop client holding locks, and the connections
 * to a server counted, and the attempts at one. */
#ifndef DLOCK_TEST_ETCD_SUPPORT_H
#define DLOCK_TEST_ETCD_SUPPORT_H

#include "dlock_async.h"
#include "harness.h"

/* An event-loop operation's outcome: its rc, and how many times its
 * callback came (et_on_adone, its ud an et_adone). */
typedef struct et_adone {
  int rc, calls;
} et_adone;
void et_on_adone(int rc, uint64_t token, const char *errmsg, void *ud);

/* Runs lp until each of the n operations in d is done (10 s at most). */
bool et_run_all(dlock_loop *lp, const et_adone *d, int n);

/* The threads of this process now. */
int et_tasks(void);

/* Runs lp for ms, sampling the threads: the most there were. */
int et_run_sampled(dlock_loop *lp, int64_t ms);

/* The keys under prefix on s (etcdctl's answer, one a line): how many. */
int et_keys_under(const th_etcd *s, const char *prefix);

/* An event-loop client of s (*c) on a new loop (*lp), its watchdog
 * timeout watchdog_ms (0: the default), holding the n locks l (named
 * prefix0, prefix1, ...), acquired with all in flight; *c NULL if
 * something failed (CHECKed). */
void et_open_holding(const th_etcd *s, int64_t watchdog_ms, const char *prefix,
                     int n, dlock_loop **lp, dlock_lock **l, dlock_client **c);

/* This process's TCP connections to `port` (established): how many, and
 * (*segs, unless NULL) what they have sent: segments that carried data
 * (TCP_INFO's tcpi_data_segs_out, Linux 4.6). */
int et_conns_to(int port, long long *segs);

/* The connect() calls of this process (curl's included) to `port` since
 * et_count_connects(port) (0 counts none): how many were tried, refused
 * or not. */
void et_count_connects(int port);
int et_connects(void);

#endif
