//! How the job is doing, from the tally: Running, Restarting, Succeeded
//! or Failed (Kubeflow's `UpdateJobStatus`), and why it has not started
//! when its Pods cannot be scheduled.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::constants::{ReplicaType, condition, event, reason};
use crate::api::defaults::JobSpec;
use crate::api::types::{JobCondition as Condition, SuccessPolicy};
use crate::tfjob::kubeflow::messages;

use super::Plan;
use super::conditions::{self, is_finished, is_true};
use super::finish::fail;
use super::integration::Unscheduled;
use super::tally::Tally;

/// The reason the scheduler gives a Pod it cannot place (`PodScheduled=False`).
const UNSCHEDULABLE: &str = "Unschedulable";

/// Running / Succeeded / Failed from the counts (Kubeflow's `UpdateJobStatus`).
/// Running and Restarting replace each other; once Restarting, the job shows
/// Running again only when every restarted replica runs again.
pub(super) fn update_conditions(
    p: &mut Plan,
    spec: &JobSpec,
    t: &Tally,
    name: &str,
    namespace: &str,
    now: &Time,
) {
    let (running, succeeded) = running_and_succeeded(spec, t);
    let restarting = is_true(&p.status, condition::RESTARTING) && t.slots_not_running > 0;
    if running && !restarting {
        let msg = messages::running(namespace, name);
        conditions::set(
            &mut p.status,
            condition::RUNNING,
            true,
            reason::RUNNING,
            msg,
            now,
        );
    }
    if failed_for_good(p, spec, t, name, namespace, now) {
        return;
    }
    if succeeded {
        let msg = messages::succeeded(namespace, name);
        p.event(false, reason::SUCCEEDED, msg.clone());
        conditions::set(
            &mut p.status,
            condition::SUCCEEDED,
            true,
            reason::SUCCEEDED,
            msg,
            now,
        );
        p.status.completion_time.get_or_insert(now.clone());
    }
}

/// Whether the job runs and whether it succeeded. With a Chief: it decides
/// both. Without: Workers do (worker 0, or all of them under
/// `AllWorkers`), and a succeeded job is not "running".
fn running_and_succeeded(spec: &JobSpec, t: &Tally) -> (bool, bool) {
    let status_of =
        |rtype: ReplicaType| t.statuses.get(rtype.as_str()).cloned().unwrap_or_default();
    if let Some(chief) = spec.chief_type() {
        let s = status_of(chief);
        (
            s.active > 0,
            spec.replicas[&chief].replicas - s.succeeded == 0,
        )
    } else if let Some(worker) = spec.replicas.get(&ReplicaType::Worker) {
        let s = status_of(ReplicaType::Worker);
        let all_done = worker.replicas - s.succeeded == 0;
        let done =
            all_done || (t.worker0_succeeded && spec.success_policy != SuccessPolicy::AllWorkers);
        (!done && s.active > 0, done)
    } else {
        (false, false)
    }
}

/// A replica that failed and is not restarted fails the job (but a Worker
/// under `enableDynamicWorker` does not), with each exit code as an Event.
/// True when the job failed.
fn failed_for_good(
    p: &mut Plan,
    spec: &JobSpec,
    t: &Tally,
    name: &str,
    namespace: &str,
    now: &Time,
) -> bool {
    let dynamic = |rtype: ReplicaType| spec.enable_dynamic_worker && rtype == ReplicaType::Worker;
    let Some(&(rtype, n)) = t.failed.iter().find(|(rtype, _)| !dynamic(*rtype)) else {
        return false;
    };
    for (pod, code) in &t.exits {
        p.event(
            false,
            event::EXITED_WITH_CODE,
            messages::exited_with_code(namespace, pod, code),
        );
    }
    let msg = messages::replicas_failed(namespace, name, n, rtype.as_str());
    fail(p, msg, now);
    true
}

/// Beyond Kubeflow (#999): a job that is not running yet because its Pods
/// cannot be scheduled says so in its `Created` condition's message (type
/// and reason stay Kubeflow's), instead of sitting in `Created` with no
/// clue; the message goes back to plain once nothing is unschedulable.
/// When an integration can say why for the whole job (a gang the scheduler
/// could not place), its line and reason are shown instead, with one Warning.
pub(super) fn explain_unscheduled(
    p: &mut Plan,
    t: &Tally,
    name: &str,
    unscheduled: Option<Unscheduled>,
) {
    let started = is_true(&p.status, condition::RUNNING) || is_finished(&p.status);
    if let Some(why) = unscheduled.filter(|_| !started) {
        p.event(true, why.event, why.line.clone());
        if let Some(created) = created_condition(p) {
            created.reason = Some(why.reason.to_owned());
            created.message = Some(format!("{} Its {}", messages::created(name), why.line));
        }
        return;
    }
    let unschedulable: Vec<&String> = t
        .abnormal
        .iter()
        .filter(|(reason, _)| reason == UNSCHEDULABLE && !started)
        .map(|(_, message)| message)
        .collect();
    let message = match unschedulable.first() {
        Some(first) => format!(
            "{} {} Pod(s) cannot be scheduled; first: {first}",
            messages::created(name),
            unschedulable.len()
        ),
        None => messages::created(name),
    };
    if let Some(created) = created_condition(p) {
        created.message = Some(message);
        // Placed (or no longer ganged): Kubeflow's reason again.
        if created.reason.as_deref() == Some(reason::GANG_UNSCHEDULABLE) {
            created.reason = Some(reason::CREATED.to_owned());
        }
    }
}

fn created_condition(p: &mut Plan) -> Option<&mut Condition> {
    let mut conditions = p.status.conditions.iter_mut();
    conditions.find(|c| c.type_ == condition::CREATED)
}

/// Why a replica's Pod is stuck (`ImagePullBackOff`, `Unschedulable`, …),
/// as Warnings on the job; a Pod's `Unschedulable` is left out when the
/// whole job's reason is said instead (`whole_job`).
pub(super) fn report_pod_trouble(p: &mut Plan, t: &Tally, whole_job: bool) {
    for (reason, message) in &t.abnormal {
        if whole_job && reason == UNSCHEDULABLE {
            continue;
        }
        p.event(true, reason.clone(), message.clone());
    }
}
