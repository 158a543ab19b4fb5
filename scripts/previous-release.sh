#!/usr/bin/env bash
# Builds the previous release's intake, executor and opgate into
# target/previous-release/<commit>/bin, for the test that runs them while the new
# migrations apply (tests/tests/migration_old_binaries.rs). make test runs this before
# the suite, so the build is paid once, outside every test's time; the test runs it
# too when the binaries are missing (a single test run by hand).
#
#   OPGATE_PREVIOUS_RELEASE  the commit (or tag) of the previous release; default below.
#
# The source comes from git history (`git archive`, so the checkout and its worktree
# list are left alone) and is built with its own Cargo.lock in its own target directory,
# target/previous-release/build: sharing target/debug would put the old workspace's
# crates under the same file names as the new ones and rebuild both on every switch.
# That directory is kept, so a later release rebuilds only what changed. Once the three
# binaries exist for a commit, nothing is done. Prints the bin directory last.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# The repository has no tags; this is the last commit before the outbox became
# partitioned (V13).
release=${OPGATE_PREVIOUS_RELEASE:-e7e9b38d45630de4482c7abdf88c8a3ce68469cf}
commit=$(git -C "$root" rev-parse --verify --quiet "$release^{commit}") || {
    echo "previous-release: $release is not in this clone's history (a shallow clone?)" >&2
    exit 1
}
base="$root/target/previous-release"
out="$base/$commit/bin"
binaries=(intake executor opgate)

built=1
for name in "${binaries[@]}"; do
    [[ -x "$out/$name" ]] || built=0
done
if [[ $built == 1 ]]; then
    echo "previous-release: ${commit:0:7} already built" >&2
    echo "$out"
    exit 0
fi

mkdir -p "$base"
exec 9>"$base/.lock"
flock 9
# Another run may have built it while this one waited for the lock.
built=1
for name in "${binaries[@]}"; do
    [[ -x "$out/$name" ]] || built=0
done
if [[ $built == 0 ]]; then
    src="$base/src-$commit"
    rm -rf "$src"
    mkdir -p "$src"
    git -C "$root" archive "$commit" | tar -x -C "$src"
    started=$SECONDS
    echo "previous-release: building ${commit:0:7} (intake, executor, opgate) in target/previous-release/build" >&2
    CARGO_TARGET_DIR="$base/build" cargo build --locked --quiet \
        --manifest-path "$src/Cargo.toml" \
        -p opgate-intake -p opgate-executor -p opgate-cli --bins
    rm -rf "$out.tmp"
    mkdir -p "$out.tmp"
    for name in "${binaries[@]}"; do
        cp "$base/build/debug/$name" "$out.tmp/$name"
    done
    # Renamed last, so a build that was interrupted is done again by the next run.
    rm -rf "$out"
    mv "$out.tmp" "$out"
    rm -rf "$src"
    echo "previous-release: built ${commit:0:7} in $((SECONDS - started)) s" >&2
fi
echo "$out"
