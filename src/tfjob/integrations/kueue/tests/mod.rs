//! The Workload a job gets, the gate, the Workload writes that follow, and
//! the plan with them: plain data, no cluster.
//!
//! **Length:** about 740 lines of code, in one file on purpose: the fixtures
//! (a queued job, its Workload pending, admitted or evicted, the flavor)
//! serve every test, and the tests follow the gate's table in
//! `gate.rs` from top to bottom.
use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{PodStatus, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::json;

use super::api::{
    Admission, FINALIZER_RESOURCE_IN_USE, PodSetAssignment, ResourceFlavor, ResourceFlavorSpec,
    Workload, WorkloadStatus,
};
use super::gate::{self, Gate, Seen, WorkloadWrite};
use super::plan::KueuePass;
use super::workload;
use super::{Kueue, KueueMode};
use crate::api::constants::{ReplicaType, condition as job_condition, reason};
use crate::api::defaults::normalize;
use crate::api::fixtures::TfJobFixture;
use crate::api::types::{ReplicaStatus, TFJob, TFJobStatus};
use crate::tfjob::children::cached::CachedPod;
use crate::tfjob::children::placement::PodPlacement;
use crate::tfjob::children::{ChildContext, owner_reference};
use crate::tfjob::plan::{Action, Observed, Plan, PlanConfig, plan};

const NOW: i64 = 1_800_000_000;

fn now() -> Timestamp {
    Timestamp::from_second(NOW).expect("a time")
}

fn job(workers: i32) -> TFJob {
    let mut job = TfJobFixture::new("j")
        .uid("uid-1")
        .ps(1)
        .workers(workers)
        .build();
    job.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert("kueue.x-k8s.io/queue-name".into(), "team-a".into());
    job
}

/// The Workload the operator creates for `job`, as the cache shows it.
fn created(job: &TFJob) -> Workload {
    let spec = normalize("j", &job.spec).expect("valid");
    let owner = owner_reference(job).expect("an owner");
    let mut w = workload::desired(job, &spec, &owner, "team-a");
    w.metadata.uid = Some("wl-uid".into());
    w.metadata.resource_version = Some("7".into());
    w.metadata.generation = Some(1);
    w
}

fn cond(type_: &str, status: bool, reason: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: reason.into(),
        message: format!("{type_} {reason}"),
        observed_generation: Some(1),
        last_transition_time: Time(Timestamp::from_second(NOW - 60).expect("a time")),
    }
}

/// `w` admitted to ClusterQueue `cq` on flavor `kwok` for every podSet.
fn admitted(mut w: Workload) -> Workload {
    w.status = Some(WorkloadStatus {
        conditions: vec![
            cond("QuotaReserved", true, "QuotaReserved"),
            cond("Admitted", true, "Admitted"),
        ],
        admission: Some(Admission {
            cluster_queue: "cq".into(),
            pod_set_assignments: ["ps", "worker"]
                .into_iter()
                .map(|name| PodSetAssignment {
                    name: name.into(),
                    flavors: BTreeMap::from([("cpu".into(), "kwok".into())]),
                    rest: serde_json::Map::new(),
                })
                .collect(),
            rest: serde_json::Map::new(),
        }),
        ..WorkloadStatus::default()
    });
    w
}

fn evicted(mut w: Workload, reason: &str) -> Workload {
    let status = w.status.get_or_insert_with(WorkloadStatus::default);
    status.conditions.push(cond("Evicted", true, reason));
    status
        .rest
        .insert("requeueState".into(), json!({ "count": 1 }));
    w
}

fn flavors() -> BTreeMap<String, Arc<ResourceFlavor>> {
    let flavor = ResourceFlavor {
        spec: ResourceFlavorSpec {
            node_labels: BTreeMap::from([("type".into(), "kwok".into())]),
            tolerations: vec![Toleration {
                key: Some("flavor".into()),
                operator: Some("Exists".into()),
                effect: Some("NoSchedule".into()),
                ..Toleration::default()
            }],
        },
        ..ResourceFlavor::default()
    };
    BTreeMap::from([("kwok".into(), Arc::new(flavor))])
}

