/* client.c: opening and closing a client, owner ids and key names. */
#include "client.h"
#include "../core/support.h"
#include "../etcd/etcd.h"
#include "../redis/redis.h" /* the registry */
#include "../zk/zk.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The defaults, at this library's size. */
static void defaults(dlock_client_options *o) {
  memset(o, 0, sizeof *o);
  o->size = sizeof *o;
  o->connect_timeout_ms = 2000;
  o->command_timeout_ms = 3000;
  o->watchdog_timeout_ms = 30000;
  o->reconnect_min_ms = 100;
  o->reconnect_max_ms = 5000;
  o->connections = 1;
  o->starvation_ms = 20;
  o->tls_verify = 1;
  o->zk_session_timeout_ms = 60000;
  o->zk_connect_timeout_ms = 15000;
}

void dlock_client_options_init_size(dlock_client_options *o, size_t size) {
  if (o == NULL || size < sizeof o->size) return;
  /* The caller's struct may be smaller (an older dlock.h: only its fields
   * are written) or larger (a newer one: its fields this library does not
   * know are zero, which is their default). */
  dlock_client_options d;
  defaults(&d);
  memset(o, 0, size);
  memcpy(o, &d, size < sizeof d ? size : sizeof d);
  o->size = size;
}

/* Copies the caller's options into *o at this library's size: the fields
 * beyond the caller's size keep their defaults. Returns 0, or DLOCK_EINVAL
 * with the detail recorded for dlock_client_open. */
static int options_copy(const dlock_client_options *opts,
                        dlock_client_options *o) {
  defaults(o);
  if (opts == NULL) return 0;
  size_t size = opts->size;
  if (size < DLOCK_CLIENT_OPTIONS_SIZE_0)
    return dl_seterr(NULL, DLOCK_EINVAL,
                     "dlock_client_options.size is %zu, at least %zu "
                     "expected: call dlock_client_options_init first",
                     size, (size_t)DLOCK_CLIENT_OPTIONS_SIZE_0);
  /* A newer caller's options beyond this library's struct are honoured
   * only if unset (zero: their default); refusing beats ignoring them. */
  for (size_t i = sizeof *o; i < size; i++)
    if (((const unsigned char *)opts)[i] != 0)
      return dl_seterr(NULL, DLOCK_EINVAL,
                       "dlock_client_options sets an option at byte %zu, "
                       "which this dlock library (%s, %zu bytes of "
                       "options) does not know",
                       i, DLOCK_VERSION_STRING, sizeof *o);
  memcpy(o, opts, size < sizeof *o ? size : sizeof *o);
  o->size = sizeof *o;
  return 0;
}

static void client_free(dlock_client *c) {
  if (c == NULL) return;
  /* Holds of handles not freed (a contract breach) stop being renewed. */
  dl_holds_free_all(c);
  /* The watchdog's thread uses the backend, and the backend's subscriber
   * tells the watchdog what to check: stop the one, free the other, then
   * free the first. */
  dl_transfers_free(c); /* their threads use the backend */
  dl_watchdog_stop(c->watchdog);
  if (c->backend) c->backend->ops->free(c->backend);
  dl_watchdog_free(c->watchdog);
  free(c->id);
  free(c->key_prefix);
  free(c->url_redacted);
  pthread_mutex_destroy(&c->holds_mu);
  pthread_cond_destroy(&c->holds_cv);
  free(c);
}

static int open_fail(dlock_client *c, int rc) {
  /* Details recorded under the client move to the open's own slot. */
  dl_err_to_open(c);
  client_free(c);
  return rc;
}

/* The backend heard that `key` may have been taken away (NULL: any). */
static void on_notice(void *ud, const char *key, size_t len) {
  dlock_client *c = ud;
  if (key == NULL) dl_watchdog_check_all(c->watchdog);
  else dl_watchdog_check(c->watchdog, key, len);
}

