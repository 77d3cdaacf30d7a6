/* wait.c: waiting without polling, for the lock kinds built on a channel
 * (semaphores, latches): try, subscribe, try again, then sleep until a
 * message (or a re-check time the kind asks for) between tries. */
#include "../core/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *dl_derived(const char *prefix, const char *key) {
  const char *fmt = strchr(key, '{') ? "%s:%s" : "%s:{%s}";
  size_t n = strlen(prefix) + strlen(key) + 4;
  char *out = malloc(n);
  if (out) snprintf(out, n, fmt, prefix, key);
  return out;
}

int dl_wait_for(dlock_client *c, const char *channel, int mode,
                int64_t wait_ms, dl_try_fn fn, void *ctx) {
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
    int w = ops->sub_wait(c->backend, sub, until, start);
    if (w < 0) {
      rc = dl_seterr(c, w, "the client closed while waiting");
      break;
    }
  }
  ops->sub_unref(c->backend, sub);
  return rc;
}
