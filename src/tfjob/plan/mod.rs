//! The pure heart of the controller: from what is observed (the job, its
//! Pods and Services, the time) to what should be done (creates, deletes,
//! events, a requeue) and the status to write.
//!
//! It does no I/O and never panics on what the API server sends, so every
//! rule here is unit-tested with plain data. The rules are Kubeflow's
//! (`pkg/controller.v1/common/{job,pod}.go`, `tensorflow/tfjob_controller.go`
//! `UpdateJobStatus`), with its known bugs fixed:
//!
//! - `activeDeadlineSeconds` fires even if nothing else happens: the plan
//!   asks for a requeue at the deadline;
//! - every restart, including an `ExitCode` re-creation, counts against
//!   `backoffLimit`, exactly once even across operator crashes, and the
//!   count survives under Kubeflow's CRD too ([`crate::tfjob::plan::bookkeeping`]);
//! - Restarting and Running exclude each other, and Restarting stays until
//!   the replacement runs (Kubeflow shows Running as soon as the failed Pod
//!   is gone);
//! - a terminating or evicted Pod is not a failure;
//! - a succeeded index is never run again after its Pod disappears;
//! - on a deadline or backoff failure only unfinished Pods are stopped
//!   (Kubeflow deletes every Pod, losing the logs of finished ones);
//! - a bad spec is a `Failed` condition and a Warning event, not a retry loop.
//!
//! Each rule is a small function in a file of its own, named for what it
//! decides; [`plan_into`] applies them in one order a reader follows top to
//! bottom (a restart changes the tally, the tally the conditions, the
//! conditions what cleanup stops). The integrations (Kueue, gangs) speak at
//! fixed points through [`integration::PlanHooks`]; the plan names none of
//! them. The tests are in `tests/`.
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::constants::ReplicaType;
use crate::api::defaults::is_managed_here;
use crate::api::types::{TFJob, TFJobStatus};
use crate::tfjob::children::cached::{CachedPod, CachedService};
use crate::tfjob::children::index_set;
use crate::tfjob::children::owner_reference;
use crate::tfjob::children::placement::PodPlacement;
use crate::tfjob::kubeflow::schema::StatusSchema;

pub mod abnormal;
pub mod bookkeeping;
pub mod conditions;
mod converge;
mod created;
mod deadline;
pub mod finish;
pub mod integration;
pub mod lost_node;
mod progress;
mod restarts;
mod slots;
mod stuck;
mod suspend;
pub mod tally;
#[cfg(test)]
mod tests;

use bookkeeping::Bookkeeping;
use conditions::is_finished;
use integration::{IntegrationWrite, Pass, PlanHooks, Write};
use slots::Slots;
use tally::{Tally, remember_succeeded};

/// Exit codes at or above this mean the process was killed by a signal
/// (137 = SIGKILL, 143 = SIGTERM): retryable under `ExitCode`.
const FIRST_RETRYABLE_EXIT_CODE: i32 = 128;

/// What the plan looks at.
pub struct Observed<'a> {
    pub job: &'a TFJob,
    /// Pods controlled by the job.
    pub pods: &'a [Arc<CachedPod>],
    /// Services controlled by the job.
    pub services: &'a [Arc<CachedService>],
    /// What each integration observed of the job, as its hooks into this
    /// pass ([`integration::PlanHooks`]), in their registration order.
    pub integrations: &'a [&'a dyn PlanHooks],
    pub now: Timestamp,
}

/// Settings that shape children (from the operator's flags).
#[derive(Clone, Debug, Default)]
pub struct PlanConfig {
    /// Appended to `.svc` in TF_CONFIG addresses.
    pub cluster_domain: Option<String>,
    /// The installed CRD's status schema: what the API server keeps.
    pub status_schema: StatusSchema,
    /// Force-delete a disrupted Pod still terminating this long after its
    /// grace period ended (its node is gone); `None`: never.
    pub force_delete_stuck_after: Option<Duration>,
}

