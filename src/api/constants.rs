//! Names shared with Kubeflow: replica types, labels, condition types and
//! reasons, event reasons. Changing any of these breaks compatibility with
//! Kubeflow's tools (the Python SDK selects Pods by these labels).
use std::fmt;

/// Label: the owning job's name.
pub const LABEL_JOB_NAME: &str = "training.kubeflow.org/job-name";
/// Label: the replica type, lower-cased (`worker`, `ps`, …).
pub const LABEL_REPLICA_TYPE: &str = "training.kubeflow.org/replica-type";
/// Label: the replica index.
pub const LABEL_REPLICA_INDEX: &str = "training.kubeflow.org/replica-index";
/// Label: `master` on the Chief/Master, or on worker 0 when there is no Chief.
pub const LABEL_JOB_ROLE: &str = "training.kubeflow.org/job-role";
/// Label: the operator that created the child.
pub const LABEL_OPERATOR_NAME: &str = "training.kubeflow.org/operator-name";
/// Value of [`LABEL_OPERATOR_NAME`] (Kubeflow's, so its tools find our Pods).
pub const OPERATOR_NAME: &str = "tfjob-controller";
/// Value of [`LABEL_JOB_ROLE`] for the job's master.
pub const JOB_ROLE_MASTER: &str = "master";

/// The container that gets `TF_CONFIG` and whose exit code decides restarts.
pub const DEFAULT_CONTAINER_NAME: &str = "tensorflow";
/// The container port that carries TensorFlow's gRPC traffic.
pub const DEFAULT_PORT_NAME: &str = "tfjob-port";
/// The port used when no container port is named [`DEFAULT_PORT_NAME`].
pub const DEFAULT_PORT: i32 = 2222;
/// The environment variable TensorFlow reads its cluster layout from.
pub const TF_CONFIG_ENV: &str = "TF_CONFIG";

/// The only `runPolicy.managedBy` value this operator reconciles (besides unset).
pub const MANAGED_BY_THIS_OPERATOR: &str = "kubeflow.org/training-operator";
/// The other value Kubeflow accepts: MultiKueue manages the job.
pub const MANAGED_BY_MULTIKUEUE: &str = "kueue.x-k8s.io/multikueue";

/// A replica type, with Kubeflow's canonical spelling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReplicaType {
    Chief,
    Master,
    Worker,
    PS,
    Evaluator,
}

impl ReplicaType {
    /// Every type, in the order Kubeflow checks them for failures.
    pub const ALL: [ReplicaType; 5] = [
        ReplicaType::Chief,
        ReplicaType::Evaluator,
        ReplicaType::Master,
        ReplicaType::PS,
        ReplicaType::Worker,
    ];

    /// Parses a `tfReplicaSpecs` key case-insensitively, as Kubeflow does.
    pub fn parse(key: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|t| t.as_str().eq_ignore_ascii_case(key))
    }

    /// The canonical spelling (`PS`, `Worker`, …): status map keys.
    pub fn as_str(self) -> &'static str {
        match self {
            ReplicaType::Chief => "Chief",
            ReplicaType::Master => "Master",
            ReplicaType::Worker => "Worker",
            ReplicaType::PS => "PS",
            ReplicaType::Evaluator => "Evaluator",
        }
    }

    /// The lower-case spelling: child names, labels and TF_CONFIG keys.
    pub fn lower(self) -> &'static str {
        match self {
            ReplicaType::Chief => "chief",
            ReplicaType::Master => "master",
            ReplicaType::Worker => "worker",
            ReplicaType::PS => "ps",
            ReplicaType::Evaluator => "evaluator",
        }
    }

    /// Chief and its legacy alias Master lead the job.
    pub fn is_chief(self) -> bool {
        matches!(self, ReplicaType::Chief | ReplicaType::Master)
    }
}

