-- semaphore_acquire.lua: takes permits if enough are available (Redisson
-- RSemaphore's tryAcquire).
-- KEYS[1] the semaphore (a string: permits available)
-- ARGV[1] permits wanted (> 0)
-- Returns 1 taken, 0 not enough (or the semaphore was never set).
-- What dlock refuses (docs/WIRE.md): anything at the name but a number (a
-- string that is not one, a hash, a list...), with a WRONGTYPE error that
-- says what it found, before any write.
local v = redis.pcall('get', KEYS[1])
do
  local found = type(v) == 'table' and redis.call('type', KEYS[1]).ok or
                (v and not string.match(v, '^%-?%d+$') and
                 'a string that is not a number')
  if found then
    return redis.error_reply('WRONGTYPE ' .. KEYS[1] ..
                             ': not a dlock semaphore: ' .. found)
  end
end
local value = v
if value ~= false and tonumber(value) >= tonumber(ARGV[1]) then
  redis.call('decrby', KEYS[1], ARGV[1])
  return 1
end
return 0
