//! Restarts and `backoffLimit`: which failures are restarted (their Pod
//! deleted and re-created next pass) and when the restarts so far fail
//! the job instead.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::constants::{condition, event, reason};
use crate::tfjob::kubeflow::messages;

use super::bookkeeping::Bookkeeping;
use super::conditions;
use super::finish::fail;
use super::integration::Pass;
use super::tally::Tally;
use super::{Action, Plan};

/// Backoff, as Kubeflow and Kubernetes Jobs count it: in-place restarts
/// (the kubelet's restartCount of running Pods) fail the job once they
/// reach the limit; a failure that needs a new restart fails it when that
/// restart would exceed the limit. Re-creations (which Kubeflow forgets,
/// #2045) count in both. So with a limit of N, N re-creations run and the
/// failure that would need the N+1th fails the job. True when it failed.
pub(super) fn past_backoff_limit(
    p: &mut Plan,
    books: &mut Bookkeeping,
    pass: &Pass<'_>,
    tally: &Tally,
    restarts_before: i32,
    now: &Time,
) -> bool {
    let Some(limit) = pass.spec.backoff_limit else {
        return false;
    };
    let so_far = restarts_before + tally.in_place_restarts;
    let past = if limit == 0 {
        tally.in_place_restarts > 0
    } else {
        tally.in_place_restarts > 0 && so_far >= limit
    };
    let new = tally.new_restarts;
    if !(past || new > 0 && so_far + new > limit) {
        return false;
    }
    // The failures of this pass are not restarted: not counted (the
    // in-place restarts seen are: they happened).
    *books = Bookkeeping {
        stop_unfinished: true,
        in_place_pods: std::mem::take(&mut books.in_place_pods),
        ..Bookkeeping::of(pass.job)
    };
    fail(p, messages::backoff_limit_exceeded(pass.name), now);
    true
}

/// Retryable failures: delete the Pod (it is re-created next pass) and say
/// so. The restart is already in the bookkeeping, which is written first.
pub(super) fn restart_failed(p: &mut Plan, tally: &Tally, name: &str, namespace: &str, now: &Time) {
    for retry in &tally.retries {
        p.actions.push(Action::DeletePod {
            name: retry.pod.clone(),
            uid: retry.uid.clone(),
            force: false,
        });
        p.event(
            false,
            event::EXITED_WITH_CODE,
            messages::exited_with_code(namespace, &retry.pod, retry.exit_code),
        );
        if !retry.evicted {
            let msg = messages::restarting(name, retry.rtype.as_str());
            p.event(true, reason::RESTARTING, msg.clone());
            conditions::set(
                &mut p.status,
                condition::RESTARTING,
                true,
                reason::RESTARTING,
                msg,
                now,
            );
        }
    }
}
