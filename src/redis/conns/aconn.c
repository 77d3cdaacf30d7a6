/* aconn.c: the pipelined command connection of conn.c for an event loop:
 * nothing blocks and no thread waits; each request ends in its callback.
 *
 * Requests move along three queues: outq (not yet in the write buffer),
 * batch (formatted into the write buffer, not yet all handed to the
 * kernel) and infl (handed to the kernel, at least in part: its reply is
 * the next one that comes, in order). A connection lost fails infl (the
 * server may have run them: never sent twice) and puts batch back at the
 * head of outq for the next connection. Requests that sends queue during
 * one round of the loop go out in one write (automatic pipelining, as in
 * conn.c): at the end of the round when they are sent from a callback
 * (and every MID_FLUSH replies while many are handled in one read), else
 * when the socket is next writable; writability is watched for only
 * while a write is unfinished, and a read stops at a short read of a
 * plain socket (the loop's readiness is level-triggered): a request costs
 * no epoll_ctl and no read that finds nothing.
 *
 * A request that times out or is cancelled stays on its queue, without a
 * callback, until its reply comes and is dropped (or it is dropped unsent):
 * the replies of the others still match.
 *
 * Callbacks run from the loop's dispatch. Any of them may send, cancel, or
 * free the connection: `depth` counts the dispatches under way, and the
 * struct is freed when the last one returns.
 *
 * Here the connection (connect, handshake, writes, replies, push mode);
 * the requests, their queues and deadlines are in areq.c.
 *
 * Push mode (dl_aconn_set_push), for a subscriber: every reply goes to the
 * push hooks instead of a request, a request is done once written, and the
 * connection stays up by itself (it reconnects after a loss, and after a
 * failed connect once the backoff has run). */
#include "aconn.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <string.h>

static const char PING[] = "*1\r\n$4\r\nPING\r\n";
#define PING_LEN (sizeof PING - 1)
static const char ASKING[] = "*1\r\n$6\r\nASKING\r\n";
#define ASKING_LEN (sizeof ASKING - 1)
/* Replies handled between two writes at most while many come at once. */
#define MID_FLUSH 16
/* Bytes formatted into one write at most. */
#define BATCH_MAX (256 * 1024)

/* r's bit in c->loaded: a script and its sharded variant apart. */
static uint64_t script_bit(const dl_areq *r) {
  _Static_assert(2 * DL_SCRIPT_COUNT <= 64, "loaded holds every variant");
  int id = r->script & ~(DL_EVAL_SHARDED | DL_EVAL_WAKE_FIRST);
  return (uint64_t)1 << (id + ((r->script & DL_EVAL_SHARDED) ? DL_SCRIPT_COUNT
                                                              : 0));
}

/* Closes the socket; the queues stay. */
static void drop_socket(dl_aconn *c) {
  c->loaded = 0; /* the next server (or the same restarted) knows none */
  dl_watch_free(c->w);
  c->w = NULL;
  dl_io_close(c->io);
  c->io = NULL;
  if (c->rd) redisReaderFree(c->rd);
  c->rd = NULL;
  dl_handshake_clear(&c->hs);
  dl_timer_stop(c->lp, &c->connect_timer);
  c->wlen = c->woff = 0;
  c->want_r = c->want_w = 0;
  c->state = A_DOWN;
}


/* A connect failed: what waits for it fails too, and the next try waits
 * out the backoff (reconnect_min_ms, doubling to reconnect_max_ms). */
static void connect_failed(dl_aconn *c, int rc, const char *msg) {
  drop_socket(c);
  set_msg(c, rc, msg);
  c->next_connect_ms = dl_now_ms() + dl_conn_backoff(c->cfg, &c->backoff_ms);
  dl_aq_fail(c, &c->outq, rc);
  if (c->push.reply && !c->closed)
    dl_timer_start(c->lp, &c->retry_timer, c->next_connect_ms);
}

/* The connection broke: what the server may have run fails (never sent
 * twice), what it cannot have seen goes out on the next connection, at
 * once (conn.c retries at once, then backs off). */
