-- delay_offer.lua: offers a value to Redisson's RDelayedQueue layout, due
-- ARGV[1] ms from now by the server's clock (TIME), not the client's.
-- KEYS[1] the destination list Q (its type is checked: nothing is written
-- on a key of another type), KEYS[2] redisson_delay_queue_timeout:{Q} (zset
-- scored by due epoch ms), KEYS[3] redisson_delay_queue:{Q} (insertion
-- order), KEYS[4] redisson_delay_queue_channel:{Q} (Redisson's transfer
-- tasks hear the new head's due time), KEYS[5] dlock_queue_channel:{Q}
-- (wakes a dlock poller, which moves what is due).
-- ARGV[2] 8 random bytes (the last ends the id), ARGV[3] the value, both
-- in hex (the arguments are C strings; the value may hold any byte).
-- Each element is packed as Redisson packs it: struct.pack('Bc0Lc0', 8,
-- id, #value, value), the id made so that ties leave in offer order
-- (below). Returns the due time (epoch ms).
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
local value = unhex(ARGV[3])
-- Values due at the same ms leave in offer order: the zset orders equal
-- scores by member, so the id (random in Redisson) grows with each offer:
-- the server's TIME in microseconds (7 bytes, big-endian) and the client's
-- random byte, or one past the greatest id already due at this ms; and
-- never a member already there. Bytes are compared one by one (Lua's
-- string order follows the server's locale).
local function above(a, b)
  for i = 1, 8 do
    if a:byte(i) ~= b:byte(i) then return a:byte(i) > (b:byte(i) or 0) end
  end
  return false
end
local function inc(s)
  local b = {s:byte(1, 8)}
  for i = 8, 1, -1 do
    if b[i] < 255 then
      b[i] = b[i] + 1
      return string.char(unpack(b))
    end
    b[i] = 0
  end
  return string.char(unpack(b))
end
local us, t = tonumber(now[1]) * 1000000 + tonumber(now[2]), {}
for i = 7, 1, -1 do
  t[i] = us % 256
  us = math.floor(us / 256)
end
local id = string.char(unpack(t)) .. unhex(ARGV[2]):sub(8, 8)
local tie = redis.call('zrevrangebyscore', KEYS[2], due, due, 'limit', 0, 1)
if tie[1] and #tie[1] >= 9 and not above(id, tie[1]:sub(2, 9)) then
  id = inc(tie[1]:sub(2, 9))
end
local function pack()
  return struct.pack('Bc0Lc0', 8, id, string.len(value), value)
end
local packed = pack()
while redis.call('zscore', KEYS[2], packed) do
  id = inc(id)
  packed = pack()
end
-- The messages first (a refused one, an ACL, then changes nothing): the
-- new head's due time, if this value will be the head (the zset orders by
-- score, then by member byte by byte), and the poller's wake-up.
local function before(x, y)
  for i = 1, math.min(#x, #y) do
    if x:byte(i) ~= y:byte(i) then return x:byte(i) < y:byte(i) end
  end
  return #x < #y
end
local head = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')
if not head[1] or due < tonumber(head[2]) or
   (due == tonumber(head[2]) and before(packed, head[1])) then
  redis.call('publish', KEYS[4], tostring(due))
end
redis.call('publish', KEYS[5], '1')
redis.call('zadd', KEYS[2], due, packed)
redis.call('rpush', KEYS[3], packed)
return due
