/* http.c: the etcd backend's calls, over gRPC (grpc.c) or, with the URL's
 * transport=json, etcd's JSON gateway (v3 paths), blocking, on libcurl easy
 * handles kept in a pool (their connections reused), each call within its
 * deadline; base64 and the gateway's JSON (int64s as strings, zero values
 * omitted). */
#include "etcdb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POOL_MAX 16
#define ANSWER_MAX (64 << 20) /* bytes of one answer, at most */

size_t dl_etcd_buf_write(char *ptr, size_t size, size_t nmemb, void *ud) {
  etcd_buf *b = ud;
  size_t n = size * nmemb;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 4096;
    while (cap < b->n + n + 1)
      cap *= 2;
    if (cap > ANSWER_MAX) return 0;
    char *p = realloc(b->p, cap);
    if (p == NULL) return 0;
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, ptr, n);
  b->n += n;
  b->p[b->n] = '\0';
  return n;
}

CURL *dl_etcd_handle(dl_etcd *e) {
  CURL *h = NULL;
  pthread_mutex_lock(&e->mu);
  if (e->npool > 0) h = e->pool[--e->npool];
  pthread_mutex_unlock(&e->mu);
  return h ? h : curl_easy_init();
}

void dl_etcd_handle_put(dl_etcd *e, CURL *h) {
  if (h == NULL) return;
  curl_easy_reset(h); /* its connection stays in its cache */
  pthread_mutex_lock(&e->mu);
  if (e->npool < POOL_MAX) {
    e->pool[e->npool++] = h;
    h = NULL;
  }
  pthread_mutex_unlock(&e->mu);
  if (h) curl_easy_cleanup(h);
}

/* gRPC's status code (in the gateway's error) as dlock's. */
static int code_of(int grpc) {
  switch (grpc) {
  case 3: return DLOCK_EINVAL;
  case 4: return DLOCK_ETIMEDOUT;
  case 7: return DLOCK_ENOPERM;
  case 14: return DLOCK_ECONNLOST;
  case 16: return DLOCK_EAUTH;
  default: return DLOCK_ESERVER;
  }
}

int dl_etcd_status_error(dl_etcd *e, const char *path, int grpc,
                         const char *msg, long status, int *code) {
  /* A token from before the users or roles changed: as one expired. */
  if (msg && strstr(msg, "auth store is old")) grpc = 16;
  if (code) *code = grpc;
  if (msg && strstr(msg, "user name is empty"))
    return dl_seterr(e->err, DLOCK_EAUTH,
                     "etcd %s: the server has authentication on: give a "
                     "user and password (etcd://USER:PASSWORD@HOST...)",
                     path);
  return dl_seterr(e->err, code_of(grpc), "etcd %s: %s (HTTP %ld)", path,
                   msg && *msg ? msg : "an error without a message", status);
}

/* The error of an answer (unary: {"error","code","message"}; in a stream:
 * {"error":{"grpc_code","message"}}), recorded: a negative code. */
static int answer_error(dl_etcd *e, json_object *o, const char *path,
                        long status, int *code) {
  json_object *err = dl_etcd_get(o, "error");
  const char *msg = NULL;
  int grpc = (int)dl_etcd_i64(o, "code");
  if (err && json_object_is_type(err, json_type_object)) {
    grpc = (int)dl_etcd_i64(err, "grpc_code");
    json_object *m = dl_etcd_get(err, "message");
    msg = m ? json_object_get_string(m) : NULL;
  } else if (err) {
    msg = json_object_get_string(err);
  }
  return dl_etcd_status_error(e, path, grpc, msg, status, code);
}

struct curl_slist *dl_etcd_headers_locked(dl_etcd *e, unsigned *gen) {
  if (gen) *gen = e->token_gen;
  if (e->token == NULL) return e->headers;
  char line[600];
  snprintf(line, sizeof line, "Authorization: %s", e->token);
  struct curl_slist *a = curl_slist_append(NULL, line);
  if (a) a->next = e->headers;
  return a;
}