fn decide(job: &TFJob, workloads: &[Arc<Workload>]) -> gate::Decision {
    let spec = normalize("j", &job.spec).expect("valid");
    let owner = owner_reference(job).expect("an owner");
    let flavors = flavors();
    gate::gate(
        job,
        &spec,
        &owner,
        &Seen {
            workloads,
            flavors: &flavors,
        },
        false,
    )
}

fn run_plan(job: &TFJob, pods: &[Arc<CachedPod>], workloads: &[Arc<Workload>]) -> Plan {
    let kueue = KueuePass {
        workloads: workloads.to_vec(),
        flavors: flavors(),
    };
    plan(
        &Observed {
            job,
            pods,
            services: &[],
            integrations: &[&kueue],
            now: now(),
        },
        &PlanConfig::default(),
    )
}

fn running_pod(job: &TFJob, rtype: ReplicaType, index: i32) -> Arc<CachedPod> {
    let spec = normalize("j", &job.spec).expect("valid");
    let owner = owner_reference(job).expect("an owner");
    let mut pod = ChildContext::new("j", "default", &spec, &owner, None)
        .pod(rtype, index)
        .expect("a pod");
    pod.metadata.uid = Some(format!("pod-{}-{index}", rtype.lower()));
    pod.status = Some(PodStatus {
        phase: Some("Running".into()),
        ..PodStatus::default()
    });
    Arc::new(CachedPod::from(pod))
}

fn writes(p: &Plan) -> Vec<&WorkloadWrite> {
    p.actions
        .iter()
        .filter_map(Action::write::<WorkloadWrite>)
        .collect()
}

fn creates_pods(p: &Plan) -> usize {
    p.actions
        .iter()
        .filter(|a| matches!(a, Action::CreatePod { .. }))
        .count()
}

fn job_condition_of<'a>(
    status: &'a TFJobStatus,
    type_: &str,
) -> Option<&'a crate::api::types::JobCondition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

#[test]
fn the_workload_is_named_as_kueue_names_a_tfjobs() {
    // sha1("TFJob\nkubeflow.org\nj\nuid-1") starts 73d93 (Kueue's
    // GetWorkloadNameForOwnerWithGVK, computed independently).
    assert_eq!(workload::workload_name("j", "uid-1"), "tfjob-j-73d93");
    let long = "a".repeat(300);
    let name = workload::workload_name(&long, "u");
    assert_eq!(name.len(), 253);
    assert!(name.starts_with("tfjob-aaa"));
}

#[test]
fn the_workload_has_one_pod_set_per_replica_type_in_kueues_order() {
    let mut job = job(3);
    job.spec
        .tf_replica_specs
        .insert("Chief".into(), job.spec.tf_replica_specs["Worker"].clone());
    job.spec
        .tf_replica_specs
        .get_mut("Chief")
        .expect("chief")
        .replicas = Some(1);
    let w = created(&job);
    let sets: Vec<(&str, i32)> = w
        .spec
        .pod_sets
        .iter()
        .map(|p| (p.name.as_str(), p.count))
        .collect();
    assert_eq!(sets, [("chief", 1), ("ps", 1), ("worker", 3)]);
    assert_eq!(w.spec.queue_name.as_deref(), Some("team-a"));
    assert_eq!(
        w.metadata.finalizers,
        Some(vec![FINALIZER_RESOURCE_IN_USE.to_owned()])
    );
    let owner = &w.metadata.owner_references.as_ref().expect("an owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("TFJob", "uid-1", Some(true))
    );
    assert!(workload::is_ours(&w));
    assert_eq!(
        w.metadata.labels.as_ref().expect("labels")["kueue.x-k8s.io/job-uid"],
        "uid-1"
    );
}

