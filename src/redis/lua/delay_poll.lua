-- delay_poll.lua: moves every element of Redisson's RDelayedQueue layout
-- that is due by the server's clock (TIME) to the destination list, in
-- batches of 100 (at most ARGV[2] elements a call), then pops one value
-- from it. KEYS[1] the destination list Q, KEYS[2] the zset
-- redisson_delay_queue_timeout:{Q} (scored by due epoch ms), KEYS[3] the
-- list redisson_delay_queue:{Q}. ARGV[1] 'lpop', 'rpop', or '' (move only).
-- Elements arrive in Q as bare values, in order of due time, as Redisson's
-- own transfer (pushTaskAsync) moves them, so either may run beside the
-- other. Returns {value or nil, ms until the next element is due (0: more
-- are due now, -1: none waits)}. A key of another type: an error, nothing
-- written.
local pop = string.lower(ARGV[1])
if not ((pop == 'lpop' or pop == 'rpop' or pop == '') and
        string.find(ARGV[2], '^[1-9]%d*$')) then
  return redis.error_reply('ERR dlock: delayed queue: bad arguments: ' ..
                           'nothing changed')
end
for i = 1, 3 do
  local t = redis.call('type', KEYS[i]).ok
  local want = i == 2 and 'zset' or 'list'
  if t ~= 'none' and t ~= want then
    return redis.error_reply('WRONGTYPE ' .. KEYS[i] .. ' holds a ' .. t)
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit = tonumber(ARGV[2])
local moved = 0
while moved < limit do
  local due = redis.call('zrangebyscore', KEYS[2], 0, now, 'limit', 0, 100)
  if #due == 0 then break end
  for _, v in ipairs(due) do
    local _, value = struct.unpack('Bc0Lc0', v)
    redis.call('rpush', KEYS[1], value)
    redis.call('lrem', KEYS[3], 1, v)
  end
  redis.call('zrem', KEYS[2], unpack(due))
  moved = moved + #due
end
local got = false
if pop ~= '' then got = redis.call(pop, KEYS[1]) end
local wait = -1
local head = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')
if head[1] then wait = math.max(0, tonumber(head[2]) - now) end
return {got, wait}
