/* fenced.c: the text form of a fenced resource where the store keeps one
 * value (a znode's data, an etcd key's value): "dlock-fence <fence>\n" and
 * then the value's bytes (docs/WIRE.md). */
#include "core.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAGIC "dlock-fence "

char *dl_fenced_pack(uint64_t fence, const void *value, size_t vlen,
                     size_t *len) {
  char head[48];
  int hl = snprintf(head, sizeof head, MAGIC "%" PRIu64 "\n", fence);
  if (vlen > SIZE_MAX / 2) return NULL;
  char *out = malloc((size_t)hl + vlen + 1);
  if (out == NULL) return NULL;
  memcpy(out, head, (size_t)hl);
  if (vlen) memcpy(out + hl, value, vlen);
  out[hl + vlen] = '\0';
  *len = (size_t)hl + vlen;
  return out;
}

long dl_fenced_unpack(const char *data, size_t len, uint64_t *fence) {
  size_t m = strlen(MAGIC);
  const char *nl = data ? memchr(data, '\n', len) : NULL;
  if (nl == NULL || len <= m || memcmp(data, MAGIC, m) != 0 || data[m] < '1' ||
      data[m] > '9' || nl - data - m > 20)
    return -1;
  char digits[24], *end;
  memcpy(digits, data + m, (size_t)(nl - data - m));
  digits[nl - data - m] = '\0';
  unsigned long long v = strtoull(digits, &end, 10);
  if (*end != '\0' ||
      (v == ULLONG_MAX && strcmp(digits, "18446744073709551615")))
    return -1;
  *fence = v;
  return nl + 1 - data;
}
