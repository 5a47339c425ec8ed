//! One reconcile of one TFJob: **observe** (the job, its children and each
//! integration's view, from the informer caches) → **plan** (pure,
//! [`crate::tfjob::plan`]) → **apply** (API writes, raising expectations
//! first) → **status** (written only when it changed, coalesced over
//! [`crate::tfjob::status::batch::STATUS_BATCH_PERIOD`] unless someone
//! waits for the change).
//!
//! This is sample-controller's `syncHandler` and Kubeflow's `ReconcileJobs`.
//! Two rules it never breaks:
//! - never act on children while expectations are unmet: the cache may not
//!   show our own recent creates yet, and acting would duplicate Pods;
//! - never mutate an object from the cache: objects are `Arc`s shared with
//!   every other reader; the status write sends a modified clone.
//!
//! This file is the order the phases run in ([`TfJobReconciler::sync`]);
//! each phase is a folder of `crate::tfjob`: `observe/`, `plan/`, `apply/`,
//! `status/`.
use std::time::Duration;

use tracing::Instrument;

use crate::api::constants::condition;
use crate::api::types::TFJob;
use crate::runtime::cache::key::ObjectKey;
use crate::runtime::controller::expectations::EXPECTATIONS_TTL;
use crate::tfjob::apply::Applier;
use crate::tfjob::apply::error::{SyncError, is_conflict};
use crate::tfjob::observe::{Observation, Observer, Seen};
use crate::tfjob::plan::conditions::is_true;
use crate::tfjob::plan::{Action, Plan, PlanConfig, plan};
use crate::tfjob::status::StatusWriter;

/// After a status-write conflict, look again this soon even if no event comes.
const CONFLICT_RETRY: Duration = Duration::from_secs(1);

/// The four phases of a reconcile, each with what it reads and writes through.
#[derive(Clone)]
pub struct TfJobReconciler {
    pub observe: Observer,
    pub plan_config: PlanConfig,
    pub apply: Applier,
    pub status: StatusWriter,
}

impl TfJobReconciler {
    /// Reconciles (syncs) the job at `key`; `Some(d)` asks to be called again after `d`.
    ///
    /// Each phase runs in a span of its own (`observe`, `plan`, `apply`,
    /// `status`), and each API write in one under it
    /// ([`crate::runtime::client::span_status::write_span`]): with traces
    /// on, a reconcile's trace shows where its time went.
    pub async fn sync(&self, key: &ObjectKey) -> Result<Option<Duration>, SyncError> {
        let observe = tracing::debug_span!(
            "observe",
            pods = tracing::field::Empty,
            services = tracing::field::Empty
        );
        let seen = match self
            .observe
            .observe(key)
            .instrument(observe.clone())
            .await?
        {
            Observation::Gone => return Ok(None),
            Observation::Waiting => return Ok(Some(EXPECTATIONS_TTL)),
            Observation::Held { job, hold } => {
                if let Some((reason, message)) = hold.warning {
                    tracing::warn!(%key, "{message}");
                    self.apply.recorder.warning(job.as_ref(), reason, message);
                }
                return Ok(Some(hold.recheck_after));
            }
            Observation::Ready(seen) => seen,
        };
        observe.record("pods", seen.pods.len());
        observe.record("services", seen.services.len());
        let hooks = seen.hooks();
        let plan = tracing::debug_span!("plan").in_scope(|| {
            plan(
                &seen.observed(&hooks, jiff::Timestamp::now()),
                &self.plan_config,
            )
        });
        for (reason, message) in &seen.warnings {
            tracing::warn!(%key, "{message}");
            self.apply
                .recorder
                .warning(seen.job.as_ref(), reason, message.clone());
        }
        if !plan.manage {
            return Ok(None);
        }
        log_planned(key, &seen, &plan);
        let seen = match self.write_bookkeeping(key, seen, &plan).await {
            Ok(seen) => seen,
            Err(done) => return done,
        };
        if re_creates_children(&seen.job, &plan)
            && !self
                .observe
                .still_exists_on_the_server(key, &seen.job)
                .await?
        {
            return Ok(None);
        }
        self.apply.record(&seen.job, &plan.events);
        let applied = self
            .apply
            .apply(key, &seen.job, &plan)
            .instrument(tracing::debug_span!("apply", writes = plan.actions.len()))
            .await;
        self.write_status(key, &seen, &plan, applied).await
    }

    /// Bookkeeping first: a restart is on record before its Pod is
    /// deleted, so a crash or conflict in between never loses or
    /// double-counts it (see [`crate::tfjob::plan::bookkeeping`]). If it
    /// cannot be written, nothing else is: the next pass plans again
    /// (`Err` holds what the pass returns).
    async fn write_bookkeeping(
        &self,
        key: &ObjectKey,
        mut seen: Seen,
        plan: &Plan,
    ) -> Result<Seen, Result<Option<Duration>, SyncError>> {
        let Some(books) = &plan.bookkeeping else {
            return Ok(seen);
        };
        let written = self.status.write_bookkeeping(key, &seen.job, books).await;
        match written.map_err(|source| SyncError::Bookkeeping {
            key: key.clone(),
            source,
        }) {
            Ok(updated) => {
                seen.stored = updated.clone();
                seen.job = updated;
                Ok(seen)
            }
            Err(SyncError::Bookkeeping { source, .. }) if is_conflict(&source) => {
                tracing::debug!(%key, "job changed since it was cached; waiting for the newer version");
                Err(Ok(Some(CONFLICT_RETRY)))
            }
            Err(e) => Err(e.throttled().map(Some).ok_or(e)),
        }
    }

    /// The status, after the writes it reports on; what the pass returns.
    async fn write_status(
        &self,
        key: &ObjectKey,
        seen: &Seen,
        plan: &Plan,
        applied: Result<(), SyncError>,
    ) -> Result<Option<Duration>, SyncError> {
        // Throttled (429, e.g. API Priority and Fairness): what was written
        // stays written (expectations count it), the rest waits as long as
        // the server asked, and the status goes out on that pass.
        if let Err(e) = &applied
            && let Some(wait) = e.throttled()
        {
            tracing::debug!(%key, ?wait, "throttled by the API server; trying again when it asked");
            return Ok(Some(wait));
        }
        let changed = seen.stored.status.as_ref() != Some(&plan.status);
        let span = tracing::debug_span!("status", changed);
        let written = self.status.write_status(key, &seen.stored, plan);
        let status_due = match written
            .instrument(span)
            .await
            .map_err(|source| SyncError::Status {
                key: key.clone(),
                source,
            }) {
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

fn log_planned(key: &ObjectKey, seen: &Seen, plan: &Plan) {
    tracing::debug!(
        target: "pipeline",
        stage = "8 reconcile",
        key = %key,
        pods = seen.pods.len(),
        services = seen.services.len(),
        writes = plan.actions.len(),
        status_changed = seen.stored.status.as_ref() != Some(&plan.status),
        requeue_after = ?plan.requeue_after,
        "observed the cache, planned"
    );
}

/// Whether the plan creates children for a job that had its children
/// created before (its Created condition is set): a replacement, which
/// [`Observer::still_exists_on_the_server`] guards.
fn re_creates_children(job: &TFJob, plan: &Plan) -> bool {
    let created_before = job
        .status
        .as_ref()
        .is_some_and(|s| is_true(s, condition::CREATED));
    created_before
        && plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::CreatePod { .. } | Action::CreateService(_)))
}
