//! One TFJob judged for adoption: its phase, its Pods and Services, the
//! restarts already made, what this operator will do to it on its first
//! pass, and what stops it from taking the job over as it is. Pure: the
//! cluster comes in as plain objects.
use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::api::constants::{
    LABEL_JOB_NAME, LABEL_OPERATOR_NAME, LABEL_REPLICA_INDEX, LABEL_REPLICA_TYPE, OPERATOR_NAME,
    ReplicaType, condition, reason,
};
use crate::api::defaults::is_managed_here;
use crate::api::types::{CleanPodPolicy, TFJob};
use crate::tfjob::plan::bookkeeping::{ANNOTATION, Bookkeeping};

use super::report::{JobFinding, PodFinding};

/// The job's phase: its condition that is true, finished ones first.
pub fn phase(job: &TFJob) -> &'static str {
    let is_true = |type_: &str| {
        job.status
            .iter()
            .flat_map(|s| &s.conditions)
            .any(|c| c.type_ == type_ && c.status == "True")
    };
    [
        condition::SUCCEEDED,
        condition::FAILED,
        condition::SUSPENDED,
        condition::RESTARTING,
        condition::RUNNING,
    ]
    .into_iter()
    .find(|c| is_true(c))
    .unwrap_or(condition::CREATED)
}

/// Judges `job` given the labelled Pods, Services and TFJob Events of its
/// namespace (others are skipped).
pub fn judge(
    job: &TFJob,
    pods: &[Pod],
    services: &[Service],
    events: &[Event],
    now: Timestamp,
) -> JobFinding {
    let namespace = job.metadata.namespace.clone().unwrap_or_default();
    let name = job.metadata.name.clone().unwrap_or_default();
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let phase = phase(job);
    let mut f = JobFinding {
        namespace: namespace.clone(),
        name: name.clone(),
        phase: phase.to_owned(),
        ..JobFinding::default()
    };
    let managed_by = job.spec.effective_managed_by();
    if !is_managed_here(managed_by) {
        f.blockers.push(format!(
            "managedBy is {:?}: another controller runs this job; this operator leaves it alone",
            managed_by.unwrap_or_default()
        ));
    }
    let mine = |meta: &ObjectMeta| {
        meta.namespace.as_deref() == Some(namespace.as_str())
            && label(meta, LABEL_JOB_NAME) == Some(name.as_str())
    };
    for pod in pods.iter().filter(|p| mine(&p.metadata)) {
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        if let Some(why) = ownership(&pod.metadata, &uid, "Pod", &pod_name, &mut f.on_adoption) {
            f.blockers.push(why);
            continue;
        }
        if let Some(why) = slot_problem(job, &name, pod) {
            f.blockers.push(format!("Pod {pod_name}: {why}"));
        }
        let restart_count = crate::tfjob::children::cached::restart_count(pod.status.as_ref());
        let in_place = pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) != Some("Never");
        if in_place
            && restart_count > 0
            && let Some(rtype) =
                label(&pod.metadata, LABEL_REPLICA_TYPE).and_then(ReplicaType::parse)
        {
            *f.in_place_restarts
                .entry(rtype.as_str().to_owned())
                .or_default() += restart_count;
        }
        f.pods.push(PodFinding {
            name: pod_name,
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            phase: pod_phase(pod).to_owned(),
            restart_count,
        });
    }
    for service in services.iter().filter(|s| mine(&s.metadata)) {
        let service_name = service.metadata.name.clone().unwrap_or_default();
        match ownership(
            &service.metadata,
            &uid,
            "Service",
            &service_name,
            &mut f.on_adoption,
        ) {
            Some(why) => f.blockers.push(why),
            None => f.services.push(service_name),
        }
    }
    f.restarts_in_events = restarts_in_events(events, &namespace, &name);
    let books = Bookkeeping::of(job);
    f.restarts_counted = books.restarts.clone();
    f.status_managers = status_managers(&job.metadata, now);
    backoff(job, pods, &mut f, &books);
    finished_cleanup(job, &mut f, now);
    if phase == condition::SUSPENDED && !f.pods.is_empty() {
        f.on_adoption.push(format!(
            "suspended with {} Pod(s) left: they are deleted, as suspending does",
            f.pods.len()
        ));
    }
    f
}

