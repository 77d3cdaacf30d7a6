/* backend.c: the etcd backend (etcd:// URLs): the endpoints, the session
 * lease (one per client, kept alive by the watchdog's renewals), and the
 * seam's table. */
#include "etcdb.h"
#include "pbtxn.h"
#include "sem.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;
static void curl_init(void) {
  curl_init_rc = curl_global_init(CURL_GLOBAL_ALL);
}

void dl_etcd_lease_body(int64_t id, char *body, size_t len) {
  snprintf(body, len, "{\"ID\":\"%" PRId64 "\"}", id);
}

int dl_etcd_keepalive(dl_etcd *e, int64_t lease, int64_t deadline,
                      int64_t *ttl_s) {
  etcd_keepalive t;
  const etcd_ask *k = dl_etcd_keepalive_ask(&t, lease);
  ProtobufCMessage *r;
  int rc = dl_etcd_call_pb(e, k->path, k->msg, deadline, &r, NULL);
  return dl_etcd_keepalive_reply(rc, r, ttl_s);
}

void dl_etcd_grant_body(int64_t ttl_s, char *body, size_t len) {
  snprintf(body, len, "{\"TTL\":\"%" PRId64 "\"}", ttl_s);
}

int64_t dl_etcd_grant_id_body(int64_t ttl_s, char *body, size_t len) {
  unsigned char rnd[8];
  uint64_t id = 0;
  if (dl_random_bytes(rnd, sizeof rnd) == 0)
    for (int i = 0; i < 8; i++)
      id = id << 8 | rnd[i];
  id &= INT64_MAX; /* as etcd's own: positive */
  if (id == 0) {   /* no random bytes: the server's choice */
    dl_etcd_grant_body(ttl_s, body, len);
    return 0;
  }
  snprintf(body, len, "{\"TTL\":\"%" PRId64 "\",\"ID\":\"%" PRId64 "\"}", ttl_s,
           (int64_t)id);
  return (int64_t)id;
}

int dl_etcd_grant_answer(dl_etcd *e, json_object *r, int64_t *lease,
                         int64_t *got_s) {
  *lease = dl_etcd_i64(r, "ID");
  *got_s = dl_etcd_i64(r, "TTL");
  json_object_put(r);
  if (*lease == 0 || *got_s <= 0)
    return dl_seterr(e->err, DLOCK_EPROTO,
                     "etcd granted no lease (no ID or TTL in the answer)");
  return 0;
}

int dl_etcd_grant(dl_etcd *e, int64_t ttl_s, int64_t deadline, int64_t *lease,
                  int64_t *got_s) {
  char body[64];
  dl_etcd_grant_body(ttl_s, body, sizeof body);
  json_object *r;
  int rc = dl_etcd_call(e, "/v3/lease/grant", body, deadline, &r, NULL);
  return rc != 0 ? rc : dl_etcd_grant_answer(e, r, lease, got_s);
}

int dl_etcd_revoke(dl_etcd *e, int64_t lease, int64_t deadline) {
  char body[64];
  dl_etcd_lease_body(lease, body, sizeof body);
  json_object *r;
  int code;
  int rc = dl_etcd_call(e, "/v3/lease/revoke", body, deadline, &r, &code);
  if (rc == 0) json_object_put(r);
  return rc != 0 && code == 5 ? 0 : rc; /* not found: gone already */
}

int64_t dl_etcd_idle_take(dl_etcd *e, int64_t lease_ms, int64_t now) {
  int64_t ttl_s = dl_etcd_ttl_s(lease_ms), l = 0;
  pthread_mutex_lock(&e->mu);
  for (int i = e->nidle - 1; i >= 0 && l == 0; i--) {
    if (e->idle[i].until <= now) { /* expired by now: forgotten */
      e->idle[i] = e->idle[--e->nidle];
      continue;
    }
    if (e->idle[i].ttl_s == ttl_s) {
      l = e->idle[i].lease;
      e->idle[i] = e->idle[--e->nidle];
    }
  }
  pthread_mutex_unlock(&e->mu);
  return l;
}

