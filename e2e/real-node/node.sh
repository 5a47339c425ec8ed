#!/usr/bin/env bash
# One real Node beside the KWOK nodes of the local control plane: a kubelet
# with Debian's containerd and runc, bridge CNI, kube-proxy and CoreDNS, all
# on this machine, modelled on Kubernetes' hack/local-up-cluster.sh.
#
#   node.sh up       start it (the control plane of $TFJOB_CLUSTER_DIR must be up)
#   node.sh down     stop it and remove every trace: processes, Pods and their
#                    network namespaces and mounts, the bridge, the iptables
#                    rules (ours and kube-proxy's), the cgroups, its state and
#                    /var/tmp/tfjob-e2e; then verify and list anything left
#   node.sh status   which of its processes run
#   node.sh import <image.tar>   import an image archive into its containerd
#
# Node name real-node-0, IP 10.88.0.1 (the bridge tfjob0), label and taint
# e2e.tfjob-operator.local/real-node=true(:NoSchedule): KWOK leaves it alone
# (cluster.sh starts KWOK with a selector excluding the label), and only Pods
# that tolerate the taint land on it. One real node per machine (fixed bridge,
# node IP and kubelet port 10250): `up` refuses if another cluster dir has it.
#
# State lives in $TFJOB_CLUSTER_DIR/real-node/ (containerd's root and state,
# kubelet's root dir, configs, certificates); logs in $TFJOB_CLUSTER_DIR/logs/.
# Images are never pulled: the sandbox image is imported at `up`, every other
# image is imported by e2e/images/build.sh before use.
set -euo pipefail
export LOG_TAG=real-node
# shellcheck source=e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source=e2e/real-node/network.env
source "$E2E_DIR/real-node/network.env"
# shellcheck source=e2e/real-node/versions.env
source "$E2E_DIR/real-node/versions.env"

mkdir -p "$TFJOB_CLUSTER_DIR"
D="$(cd "$TFJOB_CLUSTER_DIR" && pwd)"
R="$D/real-node"
PKI="$D/pki"
CTR_SOCK="$R/containerd.sock"
CGROUP_ROOT=/tfjob-real-node
# Who holds the machine's one real node: the cluster dir that started it.
OWNER_FILE=/run/tfjob-real-node.owner
# Shutdown order (reverse for start).
COMPONENTS=(kubelet kube-proxy coredns apiserver-relay containerd)

# ---------------------------------------------------------------- processes (as in cluster.sh)

# pid_of, is_ours, start_component, stop_component, fail_start and wait_for:
# e2e/lib.sh, for the real node's components (pid files in $R/pids).
COMPONENTS_HOME="$R"
stop_after_failed_start() {
  log "stopping the real node"
  cmd_down || true
}

kubectl_admin() { "$BIN/kubectl" --kubeconfig "$D/kubeconfig" "$@"; }
crictl_node() { "$RBIN/crictl" --runtime-endpoint "unix://$CTR_SOCK" --image-endpoint "unix://$CTR_SOCK" --timeout 20s "$@"; }
ctr_node() { ctr --address "$CTR_SOCK" --namespace k8s.io "$@"; }
# The network namespaces on the machine (containerd 1.6 keeps Pods' in
# /var/run/netns). Nothing creates that directory until the first one: on a
# fresh machine it is absent, and the list is empty (`find` on a missing
# directory fails, and under pipefail so would the list, and `up`).
NETNS_DIR=/var/run/netns
netns_list() {
  [[ -d "$NETNS_DIR" ]] || return 0
  find "$NETNS_DIR" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort
}

# ---------------------------------------------------------------- identities

# A client certificate signed by the cluster's CA, and a kubeconfig using it
# that reaches the API server on 127.0.0.1 (the node's processes run on the host).
identity() {
  local name="$1" subj="$2"
  openssl genrsa -out "$R/pki/$name.key" 2048 2>/dev/null
  openssl req -new -key "$R/pki/$name.key" -subj "$subj" -out "$R/pki/$name.csr" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >"$R/pki/$name.ext"
  openssl x509 -req -in "$R/pki/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 30 -extfile "$R/pki/$name.ext" -out "$R/pki/$name.crt" 2>/dev/null
  cat >"$R/kubeconfigs/$name" <<KC
apiVersion: v1
kind: Config
clusters:
- name: tfjob-e2e
  cluster: {server: "https://127.0.0.1:$APISERVER_PORT", certificate-authority: "$PKI/ca.crt"}
users:
- name: $name
  user: {client-certificate: "$R/pki/$name.crt", client-key: "$R/pki/$name.key"}
contexts:
- name: tfjob-e2e
  context: {cluster: tfjob-e2e, user: $name}
current-context: tfjob-e2e
KC
}

