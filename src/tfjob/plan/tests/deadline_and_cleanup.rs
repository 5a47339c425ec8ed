//! The end of a job: `activeDeadlineSeconds`, `cleanPodPolicy` and
//! `ttlSecondsAfterFinished`.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{NOW, World, at, created_pods, deleted_pods, last_condition, replica};
use crate::api::constants::ReplicaType::{Chief, PS, Worker};
use crate::api::fixtures::TfJobFixture;
use crate::api::types::CleanPodPolicy;
use crate::tfjob::plan::Action;

#[test]
fn deadline_fails_the_job_and_stops_only_unfinished_pods() {
    let w = World::new(TfJobFixture::new("j").workers(3).active_deadline_seconds(5))
        .started(10)
        .running(Worker, 0)
        .pod(Worker, 1, "Succeeded", Some(0))
        .pod(Worker, 2, "Pending", None)
        .with_services();
    let (w, p) = w.settle();
    assert_eq!(last_condition(&p).0, "Failed");
    let msg = p.status.conditions.last().unwrap().message.clone().unwrap();
    assert!(msg.contains("deadline"), "{msg}");
    // The failure is stored before anything is stopped.
    assert!(deleted_pods(&p).is_empty());
    assert_eq!(deleted_pods(&w.plan()), ["j-worker-0", "j-worker-2"]);
}

#[test]
fn deadline_not_yet_passed_asks_for_a_requeue_at_the_deadline() {
    let w = World::new(
        TfJobFixture::new("j")
            .workers(2)
            .active_deadline_seconds(60),
    )
    .started(10)
    .all_running();
    let p = w.plan();
    assert_eq!(last_condition(&p).0, "Running");
    assert_eq!(p.requeue_after, Some(Duration::from_secs(50)));
}

#[test]
fn clean_pod_policy_all_deletes_every_pod_and_service_on_success() {
    let w = World::new(
        TfJobFixture::new("j")
            .chief(1)
            .ps(1)
            .clean_pod_policy(CleanPodPolicy::All),
    )
    .pod(Chief, 0, "Succeeded", Some(0))
    .running(PS, 0)
    .with_services();
    let (w, finishing) = w.settle();
    assert!(deleted_pods(&finishing).is_empty());
    let p = w.plan();
    assert_eq!(deleted_pods(&p), ["j-chief-0", "j-ps-0"]);
    assert_eq!(
        p.actions
            .iter()
            .filter(|a| matches!(a, Action::DeleteService { .. }))
            .count(),
        2
    );
}

#[test]
fn clean_pod_policy_all_deletes_a_service_whose_pod_is_already_gone() {
    // The operator was killed between a slot's Pod delete and its Service
    // delete: the next cleanup pass sees the Service alone and deletes it.
    let w = World::new(
        TfJobFixture::new("j")
            .chief(1)
            .workers(1)
            .clean_pod_policy(CleanPodPolicy::All),
    )
    .pod(Chief, 0, "Succeeded", Some(0))
    .running(Worker, 0)
    .with_services();
    let (w, _) = w.settle();
    let p = w.without_pod("j-worker-0").plan();
    assert_eq!(deleted_pods(&p), ["j-chief-0"]);
    let mut services: Vec<&str> = p
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::DeleteService { name } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    services.sort();
    assert_eq!(services, ["j-chief-0", "j-worker-0"]);
}

#[test]
fn clean_pod_policy_running_deletes_running_and_pending_pods_only() {
    let w = World::new(
        TfJobFixture::new("j")
            .chief(1)
            .ps(1)
            .workers(1)
            .clean_pod_policy(CleanPodPolicy::Running),
    )
    .pod(Chief, 0, "Succeeded", Some(0))
    .running(PS, 0)
    .pod(Worker, 0, "Pending", None)
    .with_services();
    let (w, finishing) = w.settle();
    assert!(deleted_pods(&finishing).is_empty());
    assert_eq!(deleted_pods(&w.plan()), ["j-ps-0", "j-worker-0"]);
}

#[test]
fn ttl_deletes_the_job_once_it_has_passed_and_requeues_before() {
    let finished = |ago: i64, ttl: i32| {
        World::new(
            TfJobFixture::new("j")
                .workers(1)
                .ttl_seconds_after_finished(ttl),
        )
        .status(|s| {
            crate::tfjob::plan::conditions::set(
                s,
                "Succeeded",
                true,
                "TFJobSucceeded",
                String::new(),
                &Time(at(NOW - ago)),
            );
            s.completion_time = Some(Time(at(NOW - ago)));
        })
    };
    assert!(finished(10, 5).plan().actions.contains(&Action::DeleteJob));
    let p = finished(10, 60).plan();
    assert!(!p.actions.contains(&Action::DeleteJob));
    assert_eq!(p.requeue_after, Some(Duration::from_secs(50)));
}

#[test]
fn a_stop_that_failed_after_the_deadline_is_retried_and_active_shows_what_still_runs() {
    let w = World::new(TfJobFixture::new("j").workers(2).active_deadline_seconds(5))
        .started(10)
        .all_running();
    let (w, p) = w.settle();
    assert_eq!(last_condition(&p).0, "Failed");
    assert!(p.bookkeeping.as_ref().is_some_and(|b| b.stop_unfinished));
    // The deletes failed: both Pods still run on the next pass.
    let p = w.plan();
    assert_eq!(deleted_pods(&p), ["j-worker-0", "j-worker-1"]);
    assert_eq!(replica(&p, Worker).active, 2);
}

#[test]
fn with_a_ttl_of_zero_success_is_written_before_the_job_is_deleted() {
    let w = World::new(
        TfJobFixture::new("j")
            .chief(1)
            .ttl_seconds_after_finished(0),
    )
    .pod(Chief, 0, "Succeeded", Some(0))
    .with_services();
    let (w, p) = w.settle();
    assert_eq!(last_condition(&p).0, "Succeeded");
    assert!(
        !p.actions.contains(&Action::DeleteJob),
        "the success must be written (and counted) first"
    );
    assert_eq!(p.requeue_after, Some(Duration::ZERO));
    assert!(w.plan().actions.contains(&Action::DeleteJob));
}

/// Issue #38, defect 2: the pass that finishes a job writes its status and
/// deletes nothing. Were its Pods deleted first (`cleanPodPolicy: All`) and
/// the status write refused, the next pass would see the slots empty and
/// the job unfinished, and run the training again.
#[test]
fn a_finished_job_whose_status_write_is_refused_is_never_run_again() {
    let w = World::new(
        TfJobFixture::new("j")
            .chief(1)
            .workers(2)
            .clean_pod_policy(CleanPodPolicy::All),
    )
    .pod(Chief, 0, "Succeeded", Some(0))
    .running(Worker, 0)
    .running(Worker, 1)
    .with_services();
    let finishing = w.plan();
    assert_eq!(last_condition(&finishing).0, "Succeeded");
    // Whatever the finishing pass deleted is gone; its status write is not
    // stored (refused), so the next pass plans from the same stored job.
    let mut w = w;
    for name in deleted_pods(&finishing) {
        w = w.without_pod(&name);
    }
    let next = w.plan();
    assert!(
        created_pods(&next).is_empty(),
        "the finished job was run again: {:?}",
        created_pods(&next)
    );
    assert_eq!(last_condition(&next).0, "Succeeded");
    // Once the finished status is stored, the pass after cleans up.
    let (w, _) = w.settle();
    let cleanup = w.plan();
    assert_eq!(
        deleted_pods(&cleanup),
        ["j-chief-0", "j-worker-0", "j-worker-1"]
    );
    assert!(created_pods(&cleanup).is_empty());
}
