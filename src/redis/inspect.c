/* inspect.c: what can be read of whatever lives at a name without taking
 * it (a snapshot of any kind of lock or synchronizer), and the scan for
 * lock names. Read-only on the server. */
#include "redis.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An owner field of a lock hash: "<id>:<thread>" with a positive count. */
static bool owner_field(const redisReply *f, const redisReply *v) {
  if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
    return false;
  if (strncmp(f->str, "dlock:", 6) == 0 || strchr(f->str, ':') == NULL)
    return false;
  char *end;
  long n = strtol(v->str, &end, 10);
  return *end == '\0' && n > 0;
}

/* Sets st->held_ms from a holder's start, `since` (server ms, as text),
 * and the server's clock `now` (-1 unknown). */
static void held_since(dlock_lock_state *st, int64_t now, const char *since) {
  if (now < 0) return;
  st->held_ms = now - strtoll(since, NULL, 10);
  if (st->held_ms < 0) st->held_ms = 0;
}

int dl_redis_inspect(dl_backend *b, const char *key, dlock_lock_state *st) {
  dl_redis *R = (dl_redis *)b;
  char tk[DL_DERIVED_MAX], qk[DL_DERIVED_MAX], gk[DL_DERIVED_MAX],
      timeouts[DL_DERIVED_MAX], ch[DL_DERIVED_MAX];
  dl_derived_into(tk, sizeof tk, "redisson_lock_token", key);
  dl_derived_into(qk, sizeof qk, "redisson_lock_queue", key);
  dl_derived_into(gk, sizeof gk, "dlock_lock_queue", key);
  dl_derived_suffix_into(timeouts, sizeof timeouts, key, "timeout");
  const char *keys[] = {key, tk, qk, timeouts, gk};
  redisReply *r = NULL;
  int rc = R->link->ops->eval(R->link, DL_SCRIPT_LOCK_INSPECT, 5, keys, 0,
                              NULL, &r);
  if (rc != 0) return rc;
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 9 ||
      r->element[0]->type != REDIS_REPLY_ARRAY ||
      r->element[1]->type != REDIS_REPLY_INTEGER) {
    freeReplyObject(r);
    return dl_seterr(R->env.err_owner, DLOCK_EPROTO,
                     "unexpected reply to inspect");
  }
  redisReply *all = r->element[0];
  int64_t now = r->element[3]->type == REDIS_REPLY_INTEGER
                    ? r->element[3]->integer
                    : -1;
  st->held_ms = -1;
  for (size_t i = 0; i + 1 < all->elements; i += 2) {
    redisReply *f = all->element[i], *v = all->element[i + 1];
    bool strs = f->type == REDIS_REPLY_STRING && v->type == REDIS_REPLY_STRING;
    if (strs && strcmp(f->str, "dlock:info") == 0) {
      snprintf(st->info, sizeof st->info, "%s", v->str);
    } else if (strs && strcmp(f->str, "dlock:since") == 0) {
      held_since(st, now, v->str);
    } else if (strs && strcmp(f->str, "mode") == 0) {
      snprintf(st->mode, sizeof st->mode, "%s", v->str);
    } else if (owner_field(f, v)) {
      size_t fl = strlen(f->str);
      bool writer = fl > 6 && strcmp(f->str + fl - 6, ":write") == 0;
      if (!writer) st->readers++; /* zeroed below unless a rw lock */
      if (st->holders++ == 0) {
        snprintf(st->owner, sizeof st->owner, "%s", f->str);
        st->hold_count = atoi(v->str);
      }
    }
  }
  st->held = st->holders > 0;
  if (st->mode[0] == '\0') st->readers = 0; /* not a read-write lock */
  if (st->held && st->mode[0]) /* "dlock:info:<owner>" = "<since>:<info>" */
    for (size_t i = 0; i + 1 < all->elements; i += 2) {
      redisReply *f = all->element[i], *v = all->element[i + 1];
      char *colon;
      if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING ||
          strncmp(f->str, "dlock:info:", 11) != 0 ||
          strcmp(f->str + 11, st->owner) != 0 ||
          (colon = strchr(v->str, ':')) == NULL)
        continue;
      held_since(st, now, v->str);
      snprintf(st->info, sizeof st->info, "%s", colon + 1);
    }
  if (r->element[7]->type == REDIS_REPLY_STRING ||
      r->element[7]->type == REDIS_REPLY_STATUS)
    snprintf(st->type, sizeof st->type, "%s", r->element[7]->str);
  st->ttl_ms = r->element[1]->integer;
  st->counter = r->element[4]->type == REDIS_REPLY_INTEGER
                    ? r->element[4]->integer
                    : -1;
  if (r->element[5]->type == REDIS_REPLY_INTEGER)
    st->queued = (int)r->element[5]->integer;
  if (r->element[6]->type == REDIS_REPLY_INTEGER)
    st->permits_taken = (int)r->element[6]->integer;
  if (r->element[2]->type == REDIS_REPLY_STRING)
    st->token = strtoull(r->element[2]->str, NULL, 10);
  /* A plain string lock: a string with a lease that is not a number (its
   * value is the holder's token; there is no count on the wire). */
  if (r->element[8]->type == REDIS_REPLY_STRING && st->ttl_ms >= 0 &&
      strcmp(st->type, "string") == 0) {
    st->plain = 1;
    st->held = 1;
    st->holders = 1;
    st->hold_count = 1;
    snprintf(st->owner, sizeof st->owner, "%s", r->element[8]->str);
  }
  freeReplyObject(r);
  dl_derived_into(ch, sizeof ch, "redisson_lock__channel", key);
  const char *argv[] = {"PUBSUB", "NUMSUB", ch};
  rc = R->link->ops->command(R->link, 3, argv, &r);
  if (rc != 0) return rc;
  if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
      r->element[1]->type == REDIS_REPLY_INTEGER)
    st->waiters = (int)r->element[1]->integer;
  freeReplyObject(r);
  return 0;
}

int dl_redis_scan(dl_backend *b, const char *match, size_t prefix_len,
                  dlock_scan_cb cb, void *ud) {
  dl_redis *R = (dl_redis *)b;
  int found = 0, rc = 0;
  bool stop = false;
  /* Hashes (the hash locks), then strings (plain string locks; most
   * strings are not, dlock_lock_inspect tells). */
  static const char *const types[] = {"hash", "string"};
  for (int t = 0; t < 2 && !stop && rc == 0; t++) {
  char cursor[32] = "0";
  do {
    const char *argv[] = {"SCAN", cursor, "MATCH", match, "COUNT", "500",
                          "TYPE", types[t]};
    redisReply *r = NULL;
    rc = R->link->ops->command(R->link, 8, argv, &r);
    if (rc != 0) break;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_ARRAY) {
      freeReplyObject(r);
      rc = dl_seterr(R->env.err_owner, DLOCK_EPROTO, "unexpected reply to SCAN");
      break;
    }
    snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
    redisReply *keys = r->element[1];
    for (size_t i = 0; i < keys->elements && !stop; i++) {
      redisReply *k = keys->element[i];
      if (k->type != REDIS_REPLY_STRING || k->len < prefix_len) continue;
      found++;
      if (cb(k->str + prefix_len, ud) != 0) stop = true;
    }
    freeReplyObject(r);
  } while (!stop && strcmp(cursor, "0") != 0);
  }
  return rc != 0 ? rc : found;
}
