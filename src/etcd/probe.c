/* probe.c: the benchmark's view of the etcd backend (probe.h): the
 * server's limits over the backend's own calls (dl_etcd_call: gRPC's
 * unary calls by grpc.c, or the gateway's), on scratch keys of its own. */
#include "probe.h"

#include "etcdb.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define B64(n) (4 * (((n) + 2) / 3) + 1)

struct dl_etcd_probe {
  dl_etcd *e;
  dl_backend_env env; /* e keeps a pointer to it */
  atomic_int closing;
  int64_t lease;
  char base[ETCD_KEY_MAX / 2]; /* prefix + "dlock-bench-probe/<pid>/" */
};

/* The scratch keys' lease: long enough for any run, revoked at close. */
#define PROBE_LEASE_S 60

int dl_etcd_probe_open(const dlock_client_options *opts, dl_etcd_probe **out) {
  *out = NULL;
  if (opts->connect_timeout_ms <= 0 || opts->command_timeout_ms <= 0)
    return dl_seterr(NULL, DLOCK_EINVAL,
                     "the probe's timeouts must be positive (options from "
                     "dlock_client_options_init)");
  dl_etcd_probe *p = calloc(1, sizeof *p);
  if (p == NULL) return dl_seterr(NULL, DLOCK_ENOMEM, "out of memory");
  p->env.client_id = "dlock-bench-probe";
  p->env.key_prefix = "";
  p->env.closing = &p->closing;
  p->env.command_timeout_ms = opts->command_timeout_ms;
  dl_backend *b = NULL;
  int rc = dl_etcd_backend_new(opts, &p->env, &b);
  if (rc != 0) {
    free(p);
    return rc;
  }
  p->e = (dl_etcd *)b;
  atomic_store(&p->e->current, 0); /* the URL's first endpoint */
  if (strlen(p->e->prefix) + 64 > sizeof p->base) {
    dl_etcd_probe_close(p);
    return dl_seterr(NULL, DLOCK_ENAMETOOLONG, "etcd prefix too long");
  }
  snprintf(p->base, sizeof p->base, "%sdlock-bench-probe/%d/", p->e->prefix,
           (int)getpid());
  int64_t got = 0;
  rc = dl_etcd_grant(p->e, PROBE_LEASE_S,
                     dl_now_ms() + p->env.command_timeout_ms, &p->lease, &got);
  if (rc != 0) {
    p->lease = 0;
    dl_etcd_probe_close(p);
    return rc;
  }
  *out = p;
  return 0;
}

void dl_etcd_probe_close(dl_etcd_probe *p) {
  if (p == NULL) return;
  if (p->lease)
    dl_etcd_revoke(p->e, p->lease, dl_now_ms() + p->env.command_timeout_ms);
  p->e->base.ops->free(&p->e->base);
  free(p);
}

/* One txn (the body's JSON): 1 succeeded (*rev: the header's revision),
 * 0 not, -1 a failed call. */
