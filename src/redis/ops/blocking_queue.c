/* blocking_queue.c: Redisson's RBlockingQueue / RBlockingDeque on Redis: a
 * list at the queue's name holding each value as its bare bytes (what
 * Redisson's StringCodec and ByteArrayCodec store); an offer is RPUSH (LPUSH
 * at the head), a poll LPOP (RPOP at the tail), the size LLEN.
 *
 * A waiting poll never blocks a connection: BLPOP on the pipelined
 * connection would stall every request queued behind it, on every thread
 * (docs/ARCHITECTURE.md, "Queues"). It pops without blocking and, between
 * tries, sleeps on "dlock_queue_channel:{name}" (the waiter of the
 * semaphores, backend.c), where each dlock offer publishes "1" after its
 * push: one sleeper wakes per value. A producer that does not publish
 * (Redisson's own offer is a bare RPUSH) is seen by a recheck that backs
 * off from RECHECK_MIN_MS to RECHECK_MAX_MS while the queue stays empty.
 *
 * The delayed queue is Redisson's RDelayedQueue layout beside the list Q:
 * the zset "redisson_delay_queue_timeout:{Q}" scored by due epoch ms, the
 * list "redisson_delay_queue:{Q}", the channel
 * "redisson_delay_queue_channel:{Q}", each element packed as Redisson
 * packs it, its id chosen so that ties leave in offer order
 * (delay_offer.lua). A delayed handle's poll is delay_poll.lua:
 * it moves whatever is due by the server's clock to Q, then pops; its
 * answer says when the next element is due, which bounds the sleep (the
 * timer Redisson's QueueTransferTask keeps), and a dlock delayed offer
 * wakes a poller through the queue's channel (the timer's reset).
 *
 * A reliable take (queue_reliable.lua) moves the value to the consumer's
 * processing list "{Q}:processing:<id>" until its ack; the consumers'
 * leases are the zset "{Q}:timeout", renewed by the watchdog as permits'
 * (lock_renew.lua), and the values of a consumer whose lease ended go back
 * to the queue at the next reliable take. */
#include "ops.h"

#include <hiredis/hiredis.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RECHECK_MIN_MS 20
#define RECHECK_MAX_MS 500
/* Elements one delay_poll.lua call moves at most (the rest: at once after). */
#define MOVE_LIMIT "1000"

/* An operation on one queue, for either driver. */
typedef struct queue_op {
  dl_shell sh; /* the event-loop driver's; first */
  dl_redis *R;
  const dl_sync_ref *s;
  dl_queue_req *q;
  int st;      /* the request in flight: ST_* */
  dl_pend p;   /* an offer's or the size's */
  dl_waiter w; /* a poll's */
  size_t lens[4];
  char ch[DL_DERIVED_MAX];
  /* A delayed poll's: both channels, dlock's and Redisson's, as one
   * pattern ("*_queue_channel:{Q}", Q's glob characters escaped). */
  char both[2 * DL_DERIVED_MAX];
  /* The delayed queue's names beside Q: its zset, its list, its channel. */
  char zset[DL_DERIVED_MAX], list[DL_DERIVED_MAX], dch[DL_DERIVED_MAX];
  /* A reliable take's: the consumers' leases, the processing lists' name
   * without the id, this consumer's. */
  char leases[DL_DERIVED_MAX], procs[DL_DERIVED_MAX], mine[DL_DERIVED_MAX];
  char lease[DL_INT_BUF];
} queue_op;

enum {
  ST_PUSH,
  ST_PUBLISH,
  ST_LLEN,
  ST_DELAY_OFFER,
  ST_ZCARD,
  ST_ACK,
  ST_TRANSFER
};

static bool is_poll(const dl_queue_req *q) {
  return q->op == DL_QUEUE_POLL || q->op == DL_QUEUE_POLL_LAST ||
         q->op == DL_QUEUE_POLL_RELIABLE ||
         (q->op == DL_QUEUE_TRANSFER && q->wait);
}

/* The reliable take's names, for consumer q->consumer. */
static void reliable_names(queue_op *x) {
  dl_derived_suffix_into(x->leases, DL_DERIVED_MAX, x->s->key, "timeout");
  dl_derived_suffix_into(x->procs, DL_DERIVED_MAX, x->s->key, "processing:");
  snprintf(x->mine, sizeof x->mine, "%s%s", x->procs,
           x->q->consumer ? x->q->consumer : "");
  dl_fmt_ll(x->lease, x->q->lease_ms);
}

