/* grpc_wire.c: gRPC over libcurl (see grpc_wire.h). */
#include "grpc_wire.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

int gw_conn_init(gw_conn *conn, const char *base, bool one_connection) {
  memset(conn, 0, sizeof *conn);
  snprintf(conn->base, sizeof conn->base, "%s", base);
  conn->fd = -1;
  conn->cork = getenv("GW_CORK") && atoi(getenv("GW_CORK")) == 1;
  conn->multi = curl_multi_init();
  if (conn->multi == NULL) return -1;
  /* Every gRPC call and stream on one HTTP/2 connection. */
  curl_multi_setopt(conn->multi, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
  /* curl's default is 100 streams a connection, then a new connection:
   * one that would not ask for prior knowledge (see start), so HTTP/1.1,
   * which etcd's port hands to the JSON gateway (404). One connection,
   * transfers past its streams queued by curl; etcd 3.4.20+ allows
   * MaxUint32 streams. */
  curl_multi_setopt(conn->multi, CURLMOPT_MAX_CONCURRENT_STREAMS, 1000L);
  if (one_connection)
    curl_multi_setopt(conn->multi, CURLMOPT_MAX_HOST_CONNECTIONS, 1L);
  conn->grpc_headers =
      curl_slist_append(NULL, "Content-Type: application/grpc");
  conn->grpc_headers = curl_slist_append(conn->grpc_headers, "TE: trailers");
  conn->grpc_headers = curl_slist_append(conn->grpc_headers, "Accept:");
  conn->json_headers =
      curl_slist_append(NULL, "Content-Type: application/json");
  conn->json_headers = curl_slist_append(conn->json_headers, "Expect:");
  return 0;
}

void gw_conn_free(gw_conn *conn) {
  if (conn->multi) curl_multi_cleanup(conn->multi);
  curl_slist_free_all(conn->grpc_headers);
  curl_slist_free_all(conn->json_headers);
}

static size_t on_header(char *p, size_t size, size_t n, void *ud) {
  gw_call *c = ud;
  size_t len = size * n;
  if (len > 13 && strncasecmp(p, "grpc-status:", 12) == 0) {
    c->grpc_status = atoi(p + 12);
  } else if (len > 14 && strncasecmp(p, "grpc-message:", 13) == 0) {
    size_t m = len - 13;
    if (m >= sizeof c->grpc_message) m = sizeof c->grpc_message - 1;
    while (m > 0 && p[13] == ' ') {
      p++;
      m--;
    }
    memcpy(c->grpc_message, p + 13, m);
    c->grpc_message[m] = '\0';
    c->grpc_message[strcspn(c->grpc_message, "\r\n")] = '\0';
  }
  return len;
}

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
         p[3];
}

/* A stream's whole messages, handed on as they are complete. */
static void deliver(gw_call *c) {
  size_t off = 0;
  while (c->in_len - off >= 5) {
    uint32_t n = be32(c->in + off + 1);
    if (c->in_len - off - 5 < n) break;
    c->on_msg(c, c->in + off + 5, n);
    off += 5 + (size_t)n;
  }
  memmove(c->in, c->in + off, c->in_len - off);
  c->in_len -= off;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud) {
  gw_call *c = ud;
  size_t len = size * n;
  if (c->in_len + len > c->in_cap) {
    size_t cap = c->in_cap ? c->in_cap : 1024;
    while (cap < c->in_len + len)
      cap *= 2;
    uint8_t *in = realloc(c->in, cap);
    if (in == NULL) return 0;
    c->in = in;
    c->in_cap = cap;
  }
  memcpy(c->in + c->in_len, p, len);
  c->in_len += len;
  if (c->on_msg) deliver(c);
  return len;
}

