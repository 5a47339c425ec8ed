//! The PodGroup a TFJob's Pods join: gang scheduling with Kubernetes' own
//! Workload API (KEP-4671, `scheduling.k8s.io/v1beta1` from 1.37).
//!
//! A distributed TFJob whose Workers start while its Chief cannot be placed
//! holds its nodes and does nothing. With a gang, the scheduler's
//! `GangScheduling` plugin keeps every Pod of the group out of the
//! scheduling queue until `minCount` of them exist, then binds none of them
//! until `minCount` fit at once (they wait at its Permit stage) — all or
//! nothing. The operator's part is small and all here:
//!
//! - whether a job gets a gang ([`GangScheduling::wants`]): the API must be
//!   served, and `--gang-scheduling=auto` (the default) uses it for jobs that
//!   set `runPolicy.schedulingPolicy`, `on` for every job;
//! - the group ([`desired`]): named like the job, owned by it (garbage
//!   collected with it), `minCount` = `schedulingPolicy.minAvailable` or
//!   every replica, `priorityClassName` = `schedulingPolicy.priorityClass`;
//! - what to do about the group we see ([`next_step`]): create it before the
//!   first Pod, fix `minCount` after scaling, wait while an old group is still
//!   being deleted (a resumed job gets a fresh one), delete it on suspend;
//! - each Pod's reference to it ([`crate::tfjob::children::scheduling_group::PodInGroup`]: `spec.schedulingGroup`,
//!   and our [`ANNOTATION_POD_GROUP`] so the cache, which keeps no specs,
//!   can tell);
//! - a job whose Pods were created outside a gang it now asks for
//!   ([`outside_a_gang`]: `schedulingPolicy` added after creation): it runs
//!   on without one, with a Warning ([`outside_a_gang_warning`]);
//! - why the gang waits ([`unplaced`]): the scheduler's verdict on the
//!   group, for the job's status and a Warning.
//!
//! Kubeflow gets the same from Volcano or scheduler-plugins (their own
//! PodGroup CRDs and schedulers); see docs/kubeflow-compatibility.md.
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::api::defaults::JobSpec;
use crate::api::pod_group::{
    GangSchedulingPolicy, PodGroup, PodGroupSpec, REASON_UNSCHEDULABLE, SchedulingPolicy,
};
use crate::api::types::{SchedulingPolicy as JobSchedulingPolicy, TFJob};
use crate::tfjob::children::cached::CachedPod;
use crate::tfjob::children::scheduling_group::ANNOTATION_POD_GROUP;

/// `--gang-scheduling`: when jobs get a PodGroup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum GangMode {
    /// When the API is served and the job sets `runPolicy.schedulingPolicy`.
    #[default]
    Auto,
    /// Every job, when the API is served (a startup error when it is not).
    On,
    /// Never: `schedulingPolicy` is ignored with a Warning, as without the API.
    Off,
}

/// What the operator does about gangs: decided from `--gang-scheduling` and
/// the API server's first answer, and switched on if `auto` finds the API
/// later (`crate::tfjob::integrations::optional_apis`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GangScheduling {
    /// The server has no `scheduling.k8s.io/v1beta1` PodGroups (yet).
    #[default]
    Unavailable,
    /// `--gang-scheduling=off` (the server is not asked).
    Off,
    /// Served; jobs with `schedulingPolicy` get a gang.
    Auto,
    /// Served; every job gets a gang.
    On,
}

impl GangScheduling {
    /// The setting for this mode when PodGroups are (`served`) or are not
    /// served. `on` without the API is refused: the user asked for
    /// something this server cannot do.
    pub fn decide(mode: GangMode, served: bool) -> Result<Self, String> {
        Ok(match (mode, served) {
            // Whatever the server serves: `off` does not ask.
            (GangMode::Off, _) => Self::Off,
            (GangMode::Auto, true) => Self::Auto,
            (GangMode::On, true) => Self::On,
            (GangMode::Auto, false) => Self::Unavailable,
            (GangMode::On, false) => {
                return Err("--gang-scheduling=on, but the API server does not serve \
                     scheduling.k8s.io/v1beta1 PodGroups (Kubernetes 1.37+ with the \
                     GenericWorkload feature gate and --runtime-config=scheduling.k8s.io/v1beta1=true): \
                     enable them, or use --gang-scheduling=auto"
                    .to_owned());
            }
        })
    }

    /// Whether the operator keeps a PodGroup (and so an informer on them).
    pub fn enabled(self) -> bool {
        matches!(self, Self::Auto | Self::On)
    }

