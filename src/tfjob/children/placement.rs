//! Where a replica's Pods go beyond their template: node labels and
//! tolerations, labels and annotations an admission adds (Kueue's
//! ResourceFlavors and admission checks), applied as each Pod is created.
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Toleration};

/// What the Pods of one replica type get from an admission: the flavors'
/// node labels and tolerations, and the admission checks' updates.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodPlacement {
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Toleration>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

impl PodPlacement {
    /// Adds the placement to a Pod about to be created. Node labels are
    /// added to its nodeSelector (Kueue's own merge refuses a template
    /// whose nodeSelector names the same key with another value; here the
    /// admission's value wins, since it is where the quota was reserved);
    /// tolerations the Pod lacks are appended.
    pub fn apply(&self, pod: &mut Pod) {
        if !self.labels.is_empty() {
            pod.metadata
                .labels
                .get_or_insert_with(BTreeMap::new)
                .extend(self.labels.clone());
        }
        if !self.annotations.is_empty() {
            pod.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .extend(self.annotations.clone());
        }
        let Some(spec) = pod.spec.as_mut() else {
            return;
        };
        if !self.node_selector.is_empty() {
            spec.node_selector
                .get_or_insert_with(BTreeMap::new)
                .extend(self.node_selector.clone());
        }
        let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
        for t in &self.tolerations {
            if !tolerations.contains(t) {
                tolerations.push(t.clone());
            }
        }
        if tolerations.is_empty() {
            spec.tolerations = None;
        }
    }
}
