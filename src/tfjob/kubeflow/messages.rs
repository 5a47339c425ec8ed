//! Every condition message and Event reason and message Kubeflow's
//! training-operator writes for a TFJob, as ours writes it, and where
//! Kubeflow's source has it.
//!
//! Scripts and dashboards grep these strings, so they are Kubeflow's word
//! for word. The functions here are what the controller calls; [`KUBEFLOW`]
//! pairs each with the line of training-operator's source that holds
//! Kubeflow's text (file and line in the version `e2e/versions.env` pins,
//! `KUBEFLOW_TRAINING_OPERATOR_VERSION`). The test reads those lines from
//! the Go module cache, renders Kubeflow's format with the row's sample
//! arguments and compares: the strings are never copied into this repo, and
//! a new Kubeflow version that moves or rewords one fails the test at that
//! row. `docs/kubeflow-compatibility.md` lists each row (checked by
//! `cargo test --test docs`), and each deliberate difference with its why.

use crate::api::constants::{event, reason};

/// One line of Kubeflow's source: the first Go string literal on it is
/// the text (a format for messages, a constant for reasons).
#[derive(Clone, Copy, Debug)]
pub struct Line {
    /// Relative to the training-operator module's root.
    pub file: &'static str,
    pub line: u32,
}

const fn at(file: &'static str, line: u32) -> Line {
    Line { file, line }
}

const TFJOB_CONTROLLER: &str = "pkg/controller.v1/tensorflow/tfjob_controller.go";
const COMMON_JOB: &str = "pkg/controller.v1/common/job.go";
const COMMON_POD: &str = "pkg/controller.v1/common/pod.go";
const POD_CONTROL: &str = "pkg/controller.v1/control/pod_control.go";
const SERVICE_CONTROL: &str = "pkg/controller.v1/control/service_control.go";
const CORE_JOB: &str = "pkg/core/job.go";
const UTIL_STATUS: &str = "pkg/util/status.go";
/// `TFJobKind`, the prefix `commonutil.NewReason` puts on job reasons.
const TFJOB_KIND: Line = at("pkg/apis/kubeflow.org/v1/tensorflow_types.go", 32);

/// One text Kubeflow writes and ours beside it.
#[derive(Clone, Copy, Debug)]
pub struct KubeflowText {
    /// Where it appears: a condition's message, an Event's reason, …
    pub what: &'static str,
    /// Kubeflow's text: the literals on these lines, concatenated (a job
    /// reason is `NewReason(TFJobKind, JobRunningReason)`: two literals).
    pub kubeflow: &'static [Line],
    /// Sample values for the format's verbs, in order.
    pub args: &'static [&'static str],
    /// Ours for the same values.
    pub ours: Ours,
    /// Why ours differs, when it does on purpose; `None`: word for word.
    pub difference: Option<&'static str>,
}

