-- lock_force_release.lua: deletes the lock whoever holds it (Redisson
-- forceUnlock) and wakes the waiters.
-- KEYS[1] the lock hash; KEYS[2] the unlock channel; ARGV[1] message ('0')
-- Returns 1 if it was held, 0 if not.
if redis.call('exists', KEYS[1]) == 1 then
  redis.call('publish', KEYS[2], ARGV[1])
  redis.call('del', KEYS[1])
  return 1
end
return 0
