//! Real Kueue (`e2e/kueue.sh`) admitting TFJobs our operator runs: a
//! ResourceFlavor for the KWOK nodes, a ClusterQueue with a small cpu quota, a
//! LocalQueue in the test's namespace, and TFJobs labelled
//! `kueue.x-k8s.io/queue-name`. The same scenarios run in both of Kueue's modes
//! (`TFJOB_KUEUE_MODE`, read back from `.cluster/kueue/mode`), with the operator
//! at its default `--kueue=auto`:
//!
//! - `builtin`: Kueue's built-in `kubeflow.org/tfjob` integration. Its webhook
//!   creates the job suspended (`spec.runPolicy.suspend`), so no Pods; on
//!   admission it writes the flavor's nodeSelector and tolerations into every
//!   replica template and sets `suspend: false`; on preemption it sets
//!   `suspend: true` again and waits until no replica is `active` before it
//!   takes the template changes back. The operator (which would make Workloads
//!   itself under `auto`) sees the built-in's Workload and leaves the job to it:
//!   these tests prove the two never fight.
//! - `workload`: the built-in off (`externalFrameworks`), the operator builds
//!   and owns the Workload (`src/tfjob/kueue/`): it holds the job (condition
//!   `Suspended`, reason `TFJobQueued`, `spec.runPolicy.suspend` untouched),
//!   puts the flavor on each Pod it creates, and stops the job on eviction.
//!   `tests/e2e/kueue_workload.rs` has the scenarios only this mode has.
//!
//! Each test makes its own cluster-scoped objects (random names) and its own
//! namespace, labelled `tfjob-operator.e2e/kueue=true`: Kueue's TFJob webhooks
//! are scoped to such namespaces (see `e2e/kueue.sh`). Without Kueue the tests
//! say so and pass, unless `TFJOB_E2E_KUEUE=1` (`e2e/run-suite.sh` sets it), where
//! a missing Kueue fails them.
//!
//! Mirrors: Kueue's `test/e2e/singlecluster/kubeflow` (TFJob) and
//! `test/integration/singlecluster/controller/jobs/kubeflow` suites.
use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Namespace, Pod};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tfjob_operator::api::fixtures::TfJobFixture;
use tfjob_operator::api::types::TFJob;

use crate::cluster::{client, cluster_dir, random_suffix, test_namespace, wait_until};
use crate::loopback::http_get;
use crate::operator::{Operator, ensure_crd};
use crate::support::{drive_pod_exit, request_cpu, shared_cluster};
use crate::test_kueue::{create_kueue_object, kueue_api};

pub(crate) const SLOW: Duration = Duration::from_secs(90);
const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
const PRIORITY_LABEL: &str = "kueue.x-k8s.io/priority-class";
const NAMESPACE_LABEL: &str = "tfjob-operator.e2e/kueue";
const JOB_NAME_LABEL: &str = "training.kubeflow.org/job-name";
/// The flavor's toleration: nothing else puts it on a Pod.
pub(crate) const TOLERATION_KEY: &str = "e2e.tfjob-operator.local/kueue-flavor";

/// Kueue's mode as `e2e/kueue.sh` started it: `builtin` or `workload`.
pub(crate) fn kueue_mode() -> String {
    std::fs::read_to_string(cluster_dir().join("kueue/mode"))
        .map(|m| m.trim().to_owned())
        .unwrap_or_else(|_| "builtin".to_owned())
}

/// Whether the operator, not Kueue's built-in, owns the jobs' Workloads.
pub(crate) fn workload_mode() -> bool {
    kueue_mode() == "workload"
}

