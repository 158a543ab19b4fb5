#!/usr/bin/env bash
# make up: a local opgate stack that stays up until `make down` (scripts/down.sh).
#
#   PostgreSQL    127.0.0.1:55432, database opgate (a cluster kept under target/up/pg)
#   provider-sim  http://127.0.0.1:9090
#   intake        http://127.0.0.1:8080
#   executor      http://127.0.0.1:9464 (/metrics, /healthz)
#   reconciler    http://127.0.0.1:9465 (/metrics, /healthz)
#   intake's /metrics on 127.0.0.1:9466 (its --metrics-listen)
#
# Every service loads examples/catalog.toml. Logs, stdout and pid files are in
# target/up/; target/up/env holds the exports printed at the end (DATABASE_URL, PATH,
# the demo keys). Running it again leaves what is already up as it is, starts what is
# not (a service whose binary was rebuilt is restarted), and prints the same keys.
#
# With DATABASE_URL set, that database is used and no cluster is made (services started
# for another database are restarted). The ports can be moved with OPGATE_UP_PG_PORT,
# OPGATE_UP_SIM_PORT, OPGATE_UP_INTAKE_PORT, OPGATE_UP_EXECUTOR_PORT,
# OPGATE_UP_RECONCILER_PORT and OPGATE_UP_INTAKE_METRICS_PORT. As root, PostgreSQL runs
# as the 'postgres' user (or 'nobody') through runuser, as initdb refuses to run as root.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# Every path below is absolute; run from / so that PostgreSQL's user (as root) is never
# in a directory it may not enter.
cd /
bin="$root/target/debug"
state="$root/target/up"
catalog="$root/examples/catalog.toml"

pg_port=${OPGATE_UP_PG_PORT:-55432}
sim_port=${OPGATE_UP_SIM_PORT:-9090}
intake_port=${OPGATE_UP_INTAKE_PORT:-8080}
executor_port=${OPGATE_UP_EXECUTOR_PORT:-9464}
reconciler_port=${OPGATE_UP_RECONCILER_PORT:-9465}
intake_metrics_port=${OPGATE_UP_INTAKE_METRICS_PORT:-9466}

say() { printf 'up: %s\n' "$*"; }
die() { printf 'up: %s\n' "$*" >&2; exit 1; }

for tool in opgate intake executor reconciler provider-sim; do
  [ -x "$bin/$tool" ] || die "$bin/$tool is missing: build first (make up runs cargo build)"
done
for tool in curl python3; do
  command -v "$tool" >/dev/null || die "$tool not found on PATH"
done
mkdir -p "$state"

# A TCP port on 127.0.0.1 that something already listens on.
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# ---------------------------------------------------------------------------------
# PostgreSQL: a cluster of our own unless DATABASE_URL names one.
# ---------------------------------------------------------------------------------
if [ -n "${DATABASE_URL:-}" ]; then
  database_url=$DATABASE_URL
  say "using the database in DATABASE_URL"
