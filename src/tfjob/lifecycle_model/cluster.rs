//! The world of the model: what the API server holds ([`Cluster`]), the
//! operator's cache (a [`Cluster`] that lags it), and what others do: the
//! kubelet runs and ends Pods, someone deletes one, the user edits the job.
use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, EnvVar, Pod, PodStatus, Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::constants::ReplicaType;
use crate::api::fixtures::TfJobFixture;
use crate::api::pod_group::PodGroup;
use crate::api::types::{CleanPodPolicy, RestartPolicy, TFJob};
use crate::tfjob::children::replica_of;
use crate::tfjob::children::scheduling_group::ANNOTATION_POD_GROUP;
use crate::tfjob::integrations::gang::GangScheduling;
use crate::tfjob::integrations::kueue::api::Workload;
use crate::tfjob::integrations::rival::RivalGuard;
use crate::tfjob::plan::bookkeeping::Bookkeeping;

use super::Event;

/// The job a history starts from.
#[derive(Clone, Debug)]
pub(in crate::tfjob) struct Scenario {
    pub chief: bool,
    pub workers: i32,
    /// `cleanPodPolicy`: All, Running, None.
    pub clean: usize,
    /// `restartPolicy`: ExitCode, OnFailure, Never.
    pub restart: usize,
    /// Queued in Kueue (`--kueue=workload`, the queue label).
    pub kueue: bool,
    /// A gang (`schedulingPolicy`, gangs served).
    pub gang: bool,
}

/// What the API server holds; cloned, what the operator's cache shows.
#[derive(Clone, Debug)]
pub(super) struct Cluster {
    pub job: TFJob,
    pub pods: BTreeMap<String, Pod>,
    pub services: BTreeMap<String, Service>,
    pub workload: Option<Workload>,
    pub group: Option<PodGroup>,
    /// Whether the admission's ResourceFlavor is in the cache.
    pub flavor_known: bool,
}

/// Ground truth the planner cannot see, for the invariants.
#[derive(Debug, Default)]
pub(super) struct Facts {
    /// Pods created after the job's finished status was stored.
    pub created_after_finish: Vec<String>,
    /// Pods a pass that found the job finished deleted before that finish
    /// was stored (other than a retryable failure's restart).
    pub deleted_before_finish_stored: Vec<String>,
    /// Slots whose Pod succeeded, once a pass saw it (their index is done).
    pub succeeded_slots: BTreeSet<(ReplicaType, i32)>,
    pub created_for_succeeded: Vec<String>,
    /// Creates of a name the server already had.
    pub duplicate_creates: Vec<String>,
    /// The job's stored status has been finished.
    pub stored_finished: bool,
    /// Podset counts of the Workload's current quota reservation.
    pub admitted_counts: Option<BTreeMap<String, i32>>,
    /// Restarts that happened: retryable failures and in-place restarts.
    pub restarts_happened: i32,
    /// Retryable failed Pods the operator deleted to re-create them.
    pub restart_deletes: i32,
    /// What the last pass saw and did, when it ran to its end.
    pub last_pass: Option<PassFacts>,
    /// Whether the last pass saw another controller's write, was held, wrote.
    pub rival_pass: Option<super::rival::RivalPass>,
}

/// One complete pass, for the invariants that hold right after it.
#[derive(Clone, Debug, Default)]
pub(super) struct PassFacts {
    /// The plan stopped the job (condition `Suspended` True).
    pub stopped: bool,
    /// Its cache showed the user's suspend.
    pub saw_user_suspend: bool,
    /// Its cache showed a queued job whose Workload did not let it run.
    pub saw_not_admitted: bool,
    /// The plan found the job finished.
    pub finished: bool,
    /// It cleaned up a job already finished (its cache said so) under
    /// `cleanPodPolicy: All`, with a cache that showed every Pod and
    /// Service the server had: none may be left after it.
    pub cleaned_up_all: bool,
}

pub(super) struct World {
    pub server: Cluster,
    pub cache: Cluster,
    pub kueue: bool,
    pub gang: GangScheduling,
    pub facts: Facts,
    /// When the operator's process started, and what it remembers of jobs
    /// another controller writes (both renewed when it restarts).
    pub started: Timestamp,
    pub rival: RivalGuard,
    next_uid: u64,
    clock: i64,
    edits: u32,
}

const START: i64 = 1_800_000_000;

fn start_time() -> Timestamp {
    Timestamp::from_second(START).unwrap_or(Timestamp::UNIX_EPOCH)
}

