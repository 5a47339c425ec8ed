//! `activeDeadlineSeconds`: counted from `startTime` (which a resume
//! resets), and firing even if nothing else happens: the plan asks for a
//! requeue at the deadline.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::tfjob::kubeflow::messages;

use super::Plan;
use super::bookkeeping::Bookkeeping;
use super::finish::{duration_between, fail};
use super::integration::Pass;

/// True when the deadline has passed: the job fails, and its unfinished
/// Pods are stopped (remembered in the bookkeeping until they are).
pub(super) fn passed(p: &mut Plan, books: &mut Bookkeeping, pass: &Pass<'_>, now: &Time) -> bool {
    let (Some(deadline), Some(start)) = (
        pass.spec.active_deadline_seconds,
        p.status.start_time.as_ref().map(|t| t.0),
    ) else {
        return false;
    };
    let ends = start
        .saturating_add(jiff::SignedDuration::from_secs(deadline))
        .unwrap_or(start);
    if pass.now >= ends {
        books.stop_unfinished = true;
        fail(p, messages::deadline_exceeded(pass.name), now);
        return true;
    }
    p.requeue_in(duration_between(pass.now, ends));
    false
}
