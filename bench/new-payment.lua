-- wrk script: POST /agent/operations/payment, a new Idempotency-Key per request.
-- KEY (the agent's bearer key) and RUN (makes keys unique across runs) come from the
-- environment.
local key = os.getenv("KEY")
local run = os.getenv("RUN") or "run"
local body = '{"customer_id":"cus_bench","invoice_id":"inv_bench","amount":"10.00","currency":"USD"}'
local threads = 0
local counter = 0

function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

function request()
  counter = counter + 1
  local headers = {
    ["Content-Type"] = "application/json",
    ["Authorization"] = "Bearer " .. key,
    ["Idempotency-Key"] = string.format("%s-%d-%d", run, tid, counter),
  }
  return wrk.format("POST", "/agent/operations/payment", headers, body)
end
