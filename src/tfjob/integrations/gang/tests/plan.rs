//! The plan with gangs ([`crate::tfjob::integrations::gang`]): the PodGroup before the Pods,
//! kept right through scaling, suspend and resume, and the job's status
//! while the scheduler cannot place the gang.
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::api::constants::ReplicaType;
use crate::api::defaults::normalize;
use crate::api::fixtures::TfJobFixture;
use crate::api::pod_group::{PodGroup, PodGroupStatus};
use crate::api::types::{SchedulingPolicy, TFJob};
use crate::tfjob::children::cached::CachedPod;
use crate::tfjob::children::{ChildContext, owner_reference};
use crate::tfjob::integrations::gang::GangScheduling;
use crate::tfjob::integrations::gang::plan::{GangPass, PodGroupWrite};
use crate::tfjob::plan::{Action, Observed, Plan, PlanConfig, plan};

const NOW: i64 = 1_800_000_000;

fn job(workers: i32, policy: bool) -> TFJob {
    let mut job = TfJobFixture::new("j").uid("uid-1").workers(workers).build();
    if policy {
        job.spec.run_policy.scheduling_policy = Some(SchedulingPolicy::default());
    }
    job
}

fn run(
    job: &TFJob,
    pods: &[Arc<CachedPod>],
    group: Option<&PodGroup>,
    gang: GangScheduling,
) -> Plan {
    let gang = GangPass {
        setting: gang,
        group: group.cloned().map(Arc::new),
    };
    plan(
        &Observed {
            job,
            pods,
            services: &[],
            integrations: &[&gang],
            now: Timestamp::from_second(NOW).expect("a time"),
        },
        &PlanConfig::default(),
    )
}

/// The group the operator would create for `job` (as the cache shows it
/// once created).
fn group_of(job: &TFJob) -> PodGroup {
    let spec = normalize("j", &job.spec).expect("valid");
    let owner = owner_reference(job).expect("an owner");
    crate::tfjob::integrations::gang::desired(job, &spec, "j", &owner)
}

fn pending_pod(job: &TFJob, index: i32, unschedulable: bool) -> Arc<CachedPod> {
    let spec = normalize("j", &job.spec).expect("valid");
    let owner = owner_reference(job).expect("an owner");
    let mut pod = ChildContext::new("j", "default", &spec, &owner, None)
        .pod(ReplicaType::Worker, index)
        .expect("a pod");
    pod.metadata.uid = Some(format!("pod-{index}"));
    pod.status = Some(PodStatus {
        phase: Some("Pending".into()),
        conditions: unschedulable.then(|| {
            vec![PodCondition {
                type_: "PodScheduled".into(),
                status: "False".into(),
                reason: Some("Unschedulable".into()),
                message: Some("minCount (3) cannot be satisfied: 2 scheduled, 0 remaining".into()),
                ..PodCondition::default()
            }]
        }),
        ..PodStatus::default()
    });
    Arc::new(CachedPod::from(pod))
}

fn creates_pods(p: &Plan) -> usize {
    p.actions
        .iter()
        .filter(|a| matches!(a, Action::CreatePod { .. }))
        .count()
}

fn events<'a>(p: &'a Plan, reason: &str) -> Vec<&'a str> {
    p.events
        .iter()
        .filter(|e| e.reason == reason)
        .map(|e| e.message.as_str())
        .collect()
}

#[test]
fn the_group_is_created_before_the_pods_that_join_it() {
    let j = job(3, true);
    let p = run(&j, &[], None, GangScheduling::Auto);
    let Some(PodGroupWrite::Create(group)) = p.actions.first().and_then(Action::write) else {
        panic!("the group first: {:?}", p.actions);
    };
    assert_eq!(group.min_count(), Some(3));
    assert_eq!(creates_pods(&p), 3);
    assert_eq!(p.pod_group.as_deref(), Some("j"));
    assert!(events(&p, "SchedulingPolicyIgnored").is_empty());
}

