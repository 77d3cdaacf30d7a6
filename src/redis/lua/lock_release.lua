-- lock_release.lua: releases one hold (Redisson RLock's unlock, reentrant).
-- KEYS[1] the lock hash; KEYS[2] the unlock channel
-- ARGV[1] owner id; ARGV[2] the hold count the client believes the owner
-- has (0 = none known); ARGV[3] see the latch below; ARGV[4] the lease in
-- ms, needed (and sent) only when the count is above 1; ARGV[5] '1' on a
-- retry. Every argument costs the server (tests/test_cost.sh): a first
-- send of a last hold carries three. The unlock message is Redisson's
-- "0".
-- KEYS[3] (fair lock only) the queue of waiters
-- The plain lock passes only KEYS[1], its name (and the latch): every key
-- passed costs the server about as much as a fifth of a command. The
-- names beside it are made here, as the client makes them (docs/WIRE.md),
-- all in the lock's slot: its unlock channel, dlock's hand-off queue, its
-- waiters, the fencing-token counter and the reservation of a starving
-- waiter (see lock_acquire.lua).
-- The plain string lock passes only KEYS[1] its string and KEYS[2] the
-- unlock channel (and the latch).
-- Returns nil if the owner does not hold it (nothing changed), 0 if still
-- held (reentrant), 1 + n if released: then either the lock was handed to
-- the first live waiter of the hand-off queue (n = 1), or the key is
-- deleted and one message is published, which wakes one waiter in each of
-- the n subscribed processes.
-- The count written is the client's own: a hold left by an acquire whose
-- reply was lost is released with the last hold the client knows of.
-- With ARGV[3], the last KEY is the release's latch (Redisson's
-- "redisson_unlock_latch:{name}:<request id>"): the result is kept there
-- for ARGV[3] ms, and a retry of the same release (its reply was lost;
-- ARGV[5] '1') returns it instead of running again. A reentrant release
-- writes the count the client knows, so running it twice changes nothing:
-- only a release that ends the hold, or knows no count, keeps a latch.
local nkeys = #KEYS

-- The common case first, before anything else is set up: a first send of
-- a lock's release (its name and the latch) that ends the owner's only
-- hold, with nobody in the hand-off queue. What the general path below
-- does then, in the same order; anything else goes on to it having
-- written nothing. Numbers go to the server as strings (a Lua number
-- passed to redis.call costs it a printf), and the names beside the
-- lock's are made in one concatenation each ("<prefix>:{<name>}", or
-- "<prefix>:<name>" when the name has a hash tag of its own, as
-- dl_derived_into makes them).
if nkeys == 2 and ARGV[2] == '1' and not ARGV[5] and
   redis.pcall('hexists', KEYS[1], ARGV[1]) == 1 then
  local open, close = ':{', '}'
  if string.find(KEYS[1], '{', 1, true) then
    open, close = ':', ''
  end
  if redis.call('exists', 'dlock_lock_queue' .. open .. KEYS[1] .. close) ==
     0 then
    local channel = 'redisson_lock__channel' .. open .. KEYS[1] .. close
    local v = 1 + redis.call('publish', channel, '0')
    -- The latch first: it may refuse its time, and nothing is written yet.
    redis.call('set', KEYS[2], v == 1 and '1' or tostring(v), 'px', ARGV[3])
    redis.call('del', KEYS[1])
    return v
  end
end

