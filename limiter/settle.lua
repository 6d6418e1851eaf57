-- settle.lua (after adjust.lua): makes one check's recorded cost ARGV[4].
-- Fewer: its highest-numbered entries go. More: the missing ones are added
-- at the check's own score, even when that overfills a window — a debt that
-- later checks wait out exactly. A check with no entry left stays so.
local cost = tonumber(ARGV[4])
local s, n = entries()
if n == 0 then return reply(0, 0) end
if cost < n then
  apply('ZREM', nil, cost, n - 1)
elseif cost > n then
  apply('ZADD', s, n, cost - 1)
end
return reply(n, cost)