/// `None` when the object is the job's (or an orphan it will adopt, noted
/// in `notes`); otherwise why it cannot be taken over.
fn ownership(
    meta: &ObjectMeta,
    job_uid: &str,
    kind: &str,
    name: &str,
    notes: &mut Vec<String>,
) -> Option<String> {
    let controller: Option<&OwnerReference> = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    match controller {
        Some(owner) if owner.uid == job_uid => None,
        Some(owner) => Some(format!(
            "{kind} {name} is controlled by {} {} (uid {}), not by this TFJob: it is not adopted, \
             and a {kind} of the same name cannot be created beside it",
            owner.kind, owner.name, owner.uid
        )),
        None if label(meta, LABEL_OPERATOR_NAME) == Some(OPERATOR_NAME) => {
            notes.push(format!(
                "{kind} {name} has no controller ownerReference: adopted by adding one (a metadata patch; nothing restarts)"
            ));
            None
        }
        None => Some(format!(
            "{kind} {name} has no controller ownerReference and no label {LABEL_OPERATOR_NAME}={OPERATOR_NAME}: \
             it is not adopted, and a {kind} of the same name cannot be created beside it"
        )),
    }
}

/// Why a Pod of the job would not be seen as its replica's Pod: labels and
/// name not Kubeflow's (`{job}-{type}-{index}`), or a replica the spec no
/// longer has.
fn slot_problem(job: &TFJob, job_name: &str, pod: &Pod) -> Option<String> {
    if label(&pod.metadata, LABEL_OPERATOR_NAME) != Some(OPERATOR_NAME) {
        return Some(format!(
            "label {LABEL_OPERATOR_NAME} is not {OPERATOR_NAME}: the Pod is not seen as the job's"
        ));
    }
    let Some(rtype) = label(&pod.metadata, LABEL_REPLICA_TYPE).and_then(ReplicaType::parse) else {
        return Some(format!(
            "label {LABEL_REPLICA_TYPE} is missing or not a TFJob replica type"
        ));
    };
    let Some(index) = label(&pod.metadata, LABEL_REPLICA_INDEX).and_then(|i| i.parse::<i32>().ok())
    else {
        return Some(format!(
            "label {LABEL_REPLICA_INDEX} is missing or not a number"
        ));
    };
    let replicas = job
        .spec
        .tf_replica_specs
        .iter()
        .find(|(key, _)| ReplicaType::parse(key) == Some(rtype))
        .map(|(_, spec)| spec.replicas.unwrap_or(1));
    match replicas {
        None => {
            return Some(format!(
                "the job has no {rtype} replicas: the Pod is deleted"
            ));
        }
        Some(n) if index >= n => {
            return Some(format!(
                "index {index} is beyond the {n} {rtype} replica(s): the Pod is deleted"
            ));
        }
        Some(_) => {}
    }
    let expected = format!("{job_name}-{}-{index}", rtype.lower()).replace('/', "-");
    (pod.metadata.name.as_deref() != Some(expected.as_str()))
        .then(|| format!("its name is not {expected}: a second Pod would be created for its slot"))
}

fn pod_phase(pod: &Pod) -> &str {
    if pod.metadata.deletion_timestamp.is_some() {
        return "Terminating";
    }
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

/// Re-creations announced by `TFJobRestarting` Events about the job
/// (training-operator's message names the replica type), with each
/// Event's repeat count.
fn restarts_in_events(events: &[Event], namespace: &str, name: &str) -> BTreeMap<String, i32> {
    let mut by_type = BTreeMap::new();
    for e in events.iter().filter(|e| {
        e.reason.as_deref() == Some(reason::RESTARTING)
            && e.involved_object.namespace.as_deref() == Some(namespace)
            && e.involved_object.name.as_deref() == Some(name)
    }) {
        let Some(rtype) = crate::tfjob::plan::bookkeeping::replica_type_named(e.message.as_deref())
        else {
            continue;
        };
        let repeats = e
            .series
            .as_ref()
            .and_then(|s| s.count)
            .or(e.count)
            .unwrap_or(1)
            .max(1);
        *by_type.entry(rtype.as_str().to_owned()).or_default() += repeats;
    }
    by_type
}

/// `manager (N s ago)` for each manager of the status subresource.
fn status_managers(meta: &ObjectMeta, now: Timestamp) -> Vec<String> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|m| m.subresource.as_deref() == Some("status"))
        .map(|m| {
            let manager = m.manager.as_deref().unwrap_or("(no name)");
            match &m.time {
                Some(t) => format!("{manager} ({} s ago)", now.duration_since(t.0).as_secs()),
                None => manager.to_owned(),
            }
        })
        .collect()
}