static size_t on_read(char *p, size_t size, size_t n, void *ud) {
  gw_call *c = ud;
  size_t room = size * n, left = c->out_len - c->out_off;
  if (left == 0) {
    if (c->out_closed) return 0;
    c->paused = true;
    return CURL_READFUNC_PAUSE;
  }
  if (left > room) left = room;
  memcpy(p, c->out + c->out_off, left);
  c->out_off += left;
  if (c->out_off == c->out_len) c->out_off = c->out_len = 0;
  return left;
}

/* With cork (GW_CORK=1 in the environment: an experiment), the gRPC
 * connection's socket is corked and gw_pump uncorks it after each
 * curl_multi_perform, so that what curl wrote meanwhile (a request's HEADERS
 * and DATA frames, a PING's ACK: one send() each in curl 7.88) leaves in
 * one segment, as Go's client sends them. */
static int on_socket(void *ud, curl_socket_t fd, curlsocktype purpose) {
  gw_conn *conn = ud;
  int one = 1;
  if (purpose == CURLSOCKTYPE_IPCXN && conn->cork) {
    setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof one);
    conn->fd = fd;
  }
  return CURL_SOCKOPT_OK;
}

static int start(gw_call *c, gw_conn *conn, const char *path, bool json) {
  if (c->h == NULL && (c->h = curl_easy_init()) == NULL) return -1;
  c->conn = conn;
  c->json = json;
  c->in_len = 0;
  c->grpc_status = -1;
  c->grpc_message[0] = '\0';
  c->paused = false;
  char url[512];
  snprintf(url, sizeof url, "%s%s", conn->base, path);
  CURL *h = c->h;
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_PRIVATE, c);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
  if (getenv("GW_VERBOSE")) curl_easy_setopt(h, CURLOPT_VERBOSE, 1L);
  /* https:// (an experiment): the CA, client certificate and key from the
   * environment; HTTP/2 then comes by ALPN. */
  if (getenv("GW_CA")) curl_easy_setopt(h, CURLOPT_CAINFO, getenv("GW_CA"));
  if (getenv("GW_CERT"))
    curl_easy_setopt(h, CURLOPT_SSLCERT, getenv("GW_CERT"));
  if (getenv("GW_KEY")) curl_easy_setopt(h, CURLOPT_SSLKEY, getenv("GW_KEY"));
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, c);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, c);
  curl_easy_setopt(h, CURLOPT_POST, 1L);
  if (json) {
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, conn->json_headers);
  } else {
    /* Prior knowledge only for the call that opens the connection: curl
     * 7.88.1 (Debian 12) fails a prior-knowledge transfer on a reused
     * connection with CURLE_HTTP2 (curl issue 10634, fixed by PR 10643 in
     * 8.0); HTTP/2 without it finds the connection and multiplexes. */
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION,
                     conn->h2_open ? (long)CURL_HTTP_VERSION_2_0
                                   : (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE);
    conn->h2_open = true;
    curl_easy_setopt(h, CURLOPT_SOCKOPTFUNCTION, on_socket);
    curl_easy_setopt(h, CURLOPT_SOCKOPTDATA, conn);
    /* Wait for the connection being set up rather than open another. */
    curl_easy_setopt(h, CURLOPT_PIPEWAIT, 1L);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, conn->grpc_headers);
  }
  return 0;
}

static int add(gw_call *c) {
  if (curl_multi_add_handle(c->conn->multi, c->h) != CURLM_OK) return -1;
  c->running = true;
  return 0;
}

/* The request's gRPC frame: flag 0 (not compressed), length, message. */
static int frame(gw_call *c, const uint8_t *msg, size_t n) {
  uint8_t *out = realloc(c->out, c->out_len + n + 5);
  if (out == NULL) return -1;
  c->out = out;
  out += c->out_len;
  out[0] = 0;
  out[1] = (uint8_t)(n >> 24);
  out[2] = (uint8_t)(n >> 16);
  out[3] = (uint8_t)(n >> 8);
  out[4] = (uint8_t)n;
  memcpy(out + 5, msg, n);
  c->out_len += n + 5;
  return 0;
}

