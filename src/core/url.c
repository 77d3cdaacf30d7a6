/* url.c: parses redis://, rediss://, unix://, redis-sentinel:// and
 * redis-cluster:// URLs, and checks zk:// ones; whether a URL's servers are all
 * different. */
#include "core.h"

#include <ctype.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

void dl_endpoint_clear(dl_endpoint *ep) {
  if (ep == NULL) return;
  free(ep->host);
  free(ep->unix_path);
  free(ep->username);
  free(ep->password);
  free(ep->master_name);
  for (int i = 0; i < ep->nhosts; i++) free(ep->hosts[i].host);
  free(ep->hosts);
  memset(ep, 0, sizeof *ep);
}

/* A server's name as the URL gave it, for messages: host:port ([v6]:port),
 * or the socket path. */
static void server_text(const dl_server_name *sv, char *out, size_t size) {
  if (sv->path)
    snprintf(out, size, "%s", sv->path);
  else if (strchr(sv->host, ':'))
    snprintf(out, size, "[%s]:%d", sv->host, sv->port);
  else
    snprintf(out, size, "%s:%d", sv->host, sv->port);
}

/* Whether two resolved addresses are the same host (ports aside). */
static bool same_addr(const struct addrinfo *x, const struct addrinfo *y) {
  if (x->ai_family != y->ai_family) return false;
  if (x->ai_family == AF_INET)
    return memcmp(&((const struct sockaddr_in *)(void *)x->ai_addr)->sin_addr,
                  &((const struct sockaddr_in *)(void *)y->ai_addr)->sin_addr,
                  sizeof(struct in_addr)) == 0;
  if (x->ai_family == AF_INET6)
    return memcmp(&((const struct sockaddr_in6 *)(void *)x->ai_addr)->sin6_addr,
                  &((const struct sockaddr_in6 *)(void *)y->ai_addr)->sin6_addr,
                  sizeof(struct in6_addr)) == 0;
  return false;
}

/* Whether a and b are the same server: the same socket path, or a TCP
 * address in common once their names are resolved (localhost:P and
 * 127.0.0.1:P are one server). A name that does not resolve is compared as
 * written (the connect reports it). */
static bool same_server(const dl_server_name *a, const dl_server_name *b) {
  if (a->path || b->path)
    return a->path && b->path && strcmp(a->path, b->path) == 0;
  if (a->port != b->port) return false;
  if (strcmp(a->host, b->host) == 0) return true;
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ra = NULL, *rb = NULL;
  bool same = false;
  if (getaddrinfo(a->host, NULL, &hints, &ra) == 0 &&
      getaddrinfo(b->host, NULL, &hints, &rb) == 0)
    for (struct addrinfo *x = ra; x && !same; x = x->ai_next)
      for (struct addrinfo *y = rb; y && !same; y = y->ai_next)
        same = same_addr(x, y);
  if (ra) freeaddrinfo(ra);
  if (rb) freeaddrinfo(rb);
  return same;
}

int dl_url_distinct(const char *scheme, const dl_server_name *sv, int n,
                    char *err, size_t errlen) {
  for (int i = 1; i < n; i++)
    for (int j = 0; j < i; j++) {
      if (!same_server(&sv[j], &sv[i])) continue;
      char na[300], nb[300];
      server_text(&sv[j], na, sizeof na);
      server_text(&sv[i], nb, sizeof nb);
      if (strcmp(na, nb) == 0)
        snprintf(err, errlen,
                 "%s names the server %s twice (servers %d and %d): each "
                 "must be a different server",
                 scheme, na, j + 1, i + 1);
      else
        snprintf(err, errlen,
                 "%s names one server twice: %s (server %d) and %s "
                 "(server %d) are the same address",
                 scheme, na, j + 1, nb, i + 1);
      return DLOCK_EINVAL;
    }
  return 0;
}

static int hexval(int ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  ch = tolower(ch);
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  return -1;
}