int dl_etcd_fixed_lease(dl_etcd *e, int64_t lease_ms, int64_t deadline,
                        int64_t *lease, int64_t *until) {
  int64_t ttl_s = dl_etcd_ttl_s(lease_ms), sent = dl_now_ms();
  int64_t l = dl_etcd_idle_take(e, lease_ms, sent);
  if (l != 0) {
    int64_t got;
    int rc = dl_etcd_keepalive(e, l, deadline, &got);
    if (rc < 0) return rc;
    if (dl_etcd_fixed_kept(rc, got, lease_ms)) {
      *lease = l;
      *until = dl_validity(sent, lease_ms);
      return 0;
    } /* else gone: a new one */
    sent = dl_now_ms();
  }
  int64_t got;
  int rc = dl_etcd_grant(e, ttl_s, deadline, lease, &got);
  if (rc == 0) *until = dl_validity(sent, lease_ms);
  return rc;
}

int64_t dl_etcd_idle_put(dl_etcd *e, int64_t lease, int64_t lease_ms,
                         int64_t until) {
  int64_t old = 0;
  pthread_mutex_lock(&e->mu);
  if (e->nidle == ETCD_IDLE_MAX) {
    old = e->idle[0].lease;
    memmove(&e->idle[0], &e->idle[1], (ETCD_IDLE_MAX - 1) * sizeof e->idle[0]);
    e->nidle--;
  }
  e->idle[e->nidle].lease = lease;
  e->idle[e->nidle].ttl_s = dl_etcd_ttl_s(lease_ms);
  e->idle[e->nidle].until = until;
  e->nidle++;
  pthread_mutex_unlock(&e->mu);
  return old;
}

void dl_etcd_lease_idle(dl_etcd *e, int64_t lease, int64_t lease_ms,
                        int64_t until) {
  int64_t old = dl_etcd_idle_put(e, lease, lease_ms, until);
  if (old) dl_etcd_revoke(e, old, dl_now_ms() + e->command_timeout_ms);
}

int dl_etcd_session_need(dl_etcd *e, int64_t now, int64_t *lease,
                         int64_t *until) {
  pthread_mutex_lock(&e->mu);
  int64_t l = e->lease, u = e->lease_until, ttl = e->lease_ttl_s;
  pthread_mutex_unlock(&e->mu);
  *lease = l;
  *until = u;
  if (l != 0 && u - now >= ttl * 1000 / 2) return 0;
  return l != 0 ? 1 : 2;
}

int dl_etcd_session_kept(dl_etcd *e, int64_t sent, int64_t got,
                         int64_t *until) {
  int64_t u;
  pthread_mutex_lock(&e->mu);
  if (got > 0) {
    e->lease_ttl_s = got;
    e->lease_until = dl_validity(sent, got * 1000);
  } else {
    e->lease = 0; /* expired: its keys are gone, the renewals say so */
  }
  u = e->lease_until;
  pthread_mutex_unlock(&e->mu);
  *until = u;
  return got > 0 && u > sent ? 0 : 1;
}

void dl_etcd_session_granted(dl_etcd *e, int64_t sent, int64_t lease,
                             int64_t got, int64_t *until) {
  *until = dl_validity(sent, got * 1000);
  pthread_mutex_lock(&e->mu);
  e->lease = lease;
  e->lease_ttl_s = got;
  e->lease_until = *until;
  pthread_mutex_unlock(&e->mu);
}

int dl_etcd_session(dl_etcd *e, int64_t deadline, int64_t *lease,
                    int64_t *until) {
  pthread_mutex_lock(&e->lease_mu);
  int64_t sent = dl_now_ms(), l, u, got;
  int rc = dl_etcd_session_need(e, sent, &l, &u);
  if (rc == 1) {
    rc = dl_etcd_keepalive(e, l, deadline, &got);
    if (rc >= 0) rc = dl_etcd_session_kept(e, sent, rc == 1 ? got : 0, &u);
  }
  if (rc == 2 || rc == 1) {
    rc = dl_etcd_grant(e, dl_etcd_ttl_s(e->session_ttl_ms), deadline, &l, &got);
    if (rc == 0) dl_etcd_session_granted(e, sent, l, got, &u);
  }
  if (rc == 0) {
    *lease = l;
    *until = u;
  }
  pthread_mutex_unlock(&e->lease_mu);
  return rc;
}

static int etcd_watch_losses(dl_backend *b, dl_notice_fn fn, void *ud) {
  dl_etcd *e = (dl_etcd *)b;
  pthread_mutex_lock(&e->mu);
  e->notice = fn;
  e->notice_ud = ud;
  pthread_mutex_unlock(&e->mu);
  return 0;
}

static int etcd_ping(dl_backend *b) {
  dl_etcd *e = (dl_etcd *)b;
  json_object *r;
  int rc = dl_etcd_call(e, "/v3/maintenance/status", "{}",
                        dl_now_ms() + e->command_timeout_ms, &r, NULL);
  if (rc == 0) json_object_put(r);
  return rc;
}