#[test]
fn priority_comes_from_the_label_then_the_scheduling_policy_then_a_template() {
    let spec_of = |job: &TFJob| normalize("j", &job.spec).expect("valid").into_owned();
    let mut job = job(1);
    job.spec
        .tf_replica_specs
        .get_mut("Worker")
        .and_then(|r| r.template.spec.as_mut())
        .expect("a template")
        .priority_class_name = Some("from-template".into());
    let class = workload::priority_class(&job, &spec_of(&job)).expect("a class");
    assert_eq!(
        (class.kind.as_str(), class.name.as_str()),
        ("PriorityClass", "from-template")
    );
    job.spec.run_policy.scheduling_policy = Some(crate::api::types::SchedulingPolicy {
        priority_class: Some("from-policy".into()),
        ..Default::default()
    });
    let class = workload::priority_class(&job, &spec_of(&job)).expect("a class");
    assert_eq!(class.name, "from-policy");
    job.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert("kueue.x-k8s.io/priority-class".into(), "high".into());
    let class = workload::priority_class(&job, &spec_of(&job)).expect("a class");
    assert_eq!(
        (
            class.group.as_str(),
            class.kind.as_str(),
            class.name.as_str()
        ),
        ("kueue.x-k8s.io", "WorkloadPriorityClass", "high")
    );
}

#[test]
fn a_job_without_the_queue_label_is_free() {
    let mut job = job(1);
    job.metadata.labels = None;
    assert_eq!(decide(&job, &[]).gate, Gate::Free);
}

#[test]
fn a_queued_job_without_a_workload_is_held_and_gets_one() {
    let job = job(2);
    let d = decide(&job, &[]);
    assert!(matches!(d.gate, Gate::Hold(_)), "{:?}", d.gate);
    match d.writes.as_slice() {
        [WorkloadWrite::Create { workload, priority }] => {
            assert_eq!(workload.metadata.name.as_deref(), Some("tfjob-j-73d93"));
            assert_eq!(*priority, None);
        }
        other => panic!("expected one create, got {other:?}"),
    }
}

#[test]
fn a_job_waits_until_its_workload_is_admitted_then_runs_on_the_flavor() {
    let job = job(2);
    let pending = Arc::new(created(&job));
    let d = decide(&job, std::slice::from_ref(&pending));
    assert!(matches!(&d.gate, Gate::Hold(m) if m.contains("waits for admission")));
    assert!(d.writes.is_empty());

    let d = decide(&job, &[Arc::new(admitted(created(&job)))]);
    let Gate::Run {
        placements,
        admitted_by,
    } = d.gate
    else {
        panic!("expected Run, got {:?}", d.gate);
    };
    assert_eq!(admitted_by, "cq");
    let worker = &placements[&ReplicaType::Worker];
    assert_eq!(worker.node_selector["type"], "kwok");
    assert_eq!(worker.tolerations[0].key.as_deref(), Some("flavor"));
    assert!(placements.contains_key(&ReplicaType::PS));
}

#[test]
fn a_workload_deactivated_by_someone_else_holds_the_job_saying_how_to_queue_it_again() {
    let job = job(2);
    let mut w = created(&job);
    w.spec.active = Some(false);
    let d = decide(&job, &[Arc::new(w)]);
    let Gate::Hold(message) = &d.gate else {
        panic!("expected a hold, got {:?}", d.gate);
    };
    assert!(
        message.contains("is deactivated (spec.active: false)"),
        "{message}"
    );
    assert!(message.contains("set spec.active to true"), "{message}");
    assert!(!message.contains("waits for admission"), "{message}");
    assert!(
        d.writes.is_empty(),
        "someone else's deactivation is theirs to undo"
    );
}

#[test]
fn an_admission_naming_an_unknown_flavor_holds_and_looks_again() {
    let job = job(1);
    let mut w = admitted(created(&job));
    if let Some(a) = w.status.as_mut().and_then(|s| s.admission.as_mut()) {
        a.pod_set_assignments[0]
            .flavors
            .insert("cpu".into(), "gone".into());
    }
    let d = decide(&job, &[Arc::new(w)]);
    assert!(
        matches!(&d.gate, Gate::Hold(m) if m.contains("gone")),
        "{:?}",
        d.gate
    );
    assert!(d.recheck.is_some());
}

#[test]
fn the_built_in_integrations_workload_leaves_the_job_to_it() {
    let job = job(1);
    let mut theirs = admitted(created(&job));
    theirs
        .metadata
        .labels
        .as_mut()
        .expect("labels")
        .remove(workload::LABEL_CREATED_BY);
    let d = decide(&job, &[Arc::new(theirs.clone())]);
    assert_eq!(d.gate, Gate::Free);
    assert!(d.writes.is_empty());
    // Nor does it write the built-in's Workload when the job finishes.
    let mut status = TFJobStatus::default();
    crate::tfjob::plan::conditions::set(
        &mut status,
        job_condition::SUCCEEDED,
        true,
        reason::SUCCEEDED,
        "done".into(),
        &Time(now()),
    );
    let flavors = flavors();
    let seen = Seen {
        workloads: &[Arc::new(theirs)],
        flavors: &flavors,
    };
    assert!(gate::after(&job, &status, false, &seen, now()).is_empty());
}

