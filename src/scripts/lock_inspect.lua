-- lock_inspect.lua: a consistent read-only snapshot of a lock.
-- KEYS[1] the lock hash; KEYS[2] the fencing-token counter
-- Returns {fields-and-values of the hash (HGETALL), pttl, token or false}.
-- A non-hash key reads as empty.
local all = redis.pcall('hgetall', KEYS[1])
if type(all) ~= 'table' or all.err then
  all = {}
end
return {all, redis.call('pttl', KEYS[1]), redis.call('get', KEYS[2])}
