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

int dl_probe_lock_cycle(const char *key, bool sharded, char **out, size_t *len,
                        const char **acquire_body, const char **release_body) {
  dl_scripts_init();
  int variant = sharded ? DL_EVAL_SHARDED : 0;
  const dl_script *acq = dl_script_of(DL_SCRIPT_LOCK_ACQUIRE | variant);
  const dl_script *rel = dl_script_of(DL_SCRIPT_LOCK_RELEASE | variant);
  *acquire_body = acq->body;
  *release_body = rel->body;
  char tok[300], hand[300], latch[340];
  dl_derived_into(tok, sizeof tok, "redisson_lock_token", key);
  dl_derived_into(hand, sizeof hand, "dlock_handoff", key);
  dl_derived_into(latch, sizeof latch, "redisson_unlock_latch", key);
  strcat(latch, ":0123456789abcdef:1");
  *out = NULL;
  *len = 0;
  /* As a first attempt sends them: lease and owner only (lock_acquire.lua);
   * the release: owner, count 1, the latch's life (lock_release.lua). */
  char *a = NULL, *r = NULL;
  int la = redisFormatCommand(&a, "EVALSHA %s 3 %s %s %s 10000 bench:ceil:1",
                              acq->sha, key, tok, hand);
  int lr = redisFormatCommand(&r, "EVALSHA %s 2 %s %s bench:ceil:1 1 1",
                              rel->sha, key, latch);
  if (!append(out, len, a, la)) {
    if (lr > 0) redisFreeCommand(r);
    return DLOCK_ENOMEM;
  }
  return append(out, len, r, lr) ? 0 : DLOCK_ENOMEM;
}
