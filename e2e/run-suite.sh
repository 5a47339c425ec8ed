#!/usr/bin/env bash
# The end-to-end suite, as `make e2e` and CI run it:
#   1. prove the harness restarts cleanly: up, down (no leaked process or port), via check-cycle.sh
#   2. start a fresh local control plane
#   3. cargo test --test e2e -- --ignored   (all e2e tests but Kueue's, in parallel, one namespace each)
#   4. start Kueue next to the cluster (e2e/kueue.sh) and run tests/e2e/kueue.rs on their own,
#      after the tests that restart the API server: with Kueue's built-in TFJob integration,
#      then without it (TFJOB_KUEUE_MODE=workload) with tests/e2e/kueue_workload.rs too
#   5. stop Kueue; swap the TFJob CRD for Kubeflow's own and run the core scenarios
#      again under it (TFJOB_E2E_CRD=kubeflow; see run_kubeflow_crd_phase), with the
#      move from Kubeflow's training-operator and back (tests/e2e/migration.rs; the
#      training-operator binary built by e2e/peers.sh), and the Kueue scenarios
#      without the built-in (Kueue in workload mode)
#   6. the fault-injection suite on a fresh cluster (fault_suite below)
#   7. tear the cluster down, always (trap), even when a test or step 1/2 failed
# The exit code is the first failing step's (step 5 runs even when step 4 failed).
#   run-suite.sh --kubeflow-crd-only   steps 1, 2, 5, 7 (make e2e-kubeflow-crd)
#   run-suite.sh --core-only           steps 1, 2, 7 and the core scenarios (CORE_TESTS) under our
#                                      CRD: make e2e-other-version runs them on the other supported
#                                      Kubernetes version (KUBE_VERSION=v1.34.4)
#   FAULTS_ONLY=1 run-suite.sh         steps 1, 2, 6, 7 (make test-faults)
#   FAULT_RECORD=<name> (with FAULTS_ONLY=1) keeps the figures of a run that
#                                      passed in benches/results/<name>.json (record_faults)
#   FAULT_FILTER=<test name filter> (with FAULTS_ONLY=1) runs only the fault
#                                      tests whose names contain it (libtest's filter),
#                                      e.g. FAULT_FILTER=requests:: to record one scenario
set -euo pipefail
export LOG_TAG=e2e
# shellcheck source=e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=e2e/record.sh
source "$E2E_DIR/record.sh"
export TFJOB_CLUSTER_DIR TFJOB_CACHE_DIR
# Tests mostly wait on the cluster, not the CPU: more threads than cores is right.
E2E_TEST_THREADS="${E2E_TEST_THREADS:-8}"

