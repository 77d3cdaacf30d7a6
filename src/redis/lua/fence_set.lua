-- fence_set.lua: a fenced resource's guarded write (dlock_fence_set): the
-- hash KEYS[1], {fence = the highest token that wrote it, value = the
-- bytes}, takes the value ARGV[2] (hex) with the fence ARGV[1] only if
-- ARGV[1] is not below its fence (none there: fence 0). With KEYS[2]
-- (dlock_fence_set_held), only if the lock at KEYS[2] is still held by
-- ARGV[3] as well: a hash with the owner's field (the reentrant, fair and
-- read-write locks), or a string whose value is the owner (the plain lock).
-- Tokens are decimal strings compared as numbers of any size (a Lua number
-- would round tokens past 2^53).
-- Returns {1, fence} written, {0, fence} refused (a higher fence), {-1,
-- fence} the lock is not held by ARGV[3]; a key that is not a fenced
-- resource is refused with WRONGTYPE. Nothing changes unless written.
local function below(a, b)
  if #a ~= #b then
    return #a < #b
  end
  return a < b
end
local t = redis.call('type', KEYS[1]).ok
local cur = '0'
if t ~= 'none' then
  cur = t == 'hash' and redis.call('hlen', KEYS[1]) == 2 and
        redis.call('hexists', KEYS[1], 'value') == 1 and
        redis.call('hget', KEYS[1], 'fence')
  if not cur or not string.match(cur, '^[1-9]%d*$') then
    return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ': not a dlock ' ..
                             'fenced resource (a ' .. t .. ')')
  end
end
if KEYS[2] then
  local lt = redis.call('type', KEYS[2]).ok
  local held = (lt == 'hash' and
                redis.call('hexists', KEYS[2], ARGV[3]) == 1) or
               (lt == 'string' and redis.call('get', KEYS[2]) == ARGV[3])
  if not held then
    return {-1, cur}
  end
end
if below(ARGV[1], cur) then
  return {0, cur}
end
local v = string.gsub(ARGV[2], '%x%x', function(h)
  return string.char(tonumber(h, 16))
end)
redis.call('hset', KEYS[1], 'fence', ARGV[1], 'value', v)
return {1, ARGV[1]}
