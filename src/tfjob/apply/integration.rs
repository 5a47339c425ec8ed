//! The seam an integration's writes go out through: each registered
//! [`WriteHooks`] gets every integration write of the pass, picks out its
//! own ([`Write::get`]) and sends them, one at a time, before any Pod of
//! the pass is created.
use futures::future::BoxFuture;

use crate::api::types::TFJob;
use crate::tfjob::plan::integration::Write;

use super::error::SyncError;

/// What a writer's sends came to.
pub struct Sent {
    /// Whether the pass's Pods may follow (a gang's group exists).
    pub pods_may_follow: bool,
    /// The first error, if any: the pass fails after its other writes.
    pub result: Result<(), SyncError>,
}

/// An integration's writes: sent in the plan's order, before the Pods.
pub trait WriteHooks: Send + Sync {
    fn send<'a>(
        &'a self,
        job: &'a TFJob,
        writes: &'a [&'a Write],
        namespace: &'a str,
    ) -> BoxFuture<'a, Sent>;
}
