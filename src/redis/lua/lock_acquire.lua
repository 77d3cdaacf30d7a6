-- lock_acquire.lua: takes or re-enters a reentrant lock (Redisson RLock layout).
-- KEYS[1] the lock hash (field = owner id, value = hold count)
-- KEYS[2] the fencing-token counter (Redisson RFencedLock's key)
-- KEYS[3] the hand-off reservation of a starving waiter (string: owner id)
-- ARGV[1] lease in ms; ARGV[2] owner id; ARGV[3] holder info ('' or
-- absent = none); ARGV[4] the hold count the client believes the owner
-- has (0 or absent = none); ARGV[5] '1' if the caller has waited past the
-- starvation threshold; ARGV[6] how long a reservation lasts, in ms
-- (renewed at each attempt). A first attempt sends only what is not a
-- default: the lock's ARGV[3..6] are then absent.
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
-- Returns the token alone when taken (an array costs the server more to
-- reply), {2, token} when re-entered by the owner,
-- {0, ms} when another owner holds it (ms = its PTTL), or {0, ms, owner}
-- when it is free but reserved for the starving waiter `owner` (ms = the
-- reservation's PTTL); a refused waiter of the hand-off queue gets a
-- fourth element, the counter's value (see refused()), and a nil owner
-- when none. Fails before any write, so an error (WRONGTYPE, OOM,
-- READONLY) leaves the data as is.
--
-- Starvation mode, as in Go's sync.Mutex: the lock is not fair, and a
-- releasing owner that asks again at once usually wins the race against the
-- waiters it woke. A waiter that has waited past the threshold reserves the
-- next hand-off; until it takes the lock, gives up, or the reservation
-- expires (it died) nobody else may take the lock when it is free.
-- The counter lives one day after the last token it gave (or a lease, if
-- longer; RENEW_MS less at worst), so that names used once do not leave
-- it forever. When it is missing (never set, expired, or lost in a
-- restart without persistence), it restarts from the server clock in
-- microseconds plus AHEAD_US: above every token issued before, since
-- every token is at most the clock (in µs) plus AHEAD_US when it was
-- given, as long as fewer than one grant per microsecond was made (a
-- single-threaded server cannot exceed that) and the server's clock did
-- not step back (docs/SAFETY.md has the argument).
--
-- A server of a Redlock may be proposed a token (ARGV[11], the client's
-- wall clock in µs): the counter becomes the larger of its next value and
-- the proposal, unless the proposal is more than AHEAD_US ahead of this
-- server's clock (then ignored). When every server of a quorum took the
-- proposal, they all hold the token the client returns, and no second
-- round is needed to write it back (redlock.c).
--
-- A waiting Redlock acquire carries its owner's waiter record (docs/WIRE.md,
-- "Waiter records") in its rounds (rlwait.c): ARGV[12] the record's key,
-- ARGV[13] its value ('': not written, only deleted), ARGV[14] its lease in
-- ms. Refused, the attempt writes the record (SET ... PX); taken, it
-- deletes it: no command more than the attempt. Neither write can fail
-- the attempt (an ACL without SET: the wait is only left unrecorded).
local AHEAD_US = 1000000
-- The counter's life is renewed by a token only when this much of it has
-- passed: a PTTL costs the server less than a PEXPIRE (which it rewrites
-- as a PEXPIREAT), so a name locked more often than once a minute pays
-- for one PEXPIRE a minute, and the counter expires between a day less
-- RENEW_MS and a day after its last token.
local RENEW_MS = 60000

-- The common case first, before anything else is set up (each statement
-- below it costs every call): a lock's first attempt (three keys, no
-- holder info, no count, not starving, not a Redlock server) finds the
-- name free and not reserved, and the counter there. Anything else goes
-- on to the general path having changed nothing.
-- The hold goes first, and the server checks its lease: a lease it cannot
-- add to its clock ("invalid expire time"), or a text that is not a whole
-- number of ms, fails that PEXPIRE, and the hold is taken back (the name
-- was free: nothing is left), as it is when the INCR fails (the counter
-- is of another type) or finds no counter (made good there). From 1 ms
-- (PEXPIRE would take 0 or less, and delete the hold) to below 10^15 ms.
-- No pattern here: string.find would cost this path 1 600 server
-- instructions a call. Numbers go to the server as strings: a Lua number
-- passed to redis.call costs it a printf ("%.17g"), more than the call's
-- own work.
local lease = tonumber(ARGV[1])
local counted -- the counter was incremented to 1 here: it was missing
if #KEYS == 3 and not ARGV[3] and lease and lease >= 1 and lease < 1e15 and
   redis.call('exists', KEYS[1], KEYS[3]) == 0 then
  redis.call('hset', KEYS[1], ARGV[2], '1')
  local t = redis.pcall('pexpire', KEYS[1], ARGV[1]) == 1 and
            redis.pcall('incr', KEYS[2])
  if type(t) == 'number' and t ~= 1 then
    if redis.call('pttl', KEYS[2]) <
       (lease > 86400000 and lease or 86400000) - RENEW_MS then
      redis.call('pexpire', KEYS[2], lease > 86400000 and ARGV[1] or '86400000')
    end
    return t
  end
  redis.call('del', KEYS[1])
  counted = t == 1
