/* grpc.c: the etcd backend's unary calls over etcd's gRPC API: HTTP/2 by
 * libcurl (cleartext with prior knowledge, TLS by ALPN), the messages by
 * protobuf-c, converted from and to the gateway's JSON (pbjson.c) so that
 * the call sites are the same on either transport; the hot path's txns
 * (pbtxn.c) are messages, packed as they are, and converted to and from
 * JSON for the gateway instead. A call is one POST of
 * one length-prefixed message (content-type application/grpc, te:
 * trailers): a call alone in flight on the client's own handle (gsolo)
 * and its HTTP/2 connection, with no other thread involved; calls of
 * several threads at once as streams of gmux.c's shared connection. The
 * status comes in the trailers (grpc-status, grpc-message), the token in
 * the `token` metadata. */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "etcd_min.pb-c.h"
#include "etcdb.h"
#include "pbjson.h"

/* The lone call's handle, the multi handle that drives it (and keeps its
 * connection), and the endpoint its HTTP/2 connection goes to (-1:
 * none). curl 7.88 fails a prior-knowledge request on a connection it
 * reuses (CURLE_HTTP2: curl issue 10634, fixed in 8.0), and HTTP/2
 * without prior knowledge opens a cleartext connection as HTTP/1.1 (which
 * etcd hands to its gateway): prior knowledge only when the handle has
 * no connection to that endpoint; at most one connection a handle.
 *
 * The connection's socket is corked (TCP_CORK) and flushed after each
 * curl_multi_perform: curl 7.88 writes each HTTP/2 frame of a call
 * (HEADERS, DATA, a PING's ACK) with a send() of its own, which costs
 * the server a read and a wake-up each (docs/PERFORMANCE.md, "etcd over
 * gRPC with libcurl"). */
struct etcd_gconn {
  CURL *h;
  CURLM *m;
  int ep;
  etcd_corks corks;
};

/* The gateway's paths and their gRPC methods. stream: a bidi stream
 * method, called with one message (its answer wrapped as the gateway
 * writes a stream's: {"result": ...}). safe: the server does the same
 * whether it runs once or twice (a read), so a call lost with its
 * connection goes again (dl_etcd_grpc_end). */
typedef struct etcd_method {
  const char *path, *grpc;
  const ProtobufCMessageDescriptor *req, *resp;
  bool stream, safe;
} method;

#define M(p, g, r, s, safe)                                                    \
  {                                                                            \
    p, g, &etcdserverpb__##r##_request__descriptor,                            \
        &etcdserverpb__##r##_response__descriptor, s, safe                     \
  }
static const method methods[] = {
    M("/v3/kv/txn", "/etcdserverpb.KV/Txn", txn, false, false),
    M("/v3/kv/range", "/etcdserverpb.KV/Range", range, false, true),
    M("/v3/kv/deleterange", "/etcdserverpb.KV/DeleteRange", delete_range,
      false, false),
    M("/v3/kv/put", "/etcdserverpb.KV/Put", put, false, false),
    M("/v3/lease/grant", "/etcdserverpb.Lease/LeaseGrant", lease_grant, false,
      false),
    M("/v3/lease/revoke", "/etcdserverpb.Lease/LeaseRevoke", lease_revoke,
      false, false),
    M("/v3/lease/keepalive", "/etcdserverpb.Lease/LeaseKeepAlive",
      lease_keep_alive, true, false),
    M("/v3/lease/timetolive", "/etcdserverpb.Lease/LeaseTimeToLive",
      lease_time_to_live, false, true),
    M("/v3/maintenance/status", "/etcdserverpb.Maintenance/Status", status,
      false, true),
    M("/v3/auth/authenticate", "/etcdserverpb.Auth/Authenticate", authenticate,
      false, false),
    M("/v3/watch", "/etcdserverpb.Watch/Watch", watch, true, false),
};
#undef M

static const method *method_of(const char *path) {
  for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
    if (strcmp(methods[i].path, path) == 0) return &methods[i];
  return NULL;
}

