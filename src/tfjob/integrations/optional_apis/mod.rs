//! The optional APIs a job may use — Kueue's Workloads
//! ([`crate::tfjob::integrations::kueue`]) and Kubernetes' PodGroups
//! ([`crate::tfjob::integrations::gang`]) — found on the API server while the operator
//! runs, and the reconciler's view of them ([`OptionalApis`]), which is
//! switched on when they are.
//!
//! **An error is never an answer.** The first discovery is asked until the
//! API server answers (backoff from 1 s to 30 s,
//! `crate::runtime::client::discovery`); meanwhile `/readyz` answers 503
//! with a line naming the API and the error, and no TFJob is reconciled.
//! So a leader starting into a flaky control plane holds every queued job
//! rather than resuming it with Kueue's quota bypassed.
//!
//! **An API installed later is picked up without a restart.** Under
//! `--kueue=auto` and `--gang-scheduling=auto`, an API the first answer did
//! not have is asked about again every [`REDISCOVER_EVERY`] (as the garbage
//! collector and the quota controller re-run discovery every 30 s). When it
//! appears, its informers are started (Workloads and ResourceFlavors;
//! PodGroups), the view is switched on once they have synced, and every job
//! is reconciled again: a running job labelled with a queue then gets its
//! Workload and is stopped until Kueue admits it, as Kueue's own reconciler
//! suspends a job that runs without a matching Workload (v0.17.0
//! `pkg/controller/jobframework/reconciler.go`, `ensureOneWorkload`: "job
//! with no matching workload, suspending"; Kueue creates the Workload only
//! once no Pod is active, the gate here in the same pass). Periodic discovery
//! rather than a watch on the CustomResourceDefinition
//! `workloads.kueue.x-k8s.io`: PodGroups are a built-in API, not a CRD; a
//! CRD exists before its API is served (discovery is what says it is); and
//! a watch on CRDs needs cluster-wide list/watch rights that a
//! single-namespace install does not have. The price: a job labelled with
//! a queue that is created in the seconds between Kueue's install and the
//! next discovery may start before it is stopped and queued.
//!
//! The view is switched on, never off: once Kueue is found, a server that
//! stops serving it keeps queued jobs held (their Workloads cannot be
//! read) until the operator restarts and is told otherwise.
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use crate::api::pod_group::PodGroup;
use crate::runtime::cache::store::Indexer;
use crate::tfjob::integrations::gang::GangScheduling;
use crate::tfjob::integrations::kueue::api::{ResourceFlavor, Workload};

pub mod discovery;

/// How often an API the server did not serve is asked about again.
pub const REDISCOVER_EVERY: Duration = Duration::from_secs(10);

/// What the reconciler reads of the optional APIs: the gang setting and
/// the caches, each filled once its API is found. Cheap to clone; clones
/// share it. The caches are set before the switch that makes them read
/// (PodGroups before the gang setting, ResourceFlavors before Workloads),
/// so a pass that sees the switch on sees the cache.
#[derive(Clone, Default)]
pub struct OptionalApis {
    gang: Arc<RwLock<GangScheduling>>,
    pod_groups: Arc<OnceLock<Indexer<PodGroup>>>,
    workloads: Arc<OnceLock<Indexer<Workload>>>,
    flavors: Arc<OnceLock<Indexer<ResourceFlavor>>>,
}

impl OptionalApis {
    /// Whether jobs get a PodGroup now.
    pub fn gang(&self) -> GangScheduling {
        *self.gang.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The PodGroup cache, once gangs are in use.
    pub fn pod_groups(&self) -> Option<&Indexer<PodGroup>> {
        self.pod_groups.get()
    }

    /// The Workload cache, once the operator owns queued jobs' Workloads:
    /// the switch of everything Kueue.
    pub fn workloads(&self) -> Option<&Indexer<Workload>> {
        self.workloads.get()
    }

    /// The ResourceFlavor cache (set whenever [`Self::workloads`] is).
    pub fn flavors(&self) -> Option<&Indexer<ResourceFlavor>> {
        self.flavors.get()
    }

    /// Sets the gang setting, with the PodGroup cache when it uses one.
    pub fn set_gang(&self, setting: GangScheduling, pod_groups: Option<Indexer<PodGroup>>) {
        if let Some(cache) = pod_groups {
            // Set at most once: a second cache would be the same informer's.
            let _ = self.pod_groups.set(cache);
        }
        *self.gang.write().unwrap_or_else(|p| p.into_inner()) = setting;
    }

    /// Switches Kueue on: jobs labelled with a queue wait for their
    /// Workload's admission from now on.
    pub fn set_kueue(&self, workloads: Indexer<Workload>, flavors: Indexer<ResourceFlavor>) {
        let _ = self.flavors.set(flavors);
        let _ = self.workloads.set(workloads);
    }
}

#[cfg(test)]
mod tests;
