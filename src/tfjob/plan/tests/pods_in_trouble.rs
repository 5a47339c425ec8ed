//! Pods in trouble that are not failures: terminating, evicted, stuck on a
//! lost node, garbage-collected after success, unpullable, unschedulable.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ContainerState;
use k8s_openapi::api::core::v1::ContainerStatus;
use k8s_openapi::api::core::v1::PodCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{NOW, World, at, created_pods, deleted_pods, last_condition, replica};
use crate::api::constants::ReplicaType::{Chief, Worker};
use crate::api::fixtures::TfJobFixture;
use crate::api::types::RestartPolicy;
use crate::tfjob::plan::Action;
use crate::tfjob::plan::Observed;
use crate::tfjob::plan::Plan;
use crate::tfjob::plan::PlanConfig;
use crate::tfjob::plan::plan;
use crate::tfjob::plan::succeeded_indexes;

#[test]
fn a_terminating_pod_is_neither_failed_nor_replaced_yet() {
    let mut w = World::new(TfJobFixture::new("j").workers(2))
        .running(Worker, 0)
        .pod(Worker, 1, "Running", None);
    let mut pod = (*w.pods[1]).clone();
    pod.metadata.deletion_timestamp = Some(Time(at(NOW - 1)));
    w.pods[1] = Arc::new(pod);
    let p = w.with_services().plan();
    assert_eq!(replica(&p, Worker).failed, 0);
    assert_eq!(replica(&p, Worker).active, 1);
    assert!(created_pods(&p).is_empty());
    assert_eq!(last_condition(&p).0, "Running");
}

#[test]
fn an_evicted_pod_is_replaced_without_counting_a_failure() {
    let mut w = World::new(TfJobFixture::new("j").workers(2).backoff_limit(0))
        .running(Worker, 0)
        .pod(Worker, 1, "Failed", None);
    let mut pod = (*w.pods[1]).clone();
    let status = pod.status.as_mut().unwrap();
    status.reason = Some("Evicted".into());
    status.conditions = Some(vec![PodCondition {
        type_: "DisruptionTarget".into(),
        status: "True".into(),
        ..Default::default()
    }]);
    w.pods[1] = Arc::new(pod);
    let p = w.with_services().plan();
    assert_eq!(deleted_pods(&p), ["j-worker-1"]);
    assert_eq!(replica(&p, Worker).restarts, 0);
    assert_eq!(replica(&p, Worker).failed, 0);
    assert_eq!(last_condition(&p).0, "Running");
}

#[test]
fn a_succeeded_index_is_not_rerun_after_its_pod_is_gone() {
    let w = World::new(TfJobFixture::new("j").chief(1).workers(2))
        .running(Chief, 0)
        .pod(Worker, 0, "Succeeded", Some(0))
        .running(Worker, 1)
        .with_services();
    let (mut w, p) = w.settle();
    assert_eq!(succeeded_indexes(&p.status, Worker), [0].into());
    w.pods
        .retain(|p| p.metadata.name.as_deref() != Some("j-worker-0"));
    let p = w.plan();
    assert!(created_pods(&p).is_empty(), "{:?}", created_pods(&p));
    assert_eq!(replica(&p, Worker).succeeded, 1);
}

