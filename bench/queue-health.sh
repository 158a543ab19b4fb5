#!/usr/bin/env bash
# The executor's drain behind a forgotten transaction, and its default flags beside the
# tuned ones (issue 16): drain_n queued payments drained by one executor, first with
# nothing else open, then while another session sits idle in a REPEATABLE READ
# transaction that took its snapshot before the events were queued (a forgotten psql),
# so that VACUUM can remove nothing the drain leaves behind. One JSON object per line
# on stdout.
#   bench/queue-health.sh N [BIN_DIR]   (DATABASE_URL set: make bench-queue-health)
# bench/run.sh runs it too, with SIM_URL set and $out/register-new.sql written.
set -euo pipefail
drain_n=${1:?usage: $0 N [BIN_DIR]}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${2:-$root/target/release}
out="$root/target/bench/queue-health"
mkdir -p "$out"
: "${DATABASE_URL:?DATABASE_URL must be set}"
source "$root/bench/lib.sh"
rm -f "$out"/*.pid
on_exit() { exec 7>&- 2>/dev/null || true; cleanup; }
trap on_exit EXIT

if [ -z "${SIM_URL:-}" ]; then
  "$bin/opgate" migrate >/dev/null 2>&1
  agent="bench-$(date +%s)"
  "$bin/opgate" agents create "$agent" >/dev/null
  "$bin/opgate" bench-sql register-new --agent "$agent" >"$out/register-new.sql"
  sim=$(start provider-sim "$bin/provider-sim" --listen 127.0.0.1:0)
  SIM_URL=${sim#provider-sim listening on }
else
  cp "$root/target/bench/register-new.sql" "$out/register-new.sql"
fi

# The forgotten session: psql reading from a fifo, its transaction left open until
# the fifo is closed.
hold_snapshot() {
  rm -f "$out/held.fifo"; mkfifo "$out/held.fifo"
  psql "$DATABASE_URL" -X -q <"$out/held.fifo" >/dev/null 2>&1 &
  echo $! >"$out/held.pid"
  exec 7>"$out/held.fifo"
  echo "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM agents;" >&7
  until [ "$(sql "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' AND backend_xmin IS NOT NULL")" -ge 1 ]; do sleep 0.05; done
}
release_snapshot() {
  exec 7>&-
  wait "$(cat "$out/held.pid")" 2>/dev/null || true
  rm -f "$out/held.fifo" "$out/held.pid"
}
# The outbox on disk, heap and indexes: what the drain left behind.
outbox_kib() {
  sql "SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0) / 1024 FROM pg_class c WHERE c.oid = 'outbox'::regclass OR c.oid IN (SELECT relid FROM pg_partition_tree('outbox'))"
}

# drain_once LABEL held|free EXECUTOR_FLAGS...
drain_once() {
  local label=$1 held=$2; shift 2
  [ "$held" = held ] && hold_snapshot
  local pending; pending=$(prefill_outbox)
  # The prefill's writes flushed now, not by a checkpoint in the middle of one drain.
  sql "CHECKPOINT" >/dev/null
  local started; started=$(date +%s.%N)
  start executor env RUST_LOG=warn "$bin/executor" --provider-url "$SIM_URL" "$@" >/dev/null
  until_drained
  local finished; finished=$(date +%s.%N)
  stop executor
  local kib; kib=$(outbox_kib)
  [ "$held" = held ] && release_snapshot
  awk -v l="$label" -v h="$held" -v n="$pending" -v a="$started" -v b="$finished" -v k="$kib" -v f="$*" \
    'BEGIN { printf "{\"scenario\": \"queue_health_drain\", \"flags\": \"%s\", \"flag_set\": \"%s\", \"snapshot\": \"%s\", \"operations\": %d, \"seconds\": %.3f, \"operations_per_s\": %.1f, \"outbox_kib_after\": %d}\n", f, l, h, n, b - a, n / (b - a), k }'
}

# Each flag set's drains run free, held, held, free, back to back: what the database
# does in the background (autovacuum of tables earlier scenarios filled, a checkpoint)
# drifts over a minute, and this order weighs it on both alike; the report compares
# the means.
tuned=(--concurrency 256 --batch-size 32 --claimers 4 --poll-interval 100ms)
# A first drain on a new database is slower (caches, the first of everything): one
# unrecorded, so that it is not the first free one.
log "queue health: warming up"
drain_once warmup free >/dev/null
for held in free held held free; do
  log "queue health: $drain_n payments, default flags, snapshot $held"
  drain_once defaults "$held"
done
for held in free held held free; do
  log "queue health: $drain_n payments, tuned flags (${tuned[*]}), snapshot $held"
  drain_once tuned "$held" "${tuned[@]}"
done
