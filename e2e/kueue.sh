#!/usr/bin/env bash
# Real Kueue (sigs.k8s.io/kueue, KUEUE_VERSION in versions.env) next to the
# local control plane, run as a plain process on loopback like the other
# components of e2e/cluster.sh, in one of two modes (TFJOB_KUEUE_MODE):
#
#   builtin   (default) its built-in kubeflow.org/tfjob integration on: Kueue's
#             webhook suspends TFJobs and its controller builds their Workloads
#   workload  the built-in off, integrations.externalFrameworks:
#             [TFJob.v1.kubeflow.org]: our operator builds and owns the Workloads
#             (--kueue=workload/auto, src/tfjob/kueue/); waitForPodsReady on, with
#             timeout TFJOB_KUEUE_PODS_READY_TIMEOUT (default 20s), so every
#             job also proves the operator's PodsReady
#   manager   a MultiKueue manager (e2e/multikueue.sh): as `workload`, without
#             waitForPodsReady (no Pod runs here), plus multiKueue.externalFrameworks:
#             [TFJob.v1.kubeflow.org] (the generic adapter, feature gate
#             MultiKueueAdaptersForCustomJobs) and a workerLostTimeout of
#             TFJOB_MULTIKUEUE_WORKER_LOST_TIMEOUT (default 20s)
#
# The mode is written to $TFJOB_CLUSTER_DIR/kueue/mode for the tests.
#
#   kueue.sh up       install Kueue's CRDs and webhooks, start it, wait until it admits requests
#   kueue.sh down     stop it and remove its webhook configurations (a dead webhook
#                     with failurePolicy Fail would block every TFJob create)
#   kueue.sh restart  a new process on the same config and webhooks (cluster.sh
#                     restart apiserver does it: see cmd_restart)
#   kueue.sh status   running or not, on which ports
#
# Needs a running cluster (`make cluster-up`); `up` installs our TFJob CRD first in
# builtin mode when no TFJob CRD is installed (one that is, ours or Kubeflow's, is
# kept), since Kueue's TFJob integration sets up its controller only once the kind
# exists.
# The binary comes from e2e/tools.sh (`--kueue-bin`; TFJOB_KUEUE_BIN overrides);
# the CRDs and webhook manifests are read from the Go module cache
# (`go mod download sigs.k8s.io/kueue@$KUEUE_VERSION`), never copied into the repo.
#
# State lives in $TFJOB_CLUSTER_DIR/kueue/ (certs, config, ports, pid file): not in
# pids/, so a `cluster.sh down` that forgot Kueue cannot lose track of its process.
# The log is logs/kueue.log.
#
# Out of a cluster Kueue wants, and gets here:
#   - a webhook serving certificate in webhook.certDir (ours: 127.0.0.1 in the SAN),
#     with the API server calling https://127.0.0.1:<port>/<path> (clientConfig.url);
#   - a metrics serving certificate at the FIXED path /etc/kueue/metrics/certs
#     (internal cert management off), so `up` writes one there;
#   - --feature-gates=VisibilityOnDemand=false (the visibility API server wants
#     an in-cluster Service).
# Only the webhooks of Kueue's own API and of TFJobs are installed; the TFJob ones
# are scoped to namespaces labelled tfjob-operator.e2e/kueue=true, so the rest of
# the suite never depends on Kueue being up.
set -euo pipefail
export LOG_TAG=kueue
# shellcheck source=e2e/lib.sh
source "$(dirname "$0")/lib.sh"

mkdir -p "$TFJOB_CLUSTER_DIR"
D="$(cd "$TFJOB_CLUSTER_DIR" && pwd)"
K="$D/kueue"
PID_FILE="$K/kueue.pid"
LOG_FILE="$D/logs/kueue.log"
METRICS_CERT_DIR=/etc/kueue/metrics/certs
# The namespace label the TFJob webhooks match (tests/e2e/kueue.rs sets it).
NS_LABEL=tfjob-operator.e2e/kueue
# Kueue's own kinds plus TFJobs; every other integration is off, its webhooks not installed.
WEBHOOKS="clusterqueue cohort resourceflavor workload tfjob"
MODE="${TFJOB_KUEUE_MODE:-builtin}"
case "$MODE" in
  builtin | workload | manager) ;;
  *) die "TFJOB_KUEUE_MODE=$MODE: use builtin, workload or manager" ;;
