/* conn.c: a command connection shared by many threads, which pipelines their
 * requests automatically and reconnects with backoff.
 *
 * There is no I/O thread. A thread that finds requests queued and nobody
 * writing becomes the writer and sends every queued request in one write; a
 * thread whose request is in flight and finds nobody reading becomes the
 * reader and completes every reply that arrives, in order, until its own has
 * come, then hands the reader role to the oldest request still in flight.
 * Alone, a thread writes its command and reads its reply itself (no hand-off,
 * no added latency); under load, one write and one read serve many threads.
 *
 * A request may ask for a PING (or, in a cluster, an ASKING) just ahead of
 * it, in the same write: the reader drops that reply and completes the
 * request with the next.
 *
 * Waiting costs one sleep and one wake-up per request: a waiter sleeps on
 * its request's word (park.c), and the reader completes requests and wakes
 * their threads outside the mutex, so a woken thread returns without
 * queueing for the mutex. The mutex guards the queues and the roles only. */
#include "conns.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* phase, under mu. REQ_TAKEN: off the queues, its reply being delivered. */
enum { REQ_QUEUED, REQ_INFLIGHT, REQ_TAKEN };
enum { W_RUN, W_SLEEP, W_DONE };             /* word, atomic */
enum { CONN_DOWN, CONN_CONNECTING, CONN_UP };
/* Queued requests that go out without waiting for the reader (measured
 * with dlock bench -t 64 uncontended: 8 did best, 1 and 16 worse). */
enum { EAGER = 8 };
/* A request's deadline that ran out before its reply could come gets this
 * much more once, before the connection is failed with every request on
 * it: the process was stopped (SIGSTOP, a debugger) or starved between
 * computing the deadline and reading, as a watchdog round is when its
 * process is stopped mid-round; the server had no chance to answer. (A
 * release sent beside it as the process resumed was told "no reply before
 * the command timeout" instead of DLOCK_ELOST: test_loss
 * t_stopped_holder_release_says_lost under valgrind.) */
enum { GRACE_MS = 50 };

/* Gives a request whose deadline ran out its grace, once: true if it got
 * it (*deadline moved), false if it had it already. */
static bool take_grace(bool *graced, int64_t *deadline) {
  if (*graced) return false;
  *graced = true;
  *deadline = dl_now_ms() + GRACE_MS;
  return true;
}
static const char PING[] = "*1\r\n$4\r\nPING\r\n";
static const char ASKING[] = "*1\r\n$6\r\nASKING\r\n";

struct dl_req {
  dl_req *next;
  char *cmd;
  size_t len;
  redisReply *reply;
  int err;
  int phase;
  /* PING or ASKING goes ahead of the command, in the same write; its
   * reply is dropped (dl_conn_send's and dl_conn_send_asking's contracts
   * say why). NULL: nothing. */
  const char *pre;
  /* W_RUN, W_SLEEP while its thread sleeps (set by that thread under mu;
   * a role hand-off sets it back to W_RUN under mu), W_DONE once complete. */
  atomic_int word;
  /* The waiter's and the completer's: the completer may still be waking
   * the thread when it sees W_DONE and leaves. The last one frees. */
  atomic_int refs;
};

static void req_put(dl_req *r) {
  if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) == 1) {
    free(r->cmd);
    if (r->reply) freeReplyObject(r->reply);
    free(r);
  }
}

/* A socket and the threads using it outside the mutex: the last one out of
 * a failed socket closes it. */
typedef struct iohold {
  dl_io *io;
  int refs;
  redisReader *reader;
} iohold;

struct dl_conn {
  const dl_conn_config *cfg;
  pthread_mutex_t mu;
  pthread_cond_t state_cv; /* connect finished */
  iohold *cur;
  int state;
  int64_t next_connect_ms;
  int backoff_ms;
  int last_err;
  bool last_named; /* the last connect's dl_target named (failing over) */
  bool was_up;     /* connected before: the next connect is a reconnect */
  char last_msg[256];
  dl_req *outq, *outq_tail;
  dl_req *infl, *infl_tail;
  bool writing, reading;
  int outq_len; /* requests on outq */
  uint64_t batches;
  unsigned gen; /* dl_target's gen of the connection up now */
  /* What the server up now acknowledges with (dl_conn_replicate):
   * 0 not asked yet, DL_ACK_WAIT, DL_ACK_WAITAOF; reset at each connect. */
  atomic_int ack_kind;
};

