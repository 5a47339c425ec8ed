#!/usr/bin/env bash
# The local Kubernetes control plane for tests: real etcd, kube-apiserver,
# kube-controller-manager and kube-scheduler, with KWOK playing the kubelet on
# fake nodes. Everything listens on 127.0.0.1 only, on free ports.
#
#   cluster.sh up [--real-node]    start (fresh data); if this dir's cluster is running, say so.
#                                  --real-node (or TFJOB_REAL_NODE=1) adds one real Node beside the
#                                  KWOK nodes: kubelet + containerd + CNI + kube-proxy + CoreDNS
#                                  (e2e/real-node/node.sh; one per machine, needs root)
#   cluster.sh down                stop what `up` started (pid files), remove state, keep logs/
#   cluster.sh restart <component> [--alone]
#                                  stop and start one component in place (same ports, same data);
#                                  after apiserver or etcd, also restarts their clients, Kueue among
#                                  them when it runs (not with --alone)
#   cluster.sh status              which components run, on which ports
#
# State lives in $TFJOB_CLUSTER_DIR (default <repo>/.cluster, gitignored):
#   kubeconfig  admin kubeconfig        env      `source` it: KUBECONFIG, PATH, ETCD_URL, ...
#   pki/        CA, serving and client certificates (X.509 v3: kube-rs refuses v1)
#   logs/       one log per component    pids/    one pid file per component
#   data/etcd   etcd's data              ports    the ports chosen at `up`
#
# The API server writes an audit log to logs/audit.log (policy: audit_flags).
# Opt-in: TFJOB_AUDIT=1 at `up` (make bench-e2e sets it) also signs a client
# identity `bench-peer` (kubeconfigs/bench-peer, system:masters) whose every
# request the log records: the benchmark counts a peer's API requests there
# (apiserver_request_total has no per-client label).
# TFJOB_APISERVER_INFLIGHT=N at `up` sets the API server's --max-requests-inflight
# to N and --max-mutating-requests-inflight to N/2 (default 400 + 200 seats for
# API Priority and Fairness to share out); TFJOB_SCHEDULER_QPS sets the
# scheduler's client QPS (burst twice that).
set -euo pipefail
export LOG_TAG=cluster
# shellcheck source=e2e/lib.sh
source "$(dirname "$0")/lib.sh"

# Absolute, because pid ownership is checked against the path in each
# component's command line.
mkdir -p "$TFJOB_CLUSTER_DIR"
D="$(cd "$TFJOB_CLUSTER_DIR" && pwd)"
PKI="$D/pki"
# restart and status act on the cluster `up` started, whatever KUBE_VERSION
# says now (`up` records it in the env file).
if [[ "${1:-}" != up && -f "$D/env" ]] && grep -q '^export KUBE_VERSION=' "$D/env"; then
  KUBE_VERSION=$(sed -n 's/^export KUBE_VERSION=//p' "$D/env")
fi
BIN="$(bin_dir)"
# Shutdown order (reverse for start): the kubelet stand-in and the clients of
# the API server first, etcd last: an API server whose etcd is gone hangs on
# SIGTERM for a long time.
COMPONENTS=(kwok kube-scheduler kube-controller-manager kube-apiserver etcd)
NODES=4
# Pods per fake node; `make bench-scale` raises it for its 20,000 unrelated Pods.
NODE_PODS="${TFJOB_NODE_PODS:-3000}"
# A node with this label is no longer managed by KWOK: see start_kwok.
LOST_NODE_LABEL=e2e.tfjob-operator.local/lost
# The real node (e2e/real-node/): KWOK must never manage it.
REAL_NODE_LABEL=e2e.tfjob-operator.local/real-node

# ---------------------------------------------------------------- processes

# pid_of, is_ours, start_component, stop_component, fail_start and wait_for:
# e2e/lib.sh, for this cluster dir's components (pid files in $D/pids).
COMPONENTS_HOME="$D"
stop_after_failed_start() {
  log "stopping what was started"
  down_quietly
}

