/* acrepl.c: replica acknowledgement on the event-loop cluster link
 * (cluster.c's replicate, on the loop): a marker and WAIT
 * (dl_awaitpool_replicate) on a connection of its own to each master asked, the
 * master of each key's slot or every master, gathered, the fewest
 * acknowledgements counting. Never sent again elsewhere: a WAIT on another
 * connection or node would count nothing of ours. */
#include "acluster.h"

#include <stdlib.h>
#include <string.h>

typedef struct arepl_one {
  struct arepl *g;
  dl_arepl *r;
  anode *node;
} arepl_one;

typedef struct arepl {
  apend h;
  int n, left, least, rc;
  arepl_one w[];
} arepl;

static void on_node_acked(void *ud, int rc, int count) {
  arepl_one *w = ud;
  arepl *g = w->g;
  w->r = NULL;
  dl_acl_name_node(g->h.L, w->node, rc);
  if (rc != 0 && g->rc == 0) g->rc = rc;
  if (rc == 0 && count < g->least) g->least = count;
  if (--g->left > 0) return;
  dl_pend *p = g->h.p;
  p->rc = g->rc;
  p->acked = g->rc == 0 ? g->least : 0;
  p->link_data = NULL;
  pend_unlink(g->h.L, &g->h);
  free(g);
  p->resume(p);
}

int dl_acl_replicate_start(dl_rlink *base, dl_pend *p,
                               const char *const *keys, int nkeys, int n,
                               int timeout_ms) {
  acl_link *L = (acl_link *)base;
  if (L->closing) {
    p->rc = DLOCK_ECLOSED;
    return 0;
  }
  anode *ms[MAX_NODES];
  int k = 0;
  if (nkeys > 0) { /* each key's master, once */
    for (int i = 0; i < nkeys; i++) {
      anode *m = dl_acl_route(L, dl_key_slot(keys[i], strlen(keys[i])));
      if (m == NULL) {
        p->rc = DLOCK_ECONNECT; /* the detail recorded by route */
        return 0;
      }
      int j = 0;
      while (j < k && ms[j] != m)
        j++;
      if (j == k && k < MAX_NODES) ms[k++] = m;
    }
  } else {
    k = dl_acl_masters(L, ms, MAX_NODES);
    if (k == 0 && dl_acl_route(L, -1) != NULL) /* the map read again */
      k = dl_acl_masters(L, ms, MAX_NODES);
  }
  if (k == 0) {
    p->rc = dl_seterr(L->h.env->err_owner, DLOCK_ECONNECT,
                      "no cluster master is known");
    return 0;
  }
  arepl *g = calloc(1, sizeof *g + (size_t)k * sizeof g->w[0]);
  if (g == NULL) {
    p->rc = dl_seterr(L->h.env->err_owner, DLOCK_ENOMEM, "out of memory");
    return 0;
  }
  g->h.kind = K_REPL;
  g->h.p = p;
  g->n = k;
  g->least = 1000000;
  int64_t deadline = dl_now_ms() + L->cfg->command_timeout_ms + timeout_ms;
  for (int i = 0; i < k; i++) {
    int err = 0;
    g->w[i].g = g;
    g->w[i].node = ms[i];
    g->w[i].r = dl_awaitpool_replicate(ms[i]->waits, n, timeout_ms, deadline,
                                       L->h.env->err_owner, on_node_acked,
                                       &g->w[i], &err);
    if (g->w[i].r) {
      g->left++;
    } else if (g->rc == 0) {
      dl_acl_name_node(L, ms[i], err);
      g->rc = err;
    }
  }
  if (g->left == 0) { /* nothing sent */
    p->rc = g->rc;
    free(g);
    return 0;
  }
  pend_link(L, &g->h);
  p->link_data = g;
  return DL_PENDING;
}

void dl_acl_replicate_cancel(acl_link *L, apend *h) {
  arepl *g = (arepl *)h;
  for (int i = 0; i < g->n; i++)
    dl_arepl_cancel(g->w[i].r);
  pend_unlink(L, h);
  free(g);
}
