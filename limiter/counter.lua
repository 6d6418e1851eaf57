-- counter.lua: the sliding-window counter, the weighted approximation of a
-- sliding window over windows aligned like fixed's. With elapsed = now -
-- start of the current window, allowed iff
--   previous × (window − elapsed) / window + current + cost <= limit,
-- compared in whole numbers: previous × (window − elapsed) <= (limit −
-- current − cost) × window.
--
-- Field value: "<windowStartMs>:<previous>:<current>"; if the stored window is
-- the one before the current one, its current count is now the previous one;
-- anything older counts as 0.
-- Reply state: s1 window start, s2 previous, s3 current.
-- used: current + ⌈previous × (window − elapsed) / window⌉.
-- resetMs: until the estimate is 0 — the end of the next window while the
-- current one counts anything, else the end of the current one.
-- retryMs: the first ms at which the estimate leaves room for cost: later in
-- this window as the previous window's weight falls, or else in the next one,
-- where the current count becomes the previous.

local function assess(limit, w, stored, c)
  local start = idiv(now, w) * w
  local elapsed = now - start
  local prev, curr = 0, 0
  if stored then
    local s0, p0, c0 = string.match(stored, '^(%d+):(%d+):(%d+)$')
    s0 = tonumber(s0)
    if s0 == start then
      prev, curr = tonumber(p0), tonumber(c0)
    elseif s0 == start - w then
      prev = tonumber(c0)
    end
  end
  local s = {w = w, start = start, elapsed = elapsed, prev = prev, curr = curr}
  local room = limit - curr - c
  s.fits = room >= 0 and prev * (w - elapsed) <= room * w
  if not s.fits then
    local at
    if room >= 0 then
      -- prev > 0 here. In this window: prev × (w − e) <= room × w from
      -- e = w − ⌊room × w / prev⌋ on.
      local e = w - idiv(room * w, prev)
      if e < w then
        at = start + e
      end
    end
    if not at then
      -- In the next window previous = curr, current = 0:
      -- curr × (w − e) <= (limit − c) × w.
      local e = 0
      if curr > 0 then
        e = math.max(0, w - idiv((limit - c) * w, curr))
      end
      at = start + w + e
    end
    s.retry = at - now
  end
  return s
end

local function consume(s)
  s.curr = s.curr + cost
  return int(s.start) .. ':' .. int(s.prev) .. ':' .. int(s.curr)
end

local function report(s)
  local used = s.curr + cdiv(s.prev * (s.w - s.elapsed), s.w)
  local reset = 0
  if s.curr > 0 then
    reset = s.start + 2 * s.w - now
  elseif s.prev > 0 then
    reset = s.start + s.w - now
  end
  return used, reset, s.start, s.prev, s.curr
end

return run(assess, consume, report)
