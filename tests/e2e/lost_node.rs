//! A node that stops responding, end to end: KWOK stops acting as its
//! kubelet (`e2e/cluster.sh` leaves nodes labelled lost alone), the node
//! lifecycle controller marks it NotReady and taints it, the taint manager
//! evicts the job's Pod — and nothing ever confirms that Pod gone. The
//! operator must force-delete it after `--force-delete-stuck-pods-after-seconds`
//! and run the replica elsewhere, instead of holding the slot forever
//! (Kubeflow #2072) — by default only once the node is known to be off (deleted,
//! or tainted `node.kubernetes.io/out-of-service`), since a partitioned node
//! may still run the old container; under `--force-delete-stuck-pods-on-any-node`
//! after the wait alone.
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use tfjob_operator::api::fixtures::TfJobFixture;
use tfjob_operator::api::types::{RestartPolicy, TFJob};

use crate::cluster::{client, random_suffix, test_namespace, wait_until};
use crate::operator::{Operator, ensure_crd};
use crate::support::shared_cluster;

/// The label `e2e/cluster.sh` tells KWOK to leave alone.
const LOST_LABEL: &str = "e2e.tfjob-operator.local/lost";
/// Only this test's Pods tolerate the dedicated node's taint.
pub(crate) const DEDICATED: &str = "e2e.tfjob-operator.local/dedicated";
/// Node lease expiry (~40-50 s) + eviction + the operator's wait + a new Pod.
const NODE_LOSS: Duration = Duration::from_secs(240);

/// A fake node of our own. Deleted at the end of the test; if the test
/// fails first it stays (tainted, so nothing else lands there) until the
/// cluster is torn down. Also used by `migration`, whose Pods tolerate
/// [`DEDICATED`] with the test's namespace as its value.
pub(crate) struct DedicatedNode {
    pub(crate) api: Api<Node>,
    pub(crate) name: String,
}

impl DedicatedNode {
    pub(crate) async fn create(client: &kube::Client, ns: &str) -> Self {
        let name = format!("lost-{}", random_suffix());
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name,
                "annotations": { "kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0" },
                "labels": { "type": "kwok", "kubernetes.io/hostname": name, DEDICATED: ns },
            },
            "spec": { "taints": [{ "key": DEDICATED, "value": ns, "effect": "NoSchedule" }] },
            "status": {
                "capacity": { "cpu": "1000", "memory": "4Ti", "pods": "100" },
                "allocatable": { "cpu": "1000", "memory": "4Ti", "pods": "100" },
            },
        }))
        .expect("a valid Node");
        let api: Api<Node> = Api::all(client.clone());
        api.create(&PostParams::default(), &node)
            .await
            .expect("the dedicated node");
        Self { api, name }
    }

    /// Deletes the node; the Pod GC removes Pods still bound to it.
    pub(crate) async fn delete(self) {
        let _ = self.api.delete(&self.name, &DeleteParams::default()).await;
    }

    /// The admin's word that the node is shut down (non-graceful node
    /// shutdown).
    async fn mark_out_of_service(&self) {
        let patch = serde_json::json!({ "spec": { "taints": [
            { "key": DEDICATED, "value": self.name, "effect": "NoSchedule" },
            { "key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute" },
        ] } });
        self.api
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("taint the node out-of-service");
    }

    async fn take_away(&self) {
        let patch = serde_json::json!({ "metadata": { "labels": { LOST_LABEL: "true" } } });
        self.api
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("label the node lost");
    }
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

