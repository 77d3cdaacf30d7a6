/* subs.c: the subscribers' shared part (subs.h): the channel table, the
 * sleepers queued by `since`, the wake modes, the grant, the linger and the
 * resubscribe after a reconnect. Every call is serialized by the owner. */
#include "subs.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned hash(const char *s) {
  return dl_hash(DL_HASH_SEED, s) % DL_SUBS_BUCKETS;
}

void dl_subs_init(dl_subs *t, const dl_subs_hooks *h, void *owner) {
  memset(t, 0, sizeof *t);
  t->h = h;
  t->owner = owner;
}

dl_sub *dl_subs_find(dl_subs *t, const char *ch, size_t len) {
  for (dl_sub *s = t->table[hash(ch)]; s; s = s->next)
    if (strlen(s->channel) == len && memcmp(s->channel, ch, len) == 0) return s;
  return NULL;
}

/* A new, unreferenced subscription in the table, or NULL. */
static dl_sub *sub_new(dl_subs *t, const char *channel, int mode) {
  dl_sub *s = calloc(1, sizeof *s);
  if (s == NULL || (s->channel = dl_strdup(channel)) == NULL) {
    free(s);
    return NULL;
  }
  s->mode = mode;
  unsigned h = hash(channel);
  s->next = t->table[h];
  t->table[h] = s;
  t->subs++;
  if (t->h->created) t->h->created(t->owner, s);
  return s;
}

static void sub_free(dl_subs *t, dl_sub *s) {
  dl_sub **pp = &t->table[hash(s->channel)];
  while (*pp != s)
    pp = &(*pp)->next;
  *pp = s->next;
  if (s->lingering) t->lingering--;
  t->subs--;
  if (t->h->freeing) t->h->freeing(t->owner, s);
  free(s->channel);
  free(s);
}

void dl_subs_clear(dl_subs *t) {
  for (int b = 0; b < DL_SUBS_BUCKETS; b++)
    while (t->table[b])
      sub_free(t, t->table[b]);
}

bool dl_subs_confirmed(const dl_subs *t, const dl_sub *s) {
  return t->up && s->active && s->outstanding == 0;
}

/* Sends verb for s (its P-form for a pattern) if up, counting the
 * confirmation to come. */
static void send_sub(dl_subs *t, dl_sub *s, const char *verb) {
  if (!t->up) return;
  char v[16];
  snprintf(v, sizeof v, "%s%s", s->pattern ? "P" : s->sharded ? "S" : "",
           verb);
  s->outstanding++;
  t->h->send(t->owner, v, s->channel);
}

static void pop_into(dl_subs *t, dl_sub *s, dl_sleeper *w, dl_sleeper *prev) {
  if (prev)
    prev->next = w->next;
  else
    s->head = w->next;
  if (s->tail == w) s->tail = prev;
  s->asleep--;
  t->h->wake(t->owner, w);
}

static bool pop(dl_subs *t, dl_sub *s) {
  dl_sleeper *w = s->head;
  if (w) pop_into(t, s, w, NULL);
  return w != NULL;
}

/* Returns whether anyone was woken or given a permit. A message that finds
 * a referenced waiter awake is kept as its permit (at most one for each
 * reference): it then does not sleep through the wake-up it came for. */
static bool wake(dl_subs *t, dl_sub *s, bool all) {
  if (all) {
    bool any = s->head != NULL || s->permits < s->refs - s->asleep;
    while (pop(t, s)) {
    }
    s->permits = s->refs; /* everyone not asleep tries again once */
    return any;
  }
  if (pop(t, s)) return true;
  if (s->permits < s->refs) {
    s->permits++;
    return true;
  }
  return false;
}

void dl_subs_wake_one(dl_subs *t, dl_sub *s) {
  wake(t, s, false);
}

void dl_subs_kick(dl_subs *t, dl_sub *s) {
  while (pop(t, s)) {
  }
}

dl_sub *dl_subs_ref(dl_subs *t, const char *channel, int mode) {
  bool pattern = (mode & DL_WAKE_PATTERN) != 0;
  bool sharded = (mode & DL_WAKE_SHARDED) != 0;
  mode &= ~(DL_WAKE_PATTERN | DL_WAKE_SHARDED);
  dl_sub *s = dl_subs_find(t, channel, strlen(channel));
  if (s == NULL) {
    if ((s = sub_new(t, channel, mode)) == NULL) return NULL;
    s->pattern = pattern;
    s->sharded = sharded;
  }
  if (s->lingering) { /* still subscribed: nothing to wait for */
    s->lingering = false;
    t->lingering--;
    s->mode = mode;
  }
  s->refs++;
  if (!s->active) {
    s->active = true;
    send_sub(t, s, "SUBSCRIBE");
  }
  return s;
}

