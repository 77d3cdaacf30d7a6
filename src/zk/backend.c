/* backend.c: the ZooKeeper backend (zk:// URLs): the session on
 * libzookeeper-mt, its states, and the seam's table. */
#include "zkb.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How often, at most, the C client resolves the servers' names again while
 * connected (ms). */
#define RESOLVE_GAP_MS 10000

/* The library prints its log to stderr by default; dlock never prints. */
static void quiet_log(const char *message) { (void)message; }

int dl_zk_err(dl_zk *z, int zrc, const char *what, const char *path) {
  int rc;
  switch (zrc) {
  case ZCONNECTIONLOSS:
    rc = DLOCK_ECONNLOST;
    break;
  case ZOPERATIONTIMEOUT:
    rc = DLOCK_ETIMEDOUT;
    break;
  case ZSESSIONEXPIRED:
  case ZINVALIDSTATE:
    rc = DLOCK_ECONNLOST;
    break;
  case ZNOAUTH:
  case ZAUTHFAILED:
    rc = DLOCK_ENOPERM;
    break;
  case ZBADARGUMENTS:
    rc = DLOCK_EINVAL;
    break;
  case ZCLOSING:
    rc = DLOCK_ECLOSED;
    break;
  case ZSYSTEMERROR:
  case ZRUNTIMEINCONSISTENCY:
  case ZMARSHALLINGERROR:
    rc = DLOCK_EPROTO;
    break;
  default:
    rc = DLOCK_ESERVER;
  }
  return dl_seterr(z->env->err_owner, rc, "ZooKeeper %s %s: %s%s", what,
                   path ? path : "", zerror(zrc),
                   zrc == ZINVALIDSTATE || zrc == ZSESSIONEXPIRED
                       ? " (the session expired: its locks are lost)"
                       : "");
}

int64_t dl_zk_valid_until(dl_zk *z, int64_t sent) {
  int t = zoo_recv_timeout(z->zh);
  if (t <= 0) t = z->session_timeout_ms;
  return dl_validity(sent, t);
}

void dl_zk_watcher(zhandle_t *zh, int type, int state, const char *path,
                   void *ctx) {
  (void)zh;
  (void)path;
  dl_zk *z = ctx;
  if (z == NULL) return;
  dl_notice_fn fn = NULL;
  void *ud = NULL;
  int told = 0; /* a dlock_conn_state to tell, or 0 */
  void (*sfn)(void *, int) = NULL;
  void *sud = NULL;
  pthread_mutex_lock(&z->mu);
  z->events++;
  if (type == ZOO_SESSION_EVENT) {
    int was = z->state;
    z->state = state;
    if (state == ZOO_EXPIRED_SESSION_STATE && !z->expired) {
      /* Every ephemeral node of the session is gone: every hold of this
       * client is lost at once; the watchdog asks renew, which says so. */
      z->expired = true;
      fn = z->notice;
      ud = z->notice_ud;
      told = DLOCK_CONN_LOST;
    } else if (state == ZOO_CONNECTED_STATE && z->suspended) {
      z->suspended = false;
      told = DLOCK_CONN_RECONNECTED;
    } else if (state != ZOO_CONNECTED_STATE && was == ZOO_CONNECTED_STATE &&
               !z->expired) {
      /* Connected, now not: the session lives on at the server until its
       * timeout, and we cannot know what happens meanwhile. */
      z->suspended = true;
      told = DLOCK_CONN_SUSPENDED;
    }
    sfn = z->state_fn;
    sud = z->state_ud;
  }
  pthread_cond_broadcast(&z->cv);
  pthread_mutex_unlock(&z->mu);
  if (path && path[0] && type != ZOO_SESSION_EVENT)
    dl_zk_hold_event(z, type, path); /* a held node deleted: a loss */
  /* On an event-loop client the notice goes to the loop's thread. */
  if (fn && z->env->loop) dl_zk_post_notice(z);
  else if (fn) fn(ud, NULL, 0);
  if (told && sfn) sfn(sud, told);
}

