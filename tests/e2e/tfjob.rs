//! The TFJob controller end to end: the operator binary against the local
//! control plane, with KWOK driving Pods to Running, Succeeded or Failed.
//! Each test runs its own operator for its own namespace.
//!
//! **Length:** about 790 lines of code for 15 scenarios that share the
//! harness at the top (a namespace, its operator, and the helpers that create
//! a job and wait for a condition); each scenario reads on its own. If it
//! grows, split the scenarios by what they test, as `src/tfjob/plan_tests/`.
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use tfjob_operator::api::fixtures::TfJobFixture;
use tfjob_operator::api::types::{CleanPodPolicy, RestartPolicy, TFJob};

use crate::cluster::{client, kubectl, test_namespace, wait_until};
use crate::operator::{Operator, ensure_crd};
use crate::support::{
    EXIT_CODE_ANNOTATION, EXIT_CONTAINER_ANNOTATION, drive_pod_exit, shared_cluster,
};

const SLOW: Duration = Duration::from_secs(90);

/// A namespace with a running operator and helpers to create and observe jobs.
struct Env {
    /// Held for the whole test: no other test restarts the API server meanwhile.
    _cluster: tokio::sync::OwnedRwLockReadGuard<()>,
    client: Client,
    ns: String,
    operator: Operator,
    jobs: Api<TFJob>,
    pods: Api<Pod>,
    services: Api<Service>,
}

impl Env {
    async fn new(prefix: &str) -> Self {
        let cluster = shared_cluster().await;
        let client = client().await;
        ensure_crd(&client).await;
        let ns = test_namespace(&client, prefix).await;
        let mut operator = Operator::start(&ns);
        operator.wait_ready().await;
        Self {
            _cluster: cluster,
            jobs: Api::namespaced(client.clone(), &ns),
            pods: Api::namespaced(client.clone(), &ns),
            services: Api::namespaced(client.clone(), &ns),
            client,
            ns,
            operator,
        }
    }

    async fn create(&self, fixture: TfJobFixture) -> TFJob {
        let job = fixture.namespace(&self.ns).build();
        self.jobs
            .create(&PostParams::default(), &job)
            .await
            .unwrap_or_else(|e| panic!("failed to create the TFJob: {e}"))
    }

    async fn job(&self, name: &str) -> Option<TFJob> {
        self.jobs.get_opt(name).await.ok().flatten()
    }

    /// Waits for condition `type_` to be True.
    async fn wait_condition(&self, name: &str, type_: &str, timeout: Duration) -> TFJob {
        let what = format!(
            "TFJob {}/{name} to be {type_} (operator log: {})",
            self.ns,
            self.operator.log.display()
        );
        wait_until(&what, timeout, || async {
            let job = self.job(name).await?;
            let ok = job
                .status
                .as_ref()?
                .conditions
                .iter()
                .any(|c| c.type_ == type_ && c.status == "True");
            ok.then_some(job)
        })
        .await
    }

    async fn job_pods(&self, name: &str) -> Vec<Pod> {
        let lp = ListParams::default().labels(&format!("training.kubeflow.org/job-name={name}"));
        self.pods
            .list(&lp)
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }

    async fn job_services(&self, name: &str) -> Vec<Service> {
        let lp = ListParams::default().labels(&format!("training.kubeflow.org/job-name={name}"));
        self.services
            .list(&lp)
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }

    /// Waits until the job has exactly `n` Pods, all Running (and not terminating).
    async fn wait_running_pods(&self, name: &str, n: usize) -> Vec<Pod> {
        let what = format!("{n} running pods of {}/{name}", self.ns);
        wait_until(&what, SLOW, || async {
            let pods = self.job_pods(name).await;
            let running = pods.iter().filter(|p| is_running(p)).count();
            (pods.len() == n && running == n).then_some(pods)
        })
        .await
    }

    async fn exit(&self, pod: &str, code: i32) {
        drive_pod_exit(&self.client, &self.ns, pod, Some("tensorflow"), code).await;
    }

