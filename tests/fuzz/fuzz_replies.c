/* fuzz_replies.c: libFuzzer target for every Redis reply the library reads.
 * The input (after a first byte choosing lease modes) is a RESP stream, cut
 * into replies by hiredis's reader. Each reply is handed to the subscriber's
 * dispatcher, then the replies answer, in order, the calls of a fixed round
 * of operations (acquire, waiting acquire, queries, inspect, a watchdog
 * round, release, force release, scan, ping) through a backend that serves
 * them instead of a server: the real lock, watchdog and pubsub code reads
 * them. A code outside the error table, a crash, a leak or undefined
 * behaviour is a finding. Build and run: scripts/fuzz.sh. */
#include "client/client.h"
#include "redis/ops/ops.h"

#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define MAX_REPLIES 64

static redisReply *queue[MAX_REPLIES];
static int qlen, qnext;
static dl_pubsub *pubsub;
static dl_conn_config ps_cfg;
static dl_sub *subs[4];

/* The next reply, as the Redis backend would hand it over: an error reply
 * becomes its code. */
static int next_reply(dl_rlink *b, redisReply **out) {
  (void)b;
  *out = NULL;
  /* Out of replies: the server cannot be reached. (Not ECONNLOST, which a
   * release retries for up to its command timeout.) */
  if (qnext >= qlen) return DLOCK_ECONNECT;
  redisReply *r = queue[qnext];
  queue[qnext++] = NULL;
  if (r->type == REDIS_REPLY_ERROR) {
    int code = dl_server_errcode(r->str);
    freeReplyObject(r);
    return code;
  }
  *out = r;
  return 0;
}

static int fb_eval_many(dl_rlink *b, int64_t deadline, int n, int script,
                        const int *nkeys, const char *const *const *keys,
                        const int *nargs, const char *const *const *args,
                        redisReply **replies, int *errs) {
  (void)deadline, (void)script, (void)nkeys, (void)keys, (void)nargs,
      (void)args;
  int first = 0;
  for (int i = 0; i < n; i++) {
    errs[i] = next_reply(b, &replies[i]);
    if (errs[i] && !first) first = errs[i];
  }
  return first;
}

static int fb_command(dl_rlink *b, int argc, const char **argv,
                      redisReply **reply) {
  (void)argc, (void)argv;
  return next_reply(b, reply);
}

static int dummy_sub;
static dl_sub *fb_sub_ref(dl_rlink *b, const char *ch, int mode,
                          int64_t deadline) {
  (void)b, (void)ch, (void)mode, (void)deadline;
  return (dl_sub *)&dummy_sub;
}
static int fb_sub_wait(dl_rlink *b, dl_sub *s, int64_t deadline,
                       int64_t since, dl_sub *grant) {
  (void)b, (void)s, (void)deadline, (void)since, (void)grant;
  return 0;
}
/* Grants can come but never do: the waiter joins the hand-off queue, and
 * leaves it when it gives up. */
static int fb_sub_grant(dl_rlink *b, dl_sub *s, uint64_t *token) {
  (void)b, (void)s, (void)token;
  return 0;
}
static void fb_sub_unref(dl_rlink *b, dl_sub *s, bool linger) {
  (void)b, (void)s, (void)linger;
}
static void fb_sub_kick(dl_rlink *b, dl_sub *s) {
  (void)b, (void)s;
}
static void fb_free(dl_rlink *b) {
  free(b);
}

static const dl_rlink_ops fuzz_ops = {
    .name = "fuzz",
    .eval_many = fb_eval_many,
    .command = fb_command,
    .sub_ref = fb_sub_ref,
    .sub_wait = fb_sub_wait,
    .sub_grant = fb_sub_grant,
    .sub_unref = fb_sub_unref,
    .sub_kick = fb_sub_kick,
    .free = fb_free,
};

/* The Redis backend's operations over a link that serves the replies. */
static int fuzz_backend_new(const dlock_client_options *opts,
                            const dl_backend_env *env, dl_backend **out) {
  (void)opts;
  dl_rlink *link = calloc(1, sizeof *link);
  if (link == NULL) return DLOCK_ENOMEM;
  link->ops = &fuzz_ops;
  return dl_redis_backend_over(link, env, out);
}

/* Every return value must be a success or a code of the error table. */
static void check(int rc) {
  if (rc < 0 && strcmp(dlock_err_name(rc), "UNKNOWN") == 0) abort();
}

