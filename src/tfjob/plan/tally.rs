//! The per-replica count a pass starts from: what each Pod says (phase,
//! exit code, in-place restarts, disruption), tallied per replica type into
//! Kubeflow's `replicaStatuses`, the restarts to make and the failures to
//! report. Split from `plan.rs` along the seam its `//!` names; the rules
//! that read the tally (conditions, cleanup) stay there.
use std::collections::BTreeMap;

use crate::api::constants::{DEFAULT_CONTAINER_NAME, ReplicaType};
use crate::api::defaults::JobSpec;
use crate::api::types::{ReplicaStatus, RestartPolicy};

use super::FIRST_RETRYABLE_EXIT_CODE;
use super::slots::Slots;
use crate::tfjob::children::cached::CachedPod;
use crate::tfjob::plan::abnormal::{Abnormal, abnormal};
use crate::tfjob::plan::bookkeeping::Bookkeeping;
use crate::tfjob::plan::lost_node::disrupted;

pub(crate) fn terminating(pod: &CachedPod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

pub(crate) fn phase(pod: &CachedPod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

/// The `tensorflow` container's exit code, or Kubeflow's 0xbeef when it has
/// not terminated (which counts as retryable).
pub(crate) fn exit_code(pod: &CachedPod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == DEFAULT_CONTAINER_NAME))
        .and_then(|c| c.state.as_ref()?.terminated.as_ref())
        .map_or(0xbeef, |t| t.exit_code)
}

/// In-place restarts the kubelet did (OnFailure / Always).
pub(crate) fn in_place_restarts(pod: &CachedPod) -> i32 {
    crate::tfjob::children::cached::restart_count(pod.status.as_ref())
}

/// A failed Pod that will be deleted and re-created.
pub(crate) struct Retry {
    pub(crate) rtype: ReplicaType,
    pub(crate) pod: String,
    pub(crate) uid: Option<String>,
    pub(crate) exit_code: i32,
    pub(crate) evicted: bool,
}

/// What the Pods say, per replica type.
pub(crate) struct Tally {
    pub(crate) statuses: BTreeMap<String, ReplicaStatus>,
    pub(crate) retries: Vec<Retry>,
    pub(crate) missing_pods: Vec<(ReplicaType, i32)>,
    /// Restarts counted by this pass (failures not counted before).
    pub(crate) new_restarts: i32,
    /// The kubelet's restarts of running Pods whose policy restarts.
    pub(crate) in_place_restarts: i32,
    /// Slots (not succeeded) whose Pod is not running: a restart is still
    /// in progress while there are any.
    pub(crate) slots_not_running: usize,
    pub(crate) worker0_succeeded: bool,
    /// Types with failures that are not restarted, with their counts.
    pub(crate) failed: Vec<(ReplicaType, i32)>,
    /// Non-retryable exits: `(pod, exit code)`, for `ExitedWithCode`.
    pub(crate) exits: Vec<(String, i32)>,
    /// Why live Pods are stuck ([`super::abnormal`]).
    pub(crate) abnormal: Vec<Abnormal>,
}

