-- check.lua: one sliding-window-log decision, run atomically by Redis.
--
-- KEYS[1]  the sorted set rate_limit:{<key>}:<policy>
-- ARGV[1]  cost: entries this request adds when allowed (>= 0; 0 only for a peek)
-- ARGV[2]  member: a UUID v4; a cost of n adds member, member:1 … member:n-1.
--          Empty for a peek: decide, and record nothing
-- ARGV[3]  maxEvict: the most expired entries one call removes
-- ARGV[4…] the rules as pairs: limit, windowMs (the longest window first or not: any order)
-- then, optionally, one more: wait, the most ms after now at which a request
--          the rules deny may be booked (below); a call without it books
--          nothing and its reply has no booked value, as before bookings
-- KEYS[2], the last ARGV: a lock (lock.lua, prepended)
-- the KEYS after, ARGV before the lock's: quotas (quota.lua, prepended)
--
-- Returns {allowed, nowMs, then per rule: count, oldestMs, retryMs, retry1Ms,
-- then per quota: count, start, end, retryMs, retry1Ms (quotaReport),
-- then, when the policy locks: lock state, level, until (lockDecide),
-- then, when the call carries a wait: bookedMs, the score of a booking, 0
-- when none was made}
--   count     entries inside the rule's window before this request
--   oldestMs  oldest score inside the rule's window before this request, -1 when empty
--   retryMs   for a violated rule, ms until enough entries slide out; else 0
--   retry1Ms  the same for a request of cost 1: ms until the rule has room for
--             one more, 0 when it has. The local deny cache keeps a denial
--             only while some rule has no room even for cost 1.
--
-- Score = Redis's own clock (TIME), so every app instance agrees. An entry whose
-- score is exactly now - window is already out of that window, hence the "(" bounds.
--
-- A booking: when the rules deny a request but all of them have room for it
-- by now + retry (the exact retry below, the largest over the violated
-- rules) and that is within wait, the request is recorded at once, at the
-- future score S = now + retry, instead of being denied; its caller holds it
-- until S. Then each rule's count, oldestMs (and retry 0) describe its
-- window at S, before this request. Why that is exact, for each rule (limit
-- L, window w), with the invariant "every window (T - w, T] holds at most L
-- entries, for every T" holding before the call:
--   * Every check counts (now - w, +inf): booked entries, scored after now,
--     are inside it. A later check, here or on any instance, sees a booking
--     as occupying its window, so no request arriving later takes its slot
--     (first come, first served: Redis runs one script at a time).
--   * Recording cost entries at a score X keeps the invariant when
--     count(X - w, +inf) + cost <= L before it: a window (T - w, T] with
--     T < X does not hold X, and one with T >= X lies inside (X - w, +inf).
--     An ordinary check records at X = now with exactly that count.
--   * For a booking, X = S. The violated rule's k-th oldest entry inside
--     (now - w, +inf), k = count + cost - L, is at s = S' - w with
--     S' = now + its retry <= S, so at S those k entries are out:
--     count(S - w, +inf) <= count - k = L - cost. A rule with room has
--     count + cost <= L already, and (S - w, +inf) is inside (now - w,
--     +inf). The retry may point past an earlier booking (the k-th oldest
--     may itself be booked): the argument is the same, booked entries are
--     entries.
--   * No earlier S fits: before S' the violated rule's window still holds
--     those k entries, so S is the first moment the cost fits.
-- The quotas and the lock below are decided at now: a booking takes the
-- quota of the period holding now, so it books only when the quota has
-- room and S lies in that same period (before its end); a held lock
-- refuses it; a booking is no denial, so it never locks the key.
-- The key's expiry must cover the latest booking plus the longest window:
-- an expiry is only ever moved later (expireAfter), never earlier.
--
-- Cheap on Redis: every call into Redis from Lua costs more than the work it
-- does, and a number passed to one is formatted with %.17g, so the common
-- paths make few calls, with strings. Entries are sorted by score, so the ones
-- inside a window are the newest `count` by rank: the k-th oldest inside it is
-- at rank total - count + k - 1, found by rank (no score range to parse), and
-- after eviction the longest window holds the whole set (ZCARD, no ZCOUNT).

