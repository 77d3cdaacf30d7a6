-- lock_force_release.lua: deletes the lock whoever holds it (Redisson
-- forceUnlock), wakes the waiters and tells the holder at once. Only a lock
-- of the kind asked for is touched: anything else at the name is refused
-- with a WRONGTYPE error and left as it was.
-- KEYS[1] the lock hash; KEYS[2] the unlock channel; KEYS[3] (fair lock
-- only) the queue: the first waiter is told, on KEYS[2]:<its owner id>
-- ARGV[1] the unlock message ('0', or '1' for a read-write lock, which
-- wakes every waiter); ARGV[2] 'lock', 'rwlock' or 'plain' (the plain
-- string lock): the kind asked for;
-- ARGV[3] the revocation channel: the key's name goes there, for the
-- holder's client to check its hold at once (docs/WIRE.md)
-- Returns 1 if it was held, 0 if not.
local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  return 0
end
local function refuse(what)
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' is ' .. what ..
                           ', not a ' .. (ARGV[2] == 'rwlock' and
                           'read-write lock' or 'lock') .. ': nothing deleted')
end
-- The plain string lock (ARGV[2] 'plain'): a string proves little (any
-- cache value is one), so only a string with a lease counts as a lock:
-- every plain-lock client (dlock, redsync, npm redlock, redis-semaphore)
-- sets one with PX. A string without expiry is refused.
if ARGV[2] == 'plain' then
  if kind ~= 'string' then
    return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' is a ' .. kind ..
                             ', not a plain lock: nothing deleted')
  end
  if redis.call('pttl', KEYS[1]) < 0 then
    return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' is a string ' ..
                             'without a lease, not a plain lock: nothing deleted')
  end
  -- The messages first: a refused one (an ACL) then changes nothing.
  redis.call('publish', KEYS[2], ARGV[1])
  redis.call('publish', ARGV[3], KEYS[1])
  redis.call('del', KEYS[1])
  return 1
end
if kind ~= 'hash' then
  return refuse('a ' .. kind)
end
-- A lock hash holds owner fields "<client id>:<thread>" (a count > 0),
-- dlock's own "dlock:" fields, and for a read-write lock "mode".
local all = redis.call('hgetall', KEYS[1])
local mode, owners = false, 0
for i = 1, #all, 2 do
  local f, v = all[i], all[i + 1]
  if f == 'mode' then
    mode = v
  elseif string.sub(f, 1, 6) ~= 'dlock:' then
    local n = tonumber(v)
    if not string.find(f, ':', 1, true) or not n or n < 1 then
      return refuse('a hash that is not a lock')
    end
    owners = owners + 1
  end
end
if owners == 0 then
  return refuse('a hash that is not a lock')
end
if ARGV[2] == 'rwlock' and not mode then
  return refuse('a lock')
elseif ARGV[2] ~= 'rwlock' and mode then
  return refuse('a read-write lock')
end
local channel = KEYS[2]
if KEYS[3] then
  local first = redis.call('lindex', KEYS[3], 0)
  channel = first and (KEYS[2] .. ':' .. first) or nil
end
if channel then -- the messages first, as above
  redis.call('publish', channel, ARGV[1])
end
redis.call('publish', ARGV[3], KEYS[1])
redis.call('del', KEYS[1])
return 1
