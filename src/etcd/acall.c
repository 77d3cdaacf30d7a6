/* acall.c: an event-loop client's etcd calls with no thread: libcurl's
 * multi_socket interface driven by the client's loop (core.h's seam):
 * curl's sockets are dl_watches (CURLMOPT_SOCKETFUNCTION), its one
 * timeout a dl_timer (CURLMOPT_TIMERFUNCTION), and both call
 * curl_multi_socket_action; a finished transfer (curl_multi_info_read)
 * ends its try. Everything runs on the loop's thread. A call is
 * dl_etcd_call's: the same request, headers and errors (http.c's and
 * grpc.c's dl_etcd_req_*), the endpoints in turn while one cannot be
 * reached (a request that may have reached a server is not sent again),
 * one deadline, and a new token once when the server says ours is no
 * longer good (the authenticate is a call here too). Over gRPC the calls
 * share one HTTP/2 connection an endpoint, as streams (CURLPIPE_MULTIPLEX):
 * only the call that opens it asks for prior knowledge (curl 7.88 fails
 * prior knowledge on a reused connection, curl issue 10634), the others
 * wait for it (CURLOPT_PIPEWAIT) and may not open one (dl_etcd_no_open):
 * those that find it gone (a server restart) go again, one of them
 * opening a new one. */
#include "etcdb.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* The client's multi handle and what drives it. */
typedef struct etcd_aloop {
  dl_etcd *e;
  dl_loop *lp;
  CURLM *m;
  dl_timer timer; /* curl's timeout */
  int64_t due;    /* when it falls due (dl_now_ms() time), -1 none */
  etcd_h2conn *conns; /* per endpoint */
  struct asock *socks;
} etcd_aloop;

/* A socket curl watches: its dl_watch. */
typedef struct asock {
  struct asock *next, **pprev; /* a->socks */
  etcd_aloop *a;
  curl_socket_t fd;
  dl_watch *w;
  int ev;      /* the DL_EV_* curl waits for */
  bool corked; /* a call's connection (a watch's is not corked) */
} asock;

/* What curl wrote to its gRPC connections in a socket action, sent now:
 * their sockets are corked (on_sockopt), so the frames of every stream
 * written in one action go out together. */
static void flush_corked(etcd_aloop *a) {
  for (asock *s = a->socks; s; s = s->next)
    if (s->corked) dl_etcd_cork_flush(s->fd);
}

static int on_sockopt(void *ud, curl_socket_t fd, curlsocktype purpose) {
  (void)ud;
  if (purpose == CURLSOCKTYPE_IPCXN) dl_etcd_cork(fd);
  return CURL_SOCKOPT_OK;
}

struct etcd_acall {
  etcd_aloop *a;
  CURL *h;
  etcd_req q;
  struct curl_slist *hd;
  int64_t deadline;
  bool auth;         /* with the token (not the authenticate's own) */
  bool reauthed;     /* a new token was got once already */
  unsigned gen;      /* the token's generation sent */
  int start, i, idx; /* the endpoints: the first tried, tries, this one */
  bool again, may_again;
  bool reread;     /* a read lost went once more (ETCD_TRY_REREAD) */
  bool refused;    /* the try would have opened a connection without
                      prior knowledge (dl_etcd_no_open): nothing sent */
  unsigned opens;  /* its endpoint's when the try started */
  etcd_acall *sub; /* the authenticate under way for this call */
  etcd_waiting *w; /* a watch's stream (dl_etcd_awatch), else NULL */
  etcd_acall_fn fn;
  etcd_acall_pb_fn pbfn; /* instead of fn: a call made with a message */
  void *ud;
};

static void check_done(etcd_aloop *a);

static void on_io(void *ud, int events) {
  asock *s = ud;
  etcd_aloop *a = s->a;
  int flags = (events & DL_EV_READ ? CURL_CSELECT_IN : 0) |
              (events & DL_EV_WRITE ? CURL_CSELECT_OUT : 0);
  int running;
  curl_multi_socket_action(a->m, s->fd, flags, &running);
  flush_corked(a);
  check_done(a);
}

static void sock_free(asock *s) {
  if ((*s->pprev = s->next) != NULL) s->next->pprev = s->pprev;
  dl_watch_free(s->w);
  free(s);
}

