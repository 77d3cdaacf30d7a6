/* await.c: waiting on the event-loop cluster link: each subscription on
 * the subscriber (dl_asub) of the master of its channel's slot, followed
 * where the slot goes; and the loss notices on every master's
 * subscriber. */
#include "acluster.h"

#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <string.h>

/* ---- waiting: the subscriber of the channel's slot's master ---- */

/* A subscription: on the subscriber of the master of its channel's slot,
 * or a backoff (waiting by backoff). */
typedef struct acsub {
  bool backoff;
  dl_backoff bo;
  anode *node; /* NULL: none (no master known, or out of memory) */
  dl_sub *s;
  int mode;
  char channel[]; /* to subscribe again where its slot went */
} acsub;

/* c's subscription on the master of its slot now (unconfirmed), or NULL
 * in c->s. A pattern goes by its own text's slot: any node hears what is
 * published anywhere with PUBLISH, and one node keeps it found again. */
static void attach(acl_link *L, acsub *c) {
  c->node = dl_acl_route(L, dl_key_slot(c->channel, strlen(c->channel)));
  c->s = c->node && c->node->sub
             ? dl_asub_ref(c->node->sub, c->channel, c->mode)
             : NULL;
  if (c->s == NULL) c->node = NULL;
}

static acsub *acsub_new(acl_link *L, const char *channel, int mode) {
  size_t len = strlen(channel);
  acsub *c = calloc(1, sizeof *c + len + 1);
  if (c == NULL) return NULL;
  memcpy(c->channel, channel, len + 1);
  c->mode = mode;
  if (L->sharded && !(mode & DL_WAKE_PATTERN) &&
      !dl_cluster_classic_channel(channel))
    c->mode |= DL_WAKE_SHARDED;
  return c;
}

/* A confirm or a wait on a node's subscriber. */
typedef struct asreq {
  apend h;
  dl_asub_req *r;
  acsub *ref; /* a sub_ref's: unreferenced if cancelled */
  bool wait;  /* a wake-up (rc as told); else a confirm (ok_rc once done) */
  int ok_rc;
} asreq;

static void on_asub(void *ud, int rc) {
  asreq *a = ud;
  dl_pend *p = a->h.p;
  p->link_data = NULL;
  /* A confirm not in time: the waiter keeps the reference and still wakes
   * at the holder's TTL, as with the loop link. */
  p->rc = a->wait || rc == DLOCK_ECLOSED ? rc : a->ok_rc;
  free(a);
  p->resume(p);
}

/* Waits for c's confirmation: DL_PENDING, or 0 with p->rc ok_rc (out of
 * memory: as if it had timed out). */
static int confirm(acl_link *L, dl_pend *p, acsub *c, int64_t deadline,
                   bool ref, int ok_rc) {
  p->rc = ok_rc;
  asreq *a = calloc(1, sizeof *a);
  if (a == NULL) return 0;
  a->h.kind = K_SUB;
  a->h.p = p;
  a->h.L = L;
  a->ref = ref ? c : NULL;
  a->ok_rc = ok_rc;
  int64_t limit = dl_now_ms() + L->cfg->command_timeout_ms;
  a->r = dl_asub_confirm(c->node->sub, c->s,
                         deadline < limit ? deadline : limit, on_asub, a);
  if (a->r == NULL) {
    free(a);
    return 0;
  }
  p->link_data = a;
  return DL_PENDING;
}

int dl_acl_sub_ref_start(dl_rlink *base, dl_pend *p, const char *channel,
                         int mode, int64_t deadline) {
  acl_link *L = (acl_link *)base;
  p->rc = 0;
  p->sub = NULL;
  if (L->closing) {
    p->rc = DLOCK_ECLOSED;
    return 0;
  }
  bool backoff = L->cfg->backoff_max_ms > 0;
  if (backoff && mode == DL_WAKE_GRANT) return 0; /* no grants then */
  acsub *c = acsub_new(L, channel, mode);
  if (c == NULL) return 0; /* sleeps until the holder's TTL */
  if (backoff) {
    c->backoff = true;
    dl_backoff_init(&c->bo);
    p->sub = (dl_sub *)c;
    return 0;
  }
  attach(L, c);
  if (c->s == NULL) {
    free(c);
    return 0;
  }
  p->sub = (dl_sub *)c;
  return confirm(L, p, c, deadline, true, 0);
}

int dl_acl_sub_wait_start(dl_rlink *base, dl_pend *p, dl_sub *s, int64_t until,
                          int64_t since, dl_sub *grant) {
  acl_link *L = (acl_link *)base;
  acsub *c = (acsub *)s, *g = (acsub *)grant;
  if (L->closing) {
    p->rc = DLOCK_ECLOSED;
    return 0;
  }
  if (c && c->backoff) {
    int64_t at = dl_now_ms() + dl_backoff_next(&c->bo, L->cfg->backoff_max_ms);
    return dl_acl_pause_start(base, p, at < until ? at : until);
  }
  /* The server gave the channel's slot away (it unsubscribed it): each
   * subscription goes where the slot went (the map learnt it from the
   * MOVED of the attempt just made), and the waiter tries again once its
   * channel is confirmed there (cluster.c's cl_sub_wait). A grant channel
   * too: a release hands the lock to the first queued waiter on that
   * channel alone. */
  bool moved = false;
  acsub *both[2] = {c, g};
  for (int i = 0; i < 2; i++) {
    acsub *x = both[i];
    if (x == NULL || x->backoff || x->s == NULL ||
        !dl_asub_dropped(x->node->sub, x->s))
      continue;
    dl_asub_unref(x->node->sub, x->s, false);
    x->s = NULL;
    attach(L, x);
    moved = true;
  }
  if (moved) {
    if (c && c->s) return confirm(L, p, c, until, false, 1);
    p->rc = 1;
    return 0;
  }
  if (c == NULL || c->s == NULL) /* no subscription: the TTL */
    return dl_acl_pause_start(base, p, until);
  /* A grant subscribed on another node (the slot moved between the two):
   * its message cannot wake this sleeper, which finds it when it wakes. */
  dl_sub *gs = g && g->s && g->node == c->node ? g->s : NULL;
  asreq *a = calloc(1, sizeof *a);
  if (a) {
    a->h.kind = K_SUB;
    a->h.p = p;
    a->h.L = L;
    a->wait = true;
    a->r = dl_asub_wait(c->node->sub, c->s, until, since, gs, on_asub, a);
    if (a->r) {
      p->link_data = a;
      return DL_PENDING;
    }
    free(a);
  }
  return dl_acl_pause_start(base, p, until); /* out of memory: the TTL */
}

