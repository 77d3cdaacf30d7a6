/* names.c: Redisson's names for the keys and channels beside an object's
 * key, each in the object's cluster slot (its hash tag, or the key itself
 * wrapped in one). */
#include "ops.h"

#include <string.h>

/* Joins parts into out (len bytes), cut to fit; as snprintf without its
 * cost on the lock's hot path. */
static void join(char *out, size_t len, const char *const *parts, int n) {
  size_t off = 0;
  if (len == 0) return;
  for (int i = 0; i < n; i++) {
    size_t m = strlen(parts[i]);
    if (m > len - 1 - off) m = len - 1 - off;
    memcpy(out + off, parts[i], m);
    off += m;
  }
  out[off] = '\0';
}

void dl_derived_into(char *out, size_t len, const char *prefix,
                     const char *key) {
  bool tagged = strchr(key, '{') != NULL;
  const char *parts[] = {prefix, tagged ? ":" : ":{", key, tagged ? "" : "}"};
  join(out, len, parts, 4);
}

void dl_derived_suffix_into(char *out, size_t len, const char *key,
                            const char *suffix) {
  bool tagged = strchr(key, '{') != NULL;
  const char *parts[] = {tagged ? "" : "{", key, tagged ? ":" : "}:", suffix};
  join(out, len, parts, 4);
}
