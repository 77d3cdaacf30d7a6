/* redisson.h: Redisson's lock cycle (RFencedLock's lock, the unlock with
 * its idempotence latch, the latch's DEL), the baseline dlock bench and
 * the cost gate (tests/test_cost.sh) measure beside dlock's own. */
#ifndef DLOCK_CLI_BENCH_REDISSON_H
#define DLOCK_CLI_BENCH_REDISSON_H

#include <stdint.h>

struct redisContext;

/* The two scripts' bodies (redisson.c says what each runs). */
extern const char bench_redisson_lock_lua[];
extern const char bench_redisson_unlock_lua[];

/* SCRIPT LOADs both on c and stores their SHA1s (40 hex digits and a
 * NUL). Returns 0, or -1 if the server did not take them. */
int bench_redisson_load(struct redisContext *c, char lock_sha[41],
                        char unlock_sha[41]);
/* Formats one cycle on the lock `key` (at most 100 bytes), as the three
 * commands Redisson sends (EVALSHA lock, EVALSHA unlock, DEL latch), into
 * *out (the caller frees it). Returns its length, or -1 out of memory. */
int bench_redisson_format(char **out, const char *lock_sha,
                          const char *unlock_sha, const char *key);
/* Redisson's cycles pipelined on c, 256 at a time, for `ms` (keys of their
 * own, "bench:redisson:N"): cycles per second, and the server's CPU time
 * per cycle in us through cpu_us_per_cycle (if not NULL). 0 on any error
 * or a reply that is not a taken lock, a freed lock and a deleted latch. */
double bench_redisson_ceiling_ops(struct redisContext *c, int64_t ms,
                                  double *cpu_us_per_cycle);

#endif
