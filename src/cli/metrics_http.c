/* metrics_http.c: dlock metrics --listen: /metrics over HTTP with
 * libmicrohttpd (one thread of its own; a fresh snapshot per request). A
 * build without libmicrohttpd keeps only the stub at the end. */
#include "metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DLOCK_HAVE_MHD
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

const bool metrics_http_built = true;

typedef struct server {
  const metrics_src *src;
  pthread_mutex_t mu; /* one snapshot at a time */
} server;

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status,
                             char *body, size_t len, const char *type) {
  struct MHD_Response *r =
      MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
  if (r == NULL) {
    free(body);
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  enum MHD_Result ok = MHD_queue_response(conn, status, r);
  MHD_destroy_response(r);
  return ok;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn,
                              const char *url, const char *method,
                              const char *version, const char *upload,
                              size_t *upload_len, void **state) {
  (void)version, (void)upload, (void)upload_len, (void)state;
  server *sv = cls;
  const char *text = "text/plain; charset=utf-8";
  if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
    return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
                 strdup("only GET /metrics\n"), 18, text);
  if (strcmp(url, "/metrics") != 0)
    return reply(conn, MHD_HTTP_NOT_FOUND, strdup("see /metrics\n"), 13, text);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (f == NULL) return MHD_NO;
  pthread_mutex_lock(&sv->mu);
  obs_snap s = {0};
  const metrics_src *src = sv->src;
  /* A server that fails the snapshot is told as dlock_up 0, as exporters
   * do, with what was read. */
  obs_collect(src->c, src->pattern, src->named, src->n, &s);
  metrics_write(f, &s, src->backend);
  obs_snap_clear(&s);
  pthread_mutex_unlock(&sv->mu);
  if (fclose(f) != 0) {
    free(buf);
    return MHD_NO;
  }
  return reply(conn, MHD_HTTP_OK, buf, len,
               "text/plain; version=0.0.4; charset=utf-8");
}

/* Resolves "ADDR:PORT", "[V6]:PORT" or ":PORT" into *out (freeaddrinfo);
 * returns 0 or -1 (said). */
static int resolve(const char *listen, struct addrinfo **out) {
  char host[256];
  const char *colon = strrchr(listen, ':');
  if (colon == NULL || colon[1] == '\0' ||
      (size_t)(colon - listen) >= sizeof host) {
    cli_err("--listen %s: say ADDR:PORT (for example 127.0.0.1:9464)", listen);
    return -1;
  }
  const char *h = listen;
  size_t hl = (size_t)(colon - listen);
  if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') h++, hl -= 2;
  memcpy(host, h, hl);
  host[hl] = '\0';
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
  int e = getaddrinfo(hl ? host : NULL, colon + 1, &hints, out);
  if (e != 0) {
    cli_err("--listen %s: %s", listen, gai_strerror(e));
    return -1;
  }
  return 0;
}

int metrics_serve(const metrics_src *src, const char *listen, int verbose) {
  struct addrinfo *ai = NULL;
  if (resolve(listen, &ai) != 0) return EXIT_USAGE;
  /* The signals that stop us, blocked before MHD's thread starts (it
   * inherits the mask), then waited for here. */
  sigset_t set, orig;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, &orig);
  server sv = {.src = src};
  pthread_mutex_init(&sv.mu, NULL);
  /* ITC: MHD_stop_daemon wakes its thread at once (without, it waits for
   * its poll to time out, about 1.5 s). */
  unsigned flags =
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC | MHD_USE_ERROR_LOG;
  if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
  struct MHD_Daemon *d = MHD_start_daemon(
      flags, 0, NULL, NULL, answer, &sv, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
      MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_END);
  freeaddrinfo(ai);
  int rc = 0;
  if (d == NULL) {
    cli_err("--listen %s: cannot listen there (in use, or not an address "
            "of this host)",
            listen);
    rc = EXIT_UNAVAILABLE;
  } else {
    const union MHD_DaemonInfo *i =
        MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    if (verbose >= 0)
      fprintf(stderr, "dlock: serving metrics on port %u (GET /metrics)\n",
              i ? (unsigned)i->port : 0u);
    cli_wait_signal(&set, -1);
    MHD_stop_daemon(d);
  }
  pthread_mutex_destroy(&sv.mu);
  pthread_sigmask(SIG_SETMASK, &orig, NULL);
  return rc;
}

#else /* built without libmicrohttpd */

const bool metrics_http_built = false;

int metrics_serve(const metrics_src *src, const char *listen, int verbose) {
  (void)src, (void)listen, (void)verbose;
  cli_err("--listen: this dlock was built without libmicrohttpd");
  return EXIT_USAGE;
}

#endif
