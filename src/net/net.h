/* net.h: sockets, plain or TLS, each call bounded by a deadline. */
#ifndef DLOCK_NET_H
#define DLOCK_NET_H

#include "../core/core.h"

/* ---- net/io.c: one socket, plain or TLS, deadline-bounded ---- */
typedef struct dl_io dl_io;
typedef struct dl_tls_config {
  const char *ca_file, *ca_dir, *cert_file, *key_file, *server_name;
  int verify;
} dl_tls_config;

typedef struct dl_tls_ctx dl_tls_ctx;
int dl_tls_ctx_new(const dl_tls_config *cfg, dl_tls_ctx **out, char *err,
                   size_t errlen);
void dl_tls_ctx_free(dl_tls_ctx *t);

int dl_io_connect(const dl_endpoint *ep, dl_tls_ctx *tls,
                  const char *server_name, int64_t deadline_ms, dl_io **out,
                  char *err, size_t errlen);
/* Read up to len bytes. Returns >0 bytes, or a negative code. */
int dl_io_read(dl_io *io, char *buf, size_t len, int64_t deadline_ms);
/* The same, and returns 0 when the fd `bell` becomes readable before any
 * byte came (the caller drains it). One thread reads a dl_io at a time. */
int dl_io_read_bell(dl_io *io, char *buf, size_t len, int64_t deadline_ms,
                    int bell);
/* Write all of buf. Returns 0 or a negative code. */
int dl_io_write(dl_io *io, const char *buf, size_t len, int64_t deadline_ms);
/* Makes blocked and later reads/writes fail at once; thread-safe. */
void dl_io_shutdown(dl_io *io);
/* dl_io_shutdown for a connection given up on with requests unanswered (a
 * timeout, a lost connection): the connection is reset (on Linux at once,
 * elsewhere at its close), and the kernel drops what it has not yet
 * delivered instead of sending it once the network is back, so that a request the caller was told failed cannot reach the server
 * later, after requests sent on another connection (a release applied to
 * the same owner's next hold). Thread-safe. */
void dl_io_abort(dl_io *io);
void dl_io_close(dl_io *io);

/* ---- net/io.c for an event loop: the same socket, never blocking ----
 * The blocking calls above are these steps with a poll between them. */
/* Starts connecting (TCP: each resolved address in turn; or a unix socket;
 * then TLS for ep->tls). Name resolution blocks (getaddrinfo): give an
 * address literal where that matters. Returns 0 and *out (step it with
 * dl_io_step; free with dl_io_close), or a negative code with err set. */
int dl_io_start(const dl_endpoint *ep, dl_tls_ctx *tls,
                const char *server_name, dl_io **out, char *err,
                size_t errlen);
/* Advances the connect as far as it goes without blocking. Returns 0 once
 * connected (and TLS done), DL_EV_READ or DL_EV_WRITE: call again when
 * dl_io_fd(io) is ready for that (the fd may change between calls, from
 * one address to the next), or a negative code with err set. */
int dl_io_step(dl_io *io, char *err, size_t errlen);
int dl_io_fd(const dl_io *io);
/* Whether io is a TLS connection (whose reads may hold data back). */
bool dl_io_tls(const dl_io *io);
/* One read: > 0 bytes; 0: nothing now, call again when the fd is ready for
 * *want (DL_EV_READ, or DL_EV_WRITE when TLS must write first); or a
 * negative code (DLOCK_ECONNLOST, also at the server's end of stream). */
int dl_io_try_read(dl_io *io, char *buf, size_t len, int *want);
/* One write of up to len bytes: returns how many it wrote (>= 0; fewer
 * than len: call again for the rest when the fd is ready for *want), or a
 * negative code. */
int dl_io_try_write(dl_io *io, const char *buf, size_t len, int *want);

#endif /* DLOCK_NET_H */
