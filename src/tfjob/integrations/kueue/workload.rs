//! The Workload a queued TFJob gets: what Kueue's `ConstructWorkload` and
//! `prepareWorkload` build for a job of a built-in integration, built here
//! for ours (`pkg/controller/jobframework/reconciler.go`,
//! `pkg/controller/jobs/kubeflow/kubeflowjob`).
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::api::constants::ReplicaType;
use crate::api::defaults::JobSpec;
use crate::api::types::TFJob;

use super::api::{
    FINALIZER_RESOURCE_IN_USE, LABEL_JOB_UID, LABEL_MAX_EXEC_TIME, LABEL_PREBUILT_WORKLOAD,
    LABEL_PRIORITY_CLASS, LABEL_QUEUE_NAME, PodSet, PriorityClassRef, Workload, WorkloadSpec,
};
use super::sha1;

/// Marks the Workloads this operator created (Kueue's built-in
/// integration makes ones without it): the value is
/// [`crate::api::constants::OPERATOR_NAME`]'s counterpart, ours.
pub const LABEL_CREATED_BY: &str = "tfjob-operator.kubeflow.org/workload-created-by";
pub const CREATED_BY_US: &str = "tfjob-operator";
/// A hash of the podSets the Workload was built from: a job whose replicas
/// or templates changed no longer matches it (the Workload's own copy has
/// the server's defaults added, so it is not compared field by field).
pub const ANNOTATION_POD_SETS_HASH: &str = "tfjob-operator.kubeflow.org/pod-sets-hash";

/// The order of a TFJob's podSets (Kueue's `OrderedReplicaTypes` for TFJob).
pub const POD_SET_ORDER: [ReplicaType; 5] = [
    ReplicaType::Chief,
    ReplicaType::Master,
    ReplicaType::PS,
    ReplicaType::Worker,
    ReplicaType::Evaluator,
];

/// Kueue's longest Workload name (without its `ShortWorkloadNames` gate).
const MAX_NAME: usize = 253;
const HASH_LENGTH: usize = 5;

/// The job's LocalQueue: its `kueue.x-k8s.io/queue-name` label, if set.
pub fn queue_name(job: &TFJob) -> Option<&str> {
    job.metadata
        .labels
        .as_ref()?
        .get(LABEL_QUEUE_NAME)
        .map(String::as_str)
        .filter(|q| !q.is_empty())
}

/// The Workload MultiKueue made for the job on this (worker) cluster: its
/// `kueue.x-k8s.io/prebuilt-workload-name` label, if set.
pub fn prebuilt_name(job: &TFJob) -> Option<&str> {
    job.metadata
        .labels
        .as_ref()?
        .get(LABEL_PREBUILT_WORKLOAD)
        .map(String::as_str)
        .filter(|n| !n.is_empty())
}

/// The Workload's name: Kueue's own for a TFJob
/// (`GetWorkloadNameForOwnerWithGVK`): `tfjob-<name>-<5 hex digits of a
/// SHA-1 of kind, group, name and UID>`. The same name as the built-in
/// integration's, so the two can never both create one for a job: the
/// second create gets 409 (see [`super::gate`]).
pub fn workload_name(job_name: &str, job_uid: &str) -> String {
    let mut prefix = format!("tfjob-{job_name}");
    let max_prefix = MAX_NAME - 1 - HASH_LENGTH;
    if prefix.len() > max_prefix {
        // Names are ASCII (DNS subdomains), so any byte is a boundary.
        prefix.truncate(max_prefix);
    }
    let hash = sha1::hex_digest(format!("TFJob\nkubeflow.org\n{job_name}\n{job_uid}").as_bytes());
    format!("{prefix}-{}", &hash[..HASH_LENGTH])
}

/// Whether this operator created `workload` (its label says so).
pub fn is_ours(workload: &Workload) -> bool {
    workload
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_CREATED_BY))
        .is_some_and(|v| v == CREATED_BY_US)
}

