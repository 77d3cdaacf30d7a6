-- lock_release.lua: releases one hold (Redisson RLock's unlock, reentrant).
-- KEYS[1] the lock hash; KEYS[2] the unlock channel
-- ARGV[1] the unlock message ('0'); ARGV[2] lease in ms; ARGV[3] owner id
-- ARGV[4] the hold count the client believes the owner has (0 = none known)
-- KEYS[3] (fair lock only) the queue of waiters
-- Returns nil if the owner does not hold it (nothing changed), 0 if still
-- held (reentrant), 1 + n if released: then the key is deleted and one
-- message is published, which wakes one waiter in each of the n subscribed
-- processes.
-- The count written is the client's own: a hold left by an acquire whose
-- reply was lost is released with the last hold the client knows of.
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
  return nil
end
local believed = tonumber(ARGV[4])
if believed > 1 then
  redis.call('hset', KEYS[1], ARGV[3], believed - 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 0
end
-- Publish first: a server that refuses it (an ACL without the channel)
-- then fails the script before anything changed. Subscribers see the message
-- only after the script, when the key is already gone. A fair lock (KEYS[3]
-- its queue) wakes only the first waiter, on its own channel.
local channel = KEYS[2]
if KEYS[3] then
  local first = redis.call('lindex', KEYS[3], 0)
  if not first then
    redis.call('del', KEYS[1])
    return 1
  end
  channel = KEYS[2] .. ':' .. first
end
local woken = redis.call('publish', channel, ARGV[1])
redis.call('del', KEYS[1])
return 1 + woken