    /// Asks KWOK to end the Pod's `tensorflow` container without waiting to
    /// see it: for when the operator may delete the Pod at once (cleanup).
    async fn exit_no_wait(&self, pod: &str, code: i32) {
        let patch = serde_json::json!({ "metadata": { "annotations": {
            EXIT_CODE_ANNOTATION: code.to_string(),
            EXIT_CONTAINER_ANNOTATION: "tensorflow",
        } } });
        self.pods
            .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("failed to annotate {pod}: {e}"));
    }
}

fn is_running(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

fn names<T: kube::Resource>(items: &[T]) -> Vec<String> {
    let mut v: Vec<String> = items.iter().filter_map(|i| i.meta().name.clone()).collect();
    v.sort();
    v
}

fn tf_config(pod: &Pod) -> Option<serde_json::Value> {
    let c = pod
        .spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == "tensorflow")?;
    let env = c.env.as_ref()?.iter().find(|e| e.name == "TF_CONFIG")?;
    serde_json::from_str(env.value.as_deref()?).ok()
}

fn condition_types(job: &TFJob) -> Vec<(String, String)> {
    job.status
        .iter()
        .flat_map(|s| s.conditions.iter())
        .map(|c| (c.type_.clone(), c.status.clone()))
        .collect()
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn chief_ps_workers_job_runs_and_succeeds_when_the_chief_exits_zero() {
    let env = Env::new("tfjob-dist").await;
    env.create(TfJobFixture::new("dist").chief(1).ps(2).workers(4))
        .await;
    let pods = env.wait_running_pods("dist", 7).await;
    env.wait_condition("dist", "Running", SLOW).await;

    let services = env.job_services("dist").await;
    assert_eq!(
        names(&services),
        names(&pods),
        "one Service per Pod, same names"
    );
    for svc in &services {
        assert_eq!(
            svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()),
            Some("None")
        );
    }
    let expected_cluster = serde_json::json!({
        "chief": [format!("dist-chief-0.{}.svc:2222", env.ns)],
        "ps": (0..2).map(|i| format!("dist-ps-{i}.{}.svc:2222", env.ns)).collect::<Vec<_>>(),
        "worker": (0..4).map(|i| format!("dist-worker-{i}.{}.svc:2222", env.ns)).collect::<Vec<_>>(),
    });
    for pod in &pods {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let config =
            tf_config(pod).unwrap_or_else(|| panic!("no TF_CONFIG in {:?}", pod.metadata.name));
        assert_eq!(config["cluster"], expected_cluster);
        assert_eq!(
            config["task"]["type"],
            labels["training.kubeflow.org/replica-type"].as_str()
        );
        assert_eq!(
            config["task"]["index"].to_string(),
            labels["training.kubeflow.org/replica-index"]
        );
        assert_eq!(config["environment"], "cloud");
        let owner = &pod.metadata.owner_references.as_ref().expect("an owner")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("TFJob", Some(true))
        );
    }

    env.exit("dist-chief-0", 0).await;
    let job = env.wait_condition("dist", "Succeeded", SLOW).await;
    let status = job.status.expect("a status");
    assert!(status.completion_time.is_some());
    assert!(status.start_time.is_some());
    let types: Vec<String> = status.conditions.iter().map(|c| c.type_.clone()).collect();
    assert_eq!(types.first().map(String::as_str), Some("Created"));
    assert_eq!(types.last().map(String::as_str), Some("Succeeded"));
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Running" && c.status == "False")
    );
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn worker_only_job_succeeds_when_worker_zero_exits_zero() {
    let env = Env::new("tfjob-workers").await;
    env.create(TfJobFixture::new("w").workers(2)).await;
    env.wait_running_pods("w", 2).await;
    env.wait_condition("w", "Running", SLOW).await;
    env.exit("w-worker-0", 0).await;
    let job = env.wait_condition("w", "Succeeded", SLOW).await;
    let worker = &job.status.unwrap().replica_statuses["Worker"];
    // Our status additions survive the API server's schema pruning.
    assert_eq!(worker.succeeded_indexes.as_deref(), Some("0"), "{worker:?}");
    assert_eq!(
        worker.succeeded, 2,
        "the running worker is folded into succeeded, as Kubeflow does"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn exit_code_137_restarts_then_fails_past_the_backoff_limit() {
    let env = Env::new("tfjob-backoff").await;
    let job = TfJobFixture::new("b")
        .workers(2)
        .restart_policy(RestartPolicy::ExitCode)
        .backoff_limit(1);
    env.create(job).await;
    let first = env.wait_running_pods("b", 2).await;
    let uid_of = |pods: &[Pod], name: &str| {
        pods.iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .and_then(|p| p.metadata.uid.clone())
    };
    let old_uid = uid_of(&first, "b-worker-1");

    // First 137: re-created under the same name (a new UID), one restart counted.
    env.exit_no_wait("b-worker-1", 137).await;
    wait_until("b-worker-1 to be re-created and running", SLOW, || async {
        let pods = env.job_pods("b").await;
        let new = pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some("b-worker-1"))?;
        (new.metadata.uid != old_uid && is_running(new)).then_some(())
    })
    .await;
    let restarted = wait_until("the restart to be counted", SLOW, || async {
        let job = env.job("b").await?;
        let restarts = job
            .status
            .as_ref()?
            .replica_statuses
            .get("Worker")?
            .restarts;
        (restarts == 1).then_some(job)
    })
    .await;
    assert!(!condition_types(&restarted).contains(&("Failed".into(), "True".into())));

    // Second 137: past backoffLimit 1, the job fails and nothing is re-created.
    env.exit_no_wait("b-worker-1", 137).await;
    let failed = env.wait_condition("b", "Failed", SLOW).await;
    let msg = failed
        .status
        .unwrap()
        .conditions
        .last()
        .unwrap()
        .message
        .clone()
        .unwrap_or_default();
    assert!(msg.contains("backoff limit"), "{msg}");
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn active_deadline_fails_a_job_whose_pods_just_keep_running() {
    let env = Env::new("tfjob-deadline").await;
    env.create(TfJobFixture::new("d").workers(2).active_deadline_seconds(5))
        .await;
    env.wait_running_pods("d", 2).await;
    // Nothing else happens: no pod changes, no job edits. The job must still fail.
    let job = env
        .wait_condition("d", "Failed", Duration::from_secs(30))
        .await;
    let msg = job
        .status
        .unwrap()
        .conditions
        .last()
        .unwrap()
        .message
        .clone()
        .unwrap_or_default();
    assert!(msg.contains("deadline"), "{msg}");
    wait_until("the running pods to be stopped", SLOW, || async {
        env.job_pods("d")
            .await
            .iter()
            .all(|p| !is_running(p))
            .then_some(())
    })
    .await;
}

async fn clean_pod_policy_case(
    policy: CleanPodPolicy,
    expect_ps_kept: bool,
    expect_chief_kept: bool,
) {
    let env = Env::new(&format!(
        "tfjob-clean-{}",
        format!("{policy:?}").to_lowercase()
    ))
    .await;
    env.create(
        TfJobFixture::new("c")
            .chief(1)
            .ps(1)
            .clean_pod_policy(policy),
    )
    .await;
    env.wait_running_pods("c", 2).await;
    env.exit_no_wait("c-chief-0", 0).await;
    env.wait_condition("c", "Succeeded", SLOW).await;
    let what = format!("cleanPodPolicy {policy:?} to leave the right pods");
    wait_until(&what, SLOW, || async {
        let pods = env.job_pods("c").await;
        let alive = |n: &str| {
            pods.iter().any(|p| {
                p.metadata.name.as_deref() == Some(n) && p.metadata.deletion_timestamp.is_none()
            })
        };
        (alive("c-ps-0") == expect_ps_kept && alive("c-chief-0") == expect_chief_kept).then_some(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn clean_pod_policy_none_keeps_every_pod() {
    clean_pod_policy_case(CleanPodPolicy::None, true, true).await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn clean_pod_policy_running_deletes_only_running_pods() {
    clean_pod_policy_case(CleanPodPolicy::Running, false, true).await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn clean_pod_policy_all_deletes_every_pod() {
    clean_pod_policy_case(CleanPodPolicy::All, false, false).await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn ttl_deletes_the_job_after_it_finishes() {
    let env = Env::new("tfjob-ttl").await;
    env.create(
        TfJobFixture::new("t")
            .workers(1)
            .ttl_seconds_after_finished(3),
    )
    .await;
    env.wait_running_pods("t", 1).await;
    env.exit("t-worker-0", 0).await;
    env.wait_condition("t", "Succeeded", SLOW).await;
    wait_until(
        "the TTL to delete the job",
        Duration::from_secs(30),
        || async { env.job("t").await.is_none().then_some(()) },
    )
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn suspend_deletes_pods_and_resume_recreates_them() {
    let env = Env::new("tfjob-suspend").await;
    env.create(TfJobFixture::new("s").workers(2)).await;
    env.wait_running_pods("s", 2).await;
    let before = env.wait_condition("s", "Running", SLOW).await;
    let start_before = before
        .status
        .and_then(|s| s.start_time)
        .expect("a start time");

    let patch =
        |suspend: bool| serde_json::json!({ "spec": { "runPolicy": { "suspend": suspend } } });
    env.jobs
        .patch("s", &PatchParams::default(), &Patch::Merge(patch(true)))
        .await
        .expect("suspend");
    env.wait_condition("s", "Suspended", SLOW).await;
    wait_until("the pods and services to go", SLOW, || async {
        (env.job_pods("s").await.is_empty() && env.job_services("s").await.is_empty()).then_some(())
    })
    .await;

    tokio::time::sleep(Duration::from_millis(1100)).await; // startTime has second precision
    env.jobs
        .patch("s", &PatchParams::default(), &Patch::Merge(patch(false)))
        .await
        .expect("resume");
    env.wait_running_pods("s", 2).await;
    let resumed = env.wait_condition("s", "Running", SLOW).await;
    let status = resumed.status.expect("a status");
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Suspended" && c.status == "False")
    );
    assert!(
        status.start_time.expect("a start time").0 > start_before.0,
        "resume resets startTime"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn workers_scale_up_and_down_live() {
    let env = Env::new("tfjob-scale").await;
    env.create(TfJobFixture::new("sc").chief(1).workers(2))
        .await;
    env.wait_running_pods("sc", 3).await;
    let scale = |n: i32| serde_json::json!({ "spec": { "tfReplicaSpecs": { "Worker": { "replicas": n } } } });
    env.jobs
        .patch("sc", &PatchParams::default(), &Patch::Merge(scale(4)))
        .await
        .expect("scale up");
    let pods = env.wait_running_pods("sc", 5).await;
    assert!(names(&pods).contains(&"sc-worker-3".to_owned()));
    env.jobs
        .patch("sc", &PatchParams::default(), &Patch::Merge(scale(1)))
        .await
        .expect("scale down");
    let pods = env.wait_running_pods("sc", 2).await;
    assert_eq!(names(&pods), ["sc-chief-0", "sc-worker-0"]);
    wait_until("the extra services to go", SLOW, || async {
        (names(&env.job_services("sc").await) == ["sc-chief-0", "sc-worker-0"]).then_some(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn deleting_the_job_removes_every_child() {
    let env = Env::new("tfjob-delete").await;
    env.create(TfJobFixture::new("del").chief(1).workers(2))
        .await;
    env.wait_running_pods("del", 3).await;
    let out = kubectl()
        .args(["delete", "tfjob", "del", "-n", &env.ns, "--wait=false"])
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("garbage collection to remove every child", SLOW, || async {
        (env.job_pods("del").await.is_empty() && env.job_services("del").await.is_empty())
            .then_some(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn killing_the_operator_mid_creation_leaves_one_pod_per_index() {
    let mut env = Env::new("tfjob-crash").await;
    env.create(TfJobFixture::new("big").workers(40)).await;
    // Kill it as soon as the first Pods appear: creation is under way.
    wait_until("creation to start", SLOW, || async {
        (!env.job_pods("big").await.is_empty()).then_some(())
    })
    .await;
    env.operator.kill();
    let mut second = Operator::start_with(&env.ns, &["--leader-elect=false"], None);
    second.wait_ready().await;
    let pods = env.wait_running_pods("big", 40).await;
    let mut indexes: Vec<String> = pods
        .iter()
        .filter_map(|p| {
            p.metadata
                .labels
                .as_ref()?
                .get("training.kubeflow.org/replica-index")
                .cloned()
        })
        .collect();
    indexes.sort();
    indexes.dedup();
    assert_eq!(indexes.len(), 40, "exactly one Pod per index");
    // The Services may still be being created when the last Pod runs.
    let services = wait_until("40 Services", SLOW, || async {
        let n = env.job_services("big").await.len();
        (n >= 40).then_some(n)
    })
    .await;
    assert_eq!(services, 40, "exactly one Service per index");
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn a_matching_orphan_pod_is_adopted_not_duplicated() {
    let env = Env::new("tfjob-adopt").await;
    // Stop the operator, create the job and a matching orphan Pod, restart.
    let mut env = env;
    env.operator.kill();
    let job = env.create(TfJobFixture::new("a").workers(1)).await;
    let mut orphan: Pod = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "a-worker-0", "labels": {
            "training.kubeflow.org/job-name": "a",
            "training.kubeflow.org/replica-type": "worker",
            "training.kubeflow.org/replica-index": "0",
            "training.kubeflow.org/operator-name": "tfjob-controller" } },
        "spec": { "containers": [{ "name": "tensorflow", "image": "tensorflow/tensorflow:2.16.1" }] }
    }))
    .expect("a valid Pod");
    orphan.metadata.namespace = Some(env.ns.clone());
    env.pods
        .create(&PostParams::default(), &orphan)
        .await
        .expect("the orphan");
    let mut operator = Operator::start_with(&env.ns, &["--leader-elect=false"], None);
    operator.wait_ready().await;
    let uid = job.metadata.uid.clone();
    wait_until("the orphan to be adopted", SLOW, || async {
        let pod = env.pods.get_opt("a-worker-0").await.ok().flatten()?;
        let owner = pod
            .metadata
            .owner_references?
            .into_iter()
            .find(|o| o.controller == Some(true))?;
        (Some(owner.uid) == uid).then_some(())
    })
    .await;
    assert_eq!(env.job_pods("a").await.len(), 1);
}

/// Invalid manifests are refused by `kubectl apply`, each with a message naming its field.
#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn invalid_manifests_are_refused_with_a_message_naming_the_field() {
    let _cluster = shared_cluster().await;
    let client = client().await;
    ensure_crd(&client).await;
    let ns = test_namespace(&client, "tfjob-invalid").await;
    let worker = |extra: serde_json::Value| {
        let mut w = serde_json::json!({
            "replicas": 1,
            "template": { "spec": { "containers": [{ "name": "tensorflow", "image": "tensorflow/tensorflow:2.16.1" }] } }
        });
        merge(&mut w, extra);
        w
    };
    let job = |name: &str, specs: serde_json::Value, run_policy: serde_json::Value| {
        serde_json::json!({
            "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
            "metadata": { "name": name },
            "spec": { "tfReplicaSpecs": specs, "runPolicy": run_policy }
        })
    };
    let none = serde_json::json!({});
    let cases: Vec<(&str, serde_json::Value, &str)> = vec![
        (
            "unknown replica type",
            job(
                "bad-type",
                serde_json::json!({ "Launcher": worker(none.clone()) }),
                none.clone(),
            ),
            "keys must be Chief, Master, Worker, PS or Evaluator",
        ),
        (
            "chief and master",
            job(
                "two-chiefs",
                serde_json::json!({ "Chief": worker(none.clone()), "Master": worker(none.clone()) }),
                none.clone(),
            ),
            "at most one Chief or Master",
        ),
        (
            "negative replicas",
            job(
                "neg",
                serde_json::json!({ "Worker": worker(serde_json::json!({ "replicas": -1 })) }),
                none.clone(),
            ),
            "should be greater than or equal to 0",
        ),
        (
            "unknown restart policy",
            job(
                "rp",
                serde_json::json!({ "Worker": worker(serde_json::json!({ "restartPolicy": "Sometimes" })) }),
                none.clone(),
            ),
            "Unsupported value: \"Sometimes\"",
        ),
        (
            "no tensorflow container",
            job(
                "no-tf",
                serde_json::json!({ "Worker": worker(serde_json::json!({ "template": { "spec": { "containers": [{ "name": "main", "image": "x" }] } } })) }),
                none.clone(),
            ),
            "one container must be named 'tensorflow'",
        ),
        (
            "empty image",
            job(
                "no-image",
                serde_json::json!({ "Worker": worker(serde_json::json!({ "template": { "spec": { "containers": [{ "name": "tensorflow", "image": "" }] } } })) }),
                none.clone(),
            ),
            "every container needs a non-empty image",
        ),
        (
            "no containers",
            job(
                "no-containers",
                serde_json::json!({ "Worker": worker(serde_json::json!({ "template": { "spec": { "containers": [] } } })) }),
                none.clone(),
            ),
            "containers",
        ),
        (
            "name too long",
            job(
                &"x".repeat(60),
                serde_json::json!({ "Worker": worker(none.clone()) }),
                none.clone(),
            ),
            "shorten the TFJob name",
        ),
        (
            "name not a DNS-1035 label",
            job(
                "1abc",
                serde_json::json!({ "Worker": worker(none.clone()) }),
                none.clone(),
            ),
            "must be a DNS-1035 label",
        ),
        (
            "unknown cleanPodPolicy",
            job(
                "cpp",
                serde_json::json!({ "Worker": worker(none.clone()) }),
                serde_json::json!({ "cleanPodPolicy": "Some" }),
            ),
            "Unsupported value: \"Some\"",
        ),
        (
            "foreign managedBy",
            job(
                "mb",
                serde_json::json!({ "Worker": worker(none.clone()) }),
                serde_json::json!({ "managedBy": "someone/else" }),
            ),
            "must be kubeflow.org/training-operator or kueue.x-k8s.io/multikueue",
        ),
        // The four a hand check found accepted (issue #20).
        (
            "two chief replicas",
            job(
                "chief2",
                serde_json::json!({ "Chief": worker(serde_json::json!({ "replicas": 2 })) }),
                none.clone(),
            ),
            "spec.tfReplicaSpecs.Chief.replicas: a Chief or Master has at most 1 replica",
        ),
        (
            "zero activeDeadlineSeconds",
            job(
                "deadline0",
                serde_json::json!({ "Worker": worker(none.clone()) }),
                serde_json::json!({ "activeDeadlineSeconds": 0 }),
            ),
            "spec.runPolicy.activeDeadlineSeconds: Invalid value: 0: spec.runPolicy.activeDeadlineSeconds in body should be greater than or equal to 1",
        ),
        (
            "port out of range",
            job(
                "port",
                serde_json::json!({ "Worker": worker(serde_json::json!({ "template": { "spec": { "containers": [{ "name": "tensorflow", "image": "x", "ports": [{ "name": "tfjob-port", "containerPort": 70000 }] }] } } })) }),
                none.clone(),
            ),
            "containerPort in body should be less than or equal to 65535",
        ),
        (
            "negative minAvailable",
            job(
                "minavail",
                serde_json::json!({ "Worker": worker(none.clone()) }),
                serde_json::json!({ "schedulingPolicy": { "minAvailable": -1 } }),
            ),
            "spec.runPolicy.schedulingPolicy.minAvailable in body should be greater than or equal to 0",
        ),
    ];
    for (case, manifest, message) in cases {
        let stderr = kubectl_apply(&ns, &manifest, false);
        assert!(
            stderr.contains(message),
            "{case}: expected {message:?} in:\n{stderr}"
        );
    }

    // managedBy is immutable.
    let mb = job(
        "mb-ok",
        serde_json::json!({ "Worker": worker(none.clone()) }),
        serde_json::json!({ "managedBy": "kueue.x-k8s.io/multikueue" }),
    );
    kubectl_apply(&ns, &mb, true);
    let mut changed = mb.clone();
    changed["spec"]["runPolicy"]["managedBy"] = "kubeflow.org/training-operator".into();
    let stderr = kubectl_apply(&ns, &changed, false);
    assert!(
        stderr.contains("spec.runPolicy.managedBy: is immutable"),
        "{stderr}"
    );
    // Nor can it be removed, or set on a job created without it (Kubernetes
    // Jobs and Kubeflow refuse both; a rule on the field itself cannot see it).
    let mut removed = mb.clone();
    removed["spec"]["runPolicy"] = serde_json::json!({});
    let stderr = kubectl_apply(&ns, &removed, false);
    assert!(
        stderr.contains("spec.runPolicy.managedBy: is immutable"),
        "{stderr}"
    );
    let plain = job(
        "mb-unset",
        serde_json::json!({ "Worker": worker(none.clone()) }),
        none.clone(),
    );
    kubectl_apply(&ns, &plain, true);
    let mut set_later = plain.clone();
    set_later["spec"]["runPolicy"] =
        serde_json::json!({ "managedBy": "kueue.x-k8s.io/multikueue" });
    let stderr = kubectl_apply(&ns, &set_later, false);
    assert!(
        stderr.contains("spec.runPolicy.managedBy: is immutable"),
        "{stderr}"
    );
}

fn merge(base: &mut serde_json::Value, extra: serde_json::Value) {
    if let (Some(b), serde_json::Value::Object(e)) = (base.as_object_mut(), extra) {
        for (k, v) in e {
            b.insert(k, v);
        }
    }
}

/// `kubectl apply -n ns -f -` with `manifest`; asserts success or failure and returns stderr.
fn kubectl_apply(ns: &str, manifest: &serde_json::Value, should_succeed: bool) -> String {
    use std::io::Write;
    let mut child = kubectl()
        .args(["apply", "-n", ns, "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(manifest.to_string().as_bytes())
        .expect("write the manifest");
    let out = child.wait_with_output().expect("kubectl finishes");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.success(),
        should_succeed,
        "kubectl apply of {manifest}: {stderr}"
    );
    stderr
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn job_metrics_count_each_job_once_even_across_operator_restarts() {
    let mut env = Env::new("tfjob-metrics").await;
    env.create(TfJobFixture::new("m").workers(2)).await;
    env.wait_running_pods("m", 2).await;
    env.wait_condition("m", "Running", SLOW).await;
    let created = format!(
        "training_operator_jobs_created_total{{job_namespace=\"{}\",framework=\"tensorflow\"}} 1",
        env.ns
    );
    // Counted once the status write that added `Created` has returned to
    // the operator, which can be after a watch shows the condition: poll.
    let operator = &env.operator;
    let metrics = wait_until("the job to be counted as created", SLOW, || async {
        let m = operator.metrics();
        m.contains(&created).then_some(m)
    })
    .await;
    assert!(metrics.contains("workqueue_adds_total"), "{metrics}");
    assert!(
        metrics.contains("controller_runtime_reconcile_total"),
        "{metrics}"
    );

    // A new operator process relists the job: it must not count it again.
    env.operator.kill();
    let mut second = Operator::start_with(&env.ns, &["--leader-elect=false"], None);
    second.wait_ready().await;
    env.exit("m-worker-0", 0).await;
    env.wait_condition("m", "Succeeded", SLOW).await;
    let successful = format!(
        "training_operator_jobs_successful_total{{job_namespace=\"{}\",framework=\"tensorflow\"}} 1",
        env.ns
    );
    let metrics = wait_until("the success to be counted", SLOW, || async {
        let m = second.metrics();
        m.contains(&successful).then_some(m)
    })
    .await;
    assert!(
        !metrics.contains("training_operator_jobs_created_total{"),
        "the restarted operator re-counted the job as created:\n{metrics}"
    );
    assert!(
        metrics.contains("tfjob_operator_job_duration_seconds_count"),
        "{metrics}"
    );
}
