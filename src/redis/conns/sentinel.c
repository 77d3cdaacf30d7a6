/* sentinel.c: the endpoint resolver: where a connection connects to (the
 * one server, or the master that Redis Sentinel names, checked by ROLE). */
#include "conns.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Sends one command on io and reads its reply (until deadline). Returns 0
 * with *out (caller frees), or a negative code. */
static int roundtrip(dl_io *io, int argc, const char **argv, int64_t deadline,
                     redisReply **out) {
  *out = NULL;
  size_t lens[4];
  for (int i = 0; i < argc; i++)
    lens[i] = strlen(argv[i]);
  char *cmd;
  int len = redisFormatCommandArgv(&cmd, argc, argv, lens);
  if (len < 0) return DLOCK_ENOMEM;
  int rc = dl_io_write(io, cmd, (size_t)len, deadline);
  redisFreeCommand(cmd);
  if (rc != 0) return rc;
  redisReader *rd = redisReaderCreate();
  if (rd == NULL) return DLOCK_ENOMEM;
  char buf[1024];
  void *rep = NULL;
  while (rc == 0 && rep == NULL) {
    if (redisReaderGetReply(rd, &rep) != REDIS_OK) {
      rc = DLOCK_EPROTO;
      break;
    }
    if (rep != NULL) break;
    int n = dl_io_read(io, buf, sizeof buf, deadline);
    if (n < 0)
      rc = n;
    else
      redisReaderFeed(rd, buf, (size_t)n);
  }
  redisReaderFree(rd);
  *out = rep;
  return rc;
}

/* Connects to the sentinel at h and sends the sentinels' AUTH if one is
 * set. Returns 0 with *io, or a negative code with err set. */
static int sentinel_connect(const dl_conn_config *cfg,
                            const struct dl_hostport *h, int64_t deadline,
                            dl_io **io, char *err, size_t errlen) {
  /* Only what a sentinel's connect needs, read (not the whole *cfg: the
   * watch's thread runs this beside the client's). */
  dl_conn_config c = {.tls = cfg->tls,
                      .server_name = cfg->server_name,
                      .connect_timeout_ms = cfg->connect_timeout_ms,
                      .command_timeout_ms = cfg->command_timeout_ms,
                      .err_owner = cfg->err_owner};
  c.ep.host = h->host;
  c.ep.port = h->port;
  c.ep.tls = cfg->ep.tls;
  c.ep.username = (char *)cfg->sentinel_username; /* only read */
  c.ep.password = (char *)cfg->sentinel_password;
  c.client_name = NULL;
  int rc = dl_conn_open(&c, &c.ep, deadline, NULL, NULL, io, err, errlen);
  if (rc != 0) {
    dl_io_close(*io);
    *io = NULL;
  }
  return rc;
}

/* Asks the sentinel at h for the master's address: 1 with host (hlen
 * bytes) and port filled, 0 when it does not know the name, or a negative
 * code (err says why). */
static int ask_sentinel(const dl_conn_config *cfg, const struct dl_hostport *h,
                        int64_t deadline, char *host, size_t hlen, int *port,
                        char *err, size_t errlen) {
  dl_io *io = NULL;
  int rc = sentinel_connect(cfg, h, deadline, &io, err, errlen);
  if (rc != 0) return rc;
  redisReply *r = NULL;
  const char *argv[3] = {"SENTINEL", "get-master-addr-by-name",
                         cfg->ep.master_name};
  rc = roundtrip(io, 3, argv, deadline, &r);
  dl_io_close(io);
  if (rc != 0) {
    if (err[0] == '\0')
      snprintf(err, errlen, "%s",
               rc == DLOCK_ETIMEDOUT ? "no reply in time" : "connection lost");
    freeReplyObject(r);
    return rc;
  }
  int out = 0;
  if (r->type == REDIS_REPLY_ERROR) {
    snprintf(err, errlen, "%s", r->str);
    out = dl_server_errcode(r->str);
    if (out == DLOCK_ESERVER || out == 0) out = DLOCK_EPROTO;
  } else if (r->type == REDIS_REPLY_NIL ||
             (r->type == REDIS_REPLY_ARRAY && r->elements == 0)) {
    snprintf(err, errlen, "knows no master named '%s'", cfg->ep.master_name);
  } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
             r->element[0]->type == REDIS_REPLY_STRING &&
             r->element[1]->type == REDIS_REPLY_STRING &&
             r->element[0]->len < hlen) {
    snprintf(host, hlen, "%s", r->element[0]->str);
    *port = atoi(r->element[1]->str);
    out = *port > 0 && *port < 65536 ? 1 : DLOCK_EPROTO;
    if (out < 0) snprintf(err, errlen, "names a bad port");
  } else {
    snprintf(err, errlen,
             "unexpected reply to SENTINEL "
             "get-master-addr-by-name");
    out = DLOCK_EPROTO;
  }
  freeReplyObject(r);
  return out;
}