static const char *queue_channel(char *out, const dl_sync_ref *s) {
  dl_derived_into(out, DL_DERIVED_MAX, "dlock_queue_channel", s->key);
  return out;
}

/* "dlock_queue_channel:{Q}" and "redisson_delay_queue_channel:{Q}" as one
 * pattern: '*' and their common tail, escaped. */
static const char *both_channels(queue_op *x) {
  const char *tail = queue_channel(x->ch, x->s) + strlen("dlock");
  char *o = x->both;
  *o++ = '*';
  for (; *tail && o < x->both + sizeof x->both - 3; tail++) {
    if (strchr("*?[]\\", *tail)) *o++ = '\\';
    *o++ = *tail;
  }
  *o = '\0';
  return x->both;
}

static void delay_names(queue_op *x) {
  dl_derived_into(x->zset, DL_DERIVED_MAX, "redisson_delay_queue_timeout",
                  x->s->key);
  dl_derived_into(x->list, DL_DERIVED_MAX, "redisson_delay_queue", x->s->key);
  dl_derived_into(x->dch, DL_DERIVED_MAX, "redisson_delay_queue_channel",
                  x->s->key);
}

static void hex_into(char *out, const unsigned char *b, size_t n) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[b[i] >> 4];
    out[2 * i + 1] = digits[b[i] & 15];
  }
  out[2 * n] = '\0';
}

/* delay_offer.lua for x's request. */
static int delay_offer_send(queue_op *x) {
  const dl_queue_req *q = x->q;
  unsigned char id[8];
  char idhex[17], delay[DL_INT_BUF];
  char *hex = malloc(2 * q->len + 1);
  if (hex == NULL || dl_random_bytes(id, sizeof id) != 0) {
    free(hex);
    x->p.rc = dl_seterr(x->R->env.err_owner, DLOCK_ENOMEM,
                        hex ? "no random bytes" : "out of memory");
    return 0;
  }
  hex_into(idhex, id, sizeof id);
  hex_into(hex, q->value, q->len);
  dl_fmt_ll(delay, q->delay_ms);
  const char *keys[] = {x->s->key, x->zset, x->list, x->dch,
                        queue_channel(x->ch, x->s)};
  const char *args[] = {delay, idhex, hex};
  /* The request is formatted (copied) within the start. */
  int rc = dl_redis_step_eval(x->R, &x->p, 0, DL_SCRIPT_DELAY_OFFER, 5, keys, 3,
                              args);
  free(hex);
  return rc;
}

/* ---- polls: the waiter's kind ---- */
static int poll_send(dl_waiter *w) {
  queue_op *x = w->ctx;
  const char *pop = x->q->op == DL_QUEUE_POLL ? "LPOP" : "RPOP";
  if (x->q->op == DL_QUEUE_POLL_RELIABLE) {
    const char *keys[] = {x->s->key, x->leases, x->mine};
    const char *args[] = {x->q->consumer, x->lease, x->procs};
    return dl_redis_step_eval(w->R, &w->p, 0, DL_SCRIPT_QUEUE_RELIABLE, 3, keys,
                              3, args);
  }
  if (x->q->delayed || x->q->op == DL_QUEUE_TRANSFER) {
    const char *keys[] = {x->s->key, x->zset, x->list};
    const char *args[] = {x->q->op == DL_QUEUE_TRANSFER ? "" : pop, MOVE_LIMIT};
    /* A take: what it pops is the poll's alone (dl_pend.take; a transfer
     * moves none, a reliable take's waits at its consumer's key). */
    return (x->q->op == DL_QUEUE_TRANSFER ? dl_redis_step_eval
                                          : dl_redis_step_take_eval)(
        w->R, &w->p, 0, DL_SCRIPT_DELAY_POLL, 3, keys, 2, args);
  }
  const char *argv[] = {pop, x->s->key};
  return dl_redis_step_take_command(w->R, &w->p, 2, argv);
}

