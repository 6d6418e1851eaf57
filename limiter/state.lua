-- state.lua: what the fixed, counter, gcra and bucket scripts share; each of
-- those files is appended to this one and ends with `return run(assess,
-- consume, report)`.
--
-- KEYS[1]  the hash rate_limit:{<key>}:<policy>:<algorithm>, one field per
--          rule, named by its window in ms (e.g. "60000"); the field's value
--          is the algorithm's state, whole numbers joined by ':'
-- ARGV[1]  cost (>= 0)
-- ARGV[2]  what to record: 1 an allowed request's cost (a decision), 2 the
--          cost whether allowed or not (envoyproxy/ratelimit's counting), 0
--          nothing (a peek; with cost 0, a look at the state)
-- ARGV[3…] the rules as pairs: limit, windowMs
-- KEYS[2], the last ARGV: a lock (lock.lua, prepended)
-- the KEYS after, ARGV before the lock's: quotas (quota.lua, prepended)
--
-- Returns {allowed, nowMs, then per rule: used, resetMs, retryMs, retry1Ms, s1, s2, s3,
-- then per quota: count, start, end, retryMs, retry1Ms (quotaReport),
-- then, when the policy locks: lock state, level, until (lockDecide)}
--   used      what the rule counts as used after this request (limit - what
--             still fits), including its cost when allowed
--   resetMs   ms until the rule has full room again (0 when it has)
--   retryMs   for a violated rule, ms until the same request fits; else 0
--   retry1Ms  for a violated rule, ms until a request of cost 1 fits (0 when
--             one fits now): the local deny cache keeps a denial only while
--             some rule has no room even for cost 1
--   s1…s3     the algorithm's state after the request (see its file)
--
-- Time is Redis's own clock (TIME) in whole ms. Lua numbers are doubles, exact
-- for integers up to 2^53; limit ≤ 10^7 and window ≤ 6.048·10^8 ms keep every
-- product below under 6.1·10^15. Whole-number division is idiv.
--
-- A request is allowed only if every rule allows it; then every rule consumes
-- its cost and the hash expires when the last rule has full room again.
-- A denied request changes nothing, unless ARGV[2] is 2.

local key = KEYS[1]
local cost = tonumber(ARGV[1])
local record = tonumber(ARGV[2])
local nrules = (nargs - 2) / 2

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- idiv is floor(x / d) for whole numbers, d > 0. It is exact: x / d rounds
-- to the nearest double, and a true quotient k - r/d (r >= 1) could only round
-- to k if r/d < k·2^-53, i.e. k·d > 2^53 — but |x| stays below 2^53 here.
local function idiv(x, d)
  return math.floor(x / d)
end

-- cdiv is ceil(x / d) for whole numbers, d > 0.
local function cdiv(x, d)
  return -idiv(-x, d)
end

-- int writes a whole number as digits, never in e-notation.
local function int(x)
  return string.format('%.0f', x)
end

-- run applies the algorithm to every rule:
--   assess(limit, w, stored, c) -> s, a table with s.fits (a request of cost
--                               c fits now) and s.retry (ms until it would,
--                               when not); run calls it with c = cost, and
--                               again with c = 1 when cost > 1 does not fit
--   consume(s)               -> takes the cost; returns the value to store
--   report(s)                -> used, resetMs, s1, s2, s3
local function run(assess, consume, report)
  local states = {}
  local allowed = 1
  for i = 1, nrules do
    local limit, w = tonumber(ARGV[2 * i + 1]), tonumber(ARGV[2 * i + 2])
    local stored = redis.call('HGET', key, ARGV[2 * i + 2])
    local s = assess(limit, w, stored, cost)
    s.retry1 = 0
    if not s.fits then
      allowed = 0
      if cost == 1 then
        s.retry1 = s.retry
      else
        local one = assess(limit, w, stored, 1)
        if not one.fits then
          s.retry1 = one.retry
        end
      end
    end
    states[i] = s
  end
  if nquotas > 0 and quotaAssess(now, cost) == 0 then allowed = 0 end
  local lockState, lockLevel, lockUntil = 0, 0, 0
  if lockKey then allowed, lockState, lockLevel, lockUntil = lockDecide(now, allowed, record ~= 0) end
  local out = {allowed, now}
  local writes = {}
  local ttl = 0
  local records = cost > 0 and ((record == 1 and allowed == 1) or record == 2)
  if records and nquotas > 0 then quotaConsume(cost) end
  for i = 1, nrules do
    local s = states[i]
    if records then
      writes[#writes + 1] = ARGV[2 * i + 2]
      writes[#writes + 1] = consume(s)
    end
    local used, reset, s1, s2, s3 = report(s)
    if reset > ttl then
      ttl = reset
    end
    local retry = 0
    if not s.fits then
      retry = s.retry
    end
    out[#out + 1] = used
    out[#out + 1] = reset
    out[#out + 1] = retry
    out[#out + 1] = s.retry1
    out[#out + 1] = s1
    out[#out + 1] = s2
    out[#out + 1] = s3
  end
  if #writes > 0 then
    redis.call('HSET', key, unpack(writes))
    redis.call('PEXPIRE', key, ttl)
  end
  if nquotas > 0 then quotaReport(out) end
  if lockKey then
    out[#out + 1] = lockState
    out[#out + 1] = lockLevel
    out[#out + 1] = lockUntil
  end
  return out
end
