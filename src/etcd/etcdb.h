/* etcdb.h: what the etcd backend's files share: the endpoints, the calls
 * (http.c; over gRPC: grpc.c), the session lease, the holds and the
 * watches on them (watch.c). Only src/etcd includes libcurl's, json-c's
 * and protobuf-c's headers. */
#ifndef DLOCK_ETCDB_H
#define DLOCK_ETCDB_H

#include <curl/curl.h>
#include <json-c/json.h>
#include <protobuf-c/protobuf-c.h>
#include <pthread.h>
#include <stdatomic.h>

#include "../core/blockloop.h"
#include "etcd.h"

/* Full etcd keys of locks fit in this many bytes. */
#define ETCD_KEY_MAX 1024

/* A watch on one held key, run by the watcher thread (watch.c): its
 * deletion is the hold's loss, told at once to the watchdog. */
typedef struct etcd_watch etcd_watch;

/* How long a hold's watch waits before its stream starts (ms): a loss in
 * a hold's first moments is heard this much later, within etcd's 100 ms
 * promise. */
#define ETCD_WATCH_DEFER_MS 10

/* A waiter's multi handle, listed so that wake_all can wake it. */
typedef struct etcd_waitreg {
  struct etcd_waitreg *next;
  CURLM *m;
} etcd_waitreg;

/* One lock this client holds, or is acquiring (`held` false: a claim that
 * keeps the client's other owners of the same name off the same key, as
 * they share the session's lease and so the key). Re-entries take no
 * second key, and are counted by the client alone
 * (dl_backend_env.hold_count). */
typedef struct etcd_hold {
  struct etcd_hold *next;
  char *lock;     /* the lock's key (prefix + name), as the client names it */
  char *owner;    /* the dlock owner holding it */
  char *key;      /* the etcd key: URL prefix + lock + "/" + lease in hex */
  int64_t lease;  /* the session's, or the hold's own (fixed lease) */
  bool own_lease; /* a fixed lease: a lease of its own, revoked at the
                     release */
  int64_t lease_until; /* own_lease: until when it is surely valid */
  int64_t lease_ms;    /* own_lease: the fixed lease asked for */
  int64_t rev;         /* the key's create revision: the fencing token */
  bool held;
  bool permit; /* a permit of a permit-expirable semaphore (permits.c) */
  etcd_watch *watch;
  /* Its watch's dl_etcd_watch_heard when the last read that found the
   * key was sent: equal to it now, nothing said the key may be gone
   * since (a session keepalive then vouches for it: dl_etcd_renew_carry). */
  unsigned heard_seen;
  /* The transient error (dl_etcd_transient) the acquire taking this key
   * last met and rides out, 0 since a call was answered: what an acquire
   * of the same lock in this client, waiting behind this one, ends with
   * at its deadline (dl_etcd_claim), not DLOCK_EBUSY. */
  atomic_int riding;
} etcd_hold;

/* Fixed leases kept between holds (their keys deleted): at most this
 * many per client. */
#define ETCD_IDLE_MAX 8

typedef struct dl_etcd {
  dl_backend base;
  const dl_backend_env *env;
  /* Where details go: NULL (the open's) while opening, then the
   * client's (env->err_owner). */
  const struct dlock_client *err;
  char **endpoints; /* "http://host:port" */
  int nendpoints;
  /* Per endpoint: when a call last failed to reach it (dl_now_ms; 0: it
   * answered since), and how long calls skip it after that (the options'
   * reconnect_min_ms): dl_etcd_skip_unreached. */
  _Atomic int64_t *unreached_at;
  int unreached_ms;
  atomic_int current; /* the endpoint that answered last */
  char *prefix;       /* the URL's path without its leading '/', plus '/'
                         ("" without one) */
  int command_timeout_ms;
  int connect_timeout_ms;
  /* etcds://: TLS, with the options' files (NULL: curl's defaults). */
  bool tls;
  bool tls_verify;
  char *tls_ca_file, *tls_ca_dir, *tls_cert_file, *tls_key_file;
  /* etcd's token auth (NULL: none): the URL's or the options' user and
   * password, authenticated at the open and again whenever the server
   * says the token is no longer valid. */
  char *user, *password;
  pthread_mutex_t auth_mu; /* one authenticate at a time */
  char *token;             /* e->mu: sent in every request's header */
  unsigned token_gen;      /* e->mu: bumped with every new token */
  int64_t session_ttl_ms;  /* the watchdog lease */
  /* mu guards everything below; cv is broadcast when a hold or claim
   * goes (the client's other owners waiting for the key). */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct curl_slist *headers; /* of every request (but the token's) */
  CURL **pool;                /* idle easy handles (their connections kept) */
  int npool;
  /* The calls' and the watches' transport: gRPC (the default), or the
   * JSON gateway (the URL's transport=json). */
  bool grpc;
  struct curl_slist *grpc_headers; /* of every gRPC call (but the token) */
  /* grpc.c's blocking calls: one alone in flight (gcalls was 0) runs on
   * gsolo, its connection kept; the others join gmux.c's connections,
   * multiplexed. */
  atomic_int gcalls;        /* the blocking gRPC calls in flight */
  struct etcd_gconn *gsolo; /* the lone call's handle (created at need) */
  struct etcd_gmux *gmux;   /* gmux.c's multi handle, NULL: none yet */
  pthread_mutex_t lease_mu; /* one grant or keepalive of it at a time */
  int64_t lease;            /* the session's lease, 0 none */
  int64_t lease_ttl_s;      /* as granted */
  int64_t lease_until;      /* until when it is surely valid */
  etcd_hold *holds;
  /* Fixed leases whose holds ended with their keys deleted, for the next
   * fixed-lease acquire of the same TTL: a keepalive (no write on the
   * server) instead of a grant and a revoke (two writes, each an fsync),
   * as Go's Session keeps its lease across locks. */
  struct {
    int64_t lease, ttl_s;
    int64_t until; /* surely valid until then */
  } idle[ETCD_IDLE_MAX];
  int nidle;
  etcd_hold *orphans; /* keys of ours to delete (a release that failed) */
  int64_t orphan_at;  /* the next try */
  dl_notice_fn notice;
  void *notice_ud;
  atomic_uint wakes;   /* bumped by wake_all: waits look at closing */
  etcd_waitreg *waits; /* the waits in progress */
  /* The watcher thread (watch.c) and its multi handle. */
  pthread_t watcher;
  bool watcher_started;
  bool watcher_stop;
  /* When the watcher thread looks at its watches next, at the latest: a
   * watch due to start later needs no wake-up. While holds come, it looks
   * every ETCD_WATCH_DEFER_MS (watch_added: one came since its last
   * look), so that under load, where most holds are released before
   * their watch is due, no hold wakes it. */
  int64_t watcher_next;
  bool watch_added;
  CURLM *multi;
  etcd_watch *watches; /* every watch the thread runs or will start */
  atomic_llong round_trips;
  int participants; /* election threads running: freed only after them */
  /* An event-loop client's: the seam's event-loop form (blockloop.h), an
   * operation on a thread of its own, its waits ended by a cancel. */
  dl_blockloop *form;
  struct etcd_aloop *aloop; /* acall.c's: the loop's multi handle */
  struct dl_async *aops;    /* release.c's operations in flight (the
                               loop's thread) */
  /* asession.c's: the loop's operation whose session call (a grant or
   * keepalive, under lease_mu) is in flight, and those waiting for it, in
   * their order (the loop's thread). */
  struct dl_async *asess, *asess_wait;
  /* amutex.c's acquires waiting for another owner of this client to let
   * go of the lock's name (e->mu; only the loop's thread changes it), and
   * whether a hold went since they last looked (e->mu). */
  struct dl_async *aclaims;
  bool aclaim_look;
  struct etcd_consumer *consumers; /* mu: reliable.c's */
} dl_etcd;

/* ---- http.c: the calls ---- */
/* A call's answer as it comes (a NUL kept after its bytes), at most 64
 * MiB: a longer one fails the transfer. */
typedef struct etcd_buf {
  char *p;
  size_t n, cap;
} etcd_buf;
/* CURLOPT_WRITEFUNCTION appending to the etcd_buf ud: n, or 0 (too long,
 * out of memory). */