static int poll_result(dl_waiter *w) {
  queue_op *x = w->ctx;
  redisReply *all = w->p.reply, *r = all;
  w->p.reply = NULL;
  if (w->p.rc != 0) {
    if (all) freeReplyObject(all);
    return w->p.rc;
  }
  int rc = 0;
  long long next_due = -1; /* a delayed poll's: ms until the next is due */
  bool transfer = x->q->op == DL_QUEUE_TRANSFER;
  if (x->q->delayed || transfer || x->q->op == DL_QUEUE_POLL_RELIABLE) {
    if (all->type != REDIS_REPLY_ARRAY || all->elements != 2 ||
        all->element[1]->type != REDIS_REPLY_INTEGER) {
      freeReplyObject(all);
      return dl_seterr(w->R->env.err_owner, DLOCK_EPROTO,
                       "unexpected reply to a delayed poll");
    }
    r = all->element[0];
    next_due = all->element[1]->integer;
  }
  if (transfer) {
    /* Moved. The first two tries (before and after subscribing) sleep
     * next, until the next due time or a message; the one after the
     * sleep ends the operation. */
    freeReplyObject(all);
    x->q->n = next_due;
    w->recheck_ms = next_due >= 0 ? next_due : -1;
    return w->tries >= 3 ? 1 : 0;
  }
  if (r->type == REDIS_REPLY_STRING) {
    char *v = malloc(r->len + 1);
    if (v == NULL) {
      rc = DLOCK_ENOMEM; /* the value is off the list: said below */
    } else {
      memcpy(v, r->str, r->len);
      v[r->len] = '\0';
      x->q->got = v;
      x->q->got_len = r->len;
      rc = 1;
    }
  } else if (r->type == REDIS_REPLY_NIL) {
    int shift = w->tries < 6 ? w->tries - 1 : 5;
    w->recheck_ms = (int64_t)RECHECK_MIN_MS << shift;
    if (w->recheck_ms > RECHECK_MAX_MS) w->recheck_ms = RECHECK_MAX_MS;
    /* The timer at the next due time. */
    if (next_due >= 0 && next_due < w->recheck_ms) w->recheck_ms = next_due;
  } else {
    rc = DLOCK_EPROTO;
  }
  freeReplyObject(all);
  if (rc == DLOCK_ENOMEM)
    return dl_seterr(w->R->env.err_owner, rc,
                     "out of memory (a value of "
                     "queue '%s' was taken and dropped)",
                     x->s->name);
  if (rc == DLOCK_EPROTO)
    return dl_seterr(w->R->env.err_owner, rc, "unexpected reply to a pop");
  return rc;
}

static const dl_wait_kind poll_kind = {poll_send, poll_result};

/* ---- offers and the size: one or two requests ---- */
static int simple_send(queue_op *x) {
  const dl_queue_req *q = x->q;
  switch (x->st) {
  case ST_PUSH: {
    const char *argv[] = {q->op == DL_QUEUE_OFFER ? "RPUSH" : "LPUSH",
                          x->s->key, q->value ? q->value : ""};
    x->lens[0] = 5;
    x->lens[1] = strlen(x->s->key);
    x->lens[2] = q->value ? q->len : 0;
    return dl_redis_step_command_bin(x->R, &x->p, 3, argv, x->lens);
  }
  case ST_PUBLISH: {
    const char *argv[] = {"PUBLISH", queue_channel(x->ch, x->s), "1"};
    return dl_redis_step_command(x->R, &x->p, 3, argv);
  }
  case ST_DELAY_OFFER: return delay_offer_send(x);
  case ST_ACK: {
    const char *argv[] = {"LREM", x->mine, "1", q->value ? q->value : ""};
    x->lens[0] = 4;
    x->lens[1] = strlen(x->mine);
    x->lens[2] = 1;
    x->lens[3] = q->value ? q->len : 0;
    return dl_redis_step_command_bin(x->R, &x->p, 4, argv, x->lens);
  }
  case ST_TRANSFER: { /* delay_poll.lua without the pop */
    const char *keys[] = {x->s->key, x->zset, x->list};
    const char *args[] = {"", MOVE_LIMIT};
    return dl_redis_step_eval(x->R, &x->p, 0, DL_SCRIPT_DELAY_POLL, 3, keys, 2,
                              args);
  }
  case ST_ZCARD: {
    const char *argv[] = {"ZCARD", x->zset};
    return dl_redis_step_command(x->R, &x->p, 2, argv);
  }
  default: {
    const char *argv[] = {"LLEN", x->s->key};
    return dl_redis_step_command(x->R, &x->p, 2, argv);
  }
  }
}

/* Goes on after x's request: DL_PENDING (the next one sent), or the
 * result. */
