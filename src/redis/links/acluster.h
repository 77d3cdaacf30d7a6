/* acluster.h: the event-loop cluster link's insides, shared by
 * acluster.c (the map, the nodes, requests, pauses) and await.c (waiting,
 * loss notices). Private to src/redis. */
#ifndef DLOCK_REDIS_ACLUSTER_H
#define DLOCK_REDIS_ACLUSTER_H

#include "links.h"

#define NSLOTS DL_CLUSTER_SLOTS
#define MAX_NODES 256
#define NO_NODE 0xffff
#define MAX_TRIES 16       /* redirections and retries of one request */
#define REFRESH_GAP_MS 100 /* a map asked for less recently is kept */
#define PAUSE_MIN_MS 10    /* the first pause before a retry, doubling */
#define PAUSE_MAX_MS 500

typedef struct anode {
  char host[256];
  int port;
  dl_conn_config cfg; /* the link's, with this node's address */
  dl_aconn *conn;
  dl_awaitpool *waits; /* replica acknowledgement's own connections */
  dl_asub *sub;   /* NULL when waiting by backoff */
  bool listening; /* watch_losses applied */
} anode;

typedef struct acl_link acl_link;

/* What a pending step's link_data points to: a request (with its retry
 * pause), a pause, a subscriber's confirm or wait, or a replica
 * acknowledgement (on one master or on each). */
enum { K_REQ, K_PAUSE, K_SUB, K_REPL };
typedef struct apend apend;
struct apend {
  int kind;
  dl_pend *p;
  acl_link *L;
  apend *prev, *next; /* L->pend (requests and pauses), for the close */
};

struct acl_link {
  dl_loop_head h; /* first */
  const dl_conn_config *cfg;
  anode *nodes[MAX_NODES];
  int nnodes;
  unsigned short slots[NSLOTS]; /* node index per slot, NO_NODE unknown */
  int64_t refreshed_ms;
  unsigned any; /* rotates keyless requests over masters */
  bool sharded; /* shard channels (cluster.c says why) */
  bool probe;   /* ?pubsub=auto not yet decided */
  bool closing; /* from acl_free on: nothing new starts */
  apend *pend;
  /* watch_losses: applied to every node's subscriber, new ones too */
  char *revoke;
  dl_notice_fn notice;
  void *notice_ud;
};

static inline void pend_link(acl_link *L, apend *h) {
  h->L = L;
  h->prev = NULL;
  h->next = L->pend;
  if (L->pend) L->pend->prev = h;
  L->pend = h;
}

static inline void pend_unlink(acl_link *L, apend *h) {
  if (h->prev)
    h->prev->next = h->next;
  else
    L->pend = h->next;
  if (h->next) h->next->prev = h->prev;
  h->prev = h->next = NULL;
}

/* acluster.c: the master of slot (-1: the masters in turn), the map read
 * again once if it has none; NULL with the detail recorded. */
anode *dl_acl_route(acl_link *L, int slot);
/* The masters in the map (at most max), each once; their count. */
int dl_acl_masters(acl_link *L, anode **out, int max);
/* Adds "(cluster node HOST:PORT)" to the detail of error rc (not 0,
 * DLOCK_ECLOSED) unless it names it already. */
void dl_acl_name_node(acl_link *L, anode *n, int rc);
/* acrepl.c: the replicate_start entry, and the cancel of its step (h of
 * kind K_REPL). */
int dl_acl_replicate_start(dl_rlink *base, dl_pend *p, const char *const *keys,
                           int nkeys, int n, int timeout_ms);
void dl_acl_replicate_cancel(acl_link *L, apend *h);
/* A pause until `until` on the loop's timers (the pause_start entry). */
int dl_acl_pause_start(dl_rlink *base, dl_pend *p, int64_t until);

/* await.c: the link's waiting entries (dl_rlink_ops); the cancel of a
 * subscriber's confirm or wait (h of kind K_SUB); and, for a node met
 * after the watch began, its subscriber made to hear the loss notices. */
int dl_acl_sub_ref_start(dl_rlink *base, dl_pend *p, const char *channel,
                         int mode, int64_t deadline);
int dl_acl_sub_wait_start(dl_rlink *base, dl_pend *p, dl_sub *s, int64_t until,
                          int64_t since, dl_sub *grant);
dl_sub *dl_acl_sub_ref(dl_rlink *base, const char *channel, int mode,
                       int64_t deadline);
int dl_acl_sub_grant(dl_rlink *base, dl_sub *s, uint64_t *token);
void dl_acl_sub_unref(dl_rlink *base, dl_sub *s, bool linger);
void dl_acl_sub_kick(dl_rlink *base, dl_sub *s);
void dl_acl_sub_cancel(dl_rlink *base, dl_pend *p, apend *h);
int dl_acl_watch_losses(dl_rlink *base, const char *revoke_channel,
                        dl_notice_fn fn, void *ud);
void dl_acl_listen_node(acl_link *L, anode *n);

#endif /* DLOCK_REDIS_ACLUSTER_H */
