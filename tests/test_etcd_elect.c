/* test_etcd_elect.c: dlock's election on etcd beside Go's
 * concurrency.Election, what etcdctl and Go's clients write: a proposal
 * (Campaign's key PREFIX/NAME/<lease in hex> on its lease, the value as
 * given) and a Proclaim (the leader's value put again on its key, its
 * create revision kept), read by dlock_leader_get_current, against a
 * private etcd server the harness starts (a few seconds). */
#include "harness.h"

#include <pthread.h>
#include <string.h>

#ifdef DLOCK_TEST_HAVE_ETCD
/* etcdctl on s with `args` (1 s at most: `elect -l` observes until
 * stopped): its output in buf ("" none). */
static const char *ctl(const th_etcd *s, const char *args, char *buf,
                       size_t len) {
  char cmd[2000];
  snprintf(cmd, sizeof cmd,
           "ETCDCTL_API=3 timeout 1 etcdctl --endpoints %s %s 2>&1",
           s->endpoint, args);
  return th_sh(cmd, buf, len);
}

/* A leader campaigned as Go's Campaign does (a lease, then its key on it
 * with a 300-byte value, longer than any id dlock gives): a dlock
 * participant follows, and dlock_leader_get_current reads the whole value
 * (cut to fit a short buffer). The leader proclaims a new value (Go's
 * Proclaim: a put on its key that keeps its lease and create revision):
 * dlock reads the new one, `etcdctl elect -l` agrees, and dlock still
 * follows. The leader's lease revoked: dlock leads. */