end

-- A time in ms: 1 to 15 digits (under 31 000 years), or a refusal.
local function bad_ms(v, what)
  if #v < 16 and string.find(v, '^[1-9]%d*$') then
    return nil
  end
  return redis.error_reply('ERR dlock: ' .. what .. ' is 1 to ' ..
                           '999999999999999 ms, not ' .. v ..
                           ': nothing changed')
end
local bad = bad_ms(ARGV[1], 'a lease') or
            (ARGV[9] and ARGV[8] == '1' and bad_ms(ARGV[9], 'a waiter\'s life'))
if bad then
  return bad
end

-- What dlock refuses (docs/WIRE.md): a key that is not of this kind, at
-- the name or at a name beside it, with a WRONGTYPE error that says what
-- it found, before any write. Checked only off the fast path: a free name
-- needs no look, and a failed INCR or GET costs nothing more.
local what = #KEYS == 2 and 'plain lock' or
             ((tonumber(ARGV[7] or '') or 0) > 0 and 'fair lock' or 'lock')
local function wrong(found)
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ': not a dlock ' ..
                           what .. ': ' .. found)
end
local function beside(key)
  return wrong(key .. ' is a ' .. redis.call('type', key).ok)
end
-- A command that failed under pcall: another type at `key` (or a counter
-- that is not a number) is refused as above; any other error (OOM,
-- READONLY) goes back as the server gave it.
local function failed(e, key)
  if string.find(e.err, 'WRONGTYPE', 1, true) or
     string.find(e.err, 'not an integer', 1, true) then
    return beside(key)
  end
  return e
end

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

-- Returns the next token, or an error reply when the counter cannot give
-- one (nothing written: a failed INCR changes nothing).
local function next_token()
  local ttl = tonumber(ARGV[1]) > 86400000 and ARGV[1] or '86400000'
  local p = tonumber(ARGV[11] or '')
  if not p and not counted then
    local t = redis.pcall('incr', KEYS[2])
    if type(t) == 'table' then
      return failed(t, KEYS[2])
    end
    if t ~= 1 then
      if redis.call('pttl', KEYS[2]) < tonumber(ttl) - RENEW_MS then
        redis.call('pexpire', KEYS[2], ttl)
      end
      return t
    end
  end
  local now = redis.call('time')
  local now_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local v = redis.pcall('get', KEYS[2])
  if type(v) == 'table' or (v and not tonumber(v)) then
    return beside(KEYS[2])
  end
  local c = tonumber(v or '')
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
-- (the count is the client's). Anything but a string is refused, and so
-- is a string without a lease (every plain-lock client sets one).
if #KEYS == 2 then
  local v = redis.pcall('get', KEYS[1])
  if type(v) == 'table' then
    return wrong(redis.call('type', KEYS[1]).ok)
  end
  if v and v ~= ARGV[2] then
    local ms = redis.call('pttl', KEYS[1])
    if ms < 0 then
      return wrong('a string without a lease')
    end
    if ARGV[13] and ARGV[13] ~= '' then
      redis.pcall('set', ARGV[12], ARGV[13], 'px', ARGV[14])
    end
    return {0, ms}
  end
  if v and tonumber(ARGV[4]) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {2, tonumber(redis.call('get', KEYS[2]) or '0')}
  end
  -- Free, or ours from an acquire whose reply was lost: taken afresh.
  local token = next_token()
  if type(token) == 'table' then
    return token
  end
  redis.call('set', KEYS[1], ARGV[2], 'px', ARGV[1])
  if ARGV[12] then
    redis.pcall('del', ARGV[12])
  end
  return token
end

local stale_ms = tonumber(ARGV[7] or '0')
local fair = stale_ms > 0
local queued = not fair and ARGV[8] == '1' and KEYS[5] ~= nil

local function take()
  local token = next_token() -- first: it may refuse
  if type(token) == 'table' then
    return token
  end
  if queued and redis.call('hdel', KEYS[5], ARGV[2]) == 1 then
    redis.call('lrem', KEYS[4], 1, ARGV[2])
  end
  redis.call('hset', KEYS[1], ARGV[2], '1')
  if ARGV[3] and ARGV[3] ~= '' then
    local now = redis.call('time')
    redis.call('hset', KEYS[1], 'dlock:info', ARGV[3], 'dlock:since',
               string.format('%.0f', now[1] * 1000 + math.floor(now[2] / 1000)))
  end
  redis.call('pexpire', KEYS[1], ARGV[1])
  if ARGV[12] then
    redis.pcall('del', ARGV[12])
  end
  return token
end

-- Not taken: a plain lock's waiter joins the hand-off queue, or proves it
-- is still alive there. Both keys live as long as some waiter does.
local function refused(ms, who)
  if ARGV[13] and ARGV[13] ~= '' then
    redis.pcall('set', ARGV[12], ARGV[13], 'px', ARGV[14])
  end
  if queued then
    local t = redis.call('time')
    local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) +
                     tonumber(ARGV[9])
    local entry = string.format('%.0f', deadline) .. ':' .. ARGV[1] .. ':' ..
                  (ARGV[3] or '')
    local new = redis.pcall('hset', KEYS[5], ARGV[2], entry)
    if type(new) == 'table' then
      return failed(new, KEYS[5])
    end
    local e = new == 1 and redis.pcall('rpush', KEYS[4], ARGV[2])
    if type(e) == 'table' then
      redis.call('hdel', KEYS[5], ARGV[2])
      return failed(e, KEYS[4])
    end
    -- Waiters ask for windows of their own: the keys outlive the longest.
    local ttl = 2 * tonumber(ARGV[9])
    if redis.call('pttl', KEYS[4]) < ttl then
      redis.call('pexpire', KEYS[4], ttl)
    end
    if redis.call('pttl', KEYS[5]) < ttl then
      redis.call('pexpire', KEYS[5], ttl)
    end
    -- The counter as this attempt found it (0: missing): a grant the
    -- waiter hears later with a token at or below it was made before this
    -- attempt ran, for an earlier wait of the same owner (its message
    -- read late), since a release's grant takes the counter's next value.
    local c = redis.pcall('get', KEYS[2])
    return {0, ms, who or false, type(c) == 'string' and tonumber(c) or 0}
  end
  return {0, ms, who}
