/* test_async_io.c: the event loop's Redis connections against a real
 * redis-server, with each driver (built-in, libuv, libevent): the pipelined
 * command connection (redis/conns/aconn.c). */
#include "aconn_cfg.h"
#include "loop_drivers.h"

#include <signal.h>
#include <string.h>

/* A connection's config for th_srv (over TCP: the reconnect tests restart
 * the server on the same port). */
typedef struct setup {
  td_loop t;
  dl_conn_config cfg;
  dl_aconn *c;
} setup;

static int setup_open(setup *s, int kind) {
  memset(s, 0, sizeof *s);
  int rc = td_open(&s->t, kind);
  if (rc == 0) rc = th_aconn_cfg(&s->cfg, "dlock-async-test");
  if (rc == 0) rc = dl_aconn_new(s->t.lp, &s->cfg, &s->c);
  return rc;
}

static void setup_close(setup *s) {
  dl_aconn_free(s->c);
  td_close(&s->t);
  dl_endpoint_clear(&s->cfg.ep);
}

/* One request's outcome. */
typedef struct got {
  int calls, rc, done;
  char str[64];
  long long num;
} got;

static void on_reply(void *ud, int rc, redisReply *r) {
  got *g = ud;
  g->calls++;
  g->rc = rc;
  g->done = 1;
  if (r && (r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING ||
            r->type == REDIS_REPLY_ERROR))
    snprintf(g->str, sizeof g->str, "%s", r->str);
  if (r && r->type == REDIS_REPLY_INTEGER) g->num = r->integer;
  if (r) freeReplyObject(r);
}

static dl_areq *send_cmd(setup *s, got *g, int64_t deadline, int argc,
                         const char **argv, int *err) {
  size_t lens[8];
  for (int i = 0; i < argc; i++) lens[i] = strlen(argv[i]);
  memset(g, 0, sizeof *g);
  return dl_aconn_send(s->c, argc, argv, lens, deadline, on_reply, g, err);
}

static dl_areq *ping(setup *s, got *g, int64_t deadline, int *err) {
  const char *argv[] = {"PING"};
  return send_cmd(s, g, deadline, 1, argv, err);
}

/* setup_open, then one PING answered: connected, and warm. */
static int setup_open_warm(setup *s, int kind) {
  int rc = setup_open(s, kind), err = 0;
  got g;
  if (rc == 0 && ping(s, &g, 0, &err) == NULL) rc = err ? err : -1;
  if (rc == 0 && !td_run_until(&s->t, &g.done, 5000)) rc = DLOCK_ETIMEDOUT;
  return rc;
}

static void ping_round_trip(int kind) {
  setup s;
  CHECK_RC(setup_open(&s, kind), 0);
  got g;
  int err = 0;
  CHECK(ping(&s, &g, 0, &err) != NULL);
  CHECK(td_run_until(&s.t, &g.done, 3000));
  CHECK_EQ(g.calls, 1);
  CHECK_RC(g.rc, 0);
  CHECK(strcmp(g.str, "PONG") == 0);
  CHECK(dl_aconn_up(s.c));
  /* The handshake ran: the client name is set. */
  const char *argv[] = {"CLIENT", "GETNAME"};
  CHECK(send_cmd(&s, &g, 0, 2, argv, &err) != NULL);
  CHECK(td_run_until(&s.t, &g.done, 3000));
  CHECK(strcmp(g.str, "dlock-async-test") == 0);
  setup_close(&s);
}
TD_DRIVERS(ping_round_trip)

enum { NPIPE = 1000 };
typedef struct seq {
  int next; /* the index the next reply should have */
  bool out_of_order;
  int fails;
} seq;
typedef struct seq_req {
  seq *q;
  int i;
} seq_req;

static void on_seq(void *ud, int rc, redisReply *r) {
  seq_req *sr = ud;
  if (rc != 0 || r == NULL || r->type != REDIS_REPLY_INTEGER ||
      r->integer != sr->i)
    sr->q->fails++;
  if (sr->i != sr->q->next) sr->q->out_of_order = true;
  sr->q->next++;
  if (r) freeReplyObject(r);
}

