-- fair_cancel.lua: a waiter of a fair lock gives up (Redisson RFairLock's
-- acquireFailed): it leaves the queue, and if it was first and the lock is
-- free, the next waiter is told at once rather than at its next heartbeat.
-- KEYS[1] the lock hash; KEYS[2] the unlock channel (prefix of the waiters'
-- channels); KEYS[3] the queue; KEYS[4] the waiters' timeouts
-- ARGV[1] owner id; ARGV[2] the unlock message
-- Returns 1 if it was queued, 0 if not.
-- The message first (a refused one, an ACL, then changes nothing): to the
-- waiter after this one, who is first once it has gone.
local first = redis.call('lindex', KEYS[3], 0)
if first == ARGV[1] and redis.call('exists', KEYS[1]) == 0 then
  local next = redis.call('lindex', KEYS[3], 1)
  if next and next ~= ARGV[1] then
    redis.call('publish', KEYS[2] .. ':' .. next, ARGV[2])
  end
end
local removed = redis.call('lrem', KEYS[3], 0, ARGV[1])
redis.call('zrem', KEYS[4], ARGV[1])
return removed > 0 and 1 or 0