/// Whether Kueue answers on its health port (`.cluster/kueue/ports`). When it
/// does not: `false`, or a panic when the harness promised Kueue.
pub(crate) fn kueue_running() -> bool {
    let ports = std::fs::read_to_string(cluster_dir().join("kueue/ports")).unwrap_or_default();
    let health = ports
        .lines()
        .find_map(|l| l.strip_prefix("HEALTH_PORT="))
        .and_then(|p| p.trim().parse::<u16>().ok());
    let up = health.is_some_and(|p| http_get(p, "/readyz").is_some_and(|(code, _)| code == 200));
    if !up {
        let promised = std::env::var("TFJOB_E2E_KUEUE").is_ok_and(|v| !v.is_empty() && v != "0");
        assert!(
            !promised,
            "TFJOB_E2E_KUEUE is set but Kueue is not running (see {}/logs/kueue.log)",
            cluster_dir().display()
        );
        eprintln!("skipping: Kueue is not running (start it with `make kueue-up`)");
    }
    up
}

/// A namespace whose TFJobs Kueue manages, a running operator for it, and a
/// LocalQueue `queue` that feeds a new ClusterQueue with `cpu` cores of quota
/// on a new ResourceFlavor for the KWOK nodes.
pub(crate) struct Env {
    _cluster: tokio::sync::OwnedRwLockReadGuard<()>,
    pub(crate) client: Client,
    pub(crate) ns: String,
    pub(crate) flavor: String,
    pub(crate) cluster_queue: String,
    pub(crate) operator: Operator,
    pub(crate) jobs: Api<TFJob>,
    pub(crate) pods: Api<Pod>,
}

