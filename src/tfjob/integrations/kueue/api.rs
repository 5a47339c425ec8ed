//! Kueue's kinds as much as the operator writes and reads them:
//! `kueue.x-k8s.io/v1beta2` Workload, ResourceFlavor and
//! WorkloadPriorityClass (field names and JSON spelling as in Kueue
//! v0.17.0's `apis/kueue/v1beta2/*_types.go`).
//!
//! A Workload's status is written by several of Kueue's components, each
//! owning its fields through server-side apply. The fields the operator
//! only passes on ([`super::status`] echoes what Kueue's `admission`
//! field manager owns) are kept as raw JSON in
//! [`WorkloadStatus::rest`], so nothing Kueue adds is lost on the way.
use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PodTemplateSpec, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::Resource;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "kueue.x-k8s.io";
pub const VERSION: &str = "v1beta2";
pub const API_VERSION: &str = "kueue.x-k8s.io/v1beta2";
pub const WORKLOADS: &str = "workloads";

/// The label that puts a job in a LocalQueue.
pub const LABEL_QUEUE_NAME: &str = "kueue.x-k8s.io/queue-name";
/// The label naming a WorkloadPriorityClass.
pub const LABEL_PRIORITY_CLASS: &str = "kueue.x-k8s.io/priority-class";
/// The label capping how long the job may run once admitted.
pub const LABEL_MAX_EXEC_TIME: &str = "kueue.x-k8s.io/max-exec-time-seconds";
/// The label Kueue puts on a Workload: the job's UID.
pub const LABEL_JOB_UID: &str = "kueue.x-k8s.io/job-uid";
/// The label MultiKueue puts on a job it created on a worker: the name of
/// the Workload it made for it there, which the job's controller adopts.
pub const LABEL_PREBUILT_WORKLOAD: &str = "kueue.x-k8s.io/prebuilt-workload-name";
/// The label MultiKueue puts on everything it creates on a worker: the
/// manager's `multiKueue.origin`.
pub const LABEL_MULTIKUEUE_ORIGIN: &str = "kueue.x-k8s.io/multikueue-origin";
/// Kueue's finalizer: the Workload's quota is in use until it is removed.
pub const FINALIZER_RESOURCE_IN_USE: &str = "kueue.x-k8s.io/resource-in-use";

