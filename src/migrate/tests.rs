//! The preflight's judgement on plain data: a cluster as training-operator
//! leaves it, and each thing that stands in the way of adopting it.
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStatus};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, Event, ObjectReference, Pod, PodSpec, PodStatus, PodTemplateSpec,
    Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    ManagedFieldsEntry, MicroTime, ObjectMeta, OwnerReference, Time,
};

use super::classify;
use super::report::JobFinding;
use super::snapshot::{Seen, Snapshot};
use crate::api::constants::ReplicaType::Worker;
use crate::api::constants::{LABEL_OPERATOR_NAME, condition};
use crate::api::defaults::normalize;
use crate::api::fixtures::TfJobFixture;
use crate::api::types::{CleanPodPolicy, JobCondition, RestartPolicy, TFJob};
use crate::tfjob::children::{ChildContext, owner_reference};
use crate::tfjob::plan::bookkeeping::ANNOTATION;

const NOW: i64 = 1_800_000_000;

fn at(secs_ago: i64) -> Timestamp {
    Timestamp::from_second(NOW - secs_ago).unwrap()
}

fn job(name: &str, conditions: &[&str]) -> TFJob {
    let mut job = TfJobFixture::new(name)
        .workers(2)
        .restart_policy(RestartPolicy::OnFailure)
        .uid(&format!("uid-{name}"))
        .build();
    job.status.get_or_insert_with(Default::default).conditions = conditions
        .iter()
        .map(|c| JobCondition {
            type_: (*c).into(),
            status: "True".into(),
            ..Default::default()
        })
        .collect();
    job
}

/// A job's Pods and Services exactly as training-operator makes them
/// (same names, labels and controller reference as ours).
fn children(job: &TFJob, phase: &str, restarts: i32) -> (Vec<Pod>, Vec<Service>) {
    let name = job.metadata.name.clone().unwrap();
    let spec = normalize(&name, &job.spec).unwrap();
    let owner = owner_reference(job).unwrap();
    let ctx = ChildContext::new(&name, "default", &spec, &owner, None);
    let mut pods = Vec::new();
    let mut services = Vec::new();
    for i in 0..2 {
        let mut pod = ctx.pod(Worker, i).unwrap();
        pod.metadata.uid = Some(format!("{name}-pod-{i}"));
        pod.status = Some(PodStatus {
            phase: Some(phase.into()),
            container_statuses: Some(vec![ContainerStatus {
                name: "tensorflow".into(),
                restart_count: restarts,
                ..Default::default()
            }]),
            ..Default::default()
        });
        pods.push(pod);
        services.push(ctx.service(Worker, i).unwrap());
    }
    (pods, services)
}

fn snapshot(jobs: Vec<TFJob>, pods: Vec<Pod>, services: Vec<Service>) -> Snapshot {
    Snapshot {
        now: at(0),
        crd: Seen::NotVisible("forbidden (403)".into()),
        jobs,
        pods,
        services,
        events: Seen::Read(Vec::new()),
        deployments: Seen::Read(Vec::new()),
        leases: Seen::Read(Vec::new()),
        webhooks: Seen::Read(Vec::new()),
    }
}

fn only_job(s: &Snapshot) -> JobFinding {
    let report = classify(s);
    assert_eq!(report.jobs.len(), 1);
    report.jobs[0].clone()
}

#[test]
fn a_running_job_of_training_operators_is_adoptable_with_its_pods_and_restarts_listed() {
    let j = job("a", &[condition::CREATED, condition::RUNNING]);
    let (pods, services) = children(&j, "Running", 2);
    let s = snapshot(vec![j], pods, services);
    let report = classify(&s);
    let f = &report.jobs[0];
    assert_eq!(f.phase, "Running");
    assert_eq!(f.blockers, Vec::<String>::new());
    let uids: Vec<&str> = f.pods.iter().map(|p| p.uid.as_str()).collect();
    assert_eq!(uids, ["a-pod-0", "a-pod-1"]);
    assert_eq!(f.services, ["a-worker-0", "a-worker-1"]);
    assert_eq!(f.in_place_restarts["Worker"], 4);
    assert_eq!(report.phases["Running"], 1);
    assert!(!report.has_blockers(), "{}", report.text());
    assert!(report.text().contains("ready: every job can be adopted"));
}

