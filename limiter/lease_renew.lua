-- lease_renew.lua (after lease.lua): the lease ARGV[1], when still live,
-- now expires leaseMs from now; an expired, released or unknown one stays
-- gone (ok 0).

local expired = evict()
local s = redis.call('ZSCORE', key, id)
local ok, expires = 0, 0
if s and tonumber(s) > now then
  expires = now + leaseMs
  redis.call('ZADD', key, 'XX', expires, id)
  keep(expires)
  ok = 1
end
return reply(ok, redis.call('ZCOUNT', key, live, '+inf'), expires, expired)