# ---------------------------------------------------------------- ports

# port_in_use and pick_port: e2e/lib.sh.

choose_ports() {
  # pick_port runs in a subshell here ($(...)), so its PICKED list cannot
  # keep the five apart: draw again until they are distinct (a CI run once
  # gave etcd and the scheduler the same port).
  while :; do
    ETCD_PORT=$(pick_port)
    ETCD_PEER_PORT=$(pick_port)
    APISERVER_PORT=$(pick_port)
    KCM_PORT=$(pick_port)
    SCHEDULER_PORT=$(pick_port)
    local distinct
    distinct=$(printf '%s\n' "$ETCD_PORT" "$ETCD_PEER_PORT" "$APISERVER_PORT" "$KCM_PORT" "$SCHEDULER_PORT" | sort -u | wc -l)
    ((distinct == 5)) && break
  done
  cat >"$D/ports" <<EOF
ETCD_PORT=$ETCD_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
APISERVER_PORT=$APISERVER_PORT
KCM_PORT=$KCM_PORT
SCHEDULER_PORT=$SCHEDULER_PORT
EOF
}

load_ports() {
  [[ -f "$D/ports" ]] || die "no cluster in $D (run: make cluster-up)"
  # shellcheck source=/dev/null
  source "$D/ports"
}

# ---------------------------------------------------------------- certificates

# Signs $name's key with the CA. The extension file matters: without one,
# `openssl x509 -req` makes an X.509 v1 certificate, which kubectl accepts but
# rustls (kube-rs) refuses with UnsupportedCertVersion.
sign() {
  local name="$1" subj="$2" usage="$3" san="${4:-}"
  openssl genrsa -out "$PKI/$name.key" 2048 2>/dev/null
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$usage"
    [[ -n "$san" ]] && echo "subjectAltName=$san"
  } >"$PKI/$name.ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 365 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

make_pki() {
  mkdir -p "$PKI"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$PKI/ca.key" -out "$PKI/ca.crt" \
    -days 365 -subj "/CN=tfjob-operator-e2e-ca" 2>/dev/null
  sign apiserver "/CN=kube-apiserver" serverAuth \
    "IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  sign admin "/O=system:masters/CN=admin" clientAuth
  # The built-in RBAC roles know these two identities by name.
  sign controller-manager "/CN=system:kube-controller-manager" clientAuth
  sign scheduler "/CN=system:kube-scheduler" clientAuth
  # KWOK stands in for the kubelets of all fake nodes at once (node status,
  # leases, pod status and deletes in every namespace): the Node authorizer's
  # one-node identity does not fit, so it is an admin.
  sign kwok "/O=system:masters/CN=kwok" clientAuth
  # The API server's identity towards kubelets (logs, exec, port-forward on the real node).
  sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
  if [[ "${TFJOB_AUDIT:-0}" == 1 ]]; then sign bench-peer "/O=system:masters/CN=bench-peer" clientAuth; fi
  openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
}

write_kubeconfig() {
  local file="$1" user="$2"
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: tfjob-e2e
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority: $PKI/ca.crt
users:
- name: $user
  user:
    client-certificate: $PKI/$user.crt
    client-key: $PKI/$user.key
contexts:
- name: tfjob-e2e
  context:
    cluster: tfjob-e2e
    user: $user
current-context: tfjob-e2e
EOF
}

write_env() {
  cat >"$D/env" <<EOF
# source this file: the local control plane started by e2e/cluster.sh
export TFJOB_CLUSTER_DIR=$D
export KUBECONFIG=$D/kubeconfig
export PATH=$BIN:\$PATH
export ETCD_URL=http://127.0.0.1:$ETCD_PORT
export KUBE_APISERVER_URL=https://127.0.0.1:$APISERVER_PORT
export KUBE_VERSION=$KUBE_VERSION
EOF
}

# ---------------------------------------------------------------- components