const struct etcd_method *dl_etcd_grpc_method(const char *path) {
  return method_of(path);
}

bool dl_etcd_path_safe(const char *path) {
  const method *m = method_of(path);
  return m && m->safe;
}

static int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static size_t on_header(char *p, size_t size, size_t n, void *ud) {
  etcd_req *r = ud;
  size_t len = size * n;
  if (len > 12 && strncasecmp(p, "grpc-status:", 12) == 0) {
    r->status = atoi(p + 12);
  } else if (len > 13 && strncasecmp(p, "grpc-message:", 13) == 0) {
    /* Percent-encoded (gRPC's spec), up to the line's end. */
    size_t o = 0, i = 13;
    while (i < len && p[i] == ' ')
      i++;
    for (; i < len && p[i] != '\r' && p[i] != '\n' && o + 1 < sizeof r->message;
         i++) {
      if (p[i] == '%' && i + 2 < len && hex(p[i + 1]) >= 0 &&
          hex(p[i + 2]) >= 0) {
        r->message[o++] = (char)(hex(p[i + 1]) << 4 | hex(p[i + 2]));
        i += 2;
      } else {
        r->message[o++] = p[i];
      }
    }
    r->message[o] = '\0';
  }
  return len;
}

/* e->gsolo, made at need: NULL out of memory. By the one call alone in
 * flight (e->gcalls was 0). */
static struct etcd_gconn *gconn_get(dl_etcd *e) {
  struct etcd_gconn *c = e->gsolo;
  if (c) return c;
  if ((c = malloc(sizeof *c)) == NULL) return NULL;
  c->ep = -1;
  c->corks.n = 0;
  c->h = curl_easy_init();
  c->m = curl_multi_init();
  if (c->h == NULL || c->m == NULL) {
    dl_etcd_gconn_free(c);
    return NULL;
  }
  curl_multi_setopt(c->m, CURLMOPT_MAXCONNECTS, 1L);
  return e->gsolo = c;
}

void dl_etcd_gconn_free(struct etcd_gconn *c) {
  if (c == NULL) return;
  if (c->h) curl_easy_cleanup(c->h);
  if (c->m) curl_multi_cleanup(c->m); /* closes the connection */
  free(c);
}

/* Fresh handles instead of c's (its connection closed). */
static int gconn_renew(struct etcd_gconn *c) {
  curl_easy_cleanup(c->h);
  curl_multi_cleanup(c->m);
  c->ep = -1;
  c->corks.n = 0;
  c->h = curl_easy_init();
  c->m = curl_multi_init();
  if (c->h && c->m) {
    curl_multi_setopt(c->m, CURLMOPT_MAXCONNECTS, 1L);
    return 0;
  }
  if (c->h) curl_easy_cleanup(c->h);
  if (c->m) curl_multi_cleanup(c->m);
  c->h = NULL;
  c->m = NULL;
  c->ep = -2; /* freed, not pooled */
  return -1;
}

int dl_etcd_cork(curl_socket_t fd) {
  int one = 1;
  return setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof one);
}

void dl_etcd_cork_flush(curl_socket_t fd) {
  int off = 0, on = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_CORK, &off, sizeof off);
  setsockopt(fd, IPPROTO_TCP, TCP_CORK, &on, sizeof on);
}

/* curl's new socket for a connection: corked (dl_etcd_corks_flush
 * sends). More than one while a connect tries the address families in
 * turn (happy eyeballs), the loser closed. */
static int on_sockopt(void *ud, curl_socket_t fd, curlsocktype purpose) {
  etcd_corks *k = ud;
  /* One more than it can flush stays uncorked: slower for the server,
   * never held back. */
  if (purpose == CURLSOCKTYPE_IPCXN && k->n < ETCD_CORKS_MAX &&
      dl_etcd_cork(fd) == 0)
    k->fds[k->n++] = fd;
  return CURL_SOCKOPT_OK;
}

