//! A job MultiKueue dispatches to a worker cluster: on this (manager)
//! cluster only its Kueue Workload is planned.
use kube::ResourceExt;

use crate::api::constants::MANAGED_BY_MULTIKUEUE;
use crate::api::defaults::normalize;
use crate::api::types::TFJob;
use crate::tfjob::children::owner_reference;
use crate::tfjob::plan::conditions::is_finished;
use crate::tfjob::plan::{Action, Plan};

use super::api::LABEL_MULTIKUEUE_ORIGIN;
use super::gate::{self as kueue_gate, Seen};

/// The Warning on a worker's copy that still says MultiKueue manages it.
const REASON_MULTIKUEUE_COPY_NOT_RUN: &str = "MultiKueueCopyNotRun";

/// A job MultiKueue dispatches from this (manager) cluster
/// (`spec.managedBy` or `runPolicy.managedBy`: `kueue.x-k8s.io/multikueue`): it runs on a worker,
/// and MultiKueue mirrors its status here. Without Kueue's built-in, its
/// Workload is still the job controller's to create and finish (docs/kueue.md,
/// "MultiKueue"); nothing else is done.
/// `None` (nothing to do) for any other `managedBy`.
pub(super) fn dispatched(
    job: &TFJob,
    seen: &Seen<'_>,
    managed_by: Option<&str>,
    pods_left: bool,
    now: jiff::Timestamp,
) -> Option<Plan> {
    if managed_by != Some(MANAGED_BY_MULTIKUEUE) {
        return None;
    }
    let status = job.status.clone().unwrap_or_default();
    let mut p = Plan {
        status,
        manage: true,
        status_is_remote: true,
        ..Plan::default()
    };
    if let Some(origin) = job.labels().get(LABEL_MULTIKUEUE_ORIGIN) {
        // MultiKueue's copy on this (worker) cluster, still marked as its:
        // the generic adapter clears only spec.managedBy, so the job was
        // submitted with spec.runPolicy.managedBy. Nobody will run it here;
        // no Workload of ours either (MultiKueue made the one it waits on).
        p.event(
            true,
            REASON_MULTIKUEUE_COPY_NOT_RUN,
            format!(
                "TFJob {}/{} is MultiKueue's copy from {origin}, but its spec.runPolicy.managedBy \
                 still says kueue.x-k8s.io/multikueue, so nothing runs it here: Kueue's generic \
                 MultiKueue adapter clears only spec.managedBy. Submit the job on the manager \
                 with spec.managedBy: kueue.x-k8s.io/multikueue and no runPolicy.managedBy",
                job.namespace().unwrap_or_default(),
                job.name_any()
            ),
        );
        return Some(p);
    }
    let name = job.metadata.name.as_deref().unwrap_or_default();
    if let (Ok(spec), Some(owner)) = (normalize(name, &job.spec), owner_reference(job))
        && !is_finished(&p.status)
    {
        let decision = kueue_gate::gate(job, &spec, &owner, seen, pods_left);
        let writes = decision.writes.into_iter();
        p.actions.extend(writes.map(Action::integration));
    }
    let writes = kueue_gate::after(job, &p.status, false, seen, now);
    p.actions
        .extend(writes.into_iter().map(Action::integration));
    Some(p)
}
