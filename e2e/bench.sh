#!/usr/bin/env bash
# `make bench-e2e` (issue #6): starts a fresh local control plane of its own
# (target/bench/cluster, never a developer's .cluster) with the bench-peer
# identity and audit log (TFJOB_AUDIT=1), runs benches/e2e/ (every peer ×
# workload, one operator at a time), and tears the cluster down via trap even
# on failure. The table goes to stdout, the numbers to target/bench/e2e.json.
# Quick run: BENCH_JOBS=50 BENCH_NOISE_PODS=1000 BENCH_BIG_WORKERS=100 make bench-e2e
set -euo pipefail
LOG_TAG=bench
source "$(dirname "$0")/lib.sh"

export TFJOB_CLUSTER_DIR="${BENCH_CLUSTER_DIR:-$REPO_DIR/target/bench/cluster}"
export TFJOB_AUDIT=1
# A smaller API server (fewer seats for APF to share) makes the `*-apf` peers'
# cap bind: BENCH_APISERVER_INFLIGHT=100 leaves their PriorityLevel 1 seat.
export TFJOB_APISERVER_INFLIGHT="${BENCH_APISERVER_INFLIGHT:-}"
BENCH_KUBEFLOW_DIR="$(bash "$E2E_DIR/peers.sh" --dir)"
export BENCH_KUBEFLOW_DIR TFJOB_CACHE_DIR
# The `raw-watching` peer's client-go informers, built only when asked for.
if [[ ",${BENCH_PEERS:-}," == *",raw-watching,"* ]]; then
  BENCH_INFORMERS_BIN="$(bash "$REPO_DIR/benches/client-go-informers/build.sh")"
  export BENCH_INFORMERS_BIN
fi

cd "$REPO_DIR"
mkdir -p target/bench
# shellcheck source=e2e/record.sh
source "$E2E_DIR/record.sh"
[[ -z "${BENCH_RECORD:-}" ]] || record_check_name "$BENCH_RECORD" || exit 1
# The commit measured (the tree built now) and the load before.
record_begin
# Build both binaries first and copy them aside: CARGO_TARGET_DIR may be
# shared with other worktrees, whose builds would replace them mid-run.
if [[ -z "${BENCH_OPERATOR_BIN:-}" ]]; then
  # BENCH_PROFILE: dist (default) is what the container image ships
  # (Cargo.toml: release + fat LTO, one codegen unit); release skips the LTO
  # build (~8 min idle, far longer on a loaded machine) and shares its
  # dependencies with the bench binary's build.
  profile="${BENCH_PROFILE:-dist}"
  cargo build --profile "$profile" --bin tfjob-operator
  cp "${CARGO_TARGET_DIR:-$REPO_DIR/target}/$profile/tfjob-operator" target/bench/tfjob-operator
  export BENCH_OPERATOR_BIN="$REPO_DIR/target/bench/tfjob-operator"
fi
bench_bin=$(cargo bench --bench e2e --no-run --message-format=json 2>/dev/null \
  | sed -n 's/.*"target":{[^}]*"name":"e2e".*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
[[ -x "$bench_bin" ]] || die "could not build benches/e2e/ (try: cargo bench --bench e2e --no-run)"
cp "$bench_bin" target/bench/e2e-bench

teardown() {
  local rc=$?
  trap - EXIT INT TERM
  bash "$E2E_DIR/cluster.sh" down || rc=1
  exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bash "$E2E_DIR/cluster.sh" down
bash "$E2E_DIR/cluster.sh" up
# Exits non-zero when a run is unusable (benches/e2e/verdict.rs): nothing is recorded then.
target/bench/e2e-bench

# BENCH_RECORD=<name>: keep the results, with where they came from, in
# benches/results/<name>.json (benches/results/README.md).
if [[ -n "${BENCH_RECORD:-}" ]]; then
  record_write "$BENCH_RECORD" "make bench-e2e" BENCH e2e target/bench/e2e.json
fi
