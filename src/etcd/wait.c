/* wait.c: the etcd backend's watches, one stream each: a call of gRPC's
 * Watch (an HTTP/2 stream: grpc.c) or, with transport=json, the gateway's
 * /v3/watch (an HTTP/1.1 stream: the gateway takes one create_request per
 * request). A waiter watches its predecessor's key in its own thread
 * until it is deleted; the watcher thread runs a watch on every held key
 * on one libcurl multi handle, so that a key deleted by anyone (a force
 * release, etcdctl del, the lease's end) is told to the watchdog at once.
 * The stream's messages are parsed as they come (json-c's tokener, or
 * gRPC's frames): a chunk need not be one message. */
#include "etcdb.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct etcd_watch {
  etcd_watch *next;
  dl_etcd *e;
  char *lock; /* the hold's lock key, for the notice */
  char body[ETCD_KEY_MAX * 2 + 128];
  CURL *h;
  struct curl_slist *hd; /* h's headers (the token when it started) */
  etcd_stream st;
  int64_t retry_at; /* a stream that ended starts again then */
  bool cancelled;   /* the server cancelled it: h ends */
  bool stop;
  /* e->mu: bumped with every deletion, cancel or end of the stream heard,
   * and a start that failed: the key may be gone (dl_etcd_watch_heard). */
  unsigned heard;
};

/* Feeds n bytes of a stream to tok, calling on(ud, message) for each
 * whole message: 0, or -1 when the bytes are not JSON. */
static int feed(json_tokener *tok, const char *p, size_t n,
                void (*on)(void *, json_object *), void *ud) {
  while (n > 0) {
    json_object *o = json_tokener_parse_ex(tok, p, (int)n);
    enum json_tokener_error err = json_tokener_get_error(tok);
    if (o == NULL && err == json_tokener_continue) return 0;
    if (o == NULL) return -1;
    size_t used = json_tokener_get_parse_end(tok);
    on(ud, o);
    json_object_put(o);
    if (used == 0 || used > n) return -1;
    p += used;
    n -= used;
    while (n > 0 && (*p == '\n' || *p == '\r' || *p == ' ')) {
      p++;
      n--;
    }
  }
  return 0;
}

static int stream_init(dl_etcd *e, etcd_stream *st) {
  *st = (etcd_stream){.tok = e->grpc ? NULL : json_tokener_new()};
  return e->grpc || st->tok ? 0 : -1;
}

static void stream_reset(etcd_stream *st) {
  if (st->tok) json_tokener_reset(st->tok);
  st->buf.n = 0;
}

static void stream_free(etcd_stream *st) {
  if (st->tok) json_tokener_free(st->tok);
  free(st->buf.p);
}

static int stream_feed(etcd_stream *st, const char *p, size_t n,
                       void (*on)(void *, json_object *), void *ud) {
  return st->tok ? feed(st->tok, p, n, on, ud)
                 : dl_etcd_grpc_feed(&st->buf, p, n, on, ud);
}

/* The headers of a watch on e's transport (e->mu held): free with
 * dl_etcd_headers_free; NULL out of memory. */
static struct curl_slist *watch_headers_locked(dl_etcd *e) {
  return e->grpc ? dl_etcd_grpc_headers_locked(e)
                 : dl_etcd_headers_locked(e, NULL);
}

static int watch_setup(dl_etcd *e, CURL *h, int idx, const char *body,
                       struct curl_slist *hd, curl_write_callback write,
                       void *ud) {
  if (e->grpc) {
    if (dl_etcd_grpc_watch(e, h, idx, body, hd) != 0) return -1;
  } else {
    char url[512];
    snprintf(url, sizeof url, "%s/v3/watch", e->endpoints[idx]);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_COPYPOSTFIELDS, body);
    dl_etcd_setopts(e, h, hd, e->connect_timeout_ms);
  }
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, ud);
  return 0;
}

/* What a message says: 1 a DELETE event (any: any event; put: a PUT
 * event, which has no "type": the gateway omits zeros), 2 the watch was
 * cancelled or failed (compacted, an error), 0 nothing of that. */
