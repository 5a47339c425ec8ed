//! Table-style tests of the plan, covering Kubeflow's own status cases
//! (`status_test.go`, `job_test.go`, `pod_test.go`) and the bugs we fix.
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodCondition, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::bookkeeping::{ANNOTATION as BOOKKEEPING, Bookkeeping};
use super::cached::{CachedPod, CachedService};
use super::children::{ChildContext, owner_reference};
use super::plan::{Action, Observed, Plan, PlanConfig, plan, succeeded_indexes};
use super::schema::StatusSchema;
use crate::api::constants::ReplicaType;
use crate::api::defaults::normalize;
use crate::api::fixtures::TfJobFixture;
use crate::api::types::{
    CleanPodPolicy, ReplicaStatus, RestartPolicy, SuccessPolicy, TFJob, TFJobStatus,
};

const NOW: i64 = 1_800_000_000;

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(secs).unwrap()
}

/// A job and the world around it.
struct World {
    job: TFJob,
    pods: Vec<Arc<CachedPod>>,
    services: Vec<Arc<CachedService>>,
    schema: StatusSchema,
}

impl World {
    fn new(f: TfJobFixture) -> Self {
        Self {
            job: f.uid("uid-1").build(),
            pods: Vec::new(),
            services: Vec::new(),
            schema: StatusSchema::Ours,
        }
    }

    /// Under Kubeflow's CRD: the stored status loses what its schema lacks.
    fn kubeflow_crd(mut self) -> Self {
        self.schema = StatusSchema::Kubeflow;
        self
    }

    /// Stores bookkeeping as the reconcile's annotation write would.
    fn store_books(&mut self, books: &Bookkeeping) {
        self.job
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(BOOKKEEPING.into(), books.to_annotation());
    }

    fn without_pod(mut self, name: &str) -> Self {
        self.pods
            .retain(|p| p.metadata.name.as_deref() != Some(name));
        self
    }

    fn child_pod(&self, rtype: ReplicaType, index: i32) -> Pod {
        let name = self.job.metadata.name.clone().unwrap();
        let spec = normalize(&name, &self.job.spec).unwrap();
        let owner = owner_reference(&self.job).unwrap();
        let ctx = ChildContext::new(&name, "default", &spec, &owner, None);
        let mut pod = ctx.pod(rtype, index).unwrap();
        pod.metadata.uid = Some(format!("pod-{}-{index}", rtype.lower()));
        pod
    }

