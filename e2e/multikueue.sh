#!/usr/bin/env bash
# MultiKueue across two local control planes on this machine: a manager and a
# worker, each an e2e/cluster.sh cluster with its own directory and ports, each
# with real Kueue (e2e/kueue.sh): the manager in mode `manager` (MultiKueue with
# the generic adapter for TFJob.v1.kubeflow.org), the worker in mode `workload`.
# Our operator runs on both (tests/e2e/multikueue.rs starts it, --kueue=workload):
# on the manager it only makes and finishes the dispatched job's Workload, on
# the worker it adopts MultiKueue's prebuilt Workload and runs the job.
#
#   multikueue.sh up         start both clusters and Kueues, connect them
#   multikueue.sh down       stop everything `up` started (logs stay)
#   multikueue.sh cut        stop the manager's way to the worker (the proxy below):
#                            to the manager's Kueue the worker is gone; the worker runs on
#   multikueue.sh reconnect  start the proxy again, on the same port
#   multikueue.sh status     what runs
#   multikueue.sh test       tests/e2e/multikueue.rs against the running setup, else
#                            against a fresh one torn down afterwards (make e2e-multikueue)
#
# State: $TFJOB_MULTIKUEUE_DIR (default <repo>/.cluster-multikueue, gitignored):
#   manager/, worker/   each cluster's TFJOB_CLUSTER_DIR (kubeconfig, logs/, kueue/)
#   worker-kubeconfig   what the manager's Kueue uses to reach the worker (also in
#                       the Secret kueue-system/worker-kubeconfig on the manager)
#   proxy.pid, proxy.port, logs/proxy.log
#
# The manager's Kueue reaches the worker's API server through a TCP proxy
# (socat) on 127.0.0.1, so a test can take the worker away from the manager
# (`cut`) without stopping the worker: a fault injected from outside, as
# docs/reliability.md wants. The kubeconfig carries its certificates inline:
# Kueue refuses file paths in a MultiKueue kubeconfig (validateKubeconfig in
# pkg/controller/admissionchecks/multikueue/multikueuecluster.go).
#
# On the manager, `up` creates the MultiKueue objects every test shares:
# MultiKueueCluster `worker` (its kubeconfig from the Secret), MultiKueueConfig
# `multikueue` listing it, and AdmissionCheck `multikueue` (controllerName
# kueue.x-k8s.io/multikueue). A test's ClusterQueue on the manager names that
# check; its LocalQueue exists under the same name on both clusters.
set -euo pipefail
export LOG_TAG=multikueue
# shellcheck source=e2e/lib.sh
source "$(dirname "$0")/lib.sh"

BASE="${TFJOB_MULTIKUEUE_DIR:-$REPO_DIR/.cluster-multikueue}"
mkdir -p "$BASE/logs"
BASE="$(cd "$BASE" && pwd)"
MANAGER="$BASE/manager"
WORKER="$BASE/worker"
PROXY_PID="$BASE/proxy.pid"
PROXY_LOG="$BASE/logs/proxy.log"

on() { # on manager|worker <script> <args...>
  local dir
  dir=$([[ "$1" == manager ]] && echo "$MANAGER" || echo "$WORKER")
  shift
  TFJOB_CLUSTER_DIR="$dir" bash "$E2E_DIR/$1" "${@:2}"
}
kubectl_on() { # kubectl_on manager|worker <kubectl args...>
  local dir
  dir=$([[ "$1" == manager ]] && echo "$MANAGER" || echo "$WORKER")
  shift
  "$(bin_dir)/kubectl" --kubeconfig "$dir/kubeconfig" "$@"
}

# ---------------------------------------------------------------- the proxy

proxy_is_ours() {
  local pid
  pid=$(cat "$PROXY_PID" 2>/dev/null || true)
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "TCP-LISTEN:$(cat "$BASE/proxy.port")"
}

proxy_start() {
  local port target
  port=$(cat "$BASE/proxy.port")
  target=$(sed -n 's/^APISERVER_PORT=//p' "$WORKER/ports")
  # The manager reaches the worker through socat (Debian's package).
  command -v socat >/dev/null || apt_install socat
  # shellcheck disable=SC2016 # $$, $0 and $@ belong to the inner shell
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "$PROXY_PID" \
    socat "TCP-LISTEN:$port,bind=127.0.0.1,reuseaddr,fork" "TCP:127.0.0.1:$target" \
    >>"$PROXY_LOG" 2>&1 </dev/null &
  local deadline=$((SECONDS + 10))
  until port_in_use "$port"; do
    ((SECONDS < deadline)) || die "the proxy did not listen on 127.0.0.1:$port (log: $PROXY_LOG)"
    sleep 0.1
  done
}

proxy_stop() {
  proxy_is_ours 2>/dev/null || { rm -f "$PROXY_PID"; return 0; }
  local pid
  pid=$(cat "$PROXY_PID")
  # Its forked children carry the open connections: the whole group goes.
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 10))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
  kill -KILL -- "-$pid" 2>/dev/null || true
  rm -f "$PROXY_PID"
}

# ---------------------------------------------------------------- the connection

# The worker's admin kubeconfig, through the proxy, certificates inline.
write_worker_kubeconfig() {
  local pki="$WORKER/pki" port
  port=$(cat "$BASE/proxy.port")
  cat >"$BASE/worker-kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: worker
  cluster:
    server: https://127.0.0.1:$port
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
users:
- name: multikueue
  user:
    client-certificate-data: $(base64 -w0 "$pki/admin.crt")
    client-key-data: $(base64 -w0 "$pki/admin.key")
contexts:
- name: worker
  context:
    cluster: worker
    user: multikueue
current-context: worker
EOF
  chmod 600 "$BASE/worker-kubeconfig"
}

