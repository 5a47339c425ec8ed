//! The job's PodGroup writes (gang scheduling, [`crate::tfjob::integrations::gang`]):
//! sent one at a time, before any of the pass's other writes, so no Pod of a
//! gang is created before the group it joins.
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use tracing::Instrument;

use crate::api::constants::event;
use crate::api::pod_group::{PodGroup, PodGroupCreate};
use crate::api::types::TFJob;
use crate::runtime::client::span_status::write_span;
use crate::runtime::client::unread;
use crate::runtime::events::EventRecorder;
use crate::tfjob::apply::error::{SyncError, is_status, write_error};
use crate::tfjob::apply::integration::{Sent, WriteHooks};
use crate::tfjob::plan::integration::Write;

use super::plan::PodGroupWrite;

/// Sends the job's PodGroup writes.
pub struct GangWriter {
    pub client: kube::Client,
    pub recorder: EventRecorder,
}

impl WriteHooks for GangWriter {
    /// The pass's PodGroup writes, in the plan's order, before any Pod is
    /// created. The Pods may follow when no create of the group failed;
    /// the first error, if any, fails the pass after its other writes (it
    /// is retried with backoff).
    fn send<'a>(
        &'a self,
        job: &'a TFJob,
        writes: &'a [&'a Write],
        namespace: &'a str,
    ) -> futures::future::BoxFuture<'a, Sent> {
        Box::pin(async move {
            let api: Api<PodGroup> = Api::namespaced(self.client.clone(), namespace);
            let (mut ready, mut first_error) = (true, Ok(()));
            for write in writes.iter().filter_map(|w| w.get::<PodGroupWrite>()) {
                let result = match write {
                    PodGroupWrite::Create(group) => {
                        let created = self.create_pod_group(job, &api, group).await;
                        ready &= created.is_ok();
                        created
                    }
                    PodGroupWrite::SetMinCount { name, min_count } => {
                        self.set_pod_group_min_count(job, &api, name, *min_count)
                            .await
                    }
                    PodGroupWrite::Delete { name, uid } => {
                        self.delete_pod_group(job, &api, name, uid.as_deref()).await
                    }
                };
                if let (Err(e), Ok(())) = (result, &first_error) {
                    first_error = Err(e);
                }
            }
            Sent {
                pods_may_follow: ready,
                result: first_error,
            }
        })
    }
}

impl GangWriter {
    /// Creates the job's PodGroup. One that already exists (409) is the
    /// one an earlier pass created, not yet in the cache: a namesake the
    /// cache shows is caught by the plan before any create
    /// ([`super::next_step`]).
    async fn create_pod_group(
        &self,
        job: &TFJob,
        api: &Api<PodGroup>,
        group: &PodGroup,
    ) -> Result<(), SyncError> {
        let name = group.metadata.name.clone().unwrap_or_default();
        let body = PodGroupCreate::new(group);
        match unread::create(&self.client, api, &PostParams::default(), &body)
            .instrument(write_span("create", "podgroup", &name))
            .await
        {
            Ok(()) => {
                self.recorder.normal(
                    job,
                    event::SUCCESSFUL_CREATE_POD_GROUP,
                    format!(
                        "Created PodGroup: {name} (gang of minCount {})",
                        group.min_count().unwrap_or_default()
                    ),
                );
                Ok(())
            }
            Err(e) if is_status(&e, 409) => Ok(()),
            Err(source) => {
                if !is_status(&source, 429) {
                    self.recorder.warning(
                        job,
                        event::FAILED_CREATE_POD_GROUP,
                        format!("Error creating: {source}"),
                    );
                }
                Err(write_error("create", "podgroup", name, source))
            }
        }
    }

    async fn set_pod_group_min_count(
        &self,
        job: &TFJob,
        api: &Api<PodGroup>,
        name: &str,
        min_count: i32,
    ) -> Result<(), SyncError> {
        let patch = serde_json::json!({
            "spec": { "schedulingPolicy": { "gang": { "minCount": min_count } } }
        });
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .instrument(write_span("patch", "podgroup", name))
            .await
        {
            Ok(_) => {
                self.recorder.normal(
                    job,
                    event::SUCCESSFUL_UPDATE_POD_GROUP,
                    format!("Set PodGroup {name}'s minCount to {min_count}"),
                );
                Ok(())
            }
            // Gone meanwhile: the next pass creates it with the right count.
            Err(e) if is_status(&e, 404) => Ok(()),
            Err(source) => {
                if !is_status(&source, 429) {
                    self.recorder.warning(
                        job,
                        event::FAILED_UPDATE_POD_GROUP,
                        format!("Error updating: {source}"),
                    );
                }
                Err(write_error("patch", "podgroup", name.to_owned(), source))
            }
        }
    }

    async fn delete_pod_group(
        &self,
        job: &TFJob,
        api: &Api<PodGroup>,
        name: &str,
        uid: Option<&str>,
    ) -> Result<(), SyncError> {
        let params = DeleteParams {
            preconditions: uid.map(|uid| Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api
            .delete(name, &params)
            .instrument(write_span("delete", "podgroup", name))
            .await
        {
            Ok(_) => {
                self.recorder.normal(
                    job,
                    event::SUCCESSFUL_DELETE_POD_GROUP,
                    format!("Deleted PodGroup: {name}"),
                );
                Ok(())
            }
            Err(e) if is_status(&e, 404) || is_status(&e, 409) => Ok(()),
            Err(source) => {
                if !is_status(&source, 429) {
                    self.recorder.warning(
                        job,
                        event::FAILED_DELETE_POD_GROUP,
                        format!("Error deleting: {source}"),
                    );
                }
                Err(write_error("delete", "podgroup", name.to_owned(), source))
            }
        }
    }
}
