use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::*;
use crate::api::defaults::normalize;
use crate::api::fixtures::TfJobFixture;
use crate::api::pod_group::PodGroupStatus;
use crate::api::types::SchedulingPolicy as JobSchedulingPolicy;
use crate::tfjob::children::owner_reference;
use crate::tfjob::children::scheduling_group::PodInGroup;

fn job(policy: Option<JobSchedulingPolicy>) -> TFJob {
    let mut job = TfJobFixture::new("j")
        .namespace("ns")
        .uid("uid-1")
        .chief(1)
        .workers(3)
        .build();
    job.spec.run_policy.scheduling_policy = policy;
    job
}

fn wanted(job: &TFJob) -> PodGroup {
    let spec = normalize("j", &job.spec).expect("a valid spec");
    let owner = owner_reference(job).expect("an owner");
    desired(job, &spec, "j", &owner)
}

fn policy(min_available: Option<i32>, priority_class: Option<&str>) -> JobSchedulingPolicy {
    JobSchedulingPolicy {
        min_available,
        priority_class: priority_class.map(str::to_owned),
        ..JobSchedulingPolicy::default()
    }
}

#[test]
fn auto_gangs_only_the_jobs_that_ask_and_on_gangs_every_job() {
    let asks = job(Some(policy(None, None)));
    let plain = job(None);
    let auto = GangScheduling::decide(GangMode::Auto, true).expect("decides");
    assert!(auto.wants(&asks) && !auto.wants(&plain));
    let on = GangScheduling::decide(GangMode::On, true).expect("decides");
    assert!(on.wants(&asks) && on.wants(&plain));
    let off = GangScheduling::decide(GangMode::Off, true).expect("decides");
    assert!(!off.wants(&asks));
    assert!(
        off.ignored_because()
            .is_some_and(|w| w.contains("--gang-scheduling=off"))
    );
}

#[test]
fn without_the_api_no_job_is_ganged_and_on_is_refused() {
    let unavailable = GangScheduling::decide(GangMode::Auto, false).expect("decides");
    assert_eq!(unavailable, GangScheduling::Unavailable);
    assert!(!unavailable.wants(&job(Some(policy(None, None)))));
    assert!(!unavailable.enabled());
    assert!(
        unavailable
            .ignored_because()
            .is_some_and(|w| w.contains("scheduling.k8s.io/v1beta1"))
    );
    let err = GangScheduling::decide(GangMode::On, false).expect_err("refused");
    assert!(err.contains("--gang-scheduling=auto"), "{err}");
}

#[test]
fn min_count_is_every_replica_unless_min_available_says_fewer() {
    assert_eq!(wanted(&job(Some(policy(None, None)))).min_count(), Some(4));
    assert_eq!(
        wanted(&job(Some(policy(Some(2), None)))).min_count(),
        Some(2)
    );
    // More than there are could never be placed; zero is not a gang.
    assert_eq!(
        wanted(&job(Some(policy(Some(9), None)))).min_count(),
        Some(4)
    );
    assert_eq!(
        wanted(&job(Some(policy(Some(0), None)))).min_count(),
        Some(4)
    );
    // `on` gangs a job without a policy: every replica.
    assert_eq!(wanted(&job(None)).min_count(), Some(4));
}

#[test]
fn the_group_is_named_like_the_job_owned_by_it_and_carries_its_priority_class() {
    let g = wanted(&job(Some(policy(None, Some("high")))));
    assert_eq!(g.metadata.name.as_deref(), Some("j"));
    assert_eq!(g.metadata.namespace.as_deref(), Some("ns"));
    let owners = g.metadata.owner_references.expect("an owner");
    assert_eq!(owners.len(), 1);
    assert_eq!(
        (owners[0].uid.as_str(), owners[0].controller),
        ("uid-1", Some(true))
    );
    assert_eq!(g.spec.priority_class_name.as_deref(), Some("high"));
    assert_eq!(wanted(&job(None)).spec.priority_class_name, None);
}

