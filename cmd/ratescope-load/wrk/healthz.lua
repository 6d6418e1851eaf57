-- wrk request function: GET /healthz, the bar — the same server's cheapest
-- answer, through the same request function machinery as the checks.
wrk.method = "GET"
request = function() return wrk.format(nil, "/healthz") end
