//! The manifests in `examples/` are documentation that must stay true: each
//! applies unchanged with `kubectl apply -f`, and, with an operator watching
//! the namespace, behaves as the comment at its top says. KWOK plays the
//! Pods, so a "training run" here is a Pod that KWOK makes Running and that
//! the test ends with the exit code the story needs (`drive_pod_exit`).
//!
//! What these tests must never do: edit an example before applying it (the
//! point is that users can apply them as they are), or share a namespace or
//! an operator between examples, or run without holding
//! `support::shared_cluster` (another test's API server restart would look
//! like an operator bug).
//!
//! Mirrors: kubeflow/training-operator's `sdk/python/test/e2e/test_e2e_tfjob.py`
//! (create a job, wait for its conditions) and the example checks of
//! kubernetes/examples (`examples_test.go`: every manifest must parse and apply).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use tfjob_operator::api::constants::LABEL_JOB_NAME;
use tfjob_operator::api::types::TFJob;
use tokio::time::Instant;

use crate::cluster::{client, kubectl, run_ok, test_namespace, wait_until};
use crate::operator::{Operator, ensure_crd};
use crate::support::{
    EXIT_CODE_ANNOTATION, EXIT_CONTAINER_ANNOTATION, drive_pod_exit, shared_cluster,
};
use crate::support::{condition, wait_condition};

/// Every example and the test below that checks its story. A new file in
/// `examples/` fails `every_example_applies_unchanged` until it is listed
/// here with a test.
const EXAMPLES: [&str; 6] = [
    "tfjob-simple.yaml",           // two_worker_job_...
    "dist-mnist.yaml",             // dist_mnist_...
    "multi-worker-evaluator.yaml", // multi_worker_...
    "exit-code-restart.yaml",      // exit_code_...
    "suspended.yaml",              // suspended_...
    "ttl.yaml",                    // ttl_...
];

/// How long the operator may take to react to one change (create Pods, write
/// a status). Generous: the suite runs many tests at once on 2 cores.
const REACT: Duration = Duration::from_secs(60);

pub fn examples_dir() -> PathBuf {
    crate::cluster::repo_dir().join("examples")
}

pub fn example(file: &str) -> PathBuf {
    examples_dir().join(file)
}

/// `kubectl apply -n <ns> -f examples/<file>`, exactly as the README says.
pub fn apply_example(ns: &str, file: &str) {
    let path = example(file);
    run_ok(kubectl().args(["apply", "-n", ns, "-f"]).arg(&path));
}

/// The job's Pods (by the `training.kubeflow.org/job-name` label), by name.
pub async fn job_pods(client: &Client, ns: &str, job: &str) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let params = ListParams::default().labels(&format!("{LABEL_JOB_NAME}={job}"));
    let mut list = pods
        .list(&params)
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    list.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    list
}

fn pod_name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