/* Copies s[0..n) with %XX decoding; NULL if malformed or out of memory. */
static char *pct_decode(const char *s, size_t n) {
  char *out = malloc(n + 1);
  if (out == NULL) return NULL;
  size_t j = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '%') {
      if (i + 2 >= n) { free(out); return NULL; }
      int h = hexval((unsigned char)s[i + 1]), l = hexval((unsigned char)s[i + 2]);
      if (h < 0 || l < 0) { free(out); return NULL; }
      char ch = (char)(h * 16 + l);
      if (ch == '\0') { free(out); return NULL; }
      out[j++] = ch;
      i += 2;
    } else {
      out[j++] = s[i];
    }
  }
  out[j] = '\0';
  return out;
}

static int parse_int(const char *s, size_t n, int lo, int hi, int *out) {
  if (n == 0 || n > 9) return -1;
  int v = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isdigit((unsigned char)s[i])) return -1;
    v = v * 10 + (s[i] - '0');
  }
  if (v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

#define FAIL(...)                                                              \
  do {                                                                         \
    snprintf(err, errlen, __VA_ARGS__);                                        \
    dl_endpoint_clear(ep);                                                     \
    return DLOCK_EURL;                                                         \
  } while (0)

/* The error for an option of query q ("name[=value][&...]") that `kind`
 * does not know: names it and what the URL accepts. */
static int unknown_option(const char *q, const char *kind, const char *accepts,
                          dl_endpoint *ep, char *err, size_t errlen) {
  size_t n = strcspn(q, "=&");
  FAIL("unknown option '%.*s' in the %s URL (%s)", (int)(n > 64 ? 64 : n), q,
       kind, accepts);
}

static int parse_unix(const char *p, dl_endpoint *ep, char *err,
                      size_t errlen) {
  /* unix:///path/redis.sock[?db=N] */
  if (p[0] != '/') FAIL("unix URL needs an absolute path (unix:///path)");
  const char *q = strchr(p, '?');
  size_t plen = q ? (size_t)(q - p) : strlen(p);
  if (plen < 2) FAIL("unix URL has an empty path");
  ep->unix_path = pct_decode(p, plen);
  if (ep->unix_path == NULL) FAIL("bad %%-escape in the socket path");
  if (q) {
    if (strncmp(q + 1, "db=", 3) != 0)
      return unknown_option(q + 1, "unix", "it accepts only ?db=N", ep, err,
                            errlen);
    const char *d = q + 4;
    if (parse_int(d, strlen(d), 0, 1000000, &ep->db) != 0)
      FAIL("bad database number in the unix URL");
  }
  return 0;
}

/* host[:port] in p[0..end), host may be [v6]; an empty host is
 * 127.0.0.1, no port 6379. */
static int parse_hostport(const char *p, const char *end, char **host,
                          int *port, char *err, size_t errlen) {
  const char *hend;
  const char *portp = NULL;
  *host = NULL;
#define HFAIL(...)                                                             \
  do {                                                                         \
    snprintf(err, errlen, __VA_ARGS__);                                        \
    free(*host);                                                               \
    *host = NULL;                                                              \
    return DLOCK_EURL;                                                         \
  } while (0)
  if (*p == '[') {
    const char *rb = memchr(p, ']', (size_t)(end - p));
    if (rb == NULL) HFAIL("unterminated [IPv6] host");
    *host = pct_decode(p + 1, (size_t)(rb - p - 1));
    hend = rb + 1;
    if (hend < end && *hend == ':') portp = hend + 1;
    else if (hend != end) HFAIL("unexpected text after the [IPv6] host");
  } else {
    const char *colon = memchr(p, ':', (size_t)(end - p));
    hend = colon ? colon : end;
    *host = pct_decode(p, (size_t)(hend - p));
    if (colon) portp = colon + 1;
  }
  if (*host == NULL) HFAIL("bad host");
  if ((*host)[0] == '\0') {
    free(*host);
    *host = dl_strdup("127.0.0.1");
    if (*host == NULL) HFAIL("out of memory");
  }
  *port = 6379;
  if (portp && parse_int(portp, (size_t)(end - portp), 1, 65535, port) != 0)
    HFAIL("bad port (1-65535)");
#undef HFAIL
  return 0;
}

/* Whether ep's n hosts are different servers (dl_url_distinct): 0, or
 * DLOCK_EINVAL with err set and ep cleared. */
static int hosts_distinct(const char *scheme, dl_endpoint *ep, char *err,
                          size_t errlen) {
  dl_server_name *sv = calloc((size_t)ep->nhosts, sizeof *sv);
  if (sv == NULL) FAIL("out of memory");
  for (int i = 0; i < ep->nhosts; i++)
    sv[i] = (dl_server_name){ep->hosts[i].host, ep->hosts[i].port, NULL};
  int rc = dl_url_distinct(scheme, sv, ep->nhosts, err, errlen);
  free(sv);
  if (rc != 0) dl_endpoint_clear(ep);
  return rc;
}

/* A list HOST[:PORT][,HOST[:PORT]...] in p[0..end) into ep->hosts; a
 * host without a port gets dflt. `what` names an element in errors; a
 * server named twice is refused, named, as `scheme`'s (DLOCK_EINVAL). */
static int parse_hosts(const char *p, const char *end, int dflt,
                       const char *what, const char *scheme, dl_endpoint *ep,
                       char *err, size_t errlen) {
  int n = 1;
  for (const char *s = p; s < end; s++)
    if (*s == ',') n++;
  ep->hosts = calloc((size_t)n, sizeof *ep->hosts);
  if (ep->hosts == NULL) FAIL("out of memory");
  while (ep->nhosts < n) {
    const char *comma = memchr(p, ',', (size_t)(end - p));
    const char *e = comma ? comma : end;
    if (e == p) {
      snprintf(err, errlen, "empty %s address in the list", what);
      dl_endpoint_clear(ep);
      return DLOCK_EURL;
    }
    struct dl_hostport *h = &ep->hosts[ep->nhosts];
    if (parse_hostport(p, e, &h->host, &h->port, err, errlen) != 0) {
      dl_endpoint_clear(ep);
      return DLOCK_EURL;
    }
    const char *rb = *p == '[' ? memchr(p, ']', (size_t)(e - p)) : p;
    if (memchr(rb, ':', (size_t)(e - rb)) == NULL) h->port = dflt;
    ep->nhosts++;
    p = comma ? comma + 1 : end;
  }
  return hosts_distinct(scheme, ep, err, errlen);
}

/* After the userinfo of redis-sentinel://: HOST:PORT[,HOST:PORT...]/MASTER
 * [?db=N]; p[0..end) the sentinels. */
static int parse_sentinel(const char *p, const char *end, dl_endpoint *ep,
                          char *err, size_t errlen) {
  /* Without a port, a sentinel listens on 26379. */
  int rc = parse_hosts(p, end, 26379, "sentinel",
                       ep->tls ? "rediss-sentinel://" : "redis-sentinel://", ep,
                       err, errlen);
  if (rc != 0) return rc;
  if (*end != '/' || end[1] == '\0' || end[1] == '?')
    FAIL("redis-sentinel URL needs the master's name after '/' "
         "(redis-sentinel://host:port/mymaster)");
  const char *name = end + 1;
  const char *q = strchr(name, '?');
  size_t nlen = q ? (size_t)(q - name) : strlen(name);
  ep->master_name = pct_decode(name, nlen);
  if (ep->master_name == NULL || strchr(ep->master_name, '/'))
    FAIL("bad master name");
  if (q) {
    if (strncmp(q + 1, "db=", 3) != 0)
      return unknown_option(q + 1, "redis-sentinel",
                            "it accepts only ?db=N; the sentinels' password "
                            "is an option, never in the URL",
                            ep, err, errlen);
    if (parse_int(q + 4, strlen(q + 4), 0, 1000000, &ep->db) != 0)
      FAIL("bad database number in the URL");
  }
  return 0;
}

/* After the userinfo of redis-cluster://: HOST:PORT[,HOST:PORT...], the
 * seed nodes, p[0..end); then [/][?pubsub=auto|sharded|classic]. A cluster
 * has database 0 only. */
static int parse_cluster(const char *p, const char *end, dl_endpoint *ep,
                         char *err, size_t errlen) {
  ep->cluster = true;
  int rc = parse_hosts(p, end, 6379, "cluster node",
                       ep->tls ? "rediss-cluster://" : "redis-cluster://", ep,
                       err, errlen);
  if (rc != 0) return rc;
  const char *q = *end == '/' ? end + 1 : end;
  if (*q == '\0') return 0;
  if (*q != '?')
    FAIL("redis-cluster URL takes no path (a cluster has database 0 only)");
  q++;
  if (strcmp(q, "pubsub=auto") == 0)
    ep->cluster_pubsub = DL_PUBSUB_AUTO;
  else if (strcmp(q, "pubsub=sharded") == 0)
    ep->cluster_pubsub = DL_PUBSUB_SHARDED;
  else if (strcmp(q, "pubsub=classic") == 0)
    ep->cluster_pubsub = DL_PUBSUB_CLASSIC;
  else if (strncmp(q, "pubsub=", 7) == 0)
    FAIL("redis-cluster URL: pubsub is auto, sharded or classic, not '%s'",
         q + 7);
  else
    return unknown_option(q, "redis-cluster",
                          "it accepts only ?pubsub=auto|sharded|classic", ep,
                          err, errlen);
  return 0;
}

int dl_url_parse(const char *url, dl_endpoint *ep, char *err, size_t errlen) {
  memset(ep, 0, sizeof *ep);
  if (url == NULL || *url == '\0') FAIL("empty URL");
  const char *p;
  bool sentinel = false, cluster = false;
  int rc;
  if (strncmp(url, "redis-cluster://", 16) == 0) {
    p = url + 16;
    cluster = true;
  } else if (strncmp(url, "rediss-cluster://", 17) == 0) {
    p = url + 17;
    cluster = true;
    ep->tls = true;
  } else if (strncmp(url, "redis-sentinel://", 17) == 0) {
    p = url + 17;
    sentinel = true;
  } else if (strncmp(url, "rediss-sentinel://", 18) == 0) {
    p = url + 18;
    sentinel = true;
    ep->tls = true;
  } else if (strncmp(url, "redis://", 8) == 0) {
    p = url + 8;
  } else if (strncmp(url, "rediss://", 9) == 0) {
    p = url + 9;
    ep->tls = true;
  } else if (strncmp(url, "unix://", 7) == 0) {
    return parse_unix(url + 7, ep, err, errlen);
  } else {
    FAIL("URL must start with redis://, rediss://, unix://, "
         "redis-sentinel:// or redis-cluster://");
  }
  for (const char *s = p; *s; s++)
    if ((unsigned char)*s <= ' ') FAIL("URL contains a space or control byte");

  /* Userinfo ends at the last '@' before the path. */
  const char *slash = strchr(p, '/');
  const char *end_auth = slash ? slash : p + strlen(p);
  const char *at = NULL;
  for (const char *s = p; s < end_auth; s++)
    if (*s == '@') at = s;
  if (at) {
    const char *colon = memchr(p, ':', (size_t)(at - p));
    if (colon) {
      if (colon > p) {
        ep->username = pct_decode(p, (size_t)(colon - p));
        if (!ep->username) FAIL("bad %%-escape in the user name");
      }
      ep->password = pct_decode(colon + 1, (size_t)(at - colon - 1));
      if (!ep->password) FAIL("bad %%-escape in the password");
    } else if (at > p) {
      ep->username = pct_decode(p, (size_t)(at - p));
      if (!ep->username) FAIL("bad %%-escape in the user name");
    }
    p = at + 1;
  }

  if (sentinel) return parse_sentinel(p, end_auth, ep, err, errlen);
  if (cluster) {
    const char *q = strchr(p, '?');
    return parse_cluster(p, q && q < end_auth ? q : end_auth, ep, err,
                         errlen);
  }
  /* redis:// takes no options: name the one given, rather than read it
   * as part of the port or the database. */
  const char *q = strchr(p, '?');
  if (q)
    return unknown_option(q + 1, "redis://",
                          "it takes none; the database is /N", ep, err, errlen);
  rc = parse_hostport(p, end_auth, &ep->host, &ep->port, err, errlen);
  if (rc != 0) {
    dl_endpoint_clear(ep);
    return rc;
  }

  if (slash && slash[1] != '\0') {
    if (parse_int(slash + 1, strlen(slash + 1), 0, 1000000, &ep->db) != 0)
      FAIL("bad database number after '/'");
  }
  return 0;
}

char *dl_url_redact(const char *url) {
  if (url == NULL) return dl_strdup("");
  const char *scheme = strstr(url, "://");
  if (scheme == NULL) return dl_strdup(url);
  const char *p = scheme + 3;
  const char *slash = strchr(p, '/');
  const char *end_auth = slash ? slash : p + strlen(p);
  const char *at = NULL;
  for (const char *s = p; s < end_auth; s++)
    if (*s == '@') at = s;
  if (at == NULL) return dl_strdup(url);
  const char *colon = memchr(p, ':', (size_t)(at - p));
  if (colon == NULL) return dl_strdup(url);
  size_t n = strlen(url) + 4;
  char *out = malloc(n);
  if (out == NULL) return NULL;
  snprintf(out, n, "%.*s:***%s", (int)(colon - url), url, at);
  return out;
}

void dl_zk_url_clear(dl_zk_url *u) {
  if (u == NULL) return;
  free(u->connect);
  free(u->chroot);
  free(u->user);
  if (u->password) memset(u->password, 0, strlen(u->password));
  free(u->password);
  memset(u, 0, sizeof *u);
}

/* A duration in a URL parameter: digits then ms, s or m ("500ms", "10s"),
 * 1 ms to 1 hour: 0 and *ms, or -1. */
static int parse_url_ms(const char *s, size_t n, int *ms) {
  size_t d = 0;
  while (d < n && isdigit((unsigned char)s[d]))
    d++;
  int v, unit;
  if (d == 0 || d > 7 || parse_int(s, d, 0, 9999999, &v) != 0) return -1;
  if (n - d == 2 && memcmp(s + d, "ms", 2) == 0)
    unit = 1;
  else if (n - d == 1 && s[d] == 's')
    unit = 1000;
  else if (n - d == 1 && s[d] == 'm')
    unit = 60000;
  else
    return -1;
  if (v <= 0 || v > 3600000 / unit) return -1;
  *ms = v * unit;
  return 0;
}

#define ZFAIL(...)                                                             \
  do {                                                                         \
    snprintf(err, errlen, __VA_ARGS__);                                        \
    dl_zk_url_clear(u);                                                        \
    return DLOCK_EURL;                                                         \
  } while (0)

/* The zk:// URL's parameters: session_timeout=D, connect_timeout=D and
 * acl=creator|read|open, separated by '&'. */
static int parse_zk_query(const char *q, dl_zk_url *u, char *err,
                          size_t errlen) {
  while (*q) {
    const char *amp = strchr(q, '&');
    size_t n = amp ? (size_t)(amp - q) : strlen(q);
    const char *eq = memchr(q, '=', n);
    size_t kl = eq ? (size_t)(eq - q) : n;
    int *dst = NULL;
    if (kl == 3 && memcmp(q, "acl", 3) == 0) {
      const char *v = eq ? eq + 1 : "";
      size_t vl = eq ? n - kl - 1 : 0;
      if (vl == 7 && memcmp(v, "creator", 7) == 0)
        u->acl = DL_ZK_ACL_CREATOR;
      else if (vl == 4 && memcmp(v, "read", 4) == 0)
        u->acl = DL_ZK_ACL_READ;
      else if (vl == 4 && memcmp(v, "open", 4) == 0)
        u->acl = DL_ZK_ACL_OPEN;
      else
        ZFAIL("bad acl in the zk:// URL: creator, read or open");
      q = amp ? amp + 1 : q + n;
      if (amp && *q == '\0') ZFAIL("zk:// URL ends its options with '&'");
      continue;
    }
    if (kl == 15 && memcmp(q, "session_timeout", 15) == 0)
      dst = &u->session_timeout_ms;
    else if (kl == 15 && memcmp(q, "connect_timeout", 15) == 0)
      dst = &u->connect_timeout_ms;
    if (dst == NULL)
      ZFAIL("unknown zk:// URL option '%.*s' (it accepts session_timeout, "
            "connect_timeout and acl)",
            (int)kl, q);
    if (eq == NULL || parse_url_ms(eq + 1, n - kl - 1, dst) != 0)
      ZFAIL("bad %.*s in the zk:// URL: a duration such as 500ms, 10s or "
            "1m (at most 1 hour)",
            (int)kl, q);
    q = amp ? amp + 1 : q + n;
    if (amp && *q == '\0') ZFAIL("zk:// URL ends its options with '&'");
  }
  return 0;
}

/* Whether the servers of a zk:// URL's checked list p[0..end)
 * (HOST:PORT,...) are all different (dl_url_distinct): 0, or a code with
 * err set. */
static int zk_distinct(const char *p, const char *end, char *err,
                       size_t errlen) {
  int n = 1;
  for (const char *h = p; h < end; h++)
    n += *h == ',';
  char *names = malloc((size_t)(end - p) + 1);
  dl_server_name *sv = calloc((size_t)n, sizeof *sv);
  int rc = DLOCK_ENOMEM;
  if (names && sv) {
    memcpy(names, p, (size_t)(end - p));
    names[end - p] = '\0';
    n = 0;
    for (char *h = names; h;) {
      char *comma = strchr(h, ',');
      if (comma) *comma = '\0';
      char *colon = strrchr(h, ':');
      *colon = '\0';
      sv[n].port = atoi(colon + 1);
      /* The host as getaddrinfo takes it: [v6] without its brackets. */
      size_t hl = strlen(h);
      if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h[hl - 1] = '\0';
        h++;
      }
      sv[n++].host = h;
      h = comma ? comma + 1 : NULL;
    }
    rc = dl_url_distinct("zk://", sv, n, err, errlen);
  } else {
    snprintf(err, errlen, "out of memory");
  }
  free(names);
  free(sv);
  return rc;
}

