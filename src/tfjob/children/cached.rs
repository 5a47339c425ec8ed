//! What the controller caches of its children: a Pod's metadata and the part
//! of its status the controller reads, a Service's metadata. Nothing else.
//!
//! The controller writes children's specs (from the TFJob's templates) but
//! never reads them back; adoption and release patch metadata only. So the
//! Pod and Service informers decode into these two types instead of
//! k8s-openapi's `Pod` and `Service`: the same kind on the wire (list, watch,
//! protobuf table), fewer fields in memory. Decoding skips the spec's bytes
//! rather than building the spec and dropping it, and the structs leave out
//! the room `Option<PodSpec>` (1,440 bytes) and `Option<ServiceSpec>` plus
//! the Service status (464 bytes) reserve inline even when empty: 7.6 KB per
//! job of 4 Pods and 4 Services (`docs/scale.md`, "Memory per job").
//! client-go's metadata-only informers and `SetTransform` are the same idea.
//!
//! A new reader of a child must find its field here (and, for a Pod's status,
//! keep it in [`slim_status`]).
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{Metadata, NamespaceResourceScope, Resource};
use serde::Deserialize;

use crate::runtime::client::protobuf::schema::{Message, ProtobufKind};

/// A child Pod as cached: its metadata, and its status as [`slim_status`]
/// leaves it. Decodes from a Pod's JSON or protobuf; the spec is skipped.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct CachedPod {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub status: Option<PodStatus>,
}

/// A child Service as cached: its metadata only.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct CachedService {
    #[serde(default)]
    pub metadata: ObjectMeta,
}

/// Implements what the runtime needs to list, watch and decode a view `$view`
/// of the built-in kind `$kind`: the kind's API identity (so URLs, owner
/// references and logs name the real kind), its metadata, and its protobuf
/// table.
macro_rules! view_of {
    ($view:ty, $kind:ty) => {
        impl Resource for $view {
            const API_VERSION: &'static str = <$kind as Resource>::API_VERSION;
            const GROUP: &'static str = <$kind as Resource>::GROUP;
            const KIND: &'static str = <$kind as Resource>::KIND;
            const VERSION: &'static str = <$kind as Resource>::VERSION;
            const URL_PATH_SEGMENT: &'static str = <$kind as Resource>::URL_PATH_SEGMENT;
            type Scope = NamespaceResourceScope;
        }

        impl Metadata for $view {
            type Ty = ObjectMeta;

            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }

            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }

        impl ProtobufKind for $view {
            const MESSAGE: &'static Message = <$kind as ProtobufKind>::MESSAGE;
        }
    };
}

view_of!(CachedPod, Pod);
view_of!(CachedService, Service);

impl From<Pod> for CachedPod {
    /// The Pod as the informer would cache it.
    fn from(pod: Pod) -> Self {
        let mut cached = Self {
            metadata: pod.metadata,
            status: pod.status,
        };
        slim_status(&mut cached);
        cached
    }
}

impl From<Service> for CachedService {
    fn from(service: Service) -> Self {
        Self {
            metadata: service.metadata,
        }
    }
}

/// The restarts the kubelet made in place (OnFailure / Always), over the
/// containers and init containers, as Kubeflow sums them.
pub fn restart_count(status: Option<&PodStatus>) -> i32 {
    let sum = |cs: Option<&Vec<ContainerStatus>>| {
        cs.into_iter()
            .flatten()
            .map(|c| c.restart_count)
            .sum::<i32>()
    };
    sum(status.and_then(|s| s.container_statuses.as_ref()))
        + sum(status.and_then(|s| s.init_container_statuses.as_ref()))
}