esac
# Without the built-in, Kueue has no TFJob webhook to install.
[[ "$MODE" != builtin ]] && WEBHOOKS="clusterqueue cohort resourceflavor workload"
FEATURE_GATES=VisibilityOnDemand=false
# Beta and on by default in v0.17.0 (pkg/features/kube_features.go): named so
# the dependency is plain, and a Kueue that dropped the gate fails loudly.
[[ "$MODE" == manager ]] && FEATURE_GATES="$FEATURE_GATES,MultiKueue=true,MultiKueueAdaptersForCustomJobs=true"

kubectl_admin() { "$(bin_dir)/kubectl" --kubeconfig "$D/kubeconfig" "$@"; }

# ---------------------------------------------------------------- process

pid_of() { cat "$PID_FILE" 2>/dev/null || true; }

# The pid may have been reused: ours only if its command line names our config.
is_ours() {
  local pid
  pid=$(pid_of)
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$K/config.yaml"
}

# port_in_use and pick_port: e2e/lib.sh.

# ---------------------------------------------------------------- certificates

# A CA and a serving certificate for 127.0.0.1. X.509 v3 with a SAN: the API
# server (Go) ignores the CN and refuses a certificate without one.
make_certs() {
  local c="$K/certs"
  mkdir -p "$c"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$c/ca.key" -out "$c/ca.crt" \
    -days 365 -subj "/CN=tfjob-operator-e2e-kueue-ca" 2>/dev/null
  openssl genrsa -out "$c/tls.key" 2048 2>/dev/null
  openssl req -new -key "$c/tls.key" -subj "/CN=kueue-webhook" -out "$c/tls.csr" 2>/dev/null
  printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=serverAuth" "subjectAltName=IP:127.0.0.1,DNS:localhost" >"$c/tls.ext"
  openssl x509 -req -in "$c/tls.csr" -CA "$c/ca.crt" -CAkey "$c/ca.key" -CAcreateserial \
    -days 365 -sha256 -extfile "$c/tls.ext" -out "$c/tls.crt" 2>/dev/null
  rm -f "$c/tls.csr" "$c/tls.ext"
  # Nobody scrapes these metrics; Kueue only refuses to start without the files.
  # Written through a temp file and rename: another worktree's Kueue may watch them.
  mkdir -p "$METRICS_CERT_DIR" 2>/dev/null \
    || die "cannot create $METRICS_CERT_DIR (Kueue reads its metrics certificate there; run as a user who may)"
  local f
  for f in tls.crt tls.key; do
    cp "$c/$f" "$METRICS_CERT_DIR/.$f.tmp" && mv "$METRICS_CERT_DIR/.$f.tmp" "$METRICS_CERT_DIR/$f"
  done
}

# ---------------------------------------------------------------- manifests

kueue_module_dir() {
  go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'
}

# Polls until every named CRD is Established (`kubectl wait` fails outright
# on a CRD whose status has no conditions yet, right after its creation).
wait_established() {
  local crd deadline=$((SECONDS + 60))
  for crd in "$@"; do
    until [[ "$(kubectl_admin get crd "$crd" \
      -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" == True ]]; do
      ((SECONDS < deadline)) || die "CRD $crd not Established after 60s"
      sleep 0.3
    done
  done
}

install_crds() {
  local mod="$1"
  # Server-side: some of Kueue's CRDs are too large for client-side apply's annotation.
  kubectl_admin apply --server-side --force-conflicts -f "$mod/config/components/crd/bases/" >/dev/null
  # shellcheck disable=SC2046 # CRD names have no spaces
  wait_established $(kubectl_admin get -f "$mod/config/components/crd/bases/" -o name | sed 's|.*/||')
}

