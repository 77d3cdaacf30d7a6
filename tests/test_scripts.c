/* test_scripts.c: each Lua script refuses what it cannot do before it
 * writes. A script reached with an argument it cannot use (a lease the
 * server cannot add to its clock, a count or an id that is not one, an
 * operation it does not know) returns an error and leaves every key as it
 * was: their values (DUMP) and their leases. The scripts are called
 * directly, as any client could, so that the library's own checks of its
 * input are not what the test sees. */
#include "harness.h"

#include "redis/conns/conns.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A lease no server can add to its clock (Redis: "invalid expire time"),
 * and what any dlock script takes for a lease it refuses. */
#define HUGE "9223372036854775807"

/* The user the scripts run as (NULL: the default user). */
static const char *as_user;

/* Runs the embedded script `script` with its keys and args on th_srv: the
 * reply (caller frees), or NULL when the server could not be reached. */
static redisReply *eval(int script, int nkeys, const char *const *keys,
                        int nargs, const char *const *args) {
  const char *argv[3 + 16];
  char n[16];
  if (3 + nkeys + nargs > 19) return NULL;
  dl_scripts_init();
  snprintf(n, sizeof n, "%d", nkeys);
  argv[0] = "EVAL";
  argv[1] = dl_script_of(script)->body;
  argv[2] = n;
  for (int i = 0; i < nkeys; i++)
    argv[3 + i] = keys[i];
  for (int i = 0; i < nargs; i++)
    argv[3 + nkeys + i] = args[i];
  redisContext *c = th_redis_connect(&th_srv);
  if (c == NULL) return NULL;
  if (as_user) {
    redisReply *a = redisCommand(c, "AUTH %s pw", as_user);
    if (a) freeReplyObject(a);
  }
  redisReply *r = redisCommandArgv(c, 3 + nkeys + nargs, argv, NULL);
  redisFree(c);
  return r;
}

