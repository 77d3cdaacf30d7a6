/* fuzz_parsers.c: libFuzzer target for the parsers of outside input: server
 * URLs (zk:// too), durations, the text of server error replies and URL
 * redaction. The
 * first input byte picks the parser. Build: scripts/fuzz.sh. */
#include "cli/duration.h"
#include "client/client.h"
#include "redis/conns/conns.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  if (size < 1) return 0;
  char *s = malloc(size);
  if (s == NULL) return 0;
  memcpy(s, data + 1, size - 1);
  s[size - 1] = '\0';
  switch (data[0] % 5) {
  case 0: {
    dl_endpoint ep;
    char err[256];
    if (dl_url_parse(s, &ep, err, sizeof err) == 0) {
      /* Accepted: a host or a socket path, a sane port; or, for Sentinel,
       * a master's name and at least one sentinel, for Cluster at least
       * one seed node, each with a host and a sane port (the master's
       * address, the slot map, are asked for later). */
      if (ep.master_name || ep.cluster) {
        if (ep.master_name && ep.cluster) abort();
        if (ep.cluster && ep.db != 0) abort();
        if (ep.host || ep.unix_path || ep.nhosts < 1) abort();
        for (int i = 0; i < ep.nhosts; i++)
          if (ep.hosts[i].host == NULL || ep.hosts[i].port < 1 ||
              ep.hosts[i].port > 65535)
            abort();
      } else {
        if ((ep.host == NULL) == (ep.unix_path == NULL)) abort();
        if (ep.host && (ep.port < 1 || ep.port > 65535)) abort();
      }
      dl_endpoint_clear(&ep);
    }
    break;
  }
  case 1: {
    int64_t ms = -1;
    if (dl_parse_duration(s, &ms) == 0 &&
        (ms < 0 || ms > DLOCK_DURATION_MAX_MS))
      abort();
    break;
  }
  case 2: {
    int code = dl_server_errcode(s);
    if (code >= 0) abort();
    break;
  }
  case 3: {
    char *r = dl_url_redact(s);
    /* Never longer than the input plus the "***" it may insert. */
    if (r && strlen(r) > strlen(s) + 3) abort();
    free(r);
    break;
  }
  case 4: {
    /* zk://: accepted, a connect string without the user or options, a
     * chroot that is a path, timeouts in range. */
    dl_zk_url u;
    char err[256];
    if (dl_url_parse_zk(s, &u, err, sizeof err) == 0) {
      if (u.connect == NULL || strchr(u.connect, '@') ||
          strchr(u.connect, '?'))
        abort();
      if (u.chroot && (u.chroot[0] != '/' || u.chroot[1] == '\0'))
        abort();
      if (u.password && u.user == NULL) abort();
      if (u.session_timeout_ms < 0 || u.session_timeout_ms > 3600000 ||
          u.connect_timeout_ms < 0 || u.connect_timeout_ms > 3600000)
        abort();
      dl_zk_url_clear(&u);
    }
    break;
  }
  }
  free(s);
  return 0;
}
