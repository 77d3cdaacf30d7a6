/* gmux.c: the blocking gRPC calls of a client's threads at once, as
 * streams of one HTTP/2 connection an endpoint, on one multi handle
 * (CURLPIPE_MULTIPLEX) with no thread of its own: a caller whose call
 * finds no one driving the multi handle drives it (adds the calls handed
 * in, curl_multi_perform, curl_multi_poll) until its own call ends, then
 * leaves the driving to the next call or a caller still waiting; the
 * others hand their easy handle in (curl_multi_wakeup ends the driver's
 * poll) and wait for the driver to end their call. A call alone in
 * flight does not come here (grpc.c's own handle: no wait on another
 * thread). */
#include <stdlib.h>

#include "etcdb.h"

typedef struct gmux_call {
  struct gmux_call *next, **pprev; /* g->calls */
  struct gmux_call *fin;           /* the driver's: ended in this turn */
  CURL *h;
  int idx;
  bool fresh, prior;
  bool refused; /* it would have opened a connection without prior
                   knowledge */
  unsigned opens; /* its endpoint's mark (dl_etcd_h2_start) */
  bool added;   /* on the multi handle */
  bool done;    /* g->mu: ended, cc set, off the multi handle */
  bool lead;    /* g->mu: this caller drives */
  bool nudge;   /* g->mu: to drive if no one does when it wakes */
  CURLcode cc;
  pthread_cond_t cv;
} gmux_call;

struct etcd_gmux {
  pthread_mutex_t mu;
  CURLM *m;         /* used by the driver alone (curl_multi_wakeup: any) */
  bool driving;     /* mu: a caller drives m */
  bool polling;     /* mu: the driver is in curl_multi_poll, or about to */
  int nnew;         /* mu: calls handed in, not yet on m */
  gmux_call *calls; /* mu: handed in, not ended */
  etcd_h2conn *conns; /* mu: per endpoint */
  bool tls;
  etcd_corks corks; /* the driver's: m's connections' sockets */
};

