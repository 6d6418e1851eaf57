-- lease_release.lua (after lease.lua): the lease ARGV[1] is gone, freeing
-- its slot at once. ok 1 when it was live; releasing it again, or after it
-- expired, changes nothing (ok 0).

local expired = evict()
local ok = redis.call('ZREM', key, id)
return reply(ok, redis.call('ZCOUNT', key, live, '+inf'), 0, expired)
