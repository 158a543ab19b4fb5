#!/usr/bin/env bash
# The README cannot drift from the code: clones this repository into a temporary
# directory, runs `make up` there, then runs the README's own commands (the ```sh blocks
# between <!-- readme-check:begin --> and <!-- readme-check:end -->, in order, in one
# shell, exactly as written) and checks what a reader is promised: the agent is created,
# the payment comes back SUCCEEDED, the retry is a replay of it, `opgate operations list`
# shows it, and a declared kind's order succeeds. Then `make down`. Also checks that
# every link in README.md points at a file of the repository, never outside it.
#
# The clone is of HEAD, with the working tree's uncommitted changes laid over it (files
# git tracks or would track; READMECHECK_HEAD_ONLY=1 checks HEAD alone), so what runs is
# what a commit of this tree would hold. It reuses the binaries already built here
# (target/debug, linked into the clone) instead of building the workspace a second
# time: `make test` and `make readme-check` build them first.
#
# The README names fixed ports. When one of them is taken (a `make up` of this checkout,
# say), the clone's stack is moved to free ports and the commands are run with the
# addresses replaced, which is said when it happens. Everything started is stopped and
# the directory removed on any exit; on a failure, the commands' output and the
# services' logs are printed first.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
started=$(date +%s)

say() { printf 'readme-check: %s\n' "$*"; }
die() { printf 'readme-check: FAILED: %s\n' "$*" >&2; exit 1; }

for tool in git make curl python3; do
  command -v "$tool" >/dev/null || die "$tool not found on PATH"
done
binaries=(opgate intake executor reconciler provider-sim)
for b in "${binaries[@]}"; do
  [ -x "$root/target/debug/$b" ] || die "target/debug/$b is missing: cargo build --workspace --bins first"
done

# ---------------------------------------------------------------------------------
# Links: relative, to files that exist; none leaves the repository.
# ---------------------------------------------------------------------------------
python3 - "$root" <<'PY' || die "README.md has links that leave the repository or point at nothing (above)"
import os, re, sys
root = sys.argv[1]
text = open(os.path.join(root, "README.md"), encoding="utf-8").read()
text = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks hold commands, not links
bad = []
for target in re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r"<(https?://[^>]+)>", text):
    if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("//"):
        bad.append(f"{target}: outside the repository")
        continue
    path = target.split("#", 1)[0]
    if path and not os.path.exists(os.path.join(root, path)):
        bad.append(f"{target}: no such file")
for line in bad:
    print(f"readme-check:   {line}", file=sys.stderr)
sys.exit(1 if bad else 0)
PY

