/* probe.c: the benchmark's view of the Redis backend (probe.h), over the
 * backend's own URL reader, resolver, scripts and key names. */
#include "probe.h"

#include "redlock/redlock.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dl_probe_redlock_servers(const char *url, char **out, int max) {
  if (strncmp(url, "redlock://", 10) != 0) return 0;
  int n = dl_redlock_urls(url, out, max < DL_REDLOCK_MAX ? max : DL_REDLOCK_MAX,
                          NULL);
  return n < 0 ? DLOCK_EURL : n;
}

int dl_probe_sentinel_master(const dl_endpoint *ep,
                             const char *sentinel_password, char *host,
                             size_t hostlen, int *port, char *err,
                             size_t errlen) {
  dl_target t;
  dl_conn_config cfg = {.ep = *ep, .connect_timeout_ms = 2000};
  cfg.sentinel_password = sentinel_password;
  int rc = dl_conn_target(&cfg, dl_now_ms() + 2000, &t, err, errlen);
  if (rc != 0) return rc;
  snprintf(host, hostlen, "%s", t.ep.host ? t.ep.host : "");
  *port = t.ep.port;
  return 0;
}

int dl_probe_key_slot(const char *key) {
  return dl_key_slot(key, strlen(key));
}

/* Appends command `cmd` (n bytes, freed) to *buf; false when out of
 * memory (then *buf is freed). */
static bool append(char **buf, size_t *len, char *cmd, int n) {
  char *grown = n > 0 ? realloc(*buf, *len + (size_t)n) : NULL;
  if (grown) {
    memcpy(grown + *len, cmd, (size_t)n);
    *len += (size_t)n;
    *buf = grown;
  } else {
    free(*buf);
    *buf = NULL;
  }
  if (n > 0) redisFreeCommand(cmd);
  return grown != NULL;
}

int dl_probe_lock_step(int layout, int step, const char *key, long long arg,
                       char **cmd, size_t *len, const char **body) {
  dl_scripts_init();
  int variant = layout == DL_PROBE_SHARDED ? DL_EVAL_SHARDED : 0;
  int id = step == DL_PROBE_ACQUIRE ? DL_SCRIPT_LOCK_ACQUIRE
           : step == DL_PROBE_FENCE ? DL_SCRIPT_LOCK_FENCE
                                    : DL_SCRIPT_LOCK_RELEASE;
  if (layout < DL_PROBE_HASH || layout > DL_PROBE_PLAIN || step < 0 ||
      step > DL_PROBE_RELEASE ||
      (step == DL_PROBE_FENCE && layout != DL_PROBE_PLAIN))
    return DLOCK_EINVAL;
  const dl_script *s = dl_script_of(id | variant);
  *body = s->body;
  *cmd = NULL;
  *len = 0;
  char tok[300], other[340], n[DL_INT_BUF];
  dl_derived_into(tok, sizeof tok, "redisson_lock_token", key);
  dl_fmt_ll(n, arg);
  char *c = NULL;
  int cl = -1;
  if (step == DL_PROBE_ACQUIRE && layout == DL_PROBE_PLAIN) {
    /* lease, owner, no holder info, no count (attempt.c's plain form) */
    cl = redisFormatCommand(&c, "EVALSHA %s 2 %s %s 10000 bench:ceil:1 %s 0",
                            s->sha, key, tok, "");
  } else if (step == DL_PROBE_ACQUIRE) {
    /* As a first attempt sends it: lease and owner only (lock_acquire.lua) */
    dl_derived_into(other, sizeof other, "dlock_handoff", key);
    cl = redisFormatCommand(&c, "EVALSHA %s 3 %s %s %s 10000 bench:ceil:1",
                            s->sha, key, tok, other);
  } else if (step == DL_PROBE_FENCE) {
    cl = redisFormatCommand(&c, "EVALSHA %s 1 %s %s 10000", s->sha, tok, n);
  } else {
    /* owner, count 1, the latch's life (lock_release.lua); the plain
     * layout names its channel, the hash layout makes it from the lock's */
    char latch[340];
    dl_derived_into(latch, sizeof latch, "redisson_unlock_latch", key);
    snprintf(latch + strlen(latch), sizeof latch - strlen(latch),
             ":0123456789abcdef:%s", n);
    if (layout == DL_PROBE_PLAIN) {
      dl_derived_into(other, sizeof other, "redisson_lock__channel", key);
      cl = redisFormatCommand(&c, "EVALSHA %s 3 %s %s %s bench:ceil:1 1 1",
                              s->sha, key, other, latch);
    } else {
      cl = redisFormatCommand(&c, "EVALSHA %s 2 %s %s bench:ceil:1 1 1", s->sha,
                              key, latch);
    }
  }
  if (cl < 0) return DLOCK_ENOMEM;
  return append(cmd, len, c, cl) ? 0 : DLOCK_ENOMEM;
}

int dl_probe_lock_cycle(const char *key, bool sharded, char **out, size_t *len,
                        const char **acquire_body, const char **release_body) {
  int layout = sharded ? DL_PROBE_SHARDED : DL_PROBE_HASH;
  char *a = NULL, *r = NULL;
  size_t la = 0, lr = 0;
  int rc = dl_probe_lock_step(layout, DL_PROBE_ACQUIRE, key, 0, &a, &la,
                              acquire_body);
  if (rc == 0)
    rc = dl_probe_lock_step(layout, DL_PROBE_RELEASE, key, 1, &r, &lr,
                            release_body);
  *out = NULL;
  *len = 0;
  char *both = rc == 0 ? malloc(la + lr) : NULL;
  if (both) {
    memcpy(both, a, la);
    memcpy(both + la, r, lr);
    *out = both;
    *len = la + lr;
  }
  free(a);
  free(r);
  return both ? 0 : DLOCK_ENOMEM;
}

int dl_probe_redlock_opts(const char *url, bool *fencing, bool *hash) {
  char *urls[DL_REDLOCK_MAX];
  dl_redlock_url_opts o;
  int n = dl_redlock_urls(url, urls, DL_REDLOCK_MAX, &o);
  if (n < 0) return DLOCK_EURL;
  for (int i = 0; i < n; i++)
    free(urls[i]);
  *fencing = o.fencing;
  *hash = o.hash;
  return 0;
}