# shellcheck disable=SC2329 # the EXIT trap calls it
teardown() {
  local rc=$?
  trap - EXIT INT TERM
  if ((rc != 0)) && [[ -d "$TFJOB_CLUSTER_DIR/logs" ]]; then
    log "failed (exit $rc): component logs are in $TFJOB_CLUSTER_DIR/logs (kept after down)"
  fi
  kueue_down || rc=1
  bash "$E2E_DIR/cluster.sh" down || rc=1
  exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- Kueue

# Kueue's binary, built (or waited for: make test builds it in the background,
# e2e/tools-background.sh) only when a phase that runs Kueue starts, so that
# cold the main pass runs while it builds instead of after (issue #41).
kueue_built() { bash "$E2E_DIR/tools.sh" kueue; }

# Kueue (tests/e2e/kueue.rs, kueue_workload.rs) runs beside the cluster after
# the main pass only. $1: its mode (e2e/kueue.sh, TFJOB_KUEUE_MODE).
kueue_up() {
  local mode="${1:-builtin}" start
  kueue_built || return
  start=$SECONDS
  TFJOB_KUEUE_MODE="$mode" bash "$E2E_DIR/kueue.sh" up || return
  KUEUE_UP_SECONDS=$((${KUEUE_UP_SECONDS:-0} + SECONDS - start))
  # The Kueue tests fail instead of skipping when Kueue is promised but gone
  # (and kueue_workload.rs when it runs in the other mode).
  if [[ "$mode" == workload ]]; then export TFJOB_E2E_KUEUE=workload; else export TFJOB_E2E_KUEUE=1; fi
}

# The Kueue filters per mode: the shared scenarios in both, the Workload-mode ones without the built-in.
KUEUE_TESTS_BUILTIN=(kueue::)
KUEUE_TESTS_WORKLOAD=(kueue:: kueue_workload::)

# Runs the Kueue tests with Kueue in mode $1, once: a failure fails the suite.
# (Kueue used to be retried on a fresh process here: it admitted nothing for up
# to a minute after an API-server restart. The cause was client-go's reflector
# backoff in Kueue, see cmd_restart in e2e/kueue.sh; `cluster.sh restart
# apiserver` now restarts Kueue with the API server's other clients, and the
# test kueue::kueue_admits_within_seconds_of_api_server_restarts holds it to that.)
run_kueue_phase() {
  local mode="$1" rc=0
  shift
  # (Called in an `||` list, where set -e is off: a Kueue that did not
  # build or start ends the phase with its own message.)
  kueue_up "$mode" || return
  log "running the Kueue e2e tests on their own (Kueue mode $mode)"
  cargo test --test e2e -- --ignored --test-threads="$E2E_TEST_THREADS" "$@" || rc=$?
  kueue_down
  return "$rc"
}

kueue_down() { bash "$E2E_DIR/kueue.sh" down; }

# ---------------------------------------------------------------- Kubeflow's CRD

# Kubeflow training-operator's TFJob CRD, from the Go module cache (downloaded
# once by `go mod download`; e2e/peers.sh builds from the same cache). Prints its path.
kubeflow_crd_path() {
  local dir
  dir=$(go mod download -json "github.com/kubeflow/training-operator@$KUBEFLOW_TRAINING_OPERATOR_VERSION" \
    | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [[ -f "$dir/manifests/base/crds/kubeflow.org_tfjobs.yaml" ]] \
    || die "no TFJob CRD in training-operator $KUBEFLOW_TRAINING_OPERATOR_VERSION's module ($dir)"
  echo "$dir/manifests/base/crds/kubeflow.org_tfjobs.yaml"
}

# Replaces our CRD with Kubeflow's on the running cluster. Deleted first: Helm
# (tests/e2e/helm.rs) may co-own fields of ours, and server-side apply only
# drops the fields no other manager owns, so an apply alone could leave our
# validation rules in place. Deleting the CRD deletes the main phase's TFJobs.
swap_to_kubeflow_crd() {
  local crd="$1" kubectl
  kubectl="$(bash "$E2E_DIR/tools.sh" --bin-dir)/kubectl"
  "$kubectl" --kubeconfig "$TFJOB_CLUSTER_DIR/kubeconfig" delete crd tfjobs.kubeflow.org \
    --ignore-not-found --timeout 120s >/dev/null
  "$kubectl" --kubeconfig "$TFJOB_CLUSTER_DIR/kubeconfig" apply --server-side --force-conflicts \
    -f "$crd" >/dev/null
  # Polled: `kubectl wait` fails outright while a new CRD has no conditions yet.
  local deadline=$((SECONDS + 60))
  until [[ "$("$kubectl" --kubeconfig "$TFJOB_CLUSTER_DIR/kubeconfig" get crd tfjobs.kubeflow.org \
    -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" == True ]]; do
    ((SECONDS < deadline)) || die "Kubeflow's TFJob CRD not Established after 60s"
    sleep 0.3
  done
}

# The core scenarios, by test name (libtest takes several filters; a test runs
# when its path contains one). Left out on purpose: tests that assert our own
# status additions, which Kubeflow's CRD prunes by design (replicaStatuses.*.
# restarts and succeededIndexes: tfjob::worker_only_job_succeeds_..., tfjob::
# exit_code_137_..., examples::exit_code_job_...); kubeflow_crd:: has versions
# of those scenarios that look only at Pods and conditions.
KUBEFLOW_CRD_TESTS=(
  tfjob::chief_ps_workers_job_runs_and_succeeds_when_the_chief_exits_zero
  tfjob::active_deadline_fails_a_job_whose_pods_just_keep_running
  tfjob::clean_pod_policy_
  tfjob::ttl_deletes_the_job_after_it_finishes
  tfjob::suspend_deletes_pods_and_resume_recreates_them
  gang::a_gang_that_does_not_fit_
  gang::the_group_follows_
  gang::a_scheduling_policy_added_later_
  restarting::
  managed_by::
  kubeflow_crd::
  migration::
)

# The core scenarios on their own (--core-only): what must hold on every
# supported Kubernetes version. The same lifecycle filters as Kubeflow's CRD
# phase, plus the smoke tests (harness and versions) and the gang tests (on a
# server without the Workload API they check that the operator behaves as
# before: no group, the Warning, every Pod placed).
CORE_TESTS=(smoke:: gang::)
for f in "${KUBEFLOW_CRD_TESTS[@]}"; do
  [[ "$f" == kubeflow_crd:: || "$f" == migration:: || "$f" == gang::* ]] || CORE_TESTS+=("$f")
done

run_core_phase() {
  local start=$SECONDS rc=0
  log "running the core scenarios on Kubernetes $KUBE_VERSION (${#CORE_TESTS[@]} filters)"
  cargo test --test e2e -- --ignored --test-threads="$E2E_TEST_THREADS" "${CORE_TESTS[@]}" || rc=$?
  log "core phase on $KUBE_VERSION: $((SECONDS - start)) s (exit $rc)"
  return "$rc"
}

# Kubeflow's training-operator at the CRD's version, for tests/e2e/migration.rs
# (moving from it with jobs running, and back): built into the tool cache by
# e2e/peers.sh when missing (go install from the module proxy: see its
# header for the cold cost). Prints the binary's path.
training_operator_bin() {
  local dir
  TRAINING_OPERATOR_VERSION="$KUBEFLOW_TRAINING_OPERATOR_VERSION" bash "$E2E_DIR/peers.sh" >&2
  dir=$(TRAINING_OPERATOR_VERSION="$KUBEFLOW_TRAINING_OPERATOR_VERSION" bash "$E2E_DIR/peers.sh" --dir)
  echo "$dir/bin/training-operator.v1"
}

run_kubeflow_crd_phase() {
  local start=$SECONDS crd training_operator
  crd=$(kubeflow_crd_path)
  # (Called in an `||` list, where set -e is off: statuses checked.)
  training_operator=$(training_operator_bin) || return
  # migration::kueue_builtin:: starts Kueue itself (e2e/kueue.sh up).
  kueue_built || return
  log "Kubeflow's CRD phase: installing training-operator $KUBEFLOW_TRAINING_OPERATOR_VERSION's TFJob CRD"
  swap_to_kubeflow_crd "$crd"
  log "running the core scenarios under Kubeflow's CRD (${#KUBEFLOW_CRD_TESTS[@]} filters)"
  local rc=0
  # migration::kueue_builtin:: starts a Kueue of its own in this run (the
  # built-in on, then off) and stops it when it ends: the one Kueue of the
  # machine meanwhile (its metrics certificate path is fixed), before the
  # workload-mode Kueue below.
  TFJOB_E2E_CRD=kubeflow TFJOB_E2E_KUBEFLOW_CRD="$crd" TFJOB_E2E_TRAINING_OPERATOR="$training_operator" \
    cargo test --test e2e -- --ignored --test-threads="$E2E_TEST_THREADS" "${KUBEFLOW_CRD_TESTS[@]}" || rc=$?
  # Queued jobs without Kueue's built-in, under Kubeflow's CRD (Kueue in
  # workload mode does not install our CRD over it: e2e/kueue.sh).
  TFJOB_E2E_CRD=kubeflow TFJOB_E2E_KUBEFLOW_CRD="$crd" \
    run_kueue_phase workload "${KUEUE_TESTS_WORKLOAD[@]}" || { local r=$?; ((rc != 0)) || rc=$r; }
  log "Kubeflow's CRD phase: $((SECONDS - start)) s (exit $rc)"
  return "$rc"
}

# ---------------------------------------------------------------- main

# ---------------------------------------------------------------- faults

# The fault-injection suite (tests/faults, issue #20), one test at a time (its
# scenarios disturb the whole cluster). `make test` runs the bounded subset
# (FAULT_ROUNDS default 3, no 1,000-job scale run); `make test-faults` sets
# FAULT_FULL=1 and more rounds. FAULT_SEED repeats a run. No Kueue runs here,
# but for the write-kill sweep's eviction pass, which starts one itself
# (e2e/kueue.sh up, workload mode) and stops it when the pass ends (the EXIT
# trap's kueue_down catches one a crashed test left).
fault_suite() {
  local skip=()
  # A fresh cluster after the e2e phases: their leftover jobs (and Kubeflow's
  # CRD) would otherwise meet the all-namespaces scenarios' operators.
  if [[ "${FAULTS_ONLY:-0}" != 1 ]]; then
    bash "$E2E_DIR/cluster.sh" down
    bash "$E2E_DIR/cluster.sh" up
  fi
  [[ "${FAULT_FULL:-0}" == 1 ]] || skip=(--skip scale_)
  # FAULT_FILTER narrows the run to some scenarios (libtest's name filter).
  [[ -z "${FAULT_FILTER:-}" ]] || skip+=("$FAULT_FILTER")
  log "running the fault suite (FAULT_SEED=${FAULT_SEED:-20} FAULT_ROUNDS=${FAULT_ROUNDS:-3} FAULT_FULL=${FAULT_FULL:-0}${FAULT_FILTER:+ FAULT_FILTER=$FAULT_FILTER})"
  if [[ -z "${FAULT_RECORD:-}" ]]; then
    cargo test --test faults -- --include-ignored --test-threads=1 --nocapture "${skip[@]}"
    return
  fi
  # Recording: built first (the clock starts with the scenarios), every
  # scenario writes its figures to FAULT_RESULTS_DIR, and the output is kept
  # for the test counts.
  # (main calls this in an `||` list, where set -e is off: statuses checked.)
  cargo test --test faults --no-run || return
  local start=$SECONDS rc=0
  cargo test --test faults -- --include-ignored --test-threads=1 --nocapture "${skip[@]}" 2>&1 \
    | tee "$FAULT_RESULTS_DIR.log" || rc=$?
  if ((rc != 0)); then
    log "the fault suite failed (exit $rc): nothing recorded"
    return "$rc"
  fi
  record_faults $((SECONDS - start))
}

# FAULT_RECORD=<name>: where the scenarios' figures go, and the commit and
# load before the run (e2e/record.sh). Called before the cluster starts.
begin_fault_record() {
  [[ -n "${FAULT_RECORD:-}" ]] || return 0
  [[ "${FAULTS_ONLY:-0}" == 1 ]] || die "FAULT_RECORD records the fault suite alone: use make test-faults (FAULTS_ONLY=1)"
  record_check_name "$FAULT_RECORD" || die "FAULT_RECORD=$FAULT_RECORD is not a results file name"
  # The fault tests include tests/e2e's support code.
  record_begin tests/faults tests/e2e
  export FAULT_RESULTS_DIR="$REPO_DIR/target/faults/results"
  rm -rf "$FAULT_RESULTS_DIR" "$FAULT_RESULTS_DIR.log"
  mkdir -p "$FAULT_RESULTS_DIR"
}

# After a fault suite that passed: benches/results/$FAULT_RECORD.json.
# $1: the suite's seconds.
record_faults() {
  local results="$FAULT_RESULTS_DIR.json"
  python3 "$E2E_DIR/fault_results.py" "$FAULT_RESULTS_DIR" "$FAULT_RESULTS_DIR.log" \
    --suite-seconds "$1" >"$results" || return
  if [[ "${FAULT_FULL:-0}" == 1 ]]; then
    record_write "$FAULT_RECORD" "make test-faults" FAULT json "$results"
  else
    record_write "$FAULT_RECORD" "FAULTS_ONLY=1 bash e2e/run-suite.sh" FAULT json "$results"
  fi
}

main() {
  local start=$SECONDS up_done tests_done rc=0 only_kubeflow=0 only_core=0
  [[ "${1:-}" == --kubeflow-crd-only ]] && only_kubeflow=1
  [[ "${1:-}" == --core-only ]] && only_core=1
  begin_fault_record
  # A fresh cluster: whatever ran from this dir before goes first.
  kueue_down
  bash "$E2E_DIR/cluster.sh" down
  bash "$E2E_DIR/check-cycle.sh"
  bash "$E2E_DIR/cluster.sh" up
  up_done=$SECONDS

  cd "$REPO_DIR"
  if ((only_kubeflow)); then
    # The operator binary and the test binary, before the clock of the phase starts.
    cargo test --test e2e --no-run
    run_kubeflow_crd_phase || rc=$?
    log "e2e (Kubeflow's CRD only): cycle check + cluster-up $((up_done - start)) s, phase $((SECONDS - up_done)) s"
    return "$rc"
  fi
  if ((only_core)); then
    cargo test --test e2e --no-run
    run_core_phase || rc=$?
    log "e2e (core only, $KUBE_VERSION): cycle check + cluster-up $((up_done - start)) s, phase $((SECONDS - up_done)) s"
    return "$rc"
  fi
  if [[ "${FAULTS_ONLY:-0}" == 1 ]]; then
    fault_suite || rc=$?
    log "faults: cycle check + cluster-up $((up_done - start)) s, fault suite $((SECONDS - up_done)) s"
    return "$rc"
  fi
  log "running the e2e tests (--test-threads=$E2E_TEST_THREADS)"
  # The tests on a real Prometheus server and on Jaeger run in `make
  # test-observability` (which builds both; `make test` builds promtool
  # alone), the Helm 3 vs Helm 4 comparison in `make chart-lint-helm4`: CI's
  # extended lanes (issue #41). metrics_list:: holds /metrics to
  # docs/metrics.md here, without a Prometheus.
  # migration:: runs under Kubeflow's CRD only, in run_kubeflow_crd_phase.
  cargo test --test e2e -- --ignored --test-threads="$E2E_TEST_THREADS" --skip kueue:: \
    --skip kueue_workload:: --skip observability:: --skip helm::render::helm_3_and_helm_4_ \
    --skip migration:: || rc=$?
  # Kueue starts only now, for its tests on their own, after the tests that
  # restart the API server: each such restart restarts Kueue too when it runs
  # (e2e/kueue.sh restart), which would only lengthen them.
  run_kueue_phase builtin "${KUEUE_TESTS_BUILTIN[@]}" || { local r=$?; ((rc != 0)) || rc=$r; }
  run_kueue_phase workload "${KUEUE_TESTS_WORKLOAD[@]}" || { local r=$?; ((rc != 0)) || rc=$r; }
  tests_done=$SECONDS
  run_kubeflow_crd_phase || { local r=$?; ((rc != 0)) || rc=$r; }
  local faults_start=$SECONDS
  fault_suite || { local r=$?; ((rc != 0)) || rc=$r; }
  log "faults: $((SECONDS - faults_start)) s (with a fresh cluster)"
  log "e2e: cycle check + cluster-up $((up_done - start)) s (Kueue up ${KUEUE_UP_SECONDS:-0} s)," \
    "tests $((tests_done - up_done)) s, Kubeflow's CRD phase $((SECONDS - tests_done)) s"
  return "$rc"
}

# One line: bash has read the whole script before it runs.
main "$@"; exit $?