#[test]
fn changed_replicas_before_admission_replace_the_workload() {
    let old = Arc::new(created(&job(2)));
    let d = decide(&job(3), &[old]);
    assert!(matches!(d.gate, Gate::Hold(_)));
    assert_eq!(
        d.writes,
        [WorkloadWrite::Delete {
            name: "tfjob-j-73d93".into(),
            uid: Some("wl-uid".into())
        }]
    );
    // While it is being deleted, Kueue's finalizer is ours to remove.
    let mut deleting = created(&job(2));
    deleting.metadata.deletion_timestamp = Some(Time(now()));
    let d = decide(&job(3), &[Arc::new(deleting)]);
    assert!(matches!(d.gate, Gate::Hold(_)));
    assert_eq!(
        d.writes,
        [WorkloadWrite::ReleaseFinalizer {
            name: "tfjob-j-73d93".into(),
            resource_version: Some("7".into()),
            finalizers: vec![],
        }]
    );
}

#[test]
fn a_queue_label_changed_before_admission_moves_the_workload() {
    let w = Arc::new(created(&job(1)));
    let mut moved = job(1);
    moved
        .metadata
        .labels
        .as_mut()
        .expect("labels")
        .insert("kueue.x-k8s.io/queue-name".into(), "team-b".into());
    let d = decide(&moved, &[w]);
    assert_eq!(
        d.writes,
        [WorkloadWrite::SetQueueName {
            name: "tfjob-j-73d93".into(),
            queue: "team-b".into()
        }]
    );
}

#[test]
fn an_evicted_job_stops_and_gives_the_quota_back_once_its_pods_are_gone() {
    let job = job(1);
    let w = Arc::new(evicted(admitted(created(&job)), "Preempted"));
    let pods = [
        running_pod(&job, ReplicaType::PS, 0),
        running_pod(&job, ReplicaType::Worker, 0),
    ];
    let p = run_plan(&job, &pods, std::slice::from_ref(&w));
    let deletes = p
        .actions
        .iter()
        .filter(|a| matches!(a, Action::DeletePod { .. }))
        .count();
    assert_eq!(deletes, 2);
    let suspended = job_condition_of(&p.status, job_condition::SUSPENDED).expect("Suspended");
    assert_eq!(
        (suspended.status.as_str(), suspended.reason.as_deref()),
        ("True", Some(reason::EVICTED))
    );
    assert!(p.events.iter().any(|e| e.reason == "Stopped"));
    // Pods still there: the quota is not given back yet.
    assert!(writes(&p).is_empty(), "{:?}", writes(&p));

    let p = run_plan(&job, &[], std::slice::from_ref(&w));
    let [WorkloadWrite::ApplyStatus { manager, body, .. }] = writes(&p).as_slice() else {
        panic!("expected one status apply, got {:?}", writes(&p));
    };
    assert_eq!(*manager, "kueue-admission");
    let status = &body["status"];
    assert!(status.get("admission").is_none(), "{status}");
    let find = |t: &str| {
        status["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == t).cloned())
            .unwrap_or_default()
    };
    assert_eq!(find("QuotaReserved")["status"], "False");
    assert_eq!(find("QuotaReserved")["reason"], "Pending");
    assert_eq!(find("Admitted")["status"], "False");
    assert_eq!(find("Requeued")["status"], "True");
    // What the admission manager owns and is not changed is echoed back.
    assert_eq!(find("Evicted")["status"], "True");
    assert_eq!(status["requeueState"], json!({ "count": 1 }));
    assert_eq!(body["metadata"]["resourceVersion"], "7");
}

#[test]
fn an_eviction_for_a_pods_ready_timeout_is_not_marked_requeued() {
    let job = job(1);
    let w = evicted(admitted(created(&job)), "PodsReadyTimeout");
    let body = super::status::give_back_quota(&w, now()).expect("a body");
    let requeued = body["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Requeued").cloned())
        .unwrap_or_default();
    assert_eq!(requeued["status"], "False");
    assert_eq!(requeued["reason"], "PodsReadyTimeout");
}