static int on_name(const char *name, void *ud) {
  (void)ud;
  return name == NULL; /* never NULL: go on */
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  /* A subscriber whose connection never comes up: replies are fed to it. */
  char err[128];
  if (dl_url_parse("unix:///nonexistent/dlock-fuzz.sock", &ps_cfg.ep, err,
                   sizeof err) != 0)
    abort();
  ps_cfg.connect_timeout_ms = 10;
  ps_cfg.command_timeout_ms = 10;
  ps_cfg.reconnect_min_ms = 1000;
  ps_cfg.reconnect_max_ms = 1000;
  if (dl_pubsub_new(&ps_cfg, &pubsub) != 0) abort();
  subs[0] =
      dl_pubsub_ref(pubsub, "redisson_lock__channel:{k}", DL_WAKE_LOCK, 0);
  subs[1] = dl_pubsub_ref(pubsub, "redisson_sc:{k}", DL_WAKE_COUNT, 0);
  subs[2] = dl_pubsub_ref(pubsub, "redisson_countdownlatch__channel:{k}",
                          DL_WAKE_ALL, 0);
  subs[3] = dl_pubsub_ref(pubsub, "redisson_lock__channel:{k}:o",
                          DL_WAKE_GRANT, 0);
  return 0;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  if (size < 1) return 0;
  /* hiredis 0.14's reader allocates an array's elements as soon as it
   * reads the declared count ("*2000000000"): its behaviour, not ours
   * (docs/SAFETY.md); keep declared arrays small. */
  for (size_t i = 1; i < size; i++) {
    if (data[i] != '*') continue;
    long n = 0;
    for (size_t j = i + 1; j < size && data[j] >= '0' && data[j] <= '9'; j++)
      if ((n = n * 10 + (data[j] - '0')) > 4096) return 0;
  }
  unsigned mode = data[0];
  redisReader *rd = redisReaderCreate();
  if (rd == NULL) return 0;
  qlen = qnext = 0;
  if (redisReaderFeed(rd, (const char *)data + 1, size - 1) == REDIS_OK) {
    void *r = NULL;
    while (qlen < MAX_REPLIES && redisReaderGetReply(rd, &r) == REDIS_OK &&
           r != NULL) {
      dl_pubsub_feed(pubsub, r);
      queue[qlen++] = r;
      r = NULL;
    }
  }
  redisReaderFree(rd);

  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = "redis://127.0.0.1:1";
  o.watchdog_timeout_ms = 3600 * 1000; /* rounds only when run below */
  dlock_client *c = NULL;
  if (dl_client_open_with(&o, fuzz_backend_new, NULL, &c) != 0) abort();
  dlock_lock *l = NULL;
  if (dlock_lock_new(c, "k", NULL, &l) != 0) abort();
  dlock_lock_set_info(l, (mode & 4) ? "fuzz" : NULL);
  uint64_t tok = 0;
  int64_t ms = 0;
  dlock_lock_state st;
  check(dlock_lock_try_acquire(l, 0, (mode & 1) ? 1000 : 0, &tok));
  check(dlock_lock_try_acquire(l, (mode & 2) ? 2 : 0, 0, &tok));
  check(dlock_lock_is_locked(l));
  check(dlock_lock_is_held(l));
  check(dlock_lock_hold_count(l));
  check(dlock_lock_remaining_ttl(l, &ms));
  check(dlock_lock_current_token(l, &tok));
  check(dlock_lock_inspect(l, &st));
  check(dlock_lock_validity(l, &ms));
  check(dl_watchdog_run_once(c->watchdog));
  check(dlock_lock_is_lost(l));
  check(dlock_lock_release(l));
  check(dlock_lock_release(l));
  check(dlock_lock_force_release(l));
  check(dlock_client_scan_locks(c, "*", on_name, NULL));
  check(dlock_client_ping(c));
  /* The semaphores and the latch read their own replies. */
  dlock_semaphore *sem = NULL;
  dlock_latch *lat = NULL;
  dlock_permits *per = NULL;
  char id[DLOCK_PERMIT_ID_LEN];
  int64_t n = 0;
  if (dlock_semaphore_new(c, "k", &sem) != 0 ||
      dlock_latch_new(c, "k", &lat) != 0 || dlock_permits_new(c, "k", &per))
    abort();
  check(dlock_semaphore_try_set_permits(sem, 2));
  check(dlock_semaphore_try_acquire(sem, 1, (mode & 2) ? 2 : 0));
  check(dlock_semaphore_get_available(sem));
  check(dlock_semaphore_release(sem, 1));
  check(dlock_semaphore_drain(sem));
  check(dlock_latch_try_set_count(lat, 1));
  check(dlock_latch_get_count(lat, &n));
  check(dlock_latch_count_down(lat));
  check(dlock_latch_try_await(lat, (mode & 2) ? 2 : 0));
  check(dlock_permits_try_set(per, 1));
  int rc = dlock_permits_try_acquire(per, (mode & 2) ? 2 : 0,
                                     (mode & 1) ? 1000 : 0, id);
  check(rc);
  check(dlock_permits_get_available(per));
  check(dl_watchdog_run_once(c->watchdog));
  if (rc == 0) check(dlock_permits_release(per, id));
  /* The fair lock and both sides of a read-write lock. */
  dlock_lock *fl = NULL;
  dlock_rwlock *rw = NULL;
  if (dlock_fairlock_new(c, "k", NULL, 0, &fl) != 0 ||
      dlock_rwlock_new(c, "k", NULL, &rw) != 0)
    abort();
  dlock_lock *rl = dlock_rwlock_read(rw), *wl = dlock_rwlock_write(rw);
  check(dlock_lock_try_acquire(fl, (mode & 2) ? 2 : 0, 0, &tok));
  check(dlock_lock_release(fl));
  check(dlock_lock_try_acquire(rl, 0, 0, &tok));
  check(dlock_lock_try_acquire(wl, 0, (mode & 1) ? 1000 : 0, &tok));
  check(dlock_lock_inspect(rl, &st));
  check(dlock_lock_release(wl));
  check(dlock_lock_release(rl));
  check(dlock_lock_force_release(wl));
  dlock_lock_free(fl);
  dlock_rwlock_free(rw);
  dlock_semaphore_free(sem);
  dlock_latch_free(lat);
  dlock_permits_free(per);
  dlock_lock_free(l);
  dlock_client_close(c);
  for (int i = qnext; i < qlen; i++)
    freeReplyObject(queue[i]);
  return 0;
}
