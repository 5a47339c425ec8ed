//! The seam an integration observes through: for each pass, whether the
//! job is to be left alone ([`Hold`]), what it reads of the job from its
//! own caches, handed to the plan as its hooks ([`PlanHooks`]); and what it
//! lets go of when the job is deleted.
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::api::types::TFJob;
use crate::runtime::cache::key::ObjectKey;
use crate::tfjob::apply::error::SyncError;
use crate::tfjob::plan::integration::PlanHooks;

/// The job the plan sees, when an integration says it is not the stored one.
pub struct AsPlanned {
    /// The job to plan from.
    pub job: Arc<TFJob>,
    /// A Warning to record on the job, the first time.
    pub warning: Option<(&'static str, String)>,
}

/// A pass that leaves the job alone: nothing written to it or its
/// children, not even an adoption (another controller writes it).
#[derive(Debug, PartialEq, Eq)]
pub struct Hold {
    /// Look again after this long, when the hold may be over.
    pub recheck_after: Duration,
    /// A Warning to record on the job, the first time.
    pub warning: Option<(&'static str, String)>,
}

/// An integration's hooks into the observe phase. Reads only: the writes
/// of [`Self::let_go`] are the one exception, for a job that is gone.
pub trait ObserveHooks: Send + Sync {
    /// Whether this pass must leave the job alone (`job` as the informer
    /// cached it); asked before anything else is read or written.
    fn hold(&self, _key: &ObjectKey, _job: &TFJob) -> Option<Hold> {
        None
    }

    /// What this integration reads of the job for this pass, as its hooks
    /// into the plan; `None` when it is not in use (its API not served).
    fn observe(&self, key: &ObjectKey, job: &TFJob) -> Option<Box<dyn PlanHooks>>;

    /// The job to plan from instead of `job` (a `managedBy` changed since
    /// the job was first seen is not acted on).
    fn as_planned(&self, _key: &ObjectKey, _job: &Arc<TFJob>) -> Option<AsPlanned> {
        None
    }

    /// The job is gone, or being deleted: let go of what holds it (Kueue's
    /// finalizer on its Workloads), so garbage collection can finish.
    /// `job`: the job as cached, while it is (being deleted).
    fn let_go<'a>(
        &'a self,
        _key: &'a ObjectKey,
        _job: Option<&'a TFJob>,
    ) -> BoxFuture<'a, Result<(), SyncError>> {
        Box::pin(async { Ok(()) })
    }

    /// The job is gone from the cache: forget what was remembered of it.
    fn forget(&self, _key: &ObjectKey) {}
}