static void hold_put(iohold *h) {
  if (--h->refs == 0) {
    dl_io_close(h->io);
    if (h->reader) redisReaderFree(h->reader);
    free(h);
  }
}

int dl_conn_new(const dl_conn_config *cfg, dl_conn **out) {
  dl_conn *c = calloc(1, sizeof *c);
  if (c == NULL) return DLOCK_ENOMEM;
  c->cfg = cfg;
  pthread_mutex_init(&c->mu, NULL);
  dl_cond_init(&c->state_cv);
  c->backoff_ms = cfg->reconnect_min_ms;
  *out = c;
  return 0;
}

/* Completes r, wakes its thread if it sleeps, and lets go of r. Called by
 * whoever took r off the queues (with or without mu). */
static void complete(dl_req *r, redisReply *reply, int err) {
  r->reply = reply;
  r->err = err;
  if (atomic_exchange_explicit(&r->word, W_DONE, memory_order_acq_rel) ==
      W_SLEEP)
    dl_park_wake(&r->word);
  req_put(r);
}

/* With mu held: wakes r's thread, if it sleeps, to take a vacant role. r is
 * on a queue, so it cannot complete (nor be freed) while mu is held. */
static bool kick(dl_req *r) {
  int expect = W_SLEEP;
  if (!atomic_compare_exchange_strong(&r->word, &expect, W_RUN)) return false;
  dl_park_wake(&r->word);
  return true;
}

/* Called with mu held: fails every pending request with `err`, shuts the
 * socket (a thread blocked on it returns at once; dl_io_abort unless the
 * client closes) and marks the connection down. The next call
 * reconnects. */
static void conn_fail(dl_conn *c, int err, const char *why) {
  if (c->cur == NULL) return;
  snprintf(c->last_msg, sizeof c->last_msg, "%s", why);
  c->last_err = err;
  for (dl_req *r = c->infl; r; ) {
    dl_req *n = r->next;
    complete(r, NULL, err);
    r = n;
  }
  for (dl_req *r = c->outq; r; ) {
    dl_req *n = r->next;
    complete(r, NULL, err);
    r = n;
  }
  c->infl = c->infl_tail = c->outq = c->outq_tail = NULL;
  c->outq_len = 0;
  /* A failure resets the connection: what it still has to deliver must
   * not reach the server after the next connection's requests. A close
   * lets it go out. */
  if (err == DLOCK_ECLOSED) dl_io_shutdown(c->cur->io);
  else dl_io_abort(c->cur->io);
  hold_put(c->cur);
  c->cur = NULL;
  c->state = CONN_DOWN;
  c->next_connect_ms = dl_now_ms(); /* first retry at once, then back off */
}

static int conn_err(dl_conn *c, int err, const char *what) {
  return dl_seterr(c->cfg->err_owner, err, "%s", what);
}

/* Called with mu held; returns with mu held and the connection up, or a
 * negative code. */
static int ensure_up(dl_conn *c, int64_t deadline) {
  for (;;) {
    if (c->state == CONN_UP) return 0;
    if (c->state == CONN_CONNECTING) {
      struct timespec ts;
      dl_abstime(deadline, &ts);
      if (pthread_cond_timedwait(&c->state_cv, &c->mu, &ts) != 0 &&
          dl_now_ms() >= deadline)
        return conn_err(c, DLOCK_ETIMEDOUT, "waiting for the reconnect");
      continue;
    }
    int64_t now = dl_now_ms();
    if (now < c->next_connect_ms) {
      char m[300];
      snprintf(m, sizeof m, "%s (next reconnect in %lld ms)", c->last_msg,
               (long long)(c->next_connect_ms - now));
      return conn_err(c, c->last_err ? c->last_err : DLOCK_ECONNLOST, m);
    }
    c->state = CONN_CONNECTING;
    pthread_mutex_unlock(&c->mu);
    char msg[256] = "";
    dl_io *io = NULL;
    dl_target t;
    int rc = dl_conn_dial(c->cfg, dl_now_ms() + c->cfg->connect_timeout_ms, &t,
                          NULL, NULL, &io, msg, sizeof msg);
    iohold *h = NULL;
    if (rc == 0) {
      h = calloc(1, sizeof *h);
      if (h) h->reader = redisReaderCreate();
      if (h == NULL || h->reader == NULL) {
        free(h);
        h = NULL;
        rc = DLOCK_ENOMEM;
        snprintf(msg, sizeof msg, "out of memory");
      }
    }
    if (rc != 0) dl_io_close(io);
    pthread_mutex_lock(&c->mu);
    if (rc == 0) {
      h->io = io;
      h->refs = 1;
      c->cur = h;
      c->gen = t.gen;
      c->state = CONN_UP;
      atomic_store(&c->ack_kind, 0);
      c->backoff_ms = c->cfg->reconnect_min_ms;
      if (c->was_up && c->cfg->reconnects)
        atomic_fetch_add_explicit(c->cfg->reconnects, 1, memory_order_relaxed);
      c->was_up = true;
    } else {
      c->state = CONN_DOWN;
      c->last_err = rc;
      c->last_named = rc == DLOCK_ECONNECT && t.named;
      snprintf(c->last_msg, sizeof c->last_msg, "%s", msg);
      c->next_connect_ms =
          dl_now_ms() + dl_conn_backoff(c->cfg, &c->backoff_ms);
    }
    pthread_cond_broadcast(&c->state_cv);
    if (rc != 0) return conn_err(c, rc, msg);
  }
}

