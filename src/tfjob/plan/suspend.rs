//! Whether the job runs in this pass: its own `suspend`, then each
//! integration's gate (Kueue holding or evicting it). A stopped job keeps no
//! Pod or Service, and its `Suspended` condition says why; a job that runs
//! again is resumed, with a new `startTime` (Kubeflow's rule).
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::constants::{condition, reason};
use crate::tfjob::kubeflow::messages;

use super::conditions::{self, is_true};
use super::integration::{Pass, Say, Stop};
use super::slots::{Slots, delete_pod};
use super::tally::terminating;
use super::{Action, Observed, Plan};

/// `Some(may_create_pods)` when the job runs in this pass; `None` when it
/// is stopped (the pass ends). Every stop lets each integration give back
/// what the job held (a gang's PodGroup).
pub(super) fn runs(
    p: &mut Plan,
    obs: &Observed<'_>,
    pass: &Pass<'_>,
    children: &Slots<'_>,
    now: &Time,
) -> Option<bool> {
    let mut say = Say::Run;
    if pass.spec.suspend {
        say = Say::Stop(Stop {
            reason: reason::SUSPENDED,
            message: messages::suspended(pass.name),
            event: Some(reason::SUSPENDED),
        });
    }
    if say == Say::Run {
        for integration in obs.integrations {
            match integration.gate(pass, p) {
                Say::Run => {}
                other => {
                    say = other;
                    break;
                }
            }
        }
    }
    match say {
        Say::Stop(stop) => {
            stop_with(p, children, now, stop);
            for integration in obs.integrations {
                integration.on_stop(pass.job, p);
            }
            None
        }
        Say::Run => {
            resume(p, pass.name, now);
            Some(true)
        }
        Say::RunWithoutCreating => {
            resume(p, pass.name, now);
            Some(false)
        }
    }
}

/// A job that was stopped runs again: `Suspended` goes false, with an
/// Event, and the job's `startTime` starts over; a job never stopped gets
/// its first `startTime`.
fn resume(p: &mut Plan, name: &str, now: &Time) {
    if is_true(&p.status, condition::SUSPENDED) {
        let msg = messages::resumed(name);
        p.event(false, reason::RESUMED, msg.clone());
        conditions::set(
            &mut p.status,
            condition::SUSPENDED,
            false,
            reason::RESUMED,
            msg,
            now,
        );
        p.status.start_time = Some(now.clone());
    }
    p.status.start_time.get_or_insert_with(|| now.clone());
}

/// Stops the job: no Pods or Services, Running false, Suspended true with
/// `stop`'s reason and message, and its Event (if any) when the job
/// becomes stopped or its reason changes.
fn stop_with(p: &mut Plan, children: &Slots<'_>, now: &Time, stop: Stop) {
    let Stop {
        reason: why,
        message: msg,
        event,
    } = stop;
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
