//! What the plan does with a bad spec, an ignored field, and Kubeflow's own
//! CRD (whose schema prunes our status fields).

use super::{World, created_pods, last_condition};
use crate::api::constants::ReplicaType::Worker;
use crate::api::fixtures::TfJobFixture;
use crate::api::types::RestartPolicy;
use crate::api::types::SuccessPolicy;
use crate::tfjob::kubeflow::schema::StatusSchema;
use crate::tfjob::plan::Plan;

#[test]
fn an_invalid_spec_fails_with_a_warning_and_creates_nothing() {
    let mut w = World::new(TfJobFixture::new("j").workers(1));
    let worker = w.job.spec.tf_replica_specs["Worker"].clone();
    w.job
        .spec
        .tf_replica_specs
        .insert("Launcher".into(), worker);
    let p = w.plan();
    assert_eq!(
        last_condition(&p),
        ("Failed", "True", "TFJobFailedValidation")
    );
    assert!(
        p.events
            .iter()
            .any(|e| e.warning && e.message.contains("Launcher"))
    );
    assert!(p.actions.is_empty());
}

#[test]
fn under_kubeflows_crd_status_holds_only_its_fields_and_an_unchanged_job_is_not_rewritten() {
    let (w, p) = World::new(TfJobFixture::new("j").workers(2))
        .kubeflow_crd()
        .all_running()
        .settle();
    assert_eq!(p.status.observed_generation, None);
    assert!(
        p.status
            .replica_statuses
            .values()
            .all(|r| r.restarts == 0 && r.succeeded_indexes.is_none())
    );
    let again = w.plan();
    assert_eq!(Some(&again.status), w.job.status.as_ref());
    assert_eq!(again.bookkeeping, None);
}

#[test]
fn under_kubeflows_crd_restarts_and_succeeded_indexes_survive_in_the_annotation() {
    let f = TfJobFixture::new("j")
        .workers(3)
        .restart_policy(RestartPolicy::ExitCode)
        .backoff_limit(1)
        .success_policy(SuccessPolicy::AllWorkers);
    let (w, _) = World::new(f)
        .kubeflow_crd()
        .running(Worker, 0)
        .pod(Worker, 1, "Succeeded", Some(0))
        .incarnation(Worker, 2, 1, "Failed", Some(137))
        .with_services()
        .settle();
    // Worker 1's Pod is garbage-collected and worker 2 fails again: the
    // succeeded index is not re-run, and the second failure passes the limit.
    let p = w
        .without_pod("j-worker-1")
        .incarnation(Worker, 2, 2, "Failed", Some(137))
        .plan();
    assert!(!created_pods(&p).contains(&"j-worker-1".to_owned()));
    assert_eq!(last_condition(&p).0, "Failed");
}

#[test]
fn a_scheduling_policy_gets_one_warning_saying_it_is_ignored() {
    let mut job = TfJobFixture::new("j").workers(1).uid("uid-1").build();
    job.spec.run_policy.scheduling_policy = Some(Default::default());
    let w = World {
        job,
        pods: Vec::new(),
        services: Vec::new(),
        schema: StatusSchema::Ours,
    };
    let warned = |p: &Plan| {
        p.events
            .iter()
            .filter(|e| e.reason == "SchedulingPolicyIgnored" && e.warning)
            .count()
    };
    let (w, p) = w.settle();
    assert_eq!(warned(&p), 1);
    assert_eq!(warned(&w.plan()), 0, "once, when the job is first seen");
}