static void conn_lost(dl_aconn *c, int rc, const char *msg) {
  /* Reset: nothing left unsent reaches the server after the next
   * connection's requests (dl_io_abort). */
  dl_io_abort(c->io);
  drop_socket(c);
  set_msg(c, rc, msg);
  while (c->batch.tail) { /* back to the head of outq, in order */
    dl_areq *r = c->batch.tail;
    dl_aq_del(&c->batch, r);
    if (r->fn == NULL) {
      dl_aq_free(r);
      continue;
    }
    r->next = c->outq.head;
    r->prev = NULL;
    if (c->outq.head) c->outq.head->prev = r;
    else c->outq.tail = r;
    c->outq.head = r;
    r->where = Q_OUT;
  }
  c->next_connect_ms = dl_now_ms();
  dl_aq_fail(c, &c->infl, DLOCK_ECONNLOST);
  if (c->push.reply && !c->closed) c->push.down(c->push.ud);
  if (!c->closed && c->state == A_DOWN && (c->outq.head || c->push.reply))
    dl_aconn_start_connect(c);
}

/* Watches for what the state needs. */
void dl_aconn_update_watch(dl_aconn *c) {
  if (c->w == NULL || c->state == A_CONNECTING) return; /* step's to say */
  int ev = DL_EV_READ | c->want_r | c->want_w;
  if (c->state == A_UP && (c->woff < c->wlen || c->outq.head))
    ev |= DL_EV_WRITE;
  if (c->state == A_HANDSHAKE && c->hs_off < c->hs.len) ev |= DL_EV_WRITE;
  if (dl_watch_set(c->w, ev) != 0)
    conn_lost(c, DLOCK_ECONNLOST, "the event loop cannot watch the socket");
}

/* Formats what outq holds into the write buffer (up to BATCH_MAX). */
static bool fill(dl_aconn *c) {
  c->wlen = c->woff = 0;
  while (c->outq.head && c->wlen < BATCH_MAX) {
    dl_areq *r = c->outq.head;
    /* The script's first use here: its SCRIPT LOAD goes first. */
    const dl_script *ld = r->script >= 0 && r->sha &&
                                  !(c->loaded & script_bit(r))
                              ? dl_script_of(r->script)
                              : NULL;
    size_t ldlen = ld ? strlen(ld->body) : 0;
    char ldhead[64];
    int ldh = ld ? snprintf(ldhead, sizeof ldhead,
                            "*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n$%zu\r\n",
                            ldlen)
                 : 0;
    size_t need = c->wlen + r->len + (r->ping ? PING_LEN : 0) +
                  (r->asking ? ASKING_LEN : 0) +
                  (ld ? (size_t)ldh + ldlen + 2 : 0);
    if (need > c->wcap) {
      size_t cap = c->wcap ? c->wcap : 16384;
      while (cap < need) cap *= 2;
      char *b = realloc(c->wbuf, cap);
      if (b == NULL) return false;
      c->wbuf = b;
      c->wcap = cap;
    }
    r->start = c->wlen;
    if (r->ping) {
      memcpy(c->wbuf + c->wlen, PING, PING_LEN);
      c->wlen += PING_LEN;
    }
    r->load_out = ld != NULL;
    if (ld) { /* before ASKING, which goes right before its command */
      memcpy(c->wbuf + c->wlen, ldhead, (size_t)ldh);
      memcpy(c->wbuf + c->wlen + ldh, ld->body, ldlen);
      memcpy(c->wbuf + c->wlen + ldh + ldlen, "\r\n", 2);
      c->wlen += (size_t)ldh + ldlen + 2;
      c->loaded |= script_bit(r);
    }
    if (r->asking) {
      memcpy(c->wbuf + c->wlen, ASKING, ASKING_LEN);
      c->wlen += ASKING_LEN;
      r->asking_out = true;
    }
    memcpy(c->wbuf + c->wlen, r->cmd, r->len);
    c->wlen += r->len;
    dl_aq_del(&c->outq, r);
    dl_aq_push(&c->batch, r, Q_BATCH);
  }
  if (c->wlen) c->batches++;
  return true;
}

static void flush(dl_aconn *c);

static void on_flush(void *ud) {
  dl_aconn *c = ud;
  if (c->closed || c->state != A_UP) return;
  enter(c);
  flush(c);
  if (!c->closed) dl_aconn_update_watch(c);
  leave(c);
}

