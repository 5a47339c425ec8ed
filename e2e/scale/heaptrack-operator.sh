#!/usr/bin/env bash
# Runs the operator under heaptrack (Debian's `heaptrack` package), as a
# drop-in BENCH_OPERATOR_BIN for benches/e2e/, to see where its heap goes:
#   HEAPTRACK_OPERATOR_BIN=target/bench/tfjob-operator HEAPTRACK_OUT=target/bench/heap \
#   BENCH_OPERATOR_BIN=$PWD/e2e/scale/heaptrack-operator.sh BENCH_PEERS=ours-default \
#   BENCH_WORKLOADS=jobs BENCH_JOBS=1000 target/bench/scale-e2e-bench
#   heaptrack --analyze target/bench/heap.<pid>.zst | less
# The bench stops its peer with SIGTERM: it is passed on to the operator, so
# heaptrack writes its file. (Its RSS and CPU figures are the profiler's, not
# the operator's: read only the profile.)
set -euo pipefail
: "${HEAPTRACK_OPERATOR_BIN:?the operator binary to profile}"
heaptrack -o "${HEAPTRACK_OUT:-heaptrack.tfjob-operator}" "$HEAPTRACK_OPERATOR_BIN" "$@" &
hp=$!
forward() {
  local child
  # Only the operator: heaptrack's interpreter is a child too, and must
  # live on to write the file.
  child=$(pgrep -P "$hp" -x "$(basename "$HEAPTRACK_OPERATOR_BIN" | cut -c1-15)" || true)
  [[ -n "$child" ]] && kill -TERM "$child"
}
trap forward TERM INT
wait "$hp" || wait "$hp"
