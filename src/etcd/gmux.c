/* gmux.c: every gRPC call of a client multiplexed on one HTTP/2
 * connection per endpoint: one multi handle (CURLPIPE_MULTIPLEX, one
 * connection a host) driven by one thread of the client's, started at
 * the first call; a caller hands its configured easy handle over and
 * waits for it to end. Prior knowledge only for the call that opens an
 * endpoint's connection: curl 7.88 fails it on a reused connection
 * (curl issue 10634), so the others ask for HTTP/2 and wait for that
 * connection (CURLOPT_PIPEWAIT). */
#include <stdlib.h>

#include "etcdb.h"

typedef struct gmux_call {
  struct gmux_call *next;
  CURL *h;
  int idx;
  bool done;
  CURLcode result;
  pthread_cond_t cv;
} gmux_call;

struct etcd_gmux {
  pthread_mutex_t mu;
  pthread_t thread;
  bool started, stop;
  CURLM *multi;
  gmux_call *queue; /* mu: handed over, not yet on the multi handle */
  int running;      /* the driver's: transfers on the multi handle */
  bool renew;       /* mu: a new multi handle once none runs */
  bool *h2;         /* the driver's: an endpoint's connection opened */
};

static CURLM *multi_new(void) {
  CURLM *m = curl_multi_init();
  if (m == NULL) return NULL;
  curl_multi_setopt(m, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
  /* One connection a host: a second would not ask for prior knowledge,
   * so HTTP/1.1, which etcd hands to its gateway. */
  curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, 1L);
  curl_multi_setopt(m, CURLMOPT_MAX_CONCURRENT_STREAMS, 1000L);
  return m;
}

static void finish(struct etcd_gmux *g, gmux_call *c, CURLcode rc) {
  pthread_mutex_lock(&g->mu);
  c->result = rc;
  c->done = true;
  pthread_cond_signal(&c->cv);
  pthread_mutex_unlock(&g->mu);
}

static void *driver(void *ud) {
  dl_etcd *e = ud;
  struct etcd_gmux *g = e->gmux;
  for (;;) {
    pthread_mutex_lock(&g->mu);
    bool stop = g->stop;
    gmux_call *q = NULL;
    if (g->renew && g->running == 0) { /* a connection gone HTTP/1.1 */
      CURLM *m = multi_new();          /* out of memory: the old one kept */
      if (m) {
        curl_multi_cleanup(g->multi);
        g->multi = m;
        for (int i = 0; i < e->nendpoints; i++)
          g->h2[i] = false;
      }
      g->renew = false;
    }
    if (!g->renew || g->running == 0) {
      q = g->queue;
      g->queue = NULL;
    }
    pthread_mutex_unlock(&g->mu);
    while (q) {
      gmux_call *c = q;
      q = q->next;
      if (stop) {
        finish(g, c, CURLE_ABORTED_BY_CALLBACK);
        continue;
      }
      curl_easy_setopt(c->h, CURLOPT_PRIVATE, c);
      curl_easy_setopt(c->h, CURLOPT_PIPEWAIT, 1L);
      if (!e->tls)
        curl_easy_setopt(c->h, CURLOPT_HTTP_VERSION,
                         g->h2[c->idx]
                             ? (long)CURL_HTTP_VERSION_2_0
                             : (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE);
      if (curl_multi_add_handle(g->multi, c->h) != CURLM_OK) {
        finish(g, c, CURLE_OUT_OF_MEMORY);
        continue;
      }
      g->h2[c->idx] = true;
      g->running++;
    }
    if (stop) break;
    int still;
    curl_multi_perform(g->multi, &still);
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(g->multi, &left)) != NULL) {
      if (m->msg != CURLMSG_DONE) continue;
      gmux_call *c;
      CURL *h = m->easy_handle;
      CURLcode rc = m->data.result;
      long version = 0;
      curl_easy_getinfo(h, CURLINFO_PRIVATE, (char **)&c);
      curl_easy_getinfo(h, CURLINFO_HTTP_VERSION, &version);
      curl_multi_remove_handle(g->multi, h);
      g->running--;
      /* A failed call leaves h2 set: prior knowledge on a connection
       * still there would fail (a call that timed out keeps it). One
       * that is gone is found by the next call, which curl then sends as
       * HTTP/1.1 on a new connection: the multi handle is renewed, and
       * the call sent again with prior knowledge (grpc.c). */
      if (rc == CURLE_OK && version != CURL_HTTP_VERSION_2_0 && !e->tls) {
        pthread_mutex_lock(&g->mu);
        g->renew = true;
        pthread_mutex_unlock(&g->mu);
      }
      finish(g, c, rc);
    }
    curl_multi_poll(g->multi, NULL, 0, 1000, NULL);
  }
  return NULL;
}

CURLcode dl_etcd_gmux_perform(dl_etcd *e, CURL *h, int idx) {
  struct etcd_gmux *g = e->gmux;
  gmux_call c = {.h = h, .idx = idx};
  dl_cond_init(&c.cv);
  pthread_mutex_lock(&g->mu);
  if (!g->started && !g->stop) {
    g->started = pthread_create(&g->thread, NULL, driver, e) == 0;
  }
  if (!g->started) {
    pthread_mutex_unlock(&g->mu);
    pthread_cond_destroy(&c.cv);
    return CURLE_OUT_OF_MEMORY;
  }
  c.next = g->queue;
  g->queue = &c;
  curl_multi_wakeup(g->multi);
  while (!c.done)
    pthread_cond_wait(&c.cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
  pthread_cond_destroy(&c.cv);
  return c.result;
}

int dl_etcd_gmux_new(dl_etcd *e) {
  struct etcd_gmux *g = calloc(1, sizeof *g);
  if (g == NULL) return -1;
  g->h2 = calloc((size_t)e->nendpoints, sizeof *g->h2);
  g->multi = multi_new();
  if (g->h2 == NULL || g->multi == NULL) {
    if (g->multi) curl_multi_cleanup(g->multi);
    free(g->h2);
    free(g);
    return -1;
  }
  pthread_mutex_init(&g->mu, NULL);
  e->gmux = g;
  return 0;
}

void dl_etcd_gmux_free(dl_etcd *e) {
  struct etcd_gmux *g = e->gmux;
  if (g == NULL) return;
  pthread_mutex_lock(&g->mu);
  g->stop = true;
  bool started = g->started;
  if (g->multi) curl_multi_wakeup(g->multi);
  pthread_mutex_unlock(&g->mu);
  if (started) pthread_join(g->thread, NULL);
  if (g->multi) curl_multi_cleanup(g->multi);
  pthread_mutex_destroy(&g->mu);
  free(g->h2);
  free(g);
  e->gmux = NULL;
}