size_t dl_etcd_buf_write(char *ptr, size_t size, size_t nmemb, void *ud);
/* Calls the method of the gateway's `path` ("/v3/kv/txn") with `body`
 * (the gateway's JSON) on the current endpoint, trying the others when
 * one cannot be reached, until `deadline`: over gRPC (e->grpc: the JSON
 * turned into etcd's protobuf message and the answer back, pbjson.c) or
 * POSTed to the gateway. 0 with the answer's JSON, as the gateway writes
 * it, in *out (the caller puts it), or a negative code recorded (an
 * answer with an error: the server's message; its gRPC status in *code
 * when code is non-NULL, else 0). */
int dl_etcd_call(dl_etcd *e, const char *path, const char *body,
                 int64_t deadline, json_object **out, int *code);
/* As dl_etcd_call with the request a message of path's method (read, not
 * kept), for the hot path's calls (no JSON either way over gRPC; the
 * gateway's JSON converted at the transport, pbjson.c): 0 with the answer
 * in *out (free it with protobuf_c_message_free_unpacked(*out, NULL)),
 * or a negative code recorded. */
int dl_etcd_call_pb(dl_etcd *e, const char *path, const ProtobufCMessage *msg,
                    int64_t deadline, ProtobufCMessage **out, int *code);
/* As dl_etcd_call for the streaming calls that answer one message
 * ({"result": ...}): *out is that message's result. */
int dl_etcd_call1(dl_etcd *e, const char *path, const char *body,
                  int64_t deadline, json_object **out);
/* The result of a streaming call's answer o (o put here): 0 with it in
 * *out (the caller puts it), or DLOCK_EPROTO recorded. */
int dl_etcd_result(dl_etcd *e, const char *path, json_object *o,
                   json_object **out);
/* The headers of a request: e->headers, headed by the Authorization with
 * the current token when there is one (*gen, when gen is non-NULL: the
 * token's generation); NULL out of memory. Free with
 * dl_etcd_headers_free once the request is done. Any thread. */
struct curl_slist *dl_etcd_headers(dl_etcd *e, unsigned *gen);
/* As dl_etcd_headers, e->mu held. */
struct curl_slist *dl_etcd_headers_locked(dl_etcd *e, unsigned *gen);
void dl_etcd_headers_free(dl_etcd *e, struct curl_slist *l);
/* What every request of e's has on h: the headers, TLS (etcds://), no
 * signals, TCP_NODELAY, the connect timeout (at most ms). */
void dl_etcd_setopts(dl_etcd *e, CURL *h, struct curl_slist *headers,
                     int64_t connect_ms);
/* Authenticates with e->user and e->password unless the token changed
 * from generation gen since (another thread did): 0 with a new token, or
 * a negative code recorded (DLOCK_EAUTH: the server refused them). */
int dl_etcd_authenticate(dl_etcd *e, unsigned gen, int64_t deadline);
/* gRPC's status code grpc (not 0) and message msg (NULL: none) of a
 * call to path, HTTP status `status`, recorded as dlock's code (the
 * returned negative code; grpc, or 16 for a stale token, in *code when
 * code is non-NULL). */
int dl_etcd_status_error(dl_etcd *e, const char *path, int grpc,
                         const char *msg, long status, int *code);
/* curl's failure cc (why: its error buffer) of a call to path at
 * endpoint idx, recorded: the negative code, *next true when the server
 * was not reached (the next endpoint may be tried: nothing was sent). */
int dl_etcd_curl_error(dl_etcd *e, const char *path, int idx, CURLcode cc,
                       const char *why, bool *next);
/* Whether curl's result cc says the server was not reached (nothing
 * sent). */
bool dl_etcd_unreached(CURLcode cc);
/* Whether a call to path skips endpoint idx, not reached by a call less
 * than e->unreached_ms ago (the calls of many threads with the server
 * down end together, not each after a connection attempt of its own):
 * true with DLOCK_ECONNECT recorded in *rc. Any thread. */
bool dl_etcd_skip_unreached(dl_etcd *e, const char *path, int idx, int *rc);
/* A call failed to reach endpoint idx: calls skip it for e->unreached_ms
 * from now, unless they already do (the window is not lengthened by the
 * calls that share the failure). Any thread. */
void dl_etcd_mark_unreached(dl_etcd *e, int idx);
/* Whether calls skip endpoint idx now (dl_etcd_mark_unreached). */
bool dl_etcd_unreached_now(dl_etcd *e, int idx);
/* ---- one try of a call, for both drivers (http.c, grpc.c): the
 * blocking one (dl_etcd_call, an easy handle each) and the event loop's
 * (acall.c, on a multi handle) ---- */
struct etcd_method;
/* A call's request, the same for every try (what is POSTed: gRPC's
 * framed message, or the gateway's JSON), and one try's answer. */
typedef struct etcd_req {
  const char *path;            /* the gateway's ("/v3/kv/txn") */
  const struct etcd_method *m; /* its gRPC method; NULL: the gateway */
  uint8_t *req;                /* the request's bytes (owned) */
  size_t len;
  /* A call made with a message (etcd_ask.msg): the answer's type,
   * and the try's answer as a message (owned until taken), not JSON. */
  const ProtobufCMessageDescriptor *resp;
  ProtobufCMessage *reply;
  char url[512];
  etcd_buf body;     /* the try's answer */
  int status;        /* grpc-status, -1 until known */
  char message[300]; /* grpc-message */
  char why[CURL_ERROR_SIZE];
} etcd_req;
/* How a try ended (dl_etcd_req_end). */
typedef enum etcd_try {
  ETCD_TRY_DONE, /* its result is the call's */
  ETCD_TRY_NEXT, /* the server was not reached: the next endpoint */
  ETCD_TRY_AGAIN, /* a reused connection was gone and curl opened an
                     HTTP/1.1 one, which etcd gave its gateway (nothing
                     done): the same endpoint again, on a new connection
                     with prior knowledge */
  ETCD_TRY_REREAD /* a read lost with a connection the try found open
                     (dl_etcd_path_safe): the same endpoint once more, as
                     a first try (the calls lost with it share the
                     connection the first of them opens, or its failure) */
} etcd_try;
/* A call as its caller asks it, on either driver: path (the gateway's,
 * "/v3/kv/txn") with body, the gateway's JSON; or with msg, a message of
 * path's method (read, not kept; body NULL), its answer a message too. */
typedef struct etcd_ask {
  const char *path, *body;
  const ProtobufCMessage *msg;
} etcd_ask;
/* q for the call k: body over gRPC when e speaks it and path has a
 * method, else the gateway's; msg packed as is over gRPC, the gateway's
 * JSON of it otherwise (its answer: dl_etcd_req_end's q->reply). 0, or a
 * negative code recorded (a body that is not etcd's request, out of
 * memory). Free with dl_etcd_req_free. */
int dl_etcd_req_init(dl_etcd *e, etcd_req *q, const etcd_ask *k);
void dl_etcd_req_free(etcd_req *q);
/* The headers of q's tries: e's, headed by the token (gRPC's metadata or
 * the gateway's Authorization) when auth and there is one, its
 * generation in *gen (gen non-NULL); NULL out of memory. Free with
 * dl_etcd_headers_free. Any thread. */
struct curl_slist *dl_etcd_req_headers(dl_etcd *e, const etcd_req *q, bool auth,
                                       unsigned *gen);
/* Sets h up for a try of q at endpoint idx with headers hd, within left
 * ms; prior: gRPC's HTTP/2 with prior knowledge (cleartext: a handle
 * with no connection to idx), else HTTP/2 found on the connection. The
 * try's answer is reset. Counts a round trip. */
void dl_etcd_req_setup(dl_etcd *e, etcd_req *q, CURL *h, int idx,
                       struct curl_slist *hd, int64_t left, bool prior);
/* The end of a try of q at idx on h (curl's result cc): what next, and
 * *rc (DONE: 0 with *out, or with q->reply and *out NULL for a request
 * made with a message, DLOCK_EPROTO when it has none; or a negative code
 * recorded, *code the gRPC
 * status; NEXT: the code recorded). may_again: the try went without prior
 * knowledge on a reused connection (AGAIN possible). *h2: the answer came
 * over HTTP/2 (its connection may be reused). */
etcd_try dl_etcd_req_end(dl_etcd *e, etcd_req *q, CURL *h, int idx, CURLcode cc,
                         bool may_again, json_object **out, int *code, int *rc,
                         bool *h2);
/* Whether a call's error says our token is no longer good (rc, code:
 * dl_etcd_call's): the request was refused before it was applied, so it
 * may be sent again after a new token. */
bool dl_etcd_token_refused(dl_etcd *e, int rc, int code);
/* The body of /v3/auth/authenticate with e's user and password: malloc'ed,
 * or NULL out of memory. */
