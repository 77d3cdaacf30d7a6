/* io.c: one non-blocking socket to a server, plain or TLS: each operation
 * either bounded by a deadline (polling) or one step for an event loop. The transport owns its sockets (hiredis 0.14 has no
 * TLS); hiredis only parses and formats RESP. */
#include "net.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

struct dl_tls_ctx {
  SSL_CTX *ctx;
  int verify;
};

/* Where a connect is: the socket's (IO_CONNECTING, IO_CONNECTED), then
 * TLS's (IO_HANDSHAKE), then IO_UP. */
enum { IO_CONNECTING = 1, IO_CONNECTED, IO_HANDSHAKE, IO_UP };

struct dl_io {
  int fd;
  SSL *ssl;
  int phase;
  /* While connecting: the addresses to try, from ai on; "host:port" for
   * messages (empty for a unix socket, whose one address is un_ai). */
  struct addrinfo *res, *ai, un_ai;
  struct sockaddr_un un;
  char where[300];
  /* OpenSSL forbids concurrent SSL_read/SSL_write on one SSL object, while
   * the pipeline may have one thread writing and another reading: both take
   * this mutex around each (non-blocking) SSL call and poll outside it. */
  pthread_mutex_t ssl_mu;
  atomic_int shut;
  bool more; /* the last blocking read filled its buffer: more may wait */
};

static void tls_errstr(char *err, size_t errlen, const char *what) {
  unsigned long e = ERR_get_error();
  char buf[256] = "";
  if (e) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  snprintf(err, errlen, "%s%s%s", what, buf[0] ? ": " : "", buf);
}

int dl_tls_ctx_new(const dl_tls_config *cfg, dl_tls_ctx **out, char *err,
                   size_t errlen) {
  *out = NULL;
  dl_tls_ctx *t = calloc(1, sizeof *t);
  if (t == NULL) return DLOCK_ENOMEM;
  t->ctx = SSL_CTX_new(TLS_client_method());
  if (t->ctx == NULL) {
    tls_errstr(err, errlen, "cannot create the TLS context");
    free(t);
    return DLOCK_ETLS;
  }
  SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
                               SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  t->verify = cfg->verify;
  if (cfg->ca_file || cfg->ca_dir) {
    if (SSL_CTX_load_verify_locations(t->ctx, cfg->ca_file, cfg->ca_dir) != 1) {
      tls_errstr(err, errlen, "cannot load the CA file or directory");
      goto fail;
    }
  } else if (SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
    tls_errstr(err, errlen, "cannot load the system CA store");
    goto fail;
  }
  if (cfg->cert_file || cfg->key_file) {
    if (!cfg->cert_file || !cfg->key_file) {
      snprintf(err, errlen, "a client certificate needs both cert and key");
      goto fail;
    }
    if (SSL_CTX_use_certificate_chain_file(t->ctx, cfg->cert_file) != 1) {
      tls_errstr(err, errlen, "cannot load the client certificate");
      goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(t->ctx, cfg->key_file, SSL_FILETYPE_PEM) !=
        1) {
      tls_errstr(err, errlen, "cannot load the client key");
      goto fail;
    }
  }
  SSL_CTX_set_verify(t->ctx, t->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE,
                     NULL);
  *out = t;
  return 0;
fail:
  SSL_CTX_free(t->ctx);
  free(t);
  return DLOCK_ETLS;
}

void dl_tls_ctx_free(dl_tls_ctx *t) {
  if (t == NULL) return;
  SSL_CTX_free(t->ctx);
  free(t);
}

/* Waits for fd to be ready for `events`: 0, or DLOCK_ETIMEDOUT at the
 * deadline, or 1 if `bell` (>= 0) became readable first. */
static int wait_fd_bell(int fd, short events, int64_t deadline_ms, int bell) {
  for (;;) {
    int64_t left = deadline_ms - dl_now_ms();
    if (left <= 0) return DLOCK_ETIMEDOUT;
    struct pollfd p[2] = {{.fd = fd, .events = events},
                          {.fd = bell, .events = POLLIN}};
    int rc = poll(p, bell >= 0 ? 2 : 1, left > 1000000 ? 1000000 : (int)left);
    if (rc > 0) return p[0].revents == 0 && bell >= 0 ? 1 : 0;
    if (rc < 0 && errno != EINTR) return DLOCK_ECONNLOST;
  }
}

static int wait_fd(int fd, short events, int64_t deadline_ms) {
  return wait_fd_bell(fd, events, deadline_ms, -1);
}

static int set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return -1;
  return 0;
}