static void t_etcd_elect_proclaim(void) {
  if (!th_etcd_available()) {
    fprintf(stderr, "    skipped: no etcd server installed\n");
    return;
  }
  th_etcd s;
  CHECK_RC(th_etcd_start(&s), 0);
  char out[2000], args[1200], lease[40] = "", val[301];
  memset(val, 'v', 300);
  val[0] = 'G';
  val[300] = '\0';
  /* "lease 694d7b3a5c1e2f04 granted with TTL(30s)" */
  CHECK(sscanf(ctl(&s, "lease grant 30", out, sizeof out), "lease %39s",
               lease) == 1);
  snprintf(args, sizeof args, "put el/%s %s --lease=%s", lease, val, lease);
  CHECK(strncmp(ctl(&s, args, out, sizeof out), "OK", 2) == 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = s.url;
  dlock_client *c = NULL;
  CHECK_RC(dlock_client_open(&o, &c), 0);
  dlock_leader *me;
  CHECK_RC(dlock_leader_new(c, "el", "me", &me), 0);
  CHECK_RC(dlock_leader_start(me), 0);
  CHECK_RC(dlock_leader_try_await(me, 300), DLOCK_EBUSY);
  char cur[512], small[16];
  CHECK_EQ(dlock_leader_get_current(me, cur, sizeof cur), 1);
  CHECK(strcmp(cur, val) == 0);
  CHECK_EQ(dlock_leader_get_current(me, small, sizeof small), 1);
  CHECK(strncmp(small, val, 15) == 0 && strlen(small) == 15);
  /* Proclaim: the same key, lease and create revision, a new value. */
  snprintf(args, sizeof args, "put el/%s proclaimed --ignore-lease", lease);
  CHECK(strncmp(ctl(&s, args, out, sizeof out), "OK", 2) == 0);
  CHECK_EQ(dlock_leader_get_current(me, cur, sizeof cur), 1);
  CHECK(strcmp(cur, "proclaimed") == 0);
  CHECK(strstr(ctl(&s, "elect -l el", out, sizeof out), "\nproclaimed\n") !=
        NULL);
  CHECK_RC(dlock_leader_try_await(me, 300), DLOCK_EBUSY);
  /* The leader's session ends: dlock is next. */
  snprintf(args, sizeof args, "lease revoke %s", lease);
  ctl(&s, args, out, sizeof out);
  CHECK_RC(dlock_leader_try_await(me, 5000), 0);
  CHECK_EQ(dlock_leader_get_current(me, cur, sizeof cur), 1);
  CHECK(strcmp(cur, "me") == 0);
  dlock_leader_free(me);
  CHECK_EQ(dlock_leader_get_current(NULL, cur, sizeof cur) < 0, 1);
  dlock_client_close(c);
  th_etcd_stop(&s);
}

/* What an observer was told, in order. */
typedef struct seen {
  pthread_mutex_t mu;
  int n;
  char last[64];  /* "" for nobody */
  uint64_t token; /* the last one's */
  char want[64];  /* seen_is's: wanted as the last value */
  char log[256];  /* every value told, each after a '|' */
} seen;

static void on_value(dlock_leader *l, const char *value, size_t len,
                     uint64_t token, void *ud) {
  (void)l;
  seen *s = ud;
  pthread_mutex_lock(&s->mu);
  s->n++;
  snprintf(s->last, sizeof s->last, "%.*s", value ? (int)len : 0,
           value ? value : "");
  size_t at = strlen(s->log);
  snprintf(s->log + at, sizeof s->log - at, "|%s", s->last);
  s->token = token;
  pthread_mutex_unlock(&s->mu);
}

static bool seen_is(void *p) {
  seen *s = p;
  pthread_mutex_lock(&s->mu);
  bool is = s->n > 0 && strcmp(s->last, s->want) == 0;
  pthread_mutex_unlock(&s->mu);
  return is;
}

/* The token of the observer's last news, and how many it had. */
static uint64_t seen_token(seen *s) {
  pthread_mutex_lock(&s->mu);
  uint64_t t = s->token;
  pthread_mutex_unlock(&s->mu);
  return t;
}
static int seen_n(seen *s) {
  pthread_mutex_lock(&s->mu);
  int n = s->n;
  pthread_mutex_unlock(&s->mu);
  return n;
}

/* Waits (5 s at most) until the observer's last news is `want`. */
static bool await_seen(seen *s, const char *want) {
  pthread_mutex_lock(&s->mu);
  snprintf(s->want, sizeof s->want, "%s", want);
  pthread_mutex_unlock(&s->mu);
  return th_wait_for(seen_is, s, 5000);
}

/* Go's Observe and Proclaim. An observer (not taking part) is told that
 * nobody leads, then a leader campaigned as Go's Campaign does, its
 * Proclaim (a put on its key), and nobody again once its lease is
 * revoked. A dlock leader proclaims: the observer, dlock_leader_get_current
 * and `etcdctl elect -l` read the new value, the token unchanged; a
 * participant that does not lead is refused (DLOCK_ENOTOWNER, nothing
 * changed); once the leader leaves, the next leads with its own id. */
static void t_etcd_observe(void) {
  if (!th_etcd_available()) {
    fprintf(stderr, "    skipped: no etcd server installed\n");
    return;
  }
  th_etcd s;
  CHECK_RC(th_etcd_start(&s), 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = s.url;
  dlock_client *c = NULL;
  CHECK_RC(dlock_client_open(&o, &c), 0);
  seen sn = {.mu = PTHREAD_MUTEX_INITIALIZER};
  dlock_leader *ob, *a, *b;
  CHECK_RC(dlock_leader_new(c, "ob", "observer", &ob), 0);
  CHECK_RC(dlock_leader_observe(ob, NULL, NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_leader_observe(ob, on_value, &sn), 0);
  CHECK_RC(dlock_leader_observe(ob, on_value, &sn), DLOCK_EINVAL);
  CHECK(await_seen(&sn, ""));
  /* A Go leader, and its Proclaim. */
  char out[2000], args[300], lease[40] = "";
  CHECK(sscanf(ctl(&s, "lease grant 30", out, sizeof out), "lease %39s",
               lease) == 1);
  snprintf(args, sizeof args, "put ob/%s go-leader --lease=%s", lease, lease);
  CHECK(strncmp(ctl(&s, args, out, sizeof out), "OK", 2) == 0);
  CHECK(await_seen(&sn, "go-leader"));
  uint64_t go_token = seen_token(&sn);
  CHECK(go_token > 0);
  snprintf(args, sizeof args, "put ob/%s go-proclaimed --ignore-lease", lease);
  CHECK(strncmp(ctl(&s, args, out, sizeof out), "OK", 2) == 0);
  CHECK(await_seen(&sn, "go-proclaimed"));
  CHECK_EQ(seen_token(&sn), go_token);
  snprintf(args, sizeof args, "lease revoke %s", lease);
  ctl(&s, args, out, sizeof out);
  CHECK(await_seen(&sn, ""));
  /* dlock's leader proclaims; a follower cannot. */
  CHECK_RC(dlock_leader_new(c, "ob", "a", &a), 0);
  CHECK_RC(dlock_leader_new(c, "ob", "b", &b), 0);
  CHECK_RC(dlock_leader_proclaim(a, "early"), DLOCK_EINVAL); /* not joined */
  CHECK_RC(dlock_leader_start(a), 0);
  CHECK_RC(dlock_leader_try_await(a, 5000), 0);
  CHECK(await_seen(&sn, "a"));
  uint64_t ta = 0;
  CHECK_RC(dlock_leader_token(a, &ta), 0);
  CHECK_EQ(seen_token(&sn), ta);
  CHECK_RC(dlock_leader_start(b), 0);
  CHECK_RC(dlock_leader_proclaim(a, "a-proclaimed"), 0);
  CHECK(await_seen(&sn, "a-proclaimed"));
  CHECK_EQ(seen_token(&sn), ta);
  char cur[64];
  CHECK_EQ(dlock_leader_get_current(b, cur, sizeof cur), 1);
  CHECK(strcmp(cur, "a-proclaimed") == 0);
  CHECK(strstr(ctl(&s, "elect -l ob", out, sizeof out), "\na-proclaimed\n") !=
        NULL);
  CHECK_RC(dlock_leader_proclaim(b, "b-too"), DLOCK_ENOTOWNER);
  CHECK(strstr(dlock_client_errmsg(c), "does not lead") != NULL);
  CHECK_EQ(dlock_leader_get_current(b, cur, sizeof cur), 1);
  CHECK(strcmp(cur, "a-proclaimed") == 0);
  char big[DLOCK_LEADER_VALUE_MAX + 2];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  CHECK_RC(dlock_leader_proclaim(a, big), DLOCK_EINVAL);
  /* The leader leaves: the next leads with its own id. */
  dlock_leader_free(a);
  CHECK_RC(dlock_leader_try_await(b, 5000), 0);
  CHECK(await_seen(&sn, "b"));
  CHECK(seen_token(&sn) > ta);
  dlock_leader_free(b);
  CHECK(await_seen(&sn, ""));
  int n = seen_n(&sn);
  dlock_leader_free(ob); /* the observer stops: told nothing more */
  CHECK_EQ(seen_n(&sn), n);
  dlock_client_close(c);
  th_etcd_stop(&s);
}

/* A queue's value at the name (a key on no lease, no candidate's): a
 * participant is refused (DLOCK_EWRONGTYPE, its own key deleted: only
 * the queue's value is left), dlock_leader_get_current does not take
 * the value for a leader's, and an observer is told that nobody leads
 * while it is first (a candidate after it leads once it goes). A
 * candidate's key on a lease is one, whatever made it
 * (t_etcd_elect_proclaim). */
static void t_etcd_elect_meets_data(void) {
  TH_ETCD_SETUP(s);
  dlock_client *c = th_etcd_client(&s, 0);
  CHECK(c != NULL);
  dlock_queue *q;
  CHECK_RC(dlock_queue_new(c, "qx", &q), 0);
  CHECK_RC(dlock_queue_offer(q, "a", 1), 0);
  dlock_leader *me;
  CHECK_RC(dlock_leader_new(c, "qx", "me", &me), 0);
  char cur[64] = "?";
  CHECK_RC(dlock_leader_get_current(me, cur, sizeof cur), DLOCK_EWRONGTYPE);
  CHECK_RC(dlock_leader_start(me), 0);
  CHECK_RC(dlock_leader_try_await(me, 5000), DLOCK_EWRONGTYPE);
  CHECK(strstr(dlock_client_errmsg(c), "qx") != NULL);
  CHECK_EQ(dlock_leader_has_leadership(me), 0);
  dlock_leader_free(me);
  /* Only the queue's value under qx/ (a refused participant's key goes
   * with its lease, revoked). */
  char out[2000];
  const char *keys = ctl(&s, "get qx/ --prefix --keys-only", out, sizeof out);
  const char *k1 = strstr(keys, "qx/");
  CHECK(k1 != NULL && strstr(k1 + 1, "qx/") == NULL);
  char value_key[128];
  snprintf(value_key, sizeof value_key, "%.*s", (int)strcspn(k1, "\r\n"), k1);
  int64_t n = 0;
  CHECK(dlock_queue_size(q, &n) == 0 && n == 1);
  /* An observer: nobody leads, though a candidate's key (a Go leader's,
   * on a lease) comes after the value; it leads once the value is
   * deleted (by etcdctl: dlock's queue refuses a poll beside the
   * candidate's key where its lease id sorts outside the values'
   * range, as it is another kind's). */
  seen sn = {.mu = PTHREAD_MUTEX_INITIALIZER};
  dlock_leader *ob;
  CHECK_RC(dlock_leader_new(c, "qx", "observer", &ob), 0);
  CHECK_RC(dlock_leader_observe(ob, on_value, &sn), 0);
  CHECK(await_seen(&sn, ""));
  char args[300], lease[40] = "";
  CHECK(sscanf(ctl(&s, "lease grant 30", out, sizeof out), "lease %39s",
               lease) == 1);
  snprintf(args, sizeof args, "put qx/%s go-leader --lease=%s", lease, lease);
  CHECK(strncmp(ctl(&s, args, out, sizeof out), "OK", 2) == 0);
  snprintf(args, sizeof args, "del %s", value_key);
  CHECK(strncmp(ctl(&s, args, out, sizeof out), "1", 1) == 0);
  CHECK(await_seen(&sn, "go-leader"));
  pthread_mutex_lock(&sn.mu);
  fprintf(stderr, "    the observer was told: %s\n", sn.log);
  bool nobody_first = strcmp(sn.log, "||go-leader") == 0;
  pthread_mutex_unlock(&sn.mu);
  CHECK(nobody_first);
  dlock_leader_free(ob);
  dlock_queue_free(q);
  dlock_client_close(c);
  th_etcd_stop(&s);
}

TH_MAIN(T_BARE(t_etcd_elect_proclaim), T_BARE(t_etcd_observe),
        T_BARE(t_etcd_elect_meets_data))
#else
static void t_etcd_none(void) {
  fprintf(stderr, "    skipped: no etcd backend or server here\n");
}
TH_MAIN(T_BARE(t_etcd_none))
#endif
