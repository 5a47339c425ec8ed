//! The end of a job: the `Failed` condition a rule sets, and what follows
//! a finish: `cleanPodPolicy`, the stop of unfinished Pods after a deadline
//! or backoff failure, and `ttlSecondsAfterFinished`.
use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::constants::{ReplicaType, condition, reason};
use crate::api::defaults::JobSpec;
use crate::api::types::CleanPodPolicy;

use super::conditions::{self, is_true};
use super::slots::{Slots, delete_pod};
use super::tally::{phase, terminating};
use super::{Action, Plan};

/// Fails the job with `msg` (Kubeflow's `JobFailed` reason) and a Warning.
pub(super) fn fail(p: &mut Plan, msg: String, now: &Time) {
    p.event(true, reason::FAILED, msg.clone());
    conditions::set(
        &mut p.status,
        condition::FAILED,
        true,
        reason::FAILED,
        msg,
        now,
    );
    p.status.completion_time.get_or_insert(now.clone());
}

/// A finished job: clean up as `cleanPodPolicy` says and honour the TTL.
/// `stop_unfinished` (deadline or backoff failure) stops running and pending
/// Pods whatever the policy, but keeps finished ones for their logs; it is
/// remembered, so a stop that failed is retried on every pass until the
/// Pods are gone, and `active` shows how many still run meanwhile.
///
/// `finished_before`: the job was already finished when this pass began
/// (its stored status says so: a finishing status is never deferred).
/// Only then are its Pods cleaned up and may the TTL delete it. A job that
/// finishes in this pass must first have that written, as Kubeflow does:
/// were its Pods deleted first and the status write refused (a conflict, a
/// policy, a crash, a lapsed lease), the next pass would see the Pods gone,
/// the job unfinished, and run the training again. So the finishing pass
/// writes the status, and its watch event brings the pass that cleans up
/// (with `ttlSecondsAfterFinished: 0` the job is deleted on that pass).
pub(crate) fn clean_up(
    p: &mut Plan,
    spec: &JobSpec,
    children: &Slots<'_>,
    now: Timestamp,
    stop_unfinished: bool,
    finished_before: bool,
) {
    let policy = match (spec.clean_pod_policy, stop_unfinished) {
        (CleanPodPolicy::All, _) => CleanPodPolicy::All,
        (_, true) => CleanPodPolicy::Running,
        (policy, false) => policy,
    };
    let mut still_active: BTreeMap<ReplicaType, i32> = BTreeMap::new();
    for (slot, pods) in &children.pods {
        for pod in pods.iter().filter(|p| !terminating(p)) {
            let unfinished = matches!(phase(pod), "Running" | "Pending");
            let delete = match policy {
                CleanPodPolicy::All => true,
                CleanPodPolicy::Running => unfinished,
                CleanPodPolicy::None | CleanPodPolicy::Invalid => false,
            };
            if delete && finished_before {
                p.actions.push(delete_pod(pod));
                if let Some(svc) = children.services.get(slot) {
                    p.actions.push(Action::DeleteService { name: svc.clone() });
                }
            }
            if stop_unfinished && unfinished {
                *still_active.entry(slot.0).or_default() += 1;
            }
        }
    }
    // Under `All` a Service whose Pod is already gone goes too: a crash
    // between a slot's Pod delete and its Service delete (the fault
    // suite's write-kill sweep, `tests/faults/write_kills/`) left it for
    // the life of the job, since the loop above reaches Services through Pods.
    if policy == CleanPodPolicy::All && finished_before {
        for (slot, svc) in &children.services {
            let pod_left = children
                .pods
                .get(slot)
                .is_some_and(|pods| pods.iter().any(|pod| !terminating(pod)));
            if !pod_left {
                p.actions.push(Action::DeleteService { name: svc.clone() });
            }
        }
    }
    if stop_unfinished && is_true(&p.status, condition::FAILED) {
        for (rtype, rs) in p.status.replica_statuses.iter_mut() {
            rs.active = ReplicaType::parse(rtype)
                .and_then(|t| still_active.get(&t).copied())
                .unwrap_or(0);
        }
    }
    if is_true(&p.status, condition::SUCCEEDED) {
        for rs in p.status.replica_statuses.values_mut() {
            rs.succeeded += rs.active;
            rs.active = 0;
        }
    }
    if let (Some(ttl), Some(done)) = (
        spec.ttl_seconds_after_finished,
        p.status.completion_time.as_ref(),
    ) {
        let expires = done
            .0
            .saturating_add(jiff::SignedDuration::from_secs(i64::from(ttl)))
            .unwrap_or(done.0);
        if now >= expires && finished_before {
            p.actions.push(Action::DeleteJob);
        } else {
            p.requeue_in(duration_between(now, expires));
        }
    }
}

/// How long from `from` until `to` (zero once passed).
pub(super) fn duration_between(from: Timestamp, to: Timestamp) -> Duration {
    let secs = to
        .as_millisecond()
        .saturating_sub(from.as_millisecond())
        .max(0);
    Duration::from_millis(secs.unsigned_abs())
}
