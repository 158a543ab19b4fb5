# Helpers shared by bench/run.sh and bench/queue-health.sh (sourced; they set $out,
# $bin, $drain_n and DATABASE_URL first).

# Services are started inside $(...) subshells, so their pids are kept in files.
cleanup() {
  local f; for f in "$out"/*.pid; do [ -e "$f" ] && { kill "$(cat "$f")" 2>/dev/null || true; }; done
  wait 2>/dev/null || true
}
log() { printf '%s bench: %s\n' "$(date +%T)" "$*" >&2; }
sql() { psql "$DATABASE_URL" -X -qtA -c "$1"; }

# start NAME CMD...: runs a service, waits for its ready line, prints it.
start() {
  local name=$1; shift
  "$@" >"$out/$name.out" 2>"$out/$name.log" &
  echo $! >"$out/$name.pid"
  for _ in $(seq 200); do [ -s "$out/$name.out" ] && break; sleep 0.05; done
  head -1 "$out/$name.out"
}
stop() { local pid; pid=$(cat "$out/$1.pid"); kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
peak_rss_mib() { awk '/VmHWM/ {printf "%.1f", $2 / 1024}' "/proc/$(cat "$out/$1.pid")/status"; }

# Empties the outbox and registers drain_n operations with the statements in
# $out/register-new.sql; prints how many events are queued.
prefill_outbox() {
  sql "DELETE FROM outbox" >/dev/null
  sql "VACUUM ANALYZE outbox, operations" >/dev/null
  (cd "$out" && pgbench -n -M prepared -c 8 -j 2 -t $((drain_n / 8)) -f "$out/register-new.sql" "$DATABASE_URL" >/dev/null 2>&1)
  sql "SELECT count(*) FROM outbox"
}

# Waits until the outbox is empty.
until_drained() { until [ "$(sql "SELECT count(*) FROM outbox")" = 0 ]; do sleep 0.05; done; }
