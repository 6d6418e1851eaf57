-- Sets one override, unless the policy already has as many as it may hold.
-- KEYS[1]: the policy's overrides hash.
-- ARGV[1]: the field (key:<key> or prefix:<prefix>); ARGV[2]: its value up
-- to its updatedMs, which Redis's clock completes; ARGV[3]: the hash's new
-- version; ARGV[4]: the most overrides the hash may hold; ARGV[5]: the
-- channel that announces changes; ARGV[6]: the policy's name.
-- Returns {1, updatedMs} when set, {0, ""} when the hash is full. Counting
-- and writing in one script makes the bound hold across instances.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  local n = redis.call('HLEN', KEYS[1])
  if redis.call('HEXISTS', KEYS[1], 'version') == 1 then
    n = n - 1
  end
  if n >= tonumber(ARGV[4]) then
    return {0, ''}
  end
end
local t = redis.call('TIME')
local ms = t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000))
local value = ARGV[2] .. ms .. '}'
redis.call('HSET', KEYS[1], ARGV[1], value, 'version', ARGV[3])
redis.call('PUBLISH', ARGV[5], ARGV[3] .. '\n' .. ARGV[6] .. '\n' .. ARGV[1] .. '\n' .. value)
return {1, ms}