impl Env {
    pub(crate) async fn new(prefix: &str, cpu: &str, preemption: Value) -> Option<Self> {
        let cluster = shared_cluster().await;
        if !kueue_running() {
            return None;
        }
        let client = client().await;
        ensure_crd(&client).await;
        let ns = test_namespace(&client, prefix).await;
        let label = json!({ "metadata": { "labels": { NAMESPACE_LABEL: "true" } } });
        Api::<Namespace>::all(client.clone())
            .patch(&ns, &PatchParams::default(), &Patch::Merge(&label))
            .await
            .expect("label the namespace for Kueue");

        let suffix = random_suffix();
        let flavor = format!("e2e-kwok-{suffix}");
        let cluster_queue = format!("e2e-{prefix}-{suffix}");
        // `type: kwok` is the label e2e/cluster.sh gives every fake node.
        create_kueue_object(
            &client,
            "ResourceFlavor",
            "resourceflavors",
            None,
            json!({
                "metadata": { "name": flavor },
                "spec": {
                    "nodeLabels": { "type": "kwok" },
                    "tolerations": [{ "key": TOLERATION_KEY, "operator": "Exists", "effect": "NoSchedule" }]
                }
            }),
        )
        .await;
        create_kueue_object(
            &client,
            "ClusterQueue",
            "clusterqueues",
            None,
            json!({
                "metadata": { "name": cluster_queue },
                "spec": {
                    "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": ns } },
                    "queueingStrategy": "StrictFIFO",
                    "preemption": preemption,
                    "resourceGroups": [{
                        "coveredResources": ["cpu"],
                        "flavors": [{ "name": flavor, "resources": [{ "name": "cpu", "nominalQuota": cpu }] }]
                    }]
                }
            }),
        )
        .await;
        create_kueue_object(
            &client,
            "LocalQueue",
            "localqueues",
            Some(&ns),
            json!({ "metadata": { "name": "queue" }, "spec": { "clusterQueue": cluster_queue } }),
        )
        .await;
        let cqs = kueue_api(&client, "ClusterQueue", "clusterqueues", None);
        wait_until(
            &format!("ClusterQueue {cluster_queue} to be Active"),
            // Kueue may still be reconnecting after another test restarted
            // the API server: give it as long as the other waits here.
            SLOW,
            || async {
                let cq = cqs.get_opt(&cluster_queue).await.ok().flatten()?;
                has_condition(&cq.data, "Active").then_some(())
            },
        )
        .await;

        let mut operator = Operator::start(&ns);
        operator.wait_ready().await;
        Some(Self {
            _cluster: cluster,
            jobs: Api::namespaced(client.clone(), &ns),
            pods: Api::namespaced(client.clone(), &ns),
            client,
            ns,
            flavor,
            cluster_queue,
            operator,
        })
    }

    /// A worker-only job of `workers` Pods, 1 cpu each, in the LocalQueue.
    pub(crate) async fn submit(&self, name: &str, workers: i32, priority_class: Option<&str>) {
        let job = TfJobFixture::new(name)
            .workers(workers)
            .namespace(&self.ns)
            .build();
        self.submit_job(job, priority_class).await;
    }

    /// `job` with 1 cpu per container, in the LocalQueue.
    pub(crate) async fn submit_job(&self, mut job: TFJob, priority_class: Option<&str>) {
        let name = job.metadata.name.clone().unwrap_or_default();
        let labels = job.metadata.labels.get_or_insert_with(BTreeMap::new);
        labels.insert(QUEUE_LABEL.into(), "queue".into());
        if let Some(class) = priority_class {
            labels.insert(PRIORITY_LABEL.into(), class.into());
        }
        request_cpu(&mut job, "1");
        self.jobs
            .create(&PostParams::default(), &job)
            .await
            .unwrap_or_else(|e| panic!("failed to create TFJob {name}: {e}"));
    }

    pub(crate) async fn job(&self, name: &str) -> Option<TFJob> {
        self.jobs.get_opt(name).await.ok().flatten()
    }

    pub(crate) async fn job_pods(&self, name: &str) -> Vec<Pod> {
        let lp = ListParams::default().labels(&format!("{JOB_NAME_LABEL}={name}"));
        self.pods
            .list(&lp)
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }

    /// The job's Workload (Kueue names it; found by its owner reference).
    pub(crate) async fn workload(&self, name: &str) -> Option<DynamicObject> {
        let uid = self.job(name).await?.metadata.uid?;
        let workloads = kueue_api(&self.client, "Workload", "workloads", Some(&self.ns));
        let list = workloads.list(&ListParams::default()).await.ok()?;
        list.items.into_iter().find(|w| {
            w.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == uid)
        })
    }

    pub(crate) fn log(&self) -> String {
        self.operator.log.display().to_string()
    }

    /// Waits until the job is held: Kueue suspended it (`builtin`) or the
    /// operator holds it (`workload`: reason `TFJobQueued`, the spec's
    /// `suspend` untouched), condition Suspended, no Pods, and its Workload
    /// is pending.
    pub(crate) async fn wait_held(&self, name: &str) {
        let what = format!(
            "{}/{name} to be held: suspended, no Pods, Workload without quota (operator log: {})",
            self.ns,
            self.log()
        );
        wait_until(&what, SLOW, || async {
            let job = self.job(name).await?;
            let suspended = held(&job) && job_condition(&job, "Suspended") == Some(true);
            let wl = self.workload(name).await?;
            let pending = !has_condition(&wl.data, "QuotaReserved");
            (suspended && pending && self.job_pods(name).await.is_empty()).then_some(())
        })
        .await;
    }

    /// Asserts that the operator never created a Pod for the job (no
    /// `SuccessfulCreatePod` event): held from its creation on, not stopped
    /// after it had started (Kueue also suspends a running job it did not admit).
    pub(crate) async fn assert_never_started(&self, name: &str) {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.ns);
        let lp = ListParams::default().fields(&format!("involvedObject.name={name}"));
        let created: Vec<String> = events
            .list(&lp)
            .await
            .expect("list events")
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("SuccessfulCreatePod"))
            .filter_map(|e| e.message)
            .collect();
        assert!(
            created.is_empty(),
            "{name} had Pods before Kueue admitted it: {created:?}"
        );
    }

    /// Waits until Kueue admitted the job and all its `n` Pods run; returns them.
    pub(crate) async fn wait_admitted_and_running(&self, name: &str, n: usize) -> Vec<Pod> {
        let what = format!(
            "{}/{name} to be admitted with {n} running Pods (operator log: {})",
            self.ns,
            self.log()
        );
        wait_until(&what, SLOW, || async {
            let wl = self.workload(name).await?;
            if !has_condition(&wl.data, "Admitted") {
                return None;
            }
            let job = self.job(name).await?;
            if job.spec.run_policy.suspend == Some(true) {
                return None;
            }
            let pods = self.job_pods(name).await;
            let running = pods.iter().filter(|p| is_running(p)).count();
            (pods.len() == n && running == n).then_some(pods)
        })
        .await
    }

    pub(crate) async fn wait_condition(&self, name: &str, type_: &str) {
        let what = format!(
            "{}/{name} to be {type_} (operator log: {})",
            self.ns,
            self.log()
        );
        wait_until(&what, SLOW, || async {
            let job = self.job(name).await?;
            (job_condition(&job, type_) == Some(true)).then_some(())
        })
        .await;
    }

    /// Ends the job: worker 0 exits 0.
    pub(crate) async fn finish(&self, name: &str) {
        let pod = format!("{name}-worker-0");
        drive_pod_exit(&self.client, &self.ns, &pod, Some("tensorflow"), 0).await;
        self.wait_condition(name, "Succeeded").await;
    }

    /// Removes the cluster-scoped objects (the namespace takes the rest).
    pub(crate) async fn cleanup(&self) {
        let cqs = kueue_api(&self.client, "ClusterQueue", "clusterqueues", None);
        let _ = cqs.delete(&self.cluster_queue, &Default::default()).await;
        let flavors = kueue_api(&self.client, "ResourceFlavor", "resourceflavors", None);
        let _ = flavors.delete(&self.flavor, &Default::default()).await;
    }
}