/* 1000 EVALs in flight at once, answered in order, in far fewer writes
 * than requests. */
static void pipelined_evals(int kind) {
  setup s;
  CHECK_RC(setup_open(&s, kind), 0);
  static seq_req reqs[NPIPE];
  seq q = {0};
  for (int i = 0; i < NPIPE; i++) {
    char n[16];
    snprintf(n, sizeof n, "%d", i);
    const char *argv[] = {"EVAL", "return tonumber(ARGV[1])", "0", n};
    size_t lens[4];
    for (int j = 0; j < 4; j++) lens[j] = strlen(argv[j]);
    reqs[i] = (seq_req){&q, i};
    int err = 0;
    CHECK(dl_aconn_send(s.c, 4, argv, lens, 0, on_seq, &reqs[i], &err) !=
          NULL);
  }
  int64_t end = th_now_ms() + 5000;
  while (q.next < NPIPE && th_now_ms() < end) td_once(&s.t, 50);
  CHECK_EQ(q.next, NPIPE);
  CHECK_EQ(q.fails, 0);
  CHECK(!q.out_of_order);
  fprintf(stderr, "    %d requests in %llu writes\n", NPIPE,
          (unsigned long long)dl_aconn_batches(s.c));
  CHECK(dl_aconn_batches(s.c) < NPIPE / 10);
  setup_close(&s);
}
TD_DRIVERS(pipelined_evals)

/* One eval on s, answered (rc 0 unless want_err). */
static bool eval_one(setup *s, int script, int nkeys, const char **keys,
                     int nargs, const char **args, got *g) {
  int err = 0;
  memset(g, 0, sizeof *g);
  return dl_aconn_eval(s->c, script, nkeys, keys, nargs, args, 0, on_reply, g,
                       &err) != NULL &&
         td_run_until(&s->t, &g->done, 3000);
}

static bool flush_scripts(setup *s) {
  got g = {0};
  int err = 0;
  const char *flush[] = {"SCRIPT", "FLUSH"};
  return send_cmd(s, &g, 0, 2, flush, &err) != NULL &&
         td_run_until(&s->t, &g.done, 3000);
}

/* dl_aconn_eval: a script's first use on a connection goes behind a SCRIPT
 * LOAD of its body (so nothing sent behind it can run first), then
 * EVALSHA; after SCRIPT FLUSH, the NOSCRIPT's request once more as EVAL,
 * with its keys and arguments. */
static void eval_noscript(int kind) {
  setup s;
  CHECK_RC(setup_open(&s, kind), 0);
  got g;
  freeReplyObject(th_cmd(&th_srv, "SCRIPT FLUSH"));
  freeReplyObject(th_cmd(&th_srv, "CONFIG RESETSTAT"));
  const char *keys[] = {"a", "a:t", "a:q", "a:s", "a:h"};
  for (int round = 0; round < 2; round++) {
    CHECK(eval_one(&s, DL_SCRIPT_LOCK_INSPECT, 5, keys, 0, NULL, &g));
    CHECK_RC(g.rc, 0);
    CHECK_EQ(g.calls, 1);
  }
  CHECK_EQ(th_calls(&th_srv, "script|load"), 1); /* the first use's */
  CHECK_EQ(th_calls(&th_srv, "evalsha"), 2);     /* no NOSCRIPT */
  CHECK_EQ(th_calls(&th_srv, "eval"), 0);
  /* Flushed behind the connection's back: NOSCRIPT, then EVAL once. */
  CHECK(flush_scripts(&s));
  freeReplyObject(th_cmd(&th_srv, "CONFIG RESETSTAT"));
  for (int round = 0; round < 2; round++) {
    CHECK(eval_one(&s, DL_SCRIPT_LOCK_INSPECT, 5, keys, 0, NULL, &g));
    CHECK_RC(g.rc, 0);
    CHECK_EQ(g.calls, 1);
  }
  CHECK_EQ(th_calls(&th_srv, "eval"), 1);   /* after NOSCRIPT, once */
  CHECK_EQ(th_calls(&th_srv, "evalsha"), 2); /* the first failed */
  /* An error reply comes as its code. */
  const char *bad[] = {"k"};
  freeReplyObject(th_cmd(&th_srv, "SET k v"));
  CHECK(eval_one(&s, DL_SCRIPT_LOCK_INSPECT, 1, bad, 0, NULL, &g));
  CHECK(g.rc < 0);
  /* The EVAL carries the EVALSHA's keys and arguments: a lock taken. */
  const char *wkeys[] = {"w", "w:t", "w:h"}, *args[] = {"10000", "o:1"};
  CHECK(eval_one(&s, DL_SCRIPT_LOCK_ACQUIRE, 3, wkeys, 2, args, &g));
  CHECK_RC(g.rc, 0); /* loaded here, then flushed */
  freeReplyObject(th_cmd(&th_srv, "DEL w w:t w:h"));
  CHECK(flush_scripts(&s));
  freeReplyObject(th_cmd(&th_srv, "CONFIG RESETSTAT"));
  const char *lkeys[] = {"b", "b:t", "b:h"};
  CHECK(eval_one(&s, DL_SCRIPT_LOCK_ACQUIRE, 3, lkeys, 2, args, &g));
  CHECK_RC(g.rc, 0);
  CHECK(g.num > 0); /* the token */
  CHECK_EQ(th_cmd_int(&th_srv, "HEXISTS b o:1"), 1);
  CHECK(th_cmd_int(&th_srv, "PTTL b") > 5000);
  CHECK_EQ(th_calls(&th_srv, "eval"), 1);
  freeReplyObject(th_cmd(&th_srv, "DEL b b:t"));
  setup_close(&s);
}
TD_DRIVERS(eval_noscript)