#[test]
fn an_operator_restart_finds_the_group_and_creates_no_second_one() {
    let j = job(3, true);
    let group = group_of(&j);
    let p = run(&j, &[], Some(&group), GangScheduling::Auto);
    assert!(!p.actions.iter().any(|a| matches!(
        a.write(),
        Some(PodGroupWrite::Create(_) | PodGroupWrite::SetMinCount { .. })
    )));
    assert_eq!((creates_pods(&p), p.pod_group.as_deref()), (3, Some("j")));
}

#[test]
fn auto_leaves_jobs_without_a_scheduling_policy_alone_and_on_gangs_them() {
    let j = job(2, false);
    let auto = run(&j, &[], None, GangScheduling::Auto);
    assert_eq!((creates_pods(&auto), auto.pod_group.as_deref()), (2, None));
    assert!(
        !auto
            .actions
            .iter()
            .any(|a| matches!(a.write(), Some(PodGroupWrite::Create(_))))
    );
    let on = run(&j, &[], None, GangScheduling::On);
    assert!(matches!(
        on.actions.first().and_then(Action::write),
        Some(PodGroupWrite::Create(_))
    ));
}

#[test]
fn without_the_api_the_pods_join_no_group_and_the_warning_stays() {
    let j = job(2, true);
    let p = run(&j, &[], None, GangScheduling::Unavailable);
    assert_eq!((creates_pods(&p), p.pod_group.as_deref()), (2, None));
    assert!(
        !p.actions
            .iter()
            .any(|a| matches!(a.write(), Some(PodGroupWrite::Create(_))))
    );
    let warned = events(&p, "SchedulingPolicyIgnored");
    assert_eq!(warned.len(), 1);
    assert!(warned[0].contains("does not serve"), "{}", warned[0]);
}

#[test]
fn fields_the_pod_group_has_no_place_for_get_a_warning() {
    let mut j = job(2, true);
    if let Some(policy) = j.spec.run_policy.scheduling_policy.as_mut() {
        policy.schedule_timeout_seconds = Some(60);
        policy.queue = Some("q".into());
    }
    let p = run(&j, &[], None, GangScheduling::Auto);
    let warned = events(&p, "SchedulingPolicyIgnored");
    assert_eq!(warned.len(), 1);
    assert!(
        warned[0].contains("queue, scheduleTimeoutSeconds have no place"),
        "{}",
        warned[0]
    );
}

#[test]
fn a_scaled_job_sets_its_groups_min_count() {
    let before = job(2, true);
    let group = group_of(&before);
    let after = job(4, true);
    let pods = [pending_pod(&after, 0, false), pending_pod(&after, 1, false)];
    let p = run(&after, &pods, Some(&group), GangScheduling::Auto);
    assert!(
        p.actions
            .contains(&Action::integration(PodGroupWrite::SetMinCount {
                name: "j".into(),
                min_count: 4
            }))
    );
    assert_eq!(creates_pods(&p), 2, "the two new Workers, in the group");
    assert_eq!(p.pod_group.as_deref(), Some("j"));
}

#[test]
fn suspending_deletes_the_group_and_resuming_waits_for_it_to_go() {
    let mut j = job(2, true);
    let mut group = group_of(&j);
    group.metadata.uid = Some("group-uid".into());
    j.spec.run_policy.suspend = Some(true);
    let p = run(&j, &[], Some(&group), GangScheduling::Auto);
    assert!(
        p.actions
            .contains(&Action::integration(PodGroupWrite::Delete {
                name: "j".into(),
                uid: Some("group-uid".into()),
            }))
    );

    // Resumed while the old group still waits for its Pods to go (its
    // protection finalizer): no Pod joins a dying group.
    j.spec.run_policy.suspend = Some(false);
    group.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(NOW).expect("a time")));
    let waiting = run(&j, &[], Some(&group), GangScheduling::Auto);
    assert_eq!(creates_pods(&waiting), 0);
    assert!(waiting.requeue_after.is_some());
    assert_eq!(events(&waiting, "WaitingForPodGroup").len(), 1);
    // Gone: a fresh group, then the Pods.
    let fresh = run(&j, &[], None, GangScheduling::Auto);
    assert!(matches!(
        fresh.actions.first().and_then(Action::write),
        Some(PodGroupWrite::Create(_))
    ));
    assert_eq!(creates_pods(&fresh), 2);
}

