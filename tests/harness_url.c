/* harness_url.c: clients opened on a URL the test names (any URL kind),
 * the opens that must fail, and the dlock CLI run against a URL, for the
 * per-backend tests (test_sentinel, test_cluster, test_redlock, test_zk). */
#include "harness.h"

#include <stdarg.h>
#include <string.h>
#include <sys/wait.h>

dlock_client *th_client_url(const char *url, int64_t watchdog_ms) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = (int)th_soon(1000); /* valgrind: slower opens */
  if (watchdog_ms > 0) o.watchdog_timeout_ms = watchdog_ms;
  return th_client_opts(&o);
}

bool th_urls_refused(const char *const *urls, size_t n) {
  for (size_t i = 0; i < n; i++) {
    dlock_client_options o;
    dlock_client_options_init(&o);
    o.url = urls[i];
    dlock_client *const unset = (dlock_client *)&o; /* not a client */
    dlock_client *c = unset;
    int rc = dlock_client_open(&o, &c);
    if (rc != DLOCK_EURL || c != NULL) {
      fprintf(stderr, "    %s: %s (%s), expected DLOCK_EURL and no client\n",
              urls[i], dlock_err_name(rc), dlock_client_open_errmsg());
      if (c != unset) dlock_client_close(c);
      return false;
    }
  }
  return true;
}

int th_open_rc(const char *url, int connect_timeout_ms) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = connect_timeout_ms;
  dlock_client *c = NULL;
  int rc = dlock_client_open(&o, &c);
  dlock_client_close(c);
  return rc;
}

int th_cli(const char *cli, const char *url, char *out, size_t len,
           const char *fmt, ...) {
  char args[1500], cmd[2400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "%s -u '%s' %s", cli, url, args);
  FILE *f = popen(cmd, "r");
  if (f == NULL) return -1;
  size_t n = out ? fread(out, 1, len - 1, f) : 0;
  if (out) out[n] = '\0';
  char sink[256];
  while (fread(sink, 1, sizeof sink, f) > 0) {
  }
  int st = pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
