/* duration.c: parses "250ms", "30s", "5m", "1h", "1.5s" or bare seconds. */
#include "duration.h"

#include <ctype.h>
#include <string.h>

int dl_parse_duration(const char *s, int64_t *ms) {
  if (s == NULL || *s == '\0') return -1;
  /* Integer and fraction parts by hand: no locale, no strtod surprises
   * ("inf", "1e9", hex). */
  int64_t whole = 0, frac = 0, frac_div = 1;
  const char *p = s;
  int digits = 0;
  while (isdigit((unsigned char)*p)) {
    if (whole > DLOCK_DURATION_MAX_MS) return -1;
    whole = whole * 10 + (*p++ - '0');
    digits++;
  }
  if (*p == '.') {
    p++;
    while (isdigit((unsigned char)*p)) {
      if (frac_div < 1000000000) {
        frac = frac * 10 + (*p - '0');
        frac_div *= 10;
      }
      p++;
      digits++;
    }
  }
  if (digits == 0) return -1;
  int64_t unit;
  if (strcmp(p, "ms") == 0) unit = 1;
  else if (strcmp(p, "s") == 0 || *p == '\0') unit = 1000;
  else if (strcmp(p, "m") == 0) unit = 60 * 1000;
  else if (strcmp(p, "h") == 0) unit = 3600 * 1000;
  else return -1;
  if (whole > DLOCK_DURATION_MAX_MS / unit) return -1;
  int64_t total = whole * unit;
  /* frac/frac_div of a unit, rounded up to a whole ms. */
  int64_t f = (frac * unit + frac_div - 1) / frac_div;
  total += f;
  if (total > DLOCK_DURATION_MAX_MS) return -1;
  *ms = total;
  return 0;
}