/* A cancel (event-loop client): the waits look at their operation's
 * flag, the others at their deadline again. */
static void etcd_kick(dl_backend *b) {
  dl_etcd *e = (dl_etcd *)b;
  pthread_mutex_lock(&e->mu);
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
  dl_etcd_wake_waits(e);
}

static void etcd_wake_all(dl_backend *b) {
  dl_etcd *e = (dl_etcd *)b;
  atomic_fetch_add(&e->wakes, 1);
  pthread_mutex_lock(&e->mu);
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
  dl_etcd_wake_waits(e);
}

static int etcd_check_key(dl_backend *b, const char *key) {
  dl_etcd *e = (dl_etcd *)b;
  if (key[0] == '\0')
    return dl_seterr(e->err, DLOCK_EINVAL, "an etcd lock needs a name");
  if (strlen(e->prefix) + strlen(key) + 20 > ETCD_KEY_MAX)
    return dl_seterr(e->err, DLOCK_ENAMETOOLONG, "etcd key too long: '%s'",
                     key);
  return 0;
}

static void etcd_stats(dl_backend *b, dlock_client_stats *st) {
  dl_etcd *e = (dl_etcd *)b;
  st->writes += (uint64_t)atomic_load(&e->round_trips);
}

static void etcd_free(dl_backend *b) {
  dl_etcd *e = (dl_etcd *)b;
  if (e == NULL) return;
  /* An event-loop client's operations end, their callers are told: those
   * on the loop's multi handle, then the jobs. */
  dl_etcd_aops_close(e);
  dl_etcd_aloop_free(e);
  dl_blockloop_close(e->form);
  /* Election threads left from their own callback may still be revoking
   * their lease: they end first (the closing flag ends the others). */
  pthread_mutex_lock(&e->mu);
  while (e->participants > 0)
    pthread_cond_wait(&e->cv, &e->mu);
  pthread_mutex_unlock(&e->mu);
  dl_etcd_watcher_stop(e);
  /* As a ZooKeeper session's close: the session's keys go with its lease
   * at once, not when its TTL runs out; and the fixed leases' too. */
  int64_t deadline = dl_now_ms() + e->command_timeout_ms;
  if (e->lease) dl_etcd_revoke(e, e->lease, deadline);
  dl_etcd_consumers_free(e, deadline);
  while (e->orphans) { /* they go with the lease, if not before */
    etcd_hold *o = e->orphans;
    e->orphans = o->next;
    if (o->lease) dl_etcd_revoke(e, o->lease, deadline);
    dl_etcd_hold_free(o);
  }
  for (int i = 0; i < e->nidle; i++)
    if (e->idle[i].until > dl_now_ms())
      dl_etcd_revoke(e, e->idle[i].lease, deadline);
  while (e->holds) {
    etcd_hold *h = e->holds;
    e->holds = h->next;
    if (h->own_lease && h->held) dl_etcd_revoke(e, h->lease, deadline);
    dl_etcd_hold_free(h);
  }
  for (int i = 0; i < e->npool; i++)
    curl_easy_cleanup(e->pool[i]);
  free(e->pool);
  dl_etcd_gconn_free(e->gsolo);
  dl_etcd_gmux_free(e);
  if (e->headers) curl_slist_free_all(e->headers);
  if (e->grpc_headers) curl_slist_free_all(e->grpc_headers);
  free(e->tls_ca_file);
  free(e->tls_ca_dir);
  free(e->tls_cert_file);
  free(e->tls_key_file);
  free(e->user);
  if (e->password) memset(e->password, 0, strlen(e->password));
  free(e->password);
  free(e->token);
  pthread_mutex_destroy(&e->auth_mu);
  for (int i = 0; i < e->nendpoints; i++)
    free(e->endpoints[i]);
  free(e->endpoints);
  free(e->unreached_at);
  free(e->prefix);
  pthread_cond_destroy(&e->cv);
  pthread_mutex_destroy(&e->mu);
  pthread_mutex_destroy(&e->lease_mu);
  dl_blockloop_free(e->form); /* the watcher, which tells losses, ended */
  free(e);
}

