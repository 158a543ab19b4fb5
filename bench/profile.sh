#!/usr/bin/env bash
# make bench-profile: what one request costs, counted rather than timed. callgrind
# counts the instructions intake spends per new operation and per replay, and the
# executor per drained operation (repeatable for the same binary and inputs, whatever
# else the machine does); pg_stat_statements, in the same runs, gives PostgreSQL's own
# execution time and buffer hits per statement.
#   bench/profile.sh [BIN_DIR LABEL]...   (DATABASE_URL from with-postgres.sh)
# With no arguments: target/release, labelled by the commit. Given several pairs, each
# build is counted in turn on the same database (a before and an after in one run).
# Writes target/bench-profile/results.jsonl, the callgrind files beside it, and
# docs/profile.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/target/bench-profile"
mkdir -p "$out"
: "${DATABASE_URL:?run through make bench-profile}"
requests=${PROFILE_REQUESTS:-2000}
drain_n=$requests
[ $# -gt 0 ] || set -- "$root/target/release" "$(git -C "$root" rev-parse --short HEAD)"

source "$root/bench/lib.sh"
rm -f "$out"/*.pid "$out"/callgrind.*
trap cleanup EXIT
results="$out/results.jsonl"
: >"$results"

sql "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null ||
  { log "pg_stat_statements is not loaded (PG_SETTINGS=\"-c shared_preload_libraries=pg_stat_statements\")"; exit 1; }

# under_callgrind NAME CMD...: starts a service under callgrind, counting nothing yet.
under_callgrind() {
  local name=$1; shift
  start "$name" env RUST_LOG=warn valgrind --tool=callgrind --instr-atstart=no --vgdb=yes \
    --callgrind-out-file="$out/callgrind.$name" "$@"
}
# counted NAME CMD...: counts the service NAME's instructions while CMD runs; prints them.
counted() {
  local name=$1; shift
  local pid; pid=$(cat "$out/$name.pid")
  callgrind_control -i on "$pid" >/dev/null
  callgrind_control -z "$pid" >/dev/null
  "$@" >/dev/null
  callgrind_control -i off "$pid" >/dev/null
  callgrind_control -d "$name" "$pid" >/dev/null
  local file; file=$(ls -t "$out/callgrind.$name".* | head -1)
  callgrind_annotate --inclusive=no --threshold=100 "$file" >"$out/$name.annotate"
  awk '/^totals:/ {print $2}' "$file"
}
# statements: PostgreSQL's execution time and shared-buffer hits per call, since the last reset.
statements() {
  sql "SELECT coalesce(json_agg(s ORDER BY s.total_ms DESC), '[]') FROM (
         SELECT left(regexp_replace(query, '\s+', ' ', 'g'), 90) AS statement, calls,
                round(total_exec_time::numeric, 1) AS total_ms,
                round((total_exec_time / calls)::numeric, 4) AS mean_ms,
                round(shared_blks_hit::numeric / calls, 1) AS hits_per_call
         FROM pg_stat_statements WHERE calls > 10 AND query NOT LIKE '%pg_stat_statements%') s"
}
reset_statements() { sql "SELECT pg_stat_statements_reset()" >/dev/null; }
# top NAME: the ten functions that spent the most instructions themselves.
top() {
  python3 - "$out/$1.annotate" <<'PY'
import json, re, sys
rows = []
for line in open(sys.argv[1]):
    m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(.+?)(?: \[[^]]*\])?$", line)
    if m and "PROGRAM TOTALS" not in line:
        rows.append({"ir": int(m.group(1).replace(",", "")), "function": m.group(2).split(":", 1)[-1]})
print(json.dumps(rows[:10]))
PY
}

release_and_drain() {
  sql "UPDATE outbox SET available_at = now(); NOTIFY opgate_outbox" >/dev/null
  until_drained
}

profile_build() { # profile_build BIN_DIR LABEL
  local bin=$1 label=$2
  log "$label: $requests new operations, $requests replays, a drain of $drain_n, under callgrind"
  "$bin/opgate" migrate >/dev/null 2>&1
  local slug; slug=$(echo "$label" | tr -cs "A-Za-z0-9" - | sed 's/^-*//; s/-*$//')
  local agent="profile-$slug-$(date +%s)"
  local key; key=$("$bin/opgate" agents create "$agent")
  "$bin/opgate" bench-sql register-new --agent "$agent" >"$out/register-new.sql"
  local intake; intake=$(under_callgrind intake "$bin/intake" --listen 127.0.0.1:0)
  local base=${intake#intake listening on }
  local load=("$root/target/release/loadgen" --url "$base" --key "$key" --concurrency 8)
  # Warm: connections open, statements prepared, caches filled, not counted.
  "${load[@]}" --scenario new --requests 200 --run-id "warm-$slug" >/dev/null

  reset_statements
  local new_ir; new_ir=$(counted intake "${load[@]}" --scenario new --requests "$requests" --run-id "new-$slug")
  local new_top; new_top=$(top intake)
  local new_sql; new_sql=$(statements)

  # A replay run registers its keys (--prefill) before replaying them: those new
  # operations are taken off at the rate just counted.
  local prefill=100
  reset_statements
  local replay_ir; replay_ir=$(counted intake "${load[@]}" --scenario replay --prefill "$prefill" --requests "$requests" --run-id "replay-$slug")
  local replay_top; replay_top=$(top intake)
  local replay_sql; replay_sql=$(statements)
  stop intake

  local sim; sim=$(start provider-sim "$bin/provider-sim" --listen 127.0.0.1:0)
  local sim_url=${sim#provider-sim listening on }
  # The queue is filled first, out of reach until the executor is up and idle; then
  # made due and announced, so that only the drain is counted.
  prefill_outbox >/dev/null
  sql "UPDATE outbox SET available_at = now() + interval '1 hour'" >/dev/null
  sql "VACUUM ANALYZE outbox" >/dev/null
  sql "CHECKPOINT" >/dev/null
  under_callgrind executor "$bin/executor" --provider-url "$sim_url" >/dev/null
  sleep 2
  reset_statements
  local drain_ir; drain_ir=$(counted executor release_and_drain)
  local drain_top; drain_top=$(top executor)
  local drain_sql; drain_sql=$(statements)
  stop executor; stop provider-sim

  echo "{\"label\": \"$label\", \"requests\": $requests, \"replay_prefill\": $prefill, \"drained\": $drain_n,
    \"intake_new_ir\": $new_ir, \"intake_replay_ir\": $replay_ir, \"executor_drain_ir\": $drain_ir,
    \"intake_new_top\": $new_top, \"intake_replay_top\": $replay_top, \"executor_drain_top\": $drain_top,
    \"intake_new_sql\": $new_sql, \"intake_replay_sql\": $replay_sql, \"executor_drain_sql\": $drain_sql}" |
    python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)))' >>"$results"
}

while [ $# -ge 2 ]; do
  profile_build "$1" "$2"
  shift 2
done
python3 "$root/bench/profile-report.py" "$results" "$root/docs/profile.md"
log "wrote docs/profile.md"
