-- semaphore_update.lua: changes the permits of a semaphore (Redisson
-- RSemaphore's release, trySetPermits, addPermits, drainPermits) and tells
-- the waiters how many are available.
-- KEYS[1] the semaphore; KEYS[2] its channel
-- ARGV[1] 'release', 'set' (only if never set), 'add' or 'drain';
-- ARGV[2] permits
-- Returns: release: how many subscribed clients heard it; add: 0; set: 1
-- set, 0 it already existed; drain: the permits taken away. A count the
-- API's int cannot carry is refused before any write: the status
-- 'ERANGE <count>' when a release or an add would move the count past
-- 2147483647 (or -2147483648), or a drain finds it there.
-- What dlock refuses (docs/WIRE.md): anything at the name but a number (a
-- string that is not one, a hash, a list...), with a WRONGTYPE error that
-- says what it found, before any write.
-- The count as found (false: none), read once for every operation.
local found = redis.pcall('get', KEYS[1])
do
  local v = found
  local what = type(v) == 'table' and redis.call('type', KEYS[1]).ok or
               (v and not string.match(v, '^%-?%d+$') and
                'a string that is not a number')
  if what then
    return redis.error_reply('WRONGTYPE ' .. KEYS[1] ..
                             ': not a dlock semaphore: ' .. what)
  end
end
local op, n = ARGV[1], tonumber(ARGV[2])
-- The arguments, before any write; and each message goes before the write
-- it tells of: a server that refuses it (an ACL without the channel) then
-- fails the script before anything changed.
if not ((op == 'release' or op == 'set' or op == 'add' or op == 'drain') and
        (op == 'drain' or (string.find(ARGV[2] or '', '^%-?%d+$') and
                           #ARGV[2] < 16))) then
  return redis.error_reply('ERR dlock: semaphore: bad arguments for ' ..
                           tostring(op) .. ': nothing changed')
end

local function beyond(value, change)
  return (change > 0 and value + change > 2147483647) or
         (change < 0 and value + change < -2147483648)
end

if op == 'release' then
  local cur = found or '0'
  if tonumber(cur) and beyond(tonumber(cur), n) then
    return {ok = 'ERANGE ' .. cur}
  end
  local heard = redis.call('publish', KEYS[2], tonumber(cur) + n)
  redis.call('incrby', KEYS[1], n)
  return heard
end
if op == 'set' then
  if found then
    return 0
  end
  redis.call('publish', KEYS[2], n)
  redis.call('set', KEYS[1], n)
  return 1
end
if op == 'add' then
  local cur = found or '0'
  if beyond(tonumber(cur), n) then
    return {ok = 'ERANGE ' .. cur}
  end
  local value = tonumber(cur) + n
  redis.call('publish', KEYS[2], value)
  redis.call('set', KEYS[1], value)
  return 0
end
local value = found
if value == false then
  return 0
end
local count = tonumber(value)
if count and (count > 2147483647 or count < -2147483648) then
  return {ok = 'ERANGE ' .. value}
end
redis.call('set', KEYS[1], 0)
return tonumber(value)
