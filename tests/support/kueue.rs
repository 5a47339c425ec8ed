//! A Kueue process for one test: started beside the local control plane
//! (`e2e/kueue.sh up`) in the mode the test asks for, with a ResourceFlavor
//! for the KWOK nodes, a ClusterQueue with the test's cpu quota and a
//! LocalQueue [`QUEUE`] in the test's namespace; stopped (and its webhooks
//! removed) on drop, a panic included. Shared by the fault suite's eviction
//! pass (`write_kills`, Workload mode) and the e2e move from
//! training-operator under Kueue's built-in (`migration::kueue_builtin`).
//!
//! Like every Kueue that `e2e/kueue.sh` starts, it writes its metrics
//! certificate to the fixed `/etc/kueue/metrics/certs` (Kueue v0.17.0 out
//! of a cluster reads it there): one Kueue on the machine at a time, so a
//! test that starts one runs where no other Kueue runs (the suites' phases
//! without Kueue).
#![allow(dead_code)] // Each suite uses a different subset.

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use serde_json::{Value, json};

use crate::cluster::{harness, kubectl, random_suffix, run_ok, wait_until};

/// The LocalQueue every job of the test names.
pub const QUEUE: &str = "queue";
/// The label that queues a job.
pub const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// The namespace label Kueue's TFJob webhooks match (`e2e/kueue.sh`): the
/// built-in's webhook creates a queued job suspended only there.
pub const NAMESPACE_LABEL: &str = "tfjob-operator.e2e/kueue";

/// Kueue's configuration (`e2e/kueue.sh`, `TFJOB_KUEUE_MODE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Its built-in `kubeflow.org/tfjob` integration on: its webhook creates
    /// queued TFJobs suspended, its controller builds their Workloads and
    /// drives them through `spec.runPolicy.suspend`.
    Builtin,
    /// The built-in off (`externalFrameworks`): the operator owns the
    /// Workloads. `waitForPodsReady` on with this timeout.
    Workload { pods_ready_timeout: &'static str },
}

/// Kueue's `kind` (`plural`) in `ns`, or cluster-scoped, at v1beta2.
pub fn kueue_api(
    client: &Client,
    kind: &str,
    plural: &str,
    ns: Option<&str>,
) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta2", kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

pub fn workloads(client: &Client, ns: &str) -> Api<DynamicObject> {
    kueue_api(client, "Workload", "workloads", Some(ns))
}

pub fn cluster_queues(client: &Client) -> Api<DynamicObject> {
    kueue_api(client, "ClusterQueue", "clusterqueues", None)
}

/// A running Kueue and the cluster-scoped objects made for the test;
/// stopped (and its webhooks removed) on drop.
pub struct Kueue {
    pub cluster_queue: String,
    flavor: String,
}

/// `e2e/kueue.sh up` in `mode` (it stops a Kueue this cluster dir runs
/// first, and returns once Kueue admits requests).
async fn up(mode: Mode) {
    let started = std::time::Instant::now();
    tokio::task::spawn_blocking(move || {
        let mut script = harness("e2e/kueue.sh");
        match mode {
            Mode::Builtin => script.env("TFJOB_KUEUE_MODE", "builtin"),
            Mode::Workload { pods_ready_timeout } => script
                .env("TFJOB_KUEUE_MODE", "workload")
                .env("TFJOB_KUEUE_PODS_READY_TIMEOUT", pods_ready_timeout),
        };
        run_ok(script.arg("up"))
    })
    .await
    .expect("kueue.sh up");
    eprintln!("Kueue up in {} s ({mode:?})", started.elapsed().as_secs());
}