#[test]
fn a_pending_pod_that_cannot_pull_its_image_is_reported_on_the_job() {
    let mut w = World::new(TfJobFixture::new("j").workers(1))
        .pod(Worker, 0, "Pending", None)
        .with_services();
    let mut pod = (*w.pods[0]).clone();
    pod.status.as_mut().unwrap().container_statuses = Some(vec![ContainerStatus {
        name: "tensorflow".into(),
        state: Some(ContainerState {
            waiting: Some(k8s_openapi::api::core::v1::ContainerStateWaiting {
                reason: Some("ErrImagePull".into()),
                message: Some("pull access denied".into()),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }]);
    w.pods[0] = Arc::new(pod);
    let p = w.plan();
    assert!(
        p.events.iter().any(|e| e.warning
            && e.reason == "ErrImagePull"
            && e.message.contains("pull access denied")),
        "{:?}",
        p.events
    );
}

#[test]
fn a_disrupted_pod_stuck_terminating_on_a_lost_node_is_force_deleted_after_the_wait() {
    let mut w = World::new(
        TfJobFixture::new("j")
            .workers(2)
            .restart_policy(RestartPolicy::OnFailure),
    )
    .running(Worker, 0)
    .running(Worker, 1)
    .with_services();
    let mut pod = (*w.pods[1]).clone();
    pod.metadata.deletion_timestamp = Some(Time(at(NOW - 100)));
    pod.status.as_mut().unwrap().conditions = Some(vec![PodCondition {
        type_: "DisruptionTarget".into(),
        status: "True".into(),
        reason: Some("DeletionByTaintManager".into()),
        ..Default::default()
    }]);
    w.pods[1] = Arc::new(pod);
    let plan_with = |wait: Option<u64>| {
        plan(
            &Observed {
                job: &w.job,
                pods: &w.pods,
                services: &w.services,
                integrations: &[],
                now: at(NOW),
            },
            &PlanConfig {
                force_delete_stuck_after: wait.map(Duration::from_secs),
                ..PlanConfig::default()
            },
        )
    };
    let forced = |p: &Plan| {
        p.actions.iter().any(
            |a| matches!(a, Action::DeletePod { name, force: true, .. } if name == "j-worker-1"),
        )
    };
    // Off: the slot stays held (Kubeflow #2072's hang).
    assert!(!forced(&plan_with(None)));
    // 100 s after the grace period with a 300 s wait: not yet, look again in 200 s.
    let early = plan_with(Some(300));
    assert!(!forced(&early));
    assert_eq!(early.requeue_after, Some(Duration::from_secs(200)));
    // With a 60 s wait: now.
    assert!(forced(&plan_with(Some(60))));
}

#[test]
fn a_pod_being_deleted_normally_is_never_force_deleted() {
    let mut w = World::new(TfJobFixture::new("j").workers(1))
        .running(Worker, 0)
        .with_services();
    let mut pod = (*w.pods[0]).clone();
    pod.metadata.deletion_timestamp = Some(Time(at(NOW - 10_000)));
    w.pods[0] = Arc::new(pod);
    let p = plan(
        &Observed {
            job: &w.job,
            pods: &w.pods,
            services: &w.services,
            integrations: &[],
            now: at(NOW),
        },
        &PlanConfig {
            force_delete_stuck_after: Some(Duration::from_secs(1)),
            ..PlanConfig::default()
        },
    );
    assert!(
        !p.actions
            .iter()
            .any(|a| matches!(a, Action::DeletePod { force: true, .. }))
    );
}

#[test]
fn a_job_whose_pods_cannot_be_scheduled_says_so_in_its_created_condition() {
    let mut w = World::new(TfJobFixture::new("j").workers(1))
        .pod(Worker, 0, "Pending", None)
        .with_services();
    let mut pod = (*w.pods[0]).clone();
    pod.status.as_mut().unwrap().conditions = Some(vec![PodCondition {
        type_: "PodScheduled".into(),
        status: "False".into(),
        reason: Some("Unschedulable".into()),
        message: Some("0/4 nodes are available: 4 Insufficient nvidia.com/gpu.".into()),
        ..Default::default()
    }]);
    w.pods[0] = Arc::new(pod);
    let created = |p: &Plan| {
        p.status
            .conditions
            .iter()
            .find(|c| c.type_ == "Created")
            .and_then(|c| c.message.clone())
            .unwrap_or_default()
    };
    let (w, p) = w.settle();
    let msg = created(&p);
    assert!(msg.contains("1 Pod(s) cannot be scheduled"), "{msg}");
    assert!(msg.contains("Insufficient nvidia.com/gpu"), "{msg}");
    assert_eq!(last_condition(&p), ("Created", "True", "TFJobCreated"));
    // Scheduled and running: the message is plain again.
    let p = w.incarnation(Worker, 0, 1, "Running", None).plan();
    assert_eq!(created(&p), "TFJob j is created.");
}