#[test]
fn a_namesakes_group_keeps_the_jobs_pods_out_of_it() {
    let j = job(2, true);
    let other = job(2, true);
    let mut foreign = group_of(&other);
    if let Some(owners) = foreign.metadata.owner_references.as_mut() {
        owners[0].uid = "uid-of-a-deleted-job".into();
    }
    let p = run(&j, &[], Some(&foreign), GangScheduling::Auto);
    assert_eq!(creates_pods(&p), 0);
    assert!(events(&p, "WaitingForPodGroup")[0].contains("not this job's"));
}

fn unschedulable(group: &PodGroup, message: &str) -> PodGroup {
    let mut g = group.clone();
    g.status = Some(PodGroupStatus {
        conditions: vec![Condition {
            type_: "PodGroupInitiallyScheduled".into(),
            status: "False".into(),
            reason: "Unschedulable".into(),
            message: message.into(),
            last_transition_time: Time(Timestamp::from_second(NOW).expect("a time")),
            observed_generation: None,
        }],
    });
    g
}

#[test]
fn an_unplaced_gang_says_how_many_pods_fit_in_the_created_condition_and_one_warning() {
    let j = job(3, true);
    let group = unschedulable(
        &group_of(&j),
        "minCount (3) cannot be satisfied: 2 scheduled, 0 remaining",
    );
    let pods: Vec<_> = (0..3).map(|i| pending_pod(&j, i, true)).collect();
    let p = run(&j, &pods, Some(&group), GangScheduling::Auto);
    let created = p
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Created")
        .expect("Created");
    assert_eq!(created.reason.as_deref(), Some("GangUnschedulable"));
    let message = created.message.as_deref().unwrap_or_default();
    assert!(message.contains("2 of 3 Pods fit"), "{message}");
    // Waiting is not failing: nothing failed, nothing restarts.
    assert!(
        !p.status
            .conditions
            .iter()
            .any(|c| c.type_ == "Failed" || c.type_ == "Restarting")
    );
    assert_eq!(p.status.replica_statuses["Worker"].failed, 0);
    // One Warning for the gang, none per waiting Pod.
    assert_eq!(events(&p, "GangUnschedulable").len(), 1);
    assert!(events(&p, "Unschedulable").is_empty());
}

#[test]
fn once_the_gang_runs_the_created_condition_has_kubeflows_reason_again() {
    let j = job(3, true);
    let unplaced = unschedulable(
        &group_of(&j),
        "minCount (3) cannot be satisfied: 2 scheduled, 0 remaining",
    );
    let pods: Vec<_> = (0..3).map(|i| pending_pod(&j, i, true)).collect();
    let waiting = run(&j, &pods, Some(&unplaced), GangScheduling::Auto);
    let mut placed = j.clone();
    placed.status = Some(waiting.status);
    let mut scheduled = group_of(&j);
    scheduled.status = Some(PodGroupStatus {
        conditions: vec![Condition {
            type_: "PodGroupInitiallyScheduled".into(),
            status: "True".into(),
            reason: "Scheduled".into(),
            message: String::new(),
            last_transition_time: Time(Timestamp::from_second(NOW).expect("a time")),
            observed_generation: None,
        }],
    });
    let pods: Vec<_> = (0..3).map(|i| pending_pod(&j, i, false)).collect();
    let p = run(&placed, &pods, Some(&scheduled), GangScheduling::Auto);
    let created = p
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Created")
        .expect("Created");
    assert_eq!(created.reason.as_deref(), Some("TFJobCreated"));
    assert!(events(&p, "GangUnschedulable").is_empty());
}

/// A Pod of `job` as the operator creates it in the group: with the
/// annotation that says so (its spec's `schedulingGroup` is not cached).
fn pod_in_group(job: &TFJob, index: i32) -> Arc<CachedPod> {
    let mut pod = (*pending_pod(job, index, false)).clone();
    pod.metadata.annotations.get_or_insert_default().insert(
        crate::tfjob::integrations::gang::ANNOTATION_POD_GROUP.into(),
        "j".into(),
    );
    Arc::new(pod)
}

