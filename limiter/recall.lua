-- recall.lua: what the log still says of one allowed check, read without
-- changing anything: the moment it was recorded and, for each window, what
-- the window held just before it. An explanation of that check is rebuilt
-- from these numbers (Limiter.Recall).
--
-- KEYS[1]  the sorted set rate_limit:{<key>}:<policy>
-- ARGV[1]  the check's id: its entries are id, id:1 … id:n-1, all at one score
-- ARGV[2…] the windows, in ms
--
-- Returns {nowMs, at, own, ties, first, then per window: count, oldestMs}, or
-- {nowMs, -1} when the id has no entry left.
--   at        the entry's score: the check's now (or its booked slot)
--   own       the check's entries at that score (its cost, less any refunded)
--   ties      other checks' entries at the same millisecond: the log keeps no
--             order among them, so each window counts them as before it;
--             -1 when there were more than the read bound
--   first     the oldest score the log still holds: an entry evicted since
--             was older (eviction takes the oldest first)
--   count     entries inside (at - window, at) and the ties: before the check
--   oldestMs  the oldest of those, -1 when none
local key, id = KEYS[1], ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = redis.call('ZSCORE', key, id)
if not score then return {now, -1} end
local at = tonumber(score)
local atArg = string.format('%.0f', at)

-- The entries at that millisecond, bounded: a cost is at most 1,000.
local bound = 2000
local same = redis.call('ZRANGE', key, atArg, atArg, 'BYSCORE', 'LIMIT', '0', tostring(bound))
local own, ties = 0, 0
local prefix = id .. ':'
for _, m in ipairs(same) do
  if m == id or string.sub(m, 1, #prefix) == prefix then own = own + 1 else ties = ties + 1 end
end
if #same >= bound then ties = -1 end

local first = tonumber(redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')[2])
local out = {now, at, own, ties, first}
for i = 2, #ARGV do
  local from = '(' .. string.format('%.0f', at - tonumber(ARGV[i]))
  local count = redis.call('ZCOUNT', key, from, '(' .. atArg) + math.max(ties, 0)
  local oldest = -1
  if count > 0 then
    oldest = tonumber(redis.call('ZRANGE', key, from, '+inf', 'BYSCORE', 'LIMIT', '0', '1', 'WITHSCORES')[2])
  end
  out[#out + 1] = count
  out[#out + 1] = oldest
end
return out
