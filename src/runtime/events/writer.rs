//! The EventBroadcaster: the background task that writes events.
//!
//! Mirrors client-go `tools/record/event.go` (`eventBroadcasterImpl`,
//! `recordToSink`, `recordEvent`) and its `EventSink`: each event goes
//! through the [`EventCorrelator`], then is created or patched through an
//! [`EventSink`] (the API server, or an in-memory sink in tests).
//!
//! A failed write is retried only when the server could not be reached
//! (a transport error: connection refused or reset, timeout, TLS, auth
//! refresh), as client-go's `recordEvent` does; an answer with any HTTP
//! status (404 for a deleted namespace, 403, 422, 429, 5xx) drops the event
//! at once: the server has decided, and asking again would only repeat it.
//! Retries never hold up other events: a failed event waits its pause in a
//! retry queue while the events behind it are written, so one namespace's
//! dead events cannot delay the rest of the cluster's. A failed write is
//! logged and counted, then forgotten; it never reaches the code that
//! published the event.
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Event, EventSource};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::correlator::{Decision, EventCorrelator};
use super::{EventMetrics, EventRecord};
use crate::runtime::client::unread;

/// Tries per event while the server cannot be reached (client-go: 12, 10 s
/// apart; fewer here because one writer task serves every controller).
const WRITE_ATTEMPTS: u32 = 3;
/// The pause before an event is tried again.
const WRITE_RETRY_PAUSE: Duration = Duration::from_secs(1);

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
}

/// An event waiting to be tried again.
struct Retry {
    event: EventRecord,
    decision: Decision,
    /// Attempts made so far.
    attempts: u32,
    due: Instant,
}

/// The background writer behind an [`EventRecorder`](super::EventRecorder).
pub struct EventBroadcaster {
    rx: mpsc::Receiver<EventRecord>,
    sink: Arc<dyn EventSink>,
    correlator: EventCorrelator,
    metrics: EventMetrics,
    /// Oldest first; every retry waits the same pause, so also soonest due
    /// first.
    retries: VecDeque<Retry>,
}

impl EventBroadcaster {
    pub(super) fn new(
        rx: mpsc::Receiver<EventRecord>,
        sink: Arc<dyn EventSink>,
        metrics: EventMetrics,
    ) -> Self {
        Self {
            rx,
            sink,
            correlator: EventCorrelator::default(),
            metrics,
            retries: VecDeque::new(),
        }
    }

