//! What the plan reads about a job's Workloads: the job's own (any
//! creator, found by its controller index, and a prebuilt one by name)
//! and the ResourceFlavors their admissions name, from the caches.
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::api::types::TFJob;
use crate::runtime::cache::key::ObjectKey;
use crate::runtime::events::EventRecorder;
use crate::tfjob::apply::error::SyncError;
use crate::tfjob::integrations::optional_apis::OptionalApis;
use crate::tfjob::observe::integration::ObserveHooks;
use crate::tfjob::plan::integration::PlanHooks;

use super::api::{ResourceFlavor, Workload};
use super::plan::KueuePass;

/// The index (on the Workload informer) of Workloads by their controlling
/// TFJob's `namespace/name`.
pub const WORKLOAD_OWNER_INDEX: &str = "tfjob-owner";

/// Reads the job's Workloads for the plan, and sends the Workload writes.
#[derive(Clone)]
pub struct KueueWorkloads {
    pub client: kube::Client,
    pub recorder: EventRecorder,
    /// The Workload and ResourceFlavor caches, once Kueue is found.
    pub apis: OptionalApis,
}

impl ObserveHooks for KueueWorkloads {
    fn observe(&self, key: &ObjectKey, job: &TFJob) -> Option<Box<dyn PlanHooks>> {
        self.apis.workloads()?;
        let (workloads, flavors) = self.kueue_view(key, Some(job));
        Some(Box::new(KueuePass { workloads, flavors }))
    }

    fn let_go<'a>(
        &'a self,
        key: &'a ObjectKey,
        job: Option<&'a TFJob>,
    ) -> futures::future::BoxFuture<'a, Result<(), SyncError>> {
        Box::pin(self.release_workloads(key, job))
    }
}

impl KueueWorkloads {
    /// The job's Workloads (any creator) and the ResourceFlavors their
    /// admissions name, from the caches; empty without Kueue.
    pub(super) fn kueue_view(
        &self,
        key: &ObjectKey,
        job: Option<&TFJob>,
    ) -> (Vec<Arc<Workload>>, BTreeMap<String, Arc<ResourceFlavor>>) {
        let Some(cache) = self.apis.workloads() else {
            return (Vec::new(), BTreeMap::new());
        };
        let mut workloads = cache.by_index(WORKLOAD_OWNER_INDEX, &key.to_string());
        // A prebuilt Workload (MultiKueue's, on a worker) is not the job's
        // until adopted: found by the name the job's label gives.
        let prebuilt = job.and_then(|job| super::workload::prebuilt_name(job).map(str::to_owned));
        if let Some(name) = prebuilt
            && !workloads
                .iter()
                .any(|w| w.metadata.name.as_deref() == Some(&name))
            && let Some(w) = cache.get(&ObjectKey::new(key.namespace(), &name))
        {
            workloads.push(w);
        }
        let mut flavors = BTreeMap::new();
        if let Some(cache) = self.apis.flavors() {
            let named = workloads
                .iter()
                .filter_map(|w| w.status.as_ref()?.admission.as_ref())
                .flat_map(|a| &a.pod_set_assignments)
                .flat_map(|psa| psa.flavors.values());
            for name in named {
                if let Some(flavor) = cache.get(&ObjectKey::new(None, name)) {
                    flavors.insert(name.clone(), flavor);
                }
            }
        }
        (workloads, flavors)
    }
}