connect() {
  kubectl_on manager -n kueue-system create secret generic worker-kubeconfig \
    --from-file=kubeconfig="$BASE/worker-kubeconfig" --dry-run=client -o yaml \
    | kubectl_on manager apply -f - >/dev/null
  kubectl_on manager apply -f - >/dev/null <<EOF
apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueCluster
metadata:
  name: worker
spec:
  clusterSource:
    kubeConfig:
      locationType: Secret
      location: worker-kubeconfig
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueConfig
metadata:
  name: multikueue
spec:
  clusters:
  - worker
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata:
  name: multikueue
spec:
  controllerName: kueue.x-k8s.io/multikueue
  parameters:
    apiGroup: kueue.x-k8s.io
    kind: MultiKueueConfig
    name: multikueue
EOF
  wait_condition multikueuecluster/worker Active 60
  wait_condition admissioncheck/multikueue Active 30
}

wait_condition() {
  local object="$1" type="$2" timeout="$3" deadline
  deadline=$((SECONDS + timeout))
  until [[ "$(kubectl_on manager get "$object" \
    -o "jsonpath={.status.conditions[?(@.type==\"$type\")].status}" 2>/dev/null)" == True ]]; do
    if ((SECONDS >= deadline)); then
      kubectl_on manager get "$object" -o yaml >&2 || true
      die "$object not $type after ${timeout}s (Kueue's log: $MANAGER/logs/kueue.log)"
    fi
    sleep 0.5
  done
}

# ---------------------------------------------------------------- commands

cmd_down() {
  proxy_stop
  local c
  for c in manager worker; do
    if [[ -d "$BASE/$c" ]]; then
      on "$c" kueue.sh down || true
      on "$c" cluster.sh down || true
    fi
  done
  rm -f "$BASE/worker-kubeconfig" "$BASE/proxy.port"
}

cmd_up() {
  local start=$SECONDS
  cmd_down
  trap 'report_failure; if ((BASHPID == $$)); then log "multikueue.sh up failed: stopping what was started"; cmd_down; fi' ERR
  log "starting the manager and the worker control planes"
  on manager cluster.sh up >/dev/null
  on worker cluster.sh up >/dev/null
  local c
  for c in manager worker; do
    kubectl_on "$c" apply --server-side --force-conflicts -f "$REPO_DIR/crds/kubeflow.org_tfjobs.yaml" >/dev/null
  done
  TFJOB_KUEUE_MODE=workload on worker kueue.sh up
  TFJOB_KUEUE_MODE=manager on manager kueue.sh up
  # shellcheck disable=SC2034 # read by pick_port (lib.sh)
  PICKED=()
  pick_port >"$BASE/proxy.port"
  proxy_start
  write_worker_kubeconfig
  connect
  trap report_failure ERR
  log "MultiKueue up in $((SECONDS - start)) s: manager $MANAGER, worker $WORKER (through 127.0.0.1:$(cat "$BASE/proxy.port"))"
}

cmd_cut() {
  [[ -f "$BASE/proxy.port" ]] || die "no MultiKueue setup in $BASE (run: e2e/multikueue.sh up)"
  proxy_stop
  log "the worker is cut off from the manager"
}

cmd_reconnect() {
  [[ -f "$BASE/proxy.port" ]] || die "no MultiKueue setup in $BASE (run: e2e/multikueue.sh up)"
  proxy_is_ours || proxy_start
  log "the worker is reachable from the manager again"
}

cmd_status() {
  local c rc=0
  for c in manager worker; do
    echo "== $c ($BASE/$c)"
    on "$c" cluster.sh status || rc=1
    on "$c" kueue.sh status || rc=1
  done
  if proxy_is_ours 2>/dev/null; then
    echo "proxy running  127.0.0.1:$(cat "$BASE/proxy.port") -> the worker's API server"
  else
    echo "proxy STOPPED (the worker is cut off from the manager)"
    rc=1
  fi
  return $rc
}

is_up() {
  [[ -f "$BASE/proxy.port" ]] && proxy_is_ours 2>/dev/null \
    && kubectl_on manager --request-timeout=5s get --raw /readyz >/dev/null 2>&1 \
    && kubectl_on worker --request-timeout=5s get --raw /readyz >/dev/null 2>&1
}

cmd_test() {
  local start=$SECONDS
  if is_up; then
    log "using the running setup in $BASE"
  else
    trap cmd_down EXIT
    cmd_up
  fi
  cd "$REPO_DIR"
  TFJOB_E2E_MULTIKUEUE=1 TFJOB_MULTIKUEUE_DIR="$BASE" cargo test --test e2e -- --ignored multikueue::
  log "MultiKueue e2e done in $((SECONDS - start)) s"
}

main() {
  case "${1:-}" in
    test) cmd_test ;;
    up) cmd_up ;;
    down) cmd_down ;;
    cut) cmd_cut ;;
    reconnect) cmd_reconnect ;;
    status) cmd_status ;;
    *) die "usage: multikueue.sh up|down|cut|reconnect|status|test" ;;
  esac
}

# One line: bash has read the whole script before it runs.
main "$@"; exit $?
