/* duration.h: parsing the command line's durations ("250ms", "30s", "5m"). */
#ifndef DLOCK_CLI_DURATION_H
#define DLOCK_CLI_DURATION_H

#include <stdint.h>

/* The longest duration accepted: 366 days. */
#define DLOCK_DURATION_MAX_MS (366LL * 24 * 3600 * 1000)

/* Parses a duration: a number (decimals allowed) followed by ms, s, m or h,
 * or a bare number of seconds. Returns 0 and stores milliseconds (rounded
 * up to a whole ms) in *ms, or -1 for anything else (empty, negative, NaN,
 * trailing text, over DLOCK_DURATION_MAX_MS). */
int dl_parse_duration(const char *s, int64_t *ms);

#endif
