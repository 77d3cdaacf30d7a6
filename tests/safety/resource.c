/* resource.c: the fenced counter (see resource.h) and the checkers. */
#include "resource.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_CLIENTS 128
#define LINE_MAX_LEN 256

typedef struct client {
  int fd;
  char buf[LINE_MAX_LEN];
  size_t len;
} client;

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  int listen_fd;
  int wake[2];
  char path[100];
  bool enforce, halted, quit;
  long long value;
  uint64_t highest;
  long accepted, rejected, stale_accepted;
  res_event *events;
  size_t nevents, cap_events;
  res_section *secs;
  size_t nsecs, cap_secs;
  struct {
    int id;
    res_victim v;
  } victims[16];
  int nvictims;
} R = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void grow(void **arr, size_t *cap, size_t n, size_t size) {
  if (n < *cap) return;
  size_t c = *cap ? *cap * 2 : 1024;
  void *p = realloc(*arr, c * size);
  if (p == NULL) abort(); /* a test harness out of memory cannot go on */
  *arr = p;
  *cap = c;
}

static void log_event(char type, int id, uint64_t token, pid_t pid, bool ok) {
  grow((void **)&R.events, &R.cap_events, R.nevents, sizeof *R.events);
  R.events[R.nevents++] = (res_event){type, id, token, pid, ok, now_us()};
  pthread_cond_broadcast(&R.cv);
}

/* With R.mu held: handles one request line and writes the answer. */
static void handle(const char *line, char *out, size_t outlen) {
  int id;
  unsigned long long token, value;
  long long a, b, c;
  int pid, lost, cb, rel, held;
  snprintf(out, outlen, "ERR");
  if (sscanf(line, "R %d %llu %d", &id, &token, &pid) == 3) {
    if (R.halted) {
      snprintf(out, outlen, "STOP");
      return;
    }
    bool ok = !R.enforce || token >= R.highest;
    if (ok && token > R.highest) R.highest = token;
    log_event('R', id, token, pid, ok);
    if (ok)
      snprintf(out, outlen, "OK %lld", R.value);
    else
      snprintf(out, outlen, "REJ");
  } else if (sscanf(line, "W %d %llu %llu", &id, &token, &value) == 3) {
    bool stale = token < R.highest;
    bool ok = !R.enforce || !stale;
    if (ok) {
      if (stale) R.stale_accepted++;
      if (token > R.highest) R.highest = token;
      R.value = (long long)value;
      R.accepted++;
    } else {
      R.rejected++;
    }
    log_event('W', id, token, 0, ok);
    snprintf(out, outlen, ok ? "OK" : "REJ");
  } else if (sscanf(line, "S %d %llu %lld %lld %lld", &id, &token, &a, &b,
                    &c) == 5) {
    grow((void **)&R.secs, &R.cap_secs, R.nsecs, sizeof *R.secs);
    R.secs[R.nsecs++] = (res_section){id, token, a, b, c};
    snprintf(out, outlen, "OK");
  } else if (sscanf(line, "V %d %d %d %d %d", &id, &lost, &cb, &rel, &held) ==
             5) {
    if (R.nvictims < 16) {
      R.victims[R.nvictims].id = id;
      R.victims[R.nvictims++].v = (res_victim){true, lost, cb, rel, held};
      pthread_cond_broadcast(&R.cv);
    }
    snprintf(out, outlen, "OK");
  } else if (sscanf(line, "P %d", &id) == 1) {
    snprintf(out, outlen, R.halted ? "STOP" : "OK");
  }
}

