#!/usr/bin/env bash
# Benchmark runner: builds the Go peers into the cache, then runs each Rust
# bench with its peer so every ratio comes from one run on one machine.
# Usage: benches/run.sh   (or `make bench`). Env: BENCH_N, BENCH_REPS (workqueue);
# BENCH_PODS, BENCH_REPS, BENCH_RATE, BENCH_SECONDS, BENCH_SKIP_CLUSTER,
# BENCH_CLUSTER_DOWN (memory, sync, latency; see each bench's header).
# BENCH_SUITES: which to run, comma-separated (default
# workqueue,memory,sync,latency), e.g. BENCH_SUITES=sync to settle one figure.
# BENCH_RECORD=<name>: after every bench passed, keep target/bench/{workqueue,
# memory,sync,latency}.json with the commit, command, machine and date in
# benches/results/<name>.json (benches/results/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=e2e/record.sh
source e2e/record.sh
[[ -z "${BENCH_RECORD:-}" ]] || record_check_name "$BENCH_RECORD" || exit 1
# The commit measured (the tree built now) and the load before.
record_begin

CACHE_DIR="${TFJOB_CACHE_DIR:-$HOME/.cache/tfjob-operator}"
BIN_DIR="$CACHE_DIR/bench-bin"
mkdir -p "$BIN_DIR" target/bench
# A recorded file holds only what this invocation measured.
rm -f target/bench/{workqueue,memory,sync,latency}.json
SUITES=",${BENCH_SUITES:-workqueue,memory,sync,latency},"
for suite in ${SUITES//,/ }; do
  case "$suite" in
    workqueue | memory | sync | latency) ;;
    *) echo "BENCH_SUITES: unknown benchmark '$suite' (one of workqueue, memory, sync, latency)" >&2; exit 2 ;;
  esac
done
runs() { [[ "$SUITES" == *",$1,"* ]]; }

if runs workqueue; then
  echo "==> building the client-go workqueue peer"
  (cd benches/go-workqueue && go build -o "$BIN_DIR/go-workqueue" .)
  echo "==> workqueue: ours vs client-go"
  GO_WORKQUEUE_BIN="$BIN_DIR/go-workqueue" cargo bench --quiet --bench workqueue
fi

if runs memory; then
  echo "==> memory per cached Pod: ours vs kube-runtime (no cluster)"
  cargo bench --quiet --bench memory
fi

# Benchmarks 3 and 4 need an API server: a private local control plane of
# their own (never a developer's .cluster), left running for the next run
# unless BENCH_CLUSTER_DOWN=1. BENCH_SKIP_CLUSTER=1 skips both.
if [[ -z "${BENCH_SKIP_CLUSTER:-}" ]] && { runs sync || runs latency; }; then
  echo "==> building the client-go informer peer"
  (cd benches/go-informer && go build -o "$BIN_DIR/go-informer" .)
  export TFJOB_CLUSTER_DIR="$CACHE_DIR/bench-cluster"
  bash e2e/tools.sh core
  bash e2e/cluster.sh up
  export KUBECONFIG="$TFJOB_CLUSTER_DIR/kubeconfig"

  if runs sync; then
    echo "==> initial sync of ${BENCH_PODS:-10000} Pods: ours vs kube-runtime vs client-go"
    GO_INFORMER_BIN="$BIN_DIR/go-informer" cargo bench --quiet --bench sync
  fi
  if runs latency; then
    echo "==> event-to-reconcile latency at ${BENCH_RATE:-200} events/s"
    cargo bench --quiet --bench latency
  fi

  if [[ -n "${BENCH_CLUSTER_DOWN:-}" ]]; then bash e2e/cluster.sh down; fi
fi

if [[ -n "${BENCH_RECORD:-}" ]]; then
  record_write "$BENCH_RECORD" "make bench" BENCH bench target/bench
fi
