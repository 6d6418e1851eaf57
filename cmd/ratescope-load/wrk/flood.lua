-- wrk request function: POST /api/v1/check, a flood — 9 calls in 10 on 100
-- keys filled past their limit, the tenth on a key never seen (denied
-- answers are 429: wrk counts them as "Non-2xx", expected here).
local n = 0
local id = tostring(os.time()) .. "-" .. tostring(math.random(1e9))
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  n = n + 1
  local key
  if n % 10 == 9 then
    key = "fresh-" .. id .. "-" .. n
  else
    key = "hot-" .. (n % 100)
  end
  return wrk.format(nil, "/api/v1/check", nil, '{"key":"' .. key .. '","policy":"flood"}')
end
