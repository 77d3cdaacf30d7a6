-- semaphore_update.lua: changes the permits of a semaphore (Redisson
-- RSemaphore's release, trySetPermits, addPermits, drainPermits) and tells
-- the waiters how many are available.
-- KEYS[1] the semaphore; KEYS[2] its channel
-- ARGV[1] 'release', 'set' (only if never set), 'add' or 'drain';
-- ARGV[2] permits
-- Returns: release: how many subscribed clients heard it; add: the permits
-- now available; set: 1 set, 0 it already existed; drain: the permits taken
-- away.
-- What dlock refuses (docs/WIRE.md): anything at the name but a number (a
-- string that is not one, a hash, a list...), with a WRONGTYPE error that
-- says what it found, before any write.
do
  local v = redis.pcall('get', KEYS[1])
  local found = type(v) == 'table' and redis.call('type', KEYS[1]).ok or
                (v and not string.match(v, '^%-?%d+$') and
                 'a string that is not a number')
  if found then
    return redis.error_reply('WRONGTYPE ' .. KEYS[1] ..
                             ': not a dlock semaphore: ' .. found)
  end
end
local op, n = ARGV[1], tonumber(ARGV[2])
if op == 'release' then
  local value = redis.call('incrby', KEYS[1], n)
  return redis.call('publish', KEYS[2], value)
end
if op == 'set' then
  if redis.call('exists', KEYS[1]) == 1 then
    return 0
  end
  redis.call('set', KEYS[1], n)
  redis.call('publish', KEYS[2], n)
  return 1
end
if op == 'add' then
  local value = tonumber(redis.call('get', KEYS[1]) or '0') + n
  redis.call('set', KEYS[1], value)
  redis.call('publish', KEYS[2], value)
  return value
end
local value = redis.call('get', KEYS[1])
if value == false then
  return 0
end
redis.call('set', KEYS[1], 0)
return tonumber(value)
