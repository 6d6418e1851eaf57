-- lease_acquire.lua (after lease.lua): a new lease ARGV[1] when fewer than
-- limit are live, expiring leaseMs from now; else the time until the
-- earliest live one expires (an upper bound: its holder may release sooner).

local expired = evict()
local inFlight = redis.call('ZCOUNT', key, live, '+inf')
if inFlight < limit then
  local expires = now + leaseMs
  redis.call('ZADD', key, expires, id)
  keep(expires)
  return reply(1, inFlight + 1, expires, expired)
end
local first = redis.call('ZRANGEBYSCORE', key, live, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
return reply(0, inFlight, tonumber(first[2]) - now, expired)
