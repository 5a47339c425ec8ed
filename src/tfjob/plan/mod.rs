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
//! **Length:** about 650 lines of code, kept in one file on purpose: the
//! rules feed each other within one pass (a restart changes the tally, the
//! tally the conditions, the conditions what cleanup stops), and `plan_into`
//! applies them in one order a reader follows top to bottom. The per-replica
//! count they start from is in `plan/tally.rs`; the tests are apart, in
//! `plan_tests.rs` and `plan_tests/`.
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Service;

use crate::tfjob::children::cached::{CachedPod, CachedService};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::constants::ReplicaType;
use crate::api::constants::{condition, event, reason};
use crate::api::defaults::{JobSpec, is_managed_here, normalize};
use crate::api::types::{CleanPodPolicy, SuccessPolicy, TFJob, TFJobStatus};

use crate::api::pod_group::PodGroup;

use bookkeeping::Bookkeeping;
use crate::tfjob::children::{ChildContext, owner_reference, replica_of};
use conditions::{is_finished, is_true};
use crate::tfjob::integrations::gang::{self, GangScheduling, Unplaced};
use crate::tfjob::children::index_set;
use crate::tfjob::integrations::kueue::gate::{self as kueue_gate, PodPlacement, Seen, WorkloadWrite};
use lost_node::{STUCK_POD_RECHECK, stuck_on_lost_node};
use crate::tfjob::kubeflow::messages;
use crate::tfjob::kubeflow::schema::StatusSchema;
use crate::tfjob::children::tf_config::replica_name;

pub mod abnormal;
pub mod bookkeeping;
pub mod conditions;
pub mod lost_node;
mod suspend;
pub(crate) mod tally;
#[cfg(test)]
mod tests;
use crate::tfjob::integrations::gang::plan::{plan_pod_group, runs_outside_its_gang};
use crate::tfjob::integrations::kueue::multikueue::dispatched;
use suspend::{KueueSays, kueue_gates, suspend};
use tally::{Tally, phase, remember_succeeded, terminating};

/// Exit codes at or above this mean the process was killed by a signal
/// (137 = SIGKILL, 143 = SIGTERM): retryable under `ExitCode`.
const FIRST_RETRYABLE_EXIT_CODE: i32 = 128;

/// The reason the scheduler gives a Pod it cannot place (`PodScheduled=False`).
const UNSCHEDULABLE: &str = "Unschedulable";

/// What the plan looks at.
pub struct Observed<'a> {
    pub job: &'a TFJob,
    /// Pods controlled by the job.
    pub pods: &'a [Arc<CachedPod>],
    /// Services controlled by the job.
    pub services: &'a [Arc<CachedService>],
    /// The PodGroup named like the job ([`gang::group_name`]), whoever owns
    /// it; `None` when there is none or gangs are not in use.
    pub pod_group: Option<&'a PodGroup>,
    /// The job's Kueue Workloads and the ResourceFlavors, when the operator
    /// owns Workloads (`--kueue=workload`, [`crate::tfjob::integrations::kueue`]); `None` otherwise.
    pub kueue: Option<Seen<'a>>,
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
    /// Whether jobs get a PodGroup ([`crate::tfjob::integrations::gang`]).
    pub gang: GangScheduling,
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
    /// Create the job's PodGroup. Sent before any `CreatePod` of the pass
    /// (a Pod whose group does not exist yet only waits, but the group's
    /// `minCount` must be there before the scheduler counts the Pods).
    CreatePodGroup(Box<PodGroup>),
    /// The job was scaled: its PodGroup's `minCount` follows.
    SetPodGroupMinCount {
        name: String,
        min_count: i32,
    },
    /// Suspended: the group goes with the Pods (a resumed job gets a fresh
    /// one); `uid` is a precondition, as for Pods.
    DeletePodGroup {
        name: String,
        uid: Option<String>,
    },
    /// TTL after finishing has passed.
    DeleteJob,
    /// A write to the job's Kueue Workload ([`crate::tfjob::integrations::kueue::gate`]); sent
    /// before the Pods.
    Workload(WorkloadWrite),
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

/// How long to wait for an old PodGroup of the job's name to be deleted
/// before looking again (its deletion also wakes the job up: it is owned).
pub(crate) const POD_GROUP_WAIT: Duration = Duration::from_secs(2);

impl Plan {
    pub(crate) fn event(&mut self, warning: bool, reason: impl Into<Cow<'static, str>>, message: String) {
        self.events.push(PlannedEvent {
            warning,
            reason: reason.into(),
            message,
        });
    }

