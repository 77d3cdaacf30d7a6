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
                   : zrc == ZNOAUTH ? " (its ACL is another identity's: "
                                      "zk://USER:PASSWORD@ in the URL)"
                                    : "");
}

int64_t dl_zk_valid_until(dl_zk *z, int64_t sent) {
  int t = zoo_recv_timeout(z->zh);
  if (t <= 0) t = z->session_timeout_ms;
  return dl_validity(sent, t);
}

/* The completion of zoo_add_auth: digest authentication is checked by
 * each request's ACL, not at once (a wrong password shows as ZNOAUTH). */
static void auth_done(int rc, const void *data) {
  (void)rc;
  (void)data;
}

/* A new handle for z (the first session, or the next after an expiry:
 * `expired`, then retired, and the one it retires in *old), made z's
 * current one: authenticated, resolving names every RESOLVE_GAP_MS. z->mu
 * is held meanwhile, so that the handle's first events (on its own
 * threads) find it current. NULL on error (errno). */
static zhandle_t *new_handle(dl_zk *z, zhandle_t *expired, zhandle_t **old) {
  pthread_mutex_lock(&z->mu);
  zhandle_t *zh = zookeeper_init2(z->connect, dl_zk_watcher,
                                  z->session_timeout_ms, NULL, z, 0, quiet_log);
  int err = errno;
  if (zh) {
    /* The C client's default resolves the connect string's host names
     * (getaddrinfo: a netlink socket, /etc/hosts, maybe DNS) every time
     * it checks its socket, that is for every request and reply: most of
     * a cycle's client CPU (an strace of dlock bench counted 13 sockets
     * made per lock cycle). Once every RESOLVE_GAP_MS instead, and at
     * each reconnect, as the Java client resolves when it connects. */
    zoo_set_servers_resolution_delay(zh, RESOLVE_GAP_MS);
    /* Sent before any request, and again at each reconnect, by the
     * library. */
    if (z->auth)
      zoo_add_auth(zh, "digest", z->auth, (int)strlen(z->auth), auth_done,
                   NULL);
    if (expired) {
      *old = z->retired;
      z->retired = expired;
    }
    atomic_store(&z->zh, zh);
  }
  pthread_mutex_unlock(&z->mu);
  errno = err;
  return zh;
}

/* The session expired: a new one, as Curator's ConnectionState does (its
 * holds were reported lost already). The expired handle is closed at the
 * next expiry, or with the client: a thread may still be returning from a
 * call on it. Runs on the expired handle's completion thread. */
static void new_session(dl_zk *z, zhandle_t *expired) {
  zhandle_t *old = NULL;
  if (new_handle(z, expired, &old) == NULL)
    return;                      /* out of memory: the client stays expired */
  if (old) zookeeper_close(old); /* two sessions ago: nobody's now */
}

bool dl_zk_enter(dl_zk *z) {
  pthread_mutex_lock(&z->mu);
  bool in = !z->abandoned;
  if (in) z->callers++;
  pthread_mutex_unlock(&z->mu);
  return in;
}

void dl_zk_leave(dl_zk *z) {
  pthread_mutex_lock(&z->mu);
  if (--z->callers == 0) pthread_cond_broadcast(&z->cv);
  pthread_mutex_unlock(&z->mu);
}

static void watched(zhandle_t *zh, int type, int state, const char *path,
                    dl_zk *z);

void dl_zk_watcher(zhandle_t *zh, int type, int state, const char *path,
                   void *ctx) {
  dl_zk *z = ctx;
  if (z == NULL || !dl_zk_enter(z)) return;
  watched(zh, type, state, path, z);
  dl_zk_leave(z);
}

