#!/usr/bin/env bash
# `make mutants`: mutation testing with cargo-mutants (crates.io) on the logic the
# unit tests decide: the domain crate (state machine, money, keys, hashes, limits),
# provider outcome classification (outcome.rs, stripe_outcome.rs, and http_client.rs,
# where a timeout is told from a request that never left), the executor's
# outcome-to-transition rules (rules.rs) and the reconciler's verdicts (decision.rs).
# Each mutant is built and the mutated package's tests run in a copy of the tree under
# a temporary directory; the report is in target/mutants.out/ (caught.txt, missed.txt,
# timeout.txt, unviable.txt). Exclusions, each with its reason: .cargo/mutants.toml.
# The store's statements are not mutated here: their tests are the end-to-end ones
# (real PostgreSQL, built binaries), too slow to run once per mutant; docs/testing.md
# lists the hand-applied store mutations and the tests that catch them.
# Not part of CI: a run takes about 30 minutes on 2 cores. Extra arguments go to
# cargo mutants (e.g. `scripts/mutants.sh -f crates/executor/src/rules.rs`, or
# `--list` to see the mutants without running them).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

version=27.1.0
if ! cargo mutants --version 2>/dev/null | grep -q "$version"; then
  echo "mutants: installing cargo-mutants $version from crates.io" >&2
  cargo install cargo-mutants --locked --version "$version"
fi

scope=(
  --file 'crates/domain/src/*.rs'
  --file crates/provider/src/outcome.rs
  --file crates/provider/src/stripe_outcome.rs
  --file crates/provider/src/http_client.rs
  --file crates/executor/src/rules.rs
  --file crates/reconciler/src/decision.rs
)
# Later --file arguments (from "$@") narrow nothing by themselves: when any are
# given, they replace the scope above.
for arg in "$@"; do
  case "$arg" in -f | --file | --file=*) scope=() ;; esac
done

exec cargo mutants "${scope[@]}" \
  --output target \
  --jobs "${MUTANTS_JOBS:-2}" \
  "$@"
