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
# The wrapper Go module that builds this Kubernetes version's commands
# (kube-apiserver, ..., kubelet, kube-proxy): e2e/k8s/<version>/.
k8s_module_dir() {
  local dir="$E2E_DIR/k8s/$KUBE_VERSION"
  [[ -f "$dir/go.mod" ]] || die "no wrapper module for Kubernetes $KUBE_VERSION in e2e/k8s/ (supported: $(cd "$E2E_DIR/k8s" && ls -d v1.* | tr '\n' ' ')): run e2e/k8s/regen.sh $KUBE_VERSION"
  echo "$dir"
}
# The Kubernetes minor, e.g. 37 for v1.37.2.
kube_minor() {
  local minor="${KUBE_VERSION#v1.}"
  echo "${minor%%.*}"
}
etcd_dir() { echo "$TOOLS_DIR/etcd-$ETCD_VERSION"; }
kwok_dir() { echo "$TOOLS_DIR/kwok-$KWOK_VERSION"; }
# Helm is stamped with the Kubernetes minor it defaults to (tools.sh), so its
# directory is keyed by that minor too.
helm_dir() { echo "$TOOLS_DIR/helm-$HELM_VERSION-k8s-1.$(kube_minor)"; }
# The directory put first on PATH: symlinks to exactly this set of versions.
bin_dir() { echo "$TOOLS_DIR/bin-k8s-$KUBE_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION-helm-$HELM_VERSION"; }

log() { printf '%s [%s] %s\n' "$(date -u +%H:%M:%S)" "${LOG_TAG:-e2e}" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Names any command that fails under `set -e`: the script, the line, the
# command, its exit status and the functions it ran in, under the step's
# LOG_TAG, so a harness failure never ends in make's bare `Error 1`. A failure
# inside a subshell is named by the command that ran the subshell (once, in
# the script's own shell). Commands whose failure is handled (`if`, `||`) do
# not trigger it. A script with an ERR trap of its own calls it first, cleans
# up only in its own shell (BASHPID == $$: errtrace hands the trap to
# subshells too) and restores it with `trap report_failure ERR` (kueue.sh).
report_failure() {
  local status=$?
  ((BASHPID == $$)) || return 0
  local where="${BASH_SOURCE[1]:-?}" funcs="${FUNCNAME[*]:1}"
  funcs="${funcs% main}"
  log "error: ${where#"$REPO_DIR"/} line ${BASH_LINENO[0]}: '$BASH_COMMAND' exited with status $status${funcs:+ (in ${funcs// / < })}"
}
if [[ $- == *e* ]]; then
  set -o errtrace
  trap report_failure ERR
fi

# Runs a long step in the background (its output to LOGFILE) and says every
# 30 s that it still runs, so a cold build never looks hung: for a
# `go build -v` (one line per package compiled) how many packages so far,
# otherwise the step's last line of output.
# Usage: with_progress WHAT LOGFILE COMMAND...   (WHAT: "building Helm v3.19.0")
with_progress() {
  local what="$1" logfile="$2"
  shift 2
  local start=$SECONDS is_go=0
  [[ " $* " == *" go build -v "* || " $* " == *" go install -v "* ]] && is_go=1
  "$@" >"$logfile" 2>&1 &
  local pid=$! next=$((start + 30)) detail
  while kill -0 "$pid" 2>/dev/null; do
    sleep 2
    if ((SECONDS >= next)); then
      next=$((next + 30))
      if ((is_go)); then
        detail="$(grep -vc '^go: downloading' "$logfile" || true) packages so far"
      else
        detail=$(tail -n 1 "$logfile" | cut -c1-80)
      fi
      log "  still $what: $(((SECONDS - start) / 60)) min $(((SECONDS - start) % 60)) s ($detail)"
    fi
  done
  if ! wait "$pid"; then
    tail -n 40 "$logfile" >&2
    die "$what failed (full log: $logfile)"
  fi
  log "  $what: done in $((SECONDS - start)) s"
  record_build "$what" $((SECONDS - start)) "$is_go" "$logfile"
}

# One JSON line per long step that finished, appended to
# $TFJOB_CACHE_DIR/tool-builds.jsonl: what, seconds, Go packages compiled (a
# cold build compiles thousands, a warm one few), when, the commit, the cores
# and the load at the end. What a later cold run is recorded from (issue #41);
# a failure to write it fails nothing.
record_build() {
  local what="$1" seconds="$2" is_go="$3" logfile="$4" packages=null commit load
  if ((is_go)); then packages=$(grep -vc '^go: downloading' "$logfile" || true); fi
  commit=$(git -C "$REPO_DIR" rev-parse --short HEAD 2>/dev/null || echo unknown)
  load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo null)
  printf '{"what": "%s", "seconds": %s, "go_packages": %s, "finished": "%s", "commit": "%s", "cores": %s, "load1": %s}\n' \
    "${what//\"/}" "$seconds" "${packages:-null}" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$commit" "$(nproc)" "$load" \
    >>"$TFJOB_CACHE_DIR/tool-builds.jsonl" 2>/dev/null || true
}

