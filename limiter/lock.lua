-- lock.lua: the lockout every decision script shares; prepended to it.
--
-- KEYS[2]  only when the policy locks (Policy.Lock): the hash
--          rate_limit:{<key>}:<policy>:lock of the key's lock, fields
--          until (epoch ms) and level, known by that name (quota counters,
--          quota.lua, may follow it or take its place); the last ARGV is
--          then the lock's base time in ms, and the script's own arguments
--          are the ones before it (nargs).
--
-- A lock is decided in the same run as the check, so every instance agrees
-- and it costs no round trip: while one holds, every request is denied and
-- records nothing; a denial of a request that would record (not a peek)
-- locks the key — for the base time, doubled for each lock within a day of
-- the last one's end, up to a day. The hash outlives the lock by a day, so
-- the next lock knows the last.

local lockKey = KEYS[2]
if lockKey and string.sub(lockKey, -5) ~= ':lock' then lockKey = nil end
local lockBase = 0
local nargs = #ARGV
if lockKey then
  lockBase = tonumber(ARGV[nargs])
  nargs = nargs - 1
end
local lockDay = 86400000

-- The lock's functions exist only for a policy that locks (making them
-- costs every call): a caller asks lockKey first.
local lockHeld, lockOut, lockDecide
if lockKey then
  -- lockHeld is the end and level of the lock holding at now, or nil.
  function lockHeld(now)
    local v = redis.call('HMGET', lockKey, 'until', 'level')
    local untilMs = tonumber(v[1])
    if untilMs and untilMs > now then return untilMs, tonumber(v[2]) end
    return nil
  end

  -- lockOut locks the key from now, after a denial; returns the lock's end
  -- and level.
  function lockOut(now)
    local v = redis.call('HMGET', lockKey, 'until', 'level')
    local last, level = tonumber(v[1]), 1
    if last and now - last < lockDay then level = tonumber(v[2]) + 1 end
    local d = lockDay
    if level <= 32 then d = math.min(lockDay, lockBase * 2 ^ (level - 1)) end
    local untilMs = now + d
    redis.call('HSET', lockKey, 'until', string.format('%.0f', untilMs), 'level', tostring(level))
    redis.call('PEXPIRE', lockKey, string.format('%.0f', d + lockDay))
    return untilMs, level
  end

  -- lockDecide settles a decision's lock: the lock that held (state 1), one
  -- this denial made (2), or none (0). allowed is the rules' answer, records
  -- whether an allowed request would be recorded. Returns the answer and the
  -- lock's state, level and end.
  function lockDecide(now, allowed, records)
    local heldUntil, heldLevel = lockHeld(now)
    if heldUntil then return 0, 1, heldLevel, heldUntil end
    if allowed == 0 and records then
      local untilMs, level = lockOut(now)
      return 0, 2, level, untilMs
    end
    return allowed, 0, 0, 0
  end
end