else
  for tool in initdb pg_ctl psql; do
    command -v "$tool" >/dev/null || die "$tool not found on PATH (PostgreSQL 15+ binaries), or set DATABASE_URL"
  done
  as_owner=()
  pgdir="$state/pg"
  if [ "$(id -u)" = 0 ]; then
    command -v runuser >/dev/null || die "as root, runuser is needed to run PostgreSQL as another user"
    owner=postgres
    id "$owner" >/dev/null 2>&1 || owner=nobody
    as_owner=(runuser -u "$owner" --)
    mkdir -p "$pgdir"
    chown "$owner" "$pgdir"
    if ! runuser -u "$owner" -- test -w "$pgdir"; then
      # The checkout is not reachable by $owner (a private home, say): keep the cluster
      # in a directory of /tmp named after this checkout, so the next `make up` finds it.
      rmdir "$pgdir" 2>/dev/null || true
      pgdir="${TMPDIR:-/tmp}/opgate-up-$(printf '%s' "$root" | sha256sum | cut -c1-12)"
      mkdir -p "$pgdir"
      chown "$owner" "$pgdir"
    fi
  fi
  echo "$pgdir" >"$state/pgdir"
  database_url="postgres://postgres@127.0.0.1:$pg_port/opgate"
  psql_admin=(psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres)

  if [ ! -f "$pgdir/data/PG_VERSION" ]; then
    rm -rf "$pgdir/data"
    say "creating a PostgreSQL cluster in $pgdir"
    "${as_owner[@]}" initdb -D "$pgdir/data" -U postgres --auth=trust -E UTF8 --no-locale \
      >"$pgdir/initdb.log" 2>&1 || { cat "$pgdir/initdb.log" >&2; die "initdb failed"; }
  fi
  if "${as_owner[@]}" pg_ctl -D "$pgdir/data" status >/dev/null 2>&1; then
    if ! "${psql_admin[@]}" -c 'SELECT 1' >/dev/null 2>&1; then
      say "PostgreSQL is running but not on port $pg_port: restarting it"
      "${as_owner[@]}" pg_ctl -D "$pgdir/data" -m fast -w stop >/dev/null
    fi
  fi
  if ! "${as_owner[@]}" pg_ctl -D "$pgdir/data" status >/dev/null 2>&1; then
    port_busy "$pg_port" && die "port $pg_port is taken by another process (set OPGATE_UP_PG_PORT)"
    "${as_owner[@]}" pg_ctl -D "$pgdir/data" -l "$pgdir/server.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $pg_port -c unix_socket_directories=" \
      start >/dev/null || { tail -20 "$pgdir/server.log" >&2; die "PostgreSQL did not start"; }
    say "PostgreSQL started on 127.0.0.1:$pg_port"
  else
    say "PostgreSQL already running on 127.0.0.1:$pg_port"
  fi
  ln -sfn "$pgdir/server.log" "$state/postgres.log"
  if [ -z "$("${psql_admin[@]}" -tA -c "SELECT 1 FROM pg_database WHERE datname = 'opgate'")" ]; then
    "${psql_admin[@]}" -c 'CREATE DATABASE opgate'
  fi
fi
export DATABASE_URL=$database_url

# ---------------------------------------------------------------------------------
# Migrations, then the services.
# ---------------------------------------------------------------------------------
"$bin/opgate" migrate 2>&1 | sed 's/^/up: /'

export OPGATE_CATALOG=$catalog
export OPGATE_SIM_URL=http://127.0.0.1:$sim_port
export OPGATE_LOG_FORMAT=${OPGATE_LOG_FORMAT:-json}

# A live process: kill -0 alone also counts a zombie, which an init that does not reap
# (some containers and sandboxes) can leave behind for a while.
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0 # no /proc: kill -0 is all we have
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

# The pid in NAME.pid when that process is alive and runs one of our binaries (a pid
# reused by another process is not ours).
running_pid() {
  local pid exe
  pid=$(cat "$state/$1.pid" 2>/dev/null) || return 1
  [ -n "$pid" ] && alive "$pid" || return 1
  [ -d /proc/self ] || { echo "$pid"; return; } # no /proc (not Linux): trust the pid file
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  case "$exe" in
    */"$1"|*/"$1"" (deleted)") echo "$pid" ;;
    *) return 1 ;;
  esac
}

# Each service in its own session, so that make's (or a terminal's) signals leave it up.
detach=(setsid)
command -v setsid >/dev/null || detach=(nohup)

healthy() { curl -fsS --max-time 2 -o /dev/null "$1" 2>/dev/null; }