struct curl_slist *dl_etcd_headers(dl_etcd *e, unsigned *gen) {
  pthread_mutex_lock(&e->mu);
  struct curl_slist *l = dl_etcd_headers_locked(e, gen);
  pthread_mutex_unlock(&e->mu);
  return l;
}

void dl_etcd_headers_free(dl_etcd *e, struct curl_slist *l) {
  if (l == NULL || l == e->headers || l == e->grpc_headers) return;
  l->next = NULL; /* e->headers or e->grpc_headers stays */
  curl_slist_free_all(l);
}

void dl_etcd_setopts(dl_etcd *e, CURL *h, struct curl_slist *headers,
                     int64_t connect_ms) {
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                   (long)(connect_ms < e->connect_timeout_ms
                              ? connect_ms
                              : e->connect_timeout_ms));
  if (!e->tls) return;
  if (e->tls_ca_file) curl_easy_setopt(h, CURLOPT_CAINFO, e->tls_ca_file);
  if (e->tls_ca_dir) curl_easy_setopt(h, CURLOPT_CAPATH, e->tls_ca_dir);
  if (e->tls_cert_file) curl_easy_setopt(h, CURLOPT_SSLCERT, e->tls_cert_file);
  if (e->tls_key_file) curl_easy_setopt(h, CURLOPT_SSLKEY, e->tls_key_file);
  curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, e->tls_verify ? 1L : 0L);
  curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, e->tls_verify ? 2L : 0L);
}

/* Whether curl's error is TLS's (a certificate, a handshake). */
static bool tls_error(CURLcode cc) {
  switch (cc) {
  case CURLE_SSL_CONNECT_ERROR:
  case CURLE_PEER_FAILED_VERIFICATION:
  case CURLE_SSL_CERTPROBLEM:
  case CURLE_SSL_CIPHER:
  case CURLE_SSL_CACERT_BADFILE:
  case CURLE_SSL_ENGINE_NOTFOUND:
  case CURLE_SSL_ENGINE_SETFAILED:
  case CURLE_USE_SSL_FAILED:
  case CURLE_SSL_CRL_BADFILE:
  case CURLE_SSL_ISSUER_ERROR: return true;
  default: return false;
  }
}

bool dl_etcd_unreached(CURLcode cc) {
  return cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST;
}

void dl_etcd_mark_unreached(dl_etcd *e, int idx) {
  /* Not again by the calls that skip it meanwhile (or that waited for the
   * same attempt): the window runs from the first failure. */
  int64_t now = dl_now_ms(), at = atomic_load(&e->unreached_at[idx]);
  if (at == 0 || now - at >= e->unreached_ms)
    atomic_store(&e->unreached_at[idx], now);
}

bool dl_etcd_unreached_now(dl_etcd *e, int idx) {
  int64_t at = atomic_load(&e->unreached_at[idx]);
  return at != 0 && dl_now_ms() - at < e->unreached_ms;
}

bool dl_etcd_skip_unreached(dl_etcd *e, const char *path, int idx, int *rc) {
  int64_t ago = dl_now_ms() - atomic_load(&e->unreached_at[idx]);
  if (!dl_etcd_unreached_now(e, idx)) return false;
  *rc = dl_seterr(e->err, DLOCK_ECONNECT,
                  "etcd %s: cannot reach %s (not reached %lld ms ago)", path,
                  e->endpoints[idx], (long long)ago);
  return true;
}

