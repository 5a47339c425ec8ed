//! What Kueue's Workload says about a queued job, for the plan: hold it,
//! run it where the admission put it, or stop it — and which Workload
//! writes follow. Pure: the plan calls it with what the caches show.
//!
//! The steps are those of Kueue's generic job reconciler
//! (`pkg/controller/jobframework/reconciler.go`, `ReconcileGenericJob`), in
//! its order, for a job whose integration is outside Kueue:
//!
//! | the job's Workload | the job | the Workload |
//! |---|---|---|
//! | none | held | created |
//! | being deleted | held | finalizer removed (then created again) |
//! | not admitted, podSets changed | held | deleted (then created again) |
//! | not admitted, queue label changed | held | `spec.queueName` updated |
//! | not admitted | held (`Suspended`, reason `TFJobQueued`) | - |
//! | admitted | runs; Pods get the flavors' node labels and tolerations | `PodsReady`, `reclaimablePods` |
//! | admitted, podSets changed (scaled, edited) | stopped, queued again (`TFJobQueued`) | deleted once no Pod is left (then created again) |
//! | admitted, a flavor not in the cache | what runs runs on; no Pod created | - |
//! | evicted, quota still reserved | stopped (`Suspended`, reason `TFJobEvicted`) | quota given back once no Pod is left |
//! | job suspended by the user | stopped (`Suspended`, reason `TFJobSuspended`) | `spec.active: false` (Kueue evicts it), true on resume |
//! | job finished (its status stored) | - | `Finished`, then finalizer removed |
//!
//! **Never fighting Kueue's built-in integration**: a Workload controlled
//! by the job that this operator did not create (no
//! [`super::workload::LABEL_CREATED_BY`])
//! is the built-in's, and then the job is left to it ([`Gate::Free`]): it
//! suspends, places and resumes the job through the job's own fields, as
//! without this module. Both name the Workload alike
//! ([`super::workload::workload_name`]), so only one of them can create it.
use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference};

use crate::api::constants::ReplicaType;
use crate::api::defaults::JobSpec;
use crate::api::types::{TFJob, TFJobStatus};
use crate::tfjob::children::placement::PodPlacement;

use super::api::{
    FINALIZER_RESOURCE_IN_USE, PriorityClassRef, ReclaimablePod, ResourceFlavor, Workload,
    condition,
};
use super::status;
use super::workload;

/// How soon a job admitted with a ResourceFlavor the cache does not have
/// yet looks again (flavor events do not wake jobs).
const FLAVOR_RECHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// On a Workload this operator deactivated because its job was suspended
/// by the user ([`WorkloadWrite::SetActive`]).
pub const ANNOTATION_DEACTIVATED: &str = "tfjob-operator.kubeflow.org/deactivated-while-suspended";

/// How soon a job waiting for its prebuilt Workload looks again: the
/// Workload has no owner until the job adopts it, so its creation wakes no job.
const PREBUILT_RECHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// What the job may do.
#[derive(Clone, Debug, PartialEq)]
pub enum Gate {
    /// Not queued by this operator: no queue label, or Kueue's built-in
    /// integration has the job. The plan goes on as without Kueue.
    Free,
    /// Queued and not admitted: no Pods. The message says why.
    Hold(String),
    /// Admitted: Pods are created with these placements; `admitted_by`
    /// names the ClusterQueue (for the `Started` event).
    Run {
        placements: BTreeMap<ReplicaType, PodPlacement>,
        admitted_by: String,
    },
    /// Evicted: stop every Pod (Kueue's message).
    Stop(String),
    /// Admitted and running, but a ResourceFlavor of its admission is not
    /// in the cache (deleted, edited, or not seen yet): what runs keeps
    /// running (Kueue reads flavors when it starts a job, never to stop
    /// one), and no Pod is created until the flavor is known.
    Keep(String),
    /// Admitted, but the job no longer matches what was admitted (scaled,
    /// a template edited): stop every Pod and queue it again with a new
    /// Workload, as Kueue's reconciler does for a job without a matching
    /// Workload (`ensureOneWorkload`, "No matching Workload").
    Requeue(String),
}

