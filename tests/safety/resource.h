/* resource.h: the protected resource of the safety suite, a fenced counter
 * served on a unix socket, and the checkers run over what it logged.
 *
 * Workers increment the counter with a non-atomic read-modify-write, each
 * step carrying the fencing token of the lock they believe they hold:
 *   R <id> <token> <pid>               -> "OK <value>", "REJ" or "STOP"
 *   W <id> <token> <value>             -> "OK" or "REJ"
 *   S <id> <token> <start> <acq> <rel> -> "OK"  (a critical section, in
 *                                          CLOCK_MONOTONIC microseconds)
 *   V <id> <lost> <callback> <release> <held_after> -> "OK" (a victim's view)
 *   P <id>                             -> "OK" or "STOP"
 * When enforcing, a read or write whose token is below the highest token seen
 * is rejected, and a read raises the highest token, so a holder whose lock
 * passed to someone else can no longer write. When not enforcing (the positive
 * control), everything is accepted and a stale write is counted. */
#ifndef DLOCK_SAFETY_RESOURCE_H
#define DLOCK_SAFETY_RESOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct res_event {
  char type; /* 'R', 'W' */
  int id;
  uint64_t token;
  pid_t pid;    /* R only */
  bool ok;      /* accepted */
  int64_t t_us; /* when the resource saw it */
} res_event;

typedef struct res_section {
  int id;
  uint64_t token;
  int64_t start_us, acq_us, rel_us;
} res_section;

typedef struct res_victim {
  bool reported;
  int lost;       /* dlock_lock_is_lost before its last write */
  int callback;   /* the lost callback ran */
  int release;    /* what dlock_lock_release returned */
  int held_after; /* the server still listed it as holder after the loss */
} res_victim;

typedef struct res_verdict {
  long long value;
  long accepted, rejected, stale_accepted;
  size_t sections;
  int overlaps;           /* believed critical sections that overlap */
  int overlaps_excluding; /* the same, leaving out one worker's sections */
  int token_errors;       /* a later grant with a lower or equal token */
  /* The first such pair found (when token_errors > 0): `first` was
   * acquired before `later` began to acquire, with a token at least as
   * high. */
  res_section first, later;
  int later_read; /* its read: 1 accepted, 0 rejected, -1 none logged */
} res_verdict;

/* Starts the resource thread on a socket in `dir`. Returns 0 or -1. */
int res_start(const char *dir);
void res_stop(void);
const char *res_path(void);
/* Clears every count and log, sets the mode and lets workers run. */
void res_reset(bool enforce);
/* From now on, reads and polls answer STOP. */
void res_halt(void);

/* The index one past the last event: a mark to wait for later events. */
size_t res_mark(void);
/* Waits until an event of `type` from worker `id` (-1: any worker;
 * -2: any worker but `not_id`) with `ok` if `need_ok`, at or after index
 * `from`. Returns true and copies it to *out (may be NULL). */
bool res_wait_event(char type, int id, int not_id, bool need_ok, size_t from,
                    int timeout_ms, res_event *out);
/* Waits for worker id's victim report. */
bool res_wait_victim(int id, int timeout_ms, res_victim *out);
/* The process of the latest accepted read: most likely the holder now. */
pid_t res_last_reader(void);
/* Accepted writes so far. */
long res_accepted(void);

/* Runs the checkers: the overlap sweep, count against accepted writes,
 * stale writes, and token order. `exclude` is a worker id left out of
 * overlaps_excluding (-1: none). */
void res_verdict_get(int exclude, res_verdict *v);
/* Prints the offending pair of a verdict with token errors to stderr
 * (nothing if there are none), so that a failure explains itself. */
void res_verdict_explain(const res_verdict *v);

#endif
