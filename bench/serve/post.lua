-- wrk -s post.lua URL: POSTs the JSON body in the file $BODY_FILE to URL on every request (an
-- Open Inference Protocol infer request; bench/serve/run.py and tests/serve write it).
local path = os.getenv("BODY_FILE")
local f = assert(io.open(path, "rb"), "BODY_FILE " .. tostring(path) .. " cannot be read")
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
