//! The TFJob resource, field for field as Kubeflow's `kubeflow.org/v1`
//! (`training-operator` `pkg/apis/kubeflow.org/v1/{tensorflow,common}_types.go`).
//!
//! JSON names, optionality and value sets match Kubeflow exactly, so a manifest
//! written for Kubeflow applies unchanged and tools that read TFJob status
//! (kubectl, the `kubeflow-training` Python SDK) read ours unchanged. Our
//! additions are `status.observedGeneration` plus a `restarts` counter per
//! replica type (needed to honour `backoffLimit` across operator restarts),
//! and `spec.managedBy` (where Kueue's MultiKueue looks for it,
//! docs/kueue.md); clients that do not know them ignore them.
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::api::constants::MANAGED_BY_THIS_OPERATOR;

/// TFJobSpec is the desired state of a distributed TensorFlow training job.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "kubeflow.org",
    version = "v1",
    kind = "TFJob",
    plural = "tfjobs",
    shortname = "tfjob",
    namespaced,
    status = "TFJobStatus",
    // The default columns are Kubeflow's (State, Age), so scripts that parse
    // `kubectl get tfjobs` keep working; `-o wide` adds the running replicas
    // of every type a job can have, each column named for the one type it
    // reads (a column reads one map key, not a sum): a Chief-only, Master,
    // PS/Worker or Evaluator job shows a count under each of its types and
    // an empty cell under the others, never a number that is not its own.
    printcolumn = r#"{"name":"State","type":"string","jsonPath":".status.conditions[-1:].type","description":"The latest condition of the job"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Chief-Active","type":"integer","priority":1,"jsonPath":".status.replicaStatuses.Chief.active","description":"Running Chief replicas"}"#,
    printcolumn = r#"{"name":"Master-Active","type":"integer","priority":1,"jsonPath":".status.replicaStatuses.Master.active","description":"Running Master replicas"}"#,
    printcolumn = r#"{"name":"PS-Active","type":"integer","priority":1,"jsonPath":".status.replicaStatuses.PS.active","description":"Running PS replicas"}"#,
    printcolumn = r#"{"name":"Worker-Active","type":"integer","priority":1,"jsonPath":".status.replicaStatuses.Worker.active","description":"Running Worker replicas"}"#,
    printcolumn = r#"{"name":"Worker-Succeeded","type":"integer","priority":1,"jsonPath":".status.replicaStatuses.Worker.succeeded","description":"Succeeded Worker replicas"}"#,
    printcolumn = r#"{"name":"Evaluator-Active","type":"integer","priority":1,"jsonPath":".status.replicaStatuses.Evaluator.active","description":"Running Evaluator replicas"}"#,
    printcolumn = r#"{"name":"Message","type":"string","priority":1,"jsonPath":".status.conditions[-1:].message","description":"The latest condition's message"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct TFJobSpec {
    /// Policies that apply to the whole job: clean-up, TTL, deadline, backoff,
    /// suspension and gang scheduling.
    #[serde(default)]
    pub run_policy: RunPolicy,

    /// When the job counts as succeeded. Empty (the default): when the Chief
    /// (or, without a Chief, worker 0) succeeds. `AllWorkers`: when every
    /// Worker succeeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_policy: Option<SuccessPolicy>,

    /// The replicas of the job, by type: `Chief` (or its legacy alias
    /// `Master`), `Worker`, `PS`, `Evaluator`. Keys are case-insensitive
    /// (`ps` is `PS`), as in Kubeflow.
    pub tf_replica_specs: BTreeMap<String, ReplicaSpec>,

    /// Dynamic worker mode: TF_CONFIG lists only this worker and the PS
    /// (sparse form), and Worker failures do not fail the job.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub enable_dynamic_worker: bool,

    /// The controller that manages this job, where batch/v1 Jobs, JobSets
    /// and Kueue's MultiKueue look for it: the same values and meaning as
    /// `runPolicy.managedBy`, which it may not contradict. Set this one (not
    /// `runPolicy.managedBy`) to `kueue.x-k8s.io/multikueue` to have
    /// MultiKueue dispatch the job: it removes this field from the worker's
    /// copy, which this operator then runs. Not in Kubeflow's CRD (pruned
    /// there). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,
}

