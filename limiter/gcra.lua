-- gcra.lua: the generic cell rate algorithm with go-redis/redis_rate's
-- semantics: emission interval T = window / limit, burst = limit. The state
-- is one theoretical arrival time (TAT), never taken to be before now. A
-- request of cost c is allowed iff max(TAT, now) + c × T − now <= window, and
-- then TAT becomes max(TAT, now) + c × T. From empty, limit requests pass at
-- once; after that one every T.
--
-- T is rarely a whole number of ms, so the TAT is kept exactly as a whole
-- part and a fraction of the limit: TAT = tatMs + num / limit. (redis_rate
-- keeps float seconds and rounds its remaining count to the nearest, which
-- admits a request up to T/2 early; here the comparison is exact, so retryMs
-- is the first ms at which the request is allowed.)
--
-- Field value: "<tatMs>:<num>:<limit>"; the limit is stored so that a
-- changed limit (a config reload) re-expresses the fraction, rounding the TAT
-- up by less than one ms.
-- Reply state: s1 tatMs, s2 num (TAT = s1 + s2 / limit), s3 unused.
-- used: limit − ⌊(window − (TAT − now)) × limit / window⌋.
-- resetMs: ⌈TAT − now⌉, until the burst is whole again.
-- retryMs: ⌈TAT + c × T − window⌉ − now.

local function assess(limit, w, stored, c)
  local a, b = now, 0
  if stored then
    local a0, b0, l0 = string.match(stored, '^(%d+):(%d+):(%d+)$')
    a0, b0, l0 = tonumber(a0), tonumber(b0), tonumber(l0)
    if a0 and l0 and l0 > 0 then
      if l0 ~= limit then
        b0 = cdiv(b0 * limit, l0)
        if b0 >= limit then
          a0, b0 = a0 + 1, b0 - limit
        end
      end
      if a0 > now or (a0 == now and b0 > 0) then
        a, b = a0, b0
      end
    end
  end
  -- The TAT after a request of cost c: + c × w / limit, carried into whole ms.
  local q = idiv(c * w, limit)
  local na, nb = a + q, b + (c * w - q * limit)
  if nb >= limit then
    na, nb = na + 1, nb - limit
  end
  local ahead = na - now
  local up = 0
  if nb > 0 then
    up = 1
  end
  return {
    limit = limit, w = w, a = a, b = b, na = na, nb = nb,
    fits = ahead < w or (ahead == w and nb == 0),
    retry = ahead - w + up,
  }
end

local function consume(s)
  s.a, s.b = s.na, s.nb
  return int(s.a) .. ':' .. int(s.b) .. ':' .. int(s.limit)
end

local function report(s)
  local x = (s.w - (s.a - now)) * s.limit - s.b
  local remaining = 0
  if x > 0 then
    remaining = idiv(x, s.w)
  end
  local reset = 0
  if s.a > now or s.b > 0 then
    reset = s.a - now
    if s.b > 0 then
      reset = reset + 1
    end
  end
  return s.limit - remaining, reset, s.a, s.b, 0
end

return run(assess, consume, report)
