-- wrk script: POST OpenAI chat completions, streamed or not, and count the
-- answers that were not 200.
--
--   WRK_STREAM=true  wrk -t2 -c64 -d10s -s bench/wrk_chat.lua http://127.0.0.1:PORT
--   WRK_STREAM=false wrk -t2 -c64 -d10s -s bench/wrk_chat.lua http://127.0.0.1:PORT
--
-- WRK_STREAM defaults to true. The URL's path is ignored: every request goes
-- to /v1/chat/completions. Each wrk thread has its own Lua state, so the
-- counters live per thread and done() adds them up through the thread handles
-- kept in setup().

local stream = (os.getenv("WRK_STREAM") or "true"):lower()
if stream ~= "true" and stream ~= "false" then
  -- Not error(): wrk reports a script error and then runs its plain GET anyway.
  io.stderr:write("WRK_STREAM must be true or false, not " .. stream .. "\n")
  os.exit(2)
end

local threads = {}

function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end

function init(args)
  -- The body is built per request so that the question varies (the mock
  -- answers it back, and a cache could not serve a repeated one); the
  -- formatting is cheap next to the HTTP round trip.
  n = 0
  non200 = 0
  statuses = {}
  wrk.method = "POST"
  wrk.path = "/v1/chat/completions"
  wrk.headers["Content-Type"] = "application/json"
  prefix = '{"model":"mock-model","messages":[{"role":"user","content":"question '
  suffix = '"}],"max_tokens":32,"temperature":0.0,"stream":' .. stream ..
    ',"stream_options":{"include_usage":true}}'
end

function request()
  n = n + 1
  -- The thread id in the number too, so no two threads send the same one.
  return wrk.format(nil, nil, nil, prefix .. (id * 1000000000 + n) .. suffix)
end

-- Defining response() makes wrk hand every body to Lua, which costs wrk some
-- CPU; it is needed to count statuses, and the mock's answers are small.
function response(status, headers, body)
  if status ~= 200 then
    non200 = non200 + 1
    statuses[status] = (statuses[status] or 0) + 1
  end
end

function done(summary, latency, requests)
  local total = 0
  local by_status = {}
  for _, thread in ipairs(threads) do
    total = total + thread:get("non200")
    for status, count in pairs(thread:get("statuses")) do
      by_status[status] = (by_status[status] or 0) + count
    end
  end
  io.write(string.format("stream=%s non-200 responses: %d\n", stream, total))
  for status, count in pairs(by_status) do
    io.write(string.format("  status %d: %d\n", status, count))
  end
end