/// Notes what the backoff limit means on adoption: the restarts that will
/// be counted, those that will not, and a job that fails at once.
fn backoff(job: &TFJob, pods: &[Pod], f: &mut JobFinding, books: &Bookkeeping) {
    let has_annotation = job
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ANNOTATION));
    let missed: BTreeMap<String, i32> = f
        .restarts_in_events
        .iter()
        .filter_map(|(t, n)| {
            let counted = books.restarts.get(t).copied().unwrap_or(0);
            (*n > counted).then(|| (t.clone(), *n))
        })
        .collect();
    if !has_annotation && !missed.is_empty() && !is_finished(f) {
        let value = serde_json::json!({ "restarts": missed }).to_string();
        f.on_adoption.push(format!(
            "Events show re-creations the cluster keeps no other trace of; to count them against backoffLimit, \
             before starting this operator: kubectl annotate tfjob -n {} {} {ANNOTATION}='{value}'",
            f.namespace, f.name
        ));
    }
    let Some(limit) = job.spec.run_policy.backoff_limit else {
        return;
    };
    let running_in_place: i32 = pods
        .iter()
        .filter(|p| {
            f.pods
                .iter()
                .any(|mine| Some(&mine.uid) == p.metadata.uid.as_ref())
        })
        .filter(|p| pod_phase(p) == "Running")
        .filter(|p| p.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) != Some("Never"))
        .map(|p| crate::tfjob::children::cached::restart_count(p.status.as_ref()))
        .sum();
    let so_far = books.total_restarts() + running_in_place;
    let past = if limit == 0 {
        running_in_place > 0
    } else {
        running_in_place > 0 && so_far >= limit
    };
    if past && !is_finished(f) {
        f.on_adoption.push(format!(
            "fails at once with BackoffLimitExceeded: {so_far} restart(s) counted, backoffLimit {limit}"
        ));
    } else if !is_finished(f) {
        f.on_adoption.push(format!(
            "backoffLimit {limit}: {so_far} restart(s) counted so far"
        ));
    }
}

fn is_finished(f: &JobFinding) -> bool {
    f.phase == condition::SUCCEEDED || f.phase == condition::FAILED
}

/// A finished job whose cleanup training-operator had not done: the Pods
/// the policy stops, and a TTL already passed.
fn finished_cleanup(job: &TFJob, f: &mut JobFinding, now: Timestamp) {
    if !is_finished(f) {
        return;
    }
    let policy = job
        .spec
        .run_policy
        .clean_pod_policy
        .unwrap_or(CleanPodPolicy::None);
    let stopped = f
        .pods
        .iter()
        .filter(|p| match policy {
            CleanPodPolicy::All => p.phase != "Terminating",
            CleanPodPolicy::Running => p.phase == "Running" || p.phase == "Pending",
            CleanPodPolicy::None | CleanPodPolicy::Invalid => false,
        })
        .count();
    if stopped > 0 {
        f.on_adoption.push(format!(
            "finished with cleanup pending: {stopped} Pod(s) deleted (cleanPodPolicy {policy:?})"
        ));
    }
    let completion = job.status.as_ref().and_then(|s| s.completion_time.as_ref());
    if let (Some(ttl), Some(done)) = (job.spec.run_policy.ttl_seconds_after_finished, completion) {
        let expires = done.0 + jiff::SignedDuration::from_secs(ttl.into());
        if now >= expires {
            f.on_adoption.push(format!(
                "ttlSecondsAfterFinished passed at {expires}: the TFJob is deleted"
            ));
        }
    }
}

fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}