    /// Adds a Pod in `phase`; `exit` sets the tensorflow container's exit code.
    fn pod(mut self, rtype: ReplicaType, index: i32, phase: &str, exit: Option<i32>) -> Self {
        let mut pod = self.child_pod(rtype, index);
        pod.status = Some(PodStatus {
            phase: Some(phase.into()),
            container_statuses: exit.map(|code| {
                vec![ContainerStatus {
                    name: "tensorflow".into(),
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code: code,
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        });
        self.pods.push(Arc::new(CachedPod::from(pod)));
        self
    }

    /// Replaces the Pod of a slot with a new incarnation (a new UID).
    fn incarnation(
        mut self,
        rtype: ReplicaType,
        index: i32,
        n: u32,
        phase: &str,
        exit: Option<i32>,
    ) -> Self {
        let name = format!("j-{}-{index}", rtype.lower());
        self = self.without_pod(&name).pod(rtype, index, phase, exit);
        if let Some(last) = self.pods.last_mut() {
            let mut pod = (**last).clone();
            pod.metadata.uid = Some(format!("{name}-incarnation-{n}"));
            *last = Arc::new(pod);
        }
        self
    }

    fn running(self, rtype: ReplicaType, index: i32) -> Self {
        self.pod(rtype, index, "Running", None)
    }

    fn all_running(mut self) -> Self {
        let name = self.job.metadata.name.clone().unwrap();
        let counts: Vec<(ReplicaType, i32)> = normalize(&name, &self.job.spec)
            .unwrap()
            .replicas
            .iter()
            .map(|(rtype, r)| (*rtype, r.replicas))
            .collect();
        for (rtype, replicas) in counts {
            for i in 0..replicas {
                self = self.running(rtype, i);
            }
        }
        self.with_services()
    }

    fn with_services(mut self) -> Self {
        let name = self.job.metadata.name.clone().unwrap();
        let spec = normalize(&name, &self.job.spec).unwrap();
        let owner = owner_reference(&self.job).unwrap();
        let ctx = ChildContext::new(&name, "default", &spec, &owner, None);
        self.services.clear();
        for (rtype, r) in &spec.replicas {
            for i in 0..r.replicas {
                self.services.push(Arc::new(CachedService::from(
                    ctx.service(*rtype, i).unwrap(),
                )));
            }
        }
        self
    }

    fn status(mut self, f: impl FnOnce(&mut TFJobStatus)) -> Self {
        let mut s = self.job.status.take().unwrap_or_default();
        f(&mut s);
        self.job.status = Some(s);
        self
    }

    fn started(self, secs_ago: i64) -> Self {
        self.status(|s| s.start_time = Some(Time(at(NOW - secs_ago))))
    }

    fn plan(&self) -> Plan {
        plan(
            &Observed {
                job: &self.job,
                pods: &self.pods,
                services: &self.services,
                now: at(NOW),
            },
            &PlanConfig {
                status_schema: self.schema,
                ..PlanConfig::default()
            },
        )
    }

    /// Plans, then feeds the bookkeeping and status back as the next pass
    /// would see them (under Kubeflow's CRD the plan's status is already
    /// what the server would keep).
    fn settle(mut self) -> (Self, Plan) {
        let p = self.plan();
        if let Some(books) = &p.bookkeeping {
            self.store_books(books);
        }
        self.job.status = Some(p.status.clone());
        (self, p)
    }
}

fn last_condition(p: &Plan) -> (&str, &str, &str) {
    let c = p.status.conditions.last().unwrap();
    (
        c.type_.as_str(),
        c.status.as_str(),
        c.reason.as_deref().unwrap_or(""),
    )
}

fn has(p: &Plan, type_: &str) -> bool {
    p.status
        .conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

fn created_pods(p: &Plan) -> Vec<String> {
    p.actions
        .iter()
        .filter_map(|a| match a {
            Action::CreatePod { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect()
}

fn deleted_pods(p: &Plan) -> Vec<String> {
    let mut names: Vec<String> = p
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::DeletePod { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect();
    names.sort();
    names
}

fn replica(p: &Plan, rtype: ReplicaType) -> ReplicaStatus {
    p.status
        .replica_statuses
        .get(rtype.as_str())
        .cloned()
        .unwrap_or_default()
}

use ReplicaType::{Chief, Evaluator, Master, PS, Worker};

#[test]
fn a_new_job_is_created_and_gets_every_pod_and_service() {
    let p = World::new(TfJobFixture::new("mnist").chief(1).ps(2).workers(4)).plan();
    assert_eq!(last_condition(&p), ("Created", "True", "TFJobCreated"));
    assert_eq!(created_pods(&p).len(), 7);
    assert!(created_pods(&p).contains(&"mnist-ps-1".to_owned()));
    let services = p
        .actions
        .iter()
        .filter(|a| matches!(a, Action::CreateService(_)))
        .count();
    assert_eq!(services, 7);
    assert_eq!(p.status.start_time, Some(Time(at(NOW))));
    assert!(
        p.status.replica_statuses.contains_key("Worker"),
        "replicaStatuses is always written"
    );
}

#[test]
fn chief_running_makes_the_job_running() {
    let p = World::new(TfJobFixture::new("j").chief(1).workers(2))
        .all_running()
        .plan();
    assert_eq!(last_condition(&p), ("Running", "True", "TFJobRunning"));
    assert_eq!(replica(&p, Chief).active, 1);
    assert_eq!(replica(&p, Worker).active, 2);
    assert!(p.actions.is_empty(), "{:?}", p.actions);
}

#[test]
fn pending_chief_is_not_running_yet() {
    let w = World::new(TfJobFixture::new("j").chief(1).workers(1))
        .pod(Chief, 0, "Pending", None)
        .running(Worker, 0)
        .with_services();
    assert_eq!(last_condition(&w.plan()).0, "Created");
}

#[test]
fn master_counts_as_chief() {
    let w = World::new(TfJobFixture::new("j").master(1).workers(1))
        .pod(Master, 0, "Succeeded", Some(0))
        .running(Worker, 0)
        .with_services();
    assert_eq!(
        last_condition(&w.plan()),
        ("Succeeded", "True", "TFJobSucceeded")
    );
}

#[test]
fn chief_success_succeeds_the_job_and_folds_active_into_succeeded() {
    let w = World::new(TfJobFixture::new("j").chief(1).ps(1).workers(2))
        .pod(Chief, 0, "Succeeded", Some(0))
        .running(PS, 0)
        .running(Worker, 0)
        .running(Worker, 1)
        .with_services();
    let p = w.plan();
    assert_eq!(last_condition(&p), ("Succeeded", "True", "TFJobSucceeded"));
    assert_eq!(p.status.completion_time, Some(Time(at(NOW))));
    assert_eq!(replica(&p, Worker).succeeded, 2);
    assert_eq!(replica(&p, Worker).active, 0);
    assert!(
        deleted_pods(&p).is_empty(),
        "cleanPodPolicy None keeps Pods"
    );
    assert!(p.events.iter().any(|e| e.reason == "TFJobSucceeded"));
}

#[test]
fn worker_success_does_not_succeed_a_job_with_a_chief() {
    let w = World::new(TfJobFixture::new("j").chief(1).workers(1))
        .running(Chief, 0)
        .pod(Worker, 0, "Succeeded", Some(0))
        .with_services();
    assert_eq!(last_condition(&w.plan()).0, "Running");
}

#[test]
fn without_a_chief_worker_zero_decides_success() {
    let w = World::new(TfJobFixture::new("j").workers(3))
        .pod(Worker, 0, "Succeeded", Some(0))
        .running(Worker, 1)
        .running(Worker, 2)
        .with_services();
    assert_eq!(last_condition(&w.plan()).0, "Succeeded");
}

#[test]
fn all_workers_policy_waits_for_every_worker() {
    let f = TfJobFixture::new("j")
        .workers(2)
        .success_policy(SuccessPolicy::AllWorkers);
    let w = World::new(f.clone())
        .pod(Worker, 0, "Succeeded", Some(0))
        .running(Worker, 1)
        .with_services();
    assert_eq!(last_condition(&w.plan()).0, "Running");
    let w = World::new(f)
        .pod(Worker, 0, "Succeeded", Some(0))
        .pod(Worker, 1, "Succeeded", Some(0))
        .with_services();
    assert_eq!(last_condition(&w.plan()).0, "Succeeded");
}

#[test]
fn a_ps_only_job_never_succeeds() {
    let w = World::new(TfJobFixture::new("j").ps(1))
        .pod(PS, 0, "Succeeded", Some(0))
        .with_services();
    assert_eq!(last_condition(&w.plan()).0, "Created");
}

#[test]
fn never_policy_failure_fails_the_job_naming_the_replica_type() {
    let w = World::new(TfJobFixture::new("j").chief(1).workers(2))
        .running(Chief, 0)
        .running(Worker, 0)
        .pod(Worker, 1, "Failed", Some(1))
        .with_services();
    let p = w.plan();
    assert_eq!(last_condition(&p), ("Failed", "True", "TFJobFailed"));
    let msg = p.status.conditions.last().unwrap().message.clone().unwrap();
    assert!(msg.contains("1 Worker replica(s) failed"), "{msg}");
    assert_eq!(replica(&p, Worker).failed, 1);
    assert!(created_pods(&p).is_empty());
}

#[test]
fn evaluator_failure_fails_the_job_too() {
    let w = World::new(TfJobFixture::new("j").chief(1).evaluators(1))
        .running(Chief, 0)
        .pod(Evaluator, 0, "Failed", Some(2))
        .with_services();
    assert_eq!(last_condition(&w.plan()).0, "Failed");
}

#[test]
fn exit_code_137_restarts_by_recreating_the_pod() {
    let w = World::new(
        TfJobFixture::new("j")
            .workers(2)
            .restart_policy(RestartPolicy::ExitCode),
    )
    .running(Worker, 0)
    .pod(Worker, 1, "Failed", Some(137))
    .with_services();
    let (w, p) = w.settle();
    assert_eq!(deleted_pods(&p), ["j-worker-1"]);
    assert_eq!(replica(&p, Worker).restarts, 1);
    // As Kubeflow: a restarting Pod counts as failed until it is replaced.
    assert_eq!(replica(&p, Worker).failed, 1);
    assert!(
        p.events
            .iter()
            .any(|e| e.reason == "TFJobRestarting" && e.warning)
    );
    assert!(
        p.events
            .iter()
            .any(|e| e.reason == "ExitedWithCode" && e.message.contains("137"))
    );
    // Restarting replaces Running, even though worker 0 still runs.
    assert_eq!(last_condition(&p).0, "Restarting");
    assert!(!has(&p, "Running"));
    // Next pass: the Pod is gone, so it is re-created and the count is kept.
    let p = w.without_pod("j-worker-1").plan();
    assert_eq!(created_pods(&p), ["j-worker-1"]);
    assert_eq!(replica(&p, Worker).restarts, 1);
}

#[test]
fn restarting_shows_while_nothing_runs() {
    let w = World::new(
        TfJobFixture::new("j")
            .workers(1)
            .ps(1)
            .restart_policy(RestartPolicy::OnFailure),
    )
    .pod(Worker, 0, "Failed", Some(1))
    .pod(PS, 0, "Pending", None)
    .with_services();
    assert_eq!(
        last_condition(&w.plan()),
        ("Restarting", "True", "TFJobRestarting")
    );
}

#[test]
fn exit_code_1_under_exit_code_policy_is_permanent() {
    let w = World::new(
        TfJobFixture::new("j")
            .workers(2)
            .restart_policy(RestartPolicy::ExitCode),
    )
    .running(Worker, 0)
    .pod(Worker, 1, "Failed", Some(1))
    .with_services();
    let p = w.plan();
    assert_eq!(last_condition(&p).0, "Failed");
    assert!(
        deleted_pods(&p).is_empty(),
        "a failed Pod is kept for its logs"
    );
}

#[test]
fn exit_code_restarts_count_against_the_backoff_limit() {
    let f = TfJobFixture::new("j")
        .workers(2)
        .restart_policy(RestartPolicy::ExitCode)
        .backoff_limit(2);
    let with_restarts = |n: i32| {
        World::new(f.clone())
            .status(|s| {
                s.replica_statuses.insert(
                    "Worker".into(),
                    ReplicaStatus {
                        restarts: n,
                        ..Default::default()
                    },
                );
            })
            .running(Worker, 0)
            .pod(Worker, 1, "Failed", Some(137))
            .with_services()
    };
    let p = with_restarts(1).plan();
    assert_eq!(
        deleted_pods(&p),
        ["j-worker-1"],
        "the second restart is allowed"
    );
    let p = with_restarts(2).plan();
    assert_eq!(last_condition(&p), ("Failed", "True", "TFJobFailed"));
    let msg = p.status.conditions.last().unwrap().message.clone().unwrap();
    assert!(msg.contains("backoff limit"), "{msg}");
    // The running worker is stopped; nothing is re-created.
    assert_eq!(deleted_pods(&p), ["j-worker-0"]);
    assert!(created_pods(&p).is_empty());
}

#[test]
fn backoff_limit_zero_fails_on_the_first_retryable_failure() {
    let w = World::new(
        TfJobFixture::new("j")
            .workers(1)
            .restart_policy(RestartPolicy::ExitCode)
            .backoff_limit(0),
    )
    .pod(Worker, 0, "Failed", Some(143))
    .with_services();
    assert_eq!(last_condition(&w.plan()).0, "Failed");
}

#[test]
fn in_place_restarts_count_against_the_backoff_limit() {
    let mut w = World::new(
        TfJobFixture::new("j")
            .workers(1)
            .restart_policy(RestartPolicy::OnFailure)
            .backoff_limit(3),
    )
    .running(Worker, 0)
    .with_services();
    let set_restarts = |w: &mut World, n: i32| {
        let mut pod = (*w.pods[0]).clone();
        pod.status.as_mut().unwrap().container_statuses = Some(vec![ContainerStatus {
            name: "tensorflow".into(),
            restart_count: n,
            ..Default::default()
        }]);
        w.pods[0] = Arc::new(pod);
    };
    // As Kubeflow and Kubernetes Jobs: in-place restarts fail the job when
    // they reach the limit.
    set_restarts(&mut w, 2);
    assert_eq!(last_condition(&w.plan()).0, "Running");
    set_restarts(&mut w, 3);
    let p = w.plan();
    assert_eq!(last_condition(&p).0, "Failed");
    assert_eq!(
        p.status.conditions.last().unwrap().message.as_deref(),
        Some("Job j has failed because it has reached the specified backoff limit")
    );
}

#[test]
fn deadline_fails_the_job_and_stops_only_unfinished_pods() {
    let w = World::new(TfJobFixture::new("j").workers(3).active_deadline_seconds(5))
        .started(10)
        .running(Worker, 0)
        .pod(Worker, 1, "Succeeded", Some(0))
        .pod(Worker, 2, "Pending", None)
        .with_services();
    let p = w.plan();
    assert_eq!(last_condition(&p).0, "Failed");
    let msg = p.status.conditions.last().unwrap().message.clone().unwrap();
    assert!(msg.contains("deadline"), "{msg}");
    assert_eq!(deleted_pods(&p), ["j-worker-0", "j-worker-2"]);
}

#[test]
fn deadline_not_yet_passed_asks_for_a_requeue_at_the_deadline() {
    let w = World::new(
        TfJobFixture::new("j")
            .workers(2)
            .active_deadline_seconds(60),
    )
    .started(10)
    .all_running();
    let p = w.plan();
    assert_eq!(last_condition(&p).0, "Running");
    assert_eq!(p.requeue_after, Some(Duration::from_secs(50)));
}

#[test]
fn a_terminating_pod_is_neither_failed_nor_replaced_yet() {
    let mut w = World::new(TfJobFixture::new("j").workers(2))
        .running(Worker, 0)
        .pod(Worker, 1, "Running", None);
    let mut pod = (*w.pods[1]).clone();
    pod.metadata.deletion_timestamp = Some(Time(at(NOW - 1)));
    w.pods[1] = Arc::new(pod);
    let p = w.with_services().plan();
    assert_eq!(replica(&p, Worker).failed, 0);
    assert_eq!(replica(&p, Worker).active, 1);
    assert!(created_pods(&p).is_empty());
    assert_eq!(last_condition(&p).0, "Running");
}

#[test]
fn an_evicted_pod_is_replaced_without_counting_a_failure() {
    let mut w = World::new(TfJobFixture::new("j").workers(2).backoff_limit(0))
        .running(Worker, 0)
        .pod(Worker, 1, "Failed", None);
    let mut pod = (*w.pods[1]).clone();
    let status = pod.status.as_mut().unwrap();
    status.reason = Some("Evicted".into());
    status.conditions = Some(vec![PodCondition {
        type_: "DisruptionTarget".into(),
        status: "True".into(),
        ..Default::default()
    }]);
    w.pods[1] = Arc::new(pod);
    let p = w.with_services().plan();
    assert_eq!(deleted_pods(&p), ["j-worker-1"]);
    assert_eq!(replica(&p, Worker).restarts, 0);
    assert_eq!(replica(&p, Worker).failed, 0);
    assert_eq!(last_condition(&p).0, "Running");
}

#[test]
fn a_succeeded_index_is_not_rerun_after_its_pod_is_gone() {
    let w = World::new(TfJobFixture::new("j").chief(1).workers(2))
        .running(Chief, 0)
        .pod(Worker, 0, "Succeeded", Some(0))
        .running(Worker, 1)
        .with_services();
    let (mut w, p) = w.settle();
    assert_eq!(succeeded_indexes(&p.status, Worker), [0].into());
    w.pods
        .retain(|p| p.metadata.name.as_deref() != Some("j-worker-0"));
    let p = w.plan();
    assert!(created_pods(&p).is_empty(), "{:?}", created_pods(&p));
    assert_eq!(replica(&p, Worker).succeeded, 1);
}

#[test]
fn scaling_down_deletes_the_extra_pod_and_service_and_scaling_up_creates() {
    let mut w = World::new(TfJobFixture::new("j").workers(3)).all_running();
    w.job
        .spec
        .tf_replica_specs
        .get_mut("Worker")
        .unwrap()
        .replicas = Some(2);
    let p = w.plan();
    assert_eq!(deleted_pods(&p), ["j-worker-2"]);
    assert!(p.actions.contains(&Action::DeleteService {
        name: "j-worker-2".into()
    }));
    w.job
        .spec
        .tf_replica_specs
        .get_mut("Worker")
        .unwrap()
        .replicas = Some(4);
    let p = w.plan();
    assert_eq!(created_pods(&p), ["j-worker-3"]);
}

#[test]
fn suspending_deletes_children_and_resuming_resets_start_time() {
    let w = World::new(TfJobFixture::new("j").workers(2).suspend(true))
        .started(100)
        .all_running();
    let w = w.status(|s| {
        crate::tfjob::conditions::set(
            s,
            "Running",
            true,
            "TFJobRunning",
            String::new(),
            &Time(at(NOW - 50)),
        );
    });
    let (mut w, p) = w.settle();
    assert!(has(&p, "Suspended"));
    assert!(!has(&p, "Running"));
    assert_eq!(deleted_pods(&p).len(), 2);
    assert_eq!(
        p.actions
            .iter()
            .filter(|a| matches!(a, Action::DeleteService { .. }))
            .count(),
        2
    );
    assert_eq!(replica(&p, Worker).active, 0);
    w.pods.clear();
    w.services.clear();
    w.job.spec.run_policy.suspend = Some(false);
    let p = w.plan();
    assert!(!has(&p, "Suspended"));
    assert_eq!(p.status.start_time, Some(Time(at(NOW))));
    assert_eq!(created_pods(&p).len(), 2);
    assert!(p.events.iter().any(|e| e.reason == "TFJobResumed"));
}

#[test]
fn clean_pod_policy_all_deletes_every_pod_and_service_on_success() {
    let w = World::new(
        TfJobFixture::new("j")
            .chief(1)
            .ps(1)
            .clean_pod_policy(CleanPodPolicy::All),
    )
    .pod(Chief, 0, "Succeeded", Some(0))
    .running(PS, 0)
    .with_services();
    let p = w.plan();
    assert_eq!(deleted_pods(&p), ["j-chief-0", "j-ps-0"]);
    assert_eq!(
        p.actions
            .iter()
            .filter(|a| matches!(a, Action::DeleteService { .. }))
            .count(),
        2
    );
}

#[test]
fn clean_pod_policy_running_deletes_running_and_pending_pods_only() {
    let w = World::new(
        TfJobFixture::new("j")
            .chief(1)
            .ps(1)
            .workers(1)
            .clean_pod_policy(CleanPodPolicy::Running),
    )
    .pod(Chief, 0, "Succeeded", Some(0))
    .running(PS, 0)
    .pod(Worker, 0, "Pending", None)
    .with_services();
    assert_eq!(deleted_pods(&w.plan()), ["j-ps-0", "j-worker-0"]);
}

#[test]
fn ttl_deletes_the_job_once_it_has_passed_and_requeues_before() {
    let finished = |ago: i64, ttl: i32| {
        World::new(
            TfJobFixture::new("j")
                .workers(1)
                .ttl_seconds_after_finished(ttl),
        )
        .status(|s| {
            crate::tfjob::conditions::set(
                s,
                "Succeeded",
                true,
                "TFJobSucceeded",
                String::new(),
                &Time(at(NOW - ago)),
            );
            s.completion_time = Some(Time(at(NOW - ago)));
        })
    };
    assert!(finished(10, 5).plan().actions.contains(&Action::DeleteJob));
    let p = finished(10, 60).plan();
    assert!(!p.actions.contains(&Action::DeleteJob));
    assert_eq!(p.requeue_after, Some(Duration::from_secs(50)));
}

#[test]
fn a_job_managed_by_multikueue_is_left_alone() {
    let mut w = World::new(TfJobFixture::new("j").workers(2));
    w.job.spec.run_policy.managed_by = Some("kueue.x-k8s.io/multikueue".into());
    let p = w.plan();
    assert!(!p.manage);
    assert!(p.actions.is_empty());
}

#[test]
fn an_invalid_spec_fails_with_a_warning_and_creates_nothing() {
    let mut w = World::new(TfJobFixture::new("j").workers(1));
    let worker = w.job.spec.tf_replica_specs["Worker"].clone();
    w.job
        .spec
        .tf_replica_specs
        .insert("Launcher".into(), worker);
    let p = w.plan();
    assert_eq!(
        last_condition(&p),
        ("Failed", "True", "TFJobFailedValidation")
    );
    assert!(
        p.events
            .iter()
            .any(|e| e.warning && e.message.contains("Launcher"))
    );
    assert!(p.actions.is_empty());
}

#[test]
fn an_unchanged_running_job_plans_the_same_status_and_no_actions() {
    let (w, first) = World::new(TfJobFixture::new("j").chief(1).workers(2))
        .all_running()
        .settle();
    let second = w.plan();
    assert_eq!(second.status, first.status);
    assert!(second.actions.is_empty());
    assert!(second.events.is_empty());
}

#[test]
fn dynamic_worker_failures_do_not_fail_the_job() {
    let w = World::new(
        TfJobFixture::new("j")
            .chief(1)
            .workers(2)
            .dynamic_worker(true),
    )
    .running(Chief, 0)
    .running(Worker, 0)
    .pod(Worker, 1, "Failed", Some(1))
    .with_services();
    let p = w.plan();
    assert_eq!(last_condition(&p).0, "Running");
    assert_eq!(replica(&p, Worker).failed, 1);
}

#[test]
fn a_job_being_deleted_plans_nothing() {
    let mut w = World::new(TfJobFixture::new("j").workers(2));
    w.job.metadata.deletion_timestamp = Some(Time(at(NOW)));
    let p = w.plan();
    assert!(!p.manage && p.actions.is_empty());
}

#[test]
fn a_restart_is_counted_once_when_the_pass_runs_again_before_the_delete() {
    // The operator wrote the bookkeeping, then died before deleting the Pod:
    // the next run sees the same failed Pod and must not count it again.
    let w = World::new(
        TfJobFixture::new("j")
            .workers(2)
            .restart_policy(RestartPolicy::ExitCode),
    )
    .running(Worker, 0)
    .pod(Worker, 1, "Failed", Some(137))
    .with_services();
    let mut first = w.plan();
    let books = first
        .bookkeeping
        .take()
        .expect("the restart is written first");
    assert_eq!(books.restarts_of(Worker), 1);
    let mut w = w;
    w.store_books(&books);
    let again = w.plan();
    assert_eq!(
        deleted_pods(&again),
        ["j-worker-1"],
        "the delete is retried"
    );
    assert_eq!(replica(&again, Worker).restarts, 1, "counted once");
    assert_eq!(again.bookkeeping, None, "nothing new to write");
    // Once the Pod is gone, its UID is forgotten with the next change.
    let gone = w.without_pod("j-worker-1").plan();
    assert_eq!(replica(&gone, Worker).restarts, 1);
}

#[test]
fn with_a_backoff_limit_of_two_two_recreations_run_and_the_third_failure_fails_the_job() {
    let f = TfJobFixture::new("j")
        .chief(1)
        .workers(1)
        .restart_policy(RestartPolicy::ExitCode)
        .backoff_limit(2);
    let mut w = World::new(f).running(Chief, 0).with_services();
    for n in 1..=2u32 {
        let (next, p) = w.incarnation(Worker, 0, n, "Failed", Some(137)).settle();
        assert_eq!(deleted_pods(&p), ["j-worker-0"], "restart {n} runs");
        assert_eq!(replica(&p, Worker).restarts, n as i32);
        w = next;
    }
    let p = w.incarnation(Worker, 0, 3, "Failed", Some(137)).plan();
    assert_eq!(last_condition(&p), ("Failed", "True", "TFJobFailed"));
    assert_eq!(
        replica(&p, Worker).restarts,
        2,
        "the third is not a restart"
    );
    assert!(!deleted_pods(&p).contains(&"j-worker-0".to_owned()));
}

#[test]
fn with_on_failure_the_limit_counts_pod_failures_and_kubelet_restarts_together() {
    // One re-created Pod plus one in-place restart reach a limit of two.
    let f = TfJobFixture::new("j")
        .workers(1)
        .restart_policy(RestartPolicy::OnFailure)
        .backoff_limit(2);
    let (w, p) = World::new(f)
        .incarnation(Worker, 0, 1, "Failed", Some(1))
        .with_services()
        .settle();
    assert_eq!(deleted_pods(&p), ["j-worker-0"]);
    let mut w = w.incarnation(Worker, 0, 2, "Running", None);
    let mut pod = (*w.pods[0]).clone();
    pod.status.as_mut().unwrap().container_statuses = Some(vec![ContainerStatus {
        name: "tensorflow".into(),
        restart_count: 1,
        ..Default::default()
    }]);
    w.pods[0] = Arc::new(pod);
    assert_eq!(last_condition(&w.plan()).0, "Failed");
}

#[test]
fn restart_counts_of_never_pods_and_pods_not_running_do_not_count_against_the_limit() {
    let mut w = World::new(
        TfJobFixture::new("j")
            .workers(2)
            .restart_policy(RestartPolicy::Never)
            .backoff_limit(1),
    )
    .running(Worker, 0)
    .pod(Worker, 1, "Pending", None)
    .with_services();
    for i in 0..2 {
        let mut pod = (*w.pods[i]).clone();
        pod.status.as_mut().unwrap().container_statuses = Some(vec![ContainerStatus {
            name: "tensorflow".into(),
            restart_count: 5,
            ..Default::default()
        }]);
        w.pods[i] = Arc::new(pod);
    }
    assert_eq!(last_condition(&w.plan()).0, "Running");
}

#[test]
fn restarting_stays_until_the_replacement_runs() {
    let w = World::new(
        TfJobFixture::new("j")
            .chief(1)
            .workers(1)
            .restart_policy(RestartPolicy::OnFailure),
    )
    .running(Chief, 0)
    .running(Worker, 0)
    .with_services();
    let (w, p) = w.settle();
    assert_eq!(last_condition(&p).0, "Running");
    let (w, p) = w.incarnation(Worker, 0, 1, "Failed", Some(1)).settle();
    assert_eq!(last_condition(&p).0, "Restarting");
    let (w, p) = w.without_pod("j-worker-0").settle();
    assert_eq!(last_condition(&p).0, "Restarting", "the slot is empty");
    let (w, p) = w.incarnation(Worker, 0, 2, "Pending", None).settle();
    assert_eq!(
        last_condition(&p).0,
        "Restarting",
        "the replacement is pending"
    );
    let (_, p) = w.incarnation(Worker, 0, 2, "Running", None).settle();
    assert_eq!(last_condition(&p).0, "Running");
    assert!(
        !has(&p, "Restarting"),
        "Running and Restarting exclude each other"
    );
}

#[test]
fn under_kubeflows_crd_status_holds_only_its_fields_and_an_unchanged_job_is_not_rewritten() {
    let (w, p) = World::new(TfJobFixture::new("j").workers(2))
        .kubeflow_crd()
        .all_running()
        .settle();
    assert_eq!(p.status.observed_generation, None);
    assert!(
        p.status
            .replica_statuses
            .values()
            .all(|r| r.restarts == 0 && r.succeeded_indexes.is_none())
    );
    let again = w.plan();
    assert_eq!(Some(&again.status), w.job.status.as_ref());
    assert_eq!(again.bookkeeping, None);
}

#[test]
fn under_kubeflows_crd_restarts_and_succeeded_indexes_survive_in_the_annotation() {
    let f = TfJobFixture::new("j")
        .workers(3)
        .restart_policy(RestartPolicy::ExitCode)
        .backoff_limit(1)
        .success_policy(SuccessPolicy::AllWorkers);
    let (w, _) = World::new(f)
        .kubeflow_crd()
        .running(Worker, 0)
        .pod(Worker, 1, "Succeeded", Some(0))
        .incarnation(Worker, 2, 1, "Failed", Some(137))
        .with_services()
        .settle();
    // Worker 1's Pod is garbage-collected and worker 2 fails again: the
    // succeeded index is not re-run, and the second failure passes the limit.
    let p = w
        .without_pod("j-worker-1")
        .incarnation(Worker, 2, 2, "Failed", Some(137))
        .plan();
    assert!(!created_pods(&p).contains(&"j-worker-1".to_owned()));
    assert_eq!(last_condition(&p).0, "Failed");
}

#[test]
fn a_stop_that_failed_after_the_deadline_is_retried_and_active_shows_what_still_runs() {
    let w = World::new(TfJobFixture::new("j").workers(2).active_deadline_seconds(5))
        .started(10)
        .all_running();
    let (w, p) = w.settle();
    assert_eq!(last_condition(&p).0, "Failed");
    assert!(p.bookkeeping.as_ref().is_some_and(|b| b.stop_unfinished));
    // The deletes failed: both Pods still run on the next pass.
    let p = w.plan();
    assert_eq!(deleted_pods(&p), ["j-worker-0", "j-worker-1"]);
    assert_eq!(replica(&p, Worker).active, 2);
}

#[test]
fn exited_with_code_is_recorded_once_for_a_permanent_failure() {
    let w = World::new(
        TfJobFixture::new("j")
            .workers(2)
            .restart_policy(RestartPolicy::ExitCode),
    )
    .running(Worker, 0)
    .pod(Worker, 1, "Failed", Some(1))
    .with_services();
    let exited = |p: &Plan| {
        p.events
            .iter()
            .filter(|e| e.reason == "ExitedWithCode")
            .count()
    };
    let (w, p) = w.settle();
    assert_eq!(exited(&p), 1);
    assert_eq!(exited(&w.plan()), 0, "not again on later passes");
}

#[test]
fn a_scheduling_policy_gets_one_warning_saying_it_is_ignored() {
    let mut job = TfJobFixture::new("j").workers(1).uid("uid-1").build();
    job.spec.run_policy.scheduling_policy = Some(Default::default());
    let w = World {
        job,
        pods: Vec::new(),
        services: Vec::new(),
        schema: StatusSchema::Ours,
    };
    let warned = |p: &Plan| {
        p.events
            .iter()
            .filter(|e| e.reason == "SchedulingPolicyIgnored" && e.warning)
            .count()
    };
    let (w, p) = w.settle();
    assert_eq!(warned(&p), 1);
    assert_eq!(warned(&w.plan()), 0, "once, when the job is first seen");
}

#[test]
fn a_pending_pod_that_cannot_pull_its_image_is_reported_on_the_job() {
    let mut w = World::new(TfJobFixture::new("j").workers(1))
        .pod(Worker, 0, "Pending", None)
        .with_services();
    let mut pod = (*w.pods[0]).clone();
    pod.status.as_mut().unwrap().container_statuses = Some(vec![ContainerStatus {
        name: "tensorflow".into(),
        state: Some(ContainerState {
            waiting: Some(k8s_openapi::api::core::v1::ContainerStateWaiting {
                reason: Some("ErrImagePull".into()),
                message: Some("pull access denied".into()),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }]);
    w.pods[0] = Arc::new(pod);
    let p = w.plan();
    assert!(
        p.events.iter().any(|e| e.warning
            && e.reason == "ErrImagePull"
            && e.message.contains("pull access denied")),
        "{:?}",
        p.events
    );
}

#[test]
fn a_disrupted_pod_stuck_terminating_on_a_lost_node_is_force_deleted_after_the_wait() {
    let mut w = World::new(
        TfJobFixture::new("j")
            .workers(2)
            .restart_policy(RestartPolicy::OnFailure),
    )
    .running(Worker, 0)
    .running(Worker, 1)
    .with_services();
    let mut pod = (*w.pods[1]).clone();
    pod.metadata.deletion_timestamp = Some(Time(at(NOW - 100)));
    pod.status.as_mut().unwrap().conditions = Some(vec![PodCondition {
        type_: "DisruptionTarget".into(),
        status: "True".into(),
        reason: Some("DeletionByTaintManager".into()),
        ..Default::default()
    }]);
    w.pods[1] = Arc::new(pod);
    let plan_with = |wait: Option<u64>| {
        plan(
            &Observed {
                job: &w.job,
                pods: &w.pods,
                services: &w.services,
                now: at(NOW),
            },
            &PlanConfig {
                force_delete_stuck_after: wait.map(Duration::from_secs),
                ..PlanConfig::default()
            },
        )
    };
    let forced = |p: &Plan| {
        p.actions.iter().any(
            |a| matches!(a, Action::DeletePod { name, force: true, .. } if name == "j-worker-1"),
        )
    };
    // Off: the slot stays held (Kubeflow #2072's hang).
    assert!(!forced(&plan_with(None)));
    // 100 s after the grace period with a 300 s wait: not yet, look again in 200 s.
    let early = plan_with(Some(300));
    assert!(!forced(&early));
    assert_eq!(early.requeue_after, Some(Duration::from_secs(200)));
    // With a 60 s wait: now.
    assert!(forced(&plan_with(Some(60))));
}

#[test]
fn a_pod_being_deleted_normally_is_never_force_deleted() {
    let mut w = World::new(TfJobFixture::new("j").workers(1))
        .running(Worker, 0)
        .with_services();
    let mut pod = (*w.pods[0]).clone();
    pod.metadata.deletion_timestamp = Some(Time(at(NOW - 10_000)));
    w.pods[0] = Arc::new(pod);
    let p = plan(
        &Observed {
            job: &w.job,
            pods: &w.pods,
            services: &w.services,
            now: at(NOW),
        },
        &PlanConfig {
            force_delete_stuck_after: Some(Duration::from_secs(1)),
            ..PlanConfig::default()
        },
    );
    assert!(
        !p.actions
            .iter()
            .any(|a| matches!(a, Action::DeletePod { force: true, .. }))
    );
}

#[test]
fn with_a_ttl_of_zero_success_is_written_before_the_job_is_deleted() {
    let w = World::new(
        TfJobFixture::new("j")
            .chief(1)
            .ttl_seconds_after_finished(0),
    )
    .pod(Chief, 0, "Succeeded", Some(0))
    .with_services();
    let (w, p) = w.settle();
    assert_eq!(last_condition(&p).0, "Succeeded");
    assert!(
        !p.actions.contains(&Action::DeleteJob),
        "the success must be written (and counted) first"
    );
    assert_eq!(p.requeue_after, Some(Duration::ZERO));
    assert!(w.plan().actions.contains(&Action::DeleteJob));
}

#[test]
fn a_job_whose_pods_cannot_be_scheduled_says_so_in_its_created_condition() {
    let mut w = World::new(TfJobFixture::new("j").workers(1))
        .pod(Worker, 0, "Pending", None)
        .with_services();
    let mut pod = (*w.pods[0]).clone();
    pod.status.as_mut().unwrap().conditions = Some(vec![PodCondition {
        type_: "PodScheduled".into(),
        status: "False".into(),
        reason: Some("Unschedulable".into()),
        message: Some("0/4 nodes are available: 4 Insufficient nvidia.com/gpu.".into()),
        ..Default::default()
    }]);
    w.pods[0] = Arc::new(pod);
    let created = |p: &Plan| {
        p.status
            .conditions
            .iter()
            .find(|c| c.type_ == "Created")
            .and_then(|c| c.message.clone())
            .unwrap_or_default()
    };
    let (w, p) = w.settle();
    let msg = created(&p);
    assert!(msg.contains("1 Pod(s) cannot be scheduled"), "{msg}");
    assert!(msg.contains("Insufficient nvidia.com/gpu"), "{msg}");
    assert_eq!(last_condition(&p), ("Created", "True", "TFJobCreated"));
    // Scheduled and running: the message is plain again.
    let p = w.incarnation(Worker, 0, 1, "Running", None).plan();
    assert_eq!(created(&p), "TFJob j is created.");
}
