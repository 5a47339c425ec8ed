//! Failures and restarts: what each restart policy does with an exit code,
//! and how restarts count against `backoffLimit` exactly once.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ContainerStatus;

use super::{World, created_pods, deleted_pods, has, last_condition, replica};
use crate::api::constants::ReplicaType::{Chief, Evaluator, PS, Worker};
use crate::api::fixtures::TfJobFixture;
use crate::api::types::ReplicaStatus;
use crate::api::types::RestartPolicy;
use crate::tfjob::plan::Plan;

#[test]
fn never_policy_failure_fails_the_job_naming_the_replica_type() {
    let w = World::new(TfJobFixture::new("j").chief(1).workers(2))
        .running(Chief, 0)
        .running(Worker, 0)
        .pod(Worker, 1, "Failed", Some(1))
        .with_services();
    let p = w.plan();
    assert_eq!(last_condition(&p), ("Failed", "True", "TFJobFailed"));
    let msg = p.status.conditions.last().unwrap().message.clone().unwrap();
    assert!(msg.contains("1 Worker replica(s) failed"), "{msg}");
    assert_eq!(replica(&p, Worker).failed, 1);
    assert!(created_pods(&p).is_empty());
}

#[test]
fn evaluator_failure_fails_the_job_too() {
    let w = World::new(TfJobFixture::new("j").chief(1).evaluators(1))
        .running(Chief, 0)
        .pod(Evaluator, 0, "Failed", Some(2))
        .with_services();
    assert_eq!(last_condition(&w.plan()).0, "Failed");
}

#[test]
fn exit_code_137_restarts_by_recreating_the_pod() {
    let w = World::new(
        TfJobFixture::new("j")
            .workers(2)
            .restart_policy(RestartPolicy::ExitCode),
    )
    .running(Worker, 0)
    .pod(Worker, 1, "Failed", Some(137))
    .with_services();
    let (w, p) = w.settle();
    assert_eq!(deleted_pods(&p), ["j-worker-1"]);
    assert_eq!(replica(&p, Worker).restarts, 1);
    // As Kubeflow: a restarting Pod counts as failed until it is replaced.
    assert_eq!(replica(&p, Worker).failed, 1);
    assert!(
        p.events
            .iter()
            .any(|e| e.reason == "TFJobRestarting" && e.warning)
    );
    assert!(
        p.events
            .iter()
            .any(|e| e.reason == "ExitedWithCode" && e.message.contains("137"))
    );
    // Restarting replaces Running, even though worker 0 still runs.
    assert_eq!(last_condition(&p).0, "Restarting");
    assert!(!has(&p, "Running"));
    // Next pass: the Pod is gone, so it is re-created and the count is kept.
    let p = w.without_pod("j-worker-1").plan();
    assert_eq!(created_pods(&p), ["j-worker-1"]);
    assert_eq!(replica(&p, Worker).restarts, 1);
}

#[test]
fn restarting_shows_while_nothing_runs() {
    let w = World::new(
        TfJobFixture::new("j")
            .workers(1)
            .ps(1)
            .restart_policy(RestartPolicy::OnFailure),
    )
    .pod(Worker, 0, "Failed", Some(1))
    .pod(PS, 0, "Pending", None)
    .with_services();
    assert_eq!(
        last_condition(&w.plan()),
        ("Restarting", "True", "TFJobRestarting")
    );
}

#[test]
fn exit_code_1_under_exit_code_policy_is_permanent() {
    let w = World::new(
        TfJobFixture::new("j")
            .workers(2)
            .restart_policy(RestartPolicy::ExitCode),
    )
    .running(Worker, 0)
    .pod(Worker, 1, "Failed", Some(1))
    .with_services();
    let p = w.plan();
    assert_eq!(last_condition(&p).0, "Failed");
    assert!(
        deleted_pods(&p).is_empty(),
        "a failed Pod is kept for its logs"
    );
}

#[test]
fn exit_code_restarts_count_against_the_backoff_limit() {
    let f = TfJobFixture::new("j")
        .workers(2)
        .restart_policy(RestartPolicy::ExitCode)
        .backoff_limit(2);
    let with_restarts = |n: i32| {
        World::new(f.clone())
            .status(|s| {
                s.replica_statuses.insert(
                    "Worker".into(),
                    ReplicaStatus {
                        restarts: n,
                        ..Default::default()
                    },
                );
            })
            .running(Worker, 0)
            .pod(Worker, 1, "Failed", Some(137))
            .with_services()
    };
    let p = with_restarts(1).plan();
    assert_eq!(
        deleted_pods(&p),
        ["j-worker-1"],
        "the second restart is allowed"
    );
    let p = with_restarts(2).plan();
    assert_eq!(last_condition(&p), ("Failed", "True", "TFJobFailed"));
    let msg = p.status.conditions.last().unwrap().message.clone().unwrap();
    assert!(msg.contains("backoff limit"), "{msg}");
    // The failure is stored first; the pass after it stops the running
    // worker, and nothing is re-created.
    assert!(deleted_pods(&p).is_empty());
    assert!(created_pods(&p).is_empty());
    let (w, _) = with_restarts(2).settle();
    let p = w.plan();
    assert_eq!(deleted_pods(&p), ["j-worker-0"]);
    assert!(created_pods(&p).is_empty());
}

