//! Wiring the TFJob controller: informers (one shared watch per kind),
//! indexes, expectation observers, the reconciler and the workqueue-driven
//! controller, registered with the manager.
//!
//! sample-controller's `NewController` + `main.go`, and controller-runtime's
//! `ctrl.NewControllerManagedBy(mgr).For(&TFJob{}).Owns(&Pod{}).Owns(&Service{})`.
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus, Service};

use crate::api::TFJob;
use crate::api::constants::LABEL_JOB_NAME;
use crate::runtime::controller::{Action, Controller, ControllerError, ReconcileError, Reconciler};
use crate::runtime::expectations::Expectations;
use crate::runtime::manager::Manager;
use crate::runtime::store::label_index_fn;
use crate::runtime::{FactoryError, InformerFactory, SharedInformer, Transform, WatchConfig};

use super::metrics::JobMetrics;
use super::observer::ExpectationsObserver;
use super::plan::PlanConfig;
use super::read_your_writes::WrittenStatus;
use super::reconcile::{JOB_NAME_INDEX, SyncError, TfJobReconciler};
use super::schema::StatusSchema;
use super::status_batch::DeferredStatus;

/// The event source name on Events we write (Kubeflow's).
pub const COMPONENT: &str = "tfjob-controller";

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Watch one namespace, or all.
    pub namespace: Option<String>,
    pub workers: usize,
    pub cluster_domain: Option<String>,
    pub write_concurrency: usize,
    /// The installed CRD's status schema ([`super::schema`]).
    pub status_schema: StatusSchema,
    /// See [`PlanConfig::force_delete_stuck_after`].
    pub force_delete_stuck_after: Option<std::time::Duration>,
}

/// Why the controller could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Informers(#[from] FactoryError),
    #[error(transparent)]
    Controller(#[from] ControllerError),
}

/// The informers the controller reads from.
pub struct Informers {
    pub jobs: SharedInformer<TFJob>,
    pub pods: SharedInformer<Pod>,
    pub services: SharedInformer<Service>,
}

/// Creates the informers: TFJobs, and only the Pods and Services that carry
/// the job-name label — unrelated Pods in the cluster are never cached
/// (Kubeflow caches every Pod in scope) — cached without their `spec`.
pub fn informers(
    factory: &InformerFactory,
    namespace: Option<&str>,
) -> Result<Informers, FactoryError> {
    // Children are cached without their `spec`. The controller reads a
    // child's metadata (name, labels, owner references, deletion) and a
    // Pod's status, never a spec: it writes specs (from the TFJob's
    // templates) but does not read them back, and adoption and release patch
    // metadata only. A worker Pod's spec is most of its size (its TF_CONFIG
    // alone lists every replica's address); client-go's `SetTransform` is
    // the same idea.
    let slim_pod: Transform<Pod> = Arc::new(slim_pod);
    let no_service_spec: Transform<Service> = Arc::new(|svc| svc.spec = None);
    factory.set_transform(slim_pod)?;
    factory.set_transform(no_service_spec)?;
    let scope = |label: Option<&str>| WatchConfig {
        namespace: namespace.map(str::to_owned),
        label_selector: label.map(str::to_owned),
        ..WatchConfig::default()
    };
    let pods = factory.informer::<Pod>(scope(Some(LABEL_JOB_NAME)));
    let services = factory.informer::<Service>(scope(Some(LABEL_JOB_NAME)));
    pods.add_index(JOB_NAME_INDEX, label_index_fn(LABEL_JOB_NAME));
    services.add_index(JOB_NAME_INDEX, label_index_fn(LABEL_JOB_NAME));
    Ok(Informers {
        jobs: factory.informer::<TFJob>(scope(None)),
        pods,
        services,
    })
}

