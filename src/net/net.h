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
void dl_io_close(dl_io *io);

#endif /* DLOCK_NET_H */
