-- check.lua: one sliding-window-log decision, run atomically by Redis.
--
-- KEYS[1]  the sorted set rate_limit:{<key>}:<policy>
-- ARGV[1]  cost: entries this request adds when allowed (>= 0; 0 only for a peek)
-- ARGV[2]  member: a UUID v4; a cost of n adds member, member:1 … member:n-1.
--          Empty for a peek: decide, and record nothing
-- ARGV[3]  maxEvict: the most expired entries one call removes
-- ARGV[4…] the rules as pairs: limit, windowMs (the longest window first or not: any order)
-- KEYS[2], the last ARGV: a lock (lock.lua, prepended)
-- the KEYS after, ARGV before the lock's: quotas (quota.lua, prepended)
--
-- Returns {allowed, nowMs, then per rule: count, oldestMs, retryMs, retry1Ms,
-- then per quota: count, start, end, retryMs, retry1Ms (quotaReport),
-- then, when the policy locks: lock state, level, until (lockDecide)}
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

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local nrules = (nargs - 3) / 2
local longest, longestArg = 0, nil
for i = 1, nrules do
  local w = tonumber(ARGV[3 + 2 * i])
  if w > longest then longest, longestArg = w, ARGV[3 + 2 * i] end
end
local cutoff = now - longest

-- The oldest entry says whether anything expired: when it is inside the
-- longest window nothing did, and no eviction call is needed. (Reading more
-- of the oldest entries, to evict a few without another call, measured no
-- cheaper: every entry read is a member and a score formatted for Lua.)
-- Eviction is bounded so no call blocks Redis for long; counting never
-- relies on it.
local oldest = nil -- nil: empty, or a policy of quotas alone, which keeps no log
if nrules > 0 then oldest = tonumber(redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')[2]) end
local total, stale = 0, 0 -- stale: expired entries left beyond maxEvict
if oldest then
  total = redis.call('ZCARD', key)
  if oldest <= cutoff then
    oldest = nil -- evicted; read again if needed
    if total <= maxEvict then
      total = total - redis.call('ZREMRANGEBYSCORE', key, '-inf', cutoff)
    else
      local expired = redis.call('ZCOUNT', key, '-inf', cutoff)
      local n = math.min(expired, maxEvict)
      redis.call('ZREMRANGEBYRANK', key, '0', tostring(n - 1))
      total, stale = total - n, expired - n
    end
  end
end

-- The score at rank r (0 = the oldest) as a number.
local function scoreAt(r)
  if r == 0 and oldest then return oldest end
  local s = tostring(r)
  local score = tonumber(redis.call('ZRANGE', key, s, s, 'WITHSCORES')[2])
  if r == 0 then oldest = score end
  return score
end

local allowed = 1
local out = {0, now}
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
    if cost == 1 then
      retry1 = retry
    elseif count + 1 > limit then
      retry1 = scoreAt(base + count - limit) + w - now
    end
  end
  out[#out + 1] = count
  out[#out + 1] = first
  out[#out + 1] = retry
  out[#out + 1] = retry1
end

if nquotas > 0 and quotaAssess(now, cost) == 0 then allowed = 0 end

local lockState, lockLevel, lockUntil
allowed, lockState, lockLevel, lockUntil = lockDecide(now, allowed, member ~= '')

if allowed == 1 and member ~= '' and nquotas > 0 then quotaConsume(cost) end
-- A policy of quotas alone keeps no log.
if allowed == 1 and member ~= '' and nrules > 0 then
  -- ZADD in chunks: unpack() takes a few thousand values at most.
  local score = tostring(now)
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
  redis.call('PEXPIRE', key, longestArg)
end
out[1] = allowed
quotaReport(out)
if lockKey then
  out[#out + 1] = lockState
  out[#out + 1] = lockLevel
  out[#out + 1] = lockUntil
end
return out