/// Our side of a row.
#[derive(Clone, Copy, Debug)]
pub enum Ours {
    /// A message: the function the controller calls, given the row's
    /// sample values.
    Message(fn(&[&str]) -> String),
    /// A reason: the constant the controller writes.
    Reason(&'static str),
}

impl KubeflowText {
    /// Ours, rendered with the sample values.
    pub fn sample(&self) -> String {
        match self.ours {
            Ours::Message(render) => render(self.args),
            Ours::Reason(reason) => reason.to_owned(),
        }
    }
}

/// The `Created` condition's message.
pub fn created(name: &str) -> String {
    format!("TFJob {name} is created.")
}

/// The `Running` condition's message.
pub fn running(namespace: &str, name: &str) -> String {
    format!("TFJob {namespace}/{name} is running.")
}

/// The `Succeeded` condition's message and its Event's.
pub fn succeeded(namespace: &str, name: &str) -> String {
    format!("TFJob {namespace}/{name} successfully completed.")
}

/// The `Failed` condition's message when replicas failed for good.
pub fn replicas_failed(
    namespace: &str,
    name: &str,
    failed: impl std::fmt::Display,
    rtype: &str,
) -> String {
    format!("TFJob {namespace}/{name} has failed because {failed} {rtype} replica(s) failed.")
}

/// The `Restarting` condition's message and its Warning's.
pub fn restarting(name: &str, rtype: &str) -> String {
    format!("job {name} is restarting because {rtype} replica(s) failed.")
}

/// The `Failed` condition's message past `backoffLimit`.
pub fn backoff_limit_exceeded(name: &str) -> String {
    format!("Job {name} has failed because it has reached the specified backoff limit")
}

/// The `Failed` condition's message past `activeDeadlineSeconds`.
pub fn deadline_exceeded(name: &str) -> String {
    format!("Job {name} has failed because it was active longer than specified deadline")
}

/// The `Suspended` condition's message (and `Running`'s while suspended).
pub fn suspended(name: &str) -> String {
    format!("TFJob {name} is suspended.")
}

/// The `Suspended` condition's message once resumed.
pub fn resumed(name: &str) -> String {
    format!("TFJob {name} is resumed.")
}

/// The `ExitedWithCode` Event's message.
pub fn exited_with_code(namespace: &str, pod: &str, code: impl std::fmt::Display) -> String {
    format!("Pod: {namespace}.{pod} exited with code {code}")
}

/// `SuccessfulCreatePod`/`SuccessfulCreateService`: `kind` is "pod" or
/// "service".
pub fn created_child(kind: &str, name: &str) -> String {
    format!("Created {kind}: {name}")
}

/// `SuccessfulDeletePod`/`SuccessfulDeleteService`.
pub fn deleted_child(kind: &str, name: &str) -> String {
    format!("Deleted {kind}: {name}")
}

/// `FailedCreatePod`/`FailedCreateService`.
pub fn error_creating(error: impl std::fmt::Display) -> String {
    format!("Error creating: {error}")
}

/// `FailedDeletePod`/`FailedDeleteService`/`FailedDeleteJob`.
pub fn error_deleting(error: impl std::fmt::Display) -> String {
    format!("Error deleting: {error}")
}

/// `SuccessfulDeleteJob` after `ttlSecondsAfterFinished`.
pub fn deleted_job(name: &str) -> String {
    format!("Deleted job: {name} (ttlSecondsAfterFinished passed)")
}

/// An abnormal Pod's container that terminated with a non-zero code.
pub fn pod_terminated(
    pod: &str,
    container: &str,
    code: impl std::fmt::Display,
    message: &str,
) -> String {
    format!("Error pod {pod} container {container} exitCode: {code} terminated message: {message}")
}

/// An abnormal Pod's container waiting with a message.
pub fn pod_waiting(pod: &str, container: &str, message: &str) -> String {
    format!("Error pod {pod} container {container} waiting message: {message}")
}

/// An abnormal Pod whose newest condition is not True.
pub fn pod_condition(pod: &str, message: &str) -> String {
    format!("Error pod {pod} condition message: {message}")
}

/// The table: each text Kubeflow writes for a TFJob, and ours.
pub const KUBEFLOW: &[KubeflowText] = &[
    // Condition messages.
    KubeflowText {
        what: "Created condition message",
        kubeflow: &[at(TFJOB_CONTROLLER, 656)],
        args: &["mnist"],
        ours: Ours::Message(|a| created(a[0])),
        difference: None,
    },
    KubeflowText {
        what: "Running condition message",
        kubeflow: &[at(TFJOB_CONTROLLER, 447)],
        args: &["ns", "mnist"],
        ours: Ours::Message(|a| running(a[0], a[1])),
        difference: None,
    },
    KubeflowText {
        what: "Succeeded condition and TFJobSucceeded Event message",
        kubeflow: &[at(TFJOB_CONTROLLER, 451)],
        args: &["ns", "mnist"],
        ours: Ours::Message(|a| succeeded(a[0], a[1])),
        difference: None,
    },
    KubeflowText {
        what: "Failed condition and TFJobFailed Event message (replicas failed)",
        kubeflow: &[at(TFJOB_CONTROLLER, 500)],
        args: &["ns", "mnist", "1", "Worker"],
        ours: Ours::Message(|a| replicas_failed(a[0], a[1], a[2], a[3])),
        difference: None,
    },
    KubeflowText {
        what: "Restarting condition and TFJobRestarting Warning message",
        kubeflow: &[at(COMMON_POD, 362)],
        args: &["mnist", "Worker"],
        ours: Ours::Message(|a| restarting(a[0], a[1])),
        difference: None,
    },
    KubeflowText {
        what: "Failed condition message under ExitCode, non-retryable exit",
        kubeflow: &[at(COMMON_POD, 369)],
        args: &["mnist", "Worker"],
        ours: Ours::Message(|a| replicas_failed("ns", a[0], 1, a[1])),
        difference: Some(
            "ours says how many replicas failed, as for any other permanent failure, \
             instead of Kubeflow's `job \"mnist\" is failing because \"Worker\" replica(s) failed.`; \
             the TFJobFailed Event Kubeflow writes next carries our message",
        ),
    },
    KubeflowText {
        what: "Failed condition message past backoffLimit",
        kubeflow: &[at(COMMON_JOB, 210)],
        args: &["mnist"],
        ours: Ours::Message(|a| backoff_limit_exceeded(a[0])),
        difference: None,
    },
    KubeflowText {
        what: "Failed condition message past activeDeadlineSeconds",
        kubeflow: &[at(COMMON_JOB, 212)],
        args: &["mnist"],
        ours: Ours::Message(|a| deadline_exceeded(a[0])),
        difference: None,
    },
    KubeflowText {
        what: "Suspended condition and TFJobSuspended Event message",
        kubeflow: &[at(COMMON_JOB, 153)],
        args: &["TFJob", "mnist"],
        ours: Ours::Message(|a| suspended(a[1])),
        difference: None,
    },
    KubeflowText {
        what: "Suspended=False condition and TFJobResumed Event message",
        kubeflow: &[at(COMMON_JOB, 168)],
        args: &["TFJob", "mnist"],
        ours: Ours::Message(|a| resumed(a[1])),
        difference: None,
    },
    // Event messages.
    KubeflowText {
        what: "ExitedWithCode Event message",
        kubeflow: &[at(COMMON_POD, 346)],
        args: &["ns", "mnist-worker-0", "137"],
        ours: Ours::Message(|a| exited_with_code(a[0], a[1], a[2])),
        difference: None,
    },
    KubeflowText {
        what: "SuccessfulCreatePod Event message",
        kubeflow: &[at(POD_CONTROL, 162)],
        args: &["mnist-worker-0"],
        ours: Ours::Message(|a| created_child("pod", a[0])),
        difference: None,
    },
    KubeflowText {
        what: "SuccessfulCreateService Event message",
        kubeflow: &[at(SERVICE_CONTROL, 106)],
        args: &["mnist-worker-0"],
        ours: Ours::Message(|a| created_child("service", a[0])),
        difference: None,
    },
    KubeflowText {
        what: "SuccessfulDeletePod Event message",
        kubeflow: &[at(POD_CONTROL, 190)],
        args: &["mnist-worker-0"],
        ours: Ours::Message(|a| deleted_child("pod", a[0])),
        difference: None,
    },
    KubeflowText {
        what: "SuccessfulDeleteService Event message",
        kubeflow: &[at(SERVICE_CONTROL, 133)],
        args: &["mnist-worker-0"],
        ours: Ours::Message(|a| deleted_child("service", a[0])),
        difference: None,
    },
    KubeflowText {
        what: "FailedCreatePod and FailedCreateService Warning message",
        kubeflow: &[at(POD_CONTROL, 153)],
        args: &["pods \"mnist-worker-0\" is forbidden"],
        ours: Ours::Message(|a| error_creating(a[0])),
        difference: None,
    },
    KubeflowText {
        what: "FailedDeletePod, FailedDeleteService and FailedDeleteJob Warning message",
        kubeflow: &[at(POD_CONTROL, 187)],
        args: &["pods \"mnist-worker-0\" is forbidden"],
        ours: Ours::Message(|a| error_deleting(a[0])),
        difference: None,
    },
    KubeflowText {
        what: "SuccessfulDeleteJob Event message",
        kubeflow: &[at(TFJOB_CONTROLLER, 367)],
        args: &["mnist"],
        ours: Ours::Message(|a| deleted_job(a[0])),
        difference: Some(
            "ours adds why the job was deleted: \"(ttlSecondsAfterFinished passed)\"; \
             the Event is the last one the job gets, read by someone wondering where it went",
        ),
    },
    KubeflowText {
        what: "abnormal Pod Warning: a container terminated non-zero",
        kubeflow: &[at(CORE_JOB, 42)],
        args: &["mnist-worker-0", "tensorflow", "137", "OOMKilled"],
        ours: Ours::Message(|a| pod_terminated(a[0], a[1], a[2], a[3])),
        difference: None,
    },
    KubeflowText {
        what: "abnormal Pod Warning: a container waiting with a message",
        kubeflow: &[at(CORE_JOB, 49)],
        args: &["mnist-worker-0", "tensorflow", "Back-off pulling image"],
        ours: Ours::Message(|a| pod_waiting(a[0], a[1], a[2])),
        difference: None,
    },
    KubeflowText {
        what: "abnormal Pod Warning: newest condition not True",
        kubeflow: &[at(CORE_JOB, 77)],
        args: &["mnist-worker-0", "0/4 nodes are available"],
        ours: Ours::Message(|a| pod_condition(a[0], a[1])),
        difference: None,
    },
    // Reasons.
    reason_row(
        "Created condition reason",
        &[TFJOB_KIND, at(UTIL_STATUS, 14)],
        reason::CREATED,
    ),
    reason_row(
        "Running condition reason",
        &[TFJOB_KIND, at(UTIL_STATUS, 18)],
        reason::RUNNING,
    ),
    reason_row(
        "Succeeded condition and Event reason",
        &[TFJOB_KIND, at(UTIL_STATUS, 16)],
        reason::SUCCEEDED,
    ),
    reason_row(
        "Failed condition and Event reason",
        &[TFJOB_KIND, at(UTIL_STATUS, 20)],
        reason::FAILED,
    ),
    reason_row(
        "Restarting condition and Event reason",
        &[TFJOB_KIND, at(UTIL_STATUS, 22)],
        reason::RESTARTING,
    ),
    reason_row(
        "Suspended condition and Event reason",
        &[TFJOB_KIND, at(UTIL_STATUS, 26)],
        reason::SUSPENDED,
    ),
    reason_row(
        "Resumed condition and Event reason",
        &[TFJOB_KIND, at(UTIL_STATUS, 28)],
        reason::RESUMED,
    ),
    reason_row(
        "Event reason for a created Pod",
        &[at(POD_CONTROL, 42)],
        event::SUCCESSFUL_CREATE_POD,
    ),
    reason_row(
        "Event reason for a Pod create that failed",
        &[at(POD_CONTROL, 39)],
        event::FAILED_CREATE_POD,
    ),
    reason_row(
        "Event reason for a deleted Pod",
        &[at(POD_CONTROL, 48)],
        event::SUCCESSFUL_DELETE_POD,
    ),
    reason_row(
        "Event reason for a Pod delete that failed",
        &[at(POD_CONTROL, 45)],
        event::FAILED_DELETE_POD,
    ),
    reason_row(
        "Event reason for a created Service",
        &[at(SERVICE_CONTROL, 40)],
        event::SUCCESSFUL_CREATE_SERVICE,
    ),
    reason_row(
        "Event reason for a Service create that failed",
        &[at(SERVICE_CONTROL, 37)],
        event::FAILED_CREATE_SERVICE,
    ),
    reason_row(
        "Event reason for a deleted Service",
        &[at(SERVICE_CONTROL, 46)],
        event::SUCCESSFUL_DELETE_SERVICE,
    ),
    reason_row(
        "Event reason for a Service delete that failed",
        &[at(SERVICE_CONTROL, 43)],
        event::FAILED_DELETE_SERVICE,
    ),
    reason_row(
        "Event reason for a replica's exit",
        &[at(COMMON_POD, 50)],
        event::EXITED_WITH_CODE,
    ),
    reason_row(
        "Event reason for a job deleted after its TTL",
        &[at(TFJOB_CONTROLLER, 59)],
        event::SUCCESSFUL_DELETE_JOB,
    ),
    reason_row(
        "Event reason for a job delete that failed",
        &[at(TFJOB_CONTROLLER, 58)],
        event::FAILED_DELETE_JOB,
    ),
    reason_row(
        "Warning reason for a template's restartPolicy overridden",
        &[at(COMMON_POD, 48)],
        event::SET_POD_TEMPLATE_RESTART_POLICY,
    ),
];

/// A row for a reason: no verbs, ours is the constant.
const fn reason_row(
    what: &'static str,
    kubeflow: &'static [Line],
    ours: &'static str,
) -> KubeflowText {
    KubeflowText {
        what,
        kubeflow,
        args: &[],
        ours: Ours::Reason(ours),
        difference: None,
    }
}