/* A reference to a subscription already confirmed, or NULL. */
dl_sub *dl_acl_sub_ref(dl_rlink *base, const char *channel, int mode,
                       int64_t deadline) {
  acl_link *L = (acl_link *)base;
  (void)deadline; /* only called with a negative one: never waits */
  if (L->closing || L->cfg->backoff_max_ms > 0) return NULL;
  acsub *c = acsub_new(L, channel, mode);
  if (c == NULL) return NULL;
  c->node = dl_acl_route(L, dl_key_slot(channel, strlen(channel)));
  if (c->node && c->node->sub)
    c->s = dl_asub_ref_heard(c->node->sub, channel, c->mode);
  if (c->s == NULL) {
    free(c);
    return NULL;
  }
  return (dl_sub *)c;
}

int dl_acl_sub_grant(dl_rlink *base, dl_sub *s, uint64_t *token) {
  acl_link *L = (acl_link *)base;
  acsub *c = (acsub *)s;
  if (L->closing || c == NULL || c->backoff || c->s == NULL) return -1;
  return dl_asub_grant(c->node->sub, c->s, token);
}

/* After the close the subscribers have freed their tables themselves. */
void dl_acl_sub_unref(dl_rlink *base, dl_sub *s, bool linger) {
  acl_link *L = (acl_link *)base;
  acsub *c = (acsub *)s;
  if (c == NULL) return;
  if (!L->closing && !c->backoff && c->s)
    dl_asub_unref(c->node->sub, c->s, linger);
  free(c);
}

void dl_acl_sub_kick(dl_rlink *base, dl_sub *s) {
  acl_link *L = (acl_link *)base;
  acsub *c = (acsub *)s;
  if (!L->closing && c && !c->backoff && c->s) dl_asub_kick(c->node->sub, c->s);
}

void dl_acl_sub_cancel(dl_rlink *base, dl_pend *p, apend *h) {
  asreq *a = (asreq *)h;
  dl_asub_cancel(a->r);
  if (a->ref) { /* the reference being confirmed */
    dl_acl_sub_unref(base, (dl_sub *)a->ref, true);
    p->sub = NULL;
  }
  free(a);
}

/* ---- loss notices: every node's subscriber, with no retries ---- */
typedef struct watch_ctx {
  acl_link *L;
  anode *n;
} watch_ctx;

static int listen_on(void *ctx, const char *channel, bool pattern,
                     size_t strip) {
  watch_ctx *w = ctx;
  return dl_asub_listen(w->n->sub, channel, pattern, strip, w->L->notice,
                        w->L->notice_ud);
}

static void on_config(void *ud, int rc, redisReply *reply) {
  watch_ctx *w = ud;
  /* Refused (ACL, renamed), down or closed: none heard there. */
  if (rc == 0 && reply && reply->type == REDIS_REPLY_ARRAY && !w->L->closing)
    (void)dl_keyspace_listen(reply, 0, w->L->h.env->key_prefix, listen_on, w);
  if (reply) freeReplyObject(reply);
  free(w);
}

/* n's subscriber hears revocations (published anywhere: a notice may come
 * once per master) and n's own keyspace events (a node publishes only its
 * keys'), once the node's setting is read (the reply comes on the loop,
 * asked once, straight to n). */
void dl_acl_listen_node(acl_link *L, anode *n) {
  n->listening = true;
  if (n->sub == NULL) return;
  watch_ctx *w = malloc(sizeof *w);
  if (w == NULL) return;
  *w = (watch_ctx){L, n};
  if (listen_on(w, L->revoke, false, 0) != 0) {
    free(w);
    return;
  }
  const char *argv[] = {"CONFIG", "GET", "notify-keyspace-events"};
  int err;
  if (dl_aconn_send(n->conn, 3, argv, NULL, 0, on_config, w, &err) == NULL) {
    free(w);
    dl_clearerr(L->h.env->err_owner);
  }
}

int dl_acl_watch_losses(dl_rlink *base, const char *revoke_channel,
                        dl_notice_fn fn, void *ud) {
  acl_link *L = (acl_link *)base;
  if (L->cfg->backoff_max_ms > 0) return 0; /* no pub/sub */
  char *r = malloc(strlen(revoke_channel) + 1);
  if (r == NULL) return DLOCK_ENOMEM;
  strcpy(r, revoke_channel);
  free(L->revoke);
  L->revoke = r;
  L->notice = fn;
  L->notice_ud = ud;
  for (int i = 0; i < L->nnodes; i++)
    if (!L->nodes[i]->listening) dl_acl_listen_node(L, L->nodes[i]);
  return 0;
}