#[test]
fn an_evicted_workload_without_quota_holds_the_job_as_queued_again() {
    let job = job(1);
    let mut w = evicted(created(&job), "Preempted");
    w.status
        .as_mut()
        .expect("status")
        .conditions
        .push(cond("QuotaReserved", false, "Pending"));
    let d = decide(&job, &[Arc::new(w)]);
    assert!(
        matches!(&d.gate, Gate::Hold(m) if m.contains("waits for admission")),
        "{:?}",
        d.gate
    );
}

#[test]
fn a_held_job_creates_no_pods_and_says_it_is_queued() {
    let job = job(2);
    let p = run_plan(&job, &[], &[]);
    assert_eq!(creates_pods(&p), 0);
    let suspended = job_condition_of(&p.status, job_condition::SUSPENDED).expect("Suspended");
    assert_eq!(suspended.reason.as_deref(), Some(reason::QUEUED));
    assert!(
        suspended
            .message
            .as_deref()
            .is_some_and(|m| m.contains("LocalQueue team-a")),
        "{suspended:?}"
    );
    assert!(matches!(
        writes(&p).as_slice(),
        [WorkloadWrite::Create { .. }]
    ));
}

#[test]
fn an_admitted_job_resumes_and_its_pods_get_the_flavor() {
    let job = job(2);
    let held = run_plan(&job, &[], &[]);
    let mut job = job;
    job.status = Some(held.status);
    let w = Arc::new(admitted(created(&job)));
    let p = run_plan(&job, &[], std::slice::from_ref(&w));
    assert_eq!(creates_pods(&p), 3);
    assert!(
        p.events
            .iter()
            .any(|e| e.reason == "Started" && e.message.contains("cq"))
    );
    assert_eq!(
        job_condition_of(&p.status, job_condition::SUSPENDED).map(|c| c.status.as_str()),
        Some("False")
    );
    let mut pod = ChildContext::new(
        "j",
        "default",
        &normalize("j", &job.spec).expect("valid"),
        &owner_reference(&job).expect("an owner"),
        None,
    )
    .pod(ReplicaType::Worker, 0)
    .expect("a pod");
    p.placements[&ReplicaType::Worker].apply(&mut pod);
    let spec = pod.spec.expect("a spec");
    assert_eq!(spec.node_selector.expect("a selector")["type"], "kwok");
    assert_eq!(spec.tolerations.expect("tolerations").len(), 1);
}

#[test]
fn a_placement_keeps_the_pods_own_tolerations_and_adds_each_once() {
    let toleration = |key: &str| Toleration {
        key: Some(key.into()),
        operator: Some("Exists".into()),
        ..Toleration::default()
    };
    let placement = PodPlacement {
        tolerations: vec![toleration("a"), toleration("b")],
        ..PodPlacement::default()
    };
    let mut pod = k8s_openapi::api::core::v1::Pod {
        spec: Some(k8s_openapi::api::core::v1::PodSpec {
            tolerations: Some(vec![toleration("a")]),
            ..Default::default()
        }),
        ..Default::default()
    };
    placement.apply(&mut pod);
    let keys: Vec<_> = pod
        .spec
        .expect("a spec")
        .tolerations
        .expect("tolerations")
        .into_iter()
        .filter_map(|t| t.key)
        .collect();
    assert_eq!(keys, ["a", "b"]);
}

