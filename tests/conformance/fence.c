/* fence.c: fenced resources (dlock_fence_*) on every backend that has them
 * (DLOCK_ENOTSUP naming the kind elsewhere): a stale token is refused and
 * changes nothing, an equal or higher one writes, a name that holds
 * something else is refused and left as it is, and the held form refuses
 * a holder whose lock was force-released. */
#include "conformance.h"

#include <stdio.h>
#include <string.h>

/* The value and fence at `res` are `want` (NULL: none there) and `fence`. */
static bool holds_value(dlock_client *c, const char *res, const char *want,
                        uint64_t fence) {
  void *v = NULL;
  size_t len = 0;
  uint64_t f = 0;
  int rc = dlock_fence_get(c, res, &v, &len, &f);
  bool ok = want
                ? rc == 1 && len == strlen(want) && memcmp(v, want, len) == 0 &&
                      ((char *)v)[len] == '\0' && f == fence
                : rc == 0 && v == NULL && len == 0 && f == 0;
  if (!ok)
    fprintf(stderr,
            "    get '%s': %s, '%.*s' (%zu bytes), fence %llu; "
            "expected '%s', fence %llu\n",
            res,
            rc < 0 ? dlock_err_name(rc)
            : rc   ? "found"
                   : "none",
            v ? (int)len : 0, v ? (char *)v : "", len, (unsigned long long)f,
            want ? want : "(none)", (unsigned long long)fence);
  dlock_fence_value_free(v);
  return ok;
}

/* Names for a lock and a resource that a cluster keeps in one slot. */
static void names(const char *tag, char *lock, char *res, size_t len) {
  char base[64];
  cf_name(base, sizeof base, tag);
  bool redis = strcmp(cf_backend, "redis") == 0;
  snprintf(lock, len, redis ? "{%s}.lock" : "%s-lock", base);
  snprintf(res, len, redis ? "{%s}.res" : "%s-res", base);
}

static void t_fence(void) {
  CF_NEEDS_SERVER();
  dlock_client *c = cf_client(0);
  CHECK(c != NULL);
  char lname[96], res[96];
  names("fence", lname, res, sizeof lname);
  int rc = dlock_fence_set(c, res, "v", 1, 1);
  if (!cf_has(DL_FEAT_FENCE)) {
    CHECK(cf_notsup(rc, dlock_client_errmsg(c), DL_FEAT_FENCE));
    CHECK(cf_notsup(dlock_fence_get(c, res, NULL, NULL, NULL),
                    dlock_client_errmsg(c), DL_FEAT_FENCE));
    dlock_client_close(c);
    return;
  }
  CHECK_RC(dlock_fence_del(c, res), 1);
  CHECK(holds_value(c, res, NULL, 0));
  CHECK_RC(dlock_fence_del(c, res), 0);
  CHECK_RC(dlock_fence_set(c, res, "x", 1, 0), DLOCK_EINVAL);
  CHECK_RC(dlock_fence_set(c, res, "five", 4, 5), 0);
  CHECK(holds_value(c, res, "five", 5));
  /* A stale token: refused, nothing changed. */
  CHECK_RC(dlock_fence_set(c, res, "three", 5, 3), DLOCK_ESTALE);
  CHECK(strstr(dlock_client_errmsg(c), "below") != NULL);
  CHECK(holds_value(c, res, "five", 5));
  /* The same token writes again (one holder's writes); a higher one too. */
  CHECK_RC(dlock_fence_set(c, res, "five again", 10, 5), 0);
  CHECK(holds_value(c, res, "five again", 5));
  CHECK_RC(dlock_fence_set(c, res, "", 0, 7), 0);
  CHECK(holds_value(c, res, "", 7));
  /* Bytes, a NUL among them, and tokens past a double's 2^53. */
  CHECK_RC(dlock_fence_set(c, res, "a\0b", 3, 9007199254740993ULL), 0);
  CHECK_RC(dlock_fence_set(c, res, "z", 1, 9007199254740992ULL), DLOCK_ESTALE);
  void *v = NULL;
  size_t len = 0;
  uint64_t f = 0;
  CHECK_RC(dlock_fence_get(c, res, &v, &len, &f), 1);
  CHECK(len == 3 && memcmp(v, "a\0b", 3) == 0);
  CHECK(f == 9007199254740993ULL);
  dlock_fence_value_free(v);
  CHECK_RC(dlock_fence_set(c, res, "max", 3, UINT64_MAX), 0);
  CHECK(holds_value(c, res, "max", UINT64_MAX));
  CHECK_RC(dlock_fence_del(c, res), 1);
  CHECK(holds_value(c, res, NULL, 0));

  /* A lock's name is not a fenced resource: refused, the lock untouched. */
  dlock_lock *l;
  CHECK_RC(dlock_lock_new(c, lname, NULL, &l), 0);
  CHECK_RC(dlock_lock_try_acquire(l, 0, 10000, NULL), 0);
  CHECK_RC(dlock_fence_set(c, lname, "x", 1, 1u << 30), DLOCK_EWRONGTYPE);
  CHECK_RC(dlock_fence_get(c, lname, NULL, NULL, NULL), DLOCK_EWRONGTYPE);
  CHECK_RC(dlock_fence_del(c, lname), DLOCK_EWRONGTYPE);
  CHECK_EQ(dlock_lock_is_held(l), 1);
  CHECK_EQ(dlock_lock_release(l), 1);
  dlock_lock_free(l);
  dlock_client_close(c);
}

