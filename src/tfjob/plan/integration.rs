//! The seam an integration plugs into the plan through: Kueue, gangs and
//! the next one each implement [`PlanHooks`] in their own folder
//! (`crate::tfjob::integrations`), and the plan calls them at fixed points
//! of a pass without knowing which are there. The same shape as Kueue's
//! `jobframework.GenericJob` (what an integration must answer) and
//! training-operator's `PodGroupControl` (the gang behind one interface).
//!
//! An integration's writes travel in the plan as [`Write`]s: the core
//! orders them before the pass's Pods and hands them back to the
//! integration that planned them (`crate::tfjob::apply::integration`).
use std::any::Any;
use std::fmt::Debug;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::api::defaults::JobSpec;
use crate::api::types::TFJob;
use crate::tfjob::children::cached::CachedPod;

use super::Plan;
use super::bookkeeping::Bookkeeping;

/// What one pass knows of a job that may run: its spec as defaulted, the
/// reference its children carry, its Pods, the time.
pub struct Pass<'a> {
    pub job: &'a TFJob,
    pub name: &'a str,
    pub spec: &'a JobSpec<'a>,
    pub owner: &'a OwnerReference,
    pub pods: &'a [Arc<CachedPod>],
    pub now: Timestamp,
}

/// An integration's word on whether the job runs in this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Say {
    /// Run: the pass goes on as without the integration.
    Run,
    /// Run what runs, but create no Pod.
    RunWithoutCreating,
    /// Stop: no Pod or Service is left, and the `Suspended` condition says
    /// why (the job's own `suspend` keeps its meaning).
    Stop(Stop),
}

/// Why a job is stopped, as its `Suspended` condition and Event show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stop {
    pub reason: &'static str,
    pub message: String,
    /// The Event sent when the job becomes stopped or its reason changes.
    pub event: Option<&'static str>,
}

/// Why the job's Pods are not scheduled, said once for the whole job
/// instead of once per Pod (a gang the scheduler cannot place).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unscheduled {
    /// The `Created` condition's reason while it lasts.
    pub reason: &'static str,
    /// The Warning's reason.
    pub event: &'static str,
    /// One line, for the Warning and the `Created` condition's message.
    pub line: String,
}

/// An integration's hooks into one pass of the plan, built by the
/// integration from what it observed of the job. Pure, like the plan: each
/// hook reads its arguments and adds to `p`. Every hook has a default that
/// does nothing, so an integration implements only the points it uses.
pub trait PlanHooks: Send + Sync {
    /// The job's first pass: Warnings about its spec.
    fn on_created(&self, _job: &TFJob, _p: &mut Plan) {}

    /// A job another manager runs (`managedBy`): this integration's plan
    /// for it, if it has one (MultiKueue's Workload on the manager).
    fn managed_elsewhere(
        &self,
        _job: &TFJob,
        _managed_by: Option<&str>,
        _pods_left: bool,
        _now: Timestamp,
    ) -> Option<Plan> {
        None
    }

    /// Before the job runs: whether it may (Kueue's admission).
    fn gate(&self, _pass: &Pass<'_>, _p: &mut Plan) -> Say {
        Say::Run
    }

    /// The job stops (its spec suspends it, or a gate stopped it): give
    /// back what it holds.
    fn on_stop(&self, _job: &TFJob, _p: &mut Plan) {}

    /// Why the job's Pods are not scheduled, if this integration can say
    /// it for the whole job.
    fn unscheduled(&self, _job: &TFJob, _name: &str) -> Option<Unscheduled> {
        None
    }

    /// Before the pass creates Pods: whether it may (`may`: what the gates
    /// and the integrations before this one said). A gang's PodGroup is
    /// planned here, before its Pods.
    fn before_creating_pods(
        &self,
        _pass: &Pass<'_>,
        _p: &mut Plan,
        _books: &mut Bookkeeping,
        may: bool,
    ) -> bool {
        may
    }

    /// After the pass: the writes that follow the job's status as planned
    /// (`pods_left`: any Pod of the job still exists).
    fn after(&self, _job: &TFJob, _p: &mut Plan, _pods_left: bool, _now: Timestamp) {}
}

/// A write an integration plans (a Workload's, a PodGroup's), as the plan
/// carries it: any plain value the integration's writer knows how to send.
pub trait IntegrationWrite: Any + Debug + Send + Sync {
    fn clone_write(&self) -> Box<dyn IntegrationWrite>;
    fn same_as(&self, other: &dyn IntegrationWrite) -> bool;
    fn as_any(&self) -> &dyn Any;
}

impl<T: Any + Debug + Clone + PartialEq + Send + Sync> IntegrationWrite for T {
    fn clone_write(&self) -> Box<dyn IntegrationWrite> {
        Box::new(self.clone())
    }

    fn same_as(&self, other: &dyn IntegrationWrite) -> bool {
        other.as_any().downcast_ref::<T>() == Some(self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// One integration write in the plan.
#[derive(Debug)]
pub struct Write(Box<dyn IntegrationWrite>);

impl Write {
    pub fn new(write: impl IntegrationWrite) -> Self {
        Self(Box::new(write))
    }

    /// The write, if it is a `T` (each integration picks out its own).
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.0.as_any().downcast_ref()
    }
}

impl Clone for Write {
    fn clone(&self) -> Self {
        Self(self.0.clone_write())
    }
}

impl PartialEq for Write {
    fn eq(&self, other: &Self) -> bool {
        self.0.same_as(other.0.as_ref())
    }
}
