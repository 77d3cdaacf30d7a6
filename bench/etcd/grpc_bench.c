/* grpc_bench.c: grpc_probe bench (see grpc_probe.c): T lock cycles in
 * flight, over gRPC (one HTTP/2 connection) or the JSON gateway (T HTTP/1.1
 * connections, dlock's bodies, json-c parsing the replies). */
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "grpc_probe.h"

typedef struct slot {
  gw_call c;
  char key[96], pfx[64], end[64];
  char k64[160], p64[96], e64[96];
  int64_t lease, rev;
  int left; /* cycles to go */
  bool releasing;
} slot;

static int bench_json; /* the JSON gateway, not gRPC */
static int bench_del;  /* gRPC, the release a plain DeleteRange (Go's) */
static int bad;        /* replies that were not right */
static int txns; /* replies counted */

static void b64(const char *in, char *out) {
  static const char t[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t n = strlen(in), i = 0;
  for (; i + 2 < n; i += 3) {
    unsigned v = (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8 |
                 (unsigned char)in[i + 2];
    *out++ = t[v >> 18];
    *out++ = t[v >> 12 & 63];
    *out++ = t[v >> 6 & 63];
    *out++ = t[v & 63];
  }
  if (i < n) {
    unsigned v = (unsigned char)in[i] << 16;
    if (i + 1 < n) v |= (unsigned char)in[i + 1] << 8;
    *out++ = t[v >> 18];
    *out++ = t[v >> 12 & 63];
    *out++ = i + 1 < n ? t[v >> 6 & 63] : '=';
    *out++ = '=';
  }
  *out = '\0';
}

/* The next txn of s's cycle, as dlock's JSON or as protobuf. */
static int send_next(slot *s, gw_conn *conn, int json) {
  if (json) {
    char body[2048];
    if (s->releasing)
      snprintf(body, sizeof body,
               "{\"compare\":[{\"target\":\"CREATE\",\"key\":\"%s\","
               "\"create_revision\":\"%" PRId64 "\"}],\"success\":["
               "{\"request_delete_range\":{\"key\":\"%s\"}}],\"failure\":[]}",
               s->k64, s->rev, s->k64);
    else
      snprintf(body, sizeof body,
               "{\"compare\":[{\"target\":\"CREATE\",\"key\":\"%s\","
               "\"create_revision\":\"0\"}],\"success\":["
               "{\"request_put\":{\"key\":\"%s\",\"value\":\"\",\"lease\":"
               "\"%" PRId64 "\"}},{\"request_range\":{\"key\":\"%s\","
               "\"range_end\":\"%s\",\"limit\":\"1\",\"sort_order\":"
               "\"ASCEND\",\"sort_target\":\"CREATE\",\"keys_only\":true}}],"
               "\"failure\":[{\"request_range\":{\"key\":\"%s\"}},"
               "{\"request_range\":{\"key\":\"%s\",\"range_end\":\"%s\","
               "\"limit\":\"1\",\"sort_order\":\"ASCEND\",\"sort_target\":"
               "\"CREATE\",\"keys_only\":true}}]}",
               s->k64, s->k64, s->lease, s->p64, s->e64, s->k64, s->p64,
               s->e64);
    return gw_json_start(&s->c, conn, "/v3/kv/txn", body);
  }
  size_t n;
  uint8_t *b;
  const char *method = "/etcdserverpb.KV/Txn";
  if (s->releasing && bench_del) {
    /* Go's Mutex.Unlock: a plain delete, not fenced. */
    Etcdserverpb__DeleteRangeRequest d =
        ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    d.key = BIN(s->key);
    b = pack(&d.base, &n);
    method = "/etcdserverpb.KV/DeleteRange";
  } else {
    mutex_txn m;
    mutex_txn_init(&m, s->key, s->pfx, s->end, s->lease,
                   s->releasing ? s->rev : 0);
    b = pack(&m.txn.base, &n);
  }
  int rc = gw_unary_start(&s->c, conn, method, b, n);
  free(b);
  return rc;
}

static int64_t jint(json_object *o, const char *name) {
  json_object *v;
  if (o == NULL || !json_object_object_get_ex(o, name, &v)) return 0;
  return json_object_get_int64(v);
}

/* Checks a reply: the acquire took the key and owns it (*rev its create
 * revision), the release deleted it. */
static bool reply_ok(slot *s, int json) {
  if (json) {
    bool ok = false;
    json_tokener *tok = json_tokener_new();
    json_object *r =
        tok ? json_tokener_parse_ex(tok, (char *)s->c.in, (int)s->c.in_len)
            : NULL;
    if (tok) json_tokener_free(tok);
    json_object *v, *hdr = NULL, *resp;
    bool succeeded = r && json_object_object_get_ex(r, "succeeded", &v) &&
                     json_object_get_boolean(v);
    if (r) json_object_object_get_ex(r, "header", &hdr);
    if (s->releasing) {
      ok = succeeded;
    } else if (succeeded && json_object_object_get_ex(r, "responses", &resp)) {
      s->rev = jint(hdr, "revision");
      json_object *rr = json_object_array_get_idx(resp, 1), *range, *kvs;
      ok = rr && json_object_object_get_ex(rr, "response_range", &range) &&
           json_object_object_get_ex(range, "kvs", &kvs) &&
           jint(json_object_array_get_idx(kvs, 0), "create_revision") == s->rev;
    }
    json_object_put(r);
    return ok;
  }
  if (s->releasing && bench_del) {
    Etcdserverpb__DeleteRangeResponse *d;
    UNPACK(delete_range_response, &s->c, d);
    bool ok = d && d->deleted == 1;
    etcdserverpb__delete_range_response__free_unpacked(d, NULL);
    return ok;
  }
  Etcdserverpb__TxnResponse *r;
  UNPACK(txn_response, &s->c, r);
  bool ok = r && r->succeeded;
  if (ok && !s->releasing) {
    s->rev = r->header->revision;
    ok = owner_rev(r) == s->rev;
  }
  etcdserverpb__txn_response__free_unpacked(r, NULL);
  return ok;
}

static void on_done(gw_call *c) {
  slot *s = c->ud;
  txns++;
  if (c->result != CURLE_OK ||
      (bench_json ? c->http != 200 : c->grpc_status != 0) ||
      !reply_ok(s, bench_json)) {
    if (bad++ < 3)
      fprintf(stderr, "bad reply: curl %d http %ld grpc-status %d %.*s\n",
              (int)c->result, c->http, c->grpc_status,
              bench_json ? (int)c->in_len : 0, (char *)c->in);
    s->releasing = false;
    return; /* this slot stops */
  }
  if (s->releasing && --s->left == 0) return;
  s->releasing = !s->releasing;
  s->c.in_len = 0;
  send_next(s, c->conn, bench_json);
}

static double server_cpu(int pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (f == NULL) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  unsigned long ut = 0, st = 0;
  /* After the comm: state, then fields 4..13, then utime (14), stime. */
  if (p == NULL ||
      sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
             &st) != 2)
    return 0;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static double self_cpu(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
         (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static double wall(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int bench(const char *mode, const char *url, int t, int n, int pid) {
  if (t < 1 || t > 256 || n < 1) return 2;
  int json = strcmp(mode, "json") == 0;
  bench_json = json;
  bench_del = strcmp(mode, "grpcdel") == 0;
  if (!json && !bench_del && strcmp(mode, "grpc") != 0) return 2;
  gw_conn conn;
  if (gw_conn_init(&conn, url, !json) != 0) return 1;
  slot *s = calloc((size_t)t, sizeof *s);
  for (int i = 0; i < t; i++) {
    s[i].lease = lease_grant(&conn, 60);
    snprintf(s[i].pfx, sizeof s[i].pfx, "probe/b%d-%d/", (int)getpid(), i);
    snprintf(s[i].end, sizeof s[i].end, "probe/b%d-%d0", (int)getpid(), i);
    snprintf(s[i].key, sizeof s[i].key, "%s%" PRIx64, s[i].pfx, s[i].lease);
    b64(s[i].key, s[i].k64);
    b64(s[i].pfx, s[i].p64);
    b64(s[i].end, s[i].e64);
    s[i].left = n;
    s[i].c.ud = &s[i];
    s[i].c.on_done = on_done;
  }
  double c0 = self_cpu(), s0 = pid ? server_cpu(pid) : 0, w0 = wall();
  int running;
  for (int i = 0; i < t; i++)
    send_next(&s[i], &conn, json);
  do {
    gw_pump(&conn, 100);
    running = 0;
    for (int i = 0; i < t; i++)
      running += s[i].c.running;
  } while (running);
  double w = wall() - w0, c = self_cpu() - c0;
  double sc = pid ? server_cpu(pid) - s0 : 0;
  printf("%-7s T=%-3d requests %d in %.0f ms: %.0f/s, %.0f cycles/s; "
         "client %.0f us CPU/request; server %.0f us CPU/request "
         "(%.0f a cycle)%s\n",
         mode, t, txns, w * 1000, txns / w, txns / w / 2, c * 1e6 / txns,
         sc * 1e6 / txns, sc * 2e6 / txns, bad ? "; BAD REPLIES" : "");
  for (int i = 0; i < t; i++)
    gw_call_free(&s[i].c);
  free(s);
  gw_conn_free(&conn);
  return bad ? 1 : 0;
}