char *dl_etcd_auth_body(dl_etcd *e);
/* The end of an authenticate (rc, code, r: its call's, r put here) for
 * token generation gen: 0 (a new token kept, or none needed), or a
 * negative code recorded. */
int dl_etcd_auth_take(dl_etcd *e, unsigned gen, int rc, int code,
                      json_object *r);

/* ---- acall.c: calls on the event loop (an event-loop client's) ---- */
typedef struct etcd_acall etcd_acall;
/* A call's end: rc 0 with its answer o (the callee's: put it), or a
 * negative code recorded (code: the gRPC status, as dl_etcd_call's). On
 * the loop's thread. */
typedef void (*etcd_acall_fn)(void *ud, int rc, json_object *o, int code);
/* The event loop's multi handle for e (env->loop): 0, or a negative code
 * recorded. */
int dl_etcd_aloop_new(dl_etcd *e);
/* Frees it: every call still in flight must have been aborted; calls
 * started from now on fail with DLOCK_ECLOSED. The loop's thread. */
void dl_etcd_aloop_free(dl_etcd *e);
/* Drives e's multi handle on the calling thread (the loop's, the client
 * closing: the loop is not run meanwhile), polling its sockets and
 * keeping curl's timeout, while more(ud, &until) says calls are still to
 * be answered and until (dl_now_ms() time) is not reached. The calls' fns
 * run within. */
void dl_etcd_aloop_drain(dl_etcd *e, bool (*more)(void *ud, int64_t *until),
                         void *ud);
/* dl_etcd_call on the loop (its thread): the same request, headers,
 * endpoints in turn, deadline, re-authentication and errors, with no
 * thread. 0 and *out (fn(ud, ...) then runs once, later, on the loop's
 * thread), or a negative code recorded (fn never runs). */
int dl_etcd_acall(dl_etcd *e, const char *path, const char *body,
                  int64_t deadline, etcd_acall_fn fn, void *ud,
                  etcd_acall **out);
/* A call's end when made with a message: rc 0 with its answer m (the
 * callee's: free it with protobuf_c_message_free_unpacked(m, NULL)), or
 * a negative code recorded (m NULL). On the loop's thread. */
typedef void (*etcd_acall_pb_fn)(void *ud, int rc, ProtobufCMessage *m,
                                 int code);
/* dl_etcd_acall of the call k: with k->msg, the request a message
 * (dl_etcd_call_pb's), its answer a message to pbfn (fn NULL); else
 * k->body's, its answer to fn (pbfn NULL). */
int dl_etcd_acall_ask(dl_etcd *e, const etcd_ask *k, int64_t deadline,
                      etcd_acall_fn fn, etcd_acall_pb_fn pbfn, void *ud,
                      etcd_acall **out);
/* A waiter's watch (the body of dl_etcd_watch_delete_body, or with any of
 * dl_etcd_watch_prefix_body) on the loop, a stream with no deadline of its
 * own (the caller aborts it): 0 and *out, then fn(ud, rc, NULL, 0) once,
 * later: rc 1 news (the key deleted, or with `any` any event; or the
 * watch cancelled by the server: look again), 2 the stream ended without news
 * (a member gone: look again after a moment), or a negative code
 * recorded. Or a negative code recorded (fn never runs). */
int dl_etcd_awatch(dl_etcd *e, const char *body, bool any, etcd_acall_fn fn,
                   void *ud, etcd_acall **out);
/* As dl_etcd_awatch, a PUT being the news, not a DELETE (a queue's new
 * value: the body of dl_etcd_watch_prefix_body). */
int dl_etcd_awatch_put(dl_etcd *e, const char *body, etcd_acall_fn fn, void *ud,
                       etcd_acall **out);
/* Ends a call in flight; its fn never runs. The loop's thread. */
void dl_etcd_acall_abort(etcd_acall *c);
/* ---- release.c: the operations on it (own *_async entries) ---- */
/* The backend's own event-loop entries, for dl_blockloop_new. */
extern const dl_backend_ops dl_etcd_aops;
/* Ends every operation in flight (done: DLOCK_ECLOSED; a queue poll's
 * value that cannot go back: done 1, dl_etcd_queue_close): the client
 * closing. A plain poll's take or give-back in flight is answered first
 * and a value taken goes back (dl_etcd_queues_drain). The loop's thread;
 * it may block on a few calls (the takes' answers, revokes, a give-back),
 * each within the command timeout. */
void dl_etcd_aops_close(dl_etcd *e);
/* amutex.c's, for dl_blockloop_set_woken: the acquires waiting for
 * another owner of this client look again if a hold went. */
void dl_etcd_aclaims_woken(dl_backend *b);

/* ---- grpc.c ---- */
/* The gRPC method of the gateway's path, or NULL (none here). */
const struct etcd_method *dl_etcd_grpc_method(const char *path);
/* Whether the call at path (the gateway's) is a read: the server does the
 * same whether it runs once or twice, so one lost with a connection found
 * open goes once more (ETCD_TRY_REREAD). */
bool dl_etcd_path_safe(const char *path);
/* q->req: the JSON body as q->m's framed request message; 0, or a
 * negative code recorded. */
int dl_etcd_grpc_frame(dl_etcd *e, etcd_req *q, const char *body);
/* For dl_etcd_req_init with a message: q->resp set to m's answer type
 * (m: path's method, NULL none), and q->req the message, framed over gRPC
 * (e->grpc: q->m set to m), else the gateway's JSON of it; 0, or a
 * negative code recorded. */
int dl_etcd_grpc_req_pb(dl_etcd *e, etcd_req *q, const struct etcd_method *m,
                        const ProtobufCMessage *msg);
/* The gateway's answer o (put here) to a request made with a message, as
 * q->reply: 0, or a negative code recorded. */
int dl_etcd_grpc_reply_of_json(dl_etcd *e, etcd_req *q, json_object *o);
/* dl_etcd_req_setup and dl_etcd_req_end of a gRPC call. */
void dl_etcd_grpc_setup(dl_etcd *e, etcd_req *q, CURL *h, int idx,
                        struct curl_slist *hd, int64_t left, bool prior);
etcd_try dl_etcd_grpc_end(dl_etcd *e, etcd_req *q, CURL *h, int idx,
                          CURLcode cc, bool may_again, json_object **out,
                          int *code, int *rc, bool *h2);
/* The blocking call of q (over gRPC) on a pooled handle, every endpoint
 * tried in turn: 0 (*out), or a negative code recorded (*code: the gRPC
 * status). auth: with the token, whose generation goes to *gen. Any
 * thread. */
int dl_etcd_grpc_once(dl_etcd *e, etcd_req *q, int64_t deadline,
                      json_object **out, int *code, bool auth, unsigned *gen);
/* The headers of a gRPC call (dl_etcd_req_headers'). */
struct curl_slist *dl_etcd_grpc_headers(dl_etcd *e, bool auth, unsigned *gen);
/* The headers of a gRPC call: e's, headed by the token's metadata when
 * there is one; NULL out of memory. Free with dl_etcd_headers_free once
 * the call is done. e->mu held. */
struct curl_slist *dl_etcd_grpc_headers_locked(dl_etcd *e);
/* Sets h up for the watch `body` (the gateway's JSON: {"create_request":
 * ...}) as a call of gRPC's Watch at endpoint idx with the headers hd
 * (dl_etcd_grpc_headers_locked'): its URL, HTTP/2, its one request
 * message, after which the client's half of the stream is closed (etcd
 * keeps the stream). 0, or -1 (a body that is not etcd's WatchRequest,
 * out of memory). The caller sets the write callback. Any thread. */
int dl_etcd_grpc_watch(dl_etcd *e, CURL *h, int idx, const char *body,
                       struct curl_slist *hd);
/* Feeds n bytes of a Watch call's answer to b (the bytes of a message not
 * yet whole), calling on(ud, o) for each whole WatchResponse, o as the
 * gateway writes it ({"result": ...}, the callee does not keep it): 0,
 * or -1 (bytes that are not gRPC's WatchResponses, out of memory). */
int dl_etcd_grpc_feed(etcd_buf *b, const char *p, size_t n,
                      void (*on)(void *, json_object *), void *ud);
/* Frees a gRPC call's handle (the client closing). */
void dl_etcd_gconn_free(struct etcd_gconn *c);
/* The corked sockets of a multi handle's gRPC connections (grpc.c's
 * per-call handle's, gmux.c's shared one's). */