void dl_aconn_flush_soon(dl_aconn *c) {
  if (c->state != A_UP || c->woff < c->wlen ||
      !dl_defer_add(c->lp, &c->flush_defer))
    dl_aconn_update_watch(c);
}

/* Writes what it can of outq. */
static void flush(dl_aconn *c) {
  c->want_w = 0;
  for (;;) {
    if (c->woff == c->wlen && !fill(c)) {
      conn_lost(c, DLOCK_ENOMEM, "out of memory");
      return;
    }
    if (c->wlen == 0) return;
    int want;
    int n = dl_io_try_write(c->io, c->wbuf + c->woff, c->wlen - c->woff,
                            &want);
    if (n < 0) {
      conn_lost(c, DLOCK_ECONNLOST, "connection lost while writing");
      return;
    }
    c->woff += (size_t)n;
    /* Handed to the kernel, at least in part: its reply is awaited. */
    while (c->batch.head && c->batch.head->start < c->woff) {
      dl_areq *r = c->batch.head;
      dl_aq_del(&c->batch, r);
      if (c->push.reply) dl_aq_finish(c, r, 0, NULL); /* no reply is its */
      else dl_aq_push(&c->infl, r, Q_INFL);
    }
    if (c->woff < c->wlen) {
      if (want == DL_EV_READ) c->want_w = DL_EV_READ;
      return;
    }
  }
}


/* A reply for the oldest request in flight. */
static void on_reply(dl_aconn *c, redisReply *reply) {
  dl_areq *r = c->infl.head;
  if (r->ping) { /* the PONG ahead of it */
    r->ping = false;
    freeReplyObject(reply);
    return;
  }
  if (r->load_out) { /* SCRIPT LOAD's: a refusal shows as NOSCRIPT */
    r->load_out = false;
    freeReplyObject(reply);
    return;
  }
  if (r->asking_out) { /* ASKING's OK (an error shows in the command's) */
    r->asking_out = false;
    freeReplyObject(reply);
    return;
  }
  dl_aq_del(&c->infl, r);
  if (r->fn && r->script >= 0 && r->sha && dl_reply_noscript(reply)) {
    /* SCRIPT FLUSH: the body once, and every script's next first use
     * with its body. */
    c->loaded = script_bit(r); /* r's goes with its body now */
    freeReplyObject(reply);
    dl_aq_resend_eval(c, r);
    return;
  }
  if (r->fn && r->script >= 0 && !r->ro_resent && c->cfg->ep.master_name &&
      dl_reply_readonly(reply)) {
    /* Sentinel: the server turned replica (a failover not heard of). The
     * script wrote nothing (a replica refuses its first write): it goes
     * once more, on the next connection, to the master named then;
     * read_replies drops this one after this reply. */
    freeReplyObject(reply);
    r->ro_resent = true;
    r->ping = false;
    dl_aq_push(&c->outq, r, Q_OUT);
    c->readonly = true;
    return;
  }
  int rc = 0;
  if (r->fn && (r->script >= 0 || r->check_errors) && !r->keep_errors)
    rc = dl_reply_check(c->cfg->err_owner, &reply);
  dl_aq_answer(c, r, rc, reply); /* a server's error: its detail is set */
}

static void became_up(dl_aconn *c);

