/* fence.c: fenced resources (dlock_fence_*): a value beside the highest
 * fencing token that wrote it, written by the backend only if the caller's
 * token is not below it, in one atomic step (core/backend.h's `fence`).
 * The blocking calls and their event-loop forms share one call's halves:
 * `prepare` (the checks and the request) and `finish` (the API's result). */
#include "lock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KIND "fenced resource" /* in errors and ENOTSUP ("fenc") */
#define KEY_MAX (DLOCK_KEY_PREFIX_MAX + DLOCK_NAME_MAX + 1)

/* One call: the request and the strings it points to. */
typedef struct fence_call {
  dl_fence_req f;
  dl_lock_ref ref; /* the held form's lock */
  char key[KEY_MAX], lkey[KEY_MAX], owner[DL_OWNER_MAX];
} fence_call;

/* Fills x for `op` on c's RESOURCE (with l: the held form, its token the
 * calling thread's hold's). Returns 0, or a negative code recorded. */
static int prepare(dlock_client *c, dlock_lock *l, dl_fence_op op,
                   const char *resource, const void *value, size_t len,
                   uint64_t token, bool async, fence_call *x) {
  if (c == NULL) return DLOCK_EINVAL;
  int rc = dl_check_open(c);
  if (rc != 0) return rc;
  const dl_backend_ops *o = c->backend->ops;
  if (async ? o->fence_async == NULL : o->fence == NULL)
    return dl_unsupported(c, KIND "s");
  if (!async && c->loop != NULL)
    return dl_seterr(c, DLOCK_EINVAL,
                     "a blocking call on an event-loop "
                     "client (use the _async form)");
  if ((rc = dl_check_name(c, resource)) != 0) return rc;
  if (op == DL_FENCE_SET && value == NULL && len > 0)
    return dl_seterr(c, DLOCK_EINVAL, "no value");
  snprintf(x->key, sizeof x->key, "%s%s", c->key_prefix, resource);
  x->f = (dl_fence_req){.op = op,
                        .key = x->key,
                        .name = x->key + c->prefix_len,
                        .value = value,
                        .len = len,
                        .token = token};
  if (l == NULL) {
    if (op == DL_FENCE_SET && token == 0)
      return dl_seterr(c, DLOCK_EINVAL, "no fencing token (0)");
    return 0;
  }
  if ((rc = dl_lock_owner(l, x->owner)) != 0) return rc;
  dl_hold_view v;
  if (!dl_holds_get(c, KEY(l), x->owner, &v))
    return dl_seterr(c, DLOCK_ENOTOWNER, "'%s' is not held by %s", NAME(l),
                     x->owner);
  if (v.lost)
    return dl_seterr(c, DLOCK_ELOST, "'%s': the hold was lost: not written",
                     NAME(l));
  if (v.token == 0)
    return dl_seterr(c, DLOCK_EINVAL,
                     "'%s': this hold has no fencing token (a reader's)",
                     NAME(l));
  /* The lock's strings copied: an event-loop handle may go first. */
  dl_lock_ref_of(l, x->owner, &x->ref);
  snprintf(x->lkey, sizeof x->lkey, "%s", KEY(l));
  x->ref.key = x->lkey;
  x->ref.name = x->lkey + c->prefix_len;
  x->ref.hint = NULL;
  x->f.token = v.token;
  x->f.hold = &x->ref;
  return 0;
}

/* The backend's result rc of x: the API's, the outputs of a get set (its
 * value handed over, or freed). */
static int finish(dlock_client *c, fence_call *x, int rc, void **value,
                  size_t *len, uint64_t *fence) {
  dl_fence_req *f = &x->f;
  if (f->op == DL_FENCE_SET && rc == 0)
    return dl_seterr(c, DLOCK_ESTALE,
                     "'%s': token %llu is below its fence %llu: not written",
                     f->name, (unsigned long long)f->token,
                     (unsigned long long)f->fence);
  if (f->op == DL_FENCE_SET) return rc > 0 ? 0 : rc;
  if (f->op == DL_FENCE_GET && rc == 1) {
    if (value)
      *value = f->got;
    else
      free(f->got);
    f->got = NULL;
    if (len) *len = f->got_len;
    if (fence) *fence = f->fence;
  }
  free(f->got);
  f->got = NULL;
  return rc;
}

static int call(dlock_client *c, dlock_lock *l, dl_fence_op op,
                const char *resource, const void *value, size_t len,
                uint64_t token, void **out, size_t *out_len, uint64_t *fence) {
  fence_call x;
  int rc = prepare(c, l, op, resource, value, len, token, false, &x);
  if (rc != 0) return rc;
  return finish(c, &x, c->backend->ops->fence(c->backend, &x.f), out, out_len,
                fence);
}

