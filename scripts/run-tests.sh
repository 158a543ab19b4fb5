#!/usr/bin/env bash
# Runs the whole workspace's tests (DATABASE_URL must name a PostgreSQL; make test
# wraps this in with-postgres.sh) and ends with one total line over every test
# binary, so the last line says what ran rather than the last binary's count.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
log="$root/target/test-output.log"
mkdir -p "$root/target"
cargo test --workspace --no-fail-fast "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed;?$/) p += $i; if ($(i+1) ~ /^failed;?$/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