/// `job` with the bookkeeping `p` wrote.
fn with_books(job: &TFJob, p: &Plan) -> TFJob {
    let mut job = job.clone();
    let books = p.bookkeeping.as_ref().expect("bookkeeping to write");
    job.metadata.annotations.get_or_insert_default().insert(
        crate::tfjob::plan::bookkeeping::ANNOTATION.into(),
        books.to_annotation(),
    );
    job
}

#[test]
fn a_scheduling_policy_added_after_the_pods_makes_no_group_and_warns_once() {
    // Two of three Workers exist, created without a gang; the third is
    // missing (a replacement). The policy was added since.
    let j = job(3, true);
    let pods = [pending_pod(&j, 0, false), pending_pod(&j, 1, false)];
    let p = run(&j, &pods, None, GangScheduling::Auto);
    assert!(
        !p.actions
            .iter()
            .any(|a| matches!(a.write(), Some(PodGroupWrite::Create(_)))),
        "a group only the replacement joined would never reach minCount: {:?}",
        p.actions
    );
    assert_eq!((creates_pods(&p), p.pod_group.as_deref()), (1, None));
    let warned = events(&p, "SchedulingPolicyIgnored");
    assert_eq!(warned.len(), 1, "{:?}", p.events);
    for needed in [
        "spec.runPolicy.schedulingPolicy",
        "2 Pod(s) were created without one",
        "spec.schedulingGroup is immutable",
        "runs on without a gang",
        "spec.runPolicy.suspend",
    ] {
        assert!(warned[0].contains(needed), "{needed:?} in {}", warned[0]);
    }
    assert!(p.bookkeeping.as_ref().is_some_and(|b| b.outside_a_gang));

    // The next pass remembers it warned: no second Warning, still no group.
    let again = run(&with_books(&j, &p), &pods, None, GangScheduling::Auto);
    assert!(events(&again, "SchedulingPolicyIgnored").is_empty());
    assert_eq!(
        (creates_pods(&again), again.pod_group.as_deref()),
        (1, None)
    );
    assert!(again.bookkeeping.is_none(), "nothing new to remember");
}

#[test]
fn with_gangs_on_a_job_whose_pods_predate_it_runs_without_a_group_too() {
    let j = job(2, false);
    let pods = [pending_pod(&j, 0, false)];
    let p = run(&j, &pods, None, GangScheduling::On);
    assert_eq!((creates_pods(&p), p.pod_group.as_deref()), (1, None));
    assert_eq!(events(&p, "SchedulingPolicyIgnored").len(), 1);
}

#[test]
fn our_own_new_pods_seen_before_their_group_still_join_it() {
    // The Pod informer can deliver the Pods we just created before the
    // PodGroup informer delivers the group created before them: the
    // annotation tells they are in a gang.
    let j = job(3, true);
    let pods = [pod_in_group(&j, 0), pod_in_group(&j, 1)];
    let p = run(&j, &pods, None, GangScheduling::Auto);
    assert!(events(&p, "SchedulingPolicyIgnored").is_empty());
    assert_eq!((creates_pods(&p), p.pod_group.as_deref()), (1, Some("j")));
}

#[test]
fn a_job_that_ran_outside_its_gang_gets_one_once_its_pods_are_gone() {
    let j = job(2, true);
    let pods = [pending_pod(&j, 0, false), pending_pod(&j, 1, false)];
    let late = run(&j, &pods, None, GangScheduling::Auto);
    let j = with_books(&j, &late);
    // Suspended and resumed: no Pods left. A fresh group, then the Pods in
    // it, and the bookkeeping forgets (a later late policy warns again).
    let p = run(&j, &[], None, GangScheduling::Auto);
    assert!(matches!(
        p.actions.first().and_then(Action::write),
        Some(PodGroupWrite::Create(_))
    ));
    assert_eq!((creates_pods(&p), p.pod_group.as_deref()), (2, Some("j")));
    assert!(p.bookkeeping.as_ref().is_some_and(|b| !b.outside_a_gang));
}