start_etcd() {
  start_component etcd "$BIN/etcd" --name e2e --data-dir "$D/data/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "e2e=http://127.0.0.1:$ETCD_PEER_PORT" \
    --log-level warn --quota-backend-bytes 8589934592
  wait_for 30 etcd curl -fsS "http://127.0.0.1:$ETCD_PORT/health"
}

# shellcheck disable=SC2329 # called through wait_for
admin_curl() {
  curl -fsS --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "https://127.0.0.1:$APISERVER_PORT$1"
}

# The API server's audit log, always on (logs/audit.log, JSON lines, one per
# finished request), so tests can see who wrote what and when independently
# of the operator under test. Metadata level (no bodies), and only:
# - every request of the group tfjob-faults: the operator identities the fault
#   suite mints (tests/faults), so two operator processes can be told apart;
# - creates and deletes of Pods, Services, Namespaces and TFJobs by anyone
#   (a Pod created and deleted between two polls still shows here);
# - with TFJOB_AUDIT=1 (benchmarks), every request of the user bench-peer.
# Everything else (status updates, leases, watches of other clients) is not
# logged: a busy KWOK would otherwise dominate the file.
audit_flags() {
  cat >"$D/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  users: [bench-peer]
- level: Metadata
  userGroups: [tfjob-faults]
- level: Metadata
  verbs: [create, delete, deletecollection]
  resources:
  - {group: "", resources: [pods, services, namespaces]}
  - {group: kubeflow.org, resources: [tfjobs]}
- level: None
EOF
  echo --audit-policy-file "$D/audit-policy.yaml" --audit-log-path "$D/logs/audit.log" --audit-log-maxsize 0
}

# Gang scheduling (KEP-4671): from 1.37 the Workload and PodGroup API
# (scheduling.k8s.io/v1beta1) is beta but off by default. One gate,
# GenericWorkload, turns on its storage in the API server, the PodGroup
# protection controller (and its admission finalizer) in the controller-manager
# and the GangScheduling plugin in the scheduler; the beta API version must
# also be served (--runtime-config). Before 1.37 none of this is set: 1.34 has
# no such API, and the operator must behave as before on it.
workload_api_flags() {
  (($(kube_minor) >= 37)) || return 0
  echo --feature-gates GenericWorkload=true
  if [[ "$1" == kube-apiserver ]]; then echo --runtime-config scheduling.k8s.io/v1beta1=true; fi
}

start_apiserver() {
  # shellcheck disable=SC2046 # audit_flags and workload_api_flags print whole words without spaces in them
  start_component kube-apiserver "$BIN/kube-apiserver" $(audit_flags) $(workload_api_flags kube-apiserver) \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$APISERVER_PORT" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types InternalIP \
    --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-cluster-ip-range 10.0.0.0/24 \
    --authorization-mode Node,RBAC --allow-privileged=true \
    --endpoint-reconciler-type none \
    --watch-cache-sizes 'configmaps#0' \
    --shutdown-watch-termination-grace-period 3s \
    ${TFJOB_APISERVER_INFLIGHT:+--max-requests-inflight "$TFJOB_APISERVER_INFLIGHT" --max-mutating-requests-inflight "$((TFJOB_APISERVER_INFLIGHT / 2))"} \
    --profiling=false
  # Kubelets are reached by IP only: the system resolver knows no node names
  # (the real node's `kubectl logs` would fail on a name lookup).
  # The grace period makes SIGTERM close open watches (the other components
  # and tests hold some): without it the API server waits up to a minute for
  # those connections and `down`/`restart` would end in SIGKILL.
  # ConfigMaps bypass the watch cache (`configmaps#0`): their watches go
  # straight to etcd, so an etcd compaction (support::compact_etcd) makes a
  # ConfigMap watch from an older resourceVersion fail with 410 Gone at once.
  # Cached kinds would keep serving it from the cache's history for minutes.
  # /readyz includes the RBAC bootstrap roles: after it, system:masters and
  # the controller identities are authorised.
  wait_for 90 kube-apiserver admin_curl /readyz
}