/* curl closes a socket: no flush of it after. */
static int on_close(void *ud, curl_socket_t fd) {
  etcd_corks *k = ud;
  for (int i = 0; i < k->n; i++)
    if (k->fds[i] == fd) {
      k->fds[i] = k->fds[--k->n];
      break;
    }
  return close(fd);
}

void dl_etcd_corks_use(etcd_corks *k, CURL *h) {
  curl_easy_setopt(h, CURLOPT_SOCKOPTFUNCTION, on_sockopt);
  curl_easy_setopt(h, CURLOPT_SOCKOPTDATA, k);
  curl_easy_setopt(h, CURLOPT_CLOSESOCKETFUNCTION, on_close);
  curl_easy_setopt(h, CURLOPT_CLOSESOCKETDATA, k);
}

void dl_etcd_corks_flush(etcd_corks *k) {
  for (int i = 0; i < k->n; i++)
    dl_etcd_cork_flush(k->fds[i]);
}

static curl_socket_t refuse_open(void *ud, curlsocktype purpose,
                                 struct curl_sockaddr *a) {
  (void)purpose;
  (void)a;
  *(bool *)ud = true;
  return CURL_SOCKET_BAD;
}

void dl_etcd_no_open(CURL *h, bool *refused) {
  curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, refused ? refuse_open : NULL);
  curl_easy_setopt(h, CURLOPT_OPENSOCKETDATA, (void *)refused);
}

unsigned dl_etcd_h2_start(etcd_h2conn *k, bool opens) {
  if (opens) k->opens++;
  k->open = true;
  return k->opens;
}

void dl_etcd_h2_opened(etcd_h2conn *k, unsigned mark, CURLcode cc) {
  if (!dl_etcd_unreached(cc)) return;
  k->unreached = mark;
  /* No connection came of it: a try started from now on opens one
   * (gmux.c's opener thread marks it gone only later). */
  dl_etcd_h2_gone(k, mark);
}

void dl_etcd_h2_gone(etcd_h2conn *k, unsigned mark) {
  if (mark == k->opens) k->open = false;
}

bool dl_etcd_h2_refused(etcd_h2conn *k, unsigned mark) {
  if (mark == k->unreached) return false;
  dl_etcd_h2_gone(k, mark); /* the one it waited for (a server restart) */
  return true;
}

/* curl_easy_perform on c's own multi handle, flushing the corked socket
 * after curl has written (each curl_multi_perform). */
static CURLcode gconn_perform(struct etcd_gconn *c) {
  dl_etcd_corks_use(&c->corks, c->h);
  CURLMcode mc = curl_multi_add_handle(c->m, c->h);
  if (mc != CURLM_OK)
    return mc == CURLM_OUT_OF_MEMORY ? CURLE_OUT_OF_MEMORY
                                     : CURLE_FAILED_INIT;
  CURLcode cc = CURLE_OK;
  for (;;) {
    int running = 0, left = 0;
    mc = curl_multi_perform(c->m, &running);
    dl_etcd_corks_flush(&c->corks);
    if (mc != CURLM_OK) {
      cc = mc == CURLM_OUT_OF_MEMORY ? CURLE_OUT_OF_MEMORY : CURLE_RECV_ERROR;
      break;
    }
    CURLMsg *msg = curl_multi_info_read(c->m, &left);
    if (msg && msg->msg == CURLMSG_DONE) {
      cc = msg->data.result;
      break;
    }
    /* curl's own timeouts (CURLOPT_TIMEOUT_MS) shorten the wait. */
    mc = curl_multi_poll(c->m, NULL, 0, 1000, NULL);
    if (mc != CURLM_OK) {
      cc = CURLE_RECV_ERROR;
      break;
    }
  }
  curl_multi_remove_handle(c->m, c->h);
  return cc;
}

/* The request's headers: e's gRPC ones, headed by the token's metadata
 * (*gen: its generation) when auth and there is one; NULL out of memory.
 * e->mu held. */