/* Whether the server at t->ep says ROLE master (1), another role (0), or
 * a negative code. */
static int check_master(const dl_conn_config *cfg, const dl_endpoint *ep,
                        int64_t deadline, char *err, size_t errlen) {
  dl_conn_config c = *cfg;
  c.ep = *ep;
  c.ep.db = 0;
  c.client_name = NULL;
  dl_io *io = NULL;
  int rc = dl_conn_open(&c, ep, deadline, NULL, NULL, &io, err, errlen);
  redisReply *r = NULL;
  if (rc == 0) {
    const char *argv[1] = {"ROLE"};
    rc = roundtrip(io, 1, argv, deadline, &r);
    if (rc != 0) snprintf(err, errlen, "no reply to ROLE");
  }
  dl_io_close(io);
  if (rc != 0) return rc;
  int out;
  if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
      r->element[0]->type == REDIS_REPLY_STRING) {
    out = strcmp(r->element[0]->str, "master") == 0;
    if (!out)
      snprintf(err, errlen, "is a %s, not a master", r->element[0]->str);
  } else {
    snprintf(err, errlen, "unexpected reply to ROLE");
    out = DLOCK_EPROTO;
  }
  freeReplyObject(r);
  return out;
}

struct dl_sentinel_watch {
  const dl_conn_config *cfg;
  atomic_uint gen; /* +switch-master messages for our master */
  atomic_bool stop;
  int bell[2]; /* stop rings it: the watch thread leaves at once */
  pthread_t thread;
};

int dl_conn_target(const dl_conn_config *cfg, int64_t deadline, dl_target *t,
                   char *err, size_t errlen) {
  t->ep = cfg->ep;
  t->gen = cfg->watch ? atomic_load(&cfg->watch->gen) : 0;
  t->named = false;
  if (cfg->ep.master_name == NULL) return 0;
  t->ep.hosts = NULL;
  t->ep.nhosts = 0;
  t->ep.master_name = NULL;
  /* What each sentinel said, for the error when none names a master. */
  char said[512] = "";
  size_t used = 0;
  bool any_answer = false;
  /* Sentinels that refused us (NOAUTH, WRONGPASS, NOPERM): when no other
   * named a master, that is the reason, said once, not "cannot connect". */
  char auth_why[160] = "", auth_who[160] = "";
  size_t auth_used = 0;
  for (int i = 0; i < cfg->ep.nhosts; i++) {
    const struct dl_hostport *h = &cfg->ep.hosts[i];
    char m[256] = "";
    int port = 0;
    int rc = ask_sentinel(cfg, h, deadline, t->hostbuf, sizeof t->hostbuf,
                          &port, m, sizeof m);
    if (rc >= 0) any_answer = true;
    if (rc == DLOCK_EAUTH || rc == DLOCK_ENOPERM) {
      if (auth_why[0] == '\0')
        snprintf(auth_why, sizeof auth_why, "%.159s", m);
      if (auth_used < sizeof auth_who)
        auth_used += (size_t)snprintf(auth_who + auth_used,
                                      sizeof auth_who - auth_used, "%s%s:%d",
                                      auth_used ? ", " : "", h->host, h->port);
    }
    if (rc == 1) {
      t->ep.host = t->hostbuf;
      t->ep.port = port;
      char m2[200] = "";
      rc = check_master(cfg, &t->ep, deadline, m2, sizeof m2);
      if (rc == 1) return 0;
      t->named = true;
      snprintf(m, sizeof m, "names %.60s:%d, which %.120s", t->hostbuf, port,
               m2);
    }
    if (used < sizeof said)
      used += (size_t)snprintf(said + used, sizeof said - used, "%s%s:%d %s",
                               used ? "; " : "", h->host, h->port, m);
    if (dl_now_ms() >= deadline) break;
  }
  t->ep.host = NULL;
  t->ep.port = 0;
  if (auth_who[0] != '\0') {
    bool none = cfg->sentinel_password == NULL;
    snprintf(err, errlen, "sentinel %s refused us for master '%s': %s%s",
             auth_who, cfg->ep.master_name, auth_why,
             none ? " (no sentinel password given: DLOCK_SENTINEL_PASSWORD)"
                  : "");
    return DLOCK_EAUTH;
  }
  snprintf(err, errlen, "%s for master '%s' (%s)",
           any_answer ? "no sentinel named a reachable master"
                      : "no sentinel answered",
           cfg->ep.master_name, said);
  return DLOCK_ECONNECT;
}