impl Kueue {
    /// Starts Kueue in `mode`, labels namespace `ns` with
    /// [`NAMESPACE_LABEL`], and gives it a LocalQueue [`QUEUE`] on a
    /// ClusterQueue with `cpu` cores of quota on the KWOK nodes.
    pub async fn start(client: &Client, ns: &str, mode: Mode, cpu: &str) -> Self {
        up(mode).await;
        let suffix = random_suffix();
        let kueue = Self {
            cluster_queue: format!("e2e-{suffix}"),
            flavor: format!("e2e-kwok-{suffix}"),
        };
        let label = json!({ "metadata": { "labels": { NAMESPACE_LABEL: "true" } } });
        Api::<Namespace>::all(client.clone())
            .patch(ns, &PatchParams::default(), &Patch::Merge(&label))
            .await
            .expect("label the namespace for Kueue");
        // `type: kwok`: the label e2e/cluster.sh gives every fake node.
        create_kueue_object(client,
            "ResourceFlavor",
            "resourceflavors",
            None,
            json!({ "metadata": { "name": kueue.flavor }, "spec": { "nodeLabels": { "type": "kwok" } } }),
        )
        .await;
        create_kueue_object(client,
            "ClusterQueue",
            "clusterqueues",
            None,
            json!({
                "metadata": { "name": kueue.cluster_queue },
                "spec": {
                    "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": ns } },
                    "resourceGroups": [{
                        "coveredResources": ["cpu"],
                        "flavors": [{ "name": kueue.flavor, "resources": [{ "name": "cpu", "nominalQuota": cpu }] }]
                    }]
                }
            }),
        )
        .await;
        create_kueue_object(client,
            "LocalQueue",
            "localqueues",
            Some(ns),
            json!({ "metadata": { "name": QUEUE }, "spec": { "clusterQueue": kueue.cluster_queue } }),
        )
        .await;
        kueue.wait_active(client).await;
        kueue
    }

    /// Restarts Kueue in another `mode` (a new process on a new
    /// configuration, as a team reconfiguring Kueue rolls it out); the
    /// queues and every Workload stay.
    pub async fn switch(&self, client: &Client, mode: Mode) {
        up(mode).await;
        self.wait_active(client).await;
    }

    async fn wait_active(&self, client: &Client) {
        let queues = cluster_queues(client);
        wait_until(
            &format!("ClusterQueue {} to be Active", self.cluster_queue),
            Duration::from_secs(60),
            || async {
                let cq = queues.get_opt(&self.cluster_queue).await.ok().flatten()?;
                condition_true(&cq, "Active").then_some(())
            },
        )
        .await;
    }

    /// The ClusterQueue's `status.admittedWorkloads` (`None` while it has no
    /// status or cannot be read).
    pub async fn admitted_workloads(&self, client: &Client) -> Option<i64> {
        let cq = cluster_queues(client)
            .get_opt(&self.cluster_queue)
            .await
            .ok()
            .flatten()?;
        Some(cq.data["status"]["admittedWorkloads"].as_i64().unwrap_or(0))
    }
}

impl Drop for Kueue {
    fn drop(&mut self) {
        // Best effort: Kueue removes the ClusterQueue's finalizer only while
        // it runs, and the suite's cluster is thrown away afterwards anyway.
        let _ = kubectl()
            .args(["delete", "--wait=false", "--ignore-not-found"])
            .arg(format!(
                "clusterqueues.kueue.x-k8s.io/{}",
                self.cluster_queue
            ))
            .arg(format!("resourceflavors.kueue.x-k8s.io/{}", self.flavor))
            .output();
        let (ok, out) = crate::cluster::run(harness("e2e/kueue.sh").arg("down"));
        if !ok {
            eprintln!("kueue.sh down failed: {out}");
        }
    }
}

/// Creates Kueue object `body` (its apiVersion and kind filled in); panics
/// naming the kind when the server refuses it.
pub async fn create_kueue_object(
    client: &Client,
    kind: &str,
    plural: &str,
    ns: Option<&str>,
    mut body: Value,
) {
    body["apiVersion"] = "kueue.x-k8s.io/v1beta2".into();
    body["kind"] = kind.into();
    let object: DynamicObject = serde_json::from_value(body).expect("a valid Kueue object");
    kueue_api(client, kind, plural, ns)
        .create(&Default::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("failed to create the {kind}: {e}"));
}

/// Whether Kueue's condition `type_` on `object` is True.
pub fn condition_true(object: &DynamicObject, type_: &str) -> bool {
    condition(object, type_).is_some_and(|c| c["status"] == "True")
}

/// Condition `type_` on `object`, as JSON.
pub fn condition(object: &DynamicObject, type_: &str) -> Option<Value> {
    object.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

/// Whether `workload`'s controller is the object with UID `uid`.
pub fn controlled_by(workload: &DynamicObject, uid: &str) -> bool {
    workload
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == uid && o.controller == Some(true))
}

/// The Workload controlled by the job with UID `job_uid`.
pub async fn workload_of(client: &Client, ns: &str, job_uid: &str) -> Option<DynamicObject> {
    let list = workloads(client, ns)
        .list(&ListParams::default())
        .await
        .ok()?;
    list.items.into_iter().find(|w| controlled_by(w, job_uid))
}

/// Sets the Workload's `spec.active`, as an administrator (or a script
/// reclaiming capacity) deactivates and reactivates it; Kueue evicts a
/// deactivated Workload (`Evicted`, reason `Deactivated`).
pub async fn set_active(client: &Client, ns: &str, name: &str, active: bool) {
    let patch = json!({ "spec": { "active": active } });
    workloads(client, ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap_or_else(|e| panic!("failed to set active={active} on Workload {name}: {e}"));
}