#[test]
fn a_running_job_reports_pods_ready_once_every_pod_runs_and_reclaims_finished_types() {
    let job = job(2);
    let w = Arc::new(admitted(created(&job)));
    let flavors = flavors();
    let seen = Seen {
        workloads: std::slice::from_ref(&w),
        flavors: &flavors,
    };
    let status_with = |ps: (i32, i32), worker: (i32, i32)| TFJobStatus {
        replica_statuses: BTreeMap::from([
            (
                "PS".to_owned(),
                ReplicaStatus {
                    active: ps.0,
                    succeeded: ps.1,
                    ..ReplicaStatus::default()
                },
            ),
            (
                "Worker".to_owned(),
                ReplicaStatus {
                    active: worker.0,
                    succeeded: worker.1,
                    ..ReplicaStatus::default()
                },
            ),
        ]),
        ..TFJobStatus::default()
    };
    let apply_of = |writes: Vec<WorkloadWrite>| match writes.as_slice() {
        [WorkloadWrite::ApplyStatus { manager, body, .. }] => {
            assert_eq!(*manager, "tfjob-operator");
            body.clone()
        }
        other => panic!("expected one status apply, got {other:?}"),
    };
    // One worker of two runs: not ready.
    let body = apply_of(gate::after(
        &job,
        &status_with((1, 0), (1, 0)),
        true,
        &seen,
        now(),
    ));
    assert_eq!(body["status"]["conditions"][0]["type"], "PodsReady");
    assert_eq!(body["status"]["conditions"][0]["status"], "False");
    assert_eq!(body["status"]["conditions"][0]["reason"], "WaitForStart");
    // All run: ready.
    let body = apply_of(gate::after(
        &job,
        &status_with((1, 0), (2, 0)),
        true,
        &seen,
        now(),
    ));
    assert_eq!(body["status"]["conditions"][0]["status"], "True");
    assert_eq!(body["status"]["conditions"][0]["reason"], "Started");
    assert_eq!(body["status"]["reclaimablePods"], json!([]));
    // A worker succeeded early: its quota is reclaimable, and it still counts as ready.
    let body = apply_of(gate::after(
        &job,
        &status_with((1, 0), (1, 1)),
        true,
        &seen,
        now(),
    ));
    assert_eq!(body["status"]["conditions"][0]["status"], "True");
    assert_eq!(
        body["status"]["reclaimablePods"],
        json!([{ "name": "worker", "count": 1 }])
    );
    // Written already: nothing to write.
    let mut written = admitted(created(&job));
    let status = written.status.as_mut().expect("status");
    status.conditions.push(cond("PodsReady", true, "Started"));
    status.conditions.last_mut().expect("one").message =
        "All pods reached readiness and the workload is running".into();
    let written = Arc::new(written);
    let seen = Seen {
        workloads: std::slice::from_ref(&written),
        flavors: &flavors,
    };
    assert!(gate::after(&job, &status_with((1, 0), (2, 0)), true, &seen, now()).is_empty());
    // A Pod lost after it was ready: waiting for recovery.
    let body = apply_of(gate::after(
        &job,
        &status_with((1, 0), (1, 0)),
        true,
        &seen,
        now(),
    ));
    assert_eq!(body["status"]["conditions"][0]["reason"], "WaitForRecovery");
}

#[test]
fn a_finished_job_finishes_its_workload_once_its_status_is_stored_then_releases_the_finalizer() {
    let job = job(1);
    let mut status = TFJobStatus::default();
    crate::tfjob::plan::conditions::set(
        &mut status,
        job_condition::SUCCEEDED,
        true,
        reason::SUCCEEDED,
        "TFJob default/j successfully completed.".into(),
        &Time(now()),
    );
    let flavors = flavors();
    let w = Arc::new(admitted(created(&job)));
    let seen = Seen {
        workloads: std::slice::from_ref(&w),
        flavors: &flavors,
    };
    // Planned but not stored yet (the write may be refused): the Workload
    // waits for the job's own status.
    assert!(gate::after(&job, &status, false, &seen, now()).is_empty());
    let mut job = job;
    job.status = Some(status.clone());
    let writes = gate::after(&job, &status, false, &seen, now());
    let [
        WorkloadWrite::ApplyStatus {
            manager,
            body,
            finished: true,
            ..
        },
    ] = writes.as_slice()
    else {
        panic!("expected Finished, got {writes:?}");
    };
    assert_eq!(*manager, "kueue-admission");
    let finished = body["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Finished").cloned())
        .unwrap_or_default();
    assert_eq!(finished["status"], "True");
    assert_eq!(finished["reason"], "Succeeded");
    // The admission is kept: it is echoed, not cleared.
    assert_eq!(body["status"]["admission"]["clusterQueue"], "cq");

    let mut done = admitted(created(&job));
    done.status
        .as_mut()
        .expect("status")
        .conditions
        .push(cond("Finished", true, "Succeeded"));
    let done = Arc::new(done);
    let seen = Seen {
        workloads: std::slice::from_ref(&done),
        flavors: &flavors,
    };
    assert!(matches!(
        gate::after(&job, &status, false, &seen, now()).as_slice(),
        [WorkloadWrite::ReleaseFinalizer { .. }]
    ));
}

