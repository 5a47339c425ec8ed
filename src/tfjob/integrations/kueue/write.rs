//! The job's Kueue Workload writes ([`crate::tfjob::integrations::kueue`]): sent one at a
//! time, before the pass's Pods, and what the plan reads about Workloads.

use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use tracing::Instrument;

use crate::api::constants::event;
use crate::api::types::TFJob;
use crate::runtime::cache::key::ObjectKey;
use crate::runtime::client::span_status::write_span;
use crate::runtime::client::unread;
use crate::tfjob::apply::error::{SyncError, is_status, write_error};
use crate::tfjob::apply::integration::{Sent, WriteHooks};
use crate::tfjob::plan::integration::Write;

use super::api::{PriorityClassRef, Workload, WorkloadCreate, WorkloadPriorityClass};
use super::gate::{self, WorkloadWrite};
use super::observe::KueueWorkloads;

impl WriteHooks for KueueWorkloads {
    /// The pass's Workload writes, in the plan's order; the first error, if
    /// any, fails the pass (retried with backoff).
    fn send<'a>(
        &'a self,
        job: &'a TFJob,
        writes: &'a [&'a Write],
        namespace: &'a str,
    ) -> futures::future::BoxFuture<'a, Sent> {
        Box::pin(async move {
            let api: Api<Workload> = Api::namespaced(self.client.clone(), namespace);
            let mut first_error = Ok(());
            for write in writes.iter().filter_map(|w| w.get::<WorkloadWrite>()) {
                let result = self.write_workload(job, &api, namespace, write).await;
                if let (Err(e), Ok(())) = (result, &first_error) {
                    first_error = Err(e);
                }
            }
            Sent {
                pods_may_follow: true,
                result: first_error,
            }
        })
    }
}

impl KueueWorkloads {
    /// Removes Kueue's finalizer from the Workloads we created for a job
    /// that is gone or being deleted (garbage collection deletes them).
    pub(super) async fn release_workloads(
        &self,
        key: &ObjectKey,
        job: Option<&TFJob>,
    ) -> Result<(), SyncError> {
        let (workloads, _) = self.kueue_view(key, job);
        let namespace = key.namespace().unwrap_or_default();
        let api: Api<Workload> = Api::namespaced(self.client.clone(), namespace);
        for write in gate::release_all(&workloads) {
            if let WorkloadWrite::ReleaseFinalizer {
                name,
                resource_version,
                finalizers,
            } = &write
            {
                release(&api, name, resource_version.as_deref(), finalizers).await?;
            }
        }
        Ok(())
    }