/* ---- connecting: one state machine, stepped by the blocking connect
 * (polling between steps) and by an event loop (dl_io_start, dl_io_step) */

/* Starts a non-blocking connect to ai into io->fd. Returns 0 (connected or
 * in progress: io->phase says) or DLOCK_ECONNECT (fd closed). */
static int sock_start(dl_io *io, const struct addrinfo *ai, char *err,
                      size_t errlen) {
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(err, errlen, "socket: %s", strerror(errno));
    return DLOCK_ECONNECT;
  }
  if (set_nonblock(fd) < 0) {
    snprintf(err, errlen, "fcntl: %s", strerror(errno));
    close(fd);
    return DLOCK_ECONNECT;
  }
  if (ai->ai_family != AF_UNIX) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  }
  io->phase = IO_CONNECTED;
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
    if (errno != EINPROGRESS && errno != EAGAIN) {
      snprintf(err, errlen, "connect: %s", strerror(errno));
      close(fd);
      return DLOCK_ECONNECT;
    }
    io->phase = IO_CONNECTING;
  }
  io->fd = fd;
  return 0;
}

/* Starts connecting to the next address that accepts a start. */
static int next_addr(dl_io *io, char *err, size_t errlen) {
  int rc = DLOCK_ECONNECT;
  for (; io->ai; io->ai = io->ai->ai_next) {
    rc = sock_start(io, io->ai, err, errlen);
    if (rc == 0) return 0;
  }
  return rc;
}

/* "host:port: " ahead of a TCP connect's error (not a unix socket's). */
static void addr_prefix(dl_io *io, char *err, size_t errlen) {
  if (io->where[0] == '\0') return;
  char tmp[200];
  snprintf(tmp, sizeof tmp, "%s", err);
  snprintf(err, errlen, "%s: %s", io->where, tmp);
}

static void tls_setup_name(dl_io *io, dl_tls_ctx *tls,
                           const char *server_name) {
  if (server_name && *server_name) {
    SSL_set_tlsext_host_name(io->ssl, server_name);
    if (tls->verify) {
      X509_VERIFY_PARAM *vp = SSL_get0_param(io->ssl);
      X509_VERIFY_PARAM_set_hostflags(vp,
                                      X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      /* An IP literal is checked against the certificate's IP SANs. */
      if (X509_VERIFY_PARAM_set1_ip_asc(vp, server_name) != 1)
        X509_VERIFY_PARAM_set1_host(vp, server_name, 0);
    }
  }
}

int dl_io_start(const dl_endpoint *ep, dl_tls_ctx *tls,
                const char *server_name, dl_io **out, char *err,
                size_t errlen) {
  *out = NULL;
  if (ep->tls && tls == NULL) {
    snprintf(err, errlen, "rediss:// URL but no TLS context");
    return DLOCK_ETLS;
  }
  dl_io *io = calloc(1, sizeof *io);
  if (io == NULL) return DLOCK_ENOMEM;
  pthread_mutex_init(&io->ssl_mu, NULL);
  io->fd = -1;
  int rc = 0;
  if (ep->unix_path) {
    struct sockaddr_un *sa = &io->un;
    if (strlen(ep->unix_path) >= sizeof sa->sun_path) {
      snprintf(err, errlen, "unix socket path too long");
      rc = DLOCK_EINVAL;
    } else {
      sa->sun_family = AF_UNIX;
      strcpy(sa->sun_path, ep->unix_path);
      io->un_ai.ai_family = AF_UNIX;
      io->un_ai.ai_addr = (struct sockaddr *)sa;
      io->un_ai.ai_addrlen = sizeof *sa;
      io->ai = &io->un_ai;
    }
  } else {
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_family = AF_UNSPEC};
    char port[16];
    snprintf(port, sizeof port, "%d", ep->port);
    snprintf(io->where, sizeof io->where, "%s:%d", ep->host, ep->port);
    int gai = getaddrinfo(ep->host, port, &hints, &io->res);
    if (gai != 0) {
      snprintf(err, errlen, "cannot resolve %s: %s", ep->host,
               gai_strerror(gai));
      io->res = NULL;
      rc = DLOCK_ECONNECT;
    }
    io->ai = io->res;
  }
  if (rc == 0) {
    rc = next_addr(io, err, errlen);
    if (rc != 0) addr_prefix(io, err, errlen);
  }
  if (rc == 0 && ep->tls) {
    io->ssl = SSL_new(tls->ctx);
    if (io->ssl == NULL) {
      tls_errstr(err, errlen, "SSL_new");
      rc = DLOCK_ETLS;
    } else {
      tls_setup_name(io, tls, server_name ? server_name : ep->host);
    }
  }
  if (rc != 0) {
    dl_io_close(io);
    return rc;
  }
  *out = io;
  return 0;
}