int dl_etcd_curl_error(dl_etcd *e, const char *path, int idx, CURLcode cc,
                       const char *why, bool *next) {
  *next = false;
  /* A refusal of ours after the handshake (TLS 1.3: no client
   * certificate) comes as the first read's alert. */
  if (tls_error(cc) || (e->tls && cc == CURLE_RECV_ERROR &&
                        strstr(why, "SSL") && strstr(why, "alert")))
    return dl_seterr(e->err, DLOCK_ETLS, "etcd %s at %s: TLS: %s", path,
                     e->endpoints[idx], why[0] ? why : curl_easy_strerror(cc));
  /* Not reached: the next endpoint. Anything else may have been done
   * by the server (a txn), so it is not sent again elsewhere. */
  if (dl_etcd_unreached(cc)) {
    *next = true;
    dl_etcd_mark_unreached(e, idx);
    return dl_seterr(e->err, DLOCK_ECONNECT, "etcd %s: cannot reach %s: %s",
                     path, e->endpoints[idx],
                     why[0] ? why : curl_easy_strerror(cc));
  }
  return dl_seterr(
      e->err,
      cc == CURLE_OPERATION_TIMEDOUT ? DLOCK_ETIMEDOUT : DLOCK_ECONNLOST,
      "etcd %s at %s: %s%s", path, e->endpoints[idx],
      why[0] ? why : curl_easy_strerror(cc),
      /* gRPC's preface to a TLS port: a reset, an alert read as a stream
       * cut short, or the connection closed while the preface was still
       * being sent (a broken pipe) */
      !e->tls && (cc == CURLE_GOT_NOTHING || cc == CURLE_HTTP2 ||
                  cc == CURLE_HTTP2_STREAM || cc == CURLE_PARTIAL_FILE ||
                  cc == CURLE_RECV_ERROR || cc == CURLE_SEND_ERROR)
          ? " (a TLS port? Its URL is etcds://)"
      : e->tls && e->tls_cert_file == NULL
          ? " (does the server want a client certificate?)"
          : "");
}

int dl_etcd_req_init(dl_etcd *e, etcd_req *q, const etcd_ask *k) {
  memset(q, 0, sizeof *q);
  q->path = k->path;
  q->status = -1;
  if (k->msg)
    return dl_etcd_grpc_req_pb(e, q, dl_etcd_grpc_method(k->path), k->msg);
  q->m = e->grpc ? dl_etcd_grpc_method(k->path) : NULL;
  if (q->m) return dl_etcd_grpc_frame(e, q, k->body);
  q->len = strlen(k->body);
  if ((q->req = malloc(q->len + 1)) == NULL)
    return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  memcpy(q->req, k->body, q->len + 1);
  return 0;
}

void dl_etcd_req_free(etcd_req *q) {
  if (q->reply) protobuf_c_message_free_unpacked(q->reply, NULL);
  free(q->req);
  free(q->body.p);
  memset(q, 0, sizeof *q);
}

struct curl_slist *dl_etcd_req_headers(dl_etcd *e, const etcd_req *q, bool auth,
                                       unsigned *gen) {
  if (q->m) return dl_etcd_grpc_headers(e, auth, gen);
  return auth ? dl_etcd_headers(e, gen) : e->headers;
}

void dl_etcd_req_setup(dl_etcd *e, etcd_req *q, CURL *h, int idx,
                       struct curl_slist *hd, int64_t left, bool prior) {
  free(q->body.p);
  memset(&q->body, 0, sizeof q->body);
  q->status = -1;
  q->message[0] = q->why[0] = '\0';
  if (q->m) {
    dl_etcd_grpc_setup(e, q, h, idx, hd, left, prior);
  } else {
    snprintf(q->url, sizeof q->url, "%s%s", e->endpoints[idx], q->path);
    curl_easy_setopt(h, CURLOPT_URL, q->url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, q->req);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)q->len);
    dl_etcd_setopts(e, h, hd, left);
  }
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)left);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, dl_etcd_buf_write);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &q->body);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, q->why);
  atomic_fetch_add(&e->round_trips, 1);
}

