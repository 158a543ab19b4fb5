#!/usr/bin/env bash
# make bench-citus: intake's new operations and the executor's drain on a Citus
# coordinator beside one PostgreSQL, the same scenario on both, in one run on one
# machine (docs/scale-out.md). Several agents at once, since Citus places each agent
# on one node. One JSON object per line on stdout.
#   bench/citus.sh    DATABASE_URL: one PostgreSQL (with-postgres.sh starts one);
#                     OPGATE_BENCH_CITUS_URL: a database on a Citus coordinator, with the
#                     citus extension on every node and the workers added, nothing else.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/target/release"
out="$root/target/bench/citus"
mkdir -p "$out"
: "${DATABASE_URL:?DATABASE_URL must name one PostgreSQL}"
: "${OPGATE_BENCH_CITUS_URL:?set OPGATE_BENCH_CITUS_URL to a database on a Citus coordinator (docs/scale-out.md)}"
agents=${BENCH_AGENTS:-4}
clients_per_agent=${BENCH_CLIENTS_PER_AGENT:-8}
dur=${BENCH_SECONDS:-10}
drain_n=${BENCH_DRAIN:-8000}
source "$root/bench/lib.sh"
rm -f "$out"/*.pid
trap cleanup EXIT

sim=$(start provider-sim "$bin/provider-sim" --listen 127.0.0.1:0)
sim_url=${sim#provider-sim listening on }

# measure NAME URL [MIGRATE_FLAGS...]; intake's group commit as $group_commit says.
group_commit=true
measure() {
  local name=$1 url=$2; shift 2
  DATABASE_URL=$url "$bin/opgate" migrate "$@" >/dev/null 2>&1
  local run; run="$name-$(date +%s)"
  local keys=() i
  for i in $(seq "$agents"); do
    keys+=("$(DATABASE_URL=$url "$bin/opgate" agents create "bench-$run-$i" --allow payment)")
  done
  log "$name: intake, new operations, $agents agents x $clients_per_agent clients, ${dur}s"
  local intake; intake=$(start "intake-$name" env RUST_LOG=warn INTAKE_GROUP_COMMIT="$group_commit" DATABASE_URL="$url" "$bin/intake" --listen 127.0.0.1:0)
  local base=${intake#intake listening on }
  local loads=()
  for i in "${!keys[@]}"; do
    "$bin/loadgen" --url "$base" --key "${keys[$i]}" --scenario new --concurrency "$clients_per_agent" \
      --warmup 2s --duration "${dur}s" --run-id "$run-$i" --json >"$out/$name-new-$i.json" &
    loads+=($!)
  done
  wait "${loads[@]}"
  stop "intake-$name"
  local new_json; new_json=$(python3 - "$out" "$name" <<'EOF'
import json, sys, glob
out, name = sys.argv[1], sys.argv[2]
runs = [json.load(open(f)) for f in sorted(glob.glob(f"{out}/{name}-new-*.json"))]
print(json.dumps({"requests_per_s": round(sum(r["requests_per_s"] for r in runs), 1),
                  "p50_ms": max(r["latency_ms"]["p50"] for r in runs),
                  "p99_ms": max(r["latency_ms"]["p99"] for r in runs),
                  "errors": sum(r["errors"] + sum(r["unexpected_status"].values()) for r in runs)}))
EOF
)
  log "$name: executor drain of $drain_n payments from $agents agents"
  psql "$url" -X -q -c "DELETE FROM outbox" >/dev/null
  # Intake's events, just deleted, would otherwise be dead rows the first claims walk.
  psql "$url" -X -q -c "VACUUM ANALYZE outbox, operations" >/dev/null
  for i in $(seq "$agents"); do
    "$bin/opgate" bench-sql register-new --agent "bench-$run-$i" >"$out/register-$name-$i.sql"
    (cd "$out" && pgbench -n -c 2 -j 1 -t $((drain_n / agents / 2)) -f "$out/register-$name-$i.sql" "$url" >/dev/null 2>&1)
  done
  local pending; pending=$(psql "$url" -X -qtA -c "SELECT count(*) FROM outbox")
  local started; started=$(date +%s.%N)
  start "executor-$name" env RUST_LOG=warn DATABASE_URL="$url" "$bin/executor" --provider-url "$sim_url" >/dev/null
  until [ "$(psql "$url" -X -qtA -c "SELECT count(*) FROM outbox")" = 0 ]; do sleep 0.1; done
  local finished; finished=$(date +%s.%N)
  stop "executor-$name"
  awk -v s="$name" -v nj="$new_json" -v n="$pending" -v a="$started" -v b="$finished" \
    'BEGIN { printf "{\"scenario\": \"citus_beside_postgres\", \"database\": \"%s\", \"intake_new\": %s, \"drain\": {\"operations\": %d, \"seconds\": %.3f, \"operations_per_s\": %.1f}}\n", s, nj, n, b - a, n / (b - a) }'
}

measure postgres "$DATABASE_URL"
measure citus "$OPGATE_BENCH_CITUS_URL" --citus
# What group commit (shard by shard on Citus) is worth there.
group_commit=false measure citus-without-group-commit "$OPGATE_BENCH_CITUS_URL" --citus
