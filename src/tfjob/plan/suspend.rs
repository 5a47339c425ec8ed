//! Stopping a job that should not run: suspended by its spec, or held or
//! evicted by Kueue ([`crate::tfjob::integrations::kueue::gate`]). Either way no Pod or
//! Service is left and the `Suspended` condition says why.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::constants::{condition, event, reason};
use crate::api::defaults::JobSpec;
use crate::api::types::TFJob;
use crate::tfjob::plan::conditions::{self, is_true};
use crate::tfjob::integrations::kueue::gate::{self as kueue_gate, Gate, Seen};
use crate::tfjob::kubeflow::messages;

use super::tally::terminating;
use super::{Action, Children, Plan, delete_pod};

/// What the rest of the pass may do after Kueue's word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KueueSays {
    /// Run: the pass goes on as without Kueue.
    Run,
    /// Run what runs, but create no Pod ([`Gate::Keep`]).
    RunWithoutCreating,
    /// Stopped: the pass ends here.
    Stopped,
}

/// Kueue's word on a queued job ([`super::kueue::gate`]): its Workload
/// writes, and whether the job may run. Held or evicted, it is stopped like
/// a suspended one (condition `Suspended`, reason `TFJobQueued` or
/// `TFJobEvicted`), without touching `spec.runPolicy.suspend`: the user's
/// own suspend keeps its meaning.
pub(crate) fn kueue_gates(
    p: &mut Plan,
    job: &TFJob,
    spec: &JobSpec<'_>,
    owner: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    seen: &Seen<'_>,
    children: &Children<'_>,
    now: &Time,
) -> KueueSays {
    let pods_left = !children.pods.is_empty();
    let decision = kueue_gate::gate(job, spec, owner, seen, pods_left);
    p.actions
        .extend(decision.writes.into_iter().map(Action::Workload));
    if let Some(d) = decision.recheck {
        p.requeue_in(d);
    }
    match decision.gate {
        Gate::Free => KueueSays::Run,
        Gate::Hold(msg) => {
            suspend_with(p, children, now, reason::QUEUED, msg, None);
            KueueSays::Stopped
        }
        Gate::Stop(msg) => {
            let event = Some(event::KUEUE_STOPPED);
            suspend_with(p, children, now, reason::EVICTED, msg, event);
            KueueSays::Stopped
        }
        Gate::Requeue(msg) => {
            let event = Some(event::KUEUE_STOPPED);
            suspend_with(p, children, now, reason::QUEUED, msg, event);
            KueueSays::Stopped
        }
        Gate::Keep(msg) => {
            tracing::debug!("{msg}");
            KueueSays::RunWithoutCreating
        }
        Gate::Run {
            placements,
            admitted_by,
        } => {
            if is_true(&p.status, condition::SUSPENDED) {
                let msg = format!("Admitted by clusterQueue {admitted_by}");
                p.event(false, event::KUEUE_STARTED, msg);
            }
            p.placements = placements;
            KueueSays::Run
        }
    }
}

/// A suspended job: no Pods or Services, Running false, Suspended true.
pub(crate) fn suspend(p: &mut Plan, name: &str, children: &Children<'_>, now: &Time) {
    let msg = messages::suspended(name);
    suspend_with(
        p,
        children,
        now,
        reason::SUSPENDED,
        msg,
        Some(reason::SUSPENDED),
    );
}

/// [`suspend`] with its reason and message, and the event (if any) sent
/// when the job becomes suspended or its reason changes.
fn suspend_with(
    p: &mut Plan,
    children: &Children<'_>,
    now: &Time,
    why: &'static str,
    msg: String,
    event: Option<&'static str>,
) {
    for pods in children.pods.values() {
        for pod in pods.iter().filter(|p| !terminating(p)) {
            p.actions.push(delete_pod(pod));
        }
    }
    for svc in children.services.values() {
        p.actions.push(Action::DeleteService { name: svc.clone() });
    }
    for rs in p.status.replica_statuses.values_mut() {
        rs.active = 0;
    }
    if is_true(&p.status, condition::RUNNING) {
        conditions::set(
            &mut p.status,
            condition::RUNNING,
            false,
            why,
            msg.clone(),
            now,
        );
    }
    let already = p.status.conditions.iter().any(|c| {
        c.type_ == condition::SUSPENDED && c.status == "True" && c.reason.as_deref() == Some(why)
    });
    if !already {
        if let Some(event) = event {
            p.event(false, event, msg.clone());
        }
        conditions::set(&mut p.status, condition::SUSPENDED, true, why, msg, now);
    }
}
