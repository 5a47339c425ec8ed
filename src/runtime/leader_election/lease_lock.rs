//! The process's lock: one `coordination.k8s.io/v1` Lease.
//!
//! Mirrors client-go `tools/leaderelection/resourcelock/leaselock.go`.
use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams, WatchParams};

use super::lock::{Lock, LockEvents};

/// The Lease `name` in `namespace`.
pub struct LeaseLock {
    api: Api<Lease>,
    name: String,
}

impl LeaseLock {
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
        }
    }
}

impl Lock for LeaseLock {
    fn get(&self) -> BoxFuture<'_, Result<Option<Lease>, kube::Error>> {
        Box::pin(self.api.get_opt(&self.name))
    }

    fn create(&self, lease: Lease) -> BoxFuture<'_, Result<Lease, kube::Error>> {
        Box::pin(async move { self.api.create(&PostParams::default(), &lease).await })
    }

    fn update(&self, lease: Lease) -> BoxFuture<'_, Result<Lease, kube::Error>> {
        // `lease.metadata.resourceVersion` is the one that was read: the API
        // server refuses this write if anyone wrote in between.
        Box::pin(async move {
            self.api
                .replace(&self.name, &PostParams::default(), &lease)
                .await
        })
    }

    fn watch(&self) -> BoxFuture<'_, Result<LockEvents, kube::Error>> {
        Box::pin(async move {
            let params = WatchParams::default()
                .fields(&format!("metadata.name={}", self.name))
                .timeout(290);
            // From resourceVersion "0": the watch starts with the current
            // record, so a release made while no watch was open is seen too.
            let events = self.api.watch(&params, "0").await?;
            Ok(events.boxed())
        })
    }
}