end

local now_ms
if fair then
  local t = redis.call('time')
  now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local dead = redis.pcall('zrangebyscore', KEYS[5], 0, now_ms)
  if dead.err then
    return failed(dead, KEYS[5])
  end
  for i = 1, #dead do
    local e = redis.pcall('lrem', KEYS[4], 0, dead[i])
    if type(e) == 'table' then
      return failed(e, KEYS[4]) -- the first write: nothing changed
    end
    redis.call('zrem', KEYS[5], dead[i])
  end
end

if fair then
  if redis.call('exists', KEYS[1]) == 0 then
    local first = redis.pcall('lindex', KEYS[4], 0)
    if type(first) == 'table' then
      return failed(first, KEYS[4])
    end
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
  local reserved = n == 1 and redis.pcall('get', KEYS[3])
  if type(reserved) == 'table' then
    return failed(reserved, KEYS[3])
  end
  if reserved then
    if reserved ~= ARGV[2] then
      local ms = redis.call('pttl', KEYS[3])
      if ms < 0 then -- a reservation always has a lease
        return wrong(KEYS[3] .. ' is a string without a lease')
      end
      return refused(ms, reserved)
    end
    redis.call('del', KEYS[3])
    return take()
  end
end
-- Not free: a lock hash? Owner fields "<id>:<thread>" with a count, and
-- dlock's "dlock:info" and "dlock:since": at most 3 fields (Redisson's
-- have 1). A read-write lock (its "mode") or anything else is refused.
local n = redis.pcall('hlen', KEYS[1])
if type(n) == 'table' then
  return wrong(redis.call('type', KEYS[1]).ok)
end
local all = n <= 3 and redis.call('hgetall', KEYS[1]) or {}
local mine, owners = false, 0
for i = 1, #all, 2 do
  local f, c = all[i], tonumber(all[i + 1])
  if f == 'mode' then
    return wrong('read-write lock')
  elseif string.sub(f, 1, 6) ~= 'dlock:' then
    if not string.find(f, ':', 1, true) or not c or c < 1 then
      return wrong('hash')
    end
    owners = owners + 1
    mine = mine or f == ARGV[2]
  end
end
if owners == 0 and n > 0 then -- (a fair lock free for the first waiter: 0)
  return wrong(redis.call('hexists', KEYS[1], 'mode') == 1 and
               'read-write lock' or 'hash')
end
if mine then
  local believed = tonumber(ARGV[4] or '0')
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
  local e = ARGV[8] == '1' and
            redis.call('zadd', KEYS[5], now_ms + stale_ms, ARGV[2]) == 1 and
            redis.pcall('rpush', KEYS[4], ARGV[2])
  if type(e) == 'table' then
    redis.call('zrem', KEYS[5], ARGV[2])
    return failed(e, KEYS[4])
  end
  return {0, redis.call('pttl', KEYS[1])}
end
if ARGV[5] == '1' then
  -- Reserve the next hand-off, or renew our reservation.
  local reserved = redis.pcall('get', KEYS[3])
  if type(reserved) == 'table' then
    return failed(reserved, KEYS[3])
  end
  if not reserved or reserved == ARGV[2] then
    redis.call('set', KEYS[3], ARGV[2], 'PX', ARGV[6])
  end
end
return refused(redis.call('pttl', KEYS[1]))
