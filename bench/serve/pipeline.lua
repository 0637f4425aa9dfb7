-- wrk -s pipeline.lua URL: each write carries $DEPTH (default 16) infer requests, the JSON body in
-- $BODY_FILE, one after another on the connection (HTTP/1.1 pipelining; bench/serve/pipelined.py).
local path = os.getenv("BODY_FILE")
local f = assert(io.open(path, "rb"), "BODY_FILE " .. tostring(path) .. " cannot be read")
local body = f:read("*a")
f:close()
local depth = tonumber(os.getenv("DEPTH") or "16")
init = function(args)
  local r = {}
  for i = 1, depth do
    r[i] = wrk.format("POST", nil, {["Content-Type"] = "application/json"}, body)
  end
  req = table.concat(r)
end
request = function()
  return req
end
