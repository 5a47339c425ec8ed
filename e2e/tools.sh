#!/usr/bin/env bash
# Builds (or reuses from the cache) the binaries the local control plane and
# the checks around it run, by named set, so each target builds only what it
# runs (a cold Prometheus server is minutes the demo never uses):
#
#   bash e2e/tools.sh core        etcd, one Kubernetes (KUBE_VERSION), KWOK: the control plane
#                                 (make demo, cluster-up's base, test-faults, benches)
#   bash e2e/tools.sh helm        Helm 3, stamped for KUBE_VERSION's minor (the e2e suite, chart-lint)
#   bash e2e/tools.sh helm4       Helm 4 (chart-lint-helm4, a CI extended lane: the chart under Helm 4)
#   bash e2e/tools.sh promtool    promtool alone (rules-check)
#   bash e2e/tools.sh prometheus  the Prometheus server and promtool (test-observability,
#                                 dashboard-pictures: not `make test`)
#   bash e2e/tools.sh kueue       Kueue (the e2e suite's Kueue phases, e2e-multikueue, kueue-up)
#   bash e2e/tools.sh jaeger      Jaeger (test-observability)
#   bash e2e/tools.sh [all]       core helm promtool kueue: everything `make test` runs;
#                                 with TFJOB_WITH_EXTENDED=1 also helm4, prometheus and jaeger,
#                                 what CI's extended lanes add (not the other Kubernetes version)
# Several sets may be named at once (`bash e2e/tools.sh core helm`).
#
# Where each comes from:
#   etcd                        from the crates.io crate etcd-bin-vendored (cargo fetch, no compile)
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl
#                               from k8s.io/kubernetes via the wrapper module e2e/k8s/$KUBE_VERSION
#                               (go build; kubelet and kube-proxy are in that module for the real
#                               node, e2e/real-node/tools.sh, and not built here)
#   kwok                        go install sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION
#   helm                        go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION
#   helm4                       go install helm.sh/helm/v4/cmd/helm@$HELM4_VERSION
#   prometheus, promtool        go install github.com/prometheus/prometheus/cmd/...@$PROMETHEUS_VERSION,
#                               each on its own when only one is asked for (same directory; each
#                               binary lands whole or not at all)
#   kueue                       go install sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION (e2e/kueue.sh runs it;
#                               its CRDs and webhook manifests are read from the module cache at run time)
#   jaeger                      github.com/jaegertracing/jaeger/cmd/jaeger@$JAEGER_VERSION via the wrapper
#                               module e2e/jaeger (go build; make test-observability sends it the
#                               operator's OTLP traces)
# Versions are pinned in e2e/versions.env; each tool lands in
# $TFJOB_CACHE_DIR/tools/<tool>-<version>/ and is never rebuilt while its
# binaries are there. Go tools are built with -trimpath and without debug
# information or symbols (-ldflags "-s -w"). Each build's seconds are appended
# to $TFJOB_CACHE_DIR/tool-builds.jsonl (lib.sh, with_progress), so a cold run
# can be recorded. Each set builds under a lock of its own (lib.sh,
# with_set_lock): `make test` starts its sets in the background
# (e2e/tools-background.sh) and a step waits only for the set it names.
# Prints nothing but progress; `bash e2e/tools.sh --bin-dir` prints the bin dir
# (links to whatever has been built of this set of versions), `--kueue-bin`
# the Kueue binary (TFJOB_KUEUE_BIN, when set, names another one),
# `--jaeger-bin` the Jaeger binary.
set -euo pipefail
export LOG_TAG=tools
# shellcheck source=e2e/lib.sh
source "$(dirname "$0")/lib.sh"

# True when what a command prints holds WANT. Not `cmd | grep -q`: under
# pipefail that fails at random, when grep exits at its first match while the
# command is still writing (it dies of SIGPIPE; kubectl prints two lines).
prints() {
  local want="$1" out
  shift
  out=$("$@" 2>&1) || return 1
  [[ $out == *"$want"* ]]
}

build_etcd() {
  local dir
  dir=$(etcd_dir)
  [[ -x "$dir/bin/etcd" ]] && return
  grep -q "\"=$ETCD_VERSION\"" "$E2E_DIR/etcd/Cargo.toml" \
    || die "e2e/etcd/Cargo.toml does not pin etcd-bin-vendored =$ETCD_VERSION (ETCD_VERSION in versions.env)"
  log "fetching etcd $ETCD_VERSION (crates.io: etcd-bin-vendored)"
  cargo fetch --locked --manifest-path "$E2E_DIR/etcd/Cargo.toml" >&2
  local src
  src=$(find "${CARGO_HOME:-$HOME/.cargo}/registry/src" -maxdepth 4 -type f -name etcd \
    -path "*/etcd-bin-vendored-linux-$etcd_arch-$ETCD_VERSION/bin/etcd" | head -n 1)
  [[ -n "$src" ]] || die "etcd binary not found in the cargo registry after fetching"
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp/bin"
  cp "$src" "$dir.tmp/bin/etcd"
  chmod +x "$dir.tmp/bin/etcd"
  prints "etcd Version: $ETCD_VERSION" "$dir.tmp/bin/etcd" --version || die "fetched etcd is not $ETCD_VERSION"
  finish "$dir"
}

