#!/usr/bin/env bash
# Builds (or installs, or reuses from the cache) everything the real node runs
# (e2e/real-node/node.sh):
#   kubelet, kube-proxy   from k8s.io/kubernetes via the wrapper module e2e/k8s/$REAL_NODE_KUBE_VERSION
#                         (go build, version-stamped like the control plane; ~5-10 min cold on 2 cores)
#   crictl                go install sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION
#   coredns               github.com/coredns/coredns $COREDNS_VERSION with only the plugins the node
#                         uses (no forward: it cannot ask an upstream resolver), built from the
#                         wrapper module e2e/real-node/coredns (its go.mod pins the version)
#   containerd, runc, CNI plugins (bridge, host-local, loopback, portmap), iptables,
#   conntrack, socat, openssl, curl, procps, kmod
#                         Debian's packages, installed with apt-get when missing
# Each Go tool lands in $TFJOB_CACHE_DIR/tools/<tool>-<version>/ and is never
# rebuilt while that directory exists; the node's bin dir links exactly this set.
# `tools.sh --bin-dir` prints that bin dir; `tools.sh --is-warm` succeeds when
# nothing is left to build or install.
#
# The kubelet's version is REAL_NODE_KUBE_VERSION (default: the control plane's
# KUBE_VERSION). Kubernetes 1.37's kubelet still accepts containerd 1.6 (it
# asks for the CRI RuntimeConfig call and, on Unimplemented, falls back to the
# kubelet's own cgroupDriver; support ends in 1.38), so Debian's containerd
# 1.6.20 is used with it.
set -euo pipefail
export LOG_TAG=real-node-tools
# shellcheck source=e2e/lib.sh
source "$(dirname "$0")/../lib.sh"
# shellcheck source=e2e/real-node/versions.env
source "$E2E_DIR/real-node/versions.env"

kubelet_dir() { echo "$TOOLS_DIR/kubelet-$REAL_NODE_KUBE_VERSION"; }
crictl_dir() { echo "$TOOLS_DIR/crictl-$CRICTL_VERSION"; }
# Keyed by the wrapper module too: its plugin list is part of what is built.
coredns_dir() { echo "$TOOLS_DIR/coredns-$COREDNS_VERSION-$(cat "$E2E_DIR/real-node/coredns/"{main.go,go.mod,go.sum} | sha256sum | cut -c1-12)"; }
real_bin_dir() { echo "$TOOLS_DIR/bin-real-node-k8s-$REAL_NODE_KUBE_VERSION-crictl-$CRICTL_VERSION-$(basename "$(coredns_dir)")"; }

build_kubelet() {
  local dir
  dir=$(kubelet_dir)
  [[ -x "$dir/bin/kubelet" && -x "$dir/bin/kube-proxy" ]] && return
  local module="$E2E_DIR/k8s/$REAL_NODE_KUBE_VERSION" minor="${REAL_NODE_KUBE_VERSION#v1.}"
  minor="${minor%%.*}"
  [[ -f "$module/go.mod" ]] || die "no wrapper module e2e/k8s/$REAL_NODE_KUBE_VERSION: run e2e/k8s/regen.sh $REAL_NODE_KUBE_VERSION"
  grep -q 'k8s.io/kubernetes/cmd/kubelet"' "$module/tools.go" \
    || die "$module/tools.go does not import cmd/kubelet: run e2e/k8s/regen.sh $REAL_NODE_KUBE_VERSION"
  local ldflags="-s -w" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$REAL_NODE_KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  log "building kubelet and kube-proxy $REAL_NODE_KUBE_VERSION (cold: roughly 5-10 minutes on 2 cores)"
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp/bin"
  (cd "$module" && with_progress "building kubelet $REAL_NODE_KUBE_VERSION" "$dir.tmp/build.log" \
    go build -v -trimpath -buildvcs=false -ldflags "$ldflags" -o "$dir.tmp/bin/" \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy)
  [[ "$("$dir.tmp/bin/kubelet" --version)" == "Kubernetes $REAL_NODE_KUBE_VERSION" ]] \
    || die "kubelet was not stamped with $REAL_NODE_KUBE_VERSION"
  finish "$dir"
}

