//! Kueue in a pass, through the plan's hooks ([`PlanHooks`]): the gate
//! ([`super::gate`]) decides whether the job runs and where; held or
//! evicted, it is stopped like a suspended one (condition `Suspended`,
//! reason `TFJobQueued` or `TFJobEvicted`) without touching
//! `spec.runPolicy.suspend`, so the user's own suspend keeps its meaning;
//! the Workload writes that follow the job's status come after the pass.
use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;

use crate::api::constants::{condition, event, reason};
use crate::api::types::TFJob;
use crate::tfjob::plan::conditions::is_true;
use crate::tfjob::plan::integration::{Pass, PlanHooks, Say, Stop};
use crate::tfjob::plan::{Action, Plan};

use super::api::{ResourceFlavor, Workload};
use super::gate::{self, Gate, Seen};
use super::multikueue::dispatched;

/// What the Kueue integration saw of one job: its Workloads (any creator)
/// and the ResourceFlavors their admissions name.
#[derive(Clone, Debug, Default)]
pub struct KueuePass {
    pub workloads: Vec<Arc<Workload>>,
    pub flavors: BTreeMap<String, Arc<ResourceFlavor>>,
}

impl KueuePass {
    fn seen(&self) -> Seen<'_> {
        Seen {
            workloads: &self.workloads,
            flavors: &self.flavors,
        }
    }
}

impl PlanHooks for KueuePass {
    fn managed_elsewhere(
        &self,
        job: &TFJob,
        managed_by: Option<&str>,
        pods_left: bool,
        now: Timestamp,
    ) -> Option<Plan> {
        dispatched(job, &self.seen(), managed_by, pods_left, now)
    }

    /// Kueue's word on a queued job: its Workload writes, and whether the
    /// job may run.
    fn gate(&self, pass: &Pass<'_>, p: &mut Plan) -> Say {
        let pods_left = !pass.pods.is_empty();
        let decision = gate::gate(pass.job, pass.spec, pass.owner, &self.seen(), pods_left);
        p.actions
            .extend(decision.writes.into_iter().map(Action::integration));
        if let Some(d) = decision.recheck {
            p.requeue_in(d);
        }
        let stop = |reason, message, event| {
            Say::Stop(Stop {
                reason,
                message,
                event,
            })
        };
        match decision.gate {
            Gate::Free => Say::Run,
            Gate::Hold(msg) => stop(reason::QUEUED, msg, None),
            Gate::Stop(msg) => stop(reason::EVICTED, msg, Some(event::KUEUE_STOPPED)),
            Gate::Requeue(msg) => stop(reason::QUEUED, msg, Some(event::KUEUE_STOPPED)),
            Gate::Keep(msg) => {
                tracing::debug!("{msg}");
                Say::RunWithoutCreating
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
                Say::Run
            }
        }
    }

    fn after(&self, job: &TFJob, p: &mut Plan, pods_left: bool, now: Timestamp) {
        let writes = gate::after(job, &p.status, pods_left, &self.seen(), now);
        p.actions
            .extend(writes.into_iter().map(Action::integration));
    }
}
