/* metrics.c: dlock metrics: the snapshot of observe.c as Prometheus text
 * exposition (format 0.0.4), printed once or served on /metrics over HTTP
 * (metrics_http.c). */
#include "metrics.h"

#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One metric family: a gauge per object of the kinds it applies to. */
typedef struct family {
  const char *name, *help;
  /* Whether o has this metric, and its value in *v. */
  bool (*get)(const obs_obj *o, double *v);
} family;

static bool is_lock(const obs_obj *o) {
  return OBS_LOCKISH(o->kind);
}
static bool g_held(const obs_obj *o, double *v) {
  *v = o->st.held;
  return is_lock(o);
}
static bool g_holders(const obs_obj *o, double *v) {
  *v = o->st.held ? o->st.holders : 0;
  return is_lock(o);
}
static bool g_waiters(const obs_obj *o, double *v) {
  *v = o->st.waiters;
  return is_lock(o);
}
static bool g_queued(const obs_obj *o, double *v) {
  *v = o->st.queued;
  return is_lock(o);
}
static bool g_lease(const obs_obj *o, double *v) {
  *v = (double)o->st.ttl_ms / 1000;
  return is_lock(o) && o->st.held && o->st.ttl_ms >= 0;
}
static bool g_held_for(const obs_obj *o, double *v) {
  *v = (double)o->st.held_ms / 1000;
  return is_lock(o) && o->st.held && o->st.held_ms >= 0;
}
static bool g_token(const obs_obj *o, double *v) {
  *v = (double)o->st.token;
  return is_lock(o);
}
static bool g_readers(const obs_obj *o, double *v) {
  *v = o->st.readers;
  return o->kind == OBS_RWLOCK;
}
static bool g_permits(const obs_obj *o, double *v) {
  *v = (double)o->st.counter;
  return o->kind == OBS_SEMAPHORE && o->st.counter >= 0;
}
static bool g_taken(const obs_obj *o, double *v) {
  *v = o->st.permits_taken;
  return o->kind == OBS_SEMAPHORE &&
         (o->st.counter >= 0 || o->st.permits_taken > 0);
}
static bool g_latch(const obs_obj *o, double *v) {
  *v = (double)o->st.counter;
  return o->kind == OBS_LATCH && o->st.counter >= 0;
}
static bool g_depth(const obs_obj *o, double *v) {
  *v = (double)o->depth;
  return o->kind == OBS_QUEUE && o->depth >= 0;
}

static const family families[] = {
    {"dlock_lock_held", "1 if an owner holds the lock, else 0.", g_held},
    {"dlock_lock_holders",
     "Owners holding the lock (a read-write lock's readers count each).",
     g_holders},
    {"dlock_lock_waiters",
     "Processes waiting for the lock, as far as the "
     "backend can tell.",
     g_waiters},
    {"dlock_lock_queued",
     "Waiters queued in line (a fair lock's queue, the "
     "hand-off queue, the nodes behind the holder).",
     g_queued},
    {"dlock_lock_lease_remaining_seconds",
     "Lease left on the lock (absent: free, or no lease, as on zk://).",
     g_lease},
    {"dlock_lock_held_seconds",
     "How long the holder has held the lock "
     "(absent: unknown).",
     g_held_for},
    {"dlock_lock_fencing_token",
     "The last fencing token issued for the "
     "lock (0: none yet).",
     g_token},
    {"dlock_rwlock_readers", "Owners holding a read-write lock's read lock.",
     g_readers},
    {"dlock_semaphore_permits_available",
     "Permits free (a count-down latch's count looks the same on Redis).",
     g_permits},
    {"dlock_semaphore_permits_taken",
     "Permits out with leases (a permit-expirable semaphore).", g_taken},
    {"dlock_latch_remaining", "A count-down latch's count.", g_latch},
    {"dlock_queue_depth", "Values ready in the queue.", g_depth},
};

/* A label value, escaped as the text format says (\\, \", \n). */
static void label_value(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '\\')
      fputs("\\\\", f);
    else if (*s == '"')
      fputs("\\\"", f);
    else if (*s == '\n')
      fputs("\\n", f);
    else
      fputc(*s, f);
  }
}

/* A value as the text format takes it: integers as integers, else
 * seconds to the millisecond the backends tell. */
static void value(FILE *f, double v) {
  if (v == (double)(long long)v)
    fprintf(f, "%lld\n", (long long)v);
  else
    fprintf(f, "%.3f\n", v);
}