start_controller_manager() {
  # shellcheck disable=SC2046 # whole words
  start_component kube-controller-manager "$BIN/kube-controller-manager" $(workload_api_flags kube-controller-manager) \
    --kubeconfig "$D/kubeconfigs/controller-manager" \
    --authentication-kubeconfig "$D/kubeconfigs/controller-manager" \
    --authorization-kubeconfig "$D/kubeconfigs/controller-manager" \
    --bind-address 127.0.0.1 --secure-port "$KCM_PORT" --leader-elect=false \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --use-service-account-credentials=true --controllers '*' \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --service-cluster-ip-range 10.0.0.0/24 \
    --profiling=false
  wait_for 60 kube-controller-manager curl -kfsS "https://127.0.0.1:$KCM_PORT/healthz"
}

start_scheduler() {
  # shellcheck disable=SC2046 # whole words
  start_component kube-scheduler "$BIN/kube-scheduler" $(workload_api_flags kube-scheduler) \
    --kubeconfig "$D/kubeconfigs/scheduler" \
    --authentication-kubeconfig "$D/kubeconfigs/scheduler" \
    --authorization-kubeconfig "$D/kubeconfigs/scheduler" \
    --bind-address 127.0.0.1 --secure-port "$SCHEDULER_PORT" --leader-elect=false \
    --profiling=false ${TFJOB_SCHEDULER_QPS:+--kube-api-qps "$TFJOB_SCHEDULER_QPS" --kube-api-burst "$((TFJOB_SCHEDULER_QPS * 2))"}
  wait_for 60 kube-scheduler curl -kfsS "https://127.0.0.1:$SCHEDULER_PORT/healthz"
}

kubectl_admin() { "$BIN/kubectl" --kubeconfig "$D/kubeconfig" "$@"; }

# shellcheck disable=SC2329 # called through wait_for
nodes_ready() {
  local ready
  ready=$(kubectl_admin get nodes -l type=kwok \
    -o 'jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True)
  ((ready == NODES))
}

create_nodes() {
  local i
  for i in $(seq 0 $((NODES - 1))); do
    cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    type: kwok
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
status:
  # The kubelet's default of 110 pods per node would leave large tests Pending
  # with "Too many pods".
  capacity: {cpu: "1000", memory: 4Ti, pods: "$NODE_PODS"}
  allocatable: {cpu: "1000", memory: 4Ti, pods: "$NODE_PODS"}
---
EOF
  done | kubectl_admin apply -f - >/dev/null
}

start_kwok() {
  # KWOK deletes only terminating Pods, as the kubelet's UID precondition
  # ensures (e2e/kwok/deletes-by-uid.yaml says why); in place before it runs.
  kubectl_admin apply -f "$E2E_DIR/kwok/deletes-by-uid.yaml" >/dev/null
  # A new KWOK instance holds node Leases under a new identity; it manages a
  # node's pods only once it holds that node's Lease. Left over from a previous
  # KWOK (`restart kwok`), the Leases would block it until they expire (40 s).
  local leases=()
  local i
  for i in $(seq 0 $((NODES - 1))); do leases+=("kwok-node-$i"); done
  kubectl_admin -n kube-node-lease delete lease "${leases[@]}" --ignore-not-found >/dev/null
  # KWOK binds no port unless asked (no --server-address): nothing to choose.
  # It manages every node except those labelled lost: labelling a node takes
  # it away as a dead kubelet would (no Lease renewals, so NotReady and the
  # unreachable taints follow; its Pods are never confirmed gone). Nor the
  # real node, whose kubelet is real: KWOK would otherwise fake its Pods as
  # Running with its own IPs.
  start_component kwok "$BIN/kwok" --kubeconfig "$D/kubeconfigs/kwok" \
    --manage-nodes-with-label-selector="!$LOST_NODE_LABEL,!$REAL_NODE_LABEL" \
    --cidr 10.244.0.0/16 --node-ip 127.0.0.1 \
    --node-lease-duration-seconds 40 -c "$D/kwok-stages.yaml"
  wait_for 60 kwok nodes_ready
}

start_one() {
  case "$1" in
    etcd) start_etcd ;;
    kube-apiserver | apiserver) start_apiserver ;;
    kube-controller-manager | controller-manager) start_controller_manager ;;
    kube-scheduler | scheduler) start_scheduler ;;
    kwok) start_kwok ;;
    *) die "unknown component '$1' (one of: ${COMPONENTS[*]})" ;;
  esac
}