/// The Pod informer's transform: of the status, keeps only what
/// [`crate::tfjob::plan`] and [`crate::tfjob::plan::abnormal`] read: the phase and reason, each
/// container's name, state and restart count (exit codes, in-place restarts,
/// waiting reasons and messages), and of the conditions the newest one (what
/// [`crate::tfjob::plan::abnormal`] reports when no container has a status) and any
/// `DisruptionTarget` ([`crate::tfjob::plan::lost_node::stuck_on_lost_node`]). The rest (the
/// other conditions, IPs, images, QoS class) is ~0.8 KB per Pod, 3 KB per
/// job, for nothing; a new reader of the Pod's status must keep its field
/// here.
pub fn slim_status(pod: &mut CachedPod) {
    let Some(status) = pod.status.take() else {
        return;
    };
    let mut conditions = status.conditions.unwrap_or_default();
    // The newest as `abnormal` picks it: `max_by_key` takes the last of
    // equal maxima, and retaining keeps the order, so it picks it again.
    let newest = conditions
        .iter()
        .enumerate()
        .max_by_key(|(_, c)| c.last_transition_time.as_ref().map(|t| t.0))
        .map(|(i, _)| i);
    let mut i = 0;
    conditions.retain(|c| {
        let keep = Some(i) == newest || c.type_ == "DisruptionTarget";
        i += 1;
        keep
    });
    // Decoded from protobuf, the Vec is exact for all of them: give the
    // dropped ones' room back.
    conditions.shrink_to_fit();
    let containers = |statuses: Option<Vec<ContainerStatus>>| {
        statuses.map(|statuses| {
            statuses
                .into_iter()
                .map(|c| ContainerStatus {
                    name: c.name,
                    state: c.state,
                    restart_count: c.restart_count,
                    ..ContainerStatus::default()
                })
                .collect()
        })
    };
    pod.status = Some(PodStatus {
        phase: status.phase,
        reason: status.reason,
        conditions: (!conditions.is_empty()).then_some(conditions),
        container_statuses: containers(status.container_statuses),
        init_container_statuses: containers(status.init_container_statuses),
        ..PodStatus::default()
    });
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::{
        Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
        ContainerStateWaiting, EnvVar, HostIP, PodCondition, PodIP, PodSpec, ServicePort,
        ServiceSpec,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::tfjob::plan::abnormal::abnormal;
    use crate::tfjob::plan::lost_node::stuck_on_lost_node;

    fn at(second: i64) -> Option<Time> {
        Some(Time(jiff::Timestamp::from_second(second).expect("a time")))
    }

    fn condition(type_: &str, status: &str, second: i64) -> PodCondition {
        PodCondition {
            type_: type_.into(),
            status: status.into(),
            reason: (status != "True").then(|| format!("Not{type_}")),
            message: (status != "True").then(|| format!("{type_} is {status}")),
            last_transition_time: at(second),
            ..PodCondition::default()
        }
    }

    fn container(state: ContainerState, restarts: i32) -> ContainerStatus {
        ContainerStatus {
            name: "tensorflow".into(),
            image: "tensorflow/tensorflow:2.16.1".into(),
            image_id: "docker-pullable://tensorflow/tensorflow@sha256:0123".into(),
            container_id: Some("containerd://4567".into()),
            ready: true,
            restart_count: restarts,
            state: Some(state),
            ..ContainerStatus::default()
        }
    }

    /// A Pod as the API server sends it: a spec, every condition a kubelet
    /// (or KWOK) sets, addresses, images.
    fn pod(phase: &str, conditions: Vec<PodCondition>, state: Option<ContainerState>) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some("j-worker-0".into());
        pod.spec = Some(PodSpec {
            containers: vec![Container {
                name: "tensorflow".into(),
                env: Some(vec![EnvVar {
                    name: "TF_CONFIG".into(),
                    value: Some(r#"{"cluster":{"worker":["j-worker-0.ns.svc:2222"]}}"#.into()),
                    ..EnvVar::default()
                }]),
                ..Container::default()
            }],
            ..PodSpec::default()
        });
        pod.status = Some(PodStatus {
            phase: Some(phase.into()),
            conditions: Some(conditions),
            container_statuses: state.map(|s| vec![container(s, 2)]),
            host_ip: Some("10.0.0.1".into()),
            host_ips: Some(vec![HostIP {
                ip: "10.0.0.1".into(),
            }]),
            pod_ip: Some("10.244.0.7".into()),
            pod_ips: Some(vec![PodIP {
                ip: "10.244.0.7".into(),
            }]),
            qos_class: Some("BestEffort".into()),
            start_time: at(1),
            ..PodStatus::default()
        });
        pod
    }

    fn running() -> Pod {
        let up = ContainerState {
            running: Some(ContainerStateRunning { started_at: at(3) }),
            ..ContainerState::default()
        };
        let conditions = [
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled",
        ]
        .iter()
        .map(|t| condition(t, "True", 2))
        .collect();
        pod("Running", conditions, Some(up))
    }

    #[test]
    fn a_cached_pod_is_far_smaller_than_a_pod() {
        // What leaving the specs out saves, per object, before any heap.
        let pod = std::mem::size_of::<Pod>() - std::mem::size_of::<CachedPod>();
        let service = std::mem::size_of::<Service>() - std::mem::size_of::<CachedService>();
        assert!(pod >= 1_400, "{pod} bytes saved per Pod");
        assert!(service >= 400, "{service} bytes saved per Service");
    }

    #[test]
    fn a_pods_json_decodes_into_its_metadata_and_status_and_names_the_kind() {
        let json = serde_json::to_value(running()).expect("a Pod encodes");
        let cached: CachedPod = serde_json::from_value(json).expect("a Pod decodes");
        assert_eq!(cached.metadata.name.as_deref(), Some("j-worker-0"));
        assert_eq!(
            cached.status.and_then(|s| s.phase).as_deref(),
            Some("Running")
        );
        // URLs, owner references and logs name the real kind.
        assert_eq!(
            <CachedPod as kube::Resource>::url_path(&(), Some("ns")),
            <Pod as kube::Resource>::url_path(&(), Some("ns"))
        );
        assert_eq!(<CachedService as kube::Resource>::kind(&()), "Service");
        let service = Service {
            metadata: ObjectMeta {
                name: Some("j-worker-0".into()),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceSpec {
                ports: Some(vec![ServicePort {
                    port: 2222,
                    ..ServicePort::default()
                }]),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        };
        let json = serde_json::to_value(&service).expect("a Service encodes");
        let cached: CachedService = serde_json::from_value(json).expect("a Service decodes");
        assert_eq!(cached, CachedService::from(service));
    }

    #[test]
    fn a_cached_pod_keeps_one_condition_and_no_addresses_or_images() {
        let status = CachedPod::from(running()).status.expect("a status");
        assert_eq!(status.conditions.map(|c| c.len()), Some(1));
        assert_eq!(
            (status.pod_ip, status.host_ips, status.qos_class),
            (None, None, None)
        );
        let c = &status.container_statuses.expect("container statuses")[0];
        assert_eq!((c.image.as_str(), c.container_id.as_deref()), ("", None));
    }

    #[test]
    fn the_controller_reads_the_same_from_a_slim_pod_as_from_the_full_one() {
        let oom = ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 137,
                reason: Some("OOMKilled".into()),
                message: Some("out of memory".into()),
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        };
        let backoff = ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("ImagePullBackOff".into()),
                message: Some("Back-off pulling image".into()),
            }),
            ..ContainerState::default()
        };
        let unschedulable = |newest_is_true: bool| {
            let mut conditions = vec![
                condition("PodScheduled", "False", 5),
                condition("Initialized", "True", 4),
            ];
            if newest_is_true {
                conditions.push(condition("Ready", "True", 5));
            }
            pod("Pending", conditions, None)
        };
        let mut disrupted = running();
        disrupted.metadata.deletion_timestamp = at(10);
        if let Some(s) = disrupted.status.as_mut() {
            s.conditions
                .get_or_insert_default()
                .insert(0, condition("DisruptionTarget", "True", 1));
        }
        let mut evicted = pod("Failed", Vec::new(), None);
        if let Some(s) = evicted.status.as_mut() {
            s.reason = Some("Evicted".into());
        }
        let pods = [
            running(),
            pod("Failed", vec![condition("Ready", "False", 6)], Some(oom)),
            pod(
                "Pending",
                vec![condition("Ready", "False", 6)],
                Some(backoff),
            ),
            unschedulable(false),
            unschedulable(true),
            disrupted,
            evicted,
        ];
        let now = jiff::Timestamp::from_second(20).expect("a time");
        let wait = Duration::from_secs(5);
        for full in pods {
            // Unslimmed: the Pod's status as decoded, next to the slim one.
            let whole = CachedPod {
                metadata: full.metadata.clone(),
                status: full.status.clone(),
            };
            let slim = CachedPod::from(full);
            let (f, s) = (whole.status.as_ref(), slim.status.as_ref());
            let name = whole.metadata.name.as_deref();
            assert_eq!(abnormal(&slim), abnormal(&whole), "{name:?}");
            assert_eq!(
                stuck_on_lost_node(&slim, now, wait),
                stuck_on_lost_node(&whole, now, wait)
            );
            assert_eq!(s.map(|s| &s.phase), f.map(|s| &s.phase));
            assert_eq!(s.map(|s| &s.reason), f.map(|s| &s.reason));
            let read = |s: Option<&PodStatus>| {
                s.and_then(|s| s.container_statuses.clone())
                    .unwrap_or_default()
                    .into_iter()
                    .map(|c| (c.name, c.state, c.restart_count))
                    .collect::<Vec<_>>()
            };
            assert_eq!(read(s), read(f));
        }
    }
}