local key = KEYS[1]
local cost = tonumber(ARGV[1])
local member = ARGV[2]
local maxEvict = tonumber(ARGV[3])

-- step now [TIME] now, from Redis's own clock, so every app instance agrees
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local nrules = math.floor((nargs - 3) / 2)
local wait = nil -- nil: the call books nothing, and its reply has no bookedMs
if nargs > 3 + 2 * nrules then wait = tonumber(ARGV[nargs]) end
local longest, longestArg = 0, nil
for i = 1, nrules do
  local w = tonumber(ARGV[3 + 2 * i])
  if w > longest then longest, longestArg = w, ARGV[3 + 2 * i] end
end
local cutoff = now - longest

-- step read [ZCARD] count the log
-- Eviction is bounded so no call blocks Redis for long; counting never
-- relies on it.
local oldest = nil -- the oldest entry's score once read; nil: not read
local total, stale = 0, 0 -- stale: expired entries left beyond maxEvict
-- A policy of quotas alone keeps no log.
if nrules > 0 then total = redis.call('ZCARD', key) end
-- step evict [ZREMRANGEBYSCORE ZRANGE ZCOUNT ZREMRANGEBYRANK] evict entries with score ≤ now − window, at most 1,000 a call
-- A check's log of at most maxEvict entries is evicted in one call, without
-- reading its oldest entry first: under steady traffic most checks find
-- something expired, and reading the oldest before and again after the
-- eviction cost more than evicting outright. A peek reads the oldest first
-- and evicts only when something expired, so it writes nothing otherwise
-- (a master short of replicas refuses every write, one that removes nothing
-- too). A longer log is evicted from its oldest, maxEvict at most.
if total > 0 then
  local evict = total <= maxEvict and member ~= ''
  if not evict then
    oldest = tonumber(redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')[2])
    evict = oldest <= cutoff
  end
  if evict then
    oldest = nil -- evicted, or never read; read when needed
    if total <= maxEvict then
      total = total - redis.call('ZREMRANGEBYSCORE', key, '-inf', tostring(cutoff))
    else
      local expired = redis.call('ZCOUNT', key, '-inf', tostring(cutoff))
      local n = math.min(expired, maxEvict)
      redis.call('ZREMRANGEBYRANK', key, '0', tostring(n - 1))
      total, stale = total - n, expired - n
    end
  end
end

-- The score at rank r (0 = the oldest) as a number.
local function scoreAt(r)
  if r == 0 and oldest then return oldest end
  local s = '0'
  if r > 0 then s = tostring(r) end
  local score = tonumber(redis.call('ZRANGE', key, s, s, 'WITHSCORES')[2])
  if r == 0 then oldest = score end
  return score
end

-- step rules [ZCOUNT ZRANGE] per rule: count its window (now − window, +∞) — the whole log when the oldest is inside it — and, when count + cost > limit, read by rank the entry that must slide out: retry = its score + window − now
local allowed = 1
local out = {0, now}
local retryMax = 0 -- the largest retry of a violated rule
for i = 1, nrules do
  local limit = tonumber(ARGV[2 + 2 * i])
  local w = tonumber(ARGV[3 + 2 * i])
  local count
  if total == 0 or (w == longest and stale == 0) then
    count = total
  elseif stale == 0 and scoreAt(0) > now - w then
    count = total -- the oldest is inside this window too
  else
    count = redis.call('ZCOUNT', key, '(' .. (now - w), '+inf')
  end
  local base = total - count -- rank of the oldest entry inside this window
  local first, retry, retry1 = -1, 0, 0
  if count > 0 then first = scoreAt(base) end
  if count + cost > limit then
    allowed = 0
    -- The k-th oldest entry must leave before count + cost fits again.
    local k = count + cost - limit
    local kth = first
    if k > 1 then kth = scoreAt(base + k - 1) end
    retry = kth + w - now
    retryMax = math.max(retryMax, retry)
    if cost == 1 then
      retry1 = retry
    elseif count + 1 > limit then
      retry1 = scoreAt(base + count - limit) + w - now
    end
  end
  local at = 2 + 4 * (i - 1)
  out[at + 1], out[at + 2], out[at + 3], out[at + 4] = count, first, retry, retry1
end

-- step quotas [GET] per calendar quota: its counter for the period holding now
local quotasFit = 1
if nquotas > 0 then quotasFit = quotaAssess(now, cost) end

-- step wait [] may it wait? a denied request books now + retry, when that is within its wait
-- slot: the score a request the rules deny books, or nil (see the top).
local slot = nil
if allowed == 0 and quotasFit == 1 and wait and retryMax <= wait and member ~= '' then
  slot = now + retryMax
  for i = 1, nquotas do
    if slot >= quotas[i].stop then slot = nil end -- the next period's quota
  end
end
if quotasFit == 0 then allowed = 0 end

-- step lock [HMGET HSET PEXPIRE] a lockout in force denies; a denial of a locking policy locks the key
local lockState, lockLevel, lockUntil = 0, 0, 0
if slot then allowed = 1 end -- a booking is no denial: it never locks
if lockKey then allowed, lockState, lockLevel, lockUntil = lockDecide(now, allowed, member ~= '') end
if allowed == 0 then slot = nil end -- a lock held

-- step booking [ZCOUNT ZRANGE] a booking: each rule's window at the booked moment
if slot then
  -- Each rule's window at the slot, before this request: what the caller
  -- answers with when the slot comes. Read before the ZADD, so ranks hold.
  for i = 1, nrules do
    local w = tonumber(ARGV[3 + 2 * i])
    local count = redis.call('ZCOUNT', key, '(' .. (slot - w), '+inf')
    local first = -1
    if count > 0 then first = scoreAt(total - count) end
    local at = 2 + 4 * (i - 1)
    out[at + 1], out[at + 2], out[at + 3], out[at + 4] = count, first, 0, 0
  end
end

-- step record [INCRBY PEXPIREAT ZADD PEXPIRE PTTL] only when allowed: count each quota, ZADD the entries at now (or the booked moment), keep the key for the longest window
if allowed == 1 and member ~= '' and nquotas > 0 then quotaConsume(cost) end
-- A policy of quotas alone keeps no log.
if allowed == 1 and member ~= '' and nrules > 0 then
  local score, ttl, ttlArg = tostring(now), longest, longestArg
  if slot then
    score = string.format('%.0f', slot)
    ttl = slot - now + longest
    ttlArg = string.format('%.0f', ttl)
  end
  if cost == 1 then
    redis.call('ZADD', key, score, member)
  else
    -- ZADD in chunks: unpack() takes a few thousand values at most.
    local args = {}
    for j = 0, cost - 1 do
      args[#args + 1] = score
      if j == 0 then
        args[#args + 1] = member
      else
        args[#args + 1] = member .. ':' .. j
      end
      if #args >= 1000 or j == cost - 1 then
        redis.call('ZADD', key, unpack(args))
        args = {}
      end
    end
  end
  -- The key lives ttl from now at least: an expiry already later — one a
  -- booking set — stays. GT needs Redis 7; before it (an error) or when GT
  -- sets nothing (an expiry as late or later, or none, which GT takes for
  -- later) PTTL decides. A key this call made has no expiry to keep.
  if total == 0 then
    redis.call('PEXPIRE', key, ttlArg)
  elseif redis.pcall('PEXPIRE', key, ttlArg, 'GT') ~= 1 and redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttlArg)
  end
end
-- step answer [] denied? nothing was recorded; the answer carries each rule's count, oldest entry and retry
out[1] = allowed
if nquotas > 0 then quotaReport(out) end
if lockKey then
  out[#out + 1] = lockState
  out[#out + 1] = lockLevel
  out[#out + 1] = lockUntil
end
if wait then out[#out + 1] = slot or 0 end
return out