int dl_etcd_gmux_new(dl_etcd *e) {
  struct etcd_gmux *g = calloc(1, sizeof *g);
  if (g) g->conns = calloc((size_t)e->nendpoints, sizeof *g->conns);
  if (g && g->conns) g->m = curl_multi_init();
  if (g == NULL || g->conns == NULL || g->m == NULL) {
    if (g) free(g->conns);
    free(g);
    return -1;
  }
  pthread_mutex_init(&g->mu, NULL);
  g->tls = e->tls;
  curl_multi_setopt(g->m, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
  /* curl's default is 100 streams a connection, then another connection,
   * which would not ask for prior knowledge (HTTP/1.1: etcd's gateway). */
  curl_multi_setopt(g->m, CURLMOPT_MAX_CONCURRENT_STREAMS, 1000L);
  e->gmux = g;
  return 0;
}

void dl_etcd_gmux_free(dl_etcd *e) {
  struct etcd_gmux *g = e->gmux;
  if (g == NULL) return;
  curl_multi_cleanup(g->m); /* its connections close (g->corks told) */
  pthread_mutex_destroy(&g->mu);
  free(g->conns);
  free(g);
  e->gmux = NULL;
}

void dl_etcd_gmux_gone(dl_etcd *e, int idx, unsigned mark) {
  struct etcd_gmux *g = e->gmux;
  pthread_mutex_lock(&g->mu);
  dl_etcd_h2_gone(&g->conns[idx], mark);
  pthread_mutex_unlock(&g->mu);
}

static void unlink_call(gmux_call *c) {
  if ((*c->pprev = c->next) != NULL) c->next->pprev = c->pprev;
}

/* Ends c with cc (g->mu held): its caller wakes, unless it is the driver. */
static void end_call(gmux_call *c, CURLcode cc, const gmux_call *self) {
  c->cc = cc;
  c->done = true;
  unlink_call(c);
  if (c != self) pthread_cond_signal(&c->cv);
}

/* The calls handed in since the last turn, onto the multi handle (g->mu
 * held: the endpoints' connections). */
static void add_new(dl_etcd *e, struct etcd_gmux *g, const gmux_call *self) {
  g->nnew = 0;
  for (gmux_call *c = g->calls, *next; c; c = next) {
    next = c->next;
    if (c->added) continue;
    etcd_h2conn *k = &g->conns[c->idx];
    /* One that would open the connection just after an attempt failed
     * to reach the server (handed in before that ended) ends with it. */
    if (!k->open && !c->fresh && dl_etcd_unreached_now(e, c->idx)) {
      end_call(c, CURLE_COULDNT_CONNECT, self);
      continue;
    }
    c->prior = false;
    if (!g->tls) {
      c->prior = c->fresh || !k->open;
      curl_easy_setopt(c->h, CURLOPT_HTTP_VERSION,
                       c->prior ? (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE
                                : (long)CURL_HTTP_VERSION_2_0);
      /* Prior knowledge on a new connection only: a call that failed
       * may have left its connection in the cache (a stream timed out). */
      curl_easy_setopt(c->h, CURLOPT_FRESH_CONNECT, c->prior ? 1L : 0L);
      /* One that would open a connection as HTTP/1.1 is refused, and
       * made again (dl_etcd_h2_refused). */
      dl_etcd_no_open(c->h, c->prior ? NULL : &c->refused);
    }
    /* Wait for the connection being opened rather than open another. */
    curl_easy_setopt(c->h, CURLOPT_PIPEWAIT, 1L);
    curl_easy_setopt(c->h, CURLOPT_PRIVATE, c);
    dl_etcd_corks_use(&g->corks, c->h);
    if (curl_multi_add_handle(g->m, c->h) != CURLM_OK) {
      end_call(c, CURLE_OUT_OF_MEMORY, self);
      continue;
    }
    c->added = true;
    c->opens = dl_etcd_h2_start(k, c->prior);
  }
}

/* One turn of the driver (g->mu not held): curl's work, then the calls
 * that ended, in a list through fin. */
static gmux_call *turn(struct etcd_gmux *g) {
  int running = 0, left = 0;
  CURLMcode mc = curl_multi_perform(g->m, &running);
  dl_etcd_corks_flush(&g->corks);
  gmux_call *fin = NULL;
  CURLMsg *msg;
  while ((msg = curl_multi_info_read(g->m, &left)) != NULL) {
    if (msg->msg != CURLMSG_DONE) continue;
    gmux_call *c = NULL;
    CURLcode cc = msg->data.result;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&c);
    curl_multi_remove_handle(g->m, msg->easy_handle);
    c->added = false;
    c->cc = cc;
    c->fin = fin;
    fin = c;
  }
  if (mc != CURLM_OK) { /* the multi handle's own failure: every call's */
    pthread_mutex_lock(&g->mu);
    for (gmux_call *c = g->calls; c; c = c->next)
      if (c->added) {
        curl_multi_remove_handle(g->m, c->h);
        c->added = false;
        c->cc =
            mc == CURLM_OUT_OF_MEMORY ? CURLE_OUT_OF_MEMORY : CURLE_RECV_ERROR;
        c->fin = fin;
        fin = c;
      }
    pthread_mutex_unlock(&g->mu);
  }
  return fin;
}

CURLcode dl_etcd_gmux_perform(dl_etcd *e, CURL *h, int idx, bool fresh,
                              bool *prior, bool *refused, unsigned *mark) {
  struct etcd_gmux *g = e->gmux;
  gmux_call c = {.h = h, .idx = idx, .fresh = fresh};
  dl_cond_init(&c.cv);
  pthread_mutex_lock(&g->mu);
  if ((c.next = g->calls) != NULL) c.next->pprev = &c.next;
  c.pprev = &g->calls;
  g->calls = &c;
  g->nnew++;
  if (!g->driving)
    g->driving = c.lead = true;
  else if (g->polling) /* else the driver looks before it polls */
    curl_multi_wakeup(g->m);
  while (!c.done) {
    if (c.nudge && !g->driving) g->driving = c.lead = true;
    c.nudge = false;
    if (!c.lead) {
      pthread_cond_wait(&c.cv, &g->mu);
      continue;
    }
    add_new(e, g, &c);
    if (c.done) break;
    pthread_mutex_unlock(&g->mu);
    gmux_call *fin = turn(g);
    pthread_mutex_lock(&g->mu);
    for (gmux_call *f = fin, *n; f; f = n) {
      n = f->fin;
      /* Told before the calls waiting for its connection see it, and
       * before those handed in meanwhile would open another. */
      if (f->prior) dl_etcd_h2_opened(&g->conns[f->idx], f->opens, f->cc);
      if (f->prior && dl_etcd_unreached(f->cc))
        dl_etcd_mark_unreached(e, f->idx);
      end_call(f, f->cc, &c);
    }
    if (c.done) break;
    if (g->nnew > 0) continue;
    g->polling = true;
    pthread_mutex_unlock(&g->mu);
    /* curl's own timeouts (CURLOPT_TIMEOUT_MS) shorten the wait; a call
     * handed in ends it (curl_multi_wakeup). */
    curl_multi_poll(g->m, NULL, 0, 1000, NULL);
    pthread_mutex_lock(&g->mu);
    g->polling = false;
  }
  if (c.lead) {
    /* The driving left to whoever comes first: a new call (often this
     * thread's next, with no wake-up), else a caller still waiting,
     * woken for it. */
    g->driving = false;
    if (g->calls) {
      g->calls->nudge = true;
      pthread_cond_signal(&g->calls->cv);
    }
  }
  /* Here, once the calls that ended with it are told (the one it waited
   * for among them). */
  if (c.refused && !dl_etcd_h2_refused(&g->conns[idx], c.opens))
    c.refused = false;
  pthread_mutex_unlock(&g->mu);
  pthread_cond_destroy(&c.cv);
  *prior = c.prior;
  *refused = c.refused;
  *mark = c.opens;
  return c.cc;
}
