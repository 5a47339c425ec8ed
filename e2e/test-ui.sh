#!/usr/bin/env bash
# `make test-ui`: the trace UI (`--trace-ui`) in a real browser. Runs
# tests/e2e/trace_ui.rs against this worktree's local control plane: headless
# Chromium (the Makefile installs Debian's package when missing) opens the
# page, a TFJob is applied, and the page must show its key reaching every
# box of the pipeline in order. Screenshots: $TFJOB_CLUSTER_DIR/trace-ui/.
# Uses the running cluster if there is one (and leaves it up); otherwise
# starts one and tears it down afterwards, even on failure. (`make e2e` runs
# the same test with the rest of the suite, without redrawing the picture.)
# It redraws docs/trace-ui.png (TFJOB_TRACE_UI_PICTURE), marked with the
# page's fingerprint, which `cargo test --test docs` compares with the page:
# commit the picture when it changed.
set -euo pipefail
export LOG_TAG=test-ui
# shellcheck source=e2e/lib.sh
source "$(dirname "$0")/lib.sh"
export TFJOB_CLUSTER_DIR TFJOB_CACHE_DIR
export TFJOB_TRACE_UI_PICTURE=${TFJOB_TRACE_UI_PICTURE:-$REPO_DIR/docs/trace-ui.png}

main() {
  local start=$SECONDS
  run_e2e_on_a_cluster trace_ui::
  log "done in $((SECONDS - start)) s; screenshots in $TFJOB_CLUSTER_DIR/trace-ui/, the docs' picture in $TFJOB_TRACE_UI_PICTURE"
}

# One line: bash has read the whole script before it runs.
main "$@"; exit $?
