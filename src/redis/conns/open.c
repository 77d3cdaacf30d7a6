/* open.c: opening a connection, written once for every connection: the
 * handshake (built and judged here, sent by both drivers), the blocking
 * open (where, connect, handshake) of the command and subscriber
 * connections and of the resolver's ROLE check, and the reconnect backoff
 * that conn.c, pubsub.c and aconn.c share. */
#include "conns.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the handshake: AUTH, SELECT, CLIENT SETNAME on a fresh socket ----
 * Built and judged here for every connection: the blocking ones below, and
 * the event loop's (aconn.c, asub.c), which reads the replies as they come. */

/* Appends one formatted command to hs->buf. */
static int hs_add(dl_handshake *hs, int argc, const char **argv,
                  const char *what) {
  size_t lens[4];
  for (int i = 0; i < argc; i++) lens[i] = strlen(argv[i]);
  char *cmd;
  int len = redisFormatCommandArgv(&cmd, argc, argv, lens);
  if (len < 0) return DLOCK_ENOMEM;
  char *buf = realloc(hs->buf, hs->len + (size_t)len);
  if (buf == NULL) {
    redisFreeCommand(cmd);
    return DLOCK_ENOMEM;
  }
  memcpy(buf + hs->len, cmd, (size_t)len);
  redisFreeCommand(cmd);
  hs->buf = buf;
  hs->len += (size_t)len;
  hs->ncmd++;
  size_t n = strlen(hs->sent);
  snprintf(hs->sent + n, sizeof hs->sent - n, "%s%s", n ? ", " : "", what);
  return 0;
}

int dl_handshake_init(dl_handshake *hs, const dl_conn_config *cfg, char *err,
                      size_t errlen) {
  memset(hs, 0, sizeof *hs);
  const char *argv[4];
  int rc = 0;
  if (cfg->ep.password) {
    int argc = 0;
    argv[argc++] = "AUTH";
    if (cfg->ep.username) argv[argc++] = cfg->ep.username;
    argv[argc++] = cfg->ep.password;
    rc = hs_add(hs, argc, argv, "AUTH");
  }
  char db[16];
  if (rc == 0 && cfg->ep.db != 0) {
    snprintf(db, sizeof db, "%d", cfg->ep.db);
    argv[0] = "SELECT";
    argv[1] = db;
    rc = hs_add(hs, 2, argv, "SELECT");
  }
  if (rc == 0 && cfg->client_name) {
    argv[0] = "CLIENT";
    argv[1] = "SETNAME";
    argv[2] = cfg->client_name;
    rc = hs_add(hs, 3, argv, "CLIENT SETNAME");
  }
  if (rc != 0) {
    dl_handshake_clear(hs);
    snprintf(err, errlen, "out of memory");
  }
  return rc;
}

void dl_handshake_clear(dl_handshake *hs) {
  free(hs->buf);
  hs->buf = NULL;
  hs->len = 0;
}

bool dl_handshake_reply(dl_handshake *hs, const dl_conn_config *cfg,
                        redisReply *r, char *err, size_t errlen) {
  if (r->type == REDIS_REPLY_ERROR && hs->rc == 0) {
    /* The server's text names the failure, never the password. */
    hs->rc = dl_server_errcode(r->str);
    if (hs->got == 0 && cfg->ep.password) hs->rc = DLOCK_EAUTH;
    snprintf(err, errlen, "%s", r->str);
  }
  freeReplyObject(r);
  return ++hs->got == hs->ncmd;
}

int dl_handshake_ioerr(const dl_handshake *hs, const dl_conn_config *cfg,
                       bool sending, int rc, char *err, size_t errlen) {
  /* The details say what failed; the caller prefixes the code's text, so
   * they never repeat it ("did not answer in time: ... in time"). */
  int limit_ms = cfg->connect_timeout_ms;
  if (rc == DLOCK_EPROTO)
    snprintf(err, errlen, "malformed reply to %s", hs->sent);
  else if (sending && rc == DLOCK_ETIMEDOUT)
    snprintf(err, errlen, "could not send %s within %d ms (connect "
             "timeout)", hs->sent, limit_ms);
  else if (sending)
    snprintf(err, errlen, "connection closed while sending %s", hs->sent);
  else if (rc == DLOCK_ETIMEDOUT)
    snprintf(err, errlen, "no reply to %s within %d ms (connect "
             "timeout)", hs->sent, limit_ms);
  else
    snprintf(err, errlen, "connection closed before the reply to %s",
             hs->sent);
  return rc;
}

int dl_conn_handshake(dl_io *io, const dl_conn_config *cfg, int64_t deadline,
                      char *err, size_t errlen) {
  dl_handshake hs;
  if (dl_handshake_init(&hs, cfg, err, errlen) != 0) return DLOCK_ENOMEM;
  if (hs.ncmd == 0) return 0;
  int rc = dl_io_write(io, hs.buf, hs.len, deadline);
  dl_handshake_clear(&hs);
  if (rc != 0) return dl_handshake_ioerr(&hs, cfg, true, rc, err, errlen);
  redisReader *rd = redisReaderCreate();
  if (rd == NULL) {
    snprintf(err, errlen, "out of memory");
    return DLOCK_ENOMEM;
  }
  char rbuf[4096];
  bool done = false;
  while (!done) {
    void *rep = NULL;
    if (redisReaderGetReply(rd, &rep) != REDIS_OK) {
      rc = DLOCK_EPROTO;
      break;
    }
    if (rep != NULL) {
      done = dl_handshake_reply(&hs, cfg, rep, err, errlen);
      continue;
    }
    int n = dl_io_read(io, rbuf, sizeof rbuf, deadline);
    if (n < 0) {
      rc = n;
      break;
    }
    redisReaderFeed(rd, rbuf, (size_t)n);
  }
  redisReaderFree(rd);
  /* An error reply before the failure says more than the failure. */
  if (rc != 0 && hs.rc == 0)
    return dl_handshake_ioerr(&hs, cfg, false, rc, err, errlen);
  return hs.rc;
}

/* ---- the blocking open ---- */

int dl_conn_open(const dl_conn_config *cfg, const dl_endpoint *ep,
                 int64_t deadline, dl_conn_opened_fn opened, void *ud,
                 dl_io **io, char *err, size_t errlen) {
  *io = NULL;
  int rc =
      dl_io_connect(ep, cfg->tls, cfg->server_name, deadline, io, err, errlen);
  if (rc == 0 && opened) rc = opened(ud, *io);
  if (rc == 0) rc = dl_conn_handshake(*io, cfg, deadline, err, errlen);
  return rc;
}

int dl_conn_dial(const dl_conn_config *cfg, int64_t deadline, dl_target *t,
                 dl_conn_opened_fn opened, void *ud, dl_io **io, char *err,
                 size_t errlen) {
  *io = NULL;
  int rc = dl_conn_target(cfg, deadline, t, err, errlen);
  if (rc == 0)
    rc = dl_conn_open(cfg, &t->ep, deadline, opened, ud, io, err, errlen);
  return rc;
}

int dl_conn_backoff(const dl_conn_config *cfg, int *backoff_ms) {
  int wait = *backoff_ms;
  *backoff_ms =
      wait > cfg->reconnect_max_ms / 2 ? cfg->reconnect_max_ms : wait * 2;
  return wait;
}
