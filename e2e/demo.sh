#!/usr/bin/env bash
# `make demo`: build the operator, start the local control plane, install the
# CRD, run the operator, apply every job in examples/ and show their progress
# live, with the trace UI on (--trace-ui: the pipeline, animated, in a
# browser). Leaves the cluster and the operator running for exploration.
#   demo.sh        the demo
#   demo.sh down   stop the operator and the cluster
set -euo pipefail
export LOG_TAG=demo
# shellcheck source=e2e/lib.sh
source "$(dirname "$0")/lib.sh"
export TFJOB_CLUSTER_DIR TFJOB_CACHE_DIR
D="$TFJOB_CLUSTER_DIR"
NS=demo

stop_operator() {
  local pid
  pid=$(cat "$D/pids/operator.pid" 2>/dev/null || true)
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$D/pids/operator.pid"
}

if [[ "${1:-}" == down ]]; then
  stop_operator
  bash "$E2E_DIR/cluster.sh" down
  exit 0
fi

cd "$REPO_DIR"
# Each step's seconds go to $TFJOB_CACHE_DIR/tool-builds.jsonl too
# (record_build, lib.sh): how a cold run's time to the live table is recorded.
demo_start=$SECONDS
# The operator's cargo build and the control plane's Go builds at once, so a
# cold first run keeps both cores busy; the demo needs only the core tools
# (etcd, Kubernetes, KWOK), not the chart's or the observability tests'.
log "building the operator (cargo build, beside the cluster's tools; a first build takes several minutes)"
mkdir -p "$CARGO_TARGET_DIR"
cargo_log="$CARGO_TARGET_DIR/demo-cargo-build.log"
with_progress "building the operator (cargo build)" "$cargo_log" cargo build --bin tfjob-operator &
cargo_pid=$!
# A failing tools build ends the demo: the cargo build (with_progress's
# child) goes with it.
trap 'pkill -TERM -P "$cargo_pid" 2>/dev/null; kill "$cargo_pid" 2>/dev/null || true' EXIT
bash "$E2E_DIR/tools.sh" core
wait "$cargo_pid" || die "the operator did not build (cargo build --bin tfjob-operator: its last lines above, full log $cargo_log)"
trap - EXIT
BIN="$CARGO_TARGET_DIR/debug/tfjob-operator"
record_build "demo: the operator and the core tools built" $((SECONDS - demo_start)) 0 /dev/null

step_start=$SECONDS
bash "$E2E_DIR/cluster.sh" up
record_build "demo: cluster.sh up" $((SECONDS - step_start)) 0 /dev/null
# shellcheck disable=SC1091
source "$D/env"

log "installing the TFJob CRD"
"$BIN" crd | kubectl apply --server-side --force-conflicts -f - >/dev/null
# (`kubectl wait` fails outright while the CRD has no conditions yet, and so
# does the jsonpath filter: its complaint is not news, so it goes nowhere.)
for _ in $(seq 300); do
  [[ "$(kubectl get crd tfjobs.kubeflow.org -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" == True ]] && break
  sleep 0.2
done

stop_operator
log "starting the operator (log: $D/logs/operator.log)"
mkdir -p "$D/logs" "$D/pids"
# TRACE_UI_ADDR picks the page's address (default: a free loopback port).
# On a first run there is no log yet: nothing to skip (a `<` redirection of a
# missing file fails before a `2>/dev/null` after it applies, and says so).
log_lines_before=0
if [[ -f "$D/logs/operator.log" ]]; then log_lines_before=$(wc -l <"$D/logs/operator.log"); fi
setsid "$BIN" run --leader-elect=false \
  --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 127.0.0.1:0 \
  --trace-ui "${TRACE_UI_ADDR:-127.0.0.1:0}" \
  >>"$D/logs/operator.log" 2>&1 </dev/null &
echo $! >"$D/pids/operator.pid"
# The operator logs the page's address once it is bound.
UI_URL=
for _ in $(seq 100); do
  UI_URL=$(tail -n +"$((log_lines_before + 1))" "$D/logs/operator.log" \
    | sed -n 's/.*serving the trace UI url=\(http[^ ]*\).*/\1/p' | head -n 1)
  [[ -n "$UI_URL" ]] && break
  kill -0 "$(cat "$D/pids/operator.pid")" 2>/dev/null || die "the operator exited: see $D/logs/operator.log"
  sleep 0.1
done
[[ -n "$UI_URL" ]] || die "the operator did not report its trace UI address: see $D/logs/operator.log"
log "the pipeline, live: open $UI_URL"
if [[ -t 1 ]]; then
  log "applying the examples in 5 s: open the page now to watch them arrive"
  sleep 5
fi

kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl delete tfjobs --all -n "$NS" --wait=true >/dev/null 2>&1 || true
log "applying examples/*.yaml to namespace $NS"
kubectl apply -n "$NS" -f examples/

log "the live table, $((SECONDS - demo_start)) s after the demo started:"
record_build "demo: start to the live table" $((SECONDS - demo_start)) 0 /dev/null
python3 "$E2E_DIR/demo_watch.py" "$NS"

cat <<TXT

The cluster and the operator are still running. Explore:
  source $D/env          # KUBECONFIG and the matching kubectl/helm on PATH
  kubectl get tfjobs,pods,services -n $NS
  kubectl describe tfjob -n $NS <name>
  kubectl delete tfjob -n $NS tfjob-simple && kubectl apply -n $NS -f examples/tfjob-simple.yaml
                         # ...and watch it pass through the page's boxes
  tail -f $D/logs/operator.log

open $UI_URL — the pipeline, live; stop everything with: make demo-down
TXT