/// A write to the job's Workload.
#[derive(Clone, Debug, PartialEq)]
pub enum WorkloadWrite {
    /// Create it; the priority's value is looked up first.
    Create {
        workload: Box<Workload>,
        priority: Option<PriorityClassRef>,
    },
    /// Delete it (its podSets no longer match the job).
    Delete { name: String, uid: Option<String> },
    /// Remove Kueue's finalizer, leaving the others.
    ReleaseFinalizer {
        name: String,
        resource_version: Option<String>,
        finalizers: Vec<String>,
    },
    /// Take a prebuilt Workload as the job's own: controller reference and
    /// `kueue.x-k8s.io/job-uid`, guarded by its resourceVersion.
    Adopt {
        name: String,
        resource_version: Option<String>,
        owner: OwnerReference,
    },
    /// The job moved to another LocalQueue before admission.
    SetQueueName { name: String, queue: String },
    /// `spec.active`: false while the user suspends the job (Kueue then
    /// evicts it and its quota goes back; a pending one is not admitted),
    /// true again when the user resumes it. [`ANNOTATION_DEACTIVATED`] marks
    /// a Workload we deactivated, so one deactivated by someone else stays so.
    SetActive { name: String, active: bool },
    /// A server-side apply of its status ([`super::status`]) as
    /// `manager`; `finished` when it declares the Workload finished (for
    /// the `FinishedWorkload` event).
    ApplyStatus {
        name: String,
        manager: &'static str,
        body: serde_json::Value,
        finished: bool,
    },
}

/// The gate's answer for one pass.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub gate: Gate,
    pub writes: Vec<WorkloadWrite>,
    /// Look again this soon: what is waited for wakes no one (a
    /// ResourceFlavor not in the cache yet).
    pub recheck: Option<std::time::Duration>,
}

impl Decision {
    fn free() -> Self {
        Self {
            gate: Gate::Free,
            writes: Vec::new(),
            recheck: None,
        }
    }
}

/// What the gate reads: the Workloads controlled by the job (any creator)
/// and the ResourceFlavors by name.
pub struct Seen<'a> {
    pub workloads: &'a [Arc<Workload>],
    pub flavors: &'a BTreeMap<String, Arc<ResourceFlavor>>,
}

/// The job's own Workload among `seen`, and whether the built-in has one.
/// A prebuilt Workload (MultiKueue's, named by the job's label) is the
/// job's own once the job controls it.
fn find<'a>(seen: &Seen<'a>, job: &TFJob, uid: &str) -> (Option<&'a Workload>, bool) {
    let prebuilt = workload::prebuilt_name(job);
    let own = |w: &Workload| {
        workload::is_ours(w) || (prebuilt.is_some() && w.metadata.name.as_deref() == prebuilt)
    };
    let mine: Vec<&Workload> = seen
        .workloads
        .iter()
        .map(Arc::as_ref)
        .filter(|w| workload::controlled_by(w, uid))
        .collect();
    let builtin = mine.iter().any(|w| !own(w));
    (mine.into_iter().find(|w| own(w)), builtin)
}

/// A job on a MultiKueue worker uses the Workload MultiKueue made for it
/// (Kueue's `EnsurePrebuiltWorkloadOwnership`): wait for it, then adopt it
/// (controller reference, `kueue.x-k8s.io/job-uid`). `None` once adopted:
/// the usual steps follow.
fn prebuilt(job: &TFJob, owner: &OwnerReference, seen: &Seen<'_>, name: &str) -> Option<Decision> {
    let prebuilt = workload::prebuilt_name(job)?;
    let hold = |message: String, writes: Vec<WorkloadWrite>| Decision {
        gate: Gate::Hold(message),
        writes,
        recheck: None,
    };
    let found = seen
        .workloads
        .iter()
        .find(|w| w.metadata.name.as_deref() == Some(prebuilt));
    let Some(w) = found else {
        // Nothing wakes the job when the Workload comes: it has no owner
        // yet, so its event maps to no job. Look again.
        return Some(Decision {
            recheck: Some(PREBUILT_RECHECK),
            ..hold(
                format!(
                    "TFJob {name} waits for its prebuilt Workload {prebuilt} (MultiKueue creates it)."
                ),
                Vec::new(),
            )
        });
    };
    if workload::controlled_by(w, &owner.uid) {
        return None;
    }
    Some(hold(
        format!("TFJob {name} adopts its prebuilt Workload {prebuilt}."),
        vec![WorkloadWrite::Adopt {
            name: prebuilt.to_owned(),
            resource_version: w.metadata.resource_version.clone(),
            owner: owner.clone(),
        }],
    ))
}