/* A deadline fires while the server is stopped; its late reply, after
 * SIGCONT, is dropped, and the next request gets its own reply. */
static void deadline_late_reply(int kind) {
  setup s;
  CHECK_RC(setup_open(&s, kind), 0);
  got g, g2;
  int err = 0;
  CHECK(ping(&s, &g, 0, &err) != NULL);
  CHECK(td_run_until(&s.t, &g.done, 3000));
  th_redis_kill(&th_srv, SIGSTOP);
  const char *argv[] = {"INCR", "n"};
  int64_t t0 = th_now_ms();
  CHECK(send_cmd(&s, &g, th_now_ms() + 200, 2, argv, &err) != NULL);
  CHECK(td_run_until(&s.t, &g.done, 3000));
  CHECK_RC(g.rc, DLOCK_ETIMEDOUT);
  CHECK(th_now_ms() - t0 >= 190);
  th_redis_kill(&th_srv, SIGCONT);
  const char *get[] = {"GET", "n"};
  CHECK(send_cmd(&s, &g2, 0, 2, get, &err) != NULL);
  CHECK(td_run_until(&s.t, &g2.done, 3000));
  CHECK_RC(g2.rc, 0);
  CHECK(strcmp(g2.str, "1") == 0); /* its own reply, not INCR's */
  td_run_for(&s.t, 50);
  CHECK_EQ(g.calls, 1);
  setup_close(&s);
}
TD_DRIVERS(deadline_late_reply)

/* The server restarts: a request in flight fails with DLOCK_ECONNLOST; the
 * next one reconnects (a new connection, with the handshake). */
static void reconnect(int kind) {
  setup s;
  CHECK_RC(setup_open(&s, kind), 0);
  got g;
  int err = 0;
  const char *id[] = {"CLIENT", "ID"};
  CHECK(send_cmd(&s, &g, 0, 2, id, &err) != NULL);
  CHECK(td_run_until(&s.t, &g.done, 3000));
  CHECK(g.num > 0);
  th_redis_kill(&th_srv, SIGSTOP);
  got lost;
  CHECK(ping(&s, &lost, 0, &err) != NULL);
  td_run_for(&s.t, 50); /* written */
  CHECK_EQ(th_redis_restart(&th_srv), 0);
  CHECK(td_run_until(&s.t, &lost.done, 3000));
  CHECK_RC(lost.rc, DLOCK_ECONNLOST);
  td_run_for(&s.t, 50);
  int64_t end = th_now_ms() + 3000;
  bool ok = false;
  while (!ok && th_now_ms() < end) { /* through any backoff */
    dl_areq *r = ping(&s, &g, 0, &err);
    if (r == NULL) {
      td_run_for(&s.t, 20);
      continue;
    }
    CHECK(td_run_until(&s.t, &g.done, 3000));
    ok = g.rc == 0 && strcmp(g.str, "PONG") == 0;
  }
  CHECK(ok);
  const char *name[] = {"CLIENT", "GETNAME"};
  CHECK(send_cmd(&s, &g, 0, 2, name, &err) != NULL);
  CHECK(td_run_until(&s.t, &g.done, 3000));
  CHECK(strcmp(g.str, "dlock-async-test") == 0);
  setup_close(&s);
}
TD_DRIVERS(reconnect)

