/* fence.c: fenced resources (dlock_fence_*): a value beside the highest
 * fencing token that wrote it, written by the backend only if the caller's
 * token is not below it, in one atomic step (core/backend.h's `fence`). */
#include "lock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KIND "fenced resource" /* in errors and ENOTSUP ("fenc") */

/* The checks every call makes; key gets prefix + resource. */
static int checks(dlock_client *c, const char *resource, char *key,
                  size_t size) {
  if (c == NULL) return DLOCK_EINVAL;
  int rc = dl_check_open(c);
  if (rc != 0) return rc;
  if (c->backend->ops->fence == NULL) {
    if (c->loop == NULL) return dl_unsupported(c, KIND "s");
    return dl_seterr(c, DLOCK_ENOTSUP,
                     "the %s backend has no " KIND "s on an event-loop "
                     "client (no event-loop forms yet)",
                     c->backend->ops->name);
  }
  if (c->loop != NULL)
    return dl_seterr(c, DLOCK_EINVAL,
                     "the " KIND " calls block: not on "
                     "an event-loop client");
  if ((rc = dl_check_name(c, resource)) != 0) return rc;
  snprintf(key, size, "%s%s", c->key_prefix, resource);
  return 0;
}

/* The backend's result of a set: the API's. */
static int set_result(dlock_client *c, const dl_fence_req *f, int rc) {
  if (rc == 0)
    return dl_seterr(c, DLOCK_ESTALE,
                     "'%s': token %llu is below its fence %llu: "
                     "not written",
                     f->name, (unsigned long long)f->token,
                     (unsigned long long)f->fence);
  return rc > 0 ? 0 : rc;
}

int dlock_fence_set(dlock_client *c, const char *resource, const void *value,
                    size_t len, uint64_t token) {
  char key[DLOCK_KEY_PREFIX_MAX + DLOCK_NAME_MAX + 1];
  int rc = checks(c, resource, key, sizeof key);
  if (rc != 0) return rc;
  if (value == NULL && len > 0) return dl_seterr(c, DLOCK_EINVAL, "no value");
  if (token == 0) return dl_seterr(c, DLOCK_EINVAL, "no fencing token (0)");
  dl_fence_req f = {.op = DL_FENCE_SET,
                    .key = key,
                    .name = resource,
                    .value = value,
                    .len = len,
                    .token = token};
  return set_result(c, &f, c->backend->ops->fence(c->backend, &f));
}

int dlock_fence_set_held(dlock_lock *l, const char *resource, const void *value,
                         size_t len) {
  if (l == NULL) return DLOCK_EINVAL;
  dlock_client *c = l->c;
  char key[DLOCK_KEY_PREFIX_MAX + DLOCK_NAME_MAX + 1], owner[DL_OWNER_MAX];
  int rc = checks(c, resource, key, sizeof key);
  if (rc != 0) return rc;
  if (value == NULL && len > 0) return dl_seterr(c, DLOCK_EINVAL, "no value");
  if ((rc = dl_lock_owner(l, owner)) != 0) return rc;
  pthread_mutex_lock(&c->holds_mu);
  dl_hold *h = dl_hold_find(c, l->key, owner);
  bool lost = h && h->lost;
  uint64_t token = h ? h->token : 0;
  pthread_mutex_unlock(&c->holds_mu);
  if (h == NULL)
    return dl_seterr(c, DLOCK_ENOTOWNER, "'%s' is not held by %s", NAME(l),
                     owner);
  if (lost)
    return dl_seterr(c, DLOCK_ELOST, "'%s': the hold was lost: not written",
                     NAME(l));
  if (token == 0)
    return dl_seterr(c, DLOCK_EINVAL,
                     "'%s': this hold has no fencing token "
                     "(a reader's)",
                     NAME(l));
  dl_lock_ref ref;
  dl_lock_ref_of(l, owner, &ref);
  dl_fence_req f = {.op = DL_FENCE_SET,
                    .key = key,
                    .name = resource,
                    .value = value,
                    .len = len,
                    .token = token,
                    .hold = &ref};
  return set_result(c, &f, c->backend->ops->fence(c->backend, &f));
}

int dlock_fence_get(dlock_client *c, const char *resource, void **value,
                    size_t *len, uint64_t *fence) {
  if (value) *value = NULL;
  if (len) *len = 0;
  if (fence) *fence = 0;
  char key[DLOCK_KEY_PREFIX_MAX + DLOCK_NAME_MAX + 1];
  int rc = checks(c, resource, key, sizeof key);
  if (rc != 0) return rc;
  dl_fence_req f = {.op = DL_FENCE_GET, .key = key, .name = resource};
  rc = c->backend->ops->fence(c->backend, &f);
  if (rc != 1) {
    free(f.got);
    return rc;
  }
  if (value)
    *value = f.got;
  else
    free(f.got);
  if (len) *len = f.got_len;
  if (fence) *fence = f.fence;
  return 1;
}

int dlock_fence_del(dlock_client *c, const char *resource) {
  char key[DLOCK_KEY_PREFIX_MAX + DLOCK_NAME_MAX + 1];
  int rc = checks(c, resource, key, sizeof key);
  if (rc != 0) return rc;
  dl_fence_req f = {.op = DL_FENCE_DEL, .key = key, .name = resource};
  return c->backend->ops->fence(c->backend, &f);
}

void dlock_fence_value_free(void *value) {
  free(value);
}
