-- lock_release.lua: releases one hold (Redisson RLock's unlock script).
-- KEYS[1] the lock hash; KEYS[2] the unlock channel
-- ARGV[1] the unlock message ('0'); ARGV[2] lease in ms; ARGV[3] owner id
-- Returns nil if the owner does not hold it (nothing changed), 0 if still
-- held (reentrant), 1 if released: then the key is deleted and one message
-- is published, which wakes one waiter in each subscribed process.
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
  return nil
end
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if counter > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 0
end
-- Publish first: a server that refuses it (an ACL without the channel)
-- then fails the script before anything changed. Subscribers see the message
-- only after the script, when the key is already gone.
redis.call('publish', KEYS[2], ARGV[1])
redis.call('del', KEYS[1])
return 1