static const dl_backend_ops etcd_ops = {
    .name = "etcd",
    .lock_acquire = dl_etcd_lock_acquire,
    .lock_release = dl_etcd_lock_release,
    .lock_force_release = dl_etcd_lock_force_release,
    .lock_query = dl_etcd_lock_query,
    .inspect = dl_etcd_inspect,
    .holders = dl_etcd_lock_holders,
    .scan = dl_etcd_scan,
    .waiters = dl_etcd_waiters,
    .elect_join = dl_etcd_elect_join,
    .elect_leave = dl_etcd_elect_leave,
    .elect_leader = dl_etcd_elect_leader,
    .elect_proclaim = dl_etcd_elect_proclaim,
    .elect_observe = dl_etcd_elect_observe,
    .elect_unobserve = dl_etcd_elect_unobserve,
    .renew = dl_etcd_renew,
    .fence = dl_etcd_fence,
    .sem_acquire = dl_etcd_sem_acquire,
    .permit_acquire = dl_etcd_permit_acquire,
    .latch_await = dl_etcd_latch_await,
    .sync_update = dl_etcd_sync_update,
    .queue = dl_etcd_queue,
    .queue_kick = dl_etcd_queue_kick,
    .watch_losses = etcd_watch_losses,
    .wake_all = etcd_wake_all,
    .ping = etcd_ping,
    .check_key = etcd_check_key,
    .stats = etcd_stats,
    .free = etcd_free,
};

/* Whether e's endpoints ("http[s]://HOST:PORT") are different servers
 * (dl_url_distinct): 0, or the code recorded. */
static int endpoints_distinct(dl_etcd *e) {
  int n = e->nendpoints;
  dl_server_name *sv = calloc((size_t)n, sizeof *sv);
  char **hosts = calloc((size_t)n, sizeof *hosts);
  int rc = sv && hosts ? 0 : DLOCK_ENOMEM;
  for (int i = 0; i < n && rc == 0; i++) {
    const char *h = strstr(e->endpoints[i], "://") + 3;
    const char *colon = strrchr(h, ':');
    size_t hl = (size_t)(colon - h);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') h++, hl -= 2;
    if ((hosts[i] = strndup(h, hl)) == NULL) rc = DLOCK_ENOMEM;
    sv[i] = (dl_server_name){hosts[i], atoi(colon + 1), NULL};
  }
  char err[700];
  if (rc == 0) rc = dl_url_distinct("etcd://", sv, n, err, sizeof err);
  for (int i = 0; hosts && i < n; i++)
    free(hosts[i]);
  free(hosts);
  free(sv);
  if (rc == DLOCK_ENOMEM) return dl_seterr(NULL, rc, "out of memory");
  return rc ? dl_seterr(NULL, rc, "%s", err) : 0;
}

/* The URL's endpoints, user, password and prefix into e: 0, or a
 * negative code recorded. */
