-- wrk script of tally-bench: random GETs, and one JSON line at the end with
-- the request count, errors and latency percentiles (microseconds).
--
--   wrk -t2 -c64 -d10s -s wrk_report.lua http://127.0.0.1:8080 -- MODE N [FIRST]
--
-- MODE: post   GET /v1/posts/{id}/counts, id uniform in FIRST..FIRST+N-1
--       batch  GET /v1/posts/counts?ids= with 20 such ids
--       unread GET /v1/users/{id}/unread, id uniform in FIRST..FIRST+N-1
local mode, n, first = "post", 100000, 1
local statuses = {}

function init(args)
  if #args > 0 then mode = args[1] end
  if #args > 1 then n = tonumber(args[2]) end
  if #args > 2 then first = tonumber(args[3]) end
  math.randomseed(os.time() + math.floor(os.clock() * 1000000) + (thread_seed or 0))
end

local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("thread_seed", threads * 7919)
end

local function random_id()
  return first + math.random(0, n - 1)
end

function request()
  if mode == "batch" then
    local ids = {}
    for i = 1, 20 do ids[i] = random_id() end
    return wrk.format("GET", "/v1/posts/counts?ids=" .. table.concat(ids, ","))
  elseif mode == "unread" then
    return wrk.format("GET", "/v1/users/" .. random_id() .. "/unread")
  end
  return wrk.format("GET", "/v1/posts/" .. random_id() .. "/counts")
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"errors_connect":%d,"errors_read":%d,"errors_write":%d,' ..
    '"errors_status":%d,"errors_timeout":%d,"p50_us":%d,"p99_us":%d,"p999_us":%d,"max_us":%d}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9), latency.max))
end
