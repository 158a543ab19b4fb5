#!/usr/bin/env bash
# The agent scenario behind `make run`, against the PostgreSQL in DATABASE_URL: the
# mission on one laptop. provider-sim commits the first charge and drops its answer;
# the agent's first call times out on its side; it retries with the same key; opgate
# answers with the one operation, and the provider's ledger shows one charge.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/target/debug"
: "${DATABASE_URL:?DATABASE_URL must be set (make run sets it)}"
logs="$root/target/demo"
mkdir -p "$logs"

pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# start NAME ARGS...: runs a service, waits for its first stdout line, prints it.
start() {
  local name=$1; shift
  "$@" >"$logs/$name.out" 2>"$logs/$name.log" &
  pids+=($!)
  for _ in $(seq 200); do [ -s "$logs/$name.out" ] && break; sleep 0.05; done
  [ -s "$logs/$name.out" ] || { echo "$name did not start; see $logs/$name.log" >&2; exit 1; }
  head -1 "$logs/$name.out"
}

say "Migrating the database"
"$bin/opgate" migrate

say "Creating a demo agent (its key is printed once; only its hash is stored)"
agent="demo-agent-$(date +%s)"
key=$("$bin/opgate" agents create "$agent" --max-amount USD:1000.00)
echo "agent $agent, key ${key:0:21}…"

say "Starting provider-sim (slow, and it drops its first answer after charging), intake and an executor"
sim=$(start provider-sim "$bin/provider-sim" --listen 127.0.0.1:0 --fault delay-ms=1500 --fault drop-after-commit=1.0/1)
echo "$sim"; sim_url=${sim#provider-sim listening on }
intake=$(start intake "$bin/intake" --listen 127.0.0.1:0)
echo "$intake"; base=${intake#intake listening on }
start executor "$bin/executor" --provider-url "$sim_url" --retry-base 100ms
echo "(logs in target/demo/)"

idem="invoice-42-payment"
body='{"customer_id":"cus_123","invoice_id":"inv_42","amount":"250.00","currency":"USD"}'
post() { # post MAX_SECONDS: the agent's call, waiting up to 10 s for the outcome
  curl -sS -i --max-time "$1" -X POST "$base/agent/operations/payment" \
    -H "Authorization: Bearer $key" -H "Idempotency-Key: $idem" -H 'Prefer: wait=10' \
    -H 'Content-Type: application/json' -d "$body"
}

say "1. The agent asks for a payment and gives up after 1 s (its response is lost)"
post 1 || echo "(the agent saw a timeout)"

say "2. The agent retries with the same Idempotency-Key"
post 15
echo

op=$(psql "$DATABASE_URL" -X -qtA -c "SELECT operation_id FROM operations WHERE agent_id = '$agent'")
say "The operation's path through its states (operation $op)"
psql "$DATABASE_URL" -X -q -c "SELECT to_char(created_at, 'HH24:MI:SS.MS') AS at, coalesce(from_status, '-') AS from_status, to_status, actor, reason FROM operation_events WHERE operation_id = '$op' ORDER BY event_id"

say "The executor's calls to the provider for it: the lost answer, then the re-send"
# The executor logs every call (ids, outcome and timing only): the first answer was lost
# after the provider charged (uncertain), and the re-send with the same key was answered.
OP="$op" python3 -c '
import json, os, sys
for line in open(sys.argv[1]):
    try:
        event = json.loads(line)
    except ValueError:
        continue
    fields = event.get("fields", {})
    if event.get("message") == "provider call" and fields.get("operation_id") == os.environ["OP"]:
        print("call %s: %-9s after %s ms" % (fields["attempt"], fields["outcome"], fields["elapsed_ms"]))
' "$logs/executor.log"

say "The provider's ledger: requests received and charges made for this operation"
curl -sS "$sim_url/_sim/ledger" | KEY="opgate-$op" python3 -c '
import json, os, sys
ledger = json.load(sys.stdin)
key = os.environ["KEY"]
print("requests with key %s: %d" % (key, ledger["requests_by_key"].get(key, 0)))
charges = [c for c in ledger["charges"] if c["idempotency_key"] == key]
for c in charges:
    print("charge %s: %s %s" % (c["payment_id"], c["amount"], c["currency"]))
print("charges: %d   <- one payment, however many calls" % len(charges))
'
