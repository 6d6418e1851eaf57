-- Removes one override.
-- KEYS[1]: the policy's overrides hash.
-- ARGV[1]: the field; ARGV[2]: the hash's new version; ARGV[3]: the channel
-- that announces changes; ARGV[4]: the policy's name.
-- Returns {1, the hash's version} when it was there, else {0, ''} (and
-- changes nothing). A hash left with only its version goes, and its version
-- with it ('').
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  return {0, ''}
end
local version = ARGV[2]
if redis.call('HLEN', KEYS[1]) == 1 and redis.call('HEXISTS', KEYS[1], 'version') == 1 then
  redis.call('DEL', KEYS[1])
  version = ''
else
  redis.call('HSET', KEYS[1], 'version', version)
end
redis.call('PUBLISH', ARGV[3], version .. '\n' .. ARGV[4] .. '\n' .. ARGV[1] .. '\n')
return {1, version}
