#!/usr/bin/env bash
# Runs a command with DATABASE_URL pointing at PostgreSQL. When DATABASE_URL is
# already set, that database is used as it is. Otherwise a throwaway cluster is made
# under target/pg/ with the initdb and pg_ctl on PATH, on a free 127.0.0.1 port, and
# stopped and removed when the command exits, whatever its outcome. Works as root by
# running the server as the 'postgres' (or 'nobody') user.
#
#   PG_SETTINGS="-c fsync=off"  extra server settings (tests use it; benchmarks don't)
#   PG_KEEP=1                   keep the cluster's files after exit (for debugging)
set -euo pipefail

if [ -n "${DATABASE_URL:-}" ]; then
  exec "$@"
fi

for tool in initdb pg_ctl; do
  command -v "$tool" >/dev/null || { echo "with-postgres: $tool not found on PATH" >&2; exit 1; }
done

root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/target/pg"
dir=$(mktemp -d "$root/target/pg/cluster.XXXXXX")
as_owner=()
if [ "$(id -u)" = 0 ]; then
  owner=postgres
  id "$owner" >/dev/null 2>&1 || owner=nobody
  chown "$owner" "$dir"
  if ! runuser -u "$owner" -- test -w "$dir"; then
    # The checkout is not reachable by $owner (a private home, say): use /tmp.
    rmdir "$dir"
    dir=$(mktemp -d "${TMPDIR:-/tmp}/opgate-pg.XXXXXX")
    chown "$owner" "$dir"
  fi
  as_owner=(runuser -u "$owner" --)
fi

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

stop_cluster() {
  "${as_owner[@]}" pg_ctl -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  if [ -z "${PG_KEEP:-}" ]; then rm -rf "$dir"; fi
}
trap stop_cluster EXIT

echo "with-postgres: starting a throwaway PostgreSQL in $dir on port $port" >&2
"${as_owner[@]}" initdb -D "$dir/data" -U postgres --auth=trust -E UTF8 --no-locale -N >"$dir/initdb.log" 2>&1 \
  || { cat "$dir/initdb.log" >&2; exit 1; }
"${as_owner[@]}" pg_ctl -D "$dir/data" -l "$dir/server.log" -w -t 60 \
  -o "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories= -c max_connections=400 ${PG_SETTINGS:-}" \
  start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }

export DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres"
set +e
"$@"
status=$?
set -e
exit $status