canonical() {
  case "$1" in
    apiserver) echo kube-apiserver ;;
    controller-manager) echo kube-controller-manager ;;
    scheduler) echo kube-scheduler ;;
    *) echo "$1" ;;
  esac
}

# ---------------------------------------------------------------- commands

running_components() {
  local c n=0
  for c in "${COMPONENTS[@]}"; do is_ours "$c" && n=$((n + 1)); done
  echo "$n"
}

down_quietly() {
  local c
  for c in "${COMPONENTS[@]}"; do stop_component "$c" 15; done
  # Keep logs/ for a post-mortem; everything else goes.
  rm -rf "$D/data" "$D/pki" "$D/kubeconfigs" "$D/pids" "$D/kubeconfig" "$D/env" "$D/kwok-stages.yaml" "$D/audit-policy.yaml"
}

cmd_down() {
  [[ -d "$D" ]] || { log "no cluster in $D"; return 0; }
  # The real node first: its kubelet is a client of the API server.
  if [[ -d "$D/real-node" ]]; then bash "$E2E_DIR/real-node/node.sh" down; fi
  local ports=""
  [[ -f "$D/ports" ]] && ports=$(cut -d= -f2 "$D/ports" | tr '\n' ' ')
  down_quietly
  rm -f "$D/ports"
  # Prove nothing leaked: no process of ours, none of our ports still bound.
  local p leaked=""
  for p in $ports; do port_in_use "$p" && leaked+=" $p"; done
  [[ -z "$leaked" ]] || die "ports still in use after down:$leaked"
  log "local control plane stopped; data removed (logs kept in $D/logs)"
}

