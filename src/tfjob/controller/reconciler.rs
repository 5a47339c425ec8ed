//! One reconcile of one TFJob: **observe** (the job and its children from the
//! informer caches) → **plan** (pure, [`crate::tfjob::plan`]) → **apply** (API writes,
//! raising expectations first) → **status** (written only when it changed,
//! coalesced over [`crate::tfjob::status::batch::STATUS_BATCH_PERIOD`] unless someone
//! waits for the change).
//!
//! This is sample-controller's `syncHandler` and Kubeflow's `ReconcileJobs`.
//! Two rules it never breaks:
//! - never act on children while expectations are unmet: the cache may not
//!   show our own recent creates yet, and acting would duplicate Pods;
//! - never mutate an object from the cache: objects are `Arc`s shared with
//!   every other reader; the status write sends a modified clone.
//!
//! This file is the order the phases run in ([`TfJobReconciler::sync`]) and
//! the errors a pass can end with; each phase is beside it in `reconcile/`:
//! `observe.rs`, `apply.rs`, `status.rs` (the plan is [`crate::tfjob::plan`]).
use std::time::Duration;

use kube::{Client, Resource};
use tracing::Instrument;

use crate::api::types::TFJob;
use crate::runtime::cache::key::ObjectKey;
use crate::runtime::cache::store::Indexer;
use crate::runtime::controller::expectations::{EXPECTATIONS_TTL, Expectations};
use crate::runtime::events::EventRecorder;

use crate::tfjob::children::cached::{CachedPod, CachedService};
use crate::tfjob::integrations::kueue::gate::Seen;
use crate::tfjob::integrations::managed_by::{ManagerMemory, REASON_MANAGED_BY_CHANGE_IGNORED, Verdict};
use crate::tfjob::status::metrics::JobMetrics;
use crate::tfjob::integrations::optional_apis::OptionalApis;
use crate::tfjob::plan::{Action, Observed, Plan, PlanConfig, plan};
use crate::tfjob::status::read_your_writes::WrittenStatus;
use crate::tfjob::status::batch::DeferredStatus;

use crate::tfjob::observe::Observation;

/// How many creates or deletes one reconcile issues at once. A 500-worker
/// job would take seconds one write at a time; the API server takes these
/// in parallel easily.
pub const DEFAULT_WRITE_CONCURRENCY: usize = 16;

/// After a status-write conflict, look again this soon even if no event comes.
const CONFLICT_RETRY: Duration = Duration::from_secs(1);

/// The index (on the Pod and Service informers) of children by job name:
/// how orphans that match a job are found without a scan.
pub const JOB_NAME_INDEX: &str = "job-name";

/// The index (on the Workload informer) of Workloads by their controlling
/// TFJob's `namespace/name`.
pub const WORKLOAD_OWNER_INDEX: &str = "tfjob-owner";

/// A reconcile that did not complete; the controller retries it with backoff.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("failed to {verb} {kind} {name}")]
    Write {
        verb: &'static str,
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("failed to write the status of {key}")]
    Status {
        key: ObjectKey,
        #[source]
        source: kube::Error,
    },
    #[error("failed to write the bookkeeping annotation of {key}")]
    Bookkeeping {
        key: ObjectKey,
        #[source]
        source: kube::Error,
    },
}

/// The least a throttled reconcile waits, whatever the server's Retry-After
/// says (client-go's `checkWait` waits at least a second, too).
const MIN_THROTTLED_WAIT: Duration = Duration::from_secs(1);

impl SyncError {
    /// How long to wait if the API server throttled this write (429 Too Many
    /// Requests): its Retry-After, at least [`MIN_THROTTLED_WAIT`].
    pub fn throttled(&self) -> Option<Duration> {
        let (SyncError::Write { source, .. }
        | SyncError::Status { source, .. }
        | SyncError::Bookkeeping { source, .. }) = self;
        match source {
            kube::Error::Api(status) if status.code == 429 => {
                let secs = status.details.as_ref().map_or(0, |d| d.retry_after_seconds);
                Some(Duration::from_secs(u64::from(secs)).max(MIN_THROTTLED_WAIT))
            }
            _ => None,
        }
    }

    /// A stable label for metrics.
    pub fn category(&self) -> &'static str {
        match self {
            SyncError::Write { .. } => "write",
            SyncError::Status { source, .. } if is_conflict(source) => "conflict",
            SyncError::Status { .. } => "status",
            SyncError::Bookkeeping { source, .. } if is_conflict(source) => "conflict",
            SyncError::Bookkeeping { .. } => "bookkeeping",
        }
    }
}

pub(crate) fn is_status(err: &kube::Error, code: u16) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == code)
}

