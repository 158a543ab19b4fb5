#!/bin/sh
# Used by the Dockerfile: copies the workspace's manifests (Cargo.toml of the root and
# of every member, Cargo.lock, build scripts, cargo and toolchain settings) into DEST with stub sources in place of
# every target root (src/lib.rs, src/main.rs, src/bin/*.rs, tests/*.rs, benches/*.rs,
# examples/*.rs), so that building DEST compiles every dependency and nothing of ours.
# DEST changes only when a manifest or the set of targets changes, so the image's
# dependency layer is rebuilt only then. Stub contents are constant, so two runs over
# the same manifests give byte-identical trees.
set -eu
src=$1
dest=$2
mkdir -p "$dest"
cd "$src"
cp Cargo.toml Cargo.lock "$dest/"
# Settings that change how everything is compiled belong to the dependency layer too.
for file in .cargo/config.toml .cargo/config rust-toolchain.toml rust-toolchain; do
  if [ -f "$file" ]; then
    mkdir -p "$dest/$(dirname "$file")"
    cp "$file" "$dest/$file"
  fi
done
find . -name Cargo.toml -not -path './Cargo.toml' -not -path './target/*' | while read -r manifest; do
  dir=$(dirname "$manifest")
  mkdir -p "$dest/$dir"
  cp "$manifest" "$dest/$dir/"
  if [ -f "$dir/build.rs" ]; then cp "$dir/build.rs" "$dest/$dir/"; fi
  for root in "$dir"/src/lib.rs "$dir"/src/main.rs "$dir"/src/bin/*.rs \
              "$dir"/tests/*.rs "$dir"/benches/*.rs "$dir"/examples/*.rs; do
    [ -f "$root" ] || continue
    mkdir -p "$dest/$(dirname "$root")"
    case "$root" in
      */src/lib.rs|*/tests/*.rs|*/benches/*.rs) : >"$dest/$root" ;;
      *) echo 'fn main() {}' >"$dest/$root" ;;
    esac
  done
done