/* The same, expecting a reply that is not an error. */
static bool eval_ok(int script, int nkeys, const char *const *keys, int nargs,
                    const char *const *args) {
  redisReply *r = eval(script, nkeys, keys, nargs, args);
  bool ok = r && r->type != REDIS_REPLY_ERROR;
  if (r && !ok) fprintf(stderr, "    setup: %s\n", r->str);
  if (r) freeReplyObject(r);
  return ok;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every key of the server, sorted, each with its value (DUMP, in hex) and
 * its lease in tens of seconds (a script's PEXPIRE moves it; the few ms
 * the test takes do not), as one malloc'ed string. */
static char *snapshot(void) {
  redisReply *ks = th_cmd(&th_srv, "KEYS *");
  if (ks == NULL || ks->type != REDIS_REPLY_ARRAY) {
    if (ks) freeReplyObject(ks);
    return NULL;
  }
  char **names = calloc(ks->elements + 1, sizeof *names);
  for (size_t i = 0; i < ks->elements; i++)
    names[i] = ks->element[i]->str;
  qsort(names, ks->elements, sizeof *names, by_name);
  size_t cap = 256, len = 0;
  char *out = malloc(cap);
  out[0] = '\0';
  for (size_t i = 0; i < ks->elements; i++) {
    redisReply *d = th_cmd(&th_srv, "DUMP %s", names[i]);
    long long ttl = th_cmd_int(&th_srv, "PTTL %s", names[i]);
    size_t dl = d && d->type == REDIS_REPLY_STRING ? d->len : 0;
    size_t need = len + strlen(names[i]) + 2 * dl + 64;
    if (need > cap) {
      cap = 2 * need;
      out = realloc(out, cap);
    }
    len += (size_t)sprintf(out + len, "%s ", names[i]);
    for (size_t j = 0; j < dl; j++)
      len += (size_t)sprintf(out + len, "%02x", (unsigned char)d->str[j]);
    len += (size_t)sprintf(out + len, " ttl %lld\n",
                           ttl < 0 ? ttl : (ttl + 5000) / 10000);
    if (d) freeReplyObject(d);
  }
  free(names);
  freeReplyObject(ks);
  return out;
}

/* The script refuses the call with an error, and nothing changed. */
#define REFUSED(script, keys, args)                                            \
  do {                                                                         \
    char *before_ = snapshot();                                                \
    CHECK(before_ != NULL);                                                    \
    redisReply *r_ = eval(script, (int)(sizeof keys / sizeof keys[0]), keys,   \
                          (int)(sizeof args / sizeof args[0]), args);          \
    CHECK(r_ != NULL);                                                         \
    if (r_->type != REDIS_REPLY_ERROR)                                         \
      fprintf(stderr, "    %s:%d: not refused (reply type %d)\n", __FILE__,    \
              __LINE__, r_->type);                                             \
    else                                                                       \
      fprintf(stderr, "    refused: %s\n", r_->str);                           \
    CHECK(r_->type == REDIS_REPLY_ERROR);                                      \
    freeReplyObject(r_);                                                       \
    char *after_ = snapshot();                                                 \
    CHECK(after_ != NULL);                                                     \
    if (strcmp(before_, after_) != 0)                                          \
      fprintf(stderr, "    %s:%d: changed:\n--- before\n%s--- after\n%s",      \
              __FILE__, __LINE__, before_, after_);                            \
    CHECK(strcmp(before_, after_) == 0);                                       \
    free(before_);                                                             \
    free(after_);                                                              \
  } while (0)

/* A counter of fencing tokens beside the name, with a lease unlike the
 * one a script gives it. */
static void counter(const char *key) {
  th_cmd_int(&th_srv, "SET %s 41 PX 50000", key);
}

/* ---- the read-write lock ---- */
#define RW "rw"
#define RW_TOKEN "redisson_lock_token:{rw}"
static const char *const rw_keys[] = {RW, RW_TOKEN};

static void t_rw_read_huge_lease(void) {
  counter(RW_TOKEN);
  const char *free_read[] = {HUGE, "a:1", "read", "a:1:write", "a:1", ""};
  REFUSED(DL_SCRIPT_RW_ACQUIRE, rw_keys, free_read); /* a free lock */
  const char *other[] = {"30000", "b:1", "read", "b:1:write", "b:1", "b"};
  CHECK(eval_ok(DL_SCRIPT_RW_ACQUIRE, 2, rw_keys, 6, other));
  REFUSED(DL_SCRIPT_RW_ACQUIRE, rw_keys, free_read); /* another reader's */
  const char *mine[] = {"30000", "a:1", "read", "a:1:write", "a:1", ""};
  CHECK(eval_ok(DL_SCRIPT_RW_ACQUIRE, 2, rw_keys, 6, mine));
  REFUSED(DL_SCRIPT_RW_ACQUIRE, rw_keys, free_read); /* a re-entry */
  const char *junk[] = {"1.5", "a:1", "read", "a:1:write", "a:1", ""};
  REFUSED(DL_SCRIPT_RW_ACQUIRE, rw_keys, junk);
}

static void t_rw_write_huge_lease(void) {
  counter(RW_TOKEN);
  const char *w[] = {HUGE, "a:1:write", "write", "a:1:write", "a:1", "x"};
  REFUSED(DL_SCRIPT_RW_ACQUIRE, rw_keys, w); /* a free lock */
  const char *held[] = {"30000", "a:1:write", "write", "a:1:write", "a:1", ""};
  CHECK(eval_ok(DL_SCRIPT_RW_ACQUIRE, 2, rw_keys, 6, held));
  REFUSED(DL_SCRIPT_RW_ACQUIRE, rw_keys, w); /* a re-entry */
  const char *r[] = {HUGE, "a:1", "read", "a:1:write", "a:1", ""};
  REFUSED(DL_SCRIPT_RW_ACQUIRE, rw_keys, r); /* the writer's own read */
  /* A writer's release that keeps a hold sets the lease it is given. */
  CHECK(eval_ok(DL_SCRIPT_RW_ACQUIRE, 2, rw_keys, 6, held));
  const char *rel_keys[] = {RW, "redisson_rwlock:{rw}"};
  const char *rel[] = {"a:1:write", "write", HUGE};
  REFUSED(DL_SCRIPT_RW_RELEASE, rel_keys, rel);
}

/* ---- the lock, the fair lock, the plain lock ---- */
#define L "l"
#define L_TOKEN "redisson_lock_token:{l}"

static void t_lock_huge_lease(void) {
  counter(L_TOKEN);
  /* The first attempt's fast path: three keys, two arguments. */
  const char *k3[] = {L, L_TOKEN, "dlock_handoff:{l}"};
  const char *first[] = {HUGE, "a:1"};
  REFUSED(DL_SCRIPT_LOCK_ACQUIRE, k3, first);
  const char *junk[] = {"10e3", "a:1"};
  REFUSED(DL_SCRIPT_LOCK_ACQUIRE, k3, junk);
  const char *none[] = {"0", "a:1"}; /* PEXPIRE 0 would delete the hold */
  REFUSED(DL_SCRIPT_LOCK_ACQUIRE, k3, none);
  const char *below[] = {"-5", "a:1"};
  REFUSED(DL_SCRIPT_LOCK_ACQUIRE, k3, below);
  const char *longer[] = {"10000000000000000", "a:1"}; /* 10^16 */
  REFUSED(DL_SCRIPT_LOCK_ACQUIRE, k3, longer);
  const char *info[] = {HUGE, "a:1", "me", "0"};
  REFUSED(DL_SCRIPT_LOCK_ACQUIRE, k3, info);
  /* Held by another: a waiter that would queue for a hand-off. */
  const char *other[] = {"30000", "b:1"};
  CHECK(eval_ok(DL_SCRIPT_LOCK_ACQUIRE, 3, k3, 2, other));
  const char *k5[] = {L, L_TOKEN, "dlock_handoff:{l}", "dlock_lock_queue:{l}",
                      "dlock_lock_waiters:{l}"};
  const char *queue[] = {HUGE, "a:1", "", "0", "0", "600", "0", "1", "6000"};
  REFUSED(DL_SCRIPT_LOCK_ACQUIRE, k5, queue);
  const char *alive[] = {"30000", "a:1", "", "0", "0", "600", "0", "1", HUGE};
  REFUSED(DL_SCRIPT_LOCK_ACQUIRE, k5, alive);
  /* The holder's own re-entry, and its release that keeps a hold. */
  const char *again[] = {HUGE, "b:1", "", "1"};
  REFUSED(DL_SCRIPT_LOCK_ACQUIRE, k3, again);
  const char *rel_keys[] = {L,
                            "redisson_lock__channel:{l}",
                            "dlock_lock_queue:{l}",
                            "dlock_lock_waiters:{l}",
                            L_TOKEN,
                            "dlock_handoff:{l}",
                            "redisson_unlock_latch:{l}:x:1"};
  const char *twice[] = {"30000", "b:1", "", "1"};
  CHECK(eval_ok(DL_SCRIPT_LOCK_ACQUIRE, 3, k3, 4, twice));
  const char *rel[] = {"b:1", "2", "3000", HUGE};
  REFUSED(DL_SCRIPT_LOCK_RELEASE, rel_keys, rel);
}

static void t_fair_huge_lease(void) {
  counter(L_TOKEN);
  const char *k5[] = {L, L_TOKEN, "dlock_handoff:{l}",
                      "redisson_lock_queue:{l}", "redisson_lock_timeout:{l}"};
  const char *fair[] = {HUGE, "a:1", "", "0", "0", "600", "5000", "1"};
  REFUSED(DL_SCRIPT_LOCK_ACQUIRE, k5, fair);
}

static void t_plain_huge_lease(void) {
  counter(L_TOKEN);
  const char *k2[] = {L, L_TOKEN};
  const char *plain[] = {HUGE, "a:1", "", "0"};
  REFUSED(DL_SCRIPT_LOCK_ACQUIRE, k2, plain);
  const char *held[] = {"30000", "a:1", "", "0"};
  CHECK(eval_ok(DL_SCRIPT_LOCK_ACQUIRE, 2, k2, 4, held));
  const char *again[] = {HUGE, "a:1", "", "1"};
  REFUSED(DL_SCRIPT_LOCK_ACQUIRE, k2, again);
}

/* The watchdog's batch: a permit, then a lock, renewed with a lease the
 * server refuses: neither is extended. */
static void t_renew_huge_lease(void) {
  const char *k2[] = {L, L_TOKEN};
  const char *held[] = {"30000", "a:1", "", "0"};
  counter(L_TOKEN);
  CHECK(eval_ok(DL_SCRIPT_LOCK_ACQUIRE, 2, k2, 4, held));
  th_cmd_int(&th_srv, "ZADD {s}:timeout 99999999999999 %b", "0123456789abcdef",
             (size_t)16);
  th_cmd_int(&th_srv, "PEXPIRE {s}:timeout 50000");
  const char *keys[] = {"{s}:timeout", L};
  const char *args[] = {HUGE, "c:30313233343536373839616263646566", "a:1"};
  REFUSED(DL_SCRIPT_LOCK_RENEW, keys, args);
}

/* ---- the synchronizers ---- */
static void t_permits_bad_args(void) {
  const char *keys[] = {"p", "{p}:timeout", "redisson_sc:{p}"};
  const char *set[] = {"set", "2"};
  CHECK(eval_ok(DL_SCRIPT_PERMITS, 3, keys, 2, set));
  const char *lease[] = {"acquire", "ten", "000102030405060708090a0b0c0d0e0f"};
  REFUSED(DL_SCRIPT_PERMITS, keys, lease);
  const char *id[] = {"acquire", "1000", "not hex"};
  REFUSED(DL_SCRIPT_PERMITS, keys, id);
}

static void t_queue_bad_lease(void) {
  th_cmd_int(&th_srv, "RPUSH q a b");
  /* A consumer whose lease ended, with a value taken: the script would
   * give it back before it takes. */
  th_cmd_int(&th_srv, "ZADD {q}:timeout 1 %b", "\x01", (size_t)1);
  th_cmd_int(&th_srv, "RPUSH {q}:processing:01 c");
  const char *keys[] = {"q", "{q}:timeout", "{q}:processing:00"};
  const char *args[] = {"00", "soon", "{q}:processing:"};
  REFUSED(DL_SCRIPT_QUEUE_RELIABLE, keys, args);
}

static void t_latch_bad_count(void) {
  const char *keys[] = {"c", "redisson_countdownlatch__channel:{c}"};
  const char *args[] = {"set", "many"};
  REFUSED(DL_SCRIPT_LATCH_UPDATE, keys, args);
}

/* A delayed value due, packed as Redisson packs it: 8, an id of 8 bytes,
 * the value's length (8 bytes, little-endian), the value. */
static void t_delay_poll_bad_op(void) {
  static const char packed[] = "\x08"
                               "abcdefgh"
                               "\x01\0\0\0\0\0\0\0"
                               "v";
  th_cmd_int(&th_srv, "ZADD redisson_delay_queue_timeout:{d} 1 %b", packed,
             sizeof packed - 1);
  th_cmd_int(&th_srv, "RPUSH redisson_delay_queue:{d} %b", packed,
             sizeof packed - 1);
  th_cmd_int(&th_srv, "RPUSH d w");
  const char *keys[] = {"d", "redisson_delay_queue_timeout:{d}",
                        "redisson_delay_queue:{d}"};
  const char *args[] = {"del", "100"}; /* an operation it does not know */
  REFUSED(DL_SCRIPT_DELAY_POLL, keys, args);
}

/* ---- a message the server refuses ----
 * A user whose ACL allows every key and command but no channel: each
 * script's PUBLISH fails, before the write it tells of. */
static void t_publish_refused(void) {
  th_cmd_int(&th_srv, "ACL SETUSER quiet on >pw ~* resetchannels +@all");
  /* A semaphore's release and a latch's set and last count-down. */
  th_cmd_int(&th_srv, "SET s 1");
  const char *sk[] = {"s", "redisson_sc:{s}"};
  const char *release[] = {"release", "1"};
  th_cmd_int(&th_srv, "SET c 1");
  const char *ck[] = {"c", "redisson_countdownlatch__channel:{c}"};
  const char *down[] = {"down", "0"};
  const char *ck2[] = {"c2", "redisson_countdownlatch__channel:{c2}"};
  const char *set[] = {"set", "3"};
  /* A permit's release. */
  const char *pk[] = {"p", "{p}:timeout", "redisson_sc:{p}"};
  const char *pset[] = {"set", "1"};
  const char *id = "000102030405060708090a0b0c0d0e0f";
  const char *take[] = {"acquire", "30000", id};
  const char *give[] = {"release", id};
  CHECK(eval_ok(DL_SCRIPT_PERMITS, 3, pk, 2, pset));
  CHECK(eval_ok(DL_SCRIPT_PERMITS, 3, pk, 3, take));
  /* A lock force-released, a reader's last release, a fair waiter that
   * gives up first in line. */
  const char *k3[] = {L, L_TOKEN, "dlock_handoff:{l}"};
  const char *held[] = {"30000", "b:1"};
  counter(L_TOKEN);
  CHECK(eval_ok(DL_SCRIPT_LOCK_ACQUIRE, 3, k3, 2, held));
  const char *fk[] = {L, "redisson_lock__channel:{l}"};
  const char *force[] = {"0", "lock", "dlock:revoke"};
  const char *read[] = {"30000", "a:1", "read", "a:1:write", "a:1", ""};
  CHECK(eval_ok(DL_SCRIPT_RW_ACQUIRE, 2, rw_keys, 6, read));
  const char *rk[] = {RW, "redisson_rwlock:{rw}"};
  const char *unread[] = {"a:1", "read", "30000"};
  th_cmd_int(&th_srv, "RPUSH redisson_lock_queue:{f} a:1 b:1");
  th_cmd_int(&th_srv, "ZADD redisson_lock_timeout:{f} 99999999999999 a:1 "
                      "99999999999999 b:1");
  const char *qk[] = {"f", "redisson_lock__channel:{f}",
                      "redisson_lock_queue:{f}", "redisson_lock_timeout:{f}"};
  const char *cancel[] = {"a:1", "0"};
  /* A delayed value offered. */
  const char *dk[] = {
      "d", "redisson_delay_queue_timeout:{d}", "redisson_delay_queue:{d}",
      "redisson_delay_queue_channel:{d}", "dlock_queue_channel:{d}"};
  const char *offer[] = {"1000", "0102030405060708", "76"};
  as_user = "quiet";
  REFUSED(DL_SCRIPT_SEMAPHORE_UPDATE, sk, release);
  REFUSED(DL_SCRIPT_LATCH_UPDATE, ck, down);
  REFUSED(DL_SCRIPT_LATCH_UPDATE, ck2, set);
  REFUSED(DL_SCRIPT_PERMITS, pk, give);
  REFUSED(DL_SCRIPT_LOCK_FORCE_RELEASE, fk, force);
  REFUSED(DL_SCRIPT_RW_RELEASE, rk, unread);
  REFUSED(DL_SCRIPT_FAIR_CANCEL, qk, cancel);
  REFUSED(DL_SCRIPT_DELAY_OFFER, dk, offer);
  as_user = NULL;
}

TH_MAIN(T(t_rw_read_huge_lease), T(t_rw_write_huge_lease), T(t_lock_huge_lease),
        T(t_fair_huge_lease), T(t_plain_huge_lease), T(t_renew_huge_lease),
        T(t_permits_bad_args), T(t_queue_bad_lease), T(t_latch_bad_count),
        T(t_delay_poll_bad_op), T(t_publish_refused))
