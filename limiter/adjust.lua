-- adjust.lua: what refund.lua and settle.lua share, prepended to each.
--
-- KEYS[1]  the sorted set rate_limit:{<key>}:<policy>
-- ARGV[1]  the check's id (a UUID): its entries are id, id:1 … id:n-1, all at
--          the check's score
-- ARGV[2]  the resets channel: a change is announced there as "<policy> <key>",
--          so every instance's deny cache drops that window
-- ARGV[3]  "<policy> <key>"
-- ARGV[4]  refund: unused (0); settle: the cost to settle at (0 … the policy's
--          largest cost)
-- ARGV[5…] the rules as pairs: limit, windowMs
-- the KEYS after, ARGV after the rules: quotas (quota.lua, prepended after
--          lock.lua, whose lock this script never takes); a refund or a
--          settle reads them and leaves their counters as they are
--
-- Returns {was, now, nowMs, then per rule: count, oldestMs, then per quota:
-- count, start, end, retryMs, retry1Ms (quotaReport)}
--   was       the check's entries found in the log (inside the longest window)
--   now       its entries after
--   count     entries inside the rule's window after, oldestMs the oldest
--             score there (-1 when empty)

local key, id = KEYS[1], ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nrules = (nargs - 4) / 2
local longest = 0
for i = 1, nrules do
  local w = tonumber(ARGV[4 + 2 * i])
  if w > longest then longest = w end
end

-- entries returns the check's score and its entries' count (they are
-- id, id:1 … id:n-1, none missing: a settle takes the highest first), or nil
-- when none is left inside the longest window.
local function entries()
  local s = redis.call('ZSCORE', key, id)
  if not s or tonumber(s) <= now - longest then return nil, 0 end
  local prefix = id .. ':'
  local n = 0
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', key, s, s)) do
    if m == id or string.sub(m, 1, #prefix) == prefix then n = n + 1 end
  end
  return s, n
end

-- member is the name of the check's j-th entry.
local function member(j)
  if j == 0 then return id end
  return id .. ':' .. j
end

-- apply runs cmd (ZREM or ZADD) over the entries from..to, in chunks:
-- unpack() takes a few thousand values at most.
local function apply(cmd, score, from, to)
  local args = {}
  for j = from, to do
    if score then args[#args + 1] = score end
    args[#args + 1] = member(j)
    if #args >= 1000 or j == to then
      redis.call(cmd, key, unpack(args))
      args = {}
    end
  end
end

-- reply announces a change and reports the rules after it.
local function reply(was, after)
  if was ~= after then
    redis.call('PUBLISH', ARGV[2], ARGV[3])
  end
  local out = {was, after, now}
  for i = 1, nrules do
    local lo = '(' .. (now - tonumber(ARGV[4 + 2 * i]))
    local count = redis.call('ZCOUNT', key, lo, '+inf')
    local oldest = -1
    if count > 0 then
      oldest = tonumber(redis.call('ZRANGEBYSCORE', key, lo, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)[2])
    end
    out[#out + 1] = count
    out[#out + 1] = oldest
  end
  if nquotas > 0 then
    quotaAssess(now, 0)
    quotaReport(out)
  end
  return out
end