/* The held form: a write only while the lock is still the caller's. */
static void t_fence_held(void) {
  CF_NEEDS_SERVER();
  if (!cf_has(DL_FEAT_FENCE)) return;
  dlock_client *a = cf_client(0), *b = cf_client(0);
  CHECK(a && b);
  char lname[96], res[96];
  names("held", lname, res, sizeof lname);
  dlock_lock *la, *lb;
  CHECK_RC(dlock_lock_new(a, lname, NULL, &la), 0);
  CHECK_RC(dlock_lock_new(b, lname, NULL, &lb), 0);
  /* Not held by this thread: refused before any request. */
  CHECK_RC(dlock_fence_set_held(la, res, "x", 1), DLOCK_ENOTOWNER);
  uint64_t ta = 0, tb = 0;
  CHECK_RC(dlock_lock_try_acquire(la, 0, 10000, &ta), 0);
  CHECK_RC(dlock_fence_set_held(la, res, "a1", 2), 0);
  CHECK(holds_value(b, res, "a1", ta));
  /* Taken away (force-released by another client): refused, whatever
   * the token, nothing changed. */
  CHECK_EQ(dlock_lock_force_release(lb), 1);
  int rc = dlock_fence_set_held(la, res, "a2", 2);
  if (rc != DLOCK_ELOST)
    fprintf(stderr, "    %s: %s\n", dlock_err_name(rc), dlock_client_errmsg(a));
  CHECK_RC(rc, DLOCK_ELOST);
  CHECK(holds_value(b, res, "a1", ta));
  /* The next holder writes with its (higher) token; the first holder's
   * token is stale now, held form or not. */
  CHECK_RC(dlock_lock_try_acquire(lb, 5000, 10000, &tb), 0);
  CHECK(tb > ta);
  CHECK_RC(dlock_fence_set_held(lb, res, "b1", 2), 0);
  CHECK(holds_value(a, res, "b1", tb));
  CHECK_RC(dlock_fence_set(a, res, "a3", 2, ta), DLOCK_ESTALE);
  CHECK(holds_value(a, res, "b1", tb));
  CHECK_EQ(dlock_lock_release(lb), 1);
  CHECK_RC(dlock_fence_set_held(lb, res, "b2", 2), DLOCK_ENOTOWNER);
  CHECK_RC(dlock_fence_del(a, res), 1);
  /* la's hold was taken away: its release says so (on etcd it raced the
   * watchdog's renewal dropping the same hold, a use-after-free under
   * ASan, until the release took the hold off the list first). */
  CHECK_RC(dlock_lock_release(la), DLOCK_ELOST);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_close(a);
  dlock_client_close(b);
}

/* Runs the loop until g's callback ran: its rc (-1000 if it never did). */
static int await_cb(cf_fix *f, cf_got *g) {
  return cf_run_until(f->lp, &g->calls, 3000) ? g->rc : -1000;
}

