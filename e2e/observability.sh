#!/usr/bin/env bash
# `make test-observability`: the operator as its users monitor it. Runs the
# e2e tests in tests/e2e/observability.rs against this worktree's local
# control plane: each starts an operator with --metrics-secure, has a real
# Prometheus (built by e2e/tools.sh) scrape it over https with a token bound to
# `system:monitoring` while TFJobs succeed, restart, fail and are deleted,
# then checks
#   - /metrics against the committed list docs/metrics.md (name, type, labels),
#   - that every query of the chart's Grafana dashboard returns data,
#   - that every alert rule of the chart evaluates without error,
#   - traces in a real Jaeger (tests/e2e/observability/traces*): their shape,
#     https with a CA the test mints (and a logged TLS failure without it),
#     and the chart's sampling ratio 0 and 1,
# and draws the dashboard's main panels from that Prometheus into
# $TFJOB_CLUSTER_DIR/dashboard/ (e2e/dashboard/; `make dashboard-pictures`
# draws them into docs/dashboard/ instead).
# Uses the running cluster if there is one (and leaves it up); otherwise
# starts one and tears it down afterwards, even on failure.
set -euo pipefail
export LOG_TAG=observability
# shellcheck source=e2e/lib.sh
source "$(dirname "$0")/lib.sh"
export TFJOB_CLUSTER_DIR TFJOB_CACHE_DIR
export TFJOB_DASHBOARD_PICTURES="${TFJOB_DASHBOARD_PICTURES:-$TFJOB_CLUSTER_DIR/dashboard}"

main() {
  local start=$SECONDS
  run_e2e_on_a_cluster observability::
  log "done in $((SECONDS - start)) s"
}

# One line: bash has read the whole script before it runs.
main "$@"; exit $?
