/* proxy.c: the fault proxy (see proxy.h): one thread, one poll loop over
 * every client/server socket pair. */
#include "proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_PAIRS 32

typedef struct chunk {
  struct chunk *next;
  int64_t due_ms;
  size_t len;
  char data[];
} chunk;

typedef struct pair {
  int cfd, sfd;
  chunk *head, *tail; /* replies held back, in order */
} pair;

static struct {
  pthread_t thread;
  int listen_fd, server_port;
  int wake[2];
  atomic_int mode, delay_ms;
  atomic_uint_fast64_t faulted;
  pair pairs[MAX_PAIRS];
  int npairs;
} P;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int connect_server(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)P.server_port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) return fd;
  if (fd >= 0) close(fd);
  return -1;
}

static void close_pair(int i) {
  pair *p = &P.pairs[i];
  close(p->cfd);
  close(p->sfd);
  while (p->head) {
    chunk *c = p->head;
    p->head = c->next;
    free(c);
  }
  P.pairs[i] = P.pairs[--P.npairs];
}

static bool write_all(int fd, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, buf, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buf += n;
    len -= (size_t)n;
  }
  return true;
}

static void *run(void *arg) {
  (void)arg;
  struct pollfd pfd[2 + 2 * MAX_PAIRS];
  char buf[65536];
  for (;;) {
    int64_t now = now_ms(), next_due = -1;
    for (int i = 0; i < P.npairs; i++) {
      pair *p = &P.pairs[i];
      while (p->head && p->head->due_ms <= now) {
        chunk *c = p->head;
        p->head = c->next;
        if (p->head == NULL) p->tail = NULL;
        if (!write_all(p->cfd, c->data, c->len)) { /* client gone */
        }
        free(c);
      }
      if (p->head && (next_due < 0 || p->head->due_ms < next_due))
        next_due = p->head->due_ms;
    }
    pfd[0] = (struct pollfd){.fd = P.listen_fd, .events = POLLIN};
    pfd[1] = (struct pollfd){.fd = P.wake[0], .events = POLLIN};
    for (int i = 0; i < P.npairs; i++) {
      pfd[2 + 2 * i] = (struct pollfd){.fd = P.pairs[i].cfd, .events = POLLIN};
      pfd[3 + 2 * i] = (struct pollfd){.fd = P.pairs[i].sfd, .events = POLLIN};
    }
    int timeout = next_due < 0 ? -1 : (int)(next_due - now);
    if (poll(pfd, (nfds_t)(2 + 2 * P.npairs), timeout) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (pfd[1].revents) break;
    for (int i = P.npairs - 1; i >= 0; i--) {
      pair *p = &P.pairs[i];
      bool dead = false;
      if (pfd[2 + 2 * i].revents) { /* request: through at once */
        ssize_t n = read(p->cfd, buf, sizeof buf);
        if (n > 0 && atomic_load(&P.mode) == PROXY_PARTITION)
          atomic_fetch_add(&P.faulted, (uint64_t)n);
        else
          dead = n <= 0 || !write_all(p->sfd, buf, (size_t)n);
      }
      if (!dead && pfd[3 + 2 * i].revents) { /* reply */
        ssize_t n = read(p->sfd, buf, sizeof buf);
        if (n <= 0) {
          dead = true;
        } else {
          int mode = atomic_load(&P.mode);
          int cut = PROXY_CUT;
          if (mode == PROXY_CUT &&
              atomic_compare_exchange_strong(&P.mode, &cut, PROXY_PASS)) {
            atomic_fetch_add(&P.faulted, (uint64_t)n);
            dead = true; /* the reply goes nowhere, the connection too */
          } else if (mode == PROXY_DROP || mode == PROXY_PARTITION) {
            atomic_fetch_add(&P.faulted, (uint64_t)n);
          } else if (mode == PROXY_DELAY || p->head) {
            /* Held back; later replies queue behind, keeping the order. */
            chunk *c = malloc(sizeof *c + (size_t)n);
            if (c == NULL) abort();
            c->next = NULL;
            c->len = (size_t)n;
            c->due_ms =
                now_ms() + (mode == PROXY_DELAY ? atomic_load(&P.delay_ms) : 0);
            memcpy(c->data, buf, (size_t)n);
            if (p->tail)
              p->tail->next = c;
            else
              p->head = c;
            p->tail = c;
            if (mode == PROXY_DELAY) atomic_fetch_add(&P.faulted, (uint64_t)n);
          } else {
            dead = !write_all(p->cfd, buf, (size_t)n);
          }
        }
      }
      if (dead) close_pair(i);
    }
    if (pfd[0].revents) {
      int cfd = accept(P.listen_fd, NULL, NULL);
      if (cfd >= 0) {
        int sfd = P.npairs < MAX_PAIRS ? connect_server() : -1;
        if (sfd < 0)
          close(cfd);
        else
          P.pairs[P.npairs++] = (pair){.cfd = cfd, .sfd = sfd};
      }
    }
  }
  while (P.npairs > 0)
    close_pair(P.npairs - 1);
  return NULL;
}

int proxy_start(int server_port) {
  P.server_port = server_port;
  P.npairs = 0;
  atomic_store(&P.mode, PROXY_PASS);
  atomic_store(&P.faulted, 0);
  P.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof sa;
  if (P.listen_fd < 0 ||
      bind(P.listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
      listen(P.listen_fd, 16) != 0 ||
      getsockname(P.listen_fd, (struct sockaddr *)&sa, &len) != 0 ||
      pipe(P.wake) != 0)
    return -1;
  if (pthread_create(&P.thread, NULL, run, NULL) != 0) return -1;
  return ntohs(sa.sin_port);
}

void proxy_stop(void) {
  if (write(P.wake[1], "x", 1) != 1) return;
  pthread_join(P.thread, NULL);
  close(P.listen_fd);
  close(P.wake[0]);
  close(P.wake[1]);
}

void proxy_set(proxy_mode mode, int delay_ms) {
  atomic_store(&P.delay_ms, delay_ms);
  atomic_store(&P.mode, (int)mode);
}

uint64_t proxy_faulted_bytes(void) {
  return atomic_load(&P.faulted);
}
