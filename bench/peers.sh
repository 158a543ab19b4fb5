#!/usr/bin/env bash
# make bench-peers: opgate beside Graphile Worker, the Postgres job queue a team would
# otherwise put in front of a payment API, on the same work in one run on one
# PostgreSQL (default settings: fsync and synchronous_commit on). The work: register a
# payment, then a worker calls provider-sim's POST /v1/payments with the payment's key
# and marks it done. Three figures each:
#   registration  32 clients for the set time, nothing draining: opgate's intake over
#                 HTTP (authenticated, hashed, audited) against pgbench calling
#                 graphile_worker.add_job directly (no HTTP, no application in between);
#   drain         a pre-filled queue, one worker process, until every job is done;
#   end to end    32 clients registering a fixed number of payments while the worker
#                 runs, until the last one is done.
# provider-sim's ledger is read before and after each drain: a figure counts only if
# every payment was charged exactly once.
#   bench/peers.sh quick|full      (DATABASE_URL from with-postgres.sh)
# Writes target/bench-peers/results.jsonl and prints the table.
set -euo pipefail
mode=${1:-full}
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/target/release"
out="$root/target/bench-peers"
peer="$out/graphile"
mkdir -p "$out" "$peer"
: "${DATABASE_URL:?run through make bench-peers}"
case "$mode" in
  quick) dur=3; warm=1; drain_n=4000; e2e_n=4000 ;;
  full) dur=15; warm=3; drain_n=20000; e2e_n=20000 ;;
  *) echo "usage: $0 quick|full" >&2; exit 2 ;;
esac

