# shellcheck shell=bash
# Shared by e2e/tools.sh, e2e/cluster.sh and e2e/run-suite.sh (sourced, not run).
#
# Where things live:
#   $TFJOB_CACHE_DIR (default ~/.cache/tfjob-operator)   built/downloaded tools, keyed by pinned version
#   $TFJOB_CLUSTER_DIR (default <repo>/.cluster, gitignored)  one running control plane's state
# Nothing here ever writes into the repository outside .cluster/.

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$E2E_DIR/.." && pwd)"
# shellcheck source=e2e/versions.env
source "$E2E_DIR/versions.env"

TFJOB_CACHE_DIR="${TFJOB_CACHE_DIR:-$HOME/.cache/tfjob-operator}"
TFJOB_CLUSTER_DIR="${TFJOB_CLUSTER_DIR:-$REPO_DIR/.cluster}"
TOOLS_DIR="$TFJOB_CACHE_DIR/tools"

# One directory per tool and version; a version bump builds into a new one.
kube_dir() { echo "$TOOLS_DIR/kubernetes-$KUBE_VERSION"; }
etcd_dir() { echo "$TOOLS_DIR/etcd-$ETCD_VERSION"; }
kwok_dir() { echo "$TOOLS_DIR/kwok-$KWOK_VERSION"; }
helm_dir() { echo "$TOOLS_DIR/helm-$HELM_VERSION"; }
# The directory put first on PATH: symlinks to exactly this set of versions.
bin_dir() { echo "$TOOLS_DIR/bin-k8s-$KUBE_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION-helm-$HELM_VERSION"; }

log() { printf '%s [%s] %s\n' "$(date -u +%H:%M:%S)" "${LOG_TAG:-e2e}" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Ports: whether one is listened on, and a random free one in a range away
# from the usual ephemeral range, unique within this run (callers reset
# PICKED=() when they start choosing).
port_in_use() { ss -Htanl "sport = :$1" 2>/dev/null | grep -q .; }
pick_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 12000))
    port_in_use "$p" && continue
    [[ " ${PICKED[*]:-} " == *" $p "* ]] && continue
    PICKED+=("$p")
    echo "$p"
    return
  done
}
