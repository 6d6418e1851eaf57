-- fixed.lua: a fixed window, aligned to multiples of the window on Redis's
-- clock (a 1m window starts at every whole minute). Allowed iff
-- count + cost <= limit, count being the requests of the current window.
--
-- Field value: "<windowStartMs>:<count>"; a start other than the current one
-- is an old window, counted as 0.
-- Reply state: s1 window start, s2 count, s3 unused.
-- resetMs: until the window ends (0 when nothing is counted in it).
-- retryMs: until the next window starts, where any cost <= limit fits.

local function assess(limit, w, stored, c)
  local start = idiv(now, w) * w
  local count = 0
  if stored then
    local s0, c0 = string.match(stored, '^(%d+):(%d+)$')
    if tonumber(s0) == start then
      count = tonumber(c0)
    end
  end
  return {
    w = w, start = start, count = count,
    fits = count + c <= limit,
    retry = start + w - now,
  }
end

local function consume(s)
  s.count = s.count + cost
  return int(s.start) .. ':' .. int(s.count)
end

local function report(s)
  local reset = 0
  if s.count > 0 then
    reset = s.start + s.w - now
  end
  return s.count, reset, s.start, s.count, 0
end

return run(assess, consume, report)
