#!/usr/bin/env bash
# `make demo`: build the operator, start the local control plane, install the
# CRD, run the operator, apply every job in examples/ and show their progress
# live. Leaves the cluster and the operator running for exploration.
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
log "building the operator (cargo build; the first build takes a few minutes)"
cargo build --quiet --bin tfjob-operator
BIN="$CARGO_TARGET_DIR/debug/tfjob-operator"

bash "$E2E_DIR/tools.sh"
bash "$E2E_DIR/cluster.sh" up
# shellcheck disable=SC1091
source "$D/env"

log "installing the TFJob CRD"
"$BIN" crd | kubectl apply --server-side --force-conflicts -f - >/dev/null
# (`kubectl wait` fails outright while the CRD has no conditions yet.)
for _ in $(seq 300); do
  [[ "$(kubectl get crd tfjobs.kubeflow.org -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}')" == True ]] && break
  sleep 0.2
done

stop_operator
log "starting the operator (log: $D/logs/operator.log)"
mkdir -p "$D/logs" "$D/pids"
setsid "$BIN" run --leader-elect=false \
  --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 127.0.0.1:0 \
  >>"$D/logs/operator.log" 2>&1 </dev/null &
echo $! >"$D/pids/operator.pid"

kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl delete tfjobs --all -n "$NS" --wait=true >/dev/null 2>&1 || true
log "applying examples/*.yaml to namespace $NS"
kubectl apply -n "$NS" -f examples/

python3 "$E2E_DIR/demo_watch.py" "$NS"

cat <<TXT

The cluster and the operator are still running. Explore:
  source $D/env          # KUBECONFIG and the matching kubectl/helm on PATH
  kubectl get tfjobs,pods,services -n $NS
  kubectl describe tfjob -n $NS <name>
  tail -f $D/logs/operator.log
Stop everything:
  make demo-down
TXT