/* The event-loop forms, where the backend has an event-loop client. */
static void t_fence_async(void) {
  CF_NEEDS_SERVER();
  if (!cf_has(DL_FEAT_LOOP)) return;
  cf_fix f;
  CHECK_RC(cf_fix_open(&f, 0), 0);
  char lname[96], res[96];
  names("async", lname, res, sizeof lname);
  cf_got g = {0};
  int rc = dlock_fence_set_async(f.c, res, "five", 4, 5, cf_done, &g, NULL);
  if (!cf_has(DL_FEAT_FENCE)) {
    CHECK(cf_notsup(rc, dlock_client_errmsg(f.c), DL_FEAT_FENCE));
    cf_fix_close(&f);
    return;
  }
  CHECK_RC(rc, 0);
  CHECK_RC(await_cb(&f, &g), 0);
  CHECK(g.token == 5);
  g = (cf_got){0};
  CHECK_RC(dlock_fence_set_async(f.c, res, "three", 5, 3, cf_done, &g, NULL),
           0);
  CHECK_RC(await_cb(&f, &g), DLOCK_ESTALE);
  CHECK(g.token == 5);
  /* The blocking calls refuse an event-loop client. */
  CHECK_RC(dlock_fence_set(f.c, res, "x", 1, 9), DLOCK_EINVAL);
  void *v = NULL;
  size_t len = 0;
  uint64_t fence = 0;
  g = (cf_got){0};
  CHECK_RC(dlock_fence_get_async(f.c, res, &v, &len, &fence, cf_done, &g, NULL),
           0);
  CHECK_RC(await_cb(&f, &g), 1);
  CHECK(len == 4 && memcmp(v, "five", 4) == 0 && fence == 5);
  dlock_fence_value_free(v);
  /* The held form: written while held, refused once force-released. */
  dlock_lock *l, *other;
  CHECK_RC(dlock_lock_new(f.c, lname, "me", &l), 0);
  CHECK_RC(dlock_lock_new(f.c, lname, "other", &other), 0);
  g = (cf_got){0};
  CHECK_RC(dlock_lock_acquire_async(l, 0, 10000, cf_done, &g, NULL), 0);
  CHECK_RC(await_cb(&f, &g), 0);
  uint64_t token = g.token;
  g = (cf_got){0};
  CHECK_RC(dlock_fence_del_async(f.c, res, cf_done, &g, NULL), 0);
  CHECK_RC(await_cb(&f, &g), 1);
  g = (cf_got){0};
  CHECK_RC(dlock_fence_set_held_async(l, res, "held", 4, cf_done, &g, NULL), 0);
  CHECK_RC(await_cb(&f, &g), 0);
  CHECK(g.token == token);
  g = (cf_got){0};
  CHECK_RC(dlock_lock_force_release_async(other, cf_done, &g, NULL), 0);
  CHECK_RC(await_cb(&f, &g), 1);
  g = (cf_got){0};
  rc = dlock_fence_set_held_async(l, res, "late", 4, cf_done, &g, NULL);
  if (rc == 0) rc = await_cb(&f, &g);
  CHECK_RC(rc, DLOCK_ELOST);
  g = (cf_got){0};
  CHECK_RC(
      dlock_fence_get_async(f.c, res, NULL, NULL, &fence, cf_done, &g, NULL),
      0);
  CHECK_RC(await_cb(&f, &g), 1);
  CHECK(fence == token);
  g = (cf_got){0};
  CHECK_RC(dlock_fence_del_async(f.c, res, cf_done, &g, NULL), 0);
  CHECK_RC(await_cb(&f, &g), 1);
  g = (cf_got){0};
  CHECK_RC(dlock_fence_del_async(f.c, res, cf_done, &g, NULL), 0);
  CHECK_RC(await_cb(&f, &g), 0);
  dlock_lock_free(l);
  dlock_lock_free(other);
  cf_fix_close(&f);
}

/* min_replicas_acked covers a fence write as it covers an acquire: WAITed
 * for (Sentinel's replica acknowledges it); with no replica the write is
 * made but reported DLOCK_ENOTACKED; the same on the event loop. */
static void t_fence_acked(void) {
  CF_NEEDS_SERVER();
  if (!cf_has(DL_FEAT_FENCE) || !cf_has(DL_FEAT_REPLICA_ACK)) return;
  bool replica = strcmp(cf_dep.kind, "sentinel") == 0;
  dlock_client_options o;
  cf_options(&o, 0);
  o.min_replicas_acked = 1;
  o.replicas_timeout_ms = replica ? 3000 : 200;
  dlock_client *c = NULL;
  CHECK_RC(dlock_client_open(&o, &c), 0);
  char lname[96], res[96];
  names("acked", lname, res, sizeof lname);
  int rc = dlock_fence_set(c, res, "v", 1, 3);
  if (rc != (replica ? 0 : DLOCK_ENOTACKED))
    fprintf(stderr, "    %s: %s\n", dlock_err_name(rc), dlock_client_errmsg(c));
  CHECK_RC(rc, replica ? 0 : DLOCK_ENOTACKED);
  CHECK(holds_value(c, res, "v", 3)); /* written either way */
  dlock_client_close(c);
  dlock_loop *lp = NULL;
  CHECK_RC(dlock_loop_new(NULL, &lp), 0);
  CHECK_RC(dlock_client_open_async(&o, lp, &c), 0);
  cf_got g = {0};
  CHECK_RC(dlock_fence_set_async(c, res, "w", 1, 4, cf_done, &g, NULL), 0);
  CHECK(cf_run_until(lp, &g.calls, 5000));
  CHECK_RC(g.rc, replica ? 0 : DLOCK_ENOTACKED);
  g = (cf_got){0};
  CHECK_RC(dlock_fence_del_async(c, res, cf_done, &g, NULL), 0);
  CHECK(cf_run_until(lp, &g.calls, 5000));
  CHECK_RC(g.rc, 1);
  dlock_client_close(c);
  dlock_loop_free(lp);
}

const th_test cf_fence_tests[] = {T_BARE(t_fence_acked), T_BARE(t_fence),
                                  T_BARE(t_fence_held), T_BARE(t_fence_async)};
const size_t cf_fence_ntests = sizeof cf_fence_tests / sizeof cf_fence_tests[0];