/// Held the way the mode holds a job (see [`Env::wait_held`]).
pub(crate) fn held(job: &TFJob) -> bool {
    if workload_mode() {
        job.spec.run_policy.suspend != Some(true)
            && job_condition_reason(job, "Suspended").is_some_and(|r| r == "TFJobQueued")
    } else {
        job.spec.run_policy.suspend == Some(true)
    }
}

/// The reason of the TFJob's condition `type_`, when it has one.
pub(crate) fn job_condition_reason(job: &TFJob, type_: &str) -> Option<String> {
    job.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .and_then(|c| c.reason.clone())
}

pub(crate) fn is_running(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// Whether a Kueue object's `status.conditions` has `type_` True.
pub(crate) fn has_condition(data: &Value, type_: &str) -> bool {
    data["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == type_ && c["status"] == "True")
    })
}

/// The status of the TFJob's condition `type_`, when it has one.
pub(crate) fn job_condition(job: &TFJob, type_: &str) -> Option<bool> {
    job.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status == "True")
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn kueue_holds_jobs_beyond_quota_and_admits_them_in_order_as_earlier_ones_finish() {
    // 2 cpu of quota, each job 2 workers of 1 cpu: one job at a time.
    let Some(env) = Env::new("kueue-order", "2", json!({})).await else {
        return;
    };
    env.submit("first", 2, None).await;
    let pods = env.wait_admitted_and_running("first", 2).await;
    // Created after `first` was admitted: the queue order is first, second, third.
    env.submit("second", 2, None).await;
    // Kueue orders a queue by its Workloads' creationTimestamp, which has a
    // resolution of one second: `third`'s must fall in a later second.
    let created = wait_until("second's Workload", SLOW, || async {
        env.workload("second").await?.metadata.creation_timestamp
    })
    .await;
    wait_until(
        "the clock to pass the second of second's Workload",
        Duration::from_secs(3),
        || async {
            let now = k8s_openapi::jiff::Timestamp::now().as_second();
            (now > created.0.as_second()).then_some(())
        },
    )
    .await;
    env.submit("third", 2, None).await;
    env.wait_held("second").await;
    env.wait_held("third").await;
    env.assert_never_started("second").await;
    env.assert_never_started("third").await;

    // Admitted Pods carry what Kueue wrote into the templates from the flavor.
    for pod in &pods {
        let spec = pod.spec.as_ref().expect("a pod spec");
        let selector = spec.node_selector.clone().unwrap_or_default();
        assert_eq!(
            selector.get("type").map(String::as_str),
            Some("kwok"),
            "{}: nodeSelector {selector:?}",
            pod.name_any()
        );
        let tolerated = spec
            .tolerations
            .iter()
            .flatten()
            .any(|t| t.key.as_deref() == Some(TOLERATION_KEY));
        assert!(tolerated, "{}: {:?}", pod.name_any(), spec.tolerations);
    }
    let wl = env.workload("first").await.expect("first's Workload");
    let admission = &wl.data["status"]["admission"];
    assert_eq!(admission["clusterQueue"], env.cluster_queue.as_str());
    assert_eq!(
        admission["podSetAssignments"][0]["flavors"]["cpu"],
        env.flavor.as_str()
    );

    // `first` ends: `second` (not `third`) gets its quota.
    env.finish("first").await;
    env.wait_admitted_and_running("second", 2).await;
    env.wait_held("third").await;
    env.assert_never_started("third").await;

    env.finish("second").await;
    env.wait_admitted_and_running("third", 2).await;
    env.finish("third").await;
    env.cleanup().await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn a_job_preempted_by_higher_priority_is_suspended_cleanly_and_resumes_later() {
    let preemption = json!({ "withinClusterQueue": "LowerPriority" });
    let Some(env) = Env::new("kueue-preempt", "2", preemption).await else {
        return;
    };
    let suffix = random_suffix();
    let (low, high) = (format!("e2e-low-{suffix}"), format!("e2e-high-{suffix}"));
    for (name, value) in [(&low, 100), (&high, 1000)] {
        create_kueue_object(
            &env.client,
            "WorkloadPriorityClass",
            "workloadpriorityclasses",
            None,
            json!({ "metadata": { "name": name }, "value": value }),
        )
        .await;
    }

    env.submit("low", 2, Some(&low)).await;
    let first_pods = env.wait_admitted_and_running("low", 2).await;
    // Running as the operator wrote it, not only as the Pods say: the
    // assertion below (Running turned False by the preemption) needs the
    // condition there first. Pods Running on the server do not mean the
    // operator has seen them: under load its watch may still be behind when
    // Kueue preempts, and a job never seen running is never marked Running
    // (seen in a cold `make test`, 2026-11-29: Created and Suspended, no
    // Running condition).
    env.wait_condition("low", "Running").await;
    let first_uids: Vec<String> = first_pods
        .iter()
        .map(|p| p.uid().unwrap_or_default())
        .collect();

    // `high` needs the whole quota: Kueue evicts `low`.
    env.submit("high", 2, Some(&high)).await;
    let what = format!(
        "low to be preempted: suspended, condition Suspended, no Pods (operator log: {})",
        env.log()
    );
    wait_until(&what, SLOW, || async {
        let job = env.job("low").await?;
        // The operator stops the job itself in `workload` mode: the spec's
        // suspend stays unset, the condition says evicted, then queued again.
        let stopped = if workload_mode() {
            job.spec.run_policy.suspend != Some(true)
                && job_condition_reason(&job, "Suspended")
                    .is_some_and(|r| r == "TFJobEvicted" || r == "TFJobQueued")
        } else {
            job.spec.run_policy.suspend == Some(true)
        };
        let suspended = stopped && job_condition(&job, "Suspended") == Some(true);
        (suspended && env.job_pods("low").await.is_empty()).then_some(())
    })
    .await;
    let wl = env.workload("low").await.expect("low's Workload");
    let evicted = wl.data["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Evicted").cloned())
        .unwrap_or_default();
    assert_eq!(evicted["status"], "True", "{:?}", wl.data["status"]);
    assert_eq!(evicted["reason"], "Preempted", "{evicted}");
    let low_job = env.job("low").await.expect("low");
    assert_eq!(
        job_condition(&low_job, "Running"),
        Some(false),
        "a suspended job is not Running: {:?}",
        low_job.status
    );
    assert_eq!(
        job_condition(&low_job, "Failed"),
        None,
        "{:?}",
        low_job.status
    );

    env.wait_admitted_and_running("high", 2).await;
    env.wait_held("low").await;

    // `high` ends: `low` is admitted again and runs new Pods.
    env.finish("high").await;
    let resumed = env.wait_admitted_and_running("low", 2).await;
    for pod in &resumed {
        assert!(
            !first_uids.contains(&pod.uid().unwrap_or_default()),
            "{} is a Pod from before the preemption",
            pod.name_any()
        );
    }
    env.wait_condition("low", "Running").await;
    let job = env.job("low").await.expect("low");
    assert_eq!(
        job_condition(&job, "Suspended"),
        Some(false),
        "{:?}",
        job.status
    );
    // Pods deleted by a suspension are not restarts counted against backoffLimit.
    assert_eq!(
        tfjob_operator::tfjob::plan::bookkeeping::Bookkeeping::of(&job).total_restarts(),
        0,
        "restart counts after a preemption: {:?}",
        job.metadata.annotations
    );
    env.finish("low").await;

    let classes = kueue_api(
        &env.client,
        "WorkloadPriorityClass",
        "workloadpriorityclasses",
        None,
    );
    for name in [&low, &high] {
        let _ = classes.delete(name, &Default::default()).await;
    }
    env.cleanup().await;
}

