/* async_event.c: one thread, one libevent event_base, one event-loop dlock
 * client and 100 locks in flight at once (async_locks.h), then a clean
 * shutdown.
 *   dlock-example-event [redis://host:port]  (default: $DLOCK_URL)
 * Exits 0 only if every lock was acquired and released as expected. */
#include <event2/event.h>

#include "dlock_event.h" /* the header-only adapter: after event2 */

#include "async_locks.h"

static void stop_loop(void *ud) {
  event_base_loopbreak(ud);
}

static void on_guard(evutil_socket_t fd, short what, void *ud) {
  (void)fd;
  (void)what;
  ex_run *r = ud;
  snprintf(r->why, sizeof r->why, "timed out after 30 s");
  ex_end(r);
}

int main(int argc, char **argv) {
  const char *url = argc > 1 ? argv[1] : getenv("DLOCK_URL");
  if (url == NULL) {
    fprintf(stderr, "usage: %s REDIS_URL (or set DLOCK_URL)\n", argv[0]);
    return 2;
  }
  struct event_base *base = event_base_new();
  if (base == NULL) return 1;
  static ex_run run; /* static: its 100 locks are not small */
  struct event *guard = evtimer_new(base, on_guard, &run);
  dlock_loop *lp = NULL;
  int rc = guard ? dlock_event_loop_new(base, &lp) : DLOCK_ENOMEM;
  dlock_client *c = NULL;
  if (rc == 0) {
    dlock_client_options o;
    dlock_client_options_init(&o);
    o.url = url;
    rc = dlock_client_open_async(&o, lp, &c);
    if (rc != 0)
      fprintf(stderr, "async_event: %s\n", dlock_client_open_errmsg());
  }
  if (rc == 0 && (rc = ex_start(&run, c, "event", stop_loop, base)) == 0) {
    struct timeval tv = {30, 0}; /* no hang, whatever the server does */
    evtimer_add(guard, &tv);
    event_base_dispatch(base); /* until stop_loop */
  }
  bool ok = c != NULL && ex_report("async_event", &run) && rc == 0;
  /* Shutdown, on the loop's thread: the handles, the client (whatever is
   * still pending completes within), the dlock loop, then libevent's. */
  ex_free(&run);
  dlock_client_close(c);
  dlock_loop_free(lp);
  if (guard) event_free(guard);
  event_base_free(base);
  libevent_global_shutdown();
  return ok ? 0 : 1;
}