#[test]
fn backoff_limit_zero_fails_on_the_first_retryable_failure() {
    let w = World::new(
        TfJobFixture::new("j")
            .workers(1)
            .restart_policy(RestartPolicy::ExitCode)
            .backoff_limit(0),
    )
    .pod(Worker, 0, "Failed", Some(143))
    .with_services();
    assert_eq!(last_condition(&w.plan()).0, "Failed");
}

#[test]
fn in_place_restarts_count_against_the_backoff_limit() {
    let mut w = World::new(
        TfJobFixture::new("j")
            .workers(1)
            .restart_policy(RestartPolicy::OnFailure)
            .backoff_limit(3),
    )
    .running(Worker, 0)
    .with_services();
    let set_restarts = |w: &mut World, n: i32| {
        let mut pod = (*w.pods[0]).clone();
        pod.status.as_mut().unwrap().container_statuses = Some(vec![ContainerStatus {
            name: "tensorflow".into(),
            restart_count: n,
            ..Default::default()
        }]);
        w.pods[0] = Arc::new(pod);
    };
    // As Kubeflow and Kubernetes Jobs: in-place restarts fail the job when
    // they reach the limit.
    set_restarts(&mut w, 2);
    assert_eq!(last_condition(&w.plan()).0, "Running");
    set_restarts(&mut w, 3);
    let p = w.plan();
    assert_eq!(last_condition(&p).0, "Failed");
    assert_eq!(
        p.status.conditions.last().unwrap().message.as_deref(),
        Some("Job j has failed because it has reached the specified backoff limit")
    );
}

#[test]
fn dynamic_worker_failures_do_not_fail_the_job() {
    let w = World::new(
        TfJobFixture::new("j")
            .chief(1)
            .workers(2)
            .dynamic_worker(true),
    )
    .running(Chief, 0)
    .running(Worker, 0)
    .pod(Worker, 1, "Failed", Some(1))
    .with_services();
    let p = w.plan();
    assert_eq!(last_condition(&p).0, "Running");
    assert_eq!(replica(&p, Worker).failed, 1);
}

#[test]
fn a_restart_is_counted_once_when_the_pass_runs_again_before_the_delete() {
    // The operator wrote the bookkeeping, then died before deleting the Pod:
    // the next run sees the same failed Pod and must not count it again.
    let w = World::new(
        TfJobFixture::new("j")
            .workers(2)
            .restart_policy(RestartPolicy::ExitCode),
    )
    .running(Worker, 0)
    .pod(Worker, 1, "Failed", Some(137))
    .with_services();
    let mut first = w.plan();
    let books = first
        .bookkeeping
        .take()
        .expect("the restart is written first");
    assert_eq!(books.restarts_of(Worker), 1);
    let mut w = w;
    w.store_books(&books);
    let again = w.plan();
    assert_eq!(
        deleted_pods(&again),
        ["j-worker-1"],
        "the delete is retried"
    );
    assert_eq!(replica(&again, Worker).restarts, 1, "counted once");
    assert_eq!(again.bookkeeping, None, "nothing new to write");
    // Once the Pod is gone, its UID is forgotten with the next change.
    let gone = w.without_pod("j-worker-1").plan();
    assert_eq!(replica(&gone, Worker).restarts, 1);
}

#[test]
fn with_a_backoff_limit_of_two_two_recreations_run_and_the_third_failure_fails_the_job() {
    let f = TfJobFixture::new("j")
        .chief(1)
        .workers(1)
        .restart_policy(RestartPolicy::ExitCode)
        .backoff_limit(2);
    let mut w = World::new(f).running(Chief, 0).with_services();
    for n in 1..=2u32 {
        let (next, p) = w.incarnation(Worker, 0, n, "Failed", Some(137)).settle();
        assert_eq!(deleted_pods(&p), ["j-worker-0"], "restart {n} runs");
        assert_eq!(replica(&p, Worker).restarts, n as i32);
        w = next;
    }
    let p = w.incarnation(Worker, 0, 3, "Failed", Some(137)).plan();
    assert_eq!(last_condition(&p), ("Failed", "True", "TFJobFailed"));
    assert_eq!(
        replica(&p, Worker).restarts,
        2,
        "the third is not a restart"
    );
    assert!(!deleted_pods(&p).contains(&"j-worker-0".to_owned()));
}

