#!/usr/bin/env bash
# `make dashboard-pictures`: regenerates docs/dashboard/*.png, the main panels
# of the chart's Grafana dashboard drawn from a real Prometheus that scraped a
# real operator through the e2e workload of tests/e2e/observability.rs (jobs
# that succeed, restart, fail and are deleted). Uses the running cluster if
# there is one (and leaves it up); otherwise starts one and tears it down
# afterwards, even on failure. Commit the pictures that changed.
set -euo pipefail
export LOG_TAG=dashboard-pictures
# shellcheck source=e2e/lib.sh
source "$(dirname "$0")/lib.sh"
export TFJOB_CLUSTER_DIR TFJOB_CACHE_DIR
export TFJOB_DASHBOARD_PICTURES="$REPO_DIR/docs/dashboard"

main() {
  local start=$SECONDS
  run_e2e_on_a_cluster observability::every_dashboard_query_and_alert_rule_evaluates_on_a_real_scrape
  log "done in $((SECONDS - start)) s; pictures in $TFJOB_DASHBOARD_PICTURES/"
}

# One line: bash has read the whole script before it runs.
main "$@"; exit $?
