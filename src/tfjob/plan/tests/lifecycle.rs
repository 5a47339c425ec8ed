//! A job's life when nothing fails: created, running, succeeded (by the Chief
//! or by the success policy), scaled, suspended and resumed, left alone.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{NOW, World, at, created_pods, deleted_pods, has, last_condition, replica};
use crate::api::constants::ReplicaType::{Chief, Master, PS, Worker};
use crate::api::fixtures::TfJobFixture;
use crate::api::types::SuccessPolicy;
use crate::tfjob::plan::Action;

#[test]
fn a_new_job_is_created_and_gets_every_pod_and_service() {
    let p = World::new(TfJobFixture::new("mnist").chief(1).ps(2).workers(4)).plan();
    assert_eq!(last_condition(&p), ("Created", "True", "TFJobCreated"));
    assert_eq!(created_pods(&p).len(), 7);
    assert!(created_pods(&p).contains(&"mnist-ps-1".to_owned()));
    let services = p
        .actions
        .iter()
        .filter(|a| matches!(a, Action::CreateService(_)))
        .count();
    assert_eq!(services, 7);
    assert_eq!(p.status.start_time, Some(Time(at(NOW))));
    assert!(
        p.status.replica_statuses.contains_key("Worker"),
        "replicaStatuses is always written"
    );
}

#[test]
fn chief_running_makes_the_job_running() {
    let p = World::new(TfJobFixture::new("j").chief(1).workers(2))
        .all_running()
        .plan();
    assert_eq!(last_condition(&p), ("Running", "True", "TFJobRunning"));
    assert_eq!(replica(&p, Chief).active, 1);
    assert_eq!(replica(&p, Worker).active, 2);
    assert!(p.actions.is_empty(), "{:?}", p.actions);
}

#[test]
fn pending_chief_is_not_running_yet() {
    let w = World::new(TfJobFixture::new("j").chief(1).workers(1))
        .pod(Chief, 0, "Pending", None)
        .running(Worker, 0)
        .with_services();
    assert_eq!(last_condition(&w.plan()).0, "Created");
}

#[test]
fn master_counts_as_chief() {
    let w = World::new(TfJobFixture::new("j").master(1).workers(1))
        .pod(Master, 0, "Succeeded", Some(0))
        .running(Worker, 0)
        .with_services();
    assert_eq!(
        last_condition(&w.plan()),
        ("Succeeded", "True", "TFJobSucceeded")
    );
}

#[test]
fn chief_success_succeeds_the_job_and_folds_active_into_succeeded() {
    let w = World::new(TfJobFixture::new("j").chief(1).ps(1).workers(2))
        .pod(Chief, 0, "Succeeded", Some(0))
        .running(PS, 0)
        .running(Worker, 0)
        .running(Worker, 1)
        .with_services();
    let p = w.plan();
    assert_eq!(last_condition(&p), ("Succeeded", "True", "TFJobSucceeded"));
    assert_eq!(p.status.completion_time, Some(Time(at(NOW))));
    assert_eq!(replica(&p, Worker).succeeded, 2);
    assert_eq!(replica(&p, Worker).active, 0);
    assert!(
        deleted_pods(&p).is_empty(),
        "cleanPodPolicy None keeps Pods"
    );
    assert!(p.events.iter().any(|e| e.reason == "TFJobSucceeded"));
}

#[test]
fn worker_success_does_not_succeed_a_job_with_a_chief() {
    let w = World::new(TfJobFixture::new("j").chief(1).workers(1))
        .running(Chief, 0)
        .pod(Worker, 0, "Succeeded", Some(0))
        .with_services();
    assert_eq!(last_condition(&w.plan()).0, "Running");
}

#[test]
fn without_a_chief_worker_zero_decides_success() {
    let w = World::new(TfJobFixture::new("j").workers(3))
        .pod(Worker, 0, "Succeeded", Some(0))
        .running(Worker, 1)
        .running(Worker, 2)
        .with_services();
    assert_eq!(last_condition(&w.plan()).0, "Succeeded");
}

#[test]
fn all_workers_policy_waits_for_every_worker() {
    let f = TfJobFixture::new("j")
        .workers(2)
        .success_policy(SuccessPolicy::AllWorkers);
    let w = World::new(f.clone())
        .pod(Worker, 0, "Succeeded", Some(0))
        .running(Worker, 1)
        .with_services();
    assert_eq!(last_condition(&w.plan()).0, "Running");
    let w = World::new(f)
        .pod(Worker, 0, "Succeeded", Some(0))
        .pod(Worker, 1, "Succeeded", Some(0))
        .with_services();
    assert_eq!(last_condition(&w.plan()).0, "Succeeded");
}