#define ETCD_CORKS_MAX 8
typedef struct etcd_corks {
  curl_socket_t fds[ETCD_CORKS_MAX];
  int n;
} etcd_corks;
/* Sets h's socket callbacks so that the connections it opens have their
 * sockets corked and recorded in k (until curl closes them); k outlives
 * them. */
void dl_etcd_corks_use(etcd_corks *k, CURL *h);
/* Sends what curl wrote to k's sockets (after each curl_multi_perform). */
void dl_etcd_corks_flush(etcd_corks *k);
/* With refused not NULL, h may not open a connection: one it would open
 * is refused (curl's result CURLE_COULDNT_CONNECT; nothing sent on it,
 * though curl may make it after a reused connection died under a request
 * sent there, which the caller's retry sends again: a claim or a fenced
 * delete, safe to repeat) and
 * *refused set (it lives as long as h's transfer); NULL: h opens
 * connections again. For a cleartext gRPC
 * call without prior knowledge, which curl would open as HTTP/1.1 (etcd
 * gives it its gateway): such a connection, kept, takes the calls
 * waiting for one (CURLOPT_PIPEWAIT) after it, left unanswered or each
 * on an HTTP/1.1 connection of its own (a server restart with many
 * calls in flight). */
void dl_etcd_no_open(CURL *h, bool *refused);
/* An endpoint's shared HTTP/2 connection as its gRPC tries see it
 * (acall.c's, gmux.c's; the caller's lock). On cleartext the try that
 * opens it asks for prior knowledge, the others wait for it and may not
 * open one (dl_etcd_no_open); after a server restart the first refused
 * opens a new one, the others wait for that, and when it does not reach
 * the server they end not reached with it, rather than each opening its
 * own. */
typedef struct etcd_h2conn {
  bool open;          /* open or opening */
  unsigned opens;     /* the tries started that open one */
  unsigned unreached; /* opens of the last such try that did not reach
                         the server */
} etcd_h2conn;
/* A try starts on k, opening the connection or not (waiting for it): its
 * mark, for the two below. */
unsigned dl_etcd_h2_start(etcd_h2conn *k, bool opens);
/* The try of mark that opened k's connection ended (curl's result cc);
 * one that did not reach the server also marks the connection gone. */
void dl_etcd_h2_opened(etcd_h2conn *k, unsigned mark, CURLcode cc);
/* The try of mark kept no connection: the next opens one, unless a try
 * started opening one since. */
void dl_etcd_h2_gone(etcd_h2conn *k, unsigned mark);
/* The try of mark was refused (dl_etcd_no_open: nothing sent): true, it
 * goes again (opening the connection unless a try started opening one
 * since); false, the connection it waited for did not reach the server,
 * nor did it (the next endpoint). */
bool dl_etcd_h2_refused(etcd_h2conn *k, unsigned mark);
/* ---- gmux.c: the blocking gRPC calls of several threads at once ---- */
/* Runs h (set up for a gRPC call to endpoint idx by dl_etcd_req_setup)
 * on e's one multi handle, its streams multiplexed on one HTTP/2
 * connection an endpoint: no thread of its own, the first waiting caller
 * drives the multi handle for every call on it and hands the driving on
 * when its own call ends. On cleartext, prior knowledge (*prior) only for
 * a call that opens the endpoint's connection (one that finds none, or
 * `fresh`: a try again after its connection had gone), the others wait
 * for it (curl 7.88 fails prior knowledge on a reused connection, curl
 * issue 10634); one that finds no connection to wait for is *refused
 * (nothing sent: to be made again, without `fresh`: one opens the
 * connection, the others wait for it; not refused but not reached when
 * the connection it waited for did not reach the server:
 * dl_etcd_h2_refused). *mark: the try's (dl_etcd_h2_start). curl's
 * result once the transfer ended. Any thread;
 * blocks; e->gmux set up (dl_etcd_gmux_new). */
CURLcode dl_etcd_gmux_perform(dl_etcd *e, CURL *h, int idx, bool fresh,
                              bool *prior, bool *refused, unsigned *mark);
/* A call to idx (its try's mark) ended without an HTTP/2 answer: the next
 * one opens a new connection (prior knowledge), unless a call started
 * opening one since (dl_etcd_h2_gone). Any thread. */
void dl_etcd_gmux_gone(dl_etcd *e, int idx, unsigned mark);
/* Sets up e->gmux: 0, or -1 out of memory. After the endpoints are
 * parsed. */
int dl_etcd_gmux_new(dl_etcd *e);
/* Frees e->gmux (no call on it) and closes its connections. */
void dl_etcd_gmux_free(dl_etcd *e);
/* TCP_CORK on a gRPC connection's socket fd: what curl writes waits in
 * the kernel until dl_etcd_cork_flush sends it, as one segment where it
 * fits (curl 7.88 sends each HTTP/2 frame alone, and each costs the
 * server a read). dl_etcd_cork: 0, or -1 (not corked). Any thread. */
int dl_etcd_cork(curl_socket_t fd);
void dl_etcd_cork_flush(curl_socket_t fd);
/* An easy handle from the pool (or a new one), and back. */
CURL *dl_etcd_handle(dl_etcd *e);
void dl_etcd_handle_put(dl_etcd *e, CURL *h);
/* base64 of n bytes into out (size >= 4 * ((n + 2) / 3) + 1). */
void dl_etcd_b64(const char *in, size_t n, char *out);
/* Decodes base64 into out (size len): the bytes, NUL added, or -1. */
int dl_etcd_unb64(const char *in, char *out, size_t len);
/* An int64 member of o (a JSON string or number; absent: 0, the gateway
 * omits zeros). */
int64_t dl_etcd_i64(json_object *o, const char *name);
/* A member of o, or NULL. */
json_object *dl_etcd_get(json_object *o, const char *name);
/* The first kv of a range response (kvs[0]), or NULL. */
json_object *dl_etcd_kv0(json_object *range);
/* The i-th response of a txn answer, of type "response_range" and so on:
 * the inner object, or NULL. */
json_object *dl_etcd_txn_resp(json_object *txn, int i, const char *type);

/* ---- backend.c: the session lease ---- */
/* The session lease, granted or kept alive as needed so that it stays
 * valid for at least half its TTL: 0 with *lease and *until, or a
 * negative code. A lease found gone loses every hold on it. */
int dl_etcd_session(dl_etcd *e, int64_t deadline, int64_t *lease,
                    int64_t *until);
/* Its steps, for both drivers (the caller holds e->lease_mu, or is the
 * loop's one session step): what the session needs at `now`: 0 nothing
 * (*lease, *until: it), 1 a keepalive of *lease, 2 a grant. */
int dl_etcd_session_need(dl_etcd *e, int64_t now, int64_t *lease,
                         int64_t *until);
/* The keepalive's answer (sent at `sent`; got: its TTL, 0 the lease is
 * gone): 0 kept (*until), 1 a grant is needed. */
int dl_etcd_session_kept(dl_etcd *e, int64_t sent, int64_t got, int64_t *until);
/* The grant's answer (sent at `sent`): the session's lease from now. */
void dl_etcd_session_granted(dl_etcd *e, int64_t sent, int64_t lease,
                             int64_t got, int64_t *until);
/* Keeps `lease` alive once: 1 alive (*ttl_s), 0 gone, or a negative code. */
int dl_etcd_keepalive(dl_etcd *e, int64_t lease, int64_t deadline,
                      int64_t *ttl_s);
/* A lease's request body ({"ID": id}: a revoke; a keepalive is a
 * message, pbtxn.h's). */
void dl_etcd_lease_body(int64_t id, char *body, size_t len);
/* Grants a lease of ttl_s seconds: 0 (*lease, *got_s), or a code. */
int dl_etcd_grant(dl_etcd *e, int64_t ttl_s, int64_t deadline, int64_t *lease,
                  int64_t *got_s);
/* Its request body, and its answer r (put here) as its result. */
void dl_etcd_grant_body(int64_t ttl_s, char *body, size_t len);
/* A grant's body naming the lease's ID (a random positive one), so that
 * it can be revoked when its answer never comes: that ID, or 0 (no random
 * bytes: the server chooses, as dl_etcd_grant_body's). A clash with a
 * live lease (odds 2^-63 a pair) fails the grant. */
int64_t dl_etcd_grant_id_body(int64_t ttl_s, char *body, size_t len);
int dl_etcd_grant_answer(dl_etcd *e, json_object *r, int64_t *lease,
                         int64_t *got_s);
