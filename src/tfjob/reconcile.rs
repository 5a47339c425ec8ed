//! One reconcile of one TFJob: **observe** (the job and its children from the
//! informer caches) → **plan** (pure, [`super::plan`]) → **apply** (API writes,
//! raising expectations first) → **status** (written only when it changed,
//! coalesced over [`super::status_batch::STATUS_BATCH_PERIOD`] unless someone
//! waits for the change).
//!
//! This is sample-controller's `syncHandler` and Kubeflow's `ReconcileJobs`.
//! Two rules it never breaks:
//! - never act on children while expectations are unmet: the cache may not
//!   show our own recent creates yet, and acting would duplicate Pods;
//! - never mutate an object from the cache: objects are `Arc`s shared with
//!   every other reader; the status write sends a modified clone.
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Client, Resource};
use tracing::Instrument;

use crate::api::constants::event;
use crate::api::defaults::normalize;
use crate::api::types::TFJob;
use crate::runtime::cache::key::ObjectKey;
use crate::runtime::cache::object::Object;
use crate::runtime::cache::store::{CONTROLLER_UID_INDEX, Indexer};
use crate::runtime::client::span_status::write_span;
use crate::runtime::client::unread;
use crate::runtime::controller::expectations::{EXPECTATIONS_TTL, Expectations};
use crate::runtime::controller::ownership::{adopt, claim, release};
use crate::runtime::events::EventRecorder;

use super::bookkeeping::{ANNOTATION as BOOKKEEPING_ANNOTATION, Bookkeeping};
use super::cached::{CachedPod, CachedService};
use super::children::{ChildContext, child_selector, owner_reference};
use super::creation_events::creation_event;
use super::metrics::JobMetrics;
use super::plan::{Action, Observed, Plan, PlanConfig, plan};
use super::read_your_writes::WrittenStatus;
use super::status_batch::{DeferredStatus, WriteStatus};

/// How many creates or deletes one reconcile issues at once. A 500-worker
/// job would take seconds one write at a time; the API server takes these
/// in parallel easily.
pub const DEFAULT_WRITE_CONCURRENCY: usize = 16;

/// After a status-write conflict, look again this soon even if no event comes.
const CONFLICT_RETRY: Duration = Duration::from_secs(1);

/// The index (on the Pod and Service informers) of children by job name:
/// how orphans that match a job are found without a scan.
pub const JOB_NAME_INDEX: &str = "job-name";

/// A reconcile that did not complete; the controller retries it with backoff.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("failed to {verb} {kind} {name}")]
    Write {
        verb: &'static str,
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("failed to write the status of {key}")]
    Status {
        key: ObjectKey,
        #[source]
        source: kube::Error,
    },
    #[error("failed to write the bookkeeping annotation of {key}")]
    Bookkeeping {
        key: ObjectKey,
        #[source]
        source: kube::Error,
    },
}

/// The least a throttled reconcile waits, whatever the server's Retry-After
/// says (client-go's `checkWait` waits at least a second, too).
const MIN_THROTTLED_WAIT: Duration = Duration::from_secs(1);

impl SyncError {
    /// How long to wait if the API server throttled this write (429 Too Many
    /// Requests): its Retry-After, at least [`MIN_THROTTLED_WAIT`].
    pub fn throttled(&self) -> Option<Duration> {
        let (SyncError::Write { source, .. }
        | SyncError::Status { source, .. }
        | SyncError::Bookkeeping { source, .. }) = self;
        match source {
            kube::Error::Api(status) if status.code == 429 => {
                let secs = status.details.as_ref().map_or(0, |d| d.retry_after_seconds);
                Some(Duration::from_secs(u64::from(secs)).max(MIN_THROTTLED_WAIT))
            }
            _ => None,
        }
    }

    /// A stable label for metrics.
    pub fn category(&self) -> &'static str {
        match self {
            SyncError::Write { .. } => "write",
            SyncError::Status { source, .. } if is_conflict(source) => "conflict",
            SyncError::Status { .. } => "status",
            SyncError::Bookkeeping { source, .. } if is_conflict(source) => "conflict",
            SyncError::Bookkeeping { .. } => "bookkeeping",
        }
    }
}

fn is_status(err: &kube::Error, code: u16) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == code)
}

fn is_conflict(err: &kube::Error) -> bool {
    is_status(err, 409)
}

