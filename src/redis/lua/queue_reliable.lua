-- queue_reliable.lua: a reliable take from the queue KEYS[1]: the value
-- moves (LMOVE, head first) to the consumer's processing list KEYS[3],
-- where it stays until acknowledged (LREM). Each consumer has a lease in
-- the zset KEYS[2] ("{Q}:timeout", member its 16 id bytes, score the
-- lease's end by the server's clock), renewed by its client's watchdog as
-- a permit's. First, the values of every consumer whose lease has ended
-- go back to the head of KEYS[1] in the order they were taken, and the
-- consumer is forgotten.
-- ARGV[1] the consumer's id in hex, ARGV[2] the lease in ms, ARGV[3] the
-- name of a consumer's processing list without its hex id.
-- Returns {value or nil, -1}. A key of another type: an error, nothing
-- written.
if not (string.find(ARGV[1], '^%x%x+$') and #ARGV[1] % 2 == 0 and
        string.find(ARGV[2], '^[1-9]%d*$') and #ARGV[2] < 16) then
  return redis.error_reply('ERR dlock: queue: bad consumer id or lease: ' ..
                           'nothing changed')
end
local want = {'list', 'zset', 'list'}
for i = 1, 3 do
  local t = redis.call('type', KEYS[i]).ok
  if t ~= 'none' and t ~= want[i] then
    return redis.error_reply('WRONGTYPE ' .. KEYS[i] .. ' holds a ' .. t)
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead = redis.call('zrangebyscore', KEYS[2], '-inf', now)
for _, m in ipairs(dead) do
  local hex = m:gsub('.', function(c) return string.format('%02x', c:byte()) end)
  local list = ARGV[3] .. hex
  if redis.call('type', list).ok == 'list' then
    while redis.call('lmove', list, KEYS[1], 'LEFT', 'LEFT') do end
  end
  redis.call('zrem', KEYS[2], m)
end
local id = ARGV[1]:gsub('..', function(c)
  return string.char(tonumber(c, 16))
end)
redis.call('zadd', KEYS[2], now + tonumber(ARGV[2]), id)
local v = redis.call('lmove', KEYS[1], KEYS[3], 'LEFT', 'LEFT')
return {v, -1}
