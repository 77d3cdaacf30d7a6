-- lock_inspect.lua: a consistent read-only snapshot of a lock.
-- KEYS[1] the lock hash; KEYS[2] the fencing-token counter
-- Returns {fields-and-values of the hash (HGETALL), pttl, token or false,
-- the server's clock in ms}.
-- A non-hash key reads as empty.
local all = redis.pcall('hgetall', KEYS[1])
if type(all) ~= 'table' or all.err then
  all = {}
end
local now = redis.call('time')
return {all, redis.call('pttl', KEYS[1]), redis.call('get', KEYS[2]),
        now[1] * 1000 + math.floor(now[2] / 1000)}
