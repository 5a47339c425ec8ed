//! What the plan reads about a job's gang: the setting of now and the
//! job's PodGroup, from the cache.
use crate::api::types::TFJob;
use crate::runtime::cache::key::ObjectKey;
use crate::tfjob::integrations::optional_apis::OptionalApis;
use crate::tfjob::observe::integration::ObserveHooks;
use crate::tfjob::plan::integration::PlanHooks;

use super::plan::GangPass;

/// Reads the job's PodGroup for the plan.
pub struct GangObserver {
    /// The gang setting and the PodGroup cache, once the API is found.
    pub apis: OptionalApis,
}

impl ObserveHooks for GangObserver {
    fn observe(&self, key: &ObjectKey, _job: &TFJob) -> Option<Box<dyn PlanHooks>> {
        // The setting before the PodGroup cache: a setting that wants
        // gangs comes with their cache (`OptionalApis`).
        let setting = self.apis.gang();
        // The job's PodGroup is named like the job: same key.
        let group = self.apis.pod_groups().and_then(|groups| groups.get(key));
        Some(Box::new(GangPass { setting, group }))
    }
}