    async fn write_workload(
        &self,
        job: &TFJob,
        api: &Api<Workload>,
        namespace: &str,
        write: &WorkloadWrite,
    ) -> Result<(), SyncError> {
        let result = match write {
            WorkloadWrite::Create { workload, priority } => {
                self.create_workload(job, api, workload, priority.as_ref())
                    .await
            }
            WorkloadWrite::Delete { name, uid } => {
                let params = DeleteParams {
                    preconditions: uid.clone().map(|uid| Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                let sent = api
                    .delete(name, &params)
                    .instrument(write_span("delete", "workload", name))
                    .await;
                settle(sent, "delete", name, GONE_OR_CHANGED, || {
                    self.recorder.normal(
                        job,
                        event::KUEUE_DELETED_WORKLOAD,
                        format!("Deleted not matching Workload: {namespace}/{name}"),
                    );
                })
            }
            WorkloadWrite::ReleaseFinalizer {
                name,
                resource_version,
                finalizers,
            } => return release(api, name, resource_version.as_deref(), finalizers).await,
            WorkloadWrite::Adopt {
                name,
                resource_version,
                owner,
            } => {
                let mut owners: Vec<serde_json::Value> = self
                    .apis
                    .workloads()
                    .and_then(|c| c.get(&ObjectKey::new(Some(namespace), name)))
                    .and_then(|w| w.metadata.owner_references.clone())
                    .unwrap_or_default()
                    .into_iter()
                    .map(|o| serde_json::json!(o))
                    .collect();
                owners.push(serde_json::json!(owner));
                let patch = serde_json::json!({ "metadata": {
                    "resourceVersion": resource_version,
                    "ownerReferences": owners,
                    "labels": { super::api::LABEL_JOB_UID: owner.uid },
                }});
                let sent = api
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .instrument(write_span("patch", "workload", name))
                    .await;
                settle(sent, "patch", name, GONE_OR_CHANGED, || {
                    self.recorder.normal(
                        job,
                        event::KUEUE_UPDATED_WORKLOAD,
                        format!("Adopted prebuilt Workload: {namespace}/{name}"),
                    );
                })
            }
            WorkloadWrite::SetQueueName { name, queue } => {
                let patch = serde_json::json!({ "spec": { "queueName": queue } });
                let sent = api
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .instrument(write_span("patch", "workload", name))
                    .await;
                settle(sent, "patch", name, GONE, || {
                    self.recorder.normal(
                        job,
                        event::KUEUE_UPDATED_WORKLOAD,
                        format!("Moved Workload {namespace}/{name} to LocalQueue {queue}"),
                    );
                })
            }
            WorkloadWrite::SetActive { name, active } => {
                let marker = (!active).then_some("true");
                let patch = serde_json::json!({
                    "metadata": { "annotations": { gate::ANNOTATION_DEACTIVATED: marker } },
                    "spec": { "active": active },
                });
                let sent = api
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .instrument(write_span("patch", "workload", name))
                    .await;
                let what = if *active { "Activated" } else { "Deactivated" };
                settle(sent, "patch", name, GONE, || {
                    self.recorder.normal(
                        job,
                        event::KUEUE_UPDATED_WORKLOAD,
                        format!("{what} Workload {namespace}/{name}: the job's spec.runPolicy.suspend is {}", !active),
                    );
                })
            }
            WorkloadWrite::ApplyStatus {
                name,
                manager,
                body,
                finished,
            } => {
                let params = PatchParams::apply(manager).force();
                let sent = api
                    .patch_status(name, &params, &Patch::Apply(body))
                    .instrument(write_span("apply", "workload/status", name))
                    .await;
                settle(sent, "apply", name, GONE_OR_CHANGED, || {
                    if *finished {
                        self.recorder.normal(
                            job,
                            event::KUEUE_FINISHED_WORKLOAD,
                            format!("Workload '{namespace}/{name}' is declared finished"),
                        );
                    }
                })
            }
        };
        result.map_err(|(verb, name, source)| {
            if !is_status(&source, 429) {
                self.recorder.warning(
                    job,
                    event::KUEUE_FAILED_WORKLOAD,
                    format!("Error writing Workload {name} ({verb}): {source}"),
                );
            }
            write_error(verb, "workload", name, source)
        })
    }

    /// Creates the Workload, with its priority's value looked up first (Kueue
    /// does not fill it in for Workloads it did not build). 409: an earlier
    /// pass created it, or Kueue's built-in did (the gate then leaves the job
    /// to the built-in, see [`crate::tfjob::integrations::kueue::gate`]).
    async fn create_workload(
        &self,
        job: &TFJob,
        api: &Api<Workload>,
        workload: &Workload,
        priority: Option<&PriorityClassRef>,
    ) -> Result<(), Unsettled> {
        let name = workload.metadata.name.clone().unwrap_or_default();
        let mut workload = workload.clone();
        if let Some(class) = priority {
            match self.priority_value(class).await {
                Ok(value) => workload.spec.priority = Some(value),
                Err(e) => {
                    let missing = is_status(&e, 404);
                    let kind = &class.kind;
                    let message = if missing {
                        format!(
                            "{kind} {} not found: the Workload is not created until it exists (create it, or fix the job's label or priorityClassName)",
                            class.name
                        )
                    } else {
                        format!("could not read {kind} {}: {e}", class.name)
                    };
                    self.recorder
                        .warning(job, event::KUEUE_FAILED_WORKLOAD, message);
                    return Err(("get the priority class of", name, e));
                }
            }
        }
        let sent = unread::create(
            &self.client,
            api,
            &PostParams::default(),
            &WorkloadCreate::new(&workload),
        )
        .instrument(write_span("create", "workload", &name))
        .await;
        settle(sent, "create", &name, EXISTS, || {
            let namespace = workload.metadata.namespace.as_deref().unwrap_or_default();
            self.recorder.normal(
                job,
                event::KUEUE_CREATED_WORKLOAD,
                format!("Created Workload: {namespace}/{name}"),
            );
        })
    }

    async fn priority_value(&self, class: &PriorityClassRef) -> Result<i32, kube::Error> {
        if class.is_workload_priority_class() {
            let api: Api<WorkloadPriorityClass> = Api::all(self.client.clone());
            Ok(api.get(&class.name).await?.value)
        } else {
            let api: Api<PriorityClass> = Api::all(self.client.clone());
            Ok(api.get(&class.name).await?.value)
        }
    }
}

/// Removes Kueue's finalizer (a merge patch of the finalizer list, guarded
/// by the resourceVersion it was read at, so a finalizer added meanwhile is
/// never dropped).
async fn release(
    api: &Api<Workload>,
    name: &str,
    resource_version: Option<&str>,
    finalizers: &[String],
) -> Result<(), SyncError> {
    let patch = serde_json::json!({
        "metadata": { "finalizers": finalizers, "resourceVersion": resource_version }
    });
    let sent = api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .instrument(write_span("patch", "workload", name))
        .await;
    // Changed since the cache had it includes Kueue's own status writes.
    settle(sent, "patch", name, GONE_OR_CHANGED, || {})
        .map_err(|(verb, name, e)| write_error(verb, "workload", name, e))
}

/// A failed Workload write: its verb, the Workload's name, the error.
type Unsettled = (&'static str, String, kube::Error);

/// Answers a Workload write may get without being an error: 404 (gone) and
/// 409 (changed since the cache had it, or created already: the watch event
/// that follows plans again from the newer one).
const GONE_OR_CHANGED: &[u16] = &[404, 409];
/// Gone only: a queue move on a changed Workload is still worth a retry.
const GONE: &[u16] = &[404];
/// Created already (an earlier pass, or Kueue's built-in).
const EXISTS: &[u16] = &[409];

/// A Workload write's answer as the pass takes it: done (`on_done` says so,
/// e.g. with an Event), one of `tolerated`, or an error to report.
fn settle<T>(
    sent: kube::Result<T>,
    verb: &'static str,
    name: &str,
    tolerated: &[u16],
    on_done: impl FnOnce(),
) -> Result<(), Unsettled> {
    match sent {
        Ok(_) => {
            on_done();
            Ok(())
        }
        Err(e) if tolerated.iter().any(|code| is_status(&e, *code)) => Ok(()),
        Err(e) => Err((verb, name.to_owned(), e)),
    }
}