/// Decides, before the job runs, whether it may. `job` is neither finished
/// nor suspended by its own spec (the plan handles those first);
/// `pods_left` says whether any Pod of the job still exists (terminating
/// ones included).
pub fn gate(
    job: &TFJob,
    spec: &JobSpec<'_>,
    owner: &OwnerReference,
    seen: &Seen<'_>,
    pods_left: bool,
) -> Decision {
    let name = job.metadata.name.as_deref().unwrap_or_default();
    let is_prebuilt = workload::prebuilt_name(job).is_some();
    // MultiKueue copies the job with its labels; without the queue label a
    // prebuilt Workload still names the queue it was admitted through.
    let fallback = is_prebuilt.then_some("(the prebuilt Workload's)");
    let Some(queue) = workload::queue_name(job).or(fallback) else {
        return Decision::free();
    };
    if let Some(decision) = prebuilt(job, owner, seen, name) {
        return decision;
    }
    let (ours, builtin) = find(seen, job, &owner.uid);
    if builtin {
        return Decision::free();
    }
    let hold = |message: String, writes: Vec<WorkloadWrite>| Decision {
        gate: Gate::Hold(message),
        writes,
        recheck: None,
    };
    let Some(w) = ours else {
        let desired = workload::desired(job, spec, owner, queue);
        let wl_name = desired.metadata.name.clone().unwrap_or_default();
        return hold(
            format!(
                "TFJob {name} is queued in LocalQueue {queue}: creating its Workload {wl_name}."
            ),
            vec![WorkloadWrite::Create {
                priority: desired.spec.priority_class_ref.clone(),
                workload: Box::new(desired),
            }],
        );
    };
    let wl_name = w.metadata.name.clone().unwrap_or_default();
    if w.metadata.deletion_timestamp.is_some() {
        let writes = release_finalizer(w).into_iter().collect();
        return hold(
            format!(
                "TFJob {name} is queued in LocalQueue {queue}: its old Workload {wl_name} is being deleted."
            ),
            writes,
        );
    }
    if w.is_finished() {
        let why = w
            .condition(condition::FINISHED)
            .map(|c| c.message.clone())
            .unwrap_or_default();
        return hold(
            format!("TFJob {name} will not run: its Workload {wl_name} is finished ({why})."),
            Vec::new(),
        );
    }
    let admitted = w.is_admitted();
    if let Some(evicted) = w.evicted()
        && w.has_quota_reservation()
    {
        return Decision {
            gate: Gate::Stop(format!(
                "TFJob {name} is stopped: its Workload {wl_name} was evicted ({}: {}).",
                evicted.reason, evicted.message
            )),
            writes: Vec::new(),
            recheck: None,
        };
    }
    // A prebuilt Workload is MultiKueue's copy of the manager's: its
    // podSets and queue are not ours to compare.
    let hash = workload::pod_sets_hash(&workload::pod_sets(spec));
    if w.has_quota_reservation() && !is_prebuilt && !workload::matches(w, &hash) {
        // Scaled or edited after admission: the quota reserved is for the
        // old shape. Its Pods stop first; the Workload (and its quota) goes
        // once none is left, and the job queues again with a new one.
        let writes = if pods_left {
            Vec::new()
        } else {
            vec![WorkloadWrite::Delete {
                name: wl_name.clone(),
                uid: w.metadata.uid.clone(),
            }]
        };
        return Decision {
            gate: Gate::Requeue(format!(
                "TFJob {name} is stopped: its replicas changed after its Workload {wl_name} was \
                 admitted, so it queues again in LocalQueue {queue} with a new Workload."
            )),
            writes,
            recheck: None,
        };
    }
    if !w.has_quota_reservation() && !is_prebuilt {
        if !workload::matches(w, &hash) {
            return hold(
                format!(
                    "TFJob {name} is queued in LocalQueue {queue}: its replicas changed, so its Workload {wl_name} is replaced."
                ),
                vec![WorkloadWrite::Delete {
                    name: wl_name,
                    uid: w.metadata.uid.clone(),
                }],
            );
        }
        if w.spec.queue_name.as_deref() != Some(queue) {
            return hold(
                format!("TFJob {name} moved to LocalQueue {queue}."),
                vec![WorkloadWrite::SetQueueName {
                    name: wl_name,
                    queue: queue.to_owned(),
                }],
            );
        }
    }
    if !admitted {
        // Deactivated by someone else (an admin, `kubectl patch`): Kueue
        // admits it only once it is active again, so "waits for admission"
        // would send the reader to the queue for nothing.
        let deactivated_by_another = w.spec.active == Some(false) && !deactivated_by_us(w);
        let message = if deactivated_by_another {
            format!(
                "TFJob {name} is held: its Workload {wl_name} is deactivated (spec.active: false), so Kueue does not admit it; set spec.active to true on it to queue again in LocalQueue {queue}."
            )
        } else {
            format!(
                "TFJob {name} is queued: its Workload {wl_name} waits for admission in LocalQueue {queue}."
            )
        };
        return hold(message, Vec::new());
    }
    match placements(w, seen.flavors) {
        Ok(placements) => Decision {
            gate: Gate::Run {
                placements,
                admitted_by: w
                    .status
                    .as_ref()
                    .and_then(|s| s.admission.as_ref())
                    .map(|a| a.cluster_queue.clone())
                    .unwrap_or_default(),
            },
            writes: Vec::new(),
            recheck: None,
        },
        Err(flavor) if pods_left => Decision {
            gate: Gate::Keep(format!(
                "TFJob {name} runs on, but creates no Pod until its ResourceFlavor {flavor} is known."
            )),
            writes: Vec::new(),
            recheck: Some(FLAVOR_RECHECK),
        },
        Err(flavor) => Decision {
            recheck: Some(FLAVOR_RECHECK),
            ..hold(
                format!(
                    "TFJob {name} is admitted, but its ResourceFlavor {flavor} is not known yet."
                ),
                Vec::new(),
            )
        },
    }
}