fn is_running(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// Waits until exactly `names` are the job's Pods and all are Running.
pub async fn wait_pods_running(client: &Client, ns: &str, job: &str, names: &[&str]) -> Vec<Pod> {
    let want: BTreeSet<String> = names.iter().map(|n| n.to_string()).collect();
    wait_until(
        &format!("the Pods {names:?} of {ns}/{job} to be Running"),
        REACT,
        || async {
            let pods = job_pods(client, ns, job).await;
            let have: BTreeSet<String> = pods.iter().map(pod_name).collect();
            (have == want && pods.iter().all(is_running)).then_some(pods)
        },
    )
    .await
}

/// Waits until the job's Pods are exactly `names` (terminating Pods count as gone).
async fn wait_pods_exactly(client: &Client, ns: &str, job: &str, names: &[&str]) {
    let want: BTreeSet<String> = names.iter().map(|n| n.to_string()).collect();
    wait_until(
        &format!("the Pods of {ns}/{job} to be exactly {names:?}"),
        REACT,
        || async {
            let have: BTreeSet<String> = job_pods(client, ns, job)
                .await
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .map(pod_name)
                .collect();
            (have == want).then_some(())
        },
    )
    .await;
}

/// An operator for `ns` (admin identity), ready (caches synced).
async fn operator_for(ns: &str) -> Operator {
    let mut operator = Operator::start(ns);
    operator.wait_ready().await;
    operator
}

async fn namespace_with_crd(prefix: &str) -> (Client, String) {
    let client = client().await;
    ensure_crd(&client).await;
    let ns = test_namespace(&client, prefix).await;
    (client, ns)
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn every_example_applies_unchanged_and_is_covered_by_a_test() {
    // No API server restarts or etcd compactions from other tests meanwhile.
    let _cluster = shared_cluster().await;
    let (client, ns) = namespace_with_crd("examples-apply").await;

    let mut files: Vec<String> = std::fs::read_dir(examples_dir())
        .expect("the examples directory")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".yaml") || f.ends_with(".yml"))
        .collect();
    files.sort();
    let mut listed: Vec<String> = EXAMPLES.iter().map(|f| f.to_string()).collect();
    listed.sort();
    assert_eq!(
        files, listed,
        "every examples/*.yaml needs a behaviour test here (and EXAMPLES must name only real files)"
    );

    let mut names = BTreeSet::new();
    for file in EXAMPLES {
        let text = std::fs::read_to_string(example(file)).expect("an example file");
        assert!(
            text.starts_with("# "),
            "{file} must open with a comment saying what it shows and what happens"
        );
        let job: TFJob = serde_yaml::from_str(&text)
            .unwrap_or_else(|e| panic!("{file} is not a TFJob the operator's types read: {e}"));
        assert!(
            job.metadata.namespace.is_none(),
            "{file} must not pin a namespace (users apply it with -n)"
        );
        let name = job.metadata.name.clone().expect("a fixed metadata.name");
        assert!(names.insert(name.clone()), "two examples are named {name}");
        apply_example(&ns, file);
    }

    // Everything applied is stored as written: no validation rejected any.
    let jobs: Api<TFJob> = Api::namespaced(client.clone(), &ns);
    let stored: BTreeSet<String> = jobs
        .list(&ListParams::default())
        .await
        .expect("failed to list TFJobs")
        .items
        .into_iter()
        .filter_map(|j| j.metadata.name)
        .collect();
    assert_eq!(stored, names);
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn two_worker_job_runs_then_succeeds_once_worker_0_exits_0() {
    // No API server restarts or etcd compactions from other tests meanwhile.
    let _cluster = shared_cluster().await;
    let (client, ns) = namespace_with_crd("ex-simple").await;
    let _operator = operator_for(&ns).await;
    apply_example(&ns, "tfjob-simple.yaml");

    let workers = ["tfjob-simple-worker-0", "tfjob-simple-worker-1"];
    wait_pods_running(&client, &ns, "tfjob-simple", &workers).await;
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    for name in workers {
        let svc = services.get(name).await.expect("a Service per replica");
        let cluster_ip = svc.spec.and_then(|s| s.cluster_ip);
        assert_eq!(cluster_ip.as_deref(), Some("None"), "{name} is headless");
    }
    wait_condition(&client, &ns, "tfjob-simple", "Running", "True").await;

    drive_pod_exit(&client, &ns, workers[0], Some("tensorflow"), 0).await;
    let job = wait_condition(&client, &ns, "tfjob-simple", "Succeeded", "True").await;
    let status = job.status.expect("a status");
    assert!(
        status.completion_time.is_some(),
        "completionTime is set on success"
    );
    let running = status.conditions.iter().find(|c| c.type_ == "Running");
    assert!(
        running.is_none_or(|c| c.status == "False"),
        "Running flips to False on success: {:?}",
        status.conditions
    );
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn dist_mnist_succeeds_with_its_chief_and_then_deletes_the_running_ps_and_workers() {
    // No API server restarts or etcd compactions from other tests meanwhile.
    let _cluster = shared_cluster().await;
    let (client, ns) = namespace_with_crd("ex-dist-mnist").await;
    let _operator = operator_for(&ns).await;
    apply_example(&ns, "dist-mnist.yaml");

    let chief = "dist-mnist-chief-0";
    let all = [
        chief,
        "dist-mnist-ps-0",
        "dist-mnist-worker-0",
        "dist-mnist-worker-1",
    ];
    wait_pods_running(&client, &ns, "dist-mnist", &all).await;
    wait_condition(&client, &ns, "dist-mnist", "Running", "True").await;

    drive_pod_exit(&client, &ns, chief, Some("tensorflow"), 0).await;
    wait_condition(&client, &ns, "dist-mnist", "Succeeded", "True").await;
    // cleanPodPolicy: Running: the PS and Workers (still running) go; the
    // finished Chief stays for its logs.
    wait_pods_exactly(&client, &ns, "dist-mnist", &[chief]).await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn multi_worker_job_succeeds_only_when_every_worker_has_and_ignores_its_evaluator() {
    // No API server restarts or etcd compactions from other tests meanwhile.
    let _cluster = shared_cluster().await;
    let (client, ns) = namespace_with_crd("ex-multi-worker").await;
    let _operator = operator_for(&ns).await;
    apply_example(&ns, "multi-worker-evaluator.yaml");

    let evaluator = "multi-worker-evaluator-0";
    let workers = ["multi-worker-worker-0", "multi-worker-worker-1"];
    wait_pods_running(
        &client,
        &ns,
        "multi-worker",
        &[evaluator, workers[0], workers[1]],
    )
    .await;
    wait_condition(&client, &ns, "multi-worker", "Running", "True").await;

    // worker-0 alone is not enough under successPolicy: AllWorkers. The
    // status counting it succeeded is the operator's word that it saw it.
    drive_pod_exit(&client, &ns, workers[0], Some("tensorflow"), 0).await;
    let jobs: Api<TFJob> = Api::namespaced(client.clone(), &ns);
    let job = wait_until("the status to count worker-0 succeeded", REACT, || async {
        let job = jobs.get("multi-worker").await.ok()?;
        let succeeded = job
            .status
            .as_ref()?
            .replica_statuses
            .get("Worker")?
            .succeeded;
        (succeeded == 1).then_some(job)
    })
    .await;
    assert!(
        condition(&job, "Succeeded").is_none_or(|c| c.status != "True"),
        "one of two Workers done must not succeed an AllWorkers job: {:?}",
        job.status
    );

    drive_pod_exit(&client, &ns, workers[1], Some("tensorflow"), 0).await;
    wait_condition(&client, &ns, "multi-worker", "Succeeded", "True").await;
    // The Evaluator never finishes on its own: cleanPodPolicy: Running removes it.
    wait_pods_exactly(&client, &ns, "multi-worker", &workers).await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn exit_code_job_recreates_a_worker_killed_with_137_and_still_succeeds() {
    // No API server restarts or etcd compactions from other tests meanwhile.
    let _cluster = shared_cluster().await;
    let (client, ns) = namespace_with_crd("ex-exit-code").await;
    let _operator = operator_for(&ns).await;
    apply_example(&ns, "exit-code-restart.yaml");

    let workers = ["exit-code-worker-0", "exit-code-worker-1"];
    let pods = wait_pods_running(&client, &ns, "exit-code", &workers).await;
    let first_uid = pods[1].metadata.uid.clone().expect("a uid");

    // ExitCode runs Pods with restartPolicy Never: the kill fails the Pod,
    // and the operator (not the kubelet) brings the replica back. Only ask
    // KWOK for the exit here: `drive_pod_exit` would wait to see the failed
    // Pod, which the operator may already have deleted and re-created.
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let kill = serde_json::json!({ "metadata": { "annotations": {
        EXIT_CODE_ANNOTATION: "137",
        EXIT_CONTAINER_ANNOTATION: "tensorflow",
    } } });
    pods_api
        .patch(workers[1], &PatchParams::default(), &Patch::Merge(&kill))
        .await
        .expect("failed to annotate worker-1 for KWOK");
    wait_until(
        "worker-1 to be re-created (a new Pod, Running)",
        REACT,
        || async {
            let pod = pods_api.get(workers[1]).await.ok()?;
            let fresh = pod.metadata.uid.as_deref() != Some(first_uid.as_str());
            (fresh && is_running(&pod)).then_some(())
        },
    )
    .await;
    let jobs: Api<TFJob> = Api::namespaced(client.clone(), &ns);
    let job = jobs.get("exit-code").await.expect("the job");
    let status = job.status.expect("a status");
    assert!(
        condition_is_not_true(&status.conditions, "Failed"),
        "137 is retryable: {:?}",
        status.conditions
    );
    let restarts = status
        .replica_statuses
        .get("Worker")
        .map_or(0, |r| r.restarts);
    assert!(
        restarts >= 1,
        "the re-creation counts as a restart: {status:?}"
    );

    drive_pod_exit(&client, &ns, workers[0], Some("tensorflow"), 0).await;
    wait_condition(&client, &ns, "exit-code", "Succeeded", "True").await;
}

fn condition_is_not_true(
    conditions: &[tfjob_operator::api::types::JobCondition],
    type_: &str,
) -> bool {
    conditions
        .iter()
        .all(|c| c.type_ != type_ || c.status != "True")
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn suspended_job_has_no_pods_until_resumed() {
    // No API server restarts or etcd compactions from other tests meanwhile.
    let _cluster = shared_cluster().await;
    let (client, ns) = namespace_with_crd("ex-suspended").await;
    let _operator = operator_for(&ns).await;
    apply_example(&ns, "suspended.yaml");

    let job = wait_condition(&client, &ns, "suspended", "Suspended", "True").await;
    let reason = condition(&job, "Suspended").and_then(|c| c.reason.clone());
    assert_eq!(reason.as_deref(), Some("TFJobSuspended"));
    // The operator has reconciled the job (it wrote Suspended): it created nothing.
    assert!(job_pods(&client, &ns, "suspended").await.is_empty());
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let params = ListParams::default().labels(&format!("{LABEL_JOB_NAME}=suspended"));
    let svcs = services
        .list(&params)
        .await
        .expect("failed to list Services");
    assert!(svcs.items.is_empty(), "a suspended job has no Services");

    // Resume exactly as the example's comment says.
    let jobs: Api<TFJob> = Api::namespaced(client.clone(), &ns);
    let resume = serde_json::json!({ "spec": { "runPolicy": { "suspend": false } } });
    jobs.patch("suspended", &PatchParams::default(), &Patch::Merge(&resume))
        .await
        .expect("failed to resume the job");
    wait_pods_running(
        &client,
        &ns,
        "suspended",
        &["suspended-worker-0", "suspended-worker-1"],
    )
    .await;
    let job = wait_condition(&client, &ns, "suspended", "Suspended", "False").await;
    let reason = condition(&job, "Suspended").and_then(|c| c.reason.clone());
    assert_eq!(reason.as_deref(), Some("TFJobResumed"));
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn ttl_job_is_deleted_with_its_pods_about_20_seconds_after_it_succeeds() {
    // No API server restarts or etcd compactions from other tests meanwhile.
    let _cluster = shared_cluster().await;
    let (client, ns) = namespace_with_crd("ex-ttl").await;
    let _operator = operator_for(&ns).await;
    apply_example(&ns, "ttl.yaml");

    wait_pods_running(&client, &ns, "ttl", &["ttl-worker-0"]).await;
    drive_pod_exit(&client, &ns, "ttl-worker-0", Some("tensorflow"), 0).await;
    wait_condition(&client, &ns, "ttl", "Succeeded", "True").await;
    let seen_succeeded = Instant::now();

    let jobs: Api<TFJob> = Api::namespaced(client.clone(), &ns);
    wait_until(
        "the TFJob to be deleted after its TTL",
        Duration::from_secs(20) + REACT,
        || async { jobs.get_opt("ttl").await.ok()?.is_none().then_some(()) },
    )
    .await;
    // Not early: completionTime (whole seconds) + 20 s, and we saw the
    // success at most a poll or two after completionTime.
    let waited = seen_succeeded.elapsed();
    assert!(
        waited >= Duration::from_secs(17),
        "deleted {waited:?} after success, before its 20 s TTL"
    );
    // Its Pod and Service follow through their ownerReferences.
    wait_until("the job's Pod to be garbage-collected", REACT, || async {
        job_pods(&client, &ns, "ttl").await.is_empty().then_some(())
    })
    .await;
}
