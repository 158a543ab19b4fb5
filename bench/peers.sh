#!/usr/bin/env bash
# make bench-peers: opgate beside two Postgres job queues a team would otherwise put in
# front of a payment API, Graphile Worker (Node.js, npm) and pgqueuer (Python, PyPI), on
# the same work in one run on one PostgreSQL (default settings: fsync and
# synchronous_commit on). The work: register a payment, then a worker calls
# provider-sim's POST /v1/payments with the payment's key and marks it done. Three
# figures each:
#   registration  32 clients for the set time, nothing draining: opgate's intake over
#                 HTTP (authenticated, hashed, audited) against pgbench calling
#                 graphile_worker.add_job, and pgbench running pgqueuer's own enqueue
#                 statement, directly (no HTTP, no application in between);
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
venv="$out/pgqueuer-venv"
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

log "installing pgqueuer (requirements.txt, every package pinned, from PyPI)"
# Reinstalled only when requirements.txt changed; --no-deps: exactly the pinned set.
if ! cmp -s "$root/bench/peers/pgqueuer/requirements.txt" "$venv/requirements.txt"; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps \
    -r "$root/bench/peers/pgqueuer/requirements.txt"
  "$venv/bin/pip" check --disable-pip-version-check >/dev/null
  cp "$root/bench/peers/pgqueuer/requirements.txt" "$venv/"
fi
cp "$root/bench/peers/pgqueuer/worker.py" "$venv/"
# pgqueuer's own installer (`pgq install`, durable tables); `pgq upgrade` if already there.
"$venv/bin/pgq" --pg-dsn "$DATABASE_URL" install >"$out/pgq-install.log" 2>&1 \
  || "$venv/bin/pgq" --pg-dsn "$DATABASE_URL" upgrade >>"$out/pgq-install.log" 2>&1 \
  || { cat "$out/pgq-install.log" >&2; exit 1; }
pgq_version=$("$venv/bin/python" -c 'import pgqueuer; print(pgqueuer.__version__)')

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
# The other peer's registration: the statement pgqueuer's Queries.enqueue runs (taken
# from the installed pgqueuer, not copied), for one job with the same payload as bytes
# and a dedupe_key, pgqueuer's deduplication; its statement trigger sends the NOTIFY.
# Only the bind parameters become SQL here, the key made once in a CTE put in front.
"$venv/bin/python" - >"$out/enqueue.sql" <<'PY'
from pgqueuer.adapters.persistence.qb import QueryQueueBuilder

sql = QueryQueueBuilder().build_enqueue_query("raise").strip()
job = (
    "WITH bench_job AS MATERIALIZED (SELECT k, convert_to(json_build_object('key', k, "
    "'customer_id', 'cus_bench', 'invoice_id', 'inv_' || k, 'amount', '10.00', "
    "'currency', 'USD')::text, 'UTF8') AS payload FROM (SELECT 'pgq-' || gen_random_uuid() AS k) AS s),\n"
)
for param, value in (
    ("WITH input AS", job + "input AS"),
    ("$1::int[]", "ARRAY[0]::int[]"),  # priority
    ("$2::text[]", "ARRAY['pay']::text[]"),  # entrypoint
    ("$3::bytea[]", "ARRAY[(SELECT payload FROM bench_job)]::bytea[]"),
    ("$4::interval[]", "ARRAY['0 seconds']::interval[]"),  # execute_after
    ("$5::text[]", "ARRAY[(SELECT k FROM bench_job)]::text[]"),  # dedupe_key
    ("$6::jsonb[]", "ARRAY['null']::jsonb[]"),  # headers: None, as json
):
    assert sql.count(param) == 1, f"pgqueuer's enqueue statement changed: {param}"
    sql = sql.replace(param, value)
