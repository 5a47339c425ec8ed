//! Table-style tests of the plan, covering Kubeflow's own status cases
//! (`status_test.go`, `job_test.go`, `pod_test.go`) and the bugs we fix.
//!
//! This file is the harness (a [`World`]: a job and the Pods and Services
//! around it, planned as the reconcile would); the tests are beside it in
//! `plan_tests/`, by what they test: a job's life, failures and restarts,
//! the deadline and cleanup, Pods in trouble, bad specs and Kubeflow's CRD.
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::constants::ReplicaType;
use crate::api::defaults::normalize;
use crate::api::fixtures::TfJobFixture;
use crate::api::types::{ReplicaStatus, TFJob, TFJobStatus};
use crate::tfjob::children::cached::{CachedPod, CachedService};
use crate::tfjob::children::{ChildContext, owner_reference};
use crate::tfjob::integrations::gang::GangScheduling;
use crate::tfjob::integrations::gang::plan::GangPass;
use crate::tfjob::kubeflow::schema::StatusSchema;
use crate::tfjob::plan::bookkeeping::{ANNOTATION as BOOKKEEPING, Bookkeeping};
use crate::tfjob::plan::{Action, Observed, Plan, PlanConfig, plan};

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
        // As the operator runs before its discovery answers: the gang
        // integration registered, PodGroups not (yet) served.
        let gang = GangPass {
            setting: GangScheduling::Unavailable,
            group: None,
        };
        plan(
            &Observed {
                job: &self.job,
                pods: &self.pods,
                services: &self.services,
                integrations: &[&gang],
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

mod deadline_and_cleanup;
mod failures;
mod lifecycle;
mod pods_in_trouble;
mod spec_and_schema;
