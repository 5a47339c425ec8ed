//! `scheduling.k8s.io/v1beta1` PodGroup: the group of Pods the scheduler
//! places all together or not at all (gang scheduling, KEP-4671), as much of
//! it as the operator writes and reads.
//!
//! Kubernetes 1.37 serves it behind the `GenericWorkload` feature gate (and
//! `--runtime-config=scheduling.k8s.io/v1beta1=true`); k8s-openapi has the
//! type only with its `v1_37` feature, and we build against the oldest API
//! level (`earliest`, 1.33) so that one binary serves 1.33 to 1.37. Hence this
//! small copy: field names and JSON spelling as in `k8s.io/api`
//! `scheduling/v1beta1/types.go`; fields we do not use are not here (the API
//! server keeps them; we never update a PodGroup by replacing it).
//!
//! A Pod joins a group through `spec.schedulingGroup.podGroupName`
//! (`src/tfjob/integrations/gang/mod.rs` sets it). Alpha versions (`v1alpha2` in 1.36,
//! `v1alpha3` in 1.37) have the same shape but no stability promise, and
//! 1.35's `v1alpha1` joined Pods differently (`spec.workloadRef`): only
//! `v1beta1` is spoken.
use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::Resource;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "scheduling.k8s.io";
pub const VERSION: &str = "v1beta1";
pub const PLURAL: &str = "podgroups";

/// The condition the scheduler sets once it has tried to place the group:
/// True (reason `Scheduled`) when the whole gang was placed, which it then
/// stays; False with reason [`REASON_UNSCHEDULABLE`] while the gang does not
/// fit.
pub const CONDITION_INITIALLY_SCHEDULED: &str = "PodGroupInitiallyScheduled";
pub const REASON_UNSCHEDULABLE: &str = "Unschedulable";

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroup {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: PodGroupSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodGroupStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSpec {
    /// Required; exactly one of `basic` and `gang`. Immutable except
    /// `gang.minCount`.
    #[serde(default)]
    pub scheduling_policy: SchedulingPolicy,
    /// The group's priority (immutable); the API server's priority admission
    /// resolves it to `spec.priority`, as for a Pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingPolicy {
    /// All-or-nothing: no Pod of the group is bound until `minCount` of
    /// them can be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<GangSchedulingPolicy>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GangSchedulingPolicy {
    /// At least 1; mutable (scaling).
    pub min_count: i32,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl PodGroup {
    /// `spec.schedulingPolicy.gang.minCount`, if the group is a gang.
    pub fn min_count(&self) -> Option<i32> {
        self.spec
            .scheduling_policy
            .gang
            .as_ref()
            .map(|g| g.min_count)
    }

    /// The scheduler's [`CONDITION_INITIALLY_SCHEDULED`] condition, if set.
    pub fn initially_scheduled(&self) -> Option<&Condition> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == CONDITION_INITIALLY_SCHEDULED)
    }
}

impl Resource for PodGroup {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "PodGroup".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        PLURAL.into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// What goes over the wire on create: the object with its `apiVersion` and
/// `kind` (the struct itself has neither, like kube's derived types whose
/// serializer adds them).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupCreate<'a> {
    api_version: &'static str,
    kind: &'static str,
    #[serde(flatten)]
    group: &'a PodGroup,
}

impl<'a> PodGroupCreate<'a> {
    pub fn new(group: &'a PodGroup) -> Self {
        Self {
            api_version: "scheduling.k8s.io/v1beta1",
            kind: "PodGroup",
            group,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gang_serializes_with_the_api_servers_field_names() {
        let group = PodGroup {
            metadata: ObjectMeta {
                name: Some("j".into()),
                ..ObjectMeta::default()
            },
            spec: PodGroupSpec {
                scheduling_policy: SchedulingPolicy {
                    gang: Some(GangSchedulingPolicy { min_count: 3 }),
                },
                priority_class_name: Some("high".into()),
            },
            status: None,
        };
        let json = serde_json::to_value(PodGroupCreate::new(&group)).expect("serializes");
        assert_eq!(
            json,
            serde_json::json!({
                "apiVersion": "scheduling.k8s.io/v1beta1",
                "kind": "PodGroup",
                "metadata": {"name": "j"},
                "spec": {
                    "schedulingPolicy": {"gang": {"minCount": 3}},
                    "priorityClassName": "high"
                }
            })
        );
    }

    #[test]
    fn what_the_scheduler_writes_is_read_and_unknown_fields_are_skipped() {
        let group: PodGroup = serde_json::from_value(serde_json::json!({
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "j", "finalizers": ["scheduling.k8s.io/podgroup-protection"]},
            "spec": {
                "schedulingPolicy": {"gang": {"minCount": 4}},
                "disruptionMode": {"single": {}},
                "priority": 0
            },
            "status": {"conditions": [{
                "type": "PodGroupInitiallyScheduled", "status": "False",
                "reason": "Unschedulable", "message": "no fit",
                "lastTransitionTime": "2026-11-26T15:00:00Z"
            }]}
        }))
        .expect("decodes");
        assert_eq!(group.min_count(), Some(4));
        let c = group.initially_scheduled().expect("the condition");
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "Unschedulable")
        );
    }
}