static struct curl_slist *headers_locked(dl_etcd *e, bool auth, unsigned *gen) {
  struct curl_slist *l = e->grpc_headers;
  if (gen) *gen = e->token_gen;
  if (auth && e->token) {
    char line[600];
    snprintf(line, sizeof line, "token: %s", e->token);
    if ((l = curl_slist_append(NULL, line)) != NULL) l->next = e->grpc_headers;
  }
  return l;
}

struct curl_slist *dl_etcd_grpc_headers(dl_etcd *e, bool auth, unsigned *gen) {
  pthread_mutex_lock(&e->mu);
  struct curl_slist *l = headers_locked(e, auth, gen);
  pthread_mutex_unlock(&e->mu);
  return l;
}

struct curl_slist *dl_etcd_grpc_headers_locked(dl_etcd *e) {
  return headers_locked(e, true, NULL);
}

/* The gRPC frame (flag 0, length, message) of msg (*len bytes, the
 * caller frees it), or NULL out of memory. */
static uint8_t *frame_msg(const ProtobufCMessage *msg, size_t *len) {
  size_t n = protobuf_c_message_get_packed_size(msg);
  uint8_t *p = malloc(n + 5);
  if (p != NULL) {
    p[0] = 0;
    p[1] = (uint8_t)(n >> 24);
    p[2] = (uint8_t)(n >> 16);
    p[3] = (uint8_t)(n >> 8);
    p[4] = (uint8_t)n;
    protobuf_c_message_pack(msg, p + 5);
    *len = n + 5;
  }
  return p;
}

/* The gRPC frame of the JSON body as m's request (*len bytes, the caller
 * frees it), or NULL (a body that is not m's request, out of memory). */
static uint8_t *frame_of(const method *m, const char *body, size_t *len) {
  json_object *o = json_tokener_parse(body);
  ProtobufCMessage *msg = NULL;
  int bad = o == NULL || dl_pb_from_json(m->req, o, &msg) != 0;
  json_object_put(o);
  if (bad) return NULL;
  uint8_t *p = frame_msg(msg, len);
  protobuf_c_message_free_unpacked(msg, NULL);
  return p;
}

int dl_etcd_grpc_frame(dl_etcd *e, etcd_req *q, const char *body) {
  if ((q->req = frame_of(q->m, body, &q->len)) == NULL)
    return dl_seterr(e->err, DLOCK_EINVAL,
                     "etcd %s: a request that is not etcd's (or out of "
                     "memory)",
                     q->path);
  return 0;
}

int dl_etcd_grpc_req_pb(dl_etcd *e, etcd_req *q, const method *m,
                        const ProtobufCMessage *msg) {
  if (m == NULL || msg->descriptor != m->req)
    return dl_seterr(e->err, DLOCK_EINVAL,
                     "etcd %s: a request that is not etcd's", q->path);
  q->resp = m->resp;
  if (e->grpc) {
    q->m = m;
    if ((q->req = frame_msg(msg, &q->len)) == NULL)
      return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
    return 0;
  }
  json_object *o = dl_pb_to_json(msg);
  const char *t =
      o ? json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN) : NULL;
  if (t) {
    q->len = strlen(t);
    if ((q->req = malloc(q->len + 1)) != NULL) memcpy(q->req, t, q->len + 1);
  }
  json_object_put(o);
  return q->req ? 0 : dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
}

int dl_etcd_grpc_reply_of_json(dl_etcd *e, etcd_req *q, json_object *o) {
  const method *m = method_of(q->path);
  json_object *r = o;
  if (m && m->stream && !json_object_object_get_ex(o, "result", &r)) r = NULL;
  int bad =
      m == NULL || r == NULL || dl_pb_from_json_answer(m->resp, r, &q->reply);
  json_object_put(o);
  if (bad)
    return dl_seterr(e->err, DLOCK_EPROTO, "etcd %s: an answer not etcd's",
                     q->path);
  return 0;
}

/* The n bytes at p, one message of m's answer, as the gateway writes it
 * (a stream's wrapped: {"result": ...}): its JSON, or NULL with *bad set
 * (not m's answer) or not (out of memory). */
