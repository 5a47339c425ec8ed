//! A gang on the real node (issue #30, point 4): the operator's PodGroup and
//! kube-scheduler's GangScheduling plugin, with a real kubelet that starts
//! real containers. On KWOK (`tests/e2e/gang.rs`) "bound" is all there is;
//! here a bound Pod's container really starts, so the test can show what a
//! gang is for: no process of the job runs until every replica has a place.
//!
//! The node's capacity for the test is an extended resource the test
//! declares on the node's status (`GANG_SLOT`, 3 of them, as Kubernetes'
//! "advertise extended resources for a node" task does), not CPU: the
//! arithmetic is the test's, whatever the machine has. A plain Pod takes one
//! slot; the job's gang of 3 Workers needs all 3:
//!
//! 1. it does not fit: all 3 Pods exist, none is bound, no container of
//!    theirs exists, the job says "2 of 3 Pods fit";
//! 2. the plain Pod goes: the 3 are bound together, every container starts
//!    after the last of them was bound, each logs from a real process, and
//!    the PodGroup says `PodGroupInitiallyScheduled`.
//!
//! Mirrors: kubernetes/kubernetes `test/e2e/scheduling` (gang scheduling
//! cases against a real cluster), for our operator's groups.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use tfjob_operator::api::pod_group::{CONDITION_INITIALLY_SCHEDULED, PodGroup};
use tfjob_operator::api::types::TFJob;

use crate::cluster;
use crate::support::{self, NODE_NAME, Operator};

/// The extended resource the test gives the real node (and takes back).
const GANG_SLOT: &str = "e2e.tfjob-operator.local/gang-slot";
const TIMEOUT: Duration = Duration::from_secs(180);

/// The node's `GANG_SLOT` capacity: set to `slots`, or removed (`None`),
/// by a JSON patch of its status as a person would send it.
async fn set_slots(nodes: &Api<Node>, slots: Option<u32>) {
    let path = format!("/status/capacity/{}", GANG_SLOT.replace('/', "~1"));
    let op = match slots {
        Some(n) => serde_json::json!([{ "op": "add", "path": path, "value": n.to_string() }]),
        None => serde_json::json!([{ "op": "remove", "path": path }]),
    };
    let (ok, out) = cluster::run(cluster::kubectl().args([
        "patch",
        "node",
        NODE_NAME,
        "--subresource=status",
        "--type=json",
        "-p",
        &op.to_string(),
    ]));
    let Some(n) = slots else {
        // Cleanup: a failure is reported, not fatal (the test's verdict is in).
        if !ok {
            eprintln!("could not take {GANG_SLOT} back from {NODE_NAME}: {out}");
        }
        return;
    };
    assert!(ok, "failed to give {NODE_NAME} {GANG_SLOT}: {out}");
    // The kubelet derives allocatable from capacity on its next status update.
    cluster::wait_until(
        &format!("{NODE_NAME} to have {n} allocatable {GANG_SLOT}"),
        TIMEOUT,
        || async {
            let node = nodes.get(NODE_NAME).await.ok()?;
            let have = node.status?.allocatable?.get(GANG_SLOT)?.0.clone();
            (have == n.to_string()).then_some(())
        },
    )
    .await;
}

/// One slot's worth of container: requests (= limits) one `GANG_SLOT`.
fn slot_container(image: &str, script: &str) -> serde_json::Value {
    serde_json::json!({
        "name": "tensorflow",
        "image": image,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", script],
        "resources": { "limits": { GANG_SLOT: "1" } },
    })
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

/// When the Pod's `PodScheduled` condition turned True (the bind), seconds.
fn bound_at(pod: &Pod) -> Option<i64> {
    let c = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "True")?;
    Some(c.last_transition_time.as_ref()?.0.as_second())
}

/// When the Pod's container started (the kubelet's `startedAt`), seconds.
fn started_at(pod: &Pod) -> Option<i64> {
    let status = pod.status.as_ref()?.container_statuses.as_ref()?.first()?;
    let running = status.state.as_ref()?.running.as_ref()?;
    Some(running.started_at.as_ref()?.0.as_second())
}