    /// Whether `job`'s Pods join a gang.
    pub fn wants(self, job: &TFJob) -> bool {
        match self {
            Self::On => true,
            Self::Auto => job.spec.run_policy.scheduling_policy.is_some(),
            Self::Off | Self::Unavailable => false,
        }
    }

    /// Why a job's `schedulingPolicy` is not honoured, for the Warning on
    /// it; `None` when it is.
    pub fn ignored_because(self) -> Option<&'static str> {
        match self {
            Self::Unavailable => Some(
                "the API server does not serve scheduling.k8s.io/v1beta1 PodGroups (gang scheduling \
                 needs Kubernetes 1.37+ with the GenericWorkload feature gate)",
            ),
            Self::Off => Some("the operator runs with --gang-scheduling=off"),
            Self::Auto | Self::On => None,
        }
    }
}

/// What startup found: the setting, and the `/readyz` detail line naming
/// what was discovered and chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Detected {
    pub setting: GangScheduling,
    pub detail: String,
}

/// Asks the API server which `scheduling.k8s.io` versions serve PodGroups,
/// until it answers (an error is no answer: it is logged and asked again
/// with backoff), and decides with `mode`. Only `v1beta1` is used (see
/// `crate::api::pod_group`); alpha-only servers are reported as such.
/// `--gang-scheduling=off` asks nothing. The `Err` is
/// `--gang-scheduling=on` on a server that answered without the API.
pub async fn detect(client: &kube::Client, mode: GangMode) -> Result<Detected, String> {
    detect_reporting(client, mode, |waiting| tracing::warn!("{waiting}")).await
}

/// [`detect`], telling `waiting` (the `/readyz` line) each time the server
/// gave no answer.
pub async fn detect_reporting(
    client: &kube::Client,
    mode: GangMode,
    mut waiting: impl FnMut(&str),
) -> Result<Detected, String> {
    if mode == GangMode::Off {
        return decide_from(mode, None);
    }
    let versions = crate::runtime::client::discovery::versions_serving_answered(
        client,
        crate::api::pod_group::GROUP,
        crate::api::pod_group::PLURAL,
        |u| waiting(&unanswered(mode, &u)),
    )
    .await;
    decide_from(mode, Some(&versions))
}

/// The flag's value as written.
pub fn mode_name(mode: GangMode) -> &'static str {
    match mode {
        GangMode::Auto => "auto",
        GangMode::On => "on",
        GangMode::Off => "off",
    }
}

/// Whether `versions` (an answer) include the one this operator speaks.
pub fn served(versions: &[String]) -> bool {
    versions.iter().any(|v| v == crate::api::pod_group::VERSION)
}

/// The `/readyz` line while the server gives no answer: the API, the error,
/// and that no job is reconciled meanwhile.
pub fn unanswered(mode: GangMode, u: &crate::runtime::client::discovery::Unanswered<'_>) -> String {
    format!(
        "gang-scheduling: {}, could not ask the API server for scheduling.k8s.io PodGroups \
         (attempt {}: {}); asking again in {} s; no TFJob is reconciled until it answers",
        mode_name(mode),
        u.attempt,
        u.error,
        u.retry_in.as_secs()
    )
}

/// What a discovery answer (`versions` serving PodGroups; `None`: not
/// asked) decides with `mode`.
pub fn decide_from(mode: GangMode, versions: Option<&[String]>) -> Result<Detected, String> {
    let found = versions.map_or_else(|| "not asked".to_owned(), describe_served);
    let served = versions.is_some_and(served);
    let setting = GangScheduling::decide(mode, served).map_err(|e| format!("{e} ({found})"))?;
    let what = match setting {
        GangScheduling::Auto => "jobs that set runPolicy.schedulingPolicy get a PodGroup",
        GangScheduling::On => "every job gets a PodGroup",
        GangScheduling::Off => "no job gets a PodGroup",
        GangScheduling::Unavailable => "no job gets a PodGroup; schedulingPolicy gets a Warning",
    };
    Ok(Detected {
        setting,
        detail: format!("gang-scheduling: {}, {found}: {what}", mode_name(mode)),
    })
}

/// "scheduling.k8s.io/v1beta1 PodGroups served", or what there is instead.
pub fn describe_served(versions: &[String]) -> String {
    if versions.iter().any(|v| v == crate::api::pod_group::VERSION) {
        return format!(
            "scheduling.k8s.io PodGroups served in {} (using {})",
            versions.join(", "),
            crate::api::pod_group::VERSION
        );
    }
    if versions.is_empty() {
        return "no scheduling.k8s.io PodGroups served".to_owned();
    }
    format!(
        "scheduling.k8s.io PodGroups served only in {} (alpha, not used: this operator speaks {})",
        versions.join(", "),
        crate::api::pod_group::VERSION
    )
}

