#!/usr/bin/env bash
# make bench / make bench-quick: opgate beside PostgreSQL's own limit, in one run on
# one machine. Every intake figure is paired with pgbench running the identical
# statements (generated from the store crate by `opgate bench-sql`), and reported as a
# ratio. Release binaries, a PostgreSQL with default settings (fsync and
# synchronous_commit on), all traffic on 127.0.0.1.
#   bench/run.sh quick|full      (DATABASE_URL from with-postgres.sh)
# Writes target/bench/results.json and docs/benchmarks.md.
set -euo pipefail
mode=${1:-full}
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/target/release"
out="$root/target/bench"
mkdir -p "$out"
: "${DATABASE_URL:?run through make bench}"
# The quick run grows to 500,000: its own baseline rounds store about 250,000.
case "$mode" in
  quick) dur=3; warm=1; drain_n=2000; health_n=5000; wait_dur=3; growth="500000"; growth_dur=8; growth_drain_n=8000; growth_rounds=3 ;;
  full) dur=15; warm=3; drain_n=20000; health_n=15000; wait_dur=15; growth="1000000 10000000"; growth_dur=15; growth_drain_n=20000; growth_rounds=3 ;;
  *) echo "usage: $0 quick|full" >&2; exit 2 ;;
esac

source "$root/bench/lib.sh"
rm -f "$out"/*.pid
trap cleanup EXIT

# pgbench_run NAME CLIENTS SCRIPT: tps, p50 and p99 (ms) from the per-transaction log.
pgbench_run() {
  local name=$1 clients=$2 script=$3
  rm -f "$out"/pgbench_log.*
  (cd "$out" && pgbench -n -M prepared -c "$clients" -j 2 -T "$dur" -l -f "$script" "$DATABASE_URL" >"$out/pgbench-$name.txt" 2>&1)
  local tps; tps=$(awk '/^tps/ {print $3}' "$out/pgbench-$name.txt")
  cat "$out"/pgbench_log.* | awk '{print $3}' | sort -n >"$out/pgbench-$name.lat"
  local n; n=$(wc -l <"$out/pgbench-$name.lat")
  local p50 p99
  p50=$(awk -v n="$n" 'NR == int(n * 0.50) + 1 {printf "%.3f", $1 / 1000; exit}' "$out/pgbench-$name.lat")
  p99=$(awk -v n="$n" 'NR == int(n * 0.99) + 1 {printf "%.3f", $1 / 1000; exit}' "$out/pgbench-$name.lat")
  echo "{\"tps\": $tps, \"p50_ms\": $p50, \"p99_ms\": $p99}"
}

results="$out/results.jsonl"
: >"$results"
record() { echo "$1" >>"$results"; }

# The disk's flush latency, at the start and again at the end: every durable commit pays
# it, and the Prefer: wait path has three in a row.
fsync_us() {
  local tool; tool=$(pg_tool pg_test_fsync)
  [ -x "$tool" ] || { echo null; return; }
  # -s 1: a second per method; fdatasync is the second one printed, the rest is not needed.
  local us; us=$(timeout 5 "$tool" -s 1 -f "$out/fsync.test" 2>/dev/null | awk '$1 == "fdatasync" && /usecs/ {print $(NF-1); exit}' || true)
  echo "${us:-null}"
  rm -f "$out/fsync.test"
}
record "{\"scenario\": \"disk_fdatasync_us\", \"when\": \"start\", \"us\": $(fsync_us)}"

log "mode $mode: migrating, creating the bench agent"
"$bin/opgate" migrate >/dev/null 2>&1
agent="bench-$(date +%s)"
key=$("$bin/opgate" agents create "$agent")
"$bin/opgate" bench-sql register-new --agent "$agent" >"$out/register-new.sql"
# Stored operations get their ids as intake makes them (UUIDv7, in time order).
operation_id=$("$bin/opgate" bench-sql operation-id)
sim=$(start provider-sim "$bin/provider-sim" --listen 127.0.0.1:0)
sim_url=${sim#provider-sim listening on }
# The example catalog, for the declared-kind row (its kinds call provider-sim).
intake=$(start intake env RUST_LOG=warn OPGATE_SIM_URL="$sim_url" "$bin/intake" --listen 127.0.0.1:0 \
  --catalog "$root/examples/catalog.toml")
base=${intake#intake listening on }
# The guardrail and kind rows' agents: one with a daily budget it will not reach (every
# registration then takes the agent's budget lock), one granted the catalog's `order`.
budgeted_key=$("$bin/opgate" agents create "$agent-budgeted" --daily-budget USD:1000000000.00)
declared_key=$("$bin/opgate" agents create "$agent-declared" --allow order --catalog "$root/examples/catalog.toml")
refund_key=$("$bin/opgate" agents create "$agent-refunds" --allow payment --allow refund)
order_body='{"customer_id":"cus_bench","sku":"sku_bench","quantity":1,"total":"10.00","currency":"USD"}'
single=$(start intake-single env RUST_LOG=warn "$bin/intake" --listen 127.0.0.1:0 --group-commit false)
single_base=${single#intake listening on }

loadgen() { "$bin/loadgen" --url "$base" --key "$key" --json --warmup "${warm}s" "$@"; }

# Queue health first, on the empty database, as when it runs alone: the default flags
# beside tuned ones, free and behind a held snapshot. Run after the scenarios below,
# it measured their leftovers instead (autovacuum of hundreds of thousands of rows,
# tables and indexes past shared_buffers): one drain or another slowed by 30-50 %,
# in either direction.
log "queue health: $health_n payments per drain"
SIM_URL=$sim_url "$root/bench/queue-health.sh" "$health_n" "$bin" >"$out/queue-health.jsonl"
while read -r line; do record "$line"; done <"$out/queue-health.jsonl"
# The scenarios below start from empty tables, as they did before it.
sql "TRUNCATE operation_events, outbox, held_operations, operations" >/dev/null

# End to end with Prefer: wait, on an idle system as its target says: here, on the
# empty database, after a checkpoint. At the end of the run, where it used to be, it
# measured the growth fill's leftovers instead (autovacuum and a checkpoint writing
# gigabytes): p50 10-15 ms against 6-7 ms idle.
log "end to end, Prefer: wait=5, one client"
sql "VACUUM ANALYZE outbox, operations, operation_events" >/dev/null
sql "CHECKPOINT" >/dev/null
start executor-e2e env RUST_LOG=warn "$bin/executor" --provider-url "$sim_url" >/dev/null
start reconciler env RUST_LOG=warn "$bin/reconciler" --provider-url "$sim_url" >/dev/null
opgate_json=$("$bin/loadgen" --url "$base" --key "$key" --json --warmup "${warm}s" --scenario wait --wait-secs 5 --concurrency 1 --duration "${wait_dur}s" --run-id wait)
record "{\"scenario\": \"end_to_end_wait\", \"clients\": 1, \"opgate\": $opgate_json}"
reconciler_rss=$(peak_rss_mib reconciler)
stop executor-e2e
stop reconciler

# Each of the three runs starts right after a checkpoint: the first writes after one
# carry whole pages into the WAL, and whichever run came first paid for all three
# (p99 24 ms at 8 clients against 9 ms for the run after it).
for clients in 8 32 64; do
  log "intake, new operations, $clients clients (group commit, then one transaction per request)"
  sql "CHECKPOINT" >/dev/null
  opgate_json=$(loadgen --scenario new --concurrency "$clients" --duration "${dur}s" --run-id "new-$clients")
  sql "CHECKPOINT" >/dev/null
  single_json=$("$bin/loadgen" --url "$single_base" --key "$key" --json --warmup "${warm}s" \
    --scenario new --concurrency "$clients" --duration "${dur}s" --run-id "single-$clients")
  sql "CHECKPOINT" >/dev/null
  pg_json=$(pgbench_run "new-$clients" "$clients" "$out/register-new.sql")
  record "{\"scenario\": \"intake_new\", \"clients\": $clients, \"opgate\": $opgate_json, \"opgate_without_group_commit\": $single_json, \"pgbench\": $pg_json}"
done
stop intake-single

# MCP beside HTTP, the same new payments at 32 clients, alternated twice so that drift
# hits both alike; intake's CPU time per answered request read from /proc around each.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$(cat "$out/$1.pid")/stat"; }
# The refunds' payments: 2,000 settled payments of 10.00 (setup, filled with SQL), each
# refunded 0.01 at a time, taken in turn, so that no two requests in flight queue on
# one payment's row lock.
sql "INSERT INTO operations (operation_id, agent_id, idempotency_key, operation_type, customer_id,
                             provider, amount, currency, request_hash, request_payload, status,
                             attempts, provider_reference)
     SELECT $operation_id, '$agent-refunds', 'refundable-' || g, 'payment', 'cus_bench',
            'opgate-http', 10.00, 'USD', repeat('0', 64),
            '{\"amount\":\"10.00\",\"currency\":\"USD\",\"customer_id\":\"cus_bench\",\"invoice_id\":\"inv_bench\",\"operation_type\":\"payment\"}'::jsonb,
            'SUCCEEDED', 1, 'pay_refundable_' || g
     FROM generate_series(1, 2000) AS g" >/dev/null
sql "SELECT json_build_object('payment_operation_id', operation_id, 'amount', '0.01')
     FROM operations WHERE agent_id = '$agent-refunds'" >"$out/refund-bodies.jsonl"
for round in 1 2; do
  for door in new mcp budgeted declared refund; do
    case "$door" in
      new | mcp) door_args=(--key "$key" --scenario "$door") ;;
      budgeted) door_args=(--key "$budgeted_key" --scenario new) ;;
      declared) door_args=(--key "$declared_key" --scenario new --kind order --body "$order_body") ;;
      refund) door_args=(--key "$refund_key" --scenario new --kind refund --bodies "$out/refund-bodies.jsonl") ;;
    esac
    log "intake, new operations: $door, 32 clients (round $round)"
    before=$(cpu_ticks intake)
    door_json=$("$bin/loadgen" --url "$base" --json --warmup "${warm}s" "${door_args[@]}" \
      --concurrency 32 --duration "${dur}s" --run-id "door-$door-$round")
    ticks=$(( $(cpu_ticks intake) - before ))
    record "{\"scenario\": \"intake_door\", \"door\": \"$door\", \"round\": $round, \"cpu_ticks\": $ticks, \"warmup_s\": $warm, \"ticks_per_s\": $(getconf CLK_TCK), \"opgate\": $door_json}"
  done
done

log "intake, replays, 32 clients"
"$bin/opgate" bench-sql register-keys --agent "$agent" --key-prefix "pgreplay-" --keys 1000 | psql "$DATABASE_URL" -X -q >/dev/null
key_id=${key#opg_}; key_id=${key_id%%_*}
"$bin/opgate" bench-sql register-replay --key-id "$key_id" --key-prefix "pgreplay-" --keys 1000 >"$out/register-replay.sql"
sql "CHECKPOINT" >/dev/null
opgate_json=$(loadgen --scenario replay --prefill 1000 --concurrency 32 --duration "${dur}s" --run-id replay)
pg_json=$(pgbench_run replay 32 "$out/register-replay.sql")
sql "CHECKPOINT" >/dev/null
# New operations again at once, as the replays' reference: minutes apart, this machine's
# own drift was as large as the ratio being measured.
ref_json=$(loadgen --scenario new --concurrency 32 --duration "${dur}s" --run-id new-beside-replay)
record "{\"scenario\": \"intake_replay\", \"clients\": 32, \"opgate\": $opgate_json, \"pgbench\": $pg_json, \"new_reference\": $ref_json}"
intake_rss=$(peak_rss_mib intake)

# Executor drain: a pre-filled outbox, provider-sim answering at once.
drain() { # drain EXECUTORS BATCH GROUP_COMMIT CLAIMERS
  local executors=$1 batch=$2 group_commit=$3 claimers=${4:-4}
  local pending; pending=$(prefill_outbox)
  local started; started=$(date +%s.%N)
  for i in $(seq "$executors"); do
    start "executor-$i" env RUST_LOG=warn "$bin/executor" --provider-url "$sim_url" --concurrency 256 \
      --batch-size "$batch" --group-commit "$group_commit" --claimers "$claimers" --poll-interval 100ms >/dev/null
  done
  until_drained
  local finished; finished=$(date +%s.%N)
  peak_rss_mib executor-1 >"$out/executor.rss"
  for i in $(seq "$executors"); do stop "executor-$i"; done
  awk -v n="$pending" -v a="$started" -v b="$finished" -v e="$executors" -v bs="$batch" -v gc="$group_commit" -v cl="$claimers" \
    'BEGIN { printf "{\"scenario\": \"executor_drain\", \"executors\": %d, \"batch\": %d, \"group_commit\": %s, \"claimers\": %d, \"operations\": %d, \"seconds\": %.3f, \"operations_per_s\": %.1f}\n", e, bs, gc, cl, n, b - a, n / (b - a) }'
}
for config in "1 32 true" "2 32 true" "1 8 true" "1 8 true 1" "1 1 true" "1 32 false"; do
  log "executor drain, executors/batch/group commit/claimers $config"
  record "$(drain $config)"
done


# The drain's pair: pgbench running the executor's own claim (of BATCH events) and its
# fenced multi-row completion of them, one transaction, 8 clients; timed like the
# drain, from a pre-filled outbox until the transactions that empty it are done.
pgbench_drain() { # pgbench_drain BATCH
  local batch=$1
  "$bin/opgate" bench-sql claim-and-complete --batch "$batch" >"$out/claim-and-complete-$batch.sql"
  local pending; pending=$(prefill_outbox)
  local started; started=$(date +%s.%N)
  (cd "$out" && pgbench -n -M prepared -c 8 -j 2 -t $((pending / batch / 8 + 2)) -f "$out/claim-and-complete-$batch.sql" "$DATABASE_URL" >"$out/pgbench-drain-$batch.txt" 2>&1)
  local finished; finished=$(date +%s.%N)
  local left; left=$(sql "SELECT count(*) FROM outbox")
  awk -v n="$((pending - left))" -v a="$started" -v b="$finished" -v bs="$batch" \
    'BEGIN { printf "{\"scenario\": \"pgbench_claim_and_complete\", \"clients\": 8, \"batch\": %d, \"events\": %d, \"seconds\": %.3f, \"events_per_s\": %.1f}\n", bs, n, b - a, n / (b - a) }'
}
for batch in 32 8 1; do
  log "pgbench claim-and-complete, batch $batch, 8 clients"
  record "$(pgbench_drain "$batch")"
done

# Growth: the same intake and drain figures with many finished operations already in
# the table (filled directly with SQL: setup, not measured), compared with the above.
# The scenarios above stored hundreds of thousands of operations: the growth series
# starts again from an empty table, and its baseline is measured here, just before the
# first fill (figures taken minutes apart on this machine drift by tens of %). A few
# seconds of traffic and an ANALYZE first, so that no cached plan was made while the
# table was a page or two (such a plan scans the table until the next autoanalyze).
sql "TRUNCATE operation_events, outbox, held_operations, operations" >/dev/null
loadgen --scenario new --concurrency 32 --duration "${warm}s" --run-id "growth-warm" >/dev/null
sql "DELETE FROM outbox" >/dev/null
sql "VACUUM ANALYZE operations, operation_events, outbox" >/dev/null
# Every growth figure, the baseline too, starts right after a checkpoint: the fill
# writes gigabytes of WAL, and the checkpoint it sets off otherwise runs through the
# measurements after it (every page they touch first written whole to the WAL again),
# but not through the baseline's.
sql "CHECKPOINT" >/dev/null
existing=$(sql "SELECT count(*) FROM operations")
# Longer than the quick run's other figures: against a 10 % target, a 3-second run and
# a 2,000-payment drain (half a second, much of it the executor starting) are short
# enough for one stall to decide the figure. With them the quick run reported 0.77 x /
# 0.68 x at 250,000 stored (22:34 UTC); over 8 s and 8,000 payments the next quick run
# reported 1.01 x / 0.96 x.
dur=$growth_dur; drain_n=$growth_drain_n
# growth_point PREFIX: the intake and drain figures at the current size, $growth_rounds
# times over. One drain against another at the same size moves by up to ±25 % on this
# machine (alternated drains at 1 M and 10 M stored, 2026-12-07), as much as the target
# allows: the report compares the medians of the rounds and lists every round.
growth_point() {
  local prefix=$1
  for round in $(seq "$growth_rounds"); do
    log "growth: intake new operations and a drain, with $existing existing (round $round)"
    sql "CHECKPOINT" >/dev/null
    opgate_json=$(loadgen --scenario new --concurrency 32 --duration "${dur}s" --run-id "$prefix-new-$existing-$round")
    record "{\"scenario\": \"${prefix}_intake_new\", \"existing\": $existing, \"round\": $round, \"clients\": 32, \"opgate\": $opgate_json}"
    record "$(drain 1 32 true | sed "s/\"executor_drain\"/\"${prefix}_executor_drain\", \"existing\": $existing, \"round\": $round/")"
  done
}
growth_point growth_baseline
for target in $growth; do
  existing=$(sql "SELECT count(*) FROM operations")
  log "growth: filling to $target existing operations"
  # replica mode skips the foreign-key triggers for this synthetic fill (the rows are
  # consistent by construction); every measured statement runs with them as usual.
  sql "SET session_replication_role = replica; WITH filled AS (
         INSERT INTO operations (operation_id, agent_id, idempotency_key, operation_type, customer_id,
                                 provider, amount, currency,
                                 request_hash, request_payload, status, attempts, provider_reference)
         SELECT $operation_id, '$agent', 'growth-' || g, 'payment', 'cus_bench',
                'opgate-http', 10.00, 'USD', repeat('0', 64),
                '{\"amount\":\"10.00\",\"currency\":\"USD\",\"customer_id\":\"cus_bench\",\"invoice_id\":\"inv_bench\",\"operation_type\":\"payment\"}'::jsonb,
                'SUCCEEDED', 1, 'pay_growth_' || g
         FROM generate_series($existing + 1, $target) AS g
         RETURNING operation_id, agent_id)
       INSERT INTO operation_events (operation_id, agent_id, from_status, to_status, actor, reason)
       SELECT operation_id, agent_id, NULL, 'SUCCEEDED', 'bench', 'growth fill' FROM filled" >/dev/null
  sql "VACUUM ANALYZE operations, operation_events, outbox" >/dev/null
  sql "CHECKPOINT" >/dev/null
  # The measured rounds added operations too: the figures are labelled with the count.
  existing=$(sql "SELECT count(*) FROM operations")
  growth_point growth
done

record "{\"scenario\": \"peak_rss_mib\", \"intake\": $intake_rss, \"executor\": $(cat "$out/executor.rss"), \"reconciler\": $reconciler_rss}"

record "{\"scenario\": \"disk_fdatasync_us\", \"when\": \"end\", \"us\": $(fsync_us)}"
python3 "$root/bench/report.py" "$mode" "$results" "$out/results.json" "$root/docs/benchmarks.md"
log "done: target/bench/results.json, docs/benchmarks.md"