/* zk://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT...][/CHROOT][?OPTIONS]: the
 * connect string is kept as written (zookeeper_init parses it again);
 * checked here so that a typo fails the open with a clear message instead
 * of a retry loop. */
int dl_url_parse_zk(const char *url, dl_zk_url *u, char *err, size_t errlen) {
  memset(u, 0, sizeof *u);
  if (url == NULL || strncmp(url, "zk://", 5) != 0)
    ZFAIL("URL must start with zk://");
  const char *p = url + 5;
  for (const char *s = p; *s; s++)
    if ((unsigned char)*s <= ' ')
      ZFAIL("zk:// URL contains a space or a "
            "control byte");
  const char *q = strchr(p, '?');
  const char *end = q ? q : p + strlen(p);
  const char *slash = memchr(p, '/', (size_t)(end - p));
  const char *hend = slash ? slash : end;
  /* The user and password: before the last '@' of the server list. */
  const char *at = NULL;
  for (const char *s = p; s < hend; s++)
    if (*s == '@') at = s;
  if (at) {
    const char *colon = memchr(p, ':', (size_t)(at - p));
    const char *uend = colon ? colon : at;
    if (uend == p)
      ZFAIL("zk:// URL has a password but no user (digest authentication "
            "is USER:PASSWORD@)");
    u->user = pct_decode(p, (size_t)(uend - p));
    if (u->user == NULL || strchr(u->user, ':'))
      ZFAIL("bad user name in the zk:// URL");
    if (colon) {
      u->password = pct_decode(colon + 1, (size_t)(at - colon - 1));
      if (u->password == NULL) ZFAIL("bad %%-escape in the password");
    }
    p = at + 1;
  }
  if (hend == p) ZFAIL("zk:// URL has no HOST:PORT");
  for (const char *h = p; h < hend;) {
    const char *comma = memchr(h, ',', (size_t)(hend - h));
    const char *e = comma ? comma : hend;
    const char *colon = NULL;
    for (const char *s = h; s < e; s++)
      if (*s == ':') colon = s;
    int port;
    if (colon == NULL || colon == h)
      ZFAIL("zk:// URL needs HOST:PORT for every server");
    if (parse_int(colon + 1, (size_t)(e - colon - 1), 1, 65535, &port) != 0)
      ZFAIL("bad port (1-65535) in the zk:// URL");
    h = comma ? comma + 1 : e;
    if (comma && h == hend) ZFAIL("zk:// URL ends its server list with ','");
  }
  int rc = zk_distinct(p, hend, err, errlen);
  if (rc != 0) {
    dl_zk_url_clear(u);
    return rc;
  }
  if (memchr(p, '@', (size_t)(end - p)))
    ZFAIL("zk:// URL has a '@' outside its USER:PASSWORD@");
  if (slash) {
    size_t n = (size_t)(end - slash);
    if (n == 1) ZFAIL("zk:// URL has an empty chroot ('/' alone)");
    if (slash[n - 1] == '/') ZFAIL("the zk:// chroot must not end with '/'");
    for (const char *s = slash; s + 1 < end; s++)
      if (s[0] == '/' && s[1] == '/')
        ZFAIL("the zk:// chroot has an empty component");
    if ((u->chroot = malloc(n + 1)) == NULL) ZFAIL("out of memory");
    memcpy(u->chroot, slash, n);
    u->chroot[n] = '\0';
  }
  if (q && parse_zk_query(q + 1, u, err, errlen) != 0) return DLOCK_EURL;
  size_t n = (size_t)(end - p);
  if ((u->connect = malloc(n + 1)) == NULL) {
    dl_zk_url_clear(u);
    snprintf(err, errlen, "out of memory");
    return DLOCK_ENOMEM;
  }
  memcpy(u->connect, p, n);
  u->connect[n] = '\0';
  return 0;
}

int dl_url_userinfo(const char *url, const char **rest, char **user,
                    char **password) {
  *user = *password = NULL;
  const char *p = strstr(url, "://");
  p = p ? p + 3 : url;
  *rest = p;
  size_t hl = strcspn(p, "/?#");
  const char *at = NULL;
  for (const char *s = p; s < p + hl; s++)
    if (*s == '@') at = s;
  if (at == NULL) return 0;
  const char *colon = memchr(p, ':', (size_t)(at - p));
  const char *uend = colon ? colon : at;
  if (uend > p && (*user = pct_decode(p, (size_t)(uend - p))) == NULL)
    return DLOCK_EURL;
  if (colon &&
      (*password = pct_decode(colon + 1, (size_t)(at - colon - 1))) == NULL) {
    free(*user);
    *user = NULL;
    return DLOCK_EURL;
  }
  *rest = at + 1;
  return 0;
}
