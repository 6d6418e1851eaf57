-- wrk request function: POST /api/v1/check, all allowed — KEYS keys (default
-- 10,000) under a policy nobody fills (compare.sh starts the server with it).
local n = 0
local keys = tonumber(os.getenv("KEYS") or "10000")
local policy = os.getenv("POLICY") or "load"
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  n = n + 1
  return wrk.format(nil, "/api/v1/check", nil,
    '{"key":"u-' .. (n % keys) .. '","policy":"' .. policy .. '"}')
end