static int parse_url(dl_etcd *e, const char *url) {
  const char *p = strstr(url, "://");
  const char *why = NULL;
  e->tls = strncmp(url, "etcds://", 8) == 0;
  if (p == NULL || (strncmp(url, "etcd://", 7) != 0 && !e->tls))
    why = "an etcd URL starts with etcd:// or etcds://";
  else if (dl_url_userinfo(url, &p, &e->user, &e->password) != 0)
    why = "a bad %-escape in the etcd URL's user or password";
  const char *q = why ? NULL : strchr(p, '?');
  if (why == NULL && q) { /* the one option: the calls' transport */
    if (strcmp(q, "?transport=json") == 0)
      e->grpc = false;
    else if (strcmp(q, "?transport=grpc") != 0)
      why = "an etcd URL's one option is transport=grpc or transport=json";
  }
  if (why == NULL && strpbrk(p, "@#"))
    why = "a '@' or '#' in the etcd URL "
          "(etcd[s]://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT...][/PREFIX]"
          "[?transport=grpc|json])";
  const char *slash = memchr(p, '/', q ? (size_t)(q - p) : strlen(p));
  size_t hl = slash ? (size_t)(slash - p) : q ? (size_t)(q - p) : strlen(p);
  if (why == NULL && hl == 0) why = "an etcd URL needs a HOST:PORT";
  if (why) return dl_seterr(NULL, DLOCK_EURL, "%s (url %s)", why, url);
  int n = 1;
  for (size_t i = 0; i < hl; i++)
    n += p[i] == ',';
  e->endpoints = calloc((size_t)n, sizeof *e->endpoints);
  e->unreached_at = calloc((size_t)n, sizeof *e->unreached_at);
  if (e->endpoints == NULL || e->unreached_at == NULL)
    return dl_seterr(NULL, DLOCK_ENOMEM, "out of memory");
  const char *s = p;
  for (int i = 0; i < n; i++) {
    const char *c = memchr(s, ',', hl - (size_t)(s - p));
    size_t len = c ? (size_t)(c - s) : hl - (size_t)(s - p);
    if (len == 0 || len > 300)
      return dl_seterr(NULL, DLOCK_EURL,
                       "an empty or overlong HOST:PORT in "
                       "the etcd URL %s",
                       url);
    /* HOST alone: etcd's client port. */
    const char *colon = memrchr(s, ':', len);
    bool bracket = s[len - 1] == ']';
    bool port = colon && !bracket;
    /* The URL's fault, not an unreachable server's: no host, or a port
     * that is not 1-65535. */
    size_t pn = port ? len - (size_t)(colon + 1 - s) : 0;
    long pv = pn > 0 && pn <= 5 && strspn(colon + 1, "0123456789") == pn
                  ? strtol(colon + 1, NULL, 10)
                  : 0;
    if ((port ? colon : s + len) == s || (port && (pv < 1 || pv > 65535)))
      return dl_seterr(NULL, DLOCK_EURL,
                       "a HOST:PORT with no host, or a port not 1-65535, in "
                       "the etcd URL %s",
                       url);
    size_t m = len + 16;
    if ((e->endpoints[i] = malloc(m)) == NULL)
      return dl_seterr(NULL, DLOCK_ENOMEM, "out of memory");
    snprintf(e->endpoints[i], m, "%s://%.*s%s", e->tls ? "https" : "http",
             (int)len, s, port ? "" : ":2379");
    e->nendpoints++;
    s += len + 1;
  }
  int rc = endpoints_distinct(e);
  if (rc != 0) return rc;
  /* "/app" -> "app/": a lock NAME's keys are app/NAME/<lease>, as
   * `etcdctl lock app/NAME` makes them. */
  const char *path = slash ? slash + 1 : q ? q : "";
  size_t pl = q ? (size_t)(q - path) : strlen(path);
  while (pl > 0 && path[pl - 1] == '/')
    pl--;
  if ((e->prefix = malloc(pl + 2)) == NULL)
    return dl_seterr(NULL, DLOCK_ENOMEM, "out of memory");
  snprintf(e->prefix, pl + 2, "%.*s%s", (int)pl, path, pl ? "/" : "");
  return 0;
}

/* A copy of an option's string: 0 (*dst NULL for NULL), or -1 out of
 * memory. */
static int copy_opt(char **dst, const char *s) {
  free(*dst);
  *dst = s ? dl_strdup(s) : NULL;
  return s && *dst == NULL ? -1 : 0;
}

/* The options' TLS files, user and password (over the URL's) into e: 0,
 * or a negative code recorded. */
static int take_options(dl_etcd *e, const dlock_client_options *o) {
  if (o->username && copy_opt(&e->user, o->username) != 0)
    return dl_seterr(NULL, DLOCK_ENOMEM, "out of memory");
  if (o->password) {
    if (e->password) memset(e->password, 0, strlen(e->password));
    if (copy_opt(&e->password, o->password) != 0)
      return dl_seterr(NULL, DLOCK_ENOMEM, "out of memory");
  }
  if (e->user && *e->user == '\0')
    return dl_seterr(NULL, DLOCK_EINVAL, "etcd: an empty user name");
  if (e->password && e->user == NULL)
    return dl_seterr(NULL, DLOCK_EINVAL,
                     "etcd's authentication needs a user with the password "
                     "(etcd://USER:PASSWORD@HOST..., or the username "
                     "option)");
  if (e->user && e->password == NULL && (e->password = dl_strdup("")) == NULL)
    return dl_seterr(NULL, DLOCK_ENOMEM, "out of memory");
  e->tls_verify = o->tls_verify != 0;
  if (!e->tls) return 0;
  if (o->tls_server_name)
    return dl_seterr(NULL, DLOCK_ENOTSUP,
                     "etcds:// takes no tls_server_name: the name "
                     "checked is the URL's host");
  if (copy_opt(&e->tls_ca_file, o->tls_ca_file) ||
      copy_opt(&e->tls_ca_dir, o->tls_ca_dir) ||
      copy_opt(&e->tls_cert_file, o->tls_cert_file) ||
      copy_opt(&e->tls_key_file, o->tls_key_file))
    return dl_seterr(NULL, DLOCK_ENOMEM, "out of memory");
  if ((e->tls_cert_file == NULL) != (e->tls_key_file == NULL))
    return dl_seterr(NULL, DLOCK_EINVAL,
                     "etcds:// needs both the client certificate and its "
                     "key, or neither");
  return 0;
}

