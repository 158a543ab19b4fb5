#!/usr/bin/env bash
# make bench-e2e-trace: where the end-to-end pace goes. Runs RUNS rounds of N payments,
# 32 clients registering through intake while one executor (default flags) drains, and
# every half second records how many are registered, queued in the outbox and settled,
# and what the busy backends wait on (pg_stat_activity). The disk's flush latency is
# measured before and after each round: every registration, claim and completion waits
# for one, so a slow disk shows here as backends waiting on WALWrite/WALSync while
# intake and the executor sit nearly idle.
#   bench/e2e-trace.sh [N] [RUNS]      (DATABASE_URL from with-postgres.sh)
# Writes target/bench-e2e/round-K.tsv (time, registered, queued, settled) and
# target/bench-e2e/waits-K.txt, and prints one summary line per round.
set -euo pipefail
n=${1:-10000}
runs=${2:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/target/release"
out="$root/target/bench-e2e"
mkdir -p "$out"
: "${DATABASE_URL:?run through make bench-e2e-trace}"

source "$root/bench/lib.sh"
rm -f "$out"/*.pid "$out"/round-*.tsv "$out"/waits-*.txt
trap cleanup EXIT

fsync_us() {
  local tool; tool=$(pg_tool pg_test_fsync)
  [ -x "$tool" ] || { echo "?"; return; }
  # -s 1: a second per method; fdatasync is the second one printed, the rest is cut off.
  local us; us=$(timeout 5 "$tool" -s 1 -f "$out/fsync.test" 2>/dev/null | awk '$1 == "fdatasync" && /usecs/ {print $(NF-1); exit}' || true)
  rm -f "$out/fsync.test"
  echo "${us:-?}"
}
ticks() { awk '{print $14 + $15}' "/proc/$(cat "$out/$1.pid")/stat"; }

"$bin/opgate" migrate >/dev/null 2>&1
agent="trace-$(date +%s)"
key=$("$bin/opgate" agents create "$agent")
sim=$(start provider-sim "$bin/provider-sim" --listen 127.0.0.1:0)
sim_url=${sim#provider-sim listening on }
intake=$(start intake env RUST_LOG=warn "$bin/intake" --listen 127.0.0.1:0)
base=${intake#intake listening on }
counts="SELECT (SELECT count(*) FROM operations WHERE agent_id = '$agent'),
               (SELECT count(*) FROM outbox),
               (SELECT count(*) FROM operations WHERE agent_id = '$agent' AND status = 'SUCCEEDED')"
waits="SELECT coalesce(wait_event_type, 'CPU') || '/' || coalesce(wait_event, '-')
       FROM pg_stat_activity
       WHERE backend_type = 'client backend' AND state = 'active' AND pid <> pg_backend_pid()"

for round in $(seq "$runs"); do
  before_us=$(fsync_us)
  sql "CHECKPOINT" >/dev/null
  start "executor-$round" env RUST_LOG=warn "$bin/executor" --provider-url "$sim_url" >/dev/null
  intake0=$(ticks intake); executor0=$(ticks "executor-$round")
  started=$(date +%s.%N)
  "$bin/loadgen" --url "$base" --key "$key" --scenario new --concurrency 32 --requests "$n" \
    --run-id "trace-$round" >/dev/null 2>&1 &
  load=$!
  deadline=$((SECONDS + 600))
  while :; do
    row=$(sql "$counts" | tr '|' '\t')
    now=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
    printf '%s\t%s\n' "$now" "$row" >>"$out/round-$round.tsv"
    sql "$waits" >>"$out/waits-$round.txt"
    [ "$(echo "$row" | cut -f3)" -ge $((n * round)) ] && break
    [ "$SECONDS" -lt "$deadline" ] || { log "round $round did not settle"; exit 1; }
    sleep 0.5
  done
  finished=$(date +%s.%N)
  wait "$load" || true
  intake1=$(ticks intake); executor1=$(ticks "executor-$round")
  stop "executor-$round"
  after_us=$(fsync_us)
  top_waits=$(sort "$out/waits-$round.txt" | uniq -c | sort -rn | head -3 | awk '{printf "%s %s; ", $2, $1}')
  awk -v r="$round" -v n="$n" -v a="$started" -v b="$finished" -v it=$((intake1 - intake0)) \
      -v et=$((executor1 - executor0)) -v f0="$before_us" -v f1="$after_us" -v w="$top_waits" \
    'BEGIN {s = b - a; printf "round %d: %d payments end to end in %.1f s = %.0f/s; intake %.2f cores, executor %.2f cores; fdatasync %s/%s us; busy backends: %s\n", r, n, s, n / s, it / 100 / s, et / 100 / s, f0, f1, w}'
done
