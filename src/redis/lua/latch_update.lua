-- latch_update.lua: sets or counts down a count-down latch (Redisson
-- RCountDownLatch's trySetCount and countDown).
-- KEYS[1] the latch (a string: the count); KEYS[2] its channel
-- ARGV[1] 'set' or 'down'; ARGV[2] the count ('set')
-- Returns: set: 1 set, 0 a count is already running; down: the count
-- left (the key goes at zero, and "0" is published), or -1 if there was
-- no count to count down (nothing changed).
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
                             ': not a dlock count-down latch: ' .. found)
  end
end
-- The arguments, before any write; and each message goes before the write
-- it tells of: a server that refuses it (an ACL without the channel) then
-- fails the script before anything changed.
if not ((ARGV[1] == 'set' and string.find(ARGV[2] or '', '^[1-9]%d*$') and
         #ARGV[2] < 16) or ARGV[1] == 'down') then
  return redis.error_reply('ERR dlock: latch: bad arguments for ' ..
                           tostring(ARGV[1]) .. ': nothing changed')
end
if ARGV[1] == 'set' then
  if redis.call('exists', KEYS[1]) == 1 then
    return 0
  end
  redis.call('publish', KEYS[2], '1')
  redis.call('set', KEYS[1], ARGV[2])
  return 1
end
local value = tonumber(redis.call('get', KEYS[1]) or '0')
if value <= 0 then
  return -1
end
value = value - 1
if value <= 0 then
  redis.call('publish', KEYS[2], '0')
  redis.call('del', KEYS[1])
else
  redis.call('decr', KEYS[1])
end
return value
