/* samples.c: dlock bench's latency samples: appended, merged, sorted, read
 * at a quantile. */
#include "bench.h"

#include <stdlib.h>

void bench_samples_push(bench_samples *s, int64_t us) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 4096;
    uint32_t *v = realloc(s->v, cap * sizeof *v);
    if (v == NULL) return; /* drop the sample rather than fail the run */
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = us < 0 ? 0 : us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

void bench_samples_merge(bench_samples *into, const bench_samples *from) {
  for (size_t i = 0; i < from->n; i++) bench_samples_push(into, from->v[i]);
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

void bench_samples_sort(bench_samples *s) {
  if (s->n) qsort(s->v, s->n, sizeof *s->v, cmp_u32);
}

double bench_samples_pct(const bench_samples *s, double p) {
  if (s->n == 0) return 0;
  size_t i = (size_t)(p * (double)s->n);
  if (i >= s->n) i = s->n - 1;
  return s->v[i];
}
