/* attempt.c: one attempt of the Redis lock family's acquire (acquire.h):
 * the request (lock_acquire.lua, with only the arguments it needs, a
 * Redlock server's extras, or rw_acquire.lua) and the reading of its
 * answer. */
#include "acquire.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <string.h>

/* Sends one attempt at a side of a read-write lock. */
static int rw_send(acq_op *o, const char *lease) {
  const dl_lock_ref *l = o->a->lock;
  const char *owner = l->owner;
  /* The same thread's owner ids on the other side. */
  char reader[DL_OWNER_MAX], writer[DL_OWNER_MAX];
  size_t ol = strlen(owner);
  if (l->kind == DL_KIND_WRITE) {
    memcpy(reader, owner, ol - 6);
    reader[ol - 6] = '\0';
    memcpy(writer, owner, ol + 1);
  } else {
    memcpy(reader, owner, ol + 1);
    snprintf(writer, sizeof writer, "%s:write", owner);
  }
  char tk[DL_DERIVED_MAX];
  const char *keys[] = {l->key, TOKEN_KEY(l, tk)};
  const char *args[] = {
      lease,  owner,  l->kind == DL_KIND_READ ? "read" : "write",
      writer, reader, o->a->info};
  return dl_redis_step_eval(o->R, &o->p, o->end, DL_SCRIPT_RW_ACQUIRE, 2, keys,
                            6, args);
}

int dl_acq_attempt_send(acq_op *o, acq_state next, bool enqueue) {
  const dl_acquire *a = o->a;
  const dl_lock_ref *l = a->lock;
  char lease[DL_INT_BUF], count[DL_INT_BUF];
  dl_fmt_ll(lease, a->lease_ms);
  o->st = next;
  o->sent = dl_now_ms();
  o->deaf = !o->sub || o->R->link->ops->sub_grant(o->R->link, o->sub, 0) < 0;
  if (is_rw(l)) return rw_send(o, lease);
  /* A server of a Redlock: its restart delay, ARGV[10], the token
   * proposed, ARGV[11], and the waiter's record, ARGV[12..14] (see the
   * script). Only what is sent is formatted (the hot path: one test). */
  char young[DL_INT_BUF], propose[DL_INT_BUF];
  int extra = o->R->part ? dl_redis_part_args(o->R, a, young, propose) : 0;
  if (l->kind == DL_KIND_PLAIN) {
    char ptk[DL_DERIVED_MAX];
    const char *pkeys[] = {l->key, TOKEN_KEY(l, ptk)};
    const char *pargs[] = {lease, l->owner, a->info, count, "",     "",
                           "",    "",       "",      young, propose};
    dl_fmt_ll(count, a->held);
    if (extra == 14)
      return dl_redis_part_eval(o->R, &o->p, o->end, a, 2, pkeys, pargs);
    return dl_redis_step_eval(o->R, &o->p, o->end, DL_SCRIPT_LOCK_ACQUIRE, 2,
                              pkeys, extra ? extra : 4, pargs);
  }
  bool fair = l->kind == DL_KIND_FAIR;
  /* A plain lock's first attempt sends only what it needs: every
   * argument carried costs the server about as much as a fifth of a
   * command (tests/test_cost.sh), so the defaults at the end (no holder
   * info, no count, not starving) are left out. */
  int nkeys = fair || enqueue ? 5 : 3;
  int nargs = extra ? extra : fair ? 8 : enqueue ? 9 : 6;
  if (nargs == 6 && !o->starving)
    nargs = a->held != 0 ? 4 : a->info[0] ? 3 : 2;
  char tk[DL_DERIVED_MAX], hk[DL_DERIVED_MAX], qk[DL_DERIVED_MAX],
      tok[DL_DERIVED_MAX];
  const char *keys[] = {l->key, TOKEN_KEY(l, tk), HANDOFF_KEY(l, hk), qk, tok};
  if (nkeys == 5) {
    if (fair) {
      QUEUE_KEY(l, qk);
      TIMEOUT_KEY(l, tok);
    } else {
      GRANT_QUEUE_KEY(l, qk);
      GRANT_WAITERS_KEY(l, tok);
    }
  }
  char reserve[DL_INT_BUF], stale[DL_INT_BUF], alive[DL_INT_BUF];
  if (nargs >= 4) dl_fmt_ll(count, a->held);
  if (nargs >= 6) dl_fmt_ll(reserve, RESERVE_MS);
  if (nargs >= 7) dl_fmt_ll(stale, l->fair_stale_ms);
  if (nargs >= 9) dl_fmt_ll(alive, 3 * grant_beat(o, o->sent));
  const char *args[] = {lease,
                        l->owner,
                        a->info,
                        count,
                        o->starving ? "1" : "0",
                        reserve,
                        stale,
                        enqueue ? "1" : "0",
                        alive,
                        young,
                        propose};
  if (extra == 14)
    return dl_redis_part_eval(o->R, &o->p, o->end, a, nkeys, keys, args);
  return dl_redis_step_eval(o->R, &o->p, o->end, DL_SCRIPT_LOCK_ACQUIRE, nkeys,
                            keys, nargs, args);
}

int dl_acq_attempt_result(acq_op *o) {
  dl_redis *R = o->R;
  const dl_lock_ref *l = o->a->lock;
  if (o->p.rc != 0) return o->p.rc;
  redisReply *r = o->p.reply;
  o->p.reply = NULL;
  o->reserved = false;
  long long status = -2, value = 0;
  if (r->type == REDIS_REPLY_INTEGER && !is_rw(l)) { /* taken: the token */
    status = 1;
    value = r->integer;
  } else if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2 &&
             r->element[0]->type == REDIS_REPLY_INTEGER &&
             r->element[1]->type == REDIS_REPLY_INTEGER) {
    status = r->element[0]->integer;
    value = r->element[1]->integer;
  }
  /* Found by the reply fuzzer: statuses our scripts never send. */
  if (status < (is_rw(l) ? -1 : 0) || status > 2 ||
      (is_rw(l) && r->elements != 2)) {
    freeReplyObject(r);
    return dl_seterr(R->env.err_owner, DLOCK_EPROTO,
                     "unexpected reply to the acquire");
  }
  if (r->elements >= 3 && r->element[2]->type == REDIS_REPLY_STRING) {
    size_t idl = strlen(R->env.client_id);
    o->reserved = strncmp(r->element[2]->str, R->env.client_id, idl) == 0 &&
                  r->element[2]->str[idl] == ':';
  }
  /* A queued waiter refused: the counter as the attempt found it. */
  if (status == 0 && r->elements >= 4 &&
      r->element[3]->type == REDIS_REPLY_INTEGER &&
      r->element[3]->integer > 0 && (uint64_t)r->element[3]->integer > o->seen)
    o->seen = (uint64_t)r->element[3]->integer;
  freeReplyObject(r);
  if (status == -1)
    return dl_seterr(R->env.err_owner, DLOCK_EDEADLK,
                     "this owner holds the read lock of '%s': release it "
                     "before asking for the write lock",
                     l->name);
  if (status == 0) {
    o->ttl = dl_redis_ttl(value);
    return 0;
  }
  o->tok = (uint64_t)value;
  return (int)status; /* 1 taken, 2 re-entered */
}
