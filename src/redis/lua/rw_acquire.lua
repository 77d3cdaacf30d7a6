-- rw_acquire.lua: takes a read or the write lock of a read-write lock
-- (Redisson RReadWriteLock's layout).
-- KEYS[1] the lock hash: 'mode' -> 'read' or 'write', each reader's owner
-- id -> its read holds, the writer's "<owner id>:write" -> its write holds
-- KEYS[2] the fencing-token counter (the writer's)
-- ARGV[1] lease in ms; ARGV[2] owner id (the reader's or the writer's,
-- with ":write"); ARGV[3] 'read' or 'write'; ARGV[4] the writer's owner id
-- of the same thread (reads: a writer may also read, which downgrades);
-- ARGV[5] the reader's owner id of the same thread (writes: a reader asking
-- to write is refused, as it could never get it)
-- ARGV[6] the holder's description ('' = none), stored at a first hold as
-- field "dlock:info:<owner id>" = "<server ms>:<description>" (one per
-- holder, as readers share the hash; never a bare number, since Redisson's
-- read unlock and renewal loop over every field that holds one)
-- Each read hold has its own lease key "{name}:<owner>:rwlock_timeout:<n>",
-- and the hash lives as long as the longest of them (Redisson's scheme).
-- Returns {1, token} taken, {2, token} re-entered, {0, pttl} held by
-- others, {-1, 0} a reader asked for the write lock (nothing changed).
-- What dlock refuses (docs/WIRE.md): anything at the name but a hash with
-- a "mode" of 'read' or 'write' (a plain lock, an application's hash, a
-- string...), with a WRONGTYPE error that says what it found, before any
-- write. A hash without "mode" costs one EXISTS, on the free path only.
local function wrong(found)
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] ..
                           ': not a dlock read-write lock: ' .. found)
end

local function timeout_prefix(owner)
  if string.find(KEYS[1], '{', 1, true) then
    return KEYS[1] .. ':' .. owner .. ':rwlock_timeout'
  end
  return '{' .. KEYS[1] .. '}:' .. owner .. ':rwlock_timeout'
end

-- The writer's token, or an error reply when the counter cannot give one
-- (nothing written): another type there is refused as above, any other
-- error (OOM, READONLY) goes back as the server gave it.
local function token(fresh)
  if not fresh then
    return tonumber(redis.call('get', KEYS[2]) or '0')
  end
  -- The counter's lifetime and its restart: as in lock_acquire.lua.
  local ttl = math.max(86400000, tonumber(ARGV[1]))
  local t = redis.pcall('incr', KEYS[2])
  if type(t) == 'table' then
    if string.find(t.err, 'WRONGTYPE', 1, true) or
       string.find(t.err, 'not an integer', 1, true) then
      return wrong(KEYS[2] .. ' is a ' .. redis.call('type', KEYS[2]).ok)
    end
    return t
  end
  if t == 1 then
    -- Missing (expired or lost): restart above every earlier token.
    local now = redis.call('time')
    t = tonumber(now[1]) * 1000000 + tonumber(now[2]) + 1000000
    redis.call('set', KEYS[2], string.format('%.0f', t), 'px', ttl)
  else
    redis.call('pexpire', KEYS[2], ttl)
  end
  return t
end

local function describe()
  if ARGV[6] and ARGV[6] ~= '' then
    local now = redis.call('time')
    redis.call('hset', KEYS[1], 'dlock:info:' .. ARGV[2],
               string.format('%.0f', now[1] * 1000 + math.floor(now[2] / 1000))
               .. ':' .. ARGV[6])
  end
end

-- The lease first: a whole number of ms, 1 to 15 digits (under 31 000
-- years). A lease the server cannot add to its clock fails PEXPIRE or SET
-- PX ("invalid expire time"), and by then the hold would be written: a
-- read hold without a lease, which blocks writers for ever.
if not string.find(ARGV[1], '^[1-9]%d*$') or #ARGV[1] > 15 then
  return redis.error_reply('ERR dlock: a lease is 1 to 999999999999999 ' ..
                           'ms, not ' .. ARGV[1] .. ': nothing changed')
end
local mode = redis.pcall('hget', KEYS[1], 'mode')
if type(mode) == 'table' then
  return wrong(redis.call('type', KEYS[1]).ok)
elseif mode == false and redis.call('exists', KEYS[1]) == 1 then
  return wrong('hash') -- an application's, or a lock of another kind
elseif mode and mode ~= 'read' and mode ~= 'write' then
  return wrong('hash')
end
local lease = tonumber(ARGV[1])
if ARGV[3] == 'read' then
  if mode == false or mode == 'read' or
     (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[4]) == 1) then
    -- The hold's own lease key first: if it fails (an ACL on the derived
    -- key, the server's memory), nothing else is written.
    local c = redis.call('hget', KEYS[1], ARGV[2])
    local n = tonumber(c or '0')
    if not n then
      return wrong('hash')
    end
    n = n + 1
    redis.call('set', timeout_prefix(ARGV[2]) .. ':' .. n, 1, 'px', ARGV[1])
    if mode == false then
      redis.call('hset', KEYS[1], 'mode', 'read')
    end
    redis.call('hset', KEYS[1], ARGV[2], n)
    if n == 1 then
      describe()
    end
    local ttl = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], math.max(ttl, lease))
    return {n == 1 and 1 or 2, 0}
  end
  return {0, redis.call('pttl', KEYS[1])}
end

if mode == false then
  local t = token(true) -- first: it may refuse
  if type(t) == 'table' then
    return t
  end
  redis.call('hset', KEYS[1], 'mode', 'write', ARGV[2], 1)
  describe()
  redis.call('pexpire', KEYS[1], lease)
  return {1, t}
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  -- (Redisson adds the lease to what is left; dlock sets it, as a lock.)
  redis.call('pexpire', KEYS[1], math.max(redis.call('pttl', KEYS[1]), lease))
  return {2, token(false)}
end
if mode == 'read' and redis.call('hexists', KEYS[1], ARGV[5]) == 1 then
  return {-1, 0}
end
return {0, redis.call('pttl', KEYS[1])}
