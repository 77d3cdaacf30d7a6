/* inspect.c: what can be read of a lock without taking it: who holds it,
 * its lease and token (the queries), a snapshot of whatever kind of lock or
 * synchronizer lives at a name (dlock_lock_inspect), and the scan for lock
 * names. Read-only on the server. */
#include "lock.h"

#include <hiredis/hiredis.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs a read command and returns its integer (or nil as `nil_value`). */
static int query_int(dlock_lock *l, int argc, const char **argv,
                     long long nil_value, long long *out) {
  redisReply *r = NULL;
  int rc = l->c->backend->ops->command(l->c->backend, argc, argv, &r);
  if (rc != 0) return rc;
  if (r->type == REDIS_REPLY_INTEGER) *out = r->integer;
  else if (r->type == REDIS_REPLY_NIL) *out = nil_value;
  else if (r->type == REDIS_REPLY_STRING) {
    char *end;
    *out = strtoll(r->str, &end, 10);
    if (*end != '\0') rc = dl_seterr(l->c, DLOCK_EPROTO, "not a number");
  } else {
    rc = dl_seterr(l->c, DLOCK_EPROTO, "unexpected reply type %d", r->type);
  }
  freeReplyObject(r);
  return rc;
}

int dlock_lock_is_locked(dlock_lock *l) {
  if (l == NULL) return DLOCK_EINVAL;
  const char *argv[] = {"EXISTS", l->key};
  long long v = 0;
  int rc = query_int(l, 2, argv, 0, &v);
  return rc ? rc : (v > 0);
}

int dlock_lock_is_held(dlock_lock *l) {
  if (l == NULL) return DLOCK_EINVAL;
  char owner[OWNER_MAX];
  int rc = dl_lock_owner(l, owner);
  if (rc != 0) return rc;
  const char *argv[] = {"HEXISTS", l->key, owner};
  long long v = 0;
  rc = query_int(l, 3, argv, 0, &v);
  return rc ? rc : (v > 0);
}

int dlock_lock_hold_count(dlock_lock *l) {
  if (l == NULL) return DLOCK_EINVAL;
  char owner[OWNER_MAX];
  int rc = dl_lock_owner(l, owner);
  if (rc != 0) return rc;
  const char *argv[] = {"HGET", l->key, owner};
  long long v = 0;
  rc = query_int(l, 3, argv, 0, &v);
  if (rc == 0 && (v < 0 || v > INT_MAX))
    rc = dl_seterr(l->c, DLOCK_EPROTO, "hold count %lld out of range", v);
  return rc ? rc : (int)v;
}

int dlock_lock_remaining_ttl(dlock_lock *l, int64_t *ttl_ms) {
  if (l == NULL || ttl_ms == NULL) return DLOCK_EINVAL;
  const char *argv[] = {"PTTL", l->key};
  long long v = 0;
  int rc = query_int(l, 2, argv, -2, &v);
  if (rc == 0) *ttl_ms = v;
  return rc;
}

int dlock_lock_current_token(dlock_lock *l, uint64_t *token) {
  if (l == NULL || token == NULL) return DLOCK_EINVAL;
  char tk[DERIVED_MAX];
  const char *argv[] = {"GET", TOKEN_KEY(l, tk)};
  long long v = 0;
  int rc = query_int(l, 2, argv, 0, &v);
  if (rc == 0) *token = (uint64_t)v;
  return rc;
}

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

int dlock_lock_inspect(dlock_lock *l, dlock_lock_state *st) {
  if (l == NULL || st == NULL) return DLOCK_EINVAL;
  memset(st, 0, sizeof *st);
  char tk[DERIVED_MAX], qk[DERIVED_MAX], gk[DERIVED_MAX];
  char *timeouts = dl_derived_suffix(l->key, "timeout");
  if (timeouts == NULL) return dl_seterr(l->c, DLOCK_ENOMEM, "out of memory");
  const char *keys[] = {l->key, TOKEN_KEY(l, tk), QUEUE_KEY(l, qk), timeouts,
                        GRANT_QUEUE_KEY(l, gk)};
  redisReply *r = NULL;
  dl_backend *b = l->c->backend;
  int rc = b->ops->eval(b, DL_SCRIPT_LOCK_INSPECT, 5, keys, 0, NULL, &r);
  free(timeouts);
  if (rc != 0) return rc;
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 8 ||
      r->element[0]->type != REDIS_REPLY_ARRAY ||
      r->element[1]->type != REDIS_REPLY_INTEGER) {
    freeReplyObject(r);
    return dl_seterr(l->c, DLOCK_EPROTO, "unexpected reply to inspect");
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
  freeReplyObject(r);
  char ch[DERIVED_MAX];
  const char *argv[] = {"PUBSUB", "NUMSUB", CHANNEL(l, ch)};
  rc = b->ops->command(b, 3, argv, &r);
  if (rc != 0) return rc;
  if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
      r->element[1]->type == REDIS_REPLY_INTEGER)
    st->waiters = (int)r->element[1]->integer;
  freeReplyObject(r);
  return 0;
}

int dlock_client_scan_locks(dlock_client *c, const char *pattern,
                            dlock_scan_cb cb, void *ud) {
  if (c == NULL || cb == NULL) return DLOCK_EINVAL;
  char *match = dl_key(c, "%s", pattern ? pattern : "*");
  if (match == NULL) return dl_seterr(c, DLOCK_ENOMEM, "out of memory");
  char cursor[32] = "0";
  int found = 0, rc = 0;
  bool stop = false;
  do {
    const char *argv[] = {"SCAN", cursor, "MATCH", match, "COUNT", "500",
                          "TYPE", "hash"};
    redisReply *r = NULL;
    rc = c->backend->ops->command(c->backend, 8, argv, &r);
    if (rc != 0) break;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_ARRAY) {
      freeReplyObject(r);
      rc = dl_seterr(c, DLOCK_EPROTO, "unexpected reply to SCAN");
      break;
    }
    snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
    redisReply *keys = r->element[1];
    for (size_t i = 0; i < keys->elements && !stop; i++) {
      redisReply *k = keys->element[i];
      if (k->type != REDIS_REPLY_STRING || k->len < c->prefix_len) continue;
      found++;
      if (cb(k->str + c->prefix_len, ud) != 0) stop = true;
    }
    freeReplyObject(r);
  } while (!stop && strcmp(cursor, "0") != 0);
  free(match);
  return rc != 0 ? rc : found;
}