#[tokio::test]
#[ignore = "needs a real node: make test-real"]
async fn a_gang_starts_no_container_until_all_of_it_is_bound() {
    let client = cluster::client().await;
    let ns = cluster::test_namespace(&client, "real-gang").await;
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let jobs: Api<TFJob> = Api::namespaced(client.clone(), &ns);
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), &ns);
    let busybox = support::image("busybox");
    support::ensure_crd(&client).await;
    set_slots(&nodes, Some(3)).await;
    let _operator = Operator::start(&ns);

    // A plain Pod holds one of the 3 slots.
    let mut blocker = support::busybox_pod("blocker", "sleep 3600");
    if let Some(spec) = blocker.spec.as_mut() {
        spec.containers = vec![
            serde_json::from_value(slot_container(&busybox, "sleep 3600")).expect("a container"),
        ];
    }
    pods.create(&PostParams::default(), &blocker)
        .await
        .expect("create the blocker Pod");
    cluster::wait_until("the blocker Pod to run", TIMEOUT, || async {
        let pod = pods.get("blocker").await.ok()?;
        started_at(&pod).map(|_| ())
    })
    .await;

    // A gang of 3 Workers, each a real process that says when it started.
    let mut template = support::on_real_node();
    template["terminationGracePeriodSeconds"] = 1.into();
    template["containers"] = serde_json::json!([slot_container(
        &busybox,
        "echo gang member started at $(date +%s); sleep 3600"
    )]);
    let job: TFJob = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": { "name": "gang" },
        "spec": {
            "runPolicy": { "schedulingPolicy": {} },
            "tfReplicaSpecs": { "Worker": {
                "replicas": 3,
                "restartPolicy": "Never",
                "template": { "spec": template },
            } },
        },
    }))
    .expect("a valid TFJob");
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create the TFJob");
    let job_pods = || async {
        pods.list(&ListParams::default().labels("training.kubeflow.org/job-name=gang"))
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    };

    // 1. Two slots free, three needed: nothing is bound, nothing runs.
    let message = cluster::wait_until("the job to say its gang does not fit", TIMEOUT, || async {
        let job = jobs.get("gang").await.ok()?;
        job.status?
            .conditions
            .into_iter()
            .find(|c| c.reason.as_deref() == Some("GangUnschedulable"))?
            .message
    })
    .await;
    assert!(message.contains("2 of 3 Pods fit"), "{message}");
    let seen = job_pods().await;
    assert_eq!(seen.len(), 3, "all 3 Pods exist while the gang waits");
    for pod in &seen {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        assert_eq!(
            node_of(pod),
            None,
            "{name} was bound: a gang binds all or none"
        );
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref());
        assert!(
            statuses.is_none_or(Vec::is_empty),
            "{name} has a container while its gang waits: {statuses:?}"
        );
    }

    // 2. The slot comes free: the three are bound together and start.
    pods.delete("blocker", &Default::default())
        .await
        .expect("delete the blocker Pod");
    let running = cluster::wait_until("the gang's 3 containers to run", TIMEOUT, || async {
        let pods = job_pods().await;
        let all = pods.len() == 3 && pods.iter().all(|p| started_at(p).is_some());
        all.then_some(pods)
    })
    .await;
    let last_bind = running.iter().filter_map(bound_at).max().expect("3 binds");
    for pod in &running {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        assert_eq!(node_of(pod), Some(NODE_NAME), "{name}");
        let started = started_at(pod).expect("started");
        assert!(
            started >= last_bind,
            "{name}'s container started at {started}, before the last of its gang was bound at {last_bind}"
        );
        let log = support::logs(&ns, name);
        assert!(log.contains("gang member started at"), "{name}: {log}");
    }
    let group = groups.get("gang").await.expect("the job's PodGroup");
    assert_eq!(group.min_count(), Some(3));
    let scheduled = group
        .initially_scheduled()
        .unwrap_or_else(|| panic!("no {CONDITION_INITIALLY_SCHEDULED} on {group:?}"));
    assert_eq!(scheduled.status, "True", "{scheduled:?}");

    cluster::delete_namespace(&client, &ns).await;
    set_slots(&nodes, None).await;
}
