/* async_uv.c: one thread, one libuv loop, one event-loop dlock client and
 * 100 locks in flight at once (async_locks.h), then a clean shutdown.
 *   dlock-example-uv [redis://host:port]     (default: $DLOCK_URL)
 * Exits 0 only if every lock was acquired and released as expected. */
#include <uv.h>

#include "dlock_uv.h" /* the header-only adapter: after <uv.h> */

#include "async_locks.h"

static void stop_loop(void *ud) {
  uv_stop(ud);
}

static void on_guard(uv_timer_t *t) {
  ex_run *r = t->data;
  snprintf(r->why, sizeof r->why, "timed out after 30 s");
  ex_end(r);
}

int main(int argc, char **argv) {
  const char *url = argc > 1 ? argv[1] : getenv("DLOCK_URL");
  if (url == NULL) {
    fprintf(stderr, "usage: %s REDIS_URL (or set DLOCK_URL)\n", argv[0]);
    return 2;
  }
  uv_loop_t uv;
  if (uv_loop_init(&uv) != 0) return 1;
  dlock_loop *lp = NULL;
  int rc = dlock_uv_loop_new(&uv, &lp);
  dlock_client *c = NULL;
  if (rc == 0) {
    dlock_client_options o;
    dlock_client_options_init(&o);
    o.url = url;
    rc = dlock_client_open_async(&o, lp, &c);
    if (rc != 0) fprintf(stderr, "async_uv: %s\n", dlock_client_open_errmsg());
  }
  static ex_run run; /* static: its 100 locks are not small */
  uv_timer_t guard;  /* no hang, whatever the server does */
  uv_timer_init(&uv, &guard);
  guard.data = &run;
  if (rc == 0 && (rc = ex_start(&run, c, "uv", stop_loop, &uv)) == 0) {
    uv_timer_start(&guard, on_guard, 30000, 0);
    uv_run(&uv, UV_RUN_DEFAULT); /* until stop_loop */
  }
  bool ok = c != NULL && ex_report("async_uv", &run) && rc == 0;
  /* Shutdown, on the loop's thread: the handles, the client (whatever is
   * still pending completes within), the dlock loop; then one more run of
   * the uv loop lets libuv close the adapter's handles and ours. */
  ex_free(&run);
  dlock_client_close(c);
  dlock_loop_free(lp);
  uv_close((uv_handle_t *)&guard, NULL);
  uv_run(&uv, UV_RUN_DEFAULT);
  if (uv_loop_close(&uv) != 0) {
    fprintf(stderr, "async_uv: the uv loop still has handles\n");
    ok = false;
  }
  return ok ? 0 : 1;
}