int gw_unary_start(gw_call *c, gw_conn *conn, const char *method,
                   const uint8_t *msg, size_t n) {
  if (start(c, conn, method, false) != 0) return -1;
  c->out_len = c->out_off = 0;
  if (frame(c, msg, n) != 0) return -1;
  curl_easy_setopt(c->h, CURLOPT_POSTFIELDSIZE, (long)c->out_len);
  curl_easy_setopt(c->h, CURLOPT_POSTFIELDS, c->out);
  return add(c);
}

int gw_json_start(gw_call *c, gw_conn *conn, const char *path,
                  const char *body) {
  if (start(c, conn, path, true) != 0) return -1;
  curl_easy_setopt(c->h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
  curl_easy_setopt(c->h, CURLOPT_COPYPOSTFIELDS, body);
  return add(c);
}

const uint8_t *gw_reply(const gw_call *c, size_t *n) {
  if (c->in_len < 5 || c->in[0] != 0) return NULL;
  uint32_t len = be32(c->in + 1);
  if (c->in_len != 5 + (size_t)len) return NULL;
  *n = len;
  return c->in + 5;
}

int gw_stream_start(gw_call *c, gw_conn *conn, const char *method) {
  if (start(c, conn, method, false) != 0) return -1;
  c->out_len = c->out_off = 0;
  c->out_closed = false;
  curl_easy_setopt(c->h, CURLOPT_READFUNCTION, on_read);
  curl_easy_setopt(c->h, CURLOPT_READDATA, c);
  return add(c);
}

int gw_stream_send(gw_call *c, const uint8_t *msg, size_t n) {
  if (frame(c, msg, n) != 0) return -1;
  if (c->paused) {
    c->paused = false;
    curl_easy_pause(c->h, CURLPAUSE_CONT);
  }
  return 0;
}

void gw_call_end(gw_call *c) {
  if (c->running) curl_multi_remove_handle(c->conn->multi, c->h);
  c->running = false;
}

void gw_call_free(gw_call *c) {
  gw_call_end(c);
  if (c->h) curl_easy_cleanup(c->h);
  free(c->out);
  free(c->in);
  memset(c, 0, sizeof *c);
}

void gw_pump(gw_conn *conn, int ms) {
  int still;
  curl_multi_perform(conn->multi, &still);
  if (conn->cork && conn->fd >= 0) {
    int off = 0, on = 1;
    setsockopt(conn->fd, IPPROTO_TCP, TCP_CORK, &off, sizeof off);
    setsockopt(conn->fd, IPPROTO_TCP, TCP_CORK, &on, sizeof on);
  }
  CURLMsg *m;
  int left;
  bool any = false;
  while ((m = curl_multi_info_read(conn->multi, &left)) != NULL) {
    if (m->msg != CURLMSG_DONE) continue;
    gw_call *c;
    curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&c);
    c->result = m->data.result;
    /* The connection may be gone: the next call opens one. */
    if (c->result != CURLE_OK && !c->json) conn->h2_open = false;
    curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &c->http);
    curl_multi_remove_handle(conn->multi, c->h);
    c->running = false;
    any = true;
    if (c->on_done) c->on_done(c);
  }
  if (!any) curl_multi_poll(conn->multi, NULL, 0, ms, NULL);
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool gw_wait(gw_conn *conn, const bool *flag, int ms) {
  int64_t end = now_ms() + ms;
  while (!*flag && now_ms() < end)
    gw_pump(conn, 20);
  return *flag;
}

int gw_unary(gw_conn *conn, gw_call *c, const char *method, const uint8_t *msg,
             size_t n, int ms) {
  if (gw_unary_start(c, conn, method, msg, n) != 0) return -1;
  int64_t end = now_ms() + ms;
  while (c->running && now_ms() < end)
    gw_pump(conn, 20);
  if (c->running) {
    gw_call_end(c);
    return -1;
  }
  return c->result == CURLE_OK && c->grpc_status == 0 ? 0 : -1;
}
