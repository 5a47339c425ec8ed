//! **Apply**: the plan's writes (creates and deletes of Pods and Services,
//! the TTL's delete of the job), expectations raised before the first; the
//! integrations' writes before those ([`integration::WriteHooks`]); the
//! plan's Events.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Resource;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use tracing::Instrument;

use crate::api::constants::event;
use crate::api::defaults::normalize;
use crate::api::types::TFJob;
use crate::runtime::cache::key::ObjectKey;
use crate::runtime::client::namespace_gone::is_namespace_gone;
use crate::runtime::client::span_status::write_span;
use crate::runtime::client::unread;

use crate::runtime::controller::expectations::Expectations;
use crate::runtime::events::{EventRecorder, EventType};
use crate::tfjob::children::creation_events::creation_event;
use crate::tfjob::children::placement::PodPlacement;
use crate::tfjob::children::scheduling_group::PodInGroup;
use crate::tfjob::children::{ChildContext, owner_reference};
use crate::tfjob::kubeflow::messages;
use crate::tfjob::plan::lost_node;
use crate::tfjob::plan::{Action, Plan, PlannedEvent};
use crate::tfjob::status::metrics::JobMetrics;

pub mod error;
pub mod integration;

use error::{SyncError, child_name, event_type, is_status, write_error};
use integration::{Sent, WriteHooks};

/// How many creates or deletes one reconcile issues at once. A 500-worker
/// job would take seconds one write at a time; the API server takes these
/// in parallel easily.
pub const DEFAULT_WRITE_CONCURRENCY: usize = 16;

/// What the apply phase writes through.
#[derive(Clone)]
pub struct Applier {
    /// The manager's client: the job's own delete, live node reads.
    pub client: kube::Client,
    /// Pod and Service control: creates, deletes of the job's Pods and
    /// Services. A client of its own, so with `--kube-api-qps` it has its
    /// own token bucket, as client-go gives Kubeflow's PodControl and
    /// ServiceControl their own clientset.
    pub children: kube::Client,
    /// The job cache: a create is skipped once its job is gone.
    pub jobs: crate::runtime::cache::store::Indexer<TFJob>,
    pub expectations: Expectations,
    pub recorder: EventRecorder,
    pub metrics: JobMetrics,
    /// Appended to `.svc` in TF_CONFIG addresses (the Pods are built here).
    pub cluster_domain: Option<String>,
    pub write_concurrency: usize,
    /// See [`crate::tfjob::controller::Options::fold_create_events`].
    pub fold_create_events: bool,
    /// See [`crate::tfjob::controller::Options::force_delete_on_any_node`].
    pub force_delete_on_any_node: bool,
    /// The integrations' writers, in their registration order.
    pub integrations: Vec<Arc<dyn WriteHooks>>,
}

impl Applier {
    /// Records the pass's Events on the job: they explain its writes, so
    /// they go first.
    pub fn record(&self, job: &TFJob, events: &[PlannedEvent]) {
        for e in events {
            self.recorder
                .publish(job, event_type(e.warning), &e.reason, e.message.clone());
        }
    }