# Rewrites Kueue's webhook manifests for a process on loopback: only $WEBHOOKS,
# each calling https://127.0.0.1:$WEBHOOK_PORT<path> with our CA; the TFJob ones
# only in namespaces labelled $NS_LABEL=true. kubectl turns the YAML into JSON
# (no YAML parser needed), Python's standard library edits it.
install_webhooks() {
  local mod="$1"
  kubectl_admin create --dry-run=client -o json -f "$mod/config/components/webhook/manifests.yaml" \
    | python3 -c '
import base64, json, sys
port, ca_file, label, keep = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split()
ca = base64.b64encode(open(ca_file, "rb").read()).decode()
text, items, at = sys.stdin.read(), [], 0
while text[at:].strip():  # kubectl prints one JSON object per YAML document
    item, end = json.JSONDecoder().raw_decode(text, at + len(text[at:]) - len(text[at:].lstrip()))
    items.append(item)
    at = end
for item in items:
    item["metadata"]["name"] = "tfjob-e2e-kueue-" + item["kind"].replace("WebhookConfiguration", "").lower()
    hooks = []
    for h in item["webhooks"]:
        kind = h["name"].split(".")[0][1:]  # mtfjob.kb.io -> tfjob
        if kind not in keep:
            continue
        path = h["clientConfig"]["service"]["path"]
        h["clientConfig"] = {"url": "https://127.0.0.1:" + port + path, "caBundle": ca}
        h["timeoutSeconds"] = 10
        if kind == "tfjob":
            h["namespaceSelector"] = {"matchLabels": {label: "true"}}
        hooks.append(h)
    item["webhooks"] = hooks
json.dump({"apiVersion": "v1", "kind": "List", "items": items}, sys.stdout)
' "$WEBHOOK_PORT" "$K/certs/ca.crt" "$NS_LABEL" "$WEBHOOKS" >"$K/webhooks.json"
  kubectl_admin apply --server-side --force-conflicts -f "$K/webhooks.json" >/dev/null
}

remove_webhooks() {
  [[ -f "$D/kubeconfig" ]] || return 0
  kubectl_admin delete --request-timeout=10s mutatingwebhookconfiguration tfjob-e2e-kueue-mutating \
    --ignore-not-found --wait=false >/dev/null 2>&1 || true
  kubectl_admin delete --request-timeout=10s validatingwebhookconfiguration tfjob-e2e-kueue-validating \
    --ignore-not-found --wait=false >/dev/null 2>&1 || true
}

write_config() {
  cat >"$K/config.yaml" <<EOF
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
# Only TFJobs that name a LocalQueue (label kueue.x-k8s.io/queue-name) are Kueue's.
manageJobsWithoutQueueName: false
health:
  healthProbeBindAddress: 127.0.0.1:$HEALTH_PORT
metrics:
  bindAddress: 127.0.0.1:$METRICS_PORT
webhook:
  host: 127.0.0.1
  port: $WEBHOOK_PORT
  certDir: $K/certs
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
EOF
  if [[ "$MODE" == builtin ]]; then
    cat >>"$K/config.yaml" <<EOF
integrations:
  frameworks:
  - kubeflow.org/tfjob
EOF
  else
    # An empty frameworks list means Kueue's default (batch/job): named
    # explicitly, so it is clear kubeflow.org/tfjob is not among them.
    cat >>"$K/config.yaml" <<EOF
integrations:
  frameworks:
  - batch/job
  externalFrameworks:
  - TFJob.v1.kubeflow.org
EOF
  fi
  if [[ "$MODE" == manager ]]; then
    # origin: the label value on every object MultiKueue makes on a worker
    # (its garbage collector deletes those whose manager copy is gone).
    cat >>"$K/config.yaml" <<EOF
multiKueue:
  origin: tfjob-e2e-manager
  gcInterval: 30s
  workerLostTimeout: ${TFJOB_MULTIKUEUE_WORKER_LOST_TIMEOUT:-20s}
  externalFrameworks:
  - name: TFJob.v1.kubeflow.org
EOF
  elif [[ "$MODE" == workload ]]; then
    cat >>"$K/config.yaml" <<EOF
waitForPodsReady:
  timeout: ${TFJOB_KUEUE_PODS_READY_TIMEOUT:-20s}
  recoveryTimeout: ${TFJOB_KUEUE_PODS_READY_TIMEOUT:-20s}
  requeuingStrategy:
    timestamp: Eviction
    backoffBaseSeconds: 5
    backoffMaxSeconds: 10
EOF
  fi
  echo "$MODE" >"$K/mode"
}

