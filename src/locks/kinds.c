/* kinds.c: what the lock kinds built on a channel (semaphores, latches)
 * share: name checks, integer replies, the semaphores' hint for a release
 * sent behind a PING, and waiting without polling: try, subscribe, try
 * again, then sleep until a message (or a re-check time the kind asks for)
 * between tries. */
#include "../core/internal.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dl_derived_into(char *out, size_t len, const char *prefix,
                     const char *key) {
  /* As snprintf(out, len, "%s:{%s}" or "%s:%s", ...), without its cost on
   * the lock's hot path. */
  bool tagged = strchr(key, '{') != NULL;
  const char *parts[] = {prefix, tagged ? ":" : ":{", key, tagged ? "" : "}"};
  size_t off = 0;
  if (len == 0) return;
  for (int i = 0; i < 4; i++) {
    size_t n = strlen(parts[i]);
    if (n > len - 1 - off) n = len - 1 - off;
    memcpy(out + off, parts[i], n);
    off += n;
  }
  out[off] = '\0';
}

char *dl_derived(const char *prefix, const char *key) {
  size_t n = strlen(prefix) + strlen(key) + 4;
  char *out = malloc(n);
  if (out) dl_derived_into(out, n, prefix, key);
  return out;
}

int dl_wake_hint_flags(dl_wake_hint *h) {
  return atomic_load(&h->waited) || atomic_load(&h->heard) ? DL_EVAL_WAKE_FIRST
                                                           : 0;
}

void dl_wake_hint_acquired(dl_wake_hint *h, bool waited) {
  atomic_store(&h->waited, waited);
}

void dl_wake_hint_released(dl_wake_hint *h, bool heard) {
  atomic_store(&h->heard, heard);
}

int dl_wait_for(dlock_client *c, const char *channel, int mode, int64_t wait_ms,
                dl_try_fn fn, void *ctx) {
  int64_t start = dl_now_ms();
  int64_t deadline = wait_ms < 0 ? INT64_MAX : start + wait_ms;
  int64_t recheck = -1;
  int rc = fn(ctx, &recheck);
  if (rc != 0 || wait_ms == 0) return rc;
  const dl_backend_ops *ops = c->backend->ops;
  dl_sub *sub = ops->sub_ref(c->backend, channel, mode, deadline);
  if (sub == NULL) return dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  for (;;) {
    rc = fn(ctx, &recheck);
    if (rc != 0) break;
    int64_t now = dl_now_ms();
    if (now >= deadline) break;
    int64_t until = deadline;
    if (recheck >= 0 && now + recheck < until) until = now + recheck;
    int w = ops->sub_wait(c->backend, sub, until, start, NULL);
    if (w < 0) {
      rc = dl_seterr(c, w, "the client closed while waiting");
      break;
    }
  }
  ops->sub_unref(c->backend, sub, true);
  return rc;
}

char *dl_derived_suffix(const char *key, const char *suffix) {
  const char *fmt = strchr(key, '{') ? "%s:%s" : "{%s}:%s";
  size_t n = strlen(key) + strlen(suffix) + 4;
  char *out = malloc(n);
  if (out) snprintf(out, n, fmt, key, suffix);
  return out;
}

int dl_check_name(dlock_client *c, const char *name) {
  if (name == NULL || *name == '\0')
    return dl_seterr(c, DLOCK_EINVAL, "the name is empty");
  if (strlen(name) > DLOCK_NAME_MAX)
    return dl_seterr(c, DLOCK_ENAMETOOLONG, "the name is over %d bytes",
                     DLOCK_NAME_MAX);
  return 0;
}

int dl_eval_int(dlock_client *c, int script, int nkeys, const char **keys,
                int nargs, const char **args, long long lo, long long hi,
                long long *v) {
  redisReply *r = NULL;
  int rc =
      c->backend->ops->eval(c->backend, script, nkeys, keys, nargs, args, &r);
  if (rc != 0) return rc;
  bool ok =
      r->type == REDIS_REPLY_INTEGER && r->integer >= lo && r->integer <= hi;
  if (ok) *v = r->integer;
  freeReplyObject(r);
  if (!ok) return dl_seterr(c, DLOCK_EPROTO, "unexpected reply");
  dl_clearerr(c);
  return 0;
}

int dl_get_int(dlock_client *c, const char *key, long long *v) {
  const char *argv[] = {"GET", key};
  redisReply *r = NULL;
  int rc = c->backend->ops->command(c->backend, 2, argv, &r);
  if (rc != 0) return rc;
  *v = 0;
  if (r->type == REDIS_REPLY_STRING) {
    char *end;
    *v = strtoll(r->str, &end, 10);
    if (*end != '\0' || *v < INT32_MIN || *v > INT32_MAX) rc = DLOCK_EPROTO;
  } else if (r->type != REDIS_REPLY_NIL) {
    rc = DLOCK_EPROTO;
  }
  freeReplyObject(r);
  if (rc) return dl_seterr(c, rc, "unexpected reply to GET");
  dl_clearerr(c);
  return 0;
}
