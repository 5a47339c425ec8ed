//! The EventBroadcaster: the background task that writes events.
//!
//! Mirrors client-go `tools/record/event.go` (`eventBroadcasterImpl`,
//! `recordToSink`): each event goes through the [`EventCorrelator`], then is
//! created or patched. A failed write is logged and counted, then
//! forgotten; it never reaches the code that published the event.
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::correlator::{Decision, EventCorrelator};
use super::{EventMetrics, EventRecord};

/// Tries per write before an event is given up (client-go: 12, 10 s apart;
/// fewer here because one writer task serves every controller).
const WRITE_ATTEMPTS: u32 = 3;
const WRITE_RETRY_PAUSE: Duration = Duration::from_secs(1);

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
}

/// The background writer behind an [`EventRecorder`].
pub struct EventBroadcaster {
    rx: mpsc::Receiver<EventRecord>,
    client: kube::Client,
    correlator: EventCorrelator,
    metrics: EventMetrics,
}

impl EventBroadcaster {
    pub(super) fn new(
        rx: mpsc::Receiver<EventRecord>,
        client: kube::Client,
        metrics: EventMetrics,
    ) -> Self {
        Self {
            rx,
            client,
            correlator: EventCorrelator::default(),
            metrics,
        }
    }

    /// Writes events until `shutdown`, then writes what is already queued
    /// (one attempt each) and returns.
    pub async fn run(mut self, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                next = self.rx.recv() => match next {
                    Some(event) => self.handle(event, WRITE_ATTEMPTS).await,
                    // Every recorder was dropped: nothing more can arrive.
                    None => return,
                },
            }
        }
        while let Ok(event) = self.rx.try_recv() {
            self.handle(event, 1).await;
        }
    }

    async fn handle(&mut self, event: EventRecord, attempts: u32) {
        // Decide once: a retried write must not take a second spam token.
        let decision = self.correlator.correlate(&event, Instant::now());
        if decision == Decision::Drop {
            self.metrics.drop_for("spam_filtered");
            return;
        }
        for attempt in 1..=attempts {
            match self.write_once(&event, &decision).await {
                Ok(()) => return,
                Err(error) if attempt == attempts => {
                    self.metrics.failed.inc();
                    tracing::warn!(error = %error, cause = %std::error::Error::source(&error).map(ToString::to_string).unwrap_or_default(), object = %event.display_object(), reason = %event.reason, "failed to write event; giving up");
                }
                Err(error) => {
                    tracing::debug!(error = %error, cause = %std::error::Error::source(&error).map(ToString::to_string).unwrap_or_default(), attempt, "failed to write event; retrying");
                    tokio::time::sleep(WRITE_RETRY_PAUSE).await;
                }
            }
        }
    }

    async fn write_once(
        &mut self,
        event: &EventRecord,
        decision: &Decision,
    ) -> Result<(), EventError> {
        match decision {
            Decision::Drop => Ok(()),
            Decision::Create => self.create(event).await,
            Decision::Patch {
                namespace,
                name,
                count,
            } => {
                let (namespace, name, count) = (namespace.as_str(), name.as_str(), *count);
                let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
                let patch = serde_json::json!({
                    "count": count,
                    "lastTimestamp": Time(event.at),
                });
                match api
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => {
                        self.correlator.written(event, namespace, name, count);
                        Ok(())
                    }
                    // The Event expired on the server (default TTL 1 h): start a new one.
                    Err(kube::Error::Api(status)) if status.is_not_found() => {
                        self.correlator.forget(event);
                        self.create(event).await
                    }
                    Err(source) => Err(EventError::Patch {
                        name: name.to_owned(),
                        source,
                    }),
                }
            }
        }
    }

    async fn create(&mut self, event: &EventRecord) -> Result<(), EventError> {
        // Events of cluster-scoped objects go to `default`, as client-go does.
        let namespace = event
            .involved
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let object_name = event.involved.name.clone().unwrap_or_default();
        // client-go's naming: `<object>.<unix nanos in hex>`.
        let name = format!("{object_name}.{:x}", event.at.as_nanosecond());
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let body = build_event(event, &namespace, &name);
        api.create(&PostParams::default(), &body)
            .await
            .map_err(|source| EventError::Create {
                object: event.display_object(),
                source,
            })?;
        self.correlator.written(event, &namespace, &name, 1);
        Ok(())
    }
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
        count: Some(1),
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