int dlock_fence_set(dlock_client *c, const char *resource, const void *value,
                    size_t len, uint64_t token) {
  return call(c, NULL, DL_FENCE_SET, resource, value, len, token, NULL, NULL,
              NULL);
}

int dlock_fence_set_held(dlock_lock *l, const char *resource, const void *value,
                         size_t len) {
  if (l == NULL) return DLOCK_EINVAL;
  return call(l->c, l, DL_FENCE_SET, resource, value, len, 0, NULL, NULL, NULL);
}

int dlock_fence_get(dlock_client *c, const char *resource, void **value,
                    size_t *len, uint64_t *fence) {
  if (value) *value = NULL;
  if (len) *len = 0;
  if (fence) *fence = 0;
  return call(c, NULL, DL_FENCE_GET, resource, NULL, 0, 0, value, len, fence);
}

int dlock_fence_del(dlock_client *c, const char *resource) {
  return call(c, NULL, DL_FENCE_DEL, resource, NULL, 0, 0, NULL, NULL, NULL);
}

void dlock_fence_value_free(void *value) {
  free(value);
}

/* ---- on the event loop ---- */
typedef struct fence_aop {
  dlock_op op; /* first */
  fence_call x;
  void *copy;   /* a set's value, copied */
  void **value; /* a get's outputs (the caller's) */
  size_t *len;
  uint64_t *fence;
} fence_aop;

static void async_done(void *ud, int rc) {
  fence_aop *a = ud;
  a->op.bop = NULL;
  rc = finish(a->op.c, &a->x, rc, a->value, a->len, a->fence);
  free(a->copy);
  /* The callback's token: a get's fence, a set's token (written or not). */
  dl_op_finish(&a->op, rc, a->x.f.op == DL_FENCE_DEL ? 0 : a->x.f.fence);
}

static int call_async(dlock_client *c, dlock_lock *l, dl_fence_op op,
                      const char *resource, const void *value, size_t len,
                      uint64_t token, void **out, size_t *out_len,
                      uint64_t *fence, dlock_done_cb cb, void *ud,
                      dlock_op **opp) {
  int rc;
  fence_aop *a = dl_op_new(c, sizeof *a, c && c->backend->ops->fence_async,
                           KIND "s", cb, ud, opp, &rc);
  if (a == NULL) return rc;
  rc = prepare(c, l, op, resource, value, len, token, true, &a->x);
  if (rc == 0 && len > 0 && (a->copy = malloc(len)) == NULL)
    rc = dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  if (rc == 0) {
    if (len > 0) memcpy(a->copy, value, len);
    a->x.f.value = a->copy;
    a->value = out;
    a->len = out_len;
    a->fence = fence;
    dl_backend *b = c->backend;
    rc = b->ops->fence_async(b, &a->x.f, async_done, a, &a->op.bop);
  }
  if (rc != 0) {
    free(a->copy);
    free(a);
    return rc;
  }
  if (opp) *opp = &a->op;
  return 0;
}

int dlock_fence_set_async(dlock_client *c, const char *resource,
                          const void *value, size_t len, uint64_t token,
                          dlock_done_cb cb, void *ud, dlock_op **op) {
  return call_async(c, NULL, DL_FENCE_SET, resource, value, len, token, NULL,
                    NULL, NULL, cb, ud, op);
}

int dlock_fence_set_held_async(dlock_lock *l, const char *resource,
                               const void *value, size_t len, dlock_done_cb cb,
                               void *ud, dlock_op **op) {
  if (op) *op = NULL;
  if (l == NULL) return DLOCK_EINVAL;
  return call_async(l->c, l, DL_FENCE_SET, resource, value, len, 0, NULL, NULL,
                    NULL, cb, ud, op);
}

int dlock_fence_get_async(dlock_client *c, const char *resource, void **value,
                          size_t *len, uint64_t *fence, dlock_done_cb cb,
                          void *ud, dlock_op **op) {
  if (value) *value = NULL;
  if (len) *len = 0;
  if (fence) *fence = 0;
  return call_async(c, NULL, DL_FENCE_GET, resource, NULL, 0, 0, value, len,
                    fence, cb, ud, op);
}

int dlock_fence_del_async(dlock_client *c, const char *resource,
                          dlock_done_cb cb, void *ud, dlock_op **op) {
  return call_async(c, NULL, DL_FENCE_DEL, resource, NULL, 0, 0, NULL, NULL,
                    NULL, cb, ud, op);
}