# Builds into <dir>.tmp and renames, so an interrupted build never leaves a
# directory that looks complete.
finish() { rm -rf "$1" && mv "$1.tmp" "$1"; }

# Where `make test`'s background tool builds (e2e/tools-background.sh) keep
# each set's log and status (queued, running, ok, failed (exit N)): one
# directory per worktree, beside its cluster's state.
TOOLS_BACKGROUND_DIR="${TFJOB_TOOLS_BACKGROUND_DIR:-$TFJOB_CLUSTER_DIR/tools-background}"

# Runs COMMAND... holding lock NAME ($TOOLS_DIR/.lock-NAME): one per tool
# set, so two builds of a set never meet (two worktrees, or a step and make
# test's background builds) while a step that needs another set does not
# wait for them. The lock is an open file descriptor, so it goes with the
# command's end or the script's death, never left behind. --quiet: a wait
# of a moment, not worth a line (the bin dir's links).
with_set_lock() {
  local quiet=0 name fd
  if [[ "$1" == --quiet ]]; then
    quiet=1
    shift
  fi
  name="$1"
  shift
  mkdir -p "$TOOLS_DIR"
  exec {fd}>"$TOOLS_DIR/.lock-$name"
  if ((quiet)); then
    flock "$fd"
  elif ! flock -n "$fd"; then
    if grep -qx running "$TOOLS_BACKGROUND_DIR"/*.status 2>/dev/null; then
      log "waiting for another build of $name (make test's background builds are running: logs in $TOOLS_BACKGROUND_DIR)"
    else
      log "waiting for another build of $name (another worktree's?) into $TOOLS_DIR"
    fi
    flock "$fd"
  fi
  # Plain, not `"$@" || ...`: that would switch set -e off inside the build
  # functions. Under set -e a failure ends the script here; the status is
  # kept for a caller that has it off.
  "$@"
  local rc=$?
  exec {fd}>&-
  return "$rc"
}

# Before a step builds tool set SET itself: if make test's background build
# of it failed, says so, with the end of that build's log, once (the status
# goes), so the cause is on the step's screen; the step then builds SET if it
# is still missing, and a failure of its own ends in its own cause.
background_note() {
  local set="$1" status
  status=$(cat "$TOOLS_BACKGROUND_DIR/$set.status" 2>/dev/null) || return 0
  [[ "$status" == failed* ]] || return 0
  log "make test's background build of $set $status; the end of its log ($TOOLS_BACKGROUND_DIR/$set.log):"
  tail -n 20 "$TOOLS_BACKGROUND_DIR/$set.log" >&2 || true
  log "building $set here if it is still missing"
  rm -f "$TOOLS_BACKGROUND_DIR/$set.status"
}

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

# Runs the e2e tests matching FILTER against this worktree's local control
# plane: the running cluster if there is one (left up), otherwise a fresh one
# torn down afterwards, even on failure. For the `make test-*` targets that
# run one part of the suite on its own.
cluster_is_up() {
  [[ -f "$TFJOB_CLUSTER_DIR/kubeconfig" ]] &&
    "$(bin_dir)/kubectl" --kubeconfig "$TFJOB_CLUSTER_DIR/kubeconfig" --request-timeout=5s \
      get --raw /readyz >/dev/null 2>&1
}

run_e2e_on_a_cluster() {
  local filter="$1"
  if cluster_is_up; then
    log "using the running cluster in $TFJOB_CLUSTER_DIR"
  else
    # shellcheck disable=SC2064 # expand now: the path is fixed
    trap "bash '$E2E_DIR/cluster.sh' down" EXIT
    bash "$E2E_DIR/cluster.sh" up
  fi
  cd "$REPO_DIR"
  cargo test --test e2e -- --ignored "$filter"
}

# Installs Debian packages with apt-get, from the machine's package registry:
# the harness's few system tools (socat, the real node's runtime) that are
# not built into the cache, the image tools (make image-tools). Waits for
# another apt-get's lock rather than fail. As root, or through sudo.
apt_install() {
  command -v apt-get >/dev/null || die "missing $* and no apt-get: install them (Debian package names)"
  local sudo=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null || die "missing $*: installing them takes root (apt-get) and there is no sudo: install them as root, then run this again"
    sudo=(sudo)
  fi
  log "installing Debian packages: $*"
  "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=300 update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "$@" >/dev/null
}

# ---------------------------------------------------------------- components
# The processes a script starts and stops: e2e/cluster.sh (the control plane)
# and e2e/real-node/node.sh (the real node). The script sets COMPONENTS_HOME
# (pid files go to $COMPONENTS_HOME/pids; every component gets a flag
# pointing into that dir, which is how a pid is known to be ours) and D (logs
# go to $D/logs), and defines stop_after_failed_start.

pid_of() { cat "$COMPONENTS_HOME/pids/$1.pid" 2>/dev/null || true; }

# True when the pid file names a live process that is really ours: the pid may
# have been reused, so its command line must mention COMPONENTS_HOME.
is_ours() {
  local pid
  pid=$(pid_of "$1")
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$COMPONENTS_HOME/"
}

# Starts a component detached from this shell (its own session, so a Ctrl-C
# in the terminal that ran `make` does not kill it half-way; `down` does).
start_component() {
  local name="$1"
  shift
  mkdir -p "$D/logs" "$COMPONENTS_HOME/pids"
  # shellcheck disable=SC2016 # $$, $0 and $@ belong to the inner shell
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "$COMPONENTS_HOME/pids/$name.pid" "$@" \
    >>"$D/logs/$name.log" 2>&1 </dev/null &
  # Our child (setsid does not fork here: a background job of a script is no
  # process-group leader), so fail_start can `wait` for how it ended.
  STARTED_PIDS[$name]=$!
  # The pid file is written by the child before it execs; wait for it.
  local _
  for _ in $(seq 50); do
    [[ -s "$COMPONENTS_HOME/pids/$name.pid" ]] && return 0
    sleep 0.1
  done
  die "$name did not start"
}

# SIGTERM, wait up to $2 seconds, then SIGKILL and wait for it to be gone.
stop_component() {
  local name="$1" grace="${2:-15}" pid
  if ! is_ours "$name"; then
    rm -f "$COMPONENTS_HOME/pids/$name.pid"
    return 0
  fi
  pid=$(pid_of "$name")
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + grace))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then
    log "$name (pid $pid) still running ${grace}s after SIGTERM: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  fi
  rm -f "$COMPONENTS_HOME/pids/$name.pid"
}

declare -gA STARTED_PIDS=()

# How a component that is not running (any more) ended: its exit status or the
# signal that killed it, from `wait` when this shell started it; otherwise
# what its pid file names. An empty log says nothing, this line still does.
how_it_ended() {
  local name="$1" pid="${STARTED_PIDS[$1]:-}" status
  if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
    status=0
    wait "$pid" 2>/dev/null || status=$?
    if ((status > 128)); then
      echo "pid $pid killed by SIG$(kill -l $((status - 128)) 2>/dev/null || echo $((status - 128)))"
    else
      echo "pid $pid exited with status $status"
    fi
    return
  fi
  pid=$(pid_of "$name")
  if [[ -z "$pid" ]]; then
    echo "no pid file"
  elif [[ -r "/proc/$pid/cmdline" ]]; then
    echo "pid $pid lives but its command line does not name $COMPONENTS_HOME: $(tr '\0' ' ' <"/proc/$pid/cmdline" | cut -c1-200)"
  else
    echo "pid $pid is gone"
  fi
}

# Says why a component did not come up, with the end of its log, stops what
# was started (the script's stop_after_failed_start) and exits.
fail_start() {
  local name="$1" why="$2"
  if [[ "$why" == "the process exited" ]]; then why+=" ($(how_it_ended "$name"))"; fi
  log "$name failed to start: $why"
  log "last lines of $D/logs/$name.log:"
  tail -n 30 "$D/logs/$name.log" >&2 || true
  stop_after_failed_start
  exit 1
}

# Polls `$3...` until it succeeds, while component $2 lives; gives up after
# $1 seconds.
wait_for() {
  local timeout="$1" name="$2"
  shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    is_ours "$name" || fail_start "$name" "the process exited"
    ((SECONDS < deadline)) || fail_start "$name" "not ready after ${timeout}s"
    sleep 0.3
  done
}