    pub(crate) fn requeue_in(&mut self, d: Duration) {
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
        return dispatched(obs, managed_by);
    }
    let mut p = Plan {
        status: job.status.clone().unwrap_or_default(),
        manage: true,
        ..Plan::default()
    };
    let stored = Bookkeeping::of(job);
    let mut books = stored.clone();
    plan_into(&mut p, &mut books, obs, cfg, name, namespace);
    if let Some(seen) = &obs.kueue {
        let pods_left = !obs.pods.is_empty();
        let writes = kueue_gate::after(job, &p.status, pods_left, seen, obs.now);
        p.actions.extend(writes.into_iter().map(Action::Workload));
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

/// The body of [`plan`]: fills in `p` and `books`, returning early on the
/// paths that end a pass (invalid, finished, suspended, failed).
fn plan_into(
    p: &mut Plan,
    books: &mut Bookkeeping,
    obs: &Observed<'_>,
    cfg: &PlanConfig,
    name: &str,
    namespace: &str,
) {
    let job = obs.job;
    let now = Time(obs.now);
    if !p
        .status
        .conditions
        .iter()
        .any(|c| c.type_ == condition::CREATED)
    {
        let msg = messages::created(name);
        conditions::set(
            &mut p.status,
            condition::CREATED,
            true,
            reason::CREATED,
            msg,
            &now,
        );
        if let Some(policy) = &job.spec.run_policy.scheduling_policy
            && let Some(warning) = gang::policy_warning(cfg.gang, policy)
        {
            p.event(true, event::SCHEDULING_POLICY_IGNORED, warning);
        }
    }

    let spec = match normalize(name, &job.spec) {
        Ok(spec) => spec,
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
                    &now,
                );
                p.status.completion_time.get_or_insert(now);
            }
            return;
        }
    };
    let Some(owner) = owner_reference(job) else {
        return;
    };
    let ctx = ChildContext::new(
        name,
        namespace,
        &spec,
        &owner,
        cfg.cluster_domain.as_deref(),
    );
    let children = Children::group(obs.pods, obs.services);
    if let Some(wait) = cfg.force_delete_stuck_after {
        force_delete_stuck(p, &children, obs.now, wait);
    }

    if is_finished(&p.status) {
        let stop = books.stop_unfinished;
        finish(p, &spec, &children, obs.now, stop, true);
        return;
    }
    remember_succeeded(&spec, &children, books);
    if spec.suspend {
        suspend(p, name, &children, &now);
        give_up_pod_group(p, obs);
        return;
    }
    let kueue = match &obs.kueue {
        Some(seen) => kueue_gates(p, job, &spec, &owner, seen, &children, &now),
        None => KueueSays::Run,
    };
    if kueue == KueueSays::Stopped {
        give_up_pod_group(p, obs);
        return;
    }
    if is_true(&p.status, condition::SUSPENDED) {
        let msg = messages::resumed(name);
        p.event(false, reason::RESUMED, msg.clone());
        conditions::set(
            &mut p.status,
            condition::SUSPENDED,
            false,
            reason::RESUMED,
            msg,
            &now,
        );
        p.status.start_time = Some(now.clone());
    }
    let start = p.status.start_time.get_or_insert_with(|| now.clone()).0;

    let restarts_before = books.total_restarts();
    let tally = Tally::count(&spec, &children, books);
    p.status.replica_statuses = tally.statuses.clone();

    // Backoff, as Kubeflow and Kubernetes Jobs count it: in-place restarts
    // (the kubelet's restartCount of running Pods) fail the job once they
    // reach the limit; a failure that needs a new restart fails it when that
    // restart would exceed the limit. Re-creations (which Kubeflow forgets,
    // #2045) count in both. So with a limit of N, N re-creations run and the
    // failure that would need the N+1th fails the job.
    if let Some(limit) = spec.backoff_limit {
        let so_far = restarts_before + tally.in_place_restarts;
        let past = if limit == 0 {
            tally.in_place_restarts > 0
        } else {
            tally.in_place_restarts > 0 && so_far >= limit
        };
        let new = tally.new_restarts;
        if past || (new > 0 && so_far + new > limit) {
            // The failures of this pass are not restarted: not counted
            // (the in-place restarts seen are: they happened).
            *books = Bookkeeping {
                stop_unfinished: true,
                in_place_pods: std::mem::take(&mut books.in_place_pods),
                ..Bookkeeping::of(job)
            };
            let msg = messages::backoff_limit_exceeded(name);
            fail(p, msg, &now);
            finish(p, &spec, &children, obs.now, true, false);
            return;
        }
    }
    if let Some(deadline) = spec.active_deadline_seconds {
        let ends = start
            .saturating_add(jiff::SignedDuration::from_secs(deadline))
            .unwrap_or(start);
        if obs.now >= ends {
            books.stop_unfinished = true;
            let msg = messages::deadline_exceeded(name);
            fail(p, msg, &now);
            finish(p, &spec, &children, obs.now, true, false);
            return;
        }
        p.requeue_in(duration_between(obs.now, ends));
    }

    // Retryable failures: delete the Pod (it is re-created next pass) and
    // say so. The restart is already in `books`, which is written first.
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
                &now,
            );
        }
    }
    // The scheduler's verdict on the job's gang: one Warning for the group
    // instead of one `Unschedulable` per waiting Pod.
    let unplaced = if cfg.gang.wants(job) {
        obs.pod_group.and_then(gang::unplaced)
    } else {
        None
    };
    for (reason, message) in &tally.abnormal {
        if unplaced.is_some() && reason == UNSCHEDULABLE {
            continue;
        }
        p.event(true, reason.clone(), message.clone());
    }
    update_conditions(p, &spec, &tally, name, namespace, &now);
    explain_unscheduled(p, &tally, name, unplaced.as_ref());
    if is_finished(&p.status) {
        finish(p, &spec, &children, obs.now, false, false);
        return;
    }

    // Converge children toward the spec: the gang's group first.
    let in_gang = cfg.gang.wants(job) && !runs_outside_its_gang(p, books, obs);
    let may_create_pods =
        kueue == KueueSays::Run && (!in_gang || plan_pod_group(p, obs, &spec, &owner, name));
    for &(rtype, index) in tally.missing_pods.iter().filter(|_| may_create_pods) {
        if ctx.can_build_pod(rtype) {
            let name = replica_name(name, rtype, index);
            p.actions.push(Action::CreatePod { rtype, index, name });
        }
    }
    for (rtype, replica) in &spec.replicas {
        for index in 0..replica.replicas {
            if !children.services.contains_key(&(*rtype, index))
                && let Some(svc) = ctx.service(*rtype, index)
            {
                p.actions.push(Action::CreateService(Box::new(svc)));
            }
        }
    }
    for (&(rtype, index), pods) in &children.pods {
        if !in_spec(&spec, rtype, index) {
            for pod in pods.iter().filter(|p| !terminating(p)) {
                p.actions.push(delete_pod(pod));
            }
        }
    }
    for (&(rtype, index), name) in &children.services {
        if !in_spec(&spec, rtype, index) {
            p.actions.push(Action::DeleteService { name: name.clone() });
        }
    }
}

