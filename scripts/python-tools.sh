#!/usr/bin/env bash
# Installs the Python tools the tests run (scripts/python-tools.txt, all pinned) into a
# virtualenv at target/pytools, so a fresh machine needs only python3 with venv.
# A stamp file holds the sha256 of python-tools.txt: when it matches, nothing is done,
# so running this before every `make test` costs nothing once installed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
requirements="$root/scripts/python-tools.txt"
venv="$root/target/pytools"
stamp="$venv/.installed"

want=$(sha256sum "$requirements" | cut -d' ' -f1)
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "python tools: up to date in target/pytools"
    exit 0
fi

# Test bin/python rather than the directory: an interrupted `venv` leaves a directory.
if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv"
fi
# --no-deps: python-tools.txt pins every transitive dependency, so nothing unpinned may
# slip in; `pip check` then fails loudly if a pin is missing or incompatible.
"$venv/bin/pip" install --require-virtualenv --disable-pip-version-check --quiet \
    --no-deps -r "$requirements"
"$venv/bin/pip" check --disable-pip-version-check >/dev/null
# Written last, so a failed install is retried by the next run.
echo "$want" >"$stamp"
echo "python tools: installed scripts/python-tools.txt into target/pytools"
