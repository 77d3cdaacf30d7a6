-- lock_renew.lua: the watchdog's batched renewal.
-- KEYS[i] a lock hash; ARGV[1] lease in ms; ARGV[i + 1] the owner of KEYS[i]
-- Returns an array: 1 where the owner still held KEYS[i] and its lease was
-- extended, 0 where the hold is gone (expired, taken, or the key is not a
-- hash). A lost lock is never re-created.
local res = {}
for i = 1, #KEYS do
  local held = redis.pcall('hexists', KEYS[i], ARGV[i + 1])
  if held == 1 then
    redis.call('pexpire', KEYS[i], ARGV[1])
    res[i] = 1
  else
    res[i] = 0
  end
end
return res
