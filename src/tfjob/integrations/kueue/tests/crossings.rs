//! Where Kueue meets the job's lifecycle (issue #38): each test is one of
//! the defects found where an eviction, a scale, the user's suspend, a
//! flavor edit or a late prebuilt Workload crosses a job's life.
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::tfjob::integrations::gang::GangScheduling;
use crate::tfjob::integrations::gang::plan::{GangPass, PodGroupWrite};
use crate::tfjob::integrations::kueue::plan::KueuePass;

use super::{
    Action, Gate, Observed, PlanConfig, ReplicaType, WorkloadWrite, admitted, created,
    creates_pods, decide, evicted, flavors, gate, job, job_condition, job_condition_of, normalize,
    now, owner_reference, plan, reason, run_plan, running_pod, writes,
};

/// Issue #38, defect 4: an eviction stops the gang and gives up its
/// PodGroup, as a suspend does, so the readmitted gang is placed whole by
/// a fresh group.
#[test]
fn an_evicted_gang_gives_up_its_pod_group() {
    let mut job = job(2);
    job.spec.run_policy.scheduling_policy = Some(crate::api::types::SchedulingPolicy::default());
    let spec = normalize("j", &job.spec).expect("valid");
    let owner = owner_reference(&job).expect("an owner");
    let group = crate::tfjob::integrations::gang::desired(&job, &spec, "j", &owner);
    let w = Arc::new(evicted(admitted(created(&job)), "Preempted"));
    let pods = [
        running_pod(&job, ReplicaType::PS, 0),
        running_pod(&job, ReplicaType::Worker, 0),
        running_pod(&job, ReplicaType::Worker, 1),
    ];
    let gang = GangPass {
        setting: GangScheduling::Auto,
        group: Some(Arc::new(group)),
    };
    let kueue = KueuePass {
        workloads: vec![w],
        flavors: flavors(),
    };
    let p = plan(
        &Observed {
            job: &job,
            pods: &pods,
            services: &[],
            integrations: &[&gang, &kueue],
            now: now(),
        },
        &PlanConfig::default(),
    );
    assert!(
        p.actions
            .iter()
            .any(|a| matches!(a.write(), Some(PodGroupWrite::Delete { name, .. }) if name == "j")),
        "{:?}",
        p.actions
    );
}

/// Issue #38, defect 3: a job scaled after its admission does not run its
/// new Pods on the old quota: it stops, and its Workload is replaced once
/// no Pod of the old shape is left (Kueue's "No matching Workload").
#[test]
fn replicas_changed_after_admission_stop_the_job_and_replace_its_workload() {
    let admitted_for_two = Arc::new(admitted(created(&job(2))));
    let scaled = job(8);
    let pods = [
        running_pod(&scaled, ReplicaType::PS, 0),
        running_pod(&scaled, ReplicaType::Worker, 0),
        running_pod(&scaled, ReplicaType::Worker, 1),
    ];
    let p = run_plan(&scaled, &pods, std::slice::from_ref(&admitted_for_two));
    assert_eq!(creates_pods(&p), 0, "ran Pods on another shape's quota");
    let deletes = p
        .actions
        .iter()
        .filter(|a| matches!(a, Action::DeletePod { .. }))
        .count();
    assert_eq!(deletes, 3);
    let suspended = job_condition_of(&p.status, job_condition::SUSPENDED).expect("Suspended");
    assert_eq!(suspended.reason.as_deref(), Some(reason::QUEUED));
    assert!(p.events.iter().any(|e| e.reason == "Stopped"));
    // The quota stays reserved while Pods of the old shape are left.
    assert!(writes(&p).is_empty(), "{:?}", writes(&p));
    let p = run_plan(&scaled, &[], std::slice::from_ref(&admitted_for_two));
    assert_eq!(
        writes(&p),
        [&WorkloadWrite::Delete {
            name: "tfjob-j-73d93".into(),
            uid: Some("wl-uid".into())
        }]
    );
}

/// Issue #38, defect 5: a job the user suspends gives its quota back: its
/// Workload is deactivated (Kueue evicts it), and activated on resume.
#[test]
fn a_suspended_job_deactivates_its_workload_and_resuming_activates_it() {
    let mut job = job(1);
    job.spec.run_policy.suspend = Some(true);
    let w = Arc::new(admitted(created(&job)));
    let p = run_plan(&job, &[], std::slice::from_ref(&w));
    assert_eq!(
        writes(&p),
        [&WorkloadWrite::SetActive {
            name: "tfjob-j-73d93".into(),
            active: false
        }]
    );
    // Deactivated by us: resuming activates it again.
    let mut inactive = created(&job);
    inactive.spec.active = Some(false);
    inactive
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(gate::ANNOTATION_DEACTIVATED.into(), "true".into());
    job.spec.run_policy.suspend = Some(false);
    let p = run_plan(&job, &[], &[Arc::new(inactive.clone())]);
    assert_eq!(creates_pods(&p), 0);
    assert_eq!(
        writes(&p),
        [&WorkloadWrite::SetActive {
            name: "tfjob-j-73d93".into(),
            active: true
        }]
    );
    // Deactivated by someone else: left as it is.
    if let Some(a) = inactive.metadata.annotations.as_mut() {
        a.remove(gate::ANNOTATION_DEACTIVATED);
    }
    let p = run_plan(&job, &[], &[Arc::new(inactive)]);
    assert!(writes(&p).is_empty(), "{:?}", writes(&p));
}

/// Issue #38, defect 7: a running job is not stopped because a
/// ResourceFlavor of its admission left the cache; it creates nothing
/// until the flavor is known again.
#[test]
fn a_running_job_whose_flavor_left_the_cache_keeps_running_and_creates_nothing() {
    let job = job(2);
    let mut w = admitted(created(&job));
    if let Some(a) = w.status.as_mut().and_then(|s| s.admission.as_mut()) {
        for assignment in &mut a.pod_set_assignments {
            assignment.flavors.insert("cpu".into(), "gone".into());
        }
    }
    // Worker 1 is missing: it would need the flavor's placement.
    let pods = [
        running_pod(&job, ReplicaType::PS, 0),
        running_pod(&job, ReplicaType::Worker, 0),
    ];
    let p = run_plan(&job, &pods, &[Arc::new(w)]);
    let deletes = p
        .actions
        .iter()
        .filter(|a| matches!(a, Action::DeletePod { .. }))
        .count();
    assert_eq!(deletes, 0, "{:?}", p.actions);
    assert_eq!(creates_pods(&p), 0);
    assert!(job_condition_of(&p.status, job_condition::SUSPENDED).is_none());
    assert!(p.requeue_after.is_some());
}

/// Issue #38, defect 8: a job on a MultiKueue worker whose prebuilt
/// Workload is not there yet looks again: the Workload, created later and
/// owned by no one, wakes no job.
#[test]
fn a_job_waiting_for_its_prebuilt_workload_looks_again() {
    let mut job = job(1);
    job.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(
            "kueue.x-k8s.io/prebuilt-workload-name".into(),
            "from-manager".into(),
        );
    let d = decide(&job, &[]);
    assert!(matches!(&d.gate, Gate::Hold(m) if m.contains("from-manager")));
    assert!(d.recheck.is_some());
}
