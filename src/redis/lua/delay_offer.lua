-- delay_offer.lua: offers a value to Redisson's RDelayedQueue layout, due
-- ARGV[1] ms from now by the server's clock (TIME), not the client's.
-- KEYS[1] the destination list Q (its type is checked: nothing is written
-- on a key of another type), KEYS[2] redisson_delay_queue_timeout:{Q} (zset
-- scored by due epoch ms), KEYS[3] redisson_delay_queue:{Q} (insertion
-- order), KEYS[4] redisson_delay_queue_channel:{Q} (Redisson's transfer
-- tasks hear the new head's due time), KEYS[5] dlock_queue_channel:{Q}
-- (wakes a dlock poller, which moves what is due).
-- ARGV[2] the element's random id, ARGV[3] the value, both in hex (the
-- arguments are C strings; the value may hold any byte).
-- Each element is packed as Redisson packs it: struct.pack('Bc0Lc0', 8,
-- id, #value, value). Returns the due time (epoch ms).
local function unhex(h)
  return (h:gsub('..', function(c) return string.char(tonumber(c, 16)) end))
end
for i = 1, 3 do
  local t = redis.call('type', KEYS[i]).ok
  local want = i == 2 and 'zset' or 'list'
  if t ~= 'none' and t ~= want then
    return redis.error_reply('WRONGTYPE ' .. KEYS[i] .. ' holds a ' .. t)
  end
end
local now = redis.call('TIME')
local due = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) +
  tonumber(ARGV[1])
local id, value = unhex(ARGV[2]), unhex(ARGV[3])
local packed = struct.pack('Bc0Lc0', string.len(id), id, string.len(value),
  value)
redis.call('zadd', KEYS[2], due, packed)
redis.call('rpush', KEYS[3], packed)
local head = redis.call('zrange', KEYS[2], 0, 0)
if head[1] == packed then
  redis.call('publish', KEYS[4], tostring(due))
end
redis.call('publish', KEYS[5], '1')
return due