/// Per replica type, what its Pods get: the node labels and tolerations of
/// every flavor its podSet was assigned, then the admission checks'
/// podSetUpdates. `Err(flavor)` names a flavor not in the cache.
pub fn placements(
    w: &Workload,
    flavors: &BTreeMap<String, Arc<ResourceFlavor>>,
) -> Result<BTreeMap<ReplicaType, PodPlacement>, String> {
    let mut out = BTreeMap::new();
    let Some(status) = w.status.as_ref() else {
        return Ok(out);
    };
    for assignment in status.admission.iter().flat_map(|a| &a.pod_set_assignments) {
        let Some(rtype) = ReplicaType::parse(&assignment.name) else {
            continue;
        };
        let placement: &mut PodPlacement = out.entry(rtype).or_default();
        let names: std::collections::BTreeSet<&String> = assignment.flavors.values().collect();
        for flavor in names {
            let found = flavors.get(flavor).ok_or_else(|| flavor.clone())?;
            placement
                .node_selector
                .extend(found.spec.node_labels.clone());
            for t in &found.spec.tolerations {
                if !placement.tolerations.contains(t) {
                    placement.tolerations.push(t.clone());
                }
            }
        }
    }
    for update in status
        .admission_checks
        .iter()
        .flat_map(|c| &c.pod_set_updates)
    {
        let Some(rtype) = ReplicaType::parse(&update.name) else {
            continue;
        };
        let placement = out.entry(rtype).or_default();
        placement.node_selector.extend(update.node_selector.clone());
        placement.labels.extend(update.labels.clone());
        placement.annotations.extend(update.annotations.clone());
        for t in &update.tolerations {
            if !placement.tolerations.contains(t) {
                placement.tolerations.push(t.clone());
            }
        }
    }
    Ok(out)
}