int dl_etcd_backend_new(const dlock_client_options *opts,
                        const dl_backend_env *env, dl_backend **out) {
  *out = NULL;
  const char *url = opts->url;
  pthread_once(&curl_once, curl_init);
  if (curl_init_rc != CURLE_OK)
    return dl_seterr(NULL, DLOCK_ENOMEM, "libcurl: %s",
                     curl_easy_strerror(curl_init_rc));
  dl_etcd *e = calloc(1, sizeof *e);
  if (e == NULL) return dl_seterr(NULL, DLOCK_ENOMEM, "out of memory");
  e->base.ops = &etcd_ops;
  e->base.detects_deadlocks = true; /* dl_deadlock_walk */
  e->env = env;
  e->command_timeout_ms = env->command_timeout_ms;
  e->connect_timeout_ms = opts->connect_timeout_ms;
  e->unreached_ms = opts->reconnect_min_ms;
  e->session_ttl_ms = opts->watchdog_timeout_ms;
  pthread_mutex_init(&e->mu, NULL);
  pthread_mutex_init(&e->lease_mu, NULL);
  pthread_mutex_init(&e->auth_mu, NULL);
  dl_cond_init(&e->cv);
  e->pool = calloc(16, sizeof *e->pool);
  e->grpc = true;
  /* No "Expect: 100-continue" before a large body (a round trip more). */
  e->headers = curl_slist_append(NULL, "Content-Type: application/json");
  struct curl_slist *h2 =
      e->headers ? curl_slist_append(e->headers, "Expect:") : NULL;
  if (h2) e->headers = h2;
  /* gRPC's: te: trailers (gRPC's spec), no Accept: curl's default. */
  static const char *const gh[] = {"Content-Type: application/grpc",
                                   "TE: trailers", "Accept:", "Expect:"};
  bool gok = true;
  for (size_t i = 0; i < sizeof gh / sizeof gh[0] && gok; i++) {
    struct curl_slist *l = curl_slist_append(e->grpc_headers, gh[i]);
    if (l) e->grpc_headers = l;
    gok = l != NULL;
  }
  int rc =
      e->pool && h2 && gok ? 0 : dl_seterr(NULL, DLOCK_ENOMEM, "out of memory");
  if (rc == 0) rc = parse_url(e, url);
  if (rc == 0) rc = take_options(e, opts);
  if (rc == 0 && e->grpc && dl_etcd_gmux_new(e) != 0)
    rc = dl_seterr(NULL, DLOCK_ENOMEM, "out of memory");
  if (rc == 0) {
    /* The servers answer (any one of them). */
    json_object *r;
    rc = dl_etcd_call(e, "/v3/maintenance/status", "{}",
                      dl_now_ms() + opts->connect_timeout_ms, &r, NULL);
    if (rc == 0) {
      json_object_put(r);
    } else if (rc != DLOCK_ENOMEM && rc != DLOCK_ETLS && rc != DLOCK_EAUTH) {
      char why[512];
      snprintf(why, sizeof why, "%s", dlock_client_open_errmsg());
      rc = dl_seterr(NULL, DLOCK_ECONNECT,
                     "no etcd server answered at %s%s: %s", e->endpoints[0],
                     e->nendpoints > 1 ? " (or the others)" : "", why);
    }
  }
  /* Then the user and password, if any: refused, DLOCK_EAUTH. */
  if (rc == 0 && e->user)
    rc = dl_etcd_authenticate(e, 0, dl_now_ms() + opts->connect_timeout_ms);
  /* On an event loop: release, force release and ping on a multi handle
   * the loop drives (acall.c, release.c); the other operations on the
   * seam's event-loop form of blocking backends, a thread per operation
   * in flight. */
  if (rc == 0 && env->loop) rc = dl_etcd_aloop_new(e);
  if (rc == 0 && env->loop)
    rc = dl_blockloop_new(&e->base, env, etcd_kick, &dl_etcd_aops, &e->form);
  if (rc == 0 && env->loop)
    dl_blockloop_set_woken(e->form, dl_etcd_aclaims_woken);
  if (rc != 0) {
    etcd_free(&e->base);
    return rc;
  }
  e->err = env->err_owner;
  *out = &e->base;
  return 0;
}