#[test]
fn only_our_workloads_lose_the_finalizer_when_the_job_is_gone() {
    let job = job(1);
    let ours = Arc::new(created(&job));
    let mut theirs = created(&job);
    theirs.metadata.name = Some("tfjob-j-other".into());
    theirs
        .metadata
        .labels
        .as_mut()
        .expect("labels")
        .remove(workload::LABEL_CREATED_BY);
    let released = gate::release_all(&[ours, Arc::new(theirs)]);
    assert_eq!(released.len(), 1);
    assert!(
        matches!(&released[0], WorkloadWrite::ReleaseFinalizer { name, .. } if name == "tfjob-j-73d93")
    );
}

#[test]
fn the_mode_follows_the_flag_and_what_the_server_serves() {
    assert_eq!(Kueue::decide(KueueMode::Auto, true), Ok(Kueue::Workload));
    assert_eq!(Kueue::decide(KueueMode::Auto, false), Ok(Kueue::Off));
    assert_eq!(
        Kueue::decide(KueueMode::Workload, true),
        Ok(Kueue::Workload)
    );
    assert!(Kueue::decide(KueueMode::Workload, false).is_err_and(|e| e.contains("--kueue=auto")));
    assert_eq!(Kueue::decide(KueueMode::Builtin, true), Ok(Kueue::Off));
    assert_eq!(Kueue::decide(KueueMode::Off, true), Ok(Kueue::Off));
    let line = super::describe(
        KueueMode::Auto,
        "kueue.x-k8s.io/v1beta2 Workloads served",
        Kueue::Workload,
    );
    assert!(
        line.starts_with("kueue: auto, kueue.x-k8s.io/v1beta2 Workloads served: "),
        "{line}"
    );
}

#[test]
fn what_kueue_writes_is_read_and_unknown_fields_are_kept() {
    let w: Workload = serde_json::from_value(json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": { "name": "w" },
        "spec": { "podSets": [{ "name": "worker", "count": 2, "template": {}, "minCount": 1 }], "queueName": "q" },
        "status": {
            "conditions": [{ "type": "Admitted", "status": "True", "reason": "Admitted",
                             "message": "", "lastTransitionTime": "2026-11-27T00:00:00Z" }],
            "admission": { "clusterQueue": "cq", "podSetAssignments": [
                { "name": "worker", "flavors": { "cpu": "kwok" }, "count": 2,
                  "resourceUsage": { "cpu": "2" } }] },
            "schedulingStats": { "evictions": [{ "reason": "Preempted", "count": 1 }] }
        }
    }))
    .expect("decodes");
    assert!(w.is_admitted());
    let status = w.status.as_ref().expect("status");
    assert!(status.rest.contains_key("schedulingStats"));
    let assignment = &status
        .admission
        .as_ref()
        .expect("admission")
        .pod_set_assignments[0];
    assert_eq!(assignment.rest["resourceUsage"], json!({ "cpu": "2" }));
    // Echoed back as it came.
    let body = super::status::finish(&w, true, "done", now());
    assert_eq!(
        body["status"]["admission"]["podSetAssignments"][0]["resourceUsage"],
        json!({ "cpu": "2" })
    );
    assert_eq!(
        body["status"]["schedulingStats"],
        json!({ "evictions": [{ "reason": "Preempted", "count": 1 }] })
    );
}