impl World {
    pub fn new(s: &Scenario) -> Self {
        let clean = [
            CleanPodPolicy::All,
            CleanPodPolicy::Running,
            CleanPodPolicy::None,
        ][s.clean % 3];
        let restart = [
            RestartPolicy::ExitCode,
            RestartPolicy::OnFailure,
            RestartPolicy::Never,
        ][s.restart % 3];
        let mut f = TfJobFixture::new("j")
            .uid("job-uid")
            .workers(s.workers)
            .restart_policy(restart)
            .clean_pod_policy(clean)
            .backoff_limit(3);
        f = if s.chief { f.chief(1) } else { f.ps(1) };
        let mut job = f.build();
        job.metadata.resource_version = Some("1".into());
        job.metadata.generation = Some(1);
        if s.kueue {
            job.metadata
                .labels
                .get_or_insert_with(BTreeMap::new)
                .insert("kueue.x-k8s.io/queue-name".into(), "team-a".into());
        }
        if s.gang {
            job.spec.run_policy.scheduling_policy =
                Some(crate::api::types::SchedulingPolicy::default());
        }
        let server = Cluster {
            job,
            pods: BTreeMap::new(),
            services: BTreeMap::new(),
            workload: None,
            group: None,
            flavor_known: true,
        };
        Self {
            cache: server.clone(),
            server,
            kueue: s.kueue,
            gang: if s.gang {
                GangScheduling::Auto
            } else {
                GangScheduling::Unavailable
            },
            facts: Facts::default(),
            started: start_time(),
            rival: RivalGuard::new(start_time(), None),
            next_uid: 0,
            clock: START,
            edits: 0,
        }
    }

    pub fn now(&self) -> Timestamp {
        Timestamp::from_second(self.clock).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    pub fn uid(&mut self, kind: &str) -> String {
        self.next_uid += 1;
        format!("{kind}-{}", self.next_uid)
    }

    pub fn step(&mut self, e: &Event) {
        self.clock += 1;
        self.facts.last_pass = None;
        self.facts.rival_pass = None;
        match e {
            Event::Pass {
                crash_at,
                refuse_status,
            } => super::operator::pass(self, *crash_at, *refuse_status),
            Event::Sync => self.cache = self.server.clone(),
            Event::OperatorRestart => self.operator_restarts(),
            Event::RivalWritesStatus => super::rival::writes_status(self),
            Event::TimePasses => self.clock += 30,
            Event::PodRuns(i) => self.pod_runs(*i),
            Event::PodExits(i, code) => self.pod_exits(*i, *code),
            Event::PodDeleted(i) => {
                if let Some(name) = self.nth_pod(*i)
                    && !self.outcome_unrecorded(&name)
                {
                    self.server.pods.remove(&name);
                    self.settle_group();
                }
            }
            Event::KueueAdmits => super::kueue::reconcile(self),
            Event::KueueEvicts => super::kueue::evict(self),
            Event::FlavorGone => self.server.flavor_known = false,
            Event::FlavorBack => self.server.flavor_known = true,
            Event::UserSuspends => self.edit_job(|job| job.spec.run_policy.suspend = Some(true)),
            Event::UserResumes => self.edit_job(|job| job.spec.run_policy.suspend = Some(false)),
            Event::UserScales(n) => {
                let n = *n;
                self.edit_job(|job| {
                    if let Some(w) = job.spec.tf_replica_specs.get_mut("Worker") {
                        w.replicas = Some(n);
                    }
                });
                // An index above the new count is no longer the job's.
                self.facts.succeeded_slots.retain(|(_, i)| *i < n);
            }
            Event::UserEditsTemplate => {
                self.edits += 1;
                let edit = self.edits.to_string();
                self.edit_job(|job| {
                    let container = job
                        .spec
                        .tf_replica_specs
                        .get_mut("Worker")
                        .and_then(|w| w.template.spec.as_mut())
                        .and_then(|s| s.containers.first_mut());
                    if let Some(c) = container {
                        c.env.get_or_insert_with(Vec::new).push(EnvVar {
                            name: "EDIT".into(),
                            value: Some(edit),
                            ..EnvVar::default()
                        });
                    }
                });
            }
        }
    }

    /// A new operator process: memory lost, caches relisted, a new start.
    pub fn operator_restarts(&mut self) {
        self.cache = self.server.clone();
        self.started = self.now();
        self.rival = RivalGuard::new(self.started, None);
    }

    fn nth_pod(&self, i: usize) -> Option<String> {
        let names: Vec<&String> = self.server.pods.keys().collect();
        (!names.is_empty()).then(|| names[i % names.len()].clone())
    }

    /// A Pod that ended and whose outcome is not stored yet: deleted now,
    /// its outcome would be lost before anything recorded it, so others do
    /// not delete it here. This is what the Job controller's Pod finalizer
    /// (`batch.kubernetes.io/job-tracking`) guarantees it; this operator
    /// has no such finalizer yet (docs/reliability.md, "What it leaves
    /// out"). Stored: the job's finished status, or the index in the
    /// bookkeeping's succeeded indexes, or its restart counted there.
    fn outcome_unrecorded(&self, name: &str) -> bool {
        let Some(pod) = self.server.pods.get(name) else {
            return false;
        };
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if self.facts.stored_finished {
            return false;
        }
        match phase {
            Some("Succeeded") => !replica_of(&pod.metadata).is_some_and(|(rtype, index)| {
                Bookkeeping::of(&self.server.job)
                    .succeeded(rtype.as_str())
                    .contains(&index)
            }),
            Some("Failed") => !pod
                .metadata
                .uid
                .as_ref()
                .is_some_and(|u| Bookkeeping::of(&self.server.job).counted_pods.contains(u)),
            _ => false,
        }
    }

    /// A write of the job's spec or metadata by its user.
    fn edit_job(&mut self, f: impl FnOnce(&mut TFJob)) {
        f(&mut self.server.job);
        bump(&mut self.server.job);
        let generation = self.server.job.metadata.generation.unwrap_or(1);
        self.server.job.metadata.generation = Some(generation + 1);
    }

    fn pod_runs(&mut self, i: usize) {
        let Some(name) = self.nth_pod(i) else { return };
        if let Some(status) = self
            .server
            .pods
            .get_mut(&name)
            .and_then(|p| p.status.as_mut())
            && status.phase.as_deref() == Some("Pending")
        {
            status.phase = Some("Running".into());
            status.container_statuses = Some(vec![container(0, None)]);
        }
    }

    fn pod_exits(&mut self, i: usize, code: i32) {
        let Some(name) = self.nth_pod(i) else { return };
        let Some(pod) = self.server.pods.get_mut(&name) else {
            return;
        };
        let in_place = pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.as_deref())
            .is_some_and(|p| p == "OnFailure" || p == "Always");
        let Some(status) = pod.status.as_mut() else {
            return;
        };
        if status.phase.as_deref() != Some("Running") {
            return;
        }
        let restarts = status
            .container_statuses
            .as_ref()
            .and_then(|c| c.first())
            .map_or(0, |c| c.restart_count);
        if code != 0 && in_place {
            // The kubelet restarts the container; the Pod stays Running.
            status.container_statuses = Some(vec![container(restarts + 1, None)]);
            self.facts.restarts_happened += 1;
            return;
        }
        status.phase = Some(if code == 0 { "Succeeded" } else { "Failed" }.into());
        status.container_statuses = Some(vec![container(restarts, Some(code))]);
        if code >= 128 {
            self.facts.restarts_happened += 1;
        }
    }

