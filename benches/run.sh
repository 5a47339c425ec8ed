#!/usr/bin/env bash
# Benchmark runner: builds the Go peers into the cache, then runs each Rust
# bench with its peer so every ratio comes from one run on one machine.
# Usage: benches/run.sh   (or `make bench`). Env: BENCH_N, BENCH_REPS.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE_DIR="${TFJOB_CACHE_DIR:-$HOME/.cache/tfjob-operator}"
BIN_DIR="$CACHE_DIR/bench-bin"
mkdir -p "$BIN_DIR" target/bench

echo "==> building the client-go workqueue peer"
(cd benches/go-workqueue && go build -o "$BIN_DIR/go-workqueue" .)

echo "==> workqueue: ours vs client-go"
GO_WORKQUEUE_BIN="$BIN_DIR/go-workqueue" cargo bench --quiet --bench workqueue
