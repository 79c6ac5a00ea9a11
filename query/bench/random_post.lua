-- wrk script: GET /v1/posts/{id}/counts for uniformly random ids in 1..N.
-- N defaults to 100000; override with: wrk ... -s random_post.lua -- 5000
local n = 100000
function init(args)
  if #args > 0 then n = tonumber(args[1]) end
  math.randomseed(os.time() + math.floor(os.clock() * 1000000))
end
function request()
  return wrk.format("GET", "/v1/posts/" .. math.random(1, n) .. "/counts")
end
