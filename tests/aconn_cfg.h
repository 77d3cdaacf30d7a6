/* aconn_cfg.h: the event-loop connections' config for th_srv, shared by
 * the tests of the connection (test_async_io) and the subscriber
 * (test_asub). */
#ifndef DLOCK_TEST_ACONN_CFG_H
#define DLOCK_TEST_ACONN_CFG_H

#include "harness.h"
#include "redis/conns/conns.h"

/* Over TCP (the restart tests restart the server on the same port), short
 * timeouts and backoff, CLIENT SETNAME `name` (borrowed). Returns 0 or the
 * URL parser's code; free cfg->ep with dl_endpoint_clear. */
static inline int th_aconn_cfg(dl_conn_config *cfg, const char *name) {
  char err[200];
  int rc = dl_url_parse(th_srv.url, &cfg->ep, err, sizeof err);
  cfg->connect_timeout_ms = 2000;
  cfg->command_timeout_ms = 2000;
  cfg->reconnect_min_ms = 10;
  cfg->reconnect_max_ms = 100;
  cfg->client_name = name;
  return rc;
}

#endif