/* The backends, by the URL's scheme. Sentinel, Cluster, Redlock and
 * ZooKeeper join here, and etcd (docs/ARCHITECTURE.md). */
static const struct scheme {
  const char *scheme;
  dl_backend_factory make;
} schemes[] = {
    {"redis", dl_redis_backend_new},
    {"rediss", dl_redis_backend_new},
    {"unix", dl_redis_backend_new},
    {"redis-sentinel", dl_redis_backend_new},
    {"rediss-sentinel", dl_redis_backend_new},
    {"redis-cluster", dl_redis_backend_new},
    {"rediss-cluster", dl_redis_backend_new},
    {"redlock", dl_redlock_backend_new},
    {"zk", dl_zk_backend_new},
    {"etcd", dl_etcd_backend_new},
    {"etcds", dl_etcd_backend_new},
};

static dl_backend_factory factory_for(const char *url) {
  const char *colon = strstr(url, "://");
  size_t n = colon ? (size_t)(colon - url) : 0;
  for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
    if (strlen(schemes[i].scheme) == n &&
        strncmp(url, schemes[i].scheme, n) == 0)
      return schemes[i].make;
  return NULL;
}

int dlock_client_open(const dlock_client_options *opts, dlock_client **out) {
  return dl_client_open_with(opts, NULL, NULL, out);
}

int dlock_client_open_async(const dlock_client_options *opts, dlock_loop *lp,
                            dlock_client **out) {
  if (lp == NULL) {
    if (out) *out = NULL;
    return dl_seterr(NULL, DLOCK_EINVAL, "the loop must not be NULL");
  }
  return dl_client_open_with(opts, NULL, lp, out);
}

