#!/usr/bin/env bash
# make down: stops what `make up` (scripts/up.sh) started: the services named by the pid
# files in target/up/ (SIGTERM, then SIGKILL after 15 s), then its PostgreSQL cluster.
# The cluster's files stay, so the next `make up` has the same agents and operations;
# `scripts/down.sh --purge` also removes them and target/up, for a fresh start. Safe to
# run when nothing is up.
set -euo pipefail
purge=
case "${1:-}" in
  --purge) purge=1 ;;
  "") ;;
  *) echo "usage: scripts/down.sh [--purge]" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
# Every path below is absolute; run from / so that PostgreSQL's user (as root) is never
# in a directory it may not enter.
cd /
state="$root/target/up"

say() { printf 'down: %s\n' "$*"; }

if [ ! -d "$state" ]; then
  say "nothing to stop (no target/up)"
  exit 0
fi

# A live process: kill -0 alone also counts a zombie, which an init that does not reap
# (some containers and sandboxes) can leave behind for a while.
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0 # no /proc: kill -0 is all we have
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

# Only a live process that runs the binary the pid file is named after: a pid reused by
# some other process after a reboot is left alone.
ours() {
  local pid=$1 name=$2 exe
  alive "$pid" || return 1
  [ -d /proc/self ] || return 0 # no /proc (not Linux): trust the pid file
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  [[ "$exe" == */"$name" || "$exe" == */"$name (deleted)" ]]
}

# Stop the services together, in the reverse order of their start.
pids=()
for name in reconciler executor intake provider-sim; do
  file="$state/$name.pid"
  [ -f "$file" ] || continue
  pid=$(cat "$file")
  if [ -n "$pid" ] && ours "$pid" "$name"; then
    kill -TERM "$pid" 2>/dev/null || true
    pids+=("$pid:$name")
  fi
  rm -f "$file"
done
for entry in "${pids[@]}"; do
  pid=${entry%%:*} name=${entry#*:}
  for _ in $(seq 150); do alive "$pid" || break; sleep 0.1; done
  if alive "$pid"; then
    kill -KILL "$pid" 2>/dev/null || true
    say "$name (pid $pid) did not stop within 15 s: killed"
  else
    say "$name stopped"
  fi
done

pgdir=$(cat "$state/pgdir" 2>/dev/null || true)
if [ -n "$pgdir" ] && [ -f "$pgdir/data/PG_VERSION" ]; then
  as_owner=()
  if [ "$(id -u)" = 0 ]; then
    owner=$(stat -c %U "$pgdir/data")
    as_owner=(runuser -u "$owner" --)
  fi
  if "${as_owner[@]}" pg_ctl -D "$pgdir/data" status >/dev/null 2>&1; then
    "${as_owner[@]}" pg_ctl -D "$pgdir/data" -m fast -w -t 60 stop >/dev/null
    say "PostgreSQL stopped"
  fi
fi
if [ -n "$purge" ]; then
  [ -n "$pgdir" ] && rm -rf "$pgdir"
  rm -rf "$state"
  say "removed the database's files and target/up"
elif [ -n "$pgdir" ]; then
  say "the database's files stay in $pgdir (scripts/down.sh --purge removes them)"
fi