/// Kueue admits again within seconds of API-server restarts, because the
/// harness restarts it with the server's other clients (`e2e/cluster.sh
/// restart apiserver` runs `e2e/kueue.sh restart`). Left to itself, Kueue's
/// client-go reflectors back off after the outage and its Workload informer
/// stayed down 62-73 s after a second restart within 2 minutes (measured:
/// see `cmd_restart` in `e2e/kueue.sh`); this test then fails its bound. Two
/// restarts, as the main e2e pass has (smoke and informer tests). Runs in
/// Kueue's builtin mode only: once per suite is enough for the harness.
#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn kueue_admits_within_seconds_of_api_server_restarts() {
    // From the end of the second restart to the job's admission: the Env's
    // setup (namespace, queues, an operator) plus Kueue's own admission.
    const BOUND: Duration = Duration::from_secs(40);
    {
        let _cluster = crate::support::exclusive_cluster().await;
        if !kueue_running() {
            return;
        }
        if workload_mode() {
            eprintln!("skipping: runs with Kueue in builtin mode only");
            return;
        }
        crate::support::restart_apiserver_async().await;
        crate::support::restart_apiserver_async().await;
    }
    let restarted = std::time::Instant::now();
    let Some(env) = Env::new("kueue-restart", "2", json!({})).await else {
        return;
    };
    let set_up = restarted.elapsed();
    env.submit("after", 2, None).await;
    wait_until(
        "the job's Workload to be admitted after the restarts",
        SLOW,
        || async { has_condition(&env.workload("after").await?.data, "Admitted").then_some(()) },
    )
    .await;
    let admitted = restarted.elapsed();
    eprintln!(
        "kueue restart: set up {:.1} s, admitted {:.1} s after the second API-server restart",
        set_up.as_secs_f64(),
        admitted.as_secs_f64()
    );
    assert!(
        admitted <= BOUND,
        "Kueue admitted the job {:.1} s after the API-server restarts (bound {} s): \
         was Kueue restarted with the API server's clients? (log: {}/logs/kueue.log)",
        admitted.as_secs_f64(),
        BOUND.as_secs(),
        cluster_dir().display()
    );
    env.wait_admitted_and_running("after", 2).await;
    env.finish("after").await;
    env.cleanup().await;
}
