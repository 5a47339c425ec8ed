//! How one Event is written: the [`EventSink`] (client-go
//! `record.EventSink`: the API server, or an in-memory sink in tests), the
//! core/v1 Event built for a first occurrence, and the write the
//! [`EventCorrelator`](super::EventCorrelator) decided (a create, or a patch
//! of the Event it repeats). The broadcaster (`writer.rs`) decides when.
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Event, EventSource};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};

use super::EventRecord;
use super::correlator::Decision;
use crate::runtime::client::namespace_gone::is_namespace_gone;
use crate::runtime::client::unread;

/// Where events are written (client-go `record.EventSink`).
pub trait EventSink: Send + Sync + 'static {
    /// Creates `event` in its namespace.
    fn create<'a>(&'a self, event: &'a Event) -> BoxFuture<'a, Result<(), kube::Error>>;
    /// Merge-patches the Event `name` in `namespace`.
    fn patch<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        patch: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<(), kube::Error>>;
}

/// The API server as an [`EventSink`] (core/v1 Events).
pub struct ApiEventSink {
    client: kube::Client,
}

impl ApiEventSink {
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

impl EventSink for ApiEventSink {
    fn create<'a>(&'a self, event: &'a Event) -> BoxFuture<'a, Result<(), kube::Error>> {
        Box::pin(async move {
            let namespace = event.metadata.namespace.as_deref().unwrap_or("default");
            let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
            // The created Event is not read: nothing here needs it back.
            unread::create(&self.client, &api, &PostParams::default(), event).await
        })
    }

    fn patch<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        patch: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<(), kube::Error>> {
        Box::pin(async move {
            let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
            api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .map(drop)
        })
    }
}

/// Errors writing an Event (logged and counted by the broadcaster, never
/// returned to the code that published the event).
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error("failed to create event for {object}")]
    Create {
        object: String,
        #[source]
        source: kube::Error,
    },
    #[error("failed to patch event {name}")]
    Patch {
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl EventError {
    /// A stable label for metrics and logs.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Create { .. } => "create",
            Self::Patch { .. } => "patch",
        }
    }

    /// Whether the server could not be reached, so a retry may succeed. Any
    /// answer from the server (an HTTP status) is final, as are errors
    /// building the request or reading the answer (client-go retries only
    /// what is neither a `StatusError` nor a request construction error).
    pub fn is_retryable(&self) -> bool {
        let (Self::Create { source, .. } | Self::Patch { source, .. }) = self;
        matches!(
            source,
            kube::Error::HyperError(_)
                | kube::Error::Service(_)
                | kube::Error::HttpError(_)
                | kube::Error::Auth(_)
        )
    }

    /// Whether the server refused it because the Event's namespace is being
    /// deleted or is gone ([`namespace_gone`](crate::runtime::client::namespace_gone)).
    pub fn is_namespace_gone(&self) -> bool {
        let (Self::Create { source, .. } | Self::Patch { source, .. }) = self;
        is_namespace_gone(source)
    }
}

/// Where a written event now lives, for the correlator.
pub(super) struct Stored {
    pub namespace: String,
    pub name: String,
    pub count: i32,
}

/// What one write did: where the event lives now, and whether the Event it
/// was to patch had expired on the server (the correlator must forget it,
/// whether or not the create that replaced it landed).
pub(super) struct Written {
    pub result: Result<Option<Stored>, EventError>,
    pub expired: bool,
}

/// Writes `event` as `decision` says: creates it, or patches the Event it
/// repeats (and creates it anew if that Event expired, default TTL 1 h).
pub(super) async fn write(
    sink: &dyn EventSink,
    event: &EventRecord,
    decision: &Decision,
) -> Written {
    let written = |result| Written {
        result,
        expired: false,
    };
    match decision {
        Decision::Create => written(create(sink, event).await.map(Some)),
        Decision::Patch {
            namespace,
            name,
            count,
        } => {
            // The message too, as client-go's patch carries it: a combined
            // Event shows the latest of the similar messages.
            let patch = serde_json::json!({
                "count": count,
                "lastTimestamp": Time(event.at),
                "message": event.message,
            });
            match sink.patch(namespace, name, &patch).await {
                Ok(()) => written(Ok(Some(Stored {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    count: *count,
                }))),
                Err(kube::Error::Api(status)) if status.is_not_found() => Written {
                    result: create(sink, event).await.map(Some),
                    expired: true,
                },
                Err(source) => written(Err(EventError::Patch {
                    name: name.clone(),
                    source,
                })),
            }
        }
    }
}

async fn create(sink: &dyn EventSink, event: &EventRecord) -> Result<Stored, EventError> {
    // Events of cluster-scoped objects go to `default`, as client-go does.
    let namespace = event
        .involved
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_owned());
    let object_name = event.involved.name.as_deref().unwrap_or_default();
    // client-go's naming: `<object>.<unix nanos in hex>`.
    let name = format!("{object_name}.{:x}", event.at.as_nanosecond());
    let body = build_event(event, &namespace, &name);
    sink.create(&body)
        .await
        .map_err(|source| EventError::Create {
            object: event.display_object(),
            source,
        })?;
    Ok(Stored {
        namespace,
        name,
        count: event.count.max(1),
    })
}

/// The core/v1 Event written for a first occurrence.
fn build_event(event: &EventRecord, namespace: &str, name: &str) -> Event {
    let source = &event.source;
    Event {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        involved_object: event.involved.clone(),
        reason: Some(event.reason.clone()),
        message: Some(event.message.clone()),
        type_: Some(event.type_.as_str().to_owned()),
        count: Some(event.count.max(1)),
        first_timestamp: Some(Time(event.at)),
        last_timestamp: Some(Time(event.at)),
        source: Some(EventSource {
            component: Some(source.component.clone()),
            host: source.instance.clone(),
        }),
        reporting_component: Some(source.component.clone()),
        reporting_instance: source.instance.clone(),
        ..Event::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::events::tests::event_about;

    #[test]
    fn a_new_event_standing_for_several_occurrences_is_created_with_their_count() {
        let mut e = event_about("job", "SuccessfulCreatePod", "Created 4 pods");
        e.count = 4;
        assert_eq!(build_event(&e, "ns", "job.1").count, Some(4));
    }

    #[test]
    fn a_new_event_carries_the_component_and_a_count_of_one() {
        let e = event_about("a", "Created", "created pod");
        let ev = build_event(&e, "ns", "a.1");
        assert_eq!(ev.count, Some(1));
        assert_eq!(ev.type_.as_deref(), Some("Normal"));
        assert_eq!(
            ev.source.and_then(|s| s.component).as_deref(),
            Some("tfjob-controller")
        );
        assert_eq!(ev.reporting_component.as_deref(), Some("tfjob-controller"));
        assert_eq!(ev.reporting_instance.as_deref(), Some("pod-1"));
        assert_eq!(ev.involved_object.name.as_deref(), Some("a"));
    }
}