/* Revokes a lease (its keys go): 0 or a negative code. */
int dl_etcd_revoke(dl_etcd *e, int64_t lease, int64_t deadline);
/* A fixed lease of lease_ms for a hold, surely valid for lease_ms from
 * the call: an idle one of the same TTL kept alive, else a new grant. 0
 * (*lease, *until), or a negative code. */
int dl_etcd_fixed_lease(dl_etcd *e, int64_t lease_ms, int64_t deadline,
                        int64_t *lease, int64_t *until);
/* Whether a fixed lease of lease_ms is kept by its keepalive's end (rc,
 * ttl_s: dl_etcd_keepalive's): alive, its TTL still covering the lease;
 * else a new one is due. */
static inline bool dl_etcd_fixed_kept(int rc, int64_t ttl_s, int64_t lease_ms) {
  return rc == 1 && ttl_s * 1000 >= lease_ms;
}
/* A fixed lease whose hold ended with its key deleted (nothing else on
 * it): kept idle for the next (the oldest idle one revoked when the
 * client keeps enough). */
void dl_etcd_lease_idle(dl_etcd *e, int64_t lease, int64_t lease_ms,
                        int64_t until);
/* Their halves, for the event loop's acquire: an idle fixed lease for
 * lease_ms taken off the list (0: none; keep it alive before use); and
 * one put on it, returning the oldest it pushed off (0: none; to
 * revoke). */
int64_t dl_etcd_idle_take(dl_etcd *e, int64_t lease_ms, int64_t now);
int64_t dl_etcd_idle_put(dl_etcd *e, int64_t lease, int64_t lease_ms,
                         int64_t until);

/* ---- mutex.c ---- */
int dl_etcd_lock_acquire(dl_backend *b, dl_acquire *a);
int dl_etcd_lock_release(dl_backend *b, const dl_lock_ref *l, int64_t lease_ms,
                         int count);
int dl_etcd_lock_force_release(dl_backend *b, const dl_lock_ref *l);
int dl_etcd_lock_query(dl_backend *b, const dl_lock_ref *l, dl_lock_query q,
                       long long *v);
/* A snapshot of the mutex at key (its keys under key + "/"). */
int dl_etcd_inspect(dl_backend *b, const char *key, dlock_lock_state *st);
/* Every holder of the lock at key to cb (a read lock's readers: the read
 * keys in front), for detect_deadlocks' walk: 0 or a negative code. */
int dl_etcd_lock_holders(dl_backend *b, const char *key, dl_holder_cb cb,
                         void *ud);
/* The mutexes whose names match the glob `match`, a page of keys at a
 * time (keys sorted by name: a lock's keys come together). */
int dl_etcd_scan(dl_backend *b, const char *match, size_t prefix_len,
                 dlock_scan_cb cb, void *ud);
/* Its halves, for both drivers: the state of a scan (its next page's
 * first key), begun; a page's /v3/kv/range body (ETCD_SCAN_BODY_MAX
 * bytes); and its answer r (put here): each name passed to cb (counted
 * in passed), true when there is a page after it (cb did not stop). */
typedef struct etcd_scan {
  const char *match;
  size_t prefix_len;
  dlock_scan_cb cb;
  void *ud;
  size_t pl; /* the URL's prefix's length */
  char end64[4 * ((ETCD_KEY_MAX + 2) / 3) + 1];
  char from[ETCD_KEY_MAX + 1], last[ETCD_KEY_MAX];
  size_t fl; /* from's length (its NUL too, after a page) */
  int passed;
} etcd_scan;
#define ETCD_SCAN_BODY_MAX ETCD_RANGE_BODY_MAX
void dl_etcd_scan_begin(dl_etcd *e, const char *match, size_t prefix_len,
                        dlock_scan_cb cb, void *ud, etcd_scan *sc);
void dl_etcd_scan_body(const etcd_scan *sc, char *body, size_t len);
bool dl_etcd_scan_page(etcd_scan *sc, json_object *r);
/* The waiters (waits.c): the keys in line behind each lock's holders
 * under the key prefix `prefix`, owner and info from their values. */
int dl_etcd_waiters(dl_backend *b, const char *prefix, dlock_waiter_cb cb,
                    void *ud);
/* What a key under a lock's prefix PFX is: a mutex's (PFX + a lease id in
 * hex), a read-write lock's reader or writer (contrib/recipes' RWMutex:
 * PFX + "read/" or "write/" + a decimal number), or nothing a recipe
 * makes. */
typedef enum etcd_key_kind {
  ETCD_KEY_NONE,
  ETCD_KEY_MUTEX,
  ETCD_KEY_READ,
  ETCD_KEY_WRITE
} etcd_key_kind;
/* A lock key's value (base64 v64): dlock writes "<owner>\n<info>" (Go
 * writes "", no owner): the owner into owner (else the key's lease in
 * hex, as etcdctl names it), the holder's description into info, each
 * cut to fit. */
void dl_etcd_holder_value(const char *v64, int64_t lease, char *owner,
                          size_t olen, char *info, size_t ilen);
int dl_etcd_renew(dl_backend *b, int64_t deadline, int64_t lease_ms, int n,
                  dl_renew_item *items, int *calls);
/* The renewal round's parts, for both drivers. The session keepalive's
 * end (rc, ttl: dl_etcd_keepalive's for lease, sent at `sent`): rc when
 * negative, else 0. */
int dl_etcd_renew_session_kept(dl_etcd *e, int64_t lease, int64_t sent, int rc,
                               int64_t ttl);
/* A consumer item's end (cr: dl_etcd_consumer_renew's) into its result,
 * and *first (the round's first error) if it is one. */
void dl_etcd_renew_consumer_end(dl_renew_item *it, int cr, int *first);
/* The reads of every item held here, in txns of at most ETCD_TXN_OPS
 * (etcd refuses more: its --max-txn-ops, 128 by default). */
#define ETCD_TXN_OPS 128
typedef struct etcd_renew_txns {
  int64_t *revs;   /* per item: its hold's create revision, 0 not held here */
  unsigned *heard; /* per item: its watch's dl_etcd_watch_heard then */
  char *reads;     /* the reads, txn c's from reads[cut[c]] to cut[c + 1] */
  size_t *cut;
  int ntxn;
} etcd_renew_txns;
/* Fills *t; an item not held gets result 0, except a permit's (result
 * -1: a consumer's, dl_etcd_consumer_renew's). 0, or DLOCK_ENOMEM. */
int dl_etcd_renew_txns(dl_etcd *e, int n, dl_renew_item *items,
                       etcd_renew_txns *t);
/* After the round's session keepalive (if any: a check has none): every
 * item of t held on `lease` while it is still the session's, whose key no
 * watch event has put in doubt since a read last found it (etcd_hold's
 * heard_seen), is held until e->lease_until, the lease's last confirmed
 * validity (result 1), before its read answers. Its key lives as long as
 * the lease unless deleted, and a deletion is heard on its watch (from
 * its create revision on). */
void dl_etcd_renew_carry(dl_etcd *e, int64_t lease, int n, dl_renew_item *items,
                         const etcd_renew_txns *t);
/* The deadline of a round's reads: deadline, but at most a third of the
 * session's lease away (a watchdog period): reads slower than that (the
 * server busy with a burst of acquires) would hold the next round's
 * keepalive back; their items are read again in the next round. */
int64_t dl_etcd_reads_deadline(const dl_etcd *e, int64_t deadline);
/* Txn c's body (malloc'ed), or NULL out of memory. */
char *dl_etcd_renew_body(const etcd_renew_txns *t, int c);
/* Txn c's answer r (kept) into its items: held (1), or lost and forgotten
 * (0). */
void dl_etcd_renew_answer(dl_etcd *e, int n, dl_renew_item *items,
                          const etcd_renew_txns *t, int c, json_object *r);
void dl_etcd_renew_txns_free(etcd_renew_txns *t);
/* fence.c: fenced resources (the seam's fence). */
int dl_etcd_fence(dl_backend *b, dl_fence_req *f);
/* Deletes key if its create revision is still rev: 1 deleted, 0 it was
 * not (gone, or another key by now), or a negative code. */
int dl_etcd_delete_at(dl_etcd *e, const char *key, int64_t rev,
                      int64_t deadline);
/* A release's delete of a key of ours (dl_etcd_delete_at), sent again
 * every 20 ms until `deadline` while the servers do not answer: 1
 * deleted (a retry finding it gone: an earlier try did it; *retried
 * true), 0 it was not there, or a negative code. */
int dl_etcd_delete_own(dl_etcd *e, const char *key, int64_t rev,
                       int64_t deadline, bool *retried);