/// One API write the plan asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Create the Pod of replica `index` of `rtype`, named `name`. The Pod
    /// itself is built only when its create is sent
    /// ([`ChildContext::pod`]): each carries a `TF_CONFIG` listing every
    /// replica, so building all of a 5,000-worker job's Pods up front held
    /// 5,000 × 200 KB at once.
    CreatePod {
        rtype: ReplicaType,
        index: i32,
        name: String,
    },
    /// Delete a Pod; `uid` is a precondition so a re-created Pod of the same
    /// name is never deleted by mistake.
    DeletePod {
        name: String,
        uid: Option<String>,
        /// Grace period 0: the Pod's kubelet is gone ([`stuck_on_lost_node`]).
        force: bool,
    },
    CreateService(Box<Service>),
    DeleteService {
        name: String,
    },
    /// TTL after finishing has passed.
    DeleteJob,
    /// A write an integration planned (a Kueue Workload's, a PodGroup's):
    /// sent before the pass's Pods, by the integration that planned it.
    Integration(Write),
}

impl Action {
    /// An integration's write.
    pub fn integration(write: impl IntegrationWrite) -> Self {
        Action::Integration(Write::new(write))
    }

    /// The integration write this action carries, if it is a `T`.
    pub fn write<T: std::any::Any>(&self) -> Option<&T> {
        match self {
            Action::Integration(w) => w.get(),
            _ => None,
        }
    }
}

/// An Event to record on the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedEvent {
    pub warning: bool,
    /// Ours are constants; a Pod's own reasons (`ImagePullBackOff`, …) are not.
    pub reason: Cow<'static, str>,
    pub message: String,
}

/// The outcome of planning.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub actions: Vec<Action>,
    pub status: TFJobStatus,
    pub events: Vec<PlannedEvent>,
    /// Reconcile again after this long even if nothing changes (deadline, TTL).
    pub requeue_after: Option<Duration>,
    /// False when the job is not ours to manage (`managedBy`): write nothing.
    pub manage: bool,
    /// New bookkeeping to write *before* any action (a restart is counted
    /// before its Pod is deleted); `None` when nothing worth writing changed.
    pub bookkeeping: Option<Bookkeeping>,
    /// The PodGroup the Pods this pass creates join
    /// (`spec.schedulingGroup.podGroupName`); `None`: no group.
    pub pod_group: Option<String>,
    /// What the Pods this pass creates get from the job's Kueue admission,
    /// per replica type (node labels, tolerations).
    pub placements: BTreeMap<ReplicaType, PodPlacement>,
    /// Someone else writes the job's status (MultiKueue mirrors a worker's).
    pub status_is_remote: bool,
}

impl Plan {
    pub fn event(&mut self, warning: bool, reason: impl Into<Cow<'static, str>>, message: String) {
        self.events.push(PlannedEvent {
            warning,
            reason: reason.into(),
            message,
        });
    }

    pub fn requeue_in(&mut self, d: Duration) {
        self.requeue_after = Some(self.requeue_after.map_or(d, |r| r.min(d)));
    }
}

