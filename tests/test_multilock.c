/* test_multilock.c: the multi-lock against a real server: all or nothing,
 * waits, crossing orders that must not deadlock, and misuse. */
#include "harness.h"

#include <pthread.h>
#include <string.h>

static bool held_by_anyone(const char *name) {
  return th_cmd_int(&th_srv, "EXISTS %s", name) == 1;
}

static void t_all_taken_all_released(void) {
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_lock *l[3];
  const char *names[] = {"m:b", "m:a", "m:c"};
  for (int i = 0; i < 3; i++)
    CHECK_RC(dlock_lock_new(c, names[i], NULL, &l[i]), 0);
  dlock_multilock *m;
  CHECK_RC(dlock_multilock_new(l, 3, &m), 0);
  uint64_t tok[3] = {0};
  CHECK_RC(dlock_multilock_try_acquire(m, 0, 0, tok), 0);
  for (int i = 0; i < 3; i++) {
    CHECK_EQ(dlock_lock_is_held(l[i]), 1);
    CHECK(tok[i] > 0);
    uint64_t cur = 0;
    CHECK_RC(dlock_lock_current_token(l[i], &cur), 0);
    CHECK_EQ(tok[i], cur); /* tokens in the caller's order */
  }
  CHECK_RC(dlock_multilock_release(m), 0);
  for (int i = 0; i < 3; i++)
    CHECK(!held_by_anyone(names[i]));
  dlock_multilock_free(m);
  for (int i = 0; i < 3; i++)
    dlock_lock_free(l[i]);
  dlock_client_close(c);
}

static void t_all_or_nothing(void) {
  dlock_client *c = th_client(&th_srv, 0), *other = th_client(&th_srv, 0);
  CHECK(c && other);
  dlock_lock *l[3], *ob;
  const char *names[] = {"n:a", "n:b", "n:c"};
  for (int i = 0; i < 3; i++)
    CHECK_RC(dlock_lock_new(c, names[i], NULL, &l[i]), 0);
  CHECK_RC(dlock_lock_new(other, "n:b", NULL, &ob), 0);
  CHECK_RC(dlock_lock_try_acquire(ob, 0, 400, NULL), 0);
  dlock_multilock *m;
  CHECK_RC(dlock_multilock_new(l, 3, &m), 0);
  /* n:b is taken: nothing is kept (n:a, taken first, is given back). */
  CHECK_RC(dlock_multilock_try_acquire(m, 0, 0, NULL), DLOCK_EBUSY);
  CHECK(!held_by_anyone("n:a"));
  CHECK(!held_by_anyone("n:c"));
  CHECK_EQ(dlock_lock_hold_count(ob), 1);
  /* With a wait: n:b's lease runs out, then all three are taken. */
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_multilock_try_acquire(m, 3000, 0, NULL), 0);
  int64_t took = th_now_ms() - t0;
  CHECK(took >= 200 && took < 2000);
  for (int i = 0; i < 3; i++)
    CHECK_EQ(dlock_lock_is_held(l[i]), 1);
  /* Reentrant, as each lock is. */
  CHECK_RC(dlock_multilock_try_acquire(m, 0, 0, NULL), 0);
  CHECK_EQ(dlock_lock_hold_count(l[0]), 2);
  CHECK_RC(dlock_multilock_release(m), 0);
  CHECK_RC(dlock_multilock_release(m), 0);
  for (int i = 0; i < 3; i++)
    CHECK(!held_by_anyone(names[i]));
  dlock_multilock_free(m);
  for (int i = 0; i < 3; i++)
    dlock_lock_free(l[i]);
  dlock_lock_free(ob);
  dlock_client_close(c);
  dlock_client_close(other);
}

typedef struct crosser {
  const char *names[3];
  int rounds, errors;
} crosser;

static void *cross(void *p) {
  crosser *x = p;
  dlock_client *c = th_client(&th_srv, 0);
  if (c == NULL) {
    x->errors++;
    return NULL;
  }
  dlock_lock *l[3];
  for (int i = 0; i < 3; i++)
    if (dlock_lock_new(c, x->names[i], NULL, &l[i]) != 0) x->errors++;
  dlock_multilock *m;
  if (dlock_multilock_new(l, 3, &m) != 0) x->errors++;
  for (int r = 0; r < x->rounds; r++) {
    if (dlock_multilock_try_acquire(m, 10000, 0, NULL) != 0) {
      x->errors++;
      continue;
    }
    /* Inside: all three are ours, so the shared counter is safe. */
    long long v = th_cmd_int(&th_srv, "GET x:counter");
    th_cmd_int(&th_srv, "SET x:counter %lld", (v < 0 ? 0 : v) + 1);
    if (dlock_multilock_release(m) != 0) x->errors++;
  }
  dlock_multilock_free(m);
  for (int i = 0; i < 3; i++)
    dlock_lock_free(l[i]);
  dlock_client_close(c);
  return NULL;
}

