//! A Pod created into a scheduling group: `spec.schedulingGroup`, the
//! Kubernetes 1.36+ field a gang's Pods name their PodGroup by.
use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;

/// Set on every Pod created in a group, to the group's name: the Pod
/// informer caches metadata, not the spec's `schedulingGroup`, and the
/// plan must tell a Pod in a gang from one created without.
pub const ANNOTATION_POD_GROUP: &str = "tfjob-operator.kubeflow.org/pod-group";

/// A Pod with `spec.schedulingGroup.podGroupName` (and
/// [`ANNOTATION_POD_GROUP`]) set, as sent to the API server. The field is Kubernetes 1.36+, and our k8s-openapi types are
/// 1.33's (`earliest`), so it is added to the Pod's JSON here rather than
/// through the type (which would also change the CRD's PodTemplateSpec
/// schema generated from it).
#[derive(Debug)]
pub struct PodInGroup<'a> {
    pub pod: &'a Pod,
    pub group: &'a str,
}

impl Serialize for PodInGroup<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        let mut value = serde_json::to_value(self.pod).map_err(S::Error::custom)?;
        let spec = value
            .get_mut("spec")
            .and_then(|s| s.as_object_mut())
            .ok_or_else(|| S::Error::custom("a Pod to create has no spec"))?;
        spec.insert(
            "schedulingGroup".into(),
            serde_json::json!({ "podGroupName": self.group }),
        );
        let metadata = value
            .get_mut("metadata")
            .and_then(|m| m.as_object_mut())
            .ok_or_else(|| S::Error::custom("a Pod to create has no metadata"))?;
        let annotations = metadata
            .entry("annotations")
            .or_insert_with(|| serde_json::json!({}));
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(ANNOTATION_POD_GROUP.into(), self.group.into());
        }
        value.serialize(s)
    }
}