/* Reads what came and completes requests; false if the socket failed. */
static void read_replies(dl_aconn *c) {
  char buf[16384];
  unsigned handled = 0;
  c->want_r = 0;
  while (!c->closed && c->io) {
    int want;
    int n = dl_io_try_read(c->io, buf, sizeof buf, &want);
    c->reads++;
    if (n == 0) {
      if (want == DL_EV_WRITE) c->want_r = DL_EV_WRITE;
      return;
    }
    if (n < 0) {
      char m[256];
      if (c->state == A_HANDSHAKE)
        connect_failed(c, dl_handshake_ioerr(&c->hs, c->cfg, false, n, m,
                                             sizeof m),
                       m);
      else
        conn_lost(c, DLOCK_ECONNLOST, "connection lost while reading");
      return;
    }
    if (redisReaderFeed(c->rd, buf, (size_t)n) != REDIS_OK) {
      conn_lost(c, DLOCK_EPROTO, "malformed reply from the server");
      return;
    }
    /* Less than asked of a plain socket: it is empty now, and the loop
     * says when more comes. (TLS may hold a record read already.) */
    bool last = (size_t)n < sizeof buf && !dl_io_tls(c->io);
    for (;;) {
      void *rep = NULL;
      if (redisReaderGetReply(c->rd, &rep) != REDIS_OK) {
        if (c->state == A_HANDSHAKE) {
          char m[256];
          dl_handshake_ioerr(&c->hs, c->cfg, false, DLOCK_EPROTO, m, sizeof m);
          connect_failed(c, DLOCK_EPROTO, m);
        } else {
          conn_lost(c, DLOCK_EPROTO, "malformed reply from the server");
        }
        return;
      }
      if (rep == NULL) break;
      if (c->state == A_HANDSHAKE) {
        if (dl_handshake_reply(&c->hs, c->cfg, rep, c->hs_msg,
                               sizeof c->hs_msg)) {
          if (c->hs.rc != 0) {
            char m[256];
            snprintf(m, sizeof m, "%s", c->hs_msg);
            connect_failed(c, c->hs.rc, m);
            return;
          }
          became_up(c);
          if (c->closed || c->io == NULL) return;
        }
        continue;
      }
      if (c->push.reply) {
        c->push.reply(c->push.ud, rep);
        if (c->closed || c->io == NULL) return;
        continue;
      }
      if (c->infl.head == NULL) { /* a reply nobody asked for */
        freeReplyObject(rep);
        conn_lost(c, DLOCK_EPROTO, "malformed reply from the server");
        return;
      }
      on_reply(c, rep);
      if (c->closed || c->io == NULL) return;
      if (c->readonly) {
        c->readonly = false;
        conn_lost(c, DLOCK_ECONNLOST, "the server is a replica now "
                  "(READONLY): reconnecting to the master");
        return;
      }
      /* Many replies at once: what their callbacks sent goes out now,
       * every MID_FLUSH of them, so the server runs it while the rest
       * are handled here rather than waiting for the round's end (the
       * two would otherwise take turns on the cores). */
      if (++handled % MID_FLUSH == 0 && c->outq.head && c->woff == c->wlen) {
        flush(c);
        if (c->closed || c->io == NULL) return;
      }
    }
    if (last) return;
  }
}

/* Connected and past the handshake. */
static void became_up(dl_aconn *c) {
  c->state = A_UP;
  c->backoff_ms = c->cfg->reconnect_min_ms;
  if (c->was_up && c->cfg->reconnects)
    atomic_fetch_add_explicit(c->cfg->reconnects, 1, memory_order_relaxed);
  c->was_up = true;
  dl_timer_stop(c->lp, &c->connect_timer);
  if (c->push.reply) c->push.up(c->push.ud);
}

static void on_ready(void *ud, int events);

/* The socket is ready (or the connect advanced): do what the state
 * wants. */
static void step(dl_aconn *c, int events) {
  if (c->state == A_CONNECTING) {
    char m[256] = "";
    int rc = dl_io_step(c->io, m, sizeof m);
    if (rc < 0) {
      connect_failed(c, rc, m);
      return;
    }
    if (c->w == NULL || dl_io_fd(c->io) != c->w_fd) {
      /* The first socket, or the next address's. */
      dl_watch_free(c->w);
      c->w = NULL;
      c->w_fd = dl_io_fd(c->io);
      if (dl_watch_new(c->lp, c->w_fd, on_ready, c, &c->w) != 0) {
        connect_failed(c, DLOCK_ENOMEM, "out of memory");
        return;
      }
    }
    if (rc > 0) {
      if (dl_watch_set(c->w, rc) != 0)
        connect_failed(c, DLOCK_ECONNECT,
                       "the event loop cannot watch the socket");
      return;
    }
    /* Connected: the handshake, if any. */
    c->rd = redisReaderCreate();
    if (c->rd == NULL ||
        dl_handshake_init(&c->hs, c->cfg, m, sizeof m) != 0) {
      connect_failed(c, DLOCK_ENOMEM, "out of memory");
      return;
    }
    c->hs_off = 0;
    if (c->hs.ncmd == 0) {
      became_up(c);
      if (c->closed || c->io == NULL) return;
    } else {
      c->state = A_HANDSHAKE;
    }
    events = DL_EV_WRITE;
  }
  if (c->state == A_HANDSHAKE && c->hs_off < c->hs.len) {
    int want;
    int n = dl_io_try_write(c->io, c->hs.buf + c->hs_off,
                            c->hs.len - c->hs_off, &want);
    if (n < 0) {
      char m[256];
      dl_handshake_ioerr(&c->hs, c->cfg, true, n, m, sizeof m);
      connect_failed(c, n, m);
      return;
    }
    c->hs_off += (size_t)n;
    c->want_w = c->hs_off < c->hs.len && want == DL_EV_READ ? DL_EV_READ : 0;
  }
  if (c->state != A_CONNECTING && (events & DL_EV_READ || c->want_r))
    read_replies(c);
  if (c->state == A_UP && !c->closed) {
    dl_defer_cancel(c->lp, &c->flush_defer); /* written here */
    flush(c);
  }
  if (!c->closed) dl_aconn_update_watch(c);
}