/// A child Pod as cached: without its `spec` (see [`informers`]) and with
/// only the part of its status the controller reads: the phase and reason,
/// each container's name, state and restart count ([`super::plan`]: exit
/// codes, in-place restarts; [`super::abnormal`]: waiting and terminated
/// messages), and of the conditions the newest one (what [`super::abnormal`]
/// reports when no container has a status) and any `DisruptionTarget`
/// ([`super::plan::stuck_on_lost_node`]). The rest (the other conditions,
/// IPs, images, QoS class) is ~0.8 KB per Pod, 3 KB per job, for nothing;
/// a new reader of the Pod's status must keep its field here.
fn slim_pod(pod: &mut Pod) {
    pod.spec = None;
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

/// Builds the reconciler and registers the expectation observers. The
/// observers go on the informers *before* the controller's enqueueing
/// handlers, so an observation is counted before its job is reconciled.
pub fn reconciler(
    manager: &mut Manager,
    informers: &Informers,
    options: &Options,
) -> TfJobReconciler {
    let expectations = Expectations::new();
    informers
        .pods
        .add_event_handler(Arc::new(ExpectationsObserver::<Pod>::new(
            expectations.clone(),
        )));
    informers
        .services
        .add_event_handler(Arc::new(ExpectationsObserver::<Service>::new(
            expectations.clone(),
        )));
    TfJobReconciler {
        client: manager.client(),
        jobs: informers.jobs.indexer(),
        pods: informers.pods.indexer(),
        services: informers.services.indexer(),
        expectations,
        recorder: manager.event_recorder(COMPONENT),
        metrics: JobMetrics::register(&manager.registry()),
        plan_config: PlanConfig {
            cluster_domain: options.cluster_domain.clone(),
            status_schema: options.status_schema,
            force_delete_stuck_after: options.force_delete_stuck_after,
        },
        write_concurrency: options.write_concurrency,
        written: WrittenStatus::default(),
        deferred: DeferredStatus::default(),
    }
}

/// Creates the informers and the controller and registers them with the
/// manager: the factory as its cache (started and synced first), the
/// controller as a leader-only runnable.
pub fn setup(
    manager: &mut Manager,
    factory: InformerFactory,
    options: &Options,
) -> Result<(), SetupError> {
    let informers = informers(&factory, options.namespace.as_deref())?;
    let reconciler = reconciler(manager, &informers, options);
    let controller = Controller::builder("tfjob")
        .for_informer(&informers.jobs)
        .owns(&informers.pods)
        .owns(&informers.services)
        .workers(options.workers.max(1))
        .registry(&manager.registry())
        .build(reconciler)?;
    factory.register_metrics(&manager.registry());
    manager.add_cache(factory);
    manager.add_runnable("tfjob-controller", true, move |token| async move {
        controller.run(token).await.map_err(Into::into)
    });
    Ok(())
}

impl ReconcileError for SyncError {
    fn category(&self) -> &'static str {
        SyncError::category(self)
    }
}

impl Reconciler for TfJobReconciler {
    type Error = SyncError;

    async fn reconcile(&self, key: crate::runtime::ObjectKey) -> Result<Action, SyncError> {
        Ok(match self.sync(&key).await? {
            Some(after) => Action::RequeueAfter(after),
            None => Action::Done,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
        HostIP, PodCondition, PodIP,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::tfjob::abnormal::abnormal;
    use crate::tfjob::plan::stuck_on_lost_node;

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

    /// A Pod as the API server sends it: every condition a kubelet (or
    /// KWOK) sets, addresses, images.
    fn pod(phase: &str, conditions: Vec<PodCondition>, state: Option<ContainerState>) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some("j-worker-0".into());
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
    fn a_cached_pod_keeps_one_condition_and_no_addresses_or_images() {
        let mut p = running();
        slim_pod(&mut p);
        let status = p.status.expect("a status");
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
            let mut slim = full.clone();
            slim_pod(&mut slim);
            let (f, s) = (full.status.as_ref(), slim.status.as_ref());
            let name = full.metadata.name.as_deref();
            assert_eq!(abnormal(&slim), abnormal(&full), "{name:?}");
            assert_eq!(
                stuck_on_lost_node(&slim, now, wait),
                stuck_on_lost_node(&full, now, wait)
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