#[test]
fn jobs_are_counted_by_phase_with_finished_and_suspended_first() {
    let phases = [
        (vec![], "Created"),
        (vec![condition::CREATED, condition::RUNNING], "Running"),
        (
            vec![condition::CREATED, condition::RESTARTING],
            "Restarting",
        ),
        (vec![condition::RUNNING, condition::SUCCEEDED], "Succeeded"),
        (vec![condition::RUNNING, condition::FAILED], "Failed"),
        (vec![condition::CREATED, condition::SUSPENDED], "Suspended"),
    ];
    let jobs = phases
        .iter()
        .enumerate()
        .map(|(i, (c, _))| job(&format!("j{i}"), c))
        .collect();
    let report = classify(&snapshot(jobs, vec![], vec![]));
    for (i, (_, phase)) in phases.iter().enumerate() {
        assert_eq!(report.jobs[i].phase, *phase);
        assert_eq!(report.phases[*phase], 1, "{phase}");
    }
}

#[test]
fn a_pod_controlled_by_something_else_cannot_be_adopted() {
    let j = job("a", &[condition::RUNNING]);
    let (mut pods, services) = children(&j, "Running", 0);
    pods[1].metadata.owner_references = Some(vec![OwnerReference {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: "rs".into(),
        uid: "uid-rs".into(),
        controller: Some(true),
        ..Default::default()
    }]);
    let f = only_job(&snapshot(vec![j], pods, services));
    assert_eq!(f.blockers.len(), 1, "{:?}", f.blockers);
    assert!(f.blockers[0].contains("a-worker-1 is controlled by ReplicaSet rs"));
    assert_eq!(f.pods.len(), 1);
}

#[test]
fn an_orphan_with_kubeflows_labels_is_adopted_by_a_patch_and_one_without_them_blocks() {
    let j = job("a", &[condition::RUNNING]);
    let (mut pods, services) = children(&j, "Running", 0);
    pods[0].metadata.owner_references = None;
    let f = only_job(&snapshot(vec![j.clone()], pods.clone(), services.clone()));
    assert!(f.blockers.is_empty(), "{:?}", f.blockers);
    assert!(f.on_adoption[0].contains("a-worker-0 has no controller ownerReference: adopted"));
    pods[0]
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .remove(LABEL_OPERATOR_NAME);
    let f = only_job(&snapshot(vec![j], pods, services));
    assert!(f.blockers[0].contains("a-worker-0 has no controller ownerReference and no label"));
}

#[test]
fn a_pod_whose_name_or_labels_are_not_kubeflows_blocks_adoption() {
    let j = job("a", &[condition::RUNNING]);
    let (mut pods, services) = children(&j, "Running", 0);
    pods[0].metadata.name = Some("a-w-0".into());
    pods[1]
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("training.kubeflow.org/replica-index".into(), "7".into());
    let f = only_job(&snapshot(vec![j], pods, services));
    assert_eq!(f.blockers.len(), 2, "{:?}", f.blockers);
    assert!(f.blockers[0].contains("its name is not a-worker-0"));
    assert!(f.blockers[1].contains("index 7 is beyond the 2 Worker replica(s)"));
}

#[test]
fn a_job_managed_by_another_controller_is_left_alone() {
    let mut j = job("a", &[condition::CREATED]);
    j.spec.run_policy.managed_by = Some("kueue.x-k8s.io/multikueue".into());
    let f = only_job(&snapshot(vec![j], vec![], vec![]));
    assert!(f.blockers[0].contains("managedBy is \"kueue.x-k8s.io/multikueue\""));
}

#[test]
fn a_finished_job_with_cleanup_pending_says_which_pods_go_and_a_passed_ttl() {
    let mut j = job("a", &[condition::RUNNING, condition::SUCCEEDED]);
    j.spec.run_policy.clean_pod_policy = Some(CleanPodPolicy::All);
    j.spec.run_policy.ttl_seconds_after_finished = Some(60);
    j.status.as_mut().unwrap().completion_time = Some(Time(at(120)));
    let (pods, services) = children(&j, "Running", 0);
    let f = only_job(&snapshot(vec![j.clone()], pods.clone(), services.clone()));
    assert!(f.blockers.is_empty());
    assert!(
        f.on_adoption
            .iter()
            .any(|l| l.contains("cleanup pending: 2 Pod(s) deleted (cleanPodPolicy All)")),
        "{:?}",
        f.on_adoption
    );
    assert!(
        f.on_adoption
            .iter()
            .any(|l| l.contains("the TFJob is deleted"))
    );
    // Under None nothing is left to do but the TTL.
    j.spec.run_policy.clean_pod_policy = None;
    j.spec.run_policy.ttl_seconds_after_finished = None;
    let f = only_job(&snapshot(vec![j], pods, services));
    assert_eq!(f.on_adoption, Vec::<String>::new());
}