int dl_io_step(dl_io *io, char *err, size_t errlen) {
  while (io->phase == IO_CONNECTING) {
    struct pollfd p = {.fd = io->fd, .events = POLLOUT};
    if (poll(&p, 1, 0) == 0) return DL_EV_WRITE; /* still connecting */
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    getsockopt(io->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
    if (soerr == 0) {
      io->phase = IO_CONNECTED;
      break;
    }
    /* This address refused: the next one, if any. */
    /* The old socket closes after the next one opens: a new fd number,
     * so that an event loop's watch of the old one cannot be confused. */
    snprintf(err, errlen, "connect: %s", strerror(soerr));
    int old = io->fd;
    io->fd = -1;
    io->ai = io->ai->ai_next;
    int rc = io->ai ? next_addr(io, err, errlen) : DLOCK_ECONNECT;
    close(old);
    if (rc != 0) {
      addr_prefix(io, err, errlen);
      return rc;
    }
  }
  if (io->phase == IO_CONNECTED) {
    if (io->res) freeaddrinfo(io->res);
    io->res = NULL;
    io->ai = NULL;
    if (io->ssl == NULL) {
      io->phase = IO_UP;
      return 0;
    }
    SSL_set_fd(io->ssl, io->fd);
    io->phase = IO_HANDSHAKE;
  }
  if (io->phase == IO_HANDSHAKE) {
    ERR_clear_error();
    int rc = SSL_connect(io->ssl);
    if (rc == 1) {
      io->phase = IO_UP;
      return 0;
    }
    int e = SSL_get_error(io->ssl, rc);
    if (e == SSL_ERROR_WANT_READ) return DL_EV_READ;
    if (e == SSL_ERROR_WANT_WRITE) return DL_EV_WRITE;
    long vr = SSL_get_verify_result(io->ssl);
    if (vr != X509_V_OK)
      snprintf(err, errlen, "TLS handshake: certificate verify failed: %s",
               X509_verify_cert_error_string(vr));
    else
      tls_errstr(err, errlen, "TLS handshake failed");
    return DLOCK_ETLS;
  }
  return 0;
}

int dl_io_fd(const dl_io *io) { return io->fd; }

bool dl_io_tls(const dl_io *io) {
  return io->ssl != NULL;
}

int dl_io_connect(const dl_endpoint *ep, dl_tls_ctx *tls,
                  const char *server_name, int64_t deadline_ms, dl_io **out,
                  char *err, size_t errlen) {
  dl_io *io = NULL;
  int rc = dl_io_start(ep, tls, server_name, &io, err, errlen);
  while (rc == 0 && (rc = dl_io_step(io, err, errlen)) > 0) {
    bool tcp = io->phase == IO_CONNECTING;
    if (wait_fd(io->fd, rc == DL_EV_READ ? POLLIN : POLLOUT, deadline_ms) !=
        0) {
      if (tcp) {
        snprintf(err, errlen, "connect: timed out");
        addr_prefix(io, err, errlen);
      } else {
        snprintf(err, errlen, "TLS handshake timed out");
      }
      rc = DLOCK_ETIMEDOUT;
    } else {
      rc = 0;
    }
  }
  if (rc != 0) {
    dl_io_close(io);
    return rc;
  }
  *out = io;
  return 0;
}

/* ---- reading and writing: one attempt each, shared by the blocking calls
 * (which poll between attempts) and the event loop's ---- */

int dl_io_try_read(dl_io *io, char *buf, size_t len, int *want) {
  *want = DL_EV_READ;
  if (atomic_load(&io->shut)) return DLOCK_ECONNLOST;
  if (io->ssl) {
    pthread_mutex_lock(&io->ssl_mu);
    ERR_clear_error();
    int n = SSL_read(io->ssl, buf, (int)(len > INT32_MAX ? INT32_MAX : len));
    int e = n > 0 ? SSL_ERROR_NONE : SSL_get_error(io->ssl, n);
    pthread_mutex_unlock(&io->ssl_mu);
    if (n > 0) return n;
    if (e == SSL_ERROR_WANT_WRITE) *want = DL_EV_WRITE;
    else if (e != SSL_ERROR_WANT_READ) return DLOCK_ECONNLOST;
    return 0;
  }
  ssize_t n = recv(io->fd, buf, len, 0);
  if (n > 0) return (int)(n > INT32_MAX ? INT32_MAX : n);
  if (n == 0) return DLOCK_ECONNLOST;
  if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
    return DLOCK_ECONNLOST;
  return 0;
}

int dl_io_try_write(dl_io *io, const char *buf, size_t len, int *want) {
  *want = DL_EV_WRITE;
  if (atomic_load(&io->shut)) return DLOCK_ECONNLOST;
  if (len == 0) return 0;
  if (io->ssl) {
    pthread_mutex_lock(&io->ssl_mu);
    ERR_clear_error();
    size_t chunk = len > 1 << 20 ? 1 << 20 : len;
    int n = SSL_write(io->ssl, buf, (int)chunk);
    int e = n > 0 ? SSL_ERROR_NONE : SSL_get_error(io->ssl, n);
    pthread_mutex_unlock(&io->ssl_mu);
    if (n > 0) return n;
    if (e == SSL_ERROR_WANT_READ) *want = DL_EV_READ;
    else if (e != SSL_ERROR_WANT_WRITE) return DLOCK_ECONNLOST;
    return 0;
  }
  size_t chunk = len > INT32_MAX ? INT32_MAX : len;
  ssize_t n = send(io->fd, buf, chunk, MSG_NOSIGNAL);
  if (n >= 0) return (int)n;
  if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
    return DLOCK_ECONNLOST;
  return 0;
}

int dl_io_read(dl_io *io, char *buf, size_t len, int64_t deadline_ms) {
  return dl_io_read_bell(io, buf, len, deadline_ms, -1);
}

int dl_io_read_bell(dl_io *io, char *buf, size_t len, int64_t deadline_ms,
                    int bell) {
  /* A reply is seldom there yet when it is first read for, right after
   * its request went out: a plain socket is waited for first, since a
   * read that finds nothing would cost a system call per request. Not if
   * the last read filled its buffer (more may be there), nor past the
   * deadline (what came is still read), nor TLS (which may hold a record
   * read already). */
  if (io->ssl == NULL && !io->more && deadline_ms > dl_now_ms()) {
    int rc = wait_fd_bell(io->fd, POLLIN, deadline_ms, bell);
    if (rc == 1) return 0;
    if (rc != 0) return rc;
  }
  for (;;) {
    int want;
    int n = dl_io_try_read(io, buf, len, &want);
    io->more = n > 0 && (size_t)n == len;
    if (n != 0) return n;
    int rc = wait_fd_bell(io->fd, want == DL_EV_READ ? POLLIN : POLLOUT,
                          deadline_ms, bell);
    if (rc == 1) return 0;
    if (rc != 0) return rc;
  }
}

int dl_io_write(dl_io *io, const char *buf, size_t len, int64_t deadline_ms) {
  size_t off = 0;
  while (off < len) {
    int want;
    int n = dl_io_try_write(io, buf + off, len - off, &want);
    if (n < 0) return n;
    off += (size_t)n;
    if (n > 0) continue;
    int rc = wait_fd(io->fd, want == DL_EV_READ ? POLLIN : POLLOUT,
                     deadline_ms);
    if (rc != 0) return rc;
  }
  return 0;
}

void dl_io_shutdown(dl_io *io) {
  if (io == NULL) return;
  atomic_store(&io->shut, 1);
  shutdown(io->fd, SHUT_RDWR);
}

void dl_io_abort(dl_io *io) {
  if (io == NULL) return;
  /* Linger on, for 0 s: close() sends a reset and empties the send queue,
   * even after the shutdown below has queued a FIN behind the data. */
  struct linger lg = {.l_onoff = 1, .l_linger = 0};
  if (io->fd >= 0) {
    setsockopt(io->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    /* And at once, whoever still holds the socket (the close comes with
     * the last reference, maybe another thread's): on Linux a TCP socket
     * "connected" to AF_UNSPEC disconnects with a reset. Elsewhere, and
     * for a unix socket, it fails, and the close resets. */
    struct sockaddr sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_family = AF_UNSPEC;
    (void)connect(io->fd, &sa, sizeof sa);
  }
  dl_io_shutdown(io);
}

void dl_io_close(dl_io *io) {
  if (io == NULL) return;
  if (io->ssl) {
    if (!atomic_load(&io->shut)) SSL_shutdown(io->ssl);
    SSL_free(io->ssl);
  }
  if (io->fd >= 0) close(io->fd);
  if (io->res) freeaddrinfo(io->res);
  pthread_mutex_destroy(&io->ssl_mu);
  free(io);
}