void metrics_write(FILE *f, const obs_snap *s, const char *backend) {
  for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
    const family *m = &families[i];
    bool any = false;
    for (size_t j = 0; j < s->n; j++) {
      double v;
      if (!m->get(&s->v[j], &v)) continue;
      if (!any)
        fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n", m->name, m->help,
                m->name);
      any = true;
      fprintf(f, "%s{name=\"", m->name);
      label_value(f, s->v[j].name);
      fprintf(f, "\",kind=\"%s\",backend=\"%s\"} ", obs_kind_name(s->v[j].kind),
              backend);
      value(f, v);
    }
  }
  fprintf(f,
          "# HELP dlock_objects Objects shown (matching the pattern, or "
          "named).\n# TYPE dlock_objects gauge\n"
          "dlock_objects{backend=\"%s\"} %zu\n",
          backend, s->n);
  fprintf(f,
          "# HELP dlock_up 1 if the snapshot was read whole, 0 if the "
          "server failed it.\n# TYPE dlock_up gauge\n"
          "dlock_up{backend=\"%s\"} %d\n",
          backend, s->err == 0);
  fprintf(f,
          "# HELP dlock_scrape_duration_seconds How long reading the "
          "snapshot took.\n# TYPE dlock_scrape_duration_seconds gauge\n"
          "dlock_scrape_duration_seconds{backend=\"%s\"} ",
          backend);
  value(f, (double)s->took_ms / 1000);
}

static const char *usage_text =
    "usage: dlock metrics [--listen ADDR:PORT] [--latch NAME] [--queue NAME]\n"
    "                     [--semaphore NAME] [--election NAME] [PATTERN]\n"
    "Prints the state of every lock, read-write lock and semaphore whose "
    "name\nmatches PATTERN (a glob, default *; on zk:// a path such as "
    "'/locks/*') as\nPrometheus text exposition: one gauge per fact "
    "(dlock_lock_held,\ndlock_lock_waiters, dlock_lock_lease_remaining_"
    "seconds, ...), labelled with\nthe object's name, kind and backend. "
    "See docs/OBSERVABILITY.md.\n"
    "  --latch NAME      also a count-down latch (the scan cannot tell one "
    "from a\n                    semaphore), --semaphore NAME a semaphore, "
    "--queue NAME a\n                    queue's depth, --election NAME an "
    "election; each may\n                    repeat\n"
    "  -l, --listen ADDR:PORT\n"
    "                    serve it on http://ADDR:PORT/metrics instead, a "
    "fresh\n                    snapshot per request, until SIGINT or "
    "SIGTERM (port 0:\n                    any free port, said on stderr)"
    "%s\n"
    "Exit status: 0 printed, 69 server trouble, 64 usage.\n";

int cmd_metrics(int argc, char **argv, cli_global *g) {
  static const struct option longopts[] = {
      CLI_GLOBAL_LONGOPTS,
      {"listen", required_argument, 0, 'l'},
      OBS_NAMED_LONGOPTS,
      {0, 0, 0, 0}};
  const char *listen = NULL;
  obs_named *named = NULL;
  size_t n = 0;
  int opt, rc = 0;
  while ((opt = getopt_long(argc, argv, CLI_GLOBAL_SHORTOPTS "l:", longopts,
                            NULL)) != -1) {
    if (opt == 'h') {
      printf(usage_text, metrics_http_built
                             ? ""
                             : "\n                    (not in this build: "
                               "it was built without libmicrohttpd)");
      goto out;
    }
    int r = obs_named_opt(opt, optarg, &named, &n);
    if (r < 0) {
      rc = EXIT_UNAVAILABLE;
      goto out;
    }
    if (r > 0) continue;
    if (opt == 'l')
      listen = optarg;
    else if (opt == '?') {
      cli_err("unknown option '%s' (see dlock metrics --help)",
              argv[optind - 1]);
      rc = EXIT_USAGE;
      goto out;
    } else if (cli_global_opt(g, opt, optarg) < 0) {
      rc = EXIT_USAGE;
      goto out;
    }
  }
  if (argc - optind > 1) {
    cli_err("usage: dlock metrics [--listen ADDR:PORT] [PATTERN]");
    rc = EXIT_USAGE;
    goto out;
  }
  if (listen && !metrics_http_built) {
    cli_err("--listen: this dlock was built without libmicrohttpd "
            "(libmicrohttpd-dev)");
    rc = EXIT_USAGE;
    goto out;
  }
  if (listen) { /* before the client's threads start: they inherit it */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
  }
  dlock_client *c = cli_open(g, 0, &rc);
  if (c == NULL) goto out;
  metrics_src src = {c, optind < argc ? argv[optind] : NULL, named, n,
                     obs_backend(g->url)};
  if (listen) {
    rc = metrics_serve(&src, listen, g->verbose);
  } else {
    obs_snap s = {0};
    int e = obs_collect(c, src.pattern, named, n, &s);
    if (e != 0) {
      cli_err("%s", s.errmsg);
      rc = cli_exit_for(e);
    } else {
      metrics_write(stdout, &s, src.backend);
    }
    obs_snap_clear(&s);
  }
  dlock_client_close(c);
out:
  free(named);
  return rc;
}