int dl_client_open_with(const dlock_client_options *opts,
                        dl_backend_factory make, dl_loop *loop,
                        dlock_client **out) {
  if (out == NULL)
    return dl_seterr(NULL, DLOCK_EINVAL, "out must not be NULL");
  *out = NULL;
  /* From here on the options are this library's size (the backend reads
   * them too). */
  dlock_client_options copy;
  int orc = options_copy(opts, &copy);
  if (orc != 0) return orc;
  opts = &copy;
  if (opts->connect_timeout_ms <= 0 || opts->command_timeout_ms <= 0 ||
      opts->watchdog_timeout_ms < 3 || opts->reconnect_min_ms <= 0 ||
      opts->reconnect_max_ms < opts->reconnect_min_ms ||
      opts->connections < 1 || opts->connections > 64)
    return dl_seterr(NULL, DLOCK_EINVAL,
                     "timeouts, backoff and connections must be positive "
                     "(connections 1..64, watchdog_timeout_ms >= 3)");
  int lrc =
      dl_check_lease(NULL, "watchdog_timeout_ms", opts->watchdog_timeout_ms);
  if (lrc != 0) return lrc;
  if (opts->min_replicas_acked < DLOCK_REPLICAS_AUTO ||
      opts->replicas_timeout_ms < 0)
    return dl_seterr(NULL, DLOCK_EINVAL, "min_replicas_acked (or "
                     "DLOCK_REPLICAS_AUTO) and replicas_timeout_ms must not "
                     "be negative");
  if (opts->client_name && strpbrk(opts->client_name, " \n\r\t"))
    return dl_seterr(NULL, DLOCK_EINVAL, "client_name must have no spaces");
  if (opts->key_prefix && strlen(opts->key_prefix) > DLOCK_KEY_PREFIX_MAX)
    return dl_seterr(NULL, DLOCK_EINVAL, "key_prefix over %d bytes",
                     DLOCK_KEY_PREFIX_MAX);
  if (opts->client_id && (*opts->client_id == '\0' ||
                          strlen(opts->client_id) > 200))
    return dl_seterr(NULL, DLOCK_EINVAL, "client_id must be 1..200 bytes");

  dlock_client *c = calloc(1, sizeof *c);
  if (c == NULL) return dl_seterr(NULL, DLOCK_ENOMEM, "out of memory");
  c->err.serial = dl_err_serial();
  pthread_mutex_init(&c->holds_mu, NULL);
  dl_cond_init(&c->holds_cv);
  const char *url = opts->url ? opts->url : "redis://127.0.0.1:6379";
  c->url_redacted = dl_url_redact(url);
  if (make == NULL && (make = factory_for(url)) == NULL) {
    int rc = dl_seterr(NULL, DLOCK_EINVAL, "URL must start with redis://, "
                       "rediss://, unix://, redis-sentinel://, "
                       "redis-cluster://, redlock://, zk:// or etcd:// (url %s)",
                       c->url_redacted ? c->url_redacted : "");
    client_free(c);
    return rc;
  }
  char uuid[37];
  if (!opts->client_id && dl_uuid4(uuid) != 0) {
    client_free(c);
    return dl_seterr(NULL, DLOCK_ENOMEM, "no random bytes for the client id");
  }
  c->id = dl_strdup(opts->client_id ? opts->client_id : uuid);
  c->key_prefix = dl_strdup(opts->key_prefix ? opts->key_prefix : "");
  if (!c->id || !c->key_prefix) {
    client_free(c);
    return dl_seterr(NULL, DLOCK_ENOMEM, "out of memory");
  }
  c->prefix_len = strlen(c->key_prefix);
  c->id_len = strlen(c->id);
  c->watchdog_timeout_ms = opts->watchdog_timeout_ms;
  c->env.err_owner = c;
  c->env.client_id = c->id;
  c->env.key_prefix = c->key_prefix;
  c->env.closing = &c->closing;
  c->env.reconnects = &c->reconnects;
  c->env.hold_count = dl_holds_count;
  c->env.holds = c;
  c->env.command_timeout_ms = opts->command_timeout_ms;
  c->env.loop = loop;
  c->loop = loop;
  int rc = make(opts, &c->env, &c->backend);
  if (rc != 0) return open_fail(c, rc);
  /* What the backend has not (src/core/support.c) is refused, not taken
   * and ignored. */
  if (opts->min_replicas_acked != 0 &&
      !dl_backend_supports(c->backend->ops->name, DL_FEAT_REPLICA_ACK))
    return open_fail(c, dl_seterr(NULL, DLOCK_ENOTSUP,
                                  "the %s backend has no replica "
                                  "acknowledgement (min_replicas_acked)",
                                  c->backend->ops->name));
  if (opts->detect_deadlocks && !c->backend->detects_deadlocks)
    return open_fail(c, dl_seterr(NULL, DLOCK_ENOTSUP,
                                  "the %s backend has no deadlock "
                                  "detection (detect_deadlocks): its "
                                  "waits do not follow the waiter records",
                                  c->backend->ops->name));
  c->detect_deadlocks = opts->detect_deadlocks != 0;
  rc = dl_watchdog_new(c, c->watchdog_timeout_ms, dl_holds_on_lost, c,
                       loop, &c->watchdog);
  if (rc != 0) {
    dl_seterr(NULL, rc, "cannot start the watchdog thread");
    client_free(c);
    return rc;
  }
  /* A hold taken away is checked the moment the backend hears of it. */
  if (c->backend->ops->watch_losses &&
      (rc = c->backend->ops->watch_losses(c->backend, on_notice, c)) != 0)
    return open_fail(c, rc);
  dl_clearerr(NULL);
  *out = c;
  return 0;
}

void dlock_client_shutdown(dlock_client *c) {
  if (c == NULL) return;
  atomic_store(&c->closing, 1);
  if (c->backend && c->backend->ops->wake_all)
    c->backend->ops->wake_all(c->backend);
}

void dlock_client_close(dlock_client *c) {
  if (c == NULL) return;
  atomic_store(&c->closing, 1);
  /* A participant freed from its own callback: its thread is leaving
   * (its turn's release, within a command timeout) and uses c until then. */
  while (atomic_load(&c->leaving) > 0)
    dl_sleep_ms(1);
  /* Other threads' slots for c are never matched again (serials are not
   * reused) and make way for newer ones; the closing thread's is freed. */
  dl_clearerr(c);
  client_free(c);
}