static void *serve(void *arg) {
  (void)arg;
  client *cl = calloc(MAX_CLIENTS, sizeof *cl);
  struct pollfd *pfd = calloc(MAX_CLIENTS + 2, sizeof *pfd);
  if (cl == NULL || pfd == NULL) abort();
  int n = 0;
  for (;;) {
    pfd[0] = (struct pollfd){.fd = R.listen_fd, .events = POLLIN};
    pfd[1] = (struct pollfd){.fd = R.wake[0], .events = POLLIN};
    for (int i = 0; i < n; i++)
      pfd[i + 2] = (struct pollfd){.fd = cl[i].fd, .events = POLLIN};
    if (poll(pfd, (nfds_t)n + 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (pfd[1].revents) break;
    for (int i = n - 1; i >= 0; i--) {
      if (!pfd[i + 2].revents) continue;
      client *k = &cl[i];
      ssize_t got = read(k->fd, k->buf + k->len, sizeof k->buf - 1 - k->len);
      if (got <= 0) {
        close(k->fd);
        cl[i] = cl[--n];
        continue;
      }
      k->len += (size_t)got;
      k->buf[k->len] = '\0';
      char *nl;
      while ((nl = strchr(k->buf, '\n')) != NULL) {
        *nl = '\0';
        char out[64];
        pthread_mutex_lock(&R.mu);
        handle(k->buf, out, sizeof out);
        pthread_mutex_unlock(&R.mu);
        size_t ol = strlen(out);
        out[ol++] = '\n';
        if (write(k->fd, out, ol) != (ssize_t)ol) { /* the worker died */
        }
        size_t rest = k->len - (size_t)(nl + 1 - k->buf);
        memmove(k->buf, nl + 1, rest + 1);
        k->len = rest;
      }
      if (k->len == sizeof k->buf - 1) k->len = 0; /* garbage: drop it */
    }
    if (pfd[0].revents && n < MAX_CLIENTS) {
      int fd = accept(R.listen_fd, NULL, NULL);
      if (fd >= 0) cl[n++] = (client){.fd = fd};
    }
  }
  for (int i = 0; i < n; i++)
    close(cl[i].fd);
  free(cl);
  free(pfd);
  return NULL;
}

int res_start(const char *dir) {
  if (strlen(dir) + sizeof "/resource.sock" > sizeof R.path) return -1;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&R.cv, &ca);
  pthread_condattr_destroy(&ca);
  snprintf(R.path, sizeof R.path, "%.80s/resource.sock", dir);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", R.path);
  R.listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (R.listen_fd < 0 ||
      bind(R.listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
      listen(R.listen_fd, 128) != 0 || pipe(R.wake) != 0)
    return -1;
  return pthread_create(&R.thread, NULL, serve, NULL) == 0 ? 0 : -1;
}

void res_stop(void) {
  if (write(R.wake[1], "x", 1) != 1) return;
  pthread_join(R.thread, NULL);
  close(R.listen_fd);
  close(R.wake[0]);
  close(R.wake[1]);
  unlink(R.path);
  free(R.events);
  free(R.secs);
  R.events = NULL;
  R.secs = NULL;
  R.cap_events = R.cap_secs = R.nevents = R.nsecs = 0;
}

const char *res_path(void) {
  return R.path;
}

void res_reset(bool enforce) {
  pthread_mutex_lock(&R.mu);
  R.enforce = enforce;
  R.halted = false;
  R.value = 0;
  R.highest = 0;
  R.accepted = R.rejected = R.stale_accepted = 0;
  R.nevents = R.nsecs = 0;
  R.nvictims = 0;
  pthread_mutex_unlock(&R.mu);
}

void res_halt(void) {
  pthread_mutex_lock(&R.mu);
  R.halted = true;
  pthread_mutex_unlock(&R.mu);
}

size_t res_mark(void) {
  pthread_mutex_lock(&R.mu);
  size_t n = R.nevents;
  pthread_mutex_unlock(&R.mu);
  return n;
}

pid_t res_last_reader(void) {
  pthread_mutex_lock(&R.mu);
  pid_t pid = 0;
  for (size_t i = R.nevents; i-- > 0 && pid == 0;)
    if (R.events[i].type == 'R' && R.events[i].ok) pid = R.events[i].pid;
  pthread_mutex_unlock(&R.mu);
  return pid;
}

long res_accepted(void) {
  pthread_mutex_lock(&R.mu);
  long n = R.accepted;
  pthread_mutex_unlock(&R.mu);
  return n;
}

static void deadline_ts(int timeout_ms, struct timespec *ts) {
  clock_gettime(CLOCK_MONOTONIC, ts);
  ts->tv_sec += timeout_ms / 1000;
  ts->tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec++;
    ts->tv_nsec -= 1000000000L;
  }
}

bool res_wait_event(char type, int id, int not_id, bool need_ok, size_t from,
                    int timeout_ms, res_event *out) {
  struct timespec ts;
  deadline_ts(timeout_ms, &ts);
  pthread_mutex_lock(&R.mu);
  size_t i = from;
  for (;;) {
    for (; i < R.nevents; i++) {
      res_event *e = &R.events[i];
      if (e->type != type || (need_ok && !e->ok)) continue;
      if (id >= 0 && e->id != id) continue;
      if (id == -2 && e->id == not_id) continue;
      if (out) *out = *e;
      pthread_mutex_unlock(&R.mu);
      return true;
    }
    if (pthread_cond_timedwait(&R.cv, &R.mu, &ts) == ETIMEDOUT) break;
  }
  pthread_mutex_unlock(&R.mu);
  return false;
}

bool res_wait_victim(int id, int timeout_ms, res_victim *out) {
  struct timespec ts;
  deadline_ts(timeout_ms, &ts);
  pthread_mutex_lock(&R.mu);
  for (;;) {
    for (int i = 0; i < R.nvictims; i++)
      if (R.victims[i].id == id) {
        if (out) *out = R.victims[i].v;
        pthread_mutex_unlock(&R.mu);
        return true;
      }
    if (pthread_cond_timedwait(&R.cv, &R.mu, &ts) == ETIMEDOUT) break;
  }
  pthread_mutex_unlock(&R.mu);
  return false;
}

static int by_acq(const void *a, const void *b) {
  const res_section *x = a, *y = b;
  return (x->acq_us > y->acq_us) - (x->acq_us < y->acq_us);
}

/* Sections sorted by acquisition: how many begin before an earlier one
 * ended (skipping worker `exclude`). */
static int overlaps(const res_section *s, size_t n, int exclude) {
  int count = 0;
  int64_t end = INT64_MIN;
  for (size_t i = 0; i < n; i++) {
    if (s[i].id == exclude) continue;
    if (s[i].acq_us < end) count++;
    if (s[i].rel_us > end) end = s[i].rel_us;
  }
  return count;
}

void res_verdict_get(int exclude, res_verdict *v) {
  pthread_mutex_lock(&R.mu);
  memset(v, 0, sizeof *v);
  v->value = R.value;
  v->accepted = R.accepted;
  v->rejected = R.rejected;
  v->stale_accepted = R.stale_accepted;
  v->sections = R.nsecs;
  size_t n = R.nsecs;
  res_section *s = malloc((n ? n : 1) * sizeof *s);
  if (s == NULL) abort();
  memcpy(s, R.secs, n * sizeof *s);
  pthread_mutex_unlock(&R.mu);

  qsort(s, n, sizeof *s, by_acq);
  v->overlaps = overlaps(s, n, -1);
  v->overlaps_excluding = overlaps(s, n, exclude);
  /* Token order: a section acquired before another began to acquire was
   * granted first, so its token must be lower. Sections sorted by
   * acquisition; prefix maxima of their tokens; for each section, every
   * section acquired before its start must have a lower token. */
  size_t *prefix_max = malloc((n ? n : 1) * sizeof *prefix_max); /* index */
  if (prefix_max == NULL) abort();
  for (size_t i = 0; i < n; i++)
    prefix_max[i] =
        i && s[prefix_max[i - 1]].token > s[i].token ? prefix_max[i - 1] : i;
  for (size_t i = 0; i < n; i++) {
    size_t lo = 0, hi = n; /* first index with acq_us >= s[i].start_us */
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      if (s[mid].acq_us < s[i].start_us)
        lo = mid + 1;
      else
        hi = mid;
    }
    if (lo > 0 && s[prefix_max[lo - 1]].token >= s[i].token) {
      if (v->token_errors++ == 0) {
        v->first = s[prefix_max[lo - 1]];
        v->later = s[i];
      }
    }
  }
  free(prefix_max);
  free(s);
  v->later_read = -1;
  if (v->token_errors == 0) return;
  pthread_mutex_lock(&R.mu);
  for (size_t i = 0; i < R.nevents; i++) {
    const res_event *e = &R.events[i];
    if (e->type == 'R' && e->id == v->later.id && e->token == v->later.token &&
        e->t_us >= v->later.acq_us && e->t_us <= v->later.rel_us)
      v->later_read = e->ok;
  }
  pthread_mutex_unlock(&R.mu);
}

void res_verdict_explain(const res_verdict *v) {
  if (v->token_errors == 0) return;
  const res_section *a = &v->first, *b = &v->later;
  fprintf(stderr,
          "    token error: worker %d acquired at %lld (began %lld, ended "
          "%lld) with token %llu,\n"
          "      worker %d began to acquire %lld us later (at %lld, acquired "
          "%lld, ended %lld) and got token %llu; its read %s\n",
          a->id, (long long)a->acq_us, (long long)a->start_us,
          (long long)a->rel_us, (unsigned long long)a->token, b->id,
          (long long)(b->start_us - a->acq_us), (long long)b->start_us,
          (long long)b->acq_us, (long long)b->rel_us,
          (unsigned long long)b->token,
          v->later_read < 0 ? "not logged"
          : v->later_read   ? "accepted"
                            : "rejected");
}
