-- lock_acquire.lua: takes or re-enters a reentrant lock (Redisson RLock layout).
-- KEYS[1] the lock hash (field = owner id, value = hold count)
-- KEYS[2] the fencing-token counter (Redisson RFencedLock's key)
-- KEYS[3] the hand-off reservation of a starving waiter (string: owner id)
-- ARGV[1] lease in ms; ARGV[2] owner id; ARGV[3] holder info ('' = none)
-- ARGV[4] the hold count the client believes the owner has (0 = none)
-- ARGV[5] '1' if the caller has waited past the starvation threshold
-- ARGV[6] how long a reservation lasts, in ms (renewed at each attempt)
-- The fair lock (Redisson RFairLock's layout) also passes:
-- KEYS[4] the queue of waiters (list of owner ids); KEYS[5] their timeouts
-- (zset: owner id -> server time in ms after which a waiter counts as dead)
-- ARGV[7] the stale-waiter timeout in ms ('0' or absent: not fair)
-- ARGV[8] '1' to join the queue (or keep one's place) if not taken
-- A fair lock is taken only by the first waiter of the queue (or anyone
-- when the queue is empty). Each attempt of a queued waiter pushes its
-- timeout to now + ARGV[7]; waiters whose timeout passed are dropped from
-- anywhere in the queue. (Redisson sets a waiter's timeout once, from the
-- waiters before it, and can drop a live waiter that waited long; dlock's
-- heartbeat cannot. Redisson also lets a non-first waiter pop the first one
-- off the queue while the lock is free; dlock does not.)
-- The plain lock's waiters that can hear a grant (dlock's hand-off queue,
-- see lock_release.lua) pass instead, with ARGV[7] '0' and ARGV[8] '1':
-- KEYS[4] the queue (list of owner ids, first come first served)
-- KEYS[5] the waiters (hash: owner id -> "deadline:lease:info", deadline in
-- server ms, pushed to now + ARGV[9] by each attempt)
-- ARGV[9] how long this queued waiter counts as alive after this attempt,
-- in ms (each waiter its own: it grows with the time it has waited)
-- The queue only orders hand-offs: a free lock is still taken by whoever
-- asks first, as in Redisson (a Redisson client frees it without granting).
-- Returns {1, token} when taken, {2, token} when re-entered by the owner,
-- {0, ms} when another owner holds it (ms = its PTTL), or {0, ms, owner}
-- when it is free but reserved for the starving waiter `owner` (ms = the
-- reservation's PTTL). Fails before any write, so an error (WRONGTYPE,
-- OOM, READONLY) leaves the data as is.
--
-- Starvation mode, as in Go's sync.Mutex: the lock is not fair, and a
-- releasing owner that asks again at once usually wins the race against the
-- waiters it woke. A waiter that has waited past the threshold reserves the
-- next hand-off; until it takes the lock, gives up, or the reservation
-- expires (it died) nobody else may take the lock when it is free.
-- The counter lives one day after the last token it gave (or a lease, if
-- longer), so that names used once do not leave it forever. When it is
-- missing (never set, expired, or lost in a restart without persistence),
-- it restarts from the server clock in microseconds plus AHEAD_US: above
-- every token issued before, since every token is at most the clock (in
-- µs) plus AHEAD_US when it was given, as long as fewer than one grant per
-- microsecond was made (a single-threaded server cannot exceed that) and
-- the server's clock did not step back (docs/SAFETY.md has the argument).
--
-- A server of a Redlock may be proposed a token (ARGV[11], the client's
-- wall clock in µs): the counter becomes the larger of its next value and
-- the proposal, unless the proposal is more than AHEAD_US ahead of this
-- server's clock (then ignored). When every server of a quorum took the
-- proposal, they all hold the token the client returns, and no second
-- round is needed to write it back (redlock.c).
local AHEAD_US = 1000000

-- Redlock's delayed restart (the mutex and the plain lock, a server of a
-- composite only): ARGV[10] in ms. A server up for less than that refuses
-- every lock, reporting how long it still will, so that a server restarted
-- without the locks it had cannot give one of them to a second owner
-- before the first owner's lease has run out. Server uptime is counted in
-- whole seconds, rounded down: the refusal lasts at least ARGV[10].
if ARGV[10] and tonumber(ARGV[10]) and tonumber(ARGV[10]) > 0 then
  local up = redis.call('info', 'server'):match('uptime_in_seconds:(%d+)')
  local left = tonumber(ARGV[10]) - tonumber(up) * 1000
  if left > 0 then
    return {0, left}
  end
end

local function next_token()
  local ttl = math.max(86400000, tonumber(ARGV[1]))
  local p = tonumber(ARGV[11] or '')
  if not p then
    local t = redis.call('incr', KEYS[2])
    if t ~= 1 then
      redis.call('pexpire', KEYS[2], ttl)
      return t
    end
  end
  local now = redis.call('time')
  local now_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local c = tonumber(redis.call('get', KEYS[2]) or '')
  local t
  if not c or (not p and c == 1) then
    t = now_us + AHEAD_US -- missing: restart
  else
    t = c + 1
  end
  if p and p > t and p <= now_us + AHEAD_US then
    t = p
  end
  redis.call('set', KEYS[2], string.format('%.0f', t), 'px', ttl)
  return t
end

-- The plain string lock (redsync's, npm redlock's and redis-semaphore's
-- layout) passes two keys: KEYS[1] a string whose value is the owner id,
-- with a PX lease, KEYS[2] the counter; ARGV[1], ARGV[2] and ARGV[4] as
-- above. The wire has no hold count: a re-entry only extends the lease
-- (the count is the client's). GET fails with WRONGTYPE on anything but a
-- string, before any write.
if #KEYS == 2 then
  local v = redis.call('get', KEYS[1])
  if v and v ~= ARGV[2] then
    return {0, redis.call('pttl', KEYS[1])}
  end
  if v and tonumber(ARGV[4]) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {2, tonumber(redis.call('get', KEYS[2]) or '0')}
  end
  -- Free, or ours from an acquire whose reply was lost: taken afresh.
  local token = next_token()
  redis.call('set', KEYS[1], ARGV[2], 'px', ARGV[1])
  return {1, token}
end

local stale_ms = tonumber(ARGV[7] or '0')
local fair = stale_ms > 0
local queued = not fair and ARGV[8] == '1' and KEYS[5] ~= nil

local function take()
  if queued and redis.call('hdel', KEYS[5], ARGV[2]) == 1 then
    redis.call('lrem', KEYS[4], 1, ARGV[2])
  end
  local token = next_token()
  redis.call('hset', KEYS[1], ARGV[2], 1)
  if ARGV[3] ~= '' then
    local now = redis.call('time')
    redis.call('hset', KEYS[1], 'dlock:info', ARGV[3], 'dlock:since',
               string.format('%.0f', now[1] * 1000 + math.floor(now[2] / 1000)))
  end
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {1, token}
end

-- Not taken: a plain lock's waiter joins the hand-off queue, or proves it
-- is still alive there. Both keys live as long as some waiter does.
local function refused(ms, who)
  if queued then
    local t = redis.call('time')
    local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) +
                     tonumber(ARGV[9])
    local entry = string.format('%.0f', deadline) .. ':' .. ARGV[1] .. ':' ..
                  ARGV[3]
    if redis.call('hset', KEYS[5], ARGV[2], entry) == 1 then
      redis.call('rpush', KEYS[4], ARGV[2])
    end
    -- Waiters ask for windows of their own: the keys outlive the longest.
    local ttl = 2 * tonumber(ARGV[9])
    if redis.call('pttl', KEYS[4]) < ttl then
      redis.call('pexpire', KEYS[4], ttl)
    end
    if redis.call('pttl', KEYS[5]) < ttl then
      redis.call('pexpire', KEYS[5], ttl)
    end
  end
  return {0, ms, who}
end

local now_ms
if fair then
  local t = redis.call('time')
  now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local dead = redis.call('zrangebyscore', KEYS[5], 0, now_ms)
  for i = 1, #dead do
    redis.call('lrem', KEYS[4], 0, dead[i])
    redis.call('zrem', KEYS[5], dead[i])
  end
end

if fair then
  if redis.call('exists', KEYS[1]) == 0 then
    local first = redis.call('lindex', KEYS[4], 0)
    if not first or first == ARGV[2] then
      if first then
        redis.call('lpop', KEYS[4])
      end
      redis.call('zrem', KEYS[5], ARGV[2])
      return take()
    end
  end
else
  -- One call tells the common case: free and not reserved.
  local n = redis.call('exists', KEYS[1], KEYS[3])
  if n == 0 then
    return take()
  end
  -- One of the two: free but reserved, or held.
  local reserved = n == 1 and redis.call('get', KEYS[3])
  if reserved then
    if reserved ~= ARGV[2] then
      return refused(redis.call('pttl', KEYS[3]), reserved)
    end
    redis.call('del', KEYS[3])
    return take()
  end
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  local believed = tonumber(ARGV[4])
  if believed == 0 then
    -- The owner's field is there but its client knows of no hold: an earlier
    -- acquire ran here and its reply was lost. Take it afresh rather than
    -- re-enter a hold nobody will release.
    return take()
  end
  redis.call('hset', KEYS[1], ARGV[2], believed + 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {2, tonumber(redis.call('get', KEYS[2]) or '0')}
end
if fair then
  if ARGV[8] == '1' and
     redis.call('zadd', KEYS[5], now_ms + stale_ms, ARGV[2]) == 1 then
    redis.call('rpush', KEYS[4], ARGV[2])
  end
  return {0, redis.call('pttl', KEYS[1])}
end
if ARGV[5] == '1' then
  -- Reserve the next hand-off, or renew our reservation.
  local reserved = redis.call('get', KEYS[3])
  if not reserved or reserved == ARGV[2] then
    redis.call('set', KEYS[3], ARGV[2], 'PX', ARGV[6])
  end
end
return refused(redis.call('pttl', KEYS[1]))