/// The Workload writes that follow the pass's outcome: `Finished` and the
/// finalizer once the job finished; the quota given back once an evicted
/// job has no Pod left; `PodsReady` and `reclaimablePods` while it runs.
/// `status` is the job's status as the plan leaves it; `pods_left` whether
/// any Pod of the job still exists (terminating ones included).
pub fn after(
    job: &TFJob,
    status: &TFJobStatus,
    pods_left: bool,
    seen: &Seen<'_>,
    now: Timestamp,
) -> Vec<WorkloadWrite> {
    let Some(uid) = job.metadata.uid.as_deref() else {
        return Vec::new();
    };
    let (Some(w), false) = find(seen, job, uid) else {
        return Vec::new();
    };
    if w.metadata.deletion_timestamp.is_some() {
        // The gate releases it when it runs; while the user suspends the
        // job it does not, and Kueue counts the quota of a Workload until
        // its finalizer goes.
        let suspended = job.spec.run_policy.suspend == Some(true);
        return release_finalizer(w)
            .filter(|_| suspended)
            .into_iter()
            .collect();
    }
    let name = w.metadata.name.clone().unwrap_or_default();
    let outcome = finished(status);
    if let Some((succeeded, message)) = outcome {
        // The Workload follows the job's own finish once that is stored:
        // were it `Finished` first and the job's status write refused, the
        // job would be held forever with an unfinished status.
        if job.status.as_ref().and_then(finished).is_none() {
            return Vec::new();
        }
        if !w.is_finished() {
            return vec![WorkloadWrite::ApplyStatus {
                name,
                manager: status::ADMISSION_MANAGER,
                body: status::finish(w, succeeded, &message, now),
                finished: true,
            }];
        }
        return release_finalizer(w).into_iter().collect();
    }
    if w.is_finished() {
        return release_finalizer(w).into_iter().collect();
    }
    if let Some(write) = follow_the_users_suspend(job, w) {
        return vec![write];
    }
    if w.evicted().is_some() && w.has_quota_reservation() {
        if pods_left {
            return Vec::new();
        }
        return status::give_back_quota(w, now)
            .map(|body| WorkloadWrite::ApplyStatus {
                name,
                manager: status::ADMISSION_MANAGER,
                body,
                finished: false,
            })
            .into_iter()
            .collect();
    }
    // Not admitted, or stopped by the plan (suspended, held or requeued):
    // no `PodsReady` to report.
    if !w.is_admitted() || is_stopped(status) {
        return Vec::new();
    }
    let ready = pods_ready(w, all_pods_ready(w, status), now);
    let reclaimable = reclaimable_pods(w, status);
    status::ours(w, Some(ready), &reclaimable)
        .map(|body| WorkloadWrite::ApplyStatus {
            name,
            manager: status::OUR_MANAGER,
            body,
            finished: false,
        })
        .into_iter()
        .collect()
}

/// A job the user suspends must not hold its quota, nor be admitted while
/// suspended: its Workload is deactivated (`spec.active: false`, Kueue's
/// own way to stop a Workload: it evicts it, and the quota goes back once
/// the Pods are gone, as after any eviction) and activated again on resume.
fn follow_the_users_suspend(job: &TFJob, w: &Workload) -> Option<WorkloadWrite> {
    let suspended = job.spec.run_policy.suspend == Some(true);
    let active = w.spec.active != Some(false);
    let ours = deactivated_by_us(w);
    let name = w.metadata.name.clone().unwrap_or_default();
    match (suspended, active) {
        (true, true) => Some(WorkloadWrite::SetActive {
            name,
            active: false,
        }),
        (false, false) if ours => Some(WorkloadWrite::SetActive { name, active: true }),
        _ => None,
    }
}