/// What [`TfJobReconciler::observe`] found.
enum Observation {
    /// The job was deleted.
    Gone,
    /// Our own writes are not all in the caches yet: act on nothing.
    Waiting,
    Ready {
        /// As stored, or as our last status write left it.
        stored: Arc<TFJob>,
        /// `stored` with the status planned but not written yet over it.
        job: Arc<TFJob>,
        pods: Vec<Arc<CachedPod>>,
        services: Vec<Arc<CachedService>>,
    },
}

/// Everything a reconcile reads and writes through.
#[derive(Clone)]
pub struct TfJobReconciler {
    pub client: Client,
    pub jobs: Indexer<TFJob>,
    pub pods: Indexer<CachedPod>,
    pub services: Indexer<CachedService>,
    pub expectations: Expectations,
    pub recorder: EventRecorder,
    pub metrics: JobMetrics,
    pub plan_config: PlanConfig,
    pub write_concurrency: usize,
    /// Our own recent status writes, for reading them before the cache has them.
    pub written: WrittenStatus,
    /// Status changes planned but waiting to be written with the next ones.
    pub deferred: DeferredStatus,
}

impl TfJobReconciler {
    /// Reconciles (syncs) the job at `key`; `Some(d)` asks to be called again after `d`.
    ///
    /// Each phase runs in a span of its own (`observe`, `plan`, `apply`,
    /// `status`), and each API write in one under it ([`write_span`]): with
    /// traces on, a reconcile's trace shows where its time went.
    pub async fn sync(&self, key: &ObjectKey) -> Result<Option<Duration>, SyncError> {
        let observe = tracing::debug_span!(
            "observe",
            pods = tracing::field::Empty,
            services = tracing::field::Empty
        );
        let (stored, job, pods, services) =
            match self.observe(key).instrument(observe.clone()).await? {
                Observation::Gone => return Ok(None),
                Observation::Waiting => return Ok(Some(EXPECTATIONS_TTL)),
                Observation::Ready {
                    stored,
                    job,
                    pods,
                    services,
                } => (stored, job, pods, services),
            };
        observe.record("pods", pods.len());
        observe.record("services", services.len());

        // Plan (pure).
        let plan = tracing::debug_span!("plan").in_scope(|| {
            plan(
                &Observed {
                    job: &job,
                    pods: &pods,
                    services: &services,
                    now: jiff::Timestamp::now(),
                },
                &self.plan_config,
            )
        });
        if !plan.manage {
            return Ok(None);
        }
        tracing::debug!(
            target: "pipeline",
            stage = "6 reconcile",
            key = %key,
            pods = pods.len(),
            services = services.len(),
            writes = plan.actions.len(),
            status_changed = stored.status.as_ref() != Some(&plan.status),
            requeue_after = ?plan.requeue_after,
            "observed the cache, planned"
        );

        // Bookkeeping first: a restart is on record before its Pod is
        // deleted, so a crash or conflict in between never loses or
        // double-counts it (see `super::bookkeeping`). If it cannot be
        // written, nothing else is: the next pass plans again.
        let (job, stored) = match &plan.bookkeeping {
            Some(books) => match self.write_bookkeeping(key, &job, books).await {
                Ok(updated) => (updated.clone(), updated),
                Err(SyncError::Bookkeeping { source, .. }) if is_conflict(&source) => {
                    tracing::debug!(%key, "job changed since it was cached; waiting for the newer version");
                    return Ok(Some(CONFLICT_RETRY));
                }
                Err(e) => return e.throttled().map(Some).ok_or(e),
            },
            None => (job, stored),
        };

        if re_creates_children(&job, &plan) && !self.still_exists_on_the_server(key, &job).await? {
            return Ok(None);
        }

        // Apply, then write status. Events first: they explain the writes.
        for e in &plan.events {
            self.recorder.publish(
                job.as_ref(),
                event_type(e.warning),
                &e.reason,
                e.message.clone(),
            );
        }
        let applied = self
            .apply(key, &job, &plan)
            .instrument(tracing::debug_span!("apply", writes = plan.actions.len()))
            .await;
        // Throttled (429, e.g. API Priority and Fairness): what was written
        // stays written (expectations count it), the rest waits as long as
        // the server asked, and the status goes out on that pass.
        if let Err(e) = &applied
            && let Some(wait) = e.throttled()
        {
            tracing::debug!(%key, ?wait, "throttled by the API server; trying again when it asked");
            return Ok(Some(wait));
        }
        let status = tracing::debug_span!(
            "status",
            changed = stored.status.as_ref() != Some(&plan.status)
        );
        let status_due = match self
            .write_status(key, &stored, &plan)
            .instrument(status)
            .await
        {
            // Our cached copy was older than the server's: the watch event
            // for the newer version is on its way and will enqueue the job
            // again, so this is not an error worth a backoff. The short
            // requeue is only a safety net.
            Err(SyncError::Status { source, .. }) if is_conflict(&source) => {
                tracing::debug!(%key, "status changed since it was cached; waiting for the newer version");
                applied?;
                return Ok(Some(CONFLICT_RETRY));
            }
            Err(e) if e.throttled().is_some() => {
                applied?;
                return Ok(e.throttled());
            }
            other => other?,
        };
        applied?;
        Ok(match (plan.requeue_after, status_due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }

    /// A live (quorum) read of the job before children are re-created.
    /// Each kind has its own watch, and the Pod watch can run ahead of the
    /// TFJob watch: after a partition heals, garbage collection's deletions
    /// of a deleted job's children can arrive before the job's own DELETED,
    /// and the cache alone would have the job resurrect them. One GET, only
    /// on the replacement path; `false` when the job is gone, was replaced
    /// by a namesake, or is being deleted (its DELETED event will follow).
    async fn still_exists_on_the_server(
        &self,
        key: &ObjectKey,
        job: &TFJob,
    ) -> Result<bool, SyncError> {
        let jobs: Api<TFJob> =
            Api::namespaced(self.client.clone(), key.namespace().unwrap_or_default());
        let live = jobs
            .get_opt(key.name())
            .await
            .map_err(|source| SyncError::Write {
                verb: "read",
                kind: "TFJob",
                name: key.name().to_owned(),
                source,
            })?;
        let exists = live.is_some_and(|live| {
            live.metadata.uid == job.metadata.uid && live.metadata.deletion_timestamp.is_none()
        });
        if !exists {
            tracing::info!(%key, "the job is gone on the server although the cache still has it; not re-creating its children");
        }
        Ok(exists)
    }

    /// The job and its children from the caches, unless the job is gone or
    /// our own recent writes have not reached the caches yet.
    async fn observe(&self, key: &ObjectKey) -> Result<Observation, SyncError> {
        // A job gone from the cache was deleted: its children go with it
        // through garbage collection (they carry its ownerReference).
        let Some(cached) = self.jobs.get(key) else {
            self.expectations.forget(key);
            self.written.forget(key);
            self.deferred.forget(key);
            return Ok(Observation::Gone);
        };
        // As stored (or as our last write left it), and with the status we
        // planned but have not written yet over it, to plan from.
        let stored = self.written.newest(key, cached);
        let job = self.deferred.overlay(key, stored.clone());
        if !self.expectations.satisfied(key) {
            // The informer will enqueue the job again as it observes our
            // writes; the requeue is only a safety net for a lost event.
            tracing::debug!(%key, "expectations not yet met; waiting for the cache");
            return Ok(Observation::Waiting);
        }
        let pods = self.claim_children(&job, &self.pods).await?;
        let services = self.claim_children(&job, &self.services).await?;
        Ok(Observation::Ready {
            stored,
            job,
            pods,
            services,
        })
    }

    /// The job's children: those it controls whose labels still match, plus
    /// matching orphans it adopts; children relabelled away are released
    /// (kubernetes/kubernetes' `ControllerRefManager`, see [`crate::runtime::controller::ownership`]).
    async fn claim_children<K: Object + Resource<Scope = k8s_openapi::NamespaceResourceScope>>(
        &self,
        job: &Arc<TFJob>,
        cache: &Indexer<K>,
    ) -> Result<Vec<Arc<K>>, SyncError> {
        let (Some(name), Some(namespace), Some(uid)) = (
            job.metadata.name.as_deref(),
            job.metadata.namespace.as_deref(),
            job.metadata.uid.as_deref(),
        ) else {
            return Ok(Vec::new());
        };
        let mut candidates = cache.by_index(CONTROLLER_UID_INDEX, uid);
        for obj in cache.by_index(JOB_NAME_INDEX, name) {
            let same_ns = obj.meta().namespace.as_deref() == Some(namespace);
            if same_ns && !candidates.iter().any(|c| c.meta().uid == obj.meta().uid) {
                candidates.push(obj);
            }
        }
        let claimed = claim(&job.metadata, &child_selector(name), candidates);
        let mut owned = claimed.owned;
        if claimed.adopt.is_empty() && claimed.release.is_empty() {
            return Ok(owned);
        }
        let api: Api<K> = Api::namespaced(self.client.clone(), namespace);
        let kind = K::kind(&()).to_lowercase();
        for child in &claimed.release {
            let span = write_span("patch", &kind, &child_name(child.as_ref()));
            if let Err(e) = release(&api, child.as_ref(), uid).instrument(span).await
                && !is_status(&e, 404)
                && !is_status(&e, 409)
            {
                return Err(write_error(
                    "release",
                    "child",
                    child_name(child.as_ref()),
                    e,
                ));
            }
        }
        if claimed.adopt.is_empty() {
            return Ok(owned);
        }
        // Adopt only into a job that really exists and is not being deleted:
        // the cache may be behind a delete, so read the API server directly.
        let jobs: Api<TFJob> = Api::namespaced(self.client.clone(), namespace);
        let fresh = jobs
            .get_opt(name)
            .await
            .map_err(|e| write_error("read", "tfjob", name.to_owned(), e))?;
        let alive = fresh.is_some_and(|j| {
            j.metadata.uid.as_deref() == Some(uid) && j.metadata.deletion_timestamp.is_none()
        });
        let Some(owner) = owner_reference(job).filter(|_| alive) else {
            return Ok(owned);
        };
        for child in claimed.adopt {
            let span = write_span("patch", &kind, &child_name(child.as_ref()));
            match adopt(&api, child.as_ref(), &owner).instrument(span).await {
                Ok(adopted) => {
                    tracing::info!(job = %name, kind = %K::kind(&()), child = %child_name(&adopted), "adopted an orphan");
                    owned.push(Arc::new(adopted));
                }
                Err(e) if is_status(&e, 404) || is_status(&e, 409) || is_status(&e, 422) => {}
                Err(e) => return Err(write_error("adopt", "child", child_name(child.as_ref()), e)),
            }
        }
        Ok(owned)
    }

    async fn apply(&self, key: &ObjectKey, job: &Arc<TFJob>, plan: &Plan) -> Result<(), SyncError> {
        let namespace = job.metadata.namespace.clone().unwrap_or_default();
        // What planned Pods are built from, once per apply (the plan did
        // the same; a bad spec plans no Pod).
        let job_name = job.metadata.name.as_deref().unwrap_or_default();
        let spec = normalize(job_name, &job.spec).ok();
        let owner = owner_reference(job);
        let pods = PodWrites {
            api: Api::namespaced(self.client.clone(), &namespace),
            children: spec.as_ref().zip(owner.as_ref()).map(|(spec, owner)| {
                ChildContext::new(
                    job_name,
                    &namespace,
                    spec,
                    owner,
                    self.plan_config.cluster_domain.as_deref(),
                )
            }),
        };
        let services: Api<Service> = Api::namespaced(self.client.clone(), &namespace);
        let jobs: Api<TFJob> = Api::namespaced(self.client.clone(), &namespace);

        // Raise expectations before the first write, so an informer event
        // that beats our bookkeeping still finds it.
        let creates = plan
            .actions
            .iter()
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
            .map(|(i, action)| {
                let write = self.apply_one(key, job, action, &pods, &services, &jobs);
                async move { (i, write.await) }
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
        let mut first_error = Ok(());
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
        // One Event per kind for the whole pass (see `super::creation_events`).
        for (kind, reason, names) in [
            ("pod", event::SUCCESSFUL_CREATE_POD, &created_pods),
            (
                "service",
                event::SUCCESSFUL_CREATE_SERVICE,
                &created_services,
            ),
        ] {
            if let Some((message, count)) = creation_event(kind, names) {
                self.recorder.publish_counted(
                    job.as_ref(),
                    crate::runtime::events::EventType::Normal,
                    reason,
                    message,
                    count,
                );
            }
        }
        first_error
    }

    /// Creates one child and returns its name if it was created (the pass
    /// records one Event for all its creates, [`super::creation_events`]); a
    /// failure gets its own Warning at once. A child that
    /// already exists (409) was created by an earlier run whose informer had
    /// not caught up: it will be observed (or adopted) like any other, so it
    /// is not an error; its expectation is lowered since no create will be seen.
    async fn create_child<K>(
        &self,
        key: &ObjectKey,
        job: &TFJob,
        api: &Api<K>,
        child: &K,
        kind: &'static str,
        failed: &'static str,
    ) -> Result<Option<String>, SyncError>
    where
        K: Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let name = child_name(child);
        let span = write_span("create", kind, &name);
        // The created child is not decoded: the informer brings it.
        match unread::create(&self.client, api, &PostParams::default(), child)
            .instrument(span)
            .await
        {
            Ok(()) => Ok(Some(name)),
            Err(e) if is_status(&e, 409) => {
                self.expectations.creation_failed(key);
                Ok(None)
            }
            Err(source) => {
                self.expectations.creation_failed(key);
                // Throttling is not the user's failure to read about, and an
                // Event would be one more request to a server that asked for fewer.
                if !is_status(&source, 429) {
                    self.recorder
                        .warning(job, failed, format!("Error creating: {source}"));
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
                let Some(pod) = built else {
                    tracing::warn!(job = %key, pod = %name, "the planned Pod could not be built");
                    return Ok(None);
                };
                self.create_child(key, job, &pods.api, &pod, "pod", event::FAILED_CREATE_POD)
                    .await
                    .map(|c| c.map(Created::Pod))
            }
            Action::CreateService(svc) => {
                let failed = event::FAILED_CREATE_SERVICE;
                self.create_child(key, job, services, svc, "service", failed)
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
                        "Force-deleted pod: {name} (disrupted, and still terminating after its grace period: its node stopped responding)"
                    ),
                );
                Ok(())
            }
            Ok(_) => {
                self.recorder.normal(
                    job,
                    event::SUCCESSFUL_DELETE_POD,
                    format!("Deleted pod: {name}"),
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
                    format!("Error deleting: {source}"),
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
                    format!("Deleted service: {name}"),
                );
                Ok(())
            }
            Err(e) if is_status(&e, 404) => Ok(()),
            Err(source) => {
                self.recorder.warning(
                    job,
                    event::FAILED_DELETE_SERVICE,
                    format!("Error deleting: {source}"),
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
                    format!("Deleted job: {name} (ttlSecondsAfterFinished passed)"),
                );
                Ok(())
            }
            Err(e) if is_status(&e, 404) => Ok(()),
            Err(source) => {
                self.recorder.warning(
                    job,
                    event::FAILED_DELETE_JOB,
                    format!("Error deleting: {source}"),
                );
                Err(write_error("delete", "tfjob", name, source))
            }
        }
    }

    /// Writes the job's bookkeeping annotation (a merge patch carrying the
    /// cached resourceVersion, so it is a compare-and-swap like the status
    /// write) and returns the job as stored, to write status over.
    async fn write_bookkeeping(
        &self,
        key: &ObjectKey,
        job: &Arc<TFJob>,
        books: &Bookkeeping,
    ) -> Result<Arc<TFJob>, SyncError> {
        let namespace = job.metadata.namespace.clone().unwrap_or_default();
        let api: Api<TFJob> = Api::namespaced(self.client.clone(), &namespace);
        let patch = serde_json::json!({
            "metadata": {
                "resourceVersion": job.metadata.resource_version,
                "annotations": { BOOKKEEPING_ANNOTATION: books.to_annotation() },
            }
        });
        match api
            .patch(key.name(), &PatchParams::default(), &Patch::Merge(&patch))
            .instrument(write_span("patch", "tfjob", key.name()))
            .await
        {
            Ok(stored) => {
                if let Some(before) = job.metadata.resource_version.as_deref() {
                    self.written.remember(key, before, stored.clone());
                }
                Ok(Arc::new(stored))
            }
            Err(source) => Err(SyncError::Bookkeeping {
                key: key.clone(),
                source,
            }),
        }
    }

    /// Writes the planned status over `job` (as stored) if it differs, now
    /// or, when nobody waits for the change, together with the changes that
    /// follow within the batch period ([`DeferredStatus`]); returns when to
    /// look again for a write that waits. The
    /// cached resourceVersion makes it a compare-and-swap: if the job changed
    /// since we read it, the write fails with 409 and the reconcile is
    /// retried against the newer object, so a stale cache never overwrites
    /// newer status (e.g. a restart count).
    async fn write_status(
        &self,
        key: &ObjectKey,
        job: &Arc<TFJob>,
        plan: &Plan,
    ) -> Result<Option<Duration>, SyncError> {
        let now = tokio::time::Instant::now();
        match self.deferred.decide(key, job, &plan.status, now) {
            WriteStatus::Unchanged => return Ok(None),
            WriteStatus::Within(due) => return Ok(Some(due)),
            WriteStatus::Now => {}
        }
        let namespace = job.metadata.namespace.clone().unwrap_or_default();
        let api: Api<TFJob> = Api::namespaced(self.client.clone(), &namespace);
        let mut updated = TFJob::clone(job);
        updated.status = Some(plan.status.clone());
        updated.meta_mut().managed_fields = None;
        match api
            .replace_status(key.name(), &PostParams::default(), &updated)
            .instrument(write_span("update", "tfjob", key.name()))
            .await
        {
            Ok(stored) => {
                self.metrics
                    .record_transition(&namespace, job.status.as_ref(), &plan.status);
                log_state_change(key, job.status.as_ref(), &plan.status);
                if let Some(before) = job.metadata.resource_version.as_deref() {
                    self.written.remember(key, before, stored);
                }
                self.deferred.forget(key);
                Ok(None)
            }
            Err(source) => Err(SyncError::Status {
                key: key.clone(),
                source,
            }),
        }
    }
}

/// One info line when a job's state (its last condition) changes, so an
/// operator log tells a job's story without debug logging.
/// Whether the plan creates children for a job that had its children
/// created before (its Created condition is set): a replacement, which
/// [`TfJobReconciler::still_exists_on_the_server`] guards.
fn re_creates_children(job: &TFJob, plan: &Plan) -> bool {
    let created_before = job
        .status
        .as_ref()
        .is_some_and(|s| super::conditions::is_true(s, crate::api::constants::condition::CREATED));
    created_before
        && plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::CreatePod { .. } | Action::CreateService(_)))
}