/// The Warning a job's `runPolicy.schedulingPolicy` gets when first seen:
/// all of it ignored without gangs (and why), or, with a gang, the fields
/// Kubernetes' PodGroup has no place for; `None` when all it asks is done.
pub fn policy_warning(gang: GangScheduling, policy: &JobSchedulingPolicy) -> Option<String> {
    if let Some(why) = gang.ignored_because() {
        return Some(format!(
            "spec.runPolicy.schedulingPolicy is not honoured: {why} (minAvailable, queue, \
             minResources, scheduleTimeoutSeconds and priorityClass are ignored). Queue the job \
             with Kueue instead (label kueue.x-k8s.io/queue-name), and set priorityClassName in \
             the replica templates."
        ));
    }
    let unplaceable: Vec<&str> = [
        ("queue", policy.queue.is_some()),
        ("minResources", policy.min_resources.is_some()),
        (
            "scheduleTimeoutSeconds",
            policy.schedule_timeout_seconds.is_some(),
        ),
    ]
    .into_iter()
    .filter_map(|(field, set)| set.then_some(field))
    .collect();
    (!unplaceable.is_empty()).then(|| {
        format!(
            "spec.runPolicy.schedulingPolicy: minAvailable and priorityClass are honoured by the \
             job's PodGroup; {} ha{} no place in Kubernetes' PodGroup API and {} ignored (queue \
             with Kueue: label kueue.x-k8s.io/queue-name).",
            unplaceable.join(", "),
            if unplaceable.len() == 1 { "s" } else { "ve" },
            if unplaceable.len() == 1 { "is" } else { "are" },
        )
    })
}

/// Whether `group` is the job's own (controller reference with its UID) and
/// not being deleted: the one to delete on suspend.
pub fn is_ours_and_live(group: &PodGroup, job_uid: &str) -> bool {
    group.metadata.deletion_timestamp.is_none() && controlled_by(group, job_uid)
}

fn controlled_by(group: &PodGroup, job_uid: &str) -> bool {
    group
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == job_uid)
}

/// The job's PodGroup is named like the job: one per job, found again after
/// an operator restart, never a second one.
pub fn group_name(job_name: &str) -> &str {
    job_name
}

/// The group `job` should have: `minCount` is `schedulingPolicy.minAvailable`
/// when set (at least 1, at most every replica: more could never be placed),
/// else every replica; `priorityClass` becomes the group's priority class.
/// `scheduleTimeoutSeconds`, `queue` and `minResources` have no place in the
/// API (the scheduler waits at most 5 minutes at Permit, then retries).
pub fn desired(job: &TFJob, spec: &JobSpec<'_>, name: &str, owner: &OwnerReference) -> PodGroup {
    let total = spec.total_replicas().max(1);
    let policy = job.spec.run_policy.scheduling_policy.as_ref();
    let min_count = policy
        .and_then(|p| p.min_available)
        .filter(|&n| n > 0)
        .map_or(total, |n| n.min(total));
    PodGroup {
        metadata: ObjectMeta {
            name: Some(group_name(name).to_owned()),
            namespace: job.metadata.namespace.clone(),
            owner_references: Some(vec![owner.clone()]),
            ..ObjectMeta::default()
        },
        spec: PodGroupSpec {
            scheduling_policy: SchedulingPolicy {
                gang: Some(GangSchedulingPolicy { min_count }),
            },
            priority_class_name: policy
                .and_then(|p| p.priority_class.clone())
                .filter(|c| !c.is_empty()),
        },
        status: None,
    }
}

/// What to do about the job's group before creating Pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// It is there as wanted: create Pods in it.
    Ready,
    /// Create it, then the Pods (in that order).
    Create,
    /// Set its `minCount` (the job was scaled); Pods may be created.
    SetMinCount(i32),
    /// Create no Pod yet: the group of that name is being deleted (an
    /// earlier run of this job, or a deleted job of the same name) or
    /// belongs to something else. The message says which.
    Wait(String),
}

