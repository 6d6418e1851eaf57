-- lease.lua: what acquire, renew and release share, prepended to each.
--
-- A policy LIMIT/inflight keeps its leases in the window's sorted set: a
-- member per lease, its id (a UUID v4), scored by its expiry in epoch ms on
-- Redis's own clock (TIME), so every instance agrees on which are live. A
-- lease whose score is exactly now has expired. Every call first evicts the
-- expired ones (at most maxEvict; counting never relies on eviction) and
-- reports them, so a holder that crashed frees its slot at its lease's end
-- and the callers see it go.
--
-- KEYS[1]  the sorted set rate_limit:{<key>}:<policy>
-- ARGV[1]  the lease id: a new one (acquire) or the holder's (renew, release)
-- ARGV[2]  leaseMs: how long a lease lasts from now (acquire, renew)
-- ARGV[3]  limit: the most leases live at once (acquire)
-- ARGV[4]  maxEvict: the most expired leases one call removes
--
-- Every script returns {ok, nowMs, inFlight, ms, expired, then per expired
-- lease: its id as four numbers, its expiry}
--   ok        1 when the call did its work: acquired, renewed, released
--   inFlight  leases live after the call
--   ms        acquire: the new lease's expiry, or when refused the time until
--             the earliest live lease expires; renew: the new expiry; else 0
--   expired   how many expired leases this call evicted. Each id travels as
--             four numbers of 32 bits (its hex digits without the dashes, 8
--             at a time), -1 each for a member that is no lease id, so the
--             reply is all integers, as every decision script's is.

local key, id = KEYS[1], ARGV[1]
local leaseMs, limit, maxEvict = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = '(' .. now
local h4 = '[0-9a-f][0-9a-f][0-9a-f][0-9a-f]'
local leaseID = '^' .. h4 .. h4 .. '%-' .. h4 .. '%-' .. h4 .. '%-' .. h4 .. '%-' .. h4 .. h4 .. h4 .. '$'

-- evict removes the leases expired by now, at most maxEvict, and returns
-- them as the reply carries them.
local function evict()
  local gone = redis.call('ZRANGEBYSCORE', key, '-inf', now, 'WITHSCORES', 'LIMIT', 0, maxEvict)
  local out, members = {}, {}
  for i = 1, #gone, 2 do
    local m = gone[i]
    members[#members + 1] = m
    if string.find(m, leaseID) then
      local hex = string.gsub(m, '-', '')
      for j = 0, 3 do
        out[#out + 1] = tonumber(string.sub(hex, 8 * j + 1, 8 * j + 8), 16)
      end
    else
      for _ = 1, 4 do out[#out + 1] = -1 end
    end
    out[#out + 1] = tonumber(gone[i + 1])
  end
  if #members > 0 then
    redis.call('ZREM', key, unpack(members))
  end
  return out
end

-- keep makes the set outlive a lease ending at expires by one lease time:
-- long enough for the next call to find the lease expired and report it
-- (a holder that never released), short enough that nothing is left for
-- long of a key nobody holds.
local function keep(expires)
  local ttl = expires - now + leaseMs
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end

-- reply assembles the answer.
local function reply(ok, inFlight, ms, expired)
  local out = {ok, now, inFlight, ms, #expired / 5}
  for i = 1, #expired do out[#out + 1] = expired[i] end
  return out
end