pub(crate) fn is_conflict(err: &kube::Error) -> bool {
    is_status(err, 409)
}

/// Everything a reconcile reads and writes through.
#[derive(Clone)]
pub struct TfJobReconciler {
    /// The manager's client: reads, status writes, the job's own updates.
    pub client: Client,
    /// Pod and Service control: creates, deletes, adoption patches of the
    /// job's Pods and Services. A client of its own, so with
    /// `--kube-api-qps` it has its own token bucket, as client-go gives
    /// Kubeflow's PodControl and ServiceControl their own clientset.
    pub children: Client,
    pub jobs: Indexer<TFJob>,
    pub pods: Indexer<CachedPod>,
    pub services: Indexer<CachedService>,
    /// PodGroups, when gangs are in use ([`crate::tfjob::integrations::gang`]); Kueue Workloads
    /// and ResourceFlavors, when the operator owns the Workloads of queued
    /// jobs ([`crate::tfjob::integrations::kueue`]): each once its API is found
    /// ([`crate::tfjob::integrations::optional_apis`]).
    pub apis: OptionalApis,
    pub expectations: Expectations,
    pub recorder: EventRecorder,
    pub metrics: JobMetrics,
    pub plan_config: PlanConfig,
    pub write_concurrency: usize,
    /// See [`crate::tfjob::controller::Options::fold_create_events`].
    pub fold_create_events: bool,
    /// See [`crate::tfjob::controller::Options::force_delete_on_any_node`].
    pub force_delete_on_any_node: bool,
    /// Our own recent status writes, for reading them before the cache has them.
    pub written: WrittenStatus,
    /// Status changes planned but waiting to be written with the next ones.
    pub deferred: DeferredStatus,
    /// Each job's `managedBy` as first seen ([`crate::tfjob::integrations::managed_by`]).
    pub managers: ManagerMemory,
}

