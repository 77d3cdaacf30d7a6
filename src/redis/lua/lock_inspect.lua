-- lock_inspect.lua: a consistent read-only snapshot of whatever kind of
-- lock or synchronizer lives at a name.
-- KEYS[1] the name; KEYS[2] the fencing-token counter; KEYS[3] a fair
-- lock's queue; KEYS[4] a permit-expirable semaphore's timeout set;
-- KEYS[5] the plain lock's hand-off queue
-- Returns {fields-and-values of the hash (HGETALL; empty if not a hash),
-- pttl, token or false, the server's clock in ms, the integer at the name
-- if it is a string (a semaphore's permits or a latch's count) or false,
-- the waiters queued (fair queue or hand-off queue), the permits taken,
-- the type of the key at the name ('none', 'hash', 'string', ...),
-- the string at the name if it is not a number (a plain string lock's
-- holder token) or false}.
-- The type first: a WRONGTYPE error, even under pcall, counts in the
-- server's errorstats.
local kind = redis.call('type', KEYS[1]).ok
local all = kind == 'hash' and redis.call('hgetall', KEYS[1]) or {}
local counter, value = false, false
if kind == 'string' then
  value = redis.call('get', KEYS[1])
  counter = tonumber(value) or false
  if counter then
    value = false
  end
end
local queued = redis.pcall('llen', KEYS[3])
local handoff = redis.pcall('llen', KEYS[5])
if type(queued) == 'number' and type(handoff) == 'number' then
  queued = queued + handoff
end
local taken = redis.pcall('zcard', KEYS[4])
local now = redis.call('time')
return {all, redis.call('pttl', KEYS[1]), redis.call('get', KEYS[2]),
        now[1] * 1000 + math.floor(now[2] / 1000), counter,
        type(queued) == 'number' and queued or 0,
        type(taken) == 'number' and taken or 0, kind, value}
