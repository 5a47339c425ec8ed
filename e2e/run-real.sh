#!/usr/bin/env bash
# The real-node suite, as `make test-real` and CI (when warm) run it:
#   1. build (or reuse) the tools: the control plane's and the real node's
#   2. build the operator's image (`make image`, incremental)
#   3. start a fresh local control plane with the real node (cluster.sh up --real-node)
#   4. build (or reuse) and import the images the tests use (curl, operator, and
#      tensorflow where e2e/images/build.sh knows it)
#   5. cargo test --test real -- --ignored --test-threads 1 (tests take turns on
#      the one real node)
#   6. tear everything down, always (trap), and fail if the real node left
#      anything behind (process, mount, netns, bridge, iptables rule, cgroup,
#      /var/tmp/tfjob-e2e): cluster.sh down checks and lists it
# Each step's time is printed at the end (docs/run-it-for-real.md quotes them).
#   TFJOB_REAL_KEEP=1      leave the cluster up afterwards (for a look, or `make demo-real`)
#   REAL_TEST_FILTER=xyz   run only the tests matching xyz
set -euo pipefail
export LOG_TAG=test-real
# shellcheck source=e2e/lib.sh
source "$(dirname "$0")/lib.sh"
export TFJOB_CLUSTER_DIR TFJOB_CACHE_DIR
((EUID == 0)) || die "the real node runs containerd, a kubelet and iptables: run as root"

TIMES=()
step() {
  local what="$1" start=$SECONDS
  shift
  log "$what"
  "$@"
  TIMES+=("$(printf '%-44s %4d s' "$what" $((SECONDS - start)))")
  # Beside the tools' builds, so a timed cold run (e2e/first-hour.sh) keeps it.
  record_build "test-real: $what" $((SECONDS - start)) 0 /dev/null
}

# shellcheck disable=SC2329 # the EXIT trap calls it
teardown() {
  local rc=$?
  trap - EXIT INT TERM
  if ((rc != 0)) && [[ -d "$TFJOB_CLUSTER_DIR/logs" ]]; then
    log "failed (exit $rc): component logs are in $TFJOB_CLUSTER_DIR/logs (kept after down)"
  fi
  if [[ "${TFJOB_REAL_KEEP:-0}" == 1 ]]; then
    log "TFJOB_REAL_KEEP=1: the cluster stays up (e2e/cluster.sh down stops it)"
  else
    local start=$SECONDS
    bash "$E2E_DIR/cluster.sh" down || rc=1
    TIMES+=("$(printf '%-44s %4d s' "cluster.sh down (and the leftover check)" $((SECONDS - start)))")
  fi
  log "times:"
  printf '  %s\n' "${TIMES[@]}" >&2
  exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

import_images() {
  local images=(curl operator) img
  # The TensorFlow image, once e2e/images/build.sh can build it (tests/real/training.rs).
  grep -q '^    tensorflow)' "$E2E_DIR/images/build.sh" && images+=(tensorflow)
  for img in "${images[@]}"; do
    local start=$SECONDS
    bash "$E2E_DIR/images/build.sh" "$img" --import
    TIMES+=("$(printf '%-44s %4d s' "  image $img (build or reuse, import)" $((SECONDS - start)))")
  done
}

step "tools (control plane, Helm)" bash "$E2E_DIR/tools.sh" core helm
step "tools (real node)" bash "$E2E_DIR/real-node/tools.sh"
# Kubeflow's training-operator, which tests/real/switch.rs switches from.
step "tools (training-operator)" env TRAINING_OPERATOR_VERSION="$KUBEFLOW_TRAINING_OPERATOR_VERSION" bash "$E2E_DIR/peers.sh"
TFJOB_E2E_TRAINING_OPERATOR="$(TRAINING_OPERATOR_VERSION="$KUBEFLOW_TRAINING_OPERATOR_VERSION" bash "$E2E_DIR/peers.sh" --dir)/bin/training-operator.v1"
export TFJOB_E2E_TRAINING_OPERATOR
step "operator image (make image)" make -C "$REPO_DIR" --no-print-directory image
if cluster_is_up; then bash "$E2E_DIR/cluster.sh" down; fi
step "cluster.sh up --real-node" bash "$E2E_DIR/cluster.sh" up --real-node
step "images" import_images
cd "$REPO_DIR"
step "cargo test --test real" cargo test --test real -- --ignored --test-threads 1 ${REAL_TEST_FILTER:+"$REAL_TEST_FILTER"}
