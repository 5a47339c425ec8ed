//! The lock a leader holds, behind a small trait: read it, create it,
//! replace it, watch it.
//!
//! Mirrors client-go `tools/leaderelection/resourcelock.Interface` (`Get`,
//! `Create`, `Update`): plain API calls whose answers (not found, already
//! exists, conflict) the [`super::elector`] interprets. Unlike client-go's,
//! it can also be watched: a standby that watches takes a released Lease at
//! once instead of at its next poll. The process's lock is the Lease
//! ([`super::lease_lock`]); the elector sees only this trait, so its tests
//! run on a lock in memory.
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::WatchEvent;

/// The changes of one lock object, as the API server's watch reports them.
pub type LockEvents = BoxStream<'static, Result<WatchEvent<Lease>, kube::Error>>;

/// One lock object. Every write carries the `resourceVersion` of the object
/// it replaces, so two candidates racing for it cannot both win.
pub trait Lock: Send + Sync {
    /// The lock object, or `None` when it does not exist yet.
    fn get(&self) -> BoxFuture<'_, Result<Option<Lease>, kube::Error>>;
    /// Creates the lock object (409 AlreadyExists when another candidate was first).
    fn create(&self, lease: Lease) -> BoxFuture<'_, Result<Lease, kube::Error>>;
    /// Replaces the lock object as read (409 Conflict when it changed since).
    fn update(&self, lease: Lease) -> BoxFuture<'_, Result<Lease, kube::Error>>;
    /// Watches the lock object from its current record on; the stream ends
    /// when the server closes the watch.
    fn watch(&self) -> BoxFuture<'_, Result<LockEvents, kube::Error>>;
}