    /// A PodGroup deleted while Pods that joined it remain stays (its
    /// protection finalizer) until they are gone.
    pub fn settle_group(&mut self) {
        let deleting = self
            .server
            .group
            .as_ref()
            .is_some_and(|g| g.metadata.deletion_timestamp.is_some());
        let joined = self.server.pods.values().any(|p| {
            p.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(ANNOTATION_POD_GROUP))
        });
        if deleting && !joined {
            self.server.group = None;
        }
    }

    /// Remembers the slots a pass saw succeed.
    /// Only an index the job (as the pass saw it) still has counts: one
    /// scaled away before it succeeded is no longer the job's.
    pub fn saw_pods(&mut self) {
        let workers = self
            .cache
            .job
            .spec
            .tf_replica_specs
            .get("Worker")
            .and_then(|w| w.replicas)
            .unwrap_or(1);
        for pod in self.cache.pods.values() {
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            let succeeded = phase == Some("Succeeded");
            if succeeded
                && let Some((rtype, index)) = replica_of(&pod.metadata)
                && (rtype != ReplicaType::Worker || index < workers)
            {
                self.facts.succeeded_slots.insert((rtype, index));
            }
        }
    }

    pub fn stamp(&self) -> Time {
        Time(self.now())
    }
}

fn container(restart_count: i32, exit: Option<i32>) -> ContainerStatus {
    ContainerStatus {
        name: "tensorflow".into(),
        restart_count,
        state: exit.map(|exit_code| ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code,
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

/// A new resourceVersion, as any write of the object gets.
pub(super) fn bump(job: &mut TFJob) {
    let rv: u64 = job
        .metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    job.metadata.resource_version = Some((rv + 1).to_string());
}

/// A Pod as the server holds it right after its create.
pub(super) fn pending(mut pod: Pod, uid: String) -> Pod {
    pod.metadata.uid = Some(uid);
    pod.status = Some(PodStatus {
        phase: Some("Pending".into()),
        ..PodStatus::default()
    });
    pod
}