/* The keys under the prefix pfx (ending in '/'), oldest (lowest create
 * revision) first, `limit` of them (0: all), values included: 0 with the
 * range's answer in *out, or a negative code. */
int dl_etcd_range_under(dl_etcd *e, const char *pfx, int limit,
                        json_object **out);
/* Its request's body into body (ETCD_RANGE_BODY_MAX bytes). */
#define ETCD_RANGE_BODY_MAX (3 * (4 * ((ETCD_KEY_MAX + 2) / 3) + 1))
void dl_etcd_range_under_body(const char *pfx, int limit, char *body,
                              size_t len);
/* The force release's halves (query.c), for both drivers: a range of the
 * keys under the lock's prefix pfx (dl_etcd_range_under, limit 0), then
 * from its answer r (put here) the txn that deletes every holder's key
 * at its create revision: 1 with its body in *out (malloc'ed), 0 nobody
 * holds the lock, or a negative code recorded (DLOCK_EWRONGTYPE: a key
 * no lock makes, nothing changed). A txn that did not succeed (a holder
 * changed) starts again, ETCD_FORCE_TRIES times at most, then
 * dl_etcd_force_busy's error. */
#define ETCD_FORCE_TRIES 5
/* A lock query's halves (query.c), for both drivers: its request (the
 * path, its body into body, ETCD_RANGE_BODY_MAX bytes; *rev the hold's
 * create revision for DL_QUERY_HELD and _COUNT), or NULL when it is
 * answered without one (*v 0: not held here); then from its answer r
 * (put here) *v, and for DL_QUERY_TTL the holder's lease, whose
 * /v3/lease/timetolive (dl_etcd_ttl_body, dl_etcd_ttl_answer: ms, or
 * DLOCK_TTL_FREE) gives *v (0: no second call). */
const char *dl_etcd_query_req(dl_etcd *e, const dl_lock_ref *l, dl_lock_query q,
                              char *body, size_t len, int64_t *rev);
int64_t dl_etcd_query_answer(dl_etcd *e, const dl_lock_ref *l, dl_lock_query q,
                             json_object *r, int64_t rev, long long *v);
void dl_etcd_ttl_body(int64_t lease, char *body, size_t len);
int64_t dl_etcd_ttl_answer(json_object *r);
/* inspect's halves: st reset, the lock's prefix into pfx (ETCD_KEY_MAX
 * bytes) and the /v3/kv/range body of its keys (ETCD_RANGE_BODY_MAX);
 * then their answer r (put here) into st and what to ask next: a
 * semaphore's counts (dl_etcd_sem_inspect's halves), the latch's key
 * (dl_etcd_latch_inspect's), the holder's *lease's timetolive (its answer
 * into st by dl_etcd_inspect_ttl, r put), or nothing. */
typedef enum etcd_inspect_next {
  ETCD_INSPECT_DONE,
  ETCD_INSPECT_SEM,
  ETCD_INSPECT_LATCH,
  ETCD_INSPECT_TTL
} etcd_inspect_next;
void dl_etcd_inspect_req(dl_etcd *e, const char *key, dlock_lock_state *st,
                         char *pfx, char *body, size_t len);
etcd_inspect_next dl_etcd_inspect_answer(json_object *r, const char *pfx,
                                         dlock_lock_state *st, int64_t *lease);
void dl_etcd_inspect_ttl(json_object *r, dlock_lock_state *st);
int dl_etcd_force_txn(dl_etcd *e, json_object *r, const char *pfx, char **out);
int dl_etcd_force_busy(dl_etcd *e, const dl_lock_ref *l);
/* A lease of ms milliseconds in etcd's whole seconds, rounded up (no
 * overflow near INT64_MAX). */
static inline int64_t dl_etcd_ttl_s(int64_t ms) {
  return ms / 1000 + (ms % 1000 != 0);
}

/* ---- holds.c: the locks the client holds or is taking (e->holds) ---- */
/* Frees h (NULL: nothing), unlisted. */
void dl_etcd_hold_free(etcd_hold *h);
/* Drops a hold or claim: unlinked (dl_etcd_hold_unlink), then unwatched
 * and freed (dl_etcd_hold_end). e->mu not held. */
void dl_etcd_hold_drop(dl_etcd *e, etcd_hold *h);
/* dl_etcd_hold_drop's halves, for a caller that holds e->mu already: h
 * off the list (e->mu held), the client's other owners waiting for the
 * key then looking again, on a thread (e->cv) or on the loop
 * (e->aclaims, woken through e->form); then, e->mu released, h
 * unwatched and freed. */
void dl_etcd_hold_unlink(dl_etcd *e, etcd_hold *h);
void dl_etcd_hold_end(dl_etcd *e, etcd_hold *h);
/* A claim on l for its owner (own_lease: a fixed lease), not yet listed:
 * NULL out of memory (recorded). */
etcd_hold *dl_etcd_claim_new(dl_etcd *e, const dl_lock_ref *l, bool own_lease);
/* Lists the claim h on l unless it would have to wait first (another
 * owner of this client on the same key: shared_key, the mutex's key is
 * the lease's) or clear a stale hold of the owner (*stale true): 1
 * listed, 0 not (nothing done). */
int dl_etcd_claim_now(dl_etcd *e, const dl_lock_ref *l, etcd_hold *h,
                      bool shared_key, bool *stale);
/* What an acquire of l (a mutex's: the key shared) parked behind another
 * owner's acquire in this client ends with at its deadline: 0 (not
 * taken: DLOCK_EBUSY), or the transient error that acquire rides out
 * (the server not reached), recorded. */
int dl_etcd_claim_riding(dl_etcd *e, const dl_lock_ref *l);
/* The stale hold of l's owner that dl_etcd_claim_now found (*stale),
 * taken to be cleared as a release takes its hold: no longer held (a
 * renewal or a check finding its key gone leaves it alone), unwatched,
 * still listed (the client's other owners of the name keep waiting) until
 * its key is deleted and it is dropped (dl_etcd_hold_drop); NULL none
 * now. */
etcd_hold *dl_etcd_stale_take(dl_etcd *e, const dl_lock_ref *l);
/* Waits for the client's other owner holding (or taking) l on the same
 * lease (shared_key: the mutex's key is the lease's) to let go, a stale
 * hold of the owner cleared on the way, then lists a claim on it (as
 * dl_etcd_claim_new's): 1 claimed (*out), 0 not by a's deadline (or a
 * cancel), or a negative code. */
int dl_etcd_claim(dl_etcd *e, dl_acquire *a, bool own_lease, bool shared_key,
                  etcd_hold **out);
/* A re-entry's first half: the create revision of the owner's hold of l
 * (its key into key, len bytes), 0 none held; its second, given the
 * key's create revision `now` (dl_etcd_create_rev_*: 0 gone): 1 taken
 * again (a's results), or 0 not the same key any more (the hold dropped:
 * take it afresh). */
int64_t dl_etcd_reenter_begin(dl_etcd *e, const dl_lock_ref *l, char *key,
                              size_t len);
int dl_etcd_reenter_end(dl_etcd *e, dl_acquire *a, int64_t rev, int64_t now);
/* The read-write lock's other side held by l's owner: for a reader, the
 * owner's write hold (":write" after its owner id); for a writer, the
 * owner's read hold. */
bool dl_etcd_other_side_held(dl_etcd *e, const dl_lock_ref *l);
/* The write side refused to the owner of l's read side (it would wait
 * for itself, as contrib's RWMutex does, forever): DLOCK_EDEADLK,
 * recorded. */
int dl_etcd_side_refused(dl_etcd *e, const dl_lock_ref *l);
/* Whether the claim h on l, put, holds the lock at once: nobody before it
 * (the owner, the oldest key under its wait prefix, owner_rev, is h or
 * younger; or none, for a reader: rw), or a downgrade (the read side of
 * the owner of the write side) while that owner is the owner's write
 * hold, still held. */
bool dl_etcd_mutex_ours(dl_etcd *e, const dl_lock_ref *l, const etcd_hold *h,
                        int64_t owner_rev, bool rw, bool downgrade);
/* The release's first half: 0 still held (count > 1: the client counts
 * re-entries), 1 with the hold no longer held (still listed, so that the
 * client's other owners of the name wait until dl_etcd_hold_drop) and
 * unwatched in *hp (its key to delete at its revision: release.c), or
 * DLOCK_ENOTOWNER recorded. */