/* dl_etcd_req_end's, but for its check of a message's answer. */
static etcd_try req_end(dl_etcd *e, etcd_req *q, CURL *h, int idx, CURLcode cc,
                        bool may_again, json_object **out, int *code, int *rc,
                        bool *h2) {
  *out = NULL;
  if (code) *code = 0;
  if (q->m)
    return dl_etcd_grpc_end(e, q, h, idx, cc, may_again, out, code, rc, h2);
  *h2 = false;
  if (cc != CURLE_OK) {
    bool next = false;
    *rc = dl_etcd_curl_error(e, q->path, idx, cc, q->why, &next);
    /* A read lost with a connection from curl's pool (over TLS, HTTP/2:
     * curl 7.88 may put a stream on one already gone, a server
     * restarted): again, on another. */
    long opened = -1;
    if (!next && *rc == DLOCK_ECONNLOST && may_again &&
        curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &opened) == CURLE_OK &&
        opened == 0 && dl_etcd_path_safe(q->path))
      return ETCD_TRY_REREAD;
    return next ? ETCD_TRY_NEXT : ETCD_TRY_DONE;
  }
  *rc = 0;
  atomic_store(&e->current, idx);
  long status = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  json_object *o = q->body.p ? json_tokener_parse(q->body.p) : NULL;
  if (o == NULL)
    *rc = dl_seterr(
        e->err, DLOCK_EPROTO,
        "etcd %s: an answer that is not JSON (HTTP %ld%s)", q->path, status,
        status == 400 && !e->tls ? "; a TLS port? Its URL is etcds://" : "");
  else if (status != 200 || dl_etcd_get(o, "error"))
    *rc = answer_error(e, o, q->path, status, code);
  else if (q->resp)
    return *rc = dl_etcd_grpc_reply_of_json(e, q, o), ETCD_TRY_DONE;
  else
    *out = o;
  if (*rc != 0) json_object_put(o);
  return ETCD_TRY_DONE;
}

/* One call (dl_etcd_call's, dl_etcd_call_pb's), with the token of
 * generation *gen (none when !auth). */
static int call_once(dl_etcd *e, const etcd_ask *k, ProtobufCMessage **reply,
                     int64_t deadline, json_object **out, int *code, bool auth,
                     unsigned *gen) {
  *out = NULL;
  if (code) *code = 0;
  const char *path = k->path;
  etcd_req q;
  int rc = dl_etcd_req_init(e, &q, k);
  if (rc != 0) {
    dl_etcd_req_free(&q);
    return rc;
  }
  if (q.m) { /* gRPC: grpc.c's handles */
    rc = dl_etcd_grpc_once(e, &q, deadline, out, code, auth, gen);
    if (reply) *reply = q.reply;
    q.reply = NULL;
    dl_etcd_req_free(&q);
    return rc;
  }
  CURL *h = dl_etcd_handle(e);
  struct curl_slist *hd = dl_etcd_req_headers(e, &q, auth, gen);
  if (h == NULL || hd == NULL) {
    if (h) dl_etcd_handle_put(e, h);
    dl_etcd_req_free(&q);
    return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  }
  int start = atomic_load(&e->current);
  bool reread = false; /* a read lost went once more */
  for (int i = 0; i < e->nendpoints; i++) {
    int idx = (start + i) % e->nendpoints;
    int64_t left = deadline - dl_now_ms();
    if (left <= 0) {
      rc = dl_seterr(e->err, DLOCK_ETIMEDOUT, "etcd %s: no answer in time",
                     path);
      break;
    }
    if (dl_etcd_skip_unreached(e, path, idx, &rc)) continue;
    dl_etcd_req_setup(e, &q, h, idx, hd, left, false);
    bool h2;
    etcd_try t = dl_etcd_req_end(e, &q, h, idx, curl_easy_perform(h), !reread,
                                 out, code, &rc, &h2);
    if (t == ETCD_TRY_REREAD) { /* once more, here */
      reread = true;
      i--;
    } else if (t != ETCD_TRY_NEXT) {
      break;
    }
  }
  dl_etcd_headers_free(e, hd);
  dl_etcd_handle_put(e, h);
  if (reply) *reply = q.reply;
  q.reply = NULL;
  dl_etcd_req_free(&q);
  return rc;
}

bool dl_etcd_token_refused(dl_etcd *e, int rc, int code) {
  return e->user != NULL && rc != 0 && code == 16;
}

