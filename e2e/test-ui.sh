#!/usr/bin/env bash
# `make test-ui`: the trace UI (`--trace-ui`) in a real browser. Runs
# tests/e2e/trace_ui.rs against this worktree's local control plane: headless
# Chromium (the Makefile installs Debian's package when missing) opens the
# page, a TFJob is applied, and the page must show its key reaching every
# box of the pipeline in order. Screenshots: $TFJOB_CLUSTER_DIR/trace-ui/.
# Uses the running cluster if there is one (and leaves it up); otherwise
# starts one and tears it down afterwards, even on failure. (`make e2e` runs
# the same test with the rest of the suite.)
set -euo pipefail
export LOG_TAG=test-ui
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
  cargo test --test e2e -- --ignored trace_ui::
  log "done in $((SECONDS - start)) s; screenshots in $TFJOB_CLUSTER_DIR/trace-ui/"
}

# One line: bash has read the whole script before it runs.
main "$@"; exit $?