static void on_ready(void *ud, int events) {
  dl_aconn *c = ud;
  enter(c);
  step(c, events);
  leave(c);
}

static void on_connect_timeout(void *ud) {
  dl_aconn *c = ud;
  enter(c);
  char m[256];
  if (c->state == A_HANDSHAKE)
    dl_handshake_ioerr(&c->hs, c->cfg, c->hs_off < c->hs.len,
                       DLOCK_ETIMEDOUT, m, sizeof m);
  else
    snprintf(m, sizeof m, "connect: timed out after %d ms",
             c->cfg->connect_timeout_ms);
  connect_failed(c, DLOCK_ETIMEDOUT, m);
  leave(c);
}

/* Starts a connect. Returns 0, or the code of a connect that failed at
 * once (what waited for it failed with it). */
int dl_aconn_start_connect(dl_aconn *c) {
  char m[256] = "";
  dl_target t;
  int rc = dl_conn_target(c->cfg, dl_now_ms() + c->cfg->connect_timeout_ms,
                          &t, m, sizeof m);
  c->gen = t.gen;
  if (rc == 0)
    rc = dl_io_start(&t.ep, c->cfg->tls, c->cfg->server_name, &c->io, m,
                     sizeof m);
  if (rc == 0) {
    c->state = A_CONNECTING;
    c->w_fd = -1;
    rc = dl_timer_start(c->lp, &c->connect_timer,
                        dl_now_ms() + c->cfg->connect_timeout_ms);
    if (rc != 0) snprintf(m, sizeof m, "out of memory");
  }
  if (rc != 0) {
    connect_failed(c, rc, m);
    return rc;
  }
  step(c, DL_EV_WRITE);
  return c->state == A_DOWN ? c->last_err : 0;
}

static void on_retry(void *ud) {
  dl_aconn *c = ud;
  enter(c);
  if (!c->closed && c->state == A_DOWN) dl_aconn_start_connect(c);
  leave(c);
}

int dl_aconn_new(dl_loop *lp, const dl_conn_config *cfg, dl_aconn **out) {
  *out = NULL;
  dl_aconn *c = calloc(1, sizeof *c);
  if (c == NULL) return DLOCK_ENOMEM;
  c->lp = lp;
  c->cfg = cfg;
  c->backoff_ms = cfg->reconnect_min_ms;
  c->w_fd = -1;
  dl_timer_init(&c->connect_timer, on_connect_timeout, c);
  dl_timer_init(&c->retry_timer, on_retry, c);
  dl_defer_init(&c->flush_defer, on_flush, c);
  dl_scripts_init();
  *out = c;
  return 0;
}

int dl_aconn_connect(dl_aconn *c) {
  if (c->closed) return DLOCK_ECLOSED;
  if (c->state != A_DOWN) return 0;
  c->next_connect_ms = 0;
  enter(c);
  int rc = dl_aconn_start_connect(c);
  if (rc != 0) dl_seterr(c->cfg->err_owner, rc, "%s", c->last_msg);
  leave(c);
  return rc;
}

void dl_aconn_set_push(dl_aconn *c, const dl_aconn_push *push) {
  c->push = *push;
}

void dl_aconn_reconnect(dl_aconn *c) {
  if (c->closed || c->state == A_DOWN) return;
  enter(c);
  conn_lost(c, DLOCK_ECONNLOST, "no answer to the idle PING");
  leave(c);
}