/* Requests sent while the server is down fail with the connect's error;
 * then the backoff refuses at once. */
static void connect_refused(int kind) {
  setup s;
  CHECK_RC(setup_open(&s, kind), 0);
  th_redis_kill(&th_srv, SIGKILL);
  got g;
  int err = 0;
  dl_areq *r = ping(&s, &g, 0, &err);
  int first = err;
  if (r != NULL) { /* failed later, in the loop */
    CHECK(td_run_until(&s.t, &g.done, 3000));
    first = g.rc;
  }
  /* Refused, or (a listener's socket not yet gone) closed at once. */
  CHECK(first == DLOCK_ECONNECT || first == DLOCK_ECONNLOST);
  got g2;
  CHECK(ping(&s, &g2, 0, &err) == NULL); /* within the backoff */
  CHECK_RC(err, first);
  CHECK_EQ(g2.calls, 0);
  CHECK(g.calls <= 1);
  /* Positive control: with the server back, after the backoff, it works. */
  CHECK_EQ(th_redis_restart(&th_srv), 0);
  td_run_for(&s.t, 120);
  CHECK(ping(&s, &g2, 0, &err) != NULL);
  CHECK(td_run_until(&s.t, &g2.done, 3000));
  CHECK(strcmp(g2.str, "PONG") == 0);
  setup_close(&s);
}
TD_DRIVERS(connect_refused)

/* Cancel: of a request in flight (its reply dropped) and of one not yet
 * written; the others complete. */
static void cancel(int kind) {
  setup s;
  CHECK_RC(setup_open(&s, kind), 0);
  got a, b, c;
  int err = 0;
  CHECK(ping(&s, &a, 0, &err) != NULL);
  CHECK(td_run_until(&s.t, &a.done, 3000));
  th_redis_kill(&th_srv, SIGSTOP);
  CHECK(ping(&s, &a, 0, &err) != NULL);
  const char *incr[] = {"INCR", "n"};
  dl_areq *rb = send_cmd(&s, &b, 0, 2, incr, &err);
  CHECK(rb != NULL);
  td_run_for(&s.t, 30); /* both written */
  const char *get[] = {"GET", "n"};
  dl_areq *rc2 = send_cmd(&s, &c, 0, 2, get, &err);
  dl_areq_cancel(rb);
  CHECK(rc2 != NULL);
  got d;
  dl_areq *rd = ping(&s, &d, 0, &err); /* queued behind, then cancelled */
  CHECK(rd != NULL);
  dl_areq_cancel(rd);
  th_redis_kill(&th_srv, SIGCONT);
  CHECK(td_run_until(&s.t, &c.done, 3000));
  CHECK(a.done && strcmp(a.str, "PONG") == 0);
  CHECK(strcmp(c.str, "1") == 0); /* INCR ran; its reply went nowhere */
  td_run_for(&s.t, 50);
  CHECK_EQ(b.calls, 0);
  CHECK_EQ(d.calls, 0);
  setup_close(&s);
}
TD_DRIVERS(cancel)

/* Close with requests pending: every callback once, DLOCK_ECLOSED; a send
 * from inside one is refused. */
typedef struct closer {
  int calls, closed;
  dl_aconn *c;
  int resend_err;
} closer;

static void on_close_reply(void *ud, int rc, redisReply *r) {
  closer *cl = ud;
  cl->calls++;
  if (rc == DLOCK_ECLOSED) cl->closed++;
  if (r) freeReplyObject(r);
  if (cl->calls == 1) {
    const char *argv[] = {"PING"};
    size_t len = 4;
    int err = 0;
    if (dl_aconn_send(cl->c, 1, argv, &len, 0, on_close_reply, cl, &err) ==
        NULL)
      cl->resend_err = err;
  }
}

