//! The Workload status writes, as Kueue's own job reconciler makes them:
//! server-side apply of the status subresource with forced ownership.
//!
//! - What Kueue's `admission` field manager owns (`admission` and the
//!   admission conditions) is written *as that manager*
//!   ([`ADMISSION_MANAGER`]), with every field it owns echoed back: an
//!   apply drops the fields its manager owned and left out, which is how
//!   `admission` is cleared after an eviction. This is
//!   `workload.PatchAdmissionStatus` (`pkg/workload/workload.go`), used by
//!   the built-in integrations for the same two transitions: the quota
//!   given back after an eviction, and `Finished`.
//! - `PodsReady` and `reclaimablePods` are ours alone ([`OUR_MANAGER`]), and
//!   each apply carries both, as they should be.
//!
//! Each apply names the `resourceVersion` it was computed from (Kueue's
//! "strict" apply): a Workload that changed meanwhile is a 409, and the
//! next pass computes again.
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::{Map, Value, json};

use super::api::{API_VERSION, ReclaimablePod, Workload, WorkloadStatus, condition};

/// Kueue's field manager for admission (`constants.AdmissionName`).
pub const ADMISSION_MANAGER: &str = "kueue-admission";
/// Ours, for `PodsReady` and `reclaimablePods`.
pub const OUR_MANAGER: &str = "tfjob-operator";

/// The status fields besides `admission` and the conditions that Kueue's
/// `admissionStatusPatch` carries in every apply of its admission manager.
const ADMISSION_ECHOED: [&str; 7] = [
    "requeueState",
    "accumulatedPastExecutionTimeSeconds",
    "schedulingStats",
    "clusterName",
    "nominatedClusterNames",
    "unhealthyNodes",
    "preemptionGates",
];

/// Sets `type_` in `conditions` as `apimeta.SetStatusCondition` does: the
/// transition time changes only with the status. False when nothing changed.
pub fn set_condition(conditions: &mut Vec<Condition>, wanted: Condition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == wanted.type_) {
        Some(c) => {
            if c.status == wanted.status
                && c.reason == wanted.reason
                && c.message == wanted.message
                && c.observed_generation == wanted.observed_generation
            {
                return false;
            }
            if c.status != wanted.status {
                c.last_transition_time = wanted.last_transition_time;
            }
            c.status = wanted.status;
            c.reason = wanted.reason;
            c.message = wanted.message;
            c.observed_generation = wanted.observed_generation;
            true
        }
        None => {
            conditions.push(wanted);
            true
        }
    }
}

/// A condition as Kueue writes it (message cut to the API's 32 KiB).
pub fn condition(
    workload: &Workload,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> Condition {
    let mut message = message.to_owned();
    if message.len() > 32 * 1024 {
        let mut end = 32 * 1024;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
    }
    Condition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message,
        observed_generation: workload.metadata.generation,
        last_transition_time: Time(now),
    }
}

/// The quota goes back after an eviction, once no Pod of the job is left
/// (Kueue's reconciler, step 6): `QuotaReserved` False (reason `Pending`),
/// `admission` cleared, `Admitted` False, and `Requeued` True after a
/// preemption or node failures (False otherwise: a PodsReady timeout or a
/// deactivation is requeued, or not, by Kueue itself).
pub fn give_back_quota(workload: &Workload, now: Timestamp) -> Option<Value> {
    let evicted = workload.evicted()?.clone();
    let mut status = workload.status.clone().unwrap_or_default();
    let requeue = evicted.reason == condition::EVICTED_BY_PREEMPTION
        || evicted.reason == condition::EVICTED_DUE_TO_NODE_FAILURES;
    let conditions = &mut status.conditions;
    set_condition(
        conditions,
        condition(
            workload,
            condition::REQUEUED,
            requeue,
            &evicted.reason,
            &evicted.message,
            now,
        ),
    );
    set_condition(
        conditions,
        condition(
            workload,
            condition::QUOTA_RESERVED,
            false,
            "Pending",
            &evicted.message,
            now,
        ),
    );
    if workload.is_admitted() {
        let checks_ready = status.admission_checks.iter().all(|c| c.state == "Ready");
        let (reason, message) = if checks_ready {
            ("NoReservation", "The workload has no reservation")
        } else {
            (
                "NoReservationUnsatisfiedChecks",
                "The workload has no reservation and not all checks ready",
            )
        };
        set_condition(
            &mut status.conditions,
            condition(workload, condition::ADMITTED, false, reason, message, now),
        );
    }
    status.admission = None;
    Some(admission_apply(workload, &status))
}

/// `Finished` True with the job's outcome (reason `Succeeded` or `Failed`).
pub fn finish(workload: &Workload, succeeded: bool, message: &str, now: Timestamp) -> Value {
    let mut status = workload.status.clone().unwrap_or_default();
    let reason = if succeeded { "Succeeded" } else { "Failed" };
    set_condition(
        &mut status.conditions,
        condition(workload, condition::FINISHED, true, reason, message, now),
    );
    admission_apply(workload, &status)
}

/// The apply body of Kueue's admission manager for `status`: `admission`,
/// the admission conditions, and what [`ADMISSION_ECHOED`] names.
fn admission_apply(workload: &Workload, status: &WorkloadStatus) -> Value {
    let mut body = Map::new();
    if let Some(admission) = &status.admission {
        body.insert("admission".into(), json!(admission));
        body.insert("resourceRequests".into(), json!([]));
    } else if let Some(requests) = status.rest.get("resourceRequests") {
        body.insert("resourceRequests".into(), requests.clone());
    }
    let conditions: Vec<&Condition> = status
        .conditions
        .iter()
        .filter(|c| condition::ADMISSION_MANAGED.contains(&c.type_.as_str()))
        .collect();
    body.insert("conditions".into(), json!(conditions));
    for field in ADMISSION_ECHOED {
        if let Some(value) = status.rest.get(field) {
            let value = if field == "schedulingStats" {
                // Only its evictions are the admission manager's.
                json!({ "evictions": value.get("evictions").cloned().unwrap_or(json!([])) })
            } else {
                value.clone()
            };
            body.insert(field.into(), value);
        }
    }
    apply_body(workload, Value::Object(body))
}

/// Our own part of the status: `PodsReady` (when the job has been admitted)
/// and `reclaimablePods`. `None` when both are already as wanted.
pub fn ours(
    workload: &Workload,
    pods_ready: Option<Condition>,
    reclaimable: &[ReclaimablePod],
) -> Option<Value> {
    let status = workload.status.clone().unwrap_or_default();
    let mut conditions = status.conditions.clone();
    let ready_changed = pods_ready
        .clone()
        .is_some_and(|c| set_condition(&mut conditions, c));
    let mut have = status.reclaimable_pods.clone();
    let mut want = reclaimable.to_vec();
    have.sort_by(|a, b| a.name.cmp(&b.name));
    want.sort_by(|a, b| a.name.cmp(&b.name));
    if !ready_changed && have == want {
        return None;
    }
    let mut body = Map::new();
    let ready: Vec<&Condition> = conditions
        .iter()
        .filter(|c| c.type_ == condition::PODS_READY && pods_ready.is_some())
        .collect();
    body.insert("conditions".into(), json!(ready));
    body.insert("reclaimablePods".into(), json!(reclaimable));
    Some(apply_body(workload, Value::Object(body)))
}

fn apply_body(workload: &Workload, status: Value) -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": workload.metadata.name,
            "namespace": workload.metadata.namespace,
            "uid": workload.metadata.uid,
            "resourceVersion": workload.metadata.resource_version,
        },
        "status": status,
    })
}
