/* harness_deploy.c: a deployment of any URL kind, started with the
 * harness's helpers, for tests written once against a URL (the
 * conformance suite). */
#include "harness.h"

#include <signal.h>
#include <string.h>

const char *const th_deploy_kinds[] = {"redis",    "unix",    "rediss",
                                       "sentinel", "cluster", "redlock",
                                       "zk",       "etcd",    NULL};

int th_redlock_start(th_redis *srv, int n, char *url, size_t len) {
  int at = snprintf(url, len, "redlock://");
  for (int i = 0; i < n; i++) {
    if (th_redis_start(&srv[i], NULL) != 0) return -1;
    at += snprintf(url + at, len - (size_t)at, "%s127.0.0.1:%d", i ? "," : "",
                   srv[i].port);
  }
  return 0;
}

static int start(th_deploy *d) {
  const char *k = d->kind;
  if (strcmp(k, "redis") == 0 || strcmp(k, "unix") == 0) {
    if (th_redis_start(&d->redis[0], NULL) != 0) return -1;
    snprintf(d->url, sizeof d->url, "%s",
             k[0] == 'r' ? d->redis[0].url : d->redis[0].sock_url);
    return 0;
  }
  if (strcmp(k, "rediss") == 0) {
    if (th_tls_setup() != 0 || th_redis_start(&d->redis[0], th_tls_args) != 0)
      return -1;
    dlock_client_options o;
    th_tls_options(&o, &d->tls, "127.0.0.1", "ca", false);
    snprintf(d->url, sizeof d->url, "%s", d->tls.url);
    return 0;
  }
  if (strcmp(k, "sentinel") == 0) {
    if (th_sentinel_start(&d->sentinel, NULL) != 0) return -1;
    snprintf(d->url, sizeof d->url, "%s", d->sentinel.url);
    return 0;
  }
  if (strcmp(k, "cluster") == 0) {
    if (th_cluster_start(&d->cluster, NULL) != 0) return -1;
    snprintf(d->url, sizeof d->url, "%s", d->cluster.url);
    return 0;
  }
  if (strcmp(k, "redlock") == 0)
    return th_redlock_start(d->redis, 3, d->url, sizeof d->url);
  if (strcmp(k, "zk") == 0) {
    if (!th_zk_available()) return 1;
    if (th_zk_start(&d->zk, 0) != 0) return -1;
    snprintf(d->url, sizeof d->url, "%s", d->zk.url);
    return 0;
  }
  if (strcmp(k, "etcd") == 0) {
    if (!th_etcd_available()) return 1;
    if (th_etcd_start(&d->etcd) != 0) return -1;
    snprintf(d->url, sizeof d->url, "%s", d->etcd.url);
    return 0;
  }
  fprintf(stderr, "no URL kind named %s\n", k);
  return -1;
}

int th_deploy_start(th_deploy *d, const char *kind) {
  memset(d, 0, sizeof *d);
  snprintf(d->kind, sizeof d->kind, "%s", kind);
  int rc = start(d);
  if (rc < 0) th_deploy_stop(d);
  return rc;
}

void th_deploy_stop(th_deploy *d) {
  for (int i = 0; i < 3; i++)
    th_redis_stop(&d->redis[i]);
  th_sentinel_stop(&d->sentinel);
  th_cluster_stop(&d->cluster);
  th_zk_stop(&d->zk);
  th_etcd_stop(&d->etcd);
}

int th_deploy_pause(th_deploy *d, bool stop) {
  pid_t pids[16];
  int n = 0;
  for (int i = 0; i < 3; i++) {
    pids[n++] = d->redis[i].pid;
    pids[n++] = d->cluster.nodes[i].pid;
    pids[n++] = d->cluster.replicas[i].pid;
  }
  pids[n++] = d->sentinel.master.pid;
  pids[n++] = d->sentinel.replica.pid;
  pids[n++] = d->zk.pid;
  pids[n++] = d->etcd.pid;
  int done = 0;
  for (int i = 0; i < n; i++) {
    if (pids[i] <= 0 || kill(pids[i], stop ? SIGSTOP : SIGCONT) != 0) continue;
    if (stop) th__await_stop(pids[i]);
    done++;
  }
  return done;
}

void th_deploy_options(th_deploy *d, dlock_client_options *o) {
  dlock_client_options_init(o);
  o->url = d->url;
  if (strcmp(d->kind, "rediss") == 0) o->tls_ca_file = d->tls.ca;
}