dl_sub *dl_subs_listen(dl_subs *t, const char *channel, bool pattern,
                       size_t strip, dl_notice_fn fn, void *ud) {
  dl_sub *s = sub_new(t, channel, DL_WAKE_NOTICE);
  if (s == NULL) return NULL;
  s->pattern = pattern;
  s->strip = strip;
  s->notice = fn;
  s->notice_ud = ud;
  s->refs = 1; /* for the table's life */
  s->active = true;
  send_sub(t, s, "SUBSCRIBE"); /* else dl_subs_connected subscribes it */
  return s;
}

/* s has no references left; unsubscribes it, and frees it unless a
 * confirmation is still to come. */
static void unsubscribe(dl_subs *t, dl_sub *s) {
  s->active = false;
  send_sub(t, s, "UNSUBSCRIBE");
  if (s->outstanding == 0) sub_free(t, s);
}

void dl_subs_unref(dl_subs *t, dl_sub *s, bool linger) {
  if (--s->refs == 0) {
    s->permits = 0;
    s->home = NULL;
    s->granted = false;
    if (linger && dl_subs_confirmed(t, s)) {
      s->lingering = true;
      s->idle_since = dl_now_ms();
      t->lingering++;
    } else {
      unsubscribe(t, s);
    }
  } else if (s->permits > s->refs) {
    s->permits = s->refs;
  }
}

bool dl_subs_sleep(dl_subs *t, dl_sub *s, dl_sleeper *w) {
  (void)t;
  if (w->grant && w->grant->granted) return true;
  if (s->permits > 0) {
    s->permits--;
    return true;
  }
  if (w->grant) w->grant->home = s;
  dl_sleeper **pp = &s->head;
  while (*pp && (*pp)->since <= w->since)
    pp = &(*pp)->next;
  w->next = *pp;
  *pp = w;
  if (w->next == NULL) s->tail = w;
  s->asleep++;
  return false;
}

bool dl_subs_unlink(dl_subs *t, dl_sub *s, dl_sleeper *w) {
  (void)t;
  dl_sleeper *prev = NULL, **pp = &s->head;
  while (*pp && *pp != w) {
    prev = *pp;
    pp = &(*pp)->next;
  }
  if (*pp == NULL) return false;
  *pp = w->next;
  if (s->tail == w) s->tail = prev;
  s->asleep--;
  return true;
}

int dl_subs_grant(dl_subs *t, dl_sub *s, uint64_t *token) {
  int rc = s->granted ? 1 : dl_subs_confirmed(t, s) ? 0 : -1;
  if (s->granted) {
    if (token) *token = s->token;
    s->granted = false;
  }
  return rc;
}

void dl_subs_sweep(dl_subs *t, int64_t now) {
  for (int b = 0; b < DL_SUBS_BUCKETS && t->lingering > 0; b++) {
    for (dl_sub *s = t->table[b], *n; s; s = n) {
      n = s->next;
      if (!s->lingering || now - s->idle_since < DL_SUBS_LINGER_MS) continue;
      s->lingering = false;
      t->lingering--;
      unsubscribe(t, s);
    }
  }
}

void dl_subs_connected(dl_subs *t) {
  bool again = t->was_up;
  t->up = t->was_up = true;
  for (int b = 0; b < DL_SUBS_BUCKETS; b++) {
    for (dl_sub *s = t->table[b], *n; s; s = n) {
      n = s->next;
      s->outstanding = 0;
      if (s->refs == 0) {
        sub_free(t, s);
        continue;
      }
      s->active = true;
      send_sub(t, s, "SUBSCRIBE");
      /* A waiter heard nothing while down: it tries again. (Not after the
       * first connect: a waiter whose last try went before the
       * confirmation polls until one goes after it, ops/acquire.c and
       * ops/backend.c.) */
      if (again) wake(t, s, true);
      /* A notice subscription tells its fn NULL once the server confirms
       * it (dl_subs_dispatch), not here: the SUBSCRIBE is not even written
       * yet, and a take-away published before the server reads it is
       * heard by nobody. */
    }
  }
}

void dl_subs_disconnected(dl_subs *t) {
  t->up = false;
  for (int b = 0; b < DL_SUBS_BUCKETS; b++)
    for (dl_sub *s = t->table[b]; s; s = s->next) {
      wake(t, s, true);
      t->h->changed(t->owner, s);
    }
}

/* Wakes the sleepers of a DL_WAKE_GRANT subscription (asleep on its home
 * subscription), and only them. */
static void wake_grantee(dl_subs *t, dl_sub *g) {
  bool any = false;
  dl_sub *home = g->home;
  for (dl_sleeper *w = home ? home->head : NULL, *prev = NULL, *n; w; w = n) {
    n = w->next;
    if (w->grant != g) {
      prev = w;
      continue;
    }
    pop_into(t, home, w, prev);
    any = true;
  }
  if (any) t->wakeups++;
}

