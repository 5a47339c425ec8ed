//! A job MultiKueue dispatches to a worker cluster: on this (manager)
//! cluster only its Kueue Workload is planned.
use kube::ResourceExt;

use crate::api::constants::MANAGED_BY_MULTIKUEUE;
use crate::api::defaults::normalize;
use crate::tfjob::children::owner_reference;
use crate::tfjob::plan::conditions::is_finished;
use crate::tfjob::integrations::kueue::api::LABEL_MULTIKUEUE_ORIGIN;
use crate::tfjob::integrations::kueue::gate as kueue_gate;

use crate::tfjob::plan::{Action, Observed, Plan};

/// The Warning on a worker's copy that still says MultiKueue manages it.
const REASON_MULTIKUEUE_COPY_NOT_RUN: &str = "MultiKueueCopyNotRun";

/// A job MultiKueue dispatches from this (manager) cluster
/// (`spec.managedBy` or `runPolicy.managedBy`: `kueue.x-k8s.io/multikueue`): it runs on a worker,
/// and MultiKueue mirrors its status here. Without Kueue's built-in, its
/// Workload is still the job controller's to create and finish (docs/kueue.md,
/// "MultiKueue"); nothing else is done.
/// `Plan::default()` (nothing to do) for any other `managedBy`, or without
/// the operator's Workloads.
pub(crate) fn dispatched(obs: &Observed<'_>, managed_by: Option<&str>) -> Plan {
    let Some(seen) = obs
        .kueue
        .as_ref()
        .filter(|_| managed_by == Some(MANAGED_BY_MULTIKUEUE))
    else {
        return Plan::default();
    };
    let job = obs.job;
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
        return p;
    }
    let name = job.metadata.name.as_deref().unwrap_or_default();
    if let (Ok(spec), Some(owner)) = (normalize(name, &job.spec), owner_reference(job))
        && !is_finished(&p.status)
    {
        let decision = kueue_gate::gate(job, &spec, &owner, seen, !obs.pods.is_empty());
        p.actions
            .extend(decision.writes.into_iter().map(Action::Workload));
    }
    let writes = kueue_gate::after(job, &p.status, false, seen, obs.now);
    p.actions.extend(writes.into_iter().map(Action::Workload));
    p
}
