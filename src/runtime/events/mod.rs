//! Kubernetes Events about any object, written in the background.
//!
//! Mirrors client-go `tools/record`: `event.go` (EventRecorder and
//! EventBroadcaster) and `events_cache.go` (EventCorrelator with its spam
//! filter and aggregation). Writes core/v1 Events, which is what
//! `kubectl describe` shows under "Events:". Chapter:
//! `docs/11-client-cache-recorder.md`.
//!
//! - [`EventRecorder::publish`] never blocks and never fails for its caller: a
//!   reconcile must not slow down or error because the Events API is slow.
//!   The spam filter (`spam.rs`: a token bucket per reporter, involved object
//!   and event type, burst 25, one token back every 300 s; Normal events
//!   never use up a Warning's tokens) drops what an object has had too much
//!   of (`tfjob_operator_events_dropped_total{reason="spam_filtered"}`);
//!   the rest goes on a bounded channel; when the channel is full the event
//!   is dropped and counted (`{reason="queue_full"}`), as client-go's
//!   `DropIfChannelFull` does. The filter runs before the channel, where
//!   client-go runs it after: see `spam.rs` for why.
//! - [`EventBroadcaster::run`] is the background task that writes them,
//!   after the work: while the work clients have requests out it keeps one
//!   write out, not eight, and catches up when they are quiet or an Event
//!   has waited a minute, as wide as the server keeps pace: one write while
//!   writes come back slow (`work_first.rs`, `server_pace.rs`). Before writing, the
//!   [`EventCorrelator`] decides:
//!   - aggregation: a repeat of an event already written (same object, type,
//!     reason and message) patches the existing Event's `count` and
//!     `lastTimestamp` instead of creating another object.
//! - [`EventRecorder::publish_counted`] records one event that stands for
//!   `count` occurrences (a controller that did the same thing to several
//!   objects in one pass, e.g. created a job's Pods): one write with that
//!   `count` instead of one write per occurrence, which is what the
//!   correlator's aggregation would leave after the fact, minus the writes
//!   (the TFJob controller uses it only under `--fold-create-events`);
//! - similar events: as client-go's `EventAggregator`, the tenth different
//!   message with the same reason about one object within ten minutes, and
//!   every one after it, goes into one Event whose message is the latest,
//!   prefixed "(combined from similar events): ".
//!
//! The caches are bounded (4096 entries, oldest-inserted evicted first, a
//! simpler policy than client-go's LRU). This module never panics on API errors: a failed write is
//! logged and counted, then forgotten.
//!
//! The recorder is here, the spam filter in `spam.rs`, the correlator in
//! `correlator.rs`, the writer (the
//! background task, up to [`WRITES_IN_FLIGHT`] objects' Events at a time) in
//! `writer.rs`, one Event's write in `sink.rs`.
mod bounded_map;
pub mod correlator;
pub mod server_pace;
pub mod sink;
pub mod spam;
pub mod work_first;
pub mod writer;

use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use tokio::sync::mpsc;

use crate::runtime::client::work_gauge::WorkGauge;
use crate::runtime::metrics::{Counter, CounterFamily, Family, SharedMetrics};

use sink::ApiEventSink;
use spam::SpamFilter;
use writer::EventBroadcaster;

/// Events the recorder's queue holds before it drops new ones: 16 times
/// client-go's 1,000. client-go's controllers create a job's children one
/// request at a time, so their Events come no faster than their creates;
/// ours creates them concurrently, and every create publishes an Event
/// (Kubeflow's, one per child). On a server saturated by the creates
/// themselves the writer falls behind until the creates are done (and, by
/// design, yields to them: `work_first.rs`), so applying a thousand jobs
/// at once leaves thousands of Events waiting: more than client-go's
/// queue holds (chapter 11 has what the scale bench measured). The queue
/// absorbs such a burst and the writer drains it after; a sustained
/// overload still drops, and counts, as client-go does.
/// The channel allocates as it fills (tokio's blocks of 32), so the room
/// costs nothing until used: at most ~8 MB of ~500-byte records.
pub const DEFAULT_QUEUE_CAPACITY: usize = 16 * 1024;

/// `Normal` or `Warning`, the two types core/v1 Events allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "Normal",
            Self::Warning => "Warning",
        }
    }
}

/// One event on its way to the API server.
#[derive(Clone, Debug)]
pub struct EventRecord {
    pub involved: ObjectReference,
    pub type_: EventType,
    pub reason: String,
    pub message: String,
    /// How many occurrences this record stands for (at least 1): the
    /// Event's `count` when created, added to it when aggregated.
    pub count: i32,
    /// Wall-clock time of `publish`, written as first/last timestamp.
    pub at: Timestamp,
    /// When it was published by tokio's clock: how long it has waited to
    /// be written (`work_first.rs` bounds that wait).
    pub published: tokio::time::Instant,
    /// Who reported it.
    pub source: Arc<EventSourceInfo>,
    /// Set by the correlator when this event stands for similar ones
    /// (its message then carries client-go's "combined" prefix).
    pub combined: bool,
}