static int message_kind(json_object *o, bool any, bool put) {
  json_object *r = dl_etcd_get(o, "result");
  if (r == NULL) return 2; /* {"error": ...} */
  json_object *c = dl_etcd_get(r, "canceled");
  if (c && json_object_get_boolean(c)) return 2;
  json_object *ev = dl_etcd_get(r, "events");
  if (ev && json_object_is_type(ev, json_type_array))
    for (size_t i = 0; i < json_object_array_length(ev); i++) {
      json_object *t = dl_etcd_get(json_object_array_get_idx(ev, i), "type");
      bool del = t && strcmp(json_object_get_string(t), "DELETE") == 0;
      if (any || (put ? !del : del)) return 1;
    }
  return 0;
}

/* ---- a waiter's watch on its predecessor ---- */
typedef etcd_waiting waiting;

static void on_wait_message(void *ud, json_object *o) {
  waiting *w = ud;
  int k = message_kind(o, w->any, w->put);
  if (k > w->seen) w->seen = k;
}

static size_t on_wait_data(char *p, size_t size, size_t nmemb, void *ud) {
  waiting *w = ud;
  if (stream_feed(&w->st, p, size * nmemb, on_wait_message, w) != 0) {
    w->bad = true;
    return 0;
  }
  return w->seen ? 0 : size * nmemb; /* heard it: the stream ends */
}

/* Runs the transfer h on its own multi handle, registered with e so that
 * wake_all or a cancel interrupts it at once: its result,
 * CURLE_ABORTED_BY_CALLBACK when woken (the client closing, the operation
 * cancelled), or CURLE_OPERATION_TIMEDOUT at the deadline. */
static CURLcode run_waiting(dl_etcd *e, CURL *h, waiting *w, int64_t deadline) {
  etcd_waitreg reg = {.m = curl_multi_init()};
  if (reg.m == NULL) return CURLE_OUT_OF_MEMORY;
  curl_multi_add_handle(reg.m, h);
  pthread_mutex_lock(&e->mu);
  reg.next = e->waits;
  e->waits = &reg;
  pthread_mutex_unlock(&e->mu);
  CURLcode cc = CURLE_OK;
  for (;;) {
    int running = 0;
    curl_multi_perform(reg.m, &running);
    CURLMsg *m;
    int left;
    bool done = false;
    while ((m = curl_multi_info_read(reg.m, &left)) != NULL)
      if (m->msg == CURLMSG_DONE) {
        cc = m->data.result;
        done = true;
      }
    if (done || running == 0) break;
    if (atomic_load(e->env->closing) || atomic_load(&e->wakes) != w->wakes ||
        dl_offload_cancelled()) {
      cc = CURLE_ABORTED_BY_CALLBACK;
      break;
    }
    int64_t now = dl_now_ms();
    if (now >= deadline) {
      cc = CURLE_OPERATION_TIMEDOUT;
      break;
    }
    int64_t t = deadline - now;
    curl_multi_poll(reg.m, NULL, 0, t > 1000 ? 1000 : (int)t, NULL);
  }
  pthread_mutex_lock(&e->mu);
  for (etcd_waitreg **pp = &e->waits; *pp; pp = &(*pp)->next)
    if (*pp == &reg) {
      *pp = reg.next;
      break;
    }
  pthread_mutex_unlock(&e->mu);
  curl_multi_remove_handle(reg.m, h);
  curl_multi_cleanup(reg.m);
  return cc;
}

void dl_etcd_pause(dl_etcd *e, int64_t ms) {
  int64_t end = dl_now_ms() + ms;
  struct timespec ts;
  dl_abstime(end, &ts);
  pthread_mutex_lock(&e->mu);
  while (!dl_offload_cancelled() && !atomic_load(e->env->closing) &&
         dl_now_ms() < end)
    pthread_cond_timedwait(&e->cv, &e->mu, &ts);
  pthread_mutex_unlock(&e->mu);
}

