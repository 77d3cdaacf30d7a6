/* clockshift.c: an LD_PRELOAD shim that steps a process's wall clock
 * (CLOCK_REALTIME, gettimeofday, time) by an offset the test changes while
 * the process runs; the monotonic clocks are left alone.
 *
 * Why not libfaketime: Debian's redis-server is built with jemalloc, which
 * calls clock_gettime while libfaketime initialises, and libfaketime then
 * fails every call (libfaketime #130, #327: known, unfixed). So the server's
 * clock is stepped with this shim, and the clients' with libfaketime.
 *
 * DLOCK_CLOCKSHIFT_FILE names a file holding the offset in seconds as 8
 * bytes (int64_t, host order); it is mapped once and read at every call.
 * Built without sanitizers: it is loaded into redis-server. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile const int64_t *offset;
static int tried;

static int64_t shift(void) {
  if (!__atomic_load_n(&tried, __ATOMIC_ACQUIRE)) {
    const char *path = getenv("DLOCK_CLOCKSHIFT_FILE");
    int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd >= 0) {
      void *p = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) offset = p;
      close(fd);
    }
    __atomic_store_n(&tried, 1, __ATOMIC_RELEASE);
  }
  return offset ? *offset : 0;
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
  long rc = syscall(SYS_clock_gettime, clk, ts);
  if (rc == 0 && (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE))
    ts->tv_sec += shift();
  return (int)rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
  struct timespec ts;
  int rc = clock_gettime(CLOCK_REALTIME, &ts);
  if (rc == 0) { /* glibc declares tv non-null */
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
  }
  (void)tz;
  return rc;
}

time_t time(time_t *t) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (t) *t = ts.tv_sec;
  return ts.tv_sec;
}
