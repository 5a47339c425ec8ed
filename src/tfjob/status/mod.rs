//! **Status**: the bookkeeping annotation and the status, each written as a
//! compare-and-swap on the cached resourceVersion.

pub mod batch;
pub mod metrics;
pub mod read_your_writes;

use std::sync::Arc;
use std::time::Duration;

use kube::Resource;
use kube::api::{Api, Patch, PatchParams, PostParams};
use tracing::Instrument;

use crate::api::types::TFJob;
use crate::runtime::cache::key::ObjectKey;
use crate::runtime::client::span_status::write_span;

use crate::tfjob::plan::Plan;
use crate::tfjob::plan::bookkeeping::{ANNOTATION as BOOKKEEPING_ANNOTATION, Bookkeeping};

use batch::{DeferredStatus, WriteStatus};
use metrics::JobMetrics;
use read_your_writes::WrittenStatus;

/// What the status phase writes through, and what it remembers of its
/// writes for the observe phase to read.
#[derive(Clone)]
pub struct StatusWriter {
    pub client: kube::Client,
    /// Our own recent status writes, for reading them before the cache has them.
    pub written: WrittenStatus,
    /// Status changes planned but waiting to be written with the next ones.
    pub deferred: DeferredStatus,
    pub metrics: JobMetrics,
}

impl StatusWriter {
    /// Writes the job's bookkeeping annotation (a merge patch carrying the
    /// cached resourceVersion, so it is a compare-and-swap like the status
    /// write) and returns the job as stored, to write status over.
    pub async fn write_bookkeeping(
        &self,
        key: &ObjectKey,
        job: &Arc<TFJob>,
        books: &Bookkeeping,
    ) -> Result<Arc<TFJob>, kube::Error> {
        let namespace = job.metadata.namespace.clone().unwrap_or_default();
        let api: Api<TFJob> = Api::namespaced(self.client.clone(), &namespace);
        let patch = serde_json::json!({
            "metadata": {
                "resourceVersion": job.metadata.resource_version,
                "annotations": { BOOKKEEPING_ANNOTATION: books.to_annotation() },
            }
        });
        match api
            .patch(key.name(), &PatchParams::default(), &Patch::Merge(&patch))
            .instrument(write_span("patch", "tfjob", key.name()))
            .await
        {
            Ok(stored) => {
                if let Some(before) = job.metadata.resource_version.as_deref() {
                    self.written.remember(key, before, stored.clone());
                }
                Ok(Arc::new(stored))
            }
            Err(source) => Err(source),
        }
    }

    /// Writes the planned status over `job` (as stored) if it differs, now
    /// or, when nobody waits for the change, together with the changes that
    /// follow within the batch period ([`DeferredStatus`]); returns when to
    /// look again for a write that waits. The
    /// cached resourceVersion makes it a compare-and-swap: if the job changed
    /// since we read it, the write fails with 409 and the reconcile is
    /// retried against the newer object, so a stale cache never overwrites
    /// newer status (e.g. a restart count).
    pub async fn write_status(
        &self,
        key: &ObjectKey,
        job: &Arc<TFJob>,
        plan: &Plan,
    ) -> Result<Option<Duration>, kube::Error> {
        if plan.status_is_remote {
            return Ok(None);
        }
        let now = tokio::time::Instant::now();
        match self.deferred.decide(key, job, &plan.status, now) {
            WriteStatus::Unchanged => return Ok(None),
            WriteStatus::Within(due) => return Ok(Some(due)),
            WriteStatus::Now => {}
        }
        let namespace = job.metadata.namespace.clone().unwrap_or_default();
        let api: Api<TFJob> = Api::namespaced(self.client.clone(), &namespace);
        let mut updated = TFJob::clone(job);
        updated.status = Some(plan.status.clone());
        updated.meta_mut().managed_fields = None;
        match api
            .replace_status(key.name(), &PostParams::default(), &updated)
            .instrument(write_span("update", "tfjob", key.name()))
            .await
        {
            Ok(stored) => {
                self.metrics
                    .record_transition(&namespace, job.status.as_ref(), &plan.status);
                log_state_change(key, job.status.as_ref(), &plan.status);
                if let Some(before) = job.metadata.resource_version.as_deref() {
                    self.written.remember(key, before, stored);
                }
                self.deferred.forget(key);
                Ok(None)
            }
            Err(source) => Err(source),
        }
    }
}

/// One info line when a job's state (its last condition) changes, so an
/// operator log tells a job's story without debug logging.
fn log_state_change(
    key: &ObjectKey,
    old: Option<&crate::api::types::TFJobStatus>,
    new: &crate::api::types::TFJobStatus,
) {
    let state = |s: &crate::api::types::TFJobStatus| {
        s.conditions
            .last()
            .map(|c| (c.type_.clone(), c.status.clone()))
    };
    let after = state(new);
    if old.and_then(state) == after {
        return;
    }
    if let Some(last) = new.conditions.last() {
        tracing::info!(
            job = %key,
            state = %last.type_,
            status = %last.status,
            reason = last.reason.as_deref().unwrap_or_default(),
            message = last.message.as_deref().unwrap_or_default(),
            "job state changed"
        );
    }
}
