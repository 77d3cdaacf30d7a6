-- lock_cancel.lua: a waiter of the plain lock gives up (timed out, or its
-- client is closing): it leaves dlock's hand-off queue.
-- KEYS[1] the lock hash; KEYS[2] the queue; KEYS[3] the waiters
-- ARGV[1] owner id
-- Returns 1 if the lock was handed to this owner meanwhile (the grant is in
-- flight, or was lost): the caller releases it. Otherwise 0.
if redis.call('hdel', KEYS[3], ARGV[1]) == 1 then
  redis.call('lrem', KEYS[2], 0, ARGV[1])
end
-- (Another type at the name was not granted to it either: 0.)
return redis.pcall('hexists', KEYS[1], ARGV[1]) == 1 and 1 or 0