fn restarting_event(job: &str, count: i32) -> Event {
    Event {
        reason: Some("TFJobRestarting".into()),
        message: Some(format!(
            "TFJob {job} is restarting because Worker replica(s) failed."
        )),
        count: Some(count),
        involved_object: ObjectReference {
            kind: Some("TFJob".into()),
            namespace: Some("default".into()),
            name: Some(job.into()),
            ..Default::default()
        },
        last_timestamp: Some(Time(at(30))),
        metadata: ObjectMeta {
            managed_fields: Some(vec![ManagedFieldsEntry {
                manager: Some("training-operator.v1".into()),
                ..Default::default()
            }]),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[test]
fn re_creations_in_events_are_shown_with_the_annotation_that_would_count_them() {
    let mut j = job("a", &[condition::RUNNING]);
    j.spec.run_policy.backoff_limit = Some(6);
    let (pods, services) = children(&j, "Running", 1);
    let mut s = snapshot(vec![j.clone()], pods.clone(), services.clone());
    s.events = Seen::Read(vec![restarting_event("a", 3), restarting_event("other", 9)]);
    let f = only_job(&s);
    assert_eq!(f.restarts_in_events["Worker"], 3);
    assert!(f.restarts_counted.is_empty());
    let hint = f
        .on_adoption
        .iter()
        .find(|l| l.contains("kubectl annotate"))
        .expect("a hint");
    assert!(
        hint.contains(&format!(r#"{ANNOTATION}='{{"restarts":{{"Worker":3}}}}'"#)),
        "{hint}"
    );
    assert!(
        f.on_adoption
            .iter()
            .any(|l| l == "backoffLimit 6: 2 restart(s) counted so far"),
        "{:?}",
        f.on_adoption
    );
    // With the annotation written, nothing more to suggest, and it counts.
    j.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ANNOTATION.into(), r#"{"restarts":{"Worker":3}}"#.into());
    s.jobs = vec![j];
    let f = only_job(&s);
    assert!(!f.on_adoption.iter().any(|l| l.contains("kubectl annotate")));
    assert!(
        f.on_adoption
            .iter()
            .any(|l| l == "backoffLimit 6: 5 restart(s) counted so far"),
        "{:?}",
        f.on_adoption
    );
}

#[test]
fn in_place_restarts_at_the_limit_are_reported_as_an_immediate_failure() {
    let mut j = job("a", &[condition::RUNNING]);
    j.spec.run_policy.backoff_limit = Some(2);
    let (pods, services) = children(&j, "Running", 1);
    let f = only_job(&snapshot(vec![j], pods, services));
    assert!(
        f.on_adoption
            .iter()
            .any(|l| l.starts_with("fails at once with BackoffLimitExceeded: 2 restart(s)")),
        "{:?}",
        f.on_adoption
    );
}

fn training_operator_deployment(replicas: i32, ready: i32, args: &[&str]) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            namespace: Some("kubeflow".into()),
            name: Some("training-operator".into()),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            template: PodTemplateSpec {
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "training-operator".into(),
                        image: Some("kubeflow/training-operator:v1-855e096".into()),
                        args: Some(args.iter().map(|a| (*a).to_owned()).collect()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        }),
        status: Some(DeploymentStatus {
            ready_replicas: Some(ready),
            ..Default::default()
        }),
    }
}

#[test]
fn training_operator_is_running_while_its_deployment_runs_the_tfjob_scheme() {
    let mut s = snapshot(vec![], vec![], vec![]);
    s.deployments = Seen::Read(vec![training_operator_deployment(1, 1, &[])]);
    let f = classify(&s).training_operator;
    assert_eq!(f.verdict, "running");
    assert!(f.signs[0].contains("kubeflow/training-operator: 1/1 ready, TFJob controller on"));
    assert!(f.blockers[0].starts_with("stop training-operator's TFJob controller"));
    for stopped in [
        training_operator_deployment(0, 0, &[]),
        training_operator_deployment(
            1,
            1,
            &["--enable-scheme=pytorchjob", "--enable-scheme=jaxjob"],
        ),
    ] {
        s.deployments = Seen::Read(vec![stopped]);
        let f = classify(&s).training_operator;
        assert_eq!(f.verdict, "stopped", "{:?}", f.signs);
        assert!(f.blockers.is_empty());
    }
    s.deployments = Seen::NotVisible("forbidden (403)".into());
    assert_eq!(classify(&s).training_operator.verdict, "unknown");
}

#[test]
fn a_fresh_lease_a_recent_status_write_or_recent_events_each_mean_it_still_runs() {
    let mut s = snapshot(vec![], vec![], vec![]);
    s.leases = Seen::Read(vec![Lease {
        metadata: ObjectMeta {
            namespace: Some("kubeflow".into()),
            name: Some("1ca428e5.training-operator.kubeflow.org".into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("training-operator-abc".into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(at(5))),
            ..Default::default()
        }),
    }]);
    assert_eq!(classify(&s).training_operator.verdict, "running");
    s.leases = Seen::Read(vec![]);

    let mut j = job("a", &[condition::RUNNING]);
    j.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
        manager: Some("training-operator.v1".into()),
        subresource: Some("status".into()),
        time: Some(Time(at(20))),
        ..Default::default()
    }]);
    s.jobs = vec![j.clone()];
    let report = classify(&s);
    assert_eq!(report.training_operator.verdict, "running");
    assert_eq!(
        report.jobs[0].status_managers,
        ["training-operator.v1 (20 s ago)"]
    );
    // An hour-old write is history, not a sign of life.
    j.metadata.managed_fields.as_mut().unwrap()[0].time = Some(Time(at(3600)));
    s.jobs = vec![j];
    assert_eq!(classify(&s).training_operator.verdict, "stopped");

    s.events = Seen::Read(vec![restarting_event("a", 1)]);
    assert_eq!(classify(&s).training_operator.verdict, "running");

    // Scaled to 0 a minute ago: its last writes are listed, but its
    // Deployment says it is stopped.
    s.deployments = Seen::Read(vec![training_operator_deployment(0, 0, &[])]);
    let f = classify(&s).training_operator;
    assert_eq!(f.verdict, "stopped", "{:?}", f.signs);
    assert!(f.signs.iter().any(|l| l.contains("Event(s) from it")));
}