void dl_aconn_check_moved(dl_aconn *c) {
  if (c->closed || c->state == A_DOWN || !dl_target_moved(c->cfg, c->gen))
    return;
  enter(c);
  conn_lost(c, DLOCK_ECONNLOST, "the master moved (Sentinel failover)");
  leave(c);
}

uint64_t dl_aconn_batches(const dl_aconn *c) { return c->batches; }

uint64_t dl_aconn_reads(const dl_aconn *c) {
  return c->reads;
}

bool dl_aconn_up(const dl_aconn *c) { return c->state == A_UP; }

void dl_aconn_take(dl_areq *r) {
  if (r) r->take = true;
}

/* The latest deadline of a take written (at least in part) and still
 * awaited, or 0. */
static int64_t takes_due(const dl_aconn *c) {
  int64_t due = 0;
  for (const dl_areq *r = c->infl.head; r; r = r->next)
    if (r->take && r->fn && r->deadline.at > due) due = r->deadline.at;
  return due;
}

void dl_aconn_drain_takes(dl_aconn *c) {
  if (c == NULL || c->closed) return;
  enter(c);
  c->draining = true;
  for (;;) {
    int64_t due = c->state == A_UP && c->io ? takes_due(c) : 0;
    int64_t left = due ? due + 50 - dl_now_ms() : 0;
    if (left <= 0) break;
    /* A batch half written goes on (a take may be in it); TLS may want
     * the other direction for a read or a write. */
    struct pollfd pf = {.fd = dl_io_fd(c->io), .events = POLLIN};
    if (c->woff < c->wlen || c->want_r == DL_EV_WRITE) pf.events |= POLLOUT;
    int n = poll(&pf, 1, left > INT_MAX ? INT_MAX : (int)left);
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    if (c->woff < c->wlen && (pf.revents & (POLLOUT | POLLIN | POLLERR)))
      flush(c);
    if (!c->closed && c->state == A_UP && c->io &&
        (pf.revents & (POLLIN | POLLOUT | POLLHUP | POLLERR)))
      read_replies(c);
  }
  c->draining = false;
  leave(c);
}

void dl_aconn_free(dl_aconn *c) {
  if (c == NULL || c->closed) return;
  c->closed = true;
  enter(c);
  dl_timer_stop(c->lp, &c->retry_timer);
  dl_defer_cancel(c->lp, &c->flush_defer);
  drop_socket(c);
  set_msg(c, DLOCK_ECLOSED, "client closed");
  /* Every pending request's callback, once; dropped ones just go. */
  dl_aq_fail(c, &c->infl, DLOCK_ECLOSED);
  dl_aq_fail(c, &c->batch, DLOCK_ECLOSED);
  dl_aq_fail(c, &c->outq, DLOCK_ECLOSED);
  leave(c); /* frees c, unless a dispatch on it is under way */
}

/* A request made by dl_aconn_send or dl_aconn_eval is only queued: it is
 * formatted into a write at the loop's next round (flush), never within
 * the call. So its flags may still be set right after. */
dl_areq *dl_aconn_send_cluster(dl_aconn *c, bool asking, int argc,
                               const char **argv, const size_t *argvlen,
                               int64_t deadline, dl_reply_fn fn, void *ud,
                               int *err) {
  dl_areq *r = dl_aconn_send(c, argc, argv, argvlen, deadline, fn, ud, err);
  if (r) r->asking = asking;
  return r;
}

dl_areq *dl_aconn_command(dl_aconn *c, int argc, const char **argv,
                          const size_t *argvlen, int64_t deadline,
                          dl_reply_fn fn, void *ud, int *err) {
  dl_areq *r = dl_aconn_send(c, argc, argv, argvlen, deadline, fn, ud, err);
  if (r) r->check_errors = true;
  return r;
}

dl_areq *dl_aconn_eval_cluster(dl_aconn *c, bool asking, int script,
                               int nkeys, const char **keys, int nargs,
                               const char **args, int64_t deadline,
                               dl_reply_fn fn, void *ud, int *err) {
  dl_areq *r = dl_aconn_eval(c, script, nkeys, keys, nargs, args, deadline,
                             fn, ud, err);
  if (r) {
    r->asking = asking;
    r->keep_errors = true;
  }
  return r;
}