/* The backend's news of its connection, passed on to the user's. */
static void on_state(void *ud, int state) {
  dlock_client *c = ud;
  pthread_mutex_lock(&c->holds_mu);
  dlock_state_cb cb = c->state_cb;
  void *cb_ud = c->state_ud;
  pthread_mutex_unlock(&c->holds_mu);
  if (cb) cb(c, (dlock_conn_state)state, cb_ud);
}

int dlock_client_on_state(dlock_client *c, dlock_state_cb cb, void *ud) {
  if (c == NULL) return DLOCK_EINVAL;
  if (c->backend->ops->watch_state == NULL)
    return dl_seterr(c, DLOCK_ENOTSUP, "the %s backend has no session "
                     "states to report (a hold lives by its lease: "
                     "dlock_lock_validity)", c->backend->ops->name);
  pthread_mutex_lock(&c->holds_mu);
  c->state_cb = cb;
  c->state_ud = ud;
  pthread_mutex_unlock(&c->holds_mu);
  return c->backend->ops->watch_state(c->backend, cb ? on_state : NULL, c);
}

const char *dlock_client_id(const dlock_client *c) {
  return c ? c->id : "";
}

int dl_owner_id(const dlock_client *c, const char *explicit_owner, char *buf,
                size_t len) {
  /* "<client id>:<owner>", without snprintf's cost on the hot path. */
  char num[DL_INT_BUF];
  const char *tail = explicit_owner
                         ? explicit_owner
                         : dl_fmt_ll(num, (long long)dl_thread_id());
  size_t a = strlen(c->id), b = strlen(tail);
  if (a + 1 + b >= len || a + 1 + b > INT32_MAX) return DLOCK_EINVAL;
  memcpy(buf, c->id, a);
  buf[a] = ':';
  memcpy(buf + a + 1, tail, b + 1);
  return (int)(a + 1 + b);
}

int dlock_client_owner(const dlock_client *c, char *buf, size_t len) {
  if (c == NULL) return DLOCK_EINVAL;
  int n = buf ? dl_owner_id(c, NULL, buf, len) : DLOCK_EINVAL;
  if (n < 0)
    return dl_seterr(c, DLOCK_EINVAL,
                     "buf is NULL or under the %zu bytes of the owner",
                     strlen(c->id) + 22);
  return n;
}

char *dl_key(const dlock_client *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *tail = NULL;
  int n = vasprintf(&tail, fmt, ap);
  va_end(ap);
  if (n < 0) return NULL;
  char *out = malloc(c->prefix_len + (size_t)n + 1);
  if (out) {
    memcpy(out, c->key_prefix, c->prefix_len);
    memcpy(out + c->prefix_len, tail, (size_t)n + 1);
  }
  free(tail);
  return out;
}

int dlock_client_ping(dlock_client *c) {
  if (c == NULL) return DLOCK_EINVAL;
  if (c->backend->ops->ping == NULL)
    return dl_seterr(c, DLOCK_ENOTSUP, "the %s backend has no ping",
                     c->backend->ops->name);
  return c->backend->ops->ping(c->backend);
}

int dlock_client_stats_get_size(dlock_client *c, dlock_client_stats *st,
                                size_t size) {
  if (c == NULL) return DLOCK_EINVAL;
  if (st == NULL || size == 0)
    return dl_seterr(c, DLOCK_EINVAL, "no stats to fill (st NULL or size 0)");
  dlock_client_stats all = {0};
  if (c->backend->ops->stats) c->backend->ops->stats(c->backend, &all);
  dl_watchdog_stats(c->watchdog, &all);
  memcpy(st, &all, size < sizeof all ? size : sizeof all);
  return 0;
}