#[test]
fn a_missing_group_is_created_and_a_scaled_job_gets_a_new_min_count() {
    let j = job(Some(policy(None, None)));
    let want = wanted(&j);
    assert_eq!(next_step(None, &want, "uid-1"), Step::Create);
    assert_eq!(next_step(Some(&want), &want, "uid-1"), Step::Ready);
    let mut scaled = j.clone();
    scaled
        .spec
        .tf_replica_specs
        .get_mut("Worker")
        .expect("workers")
        .replicas = Some(5);
    assert_eq!(
        next_step(Some(&want), &wanted(&scaled), "uid-1"),
        Step::SetMinCount(6)
    );
}

#[test]
fn no_pod_is_created_while_the_group_is_being_deleted_or_is_a_namesakes() {
    let want = wanted(&job(None));
    let mut going = want.clone();
    going.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    assert!(
        matches!(next_step(Some(&going), &want, "uid-1"), Step::Wait(m) if m.contains("fresh one"))
    );
    // A deleted job's group, still held by its Pods' protection finalizer,
    // when a new job of the same name arrives: not ours.
    assert!(
        matches!(next_step(Some(&want), &want, "uid-2"), Step::Wait(m) if m.contains("not this job's"))
    );
}

fn with_condition(group: &PodGroup, status: &str, reason: &str, message: &str) -> PodGroup {
    let mut g = group.clone();
    g.status = Some(PodGroupStatus {
        conditions: vec![Condition {
            type_: "PodGroupInitiallyScheduled".into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
            observed_generation: None,
        }],
    });
    g
}

#[test]
fn an_unschedulable_gang_says_how_many_pods_fit_of_how_many() {
    let g = with_condition(
        &wanted(&job(None)),
        "False",
        "Unschedulable",
        "minCount (4) cannot be satisfied: 3 scheduled, 0 remaining",
    );
    let u = unplaced(&g).expect("unplaced");
    assert_eq!((u.fit, u.needed), (Some(3), 4));
    let line = u.describe("j");
    assert!(line.contains("3 of 4 Pods fit"), "{line}");
    assert!(line.contains("binds none until all 4 do"), "{line}");
}

#[test]
fn another_wording_still_reports_the_gang_without_a_count() {
    let g = with_condition(
        &wanted(&job(None)),
        "False",
        "Unschedulable",
        "0/4 nodes are available",
    );
    let u = unplaced(&g).expect("unplaced");
    assert_eq!(u.fit, None);
    assert!(u.describe("j").contains("fewer than 4 Pods fit"));
}

#[test]
fn a_placed_gang_or_a_scheduler_error_is_not_reported_as_unplaced() {
    let want = wanted(&job(None));
    assert_eq!(unplaced(&want), None);
    assert_eq!(
        unplaced(&with_condition(&want, "True", "Scheduled", "")),
        None
    );
    assert_eq!(
        unplaced(&with_condition(&want, "False", "SchedulerError", "x")),
        None
    );
}

#[test]
fn a_pod_in_a_group_carries_the_scheduling_group_and_stays_whole() {
    let j = job(None);
    let spec = normalize("j", &j.spec).expect("a valid spec");
    let owner = owner_reference(&j).expect("an owner");
    let ctx = crate::tfjob::children::ChildContext::new("j", "ns", &spec, &owner, None);
    let pod = ctx
        .pod(crate::api::constants::ReplicaType::Worker, 0)
        .expect("a pod");
    let json = serde_json::to_value(PodInGroup {
        pod: &pod,
        group: "j",
    })
    .expect("serializes");
    assert_eq!(
        json["spec"]["schedulingGroup"],
        serde_json::json!({"podGroupName": "j"})
    );
    assert_eq!(json["kind"], "Pod");
    assert_eq!(json["metadata"]["name"], "j-worker-0");
    // Said in the metadata too, which the Pod cache keeps (the spec it does not).
    assert_eq!(
        json["metadata"]["annotations"][super::ANNOTATION_POD_GROUP],
        "j"
    );
    assert_eq!(
        json["metadata"]["labels"]["training.kubeflow.org/job-name"], "j",
        "the template's metadata is kept"
    );
    assert_eq!(json["spec"]["containers"][0]["name"], "tensorflow");
}

mod plan;