/// Whether we deactivated `w` (for the user's suspend), not someone else.
fn deactivated_by_us(w: &Workload) -> bool {
    w.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ANNOTATION_DEACTIVATED))
}

fn is_stopped(status: &TFJobStatus) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == crate::api::constants::condition::SUSPENDED && c.status == "True")
}

/// `Some((succeeded, message))` once the job has Succeeded or Failed.
fn finished(status: &TFJobStatus) -> Option<(bool, String)> {
    use crate::api::constants::condition::{FAILED, SUCCEEDED};
    status
        .conditions
        .iter()
        .find(|c| (c.type_ == SUCCEEDED || c.type_ == FAILED) && c.status == "True")
        .map(|c| (c.type_ == SUCCEEDED, c.message.clone().unwrap_or_default()))
}

/// Every Pod the Workload counts runs or has succeeded (Kueue's
/// `PodsReady` for the job: "at least `podSets[*].count` Pods are ready or
/// have succeeded").
fn all_pods_ready(w: &Workload, status: &TFJobStatus) -> bool {
    w.spec.pod_sets.iter().all(|ps| {
        let Some(rtype) = ReplicaType::parse(&ps.name) else {
            return true;
        };
        status
            .replica_statuses
            .get(rtype.as_str())
            .is_some_and(|rs| rs.active + rs.succeeded >= ps.count)
    })
}

/// Kueue's `generatePodsReadyCondition` for an admitted Workload.
pub fn pods_ready(w: &Workload, ready: bool, now: Timestamp) -> Condition {
    let current = w.condition(condition::PODS_READY);
    let reason_is = |r: &str| current.is_some_and(|c| c.reason == r);
    let (status, reason, message) = if ready {
        let reason = if reason_is(condition::WAIT_FOR_RECOVERY) || reason_is(condition::RECOVERED) {
            condition::RECOVERED
        } else {
            condition::STARTED
        };
        (
            true,
            reason,
            "All pods reached readiness and the workload is running",
        )
    } else if current.is_some_and(|c| c.status == "True") || reason_is(condition::WAIT_FOR_RECOVERY)
    {
        (
            false,
            condition::WAIT_FOR_RECOVERY,
            "At least one pod has failed, waiting for recovery",
        )
    } else {
        (
            false,
            condition::WAIT_FOR_START,
            "Not all pods are ready or succeeded",
        )
    };
    status::condition(w, condition::PODS_READY, status, reason, message, now)
}

/// Replica types with Pods that succeeded while the job goes on: their
/// quota is not needed again (a succeeded replica is never re-run).
fn reclaimable_pods(w: &Workload, status: &TFJobStatus) -> Vec<ReclaimablePod> {
    w.spec
        .pod_sets
        .iter()
        .filter_map(|ps| {
            let rtype = ReplicaType::parse(&ps.name)?;
            let succeeded = status.replica_statuses.get(rtype.as_str())?.succeeded;
            (succeeded > 0).then(|| ReclaimablePod {
                name: ps.name.clone(),
                count: succeeded.min(ps.count),
            })
        })
        .collect()
}

fn release_finalizer(w: &Workload) -> Option<WorkloadWrite> {
    w.has_finalizer(FINALIZER_RESOURCE_IN_USE)
        .then(|| WorkloadWrite::ReleaseFinalizer {
            name: w.metadata.name.clone().unwrap_or_default(),
            resource_version: w.metadata.resource_version.clone(),
            finalizers: w
                .metadata
                .finalizers
                .iter()
                .flatten()
                .filter(|f| *f != FINALIZER_RESOURCE_IN_USE)
                .cloned()
                .collect(),
        })
}

/// The finalizer writes for Workloads whose job is gone or being deleted
/// (Kueue's `dropFinalizers`): ours only; the built-in's are its own.
pub fn release_all(workloads: &[Arc<Workload>]) -> Vec<WorkloadWrite> {
    workloads
        .iter()
        .filter(|w| workload::is_ours(w))
        .filter_map(|w| release_finalizer(w))
        .collect()
}
