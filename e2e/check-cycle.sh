#!/usr/bin/env bash
# Checks that `cluster.sh up && cluster.sh down && cluster.sh up` works ($1 rounds, default 1): after
# `down`, none of the processes `up` started is alive and none of its ports is
# still bound, so the next `up` starts clean. Leaves no cluster running.
# Run by e2e/run-suite.sh (so by `make e2e` and CI); also fine on its own.
set -euo pipefail
export LOG_TAG=cycle
# shellcheck source=e2e/lib.sh
source "$(dirname "$0")/lib.sh"
export TFJOB_CLUSTER_DIR TFJOB_CACHE_DIR
D="$TFJOB_CLUSTER_DIR"

check_clean() {
  local pid port bad=0
  for pid in $1; do
    if kill -0 "$pid" 2>/dev/null; then log "leaked process $pid: $(tr '\0' ' ' </proc/"$pid"/cmdline)"; bad=1; fi
  done
  for port in $2; do
    if ss -Htanl "sport = :$port" | grep -q .; then log "port $port still bound"; bad=1; fi
  done
  return $bad
}

main() {
  local round pids ports
  for round in $(seq "${1:-1}"); do
    bash "$E2E_DIR/cluster.sh" up >/dev/null
    pids=$(cat "$D"/pids/*.pid | tr '\n' ' ')
    ports=$(cut -d= -f2 "$D/ports" | tr '\n' ' ')
    [[ $(wc -w <<<"$pids") -eq 5 ]] || die "round $round: expected 5 components, got pids: $pids"
    bash "$E2E_DIR/cluster.sh" status >/dev/null || die "round $round: status reports a stopped component"
    bash "$E2E_DIR/cluster.sh" down
    check_clean "$pids" "$ports" || die "round $round: 'down' leaked processes or ports"
    log "round $round: up and down left no process (pids $pids) and no port ($ports) behind"
  done
}

# One line: bash has read the whole script before it runs.
main "$@"; exit $?