static int on_socket(CURL *h, curl_socket_t fd, int what, void *ud,
                     void *sockp) {
  (void)h;
  etcd_aloop *a = ud;
  asock *s = sockp;
  if (what == CURL_POLL_REMOVE) {
    if (s) sock_free(s); /* curl forgets fd */
    return 0;
  }
  if (s == NULL) {
    if ((s = calloc(1, sizeof *s)) == NULL) return -1;
    s->a = a;
    s->fd = fd;
    int cork = 0;
    socklen_t len = sizeof cork;
    s->corked = getsockopt(fd, IPPROTO_TCP, TCP_CORK, &cork, &len) == 0 && cork;
    if (dl_watch_new(a->lp, fd, on_io, s, &s->w) != 0) {
      free(s);
      return -1;
    }
    curl_multi_assign(a->m, fd, s);
    if ((s->next = a->socks) != NULL) s->next->pprev = &s->next;
    s->pprev = &a->socks;
    a->socks = s;
  }
  s->ev = (what & CURL_POLL_IN ? DL_EV_READ : 0) |
          (what & CURL_POLL_OUT ? DL_EV_WRITE : 0);
  return dl_watch_set(s->w, s->ev) == 0 ? 0 : -1;
}

static void on_timer(void *ud) {
  etcd_aloop *a = ud;
  int running;
  a->due = -1;
  curl_multi_socket_action(a->m, CURL_SOCKET_TIMEOUT, 0, &running);
  flush_corked(a);
  check_done(a);
}

static int on_timeout(CURLM *m, long ms, void *ud) {
  (void)m;
  etcd_aloop *a = ud;
  if (ms < 0) {
    a->due = -1;
    dl_timer_stop(a->lp, &a->timer);
    return 0;
  }
  /* Fires from the loop's dispatch, never within this call. */
  a->due = dl_now_ms() + ms;
  return dl_timer_start(a->lp, &a->timer, a->due) == 0 ? 0 : -1;
}