# ---------------------------------------------------------------- readiness

# shellcheck disable=SC2329 # called through wait_for
readyz() { curl -fsS "http://127.0.0.1:$HEALTH_PORT/readyz"; }

# The whole path works: the API server calls the webhook (CA, URL) and Kueue
# answers. A server-side dry run goes through admission and stores nothing.
# shellcheck disable=SC2329 # called through wait_for
webhook_answers() {
  kubectl_admin create --dry-run=server -f - <<EOF
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: kueue-sh-probe
EOF
}

# Kueue's TFJob controller (logger "tfjob") runs once it has seen the kind.
# shellcheck disable=SC2329 # called through wait_for
# $1: how many lines of the log to skip (a restarted process appends to it).
tfjob_integration_on() {
  tail -n +"$((${1:-0} + 1))" "$LOG_FILE" | grep -q '"logger":"tfjob".*"msg":"Starting workers"'
}

wait_for() {
  local timeout="$1" what="$2"
  shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ! is_ours; then
      tail -n 30 "$LOG_FILE" >&2 || true
      die "Kueue exited while waiting for $what (log: $LOG_FILE)"
    fi
    if ((SECONDS >= deadline)); then
      tail -n 30 "$LOG_FILE" >&2 || true
      cmd_down
      die "Kueue: no $what after ${timeout}s (log: $LOG_FILE)"
    fi
    sleep 0.3
  done
}

# ---------------------------------------------------------------- commands

stop_process() {
  is_ours || { rm -f "$PID_FILE"; return 0; }
  local pid deadline
  pid=$(pid_of)
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + 15))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then
    log "kueue (pid $pid) still running 15s after SIGTERM: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  fi
  rm -f "$PID_FILE"
}

cmd_down() {
  # Webhooks first: from here on the API server no longer calls a Kueue that is going away.
  remove_webhooks
  stop_process
  local ports=""
  [[ -f "$K/ports" ]] && ports=$(cut -d= -f2 "$K/ports" | tr '\n' ' ')
  rm -rf "$K"
  local p
  for p in $ports; do port_in_use "$p" && die "port $p still in use after stopping Kueue"; done
  return 0
}

cmd_up() {
  [[ -f "$D/kubeconfig" ]] || die "no cluster in $D (run: make cluster-up)"
  local bin start=$SECONDS
  bin=$(bash "$E2E_DIR/tools.sh" --kueue-bin)
  [[ -x "$bin" ]] || die "no Kueue binary at $bin (run: bash e2e/tools.sh, or set TFJOB_KUEUE_BIN)"
  command -v go >/dev/null || die "go is needed to read Kueue's manifests from the module cache"
  cmd_down
  mkdir -p "$K" "$D/logs"
  # Any failure from here on leaves nothing behind: no process, no webhook.
  trap 'report_failure; if ((BASHPID == $$)); then log "kueue.sh up failed: stopping what was started"; cmd_down; fi' ERR

  local mod
  mod=$(kueue_module_dir)
  [[ -d "$mod/config/components/crd/bases" ]] || die "no Kueue manifests in the module cache ($mod)"
  PICKED=()
  WEBHOOK_PORT=$(pick_port)
  METRICS_PORT=$(pick_port)
  HEALTH_PORT=$(pick_port)
  printf 'WEBHOOK_PORT=%s\nMETRICS_PORT=%s\nHEALTH_PORT=%s\n' "$WEBHOOK_PORT" "$METRICS_PORT" "$HEALTH_PORT" >"$K/ports"

  make_certs
  write_config
  # A TFJob CRD first: see the header. Ours when none is installed; one that
  # is (Kubeflow's, in run-suite.sh's Kubeflow-CRD phase, where
  # tests/e2e/migration/kueue_builtin.rs starts the built-in) is kept: the
  # built-in serves either. Not in workload mode, where Kueue needs no TFJob
  # controller.
  if [[ "$MODE" == builtin ]]; then
    if ! kubectl_admin get crd tfjobs.kubeflow.org >/dev/null 2>&1; then
      kubectl_admin apply --server-side --force-conflicts -f "$REPO_DIR/crds/kubeflow.org_tfjobs.yaml" >/dev/null
    fi
    wait_established tfjobs.kubeflow.org
  fi
  kubectl_admin create namespace kueue-system --dry-run=client -o yaml | kubectl_admin apply -f - >/dev/null
  install_crds "$mod"

  log "starting Kueue $KUEUE_VERSION (webhook 127.0.0.1:$WEBHOOK_PORT, health 127.0.0.1:$HEALTH_PORT)"
  : >"$LOG_FILE"
  start_process "$bin"
  wait_for 60 "readiness (/readyz)" readyz
  # Installed only now: until Kueue answers, a webhook would refuse the requests it covers.
  install_webhooks "$mod"
  wait_for 30 "answer from its webhook through the API server" webhook_answers
  if [[ "$MODE" == builtin ]]; then
    wait_for 30 "TFJob integration in its log" tfjob_integration_on
  fi
  trap report_failure ERR
  log "Kueue up in $((SECONDS - start)) s, mode $MODE (log: $LOG_FILE)"
}

