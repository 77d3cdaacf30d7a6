/* cluster.h: the blocking cluster link's insides, shared by cluster.c
 * (the map, the nodes, requests) and cwait.c (waiting, loss notices).
 * Private to src/redis. */
#ifndef DLOCK_REDIS_CLUSTER_H
#define DLOCK_REDIS_CLUSTER_H

#include "links.h"

#include <pthread.h>

#define NSLOTS DL_CLUSTER_SLOTS
#define MAX_NODES 256
#define NO_NODE 0xffff
#define MAX_TRIES 16       /* redirections and retries of one request */
#define REFRESH_GAP_MS 100 /* a map asked for less recently is kept */

typedef struct cnode {
  char host[256];
  int port;
  dl_conn_config cfg; /* the link's, with this node's address */
  dl_conn **conns;
  int nconn;
  atomic_uint next;
  dl_pubsub *pubsub; /* NULL when waiting by backoff */
  dl_waitpool waits; /* replica acknowledgement's own connections */
  bool listening;    /* watch_losses applied (under refresh_mu) */
} cnode;

typedef struct cluster_link {
  dl_rlink base;
  const dl_backend_env *env;
  const dl_conn_config *cfg;
  int nconn;
  pthread_mutex_t mu;         /* nodes[] grows under it */
  pthread_mutex_t refresh_mu; /* one map refresh at a time; listens */
  cnode *nodes[MAX_NODES];
  atomic_int nnodes;
  atomic_ushort slots[NSLOTS]; /* node index per slot, NO_NODE unknown */
  int64_t refreshed_ms;        /* under refresh_mu */
  atomic_uint any;             /* rotates keyless requests over masters */
  bool sharded;                /* shard channels (see the top) */
  bool probe;                  /* ?pubsub=auto not yet decided */
  /* CONFIG GET notify-keyspace-events, asked of the first node to give
   * the map (want_keyspace until then; NULL: refused) and applied to every
   * master's subscriber (cwait.c), under refresh_mu */
  bool want_keyspace;
  struct redisReply *keyspace;
  /* watch_losses: applied to every node's subscriber, new ones too */
  char *revoke;
  dl_notice_fn notice;
  void *notice_ud;
} cluster_link;

/* The master of slot (-1: the masters in turn), the map refreshed once if
 * it has none; NULL with the detail recorded when none is known. */
cnode *dl_cl_route(cluster_link *b, int slot);
/* One of n's command connections, in turn. */
dl_conn *dl_cl_pick(cnode *n);
/* The slot of a C string. */
int dl_cl_slot_of(const char *s);

/* cwait.c: the link's waiting entries (dl_rlink_ops), and, with
 * refresh_mu held, n's subscriber made to hear the loss notices. */
dl_sub *dl_cl_sub_ref(dl_rlink *base, const char *channel, int mode,
                      int64_t deadline);
int dl_cl_sub_wait(dl_rlink *base, dl_sub *s, int64_t deadline, int64_t since,
                   dl_sub *grant);
int dl_cl_sub_grant(dl_rlink *base, dl_sub *s, uint64_t *token);
void dl_cl_sub_unref(dl_rlink *base, dl_sub *s, bool linger);
void dl_cl_sub_kick(dl_rlink *base, dl_sub *s);
int dl_cl_watch_losses(dl_rlink *base, const char *revoke_channel,
                       dl_notice_fn fn, void *ud);
void dl_cl_listen_node(cluster_link *b, cnode *n);

#endif /* DLOCK_REDIS_CLUSTER_H */
