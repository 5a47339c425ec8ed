#!/usr/bin/env bash
# `make bench-scale` (issue #19, point 3): the e2e bench (benches/e2e/) run
# once per size, on one fresh local control plane of its own
# (target/bench/scale-cluster, torn down by a trap), then
# e2e/scale/report.py checks every run, fits the growth and draws the curves.
#
# Series (SCALE_SERIES, comma-separated; default all four):
#   jobs     SCALE_JOBS jobs × (1 Chief + 1 PS + 2 Workers)   default "50 200 1000"
#   big      one job × (1 Chief + SCALE_WORKERS Workers)      default "100 500 2000"
#            (5,000 is not a default: on one cluster with the bare client after
#            ours, kube-apiserver was OOM-killed at 12 GB on this 2-core,
#            23 GiB machine; docs/scale.md, "5,000 workers", says how to run it)
#   noise    SCALE_NOISE_JOBS (200) jobs with SCALE_NOISE unrelated Pods present
#                                                             default "0 5000"
#   restart  fleet restart (point 6): SCALE_RESTART_JOBS (default 1000) jobs
#            brought to Running by one operator, then a second one started on them
# Peers: SCALE_PEERS (default ours-default,raw) at every size, and
# training-operator at its defaults at SCALE_TO_AT sizes of the jobs series
# (default "200"; empty for none).
# The defaults are sized to finish on the project's 2-core machine (issue #29
# point 12): every series ran in 31 minutes on 2026-11-27 (docs/scale.md); the larger
# sizes measured before (2,000 jobs, 20,000 unrelated Pods, a fleet restart
# of 2,000, training-operator at 1,000 jobs) are opt-in:
#   SCALE_JOBS="50 200 1000 2000" SCALE_NOISE="0 5000 20000" SCALE_TO_AT="200 1000" \
#     SCALE_RESTART_JOBS=2000 make bench-scale
# A quick subset for a busy machine:
#   SCALE_JOBS="50 200" SCALE_WORKERS="100 500" SCALE_NOISE="0 5000" SCALE_TO_AT= \
#     SCALE_RESTART_JOBS=200 make bench-scale
# and to add a size to earlier results: SCALE_KEEP=1 SCALE_SERIES=jobs SCALE_JOBS=1000 ...
#
# SCALE_RECORD=<name> keeps the results, with where they came from, in
# benches/results/<name>.json (one file for the invocation; every run carries
# its series and size), from which `make results-tables` renders docs/scale.md's
# tables and `e2e/scale/report.py benches/results/<name>.json --plots docs/scale`
# draws its plots.
#
# Results: target/bench/scale/<series>-<size>.json (the bench's e2e.json of
# that size) and logs/, then report.py writes target/bench/scale/scale.json,
# the tables (stdout and target/bench/scale/scale.md) and the PNGs
# (SCALE_PLOTS_DIR, default docs/scale/). Exits non-zero when any run failed,
# timed out, created a duplicate or met an API error other than 409/429.
set -euo pipefail
LOG_TAG=bench-scale
source "$(dirname "$0")/lib.sh"

export TFJOB_CLUSTER_DIR="${BENCH_CLUSTER_DIR:-$REPO_DIR/target/bench/scale-cluster}"
export TFJOB_AUDIT=1
# 20,000 unrelated Pods + 8,000 of ours do not fit 4 nodes × 3,000.
export TFJOB_NODE_PODS="${TFJOB_NODE_PODS:-8000}"
# Optional (see docs/scale.md, "What bounds each size"): the scheduler's client
# QPS (default 50), which bounds how fast any Pod is bound to a node.
export TFJOB_SCHEDULER_QPS="${SCALE_SCHEDULER_QPS:-}"

SERIES="${SCALE_SERIES:-jobs,big,noise,restart}"
JOBS_SIZES="${SCALE_JOBS-50 200 1000}"
WORKER_SIZES="${SCALE_WORKERS-100 500 2000}"
NOISE_SIZES="${SCALE_NOISE-0 5000}"
NOISE_JOBS="${SCALE_NOISE_JOBS:-200}"
PEERS="${SCALE_PEERS:-ours-default,raw}"
TO_AT="${SCALE_TO_AT-200}"
RESTART_JOBS="${SCALE_RESTART_JOBS:-1000}"
OUT="$REPO_DIR/target/bench/scale"

has_series() { [[ ",$SERIES," == *",$1,"* ]]; }