static int txn(dl_etcd_probe *p, const char *body, int64_t *rev) {
  json_object *r = NULL;
  if (dl_etcd_call(p->e, "/v3/kv/txn", body,
                   dl_now_ms() + p->env.command_timeout_ms, &r, NULL) != 0)
    return -1;
  json_object *s = dl_etcd_get(r, "succeeded");
  int ok = s && json_object_get_boolean(s);
  if (rev) *rev = dl_etcd_i64(dl_etcd_get(r, "header"), "revision");
  json_object_put(r);
  return ok;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

double dl_etcd_probe_write_rtt_p50_us(dl_etcd_probe *p, int n, int64_t ms) {
  char key[sizeof p->base + 8], k64[B64(sizeof key)], body[sizeof k64 + 256];
  snprintf(key, sizeof key, "%srtt", p->base);
  dl_etcd_b64(key, strlen(key), k64);
  /* A txn with no compare putting the key (succeeded: always). */
  snprintf(body, sizeof body,
           "{\"success\":[{\"request_put\":{\"key\":\"%s\",\"value\":\"\","
           "\"lease\":\"%" PRId64 "\"}}]}",
           k64, p->lease);
  int64_t *v = n > 0 ? malloc((size_t)n * sizeof *v) : NULL;
  if (v == NULL) return 0;
  int got = 0;
  int64_t end = dl_now_ms() + ms;
  bool bad = false;
  while (got < n && !bad && dl_now_ms() < end) {
    int64_t t0 = dl_now_us();
    bad = txn(p, body, NULL) != 1;
    v[got++] = dl_now_us() - t0;
  }
  double p50 = 0;
  if (!bad && got > 0) {
    qsort(v, (size_t)got, sizeof *v, cmp_i64);
    p50 = (double)v[got / 2];
  }
  free(v);
  /* The key goes with the lease; deleted now too. */
  snprintf(body, sizeof body, "{\"key\":\"%s\"}", k64);
  json_object *r = NULL;
  if (dl_etcd_call(p->e, "/v3/kv/deleterange", body,
                   dl_now_ms() + p->env.command_timeout_ms, &r, NULL) == 0)
    json_object_put(r);
  return p50;
}

/* One thread's share of dl_etcd_probe_cycles. */
typedef struct cycler {
  dl_etcd_probe *p;
  int id;
  int64_t end; /* ms */
  long cycles; /* -1: a call failed or a txn did not succeed */
} cycler;

static void *cycle_thread(void *arg) {
  cycler *c = arg;
  dl_etcd_probe *p = c->p;
  /* The mutex's layout: the lock's prefix, the key under it in the
   * lease's hex (mutex.c). */
  char pfx[sizeof p->base + 16], key[sizeof pfx + 17];
  char p64[B64(sizeof pfx)], end64[B64(sizeof pfx)], k64[B64(sizeof key)];
  snprintf(pfx, sizeof pfx, "%sc%d/", p->base, c->id);
  snprintf(key, sizeof key, "%s%" PRIx64, pfx, (uint64_t)p->lease);
  dl_etcd_b64(pfx, strlen(pfx), p64);
  dl_etcd_prefix_end(pfx, end64);
  dl_etcd_b64(key, strlen(key), k64);
  char owner[sizeof p64 + sizeof end64 + 256];
  snprintf(owner, sizeof owner,
           "{\"request_range\":{\"key\":\"%s\",\"range_end\":\"%s\","
           "\"limit\":\"1\",\"sort_order\":\"ASCEND\","
           "\"sort_target\":\"CREATE\",\"keys_only\":true}}",
           p64, end64);
  size_t n = 2 * sizeof owner + 3 * sizeof k64 + 512;
  char *acq = malloc(n), *rel = malloc(n);
  c->cycles = acq && rel ? 0 : -1;
  if (acq && rel)
    snprintf(acq, n,
             "{\"compare\":[{\"target\":\"CREATE\",\"key\":\"%s\","
             "\"create_revision\":\"0\"}],\"success\":[{\"request_put\":{"
             "\"key\":\"%s\",\"value\":\"\",\"lease\":\"%" PRId64
             "\"}},%s],\"failure\":[{\"request_range\":{\"key\":\"%s\"}},%s]}",
             k64, k64, p->lease, owner, k64, owner);
  while (c->cycles >= 0 && dl_now_ms() < c->end) {
    int64_t rev = 0;
    if (txn(p, acq, &rev) != 1) {
      c->cycles = -1;
      break;
    }
    snprintf(rel, n,
             "{\"compare\":[{\"target\":\"CREATE\",\"key\":\"%s\","
             "\"create_revision\":\"%" PRId64 "\"}],\"success\":[{"
             "\"request_delete_range\":{\"key\":\"%s\"}}],\"failure\":[]}",
             k64, rev, k64);
    if (txn(p, rel, NULL) != 1)
      c->cycles = -1;
    else
      c->cycles++;
  }
  free(acq);
  free(rel);
  return NULL;
}

double dl_etcd_probe_cycles(dl_etcd_probe *p, int threads, int64_t ms) {
  if (threads < 1 || threads > DL_ETCD_PROBE_THREADS) return 0;
  cycler c[DL_ETCD_PROBE_THREADS];
  pthread_t th[DL_ETCD_PROBE_THREADS];
  int64_t t0 = dl_now_ms();
  int started = 0;
  for (; started < threads; started++) {
    c[started] = (cycler){.p = p, .id = started, .end = t0 + ms};
    if (pthread_create(&th[started], NULL, cycle_thread, &c[started]) != 0)
      break;
  }
  long sum = 0;
  bool bad = started < threads;
  for (int i = 0; i < started; i++) {
    pthread_join(th[i], NULL);
    bad = bad || c[i].cycles < 0;
    sum += c[i].cycles;
  }
  int64_t took = dl_now_ms() - t0;
  if (bad || took <= 0) return 0;
  return (double)sum * 1000.0 / (double)took;
}

double dl_etcd_probe_cpu_us(dl_etcd_probe *p) {
  dl_etcd *e = p->e;
  CURL *h = dl_etcd_handle(e);
  struct curl_slist *hd = h ? dl_etcd_headers(e, NULL) : NULL;
  if (hd == NULL) {
    dl_etcd_handle_put(e, h);
    return -1;
  }
  char url[512];
  snprintf(url, sizeof url, "%s/metrics", e->endpoints[0]);
  etcd_buf b = {0};
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
  dl_etcd_setopts(e, h, hd, e->connect_timeout_ms);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)p->env.command_timeout_ms);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, dl_etcd_buf_write);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
  CURLcode cc = curl_easy_perform(h);
  long status = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  dl_etcd_handle_put(e, h);
  dl_etcd_headers_free(e, hd);
  double v = -1;
  static const char name[] = "\nprocess_cpu_seconds_total ";
  const char *at =
      cc == CURLE_OK && status == 200 && b.p ? strstr(b.p, name) : NULL;
  if (at) v = strtod(at + sizeof name - 1, NULL) * 1e6;
  free(b.p);
  return v;
}
