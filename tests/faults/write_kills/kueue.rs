//! Kueue for the eviction pass: a Kueue process beside the fault cluster
//! for as long as that pass runs (`e2e/kueue.sh` in `workload` mode: its
//! built-in TFJob integration off, so the operator owns each queued job's
//! Workload and makes every write of an eviction itself), a ClusterQueue
//! and LocalQueue for the test's namespace, and the Workload reads and
//! patches the pass needs.
//!
//! Only the eviction pass starts it, and it stops when the pass ends: the
//! other fault scenarios run without Kueue, as before. Like every Kueue
//! that `e2e/kueue.sh` starts, it writes its metrics certificate to the
//! fixed `/etc/kueue/metrics/certs` (Kueue v0.17.0 out of a cluster reads
//! it there): one Kueue on the machine at a time.
use std::time::Duration;

use kube::Client;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use serde_json::{Value, json};

use crate::cluster::{harness, kubectl, random_suffix, run_ok, wait_until};

/// The LocalQueue every job of the pass names.
pub const QUEUE: &str = "queue";
/// The label that queues a job.
pub const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// How long Kueue gives an admitted job's Pods to be ready
/// (`waitForPodsReady`): long enough never to evict a job of this pass.
const PODS_READY_TIMEOUT: &str = "120s";

fn api(client: &Client, kind: &str, plural: &str, ns: Option<&str>) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta2", kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

pub fn workloads(client: &Client, ns: &str) -> Api<DynamicObject> {
    api(client, "Workload", "workloads", Some(ns))
}

/// A running Kueue and the cluster-scoped objects made for the pass;
/// stopped (and its webhooks removed) on drop.
pub struct Kueue {
    cluster_queue: String,
    flavor: String,
}

impl Kueue {
    /// Starts Kueue (`e2e/kueue.sh up`, which returns once it admits
    /// requests) and gives namespace `ns` a LocalQueue [`QUEUE`] on a
    /// ClusterQueue with room for every job of the pass.
    pub async fn start(client: &Client, ns: &str) -> Self {
        let started = std::time::Instant::now();
        tokio::task::spawn_blocking(|| {
            run_ok(
                harness("e2e/kueue.sh")
                    .env("TFJOB_KUEUE_MODE", "workload")
                    .env("TFJOB_KUEUE_PODS_READY_TIMEOUT", PODS_READY_TIMEOUT)
                    .arg("up"),
            )
        })
        .await
        .expect("kueue.sh up");
        eprintln!("Kueue up in {} s", started.elapsed().as_secs());
        let suffix = random_suffix();
        let kueue = Self {
            cluster_queue: format!("fault-wk-{suffix}"),
            flavor: format!("fault-wk-kwok-{suffix}"),
        };
        // `type: kwok`: the label e2e/cluster.sh gives every fake node.
        create(
            client,
            "ResourceFlavor",
            "resourceflavors",
            None,
            json!({ "metadata": { "name": kueue.flavor }, "spec": { "nodeLabels": { "type": "kwok" } } }),
        )
        .await;
        create(
            client,
            "ClusterQueue",
            "clusterqueues",
            None,
            json!({
                "metadata": { "name": kueue.cluster_queue },
                "spec": {
                    "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": ns } },
                    "resourceGroups": [{
                        "coveredResources": ["cpu"],
                        "flavors": [{ "name": kueue.flavor, "resources": [{ "name": "cpu", "nominalQuota": "64" }] }]
                    }]
                }
            }),
        )
        .await;
        create(
            client,
            "LocalQueue",
            "localqueues",
            Some(ns),
            json!({ "metadata": { "name": QUEUE }, "spec": { "clusterQueue": kueue.cluster_queue } }),
        )
        .await;
        let queues = api(client, "ClusterQueue", "clusterqueues", None);
        wait_until(
            &format!("ClusterQueue {} to be Active", kueue.cluster_queue),
            Duration::from_secs(60),
            || async {
                let cq = queues.get_opt(&kueue.cluster_queue).await.ok().flatten()?;
                condition_true(&cq, "Active").then_some(())
            },
        )
        .await;
        kueue
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

async fn create(client: &Client, kind: &str, plural: &str, ns: Option<&str>, mut body: Value) {
    body["apiVersion"] = "kueue.x-k8s.io/v1beta2".into();
    body["kind"] = kind.into();
    let object: DynamicObject = serde_json::from_value(body).expect("a valid Kueue object");
    api(client, kind, plural, ns)
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

/// The Workload controlled by the job with UID `job_uid`.
pub async fn workload_of(client: &Client, ns: &str, job_uid: &str) -> Option<DynamicObject> {
    let list = workloads(client, ns)
        .list(&ListParams::default())
        .await
        .ok()?;
    list.items.into_iter().find(|w| {
        w.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.uid == job_uid && o.controller == Some(true))
    })
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
