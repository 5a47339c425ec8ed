#!/usr/bin/env bash
# Runs the operator under `perf record` (Debian's `linux-perf`), as a drop-in
# BENCH_OPERATOR_BIN for benches/e2e/ (hack/profile/cpu.sh sets it up):
#   PERF_OPERATOR_BIN=target/profile/tfjob-operator PERF_OUT=target/profile/perf.data \
#   BENCH_OPERATOR_BIN=$PWD/hack/profile/perf-operator.sh ... bash e2e/bench.sh
# perf attaches to the operator's pid (all its threads) and samples on-CPU
# time (`cpu-clock`: the VM has no hardware counters) with DWARF unwinding, so
# the release profile's line tables are enough and no frame pointers are
# needed. The bench stops its peer with SIGTERM: it goes to the operator, and
# perf is stopped once the operator has exited, so it writes a whole file.
# (The CPU and RSS the bench reports for this peer are the wrapper's: read
# only the profile.)
set -euo pipefail
: "${PERF_OPERATOR_BIN:?the operator binary to profile}"
: "${PERF_OUT:?where perf writes its data}"
"$PERF_OPERATOR_BIN" "$@" &
op=$!
# 999 Hz: ~1,000 samples per CPU-second of the operator; 32 KB of stack per
# sample is deep enough for tokio + hyper + our reconcile.
perf record -e cpu-clock -F "${PERF_FREQ:-999}" --call-graph "dwarf,${PERF_STACK:-32768}" \
  -p "$op" -o "$PERF_OUT" 2>"$PERF_OUT.log" &
pp=$!
stop() {
  kill -TERM "$op" 2>/dev/null || true
}
trap stop TERM INT
wait "$op" || wait "$op" || true
kill -INT "$pp" 2>/dev/null || true
wait "$pp" || true
