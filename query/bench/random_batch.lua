-- wrk script: GET /v1/posts/counts?ids=... with 20 random ids in 1..N (a
-- timeline page). N defaults to 100000; override with: -- 5000
local n = 100000
function init(args)
  if #args > 0 then n = tonumber(args[1]) end
  math.randomseed(os.time() + math.floor(os.clock() * 1000000))
end
function request()
  local ids = {}
  for i = 1, 20 do ids[i] = math.random(1, n) end
  return wrk.format("GET", "/v1/posts/counts?ids=" .. table.concat(ids, ","))
end
