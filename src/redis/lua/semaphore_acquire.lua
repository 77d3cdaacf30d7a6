-- semaphore_acquire.lua: takes permits if enough are available (Redisson
-- RSemaphore's tryAcquire).
-- KEYS[1] the semaphore (a string: permits available)
-- ARGV[1] permits wanted (> 0)
-- Returns 1 taken, 0 not enough (or the semaphore was never set).
local value = redis.call('get', KEYS[1])
if value ~= false and tonumber(value) >= tonumber(ARGV[1]) then
  redis.call('decrby', KEYS[1], ARGV[1])
  return 1
end
return 0