# ---------------------------------------------------------------- host setup

# The bridge exists before the kubelet starts, so --node-ip is a local address
# (the CNI bridge plugin finds it there and reuses it).
setup_bridge() {
  ip link add "$BRIDGE" type bridge
  ip addr add "$NODE_IP/${POD_CIDR#*/}" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  sysctl -qw "net.ipv6.conf.$BRIDGE.disable_ipv6=1" || true
  # Service traffic between two Pods on the bridge must cross iptables (kube-proxy's DNAT).
  modprobe br_netfilter 2>/dev/null || true
  sysctl -qw net.bridge.bridge-nf-call-iptables=1
  # DNAT from a Pod to another Pod through a Service is forwarded across the
  # bridge: the kernel must forward. What may be forwarded is network.sh's rules.
  sysctl -qw net.ipv4.ip_forward=1
}

write_cni_config() {
  mkdir -p "$R/cni/net.d"
  cat >"$R/cni/net.d/10-tfjob0.conflist" <<CNI
{
  "cniVersion": "0.4.0",
  "name": "tfjob0",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "isDefaultGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$R/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$NODE_IP"}]],
        "routes": [{"dst": "$SERVICE_CIDR"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
CNI
}

write_containerd_config() {
  cat >"$R/containerd.toml" <<TOML
version = 2
root = "$R/containerd/root"
state = "$R/containerd/state"
[grpc]
  address = "$CTR_SOCK"
[ttrpc]
  address = "$CTR_SOCK.ttrpc"
[debug]
  level = "info"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$R/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$SANDBOX_IMAGE"
  # No CAP_SYS_RESOURCE in this sandbox: without this runc fails with
  # "can't get final child's PID from pipe" when it lowers a container's oom_score_adj.
  restrict_oom_score_adj = true
  enable_selinux = false
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$R/cni/net.d"
    max_conf_num = 1
TOML
}

write_kubelet_config() {
  : >"$R/resolv.conf" # Pods with dnsPolicy Default get no upstream resolver either
  cat >"$R/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
containerRuntimeEndpoint: unix://$CTR_SOCK
imageServiceEndpoint: unix://$CTR_SOCK
# cgroup v1 hierarchies here, writable; no systemd.
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
failCgroupV1: false
failSwapOn: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$PKI/ca.crt"}
authorization: {mode: Webhook}
clusterDomain: $CLUSTER_DOMAIN
clusterDNS: [$NODE_IP]
resolvConf: $R/resolv.conf
podLogsDir: $R/pod-logs
registerWithTaints:
- {key: $NODE_LABEL, value: "true", effect: NoSchedule}
# The disk is shared and nearly full: no image garbage collection (it would
# delete imported images, which are never pulled back), eviction on memory only.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "200Mi"}
maxPods: 60
serializeImagePulls: false
shutdownGracePeriod: 0s
YAML
}

# The cgroup root under every v1 hierarchy (the kubelet checks it exists).
make_cgroup_root() {
  local h
  for h in /sys/fs/cgroup/*/; do
    [[ -L "${h%/}" ]] && continue
    mkdir -p "$h${CGROUP_ROOT#/}" 2>/dev/null || true
  done
}

# Depth first: a cgroup is removed after its children; processes are gone by then.
remove_cgroups() {
  local h
  for h in /sys/fs/cgroup/*/; do
    [[ -L "${h%/}" && ! -d "$h${CGROUP_ROOT#/}" ]] && continue
    [[ -d "$h${CGROUP_ROOT#/}" ]] || continue
    find "$h${CGROUP_ROOT#/}" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
}

leftover_cgroups() {
  local h
  for h in /sys/fs/cgroup/*/; do
    [[ -L "${h%/}" ]] && continue
    [[ -d "$h${CGROUP_ROOT#/}" ]] && echo "cgroup $h${CGROUP_ROOT#/}"
  done
  return 0
}

# ---------------------------------------------------------------- the API server's side

# Pods reach the API server through the `kubernetes` Service (10.0.0.1:443,
# which in-cluster clients use): its EndpointSlice points at a relay on the
# node's address, since the API server listens on 127.0.0.1 only. The API
# server does not maintain that Service's endpoints here (--endpoint-reconciler-type none).
publish_apiserver() {
  kubectl_admin apply -f - >/dev/null <<YAML
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kubernetes-real-node
  namespace: default
  labels:
    kubernetes.io/service-name: kubernetes
    endpointslice.kubernetes.io/managed-by: e2e.tfjob-operator.local
addressType: IPv4
endpoints:
- addresses: ["$NODE_IP"]
  conditions: {ready: true}
ports:
- {name: https, port: $APISERVER_RELAY_PORT, protocol: TCP}
YAML
}

# CoreDNS reads Services, EndpointSlices and Namespaces (and Pods: `pods insecure`).
coredns_rbac() {
  kubectl_admin apply -f - >/dev/null <<YAML
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "e2e:coredns"}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "e2e:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "e2e:coredns"}
subjects:
- {kind: User, name: "e2e:coredns", apiGroup: rbac.authorization.k8s.io}
YAML
}

# shellcheck disable=SC2329 # called through wait_for
node_ready() {
  [[ "$(kubectl_admin get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" == True ]]
}

# shellcheck disable=SC2329 # called through wait_for
node_has_ip() {
  [[ "$(kubectl_admin get node "$NODE_NAME" -o 'jsonpath={.status.addresses[?(@.type=="InternalIP")].address}')" == "$NODE_IP" ]]
}

# shellcheck disable=SC2329 # called through wait_for
proxy_synced() { iptables -w 5 -t nat -S KUBE-SERVICES 2>/dev/null | grep -q 'default/kubernetes:https'; }

# ---------------------------------------------------------------- commands

cmd_up() {
  [[ -f "$D/ports" && -f "$D/kubeconfig" ]] || die "no control plane in $D: run e2e/cluster.sh up first"
  # shellcheck source=/dev/null
  source "$D/ports"
  if [[ -f "$OWNER_FILE" ]] && [[ "$(cat "$OWNER_FILE")" != "$D" ]] && ip link show "$BRIDGE" >/dev/null 2>&1; then
    die "the machine's real node is already up, from $(cat "$OWNER_FILE") (one per machine: bridge $BRIDGE, port 10250)"
  fi
  if ip link show "$BRIDGE" >/dev/null 2>&1 || is_ours kubelet; then
    log "a previous real node is still here: taking it down first"
    cmd_down
  fi
  bash "$E2E_DIR/real-node/tools.sh"
  RBIN=$(bash "$E2E_DIR/real-node/tools.sh" --bin-dir)
  local start=$SECONDS
  echo "$D" >"$OWNER_FILE"
  rm -rf "$R" && mkdir -p "$R/pki" "$R/kubeconfigs" "$R/pod-logs" "$D/logs"
  netns_list >"$R/netns.before"

  log "building (or reusing) the sandbox image"
  SANDBOX_IMAGE=$(bash "$E2E_DIR/images/build.sh" sandbox --print-ref)
  identity kubelet "/O=system:nodes/CN=system:node:$NODE_NAME"
  identity kube-proxy "/CN=system:kube-proxy"
  identity coredns "/CN=e2e:coredns"
  setup_bridge
  write_cni_config
  write_containerd_config
  write_kubelet_config
  make_cgroup_root
  bash "$E2E_DIR/real-node/network.sh" install

  log "starting containerd $(containerd --version | awk '{print $3}') (socket $CTR_SOCK)"
  start_component containerd containerd --config "$R/containerd.toml"
  wait_for 60 containerd crictl_node info
  bash "$E2E_DIR/images/build.sh" sandbox --import >/dev/null
  bash "$E2E_DIR/images/build.sh" busybox --import >/dev/null

  log "starting the API server relay on $NODE_IP:$APISERVER_RELAY_PORT and publishing it as the kubernetes Service's endpoint"
  start_component apiserver-relay socat -lf "$R/relay.log" \
    "TCP-LISTEN:$APISERVER_RELAY_PORT,bind=$NODE_IP,reuseaddr,fork" "TCP:127.0.0.1:$APISERVER_PORT"
  publish_apiserver

  log "starting kubelet $REAL_NODE_KUBE_VERSION as node $NODE_NAME ($NODE_IP)"
  start_component kubelet "$RBIN/kubelet" --config "$R/kubelet.yaml" \
    --kubeconfig "$R/kubeconfigs/kubelet" --root-dir "$R/kubelet" --cert-dir "$R/kubelet/pki" \
    --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" \
    --node-labels "$NODE_LABEL=true"
  # kube-proxy waits (30 s) for its Node to exist, and exits when the Node's
  # IPs change after it started (a DaemonSet would restart it): the kubelet
  # registers the Node with its InternalIP first.
  wait_for 120 kubelet node_has_ip
  log "starting kube-proxy"
  cat >"$R/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "$R/kubeconfigs/kube-proxy"}
hostnameOverride: $NODE_NAME
mode: iptables
clusterCIDR: $POD_CIDR
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: ["$NODE_IP/32"]
iptables: {localhostNodePorts: false}
# Leave the host's conntrack sysctls alone (not writable here).
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
YAML
  start_component kube-proxy "$RBIN/kube-proxy" --config "$R/kube-proxy.yaml"
  wait_for 60 kube-proxy proxy_synced
  # kube-proxy puts its jumps first in INPUT/FORWARD/OUTPUT: ours go back on top.
  bash "$E2E_DIR/real-node/network.sh" install

  log "starting CoreDNS $COREDNS_VERSION on $NODE_IP:53 (zone $CLUSTER_DOMAIN only, no upstream)"
  coredns_rbac
  cat >"$R/Corefile" <<COREFILE
.:53 {
    bind $NODE_IP
    errors
    health 127.0.0.1:10254
    ready 127.0.0.1:10255
    kubernetes $CLUSTER_DOMAIN in-addr.arpa ip6.arpa {
        kubeconfig $R/kubeconfigs/coredns tfjob-e2e
        pods insecure
    }
    cache 30
}
COREFILE
  start_component coredns "$RBIN/coredns" -conf "$R/Corefile"
  wait_for 60 coredns curl -fsS http://127.0.0.1:10255/ready
  wait_for 120 kubelet node_ready

  bash "$E2E_DIR/real-node/network.sh" check >/dev/null
  cat >"$R/env" <<ENV
# source this file: the real node started by e2e/real-node/node.sh
export TFJOB_REAL_NODE=1
export REAL_NODE_NAME=$NODE_NAME
export REAL_NODE_IP=$NODE_IP
export REAL_NODE_CONTAINERD_SOCK=$CTR_SOCK
export REAL_NODE_CONTAINERD_LOG=$D/logs/containerd.log
export REAL_NODE_POD_LOGS=$R/pod-logs
export REAL_NODE_BIN=$RBIN
export REAL_NODE_SANDBOX_IMAGE=$SANDBOX_IMAGE
ENV
  log "real node $NODE_NAME Ready in $((SECONDS - start)) s (kubelet $REAL_NODE_KUBE_VERSION, containerd $(containerd --version | awk '{print $3}'))"
}

# The KUBE-* chains kube-proxy --cleanup leaves: the kubelet's own
# (KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT, KUBE-FIREWALL and its jumps from
# INPUT/OUTPUT), in every table, IPv4 and IPv6. On this machine nothing else
# makes KUBE-* chains: the real node is the only kubelet.
remove_kube_chains() {
  local cmd table rule chain
  for cmd in iptables ip6tables; do
    for table in filter nat mangle; do
      $cmd -w 5 -t "$table" -S 2>/dev/null | grep -E '^-A [A-Z]+ .*-j KUBE-' | while read -r rule; do
        # shellcheck disable=SC2086 # a rule is words
        $cmd -w 5 -t "$table" -D ${rule#-A } 2>/dev/null || true
      done || true
      for chain in $($cmd -w 5 -t "$table" -S 2>/dev/null | sed -n 's/^-N \(KUBE-[A-Z0-9-]*\)$/\1/p'); do
        $cmd -w 5 -t "$table" -F "$chain" 2>/dev/null || true
      done
      for chain in $($cmd -w 5 -t "$table" -S 2>/dev/null | sed -n 's/^-N \(KUBE-[A-Z0-9-]*\)$/\1/p'); do
        $cmd -w 5 -t "$table" -X "$chain" 2>/dev/null || true
      done
    done
  done
}

# Everything a real node may leave behind, one line each; nothing means clean.
leftovers() {
  local c
  for c in "${COMPONENTS[@]}"; do is_ours "$c" && echo "process $c (pid $(pid_of "$c"))"; done
  # Shims and containers started by our containerd.
  pgrep -af "containerd-shim.*$CTR_SOCK|$R/" 2>/dev/null | grep -v "^$$ " | sed 's/^/process /' || true
  ip link show "$BRIDGE" >/dev/null 2>&1 && echo "bridge $BRIDGE"
  # Captured, not piped into `grep -q`: under pipefail an early grep exit fails the pipe.
  local out
  out=$(ip -o link show master "$BRIDGE" 2>/dev/null || true)
  if [[ -n "$out" ]]; then echo "veth on $BRIDGE"; fi
  { grep -F -e " $R/" -e " $HOSTPATH_DIR" /proc/self/mountinfo || true; } | awk '{print "mount " $5}'
  if [[ -f "$R/netns.before" ]]; then
    comm -13 "$R/netns.before" <(netns_list) | sed 's/^/netns /'
  fi
  bash "$E2E_DIR/real-node/network.sh" leftovers
  local cmd table
  for cmd in iptables ip6tables; do
    for table in filter nat mangle; do
      out=$($cmd -w 5 -t "$table" -S 2>/dev/null || true)
      if [[ "$out" == *"-N KUBE-"* ]]; then echo "$cmd -t $table: KUBE-* chains (kube-proxy's or the kubelet's)"; fi
    done
  done
  leftover_cgroups
  if [[ -e "$HOSTPATH_DIR" ]]; then echo "dir $HOSTPATH_DIR"; fi
  return 0
}

cmd_down() {
  [[ -d "$R" ]] || ip link show "$BRIDGE" >/dev/null 2>&1 || { log "no real node in $D"; return 0; }
  RBIN=$(bash "$E2E_DIR/real-node/tools.sh" --bin-dir)
  log "stopping the real node"
  stop_component kubelet 20
  # Every Pod sandbox, so containerd tears down their networks (CNI DEL:
  # veth, IP) and network namespaces before it stops.
  if is_ours containerd; then
    crictl_node rmp --all --force >/dev/null 2>&1 || true
    # What the CRI could not remove (a Pod half-created).
    local t
    for t in $(ctr_node tasks ls -q 2>/dev/null); do ctr_node tasks kill -s KILL "$t" >/dev/null 2>&1 || true; done
    sleep 1
    crictl_node rmp --all --force >/dev/null 2>&1 || true
  fi
  stop_component coredns 10
  stop_component apiserver-relay 5
  stop_component kube-proxy 10
  stop_component containerd 20
  # Shims outlive containerd by design; ours go too.
  local p
  for p in $(pgrep -f "containerd-shim.*$CTR_SOCK" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
  if [[ -x "$RBIN/kube-proxy" ]]; then "$RBIN/kube-proxy" --cleanup >/dev/null 2>&1 || true; fi
  remove_kube_chains
  bash "$E2E_DIR/real-node/network.sh" remove
  ip link delete "$BRIDGE" 2>/dev/null || true
  # Mounts under our state (overlay rootfs, shm, netns bind mounts, volumes), deepest first.
  local m
  { grep -F -e " $R/" -e " $HOSTPATH_DIR" /proc/self/mountinfo || true; } | awk '{print $5}' | sort -r \
    | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  if [[ -f "$R/netns.before" ]]; then
    for m in $(comm -13 "$R/netns.before" <(netns_list)); do
      umount "/var/run/netns/$m" 2>/dev/null || true
      rm -f "/var/run/netns/$m"
    done
  fi
  remove_cgroups
  rm -rf "$HOSTPATH_DIR"
  local left
  left=$(leftovers)
  if [[ -n "$left" ]]; then
    log "the real node left these behind:"
    echo "$left" >&2
    return 1
  fi
  rm -rf "$R"
  [[ "$(cat "$OWNER_FILE" 2>/dev/null)" == "$D" ]] && rm -f "$OWNER_FILE"
  log "real node stopped; nothing left behind (processes, mounts, netns, bridge, iptables, cgroups, $HOSTPATH_DIR)"
}

cmd_status() {
  local c rc=0
  for c in "${COMPONENTS[@]}"; do
    if is_ours "$c"; then printf '%-24s running  pid %s\n' "$c" "$(pid_of "$c")"; else printf '%-24s STOPPED\n' "$c"; rc=1; fi
  done
  return $rc
}

# Sourced (e2e/selftest.sh): the functions only.
[[ "${BASH_SOURCE[0]}" == "$0" ]] || return 0

BIN="$(bin_dir)"
case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  leftovers) leftovers ;;
  import) ctr_node images import "${2:?usage: node.sh import <image.tar>}" ;;
  *) die "usage: node.sh up|down|status|leftovers|import <image.tar>" ;;
esac
