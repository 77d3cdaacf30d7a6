-- lock_force_release.lua: deletes the lock whoever holds it (Redisson
-- forceUnlock) and wakes the waiters.
-- KEYS[1] the lock hash; KEYS[2] the unlock channel; ARGV[1] message ('0')
-- KEYS[3] (fair lock only) the queue: the first waiter is told, on
-- KEYS[2]:<its owner id>
-- Returns 1 if it was held, 0 if not.
if redis.call('exists', KEYS[1]) == 1 then
  local channel = KEYS[2]
  if KEYS[3] then
    local first = redis.call('lindex', KEYS[3], 0)
    channel = first and (KEYS[2] .. ':' .. first) or nil
  end
  if channel then
    redis.call('publish', channel, ARGV[1])
  end
  redis.call('del', KEYS[1])
  return 1
end
return 0