static json_object *message_json(const method *m, const uint8_t *p, size_t n,
                                 bool *bad) {
  ProtobufCMessage *msg = protobuf_c_message_unpack(m->resp, NULL, n, p);
  *bad = msg == NULL;
  if (msg == NULL) return NULL;
  json_object *o = dl_pb_to_json(msg), *w = NULL;
  protobuf_c_message_free_unpacked(msg, NULL);
  if (o == NULL || !m->stream) return o;
  if ((w = json_object_new_object()) == NULL ||
      json_object_object_add(w, "result", o) != 0) {
    json_object_put(w);
    json_object_put(o);
    return NULL;
  }
  return w;
}

/* The answer of a call that ended with grpc-status 0: its JSON in *out
 * (r->reply for a request made with a message), or a negative code
 * recorded. */
static int answer(dl_etcd *e, const method *m, const char *path, etcd_req *r,
                  json_object **out) {
  const uint8_t *p = (const uint8_t *)r->body.p;
  size_t got = r->body.n;
  size_t n = got >= 5 ? (size_t)p[1] << 24 | (size_t)p[2] << 16 |
                            (size_t)p[3] << 8 | p[4]
                      : 0;
  bool bad = !(got >= 5 && p[0] == 0 && got == n + 5);
  if (!bad && r->resp) {
    r->reply = protobuf_c_message_unpack(r->resp, NULL, n, p + 5);
    if (r->reply) return 0;
    bad = true; /* or out of memory: protobuf-c does not tell */
  }
  json_object *o = bad ? NULL : message_json(m, p + 5, n, &bad);
  if (bad)
    return dl_seterr(e->err, DLOCK_EPROTO,
                     "etcd %s: an answer that is not one message", path);
  if (o == NULL) return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  *out = o;
  return 0;
}

void dl_etcd_grpc_setup(dl_etcd *e, etcd_req *q, CURL *h, int idx,
                        struct curl_slist *hd, int64_t left, bool prior) {
  snprintf(q->url, sizeof q->url, "%s%s", e->endpoints[idx], q->m->grpc);
  curl_easy_setopt(h, CURLOPT_URL, q->url);
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, q->req);
  curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)q->len);
  dl_etcd_setopts(e, h, hd, left);
  curl_easy_setopt(h, CURLOPT_HTTP_VERSION,
                   e->tls  ? (long)CURL_HTTP_VERSION_2TLS
                   : prior ? (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE
                           : (long)CURL_HTTP_VERSION_2_0);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, q);
}

etcd_try dl_etcd_grpc_end(dl_etcd *e, etcd_req *q, CURL *h, int idx,
                          CURLcode cc, bool may_again, json_object **out,
                          int *code, int *rc, bool *h2) {
  long version = 0, status = 0;
  curl_easy_getinfo(h, CURLINFO_HTTP_VERSION, &version);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  *h2 = cc == CURLE_OK && version == CURL_HTTP_VERSION_2_0;
  /* A read lost with a connection it found open (curl 7.88 may put a
   * stream on one already gone, a server restarted): again, on a new
   * one. Anything else may have been done: its error stands. */
  bool lost_read = may_again && q->m->safe;
  if (cc != CURLE_OK) {
    bool next = false;
    *rc = dl_etcd_curl_error(e, q->path, idx, cc, q->why, &next);
    if (!next && *rc == DLOCK_ECONNLOST && lost_read) return ETCD_TRY_REREAD;
    return next ? ETCD_TRY_NEXT : ETCD_TRY_DONE;
  }
  atomic_store(&e->current, idx);
  if (!*h2 && !e->tls && may_again) return ETCD_TRY_AGAIN;
  if (!*h2)
    *rc = dl_seterr(e->err, DLOCK_EPROTO,
                    "etcd %s at %s: the server answered in HTTP/1 (HTTP "
                    "%ld): not etcd's gRPC port?",
                    q->path, e->endpoints[idx], status);
  else if (q->status == 0)
    *rc = answer(e, q->m, q->path, q, out);
  else if (q->status > 0)
    *rc = dl_etcd_status_error(e, q->path, q->status, q->message, status, code);
  else if (lost_read) /* (as below) */
    return ETCD_TRY_REREAD;
  else /* gRPC's trailers never came: curl 7.88 takes a connection
        * closed mid-answer (the server killed) for the stream's end */
    *rc = dl_seterr(e->err, DLOCK_ECONNLOST,
                    "etcd %s at %s: the answer cut short, without a gRPC "
                    "status (HTTP %ld)",
                    q->path, e->endpoints[idx], status);
  return ETCD_TRY_DONE;
}

