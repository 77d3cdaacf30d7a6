-- rw_release.lua: releases one read or write hold of a read-write lock
-- (Redisson RReadWriteLock's unlock). A force release is
-- lock_force_release.lua's.
-- KEYS[1] the lock hash; KEYS[2] the channel "redisson_rwlock:{name}"
-- ARGV[1] owner id (with ":write" for the writer); ARGV[2] 'read' or
-- 'write'; ARGV[3] lease in ms (a writer's remaining holds)
-- Returns nil if the owner holds nothing (nothing changed), 0 if it still
-- holds (reentrant), 1 if this was its last hold. When the lock becomes
-- free, "0" (after reads) or "1" (after a write: wakes every waiter) is
-- published. A holder's last release also deletes its description
-- ("dlock:info:<owner id>", see rw_acquire.lua).
-- With ARGV[4], KEYS[3] is the release's latch, as in lock_release.lua: the
-- result is kept there for ARGV[4] ms and a retry (ARGV[5] '1') returns it.
-- The times in ms (a writer's lease, the latch's) are checked before any
-- write: one the server refuses would fail the script after the writes
-- before it.
local function bad_ms(v)
  return v and not (#v < 16 and string.find(v, '^[1-9]%d*$'))
end
if bad_ms(ARGV[4]) or (ARGV[2] == 'write' and bad_ms(ARGV[3] or '')) then
  return redis.error_reply('ERR dlock: a time is 1 to 999999999999999 ms, ' ..
                           'not ' .. tostring(ARGV[3]) .. ' or ' ..
                           tostring(ARGV[4]) .. ': nothing changed')
end
local latch = ARGV[4] and KEYS[3]
if latch and ARGV[5] == '1' then
  local done = redis.call('get', latch)
  if done then
    return tonumber(done)
  end
end
local function result(v)
  if latch then
    redis.call('set', latch, v, 'px', ARGV[4])
  end
  return v
end

local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false or redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return nil
end
local held = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
if not held then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] ..
                           ': not a dlock read-write lock: hash')
end
local n = held - 1
local info = 'dlock:info:' .. ARGV[1]
-- What is decided first, the writes after: the message (a refused one, an
-- ACL, then changes nothing), then the derived key (an ACL may refuse it
-- too), then the hash.

if ARGV[2] == 'write' then
  if n > 0 then
    redis.call('pexpire', KEYS[1], ARGV[3])
    redis.call('hset', KEYS[1], ARGV[1], n)
    return result(0)
  end
  -- Only "mode" left once the writer's fields go: the lock is free.
  if redis.call('hlen', KEYS[1]) - 1 -
     redis.call('hexists', KEYS[1], info) == 1 then
    redis.call('publish', KEYS[2], '1')
    redis.call('del', KEYS[1])
  else
    redis.call('hdel', KEYS[1], ARGV[1], info)
    redis.call('hset', KEYS[1], 'mode', 'read') -- the writer's own reads
  end
  return result(1)
end

local prefix
if string.find(KEYS[1], '{', 1, true) then
  prefix = KEYS[1] .. ':'
else
  prefix = '{' .. KEYS[1] .. '}:'
end
-- The fields left once this hold goes.
local left = redis.call('hlen', KEYS[1])
if n == 0 then
  left = left - 1 - redis.call('hexists', KEYS[1], info)
end
local longest, free = -3, true
if left > 1 then
  -- Others (or our own other holds) remain: live as long as the longest.
  local fields = redis.call('hkeys', KEYS[1])
  for _, f in ipairs(fields) do
    local c = tonumber(redis.call('hget', KEYS[1], f))
    if f == ARGV[1] then
      c = n
    end
    if c then
      for i = c, 1, -1 do
        longest = math.max(longest,
          redis.call('pttl', prefix .. f .. ':rwlock_timeout:' .. i))
      end
    end
  end
  free = longest <= 0 and mode ~= 'write'
end
if free then
  redis.call('publish', KEYS[2], '0')
end
redis.call('del', prefix .. ARGV[1] .. ':rwlock_timeout:' .. held)
if free then
  redis.call('del', KEYS[1])
  return result(1)
end
if n == 0 then
  redis.call('hdel', KEYS[1], ARGV[1], info)
else
  redis.call('hset', KEYS[1], ARGV[1], n)
end
if longest > 0 then
  redis.call('pexpire', KEYS[1], longest)
end
return result(n == 0 and 1 or 0)
