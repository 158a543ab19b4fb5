#!/usr/bin/env bash
# Measures what telemetry costs intake: the same new-payment load (wrk, 32
# connections, 2 threads) against a release intake with OTEL_* unset, and with traces
# and metrics exported over OTLP/HTTP to a sink on 127.0.0.1. Both runs share one
# PostgreSQL and one machine, back to back, and are reported as a ratio. Needs wrk.
# Run through make bench-telemetry (which provides DATABASE_URL).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/target/release"
duration=${BENCH_DURATION:-10s}
out="$root/target/bench"
mkdir -p "$out"
command -v wrk >/dev/null || { echo "bench: wrk not found (apt-get install wrk)" >&2; exit 1; }

pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

"$bin/opgate" migrate >/dev/null 2>&1
key=$("$bin/opgate" agents create "bench-$(date +%s%N)")
python3 "$root/bench/otlp-sink.py" >"$out/sink.port" &
pids+=($!)
for _ in $(seq 50); do [ -s "$out/sink.port" ] && break; sleep 0.1; done
sink="http://127.0.0.1:$(cat "$out/sink.port")"

run() { # run NAME ENV...: one intake, one wrk run; prints "NAME requests/s p50 p99"
  local name=$1; shift
  env "$@" RUST_LOG=warn "$bin/intake" --listen 127.0.0.1:0 >"$out/intake-$name.out" 2>"$out/intake-$name.log" &
  local pid=$!
  for _ in $(seq 100); do [ -s "$out/intake-$name.out" ] && break; sleep 0.05; done
  local base; base=$(sed -n 's/^intake listening on //p' "$out/intake-$name.out")
  KEY="$key" RUN="$name-warmup" wrk -t2 -c32 -d2s -s "$root/bench/new-payment.lua" "$base" >/dev/null
  KEY="$key" RUN="$name" wrk -t2 -c32 -d"$duration" --latency -s "$root/bench/new-payment.lua" "$base" >"$out/wrk-$name.txt"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  local rps p50 p99
  rps=$(awk '/^Requests\/sec/ {print $2}' "$out/wrk-$name.txt")
  p50=$(awk '$1 == "50%" {print $2}' "$out/wrk-$name.txt")
  p99=$(awk '$1 == "99%" {print $2}' "$out/wrk-$name.txt")
  echo "$name $rps $p50 $p99"
}

unset OTEL_EXPORTER_OTLP_ENDPOINT OTEL_EXPORTER_OTLP_TRACES_ENDPOINT OTEL_EXPORTER_OTLP_METRICS_ENDPOINT
off=$(run otel-unset)
on=$(run otel-exporting OTEL_EXPORTER_OTLP_ENDPOINT="$sink")
off_again=$(run otel-unset-again)
printf '%-18s %12s %10s %10s\n' config "requests/s" p50 p99
printf '%-18s %12s %10s %10s\n' $off $on $off_again
awk -v a="$(echo "$off" | cut -d' ' -f2)" -v b="$(echo "$on" | cut -d' ' -f2)" -v c="$(echo "$off_again" | cut -d' ' -f2)" \
  'BEGIN { printf "exporting / unset: %.3f   (unset run-to-run: %.3f)\n", b / ((a + c) / 2), c / a }'