int dl_etcd_release_begin(dl_etcd *e, const dl_lock_ref *l, int count,
                          etcd_hold **hp);

/* ---- line.c: the requests on a line of keys under one prefix ---- */
/* The range [key, range_end) of every key under `pfx` (which ends with
 * '/'): range_end's bytes into end (pfx with its last byte + 1; not
 * terminated), their count returned. */
size_t dl_etcd_range_end(const char *pfx, char *end);
/* As dl_etcd_range_end, range_end's base64 (terminated) into end_b64. */
void dl_etcd_prefix_end(const char *pfx, char *end_b64);
/* Creates h's key (h->key on h->lease, `value`) in one txn that also reads
 * the owner under pfx, the lowest create revision there (Go's
 * Mutex.tryAcquire, Election.Campaign): 0 with h->rev and *owner_rev (0:
 * nobody), 1 when h->key is there on another lease (not ours: nothing
 * changed, h->rev 0), or a negative code. Our key there already (left by
 * a release that did not get through) is taken as it is, as Go's Mutex
 * does; with `fresh`, deleted at its create revision and made anew, so
 * that the hold's revision is its own: a late delete of the old key (the
 * orphan's, dl_etcd_delete_at) then finds nothing to delete. */
int dl_etcd_put_and_read(dl_etcd *e, etcd_hold *h, const char *value,
                         const char *pfx, bool fresh, int64_t deadline,
                         int64_t *owner_rev);
/* How often a fresh put deletes our old key and tries again. */
#define ETCD_FRESH_TRIES 3
/* How often a read-write lock's put, its key found someone else's (a
 * clash of clocks), tries again with a new key. */
#define ETCD_RW_CLASHES 3
/* A line (a lock's, an election's, a semaphore's waiters') holds only
 * keys on leases: one on none is another kind's at the name.
 * DLOCK_EWRONGTYPE recorded, naming key (ours, or the line's prefix). */
int dl_etcd_foreign_in_line(dl_etcd *e, const char *key);
/* The key before ours in the line: the highest create revision below
 * `rev` under pfx. 1 found (its key in pred, the answer's revision in
 * *at), 0 none, or a negative code (DLOCK_EWRONGTYPE: it is on no
 * lease). */
int dl_etcd_predecessor(dl_etcd *e, const char *pfx, int64_t rev, char *pred,
                        size_t len, int64_t *at, int64_t deadline);
/* A waiter's look, in one txn: whether its own key (at its create
 * revision rev) is still there, and if so the key before it under pfx.
 * Its body (malloc'ed, NULL out of memory); its answer r (put here): 1
 * (*pred, *at: the revision read), 0 nobody before it, DLOCK_ELOST our
 * key is gone, DLOCK_EWRONGTYPE the key before it is on no lease
 * (recorded). */
char *dl_etcd_look_body(const char *key, const char *pfx, int64_t rev);
int dl_etcd_look_answer(dl_etcd *e, const char *key, json_object *r, char *pred,
                        size_t len, int64_t *at);
/* The look's blocking call: as its answer, or a negative code. */
int dl_etcd_look(dl_etcd *e, const char *key, const char *pfx, int64_t rev,
                 char *pred, size_t len, int64_t *at, int64_t deadline);
/* A range reading key's create revision: its body (ETCD_CREATE_REV_BODY_MAX
 * bytes), and its answer r (put here): > 0, 0 the key is gone. */
#define ETCD_CREATE_REV_BODY_MAX (4 * ((ETCD_KEY_MAX + 2) / 3) + 70)
void dl_etcd_create_rev_body(const char *key, char *body, size_t len);
int64_t dl_etcd_create_rev_answer(json_object *r);
/* Its blocking call: the create revision of key now (> 0, 0 gone), or a
 * negative code. */
int64_t dl_etcd_create_rev(dl_etcd *e, const char *key, int64_t deadline);
/* Deletes key whatever its revision (one of ours, on our lease, while we
 * hold the claim on it: nobody else's); its answer is not read. Its
 * /v3/kv/deleterange body (ETCD_DELETE_KEY_BODY_MAX bytes; key shorter
 * than ETCD_KEY_MAX): the event loop's. */
void dl_etcd_delete_key(dl_etcd *e, const char *key);
#define ETCD_DELETE_KEY_BODY_MAX (4 * ((ETCD_KEY_MAX + 2) / 3) + 32)
void dl_etcd_delete_key_body(const char *key, char *body, size_t len);

/* ---- ride.c: a wait's failed calls ---- */
/* Whether a call's error may pass (no answer: the server unreachable or
 * slow). */
bool dl_etcd_transient(int rc);
/* Tells the acquires of h's lock in this client waiting behind h's that
 * it rides out rc (a transient error), or, rc being any other, that it
 * does not (etcd_hold.riding). */
void dl_etcd_riding(etcd_hold *h, int rc);
/* The server answered a call of the acquire of h (either driver): its
 * ride, if any, is over (*rides reset, dl_ride_answered), and the acquires
 * waiting behind it are told it no longer rides anything out. */
void dl_etcd_answered(etcd_hold *h, dl_ride *rides);
/* A wait (wait true, until deadline) rides out what a member lost or a
 * leader change makes requests fail with, as the Redis waits ride out a
 * failover: true after a pause (20 ms, doubling up to 200 ms; *rides
 * keeps the ride, dl_ride_pause_ms) when rc is transient and the deadline
 * leaves room, false when the error stands (the client closing, the
 * operation cancelled, the time spent). */
bool dl_etcd_ride_out(dl_etcd *e, bool wait, int64_t deadline, int rc,
                      dl_ride *rides);
/* Its decision alone (the event loop's waits pause on a timer): the
 * pause in ms, or 0 when the error stands. */
int64_t dl_etcd_ride_pause(dl_etcd *e, bool wait, int64_t deadline, int rc,
                           dl_ride *rides);

/* ---- mutex.c: the mutex acquire's steps, for both drivers (the event
 * loop's: amutex.c) ---- */
/* Once h->lease is known: the acquire's key (h->key, an earlier one freed:
 * a read-write lock's put again takes a new one), its lock's prefix
 * (pfx, ETCD_KEY_MAX bytes), the prefix its line is read under (wait_pfx,
 * ETCD_KEY_MAX + 8 bytes) and its value (*value, malloc'ed); an orphan of
 * that key is dropped from the list (the put deletes it). 0, or
 * DLOCK_ENOMEM recorded. */
int dl_etcd_mutex_key(dl_etcd *e, const dl_acquire *a, etcd_hold *h, char *pfx,
                      char *wait_pfx, char **value);
/* The value of a's key (malloc'ed), or NULL with DLOCK_ENOMEM recorded. */
char *dl_etcd_mutex_value(dl_etcd *e, const dl_acquire *a);
/* h won (its lease valid until `until`): held, watched, a's results: 1,
 * or a negative code (h still listed, held: the caller's failure path). */
int dl_etcd_mutex_won(dl_etcd *e, dl_acquire *a, etcd_hold *h, int64_t until);
/* Whether an acquire's wait is over: none asked for, its deadline come,
 * or (on an event-loop client) the operation cancelled. */
static inline bool dl_etcd_wait_over(const dl_acquire *a) {
  return !a->wait || dl_now_ms() >= a->deadline || dl_offload_cancelled();
}
/* How long a waiter on h's key (lease_ms: the acquire's) waits before it
 * keeps its lease alive: a third of its TTL. */
int64_t dl_etcd_lease_step(dl_etcd *e, etcd_hold *h, int64_t lease_ms);

/* ---- elect.c: Go's concurrency.Election ---- */
int dl_etcd_elect_join(dl_backend *b, const dl_sync_ref *s, const char *id,
                       dl_elect_fn fn, void *ud, dl_elect **out);
void dl_etcd_elect_leave(dl_backend *b, dl_elect *el);
int dl_etcd_elect_proclaim(dl_backend *b, dl_elect *el, const char *value);
int dl_etcd_elect_observe(dl_backend *b, const dl_sync_ref *s, dl_observe_fn fn,
                          void *ud, dl_observer **out);
void dl_etcd_elect_unobserve(dl_backend *b, dl_observer *o);
int dl_etcd_elect_leader(dl_backend *b, const dl_sync_ref *s, char *buf,
                         size_t len);

/* ---- kv.c: txns for the kinds on plain keys (latch.c, queue.c) ---- */
/* A request's JSON as it is written (oom: a step ran out of memory; the
 * post then fails with DLOCK_ENOMEM). */