impl TFJobSpec {
    /// Who manages the job, from `spec.managedBy` or `runPolicy.managedBy`.
    /// Our CRD refuses the two disagreeing; where they still do (a CRD
    /// without that rule), the one naming another controller wins, so a
    /// job is never run by two.
    pub fn effective_managed_by(&self) -> Option<&str> {
        let top = self.managed_by.as_deref();
        let run_policy = self.run_policy.managed_by.as_deref();
        match (top, run_policy) {
            (Some(t), _) if t != MANAGED_BY_THIS_OPERATOR => Some(t),
            (_, Some(r)) if r != MANAGED_BY_THIS_OPERATOR => Some(r),
            (t, r) => t.or(r),
        }
    }
}

/// One replica type of the job.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSpec {
    /// How many replicas of this type (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// The Pod template of every replica of this type. Its `restartPolicy`
    /// is replaced by the replica's `restartPolicy`.
    //
    // Boxed (not in the schema's description): a `PodTemplateSpec` is
    // ~1.8 KB inline, and a B-tree node of `tf_replica_specs` holds 11 values
    // inline whether used or not, so unboxed every cached TFJob carried a
    // 20 KB node for its 1-4 replica types (heaptrack, 200 jobs: 4.0 MB of
    // 13.8 MB of heap). Boxed, the node is ~0.5 KB and each template costs
    // its size once.
    #[serde(default)]
    pub template: Box<PodTemplateSpec>,

    /// What happens when a replica's Pod fails: `Always` and `OnFailure`
    /// restart it, `Never` does not, `ExitCode` restarts it only when the
    /// `tensorflow` container exited with a code ≥ 128 (killed by a signal,
    /// e.g. 137 or 143). Default `Never`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<RestartPolicy>,
}

// Each enum below has an `Invalid` catch-all, left out of the CRD schema:
// our CRD refuses other values at `kubectl apply`, but Kubeflow's CRD (which
// users who migrate keep) accepts any string. Decoding such a job must not
// fail — the informer would skip it and the user would never hear why — so
// it decodes, and `defaults::normalize` refuses it naming the field.

/// What happens when a replica's Pod fails: `Always` and `OnFailure`
/// restart it, `Never` does not, `ExitCode` restarts it only when the
/// `tensorflow` container exited with a code ≥ 128 (killed by a signal,
/// e.g. 137 or 143). Default `Never`.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum RestartPolicy {
    Always,
    OnFailure,
    Never,
    ExitCode,
    /// Any other value (only Kubeflow's CRD lets one through).
    #[serde(other)]
    #[schemars(skip)]
    Invalid,
}

/// Which Pods to delete when the job finishes.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum CleanPodPolicy {
    /// Delete every Pod (and its Service).
    All,
    /// Delete Pods that are still running or pending.
    Running,
    /// Leave every Pod (the default).
    None,
    /// Any other value (only Kubeflow's CRD lets one through).
    #[serde(other)]
    #[schemars(skip)]
    Invalid,
}

/// When a job without a Chief counts as succeeded.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum SuccessPolicy {
    /// Worker 0 (Kubeflow's default, written as an empty string).
    #[serde(rename = "")]
    Default,
    /// Every Worker.
    AllWorkers,
    /// Any other value (only Kubeflow's CRD lets one through).
    #[serde(other)]
    #[schemars(skip)]
    Invalid,
}

/// Policies for the whole job (Kubeflow's `RunPolicy`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunPolicy {
    /// Which Pods to delete when the job finishes (default `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clean_pod_policy: Option<CleanPodPolicy>,

    /// Delete the TFJob this many seconds after it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,

    /// Fail the job this many seconds after it started, whatever is running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,

    /// How many restarts (in place or by re-creating a Pod) are allowed
    /// before the job fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<i32>,

    /// Gang-scheduling settings (used by Volcano / scheduler-plugins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_policy: Option<SchedulingPolicy>,

    /// Suspend the job: its Pods are deleted until it is resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,

    /// The controller that manages this job. Only
    /// `kubeflow.org/training-operator` (or unset) is reconciled here;
    /// `kueue.x-k8s.io/multikueue` jobs are left alone. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,
}

/// Gang-scheduling settings (Kubeflow's `SchedulingPolicy`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_available: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_resources: Option<BTreeMap<String, Quantity>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_timeout_seconds: Option<i32>,
}