int dl_etcd_aloop_new(dl_etcd *e) {
  etcd_aloop *a = calloc(1, sizeof *a);
  if (a) a->conns = calloc((size_t)e->nendpoints, sizeof *a->conns);
  if (a && a->conns) a->m = curl_multi_init();
  if (a == NULL || a->conns == NULL || a->m == NULL) {
    if (a) free(a->conns);
    free(a);
    return dl_seterr(NULL, DLOCK_ENOMEM, "out of memory");
  }
  a->e = e;
  a->lp = e->env->loop;
  a->due = -1;
  dl_timer_init(&a->timer, on_timer, a);
  curl_multi_setopt(a->m, CURLMOPT_SOCKETFUNCTION, on_socket);
  curl_multi_setopt(a->m, CURLMOPT_SOCKETDATA, a);
  curl_multi_setopt(a->m, CURLMOPT_TIMERFUNCTION, on_timeout);
  curl_multi_setopt(a->m, CURLMOPT_TIMERDATA, a);
  curl_multi_setopt(a->m, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
  /* curl's default is 100 streams a connection, then another connection,
   * which would not ask for prior knowledge (HTTP/1.1: etcd's gateway). */
  curl_multi_setopt(a->m, CURLMOPT_MAX_CONCURRENT_STREAMS, 1000L);
  e->aloop = a;
  return 0;
}

void dl_etcd_aloop_free(dl_etcd *e) {
  etcd_aloop *a = e->aloop;
  if (a == NULL) return;
  curl_multi_cleanup(a->m); /* its connections close */
  while (a->socks)          /* watches curl did not remove */
    sock_free(a->socks);
  dl_timer_stop(a->lp, &a->timer);
  free(a->conns);
  free(a);
  e->aloop = NULL;
}

void dl_etcd_aloop_drain(dl_etcd *e, bool (*more)(void *ud, int64_t *until),
                         void *ud) {
  etcd_aloop *a = e->aloop;
  struct pollfd *fds = NULL;
  int64_t until;
  while (a && more(ud, &until)) {
    int64_t now = dl_now_ms(), wait = until - now;
    if (wait <= 0) break;
    if (a->due >= 0 && a->due - now < wait)
      wait = a->due > now ? a->due - now : 0;
    nfds_t n = 0, k = 0;
    for (asock *s = a->socks; s; s = s->next)
      n++;
    struct pollfd *more_fds = realloc(fds, (n ? n : 1) * sizeof *fds);
    if (more_fds == NULL) break; /* the calls are the close's to abort */
    fds = more_fds;
    for (asock *s = a->socks; s; s = s->next)
      if (s->ev)
        fds[k++] = (struct pollfd){s->fd,
                                   (short)((s->ev & DL_EV_READ ? POLLIN : 0) |
                                           (s->ev & DL_EV_WRITE ? POLLOUT : 0)),
                                   0};
    int running, got = poll(fds, k, (int)wait);
    /* By descriptor, not by asock: an action may free another's. */
    for (nfds_t i = 0; got > 0 && i < k; i++) {
      short r = fds[i].revents;
      if (r == 0) continue;
      int flags = (r & (POLLIN | POLLHUP | POLLERR) ? CURL_CSELECT_IN : 0) |
                  (r & POLLOUT ? CURL_CSELECT_OUT : 0) |
                  (r & POLLERR ? CURL_CSELECT_ERR : 0);
      curl_multi_socket_action(a->m, fds[i].fd, flags, &running);
    }
    if (a->due >= 0 && dl_now_ms() >= a->due) {
      a->due = -1; /* curl sets the next */
      curl_multi_socket_action(a->m, CURL_SOCKET_TIMEOUT, 0, &running);
    }
    flush_corked(a);
    check_done(a);
  }
  free(fds);
}

static void call_free(etcd_acall *c) {
  if (c->h) {
    curl_multi_remove_handle(c->a->m, c->h);
    curl_easy_cleanup(c->h);
  }
  if (c->hd) dl_etcd_headers_free(c->a->e, c->hd);
  dl_etcd_req_free(&c->q);
  dl_etcd_waiting_free(c->w);
  free(c);
}

void dl_etcd_acall_abort(etcd_acall *c) {
  if (c == NULL) return;
  dl_etcd_acall_abort(c->sub);
  call_free(c);
}

/* Ends c: fn (or pbfn, with the answer's message) runs, c is freed. */
static void finish(etcd_acall *c, int rc, json_object *o, int code) {
  etcd_acall_fn fn = c->fn;
  etcd_acall_pb_fn pbfn = c->pbfn;
  void *ud = c->ud;
  ProtobufCMessage *m = NULL;
  if (rc == 0) { /* taken; else freed with c */
    m = c->q.reply;
    c->q.reply = NULL;
  }
  call_free(c);
  if (pbfn)
    pbfn(ud, rc, m, code);
  else
    fn(ud, rc, o, code);
}

/* Starts c's try at the endpoint c->i tries on: 0, or a negative code
 * recorded. */
static int try_start(etcd_acall *c) {
  etcd_aloop *a = c->a;
  dl_etcd *e = a->e;
  int64_t left = c->deadline - dl_now_ms();
  if (left <= 0)
    return dl_seterr(e->err, DLOCK_ETIMEDOUT, "etcd %s: no answer in time",
                     c->q.path);
  int rc;
  for (;;) { /* a call skips the endpoints just found unreachable */
    c->idx = (c->start + c->i) % e->nendpoints;
    if (c->w || c->again || !dl_etcd_skip_unreached(e, c->q.path, c->idx, &rc))
      break;
    if (++c->i >= e->nendpoints) return rc;
  }
  etcd_h2conn *k = &a->conns[c->idx];
  bool prior = c->again || !k->open;
  /* (The gateway's: any first try; a read lost goes once more.) */
  c->may_again = c->q.m ? !prior : true;
  dl_etcd_req_setup(e, &c->q, c->h, c->idx, c->hd, left, prior);
  curl_easy_setopt(c->h, CURLOPT_PRIVATE, c);
  if (c->q.m) {
    /* Wait for the connection being opened rather than open another.
     * Prior knowledge only on a new connection: a try that failed may
     * have left its connection in the multi's cache (a stream timed out),
     * and curl 7.88 fails prior knowledge on a reused one (CURLE_HTTP2). */
    curl_easy_setopt(c->h, CURLOPT_PIPEWAIT, 1L);
    curl_easy_setopt(c->h, CURLOPT_FRESH_CONNECT, prior ? 1L : 0L);
    curl_easy_setopt(c->h, CURLOPT_SOCKOPTFUNCTION, on_sockopt);
    /* Without prior knowledge it waits for a connection, never opens
     * one (it would be HTTP/1.1 on cleartext). */
    c->refused = false;
    if (!e->tls) dl_etcd_no_open(c->h, prior ? NULL : &c->refused);
  } else if (e->tls && c->w == NULL) {
    /* The gateway over TLS: HTTP/2 by ALPN, so calls at once wait for
     * the connection being opened (one a call after a server restart,
     * and kept: 50 more for 64 pings) and share it. */
    curl_easy_setopt(c->h, CURLOPT_PIPEWAIT, 1L);
  }
  if (curl_multi_add_handle(a->m, c->h) != CURLM_OK)
    return dl_seterr(e->err, DLOCK_ENOMEM, "etcd %s: curl_multi_add_handle",
                     c->q.path);
  /* Once added: a try that never started opens nothing. */
  if (c->q.m) c->opens = dl_etcd_h2_start(k, prior);
  return 0;
}

/* The first try of c (again from the current endpoint): 0, or a negative
 * code recorded. */
static int call_begin(etcd_acall *c) {
  dl_etcd *e = c->a->e;
  if (c->hd) dl_etcd_headers_free(e, c->hd);
  c->hd = dl_etcd_req_headers(e, &c->q, c->auth, &c->gen);
  if (c->hd == NULL) return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  c->start = atomic_load(&e->current);
  c->i = 0;
  c->again = false;
  c->reread = false;
  return try_start(c);
}

/* A new call (k->msg: its answer to pbfn, not fn). */
static int call_new(dl_etcd *e, const etcd_ask *k, int64_t deadline, bool auth,
                    etcd_acall_fn fn, etcd_acall_pb_fn pbfn, void *ud,
                    etcd_acall **out);

/* The authenticate's end: c's call again with the new token, or the
 * error. */
static void on_auth(void *ud, int rc, json_object *o, int code) {
  etcd_acall *c = ud;
  c->sub = NULL;
  rc = dl_etcd_auth_take(c->a->e, c->gen, rc, code, o);
  if (rc == 0) rc = call_begin(c);
  if (rc != 0) finish(c, rc, NULL, 0);
}

/* The end of a watch's stream (curl's result cc), as wait.c's blocking
 * watch ends. */
static void watch_end(etcd_acall *c, CURLcode cc) {
  dl_etcd *e = c->a->e;
  int rc = 2;
  if (c->w->seen)
    rc = 1;
  else if (c->w->bad)
    rc = dl_seterr(e->err, DLOCK_EPROTO, "etcd %s: an answer not etcd's",
                   e->grpc ? "Watch" : "/v3/watch");
  else if (cc == CURLE_OUT_OF_MEMORY)
    rc = dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  else if (cc != CURLE_OK && e->nendpoints > 1) /* the next one from now */
    atomic_compare_exchange_strong(&e->current, &c->idx,
                                   (c->idx + 1) % e->nendpoints);
  finish(c, rc, NULL, 0);
}

/* The end of c's try (curl's result cc). */
static void try_end(etcd_acall *c, CURLcode cc) {
  etcd_aloop *a = c->a;
  dl_etcd *e = a->e;
  curl_multi_remove_handle(a->m, c->h);
  if (c->w) {
    watch_end(c, cc);
    return;
  }
  json_object *o = NULL;
  int code = 0, rc = 0;
  etcd_h2conn *k = &a->conns[c->idx];
  if (c->refused && dl_etcd_h2_refused(k, c->opens)) {
    if ((rc = try_start(c)) != 0) finish(c, rc, NULL, 0);
    return;
  }
  bool h2;
  etcd_try t = dl_etcd_req_end(e, &c->q, c->h, c->idx, cc,
                               c->may_again && !c->again && !c->reread, &o,
                               &code, &rc, &h2);
  if (c->q.m && !c->may_again) /* it opened */
    dl_etcd_h2_opened(k, c->opens, cc);
  if (c->q.m && !h2) dl_etcd_h2_gone(k, c->opens); /* no connection kept */
  c->again = t == ETCD_TRY_AGAIN;
  /* A read lost: once more, as a first try (those lost with it wait for
   * the connection the first of them opens). */
  if (t == ETCD_TRY_REREAD) c->reread = true;
  if (t == ETCD_TRY_AGAIN || t == ETCD_TRY_REREAD ||
      (t == ETCD_TRY_NEXT && ++c->i < e->nendpoints)) {
    if ((rc = try_start(c)) != 0) finish(c, rc, NULL, 0);
    return;
  }
  /* A token no longer good: a new one, and the call again, once. */
  if (c->auth && !c->reauthed && dl_etcd_token_refused(e, rc, code)) {
    c->reauthed = true;
    char *body = dl_etcd_auth_body(e);
    etcd_ask ar = {"/v3/auth/authenticate", body, NULL};
    int arc =
        body ? call_new(e, &ar, c->deadline, false, on_auth, NULL, c, &c->sub)
             : dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
    free(body);
    if (arc == 0) return;
    rc = arc;
  }
  finish(c, rc, o, code);
}

/* Each transfer curl finished: its try's end. */
static void check_done(etcd_aloop *a) {
  CURLMsg *msg;
  int left;
  while ((msg = curl_multi_info_read(a->m, &left)) != NULL) {
    if (msg->msg != CURLMSG_DONE) continue;
    etcd_acall *c = NULL;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&c);
    if (c) try_end(c, msg->data.result);
  }
}

