//! MultiKueue across two local control planes (`e2e/multikueue.sh`): a TFJob
//! submitted to the **manager** with `spec.managedBy: kueue.x-k8s.io/multikueue`
//! is dispatched by Kueue's generic adapter (`multiKueue.externalFrameworks`)
//! to the **worker**, where our operator runs it, and its status comes back.
//!
//! Each test makes, in a namespace of the same name on both clusters: on the
//! worker a ResourceFlavor for its KWOK nodes, a ClusterQueue with 2 cpu and
//! the LocalQueue `queue`; on the manager a ClusterQueue with the same quota
//! and the admission check `multikueue` (which `e2e/multikueue.sh up` made),
//! and the LocalQueue `queue`. Our operator runs on both, `--kueue=workload`:
//! on the manager it makes the job's Workload (Kueue's built-in is off) and
//! nothing else; on the worker it adopts the Workload MultiKueue made there
//! (`kueue.x-k8s.io/prebuilt-workload-name`) and runs the job.
//!
//! - the job runs on the worker only, and the manager's copy shows the
//!   worker's status up to `Succeeded` (its Workload `Finished`);
//! - deleting the job on the manager deletes it, and its Workload, on the worker;
//! - only `spec.managedBy` dispatches: with `runPolicy.managedBy` alone Kueue
//!   rejects the job ("Expecting .spec.managedBy ..."), with both the worker's
//!   copy keeps `runPolicy.managedBy` and its operator warns instead of running it;
//! - the worker cut off from the manager mid-run (its proxy stopped): with its
//!   only worker gone, Kueue v0.17.0 keeps the job admitted (the
//!   MultiKueueCluster goes inactive; the Workload reconciler finds no active
//!   cluster and retries, so `workerLostTimeout` never fires), and once the
//!   worker is back the run it went on with is mirrored to the end.
//!   docs/kueue.md says what Kueue does with two workers (requeue after
//!   `workerLostTimeout`).
//!
//! Without the setup the tests say so and pass, unless `TFJOB_E2E_MULTIKUEUE`
//! is set (`make e2e-multikueue` sets it).
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;
use tfjob_operator::api::fixtures::TfJobFixture;
use tfjob_operator::api::types::TFJob;
use tokio::sync::RwLock;

use crate::cluster::{random_suffix, wait_until};
use crate::kueue::{TOLERATION_KEY, has_condition, is_running};
use crate::operator::Operator;
use crate::support::drive_pod_exit;
use crate::test_kueue::{create_kueue_object, kueue_api};

const SLOW: Duration = Duration::from_secs(120);
const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
const ORIGIN_LABEL: &str = "kueue.x-k8s.io/multikueue-origin";
const PREBUILT_LABEL: &str = "kueue.x-k8s.io/prebuilt-workload-name";
const JOB_NAME_LABEL: &str = "training.kubeflow.org/job-name";
const MULTIKUEUE: &str = "kueue.x-k8s.io/multikueue";

/// The cut test takes the worker away from every test: it runs alone.
static CONNECTION: LazyLock<Arc<RwLock<()>>> = LazyLock::new(|| Arc::new(RwLock::new(())));

/// `$TFJOB_MULTIKUEUE_DIR`, default `<repo>/.cluster-multikueue`.
fn base_dir() -> PathBuf {
    std::env::var_os("TFJOB_MULTIKUEUE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cluster-multikueue"))
}

/// Whether `e2e/multikueue.sh up` ran; a panic when the harness promised it.
fn set_up() -> bool {
    let base = base_dir();
    let up = ["manager/kubeconfig", "worker/kubeconfig", "proxy.port"]
        .iter()
        .all(|f| base.join(f).exists());
    if !up {
        assert!(
            std::env::var("TFJOB_E2E_MULTIKUEUE").is_err(),
            "TFJOB_E2E_MULTIKUEUE is set but there is no MultiKueue setup in {}",
            base.display()
        );
        eprintln!("skipping: no MultiKueue setup (start it with `bash e2e/multikueue.sh up`)");
    }
    up
}

async fn client_for(kubeconfig: &PathBuf) -> Client {
    let text = Kubeconfig::read_from(kubeconfig)
        .unwrap_or_else(|e| panic!("failed to read {}: {e}", kubeconfig.display()));
    let config = Config::from_custom_kubeconfig(text, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("failed to load {}: {e}", kubeconfig.display()));
    Client::try_from(config).expect("failed to build a kube client")
}