typedef struct etcd_json {
  char *p;
  size_t n, cap;
  bool oom;
} etcd_json;
/* Appends printf's text. */
void dl_etcd_json_add(etcd_json *j, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void dl_etcd_json_free(etcd_json *j);
/* Items of a txn's lists, each after a ',' unless first after '[': a
 * compare that no key is at key (or in [key, end) when end is non-NULL),
 * a compare of key's mod revision, a range (more: further fields, each
 * starting with ','), a put of len bytes, a delete of one key. */
void dl_etcd_cmp_absent(etcd_json *j, const char *key, const char *end);
void dl_etcd_cmp_mod(etcd_json *j, const char *key, int64_t mod);
void dl_etcd_op_range(etcd_json *j, const char *key, const char *end,
                      const char *more);
void dl_etcd_op_put(etcd_json *j, const char *key, const void *value,
                    size_t len);
/* As dl_etcd_op_put, the key on `lease` (0: none). */
void dl_etcd_op_put_on(etcd_json *j, const char *key, const void *value,
                       size_t len, int64_t lease);
void dl_etcd_op_delete(etcd_json *j, const char *key);
/* Posts j (a txn's whole body) to /v3/kv/txn within one command timeout
 * and frees j: 0 with the answer in *out (the caller puts it), or a
 * negative code recorded. */
int dl_etcd_txn_post(dl_etcd *e, etcd_json *j, json_object **out);
bool dl_etcd_txn_succeeded(json_object *r);
/* The answer's revision (its header's). */
int64_t dl_etcd_txn_rev(json_object *r);
/* The first kv of the i-th response (a range), or NULL; its count. */
json_object *dl_etcd_txn_kv(json_object *r, int i);
int64_t dl_etcd_txn_count(json_object *r, int i);
/* A kv's key into buf (len bytes): its length, or -1. */
int dl_etcd_kv_key(json_object *kv, char *buf, size_t len);
/* A kv's value: malloc'ed, a NUL after *len bytes; NULL out of memory or
 * not base64. */
char *dl_etcd_kv_value(json_object *kv, size_t *len);

/* ---- latch.c, queue.c ---- */
int dl_etcd_latch_await(dl_backend *b, const dl_sync_ref *s, bool wait,
                        int64_t deadline);
int dl_etcd_sync_update(dl_backend *b, const dl_sync_ref *s, dl_sync_op op,
                        long long n, const char *id, long long *v);
int dl_etcd_queue(dl_backend *b, const dl_sync_ref *s, dl_queue_req *q);
void dl_etcd_queue_kick(dl_backend *b, const dl_sync_ref *s);
/* reliable.c: a reliable consumer's lease, for the watchdog's round (an
 * item with .permit): 1 alive (renewed when lease_ms > 0; valid_until),
 * 0 gone, 2 not a consumer of this client's (a permit), or a negative
 * code (no answer: unknown). */
int dl_etcd_consumer_renew(dl_etcd *e, dl_renew_item *it, int64_t lease_ms,
                           int64_t deadline);
/* Its halves, for the event loop's round: the look (as above, or 3: its
 * lease in *lease to keep alive), and that keepalive's end (rc, ttl:
 * dl_etcd_keepalive's, sent at `sent`) as dl_etcd_consumer_renew's
 * result. */
int dl_etcd_consumer_look(dl_etcd *e, dl_renew_item *it, int64_t lease_ms,
                          int64_t *lease);
int dl_etcd_consumer_kept(dl_etcd *e, dl_renew_item *it, int64_t lease,
                          int64_t sent, int rc, int64_t ttl);
/* The consumers' leases revoked (their values go back at once), and
 * forgotten: the client closing. */
void dl_etcd_consumers_free(dl_etcd *e, int64_t deadline);

/* ---- wait.c ---- */
/* A watch's answer as it comes, by e's transport: the gateway's JSON
 * messages (tok) or gRPC's framed WatchResponses (buf: a message's bytes
 * so far). */
typedef struct etcd_stream {
  json_tokener *tok; /* NULL over gRPC */
  etcd_buf buf;
} etcd_stream;
/* A waiter's watch: its stream, and what it heard. */
typedef struct etcd_waiting {
  dl_etcd *e;
  etcd_stream st;
  int seen; /* 1 news (a DELETE event, or per any and put), 2 the watch
               was cancelled or failed: look again; 0 nothing yet */
  bool any; /* any event is news, not only a DELETE */
  bool put; /* a PUT is news, not a DELETE */
  bool bad; /* bytes that are not etcd's */
  unsigned wakes;
} etcd_waiting;
/* The body of a watch for key's delete after revision rev (from rev + 1),
 * ETCD_WATCH_BODY_MAX bytes. */
#define ETCD_WATCH_BODY_MAX (ETCD_KEY_MAX * 2 + 128)
void dl_etcd_watch_delete_body(const char *key, int64_t rev, char *body,
                               size_t len);
/* A waiter's watch for a transfer of the caller's (acall.c's): new (NULL
 * out of memory; a DELETE is news), freed (NULL accepted); and h set up
 * for the watch `body` at endpoint idx on e's transport, its bytes to w
 * (w->seen stops the transfer): its headers (free them with
 * dl_etcd_headers_free once h is done), or NULL out of memory. */
etcd_waiting *dl_etcd_waiting_new(dl_etcd *e);
void dl_etcd_waiting_free(etcd_waiting *w);
struct curl_slist *dl_etcd_waiting_setup(dl_etcd *e, etcd_waiting *w, CURL *h,
                                         int idx, const char *body);
/* Waits until `key` is deleted after revision `rev` (a watch from rev + 1):
 * 1 deleted, 0 not by the deadline (or the operation this thread runs
 * was cancelled: dl_offload_cancelled), or a negative code (DLOCK_ECLOSED
 * when the client closes). */
int dl_etcd_wait_delete(dl_etcd *e, const char *key, int64_t rev,
                        int64_t deadline);
/* As dl_etcd_wait_delete, but also 0 at once when e->wakes is no longer
 * `wakes` (a thread that read the count before it looked at its reasons
 * to stop misses no wake). */
int dl_etcd_wait_delete_since(dl_etcd *e, const char *key, int64_t rev,
                              int64_t deadline, unsigned wakes);
/* Waits for any event under the prefix pfx after revision rev: 1 one came
 * (or the watch ended: look again), 0 not by the deadline or woken (as
 * dl_etcd_wait_delete_since), or a negative code (DLOCK_ECLOSED when the
 * client closes). */
int dl_etcd_wait_change(dl_etcd *e, const char *pfx, int64_t rev,
                        int64_t deadline, unsigned wakes);
/* The body of a watch for any event under the prefix pfx after revision
 * rev, ETCD_WATCH_PREFIX_BODY_MAX bytes. */
#define ETCD_WATCH_PREFIX_BODY_MAX (ETCD_KEY_MAX * 4 + 160)
void dl_etcd_watch_prefix_body(const char *pfx, int64_t rev, char *body,
                               size_t len);
/* As dl_etcd_wait_change; with put, only a PUT event is news (a new
 * value, as Go's WaitPrefixEvents waits for), not a DELETE. */
int dl_etcd_wait_prefix(dl_etcd *e, const char *pfx, int64_t rev, bool put,
                        int64_t deadline, unsigned wakes);
/* Sleeps ms, or less: until the client closes or the operation this
 * thread runs is cancelled (e->cv is broadcast then). e->mu not held. */
void dl_etcd_pause(dl_etcd *e, int64_t ms);
/* Wakes every wait in progress: the client closing (wake_all), or an
 * operation cancelled (the waits look at dl_offload_cancelled). */
void dl_etcd_wake_waits(dl_etcd *e);
/* The watcher thread: starts watching a hold's key (from its create
 * revision), and stops. Any thread; e->mu not held. */
int dl_etcd_watch_hold(dl_etcd *e, etcd_hold *h);
void dl_etcd_unwatch(dl_etcd *e, etcd_watch *w);
/* How many times w heard something that may mean its key is gone (a
 * deletion, a cancel, its stream's end, a start that failed); e->mu
 * held. */
unsigned dl_etcd_watch_heard(const etcd_watch *w);
/* Hands a key of ours (at rev; lease: its own lease to revoke after, or
 * 0) to the watcher thread, which deletes it, retrying every 500 ms
 * while the servers do not answer. */
void dl_etcd_orphan(dl_etcd *e, const char *key, int64_t rev, int64_t lease);
/* Stops the watcher thread and frees every watch. */
void dl_etcd_watcher_stop(dl_etcd *e);

#endif
