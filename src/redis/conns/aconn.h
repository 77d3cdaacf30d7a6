/* aconn.h: what the event-loop connection's two files share: aconn.c (the
 * connection: connect, handshake, writes, replies, push mode) and areq.c
 * (its requests: formatting, the three queues, deadlines, cancel). Only
 * for them. */
#ifndef DLOCK_REDIS_ACONN_H
#define DLOCK_REDIS_ACONN_H

#include "conns.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>

enum { Q_NONE, Q_OUT, Q_BATCH, Q_INFL };
enum { A_DOWN, A_CONNECTING, A_HANDSHAKE, A_UP };

typedef struct rq {
  dl_areq *head, *tail;
} rq;

struct dl_areq {
  dl_areq *prev, *next;
  dl_aconn *c;
  int where; /* Q_* */
  char *cmd; /* dl_resp_format's; kept until the reply, to resend one never written */
  size_t len;
  size_t start; /* on batch: its first byte's offset in the write buffer */
  bool ping;    /* a PING goes ahead of it; its PONG is dropped */
  /* A cluster's: ASKING goes ahead of it (after a PING, if any), its OK
   * dropped; an eval's error replies come as replies (MOVED and the rest
   * are the caller's to follow). */
  bool asking, keep_errors;
  bool asking_out; /* its ASKING written, the OK not yet read */
  /* Its script's SCRIPT LOAD went ahead of it (the script's first use on
   * the connection), the reply not yet read: dropped, an error too (the
   * EVALSHA's NOSCRIPT then says it). */
  bool load_out;
  /* A command's (dl_aconn_command): an error reply comes as its code. */
  bool check_errors;
  dl_reply_fn fn; /* NULL once timed out or cancelled */
  void *ud;
  dl_timer deadline;
  /* An eval's script, for the NOSCRIPT fallback to EVAL (made from cmd,
   * whose keys and args it keeps); script -1 for a plain command. */
  int script;
  bool ro_resent; /* went again after a READONLY reply (Sentinel) */
  bool sha;       /* sent as EVALSHA: may go once more as EVAL */
  bool take;      /* dl_aconn_take: its reply may carry a value taken */
};

struct dl_aconn {
  dl_loop *lp;
  const dl_conn_config *cfg;
  int state;
  bool was_up; /* connected before: the next connect is a reconnect */
  dl_io *io;
  dl_watch *w;
  int w_fd; /* the fd w watches */
  redisReader *rd;
  dl_handshake hs;
  size_t hs_off;     /* handshake bytes written */
  char hs_msg[256];  /* the handshake's first error reply */
  dl_timer connect_timer;
  int want_r, want_w; /* what TLS wants of a read or write beyond the usual */
  rq outq, batch, infl;
  char *wbuf;
  size_t wlen, woff, wcap;
  int64_t next_connect_ms;
  int backoff_ms;
  int last_err;
  char last_msg[256];
  int depth;   /* dispatches under way */
  bool closed; /* dl_aconn_free was called */
  bool draining; /* in dl_aconn_drain_takes: no new request */
  uint64_t batches;
  uint64_t reads;     /* read attempts, for tests */
  dl_aconn_push push; /* push mode when push.reply is set */
  dl_timer retry_timer; /* push mode: the next connect after a failure */
  unsigned gen; /* dl_target's gen of the connection made last */
  /* The scripts this connection has loaded (a bit each, script_bit): a
   * script's first use goes behind a SCRIPT LOAD of its body, so the
   * server has it in the connection's order. An EVALSHA that got NOSCRIPT
   * and went again would run after requests sent behind it (a release
   * after the same owner's next acquire, deleting the new hold). SCRIPT
   * LOAD, not EVAL: Redis 7.4 evicts scripts EVAL loaded once there are
   * 500 of them, never those loaded so. Cleared with the socket, and by a
   * NOSCRIPT (SCRIPT FLUSH). */
  uint64_t loaded;
  bool readonly; /* a READONLY reply: drop the connection after it */
  /* Requests queued from a callback go out at the end of the loop's
   * dispatch, in one write, straight away (dl_aconn_flush_soon). */
  dl_defer flush_defer;
};

/* The dispatches under way (a callback may free c: it is destroyed when
 * the last one returns), and the last error's text. */
static inline void enter(dl_aconn *c) { c->depth++; }

static inline void destroy(dl_aconn *c) {
  free(c->wbuf);
  free(c);
}

static inline void leave(dl_aconn *c) {
  if (--c->depth == 0 && c->closed) destroy(c);
}

static inline void set_msg(dl_aconn *c, int rc, const char *msg) {
  c->last_err = rc;
  snprintf(c->last_msg, sizeof c->last_msg, "%s", msg);
}

/* areq.c */
void dl_aq_push(rq *q, dl_areq *r, int where);
void dl_aq_del(rq *q, dl_areq *r);
void dl_aq_free(dl_areq *r);
/* Ends r with rc (and reply, owned by the callback); a failure's detail
 * is the connection's last message (c->last_msg). */
void dl_aq_finish(dl_aconn *c, dl_areq *r, int rc, redisReply *reply);
/* The same for a server's answer: a failure's detail is set already (the
 * server's own message, dl_reply_check), not replaced. */
void dl_aq_answer(dl_aconn *c, dl_areq *r, int rc, redisReply *reply);
/* Fails every request of q with rc. */
void dl_aq_fail(dl_aconn *c, rq *q, int rc);
/* The script's body once, for a request that got NOSCRIPT: r goes out
 * again as EVAL, the same request (its handle and deadline stand). */
void dl_aq_resend_eval(dl_aconn *c, dl_areq *r);

/* aconn.c */
/* Starts connecting (c down): 0, or a code with c->last_msg. */
int dl_aconn_start_connect(dl_aconn *c);
/* Watches the socket for what the queues and TLS need now. */
void dl_aconn_update_watch(dl_aconn *c);
/* Sees that what outq holds goes out: from inside the loop's dispatch,
 * written at its end (writability is watched for only if the socket
 * cannot take it all); outside, when the socket is next writable. */
void dl_aconn_flush_soon(dl_aconn *c);

#endif /* DLOCK_REDIS_ACONN_H */