fn multikueue_sh(command: &str) {
    let status = Command::new("bash")
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("e2e/multikueue.sh"))
        .arg(command)
        .env("TFJOB_MULTIKUEUE_DIR", base_dir())
        .status()
        .expect("run e2e/multikueue.sh");
    assert!(status.success(), "e2e/multikueue.sh {command} failed");
}

/// Gives the worker back to the manager, also when the test fails: the
/// other tests need it.
struct ReconnectOnDrop;

impl Drop for ReconnectOnDrop {
    fn drop(&mut self) {
        multikueue_sh("reconnect");
    }
}

/// One cluster of the two, with its operator for the test's namespace.
struct Side {
    client: Client,
    operator: Operator,
}

impl Side {
    async fn start(name: &str, ns: &str) -> Self {
        let kubeconfig = base_dir().join(name).join("kubeconfig");
        let client = client_for(&kubeconfig).await;
        let namespace: Namespace = serde_json::from_value(json!({ "metadata": { "name": ns } }))
            .expect("a valid Namespace");
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap_or_else(|e| panic!("failed to create namespace {ns} on the {name}: {e}"));
        let mut operator = Operator::start_with(ns, &["--kueue=workload"], Some(kubeconfig));
        operator.wait_ready().await;
        Self { client, operator }
    }

    fn jobs(&self, ns: &str) -> Api<TFJob> {
        Api::namespaced(self.client.clone(), ns)
    }

    async fn job(&self, ns: &str, name: &str) -> Option<TFJob> {
        self.jobs(ns).get_opt(name).await.ok().flatten()
    }

    async fn pods(&self, ns: &str, job: &str) -> Vec<Pod> {
        let lp = ListParams::default().labels(&format!("{JOB_NAME_LABEL}={job}"));
        Api::<Pod>::namespaced(self.client.clone(), ns)
            .list(&lp)
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }

    async fn workloads(&self, ns: &str) -> Vec<DynamicObject> {
        kueue_api(&self.client, "Workload", "workloads", Some(ns))
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }
}

/// Both clusters set up for one test.
struct Env {
    ns: String,
    manager: Side,
    worker: Side,
    cluster_queue: String,
    flavor: String,
}