/* A new call of e's loop that ends with fn(ud, ...): NULL with the code
 * recorded in *rc (the client closed, out of memory). */
static etcd_acall *call_alloc(dl_etcd *e, etcd_acall_fn fn, void *ud, int *rc) {
  etcd_acall *c = NULL;
  if (e->aloop == NULL) /* closed (dl_etcd_aloop_free) */
    *rc = dl_seterr(e->err, DLOCK_ECLOSED, "the client closed");
  else if ((c = calloc(1, sizeof *c)) == NULL)
    *rc = dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  if (c) {
    c->a = e->aloop;
    c->fn = fn;
    c->ud = ud;
  }
  return c;
}

static int call_new(dl_etcd *e, const etcd_ask *k, int64_t deadline, bool auth,
                    etcd_acall_fn fn, etcd_acall_pb_fn pbfn, void *ud,
                    etcd_acall **out) {
  int rc;
  etcd_acall *c = call_alloc(e, fn, ud, &rc);
  *out = NULL;
  if (c == NULL) return rc;
  c->pbfn = pbfn;
  c->deadline = deadline;
  c->auth = auth;
  rc = dl_etcd_req_init(e, &c->q, k);
  if (rc == 0 && (c->h = curl_easy_init()) == NULL)
    rc = dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  if (rc == 0) rc = call_begin(c);
  if (rc != 0) {
    call_free(c);
    return rc;
  }
  *out = c;
  return 0;
}