assert "$" not in sql, "pgqueuer's enqueue statement has more parameters"
print(sql + ";")
PY
sim=$(start provider-sim "$bin/provider-sim" --listen 127.0.0.1:0)
sim_url=${sim#provider-sim listening on }
intake=$(start intake env RUST_LOG=warn "$bin/intake" --listen 127.0.0.1:0)
base=${intake#intake listening on }

charges() { curl -sf "$sim_url/_sim/ledger" | python3 -c 'import json, sys; print(json.load(sys.stdin)["count"])'; }
jobs_left() { sql "SELECT count(*) FROM $1"; } # jobs_left QUEUE_TABLE
until_jobs_done() { # until_jobs_done QUEUE_TABLE PEER_NAME
  until_sql "SELECT count(*) FROM $1" = 0 || { log "$2 did not finish its jobs"; exit 1; }
}
gw_jobs=graphile_worker._private_jobs
pgq_jobs=pgqueuer
# Re-queued attempts so far: pgqueuer logs each retry as 'queued' with its traceback.
pgq_retries() { sql "SELECT count(*) FROM pgqueuer_log WHERE status = 'queued' AND traceback IS NOT NULL"; }
opgate_done_sql="SELECT count(*) FROM operations WHERE agent_id = '$agent' AND status = 'SUCCEEDED'"
opgate_done() { sql "$opgate_done_sql"; }
until_opgate_settled() { # until_opgate_settled N_SUCCEEDED
  until_sql "$opgate_done_sql" -ge "$1" ||
    { log "opgate did not settle its payments"; exit 1; }
}
start_graphile() { # start_graphile NAME JOBS LOCAL_QUEUE
  (cd "$peer" && start "$1" env SIM_URL="$sim_url" JOBS="$2" LOCAL_QUEUE="$3" node worker.js >/dev/null)
}
start_pgqueuer() { # start_pgqueuer NAME JOBS BATCH_SIZE
  start "$1" env SIM_URL="$sim_url" JOBS="$2" BATCH_SIZE="$3" "$venv/bin/python" "$venv/worker.py" >/dev/null
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
(cd "$out" && pgbench -n -M prepared -c 32 -j 2 -T "$dur" -f "$out/enqueue.sql" "$DATABASE_URL" >"$out/pgbench-enqueue.txt" 2>&1)
record "{\"scenario\": \"registration\", \"clients\": 32, \"opgate\": $opgate_json, \"graphile_add_job_tps\": $(awk '/^tps/ {print $3}' "$out/pgbench-add-job.txt"), \"pgqueuer_enqueue_tps\": $(awk '/^tps/ {print $3}' "$out/pgbench-enqueue.txt")}"
sql "DELETE FROM outbox; DELETE FROM $gw_jobs; DELETE FROM $pgq_jobs" >/dev/null

log "drain: opgate's executor, default flags, $drain_n payments"
pending=$(prefill_outbox)
before=$(charges); started=$(date +%s.%N)
start executor env RUST_LOG=warn "$bin/executor" --provider-url "$sim_url" >/dev/null
until_drained
finished=$(date +%s.%N); stop executor
record "$(rate opgate_drain "$pending" "$started" "$finished" $(( $(charges) - before )))"

for local_queue in 0 32; do
  log "drain: Graphile Worker, 32 concurrent jobs, local queue $local_queue, $drain_n jobs"
  # Vacuumed before each prefill, as every queue here is.
  sql "VACUUM ANALYZE $gw_jobs" >/dev/null
  (cd "$out" && pgbench -n -M prepared -c 8 -j 2 -t $((drain_n / 8)) -f "$out/add-job.sql" "$DATABASE_URL" >/dev/null 2>&1)
  jobs=$(jobs_left $gw_jobs); before=$(charges); started=$(date +%s.%N)
  start_graphile "graphile-drain-$local_queue" 32 "$local_queue"
  until_jobs_done $gw_jobs "Graphile Worker"
  finished=$(date +%s.%N); stop "graphile-drain-$local_queue"
  record "$(rate graphile_drain "$jobs" "$started" "$finished" $(( $(charges) - before )) ", \"local_queue\": $local_queue")"
done

# pgqueuer's batch_size: its default 10, and 16, the most that 32 jobs in flight allows
# (it wants max_concurrent_tasks >= 2 x batch_size). Its queue table is vacuumed before
# each prefill, as prefill_outbox does for opgate.
for batch_size in 10 16; do
  log "drain: pgqueuer, 32 concurrent jobs, batch size $batch_size, $drain_n jobs"
  sql "VACUUM ANALYZE $pgq_jobs" >/dev/null
  (cd "$out" && pgbench -n -M prepared -c 8 -j 2 -t $((drain_n / 8)) -f "$out/enqueue.sql" "$DATABASE_URL" >/dev/null 2>&1)
  jobs=$(jobs_left $pgq_jobs); before=$(charges); retries=$(pgq_retries); started=$(date +%s.%N)
  start_pgqueuer "pgqueuer-drain-$batch_size" 32 "$batch_size"
  until_jobs_done $pgq_jobs pgqueuer
  finished=$(date +%s.%N); stop "pgqueuer-drain-$batch_size"
  record "$(rate pgqueuer_drain "$jobs" "$started" "$finished" $(( $(charges) - before )) \
    ", \"batch_size\": $batch_size, \"retries\": $(( $(pgq_retries) - retries ))")"
done

# End to end, the legs interleaved and run twice: this machine's pace drifts by more
# than the ratio measured (one opgate leg ran at 300/s for 30 s, the next at 1,900/s),
# so no system gets all of one slow stretch. Each system's figure is its best run.
opgate_e2e() {
  log "end to end (round $1): opgate, 32 clients registering $e2e_n payments while the executor runs"
  done_before=$(opgate_done); before=$(charges)
  start executor-e2e env RUST_LOG=warn "$bin/executor" --provider-url "$sim_url" >/dev/null
  started=$(date +%s.%N)
  "$bin/loadgen" --url "$base" --key "$key" --scenario new --concurrency 32 --requests "$e2e_n" --run-id "peers-e2e-$1" >/dev/null
  until_opgate_settled $((done_before + e2e_n))
  finished=$(date +%s.%N); stop executor-e2e
  record "$(rate opgate_end_to_end "$e2e_n" "$started" "$finished" $(( $(charges) - before )) ", \"round\": $1")"
}
graphile_e2e() { # graphile_e2e ROUND LOCAL_QUEUE
  log "end to end (round $1): Graphile Worker, local queue $2, 32 clients adding $e2e_n jobs"
  start_graphile "graphile-e2e-$2" 32 "$2"
  before=$(charges); started=$(date +%s.%N)
  (cd "$out" && pgbench -n -M prepared -c 32 -j 2 -t $((e2e_n / 32)) -f "$out/add-job.sql" "$DATABASE_URL" >/dev/null 2>&1)
  until_jobs_done $gw_jobs "Graphile Worker"
  finished=$(date +%s.%N); stop "graphile-e2e-$2"
  record "$(rate graphile_end_to_end $((e2e_n / 32 * 32)) "$started" "$finished" $(( $(charges) - before )) ", \"local_queue\": $2, \"round\": $1")"
}
pgqueuer_e2e() { # pgqueuer_e2e ROUND BATCH_SIZE
  log "end to end (round $1): pgqueuer, batch size $2, 32 clients enqueuing $e2e_n jobs"
  start_pgqueuer "pgqueuer-e2e-$2" 32 "$2"
  before=$(charges); retries=$(pgq_retries); started=$(date +%s.%N)
  (cd "$out" && pgbench -n -M prepared -c 32 -j 2 -t $((e2e_n / 32)) -f "$out/enqueue.sql" "$DATABASE_URL" >/dev/null 2>&1)
  until_jobs_done $pgq_jobs pgqueuer
  finished=$(date +%s.%N); stop "pgqueuer-e2e-$2"
  record "$(rate pgqueuer_end_to_end $((e2e_n / 32 * 32)) "$started" "$finished" $(( $(charges) - before )) \
    ", \"batch_size\": $2, \"retries\": $(( $(pgq_retries) - retries )), \"round\": $1")"
}
for round in 1 2; do
  opgate_e2e "$round"
  graphile_e2e "$round" 0
  pgqueuer_e2e "$round" 10
  graphile_e2e "$round" 32
  pgqueuer_e2e "$round" 16
done

python3 "$root/bench/peers-report.py" "$mode" "$gw_version" "$pgq_version" "$results" "$root/docs/bench-peers.md"