static void close_pending(int kind) {
  setup s;
  CHECK_RC(setup_open(&s, kind), 0);
  got g;
  int err = 0;
  CHECK(ping(&s, &g, 0, &err) != NULL);
  CHECK(td_run_until(&s.t, &g.done, 3000));
  th_redis_kill(&th_srv, SIGSTOP);
  closer cl = {.c = s.c};
  const char *argv[] = {"PING"};
  size_t len = 4;
  for (int i = 0; i < 10; i++) {
    CHECK(dl_aconn_send(s.c, 1, argv, &len, 0, on_close_reply, &cl, &err) !=
          NULL);
    if (i == 4) td_run_for(&s.t, 20); /* some written, some not */
  }
  CHECK_EQ(cl.calls, 0);
  dl_aconn_free(s.c);
  s.c = NULL;
  CHECK_EQ(cl.calls, 10);
  CHECK_EQ(cl.closed, 10);
  CHECK_RC(cl.resend_err, DLOCK_ECLOSED);
  td_run_for(&s.t, 30);
  CHECK_EQ(cl.calls, 10);
  th_redis_kill(&th_srv, SIGCONT);
  setup_close(&s);
}
TD_DRIVERS(close_pending)

/* Freeing the connection from inside a callback, with replies still to
 * deliver from the same read. */
typedef struct freer {
  dl_aconn *c;
  int calls;
} freer;

static void on_free_reply(void *ud, int rc, redisReply *r) {
  freer *f = ud;
  f->calls++;
  if (r) freeReplyObject(r);
  if (rc == 0 && f->c) {
    dl_aconn *c = f->c;
    f->c = NULL;
    dl_aconn_free(c);
  }
}

static void free_in_callback(int kind) {
  setup s;
  CHECK_RC(setup_open(&s, kind), 0);
  freer f = {.c = s.c};
  const char *argv[] = {"PING"};
  size_t len = 4;
  int err = 0;
  for (int i = 0; i < 5; i++)
    CHECK(dl_aconn_send(s.c, 1, argv, &len, 0, on_free_reply, &f, &err) !=
          NULL);
  int64_t end = th_now_ms() + 3000;
  while (f.calls < 5 && th_now_ms() < end) td_once(&s.t, 50);
  CHECK_EQ(f.calls, 5); /* one reply, then four DLOCK_ECLOSED */
  s.c = NULL;
  setup_close(&s);
}
TD_DRIVERS(free_in_callback)

/* Many replies handled in one read: what their callbacks send goes out
 * every 16 of them, while the rest are handled, not at the round's end
 * alone (the server runs it meanwhile). 64 ECHOs go out in one write and
 * the server answers them in one; each callback sends one more, and the
 * last callback must find three of those writes made before it. */
enum { NWAVE = 64 };
typedef struct wave {
  setup *s;
  int answered, fails, done;
  uint64_t batches_at_last; /* the writes made when the 64th was handled */
} wave;

static void on_wave_next(void *ud, int rc, redisReply *r) {
  wave *w = ud;
  if (rc != 0 || r == NULL || r->type != REDIS_REPLY_STRING) w->fails++;
  if (r) freeReplyObject(r);
  if (++w->answered == 2 * NWAVE) w->done = 1;
}

static void on_wave(void *ud, int rc, redisReply *r) {
  wave *w = ud;
  if (rc != 0 || r == NULL || r->type != REDIS_REPLY_STRING) w->fails++;
  if (r) freeReplyObject(r);
  if (++w->answered == NWAVE) w->batches_at_last = dl_aconn_batches(w->s->c);
  const char *argv[] = {"ECHO", "next"};
  size_t lens[] = {4, 4};
  int err = 0;
  if (dl_aconn_send(w->s->c, 2, argv, lens, 0, on_wave_next, w, &err) == NULL)
    w->fails++;
}

