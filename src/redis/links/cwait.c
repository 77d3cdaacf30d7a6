/* cwait.c: waiting on the blocking cluster link: each subscription on
 * the subscriber of the master of its channel's slot, followed where the
 * slot goes; and the loss notices on every master's subscriber. */
#include "cluster.h"

#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <string.h>

/* ---- waiting ---- */

/* A subscription: on the subscriber of the master of its channel's slot,
 * or a backoff (waiting by backoff). */
typedef struct csub {
  bool backoff;
  dl_backoff bo;
  cnode *node; /* NULL: none (the slot has no master now) */
  dl_sub *s;
  int mode;
  char channel[]; /* to subscribe again where its slot went */
} csub;

/* c's subscription on the master of its slot now: 0, or NULL in c->s. */
static void csub_attach(cluster_link *b, csub *c, int64_t deadline) {
  /* A pattern has no slot: any node hears what is published anywhere. */
  int slot = c->mode & DL_WAKE_PATTERN ? -1 : dl_cl_slot_of(c->channel);
  c->node = dl_cl_route(b, slot);
  c->s = c->node ? dl_pubsub_ref(c->node->pubsub, c->channel, c->mode, deadline)
                 : NULL;
  if (c->s == NULL) c->node = NULL;
}

dl_sub *dl_cl_sub_ref(dl_rlink *base, const char *channel, int mode,
                      int64_t deadline) {
  cluster_link *b = (cluster_link *)base;
  bool backoff = b->cfg->backoff_max_ms > 0;
  if (backoff && (mode == DL_WAKE_GRANT || deadline < 0)) return NULL;
  size_t len = strlen(channel);
  csub *c = calloc(1, sizeof *c + len + 1);
  if (c == NULL) return NULL;
  memcpy(c->channel, channel, len + 1);
  if (backoff) {
    c->backoff = true;
    dl_backoff_init(&c->bo);
    return (dl_sub *)c;
  }
  c->mode = mode;
  if (b->sharded && !(mode & DL_WAKE_PATTERN) &&
      !dl_cluster_classic_channel(channel))
    c->mode |= DL_WAKE_SHARDED;
  csub_attach(b, c, deadline);
  if (c->s == NULL) {
    free(c);
    return NULL;
  }
  return (dl_sub *)c;
}

int dl_cl_sub_wait(dl_rlink *base, dl_sub *s, int64_t deadline, int64_t since,
                   dl_sub *grant) {
  cluster_link *b = (cluster_link *)base;
  csub *c = (csub *)s, *g = (csub *)grant;
  if (c && c->backoff) {
    int64_t until =
        dl_now_ms() + dl_backoff_next(&c->bo, b->cfg->backoff_max_ms);
    if (until > deadline) until = deadline;
    dl_sleep_ms(until - dl_now_ms());
    return atomic_load(b->env->closing) ? DLOCK_ECLOSED : 0;
  }
  /* The server gave the channel's slot away (it unsubscribed it): each
   * subscription goes where the slot went (the map learnt it from the
   * MOVED of the attempt just made), and the waiter tries again now. A
   * grant channel too: a release hands the lock to the first queued
   * waiter on that channel alone. */
  bool moved = false;
  csub *both[2] = {c, g};
  for (int i = 0; i < 2; i++) {
    csub *x = both[i];
    if (x == NULL || x->backoff || x->s == NULL ||
        !dl_pubsub_dropped(x->node->pubsub, x->s))
      continue;
    dl_pubsub_unref(x->node->pubsub, x->s, false);
    x->s = NULL;
    csub_attach(b, x, deadline);
    moved = true;
  }
  if (moved) return 1;
  if (c == NULL || c->s == NULL) { /* no subscription: the TTL */
    dl_sleep_ms(deadline - dl_now_ms());
    return 0;
  }
  /* A grant subscribed on another node (the slot moved between the two):
   * its message cannot wake this sleeper, which finds it when it wakes. */
  dl_sub *gs = g && g->s && g->node == c->node ? g->s : NULL;
  return dl_pubsub_wait(c->node->pubsub, c->s, deadline, since, gs);
}

int dl_cl_sub_grant(dl_rlink *base, dl_sub *s, uint64_t *token) {
  (void)base;
  csub *c = (csub *)s;
  if (c == NULL || c->s == NULL) return -1;
  return dl_pubsub_grant(c->node->pubsub, c->s, token);
}

void dl_cl_sub_unref(dl_rlink *base, dl_sub *s, bool linger) {
  (void)base;
  csub *c = (csub *)s;
  if (c == NULL) return;
  if (c->s) dl_pubsub_unref(c->node->pubsub, c->s, linger);
  free(c);
}

void dl_cl_sub_kick(dl_rlink *base, dl_sub *s) {
  (void)base;
  csub *c = (csub *)s;
  if (c && c->s) dl_pubsub_kick(c->node->pubsub, c->s);
}

/* With refresh_mu held: n's subscriber hears revocations (published
 * anywhere, so every node's subscriber hears each: a notice may come once
 * per master) and n's own keyspace events (a node publishes only its
 * keys' events). CONFIG GET goes straight to n, with no retries (they
 * would refresh the map, which the caller holds). */
void dl_cl_listen_node(cluster_link *b, cnode *n) {
  n->listening = true;
  if (n->pubsub == NULL) return;
  (void)dl_pubsub_watch_losses_with(n->pubsub, b->keyspace, b->revoke, 0,
                                    b->env->key_prefix, b->notice,
                                    b->notice_ud);
}

int dl_cl_watch_losses(dl_rlink *base, const char *revoke_channel,
                       dl_notice_fn fn, void *ud) {
  cluster_link *b = (cluster_link *)base;
  if (b->cfg->backoff_max_ms > 0) return 0; /* no pub/sub */
  pthread_mutex_lock(&b->refresh_mu);
  free(b->revoke);
  b->revoke = malloc(strlen(revoke_channel) + 1);
  if (b->revoke == NULL) {
    pthread_mutex_unlock(&b->refresh_mu);
    return DLOCK_ENOMEM;
  }
  strcpy(b->revoke, revoke_channel);
  b->notice = fn;
  b->notice_ud = ud;
  for (int i = 0; i < atomic_load(&b->nnodes); i++)
    if (!b->nodes[i]->listening) dl_cl_listen_node(b, b->nodes[i]);
  pthread_mutex_unlock(&b->refresh_mu);
  return 0;
}
