-- lock_renew.lua: the watchdog's batched renewal, of locks and of permits.
-- KEYS[i] a lock hash (also of a read-write lock), a plain string lock
-- (value = owner id), or the timeout set of a permit-expirable semaphore;
-- ARGV[1] lease in ms, or 0 to check only (nothing is extended);
-- ARGV[i + 1] the owner of KEYS[i] (for a permit,
-- "<client id>:<permit id in hex>")
-- Returns an array: 1 where the owner still held KEYS[i] (and its lease was
-- extended), 0 where the hold is gone (expired, taken, or the key is of
-- another type). A lost lock or permit is never re-created.
-- The lease is checked before any write (one the server refuses would
-- fail the batch halfway): 0, or a whole number of ms, 1 to 15 digits.
if ARGV[1] ~= '0' and not (#ARGV[1] < 16 and string.find(ARGV[1], '^[1-9]%d*$'))
then
  return redis.error_reply('ERR dlock: a lease is 1 to 999999999999999 ms, ' ..
                           'not ' .. ARGV[1] .. ': nothing changed')
end
local res = {}
local t, now
local check = ARGV[1] == '0'
for i = 1, #KEYS do
  -- The type first: an error, even under pcall, counts in the server's
  -- errorstats (WRONGTYPE on a plain lock's string would look like a bug).
  local kind = redis.call('type', KEYS[i]).ok
  local held = kind == 'hash' and redis.call('hexists', KEYS[i], ARGV[i + 1])
               or kind
  if held == 1 and check then
    res[i] = 1
  elseif held == 1 then
    redis.call('pexpire', KEYS[i], ARGV[1])
    -- A reader of a read-write lock: its holds' own lease keys too.
    local owner = ARGV[i + 1]
    if string.sub(owner, -6) ~= ':write' and
       redis.call('hexists', KEYS[i], 'mode') == 1 then
      local prefix = string.find(KEYS[i], '{', 1, true) and (KEYS[i] .. ':')
                     or ('{' .. KEYS[i] .. '}:')
      local n = tonumber(redis.call('hget', KEYS[i], owner)) or 0
      for j = 1, n do
        redis.call('pexpire', prefix .. owner .. ':rwlock_timeout:' .. j,
                   ARGV[1])
      end
    end
    res[i] = 1
  elseif kind == 'string' then
    -- A plain string lock: held while its value is the owner id.
    if redis.call('get', KEYS[i]) == ARGV[i + 1] then
      if not check then
        redis.call('pexpire', KEYS[i], ARGV[1])
      end
      res[i] = 1
    else
      res[i] = 0
    end
  elseif kind == 'zset' then
    -- A permit: extend its lease if it has not ended.
    if not now then
      t = redis.call('time')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    local hex = string.match(ARGV[i + 1], '([0-9a-f]+)$')
    local id = hex and hex:gsub('..', function(h)
      return string.char(tonumber(h, 16))
    end)
    local ends = id and redis.call('zscore', KEYS[i], id)
    if ends and tonumber(ends) > now then
      if not check then
        redis.call('zadd', KEYS[i], now + tonumber(ARGV[1]), id)
      end
      res[i] = 1
    else
      res[i] = 0
    end
  else
    res[i] = 0
  end
end
return res
