/* subs.h: what the two subscribers share (pubsub.c, for threads; asub.c,
 * for an event loop): the channel table, the sleepers queued by `since`,
 * and what a message, a confirmation, a reconnect or the linger does to
 * them. Private to src/redis.
 *
 * The owner serializes every call on a table (pubsub.c: its mutex; asub.c:
 * the loop's thread) and supplies hooks for what differs: how a sleeper is
 * woken, how a command goes out, who hears a confirmation. */
#ifndef DLOCK_REDIS_SUBS_H
#define DLOCK_REDIS_SUBS_H

#include "conns.h"

#include <pthread.h>

#define DL_SUBS_BUCKETS 1024
/* A subscription nobody waits on any more stays subscribed this long (to
 * DL_SUBS_LINGER_MS plus the owner's sweep period): a lock that was just
 * waited for is usually waited for again soon, and a waiter that finds its
 * channels still subscribed waits without a SUBSCRIBE round trip (and joins
 * the hand-off queue at its first attempt). */
#define DL_SUBS_LINGER_MS 1000
/* How often the owner sweeps what lingers. */
#define DL_SUBS_SWEEP_MS 250
/* A subscriber connection nothing came on for this long gets a PING; one
 * whose PING went unanswered as long is dropped and made again. */
#define DL_SUBS_IDLE_PING_MS 5000

/* A waiter asleep on a subscription, queued by the time it began waiting
 * for its lock (not for this sleep): a waiter that woke, lost the race and
 * sleeps again keeps its place, so the longest waiter is woken first. The
 * first member of each owner's sleeper. */
typedef struct dl_sleeper {
  struct dl_sleeper *next;
  int64_t since;
  dl_sub *grant; /* its own grant subscription, or NULL */
} dl_sleeper;

struct dl_sub {
  dl_sub *next;
  char *channel;
  int refs;        /* waiters between ref and unref */
  int outstanding; /* SUBSCRIBE/UNSUBSCRIBE sent, not yet confirmed */
  bool active;     /* the last command sent was SUBSCRIBE */
  int permits;     /* wake-ups for waiters not asleep, at most refs */
  dl_sleeper *head, *tail;
  int asleep;
  int mode; /* dl_wake_mode */
  /* DL_WAKE_GRANT: the subscription its waiters sleep on (set while they
   * wait, cleared with the last reference), and a grant not yet taken. */
  dl_sub *home;
  bool granted;
  uint64_t token;
  /* Unreferenced but still subscribed, since idle_since (dl_now_ms). */
  bool lingering;
  int64_t idle_since;
  /* DL_WAKE_NOTICE: told the key each message names (dl_pubsub_listen). */
  bool pattern;
  bool sharded; /* DL_WAKE_SHARDED: SSUBSCRIBE, smessage */
  size_t strip;
  dl_notice_fn notice;
  void *notice_ud;
  /* The owner's: pubsub.c's condition variable of the confirmation. */
  pthread_cond_t cv;
};

typedef struct dl_subs_hooks {
  /* w has been taken out of its subscription's sleepers: wake it (its
   * wait returns 1). */
  void (*wake)(void *owner, dl_sleeper *w);
  /* Sends one command (verb and channel; PING with channel ""). Called
   * only while the table is up; a failure is the owner's to handle (the
   * connection is then lost, and dl_subs_connected subscribes again). */
  void (*send)(void *owner, const char *verb, const char *channel);
  /* s was confirmed, or the connection went down (dl_subs_confirmed
   * says which): tell whoever awaits s's confirmation. */
  void (*changed)(void *owner, dl_sub *s);
  /* s was just made (may be NULL), or is about to be freed (may be
   * NULL). */
  void (*created)(void *owner, dl_sub *s);
  void (*freeing)(void *owner, dl_sub *s);
} dl_subs_hooks;

typedef struct dl_subs {
  const dl_subs_hooks *h;
  void *owner;
  bool up; /* a connection is up: commands go out */
  bool was_up; /* a connection was up before */
  dl_sub *table[DL_SUBS_BUCKETS];
  int subs;      /* subscriptions in the table */
  int lingering; /* of which lingering */
  uint64_t wakeups;
} dl_subs;

/* An empty table, down. */
void dl_subs_init(dl_subs *t, const dl_subs_hooks *h, void *owner);
/* Frees every subscription (no command sent, nobody woken). */
void dl_subs_clear(dl_subs *t);
/* The subscription of channel (len bytes), or NULL. */
dl_sub *dl_subs_find(dl_subs *t, const char *ch, size_t len);
/* Whether the server confirmed s on the connection that is up. */
bool dl_subs_confirmed(const dl_subs *t, const dl_sub *s);
/* A reference to channel's subscription, made (and subscribed, if up) if
 * new or unsubscribed; a lingering one is taken back, its mode now `mode`.
 * NULL when out of memory (nothing changed). */
dl_sub *dl_subs_ref(dl_subs *t, const char *channel, int mode);
/* Drops a reference; the last one lingers (`linger`, confirmed) or
 * unsubscribes. */
void dl_subs_unref(dl_subs *t, dl_sub *s, bool linger);
/* A subscription for the table's life, telling fn the keys its messages
 * name (dl_pubsub_listen); subscribed now if up. NULL: out of memory. */
dl_sub *dl_subs_listen(dl_subs *t, const char *channel, bool pattern,
                       size_t strip, dl_notice_fn fn, void *ud);
/* w (since and grant set) goes to sleep on s, unless a wake-up is there
 * already: a permit (taken) or a pending grant on w->grant. Returns true
 * when it did not sleep (woken now). */
bool dl_subs_sleep(dl_subs *t, dl_sub *s, dl_sleeper *w);
/* Takes w out of s's sleepers; false if it was not there (woken). */
bool dl_subs_unlink(dl_subs *t, dl_sub *s, dl_sleeper *w);
/* Wakes s's first sleeper, or gives a permit to a waiter awake (as a
 * message in DL_WAKE_LOCK mode does). */
void dl_subs_wake_one(dl_subs *t, dl_sub *s);
/* Wakes every sleeper of s (no permits). */
void dl_subs_kick(dl_subs *t, dl_sub *s);
/* A DL_WAKE_GRANT subscription: 1 and *token if a grant came (taken
 * here), 0 if not, -1 if none can come (not confirmed). */
int dl_subs_grant(dl_subs *t, dl_sub *s, uint64_t *token);
/* Unsubscribes what has lingered DL_SUBS_LINGER_MS by `now`. */
void dl_subs_sweep(dl_subs *t, int64_t now);
/* A connection is up: subscribes again to every channel still wanted
 * (freeing the rest) and wakes every waiter unless it is the first
 * connection (a message may have been lost meanwhile). Each notice fn is
 * told key NULL (anything may have been missed until now) when its
 * subscription is confirmed (dl_subs_dispatch): a take-away before that
 * may not have been published to it. */
void dl_subs_connected(dl_subs *t);
/* The connection went down: wakes every waiter and tells `changed`. */
void dl_subs_disconnected(dl_subs *t);
/* Handles one reply of the subscriber connection (not freed here). */
void dl_subs_dispatch(dl_subs *t, const struct redisReply *r);

#endif /* DLOCK_REDIS_SUBS_H */