/// The observed state of a TFJob (Kubeflow's `JobStatus`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TFJobStatus {
    /// The job's conditions, oldest first; the last one is its state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<JobCondition>,

    /// Replica counts by type. Always written (Kubeflow's Python SDK
    /// requires the field to be present).
    #[serde(default)]
    pub replica_statuses: BTreeMap<String, ReplicaStatus>,

    /// When the job started (first reconcile, or the last resume).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,

    /// When the job succeeded or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,

    /// Last time the job was reconciled while waiting for gang scheduling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reconcile_time: Option<Time>,

    /// The `metadata.generation` this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// One condition of the job (Kubeflow's `JobCondition`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobCondition {
    /// `Created`, `Running`, `Restarting`, `Succeeded`, `Failed` or `Suspended`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// A CamelCase reason, e.g. `TFJobRunning`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A human-readable message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

/// Pod counts for one replica type (Kubeflow's `ReplicaStatus`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaStatus {
    /// Pods running (not terminating).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub active: i32,
    /// Pods that succeeded.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub succeeded: i32,
    /// Pods that failed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed: i32,
    /// Restarts so far (in place, and by re-creating a failed Pod); counted
    /// against `runPolicy.backoffLimit`. Our addition.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restarts: i32,
    /// Indexes whose Pod succeeded, as ranges (`"0,2-4"`), so a succeeded
    /// replica is never run again when its Pod is garbage-collected. Our
    /// addition (Kubernetes Jobs call it `completedIndexes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded_indexes: Option<String>,
    /// Kubeflow's field; never set for TFJob (as in Kubeflow).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Kubeflow's field; never set for TFJob (as in Kubeflow).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::constants::MANAGED_BY_MULTIKUEUE;

    #[test]
    fn either_managed_by_field_says_who_manages_the_job() {
        let spec = |top: Option<&str>, run_policy: Option<&str>| TFJobSpec {
            managed_by: top.map(str::to_owned),
            run_policy: RunPolicy {
                managed_by: run_policy.map(str::to_owned),
                ..RunPolicy::default()
            },
            ..TFJobSpec::default()
        };
        let ours = Some(MANAGED_BY_THIS_OPERATOR);
        let mk = Some(MANAGED_BY_MULTIKUEUE);
        assert_eq!(spec(None, None).effective_managed_by(), None);
        assert_eq!(spec(mk, None).effective_managed_by(), mk);
        assert_eq!(spec(None, mk).effective_managed_by(), mk);
        assert_eq!(spec(ours, None).effective_managed_by(), ours);
        assert_eq!(spec(None, ours).effective_managed_by(), ours);
        // Disagreeing (our CRD refuses it, a CRD without the rule may not):
        // the other controller wins, whichever field names it.
        assert_eq!(spec(ours, mk).effective_managed_by(), mk);
        assert_eq!(spec(mk, ours).effective_managed_by(), mk);
    }

    #[test]
    fn spec_managed_by_reads_and_writes_where_multikueue_looks() {
        let json = serde_json::json!({
            "managedBy": "kueue.x-k8s.io/multikueue",
            "tfReplicaSpecs": {}
        });
        let spec: TFJobSpec = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(spec.managed_by.as_deref(), Some(MANAGED_BY_MULTIKUEUE));
        assert_eq!(
            serde_json::to_value(&spec).unwrap()["managedBy"],
            json["managedBy"]
        );
    }

    #[test]
    fn a_replica_spec_is_small_enough_to_sit_in_a_b_tree_node_eleven_times() {
        // `tf_replica_specs` is a BTreeMap: each node allocates room for 11
        // values. With the template inline that was 11 × ~1.8 KB = 20 KB per
        // cached TFJob, whatever its number of replica types.
        let size = std::mem::size_of::<ReplicaSpec>();
        assert!(size <= 64, "ReplicaSpec is {size} bytes inline");
    }

    #[test]
    fn a_boxed_template_reads_and_writes_as_json_like_an_unboxed_one() {
        let json = serde_json::json!({
            "replicas": 2,
            "template": {"spec": {"containers": [{"name": "tensorflow", "image": "tf"}]}}
        });
        let spec: ReplicaSpec = serde_json::from_value(json.clone()).expect("decodes");
        assert_eq!(
            spec.template.spec.as_ref().map(|s| s.containers.len()),
            Some(1)
        );
        assert_eq!(serde_json::to_value(&spec).expect("encodes"), json);
    }
}