    /// Writes events until `shutdown`, then writes what is already queued
    /// or waiting for a retry (one attempt each) and returns. Also returns
    /// once every recorder is dropped and nothing waits for a retry.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut open = true;
        loop {
            let next_retry = self.retries.front().map(|r| r.due);
            if !open && next_retry.is_none() {
                return;
            }
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                next = self.rx.recv(), if open => match next {
                    Some(event) => self.handle(event).await,
                    // Every recorder was dropped: nothing more can arrive.
                    None => open = false,
                },
                _ = sleep_until(next_retry), if next_retry.is_some() => {
                    if let Some(retry) = self.retries.pop_front() {
                        self.attempt(retry.event, retry.decision, retry.attempts, true).await;
                    }
                }
            }
        }
        while let Ok(event) = self.rx.try_recv() {
            if let Some(decision) = self.decide(&event) {
                self.attempt(event, decision, 0, false).await;
            }
        }
        while let Some(retry) = self.retries.pop_front() {
            self.attempt(retry.event, retry.decision, retry.attempts, false)
                .await;
        }
    }

    /// The correlator's decision, or `None` for a spam-filtered event.
    /// Decided once per event: a retried write must not take a second token.
    fn decide(&mut self, event: &EventRecord) -> Option<Decision> {
        let decision = self.correlator.correlate(event, Instant::now());
        if decision == Decision::Drop {
            self.metrics.drop_for("spam_filtered");
            return None;
        }
        Some(decision)
    }

    async fn handle(&mut self, event: EventRecord) {
        if let Some(decision) = self.decide(&event) {
            self.attempt(event, decision, 0, true).await;
        }
    }

    /// One write of `event`; on a retryable failure (and `may_retry`, and
    /// tries left) it goes to the back of the retry queue.
    async fn attempt(
        &mut self,
        event: EventRecord,
        decision: Decision,
        attempts: u32,
        may_retry: bool,
    ) {
        let attempts = attempts + 1;
        let Err(error) = self.write_once(&event, &decision).await else {
            return;
        };
        let cause = std::error::Error::source(&error)
            .map(ToString::to_string)
            .unwrap_or_default();
        if may_retry && attempts < WRITE_ATTEMPTS && error.is_retryable() {
            tracing::debug!(error = %error, %cause, attempts, "failed to write event; will retry");
            self.retries.push_back(Retry {
                event,
                decision,
                attempts,
                due: Instant::now() + WRITE_RETRY_PAUSE,
            });
            return;
        }
        self.metrics.failed.inc();
        let why = if error.is_retryable() {
            "server unreachable; giving up"
        } else {
            "the server refused it; not retrying"
        };
        tracing::warn!(error = %error, %cause, object = %event.display_object(), reason = %event.reason, attempts, "failed to write event: {why}");
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
                let patch = serde_json::json!({
                    "count": count,
                    "lastTimestamp": Time(event.at),
                });
                match self.sink.patch(namespace, name, &patch).await {
                    Ok(()) => {
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
        let body = build_event(event, &namespace, &name);
        self.sink
            .create(&body)
            .await
            .map_err(|source| EventError::Create {
                object: event.display_object(),
                source,
            })?;
        self.correlator
            .written(event, &namespace, &name, event.count.max(1));
        Ok(())
    }
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
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

    use std::sync::Mutex;

    use jiff::Timestamp;
    use kube::core::Status;

    /// An in-memory API server: namespace "dead" is gone (404, as after a
    /// namespace deletion), "flaky" is unreachable for its first
    /// `unreachable` writes; every other write succeeds at once.
    #[derive(Default)]
    struct MemorySink {
        unreachable: Mutex<u32>,
        /// (namespace, object, when) of every create attempted.
        attempts: Mutex<Vec<(String, String, Instant)>>,
        /// (namespace, object, when) of every create that succeeded.
        written: Mutex<Vec<(String, String, Instant)>>,
    }

    impl EventSink for MemorySink {
        fn create<'a>(&'a self, event: &'a Event) -> BoxFuture<'a, Result<(), kube::Error>> {
            Box::pin(async move {
                let ns = event.metadata.namespace.clone().unwrap_or_default();
                let object = event.involved_object.name.clone().unwrap_or_default();
                let now = Instant::now();
                self.attempts
                    .lock()
                    .unwrap()
                    .push((ns.clone(), object.clone(), now));
                if ns == "dead" {
                    let status = Status::failure(r#"namespaces "dead" not found"#, "NotFound")
                        .with_code(404);
                    return Err(kube::Error::Api(status.boxed()));
                }
                if ns == "flaky" {
                    let mut left = self.unreachable.lock().unwrap();
                    if *left > 0 {
                        *left -= 1;
                        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
                        return Err(kube::Error::Service(Box::new(refused)));
                    }
                }
                self.written.lock().unwrap().push((ns, object, now));
                Ok(())
            })
        }

        fn patch<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
            _: &'a serde_json::Value,
        ) -> BoxFuture<'a, Result<(), kube::Error>> {
            Box::pin(async { Ok(()) })
        }
    }

    fn event_in(namespace: &str, name: &str) -> EventRecord {
        let mut e = event_about(name, "Created", "created pod");
        e.involved.namespace = Some(namespace.to_owned());
        e.at = Timestamp::UNIX_EPOCH;
        e
    }

    /// Starts a broadcaster over `sink` with `events` already queued.
    fn start(
        sink: Arc<MemorySink>,
        events: Vec<EventRecord>,
    ) -> (
        crate::runtime::metrics::SharedRegistry,
        mpsc::Sender<EventRecord>,
        tokio_util::sync::DropGuard,
    ) {
        let registry = crate::runtime::metrics::new_registry();
        let metrics = EventMetrics::register(&registry);
        let (tx, rx) = mpsc::channel(1000);
        for e in events {
            tx.try_send(e).unwrap();
        }
        let broadcaster = EventBroadcaster::new(rx, sink, metrics);
        let shutdown = CancellationToken::new();
        tokio::spawn(broadcaster.run(shutdown.clone()));
        (registry, tx, shutdown.drop_guard())
    }

    #[tokio::test(start_paused = true)]
    async fn events_of_a_deleted_namespace_are_dropped_at_once_and_never_delay_the_others() {
        let sink = Arc::new(MemorySink::default());
        let events = (0..20)
            .map(|i| event_in(if i % 2 == 0 { "dead" } else { "live" }, &format!("p{i}")))
            .collect();
        let start_at = Instant::now();
        let (registry, _tx, _guard) = start(sink.clone(), events);
        tokio::time::sleep(Duration::from_secs(60)).await;

        let written = sink.written.lock().unwrap().clone();
        assert_eq!(written.len(), 10, "every live event is written");
        for (ns, object, at) in &written {
            assert_eq!(ns, "live");
            assert_eq!(*at, start_at, "{object} waited behind the dead namespace");
        }
        let dead_attempts = sink
            .attempts
            .lock()
            .unwrap()
            .iter()
            .filter(|(ns, ..)| ns == "dead")
            .count();
        assert_eq!(dead_attempts, 10, "a 404 is final: one attempt per event");
        let text = crate::runtime::metrics::encode(&registry);
        assert!(text.contains("events_write_failures_total 10"), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_unreachable_server_is_retried_without_holding_up_the_events_behind() {
        let sink = Arc::new(MemorySink {
            unreachable: Mutex::new(2),
            ..MemorySink::default()
        });
        let events = vec![
            event_in("flaky", "f"),
            event_in("live", "a"),
            event_in("live", "b"),
        ];
        let start_at = Instant::now();
        let (registry, _tx, _guard) = start(sink.clone(), events);
        tokio::time::sleep(Duration::from_secs(60)).await;

        let written = sink.written.lock().unwrap().clone();
        let when = |object: &str| {
            written
                .iter()
                .find(|(_, o, _)| o == object)
                .map(|(.., at)| *at - start_at)
        };
        assert_eq!(when("a"), Some(Duration::ZERO));
        assert_eq!(when("b"), Some(Duration::ZERO));
        // Third attempt, after two pauses.
        assert_eq!(when("f"), Some(2 * WRITE_RETRY_PAUSE));
        let text = crate::runtime::metrics::encode(&registry);
        assert!(text.contains("events_write_failures_total 0"), "{text}");
    }

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
