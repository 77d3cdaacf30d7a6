/* proxy.h: a TCP fault proxy between a client and a server. Requests pass
 * at once (unless partitioned); replies pass, are held back for a delay,
 * or are dropped (the server executed the command, the client never
 * hears). */
#ifndef DLOCK_SAFETY_PROXY_H
#define DLOCK_SAFETY_PROXY_H

#include <stdint.h>

/* PROXY_CUT: the next reply (any connection's) is dropped and its
 * connection closed on both sides, then the proxy passes again: the server
 * executed the command, and the client sees the connection drop. */
/* PROXY_PARTITION: requests and replies are dropped both ways, the
 * connections kept open (new ones too): the client and the server no
 * longer hear each other, as across a network partition. */
typedef enum {
  PROXY_PASS,
  PROXY_DELAY,
  PROXY_DROP,
  PROXY_CUT,
  PROXY_PARTITION
} proxy_mode;

/* Listens on a free loopback port forwarding to 127.0.0.1:server_port.
 * Returns the port, or -1. */
int proxy_start(int server_port);
void proxy_stop(void);
void proxy_set(proxy_mode mode, int delay_ms);
/* Reply bytes held back or dropped since the start: proof the fault
 * happened. */
uint64_t proxy_faulted_bytes(void);

#endif
