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

# pg_tool NAME: the path of PostgreSQL's NAME (psql, pg_test_fsync, …) in the directory
# of the initdb on PATH, not through Debian's wrappers.
pg_tool() { echo "$(dirname "$(readlink -f "$(command -v initdb)")")/$1"; }

# until_sql QUERY OP VALUE [LIMIT_S]: runs QUERY every 50 ms until its answer OP VALUE
# holds (`test`'s -ge, =, …); fails after LIMIT_S seconds (600), or when the query
# fails or goes unanswered for 30 s (the session then ends).
# One psql session for the whole wait, not one per poll: these polls run while a drain
# is timed, and a psql started per poll (Debian's psql is a Perl wrapper) took about
# 30 ms of CPU each, a third of a core at the loop's pace on the 2 cores the drain uses.
until_sql() {
  local query=$1 op=$2 want=$3 deadline=$((SECONDS + ${4:-600})) got=
  coproc POLL { "$(pg_tool psql)" "$DATABASE_URL" -X -qtA -v ON_ERROR_STOP=1; }
  local to=${POLL[1]} from=${POLL[0]} pid=$POLL_PID
  while echo "$query;" >&"$to" && read -r -t 30 got <&"$from"; do
    if [ "$got" "$op" "$want" ]; then
      eval "exec $to>&-"; wait "$pid" 2>/dev/null || true
      return 0
    fi
    [ "$SECONDS" -lt "$deadline" ] || break
    sleep 0.05
  done
  eval "exec $to>&-"; wait "$pid" 2>/dev/null || true
  log "gave up waiting for ($query) $op $want (last answer: ${got:-none})"
  return 1
}

# Waits until the outbox is empty.
until_drained() { until_sql "SELECT count(*) FROM outbox" = 0; }