/// Every stop (the user's suspend, Kueue holding or evicting the job)
/// leaves no live PodGroup of the job's: the gang that runs again must be
/// placed whole by a fresh group, not joined to one the scheduler already
/// counted as placed (it would bind the new Pods one by one).
fn give_up_pod_group(p: &mut Plan, obs: &Observed<'_>) {
    if let Some(group) = obs.pod_group
        && let Some(uid) = obs.job.metadata.uid.as_deref()
        && gang::is_ours_and_live(group, uid)
    {
        p.actions.push(Action::DeletePodGroup {
            name: group.metadata.name.clone().unwrap_or_default(),
            uid: group.metadata.uid.clone(),
        });
    }
}

fn in_spec(spec: &JobSpec, rtype: ReplicaType, index: i32) -> bool {
    spec.replicas
        .get(&rtype)
        .is_some_and(|r| index < r.replicas)
}

fn duration_between(from: Timestamp, to: Timestamp) -> Duration {
    let secs = to
        .as_millisecond()
        .saturating_sub(from.as_millisecond())
        .max(0);
    Duration::from_millis(secs.unsigned_abs())
}

fn fail(p: &mut Plan, msg: String, now: &Time) {
    p.event(true, reason::FAILED, msg.clone());
    conditions::set(
        &mut p.status,
        condition::FAILED,
        true,
        reason::FAILED,
        msg,
        now,
    );
    p.status.completion_time.get_or_insert(now.clone());
}

/// The job's children, grouped by replica slot.
struct Children<'a> {
    pods: BTreeMap<(ReplicaType, i32), Vec<&'a CachedPod>>,
    services: BTreeMap<(ReplicaType, i32), String>,
}

