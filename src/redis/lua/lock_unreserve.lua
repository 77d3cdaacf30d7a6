-- lock_unreserve.lua: a starving waiter that gives up drops its hand-off
-- reservation (see lock_acquire.lua), so the lock is free for the others.
-- KEYS[1] the reservation; ARGV[1] the waiter's owner id
-- Returns 1 if it was ours and is gone, else 0.
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