void dl_conn_drop(dl_conn *c, int err, const char *why) {
  pthread_mutex_lock(&c->mu);
  conn_fail(c, err, why);
  pthread_mutex_unlock(&c->mu);
}

bool dl_conn_failing_over(dl_conn *c) {
  pthread_mutex_lock(&c->mu);
  bool named = c->state == CONN_DOWN && c->last_named;
  pthread_mutex_unlock(&c->mu);
  return named;
}

int dl_conn_connect(dl_conn *c) {
  pthread_mutex_lock(&c->mu);
  c->next_connect_ms = 0;
  int rc = ensure_up(c, dl_now_ms() + c->cfg->connect_timeout_ms);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

/* With mu held: become the writer and send everything queued. */
static void do_write(dl_conn *c, int64_t deadline) {
  c->writing = true;
  while (c->outq != NULL && c->cur != NULL) {
    dl_req *first = c->outq;
    size_t total = 0;
    for (dl_req *r = first; r; r = r->next)
      total += r->len + (r->pre ? strlen(r->pre) : 0);
    /* The writer takes the formatted commands: once in flight a request
     * may complete (and be freed by its thread) before this write returns. */
    bool single = first->next == NULL && !first->pre;
    char *buf = single ? first->cmd : malloc(total);
    if (buf == NULL) {
      conn_fail(c, DLOCK_ENOMEM, "out of memory");
      break;
    }
    if (!single) {
      size_t off = 0;
      for (dl_req *r = first; r; r = r->next) {
        if (r->pre) {
          size_t plen = strlen(r->pre);
          memcpy(buf + off, r->pre, plen);
          off += plen;
        }
        memcpy(buf + off, r->cmd, r->len);
        off += r->len;
        free(r->cmd);
        r->cmd = NULL;
      }
    } else {
      first->cmd = NULL;
    }
    /* In flight before the write: replies may arrive before it returns. */
    if (c->infl_tail) c->infl_tail->next = first;
    else c->infl = first;
    c->infl_tail = c->outq_tail;
    for (dl_req *r = first; r; r = r->next) r->phase = REQ_INFLIGHT;
    c->outq = c->outq_tail = NULL;
    c->outq_len = 0;
    c->batches++;
    iohold *h = c->cur;
    h->refs++;
    pthread_mutex_unlock(&c->mu);
    int rc = dl_io_write(h->io, buf, total, deadline);
    free(buf);
    pthread_mutex_lock(&c->mu);
    if (rc != 0 && c->cur == h)
      conn_fail(c, rc == DLOCK_ETIMEDOUT ? DLOCK_ETIMEDOUT : DLOCK_ECONNLOST,
                rc == DLOCK_ETIMEDOUT ? "write timed out"
                                      : "connection lost while writing");
    hold_put(h);
  }
  c->writing = false;
  /* A request queued meanwhile by a thread now asleep needs a writer. */
  for (dl_req *r = c->outq; r; r = r->next)
    if (kick(r)) break;
  /* And what we wrote needs a reader. We may have written only other
   * threads' requests (ours may even be answered already, and we leave):
   * with nobody reading, their threads would sleep until the timeout. */
  if (!c->reading)
    for (dl_req *r = c->infl; r; r = r->next)
      if (kick(r)) break;
}

/* With mu held: become the reader until `mine` is done. Replies are parsed
 * outside mu (the reader role owns the hiredis reader); under mu the reader
 * only takes their requests off the in-flight queue, and it completes them
 * and wakes their threads after letting go of mu. */
static void do_read(dl_conn *c, dl_req *mine, int64_t deadline) {
  enum { BATCH = 64 };
  c->reading = true;
  iohold *h = c->cur;
  h->refs++;
  char buf[16384];
  redisReply *got[BATCH];
  dl_req *reqs[BATCH];
  bool failed = false, graced = false;
  while (!failed &&
         atomic_load_explicit(&mine->word, memory_order_acquire) != W_DONE &&
         c->cur == h) {
    pthread_mutex_unlock(&c->mu);
    int n = dl_io_read(h->io, buf, sizeof buf, deadline);
    bool perr = n > 0 && redisReaderFeed(h->reader, buf, (size_t)n) != REDIS_OK;
    if (n == DLOCK_ETIMEDOUT && take_grace(&graced, &deadline)) {
      pthread_mutex_lock(&c->mu);
      continue;
    }
    if (n < 0) {
      pthread_mutex_lock(&c->mu);
      if (c->cur == h)
        conn_fail(c, n == DLOCK_ETIMEDOUT ? DLOCK_ETIMEDOUT : DLOCK_ECONNLOST,
                  n == DLOCK_ETIMEDOUT ? "no reply before the command timeout"
                                       : "connection lost while reading");
      break;
    }
    /* Everything that came, BATCH replies at a time: nothing may stay in
     * the hiredis reader when the role passes on. */
    int ngot;
    do {
      ngot = 0;
      while (!perr && ngot < BATCH) {
        void *rep = NULL;
        if (redisReaderGetReply(h->reader, &rep) != REDIS_OK) perr = true;
        else if (rep == NULL) break;
        else got[ngot++] = rep;
      }
      pthread_mutex_lock(&c->mu);
      /* got[0..used) are matched: to reqs[0..nreq), or dropped (a PING's
       * or an ASKING's). */
      int nreq = 0, used = 0;
      if (c->cur == h)
        for (; used < ngot && c->infl; used++) {
          dl_req *r = c->infl;
          if (r->pre) {
            r->pre = NULL;
            freeReplyObject(got[used]);
            continue;
          }
          c->infl = r->next;
          if (c->infl == NULL) c->infl_tail = NULL;
          r->next = NULL;
          r->phase = REQ_TAKEN;
          got[nreq] = got[used];
          reqs[nreq++] = r;
        }
      int extra = ngot - used; /* replies nobody asked for: got[used..) */
      if (c->cur != h) {
        failed = true;
      } else if (perr || extra > 0) {
        conn_fail(c, DLOCK_EPROTO, "malformed reply from the server");
        failed = true;
      } else if (c->outq && !c->writing) {
        do_write(c, deadline); /* what queued meanwhile goes out now */
      }
      pthread_mutex_unlock(&c->mu);
      for (int i = 0; i < nreq; i++) complete(reqs[i], got[i], 0);
      for (int i = used; i < ngot; i++) freeReplyObject(got[i]);
    } while (!failed && ngot == BATCH);
    pthread_mutex_lock(&c->mu);
  }
  hold_put(h);
  c->reading = false;
  if (c->outq && !c->writing) do_write(c, deadline);
  /* Hand the reader role to the oldest request still waiting. */
  for (dl_req *r = c->infl; r; r = r->next)
    if (kick(r)) break;
}

static dl_req *conn_send(dl_conn *c, int argc, const char **argv,
                         const size_t *argvlen, const char *pre, int *err) {
  dl_req *r = calloc(1, sizeof *r);
  if (r == NULL) {
    *err = conn_err(c, DLOCK_ENOMEM, "out of memory");
    return NULL;
  }
  int len = dl_resp_format(&r->cmd, argc, argv, argvlen);
  if (len < 0) {
    free(r);
    *err = conn_err(c, DLOCK_ENOMEM, "out of memory");
    return NULL;
  }
  r->len = (size_t)len;
  r->pre = pre;
  atomic_init(&r->word, W_RUN);
  atomic_init(&r->refs, 2);
  int64_t deadline = dl_now_ms() + c->cfg->command_timeout_ms;
  pthread_mutex_lock(&c->mu);
  /* A failover since this connection was made: it may lead to the old
   * master; what is in flight there fails, this goes to the new one. */
  if (c->state == CONN_UP && dl_target_moved(c->cfg, c->gen))
    conn_fail(c, DLOCK_ECONNLOST, "the master moved (Sentinel failover)");
  int rc = ensure_up(c, deadline);
  if (rc != 0) {
    pthread_mutex_unlock(&c->mu);
    free(r->cmd);
    free(r);
    *err = rc;
    return NULL;
  }
  r->phase = REQ_QUEUED;
  if (c->outq_tail) c->outq_tail->next = r;
  else c->outq = r;
  c->outq_tail = r;
  /* Automatic pipelining: while replies are awaited, a reader is blocked on
   * the socket and will send what queued up meanwhile, in one write, as soon
   * as it wakes (at most one round trip later), unless EAGER requests are
   * waiting: then they go now, so that the server works on one batch while
   * the client completes the last. Otherwise write now: a thread alone never
   * waits. */
  c->outq_len++;
  if (!c->writing && (!(c->reading && c->infl) || c->outq_len >= EAGER))
    do_write(c, deadline);
  pthread_mutex_unlock(&c->mu);
  return r;
}

dl_req *dl_conn_send(dl_conn *c, int argc, const char **argv,
                     const size_t *argvlen, bool ping_first, int *err) {
  return conn_send(c, argc, argv, argvlen, ping_first ? PING : NULL, err);
}

dl_req *dl_conn_send_asking(dl_conn *c, int argc, const char **argv,
                            const size_t *argvlen, int *err) {
  return conn_send(c, argc, argv, argvlen, ASKING, err);
}

int dl_req_wait(dl_conn *c, dl_req *r, int64_t deadline,
                struct redisReply **reply) {
  *reply = NULL;
  bool graced = false;
  while (atomic_load_explicit(&r->word, memory_order_acquire) != W_DONE) {
    pthread_mutex_lock(&c->mu);
    if (atomic_load_explicit(&r->word, memory_order_acquire) == W_DONE) {
      pthread_mutex_unlock(&c->mu);
      break;
    }
    if (r->phase == REQ_QUEUED && !c->writing && !(c->reading && c->infl)) {
      do_write(c, deadline);
    } else if (r->phase == REQ_INFLIGHT && !c->reading) {
      do_read(c, r, deadline);
    } else {
      /* Sleep until completed or kicked to take a role. The word is
       * W_SLEEP already if the last sleep timed out. */
      int expect = W_RUN;
      atomic_compare_exchange_strong(&r->word, &expect, W_SLEEP);
      if (expect != W_DONE) {
        /* A taken request completes in moments, deadline or not. */
        bool taken = r->phase == REQ_TAKEN;
        int64_t until = taken ? dl_now_ms() + 1000 : deadline;
        pthread_mutex_unlock(&c->mu);
        int w = dl_park_wait(&r->word, W_SLEEP, until);
        pthread_mutex_lock(&c->mu);
        /* Still queued or in flight after the deadline (and its grace):
         * fail it, with everything else on this connection. */
        if (w != 0 && r->phase != REQ_TAKEN &&
            atomic_load(&r->word) != W_DONE) {
          if (!take_grace(&graced, &deadline))
            conn_fail(c, DLOCK_ETIMEDOUT,
                      "no reply before the command timeout");
        }
      }
    }
    pthread_mutex_unlock(&c->mu);
  }
  int err = r->err;
  char msg[256];
  if (err) {
    pthread_mutex_lock(&c->mu);
    snprintf(msg, sizeof msg, "%s", c->last_msg);
    pthread_mutex_unlock(&c->mu);
  }
  *reply = r->reply;
  r->reply = NULL;
  req_put(r);
  if (err) return conn_err(c, err, msg);
  return 0;
}

int dl_conn_call(dl_conn *c, int argc, const char **argv,
                 const size_t *argvlen, struct redisReply **reply) {
  int err = 0;
  *reply = NULL;
  dl_req *r = dl_conn_send(c, argc, argv, argvlen, false, &err);
  if (r == NULL) return err;
  return dl_req_wait(c, r, dl_now_ms() + c->cfg->command_timeout_ms, reply);
}

int dl_conn_ack_kind(dl_conn *c) { return atomic_load(&c->ack_kind); }

void dl_conn_set_ack_kind(dl_conn *c, int kind) {
  atomic_store(&c->ack_kind, kind);
}

uint64_t dl_conn_batches(dl_conn *c) {
  pthread_mutex_lock(&c->mu);
  uint64_t n = c->batches;
  pthread_mutex_unlock(&c->mu);
  return n;
}

void dl_conn_free(dl_conn *c) {
  if (c == NULL) return;

  pthread_mutex_lock(&c->mu);
  if (c->cur) conn_fail(c, DLOCK_ECLOSED, "client closed");
  pthread_mutex_unlock(&c->mu);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->state_cv);
  free(c);
}