impl<'a> Children<'a> {
    fn group(pods: &'a [Arc<CachedPod>], services: &'a [Arc<CachedService>]) -> Self {
        let mut by_slot: BTreeMap<_, Vec<&CachedPod>> = BTreeMap::new();
        for pod in pods {
            if let Some(slot) = replica_of(&pod.metadata) {
                by_slot.entry(slot).or_default().push(pod);
            }
        }
        let services = services
            .iter()
            .filter_map(|s| Some((replica_of(&s.metadata)?, s.metadata.name.clone()?)))
            .collect();
        Self {
            pods: by_slot,
            services,
        }
    }
}

fn force_delete_stuck(p: &mut Plan, children: &Children<'_>, now: Timestamp, wait: Duration) {
    for pod in children.pods.values().flatten() {
        match stuck_on_lost_node(pod, now, wait) {
            Some(left) if left.is_zero() => {
                p.actions.push(Action::DeletePod {
                    name: pod.metadata.name.clone().unwrap_or_default(),
                    uid: pod.metadata.uid.clone(),
                    force: true,
                });
                // The delete waits for the node to be gone or out of
                // service (`crate::tfjob::plan::lost_node`): look again later.
                p.requeue_in(STUCK_POD_RECHECK);
            }
            Some(left) => p.requeue_in(left),
            None => {}
        }
    }
}

fn delete_pod(pod: &CachedPod) -> Action {
    Action::DeletePod {
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone(),
        force: false,
    }
}

/// Running / Succeeded / Failed from the counts (Kubeflow's `UpdateJobStatus`).
/// Running and Restarting replace each other; once Restarting, the job shows
/// Running again only when every restarted replica runs again.
fn update_conditions(
    p: &mut Plan,
    spec: &JobSpec,
    t: &Tally,
    name: &str,
    namespace: &str,
    now: &Time,
) {
    let running_msg = || messages::running(namespace, name);
    let done_msg = || messages::succeeded(namespace, name);
    let status_of =
        |rtype: ReplicaType| t.statuses.get(rtype.as_str()).cloned().unwrap_or_default();
    // With a Chief: it decides both. Without: Workers do (worker 0, or all
    // of them under `AllWorkers`), and a succeeded job is not "running".
    let (running, succeeded) = if let Some(chief) = spec.chief_type() {
        let s = status_of(chief);
        (
            s.active > 0,
            spec.replicas[&chief].replicas - s.succeeded == 0,
        )
    } else if let Some(worker) = spec.replicas.get(&ReplicaType::Worker) {
        let s = status_of(ReplicaType::Worker);
        let all_done = worker.replicas - s.succeeded == 0;
        let done =
            all_done || (t.worker0_succeeded && spec.success_policy != SuccessPolicy::AllWorkers);
        (!done && s.active > 0, done)
    } else {
        (false, false)
    };
    let restarting = is_true(&p.status, condition::RESTARTING) && t.slots_not_running > 0;
    if running && !restarting {
        let msg = running_msg();
        conditions::set(
            &mut p.status,
            condition::RUNNING,
            true,
            reason::RUNNING,
            msg,
            now,
        );
    }
    for &(rtype, n) in &t.failed {
        if spec.enable_dynamic_worker && rtype == ReplicaType::Worker {
            continue;
        }
        for (pod, code) in &t.exits {
            p.event(
                false,
                event::EXITED_WITH_CODE,
                messages::exited_with_code(namespace, pod, code),
            );
        }
        let msg = messages::replicas_failed(namespace, name, n, rtype.as_str());
        fail(p, msg, now);
        return;
    }
    if succeeded {
        let msg = done_msg();
        p.event(false, reason::SUCCEEDED, msg.clone());
        conditions::set(
            &mut p.status,
            condition::SUCCEEDED,
            true,
            reason::SUCCEEDED,
            msg,
            now,
        );
        p.status.completion_time.get_or_insert(now.clone());
    }
}