impl Env {
    async fn new(prefix: &str) -> Option<Self> {
        if !set_up() {
            return None;
        }
        let suffix = random_suffix();
        let ns = format!("{prefix}-{suffix}");
        let manager = Side::start("manager", &ns).await;
        let worker = Side::start("worker", &ns).await;
        let flavor = format!("e2e-mk-{suffix}");
        let cluster_queue = format!("e2e-{prefix}-{suffix}");
        for (side, node_labels, checks) in [
            (&worker, json!({ "type": "kwok" }), None),
            (
                &manager,
                json!({}),
                Some(json!({ "admissionChecks": [{ "name": "multikueue" }] })),
            ),
        ] {
            let c = &side.client;
            create_kueue_object(
                c,
                "ResourceFlavor",
                "resourceflavors",
                None,
                json!({
                    "metadata": { "name": flavor },
                    "spec": {
                        "nodeLabels": node_labels,
                        "tolerations": [{ "key": TOLERATION_KEY, "operator": "Exists", "effect": "NoSchedule" }]
                    }
                }),
            )
            .await;
            create_kueue_object(
                c,
                "ClusterQueue",
                "clusterqueues",
                None,
                json!({
                    "metadata": { "name": cluster_queue },
                    "spec": {
                        "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": ns } },
                        "admissionChecksStrategy": checks,
                        "resourceGroups": [{
                            "coveredResources": ["cpu"],
                            "flavors": [{ "name": flavor, "resources": [{ "name": "cpu", "nominalQuota": "2" }] }]
                        }]
                    }
                }),
            )
            .await;
            create_kueue_object(
                c,
                "LocalQueue",
                "localqueues",
                Some(&ns),
                json!({ "metadata": { "name": "queue" }, "spec": { "clusterQueue": cluster_queue } }),
            )
            .await;
            let cqs = kueue_api(c, "ClusterQueue", "clusterqueues", None);
            wait_until(
                &format!("ClusterQueue {cluster_queue} to be Active"),
                SLOW,
                || async {
                    let cq = cqs.get_opt(&cluster_queue).await.ok().flatten()?;
                    has_condition(&cq.data, "Active").then_some(())
                },
            )
            .await;
        }
        Some(Self {
            ns,
            manager,
            worker,
            cluster_queue,
            flavor,
        })
    }

    fn logs(&self) -> String {
        format!(
            "operator logs: manager {}, worker {}; Kueue's: {}/{{manager,worker}}/logs/kueue.log",
            self.manager.operator.log.display(),
            self.worker.operator.log.display(),
            base_dir().display()
        )
    }

    /// Submits, on the manager, a job of two workers x 1 cpu for MultiKueue.
    async fn submit(&self, name: &str) {
        self.submit_marked(name, 2, Some(MULTIKUEUE), None).await;
    }

    /// Submits, on the manager, a job of `workers` x 1 cpu with these
    /// `spec.managedBy` and `spec.runPolicy.managedBy`.
    async fn submit_marked(
        &self,
        name: &str,
        workers: i32,
        managed_by: Option<&str>,
        run_policy_managed_by: Option<&str>,
    ) {
        let mut job = TfJobFixture::new(name)
            .workers(workers)
            .namespace(&self.ns)
            .build();
        job.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(QUEUE_LABEL.into(), "queue".into());
        job.spec.managed_by = managed_by.map(str::to_owned);
        job.spec.run_policy.managed_by = run_policy_managed_by.map(str::to_owned);
        for c in job
            .spec
            .tf_replica_specs
            .values_mut()
            .flat_map(|s| s.template.spec.iter_mut())
            .flat_map(|s| s.containers.iter_mut())
        {
            c.resources = Some(ResourceRequirements {
                requests: Some(BTreeMap::from([("cpu".into(), Quantity("1".into()))])),
                ..ResourceRequirements::default()
            });
        }
        self.manager
            .jobs(&self.ns)
            .create(&PostParams::default(), &job)
            .await
            .unwrap_or_else(|e| panic!("failed to create TFJob {name} on the manager: {e}"));
    }

    /// Waits until the worker's copy of the job runs both its Pods; returns it.
    async fn wait_running_on_worker(&self, name: &str) -> TFJob {
        let what = format!(
            "{}/{name} to run on the worker with 2 Pods ({})",
            self.ns,
            self.logs()
        );
        wait_until(&what, SLOW, || async {
            let job = self.worker.job(&self.ns, name).await?;
            let pods = self.worker.pods(&self.ns, name).await;
            (pods.len() == 2 && pods.iter().all(is_running)).then_some(job)
        })
        .await
    }

    /// Waits until the manager's copy shows the condition `type_` True.
    async fn wait_manager_condition(&self, name: &str, type_: &str) -> TFJob {
        let what = format!(
            "{}/{name} on the manager to show {type_} ({})",
            self.ns,
            self.logs()
        );
        wait_until(&what, SLOW, || async {
            let job = self.manager.job(&self.ns, name).await?;
            job.status
                .as_ref()?
                .conditions
                .iter()
                .any(|c| c.type_ == type_ && c.status == "True")
                .then_some(job)
        })
        .await
    }

    async fn manager_workload(&self) -> Option<DynamicObject> {
        self.manager.workloads(&self.ns).await.into_iter().next()
    }

    async fn cleanup(self) {
        for side in [&self.manager, &self.worker] {
            let c = &side.client;
            let _ = kueue_api(c, "ClusterQueue", "clusterqueues", None)
                .delete(&self.cluster_queue, &Default::default())
                .await;
            let _ = kueue_api(c, "ResourceFlavor", "resourceflavors", None)
                .delete(&self.flavor, &Default::default())
                .await;
            let _ = Api::<Namespace>::all(c.clone())
                .delete(&self.ns, &Default::default())
                .await;
        }
    }
}

/// The admission check `multikueue`'s state on a Workload.
fn multikueue_check_state(w: &DynamicObject) -> Option<String> {
    w.data["status"]["admissionChecks"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == "multikueue")
        .and_then(|c| c["state"].as_str().map(str::to_owned))
}

