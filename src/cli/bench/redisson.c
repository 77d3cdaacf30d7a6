/* redisson.c: Redisson's lock cycle as a baseline, run against the same
 * server as dlock's own: the lock script of RFencedLock (RLock's, with the
 * fencing token's INCR), the unlock script of Redisson 3.24 and later
 * (with its idempotence latch) and the client's DEL of that latch. They
 * are written here from Redisson's documented behaviour
 * (../shared/reference/redisson.md, docs/WIRE.md), command for command:
 *   lock:   EXISTS (HEXISTS when taken), INCR, HINCRBY, PEXPIRE;
 *   unlock: GET latch, HEXISTS, HINCRBY -1, then DEL and PUBLISH and
 *           SET latch PX (or PEXPIRE and SET latch on a re-entry);
 *   then:   DEL latch.
 * The cost gate (tests/test_cost.sh) counts the same cycle; the ceiling
 * that pipelines it is in baseline.c. Needs hiredis only. */
#include "redisson.h"

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* KEYS[1] the lock hash, KEYS[2] the token counter; ARGV[1] the lease in
 * ms, ARGV[2] the owner. {-1, token} taken, {pttl, -1} held by another. */
const char bench_redisson_lock_lua[] =
    "if redis.call('exists', KEYS[1]) == 0 or "
    "redis.call('hexists', KEYS[1], ARGV[2]) == 1 then "
    "local t = redis.call('incr', KEYS[2]); "
    "redis.call('hincrby', KEYS[1], ARGV[2], 1); "
    "redis.call('pexpire', KEYS[1], ARGV[1]); "
    "return {-1, t}; "
    "end; "
    "return {redis.call('pttl', KEYS[1]), -1};";

/* KEYS[1] the lock hash, KEYS[2] its channel, KEYS[3] the request's
 * latch; ARGV[1] the message, ARGV[2] the lease, ARGV[3] the owner,
 * ARGV[4] the publish command (Redisson passes PUBLISH or SPUBLISH, for
 * sharded channels since 3.22), ARGV[5] the latch's life in ms. 1 freed,
 * 0 still held, nil not the owner's; a latch already set answers what it
 * holds. */
const char bench_redisson_unlock_lua[] =
    "local v = redis.call('get', KEYS[3]); "
    "if v ~= false then return tonumber(v); end; "
    "if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil; end; "
    "local n = redis.call('hincrby', KEYS[1], ARGV[3], -1); "
    "if n > 0 then "
    "redis.call('pexpire', KEYS[1], ARGV[2]); "
    "redis.call('set', KEYS[3], 0, 'px', ARGV[5]); "
    "return 0; "
    "end; "
    "redis.call('del', KEYS[1]); "
    "redis.call(ARGV[4], KEYS[2], ARGV[1]); "
    "redis.call('set', KEYS[3], 1, 'px', ARGV[5]); "
    "return 1;";

int bench_redisson_load(struct redisContext *c, char lock_sha[41],
                        char unlock_sha[41]) {
  const char *body[2] = {bench_redisson_lock_lua, bench_redisson_unlock_lua};
  char *sha[2] = {lock_sha, unlock_sha};
  for (int i = 0; i < 2; i++) {
    redisReply *r = redisCommand(c, "SCRIPT LOAD %s", body[i]);
    bool ok = r && r->type == REDIS_REPLY_STRING && r->len == 40;
    if (ok) memcpy(sha[i], r->str, 41);
    if (r) freeReplyObject(r);
    if (!ok) return -1;
  }
  return 0;
}

int bench_redisson_format(char **out, const char *lock_sha,
                          const char *unlock_sha, const char *key) {
  char token[160], chan[160], latch[192];
  snprintf(token, sizeof token, "redisson_lock_token:{%s}", key);
  snprintf(chan, sizeof chan, "redisson_lock__channel:{%s}", key);
  snprintf(latch, sizeof latch,
           "redisson_unlock_latch:{%s}:0123456789abcdef0123456789abcdef", key);
  const char *owner = "00000000-0000-0000-0000-000000000000:1";
  char *cmd[3] = {NULL, NULL, NULL};
  int len[3];
  len[0] = redisFormatCommand(&cmd[0], "EVALSHA %s 2 %s %s 30000 %s", lock_sha,
                              key, token, owner);
  /* The latch lives 1 ms here, not Redisson's 16-20 s, so that batches
   * sent again with the same request id do not find it set; the client
   * DELs it at once anyway. */
  len[1] =
      redisFormatCommand(&cmd[1], "EVALSHA %s 3 %s %s %s 0 30000 %s publish 1",
                         unlock_sha, key, chan, latch, owner);
  len[2] = redisFormatCommand(&cmd[2], "DEL %s", latch);
  int total = -1;
  if (len[0] > 0 && len[1] > 0 && len[2] > 0) {
    *out = malloc((size_t)len[0] + (size_t)len[1] + (size_t)len[2]);
    if (*out) {
      memcpy(*out, cmd[0], (size_t)len[0]);
      memcpy(*out + len[0], cmd[1], (size_t)len[1]);
      memcpy(*out + len[0] + len[1], cmd[2], (size_t)len[2]);
      total = len[0] + len[1] + len[2];
    }
  }
  for (int i = 0; i < 3; i++)
    redisFreeCommand(cmd[i]);
  return total;
}
