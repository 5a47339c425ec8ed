//! The job's children grouped by replica slot (type, index): what every
//! rule of a pass looks children up by.
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::api::constants::ReplicaType;
use crate::api::defaults::JobSpec;
use crate::tfjob::children::cached::{CachedPod, CachedService};
use crate::tfjob::children::replica_of;

use super::Action;

/// The job's children, grouped by replica slot.
pub(crate) struct Slots<'a> {
    pub(crate) pods: BTreeMap<(ReplicaType, i32), Vec<&'a CachedPod>>,
    pub(crate) services: BTreeMap<(ReplicaType, i32), String>,
}

impl<'a> Slots<'a> {
    pub(crate) fn group(pods: &'a [Arc<CachedPod>], services: &'a [Arc<CachedService>]) -> Self {
        let mut by_slot: BTreeMap<_, Vec<&CachedPod>> = BTreeMap::new();
        for pod in pods {
            if let Some(slot) = replica_of(&pod.metadata) {
                by_slot.entry(slot).or_default().push(pod);
            }
        }
        let services = services
            .iter()
            .filter_map(|s| Some((replica_of(&s.metadata)?, s.metadata.name.clone()?)))
            .collect();
        Self {
            pods: by_slot,
            services,
        }
    }
}

/// Whether the spec still has replica `index` of `rtype` (scaling down
/// leaves slots past the count).
pub(super) fn in_spec(spec: &JobSpec, rtype: ReplicaType, index: i32) -> bool {
    spec.replicas
        .get(&rtype)
        .is_some_and(|r| index < r.replicas)
}

/// Delete `pod`, guarded by its uid.
pub(super) fn delete_pod(pod: &CachedPod) -> Action {
    Action::DeletePod {
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone(),
        force: false,
    }
}
