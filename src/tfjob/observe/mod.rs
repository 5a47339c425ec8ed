//! **Observe**: the job and its children from the informer caches, the
//! children claimed (adopted or released) as the job's selector says, and
//! what each integration reads of the job ([`integration::ObserveHooks`]);
//! or, when an integration holds the job, nothing more
//! ([`integration::Hold`]: another controller writes it).

use std::sync::Arc;

use kube::api::Api;
use kube::{Client, Resource};
use tracing::Instrument;

use crate::api::types::TFJob;
use crate::runtime::cache::key::ObjectKey;
use crate::runtime::cache::object::Object;
use crate::runtime::cache::store::{CONTROLLER_UID_INDEX, Indexer};
use crate::runtime::client::span_status::write_span;
use crate::runtime::controller::ownership::{adopt, claim, release};

use crate::runtime::controller::expectations::Expectations;
use crate::tfjob::apply::error::{SyncError, child_name, is_status, write_error};
use crate::tfjob::children::cached::{CachedPod, CachedService};
use crate::tfjob::children::{child_selector, owner_reference};
use crate::tfjob::plan::Observed;
use crate::tfjob::plan::integration::PlanHooks;
use crate::tfjob::status::batch::DeferredStatus;
use crate::tfjob::status::read_your_writes::WrittenStatus;

pub mod integration;

use integration::{Hold, ObserveHooks};

/// The index (on the Pod and Service informers) of children by job name:
/// how orphans that match a job are found without a scan.
pub const JOB_NAME_INDEX: &str = "job-name";

/// What the observe phase reads through: the caches, and the client for
/// the few reads that must be live (and the adoption patches of children).
#[derive(Clone)]
pub struct Observer {
    /// The manager's client: live reads of the job.
    pub client: Client,
    /// Pod and Service control's client: adoption and release patches.
    pub children: Client,
    pub jobs: Indexer<TFJob>,
    pub pods: Indexer<CachedPod>,
    pub services: Indexer<CachedService>,
    pub expectations: Expectations,
    /// Our own recent status writes, for reading them before the cache has them.
    pub written: WrittenStatus,
    /// Status changes planned but waiting to be written with the next ones.
    pub deferred: DeferredStatus,
    /// The integrations, in their registration order.
    pub integrations: Vec<Arc<dyn ObserveHooks>>,
}

/// What [`Observer::observe`] found.
pub enum Observation {
    /// The job was deleted.
    Gone,
    /// Our own writes are not all in the caches yet: act on nothing.
    Waiting,
    /// An integration holds the job (`job`, as cached): write nothing to it.
    Held {
        job: Arc<TFJob>,
        hold: Hold,
    },
    Ready(Seen),
}

/// A job ready to plan: what the caches show of it and its children, and
/// each integration's view.
pub struct Seen {
    /// As stored, or as our last status write left it.
    pub stored: Arc<TFJob>,
    /// `stored` with the status planned but not written yet over it.
    pub job: Arc<TFJob>,
    /// The job the plan sees, when an integration replaced `job`
    /// ([`ObserveHooks::as_planned`]).
    pub as_planned: Option<Arc<TFJob>>,
    pub pods: Vec<Arc<CachedPod>>,
    pub services: Vec<Arc<CachedService>>,
    /// Each integration's hooks into the plan.
    pub integrations: Vec<Box<dyn PlanHooks>>,
    /// Warnings the integrations want recorded on the job (reason, message).
    pub warnings: Vec<(&'static str, String)>,
}

impl Seen {
    /// What the plan looks at, at `now`; `hooks` borrows
    /// [`Self::integrations`] (the plan takes them as a slice of references).
    pub fn observed<'a>(
        &'a self,
        hooks: &'a [&'a dyn PlanHooks],
        now: jiff::Timestamp,
    ) -> Observed<'a> {
        Observed {
            job: self.as_planned.as_deref().unwrap_or(&self.job),
            pods: &self.pods,
            services: &self.services,
            integrations: hooks,
            now,
        }
    }

    /// [`Self::integrations`] as the plan takes them.
    pub fn hooks(&self) -> Vec<&dyn PlanHooks> {
        self.integrations.iter().map(|h| h.as_ref()).collect()
    }
}

impl Observer {
    /// A live (quorum) read of the job before children are re-created.
    /// Each kind has its own watch, and the Pod watch can run ahead of the
    /// TFJob watch: after a partition heals, garbage collection's deletions
    /// of a deleted job's children can arrive before the job's own DELETED,
    /// and the cache alone would have the job resurrect them. One GET, only
    /// on the replacement path; `false` when the job is gone, was replaced
    /// by a namesake, or is being deleted (its DELETED event will follow).
    pub async fn still_exists_on_the_server(
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
    pub async fn observe(&self, key: &ObjectKey) -> Result<Observation, SyncError> {
        // A job gone from the cache was deleted: its children go with it
        // through garbage collection (they carry its ownerReference).
        let Some(cached) = self.jobs.get(key) else {
            self.expectations.forget(key);
            self.written.forget(key);
            self.deferred.forget(key);
            for integration in &self.integrations {
                integration.forget(key);
                // So do its Kueue Workloads, once Kueue's finalizer is off them.
                integration.let_go(key, None).await?;
            }
            return Ok(Observation::Gone);
        };
        // Before anything that could write (an adoption, Kueue's finalizer):
        // a job another controller writes is left to it.
        for integration in &self.integrations {
            if let Some(hold) = integration.hold(key, &cached) {
                return Ok(Observation::Held { job: cached, hold });
            }
        }
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
        if job.metadata.deletion_timestamp.is_some() {
            for integration in &self.integrations {
                integration.let_go(key, Some(&job)).await?;
            }
        }
        let mut seen = Seen {
            stored,
            job,
            as_planned: None,
            pods,
            services,
            integrations: Vec::new(),
            warnings: Vec::new(),
        };
        for integration in &self.integrations {
            if let Some(replaced) = integration.as_planned(key, &seen.job) {
                seen.warnings.extend(replaced.warning);
                seen.as_planned = Some(replaced.job);
            }
            seen.integrations
                .extend(integration.observe(key, &seen.job));
        }
        Ok(Observation::Ready(seen))
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
        let api: Api<K> = Api::namespaced(self.children.clone(), namespace);
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
}
