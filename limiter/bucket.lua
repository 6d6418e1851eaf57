-- bucket.lua: a token bucket of capacity limit, refilled continuously at limit
-- per window; a request takes cost tokens and is allowed iff the bucket holds
-- them. A new bucket is full.
--
-- Tokens are kept in units of 1/window (ms) of a token, so the refill is a
-- whole limit units every ms and nothing rounds: the capacity is limit ×
-- window units and a request takes cost × window.
--
-- Field value: "<units>:<lastRefillMs>".
-- Reply state: s1 units at now (tokens = s1 / window), s2 last refill ms, s3
-- unused.
-- used: limit − ⌊units / window⌋ (the whole tokens missing).
-- resetMs: until the bucket is full again.
-- retryMs: ⌈(cost × window − units) / limit⌉, until enough has dripped in.

local function assess(limit, w, stored, c)
  local cap = limit * w
  local units, last = cap, now
  if stored then
    local u0, l0 = string.match(stored, '^(%d+):(%d+)$')
    u0, l0 = tonumber(u0), tonumber(l0)
    if u0 and l0 then
      last = l0
      local elapsed = now - l0
      if elapsed < 0 then
        elapsed = 0
      end
      -- After a whole window the bucket is full whatever it held; capping
      -- elapsed first keeps the sum below 2^53.
      if elapsed >= w then
        units = cap
      else
        units = math.min(cap, u0 + limit * elapsed)
      end
    end
  end
  return {
    limit = limit, w = w, cap = cap, units = units, last = last,
    fits = units >= c * w,
    retry = cdiv(c * w - units, limit),
  }
end

local function consume(s)
  s.units = s.units - cost * s.w
  s.last = now
  return int(s.units) .. ':' .. int(s.last)
end

local function report(s)
  return s.limit - idiv(s.units, s.w), cdiv(s.cap - s.units, s.limit), s.units, s.last, 0
end

return run(assess, consume, report)
