-- permits.lua: the permit-expirable semaphore (Redisson
-- RPermitExpirableSemaphore's layout). Each permit taken has an id, a member
-- of the timeout set scored with the time its lease ends; permits whose lease
-- ended go back to the count at the next call, so a crashed holder's permits
-- come back.
-- KEYS[1] the permits available (string); KEYS[2] the timeout set (zset of
-- 16-byte ids); KEYS[3] the channel
-- ARGV[1] 'acquire', 'release', 'force', 'set', 'add' or 'available'
-- acquire: ARGV[2] lease in ms, ARGV[3] the new id (32 hex digits).
--   Returns {1, 0} taken, or {0, ms until the next lease ends, -1 if none}.
-- release: ARGV[2] the id. Returns 1 released (2 if some client heard the
--   release's message, so others likely wait), -1 released but its lease had
--   already ended, 0 no such permit (never issued, released, or taken back).
-- force: ARGV[2] the id, ARGV[3] the revocation channel: releases the permit
--   whoever holds it and names KEYS[2] there, so that its holder's client
--   checks its permits at once. Returns 1 released, 0 no such permit.
-- set: ARGV[2] permits, only if never set: 1 set, 0 not. add: ARGV[2]
--   permits (may be negative): 0, or the status 'ERANGE <available>' (and
--   nothing changed) when the permits, with those out, would go past an
--   int. available: the permits available.
-- Time is the server's, in ms (Redisson uses each client's clock).
-- What dlock refuses (docs/WIRE.md): anything at the name but a number (a
-- string that is not one, a hash, a list...), with a WRONGTYPE error that
-- says what it found, before any write.
do
  local v = redis.pcall('get', KEYS[1])
  local found = type(v) == 'table' and redis.call('type', KEYS[1]).ok or
                (v and not string.match(v, '^%-?%d+$') and
                 'a string that is not a number')
  if not found then -- the permits' leases
    local z = redis.call('type', KEYS[2]).ok
    found = z ~= 'none' and z ~= 'zset' and (KEYS[2] .. ' is a ' .. z)
  end
  if found then
    return redis.error_reply('WRONGTYPE ' .. KEYS[1] ..
                             ': not a dlock semaphore: ' .. found)
  end
end
-- The arguments, before any write (the expired permits' return below is
-- one): a script that would fail halfway is refused here instead.
do
  local op, a2, a3 = ARGV[1], ARGV[2] or '', ARGV[3] or ''
  local hex = '^%x%x+$'
  local ok = (op == 'acquire' and string.find(a2, '^%-?%d+$') and
              #a2 < 16 and string.find(a3, hex) and #a3 % 2 == 0) or
             ((op == 'release' or op == 'force') and
              string.find(a2, hex) and #a2 % 2 == 0) or
             ((op == 'set' or op == 'add') and string.find(a2, '^%-?%d+$') and
              #a2 < 16) or op == 'available'
  if not ok then
    return redis.error_reply('ERR dlock: permits: bad arguments for ' ..
                             tostring(op) .. ': nothing changed')
  end
end
local NON_EXPIRABLE = 922337203685477
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function bin(hex)
  return (hex:gsub('..', function(h) return string.char(tonumber(h, 16)) end))
end

-- Returns how many clients heard it.
local function publish(value)
  if tonumber(value) > 0 then
    return redis.call('publish', KEYS[3], value)
  end
  return 0
end

-- Permits whose lease ended come back.
local expired = redis.call('zrangebyscore', KEYS[2], 0, now, 'limit', 0, 1000)
if #expired > 0 then
  -- The message first: a server that refuses it (an ACL without the
  -- channel) fails the script before anything changed.
  publish(tonumber(redis.call('get', KEYS[1]) or '0') + #expired)
  redis.call('zrem', KEYS[2], unpack(expired))
  redis.call('incrby', KEYS[1], #expired)
end

local op = ARGV[1]
if op == 'acquire' then
  local value = redis.call('get', KEYS[1])
  if value ~= false and tonumber(value) >= 1 then
    redis.call('decrby', KEYS[1], 1)
    local lease = tonumber(ARGV[2])
    redis.call('zadd', KEYS[2], lease > 0 and now + lease or NON_EXPIRABLE,
               bin(ARGV[3]))
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 then
      redis.call('pexpire', KEYS[2], ttl)
    end
    return {1, 0}
  end
  local first = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')
  if first[1] ~= nil and tonumber(first[2]) ~= NON_EXPIRABLE then
    return {0, tonumber(first[2]) - now}
  end
  return {0, -1}
end
if op == 'release' or op == 'force' then
  local id = bin(ARGV[2])
  local ends = redis.call('zscore', KEYS[2], id)
  if not ends then
    return 0
  end
  -- The messages first, as above.
  local heard = publish(tonumber(redis.call('get', KEYS[1]) or '0') + 1)
  if op == 'force' then
    redis.call('publish', ARGV[3], KEYS[2])
  end
  redis.call('zrem', KEYS[2], id)
  redis.call('incrby', KEYS[1], 1)
  if op == 'force' then
    return 1
  end
  if tonumber(ends) <= now then
    return -1
  end
  return heard > 0 and 2 or 1
end
if op == 'set' then
  if redis.call('exists', KEYS[1]) == 1 then
    return 0
  end
  publish(ARGV[2])
  redis.call('set', KEYS[1], ARGV[2])
  return 1
end
if op == 'add' then
  -- Past an int, counting the permits out (they all come back): refused
  -- before any write, as semaphore_update.lua's add.
  local cur, n = redis.call('get', KEYS[1]) or '0', tonumber(ARGV[2])
  local total = tonumber(cur) + redis.call('zcard', KEYS[2])
  if (n > 0 and total + n > 2147483647) or
     (n < 0 and tonumber(cur) + n < -2147483648) then
    return {ok = 'ERANGE ' .. cur}
  end
  local value = tonumber(cur) + n
  publish(value)
  redis.call('set', KEYS[1], value)
  return 0
end
return tonumber(redis.call('get', KEYS[1]) or '0')
