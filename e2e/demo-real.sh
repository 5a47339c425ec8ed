#!/usr/bin/env bash
# `make demo-real`: a TFJob training for real, shown to a person. Starts the
# local cluster with the real node (or uses the running one), imports the
# images, installs the chart with the operator's own image and its trace UI
# on, applies a real example (with its programs' ConfigMap), says what to
# look for, follows its Pods' logs to the end, and prints the job's outcome
# and how long each step took. Leaves everything running; `make cluster-down`
# stops it (the real node is one per machine: stop it when done).
#   DEMO_JOB=examples/real/<file>.yaml   the job to apply (default: the first
#                                        TFJob in examples/real/, else a small
#                                        busybox job printing its TF_CONFIG)
#   DEMO_TIMEOUT=<seconds>               how long to wait for its Pods to start
#                                        and for the job to end (default 900)
set -euo pipefail
export LOG_TAG=demo-real
# shellcheck source=e2e/lib.sh
source "$(dirname "$0")/lib.sh"
export TFJOB_CLUSTER_DIR TFJOB_CACHE_DIR
D="$TFJOB_CLUSTER_DIR"
NS=demo-real
OP_NS=tfjob-system
LABEL=e2e.tfjob-operator.local/real-node

cd "$REPO_DIR"
TIMEOUT=${DEMO_TIMEOUT:-900}
started=$SECONDS
step=$SECONDS
timings=()
took() { timings+=("$(printf '%-34s %4d s' "$1" $((SECONDS - step)))"); step=$SECONDS; }
make --no-print-directory image
took "the operator's image (make image)"
bash "$E2E_DIR/cluster.sh" up --real-node
took "cluster up with the real node"
# shellcheck disable=SC1091
source "$D/env"
images=(busybox operator)
grep -q '^    tensorflow)' "$E2E_DIR/images/build.sh" && images+=(tensorflow)
for img in "${images[@]}"; do bash "$E2E_DIR/images/build.sh" "$img" --import; done
took "images built (or cached), imported"
# shellcheck disable=SC1091
source "$D/real-node/images.env"

log "installing the chart into $OP_NS with the operator's image ($REAL_NODE_IMAGE_OPERATOR), trace UI on"
kubectl create namespace "$OP_NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl label namespace "$OP_NS" --overwrite pod-security.kubernetes.io/enforce=restricted >/dev/null
helm upgrade --install tfjob-operator charts/tfjob-operator --namespace "$OP_NS" --take-ownership --wait --timeout 5m \
  --set image.repository="${REAL_NODE_IMAGE_OPERATOR%:*}" --set image.tag="${REAL_NODE_IMAGE_OPERATOR##*:}" \
  --set image.pullPolicy=Never --set replicas=1 --set test.enabled=false \
  --set-json "nodeSelector={\"$LABEL\":\"true\"}" \
  --set-json "tolerations=[{\"key\":\"$LABEL\",\"operator\":\"Exists\",\"effect\":\"NoSchedule\"}]" \
  --set-json 'extraArgs=["--trace-ui=0.0.0.0:8090"]' >/dev/null
took "the chart installed, operator Ready"
pod_ip=$(kubectl get pods -n "$OP_NS" -l app.kubernetes.io/name=tfjob-operator -o jsonpath='{.items[0].status.podIP}')
log "the pipeline, live: open http://$pod_ip:8090 (the trace UI, served by the operator Pod on the node's bridge)"

kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
job="${DEMO_JOB:-$(grep -l 'kind: TFJob' examples/real/*.yaml 2>/dev/null | head -n 1 || true)}"
if [[ -n "$job" ]]; then
  if grep -q 'name: tfjob-real-programs' "$job"; then
    log "the programs, mounted by the job's Pods: ConfigMap tfjob-real-programs from examples/real/*.py"
    programs=()
    for f in examples/real/*.py; do programs+=("--from-file=$f"); done
    kubectl create configmap tfjob-real-programs -n "$NS" --dry-run=client -o yaml "${programs[@]}" \
      | kubectl apply -f - >/dev/null
  fi
  name=$(kubectl create --dry-run=client -o jsonpath='{.metadata.name}' -f "$job")
  # A job of the same name resumes from its checkpoints (examples/real/README.md):
  # the demo starts afresh.
  kubectl delete tfjob -n "$NS" "$name" --ignore-not-found --wait >/dev/null
  rm -rf "/var/tmp/tfjob-e2e/checkpoints/$name"
  log "applying $job to namespace $NS"
  kubectl apply -n "$NS" -f "$job"
else
  name=hello-real
  log "no TFJob in examples/real/: applying a small busybox job"
  kubectl apply -n "$NS" -f - <<YAML
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: hello-real}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: Never
      template:
        spec:
          nodeSelector: {$LABEL: "true"}
          tolerations: [{key: $LABEL, operator: Exists, effect: NoSchedule}]
          containers:
          - name: tensorflow
            image: $REAL_NODE_IMAGE_BUSYBOX
            imagePullPolicy: Never
            command: [sh, -c, 'echo "I am $(hostname), TF_CONFIG=$TF_CONFIG"; sleep 20; echo done']
YAML
fi
applied=$SECONDS

cat >&2 <<TXT

What to look at while it trains (the lines are prefixed with each Pod's name):
  - "starting; TF_CONFIG names {...}": the cluster our operator wrote into each replica's TF_CONFIG;
  - "joined the cluster of 3 replicas" (MultiWorkerMirroredStrategy) or "joined the cluster:
    coordinating ..." (ParameterServerStrategy): TensorFlow found its peers through our headless
    Services and the cluster DNS;
  - "epoch N/M loss X": the loss falls, the same on every replica in step;
  - "wrote checkpoint ...": the Chief's checkpoints, on the node under /var/tmp/tfjob-e2e/checkpoints/$name/.
In another terminal:
  source $D/env
  kubectl get tfjob $name -n $NS -w          # Created -> Running -> Succeeded
  kubectl get pods,services -n $NS -o wide   # real Pods on real-node-0, IPs on the bridge 10.88/16
  open http://$pod_ip:8090                   # the trace UI: every event through the operator's pipeline

TXT
log "waiting for the job's Pods to start (up to $TIMEOUT s)"
deadline=$((SECONDS + TIMEOUT))
while :; do
  phases=$(kubectl get pods -n "$NS" -l "training.kubeflow.org/job-name=$name" -o jsonpath='{.items[*].status.phase}' 2>/dev/null || true)
  [[ -n "$phases" && "$phases" != *Pending* ]] && break
  ((SECONDS < deadline)) || die "the job's Pods did not start within $TIMEOUT s: kubectl describe pods -n $NS"
  sleep 2
done
took "applied -> every Pod started"
log "following the job's Pods' logs (Ctrl-C stops following; the job goes on)"
kubectl logs -n "$NS" -f --prefix --max-log-requests 10 -l "training.kubeflow.org/job-name=$name" --ignore-errors || true

log "waiting for the job to end (up to $TIMEOUT s)"
deadline=$((SECONDS + TIMEOUT))
outcome=""
while [[ -z "$outcome" ]]; do
  outcome=$(kubectl get tfjob -n "$NS" "$name" \
    -o jsonpath='{range .status.conditions[?(@.status=="True")]}{.type}{"\n"}{end}' 2>/dev/null \
    | grep -E '^(Succeeded|Failed)$' || true)
  [[ -n "$outcome" ]] && break
  ((SECONDS < deadline)) || die "TFJob $name did not end within $TIMEOUT s: kubectl describe tfjob -n $NS $name"
  sleep 2
done
took "the job $outcome"
kubectl get tfjobs -n "$NS" "$name"
kubectl get tfjob -n "$NS" "$name" -o jsonpath='{range .status.conditions[*]}  {.type}: {.message}{"\n"}{end}'
echo
echo "Timings (demo-real, $(date -u +%FT%TZ)):"
printf '  %s\n' "${timings[@]}"
printf '  %-34s %4d s\n' "applied -> $outcome" $((SECONDS - applied)) "total" $((SECONDS - started))
cat <<TXT

Still running: the cluster, the real node, the operator (chart release tfjob-operator in $OP_NS).
Explore:
  source $D/env
  kubectl get tfjobs,pods,services -n $NS -o wide
  kubectl logs -n $NS $name-chief-0          # or any replica's Pod (a finished Pod keeps its log)
  kubectl logs -n $OP_NS deploy/tfjob-operator
  open http://$pod_ip:8090                   # the trace UI
  DEMO_JOB=examples/real/ps.yaml make demo-real   # the other strategy, on the same cluster
Stop everything (the real node is one per machine: stop it when you are done):
  make cluster-down
TXT
[[ "$outcome" == Succeeded ]]