void dl_etcd_wake_waits(dl_etcd *e) {
  pthread_mutex_lock(&e->mu);
  for (etcd_waitreg *r = e->waits; r; r = r->next)
    curl_multi_wakeup(r->m);
  pthread_mutex_unlock(&e->mu);
}

/* Runs the watch `body` until news (1), the deadline (0), a wake after
 * the wake count `wakes` (0), or an error. */
static int wait_for(dl_etcd *e, const char *body, bool any, bool put,
                    int64_t deadline, unsigned wakes) {
  waiting w = {.e = e, .any = any, .put = put, .wakes = wakes};
  if (atomic_load(e->env->closing))
    return dl_seterr(e->err, DLOCK_ECLOSED, "the client is closing");
  if (dl_now_ms() >= deadline || dl_offload_cancelled()) return 0;
  CURL *h = curl_easy_init();
  if (h == NULL || stream_init(e, &w.st) != 0) {
    if (h) curl_easy_cleanup(h);
    return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  }
  int idx = atomic_load(&e->current);
  pthread_mutex_lock(&e->mu);
  struct curl_slist *hd = watch_headers_locked(e);
  pthread_mutex_unlock(&e->mu);
  CURLcode cc = CURLE_OUT_OF_MEMORY;
  if (hd && watch_setup(e, h, idx, body, hd, on_wait_data, &w) == 0) {
    atomic_fetch_add(&e->round_trips, 1);
    cc = run_waiting(e, h, &w, deadline);
  }
  int rc;
  if (w.seen) {
    rc = 1; /* deleted, or the watch ended: the caller looks again */
  } else if (cc == CURLE_ABORTED_BY_CALLBACK) {
    rc = atomic_load(e->env->closing)
             ? dl_seterr(e->err, DLOCK_ECLOSED, "the client is closing")
             : 0;
  } else if (cc == CURLE_OPERATION_TIMEDOUT && dl_now_ms() >= deadline) {
    rc = 0;
  } else if (w.bad) {
    rc = dl_seterr(e->err, DLOCK_EPROTO, "etcd %s: an answer not etcd's",
                   e->grpc ? "Watch" : "/v3/watch");
  } else if (cc == CURLE_OUT_OF_MEMORY) {
    rc = dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  } else {
    /* The stream ended without an event: the member went away (or was
     * never there). The next one is asked from now on, and the caller
     * looks again (its range fails over the same way), after a moment. */
    if (cc != CURLE_OK && e->nendpoints > 1)
      atomic_compare_exchange_strong(&e->current, &idx,
                                     (idx + 1) % e->nendpoints);
    dl_etcd_pause(e, 50);
    rc = 1;
  }
  stream_free(&w.st);
  /* A stream cut short leaves its connection unusable: not pooled. */
  curl_easy_cleanup(h);
  dl_etcd_headers_free(e, hd);
  return rc;
}

int dl_etcd_wait_delete(dl_etcd *e, const char *key, int64_t rev,
                        int64_t deadline) {
  return dl_etcd_wait_delete_since(e, key, rev, deadline,
                                   atomic_load(&e->wakes));
}

void dl_etcd_watch_delete_body(const char *key, int64_t rev, char *body,
                               size_t len) {
  char k64[ETCD_KEY_MAX * 2];
  dl_etcd_b64(key, strlen(key), k64);
  snprintf(body, len,
           "{\"create_request\":{\"key\":\"%s\",\"start_revision\":\"%" PRId64
           "\"}}",
           k64, rev + 1);
}

int dl_etcd_wait_delete_since(dl_etcd *e, const char *key, int64_t rev,
                              int64_t deadline, unsigned wakes) {
  char body[ETCD_WATCH_BODY_MAX];
  dl_etcd_watch_delete_body(key, rev, body, sizeof body);
  return wait_for(e, body, false, false, deadline, wakes);
}

/* ---- a waiter's watch on the event loop (acall.c's transfer) ---- */
etcd_waiting *dl_etcd_waiting_new(dl_etcd *e) {
  etcd_waiting *w = calloc(1, sizeof *w);
  if (w && stream_init(e, &w->st) != 0) {
    free(w);
    w = NULL;
  }
  if (w) w->e = e;
  return w;
}

