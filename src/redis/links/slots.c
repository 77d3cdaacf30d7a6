/* slots.c: what the two cluster links (cluster.c, blocking; acluster.c, on
 * an event loop) share about Redis Cluster: key slots, the CLUSTER SLOTS
 * reply, redirections, which channels stay classic, which key a command
 * goes by, and the cursor of a SCAN over every master. */
#include "links.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static uint16_t crc16(const char *buf, size_t len) {
  uint16_t crc = 0; /* CRC-16/XMODEM, as the cluster specification says */
  for (size_t i = 0; i < len; i++) {
    crc ^= (uint16_t)((unsigned char)buf[i] << 8);
    for (int k = 0; k < 8; k++)
      crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
  }
  return crc;
}

int dl_key_slot(const char *key, size_t len) {
  const char *open = memchr(key, '{', len);
  if (open) {
    size_t rest = len - (size_t)(open + 1 - key);
    const char *close = memchr(open + 1, '}', rest);
    if (close && close > open + 1) {
      key = open + 1;
      len = (size_t)(close - open - 1);
    }
  }
  return crc16(key, len) & (DL_CLUSTER_SLOTS - 1);
}

int dl_slots_parse(const redisReply *r, const char *asked,
                   int (*range)(void *ctx, int lo, int hi, const char *host,
                                int port),
                   void *ctx) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) return DLOCK_EPROTO;
  for (size_t i = 0; i < r->elements; i++) {
    const redisReply *e = r->element[i];
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
        e->element[0]->type != REDIS_REPLY_INTEGER ||
        e->element[1]->type != REDIS_REPLY_INTEGER ||
        e->element[2]->type != REDIS_REPLY_ARRAY ||
        e->element[2]->elements < 2 ||
        e->element[2]->element[0]->type != REDIS_REPLY_STRING ||
        e->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
      return DLOCK_EPROTO;
    long long lo = e->element[0]->integer, hi = e->element[1]->integer;
    const char *host = e->element[2]->element[0]->str;
    if (host[0] == '\0' || strcmp(host, "?") == 0) host = asked;
    long long port = e->element[2]->element[1]->integer;
    if (lo < 0 || hi >= DL_CLUSTER_SLOTS || lo > hi || port <= 0 ||
        port > 65535)
      return DLOCK_EPROTO;
    int rc = range(ctx, (int)lo, (int)hi, host, (int)port);
    if (rc != 0) return rc;
  }
  return 0;
}

void dl_slots_node_config(dl_conn_config *out, const dl_conn_config *base,
                          char *host, int port) {
  *out = *base;
  out->ep.host = host;
  out->ep.port = port;
  out->ep.cluster = false;
  out->ep.nhosts = 0;
  out->ep.hosts = NULL;
}

/* A call to host:port that failed with rc: why says so, with the detail
 * recorded. Returns rc. */
static int call_failed(const dlock_client *err_owner, const char *host,
                       int port, int rc, char *why, size_t len) {
  snprintf(why, len, "%s:%d: %s", host, port,
           err_owner ? dlock_client_errmsg(err_owner)
                     : dlock_client_open_errmsg());
  return rc;
}

int dl_slots_ask(dl_conn *conn, const dlock_client *err_owner, const char *host,
                 int port,
                 int (*range)(void *ctx, int lo, int hi, const char *host,
                              int port),
                 void *ctx, char *why, size_t len) {
  const char *argv[] = {"CLUSTER", "SLOTS"};
  size_t lens[] = {7, 5};
  redisReply *r = NULL;
  int rc = dl_conn_call(conn, 2, argv, lens, &r);
  if (rc != 0) return call_failed(err_owner, host, port, rc, why, len);
  if (r->type == REDIS_REPLY_ERROR) {
    snprintf(why, len, "%s:%d: %s", host, port, r->str);
    rc = DLOCK_EPROTO;
  } else {
    rc = dl_slots_parse(r, host, range, ctx);
    if (rc != 0)
      snprintf(why, len, "%s:%d: unexpected reply to CLUSTER SLOTS", host,
               port);
  }
  freeReplyObject(r);
  return rc;
}

