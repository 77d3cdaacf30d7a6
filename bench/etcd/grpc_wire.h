/* grpc_wire.h: gRPC over libcurl (HTTP/2 cleartext, prior knowledge), the
 * transport of the grpc_probe spike (bench/etcd). Not part of libdlock.
 *
 * A unary call is one easy handle: a POST of one length-prefixed message
 * (content-type application/grpc, te: trailers), its reply's body read
 * whole, its grpc-status from the trailers (or a trailers-only reply's
 * headers). A stream is an easy handle whose body comes from a read
 * callback: what gw_stream_send queued, else CURL_READFUNC_PAUSE until the
 * next send unpauses it; its reply's messages are handed to a callback as
 * they arrive. Every handle runs on one multi handle with
 * CURLPIPE_MULTIPLEX, so that all of them share one connection.
 * One thread. */
#ifndef GRPC_WIRE_H
#define GRPC_WIRE_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gw_conn {
  CURLM *multi;
  char base[128]; /* "http://127.0.0.1:2379" */
  struct curl_slist *grpc_headers;
  struct curl_slist *json_headers;
  bool h2_open; /* a gRPC call has opened (or is opening) the connection */
  bool cork;    /* GW_CORK=1: see gw_pump */
  int fd;       /* the gRPC connection's socket (with cork), or -1 */
} gw_conn;

typedef struct gw_call gw_call;
typedef void (*gw_done_fn)(gw_call *c);
/* A stream's message (a whole gRPC message's protobuf bytes). */
typedef void (*gw_msg_fn)(gw_call *c, const uint8_t *msg, size_t n);

struct gw_call {
  CURL *h;
  gw_conn *conn;
  bool running; /* on the multi handle */
  bool json;    /* an HTTP/1.1 JSON gateway call instead */
  uint8_t *out; /* the request body (unary) or the send queue */
  size_t out_len, out_off;
  bool paused;     /* the read callback paused (stream) */
  bool out_closed; /* stream: end the request body once the queue drains */
  uint8_t *in;     /* the reply's body */
  size_t in_len, in_cap;
  int grpc_status; /* -1 until known */
  char grpc_message[160];
  CURLcode result;
  long http;
  gw_msg_fn on_msg; /* stream: each message as it arrives */
  gw_done_fn on_done;
  void *ud;
};

/* Sets up conn on base ("http://host:port"): 0, or -1. one_connection:
 * every transfer on one connection (gRPC); else the JSON calls get a
 * connection each. */
int gw_conn_init(gw_conn *conn, const char *base, bool one_connection);
void gw_conn_free(gw_conn *conn);

/* Starts a unary gRPC call: method "/etcdserverpb.KV/Txn", msg packed. */
int gw_unary_start(gw_call *c, gw_conn *conn, const char *method,
                   const uint8_t *msg, size_t n);
/* Starts a JSON gateway call: POST path ("/v3/kv/txn") body over HTTP/1.1. */
int gw_json_start(gw_call *c, gw_conn *conn, const char *path,
                  const char *body);
/* The reply's one message (unary): its bytes, or NULL (no or a bad frame). */
const uint8_t *gw_reply(const gw_call *c, size_t *n);
/* Starts a stream (bidi): nothing sent until gw_stream_send. */
int gw_stream_start(gw_call *c, gw_conn *conn, const char *method);
/* Queues one message on a stream, unpausing it. */
int gw_stream_send(gw_call *c, const uint8_t *msg, size_t n);
/* Ends a stream's handle (RST_STREAM when still open). */
void gw_call_end(gw_call *c);
/* Frees c's buffers and handle. */
void gw_call_free(gw_call *c);

/* Runs the transfers once: waits up to ms for activity, then calls on_done
 * for each finished one. With GW_CORK=1 in the environment, flushes the
 * corked gRPC socket after curl has written. */
void gw_pump(gw_conn *conn, int ms);
/* Pumps until *flag is true or ms passed: true if it became true. */
bool gw_wait(gw_conn *conn, const bool *flag, int ms);
/* A unary call run to its end: 0 with grpc-status 0, else -1. */
int gw_unary(gw_conn *conn, gw_call *c, const char *method, const uint8_t *msg,
             size_t n, int ms);

#endif