void dl_etcd_waiting_free(etcd_waiting *w) {
  if (w == NULL) return;
  stream_free(&w->st);
  free(w);
}

struct curl_slist *dl_etcd_waiting_setup(dl_etcd *e, etcd_waiting *w, CURL *h,
                                         int idx, const char *body) {
  pthread_mutex_lock(&e->mu);
  struct curl_slist *hd = watch_headers_locked(e);
  pthread_mutex_unlock(&e->mu);
  if (hd && watch_setup(e, h, idx, body, hd, on_wait_data, w) != 0) {
    dl_etcd_headers_free(e, hd);
    hd = NULL;
  }
  if (hd) atomic_fetch_add(&e->round_trips, 1);
  return hd;
}

int dl_etcd_wait_change(dl_etcd *e, const char *pfx, int64_t rev,
                        int64_t deadline, unsigned wakes) {
  return dl_etcd_wait_prefix(e, pfx, rev, false, deadline, wakes);
}

void dl_etcd_watch_prefix_body(const char *pfx, int64_t rev, char *body,
                               size_t len) {
  char p64[ETCD_KEY_MAX * 2], end64[ETCD_KEY_MAX * 2];
  dl_etcd_b64(pfx, strlen(pfx), p64);
  dl_etcd_prefix_end(pfx, end64);
  snprintf(body, len,
           "{\"create_request\":{\"key\":\"%s\",\"range_end\":\"%s\","
           "\"start_revision\":\"%" PRId64 "\"}}",
           p64, end64, rev + 1);
}

int dl_etcd_wait_prefix(dl_etcd *e, const char *pfx, int64_t rev, bool put,
                        int64_t deadline, unsigned wakes) {
  char body[ETCD_WATCH_PREFIX_BODY_MAX];
  dl_etcd_watch_prefix_body(pfx, rev, body, sizeof body);
  return wait_for(e, body, !put, put, deadline, wakes);
}

/* ---- the watcher thread: the held keys ---- */
static void notify(dl_etcd *e, const char *lock) {
  pthread_mutex_lock(&e->mu);
  dl_notice_fn fn = e->notice;
  void *ud = e->notice_ud;
  pthread_mutex_unlock(&e->mu);
  if (fn) fn(ud, lock, lock ? strlen(lock) : 0);
}

static void on_hold_message(void *ud, json_object *o) {
  etcd_watch *w = ud;
  int k = message_kind(o, false, false);
  if (k == 0) return;
  pthread_mutex_lock(&w->e->mu);
  w->heard++;
  pthread_mutex_unlock(&w->e->mu);
  if (k == 2)
    w->cancelled = true;
  else
    notify(w->e, w->lock);
}

unsigned dl_etcd_watch_heard(const etcd_watch *w) {
  return w->heard;
}

static size_t on_hold_data(char *p, size_t size, size_t nmemb, void *ud) {
  etcd_watch *w = ud;
  if (stream_feed(&w->st, p, size * nmemb, on_hold_message, w) != 0) return 0;
  /* A watch cancelled (refused: a token no longer good; compacted) keeps
   * its stream open: ended here, it starts again. */
  return w->cancelled ? 0 : size * nmemb;
}

static void watch_free(etcd_watch *w) {
  if (w->h) {
    curl_multi_remove_handle(w->e->multi, w->h);
    curl_easy_cleanup(w->h);
  }
  dl_etcd_headers_free(w->e, w->hd);
  stream_free(&w->st);
  free(w->lock);
  free(w);
}

/* Starts w's stream (watcher thread, e->mu held). */
static void watch_start(dl_etcd *e, etcd_watch *w) {
  CURL *h = curl_easy_init();
  if (h) {
    dl_etcd_headers_free(e, w->hd);
    w->hd = watch_headers_locked(e);
  }
  if (h == NULL || w->hd == NULL ||
      watch_setup(e, h, atomic_load(&e->current), w->body, w->hd, on_hold_data,
                  w) != 0) {
    if (h) curl_easy_cleanup(h);
    w->heard++; /* not watched: nothing would be heard */
    return;
  }
  stream_reset(&w->st);
  w->cancelled = false;
  curl_easy_setopt(h, CURLOPT_PRIVATE, w);
  w->h = h;
  curl_multi_add_handle(e->multi, h);
}

