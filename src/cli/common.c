/* common.c: what every dlock command shares: messages, the global options
 * and the password, opening the client, exit codes, the URL as shown and
 * JSON strings. The commands (run.c, inspect.c, queue.c, bench/) and
 * main.c's dispatch call it; it calls none of them. */
#include "cli.h"
#include "core/core.h" /* dl_url_parse */
#include "duration.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_err(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("dlock: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static char *read_password_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return NULL;
  char buf[1024];
  char *line = fgets(buf, sizeof buf, f);
  fclose(f);
  if (line == NULL) return strdup("");
  buf[strcspn(buf, "\r\n")] = '\0';
  return strdup(buf);
}

/* The URL's own password, decoded (caller frees), or NULL if it has none
 * or does not parse (the client reports a bad URL). */
static char *url_password(const char *url) {
  dl_endpoint ep = {0};
  char err[128];
  char *pw = NULL;
  if (url && strncmp(url, "zk://", 5) == 0) {
    dl_zk_url u;
    if (dl_url_parse_zk(url, &u, err, sizeof err) == 0 && u.password) {
      pw = u.password;
      u.password = NULL;
    }
    dl_zk_url_clear(&u);
    return pw;
  }
  if (url &&
      (strncmp(url, "etcd://", 7) == 0 || strncmp(url, "etcds://", 8) == 0)) {
    const char *rest;
    char *user;
    if (dl_url_userinfo(url, &rest, &user, &pw) != 0) return NULL;
    free(user);
    return pw;
  }
  if (dl_url_parse(url ? url : "redis://127.0.0.1:6379", &ep, err,
                   sizeof err) == 0 &&
      ep.password) {
    pw = ep.password;
    ep.password = NULL;
  }
  dl_endpoint_clear(&ep);
  return pw;
}

int cli_password_resolve(cli_global *g) {
  free(g->password);
  const char *env = getenv("DLOCK_PASSWORD");
  if (g->password_file)
    g->password = strdup(g->password_file);
  else if ((g->password = url_password(g->url)) != NULL)
    return 0;
  else if (env && *env)
    g->password = strdup(env);
  else
    return 0;
  return g->password ? 0 : -1;
}

int cli_global_opt(cli_global *g, int opt, const char *arg) {
  switch (opt) {
  case 'u': g->url = arg; return cli_password_resolve(g) == 0 ? 1 : -1;
  case 'q': g->verbose = -1; return 1;
  case 'v': g->verbose = 1; return 1;
  case 1001:
    free(g->password_file);
    g->password_file = read_password_file(arg);
    if (g->password_file == NULL) {
      cli_err("cannot read the password file %s: %s", arg, strerror(errno));
      return -1;
    }
    return cli_password_resolve(g) == 0 ? 1 : -1;
  case 1002: g->cacert = arg; return 1;
  case 1003: g->cert = arg; return 1;
  case 1004: g->key = arg; return 1;
  case 1005: g->insecure = true; return 1;
  case 1006: {
    if (strcmp(arg, "auto") == 0) {
      g->replicas = DLOCK_REPLICAS_AUTO;
      return 1;
    }
    char *end;
    long n = strtol(arg, &end, 10);
    if (*arg == '\0' || *end != '\0' || n < 0 || n > 1000) {
      cli_err("--replicas: a number of replicas 0..1000 or auto, not '%s'",
              arg);
      return -1;
    }
    g->replicas = (int)n;
    return 1;
  }
  case 1007: {
    int64_t ms;
    if (dl_parse_duration(arg, &ms) != 0 || ms <= 0 || ms > 3600000) {
      cli_err("--replicas-timeout: a duration (250ms, 2s), not '%s'", arg);
      return -1;
    }
    g->replicas_timeout_ms = (int)ms;
    return 1;
  }
  }
  return 0;
}

int cli_exit_for(int err) {
  switch (err) {
  case DLOCK_EURL:
  case DLOCK_EINVAL:
  case DLOCK_ENAMETOOLONG: return EXIT_USAGE;
  case DLOCK_EBUSY:
  case DLOCK_ELATE: /* granted too late to trust, given back: try again */
    return EXIT_CONFLICT;
  case DLOCK_ELOST: return EXIT_LOST;
  case DLOCK_ENOTACKED: /* given back: as "not acquired", try again */
    return EXIT_CONFLICT;
  case DLOCK_ENOPERM: return EXIT_NOPERM;
  case DLOCK_EWRONGTYPE: /* NAME holds something else: nothing changed */
  case DLOCK_ERANGE:     /* a count the API cannot carry: nothing changed */
    return EXIT_DATAERR;
  default: return EXIT_UNAVAILABLE;
  }
}