int dl_etcd_acall(dl_etcd *e, const char *path, const char *body,
                  int64_t deadline, etcd_acall_fn fn, void *ud,
                  etcd_acall **out) {
  etcd_ask k = {path, body, NULL};
  return call_new(e, &k, deadline, true, fn, NULL, ud, out);
}

int dl_etcd_acall_ask(dl_etcd *e, const etcd_ask *k, int64_t deadline,
                      etcd_acall_fn fn, etcd_acall_pb_fn pbfn, void *ud,
                      etcd_acall **out) {
  return call_new(e, k, deadline, true, fn, pbfn, ud, out);
}

/* dl_etcd_awatch's and dl_etcd_awatch_put's. */
static int awatch(dl_etcd *e, const char *body, bool any, bool put,
                  etcd_acall_fn fn, void *ud, etcd_acall **out) {
  int rc;
  etcd_acall *c = call_alloc(e, fn, ud, &rc);
  *out = NULL;
  if (c == NULL) return rc;
  c->idx = atomic_load(&e->current);
  if ((c->w = dl_etcd_waiting_new(e)) != NULL &&
      (c->h = curl_easy_init()) != NULL) {
    c->w->any = any;
    c->w->put = put;
    c->hd = dl_etcd_waiting_setup(e, c->w, c->h, c->idx, body);
  }
  if (c->hd) curl_easy_setopt(c->h, CURLOPT_PRIVATE, c);
  if (c->hd == NULL || curl_multi_add_handle(c->a->m, c->h) != CURLM_OK) {
    call_free(c);
    return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  }
  *out = c;
  return 0;
}

int dl_etcd_awatch(dl_etcd *e, const char *body, bool any, etcd_acall_fn fn,
                   void *ud, etcd_acall **out) {
  return awatch(e, body, any, false, fn, ud, out);
}

int dl_etcd_awatch_put(dl_etcd *e, const char *body, etcd_acall_fn fn, void *ud,
                       etcd_acall **out) {
  return awatch(e, body, false, true, fn, ud, out);
}