# ---------------------------------------------------------------------------------
# The clone. Its parent is world-readable so that PostgreSQL, run as another user when
# this runs as root, can keep its cluster inside the clone.
# ---------------------------------------------------------------------------------
tmp=$(mktemp -d "${TMPDIR:-/tmp}/opgate-readme-check.XXXXXX")
chmod 755 "$tmp"
clone="$tmp/opgate"
log="$tmp/readme-commands.log"

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [ "$status" != 0 ]; then
    if [ -s "$log" ]; then
      echo "---- the README's commands and their output ----" >&2
      cat "$log" >&2
    fi
    for f in "$clone"/target/up/*.log; do
      [ -f "$f" ] || continue
      echo "---- ${f#"$clone"/} (last 20 lines) ----" >&2
      tail -20 "$f" >&2
    done
  fi
  if [ -x "$clone/scripts/down.sh" ]; then
    "$clone/scripts/down.sh" --purge >/dev/null 2>&1 || true
  fi
  rm -rf "$tmp"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

git clone --quiet --no-hardlinks "$root" "$clone"
if [ -z "${READMECHECK_HEAD_ONLY:-}" ] && [ -n "$(git -C "$root" status --porcelain --untracked-files=normal)" ]; then
  # Lay the working tree over the clone: changed and new files (as `git add -A` would
  # take them), and the deleted ones removed.
  # shellcheck disable=SC2016  # the inner sh expands its own "$f"
  (cd "$root" && git ls-files -z --cached --others --exclude-standard | xargs -0 -r sh -c '
      for f; do [ -f "$f" ] || [ -L "$f" ] && printf "%s\0" "$f"; done' sh |
    tar --null -T - -cf -) | tar -xf - -C "$clone"
  (cd "$root" && git ls-files -z --deleted) | (cd "$clone" && xargs -0 -r rm -f --)
  say "cloned HEAD ($(git -C "$root" rev-parse --short HEAD)) with this working tree's uncommitted changes"
else
  say "cloned HEAD ($(git -C "$root" rev-parse --short HEAD))"
fi
mkdir -p "$clone/target/debug"
for b in "${binaries[@]}"; do ln -s "$root/target/debug/$b" "$clone/target/debug/$b"; done

# ---------------------------------------------------------------------------------
# The README's commands, extracted as written.
# ---------------------------------------------------------------------------------
commands="$tmp/readme-commands.sh"
python3 - "$clone/README.md" >"$commands" <<'PY' || die "could not extract the README's checked blocks"
import re, shlex, sys
text = open(sys.argv[1], encoding="utf-8").read()
regions = re.findall(r"<!-- readme-check:begin -->(.*?)<!-- readme-check:end -->", text, re.S)
if not regions:
    sys.exit("no <!-- readme-check:begin --> … <!-- readme-check:end --> region in README.md")
for n, region in enumerate(regions, 1):
    blocks = re.findall(r"```sh\n(.*?)```", region, re.S)
    if not blocks:
        sys.exit(f"readme-check region {n} holds no ```sh block")
    for block in blocks:
        print(f"printf '\\n$ %s\\n' {shlex.quote(block.strip())}")
        print(block)
PY
grep -q '^make up$' "$commands" || die "the README's checked commands do not start the stack with make up"

# Fixed ports the README names: move the clone's stack when any is taken.
declare -A ports=([PG]=55432 [INTAKE]=8080 [SIM]=9090 [EXECUTOR]=9464 [RECONCILER]=9465 [INTAKE_METRICS]=9466)
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
moved=()
busy=
for name in "${!ports[@]}"; do port_busy "${ports[$name]}" && busy=1; done
if [ -n "$busy" ]; then
  for name in "${!ports[@]}"; do
    new=$(free_port)
    moved+=("OPGATE_UP_${name}_PORT=$new")
    sed -i "s/127\.0\.0\.1:${ports[$name]}\b/127.0.0.1:$new/g" "$commands"
  done
  say "a port the README names is taken here: the clone's stack and its commands use free ports (${moved[*]})"
fi

# A fresh shell's environment: nothing of this one's opgate settings, and the clone's
# make skips the build (CARGO=true): its target/debug holds this checkout's binaries.
run_env=(env -i "HOME=$HOME" "PATH=$PATH" "LANG=${LANG:-C.UTF-8}" "TERM=dumb" "USER=${USER:-$(id -un)}"
  "TMPDIR=${TMPDIR:-/tmp}" CARGO=true "${moved[@]}")

cd "$clone"
say "make up (the stack), then the README's commands"
"${run_env[@]}" make --no-print-directory up >"$tmp/make-up.log" 2>&1 \
  || { cat "$tmp/make-up.log" >&2; die "make up failed in the clone"; }

: >"$log"
set +e
# shellcheck disable=SC2016  # expanded by the inner bash, after the README's commands
timeout 120 "${run_env[@]}" bash -c '
  set -euo pipefail
  . "$1"
  printf "\nreadme-check: KEY=%s SHOP_KEY=%s\n" "${KEY:0:4}" "${SHOP_KEY:0:4}"
' readme-commands "$commands" >>"$log" 2>&1
status=$?
set -e
[ "$status" = 0 ] || die "the README's commands failed (exit $status)"

# ---------------------------------------------------------------------------------
# What the README promises.
# ---------------------------------------------------------------------------------
python3 - "$log" <<'PY' || die "the README's commands did not do what it says (above)"
import json, re, sys
out = open(sys.argv[1], encoding="utf-8", errors="replace").read()
problems = []

def responses():
    """(status, headers, body) of every `curl -i` answer in the output."""
    for m in re.finditer(r"^HTTP/1\.1 (\d{3})[^\n]*\n(.*?)\r?\n\r?\n(\{.*?\})\s*$", out, re.S | re.M):
        headers = {k.lower(): v.strip() for k, v in re.findall(r"^([A-Za-z-]+):(.*)$", m.group(2), re.M)}
        try:
            body = json.loads(m.group(3))
        except ValueError:
            body = {}
        yield int(m.group(1)), headers, body

answers = list(responses())
if "readme-check: KEY=opg_" not in out:
    problems.append("the agent was not created: KEY does not hold an agent key (opg_…)")
payments = [(s, h, b) for s, h, b in answers if b.get("operation_type") == "payment"]
first = next(((s, h, b) for s, h, b in payments if "idempotent-replayed" not in h), None)
if not first or first[0] != 200 or first[2].get("status") != "SUCCEEDED":
    problems.append("the payment did not come back 200 SUCCEEDED: %r" % (first,))
replays = [(s, h, b) for s, h, b in payments if h.get("idempotent-replayed") == "true"]
if not replays:
    problems.append("no answer carried Idempotent-Replayed: true")
elif first and any(b.get("operation_id") != first[2].get("operation_id") for _, _, b in replays):
    problems.append("a replay named another operation than the payment")
if not re.search(r"^\S+\s+billing-agent\s+SUCCEEDED\s", out, re.M):
    problems.append("opgate operations list did not show billing-agent's payment SUCCEEDED")
if "SHOP_KEY=opg_" in out:
    orders = [b for s, h, b in answers if b.get("operation_type") == "order"]
    if not orders or orders[0].get("status") != "SUCCEEDED":
        problems.append("the declared kind's order did not come back SUCCEEDED")
for p in problems:
    print("readme-check:   " + p, file=sys.stderr)
sys.exit(1 if problems else 0)
PY

say "make down"
"${run_env[@]}" make --no-print-directory down >"$tmp/make-down.log" 2>&1 \
  || { cat "$tmp/make-down.log" >&2; die "make down failed in the clone"; }
for f in "$clone"/target/up/*.pid; do
  [ -e "$f" ] && die "make down left ${f#"$clone"/} behind"
done
say "ok: agent created, payment SUCCEEDED, replayed, listed; order SUCCEEDED; stack stopped ($(($(date +%s) - started)) s)"
