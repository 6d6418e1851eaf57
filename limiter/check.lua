-- check.lua: one sliding-window-log decision, run atomically by Redis.
--
-- KEYS[1]  the sorted set rate_limit:{<key>}:<policy>
-- ARGV[1]  cost: entries this request adds when allowed (>= 0; 0 only for a peek)
-- ARGV[2]  member: a UUID v4; a cost of n adds member, member:1 … member:n-1.
--          Empty for a peek: decide, and record nothing
-- ARGV[3]  maxEvict: the most expired entries one call removes
-- ARGV[4…] the rules as pairs: limit, windowMs (the longest window first or not: any order)
--
-- Returns {allowed, nowMs, then per rule: count, oldestMs, retryMs, retry1Ms}
--   count     entries inside the rule's window before this request
--   oldestMs  oldest score inside the rule's window before this request, -1 when empty
--   retryMs   for a violated rule, ms until enough entries slide out; else 0
--   retry1Ms  the same for a request of cost 1: ms until the rule has room for
--             one more, 0 when it has. The local deny cache keeps a denial
--             only while some rule has no room even for cost 1.
--
-- Score = Redis's own clock (TIME), so every app instance agrees. An entry whose
-- score is exactly now - window is already out of that window, hence the "(" bounds.

local key = KEYS[1]
local cost = tonumber(ARGV[1])
local member = ARGV[2]
local maxEvict = tonumber(ARGV[3])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local nrules = (#ARGV - 3) / 2
local longest = 0
for i = 1, nrules do
  local w = tonumber(ARGV[3 + 2 * i])
  if w > longest then longest = w end
end

-- Evict what no rule can count any more, bounded so no call blocks Redis for long.
-- Counting below never relies on this: ZCOUNT bounds each window by itself.
local expired = redis.call('ZCOUNT', key, '-inf', now - longest)
if expired > 0 then
  if expired > maxEvict then expired = maxEvict end
  redis.call('ZREMRANGEBYRANK', key, 0, expired - 1)
end

local allowed = 1
local out = {0, now}
for i = 1, nrules do
  local limit = tonumber(ARGV[2 + 2 * i])
  local w = tonumber(ARGV[3 + 2 * i])
  local lo = '(' .. (now - w)
  local count = redis.call('ZCOUNT', key, lo, '+inf')
  local oldest = -1
  local retry, retry1 = 0, 0
  if count > 0 then
    local first = redis.call('ZRANGEBYSCORE', key, lo, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    oldest = tonumber(first[2])
  end
  if count + cost > limit then
    allowed = 0
    -- The k-th oldest entry must leave before count + cost fits again.
    local k = count + cost - limit
    local kth = redis.call('ZRANGEBYSCORE', key, lo, '+inf', 'WITHSCORES', 'LIMIT', k - 1, 1)
    retry = tonumber(kth[2]) + w - now
    if cost == 1 then
      retry1 = retry
    elseif count + 1 > limit then
      local k1 = redis.call('ZRANGEBYSCORE', key, lo, '+inf', 'WITHSCORES', 'LIMIT', count - limit, 1)
      retry1 = tonumber(k1[2]) + w - now
    end
  end
  out[#out + 1] = count
  out[#out + 1] = oldest
  out[#out + 1] = retry
  out[#out + 1] = retry1
end

if allowed == 1 and member ~= '' then
  -- ZADD in chunks: unpack() takes a few thousand values at most.
  local args = {}
  for j = 0, cost - 1 do
    args[#args + 1] = now
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
  redis.call('PEXPIRE', key, longest)
end
out[1] = allowed
return out
