-- window.lua: a read-only snapshot of one log on Redis's clock, consuming nothing.
--
-- KEYS[1]  the sorted set rate_limit:{<key>}:<policy>
-- ARGV[1]  the most entries to return
-- ARGV[2…] the window of each rule in ms
-- the KEYS after, ARGV after the windows: quotas (quota.lua, prepended
--          after lock.lua, whose lock this script never takes)
--
-- Returns {nowMs, entries (member, score, member, score …) inside the longest
-- window oldest first, then per rule: the count inside its window and its
-- oldest score there, -1 when empty, then per quota: count, start, end,
-- retryMs, retry1Ms (quotaReport; no retry, as nothing is asked)}.

local key = KEYS[1]
local max = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local longest = 0
for i = 2, nargs do
  local w = tonumber(ARGV[i])
  if w > longest then longest = w end
end

local entries = {}
if nargs > 1 then
  entries = redis.call('ZRANGEBYSCORE', key, '(' .. (now - longest), '+inf', 'WITHSCORES', 'LIMIT', 0, max)
end
local out = {now, entries}
for i = 2, nargs do
  local lo = '(' .. (now - tonumber(ARGV[i]))
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
