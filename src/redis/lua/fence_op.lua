-- fence_op.lua: a fenced resource's read and delete (dlock_fence_get,
-- dlock_fence_del; the layout: fence_set.lua). KEYS[1] the resource,
-- ARGV[1] 'get' or 'del'. Returns {0} none there; a get {1, fence, value};
-- a del {1} (deleted). A key that is not a fenced resource is refused with
-- WRONGTYPE and left as it is.
local t = redis.call('type', KEYS[1]).ok
if t == 'none' then
  return {0}
end
local cur = t == 'hash' and redis.call('hlen', KEYS[1]) == 2 and
            redis.call('hexists', KEYS[1], 'value') == 1 and
            redis.call('hget', KEYS[1], 'fence')
if not cur or not string.match(cur, '^[1-9]%d*$') then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ': not a dlock ' ..
                           'fenced resource (a ' .. t .. ')')
end
if ARGV[1] == 'del' then
  redis.call('del', KEYS[1])
  return {1}
end
return {1, cur, redis.call('hget', KEYS[1], 'value')}
