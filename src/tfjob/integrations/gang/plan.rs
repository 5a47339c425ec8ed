//! The gang in a pass ([`super`]), through the plan's hooks
//! ([`PlanHooks`]): its PodGroup before its Pods, or, for a job whose Pods
//! were created without one, no group and one Warning; the group given up
//! on every stop; the scheduler's verdict said once for the whole job.
use std::sync::Arc;
use std::time::Duration;

use crate::api::constants::{event, reason};
use crate::api::pod_group::PodGroup;
use crate::api::types::TFJob;
use crate::tfjob::plan::bookkeeping::Bookkeeping;
use crate::tfjob::plan::integration::{Pass, PlanHooks, Unscheduled};
use crate::tfjob::plan::tally::terminating;
use crate::tfjob::plan::{Action, Plan};

use super::{GangScheduling, Step};

/// How long to wait for an old PodGroup of the job's name to be deleted
/// before looking again (its deletion also wakes the job up: it is owned).
const POD_GROUP_WAIT: Duration = Duration::from_secs(2);

/// A write to the job's PodGroup, sent before any Pod of the pass
/// (`super::write`).
#[derive(Clone, Debug, PartialEq)]
pub enum PodGroupWrite {
    /// Create it. Sent before any `CreatePod` of the pass (a Pod whose
    /// group does not exist yet only waits, but the group's `minCount` must
    /// be there before the scheduler counts the Pods).
    Create(Box<PodGroup>),
    /// The job was scaled: its `minCount` follows.
    SetMinCount { name: String, min_count: i32 },
    /// Stopped: the group goes with the Pods (a job that runs again gets a
    /// fresh one); `uid` is a precondition, as for Pods.
    Delete { name: String, uid: Option<String> },
}

/// What the gang integration saw of one job: the setting of now, and the
/// PodGroup named like the job ([`super::group_name`]), whoever owns it.
pub struct GangPass {
    pub setting: GangScheduling,
    pub group: Option<Arc<PodGroup>>,
}

impl PlanHooks for GangPass {
    fn on_created(&self, job: &TFJob, p: &mut Plan) {
        if let Some(policy) = &job.spec.run_policy.scheduling_policy
            && let Some(warning) = super::policy_warning(self.setting, policy)
        {
            p.event(true, event::SCHEDULING_POLICY_IGNORED, warning);
        }
    }

    /// Every stop (the user's suspend, Kueue holding or evicting the job)
    /// leaves no live PodGroup of the job's: the gang that runs again must
    /// be placed whole by a fresh group, not joined to one the scheduler
    /// already counted as placed (it would bind the new Pods one by one).
    fn on_stop(&self, job: &TFJob, p: &mut Plan) {
        if let Some(group) = self.group.as_deref()
            && let Some(uid) = job.metadata.uid.as_deref()
            && super::is_ours_and_live(group, uid)
        {
            p.actions.push(Action::integration(PodGroupWrite::Delete {
                name: group.metadata.name.clone().unwrap_or_default(),
                uid: group.metadata.uid.clone(),
            }));
        }
    }

    /// The scheduler's verdict on the job's gang: one Warning for the group
    /// instead of one `Unschedulable` per waiting Pod.
    fn unscheduled(&self, job: &TFJob, name: &str) -> Option<Unscheduled> {
        let unplaced = self.group.as_deref().filter(|_| self.setting.wants(job));
        let unplaced = unplaced.and_then(super::unplaced)?;
        Some(Unscheduled {
            reason: reason::GANG_UNSCHEDULABLE,
            event: event::GANG_UNSCHEDULABLE,
            line: unplaced.describe(super::group_name(name)),
        })
    }

    fn before_creating_pods(
        &self,
        pass: &Pass<'_>,
        p: &mut Plan,
        books: &mut Bookkeeping,
        may: bool,
    ) -> bool {
        if !self.setting.wants(pass.job) || self.runs_outside_its_gang(pass, p, books) {
            return may;
        }
        may && self.plan_pod_group(pass, p)
    }
}

impl GangPass {
    /// A job that asks for a gang but whose Pods were created without one
    /// ([`super::outside_a_gang`]) runs on without it: one Warning
    /// (remembered in the bookkeeping), forgotten once the job has no Pods
    /// (a resumed job gets its gang).
    fn runs_outside_its_gang(
        &self,
        pass: &Pass<'_>,
        p: &mut Plan,
        books: &mut Bookkeeping,
    ) -> bool {
        let live = pass.pods.iter().filter(|p| !terminating(p)).count();
        if live == 0 {
            books.outside_a_gang = false;
            return false;
        }
        let uid = pass.job.metadata.uid.as_deref().unwrap_or_default();
        if !super::outside_a_gang(pass.pods, self.group.as_deref(), uid) {
            return false;
        }
        if !books.outside_a_gang {
            books.outside_a_gang = true;
            p.event(
                true,
                event::SCHEDULING_POLICY_IGNORED,
                super::outside_a_gang_warning(live),
            );
        }
        true
    }

    /// The job's PodGroup before its Pods: create it, or set its `minCount`
    /// after scaling. False when no Pod may be created yet (an old group of
    /// the job's name is still there); the Pods created otherwise join the group.
    fn plan_pod_group(&self, pass: &Pass<'_>, p: &mut Plan) -> bool {
        let uid = pass.job.metadata.uid.as_deref().unwrap_or_default();
        let wanted = super::desired(pass.job, pass.spec, pass.name, pass.owner);
        let name = super::group_name(pass.name).to_owned();
        match super::next_step(self.group.as_deref(), &wanted, uid) {
            Step::Create => p
                .actions
                .push(Action::integration(PodGroupWrite::Create(Box::new(wanted)))),
            Step::SetMinCount(min_count) => {
                p.actions
                    .push(Action::integration(PodGroupWrite::SetMinCount {
                        name: name.clone(),
                        min_count,
                    }))
            }
            Step::Ready => {}
            Step::Wait(why) => {
                p.event(false, event::WAITING_FOR_POD_GROUP, why);
                p.requeue_in(POD_GROUP_WAIT);
                return false;
            }
        }
        p.pod_group = Some(name);
        true
    }
}
