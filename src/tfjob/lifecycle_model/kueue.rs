//! Kueue's side of the model: it admits an active pending Workload on the
//! flavor `kwok`, evicts an inactive or preempted one, and takes the
//! operator's Workload writes as the API server would.
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::tfjob::integrations::kueue::api::{
    Admission, PodSetAssignment, ResourceFlavor, ResourceFlavorSpec, Workload, WorkloadStatus,
};
use crate::tfjob::integrations::kueue::gate::{ANNOTATION_DEACTIVATED, WorkloadWrite};

use super::cluster::World;

pub(super) fn flavors() -> BTreeMap<String, Arc<ResourceFlavor>> {
    let flavor = ResourceFlavor {
        spec: ResourceFlavorSpec {
            node_labels: BTreeMap::from([("type".into(), "kwok".into())]),
            tolerations: Vec::new(),
        },
        ..ResourceFlavor::default()
    };
    BTreeMap::from([("kwok".into(), Arc::new(flavor))])
}

fn set(w: &mut Workload, type_: &str, status: bool, reason: &str, world: &World) {
    let conditions = &mut w
        .status
        .get_or_insert_with(WorkloadStatus::default)
        .conditions;
    conditions.retain(|c| c.type_ != type_);
    conditions.push(Condition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: reason.into(),
        message: format!("{type_} {reason}"),
        observed_generation: Some(1),
        last_transition_time: world.stamp(),
    });
}

/// One turn of Kueue's controllers: an inactive Workload holding quota is
/// evicted; an active pending one is admitted.
pub(super) fn reconcile(world: &mut World) {
    let Some(mut w) = world.server.workload.clone() else {
        return;
    };
    if w.metadata.deletion_timestamp.is_some() || w.is_finished() {
        return;
    }
    if w.spec.active == Some(false) {
        if w.has_quota_reservation() && w.evicted().is_none() {
            set(&mut w, "Evicted", true, "InactiveWorkload", world);
        }
    } else if !w.has_quota_reservation() {
        set(&mut w, "QuotaReserved", true, "QuotaReserved", world);
        set(&mut w, "Admitted", true, "Admitted", world);
        set(&mut w, "Evicted", false, "Admitted", world);
        let status = w.status.get_or_insert_with(WorkloadStatus::default);
        status.admission = Some(Admission {
            cluster_queue: "cq".into(),
            pod_set_assignments: w
                .spec
                .pod_sets
                .iter()
                .map(|ps| PodSetAssignment {
                    name: ps.name.clone(),
                    flavors: BTreeMap::from([("cpu".into(), "kwok".into())]),
                    rest: serde_json::Map::new(),
                })
                .collect(),
            rest: serde_json::Map::new(),
        });
        world.facts.admitted_counts = Some(
            w.spec
                .pod_sets
                .iter()
                .map(|ps| (ps.name.clone(), ps.count))
                .collect(),
        );
    }
    world.server.workload = Some(w);
}

/// A preemption of the admitted Workload.
pub(super) fn evict(world: &mut World) {
    let Some(mut w) = world.server.workload.clone() else {
        return;
    };
    if w.has_quota_reservation() && !w.is_finished() && w.evicted().is_none() {
        set(&mut w, "Evicted", true, "Preempted", world);
        world.server.workload = Some(w);
    }
}

/// The server takes one of the operator's Workload writes; false when it
/// refuses it (gone, or another's uid).
pub(super) fn apply(world: &mut World, write: &WorkloadWrite) -> bool {
    let named = |w: &Option<Workload>, name: &str| {
        w.as_ref()
            .is_some_and(|w| w.metadata.name.as_deref() == Some(name))
    };
    let done = match write {
        WorkloadWrite::Create { workload, .. } => {
            if world.server.workload.is_some() {
                return false;
            }
            let mut w = (**workload).clone();
            w.metadata.uid = Some(world.uid("workload"));
            w.metadata.resource_version = Some("1".into());
            world.server.workload = Some(w);
            true
        }
        WorkloadWrite::Delete { name, uid } => {
            let stamp = world.stamp();
            let Some(w) = world.server.workload.as_mut() else {
                return false;
            };
            if w.metadata.name.as_ref() != Some(name) || (uid.is_some() && w.metadata.uid != *uid) {
                return false;
            }
            if w.metadata
                .finalizers
                .as_ref()
                .is_some_and(|f| !f.is_empty())
            {
                w.metadata.deletion_timestamp = Some(stamp);
            } else {
                world.server.workload = None;
            }
            true
        }
        WorkloadWrite::ReleaseFinalizer {
            name, finalizers, ..
        } => {
            if !named(&world.server.workload, name) {
                return false;
            }
            let gone = world.server.workload.as_mut().is_some_and(|w| {
                w.metadata.finalizers = Some(finalizers.clone());
                finalizers.is_empty() && w.metadata.deletion_timestamp.is_some()
            });
            if gone {
                world.server.workload = None;
            }
            true
        }
        WorkloadWrite::SetQueueName { name, queue } => {
            if !named(&world.server.workload, name) {
                return false;
            }
            if let Some(w) = world.server.workload.as_mut() {
                w.spec.queue_name = Some(queue.clone());
            }
            true
        }
        WorkloadWrite::SetActive { name, active } => {
            if !named(&world.server.workload, name) {
                return false;
            }
            if let Some(w) = world.server.workload.as_mut() {
                w.spec.active = Some(*active);
                let annotations = w.metadata.annotations.get_or_insert_with(BTreeMap::new);
                if *active {
                    annotations.remove(ANNOTATION_DEACTIVATED);
                } else {
                    annotations.insert(ANNOTATION_DEACTIVATED.into(), "true".into());
                }
            }
            true
        }
        WorkloadWrite::ApplyStatus { name, body, .. } => {
            if !named(&world.server.workload, name) {
                return false;
            }
            let Ok(status) = serde_json::from_value::<WorkloadStatus>(body["status"].clone())
            else {
                return false;
            };
            if let Some(w) = world.server.workload.as_mut() {
                // A server-side apply by the admission manager replaces
                // what it owns; conditions merge by type.
                let old = w.status.take().unwrap_or_default();
                let mut merged = status.clone();
                for c in old.conditions {
                    if !merged.conditions.iter().any(|m| m.type_ == c.type_) {
                        merged.conditions.push(c);
                    }
                }
                if body["status"].get("admission").is_none()
                    && body["status"].get("conditions").is_some()
                    && merged
                        .conditions
                        .iter()
                        .any(|c| c.type_ == "QuotaReserved" && c.status == "False")
                {
                    merged.admission = None;
                } else if merged.admission.is_none() {
                    merged.admission = old.admission;
                }
                w.status = Some(merged);
                if !w.has_quota_reservation() {
                    world.facts.admitted_counts = None;
                }
            }
            true
        }
        WorkloadWrite::Adopt { .. } => false,
    };
    if done {
        world.cache.workload = world.server.workload.clone();
        if world.server.workload.is_none() {
            world.facts.admitted_counts = None;
        }
    }
    done
}