build_kubernetes() {
  local dir
  dir=$(kube_dir)
  [[ -x "$dir/bin/kube-apiserver" && -x "$dir/bin/kubectl" ]] && return
  local module minor
  module=$(k8s_module_dir)
  minor=$(kube_minor)
  grep -q "^require k8s.io/kubernetes $KUBE_VERSION\$" "$module/go.mod" \
    || die "$module/go.mod does not pin k8s.io/kubernetes $KUBE_VERSION: run e2e/k8s/regen.sh $KUBE_VERSION"
  # Stamp the real version, so `kubectl version`, the /version endpoint and
  # Helm's capability checks all see it (a module build otherwise says v0.0.0).
  local ldflags="-s -w"
  local pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  log "building Kubernetes $KUBE_VERSION: kube-apiserver, kube-controller-manager, kube-scheduler, kubectl"
  log "  (a cold build downloads ~1.6 GB of modules and compiles for roughly 5-15 minutes on 2 cores; warm: seconds)"
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp/bin"
  (cd "$module" && with_progress "building Kubernetes $KUBE_VERSION" "$dir.tmp/build.log" \
    go build -v -trimpath -buildvcs=false -ldflags "$ldflags" -o "$dir.tmp/bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)
  prints "Client Version: $KUBE_VERSION" "$dir.tmp/bin/kubectl" version --client \
    || die "kubectl was not stamped with $KUBE_VERSION"
  finish "$dir"
}

build_kwok() {
  local dir
  dir=$(kwok_dir)
  [[ -x "$dir/bin/kwok" ]] && return
  log "building KWOK $KWOK_VERSION (go install; a few minutes cold)"
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp/bin"
  with_progress "building KWOK $KWOK_VERSION" "$dir.tmp/build.log" \
    env GOBIN="$dir.tmp/bin" go install -v -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  finish "$dir"
}

build_helm() {
  local dir
  dir=$(helm_dir)
  [[ -x "$dir/bin/helm" ]] && return
  local minor
  minor=$(kube_minor)
  log "building Helm $HELM_VERSION for Kubernetes 1.$minor (go install; a few minutes cold)"
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp/bin"
  # Without the stamp `helm version` reports only the minor, and charts'
  # .Capabilities.KubeVersion defaults to a guess instead of the server's minor.
  local ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  ldflags+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$minor"
  ldflags+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$minor"
  with_progress "building Helm $HELM_VERSION" "$dir.tmp/build.log" \
    env GOBIN="$dir.tmp/bin" go install -v -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  prints "$HELM_VERSION" "$dir.tmp/bin/helm" version --short || die "helm was not stamped with $HELM_VERSION"
  finish "$dir"
}

helm4_dir() { echo "$TOOLS_DIR/helm-$HELM4_VERSION"; }

# Helm 4 beside Helm 3: the chart must lint and render under both (make
# chart-lint with Helm 3, make chart-lint-helm4 with Helm 4). Helm 4 takes its default Kubernetes version from the client-go
# in its build info, which `go install` keeps, so only its own version needs
# stamping. Linked into the bin dir as helm4; `helm` stays Helm 3.
build_helm4() {
  local dir
  dir=$(helm4_dir)
  [[ -x "$dir/bin/helm" ]] && return
  log "building Helm $HELM4_VERSION (go install; a few minutes cold)"
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp/bin"
  local ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$HELM4_VERSION"
  ldflags+=" -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
  with_progress "building Helm $HELM4_VERSION" "$dir.tmp/build.log" \
    env GOBIN="$dir.tmp/bin" go install -v -trimpath -ldflags "$ldflags" "helm.sh/helm/v4/cmd/helm@$HELM4_VERSION"
  prints "$HELM4_VERSION" "$dir.tmp/bin/helm" version --short || die "helm4 was not stamped with $HELM4_VERSION"
  finish "$dir"
}

prometheus_dir() { echo "$TOOLS_DIR/prometheus-$PROMETHEUS_VERSION"; }

# Prometheus and promtool, those of $@ not built yet: the chart's alert rules
# are checked and unit-tested with promtool (make rules-check), and the
# observability tests scrape with the Prometheus server. Both go to the same
# directory (its layout predates building them apart), each checked on its own:
# a directory with promtool alone is not a Prometheus. Each is built in a
# directory of its own and renamed into place whole. Built without the web
# UI's assets (the HTTP API is all we use) and without the service discovery
# plugins the build tag remove_all_sd governs (the scrape configs are
# static): Consul, GCE, Azure, ... are not compiled. Kubernetes' discovery
# and client stay (promtool imports them directly: 840 packages for promtool
# alone, 843 s at load 16, 2026-11-28).
build_prometheus() {
  local dir want=() b
  dir=$(prometheus_dir)
  for b in "$@"; do [[ -x "$dir/bin/$b" ]] || want+=("$b"); done
  ((${#want[@]} > 0)) || return 0
  local what="${want[*]}" tmp pkgs=()
  what="${what// / and }"
  tmp="$dir.tmp-${want[*]}"
  tmp="${tmp// /-}"
  log "building $what $PROMETHEUS_VERSION (go install; minutes cold)"
  rm -rf "$tmp" && mkdir -p "$tmp/bin"
  for b in "${want[@]}"; do pkgs+=("github.com/prometheus/prometheus/cmd/$b@$PROMETHEUS_VERSION"); done
  local ldflags="-s -w -X github.com/prometheus/common/version.Version=$PROMETHEUS_VERSION"
  with_progress "building $what $PROMETHEUS_VERSION" "$tmp/build.log" \
    env GOBIN="$tmp/bin" go install -v -trimpath -tags remove_all_sd -ldflags "$ldflags" "${pkgs[@]}"
  for b in "${want[@]}"; do
    prints "$PROMETHEUS_VERSION" "$tmp/bin/$b" --version || die "$b was not stamped with $PROMETHEUS_VERSION"
  done
  mkdir -p "$dir/bin"
  for b in "${want[@]}"; do mv "$tmp/bin/$b" "$dir/bin/$b"; done
  mv "$tmp/build.log" "$dir/build-${want[0]}.log"
  rm -rf "$tmp"
}

kueue_dir() { echo "$TOOLS_DIR/kueue-$KUEUE_VERSION"; }

# Kueue is not linked into the bin dir (whose name is keyed by the control
# plane's versions): only e2e/kueue.sh runs it, through `--kueue-bin`.
build_kueue() {
  local dir
  dir=$(kueue_dir)
  [[ -x "$dir/bin/kueue" ]] && return
  log "building Kueue $KUEUE_VERSION (go install; about 3 minutes cold)"
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp/bin"
  # The stamp shows in Kueue's first log line ("Initializing", gitVersion).
  local ldflags="-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION"
  with_progress "building Kueue $KUEUE_VERSION" "$dir.tmp/build.log" \
    env GOBIN="$dir.tmp/bin" go install -v -trimpath -ldflags "$ldflags" "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
  finish "$dir"
}

jaeger_dir() { echo "$TOOLS_DIR/jaeger-$JAEGER_VERSION"; }

# Jaeger v2 (cmd/jaeger, an OpenTelemetry Collector build). Its go.mod has a
# replace directive, which `go install pkg@version` refuses, so it is built
# from the wrapper module e2e/jaeger as Kubernetes is from e2e/k8s. Not linked
# into the bin dir (whose name is keyed by the control plane's versions):
# `--jaeger-bin` prints where it is.
build_jaeger() {
  local dir
  dir=$(jaeger_dir)
  [[ -x "$dir/bin/jaeger" ]] && return
  grep -q "^require github.com/jaegertracing/jaeger $JAEGER_VERSION\$" "$E2E_DIR/jaeger/go.mod" \
    || die "e2e/jaeger/go.mod does not pin github.com/jaegertracing/jaeger $JAEGER_VERSION: run e2e/jaeger/regen.sh"
  log "building Jaeger $JAEGER_VERSION (go build; about 6 minutes cold on 2 cores)"
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp/bin"
  # The stamp shows in `jaeger version` and Jaeger's build_info metric.
  local ldflags="-s -w -X github.com/jaegertracing/jaeger/internal/version.latestVersion=$JAEGER_VERSION"
  (cd "$E2E_DIR/jaeger" && with_progress "building Jaeger $JAEGER_VERSION" "$dir.tmp/build.log" \
    go build -v -trimpath -buildvcs=false -ldflags "$ldflags" -o "$dir.tmp/bin/jaeger" \
    github.com/jaegertracing/jaeger/cmd/jaeger)
  prints "$JAEGER_VERSION" "$dir.tmp/bin/jaeger" version || die "jaeger was not stamped with $JAEGER_VERSION"
  finish "$dir"
}

# Links what has been built of this set of versions into the bin dir (a
# target that built only some sets finds only those there). Prometheus, Helm 4
# and Kueue are not part of the bin dir's name (lib.sh); Kueue and Jaeger are
# not linked (`--kueue-bin`, `--jaeger-bin`).
link_bin_dir() {
  local dir
  dir=$(bin_dir)
  mkdir -p "$dir"
  link_if_built "$(etcd_dir)/bin/etcd" "$dir/etcd"
  local b
  for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    link_if_built "$(kube_dir)/bin/$b" "$dir/$b"
  done
  link_if_built "$(kwok_dir)/bin/kwok" "$dir/kwok"
  link_if_built "$(helm_dir)/bin/helm" "$dir/helm"
  link_if_built "$(helm4_dir)/bin/helm" "$dir/helm4"
  link_if_built "$(prometheus_dir)/bin/prometheus" "$dir/prometheus"
  link_if_built "$(prometheus_dir)/bin/promtool" "$dir/promtool"
}

link_if_built() {
  if [[ -x "$1" ]]; then ln -sf "$1" "$2"; fi
}

# The sets `all` names (see the header): what `make test` runs, and with
# TFJOB_WITH_EXTENDED=1 what CI's extended lanes add.
all_sets() {
  echo core helm promtool kueue
  # Helm 4, the Prometheus server and Jaeger only for CI's extended lanes
  # (chart-lint-helm4, test-observability): 215 + 498 + ~360 s cold that
  # `make test` does not spend (issue #41).
  if [[ "${TFJOB_WITH_EXTENDED:-0}" == 1 ]]; then echo helm4 prometheus jaeger; fi
}

# The lock a set builds under (lib.sh, with_set_lock): its own, but promtool
# and prometheus build into one directory.
set_lock() { if [[ "$1" == promtool ]]; then echo prometheus; else echo "$1"; fi; }

# One set, under its lock: first what make test's background build of it
# left to say (lib.sh, background_note), then the build if it is missing.
build_set_locked() {
  background_note "$1"
  build_set "$1"
}

build_set() {
  case "$1" in
    core)
      # Not `a && b`: set -e does not apply inside a function called there.
      build_etcd
      build_kubernetes
      build_kwok
      ;;
    helm) build_helm ;;
    helm4) build_helm4 ;;
    promtool) build_prometheus promtool ;;
    prometheus) build_prometheus prometheus promtool ;;
    kueue) if [[ -z "${TFJOB_KUEUE_BIN:-}" ]]; then build_kueue; fi ;;
    jaeger) if [[ -z "${TFJOB_JAEGER_BIN:-}" ]]; then build_jaeger; fi ;;
    *) die "no tool set '$1'" ;;
  esac
}