/// Beyond Kubeflow (#999): a job that is not running yet because its Pods
/// cannot be scheduled says so in its `Created` condition's message (type
/// and reason stay Kubeflow's), instead of sitting in `Created` with no
/// clue; the message goes back to plain once nothing is unschedulable.
/// A ganged job whose gang the scheduler could not place says that instead,
/// with reason `GangUnschedulable` and one Warning ([`crate::tfjob::integrations::gang::unplaced`]).
fn explain_unscheduled(p: &mut Plan, t: &Tally, name: &str, unplaced: Option<&Unplaced>) {
    let started = is_true(&p.status, condition::RUNNING) || is_finished(&p.status);
    if let Some(unplaced) = unplaced.filter(|_| !started) {
        let line = unplaced.describe(gang::group_name(name));
        p.event(true, event::GANG_UNSCHEDULABLE, line.clone());
        if let Some(created) = p
            .status
            .conditions
            .iter_mut()
            .find(|c| c.type_ == condition::CREATED)
        {
            created.reason = Some(reason::GANG_UNSCHEDULABLE.to_owned());
            created.message = Some(format!("{} Its {line}", messages::created(name)));
        }
        return;
    }
    let unschedulable: Vec<&String> = t
        .abnormal
        .iter()
        .filter(|(reason, _)| reason == UNSCHEDULABLE && !started)
        .map(|(_, message)| message)
        .collect();
    let message = match unschedulable.first() {
        Some(first) => format!(
            "{} {} Pod(s) cannot be scheduled; first: {first}",
            messages::created(name),
            unschedulable.len()
        ),
        None => messages::created(name),
    };
    if let Some(created) = p
        .status
        .conditions
        .iter_mut()
        .find(|c| c.type_ == condition::CREATED)
    {
        created.message = Some(message);
        // Placed (or no longer ganged): Kubeflow's reason again.
        if created.reason.as_deref() == Some(reason::GANG_UNSCHEDULABLE) {
            created.reason = Some(reason::CREATED.to_owned());
        }
    }
}

/// A finished job: clean up as `cleanPodPolicy` says and honour the TTL.
/// `stop_unfinished` (deadline or backoff failure) stops running and pending
/// Pods whatever the policy, but keeps finished ones for their logs; it is
/// remembered, so a stop that failed is retried on every pass until the
/// Pods are gone, and `active` shows how many still run meanwhile.
///
/// `finished_before`: the job was already finished when this pass began
/// (its stored status says so: a finishing status is never deferred).
/// Only then are its Pods cleaned up and may the TTL delete it. A job that
/// finishes in this pass must first have that written, as Kubeflow does:
/// were its Pods deleted first and the status write refused (a conflict, a
/// policy, a crash, a lapsed lease), the next pass would see the Pods gone,
/// the job unfinished, and run the training again. So the finishing pass
/// writes the status, and its watch event brings the pass that cleans up
/// (with `ttlSecondsAfterFinished: 0` the job is deleted on that pass).
fn finish(
    p: &mut Plan,
    spec: &JobSpec,
    children: &Children<'_>,
    now: Timestamp,
    stop_unfinished: bool,
    finished_before: bool,
) {
    let policy = match (spec.clean_pod_policy, stop_unfinished) {
        (CleanPodPolicy::All, _) => CleanPodPolicy::All,
        (_, true) => CleanPodPolicy::Running,
        (policy, false) => policy,
    };
    let mut still_active: BTreeMap<ReplicaType, i32> = BTreeMap::new();
    for (slot, pods) in &children.pods {
        for pod in pods.iter().filter(|p| !terminating(p)) {
            let unfinished = matches!(phase(pod), "Running" | "Pending");
            let delete = match policy {
                CleanPodPolicy::All => true,
                CleanPodPolicy::Running => unfinished,
                CleanPodPolicy::None | CleanPodPolicy::Invalid => false,
            };
            if delete && finished_before {
                p.actions.push(delete_pod(pod));
                if let Some(svc) = children.services.get(slot) {
                    p.actions.push(Action::DeleteService { name: svc.clone() });
                }
            }
            if stop_unfinished && unfinished {
                *still_active.entry(slot.0).or_default() += 1;
            }
        }
    }
    if stop_unfinished && is_true(&p.status, condition::FAILED) {
        for (rtype, rs) in p.status.replica_statuses.iter_mut() {
            rs.active = ReplicaType::parse(rtype)
                .and_then(|t| still_active.get(&t).copied())
                .unwrap_or(0);
        }
    }
    if is_true(&p.status, condition::SUCCEEDED) {
        for rs in p.status.replica_statuses.values_mut() {
            rs.succeeded += rs.active;
            rs.active = 0;
        }
    }
    if let (Some(ttl), Some(done)) = (
        spec.ttl_seconds_after_finished,
        p.status.completion_time.as_ref(),
    ) {
        let expires = done
            .0
            .saturating_add(jiff::SignedDuration::from_secs(i64::from(ttl)))
            .unwrap_or(done.0);
        if now >= expires && finished_before {
            p.actions.push(Action::DeleteJob);
        } else {
            p.requeue_in(duration_between(now, expires));
        }
    }
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