# Starts the Kueue binary $1 on the config in $K, appending to its log.
start_process() {
  local bin="$1" i
  # Own session, as e2e/cluster.sh starts components: a Ctrl-C in make's terminal does not kill it.
  # shellcheck disable=SC2016 # $$, $0 and $@ belong to the inner shell
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "$PID_FILE" \
    env KUBECONFIG="$D/kubeconfig" "$bin" --config "$K/config.yaml" \
    --feature-gates="$FEATURE_GATES" \
    >>"$LOG_FILE" 2>&1 </dev/null &
  for i in $(seq 50); do
    [[ -s "$PID_FILE" ]] && break
    sleep 0.1
  done
}

# A new Kueue process on the same config, certificates, ports and webhooks:
# what `cluster.sh restart apiserver` does to Kueue, as to the API server's
# other clients. Kueue's informers are client-go reflectors, and after an API
# server outage a reflector waits out an exponential backoff before it lists
# and watches again: 0.8 s doubling per failure up to 30 s, each wait
# stretched by a random factor in [1, 2), and reset only after 2 minutes
# without a failure. A restart of our API server (~15 s of refused
# connections, then 410 Gone for every watch from before, which costs one
# more backoff before the relist) delayed the admission of a Workload created
# right after it by 3-15 s after one restart and by 62-73 s after each
# further restart within 2 minutes (measured; Kueue at --zap-log-level=4
# logs each "Watch failed - backing off" and
# "Listing and watching"; the admission followed the Workload informer's
# relist by 0.2 s): Kueue admitted nothing meanwhile.
# A fresh process lists at once.
cmd_restart() {
  is_ours || die "Kueue is not running from $K (start it: kueue.sh up)"
  local bin start=$SECONDS lines
  bin=$(bash "$E2E_DIR/tools.sh" --kueue-bin)
  # shellcheck disable=SC1091 # written by cmd_up
  source "$K/ports"
  MODE=$(cat "$K/mode")
  stop_process
  lines=$(wc -l <"$LOG_FILE")
  log "restarting Kueue (mode $MODE)"
  start_process "$bin"
  wait_for 60 "readiness (/readyz)" readyz
  wait_for 30 "answer from its webhook through the API server" webhook_answers
  if [[ "$MODE" == builtin ]]; then
    wait_for 30 "TFJob integration in its log" tfjob_integration_on "$lines"
  fi
  log "Kueue restarted in $((SECONDS - start)) s"
}

cmd_status() {
  if is_ours; then
    echo "kueue running  pid $(pid_of)  mode $(cat "$K/mode" 2>/dev/null)"
    cat "$K/ports"
  else
    echo "kueue STOPPED"
    return 1
  fi
}

main() {
  case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    restart) cmd_restart ;;
    status) cmd_status ;;
    *) die "usage: kueue.sh up|down|restart|status" ;;
  esac
}

# One line: bash has read the whole script before it runs.
main "$@"; exit $?