/// Workload conditions (`workload_types.go`).
pub mod condition {
    pub const QUOTA_RESERVED: &str = "QuotaReserved";
    pub const ADMITTED: &str = "Admitted";
    pub const EVICTED: &str = "Evicted";
    pub const REQUEUED: &str = "Requeued";
    pub const FINISHED: &str = "Finished";
    pub const PODS_READY: &str = "PodsReady";
    /// Eviction reasons after which Kueue's job reconciler sets `Requeued` True.
    pub const EVICTED_BY_PREEMPTION: &str = "Preempted";
    pub const EVICTED_DUE_TO_NODE_FAILURES: &str = "NodeFailures";
    /// The conditions Kueue's `admission` field manager owns
    /// (`pkg/workload/workload.go`, `admissionManagedConditions`).
    pub const ADMISSION_MANAGED: [&str; 8] = [
        QUOTA_RESERVED,
        "BlockedOnPreemptionGates",
        EVICTED,
        ADMITTED,
        "Preempted",
        REQUEUED,
        "DeactivationTarget",
        FINISHED,
    ];
    /// `PodsReady` reasons (`WorkloadStarted`, `WorkloadWaitForStart`, ...).
    pub const STARTED: &str = "Started";
    pub const RECOVERED: &str = "Recovered";
    pub const WAIT_FOR_START: &str = "WaitForStart";
    pub const WAIT_FOR_RECOVERY: &str = "WaitForRecovery";
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Workload {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: WorkloadSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<WorkloadStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSpec {
    #[serde(default)]
    pub pod_sets: Vec<PodSet>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_ref: Option<PriorityClassRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum_execution_time_seconds: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSet {
    pub name: String,
    #[serde(default)]
    pub template: PodTemplateSpec,
    pub count: i32,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PriorityClassRef {
    pub group: String,
    pub kind: String,
    pub name: String,
}

impl PriorityClassRef {
    /// A `kueue.x-k8s.io` WorkloadPriorityClass.
    pub fn workload(name: &str) -> Self {
        Self {
            group: GROUP.to_owned(),
            kind: "WorkloadPriorityClass".to_owned(),
            name: name.to_owned(),
        }
    }

    /// A `scheduling.k8s.io` (Pod) PriorityClass.
    pub fn pod(name: &str) -> Self {
        Self {
            group: "scheduling.k8s.io".to_owned(),
            kind: "PriorityClass".to_owned(),
            name: name.to_owned(),
        }
    }

    pub fn is_workload_priority_class(&self) -> bool {
        self.group == GROUP
    }
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<Admission>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub admission_checks: Vec<AdmissionCheckState>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reclaimable_pods: Vec<ReclaimablePod>,
    /// Every other field, as the server sent it.
    #[serde(flatten)]
    pub rest: serde_json::Map<String, serde_json::Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Admission {
    pub cluster_queue: String,
    #[serde(default)]
    pub pod_set_assignments: Vec<PodSetAssignment>,
    /// Kept as sent (it is echoed back when the admission is cleared).
    #[serde(flatten)]
    pub rest: serde_json::Map<String, serde_json::Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSetAssignment {
    pub name: String,
    /// Resource name → ResourceFlavor name.
    #[serde(default)]
    pub flavors: BTreeMap<String, String>,
    #[serde(flatten)]
    pub rest: serde_json::Map<String, serde_json::Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionCheckState {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub state: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_set_updates: Vec<PodSetUpdate>,
    #[serde(flatten)]
    pub rest: serde_json::Map<String, serde_json::Value>,
}

/// What an admission check asks to change in a podSet's Pods.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSetUpdate {
    pub name: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReclaimablePod {
    pub name: String,
    pub count: i32,
}

impl Workload {
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
    }

    pub fn is_true(&self, type_: &str) -> bool {
        self.condition(type_).is_some_and(|c| c.status == "True")
    }

    /// Kueue's `IsAdmitted`: condition `Admitted` True.
    pub fn is_admitted(&self) -> bool {
        self.is_true(condition::ADMITTED)
    }

    /// Kueue's `HasQuotaReservation`: condition `QuotaReserved` True.
    pub fn has_quota_reservation(&self) -> bool {
        self.is_true(condition::QUOTA_RESERVED)
    }

    pub fn is_finished(&self) -> bool {
        self.is_true(condition::FINISHED)
    }

    /// The `Evicted` condition, while True.
    pub fn evicted(&self) -> Option<&Condition> {
        self.condition(condition::EVICTED)
            .filter(|c| c.status == "True")
    }

    pub fn has_finalizer(&self, finalizer: &str) -> bool {
        self.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == finalizer)
    }
}

/// Implements [`Resource`] for one of Kueue's kinds.
macro_rules! kueue_resource {
    ($kind:ident, $plural:literal, $scope:ty) => {
        impl Resource for $kind {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(_: &()) -> Cow<'_, str> {
                stringify!($kind).into()
            }
            fn group(_: &()) -> Cow<'_, str> {
                GROUP.into()
            }
            fn version(_: &()) -> Cow<'_, str> {
                VERSION.into()
            }
            fn plural(_: &()) -> Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

kueue_resource!(Workload, "workloads", k8s_openapi::NamespaceResourceScope);
kueue_resource!(
    ResourceFlavor,
    "resourceflavors",
    k8s_openapi::ClusterResourceScope
);
kueue_resource!(
    WorkloadPriorityClass,
    "workloadpriorityclasses",
    k8s_openapi::ClusterResourceScope
);

/// A ResourceFlavor: the node labels and tolerations its Pods get.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceFlavor {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ResourceFlavorSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceFlavorSpec {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
}

/// A WorkloadPriorityClass: only its value is read.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadPriorityClass {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub value: i32,
}

/// What goes over the wire on create: the Workload with its `apiVersion`
/// and `kind`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadCreate<'a> {
    api_version: &'static str,
    kind: &'static str,
    #[serde(flatten)]
    workload: &'a Workload,
}

impl<'a> WorkloadCreate<'a> {
    pub fn new(workload: &'a Workload) -> Self {
        Self {
            api_version: API_VERSION,
            kind: "Workload",
            workload,
        }
    }
}