impl fmt::Display for ReplicaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Condition types (Kubeflow's `JobConditionType`).
pub mod condition {
    pub const CREATED: &str = "Created";
    pub const RUNNING: &str = "Running";
    pub const RESTARTING: &str = "Restarting";
    pub const SUCCEEDED: &str = "Succeeded";
    pub const FAILED: &str = "Failed";
    pub const SUSPENDED: &str = "Suspended";
}

/// Condition and event reasons (Kubeflow's, prefixed with the kind).
pub mod reason {
    pub const CREATED: &str = "TFJobCreated";
    pub const RUNNING: &str = "TFJobRunning";
    pub const RESTARTING: &str = "TFJobRestarting";
    pub const SUCCEEDED: &str = "TFJobSucceeded";
    pub const FAILED: &str = "TFJobFailed";
    pub const SUSPENDED: &str = "TFJobSuspended";
    pub const RESUMED: &str = "TFJobResumed";
    /// Our own reasons for failures Kubeflow reports only as `TFJobFailed`.
    pub const BACKOFF_LIMIT_EXCEEDED: &str = "BackoffLimitExceeded";
    pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// Ours: the reason of the `Created` condition (and a Warning) while the
    /// job's gang cannot be placed (`src/tfjob/integrations/gang/mod.rs`).
    pub const GANG_UNSCHEDULABLE: &str = "GangUnschedulable";
    /// Ours: the `Suspended` condition's reason while the job waits for its
    /// Kueue Workload's admission (`src/tfjob/integrations/kueue/gate.rs`).
    pub const QUEUED: &str = "TFJobQueued";
    /// Ours: the `Suspended` condition's reason after Kueue evicted the job.
    pub const EVICTED: &str = "TFJobEvicted";
}

/// Event reasons (Kubeflow's).
pub mod event {
    pub const SUCCESSFUL_CREATE_POD: &str = "SuccessfulCreatePod";
    pub const FAILED_CREATE_POD: &str = "FailedCreatePod";
    pub const SUCCESSFUL_DELETE_POD: &str = "SuccessfulDeletePod";
    /// Ours: a Pod stuck terminating on a lost node was force-deleted.
    pub const FORCE_DELETED_POD: &str = "ForceDeletedPod";
    pub const FAILED_DELETE_POD: &str = "FailedDeletePod";
    /// Ours: a stuck Pod left alone because its node may still run it.
    pub const STUCK_POD_KEPT: &str = "StuckPodKept";
    pub const SUCCESSFUL_CREATE_SERVICE: &str = "SuccessfulCreateService";
    pub const FAILED_CREATE_SERVICE: &str = "FailedCreateService";
    pub const SUCCESSFUL_DELETE_SERVICE: &str = "SuccessfulDeleteService";
    pub const FAILED_DELETE_SERVICE: &str = "FailedDeleteService";
    pub const EXITED_WITH_CODE: &str = "ExitedWithCode";
    /// Ours: `runPolicy.schedulingPolicy` is set but nothing honours it
    /// (or, with a gang, the parts of it the PodGroup API has no place for).
    pub const SCHEDULING_POLICY_IGNORED: &str = "SchedulingPolicyIgnored";
    /// Ours: the job's PodGroup (`src/tfjob/integrations/gang/mod.rs`).
    pub const SUCCESSFUL_CREATE_POD_GROUP: &str = "SuccessfulCreatePodGroup";
    pub const FAILED_CREATE_POD_GROUP: &str = "FailedCreatePodGroup";
    pub const SUCCESSFUL_UPDATE_POD_GROUP: &str = "SuccessfulUpdatePodGroup";
    pub const FAILED_UPDATE_POD_GROUP: &str = "FailedUpdatePodGroup";
    pub const SUCCESSFUL_DELETE_POD_GROUP: &str = "SuccessfulDeletePodGroup";
    pub const FAILED_DELETE_POD_GROUP: &str = "FailedDeletePodGroup";
    /// Ours: no Pod is created while an old PodGroup of the job's name is there.
    pub const WAITING_FOR_POD_GROUP: &str = "WaitingForPodGroup";
    /// Ours: the job's gang cannot be placed (how many Pods fit of how many).
    pub const GANG_UNSCHEDULABLE: &str = "GangUnschedulable";
    pub const SET_POD_TEMPLATE_RESTART_POLICY: &str = "SetPodTemplateRestartPolicy";
    pub const JOB_TERMINATED: &str = "JobTerminated";
    pub const SUCCESSFUL_DELETE_JOB: &str = "SuccessfulDeleteJob";
    pub const FAILED_DELETE_JOB: &str = "FailedDeleteJob";
    /// Kueue's own event reasons (`pkg/controller/jobframework/events.go`),
    /// for a job whose Workload the operator owns (`src/tfjob/kueue/`).
    pub const KUEUE_CREATED_WORKLOAD: &str = "CreatedWorkload";
    pub const KUEUE_DELETED_WORKLOAD: &str = "DeletedWorkload";
    pub const KUEUE_UPDATED_WORKLOAD: &str = "UpdatedWorkload";
    pub const KUEUE_FINISHED_WORKLOAD: &str = "FinishedWorkload";
    pub const KUEUE_STARTED: &str = "Started";
    pub const KUEUE_STOPPED: &str = "Stopped";
    /// Ours: a Workload write failed (Kueue's is `ErrWorkloadCompose`).
    pub const KUEUE_FAILED_WORKLOAD: &str = "FailedWorkload";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_keys_parse_case_insensitively() {
        assert_eq!(ReplicaType::parse("ps"), Some(ReplicaType::PS));
        assert_eq!(ReplicaType::parse("WORKER"), Some(ReplicaType::Worker));
        assert_eq!(
            ReplicaType::parse("Evaluator"),
            Some(ReplicaType::Evaluator)
        );
        assert_eq!(ReplicaType::parse("launcher"), None);
    }

    #[test]
    fn master_is_a_chief_but_worker_is_not() {
        assert!(ReplicaType::Master.is_chief());
        assert!(ReplicaType::Chief.is_chief());
        assert!(!ReplicaType::Worker.is_chief());
    }
}