impl Tally {
    /// Counts the Pods; new restarts are counted into `books` by the failed
    /// Pod's UID, so a pass that runs twice counts each restart once.
    pub(crate) fn count(spec: &JobSpec, children: &Slots<'_>, books: &mut Bookkeeping) -> Self {
        let mut t = Tally {
            statuses: BTreeMap::new(),
            retries: Vec::new(),
            missing_pods: Vec::new(),
            new_restarts: 0,
            in_place_restarts: 0,
            slots_not_running: 0,
            worker0_succeeded: false,
            failed: Vec::new(),
            exits: Vec::new(),
            abnormal: Vec::new(),
        };
        for (&rtype, replica) in &spec.replicas {
            let mut succeeded_set = books.succeeded(rtype.as_str());
            let mut rs = ReplicaStatus::default();
            let restarts_in_place = !matches!(replica.restart_policy, RestartPolicy::Never);
            for index in 0..replica.replicas {
                let pods = children
                    .pods
                    .get(&(rtype, index))
                    .map(Vec::as_slice)
                    .unwrap_or(&[]);
                let live: Vec<&CachedPod> =
                    pods.iter().copied().filter(|p| !terminating(p)).collect();
                let Some(pod) = live.first() else {
                    // A terminating Pod still holds its slot; a succeeded
                    // index stays succeeded; otherwise the slot is empty.
                    if succeeded_set.contains(&index) {
                        rs.succeeded += 1;
                    } else {
                        t.slots_not_running += 1;
                        if pods.is_empty() {
                            t.missing_pods.push((rtype, index));
                        }
                    }
                    continue;
                };
                if matches!(phase(pod), "Running" | "Pending") {
                    t.abnormal.extend(abnormal(pod));
                }
                // Shown in `restarts` whatever the phase, and remembered:
                // the count is lost with the Pod. (Under ExitCode the Pod's
                // own policy is Never, so a re-created Pod adds nothing here.)
                if restarts_in_place && let Some(uid) = pod.metadata.uid.as_deref() {
                    books.see_in_place(rtype, uid, in_place_restarts(pod));
                }
                match phase(pod) {
                    "Running" => {
                        rs.active += 1;
                        // The backoff limit counts running Pods' restarts
                        // only, as Kubeflow's PastBackoffLimit does.
                        if restarts_in_place {
                            t.in_place_restarts += in_place_restarts(pod);
                        }
                    }
                    "Succeeded" => {
                        rs.succeeded += 1;
                        succeeded_set.insert(index);
                    }
                    "Failed" => {
                        t.slots_not_running += 1;
                        let code = exit_code(pod);
                        let evicted = disrupted(pod);
                        let retryable = evicted
                            || match replica.restart_policy {
                                RestartPolicy::Always | RestartPolicy::OnFailure => true,
                                RestartPolicy::ExitCode => code >= FIRST_RETRYABLE_EXIT_CODE,
                                RestartPolicy::Never | RestartPolicy::Invalid => false,
                            };
                        let pod_name = pod.metadata.name.clone().unwrap_or_default();
                        if !retryable {
                            rs.failed += 1;
                            t.exits.push((pod_name, code));
                            continue;
                        }
                        if !evicted {
                            // Kubeflow counts a restarting Pod as failed.
                            rs.failed += 1;
                            let uid = pod.metadata.uid.as_deref().unwrap_or(&pod_name);
                            if books.count_restart(rtype, uid) {
                                t.new_restarts += 1;
                            }
                        }
                        t.retries.push(Retry {
                            rtype,
                            pod: pod_name,
                            uid: pod.metadata.uid.clone(),
                            exit_code: code,
                            evicted,
                        });
                    }
                    _ => t.slots_not_running += 1,
                }
            }
            if rtype == ReplicaType::Worker && succeeded_set.contains(&0) {
                t.worker0_succeeded = true;
            }
            let permanent = rs.failed
                - t.retries
                    .iter()
                    .filter(|r| r.rtype == rtype && !r.evicted)
                    .count() as i32;
            if permanent > 0 {
                t.failed.push((rtype, permanent));
            }
            books.set_succeeded(rtype.as_str(), &succeeded_set);
            t.statuses.insert(rtype.as_str().to_owned(), rs);
        }
        t
    }
}

/// Remembers the indexes whose Pod succeeded before a pass that may stop
/// the job (the user's suspend, Kueue holding or evicting it) deletes the
/// Pods: a succeeded index is never run again, and once its Pod is gone
/// only the bookkeeping (written before any delete) still knows it.
pub(crate) fn remember_succeeded(spec: &JobSpec, children: &Slots<'_>, books: &mut Bookkeeping) {
    for (&rtype, replica) in &spec.replicas {
        let mut set = books.succeeded(rtype.as_str());
        let before = set.len();
        for index in 0..replica.replicas {
            let succeeded = children.pods.get(&(rtype, index)).is_some_and(|pods| {
                pods.iter()
                    .any(|p| !terminating(p) && phase(p) == "Succeeded")
            });
            if succeeded {
                set.insert(index);
            }
        }
        if set.len() != before {
            books.set_succeeded(rtype.as_str(), &set);
        }
    }
}