/// Plans one reconcile of a TFJob.
pub fn plan(obs: &Observed<'_>, cfg: &PlanConfig) -> Plan {
    let job = obs.job;
    let (Some(name), Some(namespace)) = (
        job.metadata.name.as_deref(),
        job.metadata.namespace.as_deref(),
    ) else {
        return Plan::default();
    };
    let managed_by = job.spec.effective_managed_by();
    if job.metadata.deletion_timestamp.is_some() {
        return Plan::default();
    }
    if !is_managed_here(managed_by) {
        let mut elsewhere = obs.integrations.iter();
        return elsewhere
            .find_map(|i| i.managed_elsewhere(job, managed_by, !obs.pods.is_empty(), obs.now))
            .unwrap_or_default();
    }
    let mut p = Plan {
        status: job.status.clone().unwrap_or_default(),
        manage: true,
        ..Plan::default()
    };
    let stored = Bookkeeping::of(job);
    let mut books = stored.clone();
    plan_into(&mut p, &mut books, obs, cfg, name, namespace);
    for integration in obs.integrations {
        integration.after(job, &mut p, !obs.pods.is_empty(), obs.now);
    }
    // What every pass remembers, whatever path it took: counted Pods that
    // are gone are forgotten, and our display copies of the bookkeeping.
    books.forget_gone_pods(obs.pods.iter().filter_map(|p| p.metadata.uid.as_deref()));
    // Once the job has finished, only the order to stop its Pods is worth a
    // write: its restarts and succeeded indexes will never be read again.
    let worth_writing = if is_finished(&p.status) {
        books.stop_unfinished != stored.stop_unfinished
    } else {
        books.differs_from(&stored)
    };
    if worth_writing {
        p.bookkeeping = Some(books.clone());
    }
    for (rtype, rs) in p.status.replica_statuses.iter_mut() {
        rs.restarts = books.shown_restarts(rtype);
        rs.succeeded_indexes = books.succeeded_indexes.get(rtype).cloned();
    }
    p.status.observed_generation = job.metadata.generation;
    cfg.status_schema.prune(&mut p.status);
    p
}

/// The body of [`plan`]: the rules in the order they apply, each ending
/// the pass when it decides the job's fate (invalid, finished, stopped,
/// failed).
fn plan_into(
    p: &mut Plan,
    books: &mut Bookkeeping,
    obs: &Observed<'_>,
    cfg: &PlanConfig,
    name: &str,
    namespace: &str,
) {
    let (job, now) = (obs.job, Time(obs.now));
    created::mark_created(p, obs, name, &now);
    let Some(spec) = created::valid_spec(p, job, name, namespace, &now) else {
        return;
    };
    let Some(owner) = owner_reference(job) else {
        return;
    };
    let children = Slots::group(obs.pods, obs.services);
    stuck::force_delete_stuck(p, &children, obs.now, cfg.force_delete_stuck_after);
    if is_finished(&p.status) {
        return finish::clean_up(p, &spec, &children, obs.now, books.stop_unfinished, true);
    }
    remember_succeeded(&spec, &children, books);
    let pass = Pass {
        job,
        name,
        spec: &spec,
        owner: &owner,
        pods: obs.pods,
        now: obs.now,
    };
    let Some(may_create) = suspend::runs(p, obs, &pass, &children, &now) else {
        return;
    };
    let restarts_before = books.total_restarts();
    let tally = Tally::count(&spec, &children, books);
    p.status.replica_statuses = tally.statuses.clone();
    if restarts::past_backoff_limit(p, books, &pass, &tally, restarts_before, &now)
        || deadline::passed(p, books, &pass, &now)
    {
        return finish::clean_up(p, &spec, &children, obs.now, true, false);
    }
    restarts::restart_failed(p, &tally, name, namespace, &now);
    let unscheduled = obs
        .integrations
        .iter()
        .find_map(|i| i.unscheduled(job, name));
    progress::report_pod_trouble(p, &tally, unscheduled.is_some());
    progress::update_conditions(p, &spec, &tally, name, namespace, &now);
    progress::explain_unscheduled(p, &tally, name, unscheduled);
    if is_finished(&p.status) {
        return finish::clean_up(p, &spec, &children, obs.now, false, false);
    }
    let may_create = obs.integrations.iter().fold(may_create, |may, i| {
        i.before_creating_pods(&pass, p, books, may)
    });
    converge::children(p, &pass, cfg, &tally, &children, namespace, may_create);
}

/// Keys for `set`-like lookups in tests and the apply step.
pub fn succeeded_indexes(status: &TFJobStatus, rtype: ReplicaType) -> BTreeSet<i32> {
    index_set::parse(
        status
            .replica_statuses
            .get(rtype.as_str())
            .and_then(|s| s.succeeded_indexes.as_deref()),
    )
}