static int zk_watch_state(dl_backend *b, void (*fn)(void *, int), void *ud) {
  dl_zk *z = (dl_zk *)b;
  pthread_mutex_lock(&z->mu);
  z->state_fn = fn;
  z->state_ud = ud;
  pthread_mutex_unlock(&z->mu);
  return 0;
}

static int zk_watch_losses(dl_backend *b, dl_notice_fn fn, void *ud) {
  dl_zk *z = (dl_zk *)b;
  pthread_mutex_lock(&z->mu);
  z->notice = fn;
  z->notice_ud = ud;
  bool expired = z->expired;
  pthread_mutex_unlock(&z->mu);
  if (expired && fn) fn(ud, NULL, 0);
  return 0;
}

int dl_zk_ping(dl_backend *b) {
  dl_zk *z = (dl_zk *)b;
  struct Stat st;
  atomic_fetch_add(&z->round_trips, 1);
  int zrc = zoo_exists(z->zh, "/", 0, &st);
  return zrc == ZOK ? 0 : dl_zk_err(z, zrc, "ping", "/");
}

/* The closing flag was set: every wait looks again (and ends). */
static void zk_wake_all(dl_backend *b) {
  dl_zk *z = (dl_zk *)b;
  pthread_mutex_lock(&z->mu);
  pthread_cond_broadcast(&z->cv);
  pthread_mutex_unlock(&z->mu);
}

static void zk_stats(dl_backend *b, dlock_client_stats *st) {
  dl_zk *z = (dl_zk *)b;
  st->writes += (uint64_t)atomic_load(&z->round_trips);
}

static void zk_free(dl_backend *b) {
  dl_zk *z = (dl_zk *)b;
  if (z == NULL) return;
  /* Election threads left from their own callback (dlock_leader_free
   * there) may still be deleting their node: they end first. The closing
   * flag (set by the client) makes any other end too. */
  pthread_mutex_lock(&z->mu);
  pthread_cond_broadcast(&z->cv);
  while (z->participants > 0) pthread_cond_wait(&z->cv, &z->mu);
  pthread_mutex_unlock(&z->mu);
  /* An event-loop client's operations end, their callers are told. */
  if (z->env->loop) dl_zk_async_close(z);
  /* Closing ends the session (its nodes go) and joins the library's
   * threads, so no watcher runs on z after this. */
  if (z->zh) zookeeper_close(z->zh);
  for (int i = 0; i < z->nkeys; i++)
    free(z->notice_keys[i]);
  dl_zk_holds_free(z->holds);
  dl_zk_orphans_free(z->orphans);
  pthread_cond_destroy(&z->cv);
  pthread_mutex_destroy(&z->mu);
  free(z);
}

static const dl_backend_ops zk_ops = {
    .name = "zookeeper",
    .lock_acquire = dl_zk_b_lock_acquire,
    .lock_release = dl_zk_b_lock_release,
    .lock_force_release = dl_zk_b_lock_force_release,
    .lock_query = dl_zk_b_lock_query,
    .inspect = dl_zk_b_inspect,
    .scan = dl_zk_b_scan,
    .renew = dl_zk_b_renew,
    .watch_losses = zk_watch_losses,
    .watch_state = zk_watch_state,
    .permit_acquire = dl_zk_b_permit_acquire,
    .sync_update = dl_zk_b_sync_update,
    .elect_join = dl_zk_elect_join,
    .elect_leave = dl_zk_elect_leave,
    .elect_leader = dl_zk_b_elect_leader,
    .ping = dl_zk_b_ping,
    .lock_acquire_async = dl_zk_lock_acquire_async,
    .lock_release_async = dl_zk_lock_release_async,
    .lock_force_release_async = dl_zk_lock_force_release_async,
    .lock_query_async = dl_zk_lock_query_async,
    .inspect_async = dl_zk_inspect_async,
    .scan_async = dl_zk_scan_async,
    .ping_async = dl_zk_ping_async,
    .renew_async = dl_zk_renew_async,
    .permit_acquire_async = dl_zk_permit_acquire_async,
    .sync_update_async = dl_zk_sync_update_async,
    .cancel = dl_zk_cancel,
    .wake_all = zk_wake_all,
    .stats = zk_stats,
    .free = zk_free,
};

