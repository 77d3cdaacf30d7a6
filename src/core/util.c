/* util.c: monotonic clocks, string copies and process-unique thread ids. */
#include "core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/rand.h>

int64_t dl_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t dl_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

char *dl_strdup(const char *s) {
  if (s == NULL) return NULL;
  size_t n = strlen(s) + 1;
  char *p = malloc(n);
  if (p) memcpy(p, s, n);
  return p;
}

/* Thread ids come from a counter, not gettid(): a kernel tid is reused once
 * its thread exits, and a new thread must never inherit a dead thread's
 * holds. */
static atomic_uint_fast64_t next_thread_id = 1;
static _Thread_local uint64_t my_thread_id;

uint64_t dl_thread_id(void) {
  if (my_thread_id == 0) my_thread_id = atomic_fetch_add(&next_thread_id, 1);
  return my_thread_id;
}

const char *dl_fmt_ll(char *buf, long long v) {
  char tmp[24];
  int n = 0;
  unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v
                               : (unsigned long long)v;
  do {
    tmp[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  char *p = buf;
  if (v < 0) *p++ = '-';
  while (n) *p++ = tmp[--n];
  *p = '\0';
  return buf;
}

void dl_abstime(int64_t deadline_ms, struct timespec *ts) {
  ts->tv_sec = (time_t)(deadline_ms / 1000);
  ts->tv_nsec = (long)(deadline_ms % 1000) * 1000000L;
}

int dl_cond_init(pthread_cond_t *cv) {
  pthread_condattr_t a;
  if (pthread_condattr_init(&a) != 0) return DLOCK_ENOMEM;
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  int rc = pthread_cond_init(cv, &a);
  pthread_condattr_destroy(&a);
  return rc == 0 ? 0 : DLOCK_ENOMEM;
}

int dl_random_bytes(unsigned char *buf, size_t len) {
  return RAND_bytes(buf, (int)len) == 1 ? 0 : DLOCK_ENOMEM;
}

uint32_t dl_hash(uint32_t h, const char *s) {
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

void dl_sleep_ms(int64_t ms) {
  if (ms <= 0) return;
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

int64_t dl_validity(int64_t sent, int64_t lease_ms) {
  /* Redlock's allowance for clocks that run at different rates; a lease
   * past the clock's range is valid for ever (no overflow). */
  int64_t d = lease_ms - (lease_ms / 100 + 2);
  return d > INT64_MAX - sent ? INT64_MAX : sent + d;
}

int64_t dl_ride_pause_ms(dl_ride *r, int64_t deadline,
                         int64_t command_timeout_ms) {
  int64_t now = dl_now_ms();
  if (r->n == 0) r->since = now;
  if (deadline == INT64_MAX &&
      now - r->since >= DL_RIDE_TIMEOUTS * command_timeout_ms)
    return 0;
  int64_t left = deadline - now;
  if (left <= 0) return 0;
  /* The pauses: 20, 40, 80, 160, then 200 ms each. */
  int64_t pause = (int64_t)20 << (r->n < 4 ? r->n : 4);
  if (pause > 200) pause = 200;
  if (r->n < 5) r->n++;
  return pause < left ? pause : left;
}

int dl_check_lease(const struct dlock_client *owner, const char *what,
                   int64_t lease_ms) {
  if (lease_ms <= DLOCK_LEASE_MAX_MS) return 0;
  return dl_seterr(owner, DLOCK_EINVAL,
                   "%s %lld ms is longer than the longest lease accepted, "
                   "DLOCK_LEASE_MAX_MS = %lld ms (about 285 years: etcd's "
                   "largest TTL, the shortest limit of the servers)",
                   what, (long long)lease_ms, (long long)DLOCK_LEASE_MAX_MS);
}

int dl_uuid4(char out[37]) {
  unsigned char b[16];
  if (dl_random_bytes(b, sizeof b) != 0) return DLOCK_ENOMEM;
  b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
  b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
  snprintf(out, 37,
           "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x"
           "%02x",
           b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10],
           b[11], b[12], b[13], b[14], b[15]);
  return 0;
}
