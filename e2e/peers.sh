#!/usr/bin/env bash
# Builds (or reuses from the cache) the comparison peers of `make bench-e2e`:
#   training-operator   go install github.com/kubeflow/training-operator/cmd/training-operator.v1@$TRAINING_OPERATOR_VERSION
#                       (Go module proxy; its go.mod has no replace directives), plus its TFJob CRD
#                       copied from the same module's manifests/base/crds/
# Each lands in $TFJOB_CACHE_DIR/tools/training-operator-<version>/{bin,crds}/ and is never rebuilt
# while that directory exists. Cold: a few minutes on 2 cores.
#   peers.sh            build if missing, print nothing but progress
#   peers.sh --dir      print the peer's directory (for the bench binary)
set -euo pipefail
LOG_TAG=peers
source "$(dirname "$0")/lib.sh"

# The version issue #6 names. Override to compare against another release.
TRAINING_OPERATOR_VERSION="${TRAINING_OPERATOR_VERSION:-v1.9.0}"
MODULE=github.com/kubeflow/training-operator
dir="$TOOLS_DIR/training-operator-$TRAINING_OPERATOR_VERSION"

if [[ "${1:-}" == "--dir" ]]; then echo "$dir"; exit 0; fi
[[ -x "$dir/bin/training-operator.v1" && -f "$dir/crds/kubeflow.org_tfjobs.yaml" ]] && exit 0

command -v go >/dev/null || die "go is needed to build Kubeflow's training-operator"
mkdir -p "$TOOLS_DIR"
exec 9>"$TOOLS_DIR/.lock-peers"
flock 9
[[ -x "$dir/bin/training-operator.v1" && -f "$dir/crds/kubeflow.org_tfjobs.yaml" ]] && exit 0
# make test's background build of it (e2e/tools-background.sh) failed: say why.
background_note peers

log "building Kubeflow training-operator $TRAINING_OPERATOR_VERSION (go install; a few minutes cold)"
start=$SECONDS
rm -rf "$dir.tmp" && mkdir -p "$dir.tmp/bin" "$dir.tmp/crds"
if ! env GOBIN="$dir.tmp/bin" go install -trimpath -ldflags "-s -w" \
  "$MODULE/cmd/training-operator.v1@$TRAINING_OPERATOR_VERSION" >"$dir.tmp/build.log" 2>&1; then
  tail -n 40 "$dir.tmp/build.log" >&2
  die "building training-operator $TRAINING_OPERATOR_VERSION failed (log: $dir.tmp/build.log)"
fi
# The CRD must be the one that version ships, from the module just downloaded.
src="$(go env GOMODCACHE)/$MODULE@$TRAINING_OPERATOR_VERSION/manifests/base/crds/kubeflow.org_tfjobs.yaml"
[[ -f "$src" ]] || die "no TFJob CRD at $src"
cp "$src" "$dir.tmp/crds/"
rm -rf "$dir" && mv "$dir.tmp" "$dir"
log "training-operator $TRAINING_OPERATOR_VERSION ready in $dir ($((SECONDS - start)) s)"