#[test]
fn a_ps_only_job_never_succeeds() {
    let w = World::new(TfJobFixture::new("j").ps(1))
        .pod(PS, 0, "Succeeded", Some(0))
        .with_services();
    assert_eq!(last_condition(&w.plan()).0, "Created");
}

#[test]
fn scaling_down_deletes_the_extra_pod_and_service_and_scaling_up_creates() {
    let mut w = World::new(TfJobFixture::new("j").workers(3)).all_running();
    w.job
        .spec
        .tf_replica_specs
        .get_mut("Worker")
        .unwrap()
        .replicas = Some(2);
    let p = w.plan();
    assert_eq!(deleted_pods(&p), ["j-worker-2"]);
    assert!(p.actions.contains(&Action::DeleteService {
        name: "j-worker-2".into()
    }));
    w.job
        .spec
        .tf_replica_specs
        .get_mut("Worker")
        .unwrap()
        .replicas = Some(4);
    let p = w.plan();
    assert_eq!(created_pods(&p), ["j-worker-3"]);
}

#[test]
fn suspending_deletes_children_and_resuming_resets_start_time() {
    let w = World::new(TfJobFixture::new("j").workers(2).suspend(true))
        .started(100)
        .all_running();
    let w = w.status(|s| {
        crate::tfjob::plan::conditions::set(
            s,
            "Running",
            true,
            "TFJobRunning",
            String::new(),
            &Time(at(NOW - 50)),
        );
    });
    let (mut w, p) = w.settle();
    assert!(has(&p, "Suspended"));
    assert!(!has(&p, "Running"));
    assert_eq!(deleted_pods(&p).len(), 2);
    assert_eq!(
        p.actions
            .iter()
            .filter(|a| matches!(a, Action::DeleteService { .. }))
            .count(),
        2
    );
    assert_eq!(replica(&p, Worker).active, 0);
    w.pods.clear();
    w.services.clear();
    w.job.spec.run_policy.suspend = Some(false);
    let p = w.plan();
    assert!(!has(&p, "Suspended"));
    assert_eq!(p.status.start_time, Some(Time(at(NOW))));
    assert_eq!(created_pods(&p).len(), 2);
    assert!(p.events.iter().any(|e| e.reason == "TFJobResumed"));
}

#[test]
fn a_job_managed_by_multikueue_is_left_alone() {
    let mut w = World::new(TfJobFixture::new("j").workers(2));
    w.job.spec.run_policy.managed_by = Some("kueue.x-k8s.io/multikueue".into());
    let p = w.plan();
    assert!(!p.manage);
    assert!(p.actions.is_empty());
}

#[test]
fn a_job_managed_by_multikueue_at_spec_managed_by_is_left_alone_too() {
    // Where MultiKueue's generic adapter reads it (docs/kueue.md).
    let mut w = World::new(TfJobFixture::new("j").workers(2));
    w.job.spec.managed_by = Some("kueue.x-k8s.io/multikueue".into());
    let p = w.plan();
    assert!(!p.manage);
    assert!(p.actions.is_empty());
    // MultiKueue's copy on a worker has it removed: that one runs here.
    w.job.spec.managed_by = None;
    assert!(w.plan().manage);
    assert!(!created_pods(&w.plan()).is_empty());
}

#[test]
fn an_unchanged_running_job_plans_the_same_status_and_no_actions() {
    let (w, first) = World::new(TfJobFixture::new("j").chief(1).workers(2))
        .all_running()
        .settle();
    let second = w.plan();
    assert_eq!(second.status, first.status);
    assert!(second.actions.is_empty());
    assert!(second.events.is_empty());
}

#[test]
fn a_job_being_deleted_plans_nothing() {
    let mut w = World::new(TfJobFixture::new("j").workers(2));
    w.job.metadata.deletion_timestamp = Some(Time(at(NOW)));
    let p = w.plan();
    assert!(!p.manage && p.actions.is_empty());
}

/// Found by the lifecycle model (issue #38): a Worker index that succeeded
/// and is first seen by the pass that suspends the job (its Pod deleted by
/// that pass) is remembered, and not run again on resume.
#[test]
fn an_index_that_succeeded_before_a_suspend_is_not_run_again_on_resume() {
    let w = World::new(TfJobFixture::new("j").chief(1).workers(2).suspend(true))
        .running(Chief, 0)
        .running(Worker, 0)
        .pod(Worker, 1, "Succeeded", Some(0))
        .with_services();
    let (mut w, suspending) = w.settle();
    assert!(deleted_pods(&suspending).contains(&"j-worker-1".to_owned()));
    w.pods.clear();
    w.job.spec.run_policy.suspend = Some(false);
    let resumed = w.plan();
    assert_eq!(created_pods(&resumed), ["j-chief-0", "j-worker-0"]);
}