cmd_up() {
  local n real_node="${TFJOB_REAL_NODE:-0}"
  [[ "${1:-}" == --real-node ]] && real_node=1
  n=$(running_components)
  if ((n == ${#COMPONENTS[@]})) && [[ -f "$D/kubeconfig" ]]; then
    log "already running from $D; 'make cluster-down' first for a fresh one"
    if ((real_node)) && ! bash "$E2E_DIR/real-node/node.sh" status >/dev/null 2>&1; then
      bash "$E2E_DIR/real-node/node.sh" up
    fi
    echo "KUBECONFIG=$D/kubeconfig"
    echo "source $D/env   # kubectl/helm on PATH, KUBECONFIG, ETCD_URL, KUBE_APISERVER_URL"
    return 0
  fi
  if ((n > 0)); then
    log "a partial cluster is running from $D ($n of ${#COMPONENTS[@]} components): stopping it first"
  fi
  if [[ -d "$D/real-node" ]]; then bash "$E2E_DIR/real-node/node.sh" down; fi
  down_quietly
  [[ -x "$BIN/kube-apiserver" ]] || bash "$E2E_DIR/tools.sh" core

  local start=$SECONDS
  mkdir -p "$D/data" "$D/kubeconfigs"
  # Logs of the previous run move aside rather than mix with this one's.
  if [[ -d "$D/logs" ]]; then rm -rf "$D/logs.prev" && mv "$D/logs" "$D/logs.prev"; fi
  mkdir -p "$D/logs"
  cp "$E2E_DIR/kwok/stages.yaml" "$D/kwok-stages.yaml"
  choose_ports
  make_pki
  write_kubeconfig "$D/kubeconfig" admin
  write_kubeconfig "$D/kubeconfigs/controller-manager" controller-manager
  write_kubeconfig "$D/kubeconfigs/scheduler" scheduler
  write_kubeconfig "$D/kubeconfigs/kwok" kwok
  if [[ "${TFJOB_AUDIT:-0}" == 1 ]]; then write_kubeconfig "$D/kubeconfigs/bench-peer" bench-peer; fi
  write_env

  log "starting etcd on 127.0.0.1:$ETCD_PORT"
  start_etcd
  log "starting kube-apiserver on 127.0.0.1:$APISERVER_PORT"
  start_apiserver
  log "starting kube-controller-manager and kube-scheduler"
  start_controller_manager
  start_scheduler
  log "creating $NODES fake nodes and starting KWOK"
  create_nodes
  start_kwok
  log "local control plane up in $((SECONDS - start)) s ($KUBE_VERSION, etcd $ETCD_VERSION, KWOK $KWOK_VERSION)"
  if ((real_node)); then
    bash "$E2E_DIR/real-node/node.sh" up
    echo "source $D/real-node/env   # the real node: its containerd socket, image names, logs"
  fi
  echo "KUBECONFIG=$D/kubeconfig"
  echo "source $D/env   # kubectl/helm on PATH, KUBECONFIG, ETCD_URL, KUBE_APISERVER_URL"
}

cmd_restart() {
  local name
  name=$(canonical "${1:?usage: cluster.sh restart <component>}")
  load_ports
  [[ " ${COMPONENTS[*]} " == *" $name "* ]] || die "unknown component '$1' (one of: ${COMPONENTS[*]})"
  log "restarting $name in place"
  stop_component "$name" 20
  start_one "$name"
  log "$name is back"
  # The API server's own clients (KWOK, scheduler, controller-manager) would
  # recover by themselves, but only after client-go's reflector backoff (up to
  # ~30 s, longer if they hit the restarting server's not-yet-synced RBAC):
  # meanwhile no pod would start, finish or be garbage-collected. Restarting
  # them makes the cluster whole again at once. `--alone` skips this.
  if [[ "$name" == kube-apiserver || "$name" == etcd ]] && [[ "${2:-}" != --alone ]]; then
    restart_clients
  fi
}

restart_clients() {
  local c stoppers=()
  log "restarting the API server's clients: kwok, kube-scheduler, kube-controller-manager (and Kueue if it runs)"
  for c in kwok kube-scheduler kube-controller-manager; do
    stop_component "$c" 15 &
    stoppers+=($!)
  done
  # Only these: a bare `wait` would also wait for the components this shell started.
  wait "${stoppers[@]}"
  start_controller_manager
  start_scheduler
  start_kwok
  # Kueue (e2e/kueue.sh), when it runs beside this cluster, is a client too,
  # and the slowest to come back by itself: up to a minute (kueue.sh restart).
  if bash "$E2E_DIR/kueue.sh" status >/dev/null 2>&1; then
    bash "$E2E_DIR/kueue.sh" restart
  fi
  log "clients are back"
}

cmd_status() {
  [[ -f "$D/ports" ]] || { echo "no cluster in $D"; return 1; }
  load_ports
  local c rc=0
  for c in "${COMPONENTS[@]}"; do
    if is_ours "$c"; then
      printf '%-24s running  pid %s\n' "$c" "$(pid_of "$c")"
    else
      printf '%-24s STOPPED\n' "$c"
      rc=1
    fi
  done
  echo "etcd        http://127.0.0.1:$ETCD_PORT"
  echo "apiserver   https://127.0.0.1:$APISERVER_PORT"
  echo "kubeconfig  $D/kubeconfig"
  if [[ -d "$D/real-node" ]]; then bash "$E2E_DIR/real-node/node.sh" status || rc=1; fi
  return $rc
}

main() {
  case "${1:-}" in
    up) cmd_up "${2:-}" ;;
    down) cmd_down ;;
    restart) cmd_restart "${2:-}" "${3:-}" ;;
    status) cmd_status ;;
    *) die "usage: cluster.sh up [--real-node]|down|restart <component>|status" ;;
  esac
}

# One line, so bash has read all of it before running (safe to edit this
# file while a cluster command runs).
main "$@"; exit $?