cd "$REPO_DIR"
mkdir -p "$OUT"
# shellcheck source=e2e/record.sh
source "$E2E_DIR/record.sh"
[[ -z "${SCALE_RECORD:-}" ]] || record_check_name "$SCALE_RECORD" || exit 1
# The commit measured (the tree built now) and the load before.
record_begin
if [[ -n "$TO_AT" ]] && has_series jobs; then bash "$E2E_DIR/peers.sh"; fi
BENCH_KUBEFLOW_DIR="$(bash "$E2E_DIR/peers.sh" --dir)"
export BENCH_KUBEFLOW_DIR TFJOB_CACHE_DIR

# Built once and copied aside, as e2e/bench.sh does (a shared CARGO_TARGET_DIR
# may be rebuilt by another worktree mid-run).
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
# SCALE_BENCH_BIN: an e2e bench binary built already (skips the build).
bench_bin="${SCALE_BENCH_BIN:-}"
if [[ -z "$bench_bin" ]]; then
  bench_bin=$(cargo bench --bench e2e --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"target":{[^}]*"name":"e2e".*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
fi
[[ -x "$bench_bin" ]] || die "could not build benches/e2e/ (try: cargo bench --bench e2e --no-run)"
[[ "$bench_bin" -ef target/bench/scale-e2e-bench ]] || cp "$bench_bin" target/bench/scale-e2e-bench

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

failed=0
# run SERIES SIZE WORKLOAD PEERS [ENV=VALUE...]: one invocation of the bench.
run() {
  local series="$1" size="$2" workload="$3" peers="$4"
  shift 4
  # A phase may take longer than the bench's 600 s default at the big sizes:
  # 1 s per 10 Pods on top, so a hung run still ends.
  log "$series $size: $workload × $peers"
  if ! env "$@" BENCH_WORKLOADS="$workload" BENCH_PEERS="$peers" \
    target/bench/scale-e2e-bench >"$OUT/$series-$size.md"; then
    log "$series $size: the bench exited non-zero"
    failed=1
  fi
  if [[ -f target/bench/e2e.json ]]; then
    mv target/bench/e2e.json "$OUT/$series-$size.json"
    rm -rf "$OUT/logs-$series-$size" && cp -r target/bench/logs "$OUT/logs-$series-$size"
  else
    failed=1
  fi
}

# SCALE_KEEP=1 keeps the results of earlier runs (to add sizes to a series).
[[ "${SCALE_KEEP:-0}" == 1 ]] || rm -f "$OUT"/*.json "$OUT"/*.md
if has_series jobs; then
  for n in $JOBS_SIZES; do
    peers="$PEERS"
    [[ " $TO_AT " == *" $n "* ]] && peers="training-operator-default,$peers"
    run jobs "$n" jobs "$peers" BENCH_JOBS="$n" BENCH_PHASE_TIMEOUT=$((600 + n * 4 / 10))
  done
fi
if has_series big; then
  for n in $WORKER_SIZES; do
    run big "$n" big "$PEERS" BENCH_BIG_WORKERS="$n" BENCH_PHASE_TIMEOUT=$((600 + n / 10))
  done
fi
# Last: the unrelated Pods stay (the bench creates the missing ones only).
if has_series noise; then
  for n in $NOISE_SIZES; do
    run noise "$n" noise "$PEERS" BENCH_JOBS="$NOISE_JOBS" BENCH_NOISE_PODS="$n" \
      BENCH_PHASE_TIMEOUT=$((600 + n / 10))
  done
fi
if has_series restart; then
  if ! "$E2E_DIR/scale/venv.sh" "$E2E_DIR/scale/restart.py" --jobs "$RESTART_JOBS" \
    --operator "$BENCH_OPERATOR_BIN" --cluster-dir "$TFJOB_CLUSTER_DIR" \
    --kubectl "$(bin_dir)/kubectl" --out "$OUT/restart-$RESTART_JOBS.json"; then
    failed=1
  fi
fi

"$E2E_DIR/scale/venv.sh" "$E2E_DIR/scale/report.py" "$OUT" \
  --plots "${SCALE_PLOTS_DIR:-$REPO_DIR/docs/scale}" | tee "$OUT/scale.md" || failed=1
((failed == 0)) || die "at least one run failed (see above and $OUT; nothing recorded)"
if [[ -n "${SCALE_RECORD:-}" ]]; then
  record_write "$SCALE_RECORD" "make bench-scale" 'SCALE|BENCH' scale "$OUT"
fi