#[tokio::test]
#[ignore = "needs the MultiKueue setup: make e2e-multikueue"]
async fn a_job_submitted_to_the_manager_runs_on_the_worker_and_its_status_comes_back() {
    let _connection = CONNECTION.clone().read_owned().await;
    let Some(env) = Env::new("mk-run").await else {
        return;
    };
    env.submit("train").await;
    let copy = env.wait_running_on_worker("train").await;
    // MultiKueue's copy: its generic adapter removed spec.managedBy (so our
    // operator runs it) and labelled it with the manager's Workload.
    assert_eq!(
        copy.spec.managed_by, None,
        "the worker's copy keeps managedBy"
    );
    let labels = copy.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get(ORIGIN_LABEL).map(String::as_str),
        Some("tfjob-e2e-manager")
    );
    let manager_wl = env
        .manager_workload()
        .await
        .expect("the manager's Workload");
    assert_eq!(
        labels.get(PREBUILT_LABEL),
        manager_wl.metadata.name.as_ref(),
        "the worker's copy names the manager's Workload"
    );
    assert_eq!(
        multikueue_check_state(&manager_wl).as_deref(),
        Some("Ready")
    );
    // The worker's Workload is MultiKueue's, adopted by the worker's job.
    let worker_wls = env.worker.workloads(&env.ns).await;
    assert_eq!(worker_wls.len(), 1, "{worker_wls:?}");
    let uid = copy.metadata.uid.clone().expect("a uid");
    assert!(
        worker_wls[0]
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.uid == uid && o.controller == Some(true)),
        "the worker's operator did not adopt MultiKueue's Workload: {:?}",
        worker_wls[0].metadata
    );
    // Nothing runs on the manager.
    assert!(env.manager.pods(&env.ns, "train").await.is_empty());
    // The manager's copy mirrors the worker's running status...
    env.wait_manager_condition("train", "Running").await;
    // ...to the end.
    drive_pod_exit(
        &env.worker.client,
        &env.ns,
        "train-worker-0",
        Some("tensorflow"),
        0,
    )
    .await;
    let done = env.wait_manager_condition("train", "Succeeded").await;
    let workers = done
        .status
        .as_ref()
        .and_then(|s| s.replica_statuses.get("Worker"))
        .expect("the worker's replica status, mirrored");
    assert!(workers.succeeded >= 1, "{workers:?}");
    assert!(env.manager.pods(&env.ns, "train").await.is_empty());
    let what = format!("the manager's Workload to be Finished ({})", env.logs());
    wait_until(&what, SLOW, || async {
        let w = env.manager_workload().await?;
        has_condition(&w.data, "Finished").then_some(())
    })
    .await;
    env.cleanup().await;
}

#[tokio::test]
#[ignore = "needs the MultiKueue setup: make e2e-multikueue"]
async fn run_policy_managed_by_alone_is_rejected_and_with_both_the_worker_warns() {
    // Why our CRD has spec.managedBy (docs/kueue.md): Kueue's generic
    // adapter reads and clears that path only.
    let _connection = CONNECTION.clone().read_owned().await;
    let Some(env) = Env::new("mk-paths").await else {
        return;
    };
    // runPolicy.managedBy alone: the adapter says the job is not Kueue's,
    // the check is Rejected, and the job never leaves the manager.
    env.submit_marked("old-path", 1, None, Some(MULTIKUEUE))
        .await;
    let what = format!("the multikueue check to reject old-path ({})", env.logs());
    let message = wait_until(&what, SLOW, || async {
        let w = env.manager_workload().await?;
        let check = w.data["status"]["admissionChecks"]
            .as_array()?
            .iter()
            .find(|c| c["name"] == "multikueue" && c["state"] == "Rejected")?
            .clone();
        check["message"].as_str().map(str::to_owned)
    })
    .await;
    assert!(
        message.contains("Expecting .spec.managedBy"),
        "Kueue's reason changed: {message}"
    );
    assert!(env.worker.job(&env.ns, "old-path").await.is_none());
    // Both paths: dispatched, but the worker's copy keeps runPolicy.managedBy;
    // its operator runs nothing and says why.
    env.submit_marked("both-paths", 1, Some(MULTIKUEUE), Some(MULTIKUEUE))
        .await;
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(env.worker.client.clone(), &env.ns);
    let what = format!(
        "a MultiKueueCopyNotRun Warning on the worker ({})",
        env.logs()
    );
    wait_until(&what, SLOW, || async {
        let lp = ListParams::default().fields("involvedObject.name=both-paths");
        let list = events.list(&lp).await.ok()?;
        list.items
            .iter()
            .any(|e| e.reason.as_deref() == Some("MultiKueueCopyNotRun"))
            .then_some(())
    })
    .await;
    assert!(env.worker.pods(&env.ns, "both-paths").await.is_empty());
    env.cleanup().await;
}