main() {
  if [[ "${1:-}" == "--bin-dir" ]]; then
    bin_dir
    return 0
  fi
  if [[ "${1:-}" == "--jaeger-bin" ]]; then
    echo "$(jaeger_dir)/bin/jaeger"
    return 0
  fi
  if [[ "${1:-}" == "--kueue-bin" ]]; then
    echo "${TFJOB_KUEUE_BIN:-$(kueue_dir)/bin/kueue}"
    return 0
  fi
  local set
  for set in "$@"; do
    [[ " core helm helm4 promtool prometheus kueue jaeger all " == *" $set "* ]] \
      || die "no tool set '$set': core, helm, helm4, promtool, prometheus, kueue, jaeger or all (e2e/tools.sh's header)"
  done
  command -v go >/dev/null || die "go is needed to build the control plane (see docs/development.md, 'The local cluster')"
  command -v cargo >/dev/null || die "cargo is needed to fetch etcd"
  mkdir -p "$TOOLS_DIR"
  case "$(uname -m)" in
    x86_64) etcd_arch=amd64 ;;
    aarch64 | arm64) etcd_arch=arm64 ;;
    *) die "no etcd binary for $(uname -m) in etcd-bin-vendored" ;;
  esac

  local start=$SECONDS sets=() named=("$@")
  ((${#named[@]} > 0)) || named=(all)
  for set in "${named[@]}"; do
    if [[ "$set" == all ]]; then
      # shellcheck disable=SC2207 # words, one per set
      sets+=($(all_sets))
    else
      sets+=("$set")
    fi
  done
  # Each set under its own lock: two `make` runs at once (two worktrees, or
  # a step beside make test's background builds) never build one set into
  # the same place, and a step waits only for the sets it names.
  for set in "${sets[@]}"; do with_set_lock "$(set_lock "$set")" build_set_locked "$set"; done
  with_set_lock --quiet bin-dir link_bin_dir
  log "tools ready in $(bin_dir): ${named[*]} ($((SECONDS - start)) s)"
}

# One line, so bash has read all of it before running: editing this file
# while a long build runs cannot make bash resume at a shifted offset.
main "$@"; exit $?
