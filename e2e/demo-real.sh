#!/usr/bin/env bash
# `make demo-real`: a TFJob training for real, shown to a person. Starts the
# local cluster with the real node (or uses the running one), imports the
# images, installs the chart with the operator's own image and its trace UI
# on, applies a real example and follows its Pods' logs. Leaves everything
# running; `make cluster-down` stops it.
#   DEMO_JOB=examples/real/<file>.yaml   the job to apply (default: the first
#                                        TFJob in examples/real/, else a small
#                                        busybox job printing its TF_CONFIG)
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
make --no-print-directory image
bash "$E2E_DIR/cluster.sh" up --real-node
# shellcheck disable=SC1091
source "$D/env"
images=(busybox operator)
grep -q '^    tensorflow)' "$E2E_DIR/images/build.sh" && images+=(tensorflow)
for img in "${images[@]}"; do bash "$E2E_DIR/images/build.sh" "$img" --import; done
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
pod_ip=$(kubectl get pods -n "$OP_NS" -l app.kubernetes.io/name=tfjob-operator -o jsonpath='{.items[0].status.podIP}')
log "the pipeline, live: open http://$pod_ip:8090 (the operator Pod's IP on the node's bridge)"

kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
job="${DEMO_JOB:-$(grep -l 'kind: TFJob' examples/real/*.yaml 2>/dev/null | head -n 1 || true)}"
if [[ -n "$job" ]]; then
  log "applying $job to namespace $NS"
  kubectl apply -n "$NS" -f "$job"
else
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
log "following the job's Pods (Ctrl-C stops following; the job goes on)"
for _ in $(seq 120); do
  [[ -n "$(kubectl get pods -n "$NS" -l training.kubeflow.org/replica-type -o name 2>/dev/null)" ]] && break
  sleep 1
done
kubectl get pods -n "$NS" -o wide
kubectl logs -n "$NS" -f --prefix --max-log-requests 10 -l training.kubeflow.org/replica-type --ignore-errors || true
kubectl get tfjobs -n "$NS"
cat <<TXT

Still running. Explore:
  source $D/env
  kubectl get tfjobs,pods,services -n $NS -o wide
  kubectl logs -n $OP_NS deploy/tfjob-operator
  open http://$pod_ip:8090      # the trace UI
Stop everything: make cluster-down
TXT