static void t_crossing_orders_finish(void) {
  crosser x[2] = {{{"x:a", "x:b", "x:c"}, 60, 0},
                  {{"x:c", "x:b", "x:a"}, 60, 0}};
  pthread_t t[2];
  int64_t t0 = th_now_ms();
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, cross, &x[i]);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  CHECK_EQ(x[0].errors + x[1].errors, 0);
  CHECK_EQ(th_cmd_int(&th_srv, "GET x:counter"), 120);
  printf("    120 crossing multi-lock rounds in %lld ms\n",
         (long long)(th_now_ms() - t0));
}

static void t_misuse(void) {
  dlock_client *c = th_client(&th_srv, 0);
  CHECK(c != NULL);
  dlock_lock *a, *a2, *b;
  CHECK_RC(dlock_lock_new(c, "u:a", NULL, &a), 0);
  CHECK_RC(dlock_lock_new(c, "u:a", NULL, &a2), 0);
  CHECK_RC(dlock_lock_new(c, "u:b", NULL, &b), 0);
  dlock_multilock *m = NULL;
  dlock_lock *dup[] = {a, b, a2};
  /* Each argument error tells its own story in dlock_client_errmsg, not
   * the previous call's (a failed release first leaves a stale one). */
#define FRESH(call, code, says)                                                \
  do {                                                                         \
    CHECK_RC(dlock_lock_release(b), DLOCK_ENOTOWNER);                          \
    CHECK_RC(call, code);                                                      \
    CHECK(strstr(dlock_client_errmsg(c), says) != NULL);                       \
  } while (0)
  FRESH(dlock_multilock_new(dup, 3, &m), DLOCK_EINVAL, "'u:a' twice");
  CHECK(m == NULL);
  CHECK_RC(dlock_multilock_new(dup, 0, &m), DLOCK_EINVAL);
  dlock_lock *withnull[] = {a, NULL};
  FRESH(dlock_multilock_new(withnull, 2, &m), DLOCK_EINVAL,
        "lock 1 of the multi-lock is NULL");
  FRESH(dlock_multilock_new(dup, 2, NULL), DLOCK_EINVAL, "out is NULL");
  CHECK_RC(dlock_multilock_try_acquire(NULL, 0, 0, NULL), DLOCK_EINVAL);
  /* The other entry points that take a client or a handle. */
  char small[8];
  FRESH(dlock_lock_new(c, "u:c", NULL, NULL), DLOCK_EINVAL, "out is NULL");
  FRESH(dlock_lock_remaining_ttl(a, NULL), DLOCK_EINVAL, "ttl_ms is NULL");
  FRESH(dlock_lock_current_token(a, NULL), DLOCK_EINVAL, "token is NULL");
  FRESH(dlock_client_owner(c, small, sizeof small), DLOCK_EINVAL,
        "buf is NULL or under");
  FRESH(dlock_lock_validity(a, NULL), DLOCK_ENOTOWNER, "'u:a' is not held");
  dlock_queue *q;
  CHECK_RC(dlock_queue_new(c, "u:q", &q), 0);
  FRESH(dlock_queue_size(q, NULL), DLOCK_EINVAL, "n is NULL");
  FRESH(dlock_queue_poll(q, 0, NULL, NULL), DLOCK_EINVAL, "value is NULL");
  dlock_queue_free(q);
#undef FRESH
  /* Releasing what one does not hold: an error, nothing changed. */
  dlock_lock *ab[] = {a, b};
  CHECK_RC(dlock_multilock_new(ab, 2, &m), 0);
  CHECK_RC(dlock_multilock_release(m), DLOCK_ENOTOWNER);
  dlock_multilock_free(m);
  dlock_lock_free(a);
  dlock_lock_free(a2);
  dlock_lock_free(b);
  dlock_client_close(c);
}

TH_MAIN(T(t_all_taken_all_released), T(t_all_or_nothing),
        T(t_crossing_orders_finish), T(t_misuse))