impl TfJobReconciler {
    /// Reconciles (syncs) the job at `key`; `Some(d)` asks to be called again after `d`.
    ///
    /// Each phase runs in a span of its own (`observe`, `plan`, `apply`,
    /// `status`), and each API write in one under it ([`write_span`]): with
    /// traces on, a reconcile's trace shows where its time went.
    pub async fn sync(&self, key: &ObjectKey) -> Result<Option<Duration>, SyncError> {
        let observe = tracing::debug_span!(
            "observe",
            pods = tracing::field::Empty,
            services = tracing::field::Empty
        );
        let (stored, job, pods, services) =
            match self.observe(key).instrument(observe.clone()).await? {
                Observation::Gone => return Ok(None),
                Observation::Waiting => return Ok(Some(EXPECTATIONS_TTL)),
                Observation::Ready {
                    stored,
                    job,
                    pods,
                    services,
                } => (stored, job, pods, services),
            };
        observe.record("pods", pods.len());
        observe.record("services", services.len());
        // The gang setting before the PodGroup cache (`OptionalApis::plan_config`).
        let plan_config = self.apis.plan_config(&self.plan_config);
        // The job's PodGroup is named like the job: same key.
        let pod_group = self.apis.pod_groups().and_then(|groups| groups.get(key));
        if job.metadata.deletion_timestamp.is_some() {
            self.release_workloads(key).await?;
        }
        let (workloads, flavors) = self.kueue_view(key);
        // A `managedBy` changed since first seen is not acted on: the plan
        // sees the job as it was created ([`crate::tfjob::integrations::managed_by`]).
        let as_created = match self.managers.check(key, &job) {
            Verdict::Unchanged => None,
            Verdict::Changed {
                job: as_created,
                warning,
            } => {
                if let Some(message) = warning {
                    tracing::warn!(%key, "{message}");
                    self.recorder.publish(
                        job.as_ref(),
                        event_type(true),
                        REASON_MANAGED_BY_CHANGE_IGNORED,
                        message,
                    );
                }
                Some(as_created)
            }
        };

        // Plan (pure).
        let plan = tracing::debug_span!("plan").in_scope(|| {
            plan(
                &Observed {
                    job: as_created.as_deref().unwrap_or(&job),
                    pods: &pods,
                    services: &services,
                    pod_group: pod_group.as_deref(),
                    kueue: self.apis.workloads().map(|_| Seen {
                        workloads: &workloads,
                        flavors: &flavors,
                    }),
                    now: jiff::Timestamp::now(),
                },
                &plan_config,
            )
        });
        if !plan.manage {
            return Ok(None);
        }
        tracing::debug!(
            target: "pipeline",
            stage = "8 reconcile",
            key = %key,
            pods = pods.len(),
            services = services.len(),
            writes = plan.actions.len(),
            status_changed = stored.status.as_ref() != Some(&plan.status),
            requeue_after = ?plan.requeue_after,
            "observed the cache, planned"
        );

        // Bookkeeping first: a restart is on record before its Pod is
        // deleted, so a crash or conflict in between never loses or
        // double-counts it (see `crate::tfjob::plan::bookkeeping`). If it cannot be
        // written, nothing else is: the next pass plans again.
        let (job, stored) = match &plan.bookkeeping {
            Some(books) => match self.write_bookkeeping(key, &job, books).await {
                Ok(updated) => (updated.clone(), updated),
                Err(SyncError::Bookkeeping { source, .. }) if is_conflict(&source) => {
                    tracing::debug!(%key, "job changed since it was cached; waiting for the newer version");
                    return Ok(Some(CONFLICT_RETRY));
                }
                Err(e) => return e.throttled().map(Some).ok_or(e),
            },
            None => (job, stored),
        };

        if re_creates_children(&job, &plan) && !self.still_exists_on_the_server(key, &job).await? {
            return Ok(None);
        }

        // Apply, then write status. Events first: they explain the writes.
        for e in &plan.events {
            self.recorder.publish(
                job.as_ref(),
                event_type(e.warning),
                &e.reason,
                e.message.clone(),
            );
        }
        let applied = self
            .apply(key, &job, &plan)
            .instrument(tracing::debug_span!("apply", writes = plan.actions.len()))
            .await;
        // Throttled (429, e.g. API Priority and Fairness): what was written
        // stays written (expectations count it), the rest waits as long as
        // the server asked, and the status goes out on that pass.
        if let Err(e) = &applied
            && let Some(wait) = e.throttled()
        {
            tracing::debug!(%key, ?wait, "throttled by the API server; trying again when it asked");
            return Ok(Some(wait));
        }
        let status = tracing::debug_span!(
            "status",
            changed = stored.status.as_ref() != Some(&plan.status)
        );
        let status_due = match self
            .write_status(key, &stored, &plan)
            .instrument(status)
            .await
        {
            // Our cached copy was older than the server's: the watch event
            // for the newer version is on its way and will enqueue the job
            // again, so this is not an error worth a backoff. The short
            // requeue is only a safety net.
            Err(SyncError::Status { source, .. }) if is_conflict(&source) => {
                tracing::debug!(%key, "status changed since it was cached; waiting for the newer version");
                applied?;
                return Ok(Some(CONFLICT_RETRY));
            }
            Err(e) if e.throttled().is_some() => {
                applied?;
                return Ok(e.throttled());
            }
            other => other?,
        };
        applied?;
        Ok(match (plan.requeue_after, status_due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }
}

/// Whether the plan creates children for a job that had its children
/// created before (its Created condition is set): a replacement, which
/// [`TfJobReconciler::still_exists_on_the_server`] guards.
fn re_creates_children(job: &TFJob, plan: &Plan) -> bool {
    let created_before = job
        .status
        .as_ref()
        .is_some_and(|s| crate::tfjob::plan::conditions::is_true(s, crate::api::constants::condition::CREATED));
    created_before
        && plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::CreatePod { .. } | Action::CreateService(_)))
}

pub(crate) fn child_name<K: Resource>(obj: &K) -> String {
    obj.meta().name.clone().unwrap_or_default()
}

pub(crate) fn write_error(
    verb: &'static str,
    kind: &'static str,
    name: String,
    source: kube::Error,
) -> SyncError {
    SyncError::Write {
        verb,
        kind,
        name,
        source,
    }
}

pub(crate) fn event_type(warning: bool) -> crate::runtime::events::EventType {
    if warning {
        crate::runtime::events::EventType::Warning
    } else {
        crate::runtime::events::EventType::Normal
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn write_error_with(code: u16, retry_after_seconds: Option<u32>) -> SyncError {
        let mut status = Status::failure("slow down", "TooManyRequests").with_code(code);
        if let Some(secs) = retry_after_seconds {
            let details = serde_json::json!({ "retryAfterSeconds": secs });
            status.details = Some(serde_json::from_value(details).unwrap());
        }
        write_error(
            "create",
            "pod",
            "p".into(),
            kube::Error::Api(status.boxed()),
        )
    }

    #[test]
    fn a_throttled_write_waits_the_servers_retry_after_and_at_least_a_second() {
        assert_eq!(
            write_error_with(429, Some(3)).throttled(),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            write_error_with(429, None).throttled(),
            Some(MIN_THROTTLED_WAIT)
        );
        assert_eq!(write_error_with(500, Some(3)).throttled(), None);
        assert_eq!(write_error_with(409, None).throttled(), None);
    }
}