/// Whether `workload`'s controller is the job with this UID.
pub fn controlled_by(workload: &Workload, job_uid: &str) -> bool {
    workload
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.kind == "TFJob" && o.uid == job_uid)
}

/// One podSet per replica type, in [`POD_SET_ORDER`]: `name` the type
/// lower-cased, `count` its replicas, `template` its Pod template.
pub fn pod_sets(spec: &JobSpec<'_>) -> Vec<PodSet> {
    POD_SET_ORDER
        .iter()
        .filter_map(|rtype| {
            let replica = spec.replicas.get(rtype)?;
            Some(PodSet {
                name: rtype.lower().to_owned(),
                template: replica.template.as_ref().clone(),
                count: replica.replicas,
            })
        })
        .collect()
}

/// The hash [`ANNOTATION_POD_SETS_HASH`] carries.
pub fn pod_sets_hash(pod_sets: &[PodSet]) -> String {
    let json = serde_json::to_vec(pod_sets).unwrap_or_default();
    sha1::hex_digest(&json)[..12].to_owned()
}

/// Whether `workload` was built from the job's current podSets.
pub fn matches(workload: &Workload, pod_sets_hash: &str) -> bool {
    workload
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_POD_SETS_HASH))
        .is_some_and(|h| h == pod_sets_hash)
}

/// Where the Workload's priority comes from, in Kueue's order: the
/// `kueue.x-k8s.io/priority-class` label (a WorkloadPriorityClass), else
/// `runPolicy.schedulingPolicy.priorityClass`, else the first replica
/// template (in podSet order) with a `priorityClassName` (Pod
/// PriorityClasses). The value is looked up when the Workload is created.
pub fn priority_class(job: &TFJob, spec: &JobSpec<'_>) -> Option<PriorityClassRef> {
    let label = job
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_PRIORITY_CLASS))
        .filter(|v| !v.is_empty());
    if let Some(name) = label {
        return Some(PriorityClassRef::workload(name));
    }
    let policy = job
        .spec
        .run_policy
        .scheduling_policy
        .as_ref()
        .and_then(|p| p.priority_class.as_deref())
        .filter(|c| !c.is_empty());
    if let Some(name) = policy {
        return Some(PriorityClassRef::pod(name));
    }
    POD_SET_ORDER.iter().find_map(|rtype| {
        let template = &spec.replicas.get(rtype)?.template;
        let name = template.spec.as_ref()?.priority_class_name.as_deref()?;
        (!name.is_empty()).then(|| PriorityClassRef::pod(name))
    })
}

/// The Workload for `job` in `queue` (priority value filled in when it is
/// created): owned by the job (garbage collected with it), Kueue's
/// finalizer, labels `kueue.x-k8s.io/job-uid` and ours.
pub fn desired(job: &TFJob, spec: &JobSpec<'_>, owner: &OwnerReference, queue: &str) -> Workload {
    let pod_sets = pod_sets(spec);
    let labels = BTreeMap::from([
        (LABEL_JOB_UID.to_owned(), owner.uid.clone()),
        (LABEL_CREATED_BY.to_owned(), CREATED_BY_US.to_owned()),
    ]);
    let annotations = BTreeMap::from([(
        ANNOTATION_POD_SETS_HASH.to_owned(),
        pod_sets_hash(&pod_sets),
    )]);
    let max_exec = job
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_MAX_EXEC_TIME))
        .and_then(|v| v.parse::<i32>().ok())
        .filter(|&s| s > 0);
    Workload {
        metadata: ObjectMeta {
            name: Some(workload_name(&owner.name, &owner.uid)),
            namespace: job.metadata.namespace.clone(),
            owner_references: Some(vec![owner.clone()]),
            finalizers: Some(vec![FINALIZER_RESOURCE_IN_USE.to_owned()]),
            labels: Some(labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: WorkloadSpec {
            pod_sets,
            queue_name: Some(queue.to_owned()),
            priority_class_ref: priority_class(job, spec),
            priority: None,
            active: None,
            maximum_execution_time_seconds: max_exec,
        },
        status: None,
    }
}
