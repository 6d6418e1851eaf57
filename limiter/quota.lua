-- quota.lua: calendar quotas (LIMIT/day, LIMIT/week, LIMIT/month), which
-- every decision script shares; prepended to it after lock.lua.
--
-- KEYS after the lock's (when the policy locks), three per quota rule: the
--          counters rate_limit:{<key>}:<policy>:q<d|w|m>:<start ms> of
--          the period before the server's now, of the one holding it and
--          of the one after
-- ARGV     before the lock's base, five per quota rule: its limit, then
--          the starts of those three periods and the end of the last
--          (epoch ms), computed by the server in the policy's time zone;
--          the script's own arguments are the ones before them (nargs)
--
-- Which period holds now follows Redis's clock, as the windows do: the
-- script picks, of the three, the one whose [start, end) holds TIME, so app
-- instances whose clocks disagree count on the same counter. A quota is
-- decided with the rules, in the same run: a request is allowed only when
-- every rule and every quota has room, and only then does each quota's
-- counter take its cost. The counter expires after its period (plus a
-- margin for a failover to a replica whose clock is a little behind).

local quotaFirst = 2
if lockKey then quotaFirst = 3 end
local nquotas = (#KEYS - quotaFirst + 1) / 3
nargs = nargs - 5 * nquotas
local quotaMargin = 60000
local quotas -- each quota's counter, period and answer, once assessed

-- The quotas' functions exist only for a policy with quotas (making them
-- costs every call): a caller asks nquotas first.
local quotaAssess, quotaConsume, quotaReport
if nquotas > 0 then
  quotas = {}
  -- quotaAssess reads each quota's counter for the period holding now and
  -- returns 1 when a request of cost fits in every one, else 0.
  function quotaAssess(now, cost)
    local fits = 1
    for i = 1, nquotas do
      local a = nargs + 5 * (i - 1)
      local limit = tonumber(ARGV[a + 1])
      local q = nil
      for j = 0, 2 do
        local s, e = tonumber(ARGV[a + 2 + j]), tonumber(ARGV[a + 3 + j])
        if now >= s and now < e then
          q = {key = KEYS[quotaFirst + 3 * (i - 1) + j], start = s, stop = e}
          break
        end
      end
      if not q then
        error('the quota periods passed do not hold Redis time ' .. now .. ': the clocks of app and Redis differ by more than a period')
      end
      q.count = tonumber(redis.call('GET', q.key)) or 0
      q.retry, q.retry1 = 0, 0
      if q.count + cost > limit then
        fits = 0
        q.retry = q.stop - now
      end
      if q.count + 1 > limit then q.retry1 = q.stop - now end
      quotas[i] = q
    end
    return fits
  end

  -- quotaConsume counts an allowed request's cost in each quota's counter;
  -- a counter made now expires after its period.
  function quotaConsume(cost)
    for i = 1, nquotas do
      local q = quotas[i]
      if redis.call('INCRBY', q.key, cost) == cost then
        redis.call('PEXPIREAT', q.key, string.format('%.0f', q.stop + quotaMargin))
      end
    end
  end

  -- quotaReport appends, per quota, what it counted before this request and
  -- its period: count, start, end, retryMs, retry1Ms.
  function quotaReport(out)
    for i = 1, nquotas do
      local q = quotas[i]
      out[#out + 1] = q.count
      out[#out + 1] = q.start
      out[#out + 1] = q.stop
      out[#out + 1] = q.retry
      out[#out + 1] = q.retry1
    end
  end
end