/// The reporter of an event: `source.component`/`reportingComponent` and
/// `source.host`/`reportingInstance`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EventSourceInfo {
    pub component: String,
    pub instance: Option<String>,
}

impl EventRecord {
    fn display_object(&self) -> String {
        let r = &self.involved;
        format!(
            "{}/{}",
            r.kind.as_deref().unwrap_or("?"),
            match (&r.namespace, &r.name) {
                (Some(ns), Some(n)) => format!("{ns}/{n}"),
                (None, Some(n)) => n.clone(),
                _ => "?".to_owned(),
            }
        )
    }
}
/// Who writes the events.
#[derive(Clone, Debug)]
pub struct EventRecorderConfig {
    /// `source.component` and `reportingComponent`, e.g. `tfjob-controller`.
    pub component: String,
    /// `source.host` and `reportingInstance` (e.g. the Pod name).
    pub instance: Option<String>,
    /// Events buffered before new ones are dropped.
    pub queue_capacity: usize,
    /// The work clients' requests in flight, which the writer lets go
    /// first (`work_first.rs`); None: it never waits for them.
    pub yield_to: Option<WorkGauge>,
}

impl EventRecorderConfig {
    /// The given component, this host as instance, a queue of
    /// [`DEFAULT_QUEUE_CAPACITY`].
    pub fn new(component: impl Into<String>) -> Self {
        Self {
            component: component.into(),
            instance: std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()),
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            yield_to: None,
        }
    }
}

#[derive(Clone)]
struct EventMetrics {
    dropped: Arc<dyn CounterFamily>,
    failed: Arc<dyn Counter>,
}

impl EventMetrics {
    fn register(registry: &SharedMetrics) -> Self {
        Self {
            dropped: registry.counter(Family {
                name: "tfjob_operator_events_dropped",
                help: "Events not written, by reason (queue_full, spam_filtered)",
                labels: &["reason"],
            }),
            failed: registry
                .counter(Family {
                    name: "tfjob_operator_events_write_failures",
                    help: "Events that could not be written to the API server",
                    labels: &[],
                })
                .with(&[]),
        }
    }

    fn drop_for(&self, reason: &str) {
        self.dropped.with(&[reason]).inc();
    }
}

/// The handle controllers publish events with. Cheap to clone.
#[derive(Clone)]
pub struct EventRecorder {
    tx: mpsc::Sender<EventRecord>,
    source: Arc<EventSourceInfo>,
    /// Shared by every clone and component (each component has buckets of
    /// its own in it: the reporter is part of the key).
    spam: Arc<Mutex<SpamFilter>>,
    metrics: EventMetrics,
}

/// Makes a recorder and the broadcaster that must run for its events to be
/// written (the manager runs it; see `Manager::event_recorder`).
pub fn event_recorder(
    client: kube::Client,
    config: EventRecorderConfig,
    registry: &SharedMetrics,
) -> (EventRecorder, EventBroadcaster) {
    let (tx, rx) = mpsc::channel(config.queue_capacity.max(1));
    let metrics = EventMetrics::register(registry);
    let recorder = EventRecorder {
        tx,
        source: Arc::new(EventSourceInfo {
            component: config.component,
            instance: config.instance,
        }),
        spam: Arc::new(Mutex::new(SpamFilter::default())),
        metrics: metrics.clone(),
    };
    let mut broadcaster = EventBroadcaster::new(rx, Arc::new(ApiEventSink::new(client)), metrics);
    if let Some(work) = config.yield_to {
        broadcaster = broadcaster.yield_to(work);
    }
    (recorder, broadcaster)
}

impl EventRecorder {
    /// A recorder sharing this one's queue and writer but reporting as
    /// `component` (client-go: one broadcaster, a recorder per component).
    pub fn for_component(&self, component: impl Into<String>) -> Self {
        Self {
            tx: self.tx.clone(),
            source: Arc::new(EventSourceInfo {
                component: component.into(),
                instance: self.source.instance.clone(),
            }),
            spam: self.spam.clone(),
            metrics: self.metrics.clone(),
        }
    }