static void watched(zhandle_t *zh, int type, int state, const char *path,
                    dl_zk *z) {
  dl_notice_fn fn = NULL;
  void *ud = NULL;
  int told = 0; /* a dlock_conn_state to tell, or 0 */
  void (*sfn)(void *, int) = NULL;
  void *sud = NULL;
  bool renew = false;
  pthread_mutex_lock(&z->mu);
  z->events++;
  /* An expired session's handle has nothing more to say. */
  if (type == ZOO_SESSION_EVENT && zh == atomic_load(&z->zh)) {
    int was = z->state;
    z->state = state;
    if (state == ZOO_EXPIRED_SESSION_STATE && !z->expired) {
      /* Every ephemeral node of the session is gone: every hold of this
       * client is lost at once (the watchdog asks renew, which says so),
       * and so are the orphans. A new session follows. */
      z->expired = true;
      z->suspended = false;
      z->sessions++;
      dl_zk_holds_free(z->holds);
      z->holds = NULL;
      z->due = NULL;
      z->due_tail = &z->due;
      dl_zk_orphans_free(z->orphans);
      z->orphans = NULL;
      fn = z->notice;
      ud = z->notice_ud;
      told = DLOCK_CONN_LOST;
      renew = !atomic_load(z->env->closing);
    } else if (state == ZOO_CONNECTED_STATE && z->expired) {
      z->expired = false; /* the next session: usable again */
      told = DLOCK_CONN_NEW_SESSION;
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
    /* dlock_metrics.reconnects: connected again, same session or not. */
    if ((told == DLOCK_CONN_NEW_SESSION || told == DLOCK_CONN_RECONNECTED) &&
        z->env->reconnects)
      atomic_fetch_add_explicit(z->env->reconnects, 1, memory_order_relaxed);
    sfn = z->state_fn;
    sud = z->state_ud;
  }
  pthread_cond_broadcast(&z->cv);
  pthread_mutex_unlock(&z->mu);
  if (path && path[0] && type != ZOO_SESSION_EVENT)
    dl_zk_hold_event(z, type, path); /* a held node deleted: a loss */
  /* On an event-loop client fn passes it to the loop's thread. */
  if (fn) fn(ud, NULL, 0);
  if (told && sfn) sfn(sud, told);
  if (renew) new_session(z, zh);
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

static int zk_ping(dl_backend *b) {
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

static int zk_check_key(dl_backend *b, const char *key) {
  return dl_zk_check_path((dl_zk *)b, key);
}

static void zk_stats(dl_backend *b, dlock_client_stats *st) {
  dl_zk *z = (dl_zk *)b;
  st->writes += (uint64_t)atomic_load(&z->round_trips);
}

/* How long dlock_client_close waits for the session's close (ms).
 * zookeeper_close sends the close, then waits up to 1.5 s for the
 * server's answer: a server that answers does so in a few ms; one that
 * does not (stopped, cut off) has been sent the close all the same, or
 * ends the session at its timeout. Past this bound the close goes on, on
 * a thread of its own, which then frees what is left of z. */
#define CLOSE_WAIT_MS 100
/* The same when a request went unanswered just before (a participant's
 * leave): time enough for the close to be sent, not answered. */
#define CLOSE_SEND_MS 10

/* What zk_free frees once the session's handle is closed. */
static void free_rest(dl_zk *z) {
  /* An expiry handled meanwhile may have made a new handle (and retired
   * the one just closed). */
  pthread_mutex_lock(&z->mu);
  zhandle_t *now = atomic_load(&z->zh), *retired = z->retired;
  pthread_mutex_unlock(&z->mu);
  if (now != z->closing) zookeeper_close(now);
  if (retired && retired != z->closing) zookeeper_close(retired);
  dl_blockloop_free(z->form); /* no callback of the C client runs now */
  dl_zk_holds_free(z->holds);
  dl_zk_orphans_free(z->orphans);
  pthread_cond_destroy(&z->cv);
  pthread_cond_destroy(&z->due_cv);
  pthread_mutex_destroy(&z->mu);
  free(z->connect);
  free(z->chroot);
  if (z->auth) memset(z->auth, 0, strlen(z->auth));
  free(z->auth);
  free(z);
}

static void *closer(void *p) {
  dl_zk *z = p;
  zookeeper_close(z->closing);
  pthread_mutex_lock(&z->mu);
  z->closed = true;
  bool abandoned = z->abandoned;
  pthread_cond_broadcast(&z->cv);
  pthread_mutex_unlock(&z->mu);
  if (abandoned) free_rest(z);
  return NULL;
}

/* Closes z->closing (ends the session: its nodes go, and joins the C
 * client's threads), waiting at most CLOSE_WAIT_MS. Returns true if the
 * close goes on by itself: z is then its thread's to free, and no
 * callback of the C client touches the client any more. */
static bool close_bounded(dl_zk *z) {
  pthread_t t;
  if (pthread_create(&t, NULL, closer, z) != 0) {
    zookeeper_close(z->closing);
    return false;
  }
  pthread_mutex_lock(&z->mu);
  int64_t now = dl_now_ms();
  bool stalled = z->unanswered_at > 0 && now - z->unanswered_at < 1000;
  int64_t end = now + (stalled ? CLOSE_SEND_MS : CLOSE_WAIT_MS);
  while (!z->closed && dl_now_ms() < end) {
    struct timespec ts;
    dl_abstime(end, &ts);
    pthread_cond_timedwait(&z->cv, &z->mu, &ts);
  }
  bool late = !z->closed;
  if (late) {
    z->abandoned = true; /* callbacks from now on do nothing */
    while (z->callers > 0)
      pthread_cond_wait(&z->cv, &z->mu);
  }
  pthread_mutex_unlock(&z->mu);
  if (late)
    pthread_detach(t);
  else
    pthread_join(t, NULL);
  return late;
}

static void zk_free(dl_backend *b) {
  dl_zk *z = (dl_zk *)b;
  if (z == NULL) return;
  /* Election threads left from their own callback (dlock_leader_free
   * there) may still be deleting their node: they end first. The closing
   * flag (set by the client) makes any other end too. */
  pthread_mutex_lock(&z->mu);
  pthread_cond_broadcast(&z->cv);
  while (z->participants > 0)
    pthread_cond_wait(&z->cv, &z->mu);
  pthread_mutex_unlock(&z->mu);
  /* An event-loop client's operations end, their callers are told. */
  dl_blockloop_close(z->form);
  dl_zk_due_stop(z); /* no watch is sent on the handle being closed */
  /* Closing ends the session (its nodes go) and joins the library's
   * threads, so no watcher runs on z after this; or, when the server
   * does not answer in time, the close goes on without us (see
   * close_bounded). */
  z->closing = atomic_load(&z->zh);
  if (z->closing && close_bounded(z)) return;
  free_rest(z);
}

static const dl_backend_ops zk_ops = {
    .name = "zookeeper",
    .lock_acquire = dl_zk_lock_acquire,
    .lock_release = dl_zk_lock_release,
    .lock_force_release = dl_zk_lock_force_release,
    .lock_query = dl_zk_lock_query,
    .inspect = dl_zk_inspect,
    .holders = dl_zk_lock_holders,
    .scan = dl_zk_scan,
    .waiters = dl_zk_waiters,
    .renew = dl_zk_renew,
    .watch_losses = zk_watch_losses,
    .watch_state = zk_watch_state,
    .permit_acquire = dl_zk_permit_acquire,
    .sync_update = dl_zk_sync_update,
    .fence = dl_zk_fence,
    .elect_join = dl_zk_elect_join,
    .elect_leave = dl_zk_elect_leave,
    .elect_leader = dl_zk_elect_leader,
    .ping = zk_ping,
    .check_key = zk_check_key,
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

/* The URL's parts into z: 0, or a negative code recorded. */
static int configure(dl_zk *z, const dlock_client_options *opts,
                     int *connect_ms) {
  char msg[256];
  dl_zk_url u;
  int rc = dl_url_parse_zk(opts->url, &u, msg, sizeof msg);
  if (rc != 0) {
    char *shown = dl_url_redact(opts->url);
    rc = dl_seterr(NULL, rc, "%s (url %s)", msg, shown ? shown : "zk://");
    free(shown);
    return rc;
  }
  if (u.session_timeout_ms > 0) z->session_timeout_ms = u.session_timeout_ms;
  if (u.connect_timeout_ms > 0) *connect_ms = u.connect_timeout_ms;
  z->connect = u.connect;
  z->chroot = u.chroot;
  u.connect = u.chroot = NULL;
  /* Digest authentication: the URL's user, else the options'; the URL's
   * password, else the options' (the CLI's --password-file or
   * DLOCK_PASSWORD). */
  const char *user = u.user ? u.user : opts->username;
  const char *pw = u.password ? u.password : opts->password;
  rc = 0;
  if (user && *user && (pw == NULL || *pw == '\0')) {
    rc = dl_seterr(NULL, DLOCK_EAUTH,
                   "ZooKeeper user %s has no password "
                   "(in the URL or the password option)",
                   user);
  } else if (user && *user) {
    size_t n = strlen(user) + strlen(pw) + 2;
    if ((z->auth = malloc(n)) == NULL)
      rc = dl_seterr(NULL, DLOCK_ENOMEM, "out of memory");
    else
      snprintf(z->auth, n, "%s:%s", user, pw);
  }
  int acl = u.acl;
  dl_zk_url_clear(&u);
  if (rc == 0 && z->auth == NULL &&
      (acl == DL_ZK_ACL_CREATOR || acl == DL_ZK_ACL_READ))
    rc = dl_seterr(NULL, DLOCK_EURL,
                   "acl=%s in the zk:// URL needs a "
                   "USER:PASSWORD@ (an identity to give the nodes to)",
                   acl == DL_ZK_ACL_READ ? "read" : "creator");
  if (acl == DL_ZK_ACL_DEFAULT)
    acl = z->auth ? DL_ZK_ACL_CREATOR : DL_ZK_ACL_OPEN;
  /* The lock's own nodes; with authentication, everyone may read and
   * create under the containers above a lock, and its creator may do
   * anything. */
  z->read_acls[0] = (struct ACL){ZOO_PERM_ALL, ZOO_AUTH_IDS};
  z->read_acls[1] = (struct ACL){ZOO_PERM_READ, ZOO_ANYONE_ID_UNSAFE};
  z->read_acl_v = (struct ACL_vector){2, z->read_acls};
  z->acl = acl == DL_ZK_ACL_CREATOR ? &ZOO_CREATOR_ALL_ACL
           : acl == DL_ZK_ACL_READ  ? &z->read_acl_v
                                    : &ZOO_OPEN_ACL_UNSAFE;
  z->parent_acls[0] = (struct ACL){ZOO_PERM_ALL, ZOO_AUTH_IDS};
  z->parent_acls[1] =
      (struct ACL){ZOO_PERM_READ | ZOO_PERM_CREATE, ZOO_ANYONE_ID_UNSAFE};
  z->parent_acl_v = (struct ACL_vector){2, z->parent_acls};
  z->parent_acl =
      acl == DL_ZK_ACL_OPEN ? &ZOO_OPEN_ACL_UNSAFE : &z->parent_acl_v;
  return rc;
}

int dl_zk_backend_new(const dlock_client_options *opts,
                      const dl_backend_env *env, dl_backend **out) {
  *out = NULL;
  if (opts->zk_session_timeout_ms <= 0 || opts->zk_connect_timeout_ms <= 0)
    return dl_seterr(NULL, DLOCK_EINVAL,
                     "zk_session_timeout_ms and "
                     "zk_connect_timeout_ms must be positive");
  dl_zk *z = calloc(1, sizeof *z);
  if (z == NULL) return dl_seterr(NULL, DLOCK_ENOMEM, "out of memory");
  z->base.ops = &zk_ops;
  z->base.detects_deadlocks = true; /* dl_deadlock_walk */
  z->env = env;
  z->session_timeout_ms = opts->zk_session_timeout_ms;
  z->command_timeout_ms = env->command_timeout_ms;
  z->state = ZOO_CONNECTING_STATE;
  pthread_mutex_init(&z->mu, NULL);
  dl_cond_init(&z->cv);
  dl_cond_init(&z->due_cv);
  z->due_tail = &z->due;
  int connect_ms = opts->zk_connect_timeout_ms;
  int rc = configure(z, opts, &connect_ms);
  /* On an event loop, the recipes run on the seam's event-loop form of
   * blocking backends, their waits woken for a cancel as for a close. */
  if (rc == 0 && env->loop)
    rc = dl_blockloop_new(&z->base, env, zk_wake_all, NULL, &z->form);
  if (rc != 0) {
    zk_free(&z->base);
    return rc;
  }
  zhandle_t *zh = new_handle(z, NULL, NULL);
  if (zh == NULL) {
    rc = dl_seterr(NULL, errno == EINVAL ? DLOCK_EURL : DLOCK_ECONNECT,
                   "cannot start a ZooKeeper session for %s: %s", z->connect,
                   strerror(errno));
    zk_free(&z->base);
    return rc;
  }
  if (await_connected(z, connect_ms) != 0) {
    rc = dl_seterr(NULL, DLOCK_ECONNECT,
                   "no ZooKeeper session with %s "
                   "within %d ms",
                   z->connect, connect_ms);
    zk_free(&z->base);
    return rc;
  }
  /* A chroot that does not exist would make every create fail ("no
   * node"), and an election retry for ever: every command fails here
   * instead, naming it. dlock does not create it (a typo would make a
   * tree nobody looks at); zkCli.sh's create does. */
  struct Stat st;
  int zrc = z->chroot ? zoo_exists(zh, "/", 0, &st) : ZOK;
  if (zrc != ZOK) {
    rc = zrc == ZNONODE
             ? dl_seterr(NULL, DLOCK_EURL,
                         "the chroot %s of the zk:// URL "
                         "does not exist on the ZooKeeper servers (create it "
                         "first, e.g. zkCli.sh create %s)",
                         z->chroot, z->chroot)
             : dl_seterr(NULL, DLOCK_ECONNECT,
                         "ZooKeeper check of the "
                         "chroot %s: %s",
                         z->chroot, zerror(zrc));
    zk_free(&z->base);
    return rc;
  }
  *out = &z->base;
  return 0;
}