-- The times in ms (the latch's, a lease) are checked before any write: one
-- the server refuses would fail the script after the writes before it.
local function bad_ms(v)
  return v and not (#v < 16 and string.find(v, '^[1-9]%d*$'))
end
if bad_ms(ARGV[3]) or (tonumber(ARGV[2]) or 0) > 1 and bad_ms(ARGV[4] or '')
then
  return redis.error_reply('ERR dlock: a time is 1 to 999999999999999 ms, ' ..
                           'not ' .. tostring(ARGV[3]) .. ' or ' ..
                           tostring(ARGV[4]) .. ': nothing changed')
end
local latch
if ARGV[3] then
  latch = KEYS[nkeys]
  nkeys = nkeys - 1
  if ARGV[5] == '1' then
    local done = redis.call('get', latch)
    if done then
      return tonumber(done)
    end
  end
end
local believed = tonumber(ARGV[2])
-- The keys as the general path reads them: the lock's names made in full.
local K = KEYS
if nkeys == 1 then
  local tag = string.find(KEYS[1], '{', 1, true) and ':' .. KEYS[1] or
              ':{' .. KEYS[1] .. '}'
  K = {KEYS[1], 'redisson_lock__channel' .. tag, 'dlock_lock_queue' .. tag,
       'dlock_lock_waiters' .. tag, 'redisson_lock_token' .. tag,
       'dlock_handoff' .. tag}
  nkeys = 6
end
local channel = K[2]
local function result(v)
  if latch and (v ~= 0 or believed == 0) then
    redis.call('set', latch, v, 'px', ARGV[3])
  end
  return v
end

-- The plain string lock (two keys besides the latch: the string, the
-- unlock channel): compare-and-delete; the value is the owner id. A
-- reentrant release only extends the lease (the count is the client's).
-- Another type at the name: WRONGTYPE, saying what it found.
local function wrong(what)
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ': not a dlock ' ..
                           what .. ': ' .. redis.call('type', KEYS[1]).ok)
end
if nkeys == 2 then
  local v = redis.pcall('get', KEYS[1])
  if type(v) == 'table' then
    return wrong('plain lock')
  end
  if v ~= ARGV[1] then
    return nil
  end
  if believed > 1 then
    redis.call('pexpire', KEYS[1], ARGV[4])
    return result(0)
  end
  redis.call('del', KEYS[1])
  return result(1 + redis.call('publish', KEYS[2], '0'))
end

local mine = redis.pcall('hexists', KEYS[1], ARGV[1])
if type(mine) == 'table' then
  return wrong('lock')
elseif mine == 0 then
  return nil
end
if believed > 1 then
  redis.call('hset', KEYS[1], ARGV[1], believed - 1)
  redis.call('pexpire', KEYS[1], ARGV[4])
  return result(0)
end

-- The hand-off: the lock goes straight to the first waiter that is alive
-- (its last attempt is recent) and listening (its grant channel has a
-- subscriber), with that waiter's lease and a new fencing token; the grant
-- "=<token>" on "<channel>:<owner id>" tells it so without a round trip.
-- Waiters found dead or deaf on the way are dropped (at most 64 a release;
-- past them the lock is freed as below). Nothing is written before a
-- PUBLISH succeeds, so a refused one (ACL) changes nothing. A waiter that
-- cannot queue (it polls, or is not subscribed yet) and starved reserved
-- the next hand-off: then the lock is freed for it instead.
local seen = 0
if nkeys == 6 and redis.call('exists', K[3]) == 1 and
   redis.call('exists', K[6]) == 0 then
  local t = redis.call('time')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local queue = redis.call('lrange', K[3], 0, 63)
  for i = 1, #queue do
    local who = queue[i]
    seen = i
    local entry = redis.call('hget', K[4], who)
    local deadline, lease, info
    if entry then
      deadline, lease, info = string.match(entry, '^(%d+):(%d+):(.*)$')
    end
    if who ~= ARGV[1] and deadline and tonumber(deadline) >= now and
       not bad_ms(lease) then -- (a lease its acquire checked)
      local token = tonumber(redis.call('get', K[5]) or '0') + 1
      if token == 1 then -- the counter is missing: as in lock_acquire.lua
        token = tonumber(t[1]) * 1000000 + tonumber(t[2]) + 1000000
      end
      token = string.format('%.0f', token)
      local heard = redis.pcall('publish', channel .. ':' .. who, '=' .. token)
      if type(heard) == 'number' and heard > 0 then
        redis.call('ltrim', K[3], i, -1)
        redis.call('hdel', K[4], unpack(queue, 1, i))
        -- The counter's lifetime: as in lock_acquire.lua.
        redis.call('set', K[5], token, 'px',
                   tonumber(lease) > 86400000 and lease or '86400000')
        redis.call('del', KEYS[1])
        redis.call('hset', KEYS[1], who, '1')
        if info ~= '' then
          redis.call('hset', KEYS[1], 'dlock:info', info, 'dlock:since',
                     string.format('%.0f', now))
        end
        redis.call('pexpire', KEYS[1], lease)
        return result(2)
      end
    end
  end
end

-- Publish first: a server that refuses it (an ACL without the channel)
-- then fails the script before anything changed. Subscribers see the message
-- only after the script, when the key is already gone. A fair lock (KEYS[3]
-- its queue) wakes only the first waiter, on its own channel.
if nkeys == 3 then
  local first = redis.call('lindex', K[3], 0)
  if not first then
    redis.call('del', KEYS[1])
    return result(1)
  end
  channel = channel .. ':' .. first
end
local woken = redis.call('publish', channel, '0')
if seen > 0 then -- every waiter looked at was dead or deaf
  local queue = redis.call('lrange', K[3], 0, seen - 1)
  redis.call('ltrim', K[3], seen, -1)
  redis.call('hdel', K[4], unpack(queue))
end
redis.call('del', KEYS[1])
return result(1 + woken)