/* Waits until the session is connected, or the connect timeout. */
static int await_connected(dl_zk *z, int timeout_ms) {
  int64_t end = dl_now_ms() + timeout_ms;
  pthread_mutex_lock(&z->mu);
  while (z->state != ZOO_CONNECTED_STATE && !z->expired &&
         z->state != ZOO_AUTH_FAILED_STATE && dl_now_ms() < end) {
    struct timespec ts;
    dl_abstime(end, &ts);
    pthread_cond_timedwait(&z->cv, &z->mu, &ts);
  }
  bool ok = z->state == ZOO_CONNECTED_STATE;
  pthread_mutex_unlock(&z->mu);
  return ok ? 0 : -1;
}

int dl_zk_backend_new(const dlock_client_options *opts,
                      const dl_backend_env *env, dl_backend **out) {
  *out = NULL;
  if (opts->zk_session_timeout_ms <= 0 || opts->zk_connect_timeout_ms <= 0)
    return dl_seterr(NULL, DLOCK_EINVAL, "zk_session_timeout_ms and "
                     "zk_connect_timeout_ms must be positive");
  char msg[256];
  char *connect = NULL;
  int rc = dl_url_parse_zk(opts->url, &connect, msg, sizeof msg);
  if (rc != 0)
    return dl_seterr(NULL, rc, "%s (url %s)", msg, opts->url);
  dl_zk *z = calloc(1, sizeof *z);
  if (z == NULL) {
    free(connect);
    return dl_seterr(NULL, DLOCK_ENOMEM, "out of memory");
  }
  z->base.ops = &zk_ops;
  z->env = env;
  z->session_timeout_ms = opts->zk_session_timeout_ms;
  z->command_timeout_ms = env->command_timeout_ms;
  z->state = ZOO_CONNECTING_STATE;
  z->evfd = -1;
  pthread_mutex_init(&z->mu, NULL);
  dl_cond_init(&z->cv);
  if (env->loop && (rc = dl_zk_async_init(z)) != 0) {
    free(connect);
    zk_free(&z->base);
    return rc;
  }
  z->zh = zookeeper_init2(connect, dl_zk_watcher, z->session_timeout_ms, NULL,
                          z, 0, quiet_log);
  if (z->zh == NULL) {
    rc = dl_seterr(NULL, errno == EINVAL ? DLOCK_EURL : DLOCK_ECONNECT,
                   "cannot start a ZooKeeper session for %s: %s", connect,
                   strerror(errno));
    free(connect);
    zk_free(&z->base);
    return rc;
  }
  /* The C client's default resolves the connect string's host names
   * (getaddrinfo: a netlink socket, /etc/hosts, maybe DNS) every time it
   * checks its socket, that is for every request and reply: most of a
   * cycle's client CPU (an strace of dlock bench counted 13 sockets made
   * per lock cycle). Once every RESOLVE_GAP_MS instead, and at each
   * reconnect, as the Java client resolves when it connects. */
  zoo_set_servers_resolution_delay(z->zh, RESOLVE_GAP_MS);
  if (await_connected(z, opts->zk_connect_timeout_ms) != 0) {
    rc = dl_seterr(NULL, DLOCK_ECONNECT, "no ZooKeeper session with %s "
                   "within %d ms", connect, opts->zk_connect_timeout_ms);
    free(connect);
    zk_free(&z->base);
    return rc;
  }
  free(connect);
  *out = &z->base;
  return 0;
}
