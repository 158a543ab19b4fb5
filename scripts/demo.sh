#!/usr/bin/env bash
# The agent scenario behind `make run`, against the PostgreSQL in DATABASE_URL:
# migrate, create a demo agent, start intake, and show a payment, its replay after a
# "lost response", and a mismatched reuse of the key.
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

say "Migrating the database"
"$bin/opgate" migrate

say "Creating a demo agent (its key is printed once; only its hash is stored)"
agent="demo-agent-$(date +%s)"
key=$("$bin/opgate" agents create "$agent" --max-amount USD:1000.00)
echo "agent $agent, key ${key:0:21}…"

say "Starting intake"
"$bin/intake" --listen 127.0.0.1:0 >"$logs/intake.out" 2>"$logs/intake.log" &
pids+=($!)
for _ in $(seq 100); do grep -q listening "$logs/intake.out" 2>/dev/null && break; sleep 0.1; done
base=$(sed -n 's/^intake listening on //p' "$logs/intake.out")
echo "intake at $base (logs in target/demo/intake.log)"

post() {
  curl -sS -i -X POST "$base/agent/operations/payment" \
    -H "Authorization: Bearer $key" -H "Idempotency-Key: $1" \
    -H 'Content-Type: application/json' -d "$2"
  echo
}
idem="invoice-42-payment"

say "1. The agent asks for a payment"
post "$idem" '{"customer_id":"cus_123","invoice_id":"inv_42","amount":"250.00","currency":"USD"}'

say "2. The response was lost; the agent retries with the same key (and writes 250 as 250)"
post "$idem" '{"amount":250,"invoice_id":"inv_42","customer_id":"cus_123"}'

say "3. A buggy agent reuses the key for a different amount: refused, nothing written"
post "$idem" '{"customer_id":"cus_123","invoice_id":"inv_42","amount":"260.00"}'

say "Rows for this agent: one operation, one outbox event, one audit event"
psql "$DATABASE_URL" -X -q -c "SELECT operation_id, status, (SELECT count(*) FROM outbox o WHERE o.operation_id = op.operation_id) AS outbox_events, (SELECT count(*) FROM operation_events e WHERE e.operation_id = op.operation_id) AS audit_events FROM operations op WHERE agent_id = '$agent'"