/* One try at an orphan's delete (watcher thread): done, or back in the
 * list for the next try. */
static void delete_orphan(dl_etcd *e, etcd_hold *o) {
  int64_t deadline = dl_now_ms() + e->command_timeout_ms;
  int rc = dl_etcd_delete_at(e, o->key, o->rev, deadline);
  if (rc >= 0 || !dl_etcd_transient(rc)) {
    if (o->lease) dl_etcd_revoke(e, o->lease, deadline);
    dl_etcd_hold_free(o);
    return;
  }
  pthread_mutex_lock(&e->mu);
  o->next = e->orphans;
  e->orphans = o;
  e->orphan_at = dl_now_ms() + 500;
  pthread_mutex_unlock(&e->mu);
}

static void *watcher_main(void *arg) {
  dl_etcd *e = arg;
  for (;;) {
    pthread_mutex_lock(&e->mu);
    if (e->watcher_stop) {
      pthread_mutex_unlock(&e->mu);
      break;
    }
    int64_t now = dl_now_ms(), next = now + 200;
    /* Watches started now: their holds are checked once as well, below. A
     * key deleted before its watch began is told by etcd only from its
     * loop for watches behind the store's revision (every 100 ms); the
     * check hears it within a round trip. This thread alone frees a
     * watch, so the pointers last until the next pass. */
    etcd_watch *fresh[8];
    int nfresh = 0;
    bool all = false;
    for (etcd_watch **pp = &e->watches; *pp;) {
      etcd_watch *w = *pp;
      if (w->stop) {
        *pp = w->next;
        watch_free(w);
        continue;
      }
      if (w->h == NULL && now >= w->retry_at) {
        watch_start(e, w);
        if (nfresh < 8)
          fresh[nfresh++] = w;
        else
          all = true;
      }
      if (w->h == NULL && w->retry_at < next) next = w->retry_at;
      pp = &w->next;
    }
    if (e->watch_added && now + ETCD_WATCH_DEFER_MS < next)
      next = now + ETCD_WATCH_DEFER_MS;
    e->watch_added = false;
    e->watcher_next = next;
    etcd_hold *o = NULL;
    if (e->orphans && now >= e->orphan_at) {
      o = e->orphans;
      e->orphans = o->next;
    }
    pthread_mutex_unlock(&e->mu);
    if (all)
      notify(e, NULL);
    else
      for (int i = 0; i < nfresh; i++)
        notify(e, fresh[i]->lock);
    if (o) delete_orphan(e, o);
    int running;
    curl_multi_perform(e->multi, &running);
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(e->multi, &left)) != NULL) {
      if (m->msg != CURLMSG_DONE) continue;
      etcd_watch *w = NULL;
      curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&w);
      CURL *h = m->easy_handle;
      curl_multi_remove_handle(e->multi, h);
      curl_easy_cleanup(h);
      if (w == NULL) continue;
      pthread_mutex_lock(&e->mu);
      w->h = NULL;
      w->heard++;
      w->retry_at = dl_now_ms() + 200;
      bool stop = w->stop;
      pthread_mutex_unlock(&e->mu);
      /* The stream ended (the server, a member gone): the hold is checked
       * now, and watched again. */
      if (!stop) notify(e, w->lock);
    }
    int64_t t = next - dl_now_ms();
    if (t < 1) t = 1;
    curl_multi_poll(e->multi, NULL, 0, t > 200 ? 200 : (int)t, NULL);
  }
  return NULL;
}

static int start_watcher(dl_etcd *e);

