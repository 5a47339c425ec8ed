//! A job's first pass and its spec: the `Created` condition, the
//! integrations' Warnings about the spec, and a spec that cannot run.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::constants::{condition, reason};
use crate::api::defaults::{JobSpec, normalize};
use crate::api::types::TFJob;
use crate::tfjob::kubeflow::messages;

use super::conditions::{self, is_finished};
use super::{Observed, Plan};

/// Sets `Created` on the job's first pass (Kubeflow's `TFJobCreated`).
pub(super) fn mark_created(p: &mut Plan, obs: &Observed<'_>, name: &str, now: &Time) {
    if p.status
        .conditions
        .iter()
        .any(|c| c.type_ == condition::CREATED)
    {
        return;
    }
    let msg = messages::created(name);
    conditions::set(
        &mut p.status,
        condition::CREATED,
        true,
        reason::CREATED,
        msg,
        now,
    );
    for integration in obs.integrations {
        integration.on_created(obs.job, p);
    }
}

/// The job's spec with Kubeflow's defaults, or `None` when it cannot run:
/// then the job fails once, with a Warning (not a retry loop).
pub(super) fn valid_spec<'a>(
    p: &mut Plan,
    job: &'a TFJob,
    name: &str,
    namespace: &str,
    now: &Time,
) -> Option<JobSpec<'a>> {
    match normalize(name, &job.spec) {
        Ok(spec) => Some(spec),
        Err(e) => {
            if !is_finished(&p.status) {
                let msg = format!("TFJob {namespace}/{name} has an invalid spec: {e}");
                p.event(true, "TFJobFailedValidation", msg.clone());
                conditions::set(
                    &mut p.status,
                    condition::FAILED,
                    true,
                    "TFJobFailedValidation",
                    msg,
                    now,
                );
                p.status.completion_time.get_or_insert(now.clone());
            }
            None
        }
    }
}