#[test]
fn on_a_multikueue_worker_the_job_waits_for_then_adopts_its_prebuilt_workload() {
    let mut job = job(1);
    job.metadata.labels.as_mut().expect("labels").insert(
        "kueue.x-k8s.io/prebuilt-workload-name".into(),
        "from-manager".into(),
    );
    // Not there yet: held, and no Workload of our own is made.
    let d = decide(&job, &[]);
    assert!(
        matches!(&d.gate, Gate::Hold(m) if m.contains("from-manager")),
        "{:?}",
        d.gate
    );
    assert!(d.writes.is_empty(), "{:?}", d.writes);
    // There, not ours yet: adopted.
    let mut theirs = admitted(created(&job));
    theirs.metadata.name = Some("from-manager".into());
    theirs.metadata.owner_references = None;
    theirs.metadata.labels = None;
    let d = decide(&job, &[Arc::new(theirs.clone())]);
    match d.writes.as_slice() {
        [WorkloadWrite::Adopt { name, owner, .. }] => {
            assert_eq!(name, "from-manager");
            assert_eq!(owner.uid, "uid-1");
        }
        other => panic!("expected an adoption, got {other:?}"),
    }
    // Adopted (controlled by the job) and admitted: it runs, although the
    // Workload carries none of our labels or podSet hash.
    theirs.metadata.owner_references = Some(vec![owner_reference(&job).expect("an owner")]);
    let d = decide(&job, &[Arc::new(theirs)]);
    assert!(matches!(d.gate, Gate::Run { .. }), "{:?}", d.gate);
}

#[test]
fn a_job_multikueue_dispatches_from_here_gets_its_workload_and_nothing_else() {
    let mut job = job(2);
    job.spec.run_policy.managed_by = Some("kueue.x-k8s.io/multikueue".into());
    let p = run_plan(&job, &[], &[]);
    assert!(p.manage && p.status_is_remote);
    assert!(matches!(
        writes(&p).as_slice(),
        [WorkloadWrite::Create { .. }]
    ));
    assert_eq!(creates_pods(&p), 0);
    assert_eq!(p.status, TFJobStatus::default(), "no condition of ours");
    // The mirrored status says Succeeded: the Workload finishes.
    let w = Arc::new(admitted(created(&job)));
    let mut status = TFJobStatus::default();
    crate::tfjob::plan::conditions::set(
        &mut status,
        job_condition::SUCCEEDED,
        true,
        reason::SUCCEEDED,
        "done on the worker".into(),
        &Time(now()),
    );
    job.status = Some(status);
    let p = run_plan(&job, &[], std::slice::from_ref(&w));
    assert!(
        matches!(
            writes(&p).as_slice(),
            [WorkloadWrite::ApplyStatus { finished: true, .. }]
        ),
        "{:?}",
        writes(&p)
    );
    // Without Kueue (or with its built-in), such a job is not ours at all.
    let plain = plan(
        &Observed {
            job: &job,
            pods: &[],
            services: &[],
            integrations: &[],
            now: now(),
        },
        &PlanConfig::default(),
    );
    assert!(!plain.manage);
}

#[test]
fn a_job_dispatched_through_spec_managed_by_gets_its_workload_and_nothing_else() {
    // MultiKueue's generic adapter reads `.spec.managedBy`.
    let mut job = job(2);
    job.spec.managed_by = Some("kueue.x-k8s.io/multikueue".into());
    let p = run_plan(&job, &[], &[]);
    assert!(p.manage && p.status_is_remote);
    assert!(matches!(
        writes(&p).as_slice(),
        [WorkloadWrite::Create { .. }]
    ));
    assert_eq!(creates_pods(&p), 0);
}

#[test]
fn a_workers_copy_still_marked_for_multikueue_is_explained_not_run() {
    // Submitted with runPolicy.managedBy, which the generic adapter leaves
    // on the worker's copy: nothing may run it, and the user is told why.
    let mut job = job(2);
    job.spec.run_policy.managed_by = Some("kueue.x-k8s.io/multikueue".into());
    job.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(
            "kueue.x-k8s.io/multikueue-origin".into(),
            "manager-1".into(),
        );
    let p = run_plan(&job, &[], &[]);
    assert!(p.manage && p.status_is_remote);
    assert!(writes(&p).is_empty(), "{:?}", writes(&p));
    assert_eq!(creates_pods(&p), 0);
    let warning = p
        .events
        .iter()
        .find(|e| e.warning && e.reason == "MultiKueueCopyNotRun")
        .expect("a Warning");
    assert!(
        warning.message.contains("spec.managedBy") && warning.message.contains("manager-1"),
        "{}",
        warning.message
    );
}

/// Where Kueue meets the job's lifecycle (issue #38): an eviction, a
/// scale, the user's suspend, a flavor edit, a late prebuilt Workload.
mod crossings;