/* A DL_WAKE_GRANT message: "=<token>" hands the lock to this waiter (a
 * grant kept until dl_subs_grant takes it); any other message: it tries
 * again. Either way only the sleepers of this grant wake. */
static void on_grant(dl_subs *t, dl_sub *s, const redisReply *msg) {
  if (s->refs > 0 && msg->type == REDIS_REPLY_STRING && msg->len > 1 &&
      msg->str[0] == '=') {
    char *end;
    unsigned long long tok = strtoull(msg->str + 1, &end, 10);
    if (*end == '\0' && tok > 0) {
      s->granted = true;
      s->token = (uint64_t)tok;
    }
  }
  wake_grantee(t, s);
}

/* A message for a DL_WAKE_NOTICE subscription names a key: itself, or (a
 * keyspace pattern) the channel after its prefix, for the events that can
 * take a hold away. Returns whether r was such a message. */
static bool on_notice(dl_sub *s, const char *kind, const redisReply *r) {
  const redisReply *m = r->elements >= 3 ? r->element[r->elements - 1] : NULL;
  const redisReply *c2 = r->elements >= 4 ? r->element[2] : NULL;
  if (m == NULL || m->type != REDIS_REPLY_STRING) return false;
  if (strcmp(kind, "message") == 0 && !s->pattern) {
    s->notice(s->notice_ud, m->str, m->len);
    return true;
  }
  if (strcmp(kind, "pmessage") == 0 && c2 && c2->type == REDIS_REPLY_STRING &&
      c2->len > s->strip &&
      (strcmp(m->str, "del") == 0 || strcmp(m->str, "expired") == 0)) {
    s->notice(s->notice_ud, c2->str + s->strip, c2->len - s->strip);
    return true;
  }
  return false;
}

void dl_subs_dispatch(dl_subs *t, const redisReply *r) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
      r->element[0]->type != REDIS_REPLY_STRING)
    return;
  const char *kind = r->element[0]->str;
  const redisReply *ch = r->element[1];
  if (strcmp(kind, "pong") == 0) return; /* the idle PING's: data enough */
  if (ch->type != REDIS_REPLY_STRING) return;
  dl_sub *s = dl_subs_find(t, ch->str, ch->len);
  if (s == NULL) return;
  if (s->notice && on_notice(s, kind, r)) return;
  /* A pattern's message names the channel before the payload; a shard
   * channel's is an smessage. */
  bool pmessage = strcmp(kind, "pmessage") == 0 && r->elements >= 4;
  bool message = strcmp(kind, "message") == 0 || strcmp(kind, "smessage") == 0;
  if (strcmp(kind, "sunsubscribe") == 0 && s->active && s->outstanding == 0) {
    /* Not asked for: the server gave the channel's slot away (a cluster's
     * slot migration or failover). Its waiters wake and try again, which
     * finds the slot's new master; a new reference subscribes again. */
    s->active = false;
    if (s->refs == 0) {
      sub_free(t, s);
      return;
    }
    dl_subs_kick(t, s);
    t->h->changed(t->owner, s);
    return;
  }
  if ((message && r->elements >= 3) || pmessage) {
    const redisReply *msg = r->element[pmessage ? 3 : 2];
    bool text = msg->type == REDIS_REPLY_STRING;
    if (s->mode == DL_WAKE_GRANT) {
      on_grant(t, s, msg);
      return;
    }
    if (s->mode == DL_WAKE_COUNT) {
      /* Permits now available: wake that many (at most everyone). */
      long long n = text ? strtoll(msg->str, NULL, 10) : 0;
      for (long long i = 0; i < n && i <= s->refs; i++)
        if (wake(t, s, false)) t->wakeups++;
      return;
    }
    bool all =
        s->mode == DL_WAKE_ALL || (text && msg->len == 1 && msg->str[0] == '1');
    if (wake(t, s, all)) t->wakeups++;
  } else if (strcmp(kind, "subscribe") == 0 ||
             strcmp(kind, "unsubscribe") == 0 ||
             strcmp(kind, "ssubscribe") == 0 ||
             strcmp(kind, "sunsubscribe") == 0 ||
             strcmp(kind, "psubscribe") == 0 ||
             strcmp(kind, "punsubscribe") == 0) {
    if (s->outstanding > 0) s->outstanding--;
    if (s->outstanding == 0 && s->refs == 0) {
      sub_free(t, s);
    } else if (dl_subs_confirmed(t, s)) {
      t->h->changed(t->owner, s);
      /* Messages are heard from here on; whatever was taken away before
       * (while down, or between the acquire and the subscription: a
       * client's first acquire may well end first) went unheard: check it
       * all, once per connection. */
      if (s->notice) s->notice(s->notice_ud, NULL, 0);
      /* A waiter that could not join the hand-off queue without this
       * subscription tries again now. */
      if (s->mode == DL_WAKE_GRANT) wake_grantee(t, s);
    }
  }
}