fn running(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn a_replica_stuck_on_a_lost_node_is_kept_until_the_node_is_out_of_service_then_run_elsewhere()
 {
    let _cluster = shared_cluster().await;
    let client = client().await;
    ensure_crd(&client).await;
    let ns = test_namespace(&client, "lost-node").await;
    let node = DedicatedNode::create(&client, &ns).await;
    let mut operator = Operator::start_with(
        &ns,
        &[
            "--leader-elect=false",
            "--force-delete-stuck-pods-after-seconds=2",
        ],
        None,
    );
    operator.wait_ready().await;
    let stuck = strand_a_worker(&client, &ns, &node).await;

    // The node is still there (NotReady, unreachable): it may still run
    // the worker, so the operator says so and leaves the Pod alone.
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    wait_until("a StuckPodKept Warning on the job", NODE_LOSS, || async {
        let listed = events
            .list(&ListParams::default().fields("involvedObject.name=lost"))
            .await
            .ok()?;
        listed
            .items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("StuckPodKept")
                    && e.message.as_deref().is_some_and(|m| m.contains(&node.name))
            })
            .then_some(())
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let still = pods.get_opt("lost-worker-0").await.expect("get the worker");
    assert_eq!(
        still.and_then(|p| p.metadata.uid),
        stuck,
        "the stuck worker must stay while its node may still run it"
    );

    // Tainted out-of-service, the Pod may go: ours or the Pod GC's force
    // delete (kube-controller-manager's rule for this taint), whichever runs
    // first, so no ForceDeletedPod Warning is required here.
    node.mark_out_of_service().await;
    replaced_elsewhere(&client, &ns, &node, stuck, false).await;
    node.delete().await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn on_any_node_a_replica_stuck_on_a_lost_node_is_force_deleted_after_the_wait_alone() {
    let _cluster = shared_cluster().await;
    let client = client().await;
    ensure_crd(&client).await;
    let ns = test_namespace(&client, "lost-node-any").await;
    let node = DedicatedNode::create(&client, &ns).await;
    let mut operator = Operator::start_with(
        &ns,
        &[
            "--leader-elect=false",
            "--force-delete-stuck-pods-after-seconds=2",
            "--force-delete-stuck-pods-on-any-node",
        ],
        None,
    );
    operator.wait_ready().await;
    let stuck = strand_a_worker(&client, &ns, &node).await;
    replaced_elsewhere(&client, &ns, &node, stuck, true).await;
    node.delete().await;
}

/// Runs job `lost`'s one worker on `node`, takes the node away and waits
/// until the worker is evicted and stuck terminating; returns its UID.
async fn strand_a_worker(client: &kube::Client, ns: &str, node: &DedicatedNode) -> Option<String> {
    // The worker prefers the dedicated node, may run there, and (like any Pod
    // with the default tolerations, only faster) leaves an unreachable node
    // after a second.
    let mut job = TfJobFixture::new("lost")
        .workers(1)
        .restart_policy(RestartPolicy::OnFailure)
        .namespace(ns)
        .build();
    let template = &mut job
        .spec
        .tf_replica_specs
        .get_mut("Worker")
        .expect("a Worker")
        .template;
    let mut spec = serde_json::to_value(template.spec.take()).expect("a pod spec");
    spec["terminationGracePeriodSeconds"] = 1.into();
    spec["tolerations"] = serde_json::json!([
        { "key": DEDICATED, "operator": "Exists", "effect": "NoSchedule" },
        { "key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 1 },
        { "key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 1 },
    ]);
    spec["affinity"] = serde_json::json!({ "nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{ "weight": 100, "preference": {
            "matchExpressions": [{ "key": DEDICATED, "operator": "In", "values": [ns] }] } }] } });
    template.spec = Some(serde_json::from_value(spec).expect("the pod spec back"));
    let jobs: Api<TFJob> = Api::namespaced(client.clone(), ns);
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("the TFJob");

    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let first = wait_until(
        "the worker to run on the dedicated node",
        NODE_LOSS,
        || async {
            let pod = pods.get_opt("lost-worker-0").await.ok().flatten()?;
            running(&pod).then_some(pod)
        },
    )
    .await;
    assert_eq!(
        node_of(&first),
        Some(node.name.as_str()),
        "the scheduler did not prefer the dedicated node; the test cannot take it away"
    );
    let first_uid = first.metadata.uid.clone();

    node.take_away().await;
    // Evicted by the taint manager, and stuck: no kubelet confirms it.
    wait_until(
        "the worker to be evicted from the lost node",
        NODE_LOSS,
        || async {
            let pod = pods.get_opt("lost-worker-0").await.ok().flatten()?;
            let disrupted = pod
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .any(|c| c.type_ == "DisruptionTarget" && c.status == "True");
            (pod.metadata.uid == first_uid
                && pod.metadata.deletion_timestamp.is_some()
                && disrupted)
                .then_some(())
        },
    )
    .await;
    first_uid
}

/// Waits for the worker to be force-deleted and replaced on another node,
/// and checks the job's story: a ForceDeletedPod Warning (when `by_us`), no
/// failure, no restart counted.
async fn replaced_elsewhere(
    client: &kube::Client,
    ns: &str,
    node: &DedicatedNode,
    first_uid: Option<String>,
    by_us: bool,
) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let jobs: Api<TFJob> = Api::namespaced(client.clone(), ns);
    let replacement = wait_until(
        "a replacement worker running on another node",
        NODE_LOSS,
        || async {
            let pod = pods.get_opt("lost-worker-0").await.ok().flatten()?;
            (pod.metadata.uid != first_uid
                && running(&pod)
                && node_of(&pod) != Some(node.name.as_str()))
            .then_some(pod)
        },
    )
    .await;
    assert!(node_of(&replacement).is_some());

    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let forced = events
        .list(&ListParams::default().fields("involvedObject.name=lost"))
        .await
        .expect("the job's events")
        .items
        .into_iter()
        .any(|e| {
            e.reason.as_deref() == Some("ForceDeletedPod") && e.type_.as_deref() == Some("Warning")
        });
    assert!(forced || !by_us, "a ForceDeletedPod Warning on the job");
    let job = jobs.get("lost").await.expect("the job");
    let status = job.status.unwrap_or_default();
    assert!(
        !status
            .conditions
            .iter()
            .any(|c| c.type_ == "Failed" && c.status == "True"),
        "a lost node is not the job's failure: {:?}",
        status.conditions
    );
    assert_eq!(
        status
            .replica_statuses
            .get("Worker")
            .map_or(0, |r| r.restarts),
        0,
        "an eviction is not a restart counted against backoffLimit"
    );
}