source "$root/bench/lib.sh"
rm -f "$out"/*.pid
trap cleanup EXIT

log "installing Graphile Worker (package-lock.json, from the npm registry)"
cp "$root/bench/peers/graphile/package.json" "$root/bench/peers/graphile/package-lock.json" \
  "$root/bench/peers/graphile/worker.js" "$peer/"
(cd "$peer" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
"$peer/node_modules/.bin/graphile-worker" -c "$DATABASE_URL" --schema-only >/dev/null
gw_version=$(node -p "require('$peer/node_modules/graphile-worker/package.json').version")

results="$out/results.jsonl"
: >"$results"
record() { echo "$1" >>"$results"; }

"$bin/opgate" migrate >/dev/null 2>&1
agent="peers-$(date +%s)"
key=$("$bin/opgate" agents create "$agent")
"$bin/opgate" bench-sql register-new --agent "$agent" >"$out/register-new.sql"
# The peer's registration: one add_job with the payment as its payload and a job key,
# Graphile Worker's own deduplication, as the counterpart of the Idempotency-Key.
cat >"$out/add-job.sql" <<'SQL'
SELECT graphile_worker.add_job('pay', json_build_object('key', k, 'customer_id', 'cus_bench', 'invoice_id', 'inv_' || k, 'amount', '10.00', 'currency', 'USD'), job_key := k) FROM (SELECT 'gw-' || gen_random_uuid() AS k) AS s;
SQL
sim=$(start provider-sim "$bin/provider-sim" --listen 127.0.0.1:0)
sim_url=${sim#provider-sim listening on }
intake=$(start intake env RUST_LOG=warn "$bin/intake" --listen 127.0.0.1:0)
base=${intake#intake listening on }

charges() { curl -sf "$sim_url/_sim/ledger" | python3 -c 'import json, sys; print(json.load(sys.stdin)["count"])'; }
jobs_left() { sql "SELECT count(*) FROM graphile_worker._private_jobs"; }
until_jobs_done() {
  local deadline=$((SECONDS + 600))
  until [ "$(jobs_left)" = 0 ]; do
    [ "$SECONDS" -lt "$deadline" ] || { log "Graphile Worker did not finish its jobs"; exit 1; }
    sleep 0.05
  done
}
opgate_done() { sql "SELECT count(*) FROM operations WHERE agent_id = '$agent' AND status = 'SUCCEEDED'"; }
until_opgate_settled() { # until_opgate_settled N_SUCCEEDED
  local deadline=$((SECONDS + 600))
  until [ "$(opgate_done)" -ge "$1" ]; do
    [ "$SECONDS" -lt "$deadline" ] || { log "opgate did not settle its payments"; exit 1; }
    sleep 0.05
  done
}
start_graphile() { # start_graphile NAME JOBS LOCAL_QUEUE
  (cd "$peer" && start "$1" env SIM_URL="$sim_url" JOBS="$2" LOCAL_QUEUE="$3" node worker.js >/dev/null)
}
# rate NAME N STARTED FINISHED CHARGED [EXTRA_JSON]
rate() {
  awk -v name="$1" -v n="$2" -v a="$3" -v b="$4" -v c="$5" -v extra="${6:-}" \
    'BEGIN { printf "{\"scenario\": \"%s\", \"jobs\": %d, \"charged\": %d, \"seconds\": %.3f, \"per_s\": %.1f%s}\n", name, n, c, b - a, n / (b - a), extra }'
}

log "registration, 32 clients, ${dur}s each"
opgate_json=$("$bin/loadgen" --url "$base" --key "$key" --json --warmup "${warm}s" --scenario new \
  --concurrency 32 --duration "${dur}s" --run-id peers-register)
(cd "$out" && pgbench -n -M prepared -c 32 -j 2 -T "$dur" -f "$out/add-job.sql" "$DATABASE_URL" >"$out/pgbench-add-job.txt" 2>&1)
record "{\"scenario\": \"registration\", \"clients\": 32, \"opgate\": $opgate_json, \"graphile_add_job_tps\": $(awk '/^tps/ {print $3}' "$out/pgbench-add-job.txt")}"
sql "DELETE FROM outbox; DELETE FROM graphile_worker._private_jobs" >/dev/null

log "drain: opgate's executor, default flags, $drain_n payments"
pending=$(prefill_outbox)
before=$(charges); started=$(date +%s.%N)
start executor env RUST_LOG=warn "$bin/executor" --provider-url "$sim_url" >/dev/null
until_drained
finished=$(date +%s.%N); stop executor
record "$(rate opgate_drain "$pending" "$started" "$finished" $(( $(charges) - before )))"

for local_queue in 0 32; do
  log "drain: Graphile Worker, 32 concurrent jobs, local queue $local_queue, $drain_n jobs"
  (cd "$out" && pgbench -n -M prepared -c 8 -j 2 -t $((drain_n / 8)) -f "$out/add-job.sql" "$DATABASE_URL" >/dev/null 2>&1)
  jobs=$(jobs_left); before=$(charges); started=$(date +%s.%N)
  start_graphile "graphile-drain-$local_queue" 32 "$local_queue"
  until_jobs_done
  finished=$(date +%s.%N); stop "graphile-drain-$local_queue"
  record "$(rate graphile_drain "$jobs" "$started" "$finished" $(( $(charges) - before )) ", \"local_queue\": $local_queue")"
done

log "end to end: opgate, 32 clients registering $e2e_n payments while the executor runs"
done_before=$(opgate_done); before=$(charges)
start executor-e2e env RUST_LOG=warn "$bin/executor" --provider-url "$sim_url" >/dev/null
started=$(date +%s.%N)
"$bin/loadgen" --url "$base" --key "$key" --scenario new --concurrency 32 --requests "$e2e_n" --run-id peers-e2e >/dev/null
until_opgate_settled $((done_before + e2e_n))
finished=$(date +%s.%N); stop executor-e2e
record "$(rate opgate_end_to_end "$e2e_n" "$started" "$finished" $(( $(charges) - before )))"

for local_queue in 0 32; do
  log "end to end: Graphile Worker, local queue $local_queue, 32 clients adding $e2e_n jobs"
  start_graphile "graphile-e2e-$local_queue" 32 "$local_queue"
  before=$(charges); started=$(date +%s.%N)
  (cd "$out" && pgbench -n -M prepared -c 32 -j 2 -t $((e2e_n / 32)) -f "$out/add-job.sql" "$DATABASE_URL" >/dev/null 2>&1)
  until_jobs_done
  finished=$(date +%s.%N); stop "graphile-e2e-$local_queue"
  record "$(rate graphile_end_to_end $((e2e_n / 32 * 32)) "$started" "$finished" $(( $(charges) - before )) ", \"local_queue\": $local_queue")"
done

python3 "$root/bench/peers-report.py" "$mode" "$gw_version" "$results" "$root/docs/bench-peers.md"