/* One try of q at endpoint idx on h: on c's own connection (c: the
 * lone call's), or on gmux.c's shared one. again: a try again after the
 * connection had gone (prior knowledge on a new one); reread: a read's
 * second try (ETCD_TRY_REREAD), its last. */
static etcd_try try_on(dl_etcd *e, etcd_req *q, struct etcd_gconn *c, CURL *h,
                       int idx, struct curl_slist *hd, int64_t left, bool again,
                       bool reread, json_object **out, int *code, int *rc,
                       bool *h2) {
  if (c) {
    bool reused = c->ep == idx;
    dl_etcd_req_setup(e, q, h, idx, hd, left, !reused);
    curl_easy_setopt(h, CURLOPT_MAXCONNECTS, 1L);
    return dl_etcd_req_end(e, q, h, idx, gconn_perform(c),
                           reused && !again && !reread, out, code, rc, h2);
  }
  bool prior, refused;
  unsigned mark;
  CURLcode cc;
  int64_t end = dl_now_ms() + left;
  do { /* refused: nothing sent, again (gmux.c: opening the connection
        * or waiting for the one being opened) */
    dl_etcd_req_setup(e, q, h, idx, hd, left, false);
    cc = dl_etcd_gmux_perform(e, h, idx, again, &prior, &refused, &mark);
  } while (refused && (left = end - dl_now_ms()) > 0);
  /* Out of time while refused: nothing was sent, the server may be up. */
  if (refused) cc = CURLE_OPERATION_TIMEDOUT;
  etcd_try t = dl_etcd_req_end(e, q, h, idx, cc, !prior && !again && !reread,
                               out, code, rc, h2);
  if (!*h2) dl_etcd_gmux_gone(e, idx, mark); /* no connection kept */
  return t;
}

int dl_etcd_grpc_once(dl_etcd *e, etcd_req *q, int64_t deadline,
                      json_object **out, int *code, bool auth, unsigned *gen) {
  /* Alone in flight: the client's own handle, driven by this thread with
   * no other. Else a stream of the shared connection (gmux.c), which
   * this thread may drive for the others too. */
  bool solo = atomic_fetch_add(&e->gcalls, 1) == 0;
  struct etcd_gconn *c = solo ? gconn_get(e) : NULL;
  CURL *h = solo ? (c ? c->h : NULL) : dl_etcd_handle(e);
  struct curl_slist *hd = h ? dl_etcd_grpc_headers(e, auth, gen) : NULL;
  int start = atomic_load(&e->current), rc = 0;
  if (hd == NULL) rc = dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  bool again = false; /* the same endpoint again, with prior knowledge */
  bool reread = false; /* a read lost went once more */
  for (int i = 0; i < e->nendpoints && hd; i++) {
    int idx = (start + i) % e->nendpoints;
    int64_t left = deadline - dl_now_ms();
    if (left <= 0) {
      rc = dl_seterr(e->err, DLOCK_ETIMEDOUT, "etcd %s: no answer in time",
                     q->path);
      break;
    }
    if (!again && dl_etcd_skip_unreached(e, q->path, idx, &rc)) continue;
    bool h2;
    etcd_try t =
        try_on(e, q, c, h, idx, hd, left, again, reread, out, code, &rc, &h2);
    if (t == ETCD_TRY_AGAIN || t == ETCD_TRY_REREAD) {
      /* Our connection had gone (again: prior knowledge on a new one), or
       * a read was lost with it (reread: as a first try, the lone call
       * on a new connection of its own, a shared one's on whichever its
       * callers open next). Neither follows the other: each try's
       * may_again is false once either is set. */
      if (c && gconn_renew(c) != 0) {
        rc = dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
        break;
      }
      h = c ? c->h : h;
      again = t == ETCD_TRY_AGAIN;
      reread = reread || t == ETCD_TRY_REREAD;
      i--;
      continue;
    }
    again = false;
    if (c) {
      /* A connection that answered HTTP/2 is kept; any other may be half
       * gone: a fresh handle. */
      c->ep = h2 ? idx : -1;
      if (!h2 && gconn_renew(c) != 0 && t == ETCD_TRY_NEXT) {
        rc = dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
        break;
      }
      h = c->h;
    }
    if (t == ETCD_TRY_DONE) break;
  }
  if (hd) dl_etcd_headers_free(e, hd);
  if (c && c->ep == -2) { /* its handles freed by gconn_renew */
    free(c);
    e->gsolo = NULL;
  } else if (c) {
    curl_easy_reset(c->h);
  } else if (h) {
    dl_etcd_handle_put(e, h);
  }
  atomic_fetch_sub(&e->gcalls, 1);
  return rc;
}