static void writes_within_a_read(int kind) {
  setup s;
  CHECK_RC(setup_open_warm(&s, kind), 0);
  int err = 0;
  wave w = {&s, 0, 0, 0, 0};
  uint64_t b0 = dl_aconn_batches(s.c);
  for (int i = 0; i < NWAVE; i++) {
    const char *argv[] = {"ECHO", "first"};
    size_t lens[] = {4, 5};
    CHECK(dl_aconn_send(s.c, 2, argv, lens, 0, on_wave, &w, &err) != NULL);
  }
  CHECK(td_run_until(&s.t, &w.done, 5000));
  CHECK_EQ(w.fails, 0);
  CHECK_EQ(w.answered, 2 * NWAVE);
  fprintf(stderr, "    %d replies in one read: %llu writes before the last "
          "was handled, %llu in all\n", NWAVE,
          (unsigned long long)(w.batches_at_last - b0),
          (unsigned long long)(dl_aconn_batches(s.c) - b0));
  /* One write carried the 64; its replies came in one read unless the
   * server's answer was split, which only adds writes. */
  CHECK(w.batches_at_last - b0 >= 1 + NWAVE / 16 - 1);
  setup_close(&s);
}
TD_DRIVERS(writes_within_a_read)

/* A chain of requests, each sent from the callback of the one before (as
 * a lock's release follows its acquire): each goes out at the end of the
 * dispatch without the loop being asked for writability, is read once
 * (no read that finds nothing after the reply), and its deadline does
 * not re-arm the built-in driver's timer. Before: two watch changes, two
 * reads and two timer armings per request. */
enum { NCHAIN = 200 };
typedef struct chain {
  setup *s;
  int left, fails, done;
} chain;

static void on_chain(void *ud, int rc, redisReply *r) {
  chain *ch = ud;
  if (rc != 0 || r == NULL || r->type != REDIS_REPLY_STATUS) ch->fails++;
  if (r) freeReplyObject(r);
  if (--ch->left == 0) {
    ch->done = 1;
    return;
  }
  const char *argv[] = {"PING"};
  size_t len = 4;
  int err = 0;
  if (dl_aconn_send(ch->s->c, 1, argv, &len, 0, on_chain, ch, &err) == NULL) {
    ch->fails++;
    ch->done = 1;
  }
}

static void chained_requests(int kind) {
  setup s;
  CHECK_RC(setup_open_warm(&s, kind), 0);
  uint64_t w0, t0, w1, t1;
  dl_loop_hook_calls(s.t.lp, &w0, &t0);
  uint64_t r0 = dl_aconn_reads(s.c), b0 = dl_aconn_batches(s.c);
  chain ch = {&s, NCHAIN + 1, 0, 0};
  on_chain(&ch, 0, NULL); /* the first PING (no reply: one fail) */
  CHECK(td_run_until(&s.t, &ch.done, 10000));
  CHECK_EQ(ch.fails, 1);
  dl_loop_hook_calls(s.t.lp, &w1, &t1);
  uint64_t reads = dl_aconn_reads(s.c) - r0;
  fprintf(stderr,
          "    %d requests: %llu watch changes, %llu timer "
          "armings, %llu reads, %llu writes\n",
          NCHAIN, (unsigned long long)(w1 - w0), (unsigned long long)(t1 - t0),
          (unsigned long long)reads,
          (unsigned long long)(dl_aconn_batches(s.c) - b0));
  CHECK(w1 - w0 <= 2); /* the first, sent outside a dispatch */
  /* Not one per request on the built-in driver (a timerfd_settime); a
   * caller's loop is disarmed whenever no timer is left (in-process). */
  if (kind == TD_BUILTIN) CHECK(t1 - t0 <= 4);
  CHECK(reads <= NCHAIN + 10); /* spurious wake-ups aside */
  setup_close(&s);
}
TD_DRIVERS(chained_requests)

TH_MAIN(TD_T(ping_round_trip), TD_T(pipelined_evals), TD_T(eval_noscript),
        TD_T(deadline_late_reply), TD_T(reconnect), TD_T(connect_refused),
        TD_T(cancel), TD_T(close_pending), TD_T(free_in_callback),
        TD_T(chained_requests), TD_T(writes_within_a_read))