bool dl_target_moved(const dl_conn_config *cfg, unsigned gen) {
  return cfg->watch && atomic_load(&cfg->watch->gen) != gen;
}

/* One sentinel's +switch-master messages until the connection fails or
 * the watch stops. Returns whether it was subscribed. */
static bool watch_one(struct dl_sentinel_watch *w,
                      const struct dl_hostport *h) {
  const dl_conn_config *cfg = w->cfg;
  char err[256];
  dl_io *io = NULL;
  int64_t deadline = dl_now_ms() + cfg->connect_timeout_ms;
  if (sentinel_connect(cfg, h, deadline, &io, err, sizeof err) != 0)
    return false;
  int rc = 0;
  const char *sub[2] = {"SUBSCRIBE", "+switch-master"};
  size_t lens[2] = {9, 14};
  char *cmd = NULL;
  int len = rc == 0 ? redisFormatCommandArgv(&cmd, 2, sub, lens) : -1;
  if (len > 0)
    rc = dl_io_write(io, cmd, (size_t)len, deadline);
  else
    rc = DLOCK_ENOMEM;
  if (cmd) redisFreeCommand(cmd);
  redisReader *rd = rc == 0 ? redisReaderCreate() : NULL;
  size_t nlen = strlen(cfg->ep.master_name);
  char buf[1024];
  bool subscribed = false;
  while (rd != NULL && !atomic_load(&w->stop)) {
    void *rep = NULL;
    if (redisReaderGetReply(rd, &rep) != REDIS_OK) break;
    if (rep == NULL) {
      /* Until a message, or stop's bell (0). Before, reads of 200 ms at
       * most saw stop: closing a client waited for that, ~200 ms more on
       * every CLI command than on one server. */
      int n =
          dl_io_read_bell(io, buf, sizeof buf, dl_now_ms() + 60000, w->bell[0]);
      if (n == DLOCK_ETIMEDOUT) continue;
      if (n <= 0) break;
      redisReaderFeed(rd, buf, (size_t)n);
      continue;
    }
    redisReply *m = rep;
    subscribed = true; /* the confirmation, or a message */
    /* ["message", "+switch-master", "<name> <old ip> <old port> <new ip>
     * <new port>"] */
    if (m->type == REDIS_REPLY_ARRAY && m->elements == 3 &&
        m->element[2]->type == REDIS_REPLY_STRING &&
        m->element[2]->len > nlen &&
        strncmp(m->element[2]->str, cfg->ep.master_name, nlen) == 0 &&
        m->element[2]->str[nlen] == ' ')
      atomic_fetch_add(&w->gen, 1);
    freeReplyObject(m);
  }
  if (rd) redisReaderFree(rd);
  dl_io_close(io);
  return subscribed;
}

static void *watch_run(void *arg) {
  struct dl_sentinel_watch *w = arg;
  int i = 0;
  while (!atomic_load(&w->stop)) {
    /* Lost that sentinel: a failover may have passed unheard, so
     * connections resolve again; then the next one. */
    if (watch_one(w, &w->cfg->ep.hosts[i])) atomic_fetch_add(&w->gen, 1);
    i = (i + 1) % w->cfg->ep.nhosts;
    struct pollfd p = {.fd = w->bell[0], .events = POLLIN};
    (void)poll(&p, 1, 200); /* a pause, cut short by stop's bell */
  }
  return NULL;
}

int dl_sentinel_watch_start(dl_conn_config *cfg) {
  struct dl_sentinel_watch *w = calloc(1, sizeof *w);
  if (w == NULL) return DLOCK_ENOMEM;
  w->cfg = cfg;
  atomic_init(&w->gen, 0);
  atomic_init(&w->stop, false);
  if (pipe2(w->bell, O_CLOEXEC | O_NONBLOCK) != 0) {
    free(w);
    return DLOCK_ENOMEM;
  }
  /* Set before the thread starts: it copies *cfg (its connects' config). */
  cfg->watch = w;
  if (pthread_create(&w->thread, NULL, watch_run, w) != 0) {
    cfg->watch = NULL;
    close(w->bell[0]);
    close(w->bell[1]);
    free(w);
    return DLOCK_ENOMEM;
  }
  return 0;
}

void dl_sentinel_watch_stop(dl_conn_config *cfg) {
  struct dl_sentinel_watch *w = cfg->watch;
  if (w == NULL) return;
  atomic_store(&w->stop, true);
  if (write(w->bell[1], "x", 1) != 1) { /* full: it rings already */
  }
  pthread_join(w->thread, NULL);
  close(w->bell[0]);
  close(w->bell[1]);
  cfg->watch = NULL;
  free(w);
}
