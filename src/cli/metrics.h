/* metrics.h: dlock metrics' exposition (metrics.c) and its HTTP server
 * (metrics_http.c, built with libmicrohttpd). */
#ifndef DLOCK_CLI_METRICS_H
#define DLOCK_CLI_METRICS_H

#include "observe.h"

#include <stdio.h>

/* What every snapshot reads: the pattern and the named objects. */
typedef struct metrics_src {
  dlock_client *c;
  const char *pattern; /* NULL: all */
  const obs_named *named;
  size_t n;
  const char *backend; /* obs_backend's label */
} metrics_src;

/* Writes s as Prometheus text exposition (format 0.0.4) to f: a gauge
 * family per metric, one sample per object that has it, labels name, kind
 * and backend; then dlock_objects, dlock_up and
 * dlock_scrape_duration_seconds. */
void metrics_write(FILE *f, const obs_snap *s, const char *backend);

/* Whether this dlock serves --listen (built with libmicrohttpd). */
extern const bool metrics_http_built;

/* Serves a fresh snapshot of src on http://ADDR:PORT/metrics (`listen`:
 * "ADDR:PORT", "[V6ADDR]:PORT" or ":PORT"; port 0 picks one, said on
 * stderr unless verbose < 0) until SIGINT, SIGTERM or SIGHUP. Returns the
 * exit status. */
int metrics_serve(const metrics_src *src, const char *listen, int verbose);

#endif