fn log_state_change(
    key: &ObjectKey,
    old: Option<&crate::api::types::TFJobStatus>,
    new: &crate::api::types::TFJobStatus,
) {
    let state = |s: &crate::api::types::TFJobStatus| {
        s.conditions
            .last()
            .map(|c| (c.type_.clone(), c.status.clone()))
    };
    let after = state(new);
    if old.and_then(state) == after {
        return;
    }
    if let Some(last) = new.conditions.last() {
        tracing::info!(
            job = %key,
            state = %last.type_,
            status = %last.status,
            reason = last.reason.as_deref().unwrap_or_default(),
            message = last.message.as_deref().unwrap_or_default(),
            "job state changed"
        );
    }
}

/// Where a job's Pods are written: the API, and what a planned Pod is
/// built from when its create is sent (see `Action::CreatePod`).
struct PodWrites<'a> {
    api: Api<Pod>,
    children: Option<ChildContext<'a>>,
}

/// A child one write created, by name (for the pass's creation Events).
enum Created {
    Pod(String),
    Service(String),
}

fn child_name<K: Resource>(obj: &K) -> String {
    obj.meta().name.clone().unwrap_or_default()
}

fn write_error(
    verb: &'static str,
    kind: &'static str,
    name: String,
    source: kube::Error,
) -> SyncError {
    SyncError::Write {
        verb,
        kind,
        name,
        source,
    }
}

fn event_type(warning: bool) -> crate::runtime::events::EventType {
    if warning {
        crate::runtime::events::EventType::Warning
    } else {
        crate::runtime::events::EventType::Normal
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn write_error_with(code: u16, retry_after_seconds: Option<u32>) -> SyncError {
        let mut status = Status::failure("slow down", "TooManyRequests").with_code(code);
        if let Some(secs) = retry_after_seconds {
            let details = serde_json::json!({ "retryAfterSeconds": secs });
            status.details = Some(serde_json::from_value(details).unwrap());
        }
        write_error(
            "create",
            "pod",
            "p".into(),
            kube::Error::Api(status.boxed()),
        )
    }

    #[test]
    fn a_throttled_write_waits_the_servers_retry_after_and_at_least_a_second() {
        assert_eq!(
            write_error_with(429, Some(3)).throttled(),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            write_error_with(429, None).throttled(),
            Some(MIN_THROTTLED_WAIT)
        );
        assert_eq!(write_error_with(500, Some(3)).throttled(), None);
        assert_eq!(write_error_with(409, None).throttled(), None);
    }
}
