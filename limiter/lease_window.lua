-- lease_window.lua: the live leases of an inflight policy, read without
-- changing anything.
--
-- KEYS[1]  the sorted set rate_limit:{<key>}:<policy>
-- ARGV[1]  the most leases to list
--
-- Returns {nowMs, {id, expiry, id, expiry …} (the earliest expiry first),
-- inFlight, the latest expiry (-1 when none is live)}

local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = '(' .. now
local leases = redis.call('ZRANGEBYSCORE', key, live, '+inf', 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
local inFlight = redis.call('ZCOUNT', key, live, '+inf')
local last = -1
if inFlight > 0 then
  last = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
end
return {now, leases, inFlight, last}