build_crictl() {
  local dir
  dir=$(crictl_dir)
  [[ -x "$dir/bin/crictl" ]] && return
  log "building crictl $CRICTL_VERSION (go install; a minute or two cold)"
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp/bin"
  with_progress "building crictl $CRICTL_VERSION" "$dir.tmp/build.log" \
    env GOBIN="$dir.tmp/bin" go install -v -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" \
    "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
  finish "$dir"
}

build_coredns() {
  local dir
  dir=$(coredns_dir)
  [[ -x "$dir/bin/coredns" ]] && return
  local module="$E2E_DIR/real-node/coredns"
  grep -q "^require github.com/coredns/coredns $COREDNS_VERSION\$" "$module/go.mod" \
    || die "e2e/real-node/coredns/go.mod does not pin github.com/coredns/coredns $COREDNS_VERSION (COREDNS_VERSION in versions.env): edit it and run go mod tidy there"
  log "building CoreDNS $COREDNS_VERSION (wrapper module e2e/real-node/coredns; a minute or two cold)"
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp/bin"
  (cd "$module" && with_progress "building CoreDNS $COREDNS_VERSION" "$dir.tmp/build.log" \
    go build -v -trimpath -buildvcs=false -ldflags "-s -w" -o "$dir.tmp/bin/coredns" .)
  [[ "$("$dir.tmp/bin/coredns" -version)" == *"CoreDNS-${COREDNS_VERSION#v}"* ]] || die "coredns is not $COREDNS_VERSION"
  finish "$dir"
}

# Debian's packages: the runtime, the OCI runtime, CNI plugins and the tools
# kube-proxy and the network rules use.
install_debian_packages() {
  local missing=()
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  [[ -x "$CNI_BIN_DIR/bridge" ]] || missing+=(containernetworking-plugins)
  command -v iptables >/dev/null || missing+=(iptables)
  command -v conntrack >/dev/null || missing+=(conntrack)
  command -v socat >/dev/null || missing+=(socat)
  command -v ip >/dev/null || missing+=(iproute2)
  command -v umoci >/dev/null || missing+=(umoci)
  command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
  # What node.sh itself calls, absent from a minimal image: the node's
  # certificates, CoreDNS's readiness probe, sysctl and pgrep.
  command -v openssl >/dev/null || missing+=(openssl)
  command -v curl >/dev/null || missing+=(curl)
  command -v sysctl >/dev/null || missing+=(procps)
  command -v pgrep >/dev/null || missing+=(procps)
  command -v modprobe >/dev/null || missing+=(kmod)
  ((${#missing[@]} == 0)) && return
  apt_install "${missing[@]}"
}

link_bin_dir() {
  local dir
  dir=$(real_bin_dir)
  mkdir -p "$dir"
  ln -sf "$(kubelet_dir)/bin/kubelet" "$dir/kubelet"
  ln -sf "$(kubelet_dir)/bin/kube-proxy" "$dir/kube-proxy"
  ln -sf "$(crictl_dir)/bin/crictl" "$dir/crictl"
  ln -sf "$(coredns_dir)/bin/coredns" "$dir/coredns"
}

main() {
  if [[ "${1:-}" == --bin-dir ]]; then
    real_bin_dir
    return 0
  fi
  # Whether everything is built already (CI runs `make test-real` only then).
  if [[ "${1:-}" == --is-warm ]]; then
    [[ -x "$(kubelet_dir)/bin/kubelet" && -x "$(crictl_dir)/bin/crictl" && -x "$(coredns_dir)/bin/coredns" ]] \
      && command -v containerd >/dev/null && command -v runc >/dev/null
    return
  fi
  command -v go >/dev/null || die "go is needed to build the kubelet"
  mkdir -p "$TOOLS_DIR"
  exec 9>"$TOOLS_DIR/.lock-real-node"
  if ! flock -n 9; then
    log "another e2e/real-node/tools.sh is building into $TOOLS_DIR: waiting for it"
    flock 9
  fi
  local start=$SECONDS
  install_debian_packages
  build_kubelet
  build_crictl
  build_coredns
  link_bin_dir
  log "real-node tools ready in $(real_bin_dir) ($((SECONDS - start)) s; containerd $(containerd --version | awk '{print $3}'))"
}

main "$@"; exit $?