# ensure NAME HEALTH_URL ARGS...: leaves a healthy running NAME as it is, otherwise
# (re)starts it detached (its own session, so it outlives make) and waits for HEALTH_URL.
ensure() {
  local name=$1 health=$2 pid
  shift 2
  if pid=$(running_pid "$name"); then
    if [[ "$(readlink "/proc/$pid/exe" 2>/dev/null || true)" == *" (deleted)" ]]; then
      say "$name: its binary was rebuilt, restarting it"
      stop_pid "$pid"
    elif healthy "$health"; then
      say "$name already running (pid $pid)"
      return
    else
      say "$name (pid $pid) does not answer $health: restarting it"
      stop_pid "$pid"
    fi
  fi
  local port=${health#http://127.0.0.1:}
  port=${port%%/*}
  port_busy "$port" && die "$name: port $port is taken by another process (make down, or move it: see scripts/up.sh)"
  "${detach[@]}" "$bin/$name" "$@" >"$state/$name.out" 2>"$state/$name.log" </dev/null &
  echo $! >"$state/$name.pid"
  for _ in $(seq 300); do
    healthy "$health" && { say "$name started (pid $(cat "$state/$name.pid")), log in target/up/$name.log"; return; }
    alive "$(cat "$state/$name.pid")" || break
    sleep 0.1
  done
  tail -20 "$state/$name.log" >&2
  die "$name did not become healthy at $health; its log is target/up/$name.log"
}

stop_pid() {
  kill "$1" 2>/dev/null || true
  for _ in $(seq 100); do alive "$1" || return 0; sleep 0.1; done
  kill -9 "$1" 2>/dev/null || true
}

# Services started for another database are stopped first, and started again below.
if [ -f "$state/database-url" ] && [ "$(cat "$state/database-url")" != "$database_url" ]; then
  for name in reconciler executor intake; do
    if pid=$(running_pid "$name"); then
      say "$name was started for another database: restarting it"
      stop_pid "$pid"
    fi
  done
fi
echo "$database_url" >"$state/database-url"

ensure provider-sim "http://127.0.0.1:$sim_port/healthz" \
  --listen "127.0.0.1:$sim_port"
# /metrics on a listener of its own, apart from the agents' port.
intake_metrics="http://127.0.0.1:$intake_metrics_port/metrics"
intake_args=(--listen "127.0.0.1:$intake_port" --metrics-listen "127.0.0.1:$intake_metrics_port")
ensure intake "http://127.0.0.1:$intake_port/readyz" "${intake_args[@]}"
ensure executor "http://127.0.0.1:$executor_port/healthz" \
  --provider-url "http://127.0.0.1:$sim_port" --metrics-listen "127.0.0.1:$executor_port" \
  --shutdown-grace 2s
ensure reconciler "http://127.0.0.1:$reconciler_port/healthz" \
  --provider-url "http://127.0.0.1:$sim_port" --metrics-listen "127.0.0.1:$reconciler_port"

# ---------------------------------------------------------------------------------
# The demo agent and operator. A key is printed once and only its hash is stored, so
# it is kept in target/up/env (mode 600) for the next run; without it, a new one is made.
# ---------------------------------------------------------------------------------
env_file="$state/env"
saved() { # saved VAR: its value in the env file, when that file was made for this database
  [ -f "$env_file" ] && grep -qxF "export DATABASE_URL=$database_url" "$env_file" \
    && sed -n "s/^export $1=//p" "$env_file"
}
status_of() { # status_of URL KEY: the HTTP status intake answers KEY's GET of URL with
  curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $2" "$1"
}
demo_agent=$(saved AGENT_ID || true); demo_agent=${demo_agent:-demo-agent}
demo_operator=$(saved OPERATOR_ID || true); demo_operator=${demo_operator:-demo-operator}
agent_key=$(saved AGENT_KEY || true)
operator_key=$(saved OPERATOR_KEY || true)

# The agent: kept while its saved key works; given a new key when the key was lost; a
# new agent when it does not exist or was revoked.
agent_state=$("$bin/opgate" agents list | awk -v a="$demo_agent" '$1 == a { print ($NF == "-" ? "active" : "revoked") }')
nil_operation="http://127.0.0.1:$intake_port/agent/operations/00000000-0000-0000-0000-000000000000"
if [ "$agent_state" = active ] && [ -n "$agent_key" ] && [ "$(status_of "$nil_operation" "$agent_key")" = 404 ]; then
  :
elif [ "$agent_state" = active ]; then
  agent_key=$("$bin/opgate" agents rotate "$demo_agent")
  say "agent $demo_agent had no saved key that works: gave it a new one"
else
  [ "$agent_state" = revoked ] && demo_agent="demo-agent-$(date +%s)"
  agent_key=$("$bin/opgate" agents create "$demo_agent" \
    --allow payment --allow refund --allow order --allow booking --allow provisioning \
    --max-amount USD:1000.00 --max-amount EUR:1000.00)
  say "created agent $demo_agent"
fi

# The operator: kept while its saved key works, else a new one (operators have no
# rotate: a lost key's operator is revoked and a new one made).
admin_list="http://127.0.0.1:$intake_port/admin/operations?limit=1"
if [ -z "$operator_key" ] || [ "$(status_of "$admin_list" "$operator_key")" != 200 ]; then
  operator_state=$("$bin/opgate" operators list --json | python3 -c '
import json, sys
for o in map(json.loads, filter(str.strip, sys.stdin)):
    if o["operator_id"] == sys.argv[1]:
        print("revoked" if o.get("revoked_at") else "active")
' "$demo_operator")
  if [ -n "$operator_state" ]; then
    [ "$operator_state" = active ] && "$bin/opgate" operators revoke "$demo_operator" 2>/dev/null
    demo_operator="demo-operator-$(date +%s)"
  fi
  operator_key=$("$bin/opgate" operators create "$demo_operator")
  say "created operator $demo_operator"
fi

umask 077
cat >"$env_file" <<EOF
# Written by make up (scripts/up.sh): . target/up/env
export DATABASE_URL=$database_url
export PATH="$bin:\$PATH"
export OPGATE_CATALOG=$catalog
export OPGATE_URL=http://127.0.0.1:$intake_port
export AGENT_ID=$demo_agent
export AGENT_KEY=$agent_key
export OPERATOR_ID=$demo_operator
export OPERATOR_KEY=$operator_key
EOF

b=$(printf '\033[1m') n=$(printf '\033[0m')
[ -t 1 ] || b='' n=''
cat <<EOF

${b}opgate is up${n} (logs, stdout and pids in target/up/; stop it all with: make down)
  PostgreSQL    $database_url
  provider-sim  http://127.0.0.1:$sim_port    (ledger: /_sim/ledger)
  intake        http://127.0.0.1:$intake_port    (/healthz /readyz /openapi.json; metrics: $intake_metrics)
  executor      http://127.0.0.1:$executor_port/metrics
  reconciler    http://127.0.0.1:$reconciler_port/metrics
  catalog       examples/catalog.toml (kinds order, booking, provisioning besides payment, refund)

${b}In your shell${n} (or: . target/up/env):
export PATH="$bin:\$PATH"
export DATABASE_URL=$database_url
export OPGATE_CATALOG=$catalog
export AGENT_KEY=$agent_key       # agent $demo_agent
export OPERATOR_KEY=$operator_key    # operator $demo_operator

${b}Then, as the agent and as the operator:${n}
curl -i -X POST http://127.0.0.1:$intake_port/agent/operations/payment -H "Authorization: Bearer \$AGENT_KEY" -H 'Idempotency-Key: demo-payment-1' -H 'Prefer: wait=10' -H 'Content-Type: application/json' -d '{"customer_id":"cus_123","invoice_id":"inv_1","amount":"25.00","currency":"USD"}'
curl -s -H "Authorization: Bearer \$OPERATOR_KEY" 'http://127.0.0.1:$intake_port/admin/operations?limit=5'
opgate operations list
opgate agents list
EOF