    /// Queues an event about `obj`. Never blocks; drops (and counts) the
    /// event when the spam filter refuses it, the queue is full or the
    /// writer has stopped.
    pub fn publish<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        message: impl Into<String>,
    ) {
        self.publish_counted(obj, type_, reason, message, 1);
    }

    /// [`publish`](Self::publish) of one event standing for `count`
    /// occurrences (written once, with that `count`).
    pub fn publish_counted<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        message: impl Into<String>,
        count: i32,
    ) {
        let record = EventRecord {
            involved: obj.object_ref(&()),
            type_,
            reason: reason.to_owned(),
            message: message.into(),
            count: count.max(1),
            at: Timestamp::now(),
            published: tokio::time::Instant::now(),
            source: self.source.clone(),
            combined: false,
        };
        let allowed = self
            .spam
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .allow(&record, tokio::time::Instant::now());
        if !allowed {
            self.metrics.drop_for("spam_filtered");
            return;
        }
        if self.tx.try_send(record).is_err() {
            self.metrics.drop_for("queue_full");
            tracing::debug!(reason, "event queue full; dropping event");
        }
    }

    /// [`publish`](Self::publish) with [`EventType::Normal`].
    pub fn normal<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        reason: &str,
        message: impl Into<String>,
    ) {
        self.publish(obj, EventType::Normal, reason, message);
    }

    /// [`publish`](Self::publish) with [`EventType::Warning`].
    pub fn warning<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        reason: &str,
        message: impl Into<String>,
    ) {
        self.publish(obj, EventType::Warning, reason, message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    pub(crate) fn event_about(name: &str, reason: &str, message: &str) -> EventRecord {
        EventRecord {
            involved: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some("ns".into()),
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
                ..ObjectReference::default()
            },
            type_: EventType::Normal,
            reason: reason.into(),
            message: message.into(),
            count: 1,
            at: Timestamp::UNIX_EPOCH,
            published: tokio::time::Instant::now(),
            source: Arc::new(EventSourceInfo {
                component: "tfjob-controller".into(),
                instance: Some("pod-1".into()),
            }),
            combined: false,
        }
    }

    fn dummy_client() -> kube::Client {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    /// A recorder with a queue of `capacity`, the registry its drops are
    /// counted in, and its writer, never run (kept, or the queue closes).
    fn recorder_with_queue(
        capacity: usize,
    ) -> (
        crate::runtime::metrics::SharedMetrics,
        EventRecorder,
        EventBroadcaster,
    ) {
        let registry = crate::runtime::metrics::testing::new_registry();
        let mut config = EventRecorderConfig::new("test");
        config.queue_capacity = capacity;
        let (recorder, broadcaster) = event_recorder(dummy_client(), config, &registry);
        (registry, recorder, broadcaster)
    }

    /// An object for events to be about.
    fn object(name: &str) -> k8s_openapi::api::core::v1::Pod {
        k8s_openapi::api::core::v1::Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn publishing_to_a_full_queue_drops_and_counts_without_blocking() {
        let (registry, recorder, _writer) = recorder_with_queue(1);
        let pod = object("p");
        recorder.normal(&pod, "A", "first fits");
        recorder.normal(&pod, "A", "second is dropped");
        recorder.warning(&pod, "A", "third is dropped");
        let text = crate::runtime::metrics::testing::encode(&registry);
        assert!(
            text.contains("tfjob_operator_events_dropped_total{reason=\"queue_full\"} 2"),
            "{text}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_about_one_object_is_spam_filtered_before_it_can_fill_the_queue() {
        // A big job's creation Events, all about its TFJob, published in one
        // pass: 600 into a queue of 100. The filter lets its burst (25) in
        // and drops the rest before the queue, so none is lost to a full
        // queue and other objects' events still find room.
        let (registry, recorder, _writer) = recorder_with_queue(100);
        let job = object("big");
        for child in 0..600 {
            recorder.normal(
                &job,
                "SuccessfulCreatePod",
                format!("Created pod: big-worker-{child}"),
            );
        }
        recorder.normal(
            &object("small"),
            "SuccessfulCreatePod",
            "Created pod: small-worker-0",
        );
        let text = crate::runtime::metrics::testing::encode(&registry);
        assert!(
            text.contains(r#"events_dropped_total{reason="spam_filtered"} 575"#),
            "{text}"
        );
        assert!(!text.contains(r#"reason="queue_full""#), "{text}");
    }

    #[tokio::test]
    async fn the_default_queue_holds_the_events_of_applying_a_thousand_jobs_at_once() {
        // 1,000 jobs × (4 Pods + 4 Services + TFJobSucceeded), published
        // while the writer is behind (here: not running at all).
        let (registry, recorder, _writer) = recorder_with_queue(DEFAULT_QUEUE_CAPACITY);
        for job in 0..1000 {
            let tfjob = object(&format!("job-{job}"));
            for child in 0..8 {
                recorder.normal(&tfjob, "SuccessfulCreatePod", format!("Created: {child}"));
            }
            recorder.normal(&tfjob, "TFJobSucceeded", "done");
        }
        let text = crate::runtime::metrics::testing::encode(&registry);
        assert!(!text.contains(r#"reason="queue_full""#), "{text}");
    }
}