char *dl_etcd_auth_body(dl_etcd *e) {
  json_object *who = json_object_new_object();
  char *body = NULL;
  if (who &&
      !json_object_object_add(who, "name", json_object_new_string(e->user)) &&
      !json_object_object_add(who, "password",
                              json_object_new_string(e->password)))
    body = dl_strdup(json_object_to_json_string(who));
  json_object_put(who);
  return body;
}

int dl_etcd_auth_take(dl_etcd *e, unsigned gen, int rc, int code,
                      json_object *r) {
  if (rc != 0 && code == 9)   /* authentication is not enabled */
    return 0;                 /* no token needed (as Go's client takes it) */
  if (rc != 0 && code != 0) { /* the server's answer: its message */
    char why[400];
    const char *m =
        e->err ? dlock_client_errmsg(e->err) : dlock_client_open_errmsg();
    size_t n = strlen(dlock_strerror(rc));
    if (strncmp(m, dlock_strerror(rc), n) == 0 && m[n] == ':') m += n + 2;
    snprintf(why, sizeof why, "%s", m);
    return dl_seterr(e->err, DLOCK_EAUTH, "etcd refused the user '%s': %s",
                     e->user, why);
  }
  if (rc != 0) return rc;
  json_object *t = dl_etcd_get(r, "token");
  const char *ts = t ? json_object_get_string(t) : NULL;
  char *tok = ts && *ts && strlen(ts) < 512 && !strpbrk(ts, "\r\n")
                  ? dl_strdup(ts)
                  : NULL;
  json_object_put(r);
  if (tok == NULL)
    return dl_seterr(e->err, DLOCK_EPROTO,
                     "etcd /v3/auth/authenticate: no usable token");
  pthread_mutex_lock(&e->mu);
  if (e->token_gen == gen) { /* else another call's is newer: kept */
    free(e->token);
    e->token = tok;
    e->token_gen++;
    tok = NULL;
  }
  pthread_mutex_unlock(&e->mu);
  free(tok);
  return 0;
}

int dl_etcd_authenticate(dl_etcd *e, unsigned gen, int64_t deadline) {
  pthread_mutex_lock(&e->auth_mu);
  pthread_mutex_lock(&e->mu);
  bool done = e->token_gen != gen;
  pthread_mutex_unlock(&e->mu);
  int rc = 0;
  char *body = done ? NULL : dl_etcd_auth_body(e);
  if (!done && body == NULL)
    rc = dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  if (body) {
    int code;
    unsigned g;
    json_object *r = NULL;
    etcd_ask k = {"/v3/auth/authenticate", body, NULL};
    rc = call_once(e, &k, NULL, deadline, &r, &code, false, &g);
    free(body);
    rc = dl_etcd_auth_take(e, gen, rc, code, r);
  }
  pthread_mutex_unlock(&e->auth_mu);
  return rc;
}

etcd_try dl_etcd_req_end(dl_etcd *e, etcd_req *q, CURL *h, int idx, CURLcode cc,
                         bool may_again, json_object **out, int *code, int *rc,
                         bool *h2) {
  etcd_try t = req_end(e, q, h, idx, cc, may_again, out, code, rc, h2);
  if (cc == CURLE_OK && atomic_load(&e->unreached_at[idx]) != 0)
    atomic_store(&e->unreached_at[idx], 0); /* reached */
  if (t == ETCD_TRY_DONE && *rc == 0 && q->resp && q->reply == NULL) {
    /* A message's call answered without one: cannot be, but told. */
    json_object_put(*out);
    *out = NULL;
    *rc = dl_seterr(e->err, DLOCK_EPROTO, "etcd %s: no answer", q->path);
  }
  return t;
}

/* dl_etcd_call's and dl_etcd_call_pb's. */
static int call(dl_etcd *e, const etcd_ask *k, ProtobufCMessage **reply,
                int64_t deadline, json_object **out, int *code) {
  unsigned gen = 0;
  int c = 0;
  int rc = call_once(e, k, reply, deadline, out, &c, true, &gen);
  /* A token no longer good: a new one, and the call again, once. */
  if (dl_etcd_token_refused(e, rc, c) &&
      (rc = dl_etcd_authenticate(e, gen, deadline)) == 0)
    rc = call_once(e, k, reply, deadline, out, &c, true, &gen);
  if (code) *code = c;
  return rc;
}