int dl_etcd_watch_hold(dl_etcd *e, etcd_hold *h) {
  etcd_watch *w = calloc(1, sizeof *w);
  if (w == NULL || (w->lock = dl_strdup(h->lock)) == NULL ||
      stream_init(e, &w->st) != 0) {
    if (w) {
      free(w->lock);
      free(w);
    }
    return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  }
  w->e = e;
  char k64[ETCD_KEY_MAX * 2];
  dl_etcd_b64(h->key, strlen(h->key), k64);
  /* From just after the key's creation: a deletion since is heard too.
   * Not from the creation itself: a watch from a revision the server has
   * passed is "unsynced", its events sent by a loop every 100 ms; one from
   * the next revision is synced at once (unless others wrote meanwhile),
   * and hears a delete as it happens. */
  snprintf(w->body, sizeof w->body,
           "{\"create_request\":{\"key\":\"%s\",\"start_revision\":\"%" PRId64
           "\"}}",
           k64, h->rev + 1);
  /* Its stream starts a moment later: a hold released by then (a short
   * one: the common case under load) costs no connection, request or
   * stream on the server; one deleted meanwhile is heard by the check
   * made when the stream starts (watcher_main). */
  w->retry_at = dl_now_ms() + ETCD_WATCH_DEFER_MS;
  pthread_mutex_lock(&e->mu);
  int rc = start_watcher(e);
  bool wake = false;
  if (rc == 0) {
    w->next = e->watches;
    e->watches = w;
    h->watch = w;
    /* Due before the thread's next look (a new thread looks at once). */
    wake = w->retry_at < e->watcher_next;
    e->watch_added = true;
  }
  pthread_mutex_unlock(&e->mu);
  if (rc != 0) {
    stream_free(&w->st);
    free(w->lock);
    free(w);
    return rc;
  }
  if (wake) curl_multi_wakeup(e->multi);
  return 0;
}

/* Starts the watcher thread if it does not run (e->mu held): 0 or a
 * negative code. */
static int start_watcher(dl_etcd *e) {
  int rc = 0;
  if (!e->watcher_started) {
    e->multi = curl_multi_init();
    if (e->multi == NULL ||
        pthread_create(&e->watcher, NULL, watcher_main, e) != 0) {
      if (e->multi) curl_multi_cleanup(e->multi);
      e->multi = NULL;
      rc = dl_seterr(e->err, DLOCK_ENOMEM, "no watcher thread");
    } else {
      e->watcher_started = true;
    }
  }
  return rc;
}

void dl_etcd_orphan(dl_etcd *e, const char *key, int64_t rev, int64_t lease) {
  etcd_hold *o = calloc(1, sizeof *o);
  if (o == NULL || (o->key = dl_strdup(key)) == NULL) {
    free(o); /* out of memory: the key goes with our session */
    return;
  }
  o->rev = rev;
  o->lease = lease;
  pthread_mutex_lock(&e->mu);
  o->next = e->orphans;
  e->orphans = o;
  e->orphan_at = dl_now_ms() + 200;
  CURLM *m = start_watcher(e) == 0 ? e->multi : NULL;
  pthread_mutex_unlock(&e->mu);
  if (m) curl_multi_wakeup(m);
}

void dl_etcd_unwatch(dl_etcd *e, etcd_watch *w) {
  if (w == NULL) return;
  pthread_mutex_lock(&e->mu);
  w->stop = true;
  /* A stream not started yet holds nothing on the server: the thread
   * frees it at its next look, with no wake-up. */
  CURLM *m = w->h ? e->multi : NULL;
  pthread_mutex_unlock(&e->mu);
  if (m) curl_multi_wakeup(m);
}

void dl_etcd_watcher_stop(dl_etcd *e) {
  pthread_mutex_lock(&e->mu);
  bool started = e->watcher_started;
  e->watcher_stop = true;
  pthread_mutex_unlock(&e->mu);
  if (!started) return;
  curl_multi_wakeup(e->multi);
  pthread_join(e->watcher, NULL);
  while (e->watches) {
    etcd_watch *w = e->watches;
    e->watches = w->next;
    watch_free(w);
  }
  curl_multi_cleanup(e->multi);
  e->multi = NULL;
  e->watcher_started = false;
}