void cli_on_conn_state(dlock_client *c, dlock_conn_state st, void *ud) {
  (void)c;
  const char *name = ud;
  if (st == DLOCK_CONN_SUSPENDED)
    cli_err("warning: the connection to the server is lost; %s is kept "
            "only if it is back before the session times out",
            name);
  else if (st == DLOCK_CONN_RECONNECTED)
    cli_err("the connection is back, with the same session: %s is kept", name);
  else if (st == DLOCK_CONN_LOST)
    cli_err("warning: the session expired (a held %s is lost); opening a "
            "new one",
            name);
  else if (st == DLOCK_CONN_NEW_SESSION)
    cli_err("connected again, with a new session");
}

void cli_options(const cli_global *g, int64_t lease_ms,
                 dlock_client_options *o) {
  dlock_client_options_init(o);
  o->url = g->url;
  o->password = g->password;
  o->client_name = "dlock-cli";
  o->tls_ca_file = g->cacert;
  o->tls_cert_file = g->cert;
  o->tls_key_file = g->key;
  o->tls_verify = !g->insecure;
  o->min_replicas_acked = g->replicas;
  o->replicas_timeout_ms = g->replicas_timeout_ms;
  if (lease_ms > 0) o->watchdog_timeout_ms = lease_ms;
}

dlock_client *cli_open(const cli_global *g, int64_t lease_ms, int *exit_code) {
  dlock_client_options o;
  cli_options(g, lease_ms, &o);
  dlock_client *c = NULL;
  int rc = dlock_client_open(&o, &c);
  if (rc != 0) {
    cli_err("%s", dlock_client_open_errmsg());
    *exit_code = cli_exit_for(rc);
    return NULL;
  }
  return c;
}

char *cli_url_public(const char *url) {
  /* scheme://user:pass@host -> scheme://user@host */
  const char *p = strstr(url, "://");
  char *out = strdup(url);
  if (p == NULL || out == NULL) return out;
  p += 3;
  const char *slash = strchr(p, '/');
  const char *end = slash ? slash : p + strlen(p);
  const char *at = NULL;
  for (const char *s = p; s < end; s++)
    if (*s == '@') at = s;
  if (at == NULL) return out;
  const char *colon = memchr(p, ':', (size_t)(at - p));
  if (colon == NULL) return out;
  size_t head = (size_t)(colon - url);
  if (colon == p) head = (size_t)(p - url); /* ":pass@" -> no userinfo */
  snprintf(out + head, strlen(url) + 1 - head, "%s", colon == p ? at + 1 : at);
  return out;
}

bool cli_parse_holder(const char *info, char *buf, size_t len, cli_holder *h) {
  memset(h, 0, sizeof *h);
  if (strncmp(info, "v1\t", 3) != 0) return false;
  snprintf(buf, len, "%s", info + 3);
  char *host = buf, *pid = strchr(host, '\t');
  if (pid == NULL) return false;
  *pid++ = '\0';
  char *cmd = strchr(pid, '\t');
  if (cmd == NULL) return false;
  *cmd++ = '\0';
  h->host = host;
  h->pid = pid;
  h->cmd = cmd;
  return true;
}

const char *cli_holder_text(const dlock_lock_state *st, char *buf, size_t len) {
  char tmp[DLOCK_INFO_MAX + 1];
  cli_holder h;
  if (cli_parse_holder(st->info, tmp, sizeof tmp, &h)) {
    snprintf(buf, len, "%s pid %s (%s)", h.host, h.pid, h.cmd);
  } else if (st->info[0]) {
    snprintf(buf, len, "%s", st->info);
    for (char *p = buf; *p; p++)
      if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = ' ';
  } else {
    snprintf(buf, len, "%s", st->owner);
  }
  return buf;
}

void cli_json_str(void *fp, const char *s) {
  FILE *f = fp;
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p == '\n')
      fputs("\\n", f);
    else if (*p == '\t')
      fputs("\\t", f);
    else if (*p < 0x20 || *p == 0x7f)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}