int dl_slots_probe_sharded(dl_conn *conn, const dlock_client *err_owner,
                           const char *host, int port, bool *sharded, char *why,
                           size_t len) {
  const char *argv[] = {"PUBSUB", "SHARDNUMSUB"};
  size_t lens[] = {6, 11};
  redisReply *r = NULL;
  int rc = dl_conn_call(conn, 2, argv, lens, &r);
  if (rc != 0) return call_failed(err_owner, host, port, rc, why, len);
  *sharded = r->type == REDIS_REPLY_ARRAY;
  freeReplyObject(r);
  return 0;
}

bool dl_cluster_reply_is(const redisReply *r, const char *what) {
  size_t n = strlen(what);
  return r && r->type == REDIS_REPLY_ERROR && r->len > n &&
         strncmp(r->str, what, n) == 0 && r->str[n] == ' ';
}

bool dl_cluster_reply_stands(const redisReply *r, int64_t *down_since,
                             int64_t pause, int64_t deadline) {
  bool down = dl_cluster_reply_is(r, "CLUSTERDOWN");
  if (!down && !dl_cluster_reply_is(r, "TRYAGAIN")) return false;
  int64_t now = dl_now_ms();
  if (down && *down_since == 0) *down_since = now;
  return now + pause >= deadline ||
         (down && now - *down_since >= DL_CLUSTERDOWN_MS);
}

bool dl_cluster_redirect(const redisReply *r, int *slot, char *host,
                         size_t hostlen, int *port) {
  const char *p = strchr(r->str, ' ');
  if (p == NULL) return false;
  char *end;
  long s = strtol(p + 1, &end, 10);
  if (*end != ' ' || s < 0 || s >= DL_CLUSTER_SLOTS) return false;
  const char *addr = end + 1;
  const char *colon = strrchr(addr, ':');
  if (colon == NULL || colon == addr) return false;
  size_t hl = (size_t)(colon - addr);
  if (hl >= hostlen) return false;
  memcpy(host, addr, hl);
  host[hl] = '\0';
  int pt = atoi(colon + 1);
  if (pt <= 0 || pt > 65535) return false;
  *slot = (int)s;
  *port = pt;
  return true;
}

bool dl_cluster_classic_channel(const char *ch) {
  static const char *const prefixes[] = {"dlock_queue_channel",
                                         "redisson_delay_queue_channel"};
  for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
    if (strncmp(ch, prefixes[i], strlen(prefixes[i])) == 0) return true;
  return false;
}

int dl_cluster_command_slot(int argc, const char **argv, const size_t *lens) {
  static const char *const keyless[] = {"PING",   "WAIT",    "SCAN",   "CONFIG",
                                        "INFO",   "CLUSTER", "CLIENT", "ROLE",
                                        "SCRIPT", "TIME"};
  if (argc < 2) return -1;
  for (size_t i = 0; i < sizeof keyless / sizeof keyless[0]; i++)
    if (strcasecmp(argv[0], keyless[i]) == 0) return -1;
  if (strcasecmp(argv[0], "PUBSUB") == 0)
    return argc >= 3 ? dl_key_slot(argv[2], lens[2]) : -1;
  return dl_key_slot(argv[1], lens[1]);
}

void dl_cluster_scan_cursor(const char *arg, long *master,
                            const char **cursor) {
  *master = 0;
  *cursor = arg;
  const char *colon = strchr(arg, ':');
  if (colon) {
    *master = strtol(arg, NULL, 10);
    *cursor = colon + 1;
  }
}

int dl_cluster_scan_next(redisReply *r, long master, int nmasters) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_STRING)
    return 0; /* the caller says what is wrong with it */
  redisReply *c = r->element[0];
  char next[48];
  if (strcmp(c->str, "0") != 0)
    snprintf(next, sizeof next, "%ld:%s", master, c->str);
  else if (master + 1 < nmasters)
    snprintf(next, sizeof next, "%ld:0", master + 1);
  else
    return 0;
  char *s = malloc(strlen(next) + 1); /* freeReplyObject frees it */
  if (s == NULL) return DLOCK_ENOMEM;
  strcpy(s, next);
  free(c->str);
  c->str = s;
  c->len = strlen(s);
  return 0;
}
