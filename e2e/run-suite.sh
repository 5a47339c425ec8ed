#!/usr/bin/env bash
# The end-to-end suite, as `make e2e` and CI run it:
#   1. prove the harness restarts cleanly: up, down (no leaked process or port), via check-cycle.sh
#   2. start a fresh local control plane
#   3. cargo test --test e2e -- --ignored   (all e2e tests, in parallel, one namespace each)
#   4. tear the cluster down, always (trap), even when a test or step 1/2 failed
# The exit code is the tests' (or the first failing step's).
set -euo pipefail
export LOG_TAG=e2e
# shellcheck source=e2e/lib.sh
source "$(dirname "$0")/lib.sh"
export TFJOB_CLUSTER_DIR TFJOB_CACHE_DIR
# Tests mostly wait on the cluster, not the CPU: more threads than cores is right.
E2E_TEST_THREADS="${E2E_TEST_THREADS:-8}"

# shellcheck disable=SC2329 # the EXIT trap calls it
teardown() {
  local rc=$?
  trap - EXIT INT TERM
  if ((rc != 0)) && [[ -d "$TFJOB_CLUSTER_DIR/logs" ]]; then
    log "failed (exit $rc): component logs are in $TFJOB_CLUSTER_DIR/logs (kept after down)"
  fi
  bash "$E2E_DIR/cluster.sh" down || rc=1
  exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

main() {
  local start=$SECONDS up_done
  # A fresh cluster: whatever ran from this dir before goes first.
  bash "$E2E_DIR/cluster.sh" down
  bash "$E2E_DIR/check-cycle.sh"
  bash "$E2E_DIR/cluster.sh" up
  up_done=$SECONDS

  cd "$REPO_DIR"
  log "running the e2e tests (--test-threads=$E2E_TEST_THREADS)"
  cargo test --test e2e -- --ignored --test-threads="$E2E_TEST_THREADS"
  log "e2e: cycle check + cluster-up $((up_done - start)) s, tests $((SECONDS - up_done)) s"
}

# One line: bash has read the whole script before it runs.
main "$@"; exit $?
