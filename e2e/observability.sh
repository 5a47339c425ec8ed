#!/usr/bin/env bash
# `make test-observability`: the operator as its users monitor it. Runs the
# e2e tests in tests/e2e/observability.rs against this worktree's local
# control plane: each starts an operator, has a real Prometheus (built by
# e2e/tools.sh) scrape it while TFJobs succeed, restart, fail and are deleted,
# then checks
#   - /metrics against the committed list docs/metrics.md (name, type, labels),
#   - that every query of the chart's Grafana dashboard returns data,
#   - that every alert rule of the chart evaluates without error.
# Uses the running cluster if there is one (and leaves it up); otherwise
# starts one and tears it down afterwards, even on failure.
set -euo pipefail
export LOG_TAG=observability
# shellcheck source=e2e/lib.sh
source "$(dirname "$0")/lib.sh"
export TFJOB_CLUSTER_DIR TFJOB_CACHE_DIR

cluster_is_up() {
  [[ -f "$TFJOB_CLUSTER_DIR/kubeconfig" ]] &&
    "$(bin_dir)/kubectl" --kubeconfig "$TFJOB_CLUSTER_DIR/kubeconfig" --request-timeout=5s \
      get --raw /readyz >/dev/null 2>&1
}

main() {
  local start=$SECONDS
  if cluster_is_up; then
    log "using the running cluster in $TFJOB_CLUSTER_DIR"
  else
    # shellcheck disable=SC2064 # expand now: the path is fixed
    trap "bash '$E2E_DIR/cluster.sh' down" EXIT
    bash "$E2E_DIR/cluster.sh" up
  fi
  cd "$REPO_DIR"
  cargo test --test e2e -- --ignored observability::
  log "done in $((SECONDS - start)) s"
}

# One line: bash has read the whole script before it runs.
main "$@"; exit $?