/* ---- Watch: a bidirectional stream, one watch on each ---- */
int dl_etcd_grpc_watch(dl_etcd *e, CURL *h, int idx, const char *body,
                       struct curl_slist *hd) {
  size_t len;
  uint8_t *req = frame_of(method_of("/v3/watch"), body, &len);
  if (req == NULL) return -1;
  char url[512];
  snprintf(url, sizeof url, "%s/etcdserverpb.Watch/Watch", e->endpoints[idx]);
  curl_easy_setopt(h, CURLOPT_URL, url);
  /* The one request, then the client's half closed (END_STREAM): etcd's
   * watch server keeps the stream (its recvLoop takes io.EOF as no
   * error: etcd 3.4's v3rpc/watch.go) until the watch is cancelled or
   * the connection goes. */
  curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)len);
  curl_easy_setopt(h, CURLOPT_COPYPOSTFIELDS, req);
  free(req);
  /* A connection of its own, closed with it, as a gateway watch's: a
   * stream multiplexed on a reused connection (the watcher's multi
   * handle) ends at once on curl 7.88 with prior knowledge (curl issue
   * 10634, as gconn's); conformance etcd t_permits' second permit then
   * heard its take-away only by the 200 ms re-check. */
  curl_easy_setopt(h, CURLOPT_FRESH_CONNECT, 1L);
  curl_easy_setopt(h, CURLOPT_FORBID_REUSE, 1L);
  dl_etcd_setopts(e, h, hd, e->connect_timeout_ms);
  curl_easy_setopt(h, CURLOPT_HTTP_VERSION,
                   e->tls ? (long)CURL_HTTP_VERSION_2TLS
                          : (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE);
  return 0;
}

int dl_etcd_grpc_feed(etcd_buf *b, const char *p, size_t n,
                      void (*on)(void *, json_object *), void *ud) {
  if (dl_etcd_buf_write((char *)p, 1, n, b) != n) return -1;
  const method *m = method_of("/v3/watch");
  size_t at = 0;
  while (b->n - at >= 5) {
    const uint8_t *f = (const uint8_t *)b->p + at;
    size_t len =
        (size_t)f[1] << 24 | (size_t)f[2] << 16 | (size_t)f[3] << 8 | f[4];
    if (f[0] != 0) return -1; /* compressed: never asked for */
    if (b->n - at - 5 < len) break;
    bool bad;
    json_object *o = message_json(m, f + 5, len, &bad);
    if (o == NULL) return -1;
    on(ud, o);
    json_object_put(o);
    at += 5 + len;
  }
  if (at > 0) {
    memmove(b->p, b->p + at, b->n - at);
    b->n -= at;
  }
  return 0;
}