int dl_etcd_call(dl_etcd *e, const char *path, const char *body,
                 int64_t deadline, json_object **out, int *code) {
  etcd_ask k = {path, body, NULL};
  return call(e, &k, NULL, deadline, out, code);
}

int dl_etcd_call_pb(dl_etcd *e, const char *path, const ProtobufCMessage *msg,
                    int64_t deadline, ProtobufCMessage **out, int *code) {
  *out = NULL;
  json_object *o;
  etcd_ask k = {path, NULL, msg};
  int rc = call(e, &k, out, deadline, &o, code);
  if (rc != 0 && *out) {
    protobuf_c_message_free_unpacked(*out, NULL);
    *out = NULL;
  }
  return rc;
}

int dl_etcd_result(dl_etcd *e, const char *path, json_object *o,
                   json_object **out) {
  json_object *r = dl_etcd_get(o, "result");
  *out = r ? json_object_get(r) : NULL;
  json_object_put(o);
  if (r == NULL)
    return dl_seterr(e->err, DLOCK_EPROTO,
                     "etcd %s: a stream's answer without a result", path);
  return 0;
}

int dl_etcd_call1(dl_etcd *e, const char *path, const char *body,
                  int64_t deadline, json_object **out) {
  json_object *o;
  int rc = dl_etcd_call(e, path, body, deadline, &o, NULL);
  *out = NULL;
  return rc != 0 ? rc : dl_etcd_result(e, path, o, out);
}

static const char b64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void dl_etcd_b64(const char *in, size_t n, char *out) {
  const unsigned char *s = (const unsigned char *)in;
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    unsigned v = (unsigned)s[i] << 16;
    if (i + 1 < n) v |= (unsigned)s[i + 1] << 8;
    if (i + 2 < n) v |= s[i + 2];
    out[o++] = b64[(v >> 18) & 63];
    out[o++] = b64[(v >> 12) & 63];
    out[o++] = i + 1 < n ? b64[(v >> 6) & 63] : '=';
    out[o++] = i + 2 < n ? b64[v & 63] : '=';
  }
  out[o] = '\0';
}

int dl_etcd_unb64(const char *in, char *out, size_t len) {
  size_t o = 0;
  unsigned v = 0;
  int bits = 0;
  for (const char *p = in; *p && *p != '='; p++) {
    const char *c = strchr(b64, *p);
    if (c == NULL || *p == '\0') return -1;
    v = (v << 6) | (unsigned)(c - b64);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      if (o + 1 >= len) return -1;
      out[o++] = (char)((v >> bits) & 0xff);
    }
  }
  out[o] = '\0';
  return (int)o;
}

json_object *dl_etcd_get(json_object *o, const char *name) {
  json_object *v = NULL;
  if (o && json_object_is_type(o, json_type_object) &&
      json_object_object_get_ex(o, name, &v))
    return v;
  return NULL;
}

int64_t dl_etcd_i64(json_object *o, const char *name) {
  json_object *v = dl_etcd_get(o, name);
  return v ? json_object_get_int64(v) : 0; /* strings are parsed */
}

json_object *dl_etcd_kv0(json_object *range) {
  json_object *kvs = dl_etcd_get(range, "kvs");
  if (kvs == NULL || !json_object_is_type(kvs, json_type_array) ||
      json_object_array_length(kvs) == 0)
    return NULL;
  return json_object_array_get_idx(kvs, 0);
}

json_object *dl_etcd_txn_resp(json_object *txn, int i, const char *type) {
  json_object *r = dl_etcd_get(txn, "responses");
  if (r == NULL || !json_object_is_type(r, json_type_array) ||
      (size_t)i >= json_object_array_length(r))
    return NULL;
  /* An empty response (a range that found nothing) may be omitted as a
   * whole: {} */
  json_object *x = dl_etcd_get(json_object_array_get_idx(r, (size_t)i), type);
  return x;
}