#[test]
fn with_on_failure_the_limit_counts_pod_failures_and_kubelet_restarts_together() {
    // One re-created Pod plus one in-place restart reach a limit of two.
    let f = TfJobFixture::new("j")
        .workers(1)
        .restart_policy(RestartPolicy::OnFailure)
        .backoff_limit(2);
    let (w, p) = World::new(f)
        .incarnation(Worker, 0, 1, "Failed", Some(1))
        .with_services()
        .settle();
    assert_eq!(deleted_pods(&p), ["j-worker-0"]);
    let mut w = w.incarnation(Worker, 0, 2, "Running", None);
    let mut pod = (*w.pods[0]).clone();
    pod.status.as_mut().unwrap().container_statuses = Some(vec![ContainerStatus {
        name: "tensorflow".into(),
        restart_count: 1,
        ..Default::default()
    }]);
    w.pods[0] = Arc::new(pod);
    assert_eq!(last_condition(&w.plan()).0, "Failed");
}

#[test]
fn restart_counts_of_never_pods_and_pods_not_running_do_not_count_against_the_limit() {
    let mut w = World::new(
        TfJobFixture::new("j")
            .workers(2)
            .restart_policy(RestartPolicy::Never)
            .backoff_limit(1),
    )
    .running(Worker, 0)
    .pod(Worker, 1, "Pending", None)
    .with_services();
    for i in 0..2 {
        let mut pod = (*w.pods[i]).clone();
        pod.status.as_mut().unwrap().container_statuses = Some(vec![ContainerStatus {
            name: "tensorflow".into(),
            restart_count: 5,
            ..Default::default()
        }]);
        w.pods[i] = Arc::new(pod);
    }
    assert_eq!(last_condition(&w.plan()).0, "Running");
}

#[test]
fn restarting_stays_until_the_replacement_runs() {
    let w = World::new(
        TfJobFixture::new("j")
            .chief(1)
            .workers(1)
            .restart_policy(RestartPolicy::OnFailure),
    )
    .running(Chief, 0)
    .running(Worker, 0)
    .with_services();
    let (w, p) = w.settle();
    assert_eq!(last_condition(&p).0, "Running");
    let (w, p) = w.incarnation(Worker, 0, 1, "Failed", Some(1)).settle();
    assert_eq!(last_condition(&p).0, "Restarting");
    let (w, p) = w.without_pod("j-worker-0").settle();
    assert_eq!(last_condition(&p).0, "Restarting", "the slot is empty");
    let (w, p) = w.incarnation(Worker, 0, 2, "Pending", None).settle();
    assert_eq!(
        last_condition(&p).0,
        "Restarting",
        "the replacement is pending"
    );
    let (_, p) = w.incarnation(Worker, 0, 2, "Running", None).settle();
    assert_eq!(last_condition(&p).0, "Running");
    assert!(
        !has(&p, "Restarting"),
        "Running and Restarting exclude each other"
    );
}

#[test]
fn exited_with_code_is_recorded_once_for_a_permanent_failure() {
    let w = World::new(
        TfJobFixture::new("j")
            .workers(2)
            .restart_policy(RestartPolicy::ExitCode),
    )
    .running(Worker, 0)
    .pod(Worker, 1, "Failed", Some(1))
    .with_services();
    let exited = |p: &Plan| {
        p.events
            .iter()
            .filter(|e| e.reason == "ExitedWithCode")
            .count()
    };
    let (w, p) = w.settle();
    assert_eq!(exited(&p), 1);
    assert_eq!(exited(&w.plan()), 0, "not again on later passes");
}

#[test]
fn in_place_restarts_show_in_replica_statuses_once_and_stay_after_the_pod_is_gone() {
    // OnFailure: the kubelet restarts the container and the Pod stays, so
    // no re-creation is counted; the restarts must still show in
    // `replicaStatuses[*].restarts` ("in place, and by re-creating").
    let f = TfJobFixture::new("j")
        .workers(1)
        .restart_policy(RestartPolicy::OnFailure)
        .backoff_limit(3);
    let w = World::new(f).running(Worker, 0).with_services();
    let with_restarts = |mut w: World, phase: &str, n: i32| {
        let mut pod = (*w.pods[0]).clone();
        let status = pod.status.as_mut().unwrap();
        status.phase = Some(phase.into());
        status.container_statuses = Some(vec![ContainerStatus {
            name: "tensorflow".into(),
            restart_count: n,
            ..Default::default()
        }]);
        w.pods[0] = Arc::new(pod);
        w
    };
    let (w, p) = with_restarts(w, "Running", 2).settle();
    assert_eq!(replica(&p, Worker).restarts, 2, "the kubelet's restarts");
    // The next pass reads that status back: not as two more restarts (the
    // backoff limit of 3 would fail the job if it did).
    let (w, p) = w.settle();
    assert_eq!(last_condition(&p).0, "Running");
    assert_eq!(replica(&p, Worker).restarts, 2, "counted once");
    // The Pod succeeds after its restarts, then is cleaned up: the count stays.
    let (w, p) = with_restarts(w, "Succeeded", 2).settle();
    assert_eq!(last_condition(&p).0, "Succeeded");
    assert_eq!(replica(&p, Worker).restarts, 2);
    let (_, p) = w.without_pod("j-worker-0").settle();
    assert_eq!(replica(&p, Worker).restarts, 2, "after the Pod is gone");
}
