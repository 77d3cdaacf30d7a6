-- lock_fence.lua: raises a lock's fencing-token counter (the one of
-- lock_acquire.lua) to at least a token, so that the next token this server
-- gives is above it. Redlock writes the token it took over a quorum back to
-- that quorum this way: any later quorum shares a server with it, whose
-- next token is then above this one (docs/SAFETY.md).
-- KEYS[1] the counter; ARGV[1] the token; ARGV[2] a lease in ms (the
-- counter lives one day, or the lease if longer, as lock_acquire.lua's).
-- Returns 1. A counter that is not one (another type, a string that is not
-- a number) is refused with WRONGTYPE and left as it is.
local ttl = math.max(86400000, tonumber(ARGV[2]))
local v = redis.pcall('get', KEYS[1])
if type(v) == 'table' or (v and not tonumber(v)) then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ': not a dlock ' ..
                           'token counter: ' .. (type(v) == 'table' and
                           redis.call('type', KEYS[1]).ok or 'a string'))
end
local cur = tonumber(v or '0')
if cur < tonumber(ARGV[1]) then
  redis.call('set', KEYS[1], ARGV[1], 'px', ttl)
end
return 1
