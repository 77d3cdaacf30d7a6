/* metrics.c: dlock_metrics, the client's own counters and histograms
 * (docs/OBSERVABILITY.md), and their Prometheus text; the event hook. */
#include "client.h"

#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* DLOCK_METRICS_BOUNDS in microseconds. */
static const int64_t bound_us[DLOCK_METRICS_BUCKETS - 1] = {
    1000, 5000, 10000, 50000, 100000, 500000, 1000000, 5000000, 10000000};

void dl_hist_add(dl_hist *h, int64_t us) {
  if (us < 0) us = 0;
  int i = 0;
  while (i < DLOCK_METRICS_BUCKETS - 1 && us > bound_us[i])
    i++;
  atomic_fetch_add_explicit(&h->n[i], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&h->sum_us, (uint_fast64_t)us,
                            memory_order_relaxed);
}

/* Cumulative, and count as the +Inf bucket: consistent with itself even
 * while samples come in (the sum may be a sample ahead or behind). */
static void hist_read(dl_hist *h, dlock_histogram *out) {
  uint64_t total = 0;
  for (int i = 0; i < DLOCK_METRICS_BUCKETS; i++) {
    total += atomic_load_explicit(&h->n[i], memory_order_relaxed);
    out->bucket[i] = total;
  }
  out->count = total;
  out->sum =
      (double)atomic_load_explicit(&h->sum_us, memory_order_relaxed) / 1e6;
}

int dlock_client_metrics_size(dlock_client *c, dlock_metrics *m, size_t size) {
  if (c == NULL) return DLOCK_EINVAL;
  if (m == NULL || size == 0)
    return dl_seterr(c, DLOCK_EINVAL, "no metrics to fill (m NULL or size 0)");
  dlock_metrics all = {0};
  all.acquisitions = atomic_load_explicit(&c->acquired, memory_order_relaxed);
  all.contended_acquisitions =
      atomic_load_explicit(&c->contended, memory_order_relaxed);
  all.reconnects = atomic_load_explicit(&c->reconnects, memory_order_relaxed);
  dl_watchdog_metrics(c->watchdog, &all);
  hist_read(&c->wait_hist, &all.wait_seconds);
  hist_read(&c->hold_hist, &all.hold_seconds);
  memcpy(m, &all, size < sizeof all ? size : sizeof all);
  return 0;
}

/* ---- dlock_client_on_event ---- */

int dlock_client_on_event(dlock_client *c, dlock_event_cb cb, void *ud) {
  if (c == NULL) return DLOCK_EINVAL;
  pthread_mutex_lock(&c->holds_mu);
  c->event_cb = cb;
  c->event_ud = ud;
  atomic_store_explicit(&c->events, cb != NULL, memory_order_relaxed);
  pthread_mutex_unlock(&c->holds_mu);
  return 0;
}

static int64_t ns_of(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void dl_event_emit(dlock_client *c, dlock_event *ev) {
  pthread_mutex_lock(&c->holds_mu);
  dlock_event_cb cb = c->event_cb;
  void *ud = c->event_ud;
  pthread_mutex_unlock(&c->holds_mu);
  if (cb == NULL) return;
  ev->size = sizeof *ev;
  ev->backend = c->backend->ops->name;
  ev->mono_ns = ns_of(CLOCK_MONOTONIC);
  ev->wall_ns = ns_of(CLOCK_REALTIME);
  cb(c, ev, ud);
}

/* ---- dlock_metrics_format ---- */

typedef struct out {
  char *buf;
  size_t len, n; /* n: the whole text's length so far */
  const char *p, *labels;
} out;

static void put(out *o, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = o->n < o->len ? o->len - o->n : 0;
  int k = vsnprintf(room ? o->buf + o->n : NULL, room, fmt, ap);
  va_end(ap);
  if (k > 0) o->n += (size_t)k;
}

static void family(out *o, const char *name, const char *type,
                   const char *help) {
  put(o, "# HELP %s_%s %s\n# TYPE %s_%s %s\n", o->p, name, help, o->p, name,
      type);
}

/* One sample: name{labels[,extra]} value. */
static void sample(out *o, const char *name, const char *extra,
                   const char *value) {
  const char *l = o->labels;
  if (!*l && !*extra)
    put(o, "%s_%s %s\n", o->p, name, value);
  else
    put(o, "%s_%s{%s%s%s} %s\n", o->p, name, l, *l && *extra ? "," : "", extra,
        value);
}

static void counter(out *o, const char *name, const char *help, uint64_t v) {
  char val[32];
  snprintf(val, sizeof val, "%" PRIu64, v);
  family(o, name, "counter", help);
  sample(o, name, "", val);
}

static void histogram(out *o, const char *name, const char *help,
                      const dlock_histogram *h) {
  static const double bounds[] = DLOCK_METRICS_BOUNDS;
  char n[64], le[32], val[40];
  family(o, name, "histogram", help);
  snprintf(n, sizeof n, "%s_bucket", name);
  for (int i = 0; i < DLOCK_METRICS_BUCKETS; i++) {
    if (i < DLOCK_METRICS_BUCKETS - 1)
      snprintf(le, sizeof le, "le=\"%g\"", bounds[i]);
    else
      snprintf(le, sizeof le, "le=\"+Inf\"");
    snprintf(val, sizeof val, "%" PRIu64, h->bucket[i]);
    sample(o, n, le, val);
  }
  snprintf(n, sizeof n, "%s_sum", name);
  snprintf(val, sizeof val, "%.9g", h->sum);
  sample(o, n, "", val);
  snprintf(n, sizeof n, "%s_count", name);
  snprintf(val, sizeof val, "%" PRIu64, h->count);
  sample(o, n, "", val);
}

static bool metric_name(const char *s) {
  if (!*s || (*s >= '0' && *s <= '9')) return false;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
          (*s >= '0' && *s <= '9') || *s == '_' || *s == ':'))
      return false;
  return true;
}

int dlock_metrics_format(const dlock_metrics *m, const char *prefix,
                         const char *labels, char *buf, size_t len) {
  if (prefix == NULL) prefix = "dlock";
  if (m == NULL || (buf == NULL && len > 0) || !metric_name(prefix))
    return DLOCK_EINVAL;
  out o = {buf, len, 0, prefix, labels ? labels : ""};
  if (len > 0) buf[0] = '\0';
  counter(&o, "acquisitions_total",
          "Locks taken through this client (first acquisitions).",
          m->acquisitions);
  counter(&o, "contended_acquisitions_total",
          "Of those, taken after waiting for another holder.",
          m->contended_acquisitions);
  family(&o, "lost_total", "counter", "Holds lost, by cause.");
  char val[32];
  snprintf(val, sizeof val, "%" PRIu64, m->lost_expired);
  sample(&o, "lost_total", "cause=\"expired\"", val);
  snprintf(val, sizeof val, "%" PRIu64, m->lost_taken);
  sample(&o, "lost_total", "cause=\"taken\"", val);
  counter(&o, "renewals_total", "Leases the watchdog extended.", m->renewals);
  counter(&o, "failed_renewals_total", "Hold renewals that got no answer.",
          m->failed_renewals);
  counter(&o, "reconnects_total", "Connections made again after they broke.",
          m->reconnects);
  histogram(&o, "wait_seconds",
            "From an acquire call to its grant, for the acquisitions.",
            &m->wait_seconds);
  histogram(&o, "hold_seconds", "From a grant to the last release or the loss.",
            &m->hold_seconds);
  return o.n > INT_MAX ? DLOCK_EINVAL : (int)o.n;
}
