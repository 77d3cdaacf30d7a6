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
local function timeout_prefix(owner)
  if string.find(KEYS[1], '{', 1, true) then
    return KEYS[1] .. ':' .. owner .. ':rwlock_timeout'
  end
  return '{' .. KEYS[1] .. '}:' .. owner .. ':rwlock_timeout'
end

local function token(fresh)
  if not fresh then
    return tonumber(redis.call('get', KEYS[2]) or '0')
  end
  -- The counter's lifetime and its restart: as in lock_acquire.lua.
  local ttl = math.max(86400000, tonumber(ARGV[1]))
  local t = redis.call('incr', KEYS[2])
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

local mode = redis.call('hget', KEYS[1], 'mode')
local lease = tonumber(ARGV[1])
if ARGV[3] == 'read' then
  if mode == false or mode == 'read' or
     (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[4]) == 1) then
    if mode == false then
      redis.call('hset', KEYS[1], 'mode', 'read')
    end
    local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    if n == 1 then
      describe()
    end
    redis.call('set', timeout_prefix(ARGV[2]) .. ':' .. n, 1, 'px', lease)
    local ttl = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], math.max(ttl, lease))
    return {n == 1 and 1 or 2, 0}
  end
  return {0, redis.call('pttl', KEYS[1])}
end

if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'write', ARGV[2], 1)
  describe()
  redis.call('pexpire', KEYS[1], lease)
  return {1, token(true)}
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