static int simple_result(queue_op *x) {
  for (;;) {
    redisReply *r = x->p.reply;
    x->p.reply = NULL;
    int rc = x->p.rc;
    if (rc != 0) {
      if (r) freeReplyObject(r);
      /* The value is in: a lost wake-up only delays pollers to their
       * recheck. */
      return x->st == ST_PUBLISH ? 0 : rc;
    }
    if (x->st == ST_TRANSFER) { /* {nil, ms until the next is due} */
      bool ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                r->element[1]->type == REDIS_REPLY_INTEGER;
      if (ok) x->q->n = r->element[1]->integer;
      if (r) freeReplyObject(r);
      return ok ? 0
                : dl_seterr(x->R->env.err_owner, DLOCK_EPROTO,
                            "unexpected reply to a transfer");
    }
    long long v = 0;
    rc = dl_redis_int_reply(x->R, r, 0, LLONG_MAX, &v);
    if (rc != 0) return x->st == ST_PUBLISH ? 0 : rc;
    if (x->st == ST_PUBLISH) return 0;
    x->q->n = v;
    if (x->st != ST_PUSH) return 0;
    x->st = ST_PUBLISH;
    if (simple_send(x) == DL_PENDING) return DL_PENDING;
  }
}

static int queue_step(dl_shell *sh) {
  queue_op *x = (queue_op *)sh;
  if (is_poll(x->q)) return dl_redis_wait_step(&x->w);
  return simple_result(x);
}

/* Runs q: to its end on the calling thread when done is NULL (the
 * blocking driver; returns the result), else on the loop (0 and *op, or a
 * negative code). */
static int queue_run(dl_backend *b, const dl_sync_ref *s, dl_queue_req *q,
                     dl_done_fn done, void *ud, dl_async **op) {
  dl_redis *R = (dl_redis *)b;
  int err;
  queue_op stack,
      *x = dl_redis_state_new(R, &stack, sizeof stack, done != NULL, op, &err);
  if (x == NULL) return err;
  x->R = R;
  x->s = s;
  x->q = q;
  q->got = NULL;
  q->got_len = 0;
  q->n = 0;
  bool poll = is_poll(q);
  if (poll) {
    dl_waiter *w = &x->w;
    w->R = R;
    w->kind = &poll_kind;
    w->ctx = x;
    w->channel = queue_channel(x->ch, s);
    w->mode = DL_WAKE_COUNT;
    /* A delayed poll also wakes on Redisson's channel, where a Java
     * producer publishes a new head's due time (a due time wakes every
     * poller of the process: they sleep until it, or move it). */
    if (q->delayed || q->op == DL_QUEUE_TRANSFER) {
      w->channel = both_channels(x);
      w->mode = DL_WAKE_COUNT | DL_WAKE_PATTERN;
    }
    w->wait = q->wait;
    w->deadline = q->deadline;
  } else {
    switch (q->op) {
    case DL_QUEUE_SIZE: x->st = ST_LLEN; break;
    case DL_QUEUE_OFFER_DELAYED: x->st = ST_DELAY_OFFER; break;
    case DL_QUEUE_SIZE_DELAYED: x->st = ST_ZCARD; break;
    case DL_QUEUE_TRANSFER: x->st = ST_TRANSFER; break;
    case DL_QUEUE_ACK: x->st = ST_ACK; break;
    default: x->st = ST_PUSH; break;
    }
  }
  delay_names(x);
  reliable_names(x);
  if (done == NULL) {
    if (poll) return dl_redis_wait_start(&x->w);
    simple_send(x); /* a blocking link answers within */
    return simple_result(x);
  }
  dl_shell_init(&x->sh, R, done, ud, queue_step, poll ? &x->w.p : &x->p);
  if (poll) x->sh.deadline = &x->w.deadline;
  int rc;
  if (poll) {
    rc = dl_redis_wait_start(&x->w);
  } else {
    rc = simple_send(x);
    if (rc != DL_PENDING) rc = simple_result(x);
  }
  return dl_shell_start(&x->sh, rc, op);
}

void dl_redis_queue_kick(dl_backend *b, const dl_sync_ref *s) {
  dl_redis *R = (dl_redis *)b;
  queue_op x = {.R = R, .s = s};
  const dl_rlink_ops *ops = R->link->ops;
  /* Only a subscription already there: its sleepers are this client's. */
  dl_sub *sub = ops->sub_ref(R->link, both_channels(&x),
                             DL_WAKE_COUNT | DL_WAKE_PATTERN, -1);
  if (sub == NULL) return;
  ops->sub_kick(R->link, sub);
  ops->sub_unref(R->link, sub, true);
}

int dl_redis_queue(dl_backend *b, const dl_sync_ref *s, dl_queue_req *q) {
  return queue_run(b, s, q, NULL, NULL, NULL);
}

int dl_redis_queue_async(dl_backend *b, const dl_sync_ref *s, dl_queue_req *q,
                         dl_done_fn done, void *ud, dl_async **op) {
  return queue_run(b, s, q, done, ud, op);
}