/// Compares the group in the cache with the one wanted. `job_uid` tells
/// ours from a namesake's.
pub fn next_step(seen: Option<&PodGroup>, wanted: &PodGroup, job_uid: &str) -> Step {
    let Some(seen) = seen else {
        return Step::Create;
    };
    let name = seen.metadata.name.as_deref().unwrap_or_default();
    if seen.metadata.deletion_timestamp.is_some() {
        return Step::Wait(format!(
            "PodGroup {name} is still being deleted (its Pods are going): the job's Pods join a fresh one"
        ));
    }
    if !controlled_by(seen, job_uid) {
        return Step::Wait(format!(
            "PodGroup {name} exists and is not this job's: delete it, or rename the job"
        ));
    }
    match (seen.min_count(), wanted.min_count()) {
        (Some(have), Some(want)) if have != want => Step::SetMinCount(want),
        _ => Step::Ready,
    }
}

/// Whether a job that asks for a gang has live Pods that were created
/// without one: `schedulingPolicy` added after creation (or the operator
/// restarted with `--gang-scheduling=on`). Some Pod is not being deleted,
/// none of them carries [`ANNOTATION_POD_GROUP`], and there is no live group
/// of the job's (a group is created before its Pods, so Pods without it
/// predate it; the annotation covers the moment the cache shows our new
/// Pods but not yet the group created just before them).
///
/// Such a job gets no group: its Pods cannot join one (a Pod's
/// `spec.schedulingGroup` is immutable), and a group that only its
/// replacement Pods joined would hold them back forever — the scheduler's
/// GangScheduling plugin queues a group's Pods only once `minCount` of them
/// exist. Kubeflow never meets this case: with Volcano or scheduler-plugins
/// on, every job's Pods carry a group from the start.
pub fn outside_a_gang(pods: &[Arc<CachedPod>], group: Option<&PodGroup>, job_uid: &str) -> bool {
    let mut live = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .peekable();
    if live.peek().is_none() || group.is_some_and(|g| is_ours_and_live(g, job_uid)) {
        return false;
    }
    !live.any(|p| {
        p.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(ANNOTATION_POD_GROUP))
    })
}

/// The Warning for a job [`outside_a_gang`]: the field, what happens, and
/// how to get a gang.
pub fn outside_a_gang_warning(pods: usize) -> String {
    format!(
        "spec.runPolicy.schedulingPolicy asks for a gang, but the job's {pods} Pod(s) were created \
         without one (the policy was added after they were, or the operator now runs with \
         --gang-scheduling=on) and cannot join a PodGroup: a Pod's spec.schedulingGroup is \
         immutable. The job runs on without a gang, and Pods re-created for it join none either \
         (a group only they joined would never reach its minCount). For a gang, suspend and \
         resume the job (spec.runPolicy.suspend: true, then false): its Pods are re-created in a \
         fresh PodGroup."
    )
}

/// The scheduler could not place the gang: what it said, and (when its
/// message says so) how many Pods fit of how many are needed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unplaced {
    pub fit: Option<i32>,
    pub needed: i32,
    pub scheduler_message: String,
}

impl Unplaced {
    /// One line for the job's condition and its Warning.
    pub fn describe(&self, group: &str) -> String {
        let fit = match self.fit {
            Some(fit) => format!("{fit} of {} Pods fit", self.needed),
            None => format!("fewer than {} Pods fit", self.needed),
        };
        format!(
            "gang {group} cannot be placed: {fit}, and the scheduler binds none until all {} do ({})",
            self.needed, self.scheduler_message
        )
    }
}

/// Whether the scheduler's last word on the group is "does not fit": its
/// `PodGroupInitiallyScheduled` condition False with reason `Unschedulable`.
/// Once True (the gang was placed) it stays True, so a later replica restart
/// is not reported as an unplaced gang.
pub fn unplaced(group: &PodGroup) -> Option<Unplaced> {
    let c = group.initially_scheduled()?;
    if c.status != "False" || c.reason != REASON_UNSCHEDULABLE {
        return None;
    }
    let needed = group.min_count()?;
    Some(Unplaced {
        fit: scheduled_count(&c.message, needed),
        needed,
        scheduler_message: c.message.clone(),
    })
}

/// "minCount (5) cannot be satisfied: 3 scheduled, 0 remaining" (the
/// GangScheduling plugin's PlacementFeasible verdict, kube-scheduler 1.37)
/// → 3. Any other wording: unknown.
fn scheduled_count(message: &str, needed: i32) -> Option<i32> {
    let (_, rest) = message.split_once(&format!("minCount ({needed}) cannot be satisfied: "))?;
    let (n, _) = rest.split_once(" scheduled")?;
    n.trim().parse().ok()
}

pub mod observe;
pub mod plan;
#[cfg(test)]
mod tests;
pub mod write;