#[test]
fn its_validating_webhook_on_tfjobs_must_go_first() {
    use k8s_openapi::api::admissionregistration::v1::{
        RuleWithOperations, ValidatingWebhook, ValidatingWebhookConfiguration,
    };
    let mut s = snapshot(vec![], vec![], vec![]);
    s.webhooks = Seen::Read(vec![ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some("validator.training-operator.kubeflow.org".into()),
            ..Default::default()
        },
        webhooks: Some(vec![ValidatingWebhook {
            name: "validate.tfjob.kubeflow.org".into(),
            rules: Some(vec![RuleWithOperations {
                api_groups: Some(vec!["kubeflow.org".into()]),
                resources: Some(vec!["tfjobs".into()]),
                ..Default::default()
            }]),
            ..Default::default()
        }]),
    }]);
    let report = classify(&s);
    assert!(report.training_operator.blockers[0].contains(
        "delete the ValidatingWebhookConfiguration validator.training-operator.kubeflow.org"
    ));
    assert!(report.has_blockers());
}

#[test]
fn kubeflows_crd_is_fine_and_one_without_a_status_subresource_is_not() {
    let mut s = snapshot(vec![], vec![], vec![]);
    let yaml = include_str!("../../crds/kubeflow.org_tfjobs.yaml");
    let mut crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
        serde_yaml::from_str(yaml).unwrap();
    s.crd = Seen::Read(crd.clone());
    let f = classify(&s).crd;
    assert_eq!(f.blockers, Vec::<String>::new());
    crd.spec.versions[0].subresources = None;
    s.crd = Seen::Read(crd);
    let f = classify(&s).crd;
    assert!(
        f.blockers[0].contains("no status subresource"),
        "{:?}",
        f.blockers
    );
}

#[test]
fn the_json_report_has_the_same_fields_as_the_text() {
    let j = job("a", &[condition::RUNNING]);
    let (pods, services) = children(&j, "Running", 0);
    let report = classify(&snapshot(vec![j], pods, services));
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["phases"]["Running"], 1);
    assert_eq!(json["jobs"][0]["pods"][0]["uid"], "a-pod-0");
    assert_eq!(json["trainingOperator"]["verdict"], "stopped");
}

#[test]
fn the_text_for_the_person_on_call_puts_what_stands_in_the_way_in_capitals() {
    let j = job("a", &[condition::RUNNING]);
    let (mut pods, services) = children(&j, "Running", 1);
    pods[0].metadata.owner_references = None;
    pods[0]
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .remove(LABEL_OPERATOR_NAME);
    let mut s = snapshot(vec![j], pods, services);
    s.deployments = Seen::Read(vec![training_operator_deployment(1, 1, &[])]);
    let text = classify(&s).text();
    for line in [
        "TFJob CRD: not visible: forbidden (403)",
        "training-operator: running",
        "  Deployment kubeflow/training-operator: 1/1 ready, TFJob controller on",
        "  MUST FIRST: stop training-operator's TFJob controller",
        "TFJobs: 1 (Running 1)",
        "- default/a: Running, 1 Pod(s), 2 Service(s)",
        "    pod a-worker-1 Running restarts 1 uid a-pod-1",
        "    in-place restarts: Worker 1",
        "    CANNOT: Pod a-worker-0 has no controller ownerReference",
        "NOT READY: 1 job(s) cannot be adopted as they are",
    ] {
        assert!(text.contains(line), "{line:?} missing from:\n{text}");
    }
}