#[tokio::test]
#[ignore = "needs the MultiKueue setup: make e2e-multikueue"]
async fn deleting_the_job_on_the_manager_deletes_it_on_the_worker() {
    let _connection = CONNECTION.clone().read_owned().await;
    let Some(env) = Env::new("mk-delete").await else {
        return;
    };
    env.submit("doomed").await;
    env.wait_running_on_worker("doomed").await;
    env.manager
        .jobs(&env.ns)
        .delete("doomed", &DeleteParams::background())
        .await
        .expect("delete the job on the manager");
    let what = format!(
        "the job, its Pods and its Workload to be gone from the worker ({})",
        env.logs()
    );
    wait_until(&what, SLOW, || async {
        let gone = env.worker.job(&env.ns, "doomed").await.is_none()
            && env.worker.workloads(&env.ns).await.is_empty()
            && env.worker.pods(&env.ns, "doomed").await.is_empty();
        gone.then_some(())
    })
    .await;
    let what = format!("the manager's Workload to be gone ({})", env.logs());
    wait_until(&what, SLOW, || async {
        env.manager_workload().await.is_none().then_some(())
    })
    .await;
    env.cleanup().await;
}

#[tokio::test]
#[ignore = "needs the MultiKueue setup: make e2e-multikueue"]
async fn a_worker_cut_off_mid_run_keeps_its_job_admitted_and_reports_it_when_back() {
    let _connection = CONNECTION.clone().write_owned().await;
    let Some(env) = Env::new("mk-cut").await else {
        return;
    };
    env.submit("cut").await;
    env.wait_running_on_worker("cut").await;
    env.wait_manager_condition("cut", "Running").await;
    multikueue_sh("cut");
    let _reconnect = ReconnectOnDrop;
    let clusters = kueue_api(
        &env.manager.client,
        "MultiKueueCluster",
        "multikueueclusters",
        None,
    );
    let what = format!("the MultiKueueCluster to go inactive ({})", env.logs());
    wait_until(&what, SLOW, || async {
        let c = clusters.get_opt("worker").await.ok().flatten()?;
        (!has_condition(&c.data, "Active")).then_some(())
    })
    .await;
    // Past workerLostTimeout (20 s in e2e/kueue.sh's manager mode) and then
    // some, the job stays admitted: with no worker left to move it to, Kueue
    // v0.17.0 never gives up on the one it lost.
    let lost_timeout = Duration::from_secs(20);
    let until = tokio::time::Instant::now() + lost_timeout * 2;
    while tokio::time::Instant::now() < until {
        let w = env
            .manager_workload()
            .await
            .expect("the manager's Workload");
        assert!(
            has_condition(&w.data, "Admitted") && !has_condition(&w.data, "Evicted"),
            "the manager's Workload lost its admission while the worker was cut off: {}",
            w.data["status"]
        );
        assert_eq!(multikueue_check_state(&w).as_deref(), Some("Ready"));
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    // The worker ran on meanwhile: the job ends there, unseen by the manager...
    drive_pod_exit(
        &env.worker.client,
        &env.ns,
        "cut-worker-0",
        Some("tensorflow"),
        0,
    )
    .await;
    let job = env
        .manager
        .job(&env.ns, "cut")
        .await
        .expect("the manager's job");
    let succeeded = job
        .status
        .iter()
        .flat_map(|s| s.conditions.iter())
        .any(|c| c.type_ == "Succeeded" && c.status == "True");
    assert!(
        !succeeded,
        "the manager saw the end through a cut connection"
    );
    // ...until the worker is back.
    multikueue_sh("reconnect");
    env.wait_manager_condition("cut", "Succeeded").await;
    env.cleanup().await;
}
