//! Taking over a job Kubeflow's training-operator ran, under Kubeflow's CRD:
//! it carries no bookkeeping annotation of ours, and the restarts it made
//! must still count against `backoffLimit` (the rule is in
//! [`crate::tfjob::plan::bookkeeping`]'s module docs). Plain data through the real plan.
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus,
};

use crate::tfjob::plan::bookkeeping::{ANNOTATION, Bookkeeping};
use crate::tfjob::children::cached::{CachedPod, CachedService};
use crate::tfjob::children::{ChildContext, owner_reference};
use crate::tfjob::plan::{Action, Observed, Plan, PlanConfig, plan};
use crate::tfjob::kubeflow::schema::StatusSchema;
use crate::api::constants::ReplicaType::Worker;
use crate::api::constants::{condition, reason};
use crate::api::defaults::normalize;
use crate::api::fixtures::TfJobFixture;
use crate::api::types::{JobCondition, RestartPolicy, TFJob};

/// A one-Worker job as training-operator leaves it: Created and `last`
/// conditions, no annotation of ours.
fn training_operators_job(policy: RestartPolicy, backoff_limit: i32, last: JobCondition) -> TFJob {
    let mut job = TfJobFixture::new("j")
        .workers(1)
        .restart_policy(policy)
        .backoff_limit(backoff_limit)
        .uid("uid-1")
        .build();
    let status = job.status.get_or_insert_with(Default::default);
    status.conditions = vec![
        JobCondition {
            type_: condition::CREATED.into(),
            status: "True".into(),
            reason: Some(reason::CREATED.into()),
            ..Default::default()
        },
        last,
    ];
    status.start_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        Timestamp::from_second(1_800_000_000 - 600).unwrap(),
    ));
    job
}

fn restarting() -> JobCondition {
    JobCondition {
        type_: condition::RESTARTING.into(),
        status: "True".into(),
        reason: Some(reason::RESTARTING.into()),
        // training-operator v1.9's message (common/pod.go ReconcilePods).
        message: Some("job j is restarting because Worker replica(s) failed.".into()),
        ..Default::default()
    }
}

fn running() -> JobCondition {
    JobCondition {
        type_: condition::RUNNING.into(),
        status: "True".into(),
        reason: Some(reason::RUNNING.into()),
        ..Default::default()
    }
}

/// Worker 0's Pod and Service as training-operator made them, the Pod in
/// `phase` with the tensorflow container's `restarts` and `exit`.
fn children(
    job: &TFJob,
    phase: &str,
    restarts: i32,
    exit: Option<i32>,
) -> (CachedPod, CachedService) {
    let spec = normalize("j", &job.spec).unwrap();
    let owner = owner_reference(job).unwrap();
    let ctx = ChildContext::new("j", "default", &spec, &owner, None);
    let mut pod = ctx.pod(Worker, 0).unwrap();
    pod.metadata.uid = Some("pod-worker-0".into());
    pod.status = Some(PodStatus {
        phase: Some(phase.into()),
        container_statuses: Some(vec![ContainerStatus {
            name: "tensorflow".into(),
            restart_count: restarts,
            state: exit.map(|code| ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: code,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        ..Default::default()
    });
    let service = ctx.service(Worker, 0).unwrap();
    (CachedPod::from(pod), CachedService::from(service))
}

fn plan_under_kubeflows_crd(job: &TFJob, pod: CachedPod, service: CachedService) -> Plan {
    plan(
        &Observed {
            job,
            pods: &[Arc::new(pod)],
            services: &[Arc::new(service)],
            integrations: &[],
            now: Timestamp::from_second(1_800_000_000).unwrap(),
        },
        &PlanConfig {
            status_schema: StatusSchema::Kubeflow,
            ..PlanConfig::default()
        },
    )
}

fn failed_on_backoff(p: &Plan) -> bool {
    p.status.conditions.iter().any(|c| {
        c.type_ == condition::FAILED
            && c.status == "True"
            && c.message == Some(crate::tfjob::kubeflow::messages::backoff_limit_exceeded("j"))
    })
}

fn touches_pods(p: &Plan) -> bool {
    p.actions
        .iter()
        .any(|a| matches!(a, Action::CreatePod { .. } | Action::DeletePod { .. }))
}

#[test]
fn a_restart_training_operator_had_under_way_counts_against_the_backoff_limit() {
    // backoffLimit 1, training-operator re-created Worker 0 once (its
    // Restarting condition says so) and the new Pod failed again: under our
    // rules that is the second restart, past the limit.
    let job = training_operators_job(RestartPolicy::ExitCode, 1, restarting());
    let (pod, service) = children(&job, "Failed", 0, Some(137));
    let p = plan_under_kubeflows_crd(&job, pod, service);
    assert!(failed_on_backoff(&p), "{:?}", p.status.conditions);
    // With a limit of 2 the same failure is restarted, as the second.
    let job = training_operators_job(RestartPolicy::ExitCode, 2, restarting());
    let (pod, service) = children(&job, "Failed", 0, Some(137));
    let p = plan_under_kubeflows_crd(&job, pod, service);
    assert!(!failed_on_backoff(&p));
    let books = p.bookkeeping.expect("the restarts are written down");
    assert_eq!(books.restarts_of(Worker), 2);
}

#[test]
fn the_restart_read_from_training_operators_condition_is_written_down_on_the_first_pass() {
    let job = training_operators_job(RestartPolicy::ExitCode, 3, restarting());
    let (pod, service) = children(&job, "Running", 0, None);
    let p = plan_under_kubeflows_crd(&job, pod.clone(), service.clone());
    assert!(!touches_pods(&p), "{:?}", p.actions);
    let books = p.bookkeeping.expect("written on the first pass");
    assert_eq!(books.restarts_of(Worker), 1);
    // Once Running replaced Restarting, the annotation still holds it.
    let mut next = training_operators_job(RestartPolicy::ExitCode, 3, running());
    next.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ANNOTATION.into(), books.to_annotation());
    assert_eq!(Bookkeeping::of(&next).restarts_of(Worker), 1);
    let p = plan_under_kubeflows_crd(&next, pod, service);
    assert!(p.bookkeeping.is_none(), "nothing new to write");
}

#[test]
fn in_place_restarts_training_operator_let_happen_count_without_any_annotation_of_ours() {
    // The kubelet's restarts are on the live Pod: 3 of a limit of 3 fail the
    // job at once (as training-operator itself would have).
    let job = training_operators_job(RestartPolicy::OnFailure, 3, running());
    let (pod, service) = children(&job, "Running", 3, None);
    assert!(failed_on_backoff(&plan_under_kubeflows_crd(
        &job, pod, service
    )));
    // 2 of 3: the job runs on, its Pod untouched, and the 2 are written
    // down so they outlive the Pod.
    let (pod, service) = children(&job, "Running", 2, None);
    let p = plan_under_kubeflows_crd(&job, pod, service);
    assert!(!failed_on_backoff(&p));
    assert!(!touches_pods(&p), "{:?}", p.actions);
    let books = p
        .bookkeeping
        .expect("the in-place restarts are written down");
    assert_eq!(books.in_place_of("Worker"), 2);
}