    /// The integrations' writes, in registration order, before any Pod.
    async fn send_integration_writes(&self, job: &TFJob, plan: &Plan, namespace: &str) -> Sent {
        let writes: Vec<_> = plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Integration(w) => Some(w),
                _ => None,
            })
            .collect();
        let mut all = Sent {
            pods_may_follow: true,
            result: Ok(()),
        };
        for writer in &self.integrations {
            let sent = writer.send(job, &writes, namespace).await;
            all.pods_may_follow &= sent.pods_may_follow;
            if all.result.is_ok() {
                all.result = sent.result;
            }
        }
        all
    }

    pub async fn apply(
        &self,
        key: &ObjectKey,
        job: &Arc<TFJob>,
        plan: &Plan,
    ) -> Result<(), SyncError> {
        let namespace = job.metadata.namespace.clone().unwrap_or_default();
        // What planned Pods are built from, once per apply (the plan did
        // the same; a bad spec plans no Pod).
        let job_name = job.metadata.name.as_deref().unwrap_or_default();
        let spec = normalize(job_name, &job.spec).ok();
        let owner = owner_reference(job);
        let pods = PodWrites {
            api: Api::namespaced(self.children.clone(), &namespace),
            children: spec.as_ref().zip(owner.as_ref()).map(|(spec, owner)| {
                ChildContext::new(
                    job_name,
                    &namespace,
                    spec,
                    owner,
                    self.cluster_domain.as_deref(),
                )
            }),
            group: plan.pod_group.clone(),
            placements: &plan.placements,
        };
        let services: Api<Service> = Api::namespaced(self.children.clone(), &namespace);
        let jobs: Api<TFJob> = Api::namespaced(self.client.clone(), &namespace);

        // The integrations' writes before the Pods, one at a time (a gang's
        // group before its Pods: without it, no Pod of this pass is
        // created, and the next pass tries again).
        let Sent {
            pods_may_follow,
            result: group_result,
        } = self.send_integration_writes(job, plan, &namespace).await;
        let sent = |action: &&Action| {
            !matches!(action, Action::Integration(_))
                && (pods_may_follow || !matches!(action, Action::CreatePod { .. }))
        };

        // Raise expectations before the first write, so an informer event
        // that beats our bookkeeping still finds it.
        let creates = plan
            .actions
            .iter()
            .filter(sent)
            .filter(|a| matches!(a, Action::CreatePod { .. } | Action::CreateService(_)))
            .count();
        let deleted_uids: Vec<&str> = plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::DeletePod { uid: Some(uid), .. } => Some(uid.as_str()),
                _ => None,
            })
            .collect();
        if creates > 0 {
            self.expectations.expect_creations(key, creates);
        }
        if !deleted_uids.is_empty() {
            self.expectations.expect_deletions(key, &deleted_uids);
        }

        let writes: Vec<_> = plan
            .actions
            .iter()
            .enumerate()
            .filter(|(_, action)| sent(action))
            .map(|(i, action)| {
                let is_create =
                    matches!(action, Action::CreatePod { .. } | Action::CreateService(_));
                let write = self.apply_one(key, job, action, &pods, &services, &jobs);
                async move {
                    // Checked as each create starts, not once per pass: a
                    // big job's creates take many rounds of
                    // `write_concurrency`, and a job deleted meanwhile must
                    // not keep getting children the garbage collector then
                    // removes (issue #29: 8 of 40 Workers were created
                    // after their job's delete on a loaded machine).
                    if is_create && !self.still_wanted(key, job) {
                        self.expectations.creation_failed(key);
                        return (i, Ok(None));
                    }
                    (i, write.await)
                }
            })
            .collect();
        let mut results: Vec<(usize, Result<Option<Created>, SyncError>)> =
            futures::stream::iter(writes)
                .buffer_unordered(self.write_concurrency.max(1))
                .collect()
                .await;
        // In the plan's order (replica type, then index), whatever order the
        // concurrent writes finished in.
        results.sort_by_key(|(i, _)| *i);
        let (mut created_pods, mut created_services) = (Vec::new(), Vec::new());
        let mut first_error = group_result;
        for (_, result) in results {
            match result {
                Ok(Some(Created::Pod(name))) => created_pods.push(name),
                Ok(Some(Created::Service(name))) => created_services.push(name),
                Ok(None) => {}
                Err(e) => {
                    if first_error.is_ok() {
                        first_error = Err(e);
                    }
                }
            }
        }
        self.record_creates(job, &created_pods, &created_services);
        first_error
    }

    /// False once the cache shows `job` deleted, being deleted, or replaced
    /// by a namesake: the rest of its pass's creates are skipped.
    fn still_wanted(&self, key: &ObjectKey, job: &TFJob) -> bool {
        self.jobs.get(key).is_some_and(|cached| {
            cached.metadata.uid == job.metadata.uid && cached.metadata.deletion_timestamp.is_none()
        })
    }

    /// Kubeflow's Events for the children this pass created, in the plan's
    /// order: one `SuccessfulCreatePod` "Created pod: <name>" per Pod, one
    /// `SuccessfulCreateService` per Service (the recorder combines them as
    /// client-go would, from the tenth). Under `--fold-create-events`, one
    /// Event per kind for the whole pass instead
    /// ([`crate::tfjob::children::creation_events`]).
    fn record_creates(&self, job: &TFJob, pods: &[String], services: &[String]) {
        for (kind, reason, names) in [
            ("pod", event::SUCCESSFUL_CREATE_POD, pods),
            ("service", event::SUCCESSFUL_CREATE_SERVICE, services),
        ] {
            if self.fold_create_events {
                if let Some((message, count)) = creation_event(kind, names) {
                    self.recorder
                        .publish_counted(job, EventType::Normal, reason, message, count);
                }
            } else {
                for name in names {
                    self.recorder
                        .normal(job, reason, messages::created_child(kind, name));
                }
            }
        }
    }

    /// Creates one child and returns its name if it was created (the pass
    /// records the Events for its creates, [`Self::record_creates`]); a
    /// failure gets its own Warning at once. A child that
    /// already exists (409) was created by an earlier run whose informer had
    /// not caught up: it will be observed (or adopted) like any other, so it
    /// is not an error; its expectation is lowered since no create will be seen.
    #[allow(clippy::too_many_arguments)] // one create: where, what, and how to report it
    async fn create_child<K, B>(
        &self,
        key: &ObjectKey,
        job: &TFJob,
        api: &Api<K>,
        name: &str,
        child: &B,
        kind: &'static str,
        failed: &'static str,
    ) -> Result<Option<String>, SyncError>
    where
        K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
        B: serde::Serialize + std::fmt::Debug,
    {
        let name = name.to_owned();
        let span = write_span("create", kind, &name);
        // The created child is not decoded: the informer brings it.
        match unread::create(&self.children, api, &PostParams::default(), child)
            .instrument(span)
            .await
        {
            Ok(()) => Ok(Some(name)),
            Err(e) if is_status(&e, 409) => {
                self.expectations.creation_failed(key);
                Ok(None)
            }
            // The namespace is being deleted (or is gone): every create in
            // it fails, and the job's own delete is on its way. Not an error
            // to retry with backoff, and the expectation stays raised, so
            // the job tries no more creates until it is dropped (as the Job
            // and ReplicaSet controllers do on `NamespaceTerminating`).
            Err(e) if is_namespace_gone(&e) => {
                tracing::debug!(job = %key, %kind, child = %name, "not created: the namespace is being deleted");
                Ok(None)
            }
            Err(source) => {
                self.expectations.creation_failed(key);
                // Throttling is not the user's failure to read about, and an
                // Event would be one more request to a server that asked for fewer.
                if !is_status(&source, 429) {
                    self.recorder
                        .warning(job, failed, messages::error_creating(&source));
                }
                Err(write_error("create", kind, name, source))
            }
        }
    }

    async fn apply_one(
        &self,
        key: &ObjectKey,
        job: &Arc<TFJob>,
        action: &Action,
        pods: &PodWrites<'_>,
        services: &Api<Service>,
        jobs: &Api<TFJob>,
    ) -> Result<Option<Created>, SyncError> {
        let job = job.as_ref();
        match action {
            Action::CreatePod { rtype, index, name } => {
                // Built now, not when planned: see `Action::CreatePod`.
                let built = pods.children.as_ref().and_then(|c| c.pod(*rtype, *index));
                let Some(mut pod) = built else {
                    tracing::warn!(job = %key, pod = %name, "the planned Pod could not be built");
                    return Ok(None);
                };
                if let Some(placement) = pods.placements.get(rtype) {
                    placement.apply(&mut pod);
                }
                let created = match pods.group.as_deref() {
                    Some(group) => {
                        let body = PodInGroup { pod: &pod, group };
                        self.create_child(
                            key,
                            job,
                            &pods.api,
                            name,
                            &body,
                            "pod",
                            event::FAILED_CREATE_POD,
                        )
                        .await
                    }
                    None => {
                        self.create_child(
                            key,
                            job,
                            &pods.api,
                            name,
                            &pod,
                            "pod",
                            event::FAILED_CREATE_POD,
                        )
                        .await
                    }
                };
                created.map(|c| c.map(Created::Pod))
            }
            Action::CreateService(svc) => {
                let failed = event::FAILED_CREATE_SERVICE;
                let name = child_name(svc.as_ref());
                self.create_child(key, job, services, &name, svc.as_ref(), "service", failed)
                    .await
                    .map(|c| c.map(Created::Service))
            }
            Action::DeletePod { name, uid, force } => self
                .delete_pod(key, job, &pods.api, name, uid.as_deref(), *force)
                .await
                .map(|()| None),
            Action::DeleteService { name } => self
                .delete_service(job, services, name)
                .await
                .map(|()| None),
            Action::DeleteJob => self.delete_job(job, jobs).await.map(|()| None),
            // Sent before the others, by `send_integration_writes`.
            Action::Integration(_) => Ok(None),
        }
    }

    async fn delete_pod(
        &self,
        key: &ObjectKey,
        job: &TFJob,
        pods: &Api<Pod>,
        name: &str,
        uid: Option<&str>,
        force: bool,
    ) -> Result<(), SyncError> {
        if force && !self.force_delete_on_any_node {
            let node = lost_node::node_state(&self.client, pods, name).await;
            if !node.allows_force_delete() {
                tracing::warn!(job = %key, pod = name, ?node, "stuck Pod not force-deleted: its node may still run it");
                self.recorder
                    .warning(job, event::STUCK_POD_KEPT, node.why_kept(name));
                if let Some(uid) = uid {
                    self.expectations.deletion_failed(key, uid);
                }
                return Ok(());
            }
        }
        let params = DeleteParams {
            preconditions: uid.map(|uid| Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            grace_period_seconds: force.then_some(0),
            ..DeleteParams::default()
        };
        match pods
            .delete(name, &params)
            .instrument(write_span("delete", "pod", name))
            .await
        {
            Ok(_) if force => {
                self.recorder.warning(
                    job,
                    event::FORCE_DELETED_POD,
                    format!(
                        "Force-deleted pod: {name} (disrupted, and still terminating after its grace period: its node stopped responding and is gone or out of service)"
                    ),
                );
                Ok(())
            }
            Ok(_) => {
                self.recorder.normal(
                    job,
                    event::SUCCESSFUL_DELETE_POD,
                    messages::deleted_child("pod", name),
                );
                Ok(())
            }
            // Already gone (404) or replaced by a newer Pod (409 on the
            // uid precondition): nothing left to delete.
            Err(e) if is_status(&e, 404) || is_status(&e, 409) => {
                if let Some(uid) = uid {
                    self.expectations.deletion_failed(key, uid);
                }
                Ok(())
            }
            Err(source) => {
                if let Some(uid) = uid {
                    self.expectations.deletion_failed(key, uid);
                }
                self.recorder.warning(
                    job,
                    event::FAILED_DELETE_POD,
                    messages::error_deleting(&source),
                );
                Err(write_error("delete", "pod", name.to_owned(), source))
            }
        }
    }

    async fn delete_service(
        &self,
        job: &TFJob,
        services: &Api<Service>,
        name: &str,
    ) -> Result<(), SyncError> {
        match services
            .delete(name, &DeleteParams::default())
            .instrument(write_span("delete", "service", name))
            .await
        {
            Ok(_) => {
                self.recorder.normal(
                    job,
                    event::SUCCESSFUL_DELETE_SERVICE,
                    messages::deleted_child("service", name),
                );
                Ok(())
            }
            Err(e) if is_status(&e, 404) => Ok(()),
            Err(source) => {
                self.recorder.warning(
                    job,
                    event::FAILED_DELETE_SERVICE,
                    messages::error_deleting(&source),
                );
                Err(write_error("delete", "service", name.to_owned(), source))
            }
        }
    }

    async fn delete_job(&self, job: &TFJob, jobs: &Api<TFJob>) -> Result<(), SyncError> {
        let name = job.metadata.name.clone().unwrap_or_default();
        let params = DeleteParams {
            preconditions: job.metadata.uid.clone().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        match jobs
            .delete(&name, &params)
            .instrument(write_span("delete", "tfjob", &name))
            .await
        {
            Ok(_) => {
                self.metrics
                    .record_deleted(job.metadata.namespace.as_deref().unwrap_or_default());
                self.recorder.normal(
                    job,
                    event::SUCCESSFUL_DELETE_JOB,
                    messages::deleted_job(&name),
                );
                Ok(())
            }
            Err(e) if is_status(&e, 404) => Ok(()),
            Err(source) => {
                self.recorder.warning(
                    job,
                    event::FAILED_DELETE_JOB,
                    messages::error_deleting(&source),
                );
                Err(write_error("delete", "tfjob", name, source))
            }
        }
    }
}

/// Where a job's Pods are written: the API, and what a planned Pod is
/// built from when its create is sent (see `Action::CreatePod`).
struct PodWrites<'a> {
    api: Api<Pod>,
    children: Option<ChildContext<'a>>,
    /// The PodGroup the created Pods join ([`Plan::pod_group`]).
    group: Option<String>,
    /// What each replica type's Pods get from an admission
    /// ([`Plan::placements`]).
    placements: &'a std::collections::BTreeMap<crate::api::constants::ReplicaType, PodPlacement>,
}

/// A child one write created, by name (for the pass's creation Events).
enum Created {
    Pod(String),
    Service(String),
}
